/* rsocket(7): datagram rsockets (SOCK_DGRAM) behave as the UDP socket calls they are
 * named after. Two sockets in one process, one on softroce0 (argv[1]) and one on softroce1
 * (argv[2]): rsendto/rrecvfrom with the source address, message boundaries, a datagram cut
 * to the reader's buffer (MSG_TRUNC tells its length), MSG_PEEK, MSG_DONTWAIT and
 * non-blocking sockets (rfcntl) failing EAGAIN, rpoll's POLLIN/POLLOUT, rconnect with
 * rsend/rrecv and rgetpeername, rsendmsg/rrecvmsg, an unbound sender's address, rgetsockname,
 * too long a datagram (EMSGSIZE), hostile datagrams on the rsocket's UDP port (dropped),
 * and the calls' errors. Prints "N failures". */
#include <fcntl.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7900 /* this program's ports: PORT .. PORT + 2 */

static const char *server_ip, *client_ip;

static unsigned char pattern(int msg, size_t i)
{
	return (unsigned char)(msg * 31 + i * 7 + (i >> 8));
}

static void fill(unsigned char *buf, int msg, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(msg, i);
	if (len)
		buf[0] = (unsigned char)msg;
}

static int matches(const unsigned char *buf, int msg, size_t len)
{
	if (len && buf[0] != (unsigned char)msg)
		return 0;
	for (size_t i = 1; i < len; i++)
		if (buf[i] != pattern(msg, i))
			return 0;
	return 1;
}

