/* The librdmacm man pages' rules that the other C programs leave alone, rule by rule, between
 * device softroce0 (argv[1], the server's) and softroce1 (argv[2], the clients'), in one
 * process: rdma_getaddrinfo(3)'s variants; the all-zero addresses and ports of ids that are
 * not bound or not connected, and wildcard binds; rdma_set_option(3)'s options (path
 * records included); what
 * rdma_create_qp(3) refuses and returns; rdma_get_cm_event(3), rdma_destroy_id(3) and
 * rdma_migrate_id(3) blocking; synchronous ids with rdma_create_ep(3), rdma_get_request(3)
 * and rdma_migrate_id(3) to NULL; the depth and retry limits of rdma_connect(3) and
 * rdma_accept(3), TIMEWAIT_EXIT; REJECTED status 8 where nobody listens, rdma_listen(3)'s
 * address scoping and wildcard; rdma_notify(3) forcing ESTABLISHED; rdma_destroy_id(3) of a
 * connected id; RDMA_PS_UDP private-data limits and rejects; rdma_verbs.h's vector posts,
 * inline sends without an MR and rdma_reg_read/rdma_reg_write(3) remote access.
 * Prints "N failures". */
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7820 /* this program's ports: PORT .. PORT + 15 */

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;

static struct ibv_qp_init_attr rc_attr(void)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 8,
					     .max_recv_wr = 8,
					     .max_send_sge = 2,
					     .max_recv_sge = 2,
					     .max_inline_data = 64},
				     .qp_type = IBV_QPT_RC};
	return a;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* An id on `from`'s device whose address (and, when `route`, route) to to:port is resolved;
 * exits when that fails. */
static struct rdma_cm_id *resolved_id(const char *from, const char *to, int port, int route)
{
	return resolved_on(ch, from, to, port, route);
}

/* A client on softroce1 with its route to the server's port resolved. */
static struct rdma_cm_id *client_to(int port)
{
	return resolved_id(client_ip, server_ip, port, 1);
}

/* A listener at ip:port with `context`; exits when that fails. */
static struct rdma_cm_id *listen_on(const char *ip, int port, void *context)
{
	struct rdma_cm_id *l = NULL;
	struct sockaddr_in a = ipv4(ip, port);
	if (rdma_create_id(ch, &l, context, RDMA_PS_TCP) ||
	    rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 8)) {
		fprintf(stderr, "listening on %s:%d: errno %d\n", ip, port, errno);
		exit(2);
	}
	return l;
}

/* The next event on this program's channel: see next_event_is. */
static int next_is(enum rdma_cm_event_type type, struct rdma_cm_id *id, int status)
{
	return next_event_is(ch, type, id, status);
}

/* Both ESTABLISHED events, in either order: 1 when both came; the client's through *client
 * (unacked) when not NULL. */
static int both_established(struct rdma_cm_id *c, struct rdma_cm_id *s,
			    struct rdma_cm_event **client)
{
	int seen_c = 0, seen_s = 0;
	for (int i = 0; i < 2; i++) {
		struct rdma_cm_event *ev = next_event(ch);
		if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED || ev->status ||
		    (ev->id != c && ev->id != s)) {
			fprintf(stderr, "expected ESTABLISHED, got %s status %d\n",
				ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
			if (ev)
				rdma_ack_cm_event(ev);
			return 0;
		}
		seen_c += ev->id == c;
		seen_s += ev->id == s;
		if (ev->id == c && client)
			*client = ev;
		else
			rdma_ack_cm_event(ev);
	}
	return seen_c == 1 && seen_s == 1;
}

/* c (with a QP) connects with `cp`; the request gets a QP and is accepted with `ap`, or with
 * the request's own parameters referenced in the unacked event when `from_request`; both
 * sides are ESTABLISHED. The server's id, or NULL. */
static struct rdma_cm_id *connected(struct rdma_cm_id *c, struct rdma_conn_param *cp,
				    struct rdma_conn_param *ap, int from_request)
{
	struct ibv_qp_init_attr sa = rc_attr();
	if (rdma_connect(c, cp))
		return NULL;
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	if (!ev)
		return NULL;
	struct rdma_cm_id *s = ev->id;
	int ok = rdma_create_qp(s, NULL, &sa) == 0 &&
		 rdma_accept(s, from_request ? &ev->param.conn : ap) == 0;
	rdma_ack_cm_event(ev);
	return ok && both_established(c, s, NULL) ? s : NULL;
}

/* Client first, each side told DISCONNECTED; then the QPs and ids are destroyed. */
static void disconnect_and_destroy(struct rdma_cm_id *c, struct rdma_cm_id *s)
{
	CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0) &&
		      rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0),
	      "disconnected both ways: errno %d", errno);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(s) == 0, "destroying the ids");
}

static struct ibv_qp_attr qp_attr(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	memset(&a, 0, sizeof(a));
	ibv_query_qp(qp, &a,
		     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP,
		     &i);
	return a;
}

/* rdma_getaddrinfo(3), beyond the basic passive and active lookups. */
static void getaddrinfo_variants(void)
{
	step = "rdma_getaddrinfo";
	struct rdma_addrinfo *res = NULL;
	/* "RAI_NUMERICHOST: ... the node parameter, if provided, must be a numerical network
	 * address": a host name is refused with it, and resolves without it. */
	struct rdma_addrinfo numeric = {.ai_flags = RAI_NUMERICHOST};
	int rc = rdma_getaddrinfo("localhost", "7820", &numeric, &res);
	CHECK(rc != 0, "RAI_NUMERICHOST with a host name: rc %d", rc);
	if (rc == 0)
		rdma_freeaddrinfo(res);
	res = NULL;
	rc = rdma_getaddrinfo("localhost", "7820", NULL, &res);
	CHECK(rc == 0 && res && res->ai_dst_addr && res->ai_dst_len > 0,
	      "'localhost' resolves without RAI_NUMERICHOST: rc %d", rc);
	if (rc == 0)
		rdma_freeaddrinfo(res);

	/* An active lookup: ai_family, ai_dst_len the size of ai_dst_addr, ai_next NULL, and
	 * by default an RC QP in RDMA_PS_TCP. */
	res = NULL;
	rc = rdma_getaddrinfo(server_ip, "7820", NULL, &res);
	CHECK(rc == 0 && res && res->ai_family == AF_INET &&
		      res->ai_dst_len == sizeof(struct sockaddr_in) && res->ai_next == NULL &&
		      res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP,
	      "active: rc %d family %d dst_len %u qp_type %d ps %d", rc, res ? res->ai_family : -1,
	      res ? res->ai_dst_len : 0, res ? (int)res->ai_qp_type : -1,
	      res ? res->ai_port_space : -1);
	if (rc == 0)
		rdma_freeaddrinfo(res);

	/* RAI_PASSIVE without a node: a wildcard source with the service's port; ai_dst_len
	 * "will be 0 if the RAI_PASSIVE flag was specified". */
	struct rdma_addrinfo passive = {.ai_flags = RAI_PASSIVE};
	res = NULL;
	rc = rdma_getaddrinfo(NULL, "7820", &passive, &res);
	CHECK(rc == 0 && res && res->ai_dst_len == 0 && res->ai_src_addr && res->ai_src_len > 0,
	      "passive without a node: rc %d", rc);
	if (rc == 0 && res && res->ai_src_addr) {
		struct sockaddr *sa = res->ai_src_addr;
		int port = sa->sa_family == AF_INET
				   ? ntohs(((struct sockaddr_in *)sa)->sin_port)
				   : ntohs(((struct sockaddr_in6 *)sa)->sin6_port);
		CHECK(port == 7820, "the wildcard source has the port: %d", port);
	}
	if (rc == 0)
		rdma_freeaddrinfo(res);

	/* "If node is not given, rdma_getaddrinfo will attempt to resolve the RDMA addressing
	 * information based on the hints.ai_src_addr, hints.ai_dst_addr, or hints.ai_route":
	 * the destination is the hint's. */
	struct sockaddr_in d = ipv4(server_ip, 7820);
	struct rdma_addrinfo hinted = {.ai_dst_addr = (struct sockaddr *)&d,
				       .ai_dst_len = sizeof(d),
				       .ai_qp_type = IBV_QPT_RC,
				       .ai_port_space = RDMA_PS_TCP};
	res = NULL;
	rc = rdma_getaddrinfo(NULL, NULL, &hinted, &res);
	CHECK(rc == 0 && res && res->ai_dst_addr && res->ai_dst_len == sizeof(d) &&
		      memcmp(res->ai_dst_addr, &d, sizeof(d)) == 0,
	      "hints only: the hint's destination: rc %d errno %d", rc, errno);
	if (rc == 0)
		rdma_freeaddrinfo(res);

	/* ai_qp_type IBV_QPT_UD gives the port space of datagrams, RDMA_PS_UDP. */
	struct rdma_addrinfo ud = {.ai_flags = RAI_PASSIVE, .ai_qp_type = IBV_QPT_UD};
	res = NULL;
	rc = rdma_getaddrinfo(server_ip, "7820", &ud, &res);
	CHECK(rc == 0 && res && res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP,
	      "a UD hint: rc %d ps %d", rc, res ? res->ai_port_space : -1);
	if (rc == 0)
		rdma_freeaddrinfo(res);
}

