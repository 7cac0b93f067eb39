//! `subpage_block_size`: a block size below the page, so buffered I/O to the
//! raw device goes down one small bio per buffer.
//!
//! Static: a partition size that is not a multiple of the page size gives the
//! partition a 512/1024/2048-byte block size. Live: sub-page dirty buffers
//! (the block size itself), or, on a partition of unknown geometry, writes
//! nearly all of one sub-page size. The fix's effect: the same bytes written
//! through 4096-byte buffers.

use super::{add_live_evidence, partition_place, Check, DeviceTraffic};
use crate::blk::{predicted_block_size, PAGE_BYTES, SECTOR_BYTES};
use crate::engine::accounting::{DirtyStats, DIRTY_SIZES};
use crate::engine::placement::{place_of, PartitionAudit};
use crate::engine::what_if;
use crate::model::{
    ratio, BlockSizeSource, Code, Evidence, Finding, LiveEvidence, MergeLimits, Op, Severity,
    SubpageBlockSizeEvidence, SubpageFix, SubpageSeen,
};

pub(super) struct SubpageBlockSize;

impl Check for SubpageBlockSize {
    fn code(&self) -> Code {
        Code::SubpageBlockSize
    }

    /// The block size the kernel gives the partition for its size
    /// (`set_init_blocksize`), or BLKBSZGET's, when it is below the page.
    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Finding> {
        let (disk, part) = (audit.disk, audit.part);
        let predicted = predicted_block_size(part.size, disk.logical_block_size);
        if u64::from(predicted) >= PAGE_BYTES {
            return None;
        }
        // BLKBSZGET wins, unless someone holds the partition open with a larger
        // block size (a mounted filesystem): then raw I/O gets the predicted one
        // only once they let go.
        let held_larger = part.block_size.filter(|&current| current > predicted);
        let block_size = match (part.block_size, held_larger) {
            (Some(current), None) => current,
            _ => predicted,
        };
        let evidence = SubpageBlockSizeEvidence {
            block_size,
            block_size_source: Some(if part.block_size.is_some() && held_larger.is_none() {
                BlockSizeSource::Blkbszget
            } else {
                BlockSizeSource::Predicted
            }),
            current_block_size: held_larger,
            size_mod_8: Some(part.size % 8),
            partition: Some(place_of(part)),
            fix: SubpageFix::Partition(audit.proposal),
            live: LiveEvidence::default(),
            what_if: None,
            seen: SubpageSeen::Geometry {
                predicted_block_size: predicted,
                merging: MergeLimits {
                    nomerges: disk.nomerges,
                    virt_boundary_mask: disk.virt_boundary_mask,
                    max_segments: disk.max_segments,
                    max_sectors_kb: disk.max_sectors_kb,
                },
            },
        };
        let severity = if held_larger.is_some() {
            Severity::Info
        } else if block_size <= 512 {
            Severity::Critical
        } else {
            Severity::Warning
        };
        Some(Finding::new(
            part.name.clone(),
            disk.name.clone(),
            severity,
            Evidence::SubpageBlockSize(evidence),
        ))
    }

    /// From live evidence when the audit could not tell: sub-page dirty
    /// buffers (the block size itself), or, without those, a partition of
    /// unknown geometry whose writes are nearly all one sub-page size.
    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Finding> {
        if let Some((block_size, buffers)) = traffic.dirty.and_then(dominant_subpage_buffer) {
            let total = traffic.dirty.map_or(buffers, |dirty| dirty.count);
            if let Some(size) = page_sized_geometry(traffic) {
                // Whoever holds it open chose the smaller block size (mkfs.ext4
                // picks 1024 bytes for filesystems under 512 MiB). Worth
                // knowing, not a fault.
                let evidence = seen_subpage_evidence(
                    traffic,
                    block_size,
                    Some(size % (PAGE_BYTES / SECTOR_BYTES)),
                    SubpageSeen::ChosenBlocks {
                        buffers,
                        total,
                        size,
                    },
                    SubpageFix::FilesystemBlocks,
                );
                return Some(finding(traffic, Severity::Info, evidence));
            }
            let seen = SubpageSeen::DirtyBuffers { buffers, total };
            return Some(seen_subpage(traffic, block_size, seen, Severity::Warning));
        }
        let (block_size, bios) = uniform_subpage_writes(traffic)?;
        let seen = SubpageSeen::UniformWrites {
            bios,
            writes: traffic.total.user_ios,
        };
        Some(seen_subpage(traffic, block_size, seen, Severity::Info))
    }

