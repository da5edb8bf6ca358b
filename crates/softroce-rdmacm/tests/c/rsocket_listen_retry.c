/* rsocket(7) rlisten, as listen(2) when the process may not start another thread: the
 * listener's accepting thread cannot start, so rlisten fails with EAGAIN and raccept says
 * EAGAIN at once rather than wait for connections nothing accepts; once threads may start
 * again, rlisten succeeds and a client's connect is accepted. The program runs as nobody
 * with RLIMIT_NPROC at its own thread count (a limit root is exempt from). A server on
 * softroce0 (argv[1]), a client thread on softroce1 (argv[2]). Prints "N failures". */
#include <pthread.h>
#include <rdma/rsocket.h>
#include <string.h>
#include <unistd.h>

#include "cm_common.h"

#define PORT 7890 /* and PORT + 1 */

static const char *server_ip, *client_ip;

static void *client(void *arg)
{
	(void)arg;
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in src = ipv4(client_ip, 0), dst = ipv4(server_ip, PORT);
	if (c < 0 || rbind(c, (struct sockaddr *)&src, sizeof(src)) ||
	    rconnect(c, (struct sockaddr *)&dst, sizeof(dst))) {
		fprintf(stderr, "client connect: errno %d\n", errno);
		return (void *)1;
	}
	ssize_t sent = rsend(c, "hello", 5, 0);
	char ack;
	ssize_t got = rrecv(c, &ack, 1, 0);
	rclose(c);
	return (void *)(intptr_t)(sent != 5 || got != 1);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SERVER_IP CLIENT_IP\n", argv[0]);
		return 2;
	}
	server_ip = argv[1];
	client_ip = argv[2];
	watchdog(30);
	step = "becoming nobody";
	CHECK(setgid(65534) == 0 && setuid(65534) == 0, "setuid(nobody): errno %d", errno);

	/* Another listener on the device first: the device's own threads run, so the next
	 * rlisten needs only its accepting thread. */
	step = "a first listener";
	int first = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in first_addr = ipv4(server_ip, PORT + 1);
	CHECK(first >= 0 && rbind(first, (struct sockaddr *)&first_addr, sizeof(first_addr)) == 0 &&
		      rlisten(first, 4) == 0,
	      "the first listener: errno %d", errno);

	step = "a bound listener";
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = ipv4(server_ip, PORT);
	CHECK(s >= 0 && rbind(s, (struct sockaddr *)&addr, sizeof(addr)) == 0,
	      "rsocket/rbind: errno %d", errno);

	step = "no thread may start";
	struct rlimit saved = no_more_threads();
	errno = 0;
	CHECK(rlisten(s, 4) == -1 && errno == EAGAIN,
	      "rlisten without its accepting thread fails with EAGAIN (errno %d)", errno);
	errno = 0;
	CHECK(raccept(s, NULL, NULL) == -1 && errno == EAGAIN,
	      "a blocking raccept with nothing to accept connections says EAGAIN (errno %d)",
	      errno);

	step = "threads may start again";
	CHECK(set_thread_limit(&saved) == 0, "the thread limit back: errno %d", errno);
	CHECK(rlisten(s, 4) == 0, "rlisten again starts the accepting thread: errno %d", errno);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, client, NULL) == 0, "pthread_create");
	int a = raccept(s, NULL, NULL);
	CHECK(a >= 0, "raccept takes the client's connection: errno %d", errno);
	char buf[8] = {0};
	CHECK(a >= 0 && rrecv(a, buf, 5, MSG_WAITALL) == 5 && memcmp(buf, "hello", 5) == 0,
	      "the client's bytes arrive");
	CHECK(a >= 0 && rsend(a, "k", 1, 0) == 1, "the answer goes back");
	void *client_result = (void *)1;
	pthread_join(t, &client_result);
	CHECK(client_result == NULL, "the client connected, sent and got the answer");
	if (a >= 0)
		rclose(a);
	rclose(s);
	rclose(first);
	printf("%d failures\n", failures);
	return failures != 0;
}
