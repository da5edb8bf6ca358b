/* ECE, rdma_notify and address errors, rule by rule from the librdmacm man pages and
 * rdma-core's librdmacm/cma.c (which the pages leave the details to), between device
 * softroce0 (argv[1], the server's) and softroce1 (argv[2], the clients'), in one process:
 * rdma_set_local_ece(3) and rdma_get_remote_ece(3) (what they refuse; the active side's ECE
 * carried in the REQ, the passive side's options echoed in the REP, as with external QPs),
 * rdma_reject_ece(3) (REJECTED status 35), rdma_notify(3) (which events the CM takes), and
 * rdma_get_cm_event(3)'s RDMA_CM_EVENT_ADDR_ERROR for a destination that no RDMA device
 * reaches. Prints "N failures". */
#include <signal.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7840 /* this program's ports: PORT .. PORT + 9 */
#define VENDOR 0x15b3

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;

/* A client on softroce1 with its route to the server's `port` resolved; exits when that
 * fails. */
static struct rdma_cm_id *client_to(int port)
{
	return resolved_on(ch, client_ip, server_ip, port, 1);
}

/* The next event on this program's channel: see next_event_is. */
static int next_is(enum rdma_cm_event_type type, struct rdma_cm_id *id, int status)
{
	return next_event_is(ch, type, id, status);
}

/* A QP of the application's own ("external QP") on `verbs`, with its PD and CQ. */
struct own_qp {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static int own_qp(struct ibv_context *verbs, struct own_qp *o)
{
	struct ibv_qp_init_attr qa = small_rc_attr();
	o->pd = ibv_alloc_pd(verbs);
	o->cq = o->pd ? ibv_create_cq(verbs, 8, NULL, NULL, 0) : NULL;
	qa.send_cq = qa.recv_cq = o->cq;
	o->qp = o->cq ? ibv_create_qp(o->pd, &qa) : NULL;
	return o->qp != NULL;
}

static void free_own_qp(struct own_qp *o)
{
	if (o->qp)
		ibv_destroy_qp(o->qp);
	if (o->cq)
		ibv_destroy_cq(o->cq);
	if (o->pd)
		ibv_dealloc_pd(o->pd);
}

/* rdma_set_local_ece(3) and rdma_get_remote_ece(3) refuse (EINVAL, as librdmacm's
 * "if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)") what they are not for:
 * "This function is suppose to be used by the users of external QPs". */
static void ece_refusals(void)
{
	step = "ECE refusals";
	struct rdma_cm_id *c = client_to(PORT);
	struct ibv_ece ece = {.vendor_id = VENDOR, .options = 0x5};
	errno = 0;
	CHECK(rdma_set_local_ece(c, NULL) == -1 && errno == EINVAL,
	      "rdma_set_local_ece(NULL): errno %d", errno);
	struct ibv_ece no_vendor = {.vendor_id = 0, .options = 0x5};
	errno = 0;
	CHECK(rdma_set_local_ece(c, &no_vendor) == -1 && errno == EINVAL,
	      "rdma_set_local_ece with vendor_id 0: errno %d", errno);
	struct ibv_ece masked = {.vendor_id = VENDOR, .options = 0x5, .comp_mask = 1};
	errno = 0;
	CHECK(rdma_set_local_ece(c, &masked) == -1 && errno == EINVAL,
	      "rdma_set_local_ece with comp_mask 1: errno %d", errno);
	/* rdma_set_local_ece(3): "returns 0 on success" — an id without a QP, a vendor, no
	 * comp_mask. */
	CHECK(rdma_set_local_ece(c, &ece) == 0, "rdma_set_local_ece on an id without a QP: errno %d",
	      errno);
	errno = 0;
	CHECK(rdma_get_remote_ece(c, NULL) == -1 && errno == EINVAL,
	      "rdma_get_remote_ece(NULL): errno %d", errno);
	/* With a QP on the id (rdma_create_qp), both are refused. */
	struct ibv_qp_init_attr qa = small_rc_attr();
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "a QP on the id: errno %d", errno);
	if (c->qp) {
		errno = 0;
		CHECK(rdma_set_local_ece(c, &ece) == -1 && errno == EINVAL,
		      "rdma_set_local_ece on an id with a QP: errno %d", errno);
		struct ibv_ece got;
		errno = 0;
		CHECK(rdma_get_remote_ece(c, &got) == -1 && errno == EINVAL,
		      "rdma_get_remote_ece on an id with a QP: errno %d", errno);
		rdma_destroy_qp(c);
	}
	CHECK(rdma_destroy_id(c) == 0, "destroying the id");
}

/* The man pages' flow with external QPs on both sides: the client's ECE reaches the
 * passive side in the request; the passive side's options come back in the response,
 * under the vendor id it received (librdmacm's ucma_copy_ece_param_to_kern_rep: "Return
 * result with same ID as received"). */
