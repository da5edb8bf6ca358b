/* The kernel's rdma_cm and librdmacm v44 where the man pages leave the rule to them, between
 * device softroce0 (argv[1], the server's) and softroce1 (argv[2], the client's):
 * rdma_reject(3) at every stage a request is in flight (ib_send_cm_rej: REQ_SENT, REP_RCVD,
 * REQ_RCVD, REP_SENT), and the private-data areas each CM message hands over (56, 196, 148;
 * a reject of 149 bytes EINVAL); a close-on-exec channel fd; rdma_resolve_addr(3) with a
 * source of another family than the destination (resolve_prepare_src: EINVAL), a family
 * librdmacm does not know (EINVAL), the IPoIB port space on RoCE (cma_acquire_dev_by_src_ip:
 * EINVAL, ADDR_ERROR), and rdma_resolve_route(3) with no time (EINVAL);
 * rdma_join_multicast(3)'s address vector (the kernel's zeroed member record: no traffic
 * class whatever the TOS) and one group joined twice, left once (the later join goes);
 * rdma_create_ep(3) honouring rdma_getaddrinfo(3)'s ai_route (as RDMA_OPTION_IB_PATH) and
 * ai_connect ("transferred as private data, with any user supplied private data following
 * it"); rdma_destroy_srq(3) of an XRC target taking the CQs made for it; a listener on
 * 127.0.0.1 hearing the device's address (cma_any_addr); a wildcard destination (0.0.0.0)
 * resolving to the device itself (cma_resolve_loopback).
 * Prints "N failures". */
#include <fcntl.h>
#include <pthread.h>
#include <sys/un.h>

#include "cm_common.h"

#define PORT 7880 /* this program's ports: PORT .. PORT + 9 */

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;

/* A client without a QP asks the listener at `port`; the request's event (unacked) through
 * *req. The client, or NULL. */
static struct rdma_cm_id *ask(int port, struct rdma_cm_event **req)
{
	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, port, 1);
	struct rdma_conn_param cp = {.qp_num = 0x123,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	if (rdma_connect(c, &cp))
		return NULL;
	*req = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	return *req ? c : NULL;
}

static struct rdma_conn_param accept_param = {
	.qp_num = 0x456, .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7};

