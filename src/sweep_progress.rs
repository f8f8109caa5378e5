//! How far each host's sweeps are, for the progress display: the point runs done out of those
//! that will run (each repetition and each server variant counted, points `skip_if` skips and
//! points a resume keeps left out), the repetition under way, and an estimate of the time left
//! from the mean duration of the points done on that host.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use indexmap::IndexMap;

use crate::config::steps::Action;
use crate::config::Config;
use crate::plan::Plan;
use crate::point::StepPoint;
use crate::resume::{HostWork, PointWork};
use crate::words::count;

/// What one host's sweeps will run, known before the run starts.
#[derive(Debug, Clone, Default)]
pub struct HostSweeps {
    /// Point runs to come: every repetition, against every server variant.
    pub runs: usize,
    /// Per sweep step (by index): how many times each point is measured.
    repeats: IndexMap<usize, u32>,
    /// (step index, point) that the plan skips: their `skipped` events were never counted in.
    skipped: HashSet<(usize, String)>,
    /// Per capacity-search step (by index): the probes counted in per series, and the series
    /// of each of its points.
    searches: IndexMap<usize, SearchSeries>,
}

/// A capacity search's series, as progress counts them.
#[derive(Debug, Clone, Default)]
struct SearchSeries {
    /// The probes counted in per series.
    allotted: usize,
    /// Point label -> the label of its series (`point::series_label`).
    of_point: HashMap<String, String>,
}

/// Each host's sweeps, from the plan and what each host (or host/variant, see
/// `resume::keys`) has left to do; a new run's work is everything.
pub fn plan_totals(
    config: &Config,
    plan: &Plan,
    works: &IndexMap<String, HostWork>,
) -> IndexMap<String, HostSweeps> {
    let fresh = HostWork::fresh(config);
    plan.hosts
        .iter()
        .map(|host| {
            let mut sweeps = HostSweeps::default();
            for key in crate::resume::keys(config, &host.host) {
                let work = works.get(&key).unwrap_or(&fresh);
                sweeps.runs += runs_left(host, work);
            }
            for step in &host.steps {
                let Action::RunSweep(sweep) = &step.action else {
                    continue;
                };
                sweeps.repeats.insert(step.index, sweep.repeat.max(1));
                if let Some(search) = &sweep.search {
                    let of_point = sweep
                        .points
                        .iter()
                        .map(|p| (p.label(), crate::point::series_label(&p.values, &search.axis)));
                    let series = SearchSeries {
                        allotted: (search.probes as usize).min(search.candidates),
                        of_point: of_point.collect(),
                    };
                    sweeps.searches.insert(step.index, series);
                }
                let skipped = sweep.points.iter().filter(|p| p.skip.is_some());
                sweeps.skipped.extend(skipped.map(|p| (step.index, p.label())));
            }
            (host.host.clone(), sweeps)
        })
        .collect()
}

/// The point runs `work` still runs of a host's planned sweeps (skipped points left out; a
/// capacity search counted as its probes per series, less those done).
fn runs_left(host: &crate::plan::HostPlan, work: &HostWork) -> usize {
    let mut runs = 0;
    for step in host.steps.iter().filter(|s| work.runs_step(s.index)) {
        let Action::RunSweep(sweep) = &step.action else {
            continue;
        };
        if let Some(search) = &sweep.search {
            runs += search_runs_left(step.index, sweep, search, work);
            continue;
        }
        for point in sweep.points.iter().filter(|p| p.skip.is_none()) {
            let point = StepPoint::of(step.index, &point.values);
            runs += (1..=sweep.repeat.max(1))
                .filter(|r| matches!(work.point(&point.clone().repetition(*r)), PointWork::Run { .. }))
                .count();
        }
    }
    runs
}

/// The probes a capacity search still makes on a host: per series not yet settled (some
/// candidate recorded, not probed), its probes less those done.
fn search_runs_left(
    index: usize,
    sweep: &crate::config::steps::run_sweep::RunSweepPlan,
    search: &crate::config::steps::search::SearchPlan,
    work: &HostWork,
) -> usize {
    let allotted = (search.probes as usize).min(search.candidates);
    let mut series: IndexMap<String, (usize, bool)> = IndexMap::new();
    for point in &sweep.points {
        let key = StepPoint::of(index, &point.values).repetition(1);
        let label = crate::point::series_label(&point.values, &search.axis);
        let entry = series.entry(label).or_default();
        match work.point(&key) {
            PointWork::Keep {
                kept: crate::resume::Kept::Skipped,
                ..
            } => entry.1 = true,
            PointWork::Keep { .. } => entry.0 += 1,
            PointWork::Run { .. } => {}
        }
    }
    series
        .values()
        .filter(|(_, settled)| !settled)
        .map(|(done, _)| allotted.saturating_sub(*done))
        .sum()
}

