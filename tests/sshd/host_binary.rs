//! The rigrun that `{{ rigrun }}` sends to an SSH host: chosen for the host's CPU and C library
//! (a stand-in `uname` or `getconf` on the host's PATH makes it another kind of host), refused
//! with the command that builds the right one, sent compressed once, and not again while the
//! host's copy is the same.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{rigrun, text, ClientKey, Sshd};

/// A playbook that runs the host's rigrun.
const USES_RIGRUN: &str = "name: v\nsteps:\n  - shell: {command: \"{{ rigrun }} --version\"}\n";
/// One that does not.
const PLAIN: &str = "name: p\nsteps:\n  - shell: {command: \"uname -m\"}\n";

/// A loopback host whose PATH starts with `bin` (stand-in tools), whose SFTP server keeps a copy
/// of every byte it is sent in `dir/sftp-in` (OpenSSH's sftp-server behind a `tee`); the
/// inventory in `dir/hosts.yaml`, workdir `dir/work`.
fn host_with_tools(dir: &Path, tools: &[(&str, &str)]) -> Sshd {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, script) in tools {
        let tool = bin.join(name);
        std::fs::write(&tool, script).unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let counting = dir.join("counting-sftp");
    let tee = format!(
        "#!/bin/sh\ntee -a {} | /usr/lib/openssh/sftp-server\n",
        dir.join("sftp-in").display()
    );
    std::fs::write(&counting, tee).unwrap();
    std::fs::set_permissions(&counting, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = ClientKey::new(dir);
    let path = format!("SetEnv PATH={}:/usr/local/bin:/usr/bin:/bin\n", bin.display());
    let subsystem = format!("Subsystem sftp {}", counting.display());
    let sshd = Sshd::start_with(dir, "h", &key, &|config| {
        config.replace("Subsystem sftp internal-sftp", &subsystem) + &path
    });
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("h", &key, &known_hosts, &dir.join("work"), "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    sshd
}

/// `rigrun run` with its host-binaries folder and cache folder in `dir`.
fn run(dir: &Path, playbook: &str) -> Output {
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    rigrun()
        .current_dir(dir)
        .env("RIGRUN_HOST_BINARIES", dir.join("host-binaries"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .args(["run", "p.yaml", "--runs-dir", "runs", "-q"])
        .output()
        .expect("cannot run rigrun")
}

/// The names in the host's `bin/` folder.
fn in_bin(dir: &Path) -> Vec<std::ffi::OsString> {
    let entries = std::fs::read_dir(dir.join("work/bin")).unwrap().flatten();
    entries.map(|e| e.file_name()).collect()
}

fn uploaded(dir: &Path) -> PathBuf {
    dir.join("work/bin/rigrun")
}

/// The bytes the host's SFTP server has been sent so far, requests and data.
fn sftp_sent(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("sftp-in")).map_or(0, |m| m.len())
}

fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn sent_compressed_once_then_not_again_while_the_hosts_copy_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sshd = host_with_tools(dir, &[]);
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_rigrun"));

    let out = run(dir, USES_RIGRUN);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // This very rigrun (no host-binaries folder here), byte for byte, runnable.
    assert_eq!(sha256(&uploaded(dir)), sha256(&exe));
    assert_eq!(std::fs::metadata(uploaded(dir)).unwrap().mode() & 0o777, 0o755);
    // It travelled compressed: the SFTP server was sent far fewer bytes than the binary has.
    let sent = sftp_sent(dir);
    let size = std::fs::metadata(&exe).unwrap().len();
    assert!(
        sent > 0 && sent < size / 2,
        "{sent} bytes sent for a {size}-byte binary"
    );
    assert_eq!(in_bin(dir), ["rigrun"], "nothing but the binary is left in bin/");

    // Again: the host's copy is the same, so nothing is sent and the file is untouched.
    let inode = std::fs::metadata(uploaded(dir)).unwrap().ino();
    let out = run(dir, USES_RIGRUN);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(std::fs::metadata(uploaded(dir)).unwrap().ino(), inode);
    assert_eq!(sftp_sent(dir), sent, "nothing sent the second time");

    // A host copy that changed (damaged, or another build) is replaced. Put in place as an
    // install does (a rename): the run's watchdog may still run the old file for a second.
    // The install also clears what uploads that broke off more than a day ago left, and keeps
    // a younger temporary file (another upload's, maybe still on its way).
    let other = dir.join("work/bin/other-build");
    std::fs::write(&other, b"#!/bin/sh\necho not rigrun\n").unwrap();
    std::fs::rename(&other, uploaded(dir)).unwrap();
    let (broken, young) = (
        "rigrun.rigrun-new-00000000deadbeef.gz",
        "rigrun.rigrun-new-00000000cafe0000",
    );
    for name in [broken, young] {
        std::fs::write(dir.join("work/bin").join(name), b"part of an upload").unwrap();
    }
    let broken_path = dir.join("work/bin").join(broken);
    crate::common::sh("touch", &["-d", "2 days ago", broken_path.to_str().unwrap()]);
    let out = run(dir, USES_RIGRUN);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(sha256(&uploaded(dir)), sha256(&exe));
    assert!(sftp_sent(dir) > sent, "sent again");
    let mut left = in_bin(dir);
    left.sort();
    assert_eq!(
        left,
        ["rigrun", young],
        "the day-old temporary file went, the young one stayed"
    );
    drop(sshd);
}

/// Two inventory names for one machine and one workdir send their copies at the same time:
/// each checks and installs its own temporary file, both runs succeed, one rigrun is left.
#[test]
fn two_hosts_sharing_a_workdir_send_at_once_without_spoiling_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sshd = host_with_tools(dir, &[]);
    let inventory = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
    let entry = inventory.strip_prefix("hosts:\n").unwrap();
    let twin = entry.replacen("  h:", "  twin:", 1);
    assert_ne!(twin, entry, "the twin entry names another host");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}{twin}")).unwrap();
    let out = run(dir, USES_RIGRUN);
    assert!(out.status.success(), "{:?}", text(&out));
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_rigrun"));
    assert_eq!(sha256(&uploaded(dir)), sha256(&exe));
    assert_eq!(in_bin(dir), ["rigrun"], "nothing but the binary is left in bin/");
    drop(sshd);
}

