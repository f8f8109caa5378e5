//! Creating, writing and reading a run directory.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};

use super::Manifest;
use crate::events::{Event, Record};

/// How often at most run.json is rewritten while a run goes on.
pub const MANIFEST_INTERVAL: Duration = Duration::from_millis(500);
/// run.json is rewritten only once the journal has grown by its size over this since the last
/// write: the bytes written per event stay flat however large the manifest grows with hosts
/// and steps (readers replay the journal run.json has not caught up with).
const MANIFEST_AMORTIZED: usize = 4;

pub struct RunDir {
    pub path: PathBuf,
    pub manifest: Manifest,
    events: File,
    records: File,
    /// Events folded into the manifest since it was last written.
    dirty: bool,
    written_at: Instant,
    /// The size of run.json as last written, and the journal bytes written since.
    manifest_bytes: usize,
    journal_since: usize,
}

/// A file-name-safe form of `text`: letters, digits, `.`, `_`, `=`, `-`; anything else becomes `_`.
/// `base` with `suffix` appended (`003-temperature=0.7` + `.stdout.log`): unlike
/// `Path::with_extension`, a dot in the name (a point's value) is kept, so that two points or
/// repetitions never share a file.
pub fn beside(base: &Path, suffix: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

pub fn slug(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_matches('.').to_string();
    if s.is_empty() {
        "_".to_string()
    } else {
        s
    }
}

impl RunDir {
    /// Creates `runs_dir/<UTC time>-<playbook name>/` and writes the first manifest.
    pub fn create(runs_dir: &Path, manifest: Manifest) -> Result<RunDir> {
        std::fs::create_dir_all(runs_dir).with_context(|| format!("cannot create {}", runs_dir.display()))?;
        let path = runs_dir.join(&manifest.run_id);
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create the run directory {}", path.display()))?;
        if let Err(e) = super::runs::point_latest(runs_dir, &manifest.run_id) {
            tracing::warn!("cannot point {}/latest at the new run: {e}", runs_dir.display());
        }
        let open = |name: &str| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path.join(name))
                .with_context(|| format!("cannot create {}", path.join(name).display()))
        };
        let dir = RunDir {
            events: open("events.jsonl")?,
            records: open("records.jsonl")?,
            path,
            manifest,
            dirty: false,
            written_at: Instant::now(),
            manifest_bytes: 0,
            journal_since: 0,
        };
        let mut dir = dir;
        dir.write_manifest()?;
        Ok(dir)
    }

    /// Opens an existing run directory to go on writing it (`rigrun run --resume`): its
    /// manifest as the journal has it, and the journals appended to. A line cut short at the
    /// end of a journal (the writer killed mid-write) is cut off first, so that the next line
    /// starts on a line of its own.
    pub fn reopen(path: &Path) -> Result<RunDir> {
        let mut manifest = read_manifest(path)?;
        let mut lines = 0;
        for name in ["events.jsonl", "records.jsonl"] {
            let whole = cut_partial_line(&path.join(name))?;
            if name == "events.jsonl" {
                lines = whole;
            }
        }
        // What run.json is rewritten with from now on has folded in the whole journal.
        manifest.journaled = lines;
        let open = |name: &str| {
            OpenOptions::new()
                .append(true)
                .open(path.join(name))
                .with_context(|| format!("cannot append to {}", path.join(name).display()))
        };
        Ok(RunDir {
            events: open("events.jsonl")?,
            records: open("records.jsonl")?,
            path: path.to_path_buf(),
            manifest,
            dirty: true,
            written_at: Instant::now(),
            manifest_bytes: 0,
            journal_since: 0,
        })
    }

    /// A run id that does not exist yet under `runs_dir`: `<UTC time>-<name>`.
    pub fn new_run_id(runs_dir: &Path, name: &str, at: DateTime<Utc>) -> String {
        let base = format!("{}-{}", at.format("%Y%m%dT%H%M%SZ"), slug(name));
        let mut id = base.clone();
        let mut n = 2;
        while runs_dir.join(&id).exists() {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }

    /// Journals one event: appended to `events.jsonl` (records also to `records.jsonl`) and
    /// flushed at once, so a run cut short keeps everything it measured. run.json follows at
    /// most every [`MANIFEST_INTERVAL`], and at once when a host or the run ends.
    pub fn journal(&mut self, event: &Event) -> Result<()> {
        if matches!(event, Event::Output { .. }) {
            return Ok(());
        }
        let now = Utc::now();
        let mut line = serde_json::to_value(event)?;
        if let Some(obj) = line.as_object_mut() {
            obj.shift_insert(0, "at".into(), serde_json::to_value(now)?);
        }
        let line = line.to_string();
        writeln!(self.events, "{line}")?;
        self.events.flush()?;
        self.journal_since += line.len() + 1;
        if let Event::Record(record) = event {
            let record = serde_json::to_string(record)?;
            writeln!(self.records, "{record}")?;
            self.records.flush()?;
            self.journal_since += record.len() + 1;
        }
        self.manifest.journaled += 1;
        self.dirty |= self.manifest.apply(event, now);
        let ends = matches!(event, Event::RunFinished { .. } | Event::Interrupted);
        if ends || self.manifest_due_in() == Some(Duration::ZERO) {
            self.flush_manifest()?;
        }
        Ok(())
    }

    /// How long until run.json is due to be brought up to date; None when it is, or when the
    /// journal has not yet grown enough to pay for rewriting it.
    pub fn manifest_due_in(&self) -> Option<Duration> {
        let paid = self.journal_since * MANIFEST_AMORTIZED >= self.manifest_bytes;
        (self.dirty && paid).then(|| MANIFEST_INTERVAL.saturating_sub(self.written_at.elapsed()))
    }

    /// Brings run.json up to date if anything changed since it was written.
    pub fn flush_manifest(&mut self) -> Result<()> {
        if self.dirty {
            self.write_manifest()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Writes run.json atomically (a temporary file, then a rename): valid at every instant.
    fn write_manifest(&mut self) -> Result<()> {
        let tmp = self.path.join(".run.json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.manifest)?;
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, self.path.join("run.json"))?;
        self.written_at = Instant::now();
        self.manifest_bytes = bytes.len();
        self.journal_since = 0;
        tracing::debug!(bytes = bytes.len(), "run.json written");
        Ok(())
    }

    /// `hosts/<host>/`, where a host's logs and fetched files go.
    pub fn host_dir(run_dir: &Path, host: &str) -> PathBuf {
        run_dir.join("hosts").join(slug(host))
    }

    /// `hosts/<host>/<NN>-<step>/`, created on demand.
    pub fn step_dir(run_dir: &Path, host: &str, index: usize, step: &str) -> Result<PathBuf> {
        Self::step_dir_in(&Self::host_dir(run_dir, host), index, step)
    }

    /// `<dir>/<NN>-<step>/` (a host's folder, or a server variant's within it), created on demand.
    pub fn step_dir_in(dir: &Path, index: usize, step: &str) -> Result<PathBuf> {
        let dir = dir.join(format!("{:02}-{}", index + 1, slug(step)));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }
}

/// Reads a run directory's manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join("run.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} is not a run directory (no readable run.json)", dir.display()))?;
    let manifest: Manifest =
        serde_json::from_str(&text).with_context(|| format!("{}: not a rigrun manifest", path.display()))?;
    let mut manifest = manifest;
    replay_journal(dir, &mut manifest);
    let writer_gone = manifest.process.as_ref().is_some_and(|p| !p.may_be_alive());
    if manifest.status == crate::events::Status::Running && writer_gone {
        manifest.status = crate::events::Status::Interrupted;
        manifest.abandoned = true;
    }
    if manifest.format > super::manifest::FORMAT {
        anyhow::bail!(
            "{} was written by a newer rigrun (run.json format {}; this rigrun {} reads formats up \
             to {}); update rigrun to read it",
            path.display(),
            manifest.format,
            env!("CARGO_PKG_VERSION"),
            super::manifest::FORMAT
        );
    }
    Ok(manifest)
}

/// Folds into `manifest` the events of events.jsonl it has not seen (run.json trails the
/// journal by up to [`MANIFEST_INTERVAL`], more when the writer was killed). A damaged line ends
/// the replay: what follows it cannot be trusted to be in order.
fn replay_journal(dir: &Path, manifest: &mut Manifest) {
    // Runs of format 0 rewrote run.json on every change and did not count.
    let (true, Ok(file)) = (manifest.format >= 1, File::open(dir.join("events.jsonl"))) else {
        return;
    };
    let lines = BufReader::new(file)
        .split(b'\n')
        .skip(manifest.journaled as usize);
    for line in lines {
        let Ok(bytes) = line else { break };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            break;
        };
        let at = value
            .get("at")
            .and_then(|a| serde_json::from_value(a.clone()).ok());
        let Ok(event) = serde_json::from_value::<Event>(value) else {
            break;
        };
        manifest.apply(&event, at.unwrap_or_else(Utc::now));
        manifest.journaled += 1;
    }
}

