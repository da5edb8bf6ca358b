/* rsocket(7)'s repoll_create, repoll_ctl and repoll_wait behave as epoll_create1(2),
 * epoll_ctl(2) and epoll_wait(2), the calls they are named after, over rsockets and
 * ordinary descriptors together: one process, a listener and its accepted rsocket on
 * softroce0 (argv[1]), the client on softroce1 (argv[2]), and pipes beside them. Errors,
 * level-triggered readiness, data handed back, maxevents taking turns, EPOLLONESHOT, a
 * listener's pending connection, the peer's close, a descriptor added by another thread
 * while one waits, a closed descriptor leaving the set. rdma-core 44 (which this program
 * links with) has no repoll (it came with RDMACM_1.5): the calls are looked up in the
 * librdmacm.so.1 loaded at run time, the drop-in. Prints "N failures". */
#include <fcntl.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cm_common.h"

static int (*repoll_create)(int flags);
static int (*repoll_ctl)(int epfd, int op, int fd, struct epoll_event *event);
static int (*repoll_wait)(int epfd, struct epoll_event *events, int maxevents, int timeout);

#define PORT 7890


static int add(int ep, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = {.events = events, .data.u64 = data};
	return repoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static int mod(int ep, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = {.events = events, .data.u64 = data};
	return repoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

/* The events reported for `data` among the first n, or 0. */
static uint32_t events_of(const struct epoll_event *evs, int n, uint64_t data)
{
	for (int i = 0; i < n; i++)
		if (evs[i].data.u64 == data)
			return evs[i].events;
	return 0;
}

struct late_add {
	int ep, fd;
};

/* Adds an already readable pipe to the instance a moment after main starts waiting. */
static void *add_later(void *arg)
{
	struct late_add *la = arg;
	usleep(100000);
	add(la->ep, la->fd, EPOLLIN, 77);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SERVER_IP CLIENT_IP\n", argv[0]);
		return 2;
	}
	watchdog(50);
	struct epoll_event evs[8];
	repoll_create = newer_rdmacm_call("repoll_create");
	repoll_ctl = newer_rdmacm_call("repoll_ctl");
	repoll_wait = newer_rdmacm_call("repoll_wait");
	if (!repoll_create || !repoll_ctl || !repoll_wait) {
		printf("1 failures\n");
		return 1;
	}

	step = "creating";
	int ep = repoll_create(0);
	CHECK(ep >= 0, "repoll_create(0): errno %d", errno);
	errno = 0;
	CHECK(repoll_create(0x1234) == -1 && errno == EINVAL, "unknown flags: EINVAL (errno %d)",
	      errno);
	int ep2 = repoll_create(EPOLL_CLOEXEC);
	CHECK(ep2 >= 0 && (fcntl(ep2, F_GETFD) & FD_CLOEXEC), "EPOLL_CLOEXEC sets close-on-exec");
	CHECK(rclose(ep2) == 0, "rclose of an instance");

	step = "ctl errors";
	int p[2], q[2];
	CHECK(pipe(p) == 0 && pipe(q) == 0, "pipes");
	int file = open("/proc/self/exe", O_RDONLY);
	errno = 0;
	CHECK(add(ep, ep, EPOLLIN, 0) == -1 && errno == EINVAL, "an instance watching itself: EINVAL");
	errno = 0;
	CHECK(add(ep, -1, EPOLLIN, 0) == -1 && errno == EBADF, "fd -1: EBADF (errno %d)", errno);
	errno = 0;
	CHECK(add(-1, p[0], EPOLLIN, 0) == -1 && errno == EBADF, "epfd -1: EBADF (errno %d)", errno);
	errno = 0;
	CHECK(add(q[0], p[0], EPOLLIN, 0) == -1 && errno == EINVAL,
	      "an epfd that is no instance: EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(add(ep, file, EPOLLIN, 0) == -1 && errno == EPERM,
	      "a regular file cannot be watched: EPERM (errno %d)", errno);
	errno = 0;
	CHECK(mod(ep, p[0], EPOLLIN, 0) == -1 && errno == ENOENT, "MOD of a stranger: ENOENT");
	errno = 0;
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == -1 && errno == ENOENT,
	      "DEL of a stranger: ENOENT");
	errno = 0;
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, p[0], NULL) == -1 && errno == EFAULT,
	      "ADD without an event: EFAULT (errno %d)", errno);
	struct epoll_event any = {.events = EPOLLIN};
	errno = 0;
	CHECK(repoll_ctl(ep, 99, p[0], &any) == -1 && errno == EINVAL, "op 99: EINVAL");
	errno = 0;
	CHECK(repoll_wait(ep, evs, 0, 0) == -1 && errno == EINVAL, "maxevents 0: EINVAL");
	errno = 0;
	CHECK(repoll_wait(q[0], evs, 8, 0) == -1 && errno == EINVAL,
	      "waiting on what is no instance: EINVAL (errno %d)", errno);

	step = "a pipe, level-triggered";
	CHECK(add(ep, p[0], EPOLLIN, 11) == 0, "ADD a pipe");
	errno = 0;
	CHECK(add(ep, p[0], EPOLLIN, 11) == -1 && errno == EEXIST, "ADD twice: EEXIST");
	CHECK(repoll_wait(ep, evs, 8, 0) == 0, "nothing ready yet");
	CHECK(repoll_wait(ep, evs, 8, 50) == 0, "a timeout with nothing ready: 0");
	CHECK(write(p[1], "x", 1) == 1, "write to the pipe");
	int n = repoll_wait(ep, evs, 8, 1000);
	CHECK(n == 1 && evs[0].data.u64 == 11 && evs[0].events == EPOLLIN,
	      "the pipe is readable, with its data (n %d)", n);
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(n == 1 && evs[0].data.u64 == 11, "level-triggered: still readable until read");
	char c;
	CHECK(read(p[0], &c, 1) == 1 && repoll_wait(ep, evs, 8, 0) == 0, "read: no longer ready");

	step = "listening";
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = ipv4(argv[1], PORT);
	int one = 1;
	rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(l >= 0 && rbind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && rlisten(l, 4) == 0,
	      "listening rsocket: errno %d", errno);
	CHECK(add(ep, l, EPOLLIN, 21) == 0, "ADD the listener");
	int cl = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in ca = ipv4(argv[2], 0);
	CHECK(cl >= 0 && rbind(cl, (struct sockaddr *)&ca, sizeof(ca)) == 0, "client rsocket");
	int nb = 1;
	rfcntl(cl, F_SETFL, rfcntl(cl, F_GETFL, 0) | O_NONBLOCK);
	int rc = rconnect(cl, (struct sockaddr *)&sa, sizeof(sa));
	CHECK(rc == 0 || errno == EINPROGRESS, "non-blocking rconnect: errno %d", errno);
	(void)nb;
	step = "waiting for the connection request";
	n = repoll_wait(ep, evs, 8, 5000);
	CHECK(n == 1 && (events_of(evs, n, 21) & EPOLLIN), "the listener has a connection to accept");
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept: errno %d", errno);
	step = "waiting for the client to be connected";
	CHECK(add(ep, cl, EPOLLOUT, 31) == 0, "ADD the connecting client for EPOLLOUT");
	n = repoll_wait(ep, evs, 8, 5000);
	CHECK(n >= 1 && (events_of(evs, n, 31) & EPOLLOUT), "connected: the client is writable");
	int err = -1;
	socklen_t elen = sizeof(err);
	CHECK(rgetsockopt(cl, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0,
	      "SO_ERROR 0 after connecting");
	rfcntl(cl, F_SETFL, rfcntl(cl, F_GETFL, 0) & ~O_NONBLOCK);

	step = "data";
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, l, NULL) == 0, "DEL the listener");
	CHECK(add(ep, s, EPOLLIN, 41) == 0, "ADD the accepted rsocket for EPOLLIN");
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(n == 1 && events_of(evs, n, 31) == EPOLLOUT && !events_of(evs, n, 41),
	      "only the client's EPOLLOUT before any data (n %d)", n);
	CHECK(rsend(cl, "hello", 5, 0) == 5, "rsend");
	n = repoll_wait(ep, evs, 8, 5000);
	if (n == 1) /* the data may still be on its way */
		n = repoll_wait(ep, evs, 8, 5000) == 2 ? 2 : n;
	CHECK(n == 2 && events_of(evs, n, 41) == EPOLLIN && events_of(evs, n, 31) == EPOLLOUT,
	      "the server's rsocket readable, the client writable (n %d)", n);

	step = "maxevents";
	int first = repoll_wait(ep, evs, 1, 0) == 1 ? (int)evs[0].data.u64 : -1;
	int second = repoll_wait(ep, evs, 1, 0) == 1 ? (int)evs[0].data.u64 : -1;
	CHECK(first > 0 && second > 0 && first != second,
	      "two ready, maxevents 1: they take turns (%d then %d)", first, second);

	step = "one-shot";
	CHECK(mod(ep, cl, EPOLLOUT | EPOLLONESHOT, 32) == 0, "MOD the client to one-shot");
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(events_of(evs, n, 32) == EPOLLOUT, "the one-shot fires once");
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(n == 1 && !events_of(evs, n, 32) && events_of(evs, n, 41),
	      "then stays quiet (n %d)", n);
	CHECK(mod(ep, cl, EPOLLOUT, 33) == 0, "MOD re-arms it");
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(events_of(evs, n, 33) == EPOLLOUT, "reported again after MOD");
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, cl, NULL) == 0, "DEL the client");

	step = "reading";
	char buf[8];
	CHECK(rrecv(s, buf, sizeof(buf), 0) == 5 && memcmp(buf, "hello", 5) == 0, "rrecv hello");
	CHECK(repoll_wait(ep, evs, 8, 0) == 0, "read: the server's rsocket is quiet");

	step = "the peer's close";
	CHECK(rclose(cl) == 0, "the client closes");
	n = repoll_wait(ep, evs, 8, 5000);
	CHECK(n == 1 && (events_of(evs, n, 41) & (EPOLLIN | EPOLLHUP)),
	      "the peer's close makes the server's rsocket readable (EOF)");
	CHECK(rrecv(s, buf, sizeof(buf), 0) == 0, "rrecv: 0 at EOF");
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0 && rclose(s) == 0 && rclose(l) == 0,
	      "DEL and close the server's rsockets");

	step = "a descriptor added while waiting";
	CHECK(write(q[1], "y", 1) == 1, "the late pipe is readable");
	struct late_add la = {.ep = ep, .fd = q[0]};
	pthread_t t;
	pthread_create(&t, NULL, add_later, &la);
	n = repoll_wait(ep, evs, 8, 5000);
	pthread_join(t, NULL);
	CHECK(n == 1 && evs[0].data.u64 == 77,
	      "a wait sees the descriptor another thread added meanwhile (n %d)", n);

	step = "closed descriptors";
	close(q[0]);
	n = repoll_wait(ep, evs, 8, 0);
	CHECK(n == 0, "a closed descriptor leaves the set (n %d)", n);
	CHECK(rclose(ep) == 0, "rclose of the instance");
	errno = 0;
	CHECK(repoll_wait(ep, evs, 8, 0) == -1 && errno == EBADF,
	      "waiting on a closed instance: EBADF (errno %d)", errno);

	close(p[0]);
	close(p[1]);
	close(q[1]);
	close(file);
	printf("%d failures\n", failures);
	return failures != 0;
}
