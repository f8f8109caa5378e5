//! The plan: hosts × steps × matrix points, every template rendered for its host.
//!
//! `rigrun plan` prints it; `rigrun check` builds it to catch rendering errors; the executor
//! plans each step again just before running it, when values found on the host (the resolved
//! workdir, what `verify-server` learned) are known.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;

use crate::config::render::{RenderError, Renderer};
use crate::config::server_block::ServerPlan;
use crate::config::steps::Action;
use crate::config::template;
use crate::config::{Builtins, Config, ConfigError, ConfigErrors, HostVars, Step};
use crate::point::{self, PlannedSweep};
use crate::words::count;

/// One step for one host, with its templates rendered.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedStep {
    pub index: usize,
    pub name: String,
    pub kind: &'static str,
    pub timeout: Option<Duration>,
    pub action: Action,
    /// The how-manyth time the step runs on the host (set by the executor; 1 when planned).
    #[serde(skip)]
    pub attempt: u32,
}

/// The plan of every selected host, for `plan` and `check`.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub hosts: Vec<HostPlan>,
}

#[derive(Debug, Serialize)]
pub struct HostPlan {
    pub host: String,
    /// The server of each variant, in the order they run (none without a `server:` block).
    pub variants: Vec<ServerPlan>,
    /// The steps, planned with the first variant's values (each variant runs them all).
    pub steps: Vec<PlannedStep>,
}

/// Plans every host without contacting any; values that only the run can know stay deferred.
/// All its renders share one budget ([`template::PLAN_FUEL`]), so no playbook can hang it.
pub fn build(config: &Config, builtins: &Builtins) -> Result<Plan, ConfigErrors> {
    template::with_plan_budget(|| build_hosts(config, builtins))
}

/// Plans every host in turn, collecting every step's errors.
fn build_hosts(config: &Config, builtins: &Builtins) -> Result<Plan, ConfigErrors> {
    let mut hosts = Vec::new();
    let mut errors = Vec::new();
    for host in &config.hosts {
        let mut vars = config.host_vars(host, config.host(host).workdir(), builtins);
        let variants = match plan_variants(config, &vars) {
            Ok(variants) => variants,
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        };
        if let Some(first) = variants.first() {
            vars = first.variant.vars(&vars);
        }
        let mut later: HashSet<&str> = HashSet::new();
        let mut steps = Vec::new();
        for (index, step) in config.playbook.steps.iter().enumerate() {
            match plan_step(config, index, step, &vars, &later) {
                Ok(planned) => steps.push(planned),
                Err(e) => errors.push(e),
            }
            later.extend(step.as_kind().provides());
        }
        hosts.push(HostPlan {
            host: host.clone(),
            variants,
            steps,
        });
    }
    // The same mistake is usually found on every host: said once.
    let mut seen = HashSet::new();
    errors.retain(|e| seen.insert((e.file.clone(), e.line, e.column, e.message.clone())));
    if errors.is_empty() {
        Ok(Plan { hosts })
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Plans the server of every variant for one host (none without a `server:` block).
pub fn plan_variants(config: &Config, vars: &HostVars) -> Result<Vec<ServerPlan>, ConfigError> {
    let Some(server) = &config.playbook.server else {
        return Ok(Vec::new());
    };
    let runtime = HashSet::new();
    let error = |e: RenderError| match e {
        RenderError::Config(e) => e,
        RenderError::Deferred(var) => ConfigError::plain(
            &config.playbook_path,
            format!("server: `{var}` is only known once a step has run; the server starts before every step"),
        ),
    };
    let r = Renderer {
        config,
        vars,
        runtime: &runtime,
    };
    server.check(&r).map_err(error)?;
    let plan = |variant: &crate::config::server_block::Variant| {
        let vars = variant.vars(vars);
        let r = Renderer { vars: &vars, ..r };
        server.plan(&r, variant).map_err(error)
    };
    config.variants().iter().map(plan).collect()
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
    let action = match step.plan(&r) {
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
        attempt: 1,
    })
}

/// The run's sweeps (the steps with points) as planned for every column before connecting:
/// each host, or each of its server variants, with its own values.
pub fn planned_sweeps(config: &Config, run_id: &str) -> Vec<PlannedSweep> {
    let mut sweeps: Vec<PlannedSweep> = (config.playbook.steps.iter().enumerate())
        .filter_map(|(step_index, step)| {
            Some(PlannedSweep {
                step_index,
                step: step.display_name(),
                points: step.as_kind().points(&config.only)?,
                skipped: IndexMap::new(),
                search: step.as_kind().search_axis().map(str::to_string),
            })
        })
        .collect();
    let builtins = Builtins {
        run_id: run_id.to_string(),
        rigrun: "rigrun".into(),
    };
    for (column, vars) in columns(config, &builtins) {
        let mut later: HashSet<&str> = HashSet::new();
        for (index, step) in config.playbook.steps.iter().enumerate() {
            if let Some(sweep) = sweeps.iter_mut().find(|s| s.step_index == index) {
                let planned = plan_step(config, index, step, &vars, &later);
                let points = planned.iter().flat_map(|p| p.action.points());
                for (point, reason) in points.filter_map(|p| Some((p, p.skip.as_ref()?))) {
                    let skipped = sweep.skipped.entry(column.clone()).or_default();
                    skipped.insert(point.label(), reason.clone());
                }
            }
            later.extend(step.as_kind().provides());
        }
    }
    sweeps
}

/// Every column of the run with its variables: each host, or each of its server variants.
fn columns(config: &Config, builtins: &Builtins) -> Vec<(String, HostVars)> {
    let mut columns = Vec::new();
    for host in &config.hosts {
        let vars = config.host_vars(host, config.host(host).workdir(), builtins);
        let variants = plan_variants(config, &vars).unwrap_or_default();
        match variants.is_empty() {
            true => columns.push((host.clone(), vars)),
            false => columns.extend(
                variants
                    .iter()
                    .map(|v| (point::column(host, v.variant.name()), v.variant.vars(&vars))),
            ),
        }
    }
    columns
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
        let _ = writeln!(
            out,
            "\nhost {} ({}, workdir {}): {}; {}",
            host.host,
            connection_summary(&host.host, spec),
            spec.workdir(),
            count(host.steps.len(), "step"),
            host.sweep_count().describe()
        );
        if let Some(slurm) = &spec.slurm {
            let _ = writeln!(
                out,
                "  on one node of a Slurm allocation, asked for when its first step starts: sbatch {}; every step runs there through srun",
                slurm.value.sbatch_options().join(" ")
            );
        }
        if !host.variants.is_empty() {
            let _ = writeln!(
                out,
                "  server, {}, one after another: each stopped (its processes gone), the next started and ready before the steps below (shown for the first) run against it",
                count(host.variants.len(), "variant")
            );
            for variant in &host.variants {
                variant.describe(&mut out);
            }
        }
        for step in &host.steps {
            describe_step(&mut out, step);
        }
    }
    out
}