/// Cuts off a last line without its newline; returns how many whole lines the file holds.
fn cut_partial_line(path: &Path) -> Result<u64> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        file.set_len(whole as u64)?;
    }
    Ok(bytes[..whole].iter().filter(|&&b| b == b'\n').count() as u64)
}

/// Every event of a run's journal that can be read, in order, one at a time (readers fold them:
/// a journal of many records is never in memory whole). A line that is not an event (cut short
/// by a full disk, a crash or a kill mid-write, or garbled) is skipped with a warning on stderr
/// naming the file and line, as [`read_records`] does.
pub fn events(dir: &Path) -> Result<impl Iterator<Item = Event>> {
    let path = dir.join("events.jsonl");
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let lines = BufReader::new(file).split(b'\n').enumerate();
    Ok(
        lines.filter_map(move |(n, line)| match parse_line::<Event>(line) {
            Ok(event) => event,
            Err(why) => {
                eprintln!(
                    "warning: {}:{}: not an event ({why}); skipped, everything else is read",
                    path.display(),
                    n + 1
                );
                None
            }
        }),
    )
}

/// Reads `records.jsonl`. A line that is not a record (cut short by a full disk, a crash or a
/// kill mid-write, or garbled) is skipped with a warning on stderr naming the file and line;
/// everything intact is read. Returns the manifest, the records and how many lines were skipped.
pub fn read_records(dir: &Path) -> Result<(Manifest, Vec<Record>, usize)> {
    let manifest = read_manifest(dir)?;
    let path = dir.join("records.jsonl");
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let (records, skipped) = parse_lines::<Record>(BufReader::new(file));
    for (line, why) in &skipped {
        eprintln!(
            "warning: {}:{line}: not a record ({why}); skipped, everything else is read",
            path.display()
        );
    }
    Ok((manifest, records, skipped.len()))
}

