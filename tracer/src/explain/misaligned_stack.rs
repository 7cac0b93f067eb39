//! `misaligned_stack`: where a stacked device's data lands, level by level,
//! and the tool that sets the offset that moved it off the grid.

use super::{dev_node, exact_size, WhoPays, Words};
use crate::blk::SECTOR_BYTES;
use crate::model::{Finding, MisalignedStackEvidence, StackFix};

/// Who pays: as for a misaligned partition, one level lower.
pub(super) const WHO_PAYS: WhoPays = super::misaligned_start::WHO_PAYS;

pub(super) fn words(finding: &Finding, evidence: &MisalignedStackEvidence) -> Words {
    let top = &finding.device;
    let path: Vec<String> = evidence
        .stack
        .iter()
        .map(|step| {
            format!(
                "{} ({} at sector {})",
                step.device, step.via, step.start_sectors
            )
        })
        .collect();
    let legs = if evidence.legs > 1 {
        format!(
            " {} of its {} legs land like this.",
            evidence.misaligned_legs, evidence.legs
        )
    } else {
        String::new()
    };
    let cross_check = if evidence.kernel_alignment_offset != 0 {
        format!(
            " The kernel's stacked limits agree: {top} reports alignment_offset {} bytes.",
            evidence.kernel_alignment_offset
        )
    } else {
        String::new()
    };
    let explanation = format!(
        "{top} is {kind}; its data starts at sector {bottom_start} of {bottom}, through \
         {top} -> {path}: {past} bytes past a {gran}-byte boundary of {bottom} (physical block \
         size {pbs} B, minimum I/O size {io_min} B), so mkfs prints \"alignment is offset by \
         {offset} bytes\". The offset comes from {culprit} ({via}, {culprit_offset} \
         sectors).{legs}{cross_check} Every {gran}-byte block written to {top} straddles two \
         physical blocks, so the device reads, modifies and writes both.",
        kind = evidence.stack_kind,
        bottom_start = evidence.bottom_start,
        bottom = evidence.bottom_device,
        path = path.join(" -> "),
        past = evidence.offset_bytes,
        gran = evidence.granularity,
        pbs = evidence.physical_block_size,
        io_min = evidence.minimum_io_size,
        offset = evidence.alignment_offset,
        culprit = evidence.culprit_device,
        via = evidence.culprit_via,
        culprit_offset = evidence.culprit_offset_sectors,
    );
    Words {
        explanation,
        fix: fix(top, evidence),
    }
}

fn fix(top: &str, evidence: &MisalignedStackEvidence) -> String {
    let backup =
        format!("Back up what is on {top} first: moving where its data starts destroys it.");
    let proposed = evidence.proposed_offset_sectors;
    match &evidence.fix {
        StackFix::Partition {
            partition,
            disk,
            proposed_start,
        } => format!(
            "{backup} Recreate {partition} on {node} with its start on the grid: sector \
             {proposed_start} at the least, or a multiple of 2048 (1 MiB) as fdisk and parted \
             choose (`sfdisk -N` or `parted {node} unit s`), then rebuild the stack on it.",
            node = dev_node(disk),
        ),
        StackFix::LvmDataAlignment { pv, alignment_kib } => {
            let pv = dev_node(pv);
            format!(
                "{backup} The LV's extents start off the grid on the physical volume {pv}. Move \
             the LV off it (`pvmove {pv}` onto an aligned PV) or recreate the PV with an \
             aligned data area: `pvcreate --dataalignment {alignment_kib}k {pv}`, then \
             `vgcreate`/`vgextend` and `lvcreate` again (check with `pvs -o +pe_start`)."
            )
        }
        StackFix::CryptPayload {
            device,
            proposed_offset,
        } => format!(
            "{backup} Reformat {node} with an aligned payload: `cryptsetup luksFormat \
             --align-payload=2048 {node}` (LUKS1) or `--offset 32768` (LUKS2), or for \
             plain mode `--offset {proposed_offset}`; then reopen it and restore.",
            node = dev_node(device),
        ),
        StackFix::MdDataOffset {
            member,
            alignment_kib,
        } => format!(
            "{backup} The array's data starts off the grid on {member}. Recreate the array \
             with an aligned data offset: `mdadm --create ... --data-offset={alignment_kib}K`, \
             then restore."
        ),
        StackFix::DmTable {
            dm_name,
            device,
            proposed_offset,
        } => {
            let name = if dm_name.is_empty() { top } else { dm_name };
            format!(
                "{backup} Load the table with the offset into {device} rounded up to \
                 {proposed} sectors ({size}) or to 2048 (1 MiB): `dmsetup table {name}` shows \
                 it; edit the offset to {proposed_offset} and `dmsetup reload {name} --table \
                 '...'`, `dmsetup resume {name}` (the LV or volume tool that wrote the table \
                 should be told the same).",
                size = exact_size(proposed.max(0) as u64 * SECTOR_BYTES),
            )
        }
    }
}