static void ece_through_request_and_response(void)
{
	step = "ECE exchange";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 1);
	struct rdma_cm_id *c = client_to(PORT + 1);
	struct own_qp cq = {0}, sq = {0};
	CHECK(own_qp(c->verbs, &cq), "the client's own QP: errno %d", errno);
	struct ibv_ece ece = {.vendor_id = VENDOR, .options = 0x5};
	CHECK(rdma_set_local_ece(c, &ece) == 0, "the client sets its ECE: errno %d", errno);
	struct rdma_conn_param cp = {.qp_num = cq.qp ? cq.qp->qp_num : 0,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(cq.qp && rdma_connect(c, &cp) == 0, "rdma_connect with qp_num: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		goto out;
	struct rdma_cm_id *s = ev->id;
	/* rdma_get_remote_ece(3): "get ECE parameters as were received from the communication
	 * peer ... needed to allow for the passive side to know ECE options of other side". */
	struct ibv_ece got = {.comp_mask = 0xff};
	CHECK(rdma_get_remote_ece(s, &got) == 0 && got.vendor_id == VENDOR && got.options == 0x5 &&
		      got.comp_mask == 0,
	      "the passive side sees the client's ECE: vendor %#x options %#x comp_mask %#x "
	      "(errno %d)",
	      got.vendor_id, got.options, got.comp_mask, errno);
	/* rdma_set_local_ece(3) "needs to be performed before replying to the peer": the
	 * passive side keeps option 0x1 of the client's, and accepts with its own QP. */
	struct ibv_ece mine = {.vendor_id = VENDOR, .options = 0x1};
	CHECK(own_qp(s->verbs, &sq), "the server's own QP: errno %d", errno);
	CHECK(rdma_set_local_ece(s, &mine) == 0, "the server sets its ECE: errno %d", errno);
	struct rdma_conn_param ap = {.qp_num = sq.qp ? sq.qp->qp_num : 0,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .rnr_retry_count = 7};
	CHECK(sq.qp && rdma_accept(s, &ap) == 0, "rdma_accept with qp_num: errno %d", errno);
	rdma_ack_cm_event(ev);

	/* The client has no QP on its id: CONNECT_RESPONSE; the response's ECE is the
	 * received vendor id with the passive side's options. */
	ev = take(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c);
	CHECK(ev != NULL, "CONNECT_RESPONSE on the client");
	if (ev) {
		CHECK(ev->param.conn.qp_num == ap.qp_num, "the response names QP %#x (want %#x)",
		      ev->param.conn.qp_num, ap.qp_num);
		rdma_ack_cm_event(ev);
		got = (struct ibv_ece){.comp_mask = 0xff};
		CHECK(rdma_get_remote_ece(c, &got) == 0 && got.vendor_id == VENDOR &&
			      got.options == 0x1 && got.comp_mask == 0,
		      "the client sees the server's ECE: vendor %#x options %#x comp_mask %#x "
		      "(errno %d)",
		      got.vendor_id, got.options, got.comp_mask, errno);
		/* rdma_establish(3) completes it; the passive side is ESTABLISHED. */
		CHECK(rdma_establish(c) == 0, "rdma_establish: errno %d", errno);
		CHECK(next_is(RDMA_CM_EVENT_ESTABLISHED, s, 0), "the server is ESTABLISHED");
		CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0) &&
			      rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0),
		      "disconnected both ways: errno %d", errno);
	}
	CHECK(rdma_destroy_id(s) == 0, "destroying the server's id");
out:
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(l) == 0, "destroying the ids");
	free_own_qp(&cq);
	free_own_qp(&sq);
}

/* A client that never set ECE (its QP made by rdma_create_qp) shows none; rdma_reject_ece
 * (librdmacm: "IBTA defines CM_REJ_VENDOR_OPTION_NOT_SUPPORTED as 35") is REJECTED with
 * status 35 and carries its private data; rdma_reject(3)'s plain reject is status 28
 * ("consumer defined"). */
