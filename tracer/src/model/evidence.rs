//! Typed evidence: one struct per diagnosis code, each serialized to the
//! diagnosis's `evidence` object. The stable keys of docs/json-schema.md are fields here
//! (`block_size` in bytes, `cause`, `partition_start`/`partition_size` in
//! sectors), so renaming one is a compile error in the code that reads it,
//! not a silent schema change. Parts shared by several codes are flattened
//! into the same object.
//!
//! Each struct also carries its code's fix (see `fix.rs`) and, skipped in
//! the JSON, the few facts its explanation names that the JSON does not
//! (the operation, how a block size was seen), so a finding is all its
//! words need.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::geometry::MaxSectorsSource;
use serde_json::{Map, Value};

use super::{
    Code, FixCost, MergeFix, Op, ProposedPlace, RequeueCause, RequeueFix, SplitCause, SplitFix,
    StackFix, SubpageFix, WhatIf,
};

/// The evidence of one diagnosis; the variant decides its code.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    SubpageBlockSize(SubpageBlockSizeEvidence),
    MisalignedStart(MisalignedStartEvidence),
    MisalignedIoOpt(MisalignedIoOptEvidence),
    MisalignedStack(MisalignedStackEvidence),
    CryptSectorSize(CryptSectorSizeEvidence),
    AtomicWritesLost(AtomicWritesLostEvidence),
    SplitAmplification(SplitAmplificationEvidence),
    MergeBlocked(MergeBlockedEvidence),
    RequeuedCommands(RequeuedCommandsEvidence),
    IoErrors(IoErrorsEvidence),
}

impl Evidence {
    /// What its fix costs: a report lists the cheapest fix first.
    pub fn fix_cost(&self) -> FixCost {
        match self {
            Evidence::SubpageBlockSize(evidence) => match evidence.fix {
                SubpageFix::Partition(_) | SubpageFix::Resize { .. } => FixCost::Repartition,
                SubpageFix::PageSizedBlocks | SubpageFix::FilesystemBlocks => FixCost::Program,
            },
            Evidence::MisalignedStart(_) | Evidence::MisalignedIoOpt(_) => FixCost::Repartition,
            Evidence::MisalignedStack(evidence) => match evidence.fix {
                StackFix::Partition { .. } => FixCost::Repartition,
                _ => FixCost::RecreateStack,
            },
            Evidence::CryptSectorSize(_) => FixCost::RecreateStack,
            Evidence::SplitAmplification(evidence) => match evidence.fix {
                SplitFix::RaiseMaxSectorsKb { .. } => FixCost::Setting,
                SplitFix::MovePartitionStart { .. } => FixCost::Repartition,
                _ => FixCost::Program,
            },
            Evidence::MergeBlocked(evidence) => match evidence.fix {
                MergeFix::AllowMerging | MergeFix::UseMqDeadline | MergeFix::ReadQueueSettings => {
                    FixCost::Setting
                }
                MergeFix::PageAlignedBios | MergeFix::CheckFlags => FixCost::Program,
            },
            Evidence::RequeuedCommands(evidence) => match evidence.fix {
                RequeueFix::LowerNrRequests { .. } => FixCost::Setting,
                _ => FixCost::Program,
            },
            Evidence::IoErrors(_) => FixCost::Investigate,
            Evidence::AtomicWritesLost(evidence) => match evidence.level {
                AtomicLevel::Partition => FixCost::Repartition,
                AtomicLevel::Dm | AtomicLevel::Md => FixCost::RecreateStack,
            },
        }
    }

    /// The diagnosis code this evidence supports.
    pub fn code(&self) -> Code {
        match self {
            Evidence::SubpageBlockSize(_) => Code::SubpageBlockSize,
            Evidence::MisalignedStart(_) => Code::MisalignedStart,
            Evidence::MisalignedIoOpt(_) => Code::MisalignedIoOpt,
            Evidence::MisalignedStack(_) => Code::MisalignedStack,
            Evidence::CryptSectorSize(_) => Code::CryptSectorSize,
            Evidence::AtomicWritesLost(_) => Code::AtomicWritesLost,
            Evidence::SplitAmplification(_) => Code::SplitAmplification,
            Evidence::MergeBlocked(_) => Code::MergeBlocked,
            Evidence::RequeuedCommands(_) => Code::RequeuedCommands,
            Evidence::IoErrors(_) => Code::IoErrors,
        }
    }

