//! What a diagnosis proposes: the decision behind its fix, made once by its
//! check in the engine and read both by the fix text (`crate::explain`) and
//! by the replay that predicts the fix's effect (`engine::what_if`), so the
//! number a user is told to set is the number the prediction assumed.
//!
//! The numbers the JSON schema already carries are serialized from here:
//! `proposed_start`/`proposed_size` from the partition proposal, and
//! `proposed_max_sectors_kb` from [`SplitFix::RaiseMaxSectorsKb`]. The rest
//! stays out of the JSON, which is unchanged.

use serde::ser::SerializeMap;
use serde::Serialize;

/// The aligned, whole-page geometry to recreate or shrink a partition to,
/// sectors (the static audit's proposal, the same for all its codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProposedPlace {
    pub proposed_start: u64,
    pub proposed_size: u64,
    /// Sectors the start was rounded up to a multiple of (0: the start stays).
    #[serde(skip)]
    pub start_step: u64,
    /// The partition's number in the table (`sfdisk -N`, `parted rm`).
    #[serde(skip)]
    pub partition_number: u32,
}

/// `subpage_block_size`'s fix.
///
/// Serialized only flattened into the evidence: a partition proposal as
/// `proposed_start` and `proposed_size`, anything else as nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubpageFix {
    /// From the audit: recreate or shrink the partition to the proposed
    /// geometry; `None` when it is too small to hold an aligned, whole-page
    /// partition.
    Partition(Option<ProposedPlace>),
    /// Resize the partition from `from` to `to` sectors, a multiple of
    /// 4 KiB, so the kernel gives it 4096-byte blocks.
    Resize { from: u64, to: u64 },
    /// Give the device a size that is a multiple of 4 KiB, set a 4096-byte
    /// block size, or write with O_DIRECT.
    PageSizedBlocks,
    /// Nothing in the geometry: whoever holds the device chose the small
    /// blocks; make the filesystem with 4096-byte ones.
    FilesystemBlocks,
}

impl Serialize for SubpageFix {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SubpageFix::Partition(Some(place)) => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("proposed_start", &place.proposed_start)?;
                map.serialize_entry("proposed_size", &place.proposed_size)?;
                map.end()
            }
            _ => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

/// `split_amplification`'s fix, one per dominant cause (two for
/// `max_sectors`: a queue that can be raised, or one at its hardware limit).
///
/// Serialized only flattened into the evidence: raising `max_sectors_kb` as
/// `proposed_max_sectors_kb`, anything else as nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitFix {
    /// `max_sectors`: raise the queue's `max_sectors_kb` to `to_kb` (the
    /// hardware allows it).
    RaiseMaxSectorsKb { to_kb: u64 },
    /// `max_sectors` at `max_hw_sectors_kb`: nothing to raise; submit I/O of
    /// at most `max_sectors_kb` if the split matters.
    AtHardwareLimit,
    /// `max_sectors` with `max_hw_sectors_kb` unknown (a geometry that did
    /// not give it): whether the cap can be raised is not known; read the
    /// hardware limit, and raise toward it if it is higher.
    HardwareLimitUnknown,
    /// `physical_block` on a partition: recreate it starting at `start`
    /// (1 MiB aligned).
    MovePartitionStart { start: u64 },
    /// `physical_block` elsewhere: align the I/O offsets to the physical block.
    AlignIoOffsets,
    /// `chunk_boundary`: align the start and the I/O to `chunk_sectors`.
    AlignToChunks,
    /// `max_segments`: fewer, larger, contiguous buffers, or I/O of at most
    /// `max_segments` pages.
    FewerSegments,
    /// `max_segment_size`: I/O of at most `max_kb` KiB (`max_segments` full
    /// segments), a driver limit.
    SmallerIo { max_kb: u64 },
    /// `virt_boundary`: buffers aligned to the boundary.
    AlignedBuffers,
    /// `discard_granularity`: align the start and the discard ranges.
    AlignDiscards,
    /// `unknown`: look for stacked devices that split on their own limits.
    CheckStackedDevices,
    /// `unknown` on a bio-based device (device-mapper, md): it splits at
    /// its own boundaries, a target's end or a stripe chunk; every split
    /// point was a multiple of `boundary_sectors` (0: too few to say).
    AlignToOwnBoundaries { boundary_sectors: u64 },
    /// `max_discard`: set `discard_max_bytes` to `to_bytes`, the largest
    /// multiple of 4 KiB (and of the physical block) the hardware takes: a
    /// raise, or a cap that no longer puts every later piece off the grid.
    SetDiscardMaxBytes { to_bytes: u64 },
    /// `max_discard` at the ceiling (or an unknown limit): the device takes
    /// discards of at most that size; the pieces are its own.
    AtDiscardLimit,
    /// `crypt_max_io`: dm-crypt passes down no larger piece (128 KiB since
    /// 6.11, which its parameters only lower; 1 MiB writes before).
    AtCryptLimit,
}

