/* ibv_poll_cq(3), IBV_WC_LOC_PROT_ERR: "This event is generated when a user attempts to
 * access an address outside of the registered memory region. For example, this will
 * happen if the Lkey does not match the address in the WR." So such a WR is posted
 * (ibv_post_send(3) fails only for what it lists) and completes with that status, whether
 * it gathers (SEND, WRITE) or scatters (READ results into a region without local write);
 * an RC QP is in the Error state afterwards and flushes what follows. Prints "N failures". */
#include "common.h"

static struct ibv_cq *cq;

int main(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	char *host = aligned_alloc(4096, 8192);
	memset(host, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, host, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *ro = ibv_reg_mr(pd, host + 4096, 4096, 0);
	union ibv_gid gid;
	CHECK(pd && cq && mr && ro && ibv_query_gid(ctx, 1, 0, &gid) == 0, "setup: errno %d", errno);
	if (!mr || !ro)
		return 1;
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp_attr acc = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	struct {
		const char *what;
		enum ibv_wr_opcode op;
		uint64_t addr;
		uint32_t lkey;
	} cases[] = {
		{"WRITE gathering past its region's end", IBV_WR_RDMA_WRITE,
		 (uintptr_t)host + 4090, mr->lkey},
		{"WRITE with an lkey naming no region", IBV_WR_RDMA_WRITE, (uintptr_t)host,
		 mr->lkey ^ 0x5a5a00},
		{"SEND from an address the lkey does not cover", IBV_WR_SEND, 512, mr->lkey},
		{"READ into a region without local write", IBV_WR_RDMA_READ,
		 (uintptr_t)host + 4096, ro->lkey},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
		CHECK(a && b, "QPs");
		if (!a || !b)
			return 1;
		CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0 &&
			      ibv_modify_qp(b, &acc, IBV_QP_ACCESS_FLAGS) == 0,
		      "connect");
		struct ibv_sge rsge = {(uintptr_t)host + 2048, 64, mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 100, .sg_list = &rsge, .num_sge = 1}, *rbad;
		CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "a receive for the SEND");
		struct ibv_sge sge = {cases[i].addr, 16, cases[i].lkey};
		struct ibv_send_wr wr = {.wr_id = 1,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = cases[i].op,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)host + 100;
		wr.wr.rdma.rkey = mr->rkey;
		struct ibv_sge ok = {(uintptr_t)host, 8, mr->lkey};
		struct ibv_send_wr next = {.wr_id = 2,
					   .sg_list = &ok,
					   .num_sge = 1,
					   .opcode = IBV_WR_RDMA_WRITE,
					   .send_flags = IBV_SEND_SIGNALED};
		next.wr.rdma.remote_addr = (uintptr_t)host + 200;
		next.wr.rdma.rkey = mr->rkey;
		wr.next = &next;
		CHECK(ibv_post_send(a, &wr, &bad) == 0, "%s: posted", cases[i].what);
		struct ibv_wc wc[2];
		int n = poll_n(cq, wc, 2);
		CHECK(n == 2 && wc[0].wr_id == 1 && wc[0].status == IBV_WC_LOC_PROT_ERR,
		      "%s: IBV_WC_LOC_PROT_ERR (%d completions, first %s)", cases[i].what, n,
		      n ? ibv_wc_status_str(wc[0].status) : "-");
		CHECK(n == 2 && wc[1].wr_id == 2 && wc[1].status == IBV_WC_WR_FLUSH_ERR,
		      "%s: the next WR is flushed (%s)", cases[i].what,
		      n == 2 ? ibv_wc_status_str(wc[1].status) : "-");
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;
		CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_ERR,
		      "%s: the QP is in the Error state", cases[i].what);
		ibv_destroy_qp(a);
		ibv_destroy_qp(b);
		/* b's receive was flushed by its destroy; drain whatever it left. */
		struct ibv_wc drain[4];
		while (ibv_poll_cq(cq, 4, drain) > 0)
			;
	}
	CHECK(ibv_dereg_mr(ro) == 0 && ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 &&
		      ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
