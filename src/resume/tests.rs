//! What a resume runs, from journals written the way the executor writes them.

use std::path::PathBuf;

use super::history;
use super::work::{HostWork, Kept, PointWork};
use super::Redo;
use crate::config::{Config, LoadOptions};
use crate::events::{Event, PointAttempt, PointRun, Record, RecordStatus, Status};
use crate::point::PointKey;

/// Repetition 1 of point `label` of the sweep (step 1).
fn unit(label: &str) -> PointKey {
    PointKey::new(1, label, 1)
}

const INVENTORY: &str = "hosts:\n  a: {connection: local}\n";
const PLAYBOOK: &str = "name: t\nsteps:\n  - verify-server: {url: \"http://127.0.0.1:1\"}\n  \
    - run-sweep: {matrix: {n: [1, 2, 3]}, command: \"echo {{ n }}\"}\n  \
    - fetch-results: {src: /tmp/x}\n";

fn config() -> Config {
    let opts = LoadOptions {
        playbook: PathBuf::from("p.yaml"),
        inventory: PathBuf::from("h.yaml"),
        ..Default::default()
    };
    Config::from_text(&opts, PLAYBOOK.into(), INVENTORY.into()).unwrap()
}

fn step(index: usize, attempt: u32, status: Option<Status>) -> Vec<Event> {
    let started = Event::StepStarted {
        host: "a".into(),
        index,
        name: "s".into(),
        kind: "k".into(),
        attempt,
        variant: None,
    };
    let finished = status.map(|status| Event::StepFinished {
        host: "a".into(),
        index,
        name: "s".into(),
        attempt,
        status,
        error: None,
        details: serde_json::Value::Null,
        seconds: 0.0,
        variant: None,
    });
    std::iter::once(started).chain(finished).collect()
}

fn point(n: u32, attempt: u32, ended: Option<RecordStatus>) -> Vec<Event> {
    let at = PointAttempt {
        point: format!("n={n}"),
        step_index: Some(1),
        run: PointRun::once(attempt),
    };
    let started = Event::PointStarted {
        host: "a".into(),
        step: "run-sweep".into(),
        at: at.clone(),
        variant: None,
    };
    let finished = ended.map(|status| Event::PointFinished {
        host: "a".into(),
        step: "run-sweep".into(),
        at,
        status,
        exit_code: None,
        reason: Some("why".into()),
        seconds: 0.0,
        variant: None,
    });
    std::iter::once(started).chain(finished).collect()
}

fn invalid_record(n: u32, attempt: u32) -> Event {
    Event::Record(Record {
        run: "r".into(),
        host: "a".into(),
        step: "run-sweep".into(),
        step_index: 1,
        point: [("n".to_string(), serde_json::json!(n))].into_iter().collect(),
        metrics: serde_json::json!({"valid": false}).as_object().cloned().unwrap(),
        status: RecordStatus::Ok,
        reason: None,
        at: PointRun::once(attempt),
        variant: None,
        command: None,
    })
}

fn work(events: Vec<Vec<Event>>, redo: Redo) -> HostWork {
    let events: Vec<Event> = events.into_iter().flatten().collect();
    let past = history::read(&events).remove("a").unwrap_or_default();
    HostWork::resumed(&config(), past, redo)
}

/// Killed during point n=2 of the sweep: verify-server ran ok, n=1 is measured.
fn killed_mid_sweep() -> Vec<Vec<Event>> {
    vec![
        step(0, 1, Some(Status::Ok)),
        step(1, 1, None),
        point(1, 1, Some(RecordStatus::Ok)),
        point(2, 1, None),
    ]
}

#[test]
fn a_new_host_runs_everything_as_first_attempts() {
    let fresh = HostWork::fresh(&config());
    assert!((0..3).all(|i| fresh.runs_step(i)));
    assert_eq!(fresh.point(&unit("n=1")), PointWork::Run { attempt: 1 });
    assert_eq!(fresh.step_attempt(0), 1);
}

