//! The emulated RDMA HCA.
