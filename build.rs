//! Puts the git commit the binary is built from into `rigrun --version` (`RIGRUN_COMMIT`):
//! `0.1.0 (commit 3f2a9c1e7b04)`, `unknown` outside a git checkout (a source tarball). Edits
//! not committed are not said: the commit is what the build started from. Also the target
//! triple it is built for (`RIGRUN_TARGET`) and a fingerprint of its sources (`RIGRUN_SOURCES`),
//! which tell whether a binary built elsewhere is this very rigrun.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RIGRUN_COMMIT={commit}");
    // The sources' fingerprint: a host binary built from other sources is not this rigrun,
    // even at the same commit (edits not committed).
    let mut files = Vec::new();
    for root in ["src", "build.rs", "Cargo.lock", "Cargo.toml"] {
        collect(std::path::Path::new(root), &mut files);
        println!("cargo:rerun-if-changed={root}");
    }
    files.sort();
    let mut hash = std::collections::hash_map::DefaultHasher::new();
    for file in &files {
        file.hash(&mut hash);
        std::fs::read(file).unwrap_or_default().hash(&mut hash);
    }
    println!("cargo:rustc-env=RIGRUN_SOURCES={:016x}", hash.finish());
    // The target triple, for choosing which binary a host of another kind needs.
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=RIGRUN_TARGET={target}");
    // Run again when HEAD moves: a commit, a checkout.
    if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={p}");
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &reference]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}

/// Every file under `path` (or `path` itself).
fn collect(path: &Path, files: &mut Vec<PathBuf>) {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                collect(&entry.path(), files);
            }
        }
        Err(_) if path.is_file() => files.push(path.to_path_buf()),
        Err(_) => {}
    }
}
