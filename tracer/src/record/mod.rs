//! Recordings: keep a trace, analyze it later (`record`, `--record`,
//! `analyze`), and import traces other tools took (blkparse and the ftrace
//! `blk` tracer's text).
//!
//! - `format`: the file layout, its version and the block framing.
//! - `writer`: [`RecordingSink`], a tee in front of any [`EventSink`], and the
//!   writer thread that compresses and appends whole blocks.
//! - `reader`: [`Recording`], the header plus an iterator of [`Item`]s, for
//!   `analyze` and any later viewer (HTML, Perfetto).
//! - `import`: blkparse and ftrace `blk` text into the same items.
//! - `blktrace`: blktrace's binary per-CPU files into the same items.
//!
//! [`EventSink`]: crate::sink::EventSink

pub mod blktrace;
pub mod format;
pub mod import;
pub mod pack;
pub mod reader;
pub mod writer;

pub use format::{RecordError, RecordHeader, Trailer, FORMAT_VERSION};
pub use reader::{Item, Recording};
pub use writer::{RecordingSink, Writer};

#[cfg(test)]
mod tests;
