//! Diagnoses: the static audit enriched with what the traffic showed, plus
//! the findings only traffic can support (`split_amplification`,
//! `merge_blocked`, and `subpage_block_size` seen in dirty buffers).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::audit::audit_disk;
use super::devices::{DeviceState, DirtyStats, DIRTY_SIZES};
use super::split::SplitCause;
use super::stats::{op_index, OpStats, ALL_ORIGINS, OP_COUNT};
use super::table::FastMap;
use crate::blk::{predicted_block_size, PAGE_BYTES, SECTOR_BYTES};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{code, ratio, Diagnosis, Op, Severity};

/// `split_amplification` needs at least this many splits...
pub const MIN_SPLITS: u64 = 16;
/// ...and at least this share of user I/Os split (10%): a few large I/Os
/// split among many small ones (mkfs zeroing tables) amplify nothing much.
pub const MIN_SPLIT_SHARE: f64 = 0.1;
/// Alignment-caused splits on at least half the user I/Os are critical.
pub const CRITICAL_SPLIT_SHARE: f64 = 0.5;
/// `merge_blocked` needs at least this many adjacent unmerged commands...
pub const MIN_ADJACENT_UNMERGED: u64 = 16;
/// ...making up at least this share of the device's commands.
pub const MIN_ADJACENT_SHARE: f64 = 0.1;
/// A request carrying this share of `max_segments` bios is segment-capped.
const SEGMENT_CAPPED_SHARE: f64 = 0.9;

/// One disk's own traffic, or one partition's: what a diagnosis is about.
struct DeviceTraffic<'a> {
    name: String,
    device: &'a DeviceState,
    partition: Option<&'a PartitionGeometry>,
    /// Data operations (everything but flushes), all origins.
    total: OpStats,
    /// The operation with the most user I/Os, named in explanations.
    main_op: Op,
    writes: Option<OpStats>,
    dirty: Option<&'a DirtyStats>,
}

impl DeviceTraffic<'_> {
    fn has_traffic(&self) -> bool {
        self.total.user_ios > 0 || self.total.commands > 0 || self.dirty.is_some()
    }

    fn disk_name(&self) -> &str {
        &self.device.name
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
        let writes = per_op[op_index(Op::Write)].take();
        DeviceTraffic {
            name,
            device,
            partition,
            total,
            main_op,
            writes,
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
        let mut audited = if device.known {
            audit(&device.geometry)
        } else {
            Vec::new()
        };
        let observed = traffic_of(device, dirty);
        for diagnosis in &mut audited {
            if let Some(traffic) = observed
                .iter()
                .find(|traffic| traffic.name == diagnosis.device)
            {
                add_live_evidence(&mut diagnosis.evidence, traffic);
            }
        }
        for traffic in &observed {
            let audited_subpage = audited.iter().any(|diagnosis| {
                diagnosis.code == code::SUBPAGE_BLOCK_SIZE && diagnosis.device == traffic.name
            });
            if !audited_subpage {
                found.extend(live_subpage(traffic));
            }
            found.extend(split_amplification(traffic));
            found.extend(merge_blocked(traffic));
        }
        found.extend(audited);
    }
    found
}

/// Live numbers added to a static finding when the device saw traffic.
fn add_live_evidence(evidence: &mut BTreeMap<String, Value>, traffic: &DeviceTraffic<'_>) {
    if !traffic.has_traffic() {
        return;
    }
    let total = &traffic.total;
    if total.user_ios > 0 {
        evidence.insert("observed_user_ios".into(), json!(total.user_ios));
        evidence.insert(
            "observed_bio_size_p50".into(),
            json!(p50_bytes(&total.user_io_sectors)),
        );
        evidence.insert(
            "observed_subpage_bio_share".into(),
            json!(round3(subpage_share(total))),
        );
        evidence.insert("observed_commands".into(), json!(total.commands));
        evidence.insert(
            "bios_per_command".into(),
            json!(round3(ratio(total.user_ios, total.commands))),
        );
        evidence.insert(
            "misaligned_command_share".into(),
            json!(round3(ratio(total.misaligned_pbs, total.commands))),
        );
        evidence.insert(
            "misaligned_4k_command_share".into(),
            json!(round3(ratio(total.misaligned_4k, total.commands))),
        );
        evidence.insert("extra_split_fragments".into(), json!(total.splits));
    }
    if let Some(dirty) = traffic.dirty {
        evidence.insert("dirty_buffers".into(), json!(dirty.count));
        evidence.insert("dirty_buffer_sizes".into(), dirty_sizes(dirty));
    }
}

