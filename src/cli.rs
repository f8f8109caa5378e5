//! The command line (clap). Each command's work is in `commands`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::report::Format;

#[derive(Parser, Debug)]
#[command(
    name = "rigrun",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("RIGRUN_COMMIT"), ")"),
    about = "Run benchmark playbooks on GPU hosts over SSH and compare the hosts side by side",
    long_about = "Run benchmark playbooks on GPU hosts over SSH and compare the hosts side by side.\n\n\
        A playbook (YAML) names hosts from an inventory (hosts.yaml) and the steps to run on each: \
        verify-server, copy-script, run-sweep, fetch-results, shell, start-server. `rigrun run` runs \
        it on every host in parallel, keeps every record in runs/<time>-<name>/ and prints the \
        hosts side by side. With a `server:` block, rigrun starts the server itself once per \
        variant of its configuration (`variants: {spec: [off, nextn3]}`), one variant after \
        another on each host, and the tables put host × variant side by side \
        (blackwell/spec=nextn3).\n\n\
        Exit codes: 0 success; 1 a step or host failed, or a host measured nothing (its sweep \
        points ran and printed no record); 2 invalid input (nothing was run).",
    after_help = "Try the local demos: rigrun run playbooks/demo.yaml -i playbooks/demo-hosts.yaml \
        (hosts compared), playbooks/demo-variants.yaml with the same inventory (server variants)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a playbook on its hosts, show live progress, print the results table; or go on with
    /// an interrupted or failed run (`--resume RUN_DIR`). Sweeps record each host's GPU
    /// telemetry (nvidia-smi, or a DCGM exporter) and its server's /metrics per point: power, J per output token,
    /// preemptions, throttling (see README, "Telemetry").
    Run(RunArgs),
    /// Validate the playbook and inventory without connecting to any host (YAML, names,
    /// templates, matrices, timeouts, -e keys, --only), each problem at file:line:col; when all is
    /// well, print what would run, counting repetitions and server variants. With --connect, also
    /// reach every host in parallel and print its facts in one line (exit 1 when one cannot be
    /// reached).
    Check(CheckArgs),
    /// Show what would run on each host: its server variants, expanded steps and sweep points,
    /// skipped points with their reason. Connects to nothing.
    Plan(ConfigArgs),
    /// Print the results of a run directory as tables (`latest`: the newest run).
    Show(ShowArgs),
    /// List the runs kept in the runs directory: name, playbook, hosts, status, when, attempts,
    /// label; newest last. `runs/latest` points at the newest.
    Runs(RunsArgs),
    /// Compare hosts (and server variants) within a run (ratio columns) or the same hosts across
    /// runs (change in %).
    Compare(CompareArgs),
    /// Write one self-contained HTML report (tables, scaling story, host facts, SVG charts)
    /// that opens offline.
    Report(ReportArgs),
    /// Load-test an OpenAI-compatible server natively: one JSON line per concurrency level
    /// (vLLM's metric names) with validity checks; playbooks run it on hosts as `{{ rigrun }}`.
    Bench(crate::bench::BenchArgs),
    /// Serve a simulated GPU inference server (OpenAI API) with a calibrated host profile, for
    /// demos and for testing playbooks without GPUs.
    Sim(crate::sim::SimArgs),
    /// Print a shell completion script: `rigrun completions bash > /etc/bash_completion.d/rigrun`,
    /// `rigrun completions zsh > ~/.zfunc/_rigrun`, `rigrun completions fish >
    /// ~/.config/fish/completions/rigrun.fish`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `rigrun man > rigrun.1; man ./rigrun.1`.
    Man,
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Also connect to every host (in parallel, as a run would: SSH with strict host keys) and
    /// print its facts in one line: architecture, OS, kernel, CPUs, memory, GPUs and driver.
    /// A Slurm host is reached at its login node, whose facts these are: nothing is asked of
    /// Slurm.
    #[arg(long)]
    pub connect: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ConfigArgs {
    /// The playbook file.
    pub playbook: PathBuf,
    #[command(flatten)]
    pub with: ConfigOpts,
}