    /// Stable key `block_size`: the block size the finding is about, bytes.
    pub fn block_size(&self) -> Option<u32> {
        match self {
            Evidence::SubpageBlockSize(evidence) => Some(evidence.block_size),
            Evidence::MisalignedStart(_)
            | Evidence::MisalignedIoOpt(_)
            | Evidence::MisalignedStack(_)
            | Evidence::CryptSectorSize(_)
            | Evidence::AtomicWritesLost(_)
            | Evidence::SplitAmplification(_)
            | Evidence::MergeBlocked(_)
            | Evidence::RequeuedCommands(_)
            | Evidence::IoErrors(_) => None,
        }
    }

    /// Stable key `cause`.
    pub fn cause(&self) -> Option<&'static str> {
        match self {
            Evidence::SplitAmplification(evidence) => Some(evidence.cause.key()),
            Evidence::RequeuedCommands(evidence) => evidence.cause.map(RequeueCause::key),
            Evidence::SubpageBlockSize(_)
            | Evidence::MisalignedStart(_)
            | Evidence::MisalignedIoOpt(_)
            | Evidence::MisalignedStack(_)
            | Evidence::CryptSectorSize(_)
            | Evidence::AtomicWritesLost(_)
            | Evidence::MergeBlocked(_)
            | Evidence::IoErrors(_) => None,
        }
    }

    /// Stable keys `partition_start` and `partition_size`, sectors.
    pub fn partition(&self) -> Option<PartitionPlace> {
        match self {
            Evidence::SubpageBlockSize(evidence) => evidence.partition,
            Evidence::MisalignedStart(evidence) => Some(evidence.partition),
            Evidence::MisalignedIoOpt(evidence) => Some(evidence.partition),
            Evidence::AtomicWritesLost(evidence) => evidence.partition,
            Evidence::MisalignedStack(_) | Evidence::CryptSectorSize(_) => None,
            Evidence::SplitAmplification(evidence) => evidence.partition,
            Evidence::MergeBlocked(evidence) => evidence.partition,
            Evidence::RequeuedCommands(evidence) => evidence.partition,
            Evidence::IoErrors(evidence) => evidence.partition,
        }
    }

    /// The numbers the traffic added to a static finding, if it has room
    /// for them: the codes the audit raises from geometry alone. The live
    /// codes' evidence is the traffic itself.
    pub fn live_mut(&mut self) -> Option<&mut LiveEvidence> {
        match self {
            Evidence::SubpageBlockSize(evidence) => Some(&mut evidence.live),
            Evidence::MisalignedStart(evidence) => Some(&mut evidence.live),
            Evidence::MisalignedIoOpt(evidence) => Some(&mut evidence.live),
            Evidence::MisalignedStack(evidence) => Some(&mut evidence.live),
            Evidence::CryptSectorSize(evidence) => Some(&mut evidence.live),
            Evidence::AtomicWritesLost(evidence) => Some(&mut evidence.live),
            Evidence::SplitAmplification(_)
            | Evidence::MergeBlocked(_)
            | Evidence::RequeuedCommands(_)
            | Evidence::IoErrors(_) => None,
        }
    }

    /// The commands the what-if counts, whose service model times them.
    pub fn what_if_scope(&self) -> WhatIfScope {
        match self {
            // The fix changes the block size buffered writes use.
            Evidence::SubpageBlockSize(_) => WhatIfScope::Op(Op::Write),
            Evidence::RequeuedCommands(evidence) => WhatIfScope::Op(evidence.op),
            Evidence::MisalignedStart(_)
            | Evidence::MisalignedIoOpt(_)
            | Evidence::MisalignedStack(_)
            | Evidence::SplitAmplification(_)
            | Evidence::MergeBlocked(_) => WhatIfScope::AllData,
            Evidence::CryptSectorSize(_)
            | Evidence::AtomicWritesLost(_)
            | Evidence::IoErrors(_) => WhatIfScope::NoWhatIf,
        }
    }

    /// The fix's predicted effect. Every code whose fix is a change to the
    /// geometry or the queue has room for one; `io_errors`' fix is a repair
    /// of the device or its path, which nothing here can replay.
    pub fn what_if(&self) -> Option<&WhatIf> {
        self.what_if_slot_ref()?.as_ref()
    }

    /// Sets the prediction; a code without room for one ignores it.
    pub fn set_what_if(&mut self, what_if: WhatIf) {
        if let Some(slot) = self.what_if_slot() {
            *slot = Some(what_if);
        }
    }

    /// Every prediction it carries, the workaround's too.
    pub fn for_each_what_if_mut(&mut self, mut each: impl FnMut(&mut WhatIf)) {
        if let Evidence::RequeuedCommands(evidence) = self {
            if let Some(workaround) = &mut evidence.workaround_what_if {
                each(workaround);
            }
        }
        if let Some(Some(what_if)) = self.what_if_slot() {
            each(what_if);
        }
    }

    fn what_if_slot(&mut self) -> Option<&mut Option<WhatIf>> {
        Some(match self {
            Evidence::SubpageBlockSize(evidence) => &mut evidence.what_if,
            Evidence::MisalignedStart(evidence) => &mut evidence.what_if,
            Evidence::MisalignedIoOpt(evidence) => &mut evidence.what_if,
            Evidence::MisalignedStack(evidence) => &mut evidence.what_if,
            Evidence::CryptSectorSize(_) | Evidence::AtomicWritesLost(_) => return None,
            Evidence::SplitAmplification(evidence) => &mut evidence.what_if,
            Evidence::MergeBlocked(evidence) => &mut evidence.what_if,
            Evidence::RequeuedCommands(evidence) => &mut evidence.what_if,
            Evidence::IoErrors(_) => return None,
        })
    }

    fn what_if_slot_ref(&self) -> Option<&Option<WhatIf>> {
        Some(match self {
            Evidence::SubpageBlockSize(evidence) => &evidence.what_if,
            Evidence::MisalignedStart(evidence) => &evidence.what_if,
            Evidence::MisalignedIoOpt(evidence) => &evidence.what_if,
            Evidence::MisalignedStack(evidence) => &evidence.what_if,
            Evidence::CryptSectorSize(_) | Evidence::AtomicWritesLost(_) => return None,
            Evidence::SplitAmplification(evidence) => &evidence.what_if,
            Evidence::MergeBlocked(evidence) => &evidence.what_if,
            Evidence::RequeuedCommands(evidence) => &evidence.what_if,
            Evidence::IoErrors(_) => return None,
        })
    }

    /// The evidence as the JSON object it serializes to, keys sorted.
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // Every variant is a struct of plain numbers and strings.
            _ => Map::new(),
        }
    }
}