static void rejects_while_a_request_is_in_flight(void)
{
	step = "rdma_reject at every stage";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT);
	struct rdma_cm_event *req = NULL;

	/* The active side, its REQ answered by a REP (no QP: CONNECT_RESPONSE, REP_RCVD). */
	struct rdma_cm_id *c = ask(PORT, &req);
	CHECK(c != NULL, "a request: errno %d", errno);
	if (!c)
		return;
	struct rdma_cm_id *s = req->id;
	/* The kernel hands over the whole private-data area of each CM message: a REQ's 56
	 * bytes after the CMA header, a REP's 196, a REJ's 148; a reject offers at most 148. */
	CHECK(req->param.conn.private_data && req->param.conn.private_data_len == 56,
	      "a request's private data is its whole area: %u bytes", req->param.conn.private_data_len);
	char too_long[149] = {0};
	errno = 0;
	CHECK(rdma_reject(s, too_long, sizeof(too_long)) == -1 && errno == EINVAL,
	      "a reject with 149 bytes of private data: errno %d", errno);
	CHECK(rdma_accept(s, &accept_param) == 0, "accepting: errno %d", errno);
	rdma_ack_cm_event(req);
	struct rdma_cm_event *rep = take(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c);
	CHECK(rep && rep->param.conn.private_data && rep->param.conn.private_data_len == 196,
	      "the reply, its private data a REP's whole area: %u bytes",
	      rep ? rep->param.conn.private_data_len : 0);
	if (rep)
		rdma_ack_cm_event(rep);
	CHECK(rdma_reject(c, "no", 2) == 0, "the active side rejects the reply: errno %d", errno);
	struct rdma_cm_event *rej = next_event(ch);
	CHECK(rej && rej->event == RDMA_CM_EVENT_REJECTED && rej->id == s && rej->status == 28 &&
		      rej->param.conn.private_data && rej->param.conn.private_data_len == 148 &&
		      !memcmp(rej->param.conn.private_data, "no", 2),
	      "the passive side is told (consumer-defined, 28) with the REJ's 148 bytes: %s %d %u",
	      rej ? rdma_event_str(rej->event) : "nothing", rej ? rej->status : 0,
	      rej ? rej->param.conn.private_data_len : 0);
	if (rej)
		rdma_ack_cm_event(rej);
	rdma_destroy_id(s);
	rdma_destroy_id(c);

	/* The passive side after its reply, before the RTU (REP_SENT). */
	c = ask(PORT, &req);
	CHECK(c != NULL, "a second request: errno %d", errno);
	if (!c)
		return;
	s = req->id;
	CHECK(rdma_accept(s, &accept_param) == 0, "accepting: errno %d", errno);
	rdma_ack_cm_event(req);
	CHECK(next_event_is(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c, 0), "the reply");
	CHECK(rdma_reject(s, NULL, 0) == 0, "the passive side takes its reply back: errno %d",
	      errno);
	CHECK(next_event_is(ch, RDMA_CM_EVENT_REJECTED, c, 28), "the active side is told");
	rdma_destroy_id(s);
	rdma_destroy_id(c);

	/* The active side before any answer (REQ_SENT): the request is withdrawn. Its REJ names
	 * no peer id yet, so the kernel's CM drops it there (cm_acquire_rejected_id): the
	 * request still arrives, and the server's answer reaches a requester that is done. */
	c = resolved_on(ch, client_ip, server_ip, PORT, 1);
	struct rdma_conn_param cp = {.qp_num = 0x789, .responder_resources = 1, .initiator_depth = 1};
	CHECK(rdma_connect(c, &cp) == 0 && rdma_reject(c, NULL, 0) == 0,
	      "the active side withdraws its request: errno %d", errno);
	req = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	if (req) {
		s = req->id;
		CHECK(rdma_reject(s, NULL, 0) == 0, "the server rejects it in turn: errno %d", errno);
		rdma_ack_cm_event(req);
		rdma_destroy_id(s);
	}
	errno = 0;
	CHECK(rdma_reject(c, NULL, 0) == -1 && errno == EINVAL, "nothing left to reject: errno %d",
	      errno);
	rdma_destroy_id(c);
	errno = 0;
	CHECK(rdma_reject(l, NULL, 0) == -1 && errno == EINVAL, "a listener rejects nothing: errno %d",
	      errno);
	rdma_destroy_id(l);
}

/* The next event is the id's ADDR_RESOLVED. */
static int next_is_resolved(struct rdma_cm_id *id)
{
	return next_event_is(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, 0);
}

