//! The plan: hosts × steps × matrix points, every template rendered for its host.
//!
//! `rigrun plan` prints it; `rigrun check` builds it to catch rendering errors; the executor
//! plans each step again just before running it, when values found on the host (the resolved
//! workdir, what `verify-server` learned) are known.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value as Json;

use crate::config::playbook::{self, Text};
use crate::config::{context, template, Builtins, Config, ConfigError, ConfigErrors, Quoting, Step};
use crate::point::{self, cartesian};

/// How long `verify-server` and `start-server` wait for a server when the playbook does not say.
pub const DEFAULT_SERVER_WAIT: Duration = Duration::from_secs(30);

/// Host variables as a name → JSON value map.
pub type HostVars = IndexMap<String, Json>;

/// One step for one host, with its templates rendered.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedStep {
    pub index: usize,
    pub name: String,
    pub kind: &'static str,
    pub timeout: Option<Duration>,
    pub action: Action,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Action {
    VerifyServer {
        url: String,
        model: Option<String>,
        wait: Duration,
        smoke: bool,
        api_key_env: Option<String>,
    },
    CopyScript {
        src: PathBuf,
        dest: String,
        mode: Option<u32>,
        template: bool,
    },
    RunSweep {
        points: Vec<Point>,
        stop_on_failure: bool,
    },
    FetchResults {
        src: String,
        records: bool,
    },
    Shell {
        command: String,
    },
    StartServer {
        command: String,
        url: String,
        wait: Duration,
        keep: bool,
    },
    /// Depends on values only known while running (e.g. what `verify-server` reports).
    Deferred {
        reason: String,
    },
}

/// One point of a sweep: its matrix values and either a command or the reason it is skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub values: IndexMap<String, Json>,
    pub command: String,
    pub skip: Option<String>,
    /// Set when `skip_if` can only be decided while running (plan output only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

impl Point {
    /// `concurrency=16 input_len=1000`.
    pub fn label(&self) -> String {
        point::label(&self.values)
    }
}

/// The plan of every selected host, for `plan` and `check`.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub hosts: Vec<HostPlan>,
}

#[derive(Debug, Serialize)]
pub struct HostPlan {
    pub host: String,
    pub steps: Vec<PlannedStep>,
}