#[test]
fn against_a_server_started_anew_a_cut_short_point_runs_as_its_next_attempt() {
    let w = work(killed_mid_sweep(), Redo::default()).with_server_restarted();
    assert_eq!(
        w.point(&unit("n=2")),
        PointWork::Run { attempt: 2 },
        "not re-attached"
    );
    assert_eq!(
        w.point(&unit("n=1")),
        PointWork::Keep {
            attempt: 1,
            kept: Kept::Ok
        }
    );
    assert_eq!(w.point(&unit("n=3")), PointWork::Run { attempt: 1 });
}

#[test]
fn a_cut_short_point_runs_again_as_the_same_attempt_and_measured_ones_stand() {
    let w = work(killed_mid_sweep(), Redo::default());
    assert_eq!(
        w.point(&unit("n=1")),
        PointWork::Keep {
            attempt: 1,
            kept: Kept::Ok
        }
    );
    assert_eq!(
        w.point(&unit("n=2")),
        PointWork::Run { attempt: 1 },
        "re-attached, not started twice"
    );
    assert_eq!(w.point(&unit("n=3")), PointWork::Run { attempt: 1 });
    assert!(w.runs_step(0), "verify-server sets up the sweep's work");
    assert!(
        w.runs_step(1) && w.runs_step(2),
        "fetch-results collects what the sweep adds"
    );
    assert_eq!(w.step_attempt(0), 2);
    assert_eq!(w.points_to_run(&config(), &|_| false), 2);
    assert_eq!(w.points_to_run(&config(), &|p| p.label == "n=3"), 1);
}

#[test]
fn failed_and_invalid_points_stand_unless_asked_to_redo() {
    let mut events = killed_mid_sweep();
    events.push(point(2, 1, Some(RecordStatus::Failed)));
    events.push(point(3, 1, None));
    events.push(vec![invalid_record(3, 1)]);
    events.push(point(3, 1, Some(RecordStatus::Ok)));
    events.push(step(1, 1, Some(Status::Failed)));
    events.push(step(2, 1, Some(Status::Ok)));
    let w = work(events.clone(), Redo::default());
    assert!(w.is_done(), "nothing without --redo-*");
    let (status, stop) = w.verdict(&config());
    assert_eq!(status, Status::Failed);
    assert_eq!(stop.unwrap().0, "2. run-sweep");
    let failed = work(
        events.clone(),
        Redo {
            failed: true,
            invalid: false,
        },
    );
    assert_eq!(failed.point(&unit("n=2")), PointWork::Run { attempt: 2 });
    assert!(matches!(failed.point(&unit("n=3")), PointWork::Keep { .. }));
    assert!(failed.runs_step(0) && failed.runs_step(2));
    let invalid = work(
        events,
        Redo {
            failed: false,
            invalid: true,
        },
    );
    assert_eq!(invalid.point(&unit("n=3")), PointWork::Run { attempt: 2 });
}

#[test]
fn a_host_that_failed_before_the_sweep_runs_from_its_failed_step() {
    let w = work(vec![step(0, 1, Some(Status::Failed))], Redo::default());
    assert!((0..3).all(|i| w.runs_step(i)));
    assert_eq!(w.point(&unit("n=1")), PointWork::Run { attempt: 1 });
}

#[test]
fn the_latest_attempt_decides() {
    let events = vec![
        step(0, 1, Some(Status::Ok)),
        point(1, 1, Some(RecordStatus::Failed)),
        point(1, 2, Some(RecordStatus::Ok)),
        point(2, 1, Some(RecordStatus::Ok)),
        point(3, 1, Some(RecordStatus::Ok)),
        step(1, 1, Some(Status::Ok)),
        step(2, 1, Some(Status::Ok)),
    ];
    let w = work(events, Redo::default());
    assert!(w.is_done());
    assert_eq!(w.verdict(&config()).0, Status::Ok);
}
