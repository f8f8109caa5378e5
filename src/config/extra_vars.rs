//! `-e KEY=VALUE` and `-e @FILE` on the command line: each item read (its key a name, its value
//! one line of YAML scalar; or a YAML file's mapping of names to values, Ansible's form), then
//! checked against the playbook, since a key that nothing uses is almost always a typo (the run
//! would measure with the playbook's own value) and a key that a matrix axis replaces is
//! silently ignored at every point. Later items win.

use std::collections::HashSet;
use std::path::Path;

use super::steps::Step;
use super::{closest, template, Config, ConfigError, Vars};

/// One variable an `-e` item sets, and how it was given (for messages: `input_len=2000`, or
/// `input_len (from @vars.yaml)`).
struct Given {
    key: String,
    value: serde_json::Value,
    given: String,
}

/// `-e KEY=VALUE` (the value read as a YAML scalar, so `-e input_len=2000` is a number) and
/// `-e @FILE` (a YAML mapping of names to values of any shape); later items win.
pub(super) fn parse_extra_vars(items: &[String]) -> Result<Vars, ConfigError> {
    Ok(read_items(items)?.into_iter().map(|g| (g.key, g.value)).collect())
}

/// Every variable the items set, in order.
fn read_items(items: &[String]) -> Result<Vec<Given>, ConfigError> {
    let mut given = Vec::new();
    for item in items {
        match item.strip_prefix('@') {
            Some(file) => given.extend(read_file(file)?),
            None => given.push(read_pair(item)?),
        }
    }
    Ok(given)
}

/// `KEY=VALUE`.
fn read_pair(item: &str) -> Result<Given, ConfigError> {
    let (key, raw) = split_extra_var(item)?;
    let value = serde_saphyr::from_str::<serde_json::Value>(raw)
        .ok()
        .filter(|v| !v.is_object() && !v.is_array() && !v.is_null())
        .unwrap_or_else(|| raw.into());
    Ok(Given {
        key: key.to_string(),
        value,
        given: format!("{key}={raw}"),
    })
}

/// `@FILE`: a YAML mapping of variable names to values, errors at the file's line and column.
fn read_file(file: &str) -> Result<Vec<Given>, ConfigError> {
    let path = Path::new(file);
    if file.is_empty() {
        return Err(ConfigError::plain(
            Path::new("-e"),
            "`@` names no file; write it like -e @vars.yaml",
        ));
    }
    let text = super::yaml::read_file(path)?;
    let vars: indexmap::IndexMap<String, serde_json::Value> = super::yaml::parse_str(path, &text)?;
    vars.into_iter()
        .map(|(key, value)| match is_identifier(&key) {
            true => Ok(Given {
                given: format!("{key} (from @{file})"),
                key,
                value,
            }),
            false => Err(ConfigError::plain(
                path,
                format!(
                    "`{}` is not a variable name: names must be letters, digits and `_`, not starting with a digit (like input_len)",
                    key.escape_debug()
                ),
            )),
        })
        .collect()
}

