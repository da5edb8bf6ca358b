/* Who may hold a port: rdma_bind_addr(3), rdma_listen(3) and rdma_resolve_addr(3) with
 * rdma_set_option(3)'s RDMA_OPTION_ID_REUSEADDR and RDMA_OPTION_ID_AFONLY, rule by rule as
 * the kernel's rdma_cm has them (cma_check_port, rdma_set_reuseaddr, rdma_set_afonly,
 * rdma_listen, cma_match_private_data), between device softroce0 (argv[1], "D") and
 * softroce1 (argv[2], "D2") in one process. A wildcard on either side of a conflict is
 * EADDRNOTAVAIL, the same address EADDRINUSE; ids that both set REUSEADDR share a port
 * until one listens; IPv4 ids and AFONLY IPv6 ids keep to their family. Prints
 * "N failures". */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7850 /* this program's ports: PORT .. PORT + 19 */

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;
static int one = 1;

static struct sockaddr_in6 ipv6_any(int port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port),
				 .sin6_addr = IN6ADDR_ANY_INIT};
	return a;
}

static struct rdma_cm_id *new_id(int reuse)
{
	struct rdma_cm_id *id = NULL;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "rdma_create_id: errno %d\n", errno);
		exit(2);
	}
	if (reuse && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one,
				     sizeof(one))) {
		fprintf(stderr, "REUSEADDR on a new id: errno %d\n", errno);
		exit(2);
	}
	return id;
}

static int set_option(struct rdma_cm_id *id, int name, int value)
{
	return rdma_set_option(id, RDMA_OPTION_ID, name, &value, sizeof(value));
}

/* rdma_bind_addr's result: 0, or the errno it failed with. */
static int bind_at(struct rdma_cm_id *id, const char *ip, int port)
{
	struct sockaddr_in a = ipv4(ip, port);
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&a) ? errno : 0;
}

static int bind_v6_any(struct rdma_cm_id *id, int port)
{
	struct sockaddr_in6 a = ipv6_any(port);
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&a) ? errno : 0;
}

static int listen_result(struct rdma_cm_id *id)
{
	errno = 0;
	return rdma_listen(id, 4) ? errno : 0;
}

/* net.ipv6.bindv6only: whether an IPv6 id takes only IPv6 by default. */
static int bindv6only(void)
{
	FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
	int v = 0;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* The listener a connection request from D2 to D:port reaches (NULL: none, the client
 * rejected). The request is rejected and its id destroyed. */
static struct rdma_cm_id *listener_reached(int port)
{
	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, port, 1);
	struct rdma_conn_param cp = {.qp_num = 0x400, .responder_resources = 1,
				     .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	struct rdma_cm_id *reached = NULL;
	if (rdma_connect(c, &cp)) {
		fprintf(stderr, "connect: errno %d\n", errno);
		rdma_destroy_id(c);
		return NULL;
	}
	struct rdma_cm_event *ev = next_event(ch);
	if (ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct rdma_cm_id *fresh = ev->id;
		reached = ev->listen_id;
		rdma_reject(fresh, NULL, 0);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(fresh);
		ev = next_event(ch); /* the client's REJECTED */
	}
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(c);
	return reached;
}

static void destroy(struct rdma_cm_id **ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i])
			rdma_destroy_id(ids[i]);
}

/* Two REUSEADDR ids share an address and port until one listens: rdma_listen checks the
 * port as if REUSEADDR were off, so neither may listen while the other holds it; once
 * alone, the listener shares no more. */