static void no_ece_and_ece_rejects(void)
{
	step = "rdma_reject_ece";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 2);
	for (int plain = 0; plain < 2; plain++) {
		struct rdma_cm_id *c = client_to(PORT + 2);
		struct ibv_qp_init_attr qa = small_rc_attr();
		struct rdma_conn_param cp = {.responder_resources = 1,
					     .initiator_depth = 1,
					     .retry_count = 7,
					     .rnr_retry_count = 7};
		CHECK(rdma_create_qp(c, NULL, &qa) == 0 && rdma_connect(c, &cp) == 0,
		      "rdma_connect: errno %d", errno);
		struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
		CHECK(ev != NULL, "a connect request");
		if (!ev)
			return;
		struct rdma_cm_id *s = ev->id;
		struct ibv_ece got = {.vendor_id = 0xdead, .options = 0xbeef, .comp_mask = 0xff};
		CHECK(rdma_get_remote_ece(s, &got) == 0 && got.vendor_id == 0 && got.options == 0 &&
			      got.comp_mask == 0,
		      "no ECE from the client: vendor %#x options %#x comp_mask %#x (errno %d)",
		      got.vendor_id, got.options, got.comp_mask, errno);
		/* Once the passive id has a QP, the ECE calls are refused there too. */
		struct ibv_qp_init_attr sa = small_rc_attr();
		struct ibv_ece mine = {.vendor_id = VENDOR};
		CHECK(rdma_create_qp(s, NULL, &sa) == 0, "a server QP: errno %d", errno);
		errno = 0;
		CHECK(rdma_get_remote_ece(s, &got) == -1 && errno == EINVAL,
		      "rdma_get_remote_ece on a passive id with a QP: errno %d", errno);
		errno = 0;
		CHECK(rdma_set_local_ece(s, &mine) == -1 && errno == EINVAL,
		      "rdma_set_local_ece on a passive id with a QP: errno %d", errno);
		static const char why[] = "no such options";
		int rc = plain ? rdma_reject(s, why, sizeof(why))
			       : rdma_reject_ece(s, why, sizeof(why));
		CHECK(rc == 0, "%s: errno %d", plain ? "rdma_reject" : "rdma_reject_ece", errno);
		rdma_ack_cm_event(ev);
		ev = next_event(ch);
		int want = plain ? 28 : 35;
		CHECK(ev && ev->id == c && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == want,
		      "%s: got %s status %d (want REJECTED %d)",
		      plain ? "rdma_reject" : "rdma_reject_ece",
		      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0, want);
		CHECK(ev && ev->param.conn.private_data &&
			      ev->param.conn.private_data_len >= sizeof(why) &&
			      memcmp(ev->param.conn.private_data, why, sizeof(why)) == 0,
		      "the reject's private data");
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(s);
		rdma_destroy_qp(c);
		CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the ids");
	}
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
}

/* rdma_notify(3): "Events that should be reported to the CM are: IB_EVENT_COMM_EST." What
 * else the kernel does with the event, rxe being an RDMA_NODE_IB_CA: ucma_notify and
 * rdma_notify are EINVAL for an id with no device or no IB CM id (never connected);
 * ib_cm_notify takes COMM_EST (cm_establish: EISCONN once established, EINVAL in any state
 * but REP sent), PATH_MIG (cm_migrate: only on an established connection) and is EINVAL
 * for every other event, LID_CHANGE included. */
static void which_events_notify_takes(void)
{
	step = "rdma_notify";
	static const enum ibv_event_type all[] = {IBV_EVENT_COMM_EST, IBV_EVENT_QP_FATAL,
						  IBV_EVENT_PATH_MIG, IBV_EVENT_LID_CHANGE};
	static const char *names[] = {"COMM_EST", "QP_FATAL", "PATH_MIG", "LID_CHANGE"};
	/* No connection: a new id, and one with its route resolved. */
	struct rdma_cm_id *fresh = NULL, *c = client_to(PORT + 3);
	CHECK(rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	for (int i = 0; i < 4 && fresh; i++) {
		errno = 0;
		CHECK(rdma_notify(fresh, all[i]) == -1 && errno == EINVAL,
		      "rdma_notify(%s) on a new id: errno %d", names[i], errno);
		errno = 0;
		CHECK(rdma_notify(c, all[i]) == -1 && errno == EINVAL,
		      "rdma_notify(%s) on a resolved, unconnected id: errno %d", names[i], errno);
	}
	if (fresh)
		rdma_destroy_id(fresh);

	/* An established connection. */
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 3), *s = NULL;
	struct ibv_qp_init_attr qa = small_rc_attr(), sa = small_rc_attr();
	struct rdma_conn_param cp = {.responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(rdma_create_qp(c, NULL, &qa) == 0 && rdma_connect(c, &cp) == 0,
	      "rdma_connect: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	s = ev->id;
	CHECK(rdma_create_qp(s, NULL, &sa) == 0 && rdma_accept(s, NULL) == 0,
	      "rdma_accept: errno %d", errno);
	rdma_ack_cm_event(ev);
	int est = 0;
	for (int i = 0; i < 2; i++) {
		ev = next_event(ch);
		est += ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->status == 0;
		if (ev)
			rdma_ack_cm_event(ev);
	}
	CHECK(est == 2, "both sides ESTABLISHED");
	/* Established: events that are no CM events are refused on both sides, COMM_EST is
	 * EISCONN and PATH_MIG is taken. */
	static const enum ibv_event_type other[] = {IBV_EVENT_QP_FATAL, IBV_EVENT_LID_CHANGE,
						    IBV_EVENT_SQ_DRAINED};
	static const char *other_names[] = {"QP_FATAL", "LID_CHANGE", "SQ_DRAINED"};
	struct rdma_cm_id *ends[2] = {c, s};
	for (int e = 0; e < 2; e++) {
		const char *who = e ? "server" : "client";
		for (int i = 0; i < 3; i++) {
			errno = 0;
			CHECK(rdma_notify(ends[e], other[i]) == -1 && errno == EINVAL,
			      "rdma_notify(%s) on the established %s: errno %d", other_names[i],
			      who, errno);
		}
		errno = 0;
		CHECK(rdma_notify(ends[e], IBV_EVENT_COMM_EST) == -1 && errno == EISCONN,
		      "rdma_notify(COMM_EST) on the established %s: errno %d", who, errno);
		/* The kernel's cm_migrate takes PATH_MIG on an established connection (0); a
		 * RoCE connection has no alternate path, so it stays on its one. */
		CHECK(rdma_notify(ends[e], IBV_EVENT_PATH_MIG) == 0,
		      "rdma_notify(PATH_MIG) on the established %s: errno %d", who, errno);
	}
	/* None of that touched the connection: it ends as any other, DISCONNECTED the next
	 * event on each side. */
	CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0) &&
		      rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0),
	      "disconnected both ways: errno %d", errno);
	/* Disconnected, no event is taken any more: COMM_EST and PATH_MIG need an
	 * established (or, for COMM_EST, a replied) connection. */
	for (int e = 0; e < 2; e++)
		for (int i = 0; i < 4; i++) {
			errno = 0;
			CHECK(rdma_notify(ends[e], all[i]) == -1 && errno == EINVAL,
			      "rdma_notify(%s) on the disconnected %s: errno %d", names[i],
			      e ? "server" : "client", errno);
		}
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(s) == 0 && rdma_destroy_id(l) == 0,
	      "destroying the ids");
}

