//! Wire types shared by the eBPF programs and the userspace daemon.
//!
//! Every type is `#[repr(C)]` with explicit padding and no `bool`/`Option`,
//! so the two sides agree byte for byte. The `user` feature adds `aya::Pod`.
//!
//! [`with_block_probes!`] is the one table of block probes: the event kinds,
//! their tracepoints, JSON keys and program names on both sides come from it.
#![no_std]

/// The one table of block probes. Calls `$callback!` with every row, so each
/// list of probes (the [`EventKind`] enum and its names here, the programs in
/// tracer-ebpf, the counters in the report) is generated from these rows and
/// none can fall out of step. What else a new probe needs, and which of it
/// the compiler points at: docs/design.md, "Where a change goes". The
/// tracer-ebpf macros ignore the columns after `arguments`, so a new
/// consumer's column touches only this file.
///
/// A row: `Kind: tracepoint, json_key, classic_program, btf_program, object, arguments;`
/// - `tracepoint`: the kernel tracepoint, in the `block` category;
/// - `json_key`: the key in the report's `events` object;
/// - `classic_program`, `btf_program`: the eBPF programs of each flavor;
/// - `object`: the [`ProbeObject`] the BTF tracepoint's first argument points to;
/// - `arguments`: the BTF tracepoint's arguments (`TP_PROTO`), checked against BTF.
///
/// Rows are in wire order (the kind's value); new rows go at the end.
#[macro_export]
macro_rules! with_block_probes {
    ($callback:ident) => {
        $callback! {
            /// `block_bio_remap`: a bio moved from a partition (or upper device) to its disk.
            Remap: block_bio_remap, remap, bio_remap, btf_bio_remap, Bio, 3, "A", 15, "args->nr_sector, args->old_sector";
            /// `block_bio_queue`: a bio submitted to the block layer.
            Queue: block_bio_queue, queue, bio_queue, btf_bio_queue, Bio, 1, "Q", 1, "args->nr_sector, 0";
            /// `block_split`: a bio cut at `new_sector`.
            Split: block_split, split, split, btf_split, Bio, 2, "X", 13, "0, args->new_sector";
            /// `block_bio_backmerge`: a bio appended to a pending request.
            Backmerge: block_bio_backmerge, backmerge, bio_backmerge, btf_bio_backmerge, Bio, 1, "M", 2, "args->nr_sector, 0";
            /// `block_bio_frontmerge`: a bio prepended to a pending request.
            Frontmerge: block_bio_frontmerge, frontmerge, bio_frontmerge, btf_bio_frontmerge, Bio, 1, "F", 3, "args->nr_sector, 0";
            /// `block_rq_merge`: two pending requests merged.
            RqMerge: block_rq_merge, rq_merge, rq_merge, btf_rq_merge, Request, 1, "M", 2, "args->nr_sector, 0";
            /// `block_rq_issue`: a request handed to the driver (a device command).
            Issue: block_rq_issue, issue, rq_issue, btf_rq_issue, Request, 1, "D", 7, "args->nr_sector, 0";
            /// `block_rq_complete`: a request completed, possibly in part.
            Complete: block_rq_complete, complete, rq_complete, btf_rq_complete, Request, 3, "C", 8, "args->nr_sector, args->error";
            /// `block_bio_complete`: a bio completed on a bio-based device.
            BioComplete: block_bio_complete, bio_complete, bio_complete, btf_bio_complete, Bio, 2, "C", 8, "args->nr_sector, args->error";
            /// `block_dirty_buffer`: a buffer head dirtied (counted in the kernel).
            DirtyBuffer: block_dirty_buffer, dirty_buffer, dirty_buffer, btf_dirty_buffer, BufferHead, 1, "", 0, "args->size, 0";
            /// `block_rq_requeue`: the driver gave an issued request back; it is issued again later.
            Requeue: block_rq_requeue, requeue, rq_requeue, btf_rq_requeue, Request, 1, "R", 6, "args->nr_sector, 0";
            /// `block_rq_remap`: request-based device-mapper (multipath) sent a clone of its request down a path.
            RqRemap: block_rq_remap, rq_remap, rq_remap, btf_rq_remap, Request, 3, "A", 15, "args->nr_sector, args->old_sector";
        }
    };
}

/// What a block BTF tracepoint's first argument points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeObject {
    /// `struct bio *` (for `block_bio_complete`, the second argument).
    Bio,
    /// `struct request *`.
    Request,
    /// `struct buffer_head *`.
    BufferHead,
}

macro_rules! define_event_kind {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $btf:ident, $object:ident, $arguments:literal, $blk:literal, $ta:literal, $bpftrace:literal;
    )*) => {
        /// Which block tracepoint produced a [`BlockEvent`]; one per row of
        /// [`with_block_probes!`].
        ///
        /// The values index [`EventKind::ALL`], the report's counters and the
        /// classic probes' offsets, so they are dense.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventKind {
            $($(#[doc = $doc])* $kind,)*
        }

        impl EventKind {
            pub const ALL: [EventKind; Self::COUNT] = [$(EventKind::$kind,)*];
            pub const COUNT: usize = [$(stringify!($kind),)*].len();

            /// The kernel tracepoint name, under the `block` category.
            pub const fn tracepoint(self) -> &'static str {
                match self {
                    $(EventKind::$kind => stringify!($tracepoint),)*
                }
            }

            /// The key used for this kind in the JSON `events` object.
            pub const fn json_key(self) -> &'static str {
                match self {
                    $(EventKind::$kind => stringify!($json),)*
                }
            }

            /// The classic-tracepoint program (format-file offsets).
            pub const fn program(self) -> &'static str {
                match self {
                    $(EventKind::$kind => stringify!($classic),)*
                }
            }

            /// The BTF-tracepoint program (BTF layouts).
            pub const fn btf_program(self) -> &'static str {
                match self {
                    $(EventKind::$kind => stringify!($btf),)*
                }
            }

            /// What the BTF tracepoint's (first) argument points to.
            pub const fn object(self) -> ProbeObject {
                match self {
                    $(EventKind::$kind => ProbeObject::$object,)*
                }
            }

            /// The BTF tracepoint's arguments (its `TP_PROTO`).
            pub const fn arguments(self) -> usize {
                match self {
                    $(EventKind::$kind => $arguments,)*
                }
            }

            /// The blkparse / ftrace `blk` action letter, "" when none.
            pub const fn blk_action(self) -> &'static str {
                match self {
                    $(EventKind::$kind => $blk,)*
                }
            }

            /// The `__BLK_TA_*` action in blktrace's binary records, 0 when none.
            pub const fn blk_ta(self) -> u16 {
                match self {
                    $(EventKind::$kind => $ta,)*
                }
            }

            /// What a bpftrace printf prints for this event (two numbers).
            pub const fn bpftrace_fields(self) -> &'static str {
                match self {
                    $(EventKind::$kind => $bpftrace,)*
                }
            }
        }
    };
}

with_block_probes!(define_event_kind);

impl EventKind {
    /// Whether the kernel emits this event in the context of the task that
    /// submitted the bio, so the current task is its submitter. A request's
    /// issue, completion and requeue, and a bio's completion, run wherever
    /// the driver or the plug flush does.
    pub const fn in_submitter_context(self) -> bool {
        match self {
            EventKind::Remap
            | EventKind::Queue
            | EventKind::Split
            | EventKind::Backmerge
            | EventKind::Frontmerge
            | EventKind::DirtyBuffer => true,
            EventKind::RqMerge
            | EventKind::Issue
            | EventKind::Complete
            | EventKind::BioComplete
            | EventKind::Requeue
            | EventKind::RqRemap => false,
        }
    }

    /// The first row whose blk action letter is `letter`: a blkparse `M` is
    /// a bio back merge, a `C` a request completion (the importers tell bio
    /// completions apart by the device).
    pub fn from_blk_action(letter: &str) -> Option<EventKind> {
        if letter.is_empty() {
            return None;
        }
        Self::ALL
            .into_iter()
            .find(|kind| kind.blk_action() == letter)
    }

    /// The first row whose `__BLK_TA_*` action is `action` (as [`EventKind::from_blk_action`]).
    pub fn from_blk_ta(action: u16) -> Option<EventKind> {
        if action == 0 {
            return None;
        }
        Self::ALL.into_iter().find(|kind| kind.blk_ta() == action)
    }

    pub const fn from_u8(value: u8) -> Option<EventKind> {
        if (value as usize) < Self::COUNT {
            Some(Self::ALL[value as usize])
        } else {
            None
        }
    }
}

/// Marks an offset as absent in [`FieldOffsets`]: the field is left zero.
pub const NO_FIELD: u16 = u16::MAX;