/// Which commands a diagnosis's what-if counts (see [`Evidence::what_if_scope`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhatIfScope {
    /// One operation's commands.
    Op(Op),
    /// Every data operation's together, timed by the service model of the
    /// operation with the most user I/Os.
    AllData,
    /// None: the code's cost is not commands a fix removes (dm-crypt's is
    /// CPU, failed commands need a repair), so it carries no what-if.
    NoWhatIf,
}

/// Where a partition sits on its disk, sectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PartitionPlace {
    pub partition_start: u64,
    pub partition_size: u64,
}

/// What the traffic showed on a device with a static finding.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LiveEvidence {
    #[serde(flatten)]
    pub traffic: Option<ObservedTraffic>,
    #[serde(flatten)]
    pub dirty: Option<DirtyBuffers>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ObservedTraffic {
    pub observed_user_ios: u64,
    /// Bytes.
    pub observed_bio_size_p50: u64,
    /// Share of user I/Os smaller than a page, 0..=1.
    pub observed_subpage_bio_share: f64,
    pub observed_commands: u64,
    pub bios_per_command: f64,
    pub misaligned_command_share: f64,
    pub misaligned_4k_command_share: f64,
    pub extra_split_fragments: u64,
}

/// `block_dirty_buffer` counts: the block size buffered writes really used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DirtyBuffers {
    pub dirty_buffers: u64,
    /// Buffers by size in bytes.
    pub dirty_buffer_sizes: BTreeMap<u64, u64>,
}

