//! Which local binary `{{ rigrun }}` sends to a host, and whether the host can run it: the one
//! the inventory names for the host, else the one built for the host's target triple in the
//! host-binaries folder, else this very rigrun when the host is of its kind. Checked against
//! the host's facts before anything is sent.

use std::path::{Path, PathBuf};

use super::elf::{self, Binary};
use super::local_cache;

/// The script that builds a host binary, from rigrun's source folder.
const BUILD_SCRIPT: &str = "tools/host-binary.sh";

/// A binary chosen for a host, with why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub path: PathBuf,
    pub from: From,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum From {
    /// `rigrun_binary:` in the inventory.
    Inventory,
    /// `<host-binaries>/<triple>/rigrun`.
    Folder,
    /// The rigrun that is running.
    ThisRigrun,
}

impl Choice {
    fn said(&self) -> String {
        let path = self.path.display();
        match self.from {
            From::Inventory => format!("{path} (rigrun_binary in the inventory)"),
            From::Folder => format!("{path} (from the host-binaries folder)"),
            From::ThisRigrun => format!("this rigrun ({path})"),
        }
    }
}

/// The host-binaries folder: `$RIGRUN_HOST_BINARIES`, else `host-binaries` in rigrun's cache
/// folder. A binary for target triple T is `<folder>/T/rigrun`.
pub fn host_binaries_dir() -> Option<PathBuf> {
    let named = std::env::var_os("RIGRUN_HOST_BINARIES").filter(|v| !v.is_empty());
    named
        .map(PathBuf::from)
        .or_else(|| local_cache::cache_dir().map(|dir| dir.join("host-binaries")))
}

/// The Rust target triple of a Linux host from `uname -m` and its C library (`glibc 2.36`,
/// `musl libc (x86_64)`); None for a CPU rigrun does not know.
pub fn triple(arch: &str, libc: Option<&str>) -> Option<String> {
    let musl = libc.is_some_and(|l| l.starts_with("musl"));
    let (cpu, abi) = match arch {
        "x86_64" | "amd64" => ("x86_64", ""),
        "aarch64" | "arm64" => ("aarch64", ""),
        "ppc64le" => ("powerpc64le", ""),
        "riscv64" => ("riscv64gc", ""),
        "armv7l" => ("armv7", "eabihf"),
        "i686" | "i386" => ("i686", ""),
        _ => return None,
    };
    let libc = if musl { "musl" } else { "gnu" };
    Some(format!("{cpu}-unknown-linux-{libc}{abi}"))
}

/// The target triple this rigrun was built for.
pub fn this_triple() -> &'static str {
    env!("RIGRUN_TARGET")
}

/// The binaries a host of `triple` may get, best first: `named` alone (the inventory's, `~/` for
/// the home folder); else the folder's, then this rigrun when it was built for `triple` on
/// Linux (the first that [`check_fits`] wins). Err says what to build and where it goes.
pub fn candidates(named: Option<&str>, triple: &str, folder: Option<&Path>) -> Result<Vec<Choice>, String> {
    if let Some(named) = named {
        let path = crate::config::inventory::expand_home(named);
        if !path.is_file() {
            return Err(format!(
                "rigrun_binary in the inventory names {}, which is not a file here",
                path.display()
            ));
        }
        return Ok(vec![Choice {
            path,
            from: From::Inventory,
        }]);
    }
    let mut found = Vec::new();
    if let Some(path) = folder
        .map(|f| f.join(triple).join("rigrun"))
        .filter(|p| p.is_file())
    {
        found.push(Choice {
            path,
            from: From::Folder,
        });
    }
    let exe = std::env::current_exe().ok().filter(|_| cfg!(target_os = "linux"));
    if let Some(path) = exe.filter(|_| triple == this_triple()) {
        found.push(Choice {
            path,
            from: From::ThisRigrun,
        });
    }
    if found.is_empty() {
        return Err(format!(
            "there is no rigrun for {triple} here (this one is for {}); {}",
            this_triple(),
            build_hint(triple, folder)
        ));
    }
    Ok(found)
}

/// The command that builds a rigrun for `triple`, where it puts it, and the other way.
pub fn build_hint(triple: &str, folder: Option<&Path>) -> String {
    let lands = folder.map_or_else(
        || "into $RIGRUN_HOST_BINARIES".to_string(),
        |f| format!("into {}", f.join(triple).join("rigrun").display()),
    );
    let arg = if triple == this_triple() {
        String::new()
    } else {
        format!(" {triple}")
    };
    format!(
        "build one from rigrun's source folder with `bash {BUILD_SCRIPT}{arg}` (for glibc 2.17 \
         and newer; it goes {lands}), or name one with `rigrun_binary:` for the host in the \
         inventory"
    )
}

