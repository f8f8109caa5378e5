//! A host whose workdir cannot take the upload says why in those words, with the path and the
//! host: a full disk and a read-only file system; a sweep on a host whose workdir fills up fails
//! the point with the disk named, not the host lost (tmpfs mounts of this test's own, as root).

use std::path::Path;
use std::process::Command;

use crate::common::*;

/// A tmpfs with `options` mounted on `dir`, unmounted when dropped.
struct Mount<'a>(&'a Path);

impl<'a> Mount<'a> {
    fn tmpfs(dir: &'a Path, options: &str) -> Mount<'a> {
        std::fs::create_dir_all(dir).unwrap();
        sh(
            "mount",
            &["-t", "tmpfs", "-o", options, "tmpfs", dir.to_str().unwrap()],
        );
        Mount(dir)
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// A loopback sshd as host `h` with `workdir`, written to `dir/hosts.yaml`; it runs while the
/// value lives.
fn host_with(dir: &Path, workdir: &Path) -> Sshd {
    let key = ClientKey::new(dir);
    let sshd = Sshd::start(dir, "h", &key);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("h", &key, &known_hosts, workdir, "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    sshd
}

/// Runs a copy-script of a 512 KiB file into `workdir` on a loopback sshd host; returns stderr.
fn copy_into(dir: &Path, workdir: &Path) -> String {
    let _sshd = host_with(dir, workdir);
    std::fs::write(dir.join("big.sh"), "#".repeat(512 * 1024)).unwrap();
    std::fs::write(
        dir.join("copy.yaml"),
        "name: copy\nsteps:\n  - copy-script: {src: big.sh, dest: \"{{ workdir }}/big.sh\"}\n",
    )
    .unwrap();
    let out = run_rigrun(dir, &["run", "copy.yaml", "--runs-dir", "runs", "-q"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

#[test]
fn a_full_or_read_only_workdir_on_the_host_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let full = dir.join("full");
    let _full = Mount::tmpfs(&full, "size=64k");
    let stderr = copy_into(dir, &full);
    let said = format!(
        "cannot write {}/big.sh on h: the disk holding {} is full",
        full.display(),
        full.display()
    );
    assert!(stderr.contains(&said), "{stderr}");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ro = dir.join("ro");
    let _ro = Mount::tmpfs(&ro, "ro,size=1m");
    let stderr = copy_into(dir, &ro);
    assert!(
        stderr.contains(&format!("the file system of {} is read-only there", ro.display())),
        "{stderr}"
    );
}

/// The host's workdir fills up during a sweep: point 1 fills it (its own exit status is still
/// kept: it succeeds with its record), point 2 then cannot start there. Point 2 fails, once, with
/// the disk named; the host is not called lost, nothing the host's shell said reaches the console.
#[test]
fn a_workdir_that_fills_during_a_sweep_fails_the_point_with_the_disk_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let work = dir.join("work");
    let _work = Mount::tmpfs(&work, "size=256k");
    let _sshd = host_with(dir, &work);
    std::fs::write(
        dir.join("fill.yaml"),
        "name: fill\nsteps:\n  - run-sweep:\n      matrix: {n: [1, 2]}\n      command: >-\n        \
         {% if n == 1 %}head -c 1048576 /dev/zero > {{ workdir }}/filler 2>/dev/null;{% endif %}\n        \
         echo '{\"n\": {{ n }}}'\n",
    )
    .unwrap();
    let out = run_rigrun(dir, &["run", "fill.yaml", "--runs-dir", "runs"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let said = format!(
        "the host's disk is full at {} (No space left on device)",
        work.display()
    );
    let recs = records(&only_run_dir(&dir.join("runs")));
    let of = |n: u64| -> Vec<(String, u64, String)> {
        recs.iter()
            .filter(|r| r["point"]["n"] == n)
            .map(|r| {
                let status = r["status"].as_str().unwrap().to_string();
                let reason = r["reason"].as_str().unwrap_or_default().to_string();
                (status, r["attempt"].as_u64().unwrap(), reason)
            })
            .collect()
    };
    assert_eq!(of(1), [("ok".to_string(), 1, String::new())], "{recs:?}");
    assert_eq!(
        of(2),
        [("failed".to_string(), 1, said.clone())],
        "one record: {recs:?}"
    );
    assert!(
        stderr.contains(&format!("run-sweep n=2 (2/2): FAILED: {said}")),
        "{stderr}"
    );
    for raw in ["I/O error", "echo:", "No such file", "rebooted", "lost"] {
        assert!(!stderr.contains(raw), "`{raw}` on the console: {stderr}");
    }
    let manifest = manifest(&only_run_dir(&dir.join("runs")));
    let steps = &manifest["hosts"]["h"]["steps"];
    assert_eq!(steps[0]["status"], "failed", "{manifest}");
    assert_eq!(steps[0]["details"]["ok"], 1, "{manifest}");
    stop_watchdogs(&work);
}

/// Stops, by their process group, the lease watchdogs the run left under `workdir` (each would
/// otherwise wait out its lease, holding the mount busy), and waits until no process is left
/// working in `workdir`.
fn stop_watchdogs(workdir: &Path) {
    let jobs = workdir.join(".rigrun/jobs");
    for run in std::fs::read_dir(jobs).unwrap().flatten() {
        for host in std::fs::read_dir(run.path()).unwrap().flatten() {
            if let Ok(pid) = std::fs::read_to_string(host.path().join("watchdog.pid")) {
                let _ = Command::new("kill")
                    .args(["--", &format!("-{}", pid.trim())])
                    .status();
            }
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while working_in(workdir) {
        assert!(
            std::time::Instant::now() < deadline,
            "processes still work in {}",
            workdir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether a process on this machine has its working directory under `dir`.
fn working_in(dir: &Path) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|p| std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
}
