//! Diagnoses: the static audit enriched with what the traffic showed, plus
//! the findings only traffic can support (`split_amplification`,
//! `merge_blocked`, `requeued_commands`, and `subpage_block_size` seen in
//! dirty buffers).

use super::audit::{audit_disk, place_of};
use super::devices::{DeviceState, DirtyStats, DIRTY_SIZES};
use super::split::SplitCause;
use super::stats::{op_index, quantile_bytes, OpStats, ALL_ORIGINS, OP_COUNT};
use super::table::FastMap;
use super::what_if;
use crate::blk::{predicted_block_size, PAGE_BYTES, SECTOR_BYTES};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{
    ratio, Code, Diagnosis, DirtyBuffers, Evidence, LiveEvidence, MergeBlockedEvidence,
    ObservedTraffic, Op, PartitionPlace, RequeueCause, RequeuedCommandsEvidence, Severity,
    SplitAmplificationEvidence, SubpageBlockSizeEvidence,
};

/// `split_amplification` needs at least this many splits...
pub const MIN_SPLITS: u64 = 16;
/// ...and at least this share of user I/Os split (10%): a few large I/Os
/// split among many small ones (mkfs zeroing tables) amplify nothing much.
pub const MIN_SPLIT_SHARE: f64 = 0.1;
/// Alignment-caused splits on at least half the user I/Os are critical.
pub const CRITICAL_SPLIT_SHARE: f64 = 0.5;
/// Commands carrying this many bytes on average are large enough that an
/// extra one per I/O costs the device little: at 256 KiB even a 3 GB/s
/// device spends ~85 µs moving data against a few µs of per-command work.
pub const LARGE_COMMAND_BYTES: u64 = 256 * 1024;
/// `merge_blocked` needs at least this many adjacent unmerged commands...
pub const MIN_ADJACENT_UNMERGED: u64 = 16;
/// ...making up at least this share of the device's commands.
pub const MIN_ADJACENT_SHARE: f64 = 0.1;

/// One disk's own traffic, or one partition's: what a diagnosis is about.
struct DeviceTraffic<'a> {
    name: String,
    device: &'a DeviceState,
    partition: Option<&'a PartitionGeometry>,
    /// Data operations (everything but flushes), all origins.
    total: OpStats,
    /// The operation with the most user I/Os, named in explanations.
    main_op: Op,
    /// Each operation on its own, all origins.
    per_op: [Option<OpStats>; OP_COUNT],
    dirty: Option<&'a DirtyStats>,
}

impl DeviceTraffic<'_> {
    fn disk_name(&self) -> &str {
        &self.device.name
    }

    fn op(&self, op: Op) -> Option<&OpStats> {
        self.per_op[op_index(op)].as_ref()
    }
}

fn traffic_of<'a>(
    device: &'a DeviceState,
    dirty: &'a FastMap<u32, DirtyStats>,
) -> Vec<DeviceTraffic<'a>> {
    let mut observed = Vec::with_capacity(device.parts.len() + 1);
    let build = |name: String,
                 stats: &super::stats::DeviceStats,
                 partition: Option<&'a PartitionGeometry>,
                 dev: Option<u32>| {
        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
        stats.collect_into(&ALL_ORIGINS, &mut per_op);
        let mut total = OpStats::default();
        let mut main_op = Op::Write;
        let mut main_count = 0;
        for op in Op::ALL {
            if op == Op::Flush {
                continue;
            }
            if let Some(stats) = &per_op[op_index(op)] {
                total.absorb(stats);
                if stats.user_ios > main_count {
                    main_count = stats.user_ios;
                    main_op = op;
                }
            }
        }
        DeviceTraffic {
            name,
            device,
            partition,
            total,
            main_op,
            per_op,
            dirty: dev.and_then(|dev| dirty.get(&dev)),
        }
    };
    observed.push(build(device.name.clone(), &device.whole, None, device.dev));
    for part in &device.parts {
        observed.push(build(
            part.name.clone(),
            &part.stats,
            Some(&part.geometry),
            Some(part.dev),
        ));
    }
    observed
}

pub(super) fn diagnose(
    devices: &[DeviceState],
    dirty: &FastMap<u32, DirtyStats>,
) -> Vec<Diagnosis> {
    diagnose_with(devices, dirty, audit_disk)
}

