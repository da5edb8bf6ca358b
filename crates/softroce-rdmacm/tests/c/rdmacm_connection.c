/* rdma_cm connections, rule by rule from the librdmacm man pages, between a listener on
 * device softroce0 (argv[1]) and clients on softroce1 (argv[2]) in one process:
 * rdma_get_cm_event(3)'s CONN EVENT DATA (private data, the crossed responder resources and
 * initiator depth, retry counts, srq, qp_num), rdma_connect(3)'s and rdma_accept(3)'s
 * InfiniBand specifics (3-bit retry counts, RNR NAK timer 0, private data limits),
 * rdma_reject(3) with private data, rdma_disconnect(3) (QP to the error state, posted work
 * flushed, DISCONNECTED on both sides), rdma_establish(3) for an id without a QP, and
 * rdma_create_srq(3). Prints "N failures". */
#include "cm_common.h"

#define PORT 7610

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;
static struct rdma_cm_id *listener;

/* A client id on softroce1 with its route to the listener resolved. */
static struct rdma_cm_id *resolved_client(void)
{
	return resolved_on(ch, client_ip, server_ip, PORT, 1);
}

static struct ibv_qp_init_attr rc_attr(void)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 8,
					     .max_recv_wr = 8,
					     .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};
	return a;
}

static int qp_state(struct ibv_qp *qp, struct ibv_qp_attr *attr)
{
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(qp, attr, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER |
					   IBV_QP_DEST_QPN | IBV_QP_MAX_QP_RD_ATOMIC |
					   IBV_QP_MAX_DEST_RD_ATOMIC,
			 &init))
		return -1;
	return attr->qp_state;
}

static int same_addr(struct sockaddr *a, const char *ip, int port)
{
	struct sockaddr_in *in = (struct sockaddr_in *)a;
	struct sockaddr_in want = ipv4(ip, port);
	return in->sin_family == AF_INET && in->sin_addr.s_addr == want.sin_addr.s_addr &&
	       (port < 0 || in->sin_port == want.sin_port);
}

