//! Block BTF tracepoints → `BtfEvent` records in the per-CPU `EVENTS<n>` rings.
//!
//! The preferred probes where the kernel has BTF. A BTF tracepoint passes the
//! tracepoint's own arguments (`struct bio *`, `struct request *`), so the
//! kernel neither formats a record (rwbs string, command bytes) nor checks
//! the global `bpf_prog_active` that makes it skip a classic-tracepoint
//! program whenever another BPF program runs on the CPU (a completion in
//! softirq interrupting a queue probe). Offsets come from `KERNEL_LAYOUT`.
//!
//! They are BTF-typed (`tp_btf`): the verifier knows the arguments' types, so
//! the device is found with plain loads (`bio->bi_bdev->bd_disk->major`,
//! `rq->q->disk`), not a helper call per field (what a call costs:
//! docs/benchmarks.md, "Where the cost goes"). Per hit: those loads, the filter, then the fields
//! userspace decodes, loaded straight into the ring record.
//!
//! One program per row of `with_block_probes!`, generated below; what each
//! reads from its tracepoint's arguments is [`capture`]'s arm for its kind.

use core::mem::MaybeUninit;

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_buf, generated,
    },
    macros::{btf_tracepoint, map},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::BtfTracePointContext,
    Global,
};
use tracer_common::{
    counter, owner_filter, owner_flags, BtfEvent, BtfQueueEvent, EventKind, KernelLayout, Owner,
    OwnerLayout, COMM_BYTES, INODE_SPAN_BYTES, PAGE_SPAN_BYTES, WINDOW_BYTES,
};

use super::shared::{
    bump, bump_by, count_dirty_buffer, device_wanted, pid_wanted, record_tgid, ring, submit,
};

#[unsafe(no_mangle)]
static KERNEL_LAYOUT: Global<KernelLayout> = Global::new(KernelLayout::ABSENT);

/// Which owner filters are on (`owner_filter` bits); 0: every owner.
#[unsafe(no_mangle)]
static FILTER_OWNERS: Global<u32> = Global::new(0);

#[map(name = "OWNER_PIDS")]
static OWNER_PIDS: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);
#[map(name = "OWNER_CGROUPS")]
static OWNER_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(256, 0);
#[map(name = "OWNER_COMMS")]
static OWNER_COMMS: HashMap<[u8; COMM_BYTES], u8> = HashMap::with_max_entries(256, 0);
/// Bios a filter turned away, so the requests they head are dropped too
/// (requests are issued and completed outside the submitter's context).
#[map(name = "FILTERED_BIOS")]
static FILTERED_BIOS: LruHashMap<u64, u8> = LruHashMap::with_max_entries(65536, 0);

#[inline(always)]
fn read<T>(address: u64) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel faults safely on a bad address.
    unsafe { bpf_probe_read_kernel(address as *const T) }.map_err(|errno| errno as i32)
}

/// A field of a kernel object reached from the tracepoint's arguments, by a
/// plain load. These are BTF-typed tracepoints (`tp_btf`): the verifier
/// knows each pointer's type, the layout's offsets are constants to it
/// (`.rodata` is frozen before the programs load), and the JIT guards the
/// load against faults, where `bpf_probe_read_kernel` is a helper call
/// per field. Each load must be of its field's size: the
/// verifier refuses one across two fields or over part of a pointer.
#[inline(always)]
fn load<T: Copy>(address: u64) -> T {
    // SAFETY: a BTF-typed kernel pointer plus a field offset from the same
    // BTF; the verifier checks the access and the JIT makes a fault read 0.
    unsafe { core::ptr::read_volatile(address as *const T) }
}

/// Fields of a kernel object copied together with one helper call, for
/// chains the verifier cannot type (a page's mapping is tagged in its low
/// bits, and a page's first word is a union with list pointers), so they go
/// through `bpf_probe_read_kernel`; a field beyond them is read on its own.
/// The words live in the queue program's [`SCRATCH`] entry, not on the stack:
/// rustc zeroes a stack buffer even when it is `MaybeUninit`, with a call
/// to a byte-loop `memset` (docs/benchmarks.md, "Changes").
struct Span<'a, const WORDS: usize> {
    /// Only the first `len` bytes hold this object's.
    words: &'a mut [u64; WORDS],
    len: usize,
    base: u64,
}

