//! The engine's histograms: one resolution and range for sizes, times and counts.

use hdrhistogram::Histogram;

/// Highest value a histogram keeps exactly enough (sectors, µs, counts);
/// larger values saturate. 2^36 µs is 19 hours, 2^36 sectors is 32 TiB.
const HISTOGRAM_HIGH: u64 = 1 << 36;
/// Two significant digits: 1% resolution, about 30 KiB per histogram.
const HISTOGRAM_SIGFIG: u8 = 2;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_HIGH, HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}
