/* ibv_reg_mr checks the memory as a real HCA does when it pins the pages: memory that is not
 * mapped, or not mapped with the access the flags allow a peer, is refused with EFAULT, a zero
 * length with EINVAL, so no remote access to a registered region can fault the process.
 * Prints "N failures" and exits non-zero on any. */
#include "common.h"
#include <sys/mman.h>

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* Registration must fail with `want`; a region that was registered anyway is released. */
static void refused(struct ibv_pd *pd, void *addr, size_t len, int access, int want,
		    const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);
	CHECK(mr == NULL && errno == want, "%s: mr=%p errno=%d (%s), want %d", what,
	      (void *)mr, errno, strerror(errno), want);
	if (mr)
		ibv_dereg_mr(mr);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0]) {
		fprintf(stderr, "no device\n");
		return 2;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		fprintf(stderr, "open/alloc_pd failed\n");
		return 2;
	}
	const size_t page = 4096;

	/* Pages that were mapped once and are not any more. */
	char *gone = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	CHECK(gone != MAP_FAILED, "mmap");
	munmap(gone, 2 * page);
	refused(pd, gone, 2 * page, RW, EFAULT, "munmapped range");

	/* An address nothing is mapped at. */
	refused(pd, (void *)0x1000, page, IBV_ACCESS_LOCAL_WRITE, EFAULT, "address 0x1000");

	/* A read-only mapping a peer could write through REMOTE_WRITE. */
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED, "mmap read-only");
	refused(pd, ro, page, RW, EFAULT, "read-only pages with write access");
	struct ibv_mr *ro_mr = ibv_reg_mr(pd, ro, page, IBV_ACCESS_REMOTE_READ);
	CHECK(ro_mr != NULL, "read-only pages for remote reads only: errno %d", errno);
	if (ro_mr)
		CHECK(ibv_dereg_mr(ro_mr) == 0, "dereg read-only MR");

	/* A guard page nobody may touch. */
	char *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(none != MAP_FAILED, "mmap PROT_NONE");
	refused(pd, none, page, 0, EFAULT, "PROT_NONE page");

	/* 1 TiB over a 4 KiB buffer. */
	char *small = malloc(page);
	refused(pd, small, (size_t)1 << 40, RW, EFAULT, "1 TiB over 4 KiB");

	/* A zero length pins no page (the kernel's ib_umem_get says EINVAL). */
	refused(pd, small, 0, RW, EINVAL, "zero length");

	/* Flags are checked before pages, as in the kernel: bad flags on bad memory are EINVAL. */
	refused(pd, (void *)0x1000, page, IBV_ACCESS_REMOTE_WRITE, EINVAL,
		"REMOTE_WRITE without LOCAL_WRITE");

	/* Memory that is really there registers, over a buffer end into the next mapped bytes
	 * of its page too, as on a real HCA. */
	struct ibv_mr *mr = ibv_reg_mr(pd, small, page, RW);
	CHECK(mr != NULL && mr->length == page, "live buffer: errno %d", errno);
	if (mr)
		CHECK(ibv_dereg_mr(mr) == 0, "dereg");

	free(small);
	munmap(ro, page);
	munmap(none, page);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
