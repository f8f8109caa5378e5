//! Checks that need the whole configuration: host and group names, variables used by templates,
//! reserved names. Everything here runs before any host is contacted.

use std::collections::{BTreeMap, HashSet};

use super::template::Text;
use super::{closest, Builtins, Config, ConfigError, ConfigErrors, BUILTIN_NAMES};

/// The hosts the playbook runs on, in inventory order, narrowed by `-l`.
pub fn select_hosts(config: &Config, limit: Option<&[String]>) -> Result<Vec<String>, ConfigErrors> {
    let inv = &config.inventory;
    let mut errors = check_groups(config);
    let mut wanted: HashSet<&str> = HashSet::new();
    match &config.playbook.hosts {
        None => wanted.extend(inv.hosts.keys().map(String::as_str)),
        Some(names) => {
            for name in names {
                if let Some(_h) = inv.hosts.get(&name.value) {
                    wanted.insert(&name.value);
                } else if let Some(members) = inv.groups.get(&name.value) {
                    wanted.extend(members.iter().map(|m| m.value.as_str()));
                } else {
                    errors.push(unknown_name(config, name));
                }
            }
        }
    }
    if let Some(limit) = limit {
        let limited = limit_hosts(config, limit, &wanted, &mut errors);
        wanted.retain(|h| limited.contains(h));
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let hosts: Vec<String> = inv
        .hosts
        .keys()
        .filter(|h| wanted.contains(h.as_str()))
        .cloned()
        .collect();
    if hosts.is_empty() {
        return Err(ConfigError::plain(&config.playbook_path, "the playbook selects no host").into());
    }
    Ok(hosts)
}

/// `-l NAME,...`: host or group names, each of which must be among the playbook's hosts.
fn limit_hosts<'a>(
    config: &'a Config,
    limit: &'a [String],
    wanted: &HashSet<&str>,
    errors: &mut Vec<ConfigError>,
) -> HashSet<&'a str> {
    let inv = &config.inventory;
    let mut limited = HashSet::new();
    for name in limit {
        let members: Vec<&str> = match inv.groups.get(name) {
            Some(group) => group.iter().map(|m| m.value.as_str()).collect(),
            None => vec![name.as_str()],
        };
        if members.iter().all(|m| !wanted.contains(m)) {
            let hosts = inv
                .hosts
                .keys()
                .map(String::as_str)
                .filter(|h| wanted.contains(h));
            let groups = inv
                .groups
                .iter()
                .filter(|(_, members)| members.iter().any(|m| wanted.contains(m.value.as_str())))
                .map(|(group, _)| group.as_str());
            let known: Vec<&str> = hosts.chain(groups).collect();
            let hint = match closest(name, &known) {
                Some(best) => format!("; did you mean `{best}`?"),
                None => format!(" ({})", known.join(", ")),
            };
            errors.push(ConfigError::plain(
                std::path::Path::new("-l"),
                format!("`{name}` is not one of this playbook's hosts or their groups{hint}"),
            ));
        }
        limited.extend(members);
    }
    limited
}

/// An error at each inventory host (its entry's place) that `problem` finds something wrong with.
fn per_host(config: &Config, problem: impl Fn(&str, &super::HostSpec) -> Option<String>) -> Vec<ConfigError> {
    config
        .inventory
        .hosts
        .iter()
        .filter_map(|(name, spec)| {
            let message = problem(name, &spec.value)?;
            Some(ConfigError::at(
                &config.inventory_path,
                &config.inventory_text,
                &spec.referenced,
                message,
            ))
        })
        .collect()
}

/// Host names become folder names in the run directory, so they stay plain.
fn check_host_names(config: &Config) -> Vec<ConfigError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    per_host(config, |name, _| {
        (name.is_empty() || !name.chars().all(plain) || name.starts_with('.')).then(|| {
            format!("host name `{name}` may only use letters, digits, `.`, `_` and `-` (put the address in `address:`)")
        })
    })
}

