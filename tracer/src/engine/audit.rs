//! Static geometry audit: the diagnoses that geometry alone can support.

use crate::geometry::DiskGeometry;
use crate::model::Diagnosis;

/// Diagnoses for one disk and its partitions from geometry alone
/// (`subpage_block_size`, `misaligned_start`, `misaligned_io_opt`).
pub fn audit_disk(disk: &DiskGeometry) -> Vec<Diagnosis> {
    let _ = disk;
    Vec::new()
}
