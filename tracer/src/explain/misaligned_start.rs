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
    let explanation = format!(
        "{name} starts at sector {start}, {past} bytes past a {gran}-byte boundary of {disk} \
         (physical block size {pbs} B, minimum I/O size {io_min} B){disk_offset}; the kernel \
         reports alignment_offset {kernel} bytes, which mkfs prints as \"alignment is offset \
         by {kernel} bytes\". Every {gran}-byte block the filesystem writes straddles two \
         physical blocks, so the device reads, modifies and writes both, and the kernel splits \
         large I/O at physical-block boundaries of the whole disk, adding a short piece per \
         request.",
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