static void reuseaddr_and_listen(void)
{
	step = "REUSEADDR and listen";
	struct rdma_cm_id *a = new_id(1), *b = new_id(1);
	int rb_a = bind_at(a, server_ip, PORT), rb_b = bind_at(b, server_ip, PORT);
	CHECK(rb_a == 0 && rb_b == 0, "two REUSEADDR ids bind D:%d: %d %d", PORT, rb_a, rb_b);
	int rl_a = listen_result(a), rl_b = listen_result(b);
	CHECK(rl_a == EADDRINUSE && rl_b == EADDRINUSE,
	      "neither listens while the other holds the address: %d %d", rl_a, rl_b);
	rdma_destroy_id(b);
	CHECK(listen_result(a) == 0, "alone, it listens: errno %d", errno);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 1) == -1 && errno == EINVAL,
	      "REUSEADDR on a listener: errno %d", errno);
	struct rdma_cm_id *c = new_id(1), *d = new_id(1);
	int rc = bind_at(c, server_ip, PORT), rd = bind_at(d, "0.0.0.0", PORT);
	CHECK(rc == EADDRINUSE, "REUSEADDR next to a listener, same address: %d", rc);
	CHECK(rd == EADDRNOTAVAIL, "REUSEADDR next to a listener, wildcard: %d", rd);
	struct rdma_cm_id *ids[] = {a, c, d};
	destroy(ids, 3);

	/* The same on the wildcard: the conflict is EADDRNOTAVAIL. */
	a = new_id(1);
	b = new_id(1);
	rb_a = bind_at(a, "0.0.0.0", PORT + 1);
	rb_b = bind_at(b, "0.0.0.0", PORT + 1);
	CHECK(rb_a == 0 && rb_b == 0, "two REUSEADDR ids bind 0.0.0.0: %d %d", rb_a, rb_b);
	rl_a = listen_result(a);
	rl_b = listen_result(b);
	CHECK(rl_a == EADDRNOTAVAIL && rl_b == EADDRNOTAVAIL,
	      "neither listens on the shared wildcard: %d %d", rl_a, rl_b);
	struct rdma_cm_id *pair[] = {a, b};
	destroy(pair, 2);
}

/* REUSEADDR counts only when both ids set it; it may be turned on after binding or
 * resolving (the kernel's rdma_set_reuseaddr), and off only before binding. */
static void reuseaddr_states(void)
{
	step = "REUSEADDR states";
	struct rdma_cm_id *a = new_id(0), *b = new_id(1);
	CHECK(bind_at(a, server_ip, PORT + 2) == 0, "a plain bind");
	int rb = bind_at(b, server_ip, PORT + 2);
	CHECK(rb == EADDRINUSE, "REUSEADDR beside an id without it: %d", rb);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 1) == 0,
	      "REUSEADDR turned on after binding: errno %d", errno);
	rb = bind_at(b, server_ip, PORT + 2);
	CHECK(rb == 0, "now both share: %d", rb);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 0) == -1 && errno == EINVAL,
	      "REUSEADDR turned off after binding: errno %d", errno);
	struct rdma_cm_id *ids[] = {a, b};
	destroy(ids, 2);

	/* After rdma_resolve_addr from D:port: on, yes; off, no. */
	a = new_id(0);
	struct sockaddr_in src = ipv4(server_ip, PORT + 3), dst = ipv4(client_ip, PORT + 3);
	CHECK(rdma_resolve_addr(a, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0 &&
		      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, a, NULL) == 0,
	      "resolving from D:%d: errno %d", PORT + 3, errno);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 1) == 0,
	      "REUSEADDR after resolving: errno %d", errno);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 0) == -1 && errno == EINVAL,
	      "REUSEADDR off after resolving: errno %d", errno);
	b = new_id(1);
	rb = bind_at(b, server_ip, PORT + 3);
	CHECK(rb == 0, "a REUSEADDR id shares the resolved id's address: %d", rb);
	/* AFONLY: before or after binding, not once resolving. */
	CHECK(set_option(a, RDMA_OPTION_ID_AFONLY, 1) == -1 && errno == EINVAL,
	      "AFONLY after resolving: errno %d", errno);
	CHECK(set_option(b, RDMA_OPTION_ID_AFONLY, 1) == 0, "AFONLY after binding: errno %d",
	      errno);
	struct rdma_cm_id *more[] = {a, b};
	destroy(more, 2);

	/* On an idle id any value goes, normalised (2 is on). */
	a = new_id(0);
	CHECK(set_option(a, RDMA_OPTION_ID_REUSEADDR, 0) == 0 &&
		      set_option(a, RDMA_OPTION_ID_REUSEADDR, 2) == 0,
	      "REUSEADDR 0 and 2 on an idle id: errno %d", errno);
	b = new_id(0);
	CHECK(set_option(b, RDMA_OPTION_ID_REUSEADDR, 1) == 0 &&
		      bind_at(a, server_ip, PORT + 4) == 0 && bind_at(b, server_ip, PORT + 4) == 0,
	      "2 counts as on: errno %d", errno);
	CHECK(listen_result(a) == EADDRINUSE, "and a listen still checks: errno %d", errno);
	rdma_destroy_id(b);
	CHECK(listen_result(a) == 0 && set_option(a, RDMA_OPTION_ID_AFONLY, 1) == -1 &&
		      errno == EINVAL,
	      "AFONLY on a listener: errno %d", errno);
	rdma_destroy_id(a);
}

