//! Everything a command prints goes through one [`Output`]: stdout or a file,
//! in one of the [`Format`]s. A new output format is one more `Format` and
//! one more arm in [`Format::render`].
//!
//! Write errors are never dropped or turned into panics: they come back as
//! [`OutputError`]. `main` ends quietly with success when the reader closed
//! the pipe (`| head`), and prints one line for anything else (`-o /dev/full`).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

pub use crate::error::OutputError;
use crate::model::Report;

use super::text;

/// How a document is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// For people, wrapped to the terminal's width.
    Text,
    /// One pretty-printed JSON document.
    Json,
    /// One compact JSON document per line (`report --interval --json`).
    JsonLines,
}

impl Format {
    /// The format the `--json` flag asks for; a stream of documents (one per
    /// interval) is printed as JSON Lines.
    pub fn from_flags(json: bool, stream: bool) -> Format {
        match (json, stream) {
            (false, _) => Format::Text,
            (true, false) => Format::Json,
            (true, true) => Format::JsonLines,
        }
    }

    /// The bytes to print for `document`, ending with a newline.
    pub fn render<D: Document + ?Sized>(
        self,
        document: &D,
        width: u16,
    ) -> Result<Vec<u8>, OutputError> {
        let mut bytes = match self {
            Format::Text => return Ok(document.render_text(width).into_bytes()),
            Format::Json => serde_json::to_vec_pretty(document),
            Format::JsonLines => serde_json::to_vec(document),
        }
        .map_err(OutputError::Encode)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

/// A document every format can print: serialized for JSON, rendered for text.
pub trait Document: Serialize {
    fn render_text(&self, width: u16) -> String;
}

impl Document for Report {
    fn render_text(&self, width: u16) -> String {
        text::render_report(self, width)
    }
}

/// Where a command's output goes: stdout or a file.
pub struct Output {
    writer: Box<dyn Write>,
    /// Named in error messages: "stdout" or the path.
    target: String,
    /// Text width: the terminal's for stdout, [`text::DEFAULT_WIDTH`] for files.
    width: u16,
}

impl Output {
    pub fn stdout() -> Output {
        Output::new(
            Box::new(io::stdout()),
            "stdout".to_string(),
            text::stdout_width(),
        )
    }

    /// Creates (or truncates) the file at `path`, before any work is done,
    /// so a bad path fails early.
    pub fn create(path: &Path) -> Result<Output, OutputError> {
        let file = File::create(path).map_err(|source| OutputError::Create {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Output::new(
            Box::new(file),
            path.display().to_string(),
            text::DEFAULT_WIDTH,
        ))
    }

    /// The file at `path` when given (`-o`), else stdout.
    pub fn to(path: Option<&Path>) -> Result<Output, OutputError> {
        match path {
            Some(path) => Output::create(path),
            None => Ok(Output::stdout()),
        }
    }

    pub fn new(writer: Box<dyn Write>, target: String, width: u16) -> Output {
        Output {
            writer,
            target,
            width,
        }
    }

    /// Prints `document` in `format` and flushes, so each interval's report
    /// reaches a pipe as soon as it is complete.
    pub fn print<D: Document + ?Sized>(
        &mut self,
        document: &D,
        format: Format,
    ) -> Result<(), OutputError> {
        let bytes = format.render(document, self.width)?;
        self.write_all(&bytes)
    }

    /// Writes bytes rendered elsewhere (the man page, completions) and flushes.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), OutputError> {
        self.writer
            .write_all(bytes)
            .and_then(|()| self.writer.flush())
            .map_err(|source| OutputError::Write {
                target: self.target.clone(),
                source,
            })
    }
}

pub use crate::status::status;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Serialize)]
    struct Greeting {
        word: &'static str,
    }

    impl Document for Greeting {
        fn render_text(&self, width: u16) -> String {
            format!("{} at {width}\n", self.word)
        }
    }

    /// Keeps what was written, or fails every write with `fail`.
    struct Sink {
        written: Rc<RefCell<Vec<u8>>>,
        fail: Option<io::ErrorKind>,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if let Some(kind) = self.fail {
                return Err(io::Error::from(kind));
            }
            self.written.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn output(fail: Option<io::ErrorKind>) -> (Output, Rc<RefCell<Vec<u8>>>) {
        let written = Rc::new(RefCell::new(Vec::new()));
        let sink = Sink {
            written: written.clone(),
            fail,
        };
        (Output::new(Box::new(sink), "the sink".into(), 72), written)
    }

    #[test]
    fn each_format_prints_its_own_way() {
        let (mut out, written) = output(None);
        let doc = Greeting { word: "hello" };
        out.print(&doc, Format::Text).unwrap();
        out.print(&doc, Format::JsonLines).unwrap();
        out.print(&doc, Format::JsonLines).unwrap();
        out.print(&doc, Format::Json).unwrap();
        let text = String::from_utf8(written.borrow().clone()).unwrap();
        assert_eq!(
            text,
            "hello at 72\n{\"word\":\"hello\"}\n{\"word\":\"hello\"}\n{\n  \"word\": \"hello\"\n}\n"
        );
    }

    #[test]
    fn the_json_flag_and_a_stream_choose_the_format() {
        assert_eq!(Format::from_flags(false, true), Format::Text);
        assert_eq!(Format::from_flags(true, false), Format::Json);
        assert_eq!(Format::from_flags(true, true), Format::JsonLines);
    }

    #[test]
    fn a_closed_pipe_is_reported_as_such() {
        let (mut out, _) = output(Some(io::ErrorKind::BrokenPipe));
        let err = out
            .print(&Greeting { word: "x" }, Format::Json)
            .unwrap_err();
        assert!(err.is_broken_pipe());
        assert!(Error::from(err).is_broken_pipe());
    }

    #[test]
    fn other_write_errors_name_the_target_and_the_cause() {
        let (mut out, _) = output(Some(io::ErrorKind::StorageFull));
        let err = Error::from(
            out.print(&Greeting { word: "x" }, Format::Text)
                .unwrap_err(),
        );
        assert!(!err.is_broken_pipe());
        let line = err.chain_text();
        assert!(line.starts_with("cannot write to the sink: "), "{line}");
        assert_eq!(err.exit_code(), crate::error::EXIT_FAILURE);
    }

    #[test]
    fn a_file_that_cannot_be_created_fails_before_any_work() {
        let err = Output::create(Path::new("/nonexistent-dir/report.json")).err();
        let err = Error::from(err.expect("no such directory"));
        let line = err.chain_text();
        assert!(
            line.starts_with("cannot create /nonexistent-dir/report.json: "),
            "{line}"
        );
    }
}
