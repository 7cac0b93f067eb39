//! Block raw tracepoints → `RawTpEvent` records in the per-CPU `EVENTS<n>` rings.
//!
//! The preferred probes where the kernel has BTF. A raw tracepoint passes the
//! tracepoint's own arguments (`struct bio *`, `struct request *`), so the
//! kernel neither formats a record (rwbs string, command bytes) nor checks
//! the global `bpf_prog_active` that makes it skip a classic-tracepoint
//! program whenever another BPF program runs on the CPU (a completion in
//! softirq interrupting a queue probe). Offsets come from `KERNEL_LAYOUT`.
//!
//! One program per row of `with_block_probes!`, generated below; what each
//! reads from its tracepoint's arguments is [`capture`]'s arm for its kind.
//! Per hit: two or four reads to find the device (needed for filtering), one
//! copy of a window of the bio or request, then the same filter, ring and
//! wakeup policy as the classic probes.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_kernel_buf,
    },
    macros::{map, raw_tracepoint},
    maps::{HashMap, LruHashMap},
    programs::RawTracePointContext,
    Global,
};
use tracer_common::{
    counter, owner_filter, owner_flags, EventKind, KernelLayout, Owner, OwnerLayout, RawTpEvent,
    RawTpQueueEvent, COMM_BYTES,
};

use super::block::{bump, count_dirty_buffer, device_wanted, pid_wanted, ring, submit};

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

/// `disk_devt(disk)`: the whole disk's number, as the tracepoints report it.
#[inline(always)]
fn disk_devt(layout: &KernelLayout, disk: u64) -> Result<u32, i32> {
    if layout.disk_ids_adjacent != 0 {
        // Both ints in one read (little-endian: major first).
        let ids: u64 = read(disk + u64::from(layout.disk_major))?;
        return Ok(((ids as u32) << 20) | (ids >> 32) as u32);
    }
    let major: u32 = read(disk + u64::from(layout.disk_major))?;
    let minor: u32 = read(disk + u64::from(layout.disk_first_minor))?;
    Ok((major << 20) | minor)
}

/// `bio_dev(bio)`: the disk of `bio->bi_bdev`, even when that is a partition.
#[inline(always)]
fn bio_dev(layout: &KernelLayout, bio: u64) -> Result<u32, i32> {
    let bdev: u64 = read(bio + u64::from(layout.bio_bdev))?;
    let disk: u64 = read(bdev + u64::from(layout.bdev_disk))?;
    disk_devt(layout, disk)
}

/// `disk_devt(rq->q->disk)`, or 0 without a disk, as the tracepoints do.
#[inline(always)]
fn rq_dev(layout: &KernelLayout, rq: u64) -> Result<u32, i32> {
    let queue: u64 = read(rq + u64::from(layout.rq_q))?;
    let disk: u64 = read(queue + u64::from(layout.q_disk))?;
    if disk == 0 {
        return Ok(0);
    }
    disk_devt(layout, disk)
}

#[inline(always)]
fn emit(kind: EventKind, object: u64, dev: u32, arg: u64, arg2: u32) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pid_wanted(tgid) {
        return 0;
    }
    let events = ring();
    let Some(mut entry) = events.reserve::<RawTpEvent>(0) else {
        bump(counter::DROPPED);
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved, writable RawTpEvent; the window
    // is copied with a helper that faults safely.
    let copied = unsafe {
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).arg = arg;
        (*event).tgid = tgid;
        (*event).dev = dev;
        (*event).arg2 = arg2;
        (*event).kind = kind as u8;
        (*event)._pad = [0; 3];
        bpf_probe_read_kernel_buf(object as *const u8, &mut (*event).window)
    };
    if copied.is_err() {
        entry.discard(0);
        bump(counter::READ_FAILED);
        return 0;
    }
    submit(events, entry);
    0
}

