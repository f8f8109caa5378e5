//! Checks that need the whole configuration: host and group names, variables used by templates,
//! reserved names. Everything here runs before any host is contacted.

use std::collections::{BTreeMap, HashSet};

use serde_saphyr::Location;

use super::playbook::Text;
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
            let known: Vec<&str> = inv
                .hosts
                .keys()
                .map(String::as_str)
                .filter(|h| wanted.contains(h))
                .collect();
            errors.push(ConfigError::plain(
                std::path::Path::new("-l"),
                format!(
                    "`{name}` is not one of this playbook's hosts or their groups ({})",
                    known.join(", ")
                ),
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

fn check_groups(config: &Config) -> Vec<ConfigError> {
    let inv = &config.inventory;
    let mut errors = check_host_names(config);
    errors.extend(check_leases(config));
    errors.extend(check_dcgm_exporters(config));
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
            format!(
                "`{var}` is not defined for host {}; define it under vars: in the inventory, the host or the playbook, or pass -e {var}=VALUE",
                found.hosts.join(", ")
            )
        };
        errors.push(ConfigError::at(
            &config.playbook_path,
            &config.playbook_text,
            &found.place,
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
    for (field, expr) in kind.expressions() {
        match super::template::expression_variables(&expr.value) {
            Ok(used) => note_undefined(undefined, expr, used, &local, host),
            Err(e) => errors.push(template_error(config, expr, field, &e)),
        }
    }
    for (text, _) in kind.templates() {
        match super::template::variables(&text.value) {
            Ok(used) => note_undefined(undefined, text, used, &local, host),
            Err(e) => errors.push(template_error(config, text, "template", &e)),
        }
    }
}

/// A name a template uses that no host defines: where, whether it is called, and on which hosts.
struct UndefinedUse {
    place: Location,
    /// Used as `name(...)`: an unsupported function rather than a missing variable.
    called: bool,
    hosts: Vec<String>,
}

type Undefined = BTreeMap<(u64, u64, String), UndefinedUse>;

/// Records the names `text` uses that are neither defined nor minijinja's own functions.
fn note_undefined(
    undefined: &mut Undefined,
    text: &Text,
    used: HashSet<String>,
    defined: &HashSet<String>,
    host: &str,
) {
    let functions = super::template::functions();
    for var in used
        .into_iter()
        .filter(|v| !defined.contains(v) && !functions.contains(&v.as_str()))
    {
        let called = super::template::calls(&text.value, &var);
        let key = (text.referenced.line(), text.referenced.column(), var);
        let entry = undefined.entry(key).or_insert_with(|| UndefinedUse {
            place: text.referenced,
            called,
            hosts: Vec::new(),
        });
        entry.hosts.push(host.to_string());
    }
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
