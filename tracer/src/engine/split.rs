//! Why did the kernel split a bio here? A pure inference from the queue
//! limits and the split's geometry, mirroring `block/blk-merge.c`.

use crate::blk::SECTOR_BYTES;
use crate::geometry::DiskGeometry;
use crate::model::Op;
/// The causes are the report's vocabulary; the inference is here.
pub use crate::model::SplitCause;

/// The queue limits that decide split points, in sectors unless named otherwise.
/// Zero means unknown (or no limit, for `chunk_sectors` and the virt boundary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitLimits {
    pub max_sectors: u64,
    pub max_segments: u64,
    pub max_segment_bytes: u64,
    pub chunk_sectors: u64,
    /// Physical block size in sectors, at least 1.
    pub pbs_sectors: u64,
    /// Logical block size in sectors, at least 1.
    pub lbs_sectors: u64,
    pub virt_boundary_mask: u64,
    /// `discard_max_bytes` in sectors (0: unknown).
    pub max_discard_sectors: u64,
    /// Bio-based (dm): it cuts ordinary I/O at its own boundaries, never by
    /// segments, so a short piece there is not a segment limit's.
    pub bio_based: bool,
    /// dm-crypt's cap on one read and one write, sectors (0: none).
    pub crypt_max_read: u64,
    pub crypt_max_write: u64,
}

/// dm-crypt's cap on the pieces it passes down, when `disk` is dm-crypt.
fn crypt_cap(disk: &DiskGeometry) -> Option<crate::geometry::stack::CryptMaxIo> {
    disk.stack.as_ref()?.crypt_max_io
}

impl SplitLimits {
    pub fn from_geometry(disk: &DiskGeometry) -> SplitLimits {
        SplitLimits {
            max_sectors: u64::from(disk.max_sectors_kb) * 2,
            max_segments: u64::from(disk.max_segments),
            max_segment_bytes: u64::from(disk.max_segment_size),
            // md raid0/10/4/5/6 and dm-striped cut at their chunks without
            // saying so in queue/chunk_sectors (6.1), or with a coarser grid
            // there: raid5 on 7.x gives its full stripe, and cuts its reads
            // at each chunk.
            chunk_sectors: match (
                u64::from(disk.chunk_sectors),
                disk.stack.as_ref().map_or(0, |stack| stack.chunk_sectors),
            ) {
                (0, stack) => stack,
                (queue, stack) if stack != 0 && queue.is_multiple_of(stack) => stack,
                (queue, _) => queue,
            },
            pbs_sectors: power_of_two_sectors(disk.physical_block_size),
            lbs_sectors: power_of_two_sectors(disk.logical_block_size),
            virt_boundary_mask: disk.virt_boundary_mask,
            max_discard_sectors: disk.discard_max_bytes / SECTOR_BYTES,
            bio_based: !disk.request_based,
            crypt_max_read: crypt_cap(disk).and_then(|cap| cap.read_bytes).unwrap_or(0)
                / SECTOR_BYTES,
            crypt_max_write: crypt_cap(disk).map_or(0, |cap| cap.write_bytes) / SECTOR_BYTES,
        }
    }

    /// dm-crypt's cap for `op`, sectors, if it has one.
    pub fn crypt_cap(&self, op: Op) -> Option<u64> {
        let cap = match op {
            Op::Read => self.crypt_max_read,
            Op::Write => self.crypt_max_write,
            _ => 0,
        };
        (cap != 0).then_some(cap)
    }

    /// Longest piece `get_max_io_size()` allows for a bio starting at `sector`
    /// (absolute), or `None` when `max_sectors` is unknown.
    pub fn max_io_sectors(&self, sector: u64) -> Option<u64> {
        if self.max_sectors == 0 {
            return None;
        }
        let mut max_sectors = self.max_sectors;
        if self.chunk_sectors != 0 {
            let left = self.chunk_sectors - sector % self.chunk_sectors;
            max_sectors = max_sectors.min(left);
        }
        let pbs = self.pbs_sectors.max(1);
        let start = sector & (pbs - 1);
        let end = (start + max_sectors) & !(pbs - 1);
        if end > start {
            Some(end - start)
        } else {
            Some(max_sectors & !(self.lbs_sectors.max(1) - 1))
        }
    }
}

/// A block size in sectors, rounded down to a power of two, at least 1.
fn power_of_two_sectors(bytes: u32) -> u64 {
    let sectors = u64::from(bytes) / SECTOR_BYTES;
    if sectors <= 1 {
        1
    } else {
        1 << (63 - sectors.leading_zeros())
    }
}