/* Whether the host routes `ip` at all (a UDP socket's connect sends nothing). */
static int host_routes(const char *ip)
{
	struct sockaddr_in a = ipv4(ip, 9);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

#define FAR_AWAY "198.51.100.7" /* TEST-NET-2: resolution fails before anything is sent */

/* rdma_get_cm_event(3): RDMA_CM_EVENT_ADDR_ERROR "Address resolution (rdma_resolve_addr)
 * failed"; rdma_resolve_addr(3) maps the destination "to a usable RDMA address ... using the
 * local routing tables": a destination routed out of a netdev without an RDMA device has
 * none (the kernel's cma_acquire_dev_by_src_ip: -ENODEV). */
static void addresses_no_device_reaches(void)
{
	step = "ADDR_ERROR";
	struct rdma_cm_id *u = NULL;
	struct sockaddr_in far = ipv4(FAR_AWAY, PORT + 4);
	fprintf(stderr, "(the host %s %s)\n", host_routes(FAR_AWAY) ? "routes" : "has no route to",
		FAR_AWAY);
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!u)
		return;
	/* Unbound: a synchronous failure when the host has no route at all, or else
	 * ADDR_ERROR with -ENODEV; never ADDR_RESOLVED. */
	errno = 0;
	int rc = rdma_resolve_addr(u, NULL, (struct sockaddr *)&far, 2000);
	if (rc) {
		CHECK(errno == ENETUNREACH || errno == EHOSTUNREACH || errno == ENODEV,
		      "rdma_resolve_addr to %s failed at once: errno %d", FAR_AWAY, errno);
	} else {
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev && ev->id == u && ev->event == RDMA_CM_EVENT_ADDR_ERROR &&
			      ev->status == -ENODEV,
		      "resolving %s: got %s status %d (want ADDR_ERROR %d)", FAR_AWAY,
		      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0, -ENODEV);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	/* The failure leaves the id usable: it resolves a device's address. */
	struct sockaddr_in near = ipv4(server_ip, PORT + 4);
	CHECK(rdma_resolve_addr(u, NULL, (struct sockaddr *)&near, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, u, 0) && u->verbs != NULL,
	      "after the failure, %s resolves: errno %d", server_ip, errno);
	CHECK(rdma_destroy_id(u) == 0, "destroying the id");

	/* Bound to a device's loopback address: the route lookup refuses a loopback source
	 * towards a non-loopback destination (EINVAL), or the resolution fails with
	 * ADDR_ERROR; never ADDR_RESOLVED. */
	struct rdma_cm_id *b = NULL;
	struct sockaddr_in mine = ipv4(client_ip, 0);
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(b, (struct sockaddr *)&mine) == 0,
	      "an id bound to %s: errno %d", client_ip, errno);
	if (!b)
		return;
	errno = 0;
	rc = rdma_resolve_addr(b, NULL, (struct sockaddr *)&far, 2000);
	if (rc) {
		CHECK(errno == EINVAL, "from %s to %s failed at once: errno %d (want EINVAL)",
		      client_ip, FAR_AWAY, errno);
	} else {
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev && ev->id == b && ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status < 0,
		      "from %s to %s: got %s status %d (want ADDR_ERROR)", client_ip, FAR_AWAY,
		      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	CHECK(rdma_destroy_id(b) == 0, "destroying the bound id");

	/* A wildcard destination is this host, as the kernel's rdma_resolve_addr takes it
	 * (cma_resolve_loopback): resolved, never an ADDR_ERROR. */
	struct rdma_cm_id *w = NULL;
	struct sockaddr_in anywhere = ipv4("0.0.0.0", PORT + 4);
	CHECK(rdma_create_id(ch, &w, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(w, NULL, (struct sockaddr *)&anywhere, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, w, 0) && w->verbs != NULL,
	      "resolving 0.0.0.0: errno %d", errno);
	if (w)
		CHECK(rdma_destroy_id(w) == 0, "destroying the wildcard's id");
}

/* Whether `c` has an event within `ms` milliseconds (left queued). */
static int readable_within(struct rdma_event_channel *c, int ms)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 1;
}

