//! `compare`: hosts side by side with ratio columns against a baseline host; across runs, the
//! change in percent per cell. Skipped, failed and missing cells are never compared.

use anyhow::{bail, Result};

use super::{cell, group, is_fetched, pick_metric, Cell, Grid, Run, StepRecords};

pub struct CompareOptions<'a> {
    pub metric: Option<&'a str>,
    pub baseline: Option<&'a str>,
}

pub fn compare(runs: &[Run], opts: &CompareOptions) -> Result<Vec<Grid>> {
    match runs {
        [] => bail!("compare needs at least one run directory"),
        [run] => compare_hosts(run, opts),
        _ => compare_runs(runs, opts),
    }
}

fn ratio(value: Option<f64>, base: Option<f64>) -> Cell {
    match (value, base) {
        (Some(v), Some(b)) if b != 0.0 => Cell::Derived {
            value: v / b,
            unit: "x",
        },
        _ => Cell::Missing,
    }
}

fn change(value: Option<f64>, base: Option<f64>) -> Cell {
    match (value, base) {
        (Some(v), Some(b)) if b != 0.0 => Cell::Derived {
            value: (v / b - 1.0) * 100.0,
            unit: "%",
        },
        _ => Cell::Missing,
    }
}

/// The table printed at the end of `rigrun run`: the hosts side by side with ratios, for the
/// sweeps; tables of fetched files only when no sweep measured anything (they repeat the sweeps'
/// numbers otherwise).
pub fn closing_grids(run: &Run, metric: Option<&str>) -> Result<Vec<Grid>> {
    let groups = group(&run.records);
    let any_sweep = groups.iter().any(|g| !is_fetched(g));
    let wanted = groups
        .into_iter()
        .filter(|g| !any_sweep || !is_fetched(g))
        .collect();
    host_grids(
        run,
        wanted,
        &CompareOptions {
            metric,
            baseline: None,
        },
    )
}

/// Within one run: every host's value, then each host's ratio to the baseline.
fn compare_hosts(run: &Run, opts: &CompareOptions) -> Result<Vec<Grid>> {
    host_grids(run, group(&run.records), opts)
}

fn host_grids(run: &Run, steps: Vec<StepRecords>, opts: &CompareOptions) -> Result<Vec<Grid>> {
    let hosts = run.hosts();
    let baseline = baseline(&hosts, opts.baseline)?;
    let others: Vec<&String> = hosts.iter().filter(|h| **h != baseline).collect();
    let mut grids = Vec::new();
    for step in steps {
        let metric = pick_metric(&step, opts.metric);
        let mut columns = vec!["point".to_string()];
        columns.extend(hosts.iter().cloned());
        columns.extend(others.iter().map(|h| format!("{h} / {baseline}")));
        let rows = step
            .rows
            .iter()
            .map(|(label, by_host)| {
                let base = cell(by_host.get(&baseline), &metric).value();
                let mut row = vec![Cell::Label { text: label.clone() }];
                row.extend(hosts.iter().map(|h| cell(by_host.get(h), &metric)));
                row.extend(
                    others
                        .iter()
                        .map(|h| ratio(cell(by_host.get(*h), &metric).value(), base)),
                );
                row
            })
            .collect();
        grids.push(Grid {
            title: format!(
                "{} · step {}: {}",
                run.manifest.run_id,
                step.step_index + 1,
                step.step
            ),
            metric,
            columns,
            rows,
        });
    }
    Ok(grids)
}

fn baseline(hosts: &[String], asked: Option<&str>) -> Result<String> {
    match asked {
        Some(b) if hosts.iter().any(|h| h == b) => Ok(b.to_string()),
        Some(b) => bail!(
            "--baseline {b}: no such host in the run (hosts: {})",
            hosts.join(", ")
        ),
        None => hosts
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the run has no hosts")),
    }
}

/// Across runs: per host, the value in each run and the change against the first run.
fn compare_runs(runs: &[Run], opts: &CompareOptions) -> Result<Vec<Grid>> {
    let first = &runs[0];
    let groups: Vec<Vec<StepRecords>> = runs.iter().map(|r| group(&r.records)).collect();
    let mut hosts: Vec<String> = Vec::new();
    for run in runs {
        for h in run.hosts() {
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
    }
    if let Some(b) = opts.baseline {
        baseline(&hosts, Some(b))?;
    }
    let mut grids = Vec::new();
    for step in &groups[0] {
        let metric = pick_metric(step, opts.metric);
        let matching: Vec<Option<&StepRecords>> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .find(|s| s.step == step.step && s.step_index == step.step_index)
            })
            .collect();
        let mut columns = vec!["point".to_string()];
        for host in &hosts {
            for run in runs {
                columns.push(format!("{host} @{}", short_id(&run.manifest.run_id)));
            }
            for run in &runs[1..] {
                columns.push(format!("{host} Δ @{}", short_id(&run.manifest.run_id)));
            }
        }
        let mut rows = Vec::new();
        for label in step.rows.keys() {
            let mut row = vec![Cell::Label { text: label.clone() }];
            for host in &hosts {
                let cells: Vec<Cell> = matching
                    .iter()
                    .map(|s| {
                        cell(
                            s.and_then(|s| s.rows.get(label)).and_then(|r| r.get(host)),
                            &metric,
                        )
                    })
                    .collect();
                let base = cells[0].value();
                let changes: Vec<Cell> = cells[1..].iter().map(|c| change(c.value(), base)).collect();
                row.extend(cells);
                row.extend(changes);
            }
            rows.push(row);
        }
        grids.push(Grid {
            title: format!(
                "step {}: {} across {} runs (first: {})",
                step.step_index + 1,
                step.step,
                runs.len(),
                first.manifest.run_id
            ),
            metric,
            columns,
            rows,
        });
    }
    Ok(grids)
}

/// The time part of a run id, enough to tell runs apart in a column name.
fn short_id(run_id: &str) -> &str {
    run_id.split('-').next().unwrap_or(run_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_changes_only_between_values() {
        assert_eq!(ratio(Some(2.0), Some(1.0)).text(), "×2.00");
        assert!(matches!(ratio(None, Some(1.0)), Cell::Missing));
        assert!(matches!(ratio(Some(1.0), Some(0.0)), Cell::Missing));
        assert_eq!(change(Some(95.0), Some(100.0)).text(), "-5.0%");
    }

    #[test]
    fn unknown_baseline_is_an_error_naming_the_hosts() {
        let hosts = vec!["a".to_string(), "b".to_string()];
        assert_eq!(baseline(&hosts, None).unwrap(), "a");
        assert_eq!(baseline(&hosts, Some("b")).unwrap(), "b");
        let err = baseline(&hosts, Some("c")).unwrap_err().to_string();
        assert!(err.contains("hosts: a, b"), "{err}");
    }
}