impl<'a, const WORDS: usize> Span<'a, WORDS> {
    const BYTES: usize = WORDS * 8;

    #[inline(always)]
    fn new(words: &'a mut [u64; WORDS]) -> Self {
        Span {
            words,
            len: 0,
            base: 0,
        }
    }

    /// Copies `len` bytes (at most `BYTES`) from `base`.
    #[inline(always)]
    fn fill(&mut self, base: u64, len: u32) -> Result<(), i32> {
        self.base = base;
        self.len = 0;
        let len = len as usize;
        if len > 0 && len <= Self::BYTES {
            // SAFETY: `len` bytes of the words' own storage.
            let bytes = unsafe {
                core::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), len)
            };
            // SAFETY: bpf_probe_read_kernel faults safely on a bad address.
            unsafe { bpf_probe_read_kernel_buf(base as *const u8, bytes) }
                .map_err(|errno| errno as i32)?;
            self.len = len;
        }
        Ok(())
    }

    /// The `T` at `offset` in the object.
    #[inline(always)]
    fn get<T: Copy>(&self, offset: u32) -> Result<T, i32> {
        let size = core::mem::size_of::<T>();
        let at = offset as usize;
        if at <= Self::BYTES - size && at + size <= self.len && at % size == 0 {
            // SAFETY: inside the copied (initialized) bytes, aligned for T.
            Ok(unsafe { core::ptr::read(self.words.as_ptr().cast::<u8>().add(at).cast::<T>()) })
        } else {
            read(self.base + u64::from(offset))
        }
    }
}

/// `kind` and the zero padding after it in one store: the compiler sets a
/// 3-byte array with a call to a byte-loop `memset`.
///
/// # Safety
/// `event` points at a writable `BtfEvent`.
#[inline(always)]
unsafe fn set_kind(event: *mut BtfEvent, kind: EventKind) {
    // SAFETY: see `set_kind_segments`.
    unsafe { set_kind_segments(event, kind, 0) };
}

/// `kind`, its padding and `segments` in one store.
///
/// # Safety
/// `event` points at a writable `BtfEvent`.
#[inline(always)]
unsafe fn set_kind_segments(event: *mut BtfEvent, kind: EventKind, segments: u16) {
    // SAFETY: `kind`, `_pad` and `segments` are the 4 bytes at a 4-aligned
    // offset (checked below); little-endian puts `kind` first.
    unsafe {
        (&raw mut (*event).kind)
            .cast::<u32>()
            .write(kind as u32 | (u32::from(segments) << 16))
    };
}

const _: () = {
    assert!(core::mem::offset_of!(BtfEvent, kind) % 4 == 0);
    assert!(core::mem::offset_of!(BtfEvent, _pad) == core::mem::offset_of!(BtfEvent, kind) + 1);
    assert!(core::mem::offset_of!(BtfEvent, segments) == core::mem::offset_of!(BtfEvent, kind) + 2);
};

/// Whose window a record carries: the fields userspace decodes, loaded one
/// by one into the record at their offsets from the window's start (a load
/// each is cheaper than one helper call copying the whole window).
#[derive(Clone, Copy)]
enum Window {
    Bio(u64),
    Request(u64),
}

impl Window {
    #[inline(always)]
    fn fill(self, layout: &KernelLayout, window: &mut [u8; WINDOW_BYTES]) {
        let to = window.as_mut_ptr();
        match self {
            Window::Bio(bio) => {
                let field = |offset: u32| (bio, layout.bio_window, offset);
                put::<u32>(to, field(layout.bio_opf));
                put::<u8>(to, field(layout.bio_status));
                put::<u64>(to, field(layout.bio_sector));
                put::<u32>(to, field(layout.bio_size));
            }
            Window::Request(rq) => {
                let field = |offset: u32| (rq, layout.rq_window, offset);
                put::<u32>(to, field(layout.rq_flags));
                put::<u32>(to, field(layout.rq_data_len));
                put::<u64>(to, field(layout.rq_sector));
                if layout.rq_identity != 0 {
                    put::<u64>(to, field(layout.rq_hctx));
                    put::<u32>(to, field(layout.rq_tag));
                }
            }
        }
    }
}

