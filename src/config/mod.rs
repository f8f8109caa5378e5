//! Configuration: the inventory and the playbook, loaded, typed and checked before any host is
//! touched. Every error names the file, line and column, and says what to do.

pub mod duration;
pub mod extra_vars;
pub mod inventory;
pub mod only;
pub mod playbook;
pub mod reference;
pub mod render;
pub mod server_block;
pub mod slo;
pub mod slurm;
pub mod steps;
pub mod template;
mod validate;
mod yaml;
mod yaml_errors;

pub use yaml_errors::scalar_at;

use std::fmt;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use minijinja::value::Value;
use serde_saphyr::Location;

pub use inventory::{Connection, HostSpec, Inventory, KnownHostsPolicy, Vars};
pub use playbook::Playbook;
pub use render::HostVars;
pub use steps::Step;
pub use template::Quoting;

/// One problem in a configuration file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the problem has no place in the file.
    pub line: u64,
    pub column: u64,
    pub message: String,
    pub snippet: Option<String>,
}

impl ConfigError {
    pub fn plain(path: &Path, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: message.into(),
            snippet: None,
        }
    }

    pub fn io(path: &Path, err: &std::io::Error) -> ConfigError {
        ConfigError::plain(path, format!("cannot read the file: {err}"))
    }

    /// An error at a place in `text`, with the line shown and a caret under the column.
    pub fn at(path: &Path, text: &str, loc: &Location, message: impl Into<String>) -> ConfigError {
        ConfigError::at_line(path, text, (loc.line(), loc.column()), message)
    }

    /// An error at (line, column) of `text`, both from 1.
    pub fn at_line(
        path: &Path,
        text: &str,
        (line, column): (u64, u64),
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: path.display().to_string(),
            line,
            column,
            message: message.into(),
            snippet: Some(snippet(text, line, column)),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)?;
        } else {
            write!(f, "{}: {}", self.file, self.message)?;
        }
        if let Some(snippet) = &self.snippet {
            write!(f, "\n{}", snippet.trim_end())?;
        }
        Ok(())
    }
}

/// All the problems found in one check, reported together.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, err) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            writeln!(f, "error: {err}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(err: ConfigError) -> Self {
        ConfigErrors(vec![err])
    }
}

/// Renders the line `line` of `text` with a caret under `column`, like rustc does; a long line
/// is cut to [`SNIPPET_WIDTH`] characters around the column.
pub fn snippet(text: &str, line: u64, column: u64) -> String {
    let Some(source) = text.lines().nth(line.saturating_sub(1) as usize) else {
        return String::new();
    };
    let (shown, caret_at) = window(source, column.saturating_sub(1) as usize);
    let gutter = line.to_string().len();
    let pad = " ".repeat(gutter);
    let caret = " ".repeat(caret_at);
    format!("{pad} |\n{line} | {shown}\n{pad} | {caret}^")
}

/// The widest part of a line a snippet shows.
const SNIPPET_WIDTH: usize = 100;

/// `source` cut to [`SNIPPET_WIDTH`] characters around character `at` (`…` where cut), and
/// where `at` falls in what is shown.
fn window(source: &str, at: usize) -> (String, usize) {
    let chars: Vec<char> = source.chars().collect();
    if chars.len() <= SNIPPET_WIDTH {
        return (source.to_string(), at);
    }
    let start = at
        .saturating_sub(SNIPPET_WIDTH / 2)
        .min(chars.len() - SNIPPET_WIDTH);
    let end = start + SNIPPET_WIDTH;
    let mut shown: String = chars[start..end].iter().collect();
    let mut caret = at - start;
    if start > 0 {
        shown.insert(0, '…');
        caret += 1;
    }
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret)
}

/// The candidate closest to `given` by edit distance, when it is close enough to be a typo.
pub fn closest<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(given, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// What the user asked for on the command line.
#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    pub playbook: PathBuf,
    pub inventory: PathBuf,
    /// `-l HOST,...`: run only on these hosts.
    pub limit: Option<Vec<String>>,
    /// `-e KEY=VALUE`, in order.
    pub extra_vars: Vec<String>,
    /// `run --repeat N`: the repetitions of every sweep without its own `repeat:`.
    pub repeat: Option<u32>,
    /// `--only AXIS=VALUE,...`, as given: the sweep points to run.
    pub only: Vec<String>,
}

