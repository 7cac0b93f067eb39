//! What users run: the live TUI, `report`, `run`, `check`, and JSON output.
//! Each is a thin adapter over the capture layer and the engine.

pub mod live;
pub mod report;
pub mod scope;
#[cfg(test)]
mod test_reports;
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
        Some(Command::Run(_)) | Some(Command::Check(_)) | None => {
            Err(crate::error::Error::failure(
                "this subcommand is not built yet; use `iosplit-trace report`",
            ))
        }
    }
}
