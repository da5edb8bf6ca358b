//! Binds every export of `exports.txt` to its rdma-core version node (IBVERBS_1.0 …
//! IBVERBS_1.14, IBVERBS_PRIVATE_34) and names the library libibverbs.so.1: see
//! `softroce-symver`.

fn main() {
    softroce_symver::link_with_version_nodes("exports.txt", "libibverbs.so.1");
}
