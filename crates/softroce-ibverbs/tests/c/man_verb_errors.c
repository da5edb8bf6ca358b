/* Each verb's stated return convention and argument rules, from its man page (rdma-core
 * 44): "0 or the value of errno" verbs return the errno value; "-1 on error" verbs return
 * -1 with errno set; pointer verbs return NULL with errno set. Prints "N failures". */
#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd errno %d", errno);
	if (!pd)
		return 1;

	/* ibv_query_port(3): 0 or the errno value; RoCE ports say AHs need a GRH. */
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(pa.flags & IBV_QPF_GRH_REQUIRED, "IBV_QPF_GRH_REQUIRED on a RoCE port: %x", pa.flags);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "query_port of a missing port");
	/* ibv_query_gid(3), ibv_query_pkey(3): 0 on success, -1 on error. */
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, pa.gid_tbl_len, &gid) == -1, "GID index past the table");
	CHECK(ibv_query_gid(ctx, 2, 0, &gid) == -1, "GID of a missing port");
	__be16 pkey;
	errno = 0;
	CHECK(ibv_query_pkey(ctx, 1, pa.pkey_tbl_len, &pkey) == -1 && errno == ENOENT,
	      "P_Key index past the table: ENOENT, as rdma-core finds no sysfs file (errno %d)",
	      errno);

	/* ibv_reg_mr(3) of address 0: the kernel finds nothing mapped there (EFAULT). */
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT,
	      "reg_mr of address 0: EFAULT (errno %d)", errno);
	/* ibv_create_srq(3): 0 SGEs is taken as 1 (rxe rounds it up). */
	struct ibv_srq_init_attr zero_sge = {.attr = {.max_wr = 4, .max_sge = 0}};
	struct ibv_srq *srq0 = ibv_create_srq(pd, &zero_sge);
	CHECK(srq0 && zero_sge.attr.max_sge == 1, "an SRQ of 0 SGEs gets 1 (errno %d)", errno);
	if (srq0)
		ibv_destroy_srq(srq0);

	/* ibv_create_comp_channel(3): destroying a channel a CQ uses fails with EBUSY,
	 * returned as the value (rdma-core returns it without setting errno). */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(ch && cq, "channel and CQ: errno %d", errno);
	if (!ch || !cq)
		return 1;
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "a channel in use is busy");

	/* ibv_create_cq(3): comp_vector below num_comp_vectors, cqe within max_cqe. */
	errno = 0;
	CHECK(ibv_create_cq(ctx, 16, NULL, NULL, ctx->num_comp_vectors) == NULL && errno == EINVAL,
	      "comp_vector = num_comp_vectors: errno %d", errno);
	errno = 0;
	CHECK(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "cqe > max_cqe: errno %d", errno);
	/* ibv_req_notify_cq(3) states no error for a CQ without a channel (rdma-core: 0). */
	struct ibv_cq *plain = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(plain && ibv_req_notify_cq(plain, 0) == 0, "arming a CQ without a channel");
	/* ibv_resize_cq(3): at least the entries held; the cqe field follows. */
	CHECK(ibv_resize_cq(plain, 40) == 0 && plain->cqe >= 40, "resize_cq: cqe %d", plain->cqe);
	CHECK(ibv_resize_cq(plain, da.max_cqe + 1) == EINVAL, "resize beyond max_cqe");

	/* ibv_create_qp(3): only RC and UD QPs may use an SRQ; caps within the device's. */
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq && sia.attr.max_wr >= 4 && sia.attr.max_sge >= 1, "create_srq");
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = srq,
				      .cap = {.max_send_wr = 4, .max_send_sge = 1},
				      .qp_type = IBV_QPT_UC};
	errno = 0;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL, "UC QP with an SRQ: errno %d",
	      errno);
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *rc = ibv_create_qp(pd, &ia);
	ia.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &ia);
	CHECK(rc && ud, "RC and UD QPs with an SRQ: errno %d", errno);
	ia.srq = NULL;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = da.max_qp_wr + 1;
	errno = 0;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL, "max_send_wr > max_qp_wr");
	ia.cap.max_send_wr = 4;
	ia.cap.max_send_sge = da.max_sge + 1;
	errno = 0;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL, "max_send_sge > max_sge");
	ia.cap.max_send_sge = 1;
	/* A QP type verbs.h does not define is invalid; RAW_PACKET, which it defines, is not
	 * supported here (rxe lacks it too). */
	ia.qp_type = 99;
	errno = 0;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL, "QP type 99: EINVAL (errno %d)",
	      errno);
	ia.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EOPNOTSUPP,
	      "RAW_PACKET: EOPNOTSUPP (errno %d)", errno);
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_recv_wr = 2;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 16;
	struct ibv_qp *granted = ibv_create_qp(pd, &ia);
	CHECK(granted && ia.cap.max_send_wr >= 4 && ia.cap.max_recv_wr >= 2 &&
		      ia.cap.max_inline_data >= 16,
	      "create_qp updates cap with values >= those requested");

	/* Destroying what is in use fails with EBUSY (the errno value). */
	CHECK(ibv_destroy_srq(srq) == EBUSY, "an SRQ with QPs");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "a CQ with QPs");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "a PD with QPs");
	/* ibv_modify_qp(3) and ibv_query_qp(3): the errno value. */
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_RTS};
	CHECK(ibv_modify_qp(rc, &qa, IBV_QP_STATE) == EINVAL, "RESET -> RTS");
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(rc, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RESET &&
		      qi.srq == srq,
	      "query_qp");
	/* ibv_modify_srq(3): a limit beyond max_wr is invalid and nothing changes. */
	struct ibv_srq_attr sa = {.max_wr = 2, .srq_limit = 3};
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) == EINVAL, "limit > max_wr");
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0 && sa.max_wr >= 4,
	      "the refused modify changed nothing");
	/* ibv_create_ah(3): a destination the port cannot reach is refused. */
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.sgid_index = 0}};
	aa.grh.dgid.raw[0] = 0xfe;
	aa.grh.dgid.raw[1] = 0x80;
	aa.grh.dgid.raw[15] = 1;
	errno = 0;
	CHECK(ibv_create_ah(pd, &aa) == NULL && errno == EINVAL, "link-local dgid: errno %d", errno);
	aa.is_global = 0;
	errno = 0;
	CHECK(ibv_create_ah(pd, &aa) == NULL && errno == EINVAL, "no GRH: errno %d", errno);

	CHECK(ibv_destroy_qp(rc) == 0 && ibv_destroy_qp(ud) == 0 && ibv_destroy_qp(granted) == 0,
	      "destroy_qp");
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(plain) == 0,
	      "destroy srq, cqs");
	CHECK(ibv_destroy_comp_channel(ch) == 0 && ibv_dealloc_pd(pd) == 0, "destroy channel, pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
