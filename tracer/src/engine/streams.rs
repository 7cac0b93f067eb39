//! Streams: runs of user I/Os, each starting where the previous one (same
//! device and op) ended while that one was still in flight, so the block
//! layer could merge them into one request. Their sizes and segment density
//! are what `what_if` replays under a fix.
//!
//! Kept per stream: one histogram value (1% resolution, fixed memory), so
//! nothing is allocated per event.

use hdrhistogram::Histogram;

use super::histogram::new_histogram;
use super::table::SlotRef;
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};

/// Sectors in a page: the segment a page-sized or larger bio is counted in.
pub(super) const PAGE_SECTORS: u64 = PAGE_BYTES / SECTOR_BYTES;

/// The last user I/O queued on a disk for one op: where the next one must
/// start, and whether it is still in flight, to continue its stream.
#[derive(Clone, Copy, Debug)]
pub(super) struct LastQueued {
    pub(super) end: u64,
    pub(super) part: u32,
    pub(super) tracked: bool,
    pub(super) io: SlotRef,
}

impl Default for LastQueued {
    fn default() -> Self {
        LastQueued {
            end: 0,
            part: 0,
            tracked: false,
            io: SlotRef::NONE,
        }
    }
}

/// Sectors per segment a stream can have: 1 to 7 for sub-page bios (one
/// segment each), 8 for page-sized or larger ones (one segment per page).
const DENSITIES: usize = PAGE_SECTORS as usize;

/// Sizes of the streams seen, in sectors, by segment density (sectors per
/// segment, to the nearest whole sector: exact for streams of one bio size).
#[derive(Default)]
pub struct StreamSizes {
    /// `[density - 1]`: stream sizes; allocated on the first stream of that density.
    by_density: [Option<Box<Histogram<u64>>>; DENSITIES],
    open_sectors: u64,
    open_segments: u64,
}

/// Sectors per segment, rounded to the nearest of 1..=8.
fn density(sectors: u64, segments: u64) -> u64 {
    let segments = segments.max(1);
    (sectors.saturating_mul(2).saturating_add(segments) / (2 * segments)).clamp(1, PAGE_SECTORS)
}

/// Segments a bio of `sectors` takes: one below a page, one per page above.
fn segments_of(sectors: u64) -> u64 {
    sectors.div_ceil(PAGE_SECTORS).max(1)
}

impl StreamSizes {
    /// One user I/O of `sectors`: it extends the open stream, or starts one.
    pub fn record(&mut self, continues: bool, sectors: u64) {
        if !(continues && self.open_sectors > 0) {
            self.close();
        }
        self.open_sectors = self.open_sectors.saturating_add(sectors);
        self.open_segments = self.open_segments.saturating_add(segments_of(sectors));
    }

    fn close(&mut self) {
        if self.open_sectors > 0 {
            self.add_stream(self.open_sectors, self.open_segments, 1);
        }
        self.open_sectors = 0;
        self.open_segments = 0;
    }

    fn add_stream(&mut self, sectors: u64, segments: u64, count: u64) {
        let density = density(sectors, segments);
        self.by_density[density as usize - 1]
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
                each(sectors, index as u64 + 1, step.count_at_value());
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
