/* ibv_rate_to_mult(3), ibv_rate_to_mbps(3), ibv_event_type_str(3) (with ibv_node_type_str
 * and ibv_port_state_str) and ibv_wc_status_str: functions of their argument alone; and
 * ibv_read_sysfs_file (infiniband/driver.h) on ordinary files, one that never ends
 * (/dev/zero: at most the buffer is read) and one that does not exist. Prints
 * every value, in and out of range, one per line; c_contract.rs runs this program on the
 * system libibverbs (rdma-core 44) and on the drop-in and requires the same lines. Also the
 * IBVERBS_1.0 marshalling helpers (infiniband/marshall.h, not installed by Debian): each
 * result struct's bytes after converting a patterned source into a 0xcc-filled one. */
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exported by libibverbs, declared in infiniband/driver.h. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
/* Exported by libibverbs, declared in infiniband/marshall.h. */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

static void pattern(void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((unsigned char *)p)[i] = (unsigned char)(i * 7 + 1);
}

static void dump(const char *what, const void *p, size_t n)
{
	printf("%s:", what);
	for (size_t i = 0; i < n; i++)
		printf(" %02x", ((const unsigned char *)p)[i]);
	printf("\n");
}

static void marshalling(void)
{
	struct ib_uverbs_qp_attr kqp;
	struct ibv_qp_attr qp;
	pattern(&kqp, sizeof(kqp));
	memset(&qp, 0xcc, sizeof(qp));
	ibv_copy_qp_attr_from_kern(&qp, &kqp);
	dump("ibv_copy_qp_attr_from_kern", &qp, sizeof(qp));
	struct ib_uverbs_ah_attr kah;
	struct ibv_ah_attr ah;
	pattern(&kah, sizeof(kah));
	memset(&ah, 0xcc, sizeof(ah));
	ibv_copy_ah_attr_from_kern(&ah, &kah);
	dump("ibv_copy_ah_attr_from_kern", &ah, sizeof(ah));
	struct ib_user_path_rec kpr;
	struct ibv_sa_path_rec pr;
	pattern(&kpr, sizeof(kpr));
	memset(&pr, 0xcc, sizeof(pr));
	ibv_copy_path_rec_from_kern(&pr, &kpr);
	dump("ibv_copy_path_rec_from_kern", &pr, sizeof(pr));
	pattern(&pr, sizeof(pr));
	memset(&kpr, 0xcc, sizeof(kpr));
	ibv_copy_path_rec_to_kern(&kpr, &pr);
	dump("ibv_copy_path_rec_to_kern", &kpr, sizeof(kpr));
}

static void read_sysfs(const char *dir, const char *file, const char *what, size_t size)
{
	char buf[64];
	memset(buf, 'x', sizeof(buf));
	buf[sizeof(buf) - 1] = '\0'; /* an empty file leaves the buffer as it was */
	int rc = ibv_read_sysfs_file(dir, file, buf, size);
	if (rc >= 0)
		printf("ibv_read_sysfs_file(%s, %zu) = %d \"%s\"\n", what, size, rc, buf);
	else
		printf("ibv_read_sysfs_file(%s, %zu) = %d\n", what, size, rc);
}

int main(void)
{
	for (int r = -1; r <= 30; r++)
		printf("ibv_rate_to_mult(%d) = %d, ibv_rate_to_mbps(%d) = %d\n", r,
		       ibv_rate_to_mult(r), r, ibv_rate_to_mbps(r));
	for (int m = -1; m <= 500; m++)
		printf("mult_to_ibv_rate(%d) = %d\n", m, mult_to_ibv_rate(m));
	int mbps[] = {-1,    0,	    1,	    2500,   5000,   10000,  14000,  14062,
		      20000, 25781, 28125,  30000,  40000,  53125,  56250,  60000,
		      80000, 103125, 112500, 120000, 168750, 206250, 309375, 425000,
		      637500, 850000, 900000, 1275000};
	for (unsigned i = 0; i < sizeof(mbps) / sizeof(mbps[0]); i++)
		printf("mbps_to_ibv_rate(%d) = %d\n", mbps[i], mbps_to_ibv_rate(mbps[i]));
	for (int e = -1; e <= 24; e++)
		printf("ibv_event_type_str(%d) = %s\n", e, ibv_event_type_str(e));
	for (int n = -2; n <= 8; n++)
		printf("ibv_node_type_str(%d) = %s\n", n, ibv_node_type_str(n));
	for (int s = -1; s <= 7; s++)
		printf("ibv_port_state_str(%d) = %s\n", s, ibv_port_state_str(s));
	for (int s = -1; s <= 25; s++)
		printf("ibv_wc_status_str(%d) = %s\n", s, ibv_wc_status_str(s));

	char dir[] = "/tmp/softroce-sysfs-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	struct {
		const char *name, *content;
	} files[] = {{"line", "abc\n"}, {"word", "abcdef"}, {"two", "ab\ncdef"}, {"empty", ""}};
	char path[128];
	for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
		FILE *f = fopen(path, "w");
		if (!f || fputs(files[i].content, f) < 0 || fclose(f) != 0) {
			perror(path);
			return 1;
		}
	}
	size_t sizes[] = {1, 3, 4, 5, 6, 7, 16};
	for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		for (unsigned j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++)
			read_sysfs(dir, files[i].name, files[i].name, sizes[j]);
	read_sysfs("/dev", "zero", "/dev/zero", 16);
	read_sysfs(dir, "missing", "missing", 16);
	for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
		unlink(path);
	}
	rmdir(dir);
	marshalling();
	return 0;
}
