/* raccept(3) (rsocket(7): "accept" as accept(2)) never hangs on a requester that went away
 * mid-handshake: a child process (argv[2]'s device) asks the server (argv[1]'s) for a
 * connection and dies before it is accepted; the server's non-blocking raccept then answers
 * within a few seconds (EAGAIN: nothing else to accept), and the listener still serves the
 * next, live, client. The process forks before either side touches the library.
 * Prints "N failures". */
#include <arpa/inet.h>
#include <netinet/in.h>
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
	alarm(50);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = address(server_ip, PORT);
	CHECK(l >= 0 && rbind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && rlisten(l, 4) == 0,
	      "listening: errno %d", errno);
	struct pollfd p = {.fd = l, .events = POLLIN};
	CHECK(rpoll(&p, 1, 10000) == 1, "the request arrives");
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child, "the requester is gone");
	rfcntl(l, F_SETFL, rfcntl(l, F_GETFL, 0) | O_NONBLOCK);
	long t0 = now_ms();
	errno = 0;
	int s = raccept(l, NULL, NULL);
	long took = now_ms() - t0;
	CHECK(s == -1 && errno == EAGAIN && took < 5000,
	      "raccept of the dead requester's request: rc %d errno %d after %ld ms", s, errno,
	      took);
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
	printf("%d failures\n", failures);
	return failures != 0;
}