/// The items (records, events) of a journal, and the lines (1-based) that are not, with why.
fn parse_lines<T: serde::de::DeserializeOwned>(reader: impl BufRead) -> (Vec<T>, Vec<(usize, String)>) {
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for (n, line) in reader.split(b'\n').enumerate() {
        match parse_line(line) {
            Ok(Some(item)) => items.push(item),
            Ok(None) => {}
            Err(why) => skipped.push((n + 1, why)),
        }
    }
    (items, skipped)
}

/// One line of a journal: its item, none for a blank line, or why it is not one.
fn parse_line<T: serde::de::DeserializeOwned>(line: std::io::Result<Vec<u8>>) -> Result<Option<T>, String> {
    line.map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice::<Option<T>>(&bytes).or_else(|e| blank(&bytes, e)))
}

/// An empty or blank line is no item and no damage either.
fn blank<T>(bytes: &[u8], error: serde_json::Error) -> Result<Option<T>, String> {
    match bytes.iter().all(u8::is_ascii_whitespace) {
        true => Ok(None),
        false => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_keeps_the_dots_of_a_name() {
        let base = Path::new("run/001-temperature=0.7-rep2");
        assert_eq!(
            beside(base, ".stdout.log"),
            Path::new("run/001-temperature=0.7-rep2.stdout.log")
        );
        // What `with_extension` made of it: every repetition of the point in one file.
        assert_eq!(
            base.with_extension("stdout.log"),
            Path::new("run/001-temperature=0.stdout.log")
        );
    }

    #[test]
    fn slugs_are_file_name_safe() {
        assert_eq!(
            slug("concurrency=16 input_len=1000"),
            "concurrency=16_input_len=1000"
        );
        assert_eq!(slug("../etc"), "_etc");
        assert_eq!(slug(".."), "_");
        assert_eq!(slug("a/b"), "a_b");
    }

    #[test]
    fn a_run_from_a_newer_rigrun_is_refused_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/20261201T102538Z-demo/run.json");
        let mut run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        assert!(
            run.get("format").is_none(),
            "the fixture predates the format field"
        );
        std::fs::write(dir.path().join("run.json"), run.to_string()).unwrap();
        let old = read_manifest(dir.path()).unwrap();
        assert_eq!((old.format, old.hosts.len()), (0, 2));
        assert_eq!(old.hosts["a6000"].facts.home, "/root");
        run["format"] = (super::super::manifest::FORMAT + 1).into();
        std::fs::write(dir.path().join("run.json"), run.to_string()).unwrap();
        let err = format!("{:#}", read_manifest(dir.path()).unwrap_err());
        assert!(
            err.contains("written by a newer rigrun") && err.contains("update rigrun"),
            "{err}"
        );
    }

    #[test]
    fn damaged_journal_lines_are_skipped_and_named() {
        let good =
            r#"{"run":"r","host":"h","step":"s","step_index":0,"point":{},"metrics":{"x":1},"status":"ok"}"#;
        let mut journal = format!("{good}\n\n{{\"run\":\"r\",\"ho\n").into_bytes();
        journal.extend_from_slice(b"\0\xffgarbage\n");
        journal.extend_from_slice(format!("{good}\n{}", &good[..40]).as_bytes());
        let (records, skipped) = parse_lines::<Record>(journal.as_slice());
        assert_eq!(records.len(), 2);
        let lines: Vec<usize> = skipped.iter().map(|(n, _)| *n).collect();
        assert_eq!(lines, [3, 4, 6], "{skipped:?}");
    }

    #[test]
    fn a_reader_replays_what_run_json_has_not_caught_up_with() {
        let runs = tempfile::tempdir().unwrap();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/20261201T102538Z-demo/run.json");
        let mut manifest: Manifest =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        manifest.format = super::super::manifest::FORMAT;
        manifest.run_id = "r".into();
        manifest.hosts.clear();
        let mut dir = RunDir::create(runs.path(), manifest).unwrap();
        let host = |name: &str| name.to_string();
        dir.journal(&Event::HostConnecting { host: host("a") }).unwrap();
        dir.journal(&Event::StepStarted {
            host: host("a"),
            index: 0,
            name: "shell".into(),
            kind: "shell".into(),
            attempt: 1,
            variant: None,
        })
        .unwrap();
        // Killed here: run.json was written when the run was created, not since.
        let path = dir.path.clone();
        drop(dir);
        let on_disk: Manifest =
            serde_json::from_str(&std::fs::read_to_string(path.join("run.json")).unwrap()).unwrap();
        assert!(on_disk.hosts.is_empty(), "run.json trails the journal");
        let read = read_manifest(&path).unwrap();
        assert_eq!(read.hosts["a"].steps.len(), 1, "the journal is replayed");
        assert_eq!(read.journaled, 2);
    }

    #[test]
    fn run_ids_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let at = Utc::now();
        let first = RunDir::new_run_id(dir.path(), "sweep", at);
        std::fs::create_dir(dir.path().join(&first)).unwrap();
        let second = RunDir::new_run_id(dir.path(), "sweep", at);
        assert_ne!(first, second);
        assert!(second.ends_with("-2"));
    }
}