/// Byte offsets of the fields one tracepoint record carries, read from its
/// `format` file at start-up (they moved in 6.11 and again in 2025).
///
/// Field types are fixed across kernels: `dev`/`aux_dev` are `dev_t` (u32),
/// `sector`/`aux_sector` are `sector_t` or `size_t` (u64), `nr_sector` is u32
/// and `error` is i32. `rwbs` is read as the first 8 bytes of the char array.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldOffsets {
    pub dev: u16,
    pub sector: u16,
    pub nr_sector: u16,
    /// `new_sector` (split), `old_sector` (remap) or `size` (dirty buffer).
    pub aux_sector: u16,
    /// `old_dev` (remap).
    pub aux_dev: u16,
    pub rwbs: u16,
    pub error: u16,
    /// Non-zero when the tracepoint was found and its layout understood.
    pub enabled: u16,
}

/// The classic probes' offsets, indexed by [`EventKind`]: one global for all
/// kinds, so a new kind needs no new global.
pub type ClassicFields = [FieldOffsets; EventKind::COUNT];

impl FieldOffsets {
    pub const ABSENT: FieldOffsets = FieldOffsets {
        dev: NO_FIELD,
        sector: NO_FIELD,
        nr_sector: NO_FIELD,
        aux_sector: NO_FIELD,
        aux_dev: NO_FIELD,
        rwbs: NO_FIELD,
        error: NO_FIELD,
        enabled: 0,
    };
}

/// Length of the `rwbs` prefix carried in each event (enough for op and flags).
pub const RWBS_BYTES: usize = 8;

/// Bytes of each classic tracepoint record the probes copy, after the 8-byte
/// common header: every field the engine reads lies within them on all known layouts.
pub const CLASSIC_RECORD_BYTES: usize = 56;
/// Offset in the classic tracepoint record where the copied bytes start.
pub const CLASSIC_RECORD_START: usize = 8;

/// What the classic-tracepoint probes send per block event, 72 bytes: the
/// formatted record's bytes as the kernel laid them out. One copy instead of
/// a helper call per field keeps the probe cheap; userspace decodes the
/// fields with the format-file offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicRecord {
    pub ts_ns: u64,
    pub tgid: u32,
    pub kind: u8,
    pub _pad: [u8; 3],
    /// Record bytes `CLASSIC_RECORD_START..CLASSIC_RECORD_START + CLASSIC_RECORD_BYTES`.
    pub record: [u8; CLASSIC_RECORD_BYTES],
}

/// One block-layer tracepoint hit, decoded, 96 bytes.
///
/// Field meaning by kind:
/// - `sector`, `nr_sector`: the bio or request range, disk-absolute.
/// - `aux_sector`: split → `new_sector` (start of the remainder);
///   remap and request remap → `old_sector` (partition-relative, or
///   upper-device sector); dirty buffer → buffer size in bytes.
/// - `aux_dev`: remap and request remap → `old_dev` (the partition, or the
///   upper device).
/// - `error`: completion status.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockEvent {
    pub ts_ns: u64,
    pub sector: u64,
    pub aux_sector: u64,
    /// Kernel-internal `dev_t`: `major << 20 | minor`.
    pub dev: u32,
    pub aux_dev: u32,
    pub nr_sector: u32,
    /// Process (thread group) that was current when the tracepoint fired.
    pub tgid: u32,
    pub rwbs: [u8; RWBS_BYTES],
    pub kind: u8,
    /// [`event_flags`] bits.
    pub flags: u8,
    /// Queue: the bio's physical segments as its vector counts them
    /// (`bi_vcnt`: contiguous pages share one); 0 where no probe read them
    /// (classic tracepoints, clones, imported traces).
    pub segments: u16,
    pub error: i32,
    /// Who submitted it: filled at `block_bio_queue` only, zero otherwise.
    pub owner: Owner,
}

/// Bits of [`BlockEvent::flags`].
pub mod event_flags {
    /// A passthrough command (`REQ_OP_DRV_*`) whose range and op come from
    /// its NVMe command (`nvme_setup_cmd`), not from the block tracepoint,
    /// which has none for it.
    pub const PASSTHROUGH: u8 = 1;
}

/// Bytes of a task's `comm`.
pub const COMM_BYTES: usize = 16;

/// Bits of [`Owner::flags`]: what the kernel knew about a bio at submission.
pub mod owner_flags {
    /// `comm` was read (the submitting task's name).
    pub const COMM: u32 = 1;
    /// The submitter was a kernel thread (no `mm`): a kworker or flusher
    /// writing back for someone the kernel does not name.
    pub const KERNEL_THREAD: u32 = 1 << 1;
    /// `cgroup` is the kernfs id of the bio's blkcg.
    pub const CGROUP: u32 = 1 << 2;
    /// `ino`/`file_dev` name the page-cache file of the bio's first page.
    pub const FILE: u32 = 1 << 3;
    /// `ino`/`file_dev` name the file of an iomap direct I/O (`bi_private`).
    pub const FILE_DIRECT: u32 = 1 << 4;
    /// The bio's first page belongs to no file (anonymous: direct I/O from a
    /// user buffer the kernel cannot trace back, or swap).
    pub const ANONYMOUS_PAGE: u32 = 1 << 5;
}

/// Who a bio belongs to, read once at `block_bio_queue`, 40 bytes.
/// Each field is meaningful only when its [`owner_flags`] bit is set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub comm: [u8; COMM_BYTES],
    /// Kernfs id (= inode number in the cgroup mount) of the blkcg's cgroup.
    pub cgroup: u64,
    pub ino: u64,
    /// Kernel-internal `dev_t` of the file's filesystem (`i_sb->s_dev`).
    pub file_dev: u32,
    pub flags: u32,
}

impl Owner {
    pub const UNKNOWN: Owner = Owner {
        comm: [0; COMM_BYTES],
        cgroup: 0,
        ino: 0,
        file_dev: 0,
        flags: 0,
    };
}

/// Byte offsets into kernel structs, read from BTF at start-up, for the
/// BTF-typed probes (which get `struct bio *` / `struct request *`
/// arguments instead of a formatted record).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    pub bio_bdev: u32,
    pub bdev_dev: u32,
    pub bdev_disk: u32,
    /// Start of the [`WINDOW_BYTES`] of `struct bio` copied into each event.
    pub bio_window: u32,
    pub rq_q: u32,
    pub q_disk: u32,
    pub disk_major: u32,
    pub disk_first_minor: u32,
    /// Start of the [`WINDOW_BYTES`] of `struct request` copied into each event.
    pub rq_window: u32,
    pub bh_bdev: u32,
    pub bh_size: u32,
    /// `block_device.bd_start_sect`: a partition's first sector on its disk.
    pub bdev_start_sect: u32,
    /// Non-zero (the kernel has `bd_start_sect`) turns on remap folding: a
    /// queue record names the partition its bio was sent to (`arg2` its
    /// `dev_t`, `arg` its start sector) and the remap probe leaves partition
    /// remaps to it, which saves one ring record per I/O on a partition.
    pub fold_remaps: u32,
    /// `bio.bi_iter.bi_size`: a lost queue record of a remapped bio (one
    /// with sectors) counts two events lost, its remap's and its own.
    pub bio_size: u32,
    /// The window's fields, each loaded into the record at its offset from
    /// the window's start (one load per field is cheaper than a helper call
    /// copying the window): `bio.bi_opf`, `bi_status`, `bi_iter.bi_sector`
    /// (and `bio_size`); `request.cmd_flags`, `__data_len`, `__sector`, and
    /// with `rq_identity` non-zero `mq_hctx` and `tag`.
    pub bio_opf: u32,
    pub bio_status: u32,
    pub bio_sector: u32,
    pub rq_flags: u32,
    pub rq_data_len: u32,
    pub rq_sector: u32,
    pub rq_hctx: u32,
    pub rq_tag: u32,
    pub rq_identity: u32,
    /// `bio.bi_vcnt`, read at `block_bio_queue` into the record's
    /// `segments`; 0 (never its offset) where BTF lacks it.
    pub bio_vcnt: u32,
    /// The owner chains read at `block_bio_queue`; see [`OwnerLayout`].
    pub owner: OwnerLayout,
}