/* The whole life of one connection, checking what each side is told and what its QP is. */
static void connection_parameters_data_and_disconnect(void)
{
	static const char hello_c[] = "hello-from-client", hello_s[] = "hello-from-server";
	struct rdma_cm_id *c = resolved_client(), *s = NULL;
	struct ibv_qp_init_attr ca = rc_attr(), sa = rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0, "client QP: errno %d", errno);
	struct rdma_conn_param cp = {.private_data = hello_c,
				     .private_data_len = sizeof(hello_c),
				     .responder_resources = 2,
				     .initiator_depth = 1,
				     .flow_control = 1,
				     .retry_count = 6,
				     .rnr_retry_count = 5};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect: errno %d", errno);

	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	s = ev->id;
	struct rdma_conn_param *rq = &ev->param.conn;
	/* rdma_get_cm_event(3): id is a new id, listen_id the listener; the new id is bound to
	 * the device (rdma_accept(3)). */
	CHECK(s != listener && ev->listen_id == listener, "id %p, listen_id %p, listener %p",
	      (void *)s, (void *)ev->listen_id, (void *)listener);
	CHECK(s->verbs != NULL && s->verbs != c->verbs, "the new id is on the server's device");
	/* private_data: what the remote sent; the buffer may be larger, the rest zeroed. */
	CHECK(rq->private_data && rq->private_data_len >= sizeof(hello_c) &&
		      memcmp(rq->private_data, hello_c, sizeof(hello_c)) == 0,
	      "the client's private data (len %u)", rq->private_data_len);
	int zeroed = 1;
	for (unsigned i = sizeof(hello_c); rq->private_data && i < rq->private_data_len; i++)
		zeroed &= ((const uint8_t *)rq->private_data)[i] == 0;
	CHECK(zeroed, "the private data buffer beyond what was sent is zeroed");
	/* responder_resources matches the remote's initiator depth, and vice versa. */
	CHECK(rq->responder_resources == 1 && rq->initiator_depth == 2,
	      "crossed: responder_resources %u (want 1), initiator_depth %u (want 2)",
	      rq->responder_resources, rq->initiator_depth);
	CHECK(rq->retry_count == 6 && rq->rnr_retry_count == 5, "retry %u, rnr retry %u",
	      rq->retry_count, rq->rnr_retry_count);
	CHECK(rq->qp_num == c->qp->qp_num && rq->srq == 0, "qp_num %#x (want %#x), srq %u",
	      rq->qp_num, c->qp->qp_num, rq->srq);
	CHECK(rq->flow_control == 1, "flow_control %u", rq->flow_control);

	CHECK(rdma_create_qp(s, NULL, &sa) == 0, "server QP: errno %d", errno);
	struct rdma_conn_param ap = {.private_data = hello_s,
				     .private_data_len = sizeof(hello_s),
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .rnr_retry_count = 3};
	CHECK(rdma_accept(s, &ap) == 0, "rdma_accept: errno %d", errno);
	rdma_ack_cm_event(ev);

	/* Both sides are told; the active side sees the passive side's parameters. */
	for (int i = 0; i < 2; i++) {
		ev = next_event(ch);
		CHECK(ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->status == 0,
		      "ESTABLISHED, got %s", ev ? rdma_event_str(ev->event) : "nothing");
		if (!ev)
			return;
		if (ev->id == c) {
			struct rdma_conn_param *e = &ev->param.conn;
			CHECK(e->private_data && e->private_data_len >= sizeof(hello_s) &&
				      memcmp(e->private_data, hello_s, sizeof(hello_s)) == 0,
			      "the server's private data");
			CHECK(e->responder_resources == 1 && e->initiator_depth == 1,
			      "responder_resources %u, initiator_depth %u", e->responder_resources,
			      e->initiator_depth);
			CHECK(e->qp_num == s->qp->qp_num, "remote qp_num %#x (want %#x)",
			      e->qp_num, s->qp->qp_num);
		} else {
			CHECK(ev->id == s, "ESTABLISHED for an unknown id");
		}
		rdma_ack_cm_event(ev);
	}

	/* rdma_notify(3): EISCONN when the CM has established the connection already;
	 * rdma_establish(3) is not for an id with a QP. */
	errno = 0;
	CHECK(rdma_notify(c, IBV_EVENT_COMM_EST) == -1 && errno == EISCONN,
	      "rdma_notify on the established client: errno %d", errno);
	errno = 0;
	CHECK(rdma_notify(s, IBV_EVENT_COMM_EST) == -1 && errno == EISCONN,
	      "rdma_notify on the established server: errno %d", errno);
	errno = 0;
	CHECK(rdma_establish(c) == -1 && errno == EINVAL, "rdma_establish with a QP: errno %d",
	      errno);

	/* The CMs brought both QPs to RTS with the negotiated values: both retry the
	 * client's retry_count; each retries RNR as often as the other side asked; the RNR
	 * NAK timer is 0 (655 ms) (rdma_connect(3), INFINIBAND SPECIFIC). */
	struct ibv_qp_attr cq_attr, sq_attr;
	CHECK(qp_state(c->qp, &cq_attr) == IBV_QPS_RTS && qp_state(s->qp, &sq_attr) == IBV_QPS_RTS,
	      "both QPs in RTS");
	CHECK(cq_attr.retry_cnt == 6 && sq_attr.retry_cnt == 6, "retry_cnt client %u server %u",
	      cq_attr.retry_cnt, sq_attr.retry_cnt);
	CHECK(sq_attr.rnr_retry == 5 && cq_attr.rnr_retry == 3,
	      "rnr_retry: server %u (client asked 5), client %u (server asked 3)",
	      sq_attr.rnr_retry, cq_attr.rnr_retry);
	CHECK(cq_attr.min_rnr_timer == 0 && sq_attr.min_rnr_timer == 0,
	      "min_rnr_timer client %u server %u", cq_attr.min_rnr_timer, sq_attr.min_rnr_timer);
	CHECK(cq_attr.dest_qp_num == s->qp->qp_num && sq_attr.dest_qp_num == c->qp->qp_num,
	      "each QP is connected to the other");
	CHECK(cq_attr.max_rd_atomic >= 1 && sq_attr.max_dest_rd_atomic >= 1,
	      "RDMA READs allowed: client max_rd_atomic %u, server max_dest_rd_atomic %u",
	      cq_attr.max_rd_atomic, sq_attr.max_dest_rd_atomic);
	/* rdma_get_peer_addr / rdma_get_local_addr name both ends. */
	CHECK(same_addr(rdma_get_peer_addr(c), server_ip, PORT) &&
		      same_addr(rdma_get_local_addr(s), server_ip, PORT) &&
		      same_addr(rdma_get_local_addr(c), client_ip, -1) &&
		      same_addr(rdma_get_peer_addr(s), client_ip, -1),
	      "the addresses of both ends");
	CHECK(rdma_get_src_port(c) == rdma_get_dst_port(s), "client port %u, server sees %u",
	      ntohs(rdma_get_src_port(c)), ntohs(rdma_get_dst_port(s)));

	/* One-sided data with rdma_verbs.h: WRITE into and READ from the server's memory. */
	uint64_t remote = 0, local = 0x5eed;
	struct ibv_mr *rmr = ibv_reg_mr(s->pd, &remote, sizeof(remote),
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *lmr = rdma_reg_read(c, &local, sizeof(local));
	struct ibv_wc wc;
	CHECK(rmr && lmr, "registrations");
	if (rmr && lmr) {
		CHECK(rdma_post_write(c, NULL, &local, sizeof(local), lmr, IBV_SEND_SIGNALED,
				      (uintptr_t)&remote, rmr->rkey) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      remote == 0x5eed,
		      "RDMA WRITE: status %d, remote %#lx", wc.status, (unsigned long)remote);
		remote = 0xfeed;
		CHECK(rdma_post_read(c, NULL, &local, sizeof(local), lmr, IBV_SEND_SIGNALED,
				     (uintptr_t)&remote, rmr->rkey) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      local == 0xfeed,
		      "RDMA READ: status %d, local %#lx", wc.status, (unsigned long)local);
	}

	/* rdma_disconnect(3): the QP goes to the error state, posted work is flushed, and
	 * DISCONNECTED comes on both sides once both have disconnected. */
	uint64_t sink;
	struct ibv_mr *smr = rdma_reg_msgs(s, &sink, sizeof(sink));
	CHECK(smr && rdma_post_recv(s, (void *)0x77, &sink, sizeof(sink), smr) == 0,
	      "a receive posted on the server");
	CHECK(rdma_disconnect(c) == 0, "client rdma_disconnect: errno %d", errno);
	CHECK(qp_state(c->qp, &cq_attr) == IBV_QPS_ERR, "the client's QP is in the error state");
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, s, NULL) == 0, "the server is told");
	CHECK(rdma_disconnect(s) == 0, "server rdma_disconnect: errno %d", errno);
	CHECK(qp_state(s->qp, &sq_attr) == IBV_QPS_ERR, "the server's QP is in the error state");
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, c, NULL) == 0, "the client is told");
	CHECK(rdma_get_recv_comp(s, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR &&
		      wc.wr_id == 0x77,
	      "the posted receive is flushed: status %s", ibv_wc_status_str(wc.status));

	if (smr)
		rdma_dereg_mr(smr);
	if (lmr)
		rdma_dereg_mr(lmr);
	if (rmr)
		ibv_dereg_mr(rmr);
	rdma_destroy_qp(s);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the ids");
}

