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
use crate::engine::audit::{
    exact_size, fix_text, place_of, proposed_place, PartitionAudit, Proposal,
};
use crate::engine::devices::{DirtyStats, DIRTY_SIZES};
use crate::engine::what_if;
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{
    ratio, BlockSizeSource, Code, Diagnosis, Evidence, LiveEvidence, Op, Severity,
    SubpageBlockSizeEvidence,
};

pub(super) struct SubpageBlockSize;

impl Check for SubpageBlockSize {
    fn code(&self) -> Code {
        Code::SubpageBlockSize
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Diagnosis> {
        subpage_block_size(audit.disk, audit.part, audit.proposal)
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
        live_subpage(traffic)
    }

    /// The same bytes written through 4096-byte buffers, one page-sized bio
    /// each, merged under the device's limits.
    fn what_if(&self, diagnosis: &mut Diagnosis, traffic: &DeviceTraffic<'_>) {
        let predicted = traffic.op(Op::Write).and_then(|writes| {
            what_if::page_sized_buffers(&writes.streams, writes.commands, &traffic.device.limits)
        });
        if let Some(predicted) = predicted {
            diagnosis.evidence.set_what_if(predicted);
        }
    }
}

fn subpage_block_size(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    proposal: Option<Proposal>,
) -> Option<Diagnosis> {
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
    let size_mod_8 = part.size % 8;
    let evidence = SubpageBlockSizeEvidence {
        block_size,
        block_size_source: Some(if part.block_size.is_some() && held_larger.is_none() {
            BlockSizeSource::Blkbszget
        } else {
            BlockSizeSource::Predicted
        }),
        current_block_size: held_larger,
        size_mod_8: Some(size_mod_8),
        partition: Some(place_of(part)),
        proposed: proposed_place(proposal),
        live: LiveEvidence::default(),
        what_if: None,
    };
    let severity = if held_larger.is_some() {
        Severity::Info
    } else if block_size <= 512 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let per_page = PAGE_BYTES / u64::from(block_size.max(1));
    let mut explanation = format!(
        "{name} is {size} sectors long; {size} mod 8 = {size_mod_8}, so its size in bytes is \
         not a multiple of {page}. The kernel gives a partition the largest power-of-two block \
         size up to {page} bytes that divides its size (set_init_blocksize): {predicted} bytes \
         here. Buffered I/O to the raw partition (mkfs, dd without O_DIRECT, databases on raw \
         devices) reaches the block layer as one bio per {block_size}-byte buffer, {per_page} \
         times as many as with {page}-byte blocks.",
        name = part.name,
        size = part.size,
        page = PAGE_BYTES,
    );
    if let Some(current) = held_larger {
        explanation.push_str(&format!(
            " It is open with a {current}-byte block size right now (e.g. mounted); raw \
             I/O gets {predicted} bytes again once nothing holds it."
        ));
    }
    explanation.push_str(&merge_context(disk, block_size));
    Some(Diagnosis::new(
        part.name.clone(),
        severity,
        Evidence::SubpageBlockSize(evidence),
        explanation,
        fix_text(disk, part, proposal),
    ))
}

/// Why many small bios hurt on this particular disk.
fn merge_context(disk: &DiskGeometry, block_size: u32) -> String {
    if disk.nomerges >= 2 {
        return format!(
            " Merging is off on {} (nomerges={}), so each of those bios becomes its own device \
             command.",
            disk.name, disk.nomerges
        );
    }
    let mut context = String::new();
    if disk.virt_boundary_mask != 0 {
        context.push_str(&format!(
            " {} has a virtual boundary (mask {:#x}): bios that do not meet on a boundary \
             cannot be merged, so many can reach the device as separate commands.",
            disk.name, disk.virt_boundary_mask
        ));
    }
    let merged_cap = u64::from(disk.max_segments) * u64::from(block_size);
    let request_cap = u64::from(disk.max_sectors_kb) * 1024;
    if disk.max_segments > 0 && merged_cap < request_cap {
        context.push_str(&format!(
            " Even merged, a request holds at most max_segments = {} of them: {} x {} B = {}, \
             below max_sectors_kb = {}.",
            disk.max_segments,
            disk.max_segments,
            block_size,
            exact_size(merged_cap),
            disk.max_sectors_kb
        ));
    }
    context
}

/// The most common sub-page dirty buffer size, with its count.
fn dominant_subpage_buffer(dirty: &DirtyStats) -> Option<(u64, u64)> {
    (0..DIRTY_SIZES)
        .filter(|&index| DirtyStats::size_of(index) < PAGE_BYTES && dirty.by_size[index] != 0)
        .max_by_key(|&index| dirty.by_size[index])
        .map(|index| (DirtyStats::size_of(index), dirty.by_size[index]))
}

/// `subpage_block_size` from live evidence when the audit could not tell:
/// sub-page dirty buffers (the block size itself), or, without those, a
/// partition of unknown geometry whose writes are nearly all one sub-page size.
fn live_subpage(traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
    if let Some((block_size, buffers)) = traffic.dirty.and_then(dominant_subpage_buffer) {
        let total = traffic.dirty.map_or(buffers, |dirty| dirty.count);
        if let Some(size) = page_sized_geometry(traffic) {
            return Some(chosen_subpage_blocks(
                traffic, block_size, buffers, total, size,
            ));
        }
        let what = format!(
            "{buffers} of {total} dirty buffers written through {} were {block_size} bytes: the device's block size is {block_size} bytes",
            traffic.name
        );
        return Some(subpage_diagnosis(
            traffic,
            block_size,
            what,
            Severity::Warning,
        ));
    }
    let (block_size, bios) = uniform_subpage_writes(traffic)?;
    let what = format!(
        "{bios} of {} writes to {} were {block_size}-byte bios, which is what a {block_size}-byte block size produces (O_DIRECT writes of that size would look the same)",
        traffic.total.user_ios, traffic.name
    );
    Some(subpage_diagnosis(traffic, block_size, what, Severity::Info))
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
/// the geometry: no block size source, no proposal.
fn seen_subpage_evidence(
    traffic: &DeviceTraffic<'_>,
    block_size: u64,
    size_mod_8: Option<u64>,
) -> SubpageBlockSizeEvidence {
    let mut live = LiveEvidence::default();
    add_live_evidence(&mut live, traffic);
    SubpageBlockSizeEvidence {
        block_size: u32::try_from(block_size).unwrap_or(u32::MAX),
        block_size_source: None,
        current_block_size: None,
        size_mod_8,
        partition: partition_place(traffic.partition),
        proposed: None,
        live,
        what_if: None,
    }
}

/// Sub-page dirty buffers on a device whose size gives it 4 KiB blocks:
/// whoever holds it open chose the smaller block size (mkfs.ext4 picks
/// 1024 bytes for filesystems under 512 MiB). Worth knowing, not a fault.
fn chosen_subpage_blocks(
    traffic: &DeviceTraffic<'_>,
    block_size: u64,
    buffers: u64,
    total: u64,
    size: u64,
) -> Diagnosis {
    let evidence = seen_subpage_evidence(
        traffic,
        block_size,
        Some(size % (PAGE_BYTES / SECTOR_BYTES)),
    );
    let name = &traffic.name;
    let explanation = format!(
        "{buffers} of {total} dirty buffers written through {name} were {block_size} bytes. Its size, {size} sectors, is a multiple of 4 KiB, so the kernel gives it a {PAGE_BYTES}-byte block size: the smaller blocks were chosen by whoever holds it open, usually a filesystem made with {block_size}-byte blocks (mkfs.ext4 picks 1024 bytes for filesystems under 512 MiB) or `blockdev --setbsz`. Its metadata and buffered writes go down in {block_size}-byte buffers and rely on merging."
    );
    let fix = format!(
        "nothing in {name}'s geometry; if its I/O pattern matters, make the filesystem with 4096-byte blocks (e.g. mkfs.ext4 -b 4096)"
    );
    Diagnosis::new(
        name.clone(),
        Severity::Info,
        Evidence::SubpageBlockSize(evidence),
        explanation,
        fix,
    )
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

fn subpage_diagnosis(
    traffic: &DeviceTraffic<'_>,
    block_size: u64,
    what: String,
    severity: Severity,
) -> Diagnosis {
    let evidence = seen_subpage_evidence(traffic, block_size, None);
    let sectors_per_page = PAGE_BYTES / SECTOR_BYTES;
    let odd_size = traffic
        .partition
        .filter(|partition| partition.size != 0 && partition.size % sectors_per_page != 0);
    let size_sentence = match odd_size {
        Some(partition) => format!(
            " Its size, {} sectors, is not a multiple of {sectors_per_page} (4 KiB), which is why the kernel chose that block size.",
            partition.size
        ),
        None => String::new(),
    };
    let explanation = format!(
        "{what}, below the {PAGE_BYTES}-byte page, so buffered writes to the raw device (mkfs, dd without O_DIRECT) become one {block_size}-byte bio per buffer and rely on merging to form large commands.{size_sentence}"
    );
    let fix = match odd_size {
        Some(partition) => format!(
            "resize {} to {} sectors (a multiple of 4 KiB) so the kernel picks a 4096-byte block size; until then write with O_DIRECT or set it with `blockdev --setbsz 4096 /dev/{}`",
            traffic.name,
            partition.size - partition.size % sectors_per_page,
            traffic.name
        ),
        None => format!(
            "give {} a size that is a multiple of 4 KiB, or set a 4096-byte block size (`blockdev --setbsz 4096 /dev/{}`) or write with O_DIRECT",
            traffic.name, traffic.name
        ),
    };
    Diagnosis::new(
        traffic.name.clone(),
        severity,
        Evidence::SubpageBlockSize(evidence),
        explanation,
        fix,
    )
}
