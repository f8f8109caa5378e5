//! The JSON Schemas in schema/ (what editors complete and check YAML with, through
//! yaml-language-server's `# yaml-language-server: $schema=…` comment) against rigrun's own
//! parser: every shipped playbook and inventory, and the examples of the README and docs/, are
//! valid under them; known mistakes are refused by both, the schema naming the place; and at every place of
//! a playbook and an inventory, the keys and words the parser accepts are the schema's, no more
//! and no fewer.
//!
//! The parser's keys are read from the parser itself: given an unknown key (or word), `rigrun
//! check` answers `unknown field `bogus`, expected one of name, timeout, …`, serde's list of the
//! config struct's fields. So a key added to a struct fails here until the schema has it, and a
//! key the schema offers that the parser would refuse fails too, without a second list to keep.

use std::path::{Path, PathBuf};

use jsonschema::Validator;
use serde_json::Value;

use crate::common::{run_rigrun, text};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `schema/<name>.schema.json`, checked against its draft's meta-schema.
fn schema(name: &str) -> Value {
    let path = repo().join(format!("schema/{name}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Err(e) = jsonschema::meta::validate(&schema) {
        panic!("{} is no valid JSON Schema: {e}", path.display());
    }
    schema
}

fn validator(name: &str) -> Validator {
    jsonschema::validator_for(&schema(name)).unwrap()
}

/// A YAML document as JSON, read by the YAML reader rigrun uses.
fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The schema's complaints about `doc`, each `<JSON pointer>: <message>`.
fn complaints(validator: &Validator, doc: &Value) -> Vec<String> {
    (validator.iter_errors(doc))
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// The YAML files of `dir` whose first line names `schema` for yaml-language-server.
fn declaring(dir: &Path, schema: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let first = text.lines().next().unwrap_or_default();
            first.starts_with("# yaml-language-server: $schema=") && first.contains(schema)
        })
        .collect();
    files.sort();
    files
}

/// Every YAML example of README.md and docs/*.md, where it is (`file:line`), as a playbook or
/// an inventory: a list of steps is a playbook's `steps`, and a step written `...` (elided) is
/// left out.
fn documented_examples() -> Vec<(String, &'static str, Value)> {
    let mut files = vec![repo().join("README.md")];
    let docs = std::fs::read_dir(repo().join("docs")).unwrap();
    files.extend(
        docs.map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut examples = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut rest = text.as_str();
        while let Some(open) = rest.find("```yaml\n") {
            let line = text[..text.len() - rest.len() + open].lines().count() + 1;
            let body = &rest[open + "```yaml\n".len()..];
            let block = &body[..body.find("\n```").unwrap()];
            rest = &body[block.len()..];
            let at = format!("{}:{line}", file.strip_prefix(repo()).unwrap().display());
            let mut doc = yaml(block);
            if doc.is_array() {
                doc = serde_json::json!({"name": "example", "steps": doc});
            }
            if let Some(steps) = doc.get_mut("steps").and_then(Value::as_array_mut) {
                steps.retain(|step| !step.as_object().is_some_and(|s| s.values().all(|v| v == "...")));
            }
            let kind = match doc.get("steps") {
                Some(_) => "playbook",
                None => "inventory",
            };
            examples.push((at, kind, doc));
        }
    }
    examples
}

