//! The playbook: which hosts, which variables, the steps to run on each host in order (each
//! step kind is a module of `config/steps/`), the server and its variants (`server_block.rs`) and the latency limits the report judges them by.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::inventory::Vars;
use super::steps::Step;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Playbook {
    pub name: Spanned<String>,
    /// Host or group names; every host of the inventory when absent.
    pub hosts: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub vars: Vars,
    /// The server rigrun starts itself, and its variants (see `server_block.rs`).
    pub server: Option<super::server_block::ServerSpec>,
    pub steps: Vec<Step>,
    /// Latency limits the report judges each host's sweep by (see `slo.rs`).
    #[serde(default)]
    pub slo: super::slo::SloSpec,
}
