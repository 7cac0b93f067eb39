//! iosplit-trace: why does my write become so many small device commands?
//!
//! - [`blk`]: the block layer's units and pure rules (sector, page, block size).
//! - [`capture`]: loads the probes, reads the ring buffer (needs root).
//! - [`engine`]: pure correlation and diagnosis, fed by any event stream.
//! - [`explain`]: the words of a diagnosis (explanation and fix), for every frontend.
//! - [`geometry`]: partition placement and queue limits from sysfs and ioctls.
//! - [`frontend`]: the TUI, reports, `run`, `check` and JSON output.
//! - [`model`]: the report types every frontend shares.
//! - [`record`]: recordings (`record`, `analyze`) and blkparse/ftrace import.
//! - [`sink`]: the trait capture feeds events into (the engine implements it).

pub mod blk;
pub mod capture;
pub mod cli;
pub mod engine;
pub mod error;
pub mod explain;
pub mod frontend;
pub mod geometry;
pub mod model;
pub mod owners;
pub mod record;
pub mod sink;
pub mod status;
