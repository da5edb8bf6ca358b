/* Memory windows, rule by rule, from the man pages (rdma-core 44): ibv_alloc_mw(3),
 * ibv_bind_mw(3), ibv_post_send(3) (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV,
 * IBV_WR_SEND_WITH_INV), ibv_poll_cq(3) (IBV_WC_WITH_INV), ibv_query_device(3)
 * (IBV_DEVICE_MEM_WINDOW*, max_mw). Remote access through a window's R_Key is checked
 * against the window (its range, rights, and for type 2 its QP), not only the region
 * under it (rxe lets a WRITE land outside the window). Prints "N failures". */
#include "common.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

/* Two RC QPs connected to each other, each with its own CQ: `a` issues, `b` is the
 * target whose windows `a` uses. */
struct pair {
	struct ibv_cq *ca, *cb;
	struct ibv_qp *a, *b;
};

static int make_pair(struct pair *p)
{
	p->ca = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->cb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!p->ca || !p->cb)
		return 1;
	p->a = rc_qp(pd, p->ca, NULL);
	p->b = rc_qp(pd, p->cb, NULL);
	if (!p->a || !p->b)
		return 2;
	return connect_rc(p->a, p->b->qp_num, gid, 0) || connect_rc(p->b, p->a->qp_num, gid, 0);
}

static void drop_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->ca);
	ibv_destroy_cq(p->cb);
}

/* Post one signaled WR on `qp` and return its completion's status (-1: none in 10 s,
 * -2: the post failed); the completion in *wc. */
static int run(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *wr, struct ibv_wc *wc)
{
	struct ibv_send_wr *bad = NULL;
	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(qp, wr, &bad))
		return -2;
	return poll_n(cq, wc, 1) == 1 ? (int)wc->status : -1;
}

static uint8_t src[64];
static struct ibv_mr *src_mr;

/* RDMA WRITE (or READ) of `len` bytes from `a` to `raddr` with `rkey`: the status. */
static int access_op(struct pair *p, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr,
		     uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op};
	wr.wr.rdma.rkey = rkey;
	wr.wr.rdma.remote_addr = raddr;
	struct ibv_wc wc;
	return run(p->a, p->ca, &wr, &wc);
}

/* Bind type 2 window `mw` on `qp` to `len` bytes at `addr` of `mr`: the completion status;
 * *rkey gets the key it asked for. */
static int bind2(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw, struct ibv_mr *mr,
		 void *addr, uint64_t len, unsigned int access, uint32_t *rkey)
{
	struct ibv_send_wr wr = {.wr_id = 21, .opcode = IBV_WR_BIND_MW};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(*rkey);
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	struct ibv_wc wc;
	int st = run(qp, cq, &wr, &wc);
	if (st == IBV_WC_SUCCESS && (wc.opcode != IBV_WC_BIND_MW || wc.wr_id != 21))
		return 100;
	*rkey = wr.bind_mw.rkey;
	return st;
}

/* ibv_bind_mw of type 1 window `mw` through `qp`: the verb's return; the completion's
 * status in *st. */
static int bind1(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw, struct ibv_mr *mr,
		 void *addr, uint64_t len, unsigned int access, int *st)
{
	struct ibv_mw_bind b = {.wr_id = 11, .send_flags = IBV_SEND_SIGNALED};
	b.bind_info.mr = mr;
	b.bind_info.addr = (uintptr_t)addr;
	b.bind_info.length = len;
	b.bind_info.mw_access_flags = access;
	int rc = ibv_bind_mw(qp, mw, &b);
	struct ibv_wc wc;
	*st = -1;
	if (rc == 0 && poll_n(cq, &wc, 1) == 1) {
		*st = (int)wc.status;
		if (wc.status == IBV_WC_SUCCESS && (wc.opcode != IBV_WC_BIND_MW || wc.wr_id != 11))
			*st = 100;
	}
	return rc;
}

