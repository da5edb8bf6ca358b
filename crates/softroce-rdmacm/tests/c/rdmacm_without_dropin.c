/* softroce's librdmacm.so.1 with the system's libibverbs.so.1 (not softroce's drop-in, which
 * holds the connection manager): every call fails with ENOSYS instead of crashing. */
#include <rdma/rdma_cma.h>

#include "common.h"

int main(void)
{
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch == NULL && errno == ENOSYS, "rdma_create_event_channel: %p errno %d", (void *)ch,
	      errno);
	struct rdma_cm_id *id = NULL;
	errno = 0;
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == -1 && errno == ENOSYS,
	      "rdma_create_id: errno %d", errno);
	printf("%d failures\n", failures);
	return failures != 0;
}
