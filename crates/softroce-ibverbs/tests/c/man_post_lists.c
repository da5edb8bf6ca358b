/* ibv_post_send(3), ibv_post_recv(3), ibv_post_srq_recv(3): a list is processed up to the
 * first WR that fails; that WR comes back through bad_wr with the errno value returned,
 * and the WRs before it were posted: they execute and complete. Prints "N failures". */
#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 8, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(pd && cq && mr && srq, "setup: errno %d", errno);
	if (!pd || !cq || !mr || !srq)
		return 1;
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	struct ibv_qp *c = rc_qp(pd, cq, srq), *d = rc_qp(pd, cq, NULL);
	CHECK(a && b && c && d, "create_qp: errno %d", errno);
	if (!a || !b || !c || !d)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid 0");
	/* a sends to b; d sends to c, which receives from the SRQ. */
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect a-b");
	struct ibv_wc wc[8];

	/* A NULL list is a caller's bug, not an empty post (rxe's provider: EINVAL). */
	struct ibv_send_wr *nbad = (struct ibv_send_wr *)1;
	CHECK(ibv_post_send(a, NULL, &nbad) == EINVAL && nbad == NULL, "post_send NULL list");
	struct ibv_recv_wr *nrbad = (struct ibv_recv_wr *)1;
	CHECK(ibv_post_recv(b, NULL, &nrbad) == EINVAL && nrbad == NULL, "post_recv NULL list");

	/* ibv_post_recv(3): WR 1 posted, WR 2 (num_sge > max_recv_sge) returned in bad_wr. */
	struct ibv_sge rs = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_sge many[3] = {rs, rs, rs};
	struct ibv_recv_wr r2 = {.wr_id = 2, .sg_list = many, .num_sge = 3};
	struct ibv_recv_wr r1 = {.wr_id = 1, .sg_list = &rs, .num_sge = 1, .next = &r2};
	struct ibv_recv_wr *rbad = NULL;
	CHECK(ibv_post_recv(b, &r1, &rbad) == EINVAL && rbad == &r2,
	      "post_recv: bad_wr names WR 2");

	/* ibv_post_send(3): the same with num_sge > max_send_sge; WR 1 must complete. */
	struct ibv_sge ss = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_sge sm[3] = {ss, ss, ss};
	struct ibv_send_wr s2 = {.wr_id = 12, .sg_list = sm, .num_sge = 3,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr s1 = {.wr_id = 11, .sg_list = &ss, .num_sge = 1, .next = &s2,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad = NULL;
	memcpy(buf, "posted before 2", 16);
	CHECK(ibv_post_send(a, &s1, &sbad) == EINVAL && sbad == &s2,
	      "post_send: bad_wr names WR 2");
	int n = poll_n(cq, wc, 2);
	CHECK(n == 2, "WR 1 of each list completed: %d completions", n);
	for (int i = 0; i < n && i < 2; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc[i].status));
		CHECK(wc[i].wr_id == (wc[i].opcode == IBV_WC_RECV ? 1 : 11), "wr_id %llu",
		      (unsigned long long)wc[i].wr_id);
	}
	CHECK(memcmp(buf + 4096, "posted before 2", 16) == 0, "payload");

	/* Inline data beyond max_inline_data fails the WR, not the ones before it. */
	char big[512];
	memset(big, 'x', sizeof(big));
	struct ibv_sge is = {(uintptr_t)big, sizeof(big), 0};
	struct ibv_send_wr i2 = {.wr_id = 22, .sg_list = &is, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	s1.next = &i2;
	s1.wr_id = 21;
	r1.next = NULL;
	CHECK(ibv_post_recv(b, &r1, &rbad) == 0, "post_recv");
	CHECK(ibv_post_send(a, &s1, &sbad) == EINVAL && sbad == &i2,
	      "inline beyond max_inline_data: bad_wr names it");
	n = poll_n(cq, wc, 2);
	CHECK(n == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "the WR before the inline one completed: %d", n);

	/* ibv_post_srq_recv(3): WR 1 posted to the SRQ, WR 2 (num_sge > max_sge) refused. */
	CHECK(connect_rc(c, d->qp_num, gid, 0) == 0 && connect_rc(d, c->qp_num, gid, 0) == 0,
	      "connect c-d");
	r1.wr_id = 31;
	r1.next = &r2;
	CHECK(ibv_post_srq_recv(srq, &r1, &rbad) == EINVAL && rbad == &r2,
	      "post_srq_recv: bad_wr names WR 2");
	s1.next = NULL;
	s1.wr_id = 41;
	CHECK(ibv_post_send(d, &s1, &sbad) == 0, "post_send d");
	n = poll_n(cq, wc, 2);
	CHECK(n == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "WR 1 of the SRQ list received the message: %d", n);
	for (int i = 0; i < n && i < 2; i++)
		if (wc[i].opcode == IBV_WC_RECV)
			CHECK(wc[i].wr_id == 31 && wc[i].qp_num == c->qp_num, "srq recv wr_id %llu",
			      (unsigned long long)wc[i].wr_id);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
