//! The live view: a device table refreshed every second, a detail pane and a
//! status line, drawn with ratatui over crossterm.
//!
//! - [`app`]: pure state and key handling.
//! - [`render`]: drawing, no I/O.
//! - [`terminal`]: raw mode, alternate screen, and the one restore path.
//!
//! The loop redraws only when something changed: a new snapshot (each tick), a
//! key or a resize. Between those it blocks in `poll`.

pub mod app;
pub mod render;
pub mod terminal;

use std::io::{self, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::Terminal;

use self::app::{Action, App, Key};
use self::terminal::{terminal_error, TerminalGuard};
use super::live::LiveSource;
use crate::error::{Error, Result};
use crate::model::Report;

pub use self::terminal::restore_terminal;

/// How often a new snapshot is taken and the table redrawn.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Longest wait before the stop-signal flag is looked at again.
const SIGNAL_CHECK: Duration = Duration::from_millis(250);

/// Runs the live view until the user quits; returns the final report so the
/// caller can print it after the terminal is restored.
pub fn run_tui(source: &mut dyn LiveSource) -> Result<Report> {
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err(Error::NotATerminal);
    }
    let outcome = {
        let mut guard = TerminalGuard::enter()?;
        let mut inputs = TerminalInputs::new(guard.stop_flag());
        event_loop(guard.terminal(), source, &mut inputs)
        // The guard drops here: the terminal is restored, also after an error.
    };
    outcome?;
    source.snapshot()
}

/// What the event loop reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Key(Key),
    Resize,
    /// Time for a new snapshot.
    Tick,
    /// A stop signal arrived.
    Stop,
}

/// Where inputs come from: the terminal, or a script in tests.
pub trait Inputs {
    /// Blocks until the next input.
    fn next(&mut self) -> io::Result<Input>;
}

/// Keys and resizes from crossterm, ticks every [`REFRESH`].
struct TerminalInputs {
    next_tick: Instant,
    stop: Arc<AtomicBool>,
}

impl TerminalInputs {
    fn new(stop: Arc<AtomicBool>) -> Self {
        TerminalInputs {
            next_tick: Instant::now() + REFRESH,
            stop,
        }
    }
}

impl Inputs for TerminalInputs {
    fn next(&mut self) -> io::Result<Input> {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Ok(Input::Stop);
            }
            let now = Instant::now();
            if now >= self.next_tick {
                self.next_tick = now + REFRESH;
                return Ok(Input::Tick);
            }
            let wait = (self.next_tick - now).min(SIGNAL_CHECK);
            if terminal_hung_up(wait) {
                return Ok(Input::Stop);
            }
            // Keys crossterm already read are buffered on its side: ask it too.
            if !event::poll(Duration::ZERO)? {
                continue;
            }
            match event::read()? {
                Event::Key(key) if key.kind != KeyEventKind::Release => {
                    return Ok(Input::Key(decode(key)))
                }
                Event::Resize(..) => return Ok(Input::Resize),
                _ => {}
            }
        }
    }
}

/// Waits up to `wait` for input on the terminal (stdin); true when it hung
/// up. A closed terminal (tmux session killed, ssh gone) reads EOF forever and
/// crossterm spins on it; no SIGHUP comes when the tracer is not the session
/// leader, so without this the tracer kept its probes attached for good.
fn terminal_hung_up(wait: Duration) -> bool {
    let mut stdin = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let ready = unsafe { libc::poll(&mut stdin, 1, millis) };
    ready > 0 && stdin.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Terminal key event → the keys the app knows.
pub fn decode(key: KeyEvent) -> Key {
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Key::CtrlC,
        KeyCode::Char(ch) => Key::Char(ch),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Enter => Key::Enter,
        KeyCode::Tab => Key::Tab,
        KeyCode::Esc => Key::Esc,
        _ => Key::Other,
    }
}