/// A checked configuration: both files, parsed, plus the hosts this run covers.
#[derive(Debug)]
pub struct Config {
    pub playbook_path: PathBuf,
    pub playbook_text: String,
    pub playbook: Playbook,
    pub inventory_path: PathBuf,
    pub inventory_text: String,
    pub inventory: Inventory,
    pub extra_vars: Vars,
    /// Selected hosts, in inventory order.
    pub hosts: Vec<String>,
    /// The playbook's expected values for the selected hosts.
    pub references: Vec<reference::Reference>,
    /// The playbook's latency limits (`slo:`), resolved.
    pub slo: slo::Slo,
    /// `run --repeat N`: the repetitions of every sweep without its own `repeat:`.
    pub repeat: Option<u32>,
    /// `--only`: the sweep points to run (every point when empty).
    pub only: only::Only,
}

/// Values that rigrun defines for every host; they cannot be redefined as variables.
#[derive(Debug, Clone)]
pub struct Builtins {
    pub run_id: String,
    /// Path of the rigrun binary as seen by the host.
    pub rigrun: String,
}

pub const BUILTIN_NAMES: &[&str] = &["host", "workdir", "run_id", "rigrun", "labels"];

impl Config {
    /// Loads, parses and checks both files; nothing is contacted.
    pub fn load(opts: &LoadOptions) -> Result<Config, ConfigErrors> {
        let playbook_text = yaml::read_file(&opts.playbook)?;
        let inventory_text = yaml::read_file(&opts.inventory)?;
        Config::from_text(opts, playbook_text, inventory_text)
    }

    /// Parses and checks the two files' text (read from `opts`' paths, which errors name).
    pub fn from_text(
        opts: &LoadOptions,
        playbook_text: String,
        inventory_text: String,
    ) -> Result<Config, ConfigErrors> {
        let swapped = || swapped_files(opts, &playbook_text, &inventory_text);
        let playbook = yaml::parse_str::<Playbook>(&opts.playbook, &playbook_text)
            .map_err(|e| swapped().unwrap_or(e))?;
        let inventory = yaml::parse_str::<Inventory>(&opts.inventory, &inventory_text)
            .map_err(|e| swapped().unwrap_or(e))?;
        let extra_vars = extra_vars::parse_extra_vars(&opts.extra_vars)?;
        let only = only::Only::parse(&opts.only)?;
        let mut config = Config {
            playbook_path: opts.playbook.clone(),
            playbook_text,
            playbook,
            inventory_path: opts.inventory.clone(),
            inventory_text,
            inventory,
            extra_vars,
            hosts: Vec::new(),
            references: Vec::new(),
            slo: slo::Slo::default(),
            repeat: opts.repeat,
            only,
        };
        config.hosts = validate::select_hosts(&config, opts.limit.as_deref())?;
        validate::check(&config)?;
        let only_errors = config.only.check(&config);
        if !only_errors.is_empty() {
            return Err(ConfigErrors(only_errors));
        }
        config.references = reference::resolve(&config).map_err(ConfigErrors)?;
        config.slo = slo::resolve(&config).map_err(ConfigErrors)?;
        Ok(config)
    }

    pub fn host(&self, name: &str) -> &HostSpec {
        &self.inventory.hosts[name].value
    }

