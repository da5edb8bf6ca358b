/* Helpers of the rdma_cm C programs that connect two devices in one process: addresses,
 * bounded event waits, the process's file descriptors and memory. Every wait ends within
 * 10 s. */
#ifndef SOFTROCE_CM_COMMON_H
#define SOFTROCE_CM_COMMON_H
#include <arpa/inet.h>
#include <dirent.h>
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

/* Resident memory of this process, in KiB. */
static inline long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}
#endif
