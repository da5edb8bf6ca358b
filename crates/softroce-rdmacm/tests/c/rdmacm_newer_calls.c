/* librdmacm's RDMACM_1.4 calls, per their man pages: rdma_resolve_addrinfo(3) resolves
 * as rdma_getaddrinfo does and reports RDMA_CM_EVENT_ADDRINFO_RESOLVED on the id's channel
 * (a failure fails the call and generates no event), rdma_query_addrinfo(3) hands the
 * result out once, rdma_write_cm_event(3) queues an RDMA_CM_EVENT_USER event with the
 * status and value given. rdma-core 44 (which this program links with) has none of them:
 * they are looked up in the librdmacm.so.1 loaded at run time, the drop-in, and their
 * constants defined here as newer headers define them. argv[1]: the device's address.
 * Prints "N failures". */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cm_common.h"

#define EVENT_ADDRINFO_RESOLVED 16
#define EVENT_USER 18
#define AI_FLAG_SA 0x10
#define AI_FLAG_DNS 0x20

static int (*resolve_addrinfo)(struct rdma_cm_id *, const char *, const char *,
			       const struct rdma_addrinfo *);
static int (*query_addrinfo)(struct rdma_cm_id *, struct rdma_addrinfo **);
static int (*write_cm_event)(struct rdma_cm_id *, int, int, uint64_t);

