//! `atomic_writes_lost`: what a level that drops untorn writes costs, and
//! the layout that keeps them.

use super::{dev_node, exact_size, WhoPays, Words};
use crate::model::{AtomicLevel, AtomicStackCause, AtomicWritesLostEvidence, Finding};

/// Who pays: no command count changes; a program that asked for untorn
/// writes falls back to its own torn-write protection, or fails.
pub(super) const WHO_PAYS: WhoPays = WhoPays::NoCommandCost;

/// The consequence, the same at every level.
const CONSEQUENCE: &str = "statx reports no atomic write unit for it \
    (stx_atomic_write_unit_max 0) and pwritev2(RWF_ATOMIC) on it fails, so a database \
    that asks quietly falls back to protecting against torn writes itself (InnoDB's \
    doublewrite buffer, PostgreSQL's full-page writes) or refuses to start";

fn range(min: u32, max: u32) -> String {
    if min == max {
        exact_size(u64::from(min))
    } else {
        format!(
            "{} to {}",
            exact_size(u64::from(min)),
            exact_size(u64::from(max))
        )
    }
}

fn below_text(evidence: &AtomicWritesLostEvidence) -> String {
    let boundary = match evidence.atomic_write_boundary_bytes {
        0 => "no boundary".to_string(),
        bytes => format!("boundary {}", exact_size(u64::from(bytes))),
    };
    format!(
        "{below} offers atomic (untorn) writes of {range} (atomic_write_max {max}, {boundary})",
        below = evidence.below_device,
        range = range(
            evidence.atomic_write_unit_min_bytes,
            evidence.atomic_write_unit_max_bytes
        ),
        max = exact_size(u64::from(evidence.atomic_write_max_bytes)),
    )
}

pub(super) fn words(finding: &Finding, evidence: &AtomicWritesLostEvidence) -> Words {
    match evidence.level {
        AtomicLevel::Partition => partition_words(finding, evidence),
        AtomicLevel::Dm | AtomicLevel::Md => stack_words(finding, evidence),
    }
}

fn partition_words(finding: &Finding, evidence: &AtomicWritesLostEvidence) -> Words {
    let name = &finding.device;
    let start = evidence.partition.map_or(0, |place| place.partition_start);
    let grid = evidence.grid_sectors;
    let explanation = format!(
        "{below}, but the kernel lets a partition offer them only if its start is a \
         multiple of max(atomic_write_unit_min, atomic_write_boundary) = {grid_bytes}, \
         {grid} sectors (bdev_can_atomic_write). {name} starts at sector {start}, {off} \
         sector{plural} past a multiple of {grid}, so it offers none: {CONSEQUENCE}. Nothing \
         else warns: the writes still succeed without RWF_ATOMIC.",
        below = below_text(evidence),
        grid_bytes = exact_size(grid * 512),
        off = evidence.start_offset_sectors,
        plural = if evidence.start_offset_sectors == 1 {
            ""
        } else {
            "s"
        },
    );
    let fix = match evidence.proposed {
        None => format!(
            "{name} is too small to be recreated on the {grid}-sector grid inside its old \
             place; recreate it elsewhere at a start that is a multiple of {grid} sectors."
        ),
        Some(proposal) => {
            let disk_node = dev_node(&finding.disk);
            let number = proposal.partition_number;
            let last = proposal.proposed_start + proposal.proposed_size - 1;
            let mib = if 2048 % grid == 0 {
                " (any start on that grid keeps them; a 1 MiB boundary, where fdisk and \
                 parted put partitions, is on it)"
            } else {
                ""
            };
            format!(
                "Back up {name} first: moving its start destroys its contents. Recreate it \
                 at sector {new_start}, the next multiple of {grid} sectors{mib}, with its \
                 size a multiple of 8 sectors, ending inside the old partition:\n  echo \
                 'start={new_start}, size={size}' | sfdisk -N {number} {disk_node}\nor with \
                 parted:\n  parted {disk_node} unit s rm {number} mkpart primary \
                 {new_start}s {last}s\nthen recreate the filesystem on {node}; statx on {node} \
                 then reports {range}.",
                new_start = proposal.proposed_start,
                size = proposal.proposed_size,
                node = dev_node(name),
                range = range(
                    evidence.atomic_write_unit_min_bytes,
                    evidence.atomic_write_unit_max_bytes
                ),
            )
        }
    };
    Words { explanation, fix }
}

