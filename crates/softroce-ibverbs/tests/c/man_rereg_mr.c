/* ibv_rereg_mr(3), rule by rule: the access, PD and translation of a region change in
 * place and take effect for the next access; libibverbs' input checks answer
 * IBV_REREG_MR_ERR_INPUT with errno and leave the old region valid; a region with a bound
 * window is not re-registered (as ibv_dereg_mr refuses it, ibv_alloc_mw(3)). Also: a QP
 * moved to RESET leaves none of its unpolled completions behind (as mlx4/mlx5 clean their
 * CQs), so a QP brought back from ERR starts clean. Prints "N failures". */
#include "common.h"

static struct ibv_context *ctx;
static union ibv_gid gid;

struct pair {
	struct ibv_cq *ca, *cb;
	struct ibv_qp *a, *b;
};

static int make_pair(struct ibv_pd *pd, struct pair *p)
{
	p->ca = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->cb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->a = rc_qp(pd, p->ca, NULL);
	p->b = rc_qp(pd, p->cb, NULL);
	if (!p->a || !p->b)
		return 1;
	return connect_rc(p->a, p->b->qp_num, gid, 0) || connect_rc(p->b, p->a->qp_num, gid, 0);
}

static void drop_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->ca);
	ibv_destroy_cq(p->cb);
}

static uint8_t src[64];
static struct ibv_mr *src_mr;

/* RDMA WRITE of 8 bytes from `a` to `raddr` with `rkey`: the completion status. */
static int write8(struct pair *p, uint32_t rkey, void *raddr)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 8, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.rkey = rkey;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	struct ibv_wc wc;
	if (ibv_post_send(p->a, &wr, &bad))
		return -2;
	return poll_n(p->ca, &wc, 1) == 1 ? (int)wc.status : -1;
}

int main(void)
{
	ctx = open_first();
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd && pd2, "alloc_pd");
	if (!pd || !pd2)
		return 1;
	src_mr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	static uint8_t buf[4096], other[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(src_mr && mr, "reg_mr");
	if (!src_mr || !mr)
		return 1;
	struct pair p;
	CHECK(make_pair(pd, &p) == 0, "pair");

	/* Without remote write the WRITE is refused ... */
	CHECK(write8(&p, mr->rkey, buf) == IBV_WC_REM_ACCESS_ERR, "write before rereg");
	drop_pair(&p);
	make_pair(pd, &p);
	/* ... IBV_REREG_MR_CHANGE_ACCESS grants it: 0, and the WRITE lands. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0,
	      "rereg access: errno %d", errno);
	memcpy(src, "reregged", 8);
	CHECK(write8(&p, mr->rkey, buf + 8) == IBV_WC_SUCCESS, "write after rereg access");
	CHECK(memcmp(buf + 8, "reregged", 8) == 0, "landed");

	/* IBV_REREG_MR_CHANGE_TRANSLATION: mr->addr and length follow; the key opens the new
	 * range, not the old one. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, 1024, 0) == 0,
	      "rereg translation: errno %d", errno);
	CHECK(mr->addr == (void *)other && mr->length == 1024, "mr->addr/length updated");
	memcpy(src, "moved!!!", 8);
	CHECK(write8(&p, mr->rkey, other + 16) == IBV_WC_SUCCESS, "write into the new range");
	CHECK(memcmp(other + 16, "moved!!!", 8) == 0, "landed in the new range");
	/* Two receives wait on the target when the WRITE fails ... */
	struct ibv_sge rs = {.addr = (uintptr_t)src + 32, .length = 8, .lkey = src_mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 50, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0 && ibv_post_recv(p.b, &rwr, &rbad) == 0,
	      "post_recv");
	CHECK(write8(&p, mr->rkey, buf + 8) == IBV_WC_REM_ACCESS_ERR, "write into the old range");
	/* ... and are flushed when it stops. */
	struct ibv_wc wc;
	CHECK(poll_n(p.cb, &wc, 1) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 50,
	      "the first receive flushed: status %d", wc.status);
	/* RESET -> RTS brings the pair back with none of its previous life left to poll: the
	 * second flush is gone. */
	struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
	CHECK(ibv_modify_qp(p.a, &reset, IBV_QP_STATE) == 0 &&
		      ibv_modify_qp(p.b, &reset, IBV_QP_STATE) == 0,
	      "to RESET");
	CHECK(ibv_poll_cq(p.ca, 1, &wc) == 0 && ibv_poll_cq(p.cb, 1, &wc) == 0,
	      "no completions of the QP's previous life after RESET");
	CHECK(connect_rc(p.a, p.b->qp_num, gid, 0) == 0 && connect_rc(p.b, p.a->qp_num, gid, 0) == 0,
	      "back to RTS");
	CHECK(write8(&p, mr->rkey, other + 32) == IBV_WC_SUCCESS, "traffic after the restart");

	/* IBV_REREG_MR_CHANGE_PD: mr->pd follows; the QPs of the old PD lose the region. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0,
	      "rereg pd: errno %d", errno);
	CHECK(mr->pd == pd2, "mr->pd updated");
	CHECK(write8(&p, mr->rkey, other + 16) == IBV_WC_REM_ACCESS_ERR, "write from the old PD");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "the new PD is in use");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0, "rereg pd back");
	drop_pair(&p);

	/* Input errors: IBV_REREG_MR_ERR_INPUT with errno, the old region valid. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "unknown flag: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) ==
			      IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "translation without an address: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ) ==
			      IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "access without IBV_REREG_MR_CHANGE_ACCESS: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "remote write without local write: errno %d", errno);
	CHECK(mr->addr == (void *)other && mr->pd == pd, "the old region is unchanged");

	/* A region with a bound window keeps its registration. */
	struct ibv_mr *wmr = ibv_reg_mr(pd, buf, sizeof(buf),
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	make_pair(pd, &p);
	struct ibv_mw_bind b = {.wr_id = 3, .send_flags = IBV_SEND_SIGNALED};
	b.bind_info.mr = wmr;
	b.bind_info.addr = (uintptr_t)buf;
	b.bind_info.length = 64;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK(wmr && mw && ibv_bind_mw(p.b, mw, &b) == 0 && poll_n(p.cb, &wc, 1) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "bind");
	errno = 0;
	CHECK(ibv_rereg_mr(wmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EBUSY,
	      "rereg with a bound window: errno %d", errno);
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	drop_pair(&p);

	/* NOTES: "Even on a failure, the user still needs to call ibv_dereg_mr". */
	CHECK(ibv_dereg_mr(wmr) == 0 && ibv_dereg_mr(mr) == 0, "dereg after rereg");
	ibv_dereg_mr(src_mr);
	CHECK(ibv_dealloc_pd(pd2) == 0 && ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures != 0;
}