int main(void)
{
	ctx = open_first();
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd errno %d", errno);
	if (!pd)
		return 1;
	src_mr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	static uint8_t buf[4096];
	/* The region windows lie in: MW_BIND, local write (needed for remote write rights),
	 * and no remote rights of its own: the window's rights are what remote access gets. */
	struct ibv_mr *mr =
		ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(src_mr && mr, "reg_mr with IBV_ACCESS_MW_BIND: errno %d", errno);
	if (!src_mr || !mr)
		return 1;

	/* ibv_query_device(3): the device says it has windows, of type 1 and 2B. */
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "IBV_DEVICE_MEM_WINDOW: %x",
	      da.device_cap_flags);
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "IBV_DEVICE_MEM_WINDOW_TYPE_2B");
	CHECK(da.max_mw > 0, "max_mw %d", da.max_mw);

	/* ibv_alloc_mw(3): a window of type 1 or 2 in the PD; NULL with errno otherwise. */
	struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(w1 && w2, "alloc_mw errno %d", errno);
	if (!w1 || !w2)
		return 1;
	CHECK(w1->pd == pd && w1->context == ctx && w1->type == IBV_MW_TYPE_1, "type 1 fields");
	CHECK(w2->pd == pd && w2->type == IBV_MW_TYPE_2, "type 2 fields");
	CHECK(w1->rkey != w2->rkey && w1->rkey != mr->rkey, "distinct keys");
	errno = 0;
	CHECK(ibv_alloc_mw(pd, (enum ibv_mw_type)3) == NULL && errno == EINVAL,
	      "type 3: errno %d", errno);

	struct pair p;
	CHECK(make_pair(&p) == 0, "pair");

	/* ibv_alloc_mw(3): "The MW is created not bound": its key opens nothing. */
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "write through an unbound window");
	drop_pair(&p);
	make_pair(&p);

	/* ibv_bind_mw(3): 0, and the window's new R_Key in mw->rkey (same index, the next key
	 * byte); the bind completes as IBV_WC_BIND_MW with its wr_id. */
	uint32_t old = w1->rkey;
	int st;
	CHECK(bind1(p.b, p.cb, w1, mr, buf + 256, 256, IBV_ACCESS_REMOTE_WRITE, &st) == 0 &&
		      st == IBV_WC_SUCCESS,
	      "bind type 1: status %d", st);
	CHECK(w1->rkey == ibv_inc_rkey(old), "new key %#x after %#x", w1->rkey, old);
	/* Inside the window: the data lands where the address says. */
	memcpy(src, "window!!", 8);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf + 300, 8) ==
		      IBV_WC_SUCCESS,
	      "write inside the window");
	CHECK(memcmp(buf + 300, "window!!", 8) == 0, "the data landed");
	/* The old key no longer opens the window. */
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, old, (uintptr_t)buf + 300, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "the key before the bind");
	drop_pair(&p);
	make_pair(&p);
	/* Outside the window but inside the region: refused (rxe lets it land). */
	memset(buf, 0, 256);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf + 16, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "write below the window");
	CHECK(buf[16] == 0, "nothing written outside the window");
	drop_pair(&p);
	make_pair(&p);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf + 508, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "write across the window's end");
	drop_pair(&p);
	make_pair(&p);
	/* The window's rights, not the QP's or the region's: no READ through it. */
	CHECK(access_op(&p, IBV_WR_RDMA_READ, w1->rkey, (uintptr_t)buf + 256, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "read through a write-only window");
	drop_pair(&p);
	make_pair(&p);

	/* ibv_alloc_mw(3) NOTES: ibv_dereg_mr fails while a window is bound to the region
	 * (ibv_reg_mr(3): "the value of errno"); the region still works afterwards. */
	CHECK(ibv_dereg_mr(mr) == EINVAL, "dereg_mr of a region with a bound window (EINVAL as rxe)");
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf + 256, 8) ==
		      IBV_WC_SUCCESS,
	      "the window still works after the refused dereg");

	/* ibv_alloc_mw(3): a type 1 window is invalidated by a zero-length bind. */
	CHECK(bind1(p.b, p.cb, w1, mr, NULL, 0, 0, &st) == 0 && st == IBV_WC_SUCCESS,
	      "zero-length bind: status %d", st);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, (uintptr_t)buf + 256, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "write after the zero-length bind");
	drop_pair(&p);
	make_pair(&p);

	/* ibv_bind_mw(3): IBV_ACCESS_ZERO_BASED: remote_addr is an offset from the window's
	 * start. */
	CHECK(bind1(p.b, p.cb, w1, mr, buf + 1024, 64,
		    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED, &st) == 0 &&
		      st == IBV_WC_SUCCESS,
	      "zero-based bind: status %d", st);
	memcpy(src, "zerobase", 8);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, 8, 8) == IBV_WC_SUCCESS,
	      "zero-based write at offset 8");
	CHECK(memcmp(buf + 1032, "zerobase", 8) == 0, "landed at the window's start + 8");
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, w1->rkey, 60, 8) == IBV_WC_REM_ACCESS_ERR,
	      "zero-based write past the window's length");
	drop_pair(&p);
	make_pair(&p);

	/* ibv_bind_mw(3): for a type 2 window post IBV_WR_BIND_MW instead: EINVAL here. */
	CHECK(bind1(p.b, p.cb, w2, mr, buf, 64, IBV_ACCESS_REMOTE_WRITE, &st) == EINVAL,
	      "ibv_bind_mw of a type 2 window");
	/* ibv_bind_mw(3): remote write rights "require local write access to the MR": the bind
	 * completes in error (and the QP stops, as a failed WR does). */
	static uint8_t ro[256];
	struct ibv_mr *ro_mr = ibv_reg_mr(pd, ro, sizeof(ro), IBV_ACCESS_MW_BIND);
	CHECK(ro_mr != NULL, "reg_mr MW_BIND only");
	CHECK(bind1(p.b, p.cb, w1, ro_mr, ro, 64, IBV_ACCESS_REMOTE_WRITE, &st) == 0 &&
		      st == IBV_WC_MW_BIND_ERR,
	      "remote write window on a region without local write: status %d", st);
	drop_pair(&p);
	make_pair(&p);
	/* A region registered without IBV_ACCESS_MW_BIND takes no window. */
	static uint8_t plain[256];
	struct ibv_mr *plain_mr = ibv_reg_mr(pd, plain, sizeof(plain), IBV_ACCESS_LOCAL_WRITE);
	CHECK(bind1(p.b, p.cb, w1, plain_mr, plain, 64, IBV_ACCESS_REMOTE_WRITE, &st) == 0 &&
		      st == IBV_WC_MW_BIND_ERR,
	      "window on a region without IBV_ACCESS_MW_BIND: status %d", st);
	drop_pair(&p);
	make_pair(&p);
	/* A window larger than its region. */
	CHECK(bind1(p.b, p.cb, w1, mr, buf + 4000, 200, IBV_ACCESS_REMOTE_WRITE, &st) == 0 &&
		      st == IBV_WC_MW_BIND_ERR,
	      "window past the region's end: status %d", st);
	drop_pair(&p);
	make_pair(&p);

	/* ibv_post_send(3) IBV_WR_BIND_MW: a type 2 window bound with the R_Key the WR asks
	 * for, completing as IBV_WC_BIND_MW. */
	uint32_t k2 = w2->rkey;
	CHECK(bind2(p.b, p.cb, w2, mr, buf + 2048, 128, IBV_ACCESS_REMOTE_WRITE, &k2) ==
		      IBV_WC_SUCCESS,
	      "IBV_WR_BIND_MW");
	memcpy(src, "type2 ok", 8);
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, k2, (uintptr_t)buf + 2048, 8) == IBV_WC_SUCCESS,
	      "write through the type 2 window");
	CHECK(memcmp(buf + 2048, "type2 ok", 8) == 0, "type 2 data landed");
	/* A type 2 window is bound to the QP that bound it (type 2B): another QP of the same
	 * PD gets no access through it. */
	struct pair q;
	CHECK(make_pair(&q) == 0, "second pair");
	CHECK(access_op(&q, IBV_WR_RDMA_WRITE, k2, (uintptr_t)buf + 2048, 8) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "type 2 window through another QP");
	drop_pair(&q);
	/* ibv_alloc_mw(3): a bound type 2 window must be invalidated before it is bound
	 * again: a second bind completes in error. */
	uint32_t k2b = k2;
	CHECK(bind2(p.b, p.cb, w2, mr, buf, 64, IBV_ACCESS_REMOTE_WRITE, &k2b) ==
		      IBV_WC_MW_BIND_ERR,
	      "binding a bound type 2 window");
	drop_pair(&p);
	make_pair(&p);

	/* ibv_post_send(3) IBV_WR_LOCAL_INV: invalidates the type 2 window's key, completing as
	 * IBV_WC_LOCAL_INV; the key opens nothing afterwards. */
	{
		struct ibv_send_wr inv = {.wr_id = 31, .opcode = IBV_WR_LOCAL_INV};
		inv.invalidate_rkey = k2;
		struct ibv_wc wc;
		CHECK(run(p.b, p.cb, &inv, &wc) == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV &&
			      wc.wr_id == 31,
		      "IBV_WR_LOCAL_INV: status %d opcode %d", wc.status, wc.opcode);
		CHECK(access_op(&p, IBV_WR_RDMA_WRITE, k2, (uintptr_t)buf + 2048, 8) ==
			      IBV_WC_REM_ACCESS_ERR,
		      "write after the local invalidate");
	}
	drop_pair(&p);
	make_pair(&p);

	/* ibv_post_send(3) IBV_WR_SEND_WITH_INV: the peer's type 2 window is invalidated; its
	 * receive completes with IBV_WC_WITH_INV and the key (ibv_poll_cq(3)). */
	CHECK(bind2(p.b, p.cb, w2, mr, buf + 2048, 128, IBV_ACCESS_REMOTE_WRITE, &k2) ==
		      IBV_WC_SUCCESS,
	      "rebind after invalidation");
	{
		static uint8_t rbuf[64];
		struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 41, .sg_list = &rs, .num_sge = 1}, *rbad;
		CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post_recv");
		struct ibv_sge ss = {.addr = (uintptr_t)src, .length = 8, .lkey = src_mr->lkey};
		struct ibv_send_wr s = {.wr_id = 42, .sg_list = &ss, .num_sge = 1,
					.opcode = IBV_WR_SEND_WITH_INV};
		s.invalidate_rkey = k2;
		struct ibv_wc wc;
		CHECK(run(p.a, p.ca, &s, &wc) == IBV_WC_SUCCESS, "SEND_WITH_INV: %d", wc.status);
		CHECK(poll_n(p.cb, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 41 &&
			      (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == k2,
		      "receive with IBV_WC_WITH_INV: status %d flags %x key %#x", wc.status,
		      wc.wc_flags, wc.invalidated_rkey);
		CHECK(access_op(&p, IBV_WR_RDMA_WRITE, k2, (uintptr_t)buf + 2048, 8) ==
			      IBV_WC_REM_ACCESS_ERR,
		      "write after the remote invalidate");
		ibv_dereg_mr(rmr);
	}
	drop_pair(&p);

	/* ibv_alloc_mw(3): ibv_dealloc_mw "unbinds in case was previously bound": 0, the key
	 * opens nothing, and the region deregisters. */
	make_pair(&p);
	CHECK(bind1(p.b, p.cb, w1, mr, buf, 64, IBV_ACCESS_REMOTE_WRITE, &st) == 0 &&
		      st == IBV_WC_SUCCESS,
	      "bind before dealloc");
	uint32_t k1 = w1->rkey;
	CHECK(ibv_dealloc_mw(w1) == 0, "dealloc_mw of a bound window");
	CHECK(access_op(&p, IBV_WR_RDMA_WRITE, k1, (uintptr_t)buf, 8) == IBV_WC_REM_ACCESS_ERR,
	      "write after dealloc");
	drop_pair(&p);
	CHECK(ibv_dealloc_mw(w2) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr once no window is bound");
	ibv_dereg_mr(ro_mr);
	ibv_dereg_mr(plain_mr);
	ibv_dereg_mr(src_mr);
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd once the windows are gone");
	ibv_close_device(ctx);
	printf("%d failures\n", failures);
	return failures != 0;
}
