//! `misaligned_stack`: a device-mapper or md device whose data lands off the
//! physical-block grid of the disk below (or off the chunk grid of a RAID
//! below), through the offsets its levels add. Static, like
//! `misaligned_start`; its live numbers join it from the traffic.

use super::Check;
use crate::blk::SECTOR_BYTES;
use crate::engine::placement::Placement;
use crate::geometry::stack::{Stack, StackLeg};
use crate::geometry::DiskGeometry;
use crate::model::{
    Code, Evidence, Finding, LiveEvidence, MisalignedStackEvidence, Severity, StackFix, StackStep,
};

/// fdisk's, LVM's and mdadm's default alignment: 1 MiB.
const DEFAULT_ALIGNMENT_KIB: u64 = 1024;

/// One stacked device as the audit sees it.
pub(crate) struct StackAudit<'a> {
    pub top: &'a DiskGeometry,
    pub stack: &'a Stack,
}

pub(super) struct MisalignedStack;

impl Check for MisalignedStack {
    fn code(&self) -> Code {
        Code::MisalignedStack
    }

    fn audit_stack(&self, audit: &StackAudit<'_>) -> Option<Finding> {
        let (top, stack) = (audit.top, audit.stack);
        let misaligned: Vec<(&StackLeg, Placement)> = stack
            .legs
            .iter()
            .filter_map(|leg| {
                let placement = Placement::of(&leg.bottom, leg.top_zero_on_bottom());
                (placement.start_offset_bytes != 0).then_some((leg, placement))
            })
            .collect();
        let (leg, placement) = misaligned.first()?;
        let unit = u64::from(placement.granularity) / SECTOR_BYTES;
        let culprit_index = leg
            .levels
            .iter()
            .position(|level| Some(level) == leg.culprit(unit))?;
        let culprit = &leg.levels[culprit_index];
        let culprit_offset = leg.level_offset(culprit_index);
        let unit_i = i128::from(unit.max(1));
        let delta = (unit_i - leg.shift().rem_euclid(unit_i)) % unit_i;
        let proposed = culprit_offset + delta;
        // The device that sets the culprit's offset: the one just above it.
        let above = match culprit_index {
            0 => top.name.clone(),
            index => leg.levels[index - 1].device.clone(),
        };
        let proposed_u64 = u64::try_from(proposed).unwrap_or(0);
        let fix = match culprit.via.as_str() {
            "partition" => StackFix::Partition {
                partition: above,
                disk: culprit.device.clone(),
                proposed_start: proposed_u64,
            },
            _ if culprit_index == 0 && stack.uuid.starts_with("LVM-") => {
                StackFix::LvmDataAlignment {
                    pv: culprit.device.clone(),
                    alignment_kib: DEFAULT_ALIGNMENT_KIB,
                }
            }
            _ if culprit_index == 0 && stack.uuid.starts_with("CRYPT-") => StackFix::CryptPayload {
                device: culprit.device.clone(),
                proposed_offset: proposed_u64,
            },
            via if via.ends_with("data offset") => StackFix::MdDataOffset {
                member: culprit.device.clone(),
                alignment_kib: DEFAULT_ALIGNMENT_KIB,
            },
            _ => StackFix::DmTable {
                dm_name: if culprit_index == 0 {
                    stack.dm_name.clone()
                } else {
                    String::new()
                },
                device: culprit.device.clone(),
                proposed_offset: proposed_u64,
            },
        };
        let evidence = MisalignedStackEvidence {
            stack_kind: stack.kind.clone(),
            stack: leg
                .levels
                .iter()
                .map(|level| StackStep {
                    device: level.device.clone(),
                    via: level.via.clone(),
                    start_sectors: level.start_sectors,
                })
                .collect(),
            bottom_device: leg.bottom.name.clone(),
            bottom_start: leg.bottom_start,
            granularity: placement.granularity,
            offset_bytes: placement.start_offset_bytes,
            alignment_offset: placement.kernel_alignment_offset,
            kernel_alignment_offset: u64::from(top.alignment_offset),
            physical_block_size: leg.bottom.physical_block_size,
            minimum_io_size: leg.bottom.minimum_io_size,
            misaligned_legs: misaligned.len() as u64,
            legs: stack.legs.len() as u64,
            culprit_device: culprit.device.clone(),
            culprit_via: culprit.via.clone(),
            culprit_offset_sectors: i64::try_from(culprit_offset).unwrap_or(i64::MAX),
            proposed_offset_sectors: i64::try_from(proposed).unwrap_or(i64::MAX),
            fix,
            live: LiveEvidence::default(),
            what_if: None,
        };
        Some(Finding::new(
            top.name.clone(),
            top.name.clone(),
            Severity::Warning,
            Evidence::MisalignedStack(evidence),
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::audit::audit_disk;
    use crate::geometry::stack::StackLevel;

    /// A 512e virtio disk: 512-byte logical, 4096-byte physical sectors.
    fn vda() -> DiskGeometry {
        DiskGeometry {
            name: "vda".into(),
            size_sectors: 524_288,
            logical_block_size: 512,
            physical_block_size: 4096,
            minimum_io_size: 4096,
            request_based: true,
            ..DiskGeometry::default()
        }
    }

    /// dm-0 as `linear vda1 <offset>` over vda1 at sector 2048.
    pub(crate) fn linear_dm(offset: u64, uuid: &str) -> DiskGeometry {
        DiskGeometry {
            name: "dm-0".into(),
            logical_block_size: 512,
            physical_block_size: 4096,
            minimum_io_size: 4096,
            alignment_offset: 2560,
            stack: Some(Stack {
                kind: "dm-linear".into(),
                dm_name: "vmtest".into(),
                uuid: uuid.into(),
                legs: vec![StackLeg {
                    top_sector: 0,
                    levels: vec![
                        StackLevel {
                            device: "vda1".into(),
                            via: "linear".into(),
                            start_sectors: offset,
                        },
                        StackLevel {
                            device: "vda".into(),
                            via: "partition".into(),
                            start_sectors: 2048 + offset,
                        },
                    ],
                    bottom: Box::new(vda()),
                    bottom_start: 2048 + offset,
                }],
                ..Stack::default()
            }),
            ..DiskGeometry::default()
        }
    }

    fn evidence(found: &[Finding]) -> &MisalignedStackEvidence {
        match &found[0].evidence {
            Evidence::MisalignedStack(evidence) => evidence,
            other => panic!("not misaligned_stack: {other:?}"),
        }
    }

    #[test]
    fn a_table_offset_of_3_sectors_is_2560_bytes_off_and_the_table_is_the_fix() {
        let found = audit_disk(&linear_dm(3, ""));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].device, "dm-0");
        let evidence = evidence(&found);
        assert_eq!(evidence.offset_bytes, 1536);
        assert_eq!(evidence.alignment_offset, 2560, "what mkfs.ext4 warns");
        assert_eq!(
            (
                evidence.culprit_device.as_str(),
                evidence.culprit_via.as_str()
            ),
            ("vda1", "linear")
        );
        assert_eq!(
            (
                evidence.culprit_offset_sectors,
                evidence.proposed_offset_sectors
            ),
            (3, 8)
        );
        assert_eq!(
            evidence.fix,
            StackFix::DmTable {
                dm_name: "vmtest".into(),
                device: "vda1".into(),
                proposed_offset: 8
            }
        );
    }

    #[test]
    fn an_aligned_table_offset_is_clean() {
        assert!(audit_disk(&linear_dm(8, "")).is_empty());
        assert!(audit_disk(&linear_dm(2048, "LVM-abc")).is_empty());
    }

    #[test]
    fn an_lvm_volume_is_fixed_with_pvcreate_and_a_misaligned_partition_by_repartitioning() {
        let found = audit_disk(&linear_dm(5, "LVM-abcdef"));
        assert!(matches!(
            evidence(&found).fix,
            StackFix::LvmDataAlignment { .. }
        ));
        // The table is aligned, the partition below it is not.
        let mut dm = linear_dm(2048, "LVM-abcdef");
        let leg = &mut dm.stack.as_mut().unwrap().legs[0];
        leg.levels[1].start_sectors = 2048 + 63;
        leg.bottom_start = 2048 + 63;
        let found = audit_disk(&dm);
        let evidence = evidence(&found);
        assert_eq!(evidence.culprit_via, "partition");
        assert_eq!(
            evidence.fix,
            StackFix::Partition {
                partition: "vda1".into(),
                disk: "vda".into(),
                proposed_start: 64
            }
        );
    }

    #[test]
    fn a_later_target_mapped_below_its_own_start_is_judged_by_its_shift() {
        let mut dm = linear_dm(8, "");
        let leg = &mut dm.stack.as_mut().unwrap().legs[0];
        // Top sectors from 100_000 land at vda sector 2056 + 3: shifted by -97_941.
        leg.top_sector = 100_000;
        leg.levels[0].start_sectors = 11;
        leg.levels[1].start_sectors = 2059;
        leg.bottom_start = 2059;
        let found = audit_disk(&dm);
        let evidence = evidence(&found);
        assert_eq!(
            evidence.offset_bytes,
            ((2059i64 - 100_000).rem_euclid(8) * 512) as u64
        );
        assert_eq!(evidence.culprit_via, "linear");
    }
}