/// Plans every host without contacting any; values that only the run can know stay deferred.
pub fn build(config: &Config, builtins: &Builtins) -> Result<Plan, ConfigErrors> {
    let mut hosts = Vec::new();
    let mut errors = Vec::new();
    for host in &config.hosts {
        let vars = config.host_vars(host, config.host(host).workdir(), builtins);
        let mut later: HashSet<&str> = HashSet::new();
        let mut steps = Vec::new();
        for (index, step) in config.playbook.steps.iter().enumerate() {
            match plan_step(config, index, step, &vars, &later) {
                Ok(planned) => steps.push(planned),
                Err(e) => errors.push(e),
            }
            later.extend(step.provides());
        }
        hosts.push(HostPlan {
            host: host.clone(),
            steps,
        });
    }
    errors.dedup_by(|a, b| a.line == b.line && a.column == b.column && a.message == b.message);
    if errors.is_empty() {
        Ok(Plan { hosts })
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Plans one step with the host's variables. `runtime` names variables that earlier steps will
/// provide while running; a template that needs one of them and lacks it is deferred.
pub fn plan_step(
    config: &Config,
    index: usize,
    step: &Step,
    vars: &HostVars,
    runtime: &HashSet<&str>,
) -> Result<PlannedStep, ConfigError> {
    let r = Renderer {
        config,
        vars,
        runtime,
    };
    let action = match r.action(step) {
        Ok(action) => action,
        Err(RenderError::Deferred(var)) => Action::Deferred {
            reason: format!("uses `{var}`, known once an earlier step has run"),
        },
        Err(RenderError::Config(e)) => return Err(e),
    };
    Ok(PlannedStep {
        index,
        name: step.display_name(),
        kind: step.kind(),
        timeout: step.timeout().map(|d| d.0),
        action,
    })
}

enum RenderError {
    Deferred(String),
    Config(ConfigError),
}

struct Renderer<'a> {
    config: &'a Config,
    vars: &'a HostVars,
    runtime: &'a HashSet<&'a str>,
}

impl Renderer<'_> {
    fn action(&self, step: &Step) -> Result<Action, RenderError> {
        Ok(match step {
            Step::VerifyServer(s) => Action::VerifyServer {
                url: self.text(&s.url, Quoting::Plain, self.vars)?,
                model: s
                    .model
                    .as_ref()
                    .map(|m| self.text(m, Quoting::Plain, self.vars))
                    .transpose()?,
                wait: s.wait.map_or(DEFAULT_SERVER_WAIT, |d| d.0),
                smoke: s.smoke,
                api_key_env: s.api_key_env.clone(),
            },
            Step::CopyScript(s) => self.copy_script(s)?,
            Step::RunSweep(s) => Action::RunSweep {
                points: self.points(s)?,
                stop_on_failure: s.stop_on_failure,
            },
            Step::FetchResults(s) => Action::FetchResults {
                src: self.text(&s.src, Quoting::Plain, self.vars)?,
                records: s.records,
            },
            Step::Shell(s) => Action::Shell {
                command: self.text(&s.command, Quoting::Shell, self.vars)?,
            },
            Step::StartServer(s) => Action::StartServer {
                command: self.text(&s.command, Quoting::Shell, self.vars)?,
                url: self.text(&s.url, Quoting::Plain, self.vars)?,
                wait: s.wait.map_or(DEFAULT_SERVER_WAIT, |d| d.0),
                keep: s.keep,
            },
        })
    }

    fn copy_script(&self, s: &playbook::CopyScript) -> Result<Action, RenderError> {
        let src_text = self.text(&s.src, Quoting::Plain, self.vars)?;
        let src = self.config.playbook_dir().join(&src_text);
        if !src.is_file() {
            return Err(self.error(
                &s.src,
                format!(
                    "the script {} does not exist (src: is relative to the playbook file)",
                    src.display()
                ),
            ));
        }
        let mode = match &s.mode {
            None => None,
            Some(m) => Some(
                u32::from_str_radix(m.value.trim_start_matches("0o"), 8).map_err(|_| {
                    self.error(
                        m,
                        format!("mode `{}` is not octal permission bits such as \"0755\"", m.value),
                    )
                })?,
            ),
        };
        Ok(Action::CopyScript {
            src,
            dest: self.text(&s.dest, Quoting::Plain, self.vars)?,
            mode,
            template: s.template,
        })
    }

    fn points(&self, s: &playbook::RunSweep) -> Result<Vec<Point>, RenderError> {
        for (key, values) in &s.matrix {
            if values.value.is_empty() {
                return Err(self.error(values, format!("matrix `{key}` has no values")));
            }
        }
        let mut points = Vec::new();
        for values in cartesian(&s.matrix) {
            let mut vars = self.vars.clone();
            vars.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
            let (skip, pending) = match &s.skip_if {
                None => (None, None),
                Some(expr) => match self.skip_reason(expr, &vars) {
                    Ok(skip) => (skip, None),
                    Err(RenderError::Deferred(var)) => (None, Some(format!("skip_if uses `{var}`"))),
                    Err(e) => return Err(e),
                },
            };
            let command = self.text(&s.command, Quoting::Shell, &vars)?;
            points.push(Point {
                values,
                command,
                skip,
                pending,
            });
        }
        Ok(points)
    }

    fn skip_reason(&self, expr: &Text, vars: &HostVars) -> Result<Option<String>, RenderError> {
        if let Ok(used) = template::expression_variables(&expr.value) {
            self.require_known(&used, vars)?;
        }
        template::skip_reason(&expr.value, &context(vars))
            .map_err(|e| self.error(expr, format!("skip_if cannot be evaluated: {e}")))
    }

    fn text(&self, text: &Text, quoting: Quoting, vars: &HostVars) -> Result<String, RenderError> {
        if let Ok(used) = template::variables(&text.value) {
            self.require_known(&used, vars)?;
        }
        template::render(&text.value, quoting, &context(vars)).map_err(|e| self.error(text, e))
    }

    fn require_known(&self, used: &HashSet<String>, vars: &HostVars) -> Result<(), RenderError> {
        match used
            .iter()
            .find(|v| !vars.contains_key(*v) && self.runtime.contains(v.as_str()))
        {
            Some(var) => Err(RenderError::Deferred(var.clone())),
            None => Ok(()),
        }
    }

    fn error(&self, at: &serde_saphyr::Spanned<impl Sized>, message: String) -> RenderError {
        RenderError::Config(ConfigError::at(
            &self.config.playbook_path,
            &self.config.playbook_text,
            &at.referenced,
            message,
        ))
    }
}

