//! The human report: what `report`, `run` and the TUI's exit print.
//!
//! Diagnoses come first (they answer "what do I change"), then the measures
//! behind them per disk and partition. Every line fits the given width: prose
//! is word-wrapped, tables are sized to fit 80 columns.
//!
//! Where things live:
//! - `report`: the whole report: header, diagnoses, each disk and partition
//!   with its measures; one diagnosis alone for `check`.
//! - `run`: the `run` chain, what the command's writes became.
//! - `owners`: `report --by VIEW`, the top owners of each view.
//! - `histogram`: the side-by-side size histograms (the TUI draws them too).
//! - `layout`: the width kit: the line collector, the word wrap, stdout's width.
//!
//! The words themselves, and the severity order and labels the TUI and the
//! HTML page share, are in `frontend::words`; number formats in `frontend::units`.

mod histogram;
mod layout;
mod owners;
mod report;
mod run;

pub use histogram::size_histogram;
pub use layout::{stdout_width, wrapped_text, DEFAULT_WIDTH};
pub use report::{render_diagnosis, render_imported_report, render_report};
pub use run::render_run_summary;

#[cfg(test)]
mod tests {
    use unicode_width::UnicodeWidthStr;

    use super::*;
    use crate::frontend::test_reports::seed_report;

    /// The text with every run of whitespace (line breaks of the wrap
    /// included) turned into one space.
    pub(super) fn squeezed(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    pub(super) fn assert_fits(text: &str, width: usize) {
        for line in text.lines() {
            assert!(
                line.width() <= width,
                "line wider than {width}: {:?} ({})",
                line,
                line.width()
            );
        }
    }

    #[test]
    fn seed_report_snapshot() {
        insta::assert_snapshot!(render_report(&seed_report(), 80));
    }
}
