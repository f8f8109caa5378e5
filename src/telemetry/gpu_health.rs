//! GPU health: what nvidia-smi reports of a host's GPUs' errors (volatile ECC totals, retired
//! pages, remapped rows, a GPU that is gone) and the kernel's Xid events where the host lets us
//! read its log, taken in one round trip ([`command`]) before a sweep, at each record and after
//! it. A change between two snapshots ([`changes`], in words) means the GPUs erred while the
//! points in between ran: their records are invalid (see `watch.rs`, which takes them).
//!
//! A field nvidia-smi prints as `[N/A]` or `[Not Supported]` (a GPU without the feature) is
//! unknown (None), never 0; corrected ECC errors are kept but change nothing (the hardware
//! corrected them).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};

use crate::transport::Transport;

/// The fields asked of nvidia-smi (`nvidia-smi --help-query-gpu`), in the order it prints them.
pub const FIELDS: &str = "index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,\
ecc.errors.corrected.volatile.total,retired_pages.pending,retired_pages.single_bit_ecc.count,\
retired_pages.double_bit.count,remapped_rows.pending,remapped_rows.failure,\
remapped_rows.uncorrectable";

/// Where a section of [`command`]'s output starts.
const MARK: &str = "@rigrun-health ";

/// The Xid lines kept per snapshot (the latest; more than a sweep ever adds).
const XID_LINES: usize = 50;

/// The one command of a snapshot: nvidia-smi's query (its exit status after it), then the
/// kernel log's Xid lines from `dmesg`, or `journalctl -k` when dmesg is not allowed, or word
/// that neither can be read without a password. Sections start with [`MARK`].
pub fn command() -> String {
    format!(
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo '{MARK}absent'; exit 0; fi
echo '{MARK}nvidia-smi'
nvidia-smi --query-gpu={FIELDS} --format=csv,noheader,nounits 2>&1
echo \"{MARK}exit $?\"
if dmesg >/dev/null 2>&1; then
  echo '{MARK}xid dmesg'; dmesg 2>/dev/null | grep -F 'NVRM: Xid' | tail -n {XID_LINES}
elif [ -n \"$(journalctl -k -q --no-pager -n 1 2>/dev/null)\" ]; then
  echo '{MARK}xid journalctl -k'
  journalctl -k -q --no-pager 2>/dev/null | grep -F 'NVRM: Xid' | tail -n {XID_LINES}
else
  echo '{MARK}xid unreadable'
fi
exit 0"
    )
}

/// One GPU's error counters as nvidia-smi reported them; None where it printed `[N/A]`,
/// `[Not Supported]` or anything else that is not a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub index: u32,
    pub uuid: String,
    pub bus_id: String,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    pub retired_pages_sbe: Option<u64>,
    pub retired_pages_dbe: Option<u64>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
    pub remapped_rows_uncorrectable: Option<u64>,
}

/// A GPU nvidia-smi could not reach: its bus id as it printed it, and why (`GPU is lost`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostGpu {
    pub bus_id: String,
    pub reason: String,
}

/// An Xid event of the kernel log: the GPU's PCI address, the code and the driver's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xid {
    pub pci: String,
    pub code: u32,
    pub text: String,
    /// The whole line (with its timestamp), which tells one event from another.
    pub line: String,
}

/// The health of a host's GPUs at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub gpus: Vec<GpuHealth>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<LostGpu>,
    /// nvidia-smi's failure when it reported no GPU at all (its exit code and first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The kernel log's Xid lines, or None when it cannot be read.
    pub xid: Option<Vec<Xid>>,
    /// Where the Xid lines come from (`dmesg`, `journalctl -k`), or why they are unknown.
    pub xid_source: String,
}

/// What [`command`] found: a snapshot, or that the host has no nvidia-smi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    Absent,
    Taken(Snapshot),
}

