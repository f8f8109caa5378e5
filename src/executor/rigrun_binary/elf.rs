//! What a rigrun binary is, read from its ELF headers without loading it whole: the CPU it is
//! for, the newest glibc symbol version it needs, whether it carries debug sections, and the
//! rigrun build it is (the [`BUILD_ID`] string every build carries).

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use object::read::elf::{ElfFile, FileHeader};
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};

/// Which rigrun this is, kept as a string in every build so that another binary's can be found
/// in its bytes: a host must run the rigrun that the controller is (records, flags and events
/// change between builds).
pub static BUILD_ID: &str = concat!(
    "rigrun-build:",
    env!("CARGO_PKG_VERSION"),
    "+",
    env!("RIGRUN_COMMIT"),
    ".",
    env!("RIGRUN_SOURCES"),
    ";"
);

/// This build's id, without the framing: `0.1.0+3f2a9c1e7b04.<sources' fingerprint>`.
pub fn this_build() -> &'static str {
    build_text(BUILD_ID)
}

fn build_text(framed: &str) -> &str {
    let inner = framed.strip_prefix("rigrun-build:").unwrap_or(framed);
    inner.strip_suffix(';').unwrap_or(inner)
}

/// What [`inspect`] finds in a binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binary {
    /// As `uname -m` says it (`x86_64`, `aarch64`), or the ELF machine's name for others.
    pub arch: String,
    /// The newest `GLIBC_x.y` it needs, as (x, y); None when it needs no glibc (static).
    pub glibc: Option<(u32, u32)>,
    /// Whether it links a dynamic loader at all.
    pub dynamic: bool,
    /// Whether it carries `.debug_*` sections (line tables make a binary ~6× bigger).
    pub debug_sections: bool,
    /// Its [`BUILD_ID`], unframed; None when it is not a rigrun built with one.
    pub build: Option<String>,
    pub size: u64,
}

/// Reads `path`'s ELF headers (through a read cache: only the headers and the version tables
/// are read) and scans its bytes for a build id.
pub fn inspect(path: &Path) -> Result<Binary> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata()?.len();
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache)
        .with_context(|| format!("{} is not an executable rigrun can read (ELF)", path.display()))?;
    let (glibc, dynamic) = match &parsed {
        object::File::Elf64(elf) => (glibc_needed(elf)?, has_interpreter(elf)),
        object::File::Elf32(elf) => (glibc_needed(elf)?, has_interpreter(elf)),
        _ => anyhow::bail!(
            "{} is not a Linux (ELF) executable; hosts run Linux",
            path.display()
        ),
    };
    let debug_sections = parsed
        .sections()
        .any(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")));
    Ok(Binary {
        arch: uname_arch(parsed.architecture()),
        glibc,
        dynamic,
        debug_sections,
        build: find_build(path)?,
        size,
    })
}

/// `uname -m`'s word for an ELF architecture.
fn uname_arch(arch: object::Architecture) -> String {
    use object::Architecture as A;
    match arch {
        A::X86_64 => "x86_64".into(),
        A::Aarch64 => "aarch64".into(),
        A::PowerPc64 => "ppc64le".into(),
        A::Riscv64 => "riscv64".into(),
        A::Arm => "armv7l".into(),
        A::I386 => "i686".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The newest `GLIBC_x.y` among the versions the binary's dynamic symbols need.
fn glibc_needed<'data, Elf: FileHeader, R: object::ReadRef<'data>>(
    elf: &ElfFile<'data, Elf, R>,
) -> Result<Option<(u32, u32)>> {
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let Some((mut needs, link)) = sections.gnu_verneed(endian, elf.data())? else {
        return Ok(None);
    };
    let strings = sections.strings(endian, elf.data(), link)?;
    let mut newest = None;
    while let Some((_, mut auxes)) = needs.next()? {
        while let Some(aux) = auxes.next()? {
            let name = String::from_utf8_lossy(aux.name(endian, strings)?);
            newest = newest.max(glibc_version(&name));
        }
    }
    Ok(newest)
}

fn has_interpreter<'data, Elf: FileHeader, R: object::ReadRef<'data>>(elf: &ElfFile<'data, Elf, R>) -> bool {
    elf.section_by_name(".interp").is_some()
}

/// `GLIBC_2.34` → (2, 34); `GLIBC_PRIVATE` and other names → None.
pub fn glibc_version(name: &str) -> Option<(u32, u32)> {
    let (major, minor) = name.strip_prefix("GLIBC_")?.split_once('.')?;
    let minor = minor.split('.').next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The build id in a binary's bytes, read in blocks (memory flat in the file's size). The
/// needle is put together at run time so that the search itself is not found.
fn find_build(path: &Path) -> Result<Option<String>> {
    let needle = ["rigrun", "-build:"].concat();
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut file = std::fs::File::open(path)?;
    let mut block = vec![0u8; 1 << 20];
    // What a block carries over: enough for the needle and an id after it.
    const TAIL: usize = 128;
    let mut window: Vec<u8> = Vec::with_capacity(block.len() + TAIL);
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok(None);
        }
        window.extend_from_slice(&block[..n]);
        for at in finder.find_iter(&window) {
            if let Some(id) = framed_id(&window[at + needle.len()..]) {
                return Ok(Some(id));
            }
        }
        let keep = window.len().saturating_sub(TAIL);
        window.drain(..keep);
    }
}

/// The id that follows the needle: version characters up to `;`.
fn framed_id(after: &[u8]) -> Option<String> {
    let end = after.iter().take(96).position(|&b| b == b';')?;
    let id = std::str::from_utf8(&after[..end]).ok()?;
    let ok = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-_".contains(c));
    ok.then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_glibc_versions() {
        assert_eq!(glibc_version("GLIBC_2.34"), Some((2, 34)));
        assert_eq!(glibc_version("GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(glibc_version("GLIBC_PRIVATE"), None);
        assert!(Some((2, 17)) < Some((2, 34)) && None < Some((2, 2)));
    }

    #[test]
    fn this_binary_is_seen_for_what_it_is() {
        let exe = std::env::current_exe().unwrap();
        let binary = inspect(&exe).unwrap();
        assert_eq!(binary.arch, std::env::consts::ARCH);
        assert!(binary.dynamic);
        assert!(binary.glibc.is_some_and(|v| v >= (2, 2)), "{binary:?}");
        assert_eq!(binary.size, std::fs::metadata(&exe).unwrap().len());
    }

    #[test]
    fn finds_a_build_id_across_block_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin");
        let mut bytes = vec![0u8; (1 << 20) - 7];
        bytes.extend_from_slice(b"rigrun-build:1.2.3+abc;");
        bytes.extend_from_slice(&[1u8; 100]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(find_build(&path).unwrap().as_deref(), Some("1.2.3+abc"));
        std::fs::write(&path, b"rigrun-build:\xff\xfe no id here").unwrap();
        assert_eq!(find_build(&path).unwrap(), None);
        assert_eq!(this_build(), build_text(BUILD_ID));
        assert!(!this_build().contains(';'));
    }
}