/// Why the host cannot run `binary`, or Ok. `libc` is the host's (`glibc 2.31`), when known.
pub fn check_fits(
    host: &str,
    choice: &Choice,
    binary: &Binary,
    arch: &str,
    libc: Option<&str>,
    triple: &str,
    folder: Option<&Path>,
) -> Result<(), String> {
    let said = choice.said();
    let hint = || build_hint(triple, folder);
    if binary.arch != arch {
        return Err(format!(
            "{said} is built for {}, but {host} is {arch}; {}",
            binary.arch,
            hint()
        ));
    }
    if let (Some(needs), Some(libc)) = (binary.glibc, libc) {
        if libc.starts_with("musl") {
            return Err(format!(
                "{said} needs glibc, but {host} has {libc}; build one for {triple} with \
                 `rustup target add {triple}` and `cargo build --release --target {triple}`, and \
                 put it in {}",
                folder.map_or("$RIGRUN_HOST_BINARIES".into(), |f| f
                    .join(triple)
                    .join("rigrun")
                    .display()
                    .to_string())
            ));
        }
        let has = libc
            .split_whitespace()
            .last()
            .and_then(|v| elf::glibc_version(&format!("GLIBC_{v}")));
        if let Some(has) = has.filter(|has| *has < needs) {
            return Err(format!(
                "{said} needs glibc {}.{}, but {host} has {}.{}; {}",
                needs.0,
                needs.1,
                has.0,
                has.1,
                hint()
            ));
        }
    }
    match binary.build.as_deref() {
        Some(build) if build == elf::this_build() => Ok(()),
        other => Err(format!(
            "{said} is {}, but this rigrun is {}: the host must run the same rigrun; {}",
            other.map_or("not a rigrun build".to_string(), |b| format!("rigrun {b}")),
            elf::this_build(),
            hint()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_target_triple_of_a_host() {
        assert_eq!(
            triple("x86_64", Some("glibc 2.36")).unwrap(),
            "x86_64-unknown-linux-gnu"
        );
        assert_eq!(triple("aarch64", None).unwrap(), "aarch64-unknown-linux-gnu");
        assert_eq!(
            triple("x86_64", Some("musl libc (x86_64)")).unwrap(),
            "x86_64-unknown-linux-musl"
        );
        assert_eq!(triple("armv7l", None).unwrap(), "armv7-unknown-linux-gnueabihf");
        assert_eq!(triple("s390x", None), None);
    }

    fn binary(arch: &str, glibc: Option<(u32, u32)>, build: Option<&str>) -> Binary {
        Binary {
            arch: arch.into(),
            glibc,
            dynamic: glibc.is_some(),
            debug_sections: false,
            build: build.map(str::to_string),
            size: 1,
        }
    }

    #[test]
    fn says_why_a_host_cannot_run_a_binary() {
        let folder = Path::new("/cache/host-binaries");
        let choice = Choice {
            path: "/cache/host-binaries/x86_64-unknown-linux-gnu/rigrun".into(),
            from: From::Folder,
        };
        let ours = Some(elf::this_build());
        let t = "x86_64-unknown-linux-gnu";
        let fits = |b: &Binary, arch: &str, libc: Option<&str>| {
            check_fits("old", &choice, b, arch, libc, t, Some(folder))
        };
        assert_eq!(
            fits(
                &binary("x86_64", Some((2, 17)), ours),
                "x86_64",
                Some("glibc 2.17")
            ),
            Ok(())
        );
        let newer = fits(
            &binary("x86_64", Some((2, 34)), ours),
            "x86_64",
            Some("glibc 2.31"),
        )
        .unwrap_err();
        assert!(newer.contains("needs glibc 2.34, but old has 2.31"), "{newer}");
        let arm = fits(&binary("x86_64", None, ours), "aarch64", None).unwrap_err();
        assert!(arm.contains("is built for x86_64, but old is aarch64"), "{arm}");
        let stale = fits(&binary("x86_64", None, Some("0.0.1+abc")), "x86_64", None).unwrap_err();
        assert!(
            stale.contains("is rigrun 0.0.1+abc, but this rigrun is"),
            "{stale}"
        );
        assert!(stale.contains("bash tools/host-binary.sh`"), "{stale}");
        let musl = fits(
            &binary("x86_64", Some((2, 17)), ours),
            "x86_64",
            Some("musl libc (x86_64)"),
        );
        assert!(musl.unwrap_err().contains("needs glibc, but old has musl"));
    }

    #[test]
    fn a_missing_binary_names_the_command_that_builds_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = candidates(None, "aarch64-unknown-linux-gnu", Some(dir.path())).unwrap_err();
        assert!(
            err.contains("`bash tools/host-binary.sh aarch64-unknown-linux-gnu`"),
            "{err}"
        );
        assert!(err.contains(
            &dir.path()
                .join("aarch64-unknown-linux-gnu/rigrun")
                .display()
                .to_string()
        ));
        let from = |found: Vec<Choice>| found.into_iter().map(|c| c.from).collect::<Vec<_>>();
        let this = candidates(None, this_triple(), Some(dir.path())).unwrap();
        assert_eq!(from(this), [From::ThisRigrun]);
        let folder = dir.path().join(this_triple());
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("rigrun"), b"").unwrap();
        let both = candidates(None, this_triple(), Some(dir.path())).unwrap();
        assert_eq!(from(both), [From::Folder, From::ThisRigrun]);
        let named = candidates(Some("/nonexistent/rigrun"), this_triple(), None).unwrap_err();
        assert!(named.contains("names /nonexistent/rigrun, which is not a file here"));
    }
}