/// Where a block size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BlockSizeSource {
    /// The kernel's current value, read with the BLKBSZGET ioctl.
    #[serde(rename = "BLKBSZGET")]
    Blkbszget,
    /// `set_init_blocksize`'s rule applied to the partition size.
    #[serde(rename = "predicted")]
    Predicted,
}

/// How a sub-page block size was found, and what of it the JSON leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubpageSeen {
    /// The audit: the partition's size gives it `predicted_block_size`
    /// (`set_init_blocksize`); `merging` decides how its small bios merge.
    Geometry {
        predicted_block_size: u32,
        merging: MergeLimits,
    },
    /// `buffers` of `total` dirty buffers had the block size.
    DirtyBuffers { buffers: u64, total: u64 },
    /// The same, on a device whose size (`size`, sectors) gives it
    /// page-sized blocks: someone chose the smaller ones.
    ChosenBlocks { buffers: u64, total: u64, size: u64 },
    /// On a partition of unknown geometry, `bios` of its `writes` were all
    /// of the block size.
    UniformWrites { bios: u64, writes: u64 },
}

/// The disk's limits that decide how many small bios one command can hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeLimits {
    pub nomerges: u32,
    pub virt_boundary_mask: u64,
    pub max_segments: u32,
    pub max_sectors_kb: u32,
}

/// `subpage_block_size`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubpageBlockSizeEvidence {
    /// Bytes.
    pub block_size: u32,
    /// Known for the static finding; the live one reads it from the traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size_source: Option<BlockSizeSource>,
    /// A larger block size someone holding the partition set (a mount).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_block_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_mod_8: Option<u64>,
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
    /// A partition proposal is `proposed_start`/`proposed_size`.
    #[serde(flatten)]
    pub fix: SubpageFix,
    #[serde(flatten)]
    pub live: LiveEvidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    #[serde(skip)]
    pub seen: SubpageSeen,
}

/// `misaligned_start`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MisalignedStartEvidence {
    #[serde(flatten)]
    pub partition: PartitionPlace,
    /// max(physical block, minimum I/O), bytes.
    pub granularity: u32,
    /// Bytes past the previous granularity boundary.
    pub offset_bytes: u64,
    /// The kernel's `alignment_offset` for the partition, bytes.
    pub alignment_offset: u64,
    pub physical_block_size: u32,
    pub minimum_io_size: u32,
    /// The fix: the partition recreated here (`None`: it is too small).
    #[serde(flatten)]
    pub proposed: Option<ProposedPlace>,
    #[serde(flatten)]
    pub live: LiveEvidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// The disk's own `alignment_offset`, bytes.
    #[serde(skip)]
    pub disk_alignment_offset: u32,
}

/// How far a start is past an optimal-I/O boundary, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IoOptOffset {
    pub optimal_io_size: u64,
    pub io_opt_offset_bytes: u64,
}

/// How far a start is past a chunk boundary, sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkOffset {
    pub chunk_sectors: u32,
    pub chunk_offset_sectors: u64,
}

/// `misaligned_io_opt`: at least one of the two offsets is present.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MisalignedIoOptEvidence {
    #[serde(flatten)]
    pub partition: PartitionPlace,
    #[serde(flatten)]
    pub io_opt: Option<IoOptOffset>,
    #[serde(flatten)]
    pub chunk: Option<ChunkOffset>,
    /// The fix: the partition recreated here (`None`: it is too small).
    #[serde(flatten)]
    pub proposed: Option<ProposedPlace>,
    #[serde(flatten)]
    pub live: LiveEvidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