/// A lease shorter than the host's check interval would stop commands that are merely running.
fn check_leases(config: &Config) -> Vec<ConfigError> {
    let min = super::inventory::MIN_LEASE;
    per_host(config, |name, spec| {
        spec.lease.is_some_and(|l| l.0 < min).then(|| {
            format!(
                "host `{name}`: `lease:` must be at least {}s (the host checks it every second)",
                min.as_secs()
            )
        })
    })
}

/// A `slurm:` block asks for something Slurm can be asked for; said at the block.
fn check_slurm_blocks(config: &Config) -> Vec<ConfigError> {
    let hosts = config.inventory.hosts.iter();
    hosts
        .filter_map(|(name, spec)| {
            let slurm = spec.value.slurm.as_ref()?;
            let problem = slurm.value.problem()?;
            Some(ConfigError::at(
                &config.inventory_path,
                &config.inventory_text,
                &slurm.referenced,
                format!("host `{name}`: {problem}"),
            ))
        })
        .collect()
}

/// `dcgm_exporter:` must be an http(s) URL with a host, as the host sees the exporter.
fn check_dcgm_exporters(config: &Config) -> Vec<ConfigError> {
    let bad = |url: &str| {
        reqwest::Url::parse(url)
            .map(|u| !matches!(u.scheme(), "http" | "https") || u.host_str().is_none())
            .unwrap_or(true)
    };
    per_host(config, |name, spec| {
        spec.dcgm_exporter.as_deref().is_some_and(bad).then(|| {
            format!(
                "host `{name}`: `dcgm_exporter:` must be the exporter's URL as the host sees it, \
                 like http://127.0.0.1:9400/metrics"
            )
        })
    })
}

/// `rigrun_binary:` names a file here for every SSH host of this run, when the playbook uses
/// `{{ rigrun }}` (otherwise it is never sent, and never needed).
fn check_rigrun_binaries(config: &Config) -> Vec<ConfigError> {
    if !config.playbook_uses("rigrun") {
        return Vec::new();
    }
    let in_run = |name: &str| config.hosts.iter().any(|h| h == name);
    per_host(config, |name, spec| {
        let named = spec.rigrun_binary.as_deref().filter(|_| in_run(name))?;
        let path = super::inventory::expand_home(named);
        (spec.connection == super::Connection::Ssh && !path.is_file()).then(|| {
            format!(
                "host `{name}`: `rigrun_binary:` names {}, which is not a file here; correct the \
                 path, build one with `bash tools/host-binary.sh`, or remove the line (rigrun \
                 then takes the host-binaries folder's)",
                path.display()
            )
        })
    })
}

fn check_groups(config: &Config) -> Vec<ConfigError> {
    let inv = &config.inventory;
    let mut errors = check_host_names(config);
    errors.extend(check_leases(config));
    errors.extend(check_dcgm_exporters(config));
    errors.extend(check_slurm_blocks(config));
    for members in inv.groups.values() {
        for member in members.iter().filter(|m| !inv.hosts.contains_key(&m.value)) {
            let names: Vec<&str> = inv.hosts.keys().map(String::as_str).collect();
            let hint = suggestion(&member.value, &names);
            errors.push(ConfigError::at(
                &config.inventory_path,
                &config.inventory_text,
                &member.referenced,
                format!(
                    "group member `{}` is not a host of this inventory{hint}",
                    member.value
                ),
            ));
        }
    }
    errors
}

fn unknown_name(config: &Config, name: &serde_saphyr::Spanned<String>) -> ConfigError {
    let inv = &config.inventory;
    let names: Vec<&str> = inv
        .hosts
        .keys()
        .chain(inv.groups.keys())
        .map(String::as_str)
        .collect();
    let hint = suggestion(&name.value, &names);
    ConfigError::at(
        &config.playbook_path,
        &config.playbook_text,
        &name.referenced,
        format!(
            "`{}` is neither a host nor a group of {}{hint}",
            name.value,
            config.inventory_path.display()
        ),
    )
}

fn suggestion(given: &str, candidates: &[&str]) -> String {
    match closest(given, candidates) {
        Some(best) => format!("; did you mean `{best}`?"),
        None => format!(" (known: {})", candidates.join(", ")),
    }
}