fn dirty_sizes(dirty: &DirtyStats) -> Value {
    let sizes: BTreeMap<String, u64> = (0..DIRTY_SIZES)
        .filter(|&index| dirty.by_size[index] != 0)
        .map(|index| (DirtyStats::size_of(index).to_string(), dirty.by_size[index]))
        .collect();
    json!(sizes)
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
    let write = traffic.writes.as_ref()?;
    let histogram = &write.user_io_sectors;
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
    let mut evidence = BTreeMap::new();
    evidence.insert("block_size".into(), json!(block_size));
    add_partition_evidence(&mut evidence, traffic.partition);
    add_live_evidence(&mut evidence, traffic);
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
    Diagnosis {
        code: code::SUBPAGE_BLOCK_SIZE,
        device: traffic.name.clone(),
        severity,
        evidence,
        explanation,
        fix,
    }
}

fn add_partition_evidence(
    evidence: &mut BTreeMap<String, Value>,
    partition: Option<&PartitionGeometry>,
) {
    if let Some(partition) = partition.filter(|partition| partition.size != 0) {
        evidence.insert("partition_start".into(), json!(partition.start));
        evidence.insert("partition_size".into(), json!(partition.size));
    }
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
    let mut evidence = BTreeMap::new();
    evidence.insert("cause".into(), json!(cause.key()));
    let causes: BTreeMap<&str, u64> = SplitCause::ALL
        .iter()
        .filter(|cause| total.split_causes[cause.index()] != 0)
        .map(|cause| (cause.key(), total.split_causes[cause.index()]))
        .collect();
    evidence.insert("causes".into(), json!(causes));
    evidence.insert("splits".into(), json!(total.splits));
    evidence.insert("user_ios".into(), json!(total.user_ios));
    evidence.insert("fragments".into(), json!(total.fragments));
    evidence.insert("commands".into(), json!(total.commands));
    evidence.insert("split_share".into(), json!(round3(share)));
    evidence.insert("amplification".into(), json!(round3(amplification)));
    evidence.insert(
        "user_io_size_p50".into(),
        json!(p50_bytes(&total.user_io_sectors)),
    );
    evidence.insert(
        "command_size_p50".into(),
        json!(p50_bytes(&total.command_sectors)),
    );
    evidence.insert("max_sectors_kb".into(), json!(geometry.max_sectors_kb));
    evidence.insert(
        "max_hw_sectors_kb".into(),
        json!(geometry.max_hw_sectors_kb),
    );
    evidence.insert("max_segments".into(), json!(geometry.max_segments));
    evidence.insert("max_segment_size".into(), json!(geometry.max_segment_size));
    evidence.insert(
        "physical_block_size".into(),
        json!(geometry.physical_block_size),
    );
    evidence.insert("chunk_sectors".into(), json!(geometry.chunk_sectors));
    evidence.insert(
        "virt_boundary_mask".into(),
        json!(geometry.virt_boundary_mask),
    );
    evidence.insert(
        "discard_granularity".into(),
        json!(geometry.discard_granularity),
    );
    add_partition_evidence(&mut evidence, traffic.partition);

    let (detail, fix, can_fix) = split_fix(traffic, cause);
    let severity = if cause.is_alignment() && share >= CRITICAL_SPLIT_SHARE {
        Severity::Critical
    } else if can_fix {
        Severity::Warning
    } else {
        Severity::Info
    };
    let explanation = format!(
        "{} of {} {} user I/Os on {} ({:.1}%) were split, {} of the splits by {} ({cause_count}); they became {} fragments and {} commands, {:.2} commands per user I/O (median user I/O {} bytes, median command {} bytes). {detail}",
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
        p50_bytes(&total.user_io_sectors),
        p50_bytes(&total.command_sectors),
    );
    Some(Diagnosis {
        code: code::SPLIT_AMPLIFICATION,
        device: traffic.name.clone(),
        severity,
        evidence,
        explanation,
        fix,
    })
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
                let wanted_kb = p90_bytes(&traffic.total.user_io_sectors) / 1024;
                let suggested = wanted_kb
                    .max(u64::from(max_kb) * 2)
                    .next_power_of_two()
                    .min(u64::from(hw_kb));
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
    let command_p50 = p50_bytes(&total.command_sectors);
    let bio_p50 = p50_bytes(&total.user_io_sectors);
    let segment_capped = geometry.max_segments != 0
        && bios_per_command >= SEGMENT_CAPPED_SHARE * f64::from(geometry.max_segments);
    // Sub-page bios filling max_segments are the subpage_block_size finding
    // itself (its explanation names the cap); one root cause, one diagnosis.
    let subpage_partition = traffic.partition.is_some_and(|part| {
        let block_size = part
            .block_size
            .unwrap_or_else(|| predicted_block_size(part.size, geometry.logical_block_size));
        u64::from(block_size) < PAGE_BYTES
    });
    if segment_capped && subpage_partition && bio_p50 < PAGE_BYTES {
        return None;
    }
    let mut evidence = BTreeMap::new();
    evidence.insert("adjacent_unmerged_commands".into(), json!(adjacent));
    evidence.insert("commands".into(), json!(total.commands));
    evidence.insert("user_ios".into(), json!(total.user_ios));
    evidence.insert("bios_per_command".into(), json!(round3(bios_per_command)));
    evidence.insert("command_size_p50".into(), json!(command_p50));
    evidence.insert("user_io_size_p50".into(), json!(bio_p50));
    evidence.insert("max_sectors_kb".into(), json!(geometry.max_sectors_kb));
    evidence.insert("nomerges".into(), json!(geometry.nomerges));
    evidence.insert(
        "virt_boundary_mask".into(),
        json!(geometry.virt_boundary_mask),
    );
    evidence.insert("max_segments".into(), json!(geometry.max_segments));
    evidence.insert("max_segment_size".into(), json!(geometry.max_segment_size));
    evidence.insert("scheduler".into(), json!(geometry.scheduler));
    evidence.insert("segment_capped".into(), json!(segment_capped));
    add_partition_evidence(&mut evidence, traffic.partition);

    let (reason, fix) = if geometry.nomerges != 0 {
        (
            format!(
                "Merging is switched off (nomerges = {}).",
                geometry.nomerges
            ),
            format!("echo 0 > /sys/block/{disk}/queue/nomerges"),
        )
    } else if segment_capped {
        (
            format!(
                "Each request filled up at max_segments ({}) bios of about {bio_p50} bytes, one segment per bio, so it closed far below max_sectors_kb.",
                geometry.max_segments
            ),
            "write larger bios: give the device a 4096-byte block size (a partition size that is a multiple of 8 sectors) or write with O_DIRECT in large blocks".to_string(),
        )
    } else if geometry.virt_boundary_mask != 0 {
        (
            format!(
                "The device's virt boundary (mask {:#x}) refuses to merge bios that start or end inside a page.",
                geometry.virt_boundary_mask
            ),
            "write page-aligned bios whose lengths are multiples of 4 KiB (a 4096-byte block size)".to_string(),
        )
    } else {
        (
            "No queue setting explains it; the bios were queued while the previous command waited but were dispatched separately.".to_string(),
            format!(
                "check the scheduler ({}) and let the writer batch its I/O (larger writes, plugging, io_uring)",
                if geometry.scheduler.is_empty() { "unknown" } else { &geometry.scheduler }
            ),
        )
    };
    let severity = if share >= CRITICAL_SPLIT_SHARE {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let explanation = format!(
        "{adjacent} of {} {} commands on {} ({:.1}%) started exactly where the previous one ended and their bios were queued before it was issued, yet they were not merged; the median command is {command_p50} bytes against max_sectors_kb {} KiB, with {:.1} bios per command. Merging them would have saved up to {adjacent} commands. {reason}",
        total.commands,
        traffic.main_op.as_str(),
        traffic.name,
        share * 100.0,
        geometry.max_sectors_kb,
        bios_per_command,
    );
    Some(Diagnosis {
        code: code::MERGE_BLOCKED,
        device: traffic.name.clone(),
        severity,
        evidence,
        explanation,
        fix,
    })
}

fn p50_bytes(histogram: &hdrhistogram::Histogram<u64>) -> u64 {
    if histogram.is_empty() {
        return 0;
    }
    histogram.lowest_equivalent(histogram.value_at_quantile(0.5)) * SECTOR_BYTES
}

fn p90_bytes(histogram: &hdrhistogram::Histogram<u64>) -> u64 {
    if histogram.is_empty() {
        return 0;
    }
    histogram.lowest_equivalent(histogram.value_at_quantile(0.9)) * SECTOR_BYTES
}

/// Share of user I/Os smaller than a page.
fn subpage_share(stats: &OpStats) -> f64 {
    let histogram = &stats.user_io_sectors;
    let below = histogram.count_between(1, PAGE_BYTES / SECTOR_BYTES - 1);
    ratio(below, histogram.len())
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}