/* rdma_get_local_addr(3), rdma_get_peer_addr(3), rdma_get_src_port(3),
 * rdma_get_dst_port(3) and rdma_bind_addr(3)'s wildcards. */
static void zero_addresses_and_wildcards(void)
{
	step = "addresses";
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!id)
		return;
	/* "If the rdma_cm_id is not bound to an address, the contents of the sockaddr
	 * structure will be set to all zeroes"; likewise the peer of an id not connected.
	 * Their ports are 0. */
	CHECK(all_zero(rdma_get_local_addr(id), sizeof(struct sockaddr_in6)),
	      "an unbound id's local address is all zeroes");
	CHECK(all_zero(rdma_get_peer_addr(id), sizeof(struct sockaddr_in6)),
	      "an unconnected id's peer address is all zeroes");
	CHECK(rdma_get_src_port(id) == 0 && rdma_get_dst_port(id) == 0, "ports %u, %u",
	      ntohs(rdma_get_src_port(id)), ntohs(rdma_get_dst_port(id)));

	/* rdma_bind_addr(3): "Wildcard values are permitted": bound to 0.0.0.0 the id has no
	 * device yet, and port 0 picks a port. A listener is not connected either. */
	struct sockaddr_in any = ipv4("0.0.0.0", 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&any) == 0, "binding 0.0.0.0:0: errno %d",
	      errno);
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(id);
	CHECK(id->verbs == NULL && la->sin_family == AF_INET && la->sin_addr.s_addr == 0 &&
		      rdma_get_src_port(id) != 0,
	      "wildcard: verbs %p, family %d, port %u", (void *)id->verbs, la->sin_family,
	      ntohs(rdma_get_src_port(id)));
	CHECK(rdma_listen(id, 1) == 0, "listening on the wildcard: errno %d", errno);
	CHECK(all_zero(rdma_get_peer_addr(id), sizeof(struct sockaddr_in6)) &&
		      rdma_get_dst_port(id) == 0,
	      "a listener has no peer");
	CHECK(rdma_destroy_id(id) == 0, "destroying the wildcard listener");

	/* The IPv6 wildcard binds and listens too, its local address of family AF_INET6. */
	struct rdma_cm_id *v6 = NULL;
	struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
	CHECK(rdma_create_id(ch, &v6, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(v6, (struct sockaddr *)&any6) == 0 &&
		      rdma_get_local_addr(v6)->sa_family == AF_INET6 &&
		      rdma_get_src_port(v6) != 0 && rdma_listen(v6, 2) == 0,
	      "binding and listening on [::]: errno %d", errno);
	CHECK(v6 && rdma_destroy_id(v6) == 0, "destroying the IPv6 listener");
}

/* rdma_set_option(3): REUSEADDR, AFONLY, ACK_TIMEOUT's size, TOS. */
static void options(void)
{
	step = "rdma_set_option";
	int one = 1;
	uint8_t byte = 1;
	struct rdma_cm_id *r1 = NULL, *r2 = NULL;
	CHECK(rdma_create_id(ch, &r1, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_create_id(ch, &r2, NULL, RDMA_PS_TCP) == 0,
	      "two ids: errno %d", errno);
	if (!r1 || !r2)
		return;
	/* REUSEADDR and AFONLY: "The expected optlen is size of int": one byte is EINVAL. */
	errno = 0;
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &byte, 1) == -1 &&
		      errno == EINVAL,
	      "REUSEADDR with a 1-byte value: errno %d", errno);
	errno = 0;
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &byte, 1) == -1 &&
		      errno == EINVAL,
	      "AFONLY with a 1-byte value: errno %d", errno);
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)) == 0,
	      "AFONLY with an int: errno %d", errno);
	/* REUSEADDR: "This will allow other users to bind to that same address." */
	struct sockaddr_in at = ipv4(server_ip, PORT);
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) ==
			      0 &&
		      rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one,
				      sizeof(one)) == 0,
	      "REUSEADDR: errno %d", errno);
	CHECK(rdma_bind_addr(r1, (struct sockaddr *)&at) == 0 &&
		      rdma_bind_addr(r2, (struct sockaddr *)&at) == 0,
	      "both reusing ids bind %s:%d: errno %d", server_ip, PORT, errno);
	CHECK(rdma_destroy_id(r1) == 0 && rdma_destroy_id(r2) == 0, "destroying them");

	/* ACK_TIMEOUT ("Set QP ACK timeout"): the kernel's ucma_set_option_id takes a u8, an
	 * int is EINVAL. TOS "Specify the quality of service provided by a connection": on
	 * RoCE, the path's traffic class. */
	struct rdma_cm_id *t = NULL;
	uint8_t tos = 0x48;
	CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!t)
		return;
	errno = 0;
	CHECK(rdma_set_option(t, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &one, sizeof(one)) ==
			      -1 &&
		      errno == EINVAL,
	      "ACK_TIMEOUT with an int: errno %d", errno);
	CHECK(rdma_set_option(t, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS: errno %d",
	      errno);
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT);
	CHECK(rdma_resolve_addr(t, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, t, 0) &&
		      rdma_resolve_route(t, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, t, 0),
	      "resolving: errno %d", errno);
	CHECK(t->route.path_rec && t->route.path_rec->traffic_class == tos,
	      "the path's traffic class %u (TOS %#x)",
	      t->route.path_rec ? t->route.path_rec->traffic_class : 0, tos);
	CHECK(rdma_destroy_id(t) == 0, "destroying the id");
}

/* One SA path record of `flags`: MTU 1024, traffic class 0x20, hop limit 7, SL 3, packet
 * lifetime 14 and flow label 0x12345 between the id's resolved GIDs. */
static struct ibv_path_data path_data(struct rdma_cm_id *id, uint32_t flags)
{
	struct ibv_path_data d;
	memset(&d, 0, sizeof(d));
	d.flags = flags;
	d.path.dgid = id->route.addr.addr.ibaddr.dgid;
	d.path.sgid = id->route.addr.addr.ibaddr.sgid;
	d.path.flowlabel_hoplimit = htobe32(0x12345u << 8 | 7);
	d.path.tclass = 0x20;
	d.path.reversible_numpath = IBV_PATH_RECORD_REVERSIBLE | 1;
	d.path.pkey = htobe16(0xffff);
	d.path.qosclass_sl = htobe16(3);
	d.path.mtu = 2 << 6 | IBV_MTU_1024;
	d.path.rate = 2 << 6 | IBV_RATE_10_GBPS;
	d.path.packetlifetime = 2 << 6 | 14;
	return d;
}

/* rdma_set_option(3)'s RDMA_OPTION_IB_PATH ("Set IB path record data", struct
 * ibv_path_data[]): as the kernel's ucma_set_ib_path on RoCE, it takes the place of
 * rdma_resolve_route on an id whose address is resolved: the first record flagged GMP,
 * PRIMARY and BIDIRECTIONAL becomes the route (ROUTE_RESOLVED), and the connection made on it
 * runs with that record's MTU, traffic class, hop limit and SL. */