/// Reads [`command`]'s stdout; an output without its sections is an error saying so.
pub fn parse(output: &str) -> Result<Reading, String> {
    let mut section = "";
    let mut smi_lines = Vec::new();
    let (mut exit, mut xid, mut xid_source) = (None, None::<Vec<Xid>>, None);
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix(MARK) {
            section = rest;
            match rest {
                "absent" => return Ok(Reading::Absent),
                "xid unreadable" => {
                    xid_source = Some(
                        "unknown: the kernel log cannot be read (dmesg, journalctl -k) without a password"
                            .to_string(),
                    )
                }
                _ => {}
            }
            if let Some(code) = rest.strip_prefix("exit ") {
                exit = code.trim().parse::<i32>().ok();
            }
            if let Some(source) = rest.strip_prefix("xid ").filter(|s| *s != "unreadable") {
                (xid, xid_source) = (Some(Vec::new()), Some(source.to_string()));
            }
            continue;
        }
        match section {
            "nvidia-smi" => smi_lines.push(line),
            s if s.starts_with("xid ") => xid.iter_mut().for_each(|x| x.extend(parse_xid(line))),
            _ => {}
        }
    }
    let (Some(exit), Some(xid_source)) = (exit, xid_source) else {
        return Err(format!(
            "the health query's output is cut short: {}",
            output.lines().next().unwrap_or("nothing")
        ));
    };
    let mut snapshot = read_nvidia_smi(&smi_lines, exit);
    (snapshot.xid, snapshot.xid_source) = (xid, xid_source);
    Ok(Reading::Taken(snapshot))
}

/// nvidia-smi's lines: a CSV line per GPU it reached, a line per GPU it could not; when it
/// reported neither and failed, its failure.
fn read_nvidia_smi(lines: &[&str], exit: i32) -> Snapshot {
    let mut snapshot = Snapshot::default();
    for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        if let Some(lost) = parse_lost(line) {
            snapshot.lost.push(lost);
        } else if let Some(gpu) = parse_gpu(line) {
            snapshot.gpus.push(gpu);
        }
    }
    if exit != 0 && snapshot.gpus.is_empty() && snapshot.lost.is_empty() {
        let said = lines
            .iter()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(&"nothing printed");
        snapshot.failed = Some(format!("exit {exit}: {}", said.trim()));
    }
    snapshot
}

/// A CSV line of [`FIELDS`], or None when it is not one.
fn parse_gpu(line: &str) -> Option<GpuHealth> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [index, uuid, bus, unc, corr, rp_pending, sbe, dbe, rr_pending, rr_failure, rr_unc] = fields[..]
    else {
        return None;
    };
    Some(GpuHealth {
        index: index.parse().ok()?,
        uuid: uuid.to_string(),
        bus_id: bus.to_string(),
        ecc_uncorrected_volatile: count(unc),
        ecc_corrected_volatile: count(corr),
        retired_pages_pending: flag(rp_pending),
        retired_pages_sbe: count(sbe),
        retired_pages_dbe: count(dbe),
        remapped_rows_pending: flag(rr_pending),
        remapped_rows_failure: flag(rr_failure),
        remapped_rows_uncorrectable: count(rr_unc),
    })
}

/// A counter; `[N/A]`, `[Not Supported]` and anything not a number are unknown.
fn count(field: &str) -> Option<u64> {
    field.parse().ok()
}

/// A yes/no field (`Yes`/`No`, or `1`/`0`); anything else is unknown.
fn flag(field: &str) -> Option<bool> {
    match field.to_ascii_lowercase().as_str() {
        "yes" | "1" => Some(true),
        "no" | "0" => Some(false),
        _ => None,
    }
}

/// nvidia-smi's line for a GPU it cannot reach, as
/// `Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system
/// to recover this GPU`.
fn parse_lost(line: &str) -> Option<LostGpu> {
    let rest = line.strip_prefix("Unable to determine the device handle for GPU")?;
    let (bus_id, reason) = rest.split_once(": ")?;
    let reason = reason.split(".  ").next().unwrap_or(reason).trim_end_matches('.');
    Some(LostGpu {
        bus_id: bus_id.trim().to_string(),
        reason: reason.trim().to_string(),
    })
}