    /// The folder the playbook's relative paths start from.
    pub fn playbook_dir(&self) -> &Path {
        self.playbook_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// Whether any step's template, or the server block's, names `var`.
    pub fn playbook_uses(&self, var: &str) -> bool {
        let server = self.playbook.server.as_ref().map(|s| s as &dyn steps::StepKind);
        let steps = self.playbook.steps.iter().map(|step| step.as_kind());
        server.into_iter().chain(steps).any(|kind| {
            kind.templates()
                .iter()
                .any(|(text, _)| template::variables(&text.value).is_ok_and(|vars| vars.contains(var)))
        })
    }

    /// The server's variants, in the order they run on each host; empty without a `server:`.
    pub fn variants(&self) -> Vec<server_block::Variant> {
        self.playbook
            .server
            .as_ref()
            .map(server_block::ServerSpec::variants)
            .unwrap_or_default()
    }

    /// The matrix of every sweep of the playbook, in step order.
    pub fn sweep_matrices(&self) -> impl Iterator<Item = &crate::point::Matrix> {
        self.playbook.steps.iter().filter_map(|step| match step {
            steps::Step::RunSweep(sweep) => Some(&sweep.matrix),
            _ => None,
        })
    }

    /// Every variable of `host`, later sources winning: inventory vars, host vars, playbook
    /// vars, `-e`, then the built-ins and the host's labels.
    pub fn host_vars(
        &self,
        host: &str,
        workdir: &str,
        builtins: &Builtins,
    ) -> IndexMap<String, serde_json::Value> {
        let spec = self.host(host);
        let mut vars = IndexMap::new();
        for source in [
            &self.inventory.vars,
            &spec.vars,
            &self.playbook.vars,
            &self.extra_vars,
        ] {
            vars.extend(source.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        vars.insert("host".into(), host.into());
        vars.insert("workdir".into(), workdir.into());
        vars.insert("run_id".into(), builtins.run_id.clone().into());
        vars.insert("rigrun".into(), builtins.rigrun.clone().into());
        vars.insert(
            "labels".into(),
            serde_json::to_value(&spec.labels).unwrap_or_default(),
        );
        vars
    }
}

/// When one of the two files does not load: the error for a playbook given where the
/// inventory goes, or the other way round, if that is what happened.
fn swapped_files(opts: &LoadOptions, playbook: &str, inventory: &str) -> Option<ConfigError> {
    let usage = "the playbook comes first and the inventory after -i: rigrun check PLAYBOOK -i INVENTORY";
    let inventory_is_playbook = yaml::shape(inventory) == Some(yaml::Shape::Playbook);
    if yaml::shape(playbook) == Some(yaml::Shape::Inventory) {
        let and = match inventory_is_playbook {
            true => format!(
                ", and {} given with -i is a playbook (it has `steps:`): the two are swapped",
                opts.inventory.display()
            ),
            false => String::new(),
        };
        return Some(ConfigError::plain(
            &opts.playbook,
            format!("this file is an inventory (its `hosts:` maps host names to their settings), not a playbook{and}; {usage}"),
        ));
    }
    inventory_is_playbook.then(|| {
        ConfigError::plain(
            &opts.inventory,
            format!("this file is a playbook (it has `steps:`), not an inventory; {usage}"),
        )
    })
}

/// Turns a variable map into a template context.
pub fn context(vars: &IndexMap<String, serde_json::Value>) -> Value {
    Value::from(minijinja::value::Serde(vars))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_suggests_typos_only() {
        assert_eq!(closest("run-swep", steps::STEP_KINDS), Some("run-sweep"));
        assert_eq!(closest("verfy-server", steps::STEP_KINDS), Some("verify-server"));
        assert_eq!(closest("banana", steps::STEP_KINDS), None);
    }

    #[test]
    fn snippet_points_at_the_column() {
        let s = snippet("a: 1\nbb: oops\n", 2, 5);
        assert_eq!(s, "  |\n2 | bb: oops\n  |     ^");
    }

    #[test]
    fn a_long_line_is_cut_around_the_caret() {
        let line = format!("x: {}y{}", "[".repeat(300), "]".repeat(300));
        let s = snippet(&line, 1, 304);
        let shown = s.lines().nth(1).unwrap();
        let caret = s.lines().nth(2).unwrap();
        assert!(shown.starts_with("1 | …[") && shown.ends_with("]…"), "{shown}");
        assert_eq!(shown.chars().count(), "1 | ".len() + SNIPPET_WIDTH + 2);
        let under: usize = caret.chars().position(|c| c == '^').unwrap();
        assert_eq!(shown.chars().nth(under), Some('y'), "{s}");
    }
}
