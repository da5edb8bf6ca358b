/* ibv_modify_qp(3), ibv_query_qp(3), ibv_create_qp(3), ibv_post_send(3), ibv_post_recv(3):
 * the attributes each transition requires per QP type, the transitions that exist, a
 * refused modify changing nothing, query_qp returning what modify_qp set, the opcode table
 * per QP type, inline rules, sq_sig_all, the SRQ rules of create_qp and post_recv.
 * Prints "N failures". */
#include "common.h"

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type,
			      int sig_all)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1,
					      .max_inline_data = 32},
				      .qp_type = type,
				      .sq_sig_all = sig_all};
	return ibv_create_qp(pd, &ia);
}

static int to_init(struct ibv_qp *qp, enum ibv_qp_type type)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, mask);
}

static int ud_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	if (to_init(qp, IBV_QPT_UD) || ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return 1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 5;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(pd && cq && mr, "setup: errno %d", errno);
	if (!pd || !cq || !mr)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_wc wc[8];
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	/* ibv_modify_qp(3) tables: each required attribute missing is refused, and the QP
	 * stays where it was ("none of the attributes will be modified"). */
	struct ibv_qp *rc = make_qp(pd, cq, IBV_QPT_RC, 0);
	struct ibv_qp *uc = make_qp(pd, cq, IBV_QPT_UC, 0);
	struct ibv_qp *ud = make_qp(pd, cq, IBV_QPT_UD, 0);
	CHECK(rc && uc && ud, "create_qp: errno %d", errno);
	if (!rc || !uc || !ud)
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL &&
		      state_of(rc) == IBV_QPS_RESET,
	      "RC Init without IBV_QP_ACCESS_FLAGS");
	CHECK(ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL &&
		      state_of(ud) == IBV_QPS_RESET,
	      "UD Init without IBV_QP_QKEY");
	CHECK(ibv_modify_qp(ud, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
				    IBV_QP_ACCESS_FLAGS) == EINVAL &&
		      state_of(ud) == IBV_QPS_RESET,
	      "UD Init with IBV_QP_ACCESS_FLAGS (an RC/UC attribute) is an invalid mask");
	a.port_num = 2;
	CHECK(ibv_modify_qp(rc, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
			      EINVAL &&
		      state_of(rc) == IBV_QPS_RESET,
	      "Init on port 2, which does not exist");
	a.port_num = 1;
	/* Transitions that do not exist: Reset -> RTR, Reset -> RTS. */
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(ud, &a, IBV_QP_STATE) == EINVAL && state_of(ud) == IBV_QPS_RESET,
	      "Reset -> RTR");
	CHECK(to_init(rc, IBV_QPT_RC) == 0 && to_init(uc, IBV_QPT_UC) == 0 &&
		      to_init(ud, IBV_QPT_UD) == 0,
	      "Reset -> Init with the required attributes");
	/* Init -> RTS skips RTR. */
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	CHECK(ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL &&
		      state_of(ud) == IBV_QPS_INIT,
	      "Init -> RTS");

	/* RC RTR needs AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = rc->qp_num;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(ibv_modify_qp(rc, &a, rtr & ~IBV_QP_MIN_RNR_TIMER) == EINVAL &&
		      state_of(rc) == IBV_QPS_INIT,
	      "RC RTR without IBV_QP_MIN_RNR_TIMER");
	CHECK(ibv_modify_qp(rc, &a, rtr & ~IBV_QP_AV) == EINVAL && state_of(rc) == IBV_QPS_INIT,
	      "RC RTR without IBV_QP_AV");
	/* UC has no responder resources: MAX_DEST_RD_ATOMIC is not a UC attribute. */
	CHECK(ibv_modify_qp(uc, &a, rtr) == EINVAL && state_of(uc) == IBV_QPS_INIT,
	      "UC RTR with RC-only attributes");
	/* A RoCE port sets IBV_QPF_GRH_REQUIRED: an AV without a GRH is refused. */
	a.ah_attr.is_global = 0;
	CHECK(ibv_modify_qp(rc, &a, rtr) == EINVAL && state_of(rc) == IBV_QPS_INIT,
	      "RTR with an AV without GRH");
	a.ah_attr.is_global = 1;
	/* Limits from ibv_query_device(3). */
	a.max_dest_rd_atomic = da.max_qp_rd_atom + 1;
	CHECK(ibv_modify_qp(rc, &a, rtr) == EINVAL && state_of(rc) == IBV_QPS_INIT,
	      "max_dest_rd_atomic > max_qp_rd_atom");
	a.max_dest_rd_atomic = 1;
	a.path_mtu = 7;
	CHECK(ibv_modify_qp(rc, &a, rtr) == EINVAL && state_of(rc) == IBV_QPS_INIT,
	      "path_mtu 7 is no MTU");
	a.path_mtu = IBV_MTU_1024;
	a.ah_attr.static_rate = IBV_RATE_10_GBPS;
	CHECK(ibv_modify_qp(rc, &a, rtr) == 0 && state_of(rc) == IBV_QPS_RTR, "RC Init -> RTR");
	CHECK(ibv_modify_qp(uc, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN) == 0,
	      "UC Init -> RTR");
	/* RTR -> Init does not exist. */
	struct ibv_qp_attr back = {.qp_state = IBV_QPS_INIT};
	CHECK(ibv_modify_qp(rc, &back, IBV_QP_STATE) == EINVAL && state_of(rc) == IBV_QPS_RTR,
	      "RTR -> Init");
	/* RC RTS needs SQ_PSN, MAX_QP_RD_ATOMIC, RETRY_CNT, RNR_RETRY, TIMEOUT. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x456;
	a.max_rd_atomic = 1;
	a.retry_cnt = 6;
	a.rnr_retry = 5;
	a.timeout = 14;
	int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
		  IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;
	CHECK(ibv_modify_qp(rc, &a, rts & ~IBV_QP_RETRY_CNT) == EINVAL &&
		      state_of(rc) == IBV_QPS_RTR,
	      "RC RTS without IBV_QP_RETRY_CNT");
	a.max_rd_atomic = da.max_qp_init_rd_atom + 1;
	CHECK(ibv_modify_qp(rc, &a, rts) == EINVAL && state_of(rc) == IBV_QPS_RTR,
	      "max_rd_atomic > max_qp_init_rd_atom");
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(rc, &a, rts) == 0 && state_of(rc) == IBV_QPS_RTS, "RC RTR -> RTS");
	CHECK(ibv_modify_qp(uc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UC RTR -> RTS");
	CHECK(ibv_modify_qp(uc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT) == EINVAL,
	      "UC RTS with IBV_QP_RETRY_CNT (RC only)");
	/* Without IBV_DEVICE_RESIZE_MAX_WR a QP is not resized. */
	if (!(da.device_cap_flags & IBV_DEVICE_RESIZE_MAX_WR)) {
		struct ibv_qp_attr cap = {.cap = {.max_send_wr = 16, .max_recv_wr = 16}};
		CHECK(ibv_modify_qp(rc, &cap, IBV_QP_CAP) == EINVAL,
		      "IBV_QP_CAP without IBV_DEVICE_RESIZE_MAX_WR");
	}
	/* RoCE has no alternate paths: the kernel's ib_modify_qp refuses IBV_QP_ALT_PATH
	 * with EINVAL, and ibv_modify_qp(3) has programs check IBV_DEVICE_AUTO_PATH_MIG to
	 * learn whether alternate paths are supported: clear (rxe sets it all the same). */
	CHECK(!(da.device_cap_flags & IBV_DEVICE_AUTO_PATH_MIG),
	      "IBV_DEVICE_AUTO_PATH_MIG is not advertised (flags %#x)", da.device_cap_flags);
	{
		struct ibv_qp_attr alt = {.alt_port_num = 1, .alt_timeout = 14};
		alt.alt_ah_attr.is_global = 1;
		alt.alt_ah_attr.grh.dgid = gid;
		alt.alt_ah_attr.port_num = 1;
		CHECK(ibv_modify_qp(rc, &alt, IBV_QP_ALT_PATH) == EINVAL,
		      "IBV_QP_ALT_PATH on RoCE");
	}
	/* Mask bits past IBV_QP_DEST_QPN are refused before anything else, EOPNOTSUPP as
	 * libibverbs' ibv_cmd_modify_qp: a rate limit has its own verb. */
	{
		struct ibv_qp_attr rl = {.rate_limit = 1000};
		CHECK(ibv_modify_qp(rc, &rl, IBV_QP_RATE_LIMIT) == EOPNOTSUPP,
		      "IBV_QP_RATE_LIMIT through ibv_modify_qp");
		CHECK(ibv_modify_qp(rc, &rl, IBV_QP_STATE | (1 << 21)) == EOPNOTSUPP,
		      "an undefined attribute mask bit");
	}

	/* ibv_query_qp(3): the values set by ibv_modify_qp. */
	memset(&a, 0, sizeof(a));
	memset(&ia, 0, sizeof(ia));
	CHECK(ibv_query_qp(rc, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_SQ_PSN | IBV_QP_AV |
					   IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER |
					   IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_CAP,
			   &ia) == 0,
	      "query_qp");
	CHECK(a.qp_state == IBV_QPS_RTS && a.path_mtu == IBV_MTU_1024 &&
		      a.dest_qp_num == rc->qp_num && a.rq_psn == 0x123 && a.sq_psn == 0x456,
	      "state %d mtu %d dest %u rq_psn %x sq_psn %x", a.qp_state, a.path_mtu,
	      a.dest_qp_num, a.rq_psn, a.sq_psn);
	CHECK(a.timeout == 14 && a.retry_cnt == 6 && a.rnr_retry == 5 && a.min_rnr_timer == 12 &&
		      a.max_rd_atomic == 1 && a.max_dest_rd_atomic == 1 && a.port_num == 1,
	      "timeout %d retry %d rnr_retry %d min_rnr %d rd_atomic %d/%d port %d", a.timeout,
	      a.retry_cnt, a.rnr_retry, a.min_rnr_timer, a.max_rd_atomic, a.max_dest_rd_atomic,
	      a.port_num);
	CHECK(a.ah_attr.is_global && memcmp(&a.ah_attr.grh.dgid, &gid, 16) == 0 &&
		      a.ah_attr.grh.hop_limit == 64 && a.ah_attr.port_num == 1,
	      "ah_attr");
	/* "Attribute values are valid if they have been set using ibv_modify_qp()". */
	CHECK(a.ah_attr.static_rate == IBV_RATE_10_GBPS, "ah_attr.static_rate %d as set",
	      a.ah_attr.static_rate);
	CHECK(a.cap.max_send_wr >= 8 && a.cap.max_send_sge >= 1 && a.cap.max_inline_data >= 32 &&
		      ia.cap.max_send_wr == a.cap.max_send_wr && ia.qp_type == IBV_QPT_RC &&
		      ia.send_cq == cq && ia.sq_sig_all == 0,
	      "cap and init_attr");
	CHECK(ud_to_rts(ud) == 0, "UD Init -> RTR -> RTS");
	CHECK(ibv_query_qp(ud, &a, IBV_QP_QKEY | IBV_QP_STATE | IBV_QP_SQ_PSN, &ia) == 0 &&
		      a.qkey == 0x11111111 && a.qp_state == IBV_QPS_RTS && a.sq_psn == 5,
	      "UD query_qp: qkey %x state %d sq_psn %u", a.qkey, a.qp_state, a.sq_psn);

	/* ibv_post_send(3) opcode table: UD carries only SEND and SEND_WITH_IMM; UC no READ or
	 * atomics; INLINE only for SEND and RDMA WRITE. */
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	enum ibv_wr_opcode not_ud[] = {IBV_WR_RDMA_WRITE,	   IBV_WR_RDMA_WRITE_WITH_IMM,
				       IBV_WR_RDMA_READ,	   IBV_WR_ATOMIC_CMP_AND_SWP,
				       IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_LOCAL_INV,
				       IBV_WR_BIND_MW,		   IBV_WR_SEND_WITH_INV};
	for (unsigned i = 0; i < sizeof(not_ud) / sizeof(not_ud[0]); i++) {
		wr.opcode = not_ud[i];
		bad = NULL;
		CHECK(ibv_post_send(ud, &wr, &bad) == EINVAL && bad == &wr,
		      "UD QP accepted opcode %d", not_ud[i]);
	}
	enum ibv_wr_opcode not_uc[] = {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
				       IBV_WR_ATOMIC_FETCH_AND_ADD};
	for (unsigned i = 0; i < sizeof(not_uc) / sizeof(not_uc[0]); i++) {
		wr.opcode = not_uc[i];
		wr.wr.rdma.rkey = mr->rkey;
		wr.wr.rdma.remote_addr = (uintptr_t)buf;
		bad = NULL;
		CHECK(ibv_post_send(uc, &wr, &bad) == EINVAL && bad == &wr,
		      "UC QP accepted opcode %d", not_uc[i]);
	}
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_INLINE;
	bad = NULL;
	CHECK(ibv_post_send(rc, &wr, &bad) == EINVAL && bad == &wr, "INLINE on an RDMA READ");
	wr.opcode = IBV_WR_SEND;
	struct ibv_sge big = {(uintptr_t)buf, 4096, 0};
	wr.sg_list = &big;
	bad = NULL;
	CHECK(ibv_post_send(rc, &wr, &bad) == EINVAL && bad == &wr,
	      "inline data beyond max_inline_data");
	/* Inline or not, more SGEs than max_send_sge are refused (rxe's and mlx5's providers
	 * check num_sge first): empty pieces, so only their number is wrong. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(rc, &qa, IBV_QP_CAP, &qia) == 0, "query the caps");
	struct ibv_sge pieces[64] = {{0}};
	if (qia.cap.max_send_sge < 64) {
		for (unsigned i = 0; i < 64; i++)
			pieces[i].addr = (uintptr_t)buf;
		wr.sg_list = pieces;
		wr.num_sge = (int)qia.cap.max_send_sge + 1;
		bad = NULL;
		CHECK(ibv_post_send(rc, &wr, &bad) == EINVAL && bad == &wr,
		      "inline with num_sge %d over max_send_sge %u", wr.num_sge,
		      qia.cap.max_send_sge);
		wr.num_sge = 1;
	}
	wr.sg_list = &sge;
	wr.send_flags = 0;
	CHECK(poll_n_within(cq, wc, 1, 300) == 0, "refused WRs never complete");

	/* sq_sig_all: every WR completes, signaled or not; otherwise only signaled ones. */
	struct ibv_qp *s1 = make_qp(pd, cq, IBV_QPT_RC, 1), *s2 = make_qp(pd, cq, IBV_QPT_RC, 0);
	CHECK(s1 && s2 && connect_rc(s1, s2->qp_num, gid, 0) == 0 &&
		      connect_rc(s2, s1->qp_num, gid, 0) == 0,
	      "connect s1-s2");
	if (!s1 || !s2)
		return 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	wr.wr.rdma.rkey = mr->rkey;
	wr.wr_id = 31;
	CHECK(ibv_post_send(s1, &wr, &bad) == 0 && poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 31 &&
		      wc[0].status == IBV_WC_SUCCESS,
	      "sq_sig_all: an unsignaled WR completes");
	wr.wr_id = 32;
	struct ibv_send_wr wr2 = wr;
	wr2.wr_id = 33;
	wr2.send_flags = IBV_SEND_SIGNALED;
	wr.next = &wr2;
	CHECK(ibv_post_send(s2, &wr, &bad) == 0 && poll_n(cq, wc, 1) == 1 &&
		      poll_n_within(cq, wc + 1, 1, 300) == 0 && wc[0].wr_id == 33,
	      "sq_sig_all = 0: only the signaled WR completes (got wr_id %lu)",
	      (unsigned long)wc[0].wr_id);
	wr.next = NULL;

	/* ibv_create_qp(3): with an SRQ, max_recv_wr and max_recv_sge are ignored;
	 * ibv_post_recv(3): such a QP's own receive queue is not used. */
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq != NULL, "create_srq: errno %d", errno);
	if (!srq)
		return 1;
	struct ibv_qp_init_attr sq = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = srq,
				      .cap = {.max_send_wr = 4,
					      .max_send_sge = 1,
					      .max_recv_wr = da.max_qp_wr + 1,
					      .max_recv_sge = da.max_sge + 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *with_srq = ibv_create_qp(pd, &sq);
	CHECK(with_srq != NULL, "recv caps beyond the device's ignored with an SRQ: errno %d",
	      errno);
	if (!with_srq)
		return 1;
	struct ibv_sge rs = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 41, .sg_list = &rs, .num_sge = 1}, *rbad = NULL;
	CHECK(to_init(with_srq, IBV_QPT_RC) == 0, "Init");
	CHECK(ibv_post_recv(with_srq, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "post_recv on a QP with an SRQ");

	/* Error state: a QP moved to Error flushes its receive queue; WRs posted to it
	 * complete with IBV_WC_WR_FLUSH_ERR. Only wr_id, status and qp_num are valid. */
	CHECK(ibv_post_recv(s2, &rwr, &rbad) == 0, "post_recv");
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK(ibv_modify_qp(s2, &err, IBV_QP_STATE) == 0 && state_of(s2) == IBV_QPS_ERR,
	      "RTS -> Error");
	CHECK(poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 41 &&
		      wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[0].qp_num == s2->qp_num,
	      "the posted receive is flushed: status %s", ibv_wc_status_str(wc[0].status));
	wr.wr_id = 42;
	wr.send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(s2, &wr, &bad) == 0, "post_send in Error");
	CHECK(poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 42 && wc[0].status == IBV_WC_WR_FLUSH_ERR &&
		      wc[0].qp_num == s2->qp_num,
	      "a send posted in Error is flushed: status %s", ibv_wc_status_str(wc[0].status));
	rwr.wr_id = 43;
	CHECK(ibv_post_recv(s2, &rwr, &rbad) == 0 && poll_n(cq, wc, 1) == 1 && wc[0].wr_id == 43 &&
		      wc[0].status == IBV_WC_WR_FLUSH_ERR,
	      "a receive posted in Error is flushed");
	/* Error -> Init and Error -> RTS do not exist; Error -> Reset does. */
	back.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(s2, &back, IBV_QP_STATE) == EINVAL && state_of(s2) == IBV_QPS_ERR,
	      "Error -> Init");
	back.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(s2, &back, IBV_QP_STATE) == 0 && state_of(s2) == IBV_QPS_RESET,
	      "Error -> Reset");
	CHECK(ibv_modify_qp(rc, &back, IBV_QP_STATE) == 0 && state_of(rc) == IBV_QPS_RESET,
	      "RTS -> Reset");

	CHECK(ibv_destroy_qp(with_srq) == 0 && ibv_destroy_srq(srq) == 0, "destroy with_srq");
	CHECK(ibv_destroy_qp(s1) == 0 && ibv_destroy_qp(s2) == 0, "destroy s1, s2");
	CHECK(ibv_destroy_qp(rc) == 0 && ibv_destroy_qp(uc) == 0 && ibv_destroy_qp(ud) == 0,
	      "destroy rc, uc, ud");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
