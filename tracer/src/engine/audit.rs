//! Static geometry audit: where a partition sits against its disk's
//! alignment boundaries ([`Placement`]), the aligned geometry to use instead
//! ([`propose`]), and the entry points [`audit_disk`] and [`audit_partition`].
//! The diagnoses geometry alone supports (`misaligned_start`,
//! `misaligned_io_opt`, `subpage_block_size`) are each in their code's file
//! under `engine/diagnose/`, with the code's live side.

use super::diagnose::CHECKS;
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{Diagnosis, PartitionPlace, ProposedPlace};

/// fdisk's and parted's default alignment: 1 MiB.
const DEFAULT_GRAIN_SECTORS: u64 = 2048;

/// Diagnoses for one disk and its partitions from geometry alone
/// (`subpage_block_size`, `misaligned_start`, `misaligned_io_opt`).
pub fn audit_disk(disk: &DiskGeometry) -> Vec<Diagnosis> {
    disk.partitions
        .iter()
        .flat_map(|part| audit_partition(disk, part))
        .collect()
}

/// Diagnoses for one partition of `disk`, in the order misaligned_start,
/// misaligned_io_opt, subpage_block_size.
pub fn audit_partition(disk: &DiskGeometry, part: &PartitionGeometry) -> Vec<Diagnosis> {
    let placement = Placement::of(disk, part.start);
    let audit = PartitionAudit {
        disk,
        part,
        placement,
        proposal: propose(disk, part, &placement),
    };
    CHECKS
        .iter()
        .filter_map(|check| check.audit(&audit))
        .collect()
}

/// One partition as the audit sees it: its disk, where it sits, and the
/// aligned geometry proposed for it (the same one for every code).
pub(crate) struct PartitionAudit<'a> {
    pub disk: &'a DiskGeometry,
    pub part: &'a PartitionGeometry,
    pub placement: Placement,
    pub proposal: Option<Proposal>,
}

/// Where a start sector sits relative to the disk's alignment boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// max(physical block size, minimum I/O size), bytes: what the kernel
    /// aligns `alignment_offset` to.
    pub granularity: u32,
    /// Bytes past the previous granularity boundary (0: aligned).
    pub start_offset_bytes: u64,
    /// The kernel's `alignment_offset` for a partition here: bytes to the
    /// next boundary (what mkfs reports as "alignment is offset by").
    pub kernel_alignment_offset: u64,
    /// The optimal I/O size checked, bytes (0: none that matters).
    pub io_opt: u64,
    /// Bytes past the previous io_opt boundary.
    pub io_opt_offset_bytes: u64,
    /// Sectors past the previous chunk boundary (`chunk_sectors` is absolute).
    pub chunk_offset_sectors: u64,
}

impl Placement {
    pub fn of(disk: &DiskGeometry, start: u64) -> Placement {
        let granularity = granularity(disk);
        let start_bytes = start.saturating_mul(SECTOR_BYTES);
        // block/blk-settings.c queue_limit_alignment_offset(): aligned when
        // start % granularity equals the disk's alignment offset.
        let offset_past = |unit: u64| -> u64 {
            if unit <= SECTOR_BYTES {
                return 0;
            }
            let disk_offset = u64::from(disk.alignment_offset) % unit;
            (start_bytes % unit + unit - disk_offset) % unit
        };
        let start_offset_bytes = offset_past(u64::from(granularity));
        let kernel_alignment_offset = if start_offset_bytes == 0 {
            0
        } else {
            u64::from(granularity) - start_offset_bytes
        };
        let io_opt = io_opt_that_matters(disk);
        let chunk = u64::from(disk.chunk_sectors);
        Placement {
            granularity,
            start_offset_bytes,
            kernel_alignment_offset,
            io_opt,
            io_opt_offset_bytes: offset_past(io_opt),
            chunk_offset_sectors: if chunk > 1 { start % chunk } else { 0 },
        }
    }

