/* A UD send the host refuses to transmit is an error completion, never a silent loss
 * (ibv_poll_cq(3): every WR completes; an error completion comes even for an unsignaled
 * WR). The device's socket may not send to loopback's broadcast address (EACCES without
 * SO_BROADCAST): the WR completes IBV_WC_LOC_QP_OP_ERR, as rxe completes a request whose
 * transmit failed, and the UD QP enters SQE (ibv_modify_qp(3): a UD send error); back in
 * RTS it sends again. The counters printed at exit (SOFTROCE_COUNTERS) show send_err=1.
 * Prints "N failures". */
#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_UD};
	struct ibv_qp *qp = pd && cq && mr ? ibv_create_qp(pd, &ia) : NULL;
	CHECK(qp != NULL, "setup: errno %d", errno);
	if (!qp)
		return 1;
	CHECK(ud_ready(qp, 0x1234) == 0, "UD QP to RTS");

	union ibv_gid own, refused;
	CHECK(ibv_query_gid(ctx, 1, 0, &own) == 0, "query_gid");
	/* ::ffff:127.255.255.255 */
	memset(&refused, 0, sizeof(refused));
	refused.raw[10] = refused.raw[11] = 0xff;
	refused.raw[12] = 127;
	refused.raw[13] = refused.raw[14] = refused.raw[15] = 255;
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = refused, .hop_limit = 64}};
	struct ibv_ah *bad_ah = ibv_create_ah(pd, &aa);
	aa.grh.dgid = own;
	struct ibv_ah *own_ah = ibv_create_ah(pd, &aa);
	CHECK(bad_ah && own_ah, "create_ah: errno %d", errno);
	if (!bad_ah || !own_ah)
		return 1;

	struct ibv_sge rs = {(uintptr_t)buf + 1024, 40 + 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 10, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {(uintptr_t)buf, 8, mr->lkey};
	/* Unsignaled: an error completes anyway. */
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND},
			   *sbad;
	swr.wr.ud.ah = bad_ah;
	swr.wr.ud.remote_qpn = qp->qp_num;
	swr.wr.ud.remote_qkey = 0x1234;
	struct ibv_wc wc[2];
	CHECK(ibv_post_send(qp, &swr, &sbad) == 0, "post the refused send");
	CHECK(poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 1 && wc[0].status == IBV_WC_LOC_QP_OP_ERR,
	      "the refused send completes in error: %s", ibv_wc_status_str(wc[0].status));
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr qa;
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &init) == 0 && qa.qp_state == IBV_QPS_SQE,
	      "a UD send error moves the QP to SQE: state %d", qa.qp_state);

	/* SQE -> RTS, and a send to the QP itself arrives. */
	qa.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0, "SQE -> RTS");
	swr.wr_id = 2;
	swr.send_flags = IBV_SEND_SIGNALED;
	swr.wr.ud.ah = own_ah;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0 && ibv_post_send(qp, &swr, &sbad) == 0,
	      "post the next send");
	int got = poll_n(cq, wc, 2);
	CHECK(got == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS &&
		      wc[0].wr_id + wc[1].wr_id == 12,
	      "the next send and its receive succeed (%d completions)", got);

	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_ah(bad_ah) == 0 && ibv_destroy_ah(own_ah) == 0,
	      "destroy");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
