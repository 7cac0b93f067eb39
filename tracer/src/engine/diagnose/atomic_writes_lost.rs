//! `atomic_writes_lost`: a level of the stack that offers less of the untorn
//! (atomic) writes than the device below it. A partition from its start
//! (`bdev_can_atomic_write()`'s rule, in [`crate::blk`]); a dm or md device
//! from its own sysfs limits against its members'. Static: nothing here
//! needs traffic, and a kernel without `queue/atomic_write_*` (before 6.11)
//! raises nothing.

use super::misaligned_stack::StackAudit;
use super::Check;
use crate::blk::{atomic_start_grid_sectors, partition_keeps_atomic};
use crate::engine::placement::{place_of, PartitionAudit};
use crate::geometry::stack::StackLeg;
use crate::geometry::AtomicLimits;
use crate::model::{
    AtomicLevel, AtomicStackCause, AtomicWritesLostEvidence, Code, Evidence, Finding, LiveEvidence,
    ProposedPlace, Severity,
};

pub(super) struct AtomicWritesLost;

/// A recreated partition's size is kept a multiple of 8 sectors, so the fix
/// does not give it a sub-page block size.
const SIZE_STEP: u64 = 8;

impl Check for AtomicWritesLost {
    fn code(&self) -> Code {
        Code::AtomicWritesLost
    }

    fn audit(&self, audit: &PartitionAudit<'_>) -> Option<Finding> {
        let (disk, part) = (audit.disk, audit.part);
        let limits = disk.atomic.filter(AtomicLimits::offered)?;
        if partition_keeps_atomic(part.start, limits.unit_min_bytes, limits.boundary_bytes) {
            return None;
        }
        let grid = atomic_start_grid_sectors(limits.unit_min_bytes, limits.boundary_bytes)?;
        let evidence = AtomicWritesLostEvidence {
            partition: Some(place_of(part)),
            grid_sectors: grid,
            start_offset_sectors: part.start % grid,
            proposed: proposed_place(part.start, part.size, part.number, grid),
            ..lost(AtomicLevel::Partition, &disk.name, &limits)
        };
        Some(Finding::new(
            part.name.clone(),
            disk.name.clone(),
            Severity::Warning,
            Evidence::AtomicWritesLost(evidence),
        ))
    }

    fn audit_stack(&self, audit: &StackAudit<'_>) -> Option<Finding> {
        let (top, stack) = (audit.top, audit.stack);
        // No limits of its own: the kernel predates atomic writes.
        let offered = top.atomic?;
        if stack.unreadable.is_some() || stack.legs.is_empty() {
            return None;
        }
        // What the members offer, each through the partitions on its way
        // down; a member that offers none lost them below (a partition's own
        // finding), not here.
        let members: Vec<(&StackLeg, AtomicLimits)> = stack
            .legs
            .iter()
            .map(|leg| Some((leg, member_offer(leg)?)))
            .collect::<Option<_>>()?;
        let (leg, below) = members
            .iter()
            .min_by_key(|(_, limits)| limits.unit_max_bytes)
            .copied()?;
        let unit_min = members
            .iter()
            .map(|(_, limits)| limits.unit_min_bytes)
            .max()?;
        if offered.offered() && offered.unit_max_bytes >= below.unit_max_bytes {
            return None;
        }
        let level = if stack.kind.starts_with("md-") {
            AtomicLevel::Md
        } else {
            AtomicLevel::Dm
        };
        let grid = atomic_start_grid_sectors(unit_min, below.boundary_bytes)?;
        // Where the top's sector 0 lands on the member, against the grid.
        let data_start = u64::try_from(leg.shift().rem_euclid(i128::from(grid))).unwrap_or(0);
        let chunk = stack.chunk_sectors;
        let chunk_bytes = chunk * 512;
        let cause = if data_start != 0 {
            AtomicStackCause::DataOffset
        } else if chunk != 0
            && (chunk_bytes < u64::from(below.unit_max_bytes)
                || !chunk_bytes.is_multiple_of(u64::from(unit_min)))
        {
            AtomicStackCause::Chunk
        } else {
            AtomicStackCause::Level
        };
        let culprit = (cause == AtomicStackCause::DataOffset)
            .then(|| leg.culprit(grid))
            .flatten();
        let proposed_offset = culprit.map(|level| {
            let index = leg
                .levels
                .iter()
                .position(|l| std::ptr::eq(l, level))
                .unwrap_or(0);
            let offset = u64::try_from(leg.level_offset(index)).unwrap_or(0);
            offset.div_ceil(grid) * grid
        });
        let evidence = AtomicWritesLostEvidence {
            offered_unit_min_bytes: offered.unit_min_bytes,
            offered_unit_max_bytes: offered.unit_max_bytes,
            grid_sectors: grid,
            start_offset_sectors: data_start,
            stack_cause: Some(cause),
            stack_kind: stack.kind.clone(),
            chunk_sectors: (chunk != 0).then_some(chunk),
            data_start_sectors: Some(leg.bottom_start),
            culprit_via: culprit.map(|level| level.via.clone()),
            proposed_offset_sectors: proposed_offset,
            dm_name: stack.dm_name.clone(),
            ..lost(
                level,
                &leg.bottom.name,
                &AtomicLimits {
                    unit_min_bytes: unit_min,
                    ..below
                },
            )
        };
        Some(Finding::new(
            top.name.clone(),
            top.name.clone(),
            Severity::Warning,
            Evidence::AtomicWritesLost(evidence),
        ))
    }
}

