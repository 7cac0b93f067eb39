//! What both probe flavors share: the per-CPU `EVENTS<n>` rings and the
//! commit that wakes the reader only when one is filling, the counters, the
//! device and process filters, and the in-kernel dirty-buffer counts.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id},
    macros::map,
    maps::{ring_buf::RingBufEntry, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    Global,
};
use tracer_common::{
    counter, device_filter, names, DirtyCounts, EventKind, DEVICE_LIST_LEN, DIRTY_SIZE_BUCKETS,
};

/// Default size of each ring; userspace sizes them at load time.
const EVENTS_RING_BYTES: u32 = 4096;

/// One ring per CPU (modulo [`names::RINGS`], the rows of
/// `with_event_rings!`): one shared ring made every reserve take the same
/// lock and move the same positions between CPUs (docs/benchmarks.md, "one
/// ring per CPU"). Userspace merges them by timestamp.
macro_rules! event_rings {
    ($($index:literal => $ring:ident,)*) => {
        $(
            #[map]
            static $ring: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);
        )*

        /// This CPU's block-event ring.
        #[inline(always)]
        pub fn ring() -> &'static RingBuf {
            // SAFETY: a helper without arguments.
            let index = unsafe { bpf_get_smp_processor_id() } % names::RINGS as u32;
            pick_ring!(index; []; $($index => $ring,)*)
        }
    };
}

/// `match index` with an arm per ring, the last one `_` so the match is total.
macro_rules! pick_ring {
    ($at:ident; [$($arms:tt)*]; $index:literal => $ring:ident,) => {
        match $at {
            $($arms)*
            _ => &$ring,
        }
    };
    ($at:ident; [$($arms:tt)*]; $index:literal => $ring:ident, $($rest:tt)*) => {
        pick_ring!($at; [$($arms)* $index => &$ring,]; $($rest)*)
    };
}

tracer_common::with_event_rings!(event_rings);

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
pub static FILTER_DEVICES: Global<u8> = Global::new(device_filter::ALL);
/// The devices in scope under `device_filter::LIST`, 0-terminated.
#[unsafe(no_mangle)]
static DEVICE_LIST: Global<[u32; DEVICE_LIST_LEN]> = Global::new([0; DEVICE_LIST_LEN]);
#[unsafe(no_mangle)]
static FILTER_PIDS: Global<u8> = Global::new(0);
/// Ring fill level (bytes) above which a submit wakes the reader.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);
/// How often (in bytes of records, a power of two) a submit checks the
/// ring's fill; 8, every record.
#[unsafe(no_mangle)]
static WAKE_CHECK_BYTES: Global<u64> = Global::new(8);
/// See `tracer_common::names::TGID_EVERY_EVENT`.
#[unsafe(no_mangle)]
static TGID_EVERY_EVENT: Global<u8> = Global::new(0);

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

/// The tgid a `kind` record carries, `None` when the pid filter turns it
/// away. Only events in the submitter's context read it (a helper call):
/// elsewhere the current task is whoever the driver runs on, and the
/// record carries 0, unless a pid filter needs it.
#[inline(always)]
pub fn record_tgid(kind: EventKind) -> Option<u32> {
    if FILTER_PIDS.load() == 0 && TGID_EVERY_EVENT.load() == 0 && !kind.in_submitter_context() {
        return Some(0);
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    pid_wanted(tgid).then_some(tgid)
}

/// Commits a filled record, waking the reader only when its ring is filling.
#[inline(always)]
pub fn submit<T>(events: &RingBuf, entry: RingBufEntry<T>) {
    // The reader drains on a timer; the rings (8 MiB in all) hold ~50 ms at
    // 2M events/s, so a wakeup is only worth its cost when one is filling.
    // Asking a ring its fill is a helper call, so only the record that
    // covers a `WAKE_CHECK_BYTES` mark of the ring asks: once per that many
    // bytes of records, known from the record's own address.
    let wakeup = if covers_mark::<T>(entry.as_ptr() as u64)
        && events.query(BPF_RB_AVAIL_DATA as u64) >= WAKEUP_BYTES.load()
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup as u64);
}

/// `BPF_RINGBUF_HDR_SZ`: the kernel's header before each record.
const RECORD_HEADER_BYTES: u64 = 8;

/// Whether the ring record of a `T` at `record` holds a multiple of
/// `WAKE_CHECK_BYTES` (a power of two dividing the ring's size). Records
/// tile the ring, so exactly one record holds each mark. The address is
/// taken relative to a global's: the verifier lets a privileged program
/// subtract two pointers, not mask one.
#[inline(always)]
fn covers_mark<T>(record: u64) -> bool {
    let every = WAKE_CHECK_BYTES.load();
    let base = &raw const WAKEUP_BYTES as u64;
    let start = record.wrapping_sub(RECORD_HEADER_BYTES).wrapping_sub(base) & (every - 1);
    let len = (core::mem::size_of::<T>() as u64 + RECORD_HEADER_BYTES + 7) & !7;
    start == 0 || start + len > every
}
/// Dirty buffers are counted per device and size in the kernel, not streamed.
#[map(name = "DIRTY_BUFFERS")]
static DIRTY_BUFFERS: PerCpuHashMap<u32, DirtyCounts> = PerCpuHashMap::with_max_entries(1024, 0);

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
