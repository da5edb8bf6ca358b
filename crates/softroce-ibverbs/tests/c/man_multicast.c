/* ibv_attach_mcast(3), ibv_detach_mcast(3), ibv_query_device(3) multicast limits, as the
 * kernel's uverbs and rxe answer them, and UD multicast traffic between processes.
 *
 *   man_multicast rules                one device: who may attach, idempotence, detach
 *                                      errors, destroy while attached, the limits
 *   man_multicast recv READY N GROUP   two QPs attached to GROUP must each get the N
 *                                      messages once; an attached QP with another Q_Key and
 *                                      (on a second device, when there is one) a QP that
 *                                      never attached get nothing. READY is created once
 *                                      the receive side is set up.
 *   man_multicast send N GROUP         N UD SENDs to GROUP (dest QPN 0xFFFFFF)
 *
 * Prints "0 failures" when every check held. */
#include <arpa/inet.h>
#include <unistd.h>

#include "common.h"

#define QKEY 0x11111111u
#define OTHER_QKEY 0x22222222u
#define MSG 64

static union ibv_gid gid_of_ipv4(const char *ip)
{
	union ibv_gid g;
	memset(&g, 0, sizeof(g));
	g.raw[10] = 0xff;
	g.raw[11] = 0xff;
	if (inet_pton(AF_INET, ip, &g.raw[12]) != 1) {
		fprintf(stderr, "bad address %s\n", ip);
		exit(2);
	}
	return g;
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type,
				int depth)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = depth,
					      .max_recv_wr = depth,
					      .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = type};
	return ibv_create_qp(pd, &ia);
}

static struct ibv_qp *ud_qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			       enum ibv_qp_type type, uint32_t create_flags)
{
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq,
					 .recv_cq = cq,
					 .cap = {.max_send_wr = 4,
						 .max_recv_wr = 4,
						 .max_send_sge = 1,
						 .max_recv_sge = 1},
					 .qp_type = type,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
					 .pd = pd,
					 .create_flags = create_flags};
	return ibv_create_qp_ex(ctx, &ia);
}

static void post_one_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 40 + MSG, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv: errno %d", errno);
}

/* Multicast sent on a device reaches the device's own attached QPs (the device is a member
 * of the IP group, which the host loops back, as for rxe joined through rdma_cm), except
 * the sending QP when it was created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB. */
