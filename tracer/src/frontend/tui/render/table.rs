//! The device/partition table: one row per disk and partition.

use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use unicode_width::UnicodeWidthStr;

use super::{severity_marker, severity_style, TITLE};
use crate::frontend::tui::app::{App, Row as AppRow};
use crate::frontend::units;

/// Header and width of each numeric column, after the device name.
const COLUMNS: [(&str, u16); 9] = [
    ("IO/s", 6),
    ("cmd/s", 6),
    ("amp", 5),
    ("split%", 6),
    ("merge%", 6),
    ("misal%", 6),
    ("avg IO", 6),
    ("avg cmd", 7),
    ("p99", 5),
];
/// Column indexes in the order they are given up when the table is too narrow
/// (all fit from 80 columns on).
const DROP_ORDER: [usize; 6] = [4, 5, 1, 8, 7, 6];
/// Borders and the highlight symbol.
const CHROME: u16 = 3;

/// Indexes into [`COLUMNS`] that fit next to a name column of `name_width`.
fn shown_columns(area_width: u16, name_width: u16) -> Vec<usize> {
    let mut shown: Vec<usize> = (0..COLUMNS.len()).collect();
    let needed = |shown: &[usize]| {
        shown.iter().map(|&index| COLUMNS[index].1 + 1).sum::<u16>() + name_width + CHROME
    };
    for drop in DROP_ORDER {
        if needed(&shown) <= area_width {
            break;
        }
        shown.retain(|&index| index != drop);
    }
    shown
}

/// Bounds of the device-name column (marker and indent included).
const MIN_NAME: usize = 8;
const MAX_NAME: usize = 24;
const NONE: &str = "-";

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {TITLE} — live "))
        .title(
            Line::from(" rates: last interval · ratios: since start ").alignment(Alignment::Right),
        );
    if app.rows.is_empty() {
        let owners_read = app.report.as_ref().is_some_and(|r| r.attribution.is_some());
        let waiting = if app.view != crate::frontend::tui::app::TableView::Devices && !owners_read {
            "owners are not read (--no-owners): restart without it to see who (v: next view)"
        } else if app.view != crate::frontend::tui::app::TableView::Devices {
            "no I/O attributed yet in this view (v: next view)"
        } else if app.paused {
            "no I/O seen yet (paused)"
        } else {
            "no I/O seen yet: waiting for block I/O on the traced devices…"
        };
        frame.render_widget(Paragraph::new(waiting).block(block), area);
        return;
    }
    let name_width = app
        .rows
        .iter()
        .map(|row| row_name(row).width())
        .max()
        .unwrap_or(0)
        .clamp(MIN_NAME, MAX_NAME) as u16;
    let shown = shown_columns(area.width, name_width);
    let header = Row::new(
        std::iter::once(Cell::from(format!("  {}", app.view.label()))).chain(
            shown
                .iter()
                .map(|&index| right(COLUMNS[index].0.to_string())),
        ),
    )
    .style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let widths = std::iter::once(Constraint::Length(name_width)).chain(
        shown
            .iter()
            .map(|&index| Constraint::Length(COLUMNS[index].1)),
    );
    let table = Table::new(app.rows.iter().map(|row| table_row(row, &shown)), widths)
        .header(header)
        .block(block)
        .column_spacing(1)
        .highlight_symbol(">")
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(app.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Marker, indent for partitions, and the device name.
fn row_name(row: &AppRow) -> String {
    let indent = if row.is_partition { "  " } else { "" };
    format!("{} {indent}{}", severity_marker(row.severity), row.name)
}

fn table_row(row: &AppRow, shown: &[usize]) -> Row<'static> {
    let totals = &row.totals;
    // Ratios of nothing are shown as "-", not as a misleading 0.
    let per_user_io = |value: String| {
        if totals.user_ios == 0 {
            NONE.to_string()
        } else {
            value
        }
    };
    let per_command = |value: String| {
        if totals.commands == 0 {
            NONE.to_string()
        } else {
            value
        }
    };
    let cells = vec![
        Cell::from(row_name(row)),
        right(units::compact_count(row.user_ios_per_s)),
        right(units::compact_count(row.commands_per_s)),
        right(per_user_io(units::ratio(totals.amplification()))),
        right(per_user_io(units::percent(totals.split_share()))),
        right(per_user_io(units::percent(totals.merge_share()))),
        // Alignment is counted per device only.
        right(if row.owner.is_some() {
            NONE.to_string()
        } else {
            per_command(units::percent(totals.misaligned_share()))
        }),
        right(per_user_io(units::compact_bytes(
            totals.avg_user_io_bytes(),
        ))),
        // An owner's commands are not measured by size (Totals::of_owner).
        right(if totals.commands_sized {
            per_command(units::compact_bytes(totals.avg_command_bytes()))
        } else {
            NONE.to_string()
        }),
        right(
            totals
                .p99_us
                .map_or(NONE.to_string(), units::compact_micros),
        ),
    ];
    let cells = cells
        .into_iter()
        .enumerate()
        .filter(|(index, _)| *index == 0 || shown.contains(&(index - 1)))
        .map(|(_, cell)| cell);
    let table_row = Row::new(cells);
    match row.severity {
        Some(severity) => table_row.style(severity_style(severity)),
        None => table_row,
    }
}

fn right(text: String) -> Cell<'static> {
    Cell::from(Text::from(text).alignment(Alignment::Right))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_columns_fit_80_and_narrow_terminals_drop_the_least_useful() {
        assert_eq!(shown_columns(80, 12).len(), COLUMNS.len());
        let narrow = shown_columns(60, 12);
        let headers: Vec<&str> = narrow.iter().map(|&index| COLUMNS[index].0).collect();
        assert!(!headers.contains(&"merge%"));
        for kept in ["IO/s", "amp", "split%"] {
            assert!(headers.contains(&kept), "{kept} dropped at 60 columns");
        }
        let width: u16 = narrow.iter().map(|&i| COLUMNS[i].1 + 1).sum::<u16>() + 12 + CHROME;
        assert!(width <= 60);
    }
}
