/* Thread and parent domains, rule by rule: ibv_alloc_td(3) and ibv_alloc_parent_domain(3).
 * A parent domain "is completely interchangeable with the struct ibv_pd used to create it":
 * objects made with either work together. Prints "N failures". */
#include "common.h"

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)size, (void)alignment, (void)resource_type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)ptr, (void)resource_type;
}

int main(void)
{
	struct ibv_context *ctx = open_first();
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd");
	if (!pd)
		return 1;

	/* ibv_alloc_td(3): a thread domain of the context; NULL with errno otherwise. */
	struct ibv_td_init_attr ta = {0};
	struct ibv_td *td = ibv_alloc_td(ctx, &ta);
	CHECK(td && td->context == ctx, "alloc_td: errno %d", errno);
	ta.comp_mask = 1;
	errno = 0;
	CHECK(ibv_alloc_td(ctx, &ta) == NULL && errno == EINVAL, "unknown comp_mask: %d", errno);

	/* ibv_alloc_parent_domain(3): allocators need both functions. */
	struct ibv_parent_domain_init_attr pa = {
		.pd = pd,
		.td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = my_alloc,
		.pd_context = ctx,
	};
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL,
	      "allocators without free: errno %d", errno);
	pa.free = my_free;
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(parent && parent->context == ctx, "alloc_parent_domain: errno %d", errno);
	if (!td || !parent)
		return 1;

	/* Interchangeable: a region of the parent domain, a QP of each, an extended CQ of the
	 * parent domain; a SEND from the parent domain's QP lands through the PD's QP. */
	static uint8_t buf[128];
	struct ibv_mr *mr = ibv_reg_mr(parent, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && mr->pd == parent, "reg_mr on the parent domain");
	struct ibv_cq_init_attr_ex cqa = {.cqe = 8,
					  .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					  .parent_domain = parent};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cqa);
	CHECK(cqx != NULL, "create_cq_ex with the parent domain: errno %d", errno);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *a = rc_qp(parent, cqx ? ibv_cq_ex_to_cq(cqx) : cq, NULL);
	struct ibv_qp *b = rc_qp(pd, cq, NULL);
	CHECK(a && b && a->pd == parent, "QPs on the parent domain and on the PD");
	if (!a || !b || !mr)
		return 1;
	CHECK(connect_rc(a, b->qp_num, gid, 0) == 0 && connect_rc(b, a->qp_num, gid, 0) == 0,
	      "connect");
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 64, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "post_recv with the parent domain's region");
	memcpy(buf, "parent domain", 14);
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 14, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	CHECK(ibv_post_send(a, &swr, &sbad) == 0, "post_send");
	struct ibv_wc wc;
	CHECK(poll_n(cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2,
	      "received: status %d", wc.status);
	CHECK(memcmp(buf + 64, "parent domain", 14) == 0, "the data landed");

	/* The PD and the thread domain are in use while the parent domain exists. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd of the parent domain's PD");
	CHECK(ibv_dealloc_td(td) == EBUSY, "dealloc_td of the parent domain's TD");

	/* ibv_alloc_parent_domain(3): "All resources created with the parent domain should be
	 * destroyed prior to deallocating the parent domain"; then everything goes, in order. */
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0 && ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_dealloc_pd(parent) == 0, "dealloc_pd of the parent domain");
	CHECK(ibv_dealloc_td(td) == 0, "dealloc_td");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures != 0;
}