/* The next event is REJECTED for `c` with reason 28 (consumer-defined under InfiniBand,
 * rdma_get_cm_event(3)), carrying `data` (NULL: none expected); acked. */
static void expect_rejected(struct rdma_cm_id *c, const char *data, size_t len)
{
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev && ev->id == c && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28,
	      "REJECTED with reason 28, got %s status %d", ev ? rdma_event_str(ev->event) : "none",
	      ev ? ev->status : 0);
	if (ev && data)
		CHECK(ev->param.conn.private_data && ev->param.conn.private_data_len >= len &&
			      memcmp(ev->param.conn.private_data, data, len) == 0,
		      "the reject's private data");
	if (ev)
		rdma_ack_cm_event(ev);
}

/* The private data limits of rdma_connect(3) (56 bytes for RDMA_PS_TCP) and rdma_accept(3)
 * (196): more is EINVAL; an accept that fails so rejects the request (as the kernel's). */
static void private_data_limits(void)
{
	struct rdma_cm_id *c = resolved_client();
	struct ibv_qp_init_attr ca = rc_attr(), sa = rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0, "client QP: errno %d", errno);
	char big[197] = {0};
	struct rdma_conn_param too_much = {.private_data = big, .private_data_len = 57};
	errno = 0;
	CHECK(rdma_connect(c, &too_much) == -1 && errno == EINVAL,
	      "57 bytes of connect private data: errno %d", errno);
	struct rdma_conn_param cp = {.private_data = big,
				     .private_data_len = 56,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "56 bytes of connect private data: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	struct rdma_cm_id *s = ev->id;
	CHECK(rdma_create_qp(s, NULL, &sa) == 0, "server QP: errno %d", errno);
	too_much.private_data_len = sizeof(big);
	errno = 0;
	CHECK(rdma_accept(s, &too_much) == -1 && errno == EINVAL,
	      "197 bytes of accept private data: errno %d", errno);
	rdma_ack_cm_event(ev);
	expect_rejected(c, NULL, 0);
	rdma_destroy_qp(s);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the ids");
}

