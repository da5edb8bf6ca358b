/* ibv_wr_post(3) (the ibv_wr_* API) and ibv_create_cq_ex(3) (ibv_start_poll and the
 * ibv_wc_read_* accessors): a QP refusing send ops its type lacks; several WRs in one
 * critical region, each with its wr_id and wr_flags; ibv_wr_abort discarding everything
 * since ibv_wr_start; a failing ibv_wr_complete aborting the entire posting (unlike
 * ibv_post_send, not even the WRs before the bad one run); the UD address setter being
 * mandatory; ENOENT from an empty extended CQ which stays usable. Prints "N failures". */
#include "common.h"
#include <arpa/inet.h>

static struct ibv_cq_ex *ecq;

/* Up to `want` completions through the extended CQ, each as an ibv_wc, waiting at most
 * `ms` milliseconds (a short wait where none may come). */
static int poll_ex_within(struct ibv_wc *wc, int want, long ms)
{
	int got = 0;
	long end = now_ms() + ms;
	while (got < want && now_ms() < end) {
		struct ibv_poll_cq_attr pa = {0};
		int rc = ibv_start_poll(ecq, &pa);
		if (rc == ENOENT)
			continue;
		if (rc)
			return -rc;
		do {
			struct ibv_wc *w = &wc[got++];
			w->wr_id = ecq->wr_id;
			w->status = ecq->status;
			w->opcode = ibv_wc_read_opcode(ecq);
			w->qp_num = ibv_wc_read_qp_num(ecq);
			w->byte_len = ibv_wc_read_byte_len(ecq);
			w->wc_flags = ibv_wc_read_wc_flags(ecq);
			w->imm_data = w->wc_flags & IBV_WC_WITH_IMM ? ibv_wc_read_imm_data(ecq) : 0;
			w->src_qp = ibv_wc_read_src_qp(ecq);
		} while (got < want && ibv_next_poll(ecq) == 0);
		ibv_end_poll(ecq);
	}
	return got;
}

