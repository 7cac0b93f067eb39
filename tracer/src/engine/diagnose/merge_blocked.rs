//! `merge_blocked`: commands that started where the previous one ended, with
//! their bios queued in time, yet were not merged. Live only.

use super::split_amplification::CRITICAL_SPLIT_SHARE;
use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::{predicted_block_size, PAGE_BYTES};
use crate::engine::stats::quantile_bytes;
use crate::engine::what_if;
use crate::model::{ratio, Code, Evidence, Finding, MergeBlockedEvidence, MergeFix, Severity};

/// `merge_blocked` needs at least this many adjacent unmerged commands...
pub const MIN_ADJACENT_UNMERGED: u64 = 16;
/// ...making up at least this share of the device's commands.
pub const MIN_ADJACENT_SHARE: f64 = 0.1;

pub(super) struct MergeBlocked;

impl Check for MergeBlocked {
    fn code(&self) -> Code {
        Code::MergeBlocked
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Finding> {
        let total = &traffic.total;
        let adjacent = total.adjacent_unmerged;
        let share = ratio(adjacent, total.commands);
        if adjacent < MIN_ADJACENT_UNMERGED || share < MIN_ADJACENT_SHARE {
            return None;
        }
        let geometry = &traffic.device.geometry;
        let bios = total.user_ios + total.splits;
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
        // Unless a setting forbids merges: that is a cause of its own, and
        // its fix (a sysfs write) is cheaper than the partition's.
        if subpage_partition && bio_p50 < PAGE_BYTES && geometry.nomerges == 0 {
            return None;
        }
        let scale = if share >= CRITICAL_SPLIT_SHARE {
            Severity::Critical
        } else {
            Severity::Warning
        };
        // The first reason that applies: a setting, a limit, no scheduler,
        // or what the tracepoints cannot show.
        // Unknown geometry reads as zeros and no scheduler: none of them
        // can be a reason then, only a thing to read.
        let (fix, severity) = if !traffic.device.known {
            (MergeFix::ReadQueueSettings, Severity::Warning)
        } else if geometry.nomerges != 0 {
            (MergeFix::AllowMerging, scale)
        } else if geometry.virt_boundary_mask != 0 {
            (MergeFix::PageAlignedBios, scale)
        } else if geometry.scheduler.is_empty() || geometry.scheduler == "none" {
            (MergeFix::UseMqDeadline, Severity::Warning)
        } else {
            (MergeFix::CheckFlags, Severity::Info)
        };
        let evidence = MergeBlockedEvidence {
            adjacent_unmerged_commands: adjacent,
            commands: total.commands,
            user_ios: total.user_ios,
            bios_per_command: round3(ratio(bios, total.commands)),
            command_size_p50: quantile_bytes(&total.command_sectors, 0.5),
            user_io_size_p50: bio_p50,
            max_sectors_kb: geometry.max_sectors_kb,
            nomerges: geometry.nomerges,
            virt_boundary_mask: geometry.virt_boundary_mask,
            max_segments: geometry.max_segments,
            max_segment_size: geometry.max_segment_size,
            scheduler: geometry.scheduler.clone(),
            partition: partition_place(traffic.partition),
            what_if: None,
            op: traffic.main_op,
            bios,
            fix,
        };
        Some(Finding::new(
            traffic.name.clone(),
            traffic.disk_name().to_string(),
            severity,
            Evidence::MergeBlocked(evidence),
        ))
    }

    /// Merging allowed again: the same streams merged under the device's limits.
    fn what_if(&self, finding: &mut Finding, traffic: &DeviceTraffic<'_>) {
        let Evidence::MergeBlocked(evidence) = &finding.evidence else {
            return;
        };
        if evidence.fix != MergeFix::AllowMerging {
            return;
        }
        let total = &traffic.total;
        if let Some(predicted) =
            what_if::merging_allowed(&total.streams, total.commands, &traffic.device.limits)
        {
            finding.evidence.set_what_if(predicted);
        }
    }
}
