//! The emulated RDMA HCA.
pub mod driver;
