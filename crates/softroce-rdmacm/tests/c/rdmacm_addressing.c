/* rdma_cm before any connection, rule by rule from the librdmacm man pages: event channels
 * and their fd, ids and port spaces, binding and ports, address and route resolution,
 * synchronous ids, rdma_create_qp's defaults, rdma_init_qp_attr, rdma_getaddrinfo,
 * rdma_migrate_id, rdma_get_devices, rdma_event_str, rdma_set_option, rsockets.
 * Run with SOFTROCE_DEVICES=softroce0=<ADDR>[,softroce1=<FOREIGN>]; argv[1] is ADDR, argv[2]
 * (optional) an address of no host interface a second device is configured on. Prints
 * "N failures". */
#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "common.h"

static struct sockaddr_in ipv4(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* The next event on `ch`, expected to be `type` for `id`, acked; 0 on success. */
static int expect_event(struct rdma_event_channel *ch, struct rdma_cm_id *id, int type)
{
	struct rdma_cm_event *ev = NULL;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	int ok = ev->id == id && (int)ev->event == type && ev->status == 0;
	if (!ok)
		fprintf(stderr, "got %s status %d for id %p\n", rdma_event_str(ev->event), ev->status,
			(void *)ev->id);
	rdma_ack_cm_event(ev);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *me = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_cm_id *id = NULL, *other = NULL;
	struct rdma_cm_event *ev = NULL;

	/* rdma_create_event_channel(3): an fd that can be made non-blocking and polled. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "channel %p", (void *)ch);
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "rdma_get_cm_event(3): no event on a non-blocking channel is EAGAIN, got errno %d",
	      errno);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 0) == 0, "an empty channel does not poll readable");

	/* rdma_create_id(3): port spaces TCP, UDP, IB; anything else is refused. */
	errno = 0;
	CHECK(rdma_create_id(ch, &id, NULL, 0x4242) == -1 && errno == EINVAL,
	      "unknown port space: errno %d", errno);
	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "create TCP id");
	CHECK(id->channel == ch && id->context == (void *)0x1234 && id->ps == RDMA_PS_TCP &&
		      id->qp_type == IBV_QPT_RC && id->verbs == NULL,
	      "a new id: channel, context, ps, qp_type RC, no device yet");

	/* rdma_bind_addr(3): port 0 picks a port (rdma_get_src_port(3)); a specific address
	 * binds the device. */
	struct sockaddr_in a = ipv4(me, 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind %s:0, errno %d", me, errno);
	uint16_t port = ntohs(rdma_get_src_port(id));
	CHECK(port != 0, "rdma_get_src_port after binding port 0");
	CHECK(id->verbs != NULL && id->port_num == 1, "bound to the device (verbs %p, port %d)",
	      (void *)id->verbs, id->port_num);
	CHECK(rdma_get_dst_port(id) == 0, "no destination yet");
	errno = 0;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == -1 && errno == EINVAL,
	      "binding twice: errno %d", errno);

	/* The same port at the same address is in use; the id that holds it leaves it free. */
	CHECK(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP) == 0, "second id");
	struct sockaddr_in same = ipv4(me, port);
	errno = 0;
	CHECK(rdma_bind_addr(other, (struct sockaddr *)&same) == -1 && errno == EADDRINUSE,
	      "port %u taken: errno %d", port, errno);
	/* The same port number in another port space is another port. */
	struct rdma_cm_id *udp = NULL;
	CHECK(rdma_create_id(ch, &udp, NULL, RDMA_PS_UDP) == 0 && udp->qp_type == IBV_QPT_UD,
	      "UDP id is UD");
	CHECK(rdma_bind_addr(udp, (struct sockaddr *)&same) == 0,
	      "port %u in the UDP space, errno %d", port, errno);
	CHECK(rdma_destroy_id(udp) == 0, "destroy UDP id");
	/* An address of no host interface: EADDRNOTAVAIL (the kernel's answer). */
	struct sockaddr_in foreign = ipv4("192.0.2.1", 0);
	errno = 0;
	CHECK(rdma_bind_addr(other, (struct sockaddr *)&foreign) == -1 && errno == EADDRNOTAVAIL,
	      "foreign address: errno %d", errno);
	/* The same for a device configured on such an address: the kernel looks for the
	 * address's netdev before any device, and finds none. */
	if (argc > 2) {
		struct sockaddr_in configured = ipv4(argv[2], 0);
		errno = 0;
		CHECK(rdma_bind_addr(other, (struct sockaddr *)&configured) == -1 &&
			      errno == EADDRNOTAVAIL,
		      "a device's foreign address %s: errno %d", argv[2], errno);
	}

	/* rdma_resolve_addr(3) → RDMA_CM_EVENT_ADDR_RESOLVED, then rdma_resolve_route(3) →
	 * RDMA_CM_EVENT_ROUTE_RESOLVED with a path record. Resolving the route first fails. */
	errno = 0;
	CHECK(rdma_resolve_route(other, 1000) == -1 && errno == EINVAL,
	      "route before address: errno %d", errno);
	struct sockaddr_in dst = ipv4(me, 7471);
	CHECK(rdma_resolve_addr(other, NULL, (struct sockaddr *)&dst, 1000) == 0,
	      "resolve_addr, errno %d", errno);
	CHECK(poll(&pfd, 1, 1000) == 1, "the event makes the channel readable");
	CHECK(expect_event(ch, other, RDMA_CM_EVENT_ADDR_RESOLVED) == 0, "ADDR_RESOLVED");
	CHECK(other->verbs == id->verbs, "both ids on the one device context");
	CHECK(ntohs(rdma_get_dst_port(other)) == 7471, "rdma_get_dst_port(3)");
	CHECK(ntohs(rdma_get_src_port(other)) != 0, "an active id gets a source port");
	struct sockaddr_in *local = (struct sockaddr_in *)rdma_get_local_addr(other);
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(other);
	char lbuf[32] = "", pbuf[32] = "";
	inet_ntop(AF_INET, &local->sin_addr, lbuf, sizeof(lbuf));
	inet_ntop(AF_INET, &peer->sin_addr, pbuf, sizeof(pbuf));
	CHECK(local->sin_family == AF_INET && strcmp(lbuf, me) == 0, "local address %s", lbuf);
	CHECK(strcmp(pbuf, me) == 0, "peer address %s", pbuf);
	CHECK(rdma_resolve_route(other, 1000) == 0, "resolve_route, errno %d", errno);
	CHECK(expect_event(ch, other, RDMA_CM_EVENT_ROUTE_RESOLVED) == 0, "ROUTE_RESOLVED");
	CHECK(other->route.num_paths == 1 && other->route.path_rec != NULL &&
		      other->route.path_rec->pkey == htons(0xffff),
	      "one path record");
	union ibv_gid gid;
	CHECK(ibv_query_gid(other->verbs, 1, 0, &gid) == 0 &&
		      memcmp(&gid, &other->route.path_rec->sgid, 16) == 0 &&
		      memcmp(&gid, &other->route.addr.addr.ibaddr.sgid, 16) == 0,
	      "the path's source GID is the device's GID 0");
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(other->verbs, 1, &pa) == 0 &&
		      other->route.path_rec->mtu == pa.active_mtu,
	      "the path MTU is the port's active MTU");

	/* rdma_create_qp(3): NULL PD → the device's default PD; no CQs given → rdma_cm makes
	 * them with completion channels; a connected QP is ready to post receives (INIT). */
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1}};
	CHECK(rdma_create_qp(other, NULL, &qa) == 0, "rdma_create_qp, errno %d", errno);
	CHECK(other->qp && other->pd && other->send_cq && other->recv_cq &&
		      other->send_cq_channel && other->recv_cq_channel,
	      "QP, default PD, CQs and channels on the id");
	CHECK(qa.send_cq == other->send_cq && qa.recv_cq == other->recv_cq,
	      "the attributes come back with the CQs used");
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(ibv_query_qp(other->qp, &qattr, IBV_QP_STATE, &qinit) == 0 &&
		      qattr.qp_state == IBV_QPS_INIT,
	      "a connected QP starts in INIT (state %d)", qattr.qp_state);
	struct ibv_mr *mr = NULL;
	char buf[64];
	mr = ibv_reg_mr(other->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr ? mr->lkey : 0};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK(mr && ibv_post_recv(other->qp, &rwr, &bad) == 0, "posting a receive works");
	errno = 0;
	CHECK(rdma_create_qp(other, NULL, &qa) == -1 && errno == EINVAL,
	      "one QP per id: errno %d", errno);
	/* rdma_init_qp_attr(3): INIT attributes of a connected QP before a connection. */
	memset(&qattr, 0, sizeof(qattr));
	qattr.qp_state = IBV_QPS_INIT;
	int mask = 0;
	CHECK(rdma_init_qp_attr(other, &qattr, &mask) == 0 &&
		      (mask & (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)) ==
			      (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) &&
		      qattr.port_num == 1,
	      "init_qp_attr mask %#x port %d", mask, qattr.port_num);
	ibv_dereg_mr(mr);
	rdma_destroy_qp(other);
	CHECK(other->qp == NULL, "rdma_destroy_qp clears id->qp");

	/* A UD id's QP is ready to send at once (RTS) with rdma_cm's Q_Key. */
	struct rdma_cm_id *ud = NULL;
	CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0, "UD id");
	CHECK(rdma_resolve_addr(ud, NULL, (struct sockaddr *)&dst, 1000) == 0, "UD resolve");
	CHECK(expect_event(ch, ud, RDMA_CM_EVENT_ADDR_RESOLVED) == 0, "UD ADDR_RESOLVED");
	struct ibv_qp_init_attr ua = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
					      .max_recv_sge = 1}};
	CHECK(rdma_create_qp(ud, NULL, &ua) == 0, "UD rdma_create_qp, errno %d", errno);
	CHECK(ibv_query_qp(ud->qp, &qattr, IBV_QP_STATE | IBV_QP_QKEY, &qinit) == 0 &&
		      qattr.qp_state == IBV_QPS_RTS && qattr.qkey == RDMA_UDP_QKEY,
	      "UD QP in RTS (state %d) with Q_Key %#x", qattr.qp_state, qattr.qkey);
	rdma_destroy_qp(ud);
	CHECK(rdma_destroy_id(ud) == 0, "destroy UD id");

	/* rdma_set_option(3): sizes are checked; unknown options refused. */
	uint8_t tos = 32;
	CHECK(rdma_set_option(other, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
	errno = 0;
	CHECK(rdma_set_option(other, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 &&
		      errno == EINVAL,
	      "TOS with the wrong length: errno %d", errno);
	uint8_t timeout = 18;
	CHECK(rdma_set_option(other, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1) == 0,
	      "ACK timeout");

	/* rdma_migrate_id(3): the id's pending events move with it. */
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	struct rdma_cm_id *mover = NULL;
	CHECK(rdma_create_id(ch, &mover, NULL, RDMA_PS_TCP) == 0, "id to migrate");
	CHECK(rdma_resolve_addr(mover, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve");
	CHECK(rdma_migrate_id(mover, ch2) == 0 && mover->channel == ch2, "migrate");
	CHECK(poll(&pfd, 1, 0) == 0, "the old channel has nothing left");
	CHECK(expect_event(ch2, mover, RDMA_CM_EVENT_ADDR_RESOLVED) == 0, "event moved along");
	CHECK(rdma_destroy_id(mover) == 0, "destroy migrated id");
	rdma_destroy_event_channel(ch2);

	/* rdma_destroy_id(3) with an event read but not acked waits for the ack: ack first
	 * here; events never read are discarded with the id. */
	struct rdma_cm_id *unread = NULL;
	CHECK(rdma_create_id(ch, &unread, NULL, RDMA_PS_TCP) == 0, "id with an unread event");
	CHECK(rdma_resolve_addr(unread, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve");
	CHECK(rdma_destroy_id(unread) == 0, "destroying with an unread event");
	CHECK(poll(&pfd, 1, 0) == 0, "its event went with it");

	/* Synchronous ids (NULL channel): calls wait, the event is in id->event. */
	struct rdma_cm_id *sync_id = NULL;
	CHECK(rdma_create_id(NULL, &sync_id, NULL, RDMA_PS_TCP) == 0, "synchronous id");
	CHECK(rdma_resolve_addr(sync_id, NULL, (struct sockaddr *)&dst, 1000) == 0 &&
		      sync_id->event && sync_id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "synchronous resolve_addr leaves its event in id->event");
	CHECK(rdma_resolve_route(sync_id, 1000) == 0 && sync_id->event &&
		      sync_id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "synchronous resolve_route");
	CHECK(rdma_destroy_id(sync_id) == 0, "destroy synchronous id");

	/* rdma_getaddrinfo(3): passive → source address; active → destination; RC / PS_TCP by
	 * default; UD hints give PS_UDP. */
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST}, *res = NULL;
	CHECK(rdma_getaddrinfo(me, "7471", &hints, &res) == 0 && res, "passive getaddrinfo");
	if (res) {
		CHECK(res->ai_flags == RAI_PASSIVE && res->ai_src_addr && !res->ai_dst_addr &&
			      res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP &&
			      ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port) == 7471,
		      "passive result: flags %#x qp %d ps %#x", res->ai_flags, res->ai_qp_type,
		      res->ai_port_space);
		rdma_freeaddrinfo(res);
	}
	struct rdma_addrinfo ud_hints = {.ai_qp_type = IBV_QPT_UD, .ai_port_space = RDMA_PS_UDP};
	res = NULL;
	CHECK(rdma_getaddrinfo(me, "7471", &ud_hints, &res) == 0 && res && res->ai_dst_addr &&
		      !res->ai_src_addr && res->ai_port_space == RDMA_PS_UDP &&
		      res->ai_qp_type == IBV_QPT_UD,
	      "active UD result");
	rdma_freeaddrinfo(res);
	errno = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL,
	      "nothing to resolve: errno %d", errno);
	CHECK(rdma_getaddrinfo("not a host name!", "1", &hints, &res) != 0,
	      "an unknown numeric host fails with an EAI code");

	/* rdma_create_ep(3): an active endpoint, resolved, with a QP; synchronous. */
	struct rdma_addrinfo active = {.ai_qp_type = IBV_QPT_RC, .ai_port_space = RDMA_PS_TCP};
	res = NULL;
	struct rdma_cm_id *ep = NULL;
	qa.send_cq = qa.recv_cq = NULL; /* those of `other` went with its QP */
	CHECK(rdma_getaddrinfo(me, "7471", &active, &res) == 0, "active getaddrinfo");
	CHECK(res && rdma_create_ep(&ep, res, NULL, &qa) == 0 && ep && ep->qp && ep->verbs,
	      "rdma_create_ep, errno %d", errno);
	if (ep)
		rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);

	/* rdma_get_devices(3): NULL-terminated, the contexts the ids use. */
	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 1 && devs[0] == id->verbs && devs[1] == NULL, "one device, n=%d", n);
	rdma_free_devices(devs);

	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0,
	      "rdma_event_str");
	CHECK(strcmp(rdma_event_str(999), "UNKNOWN EVENT") == 0, "unknown event string");

	/* Misuse is refused, not a crash. */
	errno = 0;
	CHECK(rdma_ack_cm_event(NULL) == -1 && errno == EINVAL, "ack NULL");
	errno = 0;
	CHECK(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL, "NULL id out");
	errno = 0;
	CHECK(rdma_bind_addr(other, NULL) == -1 && errno == EINVAL, "bind NULL");

	/* A wildcard listener listens on every device that can: softroce1 (argv[2], an
	 * address this host lacks) cannot open, and rdma_listen still listens on softroce0. */
	if (argc > 2) {
		struct rdma_cm_id *wl = NULL;
		struct sockaddr_in any = ipv4("0.0.0.0", 7632);
		CHECK(rdma_create_id(NULL, &wl, NULL, RDMA_PS_TCP) == 0 &&
			      rdma_bind_addr(wl, (struct sockaddr *)&any) == 0 &&
			      rdma_listen(wl, 1) == 0,
		      "a wildcard listens beside a device that cannot open: errno %d", errno);
		if (wl)
			rdma_destroy_id(wl);
	}

	/* Stream and datagram rsockets exist (rsocket_semantics.c and
	 * rsocket_dgram_semantics.c test them); a datagram one over TCP does not. */
	int rs = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rs >= 0 && rclose(rs) == 0, "a stream rsocket: errno %d", errno);
	rs = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(rs >= 0 && rclose(rs) == 0, "a datagram rsocket: errno %d", errno);
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP) == -1 && errno == ENOTSUP,
	      "a datagram rsocket over TCP: ENOTSUP (errno %d)", errno);

	CHECK(rdma_destroy_id(other) == 0, "destroy");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	errno = 0;
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "destroying twice: errno %d", errno);
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