/// Loads the `T` at `offset` in `object` into the window, `offset - start`
/// into it. The layout keeps every field inside the window and aligned
/// there (an unaligned store would be byte stores, and a pointer, the
/// request's `mq_hctx`, cannot be shifted into bytes); the verifier checks
/// the store against the record.
#[inline(always)]
fn put<T: Copy>(window: *mut u8, (object, start, offset): (u64, u32, u32)) {
    // SAFETY: `offset - start + size_of::<T>() <= WINDOW_BYTES`, and the
    // place is aligned for T (checked by the layout when it resolved the
    // window; the window is 8-aligned in the reserved record).
    unsafe {
        window
            .add((offset - start) as usize)
            .cast::<T>()
            .write(load::<T>(object + u64::from(offset)))
    };
}

const _: () = assert!(core::mem::offset_of!(BtfEvent, window) % 8 == 0);

/// What the queue probe builds an owner in.
#[repr(C)]
pub struct OwnerScratch {
    owner: Owner,
    page: [u64; PAGE_SPAN_BYTES / 8],
    inode: [u64; INODE_SPAN_BYTES / 8],
}

/// One [`OwnerScratch`] per CPU for the queue probe, which the kernel does
/// not re-enter on a CPU.
#[map(name = "SCRATCH")]
static SCRATCH: PerCpuArray<OwnerScratch> = PerCpuArray::with_max_entries(1, 0);

/// `disk_devt(disk)`: the whole disk's number, as the tracepoints report it.
#[inline(always)]
fn disk_devt(layout: &KernelLayout, disk: u64) -> u32 {
    let major: u32 = load(disk + u64::from(layout.disk_major));
    let minor: u32 = load(disk + u64::from(layout.disk_first_minor));
    (major << 20) | minor
}

/// `bio_dev(bio)`: the disk of `bio->bi_bdev`, even when that is a partition.
#[inline(always)]
fn bio_dev(layout: &KernelLayout, bio: u64) -> u32 {
    bdev_disk(layout, load(bio + u64::from(layout.bio_bdev)))
}

/// The whole disk of a block device (a partition or the disk itself).
#[inline(always)]
fn bdev_disk(layout: &KernelLayout, bdev: u64) -> u32 {
    disk_devt(layout, load(bdev + u64::from(layout.bdev_disk)))
}

/// The bio's block device: its disk (as `bio_dev`), and when remaps are
/// folded, the device itself (a partition's `dev_t` differs from its disk's)
/// and its start sector.
#[inline(always)]
fn bio_bdev(layout: &KernelLayout, bio: u64) -> Bdev {
    let bdev: u64 = load(bio + u64::from(layout.bio_bdev));
    let disk = bdev_disk(layout, bdev);
    if layout.fold_remaps == 0 {
        return Bdev {
            disk,
            dev: 0,
            start: 0,
        };
    }
    Bdev {
        disk,
        dev: load(bdev + u64::from(layout.bdev_dev)),
        start: load(bdev + u64::from(layout.bdev_start_sect)),
    }
}

struct Bdev {
    disk: u32,
    /// 0 when remaps are not folded.
    dev: u32,
    start: u64,
}

impl Bdev {
    /// A partition of `disk`: its queue record carries the remap.
    #[inline(always)]
    fn partition(&self) -> Option<(u32, u64)> {
        (self.dev != 0 && self.dev != self.disk).then_some((self.dev, self.start))
    }
}

/// `disk_devt(rq->q->disk)`, or 0 without a disk, as the tracepoints do.
#[inline(always)]
fn rq_dev(layout: &KernelLayout, rq: u64) -> u32 {
    let queue: u64 = load(rq + u64::from(layout.rq_q));
    let disk: u64 = load(queue + u64::from(layout.q_disk));
    if disk == 0 {
        return 0;
    }
    disk_devt(layout, disk)
}

/// One record of a bio or request event.
#[inline(always)]
fn emit(kind: EventKind, window: Window, dev: u32, arg: u64, arg2: u32) -> u32 {
    let Some(tgid) = record_tgid(kind) else {
        return 0;
    };
    let events = ring();
    let Some(mut entry) = events.reserve::<BtfEvent>(0) else {
        bump(counter::DROPPED);
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved, writable BtfEvent.
    unsafe {
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).arg = arg;
        (*event).tgid = tgid;
        (*event).dev = dev;
        (*event).arg2 = arg2;
        set_kind(event, kind);
        window.fill(kernel_layout(), &mut (*event).window);
    }
    submit(events, entry);
    0
}

