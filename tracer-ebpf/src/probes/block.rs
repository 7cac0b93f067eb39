//! Classic block tracepoints → `ClassicRecord`s in the per-CPU `EVENTS<n>`
//! rings, and what both flavors share: the rings, counters, filters and the
//! in-kernel dirty-buffer counts.
//!
//! The fallback probes, for kernels without BTF: one program per row of
//! `with_block_probes!`, all generated below. Offsets come from the format
//! files through the one `CLASSIC_FIELDS` global. Per hit: one copy of the
//! record's bytes straight into the ring (fields are decoded in userspace),
//! plus a device read and lookup only when filtering. No loops, no string
//! work, no wakeup unless the ring holds more than `WAKEUP_BYTES` (userspace
//! drains on a short timer).

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel_buf,
    },
    macros::{map, tracepoint},
    maps::{ring_buf::RingBufEntry, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::TracePointContext,
    EbpfContext, Global,
};
use aya_log_ebpf::debug;
use tracer_common::{
    counter, device_filter, ClassicFields, ClassicRecord, DirtyCounts, EventKind, FieldOffsets,
    CLASSIC_RECORD_START, DEVICE_LIST_LEN, DIRTY_SIZE_BUCKETS, NO_FIELD,
};

/// Default size of each ring; userspace sizes them at load time.
const EVENTS_RING_BYTES: u32 = 4096;

// One ring per CPU (modulo 8): one shared ring made every reserve take the
// same lock and move the same positions between CPUs (0.22 -> 0.16 us per
// event on loop 4k random writes). Userspace merges them by timestamp.
#[map(name = "EVENTS0")]
static EVENTS0: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS1")]
static EVENTS1: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS2")]
static EVENTS2: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS3")]
static EVENTS3: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS4")]
static EVENTS4: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS5")]
static EVENTS5: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS6")]
static EVENTS6: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
#[map(name = "EVENTS7")]
static EVENTS7: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);

/// This CPU's block-event ring.
#[inline(always)]
pub fn ring() -> &'static RingBuf {
    // SAFETY: a helper without arguments.
    match unsafe { bpf_get_smp_processor_id() } % 8 {
        0 => &EVENTS0,
        1 => &EVENTS1,
        2 => &EVENTS2,
        3 => &EVENTS3,
        4 => &EVENTS4,
        5 => &EVENTS5,
        6 => &EVENTS6,
        _ => &EVENTS7,
    }
}

#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Whole-disk (and stacked-device) `dev_t`s in scope, when `FILTER_DEVICES` is set.
#[map(name = "DEVICES")]
static DEVICES: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);

/// Thread-group ids in scope, when `FILTER_PIDS` is set.
#[map(name = "PIDS")]
pub static PIDS: HashMap<u32, u8> = HashMap::with_max_entries(16384, 0);

/// A `device_filter` value.
#[unsafe(no_mangle)]
static FILTER_DEVICES: Global<u8> = Global::new(device_filter::ALL);
/// The devices in scope under `device_filter::LIST`, 0-terminated.
#[unsafe(no_mangle)]
static DEVICE_LIST: Global<[u32; DEVICE_LIST_LEN]> = Global::new([0; DEVICE_LIST_LEN]);
#[unsafe(no_mangle)]
static FILTER_PIDS: Global<u8> = Global::new(0);
/// Ring fill level (bytes) above which a submit wakes the reader.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// Every kind's record offsets, indexed by kind (`ABSENT` under BTF tracepoints).
#[unsafe(no_mangle)]
static CLASSIC_FIELDS: Global<ClassicFields> =
    Global::new([FieldOffsets::ABSENT; EventKind::COUNT]);

/// One kind's offsets, without copying the whole table.
#[inline(always)]
fn classic_fields(kind: EventKind) -> FieldOffsets {
    let table: *const ClassicFields = (&CLASSIC_FIELDS as *const Global<ClassicFields>).cast();
    // SAFETY: `Global` is a transparent wrapper of the initialized array, and
    // `kind` indexes it (the array has one entry per kind).
    unsafe { core::ptr::read_volatile((table as *const FieldOffsets).add(kind as usize)) }
}

#[inline(always)]
pub fn bump(index: u32) {
    bump_by(index, 1);
}

/// [`bump`] by `count`.
#[inline(always)]
pub fn bump_by(index: u32, count: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // Atomic even though the slot is this CPU's: a probe in interrupt
        // context (a completion) can run between the load and the store of a
        // task-context probe's plain increment, and one count would be lost.
        // SAFETY: an aligned u64 in the per-CPU map, valid while the program runs.
        // (`AtomicU64::fetch_add` is not offered on the BPF target; the
        // intrinsic with an unused result is BPF's `lock +=`.)
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                slot, count,
            )
        };
    }
}

/// Reads a `T` at `offset` in the tracepoint record.
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, i32> {
    // SAFETY: the offset comes from the tracepoint's own format file and the
    // read goes through bpf_probe_read_kernel, which faults safely.
    unsafe { ctx.read_at::<T>(offset as usize) }
}

#[inline(always)]
fn device_in_scope(dev: u32) -> bool {
    // SAFETY: a lookup in a map of plain integers; the value is not kept.
    unsafe { DEVICES.get(&dev) }.is_some()
}

/// Whether events of `dev` are traced (every device when not filtering).
#[inline(always)]
pub fn device_wanted(dev: u32) -> bool {
    match FILTER_DEVICES.load() {
        device_filter::ALL => true,
        device_filter::LIST => device_listed(dev),
        _ => device_in_scope(dev),
    }
}

