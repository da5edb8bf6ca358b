/* rsocket(7): the defaults come from files in /etc/rdma/rsocket, one number each. Run by
 * c_programs.rs in a mount namespace where sqsize_default holds 100 and mem_default is a
 * FIFO nobody writes: the number is taken, the FIFO is passed over (its default stands)
 * instead of blocking the first rsocket call. Prints "N failures". */
#include <rdma/rsocket.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_common.h"

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	watchdog(10);
	step = "config files";
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket with a FIFO among the files: errno %d", errno);
	int sq = 0;
	socklen_t len = sizeof(sq);
	CHECK(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &sq, &len) == 0 && sq == 100,
	      "sqsize_default's 100 is the send queue's size (%d)", sq);
	int rcvbuf = 0;
	len = sizeof(rcvbuf);
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) == 0 && rcvbuf > 0,
	      "the receive buffer has its default (%d)", rcvbuf);
	rclose(s);
	printf("%d failures\n", failures);
	return failures != 0;
}