/* Waits (at most 10 s) until `s` is readable. */
static int readable(int s)
{
	struct pollfd p = {.fd = s, .events = POLLIN};
	return rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN);
}

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == b->sin_family && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
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

	step = "errors";
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP) == -1 && errno == ENOTSUP,
	      "a datagram rsocket over TCP: ENOTSUP (errno %d)", errno);
	errno = 0;
	CHECK(rsendto(12345, "x", 1, 0, NULL, 0) == -1 && errno == EBADF,
	      "rsendto on a non-rsocket: EBADF (errno %d)", errno);
	errno = 0;
	char b1[8];
	CHECK(rrecvfrom(12345, b1, sizeof(b1), MSG_DONTWAIT, NULL, NULL) == -1 && errno == EBADF,
	      "rrecvfrom on a non-rsocket: EBADF (errno %d)", errno);

	step = "sockets";
	int a = rsocket(AF_INET, SOCK_DGRAM, 0);
	int b = rsocket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
	CHECK(a >= 0 && b >= 0, "two datagram rsockets: errno %d", errno);
	int type = 0;
	socklen_t tlen = sizeof(type);
	CHECK(rgetsockopt(a, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_DGRAM,
	      "SO_TYPE is SOCK_DGRAM (%d)", type);
	struct sockaddr_in sa = ipv4(server_ip, PORT), ca = ipv4(client_ip, PORT + 1);
	errno = 0;
	CHECK(rsendto(b, "x", 1, 0, NULL, 0) == -1 && errno == EDESTADDRREQ,
	      "rsendto without an address, unconnected: EDESTADDRREQ (errno %d)", errno);
	errno = 0;
	CHECK(rsend(b, "x", 1, 0) == -1 && errno == EDESTADDRREQ,
	      "rsend, unconnected: EDESTADDRREQ (errno %d)", errno);
	CHECK(rbind(a, (struct sockaddr *)&sa, sizeof(sa)) == 0, "rbind a: errno %d", errno);
	CHECK(rbind(b, (struct sockaddr *)&ca, sizeof(ca)) == 0, "rbind b: errno %d", errno);
	struct sockaddr_in got;
	socklen_t glen = sizeof(got);
	memset(&got, 0, sizeof(got));
	CHECK(rgetsockname(a, (struct sockaddr *)&got, &glen) == 0 && glen == sizeof(got) &&
		      same_addr(&got, &sa),
	      "rgetsockname is the bound address");
	errno = 0;
	glen = sizeof(got);
	CHECK(rgetpeername(a, (struct sockaddr *)&got, &glen) == -1 && errno == ENOTCONN,
	      "rgetpeername, unconnected: ENOTCONN (errno %d)", errno);
	errno = 0;
	CHECK(rlisten(a, 1) == -1 && errno == EOPNOTSUPP,
	      "rlisten on a datagram rsocket: EOPNOTSUPP (errno %d)", errno);

	step = "nothing to read";
	errno = 0;
	CHECK(rrecv(a, b1, sizeof(b1), MSG_DONTWAIT) == -1 && (errno == EAGAIN),
	      "MSG_DONTWAIT with nothing queued: EAGAIN (errno %d)", errno);
	CHECK(rfcntl(a, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(a, F_GETFL) & O_NONBLOCK),
	      "rfcntl O_NONBLOCK");
	errno = 0;
	CHECK(rrecvfrom(a, b1, sizeof(b1), 0, NULL, NULL) == -1 && errno == EAGAIN,
	      "a non-blocking socket with nothing queued: EAGAIN (errno %d)", errno);
	CHECK(rfcntl(a, F_SETFL, 0) == 0 && !(rfcntl(a, F_GETFL) & O_NONBLOCK),
	      "rfcntl back to blocking");
	struct pollfd p = {.fd = a, .events = POLLIN | POLLOUT};
	CHECK(rpoll(&p, 1, 1000) == 1 && p.revents == POLLOUT,
	      "rpoll: writable, not readable (revents %#x)", p.revents);
	p.events = POLLIN;
	CHECK(rpoll(&p, 1, 50) == 0 && p.revents == 0, "rpoll POLLIN times out");

	step = "datagrams and their boundaries";
	static const size_t sizes[] = {1, 100, 1000, 1500, 0, 64};
	const int n = sizeof(sizes) / sizeof(sizes[0]);
	unsigned char out[2048], in[2048];
	for (int i = 0; i < n; i++) {
		fill(out, i, sizes[i]);
		ssize_t r = rsendto(b, out, sizes[i], 0, (struct sockaddr *)&sa, sizeof(sa));
		CHECK(r == (ssize_t)sizes[i], "rsendto %zu bytes: %zd (errno %d)", sizes[i], r,
		      errno);
	}
	/* UDP's order is not promised (the first datagrams come through rsockets' UDP
	 * service, the later ones straight over UD): each one arrives once, whole. */
	int seen[8] = {0};
	for (int k = 0; k < n; k++) {
		CHECK(readable(a), "datagram %d of %d arrives", k + 1, n);
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		memset(&from, 0, sizeof(from));
		ssize_t r = rrecvfrom(a, in, sizeof(in), MSG_DONTWAIT, (struct sockaddr *)&from,
				      &flen);
		CHECK(r >= 0, "rrecvfrom: errno %d", errno);
		if (r < 0)
			break;
		int i = -1;
		for (int j = 0; j < n; j++)
			if (sizes[j] == (size_t)r && !seen[j] && matches(in, j, r))
				i = j;
		CHECK(i >= 0, "datagram %d (%zd bytes) is one that was sent, whole", k, r);
		if (i >= 0)
			seen[i] = 1;
		CHECK(flen == sizeof(from) && same_addr(&from, &ca),
		      "the source is the sender's address (%s:%d)", inet_ntoa(from.sin_addr),
		      ntohs(from.sin_port));
	}
	errno = 0;
	CHECK(rrecv(a, in, sizeof(in), MSG_DONTWAIT) == -1 && errno == EAGAIN,
	      "no more than was sent: EAGAIN (errno %d)", errno);

	step = "peek and truncation";
	fill(out, 7, 200);
	CHECK(rsendto(b, out, 200, 0, (struct sockaddr *)&sa, sizeof(sa)) == 200, "rsendto 200");
	CHECK(readable(a), "the datagram arrives");
	memset(in, 0, sizeof(in));
	CHECK(rrecv(a, in, 10, MSG_PEEK) == 10 && matches(in, 7, 10), "MSG_PEEK: 10 bytes");
	CHECK(rrecv(a, in, sizeof(in), MSG_PEEK | MSG_TRUNC) == 200,
	      "MSG_PEEK|MSG_TRUNC: the datagram's length");
	memset(in, 0, sizeof(in));
	CHECK(rrecv(a, in, 50, 0) == 50 && matches(in, 7, 50),
	      "a datagram longer than the buffer is cut to it");
	errno = 0;
	CHECK(rrecv(a, in, sizeof(in), MSG_DONTWAIT) == -1 && errno == EAGAIN,
	      "the rest of a cut datagram is gone (errno %d)", errno);
	fill(out, 8, 300);
	CHECK(rsendto(b, out, 300, 0, (struct sockaddr *)&sa, sizeof(sa)) == 300, "rsendto 300");
	CHECK(readable(a), "the datagram arrives");
	CHECK(rrecv(a, in, 20, MSG_TRUNC) == 300 && matches(in, 8, 20),
	      "MSG_TRUNC: the full length, 20 bytes copied");
	errno = 0;
	CHECK(rsendto(b, out, 3000, 0, (struct sockaddr *)&sa, sizeof(sa)) == -1 &&
		      errno == EMSGSIZE,
	      "3000 bytes: EMSGSIZE (errno %d)", errno);

	step = "connected";
	CHECK(rconnect(b, (struct sockaddr *)&sa, sizeof(sa)) == 0, "rconnect: errno %d", errno);
	glen = sizeof(got);
	CHECK(rgetpeername(b, (struct sockaddr *)&got, &glen) == 0 && same_addr(&got, &sa),
	      "rgetpeername is the connected address");
	fill(out, 9, 500);
	CHECK(rsend(b, out, 500, 0) == 500, "rsend on a connected socket: errno %d", errno);
	CHECK(readable(a), "the datagram arrives");
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	CHECK(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen) == 500 &&
		      matches(in, 9, 500) && same_addr(&from, &ca),
	      "it comes from the connected socket's address");
	/* The answer goes where the datagram came from, as a server's does. */
	fill(out, 10, 700);
	CHECK(rsendto(a, out, 700, 0, (struct sockaddr *)&from, flen) == 700,
	      "the answer: errno %d", errno);
	CHECK(readable(b), "the answer arrives");
	memset(in, 0, sizeof(in));
	CHECK(rrecv(b, in, sizeof(in), 0) == 700 && matches(in, 10, 700),
	      "rrecv on the connected socket");

	step = "rsendmsg and rrecvmsg";
	fill(out, 11, 120);
	struct iovec siov[2] = {{out, 20}, {out + 20, 100}};
	struct msghdr sm = {.msg_name = &sa, .msg_namelen = sizeof(sa), .msg_iov = siov,
			    .msg_iovlen = 2};
	CHECK(rsendmsg(b, &sm, 0) == 120, "rsendmsg of two iovecs: errno %d", errno);
	CHECK(readable(a), "the datagram arrives");
	memset(in, 0, sizeof(in));
	struct iovec riov[2] = {{in, 60}, {in + 60, 30}};
	struct sockaddr_in mfrom;
	struct msghdr rm = {.msg_name = &mfrom, .msg_namelen = sizeof(mfrom), .msg_iov = riov,
			    .msg_iovlen = 2};
	CHECK(rrecvmsg(a, &rm, 0) == 90 && matches(in, 11, 90) && (rm.msg_flags & MSG_TRUNC) &&
		      same_addr(&mfrom, &ca),
	      "rrecvmsg: 90 bytes over two iovecs, MSG_TRUNC, the source");

	step = "an unbound sender";
	int c = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(c >= 0, "rsocket: errno %d", errno);
	fill(out, 12, 64);
	CHECK(rsendto(c, out, 64, 0, (struct sockaddr *)&sa, sizeof(sa)) == 64,
	      "rsendto from an unbound socket: errno %d", errno);
	struct sockaddr_in cname;
	socklen_t clen = sizeof(cname);
	CHECK(rgetsockname(c, (struct sockaddr *)&cname, &clen) == 0 && cname.sin_port != 0,
	      "the sender has a port now");
	CHECK(readable(a), "its datagram arrives");
	flen = sizeof(from);
	CHECK(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen) == 64 &&
		      matches(in, 12, 64) && from.sin_port == cname.sin_port,
	      "from the sender's port (%d, it says %d)", ntohs(from.sin_port),
	      ntohs(cname.sin_port));
	CHECK(rclose(c) == 0, "rclose c");

	step = "hostile datagrams";
	/* Kernel UDP datagrams to a's port that are not rsockets' address exchange: too
	 * short, a wrong tag, an unknown op, an IPv6 header from IPv4, a header longer than the
	 * datagram, QP 1. Each is dropped; nothing arrives and a still works. */
	int k = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(k >= 0, "a kernel UDP socket: errno %d", errno);
	static const unsigned char good[16] = {0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0,
					       0, 0x12, 0x34, 0x56, 127, 0, 0, 1};
	unsigned char junk[6][16];
	for (int i = 0; i < 6; i++)
		memcpy(junk[i], good, sizeof(good));
	junk[1][0] = 0x54; /* tag */
	junk[2][5] = 3;	   /* op */
	junk[3][4] = 6;	   /* version */
	junk[4][6] = 28;   /* length */
	junk[5][9] = 0;	   /* QP 1 */
	junk[5][10] = 0;
	junk[5][11] = 1;
	CHECK(sendto(k, good, 3, 0, (struct sockaddr *)&sa, sizeof(sa)) == 3, "short datagram");
	for (int i = 1; i < 6; i++)
		CHECK(sendto(k, junk[i], 16, 0, (struct sockaddr *)&sa, sizeof(sa)) == 16,
		      "hostile datagram %d", i);
	usleep(300000);
	errno = 0;
	CHECK(rrecv(a, in, sizeof(in), MSG_DONTWAIT) == -1 && errno == EAGAIN,
	      "nothing of them arrives (errno %d)", errno);
	close(k);
	fill(out, 13, 33);
	CHECK(rsendto(b, out, 33, 0, (struct sockaddr *)&sa, sizeof(sa)) == 33, "rsendto 33");
	CHECK(readable(a), "a still receives");
	CHECK(rrecv(a, in, sizeof(in), 0) == 33 && matches(in, 13, 33), "whole");

	step = "close";
	CHECK(rclose(a) == 0 && rclose(b) == 0, "rclose: errno %d", errno);
	errno = 0;
	CHECK(rclose(a) == -1 && errno == EBADF, "rclose twice: EBADF (errno %d)", errno);
	errno = 0;
	CHECK(rsendto(b, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) == -1 && errno == EBADF,
	      "rsendto after rclose: EBADF (errno %d)", errno);

	printf("%d failures\n", failures);
	return failures != 0;
}