impl Serialize for SplitFix {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SplitFix::RaiseMaxSectorsKb { to_kb } => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("proposed_max_sectors_kb", to_kb)?;
                map.end()
            }
            SplitFix::SetDiscardMaxBytes { to_bytes } => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("proposed_discard_max_bytes", to_bytes)?;
                map.end()
            }
            SplitFix::AlignToOwnBoundaries { boundary_sectors } if *boundary_sectors > 0 => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("split_boundary_sectors", boundary_sectors)?;
                map.end()
            }
            _ => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

/// `merge_blocked`'s fix: the first of its reasons that applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeFix {
    /// `nomerges` is set: switch merging back on.
    AllowMerging,
    /// The virt boundary refuses bios that start or end inside a page:
    /// write page-aligned, whole-page bios.
    PageAlignedBios,
    /// No I/O scheduler: use mq-deadline, which merges across CPUs, or
    /// submit the stream from one task.
    UseMqDeadline,
    /// Nothing forbids the merges: look for neighbours whose flags or
    /// cgroups differ.
    CheckFlags,
    /// The queue's settings are unknown (no geometry, as in an imported
    /// trace): read `nomerges`, the virt boundary and the scheduler, then
    /// apply the fix of the one that forbids the merges.
    ReadQueueSettings,
}

/// `requeued_commands`' fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueFix {
    /// A virtio ring of `ring_descriptors` filled by one command: offer
    /// indirect descriptors on the host; in the guest, submit direct I/O of
    /// at most `io_pages` pages, so that two commands fit the ring at once.
    IndirectDescriptors {
        ring_descriptors: u64,
        io_pages: u64,
    },
    /// The driver's queue overfilled: lower `nr_requests` to this, half
    /// the hardware queue's tags; 0 when the tags are unknown (no geometry,
    /// as in an imported trace), so no depth is proposed: the fix then says
    /// to read the real values first.
    LowerNrRequests { nr_requests: u32 },
}

/// `misaligned_stack`'s fix: where the misaligned offset is set, by the
/// tool that set it. Each means recreating (or moving) the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackFix {
    /// The partition below the stack starts off the grid: recreate it at
    /// `proposed_start` (sectors).
    Partition {
        partition: String,
        disk: String,
        proposed_start: u64,
    },
    /// An LVM logical volume (dm uuid `LVM-`): the PV's data area on
    /// `pv` starts off the grid.
    LvmDataAlignment { pv: String, alignment_kib: u64 },
    /// dm-crypt (`CRYPT-` uuid): the payload starts off the grid on `device`.
    CryptPayload {
        device: String,
        proposed_offset: u64,
    },
    /// md: the member `member`'s data offset is off the grid.
    MdDataOffset { member: String, alignment_kib: u64 },
    /// A table loaded by hand: reload `dm_name`'s target with this offset
    /// into `device`.
    DmTable {
        dm_name: String,
        device: String,
        proposed_offset: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Holder<T: Serialize> {
        before: u8,
        #[serde(flatten)]
        fix: T,
        after: u8,
    }

    fn json<T: Serialize>(fix: T) -> String {
        serde_json::to_string(&Holder {
            before: 1,
            fix,
            after: 2,
        })
        .unwrap()
    }

    #[test]
    fn fixes_flatten_to_the_schema_keys_or_to_nothing() {
        let place = ProposedPlace {
            proposed_start: 2048,
            proposed_size: 6008,
            start_step: 2048,
            partition_number: 2,
        };
        assert_eq!(
            json(SubpageFix::Partition(Some(place))),
            r#"{"before":1,"proposed_start":2048,"proposed_size":6008,"after":2}"#
        );
        assert_eq!(
            json(Some(place)),
            r#"{"before":1,"proposed_start":2048,"proposed_size":6008,"after":2}"#,
            "the same keys as a misaligned finding's proposal"
        );
        for nothing in [
            SubpageFix::Partition(None),
            SubpageFix::Resize { from: 9, to: 8 },
            SubpageFix::PageSizedBlocks,
            SubpageFix::FilesystemBlocks,
        ] {
            assert_eq!(json(nothing), r#"{"before":1,"after":2}"#);
        }
        assert_eq!(
            json(SplitFix::RaiseMaxSectorsKb { to_kb: 256 }),
            r#"{"before":1,"proposed_max_sectors_kb":256,"after":2}"#
        );
        assert_eq!(
            json(SplitFix::MovePartitionStart { start: 12288 }),
            r#"{"before":1,"after":2}"#
        );
    }
}

/// What applying a fix costs, cheapest first: the order in which a report
/// lists the fixes that apply to one device at one severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FixCost {
    /// A queue setting, applied at once and undone as easily.
    Setting,
    /// A change in how the program writes, or a host setting.
    Program,
    /// The partition recreated or resized: data moved, a backup first.
    Repartition,
    /// The stack (LVM, md, dm-crypt) recreated.
    RecreateStack,
    /// Nothing to set: a device or path to look at.
    Investigate,
}
