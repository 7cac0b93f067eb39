//! What users run: the live TUI, `report`, `run`, `check`, and JSON output.
//! Each is a thin adapter over the capture layer and the engine.

pub mod check;
pub mod live;
pub mod output;
pub mod report;
pub mod run;
pub mod run_recorder;
pub mod scope;
pub mod session;
#[cfg(test)]
pub mod test_reports;
pub mod text;
pub mod tui;
pub mod units;

use std::process::ExitCode;

use crate::capture::Capture;
use crate::cli::{self, Cli, Command};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// Runs the parsed command line; `Ok` carries the exit code.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Some(Command::Report(args)) => report::run(&cli.scope, &args),
        Some(Command::Run(args)) => run::run(&cli.scope, &args),
        Some(Command::Check(args)) => check::run(&args),
        Some(Command::Generate { what }) => {
            cli::generate(what, &mut std::io::stdout().lock())
                .map_err(|err| Error::failure(format!("cannot write to stdout: {err}")))?;
            Ok(ExitCode::SUCCESS)
        }
        None => live(&cli.scope),
    }
}

/// `iosplit-trace` alone: the live TUI, then the session's one-shot report.
fn live(scope_args: &cli::Scope) -> Result<ExitCode> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(Error::usage(
            "stdout is not a terminal: use `iosplit-trace report` for a one-shot report",
        ));
    }
    let devices = scope::resolve_scope(scope_args)?;
    let config = scope::capture_config(&devices);
    let engine = Engine::new(session::read_geometry(&devices)?, Default::default());
    let capture = Capture::start(&config, engine)?;
    let mut live = session::LiveSession::new(capture, &devices);
    let report = tui::run_tui(&mut live)?;
    drop(live);
    output::emit(&report, false, None)?;
    Ok(ExitCode::SUCCESS)
}