static void ib_path_option(void)
{
	step = "RDMA_OPTION_IB_PATH";
	const uint32_t route = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
			       IBV_PATH_FLAG_BIDIRECTIONAL;
	struct rdma_cm_id *l = listen_on(server_ip, PORT + 9, NULL), *c = NULL;
	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!c)
		return;
	struct ibv_path_data d[2];
	d[1] = path_data(c, route);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d[1], sizeof(d[1])) == -1 &&
		      errno == EINVAL,
	      "a path for an id with no address resolved: errno %d", errno);
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT + 9);
	CHECK(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, c, 0),
	      "resolving the address: errno %d", errno);
	d[0] = path_data(c, IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_ALTERNATE |
				    IBV_PATH_FLAG_BIDIRECTIONAL);
	d[0].path.mtu = 2 << 6 | IBV_MTU_4096;
	d[1] = path_data(c, route);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, d, sizeof(d) - 1) == -1 &&
		      errno == EINVAL,
	      "part of a record: errno %d", errno);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, d, sizeof(d[0])) == -1 &&
		      errno == EINVAL,
	      "only an alternate path: errno %d", errno);
	struct ibv_path_data not_gmp = path_data(c, IBV_PATH_FLAG_PRIMARY |
							    IBV_PATH_FLAG_BIDIRECTIONAL);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &not_gmp, sizeof(not_gmp)) ==
			      -1 &&
		      errno == EINVAL,
	      "a primary path not for GMPs: errno %d", errno);
	struct ibv_path_data no_mtu = path_data(c, route);
	no_mtu.path.mtu = 0;
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &no_mtu, sizeof(no_mtu)) ==
			      -1 &&
		      errno == EINVAL,
	      "a path with no MTU: errno %d", errno);
	CHECK(c->route.num_paths == 0, "no route after the refusals: %d paths",
	      c->route.num_paths);

	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, d, sizeof(d)) == 0 &&
		      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, c, 0),
	      "the alternate, then the primary path: errno %d", errno);
	struct ibv_sa_path_rec *p = c->route.path_rec;
	CHECK(c->route.num_paths == 1 && p, "one path: %d", c->route.num_paths);
	if (p)
		CHECK(p->mtu == IBV_MTU_1024 && p->traffic_class == 0x20 && p->hop_limit == 7 &&
			      p->sl == 3 && p->packet_life_time == 14 &&
			      be32toh(p->flow_label) == 0x12345 && p->reversible == 1 &&
			      p->numb_path == 1 &&
			      !memcmp(&p->dgid, &c->route.addr.addr.ibaddr.dgid, sizeof(p->dgid)),
		      "the primary record unpacked: mtu %u tclass %#x hop %u sl %u life %u flow %#x",
		      p->mtu, p->traffic_class, p->hop_limit, p->sl, p->packet_life_time,
		      be32toh(p->flow_label));
	errno = 0;
	CHECK(rdma_resolve_route(c, 2000) == -1 && errno == EINVAL,
	      "rdma_resolve_route once the path set the route: errno %d", errno);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d[1], sizeof(d[1])) == -1 &&
		      errno == EINVAL,
	      "a second path: errno %d", errno);

	struct ibv_qp_init_attr ca = rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0, "the client's QP: errno %d", errno);
	struct rdma_cm_id *s = connected(c, NULL, NULL, 1);
	CHECK(s != NULL, "connecting over the path: errno %d", errno);
	if (s) {
		struct ibv_qp_attr qa, sa;
		struct ibv_qp_init_attr ia;
		memset(&qa, 0, sizeof(qa));
		memset(&sa, 0, sizeof(sa));
		ibv_query_qp(c->qp, &qa, IBV_QP_PATH_MTU | IBV_QP_AV, &ia);
		ibv_query_qp(s->qp, &sa, IBV_QP_PATH_MTU | IBV_QP_AV, &ia);
		CHECK(qa.path_mtu == IBV_MTU_1024 && sa.path_mtu == IBV_MTU_1024,
		      "both QPs at the path's MTU (the port's is larger): %d and %d", qa.path_mtu,
		      sa.path_mtu);
		CHECK(qa.ah_attr.grh.traffic_class == 0x20 && qa.ah_attr.grh.hop_limit == 7 &&
			      qa.ah_attr.sl == 3,
		      "the client's QP on the path: tclass %#x hop %u sl %u",
		      qa.ah_attr.grh.traffic_class, qa.ah_attr.grh.hop_limit, qa.ah_attr.sl);
		disconnect_and_destroy(c, s);
	} else {
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
}

/* rdma_create_qp(3), rdma_create_srq(3), rdma_post_send(3), rdma_create_ep(3) and
 * rdma_create_id(3) on what they refuse and what they return. */
static void queue_pairs_and_endpoints(void)
{
	step = "rdma_create_qp";
	/* "The rdma_cm_id must be bound to a local RDMA device before calling this function":
	 * neither an unbound id nor one bound to the wildcard (no device) gets a QP or SRQ. */
	struct rdma_cm_id *w = NULL;
	struct sockaddr_in any = ipv4("0.0.0.0", 0);
	struct ibv_qp_init_attr qa = rc_attr();
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	CHECK(rdma_create_id(ch, &w, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!w)
		return;
	CHECK(rdma_create_qp(w, NULL, &qa) == -1 && w->qp == NULL, "a QP on an unbound id");
	CHECK(rdma_create_srq(w, NULL, &sa) == -1 && w->srq == NULL, "an SRQ on an unbound id");
	CHECK(rdma_bind_addr(w, (struct sockaddr *)&any) == 0, "binding the wildcard: errno %d",
	      errno);
	qa = rc_attr();
	CHECK(rdma_create_qp(w, NULL, &qa) == -1 && w->qp == NULL,
	      "a QP on a wildcard-bound id");
	CHECK(rdma_create_srq(w, NULL, &sa) == -1 && w->srq == NULL,
	      "an SRQ on a wildcard-bound id");
	CHECK(rdma_destroy_id(w) == 0, "destroying it");

	/* rdma_create_srq with a PD of the application's: the SRQ is on that PD, and the id
	 * keeps rdma_cm's own PD (librdmacm sets id->pd only when it has none), which a QP
	 * created afterwards with a NULL PD takes. */
	struct rdma_cm_id *p = NULL;
	struct sockaddr_in pa = ipv4(client_ip, 0);
	CHECK(rdma_create_id(ch, &p, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(p, (struct sockaddr *)&pa) == 0 && p->verbs && p->pd,
	      "a bound id with rdma_cm's PD: errno %d", errno);
	if (p && p->pd) {
		struct ibv_pd *own = p->pd, *user_pd = ibv_alloc_pd(p->verbs);
		CHECK(user_pd && rdma_create_srq(p, user_pd, &sa) == 0 && p->srq &&
			      p->srq->pd == user_pd && p->pd == own,
		      "an SRQ on the application's PD leaves the id's PD: errno %d", errno);
		if (p->srq)
			rdma_destroy_srq(p);
		if (user_pd)
			ibv_dealloc_pd(user_pd);
	}
	if (p)
		rdma_destroy_id(p);

	/* "the protection domain must be for that same device": a PD of the other device is
	 * refused. */
	struct rdma_cm_id *c = client_to(PORT), *o = NULL;
	struct sockaddr_in oa = ipv4(server_ip, 0);
	CHECK(rdma_create_id(ch, &o, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(o, (struct sockaddr *)&oa) == 0 && o->verbs &&
		      o->verbs != c->verbs,
	      "an id on the server's device: errno %d", errno);
	struct ibv_pd *other_pd = o && o->verbs ? ibv_alloc_pd(o->verbs) : NULL;
	qa = rc_attr();
	CHECK(other_pd && rdma_create_qp(c, other_pd, &qa) == -1 && c->qp == NULL,
	      "a QP with another device's PD");
	if (other_pd)
		ibv_dealloc_pd(other_pd);
	if (o)
		rdma_destroy_id(o);

	/* "The actual capabilities and properties of the created QP will be returned to the
	 * user through the qp_init_attr parameter." */
	qa = rc_attr();
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 3;
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "a QP: errno %d", errno);
	if (!c->qp)
		return;
	struct ibv_qp_attr got = qp_attr(c->qp);
	CHECK(qa.cap.max_send_wr == got.cap.max_send_wr &&
		      qa.cap.max_recv_wr == got.cap.max_recv_wr &&
		      qa.cap.max_inline_data == got.cap.max_inline_data && qa.cap.max_send_wr >= 3,
	      "returned caps send %u/%u, recv %u/%u, inline %u/%u", qa.cap.max_send_wr,
	      got.cap.max_send_wr, qa.cap.max_recv_wr, got.cap.max_recv_wr,
	      qa.cap.max_inline_data, got.cap.max_inline_data);

	/* rdma_post_send(3): "Send operations may not be posted to an rdma_cm_id or the
	 * corresponding queue pair until it has been connected." */
	char buf[8] = "early";
	struct ibv_mr *mr = rdma_reg_msgs(c, buf, sizeof(buf));
	CHECK(mr && rdma_post_send(c, NULL, buf, sizeof(buf), mr, IBV_SEND_SIGNALED) == -1,
	      "a send posted before the connection is refused");
	if (mr)
		rdma_dereg_mr(mr);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0, "destroying the id");

	/* rdma_create_id(3): RDMA_PS_IB is a port space of connected ids (RC). */
	struct rdma_cm_id *ib = NULL;
	CHECK(rdma_create_id(ch, &ib, NULL, RDMA_PS_IB) == 0 && ib->ps == RDMA_PS_IB &&
		      ib->qp_type == IBV_QPT_RC,
	      "an RDMA_PS_IB id: errno %d", errno);
	if (ib)
		rdma_destroy_id(ib);

	/* rdma_create_ep(3): "The QP will be associated with the specified protection
	 * domain". */
	step = "rdma_create_ep with a PD";
	char port[8];
	snprintf(port, sizeof(port), "%d", PORT);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_qp_type = IBV_QPT_RC},
			     *res = NULL;
	CHECK(rdma_getaddrinfo(server_ip, port, &hints, &res) == 0 && res, "rdma_getaddrinfo");
	struct ibv_context **devs = rdma_get_devices(NULL);
	struct ibv_pd *pd = devs && devs[0] ? ibv_alloc_pd(devs[0]) : NULL;
	struct rdma_cm_id *ep = NULL;
	qa = rc_attr();
	CHECK(res && pd && rdma_create_ep(&ep, res, pd, &qa) == 0 && ep && ep->qp &&
		      ep->qp->pd == pd && ep->pd == pd,
	      "the endpoint's QP is on the given PD: errno %d", errno);
	if (ep)
		rdma_destroy_ep(ep);
	if (pd)
		ibv_dealloc_pd(pd);
	if (devs)
		rdma_free_devices(devs);
	if (res)
		rdma_freeaddrinfo(res);
}

