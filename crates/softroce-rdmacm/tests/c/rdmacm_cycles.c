/* A thousand rdma_cm connections made and torn down one after another in one process, from
 * device softroce1 (argv[2]) to a listener on softroce0 (argv[1]), as a long-running server
 * sees them: resolve, connect, accept, ESTABLISHED on both sides, a SEND each way, disconnect,
 * DISCONNECTED on both sides, destroy. Nothing may leak: after the warm-up the process holds
 * the same file descriptors at the end and its memory stays flat (a leaked QP, id, event or
 * channel per cycle would show). Prints "N failures". */
#include "cm_common.h"

#define CYCLES 1000
#define WARMUP 50
#define PORT 7600

/* Two events of `type`, one for each of `a` and `b`, in either order. */
static int expect_both(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
		       struct rdma_cm_id *a, struct rdma_cm_id *b)
{
	int seen_a = 0, seen_b = 0;
	for (int i = 0; i < 2; i++) {
		struct rdma_cm_id *from = NULL;
		if (expect(ch, type, NULL, &from)) {
			fprintf(stderr, "%s: so far %d for the client, %d for the server\n",
				rdma_event_str(type), seen_a, seen_b);
			return 1;
		}
		seen_a += from == a;
		seen_b += from == b;
	}
	if (seen_a != 1 || seen_b != 1) {
		fprintf(stderr, "%s: %d for the client, %d for the server\n",
			rdma_event_str(type), seen_a, seen_b);
		return 1;
	}
	return 0;
}

/* A SEND of 8 bytes from `from` to `to`, both completions checked. */
static int send_one(struct rdma_cm_id *from, struct rdma_cm_id *to, uint64_t value)
{
	uint64_t out = value, in = 0;
	struct ibv_mr *out_mr = rdma_reg_msgs(from, &out, sizeof(out));
	struct ibv_mr *in_mr = rdma_reg_msgs(to, &in, sizeof(in));
	int bad = !out_mr || !in_mr;
	struct ibv_wc wc;
	if (!bad)
		bad = rdma_post_recv(to, NULL, &in, sizeof(in), in_mr) ||
		      rdma_post_send(from, NULL, &out, sizeof(out), out_mr, IBV_SEND_SIGNALED) ||
		      rdma_get_send_comp(from, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
		      rdma_get_recv_comp(to, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
		      in != value;
	if (out_mr)
		rdma_dereg_mr(out_mr);
	if (in_mr)
		rdma_dereg_mr(in_mr);
	return bad;
}

static int one_cycle(struct rdma_event_channel *ch, struct rdma_cm_id *listener,
		     const char *server, const char *client, int cycle)
{
	struct rdma_cm_id *c = NULL, *s = NULL;
	struct sockaddr_in src = ipv4(client, 0), dst = ipv4(server, PORT);
	/* rdma_create_qp writes the CQs it made into the attributes: one copy per id. */
	struct ibv_qp_init_attr qp = {.cap = {.max_send_wr = 4,
					      .max_recv_wr = 4,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC,
				      .sq_sig_all = 0};
	struct ibv_qp_init_attr server_qp = qp;
	struct rdma_conn_param param = {.retry_count = 7, .rnr_retry_count = 7};
	const char *failed_at = NULL;
/* Runs each step while all before it succeeded; the first that fails is named. */
#define STEP(x)                            \
	do {                               \
		if (!failed_at && (x))     \
			failed_at = #x;    \
	} while (0)
	STEP(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP));
	STEP(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	STEP(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, c, NULL));
	STEP(rdma_resolve_route(c, 2000));
	STEP(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, c, NULL));
	STEP(rdma_create_qp(c, NULL, &qp));
	STEP(rdma_connect(c, &param));
	STEP(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &s) || !s || s == listener);
	STEP(rdma_create_qp(s, NULL, &server_qp));
	STEP(rdma_accept(s, &param));
	STEP(expect_both(ch, RDMA_CM_EVENT_ESTABLISHED, c, s));
	STEP(send_one(c, s, 0x1000 + cycle));
	STEP(send_one(s, c, 0x2000 + cycle));
	/* The DREQ reaches the server; its own rdma_disconnect answers with the DREP that
	 * completes the client's (rdma_disconnect(3), as rping and ucmatose do). */
	STEP(rdma_disconnect(c));
	STEP(expect(ch, RDMA_CM_EVENT_DISCONNECTED, s, NULL));
	STEP(rdma_disconnect(s));
	STEP(expect(ch, RDMA_CM_EVENT_DISCONNECTED, c, NULL));
	int bad = failed_at != NULL;
	if (bad)
		fprintf(stderr, "cycle %d: %s failed (errno %d)\n", cycle, failed_at, errno);
	/* rdma_destroy_id(3): the QP goes first. */
	if (s) {
		if (s->qp)
			rdma_destroy_qp(s);
		bad |= rdma_destroy_id(s) != 0;
	}
	if (c) {
		if (c->qp)
			rdma_destroy_qp(c);
		bad |= rdma_destroy_id(c) != 0;
	}
	return bad;
}

int main(int argc, char **argv)
{
	const char *server = argc > 2 ? argv[1] : "127.0.0.1";
	const char *client = argc > 2 ? argv[2] : "127.0.0.2";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener = NULL;
	struct sockaddr_in at = ipv4(server, PORT);
	CHECK(ch && rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(listener, (struct sockaddr *)&at) == 0 &&
		      rdma_listen(listener, 4) == 0,
	      "listening on %s:%d: errno %d", server, PORT, errno);
	if (failures)
		return 1;

	int fds = -1, failed = 0, done = 0;
	long rss = -1;
	for (int i = 0; i < CYCLES && failed < 3; i++, done++) {
		if (i == WARMUP) {
			fds = open_fds();
			rss = rss_kib();
		}
		failed += one_cycle(ch, listener, server, client, i) != 0;
	}
	CHECK(failed == 0 && done == CYCLES, "%d of %d cycles failed", failed, done);
	int fds_after = open_fds();
	long rss_after = rss_kib();
	CHECK(fds_after == fds, "open fds after %d cycles: %d, after the warm-up: %d", CYCLES,
	      fds_after, fds);
	/* A QP with its rings, an id, a PD, two MRs and its events per cycle would be far more
	 * than 2 MiB over 950 cycles; allocator noise stays well below. */
	CHECK(rss > 0 && rss_after - rss < 2048, "RSS grew from %ld KiB to %ld KiB", rss,
	      rss_after);
	printf("%d cycles, fds %d -> %d, RSS %ld -> %ld KiB\n", CYCLES, fds, fds_after, rss,
	       rss_after);
	CHECK(rdma_destroy_id(listener) == 0, "destroying the listener");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
