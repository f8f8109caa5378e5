//! Tests that need root: hosts in network namespaces of their own, a full tmpfs.

#[path = "../common/mod.rs"]
mod common;

mod e2e_netns;
mod faults;
mod host_disk;
mod store_full;
mod telemetry;
mod variants;