/* rdma_listen(3): "backlog - backlog of incoming connection requests". As the kernel's
 * ucma: a request beyond the backlog of requests reported and not yet retrieved is dropped
 * unanswered (the IB CM does "not reject to allow future retries"), and it comes back with
 * the requester's retried REQ once the application made room. */
static void listen_backlog(void)
{
	step = "listen backlog";
	struct rdma_event_channel *lch = rdma_create_event_channel();
	struct rdma_cm_id *l = NULL, *c[2] = {NULL, NULL};
	struct sockaddr_in at = ipv4(server_ip, PORT + 5);
	CHECK(lch && rdma_create_id(lch, &l, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&at) == 0 && rdma_listen(l, 1) == 0,
	      "listening with backlog 1: errno %d", errno);
	if (!l)
		return;
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7};
	/* The first request fills the backlog: reported, not retrieved. */
	c[0] = client_to(PORT + 5);
	cp.qp_num = 0x100;
	CHECK(rdma_connect(c[0], &cp) == 0 && readable_within(lch, 10000),
	      "the first request is reported: errno %d", errno);
	/* The second finds no room: no request is reported for it and nothing answers its
	 * client (no REJECTED) while the first waits unretrieved. */
	c[1] = client_to(PORT + 5);
	cp.qp_num = 0x101;
	CHECK(rdma_connect(c[1], &cp) == 0, "the second connect: errno %d", errno);
	CHECK(!readable_within(ch, 1000), "the client of the dropped request heard nothing");
	struct rdma_cm_event *ev = next_event(lch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	      "the first request");
	if (ev) {
		CHECK(rdma_reject(ev->id, NULL, 0) == 0, "rejecting the first: errno %d", errno);
		rdma_ack_cm_event(ev);
	}
	CHECK(!readable_within(lch, 0), "only one request was queued");
	/* Room again: the dropped request is back with its REQ's retry (seconds later). */
	ev = next_event(lch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	      "the dropped request comes back: %s", ev ? rdma_event_str(ev->event) : "nothing");
	if (ev) {
		CHECK(rdma_reject(ev->id, NULL, 0) == 0, "rejecting the second: errno %d", errno);
		rdma_ack_cm_event(ev);
	}
	/* Each client hears one answer: its request's REJECTED (consumer defined). */
	for (int i = 0; i < 2; i++) {
		ev = next_event(ch);
		CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28 &&
			      (ev->id == c[0] || ev->id == c[1]),
		      "a client's REJECTED: %s status %d", ev ? rdma_event_str(ev->event) : "nothing",
		      ev ? ev->status : 0);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	for (int i = 0; i < 2; i++)
		CHECK(rdma_destroy_id(c[i]) == 0, "destroying client %d", i);
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
	rdma_destroy_event_channel(lch);
}

/* The same backlog for a UDP port space listener: the kernel's CM refuses the SIDR_REQ it
 * has no room for (SIDR_REP status 2, "rejected"): the client's RDMA_CM_EVENT_UNREACHABLE
 * with status 2, while the request in the backlog waits. */
