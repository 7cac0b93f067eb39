use std::process::ExitCode;

use clap::Parser;
use iosplit_trace::{cli::Cli, frontend};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match frontend::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("iosplit-trace: {err}");
            ExitCode::from(err.exit_code)
        }
    }
}
