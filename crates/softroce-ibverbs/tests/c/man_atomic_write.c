/* RDMA ATOMIC WRITE through the drop-in. rdma-core 44's man pages do not describe it; its
 * verbs.h does: IBV_QP_EX_WITH_ATOMIC_WRITE in send_ops_flags, ibv_wr_atomic_write(qp, rkey,
 * remote_addr, atomic_wr) with 8 bytes at atomic_wr, completion opcode IBV_WC_ATOMIC_WRITE.
 * The kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE (1 << 40 of device_cap_flags_ex, Linux 6.2)
 * advertises it. The rest follows rxe (rxe_resp.c): the peer QP must allow remote writes,
 * the target region must be remotely writable (IBV_ACCESS_REMOTE_WRITE, not ..._ATOMIC:
 * else IBV_WC_REM_ACCESS_ERR) and the address 8-byte aligned (else
 * IBV_WC_REM_INV_REQ_ERR). ibv_wr_post(3): "If the QP does not support all the requested
 * work request types then QP creation will fail" — a UC QP has no atomics. Prints
 * "N failures". */
#include "common.h"

#ifndef IB_UVERBS_DEVICE_ATOMIC_WRITE
#define IB_UVERBS_DEVICE_ATOMIC_WRITE (1ULL << 40)
#endif

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;

static struct ibv_qp *xqp(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr_ex xa = {.send_cq = cq,
					 .recv_cq = cq,
					 .cap = {.max_send_wr = 8,
						 .max_recv_wr = 8,
						 .max_send_sge = 1,
						 .max_recv_sge = 1},
					 .qp_type = type,
					 .comp_mask = IBV_QP_INIT_ATTR_PD |
						      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE |
							   IBV_QP_EX_WITH_RDMA_WRITE};
	return ibv_create_qp_ex(ctx, &xa);
}

/* One ATOMIC WRITE of `value` from a fresh QP to a fresh peer: its completion. */
static struct ibv_wc atomic_write(uint32_t rkey, uint64_t remote_addr, uint64_t value)
{
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	struct ibv_qp *a = xqp(IBV_QPT_RC), *b = xqp(IBV_QPT_RC);
	CHECK(a && b, "RC QPs with IBV_QP_EX_WITH_ATOMIC_WRITE: errno %d", errno);
	if (!a || !b)
		return wc;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	ibv_wr_start(qx);
	qx->wr_id = 7;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, rkey, remote_addr, &value);
	/* The 8 bytes were taken at the call: changing them now changes nothing. */
	value = ~value;
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete: errno %d", errno);
	CHECK(poll_n(cq, &wc, 1) == 1, "a completion");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	/* The peer's flush, if it went to the error state, is not this story's. */
	struct ibv_wc rest[8];
	poll_n_within(cq, rest, 8, 10);
	return wc;
}

int main(void)
{
	ctx = open_first();
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	CHECK(ax.device_cap_flags_ex & IB_UVERBS_DEVICE_ATOMIC_WRITE,
	      "device_cap_flags_ex %#llx advertises ATOMIC WRITE",
	      (unsigned long long)ax.device_cap_flags_ex);
	CHECK((ax.device_cap_flags_ex & 0xffffffffull) == ax.orig_attr.device_cap_flags,
	      "its low half is device_cap_flags");

	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	uint64_t *buf = aligned_alloc(4096, 4096), *ro = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	memset(ro, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *atomic_only = ibv_reg_mr(pd, ro, 4096,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(pd && cq && mr && atomic_only && ibv_query_gid(ctx, 1, 0, &gid) == 0,
	      "setup: errno %d", errno);
	if (!pd || !cq || !mr || !atomic_only)
		return 1;

	/* ibv_wr_post(3): a UC QP cannot carry an atomic. */
	errno = 0;
	CHECK(xqp(IBV_QPT_UC) == NULL && errno == EOPNOTSUPP,
	      "a UC QP with IBV_QP_EX_WITH_ATOMIC_WRITE: EOPNOTSUPP (%d)", errno);

	/* The 8 bytes land at the target, and nowhere else. */
	struct ibv_wc wc = atomic_write(mr->rkey, (uintptr_t)&buf[8], 0x1122334455667788ull);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE &&
		      wc.byte_len == 8 && wc.wr_id == 7,
	      "completion: %s, opcode %d, byte_len %u", ibv_wc_status_str(wc.status), wc.opcode,
	      wc.byte_len);
	CHECK(buf[8] == 0x1122334455667788ull && buf[7] == 0 && buf[9] == 0,
	      "stored %#llx", (unsigned long long)buf[8]);

	/* A misaligned target: an invalid request (rxe's RESPST_ERR_MISALIGNED_ATOMIC). */
	wc = atomic_write(mr->rkey, (uintptr_t)buf + 100, 5);
	CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR, "misaligned: %s", ibv_wc_status_str(wc.status));
	CHECK(buf[12] == 0 && buf[13] == 0, "nothing written");

	/* The region must be remotely writable: remote atomic rights are not enough. */
	wc = atomic_write(atomic_only->rkey, (uintptr_t)&ro[0], 6);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "no IBV_ACCESS_REMOTE_WRITE: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(ro[0] == 0, "nothing written");

	/* A NULL operand fails the posting, as any bad work request in the batch does. */
	struct ibv_qp *a = xqp(IBV_QPT_RC);
	if (a) {
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
		ibv_wr_start(qx);
		ibv_wr_atomic_write(qx, mr->rkey, (uintptr_t)buf, NULL);
		CHECK(ibv_wr_complete(qx) == EINVAL, "NULL atomic_wr: EINVAL");
		ibv_destroy_qp(a);
	}

	ibv_dereg_mr(mr);
	ibv_dereg_mr(atomic_only);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	free(ro);
	printf("%d failures\n", failures);
	return failures != 0;
}