static void udp_listen_backlog(void)
{
	step = "UDP listen backlog";
	struct rdma_event_channel *lch = rdma_create_event_channel();
	struct rdma_cm_id *l = NULL, *c[2] = {NULL, NULL};
	struct sockaddr_in at = ipv4(server_ip, PORT + 6);
	CHECK(lch && rdma_create_id(lch, &l, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&at) == 0 && rdma_listen(l, 1) == 0,
	      "a UDP listener with backlog 1: errno %d", errno);
	if (!l)
		return;
	for (int i = 0; i < 2; i++) {
		struct sockaddr_in src = ipv4(client_ip, 0);
		struct rdma_conn_param cp = {0};
		CHECK(rdma_create_id(ch, &c[i], NULL, RDMA_PS_UDP) == 0 &&
			      rdma_resolve_addr(c[i], (struct sockaddr *)&src,
						(struct sockaddr *)&at, 2000) == 0 &&
			      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, c[i], 0) &&
			      rdma_resolve_route(c[i], 2000) == 0 &&
			      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, c[i], 0) &&
			      rdma_connect(c[i], &cp) == 0,
		      "UDP client %d resolves and asks: errno %d", i, errno);
		if (i == 0)
			CHECK(readable_within(lch, 10000), "the first request is reported");
	}
	CHECK(next_is(RDMA_CM_EVENT_UNREACHABLE, c[1], 2),
	      "the request beyond the backlog is refused");
	struct rdma_cm_event *ev = next_event(lch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	      "the first request waited");
	if (ev) {
		CHECK(rdma_reject(ev->id, NULL, 0) == 0, "rejecting it: errno %d", errno);
		rdma_ack_cm_event(ev);
	}
	CHECK(next_is(RDMA_CM_EVENT_UNREACHABLE, c[0], 2), "the first client is refused too");
	CHECK(!readable_within(lch, 0), "no other request");
	for (int i = 0; i < 2; i++)
		if (c[i])
			CHECK(rdma_destroy_id(c[i]) == 0, "destroying UDP client %d", i);
	CHECK(rdma_destroy_id(l) == 0, "destroying the UDP listener");
	rdma_destroy_event_channel(lch);
}

/* rdma_get_cm_event(3): "destruction of an rdma_cm_id will block until related events
 * have been acknowledged"; librdmacm counts a connection request against the listening id,
 * so one thread may reject a request, destroy its new id and only then acknowledge the
 * event (the destroy must not wait for that ack). */
static void destroy_new_id_before_ack(void)
{
	step = "destroying a request's id before acking it";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 7), *c = client_to(PORT + 7);
	struct rdma_conn_param cp = {.qp_num = 0x200, .responder_resources = 1,
				     .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	      "the request: %s", ev ? rdma_event_str(ev->event) : "nothing");
	if (ev) {
		struct rdma_cm_id *fresh = ev->id;
		CHECK(rdma_reject(fresh, NULL, 0) == 0, "rejecting: errno %d", errno);
		CHECK(rdma_destroy_id(fresh) == 0, "destroying the new id before the ack");
		CHECK(rdma_ack_cm_event(ev) == 0, "acking the request afterwards");
	}
	CHECK(next_is(RDMA_CM_EVENT_REJECTED, c, 28), "the client is rejected");
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(l) == 0, "destroying the ids");
}

/* Rejects the connection request `ev` (acked, its new id destroyed, when not NULL) and checks
 * that the client `c` hears REJECTED, status 28. */
static void reject_request(struct rdma_cm_event *ev, struct rdma_cm_id *c)
{
	if (ev) {
		struct rdma_cm_id *fresh = ev->id;
		CHECK(rdma_reject(fresh, NULL, 0) == 0, "rejecting: errno %d", errno);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(fresh);
	}
	CHECK(next_is(RDMA_CM_EVENT_REJECTED, c, 28), "REJECTED");
}

/* What librdmacm and the kernel's rdma_cm do where the pages say little: a second
 * rdma_listen is EINVAL; the request and response events show what the peer sent (its flow
 * control; a REP carries no retry count: 0); rdma_get_cm_event moves the QP of a REJECTED
 * id to ERR; rdma_disconnect of a connection already disconnected returns 0. */
