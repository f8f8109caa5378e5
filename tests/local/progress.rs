//! The progress a person watching a sweep reads on stderr (plain lines: stderr is not a
//! terminal here), from a real run against `rigrun sim` on two local hosts: each point's place
//! among the point runs that really run (`3/8`, skips left out), its repetition (`rep 2/2`),
//! estimates of the time left from the points done, and the commands to run next.

use std::path::Path;

use crate::common::*;

/// Two local hosts with their own sim port; `slow` holds less, so its C=8 is skipped.
fn inventory(dir: &Path) {
    let text = format!(
        "vars: {{script: {script}}}\nhosts:\n  fast:\n    connection: local\n    workdir: {dir}/fast\n    vars: {{port: {}, cap: 8}}\n  slow:\n    connection: local\n    workdir: {dir}/slow\n    vars: {{port: {}, cap: 4}}\n",
        free_port(),
        free_port(),
        dir = dir.display(),
        script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py").display(),
    );
    std::fs::write(dir.join("hosts.yaml"), text).unwrap();
}

/// The sim started on each host, then a repeated sweep measured by the shipped benchmark script.
const PLAYBOOK: &str = r#"
name: progress
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile tiny --port {{ port }}"
      url: "http://127.0.0.1:{{ port }}"
  - run-sweep:
      matrix: {concurrency: [1, 2, 4, 8]}
      skip_if: concurrency > cap
      repeat: 2
      command: "python3 {{ script }} --url http://127.0.0.1:{{ port }} --concurrency {{ concurrency }} --input-len 16 --output-len 8 --num-requests {{ concurrency * 2 }}"
"#;

/// An estimate line: `[fast] 3/8 points done; about 1.5s left (estimated from 3 points done,
/// 0.3s each)`.
struct Estimate {
    done: usize,
    total: usize,
    left: f64,
    from: usize,
    each: f64,
}

impl Estimate {
    fn read(line: &str) -> Option<Estimate> {
        let (_, rest) = line.split_once("] ")?;
        let (counts, rest) = rest.split_once(" points done; about ")?;
        let (done, total) = counts.split_once('/')?;
        let (left, rest) = rest.split_once(" left (estimated from ")?;
        let (from, rest) = rest.split_once(" point")?;
        let (_, rest) = rest.split_once("done, ")?;
        let each = rest.strip_suffix(" each)")?;
        Some(Estimate {
            done: done.parse().ok()?,
            total: total.parse().ok()?,
            left: seconds(left),
            from: from.parse().ok()?,
            each: seconds(each),
        })
    }
}

/// Seconds in `0.4s`, `12s`, `1m 5s`.
fn seconds(text: &str) -> f64 {
    let mut total = 0.0;
    for part in text.split_whitespace() {
        let (n, unit) = part.split_at(part.len() - 1);
        let n: f64 = n.parse().unwrap_or_else(|_| panic!("a duration: {text}"));
        total += n * match unit {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => panic!("a duration: {text}"),
        };
    }
    total
}

#[test]
fn progress_counts_the_point_runs_of_each_host_and_estimates_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    inventory(dir);
    std::fs::write(dir.join("p.yaml"), PLAYBOOK).unwrap();
    let out = run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // fast: 4 points × 2 repetitions; slow: C=8 skipped, 3 × 2. Interleaved: every point,
    // then every point again.
    for (host, total, last) in [("fast", 8, 8), ("slow", 6, 4)] {
        for (n, (c, rep)) in [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2), (8, 2)]
            .into_iter()
            .filter(|(c, _)| *c <= last)
            .enumerate()
        {
            let line = format!(
                "[{host}] run-sweep concurrency={c} ({}/{total}, rep {rep}/2): ok in ",
                n + 1
            );
            assert!(stderr.contains(&line), "expected `{line}` in:\n{stderr}");
        }
    }
    for rep in [1, 2] {
        let line =
            format!("[slow] run-sweep concurrency=8 (rep {rep}/2): skipped: concurrency = 8 > cap = 4");
        assert!(stderr.contains(&line), "expected `{line}` in:\n{stderr}");
    }
    assert!(
        stderr.contains("[fast] step 2/2: run-sweep concurrency=4 (point 3/8, rep 1/2)"),
        "{stderr}"
    );

    // Estimates: the mean of the points done times the points left, said every tenth.
    let mut said = 0;
    for line in stderr.lines() {
        let Some(estimate) = Estimate::read(line) else {
            continue;
        };
        assert_eq!(estimate.done, estimate.from, "{line}");
        assert!(
            estimate.done < estimate.total,
            "no estimate once all is done: {line}"
        );
        let points_left = (estimate.total - estimate.done) as f64;
        let expected = estimate.each * points_left;
        // Both sides are rounded on their own (to 0.1 s, or 1 s past 10 s).
        assert!(
            (estimate.left - expected).abs() <= 0.05 * points_left + 0.5,
            "{line}: {} s left, {} s × {points_left} points = {expected}",
            estimate.left,
            estimate.each
        );
        said += 1;
    }
    assert!(
        said >= 8,
        "an estimate at least every tenth on each host, found {said}:\n{stderr}"
    );

    let run_dir = only_run_dir(&dir.join("runs"));
    let name = run_dir.file_name().unwrap().to_str().unwrap();
    assert!(
        stderr.contains(&format!(
            "next: rigrun report runs/{name} --out report.html · rigrun compare runs/{name}"
        )),
        "{stderr}"
    );
}
