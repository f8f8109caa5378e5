//! One function per command. Each returns how it ended, an [`Exit`]: 0 success, 1 something
//! that ran failed, 2 invalid input (nothing was run).

use std::sync::Arc;

use anyhow::Result;

use crate::cli::{CompareArgs, ComparisonArgs, ConfigArgs, ReportArgs, RunArgs, ShowArgs};
use crate::config::{Builtins, Config, ConfigErrors, LoadOptions};
use crate::events::Status;
use crate::executor::{self, RunOptions};
use crate::exit::{Exit, Invalid};
use crate::plan;
use crate::progress::Progress;
use crate::report::{self, CompareOptions, Contents, Format, Run};

/// How a command that returned `err` ends: invalid input (a config error included), or failed.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    if err.downcast_ref::<ConfigErrors>().is_some() || err.downcast_ref::<Invalid>().is_some() {
        Exit::Invalid
    } else {
        Exit::Failed
    }
}

fn load(args: &ConfigArgs) -> Result<Config> {
    let opts = LoadOptions {
        playbook: args.playbook.clone(),
        inventory: args.inventory.clone(),
        limit: args.limit.clone(),
        extra_vars: args.extra_vars.clone(),
    };
    Ok(Config::load(&opts)?)
}

/// Built-ins as `check` and `plan` show them: values only a run knows are named, not invented.
fn offline_builtins() -> Builtins {
    Builtins {
        run_id: "RUN_ID".into(),
        rigrun: "rigrun".into(),
    }
}

pub fn check(args: &ConfigArgs) -> Result<Exit> {
    let config = load(args)?;
    let plan = plan::build(&config, &offline_builtins())?;
    let points: usize = plan
        .hosts
        .iter()
        .flat_map(|h| &h.steps)
        .map(|s| s.action.points().len())
        .sum();
    println!(
        "{} and {} are valid: {} hosts, {} steps, {} sweep points in all",
        config.playbook_path.display(),
        config.inventory_path.display(),
        config.hosts.len(),
        config.playbook.steps.len(),
        points
    );
    Ok(Exit::Ok)
}

pub fn plan(args: &ConfigArgs) -> Result<Exit> {
    let config = load(args)?;
    let plan = plan::build(&config, &offline_builtins())?;
    print!("{}", plan::describe(&config, &plan));
    Ok(Exit::Ok)
}

pub async fn run(args: &RunArgs) -> Result<Exit> {
    let config = load(&args.config)?;
    // Every template renders and every script exists before any host is touched.
    plan::build(&config, &offline_builtins())?;
    let config = Arc::new(config);
    let progress = Progress::new(&config.hosts, config.playbook.steps.len(), !args.quiet);
    let opts = RunOptions {
        runs_dir: args.runs_dir.clone(),
        forks: args.forks,
    };
    let outcome = executor::run(config, opts, progress).await?;
    let run = Run::open(&outcome.run_dir)?;
    // The closing table: `compare` of the run, the first host as the baseline.
    let opts = CompareOptions {
        metric: args.metric.as_deref(),
        baseline: None,
        tolerance: report::DEFAULT_TOLERANCE,
    };
    let closing = report::build(std::slice::from_ref(&run), &Contents::Comparison(&opts))?;
    print!("{}", report::render(&closing, Format::Table));
    for (host, entry) in &run.manifest.hosts {
        for warning in &entry.warnings {
            eprintln!("warning: {host}: {warning}");
        }
    }
    for line in &outcome.failures {
        eprintln!("error: {line}");
    }
    let missed = missed_references(&run, args.check_references);
    let verdict = match outcome.status {
        Status::Ok => "all hosts succeeded",
        Status::Interrupted => "interrupted; everything measured so far is kept",
        _ => "some hosts or steps failed",
    };
    eprintln!("run {}: {verdict}", outcome.run_dir.display());
    Ok(Exit::ok_if(outcome.status == Status::Ok && !missed))
}

/// Reports missed references on stderr; true when they fail the run (`--check-references`).
fn missed_references(run: &Run, check: bool) -> bool {
    let misses = report::references::misses(run);
    if check && run.manifest.references.is_empty() {
        eprintln!("warning: --check-references: the playbook states no references");
    }
    for miss in &misses {
        let level = if check { "error" } else { "warning" };
        eprintln!("{level}: reference missed: {miss}");
    }
    check && !misses.is_empty()
}

fn open_run(dir: &std::path::Path) -> Result<Run> {
    Run::open(dir).map_err(|e| Invalid(format!("{e:#}")).into())
}

pub fn show(args: &ShowArgs) -> Result<Exit> {
    let run = open_run(&args.run_dir)?;
    let contents = Contents::Steps {
        metric: args.metric.as_deref(),
    };
    let shown = report::build(std::slice::from_ref(&run), &contents)?;
    print!("{}", report::render(&shown, args.format));
    Ok(Exit::Ok)
}

pub fn compare(args: &CompareArgs) -> Result<Exit> {
    let runs = open_runs(&args.runs.run_dirs)?;
    let opts = comparison(&args.runs);
    let compared =
        report::build(&runs, &Contents::Comparison(&opts)).map_err(|e| Invalid(format!("{e:#}")))?;
    print!("{}", report::render(&compared, args.format));
    Ok(Exit::Ok)
}

fn open_runs(dirs: &[std::path::PathBuf]) -> Result<Vec<Run>> {
    dirs.iter().map(|d| open_run(d)).collect()
}

/// The comparison the user asked for on the command line.
fn comparison(args: &ComparisonArgs) -> CompareOptions<'_> {
    CompareOptions {
        metric: args.metric.as_deref(),
        baseline: args.baseline.as_deref(),
        tolerance: args.tolerance,
    }
}

pub fn report(args: &ReportArgs) -> Result<Exit> {
    let runs = open_runs(&args.runs.run_dirs)?;
    let opts = comparison(&args.runs);
    let model = report::build(&runs, &Contents::Report(&opts)).map_err(|e| Invalid(format!("{e:#}")))?;
    let html = report::html(&model)?;
    std::fs::write(&args.out, html).map_err(|e| {
        Invalid(format!(
            "--out {}: cannot write the report: {e}; choose a writable path",
            args.out.display()
        ))
    })?;
    eprintln!("report written to {}", args.out.display());
    Ok(Exit::Ok)
}
