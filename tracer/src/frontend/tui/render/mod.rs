//! Drawing the TUI from an [`App`]. No I/O and no locks here: every function
//! takes the state it draws and a frame area.

mod detail;
mod status;
mod table;

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::app::App;
use crate::model::Severity;

/// Smallest terminal the table fits in; below it only a hint is drawn.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;

/// Shown in the title bar and in the too-small hint, so `tmux capture-pane` can grep it.
pub const TITLE: &str = "iosplit-trace";

pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(frame, area);
        return;
    }
    let [main, status_area] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    if app.detail {
        // The table keeps its rows (header and borders: 3 more) up to half the
        // height; the detail pane gets the rest.
        let table_height = (app.rows.len().max(1) as u16 + 3).min(main.height / 2);
        let [table_area, detail_area] =
            Layout::vertical([Constraint::Length(table_height), Constraint::Min(0)]).areas(main);
        table::draw(frame, table_area, app);
        detail::draw(frame, detail_area, app);
    } else {
        table::draw(frame, main, app);
    }
    status::draw(frame, status_area, app);
}

fn too_small(frame: &mut Frame, area: Rect) {
    let hint = format!(
        "{TITLE}: terminal too small ({}x{}); need at least {MIN_WIDTH}x{MIN_HEIGHT}. q quits.",
        area.width, area.height
    );
    frame.render_widget(
        Paragraph::new(hint)
            .alignment(Alignment::Center)
            .wrap(Wrap { trim: true }),
        area,
    );
}

/// Style of a row or heading carrying a diagnosis of this severity.
fn severity_style(severity: Severity) -> Style {
    let color = match severity {
        Severity::Critical => Color::Red,
        Severity::Warning => Color::Yellow,
        Severity::Info => Color::Cyan,
    };
    Style::default().fg(color).add_modifier(Modifier::BOLD)
}

/// Marker before a diagnosed device, visible without colour.
fn severity_marker(severity: Option<Severity>) -> char {
    match severity {
        Some(Severity::Critical) | Some(Severity::Warning) => '!',
        Some(Severity::Info) => 'i',
        None => ' ',
    }
}

#[cfg(test)]
pub(super) mod testing {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::super::app::App;

