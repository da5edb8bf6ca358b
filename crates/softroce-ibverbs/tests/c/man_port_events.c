/* ibv_get_async_event(3) for the port and device events a C program cannot make a real
 * HCA produce on demand, scheduled by the fault plan it runs under (the test sets
 * SOFTROCE_FAULTS=port_down=1000,port_up=2000,device_fatal=3500: milliseconds after the
 * device starts). The port goes down: IBV_EVENT_PORT_ERR naming port 1, ibv_query_port(3)
 * says DOWN. A WRITE posted meanwhile is lost on the wire and retransmitted ("the minimal
 * timeout that a QP waits for ACK/NACK from remote QP before retransmitting",
 * ibv_modify_qp(3)): once the port is back (IBV_EVENT_PORT_ACTIVE, ACTIVE again) it lands
 * and completes with success. Then IBV_EVENT_DEVICE_FATAL: the QPs are in error. Each event
 * is acknowledged. Prints "N failures". */
#include "common.h"

/* The next async event within `ms` milliseconds: 0, or -1 when none came. */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ev, int ms)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&pfd, 1, ms) != 1)
		return -1;
	return ibv_get_async_event(ctx, ev);
}

static enum ibv_port_state port_state(struct ibv_context *ctx)
{
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		return IBV_PORT_NOP;
	return pa.state;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	if (!ctx)
		return 2;
	long started = now_ms();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	static char src[16] = "after the flap", dst[16];
	struct ibv_mr *mr_src = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr_dst = ibv_reg_mr(pd, dst, sizeof(dst),
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	union ibv_gid gid;
	/* The writer retransmits 537 ms apart (timeout 17), eight times: longer than the port
	 * stays down. */
	if (!pd || !cq || !a || !b || !mr_src || !mr_dst || ibv_query_gid(ctx, 1, 0, &gid) ||
	    connect_rc_timeout(a, b->qp_num, gid, 0, 17) || connect_rc(b, a->qp_num, gid, 0)) {
		fprintf(stderr, "setup: errno %d\n", errno);
		return 2;
	}
	struct ibv_qp_attr at;
	CHECK(port_state(ctx) == IBV_PORT_ACTIVE, "the port starts active");
	CHECK(now_ms() - started < 900, "set up before the port goes down (%ld ms)",
	      now_ms() - started);

	struct ibv_async_event ev;
	CHECK(next_event(ctx, &ev, 5000) == 0, "an event when the port goes down");
	CHECK(ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num == 1,
	      "IBV_EVENT_PORT_ERR on port 1: %s, port %d", ibv_event_type_str(ev.event_type),
	      ev.element.port_num);
	ibv_ack_async_event(&ev);
	long down_at = now_ms() - started;
	CHECK(down_at >= 900 && down_at < 1900, "down on time (%ld ms)", down_at);
	CHECK(port_state(ctx) == IBV_PORT_DOWN, "ibv_query_port says DOWN: %s",
	      ibv_port_state_str(port_state(ctx)));

	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 15, .lkey = mr_src->lkey};
	struct ibv_send_wr wr = {.wr_id = 7,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)dst, .rkey = mr_dst->rkey}};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;
	CHECK(ibv_post_send(a, &wr, &bad) == 0, "posting while the port is down: errno %d",
	      errno);
	CHECK(poll_n_within(cq, &wc, 1, 300) == 0, "nothing completes while the port is down");
	CHECK(dst[0] == 0, "nothing landed while the port is down");

	CHECK(next_event(ctx, &ev, 5000) == 0, "an event when the port comes back");
	CHECK(ev.event_type == IBV_EVENT_PORT_ACTIVE && ev.element.port_num == 1,
	      "IBV_EVENT_PORT_ACTIVE on port 1: %s, port %d",
	      ibv_event_type_str(ev.event_type), ev.element.port_num);
	ibv_ack_async_event(&ev);
	CHECK(port_state(ctx) == IBV_PORT_ACTIVE, "ibv_query_port says ACTIVE again");

	CHECK(poll_n(cq, &wc, 1) == 1, "the WRITE completes once the port is back");
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS, "with success: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(strcmp(dst, "after the flap") == 0, "and landed: \"%s\"", dst);

	CHECK(next_event(ctx, &ev, 5000) == 0, "an event when the device fails");
	CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL: %s",
	      ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	struct ibv_qp_init_attr init;
	CHECK(ibv_query_qp(a, &at, IBV_QP_STATE, &init) == 0 && at.qp_state == IBV_QPS_ERR,
	      "the QPs are in error after DEVICE_FATAL (state %d)", at.qp_state);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr_src);
	ibv_dereg_mr(mr_dst);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
