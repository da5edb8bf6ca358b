/* ibv_get_cq_event(3) NOTES: "destroying a CQ will wait for all completion events to be
 * acknowledged": ibv_destroy_cq with an unacknowledged event returns 0 once another thread
 * acknowledges it, not before. The same for ibv_destroy_qp and an unacknowledged async
 * event (ibv_get_async_event(3)). Prints "N failures". */
#include "common.h"
#include <pthread.h>
#include <unistd.h>

static struct ibv_cq *ev_cq;
static volatile int acked;

static void *ack_later(void *arg)
{
	(void)arg;
	usleep(300 * 1000);
	acked = 1;
	ibv_ack_cq_events(ev_cq, 1);
	return NULL;
}

static struct ibv_async_event async_ev;
static volatile int async_acked;

static void *ack_async_later(void *arg)
{
	(void)arg;
	usleep(300 * 1000);
	async_acked = 1;
	ibv_ack_async_event(&async_ev);
	return NULL;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	CHECK(pd && ch && cq && mr && a && b, "setup: errno %d", errno);
	if (!pd || !ch || !cq || !mr || !a || !b)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)buf + 64, .rkey = mr->rkey}},
			   *bad;
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "arm");
	CHECK(ibv_post_send(a, &wr, &bad) == 0, "post_send");
	CHECK(channel_ready(ch, 10000), "completion event");
	void *ctx_out;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ctx_out) == 0 && ev_cq == cq, "get_cq_event");
	struct ibv_wc wc;
	CHECK(poll_n(cq, &wc, 1) == 1, "completion");
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	pthread_t t;
	CHECK(pthread_create(&t, NULL, ack_later, NULL) == 0, "thread");
	int rc = ibv_destroy_cq(cq);
	CHECK(rc == 0 && acked, "destroy_cq returned %d before the ack (acked %d)", rc, acked);
	pthread_join(t, NULL);
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");

	/* ibv_get_async_event(3): "destroying an object (CQ, SRQ or QP) will wait for all
	 * affiliated events for the object to be acknowledged". A QP on an SRQ moved to Error
	 * raises LAST_WQE_REACHED; ibv_destroy_qp returns once another thread acks it. */
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 2, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	struct ibv_qp *s = cq2 && srq ? rc_qp(pd, cq2, srq) : NULL;
	CHECK(s && connect_rc(s, s->qp_num, gid, 0) == 0, "a QP on an SRQ: errno %d", errno);
	if (!s)
		return 1;
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK(ibv_modify_qp(s, &err, IBV_QP_STATE) == 0, "to Error");
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1 && ibv_get_async_event(ctx, &async_ev) == 0 &&
		      async_ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
		      async_ev.element.qp == s,
	      "LAST_WQE_REACHED retrieved, not acknowledged");
	CHECK(pthread_create(&t, NULL, ack_async_later, NULL) == 0, "thread");
	rc = ibv_destroy_qp(s);
	CHECK(rc == 0 && async_acked, "destroy_qp returned %d before the ack (acked %d)", rc,
	      async_acked);
	pthread_join(t, NULL);
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq2) == 0, "destroy srq, cq2");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg, dealloc");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
