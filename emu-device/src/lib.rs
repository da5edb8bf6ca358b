//! The emulated RDMA HCA.
pub mod driver;
pub mod sim;
