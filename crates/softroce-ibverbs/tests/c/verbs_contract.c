/* The C-visible contract of the drop-in libibverbs, exercised the way applications compile
 * against <infiniband/verbs.h>: inline wrappers through ctx->ops and verbs_context, NULL
 * checks, documented errors for what the emulator lacks, errno/bad_wr conventions, the
 * compat ibv_query_port entry, completion channels and async fds that are real fds, and a
 * SEND between two QPs of one device. Prints "N failures" and exits non-zero on any. */
#include "common.h"

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1 && list[1] == NULL, "n=%d", n);
	if (!list || n < 1)
		return 1;
	CHECK(strcmp(ibv_get_device_name(list[0]), "softroce0") == 0, "name");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL, "open errno %d", errno);
	if (!ctx)
		return 1;
	CHECK(ctx->device == list[0] && ctx->num_comp_vectors >= 1, "context fields");

	/* NULL pointers are refused, not dereferenced. */
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "dealloc_pd(NULL)");
	CHECK(ibv_destroy_cq(NULL) == EINVAL, "destroy_cq(NULL)");
	CHECK(ibv_destroy_qp(NULL) == EINVAL, "destroy_qp(NULL)");
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "alloc_pd(NULL) errno %d", errno);
	CHECK(ibv_query_device(ctx, NULL) == EINVAL, "query_device(NULL)");

	/* Queries: the verbs_context entries and the exported compat ones. */
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.orig_attr.phys_port_cnt == 1 && dx.orig_attr.vendor_part_id == 0,
	      "attributes");
	struct ibv_port_attr pa;
	memset(&pa, 0xab, sizeof(pa));
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.port_cap_flags2 == 0, "query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.gid_tbl_len == 2,
	      "port state %d link %d", pa.state, pa.link_layer);
	memset(&pa, 0xab, sizeof(pa));
	/* The exported symbol (old headers) fills the 48-byte compat struct only. */
	CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pa) == 0 && pa.port_cap_flags2 == 0xabab &&
		      pa.state == IBV_PORT_ACTIVE,
	      "compat query_port wrote past 48 bytes: %x", pa.port_cap_flags2);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2 does not exist");
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		      ge.gid.raw[10] == 0xff && ge.gid.raw[11] == 0xff && ge.gid.raw[12] == 127,
	      "GID 0 is the RoCEv2 IPv4-mapped GID");
	struct ibv_gid_entry table[4];
	CHECK(ibv_query_gid_table(ctx, table, 4, 0) == 2 && table[1].gid_index == 1 &&
		      memcmp(&table[1].gid, &ge.gid, 16) == 0,
	      "GID table: the address GID at 0 and at rxe's 1");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 && memcmp(&gid, &ge.gid, 16) == 0, "query_gid");
	CHECK(ibv_query_gid(ctx, 1, 7, &gid) == -1, "GID index 7 does not exist");
	__be16 pkey = 0;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "pkey");

	/* What the emulator lacks fails with the documented error. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL && pd->context == ctx, "alloc_pd");
	struct ibv_cq_init_attr_ex cqx = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cqx) == NULL && errno == EOPNOTSUPP,
	      "create_cq_ex with CVLAN: errno %d", errno);
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, 0) == NULL && errno == EOPNOTSUPP,
	      "reg_dmabuf_mr %d", errno);
	errno = 0;
	/* ibv_open_xrcd(3): fd and oflags must both be given (rdma-core's EINVAL). */
	CHECK(ibv_open_xrcd(ctx, &(struct ibv_xrcd_init_attr){0}) == NULL && errno == EINVAL,
	      "open_xrcd without fd and oflags %d", errno);

	/* Memory regions: optional access bits accepted, IBTA rules enforced. */
	char *buf = aligned_alloc(4096, 8192);
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_RELAXED_ORDERING);
	CHECK(mr && mr->lkey && mr->addr == buf && mr->length == 8192 && mr->pd == pd, "reg_mr");
	if (!mr)
		return 1;
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE: errno %d", errno);
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "a PD with an MR is busy");

	/* A completion channel with a real, pollable fd. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0 && ch->context == ctx, "channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	CHECK(cq && cq->cqe >= 16 && cq->channel == ch && cq->cq_context == (void *)0x1234,
	      "create_cq");
	if (!ch || !cq)
		return 1;
	/* ibv_destroy_comp_channel(3): 0 or the value of errno (rdma-core returns EBUSY). */
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "a channel with a CQ is busy");

	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1,
					      .max_inline_data = 64},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	CHECK(a && b && a->qp_num != b->qp_num && a->state == IBV_QPS_RESET &&
		      ia.cap.max_inline_data >= 64,
	      "create_qp");
	if (!a || !b)
		return 1;
	struct ibv_sge sge = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "post_send in RESET");
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0, "connect");
	CHECK(a->state == IBV_QPS_RTS, "qp->state follows modify_qp");

	/* Arm, check the non-blocking channel is empty, then SEND a -> b. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "empty non-blocking channel: errno %d", errno);
	struct ibv_sge rsge = {(uintptr_t)buf + 4096, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &rsge, .num_sge = 1}, *rbad = NULL;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	memcpy(buf, "hello, softroce!", 16);
	CHECK(ibv_post_send(a, &wr, &bad) == 0, "post_send");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1, "the channel fd becomes readable");
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == (void *)0x1234,
	      "get_cq_event");
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc[4];
	CHECK(poll_n(cq, wc, 2) == 2, "two completions");
	int send_i = wc[0].opcode == IBV_WC_SEND ? 0 : 1;
	CHECK(wc[send_i].wr_id == 7 && wc[send_i].status == IBV_WC_SUCCESS &&
		      wc[send_i].qp_num == a->qp_num,
	      "send completion: %s", ibv_wc_status_str(wc[send_i].status));
	CHECK(wc[1 - send_i].wr_id == 9 && wc[1 - send_i].opcode == IBV_WC_RECV &&
		      wc[1 - send_i].byte_len == 16 && wc[1 - send_i].qp_num == b->qp_num,
	      "recv completion");
	CHECK(memcmp(buf + 4096, "hello, softroce!", 16) == 0, "payload arrived");

	/* A list whose second WR is bad: the first is posted, bad_wr names the second. */
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	struct ibv_send_wr wr2 = wr;
	wr2.opcode = 99;
	wr.next = &wr2;
	bad = NULL;
	CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr2, "bad_wr names the bad WR");
	CHECK(poll_n(cq, wc, 2) == 2, "the good WR completed");
	wr.next = NULL;

	/* Inline data is copied at post time. */
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	char inl[8] = "inline!";
	struct ibv_sge isge = {(uintptr_t)inl, 8, 0};
	struct ibv_send_wr iwr = {.wr_id = 11,
				  .sg_list = &isge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK(ibv_post_send(a, &iwr, &bad) == 0, "inline post_send");
	memset(inl, 0, sizeof(inl));
	CHECK(poll_n(cq, wc, 2) == 2 && memcmp(buf + 4096, "inline!", 8) == 0, "inline payload");

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi) == 0 &&
		      qa.qp_state == IBV_QPS_RTS && qi.send_cq == cq && qi.qp_type == IBV_QPT_RC &&
		      qa.dest_qp_num == b->qp_num,
	      "query_qp");

	/* The async fd is a real fd; nothing is pending. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ae;
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, "async errno %d", errno);

	CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0, "wc_status_str");
	CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0, "port_state_str");

	/* The ibv_wr_* API on QPs made by ibv_create_qp_ex with send ops. */
	CHECK(ibv_qp_to_qp_ex(a) == NULL, "a plain QP has no ibv_qp_ex");
	struct ibv_cq_init_attr_ex ecq_attr = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *ecq = ibv_create_cq_ex(ctx, &ecq_attr);
	CHECK(ecq != NULL, "create_cq_ex errno %d", errno);
	if (!ecq)
		return 1;
	struct ibv_qp_init_attr_ex xa = {.send_cq = ibv_cq_ex_to_cq(ecq),
					 .recv_cq = ibv_cq_ex_to_cq(ecq),
					 .cap = ia.cap,
					 .qp_type = IBV_QPT_RC,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_TSO};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &xa) == NULL && errno == EOPNOTSUPP, "TSO: errno %d", errno);
	xa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
	struct ibv_qp *x = ibv_create_qp_ex(ctx, &xa);
	struct ibv_qp *y = ibv_create_qp_ex(ctx, &xa);
	CHECK(x && y, "create_qp_ex errno %d", errno);
	if (x && y) {
		struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(x);
		CHECK(qpx && &qpx->qp_base == x, "qp_to_qp_ex");
		CHECK(connect_rc(x, y->qp_num, gid, 0) == 0 && connect_rc(y, x->qp_num, gid, 0) == 0, "connect x,y");
		ibv_wr_start(qpx);
		qpx->wr_id = 21;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)buf + 6000);
		char msg[8] = "wr-api!";
		ibv_wr_set_inline_data(qpx, msg, 8);
		memset(msg, 0, sizeof(msg)); /* inline data is copied by the setter */
		CHECK(ibv_wr_complete(qpx) == 0, "wr_complete");
		/* ... and its completion through the ibv_cq_ex polling API. */
		struct ibv_poll_cq_attr pattr = {0};
		int rc;
		time_t end = time(NULL) + 10;
		while ((rc = ibv_start_poll(ecq, &pattr)) == ENOENT && time(NULL) < end)
			;
		CHECK(rc == 0 && ecq->wr_id == 21 && ecq->status == IBV_WC_SUCCESS &&
			      ibv_wc_read_opcode(ecq) == IBV_WC_RDMA_WRITE &&
			      ibv_wc_read_qp_num(ecq) == x->qp_num,
		      "RDMA WRITE completion via start_poll: rc %d", rc);
		if (rc == 0) {
			CHECK(ibv_next_poll(ecq) == ENOENT, "one completion only");
			ibv_end_poll(ecq);
		}
		CHECK(memcmp(buf + 6000, "wr-api!", 8) == 0, "written");
		ibv_wr_start(qpx);
		ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf, 8);
		CHECK(ibv_wr_complete(qpx) == EINVAL, "a setter before any opcode");
		CHECK(ibv_destroy_qp(x) == 0 && ibv_destroy_qp(y) == 0, "destroy x,y");
	}
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(ecq)) == 0, "destroy the extended CQ");

	/* A second context on the same device shares it (one UDP socket per device). */
	struct ibv_context *ctx2 = ibv_open_device(list[0]);
	CHECK(ctx2 && ctx2 != ctx, "second open errno %d", errno);
	if (ctx2) {
		struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
		CHECK(pd2 && pd2->context == ctx2, "alloc_pd on the second context: errno %d", errno);
		CHECK(pd2 && ibv_dealloc_pd(pd2) == 0, "dealloc_pd");
		CHECK(ibv_close_device(ctx2) == 0, "close the second context");
	}
	/* The first context still works after the second closed. */
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv");
	CHECK(ibv_post_send(a, &wr, &bad) == 0, "post_send after the second context closed");
	CHECK(poll_n(cq, wc, 2) == 2, "completions after the second context closed");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg/dealloc");
	CHECK(ibv_close_device(ctx) == 0, "close");
	ibv_free_device_list(list);
	free(buf);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