/// One run of a point: (variant, step index, point, repetition).
type RunKey = (Option<String>, usize, String, u32);

/// A host's sweeps while they run.
#[derive(Debug)]
pub struct SweepProgress {
    planned: HostSweeps,
    /// Point runs expected: the plan's, less points skipped only at run time, plus points the
    /// plan skipped that ran (a variant's values changed what `skip_if` decides).
    total: usize,
    done: HashSet<RunKey>,
    /// Capacity-search series whose search ended: (variant, step index, series).
    settled: HashSet<(Option<String>, usize, String)>,
    /// Time the finished attempts took, for the estimate.
    seconds: f64,
    /// The tenth of the total last announced with an estimate, and when.
    announced: (usize, Instant),
}

/// Estimates are said again at least this often in plain output, besides every tenth of the points.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(300);

impl SweepProgress {
    pub fn new(planned: HostSweeps) -> SweepProgress {
        SweepProgress {
            total: planned.runs,
            planned,
            done: HashSet::new(),
            settled: HashSet::new(),
            seconds: 0.0,
            announced: (0, Instant::now()),
        }
    }

    /// A point run started: its number among the point runs (`3` of `3/9`; a retry keeps
    /// its point's).
    pub fn started(&mut self, variant: Option<&str>, step: usize, point: &str, repetition: u32) -> usize {
        let key = (variant.map(String::from), step, point.to_string(), repetition);
        if self.done.contains(&key) {
            // A retry: its point was counted when its first attempt ended.
            return self.done.len();
        }
        if self.planned.skipped.contains(&(step, point.to_string())) {
            self.total += 1;
        }
        (self.done.len() + 1).min(self.total.max(1))
    }

    /// A point run (or one attempt of it) ended after `seconds`; `skipped` when `skip_if` held.
    /// Returns (done, total) once counted; None for a skip.
    pub fn finished(&mut self, key: RunKey, seconds: f64, skipped: bool) -> Option<(usize, usize)> {
        if let (true, Some(search)) = (skipped, self.planned.searches.get(&key.1)) {
            // A candidate the search did not need: its series' search ended, and the probes
            // counted in for it that it did not make are not to come.
            let series_of = |point: &str| search.of_point.get(point);
            let series = series_of(&key.2);
            let of_series = |k: &RunKey| k.0 == key.0 && k.1 == key.1 && series_of(&k.2) == series;
            if self
                .settled
                .insert((key.0.clone(), key.1, series.cloned().unwrap_or_default()))
            {
                let probed = self.done.iter().filter(|k| of_series(k)).count();
                let unused = search.allotted.saturating_sub(probed);
                self.total = self.total.saturating_sub(unused).max(self.done.len());
            }
            return None;
        }
        if skipped {
            if !self.planned.skipped.contains(&(key.1, key.2.clone())) {
                // Counted as running: `skip_if` was decided at run time.
                self.total = self.total.saturating_sub(1);
            }
            return None;
        }
        self.seconds += seconds;
        self.done.insert(key);
        self.total = self.total.max(self.done.len());
        Some((self.done.len(), self.total))
    }

    /// The estimate of the time left: `about 4m 10s left (estimated from 5 points done, 50s
    /// each)`; None before a point is done or after the last.
    pub fn estimate(&self) -> Option<String> {
        let done = self.done.len();
        let left = self.total.saturating_sub(done);
        if done == 0 || left == 0 {
            return None;
        }
        let mean = self.seconds / done as f64;
        Some(format!(
            "about {} left (estimated from {} done, {} each)",
            duration_text(mean * left as f64),
            count(done, "point"),
            duration_text(mean)
        ))
    }

    /// Whether plain output should say the estimate now: a new tenth of the points is done,
    /// or [`ANNOUNCE_EVERY`] passed since it was last said.
    pub fn announce(&mut self) -> bool {
        let tenth = self.done.len() * 10 / self.total.max(1);
        let due = tenth > self.announced.0 || self.announced.1.elapsed() >= ANNOUNCE_EVERY;
        if due {
            self.announced = (tenth, Instant::now());
        }
        due && self.estimate().is_some()
    }

    /// How many times each point of step `index` is measured.
    pub fn repeat_of(&self, index: usize) -> u32 {
        self.planned.repeats.get(&index).copied().unwrap_or(1)
    }

    /// `3/9`: points done of the total.
    pub fn counts(&self) -> (usize, usize) {
        (self.done.len(), self.total)
    }
}

