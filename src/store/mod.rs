//! The run directory: everything a run measured, written the moment it exists.
//!
//! ```text
//! runs/<UTC time>-<playbook>/
//!   run.json        manifest: resolved playbook and inventory, tool version, host facts,
//!                   start/end, status per host and step (rewritten atomically as it changes)
//!   records.jsonl   one line per record
//!   events.jsonl    what happened, in order
//!   hosts/<host>/   logs per step and point, fetched files
//! runs/latest       a link to the newest run
//! ```

mod details;
mod manifest;
mod run_dir;
pub mod runs;

pub use details::Details;
pub use manifest::{manifest_for, HostEntry, Manifest, Process};
pub use run_dir::{beside, events, read_manifest, read_records, slug, RunDir};