static void librdmacm_details(void)
{
	step = "librdmacm details";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 8);
	errno = 0;
	CHECK(rdma_listen(l, 4) == -1 && errno == EINVAL, "listening again: errno %d", errno);

	struct rdma_cm_id *c = client_to(PORT + 8);
	struct ibv_qp_init_attr qa = small_rc_attr();
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "the client's QP: errno %d", errno);
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 5, .rnr_retry_count = 7, .flow_control = 0};
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev && ev->param.conn.flow_control == 0 && ev->param.conn.retry_count == 5,
	      "the request shows the client's flow control 0 and retry count 5: %d %d",
	      ev ? ev->param.conn.flow_control : -1, ev ? ev->param.conn.retry_count : -1);
	reject_request(ev, c);
	struct ibv_qp_attr qattr = {0};
	struct ibv_qp_init_attr qinit;
	CHECK(c->qp && ibv_query_qp(c->qp, &qattr, IBV_QP_STATE, &qinit) == 0 &&
		      qattr.qp_state == IBV_QPS_ERR,
	      "the REJECTED id's QP is in ERR: state %d", qattr.qp_state);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0, "destroying the rejected client");

	/* rdma_connect without parameters: librdmacm's defaults are retry counts 7 and no
	 * flow control (ucma_copy_conn_param_to_kern). */
	c = client_to(PORT + 8);
	qa = small_rc_attr();
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "the second client's QP: errno %d", errno);
	CHECK(rdma_connect(c, NULL) == 0, "connect without parameters: errno %d", errno);
	ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev && ev->param.conn.flow_control == 0 && ev->param.conn.retry_count == 7 &&
		      ev->param.conn.rnr_retry_count == 7,
	      "the request shows flow control 0 and retry counts 7, 7: %d %d %d",
	      ev ? ev->param.conn.flow_control : -1, ev ? ev->param.conn.retry_count : -1,
	      ev ? ev->param.conn.rnr_retry_count : -1);
	reject_request(ev, c);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0, "destroying the second rejected client");

	/* A connection of ids without QPs: the response event. The route was resolved with
	 * TOS 0; a TOS set afterwards changes neither the path record nor the QP's AV (the
	 * kernel's AV comes from the path record). */
	c = client_to(PORT + 8);
	uint8_t tos = 64;
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0,
	      "TOS after the route: errno %d", errno);
	CHECK(c->route.path_rec && c->route.path_rec->traffic_class == 0,
	      "the path record keeps traffic class 0");
	cp.qp_num = 0x300;
	CHECK(rdma_connect(c, &cp) == 0, "connect again: errno %d", errno);
	ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	struct rdma_cm_id *s = ev ? ev->id : NULL;
	struct rdma_conn_param ap = {.qp_num = 0x301, .responder_resources = 1,
				     .initiator_depth = 1, .rnr_retry_count = 7,
				     .flow_control = 1};
	CHECK(s && rdma_accept(s, &ap) == 0, "accept: errno %d", errno);
	if (ev)
		rdma_ack_cm_event(ev);
	ev = take(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c);
	CHECK(ev && ev->param.conn.flow_control == 1 && ev->param.conn.retry_count == 0,
	      "the response shows the server's flow control 1 and no retry count: %d %d",
	      ev ? ev->param.conn.flow_control : -1, ev ? ev->param.conn.retry_count : -1);
	if (ev)
		rdma_ack_cm_event(ev);
	struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR};
	int rtr_mask = 0;
	CHECK(rdma_init_qp_attr(c, &rtr, &rtr_mask) == 0 && rtr.ah_attr.grh.traffic_class == 0,
	      "the RTR AV's traffic class is the route's: %u", rtr.ah_attr.grh.traffic_class);
	CHECK(rdma_establish(c) == 0 && next_is(RDMA_CM_EVENT_ESTABLISHED, s, 0),
	      "established: errno %d", errno);
	CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0),
	      "the client disconnects: errno %d", errno);
	errno = 0;
	CHECK(rdma_disconnect(c) == 0, "disconnecting again returns 0: errno %d", errno);
	CHECK(rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0),
	      "the server answers: errno %d", errno);
	/* The kernel's cm_init_qp_rts_attr: a connection that ended has no QP attributes. */
	struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS};
	int mask = 0;
	errno = 0;
	CHECK(rdma_init_qp_attr(c, &rts, &mask) == -1 && errno == EINVAL,
	      "rdma_init_qp_attr(RTS) after the disconnect: errno %d", errno);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0 && rdma_destroy_id(l) == 0,
	      "destroying the ids");
}

/* rdma_set_option(3) RDMA_OPTION_ID_ACK_TIMEOUT before the route: the kernel's RoCE route
 * takes a packet life time one less than the timeout (CMA_IBOE_PACKET_LIFETIME 16
 * otherwise), and RDMA_OPTION_ID_TOS the traffic class. */
