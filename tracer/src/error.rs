//! User-facing errors: one line on stderr and an exit code, never a backtrace.

use std::fmt;

/// Exit code for bad usage (clap uses the same).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for everything else that stops a run.
pub const EXIT_FAILURE: u8 = 1;

#[derive(Debug)]
pub struct Error {
    pub message: String,
    pub exit_code: u8,
}

impl Error {
    /// Something outside the user's input went wrong; say what to do.
    pub fn failure(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            exit_code: EXIT_FAILURE,
        }
    }

    /// The user's input was wrong; say what would be right.
    pub fn usage(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            exit_code: EXIT_USAGE,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
