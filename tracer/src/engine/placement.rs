//! Where a partition sits against its disk's alignment boundaries
//! ([`Placement`]), and the aligned geometry to use instead ([`propose`]):
//! what the geometry checks under `engine/diagnose/` read.

use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{PartitionPlace, ProposedPlace};

/// fdisk's and parted's default alignment: 1 MiB.
const DEFAULT_GRAIN_SECTORS: u64 = 2048;

/// One partition as the audit sees it: its disk, where it sits, and the
/// aligned geometry proposed for it (the same one for every code).
pub(crate) struct PartitionAudit<'a> {
    pub disk: &'a DiskGeometry,
    pub part: &'a PartitionGeometry,
    pub placement: Placement,
    /// `None` when the partition is too small to hold an aligned page.
    pub proposal: Option<ProposedPlace>,
}

/// Where a start sector sits relative to the disk's alignment boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// max(physical block size, minimum I/O size), bytes: what the kernel
    /// aligns `alignment_offset` to.
    pub granularity: u32,
    /// Bytes past the previous granularity boundary (0: aligned).
    pub start_offset_bytes: u64,
    /// The kernel's `alignment_offset` for a partition here: bytes to the
    /// next boundary (what mkfs reports as "alignment is offset by").
    pub kernel_alignment_offset: u64,
    /// The optimal I/O size checked, bytes (0: none that matters).
    pub io_opt: u64,
    /// Bytes past the previous io_opt boundary.
    pub io_opt_offset_bytes: u64,
    /// Sectors past the previous chunk boundary (`chunk_sectors` is absolute).
    pub chunk_offset_sectors: u64,
}

impl Placement {
    pub fn of(disk: &DiskGeometry, start: u64) -> Placement {
        let granularity = granularity(disk);
        let start_bytes = start.saturating_mul(SECTOR_BYTES);
        // block/blk-settings.c queue_limit_alignment_offset(): aligned when
        // start % granularity equals the disk's alignment offset.
        let offset_past = |unit: u64| -> u64 {
            if unit <= SECTOR_BYTES {
                return 0;
            }
            let disk_offset = u64::from(disk.alignment_offset) % unit;
            (start_bytes % unit + unit - disk_offset) % unit
        };
        let start_offset_bytes = offset_past(u64::from(granularity));
        let kernel_alignment_offset = if start_offset_bytes == 0 {
            0
        } else {
            u64::from(granularity) - start_offset_bytes
        };
        let io_opt = io_opt_that_matters(disk);
        let chunk = u64::from(disk.chunk_sectors);
        Placement {
            granularity,
            start_offset_bytes,
            kernel_alignment_offset,
            io_opt,
            io_opt_offset_bytes: offset_past(io_opt),
            chunk_offset_sectors: if chunk > 1 { start % chunk } else { 0 },
        }
    }

    fn misaligned(&self) -> bool {
        self.start_offset_bytes != 0
            || self.io_opt_offset_bytes != 0
            || self.chunk_offset_sectors != 0
    }
}

fn granularity(disk: &DiskGeometry) -> u32 {
    disk.physical_block_size
        .max(disk.minimum_io_size)
        .max(disk.logical_block_size)
}

/// The optimal I/O size when it asks for more than the granularity. Values
/// that are not a multiple of the granularity (some USB bridges report
/// 33553920) are not a real stripe and are ignored, as fdisk does.
fn io_opt_that_matters(disk: &DiskGeometry) -> u64 {
    let io_opt = u64::from(disk.optimal_io_size);
    let granularity = u64::from(granularity(disk));
    if io_opt > granularity && granularity > 0 && io_opt % granularity == 0 {
        io_opt
    } else {
        0
    }
}

/// Start rounded up to the next boundary of 1 MiB, the granularity, io_opt
/// and chunk (only if the current one is misaligned); size rounded down to a
/// whole number of pages so the end stays inside the current partition.
/// `None` when the partition is too small to hold an aligned page.
pub fn propose(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    placement: &Placement,
) -> Option<ProposedPlace> {
    let end = part.start.checked_add(part.size)?;
    let (start, start_step) = if placement.misaligned() {
        let step = [
            DEFAULT_GRAIN_SECTORS,
            u64::from(placement.granularity) / SECTOR_BYTES,
            placement.io_opt / SECTOR_BYTES,
            u64::from(disk.chunk_sectors),
        ]
        .into_iter()
        .filter(|&sectors| sectors > 1)
        .fold(1, lcm);
        let offset = u64::from(disk.alignment_offset) / SECTOR_BYTES % step;
        let base = part.start.saturating_sub(offset);
        (base.div_ceil(step).checked_mul(step)? + offset, step)
    } else {
        (part.start, 0)
    };
    let size_step = (PAGE_BYTES.max(u64::from(disk.logical_block_size)) / SECTOR_BYTES).max(1);
    let size = end.checked_sub(start)? / size_step * size_step;
    (size > 0).then_some(ProposedPlace {
        proposed_start: start,
        proposed_size: size,
        start_step,
        partition_number: part.number,
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

pub(crate) fn place_of(part: &PartitionGeometry) -> PartitionPlace {
    PartitionPlace {
        partition_start: part.start,
        partition_size: part.size,
    }
}