    /// The same bytes written through 4096-byte buffers, one page-sized bio
    /// each, merged under the device's limits unless merging is off.
    fn what_if(&self, finding: &mut Finding, traffic: &DeviceTraffic<'_>) {
        let merges = traffic.device.geometry.nomerges == 0;
        let predicted = traffic.op(Op::Write).and_then(|writes| {
            what_if::page_sized_buffers(
                &writes.streams,
                writes.commands,
                &traffic.device.limits,
                merges,
            )
        });
        if let Some(predicted) = predicted {
            finding.evidence.set_what_if(predicted);
        }
    }
}

/// The most common sub-page dirty buffer size, with its count.
fn dominant_subpage_buffer(dirty: &DirtyStats) -> Option<(u64, u64)> {
    (0..DIRTY_SIZES)
        .filter(|&index| DirtyStats::size_of(index) < PAGE_BYTES && dirty.by_size[index] != 0)
        .max_by_key(|&index| dirty.by_size[index])
        .map(|index| (DirtyStats::size_of(index), dirty.by_size[index]))
}

/// The device's size in sectors when it is known and gives the device a
/// page-sized block size: then sub-page buffers were someone's choice.
fn page_sized_geometry(traffic: &DeviceTraffic<'_>) -> Option<u64> {
    let geometry = &traffic.device.geometry;
    let size = match traffic.partition {
        Some(partition) => partition.size,
        None if traffic.device.known => geometry.size_sectors,
        None => 0,
    };
    let block_size = predicted_block_size(size, geometry.logical_block_size);
    (size != 0 && u64::from(block_size) >= PAGE_BYTES).then_some(size)
}

/// Evidence for sub-page blocks seen in the traffic rather than read from
/// the geometry: no block size source, no partition proposal.
fn seen_subpage_evidence(
    traffic: &DeviceTraffic<'_>,
    block_size: u64,
    size_mod_8: Option<u64>,
    seen: SubpageSeen,
    fix: SubpageFix,
) -> SubpageBlockSizeEvidence {
    let mut live = LiveEvidence::default();
    add_live_evidence(&mut live, traffic);
    SubpageBlockSizeEvidence {
        block_size: u32::try_from(block_size).unwrap_or(u32::MAX),
        block_size_source: None,
        current_block_size: None,
        size_mod_8,
        partition: partition_place(traffic.partition),
        fix,
        live,
        what_if: None,
        seen,
    }
}

fn finding(
    traffic: &DeviceTraffic<'_>,
    severity: Severity,
    evidence: SubpageBlockSizeEvidence,
) -> Finding {
    Finding::new(
        traffic.name.clone(),
        traffic.disk_name().to_string(),
        severity,
        Evidence::SubpageBlockSize(evidence),
    )
}

/// Sub-page blocks seen in dirty buffers or bios: on a partition whose size
/// is not a whole number of pages (why the kernel chose them), the fix is
/// that size rounded down to one.
fn seen_subpage(
    traffic: &DeviceTraffic<'_>,
    block_size: u64,
    seen: SubpageSeen,
    severity: Severity,
) -> Finding {
    let sectors_per_page = PAGE_BYTES / SECTOR_BYTES;
    let odd_size = traffic
        .partition
        .filter(|partition| partition.size != 0 && partition.size % sectors_per_page != 0);
    let fix = match odd_size {
        Some(partition) => SubpageFix::Resize {
            from: partition.size,
            to: partition.size - partition.size % sectors_per_page,
        },
        None => SubpageFix::PageSizedBlocks,
    };
    let evidence = seen_subpage_evidence(traffic, block_size, None, seen, fix);
    finding(traffic, severity, evidence)
}

/// Sub-page writes must be at least this many...
pub const MIN_SUBPAGE_BIOS: u64 = 64;

/// ...and this share of the device's writes, all of one size.
const SUBPAGE_BIO_SHARE: f64 = 0.9;

/// On a partition whose geometry is unknown: the one sub-page size nearly all writes had.
fn uniform_subpage_writes(traffic: &DeviceTraffic<'_>) -> Option<(u64, u64)> {
    let partition = traffic.partition?;
    if partition.size != 0 || partition.block_size.is_some() {
        return None;
    }
    let write = traffic.op(Op::Write)?;
    let histogram = write.user_io_sectors.histogram();
    let sectors = histogram.value_at_quantile(0.5);
    if sectors == 0 || sectors * SECTOR_BYTES >= PAGE_BYTES {
        return None;
    }
    let bios = histogram.count_at(sectors);
    if bios < MIN_SUBPAGE_BIOS || ratio(bios, histogram.len()) < SUBPAGE_BIO_SHARE {
        return None;
    }
    Some((sectors * SECTOR_BYTES, bios))
}
