use std::process::ExitCode;

use clap::Parser;
use rigrun::cli::{Cli, Command};
use rigrun::commands;
use rigrun::exit::Exit;
use rigrun::transport::job_runner;

fn main() -> ExitCode {
    // A detached job's runner on a host (see transport::job_runner): before any thread starts,
    // since it forks.
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == job_runner::SUBCOMMAND) {
        return ExitCode::from(job_runner::main(&args[2..]) as u8);
    }
    job_runner::mark_this_binary();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RIGRUN_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: stderr is often a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Failed.into();
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => commands::run(&args).await,
            Command::Check(args) => commands::check(&args).await,
            Command::Plan(args) => commands::plan(&args),
            Command::Show(args) => commands::show(&args),
            Command::Runs(args) => commands::runs(&args),
            Command::Compare(args) => commands::compare(&args),
            Command::Report(args) => commands::report(&args),
            Command::Bench(args) => rigrun::bench::run(args).await,
            Command::Sim(args) => rigrun::sim::run(args).await,
            Command::Completions { shell } => commands::completions(shell),
            Command::Man => commands::man(),
        }
    });
    result
        .unwrap_or_else(|err| {
            // Output piped into `head` and closed early is no error of ours.
            if is_broken_pipe(&err) {
                return Exit::Ok;
            }
            eprintln!("{}", render_error(&err));
            commands::exit_for(&err)
        })
        .into()
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    let io = err.chain().find_map(|e| e.downcast_ref::<std::io::Error>());
    io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn render_error(err: &anyhow::Error) -> String {
    if err.downcast_ref::<rigrun::config::ConfigErrors>().is_some() {
        format!("{err}").trim_end().to_string()
    } else {
        format!("error: {err:#}")
    }
}
