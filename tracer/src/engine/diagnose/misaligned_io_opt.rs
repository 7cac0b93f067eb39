//! `misaligned_io_opt`: a partition on a physical block boundary but not on
//! an optimal I/O size or `chunk_sectors` boundary. Static only; its live
//! numbers join it from the traffic.

use super::Check;
use crate::engine::placement::{place_of, PartitionAudit};
use crate::model::{
    ChunkOffset, Code, Evidence, Finding, IoOptOffset, LiveEvidence, MisalignedIoOptEvidence,
    Severity,
};

pub(super) struct MisalignedIoOpt;

impl Check for MisalignedIoOpt {
    fn code(&self) -> Code {
        Code::MisalignedIoOpt
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Finding> {
        let (disk, part, placement) = (audit.disk, audit.part, &audit.placement);
        let io_opt = (placement.io_opt_offset_bytes != 0).then_some(IoOptOffset {
            optimal_io_size: placement.io_opt,
            io_opt_offset_bytes: placement.io_opt_offset_bytes,
        });
        let chunk = (placement.chunk_offset_sectors != 0).then_some(ChunkOffset {
            chunk_sectors: disk.chunk_sectors,
            chunk_offset_sectors: placement.chunk_offset_sectors,
        });
        if io_opt.is_none() && chunk.is_none() {
            return None;
        }
        // Chunks split every bio that straddles them; a stripe costs the device work.
        let severity = if chunk.is_some() {
            Severity::Warning
        } else {
            Severity::Info
        };
        let evidence = MisalignedIoOptEvidence {
            partition: place_of(part),
            io_opt,
            chunk,
            proposed: audit.proposal,
            live: LiveEvidence::default(),
            what_if: None,
        };
        Some(Finding::new(
            part.name.clone(),
            disk.name.clone(),
            severity,
            Evidence::MisalignedIoOpt(evidence),
        ))
    }
}
