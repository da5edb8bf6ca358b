/* ibv_get_async_event(3): "waits for the next async event of the RDMA device": each context
 * gets the device's events in the order they were raised, as from the kernel's event file.
 * The fault plan (SOFTROCE_FAULTS, from c_contract.rs) takes the port down and up FLAPS
 * times; the device raises an event only when the state changes, so each context must see
 * PORT_ERR and PORT_ACTIVE strictly alternating. Two contexts of one device, each read by a
 * thread spinning on its non-blocking async fd: every such thread routes the device's events
 * to the contexts, and so does the device's own router (they raced: an event taken first
 * could be queued second). Prints "N failures". */
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"

#define FLAPS 120
#define CONTEXTS 2

static struct ibv_context *contexts[CONTEXTS];

static double seconds_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Reads context `arg`'s port events until it has 2 * FLAPS (at most 10 s); how many came
 * out of order (the same kind twice in a row). */
static void *consume(void *arg)
{
	struct ibv_context *ctx = contexts[(intptr_t)arg];
	int last = -1, seen = 0, repeats = 0;
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	double start = seconds_now();
	while (seen < 2 * FLAPS && seconds_now() - start < 10) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			continue; /* EAGAIN: nothing yet */
		int type = ev.event_type;
		ibv_ack_async_event(&ev);
		if (type != IBV_EVENT_PORT_ERR && type != IBV_EVENT_PORT_ACTIVE)
			continue;
		if (type == last)
			repeats++;
		last = type;
		seen++;
	}
	CHECK(seen == 2 * FLAPS, "context %d saw %d of the %d port events",
	      (int)(intptr_t)arg, seen, 2 * FLAPS);
	CHECK(last == IBV_EVENT_PORT_ACTIVE, "context %d's last event is PORT_ACTIVE",
	      (int)(intptr_t)arg);
	return (void *)(intptr_t)repeats;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		return 2;
	}
	for (int i = 0; i < CONTEXTS; i++) {
		contexts[i] = ibv_open_device(list[0]);
		if (!contexts[i]) {
			fprintf(stderr, "open: errno %d\n", errno);
			return 2;
		}
	}
	pthread_t threads[CONTEXTS];
	for (intptr_t i = 0; i < CONTEXTS; i++)
		pthread_create(&threads[i], NULL, consume, (void *)i);
	for (int i = 0; i < CONTEXTS; i++) {
		void *repeats = NULL;
		pthread_join(threads[i], &repeats);
		CHECK(repeats == NULL, "context %d got %d events out of order (the same twice in a row)",
		      i, (int)(intptr_t)repeats);
	}
	for (int i = 0; i < CONTEXTS; i++)
		ibv_close_device(contexts[i]);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures != 0;
}
