//! A host whose workdir cannot take the upload says why in those words, with the path and the
//! host: a full disk and a read-only file system (tmpfs mounts of this test's own, as root).

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

/// Runs a copy-script of a 512 KiB file into `workdir` on a loopback sshd host; returns stderr.
fn copy_into(dir: &Path, workdir: &Path) -> String {
    let key = ClientKey::new(dir);
    let sshd = Sshd::start(dir, "h", &key);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("h", &key, &known_hosts, workdir, "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
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
