/* A multithreaded program forks while its other threads are inside verbs (an MPI launcher,
 * a test harness, Python's multiprocessing): one thread creates and destroys CQs, another
 * opens and closes the device, a third moves RC SENDs; the main thread forks children that
 * each open the device and move an RC SEND of their own. A lock one of those threads held
 * at the fork must not stay held in the child (the child has only the forking thread):
 * every child finishes within 10 s, and the parent's traffic goes on unharmed.
 * Prints "N failures". */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define CHILDREN 40

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static atomic_int stop;
static atomic_long sends, send_errors;

static void *churn_cqs(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000000 && !atomic_load(&stop); i++) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		if (cq)
			ibv_destroy_cq(cq);
	}
	return NULL;
}

static void *churn_contexts(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000 && !atomic_load(&stop); i++) {
		struct ibv_device **list = ibv_get_device_list(NULL);
		struct ibv_context *c = list ? ibv_open_device(list[0]) : NULL;
		if (c)
			ibv_close_device(c);
		if (list)
			ibv_free_device_list(list);
	}
	return NULL;
}

/* One RC SEND between two QPs of `c`, checked byte for byte: 1 when it arrived. */
static int one_send(struct ibv_context *c, struct ibv_pd *p, const char *text)
{
	static char buf[2][64];
	struct ibv_cq *cq = ibv_create_cq(c, 8, NULL, NULL, 0);
	struct ibv_mr *mr = cq ? ibv_reg_mr(p, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp *a = mr ? rc_qp(p, cq, NULL) : NULL, *b = a ? rc_qp(p, cq, NULL) : NULL;
	int ok = b && connect_pair(c, a, b) == 0;
	if (ok) {
		memset(buf, 0, sizeof(buf));
		snprintf(buf[0], sizeof(buf[0]), "%s", text);
		struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rb;
		struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
				   *sb;
		struct ibv_wc wc[2];
		ok = ibv_post_recv(b, &rw, &rb) == 0 && ibv_post_send(a, &sw, &sb) == 0 &&
		     poll_n(cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
		     wc[1].status == IBV_WC_SUCCESS && strcmp(buf[0], buf[1]) == 0;
	}
	if (b)
		ibv_destroy_qp(b);
	if (a)
		ibv_destroy_qp(a);
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	return ok;
}

static void *traffic(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000 && !atomic_load(&stop); i++) {
		if (one_send(ctx, pd, "parent"))
			sends++;
		else
			send_errors++;
	}
	return NULL;
}

/* The child: its own device, one SEND; exit status 0 when it arrived. */
static void child(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *c = list ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *p = c ? ibv_alloc_pd(c) : NULL;
	int ok = p && one_send(c, p, "child");
	_exit(ok ? 0 : 1);
}

int main(void)
{
	ctx = open_first();
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd: errno %d", errno);
	if (!pd)
		return 1;
	pthread_t threads[3];
	pthread_create(&threads[0], NULL, churn_cqs, NULL);
	pthread_create(&threads[1], NULL, churn_contexts, NULL);
	pthread_create(&threads[2], NULL, traffic, NULL);
	int hung = 0, failed = 0;
	for (int i = 0; i < CHILDREN; i++) {
		usleep(5000);
		pid_t pid = fork();
		if (pid == 0)
			child();
		CHECK(pid > 0, "fork: errno %d", errno);
		if (pid < 0)
			break;
		int status = 0;
		long until = now_ms() + 10000;
		pid_t done = 0;
		while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < until)
			usleep(2000);
		if (done == 0) {
			hung++;
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			failed++;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(threads[i], NULL);
	CHECK(hung == 0, "%d of %d children did not finish within 10 s", hung, CHILDREN);
	CHECK(failed == 0, "%d of %d children failed their SEND", failed, CHILDREN);
	CHECK(send_errors == 0 && sends > 0, "parent: %ld SENDs, %ld failed", (long)sends,
	      (long)send_errors);
	printf("%d children, parent %ld SENDs\n", CHILDREN, (long)sends);
	printf("%d failures\n", failures);
	return failures != 0;
}