/* Wildcards and specific addresses: a wildcard conflicts with every address of its family
 * (EADDRNOTAVAIL), the same address with itself (EADDRINUSE), two addresses not at all. */
static void wildcards_and_addresses(void)
{
	step = "wildcards and addresses";
	struct rdma_cm_id *a = new_id(0), *b = new_id(0), *c = new_id(0);
	CHECK(bind_at(a, "0.0.0.0", PORT + 5) == 0, "0.0.0.0");
	int r = bind_at(b, server_ip, PORT + 5);
	CHECK(r == EADDRNOTAVAIL, "D beside 0.0.0.0: %d", r);
	struct rdma_cm_id *ids[] = {a, b, c};
	destroy(ids, 3);

	a = new_id(0);
	b = new_id(0);
	c = new_id(0);
	struct rdma_cm_id *d = new_id(0);
	CHECK(bind_at(a, server_ip, PORT + 6) == 0, "D");
	r = bind_at(b, "0.0.0.0", PORT + 6);
	CHECK(r == EADDRNOTAVAIL, "0.0.0.0 beside D: %d", r);
	r = bind_at(c, server_ip, PORT + 6);
	CHECK(r == EADDRINUSE, "D beside D: %d", r);
	r = bind_at(d, client_ip, PORT + 6);
	CHECK(r == 0, "D2 beside D: %d", r);
	struct rdma_cm_id *four[] = {a, b, c, d};
	destroy(four, 4);

	/* An id bound to the wildcard and then resolved holds its routed source address: a
	 * bind of the other device's address on its port is free, of the same one not. */
	a = new_id(0);
	CHECK(bind_at(a, "0.0.0.0", PORT + 7) == 0, "0.0.0.0 before resolving");
	struct sockaddr_in dst = ipv4(server_ip, PORT + 7);
	CHECK(rdma_resolve_addr(a, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, a, NULL) == 0,
	      "resolving D from the wildcard: errno %d", errno);
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(a);
	char routed[INET_ADDRSTRLEN] = "";
	inet_ntop(AF_INET, &src->sin_addr, routed, sizeof(routed));
	const char *other = strcmp(routed, server_ip) == 0 ? client_ip : server_ip;
	b = new_id(0);
	c = new_id(0);
	r = bind_at(b, other, PORT + 7);
	CHECK(r == 0, "the other device's address beside a resolved wildcard (%s): %d", routed, r);
	r = bind_at(c, routed, PORT + 7);
	CHECK(r == EADDRINUSE, "its routed source address (%s): %d", routed, r);
	struct rdma_cm_id *three[] = {a, b, c};
	destroy(three, 3);
}

/* IPv4 ids take only IPv4; an IPv6 wildcard takes both families unless AFONLY (or
 * net.ipv6.bindv6only) keeps it to IPv6. Ids of two families that keep to their own never
 * conflict, and each hears only its family's requests. */
