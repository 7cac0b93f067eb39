//! `merge_blocked`: neighbours that could have merged, and the reason they
//! did not.

use super::{WhoPays, Words};
use crate::model::{ratio, Finding, MergeBlockedEvidence, MergeFix};

/// The workloads this code costs most, as `run` names them when the
/// command it traced paid little.
pub(super) const WHO_PAYS: WhoPays =
    WhoPays::Workloads("streams of small sequential writes, which the block layer would merge");

pub(super) fn words(finding: &Finding, evidence: &MergeBlockedEvidence) -> Words {
    let disk = &finding.disk;
    let adjacent = evidence.adjacent_unmerged_commands;
    let share = ratio(adjacent, evidence.commands);
    let (reason, fix) = match evidence.fix {
        MergeFix::AllowMerging => (
            format!(
                "Merging is switched off (nomerges = {}).",
                evidence.nomerges
            ),
            format!("echo 0 > /sys/block/{disk}/queue/nomerges"),
        ),
        MergeFix::PageAlignedBios => (
            format!(
                "The device's virt boundary (mask {:#x}) refuses to merge bios that start or end inside a page.",
                evidence.virt_boundary_mask
            ),
            "write page-aligned bios whose lengths are multiples of 4 KiB (a 4096-byte block size)".to_string(),
        ),
        MergeFix::UseMqDeadline => (
            "No limit forbids these merges, but with no I/O scheduler (none) blk-mq merges a bio only into a request still in the submitting task's plug or in its CPU's software queue, so neighbouring bios submitted from different tasks or CPUs, or after the previous request went to the driver, stay separate.".to_string(),
            format!(
                "echo mq-deadline > /sys/block/{disk}/queue/scheduler (it merges across CPUs), or submit the sequential stream from one task in larger writes"
            ),
        ),
        MergeFix::CheckFlags => (
            format!(
                "No limit forbids these merges and the {} scheduler had the bios queued; the kernel also refuses merges between bios whose flags differ (sync, FUA, priority, write hint) or whose cgroups differ, which block tracepoints do not show.",
                evidence.scheduler
            ),
            "check whether neighbouring writes differ in flags (O_DSYNC, RWF_* flags, ioprio) or come from different cgroups".to_string(),
        ),
    };
    let explanation = format!(
        "{adjacent} of {} {} commands on {} ({:.1}%) started exactly where the previous one ended and their bios were queued before it was issued, yet they were not merged although the merged command would fit max_sectors_kb ({} KiB) and max_segments ({}); the median command is {} bytes, with {:.1} bios per command. Merging them would have saved up to {adjacent} commands. {reason}",
        evidence.commands,
        evidence.op.as_str(),
        finding.device,
        share * 100.0,
        evidence.max_sectors_kb,
        evidence.max_segments,
        evidence.command_size_p50,
        ratio(evidence.bios, evidence.commands),
    );
    Words { explanation, fix }
}