static void addresses_the_kernel_refuses(void)
{
	step = "addresses";
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT + 1);
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons(PORT + 1),
				  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct sockaddr_un unix_addr = {.sun_family = AF_UNIX, .sun_path = "/nowhere"};
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	CHECK(fcntl(ch->fd, F_GETFD) & FD_CLOEXEC, "the channel's fd is close-on-exec (O_CLOEXEC)");
	errno = 0;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&unix_addr) == -1 && errno == EINVAL,
	      "binding to a family librdmacm does not know: errno %d", errno);
	errno = 0;
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&unix_addr, 2000) == -1 &&
		      errno == EINVAL,
	      "resolving one: errno %d", errno);
	errno = 0;
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&v6, 2000) == -1 &&
		      errno == EINVAL,
	      "an IPv4 source for an IPv6 destination: errno %d", errno);
	struct sockaddr_storage local;
	memcpy(&local, rdma_get_local_addr(id), sizeof(local));
	CHECK(local.ss_family == AF_INET && rdma_get_src_port(id) != 0,
	      "the id stays bound to its source (the kernel binds before it compares)");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		      next_is_resolved(id),
	      "then resolving IPv4: errno %d", errno);
	errno = 0;
	CHECK(rdma_resolve_route(id, 0) == -1 && errno == EINVAL,
	      "a route with no time to resolve it in: errno %d", errno);
	CHECK(rdma_resolve_route(id, 2000) == 0 &&
		      next_event_is(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id, 0),
	      "and with time: errno %d", errno);
	rdma_destroy_id(id);

	/* RDMA_PS_IPOIB only on an InfiniBand netdev. */
	struct rdma_cm_id *ipoib = NULL;
	CHECK(rdma_create_id(ch, &ipoib, NULL, RDMA_PS_IPOIB) == 0, "an IPoIB id: errno %d",
	      errno);
	errno = 0;
	CHECK(rdma_bind_addr(ipoib, (struct sockaddr *)&src) == -1 && errno == EINVAL,
	      "binding it to a RoCE device's address: errno %d", errno);
	CHECK(rdma_resolve_addr(ipoib, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		      next_event_is(ch, RDMA_CM_EVENT_ADDR_ERROR, ipoib, -EINVAL),
	      "resolving with it: ADDR_ERROR -EINVAL");
	rdma_destroy_id(ipoib);
}

