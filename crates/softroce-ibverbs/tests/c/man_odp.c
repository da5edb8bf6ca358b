/* On-demand paging, rule by rule: ibv_query_device_ex(3) (odp_caps), ibv_reg_mr(3)
 * (IBV_ACCESS_ON_DEMAND, and "to create an implicit ODP MR, IBV_ACCESS_ON_DEMAND should be
 * set, addr should be 0 and length should be SIZE_MAX"), ibv_advise_mr(3) (advice, flags,
 * and each errno it lists). The device offers explicit and implicit ODP for every transport
 * operation; a page that is not mapped when accessed fails the work request (as a failed
 * ODP page fault does), not the process. Prints "N failures". */
#include <sys/mman.h>

#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");

	/* ibv_query_device_ex(3): what ODP covers. */
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	struct ibv_odp_caps *o = &ax.odp_caps;
	CHECK(o->general_caps & IBV_ODP_SUPPORT, "IBV_ODP_SUPPORT: %#lx",
	      (unsigned long)o->general_caps);
	CHECK(o->general_caps & IBV_ODP_SUPPORT_IMPLICIT, "IBV_ODP_SUPPORT_IMPLICIT");
	uint32_t rc_all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			  IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	CHECK((o->per_transport_caps.rc_odp_caps & rc_all) == rc_all, "rc caps %#x",
	      o->per_transport_caps.rc_odp_caps);
	CHECK(o->per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND, "ud caps");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd");
	if (!pd)
		return 1;
	/* ibv_reg_mr(3): an on-demand paging region. */
	static uint64_t odp_buf[512], plain_buf[64];
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;
	struct ibv_mr *odp = ibv_reg_mr(pd, odp_buf, sizeof(odp_buf), acc);
	struct ibv_mr *plain = ibv_reg_mr(pd, plain_buf, sizeof(plain_buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *ro_odp = ibv_reg_mr(pd, plain_buf, sizeof(plain_buf), IBV_ACCESS_ON_DEMAND);
	CHECK(odp && plain && ro_odp, "reg_mr with IBV_ACCESS_ON_DEMAND: errno %d", errno);
	if (!odp || !plain || !ro_odp)
		return 1;
	/* Implicit ODP: one region over the whole address space. */
	struct ibv_mr *all = ibv_reg_mr(pd, NULL, SIZE_MAX, acc);
	CHECK(all != NULL, "implicit ODP region: errno %d", errno);
	if (!all)
		return 1;
	CHECK(all->addr == NULL && all->length == SIZE_MAX, "implicit region %p+%zu", all->addr,
	      all->length);
	/* It covers every address, so it cannot be zero-based. */
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, SIZE_MAX, acc | IBV_ACCESS_ZERO_BASED) == NULL &&
		      errno == EINVAL,
	      "zero-based implicit region: errno %d", errno);

	/* ODP regions carry every RC operation: an atomic and a READ between two QPs, both
	 * ends in ODP memory. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	CHECK(a && b, "create_qp");
	if (!a || !b)
		return 1;
	struct ibv_qp_attr at = {.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_WRITE};
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	CHECK(ibv_modify_qp(b, &at, IBV_QP_ACCESS_FLAGS) == 0, "atomic rights on b");
	odp_buf[100] = 40;
	struct ibv_sge s = {.addr = (uintptr_t)&odp_buf[0], .length = 8, .lkey = odp->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.atomic.remote_addr = (uintptr_t)&odp_buf[100];
	wr.wr.atomic.rkey = odp->rkey;
	wr.wr.atomic.compare_add = 2;
	struct ibv_wc wc;
	CHECK(ibv_post_send(a, &wr, &bad) == 0 && poll_n(cq, &wc, 1) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "fetch-and-add in ODP memory: status %d", wc.status);
	CHECK(odp_buf[0] == 40 && odp_buf[100] == 42, "atomic result %lu %lu",
	      (unsigned long)odp_buf[0], (unsigned long)odp_buf[100]);
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)&odp_buf[100];
	wr.wr.rdma.rkey = odp->rkey;
	s.addr = (uintptr_t)&odp_buf[1];
	CHECK(ibv_post_send(a, &wr, &bad) == 0 && poll_n(cq, &wc, 1) == 1 &&
		      wc.status == IBV_WC_SUCCESS && odp_buf[1] == 42,
	      "READ between ODP regions: status %d", wc.status);

	/* Through the implicit region: memory never registered by itself — a fresh heap buffer,
	 * a page mapped after the registration — is read and written with its keys. */
	uint64_t *heap = calloc(64, sizeof(uint64_t));
	uint64_t *late = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(heap && late != MAP_FAILED, "memory");
	heap[0] = 0x1122334455667788ull;
	struct ibv_sge hs = {.addr = (uintptr_t)heap, .length = 8, .lkey = all->lkey};
	struct ibv_send_wr iw = {.wr_id = 2, .sg_list = &hs, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	iw.wr.rdma.remote_addr = (uintptr_t)&late[7];
	iw.wr.rdma.rkey = all->rkey;
	CHECK(ibv_post_send(a, &iw, &bad) == 0 && poll_n(cq, &wc, 1) == 1 &&
		      wc.status == IBV_WC_SUCCESS && late[7] == 0x1122334455667788ull,
	      "WRITE heap -> late page through the implicit region: status %d", wc.status);
	iw.opcode = IBV_WR_RDMA_READ;
	hs.addr = (uintptr_t)&heap[1];
	CHECK(ibv_post_send(a, &iw, &bad) == 0 && poll_n(cq, &wc, 1) == 1 &&
		      wc.status == IBV_WC_SUCCESS && heap[1] == 0x1122334455667788ull,
	      "READ late page -> heap through the implicit region: status %d", wc.status);
	struct ibv_sge ipf = {.addr = (uintptr_t)late, .length = 4096, .lkey = all->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ipf,
			    1) == 0,
	      "prefetch through the implicit region");

	/* ibv_advise_mr(3): a prefetch of ODP ranges succeeds, synchronous or not. */
	struct ibv_sge pf = {.addr = (uintptr_t)odp_buf, .length = 4096, .lkey = odp->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &pf,
			    1) == 0,
	      "sync PREFETCH_WRITE");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pf, 1) == 0, "async PREFETCH");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &pf, 1) == 0,
	      "PREFETCH_NO_FAULT");
	/* EINVAL: the flags are invalid; an lkey of a region that is not ODP. */
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1 << 4, &pf, 1) == EINVAL,
	      "bad flags");
	struct ibv_sge np = {.addr = (uintptr_t)plain_buf, .length = 64, .lkey = plain->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &np, 1) == EINVAL,
	      "prefetch of a region without IBV_ACCESS_ON_DEMAND");
	/* ENOTSUP: an advice that does not exist. */
	CHECK(ibv_advise_mr(pd, (enum ibv_advise_mr_advice)9, 0, &pf, 1) == ENOTSUP,
	      "unknown advice");
	/* EFAULT: a range out of the region's bounds; an invalid lkey. */
	struct ibv_sge oob = {.addr = (uintptr_t)odp_buf, .length = 8192, .lkey = odp->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &oob, 1) == EFAULT,
	      "range past the region");
	struct ibv_sge bk = {.addr = (uintptr_t)odp_buf, .length = 8, .lkey = odp->lkey ^ 0x5a00};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bk, 1) == EFAULT, "bad lkey");
	/* EPERM: PREFETCH_WRITE of a region not registered writable; a region of another PD. */
	struct ibv_sge ro = {.addr = (uintptr_t)plain_buf, .length = 64, .lkey = ro_odp->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &ro, 1) == EPERM,
	      "PREFETCH_WRITE of a read-only region");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pf, 1) == EPERM,
	      "a region of another PD");

	/* A page that is not mapped when the device touches it: the page fault fails, so does
	 * the work request — the peer's WRITE gets a remote access error — and the process
	 * lives on. */
	CHECK(munmap(late, 4096) == 0, "munmap");
	hs.addr = (uintptr_t)heap;
	iw.opcode = IBV_WR_RDMA_WRITE;
	CHECK(ibv_post_send(a, &iw, &bad) == 0 && poll_n(cq, &wc, 1) == 1 &&
		      wc.status == IBV_WC_REM_ACCESS_ERR,
	      "WRITE into an unmapped page of the implicit region: status %d", wc.status);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	free(heap);
	CHECK(ibv_dereg_mr(odp) == 0 && ibv_dereg_mr(plain) == 0 && ibv_dereg_mr(ro_odp) == 0 &&
		      ibv_dereg_mr(all) == 0,
	      "dereg_mr");
	ibv_dealloc_pd(pd2);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures != 0;
}
