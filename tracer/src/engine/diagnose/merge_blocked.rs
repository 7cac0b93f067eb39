//! `merge_blocked`: commands that started where the previous one ended, with
//! their bios queued in time, yet were not merged. Live only.

use super::split_amplification::CRITICAL_SPLIT_SHARE;
use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::{predicted_block_size, PAGE_BYTES};
use crate::engine::stats::quantile_bytes;
use crate::engine::what_if;
use crate::model::{ratio, Code, Diagnosis, Evidence, MergeBlockedEvidence, Severity};

/// `merge_blocked` needs at least this many adjacent unmerged commands...
pub const MIN_ADJACENT_UNMERGED: u64 = 16;
/// ...making up at least this share of the device's commands.
pub const MIN_ADJACENT_SHARE: f64 = 0.1;

pub(super) struct MergeBlocked;

impl Check for MergeBlocked {
    fn code(&self) -> Code {
        Code::MergeBlocked
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
        merge_blocked(traffic)
    }

    /// `nomerges` switched off: the same streams merged under the device's limits.
    fn what_if(&self, diagnosis: &mut Diagnosis, traffic: &DeviceTraffic<'_>) {
        if traffic.device.geometry.nomerges == 0 {
            return;
        }
        let total = &traffic.total;
        if let Some(predicted) =
            what_if::merging_allowed(&total.streams, total.commands, &traffic.device.limits)
        {
            diagnosis.evidence.set_what_if(predicted);
        }
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