/// [`diagnose`] with the static audit passed in, so tests can supply findings.
pub(super) fn diagnose_with(
    devices: &[DeviceState],
    dirty: &FastMap<u32, DirtyStats>,
    audit: impl Fn(&DiskGeometry) -> Vec<Diagnosis>,
) -> Vec<Diagnosis> {
    let mut found = Vec::new();
    for device in devices {
        let first_of_device = found.len();
        let mut audited = if device.known {
            audit(&device.geometry)
        } else {
            Vec::new()
        };
        let observed = traffic_of(device, dirty);
        for diagnosis in &mut audited {
            let traffic = observed
                .iter()
                .find(|traffic| traffic.name == diagnosis.device);
            if let (Some(traffic), Some(live)) = (traffic, diagnosis.evidence.live_mut()) {
                add_live_evidence(live, traffic);
            }
        }
        for traffic in &observed {
            let audited_subpage = audited.iter().any(|diagnosis| {
                diagnosis.code == Code::SubpageBlockSize && diagnosis.device == traffic.name
            });
            if !audited_subpage {
                found.extend(live_subpage(traffic));
            }
            found.extend(split_amplification(traffic));
            found.extend(merge_blocked(traffic));
            found.extend(requeued_commands(traffic));
        }
        found.extend(audited);
        for diagnosis in &mut found[first_of_device..] {
            if let Some(traffic) = observed.iter().find(|t| t.name == diagnosis.device) {
                let most_requeued = Op::ALL
                    .iter()
                    .filter_map(|&op| traffic.op(op))
                    .max_by_key(|stats| stats.requeues);
                what_if::attach(
                    diagnosis,
                    &traffic.device.geometry,
                    &traffic.device.limits,
                    what_if::Traffic {
                        total: &traffic.total,
                        writes: traffic.op(Op::Write),
                        most_requeued,
                    },
                );
            }
        }
    }
    found
}