/// Offsets for [`Owner`], from BTF. A chain whose `*_enabled` is 0 is not
/// followed (its struct is missing from this kernel's BTF): that part of the
/// owner stays unknown and the rest of the tracer works.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerLayout {
    /// `task_struct.mm` (NULL for kernel threads); 0-enabled with `comm`.
    pub task_mm: u32,
    pub process_enabled: u32,
    /// `bio->bi_blkg->blkcg->css.cgroup->kn->id`.
    pub bio_blkg: u32,
    pub blkg_blkcg: u32,
    /// `blkcg.css` plus `cgroup_subsys_state.cgroup`.
    pub blkcg_cgroup: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
    pub cgroup_enabled: u32,
    /// `bio->bi_io_vec[0].bv_page` (skipped when `bi_vcnt` is 0).
    pub bio_io_vec: u32,
    pub bio_vcnt: u32,
    pub bvec_page: u32,
    /// `page.compound_head` (bit 0: a tail page, the rest points at the
    /// head), or `page.compound_info` on kernels that renamed it (7.x).
    pub page_compound_head: u32,
    pub page_mapping: u32,
    pub mapping_host: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
    pub file_enabled: u32,
    /// `bio->bi_end_io == iomap_dio_bio_end_io`: `bi_private` is a `struct
    /// iomap_dio`, whose `iocb->ki_filp->f_inode` is the file.
    pub bio_end_io: u32,
    pub bio_private: u32,
    pub dio_iocb: u32,
    pub iocb_filp: u32,
    pub file_inode: u32,
    pub direct_enabled: u32,
    /// `request.bio`: the first bio of a request, to drop the request events
    /// of a filtered-out owner's bios.
    pub rq_bio: u32,
    /// Bytes from the start of `struct page` copied in one read (at most
    /// [`PAGE_SPAN_BYTES`]): `compound_head` and `mapping`.
    pub page_span: u32,
    /// Bytes from the start of `struct inode` copied in one read (at most
    /// [`INODE_SPAN_BYTES`]): `i_sb` and `i_ino`.
    pub inode_span: u32,
    /// 1 when a tail page's word is its head's address plus 1
    /// (`compound_head`); 0 for `compound_info`, whose tail encoding may be
    /// a mask: a tail page's file is then left unknown.
    pub page_head_pointer: u32,
    /// Address of `iomap_dio_bio_end_io` (from `/proc/kallsyms`).
    pub iomap_dio_end_io: u64,
}

impl OwnerLayout {
    pub const ABSENT: OwnerLayout = OwnerLayout {
        task_mm: 0,
        process_enabled: 0,
        bio_blkg: 0,
        blkg_blkcg: 0,
        blkcg_cgroup: 0,
        cgroup_kn: 0,
        kn_id: 0,
        cgroup_enabled: 0,
        bio_io_vec: 0,
        bio_vcnt: 0,
        bvec_page: 0,
        page_compound_head: 0,
        page_mapping: 0,
        mapping_host: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
        file_enabled: 0,
        bio_end_io: 0,
        bio_private: 0,
        dio_iocb: 0,
        iocb_filp: 0,
        file_inode: 0,
        direct_enabled: 0,
        rq_bio: 0,
        page_span: 0,
        inode_span: 0,
        page_head_pointer: 0,
        iomap_dio_end_io: 0,
    };
}

impl KernelLayout {
    pub const ABSENT: KernelLayout = KernelLayout {
        bio_bdev: 0,
        bdev_dev: 0,
        bdev_disk: 0,
        bio_window: 0,
        rq_q: 0,
        q_disk: 0,
        disk_major: 0,
        disk_first_minor: 0,
        rq_window: 0,
        bh_bdev: 0,
        bh_size: 0,
        bdev_start_sect: 0,
        fold_remaps: 0,
        bio_size: 0,
        bio_opf: 0,
        bio_status: 0,
        bio_sector: 0,
        rq_flags: 0,
        rq_data_len: 0,
        rq_sector: 0,
        rq_hctx: 0,
        rq_tag: 0,
        rq_identity: 0,
        bio_vcnt: 0,
        owner: OwnerLayout::ABSENT,
    };
}

/// Most bytes of a page and an inode the queue probe copies from their
/// start in one helper call (one call costs about as much as a 100-byte
/// copy), so the fields it needs cost one call instead of one each; the
/// verifier cannot type these chains for plain loads. Multiples of 8.
pub const PAGE_SPAN_BYTES: usize = 32;
pub const INODE_SPAN_BYTES: usize = 80;

/// Bytes of `struct bio` / `struct request` each BTF-tracepoint event carries:
/// from the op flags to the sector and size, which sit together in both.
pub const WINDOW_BYTES: usize = 40;

/// What the BTF-typed probes send per block event, 72 bytes: the device
/// (resolved in the kernel, where it is needed for filtering), the
/// tracepoint's scalar arguments, and a window of the bio or request that
/// userspace decodes with the BTF offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BtfEvent {
    pub ts_ns: u64,
    /// split: `new_sector`; remap: the sector it came from; rq complete:
    /// `nr_bytes`; queue, folding remaps: the partition's start sector.
    pub arg: u64,
    pub tgid: u32,
    pub dev: u32,
    /// remap: the device it came from; rq complete: `blk_status_t`; queue,
    /// folding remaps: the partition the bio was sent to (0: the disk itself).
    pub arg2: u32,
    pub kind: u8,
    pub _pad: u8,
    /// Queue: the bio's `bi_vcnt` (see [`BlockEvent::segments`]).
    pub segments: u16,
    pub window: [u8; WINDOW_BYTES],
}

/// What the BTF-typed `block_bio_queue` probe sends, 112 bytes: the event and its
/// owner. Only queue events carry an owner, so the others stay 72 bytes;
/// userspace tells them apart by length.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BtfQueueEvent {
    pub event: BtfEvent,
    pub owner: Owner,
}

impl BlockEvent {
    pub const ZERO: BlockEvent = BlockEvent {
        ts_ns: 0,
        sector: 0,
        aux_sector: 0,
        dev: 0,
        aux_dev: 0,
        nr_sector: 0,
        tgid: 0,
        rwbs: [0; RWBS_BYTES],
        kind: 0,
        flags: 0,
        segments: 0,
        error: 0,
        owner: Owner::UNKNOWN,
    };

    /// Which tracepoint this is and what its kind-dependent fields mean,
    /// decoded once; `None` for a kind this build does not know.
    pub fn action(&self) -> Option<BlockAction> {
        let kind = EventKind::from_u8(self.kind)?;
        Some(match kind {
            EventKind::Remap => BlockAction::Remap {
                from_dev: self.aux_dev,
                from_sector: self.aux_sector,
            },
            EventKind::Queue => BlockAction::Queue,
            EventKind::Split => BlockAction::Split {
                remainder: self.aux_sector,
            },
            EventKind::Backmerge | EventKind::Frontmerge | EventKind::RqMerge => {
                BlockAction::Merge(kind)
            }
            EventKind::Issue => BlockAction::Issue {
                request: self.aux_sector,
            },
            EventKind::Complete => BlockAction::Complete {
                request: self.aux_sector,
                error: self.error,
            },
            EventKind::BioComplete => BlockAction::BioComplete { error: self.error },
            EventKind::DirtyBuffer => BlockAction::DirtyBuffer {
                bytes: self.aux_sector,
            },
            EventKind::Requeue => BlockAction::Requeue,
            EventKind::RqRemap => BlockAction::RqRemap {
                from_dev: self.aux_dev,
                from_sector: self.aux_sector,
            },
        })
    }
}

/// A [`BlockEvent`]'s kind with the fields only that kind carries, named.
/// The range (`dev`, `sector`, `nr_sector`) and `rwbs` mean the same for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockAction {
    /// The bio came here from `from_dev` (a partition or an upper device)
    /// at `from_sector` on it.
    Remap {
        from_dev: u32,
        from_sector: u64,
    },
    Queue,
    /// The bio was cut; the remainder starts at `remainder`.
    Split {
        remainder: u64,
    },
    /// One of the three merge kinds.
    Merge(EventKind),
    /// `request` names the kernel request (zero where the probe cannot).
    Issue {
        request: u64,
    },
    Requeue,
    /// A request completed, in part or whole, with `error` (0 or -errno).
    Complete {
        request: u64,
        error: i32,
    },
    BioComplete {
        error: i32,
    },
    /// A buffer of `bytes` dirtied.
    DirtyBuffer {
        bytes: u64,
    },
    /// A clone of the request issued on `from_dev` at `from_sector`, to be
    /// issued here (request-based dm).
    RqRemap {
        from_dev: u32,
        from_sector: u64,
    },
}

impl BlockAction {
    pub const fn kind(self) -> EventKind {
        match self {
            BlockAction::Remap { .. } => EventKind::Remap,
            BlockAction::Queue => EventKind::Queue,
            BlockAction::Split { .. } => EventKind::Split,
            BlockAction::Merge(kind) => kind,
            BlockAction::Issue { .. } => EventKind::Issue,
            BlockAction::Requeue => EventKind::Requeue,
            BlockAction::Complete { .. } => EventKind::Complete,
            BlockAction::BioComplete { .. } => EventKind::BioComplete,
            BlockAction::DirtyBuffer { .. } => EventKind::DirtyBuffer,
            BlockAction::RqRemap { .. } => EventKind::RqRemap,
        }
    }
}

