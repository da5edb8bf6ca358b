/* XRC through the drop-in, rule by rule from rdma-core 44's man pages and the kernel's XRC
 * model (drivers/infiniband/core/verbs.c):
 *  - ibv_query_device(3): IBV_DEVICE_XRC in device_cap_flags says XRC is there.
 *  - ibv_open_xrcd(3): fd -1 with O_CREAT is a domain of its own; opens naming the same file
 *    share one domain; a file without a domain and no O_CREAT is EINVAL; ibv_close_xrcd
 *    fails (EBUSY) while an XRC SRQ or target QP uses the domain.
 *  - ibv_create_srq_ex(3), ibv_get_srq_num(3): an IBV_SRQT_XRC SRQ has an XRC domain, a CQ
 *    and a PD; each has its own SRQ number.
 *  - ibv_create_qp_ex(3): an IBV_QPT_XRC_RECV QP is created in its domain
 *    (IBV_QP_INIT_ATTR_XRCD) without PD, CQs or queues: ibv_post_send and ibv_post_recv on
 *    it fail. An IBV_QPT_XRC_SEND QP has a PD and a send CQ, no receive queue.
 *  - ibv_post_send(3) qp_type.xrc.remote_srqn / ibv_wr_set_xrc_srqn(3): each request names
 *    the peer's SRQ; two SRQs of one domain each receive the sends addressed to them through
 *    one XRC_SEND QP and one target QP; the receive completes on that SRQ's CQ with
 *    qp_num = the target QP.
 *  - An SRQ of another domain is an invalid request: the sender's completion is
 *    IBV_WC_REM_INV_REQ_ERR.
 *  - RDMA WRITE over XRC: the rkey is checked against the named SRQ's PD; the data lands.
 *  - ibv_open_qp(3): another handle to the target QP by number within the domain.
 *  - ibv_create_qp(3), ibv_get_async_event(3): a target QP takes its receives from XRC
 *    SRQs, so entering the error state it raises IBV_EVENT_QP_LAST_WQE_REACHED, as a QP
 *    attached to an SRQ does (once: not again when moved to ERR again); a target moved to
 *    ERR by an invalid request raises IBV_EVENT_QP_REQ_ERR, then LAST_WQE_REACHED.
 * Prints "N failures". */
#include "common.h"
#include <poll.h>
#include <unistd.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *at, int mask)
{
	return ibv_modify_qp(qp, at, mask | IBV_QP_STATE);
}

/* RESET -> RTS for the kernel's XRC masks: the initiator's RTR takes no responder
 * attributes, the target's RTS only the timeout and SQ PSN. */
static int xrc_connect(struct ibv_qp *qp, uint32_t dest)
{
	int send = qp->qp_type == IBV_QPT_XRC_SEND;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
				 .port_num = 1,
				 .qp_access_flags = send ? 0 : IBV_ACCESS_REMOTE_WRITE};
	if (modify(qp, &at, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dest;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.hop_limit = 64;
	at.ah_attr.port_num = 1;
	int rtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (!send)
		rtr |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (modify(qp, &at, rtr))
		return 2;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	int rts = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (send)
		rts |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (modify(qp, &at, rts))
		return 3;
	return 0;
}

/* The next async event of ctx (at most 10 s), acknowledged: its type, or -1. */
static int next_async(struct ibv_async_event *out)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&pfd, 1, 10000) != 1 || ibv_get_async_event(ctx, out))
		return -1;
	ibv_ack_async_event(out);
	return out->event_type;
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *xrcd, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 16, .max_sge = 1},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
						      IBV_SRQ_INIT_ATTR_PD |
						      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
					 .srq_type = IBV_SRQT_XRC,
					 .pd = pd,
					 .xrcd = xrcd,
					 .cq = cq};
	return ibv_create_srq_ex(ctx, &a);
}

static struct ibv_qp *xrc_recv_qp(struct ibv_xrcd *xrcd)
{
	struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_RECV,
					.comp_mask = IBV_QP_INIT_ATTR_XRCD,
					.xrcd = xrcd};
	return ibv_create_qp_ex(ctx, &a);
}

static struct ibv_qp *xrc_send_qp(struct ibv_cq *cq, int wr_api)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = cq,
					.cap = {.max_send_wr = 16, .max_send_sge = 1},
					.qp_type = IBV_QPT_XRC_SEND,
					.sq_sig_all = 1,
					.comp_mask = IBV_QP_INIT_ATTR_PD,
					.pd = pd};
	if (wr_api) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	}
	return ibv_create_qp_ex(ctx, &a);
}

static int post_srq(struct ibv_srq *srq, struct ibv_mr *mr, char *addr, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

static int xrc_send(struct ibv_qp *qp, struct ibv_mr *mr, char *addr, uint32_t len,
		    uint32_t srqn, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND},
			   *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	return ibv_post_send(qp, &wr, &bad);
}

