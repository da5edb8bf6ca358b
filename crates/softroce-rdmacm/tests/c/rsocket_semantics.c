/* rsocket(7): stream rsockets behave as the socket calls they are named after, except
 * where rsockets notes otherwise. A server thread on softroce0 (argv[1]) and the client in
 * main on softroce1 (argv[2]), in one process: refused and non-blocking connects and
 * SO_ERROR, addresses, MSG_PEEK/MSG_DONTWAIT/MSG_WAITALL, readv/writev, a transfer much
 * larger than the ring, half-close (SHUT_WR), the peer's close (EOF, then an error on
 * send), rpoll and rselect with an ordinary descriptor beside rsockets, the socket
 * options and rfcntl, the calls' errors, an unbound socket's name, and a listener's
 * accept queue (connections complete before raccept; a forked child closes its copy).
 * Prints "N failures". */
#include <fcntl.h>
#include <sys/mman.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7870 /* this program's ports: PORT .. PORT + 4 */
#define BIG (1 << 20)

static const char *server_ip, *client_ip;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening;

/* Reads exactly n bytes (blocking); 0 on success. */
static int read_all(int s, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = rrecv(s, (char *)buf + got, n - got, 0);
		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

static int write_all(int s, const void *buf, size_t n)
{
	size_t put = 0;
	while (put < n) {
		ssize_t r = rsend(s, (const char *)buf + put, n - put, 0);
		if (r <= 0)
			return -1;
		put += r;
	}
	return 0;
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 7 + (i >> 11));
}