/* rdma_destroy_event_channel(3), rdma_get_devices(3), rdma_event_str(3). */
static void channels_devices_strings(void)
{
	/* "closes the associated file descriptor" */
	struct rdma_event_channel *c = rdma_create_event_channel();
	CHECK(c != NULL, "a channel: errno %d", errno);
	if (c) {
		int fd = c->fd;
		rdma_destroy_event_channel(c);
		errno = 0;
		CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF,
		      "the channel's fd %d is closed: errno %d", fd, errno);
	}
	/* num_devices: "If non-NULL, set to the number of devices returned": NULL is fine. */
	struct ibv_context **list = rdma_get_devices(NULL);
	CHECK(list && list[0] && list[1], "rdma_get_devices(NULL) lists both devices");
	if (list)
		rdma_free_devices(list);
	/* A string for every event type. */
	for (int e = RDMA_CM_EVENT_ADDR_RESOLVED; e <= RDMA_CM_EVENT_ADDR_CHANGE; e++) {
		const char *s = rdma_event_str(e);
		CHECK(s && strncmp(s, "RDMA_CM_EVENT_", 14) == 0, "event %d: %s", e,
		      s ? s : "NULL");
	}
}

struct later {
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	int started; /* set (atomically) just before the deferred call */
};

/* After 300 ms: resolve the id's address to the server. */
static void *resolve_later(void *arg)
{
	struct later *l = arg;
	struct sockaddr_in dst = ipv4(server_ip, PORT);
	usleep(300000);
	__atomic_store_n(&l->started, 1, __ATOMIC_SEQ_CST);
	rdma_resolve_addr(l->id, NULL, (struct sockaddr *)&dst, 2000);
	return NULL;
}

/* After 300 ms: acknowledge the event. */
static void *ack_later(void *arg)
{
	struct later *l = arg;
	usleep(300000);
	__atomic_store_n(&l->started, 1, __ATOMIC_SEQ_CST);
	rdma_ack_cm_event(l->ev);
	return NULL;
}

/* rdma_get_cm_event(3), rdma_destroy_id(3) and rdma_migrate_id(3) wait. Each check holds
 * however the threads are scheduled: the event or ack awaited can only exist once the
 * other thread has set `started`. */