/// The evidence's common part: the level, the limits below, nothing offered.
fn lost(level: AtomicLevel, below: &str, limits: &AtomicLimits) -> AtomicWritesLostEvidence {
    AtomicWritesLostEvidence {
        level,
        below_device: below.to_string(),
        atomic_write_unit_min_bytes: limits.unit_min_bytes,
        atomic_write_unit_max_bytes: limits.unit_max_bytes,
        atomic_write_max_bytes: limits.max_bytes,
        atomic_write_boundary_bytes: limits.boundary_bytes,
        offered_unit_min_bytes: 0,
        offered_unit_max_bytes: 0,
        partition: None,
        grid_sectors: 0,
        start_offset_sectors: 0,
        proposed: None,
        stack_cause: None,
        stack_kind: String::new(),
        chunk_sectors: None,
        data_start_sectors: None,
        culprit_via: None,
        proposed_offset_sectors: None,
        dm_name: String::new(),
        live: LiveEvidence::default(),
    }
}

/// The partition recreated at the next start on the grid, ending inside the
/// old one, its size a multiple of [`SIZE_STEP`]; `None` when nothing fits.
fn proposed_place(start: u64, size: u64, number: u32, grid: u64) -> Option<ProposedPlace> {
    let proposed_start = start.div_ceil(grid) * grid;
    let room = (start + size).checked_sub(proposed_start)?;
    let proposed_size = room / SIZE_STEP * SIZE_STEP;
    (proposed_size > 0).then_some(ProposedPlace {
        proposed_start,
        proposed_size,
        start_step: grid,
        partition_number: number,
    })
}

/// What one leg's member offers the stack above it: its disk's limits, if
/// every partition on the way down keeps them.
fn member_offer(leg: &StackLeg) -> Option<AtomicLimits> {
    let limits = leg.bottom.atomic.filter(AtomicLimits::offered)?;
    let kept = leg
        .levels
        .iter()
        .enumerate()
        .filter(|(_, level)| level.via == "partition")
        .all(|(index, _)| {
            u64::try_from(leg.level_offset(index)).is_ok_and(|start| {
                partition_keeps_atomic(start, limits.unit_min_bytes, limits.boundary_bytes)
            })
        });
    kept.then_some(limits)
}

#[cfg(test)]
mod tests {
    use crate::engine::audit::audit_disk;
    use crate::engine::audit::tests::{linear_dm, seed_disk};
    use crate::geometry::{AtomicLimits, DiskGeometry, PartitionGeometry};
    use crate::model::{AtomicLevel, AtomicStackCause, Code, Evidence, Severity};

    /// scsi_debug `atomic_wr=1 atomic_wr_gran=8 atomic_wr_max_length=128`
    /// on 512-byte sectors, as the 6.12 guest reports it.
    const SCSI_DEBUG: AtomicLimits = AtomicLimits {
        unit_min_bytes: 4096,
        unit_max_bytes: 65536,
        max_bytes: 65536,
        boundary_bytes: 0,
    };

    fn atomic_disk(starts: &[u64], limits: Option<AtomicLimits>) -> DiskGeometry {
        let mut disk = seed_disk(2048, 2048 + 8 * 1000 - 1);
        disk.atomic = limits;
        disk.partitions = starts
            .iter()
            .enumerate()
            .map(|(index, &start)| PartitionGeometry {
                name: format!("sdc{}", index + 1),
                number: index as u32 + 1,
                start,
                size: 57_336,
                ..PartitionGeometry::default()
            })
            .collect();
        disk
    }

    fn atomic_findings(disk: &DiskGeometry) -> Vec<crate::model::Finding> {
        audit_disk(disk)
            .into_iter()
            .filter(|finding| finding.code == Code::AtomicWritesLost)
            .collect()
    }