/// `misaligned_stack`: a device-mapper or md device whose data lands off
/// the physical-block (or chunk) grid of the disk below, through the offsets
/// its levels add (partition start, table offset, data offset).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MisalignedStackEvidence {
    /// `dm-linear`, `dm-crypt`, `md-raid1`, ...
    pub stack_kind: String,
    /// The misaligned leg from below the top to the bottom: each device,
    /// how the level above reaches it, and where the top's data starts in it.
    pub stack: Vec<StackStep>,
    /// The device the data lands on, and where (sectors).
    pub bottom_device: String,
    pub bottom_start: u64,
    /// max(physical block, minimum I/O) of the bottom, bytes.
    pub granularity: u32,
    /// Bytes past the previous granularity boundary (or chunk, below).
    pub offset_bytes: u64,
    /// Bytes to the next boundary: what mkfs prints as "alignment is offset by".
    pub alignment_offset: u64,
    /// The top device's own sysfs `alignment_offset` (the kernel's stacked
    /// limit), as a cross-check.
    pub kernel_alignment_offset: u64,
    pub physical_block_size: u32,
    pub minimum_io_size: u32,
    /// Legs (stripes, mirrors, targets) that land misaligned, of all.
    pub misaligned_legs: u64,
    pub legs: u64,
    /// Where the fix goes: the level whose own offset is off the grid.
    pub culprit_device: String,
    pub culprit_via: String,
    /// That level's offset now, and the one that aligns the data, sectors.
    pub culprit_offset_sectors: i64,
    pub proposed_offset_sectors: i64,
    #[serde(skip)]
    pub fix: StackFix,
    #[serde(flatten)]
    pub live: LiveEvidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

/// `crypt_sector_size`: dm-crypt encrypting in sectors smaller than the
/// physical block of the disk below.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CryptSectorSizeEvidence {
    /// dm-crypt's `sector_size`, bytes.
    pub crypt_sector_size: u32,
    /// The disk the data lands on, and its physical block size.
    pub bottom_device: String,
    pub physical_block_size: u32,
    /// The crypt device's logical block size: the smallest write it takes.
    pub logical_block_size: u32,
    /// A LUKS2 header (dm uuid `CRYPT-LUKS2-`), which `cryptsetup reencrypt`
    /// can move to larger sectors in place.
    pub luks2: bool,
    #[serde(skip)]
    pub dm_name: String,
    #[serde(flatten)]
    pub live: LiveEvidence,
}

/// The level of the stack that lost atomic writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AtomicLevel {
    /// A partition whose start is off its disk's atomic grid.
    Partition,
    /// A device-mapper device offering less than the devices below it.
    Dm,
    /// An md device offering less than its members.
    Md,
}

impl AtomicLevel {
    pub const fn as_str(self) -> &'static str {
        match self {
            AtomicLevel::Partition => "partition",
            AtomicLevel::Dm => "dm",
            AtomicLevel::Md => "md",
        }
    }
}

/// Why a stacked device offers less than its members (the fix depends on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AtomicStackCause {
    /// The data starts off the members' atomic grid (a table or data
    /// offset): the kernel stacks no atomic writes from such a member.
    DataOffset,
    /// A chunk smaller than the members' unit maximum, or not a multiple
    /// of their unit minimum: the chunk caps or drops them.
    Chunk,
    /// Neither: this kernel's target or RAID level passes none up.
    Level,
}

/// `atomic_writes_lost`: a partition, dm or md device offering less of the
/// untorn (atomic) writes than the device below it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AtomicWritesLostEvidence {
    pub level: AtomicLevel,
    /// The device whose atomic writes were lost (the disk; a stack's member).
    pub below_device: String,
    /// What `below_device` offers (its sysfs `queue/atomic_write_*`), bytes.
    pub atomic_write_unit_min_bytes: u32,
    pub atomic_write_unit_max_bytes: u32,
    pub atomic_write_max_bytes: u32,
    pub atomic_write_boundary_bytes: u32,
    /// What the level offers, as `statx` reports it: 0 when none.
    pub offered_unit_min_bytes: u32,
    pub offered_unit_max_bytes: u32,
    /// A partition: where it sits.
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
    /// The grid its start (or a stack's data start) must be on, sectors:
    /// max(unit minimum, boundary).
    pub grid_sectors: u64,
    /// Sectors past the previous grid line (0 for a stack cut by its chunk
    /// or its level).
    pub start_offset_sectors: u64,
    /// A partition's fix: recreated at the next start on the grid
    /// (`proposed_start`, `proposed_size`); `None` when too small.
    #[serde(flatten)]
    pub proposed: Option<ProposedPlace>,
    /// A stack: why, its kind (`dm-linear`, `md-raid0`), its chunk and
    /// where its data starts on `below_device`, sectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_cause: Option<AtomicStackCause>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stack_kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_sectors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_start_sectors: Option<u64>,
    /// For a data offset: the level that set it and the offset that keeps
    /// the atomic writes, sectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit_via: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposed_offset_sectors: Option<u64>,
    #[serde(skip)]
    pub dm_name: String,
    #[serde(flatten)]
    pub live: LiveEvidence,
}

