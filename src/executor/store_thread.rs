//! The store's thread: every event of a run, journaled to the run directory and shown on the
//! progress display, in the order the hosts sent them. It lives with the executor, which
//! starts it, so that the store below knows nothing of the display.

use anyhow::Result;
use tokio::sync::{mpsc, oneshot};

use crate::events::Event;
use crate::progress::Progress;
use crate::store::RunDir;

/// The store runs on its own thread: it journals every event (file writes, flushed per line) and
/// shows it, in the order the hosts sent them. When the run directory cannot be written (disk
/// full), it says so on `failed` at once, so that the hosts stop rather than measure what could
/// not be kept, and returns that error once the hosts are gone.
pub fn spawn(
    run_dir: RunDir,
    progress: Progress,
    rx: mpsc::UnboundedReceiver<Event>,
    failed: oneshot::Sender<()>,
) -> std::thread::JoinHandle<Result<RunDir>> {
    std::thread::spawn(move || {
        // A clock of its own, so that run.json is brought up to date when events pause.
        let clock = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        clock.block_on(write(run_dir, progress, rx, failed))
    })
}

/// The thread's loop: each event shown and journaled; run.json written when due.
async fn write(
    mut run_dir: RunDir,
    mut progress: Progress,
    mut rx: mpsc::UnboundedReceiver<Event>,
    failed: oneshot::Sender<()>,
) -> Result<RunDir> {
    let mut failed = Some(failed);
    let mut error = None;
    loop {
        let next = match run_dir.manifest_due_in().filter(|_| error.is_none()) {
            Some(due) => tokio::time::timeout(due, rx.recv()).await.ok(),
            None => Some(rx.recv().await),
        };
        let written = match next {
            None => run_dir.flush_manifest(),
            Some(None) => break,
            Some(Some(event)) => {
                progress.show(&event);
                if error.is_some() {
                    continue;
                }
                run_dir.journal(&event)
            }
        };
        if let Err(e) = written {
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
        None => run_dir.flush_manifest().map(|()| run_dir),
    }
}