static void address_families(void)
{
	step = "address families";
	int v6only = bindv6only();
	struct rdma_cm_id *a = new_id(0), *b = new_id(0);
	CHECK(set_option(a, RDMA_OPTION_ID_AFONLY, 1) == 0 && bind_v6_any(a, PORT + 8) == 0 &&
		      listen_result(a) == 0,
	      "an AFONLY [::] listener: errno %d", errno);
	int r = bind_at(b, "0.0.0.0", PORT + 8);
	CHECK(r == 0 && listen_result(b) == 0, "a 0.0.0.0 listener beside it: %d, %d", r, errno);
	struct rdma_cm_id *reached = listener_reached(PORT + 8);
	CHECK(reached == b, "an IPv4 request reaches the IPv4 listener (%s)",
	      reached == a ? "the IPv6 one" : reached ? "another" : "none");
	struct rdma_cm_id *pair[] = {a, b};
	destroy(pair, 2);

	/* A [::] id that takes both families conflicts with 0.0.0.0, either way round. */
	a = new_id(0);
	b = new_id(0);
	CHECK(bind_v6_any(a, PORT + 9) == 0, "[::]");
	r = bind_at(b, "0.0.0.0", PORT + 9);
	CHECK(r == (v6only ? 0 : EADDRNOTAVAIL), "0.0.0.0 beside [::] (bindv6only %d): %d", v6only,
	      r);
	struct rdma_cm_id *pair2[] = {a, b};
	destroy(pair2, 2);
	a = new_id(0);
	b = new_id(0);
	CHECK(bind_at(a, "0.0.0.0", PORT + 10) == 0, "0.0.0.0");
	r = bind_v6_any(b, PORT + 10);
	CHECK(r == (v6only ? 0 : EADDRNOTAVAIL), "[::] beside 0.0.0.0 (bindv6only %d): %d", v6only,
	      r);
	struct rdma_cm_id *pair3[] = {a, b};
	destroy(pair3, 2);

	/* An IPv4 id that gives up AFONLY conflicts with an AFONLY [::]. */
	a = new_id(0);
	b = new_id(0);
	CHECK(set_option(a, RDMA_OPTION_ID_AFONLY, 0) == 0 && bind_at(a, "0.0.0.0", PORT + 11) == 0,
	      "0.0.0.0 without AFONLY: errno %d", errno);
	CHECK(set_option(b, RDMA_OPTION_ID_AFONLY, 1) == 0, "AFONLY");
	r = bind_v6_any(b, PORT + 11);
	CHECK(r == EADDRNOTAVAIL, "an AFONLY [::] beside it: %d", r);
	struct rdma_cm_id *pair4[] = {a, b};
	destroy(pair4, 2);

	/* A [::] listener taking both families hears an IPv4 request. */
	a = new_id(0);
	CHECK(set_option(a, RDMA_OPTION_ID_AFONLY, 0) == 0 && bind_v6_any(a, PORT + 12) == 0 &&
		      listen_result(a) == 0,
	      "a [::] listener for both families: errno %d", errno);
	reached = listener_reached(PORT + 12);
	CHECK(reached == a, "an IPv4 request reaches the [::] listener (%s)",
	      reached ? "another" : "none");
	rdma_destroy_id(a);

	/* An AFONLY [::] listener alone: an IPv4 request reaches nobody (REJECTED). */
	a = new_id(0);
	CHECK(set_option(a, RDMA_OPTION_ID_AFONLY, 1) == 0 && bind_v6_any(a, PORT + 13) == 0 &&
		      listen_result(a) == 0,
	      "an AFONLY [::] listener: errno %d", errno);
	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, PORT + 13, 1);
	struct rdma_conn_param cp = {.qp_num = 0x401, .responder_resources = 1,
				     .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == c && ev->status == 28,
	      "an IPv4 request to an IPv6-only listener is rejected, status 28 (%s, %d)",
	      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(c);
	rdma_destroy_id(a);
}

/* A UC endpoint in the IB port space, from D2 to D:port, made asynchronous on `ch`. */
static struct rdma_cm_id *uc_client(int port)
{
	char service[8];
	snprintf(service, sizeof(service), "%d", port);
	struct sockaddr_in src = ipv4(client_ip, 0);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_IB,
				      .ai_qp_type = IBV_QPT_UC,
				      .ai_src_addr = (struct sockaddr *)&src,
				      .ai_src_len = sizeof(src)},
			     *res = NULL;
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_UC};
	struct rdma_cm_id *c = NULL;
	CHECK(rdma_getaddrinfo(server_ip, service, &hints, &res) == 0 && res &&
		      rdma_create_ep(&c, res, NULL, &qa) == 0 && c && c->qp &&
		      c->qp->qp_type == IBV_QPT_UC,
	      "a UC endpoint: errno %d", errno);
	if (res)
		rdma_freeaddrinfo(res);
	CHECK(c && rdma_migrate_id(c, ch) == 0, "made asynchronous: errno %d", errno);
	return c;
}

/* The kernel's cma_ib_check_req_qp_type: a listener hears requests for its own QP type
 * only; a UC request to an RC listener (rdma_create_id's RDMA_PS_IB ids are RC) is
 * REJECTED with status 28, to a UC listener it is a CONNECT_REQUEST, and the connection
 * carries a UC SEND. */
