//! `misaligned_start`: a partition that does not start on a physical block /
//! minimum I/O boundary, computed the way the kernel computes
//! `alignment_offset`. Static only; its live numbers join it from the traffic.

use super::Check;
use crate::engine::placement::{place_of, PartitionAudit};
use crate::model::{Code, Evidence, Finding, LiveEvidence, MisalignedStartEvidence, Severity};

pub(super) struct MisalignedStart;

impl Check for MisalignedStart {
    fn code(&self) -> Code {
        Code::MisalignedStart
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Finding> {
        let (disk, part, placement) = (audit.disk, audit.part, &audit.placement);
        if placement.start_offset_bytes == 0 {
            return None;
        }
        let evidence = MisalignedStartEvidence {
            partition: place_of(part),
            granularity: placement.granularity,
            offset_bytes: placement.start_offset_bytes,
            alignment_offset: placement.kernel_alignment_offset,
            physical_block_size: disk.physical_block_size,
            minimum_io_size: disk.minimum_io_size,
            proposed: audit.proposal,
            live: LiveEvidence::default(),
            what_if: None,
            disk_alignment_offset: disk.alignment_offset,
        };
        Some(Finding::new(
            part.name.clone(),
            disk.name.clone(),
            Severity::Warning,
            Evidence::MisalignedStart(evidence),
        ))
    }
}
