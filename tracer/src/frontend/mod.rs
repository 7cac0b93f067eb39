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

use crate::cli::{Cli, Command};
use crate::error::Result;

/// Runs the parsed command line; `Ok` carries the exit code.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Some(Command::Report(args)) => report::run(&cli.scope, &args),
        Some(Command::Run(args)) => run::run(&cli.scope, &args),
        Some(Command::Check(args)) => check::run(&args),
        None => Err(crate::error::Error::failure(
            "the live view is not wired yet; use `iosplit-trace report`",
        )),
    }
}
