//! Entering and leaving raw mode and the alternate screen.
//!
//! One idempotent [`restore_terminal`] is reached from the guard's `Drop`, from
//! the panic hook, and from every way out of the event loop (Ctrl-C arrives as a
//! key in raw mode; SIGINT/SIGTERM/SIGHUP set a flag the loop checks), so the
//! terminal is never left broken.

use std::io::{self, Stdout};
use std::panic;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::SigId;

use crate::error::{Error, Result};

/// True while the terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Leaves raw mode and the alternate screen and shows the cursor. Safe to call
/// any number of times, from any path; only the first call after entering acts.
pub fn restore_terminal() -> io::Result<()> {
    restore_once(&ACTIVE, || {
        let raw = disable_raw_mode();
        let screen = execute!(io::stdout(), LeaveAlternateScreen, Show);
        raw.and(screen)
    })
}

/// Runs `leave` only if `active` was set, clearing it first so a panic inside
/// `leave` cannot make the hook run it again.
fn restore_once(active: &AtomicBool, leave: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    if !active.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    leave()
}

/// Restores the terminal before a panic message is printed, and keeps that
/// message to one line (a backtrace would be garbled by the TUI anyway).
/// Outside the TUI, panics go to the previous hook unchanged.
fn install_panic_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !ACTIVE.load(Ordering::SeqCst) {
                previous(info);
                return;
            }
            let _ = restore_terminal();
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_string());
            let place = info
                .location()
                .map(|location| format!(" at {}:{}", location.file(), location.line()))
                .unwrap_or_default();
            crate::frontend::output::status(format_args!(
                "internal error{place}: {payload} (terminal restored)"
            ));
        }));
    });
}

/// SIGINT, SIGTERM and SIGHUP set a flag instead of killing the process with
/// the terminal still raw.
struct StopSignals {
    flag: Arc<AtomicBool>,
    ids: Vec<SigId>,
}

impl StopSignals {
    fn register() -> Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut signals = StopSignals {
            flag: Arc::clone(&flag),
            ids: Vec::new(),
        };
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            let id = signal_hook::flag::register(signal, Arc::clone(&flag))
                .map_err(|err| Error::caused(format!("cannot handle signal {signal}"), err))?;
            signals.ids.push(id);
        }
        Ok(signals)
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // The process exits soon after the TUI; a signal in between is ignored.
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Owns the terminal while the TUI runs; dropping it restores the terminal.
pub struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    signals: StopSignals,
}

impl TerminalGuard {
    pub fn enter() -> Result<Self> {
        install_panic_hook();
        let signals = StopSignals::register()?;
        enable_raw_mode().map_err(terminal_error)?;
        ACTIVE.store(true, Ordering::SeqCst);
        let entered = execute!(io::stdout(), EnterAlternateScreen, Hide)
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match entered {
            Ok(terminal) => Ok(TerminalGuard { terminal, signals }),
            Err(err) => {
                let _ = restore_terminal();
                Err(terminal_error(err))
            }
        }
    }

    pub fn terminal(&mut self) -> &mut Terminal<CrosstermBackend<Stdout>> {
        &mut self.terminal
    }

    /// A stop signal arrived since entering.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.signals.flag)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore_terminal();
    }
}

pub fn terminal_error(err: io::Error) -> Error {
    Error::caused("terminal error", err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_acts_once_per_entry() {
        let active = AtomicBool::new(true);
        let mut calls = 0;
        restore_once(&active, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        restore_once(&active, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 1);
        assert!(!active.load(Ordering::SeqCst));
    }

    #[test]
    fn restore_without_entering_does_nothing() {
        let active = AtomicBool::new(false);
        let result = restore_once(&active, || Err(io::Error::other("must not run")));
        assert!(result.is_ok());
    }
}
