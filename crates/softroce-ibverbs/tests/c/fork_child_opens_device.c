/* A parent with the device open forks (Python's multiprocessing, MPI launchers and test
 * harnesses do): the child that opens the device gets one that works — the parent's running
 * device is only a copy in the child, without its engine — and the parent's keeps working
 * too. Each side moves an RC SEND between two of its own QPs. Prints "N failures". */
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* Wait (at most 5 s) on the completion channel until `want` completions were polled: the
 * channel fires only when the device's engine runs in this process. */
static int wait_events(struct ibv_comp_channel *ch, struct ibv_cq *cq, struct ibv_wc *wc,
		       int want)
{
	int got = 0;
	for (int round = 0; round < 8 && got < want; round++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			return -1;
		got += n;
		if (got == want || !channel_ready(ch, 5000))
			break;
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
			return -1;
		ibv_ack_cq_events(ev_cq, 1);
		if (ibv_req_notify_cq(cq, 0))
			return -1;
	}
	return got;
}

/* An RC SEND between two fresh QPs on `ctx`, completions awaited on a completion channel,
 * checked byte for byte: 1 when it worked. */
static int loopback_send(struct ibv_context *ctx, const char *who)
{
	union ibv_gid gid;
	static char buf[2][64];
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = pd ? ibv_create_comp_channel(ctx) : NULL;
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 8, NULL, ch, 0) : NULL;
	struct ibv_mr *mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp *a = mr ? rc_qp(pd, cq, NULL) : NULL, *b = a ? rc_qp(pd, cq, NULL) : NULL;
	if (!b || ibv_query_gid(ctx, 1, 0, &gid) || connect_rc(a, b->qp_num, gid, 0) ||
	    connect_rc(b, a->qp_num, gid, 0) || ibv_req_notify_cq(cq, 0)) {
		fprintf(stderr, "%s: setup failed, errno %d\n", who, errno);
		return 0;
	}
	snprintf(buf[0], sizeof(buf[0]), "hello from %s", who);
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	struct ibv_wc wc[2];
	int ok = ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0 &&
		 wait_events(ch, cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS &&
		 wc[1].status == IBV_WC_SUCCESS && strcmp(buf[0], buf[1]) == 0;
	if (!ok)
		fprintf(stderr, "%s: the SEND did not arrive (%s)\n", who, buf[1]);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_dealloc_pd(pd);
	return ok;
}

int main(void)
{
	struct ibv_context *parent_ctx = open_first();
	CHECK(loopback_send(parent_ctx, "parent before fork"), "parent before fork");
	fflush(NULL);
	pid_t child = fork();
	if (child == 0) {
		/* The child opens the device for itself, as a new process would. */
		struct ibv_context *ctx = open_first();
		int ok = loopback_send(ctx, "child");
		ibv_close_device(ctx);
		_exit(ok ? 0 : 1);
	}
	CHECK(child > 0, "fork: errno %d", errno);
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the child's traffic on its own device (status %#x)", status);
	CHECK(loopback_send(parent_ctx, "parent after fork"), "parent after fork");
	ibv_close_device(parent_ctx);
	printf("%d failures\n", failures);
	return failures != 0;
}
