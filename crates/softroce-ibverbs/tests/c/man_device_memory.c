/* ibv_alloc_dm(3): device memory. ibv_query_device_ex's max_dm_size bounds what all
 * allocations take ("ibv_alloc_dm() may fail if device has no more free device memory
 * left"); ibv_memcpy_to_dm / ibv_memcpy_from_dm return 0 or the failure reason; a region
 * over it is registered with ibv_reg_dm_mr and "user must set the IBV_ACCESS_ZERO_BASED
 * flag", and is addressed "with a byte offset from the beginning of the region", in SGEs
 * and by peers alike; "ibv_free_dm() may fail if any other resources (such as an MR) is
 * still associated with the DM being freed". Prints "N failures". */
#include "common.h"

static struct ibv_cq *cq;

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	size_t max = ax.max_dm_size;
	CHECK(max >= 4096, "max_dm_size %zu: the device offers device memory", max);

	/* Allocation rules. */
	struct ibv_alloc_dm_attr at = {.length = 4096, .log_align_req = 3};
	at.comp_mask = 1;
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &at) == NULL && errno == EINVAL, "unknown comp_mask: EINVAL (%d)",
	      errno);
	at.comp_mask = 0;
	at.length = max + 1;
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &at) == NULL && errno == ENOMEM,
	      "more than max_dm_size: ENOMEM (%d)", errno);
	at.length = max - 1024;
	struct ibv_dm *big = ibv_alloc_dm(ctx, &at);
	CHECK(big != NULL, "max_dm_size - 1024 bytes: errno %d", errno);
	at.length = 2048;
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &at) == NULL && errno == ENOMEM,
	      "2048 bytes when 1024 are left: ENOMEM (%d)", errno);
	CHECK(big && ibv_free_dm(big) == 0, "free the big one");
	at.length = 4096;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &at);
	CHECK(dm != NULL && dm->context == ctx, "4096 bytes after the free: errno %d", errno);
	if (!dm)
		return 1;

	/* Copies: 4-byte granules inside the allocation. */
	uint32_t words[4] = {1, 2, 3, 4}, back[4] = {0};
	CHECK(ibv_memcpy_to_dm(dm, 8, words, sizeof(words)) == 0, "copy 16 bytes to offset 8");
	CHECK(ibv_memcpy_from_dm(back, dm, 8, sizeof(back)) == 0 &&
		      memcmp(back, words, sizeof(words)) == 0,
	      "and back");
	CHECK(ibv_memcpy_to_dm(dm, 3, words, 4) == EINVAL, "unaligned offset: EINVAL");
	CHECK(ibv_memcpy_to_dm(dm, 4, words, 3) == EINVAL, "unaligned length: EINVAL");
	CHECK(ibv_memcpy_from_dm(back, dm, 4096, 4) == EFAULT, "offset past the end: EFAULT");
	CHECK(ibv_memcpy_from_dm(back, dm, 4092, 8) == EFAULT, "copy across the end: EFAULT");
	CHECK(ibv_memcpy_from_dm(back, dm, UINT64_MAX - 3, 8) == EFAULT,
	      "offset + length overflowing: EFAULT");

	/* Registration. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		 IBV_ACCESS_REMOTE_ATOMIC;
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dm, 0, 4096, rw) == NULL && errno == EINVAL,
	      "without IBV_ACCESS_ZERO_BASED: EINVAL (%d)", errno);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dm, 1024, 4096, rw | IBV_ACCESS_ZERO_BASED) == NULL &&
		      errno == EINVAL,
	      "a range past the allocation: EINVAL (%d)", errno);
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 1024, 2048, rw | IBV_ACCESS_ZERO_BASED);
	CHECK(dmr && dmr->length == 2048 && dmr->addr == NULL && dmr->pd == pd,
	      "a zero-based region over bytes 1024..3072: errno %d", errno);
	if (!dmr)
		return 1;
	CHECK(ibv_free_dm(dm) == EBUSY, "free while a region covers it: EBUSY");
	struct ibv_mr *empty = ibv_reg_dm_mr(pd, dm, 0, 0, IBV_ACCESS_ZERO_BASED);
	CHECK(empty && empty->length == 0, "an empty region (as mlx5 allows): errno %d", errno);
	CHECK(empty && ibv_dereg_mr(empty) == 0, "dereg the empty region");

	/* Traffic: peers address the region by offsets; so do local SGEs. */
	char *host = aligned_alloc(4096, 4096);
	memset(host, 0, 4096);
	struct ibv_mr *hmr = ibv_reg_mr(pd, host, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	CHECK(hmr && a && b && ibv_query_gid(ctx, 1, 0, &gid) == 0, "QPs");
	if (!hmr || !a || !b)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_qp_attr acc = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_ATOMIC};
	CHECK(ibv_modify_qp(b, &acc, IBV_QP_ACCESS_FLAGS) == 0, "b allows remote access");

	memcpy(host, "device memory!!!", 16);
	struct ibv_sge sge = {(uintptr_t)host, 16, hmr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = 100;
	wr.wr.rdma.rkey = dmr->rkey;
	char seen[16] = {0};
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS), "WRITE to the region's offset 100");
	CHECK(ibv_memcpy_from_dm(seen, dm, 1024 + 100, 16) == 0 &&
		      memcmp(seen, "device memory!!!", 16) == 0,
	      "lands at the device memory's offset 1124");
	sge.addr = (uintptr_t)(host + 512);
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr_id = 2;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && memcmp(host + 512, "device memory!!!", 16) == 0,
	      "READ of it back into host memory");
	uint64_t five = 5, old = 0;
	CHECK(ibv_memcpy_to_dm(dm, 1024 + 64, &five, 8) == 0, "an 8-byte counter at offset 64");
	sge.addr = (uintptr_t)(host + 1024);
	sge.length = 8;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr_id = 3;
	wr.wr.atomic.remote_addr = 64;
	wr.wr.atomic.rkey = dmr->rkey;
	wr.wr.atomic.compare_add = 3;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && *(uint64_t *)(host + 1024) == 5 &&
		      ibv_memcpy_from_dm(&old, dm, 1024 + 64, 8) == 0 && old == 8,
	      "FETCH_AND_ADD on device memory: 5 -> 8");
	/* The region as a local gather list: an SGE addresses it by offset too. */
	struct ibv_sge dsge = {100, 16, dmr->lkey};
	wr.sg_list = &dsge;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr_id = 4;
	wr.wr.rdma.remote_addr = 200;
	wr.wr.rdma.rkey = dmr->rkey;
	CHECK(run_one(cq, a, &wr, IBV_WC_SUCCESS) && ibv_memcpy_from_dm(seen, dm, 1024 + 200, 16) == 0 &&
		      memcmp(seen, "device memory!!!", 16) == 0,
	      "WRITE gathered from the region's offset 100 to its offset 200");
	sge.addr = (uintptr_t)host;
	sge.length = 8;
	sge.lkey = hmr->lkey;
	wr.sg_list = &sge;
	wr.wr_id = 5;
	wr.wr.rdma.remote_addr = 2044;
	CHECK(run_one(cq, a, &wr, IBV_WC_REM_ACCESS_ERR), "a WRITE across the region's end");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	CHECK(ibv_dereg_mr(dmr) == 0, "dereg the region");
	CHECK(ibv_free_dm(dm) == 0, "then free the device memory");
	CHECK(ibv_dereg_mr(hmr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
