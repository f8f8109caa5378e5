//! Tests that need nothing but this machine: config errors, the shipped playbooks, show / compare /
//! report on real run directories, the simulator over HTTP, and `rigrun bench` against it.

#[path = "../bench_support/mod.rs"]
mod bench_support;
#[path = "../common/mod.rs"]
mod common;
#[path = "../reporting/mod.rs"]
mod reporting;
#[path = "../resume_support/mod.rs"]
mod resume_support;
#[path = "../server_support/mod.rs"]
mod server_support;
#[path = "../sim_support/mod.rs"]
mod sim_support;

mod bench_cache;
mod bench_faults;
mod bench_lengths;
mod bench_sim;
mod bench_text;
mod bench_trace;
mod bench_turns;
mod capacity_search;
mod config_checks;
mod config_errors;
mod config_yaml;
mod conventions;
mod jobs;
mod progress;
mod report;
mod report_compare;
mod report_facts;
mod report_facts_diff;
mod report_json;
mod report_metrics;
mod report_noise;
mod report_rate;
mod report_references;
mod report_repeat;
mod report_slo;
mod report_width;
mod report_workload;
mod resume;
mod schema;
mod server_dies;
mod shipped_playbooks;
mod sim_clients;
mod sim_crash;
mod sim_http;
mod sim_model;
mod sim_profiles;
mod start_server;
mod sweep_no_record;
mod telemetry;
mod variants;