/* rdma_reject(3): the client learns the reason and the private data. rdma_create_srq(3): a
 * QP made on an id with an SRQ uses it, and the request says so. */
static void reject_and_srq(void)
{
	struct rdma_cm_id *c = resolved_client();
	struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 8, .max_sge = 1}};
	CHECK(rdma_create_srq(c, NULL, &srq_attr) == 0 && c->srq != NULL,
	      "rdma_create_srq: errno %d", errno);
	CHECK(srq_attr.attr.max_wr >= 8, "the SRQ's actual size is returned: %u",
	      srq_attr.attr.max_wr);
	struct ibv_qp_init_attr ca = rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0 && c->qp && ca.srq == c->srq,
	      "a QP on an id with an SRQ uses it");
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	struct rdma_cm_id *s = ev->id;
	CHECK(ev->param.conn.srq == 1, "the request says the client uses an SRQ");
	static const char no[] = "go away";
	CHECK(rdma_reject(s, no, sizeof(no)) == 0, "rdma_reject: errno %d", errno);
	rdma_ack_cm_event(ev);
	expect_rejected(c, no, sizeof(no));
	rdma_destroy_qp(c);
	rdma_destroy_srq(c);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the ids");
}

/* rdma_establish(3): an active id without a QP gets CONNECT_RESPONSE (rdma_get_cm_event(3))
 * and completes the connection itself; the passive side then gets ESTABLISHED. */