/// The submitter of a queued bio: its task, its blkcg's cgroup and the file
/// of its first page (or of its iomap direct I/O). A chain that fails (a
/// NULL on the way) leaves its part unknown.
#[inline(always)]
fn owner_of(layout: &OwnerLayout, bio: u64, scratch: &mut OwnerScratch) {
    let OwnerScratch { owner, page, inode } = scratch;
    clear(owner);
    if layout.process_enabled != 0 {
        if current_comm(&mut owner.comm) {
            owner.flags |= owner_flags::COMM;
        }
        // SAFETY: a helper without arguments; it returns a BTF-typed task.
        let task = unsafe { generated::bpf_get_current_task_btf() } as u64;
        if load::<u64>(task + u64::from(layout.task_mm)) == 0 {
            owner.flags |= owner_flags::KERNEL_THREAD;
        }
    }
    if layout.cgroup_enabled != 0 {
        if let Ok(id) = blkcg_id(layout, bio) {
            owner.cgroup = id;
            owner.flags |= owner_flags::CGROUP;
        }
    }
    if layout.file_enabled != 0 {
        match page_cache_inode(layout, bio, page) {
            Ok(Some(file)) => {
                if inode_into(layout, file, inode, owner) {
                    owner.flags |= owner_flags::FILE;
                }
            }
            Ok(None) => {
                owner.flags |= owner_flags::ANONYMOUS_PAGE;
                if layout.direct_enabled != 0 {
                    if let Ok(file) = direct_io_inode(layout, bio) {
                        if inode_into(layout, file, inode, owner) {
                            owner.flags |= owner_flags::FILE_DIRECT;
                        }
                    }
                }
            }
            Err(_) => {}
        }
    }
}

/// `Owner::UNKNOWN`, stored word by word: a plain assignment becomes a
/// call to a byte-loop `memset`.
#[inline(always)]
fn clear(owner: &mut Owner) {
    const WORDS: usize = core::mem::size_of::<Owner>() / 8;
    let words = (owner as *mut Owner).cast::<u64>();
    for i in 0..WORDS {
        // SAFETY: `Owner` is WORDS 8-aligned words of plain integers.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
    }
}

const _: () =
    assert!(core::mem::size_of::<Owner>() % 8 == 0 && core::mem::align_of::<Owner>() == 8);

/// The current task's name into `comm`. aya's helper zeroes a temporary
/// first, with the compiler's byte loop; the kernel fills (or zeroes) all of it.
#[inline(always)]
fn current_comm(comm: &mut [u8; COMM_BYTES]) -> bool {
    // SAFETY: `comm` is COMM_BYTES writable bytes.
    unsafe { generated::bpf_get_current_comm(comm.as_mut_ptr().cast(), COMM_BYTES as u32) == 0 }
}

#[inline(always)]
fn nonzero(pointer: u64) -> Result<u64, i32> {
    if pointer == 0 {
        Err(0)
    } else {
        Ok(pointer)
    }
}

/// `bio->bi_io_vec[0].bv_page`'s folio mapping host, `None` when the page
/// is anonymous (or has no mapping), an error when there is no page.
#[inline(always)]
fn page_cache_inode(
    layout: &OwnerLayout,
    bio: u64,
    words: &mut [u64; PAGE_SPAN_BYTES / 8],
) -> Result<Option<u64>, i32> {
    if load::<u16>(bio + u64::from(layout.bio_vcnt)) == 0 {
        return Err(0);
    }
    let vecs: u64 = load(bio + u64::from(layout.bio_io_vec));
    let page = nonzero(load::<u64>(vecs + u64::from(layout.bvec_page)))?;
    let mut span = Span::new(words);
    span.fill(page, layout.page_span)?;
    let page = span;
    // A tail page's mapping is not its folio's: follow it to the head.
    let head: u64 = page.get(layout.page_compound_head)?;
    let mapping: u64 = if head & 1 != 0 {
        if layout.page_head_pointer == 0 {
            return Err(0);
        }
        read(head - 1 + u64::from(layout.page_mapping))?
    } else {
        page.get(layout.page_mapping)?
    };
    // Low bits tag anonymous, KSM and movable mappings: not a file.
    if mapping == 0 || mapping & 3 != 0 {
        return Ok(None);
    }
    Ok(Some(nonzero(read::<u64>(
        mapping + u64::from(layout.mapping_host),
    )?)?))
}