/// The one table of process event kinds. Calls `$callback!` with every row,
/// so the [`ProcessEventKind`] enum, its list, its names and its programs
/// are generated from these rows and none can fall out of step. Adding a
/// kind is a row here, its probe in tracer-ebpf (`probes/process.rs`) and
/// its handling in the engine.
///
/// A row: `Kind: name, enter_program, syscall;`
/// - `name`: the syscall (its tracepoints are `syscalls/sys_{enter,exit}_<name>`),
///   or what the event stands for;
/// - `enter_program`: the eBPF program that emits it;
/// - `syscall`: whether it is one of [`ProcessEventKind::SYSCALLS`], whose
///   entry program and `exit_write_family` follow the syscall's pair of tracepoints.
///
/// Rows are in wire order (the kind's value, kept in recordings); new rows go at the end.
#[macro_export]
macro_rules! with_process_events {
    ($callback:ident) => {
        $callback! {
            Write: "write", enter_write, true;
            Pwrite64: "pwrite64", enter_pwrite64, true;
            Writev: "writev", enter_writev, true;
            Pwritev: "pwritev", enter_pwritev, true;
            Pwritev2: "pwritev2", enter_pwritev2, true;
            Fsync: "fsync", enter_fsync, true;
            Fdatasync: "fdatasync", enter_fdatasync, true;
            Fork: "fork", process_fork, false;
            Openat: "openat", enter_openat, true;
            Openat2: "openat2", enter_openat2, true;
            Open: "open", enter_open, true;
            /// `fd` duplicated to `result`; likewise `Dup2`, `Dup3` and `Fcntl`
            /// (only `F_DUPFD` and `F_DUPFD_CLOEXEC` are emitted).
            Dup: "dup", enter_dup, true;
            Dup2: "dup2", enter_dup2, true;
            Dup3: "dup3", enter_dup3, true;
            Fcntl: "fcntl", enter_fcntl, true;
            /// `fd` closed (even a failed close releases it, unless it was not open).
            Close: "close", enter_close, true;
            /// `fd`'s file position moved: `result` is the new position (or -errno).
            Lseek: "lseek", enter_lseek, true;
            /// `tgid` executed a new program (`sched_process_exec`): its
            /// close-on-exec fds are closed, without a close each.
            Exec: "exec", process_exec, false;
            /// close_range: fds `fd` to `offset & 0xffff_ffff` closed, or (with
            /// [`CLOSE_RANGE_CLOEXEC`] in `offset >> 32`) made close-on-exec.
            CloseRange: "close_range", enter_close_range, false;
            /// One iocb of an io_submit (libaio) that the kernel accepted:
            /// `IOCB_CMD_PWRITE` of `result` bytes (its `aio_nbytes`) to `fd`
            /// (`aio_fildes`) at `offset` (`aio_offset`, or [`UNKNOWN_OFFSET`]
            /// with `RWF_APPEND`). Submitted, not completed: the completion
            /// (io_getevents) is not traced, so `result` is never an error.
            AioPwrite: "io_submit(IOCB_CMD_PWRITE)", enter_io_submit, false;
            /// `IOCB_CMD_PWRITEV`: like [`Self::AioPwrite`], `result` the iovecs'
            /// lengths summed (at most [`AIO_IOVECS_READ`] of them).
            AioPwritev: "io_submit(IOCB_CMD_PWRITEV)", enter_io_submit, false;
            /// `IOCB_CMD_FSYNC` and `IOCB_CMD_FDSYNC` of `fd`.
            AioFsync: "io_submit(IOCB_CMD_FSYNC)", enter_io_submit, false;
            AioFdsync: "io_submit(IOCB_CMD_FDSYNC)", enter_io_submit, false;
            /// One io_submit call, after its iocbs' events: `result` is its
            /// return (iocbs accepted, or -errno) and `offset` how many accepted
            /// iocbs the probe did not follow (past [`AIO_IOCBS_READ`], a PWRITEV
            /// of more than [`AIO_IOVECS_READ`] iovecs, or unreadable).
            IoSubmit: "io_submit", enter_io_submit, false;
            /// One io_uring SQE of a traced process, at its submission
            /// (`io_uring_submit_req`, after the kernel prepared it):
            /// `IORING_OP_WRITE` of `result` bytes (the SQE's `len`) to `fd` at
            /// `offset` (the SQE's `off`, or [`UNKNOWN_OFFSET`] for -1, the file
            /// position). [`ProcessEvent::how`] says how it was submitted
            /// ([`uring_how`]). Submitted, not completed, like an iocb.
            UringWrite: "io_uring(IORING_OP_WRITE)", uring_submit_req, false;
            /// `IORING_OP_WRITEV`: `result` the iovecs' lengths summed (at most
            /// [`AIO_IOVECS_READ`] of them; a longer one is [`Self::UringNotFollowed`]).
            UringWritev: "io_uring(IORING_OP_WRITEV)", uring_submit_req, false;
            /// `IORING_OP_WRITE_FIXED` (a registered buffer): like [`Self::UringWrite`].
            UringWriteFixed: "io_uring(IORING_OP_WRITE_FIXED)", uring_submit_req, false;
            /// `IORING_OP_FSYNC` of `fd`, and with `IORING_FSYNC_DATASYNC`.
            UringFsync: "io_uring(IORING_OP_FSYNC)", uring_submit_req, false;
            UringFdsync: "io_uring(IORING_OP_FSYNC, DATASYNC)", uring_submit_req, false;
            /// A write or sync SQE that could not be followed (a WRITEV of more
            /// than [`AIO_IOVECS_READ`] iovecs, or unreadable memory): `offset`
            /// holds its opcode. Counted, never dropped. (A registered file's SQE
            /// comes as its own kind with [`uring_how::FIXED_FILE`]: the fd table
            /// resolves its slot or counts it.)
            UringNotFollowed: "io_uring(not followed)", uring_submit_req, false;
            /// A write or sync request of a traced process handed to an io-wq
            /// worker (`iou-wrk-*`, `io_uring_queue_async_work`): `offset` holds
            /// its opcode. Its SQE was already counted at its submission.
            UringPunt: "io_uring(io-wq)", uring_queue_async_work, false;
            /// io_uring_register of files to `ring` (IORING_REGISTER_FILES or
            /// FILES2), `result` slots: its table starts afresh; the
            /// [`Self::UringFile`] events of its first [`URING_FILES_READ`] slots follow.
            UringFilesRegistered: "io_uring_register(FILES)", enter_io_uring_register, false;
            /// `fd` registered at slot `offset` of `ring`.
            UringFile: "io_uring_register(file)", enter_io_uring_register, false;
            /// `ring`'s registered files changed in a way not followed (an update,
            /// an unregister, a direct descriptor installed by an SQE): its slots
            /// are unknown from now on, until files are registered again.
            UringFilesChanged: "io_uring(files changed)", uring_submit_req, false;
            /// mmap of `fd`, shared and writable (MAP_SHARED, PROT_WRITE, not
            /// anonymous): the mapping starts at `result` (or -errno), maps the
            /// file from byte `offset`, and spans `ring` pages. Stores to it dirty
            /// the file's pages, written back at msync, fsync, or by the kernel.
            Mmap: "mmap", enter_mmap, true;
            /// msync of `ring` pages from address `offset`, flags in `fd`; `result`
            /// 0 or -errno. Mappings are not tracked in the kernel: every msync of
            /// a traced process is emitted, and userspace finds its mapping.
            Msync: "msync", enter_msync, true;
            /// munmap of `ring` pages from address `offset`; `result` 0 or -errno.
            Munmap: "munmap", enter_munmap, true;
            /// `IORING_OP_URING_CMD` carrying an NVMe write (`NVME_URING_CMD_IO`
            /// on a generic char device `/dev/ngXnY`): `offset` the starting
            /// LBA and `result` the blocks, in the namespace's logical blocks
            /// (userspace turns them into bytes). Otherwise like [`Self::UringWrite`].
            UringNvmeWrite: "io_uring(IORING_OP_URING_CMD, nvme write)", uring_submit_req, false;
        }
    };
}

