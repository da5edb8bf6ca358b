/* ibv_alloc_null_mr(3): "A null MR discards all data written to it, and always returns 0 on
 * read. It has the maximum length and only the lkey is valid, the MR is not exposed as an
 * rkey." Upon ibv_post_send the device sources zeros, upon ibv_post_recv it discards;
 * "The use of ibv_rereg_mr() or ibv_bind_mw() with this MR is invalid." Its lkey obeys
 * the usual rule of its PD (ibv_poll_cq(3): IBV_WC_LOC_PROT_ERR "if the Lkey does not
 * match"), and like any MR it keeps its PD busy (ibv_alloc_pd(3)). Prints "N failures". */
#include "common.h"

/* An address nothing is mapped at: a null MR never touches the memory an SGE names. */
#define NOWHERE ((uintptr_t)0x10)

static struct ibv_cq *cq;

static int all_bytes(const char *p, int c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] != (unsigned char)c)
			return 0;
	return 1;
}

/* Post one receive of `sges` on qp. */
static int post_recv(struct ibv_qp *qp, struct ibv_sge *sges, int n, uint64_t wr_id)
{
	struct ibv_recv_wr rwr = {.wr_id = wr_id, .sg_list = sges, .num_sge = n}, *bad;
	return ibv_post_recv(qp, &rwr, &bad);
}

/* Send `sges` from a and wait for both completions: whether both succeeded, and the
 * receive's byte_len in *len. */