static void loopback(struct ibv_context *ctx, struct ibv_pd *pd)
{
	union ibv_gid group = gid_of_ipv4("239.79.1.3");
	struct ibv_cq *cqs[3];
	struct ibv_qp *qps[3];
	static char bufs[3][2][40 + MSG];
	struct ibv_mr *mr = ibv_reg_mr(pd, bufs, sizeof(bufs), IBV_ACCESS_LOCAL_WRITE);
	CHECK(ud_qp_ex(ctx, pd, NULL, IBV_QPT_RC, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) == NULL &&
		      errno == EOPNOTSUPP,
	      "BLOCK_SELF_MCAST_LB on an RC QP: errno %d", errno);
	for (int i = 0; i < 3; i++) {
		cqs[i] = ibv_create_cq(ctx, 8, NULL, NULL, 0);
		qps[i] = ud_qp_ex(ctx, pd, cqs[i], IBV_QPT_UD,
				  i == 0 ? IBV_QP_CREATE_BLOCK_SELF_MCAST_LB : 0);
		CHECK(qps[i] != NULL, "create_qp_ex %d: errno %d", i, errno);
		if (!qps[i])
			return;
		CHECK(ud_ready(qps[i], QKEY) == 0, "ready %d", i);
		CHECK(ibv_attach_mcast(qps[i], &group, 0) == 0, "attach %d", i);
		post_one_recv(qps[i], mr, bufs[i][0]);
		post_one_recv(qps[i], mr, bufs[i][1]);
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	aa.grh.dgid = group;
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	static char msg[MSG];
	struct ibv_mr *smr = ibv_reg_mr(pd, msg, MSG, 0);
	for (int from = 0; from < 2; from++) {
		snprintf(msg, MSG, "msg %d from %x", from, qps[from]->qp_num);
		struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = MSG, .lkey = smr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xFFFFFF;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK(ibv_post_send(qps[from], &wr, &bad) == 0, "send from %d", from);
	}
	/* qp0 sent (blocked for itself) and qp1 sent (not blocked): qp0 gets qp1's, qp1 both,
	 * qp2 both. Each CQ also holds its QP's own send completion. */
	int want[3] = {1 + 1, 2 + 1, 2}, recvs[3] = {0};
	struct ibv_wc wc[8];
	for (int i = 0; i < 3; i++) {
		int n = poll_n(cqs[i], wc, want[i]);
		n += poll_n_within(cqs[i], wc + n, 1, 200);
		for (int k = 0; k < n; k++)
			recvs[i] += wc[k].opcode == IBV_WC_RECV && wc[k].status == IBV_WC_SUCCESS;
	}
	CHECK(recvs[0] == 1, "the blocking sender got %d (only the other's)", recvs[0]);
	CHECK(recvs[1] == 2, "the non-blocking sender got %d (its own too)", recvs[1]);
	CHECK(recvs[2] == 2, "a bystander QP of the device got %d", recvs[2]);
	ibv_destroy_ah(ah);
	for (int i = 0; i < 3; i++) {
		CHECK(ibv_detach_mcast(qps[i], &group, 0) == 0, "detach %d", i);
		CHECK(ibv_destroy_qp(qps[i]) == 0, "destroy %d", i);
		ibv_destroy_cq(cqs[i]);
	}
	ibv_dereg_mr(smr);
	ibv_dereg_mr(mr);
}

static void rules(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	/* rxe_param.h */
	CHECK(da.max_mcast_grp == 8192, "max_mcast_grp %d", da.max_mcast_grp);
	CHECK(da.max_mcast_qp_attach == 56, "max_mcast_qp_attach %d", da.max_mcast_qp_attach);
	CHECK(da.max_total_mcast_qp_attach == 0x70000, "max_total_mcast_qp_attach %#x",
	      da.max_total_mcast_qp_attach);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	union ibv_gid group = gid_of_ipv4("239.79.1.1");
	union ibv_gid other = gid_of_ipv4("239.79.1.2");

	/* Only UD QPs attach (the kernel's ib_attach_mcast: EINVAL). */
	struct ibv_qp *rc = create_qp(pd, cq, IBV_QPT_RC, 4);
	struct ibv_qp *uc = create_qp(pd, cq, IBV_QPT_UC, 4);
	CHECK(ibv_attach_mcast(rc, &group, 0) == EINVAL, "RC QP attached");
	CHECK(ibv_attach_mcast(uc, &group, 0) == EINVAL, "UC QP attached");
	CHECK(ibv_destroy_qp(rc) == 0 && ibv_destroy_qp(uc) == 0, "destroy RC/UC");

	/* Only multicast GIDs are groups: a unicast IPv4-mapped or IPv6 GID is EINVAL. */
	struct ibv_qp *ud = create_qp(pd, cq, IBV_QPT_UD, 4);
	CHECK(ud != NULL, "create UD: errno %d", errno);
	union ibv_gid unicast = gid_of_ipv4("127.79.1.1");
	CHECK(ibv_attach_mcast(ud, &unicast, 0) == EINVAL, "unicast GID attached");
	union ibv_gid link_local = {.raw = {0xfe, 0x80, [15] = 1}};
	CHECK(ibv_attach_mcast(ud, &link_local, 0) == EINVAL, "fe80::1 attached");
	CHECK(ibv_attach_mcast(ud, NULL, 0) == EINVAL, "NULL gid attached");
	CHECK(ibv_attach_mcast(NULL, &group, 0) == EINVAL, "NULL QP attached");
	CHECK(ibv_detach_mcast(NULL, &group, 0) == EINVAL, "NULL QP detached");

	/* A QP in any state may attach; attaching twice is one membership. */
	CHECK(ibv_attach_mcast(ud, &group, 0) == 0, "attach: errno %d", errno);
	CHECK(ibv_attach_mcast(ud, &group, 0) == 0, "second attach of the same group");
	CHECK(ibv_attach_mcast(ud, &other, 0xC001) == 0, "attach a second group");
	CHECK(ibv_detach_mcast(ud, &group, 0) == 0, "detach");
	CHECK(ibv_detach_mcast(ud, &group, 0) == EINVAL, "detach twice is EINVAL");
	CHECK(ibv_detach_mcast(ud, &unicast, 0) == EINVAL, "detach of a never-attached GID");

	/* The kernel's uverbs refuses to destroy an attached QP (EBUSY); it stays usable. */
	CHECK(ibv_destroy_qp(ud) == EBUSY, "destroy while attached");
	CHECK(ibv_detach_mcast(ud, &other, 0xC001) == 0, "detach after the refused destroy");
	CHECK(ibv_destroy_qp(ud) == 0, "destroy after detach");

	/* max_mcast_qp_attach QPs per group, then ENOMEM (rxe). */
	struct ibv_qp *qps[57];
	int attached = 0;
	for (int i = 0; i < 57; i++) {
		qps[i] = create_qp(pd, cq, IBV_QPT_UD, 1);
		CHECK(qps[i] != NULL, "create UD %d: errno %d", i, errno);
	}
	for (int i = 0; i < 56; i++)
		attached += qps[i] && ibv_attach_mcast(qps[i], &group, 0) == 0;
	CHECK(attached == 56, "%d of 56 QPs attached", attached);
	CHECK(ibv_attach_mcast(qps[56], &group, 0) == ENOMEM, "57th QP of a group");
	CHECK(ibv_attach_mcast(qps[56], &other, 0) == 0, "another group still takes it");
	CHECK(ibv_detach_mcast(qps[0], &group, 0) == 0, "detach one of 56");
	CHECK(ibv_attach_mcast(qps[56], &group, 0) == 0, "a freed place is taken");
	for (int i = 1; i < 57; i++)
		CHECK(ibv_detach_mcast(qps[i], &group, 0) == 0, "detach %d", i);
	CHECK(ibv_detach_mcast(qps[56], &other, 0) == 0, "detach 56 from other");
	for (int i = 0; i < 57; i++)
		CHECK(ibv_destroy_qp(qps[i]) == 0, "destroy %d", i);

	loopback(ctx, pd);
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
}

struct rx_qp {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;
	int seen[256];
	int got;
};

static void rx_setup(struct rx_qp *r, struct ibv_context *ctx, struct ibv_pd *pd, int n,
		     uint32_t qkey)
{
	memset(r, 0, sizeof(*r));
	r->cq = ibv_create_cq(ctx, n + 1, NULL, NULL, 0);
	r->qp = create_qp(pd, r->cq, IBV_QPT_UD, n);
	r->buf = calloc(n, 40 + MSG);
	r->mr = ibv_reg_mr(pd, r->buf, (size_t)n * (40 + MSG), IBV_ACCESS_LOCAL_WRITE);
	if (!r->cq || !r->qp || !r->buf || !r->mr || ud_ready(r->qp, qkey)) {
		fprintf(stderr, "receive QP setup failed: errno %d\n", errno);
		exit(2);
	}
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)(r->buf + i * (40 + MSG)),
				      .length = 40 + MSG,
				      .lkey = r->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(r->qp, &wr, &bad)) {
			fprintf(stderr, "post_recv: errno %d\n", errno);
			exit(2);
		}
	}
}

