//! The runs directory as a whole: the runs it keeps, and `latest`, a link to the newest, so
//! that `rigrun show latest` and `ls runs/latest/` find it without its time-stamped name.

use std::path::{Path, PathBuf};

use super::{read_manifest, Manifest};

/// The link to the newest run, inside the runs directory.
pub const LATEST: &str = "latest";

/// Points `runs_dir/latest` at the run `run_id` (a relative link, so the folder can move),
/// replacing the old link in one rename. Best effort: a file system without links keeps none.
pub fn point_latest(runs_dir: &Path, run_id: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let staged = runs_dir.join(format!(".{LATEST}.{}", std::process::id()));
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(run_id, &staged)?;
        std::fs::rename(&staged, runs_dir.join(LATEST))
    }
    #[cfg(not(unix))]
    {
        let _ = (runs_dir, run_id);
        Ok(())
    }
}

/// The run directories under `runs_dir`, oldest first (run ids start with their UTC time),
/// each with its manifest or why it cannot be read; the `latest` link and files left out. A
/// runs directory that does not exist yet holds no run.
pub fn list(runs_dir: &Path) -> std::io::Result<Vec<(PathBuf, anyhow::Result<Manifest>)>> {
    let entries = match std::fs::read_dir(runs_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        entries => entries?,
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != LATEST && !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    Ok(dirs.into_iter().map(|d| (d.clone(), read_manifest(&d))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_follows_the_newest_run_and_is_not_listed_as_a_run() {
        let runs = tempfile::tempdir().unwrap();
        for id in ["20260101T000000Z-a", "20260102T000000Z-b"] {
            std::fs::create_dir(runs.path().join(id)).unwrap();
            point_latest(runs.path(), id).unwrap();
        }
        let target = std::fs::read_link(runs.path().join(LATEST)).unwrap();
        assert_eq!(target, PathBuf::from("20260102T000000Z-b"));
        let listed: Vec<PathBuf> = list(runs.path()).unwrap().into_iter().map(|(d, _)| d).collect();
        let names: Vec<_> = listed.iter().map(|d| d.file_name().unwrap().to_owned()).collect();
        assert_eq!(names, ["20260101T000000Z-a", "20260102T000000Z-b"]);
        let unreadable = &list(runs.path()).unwrap()[0].1;
        assert!(unreadable.is_err(), "no run.json: said, not skipped");
        assert!(
            list(&runs.path().join("none")).unwrap().is_empty(),
            "no runs directory yet"
        );
    }
}
