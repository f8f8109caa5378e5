//! fetch-results against a real sshd on loopback, on real files: large files stream with little
//! memory, many files are listed in one command, files that cannot be fetched are named while
//! the rest arrive, odd names are stored escaped, and links are followed only as allowed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;

/// One host (`h`, over SSH unless `local`) whose result files live in `<tmp>/results/`.
struct Host {
    tmp: tempfile::TempDir,
    sshd: Option<Sshd>,
}

impl Host {
    fn ssh() -> Host {
        let tmp = tempfile::tempdir().unwrap();
        let key = ClientKey::new(tmp.path());
        let sshd = Sshd::start(tmp.path(), "h", &key);
        let known_hosts = tmp.path().join("known_hosts");
        std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
        let entry = sshd.inventory_entry("h", &key, &known_hosts, &tmp.path().join("work"), "");
        std::fs::write(tmp.path().join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
        Host::with_results(tmp, Some(sshd))
    }

    fn local() -> Host {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("hosts.yaml"),
            "hosts:\n  h:\n    connection: local\n",
        )
        .unwrap();
        Host::with_results(tmp, None)
    }

    fn with_results(tmp: tempfile::TempDir, sshd: Option<Sshd>) -> Host {
        std::fs::create_dir(tmp.path().join("results")).unwrap();
        Host { tmp, sshd }
    }

    /// The folder the glob reads, resolved (the temp dir may sit behind a link).
    fn results(&self) -> PathBuf {
        self.tmp.path().join("results").canonicalize().unwrap()
    }

    fn put(&self, name: &[u8], content: &[u8]) -> PathBuf {
        let path = self.results().join(OsStr::from_bytes(name));
        std::fs::write(&path, content).unwrap();
        path
    }

    fn playbook(&self, extra: &str) -> String {
        let src = format!("{}/*", self.results().display());
        let yaml = format!("name: fetch\nsteps:\n  - fetch-results:\n      src: \"{src}\"\n{extra}");
        std::fs::write(self.tmp.path().join("fetch.yaml"), yaml).unwrap();
        "fetch.yaml".into()
    }

    fn args(&self, extra: &str) -> Vec<String> {
        let runs = self.tmp.path().join("runs").display().to_string();
        let playbook = self.playbook(extra);
        ["run", &playbook, "-i", "hosts.yaml", "--runs-dir", &runs]
            .map(String::from)
            .to_vec()
    }

    /// Runs the fetch; returns the output, the run directory and the step's details.
    fn fetch(&self, extra: &str) -> (Output, PathBuf, Value) {
        let args = self.args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_rigrun(self.tmp.path(), &args);
        let (run_dir, details) = self.outcome();
        (out, run_dir, details)
    }

    fn outcome(&self) -> (PathBuf, Value) {
        let run_dir = newest_run_dir(&self.tmp.path().join("runs"));
        let details = manifest(&run_dir)["hosts"]["h"]["steps"][0]["details"].clone();
        (run_dir, details)
    }
}

fn fetched(run_dir: &Path) -> PathBuf {
    run_dir.join("hosts/h/fetched")
}

/// The files the step fetched, as its list (`files.jsonl`, named in its details) has them, in
/// listing order; every match of the glob has a line there, the skipped and failed ones too.
fn fetched_list(run_dir: &Path, details: &Value) -> Vec<Value> {
    let list = details["list"]
        .as_str()
        .unwrap_or_else(|| panic!("no list in {details:#}"));
    let text = std::fs::read_to_string(run_dir.join(list)).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let fetched: Vec<Value> = lines.into_iter().filter(|f| f["outcome"] == "fetched").collect();
    assert_eq!(details["fetched"], fetched.len(), "{details:#}");
    fetched
}

/// The `remote` names of the files fetched, without the folder.
fn fetched_names(run_dir: &Path, details: &Value, host: &Host) -> Vec<String> {
    let prefix = format!("{}/", host.results().display());
    fetched_list(run_dir, details)
        .iter()
        .map(|f| {
            f["remote"]
                .as_str()
                .unwrap()
                .trim_start_matches(&prefix)
                .to_string()
        })
        .collect()
}

fn reason<'a>(details: &'a Value, list: &str, name: &str) -> &'a str {
    details[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["remote"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("{name} not in {list}: {details:#}"))["reason"]
        .as_str()
        .unwrap()
}

fn sha256_of(path: &Path) -> String {
    sh("sha256sum", &[path.to_str().unwrap()])[..64].to_string()
}