#[inline(always)]
fn device_listed(dev: u32) -> bool {
    let list = DEVICE_LIST.load();
    for listed in list {
        if listed == 0 {
            return false;
        }
        if listed == dev {
            return true;
        }
    }
    false
}

/// Whether events of process `tgid` are traced (every process when not filtering).
#[inline(always)]
pub fn pid_wanted(tgid: u32) -> bool {
    // SAFETY: as above, a lookup in a map of plain integers.
    FILTER_PIDS.load() == 0 || unsafe { PIDS.get(&tgid) }.is_some()
}

/// Whether the event's device (or, for a remap, the device it came from) is in scope.
#[inline(always)]
fn in_scope(ctx: &TracePointContext, fields: &FieldOffsets) -> Result<bool, i32> {
    if device_wanted(field::<u32>(ctx, fields.dev)?) {
        return Ok(true);
    }
    if fields.aux_dev == NO_FIELD {
        return Ok(false);
    }
    let aux_dev = field::<u32>(ctx, fields.aux_dev)?;
    Ok(aux_dev != 0 && device_wanted(aux_dev))
}

#[inline(always)]
fn capture(ctx: &TracePointContext, kind: EventKind) -> u32 {
    let fields = classic_fields(kind);
    if fields.enabled == 0 {
        return 0;
    }
    if kind == EventKind::DirtyBuffer {
        return classic_dirty_buffer(ctx, &fields);
    }
    if FILTER_DEVICES.load() != device_filter::ALL {
        match in_scope(ctx, &fields) {
            Ok(true) => {}
            Ok(false) => return 0,
            Err(errno) => return read_failed(ctx, kind, errno),
        }
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pid_wanted(tgid) {
        return 0;
    }
    let events = ring();
    let Some(mut entry) = events.reserve::<ClassicRecord>(0) else {
        bump(counter::DROPPED);
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved, writable ClassicRecord; the record
    // bytes are copied with a helper that faults safely.
    let copied = unsafe {
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).tgid = tgid;
        // kind and its padding in one store: a 3-byte array assignment is a
        // call to a byte-loop memset.
        (&raw mut (*event).kind).cast::<u32>().write(kind as u32);
        bpf_probe_read_kernel_buf(
            (ctx.as_ptr() as *const u8).add(CLASSIC_RECORD_START),
            &mut (*event).record,
        )
    };
    if let Err(errno) = copied {
        entry.discard(0);
        return read_failed(ctx, kind, errno);
    }
    submit(events, entry);
    0
}

const _: () = assert!(
    core::mem::offset_of!(ClassicRecord, kind) % 4 == 0
        && core::mem::offset_of!(ClassicRecord, _pad)
            == core::mem::offset_of!(ClassicRecord, kind) + 1
);

/// Commits a filled record, waking the reader only when its ring is filling.
#[inline(always)]
pub fn submit<T>(events: &RingBuf, entry: RingBufEntry<T>) {
    // The reader drains on a timer; the rings (8 MiB in all) hold ~50 ms at
    // 2M events/s, so a wakeup is only worth its cost when one is filling.
    let wakeup = if events.query(BPF_RB_AVAIL_DATA as u64) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup as u64);
}

/// Counts (and logs, off the hot path: it should never happen) a failed read.
#[inline(always)]
fn read_failed(ctx: &TracePointContext, kind: EventKind, errno: i32) -> u32 {
    bump(counter::READ_FAILED);
    debug!(
        ctx,
        "iosplit-trace: reading a {} record failed: {}", kind as u8, errno
    );
    0
}

/// One classic program per row of the probe table, named by it.
macro_rules! classic_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $btf:ident, $object:ident, $arguments:literal;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[tracepoint]
            pub fn $classic(ctx: TracePointContext) -> u32 {
                capture(&ctx, EventKind::$kind)
            }
        )*
    };
}

tracer_common::with_block_probes!(classic_programs);

/// Dirty buffers are counted per device and size in the kernel, not streamed.
#[map(name = "DIRTY_BUFFERS")]
static DIRTY_BUFFERS: PerCpuHashMap<u32, DirtyCounts> = PerCpuHashMap::with_max_entries(1024, 0);

#[inline(always)]
fn classic_dirty_buffer(ctx: &TracePointContext, fields: &FieldOffsets) -> u32 {
    let (dev, bytes) = match (
        field::<u32>(ctx, fields.dev),
        field::<u64>(ctx, fields.aux_sector),
    ) {
        (Ok(dev), Ok(bytes)) => (dev, bytes),
        (Err(errno), _) | (_, Err(errno)) => {
            return read_failed(ctx, EventKind::DirtyBuffer, errno)
        }
    };
    count_dirty_buffer(dev, bytes);
    0
}

/// Counts one dirty buffer of `bytes` on `dev`, per CPU, when `dev` is traced.
#[inline(always)]
pub fn count_dirty_buffer(dev: u32, bytes: u64) {
    if !device_wanted(dev) {
        return;
    }
    let bucket = DirtyCounts::bucket(bytes) & (DIRTY_SIZE_BUCKETS - 1);
    match DIRTY_BUFFERS.get_ptr_mut(&dev) {
        // SAFETY: a per-CPU value only this CPU writes while the program runs.
        Some(counts) => unsafe { (*counts).by_size[bucket] += 1 },
        None => {
            let mut counts = DirtyCounts::default();
            counts.by_size[bucket] = 1;
            let _ = DIRTY_BUFFERS.insert(&dev, &counts, 0);
        }
    }
}
