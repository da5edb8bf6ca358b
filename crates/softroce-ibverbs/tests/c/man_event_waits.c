/* Blocking event waits as the kernel's event files make them (ibv_get_cq_event(3),
 * ibv_get_async_event(3): rdma-core read(2)s the channel fd and the async fd).
 *
 * A signal whose handler was installed without SA_RESTART ends both waits: -1 with errno
 * EINTR, as read(2) on the kernel's file does, so a program's "stop on SIGINT" loop can stop.
 * With SA_RESTART the kernel restarts the read: the handler runs, the waits go on, and the
 * CQ event still arrives when a completion comes.
 *
 * ibv_close_device(3) on a context with a thread blocked in ibv_get_async_event ends that
 * wait (-1) and returns, every time, even while another context of the same device destroys
 * CQs all along (each destroy drops its unread events from every context).
 * Prints "N failures". */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static volatile sig_atomic_t handled;
static void on_signal(int sig)
{
	(void)sig;
	handled++;
}

struct waits {
	struct ibv_context *ctx;
	struct ibv_comp_channel *channel;
	volatile int cq_ret, cq_errno, async_ret, async_errno;
	volatile int cq_done, async_done;
};

static void *wait_cq(void *arg)
{
	struct waits *w = arg;
	struct ibv_cq *cq;
	void *cq_context;
	int r = ibv_get_cq_event(w->channel, &cq, &cq_context);
	w->cq_errno = errno;
	if (r == 0)
		ibv_ack_cq_events(cq, 1);
	w->cq_ret = r;
	__atomic_store_n(&w->cq_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *wait_async(void *arg)
{
	struct waits *w = arg;
	struct ibv_async_event ev;
	int r = ibv_get_async_event(w->ctx, &ev);
	w->async_errno = errno;
	if (r == 0)
		ibv_ack_async_event(&ev);
	w->async_ret = r;
	__atomic_store_n(&w->async_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static int done_within(volatile int *flag, long ms)
{
	long end = now_ms() + ms;
	while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST) && now_ms() < end)
		usleep(1000);
	return __atomic_load_n(flag, __ATOMIC_SEQ_CST);
}

/* Block a thread in each wait, signal both, and report what became of them. */
static void signal_both_waits(int restart)
{
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = restart ? SA_RESTART : 0};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	handled = 0;

	struct waits w = {.ctx = open_first(), .cq_ret = 99, .async_ret = 99};
	struct ibv_pd *pd = ibv_alloc_pd(w.ctx);
	w.channel = ibv_create_comp_channel(w.ctx);
	struct ibv_cq *cq = ibv_create_cq(w.ctx, 16, NULL, w.channel, 0);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	static char buf[8];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !w.channel || !cq || !a || !b || !mr || connect_pair(w.ctx, a, b) ||
	    ibv_req_notify_cq(cq, 0)) {
		CHECK(0, "setup (SA_RESTART %d): errno %d", restart, errno);
		return;
	}
	pthread_t tcq, tasync;
	pthread_create(&tcq, NULL, wait_cq, &w);
	pthread_create(&tasync, NULL, wait_async, &w);
	usleep(200 * 1000);
	CHECK(!w.cq_done && !w.async_done, "both wait while nothing happens");
	pthread_kill(tcq, SIGUSR1);
	pthread_kill(tasync, SIGUSR1);

	if (!restart) {
		CHECK(done_within(&w.cq_done, 5000) && w.cq_ret == -1 && w.cq_errno == EINTR,
		      "ibv_get_cq_event ends with EINTR (ret %d, %s)", w.cq_ret,
		      strerror(w.cq_errno));
		CHECK(done_within(&w.async_done, 5000) && w.async_ret == -1 &&
			      w.async_errno == EINTR,
		      "ibv_get_async_event ends with EINTR (ret %d, %s)", w.async_ret,
		      strerror(w.async_errno));
	} else {
		CHECK(!done_within(&w.cq_done, 300) && !w.async_done,
		      "with SA_RESTART both waits go on after the handler (cq %d, async %d)",
		      w.cq_done, w.async_done);
		/* A completion: the restarted CQ wait gets its event. */
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = (uintptr_t)buf, .rkey = mr->rkey}};
		struct ibv_send_wr *bad;
		CHECK(ibv_post_send(a, &wr, &bad) == 0, "post");
		CHECK(done_within(&w.cq_done, 5000) && w.cq_ret == 0,
		      "the restarted ibv_get_cq_event returns the CQ's event (ret %d)", w.cq_ret);
		struct ibv_wc wc;
		CHECK(poll_n(cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS, "the completion");
	}
	CHECK(handled == 2, "the handler ran for both signals (%d)", (int)handled);
	pthread_join(tcq, NULL);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(w.channel);
	ibv_dealloc_pd(pd);
	/* The async waiter (still blocked with SA_RESTART) leaves when the context closes. */
	CHECK(ibv_close_device(w.ctx) == 0, "close");
	pthread_join(tasync, NULL);
	CHECK(w.async_done, "the async waiter left at the close");
}

static volatile int churn_stop;
static void *churn_cqs(void *arg)
{
	struct ibv_context *other = arg;
	for (long i = 0; i < 50 * 1000 * 1000 && !churn_stop; i++) {
		struct ibv_cq *cq = ibv_create_cq(other, 4, NULL, NULL, 0);
		if (cq)
			ibv_destroy_cq(cq);
	}
	return NULL;
}

static volatile int watched_round = -1;
static void *watchdog(void *arg)
{
	(void)arg;
	long end = now_ms() + 30000;
	while (now_ms() < end) {
		if (churn_stop)
			return NULL;
		usleep(10000);
	}
	printf("ibv_close_device hung in round %d\n", watched_round);
	fflush(stdout);
	_exit(1);
}

static void close_with_a_waiter_while_another_context_destroys(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		CHECK(0, "no device");
		return;
	}
	struct ibv_context *other = ibv_open_device(list[0]);
	pthread_t churn, dog;
	pthread_create(&churn, NULL, churn_cqs, other);
	pthread_create(&dog, NULL, watchdog, NULL);
	int closed = 0, left = 0;
	for (int round = 0; round < 300; round++) {
		watched_round = round;
		struct waits w = {.ctx = ibv_open_device(list[0]), .async_ret = 99};
		if (!w.ctx)
			break;
		pthread_t t;
		pthread_create(&t, NULL, wait_async, &w);
		usleep(200);
		closed += ibv_close_device(w.ctx) == 0;
		pthread_join(t, NULL);
		left += w.async_ret == -1;
	}
	churn_stop = 1;
	pthread_join(churn, NULL);
	pthread_join(dog, NULL);
	CHECK(closed == 300 && left == 300,
	      "every close returned (%d of 300) and its waiter left with -1 (%d)", closed, left);
	ibv_close_device(other);
	ibv_free_device_list(list);
}

int main(void)
{
	signal_both_waits(0);
	signal_both_waits(1);
	close_with_a_waiter_while_another_context_destroys();
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
