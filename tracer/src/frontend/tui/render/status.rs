//! The status line: event rate, drops, uptime, pause state and key help.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthStr;

use crate::frontend::tui::app::App;
use crate::frontend::units;

const KEY_HELP: &str = "↑↓/jk select · Enter detail · v view · p pause · r reset · q quit";
/// For narrow terminals; `q` to quit must always be visible.
const KEY_HELP_SHORT: &str = "keys: jk Enter v p r q";

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let drops = app.drops();
    let drops_style = if drops > 0 {
        Style::default()
            .fg(Color::White)
            .bg(Color::Red)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    let state = if app.paused {
        Span::styled(
            " PAUSED ",
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        )
    } else {
        Span::raw(" live ")
    };
    let mut spans = vec![
        Span::raw(format!(
            " {} events/s │ ",
            units::compact_count(app.events_per_s)
        )),
        // "!" so a non-zero count stands out in a plain capture too.
        Span::styled(
            format!(
                "drops {}{}",
                units::thousands(drops),
                if drops > 0 { " !" } else { "" }
            ),
            drops_style,
        ),
        Span::raw(format!(" │ up {} │", units::clock(app.uptime))),
        state,
    ];
    let used: usize = spans.iter().map(Span::width).sum();
    let help = if used + 2 + KEY_HELP.width() <= usize::from(area.width) {
        KEY_HELP
    } else {
        KEY_HELP_SHORT
    };
    spans.push(Span::raw(format!("│ {help}")));
    let line = Line::from(spans);
    frame.render_widget(Paragraph::new(line), area);
}
