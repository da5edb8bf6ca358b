//! Binds every export of `exports.txt` to its rdma-core version node (RDMACM_1.0 …
//! RDMACM_1.3) and names the library librdmacm.so.1: see `softroce-symver`.

fn main() {
    softroce_symver::link_with_version_nodes("exports.txt", "librdmacm.so.1");
}
