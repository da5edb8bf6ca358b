/* rdma_join_multicast(3), rdma_join_multicast_ex(3), rdma_leave_multicast(3) on two devices
 * (argv[1] receives, argv[2] sends), as the kernel's rdma_cm runs them on RoCEv2: the
 * misuse each answers, the MULTICAST_JOIN event field by field, data sent through the
 * event's address vector, the QP attached when the event is retrieved (not before, not for
 * a send-only join, not without a QP), leaving stops delivery, a leave before the event
 * cancels the join, an attach that fails is a MULTICAST_ERROR, and destroying the id leaves.
 * Prints "0 failures" when every check held. */
#include "cm_common.h"

#define GROUP "239.79.3.1"
#define MSG 32
#define RECVS 16

struct side {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	char buf[RECVS][40 + MSG];
};

static int marker;

static struct rdma_cm_id *bound_id(struct rdma_event_channel *ch, const char *ip, int ps)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = ipv4(ip, 0);
	if (rdma_create_id(ch, &id, NULL, ps) || rdma_bind_addr(id, (struct sockaddr *)&a)) {
		fprintf(stderr, "create/bind %s: errno %d\n", ip, errno);
		exit(2);
	}
	return id;
}

/* A UD QP on the id (rdma_create_qp moves it to RTS), `RECVS` receives posted. */
static void with_qp(struct side *s)
{
	struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = RECVS,
					      .max_recv_wr = RECVS,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_UD,
				      .sq_sig_all = 1};
	if (rdma_create_qp(s->id, NULL, &ia)) {
		fprintf(stderr, "rdma_create_qp: errno %d\n", errno);
		exit(2);
	}
	s->mr = ibv_reg_mr(s->id->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < RECVS; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)s->buf[i], .length = 40 + MSG, .lkey = s->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(s->id->qp, &wr, &bad)) {
			fprintf(stderr, "post_recv: errno %d\n", errno);
			exit(2);
		}
	}
}

/* Receives completed on the side's QP within `ms` (success checked). */
static int received(struct side *s, int want, long ms)
{
	struct ibv_wc wc[RECVS];
	int n = poll_n_within(s->id->recv_cq, wc, want, ms);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV,
		      "receive %d: %s", i, ibv_wc_status_str(wc[i].status));
	return n;
}

/* Send `n` messages through `ah` to (qpn, qkey); wait for their completions. */
static void send_n(struct side *s, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, int n)
{
	static char msg[MSG] = "to the group";
	struct ibv_mr *mr = ibv_reg_mr(s->id->pd, msg, MSG, 0);
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = MSG, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = qkey;
		CHECK(ibv_post_send(s->id->qp, &wr, &bad) == 0, "post_send: errno %d", errno);
	}
	struct ibv_wc wc[RECVS];
	CHECK(poll_n(s->id->send_cq, wc, n) == n, "send completions");
	ibv_dereg_mr(mr);
}

