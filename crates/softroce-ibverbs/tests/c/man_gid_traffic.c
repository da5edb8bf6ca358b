/* ibv_query_port(3)/ibv_query_gid(3): every GID the port advertises carries traffic: an RC
 * SEND from each GID index completes and raises the completion event the CQ was armed for
 * (ibv_req_notify_cq(3), ibv_get_cq_event(3)). Then the solicited-only rule: an armed
 * "solicited only" CQ stays quiet for an unsolicited receive and fires for a solicited one.
 * Prints "N failures". */
#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.gid_tbl_len >= 1, "query_port");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, (void *)0x77, ch, 0);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && ch && scq && rcq && mr, "setup: errno %d", errno);
	if (!pd || !ch || !scq || !rcq || !mr)
		return 1;
	struct ibv_sge ss = {(uintptr_t)buf, 8, mr->lkey}, rs = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *sbad;
	struct ibv_wc wc[4];
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8,
					      .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *a = NULL, *b = NULL;
	for (int index = 0; index < pa.gid_tbl_len; index++) {
		union ibv_gid gid;
		CHECK(ibv_query_gid(ctx, 1, index, &gid) == 0, "query_gid %d", index);
		a = ibv_create_qp(pd, &ia);
		b = ibv_create_qp(pd, &ia);
		CHECK(a && b, "create_qp");
		if (!a || !b)
			return 1;
		CHECK(connect_rc(a, b->qp_num, gid, index) == 0 &&
			      connect_rc(b, a->qp_num, gid, index) == 0,
		      "connect on GID %d", index);
		CHECK(ibv_req_notify_cq(rcq, 0) == 0, "arm");
		CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0,
		      "post");
		CHECK(channel_ready(ch, 10000), "no completion event for a SEND from GID %d", index);
		CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq && ev_ctx == (void *)0x77,
		      "get_cq_event");
		ibv_ack_cq_events(rcq, 1);
		CHECK(poll_n(rcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS, "receive from GID %d",
		      index);
		CHECK(poll_n(scq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS, "send from GID %d",
		      index);
		if (index + 1 < pa.gid_tbl_len) {
			ibv_destroy_qp(a);
			ibv_destroy_qp(b);
		}
	}

	/* ibv_req_notify_cq(3): solicited_only fires for a receive of a message with the
	 * Solicited Event bit only. */
	CHECK(ibv_req_notify_cq(rcq, 1) == 0, "arm solicited only");
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0, "post");
	CHECK(poll_n(rcq, wc, 1) == 1, "the unsolicited receive completed");
	CHECK(!channel_ready(ch, 200), "no event for an unsolicited receive");
	swr.send_flags |= IBV_SEND_SOLICITED;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0, "post");
	CHECK(channel_ready(ch, 10000), "an event for the solicited receive");
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq, "get_cq_event");
	ibv_ack_cq_events(rcq, 1);
	CHECK(poll_n(rcq, wc, 1) == 1 && poll_n(scq, wc, 2) == 2, "completions");
	/* A "one shot" arming: no second event without re-arming. */
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0, "post");
	CHECK(poll_n(rcq, wc, 1) == 1, "completion");
	CHECK(!channel_ready(ch, 200), "one event per ibv_req_notify_cq");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(rcq) == 0 && ibv_destroy_cq(scq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
