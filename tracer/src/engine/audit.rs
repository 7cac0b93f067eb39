//! Static geometry audit: the entry points [`audit_disk`] and
//! [`audit_partition`] (in `engine/diagnose/`, beside the checks they run). The
//! diagnoses geometry alone supports (`misaligned_start`,
//! `misaligned_io_opt`, `subpage_block_size`) are each in their code's file
//! under `engine/diagnose/`, with the code's live side; where a partition
//! sits is `engine/placement.rs`.

pub use super::diagnose::{audit_disk, audit_partition};
pub use super::placement::{propose, Placement};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    pub(crate) use crate::engine::diagnose::misaligned_stack::tests::linear_dm;
    use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
    use crate::model::{Code, Evidence, Finding, ProposedPlace, Severity, SubpageFix};

    /// The reference disk: 20 GiB, 512-byte logical / 4096-byte physical
    /// sectors, io_min = io_opt = 4096 (docs/diagnoses.md, the seed case).
    pub(crate) fn seed_disk(start: u64, end_inclusive: u64) -> DiskGeometry {
        DiskGeometry {
            name: "sdc".into(),
            dev: Some(DevId::new(8, 32)),
            size_sectors: 41_943_040,
            logical_block_size: 512,
            physical_block_size: 4096,
            minimum_io_size: 4096,
            optimal_io_size: 4096,
            max_sectors_kb: 512,
            max_hw_sectors_kb: 512,
            max_segments: 128,
            max_segment_size: 65536,
            virt_boundary_mask: 4095,
            scheduler: "mq-deadline".into(),
            request_based: true,
            partitions: vec![PartitionGeometry {
                name: "sdc2".into(),
                dev: Some(DevId::new(8, 34)),
                number: 2,
                start,
                size: end_inclusive - start + 1,
                ..PartitionGeometry::default()
            }],
            ..DiskGeometry::default()
        }
    }

    fn codes(found: &[Finding]) -> Vec<Code> {
        found.iter().map(|d| d.code).collect()
    }

    fn find(found: &[Finding], code: Code) -> &Finding {
        found.iter().find(|d| d.code == code).unwrap()
    }

    /// The partition geometry a static finding proposes (its fix).
    fn proposed(finding: &Finding) -> Option<ProposedPlace> {
        match &finding.evidence {
            Evidence::MisalignedStart(evidence) => evidence.proposed,
            Evidence::MisalignedIoOpt(evidence) => evidence.proposed,
            Evidence::SubpageBlockSize(evidence) => match evidence.fix {
                SubpageFix::Partition(place) => place,
                other => panic!("not the audit's fix: {other:?}"),
            },
            other => panic!("not a static finding: {other:?}"),
        }
    }

    fn place(start: u64, size: u64, start_step: u64) -> Option<ProposedPlace> {
        Some(ProposedPlace {
            proposed_start: start,
            proposed_size: size,
            start_step,
            partition_number: 2,
        })
    }

    #[test]
    fn seed_layout_1_is_misaligned_with_512_byte_blocks() {
        let found = audit_disk(&seed_disk(14_281_785, 41_929_649));
        assert_eq!(
            codes(&found),
            [Code::MisalignedStart, Code::SubpageBlockSize]
        );
        let subpage = find(&found, Code::SubpageBlockSize);
        assert_eq!(subpage.device, "sdc2");
        assert_eq!(subpage.severity, Severity::Critical);
        assert_eq!(subpage.evidence.to_map()["block_size"], 512);
        assert_eq!(subpage.evidence.to_map()["block_size_source"], "predicted");
        assert_eq!(subpage.evidence.to_map()["partition_start"], 14_281_785);
        assert_eq!(subpage.evidence.to_map()["partition_size"], 27_647_865);
        assert_eq!(subpage.evidence.to_map()["size_mod_8"], 1);

        let start = find(&found, Code::MisalignedStart);
        assert_eq!(start.evidence.to_map()["granularity"], 4096);
        assert_eq!(start.evidence.to_map()["offset_bytes"], 512);
        // What the kernel puts in sdc2/alignment_offset and mkfs prints.
        assert_eq!(start.evidence.to_map()["alignment_offset"], 3584);
        // Start rounded up to 1 MiB: 6974 * 2048; the old end is 41929650
        // (exclusive), 27646898 sectors away, rounded down to 8.
        assert_eq!(proposed(start), place(14_282_752, 27_646_896, 2048));
        assert_eq!(
            proposed(subpage),
            proposed(start),
            "one geometry fixes both"
        );
    }

    #[test]
    fn seed_layout_2_has_1024_byte_blocks_and_is_aligned() {
        let found = audit_disk(&seed_disk(14_282_752, 41_929_649));
        assert_eq!(codes(&found), [Code::SubpageBlockSize]);
        let subpage = &found[0];
        assert_eq!(subpage.evidence.to_map()["block_size"], 1024);
        assert_eq!(subpage.evidence.to_map()["partition_size"], 27_646_898);
        assert_eq!(subpage.evidence.to_map()["size_mod_8"], 2);
        assert_eq!(subpage.severity, Severity::Warning);
        // The start stays; only the size shrinks by 2 sectors.
        assert_eq!(proposed(subpage), place(14_282_752, 27_646_896, 0));
    }

    #[test]
    fn seed_layout_3_is_clean() {
        assert!(audit_disk(&seed_disk(14_282_752, 41_943_039)).is_empty());
    }

    #[test]
    fn blkbszget_value_is_the_evidence_when_known() {
        let mut disk = seed_disk(14_282_752, 41_929_649);
        disk.partitions[0].block_size = Some(1024);
        let found = audit_disk(&disk);
        assert_eq!(found[0].evidence.to_map()["block_size"], 1024);
        assert_eq!(found[0].evidence.to_map()["block_size_source"], "BLKBSZGET");

        // Mounted with 4 KiB blocks: the problem waits for raw access.
        disk.partitions[0].block_size = Some(4096);
        let found = audit_disk(&disk);
        assert_eq!(codes(&found), [Code::SubpageBlockSize]);
        assert_eq!(found[0].severity, Severity::Info);
        assert_eq!(found[0].evidence.to_map()["block_size"], 1024);
        assert_eq!(found[0].evidence.to_map()["current_block_size"], 4096);
    }

    #[test]
    fn sector_63_is_aligned_on_512_byte_physical_sectors() {
        let mut disk = seed_disk(63, 63 + 8 * 1000 - 1);
        disk.physical_block_size = 512;
        disk.minimum_io_size = 512;
        disk.optimal_io_size = 0;
        assert!(audit_disk(&disk).is_empty());
    }

    #[test]
    fn sector_63_on_a_512e_disk_is_misaligned_unless_the_disk_says_so() {
        let disk = seed_disk(63, 63 + 8 * 1000 - 1);
        let found = audit_disk(&disk);
        assert_eq!(codes(&found), [Code::MisalignedStart]);
        // 63 * 512 = 32256 = 7 * 4096 + 3584.
        assert_eq!(found[0].evidence.to_map()["offset_bytes"], 3584);
        assert_eq!(found[0].evidence.to_map()["alignment_offset"], 512);
        assert_eq!(proposed(&found[0]), place(2048, 6008, 2048));

        // An "XP-compatible" drive that reports alignment_offset 3584 is
        // aligned at sector 63.
        let mut shifted = disk.clone();
        shifted.alignment_offset = 3584;
        assert!(audit_disk(&shifted).is_empty());
        shifted.partitions[0].start = 2048;
        let found = audit_disk(&shifted);
        assert_eq!(codes(&found), [Code::MisalignedStart]);
        assert_eq!(found[0].evidence.to_map()["alignment_offset"], 3584);
        // Next start that is 7 sectors past a 1 MiB boundary.
        assert_eq!(proposed(&found[0]).unwrap().proposed_start, 2055);
    }

    pub(crate) fn striped(io_opt: u32, chunk_sectors: u32, start: u64) -> DiskGeometry {
        let mut disk = seed_disk(start, start + 8 * 100_000 - 1);
        disk.optimal_io_size = io_opt;
        disk.chunk_sectors = chunk_sectors;
        disk
    }

    #[test]
    fn io_opt_boundary_is_checked_when_larger_than_the_physical_block() {
        assert!(audit_disk(&striped(1 << 20, 0, 4096)).is_empty());

        let found = audit_disk(&striped(1 << 20, 0, 2056));
        assert_eq!(codes(&found), [Code::MisalignedIoOpt]);
        assert_eq!(found[0].severity, Severity::Info);
        assert_eq!(found[0].evidence.to_map()["optimal_io_size"], 1 << 20);
        assert_eq!(found[0].evidence.to_map()["io_opt_offset_bytes"], 8 * 512);
        assert_eq!(proposed(&found[0]).unwrap().proposed_start, 4096);

        // Three data disks of 64 KiB: io_opt 192 KiB = 384 sectors; 2048 is
        // 128 sectors past a stripe; lcm(2048, 384) = 6144.
        let found = audit_disk(&striped(3 * 65536, 0, 2048));
        assert_eq!(codes(&found), [Code::MisalignedIoOpt]);
        assert_eq!(found[0].evidence.to_map()["io_opt_offset_bytes"], 128 * 512);
        let proposal = proposed(&found[0]).unwrap();
        assert_eq!(proposal.proposed_start, 6144);
        assert_eq!(proposal.start_step, 6144, "3 MiB");
    }

    #[test]
    fn io_opt_that_is_not_a_stripe_is_ignored() {
        // 0xffff sectors, as some USB bridges report.
        assert!(audit_disk(&striped(33_553_920, 0, 2048)).is_empty());
        // Equal to the physical block: misaligned_start covers it.
        let found = audit_disk(&striped(4096, 0, 2049));
        assert_eq!(codes(&found), [Code::MisalignedStart]);
    }

    #[test]
    fn chunk_boundaries_are_absolute() {
        assert!(audit_disk(&striped(0, 256, 2048)).is_empty());
        let found = audit_disk(&striped(0, 256, 2056));
        assert_eq!(codes(&found), [Code::MisalignedIoOpt]);
        assert_eq!(found[0].severity, Severity::Warning);
        assert_eq!(found[0].evidence.to_map()["chunk_offset_sectors"], 8);
        assert_eq!(found[0].evidence.to_map()["chunk_sectors"], 256);
    }

    #[test]
    fn a_partition_too_small_to_realign_still_gets_a_fix_sentence() {
        let mut disk = seed_disk(2049, 2049 + 4 - 1);
        disk.partitions[0].size = 4;
        let found = audit_disk(&disk);
        assert_eq!(
            codes(&found),
            [Code::MisalignedStart, Code::SubpageBlockSize]
        );
        assert_eq!(proposed(&found[0]), None, "too small");
        assert_eq!(proposed(&found[1]), None);
    }
}