static void calls_that_block(void)
{
	step = "blocking calls";
	pthread_t th;
	struct later l = {0};
	/* "If no events are pending, by default, the call will block until an event is
	 * received." */
	CHECK(rdma_create_id(ch, &l.id, NULL, RDMA_PS_TCP) == 0, "an id: errno %d", errno);
	if (!l.id || pthread_create(&th, NULL, resolve_later, &l))
		return;
	struct rdma_cm_event *ev = NULL;
	int rc = rdma_get_cm_event(ch, &ev);
	CHECK(rc == 0 && ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == l.id &&
		      __atomic_load_n(&l.started, __ATOMIC_SEQ_CST),
	      "rdma_get_cm_event waited for the event: rc %d errno %d", rc, errno);
	pthread_join(th, NULL);
	if (rc)
		return;

	/* rdma_destroy_id(3) / rdma_get_cm_event(3): "Destruction of an rdma_cm_id will block
	 * until related events have been acknowledged." */
	l.ev = ev;
	l.started = 0;
	if (pthread_create(&th, NULL, ack_later, &l))
		return;
	CHECK(rdma_destroy_id(l.id) == 0, "destroying an id with an unacked event");
	CHECK(__atomic_load_n(&l.started, __ATOMIC_SEQ_CST),
	      "rdma_destroy_id returned before the event was acknowledged");
	pthread_join(th, NULL);

	/* rdma_migrate_id(3): "This call will block while there are any unacknowledged events
	 * on the current event channel." */
	struct rdma_event_channel *other = rdma_create_event_channel();
	struct rdma_cm_id *m = NULL;
	struct sockaddr_in dst = ipv4(server_ip, PORT);
	CHECK(other && rdma_create_id(ch, &m, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(m, NULL, (struct sockaddr *)&dst, 2000) == 0,
	      "resolving: errno %d", errno);
	ev = m ? take(ch, RDMA_CM_EVENT_ADDR_RESOLVED, m) : NULL;
	CHECK(ev != NULL, "ADDR_RESOLVED");
	if (!ev)
		return;
	l.ev = ev;
	l.started = 0;
	if (pthread_create(&th, NULL, ack_later, &l))
		return;
	CHECK(rdma_migrate_id(m, other) == 0 && m->channel == other,
	      "migrating an id with an unacked event: errno %d", errno);
	CHECK(__atomic_load_n(&l.started, __ATOMIC_SEQ_CST),
	      "rdma_migrate_id returned before the event was acknowledged");
	pthread_join(th, NULL);
	CHECK(rdma_destroy_id(m) == 0, "destroying the migrated id");
	rdma_destroy_event_channel(other);
}

/* The server of the synchronous endpoints, on its own thread (synchronous calls block). */
static struct rdma_cm_id *sync_listener;
static const char sync_hello[] = "sync-hello";
static volatile int server_disconnecting;

static void *sync_server(void *arg)
{
	(void)arg;
	struct rdma_cm_id *s = NULL;
	/* rdma_get_request(3), on a listener "operating synchronously": "If no requests are
	 * pending, the call will block"; the new id's event is its CONNECT_REQUEST (id,
	 * listen_id, private data); "If QP attributes are associated with the listening
	 * endpoint, the returned rdma_cm_id will also reference an allocated QP." */
	CHECK(rdma_get_request(sync_listener, &s) == 0 && s, "rdma_get_request: errno %d", errno);
	if (!s)
		return NULL;
	CHECK(s->event && s->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
		      s->event->id == s && s->event->listen_id == sync_listener,
	      "the new id's event is its CONNECT_REQUEST");
	CHECK(s->event && s->event->param.conn.private_data &&
		      memcmp(s->event->param.conn.private_data, sync_hello, sizeof(sync_hello)) ==
			      0,
	      "the request's private data");
	CHECK(s->qp && s->qp->qp_type == IBV_QPT_RC, "a QP from the listener's attributes");
	uint64_t in = 0;
	struct ibv_mr *mr = s->qp ? rdma_reg_msgs(s, &in, sizeof(in)) : NULL;
	CHECK(mr && rdma_post_recv(s, (void *)0x51, &in, sizeof(in), mr) == 0, "a receive");
	/* rdma_cm(7): without a channel "all rdma_cm operations ... will block until they
	 * complete": rdma_accept returns established, the event in s->event. */
	CHECK(rdma_accept(s, NULL) == 0, "synchronous rdma_accept: errno %d", errno);
	CHECK(s->event && s->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "after rdma_accept, s->event is ESTABLISHED (%s)",
	      s->event ? rdma_event_str(s->event->event) : "none");
	/* rdma_get_recv_comp(3) blocks until the client's send arrives and returns 1. */
	struct ibv_wc wc;
	CHECK(mr && rdma_get_recv_comp(s, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.wr_id == 0x51 && in == 0xabcdef,
	      "received %#lx", (unsigned long)in);
	/* The client's synchronous rdma_disconnect must wait for this one (its DISCONNECTED
	 * comes with our answer): it checks the flag once it returns. */
	usleep(200000);
	server_disconnecting = 1;
	CHECK(rdma_disconnect(s) == 0, "synchronous rdma_disconnect (server): errno %d", errno);
	/* librdmacm's rdma_disconnect ends in ucma_complete: a synchronous id returns with its
	 * next event, DISCONNECTED, in s->event, its QP in the error state. */
	CHECK(s->event && s->event->event == RDMA_CM_EVENT_DISCONNECTED && s->event->status == 0,
	      "after a synchronous rdma_disconnect, s->event is DISCONNECTED (%s)",
	      s->event ? rdma_event_str(s->event->event) : "none");
	CHECK(s->qp && qp_attr(s->qp).qp_state == IBV_QPS_ERR, "the server's QP is in ERR");
	if (mr)
		rdma_dereg_mr(mr);
	rdma_destroy_ep(s);
	return NULL;
}

/* Synchronous ids end to end: rdma_create_ep(3) passive and active, rdma_get_request(3),
 * rdma_connect(3)/rdma_accept(3)/rdma_disconnect(3) blocking, rdma_migrate_id(3) to NULL. */
static void synchronous_endpoints(void)
{
	step = "synchronous endpoints";
	char port[8];
	snprintf(port, sizeof(port), "%d", PORT + 1);
	/* rdma_create_ep(3): "If RAI_PASSIVE set, this call will save the provided pd and
	 * qp_init_attr parameters" (the endpoint has no QP of its own) and "the returned
	 * rdma_cm_id may be placed into a listening state by immediately calling
	 * rdma_listen". */
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP},
			     *res = NULL;
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.sq_sig_all = 1};
	CHECK(rdma_getaddrinfo(server_ip, port, &hints, &res) == 0 && res &&
		      rdma_create_ep(&sync_listener, res, NULL, &qa) == 0,
	      "a passive endpoint: errno %d", errno);
	if (res)
		rdma_freeaddrinfo(res);
	if (!sync_listener)
		return;
	CHECK(sync_listener->qp == NULL, "a passive endpoint has no QP");
	CHECK(rdma_listen(sync_listener, 4) == 0, "it listens: errno %d", errno);
	/* rdma_migrate_id(3) to NULL makes an id synchronous; one that already is: EINVAL
	 * (librdmacm). */
	errno = 0;
	CHECK(rdma_migrate_id(sync_listener, NULL) == -1 && errno == EINVAL,
	      "a synchronous id migrated to NULL: errno %d", errno);

	pthread_t th;
	if (pthread_create(&th, NULL, sync_server, NULL))
		return;
	/* rdma_create_ep(3), active: the address and route are resolved and the QP made,
	 * from hints.ai_src_addr; rdma_connect follows at once. */
	struct sockaddr_in src = ipv4(client_ip, 0);
	struct rdma_addrinfo active = {.ai_port_space = RDMA_PS_TCP,
				       .ai_qp_type = IBV_QPT_RC,
				       .ai_src_addr = (struct sockaddr *)&src,
				       .ai_src_len = sizeof(src)};
	struct rdma_cm_id *c = NULL;
	struct ibv_qp_init_attr ca = qa;
	res = NULL;
	CHECK(rdma_getaddrinfo(server_ip, port, &active, &res) == 0 && res && res->ai_src_addr &&
		      ((struct sockaddr_in *)res->ai_src_addr)->sin_addr.s_addr ==
			      src.sin_addr.s_addr,
	      "rdma_getaddrinfo keeps hints.ai_src_addr");
	CHECK(res && rdma_create_ep(&c, res, NULL, &ca) == 0 && c && c->qp,
	      "an active endpoint with a QP: errno %d", errno);
	if (res)
		rdma_freeaddrinfo(res);
	uint64_t out = 0xabcdef;
	struct ibv_mr *mr = NULL;
	if (c) {
		CHECK(((struct sockaddr_in *)rdma_get_local_addr(c))->sin_addr.s_addr ==
			      src.sin_addr.s_addr,
		      "the endpoint is bound to ai_src_addr");
		struct rdma_conn_param cp = {.private_data = sync_hello,
					     .private_data_len = sizeof(sync_hello),
					     .responder_resources = 1,
					     .initiator_depth = 1,
					     .retry_count = 7,
					     .rnr_retry_count = 7};
		CHECK(rdma_connect(c, &cp) == 0, "synchronous rdma_connect: errno %d", errno);
		CHECK(c->event && c->event->event == RDMA_CM_EVENT_ESTABLISHED,
		      "after rdma_connect, c->event is ESTABLISHED (%s)",
		      c->event ? rdma_event_str(c->event->event) : "none");
		/* rdma_get_send_comp(3) returns 1 for the completion. */
		struct ibv_wc wc;
		mr = rdma_reg_msgs(c, &out, sizeof(out));
		CHECK(mr && rdma_post_send(c, (void *)0x52, &out, sizeof(out), mr, 0) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      wc.wr_id == 0x52,
		      "a send from the client");
		CHECK(rdma_disconnect(c) == 0, "synchronous rdma_disconnect (client): errno %d",
		      errno);
		CHECK(server_disconnecting,
		      "a synchronous rdma_disconnect returns once the peer has disconnected too");
		CHECK(c->event && c->event->event == RDMA_CM_EVENT_DISCONNECTED &&
			      c->event->status == 0,
		      "after a synchronous rdma_disconnect, c->event is DISCONNECTED (%s)",
		      c->event ? rdma_event_str(c->event->event) : "none");
		CHECK(qp_attr(c->qp).qp_state == IBV_QPS_ERR, "the client's QP is in ERR");
		/* A second one: the CM has nothing to send (0), and ucma_complete waits for the
		 * id's next event, the end of time-wait. */
		CHECK(rdma_disconnect(c) == 0 && c->event &&
			      c->event->event == RDMA_CM_EVENT_TIMEWAIT_EXIT,
		      "a second synchronous rdma_disconnect returns with TIMEWAIT_EXIT (%s): "
		      "errno %d",
		      c->event ? rdma_event_str(c->event->event) : "none", errno);
	}
	pthread_join(th, NULL);
	if (mr)
		rdma_dereg_mr(mr);
	if (c)
		rdma_destroy_ep(c);
	rdma_destroy_ep(sync_listener);

	/* rdma_migrate_id(3): "If the channel parameter is NULL, the specified rdma_cm_id will
	 * be placed into synchronous operation mode": rdma_resolve_addr returns with the event
	 * in m->event, and the old channel sees nothing. Migrated to a channel, it is
	 * asynchronous again. */
	struct rdma_cm_id *m = NULL;
	struct sockaddr_in dst = ipv4(server_ip, PORT + 1);
	CHECK(rdma_create_id(ch, &m, NULL, RDMA_PS_TCP) == 0 && rdma_migrate_id(m, NULL) == 0,
	      "an id migrated to NULL: errno %d", errno);
	if (!m)
		return;
	CHECK(rdma_resolve_addr(m, NULL, (struct sockaddr *)&dst, 2000) == 0 && m->event &&
		      m->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "synchronous rdma_resolve_addr: errno %d", errno);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 0) == 0, "the old channel has no event");
	CHECK(rdma_migrate_id(m, ch) == 0 && m->channel == ch && rdma_resolve_route(m, 2000) == 0 &&
		      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, m, 0),
	      "asynchronous again on a channel: errno %d", errno);
	CHECK(rdma_destroy_id(m) == 0, "destroying it");
}

/* rdma_connect(3) and rdma_accept(3): depths above the device's are EINVAL; retry counts
 * are 3-bit; RDMA_OPTION_ID_ACK_TIMEOUT sets the QP's timeout; the request's parameters can
 * be accepted by reference; rdma_cm(7): the server may disconnect first; then
 * TIMEWAIT_EXIT. */
