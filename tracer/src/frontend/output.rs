//! Where a finished report goes: JSON or text, stdout or a file.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::Report;

use super::text;

/// Renders `report` as JSON or text and writes it to `path` or stdout.
pub fn emit(report: &Report, json: bool, path: Option<&Path>) -> Result<()> {
    let rendered = if json {
        let mut text = serde_json::to_string_pretty(report)
            .map_err(|err| Error::failure(format!("cannot encode the report: {err}")))?;
        text.push('\n');
        text
    } else {
        text::render_report(report, text::stdout_width())
    };
    match path {
        Some(path) => std::fs::write(path, rendered).map_err(|err| {
            Error::failure(format!(
                "cannot write the report to {}: {err}",
                path.display()
            ))
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