/// Checks reserved names and that every template variable is defined on every host it runs on.
pub fn check(config: &Config) -> Result<(), ConfigErrors> {
    let mut errors = reserved_names(config);
    errors.extend(super::reference::resolve(config).err().unwrap_or_default());
    errors.extend(check_rigrun_binaries(config));
    let builtins = Builtins {
        run_id: String::new(),
        rigrun: String::new(),
    };
    // (place, variable) -> hosts where it is undefined, so one mistake is one error.
    let mut undefined = Undefined::new();
    for host in &config.hosts {
        let vars = config.host_vars(host, "", &builtins);
        let mut defined: HashSet<String> = vars.keys().cloned().collect();
        if let Some(server) = &config.playbook.server {
            check_templates(config, server, &defined, host, &mut undefined, &mut errors);
            // Every step runs once per variant: the variant's values are theirs too.
            defined.extend(
                super::steps::StepKind::own_variables(server)
                    .into_iter()
                    .map(String::from),
            );
        }
        for step in &config.playbook.steps {
            let kind = step.as_kind();
            check_templates(config, kind, &defined, host, &mut undefined, &mut errors);
            defined.extend(kind.provides().iter().map(|s| s.to_string()));
        }
    }
    for ((_, _, var), found) in undefined {
        let message = if found.called {
            super::template::unsupported_function(&var)
        } else {
            let hint = match &found.suggestion {
                Some(best) => format!("; did you mean `{best}`? Otherwise"),
                None => ";".to_string(),
            };
            format!(
                "`{var}` is not defined for host {}{hint} define it under vars: in the inventory, the host or the playbook, or pass -e {var}=VALUE",
                found.hosts.join(", ")
            )
        };
        errors.push(ConfigError::at_line(
            &config.playbook_path,
            &config.playbook_text,
            found.place,
            message,
        ));
    }
    errors.sort_by_key(|e| (e.line, e.column));
    errors.dedup_by(|a, b| a.line == b.line && a.column == b.column && a.message == b.message);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Notes the undefined names of one kind's templates and expressions on `host`, and the
/// templates that do not parse.
fn check_templates(
    config: &Config,
    kind: &dyn super::steps::StepKind,
    defined: &HashSet<String>,
    host: &str,
    undefined: &mut Undefined,
    errors: &mut Vec<ConfigError>,
) {
    let mut local = defined.clone();
    local.extend(kind.own_variables().into_iter().map(String::from));
    let uses = Uses {
        source: &config.playbook_text,
        defined: &local,
        host,
    };
    for (field, expr) in kind.expressions() {
        match super::template::expression_variables(&expr.value) {
            Ok(used) => uses.note_undefined(undefined, expr, used, Braces::Not),
            Err(e) => errors.push(template_error(config, expr, field, &e)),
        }
    }
    for (text, _) in kind.templates() {
        match super::template::variables(&text.value) {
            Ok(used) => uses.note_undefined(undefined, text, used, Braces::Inside),
            Err(e) => errors.push(template_error(config, text, "template", &e)),
        }
    }
}

/// A name a template uses that no host defines: where, whether it is called, on which hosts,
/// and the defined name it is closest to.
struct UndefinedUse {
    /// (line, column) of the name itself in the playbook.
    place: (u64, u64),
    /// Used as `name(...)`: an unsupported function rather than a missing variable.
    called: bool,
    hosts: Vec<String>,
    suggestion: Option<String>,
}

type Undefined = BTreeMap<(u64, u64, String), UndefinedUse>;

/// Whether a text's names stand inside `{{ }}` and `{% %}` (a template) or anywhere (an
/// expression such as `skip_if`).
#[derive(Clone, Copy, PartialEq)]
enum Braces {
    Inside,
    Not,
}

/// The names one host defines, to judge the names a step's texts use.
struct Uses<'a> {
    /// The playbook's text, where the names are found.
    source: &'a str,
    defined: &'a HashSet<String>,
    host: &'a str,
}