/// One level of a stack, as `misaligned_stack` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StackStep {
    pub device: String,
    pub via: String,
    pub start_sectors: u64,
}

/// `split_amplification`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitAmplificationEvidence {
    /// The dominant split cause (a key of `split_causes`).
    pub cause: SplitCause,
    /// Splits by cause.
    pub causes: BTreeMap<SplitCause, u64>,
    pub splits: u64,
    /// User I/Os of `op` cut at least once (`splits` counts the cuts).
    pub split_user_ios: u64,
    pub user_ios: u64,
    pub fragments: u64,
    pub commands: u64,
    /// Share of user I/Os split, 0..=1.
    pub split_share: f64,
    /// Commands per user I/O, after merges.
    pub amplification: f64,
    /// Bytes.
    pub user_io_size_p50: u64,
    pub command_size_p50: u64,
    /// Bytes carried per command.
    pub command_size_mean: u64,
    pub max_sectors_kb: u32,
    pub max_hw_sectors_kb: u32,
    /// Where `max_sectors_kb` comes from (the device's geometry; left out
    /// when a recording's geometry predates it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sectors_source: Option<MaxSectorsSource>,
    /// The device's `optimal_io_size`, bytes (0: none), which the source
    /// may be.
    pub optimal_io_size: u32,
    pub max_segments: u32,
    pub max_segment_size: u32,
    pub physical_block_size: u32,
    pub chunk_sectors: u32,
    pub virt_boundary_mask: u64,
    pub discard_granularity: u32,
    /// The discard limit and its hardware ceiling (0: unknown).
    pub discard_max_bytes: u64,
    pub discard_max_hw_bytes: u64,
    /// dm-crypt's cap on one piece of this op, bytes (cause `crypt_max_io`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crypt_max_io_bytes: Option<u64>,
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
    /// Raising `max_sectors_kb` is `proposed_max_sectors_kb`, the value
    /// `what_if` assumed.
    #[serde(flatten)]
    pub fix: SplitFix,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// The operation with the most user I/Os, which the counts are of.
    #[serde(skip)]
    pub op: Op,
    #[serde(skip)]
    pub cost: SplitCost,
}

/// What the extra commands of a split cost the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitCost {
    /// One more command per split: the amplification.
    ExtraCommands,
    /// Merges left at most one command per user I/O: nothing.
    AbsorbedByMerges,
    /// The pieces are still large commands (`command_size_mean`): little.
    LargePieces,
    /// Chunk cuts of I/O larger than a chunk (within a tenth of one command
    /// per chunk spanned): a RAID or stripe spreading it over its disks.
    ByDesign,
    /// No command of these user I/Os is in the trace (a bio-based device
    /// traced without remaps or completions below it): not measured.
    Unmeasured,
}

/// `merge_blocked`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MergeBlockedEvidence {
    /// Commands that started where the previous one ended, whose bios were
    /// queued before it was issued, and that could have merged with it.
    pub adjacent_unmerged_commands: u64,
    pub commands: u64,
    pub user_ios: u64,
    pub bios_per_command: f64,
    /// Bytes.
    pub command_size_p50: u64,
    pub user_io_size_p50: u64,
    pub max_sectors_kb: u32,
    pub nomerges: u32,
    pub virt_boundary_mask: u64,
    pub max_segments: u32,
    pub max_segment_size: u32,
    pub scheduler: String,
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// The operation with the most user I/Os, which the counts are of.
    #[serde(skip)]
    pub op: Op,
    /// Bios the commands carried (user I/Os and split pieces):
    /// `bios_per_command` before rounding.
    #[serde(skip)]
    pub bios: u64,
    #[serde(skip)]
    pub fix: MergeFix,
}

