//! `analyze FILE --html OUT.html`: one self-contained page (inline SVG and
//! CSS, no script, no network) with the plots and the diagnoses.
//!
//! - `series`: the time series, from the recording's events (pure).
//! - `render`: the page; plotters draws the plots.

pub mod render;
pub mod series;

pub use series::Collector;