/// The file of an iomap direct I/O: `bi_private` is its `struct iomap_dio`
/// only when `bi_end_io` is `iomap_dio_bio_end_io`.
#[inline(always)]
fn direct_io_inode(layout: &OwnerLayout, bio: u64) -> Result<u64, i32> {
    let end_io: u64 = load(bio + u64::from(layout.bio_end_io));
    if end_io != layout.iomap_dio_end_io {
        return Err(0);
    }
    // `void *`: untyped for the verifier, so read, not loaded.
    let dio = nonzero(read::<u64>(bio + u64::from(layout.bio_private))?)?;
    let iocb = nonzero(read::<u64>(dio + u64::from(layout.dio_iocb))?)?;
    let file = nonzero(read::<u64>(iocb + u64::from(layout.iocb_filp))?)?;
    nonzero(read::<u64>(file + u64::from(layout.file_inode))?)
}

/// `inode->i_ino` and `inode->i_sb->s_dev` into `owner`.
#[inline(always)]
fn inode_into(
    layout: &OwnerLayout,
    inode: u64,
    words: &mut [u64; INODE_SPAN_BYTES / 8],
    owner: &mut Owner,
) -> bool {
    let found = (|| {
        let mut span = Span::new(words);
        span.fill(inode, layout.inode_span)?;
        let inode = span;
        let ino: u64 = inode.get(layout.inode_ino)?;
        let sb = nonzero(inode.get::<u64>(layout.inode_sb)?)?;
        let dev: u32 = read(sb + u64::from(layout.sb_dev))?;
        Ok::<_, i32>((ino, dev))
    })();
    match found {
        Ok((ino, dev)) => {
            owner.ino = ino;
            owner.file_dev = dev;
            true
        }
        Err(_) => false,
    }
}

/// Whether a bio submitted now passes the owner filters: the current task's
/// tgid and comm (bio events run in the submitter's context) and the bio's
/// blkcg. Reads only what the filters that are on need.
#[inline(always)]
fn owner_wanted(layout: &OwnerLayout, bio: u64, filters: u32) -> bool {
    if filters & owner_filter::PID != 0 {
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        // SAFETY: a lookup in a map of plain integers; the value is not kept.
        if unsafe { OWNER_PIDS.get(&tgid) }.is_none() {
            return false;
        }
    }
    if filters & owner_filter::COMM != 0 {
        let mut comm = MaybeUninit::<[u8; COMM_BYTES]>::uninit();
        // SAFETY: the helper fills the whole buffer (zeroed on failure).
        let comm = unsafe {
            generated::bpf_get_current_comm(comm.as_mut_ptr().cast(), COMM_BYTES as u32);
            comm.assume_init()
        };
        // SAFETY: as above.
        if unsafe { OWNER_COMMS.get(&comm) }.is_none() {
            return false;
        }
    }
    if filters & owner_filter::CGROUP != 0 {
        let Ok(id) = blkcg_id(layout, bio) else {
            return false;
        };
        // SAFETY: as above.
        if unsafe { OWNER_CGROUPS.get(&id) }.is_none() {
            return false;
        }
    }
    true
}

/// `bio->bi_blkg->blkcg->css.cgroup->kn->id`.
#[inline(always)]
fn blkcg_id(layout: &OwnerLayout, bio: u64) -> Result<u64, i32> {
    let blkg = nonzero(load::<u64>(bio + u64::from(layout.bio_blkg)))?;
    let blkcg = nonzero(load::<u64>(blkg + u64::from(layout.blkg_blkcg)))?;
    let cgroup = nonzero(load::<u64>(blkcg + u64::from(layout.blkcg_cgroup)))?;
    let kn = nonzero(load::<u64>(cgroup + u64::from(layout.cgroup_kn)))?;
    Ok(load::<u64>(kn + u64::from(layout.kn_id)))
}