fn stack_words(finding: &Finding, evidence: &AtomicWritesLostEvidence) -> Words {
    let top = &finding.device;
    let kind = &evidence.stack_kind;
    let offered = if evidence.offered_unit_min_bytes == 0 {
        format!("{top} offers none: {CONSEQUENCE}")
    } else {
        format!(
            "{top} offers only {}: larger untorn writes fail on it",
            range(
                evidence.offered_unit_min_bytes,
                evidence.offered_unit_max_bytes
            )
        )
    };
    let grid = evidence.grid_sectors;
    let cause = evidence.stack_cause.unwrap_or(AtomicStackCause::Level);
    let why = match cause {
        AtomicStackCause::DataOffset => format!(
            "its data starts at sector {start} of {below}, {off} sector{plural} past a \
             multiple of {grid} (max(atomic_write_unit_min, atomic_write_boundary)), and the \
             kernel stacks no atomic writes from a member whose data starts off that grid",
            start = evidence.data_start_sectors.unwrap_or(0),
            below = evidence.below_device,
            off = evidence.start_offset_sectors,
            plural = if evidence.start_offset_sectors == 1 {
                ""
            } else {
                "s"
            },
        ),
        AtomicStackCause::Chunk => format!(
            "its chunk of {} caps an atomic write at one chunk, and drops them when the \
             chunk is not a multiple of the unit minimum",
            exact_size(evidence.chunk_sectors.unwrap_or(0) * 512)
        ),
        AtomicStackCause::Level => format!(
            "its data starts on the members' atomic grid and no chunk cuts them, so this \
             kernel's {kind} passes none up (device-mapper's linear, striped and mirror \
             targets and md's raid0, raid1 and raid10 pass them up in newer kernels)"
        ),
    };
    let explanation = format!(
        "{top} is {kind} over {below}. {below_text}, but {offered}; {why}.",
        below = evidence.below_device,
        below_text = below_text(evidence),
    );
    let unit_max_kib = (evidence.atomic_write_unit_max_bytes / 1024).max(4);
    let fix = match (cause, evidence.level) {
        (AtomicStackCause::DataOffset, _) => {
            let via = evidence.culprit_via.as_deref().unwrap_or("");
            let offset = evidence.proposed_offset_sectors.unwrap_or(grid);
            let how = if via == "partition" {
                format!(
                    "recreate the partition under {top} at a start that is a multiple of \
                     {grid} sectors (a 1 MiB boundary is one when {grid} divides 2048)"
                )
            } else if kind.starts_with("md-") {
                format!("recreate the array with `mdadm --create --data-offset={offset}s`")
            } else if evidence.dm_name.is_empty() {
                format!("reload the table with the offset at {offset} sectors")
            } else {
                format!(
                    "reload `{name}`'s table with the offset at {offset} sectors (`dmsetup \
                     reload`; an LVM PV: `pvcreate --dataalignment 1m`)",
                    name = evidence.dm_name
                )
            };
            format!(
                "Back up {top} first: moving where its data starts destroys its contents. \
                 Then {how}, so its data starts on a multiple of {grid} sectors."
            )
        }
        (AtomicStackCause::Chunk, AtomicLevel::Md) => format!(
            "Back up {top} first, then recreate it with a chunk of at least the members' unit \
             maximum: `mdadm --create --chunk={unit_max_kib}K` (or a multiple of it)."
        ),
        (AtomicStackCause::Chunk, _) => format!(
            "Back up {top} first, then recreate it with a stripe chunk of at least {} \
             (`lvcreate --stripesize {unit_max_kib}k`, or the chunk in its table).",
            exact_size(u64::from(evidence.atomic_write_unit_max_bytes))
        ),
        (AtomicStackCause::Level, _) => format!(
            "No setting of {top} restores them on this kernel: put the program that needs \
             untorn writes on {below} directly, or run a kernel whose {kind} passes atomic \
             writes up (its sysfs queue/atomic_write_unit_max_bytes is then not 0).",
            below = evidence.below_device
        ),
    };
    Words { explanation, fix }
}

#[cfg(test)]
mod tests {
    use crate::engine::audit::audit_disk;
    use crate::engine::audit::tests::linear_dm;
    use crate::explain::{diagnosis, who_pays, WhoPays};
    use crate::geometry::AtomicLimits;
    use crate::model::Code;

    const MEMBER: AtomicLimits = AtomicLimits {
        unit_min_bytes: 4096,
        unit_max_bytes: 65536,
        max_bytes: 65536,
        boundary_bytes: 0,
    };

    fn words_of(offset: u64) -> (String, String) {
        let mut dm = linear_dm(offset, "");
        dm.atomic = Some(AtomicLimits::default());
        for leg in &mut dm.stack.as_mut().unwrap().legs {
            leg.bottom.atomic = Some(MEMBER);
        }
        let finding = audit_disk(&dm)
            .into_iter()
            .find(|finding| finding.code == Code::AtomicWritesLost)
            .unwrap();
        let said = diagnosis(finding);
        (said.explanation, said.fix)
    }

    /// A dm level names its cause and the fix that cause takes; untorn
    /// writes cost no commands, so nothing is priced.
    #[test]
    fn a_dm_level_is_named_with_its_cause_and_fix() {
        assert_eq!(who_pays(Code::AtomicWritesLost), WhoPays::NoCommandCost);
        let (explanation, fix) = words_of(3);
        assert!(
            explanation.contains("dm-0 is dm-linear over vda"),
            "{explanation}"
        );
        assert!(explanation.contains("4 KiB to 64 KiB"), "{explanation}");
        assert!(
            explanation.contains("sector 2051 of vda, 3 sectors past"),
            "{explanation}"
        );
        assert!(fix.contains("Back up dm-0 first"), "{fix}");
        assert!(
            fix.contains("`vmtest`'s table with the offset at 8 sectors"),
            "{fix}"
        );
        let (explanation, fix) = words_of(8);
        assert!(explanation.contains("passes none up"), "{explanation}");
        assert!(fix.contains("No setting of dm-0 restores them"), "{fix}");
    }
}