static int poll_ex(struct ibv_wc *wc, int want)
{
	return poll_ex_within(wc, want, 10000);
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq_init_attr_ex ca = {.cqe = 32,
					 .wc_flags = IBV_WC_STANDARD_FLAGS};
	ecq = ibv_create_cq_ex(ctx, &ca);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(pd && ecq && mr, "setup: errno %d", errno);
	if (!pd || !ecq || !mr)
		return 1;
	struct ibv_cq *cq = ibv_cq_ex_to_cq(ecq);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_wc wc[8];

	/* ibv_create_cq_ex(3): an empty CQ answers ENOENT and stays valid. */
	struct ibv_poll_cq_attr pattr = {0};
	CHECK(ibv_start_poll(ecq, &pattr) == ENOENT, "start_poll on an empty CQ");

	/* "If the QP does not support all the requested work request types then QP creation
	 * will fail": a UD QP sends only SEND and SEND_WITH_IMM. */
	struct ibv_qp_init_attr_ex xa = {.send_cq = cq,
					 .recv_cq = cq,
					 .cap = {.max_send_wr = 8,
						 .max_recv_wr = 8,
						 .max_send_sge = 2,
						 .max_recv_sge = 1,
						 .max_inline_data = 16},
					 .qp_type = IBV_QPT_UD,
					 .comp_mask = IBV_QP_INIT_ATTR_PD |
						      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND |
							   IBV_QP_EX_WITH_RDMA_WRITE};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &xa) == NULL && errno == EOPNOTSUPP,
	      "a UD QP with RDMA WRITE send ops: errno %d", errno);
	xa.qp_type = IBV_QPT_UC;
	xa.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &xa) == NULL && errno == EOPNOTSUPP,
	      "a UC QP with RDMA READ send ops: errno %d", errno);

	xa.qp_type = IBV_QPT_RC;
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &xa), *b = ibv_create_qp_ex(ctx, &xa);
	CHECK(a && b, "RC QPs with send ops: errno %d", errno);
	if (!a || !b)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_qp_attr atomic = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ |
						       IBV_ACCESS_REMOTE_ATOMIC};
	CHECK(ibv_modify_qp(b, &atomic, IBV_QP_ACCESS_FLAGS) == 0, "b allows atomics");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);

	/* Several WRs in one region; wr_id and wr_flags are read by each builder. */
	struct ibv_sge rs = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 50, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	memcpy(buf, "abcdefgh", 8);
	*(uint64_t *)(buf + 1024) = 40;
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = 0; /* unsignaled: no completion (sq_sig_all is 0) */
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htonl(0xabcd));
	ibv_wr_set_inline_data(qx, buf, 4);
	qx->wr_id = 3;
	ibv_wr_atomic_fetch_add(qx, mr->rkey, (uintptr_t)buf + 1024, 2);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 1032, 8);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	int got = poll_ex(wc, 3);
	CHECK(got == 3, "two signaled sends and one receive: %d", got);
	int seen_send = 0, seen_atomic = 0, seen_recv = 0;
	for (int i = 0; i < got; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id != 1, "wc %d: wr_id %lu %s", i,
		      (unsigned long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
		if (wc[i].wr_id == 2)
			seen_send = wc[i].opcode == IBV_WC_SEND && wc[i].qp_num == a->qp_num;
		if (wc[i].wr_id == 3)
			seen_atomic = wc[i].opcode == IBV_WC_FETCH_ADD && wc[i].byte_len == 8;
		if (wc[i].wr_id == 50)
			seen_recv = wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == 4 &&
				    (wc[i].wc_flags & IBV_WC_WITH_IMM) &&
				    wc[i].imm_data == htonl(0xabcd) && wc[i].qp_num == b->qp_num;
	}
	CHECK(seen_send && seen_atomic && seen_recv, "send %d atomic %d recv %d", seen_send,
	      seen_atomic, seen_recv);
	CHECK(memcmp(buf + 2048, "abcdefgh", 8) == 0, "the unsignaled WRITE ran");
	CHECK(*(uint64_t *)(buf + 1024) == 42 && *(uint64_t *)(buf + 1032) == 40,
	      "fetch_add: %lu, returned %lu", (unsigned long)*(uint64_t *)(buf + 1024),
	      (unsigned long)*(uint64_t *)(buf + 1032));

	/* ibv_wr_abort discards all work prepared since ibv_wr_start. */
	ibv_wr_start(qx);
	qx->wr_id = 4;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 3000);
	ibv_wr_set_inline_data(qx, "aborted", 8);
	ibv_wr_abort(qx);
	CHECK(poll_ex_within(wc, 1, 300) == 0 && buf[3000] == 0, "an aborted WR never runs");

	/* A failing ibv_wr_complete aborts the entire posting: the good first WR does not run
	 * either. The second is bad: inline data is "valid only for SEND and RDMA_WRITE". */
	ibv_wr_start(qx);
	qx->wr_id = 5;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 3100);
	ibv_wr_set_inline_data(qx, "first", 6);
	qx->wr_id = 6;
	ibv_wr_rdma_read(qx, mr->rkey, (uintptr_t)buf);
	ibv_wr_set_inline_data(qx, buf + 3200, 8);
	CHECK(ibv_wr_complete(qx) != 0, "an inline RDMA READ fails wr_complete");
	CHECK(poll_ex_within(wc, 1, 300) == 0 && buf[3100] == 0, "nothing of the failed posting ran");
	/* Too much inline data fails the posting as well. */
	ibv_wr_start(qx);
	qx->wr_id = 7;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 3100);
	ibv_wr_set_inline_data(qx, buf, 4096);
	CHECK(ibv_wr_complete(qx) != 0, "inline data beyond max_inline_data");
	/* The QP is still usable afterwards. */
	ibv_wr_start(qx);
	qx->wr_id = 8;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 3100);
	ibv_wr_set_inline_data(qx, "again", 6);
	CHECK(ibv_wr_complete(qx) == 0 && poll_ex(wc, 1) == 1 && wc[0].wr_id == 8 &&
		      wc[0].status == IBV_WC_SUCCESS && strcmp(buf + 3100, "again") == 0,
	      "a posting after the failed ones");

	/* UD: ibv_wr_set_ud_addr is mandatory. */
	xa.qp_type = IBV_QPT_UD;
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *u = ibv_create_qp_ex(ctx, &xa);
	CHECK(u != NULL, "UD QP with SEND: errno %d", errno);
	if (u) {
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 7};
		CHECK(ibv_modify_qp(u, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_QKEY) == 0,
		      "UD Init");
		qa.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(u, &qa, IBV_QP_STATE) == 0, "UD RTR");
		qa.qp_state = IBV_QPS_RTS;
		CHECK(ibv_modify_qp(u, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
		struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(u);
		ibv_wr_start(ux);
		ux->wr_id = 9;
		ux->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(ux);
		ibv_wr_set_sge(ux, mr->lkey, (uintptr_t)buf, 8);
		CHECK(ibv_wr_complete(ux) != 0, "a UD SEND without ibv_wr_set_ud_addr");
		CHECK(poll_ex_within(wc, 1, 300) == 0, "and it never ran");
		struct ibv_ah_attr aa = {.is_global = 1,
					 .port_num = 1,
					 .grh = {.dgid = gid, .hop_limit = 64}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		struct ibv_qp *v = ibv_create_qp_ex(ctx, &xa);
		CHECK(ah && v, "AH and a second UD QP: errno %d", errno);
		if (ah && v) {
			qa.qp_state = IBV_QPS_INIT;
			ibv_modify_qp(v, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						      IBV_QP_QKEY);
			qa.qp_state = IBV_QPS_RTR;
			ibv_modify_qp(v, &qa, IBV_QP_STATE);
			struct ibv_sge us = {(uintptr_t)buf + 5000, 40 + 16, mr->lkey};
			struct ibv_recv_wr ur = {.wr_id = 60, .sg_list = &us, .num_sge = 1};
			CHECK(ibv_post_recv(v, &ur, &rbad) == 0, "UD post_recv");
			ibv_wr_start(ux);
			ux->wr_id = 10;
			ux->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(ux);
			ibv_wr_set_sge(ux, mr->lkey, (uintptr_t)buf, 8);
			ibv_wr_set_ud_addr(ux, ah, v->qp_num, 7);
			CHECK(ibv_wr_complete(ux) == 0, "UD SEND with its address");
			got = poll_ex(wc, 2);
			int r = got == 2 && wc[1].wr_id == 60 ? 1 : 0;
			CHECK(got == 2 && wc[r].wr_id == 60 && wc[r].status == IBV_WC_SUCCESS &&
				      wc[r].src_qp == u->qp_num && wc[r].byte_len == 48 &&
				      (wc[r].wc_flags & IBV_WC_GRH),
			      "UD receive through the extended CQ (src_qp, GRH)");
			CHECK(ibv_destroy_qp(v) == 0 && ibv_destroy_ah(ah) == 0, "destroy v, ah");
		}
		CHECK(ibv_destroy_qp(u) == 0, "destroy u");
	}

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy a, b");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