static void multicast_records(void)
{
	step = "multicast";
	struct rdma_cm_id *m = NULL;
	struct sockaddr_in src = ipv4(client_ip, 0), group = ipv4("239.77.36.9", 0);
	uint8_t tos = 0x48;
	struct ibv_qp_init_attr ua = {.cap = {.max_send_wr = 2,
					      .max_recv_wr = 2,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_UD};
	CHECK(rdma_create_id(ch, &m, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_bind_addr(m, (struct sockaddr *)&src) == 0 &&
		      rdma_set_option(m, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0 &&
		      rdma_create_qp(m, NULL, &ua) == 0,
	      "a UD id with a TOS and a QP: errno %d", errno);
	CHECK(rdma_join_multicast(m, (struct sockaddr *)&group, NULL) == 0, "joining: errno %d",
	      errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_MULTICAST_JOIN, m);
	union ibv_gid mgid = {0};
	if (ev) {
		struct ibv_ah_attr *ah = &ev->param.ud.ah_attr;
		CHECK(ah->grh.traffic_class == 0 && ah->grh.flow_label == 0 && ah->sl == 0,
		      "the group's address vector has no traffic class (the TOS is the id's own "
		      "route's): tclass %#x flow %u sl %u",
		      ah->grh.traffic_class, ah->grh.flow_label, ah->sl);
		mgid = ah->grh.dgid;
		rdma_ack_cm_event(ev);
	}
	struct rdma_cm_join_mc_attr_ex ex = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		.addr = (struct sockaddr *)&group};
	CHECK(rdma_join_multicast_ex(m, &ex, NULL) == 0 &&
		      next_event_is(ch, RDMA_CM_EVENT_MULTICAST_JOIN, m, 0),
	      "joining the same group send-only too: errno %d", errno);
	CHECK(rdma_leave_multicast(m, (struct sockaddr *)&group) == 0, "leaving once: errno %d",
	      errno);
	CHECK(ibv_detach_mcast(m->qp, &mgid, 0) == 0,
	      "the later (send-only) join went: the QP is still attached for the first: errno %d",
	      errno);
	rdma_destroy_qp(m);
	rdma_destroy_id(m);
}

static struct rdma_cm_id *sync_listener;
static char seen[64];
static int seen_len;

/* Takes one request, records its private data, accepts it. */
static void *serve_one(void *arg)
{
	(void)arg;
	struct rdma_cm_id *s = NULL;
	if (rdma_get_request(sync_listener, &s))
		return NULL;
	int n = s->event->param.conn.private_data_len;
	seen_len = n < (int)sizeof(seen) ? n : (int)sizeof(seen);
	memcpy(seen, s->event->param.conn.private_data, seen_len);
	rdma_accept(s, NULL);
	return s;
}

static void endpoints_from_addrinfo(void)
{
	step = "rdma_create_ep and rdma_addrinfo";
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP};
	struct rdma_addrinfo *passive = NULL, *active = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%d", PORT + 3);
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 2,
					      .max_recv_wr = 2,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	CHECK(rdma_getaddrinfo(server_ip, port, &hints, &passive) == 0 &&
		      rdma_create_ep(&sync_listener, passive, NULL, &qa) == 0 &&
		      rdma_listen(sync_listener, 4) == 0,
	      "a synchronous listener: errno %d", errno);
	hints.ai_flags = 0;
	CHECK(rdma_getaddrinfo(server_ip, port, &hints, &active) == 0, "the active side's lookup");
	if (!sync_listener || !active)
		return;
	/* A path record and private data the result carries, as an ibacm would give them. */
	struct ibv_path_data route = {.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
					       IBV_PATH_FLAG_BIDIRECTIONAL};
	route.path.flowlabel_hoplimit = htobe32(9);
	route.path.tclass = 0x20;
	route.path.qosclass_sl = htobe16(3);
	route.path.mtu = 2 << 6 | IBV_MTU_256;
	route.path.packetlifetime = 2 << 6 | 14;
	route.path.reversible_numpath = IBV_PATH_RECORD_REVERSIBLE | 1;
	route.path.pkey = htobe16(0xffff);
	char hdr[] = "HDR";
	active->ai_route = &route;
	active->ai_route_len = sizeof(route);
	active->ai_connect = hdr;
	active->ai_connect_len = 3;
	struct rdma_cm_id *c = NULL;
	struct ibv_qp_init_attr ca = qa;
	CHECK(rdma_create_ep(&c, active, NULL, &ca) == 0, "the active endpoint: errno %d", errno);
	active->ai_route = NULL;
	active->ai_route_len = 0;
	active->ai_connect = NULL;
	active->ai_connect_len = 0;
	if (c) {
		struct ibv_sa_path_rec *p = c->route.path_rec;
		CHECK(p && p->mtu == IBV_MTU_256 && p->traffic_class == 0x20 && p->hop_limit == 9 &&
			      p->sl == 3,
		      "its route is ai_route's record: mtu %u tclass %#x hop %u sl %u",
		      p ? p->mtu : 0, p ? p->traffic_class : 0, p ? p->hop_limit : 0,
		      p ? p->sl : 0);
		/* A server thread, since both ends are synchronous. */
		pthread_t th;
		pthread_create(&th, NULL, serve_one, NULL);
		struct rdma_conn_param cp = {.private_data = "USER",
					     .private_data_len = 4,
					     .responder_resources = 1,
					     .initiator_depth = 1,
					     .retry_count = 7,
					     .rnr_retry_count = 7};
		CHECK(rdma_connect(c, &cp) == 0, "connecting: errno %d", errno);
		void *s = NULL;
		pthread_join(th, &s);
		CHECK(seen_len >= 7 && memcmp(seen, "HDRUSER", 7) == 0,
		      "the server saw ai_connect, then the user's data: \"%.7s\"", seen);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr i;
		CHECK(ibv_query_qp(c->qp, &a, IBV_QP_PATH_MTU, &i) == 0 && a.path_mtu == IBV_MTU_256,
		      "the connection runs at the record's MTU: %d", a.path_mtu);
		/* Destroyed connected: a synchronous rdma_disconnect would wait for the other end,
		 * on this same thread. */
		if (s)
			rdma_destroy_ep(s);
		rdma_destroy_ep(c);
	}
	rdma_destroy_ep(sync_listener);
	rdma_freeaddrinfo(passive);
	rdma_freeaddrinfo(active);
}

static void xrc_target_srq(void)
{
	step = "rdma_destroy_srq of an XRC target";
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE,
				      .ai_port_space = RDMA_PS_IB,
				      .ai_qp_type = IBV_QPT_XRC_RECV};
	struct rdma_addrinfo *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%d", PORT + 4);
	struct rdma_cm_id *x = NULL;
	CHECK(rdma_getaddrinfo(server_ip, port, &hints, &res) == 0 &&
		      rdma_create_ep(&x, res, NULL, NULL) == 0,
	      "an XRC target endpoint: errno %d", errno);
	if (!x)
		return;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	CHECK(rdma_create_srq(x, NULL, &sa) == 0 && x->recv_cq && x->recv_cq_channel,
	      "its SRQ, with a CQ and channel made for it: errno %d", errno);
	rdma_destroy_srq(x);
	CHECK(!x->srq && !x->recv_cq && !x->recv_cq_channel,
	      "rdma_destroy_srq takes the CQ and channel too (librdmacm's ucma_destroy_cqs)");
	rdma_destroy_ep(x);
	rdma_freeaddrinfo(res);
}

