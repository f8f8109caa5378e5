//! One function per command. Each returns how it ended, an [`Exit`]: 0 success, 1 something
//! that ran failed, 2 invalid input (nothing was run).

use std::sync::Arc;

use anyhow::Result;

use crate::cli::{
    CheckArgs, CompareArgs, ComparisonArgs, ConfigArgs, ConfigOpts, ReportArgs, RunArgs, RunsArgs, ShowArgs,
};
use crate::config::slo::Slo;
use crate::config::{Builtins, Config, ConfigError, ConfigErrors, LoadOptions};
use crate::events::Status;
use crate::executor::{self, RunOptions, Start};
use crate::exit::{Exit, Invalid};
use crate::plan;
use crate::progress::Progress;
use crate::report::{self, CompareOptions, Contents, Format, Run};
use crate::store::runs::LATEST;
use crate::words::count;

/// How a command that returned `err` ends: invalid input (a config error included), or failed.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    if err.downcast_ref::<ConfigErrors>().is_some() || err.downcast_ref::<Invalid>().is_some() {
        Exit::Invalid
    } else {
        Exit::Failed
    }
}

fn load(playbook: &std::path::Path, with: &ConfigOpts) -> Result<Config> {
    load_repeated(playbook, with, None)
}

/// [`load`] with `run --repeat N`.
fn load_repeated(playbook: &std::path::Path, with: &ConfigOpts, repeat: Option<u32>) -> Result<Config> {
    let opts = LoadOptions {
        playbook: playbook.to_path_buf(),
        inventory: inventory(with)?,
        limit: with.limit.clone(),
        extra_vars: with.extra_vars.clone(),
        repeat,
        only: with.only.clone(),
    };
    let config = Config::load(&opts)?;
    // Checked on new runs only: a resumed run goes on with the -e values it started with.
    let ignored = crate::config::extra_vars::check_use(&config, &with.extra_vars);
    if !ignored.is_empty() {
        return Err(ConfigErrors(ignored).into());
    }
    Ok(config)
}

/// The inventory: `-i FILE`, else `$RIGRUN_INVENTORY`, else `hosts.yaml` here, which must then
/// exist (said as the default, with `-i` to name another, rather than as a file that cannot be
/// read).
fn inventory(with: &ConfigOpts) -> Result<std::path::PathBuf, ConfigErrors> {
    if let Some(path) = with.inventory.clone().or_else(|| env_path(INVENTORY_ENV)) {
        return Ok(path);
    }
    let path = std::path::PathBuf::from(DEFAULT_INVENTORY);
    if path.exists() {
        return Ok(path);
    }
    let here = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| "the current directory".into());
    Err(ConfigError::plain(
        &path,
        format!("the default inventory is not in {here}; pass one with -i FILE"),
    )
    .into())
}

/// The inventory read when neither `-i` nor [`INVENTORY_ENV`] names one, in the current directory.
const DEFAULT_INVENTORY: &str = "hosts.yaml";

/// Names the inventory when `-i` does not, so that commands work from any directory.
const INVENTORY_ENV: &str = "RIGRUN_INVENTORY";

/// Names the runs directory when `--runs-dir` does not.
const RUNS_DIR_ENV: &str = "RIGRUN_RUNS_DIR";

/// A path from the environment variable `name`, when it is set and not empty.
fn env_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(Into::into)
}

/// Where runs are kept: `--runs-dir`, else `$RIGRUN_RUNS_DIR`, else `runs` here.
pub fn runs_dir(given: Option<&std::path::Path>) -> std::path::PathBuf {
    given
        .map(std::path::Path::to_path_buf)
        .or_else(|| env_path(RUNS_DIR_ENV))
        .unwrap_or_else(|| "runs".into())
}

/// Built-ins as `check` and `plan` show them: values only a run knows are named, not invented.
fn offline_builtins() -> Builtins {
    Builtins {
        run_id: "RUN_ID".into(),
        rigrun: "rigrun".into(),
    }
}

