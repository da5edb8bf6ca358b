/* Tag matching through the drop-in, rule by rule from rdma-core 44's man pages
 * (ibv_query_device_ex(3), ibv_create_cq_ex(3), ibv_create_srq_ex(3), ibv_post_srq_ops(3))
 * and <infiniband/tm_types.h>:
 *  - ibv_query_device_ex(3): tm_caps says tag matching is there: IBV_TM_CAP_RC, a tag list
 *    (max_num_tags), operations (max_ops), SGEs (max_sge) and room for a rendezvous header
 *    (max_rndv_hdr_size holds a TMH and an RVH).
 *  - ibv_create_cq_ex(3): IBV_WC_EX_WITH_TM_INFO is accepted; ibv_wc_read_tm_info reads it.
 *  - ibv_create_srq_ex(3): IBV_SRQT_TM needs its CQ (IBV_SRQ_INIT_ATTR_CQ) and tm_cap
 *    (IBV_SRQ_INIT_ATTR_TM), else EINVAL; max_num_tags above tm_caps is EINVAL.
 *  - ibv_post_srq_ops(3): on an SRQ that is not a tag matching SRQ, EINVAL with bad_op the
 *    operation; IBV_WR_TAG_ADD returns a handle per tag; the list is limited by
 *    max_num_tags (ENOMEM, bad_op the first refused); IBV_WR_TAG_DEL of a handle never
 *    returned is EINVAL; IBV_WR_TAG_DEL completes IBV_WC_TM_DEL, and IBV_WC_TM_ERR for a
 *    tag already gone; only IBV_OPS_SIGNALED operations complete, on the SRQ's CQ, with
 *    their wr_id; IBV_WR_TAG_SYNC completes IBV_WC_TM_SYNC.
 *  - EAGER whose TMH.tag & mask == tag: the data after the TMH lands in the tag's buffer,
 *    IBV_WC_TM_RECV with IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, the tag's recv_wr_id and
 *    tm_info {tag, priv = app_ctx}.
 *  - Unexpected (no tag matches): the whole message lands in an ordinary SRQ receive,
 *    IBV_WC_TM_RECV without TM flags; list operations then complete with
 *    IBV_WC_TM_SYNC_REQ (and no message matches) until an IBV_OPS_TM_SYNC operation
 *    reports the unexpected messages handled.
 *  - NO_TAG: an ordinary receive, header included, IBV_WC_TM_NO_TAG.
 *  - RNDV: IBV_WC_TM_RECV with IBV_WC_TM_MATCH, then the device reads rvh.len bytes at
 *    (rvh.va, rvh.rkey) into the tag's buffer and completes IBV_WC_TM_DATA_VALID; the sender
 *    receives a FIN (TMH opcode IBV_TMH_FIN with the tag) after its SEND completed. A
 *    RNDV request of several packets (an application header past the path MTU) is served
 *    the same way: its headers are in its first packet.
 * Prints "N failures". */
#include "common.h"
#include <endian.h>
#include <infiniband/tm_types.h>

struct ex {
	int status;
	uint64_t wr_id;
	int opcode;
	unsigned flags;
	uint32_t byte_len;
	struct ibv_wc_tm_info tm;
};

/* The next completion of an extended CQ (at most 10 s): 1, or 0 on timeout. */
static int poll_ex(struct ibv_cq_ex *cq, struct ex *e)
{
	struct ibv_poll_cq_attr pa = {0};
	long end = now_ms() + 10000;
	int ret;
	while ((ret = ibv_start_poll(cq, &pa)) == ENOENT && now_ms() < end)
		;
	if (ret)
		return 0;
	memset(e, 0, sizeof(*e));
	e->status = cq->status;
	e->wr_id = cq->wr_id;
	e->opcode = ibv_wc_read_opcode(cq);
	e->flags = ibv_wc_read_wc_flags(cq);
	e->byte_len = ibv_wc_read_byte_len(cq);
	ibv_wc_read_tm_info(cq, &e->tm);
	ibv_end_poll(cq);
	return 1;
}

static int ops(struct ibv_srq *srq, struct ibv_ops_wr *wr, struct ibv_ops_wr **bad)
{
	*bad = NULL;
	return ibv_post_srq_ops(srq, wr, bad);
}

static struct ibv_ops_wr add_op(uint64_t id, uint64_t tag, uint64_t mask, struct ibv_sge *sge)
{
	struct ibv_ops_wr w = {.wr_id = id, .opcode = IBV_WR_TAG_ADD, .flags = IBV_OPS_SIGNALED};
	w.tm.add.recv_wr_id = id;
	w.tm.add.sg_list = sge;
	w.tm.add.num_sge = 1;
	w.tm.add.tag = tag;
	w.tm.add.mask = mask;
	return w;
}

