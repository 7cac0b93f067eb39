//! `split_amplification`: the kernel split many user I/Os, by one dominant
//! cause, and the pieces cost the device extra commands. Live only.

use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::SECTOR_BYTES;
use crate::engine::audit::exact_size;
use crate::engine::split::{SplitCause, SplitLimits};
use crate::engine::stats::quantile_bytes;
use crate::engine::what_if;
use crate::model::{ratio, Code, Diagnosis, Evidence, Severity, SplitAmplificationEvidence};

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

pub(super) struct SplitAmplification;

impl Check for SplitAmplification {
    fn code(&self) -> Code {
        Code::SplitAmplification
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
        split_amplification(traffic)
    }

    /// max_sectors raised to the suggested value, or the splits of an
    /// alignment cause gone.
    fn what_if(&self, diagnosis: &mut Diagnosis, traffic: &DeviceTraffic<'_>) {
        let Evidence::SplitAmplification(evidence) = &mut diagnosis.evidence else {
            return;
        };
        let total = &traffic.total;
        let geometry = &traffic.device.geometry;
        let limits = &traffic.device.limits;
        let predicted = match total.dominant_cause() {
            Some(SplitCause::MaxSectors)
                if geometry.max_hw_sectors_kb > geometry.max_sectors_kb =>
            {
                let suggested = suggested_max_sectors_kb(
                    geometry.max_sectors_kb,
                    geometry.max_hw_sectors_kb,
                    quantile_bytes(&total.user_io_sectors, 0.9),
                );
                evidence.proposed_max_sectors_kb = Some(suggested);
                let raised = SplitLimits {
                    max_sectors: suggested * 1024 / SECTOR_BYTES,
                    ..*limits
                };
                what_if::with_limits(&total.streams, total.commands, limits, &raised)
            }
            Some(cause @ (SplitCause::PhysicalBlock | SplitCause::ChunkBoundary)) => {
                what_if::without_splits(total.commands, total.split_causes[cause.index()])
            }
            _ => None,
        };
        if let Some(predicted) = predicted {
            diagnosis.evidence.set_what_if(predicted);
        }
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
            exact_size(command_size_mean / 1024 * 1024)
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
                let suggested = suggested_max_sectors_kb(
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

/// The `max_sectors_kb` a max_sectors split suggests raising to: the 90th
/// percentile user I/O, at least twice the current cap, a power of two, at
/// most the hardware's limit.
pub fn suggested_max_sectors_kb(max_kb: u32, hw_kb: u32, user_io_p90_bytes: u64) -> u64 {
    (user_io_p90_bytes / 1024)
        .max(u64::from(max_kb) * 2)
        .next_power_of_two()
        .min(u64::from(hw_kb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestion_is_a_power_of_two_within_the_hardware_limit() {
        assert_eq!(suggested_max_sectors_kb(64, 1280, 1 << 20), 1024);
        assert_eq!(suggested_max_sectors_kb(64, 100, 1 << 20), 100);
        assert_eq!(suggested_max_sectors_kb(512, 4096, 4096), 1024);
    }
}
