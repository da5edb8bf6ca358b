/* The device-level verbs and helpers, per their man pages: ibv_get_device_list(3) (optional
 * num_devices), ibv_get_device_name/guid/index(3), ibv_query_device(3) (node_guid in network
 * order, as ibv_get_device_guid), ibv_query_port(3), ibv_query_gid_ex(3) (flags must be 0),
 * ibv_query_gid_table(3) (too small an array fails), ibv_query_pkey(3),
 * ibv_get_pkey_index(3), ibv_fork_init(3)/ibv_is_fork_initialized(3), ibv_query_rt_values_ex(3),
 * ibv_query_qp_data_in_order(3), ibv_query_ece(3)/ibv_set_ece(3), ibv_open_device(3),
 * ibv_modify_qp_rate_limit(3) (no packet pacing: EOPNOTSUPP, returned, not -1).
 * Prints "N failures". */
#include "common.h"
#include <endian.h>

int main(void)
{
	/* ibv_fork_init(3): 0 before any registration. */
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	CHECK(fs == IBV_FORK_DISABLED || fs == IBV_FORK_UNNEEDED, "fork status %d before init",
	      fs);
	CHECK(ibv_fork_init() == 0, "fork_init before any registration");
	fs = ibv_is_fork_initialized();
	CHECK(fs == IBV_FORK_ENABLED || fs == IBV_FORK_UNNEEDED, "fork status %d after init", fs);

	/* ibv_get_device_list(3): num_devices is optional; the array is NULL-terminated. */
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0] && !list[1], "get_device_list(NULL): errno %d", errno);
	if (!list || !list[0])
		return 1;
	struct ibv_device *dev = list[0];
	CHECK(ibv_get_device_name(dev) && strcmp(ibv_get_device_name(dev), "softroce0") == 0,
	      "get_device_name");
	int index = ibv_get_device_index(dev);
	CHECK(index >= -1, "get_device_index: %d", index);
	struct ibv_context *ctx = ibv_open_device(dev);
	CHECK(ctx != NULL, "open_device: errno %d", errno);
	if (!ctx)
		return 1;
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	/* Both in network byte order: the same 8 bytes. */
	CHECK(ibv_get_device_guid(dev) == da.node_guid && da.node_guid != 0,
	      "get_device_guid %llx, node_guid %llx", (unsigned long long)ibv_get_device_guid(dev),
	      (unsigned long long)da.node_guid);
	CHECK(da.phys_port_cnt == 1 && da.max_qp > 0 && da.max_qp_wr > 0 && da.max_cqe > 0 &&
		      da.max_sge > 0 && da.max_srq_wr > 0 && da.max_pkeys >= 1,
	      "device limits");

	/* ibv_query_device_ex(3): orig_attr is what ibv_query_device answers. */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0xab, sizeof(dx));
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 &&
		      memcmp(&dx.orig_attr, &da, sizeof(da)) == 0 && dx.comp_mask == 0,
	      "query_device_ex: orig_attr as query_device, comp_mask %x", dx.comp_mask);

	/* ibv_query_port(3) and the tables it sizes. */
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.active_mtu <= pa.max_mtu && pa.gid_tbl_len >= 1 &&
		      pa.pkey_tbl_len >= 1 && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.max_msg_sz > 0,
	      "port attributes");
	CHECK(ibv_query_port(ctx, 0, &pa) == EINVAL, "port 0 does not exist");
	/* A program built against newer headers passes a longer struct (rdma-core 49 adds
	 * active_speed_ex): what the library does not know reads 0, as libibverbs' memset
	 * leaves it, not the caller's old bytes. */
	{
		unsigned char bigger[sizeof(struct ibv_port_attr) + 16];
		memset(bigger, 0xcc, sizeof(bigger));
		struct verbs_context *vctx = verbs_get_ctx(ctx);
		CHECK(vctx && vctx->query_port(ctx, 1, (struct ibv_port_attr *)bigger,
					       sizeof(bigger)) == 0,
		      "query_port with a longer struct");
		int zero = 1;
		for (size_t i = sizeof(struct ibv_port_attr); i < sizeof(bigger); i++)
			zero &= bigger[i] == 0;
		CHECK(zero, "the fields past ibv_port_attr read 0");
	}

	/* ibv_query_gid_ex(3): flags "for now must be 0". */
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_index == 0 && ge.port_num == 1,
	      "query_gid_ex");
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 1) == EINVAL, "query_gid_ex with flags 1");
	CHECK(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &ge, 0) == EINVAL,
	      "query_gid_ex past the table");
	CHECK(ibv_query_gid_ex(ctx, 2, 0, &ge, 0) == EINVAL, "query_gid_ex on port 2");
	/* ibv_query_gid_table(3): all valid entries, or failure when they do not fit. */
	struct ibv_gid_entry table[16];
	ssize_t valid = ibv_query_gid_table(ctx, table, 16, 0);
	CHECK(valid >= 1 && valid <= pa.gid_tbl_len, "query_gid_table: %zd", valid);
	for (ssize_t i = 0; i < valid; i++) {
		union ibv_gid g;
		CHECK(ibv_query_gid(ctx, 1, table[i].gid_index, &g) == 0 &&
			      memcmp(&g, &table[i].gid, 16) == 0 && table[i].port_num == 1,
		      "table entry %zd matches query_gid", i);
	}
	if (valid > 1)
		CHECK(ibv_query_gid_table(ctx, table, valid - 1, 0) < 0,
		      "an array smaller than the valid entries fails");
	CHECK(ibv_query_gid_table(ctx, table, 16, 1) < 0, "query_gid_table with flags 1");
	/* The entry size travels with the call (the macros pass sizeof), as the kernel's
	 * uverbs takes it: a table of shorter entries gets each entry's first bytes at its own
	 * stride, a longer entry is zeroed past ours, a single entry shorter than ours and a
	 * table entry size of 0 are refused. */
	unsigned char narrow[16 * 24];
	memset(narrow, 0xa5, sizeof(narrow));
	CHECK(_ibv_query_gid_table(ctx, (struct ibv_gid_entry *)narrow, 16, 0, 24) == valid &&
		      memcmp(narrow, &table[0], 24) == 0 &&
		      (valid < 2 || memcmp(narrow + 24, &table[1], 24) == 0),
	      "query_gid_table with 24-byte entries");
	unsigned char wide[2 * (sizeof(struct ibv_gid_entry) + 8)];
	memset(wide, 0xa5, sizeof(wide));
	CHECK(_ibv_query_gid_ex(ctx, 1, 0, (struct ibv_gid_entry *)wide, 0,
				sizeof(struct ibv_gid_entry) + 8) == 0 &&
		      memcmp(wide, &table[0], sizeof(struct ibv_gid_entry)) == 0 &&
		      wide[sizeof(struct ibv_gid_entry)] == 0 &&
		      wide[sizeof(struct ibv_gid_entry) + 7] == 0 &&
		      wide[sizeof(struct ibv_gid_entry) + 8] == 0xa5,
	      "query_gid_ex with a longer entry: zeroed past ours");
	CHECK(_ibv_query_gid_table(ctx, table, 16, 0, 0) < 0, "entry size 0 is refused");
	CHECK(_ibv_query_gid_ex(ctx, 1, 0, (struct ibv_gid_entry *)narrow, 0, 24) == EINVAL,
	      "query_gid_ex into a shorter entry: EINVAL");

	/* ibv_query_pkey(3), ibv_get_pkey_index(3): the default P_Key at index 0. */
	__be16 pkey = 0;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htobe16(0xffff), "query_pkey");
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, "get_pkey_index(0xffff)");
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1, "a P_Key not in the table");
	CHECK(ibv_get_pkey_index(ctx, 2, htobe16(0xffff)) == -1, "get_pkey_index on port 2");

	/* The rates and the *_str functions: man_pure_functions.c, compared with rdma-core. */

	/* ibv_query_rt_values_ex(3): the provider marks what it filled in comp_mask (the clock
	 * itself: man_completion_timestamps.c). */
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	int rc = ibv_query_rt_values_ex(ctx, &v);
	CHECK(rc == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK, "query_rt_values_ex: %d mask %x",
	      rc, v.comp_mask);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp *qp = rc_qp(pd, cq, NULL);
	CHECK(pd && cq && qp, "setup: errno %d", errno);
	if (!pd || !cq || !qp)
		return 1;
	/* ibv_query_qp_data_in_order(3): 0 or 1; flags must be 0. */
	int in_order = ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0);
	CHECK(in_order == 0 || in_order == 1, "data_in_order: %d", in_order);
	/* ibv_query_ece(3)/ibv_set_ece(3): 0 or EOPNOTSUPP, never a silent half. */
	struct ibv_ece ece = {0};
	rc = ibv_query_ece(qp, &ece);
	CHECK(rc == 0 || rc == EOPNOTSUPP, "query_ece: %d", rc);
	rc = ibv_set_ece(qp, &ece);
	CHECK(rc == 0 || rc == EOPNOTSUPP, "set_ece: %d", rc);
	/* ibv_modify_qp_rate_limit(3): the device advertises no packet pacing (every
	 * packet_pacing_caps field 0), so the verb is "not implemented for this device": it
	 * returns EOPNOTSUPP (the errno value itself), whatever the limit, and sets errno. */
	struct ibv_device_attr_ex px;
	memset(&px, 0xff, sizeof(px));
	CHECK(ibv_query_device_ex(ctx, NULL, &px) == 0 &&
		      px.packet_pacing_caps.qp_rate_limit_min == 0 &&
		      px.packet_pacing_caps.qp_rate_limit_max == 0 &&
		      px.packet_pacing_caps.supported_qpts == 0,
	      "packet_pacing_caps: min %u max %u qpts %x", px.packet_pacing_caps.qp_rate_limit_min,
	      px.packet_pacing_caps.qp_rate_limit_max, px.packet_pacing_caps.supported_qpts);
	struct ibv_qp_rate_limit_attr rl = {.rate_limit = 1000, .max_burst_sz = 0, .typical_pkt_sz = 0};
	errno = 0;
	rc = ibv_modify_qp_rate_limit(qp, &rl);
	CHECK(rc == EOPNOTSUPP && errno == EOPNOTSUPP, "modify_qp_rate_limit: %d errno %d", rc, errno);
	rl.rate_limit = 0;
	rc = ibv_modify_qp_rate_limit(qp, &rl);
	CHECK(rc == EOPNOTSUPP, "modify_qp_rate_limit (no limit): %d", rc);

	/* ibv_fork_init(3): after a registration, EINVAL unless fork support is unneeded. */
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, 0);
	CHECK(mr != NULL, "reg_mr with no access flags (local read is always enabled)");
	rc = ibv_fork_init();
	CHECK(rc == 0, "fork_init again (already initialized or unneeded): %d", rc);

	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0 &&
		      ibv_dealloc_pd(pd) == 0,
	      "teardown");
	/* ibv_open_device(3): ibv_close_device returns 0. */
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