/// What goes with a playbook: the inventory, the hosts, the `-e` values.
#[derive(Args, Debug, Clone)]
pub struct ConfigOpts {
    /// The inventory file [default: $RIGRUN_INVENTORY, else hosts.yaml in the current directory].
    #[arg(short = 'i', long = "inventory", value_name = "INVENTORY")]
    pub inventory: Option<PathBuf>,
    /// Run only on these hosts (comma-separated host or group names from the inventory, each
    /// among the playbook's hosts).
    #[arg(short = 'l', long = "limit", value_delimiter = ',')]
    pub limit: Option<Vec<String>>,
    /// Set a variable, overriding inventory and playbook vars (repeatable; later wins). KEY is a
    /// name (letters, digits and `_`, not starting with a digit); VALUE is one line, read as YAML
    /// so numbers stay numbers; a newline, tab, NUL or other control character in it is refused.
    /// @FILE sets every variable of a YAML file's mapping (`-e @vars.yaml`, as Ansible's), values
    /// of any shape. A KEY that no template uses, or that a matrix axis replaces (use --only), is
    /// an error.
    #[arg(short = 'e', long = "extra-var", value_name = "KEY=VALUE|@FILE")]
    pub extra_vars: Vec<String>,
    /// Run only these sweep points: AXIS=VALUE, comma-separated or repeated. Values of one axis
    /// add up (--only concurrency=16,concurrency=64 runs both), several axes narrow together
    /// (--only concurrency=16,input_len=1000); a sweep without any of the axes runs whole. An
    /// axis or value no sweep has is an error. The points left out are not run, and the run
    /// (run.json, --resume, show, report) does not count them.
    #[arg(long, value_name = "AXIS=VALUE,...", value_delimiter = ',')]
    pub only: Vec<String>,
}

#[derive(Args, Debug)]
#[command(after_long_help = RESUME_HELP)]
pub struct RunArgs {
    /// The playbook file.
    #[arg(required_unless_present = "resume")]
    pub playbook: Option<PathBuf>,
    #[command(flatten)]
    pub with: ConfigOpts,
    /// Where run directories are created [default: $RIGRUN_RUNS_DIR, else runs].
    #[arg(long)]
    pub runs_dir: Option<PathBuf>,
    /// Go on with an interrupted or failed run in its own directory: the playbook, inventory,
    /// hosts and -e values it ran with; only what has no result yet runs (see below).
    #[arg(
        long,
        value_name = "RUN_DIR",
        conflicts_with_all = ["playbook", "inventory", "limit", "extra_vars", "only", "runs_dir"]
    )]
    pub resume: Option<PathBuf>,
    /// A note kept with the run (in run.json) and shown by show, compare, report and runs:
    /// `--label "driver 580, new BIOS"`.
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    pub label: Option<String>,
    /// With --resume: also run again the points whose command ran and failed.
    #[arg(long, requires = "resume")]
    pub redo_failed: bool,
    /// With --resume: also run again the points whose record was marked invalid.
    #[arg(long, requires = "resume")]
    pub redo_invalid: bool,
    /// Measure each point of every sweep N times (1 to 100), as `repeat: N` on each run-sweep
    /// step that has none of its own; kept in run.json, so a resume repeats as the run did.
    #[arg(long, value_name = "N", conflicts_with = "resume",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: Option<u32>,
    /// How many hosts run at once (default: all).
    #[arg(long)]
    pub forks: Option<usize>,
    /// The metrics of the closing tables, a table each (comma-separated); default: a sweep's
    /// summary (output_throughput, median_ttft_ms, p99_ttft_ms, median_tpot_ms, p99_itl_ms: those
    /// its records have), else the step's first numeric metric.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub metric: Vec<String>,
    /// Do not echo command output lines (they are still saved in the run directory).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Exit 1 when a measurement misses a reference the playbook states (`references:` on a
    /// run-sweep step).
    #[arg(long)]
    pub check_references: bool,
}

