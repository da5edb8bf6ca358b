/* ibv_close_device(3) with objects left on the context, while another context keeps the
 * device open: as the kernel's release of the uverbs file, the closed context's QPs,
 * regions, CQs and PD go with it. A peer's WRITE through the closed context's rkey into its
 * QP no longer lands (the QP is gone: the writer runs out of retries), and the memory is
 * left alone. (The application's structures are its own to forget: close "does not release
 * all the resources allocated using context".) Prints "N failures". */
#include "common.h"

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		return 2;
	}
	struct ibv_context *keeper = ibv_open_device(list[0]);
	struct ibv_context *closing = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!keeper || !closing) {
		fprintf(stderr, "open: errno %d\n", errno);
		return 2;
	}

	struct ibv_pd *pd_a = ibv_alloc_pd(keeper);
	struct ibv_cq *cq_a = ibv_create_cq(keeper, 16, NULL, NULL, 0);
	struct ibv_qp *qp_a = rc_qp(pd_a, cq_a, NULL);
	static char src[16] = "written";
	struct ibv_mr *mr_src = ibv_reg_mr(pd_a, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);

	struct ibv_pd *pd_b = ibv_alloc_pd(closing);
	struct ibv_cq *cq_b = ibv_create_cq(closing, 16, NULL, NULL, 0);
	struct ibv_qp *qp_b = rc_qp(pd_b, cq_b, NULL);
	static char dst[16];
	struct ibv_mr *mr_dst = ibv_reg_mr(pd_b, dst, sizeof(dst),
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd_a || !cq_a || !qp_a || !mr_src || !pd_b || !cq_b || !qp_b || !mr_dst) {
		fprintf(stderr, "setup: errno %d\n", errno);
		return 2;
	}
	union ibv_gid gid;
	CHECK(ibv_query_gid(keeper, 1, 0, &gid) == 0, "gid");
	CHECK(connect_rc(qp_a, qp_b->qp_num, gid, 0) == 0, "connect a");
	CHECK(connect_rc(qp_b, qp_a->qp_num, gid, 0) == 0, "connect b");

	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 8, .lkey = mr_src->lkey};
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)dst, .rkey = mr_dst->rkey}};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;
	CHECK(ibv_post_send(qp_a, &wr, &bad) == 0, "post");
	CHECK(poll_n(cq_a, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS, "the WRITE before");
	CHECK(memcmp(dst, "written", 8) == 0, "landed before the close");

	/* Close the context with everything left on it. */
	memset(dst, 0, sizeof(dst));
	CHECK(ibv_close_device(closing) == 0, "close: errno %d", errno);

	wr.wr_id = 2;
	/* (Eight ACK timeouts of 67 ms: retry_cnt 7.) */
	CHECK(ibv_post_send(qp_a, &wr, &bad) == 0, "post after");
	CHECK(poll_n(cq_a, &wc, 1) == 1, "a completion");
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_RETRY_EXC_ERR,
	      "the WRITE into the closed context's QP: status %s",
	      ibv_wc_status_str(wc.status));
	CHECK(memcmp(dst, "\0\0\0\0\0\0\0\0", 8) == 0, "nothing landed after the close");

	/* The device, still open on the other context, works on: a new pair connects. */
	struct ibv_qp *x = rc_qp(pd_a, cq_a, NULL), *y = rc_qp(pd_a, cq_a, NULL);
	CHECK(x && y && connect_pair(keeper, x, y) == 0, "a new pair");

	ibv_destroy_qp(x);
	ibv_destroy_qp(y);
	ibv_destroy_qp(qp_a);
	ibv_dereg_mr(mr_src);
	ibv_destroy_cq(cq_a);
	ibv_dealloc_pd(pd_a);
	ibv_close_device(keeper);
	printf("%d failures\n", failures);
	return failures != 0;
}