static void put_tmh(char *p, uint8_t op, uint64_t tag, uint32_t app_ctx)
{
	struct ibv_tmh h = {.opcode = op, .app_ctx = htobe32(app_ctx), .tag = htobe64(tag)};
	memcpy(p, &h, sizeof(h));
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	union ibv_gid gid;
	struct ibv_ops_wr *bad;
	struct ex e;
	struct ibv_wc wc[2];

	/* ibv_query_device_ex(3): tm_caps. */
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	struct ibv_tm_caps caps = ax.tm_caps;
	CHECK(caps.flags & IBV_TM_CAP_RC, "IBV_TM_CAP_RC");
	CHECK(caps.max_num_tags > 0 && caps.max_ops > 0 && caps.max_sge > 0,
	      "tags %u ops %u sge %u", caps.max_num_tags, caps.max_ops, caps.max_sge);
	CHECK(caps.max_rndv_hdr_size >= sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh),
	      "max_rndv_hdr_size %u", caps.max_rndv_hdr_size);

	/* ibv_create_cq_ex(3): IBV_WC_EX_WITH_TM_INFO. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 64,
					 .wc_flags = IBV_WC_STANDARD_FLAGS |
						     IBV_WC_EX_WITH_TM_INFO};
	struct ibv_cq_ex *scq = ibv_create_cq_ex(ctx, &ca);
	CHECK(scq != NULL, "create_cq_ex with IBV_WC_EX_WITH_TM_INFO: errno %d", errno);
	struct ibv_cq *ccq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 1 << 16);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 1 << 16,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_WRITE);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 && ccq && pd && mr, "setup: errno %d", errno);
	if (!scq || !ccq || !pd || !mr)
		return 1;

	/* ibv_create_srq_ex(3): IBV_SRQT_TM. */
	struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 16, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
						       IBV_SRQ_INIT_ATTR_PD,
					  .srq_type = IBV_SRQT_TM,
					  .pd = pd,
					  .cq = ibv_cq_ex_to_cq(scq),
					  .tm_cap = {.max_num_tags = 2, .max_ops = 8}};
	errno = 0;
	CHECK(ibv_create_srq_ex(ctx, &sa) == NULL && errno == EINVAL,
	      "TM SRQ without CQ and tm_cap: EINVAL (%d)", errno);
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	sa.tm_cap.max_num_tags = caps.max_num_tags + 1;
	errno = 0;
	CHECK(ibv_create_srq_ex(ctx, &sa) == NULL && errno == EINVAL,
	      "max_num_tags above tm_caps: EINVAL (%d)", errno);
	sa.tm_cap.max_num_tags = 2;
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq != NULL, "create TM SRQ: errno %d", errno);
	struct ibv_srq_init_attr ba = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *basic = ibv_create_srq(pd, &ba);
	if (!srq || !basic)
		return 1;

	/* ibv_post_srq_ops(3) on a basic SRQ. */
	struct ibv_ops_wr sync = {.wr_id = 27, .opcode = IBV_WR_TAG_SYNC, .flags = IBV_OPS_SIGNALED};
	CHECK(ops(basic, &sync, &bad) == EINVAL && bad == &sync, "ops on a basic SRQ: EINVAL");

	struct ibv_qp *cqp = rc_qp(pd, ccq, NULL);
	struct ibv_qp *sqp = rc_qp(pd, ibv_cq_ex_to_cq(scq), srq);
	CHECK(cqp && sqp && connect_rc(cqp, sqp->qp_num, gid, 0) == 0 &&
		      connect_rc(sqp, cqp->qp_num, gid, 0) == 0,
	      "connect: errno %d", errno);
	if (!cqp || !sqp)
		return 1;

	/* The tag list: handles, its size, unsignaled operations, DEL. */
	struct ibv_sge t1 = {(uintptr_t)(buf + 8192), 1024, mr->lkey};
	struct ibv_sge t2 = {(uintptr_t)(buf + 9216), 1024, mr->lkey};
	struct ibv_ops_wr a[3] = {add_op(1, 0x34, 0xff, &t1), add_op(2, 0x99, ~0ULL, &t2),
				  add_op(3, 0x77, ~0ULL, &t2)};
	a[0].flags = 0;
	a[0].next = &a[1];
	a[1].next = &a[2];
	CHECK(ops(srq, a, &bad) == ENOMEM && bad == &a[2],
	      "a third tag of max_num_tags 2: ENOMEM, bad_op the third");
	CHECK(a[0].tm.handle != a[1].tm.handle, "distinct handles");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_ADD && e.wr_id == 2 && e.flags == 0,
	      "only the signaled ADD completes: IBV_WC_TM_ADD wr_id %llu",
	      (unsigned long long)e.wr_id);
	struct ibv_ops_wr del = {.wr_id = 5, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED};
	del.tm.handle = 1000;
	CHECK(ops(srq, &del, &bad) == EINVAL && bad == &del, "DEL of a never returned handle: EINVAL");
	del.tm.handle = a[1].tm.handle;
	CHECK(ops(srq, &del, &bad) == 0 && poll_ex(scq, &e) && e.opcode == IBV_WC_TM_DEL &&
		      e.status == IBV_WC_SUCCESS && e.wr_id == 5,
	      "DEL: IBV_WC_TM_DEL");
	CHECK(ops(srq, &del, &bad) == 0 && poll_ex(scq, &e) && e.opcode == IBV_WC_TM_DEL &&
		      e.status == IBV_WC_TM_ERR,
	      "DEL of a tag gone: IBV_WC_TM_ERR (%s)", ibv_wc_status_str(e.status));

	/* EAGER matching tag 0x34 under mask 0xff. */
	struct ibv_send_wr *sbad;
	struct ibv_sge ss = {(uintptr_t)buf, 0, mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 50, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	put_tmh(buf, IBV_TMH_EAGER, 0x5634, 0xabc);
	memcpy(buf + 16, "tagged data", 11);
	ss.length = 27;
	CHECK(ibv_post_send(cqp, &swr, &sbad) == 0 && poll_n(ccq, wc, 1) == 1 &&
		      wc[0].status == IBV_WC_SUCCESS,
	      "EAGER send");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 1 &&
		      e.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && e.byte_len == 11,
	      "EAGER: IBV_WC_TM_RECV MATCH|DATA_VALID (op %d flags %#x len %u)", e.opcode,
	      e.flags, e.byte_len);
	CHECK(e.tm.tag == 0x5634 && e.tm.priv == 0xabc, "tm_info tag %#llx priv %#x",
	      (unsigned long long)e.tm.tag, e.tm.priv);
	CHECK(memcmp(buf + 8192, "tagged data", 11) == 0, "the data without its TMH");

	/* Unexpected, then SYNC_REQ until IBV_OPS_TM_SYNC. */
	struct ibv_sge rs = {(uintptr_t)(buf + 16384), 1024, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 60, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "post_srq_recv");
	put_tmh(buf, IBV_TMH_EAGER, 0x1234, 0);
	CHECK(ibv_post_send(cqp, &swr, &sbad) == 0 && poll_n(ccq, wc, 1) == 1, "unexpected send");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 60 && e.flags == 0 &&
		      e.byte_len == 27 && e.tm.tag == 0,
	      "unexpected: IBV_WC_TM_RECV, no flags (flags %#x)", e.flags);
	CHECK(memcmp(buf + 16384, buf, 27) == 0, "the whole message, TMH included");
	struct ibv_ops_wr a3 = add_op(3, 0x77, ~0ULL, &t2);
	CHECK(ops(srq, &a3, &bad) == 0 && poll_ex(scq, &e) && e.opcode == IBV_WC_TM_ADD &&
		      (e.flags & IBV_WC_TM_SYNC_REQ),
	      "ADD while unsynchronised: IBV_WC_TM_SYNC_REQ (%#x)", e.flags);
	sync.flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
	sync.tm.unexpected_cnt = 1;
	CHECK(ops(srq, &sync, &bad) == 0 && poll_ex(scq, &e) && e.opcode == IBV_WC_TM_SYNC &&
		      e.wr_id == 27 && e.flags == 0,
	      "SYNC: IBV_WC_TM_SYNC without SYNC_REQ (%#x)", e.flags);

	/* NO_TAG. */
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "post_srq_recv");
	put_tmh(buf, IBV_TMH_NO_TAG, 0, 0);
	CHECK(ibv_post_send(cqp, &swr, &sbad) == 0 && poll_n(ccq, wc, 1) == 1, "NO_TAG send");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_NO_TAG && e.wr_id == 60 && e.flags == 0 &&
		      e.byte_len == 27,
	      "NO_TAG: IBV_WC_TM_NO_TAG (op %d)", e.opcode);

	/* RNDV against tag 0x77: MATCH, the device's READ, DATA_VALID, FIN. */
	struct ibv_sge fs = {(uintptr_t)(buf + 4096), 64, mr->lkey};
	struct ibv_recv_wr fwr = {.wr_id = 70, .sg_list = &fs, .num_sge = 1};
	CHECK(ibv_post_recv(cqp, &fwr, &rbad) == 0, "post_recv for the FIN");
	for (int i = 0; i < 1000; i++)
		buf[24576 + i] = (char)(i * 7);
	put_tmh(buf, IBV_TMH_RNDV, 0x77, 9);
	struct ibv_rvh rvh = {.va = htobe64((uintptr_t)(buf + 24576)),
			      .rkey = htobe32(mr->rkey),
			      .len = htobe32(1000)};
	memcpy(buf + 16, &rvh, sizeof(rvh));
	ss.length = 32;
	CHECK(ibv_post_send(cqp, &swr, &sbad) == 0, "RNDV send");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 3 &&
		      e.flags == IBV_WC_TM_MATCH && e.tm.tag == 0x77 && e.tm.priv == 9,
	      "RNDV: IBV_WC_TM_RECV with IBV_WC_TM_MATCH (flags %#x)", e.flags);
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 3 &&
		      e.flags == IBV_WC_TM_DATA_VALID && e.byte_len == 1000,
	      "RNDV: then IBV_WC_TM_DATA_VALID (flags %#x len %u)", e.flags, e.byte_len);
	CHECK(memcmp(buf + 9216, buf + 24576, 1000) == 0, "the READ filled the tag's buffer");
	CHECK(poll_n(ccq, wc, 2) == 2 && wc[0].opcode == IBV_WC_SEND && wc[1].opcode == IBV_WC_RECV &&
		      wc[1].wr_id == 70 && wc[1].byte_len == sizeof(struct ibv_tmh),
	      "the sender: its SEND, then the FIN");
	struct ibv_tmh fin;
	memcpy(&fin, buf + 4096, sizeof(fin));
	CHECK(fin.opcode == IBV_TMH_FIN && be64toh(fin.tag) == 0x77, "FIN opcode %d tag %#llx",
	      fin.opcode, (unsigned long long)be64toh(fin.tag));

	/* A RNDV request longer than the path MTU (1024 here): TMH, RVH and a 2000-byte
	 * application header, three packets. Its headers in the first packet match tag 0x78 as
	 * a one-packet request would (not unexpected): MATCH, the READ, DATA_VALID, FIN. */
	struct ibv_sge t3 = {(uintptr_t)(buf + 10240), 1024, mr->lkey};
	struct ibv_ops_wr a4 = add_op(4, 0x78, ~0ULL, &t3);
	CHECK(ops(srq, &a4, &bad) == 0 && poll_ex(scq, &e) && e.opcode == IBV_WC_TM_ADD &&
		      e.flags == 0,
	      "ADD tag 0x78 (flags %#x)", e.flags);
	memset(buf + 4096, 0, sizeof(fin));
	CHECK(ibv_post_recv(cqp, &fwr, &rbad) == 0, "post_recv for the second FIN");
	for (int i = 0; i < 1000; i++)
		buf[24576 + i] = (char)(i * 13 + 1);
	put_tmh(buf, IBV_TMH_RNDV, 0x78, 10);
	memcpy(buf + 16, &rvh, sizeof(rvh));
	memset(buf + 32, 'h', 2000);
	ss.length = 2032;
	CHECK(ibv_post_send(cqp, &swr, &sbad) == 0, "RNDV send of three packets");
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 4 &&
		      e.flags == IBV_WC_TM_MATCH && e.tm.tag == 0x78 && e.tm.priv == 10,
	      "long RNDV: IBV_WC_TM_RECV with IBV_WC_TM_MATCH (wr_id %llu flags %#x)",
	      (unsigned long long)e.wr_id, e.flags);
	CHECK(poll_ex(scq, &e) && e.opcode == IBV_WC_TM_RECV && e.wr_id == 4 &&
		      e.flags == IBV_WC_TM_DATA_VALID && e.byte_len == 1000,
	      "long RNDV: then IBV_WC_TM_DATA_VALID (flags %#x len %u)", e.flags, e.byte_len);
	CHECK(memcmp(buf + 10240, buf + 24576, 1000) == 0, "the READ filled tag 0x78's buffer");
	CHECK(poll_n(ccq, wc, 2) == 2 && wc[0].opcode == IBV_WC_SEND &&
		      wc[0].status == IBV_WC_SUCCESS && wc[1].opcode == IBV_WC_RECV &&
		      wc[1].wr_id == 70,
	      "the sender: its long SEND, then the FIN");
	memcpy(&fin, buf + 4096, sizeof(fin));
	CHECK(fin.opcode == IBV_TMH_FIN && be64toh(fin.tag) == 0x78, "FIN opcode %d tag %#llx",
	      fin.opcode, (unsigned long long)be64toh(fin.tag));

	CHECK(ibv_destroy_qp(sqp) == 0 && ibv_destroy_qp(cqp) == 0, "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_srq(basic) == 0, "destroy SRQs");
	ibv_dereg_mr(mr);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) == 0, "destroy the TM SRQ's CQ");
	ibv_destroy_cq(ccq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("%d failures\n", failures);
	return failures != 0;
}
