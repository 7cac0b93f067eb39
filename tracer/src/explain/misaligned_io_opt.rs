//! `misaligned_io_opt`: what a start off the stripe or chunk costs.

use super::{exact_size, partition, WhoPays, Words};
use crate::blk::SECTOR_BYTES;
use crate::model::{Finding, MisalignedIoOptEvidence};

/// Who pays: as for a start off the physical block, with stripes.
pub(super) const WHO_PAYS: WhoPays = super::misaligned_start::WHO_PAYS;

pub(super) fn words(finding: &Finding, evidence: &MisalignedIoOptEvidence) -> Words {
    let mut reasons = Vec::new();
    if let Some(io_opt) = &evidence.io_opt {
        reasons.push(format!(
            "{} bytes past a boundary of the optimal I/O size ({})",
            io_opt.io_opt_offset_bytes,
            exact_size(io_opt.optimal_io_size)
        ));
    }
    if let Some(chunk) = &evidence.chunk {
        reasons.push(format!(
            "{} sectors past a chunk boundary (chunk_sectors {}, {})",
            chunk.chunk_offset_sectors,
            chunk.chunk_sectors,
            exact_size(u64::from(chunk.chunk_sectors) * SECTOR_BYTES)
        ));
    }
    let consequence = if evidence.chunk.is_some() {
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
        name = finding.device,
        start = evidence.partition.partition_start,
        reasons = reasons.join(" and "),
    );
    Words {
        explanation,
        fix: partition::fix(finding, &evidence.partition, evidence.proposed.as_ref()),
    }
}