    #[test]
    fn the_misaligned_partition_loses_them_and_gets_the_next_aligned_start() {
        let found = atomic_findings(&atomic_disk(&[2048, 206_849], Some(SCSI_DEBUG)));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].device, "sdc2");
        assert_eq!(found[0].severity, Severity::Warning);
        let Evidence::AtomicWritesLost(evidence) = &found[0].evidence else {
            panic!("{found:?}");
        };
        assert_eq!(evidence.level, AtomicLevel::Partition);
        assert_eq!(evidence.grid_sectors, 8);
        assert_eq!(evidence.start_offset_sectors, 1);
        assert_eq!(evidence.offered_unit_max_bytes, 0);
        assert_eq!(evidence.atomic_write_unit_max_bytes, 65536);
        let proposed = evidence.proposed.unwrap();
        assert_eq!(proposed.proposed_start, 206_856);
        // Ends inside the old partition (206849 + 57336), a multiple of 8.
        assert_eq!(proposed.proposed_size, 57_328);
        let map = found[0].evidence.to_map();
        assert_eq!(map["partition_start"], 206_849);
        assert_eq!(map["level"], "partition");
    }

    #[test]
    fn a_boundary_larger_than_the_unit_is_the_grid() {
        let limits = AtomicLimits {
            boundary_bytes: 65536,
            ..SCSI_DEBUG
        };
        let found = atomic_findings(&atomic_disk(&[2048, 2056], Some(limits)));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].device, "sdc2");
        let Evidence::AtomicWritesLost(evidence) = &found[0].evidence else {
            panic!();
        };
        assert_eq!(
            (evidence.grid_sectors, evidence.start_offset_sectors),
            (128, 8)
        );
        assert_eq!(evidence.proposed.unwrap().proposed_start, 2176);
    }

    /// The false-alarm property: an aligned atomic-capable layout, a disk
    /// without atomic writes, and a kernel without the files raise nothing
    /// above info (here: nothing at all).
    #[test]
    fn aligned_layouts_and_kernels_without_atomics_raise_nothing() {
        for limits in [Some(SCSI_DEBUG), Some(AtomicLimits::default()), None] {
            let disk = atomic_disk(&[2048, 264_192], limits);
            let found = audit_disk(&disk);
            assert!(
                found.iter().all(|f| f.severity == Severity::Info),
                "{limits:?}: {found:?}"
            );
            assert!(atomic_findings(&disk).is_empty());
        }
        // The misaligned start without atomics is misaligned_start alone.
        let disk = atomic_disk(&[206_849], None);
        assert_eq!(
            audit_disk(&disk).iter().map(|f| f.code).collect::<Vec<_>>(),
            [Code::MisalignedStart]
        );
    }

    fn dm_over(offset: u64, top: Option<AtomicLimits>, chunk: u64) -> DiskGeometry {
        let mut dm = linear_dm(offset, "");
        dm.atomic = top;
        let stack = dm.stack.as_mut().unwrap();
        stack.chunk_sectors = chunk;
        for leg in &mut stack.legs {
            leg.bottom.atomic = Some(SCSI_DEBUG);
        }
        dm
    }

    #[test]
    fn a_stack_that_offers_less_than_its_members_is_named_with_its_cause() {
        // Passes the members' range up: clean.
        assert!(atomic_findings(&dm_over(8, Some(SCSI_DEBUG), 0)).is_empty());
        // A kernel without the files: clean, whatever the members say.
        assert!(atomic_findings(&dm_over(8, None, 0)).is_empty());

        let none = Some(AtomicLimits::default());
        let found = atomic_findings(&dm_over(8, none, 0));
        assert_eq!(found.len(), 1, "{found:?}");
        let Evidence::AtomicWritesLost(evidence) = &found[0].evidence else {
            panic!();
        };
        assert_eq!(evidence.level, AtomicLevel::Dm);
        assert_eq!(evidence.stack_cause, Some(AtomicStackCause::Level));

        // The table 3 sectors in: off the 8-sector grid.
        let found = atomic_findings(&dm_over(3, none, 0));
        let Evidence::AtomicWritesLost(evidence) = &found[0].evidence else {
            panic!();
        };
        assert_eq!(evidence.stack_cause, Some(AtomicStackCause::DataOffset));
        assert_eq!(evidence.proposed_offset_sectors, Some(8));

        // A 16 KiB chunk caps a 64 KiB unit.
        let capped = Some(AtomicLimits {
            unit_max_bytes: 16384,
            max_bytes: 16384,
            ..SCSI_DEBUG
        });
        let found = atomic_findings(&dm_over(8, capped, 32));
        let Evidence::AtomicWritesLost(evidence) = &found[0].evidence else {
            panic!();
        };
        assert_eq!(evidence.stack_cause, Some(AtomicStackCause::Chunk));
        assert_eq!(evidence.offered_unit_max_bytes, 16384);
    }
}
