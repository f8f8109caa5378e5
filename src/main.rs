use std::process::ExitCode;

use clap::Parser;
use rigrun::cli::{Cli, Command};
use rigrun::commands;
use rigrun::exit::Exit;

fn main() -> ExitCode {
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
        }
    });
    result
        .unwrap_or_else(|err| {
            eprintln!("{}", render_error(&err));
            commands::exit_for(&err)
        })
        .into()
}

fn render_error(err: &anyhow::Error) -> String {
    if err.downcast_ref::<rigrun::config::ConfigErrors>().is_some() {
        format!("{err}").trim_end().to_string()
    } else {
        format!("error: {err:#}")
    }
}
