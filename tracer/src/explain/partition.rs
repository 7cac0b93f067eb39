//! The partition commands the static codes share: one proposed geometry
//! fixes `misaligned_start`, `misaligned_io_opt` and `subpage_block_size`
//! alike, so they print the same `sfdisk` and `parted` lines.

use super::{dev_node, exact_size};
use crate::blk::SECTOR_BYTES;
use crate::model::{Finding, PartitionPlace, ProposedPlace};

/// fdisk's and parted's default alignment: 1 MiB, in sectors.
const MIB_SECTORS: u64 = (1 << 20) / SECTOR_BYTES;

/// The proposed geometry as sfdisk and parted commands.
pub(super) fn fix(
    finding: &Finding,
    place: &PartitionPlace,
    proposed: Option<&ProposedPlace>,
) -> String {
    let name = &finding.device;
    let Some(proposal) = proposed else {
        return format!(
            "{name} is too small to hold an aligned, whole-page partition; remove it or grow it."
        );
    };
    let disk_node = dev_node(&finding.disk);
    let number = proposal.partition_number;
    let last = proposal.proposed_start + proposal.proposed_size - 1;
    let sfdisk = format!(
        "echo 'start={}, size={}' | sfdisk -N {number} {disk_node}",
        proposal.proposed_start, proposal.proposed_size
    );
    if proposal.proposed_start != place.partition_start {
        let step = proposal.start_step;
        let step_text = if step == MIB_SECTORS {
            format!("a 1 MiB ({step}-sector) boundary")
        } else {
            format!(
                "a {} ({step}-sector) boundary, a multiple of 1 MiB, the physical block, \
                 io_opt and chunk",
                exact_size(step * SECTOR_BYTES)
            )
        };
        format!(
            "Back up {name} first: moving its start destroys its contents. Recreate it with \
             the start rounded up to {step_text} and the size rounded down to a multiple of 8 \
             sectors, ending inside the old partition:\n  {sfdisk}\nor with parted:\n  \
             parted {disk_node} unit s rm {number} mkpart primary {start}s {last}s\nthen \
             recreate the filesystem on {node}.",
            start = proposal.proposed_start,
            node = dev_node(name),
        )
    } else {
        let cut = place.partition_size - proposal.proposed_size;
        format!(
            "Shrink {name} by {cut} sector{plural} to {size} (a multiple of 8 sectors), after \
             shrinking any filesystem on it below that:\n  {sfdisk}\nor with parted:\n  \
             parted {disk_node} unit s resizepart {number} {last}s",
            plural = if cut == 1 { "" } else { "s" },
            size = proposal.proposed_size,
        )
    }
}
