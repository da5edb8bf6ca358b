/* ibv_get_async_event(3) lets several threads wait at once ("only one thread will receive"
 * each event); a program closing its context while its event threads are busy taking
 * events (LAST_WQE_REACHED of QPs on an SRQ moved to the error state) must get every one of
 * them back (-1, as the drop-in's close of a context with waiters) and the close must
 * return. A waiter that was emptying the fd just as the close woke them once took the
 * wake-up from the others, which then slept forever. Rounds of 8 waiters and 60 QPs, with
 * one thread keeping a core busy so that the waiters are preempted at any point. A 10 s
 * watchdog per close. Prints "N failures". */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common.h"

#define ROUNDS 120
#define WAITERS 8
#define QPS 60

static atomic_int go, round_no;

static void watchdog(int sig)
{
	(void)sig;
	char msg[128];
	int n = snprintf(msg, sizeof msg,
			 "FAIL round %d: ibv_close_device has not returned after 10 s\n1 failures\n",
			 atomic_load(&round_no));
	if (write(1, msg, n) < 0)
		_exit(2);
	_exit(1);
}

static void *waiter(void *c)
{
	while (!atomic_load(&go))
		;
	struct ibv_async_event ev;
	while (ibv_get_async_event(c, &ev) == 0)
		ibv_ack_async_event(&ev);
	return NULL;
}

static void *keep_a_core_busy(void *x)
{
	(void)x;
	for (;;) {
		volatile long i = 0;
		while (i < 100000)
			i++;
	}
	return NULL;
}

int main(void)
{
	signal(SIGALRM, watchdog);
	pthread_t busy;
	pthread_create(&busy, NULL, keep_a_core_busy, NULL);
	srand(7);
	for (int r = 0; r < ROUNDS; r++) {
		atomic_store(&round_no, r);
		struct ibv_context *ctx = open_first();
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
		struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
		struct ibv_srq *srq = cq ? ibv_create_srq(pd, &sia) : NULL;
		union ibv_gid gid;
		CHECK(srq && ibv_query_gid(ctx, 1, 0, &gid) == 0, "setup: errno %d", errno);
		if (!srq)
			break;
		for (int q = 0; q < QPS; q++) {
			struct ibv_qp *qp = rc_qp(pd, cq, srq);
			CHECK(qp && connect_rc(qp, qp->qp_num, gid, 0) == 0, "QP %d: errno %d", q,
			      errno);
			struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
			if (qp)
				ibv_modify_qp(qp, &err, IBV_QP_STATE);
		}
		atomic_store(&go, 0);
		pthread_t t[WAITERS];
		for (int i = 0; i < WAITERS; i++)
			pthread_create(&t[i], NULL, waiter, ctx);
		atomic_store(&go, 1);
		usleep(rand() % 2000);
		alarm(10);
		ibv_close_device(ctx);
		alarm(0);
		for (int i = 0; i < WAITERS; i++)
			pthread_join(t[i], NULL);
	}
	printf("%d rounds of %d waiters: every close returned\n", ROUNDS, WAITERS);
	printf("%d failures\n", failures);
	return failures != 0;
}
