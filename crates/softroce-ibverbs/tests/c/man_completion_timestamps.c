/* ibv_create_cq_ex(3), ibv_query_device_ex(3), ibv_query_rt_values_ex(3): completion
 * timestamps. ibv_query_device_ex reports hca_core_clock ("the frequency (in kHZ) of the
 * HCA (0 = unsupported)") and completion_timestamp_mask ("0 = unsupported"); a CQ created
 * with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP answers ibv_wc_read_completion_ts with "the
 * completion timestamp ... in HCA clock units", and with ..._WALLCLOCK
 * ibv_wc_read_completion_wallclock_ns converts it "to wall clock nanoseconds";
 * ibv_query_rt_values_ex returns the "HW raw clock" those timestamps come from. softroce's
 * clock (documented in the driver's clock module) is CLOCK_MONOTONIC in nanoseconds, so it
 * runs at 1 GHz and each value lies between two clock_gettime readings. Fields the device
 * does not emulate are refused with EOPNOTSUPP. Prints "N failures". */
#include "common.h"

static struct ibv_cq_ex *ecq;

static uint64_t raw_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	int rc = ibv_query_rt_values_ex(ctx, &v);
	CHECK(rc == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK, "query_rt_values_ex: %d", rc);
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Poll `want` completions (at most 10 s), keeping each one's wr_id, status, timestamp and
 * wall-clock time. */
static int poll_stamps(uint64_t *wr_id, int *status, uint64_t *ts, uint64_t *wall, int want)
{
	int got = 0;
	long end = now_ms() + 10000;
	while (got < want && now_ms() < end) {
		struct ibv_poll_cq_attr pa = {0};
		int rc = ibv_start_poll(ecq, &pa);
		if (rc == ENOENT)
			continue;
		if (rc)
			return -rc;
		do {
			wr_id[got] = ecq->wr_id;
			status[got] = ecq->status;
			ts[got] = ibv_wc_read_completion_ts(ecq);
			wall[got] = ibv_wc_read_completion_wallclock_ns(ecq);
			got++;
		} while (got < want && ibv_next_poll(ecq) == 0);
		ibv_end_poll(ecq);
	}
	return got;
}