static void depth_retry_and_timewait(void)
{
	step = "depths and retries";
	struct rdma_cm_id *l = listen_on(server_ip, PORT + 2, NULL);
	struct rdma_cm_id *c = client_to(PORT + 2), *s = NULL;
	struct ibv_device_attr dev;
	struct ibv_qp_init_attr ca = rc_attr();
	CHECK(ibv_query_device(c->verbs, &dev) == 0 && rdma_create_qp(c, NULL, &ca) == 0,
	      "a client QP: errno %d", errno);
	if (!c->qp)
		return;
	/* "responder_resources ... must be less than or equal to the local RDMA device
	 * attribute max_qp_rd_atom"; initiator_depth at most max_qp_init_rd_atom. */
	CHECK(dev.max_qp_rd_atom < 254 && dev.max_qp_init_rd_atom < 254, "device maxima %d, %d",
	      dev.max_qp_rd_atom, dev.max_qp_init_rd_atom);
	struct rdma_conn_param deep = {.responder_resources = dev.max_qp_rd_atom + 1};
	errno = 0;
	CHECK(rdma_connect(c, &deep) == -1 && errno == EINVAL,
	      "connect: responder_resources %u > max_qp_rd_atom %d: errno %d",
	      deep.responder_resources, dev.max_qp_rd_atom, errno);
	struct rdma_conn_param wide = {.initiator_depth = dev.max_qp_init_rd_atom + 1};
	errno = 0;
	CHECK(rdma_connect(c, &wide) == -1 && errno == EINVAL,
	      "connect: initiator_depth %u > max_qp_init_rd_atom %d: errno %d",
	      wide.initiator_depth, dev.max_qp_init_rd_atom, errno);

	/* "Retry count and RNR retry count values are 3-bit values": 9 and 12 act as 7.
	 * rdma_set_option(3) RDMA_OPTION_ID_ACK_TIMEOUT: "Set QP ACK timeout". rdma_accept(3)
	 * takes the request's own rdma_conn_param, referenced before the event is acked. */
	uint8_t timeout = 19;
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1) == 0,
	      "ACK_TIMEOUT: errno %d", errno);
	struct rdma_conn_param cp = {.retry_count = 9,
				     .rnr_retry_count = 12,
				     .responder_resources = 1,
				     .initiator_depth = 1};
	s = connected(c, &cp, NULL, 1);
	CHECK(s != NULL, "connected, accepted with &ev->param.conn: errno %d", errno);
	if (!s)
		return;
	struct ibv_qp_attr a = qp_attr(c->qp), b = qp_attr(s->qp);
	CHECK(a.retry_cnt == 7 && b.retry_cnt == 7 && b.rnr_retry == 7,
	      "retry_cnt client %u server %u, server rnr_retry %u (want 7)", a.retry_cnt,
	      b.retry_cnt, b.rnr_retry);
	CHECK(a.timeout == 19, "the client QP's ACK timeout %u (set 19)", a.timeout);

	/* rdma_cm(7): "either side of a connection may initiate the disconnect": the server
	 * here; its QP goes to the error state. */
	step = "server-first disconnect";
	CHECK(rdma_disconnect(s) == 0 && qp_attr(s->qp).qp_state == IBV_QPS_ERR,
	      "the server disconnects first: errno %d", errno);
	CHECK(next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0), "the client is told");
	CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0),
	      "the client disconnects, the server is told: errno %d", errno);
	/* rdma_get_cm_event(3) TIMEWAIT_EXIT: "After the timewait state has completed, the
	 * rdma_cm will report this event" — once for each id. */
	step = "TIMEWAIT_EXIT";
	int tw_c = 0, tw_s = 0;
	for (int i = 0; i < 2; i++) {
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev && ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT && ev->status == 0,
		      "TIMEWAIT_EXIT, got %s", ev ? rdma_event_str(ev->event) : "nothing");
		if (!ev)
			break;
		tw_c += ev->id == c;
		tw_s += ev->id == s;
		rdma_ack_cm_event(ev);
	}
	CHECK(tw_c == 1 && tw_s == 1, "one TIMEWAIT_EXIT each: client %d, server %d", tw_c, tw_s);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(s) == 0, "destroying the ids");
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
}

/* A connection made with odd parameters, then used through rdma_verbs.h: rdma_connect(3)
 * before the route, qp_num ignored with a QP, no private data, rdma_accept(3) over the
 * device's depth then accepted, accepted twice; new ids inherit the listener's context;
 * vector posts, inline sends without an MR, rdma_reg_read/rdma_reg_write(3). */
