/* Helpers of the C programs: a CHECK that counts failures, the device, RC QPs connected to
 * each other on it, and bounded waits. Every wait ends within 10 s. */
#ifndef SOFTROCE_TEST_COMMON_H
#define SOFTROCE_TEST_COMMON_H
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;
#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			failures++;                                             \
		}                                                               \
	} while (0)

/* The first (only) device, opened; exits on failure. */
static inline struct ibv_context *open_first(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		exit(2);
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "open: errno %d\n", errno);
		exit(2);
	}
	return ctx;
}

/* RESET -> RTS, connected to QP `dest` at `gid`, sending from GID `sgid_index`, with the
 * local ACK timeout `timeout` (4.096 us * 2^timeout). */
static inline int connect_rc_timeout(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid,
				     int sgid_index, uint8_t timeout)
{
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
				 .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dest;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.sgid_index = sgid_index;
	at.ah_attr.grh.hop_limit = 64;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		return 2;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = timeout;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return 3;
	return 0;
}

/* connect_rc_timeout with rdma-core's usual timeout, 14 (67 ms). */
static inline int connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, int sgid_index)
{
	return connect_rc_timeout(qp, dest, gid, sgid_index, 14);
}

/* RESET -> INIT -> RTR -> RTS for a UD QP with `qkey`: 0, or the step that failed (1-3). */
static inline int ud_ready(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return 1;
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		return 2;
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 0;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return 3;
	return 0;
}

/* Connect RC QPs `a` and `b` of one device to each other through its GID 0: 0, or what
 * failed (-1 the GID, else connect_rc's step). */
static inline int connect_pair(struct ibv_context *ctx, struct ibv_qp *a, struct ibv_qp *b)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return -1;
	int rc = connect_rc(a, b->qp_num, gid, 0);
	return rc ? rc : connect_rc(b, a->qp_num, gid, 0);
}

static inline long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Poll until `want` completions arrived or `ms` milliseconds passed (a short wait where
 * fewer must come); the count, or < 0 on error. */
static inline int poll_n_within(struct ibv_cq *cq, struct ibv_wc *wc, int want, long ms)
{
	int got = 0;
	long end = now_ms() + ms;
	while (got < want && now_ms() < end) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			return n;
		got += n;
	}
	return got;
}

/* Poll until `want` completions arrived (at most 10 s); the count, or < 0 on error. */
static inline int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	return poll_n_within(cq, wc, want, 10000);
}

/* Whether the channel's fd becomes readable within `ms` milliseconds. */
static inline int channel_ready(struct ibv_comp_channel *ch, int ms)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 1;
}

/* Two UD QPs on `cq` (4 WRs, `recv_sge` receive SGEs), both in RTS with Q_Key 0x1234:
 * 0, or -1 (errno set) when one could not be made or moved. */
static inline int ud_pair(struct ibv_pd *pd, struct ibv_cq *cq, int recv_sge, struct ibv_qp *u[2])
{
	struct ibv_qp_init_attr uia = {.send_cq = cq,
				       .recv_cq = cq,
				       .cap = {.max_send_wr = 4,
					       .max_recv_wr = 4,
					       .max_send_sge = 1,
					       .max_recv_sge = recv_sge},
				       .qp_type = IBV_QPT_UD};
	for (int i = 0; i < 2; i++) {
		u[i] = ibv_create_qp(pd, &uia);
		if (!u[i] || ud_ready(u[i], 0x1234))
			return -1;
	}
	return 0;
}

static inline struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = srq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 2,
					      .max_recv_sge = 2,
					      .max_inline_data = 64},
				      .qp_type = IBV_QPT_RC};
	return ibv_create_qp(pd, &ia);
}
/* Post one send WR on qp and wait for its completion on cq: whether it completed with
 * status want (a different status is printed). */
static inline int run_one(struct ibv_cq *cq, struct ibv_qp *qp, struct ibv_send_wr *wr,
			  enum ibv_wc_status want)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	if (ibv_post_send(qp, wr, &bad) || poll_n(cq, &wc, 1) != 1)
		return 0;
	if (wc.status != want)
		fprintf(stderr, "wr %lu: %s\n", (unsigned long)wr->wr_id, ibv_wc_status_str(wc.status));
	return wc.status == want;
}

#endif