/// The submitter of a queued bio: its task, its blkcg's cgroup and the file
/// of its first page (or of its iomap direct I/O). Each chain is a few
/// faulting-safe reads; a chain that fails leaves its part unknown.
#[inline(always)]
fn owner_of(layout: &OwnerLayout, bio: u64) -> Owner {
    let mut owner = Owner::UNKNOWN;
    if layout.process_enabled != 0 {
        if let Ok(comm) = bpf_get_current_comm() {
            owner.comm = comm;
            owner.flags |= owner_flags::COMM;
        }
        // SAFETY: a helper without arguments.
        let task = unsafe { bpf_get_current_task() };
        if read::<u64>(task + u64::from(layout.task_mm)) == Ok(0) {
            owner.flags |= owner_flags::KERNEL_THREAD;
        }
    }
    if layout.cgroup_enabled != 0 {
        let id = blkcg_id(layout, bio);
        if let Ok(id) = id {
            owner.cgroup = id;
            owner.flags |= owner_flags::CGROUP;
        }
    }
    if layout.file_enabled != 0 {
        match page_cache_inode(layout, bio) {
            Ok(Some(inode)) => {
                if inode_into(layout, inode, &mut owner) {
                    owner.flags |= owner_flags::FILE;
                }
            }
            Ok(None) => {
                owner.flags |= owner_flags::ANONYMOUS_PAGE;
                if layout.direct_enabled != 0 {
                    if let Ok(inode) = direct_io_inode(layout, bio) {
                        if inode_into(layout, inode, &mut owner) {
                            owner.flags |= owner_flags::FILE_DIRECT;
                        }
                    }
                }
            }
            Err(_) => {}
        }
    }
    owner
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
fn page_cache_inode(layout: &OwnerLayout, bio: u64) -> Result<Option<u64>, i32> {
    let vcnt: u16 = read(bio + u64::from(layout.bio_vcnt))?;
    if vcnt == 0 {
        return Err(0);
    }
    let vecs = nonzero(read::<u64>(bio + u64::from(layout.bio_io_vec))?)?;
    let mut page = nonzero(read::<u64>(vecs + u64::from(layout.bvec_page))?)?;
    // A tail page's mapping is not its folio's: follow it to the head.
    let head: u64 = read(page + u64::from(layout.page_compound_head))?;
    if head & 1 != 0 {
        page = head - 1;
    }
    let mapping: u64 = read(page + u64::from(layout.page_mapping))?;
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
    let end_io: u64 = read(bio + u64::from(layout.bio_end_io))?;
    if end_io != layout.iomap_dio_end_io {
        return Err(0);
    }
    let dio = nonzero(read::<u64>(bio + u64::from(layout.bio_private))?)?;
    let iocb = nonzero(read::<u64>(dio + u64::from(layout.dio_iocb))?)?;
    let file = nonzero(read::<u64>(iocb + u64::from(layout.iocb_filp))?)?;
    nonzero(read::<u64>(file + u64::from(layout.file_inode))?)
}

/// `inode->i_ino` and `inode->i_sb->s_dev` into `owner`.
#[inline(always)]
fn inode_into(layout: &OwnerLayout, inode: u64, owner: &mut Owner) -> bool {
    let found = read::<u64>(inode + u64::from(layout.inode_ino)).and_then(|ino| {
        read::<u64>(inode + u64::from(layout.inode_sb))
            .and_then(|sb| nonzero(sb))
            .and_then(|sb| read::<u32>(sb + u64::from(layout.sb_dev)))
            .map(|dev| (ino, dev))
    });
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
        let Ok(comm) = bpf_get_current_comm() else {
            return false;
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
    let blkg = nonzero(read::<u64>(bio + u64::from(layout.bio_blkg))?)?;
    let blkcg = nonzero(read::<u64>(blkg + u64::from(layout.blkg_blkcg))?)?;
    let cgroup = nonzero(read::<u64>(blkcg + u64::from(layout.blkcg_cgroup))?)?;
    let kn = nonzero(read::<u64>(cgroup + u64::from(layout.cgroup_kn))?)?;
    read::<u64>(kn + u64::from(layout.kn_id))
}

/// Turns a bio away: remembered so the requests it heads are dropped too.
#[inline(always)]
fn filter_out(bio: u64) {
    let _ = FILTERED_BIOS.insert(&bio, &1, 0);
}

/// Whether a request (or a completed bio) belongs to a turned-away bio.
#[inline(always)]
fn filtered_request(layout: &OwnerLayout, rq: u64) -> bool {
    match read::<u64>(rq + u64::from(layout.rq_bio)) {
        // SAFETY: a lookup in a map of plain integers; the value is not kept.
        Ok(bio) => bio != 0 && unsafe { FILTERED_BIOS.get(&bio) }.is_some(),
        Err(_) => false,
    }
}

/// `block_bio_queue`: the event with its owner, in one larger record.
#[inline(always)]
fn queue_event(bio: u64) -> u32 {
    let layout = KERNEL_LAYOUT.load();
    let dev = match bio_dev(&layout, bio) {
        Ok(dev) => dev,
        Err(_) => {
            bump(counter::READ_FAILED);
            return 0;
        }
    };
    if !device_wanted(dev) {
        return 0;
    }
    let filters = FILTER_OWNERS.load();
    if filters != 0 && !owner_wanted(&layout.owner, bio, filters) {
        filter_out(bio);
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pid_wanted(tgid) {
        return 0;
    }
    // Read before reserving, so the slot is held (and blocks the reader) briefly.
    let owner = owner_of(&layout.owner, bio);
    let events = ring();
    let Some(mut entry) = events.reserve::<RawTpQueueEvent>(0) else {
        bump(counter::DROPPED);
        return 0;
    };
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points at a reserved, writable RawTpQueueEvent; the
    // window is copied with a helper that faults safely.
    let copied = unsafe {
        let event = &raw mut (*record).event;
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).arg = 0;
        (*event).tgid = tgid;
        (*event).dev = dev;
        (*event).arg2 = 0;
        (*event).kind = EventKind::Queue as u8;
        (*event)._pad = [0; 3];
        (*record).owner = owner;
        bpf_probe_read_kernel_buf(
            (bio + u64::from(layout.bio_window)) as *const u8,
            &mut (*event).window,
        )
    };
    if copied.is_err() {
        entry.discard(0);
        bump(counter::READ_FAILED);
        return 0;
    }
    submit(events, entry);
    0
}

#[inline(always)]
fn bio_event(kind: EventKind, bio: u64, arg: u64, arg2: u32, also: Option<u32>) -> u32 {
    let layout = KERNEL_LAYOUT.load();
    let dev = match bio_dev(&layout, bio) {
        Ok(dev) => dev,
        Err(_) => {
            bump(counter::READ_FAILED);
            return 0;
        }
    };
    if !device_wanted(dev) && !also.is_some_and(|other| other != 0 && device_wanted(other)) {
        return 0;
    }
    let filters = FILTER_OWNERS.load();
    if filters != 0 {
        if kind == EventKind::BioComplete {
            // SAFETY: a lookup in a map of plain integers; the value is not kept.
            if unsafe { FILTERED_BIOS.get(&bio) }.is_some() {
                let _ = FILTERED_BIOS.remove(&bio);
                return 0;
            }
        } else if !owner_wanted(&layout.owner, bio, filters) {
            // Remap, split and merges run in the submitter's context.
            filter_out(bio);
            return 0;
        }
    }
    emit(kind, bio + u64::from(layout.bio_window), dev, arg, arg2)
}

#[inline(always)]
fn rq_event(kind: EventKind, rq: u64, arg: u64, arg2: u32) -> u32 {
    let layout = KERNEL_LAYOUT.load();
    let dev = match rq_dev(&layout, rq) {
        Ok(dev) => dev,
        Err(_) => {
            bump(counter::READ_FAILED);
            return 0;
        }
    };
    if !device_wanted(dev) {
        return 0;
    }
    if FILTER_OWNERS.load() != 0 && filtered_request(&layout.owner, rq) {
        return 0;
    }
    emit(kind, rq + u64::from(layout.rq_window), dev, arg, arg2)
}

/// What each kind's probe reads from its tracepoint's arguments (`TP_PROTO`).
#[inline(always)]
fn capture(ctx: &RawTracePointContext, kind: EventKind) -> u32 {
    match kind {
        // (struct bio *bio, dev_t dev, sector_t from)
        EventKind::Remap => {
            let old_dev = ctx.arg::<u64>(1) as u32;
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
            rq_event(kind, ctx.arg(0), 0, 0)
        }
        // (struct request *rq, blk_status_t error, unsigned int nr_bytes)
        EventKind::Complete => {
            let status = ctx.arg::<u64>(1) as u32 & 0xff;
            let nr_bytes = ctx.arg::<u64>(2) & u64::from(u32::MAX);
            rq_event(kind, ctx.arg(0), nr_bytes, status)
        }
        // (struct buffer_head *bh): counted here, not streamed.
        EventKind::DirtyBuffer => {
            let layout = KERNEL_LAYOUT.load();
            let bh: u64 = ctx.arg(0);
            let found = read::<u64>(bh + u64::from(layout.bh_bdev))
                .and_then(|bdev| read::<u32>(bdev + u64::from(layout.bdev_dev)))
                .and_then(|dev| {
                    read::<u64>(bh + u64::from(layout.bh_size)).map(|size| (dev, size))
                });
            match found {
                Ok((dev, size)) => count_dirty_buffer(dev, size),
                Err(_) => bump(counter::READ_FAILED),
            }
            0
        }
    }
}

/// One raw-tracepoint program per row of the probe table, named by it
/// (userspace attaches each to its tracepoint by name).
macro_rules! raw_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $raw:ident, $object:ident, $arguments:literal;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[raw_tracepoint]
            pub fn $raw(ctx: RawTracePointContext) -> u32 {
                capture(&ctx, EventKind::$kind)
            }
        )*
    };
}

tracer_common::with_block_probes!(raw_programs);