/// Seconds as people say them: `0.4s`, `45s`, `3m 5s`, `1h 20m`.
fn duration_text(seconds: f64) -> String {
    if seconds < 9.95 {
        return format!("{seconds:.1}s");
    }
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => match s % 60 {
            0 => format!("{}m", s / 60),
            r => format!("{}m {r}s", s / 60),
        },
        _ => match (s % 3600) / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h {m}m", s / 3600),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweeps(runs: usize, repeat: u32, skipped: &[&str]) -> HostSweeps {
        HostSweeps {
            runs,
            repeats: IndexMap::from([(0, repeat)]),
            skipped: skipped.iter().map(|p| (0, p.to_string())).collect(),
            searches: IndexMap::new(),
        }
    }

    #[test]
    fn a_search_counts_its_probes_and_ends_when_a_candidate_is_not_probed() {
        let mut planned = sweeps(2 * 5, 1, &[]);
        let of_point = [1, 2, 3, 4, 5]
            .iter()
            .flat_map(|c| ["in=1", "in=2"].map(|s| (format!("{s} concurrency={c}"), s.to_string())));
        let search = SearchSeries {
            allotted: 5,
            of_point: of_point.collect(),
        };
        planned.searches.insert(0, search);
        let mut p = SweepProgress::new(planned);
        let at = |series: &str, c: u32| (None, 0, format!("{series} concurrency={c}"), 1);
        for c in [1, 2, 4] {
            p.started(None, 0, &format!("in=1 concurrency={c}"), 1);
            p.finished(at("in=1", c), 1.0, false);
        }
        assert_eq!(p.counts(), (3, 10));
        // The first series' search ended after 3 probes: its 2 unused ones are not to come.
        assert_eq!(p.finished(at("in=1", 3), 0.0, true), None);
        assert_eq!(p.finished(at("in=1", 5), 0.0, true), None);
        assert_eq!(p.counts(), (3, 8));
        p.finished(at("in=2", 1), 1.0, false);
        assert_eq!(p.counts(), (4, 8));
    }

    fn key(point: &str, repetition: u32) -> RunKey {
        (None, 0, point.to_string(), repetition)
    }

    #[test]
    fn counts_each_repetition_once_and_estimates_from_the_mean() {
        let mut p = SweepProgress::new(sweeps(4, 2, &[]));
        assert_eq!(p.started(None, 0, "c=1", 1), 1);
        assert_eq!((p.counts(), p.repeat_of(0)), ((0, 4), 2));
        assert_eq!(p.estimate(), None, "nothing done yet");
        assert_eq!(p.finished(key("c=1", 1), 10.0, false), Some((1, 4)));
        // A failed attempt and its retry are one point run.
        assert_eq!(p.finished(key("c=2", 1), 20.0, false), Some((2, 4)));
        assert_eq!(p.started(None, 0, "c=2", 1), 2, "a retry keeps its number");
        assert_eq!(p.finished(key("c=2", 1), 30.0, false), Some((2, 4)));
        assert_eq!(
            p.estimate().as_deref(),
            Some("about 1m left (estimated from 2 points done, 30s each)"),
            "(10 + 20 + 30) s over 2 points done, 2 left"
        );
        p.finished(key("c=1", 2), 10.0, false);
        p.finished(key("c=2", 2), 10.0, false);
        assert_eq!(p.counts(), (4, 4));
        assert_eq!(p.estimate(), None, "nothing left");
    }

    #[test]
    fn skips_decided_at_run_time_leave_the_total() {
        let mut p = SweepProgress::new(sweeps(3, 1, &["c=9"]));
        assert_eq!(p.finished(key("c=4", 1), 0.0, true), None);
        assert_eq!(p.counts(), (0, 2), "a skip the plan did not know");
        assert_eq!(p.finished(key("c=9", 1), 0.0, true), None);
        assert_eq!(p.counts(), (0, 2), "a skip the plan knew was never counted");
        p.started(Some("spec=on"), 0, "c=9", 1);
        assert_eq!(p.counts().1, 3, "a planned skip that runs after all is counted");
    }

    #[test]
    fn the_estimate_is_announced_every_tenth() {
        let mut p = SweepProgress::new(sweeps(20, 1, &[]));
        let mut announced = Vec::new();
        for i in 1..=20 {
            p.finished(key(&format!("c={i}"), 1), 1.0, false);
            if p.announce() {
                announced.push(i);
            }
        }
        assert_eq!(announced, [2, 4, 6, 8, 10, 12, 14, 16, 18]);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_text(0.24), "0.2s");
        assert_eq!(duration_text(9.96), "10s");
        assert_eq!(duration_text(45.0), "45s");
        assert_eq!(duration_text(185.0), "3m 5s");
        assert_eq!(duration_text(120.0), "2m");
        assert_eq!(duration_text(4800.0), "1h 20m");
    }
}