/// Turns a bio away: remembered so the requests it heads are dropped too.
#[inline(always)]
fn filter_out(bio: u64) {
    let _ = FILTERED_BIOS.insert(&bio, &1, 0);
}

/// Whether a request (or a completed bio) belongs to a turned-away bio.
#[inline(always)]
fn filtered_request(layout: &OwnerLayout, rq: u64) -> bool {
    // Read, not loaded: the key must be a plain number.
    match read::<u64>(rq + u64::from(layout.rq_bio)) {
        // SAFETY: a lookup in a map of plain integers; the value is not kept.
        Ok(bio) => bio != 0 && unsafe { FILTERED_BIOS.get(&bio) }.is_some(),
        Err(_) => false,
    }
}

/// `block_bio_queue`: the event with its owner, in one larger record.
#[inline(always)]
fn queue_event(address: u64) -> u32 {
    let layout = kernel_layout();
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: only this CPU's queue program uses the entry (see SCRATCH).
    let scratch = unsafe { &mut *scratch };
    let bdev = bio_bdev(layout, address);
    let dev = bdev.disk;
    let (partition, start) = bdev.partition().unwrap_or((0, 0));
    // The events a lost record takes with it: a folded remap is one more.
    let events = match partition != 0 && load::<u32>(address + u64::from(layout.bio_size)) != 0 {
        true => 2,
        false => 1,
    };
    if !device_wanted(dev) {
        return 0;
    }
    let filters = FILTER_OWNERS.load();
    if filters != 0 && !owner_wanted(&layout.owner, address, filters) {
        filter_out(address);
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pid_wanted(tgid) {
        return 0;
    }
    // Read before reserving, so the slot is held (and blocks the reader) briefly.
    owner_of(&layout.owner, address, scratch);
    let segments = match layout.bio_vcnt {
        0 => 0,
        vcnt => load::<u16>(address + u64::from(vcnt)),
    };
    let ring = ring();
    let Some(mut entry) = ring.reserve::<BtfQueueEvent>(0) else {
        bump_by(counter::DROPPED, events);
        return 0;
    };
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points at a reserved, writable BtfQueueEvent.
    unsafe {
        let event = &raw mut (*record).event;
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).arg = start;
        (*event).tgid = tgid;
        (*event).dev = dev;
        (*event).arg2 = partition;
        set_kind_segments(event, EventKind::Queue, segments);
        // Not an assignment: the compiler cannot tell the map values apart
        // and calls a byte-loop `memmove`; this is an inlined copy.
        core::ptr::copy_nonoverlapping(&scratch.owner, &raw mut (*record).owner, 1);
        Window::Bio(address).fill(layout, &mut (*event).window);
    }
    submit(ring, entry);
    0
}

/// The loader's layout, read in place (a copy would take a third of the
/// stack). The pointer goes through a volatile read so the compiler cannot
/// fold the fields to the static's initial (absent) values; the verifier
/// still knows them, from the frozen map.
#[inline(always)]
pub(super) fn kernel_layout() -> &'static KernelLayout {
    let address: *const Global<KernelLayout> = &KERNEL_LAYOUT;
    // SAFETY: reading a local; `Global` is a transparent wrapper of the
    // initialized value, which lives (read-only) for the program's life.
    unsafe { &*core::ptr::read_volatile(&address).cast::<KernelLayout>() }
}

#[inline(always)]
fn bio_event(kind: EventKind, address: u64, arg: u64, arg2: u32, also: Option<u32>) -> u32 {
    let layout = kernel_layout();
    let dev = bio_dev(layout, address);
    if !device_wanted(dev) && !also.is_some_and(|other| other != 0 && device_wanted(other)) {
        return 0;
    }
    let filters = FILTER_OWNERS.load();
    if filters != 0 {
        if kind == EventKind::BioComplete {
            // SAFETY: a lookup in a map of plain integers; the value is not kept.
            if unsafe { FILTERED_BIOS.get(&address) }.is_some() {
                let _ = FILTERED_BIOS.remove(&address);
                return 0;
            }
        } else if !owner_wanted(&layout.owner, address, filters) {
            // Remap, split and merges run in the submitter's context.
            filter_out(address);
            return 0;
        }
    }
    emit(kind, Window::Bio(address), dev, arg, arg2)
}