    /// Draws `app` into a `width`×`height` test terminal; returns its rows as text.
    pub fn screen(app: &App, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| super::draw(frame, app)).unwrap();
        rows(terminal.backend())
    }

    pub fn rows(backend: &TestBackend) -> Vec<String> {
        let buffer = backend.buffer();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::testing::screen;
    use super::*;
    use crate::frontend::test_reports::{empty_report, seed_report};
    use crate::frontend::tui::app::Key;

    fn seeded() -> App {
        let mut app = App::new();
        app.on_snapshot(seed_report(), Duration::from_secs(4));
        app
    }

    fn row_with<'a>(screen: &'a [String], needle: &str) -> &'a str {
        screen
            .iter()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", screen.join("\n")))
    }

    #[test]
    fn wide_screen_shows_title_headers_marker_and_status() {
        let screen = screen(&seeded(), 120, 40);
        assert!(screen[0].contains("iosplit-trace"));
        let header = row_with(&screen, "amp");
        for column in [
            "device", "IO/s", "cmd/s", "split%", "merge%", "misal%", "avg IO", "avg cmd", "p99",
        ] {
            assert!(header.contains(column), "{column} missing in {header:?}");
        }
        let diagnosed = row_with(&screen, "loop0p2");
        assert!(diagnosed.contains("! "), "{diagnosed:?}");
        // 16,385 user I/Os over 4 s of uptime.
        assert!(diagnosed.contains("4.1k"), "{diagnosed:?}");
        assert!(diagnosed.contains("512B"), "{diagnosed:?}");
        assert!(diagnosed.contains("100.0%"), "{diagnosed:?}");
        assert!(!row_with(&screen, "loop0p1").contains('!'));
        let status = screen.last().unwrap();
        assert!(
            status.contains("events/s") && status.contains("drops 42"),
            "{status:?}"
        );
        assert!(status.contains("q quit"));
    }

    #[test]
    fn narrow_screen_keeps_every_column() {
        let screen = screen(&seeded(), 80, 24);
        let header = row_with(&screen, "amp");
        for column in [
            "device", "IO/s", "cmd/s", "split%", "merge%", "misal%", "avg IO", "avg cmd", "p99",
        ] {
            assert!(header.contains(column), "{column} missing in {header:?}");
        }
        let split = row_with(&screen, "loop1");
        // 800 commands per 100 user I/Os.
        assert!(split.contains("8.00"), "{split:?}");
        assert!(split.contains("700.0%"), "{split:?}");
        assert!(screen.last().unwrap().contains("drops 42"));
    }

    #[test]
    fn too_small_screen_shows_a_hint() {
        let screen = screen(&seeded(), 40, 10).join(" ");
        assert!(screen.contains("too small"), "{screen}");
        // Tiny sizes down to nothing must not panic either.
        for (width, height) in [(1, 1), (0, 0), (59, 30), (100, 11)] {
            let _ = super::testing::screen(&seeded(), width, height);
        }
    }

    #[test]
    fn empty_data_renders() {
        let mut app = App::new();
        app.on_snapshot(empty_report(), Duration::from_secs(1));
        for (width, height) in [(120, 40), (80, 24)] {
            let screen = screen(&app, width, height);
            assert!(screen.join("\n").contains("no I/O seen yet"));
            assert!(screen.last().unwrap().contains("drops 0"));
        }
        // Before the first snapshot too.
        let screen = screen(&App::new(), 80, 24);
        assert!(screen.join("\n").contains("no I/O seen yet"));
    }

    #[test]
    fn detail_pane_shows_histograms_causes_and_diagnoses() {
        let mut app = seeded();
        app.selected = app.rows.iter().position(|r| r.name == "loop0p2").unwrap();
        app.on_key(Key::Enter);
        for (width, height) in [(120, 40), (80, 24)] {
            let screen = screen(&app, width, height);
            let text = screen.join("\n");
            assert!(text.contains("detail: loop0p2"), "{text}");
            assert!(text.contains("user I/Os") && text.contains("commands"));
            assert!(row_with(&screen, "│512B").contains("16,385 █"));
            assert!(text.contains("CRITICAL subpage_block_size"));
            assert!(text.contains("fix:"));
        }
        app.selected = app.rows.iter().position(|r| r.name == "loop1").unwrap();
        let text = screen(&app, 120, 40).join("\n");
        assert!(text.contains("max_sectors 700"), "{text}");
    }

    /// The detail pane's text: the rows under the table's bottom border,
    /// inside the pane's side borders, joined with single spaces.
    fn pane_text(screen: &[String]) -> String {
        let top = screen
            .iter()
            .position(|line| line.contains(" detail: "))
            .unwrap_or_else(|| panic!("no detail pane in\n{}", screen.join("\n")));
        screen[top + 1..]
            .iter()
            .filter_map(|line| {
                let inner = line.strip_prefix('│')?.strip_suffix('│')?;
                Some(inner.split_whitespace().collect::<Vec<_>>().join(" "))
            })
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn owner_app() -> App {
        use crate::model::{Attribution, OwnerEntry, OwnerKnown, OwnerMeasures};
        let measures = OwnerMeasures {
            user_ios: 1600,
            commands: 1600,
            bytes: 1600 * 65230,
            amplification: 1.0,
            ..OwnerMeasures::default()
        };
        let mut dd = OwnerEntry::new(OwnerKnown::Known, "vda".into(), measures);
        dd.pid = Some(4242);
        dd.comm = Some("dd".into());
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd],
            ..Attribution::default()
        });
        let mut app = App::new();
        app.on_snapshot(report, Duration::from_secs(4));
        app.on_key(Key::Char('v'));
        app.on_key(Key::Enter);
        app
    }

    #[test]
    fn owner_detail_lines_wrap_and_none_is_cut() {
        let app = owner_app();
        let lines = app.detail().unwrap().times;
        for (width, height) in [(80, 24), (60, 16)] {
            let screen = screen(&app, width, height);
            let pane = pane_text(&screen);
            for line in &lines {
                let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
                assert!(
                    pane.contains(&line),
                    "{line:?} cut or missing at {width}x{height}:\n{}",
                    screen.join("\n")
                );
            }
            assert!(pane.contains("sizes, diagnoses: per device (v)"), "{pane}");
        }
    }

    /// vda alone: its requeues and its finding's two predictions.
    fn requeued_app() -> App {
        let mut report = crate::frontend::test_reports::requeued_report();
        report.devices.retain(|device| device.name == "vda");
        report
            .diagnoses
            .retain(|diagnosis| diagnosis.device == "vda");
        let mut app = App::new();
        app.on_snapshot(report, Duration::from_secs(4));
        app.on_key(Key::Enter);
        app
    }

    #[test]
    fn detail_pane_says_requeues_and_predictions_in_words_at_80x24_and_narrower() {
        let app = requeued_app();
        for (width, height) in [(80, 24), (60, 30)] {
            let screen = screen(&app, width, height);
            let pane = pane_text(&screen);
            let all = screen.join("\n");
            assert!(
                pane.contains(
                    "writes: 66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms before re-issue"
                ),
                "{width}x{height}:\n{all}"
            );
            assert!(
                pane.contains(
                    "what if: the fix would take these writes from 593 device issues to ~527"
                ),
                "{width}x{height}:\n{all}"
            );
            assert!(
                pane.contains(
                    "what if: the workaround would take these writes from 593 device issues to ~357"
                ),
                "{width}x{height}:\n{all}"
            );
            assert!(!all.contains("{\"") && !all.contains("what_if"), "{all}");
        }
    }

    #[test]
    fn no_json_in_any_detail_pane() {
        let mut app = App::new();
        app.on_snapshot(
            crate::frontend::test_reports::requeued_report(),
            Duration::from_secs(4),
        );
        app.on_key(Key::Enter);
        for selected in 0..app.rows.len() {
            app.selected = selected;
            let all = screen(&app, 200, 60).join("\n");
            assert!(!all.contains("{\"") && !all.contains("\":"), "{all}");
        }
    }

    #[test]
    fn paused_and_drops_are_highlighted_in_text() {
        let mut app = seeded();
        app.on_key(Key::Char('p'));
        let screen = screen(&app, 80, 24);
        let status = screen.last().unwrap();
        assert!(status.contains("PAUSED"), "{status:?}");
    }

    /// Style of the first cell of `needle` on the screen.
    fn style_at(app: &App, needle: &str) -> Style {
        use ratatui::backend::TestBackend;
        use ratatui::Terminal;
        let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
        terminal.draw(|frame| draw(frame, app)).unwrap();
        let screen = testing::rows(terminal.backend());
        let (y, line) = screen
            .iter()
            .enumerate()
            .find(|(_, line)| line.contains(needle))
            .unwrap();
        let column = line[..line.find(needle).unwrap()].chars().count();
        terminal.backend().buffer()[(column as u16, y as u16)].style()
    }

    #[test]
    fn drops_and_diagnosed_rows_are_styled() {
        let app = seeded();
        assert_eq!(style_at(&app, "drops 42").bg, Some(Color::Red));
        assert_eq!(style_at(&app, "!   loop0p2").fg, Some(Color::Red));
        assert_eq!(style_at(&app, "! loop1").fg, Some(Color::Yellow));
        let mut quiet = App::new();
        quiet.on_snapshot(empty_report(), Duration::from_secs(1));
        assert_ne!(style_at(&quiet, "drops 0").bg, Some(Color::Red));
    }

    #[test]
    fn wide_frame_snapshot() {
        let mut app = seeded();
        app.selected = 2;
        app.on_key(Key::Enter);
        insta::assert_snapshot!(screen(&app, 120, 40).join("\n"));
    }

    #[test]
    fn narrow_detail_snapshot() {
        let mut app = seeded();
        app.selected = 2;
        app.on_key(Key::Tab);
        insta::assert_snapshot!(screen(&app, 80, 24).join("\n"));
    }

    #[test]
    fn narrow_frame_snapshot() {
        insta::assert_snapshot!(screen(&seeded(), 80, 24).join("\n"));
    }
}
