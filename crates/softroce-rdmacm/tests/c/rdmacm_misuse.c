/* Every rdma_cm call misused as a careless program would: NULL where a pointer belongs, an id
 * in the wrong state, an id or event already gone. Each is refused with -1 and EINVAL (NULL
 * and EINVAL for calls returning pointers), or ignored when it returns nothing; the process
 * never crashes, and the library still works afterwards. Run with
 * SOFTROCE_DEVICES=softroce0=<ADDR>; argv[1] is ADDR. Prints "N failures". */
#include "cm_common.h"

/* `call` fails with -1 and errno EINVAL. */
#define REFUSED(call)                                                                      \
	do {                                                                               \
		errno = 0;                                                                 \
		int rc_ = (call);                                                          \
		CHECK(rc_ == -1 && errno == EINVAL, "%s: returned %d, errno %d", #call, rc_, \
		      errno);                                                              \
	} while (0)

int main(int argc, char **argv)
{
	const char *me = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *fresh = NULL, *gone = NULL;
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_in addr = ipv4(me, 7620);
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 1,
					      .max_recv_wr = 1,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp_attr attr;
	int mask = 0, one = 1;
	CHECK(ch && rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP) == 0, "a fresh id");
	CHECK(rdma_create_id(ch, &gone, NULL, RDMA_PS_TCP) == 0 && rdma_destroy_id(gone) == 0,
	      "an id destroyed again");

	/* NULL ids, channels and out-parameters. */
	REFUSED(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP));
	REFUSED(rdma_destroy_id(NULL));
	REFUSED(rdma_bind_addr(NULL, (struct sockaddr *)&addr));
	REFUSED(rdma_resolve_addr(NULL, NULL, (struct sockaddr *)&addr, 100));
	REFUSED(rdma_resolve_addr(fresh, NULL, NULL, 100));
	REFUSED(rdma_resolve_route(NULL, 100));
	REFUSED(rdma_create_qp(NULL, NULL, &qa));
	REFUSED(rdma_create_qp(fresh, NULL, NULL));
	REFUSED(rdma_connect(NULL, NULL));
	REFUSED(rdma_listen(NULL, 1));
	REFUSED(rdma_accept(NULL, NULL));
	REFUSED(rdma_reject(NULL, NULL, 0));
	REFUSED(rdma_disconnect(NULL));
	REFUSED(rdma_get_cm_event(NULL, &ev));
	REFUSED(rdma_get_cm_event(ch, NULL));
	REFUSED(rdma_notify(NULL, IBV_EVENT_COMM_EST));
	REFUSED(rdma_establish(NULL));
	REFUSED(rdma_migrate_id(NULL, ch));
	REFUSED(rdma_set_option(NULL, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)));
	/* A NULL value with a length: the kernel's copy of it faults (EFAULT), no crash. */
	errno = 0;
	CHECK(rdma_set_option(fresh, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, NULL, sizeof(one)) ==
			      -1 &&
		      errno == EFAULT,
	      "rdma_set_option with a NULL value: errno %d", errno);
	REFUSED(rdma_init_qp_attr(NULL, &attr, &mask));
	REFUSED(rdma_init_qp_attr(fresh, NULL, &mask));
	REFUSED(rdma_get_request(NULL, &gone));
	REFUSED(rdma_create_srq(NULL, NULL, NULL));
	REFUSED(rdma_join_multicast(NULL, (struct sockaddr *)&addr, NULL));
	REFUSED(rdma_leave_multicast(NULL, (struct sockaddr *)&addr));
	REFUSED(rdma_create_ep(NULL, NULL, NULL, NULL));
	REFUSED(rdma_getaddrinfo(me, NULL, NULL, NULL));
	/* Calls that return nothing ignore NULL. */
	rdma_destroy_qp(NULL);
	rdma_destroy_srq(NULL);
	rdma_destroy_ep(NULL);
	rdma_freeaddrinfo(NULL);
	rdma_free_devices(NULL);
	rdma_destroy_event_channel(NULL);

	/* A destroyed id is no id. */
	REFUSED(rdma_bind_addr(gone, (struct sockaddr *)&addr));
	REFUSED(rdma_resolve_route(gone, 100));
	REFUSED(rdma_connect(gone, NULL));
	REFUSED(rdma_disconnect(gone));
	REFUSED(rdma_destroy_id(gone));

	/* Calls out of order on a fresh id. */
	REFUSED(rdma_resolve_route(fresh, 100));
	REFUSED(rdma_create_qp(fresh, NULL, &qa)); /* no device yet */
	REFUSED(rdma_connect(fresh, NULL));
	REFUSED(rdma_accept(fresh, NULL));
	REFUSED(rdma_reject(fresh, NULL, 0));
	REFUSED(rdma_disconnect(fresh));
	REFUSED(rdma_establish(fresh));
	REFUSED(rdma_get_request(fresh, &gone));
	struct rdma_cm_id *l = NULL;
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(l, (struct sockaddr *)&addr) == 0 && rdma_listen(l, 1) == 0,
	      "a listener");
	REFUSED(rdma_accept(l, NULL));	/* a listener is not a request */
	REFUSED(rdma_connect(l, NULL));
	REFUSED(rdma_get_request(l, &gone)); /* not synchronous */

	/* An event acked twice. */
	struct sockaddr_in dst = ipv4(me, 7621);
	CHECK(rdma_resolve_addr(fresh, NULL, (struct sockaddr *)&dst, 1000) == 0 &&
		      (ev = next_event(ch)) != NULL,
	      "an event to ack");
	CHECK(ev && rdma_ack_cm_event(ev) == 0, "acked once");
	REFUSED(rdma_ack_cm_event(ev));

	/* Still working: the resolved id goes on to its route. */
	CHECK(rdma_resolve_route(fresh, 1000) == 0 &&
		      expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, fresh, NULL) == 0,
	      "the library still works after the misuse");
	CHECK(rdma_destroy_id(l) == 0 && rdma_destroy_id(fresh) == 0, "destroying");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
