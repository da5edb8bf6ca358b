/* A library that calls exit() from a signal handler (libinfinipath, which libfabric loads,
 * does so on SIGTERM) may interrupt a verb that holds the device: the drop-in's exit-time
 * work (SOFTROCE_COUNTERS=stderr) must not wait for it forever, or the process never ends.
 * A timer signal exits while the program busy-polls an empty CQ. Prints "0 failures" from
 * the handler. */
#include "common.h"
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

static void exit_now(int sig)
{
	(void)sig;
	static const char done[] = "0 failures\n";
	/* write(2) is async-signal-safe; exit(3) runs the atexit handlers, as the library's
	 * handler does. */
	if (write(STDOUT_FILENO, done, sizeof(done) - 1) < 0)
		_exit(3);
	exit(0);
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq != NULL, "ibv_create_cq: errno %d", errno);
	if (!cq)
		return 1;
	signal(SIGALRM, exit_now);
	struct itimerval in_20ms = {.it_value = {.tv_usec = 20000}};
	setitimer(ITIMER_REAL, &in_20ms, NULL);
	struct ibv_wc wc;
	time_t give_up = time(NULL) + 5;
	while (time(NULL) < give_up)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "an empty CQ");
	CHECK(0, "the timer never fired");
	printf("%d failures\n", failures);
	return 1;
}