macro_rules! define_process_event_kind {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $name:literal, $program:ident, $syscall:literal;
    )*) => {
        /// What a [`ProcessEvent`] records: a write-family syscall of a traced
        /// process, a fork that grew the traced process tree, or a change to a
        /// traced process's fd table (dup family, close). One per row of
        /// [`with_process_events!`].
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProcessEventKind {
            $($(#[doc = $doc])* $kind,)*
        }

        impl ProcessEventKind {
            pub const ALL: [ProcessEventKind; Self::COUNT] = [$(ProcessEventKind::$kind,)*];
            pub const COUNT: usize = [$(stringify!($kind),)*].len();

            /// The syscall name; its tracepoints are `syscalls/sys_{enter,exit}_<name>`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ProcessEventKind::$kind => $name,)*
                }
            }

            /// The eBPF program for the syscall's entry.
            pub const fn enter_program(self) -> &'static str {
                match self {
                    $(ProcessEventKind::$kind => stringify!($program),)*
                }
            }

            /// One of [`Self::SYSCALLS`].
            const fn is_syscall(self) -> bool {
                match self {
                    $(ProcessEventKind::$kind => $syscall,)*
                }
            }
        }
    };
}

with_process_events!(define_process_event_kind);

/// `PROT_WRITE`, `MAP_SHARED` and `MAP_ANONYMOUS` (<sys/mman.h>).
pub const PROT_WRITE: u64 = 0x2;
pub const MAP_SHARED: u64 = 0x1;
pub const MAP_ANONYMOUS: u64 = 0x20;
/// The page size `ring` counts in for mapping events (x86-64, arm64 4K).
pub const MAPPING_PAGE: u64 = 4096;

/// Registered files read per io_uring_register; later slots stay unknown.
pub const URING_FILES_READ: usize = 64;

/// `IORING_REGISTER_*` opcodes from <linux/io_uring.h> that change a ring's
/// registered files (`IORING_REGISTER_USE_REGISTERED_RING` masked off).
pub mod uring_register {
    pub const FILES: u32 = 2;
    pub const UNREGISTER_FILES: u32 = 3;
    pub const FILES_UPDATE: u32 = 6;
    pub const FILES2: u32 = 13;
    pub const FILES_UPDATE2: u32 = 14;
    pub const USE_REGISTERED_RING: u32 = 1 << 31;
    /// `IORING_RSRC_REGISTER_SPARSE` in `io_uring_rsrc_register.flags`.
    pub const RSRC_SPARSE: u32 = 1;
}

/// `IORING_OP_*` values from <linux/io_uring.h> (a user ABI).
pub mod uring_op {
    pub const WRITEV: u8 = 2;
    pub const FSYNC: u8 = 3;
    pub const WRITE_FIXED: u8 = 5;
    pub const WRITE: u8 = 23;
    /// A driver command (an NVMe command on `/dev/ngXnY`).
    pub const URING_CMD: u8 = 46;
    /// Write opcodes, FSYNC and driver commands: the ones `run` follows.
    pub const fn is_followed(op: u8) -> bool {
        matches!(op, WRITEV | FSYNC | WRITE_FIXED | WRITE | URING_CMD)
    }
    /// Ops that can install a direct descriptor into the ring's registered
    /// files (ACCEPT, OPENAT, CLOSE, FILES_UPDATE, OPENAT2, MSG_RING,
    /// SOCKET, PIPE): after one, the ring's slots are not trusted.
    pub const fn may_change_files(op: u8) -> bool {
        matches!(op, 13 | 18 | 19 | 20 | 28 | 40 | 45 | 62)
    }
}

/// The NVMe I/O command of an `IORING_OP_URING_CMD` SQE (<linux/nvme_ioctl.h>,
/// a user ABI): `cmd_op` `NVME_URING_CMD_IO` or `_IO_VEC`, and where its
/// `struct nvme_uring_cmd` keeps the opcode and `cdw10..12`.
pub mod nvme_uring {
    /// `_IOWR('N', 0x80, struct nvme_uring_cmd)` (72 bytes).
    pub const CMD_IO: u32 = 0xC048_4E80;
    /// `_IOWR('N', 0x81, struct nvme_uring_cmd)`.
    pub const CMD_IO_VEC: u32 = 0xC048_4E81;
    /// `struct io_uring_sqe.cmd`: where a URING_CMD's payload starts.
    pub const SQE_CMD: u16 = 48;
    pub const OPCODE: u64 = 0;
    pub const CDW10: u64 = 40;
    /// `nvme_cmd_write`.
    pub const WRITE: u8 = 0x01;
}

/// `IORING_FSYNC_DATASYNC` in an FSYNC SQE's `fsync_flags`.
pub const IORING_FSYNC_DATASYNC: u32 = 1;
/// `REQ_F_FIXED_FILE` in `io_kiocb.flags` (bit 0, `IOSQE_FIXED_FILE_BIT`
/// since io_uring began): the SQE's fd is a registered file's index.
pub const REQ_F_FIXED_FILE: u8 = 1;

/// Bits of [`ProcessEvent::how`] for io_uring events.
pub mod uring_how {
    /// Submitted by the ring's SQPOLL thread (`sq_thread`), not an
    /// io_uring_enter of the process.
    pub const SQPOLL: u8 = 1;
    /// The SQE named a registered (fixed) file.
    pub const FIXED_FILE: u8 = 2;
}

/// [`ProcessEvent::how`] of an [`OpenEvent`] whose process the probe
/// stopped (SIGSTOP, sent before the record was committed): the reader
/// takes hold of the file, then sends SIGCONT.
pub const OPEN_PAUSED: u8 = 1;

/// Where the io_uring probes read their fields: offsets in the
/// `io_uring_submit_req` (`io_uring_submit_sqe` before 6.4) and
/// `io_uring_queue_async_work` records, from their format files, and in
/// `struct io_kiocb` (the request the records point to), from BTF.
/// `enabled` is 0 when any is missing: io_uring is then not followed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringOffsets {
    pub enabled: u16,
    /// `req`, `opcode`, `flags` (its low byte) and `sq_thread` in the submit record.
    pub submit_req: u16,
    pub submit_opcode: u16,
    pub submit_flags: u16,
    pub submit_sq_thread: u16,
    /// `opcode` in `io_uring_queue_async_work` (NO_FIELD: punts not counted).
    pub async_opcode: u16,
    /// In `struct io_kiocb`: `cqe.fd` (the SQE's fd, set before prep),
    /// and in the `io_rw` its `cmd` holds: `kiocb.ki_pos`, `addr`, `len`;
    /// in the `io_sync` of an FSYNC: `flags`.
    pub req_fd: u16,
    pub rw_pos: u16,
    pub rw_addr: u16,
    pub rw_len: u16,
    pub sync_flags: u16,
    /// `ctx` in the submit record (which ring, for registered files).
    pub submit_ctx: u16,
    /// `ctx`, `opcode` and `ret` in `io_uring_register`, and `opcode`,
    /// `arg` and `nr_args` in `sys_enter_io_uring_register` (NO_FIELD:
    /// registered files are not followed).
    pub register_ctx: u16,
    pub register_opcode: u16,
    pub register_ret: u16,
    pub enter_register_opcode: u16,
    pub enter_register_arg: u16,
    pub enter_register_nr: u16,
    /// In `struct io_kiocb`, the `struct io_uring_cmd` its `cmd` holds:
    /// `cmd_op`, and the pointer to the SQE (`sqe`, 6.2+) or to its
    /// payload (`cmd`, 6.1), with `cmd_payload` what to add to that
    /// pointer to reach the payload (48 or 0). NO_FIELD: not followed.
    pub cmd_op: u16,
    pub cmd_pointer: u16,
    pub cmd_payload: u16,
}

impl UringOffsets {
    pub const ABSENT: UringOffsets = UringOffsets {
        enabled: 0,
        submit_req: NO_FIELD,
        submit_opcode: NO_FIELD,
        submit_flags: NO_FIELD,
        submit_sq_thread: NO_FIELD,
        async_opcode: NO_FIELD,
        req_fd: NO_FIELD,
        rw_pos: NO_FIELD,
        rw_addr: NO_FIELD,
        rw_len: NO_FIELD,
        sync_flags: NO_FIELD,
        submit_ctx: NO_FIELD,
        register_ctx: NO_FIELD,
        register_opcode: NO_FIELD,
        register_ret: NO_FIELD,
        enter_register_opcode: NO_FIELD,
        enter_register_arg: NO_FIELD,
        enter_register_nr: NO_FIELD,
        cmd_op: NO_FIELD,
        cmd_pointer: NO_FIELD,
        cmd_payload: 0,
    };
}

/// iocbs read per io_submit call; more are counted, not followed.
pub const AIO_IOCBS_READ: usize = 64;
/// iovecs summed per `IOCB_CMD_PWRITEV`; a longer one is counted, not followed.
pub const AIO_IOVECS_READ: usize = 8;