static void establish_without_a_qp(void)
{
	struct rdma_cm_id *c = resolved_client();
	struct ibv_pd *pd = ibv_alloc_pd(c->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(c->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = rc_attr();
	qa.send_cq = qa.recv_cq = cq;
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : NULL;
	CHECK(qp != NULL, "a QP of the application's own");
	if (!qp)
		return;
	struct rdma_conn_param cp = {.qp_num = qp->qp_num, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect: errno %d", errno);
	/* Until the REP there is no peer QP or PSN: the kernel's cm_init_qp_rtr_attr and
	 * cm_init_qp_rts_attr refuse REQ_SENT, while INIT's attributes are there already. */
	for (enum ibv_qp_state st = IBV_QPS_INIT; st <= IBV_QPS_RTS; st++) {
		struct ibv_qp_attr early = {.qp_state = st};
		int early_mask = 0;
		errno = 0;
		int rc = rdma_init_qp_attr(c, &early, &early_mask);
		if (st == IBV_QPS_INIT)
			CHECK(rc == 0 && early_mask != 0, "INIT attributes while the REQ is out: errno %d", errno);
		else
			CHECK(rc == -1 && errno == EINVAL,
			      "state %d attributes before the REP: rc %d errno %d (want EINVAL)", st, rc, errno);
	}
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev && ev->param.conn.qp_num == qp->qp_num, "the request names the QP");
	if (!ev)
		return;
	struct rdma_cm_id *s = ev->id;
	struct ibv_qp_init_attr sa = rc_attr();
	CHECK(rdma_create_qp(s, NULL, &sa) == 0 && rdma_accept(s, NULL) == 0,
	      "accept with the request's parameters: errno %d", errno);
	rdma_ack_cm_event(ev);

	ev = take(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c);
	CHECK(ev != NULL, "CONNECT_RESPONSE on an id without a QP");
	if (ev) {
		CHECK(ev->param.conn.qp_num == s->qp->qp_num, "the response names the server's QP");
		rdma_ack_cm_event(ev);
	}
	/* The application brings its QP up with rdma_init_qp_attr, then establishes. */
	int ok = 1;
	for (enum ibv_qp_state st = IBV_QPS_INIT; st <= IBV_QPS_RTS && ok; st++) {
		struct ibv_qp_attr at = {.qp_state = st};
		int mask = 0;
		ok = rdma_init_qp_attr(c, &at, &mask) == 0 && ibv_modify_qp(qp, &at, mask) == 0;
		CHECK(ok, "rdma_init_qp_attr + ibv_modify_qp to state %d: errno %d", st, errno);
	}
	CHECK(rdma_establish(c) == 0, "rdma_establish: errno %d", errno);
	CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, s, NULL) == 0, "the server is established");

	CHECK(rdma_disconnect(c) == 0, "client rdma_disconnect");
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, s, NULL) == 0, "the server is told");
	CHECK(rdma_disconnect(s) == 0, "server rdma_disconnect");
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, c, NULL) == 0, "the client is told");
	rdma_destroy_qp(s);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the ids");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* RDMA_PS_UDP: rdma_connect(3) looks the remote QP up (SIDR); rdma_get_cm_event(3)'s UD EVENT
 * DATA on ESTABLISHED names the server's QP, the rdma_cm's Q_Key and an ah_attr with which
 * a datagram reaches the server, which sees the client in the GRH area. */
