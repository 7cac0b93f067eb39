//! Status lines for people, on stderr, from any layer.
//!
//! It sits below capture and the frontends so each can say something
//! without importing the other, and never fails: if stderr is gone (closed,
//! or a pipe nobody reads), the command's real output still matters.

use std::fmt;
use std::io::{self, Write};

/// One line, prefixed with the tool's name.
pub fn status(line: fmt::Arguments) {
    let _ = writeln!(io::stderr().lock(), "iosplit-trace: {line}");
}
