//! Streams: runs of user I/Os, each starting where the previous one (same
//! device and op) ended while that one was still in flight, so the block
//! layer could merge them into one request. Their sizes and segment density
//! are what `what_if` replays under a fix.
//!
//! Kept per stream: one histogram value (1% resolution, fixed memory), so
//! nothing is allocated per event.

use hdrhistogram::Histogram;

use super::histogram::new_histogram;
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::model::SegmentSource;

/// Sectors in a page: the segment a bio of scattered pages is counted in.
pub(super) const PAGE_SECTORS: u64 = PAGE_BYTES / SECTOR_BYTES;

const EXACT_DENSITIES: usize = PAGE_SECTORS as usize;
const MAX_DENSITY_LOG2: u32 = 16;
const DENSITIES: usize = EXACT_DENSITIES + (MAX_DENSITY_LOG2 - 3) as usize;

/// Sizes of the streams seen, in sectors, by segment density (sectors per
/// segment, to the nearest whole sector up to a page and the nearest power
/// of two above: exact for streams of one bio size and layout).
#[derive(Default)]
pub struct StreamSizes {
    /// `[density_index(density)]`: stream sizes; allocated on the first
    /// stream of that density.
    by_density: [Option<Box<Histogram<u64>>>; DENSITIES],
    open_sectors: u64,
    open_segments: u64,
    /// User I/Os whose vector count was read, and those counted by page.
    observed_ios: u64,
    assumed_ios: u64,
}

/// Sectors per segment, rounded to the nearest of 1..=8, or above a page to
/// the nearest power of two (in ratio).
fn density(sectors: u64, segments: u64) -> u64 {
    let segments = segments.max(1);
    let nearest = sectors.saturating_mul(2).saturating_add(segments) / (2 * segments);
    if nearest <= PAGE_SECTORS {
        return nearest.max(1);
    }
    // floor(log2(sectors / segments * sqrt 2)), with 181/128 for sqrt 2.
    let scaled = u128::from(sectors) * 181 / (u128::from(segments) * 128);
    let log2 = (127 - scaled.leading_zeros()).clamp(PAGE_SECTORS.ilog2(), MAX_DENSITY_LOG2);
    1 << log2
}

fn density_index(density: u64) -> usize {
    match density {
        0..=PAGE_SECTORS => density.max(1) as usize - 1,
        _ => EXACT_DENSITIES + (density.ilog2() - PAGE_SECTORS.ilog2()) as usize - 1,
    }
}

fn density_at(index: usize) -> u64 {
    match index {
        0..EXACT_DENSITIES => index as u64 + 1,
        _ => PAGE_SECTORS << (index + 1 - EXACT_DENSITIES),
    }
}

/// Segments a bio of `sectors` takes: its vector count where the probe read
/// it (`observed`), else one below a page and one per page above. Never
/// more than that page count: a bio over a shared vector table (io_uring's
/// registered buffers) counts the whole table's vectors.
fn segments_of(sectors: u64, observed: u16) -> u64 {
    let by_page = sectors.div_ceil(PAGE_SECTORS).max(1);
    match observed {
        0 => by_page,
        vectors => u64::from(vectors).min(by_page),
    }
}

impl StreamSizes {
    /// One user I/O of `sectors` in `segments` vectors (0: not observed):
    /// it extends the open stream, or starts one.
    pub fn record(&mut self, continues: bool, sectors: u64, segments: u16) {
        if !(continues && self.open_sectors > 0) {
            self.close();
        }
        self.open_sectors = self.open_sectors.saturating_add(sectors);
        self.open_segments = self
            .open_segments
            .saturating_add(segments_of(sectors, segments));
        match segments {
            0 => self.assumed_ios += 1,
            _ => self.observed_ios += 1,
        }
    }

    /// Where the segment counts came from; `None` before any user I/O.
    pub fn segment_source(&self) -> Option<SegmentSource> {
        match (self.observed_ios, self.assumed_ios) {
            (0, 0) => None,
            (_, 0) => Some(SegmentSource::Observed),
            (0, _) => Some(SegmentSource::OnePerPage),
            _ => Some(SegmentSource::PartlyObserved),
        }
    }