int main(void)
{
	struct ibv_context *ctx = open_first();

	/* ibv_query_device_ex(3): a clock is offered (non-zero frequency and mask). */
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	CHECK(ax.hca_core_clock == 1000000, "hca_core_clock %llu kHz: a 1 GHz (nanosecond) clock",
	      (unsigned long long)ax.hca_core_clock);
	CHECK(ax.completion_timestamp_mask == UINT64_MAX, "completion_timestamp_mask %#llx",
	      (unsigned long long)ax.completion_timestamp_mask);

	/* ibv_query_rt_values_ex(3): the raw clock is CLOCK_MONOTONIC's nanoseconds. */
	uint64_t m0 = clock_ns(CLOCK_MONOTONIC);
	uint64_t r0 = raw_clock(ctx);
	uint64_t m1 = clock_ns(CLOCK_MONOTONIC);
	CHECK(m0 <= r0 && r0 <= m1, "raw clock %llu between CLOCK_MONOTONIC %llu and %llu",
	      (unsigned long long)r0, (unsigned long long)m0, (unsigned long long)m1);
	struct ibv_values_ex bad = {.comp_mask = IBV_VALUES_MASK_RESERVED};
	CHECK(ibv_query_rt_values_ex(ctx, &bad) == EINVAL, "an unknown value asked for: EINVAL");

	/* ibv_create_cq_ex(3): wc_flags the device cannot fill are refused. */
	uint64_t refused[] = {IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG};
	for (unsigned i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct ibv_cq_init_attr_ex ra = {
			.cqe = 4,
			.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | refused[i]};
		errno = 0;
		CHECK(ibv_create_cq_ex(ctx, &ra) == NULL && errno == EOPNOTSUPP,
		      "wc_flags %#llx: EOPNOTSUPP (%d)", (unsigned long long)refused[i], errno);
	}
	struct ibv_cq_init_attr_ex ca = {.cqe = 32,
					 .wc_flags = IBV_WC_STANDARD_FLAGS |
						     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
						     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
	ecq = ibv_create_cq_ex(ctx, &ca);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(ecq && pd && mr, "setup: errno %d", errno);
	if (!ecq || !pd || !mr)
		return 1;
	struct ibv_cq *cq = ibv_cq_ex_to_cq(ecq);
	struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq, NULL);
	union ibv_gid gid;
	CHECK(a && b && ibv_query_gid(ctx, 1, 0, &gid) == 0, "QPs");
	if (!a || !b)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");

	/* Traffic: four WRITEs and a SEND with its receive, between two clock readings. */
	enum { N = 6 };
	uint64_t before = raw_clock(ctx);
	uint64_t wall_before = clock_ns(CLOCK_REALTIME);
	struct ibv_sge rsge = {(uintptr_t)(buf + 2048), 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 100, .sg_list = &rsge, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	for (int i = 0; i < N - 1; i++) {
		struct ibv_sge sge = {(uintptr_t)(buf + 64 * i), 64, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = i < N - 2 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *sbad;
		wr.wr.rdma.remote_addr = (uintptr_t)(buf + 1024 + 64 * i);
		wr.wr.rdma.rkey = mr->rkey;
		CHECK(ibv_post_send(a, &wr, &sbad) == 0, "post_send %d", i);
	}
	uint64_t wr_id[N], ts[N], wall[N];
	int status[N];
	int got = poll_stamps(wr_id, status, ts, wall, N);
	uint64_t after = raw_clock(ctx);
	uint64_t wall_after = clock_ns(CLOCK_REALTIME);
	CHECK(got == N, "%d of %d completions", got, N);
	for (int i = 0; i < got; i++) {
		CHECK(status[i] == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wr_id[i],
		      ibv_wc_status_str(status[i]));
		CHECK(before <= ts[i] && ts[i] <= after,
		      "wr %llu stamped %llu, between the raw clock before posting (%llu) and after "
		      "polling (%llu)",
		      (unsigned long long)wr_id[i], (unsigned long long)ts[i],
		      (unsigned long long)before, (unsigned long long)after);
		CHECK(i == 0 || ts[i - 1] <= ts[i], "completion %d (%llu) not before completion %d (%llu)",
		      i, (unsigned long long)ts[i], i - 1, (unsigned long long)ts[i - 1]);
		/* The wall clock may be slewed while the test runs: a millisecond of slack. */
		CHECK(wall_before - 1000000 <= wall[i] && wall[i] <= wall_after + 1000000,
		      "wr %llu at wall clock %llu, between %llu and %llu",
		      (unsigned long long)wr_id[i], (unsigned long long)wall[i],
		      (unsigned long long)wall_before, (unsigned long long)wall_after);
	}

	/* A flush is a completion too: stamped when the QP entered the error state. */
	CHECK(ibv_post_recv(a, &rwr, &rbad) == 0, "post_recv on a");
	uint64_t before_flush = raw_clock(ctx);
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK(ibv_modify_qp(a, &err, IBV_QP_STATE) == 0, "a to ERR");
	got = poll_stamps(wr_id, status, ts, wall, 1);
	uint64_t after_flush = raw_clock(ctx);
	CHECK(got == 1 && status[0] == IBV_WC_WR_FLUSH_ERR, "the receive flushed");
	CHECK(got == 1 && before_flush <= ts[0] && ts[0] <= after_flush,
	      "flush stamped %llu, between %llu and %llu", (unsigned long long)ts[0],
	      (unsigned long long)before_flush, (unsigned long long)after_flush);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("%d failures\n", failures);
	return failures != 0;
}
