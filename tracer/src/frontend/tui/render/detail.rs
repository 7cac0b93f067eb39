//! The detail pane of the selected row: size histograms on the left, split
//! causes, requeues and the diagnoses in full on the right; an owner row's
//! counts and timing across the whole pane. Every line wraps, none is cut.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

use super::severity_style;
use crate::frontend::text::size_histogram;
use crate::frontend::tui::app::{App, Detail};
use crate::frontend::words::severity_label;
use crate::frontend::{units, words};

/// Inner width from which histograms and findings split the pane evenly.
const WIDE: u16 = 100;
/// Histogram width below that: room for bars of about six cells.
const NARROW_SIZES_WIDTH: u16 = 34;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let Some(detail) = app.detail() else {
        let block = Block::default().borders(Borders::ALL).title(" detail ");
        frame.render_widget(Paragraph::new("nothing selected").block(block), area);
        return;
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" detail: {} (Enter/Tab closes) ", detail.name));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if !detail.times.is_empty() {
        // An owner: a few short lines, nothing to put beside them.
        let lines: Vec<Line> = detail.times.iter().cloned().map(Line::from).collect();
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
        return;
    }
    // Narrow terminals give the findings the larger share: the fix is wordy.
    let sizes_width = if inner.width >= WIDE {
        inner.width / 2
    } else {
        NARROW_SIZES_WIDTH.min(inner.width / 2)
    };
    let [sizes_area, findings_area] =
        Layout::horizontal([Constraint::Length(sizes_width), Constraint::Min(0)]).areas(inner);
    draw_sizes(frame, sizes_area, &detail);
    draw_findings(frame, findings_area, &detail);
}

fn draw_sizes(frame: &mut Frame, area: Rect, detail: &Detail) {
    let histogram = size_histogram(
        &detail.user_io_size,
        &detail.command_size,
        "",
        // Leave a gap before the findings column.
        usize::from(area.width).saturating_sub(2),
    );
    let lines: Vec<Line> = if histogram.is_empty() {
        vec![Line::from(format!("no I/O seen on {}", detail.name))]
    } else {
        histogram.into_iter().map(Line::from).collect()
    };
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_findings(frame: &mut Frame, area: Rect, detail: &Detail) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines = Vec::new();
    if detail.split_causes.is_empty() {
        lines.push(Line::from(format!(
            "splits: {}",
            units::thousands(detail.splits)
        )));
    } else {
        lines.push(Line::styled("split causes", bold));
        for (cause, count) in &detail.split_causes {
            lines.push(Line::from(format!(
                "  {cause} {} ({})",
                units::thousands(*count),
                units::percent(crate::model::ratio(*count, detail.splits))
            )));
        }
    }
    for note in &detail.notes {
        lines.push(Line::from(note.clone()));
    }
    if detail.diagnoses.is_empty() {
        lines.push(Line::from("no diagnosis"));
    }
    for diagnosis in &detail.diagnoses {
        lines.push(Line::from(""));
        lines.push(Line::from(vec![
            Span::styled(
                format!("{} ", severity_label(diagnosis.severity)),
                severity_style(diagnosis.severity),
            ),
            Span::styled(diagnosis.code.as_str(), bold),
        ]));
        // The fix first: in a small pane it is what must stay visible.
        for fix in diagnosis.fix.lines().filter(|line| !line.trim().is_empty()) {
            lines.push(Line::from(vec![
                Span::styled("fix: ", bold),
                Span::raw(fix.trim().to_string()),
            ]));
        }
        for said in words::what_ifs(diagnosis, detail.measures) {
            lines.push(Line::from(vec![
                Span::styled(format!("{}: ", said.prediction.label()), bold),
                Span::raw(said.sentence),
            ]));
        }
        let evidence = words::evidence_line(diagnosis);
        if !evidence.is_empty() {
            lines.push(Line::from(evidence));
        }
        lines.push(Line::from(diagnosis.explanation.clone()));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::screen;
    use crate::frontend::test_reports::seed_report;
    use crate::frontend::tui::app::{App, Key};
    use crate::model::{Code, WhatIf};

    #[test]
    fn detail_pane_says_what_the_fix_buys() {
        let mut report = seed_report();
        let subpage = report
            .diagnoses
            .iter_mut()
            .find(|d| d.device == "loop0p2" && d.code == Code::SubpageBlockSize)
            .expect("the seed report diagnoses loop0p2");
        subpage.evidence.set_what_if(WhatIf {
            commands_now: 129,
            commands_after_fix: 17,
            time_now_ms: None,
            time_after_fix_ms: None,
            ..Default::default()
        });
        let mut app = App::new();
        app.on_snapshot(report, Duration::from_secs(4));
        app.selected = app.rows.iter().position(|r| r.name == "loop0p2").unwrap();
        app.on_key(Key::Enter);
        let text = screen(&app, 160, 50).join(" ");
        let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            squeezed.contains("what if: the fix would take these writes from 129 commands to ~17"),
            "{text}"
        );
        assert!(
            !squeezed.contains("what_if="),
            "told once, not in the evidence line: {text}"
        );
    }
}
