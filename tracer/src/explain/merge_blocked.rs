//! `merge_blocked`: neighbours that could have merged, and the reason they
//! did not.

use super::{known, sys_file, with_numbered_note, WhoPays, Words};
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
            format!("echo 0 > {}", sys_file(disk, "queue/nomerges")),
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
                "echo mq-deadline > {} (it merges across CPUs), or submit the sequential stream from one task in larger writes",
                sys_file(disk, "queue/scheduler"),
            ),
        ),
        MergeFix::CheckFlags => (
            format!(
                "No limit forbids these merges and the {} scheduler had the bios queued; the kernel also refuses merges between bios whose flags differ (sync, FUA, priority, write hint) or whose cgroups differ, which block tracepoints do not show.",
                evidence.scheduler
            ),
            "check whether neighbouring writes differ in flags (O_DSYNC, RWF_* flags, ioprio) or come from different cgroups".to_string(),
        ),
        MergeFix::ReadQueueSettings => (
            "The queue's settings are not in the trace and no geometry was read, so which of them forbade the merges is not known: merging switched off (nomerges), a virt boundary that refuses bios ending inside a page, or no I/O scheduler (none), with which blk-mq merges only within one task's plug or one CPU's queue; with a scheduler, bios whose flags or cgroups differ.".to_string(),
            format!(
                "read the queue's settings: grep . {} {} {}; then: nomerges not 0: echo 0 > {}; scheduler [none]: echo mq-deadline > {} (it merges across CPUs); a virt_boundary_mask not 0: write page-aligned bios whose lengths are multiples of 4 KiB; none of these: check whether neighbouring writes differ in flags (O_DSYNC, RWF_* flags, ioprio) or cgroups",
                sys_file(disk, "queue/nomerges"),
                sys_file(disk, "queue/scheduler"),
                sys_file(disk, "queue/virt_boundary_mask"),
                sys_file(disk, "queue/nomerges"),
                sys_file(disk, "queue/scheduler"),
            ),
        ),
    };
    let limits = match (known(evidence.max_sectors_kb), known(evidence.max_segments)) {
        (Some(max_kb), Some(segments)) => format!(
            " although the merged command would fit max_sectors_kb ({max_kb} KiB) and max_segments ({segments})"
        ),
        _ => "; whether the merged command would have fit the queue's max_sectors_kb and max_segments is not known, as neither the trace nor a geometry gives them".to_string(),
    };
    let explanation = format!(
        "{adjacent} of {} {} commands on {} ({:.1}%) started exactly where the previous one ended and their bios were queued before it was issued, yet they were not merged{limits}; the median command is {} bytes, with {:.1} bios per command. Merging them would have saved up to {adjacent} commands. {reason}",
        evidence.commands,
        evidence.op.as_str(),
        finding.device,
        share * 100.0,
        evidence.command_size_p50,
        ratio(evidence.bios, evidence.commands),
    );
    Words {
        explanation,
        fix: with_numbered_note(fix, [disk.as_str()]),
    }
}