    fn close(&mut self) {
        if self.open_sectors > 0 {
            self.add_stream(self.open_sectors, self.open_segments, 1);
        }
        self.open_sectors = 0;
        self.open_segments = 0;
    }

    fn add_stream(&mut self, sectors: u64, segments: u64, count: u64) {
        self.by_density[density_index(density(sectors, segments))]
            .get_or_insert_with(|| Box::new(new_histogram()))
            .saturating_record_n(sectors, count);
    }

    /// Adds `other`'s streams (its open one counts as closed here).
    pub fn absorb(&mut self, other: &StreamSizes) {
        for (mine, theirs) in self.by_density.iter_mut().zip(&other.by_density) {
            if let Some(theirs) = theirs {
                // Same bounds on both sides, so adding cannot fail.
                let _ = mine
                    .get_or_insert_with(|| Box::new(new_histogram()))
                    .add(theirs.as_ref());
            }
        }
        if other.open_sectors > 0 {
            self.add_stream(other.open_sectors, other.open_segments, 1);
        }
        self.observed_ios += other.observed_ios;
        self.assumed_ios += other.assumed_ios;
    }

    pub fn streams(&self) -> u64 {
        let closed: u64 = self.by_density.iter().flatten().map(|h| h.len()).sum();
        closed + u64::from(self.open_sectors > 0)
    }

    /// Calls `each(sectors, sectors per segment, count)` for every stream size seen.
    pub(super) fn for_each(&self, mut each: impl FnMut(u64, u64, u64)) {
        for (index, histogram) in self.by_density.iter().enumerate() {
            let Some(histogram) = histogram else { continue };
            for step in histogram.iter_recorded() {
                // The low end of the bucket: exact sizes (powers of two) come back unchanged.
                let sectors = histogram.lowest_equivalent(step.value_iterated_to());
                each(sectors, density_at(index), step.count_at_value());
            }
        }
        if self.open_sectors > 0 {
            each(
                self.open_sectors,
                density(self.open_sectors, self.open_segments),
                1,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn densities_round_to_a_sector_up_to_a_page_then_to_a_power_of_two() {
        assert_eq!(density(1, 1), 1);
        assert_eq!(density(2048, 256), 8);
        assert_eq!(density(9, 1), 8);
        assert_eq!(density(12, 1), 16);
        assert_eq!(density(2048, 1), 2048);
        assert_eq!(density(2048, 3), 512);
        assert_eq!(density(u64::MAX, 1), 1 << MAX_DENSITY_LOG2);
        for density in (1..=PAGE_SECTORS).chain((4..=MAX_DENSITY_LOG2).map(|log2| 1 << log2)) {
            assert_eq!(density_at(density_index(density)), density, "{density}");
        }
        assert_eq!(density_index(1 << MAX_DENSITY_LOG2), DENSITIES - 1);
    }

    #[test]
    fn a_stream_keeps_the_segments_its_bios_had() {
        let mut streams = StreamSizes::default();
        streams.record(false, 2048, 1);
        streams.record(true, 2048, 1);
        streams.record(false, 2048, 0);
        let mut seen = Vec::new();
        streams.for_each(|sectors, density, count| seen.push((sectors, density, count)));
        seen.sort_unstable();
        // Closed: 2 MiB in two vectors; open: 1 MiB counted page by page.
        assert_eq!(seen, vec![(2048, 8, 1), (4096, 2048, 1)]);
        assert_eq!(
            streams.segment_source(),
            Some(SegmentSource::PartlyObserved)
        );
        let mut read = StreamSizes::default();
        assert_eq!(read.segment_source(), None);
        read.record(false, 8, 1);
        assert_eq!(read.segment_source(), Some(SegmentSource::Observed));
        let mut assumed = StreamSizes::default();
        assumed.record(false, 8, 0);
        assert_eq!(assumed.segment_source(), Some(SegmentSource::OnePerPage));
        read.absorb(&assumed);
        assert_eq!(read.segment_source(), Some(SegmentSource::PartlyObserved));
    }
}
