/* A listener (rsocket(7): "accept" as accept(2)) accepts in the background, as a TCP
 * listener does and rsockets' service thread does: a child process (argv[2]'s device) asks
 * the server (argv[1]'s) for a connection without ever calling a verb again and dies; the
 * connection was established without the server's raccept, so rpoll finds it ready, a
 * non-blocking raccept takes it at once, and reading it ends (the peer is gone). The
 * listener still serves the next, live, client.
 * Keepalive (SO_KEEPALIVE with TCP_KEEPIDLE, as rsockets' service thread sends its probes):
 * a second child connects and is killed while the connection is idle; the server, blocked in
 * rrecv, learns of it from its probe running out of retries instead of waiting forever.
 * The process forks before either side touches the library. Prints "N failures". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define PORT 7890

static const char *server_ip, *client_ip;

static struct sockaddr_in address(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* The child: asks for a connection, then dies without a word. */
static void requester_that_dies(void)
{
	usleep(300000);
	int c = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in me = address(client_ip, 0), srv = address(server_ip, PORT);
	if (c >= 0 && rbind(c, (struct sockaddr *)&me, sizeof(me)) == 0)
		rconnect(c, (struct sockaddr *)&srv, sizeof(srv));
	usleep(200000);
	_exit(0);
}

/* The second child: on a device of its own (an address 100 past the client's, so no
 * process shares it and its death says nothing by itself), connects (retrying until the
 * server listens), then waits to be killed. */
static void connected_then_killed(void)
{
	struct in_addr own;
	inet_pton(AF_INET, client_ip, &own);
	own.s_addr = htonl(ntohl(own.s_addr) + 100);
	char own_ip[INET_ADDRSTRLEN], devices[64];
	inet_ntop(AF_INET, &own, own_ip, sizeof(own_ip));
	snprintf(devices, sizeof(devices), "softroce9=%s", own_ip);
	setenv("SOFTROCE_DEVICES", devices, 1);
	struct sockaddr_in me = address(own_ip, 0), srv = address(server_ip, PORT + 1);
	for (int i = 0; i < 100; i++) {
		usleep(100000);
		int c = rsocket(AF_INET, SOCK_STREAM, 0);
		if (c >= 0 && rbind(c, (struct sockaddr *)&me, sizeof(me)) == 0 &&
		    rconnect(c, (struct sockaddr *)&srv, sizeof(srv)) == 0) {
			rsend(c, "up", 2, 0);
			for (int j = 0; j < 600; j++)
				usleep(100000);
			_exit(0);
		}
		if (c >= 0)
			rclose(c);
	}
	_exit(1);
}

static void *live_client(void *arg)
{
	(void)arg;
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in me = address(server_ip, 0), srv = address(server_ip, PORT);
	long ok = c >= 0 && rbind(c, (struct sockaddr *)&me, sizeof(me)) == 0 &&
		  rconnect(c, (struct sockaddr *)&srv, sizeof(srv)) == 0 &&
		  rsend(c, "live", 4, 0) == 4;
	usleep(300000);
	if (c >= 0)
		rclose(c);
	return (void *)ok;
}

int main(int argc, char **argv)
{
	server_ip = argc > 2 ? argv[1] : "127.0.0.1";
	client_ip = argc > 2 ? argv[2] : "127.0.0.2";
	pid_t child = fork();
	if (child == 0)
		requester_that_dies();
	pid_t idle_peer = fork();
	if (idle_peer == 0)
		connected_then_killed();
	alarm(50);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = address(server_ip, PORT);
	CHECK(l >= 0 && rbind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && rlisten(l, 4) == 0,
	      "listening: errno %d", errno);
	struct pollfd p = {.fd = l, .events = POLLIN};
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN),
	      "the connection is ready before any raccept: revents %#x", p.revents);
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child, "the requester is gone");
	rfcntl(l, F_SETFL, rfcntl(l, F_GETFL, 0) | O_NONBLOCK);
	long t0 = now_ms();
	errno = 0;
	int s = raccept(l, NULL, NULL);
	long took = now_ms() - t0;
	CHECK(s >= 0 && took < 1000, "raccept takes the finished connection at once: rc %d errno %d after %ld ms",
	      s, errno, took);
	if (s >= 0) {
		char none[4];
		t0 = now_ms();
		ssize_t got_dead = rrecv(s, none, sizeof(none), 0);
		took = now_ms() - t0;
		CHECK(got_dead <= 0 && took < 10000,
		      "reading the dead requester's connection ends: %zd after %ld ms", got_dead, took);
		rclose(s);
	}
	errno = 0;
	CHECK(raccept(l, NULL, NULL) == -1 && errno == EAGAIN,
	      "nothing else waits: EAGAIN (errno %d)", errno);
	/* The listener is not stuck: a live client is accepted and heard. */
	rfcntl(l, F_SETFL, rfcntl(l, F_GETFL, 0) & ~O_NONBLOCK);
	pthread_t t;
	pthread_create(&t, NULL, live_client, NULL);
	s = raccept(l, NULL, NULL);
	char got[4] = {0};
	CHECK(s >= 0 && rrecv(s, got, 4, MSG_WAITALL) == 4 && !memcmp(got, "live", 4),
	      "the next client is accepted and heard: errno %d", errno);
	void *ok = NULL;
	pthread_join(t, &ok);
	CHECK(ok != NULL, "the live client connected and sent");
	if (s >= 0)
		rclose(s);
	rclose(l);

	int l2 = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa2 = address(server_ip, PORT + 1);
	CHECK(l2 >= 0 && rbind(l2, (struct sockaddr *)&sa2, sizeof(sa2)) == 0 && rlisten(l2, 4) == 0,
	      "listening again: errno %d", errno);
	int k = raccept(l2, NULL, NULL);
	char up[2];
	CHECK(k >= 0 && rrecv(k, up, 2, MSG_WAITALL) == 2, "the idle peer connected");
	int on = 1, idle = 1;
	CHECK(rsetsockopt(k, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) == 0 &&
		      rsetsockopt(k, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) == 0,
	      "SO_KEEPALIVE, TCP_KEEPIDLE 1 s");
	kill(idle_peer, SIGKILL);
	waitpid(idle_peer, &status, 0);
	t0 = now_ms();
	char more[8];
	ssize_t got_after = rrecv(k, more, sizeof(more), 0);
	took = now_ms() - t0;
	CHECK(got_after <= 0 && took < 30000,
	      "rrecv on the idle connection ends once a probe finds the peer dead: %zd after %ld ms",
	      got_after, took);
	rclose(k);
	rclose(l2);
	printf("%d failures\n", failures);
	return failures != 0;
}
