/* Counts larger than the arrays behind them: ibv_post_send(3), ibv_post_recv(3) and
 * ibv_post_srq_recv(3) take `num_sge` ("Size of the s/g array") and ibv_wr_post(3)'s
 * setters a count or length with their list. A count over what the queue was created with
 * is refused with EINVAL (bad_wr naming the request; ibv_wr_complete failing the batch)
 * before the list is read, as rxe's and mlx5's providers check it, so a wild value is an
 * error, not a crash or an allocation of gigabytes. The QP works on afterwards.
 * Prints "N failures". */
#include "common.h"
#include <limits.h>

int main(void)
{
	struct ibv_context *ctx = open_first();
	if (!ctx)
		return 2;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_qp_init_attr_ex xa = {.send_cq = cq,
					 .recv_cq = cq,
					 .cap = {.max_send_wr = 8,
						 .max_recv_wr = 8,
						 .max_send_sge = 2,
						 .max_recv_sge = 2,
						 .max_inline_data = 64},
					 .qp_type = IBV_QPT_RC,
					 .comp_mask = IBV_QP_INIT_ATTR_PD |
						      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND |
							   IBV_QP_EX_WITH_RDMA_WRITE};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &xa), *b = ibv_create_qp_ex(ctx, &xa);
	if (!pd || !cq || !mr || !srq || !a || !b || connect_pair(ctx, a, b)) {
		fprintf(stderr, "setup: errno %d\n", errno);
		return 2;
	}
	CHECK(xa.cap.max_send_sge < 100, "the QP takes a few SGEs (%u)", xa.cap.max_send_sge);

	/* Four entries behind every count below. */
	struct ibv_sge four[4];
	for (int i = 0; i < 4; i++)
		four[i] = (struct ibv_sge){(uintptr_t)buf + 64 * i, 8, mr->lkey};
	int wild[] = {100000, INT_MAX};
	for (unsigned i = 0; i < sizeof(wild) / sizeof(wild[0]); i++) {
		struct ibv_send_wr swr = {.wr_id = 1,
					  .sg_list = four,
					  .num_sge = wild[i],
					  .opcode = IBV_WR_RDMA_WRITE,
					  .wr.rdma = {(uintptr_t)buf + 2048, mr->rkey}};
		struct ibv_send_wr *sbad = NULL;
		CHECK(ibv_post_send(a, &swr, &sbad) == EINVAL && sbad == &swr,
		      "ibv_post_send with num_sge %d: EINVAL, bad_wr the request", wild[i]);
		struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = four, .num_sge = wild[i]};
		struct ibv_recv_wr *rbad = NULL;
		CHECK(ibv_post_recv(b, &rwr, &rbad) == EINVAL && rbad == &rwr,
		      "ibv_post_recv with num_sge %d: EINVAL", wild[i]);
		rbad = NULL;
		CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == EINVAL && rbad == &rwr,
		      "ibv_post_srq_recv with num_sge %d: EINVAL", wild[i]);
	}

	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	ibv_wr_start(qx);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
	ibv_wr_set_sge_list(qx, 100000, four);
	CHECK(ibv_wr_complete(qx) == EINVAL, "ibv_wr_set_sge_list with 100000 SGEs fails the batch");

	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, buf, (size_t)1 << 40);
	CHECK(ibv_wr_complete(qx) == EINVAL, "ibv_wr_set_inline_data of 1 TiB fails the batch");

	struct ibv_data_buf bufs[2] = {{buf, 32}, {buf + 32, 64}};
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_inline_data_list(qx, SIZE_MAX, bufs);
	CHECK(ibv_wr_complete(qx) == EINVAL,
	      "ibv_wr_set_inline_data_list past max_inline_data fails the batch");

	/* Nothing went out, and the QP still works. */
	struct ibv_wc wc;
	CHECK(poll_n_within(cq, &wc, 1, 200) == 0, "no completion from the refused requests");
	struct ibv_send_wr ok = {.wr_id = 9,
				 .sg_list = four,
				 .num_sge = 2,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {(uintptr_t)buf + 2048, mr->rkey}};
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(a, &ok, &bad) == 0, "a WRITE within the QP's size");
	CHECK(poll_n(cq, &wc, 1) == 1 && wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS,
	      "completes with success: %s", ibv_wc_status_str(wc.status));

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