static int send_and_receive(struct ibv_qp *a, struct ibv_sge *sges, int n, uint32_t *len)
{
	struct ibv_send_wr wr = {.wr_id = 10,
				 .sg_list = sges,
				 .num_sge = n,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc[2];
	if (ibv_post_send(a, &wr, &bad) || poll_n(cq, wc, 2) != 2)
		return 0;
	int ok = 1;
	for (int i = 0; i < 2; i++) {
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "wr %lu: %s\n", (unsigned long)wc[i].wr_id,
				ibv_wc_status_str(wc[i].status));
			ok = 0;
		}
		if (wc[i].opcode == IBV_WC_RECV)
			*len = wc[i].byte_len;
	}
	return ok;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other_pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(pd && other_pd && cq, "pd, cq");
	if (!pd || !other_pd || !cq)
		return 1;

	struct ibv_mr *null = ibv_alloc_null_mr(pd);
	CHECK(null != NULL, "ibv_alloc_null_mr: errno %d", errno);
	if (!null)
		return 1;
	CHECK(null->pd == pd && null->context == ctx, "of its PD and context");
	CHECK(null->length == SIZE_MAX, "the maximum length (%zu)", null->length);
	CHECK(null->rkey == 0, "not exposed as an rkey (rkey %#x)", null->rkey);
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "its PD is busy while it exists");

	char *host = aligned_alloc(4096, 4096);
	memset(host, 0, 4096);
	struct ibv_mr *hmr = ibv_reg_mr(pd, host, 4096,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						IBV_ACCESS_REMOTE_READ);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	CHECK(hmr && a && b, "region, QPs");
	if (!hmr || !a || !b)
		return 1;
	CHECK(connect_pair(ctx, a, b) == 0, "connect");

	/* Reads as zeros: a SEND gathered from it (at an address nothing is mapped at). */
	uint32_t len = 0;
	memset(host, 0xAB, 128);
	struct ibv_sge recv_into = {(uintptr_t)host, 128, hmr->lkey};
	struct ibv_sge from_null = {NOWHERE, 64, null->lkey};
	CHECK(post_recv(b, &recv_into, 1, 20) == 0, "post recv");
	CHECK(send_and_receive(a, &from_null, 1, &len) && len == 64 && all_bytes(host, 0, 64) &&
		      all_bytes(host + 64, 0xAB, 64),
	      "a SEND of 64 bytes from the null MR delivers 64 zero bytes (len %u)", len);

	/* Mixed with a real region: the null entry contributes zeros in its place. */
	memset(host, 0xAB, 128);
	memcpy(host + 256, "realdata", 8);
	struct ibv_sge mixed[2] = {{(uintptr_t)host + 256, 8, hmr->lkey}, {NOWHERE, 8, null->lkey}};
	CHECK(post_recv(b, &recv_into, 1, 21) == 0, "post recv");
	CHECK(send_and_receive(a, mixed, 2, &len) && len == 16 && memcmp(host, "realdata", 8) == 0 &&
		      all_bytes(host + 8, 0, 8) && all_bytes(host + 16, 0xAB, 8),
	      "a SEND of a real and a null entry: the data, then zeros (len %u)", len);

	/* Discards what is written: a receive into it completes, and one that starts in it
	 * places the rest of the message where its next entry says. */
	memcpy(host + 512, "0123456789abcdefghijklmn", 24);
	struct ibv_sge send_real = {(uintptr_t)host + 512, 24, hmr->lkey};
	struct ibv_sge into_null = {NOWHERE, 64, null->lkey};
	CHECK(post_recv(b, &into_null, 1, 22) == 0, "post recv into the null MR");
	CHECK(send_and_receive(a, &send_real, 1, &len) && len == 24,
	      "a receive into the null MR completes with the message's length (len %u)", len);
	memset(host, 0xAB, 128);
	struct ibv_sge split[2] = {{NOWHERE, 8, null->lkey}, {(uintptr_t)host, 16, hmr->lkey}};
	CHECK(post_recv(b, split, 2, 23) == 0, "post recv: null entry, then a real one");
	CHECK(send_and_receive(a, &send_real, 1, &len) && len == 24 &&
		      memcmp(host, "89abcdefghijklmn", 16) == 0 && all_bytes(host + 16, 0xAB, 8),
	      "the first 8 bytes discarded, the next 16 placed (len %u)", len);

	/* RDMA: WRITE gathered from it writes zeros at the peer; READ into it discards. */
	memset(host + 1024, 0xAB, 32);
	struct ibv_send_wr wr = {.wr_id = 30,
				 .sg_list = &from_null,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	from_null.length = 16;
	wr.wr.rdma.remote_addr = (uintptr_t)host + 1024;
	wr.wr.rdma.rkey = hmr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && all_bytes(host + 1024, 0, 16) &&
		      all_bytes(host + 1040, 0xAB, 16),
	      "an RDMA WRITE from the null MR writes 16 zero bytes");
	memset(host + 2048, 0x5A, 16);
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr_id = 31;
	wr.sg_list = &into_null;
	into_null.length = 16;
	wr.wr.rdma.remote_addr = (uintptr_t)host + 2048;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS), "an RDMA READ into the null MR completes");

	/* Only the lkey is valid: a peer naming it as an rkey is refused. */
	struct ibv_sge sge = {(uintptr_t)host + 512, 8, hmr->lkey};
	wr.sg_list = &sge;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr_id = 32;
	wr.wr.rdma.remote_addr = 0x1000;
	wr.wr.rdma.rkey = null->lkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_REM_ACCESS_ERR),
	      "an RDMA WRITE with the null MR's key as rkey: IBV_WC_REM_ACCESS_ERR");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);

	/* Its lkey belongs to its PD: another PD's QP gathering with it fails locally. */
	struct ibv_mr *foreign = ibv_alloc_null_mr(other_pd);
	a = rc_qp(pd, cq, NULL);
	b = rc_qp(pd, cq, NULL);
	CHECK(foreign && a && b, "a null MR of another PD, new QPs");
	if (!foreign || !a || !b)
		return 1;
	CHECK(connect_pair(ctx, a, b) == 0, "connect");
	struct ibv_sge from_foreign = {NOWHERE, 8, foreign->lkey};
	wr.sg_list = &from_foreign;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr_id = 33;
	wr.wr.rdma.remote_addr = (uintptr_t)host;
	wr.wr.rdma.rkey = hmr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_LOC_PROT_ERR),
	      "another PD's null MR in a gather list: IBV_WC_LOC_PROT_ERR");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);

	/* The use the page names: a UD receive whose 40-byte GRH area nobody wants lands its
	 * GRH in the null MR and the datagram in the next entry. */
	struct ibv_qp *u[2];
	if (ud_pair(pd, cq, 2, u)) {
		CHECK(0, "two UD QPs in RTS: errno %d", errno);
		return 1;
	}
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid");
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "create_ah: errno %d", errno);
	if (!ah)
		return 1;
	memset(host, 0xAB, 128);
	memcpy(host + 512, "datagram", 8);
	struct ibv_sge grh_to_null[2] = {{NOWHERE, 40, null->lkey}, {(uintptr_t)host, 64, hmr->lkey}};
	struct ibv_recv_wr urw = {.wr_id = 50, .sg_list = grh_to_null, .num_sge = 2}, *urbad;
	struct ibv_sge usge = {(uintptr_t)host + 512, 8, hmr->lkey};
	struct ibv_send_wr uwr = {.wr_id = 51,
				  .sg_list = &usge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *ubad;
	uwr.wr.ud.ah = ah;
	uwr.wr.ud.remote_qpn = u[1]->qp_num;
	uwr.wr.ud.remote_qkey = 0x1234;
	struct ibv_wc uwc[2];
	CHECK(ibv_post_recv(u[1], &urw, &urbad) == 0 && ibv_post_send(u[0], &uwr, &ubad) == 0,
	      "UD post");
	int ugot = poll_n(cq, uwc, 2);
	int ur = ugot == 2 && uwc[1].wr_id == 50 ? 1 : 0;
	CHECK(ugot == 2 && uwc[ur].wr_id == 50 && uwc[ur].status == IBV_WC_SUCCESS &&
		      uwc[ur].byte_len == 40 + 8 && memcmp(host, "datagram", 8) == 0 &&
		      all_bytes(host + 8, 0xAB, 56),
	      "the GRH discarded, the datagram in the real entry (len %u)", uwc[ur].byte_len);
	CHECK(ibv_destroy_qp(u[0]) == 0 && ibv_destroy_qp(u[1]) == 0 && ibv_destroy_ah(ah) == 0,
	      "UD teardown");

	/* Invalid with ibv_rereg_mr and ibv_bind_mw. */
	CHECK(ibv_rereg_mr(null, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) != 0,
	      "ibv_rereg_mr of a null MR fails");
	a = rc_qp(pd, cq, NULL);
	b = rc_qp(pd, cq, NULL);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(a && b && mw, "QPs and a type 1 window");
	if (!a || !b || !mw)
		return 1;
	CHECK(connect_pair(ctx, a, b) == 0, "connect");
	struct ibv_mw_bind bind = {.wr_id = 40, .send_flags = IBV_SEND_SIGNALED};
	bind.bind_info.mr = null;
	bind.bind_info.addr = 0;
	bind.bind_info.length = 64;
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	int rc = ibv_bind_mw(a, mw, &bind);
	struct ibv_wc wc = {0};
	CHECK(rc != 0 || (poll_n(cq, &wc, 1) == 1 && wc.status == IBV_WC_MW_BIND_ERR),
	      "binding a window to a null MR fails (returned %d, completion %s)", rc,
	      ibv_wc_status_str(wc.status));
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc the window");

	CHECK(ibv_dereg_mr(null) == 0 && ibv_dereg_mr(foreign) == 0, "ibv_dereg_mr of null MRs");
	CHECK(ibv_dereg_mr(hmr) == 0 && ibv_destroy_cq(cq) == 0, "teardown");
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_dealloc_pd(other_pd) == 0,
	      "the PDs are free once their null MRs are gone");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
