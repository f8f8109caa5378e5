//! When the run directory cannot be written (a full disk), the run stops at once with a clear
//! error instead of measuring what it cannot keep. The test mounts a tiny tmpfs (root, as CI is).

use std::path::Path;
use std::process::Command;

use crate::common::*;

/// A 96 KiB tmpfs mounted on `dir`, unmounted when dropped.
struct TinyDisk<'a>(&'a Path);

impl<'a> TinyDisk<'a> {
    fn mount(dir: &'a Path) -> TinyDisk<'a> {
        std::fs::create_dir_all(dir).unwrap();
        sh(
            "mount",
            &["-t", "tmpfs", "-o", "size=96k", "tmpfs", dir.to_str().unwrap()],
        );
        TinyDisk(dir)
    }
}

impl Drop for TinyDisk<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn a_full_disk_stops_the_run_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("hosts.yaml"), "hosts:\n  here: {connection: local}\n").unwrap();
    let marker = dir.join("last-point-ran");
    // Every point prints a 16 KiB record: the disk is full after a few of them.
    std::fs::write(
        dir.join("big.yaml"),
        format!(
            "name: big\nsteps:\n  - run-sweep:\n      matrix: {{n: [{}]}}\n      command: >-\n        \
             python3 -c 'import json; print(json.dumps({{\"pad\": \"x\" * 16384, \"n\": {{{{ n }}}}}}))';\n        \
             if [ {{{{ n }}}} = 60 ]; then touch {}; fi\n",
            (1..=60).map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
            marker.display()
        ),
    )
    .unwrap();
    let runs = dir.join("runs");
    let _disk = TinyDisk::mount(&runs);
    let out = run_rigrun(
        dir,
        &["run", "big.yaml", "--runs-dir", runs.to_str().unwrap(), "-q"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("cannot write the run directory"), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!marker.exists(), "the sweep went on after the disk was full");
}
