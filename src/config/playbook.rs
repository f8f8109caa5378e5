//! The playbook: which hosts, which variables, and the steps to run on each host in order.
//!
//! Steps are externally tagged (`- run-sweep: {...}`) so that an error points at the exact field.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::duration::Dur;
use super::inventory::Vars;

/// A template string with the place it was written, for errors.
pub type Text = Spanned<String>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Playbook {
    pub name: Spanned<String>,
    /// Host or group names; every host of the inventory when absent.
    pub hosts: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub vars: Vars,
    pub steps: Vec<Step>,
}

/// Every step kind, as written in YAML.
pub const STEP_KINDS: &[&str] = &[
    "verify-server",
    "copy-script",
    "run-sweep",
    "fetch-results",
    "shell",
    "start-server",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    VerifyServer(VerifyServer),
    CopyScript(CopyScript),
    RunSweep(RunSweep),
    FetchResults(FetchResults),
    Shell(Shell),
    StartServer(StartServer),
}

/// `GET {url}/v1/models` as seen from the host, until it answers or `wait` runs out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyServer {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    pub url: Text,
    /// Must be listed by `/v1/models` when given.
    pub model: Option<Text>,
    /// How long to keep polling until the server answers (servers take minutes to load).
    pub wait: Option<Dur>,
    /// Also send one short completion and require tokens back.
    #[serde(default)]
    pub smoke: bool,
    /// Name of a local environment variable holding the API key (sent as a bearer token).
    pub api_key_env: Option<String>,
}

/// Upload a file to the host atomically, recording checksums and any remote edits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyScript {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    /// Relative to the playbook file.
    pub src: Text,
    pub dest: Text,
    /// Octal permission bits such as "0755"; the local file's mode when absent.
    pub mode: Option<Spanned<String>>,
    /// Render the file with the host's variables before uploading.
    #[serde(default)]
    pub template: bool,
}

/// Run a command once per point of a matrix; JSON lines on stdout become records.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSweep {
    pub name: Option<String>,
    /// Per point.
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub matrix: IndexMap<String, Spanned<Vec<serde_json::Value>>>,
    /// A minijinja expression; a point where it is true is skipped and recorded with the reason.
    pub skip_if: Option<Text>,
    pub command: Text,
    #[serde(default)]
    pub stop_on_failure: bool,
    /// Expected values per host and point (see `config::reference`).
    #[serde(default)]
    pub references: super::reference::References,
}

/// Download files matching a glob on the host into the run directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchResults {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    pub src: Text,
    /// Turn fetched JSON result files into records (default true).
    #[serde(default = "yes")]
    pub records: bool,
}

/// Run one command on the host and keep its output.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shell {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    pub command: Text,
}

/// Start a long-running server on the host and wait until its `url` answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartServer {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    pub command: Text,
    pub url: Text,
    /// How long to wait for `url` to answer.
    pub wait: Option<Dur>,
    /// Leave the server running when the playbook ends on this host.
    #[serde(default)]
    pub keep: bool,
}

fn yes() -> bool {
    true
}

/// Which text fields of a step are shell commands (their substitutions get shell-quoted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Quoting {
    Plain,
    Shell,
}

impl Step {
    pub fn kind(&self) -> &'static str {
        match self {
            Step::VerifyServer(_) => "verify-server",
            Step::CopyScript(_) => "copy-script",
            Step::RunSweep(_) => "run-sweep",
            Step::FetchResults(_) => "fetch-results",
            Step::Shell(_) => "shell",
            Step::StartServer(_) => "start-server",
        }
    }

    /// The name shown in progress and tables: `name:` when given, else the kind.
    pub fn display_name(&self) -> String {
        let name = match self {
            Step::VerifyServer(s) => &s.name,
            Step::CopyScript(s) => &s.name,
            Step::RunSweep(s) => &s.name,
            Step::FetchResults(s) => &s.name,
            Step::Shell(s) => &s.name,
            Step::StartServer(s) => &s.name,
        };
        name.clone().unwrap_or_else(|| self.kind().to_string())
    }

    pub fn timeout(&self) -> Option<Dur> {
        match self {
            Step::VerifyServer(s) => s.timeout,
            Step::CopyScript(s) => s.timeout,
            Step::RunSweep(s) => s.timeout,
            Step::FetchResults(s) => s.timeout,
            Step::Shell(s) => s.timeout,
            Step::StartServer(s) => s.timeout,
        }
    }

    /// Every template of the step with its quoting, for checking variables before anything runs.
    pub fn templates(&self) -> Vec<(&Text, Quoting)> {
        use Quoting::{Plain, Shell as Sh};
        match self {
            Step::VerifyServer(s) => {
                let mut t = vec![(&s.url, Plain)];
                t.extend(s.model.iter().map(|m| (m, Plain)));
                t
            }
            Step::CopyScript(s) => vec![(&s.src, Plain), (&s.dest, Plain)],
            Step::RunSweep(s) => vec![(&s.command, Sh)],
            Step::FetchResults(s) => vec![(&s.src, Plain)],
            Step::Shell(s) => vec![(&s.command, Sh)],
            Step::StartServer(s) => vec![(&s.command, Sh), (&s.url, Plain)],
        }
    }

    /// Variables this step makes available to the steps after it.
    pub fn provides(&self) -> &'static [&'static str] {
        match self {
            Step::VerifyServer(_) => &["server"],
            _ => &[],
        }
    }
}