#[test]
fn every_shipped_playbook_and_inventory_names_its_schema_and_is_valid_under_it() {
    let playbooks = declaring(&repo().join("playbooks"), "../schema/playbook.schema.json");
    let inventories = declaring(&repo().join("playbooks"), "../schema/inventory.schema.json");
    let all: Vec<PathBuf> = std::fs::read_dir(repo().join("playbooks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert_eq!(
        playbooks.len() + inventories.len(),
        all.len(),
        "every YAML file in playbooks/ starts with its `# yaml-language-server: $schema=` line"
    );
    let root = declaring(repo(), "schema/inventory.schema.json");
    assert_eq!(root, [repo().join("hosts.yaml")]);

    let (playbook, inventory) = (validator("playbook"), validator("inventory"));
    let mut checked = vec![];
    for (validator, files) in [
        (&playbook, &playbooks),
        (&inventory, &inventories),
        (&inventory, &root),
    ] {
        for file in files {
            let doc = yaml(&std::fs::read_to_string(file).unwrap());
            let said = complaints(validator, &doc);
            assert!(said.is_empty(), "{}:\n{}", file.display(), said.join("\n"));
            checked.push(file.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(checked.len() >= 8, "{checked:?}");
    let examples = documented_examples();
    assert!(examples.len() >= 6, "{examples:?}");
    for (at, kind, doc) in &examples {
        let validator = if *kind == "playbook" {
            &playbook
        } else {
            &inventory
        };
        let said = complaints(validator, doc);
        assert!(said.is_empty(), "the {kind} at {at}:\n{}\n{doc}", said.join("\n"));
    }
}

const INVENTORY: &str = "hosts:\n  a: {connection: local}\n";

/// A playbook with one step, `step` (its YAML flow mapping).
fn one_step(step: &str) -> String {
    format!("name: t\nsteps:\n  - {step}\n")
}

/// Mistakes, each with the place the schema names (a JSON pointer) and a word of its message.
fn known_bad() -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        ("playbook", "name: t\nbogus: 1\nsteps: []\n".into(), "", "bogus"),
        ("playbook", "steps: []\n".into(), "", "name"),
        (
            "playbook",
            one_step("shell: {command: x, comand: y}"),
            "/steps/0/shell",
            "comand",
        ),
        (
            "playbook",
            one_step("run-sweeps: {command: x}"),
            "/steps/0",
            "run-sweeps",
        ),
        (
            "playbook",
            one_step("run-sweep: {matrix: {c: [1]}}"),
            "/steps/0/run-sweep",
            "command",
        ),
        (
            "playbook",
            one_step("run-sweep: {command: x, matrix: {c: []}}"),
            "/steps/0/run-sweep/matrix/c",
            "[]",
        ),
        (
            "playbook",
            one_step("shell: {command: x, timeout: 1.5}"),
            "/steps/0/shell/timeout",
            "1.5",
        ),
        (
            "playbook",
            one_step("shell: {command: x, timeout: ten minutes}"),
            "/steps/0/shell/timeout",
            "ten minutes",
        ),
        (
            "playbook",
            one_step("shell: {command: x, retries: 11}"),
            "/steps/0/shell/retries",
            "11",
        ),
        (
            "playbook",
            one_step("copy-script: {src: a, dest: b, on_host_edit: merge}"),
            "/steps/0/copy-script/on_host_edit",
            "merge",
        ),
        (
            "playbook",
            one_step("run-sweep: {command: x, repeat: 0}"),
            "/steps/0/run-sweep/repeat",
            "0",
        ),
        (
            "playbook",
            "name: t\nslo: {p99_ttft_ms: \"2000\"}\nsteps: []\n".into(),
            "/slo/p99_ttft_ms",
            "2000",
        ),
        (
            "playbook",
            "name: t\nserver: {command: x}\nsteps: []\n".into(),
            "/server",
            "url",
        ),
        (
            "playbook",
            "name: t\nhosts: a\nsteps: []\n".into(),
            "/hosts",
            "\"a\"",
        ),
        (
            "inventory",
            "hosts:\n  a: {connection: sssh}\n".into(),
            "/hosts/a/connection",
            "sssh",
        ),
        (
            "inventory",
            "hosts:\n  a: {port: 70000}\n".into(),
            "/hosts/a/port",
            "70000",
        ),
        (
            "inventory",
            "hosts:\n  a: {adress: x}\n".into(),
            "/hosts/a",
            "adress",
        ),
        (
            "inventory",
            "known_hosts: maybe\nhosts: {}\n".into(),
            "/known_hosts",
            "maybe",
        ),
        (
            "inventory",
            "hosts:\n  a: {lease: soon}\n".into(),
            "/hosts/a/lease",
            "soon",
        ),
    ]
}

#[test]
fn known_mistakes_are_refused_by_the_schema_at_their_place_and_by_rigrun_check() {
    let dir = tempfile::tempdir().unwrap();
    let (playbook, inventory) = (validator("playbook"), validator("inventory"));
    for (kind, doc, place, word) in known_bad() {
        let validator = if kind == "playbook" { &playbook } else { &inventory };
        let said = complaints(validator, &yaml(&doc));
        assert!(
            said.iter()
                .any(|s| s.starts_with(&format!("{place}: ")) && s.contains(word)),
            "the schema names {place:?} ({word}) for\n{doc}\nit said: {said:#?}"
        );
        // rigrun itself refuses it too: the schema is no stricter there than the parser.
        let (p, i) = match kind {
            "playbook" => (doc.as_str(), INVENTORY),
            _ => ("name: t\nsteps: []\n", doc.as_str()),
        };
        std::fs::write(dir.path().join("p.yaml"), p).unwrap();
        std::fs::write(dir.path().join("h.yaml"), i).unwrap();
        let out = run_rigrun(dir.path(), &["check", "p.yaml", "-i", "h.yaml"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "rigrun check accepts\n{doc}\n{:?}",
            text(&out)
        );
    }
}

/// A place in a playbook or an inventory: a document with the unknown key (or word) `bogus`
/// there, and where the schema lists what is accepted there (its `properties` or `enum`).
struct Place {
    kind: &'static str,
    doc: String,
    schema_at: &'static str,
}

fn places() -> Vec<Place> {
    let playbook = |doc: String, schema_at| Place {
        kind: "playbook",
        doc,
        schema_at,
    };
    let inventory = |doc: &str, schema_at| Place {
        kind: "inventory",
        doc: doc.to_string(),
        schema_at,
    };
    let mut places = vec![
        playbook("name: t\nbogus: 1\nsteps: []\n".into(), "/properties"),
        playbook(
            "name: t\nserver: {bogus: 1}\nsteps: []\n".into(),
            "/definitions/server/properties",
        ),
        playbook(one_step("bogus: {command: x}"), "/definitions/step/properties"),
        playbook(
            one_step("copy-script: {src: a, dest: b, on_host_edit: bogus}"),
            "/definitions/copy-script/properties/on_host_edit/enum",
        ),
        playbook(
            one_step("run-sweep: {command: x, repeat_order: bogus}"),
            "/definitions/run-sweep/properties/repeat_order/enum",
        ),
        playbook(
            one_step("run-sweep: {command: x, search: {bogus: 1}}"),
            "/definitions/run-sweep/properties/search/properties",
        ),
        inventory("bogus: 1\nhosts: {}\n", "/properties"),
        inventory("hosts:\n  a: {bogus: 1}\n", "/definitions/host/properties"),
        inventory(
            "hosts:\n  a: {slurm: {time: 1h, bogus: 1}}\n",
            "/definitions/host/properties/slurm/properties",
        ),
        inventory(
            "hosts:\n  a: {connection: bogus}\n",
            "/definitions/host/properties/connection/enum",
        ),
        inventory("known_hosts: bogus\nhosts: {}\n", "/properties/known_hosts/enum"),
    ];
    for (kind, at) in [
        ("verify-server", "/definitions/verify-server/properties"),
        ("copy-script", "/definitions/copy-script/properties"),
        ("run-sweep", "/definitions/run-sweep/properties"),
        ("fetch-results", "/definitions/fetch-results/properties"),
        ("shell", "/definitions/shell/properties"),
        ("start-server", "/definitions/start-server/properties"),
    ] {
        places.push(playbook(one_step(&format!("{kind}: {{bogus: 1}}")), at));
    }
    places
}

/// What `rigrun check` accepts where `doc` has `bogus`: its `expected one of a, b, …`.
fn accepted_by_rigrun(dir: &Path, place: &Place) -> Vec<String> {
    let (p, i) = match place.kind {
        "playbook" => (place.doc.as_str(), INVENTORY),
        _ => ("name: t\nsteps: []\n", place.doc.as_str()),
    };
    std::fs::write(dir.join("p.yaml"), p).unwrap();
    std::fs::write(dir.join("h.yaml"), i).unwrap();
    let stderr = text(&run_rigrun(dir, &["check", "p.yaml", "-i", "h.yaml"])).1;
    let list = stderr
        .lines()
        .find_map(|l| l.split("`bogus`, expected one of ").nth(1))
        .unwrap_or_else(|| panic!("no list of accepted keys for\n{}\n{stderr}", place.doc));
    let list = list.split(';').next().unwrap();
    list.split(", ").map(|s| s.trim().to_string()).collect()
}

/// The keys (`properties`) or words (`enum`) the schema accepts at `pointer`.
fn accepted_by_schema(schema: &Value, pointer: &str) -> Vec<String> {
    match schema.pointer(pointer) {
        Some(Value::Object(properties)) => properties.keys().cloned().collect(),
        Some(Value::Array(words)) => words.iter().map(|w| w.as_str().unwrap().to_string()).collect(),
        other => panic!("nothing at {pointer}: {other:?}"),
    }
}

#[test]
fn the_schema_accepts_exactly_the_keys_and_words_the_parser_does() {
    let dir = tempfile::tempdir().unwrap();
    let (playbook, inventory) = (schema("playbook"), schema("inventory"));
    let places = places();
    for place in &places {
        let schema = if place.kind == "playbook" {
            &playbook
        } else {
            &inventory
        };
        let mut parser = accepted_by_rigrun(dir.path(), place);
        let mut offered = accepted_by_schema(schema, place.schema_at);
        parser.sort();
        offered.sort();
        assert_eq!(
            offered, parser,
            "{} schema at {} against what rigrun check accepts there",
            place.kind, place.schema_at
        );
        if place.schema_at.ends_with("/properties") {
            let object = &schema
                .pointer(place.schema_at.trim_end_matches("/properties"))
                .unwrap();
            assert_eq!(
                object["additionalProperties"], false,
                "{}: no other key",
                place.schema_at
            );
        }
    }
    // Every config struct that refuses unknown keys is a place above: a new one needs its
    // place (and its schema) before this passes.
    let mut structs = 0;
    let mut dirs = vec![repo().join("src/config")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // The production code, before the file's tests.
                let code = text.split("#[cfg(test)]").next().unwrap();
                structs += code.matches("#[serde(deny_unknown_fields)]").count();
            }
        }
    }
    let keyed = places
        .iter()
        .filter(|p| p.schema_at.ends_with("/properties"))
        .count();
    // The step list's place lists kinds (an enum of the parser), not a struct's keys.
    assert_eq!(
        keyed - 1,
        structs,
        "a place per struct with deny_unknown_fields in src/config"
    );
}