/// One `-e` item as its key (an identifier, as templates name it) and its raw value, which may
/// hold no control character (YAML would fold a newline silently).
fn split_extra_var(item: &str) -> Result<(&str, &str), ConfigError> {
    let refuse = |message: String| ConfigError::plain(Path::new("-e"), message);
    let Some((key, raw)) = item.split_once('=') else {
        return Err(refuse(format!(
            "`{}` is not KEY=VALUE; write it like -e input_len=2000",
            item.escape_debug()
        )));
    };
    if !is_identifier(key) {
        return Err(refuse(format!(
            "`{}` is not a variable name: KEY must be letters, digits and `_`, not starting with a digit (like input_len)",
            key.escape_debug()
        )));
    }
    if raw.chars().any(char::is_control) {
        return Err(refuse(format!(
            "the value of `{key}` holds a control character (a newline, tab, NUL or escape): -e takes one line of text; put such a value under vars: in the playbook or the inventory, or in a file the step reads"
        )));
    }
    Ok((key, raw))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `-e` keys the playbook would ignore: each an error on `-e`. A key is ignored when a
/// sweep's matrix axis or the server's variants replace it, or when no template, `skip_if` or
/// templated script uses it (said with the used name it is closest to). `items` are the `-e`
/// items as typed (`spec=on`, which YAML reads as `true`), for the messages.
pub fn check_use(config: &Config, items: &[String]) -> Vec<ConfigError> {
    let used = used_variables(config);
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let read = read_items(items).unwrap_or_default();
    // The last item of a key is the one that counts, and each key is judged once.
    for Given { key, given, .. } in read.iter().rev() {
        let key = key.as_str();
        if !seen.insert(key) {
            continue;
        }
        let problem = match (shadowing_axis(config, key), &used) {
            (Some(Shadow::Sweep(axis)), _) => Some(format!(
                "`{given}` would be ignored: `{key}` is {axis}, whose values replace it; to run chosen points, pass --only {given} instead"
            )),
            (Some(Shadow::Variants), _) => Some(format!(
                "`{given}` would be ignored: `{key}` is an axis of the server's variants, whose values replace it; to measure chosen variants, list only those under `variants:`"
            )),
            (None, Some(used)) if !used.contains(key) => Some(unused(config, key, used)),
            _ => None,
        };
        errors.extend(problem.map(|p| ConfigError::plain(Path::new("-e"), p)));
    }
    errors.reverse();
    errors
}

/// What replaces an `-e` value wherever it would be used.
enum Shadow {
    /// A sweep's matrix axis, named: `an axis of the matrix of step 4 (run-sweep)`.
    Sweep(String),
    /// An axis of the server's variants.
    Variants,
}

/// What replaces `-e key=...` everywhere it would be used, if anything.
fn shadowing_axis(config: &Config, key: &str) -> Option<Shadow> {
    let mut steps = config.playbook.steps.iter().enumerate();
    let sweep = steps.find_map(|(i, step)| match step {
        Step::RunSweep(sweep) if sweep.matrix.contains_key(key) => Some(Shadow::Sweep(format!(
            "an axis of the matrix of step {} ({})",
            i + 1,
            step.display_name()
        ))),
        _ => None,
    });
    let server = config.playbook.server.as_ref();
    let variants = server.filter(|s| s.variants.contains_key(key));
    sweep.or_else(|| variants.map(|_| Shadow::Variants))
}

/// The error for a key no template uses.
fn unused(config: &Config, key: &str, used: &HashSet<String>) -> String {
    let mut names: Vec<&str> = used.iter().map(String::as_str).collect();
    names.sort_unstable();
    let playbook = config.playbook_path.display();
    match closest(key, &names) {
        Some(best) => format!(
            "`{key}` is not used by any template of {playbook}; did you mean `{best}`? (as given, the run would use the playbook's own `{best}`)"
        ),
        None => format!(
            "`{key}` is not used by any template of {playbook} (they use: {}); remove it, or check its spelling",
            names.join(", ")
        ),
    }
}

/// Every name the playbook's templates, expressions and templated scripts use; None when a
/// templated script cannot be read here (its names are then unknown).
fn used_variables(config: &Config) -> Option<HashSet<String>> {
    let mut kinds: Vec<&dyn super::steps::StepKind> =
        config.playbook.steps.iter().map(Step::as_kind).collect();
    if let Some(server) = &config.playbook.server {
        kinds.push(server);
    }
    let mut used = HashSet::new();
    for kind in kinds {
        for (text, _) in kind.templates() {
            used.extend(template::variables(&text.value).unwrap_or_default());
        }
        for (_, expr) in kind.expressions() {
            used.extend(template::expression_variables(&expr.value).unwrap_or_default());
        }
    }
    for step in &config.playbook.steps {
        if let Step::CopyScript(copy) = step {
            if copy.template {
                used.extend(script_variables(config, &copy.src.value)?);
            }
        }
    }
    Some(used)
}

/// The names a templated script uses, when its path is plain and the file reads as a template.
fn script_variables(config: &Config, src: &str) -> Option<HashSet<String>> {
    if src.contains("{{") || src.contains("{%") {
        return None;
    }
    let text = std::fs::read_to_string(config.playbook_dir().join(src)).ok()?;
    template::variables(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_vars_read_numbers_as_numbers() {
        let vars = parse_extra_vars(&["n=2000".into(), "url=http://x:1/".into(), "s=a b".into()]).unwrap();
        assert_eq!(vars["n"], serde_json::json!(2000));
        assert_eq!(vars["url"], serde_json::json!("http://x:1/"));
        assert_eq!(vars["s"], serde_json::json!("a b"));
        assert!(parse_extra_vars(&["novalue".into()]).is_err());
    }

    #[test]
    fn a_file_given_with_at_sets_its_variables_and_later_items_win() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vars.yaml");
        std::fs::write(&file, "input_len: 2000\nmodels: [a, b]\nurl: http://x:1/\n").unwrap();
        let at = format!("@{}", file.display());
        let vars = parse_extra_vars(&["input_len=1".into(), at.clone(), "url=http://y:2/".into()]).unwrap();
        assert_eq!(vars["input_len"], serde_json::json!(2000), "the file is later");
        assert_eq!(
            vars["models"],
            serde_json::json!(["a", "b"]),
            "any YAML value from a file"
        );
        assert_eq!(vars["url"], serde_json::json!("http://y:2/"));
        let given: Vec<String> = read_items(&[at]).unwrap().into_iter().map(|g| g.given).collect();
        assert_eq!(given[0], format!("input_len (from @{})", file.display()));
    }

    #[test]
    fn a_bad_at_file_is_an_error_naming_the_file_and_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, "a: 1\n  b: [\n").unwrap();
        let err = parse_extra_vars(&[format!("@{}", file.display())])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("{}:", file.display())), "{err}");
        std::fs::write(&file, "ok: 1\nnot-a-name: 2\n").unwrap();
        let err = parse_extra_vars(&[format!("@{}", file.display())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`not-a-name` is not a variable name"), "{err}");
        let missing = parse_extra_vars(&["@/nonexistent/vars.yaml".into()])
            .unwrap_err()
            .to_string();
        assert!(missing.contains("/nonexistent/vars.yaml"), "{missing}");
        let empty = parse_extra_vars(&["@".into()]).unwrap_err().to_string();
        assert!(empty.contains("names no file"), "{empty}");
    }

    #[test]
    fn extra_var_keys_are_identifiers() {
        assert!(parse_extra_vars(&["_a1=x".into()]).is_ok());
        for bad in ["na\np=1", "1a=x", "=x", "a b=x", "a-b=x", " a=x"] {
            let err = parse_extra_vars(&[bad.into()]).unwrap_err().to_string();
            assert!(err.contains("is not a variable name"), "{bad}: {err}");
        }
    }

    #[test]
    fn extra_var_values_with_control_characters_are_refused() {
        for bad in ["k=a\nb", "k=a\0b", "k=\u{1b}[31m", "k=a\tb"] {
            let err = parse_extra_vars(&[bad.into()]).unwrap_err().to_string();
            assert!(
                err.contains("the value of `k` holds a control character"),
                "{err}"
            );
            assert!(err.contains("under vars:"), "{err}");
        }
        assert!(parse_extra_vars(&["k=a b é".into()]).is_ok());
    }

    /// A configuration of `playbook` with one local host and these `-e` items.
    fn config(dir: &Path, playbook: &str, extra: &[&str]) -> Config {
        std::fs::write(dir.join("hosts.yaml"), "hosts:\n  h:\n    connection: local\n").unwrap();
        std::fs::write(dir.join("p.yaml"), playbook).unwrap();
        let opts = super::super::LoadOptions {
            playbook: dir.join("p.yaml"),
            inventory: dir.join("hosts.yaml"),
            extra_vars: extra.iter().map(|e| e.to_string()).collect(),
            ..Default::default()
        };
        Config::load(&opts).unwrap()
    }

    fn problems(playbook: &str, extra: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), playbook, extra);
        let items: Vec<String> = extra.iter().map(|e| e.to_string()).collect();
        check_use(&config, &items)
            .iter()
            .map(|e| e.message.clone())
            .collect()
    }

    const SWEEP: &str = "name: t\nvars: {output_len: 32}\nsteps:\n  - run-sweep:\n      matrix: {concurrency: [1, 4]}\n      skip_if: concurrency > limit\n      command: echo {{ concurrency }} {{ output_len }}\n";

    #[test]
    fn a_key_no_template_uses_is_named_with_the_closest_used_one() {
        let found = problems(SWEEP, &["outptu_len=64", "limit=8"]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("`outptu_len` is not used by any template of "),
            "{}",
            found[0]
        );
        assert!(found[0].contains("did you mean `output_len`?"), "{}", found[0]);
        let found = problems(SWEEP, &["zzz=1", "limit=8"]);
        assert!(
            found[0].contains("(they use: concurrency, limit, output_len)"),
            "{found:?}"
        );
        assert!(problems(SWEEP, &["output_len=64", "limit=8"]).is_empty());
    }

    #[test]
    fn a_key_a_matrix_axis_replaces_points_to_only() {
        let found = problems(SWEEP, &["concurrency=4", "limit=8"]);
        assert_eq!(
            found,
            ["`concurrency=4` would be ignored: `concurrency` is an axis of the matrix of step 1 (run-sweep), whose values replace it; to run chosen points, pass --only concurrency=4 instead"]
        );
    }

    #[test]
    fn a_templated_script_uses_its_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.sh"), "echo {{ batch }}\n").unwrap();
        let playbook = "name: t\nvars: {batch: 1}\nsteps:\n  - copy-script: {src: s.sh, dest: /tmp/s.sh, template: true}\n";
        let config = config(dir.path(), playbook, &["batch=2"]);
        assert!(check_use(&config, &["batch=2".into()]).is_empty());
        let config = config_with_plain_script(dir.path());
        assert_eq!(check_use(&config, &["batch=2".into()]).len(), 1);
    }

    fn config_with_plain_script(dir: &Path) -> Config {
        let playbook = "name: t\nvars: {batch: 1}\nsteps:\n  - copy-script: {src: s.sh, dest: /tmp/s.sh}\n";
        config(dir, playbook, &["batch=2"])
    }
}
