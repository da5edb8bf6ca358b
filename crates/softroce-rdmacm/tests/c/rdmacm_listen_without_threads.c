/* rdma_listen(3) on a wildcard address listens on every device; when it fails it listens
 * nowhere. Here it fails part-way: the process (as nobody, RLIMIT_NPROC at its thread
 * count) may start no thread, softroce0 (argv[1]) already has its receiving thread (another
 * id listens there) and softroce1 (argv[2]) would need one. The failed listen must leave
 * no trace on softroce0: a connect to its port there is refused and the id hears nothing.
 * Once threads may start, the same id listens and hears the connect. Prints "N failures". */
#include <unistd.h>

#include "cm_common.h"

#define PORT 7900 /* and PORT + 1 */

/* Whether `ch` holds an event within `ms`. */
static int has_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 1;
}

/* Connects a new id on `ch` from `from` to `to`:PORT: the event the connect ends in, or -1
 * when it could not start. */
static int connect_once(struct rdma_event_channel *ch, const char *from, const char *to,
			struct rdma_cm_id **out)
{
	struct rdma_cm_id *c = resolved_on(ch, from, to, PORT, 1);
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param cp = {.retry_count = 1};
	*out = c;
	if (rdma_create_qp(c, NULL, &qa) || rdma_connect(c, &cp))
		return -1;
	struct rdma_cm_event *ev = next_event(ch);
	if (!ev)
		return -1;
	int type = ev->event;
	rdma_ack_cm_event(ev);
	return type;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s DEVICE0_IP DEVICE1_IP\n", argv[0]);
		return 2;
	}
	watchdog(30);
	step = "becoming nobody";
	CHECK(setgid(65534) == 0 && setuid(65534) == 0, "setuid(nobody): errno %d", errno);

	step = "softroce0 receives";
	struct rdma_event_channel *server_ch = rdma_create_event_channel();
	struct rdma_event_channel *client_ch = rdma_create_event_channel();
	int n = 0;
	struct ibv_context **list = rdma_get_devices(&n);
	CHECK(list && n == 2, "two devices (%d)", n);
	struct rdma_cm_id *first = NULL;
	struct sockaddr_in first_addr = ipv4(argv[1], PORT + 1);
	CHECK(rdma_create_id(server_ch, &first, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(first, (struct sockaddr *)&first_addr) == 0 &&
		      rdma_listen(first, 4) == 0,
	      "a listener on softroce0: errno %d", errno);

	step = "a wildcard listen fails part-way";
	struct rdma_cm_id *wild = NULL;
	struct sockaddr_in any = ipv4("0.0.0.0", PORT);
	CHECK(rdma_create_id(server_ch, &wild, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(wild, (struct sockaddr *)&any) == 0,
	      "a wildcard id: errno %d", errno);
	struct rlimit saved = no_more_threads();
	errno = 0;
	CHECK(rdma_listen(wild, 4) == -1 && errno == EAGAIN,
	      "the listen fails with EAGAIN when softroce1 cannot start receiving (errno %d)",
	      errno);
	struct rdma_cm_id *c1 = NULL;
	int ended = connect_once(client_ch, argv[1], argv[1], &c1);
	CHECK(ended == RDMA_CM_EVENT_REJECTED || ended == RDMA_CM_EVENT_UNREACHABLE,
	      "a connect to the port on softroce0 is refused (%s)",
	      ended < 0 ? "none" : rdma_event_str(ended));
	CHECK(!has_event(server_ch, 200), "the id whose listen failed hears nothing");
	rdma_destroy_qp(c1);
	rdma_destroy_id(c1);

	step = "listening again";
	CHECK(set_thread_limit(&saved) == 0, "the thread limit back: errno %d", errno);
	CHECK(rdma_listen(wild, 4) == 0, "the listen succeeds once threads may start: errno %d",
	      errno);
	struct rdma_cm_id *c2_id = resolved_on(client_ch, argv[1], argv[1], PORT, 1);
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param cp = {.retry_count = 1};
	CHECK(rdma_create_qp(c2_id, NULL, &qa) == 0 && rdma_connect(c2_id, &cp) == 0,
	      "connect: errno %d", errno);
	struct rdma_cm_event *request = take(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(request && request->listen_id == wild, "the wildcard listener hears the connect");
	struct rdma_cm_id *req = request ? request->id : NULL;
	if (request)
		rdma_ack_cm_event(request);
	CHECK(req && rdma_reject(req, NULL, 0) == 0, "reject: errno %d", errno);
	CHECK(!has_event(server_ch, 200), "one request, no second");
	struct rdma_cm_event *ev = next_event(client_ch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == c2_id,
	      "the client is rejected (%s)", ev ? rdma_event_str(ev->event) : "nothing");
	if (ev)
		rdma_ack_cm_event(ev);
	if (req)
		rdma_destroy_id(req);
	rdma_destroy_qp(c2_id);
	rdma_destroy_id(c2_id);
	rdma_destroy_id(wild);
	rdma_destroy_id(first);
	rdma_free_devices(list);
	rdma_destroy_event_channel(client_ch);
	rdma_destroy_event_channel(server_ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