#[test]
fn a_large_file_streams_to_disk_with_little_memory_and_stays_sparse() {
    let host = Host::ssh();
    let big = host.results().join("big.bin");
    sh("truncate", &["-s", "200M", big.to_str().unwrap()]);
    let tail = format!("of={}", big.display());
    sh(
        "dd",
        &[
            "if=/dev/urandom",
            &tail,
            "bs=1M",
            "count=4",
            "seek=200",
            "conv=notrunc",
            "status=none",
        ],
    );
    let args = host.args("      records: false\n");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, peak_kib) = run_rigrun_peak_rss(host.tmp.path(), &args);
    assert!(out.status.success(), "{:?}", text(&out));
    let (run_dir, details) = host.outcome();
    let local = fetched(&run_dir).join("big.bin");
    assert_eq!(sha256_of(&local), sha256_of(&big));
    let files = fetched_list(&run_dir, &details);
    assert_eq!(files[0]["sha256"], sha256_of(&big));
    assert_eq!(files[0]["bytes"], 204 << 20);
    assert_eq!(details["bytes"], 204 << 20);
    assert!(
        peak_kib < 80 * 1024,
        "rigrun peaked at {} MiB fetching a 204 MiB file",
        peak_kib / 1024
    );
    let on_disk = std::fs::metadata(&local).unwrap().blocks() * 512;
    assert!(
        on_disk < 64 << 20,
        "the 200 MiB hole was written out: {on_disk} bytes on disk"
    );
}

#[test]
fn two_thousand_files_are_listed_in_one_command_and_become_records() {
    let mut host = Host::ssh();
    for i in 0..2000 {
        host.put(
            format!("r{i}.json").as_bytes(),
            format!("{{\"i\": {i}}}").as_bytes(),
        );
    }
    host.sshd.as_mut().unwrap().restart_verbose();
    let (out, run_dir, details) = host.fetch("");
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(fetched_list(&run_dir, &details).len(), 2000);
    assert_eq!(details["records"], 2000);
    let recs = records(&run_dir);
    assert_eq!(recs.len(), 2000, "one record per fetched JSON file");
    assert_eq!(recs[1]["point"]["file"], "r1.json", "natural order: r1 after r0");
    assert_eq!(
        recs[2]["point"]["file"], "r2.json",
        "natural order: r2 before r10"
    );
    let sshd = host.sshd.as_ref().unwrap();
    let commands = sshd.commands_started();
    // Connecting probes the login shell, gathers the facts and opens the run's jobs folder (three
    // commands at most); the fetch lists everything in one more and streams the files through
    // one tar.
    assert!(
        commands <= 5,
        "{commands} commands for 2000 files: a round trip per file?"
    );
    assert_eq!(
        sshd.sftp_sessions(),
        0,
        "small files come in one tar stream, not over SFTP"
    );
    assert!(
        commands >= 1,
        "sshd.log counts no command: is LogLevel VERBOSE in effect?"
    );
}

#[test]
fn files_that_cannot_be_fetched_are_named_and_the_rest_are_fetched() {
    let host = Host::ssh();
    host.put(b"good.json", br#"{"output_throughput": 7}"#);
    host.put(b"late.json", b"{}");
    sh("mkfifo", &[host.results().join("pipe.json").to_str().unwrap()]);
    std::fs::create_dir(host.results().join("dir.json")).unwrap();
    let unreadable = whoami() != "root";
    if unreadable {
        let path = host.put(b"secret.json", b"{}");
        sh("chmod", &["000", path.to_str().unwrap()]);
    }
    let (out, run_dir, details) = host.fetch("");
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a file not fetched fails the run:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        fetched_names(&run_dir, &details, &host),
        ["good.json", "late.json"]
    );
    assert!(fetched(&run_dir).join("good.json").is_file());
    assert_eq!(records(&run_dir)[0]["metrics"]["output_throughput"], 7);
    assert!(reason(&details, "failed", "pipe.json").contains("not a regular file"));
    assert!(reason(&details, "skipped", "dir.json").contains("a directory"));
    if unreadable {
        assert!(reason(&details, "failed", "secret.json").contains("not readable"));
    }
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains("could not be fetched") && said.contains("pipe.json") && said.contains("2 fetched"),
        "the run does not say what was not fetched:\n{said}"
    );
}

