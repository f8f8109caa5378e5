//! Puts the git commit the binary is built from into `rigrun --version` (`RIGRUN_COMMIT`):
//! `0.1.0 (commit 3f2a9c1e7b04)`, `unknown` outside a git checkout (a source tarball). Edits
//! not committed are not said: the commit is what the build started from.

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
