/* A process that exits with a connected rdma_cm id it never destroyed still says goodbye:
 * the kernel destroys an exiting process's ids (ucma_close), which sends the peer a DREQ,
 * so the peer's RDMA_CM_EVENT_DISCONNECTED comes at once, not after its own DREQ's retries
 * (over a minute) or never. perftest's ib_atomic_lat -R server returns from main that
 * way. A child process (argv[2]'s device) connects to the parent (argv[1]'s) and exits;
 * the parent waits at most 10 s for DISCONNECTED. The process forks before either side
 * touches the library. Prints "N failures". */
#include <sys/wait.h>

#include "cm_common.h"

#define PORT 7893

/* The child: connects, and on ESTABLISHED returns from main (exit(3)'s hooks run) with
 * its id, QP and channel left as they are. */
static int client_that_leaves(const char *server_ip, const char *client_ip)
{
	usleep(300000);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return 3;
	struct rdma_cm_id *c = resolved_on(ch, client_ip, server_ip, PORT, 1);
	struct ibv_qp_init_attr qa = small_rc_attr();
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	if (rdma_create_qp(c, NULL, &qa) || rdma_connect(c, &cp) ||
	    expect(ch, RDMA_CM_EVENT_ESTABLISHED, c, NULL))
		return 4;
	return 0;
}

int main(int argc, char **argv)
{
	const char *server_ip = argc > 2 ? argv[1] : "127.0.0.1";
	const char *client_ip = argc > 2 ? argv[2] : "127.0.0.2";
	pid_t child = fork();
	if (child == 0)
		exit(client_that_leaves(server_ip, client_ip));
	watchdog(50);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		printf("no event channel: errno %d\n1 failures\n", errno);
		return 1;
	}
	struct rdma_cm_id *l = listening_on(ch, server_ip, PORT), *s = NULL;
	struct rdma_cm_event *req = take(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(req != NULL, "a connection request");
	if (req) {
		s = req->id;
		rdma_ack_cm_event(req);
		struct ibv_qp_init_attr qa = small_rc_attr();
		struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
		CHECK(rdma_create_qp(s, NULL, &qa) == 0 && rdma_accept(s, &cp) == 0,
		      "accept: errno %d", errno);
		CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, s, NULL) == 0, "established");
		/* The child exits now; its farewell is the DREQ its kernel would send. */
		CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, s, NULL) == 0,
		      "DISCONNECTED within 10 s of the peer's exit");
	}
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the child connected and exited (status %#x)", status);
	if (s) {
		rdma_destroy_qp(s);
		rdma_destroy_id(s);
	}
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	alarm(0);
	printf("%d failures\n", failures);
	return failures != 0;
}
