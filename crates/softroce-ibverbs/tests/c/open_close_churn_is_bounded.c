/* A program (or a test suite in one process) that opens and closes the device over and
 * over from several threads holds only what its open contexts need: every context's
 * threads and fds go with its ibv_close_device. Before, each close left its device's
 * async-event thread asleep for up to half a second, and a loop of opens piled up
 * hundreds of threads and fds (EMFILE under a modest `ulimit -n`). Four threads open and
 * close for 2 s while the main thread samples the process's threads and fds.
 * Prints "N failures". */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common.h"

#define THREADS 4
/* Each open context has its engine and async-event threads and a few fds. */
#define MAX_THREADS (1 + 1 + THREADS * 4)
#define MAX_FDS 64

static atomic_int stop;
static atomic_long opens, open_failures;

static void *churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000 && !atomic_load(&stop); i++) {
		struct ibv_device **list = ibv_get_device_list(NULL);
		struct ibv_context *c = list ? ibv_open_device(list[0]) : NULL;
		if (c) {
			opens++;
			ibv_close_device(c);
		} else {
			open_failures++;
		}
		if (list)
			ibv_free_device_list(list);
	}
	return NULL;
}

static int count_threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n - 3; /* ".", ".." and the directory's own fd */
}

int main(void)
{
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	int peak_threads = 0, peak_fds = 0;
	long until = now_ms() + 2000;
	while (now_ms() < until) {
		int threads = count_threads(), fds = count_fds();
		peak_threads = threads > peak_threads ? threads : peak_threads;
		peak_fds = fds > peak_fds ? fds : peak_fds;
		usleep(1000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK(open_failures == 0 && opens > 0, "%ld opens, %ld failed", (long)opens,
	      (long)open_failures);
	CHECK(peak_threads <= MAX_THREADS, "%d threads at the peak (at most %d expected)",
	      peak_threads, MAX_THREADS);
	CHECK(peak_fds <= MAX_FDS, "%d fds at the peak (at most %d expected)", peak_fds, MAX_FDS);
	printf("%ld opens and closes; peak %d threads, %d fds\n", (long)opens, peak_threads,
	       peak_fds);
	printf("%d failures\n", failures);
	return failures != 0;
}
