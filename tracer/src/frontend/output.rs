//! Where a finished report goes: JSON or text, stdout or a file.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::Report;

use super::text;

/// Width of the text report: the terminal's, or 80 when not a terminal.
pub fn text_width() -> u16 {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize we pass; failure leaves it zero.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col >= 60 {
        size.ws_col.min(160)
    } else {
        80
    }
}

/// Renders `report` as JSON or text and writes it to `path` or stdout.
pub fn emit(report: &Report, json: bool, path: Option<&Path>) -> Result<()> {
    let rendered = if json {
        let mut text = serde_json::to_string_pretty(report)
            .map_err(|err| Error::failure(format!("cannot encode the report: {err}")))?;
        text.push('\n');
        text
    } else {
        let mut text = text::render_report(report, text_width());
        if let Some(run) = &report.run {
            text.push_str(&text::render_run_summary(run));
        }
        text
    };
    match path {
        Some(path) => std::fs::write(path, rendered).map_err(|err| {
            Error::failure(format!("cannot write the report to {}: {err}", path.display()))
        }),
        None => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (e.g. `| head`) is not an error worth a message.
            let _ = stdout.write_all(rendered.as_bytes());
            let _ = stdout.flush();
            Ok(())
        }
    }
}
