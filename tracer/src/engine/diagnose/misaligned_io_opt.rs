//! `misaligned_io_opt`: a partition on a physical block boundary but not on
//! an optimal I/O size or `chunk_sectors` boundary. Static only.

use super::Check;
use crate::blk::SECTOR_BYTES;
use crate::engine::audit::{
    exact_size, fix_text, place_of, proposed_place, PartitionAudit, Placement, Proposal,
};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{
    ChunkOffset, Code, Diagnosis, Evidence, IoOptOffset, LiveEvidence, MisalignedIoOptEvidence,
    Severity,
};

pub(super) struct MisalignedIoOpt;

impl Check for MisalignedIoOpt {
    fn code(&self) -> Code {
        Code::MisalignedIoOpt
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Diagnosis> {
        let placement = &audit.placement;
        (placement.io_opt_offset_bytes != 0 || placement.chunk_offset_sectors != 0)
            .then(|| misaligned_io_opt(audit.disk, audit.part, placement, audit.proposal))
    }
}

fn misaligned_io_opt(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    placement: &Placement,
    proposal: Option<Proposal>,
) -> Diagnosis {
    let io_opt = (placement.io_opt_offset_bytes != 0).then_some(IoOptOffset {
        optimal_io_size: placement.io_opt,
        io_opt_offset_bytes: placement.io_opt_offset_bytes,
    });
    let chunk = (placement.chunk_offset_sectors != 0).then_some(ChunkOffset {
        chunk_sectors: disk.chunk_sectors,
        chunk_offset_sectors: placement.chunk_offset_sectors,
    });
    let evidence = MisalignedIoOptEvidence {
        partition: place_of(part),
        io_opt,
        chunk,
        proposed: proposed_place(proposal),
        live: LiveEvidence::default(),
        what_if: None,
    };
    let mut reasons = Vec::new();
    if placement.io_opt_offset_bytes != 0 {
        reasons.push(format!(
            "{} bytes past a boundary of the optimal I/O size ({})",
            placement.io_opt_offset_bytes,
            exact_size(placement.io_opt)
        ));
    }
    if placement.chunk_offset_sectors != 0 {
        reasons.push(format!(
            "{} sectors past a chunk boundary (chunk_sectors {}, {})",
            placement.chunk_offset_sectors,
            disk.chunk_sectors,
            exact_size(u64::from(disk.chunk_sectors) * SECTOR_BYTES)
        ));
    }
    let chunked = placement.chunk_offset_sectors != 0;
    let consequence = if chunked {
        "The kernel splits every bio at chunk boundaries counted from the start of the disk, \
         so I/O the filesystem aligns to its own start straddles them and becomes two device \
         commands instead of one."
    } else {
        "Large I/O the filesystem aligns to its own start straddles the device's stripes, so \
         the device does partial-stripe work (read-modify-write on RAID, extra internal \
         operations on SSDs) and splits at max_sectors_kb fall off those boundaries."
    };
    let explanation = format!(
        "{name} starts at sector {start}, {reasons}. {consequence}",
        name = part.name,
        start = part.start,
        reasons = reasons.join(" and "),
    );
    Diagnosis::new(
        part.name.clone(),
        if chunked {
            Severity::Warning
        } else {
            Severity::Info
        },
        Evidence::MisalignedIoOpt(evidence),
        explanation,
        fix_text(disk, part, proposal),
    )
}
