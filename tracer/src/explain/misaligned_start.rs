//! `misaligned_start`: what an offset start costs every block written.

use super::{partition, WhoPays, Words};
use crate::model::{Finding, MisalignedStartEvidence};

/// The workloads this code costs most, as `run` names them when the
/// command it traced paid little.
pub(super) const WHO_PAYS: WhoPays = WhoPays::Workloads(
    "writes of whole physical blocks or stripes, each of which then straddles two",
);

pub(super) fn words(finding: &Finding, evidence: &MisalignedStartEvidence) -> Words {
    let disk = &finding.disk;
    let disk_offset = if evidence.disk_alignment_offset != 0 {
        format!(
            " ({} reports its natural alignment offset by {} bytes)",
            disk, evidence.disk_alignment_offset
        )
    } else {
        String::new()
    };
    // Only what this trace showed: the kernel cuts at physical-block
    // boundaries only when an I/O exceeds max_sectors_kb (blk-merge.c's
    // get_max_io_size), which many workloads and kernels never reach.
    let splits = match evidence.live.traffic {
        Some(traffic) if traffic.extra_split_fragments > 0 => format!(
            " The kernel split I/Os here {} times; it ends the pieces of an I/O larger than its \
             limit on physical-block boundaries of the whole disk, so on this partition such an \
             I/O also gets a short piece.",
            traffic.extra_split_fragments
        ),
        Some(_) => " No I/O in this trace was split for it.".to_owned(),
        None => " Where an I/O exceeds max_sectors_kb, the kernel also cuts it at \
                 physical-block boundaries of the whole disk, adding a short piece."
            .to_owned(),
    };
    let explanation = format!(
        "{name} starts at sector {start}, {past} bytes past a {gran}-byte boundary of {disk} \
         (physical block size {pbs} B, minimum I/O size {io_min} B){disk_offset}; the kernel \
         reports alignment_offset {kernel} bytes, which mkfs prints as \"alignment is offset \
         by {kernel} bytes\". Every {gran}-byte block the filesystem writes straddles two \
         physical blocks, so the device reads, modifies and writes both.{splits}",
        name = finding.device,
        start = evidence.partition.partition_start,
        past = evidence.offset_bytes,
        gran = evidence.granularity,
        pbs = evidence.physical_block_size,
        io_min = evidence.minimum_io_size,
        kernel = evidence.alignment_offset,
    );
    Words {
        explanation,
        fix: partition::fix(finding, &evidence.partition, evidence.proposed.as_ref()),
    }
}
