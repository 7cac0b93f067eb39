use std::process::ExitCode;

use iosplit_trace::frontend::output;
use iosplit_trace::{cli, frontend};

fn main() -> ExitCode {
    install_logger();
    let cli = cli::parse();
    match frontend::dispatch(cli) {
        Ok(code) => code,
        // The reader has what it wanted (`| head`): not a failure, like ripgrep.
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(err) => {
            output::status(format_args!("{}", err.chain_text()));
            ExitCode::from(err.exit_code())
        }
    }
}

/// Log records (aya's loader, the probes' aya-log messages) go to stderr only
/// when RUST_LOG asks for them, so the live view's screen stays clean.
/// Installed before the probes load: their logger forwards to this one.
fn install_logger() {
    if std::env::var_os("RUST_LOG").is_some() {
        env_logger::Builder::from_env("RUST_LOG")
            .format_timestamp(None)
            .init();
    }
}