/// `aio_lio_opcode` values from <linux/aio_abi.h> (`IOCB_CMD_*`).
pub mod iocb_cmd {
    pub const PWRITE: u16 = 1;
    pub const FSYNC: u16 = 2;
    pub const FDSYNC: u16 = 3;
    pub const PWRITEV: u16 = 8;
}

/// `RWF_APPEND` in an iocb's `aio_rw_flags` (<linux/fs.h>): written at the
/// file's end, whatever `aio_offset` says.
pub const RWF_APPEND: u32 = 0x10;

/// The head of `struct iocb` from <linux/aio_abi.h> (64 bytes in all; the
/// fields after `aio_offset` are not read), little-endian order of
/// `aio_key` and `aio_rw_flags`. A user-space ABI: fixed, unlike a
/// tracepoint's fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IocbHead {
    pub aio_data: u64,
    pub aio_key: u32,
    pub aio_rw_flags: u32,
    pub aio_lio_opcode: u16,
    pub aio_reqprio: i16,
    pub aio_fildes: u32,
    pub aio_buf: u64,
    pub aio_nbytes: u64,
    pub aio_offset: i64,
}

/// `struct iovec` (<linux/uio.h>).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iovec {
    pub iov_base: u64,
    pub iov_len: u64,
}

/// `O_CLOEXEC` in an open's flags (generic value: x86-64 and arm64 alike).
pub const O_CLOEXEC: u64 = 0o2000000;
/// close_range's flag: mark the range close-on-exec instead of closing it.
pub const CLOSE_RANGE_CLOEXEC: u64 = 1 << 2;

impl ProcessEventKind {
    /// The syscalls traced, in program order (`Fork` and `Exec` are not
    /// ones; close_range and io_submit have their own probes): the rows
    /// of [`with_process_events!`] marked `syscall`.
    pub const SYSCALLS: [ProcessEventKind; Self::SYSCALL_COUNT] = {
        let mut syscalls = [ProcessEventKind::Write; Self::SYSCALL_COUNT];
        let (mut index, mut at) = (0, 0);
        while index < Self::COUNT {
            if Self::ALL[index].is_syscall() {
                syscalls[at] = Self::ALL[index];
                at += 1;
            }
            index += 1;
        }
        syscalls
    };
    const SYSCALL_COUNT: usize = {
        let (mut index, mut count) = (0, 0);
        while index < Self::COUNT {
            if Self::ALL[index].is_syscall() {
                count += 1;
            }
            index += 1;
        }
        count
    };

    pub const fn from_u8(value: u8) -> Option<ProcessEventKind> {
        if (value as usize) < Self::COUNT {
            Some(Self::ALL[value as usize])
        } else {
            None
        }
    }

    /// mmap, msync and munmap: `ring` is their length in pages, not a duration.
    pub const fn is_mapping(self) -> bool {
        matches!(
            self,
            ProcessEventKind::Mmap | ProcessEventKind::Msync | ProcessEventKind::Munmap
        )
    }

    pub const fn is_write(self) -> bool {
        (self as u8) <= (ProcessEventKind::Pwritev2 as u8)
            || matches!(
                self,
                ProcessEventKind::AioPwrite
                    | ProcessEventKind::AioPwritev
                    | ProcessEventKind::UringWrite
                    | ProcessEventKind::UringWritev
                    | ProcessEventKind::UringWriteFixed
                    | ProcessEventKind::UringNvmeWrite
            )
    }

    /// One SQE submitted through io_uring, not a syscall of its own.
    pub const fn is_uring(self) -> bool {
        matches!(
            self,
            ProcessEventKind::UringWrite
                | ProcessEventKind::UringWritev
                | ProcessEventKind::UringWriteFixed
                | ProcessEventKind::UringFsync
                | ProcessEventKind::UringFdsync
                | ProcessEventKind::UringNvmeWrite
        )
    }

    /// One iocb submitted through io_submit (libaio), not a syscall of its own.
    pub const fn is_aio(self) -> bool {
        matches!(
            self,
            ProcessEventKind::AioPwrite
                | ProcessEventKind::AioPwritev
                | ProcessEventKind::AioFsync
                | ProcessEventKind::AioFdsync
        )
    }

    /// Opens arrive as [`OpenEvent`]s: the path tells which device a new fd is.
    pub const fn is_open(self) -> bool {
        matches!(
            self,
            ProcessEventKind::Openat | ProcessEventKind::Openat2 | ProcessEventKind::Open
        )
    }

    /// Makes `result` a copy of `fd` (the dup family, `fcntl(F_DUPFD*)`).
    pub const fn is_dup(self) -> bool {
        matches!(
            self,
            ProcessEventKind::Dup
                | ProcessEventKind::Dup2
                | ProcessEventKind::Dup3
                | ProcessEventKind::Fcntl
        )
    }
}

/// Marks an unknown file offset in [`ProcessEvent::offset`].
pub const UNKNOWN_OFFSET: u64 = u64::MAX;

/// One event of the traced process tree, 40 bytes.
///
/// Syscalls: `tgid` made the call on file descriptor `fd` at `offset`
/// (or [`UNKNOWN_OFFSET`]) and got `result` (bytes written, or -errno).
/// Fork: `tgid` is the new child, `fd` its parent.
/// Dup family: `fd` is the source and `result` the new fd (or -errno).
/// Opens ([`OpenEvent`]): `offset` carries the open flags ([`O_APPEND`]).
/// Lseek: `result` is the new file position.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessEvent {
    pub ts_ns: u64,
    pub offset: u64,
    pub result: i64,
    pub tgid: u32,
    pub fd: u32,
    pub kind: u8,
    /// io_uring events: how the SQE was submitted ([`uring_how`]); opens:
    /// [`OPEN_PAUSED`] or 0; else 0.
    pub how: u8,
    pub _pad: [u8; 2],
    /// io_uring events: the ring (the low 32 bits of its `io_ring_ctx`
    /// address), which registered files belong to. Syscalls (writes,
    /// syncs, io_submit's iocbs): how long the call ran, in microseconds
    /// rounded up (saturating), so that [`ProcessEvent::entered_ns`] is when
    /// it began (`ts_ns` is its exit). Else 0.
    pub ring: u32,
}

impl ProcessEvent {
    /// When the call began: its exit less its duration (see [`Self::ring`]),
    /// never later than the true entry. An io_uring SQE's submission, a
    /// mapping call's exit, or any other event, is its `ts_ns`.
    pub fn entered_ns(&self) -> u64 {
        let is_uring = ProcessEventKind::from_u8(self.kind).is_some_and(|kind| {
            kind.is_uring()
                || kind.is_mapping()
                || matches!(
                    kind,
                    ProcessEventKind::UringNotFollowed
                        | ProcessEventKind::UringPunt
                        | ProcessEventKind::UringFilesRegistered
                        | ProcessEventKind::UringFile
                        | ProcessEventKind::UringFilesChanged
                )
        });
        if is_uring {
            return self.ts_ns;
        }
        self.ts_ns.saturating_sub(u64::from(self.ring) * 1000)
    }

    pub const ZERO: ProcessEvent = ProcessEvent {
        ts_ns: 0,
        offset: 0,
        result: 0,
        tgid: 0,
        fd: 0,
        kind: 0,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    };
}

/// `O_APPEND` in an open's flags (the generic value: x86-64 and arm64 alike):
/// such an fd writes at the file's end, a position the probes do not see.
pub const O_APPEND: u64 = 0o2000;

/// Bytes of a path carried by an [`OpenEvent`] (longer paths are cut).
pub const PATH_BYTES: usize = 256;

/// An open by a traced process: `event.result` is the new fd (or -errno)
/// and `path` the NUL-terminated name it opened, 296 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenEvent {
    pub event: ProcessEvent,
    pub path: [u8; PATH_BYTES],
}

