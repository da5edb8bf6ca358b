/* What outlives what in librdmacm, and calls racing on one channel, between device softroce0
 * (argv[1], the server's) and softroce1 (argv[2], the client's): the PD rdma_cm gives ids
 * goes with the last id on its device, as librdmacm's ucma_put_device (rdma_dereg_mr(3):
 * "Users must deregister all registered memory before the protection domain can be
 * destroyed"), and rdma_get_devices' list keeps it meanwhile; rdma_destroy_id(3) while
 * another thread waits in rdma_get_cm_event(3) on the same channel; a listener destroyed with
 * a connection request nobody retrieved rejects it ("cancels any outstanding asynchronous
 * operation"); rdma_init_qp_attr and rdma_set_option on the kernel's argument checks.
 * Prints "N failures". */
#include <pthread.h>

#include "cm_common.h"

#define PORT 7860 /* this program's ports: PORT .. PORT + 9 */

static const char *server_ip, *client_ip;
static struct rdma_event_channel *ch;

/* c (route resolved, with a QP) connects to the listener on this channel, whose request
 * gets a QP and is accepted; both ESTABLISHED. The server's id, or NULL. */
static struct rdma_cm_id *connect_to_listener(struct rdma_cm_id *c)
{
	struct rdma_conn_param cp = {.responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	if (rdma_connect(c, &cp))
		return NULL;
	struct rdma_cm_event *ev = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	if (!ev)
		return NULL;
	struct rdma_cm_id *s = ev->id;
	struct ibv_qp_init_attr sa = small_rc_attr();
	int ok = rdma_create_qp(s, NULL, &sa) == 0 && rdma_accept(s, &ev->param.conn) == 0;
	rdma_ack_cm_event(ev);
	for (int i = 0; ok && i < 2; i++) {
		ev = next_event(ch);
		ok = ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->status == 0;
		if (ev)
			rdma_ack_cm_event(ev);
	}
	return ok ? s : NULL;
}

static void close_pair(struct rdma_cm_id *c, struct rdma_cm_id *s)
{
	rdma_disconnect(c);
	rdma_disconnect(s);
	/* Both DISCONNECTED events, whoever they are for. */
	for (int i = 0; i < 2; i++) {
		struct rdma_cm_event *ev = next_event(ch);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}

static void the_pd_goes_with_the_last_id(void)
{
	step = "the ids' PD";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT);
	/* The only id on the client's device: its PD is the device's, with a region on it. */
	struct rdma_cm_id *first = resolved_on(ch, client_ip, server_ip, PORT, 1);
	struct ibv_pd *old_pd = first->pd;
	static char old_buf[64] = "from the old PD";
	struct ibv_mr *old_mr = ibv_reg_mr(old_pd, old_buf, sizeof(old_buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(old_mr != NULL, "a region on the id's PD: errno %d", errno);
	CHECK(rdma_destroy_id(first) == 0, "destroying the device's last id (its PD still has a region)");

	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, PORT, 1);
	CHECK(c->pd != NULL && c->pd != old_pd,
	      "the next id on the device has a new PD (old %p, new %p)", (void *)old_pd,
	      (void *)c->pd);
	struct ibv_qp_init_attr ca = small_rc_attr();
	CHECK(rdma_create_qp(c, NULL, &ca) == 0, "a QP on the new PD: errno %d", errno);
	struct rdma_cm_id *s = connect_to_listener(c);
	CHECK(s != NULL, "connected: errno %d", errno);
	if (s && old_mr) {
		static char in[64];
		struct ibv_mr *in_mr = ibv_reg_mr(s->pd, in, sizeof(in), IBV_ACCESS_LOCAL_WRITE);
		CHECK(in_mr && rdma_post_recv(s, NULL, in, sizeof(in), in_mr) == 0,
		      "the server's receive: errno %d", errno);
		struct ibv_wc wc = {0};
		CHECK(rdma_post_send(c, NULL, old_buf, 16, old_mr, IBV_SEND_SIGNALED) == 0 &&
			      rdma_get_send_comp(c, &wc) == 1 && wc.status == IBV_WC_LOC_PROT_ERR,
		      "a send from the old PD's region on the new PD's QP: %s",
		      ibv_wc_status_str(wc.status));
		close_pair(c, s);
		if (in_mr)
			ibv_dereg_mr(in_mr);
	}
	CHECK(old_mr && ibv_dereg_mr(old_mr) == 0, "the old region still deregisters");

	/* rdma_get_devices(3)'s list counts as a user: the PD outlives the ids meanwhile. */
	int n = 0;
	struct ibv_context **list = rdma_get_devices(&n);
	CHECK(list && n == 2, "two devices listed: %d", n);
	struct rdma_cm_id *a = resolved_on(ch, client_ip, server_ip, PORT, 0);
	struct ibv_pd *listed_pd = a->pd;
	CHECK(rdma_destroy_id(a) == 0, "destroying the id");
	struct rdma_cm_id *b = resolved_on(ch, client_ip, server_ip, PORT, 0);
	CHECK(b->pd == listed_pd, "while the device is listed, the next id has the same PD");
	struct ibv_mr *mr = ibv_reg_mr(b->pd, old_buf, sizeof(old_buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && ibv_dereg_mr(mr) == 0, "and it is a live PD: errno %d", errno);
	rdma_free_devices(list);
	CHECK(rdma_destroy_id(b) == 0 && rdma_destroy_id(l) == 0, "destroying the ids");
}

#define MARK ((void *)0x5eed)
static volatile int reader_errors, reader_events;

/* Takes every event of the channel until the one of the id whose context is MARK. */
static void *read_until_marked(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000; i++) {
		struct rdma_cm_event *ev = NULL;
		if (rdma_get_cm_event(ch, &ev)) {
			reader_errors++;
			continue;
		}
		int marked = ev->id && ev->id->context == MARK;
		reader_events++;
		rdma_ack_cm_event(ev);
		if (marked)
			break;
	}
	return NULL;
}

static void destroying_while_another_thread_waits(void)
{
	step = "rdma_destroy_id while rdma_get_cm_event waits";
	pthread_t reader;
	CHECK(pthread_create(&reader, NULL, read_until_marked, NULL) == 0, "a reader thread");
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT + 1);
	for (int i = 0; i < 10000; i++) {
		struct rdma_cm_id *id = NULL;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ||
		    rdma_destroy_id(id)) {
			CHECK(0, "round %d: errno %d", i, errno);
			break;
		}
	}
	struct rdma_cm_id *marked = NULL;
	CHECK(rdma_create_id(ch, &marked, MARK, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(marked, (struct sockaddr *)&src, (struct sockaddr *)&dst,
					2000) == 0,
	      "the last id: errno %d", errno);
	pthread_join(reader, NULL);
	CHECK(reader_errors == 0 && reader_events >= 1,
	      "the reader took %d events, %d errors, and stopped at the last id's",
	      reader_events, reader_errors);
	CHECK(rdma_destroy_id(marked) == 0, "destroying the last id");
}

static void a_destroyed_listener_rejects_what_it_never_read(void)
{
	step = "a listener destroyed with a request unread";
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT + 2);
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *c = resolved_on(cch, client_ip, server_ip, PORT + 2, 1);
	struct ibv_qp_init_attr ca = small_rc_attr();
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	CHECK(rdma_create_qp(c, NULL, &ca) == 0 && rdma_connect(c, &cp) == 0,
	      "connecting: errno %d", errno);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 5000) == 1, "the request is there to read");
	CHECK(rdma_destroy_id(l) == 0, "destroying the listener without reading it");
	pfd.revents = 0;
	CHECK(poll(&pfd, 1, 0) == 0, "its channel has nothing left to read");
	/* The kernel destroys the request's new id, which rejects it (consumer-defined, 28). */
	CHECK(next_event_is(cch, RDMA_CM_EVENT_REJECTED, c, 28), "the client is rejected");
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0, "destroying the client");
	rdma_destroy_event_channel(cch);
}