int main(void)
{
	ctx = open_first();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.device_cap_flags & IBV_DEVICE_XRC, "IBV_DEVICE_XRC in %#x", da.device_cap_flags);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_cq *cq1 = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	char *buf = aligned_alloc(4096, 8192);
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(pd && scq && cq1 && cq2 && mr, "setup: errno %d", errno);
	if (!pd || !scq || !cq1 || !cq2 || !mr)
		return 1;

	/* ibv_open_xrcd(3): fds and O_CREAT. */
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
						     IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = -1,
					.oflags = O_CREAT};
	struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
	struct ibv_xrcd *other = ibv_open_xrcd(ctx, &xa);
	CHECK(xrcd && other && xrcd != other, "fd -1, O_CREAT: two domains of their own (%d)",
	      errno);
	char path[] = "/tmp/softroce-xrcd-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);
	xa.fd = fd;
	xa.oflags = 0;
	errno = 0;
	CHECK(ibv_open_xrcd(ctx, &xa) == NULL && errno == EINVAL,
	      "a file without a domain, no O_CREAT: EINVAL (%d)", errno);
	xa.oflags = O_CREAT;
	struct ibv_xrcd *f1 = ibv_open_xrcd(ctx, &xa);
	xa.oflags = 0;
	struct ibv_xrcd *f2 = ibv_open_xrcd(ctx, &xa);
	CHECK(f1 && f1 == f2, "the same file: the same domain");
	CHECK(ibv_close_xrcd(f2) == 0 && ibv_close_xrcd(f1) == 0, "each open is closed");
	close(fd);

	/* ibv_create_srq_ex(3), ibv_get_srq_num(3). */
	struct ibv_srq *s1 = xrc_srq(xrcd, cq1), *s2 = xrc_srq(xrcd, cq2);
	struct ibv_srq *foreign = xrc_srq(other, cq2);
	uint32_t n1 = 0, n2 = 0, nf = 0;
	CHECK(s1 && s2 && foreign, "XRC SRQs: errno %d", errno);
	if (!s1 || !s2 || !foreign)
		return 1;
	CHECK(ibv_get_srq_num(s1, &n1) == 0 && ibv_get_srq_num(s2, &n2) == 0 &&
		      ibv_get_srq_num(foreign, &nf) == 0,
	      "get_srq_num");
	CHECK(n1 && n2 && nf && n1 != n2 && n1 != nf && n2 != nf, "distinct numbers %u %u %u", n1,
	      n2, nf);

	/* ibv_close_xrcd(3): EBUSY while an SRQ uses the domain. */
	CHECK(ibv_close_xrcd(xrcd) == EBUSY, "close_xrcd with an SRQ: EBUSY");

	/* ibv_create_qp_ex(3): the target has no send or receive queue. */
	struct ibv_qp *tgt = xrc_recv_qp(xrcd), *ini = xrc_send_qp(scq, 0);
	CHECK(tgt && ini, "XRC QPs: errno %d", errno);
	if (!tgt || !ini)
		return 1;
	CHECK(tgt->pd == NULL && tgt->send_cq == NULL && tgt->recv_cq == NULL,
	      "the target has no PD or CQs");
	CHECK(xrc_connect(tgt, ini->qp_num) == 0, "target to RTS");
	CHECK(xrc_connect(ini, tgt->qp_num) == 0, "initiator to RTS");
	CHECK(xrc_send(tgt, mr, buf, 8, n1, 1) != 0, "ibv_post_send on XRC_RECV fails");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(tgt, &rwr, &rbad) != 0, "ibv_post_recv on XRC_RECV fails");
	CHECK(ibv_post_recv(ini, &rwr, &rbad) != 0, "ibv_post_recv on XRC_SEND fails");

	/* Two SRQs of one domain, one initiator, one target: each send lands in the SRQ it
	 * names, completing on that SRQ's CQ. */
	CHECK(post_srq(s1, mr, buf + 1024, 11) == 0 && post_srq(s2, mr, buf + 2048, 22) == 0,
	      "post_srq_recv");
	strcpy(buf, "to-srq-1");
	strcpy(buf + 64, "to-srq-2");
	CHECK(xrc_send(ini, mr, buf, 9, n2, 2) == 0 && xrc_send(ini, mr, buf + 64, 9, n1, 1) == 0,
	      "post_send with remote_srqn");
	struct ibv_wc wc[4];
	CHECK(poll_n(scq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[1].status == IBV_WC_SUCCESS,
	      "both sends complete");
	CHECK(poll_n(cq1, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 11 &&
		      wc[0].qp_num == tgt->qp_num && wc[0].byte_len == 9,
	      "SRQ 1's CQ: status %d wr_id %llu qp_num %u", wc[0].status,
	      (unsigned long long)wc[0].wr_id, wc[0].qp_num);
	CHECK(strcmp(buf + 1024, "to-srq-2") == 0, "SRQ 1 got the send naming it: %s",
	      buf + 1024);
	CHECK(poll_n(cq2, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 22,
	      "SRQ 2's CQ");
	CHECK(strcmp(buf + 2048, "to-srq-1") == 0, "SRQ 2 got the send naming it: %s",
	      buf + 2048);

	/* ibv_wr_set_xrc_srqn(3): the extended API names the SRQ too. */
	struct ibv_qp *wini = xrc_send_qp(scq, 1), *wtgt = xrc_recv_qp(xrcd);
	CHECK(wini && wtgt, "QPs for the WR API: errno %d", errno);
	if (wini && wtgt) {
		CHECK(xrc_connect(wtgt, wini->qp_num) == 0 && xrc_connect(wini, wtgt->qp_num) == 0,
		      "connect");
		CHECK(post_srq(s2, mr, buf + 2048, 23) == 0, "post_srq_recv");
		strcpy(buf, "wr-api");
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(wini);
		ibv_wr_start(qx);
		qx->wr_id = 5;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qx);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 7);
		ibv_wr_set_xrc_srqn(qx, n2);
		CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
		CHECK(poll_n(scq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS, "sent");
		CHECK(poll_n(cq2, wc, 1) == 1 && wc[0].wr_id == 23 &&
			      wc[0].qp_num == wtgt->qp_num,
		      "received on SRQ 2 through the second target");
		CHECK(strcmp(buf + 2048, "wr-api") == 0, "data: %s", buf + 2048);
		ibv_destroy_qp(wini);
		ibv_destroy_qp(wtgt);
	}

	/* RDMA WRITE over XRC: the rkey's region is in the named SRQ's PD. */
	struct ibv_sge wsge = {.addr = (uintptr_t)buf, .length = 6, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 3, .sg_list = &wsge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE},
			   *bad;
	w.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	w.wr.rdma.rkey = mr->rkey;
	w.qp_type.xrc.remote_srqn = n1;
	strcpy(buf, "write");
	CHECK(ibv_post_send(ini, &w, &bad) == 0, "post RDMA WRITE");
	CHECK(poll_n(scq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS, "write completes: %s",
	      ibv_wc_status_str(wc[0].status));
	CHECK(strcmp(buf + 4096, "write") == 0, "written: %s", buf + 4096);

	/* ibv_open_qp(3): the target by number within its domain. */
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						   IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = tgt->qp_num,
				      .xrcd = xrcd,
				      .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened && opened->qp_num == tgt->qp_num && opened->qp_type == IBV_QPT_XRC_RECV,
	      "open_qp: errno %d", errno);
	oa.xrcd = other;
	errno = 0;
	CHECK(ibv_open_qp(ctx, &oa) == NULL && errno == EINVAL,
	      "open_qp in another domain: EINVAL (%d)", errno);
	if (opened)
		CHECK(ibv_destroy_qp(opened) == 0, "destroy the opened handle");

	/* ibv_get_async_event(3): a target entering ERR has reached its last WQE. */
	struct ibv_async_event ev;
	struct ibv_qp *tgt2 = xrc_recv_qp(xrcd);
	CHECK(tgt2 && xrc_connect(tgt2, ini->qp_num) == 0, "a second target in RTS: errno %d",
	      errno);
	if (tgt2) {
		struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
		CHECK(ibv_modify_qp(tgt2, &err, IBV_QP_STATE) == 0, "target to ERR");
		int got = next_async(&ev);
		CHECK(got == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == tgt2,
		      "IBV_EVENT_QP_LAST_WQE_REACHED for the target in ERR: got %d", got);
		CHECK(ibv_modify_qp(tgt2, &err, IBV_QP_STATE) == 0, "ERR again");
		struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
		CHECK(poll(&pfd, 1, 200) == 0, "LAST_WQE_REACHED once per entry into ERR");
		CHECK(ibv_destroy_qp(tgt2) == 0, "destroy the second target");
	}

	/* An SRQ of another domain: an invalid request for the sender. */
	CHECK(post_srq(foreign, mr, buf + 3072, 33) == 0, "post to the foreign SRQ");
	CHECK(xrc_send(ini, mr, buf, 9, nf, 4) == 0, "post_send naming the foreign SRQ");
	CHECK(poll_n(scq, wc, 1) == 1 && wc[0].status == IBV_WC_REM_INV_REQ_ERR,
	      "IBV_WC_REM_INV_REQ_ERR: %s", ibv_wc_status_str(wc[0].status));
	CHECK(poll_n_within(cq2, wc, 1, 100) == 0, "nothing received on the foreign SRQ");
	int got = next_async(&ev);
	CHECK(got == IBV_EVENT_QP_REQ_ERR && ev.element.qp == tgt,
	      "the target refused an invalid request: IBV_EVENT_QP_REQ_ERR, got %d", got);
	got = next_async(&ev);
	CHECK(got == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == tgt,
	      "then IBV_EVENT_QP_LAST_WQE_REACHED, got %d", got);

	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "destroy QPs");
	CHECK(ibv_close_xrcd(xrcd) == EBUSY, "close_xrcd with SRQs: EBUSY");
	CHECK(ibv_destroy_srq(s1) == 0 && ibv_destroy_srq(s2) == 0 &&
		      ibv_destroy_srq(foreign) == 0,
	      "destroy SRQs");
	CHECK(ibv_close_xrcd(xrcd) == 0 && ibv_close_xrcd(other) == 0, "close_xrcd: 0");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(cq1);
	ibv_destroy_cq(cq2);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("%d failures\n", failures);
	return failures != 0;
}
