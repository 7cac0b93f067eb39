//! What a command returns when it stops early. Lower layers have their own
//! error types ([`GeometryError`], [`OutputError`], the capture parsers'), so
//! callers can match; they all convert into [`Error`], which `main` prints on
//! one line, the error and its causes joined by ": ", then exits with
//! [`Error::exit_code`]. Never a backtrace.

use std::io;
use std::path::PathBuf;

pub use crate::geometry::error::GeometryError;

/// Exit code for bad usage (clap uses the same).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for everything else that stops a run.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code when the program to run does not exist (as in a shell).
pub const EXIT_NOT_FOUND: u8 = 127;

/// Any error type of any layer or crate, kept as the cause.
pub type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's input was wrong; the text says what would be right.
    #[error("{0}")]
    Usage(String),
    /// Something outside the user's input went wrong; the text says what to do.
    #[error("{0}")]
    Failure(String),
    /// `run --` with nothing after it.
    #[error("missing command after `--`: e.g. `iosplit-trace run -- mkfs.ext4 /dev/sdc2`")]
    MissingCommand,
    /// `run -- PROGRAM` where PROGRAM is neither a path nor on PATH.
    #[error("command not found: `{0}` (not an executable file, nor on PATH)")]
    CommandNotFound(String),
    /// The live view was started without a terminal to draw on.
    #[error(
        "the live view needs a terminal; use `iosplit-trace report` to print a report instead"
    )]
    NotATerminal,
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `context` failed because of `source` (any error type: this is how
    /// other layers' and crates' errors join the chain).
    #[error("{context}")]
    Caused {
        context: String,
        #[source]
        source: BoxedError,
    },
}

impl Error {
    /// Something outside the user's input went wrong; say what to do.
    pub fn failure(message: impl Into<String>) -> Self {
        Error::Failure(message.into())
    }

    /// The user's input was wrong; say what would be right.
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage(message.into())
    }

    /// `context` (what was being done) failed because of `source`.
    pub fn caused(context: impl Into<String>, source: impl Into<BoxedError>) -> Self {
        Error::Caused {
            context: context.into(),
            source: source.into(),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::MissingCommand | Error::NotATerminal => EXIT_USAGE,
            Error::CommandNotFound(_) => EXIT_NOT_FOUND,
            Error::Geometry(err) if err.is_usage() => EXIT_USAGE,
            Error::Failure(_) | Error::Geometry(_) | Error::Output(_) | Error::Caused { .. } => {
                EXIT_FAILURE
            }
        }
    }

    /// The reader of our output went away (`| head`): as with ripgrep, that
    /// ends the program quietly and successfully.
    pub fn is_broken_pipe(&self) -> bool {
        self.causes().any(|cause| {
            cause
                .downcast_ref::<io::Error>()
                .is_some_and(|err| err.kind() == io::ErrorKind::BrokenPipe)
        })
    }

    /// This error, then each cause in turn.
    pub fn causes(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        std::iter::successors(Some(self as &(dyn std::error::Error + 'static)), |err| {
            err.source()
        })
    }

    /// The one line users see: the error and its causes joined by ": ".
    pub fn chain_text(&self) -> String {
        one_line(self)
    }
}

/// Any error and its causes on one line, joined by ": " (as ripgrep does).
pub fn one_line(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        line.push_str(": ");
        line.push_str(&next.to_string());
        cause = next.source();
    }
    line
}

/// Adds what was being done to any error, keeping the error as the cause.
pub trait Context<T> {
    fn context(self, what: impl Into<String>) -> Result<T>;
    fn with_context<W: Into<String>>(self, what: impl FnOnce() -> W) -> Result<T>;
}

impl<T, E: Into<BoxedError>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|err| Error::caused(what, err))
    }

    fn with_context<W: Into<String>>(self, what: impl FnOnce() -> W) -> Result<T> {
        self.map_err(|err| Error::caused(what(), err))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Printing a command's output failed (frontend/output.rs).
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot create {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `target` is "stdout" or the file's path.
    #[error("cannot write to {target}")]
    Write {
        target: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot encode the report as JSON")]
    Encode(#[source] serde_json::Error),
}

impl OutputError {
    /// The reader closed the pipe (`| head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, OutputError::Write { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("bad magic")]
    struct ParseFailure(#[source] io::Error);

    #[test]
    fn the_chain_is_one_line_joined_by_colons() {
        let inner = ParseFailure(io::Error::other("short read"));
        let err: Result<()> = Err(inner).context("cannot read the kernel's BTF");
        let err = err.unwrap_err();
        assert_eq!(
            err.chain_text(),
            "cannot read the kernel's BTF: bad magic: short read"
        );
        assert_eq!(err.exit_code(), EXIT_FAILURE);
        assert!(!err.is_broken_pipe());
        // Callers can still reach the typed cause.
        let cause = err.causes().nth(1).unwrap();
        assert!(cause.downcast_ref::<ParseFailure>().is_some());
    }

    #[test]
    fn a_broken_pipe_anywhere_in_the_chain_is_recognised() {
        let err = Error::caused(
            "cannot write the report",
            io::Error::from(io::ErrorKind::BrokenPipe),
        );
        assert!(err.is_broken_pipe());
        let err = Error::caused("cannot write the report", io::Error::other("disk on fire"));
        assert!(!err.is_broken_pipe());
    }

    #[test]
    fn exit_codes_follow_the_kind() {
        assert_eq!(Error::usage("no").exit_code(), EXIT_USAGE);
        assert_eq!(Error::MissingCommand.exit_code(), EXIT_USAGE);
        assert_eq!(Error::NotATerminal.exit_code(), EXIT_USAGE);
        assert_eq!(Error::CommandNotFound("x".into()).exit_code(), 127);
        assert_eq!(Error::failure("no").exit_code(), EXIT_FAILURE);
        let unknown = GeometryError::UnknownDevice { name: "sdz".into() };
        assert_eq!(Error::from(unknown).exit_code(), EXIT_USAGE);
    }
}
