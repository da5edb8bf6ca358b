/* ibv_get_async_event(3): "waits for the next async event of the RDMA device context
 * context" — events are per context. Two contexts of one device (Open MPI's UCX PML and its
 * one-sided component open the device twice; so do librdmacm and the application): each has
 * an async fd of its own (UCX keys its handlers by fd and fails on a shared one), an event
 * about a QP goes to the context that created the QP only, and its fd is readable exactly
 * while an event waits. Prints "N failures". */
#include "common.h"

static int readable(int fd, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return poll(&pfd, 1, ms) == 1;
}

/* An RC QP with an SRQ on ctx, connected to itself, moved to Error: the device raises
 * IBV_EVENT_QP_LAST_WQE_REACHED for it. */
static struct ibv_qp *qp_with_last_wqe_event(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = cq ? ibv_create_srq(pd, &sia) : NULL;
	struct ibv_qp *qp = srq ? rc_qp(pd, cq, srq) : NULL;
	union ibv_gid gid;
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	if (!qp || ibv_query_gid(ctx, 1, 0, &gid) || connect_rc(qp, qp->qp_num, gid, 0) ||
	    ibv_modify_qp(qp, &err, IBV_QP_STATE))
		return NULL;
	return qp;
}

int main(void)
{
	struct ibv_context *a = open_first(), *b = open_first();
	CHECK(a != b, "two contexts");
	CHECK(a->async_fd >= 0 && b->async_fd >= 0 && a->async_fd != b->async_fd,
	      "an async fd each: %d and %d", a->async_fd, b->async_fd);
	CHECK(!readable(a->async_fd, 0) && !readable(b->async_fd, 0), "nothing to read yet");

	struct ibv_qp *qa = qp_with_last_wqe_event(a);
	CHECK(qa != NULL, "a QP on context a moved to Error: errno %d", errno);
	CHECK(readable(a->async_fd, 10000), "a's fd is readable for a's QP event");
	CHECK(!readable(b->async_fd, 300), "b's fd is not readable for a's QP event");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(a, &ev) == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
		      ev.element.qp == qa,
	      "a gets LAST_WQE_REACHED for its QP: type %d", ev.event_type);
	ibv_ack_async_event(&ev);
	CHECK(!readable(a->async_fd, 200), "a's fd is quiet once the event is read");

	/* b's fd is non-blocking: nothing for b is EAGAIN, not a's events. */
	fcntl(b->async_fd, F_SETFL, fcntl(b->async_fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	CHECK(ibv_get_async_event(b, &ev) == -1 && errno == EAGAIN,
	      "b has nothing: errno %d", errno);

	struct ibv_qp *qb = qp_with_last_wqe_event(b);
	CHECK(qb != NULL, "a QP on context b moved to Error: errno %d", errno);
	CHECK(readable(b->async_fd, 10000), "b's fd is readable for b's QP event");
	CHECK(!readable(a->async_fd, 300), "a's fd is not readable for b's QP event");
	CHECK(ibv_get_async_event(b, &ev) == 0 && ev.element.qp == qb,
	      "b gets the event of its QP: type %d", ev.event_type);
	ibv_ack_async_event(&ev);

	/* An unread event goes with its QP: destroying it does not wait, the fd goes quiet. */
	struct ibv_qp *qa2 = qp_with_last_wqe_event(a);
	CHECK(qa2 && readable(a->async_fd, 10000), "another event for a");
	CHECK(qa2 && ibv_destroy_qp(qa2) == 0, "destroying the QP with its event unread");
	CHECK(!readable(a->async_fd, 200), "no readable fd for the destroyed QP's event");

	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "destroying the QPs");
	printf("%d failures\n", failures);
	return failures != 0;
}