/// Infers why the front piece `[sector, new_sector)` was split off a bio.
///
/// In order: a discard piece is `max_discard`, or `discard_granularity`
/// when shorter than the known limit; a piece ending on a
/// chunk boundary short of `max_sectors` is `chunk_boundary`; a piece of
/// exactly the `get_max_io_size()` length is `max_sectors`, or
/// `physical_block` when the start was not physical-block aligned (the
/// kernel shortened the piece to end on an absolute pbs boundary). A shorter
/// piece on a bio-based device is `unknown` (it cut at its own boundaries);
/// on a request-based one it was cut by the segment walk: `virt_boundary` when it ends inside a
/// page and the device has a virt boundary, `max_segment_size` when it is
/// exactly `max_segments` full segments, `max_segments` when it fits within
/// `max_segments` segments, and `unknown` otherwise (or when limits are unknown).
pub fn split_cause(limits: &SplitLimits, op: Op, sector: u64, new_sector: u64) -> SplitCause {
    if new_sector <= sector {
        return SplitCause::Unknown;
    }
    let piece = new_sector - sector;
    if op == Op::Discard {
        // Only a discard over max_discard_sectors is cut; the piece ends
        // short of that limit where the end is rounded to the granularity.
        return match limits.max_discard_sectors {
            max if max != 0 && piece < max => SplitCause::DiscardGranularity,
            _ => SplitCause::MaxDiscard,
        };
    }
    if limits.crypt_cap(op) == Some(piece) {
        return SplitCause::CryptMaxIo;
    }
    let limit = limits.max_io_sectors(sector);
    let below_max = limits.max_sectors == 0 || piece < limits.max_sectors;
    // A cap no larger than the chunk is the chunk's (md raid0 sets its
    // max_hw_sectors to it).
    let chunk_capped = limits.max_sectors == limits.chunk_sectors;
    if limits.chunk_sectors != 0
        && new_sector.is_multiple_of(limits.chunk_sectors)
        && (below_max || chunk_capped)
    {
        return SplitCause::ChunkBoundary;
    }
    let Some(limit) = limit else {
        return SplitCause::Unknown;
    };
    let pbs = limits.pbs_sectors.max(1);
    if piece == limits.max_sectors {
        return SplitCause::MaxSectors;
    }
    if piece == limit {
        return if !sector.is_multiple_of(pbs) {
            SplitCause::PhysicalBlock
        } else {
            SplitCause::MaxSectors
        };
    }
    if piece > limit {
        return SplitCause::Unknown;
    }
    if limits.bio_based {
        return SplitCause::Unknown;
    }
    let piece_bytes = piece * SECTOR_BYTES;
    if limits.virt_boundary_mask != 0 && piece_bytes & limits.virt_boundary_mask != 0 {
        return SplitCause::VirtBoundary;
    }
    if limits.max_segments == 0 {
        return SplitCause::Unknown;
    }
    let segment_bytes = if limits.max_segment_bytes == 0 {
        u64::MAX
    } else {
        limits.max_segment_bytes
    };
    if piece_bytes == limits.max_segments.saturating_mul(segment_bytes) {
        return SplitCause::MaxSegmentSize;
    }
    if piece_bytes <= limits.max_segments.saturating_mul(segment_bytes) {
        return SplitCause::MaxSegments;
    }
    SplitCause::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vda on the development VM: 512 B blocks, 1280 KiB max, 254 segments.
    fn vda() -> SplitLimits {
        SplitLimits {
            max_sectors: 2560,
            max_segments: 254,
            max_segment_bytes: 1 << 32,
            chunk_sectors: 0,
            pbs_sectors: 1,
            lbs_sectors: 1,
            virt_boundary_mask: 0,
            max_discard_sectors: 0,
            bio_based: false,
            crypt_max_read: 0,
            crypt_max_write: 0,
        }
    }

    fn loop_4k() -> SplitLimits {
        SplitLimits {
            max_sectors: 256,
            max_segments: 128,
            max_segment_bytes: 65536,
            chunk_sectors: 0,
            pbs_sectors: 8,
            lbs_sectors: 1,
            virt_boundary_mask: 0,
            max_discard_sectors: 0,
            bio_based: false,
            crypt_max_read: 0,
            crypt_max_write: 0,
        }
    }

    #[test]
    fn piece_of_exactly_max_sectors_is_max_sectors() {
        assert_eq!(
            split_cause(&vda(), Op::Write, 0, 2560),
            SplitCause::MaxSectors
        );
        assert_eq!(
            split_cause(&loop_4k(), Op::Write, 2048, 2048 + 256),
            SplitCause::MaxSectors
        );
    }

    #[test]
    fn pbs_shortened_piece_from_unaligned_start_is_physical_block() {
        // Start 2049 (1 sector past a 4 KiB boundary): the kernel ends the
        // piece at the next absolute pbs boundary below start+max, 2049+255.
        let limits = loop_4k();
        let sector = 2049;
        let new_sector = (sector + 256) & !7;
        assert_eq!(new_sector - sector, 255);
        assert_eq!(limits.max_io_sectors(sector), Some(255));
        assert_eq!(
            split_cause(&limits, Op::Write, sector, new_sector),
            SplitCause::PhysicalBlock
        );
    }

    #[test]
    fn segment_walk_split_below_max_is_max_segments() {
        // A 1 MiB O_DIRECT write on vda: 2040 + 8 sectors.
        assert_eq!(
            split_cause(&vda(), Op::Write, 4096, 4096 + 2040),
            SplitCause::MaxSegments
        );
    }

    #[test]
    fn full_segments_of_max_size_is_max_segment_size() {
        let limits = SplitLimits {
            max_sectors: 4096,
            max_segments: 4,
            max_segment_bytes: 65536,
            ..loop_4k()
        };
        // 4 segments of 64 KiB = 512 sectors, well below max_sectors.
        assert_eq!(
            split_cause(&limits, Op::Read, 0, 512),
            SplitCause::MaxSegmentSize
        );
        assert_eq!(
            split_cause(&limits, Op::Read, 0, 256),
            SplitCause::MaxSegments
        );
        // Longer than max_segments full segments can carry: not a segment split.
        assert_eq!(split_cause(&limits, Op::Read, 0, 1024), SplitCause::Unknown);
    }

    /// md raid0 with 64 KiB chunks, as the `stacks` VM scenario reads it:
    /// queue/chunk_sectors 0, max_sectors_kb 64 (the chunk), md/chunk_size 65536.
    #[test]
    fn a_raid0_cuts_at_its_chunks_not_at_its_size_cap() {
        let md1 = DiskGeometry {
            name: "md1".into(),
            logical_block_size: 512,
            physical_block_size: 4096,
            max_sectors_kb: 64,
            max_hw_sectors_kb: 64,
            stack: Some(crate::geometry::stack::Stack {
                kind: "md-raid0".into(),
                chunk_sectors: 128,
                ..Default::default()
            }),
            ..DiskGeometry::default()
        };
        let limits = SplitLimits::from_geometry(&md1);
        assert_eq!(limits.chunk_sectors, 128);
        assert_eq!(
            split_cause(&limits, Op::Write, 0, 128),
            SplitCause::ChunkBoundary
        );
        assert_eq!(
            split_cause(&limits, Op::Write, 64, 128),
            SplitCause::ChunkBoundary
        );
    }

    /// md raid5 (3 members, 64 KiB chunks) on 7.3, as the `stacks` VM
    /// scenario reads it: queue/chunk_sectors is the full stripe (256), and
    /// its chunk-aligned reads are cut at every 64 KiB chunk (`X` at 128).
    #[test]
    fn a_raid5_read_cut_at_its_chunk_inside_the_stripe_grid_is_a_chunk_boundary() {
        let md2 = DiskGeometry {
            name: "md2".into(),
            logical_block_size: 512,
            physical_block_size: 4096,
            max_sectors_kb: 1024,
            max_hw_sectors_kb: 1024,
            chunk_sectors: 256,
            stack: Some(crate::geometry::stack::Stack {
                kind: "md-raid5".into(),
                chunk_sectors: 128,
                ..Default::default()
            }),
            ..DiskGeometry::default()
        };
        let limits = SplitLimits::from_geometry(&md2);
        assert_eq!(limits.chunk_sectors, 128);
        for (start, cut) in [(0, 128), (128, 256), (256, 384)] {
            assert_eq!(
                split_cause(&limits, Op::Read, start, cut),
                SplitCause::ChunkBoundary
            );
        }
    }

    #[test]
    fn chunk_boundary_short_of_max() {
        let limits = SplitLimits {
            chunk_sectors: 128,
            ..vda()
        };
        assert_eq!(
            split_cause(&limits, Op::Write, 100, 128),
            SplitCause::ChunkBoundary
        );
        // Not on a boundary: something else.
        assert_ne!(
            split_cause(&limits, Op::Write, 100, 120),
            SplitCause::ChunkBoundary
        );
        assert_eq!(limits.max_io_sectors(100), Some(28));
    }

    /// dm cuts ordinary I/O at its targets' and chunks' ends, not by
    /// segments: a short piece there is not `max_segments`.
    #[test]
    fn short_pieces_of_a_bio_based_device_are_its_own_boundaries() {
        let request_based = vda();
        assert_eq!(
            split_cause(&request_based, Op::Write, 96, 128),
            SplitCause::MaxSegments
        );
        let dm = SplitLimits {
            bio_based: true,
            ..vda()
        };
        assert_eq!(split_cause(&dm, Op::Write, 96, 128), SplitCause::Unknown);
    }

    #[test]
    fn discard_splits_are_max_discard_unless_shortened_to_the_granularity() {
        let limits = SplitLimits {
            max_discard_sectors: 2048,
            ..vda()
        };
        assert_eq!(
            split_cause(&limits, Op::Discard, 0, 2048),
            SplitCause::MaxDiscard
        );
        assert_eq!(
            split_cause(&limits, Op::Discard, 100, 2048),
            SplitCause::DiscardGranularity
        );
        // Limit unknown (an import): the cut itself says the discard was over it.
        assert_eq!(
            split_cause(&vda(), Op::Discard, 0, 4),
            SplitCause::MaxDiscard
        );
    }

    #[test]
    fn virt_boundary_piece_ending_inside_a_page() {
        let limits = SplitLimits {
            virt_boundary_mask: 4095,
            ..vda()
        };
        assert_eq!(
            split_cause(&limits, Op::Write, 0, 3),
            SplitCause::VirtBoundary
        );
        // Page-multiple pieces are not blamed on the virt boundary.
        assert_eq!(
            split_cause(&limits, Op::Write, 0, 8),
            SplitCause::MaxSegments
        );
    }

    #[test]
    fn unknown_limits_or_nonsense_give_unknown() {
        let unknown = SplitLimits::default();
        assert_eq!(split_cause(&unknown, Op::Write, 0, 8), SplitCause::Unknown);
        assert_eq!(split_cause(&vda(), Op::Write, 8, 8), SplitCause::Unknown);
        assert_eq!(split_cause(&vda(), Op::Write, 9, 8), SplitCause::Unknown);
        assert_eq!(split_cause(&vda(), Op::Write, 0, 5000), SplitCause::Unknown);
    }

    #[test]
    fn limits_from_geometry() {
        let disk = DiskGeometry {
            max_sectors_kb: 1280,
            max_segments: 254,
            max_segment_size: 65536,
            physical_block_size: 4096,
            logical_block_size: 512,
            chunk_sectors: 0,
            ..DiskGeometry::default()
        };
        let limits = SplitLimits::from_geometry(&disk);
        assert_eq!(limits.max_sectors, 2560);
        assert_eq!(limits.pbs_sectors, 8);
        assert_eq!(limits.lbs_sectors, 1);
        assert_eq!(
            SplitLimits::from_geometry(&DiskGeometry::default()).pbs_sectors,
            1
        );
    }

    #[test]
    fn keys_are_the_documented_ones() {
        let keys: Vec<&str> = SplitCause::ALL.iter().map(|cause| cause.key()).collect();
        assert_eq!(
            keys,
            [
                "max_sectors",
                "max_segments",
                "max_segment_size",
                "chunk_boundary",
                "physical_block",
                "virt_boundary",
                "discard_granularity",
                "max_discard",
                "crypt_max_io",
                "unknown"
            ]
        );
        for (index, cause) in SplitCause::ALL.iter().enumerate() {
            assert_eq!(cause.index(), index);
        }
    }

    /// dm-crypt (6.12) passes a write down 128 KiB at a time, a read at its
    /// own cap: each piece of exactly that size is the cap's.
    #[test]
    fn a_dm_crypt_piece_of_its_cap_is_crypt_max_io() {
        let crypt = SplitLimits {
            bio_based: true,
            max_sectors: 2560,
            crypt_max_read: 512,
            crypt_max_write: 256,
            ..vda()
        };
        assert_eq!(
            split_cause(&crypt, Op::Write, 0, 256),
            SplitCause::CryptMaxIo
        );
        assert_eq!(
            split_cause(&crypt, Op::Write, 8, 264),
            SplitCause::CryptMaxIo
        );
        assert_eq!(
            split_cause(&crypt, Op::Read, 0, 512),
            SplitCause::CryptMaxIo
        );
        assert_eq!(split_cause(&crypt, Op::Read, 0, 256), SplitCause::Unknown);
        assert_eq!(
            split_cause(&vda(), Op::Write, 0, 256),
            SplitCause::MaxSegments
        );
    }
}