/// Offsets in the `syscalls` and `sched` tracepoint records, from their format files.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessOffsets {
    /// `fd` in every `sys_enter_*` of the write family.
    pub fd: u16,
    /// `pos` in `sys_enter_pwrite64`.
    pub pwrite_pos: u16,
    /// `pos_l` in `sys_enter_pwritev` and `sys_enter_pwritev2`.
    pub pwritev_pos: u16,
    /// `ret` in every `sys_exit_*`.
    pub ret: u16,
    /// `child_pid` in `sched_process_fork`.
    pub child_pid: u16,
    pub enabled: u16,
    /// `filename` in `sys_enter_openat` and `sys_enter_openat2`.
    pub openat_filename: u16,
    /// `filename` in `sys_enter_open` (absent on some architectures).
    pub open_filename: u16,
    /// `fildes` in `sys_enter_dup`.
    pub dup_fildes: u16,
    /// `oldfd` in `sys_enter_dup3` (and `sys_enter_dup2`, where it exists).
    pub dup3_oldfd: u16,
    /// `cmd` in `sys_enter_fcntl` (its `fd` is at [`Self::fd`]).
    pub fcntl_cmd: u16,
    /// `flags` in `sys_enter_openat`.
    pub openat_flags: u16,
    /// `flags` in `sys_enter_open` (absent on some architectures).
    pub open_flags: u16,
    /// `how` in `sys_enter_openat2`: a user pointer to `struct open_how`,
    /// whose first member is the flags.
    pub openat2_how: u16,
    /// `fd`, `max_fd` and `flags` in `sys_enter_close_range` (absent before 5.9).
    pub close_range_fd: u16,
    pub close_range_max_fd: u16,
    pub close_range_flags: u16,
    /// `nr` and `iocbpp` in `sys_enter_io_submit` (absent without CONFIG_AIO).
    pub io_submit_nr: u16,
    pub io_submit_iocbpp: u16,
    /// `len`, `prot`, `flags`, `fd` and `off` in `sys_enter_mmap`.
    pub mmap_len: u16,
    pub mmap_prot: u16,
    pub mmap_flags: u16,
    pub mmap_fd: u16,
    pub mmap_off: u16,
    /// `start`, `len` and `flags` in `sys_enter_msync`.
    pub msync_start: u16,
    pub msync_len: u16,
    pub msync_flags: u16,
    /// `addr` and `len` in `sys_enter_munmap`.
    pub munmap_addr: u16,
    pub munmap_len: u16,
    pub _pad: u16,
}

impl ProcessOffsets {
    pub const ABSENT: ProcessOffsets = ProcessOffsets {
        fd: NO_FIELD,
        pwrite_pos: NO_FIELD,
        pwritev_pos: NO_FIELD,
        ret: NO_FIELD,
        child_pid: NO_FIELD,
        enabled: 0,
        openat_filename: NO_FIELD,
        open_filename: NO_FIELD,
        dup_fildes: NO_FIELD,
        dup3_oldfd: NO_FIELD,
        fcntl_cmd: NO_FIELD,
        openat_flags: NO_FIELD,
        open_flags: NO_FIELD,
        openat2_how: NO_FIELD,
        close_range_fd: NO_FIELD,
        close_range_max_fd: NO_FIELD,
        close_range_flags: NO_FIELD,
        io_submit_nr: NO_FIELD,
        io_submit_iocbpp: NO_FIELD,
        mmap_len: NO_FIELD,
        mmap_prot: NO_FIELD,
        mmap_flags: NO_FIELD,
        mmap_fd: NO_FIELD,
        mmap_off: NO_FIELD,
        msync_start: NO_FIELD,
        msync_len: NO_FIELD,
        msync_flags: NO_FIELD,
        munmap_addr: NO_FIELD,
        munmap_len: NO_FIELD,
        _pad: 0,
    };
}

/// Dirty-buffer sizes kept per device: 512 B (index 0) doubling to 64 KiB (7).
pub const DIRTY_SIZE_BUCKETS: usize = 8;

/// `block_dirty_buffer` hits per size, aggregated in the kernel per device:
/// they need no per-event detail, and buffered sub-page writes make many.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyCounts {
    pub by_size: [u64; DIRTY_SIZE_BUCKETS],
}

impl DirtyCounts {
    /// The bucket of a buffer of `bytes`.
    pub const fn bucket(bytes: u64) -> usize {
        let sectors = bytes >> 9;
        if sectors <= 1 {
            return 0;
        }
        let index = (63 - sectors.leading_zeros()) as usize;
        if index >= DIRTY_SIZE_BUCKETS {
            DIRTY_SIZE_BUCKETS - 1
        } else {
            index
        }
    }
}

/// `block_rq_tag_wait` (Linux 7.2+): a submitter found no free tag on a
/// hardware queue and waited for one. Counted in the kernel per device,
/// hardware queue and tag set; no request exists yet to follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagWaitKey {
    pub dev: u32,
    pub hctx: u32,
    /// 1: the I/O scheduler's tags (`nr_requests`) ran out; 0: the driver's.
    pub sched: u32,
    pub _pad: u32,
}

/// Waits for one [`TagWaitKey`], and the tag set's size at the last one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagWaits {
    pub waits: u64,
    pub nr_tags: u64,
}

/// Where `block_rq_tag_wait`'s fields are in its record, from its format
/// file ([`NO_FIELD`] when the kernel has no such tracepoint).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagWaitFields {
    pub dev: u16,
    pub hctx_id: u16,
    pub nr_tags: u16,
    pub is_sched_tag: u16,
}

impl TagWaitFields {
    pub const ABSENT: TagWaitFields = TagWaitFields {
        dev: NO_FIELD,
        hctx_id: NO_FIELD,
        nr_tags: NO_FIELD,
        is_sched_tag: NO_FIELD,
    };
}

/// The NVMe command a passthrough request carries (`nvme_setup_cmd`'s
/// `struct nvme_command`, whose layout is the NVMe specification's wire
/// format): the opcode, namespace and the dwords that hold an I/O command's
/// range (`cdw10`/`cdw11` the starting LBA, `cdw12`'s low 16 bits the
/// blocks less one).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeCommand {
    pub opcode: u8,
    pub flags: u8,
    pub command_id: u16,
    pub nsid: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub _pad: u32,
}

/// Byte offsets of [`NvmeCommand`]'s fields in `struct nvme_command`.
pub mod nvme_command {
    pub const OPCODE: u64 = 0;
    pub const CDW10: u64 = 40;
}

/// What the `nvme_setup_cmd` probe sends for a passthrough request, 96
/// bytes: the request as the issue probe would send it (so it decodes to
/// the same request name) and its NVMe command. Userspace tells it apart
/// from the other records by length.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassthroughEvent {
    pub event: BtfEvent,
    pub command: NvmeCommand,
}

/// The request ops the passthrough probe keeps (`REQ_OP_DRV_IN`/`_OUT`
/// under `REQ_OP_MASK`, from BTF); `enabled` 0 keeps none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassthroughOps {
    pub op_mask: u32,
    pub drv_in: u32,
    pub drv_out: u32,
    pub enabled: u32,
}

impl PassthroughOps {
    pub const ABSENT: PassthroughOps = PassthroughOps {
        op_mask: 0,
        drv_in: 0,
        drv_out: 0,
        enabled: 0,
    };
}

/// Bits of the `FILTER_OWNERS` global: which owner filters are on. A bio is
/// traced when it passes every filter that is on (any value of each).
pub mod owner_filter {
    pub const PID: u32 = 1;
    pub const CGROUP: u32 = 1 << 1;
    pub const COMM: u32 = 1 << 2;
}

/// Values of the `FILTER_DEVICES` global.
pub mod device_filter {
    /// Every device.
    pub const ALL: u8 = 0;
    /// The devices in the `DEVICES` hash map.
    pub const MAP: u8 = 1;
    /// The devices in the `DEVICE_LIST` global (0 ends the list): a few
    /// compares cost less than a hash lookup (a helper call with jhash).
    pub const LIST: u8 = 2;
}

/// Longest `DEVICE_LIST`; more devices go to the `DEVICES` map.
pub const DEVICE_LIST_LEN: usize = 8;

/// Index of the counters in the per-CPU `COUNTERS` array.
pub mod counter {
    /// Block events lost because the ring buffer was full.
    pub const DROPPED: u32 = 0;
    /// Process events (syscalls, forks) lost because their ring buffer was full.
    pub const PROCESS_DROPPED: u32 = 1;
    /// Tracepoint field reads that failed (the record is dropped and counted).
    pub const READ_FAILED: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// The one table of block-event rings: CPU `n` writes to ring `n % RINGS`,
/// so probes on different CPUs do not contend for one ring's lock and
/// positions. Calls `$callback!` with every row; tracer-ebpf declares the
/// maps and picks a CPU's ring from it, userspace finds them by the names in
/// [`names::EVENT_RINGS`].
///
/// A row: `index => MAP`, the ring's index (dense, from 0) and its map's name.
#[macro_export]
macro_rules! with_event_rings {
    ($callback:ident) => {
        $callback! {
            0 => EVENTS0,
            1 => EVENTS1,
            2 => EVENTS2,
            3 => EVENTS3,
            4 => EVENTS4,
            5 => EVENTS5,
            6 => EVENTS6,
            7 => EVENTS7,
        }
    };
}

/// Map and global names, shared so neither side can misspell them.
pub mod names {
    macro_rules! ring_names {
        ($($index:literal => $ring:ident,)*) => {
            /// The block-event rings' map names, one per row of
            /// [`with_event_rings!`](crate::with_event_rings).
            pub const EVENT_RINGS: [&str; RINGS] = [$(stringify!($ring),)*];
            pub const RINGS: usize = [$($index,)*].len();
            // Ring `n` is row `n`: the probes pick it by index.
            const _: () = {
                let indices: [usize; RINGS] = [$($index,)*];
                let mut at = 0;
                while at < RINGS {
                    assert!(indices[at] == at, "with_event_rings!: indices are 0, 1, 2...");
                    at += 1;
                }
            };
        };
    }
    crate::with_event_rings!(ring_names);