/// A kernel log line `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.`
/// (with or without `pid=`/`name=` before the driver's words).
fn parse_xid(line: &str) -> Option<Xid> {
    let rest = &line[line.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (pci, rest) = rest.split_once("): ")?;
    let (code, mut text) = rest.split_once(',').unwrap_or((rest, ""));
    text = text.trim();
    while let Some((head, tail)) = text.split_once(", ") {
        if !(head.starts_with("pid=") || head.starts_with("name=")) {
            break;
        }
        text = tail.trim();
    }
    Some(Xid {
        pci: pci.to_string(),
        code: code.trim().parse().ok()?,
        text: text.trim_end_matches('.').to_string(),
        line: line.trim().to_string(),
    })
}

/// What got worse from `before` to `after`, one sentence each: more uncorrected ECC errors,
/// retired pages or rows remapped for uncorrectable errors, a retirement or remapping pending
/// or failed, a GPU gone or nvidia-smi failing, a new Xid event. Empty when nothing did.
pub fn changes(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut said = Vec::new();
    for was in &before.gpus {
        match after.gpus.iter().find(|g| same_gpu(g, was)) {
            Some(now) => said.extend(gpu_changes(was, now)),
            None => said.push(gone(was, after)),
        }
    }
    for lost in after.lost.iter().filter(|l| !before.lost.contains(l)) {
        if !before.gpus.iter().any(|g| same_bus(&g.bus_id, &lost.bus_id)) {
            said.push(format!(
                "GPU {} is gone (nvidia-smi: {})",
                lost.bus_id, lost.reason
            ));
        }
    }
    if let (None, Some(failed)) = (&before.failed, &after.failed) {
        said.push(format!("nvidia-smi fails now ({failed})"));
    }
    if let (Some(was), Some(now)) = (&before.xid, &after.xid) {
        for xid in now.iter().filter(|x| !was.iter().any(|w| w.line == x.line)) {
            said.push(format!("Xid {} on {} ({})", xid.code, xid.pci, xid.text));
        }
    }
    said
}

/// The same GPU in two snapshots: by UUID, else by bus id.
fn same_gpu(a: &GpuHealth, b: &GpuHealth) -> bool {
    match (a.uuid.is_empty() || a.uuid.starts_with('['), b.uuid.is_empty()) {
        (false, false) => a.uuid == b.uuid,
        _ => same_bus(&a.bus_id, &b.bus_id),
    }
}

/// Two spellings of one PCI address (`00000000:3B:00.0`, `0000:3b:00.0`): the same bus,
/// device and function.
fn same_bus(a: &str, b: &str) -> bool {
    let tail = |s: &str| {
        let s = s.to_ascii_lowercase();
        let parts: Vec<&str> = s.rsplitn(3, ':').collect();
        parts.iter().take(2).rev().copied().collect::<Vec<_>>().join(":")
    };
    tail(a) == tail(b)
}

/// A GPU of `before` that `after` does not list: lost (nvidia-smi said why) or missing.
fn gone(was: &GpuHealth, after: &Snapshot) -> String {
    match after.lost.iter().find(|l| same_bus(&l.bus_id, &was.bus_id)) {
        Some(lost) => format!("GPU {} is gone (nvidia-smi: {})", was.index, lost.reason),
        None => match &after.failed {
            Some(failed) => format!("GPU {} is gone (nvidia-smi: {failed})", was.index),
            None => format!(
                "GPU {} is gone (nvidia-smi no longer lists {})",
                was.index, was.bus_id
            ),
        },
    }
}

/// The counters of one GPU that rose, and the flags that were raised.
fn gpu_changes(was: &GpuHealth, now: &GpuHealth) -> Vec<String> {
    let gpu = now.index;
    let counters = [
        (
            "uncorrected ECC errors",
            was.ecc_uncorrected_volatile,
            now.ecc_uncorrected_volatile,
        ),
        (
            "pages retired (single-bit ECC)",
            was.retired_pages_sbe,
            now.retired_pages_sbe,
        ),
        (
            "pages retired (double-bit ECC)",
            was.retired_pages_dbe,
            now.retired_pages_dbe,
        ),
        (
            "rows remapped (uncorrectable errors)",
            was.remapped_rows_uncorrectable,
            now.remapped_rows_uncorrectable,
        ),
    ];
    let flags = [
        (
            "a page retirement is pending",
            was.retired_pages_pending,
            now.retired_pages_pending,
        ),
        (
            "a row remapping is pending",
            was.remapped_rows_pending,
            now.remapped_rows_pending,
        ),
        (
            "a row remapping failed",
            was.remapped_rows_failure,
            now.remapped_rows_failure,
        ),
    ];
    let rose = counters
        .into_iter()
        .filter_map(|(what, was, now)| match (was, now) {
            (Some(a), Some(b)) if b > a => Some(format!("GPU {gpu}: {what} {a} → {b}")),
            _ => None,
        });
    let raised = flags.into_iter().filter_map(|(what, was, now)| match (was, now) {
        (Some(false), Some(true)) => Some(format!("GPU {gpu}: {what}")),
        _ => None,
    });
    rose.chain(raised).collect()
}

/// GPU health over one sweep: the snapshot before it, the last one taken, the one after it.
pub struct Tracker {
    transport: Arc<Transport>,
    before: Snapshot,
    state: Mutex<TrackerState>,
}

struct TrackerState {
    last: Snapshot,
    after: Option<Snapshot>,
    /// Why a snapshot could not be taken, the last time one could not.
    failed: Option<String>,
    /// Whether the last snapshot could not be taken (its failure was said).
    failing: bool,
}

impl Tracker {
    /// Takes the snapshot before the sweep; why health is not tracked when it cannot be (no
    /// nvidia-smi, nvidia-smi failing, the query unreadable).
    pub async fn start(transport: Arc<Transport>) -> Result<Tracker, String> {
        let before = match take(&transport).await? {
            Reading::Absent => return Err("absent: the host has no nvidia-smi".into()),
            Reading::Taken(s) if s.failed.is_some() && s.lost.is_empty() => {
                return Err(format!("nvidia-smi failed: {}", s.failed.unwrap_or_default()))
            }
            Reading::Taken(s) => s,
        };
        let state = TrackerState {
            last: before.clone(),
            after: None,
            failed: None,
            failing: false,
        };
        Ok(Tracker {
            transport,
            before,
            state: Mutex::new(state),
        })
    }

    /// The snapshot before the sweep.
    pub fn before(&self) -> &Snapshot {
        &self.before
    }

    /// Takes a snapshot and says what got worse since the last one (which it becomes). A
    /// snapshot that cannot be taken is an error the first time in a row (then nothing is said
    /// until one is taken again), and the next one is compared with the last one taken.
    pub async fn check(&self) -> Result<Vec<String>, String> {
        let now = match take(&self.transport).await {
            Ok(Reading::Taken(now)) => now,
            Ok(Reading::Absent) => return self.failed("nvidia-smi is no longer on the host".into()),
            Err(why) => return self.failed(why),
        };
        let mut state = self.state();
        let said = changes(&state.last, &now);
        (state.last, state.failing) = (now, false);
        Ok(said)
    }

    /// Keeps `why` a snapshot could not be taken, for the details: an error to say when it is
    /// the first in a row, else nothing new.
    fn failed(&self, why: String) -> Result<Vec<String>, String> {
        let mut state = self.state();
        state.failed = Some(why.clone());
        match std::mem::replace(&mut state.failing, true) {
            true => Ok(Vec::new()),
            false => Err(why),
        }
    }

    /// The snapshot after the sweep ([`Tracker::check`], kept for the details).
    pub async fn finish(&self) -> Result<Vec<String>, String> {
        let said = self.check().await;
        let mut state = self.state();
        state.after = Some(state.last.clone());
        said
    }

    /// The snapshots before and after the sweep, for the step's details.
    pub fn details(&self) -> Json {
        let state = self.state();
        json!({"before": self.before, "after": state.after, "failed": state.failed})
    }

    fn state(&self) -> MutexGuard<'_, TrackerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One snapshot, in one round trip.
async fn take(transport: &Transport) -> Result<Reading, String> {
    let out = transport
        .captured(&command())
        .await
        .map_err(|e| format!("the GPU health query failed: {e:#}"))?;
    parse(&out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvidia-smi's output for two A100s (UUIDs shortened), in [`FIELDS`]' order.
    const TWO_A100: &str = "0, GPU-1b2c, 00000000:3B:00.0, 0, 12, No, 0, 0, No, No, 0\n\
                            1, GPU-9f8e, 00000000:86:00.0, 0, 0, No, 0, 0, No, No, 0\n";

    fn taken(smi: &str, exit: i32, xid: &str) -> Snapshot {
        let out = format!("{MARK}nvidia-smi\n{smi}{MARK}exit {exit}\n{MARK}xid dmesg\n{xid}");
        match parse(&out).unwrap() {
            Reading::Taken(s) => s,
            Reading::Absent => panic!("absent"),
        }
    }

    #[test]
    fn reads_every_field_and_keeps_the_unsupported_ones_unknown() {
        let s = taken(TWO_A100, 0, "");
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(
            s.gpus[0],
            GpuHealth {
                index: 0,
                uuid: "GPU-1b2c".into(),
                bus_id: "00000000:3B:00.0".into(),
                ecc_uncorrected_volatile: Some(0),
                ecc_corrected_volatile: Some(12),
                retired_pages_pending: Some(false),
                retired_pages_sbe: Some(0),
                retired_pages_dbe: Some(0),
                remapped_rows_pending: Some(false),
                remapped_rows_failure: Some(false),
                remapped_rows_uncorrectable: Some(0),
            }
        );
        // A consumer card: no ECC, no page retirement, no row remapping.
        let geforce = "0, GPU-77aa, 00000000:01:00.0, [N/A], [N/A], [N/A], [N/A], [N/A], \
                       [Not Supported], [Not Supported], [Not Supported]\n";
        let g = &taken(geforce, 0, "").gpus[0];
        assert_eq!(
            (g.ecc_uncorrected_volatile, g.remapped_rows_pending),
            (None, None)
        );
        assert_eq!(g.retired_pages_sbe, None, "[N/A] is unknown, not 0");
        let mut later = g.clone();
        later.ecc_uncorrected_volatile = Some(0);
        assert!(gpu_changes(g, &later).is_empty(), "unknown to 0 is no change");
    }

    #[test]
    fn says_each_counter_that_rose_and_each_flag_raised() {
        let before = taken(TWO_A100, 0, "");
        let after = taken(
            "0, GPU-1b2c, 00000000:3B:00.0, 0, 40, No, 0, 0, No, No, 0\n\
             1, GPU-9f8e, 00000000:86:00.0, 3, 0, Yes, 0, 1, Yes, No, 2\n",
            0,
            "",
        );
        assert_eq!(
            changes(&before, &after),
            vec![
                "GPU 1: uncorrected ECC errors 0 → 3",
                "GPU 1: pages retired (double-bit ECC) 0 → 1",
                "GPU 1: rows remapped (uncorrectable errors) 0 → 2",
                "GPU 1: a page retirement is pending",
                "GPU 1: a row remapping is pending",
            ]
        );
        assert!(changes(&after, &after).is_empty());
        assert!(
            changes(&after, &before).is_empty(),
            "counters reset by a reboot are no error"
        );
    }

    #[test]
    fn a_lost_gpu_is_gone_in_words() {
        let before = taken(TWO_A100, 0, "");
        let lost = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  \
                    Reboot the system to recover this GPU\n\
                    1, GPU-9f8e, 00000000:86:00.0, 0, 0, No, 0, 0, No, No, 0\n";
        let after = taken(lost, 15, "");
        assert_eq!(after.lost[0].reason, "GPU is lost");
        assert_eq!(
            changes(&before, &after),
            vec!["GPU 0 is gone (nvidia-smi: GPU is lost)"]
        );
        let dead = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
                    Make sure that the latest NVIDIA driver is installed and running.\n";
        let after = taken(dead, 9, "");
        let said = changes(&before, &after);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].starts_with("GPU 0 is gone (nvidia-smi: exit 9: NVIDIA-SMI has failed"));
        assert!(said[2].starts_with("nvidia-smi fails now (exit 9"));
    }

    #[test]
    fn new_xid_events_are_said_and_old_ones_not() {
        let old = "[  12.5] NVRM: Xid (PCI:0000:86:00): 13, pid=99, name=python3, Graphics \
                   Exception: ESR 0x404600=0x80000002\n";
        let new = "[ 912.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n";
        let before = taken(TWO_A100, 0, old);
        let after = taken(TWO_A100, 0, &format!("{old}{new}"));
        assert_eq!(
            before.xid.as_ref().unwrap()[0].text,
            "Graphics Exception: ESR 0x404600=0x80000002"
        );
        assert_eq!(
            changes(&before, &after),
            vec!["Xid 79 on 0000:3b:00 (GPU has fallen off the bus)"]
        );
    }

    #[test]
    fn an_unreadable_kernel_log_is_unknown_and_no_nvidia_smi_is_absent() {
        let out = format!("{MARK}nvidia-smi\n{TWO_A100}{MARK}exit 0\n{MARK}xid unreadable\n");
        let Reading::Taken(s) = parse(&out).unwrap() else {
            panic!()
        };
        assert_eq!(s.xid, None);
        assert!(s.xid_source.starts_with("unknown"));
        assert_eq!(parse(&format!("{MARK}absent\n")).unwrap(), Reading::Absent);
        assert!(parse(&format!("{MARK}nvidia-smi\n")).is_err());
    }

    #[test]
    fn bus_ids_match_across_spellings() {
        assert!(same_bus("00000000:3B:00.0", "0000:3b:00.0"));
        assert!(!same_bus("00000000:3B:00.0", "00000000:86:00.0"));
    }
}