pub async fn check(args: &CheckArgs) -> Result<Exit> {
    let config = load(&args.config.playbook, &args.config.with)?;
    let plan = plan::build(&config, &offline_builtins())?;
    let sweeps: plan::SweepCount = plan.hosts.iter().map(plan::HostPlan::sweep_count).sum();
    println!(
        "{} and {} are valid: {}, {}; in all, {}",
        config.playbook_path.display(),
        config.inventory_path.display(),
        count(config.hosts.len(), "host"),
        count(config.playbook.steps.len(), "step"),
        sweeps.describe()
    );
    if !args.connect {
        return Ok(Exit::Ok);
    }
    let mut unreachable = 0;
    for (host, facts) in executor::reach(&config).await? {
        match facts {
            Ok(facts) => println!("{host}: {}", facts.one_line()),
            Err(why) => {
                unreachable += 1;
                println!("{host}: unreachable: {why}");
            }
        }
    }
    match unreachable {
        0 => Ok(Exit::Ok),
        n => {
            eprintln!(
                "error: {} of {} could not be reached",
                count(n, "host"),
                config.hosts.len()
            );
            Ok(Exit::Failed)
        }
    }
}

pub fn plan(args: &ConfigArgs) -> Result<Exit> {
    let config = load(&args.playbook, &args.with)?;
    let plan = plan::build(&config, &offline_builtins())?;
    print!("{}", plan::describe(&config, &plan));
    Ok(Exit::Ok)
}

pub async fn run(args: &RunArgs) -> Result<Exit> {
    let (config, start) = match (&args.resume, &args.playbook) {
        (Some(dir), _) => match resumed(args, dir)? {
            Some(resumed) => resumed,
            None => return Ok(Exit::Ok),
        },
        (None, Some(playbook)) => {
            let config = load_repeated(playbook, &args.with, args.repeat)?;
            let start = Start::New {
                runs_dir: runs_dir(args.runs_dir.as_deref()),
                label: args.label.clone(),
            };
            (config, start)
        }
        (None, None) => return Err(Invalid("name a playbook, or --resume RUN_DIR".into()).into()),
    };
    // Every template renders and every script exists before any host is touched.
    let plan = plan::build(&config, &offline_builtins())?;
    let works = match &start {
        Start::Resume { work, .. } => work.clone(),
        Start::New { .. } => Default::default(),
    };
    let sweeps = crate::sweep_progress::plan_totals(&config, &plan, &works);
    let config = Arc::new(config);
    let progress = Progress::new(&config.hosts, config.playbook.steps.len(), !args.quiet).with_sweeps(sweeps);
    let opts = RunOptions {
        start,
        forks: args.forks,
    };
    let outcome = executor::run(config, opts, progress).await?;
    close(args, &outcome)
}

/// `--resume RUN_DIR`: the run's configuration and what is left to do; None when the run
/// finished ok and nothing is left (said on stderr).
fn resumed(args: &RunArgs, dir: &std::path::Path) -> Result<Option<(Config, Start)>> {
    let redo = crate::resume::Redo {
        failed: args.redo_failed,
        invalid: args.redo_invalid,
    };
    let resumed = crate::resume::open(dir, redo)?;
    let id = resumed.dir.manifest.run_id.clone();
    if resumed.is_done() && resumed.dir.manifest.status == Status::Ok {
        eprintln!("run {id} finished ok: nothing to do");
        return Ok(None);
    }
    for line in resumed.describe() {
        eprintln!("{line}");
    }
    let crate::resume::Resumed {
        dir,
        config,
        work,
        session,
    } = resumed;
    let dir = Box::new(dir);
    Ok(Some((config, Start::Resume { dir, work, session })))
}