static void route_options(void)
{
	step = "route options";
	struct rdma_cm_id *r = NULL;
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT + 9);
	uint8_t timeout = 14, tos = 32;
	CHECK(rdma_create_id(ch, &r, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_set_option(r, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
				      sizeof(timeout)) == 0 &&
		      rdma_set_option(r, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0 &&
		      rdma_resolve_addr(r, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ==
			      0 &&
		      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, r, 0) && rdma_resolve_route(r, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, r, 0),
	      "a route with ACK timeout 14 and TOS 32: errno %d", errno);
	CHECK(r && r->route.path_rec && r->route.path_rec->packet_life_time == 13 &&
		      r->route.path_rec->traffic_class == 32,
	      "the path record: packet life time %u, traffic class %u",
	      r && r->route.path_rec ? r->route.path_rec->packet_life_time : 0,
	      r && r->route.path_rec ? r->route.path_rec->traffic_class : 0);
	if (!r || !r->route.path_rec)
		return;
	/* The kernel's RoCEv2 route flow label: (source port * 31 + destination port) masked
	 * to 20 bits (cma_get_roce_udp_flow_label). */
	uint32_t sport = ntohs(rdma_get_src_port(r)), dport = PORT + 9;
	uint32_t fl = (sport * 31 + dport) & 0xfffff;
	CHECK(r->route.path_rec->flow_label == htobe32(fl) && r->route.path_rec->hop_limit == 64,
	      "the path's flow label %#x (want %#x), hop limit %u",
	      be32toh(r->route.path_rec->flow_label), fl, r->route.path_rec->hop_limit);

	/* The passive side's path is the REQ's primary path (the kernel's
	 * cm_format_paths_from_req): the client's traffic class and flow label, a packet life
	 * time one less than the REQ's Local ACK Timeout (cm_ack_timeout(15, 13) = 16); its QP's
	 * timeout is that plus one. The listener's own TOS and ACK timeout are not inherited. */
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 9);
	uint8_t listener_tos = 0x48, listener_timeout = 20;
	CHECK(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &listener_tos,
			      sizeof(listener_tos)) == 0 &&
		      rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
				      &listener_timeout, sizeof(listener_timeout)) == 0,
	      "the listener's TOS and ACK timeout: errno %d", errno);
	struct ibv_qp_init_attr qa = small_rc_attr();
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_create_qp(r, NULL, &qa) == 0 && rdma_connect(r, &cp) == 0,
	      "connecting: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	struct rdma_cm_id *s = ev ? ev->id : NULL;
	struct ibv_sa_path_rec *sp = s ? s->route.path_rec : NULL;
	CHECK(sp && s->route.num_paths == 1 && sp->traffic_class == 32 &&
		      sp->packet_life_time == 15 && sp->hop_limit == 64 &&
		      sp->flow_label == htobe32(fl),
	      "the new id's path: traffic class %u, packet life time %u, hop limit %u, flow "
	      "label %#x",
	      sp ? sp->traffic_class : 0, sp ? sp->packet_life_time : 0, sp ? sp->hop_limit : 0,
	      sp ? be32toh(sp->flow_label) : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	if (!s) {
		rdma_destroy_id(l);
		return;
	}
	struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR}, rts = {.qp_state = IBV_QPS_RTS};
	int rtr_mask = 0, rts_mask = 0;
	CHECK(rdma_init_qp_attr(s, &rtr, &rtr_mask) == 0 && rtr.ah_attr.is_global &&
		      rtr.ah_attr.grh.traffic_class == 32 && rtr.ah_attr.grh.flow_label == fl &&
		      rtr.ah_attr.grh.hop_limit == 64,
	      "the passive RTR AV: traffic class %u, flow label %#x, hop limit %u",
	      rtr.ah_attr.grh.traffic_class, rtr.ah_attr.grh.flow_label, rtr.ah_attr.grh.hop_limit);
	CHECK(rdma_init_qp_attr(s, &rts, &rts_mask) == 0 && rts.timeout == 16,
	      "the passive RTS timeout: %u", rts.timeout);
	qa = small_rc_attr();
	CHECK(rdma_create_qp(s, NULL, &qa) == 0 && rdma_accept(s, NULL) == 0,
	      "accepting: errno %d", errno);
	CHECK(next_is(RDMA_CM_EVENT_ESTABLISHED, r, 0) && next_is(RDMA_CM_EVENT_ESTABLISHED, s, 0),
	      "established");
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(s->qp && ibv_query_qp(s->qp, &qattr, IBV_QP_AV | IBV_QP_TIMEOUT, &qinit) == 0 &&
		      qattr.ah_attr.grh.traffic_class == 32 && qattr.timeout == 16,
	      "the passive QP: traffic class %u, timeout %u", qattr.ah_attr.grh.traffic_class,
	      qattr.timeout);
	CHECK(r->qp && ibv_query_qp(r->qp, &qattr, IBV_QP_AV | IBV_QP_TIMEOUT, &qinit) == 0 &&
		      qattr.ah_attr.grh.traffic_class == 32 && qattr.timeout == 14,
	      "the active QP: traffic class %u, timeout %u (its ACK timeout option)",
	      qattr.ah_attr.grh.traffic_class, qattr.timeout);
	CHECK(rdma_disconnect(r) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0) &&
		      rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, r, 0),
	      "disconnected");
	rdma_destroy_qp(s);
	rdma_destroy_qp(r);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(r) == 0 && rdma_destroy_id(l) == 0,
	      "destroying the ids");
}

int main(int argc, char **argv)
{
	server_ip = argc > 2 ? argv[1] : "127.0.0.1";
	client_ip = argc > 2 ? argv[2] : "127.0.0.2";
	watchdog(50);
	ch = rdma_create_event_channel();
	if (!ch) {
		printf("no event channel: errno %d\n1 failures\n", errno);
		return 1;
	}
	ece_refusals();
	ece_through_request_and_response();
	no_ece_and_ece_rejects();
	which_events_notify_takes();
	addresses_no_device_reaches();
	listen_backlog();
	udp_listen_backlog();
	destroy_new_id_before_ack();
	librdmacm_details();
	route_options();
	rdma_destroy_event_channel(ch);
	alarm(0);
	printf("%d failures\n", failures);
	return failures != 0;
}