#[inline(always)]
fn rq_event(kind: EventKind, address: u64, arg: u64, arg2: u32, also: Option<u32>) -> u32 {
    let layout = kernel_layout();
    let dev = rq_dev(layout, address);
    if !device_wanted(dev) && !also.is_some_and(|other| other != 0 && device_wanted(other)) {
        return 0;
    }
    if FILTER_OWNERS.load() != 0 && filtered_request(&layout.owner, address) {
        return 0;
    }
    emit(kind, Window::Request(address), dev, arg, arg2)
}

/// A partition's remap onto its disk, while remaps are folded: the bio
/// still points at the partition (`blk_partition_remap` moves only its
/// sector), so its queue record carries the remap and this one is not sent.
/// A stacked device's remap (dm) names another device than the bio's.
#[inline(always)]
fn partition_remap(address: u64, old_dev: u32) -> bool {
    let layout = kernel_layout();
    if layout.fold_remaps == 0 {
        return false;
    }
    let bdev: u64 = load(address + u64::from(layout.bio_bdev));
    load::<u32>(bdev + u64::from(layout.bdev_dev)) == old_dev
}

/// What each kind's probe reads from its tracepoint's arguments (`TP_PROTO`).
#[inline(always)]
fn capture(ctx: &BtfTracePointContext, kind: EventKind) -> u32 {
    match kind {
        // (struct bio *bio, dev_t dev, sector_t from)
        EventKind::Remap => {
            let old_dev = ctx.arg::<u64>(1) as u32;
            if partition_remap(ctx.arg(0), old_dev) {
                return 0;
            }
            bio_event(kind, ctx.arg(0), ctx.arg(2), old_dev, Some(old_dev))
        }
        // (struct bio *bio)
        EventKind::Queue => queue_event(ctx.arg(0)),
        EventKind::Backmerge | EventKind::Frontmerge => bio_event(kind, ctx.arg(0), 0, 0, None),
        // (struct bio *bio, unsigned int new_sector)
        EventKind::Split => {
            let new_sector = ctx.arg::<u64>(1) & u64::from(u32::MAX);
            bio_event(kind, ctx.arg(0), new_sector, 0, None)
        }
        // (struct request_queue *q, struct bio *bio)
        EventKind::BioComplete => bio_event(kind, ctx.arg(1), 0, 0, None),
        // (struct request *rq)
        EventKind::RqMerge | EventKind::Issue | EventKind::Requeue => {
            rq_event(kind, ctx.arg(0), 0, 0, None)
        }
        // (struct request *rq, dev_t dev, sector_t from). Not a flush's
        // clone: it carries no sectors, and the blk tracer logs none either.
        EventKind::RqRemap => {
            let rq: u64 = ctx.arg(0);
            if load::<u32>(rq + u64::from(kernel_layout().rq_data_len)) == 0 {
                return 0;
            }
            let old_dev = ctx.arg::<u64>(1) as u32;
            rq_event(kind, rq, ctx.arg(2), old_dev, Some(old_dev))
        }
        // (struct request *rq, blk_status_t error, unsigned int nr_bytes)
        EventKind::Complete => {
            let status = ctx.arg::<u64>(1) as u32 & 0xff;
            let nr_bytes = ctx.arg::<u64>(2) & u64::from(u32::MAX);
            rq_event(kind, ctx.arg(0), nr_bytes, status, None)
        }
        // (struct buffer_head *bh): counted here, not streamed.
        EventKind::DirtyBuffer => {
            let layout = kernel_layout();
            let bh: u64 = ctx.arg(0);
            let bdev: u64 = load(bh + u64::from(layout.bh_bdev));
            let dev: u32 = load(bdev + u64::from(layout.bdev_dev));
            count_dirty_buffer(dev, load(bh + u64::from(layout.bh_size)));
            0
        }
    }
}

/// One BTF-tracepoint program per row of the probe table, named by it
/// (userspace attaches each to its tracepoint by name).
macro_rules! btf_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $btf:ident, $object:ident, $arguments:literal $(, $rest:literal)*;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[btf_tracepoint]
            pub fn $btf(ctx: BtfTracePointContext) -> u32 {
                capture(&ctx, EventKind::$kind)
            }
        )*
    };
}

tracer_common::with_block_probes!(btf_programs);