static void qp_types(void)
{
	step = "QP types";
	struct rdma_cm_id *l = NULL;
	struct sockaddr_in at = ipv4(server_ip, PORT + 14);
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_IB) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&at) == 0 && rdma_listen(l, 4) == 0,
	      "an RC listener in the IB port space: errno %d", errno);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	struct rdma_cm_id *c = uc_client(PORT + 14);
	if (!c)
		return;
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == c && ev->status == 28,
	      "a UC request to an RC listener is rejected, status 28 (%s, %d)",
	      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_ep(c);
	rdma_destroy_id(l);

	char service[8];
	snprintf(service, sizeof(service), "%d", PORT + 15);
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE,
				      .ai_port_space = RDMA_PS_IB,
				      .ai_qp_type = IBV_QPT_UC},
			     *res = NULL;
	l = NULL;
	CHECK(rdma_getaddrinfo(server_ip, service, &hints, &res) == 0 && res &&
		      rdma_create_ep(&l, res, NULL, NULL) == 0 && rdma_migrate_id(l, ch) == 0 &&
		      rdma_listen(l, 4) == 0,
	      "a UC listener: errno %d", errno);
	if (res)
		rdma_freeaddrinfo(res);
	c = uc_client(PORT + 15);
	if (!c || !l)
		return;
	CHECK(rdma_connect(c, &cp) == 0, "connect: errno %d", errno);
	ev = next_event(ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	      "a UC request reaches the UC listener (%s)",
	      ev ? rdma_event_str(ev->event) : "nothing");
	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_ep(c);
		rdma_destroy_ep(l);
		return;
	}
	struct rdma_cm_id *fresh = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(fresh->qp_type == IBV_QPT_UC, "the new id is UC: %d", fresh->qp_type);
	/* A UC connection: the kernel's cm_init_qp_rtr_attr and cm_init_qp_rts_attr give a UC
	 * QP no responder or requester attributes (no RDMA READ/atomics, no ACKs to time). */
	struct ibv_qp_init_attr sa = {
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_UC};
	CHECK(rdma_create_qp(fresh, NULL, &sa) == 0, "the server's UC QP: errno %d", errno);
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_RTR};
	int mask = 0;
	CHECK(rdma_init_qp_attr(fresh, &qa, &mask) == 0 &&
		      mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			       IBV_QP_RQ_PSN),
	      "a UC QP's RTR attributes: mask %#x", mask);
	qa.qp_state = IBV_QPS_RTS;
	mask = 0;
	CHECK(rdma_init_qp_attr(fresh, &qa, &mask) == 0 && mask == (IBV_QP_STATE | IBV_QP_SQ_PSN),
	      "a UC QP's RTS attributes: mask %#x", mask);
	uint64_t in = 0, out = 0x5543;
	struct ibv_mr *rmr = rdma_reg_msgs(fresh, &in, sizeof(in));
	struct ibv_mr *smr = rdma_reg_msgs(c, &out, sizeof(out));
	CHECK(rmr && smr && rdma_post_recv(fresh, NULL, &in, sizeof(in), rmr) == 0,
	      "a receive: errno %d", errno);
	CHECK(rdma_accept(fresh, NULL) == 0, "accepting the UC request: errno %d", errno);
	int established = 0;
	for (int i = 0; i < 2; i++) {
		ev = next_event(ch);
		if (ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && (ev->id == c || ev->id == fresh))
			established++;
		if (ev)
			rdma_ack_cm_event(ev);
	}
	CHECK(established == 2, "both sides ESTABLISHED: %d", established);
	struct ibv_wc wc;
	CHECK(smr && rdma_post_send(c, NULL, &out, sizeof(out), smr, IBV_SEND_SIGNALED) == 0 &&
		      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "a UC send completes");
	CHECK(rmr && rdma_get_recv_comp(fresh, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      in == 0x5543,
	      "and arrives: %#lx", (unsigned long)in);
	CHECK(rdma_disconnect(c) == 0 && next_event_is(ch, RDMA_CM_EVENT_DISCONNECTED, fresh, 0) &&
		      rdma_disconnect(fresh) == 0 &&
		      next_event_is(ch, RDMA_CM_EVENT_DISCONNECTED, c, 0),
	      "disconnected: errno %d", errno);
	if (rmr)
		rdma_dereg_mr(rmr);
	if (smr)
		rdma_dereg_mr(smr);
	rdma_destroy_qp(fresh);
	rdma_destroy_id(fresh);
	rdma_destroy_ep(c);
	rdma_destroy_ep(l);
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
	reuseaddr_and_listen();
	reuseaddr_states();
	wildcards_and_addresses();
	address_families();
	qp_types();
	rdma_destroy_event_channel(ch);
	alarm(0);
	printf("%d failures\n", failures);
	return failures != 0;
}