/// Draws, waits for an input, acts on it; until quit or a stop signal.
pub fn event_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    source: &mut dyn LiveSource,
    inputs: &mut dyn Inputs,
) -> Result<()> {
    let mut app = App::new();
    app.on_snapshot(source.snapshot()?, source.uptime());
    let mut dirty = true;
    loop {
        if dirty {
            terminal
                .draw(|frame| render::draw(frame, &app))
                .map_err(terminal_error)?;
            dirty = false;
        }
        match inputs.next().map_err(terminal_error)? {
            Input::Stop => return Ok(()),
            Input::Resize => dirty = true,
            Input::Tick => {
                // Paused: the view stays frozen; the engine keeps counting.
                if !app.paused {
                    dirty = app.on_snapshot(source.snapshot()?, source.uptime());
                }
            }
            Input::Key(key) => match app.on_key(key) {
                Action::Quit => return Ok(()),
                Action::Reset => {
                    source.reset()?;
                    app.on_reset(source.uptime());
                    dirty = true;
                }
                Action::None => {}
                Action::TogglePause
                | Action::SelectUp
                | Action::SelectDown
                | Action::ToggleDetail
                | Action::NextView => dirty = true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use ratatui::backend::TestBackend;

    use super::render::testing::rows;
    use super::*;
    use crate::frontend::test_reports::{empty_report, seed_report};

    /// Replays scripted reports, one per snapshot, one second apart.
    struct ScriptedSource {
        reports: VecDeque<Report>,
        snapshots: usize,
        resets: usize,
        uptime: Duration,
    }

    impl ScriptedSource {
        fn new(reports: Vec<Report>) -> Self {
            ScriptedSource {
                reports: reports.into(),
                snapshots: 0,
                resets: 0,
                uptime: Duration::ZERO,
            }
        }
    }

    impl LiveSource for ScriptedSource {
        fn snapshot(&mut self) -> Result<Report> {
            self.snapshots += 1;
            self.uptime += Duration::from_secs(1);
            self.reports
                .pop_front()
                .ok_or_else(|| Error::failure("script ran out of reports"))
        }

        fn reset(&mut self) -> Result<()> {
            self.resets += 1;
            Ok(())
        }

        fn uptime(&self) -> Duration {
            self.uptime
        }
    }

    /// Inputs from a script; counts how often the loop asked.
    struct ScriptedInputs {
        inputs: VecDeque<Input>,
    }

    impl Inputs for ScriptedInputs {
        fn next(&mut self) -> io::Result<Input> {
            Ok(self.inputs.pop_front().unwrap_or(Input::Stop))
        }
    }

    fn run(reports: Vec<Report>, inputs: Vec<Input>) -> (ScriptedSource, Vec<String>, usize) {
        let mut source = ScriptedSource::new(reports);
        let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
        let mut scripted = ScriptedInputs {
            inputs: inputs.into(),
        };
        let result = event_loop(&mut terminal, &mut source, &mut scripted);
        assert!(result.is_ok(), "{:?}", result.err());
        let left = scripted.inputs.len();
        (source, rows(terminal.backend()), left)
    }

    #[test]
    fn ticks_take_snapshots_and_quit_stops() {
        let (source, screen, left) = run(
            vec![empty_report(), seed_report(), seed_report()],
            vec![
                Input::Tick,
                Input::Tick,
                Input::Key(Key::Char('q')),
                Input::Tick,
            ],
        );
        assert_eq!(source.snapshots, 3);
        // q stopped the loop before the last tick.
        assert_eq!(left, 1);
        assert!(screen.join("\n").contains("loop0p2"));
    }

    #[test]
    fn reset_calls_the_source_and_clears_the_view() {
        let (source, screen, _) = run(
            vec![seed_report()],
            vec![Input::Key(Key::Char('r')), Input::Key(Key::Char('q'))],
        );
        assert_eq!(source.resets, 1);
        assert!(screen.join("\n").contains("no I/O seen yet"));
    }

    #[test]
    fn pause_stops_snapshots_until_resumed() {
        let (source, screen, _) = run(
            vec![seed_report(), seed_report()],
            vec![
                Input::Key(Key::Char('p')),
                Input::Tick,
                Input::Tick,
                Input::Resize,
                Input::Key(Key::Char('q')),
            ],
        );
        assert_eq!(source.snapshots, 1);
        assert!(screen.last().unwrap().contains("PAUSED"));
    }

    #[test]
    fn ctrl_c_and_stop_signal_quit() {
        let (_, _, left) = run(
            vec![seed_report()],
            vec![Input::Key(Key::CtrlC), Input::Tick],
        );
        assert_eq!(left, 1);
        let (_, _, left) = run(vec![seed_report()], vec![Input::Stop, Input::Tick]);
        assert_eq!(left, 1);
    }

    #[test]
    fn snapshot_errors_end_the_loop_with_the_error() {
        let mut source = ScriptedSource::new(vec![seed_report()]);
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let mut inputs = ScriptedInputs {
            inputs: vec![Input::Tick].into(),
        };
        let err = event_loop(&mut terminal, &mut source, &mut inputs).unwrap_err();
        assert!(err.to_string().contains("ran out"), "{err}");
    }

    #[test]
    fn detail_toggles_with_enter_and_tab() {
        let (_, screen, _) = run(
            vec![seed_report()],
            vec![
                Input::Key(Key::Down),
                Input::Key(Key::Down),
                Input::Key(Key::Enter),
            ],
        );
        assert!(screen.join("\n").contains("detail: loop0p2"));
        let (_, screen, _) = run(
            vec![seed_report()],
            vec![Input::Key(Key::Tab), Input::Key(Key::Tab)],
        );
        assert!(!screen.join("\n").contains("detail:"));
    }

    #[test]
    fn decode_maps_terminal_keys() {
        let plain = |code| KeyEvent::new(code, KeyModifiers::NONE);
        assert_eq!(
            decode(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Key::CtrlC
        );
        assert_eq!(decode(plain(KeyCode::Char('c'))), Key::Char('c'));
        assert_eq!(decode(plain(KeyCode::Up)), Key::Up);
        assert_eq!(decode(plain(KeyCode::Enter)), Key::Enter);
        assert_eq!(decode(plain(KeyCode::F(1))), Key::Other);
    }
}