/// The end of a run: the closing table, warnings, failures, and how to go on when it did not
/// finish well.
fn close(args: &RunArgs, outcome: &executor::RunOutcome) -> Result<Exit> {
    if outcome.none_connected {
        return Ok(none_connected(outcome));
    }
    let run = Run::open(&outcome.run_dir)?;
    // A --metric the records turned out not to have: said, and the default tables shown.
    let metrics = match report::check_metrics(std::slice::from_ref(&run), &args.metric, None) {
        Ok(()) => args.metric.clone(),
        Err(e) => {
            eprintln!(
                "warning: {e}
  the closing tables show the default metrics"
            );
            Vec::new()
        }
    };
    // The closing table: `compare` of the run, the first host as the baseline.
    let opts = CompareOptions {
        metrics: &metrics,
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
    let unmeasured = measured_nothing(&run);
    let resume = format!("rigrun run --resume {}", outcome.run_dir.display());
    let verdict = match outcome.status {
        Status::Ok if !unmeasured.is_empty() => format!(
            "every step succeeded, but nothing was measured on {}",
            unmeasured
                .iter()
                .map(|(c, _)| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Status::Ok => "all hosts succeeded".to_string(),
        Status::Interrupted => {
            format!("stopped before its end; everything measured so far is kept; go on with: {resume}")
        }
        _ => format!(
            "some hosts or steps failed; what did not run runs with: {resume} (add --redo-failed \
             to run failed points again)"
        ),
    };
    eprintln!("run {}: {verdict}", outcome.run_dir.display());
    eprintln!("{}", next_commands(&outcome.run_dir));
    Ok(Exit::ok_if(
        outcome.status == Status::Ok && !missed && unmeasured.is_empty(),
    ))
}

/// Says, for each host (or host/variant) whose sweep points all ran without printing a record
/// and that recorded nothing else, that nothing was measured there (and the run exits 1); see
/// `report::measured_nothing`.
fn measured_nothing(run: &Run) -> Vec<(String, Vec<(String, usize)>)> {
    let columns = report::measured_nothing(run);
    for (column, sweeps) in &columns {
        let sweeps: Vec<String> = (sweeps.iter())
            .map(|(step, n)| format!("{} of {step}", crate::words::count(*n, "point")))
            .collect();
        eprintln!(
            "error: {column}: nothing measured: {} ran and exited 0 but printed no record (a record \
             is a JSON object on a line of its own on stdout), and no other step recorded anything",
            sweeps.join(", ")
        );
    }
    columns
}

/// The end of a run no host connected to: each host's reason once, and no table of points
/// that could not run.
fn none_connected(outcome: &executor::RunOutcome) -> Exit {
    for line in &outcome.failures {
        eprintln!("error: {line}");
    }
    let dir = outcome.run_dir.display();
    eprintln!(
        "run {dir}: no host connected, nothing ran; once they are reachable: rigrun run --resume {dir}"
    );
    Exit::Failed
}

/// What to do with a run once it ended: its report and its comparison with another run, with
/// the run directory as the shell reads it.
fn next_commands(run_dir: &std::path::Path) -> String {
    let dir = crate::config::template::shell_quote(&run_dir.display().to_string());
    format!("next: rigrun report {dir} --out report.html · rigrun compare {dir}")
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

/// A run directory as named: a path, or `latest` (when no such path is here) for the newest
/// run of the runs directory.
fn open_run(dir: &std::path::Path) -> Result<Run> {
    let latest = dir.as_os_str() == LATEST && !dir.exists();
    let dir = match latest {
        true => runs_dir(None).join(LATEST),
        false => dir.to_path_buf(),
    };
    if latest && !dir.exists() {
        return Err(Invalid(format!(
            "no run yet in {}: `latest` is the newest run there (set RIGRUN_RUNS_DIR, or name a run directory)",
            runs_dir(None).display()
        ))
        .into());
    }
    Run::open(&dir).map_err(|e| Invalid(format!("{e:#}")).into())
}

/// `rigrun runs`: the runs kept, oldest first, one line each.
pub fn runs(args: &RunsArgs) -> Result<Exit> {
    let dir = runs_dir(args.runs_dir.as_deref());
    let runs = crate::store::runs::list(&dir)
        .map_err(|e| Invalid(format!("cannot list the runs in {}: {e}", dir.display())))?;
    if runs.is_empty() {
        eprintln!("no runs in {}", dir.display());
        return Ok(Exit::Ok);
    }
    print!("{}", report::runs_table(&runs));
    Ok(Exit::Ok)
}

pub fn show(args: &ShowArgs) -> Result<Exit> {
    let mut run = open_run(&args.run_dir)?;
    report::check_metrics(std::slice::from_ref(&run), &args.metric, args.slo.as_ref())?;
    judge_by(std::slice::from_mut(&mut run), args.slo.as_ref());
    let contents = Contents::Steps {
        metrics: &args.metric,
    };
    let shown = report::build(std::slice::from_ref(&run), &contents)?;
    print!("{}", report::render(&shown, args.format));
    Ok(Exit::Ok)
}

pub fn compare(args: &CompareArgs) -> Result<Exit> {
    let mut runs = open_runs(&args.runs)?;
    if !args.facts {
        leave_out_unshared(&mut runs)?;
    }
    let opts = comparison(&args.runs);
    let compared =
        report::build(&runs, &Contents::Comparison(&opts)).map_err(|e| Invalid(format!("{e:#}")))?;
    match args.facts {
        true => print!("{}", report::render_facts(&compared, args.format)),
        false => print!("{}", report::render(&compared, args.format)),
    }
    Ok(Exit::Ok)
}

/// Across runs, those that measured no point the first run did are left out, said in a line
/// each; when none is left to compare with the first, that is the one line (exit 2).
fn leave_out_unshared(runs: &mut Vec<Run>) -> Result<()> {
    let Some((first, others)) = runs.split_first() else {
        return Ok(());
    };
    let unshared: Vec<usize> = (1..runs.len())
        .filter(|&i| !report::shares_a_point(first, &others[i - 1]))
        .collect();
    let said = |run: &Run| {
        format!(
            "run {} (playbook {})",
            run.manifest.run_id, run.manifest.playbook.name
        )
    };
    let lines: Vec<String> = unshared
        .iter()
        .map(|&i| format!("{} shares no sweep point with {}", said(&runs[i]), said(first)))
        .collect();
    if !unshared.is_empty() && unshared.len() == others.len() {
        return Err(Invalid(format!(
            "{}: nothing to compare across them (compare each run on its own: rigrun compare RUN_DIR)",
            lines.join("; ")
        ))
        .into());
    }
    for line in &lines {
        eprintln!("warning: {line}: left out of the comparison");
    }
    for &i in unshared.iter().rev() {
        runs.remove(i);
    }
    Ok(())
}

/// The run directories compared, judged by `--slo` when given; metrics no record holds are
/// refused.
fn open_runs(args: &ComparisonArgs) -> Result<Vec<Run>> {
    let mut runs = args
        .run_dirs
        .iter()
        .map(|d| open_run(d))
        .collect::<Result<Vec<_>>>()?;
    report::check_metrics(&runs, &args.metric, args.slo.as_ref())?;
    judge_by(&mut runs, args.slo.as_ref());
    Ok(runs)
}

/// `--slo`: the runs are judged by these limits instead of their playbooks' (any run, even one
/// made before rigrun knew of limits).
fn judge_by(runs: &mut [Run], slo: Option<&Slo>) {
    if let Some(slo) = slo {
        for run in runs {
            run.manifest.slo = slo.clone();
        }
    }
}

/// The comparison the user asked for on the command line.
fn comparison(args: &ComparisonArgs) -> CompareOptions<'_> {
    CompareOptions {
        metrics: &args.metric,
        baseline: args.baseline.as_deref(),
        tolerance: args.tolerance,
    }
}

pub fn report(args: &ReportArgs) -> Result<Exit> {
    let runs = open_runs(&args.runs)?;
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

/// `rigrun completions SHELL`: the completion script, from the command line's own definitions.
pub fn completions(shell: clap_complete::Shell) -> Result<Exit> {
    let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "rigrun", &mut std::io::stdout());
    Ok(Exit::Ok)
}

/// `rigrun man`: the manual page (its SUBCOMMANDS section names every command; `rigrun
/// COMMAND --help` tells each in full).
pub fn man() -> Result<Exit> {
    let command = <crate::cli::Cli as clap::CommandFactory>::command();
    clap_mangen::Man::new(command).render(&mut std::io::stdout().lock())?;
    Ok(Exit::Ok)
}