/// Live numbers added to a static finding when the device saw traffic.
fn add_live_evidence(live: &mut LiveEvidence, traffic: &DeviceTraffic<'_>) {
    let total = &traffic.total;
    if total.user_ios > 0 {
        live.traffic = Some(ObservedTraffic {
            observed_user_ios: total.user_ios,
            observed_bio_size_p50: quantile_bytes(&total.user_io_sectors, 0.5),
            observed_subpage_bio_share: round3(subpage_share(total)),
            observed_commands: total.commands,
            bios_per_command: round3(ratio(total.user_ios, total.commands)),
            misaligned_command_share: round3(ratio(total.misaligned_pbs, total.commands)),
            misaligned_4k_command_share: round3(ratio(total.misaligned_4k, total.commands)),
            extra_split_fragments: total.splits,
        });
    }
    if let Some(dirty) = traffic.dirty {
        live.dirty = Some(DirtyBuffers {
            dirty_buffers: dirty.count,
            dirty_buffer_sizes: (0..DIRTY_SIZES)
                .filter(|&index| dirty.by_size[index] != 0)
                .map(|index| (DirtyStats::size_of(index), dirty.by_size[index]))
                .collect(),
        });
    }
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

/// A partition's place, when its geometry is known.
fn partition_place(partition: Option<&PartitionGeometry>) -> Option<PartitionPlace> {
    partition
        .filter(|partition| partition.size != 0)
        .map(place_of)
}

fn split_amplification(traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
    let total = &traffic.total;
    let share = ratio(total.splits, total.user_ios);
    if total.splits < MIN_SPLITS || share < MIN_SPLIT_SHARE {
        return None;
    }
    let cause = total.dominant_cause()?;
    let cause_count = total.split_causes[cause.index()];
    let geometry = &traffic.device.geometry;
    let amplification = ratio(total.commands, total.user_ios);
    let command_size_mean = total.bytes.checked_div(total.commands).unwrap_or(0);
    let evidence = SplitAmplificationEvidence {
        cause,
        causes: SplitCause::ALL
            .iter()
            .filter(|cause| total.split_causes[cause.index()] != 0)
            .map(|&cause| (cause, total.split_causes[cause.index()]))
            .collect(),
        splits: total.splits,
        user_ios: total.user_ios,
        fragments: total.fragments,
        commands: total.commands,
        split_share: round3(share),
        amplification: round3(amplification),
        user_io_size_p50: quantile_bytes(&total.user_io_sectors, 0.5),
        command_size_p50: quantile_bytes(&total.command_sectors, 0.5),
        command_size_mean,
        max_sectors_kb: geometry.max_sectors_kb,
        max_hw_sectors_kb: geometry.max_hw_sectors_kb,
        max_segments: geometry.max_segments,
        max_segment_size: geometry.max_segment_size,
        physical_block_size: geometry.physical_block_size,
        chunk_sectors: geometry.chunk_sectors,
        virt_boundary_mask: geometry.virt_boundary_mask,
        discard_granularity: geometry.discard_granularity,
        partition: partition_place(traffic.partition),
        proposed_max_sectors_kb: None,
        what_if: None,
    };

    let (detail, fix, can_fix) = split_fix(traffic, cause);
    // What the split costs the device, net of merges: nothing when merges
    // left at most one command per user I/O, little when the pieces are
    // still large commands.
    let cost = if amplification <= 1.0 {
        Some(format!(
            " Net of merges the device received {amplification:.2} commands per user I/O, no more than without the splits, so they cost nothing here."
        ))
    } else if command_size_mean >= LARGE_COMMAND_BYTES {
        Some(format!(
            " The pieces are still large commands ({} on average), so the extra commands cost the device little.",
            crate::engine::audit::exact_size(command_size_mean / 1024 * 1024)
        ))
    } else {
        None
    };
    let severity = if cost.is_some() {
        Severity::Info
    } else if cause.is_alignment() && share >= CRITICAL_SPLIT_SHARE {
        Severity::Critical
    } else if can_fix {
        Severity::Warning
    } else {
        Severity::Info
    };
    let explanation = format!(
        "{} of {} {} user I/Os on {} ({:.1}%) were split, {} of the splits by {} ({cause_count}); they became {} fragments and {} commands, {:.2} commands per user I/O (median user I/O {} bytes, median command {} bytes). {detail}{}",
        total.splits,
        total.user_ios,
        traffic.main_op.as_str(),
        traffic.name,
        share * 100.0,
        if cause_count == total.splits { "all" } else { "most" },
        cause.key(),
        total.fragments,
        total.commands,
        amplification,
        evidence.user_io_size_p50,
        evidence.command_size_p50,
        cost.unwrap_or_default(),
    );
    Some(Diagnosis::new(
        traffic.name.clone(),
        severity,
        Evidence::SplitAmplification(evidence),
        explanation,
        fix,
    ))
}

/// A sentence on the limit involved, the fix, and whether a setting can fix it.
fn split_fix(traffic: &DeviceTraffic<'_>, cause: SplitCause) -> (String, String, bool) {
    let geometry = &traffic.device.geometry;
    let disk = traffic.disk_name();
    let pbs = u64::from(geometry.physical_block_size).max(SECTOR_BYTES);
    let pbs_sectors = pbs / SECTOR_BYTES;
    match cause {
        SplitCause::MaxSectors => {
            let max_kb = geometry.max_sectors_kb;
            let hw_kb = geometry.max_hw_sectors_kb;
            let detail = format!("Each piece is max_sectors_kb = {max_kb} KiB, the queue's size cap.");
            if hw_kb > max_kb {
                let suggested = what_if::suggested_max_sectors_kb(
                    max_kb,
                    hw_kb,
                    quantile_bytes(&traffic.total.user_io_sectors, 0.9),
                );
                (
                    detail,
                    format!(
                        "raise /sys/block/{disk}/queue/max_sectors_kb to {suggested} (max_hw_sectors_kb is {hw_kb})"
                    ),
                    true,
                )
            } else {
                (
                    detail,
                    format!(
                        "none needed at the queue: {disk} is at its hardware limit (max_hw_sectors_kb {hw_kb}); submit I/O of at most {max_kb} KiB if the split matters"
                    ),
                    false,
                )
            }
        }
        SplitCause::PhysicalBlock => match traffic.partition.filter(|partition| partition.size != 0) {
            Some(partition) => {
                let aligned = partition.start.div_ceil(2048).saturating_mul(2048);
                (
                    format!(
                        "The kernel ends split pieces on absolute {pbs}-byte physical-block boundaries, and {} starts at sector {}, {} sectors past one, so every large I/O gets a short extra piece.",
                        traffic.name,
                        partition.start,
                        partition.start % pbs_sectors
                    ),
                    format!(
                        "recreate {} starting at a multiple of {pbs_sectors} sectors, e.g. sector {aligned} (1 MiB aligned), with a size that is a multiple of {pbs_sectors} sectors",
                        traffic.name
                    ),
                    true,
                )
            }
            None => (
                format!(
                    "The kernel ends split pieces on absolute {pbs}-byte physical-block boundaries and these I/Os did not start on one."
                ),
                format!("align I/O offsets on {} to {pbs} bytes", traffic.name),
                true,
            ),
        },
        SplitCause::ChunkBoundary => (
            format!(
                "The device splits I/O at every {}-sector chunk boundary (chunk_sectors), counted from the start of the disk.",
                geometry.chunk_sectors
            ),
            format!(
                "align {}'s start and the I/O to {} sectors ({} KiB chunks)",
                traffic.name,
                geometry.chunk_sectors,
                u64::from(geometry.chunk_sectors) / 2
            ),
            true,
        ),
        SplitCause::MaxSegments => (
            format!(
                "The pieces are far below max_sectors_kb ({} KiB): the bios carried more memory segments than max_segments ({}) allows.",
                geometry.max_sectors_kb, geometry.max_segments
            ),
            format!(
                "use fewer, larger, physically contiguous buffers (page-aligned or huge pages) or I/O of at most {} pages; max_segments {} is a driver limit of {disk}",
                geometry.max_segments, geometry.max_segments
            ),
            true,
        ),
        SplitCause::MaxSegmentSize => (
            format!(
                "Every segment was full at max_segment_size ({} bytes) and there were max_segments ({}) of them.",
                geometry.max_segment_size, geometry.max_segments
            ),
            format!(
                "submit I/O of at most {} KiB on {disk}; max_segment_size is a driver limit",
                u64::from(geometry.max_segments) * u64::from(geometry.max_segment_size) / 1024
            ),
            false,
        ),
        SplitCause::VirtBoundary => (
            format!(
                "The device has a virt boundary (mask {:#x}): buffers that start or end inside a {}-byte page cannot share a request segment list.",
                geometry.virt_boundary_mask,
                geometry.virt_boundary_mask.saturating_add(1)
            ),
            format!(
                "use buffers aligned to {} bytes with lengths a multiple of it (e.g. a 4096-byte block size)",
                geometry.virt_boundary_mask.saturating_add(1)
            ),
            true,
        ),
        SplitCause::DiscardGranularity => (
            format!(
                "Discards are split on absolute discard_granularity ({} bytes) boundaries.",
                geometry.discard_granularity
            ),
            format!(
                "align {}'s start and discard ranges to {} bytes",
                traffic.name, geometry.discard_granularity
            ),
            true,
        ),
        SplitCause::Unknown => (
            "No queue limit of this device explains the split points.".to_string(),
            format!(
                "check for stacked devices (device-mapper, md) or inline encryption above {disk}, which split on their own limits"
            ),
            false,
        ),
    }
}

fn merge_blocked(traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
    let total = &traffic.total;
    let adjacent = total.adjacent_unmerged;
    let share = ratio(adjacent, total.commands);
    if adjacent < MIN_ADJACENT_UNMERGED || share < MIN_ADJACENT_SHARE {
        return None;
    }
    let geometry = &traffic.device.geometry;
    let disk = traffic.disk_name();
    let bios_per_command = ratio(total.user_ios + total.splits, total.commands);
    let command_p50 = quantile_bytes(&total.command_sectors, 0.5);
    let bio_p50 = quantile_bytes(&total.user_io_sectors, 0.5);
    // Sub-page bios on a partition with a sub-page block size are the
    // subpage_block_size finding itself (its explanation names the virt
    // boundary and segment caps); one root cause, one diagnosis.
    let subpage_partition = traffic.partition.is_some_and(|part| {
        let block_size = part
            .block_size
            .unwrap_or_else(|| predicted_block_size(part.size, geometry.logical_block_size));
        u64::from(block_size) < PAGE_BYTES
    });
    if subpage_partition && bio_p50 < PAGE_BYTES {
        return None;
    }
    let evidence = MergeBlockedEvidence {
        adjacent_unmerged_commands: adjacent,
        commands: total.commands,
        user_ios: total.user_ios,
        bios_per_command: round3(bios_per_command),
        command_size_p50: command_p50,
        user_io_size_p50: bio_p50,
        max_sectors_kb: geometry.max_sectors_kb,
        nomerges: geometry.nomerges,
        virt_boundary_mask: geometry.virt_boundary_mask,
        max_segments: geometry.max_segments,
        max_segment_size: geometry.max_segment_size,
        scheduler: geometry.scheduler.clone(),
        partition: partition_place(traffic.partition),
        what_if: None,
    };

    let scale = if share >= CRITICAL_SPLIT_SHARE {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let (reason, fix, severity) = if geometry.nomerges != 0 {
        (
            format!(
                "Merging is switched off (nomerges = {}).",
                geometry.nomerges
            ),
            format!("echo 0 > /sys/block/{disk}/queue/nomerges"),
            scale,
        )
    } else if geometry.virt_boundary_mask != 0 {
        (
            format!(
                "The device's virt boundary (mask {:#x}) refuses to merge bios that start or end inside a page.",
                geometry.virt_boundary_mask
            ),
            "write page-aligned bios whose lengths are multiples of 4 KiB (a 4096-byte block size)".to_string(),
            scale,
        )
    } else if geometry.scheduler.is_empty() || geometry.scheduler == "none" {
        (
            "No limit forbids these merges, but with no I/O scheduler (none) blk-mq merges a bio only into a request still in the submitting task's plug or in its CPU's software queue, so neighbouring bios submitted from different tasks or CPUs, or after the previous request went to the driver, stay separate.".to_string(),
            format!(
                "echo mq-deadline > /sys/block/{disk}/queue/scheduler (it merges across CPUs), or submit the sequential stream from one task in larger writes"
            ),
            Severity::Warning,
        )
    } else {
        (
            format!(
                "No limit forbids these merges and the {} scheduler had the bios queued; the kernel also refuses merges between bios whose flags differ (sync, FUA, priority, write hint) or whose cgroups differ, which block tracepoints do not show.",
                geometry.scheduler
            ),
            "check whether neighbouring writes differ in flags (O_DSYNC, RWF_* flags, ioprio) or come from different cgroups".to_string(),
            Severity::Info,
        )
    };
    let explanation = format!(
        "{adjacent} of {} {} commands on {} ({:.1}%) started exactly where the previous one ended and their bios were queued before it was issued, yet they were not merged although the merged command would fit max_sectors_kb ({} KiB) and max_segments ({}); the median command is {command_p50} bytes, with {:.1} bios per command. Merging them would have saved up to {adjacent} commands. {reason}",
        total.commands,
        traffic.main_op.as_str(),
        traffic.name,
        share * 100.0,
        geometry.max_sectors_kb,
        geometry.max_segments,
        bios_per_command,
    );
    Some(Diagnosis::new(
        traffic.name.clone(),
        severity,
        Evidence::MergeBlocked(evidence),
        explanation,
        fix,
    ))
}

/// `requeued_commands` needs at least this many requeues...
pub const MIN_REQUEUES: u64 = 16;
/// ...on at least this share of the commands; from 10% on it is a warning.
pub const MIN_REQUEUE_SHARE: f64 = 0.05;
const WARNING_REQUEUE_SHARE: f64 = 0.1;
/// virtio-blk without indirect descriptors gives the block layer half as
/// many tags as the ring has descriptors (every command takes at least two).
const VIRTIO_DESCRIPTORS_PER_TAG: u64 = 2;
/// Descriptors a virtio-blk command takes beyond its data segments (the
/// request header and the status byte).
pub(super) const VIRTIO_HEADER_DESCRIPTORS: u64 = 2;

fn requeued_commands(traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
    // Judged on the operation requeued most, so a busy disk's other traffic
    // does not dilute the share.
    let (op, total) = Op::ALL
        .iter()
        .filter_map(|&op| traffic.op(op).map(|stats| (op, stats)))
        .max_by_key(|(_, stats)| stats.requeues)?;
    let share = ratio(total.requeues, total.commands);
    if total.requeues < MIN_REQUEUES || share < MIN_REQUEUE_SHARE {
        return None;
    }
    let geometry = &traffic.device.geometry;
    let disk = traffic.disk_name();
    let delay = &total.requeue_delay_us;
    let quantile_us = |q: f64| {
        if delay.is_empty() {
            0
        } else {
            delay.lowest_equivalent(delay.value_at_quantile(q))
        }
    };
    let commands = total.command_sectors.histogram();
    let command_max = if commands.is_empty() {
        0
    } else {
        commands.lowest_equivalent(commands.max()) * SECTOR_BYTES
    };
    // O_DIRECT from user memory and the page cache give one segment per page.
    let largest_command_segments = command_max
        .div_ceil(PAGE_BYTES)
        .min(u64::from(geometry.max_segments).max(1));
    let tags = u64::from(geometry.hw_queue_tags);
    let ring = tags * VIRTIO_DESCRIPTORS_PER_TAG;
    let ring_filler = geometry.virtio_indirect_desc == Some(false)
        && tags > 0
        && (largest_command_segments + VIRTIO_HEADER_DESCRIPTORS) * 2 > ring;
    let evidence = RequeuedCommandsEvidence {
        requeues: total.requeues,
        commands: total.commands,
        requeue_share: round3(share),
        requeue_delay_p50_us: quantile_us(0.5),
        requeue_delay_p99_us: quantile_us(0.99),
        command_size_p50: quantile_bytes(&total.command_sectors, 0.5),
        command_size_max: command_max,
        largest_command_segments,
        max_segments: geometry.max_segments,
        max_sectors_kb: geometry.max_sectors_kb,
        nr_requests: geometry.nr_requests,
        hw_queue_tags: geometry.hw_queue_tags,
        virtio_indirect_desc: geometry.virtio_indirect_desc,
        cause: ring_filler.then_some(RequeueCause::VirtioRingFull),
        partition: partition_place(traffic.partition),
        what_if: None,
        workaround_what_if: None,
    };
    let what = format!(
        "{} times on {} ({:.1}% of its {} {} commands) the driver handed an issued command back (block_rq_requeue) and the block layer issued it again later: p50 {} µs, p99 {} µs after the requeue.",
        total.requeues,
        traffic.name,
        share * 100.0,
        total.commands,
        op.as_str(),
        evidence.requeue_delay_p50_us,
        evidence.requeue_delay_p99_us,
    );
    let (why, fix) = if ring_filler {
        let max_segments = u64::from(geometry.max_segments);
        let half_ring_pages = (tags.saturating_sub(VIRTIO_HEADER_DESCRIPTORS)).max(1);
        (
            format!(
                " {disk} is a virtio disk whose device does not offer indirect descriptors (feature bit 28 is clear), so a command takes one virtqueue descriptor per data segment plus {VIRTIO_HEADER_DESCRIPTORS}. Its ring has about {ring} descriptors (without indirect descriptors virtio-blk gives the block layer half as many tags: {tags}), and a command may carry max_segments = {max_segments} segments, {} descriptors. The largest command here, {command_max} bytes, needed up to {largest_command_segments} segments (one per 4 KiB page, as direct I/O from user memory gets): more than half the ring, so a command issued beside it found no room and was requeued until it completed.",
                max_segments + VIRTIO_HEADER_DESCRIPTORS,
            ),
            // Not a larger queue-size: qemu sizes seg_max to the ring
            // (queue-size - 2), so bigger commands fill a bigger ring too.
            format!(
                "on the host, offer indirect descriptors (VIRTIO_RING_F_INDIRECT_DESC): qemu -device virtio-blk-pci,...,indirect_desc=on (qemu's default: drop indirect_desc=off), then check in the guest that character 29 (bit 28) of /sys/block/{disk}/device/features is 1; in the guest alone, submit direct I/O of at most {} KiB ({half_ring_pages} pages), so that two commands fit the ring at once",
                half_ring_pages * PAGE_BYTES / 1024,
            ),
        )
    } else {
        (
            format!(
                " The driver reported itself busy: its queue or the device's was full (nr_requests {}, {} tags per hardware queue{}).",
                geometry.nr_requests,
                geometry.hw_queue_tags,
                match geometry.virtio_indirect_desc {
                    Some(true) => ", virtio with indirect descriptors",
                    Some(false) => ", virtio without indirect descriptors",
                    None => "",
                },
            ),
            format!(
                "lower the queue depth the block layer uses so it stops overfilling the driver: echo {} > /sys/block/{disk}/queue/nr_requests",
                (geometry.hw_queue_tags / 2).max(4)
            ),
        )
    };
    let severity = if share >= WARNING_REQUEUE_SHARE {
        Severity::Warning
    } else {
        Severity::Info
    };
    Some(Diagnosis::new(
        traffic.name.clone(),
        severity,
        Evidence::RequeuedCommands(evidence),
        format!("{what}{why}"),
        fix,
    ))
}

/// Share of user I/Os smaller than a page.
fn subpage_share(stats: &OpStats) -> f64 {
    let histogram = stats.user_io_sectors.histogram();
    let below = histogram.count_between(1, PAGE_BYTES / SECTOR_BYTES - 1);
    ratio(below, histogram.len())
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}