/// `uname` on the host says its machine is aarch64 (`-m`, and last in the facts' `-snrm`); it
/// says the rest as it is.
const AARCH64_UNAME: &str = "#!/bin/sh\ncase $1 in\n-m) echo aarch64;;\n\
     -snrm) echo \"$(/usr/bin/uname -snr) aarch64\";;\n*) exec /usr/bin/uname \"$@\";;\nesac\n";

#[test]
fn a_host_of_another_cpu_gets_the_command_that_builds_its_rigrun_and_nothing_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _sshd = host_with_tools(dir, &[("uname", AARCH64_UNAME)]);

    let out = run(dir, USES_RIGRUN);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let all = format!("{stdout}\n{stderr}");
    assert!(
        all.contains("there is no rigrun for aarch64-unknown-linux-gnu here"),
        "{all}"
    );
    assert!(
        all.contains("`bash tools/host-binary.sh aarch64-unknown-linux-gnu`"),
        "{all}"
    );
    let lands = dir.join("host-binaries/aarch64-unknown-linux-gnu/rigrun");
    assert!(all.contains(&lands.display().to_string()), "{all}");
    assert!(!uploaded(dir).exists(), "nothing was sent");

    // A playbook without {{ rigrun }} never needs one.
    let out = run(dir, PLAIN);
    assert!(out.status.success(), "{:?}", text(&out));

    // A binary for the wrong CPU in the folder is refused by what its ELF header says.
    std::fs::create_dir_all(lands.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_rigrun"), &lands).unwrap();
    let out = run(dir, USES_RIGRUN);
    let all = format!("{:?}", text(&out));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains(&format!(
            "{} (from the host-binaries folder) is built for x86_64, but h is aarch64",
            lands.display()
        )),
        "{all}"
    );
    assert!(!uploaded(dir).exists());
}

#[test]
fn a_host_with_an_older_glibc_than_this_rigrun_needs_is_told_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let getconf = "#!/bin/sh\nif [ \"$1\" = GNU_LIBC_VERSION ]; then echo 'glibc 2.17'; else exec /usr/bin/getconf \"$@\"; fi\n";
    let _sshd = host_with_tools(dir, &[("getconf", getconf)]);

    let out = run(dir, USES_RIGRUN);
    let all = format!("{:?}", text(&out));
    assert_eq!(out.status.code(), Some(1), "{all}");
    // What this binary needs, read independently of rigrun: objdump's version references.
    let needs = newest_glibc(Path::new(env!("CARGO_BIN_EXE_rigrun")));
    assert!(
        needs > (2, 17),
        "this test needs a rigrun built on a glibc newer than 2.17"
    );
    assert!(
        all.contains(&format!("needs glibc {}.{}, but h has 2.17", needs.0, needs.1)),
        "{all}"
    );
    assert!(all.contains("`bash tools/host-binary.sh`"), "{all}");
    assert!(!uploaded(dir).exists(), "nothing was sent");
}

/// The newest `GLIBC_x.y` among `objdump -T`'s dynamic symbols of `binary`.
pub fn newest_glibc(binary: &Path) -> (u32, u32) {
    let out = std::process::Command::new("objdump")
        .arg("-T")
        .arg(binary)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump -T failed");
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| {
            let (major, minor) = word.strip_prefix("GLIBC_")?.split_once('.')?;
            Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
        })
        .max()
        .unwrap_or((0, 0))
}
