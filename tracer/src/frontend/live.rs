//! What the live TUI reads from: the capture and engine behind a small trait,
//! so the TUI can be driven by a fake that replays scripted reports.

use std::time::Duration;

use crate::error::Result;
use crate::model::Report;

/// A running trace the TUI can look at.
pub trait LiveSource {
    /// Everything measured since the start (or the last [`reset`](Self::reset)).
    fn snapshot(&mut self) -> Result<Report>;
    /// Starts counting from zero; tracing goes on.
    fn reset(&mut self) -> Result<()>;
    /// Time since tracing started; rates are computed from its deltas.
    fn uptime(&self) -> Duration;
}
