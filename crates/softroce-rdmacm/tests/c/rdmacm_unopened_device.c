/* rdma_connect(3) to an address of one of this process's own devices that nothing has
 * opened yet, where nobody listens: the device answers as a kernel's configured device
 * does from the start, with a REJ (reason 8, invalid service ID): REJECTED status 8, and a
 * synchronous rdma_connect fails ECONNREFUSED. Before, the REQ went to a port nobody had
 * bound and no answer ever came. Untouched devices at argv[1] (the asynchronous connect's)
 * and argv[3] (the synchronous one's), the client's device at argv[2]; nothing else in the
 * program opens them. Prints "N failures". */
#include <poll.h>

#include "cm_common.h"

#define PORT 7990

int main(int argc, char **argv)
{
	const char *untouched_ip, *client_ip;
	struct rdma_event_channel *ch = two_device_start(argc, argv, &untouched_ip, &client_ip);
	if (argc < 4) {
		fprintf(stderr, "usage: %s UNTOUCHED_IP CLIENT_IP OTHER_UNTOUCHED_IP\n", argv[0]);
		return 2;
	}
	const char *other_untouched_ip = argv[3];

	step = "an asynchronous connect";
	struct rdma_cm_id *c = resolved_on(ch, client_ip, untouched_ip, PORT, 1);
	struct ibv_qp_init_attr qa = small_rc_attr();
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "rdma_create_qp: errno %d", errno);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "rdma_connect: errno %d", errno);
	/* Well below the CM's REQ retries (about a minute): a refusal, not a timeout. */
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev = NULL;
	if (poll(&pfd, 1, 10000) == 1)
		rdma_get_cm_event(ch, &ev);
	CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8,
	      "REJECTED status 8 from the device nobody had opened: got %s status %d",
	      ev ? rdma_event_str(ev->event) : "nothing within 10 s", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	step = "a synchronous connect";
	struct rdma_cm_id *sync_id = NULL;
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(other_untouched_ip, PORT);
	CHECK(rdma_create_id(NULL, &sync_id, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(sync_id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
					2000) == 0 &&
		      rdma_resolve_route(sync_id, 2000) == 0,
	      "a synchronous id resolved: errno %d", errno);
	errno = 0;
	CHECK(rdma_connect(sync_id, &cp) == -1 && errno == ECONNREFUSED,
	      "a synchronous rdma_connect nobody listens for: ECONNREFUSED (errno %d)", errno);
	rdma_destroy_id(sync_id);
	return two_device_end(ch);
}