/// `requeued_commands`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequeuedCommandsEvidence {
    /// Times a command was sent back by the driver and issued again.
    pub requeues: u64,
    pub commands: u64,
    /// Requeues per command, 0..
    pub requeue_share: f64,
    /// Microseconds from a requeue to the command's next issue.
    pub requeue_delay_p50_us: u64,
    pub requeue_delay_p99_us: u64,
    /// Size of the commands, bytes: the median and the largest.
    pub command_size_p50: u64,
    pub command_size_max: u64,
    /// Segments the largest command needs at one per 4 KiB page (what
    /// O_DIRECT from user memory gets), against the device's cap.
    pub largest_command_segments: u64,
    pub max_segments: u32,
    pub max_sectors_kb: u32,
    /// The scheduler's request limit and the hardware queue's tags.
    pub nr_requests: u32,
    pub hw_queue_tags: u32,
    /// virtio: whether the device offers indirect descriptors (feature bit 28).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtio_indirect_desc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<RequeueCause>,
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
    /// The host-side fix: the same commands, each issued once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// The guest-side workaround the fix also names (smaller direct I/O).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workaround_what_if: Option<WhatIf>,
    /// The operation requeued most, which the counts are of.
    #[serde(skip)]
    pub op: Op,
    #[serde(skip)]
    pub fix: RequeueFix,
}

/// `io_errors`: commands the device (or what is behind it) completed with
/// an error. Counts are of data operations; flushes are left out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IoErrorsEvidence {
    /// Failed commands, every operation together.
    pub failed_commands: u64,
    /// Commands the device took, every operation together.
    pub commands: u64,
    /// User I/Os a failed command carried part of.
    pub failed_user_ios: u64,
    /// Failed commands by status name ("EIO", "ENOSPC", …).
    pub errors: BTreeMap<String, u64>,
    /// Each operation that had a failed command.
    pub failed_ops: BTreeMap<Op, FailedOp>,
    #[serde(flatten)]
    pub partition: Option<PartitionPlace>,
}

impl IoErrorsEvidence {
    /// The status of a command the device refused as not supported.
    pub const REFUSED: &'static str = "EOPNOTSUPP";

    /// Every failure was a refusal (EOPNOTSUPP): the device does not offer
    /// the operation (write zeroes, discard, a flag), and callers such as
    /// `blkdev_issue_zeroout` fall back. Not a device or path fault.
    pub fn only_refusals(&self) -> bool {
        !self.errors.is_empty() && self.errors.keys().all(|status| status == Self::REFUSED)
    }
}

/// One operation's failures in `io_errors`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedOp {
    pub failed_commands: u64,
    pub commands: u64,
    pub failed_user_ios: u64,
    pub errors: BTreeMap<String, u64>,
    /// The first sector of the lowest failed command and the last sector of
    /// the highest, on the disk (absolute sectors, also for a partition).
    #[serde(flatten)]
    pub sectors: Option<FailedSectors>,
}

/// Sectors of a disk, first and last inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FailedSectors {
    pub lowest_failed_sector: u64,
    pub highest_failed_sector: u64,
}

