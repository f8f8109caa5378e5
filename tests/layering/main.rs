//! The layering, checked: every `crate::…` path in rigrun's production code (and every
//! `super::…` that climbs to the crate root) must go down to a lower floor of [`FLOORS`], and
//! reach a module of [`REACHED_ONLY_FROM`] only from the modules listed there. This is
//! ARCHITECTURE.md's "Layers" as data, so that "nothing flows back" cannot silently break: a
//! forbidden import fails here with its file, line, path and the rule it breaks.
//!
//! Read from the source text like rust-analyzer's tidy tests: nothing is compiled or run.
//! Test code (`#[cfg(test)]` items and modules) may import what it needs and is not read;
//! neither is `main.rs`, the binary on top of everything.

mod platform;
mod source;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use source::Source;

/// rigrun's top-level modules by floor, the ground floor first. A module may import the
/// modules of the floors below its own; never one of its own floor, never one above.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "the ground floor",
        &["point", "exit", "facts", "words", "clock", "http_client"],
    ),
    ("the run's vocabulary", &["events"]),
    ("the configuration", &["config"]),
    (
        "the plan, the run directory, the load generator",
        &["plan", "store", "bench"],
    ),
    (
        "the work left, the transports, the simulator",
        &["resume", "transport", "sim"],
    ),
    ("telemetry, the sweeps' count", &["telemetry", "sweep_progress"]),
    ("the steps, the progress display", &["steps", "progress"]),
    ("the executor, the reports", &["executor", "report"]),
    ("the command line's grammar", &["cli"]),
    ("the commands", &["commands"]),
    ("helpers for tests", &["testutil"]),
];

/// Modules beside the flow, and the only modules that may import them: `rigrun bench` and
/// `rigrun sim` are commands of their own, and `testutil` serves test code alone.
const REACHED_ONLY_FROM: &[(&str, &[&str])] = &[
    ("bench", &["sim", "cli", "commands"]),
    ("sim", &["cli", "commands"]),
    ("testutil", &[]),
];

#[test]
fn every_import_goes_down_the_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let floor_of = floors();
    let mut broken = Vec::new();
    let mut importing: Vec<String> = Vec::new();
    for file in production_files(&src) {
        let place = module_path(&src, &file);
        let Some(module) = place.first() else { continue };
        let shown = file
            .strip_prefix(src.parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        let Some(&floor) = floor_of.get(module.as_str()) else {
            broken.push(format!("{shown}: module `{module}` stands on no floor: give it one in FLOORS (tests/layering/main.rs) and in ARCHITECTURE.md's Layers"));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for import in Source::read(&text).imports(&place) {
            let Some(&to) = floor_of.get(import.module.as_str()) else {
                continue;
            };
            if import.module == *module {
                continue;
            }
            importing.push(module.clone());
            let at = format!("{shown}:{}: `{}`", import.line, import.text);
            if to >= floor {
                broken.push(format!(
                    "{at}: {module} (floor {floor}, {}) may not import {} (floor {to}, {}): a module imports only from the floors below its own",
                    FLOORS[floor].0, import.module, FLOORS[to].0
                ));
            }
            if let Some((_, from)) = REACHED_ONLY_FROM.iter().find(|(m, _)| *m == import.module) {
                if !from.contains(&module.as_str()) {
                    let who = if from.is_empty() {
                        "test code alone".to_string()
                    } else {
                        from.join(", ")
                    };
                    broken.push(format!(
                        "{at}: {module} may not import {}, which stands beside the flow: only {who} may",
                        import.module
                    ));
                }
            }
        }
    }
    for (floor, (name, modules)) in FLOORS.iter().enumerate().skip(1) {
        for module in modules.iter().filter(|m| !importing.iter().any(|i| i == *m)) {
            broken.push(format!("{module} imports nothing of rigrun, yet stands on floor {floor} ({name}): it belongs on the ground floor"));
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layering (ARCHITECTURE.md, Layers):\n  {}\n",
        broken.join("\n  ")
    );
}

/// The controller builds on any unix: every Linux-only call of the production code (the binary's
/// `main.rs` included) sits in an item gated to Linux, beside its fallback (see `platform.rs`).
#[test]
fn linux_only_calls_are_gated_to_linux() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = production_files(&src);
    files.push(src.join("main.rs"));
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(src.parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        for use_ in platform::ungated(&text) {
            broken.push(format!(
                "{shown}:{}: {} is Linux-only: put it in an item under #[cfg(target_os = \"linux\")], with the fallback for other unixes beside it under #[cfg(not(target_os = \"linux\"))]",
                use_.line, use_.what
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "Linux-only calls the controller would build with on macOS (ARCHITECTURE.md, Platforms):\n  {}\n",
        broken.join("\n  ")
    );
}

#[test]
fn every_module_of_the_crate_stands_on_one_floor() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    let floor_of = floors();
    let missing: Vec<&&str> = declared.iter().filter(|m| !floor_of.contains_key(**m)).collect();
    assert!(missing.is_empty(), "modules on no floor of FLOORS: {missing:?}");
    let gone: Vec<&&str> = floor_of.keys().filter(|m| !declared.contains(m)).collect();
    assert!(
        gone.is_empty(),
        "FLOORS names modules lib.rs does not declare: {gone:?}"
    );
}

/// Each module's floor, from the ground (0) up; a module named twice is an error.
fn floors() -> HashMap<&'static str, usize> {
    let mut floor_of = HashMap::new();
    for (floor, (_, modules)) in FLOORS.iter().enumerate() {
        for module in *modules {
            assert!(
                floor_of.insert(*module, floor).is_none(),
                "{module} stands on two floors"
            );
        }
    }
    floor_of
}

/// The `.rs` files under `src`, but `main.rs` and the files of test-only modules.
fn production_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut test_only: Vec<PathBuf> = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path != src.join("main.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let children = children_dir(&path);
                for name in Source::read(&text).test_modules {
                    test_only.push(children.join(format!("{name}.rs")));
                    test_only.push(children.join(name));
                }
                files.push(path);
            }
        }
    }
    files.retain(|f| !test_only.iter().any(|t| f.starts_with(t)));
    files
}

/// Where the child modules a file declares live: beside it for `mod.rs` and `lib.rs`, else in
/// the folder of its name.
fn children_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap();
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs") => parent.to_path_buf(),
        _ => parent.join(file.file_stem().unwrap()),
    }
}

/// A file's module in the crate: `src/config/steps/mod.rs` is `["config", "steps"]`,
/// `src/report/grid.rs` `["report", "grid"]`, `src/lib.rs` the root (`[]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}