    pub const PROCESS_EVENTS: &str = "PROCESS_EVENTS";
    pub const DIRTY_BUFFERS: &str = "DIRTY_BUFFERS";
    pub const TAG_WAITS: &str = "TAG_WAITS";
    /// [`TagWaitFields`](super::TagWaitFields) for the `tag_wait` program.
    pub const TAG_WAIT_FIELDS: &str = "TAG_WAIT_FIELDS";
    /// The program counting `block_rq_tag_wait` (attached where it exists).
    pub const TAG_WAIT_PROGRAM: &str = "tag_wait";
    /// [`PassthroughOps`](super::PassthroughOps) for the passthrough program.
    pub const PASSTHROUGH_OPS: &str = "PASSTHROUGH_OPS";
    /// The raw tracepoint program on `nvme_setup_cmd` (attached when the
    /// nvme module is loaded and the BTF probes are).
    pub const PASSTHROUGH_PROGRAM: &str = "nvme_setup_cmd";
    pub const PROCESS_FIELDS: &str = "PROCESS_FIELDS";
    pub const URING_FIELDS: &str = "URING_FIELDS";
    pub const COUNTERS: &str = "COUNTERS";
    pub const DEVICES: &str = "DEVICES";
    pub const PIDS: &str = "PIDS";
    pub const FILTER_DEVICES: &str = "FILTER_DEVICES";
    /// Up to [`super::DEVICE_LIST_LEN`] devices in scope, compared in the
    /// probe instead of looked up in `DEVICES` (see [`super::device_filter`]).
    pub const DEVICE_LIST: &str = "DEVICE_LIST";
    pub const FILTER_PIDS: &str = "FILTER_PIDS";
    /// Owner filters (`-p`, `--cgroup`, `--comm`; BTF probes only): which
    /// kinds are on ([`super::owner_filter`] bits), and the values of each.
    pub const FILTER_OWNERS: &str = "FILTER_OWNERS";
    pub const OWNER_PIDS: &str = "OWNER_PIDS";
    pub const OWNER_CGROUPS: &str = "OWNER_CGROUPS";
    pub const OWNER_COMMS: &str = "OWNER_COMMS";
    /// Bios of filtered-out owners, so their requests are dropped too.
    pub const FILTERED_BIOS: &str = "FILTERED_BIOS";
    pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
    /// Bytes of records between two checks of a ring's fill (a power of two).
    pub const WAKE_CHECK_BYTES: &str = "WAKE_CHECK_BYTES";
    /// 1: every record reads the current task's tgid, even where the task
    /// is not the submitter (the lever's "off", for the bench).
    pub const TGID_EVERY_EVENT: &str = "TGID_EVERY_EVENT";
    /// `run`: 0, or the tracer's own tgid (never stopped) when the probe
    /// stops each traced process at its opens for writing ([`super::OPEN_PAUSED`]).
    pub const PAUSE_WRITE_OPENS: &str = "PAUSE_WRITE_OPENS";
    pub const KERNEL_LAYOUT: &str = "KERNEL_LAYOUT";
    /// The classic probes' [`ClassicFields`](super::ClassicFields): one global for every kind.
    pub const CLASSIC_FIELDS: &str = "CLASSIC_FIELDS";
}

#[cfg(feature = "user")]
mod user {
    use super::*;
    // SAFETY: all of them are `#[repr(C)]`, contain only integers and byte
    // arrays, and have no implicit padding (checked by the size tests below).
    unsafe impl aya::Pod for FieldOffsets {}
    unsafe impl aya::Pod for BlockEvent {}
    unsafe impl aya::Pod for ClassicRecord {}
    unsafe impl aya::Pod for ProcessEvent {}
    unsafe impl aya::Pod for ProcessOffsets {}
    unsafe impl aya::Pod for UringOffsets {}
    unsafe impl aya::Pod for OpenEvent {}
    unsafe impl aya::Pod for DirtyCounts {}
    unsafe impl aya::Pod for TagWaitKey {}
    unsafe impl aya::Pod for TagWaits {}
    unsafe impl aya::Pod for PassthroughOps {}
    unsafe impl aya::Pod for TagWaitFields {}
    unsafe impl aya::Pod for KernelLayout {}
    unsafe impl aya::Pod for BtfEvent {}
    unsafe impl aya::Pod for BtfQueueEvent {}
    unsafe impl aya::Pod for Owner {}
    unsafe impl aya::Pod for OwnerLayout {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_sizes_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<BlockEvent>(), 96);
        assert_eq!(core::mem::size_of::<Owner>(), 40);
        assert_eq!(core::mem::size_of::<BtfQueueEvent>(), 112);
        assert_eq!(core::mem::size_of::<OwnerLayout>(), 120);
        assert_eq!(core::mem::size_of::<ClassicRecord>(), 72);
        assert_eq!(core::mem::size_of::<BtfEvent>(), 72);
        assert_eq!(core::mem::size_of::<PassthroughEvent>(), 96);
        assert_eq!(core::mem::size_of::<NvmeCommand>(), 24);
        assert_eq!(core::mem::size_of::<KernelLayout>(), 24 * 4 + 120);
        assert_eq!(core::mem::size_of::<ProcessEvent>(), 40);
        assert_eq!(core::mem::size_of::<ProcessOffsets>(), 60);
        assert_eq!(core::mem::size_of::<UringOffsets>(), 42);
        assert_eq!(core::mem::size_of::<OpenEvent>(), 296);
        assert_eq!(core::mem::size_of::<FieldOffsets>(), 16);
    }

    #[test]
    fn dirty_buckets_double_from_512_bytes() {
        assert_eq!(DirtyCounts::bucket(512), 0);
        assert_eq!(DirtyCounts::bucket(1024), 1);
        assert_eq!(DirtyCounts::bucket(4096), 3);
        assert_eq!(DirtyCounts::bucket(65536), 7);
        assert_eq!(DirtyCounts::bucket(1 << 20), 7);
        assert_eq!(DirtyCounts::bucket(0), 0);
    }

    #[test]
    fn every_probe_name_in_the_table_is_distinct() {
        for (i, a) in EventKind::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i, "values are dense, in table order");
            for b in &EventKind::ALL[i + 1..] {
                assert_ne!(a.tracepoint(), b.tracepoint());
                assert_ne!(a.json_key(), b.json_key());
            }
            // No program name is used twice, across both flavors.
            for b in &EventKind::ALL {
                assert_ne!(a.program(), b.btf_program());
                if a != b {
                    assert_ne!(a.program(), b.program());
                    assert_ne!(a.btf_program(), b.btf_program());
                }
            }
        }
        assert_eq!(EventKind::Requeue.tracepoint(), "block_rq_requeue");
        assert_eq!(EventKind::Requeue.object(), ProbeObject::Request);
        assert_eq!(EventKind::Complete.arguments(), 3);
    }

    /// Offsets as <linux/aio_abi.h> lays `struct iocb` out (its comments and
    /// `offsetof` in C agree: 0, 8, 12, 16, 18, 20, 24, 32, 40 of 64).
    #[test]
    fn iocb_head_is_the_uapi_layout() {
        use core::mem::{offset_of, size_of};
        assert_eq!(offset_of!(IocbHead, aio_data), 0);
        assert_eq!(offset_of!(IocbHead, aio_key), 8);
        assert_eq!(offset_of!(IocbHead, aio_rw_flags), 12);
        assert_eq!(offset_of!(IocbHead, aio_lio_opcode), 16);
        assert_eq!(offset_of!(IocbHead, aio_reqprio), 18);
        assert_eq!(offset_of!(IocbHead, aio_fildes), 20);
        assert_eq!(offset_of!(IocbHead, aio_buf), 24);
        assert_eq!(offset_of!(IocbHead, aio_nbytes), 32);
        assert_eq!(offset_of!(IocbHead, aio_offset), 40);
        assert_eq!(size_of::<IocbHead>(), 48);
        assert_eq!(size_of::<Iovec>(), 16);
    }

    #[test]
    fn kinds_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_u8(kind as u8), Some(kind));
        }
        assert_eq!(EventKind::from_u8(EventKind::COUNT as u8), None);
        for kind in ProcessEventKind::ALL {
            assert_eq!(ProcessEventKind::from_u8(kind as u8), Some(kind));
        }
    }
}