static void misuse(struct rdma_event_channel *ch, const char *rx)
{
	struct sockaddr_in group = ipv4(GROUP, 0);
	struct rdma_cm_id *id = NULL;
	/* Not bound to a device: EINVAL (wildcard-bound has no device either). */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0, "create");
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL,
	      "join unbound: errno %d", errno);
	struct sockaddr_in any = ipv4("0.0.0.0", 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&any) == 0, "bind wildcard");
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL,
	      "join wildcard-bound: errno %d", errno);
	rdma_destroy_id(id);

	/* A connected port space's id is no UD id: EINVAL. */
	id = bound_id(ch, rx, RDMA_PS_TCP);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL,
	      "join on RDMA_PS_TCP: errno %d", errno);
	rdma_destroy_id(id);

	id = bound_id(ch, rx, RDMA_PS_UDP);
	CHECK(rdma_join_multicast(id, NULL, NULL) == -1 && errno == EINVAL, "NULL address");
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&any, NULL) == -1 && errno == EINVAL,
	      "zero address: errno %d", errno);
	/* The kernel has no IPv6 groups on RoCEv2 (-ENOTSUPP, 524). */
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "ff0e::79", &v6.sin6_addr);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&v6, NULL) == -1 && errno == 524,
	      "IPv6 group: errno %d", errno);
	/* rdma_join_multicast_ex's attribute checks (librdmacm's). */
	struct rdma_cm_join_mc_attr_ex ex = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED,
					     .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
					     .addr = (struct sockaddr *)&group};
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == ENOTSUP,
	      "reserved comp_mask: errno %d", errno);
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == EINVAL, "no address bit");
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == EINVAL, "no join flags bit");
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ex.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == EINVAL, "reserved flag");
	/* Nothing joined, nothing to leave. */
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == -1 && errno == EADDRNOTAVAIL,
	      "leave unjoined: errno %d", errno);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 0) == 0, "refused joins left events");
	rdma_destroy_id(id);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s RX_ADDRESS TX_ADDRESS\n", argv[0]);
		return 2;
	}
	const char *rx = argv[1], *tx = argv[2];
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in group = ipv4(GROUP, 0);
	misuse(ch, rx);

	/* The receiver joins with a QP: the event, field by field. */
	static struct side r, s, n;
	r.id = bound_id(ch, rx, RDMA_PS_UDP);
	with_qp(&r);
	CHECK(rdma_join_multicast(r.id, (struct sockaddr *)&group, &marker) == 0, "join: errno %d",
	      errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_MULTICAST_JOIN, r.id);
	CHECK(ev != NULL, "no MULTICAST_JOIN");
	if (!ev)
		return 1;
	struct rdma_ud_param ud = ev->param.ud;
	union ibv_gid mgid = {.raw = {[10] = 0xff, [11] = 0xff}};
	inet_pton(AF_INET, GROUP, &mgid.raw[12]);
	CHECK(ud.private_data == &marker, "private_data is not the join context");
	CHECK(ud.private_data_len == 0, "private_data_len %u", ud.private_data_len);
	CHECK(ud.qp_num == 0xFFFFFF, "qp_num %#x", ud.qp_num);
	CHECK(ud.qkey == RDMA_UDP_QKEY, "qkey %#x", ud.qkey);
	CHECK(ud.ah_attr.is_global == 1, "is_global");
	CHECK(!memcmp(ud.ah_attr.grh.dgid.raw, mgid.raw, 16), "dgid is not ::ffff:" GROUP);
	CHECK(ud.ah_attr.dlid == 0 && ud.ah_attr.sl == 0, "dlid %#x sl %d", ud.ah_attr.dlid,
	      ud.ah_attr.sl);
	CHECK(ud.ah_attr.port_num == r.id->port_num, "port_num %d", ud.ah_attr.port_num);
	CHECK(ud.ah_attr.grh.hop_limit == 64, "hop_limit %d", ud.ah_attr.grh.hop_limit);
	union ibv_gid sgid;
	CHECK(ibv_query_gid(r.id->verbs, 1, ud.ah_attr.grh.sgid_index, &sgid) == 0 &&
		      !memcmp(&sgid, &r.id->route.addr.addr.ibaddr.sgid, 16),
	      "sgid_index %d is not the id's GID", ud.ah_attr.grh.sgid_index);
	rdma_ack_cm_event(ev);

	/* The sender resolves the group from its own address and joins send-only: its QP is
	 * not attached, and it sends through the event's address vector. */
	CHECK(rdma_create_id(ch, &s.id, NULL, RDMA_PS_UDP) == 0, "create sender");
	struct sockaddr_in src = ipv4(tx, 0);
	CHECK(rdma_resolve_addr(s.id, (struct sockaddr *)&src, (struct sockaddr *)&group, 2000) == 0,
	      "resolve the group");
	CHECK(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, s.id, NULL) == 0, "ADDR_RESOLVED");
	with_qp(&s);
	struct rdma_cm_join_mc_attr_ex ex = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		.addr = (struct sockaddr *)&group};
	CHECK(rdma_join_multicast_ex(s.id, &ex, &s) == 0, "send-only join: errno %d", errno);
	ev = take(ch, RDMA_CM_EVENT_MULTICAST_JOIN, s.id);
	CHECK(ev != NULL, "no send-only MULTICAST_JOIN");
	if (!ev)
		return 1;
	CHECK(ev->param.ud.private_data == &s, "send-only join context");
	struct ibv_ah *ah = ibv_create_ah(s.id->pd, &ev->param.ud.ah_attr);
	uint32_t qpn = ev->param.ud.qp_num, qkey = ev->param.ud.qkey;
	rdma_ack_cm_event(ev);
	CHECK(ah != NULL, "create_ah from the event: errno %d", errno);
	send_n(&s, ah, qpn, qkey, 3);
	CHECK(received(&r, 3, 10000) == 3, "the joined receiver got the 3 messages");
	CHECK(received(&s, 1, 100) == 0, "the send-only member received");

	/* Joined without a QP: nothing is attached for the user, who attaches himself. */
	n.id = bound_id(ch, rx, RDMA_PS_UDP);
	CHECK(rdma_join_multicast(n.id, (struct sockaddr *)&group, NULL) == 0, "join without QP");
	CHECK(expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, n.id, NULL) == 0, "its event");
	with_qp(&n);
	send_n(&s, ah, qpn, qkey, 1);
	CHECK(received(&r, 1, 10000) == 1, "r still receives");
	CHECK(received(&n, 1, 100) == 0, "a QP created after the join was attached");
	CHECK(ibv_attach_mcast(n.id->qp, &mgid, 0) == 0, "the user's attach");
	send_n(&s, ah, qpn, qkey, 1);
	CHECK(received(&n, 1, 10000) == 1, "attached by hand, it receives");
	CHECK(received(&r, 1, 10000) == 1, "r too");
	/* Leaving detaches the id's QP, whoever attached it; then its QP can go. */
	CHECK(rdma_leave_multicast(n.id, (struct sockaddr *)&group) == 0, "leave n");
	CHECK(ibv_detach_mcast(n.id->qp, &mgid, 0) == EINVAL, "leave did not detach n's QP");

	/* Leaving stops delivery; leaving twice is EADDRNOTAVAIL. */
	CHECK(rdma_leave_multicast(r.id, (struct sockaddr *)&group) == 0, "leave r");
	CHECK(rdma_leave_multicast(r.id, (struct sockaddr *)&group) == -1 && errno == EADDRNOTAVAIL,
	      "leave twice: errno %d", errno);
	send_n(&s, ah, qpn, qkey, 1);
	CHECK(received(&r, 1, 200) == 0, "delivered after leaving");
	CHECK(received(&n, 1, 10) == 0, "delivered to n after leaving");

	/* A leave before the join's event was retrieved cancels the join: no event. */
	CHECK(rdma_join_multicast(r.id, (struct sockaddr *)&group, NULL) == 0, "join again");
	CHECK(rdma_leave_multicast(r.id, (struct sockaddr *)&group) == 0, "leave at once");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 100) == 0, "the cancelled join still reported an event");
	send_n(&s, ah, qpn, qkey, 1);
	CHECK(received(&r, 1, 200) == 0, "a cancelled join attached the QP");

	/* A unicast IPv4 address makes an MGID no QP can attach to: MULTICAST_ERROR. */
	struct sockaddr_in unicast = ipv4(rx, 0);
	CHECK(rdma_join_multicast(r.id, (struct sockaddr *)&unicast, &marker) == 0,
	      "join a unicast address");
	ev = next_event(ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_MULTICAST_ERROR && ev->status != 0 &&
		      ev->param.ud.private_data == &marker,
	      "unicast group: %s status %d", ev ? rdma_event_str(ev->event) : "no event",
	      ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	CHECK(rdma_leave_multicast(r.id, (struct sockaddr *)&unicast) == 0, "leave it");

	/* Destroying an id leaves its groups: its QP, attached, is destroyed with it. */
	CHECK(rdma_join_multicast(r.id, (struct sockaddr *)&group, NULL) == 0, "join to destroy");
	CHECK(expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, r.id, NULL) == 0, "its event");
	send_n(&s, ah, qpn, qkey, 1);
	CHECK(received(&r, 1, 10000) == 1, "attached at retrieval");
	ibv_dereg_mr(r.mr);
	rdma_destroy_qp(r.id);
	CHECK(rdma_destroy_id(r.id) == 0, "destroy a joined id");

	ibv_destroy_ah(ah);
	ibv_dereg_mr(n.mr);
	rdma_destroy_qp(n.id);
	CHECK(rdma_destroy_id(n.id) == 0, "destroy n");
	CHECK(rdma_leave_multicast(s.id, (struct sockaddr *)&group) == 0, "leave s");
	ibv_dereg_mr(s.mr);
	rdma_destroy_qp(s.id);
	CHECK(rdma_destroy_id(s.id) == 0, "destroy s");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