#[cfg(test)]
impl MisalignedStartEvidence {
    /// A partition 512 bytes past a 4 KiB physical block (alignment offset
    /// 3584), as the audit finds it: no proposal, no live evidence.
    pub fn past_a_4k_block(partition: PartitionPlace) -> MisalignedStartEvidence {
        MisalignedStartEvidence {
            partition,
            granularity: 4096,
            offset_bytes: 512,
            alignment_offset: 3584,
            physical_block_size: 4096,
            minimum_io_size: 4096,
            proposed: None,
            live: LiveEvidence::default(),
            what_if: None,
            disk_alignment_offset: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subpage() -> SubpageBlockSizeEvidence {
        SubpageBlockSizeEvidence {
            block_size: 512,
            block_size_source: Some(BlockSizeSource::Blkbszget),
            current_block_size: None,
            size_mod_8: Some(1),
            partition: Some(PartitionPlace {
                partition_start: 1050624,
                partition_size: 1048577,
            }),
            fix: SubpageFix::Partition(Some(ProposedPlace {
                proposed_start: 1050624,
                proposed_size: 1048576,
                start_step: 0,
                partition_number: 2,
            })),
            live: LiveEvidence::default(),
            what_if: None,
            seen: SubpageSeen::Geometry {
                predicted_block_size: 512,
                merging: MergeLimits::default(),
            },
        }
    }

    fn keys(evidence: &Evidence) -> Vec<String> {
        evidence.to_map().keys().cloned().collect()
    }

    #[test]
    fn flattened_parts_give_the_same_keys_as_before() {
        let mut evidence = Evidence::SubpageBlockSize(subpage());
        assert_eq!(
            keys(&evidence),
            [
                "block_size",
                "block_size_source",
                "partition_size",
                "partition_start",
                "proposed_size",
                "proposed_start",
                "size_mod_8"
            ]
        );
        let map = evidence.to_map();
        assert_eq!(map["block_size_source"], "BLKBSZGET");
        assert_eq!(map["partition_size"], 1048577);

        let live = evidence
            .live_mut()
            .expect("a static finding takes live numbers");
        live.dirty = Some(DirtyBuffers {
            dirty_buffers: 646,
            dirty_buffer_sizes: BTreeMap::from([(512, 640), (4096, 6)]),
        });
        let map = evidence.to_map();
        assert_eq!(map["dirty_buffers"], 646);
        assert_eq!(map["dirty_buffer_sizes"]["512"], 640);
        assert!(!map.contains_key("observed_user_ios"), "no traffic seen");
    }

    #[test]
    fn stable_keys_are_typed_accessors() {
        let evidence = Evidence::SubpageBlockSize(subpage());
        assert_eq!(evidence.code(), Code::SubpageBlockSize);
        assert_eq!(evidence.block_size(), Some(512));
        assert_eq!(evidence.cause(), None);
        assert_eq!(
            evidence.partition().map(|place| place.partition_start),
            Some(1050624)
        );
        let requeued = Evidence::RequeuedCommands(RequeuedCommandsEvidence {
            requeues: 32,
            commands: 64,
            requeue_share: 0.5,
            requeue_delay_p50_us: 2000,
            requeue_delay_p99_us: 3000,
            command_size_p50: 8192,
            command_size_max: 1040384,
            largest_command_segments: 254,
            max_segments: 254,
            max_sectors_kb: 4096,
            nr_requests: 256,
            hw_queue_tags: 128,
            virtio_indirect_desc: Some(false),
            cause: Some(RequeueCause::VirtioRingFull),
            partition: None,
            what_if: None,
            workaround_what_if: None,
            op: Op::Write,
            fix: RequeueFix::IndirectDescriptors {
                ring_descriptors: 256,
                io_pages: 126,
            },
        });
        assert_eq!(requeued.cause(), Some("virtio_ring_full"));
        assert_eq!(requeued.to_map()["cause"], "virtio_ring_full");
        assert_eq!(requeued.to_map()["virtio_indirect_desc"], false);
        assert_eq!(requeued.block_size(), None);
    }

    #[test]
    fn what_if_appears_only_once_set() {
        let mut evidence = Evidence::SubpageBlockSize(subpage());
        assert!(!evidence.to_map().contains_key("what_if"));
        let what_if = WhatIf {
            commands_now: 1000,
            commands_after_fix: 130,
            time_now_ms: Some(45.0),
            time_after_fix_ms: None,
            ..Default::default()
        };
        evidence.set_what_if(what_if.clone());
        assert_eq!(evidence.what_if(), Some(&what_if));
        let map = evidence.to_map();
        assert_eq!(map["what_if"]["commands_now"], 1000);
        assert_eq!(map["what_if"]["commands_after_fix"], 130);
        assert_eq!(map["what_if"]["time_now_ms"], 45.0);
    }
}
