//! The one report builder: from run directories to the [`Report`] every format renders.
//! `show`, `compare` (one run or several), the closing table of `rigrun run` and the HTML
//! report differ only in the [`Contents`] they ask for.

use anyhow::{bail, Result};

use super::charts;
use super::compare::{shares_a_point, Across, CompareOptions, Ratios};
use super::facts_diff::{self, FactsDiff};
use super::grid::RunTables;
use super::header::Header;
use super::model::{Report, RunSummary, Section, Topic};
use super::steps::StepRecords;
use super::{references, Run};

/// What a report holds besides the hosts' facts and the references.
pub enum Contents<'a> {
    /// `show`: every step of the run, each with its table in `metric`.
    Steps { metrics: &'a [String] },
    /// `compare` and the closing table of `run`: per main step, the hosts side by side with
    /// their ratios (one run), or each host's value in every run and its change (several).
    Comparison(&'a CompareOptions<'a>),
    /// `report`: per main step of any run, its charts, each run's hosts side by side, and the
    /// change across runs when there are several.
    Report(&'a CompareOptions<'a>),
}

/// The report of `runs`: an error for a `--baseline` the runs compared do not have, or no run.
pub fn build(runs: &[Run], contents: &Contents) -> Result<Report> {
    if runs.is_empty() {
        bail!("no run directory given");
    }
    let mut sections = match *contents {
        Contents::Steps { metrics } => runs.iter().flat_map(|r| every_step(r, metrics)).collect(),
        Contents::Comparison(opts) if runs.len() == 1 => side_by_side(&runs[0], opts)?,
        Contents::Comparison(opts) => across_runs(runs, opts)?,
        Contents::Report(opts) => report(runs, opts)?,
    };
    sections.extend(references_section(runs));
    let manifests: Vec<_> = runs.iter().map(|r| &r.manifest).collect();
    Ok(Report {
        runs: runs.iter().map(RunSummary::of).collect(),
        facts_diff: compared_facts(runs, contents),
        header: Header::new(&manifests),
        sections,
    })
}

/// What differs between the columns the tables compare: the hosts of each run (`show`,
/// `compare` of one run, the HTML report), and each host across runs (`compare` of several, the
/// HTML report of several).
fn compared_facts(runs: &[Run], contents: &Contents) -> Vec<FactsDiff> {
    match contents {
        Contents::Comparison(_) if runs.len() > 1 => facts_diff::across_runs(runs),
        Contents::Steps { .. } | Contents::Comparison(_) => facts_diff::within_runs(runs),
        Contents::Report(_) => {
            let mut diffs = facts_diff::within_runs(runs);
            diffs.extend(facts_diff::across_runs(runs));
            diffs
        }
    }
}

/// `show`: a section per step of the run, each with its table.
fn every_step(run: &Run, metrics: &[String]) -> Vec<Section> {
    let tables = RunTables::new(run);
    let section = |step| Section::tables(topic(step), tables.grids(step, metrics));
    tables.steps.iter().map(section).collect()
}

/// Within one run, per main step: the hosts side by side with their ratios to the baseline.
fn side_by_side(run: &Run, opts: &CompareOptions) -> Result<Vec<Section>> {
    let tables = RunTables::new(run);
    let ratios = Ratios::new(run, opts.baseline)?;
    let sections = tables
        .main_steps()
        .map(|step| {
            let grids = tables.grids(step, opts.metrics);
            Section::tables(topic(step), grids.into_iter().map(|g| ratios.add_to(g)).collect())
        })
        .collect();
    Ok(sections)
}

/// Across runs, per main step of the first run: each host's value in every run and its change.
fn across_runs(runs: &[Run], opts: &CompareOptions) -> Result<Vec<Section>> {
    let across = Across::new(runs, opts)?;
    let sections = across
        .steps()
        .map(|step| Section::tables(topic(step), across.grids(step)))
        .collect();
    Ok(sections)
}

/// The HTML report: per main step of any run (in step order), its charts, each run's hosts
/// side by side, then the change across runs.
fn report(runs: &[Run], opts: &CompareOptions) -> Result<Vec<Section>> {
    // Across runs only when a later run measured a point the first did.
    let across = match runs[1..].iter().any(|r| shares_a_point(&runs[0], r)) {
        false => None,
        true => Some(Across::new(runs, opts)?),
    };
    let tables: Vec<RunTables> = runs.iter().map(RunTables::new).collect();
    let mut sections = Vec::new();
    for (index, name) in report_steps(&tables) {
        let mut grids = Vec::new();
        for run in &tables {
            let ratios = Ratios::new(run.run, opts.baseline)?;
            let steps = run
                .steps
                .iter()
                .filter(|s| s.step_index == index && s.step == name);
            for step in steps {
                grids.extend(
                    run.grids(step, opts.metrics)
                        .into_iter()
                        .map(|g| ratios.add_to(g)),
                );
            }
        }
        grids.extend(across.iter().flat_map(|a| a.grids_of(index, &name)));
        let (charts, charts_left_out) = charts::for_step(runs, index, &name);
        sections.push(Section {
            topic: Topic::Step { index, name },
            charts,
            charts_left_out,
            grids,
        });
    }
    Ok(sections)
}

/// The steps the HTML report covers, in order: each run's main steps.
fn report_steps(tables: &[RunTables]) -> Vec<(usize, String)> {
    let mut keys: Vec<(usize, String)> = Vec::new();
    for step in tables.iter().flat_map(RunTables::main_steps) {
        let key = (step.step_index, step.step.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.sort();
    keys
}

/// Each run's references checked, when the playbooks state any.
fn references_section(runs: &[Run]) -> Option<Section> {
    let grids: Vec<_> = runs.iter().filter_map(references::grid).collect();
    (!grids.is_empty()).then(|| Section::tables(Topic::References, grids))
}

fn topic(step: &StepRecords) -> Topic {
    Topic::Step {
        index: step.step_index,
        name: step.step.clone(),
    }
}
