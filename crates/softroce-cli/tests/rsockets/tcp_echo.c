/* An ordinary TCP echo program (socket, bind, listen, accept, connect, read/write, poll,
 * send/recv with MSG_DONTWAIT), knowing nothing of RDMA: `server ADDR PORT` echoes what
 * one client sends until it closes; `client ADDR PORT` sends 1 MiB while reading the echo
 * back (poll-driven) and says whether every byte came back. Under librspreload (rsocket(7))
 * its sockets are rsockets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
	int port = atoi(argv[3]);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	static char buf[1 << 20];
	if (!strcmp(argv[1], "server")) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) { perror("bind/listen"); return 1; }
		int s = accept(l, NULL, NULL);
		if (s < 0) { perror("accept"); return 1; }
		size_t total = 0; ssize_t n;
		while ((n = read(s, buf, sizeof buf)) > 0) { if (write(s, buf, n) != n) { perror("write"); return 1; } total += n; }
		printf("server echoed %zu\n", total);
		close(s); close(l); return 0;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
	for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 13);
	static char back[1 << 20];
	size_t sent = 0, got = 0;
	while (got < sizeof buf) {
		struct pollfd p = {.fd = s, .events = POLLIN | (sent < sizeof buf ? POLLOUT : 0)};
		if (poll(&p, 1, 5000) <= 0) { fprintf(stderr, "poll timeout sent %zu got %zu\n", sent, got); return 1; }
		if ((p.revents & POLLOUT) && sent < sizeof buf) { ssize_t n = send(s, buf + sent, sizeof buf - sent > 65536 ? 65536 : sizeof buf - sent, MSG_DONTWAIT); if (n > 0) sent += n; }
		if (p.revents & POLLIN) { ssize_t n = recv(s, back + got, sizeof back - got, MSG_DONTWAIT); if (n > 0) got += n; else if (n == 0) break; }
	}
	printf("client: %s (%zu)\n", got == sizeof buf && !memcmp(buf, back, got) ? "echo matches" : "MISMATCH", got);
	close(s); return 0;
}
