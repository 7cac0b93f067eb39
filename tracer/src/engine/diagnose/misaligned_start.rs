//! `misaligned_start`: a partition that does not start on a physical block /
//! minimum I/O boundary, computed the way the kernel computes
//! `alignment_offset`. Static only; its live numbers join it from the traffic.

use super::Check;
use crate::engine::audit::{
    fix_text, place_of, proposed_place, PartitionAudit, Placement, Proposal,
};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{Code, Diagnosis, Evidence, LiveEvidence, MisalignedStartEvidence, Severity};

pub(super) struct MisalignedStart;

impl Check for MisalignedStart {
    fn code(&self) -> Code {
        Code::MisalignedStart
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Diagnosis> {
        (audit.placement.start_offset_bytes != 0)
            .then(|| misaligned_start(audit.disk, audit.part, &audit.placement, audit.proposal))
    }
}

fn misaligned_start(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    placement: &Placement,
    proposal: Option<Proposal>,
) -> Diagnosis {
    let evidence = MisalignedStartEvidence {
        partition: place_of(part),
        granularity: placement.granularity,
        offset_bytes: placement.start_offset_bytes,
        alignment_offset: placement.kernel_alignment_offset,
        physical_block_size: disk.physical_block_size,
        minimum_io_size: disk.minimum_io_size,
        proposed: proposed_place(proposal),
        live: LiveEvidence::default(),
        what_if: None,
    };
    let disk_offset = if disk.alignment_offset != 0 {
        format!(
            " ({} reports its natural alignment offset by {} bytes)",
            disk.name, disk.alignment_offset
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
        name = part.name,
        start = part.start,
        past = placement.start_offset_bytes,
        gran = placement.granularity,
        disk = disk.name,
        pbs = disk.physical_block_size,
        io_min = disk.minimum_io_size,
        kernel = placement.kernel_alignment_offset,
    );
    Diagnosis::new(
        part.name.clone(),
        Severity::Warning,
        Evidence::MisalignedStart(evidence),
        explanation,
        fix_text(disk, part, proposal),
    )
}