static void argument_checks(void)
{
	step = "rdma_init_qp_attr and rdma_set_option arguments";
	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, PORT + 3, 1);
	struct ibv_qp_attr attr;
	int mask = -1;
	memset(&attr, 0xab, sizeof(attr));
	attr.qp_state = 99;
	errno = 0;
	CHECK(rdma_init_qp_attr(c, &attr, &mask) == -1 && errno == EINVAL,
	      "a state past IBV_QPS_ERR (the kernel's ucma_init_qp_attr): errno %d", errno);
	memset(&attr, 0xab, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(c, &attr, &mask) == 0 && (mask & IBV_QP_STATE),
	      "INIT's attributes: errno %d", errno);
	/* The kernel fills a zeroed struct that librdmacm copies back whole. */
	CHECK(attr.qp_state == IBV_QPS_INIT && attr.sq_psn == 0 && attr.dest_qp_num == 0 &&
		      attr.max_rd_atomic == 0 && attr.ah_attr.dlid == 0,
	      "what the mask leaves out reads 0: sq_psn %#x dest_qp %#x rd_atomic %u",
	      attr.sq_psn, attr.dest_qp_num, attr.max_rd_atomic);
	/* The kernel copies the value in first (nothing to copy with length 0), then looks the
	 * option up: unknown is ENOSYS, a known one's length check EINVAL. */
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, 77, NULL, 0) == -1 && errno == ENOSYS,
	      "an unknown option without a value: errno %d", errno);
	errno = 0;
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 0) == -1 &&
		      errno == EINVAL,
	      "TOS without a value: errno %d", errno);
	CHECK(rdma_destroy_id(c) == 0, "destroying the id");
}

int main(int argc, char **argv)
{
	ch = two_device_start(argc, argv, &server_ip, &client_ip);
	the_pd_goes_with_the_last_id();
	destroying_while_another_thread_waits();
	a_destroyed_listener_rejects_what_it_never_read();
	argument_checks();
	return two_device_end(ch);
}
