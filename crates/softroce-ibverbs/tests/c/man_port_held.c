/* A device whose UDP port another program holds (not a softroce process it could share
 * with): ibv_open_device still gives a context that answers queries, and the verbs that
 * need the running device fail with EADDRINUSE, the first saying why on stderr.
 * Prints "N failures". */
#include "common.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	if (!ctx)
		return 2;
	struct ibv_device_attr attr;
	CHECK(ibv_query_device(ctx, &attr) == 0, "queries still answer");
	errno = 0;
	CHECK(ibv_alloc_pd(ctx) == NULL && errno == EADDRINUSE, "ibv_alloc_pd: errno %d", errno);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 0) == NULL && errno == EADDRINUSE,
	      "ibv_create_cq: errno %d", errno);
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