static void a_connection_used_through_rdma_verbs(void)
{
	step = "connection parameters";
	struct rdma_cm_id *l = listen_on(server_ip, PORT + 3, (void *)0x1157);
	struct rdma_cm_id *c = resolved_id(client_ip, server_ip, PORT + 3, 0), *s = NULL;
	struct ibv_qp_init_attr ca = rc_attr(), sa = rc_attr();
	struct ibv_device_attr dev;
	CHECK(ibv_query_device(l->verbs, &dev) == 0 && rdma_create_qp(c, NULL, &ca) == 0,
	      "a client QP: errno %d", errno);
	if (!c->qp)
		return;
	/* "Users must have resolved a route to the destination address by having called
	 * rdma_resolve_route or rdma_create_ep before calling this routine": ADDR_RESOLVED alone
	 * is EINVAL. */
	struct rdma_conn_param cp = {.qp_num = 0xabcd,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	errno = 0;
	CHECK(rdma_connect(c, &cp) == -1 && errno == EINVAL, "connecting before the route: errno %d",
	      errno);
	CHECK(rdma_resolve_route(c, 2000) == 0 && next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, c, 0),
	      "the route: errno %d", errno);
	/* The kernel resolves a route once: again is EINVAL, and no second event comes. */
	errno = 0;
	CHECK(rdma_resolve_route(c, 2000) == -1 && errno == EINVAL,
	      "resolving the route again: errno %d", errno);
	/* rdma_connect(3) qp_num: "This field is ignored by the library if a QP has been created
	 * on the rdma_cm_id." Flow control is one bit of the REQ: 2 is off. */
	cp.flow_control = 2;
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	CHECK(ev->param.conn.flow_control == 0, "flow control 2 arrives as %u (want 0)",
	      ev->param.conn.flow_control);
	s = ev->id;
	/* librdmacm: new ids take the listener's context. */
	CHECK(s->context == (void *)0x1157, "the new id's context %p", s->context);
	CHECK(ev->param.conn.qp_num == c->qp->qp_num, "the request names QP %#x (want %#x)",
	      ev->param.conn.qp_num, c->qp->qp_num);
	/* rdma_get_cm_event(3) private_data: "The buffer may be larger than the amount of
	 * data sent ... Any additional space in the buffer will be zeroed out": none sent is
	 * none or zeroes. */
	const unsigned char *p = ev->param.conn.private_data;
	int zero = 1;
	for (unsigned i = 0; p && i < ev->param.conn.private_data_len; i++)
		zero &= p[i] == 0;
	CHECK(zero, "no private data sent: NULL or zeroes (length %u)",
	      ev->param.conn.private_data_len);
	CHECK(rdma_create_qp(s, NULL, &sa) == 0, "a server QP: errno %d", errno);
	/* rdma_accept(3): responder_resources at most max_qp_rd_atom, initiator_depth at most
	 * max_qp_init_rd_atom; the request stays acceptable after a refused accept; qp_num
	 * is ignored with a QP here too. */
	struct rdma_conn_param deep = {.responder_resources = dev.max_qp_rd_atom + 1};
	errno = 0;
	CHECK(rdma_accept(s, &deep) == -1 && errno == EINVAL,
	      "accept: responder_resources %u > max_qp_rd_atom %d: errno %d",
	      deep.responder_resources, dev.max_qp_rd_atom, errno);
	struct rdma_conn_param wide = {.initiator_depth = dev.max_qp_init_rd_atom + 1};
	errno = 0;
	CHECK(rdma_accept(s, &wide) == -1 && errno == EINVAL,
	      "accept: initiator_depth %u > max_qp_init_rd_atom %d: errno %d",
	      wide.initiator_depth, dev.max_qp_init_rd_atom, errno);
	struct rdma_conn_param ap = {.qp_num = 0x1234,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .rnr_retry_count = 7};
	CHECK(rdma_accept(s, &ap) == 0, "accepted after the refused ones: errno %d", errno);
	rdma_ack_cm_event(ev);
	ev = NULL;
	CHECK(both_established(c, s, &ev), "both sides ESTABLISHED");
	if (!ev)
		return;
	CHECK(ev->param.conn.qp_num == s->qp->qp_num, "the client is told QP %#x (want %#x)",
	      ev->param.conn.qp_num, s->qp->qp_num);
	rdma_ack_cm_event(ev);
	errno = 0;
	CHECK(rdma_accept(s, &ap) == -1, "a second rdma_accept is refused");

	/* rdma_post_recvv(3) and rdma_post_sendv(3) scatter and gather 2 SGEs; "The
	 * user-defined context associated with the send request will be returned to the user
	 * through the work completion wr_id". */
	step = "vector posts";
	struct ibv_wc wc;
	char r1[4] = {0}, r2[8] = {0}, s1[4] = "abc", s2[8] = "defghij";
	struct ibv_mr *rm1 = rdma_reg_msgs(s, r1, sizeof(r1)), *rm2 = rdma_reg_msgs(s, r2, sizeof(r2));
	struct ibv_mr *sm1 = rdma_reg_msgs(c, s1, sizeof(s1)), *sm2 = rdma_reg_msgs(c, s2, sizeof(s2));
	CHECK(rm1 && rm2 && sm1 && sm2, "registrations");
	if (!rm1 || !rm2 || !sm1 || !sm2)
		return;
	struct ibv_sge rs[2] = {{(uintptr_t)r1, sizeof(r1), rm1->lkey},
				{(uintptr_t)r2, sizeof(r2), rm2->lkey}};
	struct ibv_sge ss[2] = {{(uintptr_t)s1, sizeof(s1), sm1->lkey},
				{(uintptr_t)s2, sizeof(s2), sm2->lkey}};
	CHECK(rdma_post_recvv(s, (void *)0x11, rs, 2) == 0 &&
		      rdma_post_sendv(c, (void *)0x12, ss, 2, IBV_SEND_SIGNALED) == 0,
	      "rdma_post_recvv, rdma_post_sendv: errno %d", errno);
	CHECK(rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x12 &&
		      wc.opcode == IBV_WC_SEND,
	      "the send's completion: %s", ibv_wc_status_str(wc.status));
	CHECK(rdma_get_recv_comp(s, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x11 &&
		      wc.byte_len == 12 && memcmp(r1, "abc", 4) == 0 &&
		      memcmp(r2, "defghij", 8) == 0,
	      "scattered into both: %s, %u bytes", ibv_wc_status_str(wc.status), wc.byte_len);

	/* rdma_post_send(3) mr: "Optional registered memory region associated with the posted
	 * buffer": an inline send (the data copied at the post) needs none. */
	char in[16] = {0}, inl[] = "inline!";
	struct ibv_mr *inm = rdma_reg_msgs(s, in, sizeof(in));
	CHECK(inm && rdma_post_recv(s, (void *)0x21, in, sizeof(in), inm) == 0 &&
		      rdma_post_send(c, (void *)0x22, inl, sizeof(inl), NULL,
				     IBV_SEND_INLINE | IBV_SEND_SIGNALED) == 0,
	      "an inline send without an MR: errno %d", errno);
	CHECK(rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x22,
	      "its completion: %s", ibv_wc_status_str(wc.status));
	CHECK(rdma_get_recv_comp(s, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x21 &&
		      strcmp(in, "inline!") == 0,
	      "received: %s", ibv_wc_status_str(wc.status));

	/* rdma_reg_write(3): "Registers a memory buffer that will be accessed by a remote RDMA
	 * write operation": rdma_post_writev(3) gathers into it; an inline write needs no MR. */
	step = "remote access";
	char target[16] = {0}, w[] = "WXYZ";
	struct ibv_mr *wm = rdma_reg_write(s, target, sizeof(target));
	CHECK(wm && rdma_post_writev(c, (void *)0x31, ss, 2, IBV_SEND_SIGNALED,
				     (uintptr_t)target, wm->rkey) == 0 &&
		      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.wr_id == 0x31 && wc.opcode == IBV_WC_RDMA_WRITE &&
		      memcmp(target, "abc\0defghij", 12) == 0,
	      "rdma_post_writev into an rdma_reg_write buffer: %s", ibv_wc_status_str(wc.status));
	CHECK(wm && rdma_post_write(c, (void *)0x32, w, 4, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				    (uintptr_t)target, wm->rkey) == 0 &&
		      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.wr_id == 0x32 && memcmp(target, "WXYZ", 4) == 0,
	      "an inline write without an MR: %s", ibv_wc_status_str(wc.status));
	/* rdma_reg_read(3): "... accessed by a remote RDMA read operation": rdma_post_readv(3)
	 * scatters from it. */
	char source[12] = "0123456789A", d1[4] = {0}, d2[8] = {0};
	struct ibv_mr *rdm = rdma_reg_read(s, source, sizeof(source));
	struct ibv_mr *dm1 = rdma_reg_msgs(c, d1, sizeof(d1)), *dm2 = rdma_reg_msgs(c, d2, sizeof(d2));
	CHECK(rdm && dm1 && dm2, "registrations");
	if (rdm && dm1 && dm2) {
		struct ibv_sge ds[2] = {{(uintptr_t)d1, sizeof(d1), dm1->lkey},
					{(uintptr_t)d2, sizeof(d2), dm2->lkey}};
		CHECK(rdma_post_readv(c, (void *)0x41, ds, 2, IBV_SEND_SIGNALED, (uintptr_t)source,
				      rdm->rkey) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      wc.wr_id == 0x41 && wc.opcode == IBV_WC_RDMA_READ &&
			      memcmp(d1, "0123", 4) == 0 && memcmp(d2, "456789A", 8) == 0,
		      "rdma_post_readv from an rdma_reg_read buffer: %s",
		      ibv_wc_status_str(wc.status));
		/* ... and only read: a remote write into it is a remote access error (which
		 * breaks the connection, so it comes last). */
		CHECK(rdma_post_write(c, (void *)0x51, w, 4, NULL,
				      IBV_SEND_INLINE | IBV_SEND_SIGNALED, (uintptr_t)source,
				      rdm->rkey) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
		      "a write into an rdma_reg_read buffer: %s", ibv_wc_status_str(wc.status));
	}
	disconnect_and_destroy(c, s);
	struct ibv_mr *mrs[] = {rm1, rm2, sm1, sm2, inm, wm, rdm, dm1, dm2};
	for (unsigned i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
		if (mrs[i])
			rdma_dereg_mr(mrs[i]);
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
}

/* Connecting where nobody listens is REJECTED with status 8 (the IB CM's "invalid service
 * ID", as rping reports on real devices); rdma_listen(3)'s scope. */
static void who_listens_where(void)
{
	step = "listen scope";
	struct rdma_conn_param cp = {.responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	struct ibv_qp_init_attr ca = rc_attr();
	struct rdma_cm_id *c = client_to(PORT + 4);
	CHECK(rdma_create_qp(c, NULL, &ca) == 0 && rdma_connect(c, &cp) == 0,
	      "connecting to a port nobody listens on: errno %d", errno);
	CHECK(next_is(RDMA_CM_EVENT_REJECTED, c, 8), "REJECTED with status 8");
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0, "destroying the id");

	/* "If the rdma_cm_id is bound to a specific IP address, the listen will be restricted
	 * to that address and the associated RDMA device": the same port at the other
	 * device's address has no listener. */
	struct rdma_cm_id *l = listen_on(server_ip, PORT + 5, NULL);
	c = resolved_id(server_ip, client_ip, PORT + 5, 1);
	ca = rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0 && rdma_connect(c, &cp) == 0,
	      "connecting to the listener's port at the other address: errno %d", errno);
	CHECK(next_is(RDMA_CM_EVENT_REJECTED, c, 8), "REJECTED with status 8: not listened on");
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(l) == 0, "destroying the ids");

	/* "If the rdma_cm_id is bound to an RDMA port number only, the listen will occur across
	 * all RDMA devices": one wildcard listener takes requests for both devices; each new id
	 * is on the device connected to, its local address the one the client connected to. */
	struct rdma_cm_id *wl = listen_on("0.0.0.0", PORT + 6, NULL);
	CHECK(wl->verbs == NULL, "the wildcard listener has no device");
	const char *to[2] = {server_ip, client_ip}, *from[2] = {client_ip, server_ip};
	for (int t = 0; t < 2; t++) {
		c = resolved_id(from[t], to[t], PORT + 6, 1);
		ca = rc_attr();
		CHECK(rdma_create_qp(c, NULL, &ca) == 0 && rdma_connect(c, &cp) == 0,
		      "connecting to %s: errno %d", to[t], errno);
		struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
		CHECK(ev && ev->listen_id == wl, "the wildcard listener gets the request for %s",
		      to[t]);
		if (ev) {
			struct rdma_cm_id *s = ev->id;
			struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(s);
			struct sockaddr_in want = ipv4(to[t], PORT + 6);
			CHECK(la->sin_addr.s_addr == want.sin_addr.s_addr &&
				      la->sin_port == want.sin_port,
			      "the new id's local address is %s:%d", to[t], PORT + 6);
			CHECK(s->verbs && s->verbs != c->verbs, "the new id is on %s's device",
			      to[t]);
			CHECK(rdma_reject(s, NULL, 0) == 0, "rdma_reject: errno %d", errno);
			rdma_ack_cm_event(ev);
			CHECK(next_is(RDMA_CM_EVENT_REJECTED, c, 28), "the client is REJECTED");
			rdma_destroy_id(s);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	CHECK(rdma_destroy_id(wl) == 0, "destroying the wildcard listener");
}

/* rdma_connect(3) without a QP; rdma_notify(3) forcing ESTABLISHED; rdma_destroy_id(3) of
 * a connected id. */
static void notify_and_destroy_connected(void)
{
	step = "rdma_notify COMM_EST";
	struct rdma_cm_id *l = listen_on(server_ip, PORT + 7, NULL);
	struct rdma_cm_id *c = client_to(PORT + 7);
	/* librdmacm (ucma_valid_param): a connected port space with no QP on the id needs
	 * conn_param (its qp_num): NULL is EINVAL. */
	errno = 0;
	CHECK(rdma_connect(c, NULL) == -1 && errno == EINVAL,
	      "rdma_connect without a QP or conn_param: errno %d", errno);
	struct ibv_pd *pd = ibv_alloc_pd(c->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(c->verbs, 8, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = rc_attr();
	qa.send_cq = qa.recv_cq = cq;
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : NULL;
	CHECK(qp != NULL, "the application's own QP: errno %d", errno);
	if (!qp)
		return;
	struct rdma_conn_param cp = {.qp_num = qp->qp_num,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect with qp_num: errno %d", errno);
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(ev != NULL, "a connect request");
	if (!ev)
		return;
	struct rdma_cm_id *s = ev->id;
	struct ibv_qp_init_attr sa = rc_attr();
	/* rdma_accept(3) conn_param NULL: the request's values are used. */
	CHECK(rdma_create_qp(s, NULL, &sa) == 0 && rdma_accept(s, NULL) == 0,
	      "accepted with a NULL conn_param: errno %d", errno);
	rdma_ack_cm_event(ev);
	CHECK(next_is(RDMA_CM_EVENT_CONNECT_RESPONSE, c, 0), "CONNECT_RESPONSE on the client");
	/* The client has not established yet. rdma_notify(3): IB_EVENT_COMM_EST "forces the
	 * connection into an established state ... ensures the delivery of the
	 * RDMA_CM_EVENT_ESTABLISHED event". */
	CHECK(rdma_notify(s, IBV_EVENT_COMM_EST) == 0, "rdma_notify(COMM_EST): errno %d", errno);
	CHECK(next_is(RDMA_CM_EVENT_ESTABLISHED, s, 0), "the server is ESTABLISHED");
	/* The client catches up (rdma_establish(3)); that tells the server nothing new. */
	int ok = 1;
	for (enum ibv_qp_state st = IBV_QPS_INIT; st <= IBV_QPS_RTS && ok; st++) {
		struct ibv_qp_attr at = {.qp_state = st};
		int mask = 0;
		ok = rdma_init_qp_attr(c, &at, &mask) == 0 && ibv_modify_qp(qp, &at, mask) == 0;
	}
	CHECK(ok && rdma_establish(c) == 0, "the client establishes: errno %d", errno);
	CHECK(rdma_disconnect(c) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0) &&
		      rdma_disconnect(s) == 0 && next_is(RDMA_CM_EVENT_DISCONNECTED, c, 0),
	      "disconnected both ways: errno %d", errno);
	rdma_destroy_qp(s);
	CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(s) == 0, "destroying the ids");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);

	/* rdma_destroy_id(3) of an established id without rdma_disconnect: the peer is told
	 * DISCONNECTED (the kernel's destroy sends the DREQ). */
	step = "destroying a connected id";
	c = client_to(PORT + 7);
	struct ibv_qp_init_attr ca = rc_attr();
	cp.qp_num = 0;
	s = rdma_create_qp(c, NULL, &ca) == 0 ? connected(c, &cp, NULL, 0) : NULL;
	CHECK(s != NULL, "connected: errno %d", errno);
	if (s) {
		rdma_destroy_qp(c);
		CHECK(rdma_destroy_id(c) == 0, "destroying the connected client");
		CHECK(next_is(RDMA_CM_EVENT_DISCONNECTED, s, 0), "the server is told DISCONNECTED");
		rdma_destroy_qp(s);
		CHECK(rdma_destroy_id(s) == 0, "destroying the server's id");
	}
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener");
}

/* RDMA_PS_UDP: rdma_connect(3) "private_data_len ... 180 bytes for RDMA_PS_UDP",
 * rdma_accept(3) "136 bytes for RDMA_PS_UDP"; rdma_reject(3) of a UD request: UNREACHABLE
 * with status 2 (IB_SIDR_REJECT, as the kernel's SIDR_REP handler) and the private data. */
static void datagram_limits_and_reject(void)
{
	step = "UD private data";
	struct rdma_cm_id *l = NULL;
	struct sockaddr_in at = ipv4(server_ip, PORT + 8), src = ipv4(client_ip, 0);
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_UDP) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&at) == 0 && rdma_listen(l, 4) == 0,
	      "a UD listener: errno %d", errno);
	char big[200];
	for (int i = 0; i < 200; i++)
		big[i] = (char)(i + 1);
	for (int round = 0; round < 3 && l; round++) {
		struct rdma_cm_id *c = NULL;
		struct ibv_qp_init_attr ua = rc_attr();
		ua.qp_type = IBV_QPT_UD;
		CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_UDP) == 0 &&
			      rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&at,
						2000) == 0 &&
			      next_is(RDMA_CM_EVENT_ADDR_RESOLVED, c, 0) &&
			      rdma_resolve_route(c, 2000) == 0 &&
			      next_is(RDMA_CM_EVENT_ROUTE_RESOLVED, c, 0) &&
			      rdma_create_qp(c, NULL, &ua) == 0,
		      "a UD client: errno %d", errno);
		if (!c || !c->qp)
			return;
		struct rdma_conn_param p = {.private_data = big, .private_data_len = 181};
		if (round == 0) {
			errno = 0;
			CHECK(rdma_connect(c, &p) == -1 && errno == EINVAL,
			      "UD rdma_connect with 181 bytes: errno %d", errno);
		}
		p.private_data_len = 180;
		CHECK(rdma_connect(c, &p) == 0, "UD rdma_connect with 180 bytes: errno %d", errno);
		struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
		CHECK(ev != NULL, "a UD request");
		if (!ev)
			return;
		struct rdma_cm_id *s = ev->id;
		CHECK(ev->param.ud.private_data && ev->param.ud.private_data_len >= 180 &&
			      memcmp(ev->param.ud.private_data, big, 180) == 0,
		      "the 180 bytes arrive (length %u)", ev->param.ud.private_data_len);
		if (round == 0) {
			struct ibv_qp_init_attr sa = rc_attr();
			sa.qp_type = IBV_QPT_UD;
			struct rdma_conn_param ap = {.private_data = big, .private_data_len = 136};
			CHECK(rdma_create_qp(s, NULL, &sa) == 0, "a server UD QP: errno %d", errno);
			CHECK(rdma_accept(s, &ap) == 0, "UD rdma_accept with 136 bytes: errno %d",
			      errno);
			rdma_ack_cm_event(ev);
			ev = take(ch, RDMA_CM_EVENT_ESTABLISHED, c);
			CHECK(ev && ev->param.ud.private_data_len >= 136 &&
				      memcmp(ev->param.ud.private_data, big, 136) == 0,
			      "the 136 bytes arrive (length %u)",
			      ev ? ev->param.ud.private_data_len : 0);
			if (ev)
				rdma_ack_cm_event(ev);
			rdma_destroy_qp(s);
		} else if (round == 1) {
			/* The kernel's rdma_accept rejects a request it cannot answer: 137 bytes
			 * are EINVAL and the client hears UNREACHABLE (SIDR_REP status REJECT,
			 * 2); the request is gone, so accepting again is EINVAL too. */
			step = "UD accept that fails";
			struct ibv_qp_init_attr sa = rc_attr();
			sa.qp_type = IBV_QPT_UD;
			struct rdma_conn_param ap = {.private_data = big, .private_data_len = 137};
			CHECK(rdma_create_qp(s, NULL, &sa) == 0, "a server UD QP: errno %d", errno);
			errno = 0;
			CHECK(rdma_accept(s, &ap) == -1 && errno == EINVAL,
			      "UD rdma_accept with 137 bytes: errno %d", errno);
			rdma_ack_cm_event(ev);
			ev = next_event(ch);
			CHECK(ev && ev->id == c && ev->event == RDMA_CM_EVENT_UNREACHABLE &&
				      ev->status == 2,
			      "the failed accept rejects: %s status %d (want UNREACHABLE 2)",
			      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
			if (ev)
				rdma_ack_cm_event(ev);
			ap.private_data_len = 136;
			errno = 0;
			CHECK(rdma_accept(s, &ap) == -1 && errno == EINVAL,
			      "accepting the rejected request again: errno %d", errno);
			rdma_destroy_qp(s);
		} else {
			step = "UD reject";
			static const char no[] = "nope";
			CHECK(rdma_reject(s, no, sizeof(no)) == 0, "rdma_reject: errno %d", errno);
			rdma_ack_cm_event(ev);
			ev = next_event(ch);
			CHECK(ev && ev->id == c && ev->event == RDMA_CM_EVENT_UNREACHABLE &&
				      ev->status == 2,
			      "rejected: %s status %d (want UNREACHABLE 2)",
			      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
			CHECK(ev && ev->param.ud.private_data &&
				      memcmp(ev->param.ud.private_data, no, sizeof(no)) == 0,
			      "the reject's private data");
			if (ev)
				rdma_ack_cm_event(ev);
		}
		rdma_destroy_qp(c);
		CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0, "destroying the UD ids");
	}
	CHECK(l && rdma_destroy_id(l) == 0, "destroying the UD listener");
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
	getaddrinfo_variants();
	zero_addresses_and_wildcards();
	options();
	ib_path_option();
	queue_pairs_and_endpoints();
	channels_devices_strings();
	calls_that_block();
	synchronous_endpoints();
	depth_retry_and_timewait();
	a_connection_used_through_rdma_verbs();
	who_listens_where();
	notify_and_destroy_connected();
	datagram_limits_and_reject();
	rdma_destroy_event_channel(ch);
	alarm(0);
	printf("%d failures\n", failures);
	return failures != 0;
}
