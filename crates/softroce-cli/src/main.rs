//! The `softroce` command.
fn main() {}
