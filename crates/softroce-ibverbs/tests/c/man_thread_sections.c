/* The man pages' promises to threaded programs: ibv_wr_post(3) CONCURRENCY, "ibv_wr_start()
 * and ibv_wr_complete()/abort() form a per-QP critical section where no other threads can
 * enter" (two threads build RDMA WRITEs on one QP: each completes once and lands in its own
 * slot); ibv_start_poll ... ibv_end_poll exclusive on a CQ not created single-threaded (two
 * pollers of one extended CQ see each completion once); a CQ destroyed with a completion
 * event queued and unread takes it off its channel (the kernel's ib_uverbs_release_ucq: the
 * fd is no longer readable); CQs created and destroyed on one channel from four threads keep
 * its refcnt; a context closed while a thread waits in ibv_get_async_event wakes it (-1,
 * EIO) before it goes. Prints "N failures". */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common.h"

#define WRITERS 2
#define PER_WRITER 1000
#define WRITES (WRITERS * PER_WRITER)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static long deadline;

/* ---- ibv_wr_start .. ibv_wr_complete ------------------------------------------------ */

static struct ibv_qp_ex *qx;
static struct ibv_mr *slots_mr;
static uint64_t *slots;
static atomic_int in_flight, completed, complete_errors, seen[WRITES];

static void *build_writes(void *arg)
{
	long first = (long)arg * PER_WRITER;
	for (long i = 0; i < PER_WRITER; i++) {
		while (atomic_load(&in_flight) >= 24)
			if (now_ms() > deadline)
				return NULL;
		atomic_fetch_add(&in_flight, 1);
		uint64_t id = first + i;
		ibv_wr_start(qx);
		if (i % 8 == 0)
			usleep(20); /* inside the section: the other thread must wait */
		qx->wr_id = id;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, slots_mr->rkey, (uintptr_t)&slots[id]);
		ibv_wr_set_inline_data(qx, &id, 8);
		if (ibv_wr_complete(qx)) {
			atomic_fetch_add(&complete_errors, 1);
			atomic_fetch_sub(&in_flight, 1);
		}
	}
	return NULL;
}

static void *count_completions(void *cqv)
{
	struct ibv_wc wc[8];
	while (atomic_load(&completed) + atomic_load(&complete_errors) < WRITES &&
	       now_ms() < deadline) {
		int n = ibv_poll_cq(cqv, 8, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id < WRITES && wc[i].status == IBV_WC_SUCCESS)
				atomic_fetch_add(&seen[wc[i].wr_id], 1);
			atomic_fetch_add(&completed, 1);
			atomic_fetch_sub(&in_flight, 1);
		}
	}
	return NULL;
}

static void wr_api_sections(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 255, NULL, NULL, 0);
	slots = calloc(WRITES, 8);
	for (int i = 0; i < WRITES; i++)
		slots[i] = ~0ull;
	slots_mr = ibv_reg_mr(pd, slots, WRITES * 8,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp_init_attr_ex xa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 32, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1,
			.max_inline_data = 16},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &xa), *b = ibv_create_qp_ex(ctx, &xa);
	CHECK(cq && slots_mr && a && b && connect_pair(ctx, a, b) == 0, "set-up: errno %d", errno);
	if (!a || !b)
		return;
	qx = ibv_qp_to_qp_ex(a);
	pthread_t t[WRITERS + 1];
	pthread_create(&t[WRITERS], NULL, count_completions, cq);
	for (long i = 0; i < WRITERS; i++)
		pthread_create(&t[i], NULL, build_writes, (void *)i);
	for (int i = 0; i <= WRITERS; i++)
		pthread_join(t[i], NULL);
	int not_once = 0, misplaced = 0;
	for (int i = 0; i < WRITES; i++) {
		not_once += seen[i] != 1;
		misplaced += slots[i] != (uint64_t)i;
	}
	CHECK(complete_errors == 0 && not_once == 0 && misplaced == 0,
	      "%d writes: %d ibv_wr_complete errors, %d not completed exactly once, %d not in "
	      "their slot",
	      WRITES, complete_errors, not_once, misplaced);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(slots_mr);
	ibv_destroy_cq(cq);
	free(slots);
}

/* ---- ibv_start_poll .. ibv_end_poll ------------------------------------------------- */

#define POLLED 2000
static struct ibv_cq_ex *cqx;
static atomic_int polled, posted_out, polled_seen[POLLED];