/// How `--resume` decides what runs, for `rigrun run --help`.
const RESUME_HELP: &str = "Resuming (--resume RUN_DIR), after Ctrl-C, a crash, a kill, a reboot or a host \
that gave up:\n  \
- the run's own copy of the playbook and inventory (in run.json) runs, with the same hosts and -e \
values; if the files were since changed in what runs (steps, points, commands), it refuses (exit 2) \
and names the change;\n  \
- a sweep runs only its points without a result: never run, or cut short (run again as the same \
attempt, so a command still running on the host is re-attached, not started twice); points that \
failed or were marked invalid stand unless --redo-failed / --redo-invalid;\n  \
- verify-server, start-server, copy-script and shell run again when a later step has work (they set \
it up); fetch-results runs again when an earlier step has work; a step that did not finish ok runs \
again; done sweep points and steps with nothing to follow are not repeated;\n  \
- records and events carry their attempt; show, compare and report use each point's latest attempt \
and say how many attempts the run took. A run that finished ok has nothing to do (exit 0).\n\n\
Retries: a point whose command failed is failed, unless its step says `retries: N` (waits 1s, 2s, 4s, \
... at most 60s between attempts); a point whose host was lost (connection, reboot) is run again \
once. Every attempt is recorded with its reason.\n\n\
The rigrun a host runs ({{ rigrun }} in a command): per host, the inventory's `rigrun_binary:`, \
else $RIGRUN_HOST_BINARIES/<target triple>/rigrun (default ~/.cache/rigrun/host-binaries; \
tools/host-binary.sh builds one for glibc 2.17 and later), else this very binary when it fits the \
host (architecture, glibc). Sent compressed, once per content (see README, \"The rigrun a host runs\"). \
A host with a copy of this rigrun also has it start each command it runs (`rigrun job-run`: 2 execs \
and 2 forks per command on the host, against job.sh's 5 and 8).";

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// Where the runs are [default: $RIGRUN_RUNS_DIR, else runs].
    #[arg(long)]
    pub runs_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A run directory (runs/<time>-<name>), or `latest` for the newest run of the runs
    /// directory ($RIGRUN_RUNS_DIR, else runs).
    pub run_dir: PathBuf,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// The metrics shown, a table each (comma-separated), e.g. output_throughput,p99_ttft_ms or
    /// telemetry's output_tokens_per_joule, gpu_power_mean_w. Default: a sweep's summary
    /// (output_throughput, median_ttft_ms, p99_ttft_ms, median_tpot_ms, p99_itl_ms: those its
    /// records have), else the step's first numeric metric. A name no record has is refused
    /// (exit 2) with the closest one and the metrics the run holds.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub metric: Vec<String>,
    /// Latency limits to judge the run by, overriding the playbook's `slo:`: METRIC=LIMIT,...
    /// (upper bounds on record metrics, e.g. p99_ttft_ms=2000,median_tpot_ms=50). Per host and
    /// sweep, the highest concurrency meeting every limit and the table's metric there are shown
    /// first; a level without a limited metric does not meet it. A metric no record has is
    /// refused (exit 2) with the closest one.
    #[arg(long, value_name = "METRIC=LIMIT,...", value_parser = crate::config::slo::Slo::parse)]
    pub slo: Option<crate::config::slo::Slo>,
}

/// What `compare` and `report` read and how they compare it.
#[derive(Args, Debug)]
pub struct ComparisonArgs {
    /// One run directory (hosts side by side) or several (the same hosts across runs).
    #[arg(required = true)]
    pub run_dirs: Vec<PathBuf>,
    /// The metrics of the tables, a table each (comma-separated), e.g. output_throughput,p99_ttft_ms
    /// or telemetry's output_tokens_per_joule, gpu_power_mean_w. Default: a sweep's summary
    /// (output_throughput, median_ttft_ms, p99_ttft_ms, median_tpot_ms, p99_itl_ms: those its
    /// records have), else the step's first numeric metric. A name no record has is refused
    /// (exit 2) with the closest one and the metrics the runs hold.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub metric: Vec<String>,
    /// What the ratio columns divide by: a host (`blackwell`), a column (`blackwell/spec=off`)
    /// or, in a run with server variants, a variant (`spec=off`: each host's other variants
    /// against its own). Default: the first host, or with variants each host's first variant.
    #[arg(long, value_name = "HOST|VARIANT")]
    pub baseline: Option<String>,
    /// Across runs, changes beyond this are marked as regressions or improvements; between
    /// repeated points only when Welch's t-test finds them significant (p < 0.05), else
    /// `within noise`.
    #[arg(long, value_parser = crate::report::parse_tolerance, default_value = "5%")]
    pub tolerance: f64,
    /// Latency limits to judge the run by, overriding the playbook's `slo:`: METRIC=LIMIT,...
    /// (upper bounds on record metrics, e.g. p99_ttft_ms=2000,median_tpot_ms=50). Per host and
    /// sweep, the highest concurrency meeting every limit and the table's metric there are shown
    /// first; a level without a limited metric does not meet it. A metric no record has is
    /// refused (exit 2) with the closest one.
    #[arg(long, value_name = "METRIC=LIMIT,...", value_parser = crate::config::slo::Slo::parse)]
    pub slo: Option<crate::config::slo::Slo>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub runs: ComparisonArgs,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Print only what differs between the hosts compared (one run) or each host across the
    /// runs (several): GPUs, driver, server and launch arguments, model, system, CPU, memory;
    /// the facts that are the same are named once. In every --format.
    #[arg(long)]
    pub facts: bool,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub runs: ComparisonArgs,
    /// The HTML file to write.
    #[arg(long, short = 'o', default_value = "report.html")]
    pub out: PathBuf,
}
