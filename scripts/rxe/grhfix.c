/* A preload shim for rdma-core's programs on rxe in the interop VM (scripts/rxe/interop.sh):
 * an address handle without a GRH on a RoCE port gets one to the port's first IPv4-mapped
 * GID. rdma-core's datagram rsockets make the handle to their own QP without a GRH
 * (ds_add_qp_dest), which the kernel refuses on RoCE, so udpong needs this on rxe. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <infiniband/verbs.h>
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	static const unsigned char v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	struct ibv_ah *(*real)(struct ibv_pd *, struct ibv_ah_attr *) =
		(struct ibv_ah *(*)(struct ibv_pd *, struct ibv_ah_attr *))dlvsym(
			RTLD_NEXT, "ibv_create_ah", "IBVERBS_1.1");
	struct ibv_port_attr pa;
	if (attr && !attr->is_global && !ibv_query_port(pd->context, attr->port_num, &pa) &&
	    pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
		struct ibv_ah_attr a = *attr;
		for (int i = 0; i < 16; i++) {
			union ibv_gid g;
			if (!ibv_query_gid(pd->context, a.port_num, i, &g) && !memcmp(g.raw, v4, 12)) {
				a.is_global = 1;
				a.grh.dgid = g;
				a.grh.sgid_index = i;
				a.grh.hop_limit = 64;
				return real(pd, &a);
			}
		}
	}
	return real(pd, attr);
}