/* A listener bound to 127.0.0.1 (cma_any_addr: loopback is a wildcard, the id gets no
 * device and rdma_listen listens on all of them) hears a request for the server device's own
 * address, as rping -s -a 127.0.0.1 does on a real stack. */
static void loopback_listener_is_a_wildcard(void)
{
	step = "a listener on 127.0.0.1";
	struct rdma_cm_id *l = listening_on(ch, "127.0.0.1", PORT + 5);
	struct rdma_cm_event *req = NULL;
	struct rdma_cm_id *c = ask(PORT + 5, &req);
	CHECK(c && req && req->listen_id == l,
	      "the request for %s reached the 127.0.0.1 listener", server_ip);
	if (req) {
		CHECK(rdma_reject(req->id, NULL, 0) == 0, "reject it");
		rdma_ack_cm_event(req);
		CHECK(next_event_is(ch, RDMA_CM_EVENT_REJECTED, c, 28), "the client is told");
	}
	if (c)
		rdma_destroy_id(c);
	rdma_destroy_id(l);
}

/* rdma_resolve_addr to 0.0.0.0 (cma_any_addr(dst) -> cma_resolve_loopback): the
 * destination GID is the source's own, so the request reaches a listener on the device the
 * id resolved from. */
static void wildcard_destination_is_this_device(void)
{
	step = "a wildcard destination";
	struct rdma_cm_id *l = listening_on(ch, "0.0.0.0", PORT + 6);
	struct rdma_cm_id *c = resolved_on(ch, client_ip, "0.0.0.0", PORT + 6, 1);
	CHECK(!memcmp(&c->route.addr.addr.ibaddr.dgid, &c->route.addr.addr.ibaddr.sgid,
		      sizeof(union ibv_gid)),
	      "the destination GID of 0.0.0.0 is the source's (%s)", client_ip);
	struct rdma_conn_param cp = {.qp_num = 0x123, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	struct rdma_cm_event *req = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(req && req->listen_id == l, "the wildcard listener hears the request");
	if (req) {
		CHECK(rdma_reject(req->id, NULL, 0) == 0, "reject it");
		rdma_ack_cm_event(req);
		CHECK(next_event_is(ch, RDMA_CM_EVENT_REJECTED, c, 28), "the client is told");
	}
	rdma_destroy_id(c);
	rdma_destroy_id(l);
}

int main(int argc, char **argv)
{
	ch = two_device_start(argc, argv, &server_ip, &client_ip);
	rejects_while_a_request_is_in_flight();
	addresses_the_kernel_refuses();
	multicast_records();
	endpoints_from_addrinfo();
	xrc_target_srq();
	loopback_listener_is_a_wildcard();
	wildcard_destination_is_this_device();
	return two_device_end(ch);
}