/// How much of the sweeps runs on a host, or on all hosts together: points, and their runs
/// counting each repetition and each server variant.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepCount {
    /// Points that run (`skip_if` false, or decided at run time), once per variant.
    pub points: usize,
    /// What runs: each point once per repetition, for every server variant.
    pub runs: usize,
    /// Points `skip_if` skips.
    pub skipped: usize,
    /// Points `--only` leaves out.
    pub left_out: usize,
    /// Points whose `skip_if` is only decided at run time (counted as running).
    pub pending: usize,
    /// Whether some point is measured more than once.
    pub repeated: bool,
    /// Server variants each point runs against (1 without a `server:` block).
    pub variants: usize,
}

impl HostPlan {
    /// The host's sweeps, counted (see [`SweepCount`]).
    pub fn sweep_count(&self) -> SweepCount {
        let variants = self.variants.len().max(1);
        let mut n = SweepCount {
            variants,
            ..SweepCount::default()
        };
        for step in &self.steps {
            let Action::RunSweep(sweep) = &step.action else {
                continue;
            };
            let running = sweep.points.iter().filter(|p| p.skip.is_none()).count();
            n.points += running;
            n.runs += running * sweep.repeat.max(1) as usize * variants;
            n.skipped += sweep.points.len() - running;
            n.left_out += sweep.left_out;
            n.pending += sweep.points.iter().filter(|p| p.pending.is_some()).count();
            n.repeated |= sweep.repeat > 1 && running > 0;
        }
        n
    }
}

impl std::ops::Add for SweepCount {
    type Output = SweepCount;

    fn add(self, other: SweepCount) -> SweepCount {
        SweepCount {
            points: self.points + other.points,
            runs: self.runs + other.runs,
            skipped: self.skipped + other.skipped,
            left_out: self.left_out + other.left_out,
            pending: self.pending + other.pending,
            repeated: self.repeated || other.repeated,
            variants: self.variants.max(other.variants),
        }
    }
}

impl std::iter::Sum for SweepCount {
    fn sum<I: Iterator<Item = SweepCount>>(iter: I) -> SweepCount {
        iter.fold(SweepCount::default(), |a, b| a + b)
    }
}

impl SweepCount {
    /// `9 sweep points to run, 27 runs counting repetitions (1 skipped by skip_if)`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} to run", count(self.points, "sweep point"));
        if self.runs != self.points {
            let mut counting = Vec::new();
            if self.repeated {
                counting.push("repetitions".to_string());
            }
            if self.variants > 1 {
                counting.push(count(self.variants, "server variant"));
            }
            text.push_str(&format!(
                ", {} counting {}",
                count(self.runs, "run"),
                counting.join(" and ")
            ));
        }
        let mut also = Vec::new();
        if self.skipped > 0 {
            also.push(format!("{} more skipped by skip_if", self.skipped));
        }
        if self.pending > 0 {
            also.push(format!("skip_if decides {} of them at run time", self.pending));
        }
        if self.left_out > 0 {
            also.push(format!("{} more left out by --only", self.left_out));
        }
        if !also.is_empty() {
            text.push_str(&format!(" ({})", also.join(", ")));
        }
        text
    }
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
    step.action.describe(out, &head);
}

#[cfg(test)]
mod tests {
    use crate::point::{self, cartesian};
    use indexmap::IndexMap;
    use serde_json::{json, Value as Json};

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
        let points = cartesian(&IndexMap::<String, serde_saphyr::Spanned<Vec<Json>>>::new());
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