    fn misaligned(&self) -> bool {
        self.start_offset_bytes != 0
            || self.io_opt_offset_bytes != 0
            || self.chunk_offset_sectors != 0
    }
}

fn granularity(disk: &DiskGeometry) -> u32 {
    disk.physical_block_size
        .max(disk.minimum_io_size)
        .max(disk.logical_block_size)
}

/// The optimal I/O size when it asks for more than the granularity. Values
/// that are not a multiple of the granularity (some USB bridges report
/// 33553920) are not a real stripe and are ignored, as fdisk does.
fn io_opt_that_matters(disk: &DiskGeometry) -> u64 {
    let io_opt = u64::from(disk.optimal_io_size);
    let granularity = u64::from(granularity(disk));
    if io_opt > granularity && granularity > 0 && io_opt % granularity == 0 {
        io_opt
    } else {
        0
    }
}

/// The geometry to use instead: start and size in sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub start: u64,
    pub size: u64,
    /// Sectors the start is rounded to (0 when the start stays).
    pub start_step: u64,
}

/// Start rounded up to the next boundary of 1 MiB, the granularity, io_opt
/// and chunk (only if the current one is misaligned); size rounded down to a
/// whole number of pages so the end stays inside the current partition.
/// `None` when the partition is too small to hold an aligned page.
pub fn propose(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    placement: &Placement,
) -> Option<Proposal> {
    let end = part.start.checked_add(part.size)?;
    let (start, start_step) = if placement.misaligned() {
        let step = [
            DEFAULT_GRAIN_SECTORS,
            u64::from(placement.granularity) / SECTOR_BYTES,
            placement.io_opt / SECTOR_BYTES,
            u64::from(disk.chunk_sectors),
        ]
        .into_iter()
        .filter(|&sectors| sectors > 1)
        .fold(1, lcm);
        let offset = u64::from(disk.alignment_offset) / SECTOR_BYTES % step;
        let base = part.start.saturating_sub(offset);
        (base.div_ceil(step).checked_mul(step)? + offset, step)
    } else {
        (part.start, 0)
    };
    let size_step = (PAGE_BYTES.max(u64::from(disk.logical_block_size)) / SECTOR_BYTES).max(1);
    let size = end.checked_sub(start)? / size_step * size_step;
    (size > 0).then_some(Proposal {
        start,
        size,
        start_step,
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// "1 MiB", "192 KiB", "3584 B": exact, in the largest unit that divides.
pub fn exact_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map(|(unit, name)| format!("{} {name}", bytes / unit))
        .unwrap_or_else(|| format!("{bytes} B"))
}

pub(crate) fn place_of(part: &PartitionGeometry) -> PartitionPlace {
    PartitionPlace {
        partition_start: part.start,
        partition_size: part.size,
    }
}

pub(crate) fn proposed_place(proposal: Option<Proposal>) -> Option<ProposedPlace> {
    proposal.map(|proposal| ProposedPlace {
        proposed_start: proposal.start,
        proposed_size: proposal.size,
    })
}

/// The aligned geometry as sfdisk and parted commands.
pub(crate) fn fix_text(
    disk: &DiskGeometry,
    part: &PartitionGeometry,
    proposal: Option<Proposal>,
) -> String {
    let Some(proposal) = proposal else {
        return format!(
            "{} is too small to hold an aligned, whole-page partition; remove it or grow it.",
            part.name
        );
    };
    let disk_node = format!("/dev/{}", disk.name);
    let last = proposal.start + proposal.size - 1;
    let sfdisk = format!(
        "echo 'start={}, size={}' | sfdisk -N {} {disk_node}",
        proposal.start, proposal.size, part.number
    );
    if proposal.start != part.start {
        let step = proposal.start_step;
        let step_text = if step == DEFAULT_GRAIN_SECTORS {
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
             recreate the filesystem on /dev/{name}.",
            name = part.name,
            number = part.number,
            start = proposal.start,
        )
    } else {
        let cut = part.size - proposal.size;
        format!(
            "Shrink {name} by {cut} sector{plural} to {size} (a multiple of 8 sectors), after \
             shrinking any filesystem on it below that:\n  {sfdisk}\nor with parted:\n  \
             parted {disk_node} unit s resizepart {number} {last}s",
            name = part.name,
            plural = if cut == 1 { "" } else { "s" },
            size = proposal.size,
            number = part.number,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::DevId;
    use crate::model::{Code, Severity};

    /// The reference disk: 20 GiB, 512-byte logical / 4096-byte physical
    /// sectors, io_min = io_opt = 4096 (seed README).
    fn seed_disk(start: u64, end_inclusive: u64) -> DiskGeometry {
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

    fn codes(found: &[Diagnosis]) -> Vec<Code> {
        found.iter().map(|d| d.code).collect()
    }

    fn find(found: &[Diagnosis], code: Code) -> &Diagnosis {
        found.iter().find(|d| d.code == code).unwrap()
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
        // 128 segments x 512 B: requests stop at 64 KiB.
        assert!(
            subpage.explanation.contains("= 64 KiB"),
            "{}",
            subpage.explanation
        );

        let start = find(&found, Code::MisalignedStart);
        assert_eq!(start.evidence.to_map()["granularity"], 4096);
        assert_eq!(start.evidence.to_map()["offset_bytes"], 512);
        // What the kernel puts in sdc2/alignment_offset and mkfs prints.
        assert_eq!(start.evidence.to_map()["alignment_offset"], 3584);
        // Start rounded up to 1 MiB: 6974 * 2048; the old end is 41929650
        // (exclusive), 27646898 sectors away, rounded down to 8.
        let line = "echo 'start=14282752, size=27646896' | sfdisk -N 2 /dev/sdc";
        assert!(start.fix.contains(line), "{}", start.fix);
        assert!(
            start
                .fix
                .contains("parted /dev/sdc unit s rm 2 mkpart primary 14282752s 41929647s"),
            "{}",
            start.fix
        );
        assert_eq!(subpage.fix, start.fix, "one geometry fixes both");
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
        assert!(
            subpage
                .fix
                .contains("echo 'start=14282752, size=27646896' | sfdisk -N 2 /dev/sdc"),
            "{}",
            subpage.fix
        );
        assert!(
            subpage.fix.contains("resizepart 2 41929647s"),
            "{}",
            subpage.fix
        );
        assert!(subpage.fix.contains("by 2 sectors"), "{}", subpage.fix);
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
        assert!(
            found[0].fix.contains("start=2048, size=6008"),
            "{}",
            found[0].fix
        );

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
        assert!(found[0].fix.contains("start=2055,"), "{}", found[0].fix);
    }

    fn striped(io_opt: u32, chunk_sectors: u32, start: u64) -> DiskGeometry {
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
        assert!(found[0].fix.contains("start=4096,"), "{}", found[0].fix);

        // Three data disks of 64 KiB: io_opt 192 KiB = 384 sectors; 2048 is
        // 128 sectors past a stripe; lcm(2048, 384) = 6144.
        let found = audit_disk(&striped(3 * 65536, 0, 2048));
        assert_eq!(codes(&found), [Code::MisalignedIoOpt]);
        assert_eq!(found[0].evidence.to_map()["io_opt_offset_bytes"], 128 * 512);
        assert!(found[0].fix.contains("start=6144,"), "{}", found[0].fix);
        assert!(found[0].fix.contains("3 MiB"), "{}", found[0].fix);
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
        assert!(found[0].fix.contains("too small"), "{}", found[0].fix);
    }

    #[test]
    fn exact_sizes_use_the_largest_dividing_unit() {
        assert_eq!(exact_size(1 << 20), "1 MiB");
        assert_eq!(exact_size(3 * 65536), "192 KiB");
        assert_eq!(exact_size(3584), "3584 B");
        assert_eq!(exact_size(0), "0 B");
    }
}