/* Take what completed on `r`, checking each message (index once, from the sender its
 * payload names, with the GRH area holding the real addresses). */
static void rx_poll(struct rx_qp *r, const char *name, union ibv_gid group, int ms)
{
	struct ibv_wc wc[16];
	int n = poll_n_within(r->cq, wc, 1, ms);
	while (n > 0) {
		for (int i = 0; i < n; i++) {
			CHECK(wc[i].status == IBV_WC_SUCCESS, "%s: status %s", name,
			      ibv_wc_status_str(wc[i].status));
			CHECK(wc[i].opcode == IBV_WC_RECV, "%s: opcode %d", name, wc[i].opcode);
			CHECK(wc[i].byte_len == 40 + MSG, "%s: byte_len %u", name, wc[i].byte_len);
			CHECK(wc[i].wc_flags & IBV_WC_GRH, "%s: no GRH flag", name);
			CHECK(wc[i].qp_num == r->qp->qp_num, "%s: qp_num %#x", name, wc[i].qp_num);
			const char *grh = r->buf + wc[i].wr_id * (40 + MSG);
			/* IPv4 packet: the header sits in the last 20 bytes of the area. */
			CHECK(memcmp(grh + 20 + 16, &group.raw[12], 4) == 0, "%s: GRH destination is not the group",
			      name);
			unsigned idx = 0, src_qp = 0;
			CHECK(sscanf(grh + 40, "msg %u from %x", &idx, &src_qp) == 2, "%s: payload '%.20s'",
			      name, grh + 40);
			CHECK(src_qp == wc[i].src_qp, "%s: src_qp %#x, payload says %#x", name,
			      wc[i].src_qp, src_qp);
			if (idx < 256) {
				r->seen[idx]++;
				CHECK(r->seen[idx] == 1, "%s: message %u arrived %d times", name, idx,
				      r->seen[idx]);
			}
			r->got++;
		}
		n = ibv_poll_cq(r->cq, 16, wc);
	}
	CHECK(n >= 0, "%s: poll_cq %d", name, n);
}