impl Uses<'_> {
    /// Records the names `text` uses that are neither defined nor minijinja's own functions.
    fn note_undefined(&self, undefined: &mut Undefined, text: &Text, used: HashSet<String>, braces: Braces) {
        let functions = super::template::functions();
        let mut candidates: Vec<&str> = self.defined.iter().map(String::as_str).collect();
        candidates.sort_unstable();
        for var in used
            .into_iter()
            .filter(|v| !self.defined.contains(v) && !functions.contains(&v.as_str()))
        {
            let called = super::template::calls(&text.value, &var);
            let place = place_of(self.source, text, &var, braces);
            let key = (place.0, place.1, var);
            let entry = undefined.entry(key.clone()).or_insert_with(|| UndefinedUse {
                place,
                called,
                hosts: Vec::new(),
                suggestion: closest(&key.2, &candidates).map(str::to_string),
            });
            entry.hosts.push(self.host.to_string());
        }
    }
}

/// Where `name` is first used in `text` in the playbook's `source`: (line, column) of the name
/// itself — inside a folded command, the line it is on, not the start of the command. The
/// text's start when it cannot be found (a quoted scalar whose escapes changed it).
fn place_of(source: &str, text: &Text, name: &str, braces: Braces) -> (u64, u64) {
    let start = (text.referenced.line(), text.referenced.column());
    let span = text.referenced.span();
    let (Some(offset), Some(len)) = (span.byte_offset(), span.byte_len()) else {
        return start;
    };
    let (offset, end) = (offset as usize, (offset + len) as usize);
    let Some(written) = source.get(offset..end.min(source.len())) else {
        return start;
    };
    let Some(at) = find_name(written, name, braces) else {
        return start;
    };
    let before = &source[..offset + at];
    let line = before.matches('\n').count() as u64 + 1;
    let column = before[before.rfind('\n').map_or(0, |i| i + 1)..].chars().count() as u64 + 1;
    (line, column)
}

/// The byte where `name` first stands as a whole word in `text` (inside `{{ }}` or `{% %}`
/// when `braces` says so).
fn find_name(text: &str, name: &str, braces: Braces) -> Option<usize> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        let whole = !before.is_some_and(|c| word(c) || c == '.') && !after.is_some_and(word);
        let inside = || {
            let head = &text[..i];
            let opened = head.rfind("{{").max(head.rfind("{%"));
            let closed = head.rfind("}}").max(head.rfind("%}"));
            opened.is_some() && opened > closed
        };
        whole && (braces == Braces::Not || inside())
    })
}

fn template_error(config: &Config, text: &Text, what: &str, err: &str) -> ConfigError {
    ConfigError::at(
        &config.playbook_path,
        &config.playbook_text,
        &text.referenced,
        format!("this {what} does not compile: {err}"),
    )
}

fn reserved_names(config: &Config) -> Vec<ConfigError> {
    let inv = &config.inventory;
    let sources = [
        (&config.inventory_path, &inv.vars, "the inventory's vars"),
        (
            &config.playbook_path,
            &config.playbook.vars,
            "the playbook's vars",
        ),
    ];
    let mut errors = Vec::new();
    let mut complain = |path: &std::path::Path, name: &str, place: &str| {
        errors.push(ConfigError::plain(
            path,
            format!(
                "`{name}` in {place} is a built-in variable set by rigrun ({}); choose another name{}",
                BUILTIN_NAMES.join(", "),
                if name == "workdir" {
                    ", or set workdir: on the host in the inventory"
                } else {
                    ""
                }
            ),
        ));
    };
    for (path, vars, place) in sources {
        for name in vars.keys().filter(|k| BUILTIN_NAMES.contains(&k.as_str())) {
            complain(path, name, place);
        }
    }
    for (host, spec) in &inv.hosts {
        for name in spec
            .value
            .vars
            .keys()
            .filter(|k| BUILTIN_NAMES.contains(&k.as_str()))
        {
            complain(
                &config.inventory_path,
                name,
                &format!("the vars of host `{host}`"),
            );
        }
    }
    for name in config
        .extra_vars
        .keys()
        .filter(|k| BUILTIN_NAMES.contains(&k.as_str()))
    {
        complain(std::path::Path::new("-e"), name, "the command line");
    }
    errors
}