/* The server: accepts one connection and follows the script the client drives. */
static void *server(void *arg)
{
	(void)arg;
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = ipv4(server_ip, PORT);
	int one = 1;
	rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || rbind(l, (struct sockaddr *)&a, sizeof(a)) || rlisten(l, 4)) {
		fprintf(stderr, "server: listening failed: errno %d\n", errno);
		exit(2);
	}
	CHECK(rlisten(l, 4) == 0, "rlisten of a listening rsocket is 0");
	pthread_mutex_lock(&lock);
	listening = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);

	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	int s = raccept(l, (struct sockaddr *)&peer, &plen);
	CHECK(s >= 0, "raccept: errno %d", errno);
	if (s < 0)
		return NULL;
	char ip[32];
	inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
	CHECK(plen == sizeof(peer) && strcmp(ip, client_ip) == 0,
	      "raccept's address is the client's (%s, len %u)", ip, plen);

	/* 1. echo 100 bytes. */
	char small[100];
	if (!read_all(s, small, sizeof(small)))
		write_all(s, small, sizeof(small));
	/* 2. on the client's word, 3000 bytes in three pieces (it waits for all with
	 * MSG_WAITALL). */
	char go;
	read_all(s, &go, 1);
	static char mid[3000];
	memset(mid, 'm', sizeof(mid));
	for (int i = 0; i < 3; i++) {
		write_all(s, mid + i * 1000, 1000);
		usleep(20000);
	}
	/* 3. a megabyte both ways, checked. */
	static unsigned char big[BIG];
	if (!read_all(s, big, BIG)) {
		size_t bad = 0;
		for (size_t i = 0; i < BIG; i++)
			bad += big[i] != pattern(i);
		CHECK(bad == 0, "server: %zu of %d bytes differ", bad, BIG);
		write_all(s, big, BIG);
	}
	/* 4. after the client's SHUT_WR: EOF here, and this side can still send. */
	char c;
	CHECK(rrecv(s, &c, 1, 0) == 0, "rrecv after the peer's SHUT_WR is 0 (EOF)");
	CHECK(write_all(s, "after-shutdown", 14) == 0, "sending after the peer's SHUT_WR");
	/* 5. close: the client sees EOF. */
	CHECK(rclose(s) == 0, "rclose of the connection");
	CHECK(rclose(l) == 0, "rclose of the listener");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SERVER_IP CLIENT_IP\n", argv[0]);
		return 2;
	}
	server_ip = argv[1];
	client_ip = argv[2];
	watchdog(50);

	step = "socket errors";
	errno = 0;
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP,
	      "rsocket(AF_UNIX) fails ENOTSUP (errno %d)", errno);
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP) == -1 && errno == ENOTSUP,
	      "a stream rsocket over UDP fails ENOTSUP (errno %d)", errno);
	errno = 0;
	CHECK(rsend(0, "x", 1, 0) == -1 && errno == EBADF, "rsend on a non-rsocket: EBADF");
	errno = 0;
	CHECK(rclose(12345) == -1 && errno == EBADF, "rclose of a non-rsocket: EBADF");

	step = "unbound names";
	/* getsockname(2) of an unbound socket: its family, address and port 0. */
	int families[2] = {AF_INET, AF_INET6};
	for (int i = 0; i < 2; i++) {
		struct sockaddr_storage name;
		memset(&name, 0xee, sizeof(name));
		socklen_t nlen = sizeof(name);
		int u = rsocket(families[i], SOCK_STREAM, 0);
		socklen_t want = families[i] == AF_INET ? sizeof(struct sockaddr_in)
							 : sizeof(struct sockaddr_in6);
		CHECK(u >= 0 && rgetsockname(u, (struct sockaddr *)&name, &nlen) == 0 &&
			      name.ss_family == families[i] && nlen == want,
		      "an unbound rsocket's name: family %d (want %d), length %u (want %u)",
		      name.ss_family, families[i], nlen, want);
		if (u >= 0)
			rclose(u);
	}

	step = "options";
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket: errno %d", errno);
	int v = 65536, got = 0;
	socklen_t len = sizeof(got);
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) == 0 &&
		      rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got == 2 * v,
	      "SO_RCVBUF set before connecting reads back doubled, as rsockets keeps it (%d)",
	      got);
	v = 1;
	len = sizeof(got);
	CHECK(rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) == 0 &&
		      rgetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &got, &len) == 0 && got == 1,
	      "TCP_NODELAY");
	v = 64;
	len = sizeof(got);
	CHECK(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)) == 0 &&
		      rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &got, &len) == 0 && got == 64,
	      "RDMA_SQSIZE (%d)", got);
	errno = 0;
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &v, sizeof(v)) == -1 && errno == ENOTSUP,
	      "an option rsockets lacks: ENOTSUP (errno %d)", errno);
	errno = 0;
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, 1) == -1 && errno == EINVAL,
	      "an option value too short: EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(raccept(s, NULL, NULL) == -1 && errno == EBADF,
	      "raccept on an rsocket that does not listen: EBADF as rsockets (errno %d)", errno);
	CHECK((rfcntl(s, F_GETFL) & O_NONBLOCK) == 0, "blocking by default");
	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(s, F_GETFL) & O_NONBLOCK),
	      "F_SETFL O_NONBLOCK reads back");

	/* The server's device answers from here on: a request for a port nobody listens on is
	 * refused (REJ), as a host without the listener refuses it. */
	step = "listening";
	pthread_t t;
	pthread_create(&t, NULL, server, NULL);
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	step = "non-blocking connect refused";
	/* Nobody listens on PORT + 1: EINPROGRESS, then POLLOUT|POLLERR and SO_ERROR. */
	struct sockaddr_in nowhere = ipv4(server_ip, PORT + 1);
	struct sockaddr_in me = ipv4(client_ip, 0);
	CHECK(rbind(s, (struct sockaddr *)&me, sizeof(me)) == 0, "rbind: errno %d", errno);
	errno = 0;
	int rc = rconnect(s, (struct sockaddr *)&nowhere, sizeof(nowhere));
	/* As a non-blocking TCP connect on loopback: refused at once, or in progress and then
	 * POLLERR with SO_ERROR. */
	int err = 0;
	socklen_t elen = sizeof(err);
	if (rc == -1 && errno == ECONNREFUSED) {
		CHECK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) == 0,
		      "SO_ERROR after a refusal: errno %d", errno);
	} else {
		CHECK(rc == -1 && errno == EINPROGRESS,
		      "non-blocking rconnect: EINPROGRESS or ECONNREFUSED (%d, %d)", rc, errno);
		struct pollfd p = {.fd = s, .events = POLLOUT};
		CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLERR),
		      "a refused connect polls POLLERR (%#x)", p.revents);
		CHECK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == ECONNREFUSED,
		      "SO_ERROR is ECONNREFUSED (%d)", err);
	}
	elen = sizeof(err);
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0,
	      "reading SO_ERROR clears it (%d)", err);
	CHECK(rclose(s) == 0, "rclose");

	step = "blocking connect refused";
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rbind(s, (struct sockaddr *)&me, sizeof(me)) == 0, "rbind: errno %d", errno);
	errno = 0;
	CHECK(rconnect(s, (struct sockaddr *)&nowhere, sizeof(nowhere)) == -1 &&
		      errno == ECONNREFUSED,
	      "a blocking rconnect nobody hears: ECONNREFUSED (errno %d)", errno);
	rclose(s);

	step = "connecting";
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in srv = ipv4(server_ip, PORT);
	/* From the client's own device (an unbound rsocket would route to the server's
	 * device, the one that owns the destination address). */
	CHECK(rbind(s, (struct sockaddr *)&me, sizeof(me)) == 0, "rbind: errno %d", errno);
	/* Queue sizes past what the device's queues hold (max_qp_wr) or below rsockets' 16 are
	 * cut to fit at the connect, as rs_set_qp_size does, and read back as used. */
	int huge = 100000, tiny = 1;
	CHECK(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &huge, sizeof(huge)) == 0 &&
		      rsetsockopt(s, SOL_RDMA, RDMA_RQSIZE, &tiny, sizeof(tiny)) == 0,
	      "RDMA_SQSIZE 100000, RDMA_RQSIZE 1 before the connect");
	CHECK(rconnect(s, (struct sockaddr *)&srv, sizeof(srv)) == 0, "rconnect: errno %d", errno);
	int sq = 0, rq = 0;
	len = sizeof(sq);
	rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &sq, &len);
	len = sizeof(rq);
	rgetsockopt(s, SOL_RDMA, RDMA_RQSIZE, &rq, &len);
	CHECK(sq == 16384 && rq == 16, "the sizes used: send %d (max_qp_wr), receive %d", sq, rq);
	errno = 0;
	CHECK(rconnect(s, (struct sockaddr *)&srv, sizeof(srv)) == -1 && errno == EISCONN,
	      "rconnect of a connected rsocket: EISCONN (errno %d)", errno);
	struct sockaddr_in a;
	char ip[32];
	len = sizeof(a);
	CHECK(rgetpeername(s, (struct sockaddr *)&a, &len) == 0 && ntohs(a.sin_port) == PORT &&
		      inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip)) && !strcmp(ip, server_ip),
	      "rgetpeername is the server's address");
	len = sizeof(a);
	CHECK(rgetsockname(s, (struct sockaddr *)&a, &len) == 0 &&
		      inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip)) && !strcmp(ip, client_ip) &&
		      a.sin_port != 0,
	      "rgetsockname is this device's address and a port");
	errno = 0;
	CHECK(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)) == -1 && errno == EINVAL,
	      "SOL_RDMA options once connected: EINVAL (errno %d)", errno);
	/* rsockets: TCP_MAXSEG is the route's path MTU (4096 on loopback) once there is one. */
	int seg = 0;
	len = sizeof(seg);
	CHECK(rgetsockopt(s, IPPROTO_TCP, TCP_MAXSEG, &seg, &len) == 0 && seg == 4096,
	      "TCP_MAXSEG of the connection: %d", seg);
	/* Keepalive on without TCP_KEEPIDLE: the kernel's idle time, else two hours. */
	int on = 1, idle = 0, expect_idle = 7200;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r");
	if (f) {
		if (fscanf(f, "%d", &expect_idle) != 1)
			expect_idle = 7200;
		fclose(f);
	}
	len = sizeof(idle);
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) == 0 &&
		      rgetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len) == 0 &&
		      idle == expect_idle,
	      "TCP_KEEPIDLE after SO_KEEPALIVE: %d (want %d)", idle, expect_idle);

	step = "echo, peek, dontwait";
	char small[100], back[100];
	for (int i = 0; i < 100; i++)
		small[i] = (char)i;
	CHECK(rsend(s, small, 100, 0) == 100, "rsend of 100 bytes");
	struct pollfd p = {.fd = s, .events = POLLIN};
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "the echo polls POLLIN");
	CHECK(rrecv(s, back, 10, MSG_PEEK) == 10 && !memcmp(back, small, 10),
	      "MSG_PEEK sees the data");
	/* As a socket's: one peek spread over the buffers, not the same bytes in each. */
	char first[5], second[5];
	struct iovec two[2] = {{first, 5}, {second, 5}};
	struct msghdr peek = {.msg_iov = two, .msg_iovlen = 2};
	CHECK(rrecvmsg(s, &peek, MSG_PEEK) == 10 && !memcmp(first, small, 5) &&
		      !memcmp(second, small + 5, 5),
	      "MSG_PEEK over two buffers sees ten bytes in order");
	CHECK(read_all(s, back, 100) == 0 && !memcmp(back, small, 100),
	      "MSG_PEEK left it all to read");
	errno = 0;
	CHECK(rrecv(s, back, 1, MSG_DONTWAIT) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
	      "MSG_DONTWAIT with nothing to read: EAGAIN (errno %d)", errno);

	CHECK(rsend(s, "g", 1, 0) == 1, "the word to go on");
	step = "waitall";
	static char mid[3000];
	/* Over two buffers: the second waits too (MSG_WAITALL is for the whole message). */
	struct iovec parts[2] = {{mid, 1000}, {mid + 1000, sizeof(mid) - 1000}};
	struct msghdr all = {.msg_iov = parts, .msg_iovlen = 2};
	CHECK(rrecvmsg(s, &all, MSG_WAITALL) == sizeof(mid) && mid[0] == 'm' &&
		      mid[2999] == 'm',
	      "MSG_WAITALL gathers three sends into two buffers");

	step = "a megabyte";
	static unsigned char big[BIG], big2[BIG];
	for (size_t i = 0; i < BIG; i++)
		big[i] = pattern(i);
	struct iovec iov[2] = {{big, BIG / 3}, {big + BIG / 3, BIG - BIG / 3}};
	size_t put = rwritev(s, iov, 2);
	CHECK(put > 0, "rwritev: errno %d", errno);
	if (put > 0 && put < BIG)
		write_all(s, big + put, BIG - put);
	size_t gotn = 0;
	while (gotn < BIG) {
		struct iovec riov[2] = {{big2 + gotn, (BIG - gotn) / 2},
					{big2 + gotn + (BIG - gotn) / 2, BIG - gotn - (BIG - gotn) / 2}};
		ssize_t r = rreadv(s, riov, 2);
		if (r <= 0)
			break;
		gotn += r;
	}
	CHECK(gotn == BIG && !memcmp(big, big2, BIG), "a megabyte returns intact (%zu)", gotn);

	step = "iomap";
	/* riomap(3)-style rules (rsocket(7)): PROT_WRITE needs a slot in the peer's iomap
	 * table, which the peer offers only with RDMA_IOMAPSIZE (this server does not). */
	static char mapped[4096];
	errno = 0;
	CHECK(riomap(s, mapped, sizeof(mapped), PROT_READ, 0, -1) == -1 && errno == EINVAL,
	      "riomap PROT_READ: EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(riomap(s, mapped, sizeof(mapped), PROT_WRITE, 0, -1) == -1 && errno == ENOMEM,
	      "riomap PROT_WRITE without the peer's slots: ENOMEM (errno %d)", errno);
	CHECK(riomap(s, mapped, sizeof(mapped), PROT_NONE, 0, 4096) == 4096 &&
		      riounmap(s, mapped, sizeof(mapped)) == 0,
	      "a local mapping at a chosen offset, then unmapped");
	errno = 0;
	CHECK(riounmap(s, mapped, sizeof(mapped)) == -1 && errno == EINVAL,
	      "riounmap of what is not mapped: EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(riowrite(s, "x", 1, 0, 0) == (size_t)-1 && errno == EINVAL,
	      "riowrite where the peer mapped nothing: EINVAL (errno %d)", errno);

	step = "half close";
	CHECK(rshutdown(s, SHUT_WR) == 0, "rshutdown(SHUT_WR): errno %d", errno);
	errno = 0;
	CHECK(rsend(s, "x", 1, 0) == -1, "rsend after SHUT_WR fails");
	char tail[32] = {0};
	CHECK(read_all(s, tail, 14) == 0 && !memcmp(tail, "after-shutdown", 14),
	      "the peer still sends after our SHUT_WR");

	step = "peer close";
	int pipefd[2];
	CHECK(pipe(pipefd) == 0, "pipe");
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timeval tv = {10, 0};
	CHECK(rselect(s + 1, &rd, NULL, NULL, &tv) == 1 && FD_ISSET(s, &rd),
	      "rselect: the peer's close makes the rsocket readable");
	CHECK(rrecv(s, tail, 1, 0) == 0, "rrecv after the peer closed: 0 (EOF)");

	step = "rpoll with an ordinary fd";
	struct pollfd mix[2] = {{.fd = pipefd[0], .events = POLLIN}, {.fd = s, .events = 0}};
	CHECK(rpoll(mix, 1, 0) == 0, "rpoll with nothing ready and timeout 0 returns 0");
	CHECK(write(pipefd[1], "p", 1) == 1, "pipe write");
	CHECK(rpoll(mix, 1, 1000) == 1 && (mix[0].revents & POLLIN),
	      "rpoll reports an ordinary fd");
	close(pipefd[0]);
	close(pipefd[1]);
	CHECK(rclose(s) == 0, "rclose after the peer's close");
	pthread_join(t, NULL);

	step = "accept queue";
	/* As a TCP listener: connects complete without the server's raccept (what they send
	 * waits), rpoll finds the listener readable, raccept hands the connections out in
	 * order; a listener closed with connections it never handed out ends them. One thread
	 * does all of it, which only works if nothing waits for raccept. */
	struct sockaddr_in at = ipv4(server_ip, PORT + 2), at2 = ipv4(server_ip, PORT + 3);
	struct sockaddr_in from = ipv4(client_ip, 0);
	int lq = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lq >= 0 && rbind(lq, (struct sockaddr *)&at, sizeof(at)) == 0 && rlisten(lq, 2) == 0,
	      "listening with a backlog of 2: errno %d", errno);
	int cq[2];
	const char *words[2] = {"one", "two"};
	/* rsocket(7) RDMA_ROUTE: the second connection goes over a path record of the
	 * application's (traffic class 0x20), given to the CM instead of resolving a route;
	 * until the connect it reads back as set. Both GIDs IPv4-mapped, as RoCE's. */
	struct ibv_path_data route;
	memset(&route, 0, sizeof(route));
	route.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
	route.path.dgid.raw[10] = route.path.dgid.raw[11] = 0xff;
	route.path.sgid.raw[10] = route.path.sgid.raw[11] = 0xff;
	memcpy(&route.path.dgid.raw[12], &at.sin_addr, 4);
	memcpy(&route.path.sgid.raw[12], &from.sin_addr, 4);
	route.path.flowlabel_hoplimit = htobe32(64);
	route.path.tclass = 0x20;
	route.path.reversible_numpath = IBV_PATH_RECORD_REVERSIBLE | 1;
	route.path.pkey = htobe16(0xffff);
	route.path.mtu = IBV_MTU_1024 | (2 << 6);
	route.path.rate = 2 << 6;
	route.path.packetlifetime = 14 | (2 << 6);
	for (int i = 0; i < 2; i++) {
		cq[i] = rsocket(AF_INET, SOCK_STREAM, 0);
		CHECK(cq[i] >= 0 && rbind(cq[i], (struct sockaddr *)&from, sizeof(from)) == 0,
		      "rbind %d: errno %d", i, errno);
		if (i == 1) {
			struct ibv_path_data set_back;
			socklen_t rlen = sizeof(set_back);
			CHECK(rsetsockopt(cq[i], SOL_RDMA, RDMA_ROUTE, &route, sizeof(route)) == 0 &&
				      rgetsockopt(cq[i], SOL_RDMA, RDMA_ROUTE, &set_back, &rlen) == 0 &&
				      rlen == sizeof(route) && !memcmp(&set_back, &route, sizeof(route)),
			      "RDMA_ROUTE set before the connect reads back as set (len %u, errno %d)",
			      rlen, errno);
		}
		CHECK(rconnect(cq[i], (struct sockaddr *)&at, sizeof(at)) == 0,
		      "connect %d completes before any raccept: errno %d", i, errno);
		CHECK(rsend(cq[i], words[i], 3, 0) == 3, "connection %d sends before raccept", i);
		/* Connected: the route's path record, one ibv_path_data (rs_convert_sa_path). */
		struct ibv_path_data paths[2];
		memset(paths, 0, sizeof(paths));
		socklen_t plen = sizeof(paths);
		int want_tclass = i == 1 ? 0x20 : 0, want_mtu = i == 1 ? IBV_MTU_1024 : IBV_MTU_4096;
		CHECK(rgetsockopt(cq[i], SOL_RDMA, RDMA_ROUTE, paths, &plen) == 0 &&
			      plen == sizeof(paths[0]) && paths[0].path.tclass == want_tclass &&
			      paths[0].path.mtu == (want_mtu | (2 << 6)) &&
			      !memcmp(&paths[0].path.dgid.raw[12], &at.sin_addr, 4),
		      "connection %d's RDMA_ROUTE: len %u, tclass %#x (want %#x), mtu %#x (want %#x)",
		      i, plen, paths[0].path.tclass, want_tclass, paths[0].path.mtu,
		      want_mtu | (2 << 6));
		plen = 4;
		errno = 0;
		CHECK(rgetsockopt(cq[i], SOL_RDMA, RDMA_ROUTE, paths, &plen) == -1 && errno == EINVAL,
		      "RDMA_ROUTE into less than one record: EINVAL (errno %d)", errno);
	}
	struct pollfd lp = {.fd = lq, .events = POLLIN};
	CHECK(rpoll(&lp, 1, 5000) == 1 && (lp.revents & POLLIN),
	      "rpoll: the listener is readable (revents %#x)", lp.revents);
	for (int i = 0; i < 2; i++) {
		char word[4] = {0};
		int sq = raccept(lq, NULL, NULL);
		CHECK(sq >= 0 && read_all(sq, word, 3) == 0 && !strcmp(word, words[i]),
		      "raccept %d hands out connection %d with what it sent (%s, errno %d)", i, i,
		      word, errno);
		if (sq >= 0)
			rclose(sq);
		rclose(cq[i]);
	}
	lp.revents = 0;
	CHECK(rpoll(&lp, 1, 0) == 0, "nothing more waits: rpoll 0");
	rclose(lq);
	int lq2 = rsocket(AF_INET, SOCK_STREAM, 0);
	int c3 = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lq2 >= 0 && rbind(lq2, (struct sockaddr *)&at2, sizeof(at2)) == 0 &&
		      rlisten(lq2, 1) == 0 && c3 >= 0 &&
		      rbind(c3, (struct sockaddr *)&from, sizeof(from)) == 0 &&
		      rconnect(c3, (struct sockaddr *)&at2, sizeof(at2)) == 0,
	      "a connection waits on a second listener: errno %d", errno);
	lp = (struct pollfd){.fd = lq2, .events = POLLIN};
	CHECK(rpoll(&lp, 1, 5000) == 1, "and is ready to be taken");
	CHECK(rclose(lq2) == 0, "the listener closes with it untaken");
	char after_close;
	CHECK(rrecv(c3, &after_close, 1, 0) == 0,
	      "the untaken connection ends: rrecv 0 (EOF) at its client");
	rclose(c3);

	step = "fork";
	/* A child forked while a listener accepts in the background closes its copy at once
	 * (the accepting thread is the parent's: the child must not wait for it), and the
	 * parent's listener goes on accepting. */
	struct sockaddr_in atf = ipv4(server_ip, PORT + 4);
	int lf = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lf >= 0 && rbind(lf, (struct sockaddr *)&atf, sizeof(atf)) == 0 && rlisten(lf, 1) == 0,
	      "listening: errno %d", errno);
	pid_t kid = fork();
	if (kid == 0) {
		alarm(5);
		_exit(rclose(lf) == 0 ? 0 : 1);
	}
	int kid_status = -1;
	CHECK(kid > 0 && waitpid(kid, &kid_status, 0) == kid && WIFEXITED(kid_status) &&
		      WEXITSTATUS(kid_status) == 0,
	      "the child closed its copy of the listener and exited (status %#x)", kid_status);
	int cf = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(cf >= 0 && rbind(cf, (struct sockaddr *)&from, sizeof(from)) == 0 &&
		      rconnect(cf, (struct sockaddr *)&atf, sizeof(atf)) == 0,
	      "the parent's listener still accepts: errno %d", errno);
	int sf = raccept(lf, NULL, NULL);
	CHECK(sf >= 0, "and hands the connection out: errno %d", errno);
	if (sf >= 0)
		rclose(sf);
	rclose(cf);
	rclose(lf);
	printf("%d failures\n", failures);
	return failures != 0;
}