/* Whether the channel has an event waiting (without taking it). */
static int pending(struct rdma_event_channel *ch)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	return poll(&pfd, 1, 0) == 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DEVICE_IP\n", argv[0]);
		return 2;
	}
	watchdog(50);
	resolve_addrinfo = newer_rdmacm_call("rdma_resolve_addrinfo");
	query_addrinfo = newer_rdmacm_call("rdma_query_addrinfo");
	write_cm_event = newer_rdmacm_call("rdma_write_cm_event");
	if (!resolve_addrinfo || !query_addrinfo || !write_cm_event) {
		printf("1 failures\n");
		return 1;
	}

	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	CHECK(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "channel and id");

	/* rdma_write_cm_event(3): only RDMA_CM_EVENT_USER, reported with status and value. */
	errno = 0;
	CHECK(write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 1) == -1 && errno == EINVAL,
	      "writing an event other than RDMA_CM_EVENT_USER: EINVAL (errno %d)", errno);
	CHECK(!pending(ch), "and nothing is queued");
	CHECK(write_cm_event(id, EVENT_USER, -5, 0xdeadbeef12345678ull) == 0,
	      "rdma_write_cm_event: 0");
	struct rdma_cm_event *ev = NULL;
	CHECK(pending(ch) && rdma_get_cm_event(ch, &ev) == 0 && ev->event == EVENT_USER &&
		      ev->id == id && ev->status == -5 &&
		      *(uint64_t *)&ev->param == 0xdeadbeef12345678ull,
	      "the user event arrives with its id, status and value");
	if (ev)
		rdma_ack_cm_event(ev);

	/* rdma_query_addrinfo(3) before any resolution, and its arguments. */
	struct rdma_addrinfo *info = NULL;
	errno = 0;
	CHECK(query_addrinfo(id, &info) == -1 && errno == ENOENT,
	      "nothing resolved: ENOENT (errno %d)", errno);
	errno = 0;
	CHECK(query_addrinfo(NULL, &info) == -1 && errno == EINVAL, "NULL id: EINVAL");
	errno = 0;
	CHECK(query_addrinfo(id, NULL) == -1 && errno == EINVAL, "NULL info: EINVAL");
	errno = 0;
	CHECK(resolve_addrinfo(NULL, argv[1], "7471", NULL) == -1 && errno == EINVAL,
	      "resolving on a NULL id: EINVAL");

	/* rdma_resolve_addrinfo(3): DNS (the default), an event, the result once. */
	struct rdma_addrinfo hints;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(resolve_addrinfo(id, argv[1], "7471", &hints) == 0, "rdma_resolve_addrinfo: 0");
	CHECK(expect(ch, EVENT_ADDRINFO_RESOLVED, id, NULL) == 0, "ADDRINFO_RESOLVED for the id");
	CHECK(strcmp(rdma_event_str(EVENT_ADDRINFO_RESOLVED), "RDMA_CM_EVENT_ADDRINFO_RESOLVED") ==
		      0,
	      "rdma_event_str names it");
	CHECK(query_addrinfo(id, &info) == 0 && info, "rdma_query_addrinfo: the result");
	if (info) {
		struct sockaddr_in *dst = (struct sockaddr_in *)info->ai_dst_addr;
		char ip[32] = "";
		if (dst)
			inet_ntop(AF_INET, &dst->sin_addr, ip, sizeof(ip));
		CHECK(dst && info->ai_family == AF_INET && strcmp(ip, argv[1]) == 0 &&
			      ntohs(dst->sin_port) == 7471 && info->ai_port_space == RDMA_PS_TCP,
		      "as rdma_getaddrinfo: destination %s:7471, RDMA_PS_TCP", ip);
		rdma_freeaddrinfo(info);
	}
	errno = 0;
	CHECK(query_addrinfo(id, &info) == -1 && errno == ENOENT, "the result is handed out once");

	/* One resolution at a time: the next waits until the result is taken. */
	CHECK(resolve_addrinfo(id, argv[1], "7472", &hints) == 0, "resolving again");
	errno = 0;
	CHECK(resolve_addrinfo(id, argv[1], "7473", &hints) == -1 && errno == EBUSY,
	      "while a result waits: EBUSY (errno %d)", errno);
	CHECK(expect(ch, EVENT_ADDRINFO_RESOLVED, id, NULL) == 0 && !pending(ch),
	      "one event for the one resolution");
	CHECK(query_addrinfo(id, &info) == 0, "taken");
	rdma_freeaddrinfo(info);

	/* Failures fail the call and generate no event. */
	errno = 0;
	CHECK(resolve_addrinfo(id, "no-such-host.invalid", "7471", &hints) == -1 && errno != 0 &&
		      !pending(ch),
	      "an unresolvable name: -1, no event (errno %d)", errno);
	hints.ai_flags = AI_FLAG_SA | AI_FLAG_DNS;
	errno = 0;
	CHECK(resolve_addrinfo(id, NULL, "7471", &hints) == -1 && errno == ENOTSUP,
	      "RAI_SA and RAI_DNS together: ENOTSUP (errno %d)", errno);
	hints.ai_flags = AI_FLAG_SA;
	errno = 0;
	CHECK(resolve_addrinfo(id, argv[1], "7471", &hints) == -1 && errno == ENOTSUP,
	      "RAI_SA with a node: ENOTSUP (errno %d)", errno);
	errno = 0;
	CHECK(resolve_addrinfo(id, NULL, "7471", &hints) == -1 && errno == EINVAL,
	      "RAI_SA on an id bound to no port: EINVAL (errno %d)", errno);
	struct sockaddr_in bound = ipv4(argv[1], 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&bound) == 0, "bind to the device");
	errno = 0;
	CHECK(resolve_addrinfo(id, NULL, "7471", &hints) == -1 && !pending(ch),
	      "RAI_SA on a RoCE port (no subnet administrator): -1 (errno %d)", errno);
	hints.ai_flags = AI_FLAG_DNS;
	CHECK(resolve_addrinfo(id, argv[1], "7474", &hints) == 0 &&
		      expect(ch, EVENT_ADDRINFO_RESOLVED, id, NULL) == 0,
	      "RAI_DNS asked for by name");
	/* Destroying the id frees a result nobody took. */
	CHECK(rdma_destroy_id(id) == 0, "destroy with a result waiting");

	/* A synchronous id: the call returns with the result ready. */
	struct rdma_cm_id *sync_id = NULL;
	CHECK(rdma_create_id(NULL, &sync_id, NULL, RDMA_PS_TCP) == 0, "synchronous id");
	hints.ai_flags = 0;
	CHECK(resolve_addrinfo(sync_id, argv[1], "7475", &hints) == 0 &&
		      query_addrinfo(sync_id, &info) == 0 && info && info->ai_dst_addr,
	      "resolved on return for a synchronous id");
	if (info)
		rdma_freeaddrinfo(info);
	CHECK(rdma_destroy_id(sync_id) == 0, "destroy the synchronous id");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
