/* Helpers of the rdma_cm C programs that connect two devices in one process: addresses,
 * bounded event waits, the process's file descriptors and memory. Every wait ends within
 * 10 s. */
#ifndef SOFTROCE_CM_COMMON_H
#define SOFTROCE_CM_COMMON_H
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "common.h"

static inline struct sockaddr_in ipv4(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* The next event on `ch` within 10 s, or NULL. */
static inline struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev = NULL;
	if (poll(&pfd, 1, 10000) != 1 || rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

/* The next event, which must be `type` with status 0 for `id` (NULL: any id), unacked;
 * NULL (said why) otherwise. */
static inline struct rdma_cm_event *take(struct rdma_event_channel *ch,
					 enum rdma_cm_event_type type, struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev = next_event(ch);
	if (!ev) {
		fprintf(stderr, "no %s within 10 s\n", rdma_event_str(type));
		return NULL;
	}
	if (ev->event != type || ev->status != 0 || (id && ev->id != id)) {
		fprintf(stderr, "expected %s, got %s status %d\n", rdma_event_str(type),
			rdma_event_str(ev->event), ev->status);
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

/* As take(), acked; the id it was for through *from (when not NULL). 0 on success. */
static inline int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
			 struct rdma_cm_id *id, struct rdma_cm_id **from)
{
	struct rdma_cm_event *ev = take(ch, type, id);
	if (!ev)
		return 1;
	if (from)
		*from = ev->id;
	rdma_ack_cm_event(ev);
	return 0;
}

/* An RC id on `ch` whose address (and, when `route`, route) from `from` to to:port is
 * resolved; exits when that fails. */
static inline struct rdma_cm_id *resolved_on(struct rdma_event_channel *ch, const char *from,
					     const char *to, int port, int route)
{
	struct rdma_cm_id *c = NULL;
	struct sockaddr_in src = ipv4(from, 0), dst = ipv4(to, port);
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, c, NULL) ||
	    (route && (rdma_resolve_route(c, 2000) ||
		       expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, c, NULL)))) {
		fprintf(stderr, "resolving %s -> %s:%d: errno %d\n", from, to, port, errno);
		exit(2);
	}
	return c;
}

/* The next event on `ch`, which must be `type` for `id` with `status`; acked. 1 when it
 * is (and what came instead said otherwise). */
static inline int next_event_is(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				struct rdma_cm_id *id, int status)
{
	struct rdma_cm_event *ev = next_event(ch);
	int ok = ev && ev->event == type && ev->id == id && ev->status == status;
	if (!ok)
		fprintf(stderr, "expected %s status %d, got %s status %d%s\n", rdma_event_str(type),
			status, ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0,
			ev && ev->id != id ? " for another id" : "");
	if (ev)
		rdma_ack_cm_event(ev);
	return ok;
}

/* Open file descriptors of this process. */
static inline int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* The number after `key` (e.g. "VmRSS:") in /proc/self/status, or -1. */
static inline long self_status(const char *key)
{
	char line[256];
	long value = -1;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && sscanf(line + n, "%ld", &value) == 1)
			break;
	fclose(f);
	return value;
}

/* Resident memory of this process, in KiB. */
static inline long rss_kib(void)
{
	return self_status("VmRSS:");
}

/* Threads of this process. */
static inline long threads_now(void)
{
	return self_status("Threads:");
}

/* From here on the process may start no thread: RLIMIT_NPROC's soft limit at its thread
 * count (the process must not be root, which the limit exempts). The limit before, for
 * set_thread_limit to put back; exits when it cannot be set. */
static inline struct rlimit no_more_threads(void)
{
	struct rlimit saved, tight;
	if (getrlimit(RLIMIT_NPROC, &saved)) {
		perror("getrlimit");
		exit(2);
	}
	tight = saved;
	tight.rlim_cur = (rlim_t)threads_now();
	if (setrlimit(RLIMIT_NPROC, &tight)) {
		perror("setrlimit");
		exit(2);
	}
	return saved;
}

/* Puts back the limit no_more_threads returned; 0 on success. */
static inline int set_thread_limit(const struct rlimit *saved)
{
	return setrlimit(RLIMIT_NPROC, saved);
}
/* A librdmacm call newer than rdma-core 44 (which these programs link with), from the
 * librdmacm.so.1 loaded at run time: the drop-in. NULL, said why, when it lacks the call. */
static inline void *newer_rdmacm_call(const char *name)
{
	void *lib = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *call = lib ? dlsym(lib, name) : NULL;
	if (!call)
		fprintf(stderr, "librdmacm.so.1 has no %s: %s\n", name, dlerror());
	return call;
}

/* What the program is doing, for the watchdog's message. */
static const char *volatile step = "starting";

static inline void on_watchdog(int sig)
{
	(void)sig;
	fprintf(stderr, "TIMEOUT during: %s\n", step);
	printf("%d failures\n", failures + 1);
	_exit(1);
}

/* Every wait of these programs is bounded; one that never ends is a failure after `seconds`,
 * not a hang. */
static inline void watchdog(unsigned seconds)
{
	signal(SIGALRM, on_watchdog);
	alarm(seconds);
}

/* QP attributes of a small RC QP (4 WRs, one SGE each way). */
static inline struct ibv_qp_init_attr small_rc_attr(void)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 4,
					     .max_recv_wr = 4,
					     .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};
	return a;
}

/* A listener of port space RDMA_PS_TCP at ip:port on `ch`; exits when that fails. */
static inline struct rdma_cm_id *listening_on(struct rdma_event_channel *ch, const char *ip,
					      int port)
{
	struct rdma_cm_id *l = NULL;
	struct sockaddr_in a = ipv4(ip, port);
	if (rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 8)) {
		fprintf(stderr, "listening on %s:%d: errno %d\n", ip, port, errno);
		exit(2);
	}
	return l;
}

/* The start of a program between two devices: the server's address in argv[1], the
 * client's in argv[2], a watchdog and the program's event channel (exits without one). */
static inline struct rdma_event_channel *two_device_start(int argc, char **argv,
							 const char **server_ip,
							 const char **client_ip)
{
	*server_ip = argc > 2 ? argv[1] : "127.0.0.1";
	*client_ip = argc > 2 ? argv[2] : "127.0.0.2";
	watchdog(50);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		printf("no event channel: errno %d\n1 failures\n", errno);
		exit(1);
	}
	return ch;
}

/* The end of such a program: the channel goes, the failures are told. */
static inline int two_device_end(struct rdma_event_channel *ch)
{
	rdma_destroy_event_channel(ch);
	alarm(0);
	printf("%d failures\n", failures);
	return failures != 0;
}

#endif
