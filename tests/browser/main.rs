//! The HTML report in a real headless Chromium.

#[path = "../chromium/mod.rs"]
mod chromium;
#[path = "../common/mod.rs"]
mod common;
#[path = "../reporting/mod.rs"]
mod reporting;

mod report_html;
mod report_sim;
