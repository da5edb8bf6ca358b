/* ibv_modify_srq(3)/ibv_query_srq(3): the SRQ limit arms one IBV_EVENT_SRQ_LIMIT_REACHED
 * when the WRs drop below it, and reads 0 once fired; ibv_create_srq(3) limits.
 * ibv_get_async_event(3): LAST_WQE_REACHED for an SRQ's QP in Error, CQ_ERR on overrun.
 * ibv_resize_cq(3): never below the unpolled entries. ibv_req_notify_cq(3): an error
 * completion is "solicited". ibv_reg_mr(3): access rules and their completions.
 * ibv_create_ah_from_wc(3)/ibv_init_ah_from_wc(3): a UD reply to a sender known only from
 * its completion and GRH. Prints "N failures". */
#include "common.h"

/* The next async event within 10 s, acknowledged; its type, or -1. */
static int next_async(struct ibv_context *ctx, struct ibv_async_event *out)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&pfd, 1, 10000) != 1)
		return -1;
	if (ibv_get_async_event(ctx, out))
		return -1;
	ibv_ack_async_event(out);
	return out->event_type;
}

static int async_pending(struct ibv_context *ctx, int ms)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 1;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, ch, 0);
	char *buf = calloc(1, 16384);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 16384, IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && ch && cq && rcq && mr, "setup: errno %d", errno);
	if (!pd || !ch || !cq || !rcq || !mr)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_wc wc[16];
	struct ibv_async_event ev;

	/* ibv_create_srq(3): within the device's max_srq_wr and max_srq_sge. */
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = da.max_srq_wr + 1, .max_sge = 1}};
	errno = 0;
	CHECK(ibv_create_srq(pd, &sia) == NULL && errno == EINVAL, "max_wr > max_srq_wr: %d",
	      errno);
	sia.attr.max_wr = 8;
	sia.attr.max_sge = da.max_srq_sge + 1;
	errno = 0;
	CHECK(ibv_create_srq(pd, &sia) == NULL && errno == EINVAL, "max_sge > max_srq_sge: %d",
	      errno);
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq != NULL, "create_srq: errno %d", errno);
	if (!srq)
		return 1;
	struct ibv_srq_attr sa;
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 8 && sa.max_sge >= 1 &&
		      sa.srq_limit == 0,
	      "query_srq: a new SRQ is not armed");

	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = rcq,
				      .srq = srq,
				      .cap = {.max_send_wr = 16, .max_send_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	ia.srq = NULL;
	ia.recv_cq = cq;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	CHECK(a && b, "create_qp: errno %d", errno);
	if (!a || !b)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");

	/* Four receives, limit 3: the first SEND leaves 3 (not below), the second 2. */
	struct ibv_sge rs = {(uintptr_t)buf + 8192, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.sg_list = &rs, .num_sge = 1}, *rbad;
	for (int i = 0; i < 4; i++) {
		rwr.wr_id = 100 + i;
		CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "post_srq_recv %d", i);
	}
	sa.srq_limit = 3;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "arm the limit");
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 3, "query_srq: armed at 3");
	struct ibv_sge ss = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 1,
				  .sg_list = &ss,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	CHECK(ibv_post_send(a, &swr, &sbad) == 0 && poll_n(cq, wc, 1) == 1 &&
		      poll_n(rcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS,
	      "first SEND");
	CHECK(!async_pending(ctx, 200), "no event while the SRQ holds as many WRs as the limit");
	CHECK(ibv_post_send(a, &swr, &sbad) == 0 && poll_n(cq, wc, 1) == 1 &&
		      poll_n(rcq, wc, 1) == 1,
	      "second SEND");
	CHECK(next_async(ctx, &ev) == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "SRQ_LIMIT_REACHED below the limit: got %d", ev.event_type);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0,
	      "query_srq(3): the fired limit reads 0 (no longer armed): %u", sa.srq_limit);
	CHECK(ibv_post_send(a, &swr, &sbad) == 0 && poll_n(cq, wc, 1) == 1 &&
		      poll_n(rcq, wc, 1) == 1,
	      "third SEND");
	CHECK(!async_pending(ctx, 200), "one event per arming");
	/* ibv_modify_srq(3): a resize only where the device says IBV_DEVICE_SRQ_RESIZE. */
	sa.max_wr = 32;
	int rc = ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR);
	if (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)
		CHECK(rc == 0 && ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 32,
		      "SRQ resize: %d, max_wr %u", rc, sa.max_wr);
	else
		CHECK(rc == EINVAL, "SRQ resize without IBV_DEVICE_SRQ_RESIZE: %d", rc);

	/* The QP on the SRQ moved to Error raises LAST_WQE_REACHED (IBTA 11.6.3), once: a
	 * SEND posted to it afterwards is flushed without another. */
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK(ibv_modify_qp(b, &err, IBV_QP_STATE) == 0, "b to Error");
	CHECK(next_async(ctx, &ev) == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == b,
	      "LAST_WQE_REACHED for the SRQ's QP in Error: got %d", ev.event_type);
	swr.wr_id = 9;
	CHECK(ibv_post_send(b, &swr, &sbad) == 0, "post_send in Error");
	CHECK(poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 9 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	      "flushed");
	/* ibv_req_notify_cq(3): an unsuccessful completion is solicited. */
	CHECK(ibv_req_notify_cq(rcq, 1) == 0, "arm rcq solicited only");
	struct ibv_qp_init_attr pia = {.send_cq = cq,
				       .recv_cq = rcq,
				       .cap = {.max_send_wr = 2, .max_recv_wr = 2,
					       .max_send_sge = 1, .max_recv_sge = 1},
				       .qp_type = IBV_QPT_RC};
	struct ibv_qp *p = ibv_create_qp(pd, &pia);
	CHECK(p && connect_rc(p, a->qp_num, gid, 0) == 0, "p");
	rwr.wr_id = 77;
	CHECK(ibv_post_recv(p, &rwr, &rbad) == 0 && ibv_modify_qp(p, &err, IBV_QP_STATE) == 0,
	      "a receive, then Error");
	CHECK(channel_ready(ch, 10000), "a flushed (unsuccessful) receive raises the solicited-only event");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (channel_ready(ch, 0)) {
		CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq, "get_cq_event");
		ibv_ack_cq_events(rcq, 1);
	}
	CHECK(poll_n(rcq, wc, 1) == 1 && wc[0].wr_id == 77 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	      "the flushed receive");
	/* A receive posted to a QP in Error is flushed by the post itself, and its completion
	 * raises the armed channel's event as any other does. */
	CHECK(ibv_req_notify_cq(rcq, 0) == 0, "arm rcq");
	rwr.wr_id = 78;
	CHECK(ibv_post_recv(p, &rwr, &rbad) == 0, "post_recv in Error");
	CHECK(channel_ready(ch, 10000), "a receive flushed at post time raises the event");
	if (channel_ready(ch, 0)) {
		CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq, "get_cq_event");
		ibv_ack_cq_events(rcq, 1);
	}
	CHECK(poll_n(rcq, wc, 1) == 1 && wc[0].wr_id == 78 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	      "the receive posted in Error, flushed");
	CHECK(ibv_destroy_qp(p) == 0, "destroy p");

	/* ibv_reg_mr(3): an RDMA WRITE needs the target's REMOTE_WRITE. */
	struct ibv_qp *c = ibv_create_qp(pd, &ia), *d = ibv_create_qp(pd, &ia);
	CHECK(c && d && connect_rc(c, d->qp_num, gid, 0) == 0 &&
		      connect_rc(d, c->qp_num, gid, 0) == 0,
	      "connect c-d");
	if (!c || !d)
		return 1;
	swr.opcode = IBV_WR_RDMA_WRITE;
	swr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	swr.wr.rdma.rkey = mr->rkey;
	/* An rkey of a region without REMOTE_WRITE: the remote access error. */
	CHECK(ibv_post_send(c, &swr, &sbad) == 0 && poll_n(cq, wc, 1) == 1 &&
		      wc[0].status == IBV_WC_REM_ACCESS_ERR,
	      "ibv_reg_mr(3): WRITE to a region without REMOTE_WRITE: %s",
	      ibv_wc_status_str(wc[0].status));
	/* ibv_get_async_event(3): the responder's R_Key violation is its "local access
	 * violation" (IBV_EVENT_QP_ACCESS_ERR); its QP went to Error. */
	CHECK(next_async(ctx, &ev) == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == d,
	      "QP_ACCESS_ERR on the responder: got %d", ev.event_type);
	CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0, "destroy c, d");
	/* An event left unread when its QP is destroyed goes with the QP, and the async fd
	 * does not stay readable for it (the man page's poll-then-get loop would fail). */
	struct ibv_qp_init_attr gia = ia;
	gia.srq = srq;
	struct ibv_qp *g = ibv_create_qp(pd, &gia);
	CHECK(g && connect_rc(g, a->qp_num, gid, 0) == 0 &&
		      ibv_modify_qp(g, &err, IBV_QP_STATE) == 0 && async_pending(ctx, 10000),
	      "LAST_WQE_REACHED queued for g");
	CHECK(g && ibv_destroy_qp(g) == 0, "destroy g with its event unread");
	CHECK(!async_pending(ctx, 200), "no readable async fd for events of destroyed QPs");
	c = ibv_create_qp(pd, &ia);
	d = ibv_create_qp(pd, &ia);
	CHECK(c && d && connect_rc(c, d->qp_num, gid, 0) == 0 &&
		      connect_rc(d, c->qp_num, gid, 0) == 0,
	      "reconnect c-d");
	if (!c || !d)
		return 1;
	/* d receives into its own CQ; each of c's send completions (an ACK) follows d's
	 * receive completion, so three of them mean three unpolled entries on rcq2. */
	struct ibv_cq *rcq2 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr dia = ia;
	dia.recv_cq = rcq2;
	struct ibv_qp *e = ibv_create_qp(pd, &ia), *f = ibv_create_qp(pd, &dia);
	CHECK(rcq2 && e && f && connect_rc(e, f->qp_num, gid, 0) == 0 &&
		      connect_rc(f, e->qp_num, gid, 0) == 0,
	      "connect e-f");
	if (!rcq2 || !e || !f)
		return 1;
	swr.opcode = IBV_WR_SEND;
	rwr.wr_id = 5;
	for (int i = 0; i < 3; i++)
		CHECK(ibv_post_recv(f, &rwr, &rbad) == 0 && ibv_post_send(e, &swr, &sbad) == 0,
		      "post %d", i);
	CHECK(poll_n(cq, wc, 3) == 3, "three SENDs acknowledged");
	CHECK(ibv_resize_cq(rcq2, 2) == EINVAL, "resize below the 3 unpolled entries");
	CHECK(poll_n(rcq2, wc, 3) == 3, "the refused resize lost nothing");
	for (int i = 0; i < 3; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV,
		      "completion %d: %s", i, ibv_wc_status_str(wc[i].status));
	CHECK(ibv_resize_cq(rcq2, 2) == 0 && rcq2->cqe >= 2, "resize of the emptied CQ");
	CHECK(ibv_destroy_qp(e) == 0 && ibv_destroy_qp(f) == 0 && ibv_destroy_cq(rcq2) == 0,
	      "destroy e, f, rcq2");
	/* ibv_reg_mr(3): REMOTE_ATOMIC needs LOCAL_WRITE; local read is always enabled; a
	 * receive into a region without LOCAL_WRITE is a local protection error. */
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC) == NULL && errno == EINVAL,
	      "REMOTE_ATOMIC without LOCAL_WRITE: errno %d", errno);
	struct ibv_mr *ro = ibv_reg_mr(pd, buf + 12288, 4096, 0);
	CHECK(ro != NULL, "a read-only region: errno %d", errno);
	if (!ro)
		return 1;
	struct ibv_sge ros = {(uintptr_t)buf + 12288, 8, ro->lkey};
	swr.sg_list = &ros;
	swr.wr_id = 61;
	CHECK(ibv_post_recv(d, &rwr, &rbad) == 0 && ibv_post_send(c, &swr, &sbad) == 0 &&
		      poll_n(cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[1].status == IBV_WC_SUCCESS,
	      "a SEND gathered from a region with no access flags");
	struct ibv_recv_wr rro = {.wr_id = 62, .sg_list = &ros, .num_sge = 1};
	swr.sg_list = &ss;
	CHECK(ibv_post_recv(d, &rro, &rbad) == 0 && ibv_post_send(c, &swr, &sbad) == 0, "post");
	int got = poll_n(cq, wc, 2);
	int recv_i = got == 2 && wc[1].wr_id == 62 ? 1 : 0;
	CHECK(got == 2 && wc[recv_i].wr_id == 62 && wc[recv_i].status == IBV_WC_LOC_PROT_ERR,
	      "a receive into a region without LOCAL_WRITE: %s",
	      ibv_wc_status_str(wc[recv_i].status));

	/* ibv_create_ah_from_wc(3): a UD SEND from u1 to u2, answered with an AH made from the
	 * receive's completion and GRH. */
	struct ibv_qp *u[2];
	if (ud_pair(pd, cq, 1, u)) {
		CHECK(0, "two UD QPs in RTS: errno %d", errno);
		return 1;
	}
	/* Traffic class 0xb8 (DSCP 46, EF): it leaves as the IPv4 TOS, as rxe sends it. */
	struct ibv_ah_attr aa = {.is_global = 1,
				 .port_num = 1,
				 .grh = {.dgid = gid, .hop_limit = 64, .traffic_class = 0xb8}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "create_ah: errno %d", errno);
	if (!ah)
		return 1;
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "ibv_alloc_pd(3): a PD with an AH is busy");
	struct ibv_sge urs = {(uintptr_t)buf + 8192, 40 + 64, mr->lkey};
	struct ibv_recv_wr urw = {.wr_id = 70, .sg_list = &urs, .num_sge = 1};
	memcpy(buf, "ud-hello", 8);
	swr.sg_list = &ss;
	swr.opcode = IBV_WR_SEND;
	swr.wr_id = 71;
	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = u[1]->qp_num;
	swr.wr.ud.remote_qkey = 0x1234;
	CHECK(ibv_post_recv(u[1], &urw, &rbad) == 0 && ibv_post_send(u[0], &swr, &sbad) == 0,
	      "UD post");
	got = poll_n(cq, wc, 2);
	recv_i = got == 2 && wc[1].wr_id == 70 ? 1 : 0;
	struct ibv_wc rwc = wc[recv_i];
	CHECK(got == 2 && rwc.wr_id == 70 && rwc.status == IBV_WC_SUCCESS &&
		      (rwc.wc_flags & IBV_WC_GRH) && rwc.src_qp == u[0]->qp_num &&
		      rwc.byte_len == 40 + 8 && memcmp(buf + 8192 + 40, "ud-hello", 8) == 0,
	      "UD receive with a GRH");
	struct ibv_ah_attr from;
	memset(&from, 0, sizeof(from));
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, (struct ibv_grh *)(buf + 8192), &from) == 0 &&
		      from.is_global && memcmp(&from.grh.dgid, &gid, 16) == 0 && from.port_num == 1,
	      "init_ah_from_wc: the sender's GID as destination");
	/* libibverbs answers with the hop limit that came: the IPv4 header's TTL in the GRH
	 * area (byte 20 + 8), as rxe's 64 on loopback. */
	const unsigned char *ip4 = (const unsigned char *)buf + 8192 + 20;
	CHECK(from.grh.hop_limit == ip4[8] && from.grh.hop_limit == 64 &&
		      from.grh.traffic_class == ip4[1] && ip4[1] == 0xb8,
	      "init_ah_from_wc: hop limit %u from the TTL %u, traffic class %u from the TOS %u",
	      from.grh.hop_limit, ip4[8], from.grh.traffic_class, ip4[1]);
	CHECK(ibv_init_ah_from_wc(ctx, 2, &rwc, (struct ibv_grh *)(buf + 8192), &from) == -1,
	      "init_ah_from_wc on port 2: -1");
	/* Hand-made GRHs, decided as libibverbs decides them: the reply leaves from the GID
	 * the datagram was sent to, so a destination that is not a GID of the port fails, and
	 * an IPv6 header must carry UDP (RoCEv2) or an IBA header (RoCE v1, whose GIDs a
	 * softroce port does not have). */
	struct ibv_grh v6;
	memset(&v6, 0, sizeof(v6));
	v6.version_tclass_flow = htobe32((6u << 28) | (0x28u << 20) | 0x12345);
	v6.next_hdr = 17;
	v6.hop_limit = 9;
	v6.dgid = gid;
	memcpy(&v6.sgid, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x07", 16);
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, &v6, &from) == 0 && from.is_global &&
		      from.grh.sgid_index == 0 && from.grh.traffic_class == 0x28 &&
		      from.grh.flow_label == 0x12345 && from.grh.hop_limit == 9 &&
		      memcmp(&from.grh.dgid, &v6.sgid, 16) == 0,
	      "init_ah_from_wc from an IPv6 header sent to GID 0");
	v6.next_hdr = 0x1b;
	errno = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, &v6, &from) == -1,
	      "init_ah_from_wc: a RoCE v1 GRH finds no RoCE v1 GID");
	v6.next_hdr = 6;
	errno = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, &v6, &from) == -1 && errno == EPROTONOSUPPORT,
	      "init_ah_from_wc: next header TCP is EPROTONOSUPPORT (errno %d)", errno);
	v6.next_hdr = 17;
	memcpy(&v6.dgid, &v6.sgid, 16);
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, &v6, &from) == -1,
	      "init_ah_from_wc: sent to an address that is not a GID of the port");
	unsigned char v4area[40];
	memcpy(v4area, buf + 8192, 40);
	v4area[20 + 19] ^= 0x40; /* another destination address than ours */
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, (struct ibv_grh *)v4area, &from) == -1,
	      "init_ah_from_wc: an IPv4 header sent elsewhere");
	v4area[20] = 0x55; /* neither IPv6 nor IPv4 */
	errno = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, (struct ibv_grh *)v4area, &from) == -1 &&
		      errno == EPROTONOSUPPORT,
	      "init_ah_from_wc: an unknown IP version is EPROTONOSUPPORT (errno %d)", errno);
	/* As libibverbs: a completion without IBV_WC_GRH gives a local address vector (0,
	 * not global), which ibv_create_ah then refuses on RoCE. */
	struct ibv_wc local = rwc;
	local.wc_flags &= ~IBV_WC_GRH;
	struct ibv_ah_attr plain;
	memset(&plain, 0xa5, sizeof(plain));
	CHECK(ibv_init_ah_from_wc(ctx, 1, &local, (struct ibv_grh *)(buf + 8192), &plain) == 0 &&
		      !plain.is_global && plain.port_num == 1 && plain.sl == local.sl &&
		      plain.dlid == local.slid,
	      "init_ah_from_wc without a GRH: a local address vector");
	CHECK(ibv_create_ah(pd, &plain) == NULL, "no AH without a GRH on RoCE");
	struct ibv_ah *reply = ibv_create_ah_from_wc(pd, &rwc, (struct ibv_grh *)(buf + 8192), 1);
	CHECK(reply != NULL, "create_ah_from_wc: errno %d", errno);
	if (reply) {
		swr.wr.ud.ah = reply;
		swr.wr.ud.remote_qpn = rwc.src_qp;
		urw.wr_id = 72;
		CHECK(ibv_post_recv(u[0], &urw, &rbad) == 0 && ibv_post_send(u[1], &swr, &sbad) == 0 &&
			      poll_n(cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
			      wc[1].status == IBV_WC_SUCCESS,
		      "the reply through the AH from the completion arrives");
		CHECK(ibv_destroy_ah(reply) == 0, "destroy_ah: 0");
	}
	CHECK(ibv_destroy_ah(ah) == 0, "destroy_ah");

	/* ibv_poll_cq(3): a CQ overrun raises IBV_EVENT_CQ_ERR. */
	struct ibv_cq *tiny = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	/* The QP below holds 16 WRs: the CQ must overrun before. */
	CHECK(tiny && tiny->cqe >= 1 && tiny->cqe <= 8, "a CQ of 1: cqe %d", tiny ? tiny->cqe : -1);
	if (tiny && tiny->cqe <= 8) {
		struct ibv_qp_init_attr tia = ia;
		tia.send_cq = tiny;
		struct ibv_qp *t = ibv_create_qp(pd, &tia);
		CHECK(t && connect_rc(t, t->qp_num, gid, 0) == 0, "loopback QP on the tiny CQ");
		swr.opcode = IBV_WR_RDMA_WRITE;
		swr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		struct ibv_mr *rw = ibv_reg_mr(pd, buf + 4096, 4096,
					       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		swr.wr.rdma.rkey = rw ? rw->rkey : 0;
		for (int i = 0; t && i <= tiny->cqe; i++)
			CHECK(ibv_post_send(t, &swr, &sbad) == 0, "post %d", i);
		CHECK(next_async(ctx, &ev) == IBV_EVENT_CQ_ERR && ev.element.cq == tiny,
		      "CQ_ERR after cqe + 1 completions: got %d", ev.event_type);
		/* The QP that overran it is in error: its QP event follows or not; drain. */
		for (int i = 0; i < 16 && async_pending(ctx, 200) && next_async(ctx, &ev) >= 0; i++)
			;
		if (t)
			ibv_destroy_qp(t);
		if (rw)
			ibv_dereg_mr(rw);
		ibv_destroy_cq(tiny);
	}

	ibv_destroy_qp(u[0]);
	ibv_destroy_qp(u[1]);
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(c) == 0 &&
		      ibv_destroy_qp(d) == 0,
	      "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_dereg_mr(ro) == 0 && ibv_dereg_mr(mr) == 0,
	      "destroy srq, mrs");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(rcq) == 0 &&
		      ibv_destroy_comp_channel(ch) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
