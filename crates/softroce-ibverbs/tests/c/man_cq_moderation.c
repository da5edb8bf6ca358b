/* ibv_modify_cq(3): IBV_CQ_ATTR_MODERATE sets cq_count, the "number of completions per
 * event", and cq_period, "in micro seconds"; it "returns 0 on success, or the value of
 * errno on failure". The limits are ibv_query_device_ex's cq_mod_caps. As libibverbs
 * and the kernel check the call: an attr_mask of 0, or with a bit past
 * IBV_CQ_ATTR_MODERATE, is EINVAL; as mlx5, a period beyond max_cq_period is EINVAL. An
 * armed CQ's event waits for the count, or the period after its first completion; both
 * zero turn moderation off. (The period's exact timing is checked in virtual time:
 * emu-device/tests/verbs_objects.rs.) Prints "N failures". */
#include "common.h"

static struct ibv_cq *mcq, *other;
static struct ibv_comp_channel *ch;

/* One signaled SEND from a to b; the receive is posted first. */
static int send_one(struct ibv_qp *a, struct ibv_qp *b, char *buf, uint32_t lkey)
{
	struct ibv_sge sge = {(uintptr_t)buf, 8, lkey};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *rbad;
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc;
	if (ibv_post_recv(b, &rwr, &rbad) || ibv_post_send(a, &wr, &bad))
		return 0;
	/* The receive completes after the send's ACK left b; the send's completion follows. */
	if (poll_n(other, &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS)
		return 0;
	return poll_n(mcq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS;
}

static int take_event(void)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) || ev_cq != mcq)
		return 0;
	ibv_ack_cq_events(mcq, 1);
	return 1;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	CHECK(ax.cq_mod_caps.max_cq_count == UINT16_MAX && ax.cq_mod_caps.max_cq_period > 0,
	      "cq_mod_caps: count %u, period %u us", ax.cq_mod_caps.max_cq_count,
	      ax.cq_mod_caps.max_cq_period);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	ch = ibv_create_comp_channel(ctx);
	mcq = ibv_create_cq(ctx, 64, NULL, ch, 0);
	other = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && ch && mcq && other && mr, "objects");
	if (!pd || !ch || !mcq || !other || !mr)
		return 1;
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);

	/* The call's errors. */
	struct ibv_modify_cq_attr attr = {.attr_mask = 0};
	CHECK(ibv_modify_cq(mcq, &attr) == EINVAL, "attr_mask 0: EINVAL");
	attr.attr_mask = IBV_CQ_ATTR_RESERVED;
	CHECK(ibv_modify_cq(mcq, &attr) == EINVAL, "an unknown attr_mask bit: EINVAL");
	attr.attr_mask = IBV_CQ_ATTR_MODERATE;
	if (ax.cq_mod_caps.max_cq_period < UINT16_MAX) {
		attr.moderate.cq_period = ax.cq_mod_caps.max_cq_period + 1;
		CHECK(ibv_modify_cq(mcq, &attr) == EINVAL, "a period beyond max_cq_period: EINVAL");
	}

	struct ibv_qp_init_attr ia = {.send_cq = mcq,
				      .recv_cq = other,
				      .cap = {.max_send_wr = 16,
					      .max_recv_wr = 16,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	ia.send_cq = other;
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	CHECK(a && b, "QPs: errno %d", errno);
	if (!a || !b)
		return 1;
	CHECK(connect_pair(ctx, a, b) == 0, "connect");

	/* By count: three completions of four hold the event, the fourth sends it. */
	attr.moderate.cq_count = 4;
	attr.moderate.cq_period = 0;
	CHECK(ibv_modify_cq(mcq, &attr) == 0, "moderate to 4 completions");
	CHECK(ibv_req_notify_cq(mcq, 0) == 0, "arm");
	int sent = 1;
	for (int i = 0; i < 3; i++)
		sent &= send_one(a, b, buf, mr->lkey);
	CHECK(sent, "three sends");
	CHECK(!channel_ready(ch, 300), "no event after three completions of four");
	CHECK(send_one(a, b, buf, mr->lkey), "the fourth send");
	CHECK(channel_ready(ch, 2000) && take_event(), "the event after the fourth");

	/* By period: one completion, then the event once the period has passed. */
	attr.moderate.cq_count = 1000;
	attr.moderate.cq_period = ax.cq_mod_caps.max_cq_period;
	CHECK(ibv_modify_cq(mcq, &attr) == 0, "moderate to 1000 completions or the longest period");
	CHECK(ibv_req_notify_cq(mcq, 0) == 0, "arm");
	CHECK(send_one(a, b, buf, mr->lkey), "one send");
	CHECK(channel_ready(ch, 2000) && take_event(), "its event once the period ended");

	/* Off again: the next completion fires. */
	attr.moderate.cq_count = 0;
	attr.moderate.cq_period = 0;
	CHECK(ibv_modify_cq(mcq, &attr) == 0, "moderation off");
	CHECK(ibv_req_notify_cq(mcq, 0) == 0, "arm");
	CHECK(send_one(a, b, buf, mr->lkey), "one send");
	CHECK(channel_ready(ch, 2000) && take_event(), "its event at once");

	/* A CQ created with ibv_create_cq_ex takes it too. */
	struct ibv_cq_init_attr_ex cx = {.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	attr.moderate.cq_count = 2;
	CHECK(cqx && ibv_modify_cq(ibv_cq_ex_to_cq(cqx), &attr) == 0, "ibv_create_cq_ex's CQ");
	CHECK(cqx && ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0, "destroy it");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy QPs");
	CHECK(ibv_destroy_cq(mcq) == 0 && ibv_destroy_cq(other) == 0, "destroy CQs");
	CHECK(ibv_destroy_comp_channel(ch) == 0 && ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
