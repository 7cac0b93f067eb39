//! `split_amplification`: the kernel split many user I/Os, by one dominant
//! cause, and the pieces cost the device extra commands. Live only.

use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::SECTOR_BYTES;
use crate::engine::split::SplitCause;
use crate::engine::stats::{quantile_bytes, OpStats};
use crate::engine::what_if;
use crate::model::{
    ratio, Code, Evidence, Finding, Op, Severity, SplitAmplificationEvidence, SplitCost, SplitFix,
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

pub(super) struct SplitAmplification;

impl Check for SplitAmplification {
    fn code(&self) -> Code {
        Code::SplitAmplification
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Finding> {
        let (op, total) = split_op(traffic)?;
        let share = ratio(total.split_user_ios, total.user_ios);
        let cause = total.dominant_cause()?;
        let geometry = &traffic.device.geometry;
        let amplification = ratio(
            total.commands - total.commands_without_user_io,
            total.user_ios,
        );
        let command_size_mean = total.bytes.checked_div(total.commands).unwrap_or(0);
        // A stacked device's pieces may merge again on the disks below: what
        // they cost is what the disks received.
        let below = match total.disk_commands {
            0 => total.commands,
            disk => disk,
        };
        let below_amplification = ratio(below, total.user_ios);
        let below_size_mean = total.bytes.checked_div(below).unwrap_or(0);
        let fix = split_fix(traffic, total, cause);
        // What the split costs the device, net of merges: nothing when merges
        // left at most one command per user I/O, little when the pieces are
        // still large commands.
        let chunk = traffic.device.limits.chunk_sectors;
        let cost = if total.commands == 0 {
            SplitCost::Unmeasured
        } else if below_amplification <= 1.0 {
            SplitCost::AbsorbedByMerges
        } else if cause == SplitCause::ChunkBoundary
            && total.commands <= by_design_slack(chunk_minimum(total, chunk))
        {
            SplitCost::ByDesign
        } else if below_size_mean >= LARGE_COMMAND_BYTES {
            SplitCost::LargePieces
        } else {
            SplitCost::ExtraCommands
        };
        let severity = if cost != SplitCost::ExtraCommands {
            Severity::Info
        } else if cause.is_alignment() && share >= CRITICAL_SPLIT_SHARE {
            Severity::Critical
        } else if a_setting_fixes(fix) {
            Severity::Warning
        } else {
            Severity::Info
        };
        let evidence = SplitAmplificationEvidence {
            cause,
            crypt_max_io_bytes: (cause == SplitCause::CryptMaxIo)
                .then(|| traffic.device.limits.crypt_cap(op))
                .flatten()
                .map(|sectors| sectors * SECTOR_BYTES),
            causes: SplitCause::ALL
                .iter()
                .filter(|cause| total.split_causes[cause.index()] != 0)
                .map(|&cause| (cause, total.split_causes[cause.index()]))
                .collect(),
            splits: total.splits,
            split_user_ios: total.split_user_ios,
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
            max_sectors_source: geometry.max_sectors_source,
            optimal_io_size: geometry.optimal_io_size,
            max_segments: geometry.max_segments,
            max_segment_size: geometry.max_segment_size,
            physical_block_size: geometry.physical_block_size,
            chunk_sectors: u32::try_from(traffic.device.limits.chunk_sectors).unwrap_or(u32::MAX),
            virt_boundary_mask: geometry.virt_boundary_mask,
            discard_granularity: geometry.discard_granularity,
            discard_max_bytes: geometry.discard_max_bytes,
            discard_max_hw_bytes: geometry.discard_max_hw_bytes,
            partition: partition_place(traffic.partition),
            fix,
            what_if: None,
            op,
            cost,
        };
        Some(Finding::new(
            traffic.name.clone(),
            traffic.disk_name().to_string(),
            severity,
            Evidence::SplitAmplification(evidence),
        ))
    }

    /// `max_sectors_kb` raised to the proposed value, or the splits of an
    /// alignment cause gone.
    fn what_if(&self, finding: &mut Finding, traffic: &DeviceTraffic<'_>) {
        let Evidence::SplitAmplification(evidence) = &finding.evidence else {
            return;
        };
        if evidence.cost == SplitCost::Unmeasured {
            return;
        }
        let Some(total) = traffic.op(evidence.op) else {
            return;
        };
        let limits = &traffic.device.limits;
        let predicted = match evidence.fix {
            SplitFix::RaiseMaxSectorsKb { .. } => {
                what_if::limits_after_split_fix(&evidence.fix, limits).and_then(|raised| {
                    what_if::with_limits(&total.streams, total.commands, limits, &raised)
                })
            }
            SplitFix::MovePartitionStart { .. } | SplitFix::AlignIoOffsets => {
                what_if::without_splits(total.commands, total.split_causes[evidence.cause.index()])
            }
            // Aligned I/O is still cut once per chunk it spans.
            SplitFix::AlignToChunks if evidence.cost != SplitCost::ByDesign => {
                let minimum = chunk_minimum(total, limits.chunk_sectors);
                what_if::without_splits(total.commands, total.commands.saturating_sub(minimum))
            }
            _ => None,
        };
        if let Some(predicted) = predicted {
            finding.evidence.set_what_if(predicted);
        }
    }
}

/// The fewest commands a device that cuts at every `chunk` sectors makes of
/// these streams: one per chunk each spans when it starts on a chunk.
fn chunk_minimum(total: &OpStats, chunk: u64) -> u64 {
    if chunk == 0 {
        return 0;
    }
    let mut minimum = 0u64;
    total.streams.for_each(|sectors, _density, count| {
        minimum = minimum.saturating_add(sectors.div_ceil(chunk).saturating_mul(count));
    });
    minimum
}

/// Commands within a tenth of the chunk minimum are the chunks' own: I/O
/// larger than a chunk, spread over the stripe's disks as designed.
fn by_design_slack(minimum: u64) -> u64 {
    minimum.saturating_add(minimum / 10)
}

/// The fix for splits by `cause` on this device: raise the queue cap, move
/// the partition, or change the I/O.
fn split_fix(traffic: &DeviceTraffic<'_>, total: &OpStats, cause: SplitCause) -> SplitFix {
    let geometry = &traffic.device.geometry;
    match cause {
        SplitCause::CryptMaxIo => SplitFix::AtCryptLimit,
        SplitCause::MaxSectors if geometry.max_hw_sectors_kb > geometry.max_sectors_kb => {
            SplitFix::RaiseMaxSectorsKb {
                to_kb: suggested_max_sectors_kb(
                    geometry.max_sectors_kb,
                    geometry.max_hw_sectors_kb,
                    quantile_bytes(&total.user_io_sectors, 0.9),
                ),
            }
        }
        // A 0 is a limit never read, not one the queue is at.
        SplitCause::MaxSectors if geometry.max_hw_sectors_kb == 0 => SplitFix::HardwareLimitUnknown,
        SplitCause::MaxSectors => SplitFix::AtHardwareLimit,
        SplitCause::PhysicalBlock => {
            match traffic.partition.filter(|partition| partition.size != 0) {
                // The next 1 MiB boundary: aligned for any physical block size.
                Some(partition) => SplitFix::MovePartitionStart {
                    start: partition.start.div_ceil(2048).saturating_mul(2048),
                },
                None => SplitFix::AlignIoOffsets,
            }
        }
        SplitCause::ChunkBoundary => SplitFix::AlignToChunks,
        SplitCause::MaxSegments => SplitFix::FewerSegments,
        SplitCause::MaxSegmentSize => SplitFix::SmallerIo {
            max_kb: u64::from(geometry.max_segments) * u64::from(geometry.max_segment_size) / 1024,
        },
        SplitCause::VirtBoundary => SplitFix::AlignedBuffers,
        SplitCause::DiscardGranularity => SplitFix::AlignDiscards,
        SplitCause::MaxDiscard => {
            let current = geometry.discard_max_bytes;
            let grid = u64::from(geometry.physical_block_size).max(4096);
            let to_bytes = current.max(geometry.discard_max_hw_bytes) / grid * grid;
            match current {
                0 => SplitFix::AtDiscardLimit,
                _ if to_bytes == current || to_bytes == 0 => SplitFix::AtDiscardLimit,
                _ => SplitFix::SetDiscardMaxBytes { to_bytes },
            }
        }
        SplitCause::Unknown if traffic.device.bio_based() => {
            // Eight sectors or fewer say nothing beyond the block grid.
            let boundary_sectors = match total.split_point_zeros {
                zeros @ 4..=40 => 1 << zeros,
                _ => 0,
            };
            SplitFix::AlignToOwnBoundaries { boundary_sectors }
        }
        SplitCause::Unknown => SplitFix::CheckStackedDevices,
    }
}

/// The data operation whose user I/Os were split enough to matter, the most
/// of them: every number of the finding is of that operation alone, as its
/// words say (a few split writes must not hide reads that were all split).
fn split_op<'t>(traffic: &'t DeviceTraffic<'_>) -> Option<(Op, &'t OpStats)> {
    Op::ALL
        .into_iter()
        .filter(|&op| op != Op::Flush)
        .filter_map(|op| Some((op, traffic.op(op)?)))
        .filter(|(_, stats)| {
            stats.splits >= MIN_SPLITS
                && ratio(stats.split_user_ios, stats.user_ios) >= MIN_SPLIT_SHARE
        })
        .max_by_key(|(_, stats)| (stats.split_user_ios, stats.splits))
}

/// Whether the fix is a setting or an I/O change a user can make; driver
/// limits and unexplained splits are not.
fn a_setting_fixes(fix: SplitFix) -> bool {
    !matches!(
        fix,
        SplitFix::AtHardwareLimit
            | SplitFix::HardwareLimitUnknown
            | SplitFix::SmallerIo { .. }
            | SplitFix::CheckStackedDevices
            | SplitFix::AlignToOwnBoundaries { .. }
            | SplitFix::AtDiscardLimit
            | SplitFix::AtCryptLimit
    )
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