#[test]
fn names_with_newlines_bad_bytes_and_spaces_are_fetched_escaped_and_shown() {
    let host = Host::ssh();
    host.put(b"with space.json", b"{\"a\": 1}");
    host.put(b"new\nline.json", b"{\"a\": 2}");
    host.put(b"bad\xff.json", b"{\"a\": 3}");
    host.put(b"100%.json", b"{\"a\": 4}");
    let (out, run_dir, details) = host.fetch("");
    assert!(out.status.success(), "{:?}", text(&out));
    let dir = fetched(&run_dir);
    for (local, a) in [
        ("with space.json", 1),
        ("new%0Aline.json", 2),
        ("bad%FF.json", 3),
        ("100%25.json", 4),
    ] {
        let content = std::fs::read_to_string(dir.join(local)).unwrap_or_else(|e| panic!("{local}: {e}"));
        assert_eq!(content, format!("{{\"a\": {a}}}"));
    }
    let mut shown = fetched_names(&run_dir, &details, &host);
    shown.sort();
    assert_eq!(
        shown,
        ["100%25.json", "bad%FF.json", "new%0Aline.json", "with space.json"]
    );
    let files = fetched_list(&run_dir, &details);
    let escaped = files.iter().filter(|f| f["escaped"] == true);
    assert_eq!(escaped.count(), 3, "escaped names are marked: {files:#?}");
    let files: Vec<_> = records(&run_dir)
        .iter()
        .map(|r| r["point"]["file"].clone())
        .collect();
    assert!(files.contains(&Value::from("new%0Aline.json")), "{files:?}");
}

/// A link to /etc/passwd and one to a file beside it, under both settings of follow_symlinks.
fn links_are_followed_only_inside(host: Host) {
    let real = host.put(b"real.json", b"{\"a\": 1}");
    std::os::unix::fs::symlink(&real, host.results().join("inner.json")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", host.results().join("passwd.json")).unwrap();

    let (out, run_dir, details) = host.fetch("");
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(fetched_names(&run_dir, &details, &host), ["real.json"]);
    assert!(reason(&details, "skipped", "passwd.json").contains("not followed"));
    assert!(reason(&details, "skipped", "inner.json").contains("follow_symlinks: true"));
    assert!(!fetched(&run_dir).join("passwd.json").exists());

    let (out, run_dir, details) = host.fetch("      follow_symlinks: true\n");
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(
        fetched_names(&run_dir, &details, &host),
        ["inner.json", "real.json"]
    );
    assert_eq!(
        std::fs::read(fetched(&run_dir).join("inner.json")).unwrap(),
        b"{\"a\": 1}"
    );
    assert!(reason(&details, "skipped", "passwd.json").contains("outside"));
    assert!(!fetched(&run_dir).join("passwd.json").exists());
}

#[test]
fn links_are_not_followed_unless_asked_and_never_outside_over_ssh() {
    links_are_followed_only_inside(Host::ssh());
}

#[test]
fn links_are_not_followed_unless_asked_and_never_outside_on_local_hosts() {
    links_are_followed_only_inside(Host::local());
}

#[test]
fn result_files_that_are_not_all_records_are_named_and_their_records_kept() {
    let host = Host::local();
    host.put(
        b"mixed.jsonl",
        b"{\"a\": 1}\nnot json at all\n{\"a\": 2}\n{\"cut\": \n",
    );
    host.put(b"broken.json", b"{\"a\": 1,,}");
    host.put(b"notes.txt", b"a log, not a result\n");
    let (out, run_dir, _) = host.fetch("");
    assert!(out.status.success(), "{:?}", text(&out));
    let recs = records(&run_dir);
    let values: Vec<&Value> = recs.iter().map(|r| &r["metrics"]["a"]).collect();
    assert_eq!(values, [&Value::from(1), &Value::from(2)], "{recs:?}");
    let warnings: Vec<String> = std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "warning")
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    let about = |file: &str| warnings.iter().filter(|w| w.contains(file)).count();
    assert_eq!(about("mixed.jsonl"), 1, "{warnings:?}");
    assert!(
        warnings.iter().any(
            |w| w.contains("2 of its lines are records, 2 are not (line 2 is not a JSON object; line 4:")
        ),
        "{warnings:?}"
    );
    assert_eq!(about("broken.json"), 1, "{warnings:?}");
    assert_eq!(
        about("notes.txt"),
        0,
        "a file not named as a result is not read: {warnings:?}"
    );
}