static void *poll_extended(void *arg)
{
	(void)arg;
	struct ibv_poll_cq_attr attr = {0};
	int k = 0;
	while (atomic_load(&polled) < POLLED && now_ms() < deadline) {
		if (ibv_start_poll(cqx, &attr))
			continue;
		do {
			if (++k % 16 == 0)
				usleep(10); /* inside the section: the other poller must wait */
			uint64_t id = cqx->wr_id;
			if (id < POLLED)
				atomic_fetch_add(&polled_seen[id], 1);
			atomic_fetch_add(&polled, 1);
			atomic_fetch_sub(&posted_out, 1);
		} while (ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
	}
	return NULL;
}

static void extended_poll_sections(void)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 255, .wc_flags = IBV_WC_STANDARD_FLAGS};
	cqx = ibv_create_cq_ex(ctx, &ca);
	struct ibv_cq *cq = cqx ? ibv_cq_ex_to_cq(cqx) : NULL;
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr =
		ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp *a = cq ? rc_qp(pd, cq, NULL) : NULL, *b = cq ? rc_qp(pd, cq, NULL) : NULL;
	CHECK(cq && mr && a && b && connect_pair(ctx, a, b) == 0, "set-up: errno %d", errno);
	if (!a || !b)
		return;
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, poll_extended, NULL);
	for (int i = 0; i < POLLED && now_ms() < deadline; i++) {
		/* rc_qp's send queue holds 8. */
		while (atomic_load(&posted_out) >= 8 && now_ms() < deadline)
			;
		atomic_fetch_add(&posted_out, 1);
		struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = (uintptr_t)buf + 64,
						     .rkey = mr->rkey}},
				    *bad;
		if (ibv_post_send(a, &wr, &bad)) {
			CHECK(0, "posting %d: errno %d", i, errno);
			atomic_fetch_sub(&posted_out, 1);
			break;
		}
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	int not_once = 0;
	for (int i = 0; i < POLLED; i++)
		not_once += polled_seen[i] != 1;
	CHECK(not_once == 0, "%d of %d completions not seen exactly once", not_once, POLLED);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
}

/* ---- channels ----------------------------------------------------------------------- */

static void a_destroyed_cq_takes_its_unread_event(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *keep = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr =
		ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	CHECK(ch && keep && cq && a && b && connect_pair(ctx, a, b) == 0, "set-up: errno %d",
	      errno);
	if (!a || !b)
		return;
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)buf + 64, .rkey = mr->rkey}},
			    *bad;
	struct ibv_wc wc;
	CHECK(ibv_req_notify_cq(cq, 0) == 0 && ibv_post_send(a, &wr, &bad) == 0 &&
		      poll_n(cq, &wc, 1) == 1 && channel_ready(ch, 5000),
	      "an event queued on the channel");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	CHECK(ibv_destroy_cq(cq) == 0, "destroying the CQ with its event unread");
	CHECK(!channel_ready(ch, 100),
	      "the channel is not readable any more (no event is there to get)");
	/* Its other CQ still signals through it. */
	CHECK(ibv_req_notify_cq(keep, 0) == 0, "arming the other CQ");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(keep);
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroying the channel");
	free(buf);
}

static struct ibv_comp_channel *shared_channel;
static atomic_int churn_errors;

static void *churn_cqs(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1500; i++) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, shared_channel, 0);
		if (!cq || ibv_destroy_cq(cq))
			atomic_fetch_add(&churn_errors, 1);
	}
	return NULL;
}

static void channel_users_from_four_threads(void)
{
	shared_channel = ibv_create_comp_channel(ctx);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn_cqs, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(churn_errors == 0 && shared_channel->refcnt == 0,
	      "%d errors; refcnt %d after balanced creates and destroys", churn_errors,
	      shared_channel->refcnt);
	CHECK(ibv_destroy_comp_channel(shared_channel) == 0, "destroying the channel");
}

static struct ibv_context *closing_ctx;
static atomic_int waiter_rc = 1, waiter_errno;

static void *wait_for_async(void *arg)
{
	(void)arg;
	struct ibv_async_event ev;
	int rc = ibv_get_async_event(closing_ctx, &ev);
	atomic_store(&waiter_errno, errno);
	atomic_store(&waiter_rc, rc);
	return NULL;
}

static void closing_while_a_thread_waits_for_async_events(void)
{
	/* The kernel wakes readers of a context's event file when it goes (EIO); the context
	 * must not be freed under a thread still waiting on it. */
	closing_ctx = open_first();
	pthread_t t;
	pthread_create(&t, NULL, wait_for_async, NULL);
	usleep(200000);
	CHECK(ibv_close_device(closing_ctx) == 0, "closing the context");
	long until = now_ms() + 5000;
	while (atomic_load(&waiter_rc) == 1 && now_ms() < until)
		usleep(1000);
	CHECK(atomic_load(&waiter_rc) == -1 && atomic_load(&waiter_errno) == EIO,
	      "the waiter returned -1 EIO (rc %d errno %d)", atomic_load(&waiter_rc),
	      atomic_load(&waiter_errno));
	if (atomic_load(&waiter_rc) != 1)
		pthread_join(t, NULL);
	/* The next context works, whatever fd numbers it reuses. */
	struct ibv_context *again = open_first();
	struct ibv_pd *p = ibv_alloc_pd(again);
	CHECK(p && ibv_dealloc_pd(p) == 0 && ibv_close_device(again) == 0,
	      "a context opened after it works");
}

int main(void)
{
	alarm(60);
	ctx = open_first();
	pd = ibv_alloc_pd(ctx);
	deadline = now_ms() + 40000;
	wr_api_sections();
	extended_poll_sections();
	a_destroyed_cq_takes_its_unread_event();
	channel_users_from_four_threads();
	closing_while_a_thread_waits_for_async_events();
	printf("%d failures\n", failures);
	fflush(stdout);
	_exit(failures != 0);
}
