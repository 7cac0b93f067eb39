//! What users run, one module per command: `report`, `run`, `check`,
//! `record`, `analyze`, and the
//! live TUI (`tui`, fed through `live::LiveSource` by `session`). They share
//! `selection` (the `-d` devices), `session` (geometry, runtime, report
//! assembly), `text` (the human report) and `output` (the one writer every
//! format goes through). Each is a thin adapter over capture and the engine.

pub mod analyze;
pub mod check;
pub mod compare;
pub mod html;
pub mod live;
pub mod output;
pub mod perfetto;
pub mod prometheus;
pub mod record;
pub mod report;
pub mod run;
mod run_attach;
mod run_pins;
pub mod selection;
pub mod serve;
pub mod session;
#[cfg(test)]
pub mod test_reports;
pub mod text;
pub mod tui;
pub mod units;
pub mod words;

use std::process::ExitCode;

use crate::capture::Capture;
use crate::cli::{self, Cli, Command};
use crate::engine::Engine;
use crate::error::{Error, Result};

use self::output::{Format, Output};

/// Runs the parsed command line; `Ok` carries the exit code.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Some(Command::Report(args)) => report::run(&cli.selection, &args),
        Some(Command::Run(args)) => run::run(&cli.selection, &args),
        Some(Command::Check(args)) => check::run(&args),
        Some(Command::Record(args)) => record::run(&cli.selection, &args),
        Some(Command::Analyze(args)) => analyze::run(&args),
        Some(Command::Compare(args)) => compare::run(&args),
        Some(Command::Serve(args)) => serve::run(&cli.selection, &args),
        Some(Command::Generate { what }) => {
            let mut page = Vec::new();
            // Writing into memory fails only if clap cannot render the page.
            cli::generate(what, &mut page).map_err(|err| {
                Error::caused(format!("cannot generate the {what:?} output"), err)
            })?;
            Output::stdout().write_all(&page)?;
            Ok(ExitCode::SUCCESS)
        }
        None => live(&cli.selection, &cli.filter, cli.read),
    }
}

/// `iosplit-trace` alone: the live TUI, then the session's one-shot report.
fn live(
    selection: &cli::DeviceSelection,
    filter: &cli::OwnerFilter,
    read: cli::ReadOwners,
) -> Result<ExitCode> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(Error::NotATerminal);
    }
    let devices = selection::resolve_selection(selection)?;
    let mut config =
        selection::capture_config(&devices, read.reads_owners(filter.filters_owners()));
    config.owners = selection::owner_filter(filter)?;
    let disks = session::read_geometry(&devices)?;
    let engine = Engine::new(disks.clone(), Default::default());
    let capture = Capture::start(&config, engine)?;
    let mut live = session::LiveSession::new(capture, &devices, &disks);
    let report = tui::run_tui(&mut live)?;
    drop(live);
    Output::stdout().print(&report, Format::Text)?;
    Ok(ExitCode::SUCCESS)
}