/// Without GNU tar on the host (here: a local host whose PATH has every tool but tar), the
/// small files still come, one by one, each checked as ever.
#[test]
fn without_tar_on_the_host_the_files_come_one_by_one() {
    let host = Host::local();
    let bin = host.tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for dir in ["/usr/local/bin", "/usr/bin", "/bin"] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if name != "tar" && !bin.join(&name).exists() {
                std::os::unix::fs::symlink(entry.path(), bin.join(&name)).unwrap();
            }
        }
    }
    for i in 0..30 {
        host.put(
            format!("r{i}.json").as_bytes(),
            format!("{{\"i\": {i}}}").as_bytes(),
        );
    }
    let args = host.args("");
    let out = rigrun()
        .current_dir(host.tmp.path())
        .env("PATH", &bin)
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let (run_dir, details) = host.outcome();
    assert_eq!(fetched_list(&run_dir, &details).len(), 30, "{details:#}");
    assert_eq!(
        std::fs::read_to_string(fetched(&run_dir).join("r7.json")).unwrap(),
        "{\"i\": 7}"
    );
    assert_eq!(records(&run_dir).len(), 30);
}

/// Fetched files keep the host's permission bits, small ones (in a tar batch) and big ones
/// (streamed through a temporary file, which starts 0600) alike, exactly (not through the
/// umask), except setuid and setgid; over SSH and on a local host.
#[test]
fn fetched_files_keep_the_hosts_modes_big_and_small_without_setuid() {
    for host in [Host::ssh(), Host::local()] {
        let modes = [
            ("small.json", 1usize << 10, 0o644, 0o644),
            ("big.bin", 3 << 20, 0o644, 0o644),
            ("group.log", 10, 0o664, 0o664),
            ("tool.sh", 2 << 20, 0o755, 0o755),
            ("setuid.sh", 10, 0o4755, 0o755),
            ("setgid.bin", 2 << 20, 0o2750, 0o750),
            ("owner-only.json", 10, 0o600, 0o600),
        ];
        for (name, size, mode, _) in modes {
            let path = host.put(name.as_bytes(), &vec![b'x'; size]);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let (out, run_dir, details) = host.fetch("      records: false\n");
        assert!(out.status.success(), "{:?}", text(&out));
        assert_eq!(fetched_list(&run_dir, &details).len(), modes.len());
        for (name, _, _, expected) in modes {
            let local = fetched(&run_dir).join(name);
            let got = std::fs::metadata(&local).unwrap().permissions().mode() & 0o7777;
            assert_eq!(got, expected, "{name}: {got:o}, expected {expected:o}");
        }
    }
}

/// Thousands of files over SSH, of every small size (empty ones too) and any bytes: every one
/// arrives byte for byte, the list names each with the sha256 of what arrived, and nothing else
/// lands in the fetched folder.
#[test]
fn thousands_of_files_arrive_byte_identical() {
    const FILES: usize = 3000;
    let host = Host::ssh();
    let content = |i: usize| -> Vec<u8> {
        let len = (i * 37) % 3000;
        (0..len).map(|j| ((i * 131 + j * 7) % 256) as u8).collect()
    };
    for i in 0..FILES {
        host.put(format!("f{i}.bin").as_bytes(), &content(i));
    }
    let (out, run_dir, details) = host.fetch("      records: false\n");
    assert!(out.status.success(), "{:?}", text(&out));
    let files = fetched_list(&run_dir, &details);
    assert_eq!(files.len(), FILES);
    let dir = fetched(&run_dir);
    for i in 0..FILES {
        let name = format!("f{i}.bin");
        let got = std::fs::read(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == content(i), "{name} differs from the host's");
    }
    for file in &files {
        let local = run_dir.join(file["local"].as_str().unwrap());
        assert_eq!(file["sha256"], sha256_of(&local), "{file}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        FILES,
        "nothing else is there"
    );
    let total: usize = (0..FILES).map(|i| content(i).len()).sum();
    assert_eq!(details["bytes"], total);
}

/// More skipped matches than the details name: the details show the first ones and count the
/// rest; the list has every match, each with why.
#[test]
fn every_match_is_in_the_list_though_the_details_name_the_first() {
    let host = Host::local();
    host.put(b"a.json", b"{}");
    for i in 0..130 {
        std::fs::create_dir(host.results().join(format!("d{i}"))).unwrap();
    }
    let (out, run_dir, details) = host.fetch("");
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(details["skipped"].as_array().unwrap().len(), 100, "{details:#}");
    assert_eq!(details["more_in_list"]["skipped"], 30, "{details:#}");
    let list = std::fs::read_to_string(run_dir.join(details["list"].as_str().unwrap())).unwrap();
    let lines: Vec<Value> = list.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 131);
    let skipped = lines.iter().filter(|l| l["outcome"] == "skipped");
    assert!(skipped
        .clone()
        .all(|l| l["reason"].as_str().unwrap().contains("a directory")));
    assert_eq!(skipped.count(), 130);
    assert_eq!(fetched_names(&run_dir, &details, &host), ["a.json"]);
}
