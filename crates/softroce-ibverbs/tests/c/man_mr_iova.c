/* ibv_reg_mr(3): IBV_ACCESS_ZERO_BASED ("use byte offset from beginning of MR to access
 * this MR, instead of a pointer address") and ibv_reg_mr_iova ("the offset in the memory
 * region is computed as 'addr + (iova - hca_va)'; specifying 0 for hca_va has the same
 * effect as IBV_ACCESS_ZERO_BASED"), for lkeys (ibv_post_send(3): "number of bytes from
 * the start of the MR for MRs which are IBV_ZERO_BASED") and rkeys alike, and a memory
 * window bound by the region's addresses. Prints "N failures". */
#include "common.h"

static struct ibv_cq *cq;

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	char *local = aligned_alloc(4096, 4096), *remote = aligned_alloc(4096, 4096);
	memset(local, 0, 4096);
	memset(remote, 0, 4096);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		 IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
	struct ibv_mr *zmr = ibv_reg_mr(pd, remote, 4096, rw | IBV_ACCESS_ZERO_BASED);
	CHECK(pd && cq && lmr && zmr, "zero-based registrations: errno %d", errno);
	if (!pd || !cq || !lmr || !zmr)
		return 1;
	CHECK(lmr->addr == local && zmr->addr == remote, "ibv_mr.addr stays the address");
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	CHECK(a && b && ibv_query_gid(ctx, 1, 0, &gid) == 0, "QPs");
	if (!a || !b)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_qp_attr atom = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ |
						      IBV_ACCESS_REMOTE_ATOMIC};
	CHECK(ibv_modify_qp(b, &atom, IBV_QP_ACCESS_FLAGS) == 0, "b allows atomics");

	/* Zero-based on both sides: the local SGE and the remote address are offsets. */
	memcpy(local + 16, "zero-based", 10);
	struct ibv_sge sge = {16, 10, lmr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = 100;
	wr.wr.rdma.rkey = zmr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(remote + 100, "zero-based", 10) == 0,
	      "WRITE from offset 16 to offset 100");
	sge.addr = 200;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr_id = 2;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(local + 200, "zero-based", 10) == 0,
	      "READ from offset 100 into offset 200");
	*(uint64_t *)(remote + 64) = 5;
	sge.addr = 512;
	sge.length = 8;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr_id = 3;
	wr.wr.atomic.remote_addr = 64;
	wr.wr.atomic.rkey = zmr->rkey;
	wr.wr.atomic.compare_add = 3;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && *(uint64_t *)(remote + 64) == 8 &&
		      *(uint64_t *)(local + 512) == 5,
	      "FETCH_AND_ADD at offset 64");
	/* The region's extent is 0..4096 now: an offset past it, or the process address, is
	 * outside. */
	sge.addr = 0;
	sge.length = 8;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr_id = 4;
	wr.wr.rdma.remote_addr = 4092;
	wr.wr.rdma.rkey = zmr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_REM_ACCESS_ERR), "WRITE across the end of the region");

	/* a is in Error now: start again, with a region addressed from an iova. */
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy");
	a = ibv_create_qp(pd, &ia);
	b = ibv_create_qp(pd, &ia);
	CHECK(a && b && connect_rc(a, b->qp_num, gid, 0) == 0 &&
		      connect_rc(b, a->qp_num, gid, 0) == 0,
	      "reconnect");
	if (!a || !b)
		return 1;
	const uint64_t iova = 0x100000000000ull;
	/* The kernel maps pages: an iova at another offset in its page than the address is
	 * refused (EINVAL). */
	errno = 0;
	CHECK(ibv_reg_mr_iova(pd, remote, 4096, iova + 8, rw) == NULL && errno == EINVAL,
	      "reg_mr_iova at another page offset: EINVAL (errno %d)", errno);
	struct ibv_mr *imr = ibv_reg_mr_iova(pd, remote, 4096, iova, rw | IBV_ACCESS_MW_BIND);
	struct ibv_mr *plain = ibv_reg_mr(pd, local, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(imr && plain, "reg_mr_iova: errno %d", errno);
	if (!imr || !plain)
		return 1;
	memcpy(local, "by-iova!", 8);
	sge.addr = (uintptr_t)local;
	sge.lkey = plain->lkey;
	wr.wr_id = 5;
	wr.wr.rdma.remote_addr = iova + 300;
	wr.wr.rdma.rkey = imr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(remote + 300, "by-iova!", 8) == 0,
	      "WRITE to iova + 300 lands at addr + 300");
	/* The same region's lkey addresses it from the iova as well. */
	struct ibv_sge isge = {iova + 300, 8, imr->lkey};
	wr.sg_list = &isge;
	wr.wr_id = 6;
	wr.wr.rdma.remote_addr = iova + 400;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(remote + 400, "by-iova!", 8) == 0,
	      "an SGE at iova + 300 gathers addr + 300");

	/* A type 2 window bound by the region's addresses (iova + 1024, 64 bytes). */
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL, "alloc_mw: errno %d", errno);
	if (mw) {
		uint32_t rkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr bind = {.wr_id = 7,
					   .opcode = IBV_WR_BIND_MW,
					   .send_flags = IBV_SEND_SIGNALED};
		bind.bind_mw.mw = mw;
		bind.bind_mw.rkey = rkey;
		bind.bind_mw.bind_info.mr = imr;
		bind.bind_mw.bind_info.addr = iova + 1024;
		bind.bind_mw.bind_info.length = 64;
		bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
		CHECK(run_one(cq, b, &bind, IBV_WC_SUCCESS), "bind on b");
		wr.sg_list = &sge;
		wr.wr_id = 8;
		wr.wr.rdma.remote_addr = iova + 1024 + 8;
		wr.wr.rdma.rkey = rkey;
		CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(remote + 1032, "by-iova!", 8) == 0,
		      "WRITE through the window at iova + 1032 lands at addr + 1032");
		wr.wr_id = 9;
		wr.wr.rdma.remote_addr = iova + 1024 + 60;
		CHECK(run_one(cq, a, &wr, IBV_WC_REM_ACCESS_ERR), "a WRITE across the window's end");
	}
	/* What a failed bind or access left: tear down regardless. */
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (mw)
		CHECK(ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(imr) == 0 && ibv_dereg_mr(plain) == 0 && ibv_dereg_mr(zmr) == 0 &&
		      ibv_dereg_mr(lmr) == 0,
	      "dereg");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
