//! Runs of the real binary against real OpenSSH servers on loopback, started by the harness.

#[path = "../bench_support/mod.rs"]
mod bench_support;
#[path = "../common/mod.rs"]
mod common;
#[path = "../resume_support/mod.rs"]
mod resume_support;
#[path = "../server_support/mod.rs"]
mod server_support;
#[path = "../sim_support/mod.rs"]
mod sim_support;

mod bench_sweep;
mod check_connect;
mod fetch_results;
mod gpu_health;
mod host_binary;
mod quiet_login;
mod resume;
mod server_dies;
mod ssh_run;
