/* ibv_get_async_event(3) QP events a program meets without faults: IBV_EVENT_COMM_EST when
 * a QP still in RTR receives its first message, IBV_EVENT_SQ_DRAINED after
 * ibv_modify_qp(3) moves a QP to SQD with en_sqd_async_notify; the QP in SQD goes back to
 * RTS. Prints "N failures". */
#include "common.h"

static int next_async(struct ibv_context *ctx, struct ibv_async_event *out)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&pfd, 1, 10000) != 1 || ibv_get_async_event(ctx, out))
		return -1;
	ibv_ack_async_event(out);
	return out->event_type;
}

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	return ibv_query_qp(qp, &a, IBV_QP_STATE, &i) ? (enum ibv_qp_state)-1 : a.qp_state;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	CHECK(pd && cq && mr && a && b, "setup: errno %d", errno);
	if (!pd || !cq || !mr || !a || !b)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_async_event ev;
	struct ibv_wc wc[4];

	/* b stops in RTR: a receiver needs no more. a SENDs; b's first message establishes
	 * the connection (COMM_EST). */
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0, "a to RTS");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
				 .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK(ibv_modify_qp(b, &at,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "b to Init");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = a->qp_num;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.hop_limit = 64;
	at.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(b, &at,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0 &&
		      state_of(b) == IBV_QPS_RTR,
	      "b to RTR only");
	struct ibv_sge rs = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2,
				  .sg_list = &ss,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0, "post");
	CHECK(poll_n(cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[1].status == IBV_WC_SUCCESS,
	      "the SEND to a QP in RTR completes");
	CHECK(next_async(ctx, &ev) == IBV_EVENT_COMM_EST && ev.element.qp == b,
	      "COMM_EST for the QP in RTR: got %d", ev.event_type);

	/* SQD with notification: SQ_DRAINED once nothing is in flight; SQD -> RTS. */
	struct ibv_qp_attr sqd = {.qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1};
	CHECK(ibv_modify_qp(a, &sqd, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0 &&
		      state_of(a) == IBV_QPS_SQD,
	      "RTS -> SQD");
	CHECK(next_async(ctx, &ev) == IBV_EVENT_SQ_DRAINED && ev.element.qp == a,
	      "SQ_DRAINED: got %d", ev.event_type);
	struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS};
	CHECK(ibv_modify_qp(a, &rts, IBV_QP_STATE) == 0 && state_of(a) == IBV_QPS_RTS,
	      "SQD -> RTS");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_cq(cq) == 0 &&
		      ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