/// The plan as text for `rigrun plan`.
pub fn describe(config: &Config, plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "playbook {} ({})",
        config.playbook.name.value,
        config.playbook_path.display()
    );
    for host in &plan.hosts {
        let spec = config.host(&host.host);
        let (points, skipped) = count_points(&host.steps);
        let _ = writeln!(
            out,
            "\nhost {} ({}, workdir {}): {} steps, {} sweep points ({} to run, {} skipped)",
            host.host,
            connection_summary(&host.host, spec),
            spec.workdir(),
            host.steps.len(),
            points,
            points - skipped,
            skipped
        );
        for step in &host.steps {
            describe_step(&mut out, step);
        }
    }
    out
}

fn count_points(steps: &[PlannedStep]) -> (usize, usize) {
    let mut points = 0;
    let mut skipped = 0;
    for step in steps {
        if let Action::RunSweep { points: p, .. } = &step.action {
            points += p.len();
            skipped += p.iter().filter(|p| p.skip.is_some()).count();
        }
    }
    (points, skipped)
}

fn connection_summary(name: &str, spec: &crate::config::HostSpec) -> String {
    match spec.connection {
        crate::config::Connection::Local => "local".to_string(),
        crate::config::Connection::Ssh => {
            let user = spec.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
            let port = spec.port.map(|p| format!(":{p}")).unwrap_or_default();
            format!("ssh {user}{}{port}", spec.address_or(name))
        }
    }
}

fn describe_step(out: &mut String, step: &PlannedStep) {
    let head = format!("  {}. {}", step.index + 1, step.name);
    let _ = match &step.action {
        Action::VerifyServer {
            url,
            model,
            wait,
            smoke,
            ..
        } => writeln!(
            out,
            "{head}: GET {url}/v1/models until it answers (wait {}){}{}",
            humantime::format_duration(*wait),
            model
                .as_ref()
                .map(|m| format!(", model {m} must be listed"))
                .unwrap_or_default(),
            if *smoke { ", then one short completion" } else { "" }
        ),
        Action::CopyScript { src, dest, .. } => writeln!(out, "{head}: upload {} to {dest}", src.display()),
        Action::RunSweep { points, .. } => {
            let _ = writeln!(out, "{head}: {} points", points.len());
            for p in points {
                let _ = match (&p.skip, &p.pending) {
                    (Some(why), _) => writeln!(out, "       {}  SKIP: {why}", p.label()),
                    (None, Some(why)) => {
                        writeln!(
                            out,
                            "       {}  $ {}  (skipped or not: decided at run time, {why})",
                            p.label(),
                            p.command
                        )
                    }
                    (None, None) => writeln!(out, "       {}  $ {}", p.label(), p.command),
                };
            }
            Ok(())
        }
        Action::FetchResults { src, .. } => writeln!(out, "{head}: fetch {src} into the run directory"),
        Action::Shell { command } => writeln!(out, "{head}: $ {command}"),
        Action::StartServer { command, url, .. } => {
            writeln!(out, "{head}: start `{command}` in the background, wait for {url}")
        }
        Action::Deferred { reason } => writeln!(out, "{head}: decided at run time ({reason})"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matrix(yaml: &str) -> IndexMap<String, serde_saphyr::Spanned<Vec<Json>>> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn cartesian_product_keeps_the_written_order() {
        let m = matrix("concurrency: [1, 4]\ninput_len: [100, 200, 300]\n");
        let points = cartesian(&m);
        assert_eq!(points.len(), 6);
        let labels: Vec<String> = points.iter().map(point::label).collect();
        assert_eq!(labels[0], "concurrency=1 input_len=100");
        assert_eq!(labels[2], "concurrency=1 input_len=300");
        assert_eq!(labels[3], "concurrency=4 input_len=100");
    }

    #[test]
    fn an_empty_matrix_is_one_point() {
        let points = cartesian(&IndexMap::new());
        assert_eq!(points.len(), 1);
        assert_eq!(point::label(&points[0]), "(single)");
    }

    #[test]
    fn string_values_print_without_quotes() {
        let mut v = IndexMap::new();
        v.insert("model".to_string(), json!("qwen"));
        v.insert("c".to_string(), json!(8));
        assert_eq!(point::label(&v), "model=qwen c=8");
    }
}