static void ud_service_lookup(void)
{
	struct rdma_event_channel *uch = rdma_create_event_channel();
	struct rdma_cm_id *ul = NULL, *c = NULL, *s = NULL;
	struct sockaddr_in at = ipv4(server_ip, PORT + 1), src = ipv4(client_ip, 0);
	CHECK(uch && rdma_create_id(uch, &ul, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_bind_addr(ul, (struct sockaddr *)&at) == 0 && rdma_listen(ul, 4) == 0,
	      "a UD listener: errno %d", errno);
	CHECK(rdma_create_id(uch, &c, NULL, RDMA_PS_UDP) == 0 && c->qp_type == IBV_QPT_UD &&
		      rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&at, 2000) ==
			      0 &&
		      expect(uch, RDMA_CM_EVENT_ADDR_RESOLVED, c, NULL) == 0 &&
		      rdma_resolve_route(c, 2000) == 0 &&
		      expect(uch, RDMA_CM_EVENT_ROUTE_RESOLVED, c, NULL) == 0,
	      "a resolved UD client: errno %d", errno);
	struct ibv_qp_init_attr ua = rc_attr();
	ua.qp_type = IBV_QPT_UD;
	struct ibv_qp_init_attr sa = ua;
	CHECK(rdma_create_qp(c, NULL, &ua) == 0, "client UD QP: errno %d", errno);
	static const char hi[] = "who serves?";
	struct rdma_conn_param cp = {.private_data = hi, .private_data_len = sizeof(hi)};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect (UD): errno %d", errno);
	struct rdma_cm_event *ev = take(uch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a UD service request");
	if (!ev)
		return;
	s = ev->id;
	CHECK(ev->param.ud.private_data && ev->param.ud.private_data_len >= sizeof(hi) &&
		      memcmp(ev->param.ud.private_data, hi, sizeof(hi)) == 0,
	      "the request's private data");
	CHECK(rdma_create_qp(s, NULL, &sa) == 0 && rdma_accept(s, NULL) == 0,
	      "the server accepts: errno %d", errno);
	rdma_ack_cm_event(ev);
	ev = take(uch, RDMA_CM_EVENT_ESTABLISHED, c);
	CHECK(ev != NULL, "ESTABLISHED on the UD client");
	if (!ev)
		return;
	CHECK(ev->param.ud.qp_num == s->qp->qp_num && ev->param.ud.qkey == RDMA_UDP_QKEY,
	      "the server's QP %#x (want %#x) and Q_Key %#x", ev->param.ud.qp_num,
	      s->qp->qp_num, ev->param.ud.qkey);
	struct ibv_ah *ah = ibv_create_ah(c->pd, &ev->param.ud.ah_attr);
	uint32_t qpn = ev->param.ud.qp_num;
	rdma_ack_cm_event(ev);
	CHECK(ah != NULL, "an AH from the event's ah_attr: errno %d", errno);

	/* A datagram to the looked-up QP arrives, the GRH area naming the client. */
	struct {
		struct ibv_grh grh;
		char text[16];
	} in = {0};
	char out[16] = "datagram";
	struct ibv_mr *imr = rdma_reg_msgs(s, &in, sizeof(in));
	struct ibv_mr *omr = rdma_reg_msgs(c, out, sizeof(out));
	struct ibv_wc wc;
	CHECK(imr && omr && rdma_post_recv(s, NULL, &in, sizeof(in), imr) == 0 && ah &&
		      rdma_post_ud_send(c, NULL, out, sizeof(out), omr, IBV_SEND_SIGNALED, ah, qpn) ==
			      0 &&
		      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "a UD send: status %s", ibv_wc_status_str(wc.status));
	CHECK(rdma_get_recv_comp(s, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == c->qp->qp_num &&
		      strcmp(in.text, "datagram") == 0,
	      "received: status %s, src_qp %#x, text %.16s", ibv_wc_status_str(wc.status),
	      wc.src_qp, in.text);
	if (imr)
		rdma_dereg_mr(imr);
	if (omr)
		rdma_dereg_mr(omr);
	if (ah)
		ibv_destroy_ah(ah);
	rdma_destroy_qp(s);
	rdma_destroy_qp(c);

	/* Nobody listens on PORT + 9: as the kernel's cma_sidr_rep_handler, the refusing
	 * SIDR_REP is UNREACHABLE with the SIDR status (1, IB_SIDR_UNSUPPORTED). */
	struct rdma_cm_id *n = NULL;
	struct sockaddr_in none = ipv4(server_ip, PORT + 9);
	CHECK(rdma_create_id(uch, &n, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_resolve_addr(n, (struct sockaddr *)&src, (struct sockaddr *)&none,
					2000) == 0 &&
		      expect(uch, RDMA_CM_EVENT_ADDR_RESOLVED, n, NULL) == 0 &&
		      rdma_resolve_route(n, 2000) == 0 &&
		      expect(uch, RDMA_CM_EVENT_ROUTE_RESOLVED, n, NULL) == 0,
	      "a resolved UD id: errno %d", errno);
	struct rdma_conn_param np = {.qp_num = 1};
	CHECK(rdma_connect(n, &np) == 0, "rdma_connect (UD, nobody listens): errno %d", errno);
	ev = next_event(uch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_UNREACHABLE && ev->status == 1 && ev->id == n,
	      "UNREACHABLE with SIDR status 1: got %s status %d",
	      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(n) == 0 && rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0 &&
		      rdma_destroy_id(ul) == 0,
	      "destroying the UD ids");
	rdma_destroy_event_channel(uch);
}

/* The kernel's rdma_cm binds a loopback address that no device has to the first device
 * (libfabric's verbs provider probes and listens on 127.0.0.1). (A loopback destination is
 * not routed back to the device itself as the kernel does: softroce's processes each have
 * their own device, usually on a 127.x address, which a connection must reach.) */
static void loopback_binds_to_the_first_device(void)
{
	struct rdma_cm_id *l = NULL;
	struct sockaddr_in lo = ipv4("127.0.0.1", PORT + 2);
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&lo) == 0 && l->verbs == listener->verbs &&
		      rdma_listen(l, 2) == 0,
	      "127.0.0.1 binds to the first device and listens: errno %d", errno);
	CHECK(same_addr(rdma_get_local_addr(l), "127.0.0.1", PORT + 2), "bound to 127.0.0.1");
	CHECK(l && rdma_destroy_id(l) == 0, "destroying the loopback listener");
}

/* rdma_connect(3) / rdma_accept(3): RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH ask for what
 * the device offers (librdmacm uses its max_qp_rd_atom / max_qp_init_rd_atom; libfabric's
 * verbs provider connects this way and then READs from the passive side's peer). */
static void max_depths_offer_what_the_device_has(void)
{
	struct rdma_cm_id *c = resolved_client(), *s = NULL;
	struct ibv_qp_init_attr ca = rc_attr(), sa = rc_attr();
	struct ibv_device_attr dev;
	CHECK(ibv_query_device(c->verbs, &dev) == 0, "ibv_query_device: errno %d", errno);
	CHECK(rdma_create_qp(c, NULL, &ca) == 0, "client QP: errno %d", errno);
	struct rdma_conn_param cp = {.responder_resources = RDMA_MAX_RESP_RES,
				     .initiator_depth = RDMA_MAX_INIT_DEPTH,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect with RDMA_MAX_*: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	s = ev->id;
	/* The request carries the device's limits, crossed. */
	CHECK(ev->param.conn.responder_resources == (uint8_t)dev.max_qp_init_rd_atom &&
		      ev->param.conn.initiator_depth == (uint8_t)dev.max_qp_rd_atom,
	      "request: responder_resources %u (want %d), initiator_depth %u (want %d)",
	      ev->param.conn.responder_resources, dev.max_qp_init_rd_atom,
	      ev->param.conn.initiator_depth, dev.max_qp_rd_atom);
	CHECK(rdma_create_qp(s, NULL, &sa) == 0, "server QP: errno %d", errno);
	struct rdma_conn_param ap = {.responder_resources = RDMA_MAX_RESP_RES,
				     .initiator_depth = RDMA_MAX_INIT_DEPTH,
				     .rnr_retry_count = 7};
	CHECK(rdma_accept(s, &ap) == 0, "rdma_accept with RDMA_MAX_*: errno %d", errno);
	rdma_ack_cm_event(ev);
	for (int i = 0; i < 2; i++) {
		ev = next_event(ch);
		CHECK(ev && ev->event == RDMA_CM_EVENT_ESTABLISHED, "ESTABLISHED, got %s",
		      ev ? rdma_event_str(ev->event) : "nothing");
		if (!ev)
			return;
		rdma_ack_cm_event(ev);
	}
	struct ibv_qp_attr cq_attr, sq_attr;
	CHECK(qp_state(c->qp, &cq_attr) == IBV_QPS_RTS && qp_state(s->qp, &sq_attr) == IBV_QPS_RTS,
	      "both QPs in RTS");
	CHECK(cq_attr.max_dest_rd_atomic > 0 && cq_attr.max_rd_atomic > 0 &&
		      sq_attr.max_dest_rd_atomic > 0 && sq_attr.max_rd_atomic > 0,
	      "READs allowed both ways: client %u/%u, server %u/%u (issue/serve)",
	      cq_attr.max_rd_atomic, cq_attr.max_dest_rd_atomic, sq_attr.max_rd_atomic,
	      sq_attr.max_dest_rd_atomic);

	/* Both directions of RDMA READ work, the passive side's included. */
	uint64_t at_client = 0xc11e, at_server = 0x5e4e, got_c = 0, got_s = 0;
	struct ibv_mr *cmr = rdma_reg_read(c, &at_client, sizeof(at_client));
	struct ibv_mr *smr = rdma_reg_read(s, &at_server, sizeof(at_server));
	struct ibv_mr *cdst = rdma_reg_msgs(c, &got_c, sizeof(got_c));
	struct ibv_mr *sdst = rdma_reg_msgs(s, &got_s, sizeof(got_s));
	struct ibv_wc wc = {0};
	CHECK(cmr && smr && cdst && sdst, "registrations");
	if (cmr && smr && cdst && sdst) {
		CHECK(rdma_post_read(s, NULL, &got_s, sizeof(got_s), sdst, IBV_SEND_SIGNALED,
				     (uintptr_t)&at_client, cmr->rkey) == 0 &&
			      rdma_get_send_comp(s, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      got_s == 0xc11e,
		      "the server READs the client: %s, got %#lx", ibv_wc_status_str(wc.status),
		      (unsigned long)got_s);
		CHECK(rdma_post_read(c, NULL, &got_c, sizeof(got_c), cdst, IBV_SEND_SIGNALED,
				     (uintptr_t)&at_server, smr->rkey) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      got_c == 0x5e4e,
		      "the client READs the server: %s, got %#lx", ibv_wc_status_str(wc.status),
		      (unsigned long)got_c);
	}
	if (cmr)
		rdma_dereg_mr(cmr);
	if (smr)
		rdma_dereg_mr(smr);
	if (cdst)
		rdma_dereg_mr(cdst);
	if (sdst)
		rdma_dereg_mr(sdst);
	CHECK(rdma_disconnect(c) == 0 && expect(ch, RDMA_CM_EVENT_DISCONNECTED, s, NULL) == 0 &&
		      rdma_disconnect(s) == 0 && expect(ch, RDMA_CM_EVENT_DISCONNECTED, c, NULL) == 0,
	      "disconnected both ways: errno %d", errno);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}

int main(int argc, char **argv)
{
	server_ip = argc > 2 ? argv[1] : "127.0.0.1";
	client_ip = argc > 2 ? argv[2] : "127.0.0.2";
	ch = rdma_create_event_channel();
	struct sockaddr_in at = ipv4(server_ip, PORT);
	CHECK(ch && rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(listener, (struct sockaddr *)&at) == 0 &&
		      rdma_listen(listener, 4) == 0,
	      "listening on %s:%d: errno %d", server_ip, PORT, errno);
	if (failures)
		return 1;
	connection_parameters_data_and_disconnect();
	max_depths_offer_what_the_device_has();
	private_data_limits();
	reject_and_srq();
	establish_without_a_qp();
	ud_service_lookup();
	loopback_binds_to_the_first_device();
	CHECK(rdma_destroy_id(listener) == 0, "destroying the listener");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