static void recv_side(const char *ready, int n, const char *group_ip)
{
	int ndev = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || ndev < 1) {
		fprintf(stderr, "no device\n");
		exit(2);
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	union ibv_gid group = gid_of_ipv4(group_ip);
	struct rx_qp a, b, wrong_qkey, idle;
	rx_setup(&a, ctx, pd, n, QKEY);
	rx_setup(&b, ctx, pd, n, QKEY);
	rx_setup(&wrong_qkey, ctx, pd, n, OTHER_QKEY);
	CHECK(ibv_attach_mcast(a.qp, &group, 0) == 0, "attach a: errno %d", errno);
	CHECK(ibv_attach_mcast(b.qp, &group, 0) == 0, "attach b");
	CHECK(ibv_attach_mcast(wrong_qkey.qp, &group, 0) == 0, "attach wrong_qkey");
	/* A second device that never attached: its UD QP with the same Q_Key gets nothing. */
	struct ibv_context *ctx2 = NULL;
	struct ibv_pd *pd2 = NULL;
	if (ndev > 1) {
		ctx2 = ibv_open_device(list[1]);
		pd2 = ibv_alloc_pd(ctx2);
		rx_setup(&idle, ctx2, pd2, n, QKEY);
	}
	ibv_free_device_list(list);
	FILE *f = fopen(ready, "w");
	if (!f) {
		fprintf(stderr, "cannot create %s\n", ready);
		exit(2);
	}
	fclose(f);

	long end = now_ms() + 20000;
	while ((a.got < n || b.got < n) && now_ms() < end) {
		rx_poll(&a, "a", group, 10);
		rx_poll(&b, "b", group, 10);
	}
	/* What must not arrive: a short look after everything that should has. */
	rx_poll(&a, "a", group, 200);
	rx_poll(&b, "b", group, 10);
	rx_poll(&wrong_qkey, "wrong_qkey", group, 10);
	CHECK(a.got == n && b.got == n, "a got %d, b got %d of %d", a.got, b.got, n);
	for (int i = 0; i < n && i < 256; i++)
		CHECK(a.seen[i] == 1 && b.seen[i] == 1, "message %d: a %d, b %d", i, a.seen[i],
		      b.seen[i]);
	CHECK(wrong_qkey.got == 0, "a QP with another Q_Key got %d", wrong_qkey.got);
	if (ctx2) {
		rx_poll(&idle, "idle", group, 10);
		CHECK(idle.got == 0, "a QP of a device that never attached got %d", idle.got);
	}
	printf("a %d b %d wrong_qkey %d\n", a.got, b.got, wrong_qkey.got);
	/* Leave the group before destroying, as the kernel requires. */
	CHECK(ibv_detach_mcast(a.qp, &group, 0) == 0, "detach a");
	CHECK(ibv_detach_mcast(b.qp, &group, 0) == 0, "detach b");
	CHECK(ibv_detach_mcast(wrong_qkey.qp, &group, 0) == 0, "detach wrong_qkey");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0 &&
		      ibv_destroy_qp(wrong_qkey.qp) == 0,
	      "destroy");
}

static void send_side(int n, const char *group_ip)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, n + 1, NULL, NULL, 0);
	struct ibv_qp *qp = create_qp(pd, cq, IBV_QPT_UD, n);
	char *buf = calloc(n, MSG);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)n * MSG, 0);
	if (!qp || !mr || ud_ready(qp, QKEY)) {
		fprintf(stderr, "send QP setup failed: errno %d\n", errno);
		exit(2);
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .dlid = 0xFFFF};
	aa.grh.dgid = gid_of_ipv4(group_ip);
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "create_ah to the group: errno %d", errno);
	if (!ah)
		return;
	for (int i = 0; i < n; i++) {
		snprintf(buf + i * MSG, MSG, "msg %d from %x", i, qp->qp_num);
		struct ibv_sge sge = {.addr = (uintptr_t)(buf + i * MSG), .length = MSG, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xFFFFFF;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post_send %d: errno %d", i, errno);
	}
	struct ibv_wc wc[256];
	int got = poll_n(cq, wc, n);
	CHECK(got == n, "%d of %d send completions", got, n);
	for (int i = 0; i < got; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS, "send %d: %s", i, ibv_wc_status_str(wc[i].status));
	printf("sent %d from qpn %#x\n", got, qp->qp_num);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "rules")) {
		rules();
	} else if (argc == 5 && !strcmp(argv[1], "recv")) {
		recv_side(argv[2], atoi(argv[3]), argv[4]);
	} else if (argc == 4 && !strcmp(argv[1], "send")) {
		send_side(atoi(argv[2]), argv[3]);
	} else {
		fprintf(stderr, "usage: %s rules | recv READY N GROUP | send N GROUP\n", argv[0]);
		return 2;
	}
	printf("%d failures\n", failures);
	return failures != 0;
}
