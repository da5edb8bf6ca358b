/* An ordinary TCP program that waits with select(2), as iperf3 and ncat do: `server ADDR
 * PORT` selects on its listener until a connection waits, lets it settle, accepts it, then
 * selects on the accepted socket for every read until the client's 64 KiB and end of
 * stream came, checking the bytes; `client ADDR PORT` sends them and closes. Under
 * librspreload (rsocket(7)) select() becomes rpoll() and its results are mapped back to
 * the program's fds: the accepted fd must be the one marked readable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/select.h>
#include <sys/socket.h>

#define BYTES 65536

/* Waits (5 s at most) until select() marks `fd` readable; 0 when it did. */
static int select_readable(int fd)
{
	fd_set r;
	FD_ZERO(&r);
	FD_SET(fd, &r);
	struct timeval tv = {5, 0};
	int n = select(fd + 1, &r, NULL, NULL, &tv);
	if (n < 0) {
		perror("select");
		return -1;
	}
	if (n == 0 || !FD_ISSET(fd, &r)) {
		fprintf(stderr, "select: fd %d not marked readable within 5 s (returned %d)\n", fd, n);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	static unsigned char buf[BYTES];
	if (!strcmp(argv[1], "server")) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) {
			perror("bind/listen");
			return 1;
		}
		if (select_readable(l))
			return 1;
		/* The connection is established before accept() takes it. */
		usleep(200000);
		int s = accept(l, NULL, NULL);
		if (s < 0) {
			perror("accept");
			return 1;
		}
		size_t got = 0;
		for (int rounds = 0; rounds < 100000; rounds++) {
			if (select_readable(s))
				return 1;
			ssize_t n = read(s, buf + (got < BYTES ? got : 0), got < BYTES ? BYTES - got : 1);
			if (n < 0 && errno != EAGAIN) {
				perror("read");
				return 1;
			}
			if (n == 0)
				break;
			if (n > 0)
				got += n;
		}
		for (size_t i = 0; i < BYTES; i++) {
			if (buf[i] != (unsigned char)(i * 7)) {
				fprintf(stderr, "byte %zu differs\n", i);
				return 1;
			}
		}
		printf("server got %zu bytes through select\n", got);
		close(s);
		close(l);
		return got == BYTES ? 0 : 1;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)&a, sizeof a)) {
		perror("connect");
		return 1;
	}
	for (size_t i = 0; i < BYTES; i++)
		buf[i] = (unsigned char)(i * 7);
	size_t sent = 0;
	while (sent < BYTES) {
		ssize_t n = write(s, buf + sent, BYTES - sent);
		if (n <= 0) {
			perror("write");
			return 1;
		}
		sent += n;
	}
	close(s);
	printf("client sent %zu\n", sent);
	return 0;
}
