//! The store's thread: every event of a run, journaled to the run directory and shown on the
//! progress display, in the order the hosts sent them.

use anyhow::Result;
use tokio::sync::{mpsc, oneshot};

use super::RunDir;
use crate::events::Event;
use crate::progress::Progress;

/// The store runs on its own thread: it journals every event (file writes, flushed per line) and
/// shows it, in the order the hosts sent them. When the run directory cannot be written (disk
/// full), it says so on `failed` at once, so that the hosts stop rather than measure what could
/// not be kept, and returns that error once the hosts are gone.
pub fn spawn(
    mut run_dir: RunDir,
    mut progress: Progress,
    mut rx: mpsc::UnboundedReceiver<Event>,
    failed: oneshot::Sender<()>,
) -> std::thread::JoinHandle<Result<RunDir>> {
    std::thread::spawn(move || {
        let mut failed = Some(failed);
        let mut error = None;
        while let Some(event) = rx.blocking_recv() {
            progress.show(&event);
            if error.is_some() {
                continue;
            }
            if let Err(e) = run_dir.journal(&event) {
                error = Some(e.context(format!(
                    "cannot write the run directory {}",
                    run_dir.path.display()
                )));
                failed.take().map(|f| f.send(()));
            }
        }
        progress.finish();
        match error {
            Some(e) => Err(e),
            None => Ok(run_dir),
        }
    })
}
