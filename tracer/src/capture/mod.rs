//! Capture: loads and attaches the probes, and drains their ring buffers on a
//! dedicated consumer thread into an [`EventSink`].
//!
//! The consumer owns the sink (usually the engine), so the hot path takes no
//! lock and allocates nothing: it reads fixed-size records straight out of the
//! ring. Frontends talk to it with [`Capture::query`], which runs a closure on
//! the consumer thread between drains.

pub mod btf;
pub mod decode;
pub mod format;
pub mod layout;
mod reorder;

pub use reorder::monotonic_ns;
mod ring;
pub mod system;

use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::Path,
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::{
    maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use tracer_common::{
    counter, device_filter, names, BlockEvent, BtfEvent, BtfQueueEvent, ClassicFields,
    ClassicRecord, DirtyCounts, EventKind, FieldOffsets, KernelLayout, OpenEvent, ProcessEvent,
    ProcessEventKind, ProcessOffsets, UringOffsets, DEVICE_LIST_LEN, NO_FIELD,
};

use crate::error::{Error, Result};
use crate::geometry::DevId;
pub use crate::sink::EventSink;
use format::ProbeStatus;

/// The probes, built by `build.rs` from `tracer-ebpf`.
static PROBES_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

/// Longest the consumer sleeps between drains when the kernel does not wake it.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// Longest the last drain waits for records that probes running at detach
/// were still writing (a probe runs for microseconds).
const FINAL_SETTLE: Duration = Duration::from_millis(50);
/// Default size of the block-event rings together: about 115k events, over
/// 50 ms at 2M events/s (drains come every 10 ms, sooner when a ring is a
/// quarter full). Each ring counts twice in RSS: the kernel maps its pages
/// twice so records can wrap around.
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;
/// Smallest default ring per CPU, however many CPUs share the total.
const DEFAULT_RING_FLOOR: u32 = 1 << 20;
/// Sets the block-event rings' total size in KiB (a hidden knob: small rings
/// force drops, to test that they are counted).
pub const RING_KB_ENV: &str = "IOSPLIT_RING_KB";
/// Largest `IOSPLIT_RING_KB`: 1 GiB.
const MAX_RING_KB: u32 = 1 << 20;
/// The process-tree ring (forks, syscalls, opens: a low rate).
const PROCESS_RING_BYTES: u32 = 1 << 20;
/// Smallest ring the kernel accepts, for rings no CPU writes to.
const PAGE_BYTES: u32 = crate::blk::PAGE_BYTES as u32;

/// Each ring's size: `total` shared by the rings that CPUs write to (CPU n
/// writes to ring n % RINGS), powers of two, at least `floor`; the others get
/// one page.
fn ring_sizes(total: u32, cpus: usize, floor: u32) -> [u32; names::RINGS] {
    let used = cpus.clamp(1, names::RINGS);
    let share = (total / used as u32).max(floor).max(PAGE_BYTES);
    // Round down to a power of two (the kernel's requirement).
    let share = 1u32 << (31 - share.leading_zeros());
    std::array::from_fn(|index| if index < used { share } else { PAGE_BYTES })
}

/// `FILTER_DEVICES` and `DEVICE_LIST` for `devices` (the `DEVICES` map is
/// filled either way): a short list is compared in the probe.
fn device_scope(devices: &[DevId]) -> (u8, [u32; DEVICE_LIST_LEN]) {
    let mut list = [0; DEVICE_LIST_LEN];
    if devices.is_empty() {
        return (device_filter::ALL, list);
    }
    let kernel: Vec<u32> = devices.iter().map(|dev| dev.to_kernel()).collect();
    // 0 ends the list, so a device numbered 0 (none is) goes to the map.
    if kernel.len() > DEVICE_LIST_LEN || kernel.contains(&0) {
        return (device_filter::MAP, list);
    }
    list[..kernel.len()].copy_from_slice(&kernel);
    (device_filter::LIST, list)
}

/// What to trace.
#[derive(Clone, Debug, Default)]
pub struct CaptureConfig {
    /// Whole disks (and stacked devices) in scope; empty traces every device.
    pub devices: Vec<DevId>,
    /// Processes in scope; `None` traces every process.
    pub pids: Option<Vec<u32>>,
    /// Size of the block-event rings together (0: the default).
    pub ring_bytes: u32,
    /// Follow a process tree (`run`): forks and write-family syscalls.
    pub process_tree: bool,
    /// With `process_tree`: stop each traced process at its opens for
    /// writing until the sink has handled the open (and sent SIGCONT, for
    /// events marked [`tracer_common::OPEN_PAUSED`]).
    pub pause_write_opens: bool,
    /// Owner filters (`-p`, `--cgroup`, `--comm`), applied in the kernel.
    pub owners: OwnerFilter,
    /// Accept `IOSPLIT_PROBES=noop` (only `report`, which then says it
    /// measured the floor instead of printing measures).
    pub accept_noop: bool,
    /// Read each queued bio's owner (process, cgroup, file) for attribution:
    /// the default, off with `--no-owners` unless a view or filter needs it
    /// (its cost is in docs/benchmarks.md).
    pub read_owners: bool,
}

/// Whose I/O to trace; empty lists filter nothing. A bio is traced when it
/// passes every list that is not empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerFilter {
    pub pids: Vec<u32>,
    /// Kernfs ids of blkcg cgroups (their directories' inode numbers).
    pub cgroups: Vec<u64>,
    /// Task names, NUL-padded as the kernel keeps them.
    pub comms: Vec<[u8; tracer_common::COMM_BYTES]>,
}

impl OwnerFilter {
    /// The `FILTER_OWNERS` bits for the lists that are not empty.
    pub fn bits(&self) -> u32 {
        use tracer_common::owner_filter;
        let mut bits = 0;
        if !self.pids.is_empty() {
            bits |= owner_filter::PID;
        }
        if !self.cgroups.is_empty() {
            bits |= owner_filter::CGROUP;
        }
        if !self.comms.is_empty() {
            bits |= owner_filter::COMM;
        }
        bits
    }
}

/// Counters the probes keep in the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub dropped: u64,
    pub syscall_dropped: u64,
    pub read_failed: u64,
    /// Block probe runs the kernel skipped (`recursion_misses`): it does not
    /// run a program while another BPF program is active on the same CPU.
    pub missed: u64,
}

/// The state of one probe after start-up.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub kind: EventKind,
    /// `Ok` when attached.
    pub status: std::result::Result<(), ProbeStatus>,
}

type Job<S> = Box<dyn FnOnce(&mut S, KernelCounters) + Send>;

enum Control<S> {
    Run(Job<S>),
    /// Detach the probes, drain what they left in the rings, run the job, stop.
    Finish(Job<S>),
    Stop,
}

/// A running capture. Dropping it detaches the probes.
pub struct Capture<S: EventSink> {
    control: mpsc::Sender<Control<S>>,
    thread: Option<JoinHandle<S>>,
    /// The traced process tree (kernel map; forks add to it).
    processes: Option<HashMap<MapData, u32, u8>>,
    pub probes: Vec<ProbeReport>,
    /// Why the process-tree probes are missing, if they are.
    pub process_probes: Option<String>,
    /// Why io_uring submissions are not followed (`run` only), if they are not.
    pub uring_probes: Option<String>,
    pub flavor: ProbeFlavor,
    /// Whether owners are read (`CaptureConfig::read_owners`): the reports
    /// have an attribution section only then.
    pub owners_read: bool,
    pub started: Instant,
}

impl<S: EventSink> Capture<S> {
    /// Checks privileges, loads and attaches the probes, and starts draining into `sink`.
    pub fn start(config: &CaptureConfig, mut sink: S) -> Result<Capture<S>> {
        system::require_privileges()?;
        let events_dir = system::tracefs_events()?;
        let (mut ebpf, probes, process_probes, uring_probes, decoder, ring_sizes) =
            load(config, &events_dir)?;
        let mut events = Vec::new();
        for (name, bytes) in names::EVENT_RINGS.iter().zip(ring_sizes) {
            let ring = match ebpf.take_map(name) {
                Some(aya::maps::Map::RingBuf(map)) => ring::BatchRing::new(map, bytes)
                    .map_err(|err| Error::failure(format!("cannot map ring {name}: {err}")))?,
                _ => {
                    return Err(Error::failure(format!(
                        "the probes' ring {name} is missing"
                    )))
                }
            };
            events.push(ring);
        }
        let flavor = decoder.flavor();
        let owners_read = config.read_owners && flavor != ProbeFlavor::Noop;
        sink.owners_read(owners_read);
        // The probes log only rare failures; drained with the events.
        let logger = aya_log::EbpfLogger::init(&mut ebpf).ok();
        let processes = match config.process_tree {
            true => ebpf
                .take_map(names::PIDS)
                .and_then(|map| HashMap::try_from(map).ok()),
            false => None,
        };
        let (control, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("iosplit-consumer".into())
            .spawn(move || {
                favour_this_thread();
                consume(ebpf, events, logger, decoder, sink, inbox)
            })
            .map_err(|err| Error::failure(format!("cannot start the consumer thread: {err}")))?;
        Ok(Capture {
            control,
            thread: Some(thread),
            processes,
            probes,
            process_probes,
            uring_probes,
            flavor,
            owners_read,
            started: Instant::now(),
        })
    }

    /// Adds a process to the traced tree; its later forks join by themselves.
    pub fn track_process(&mut self, pid: u32) -> Result<()> {
        let processes = self
            .processes
            .as_mut()
            .ok_or_else(|| Error::failure("process tracking was not enabled"))?;
        processes
            .insert(pid, 1, 0)
            .map_err(|err| Error::failure(format!("cannot track process {pid}: {err}")))
    }

    /// Removes a process from the traced tree.
    pub fn untrack_process(&mut self, pid: u32) -> Result<()> {
        let processes = self
            .processes
            .as_mut()
            .ok_or_else(|| Error::failure("process tracking was not enabled"))?;
        processes
            .remove(&pid)
            .map_err(|err| Error::failure(format!("cannot untrack process {pid}: {err}")))
    }

    /// Processes in the traced tree so far.
    pub fn tracked_processes(&self) -> Vec<u32> {
        self.processes
            .as_ref()
            .map(|map| map.keys().filter_map(|key| key.ok()).collect())
            .unwrap_or_default()
    }

    /// Runs `job` on the consumer thread between drains and returns its result.
    pub fn query<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut S, KernelCounters) -> R + Send + 'static,
    ) -> Result<R> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job<S> = Box::new(move |sink, counters| {
            let _ = reply.send(job(sink, counters));
        });
        self.control
            .send(Control::Run(job))
            .map_err(|_| Error::failure("the event consumer stopped unexpectedly"))?;
        answer
            .recv()
            .map_err(|_| Error::failure("the event consumer stopped unexpectedly"))
    }

    /// Ends tracing precisely: detaches the probes, drains every event they
    /// left in the rings, then runs `job` for the final report. Nothing the
    /// probes emitted is lost between the last drain and the detach.
    pub fn finish<R: Send + 'static>(
        mut self,
        job: impl FnOnce(&mut S, KernelCounters) -> R + Send + 'static,
    ) -> Result<R> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job<S> = Box::new(move |sink, counters| {
            let _ = reply.send(job(sink, counters));
        });
        let stopped = || Error::failure("the event consumer stopped unexpectedly");
        self.control
            .send(Control::Finish(job))
            .map_err(|_| stopped())?;
        let result = answer.recv().map_err(|_| stopped());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        result
    }

    /// Probes that could not attach, with the reason, for the report.
    pub fn unsupported(&self) -> Vec<String> {
        self.probes
            .iter()
            .filter_map(|probe| match &probe.status {
                Ok(()) => None,
                Err(ProbeStatus::Unsupported(why) | ProbeStatus::Broken(why)) => Some(why.clone()),
            })
            .collect()
    }
}

impl<S: EventSink> Drop for Capture<S> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.control.send(Control::Stop);
            let _ = thread.join();
        }
    }
}

type Loaded = (
    Ebpf,
    Vec<ProbeReport>,
    Option<String>,
    Option<String>,
    Decoding,
    [u32; names::RINGS],
);

/// Which programs carry the block events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFlavor {
    /// BTF-typed tracepoints (`tp_btf`) reading `struct bio`/`struct request`
    /// with BTF offsets.
    Btf,
    /// Classic tracepoints reading the formatted record with format-file offsets.
    Classic,
    /// The floor: the BTF tracepoints with programs that return at once.
    /// Nothing is captured; only the tracepoints' dispatch is paid.
    Noop,
}

impl ProbeFlavor {
    pub fn name(self) -> &'static str {
        match self {
            ProbeFlavor::Btf => "BTF tracepoints",
            ProbeFlavor::Classic => "classic tracepoints",
            ProbeFlavor::Noop => "noop BTF tracepoints, capturing nothing",
        }
    }
}

/// Names the probes to use: `btf` (`raw`, its old name, is accepted), `classic`, or unset for btf where BTF
/// allows; `noop` (the floor) attaches programs that return at once.
pub const PROBES_ENV: &str = "IOSPLIT_PROBES";
/// Probe levers to turn off, comma-separated (a hidden knob for the bench,
/// which measures each lever alone): `wake-check` (every record asks its
/// ring's fill, not one per [`WAKE_CHECK_BYTES`]) and `submitter-tgid`
/// (every record reads the current task, not only those emitted in the
/// submitter's context).
pub const LEVERS_OFF_ENV: &str = "IOSPLIT_LEVERS_OFF";
/// Bytes of records between two checks of a ring's fill, at most (an
/// eighth of the smallest ring's size below that).
const WAKE_CHECK_BYTES: u64 = 64 << 10;

/// The probe levers in use (see [`LEVERS_OFF_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Levers {
    wake_check: bool,
    submitter_tgid: bool,
}

impl Levers {
    fn from_env() -> Result<Levers> {
        let mut levers = Levers {
            wake_check: true,
            submitter_tgid: true,
        };
        let value = std::env::var(LEVERS_OFF_ENV).unwrap_or_default();
        for name in value
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            match name {
                "wake-check" => levers.wake_check = false,
                "submitter-tgid" => levers.submitter_tgid = false,
                _ => {
                    return Err(Error::usage(format!(
                        "{LEVERS_OFF_ENV}={value}: `{name}` is not a lever; name wake-check or submitter-tgid, or unset it"
                    )))
                }
            }
        }
        Ok(levers)
    }

    /// The fill check's spacing for rings of at least `smallest` bytes.
    fn wake_check_bytes(self, smallest: u32) -> u64 {
        match self.wake_check {
            true => WAKE_CHECK_BYTES.min(u64::from(smallest) / 8).max(8),
            false => 8,
        }
    }
}

/// Bios turned away by the owner filters that are remembered at once, so
/// the requests they head are dropped too (least recently used go first).
const FILTERED_BIOS_MAX: u32 = 65536;

/// How the consumer turns ring records into events: one decoder per flavor.
enum Decoding {
    Classic(decode::ClassicDecoder),
    Btf(decode::BtfDecoder),
    /// The noop programs write nothing.
    Nothing,
}

impl Decoding {
    fn flavor(&self) -> ProbeFlavor {
        match self {
            Decoding::Classic(_) => ProbeFlavor::Classic,
            Decoding::Btf(_) => ProbeFlavor::Btf,
            Decoding::Nothing => ProbeFlavor::Noop,
        }
    }

    /// The block events of one ring record, in kernel order: one, or a
    /// folded partition remap and then its queue.
    #[inline(always)]
    fn decode(&self, item: &[u8], mut each: impl FnMut(BlockEvent)) {
        match self {
            Decoding::Classic(decoder) => {
                if item.len() < std::mem::size_of::<ClassicRecord>() {
                    return;
                }
                // SAFETY: the classic probes write whole `ClassicRecord`s (checked length).
                let record =
                    unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ClassicRecord>()) };
                if let Some(event) = decoder.decode(&record) {
                    each(event);
                }
            }
            Decoding::Btf(decoder) => {
                if item.len() < std::mem::size_of::<BtfEvent>() {
                    return;
                }
                // SAFETY: the BTF-typed probes write whole `BtfEvent`s (checked length).
                let event = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<BtfEvent>()) };
                let Some(mut decoded) = decoder.decode(&event) else {
                    return;
                };
                if item.len() >= std::mem::size_of::<BtfQueueEvent>() {
                    // SAFETY: a record this long is a whole `BtfQueueEvent` (checked length).
                    let queued =
                        unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<BtfQueueEvent>()) };
                    decoded.owner = queued.owner;
                    if let Some(remap) = decode::BtfDecoder::folded_remap(&event, &decoded) {
                        each(remap);
                    }
                }
                each(decoded);
            }
            Decoding::Nothing => {}
        }
    }
}

/// `IOSPLIT_RING_KB` in bytes, if set; anything but 4..=1048576 KiB is refused.
fn ring_bytes_from_env() -> Result<Option<u32>> {
    let Ok(value) = std::env::var(RING_KB_ENV) else {
        return Ok(None);
    };
    parse_ring_kb(&value).map(Some).ok_or_else(|| {
        Error::usage(format!(
            "{RING_KB_ENV}={value} is not a ring size; give KiB from 4 to {MAX_RING_KB}, or unset it"
        ))
    })
}

fn parse_ring_kb(value: &str) -> Option<u32> {
    let kb: u32 = value.trim().parse().ok()?;
    (4..=MAX_RING_KB).contains(&kb).then_some(kb << 10)
}

/// BTF-typed tracepoints unless told otherwise or the kernel's BTF lacks something.
fn choose_flavor(
    accept_noop: bool,
    read_owners: bool,
) -> Result<(ProbeFlavor, Option<layout::ObjectLayout>)> {
    let requested = std::env::var(PROBES_ENV).unwrap_or_default();
    match requested.as_str() {
        "classic" => return Ok((ProbeFlavor::Classic, None)),
        "noop" if accept_noop => return Ok((ProbeFlavor::Noop, None)),
        "noop" => {
            return Err(Error::usage(format!(
                "{PROBES_ENV}=noop captures nothing (it measures the tracepoints' floor); only `report` accepts it"
            )))
        }
        // `raw` is the flavor's name before 0.2: scripts that set it keep working.
        "" | "btf" | "raw" => {}
        other => {
            return Err(Error::usage(format!(
                "{PROBES_ENV}={other} is not a probe flavor; use btf or classic (or noop with report), or unset it"
            )))
        }
    }
    let resolved = btf::Btf::from_sys_fs()
        .map_err(layout::LayoutError::from)
        .and_then(|btf| layout::resolve(&btf))
        .map_err(|err| crate::error::one_line(&err));
    match resolved {
        Ok(mut layout) => {
            // Unreadable kallsyms only leaves direct I/O's file unknown.
            let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
            layout::enable_direct_io(&mut layout.kernel.owner, &kallsyms);
            if !read_owners {
                let owner = &mut layout.kernel.owner;
                owner.process_enabled = 0;
                owner.cgroup_enabled = 0;
                owner.file_enabled = 0;
                owner.direct_enabled = 0;
            }
            layout::set_spans(&mut layout.kernel);
            Ok((ProbeFlavor::Btf, Some(layout)))
        }
        Err(why) if !requested.is_empty() => Err(Error::failure(format!(
            "BTF tracepoints need the kernel's BTF: {why}; unset {PROBES_ENV} to use classic tracepoints"
        ))),
        Err(why) => {
            crate::status::status(format_args!("note: using classic tracepoints ({why})"));
            Ok((ProbeFlavor::Classic, None))
        }
    }
}

fn load(config: &CaptureConfig, events_dir: &Path) -> Result<Loaded> {
    if PROBES_OBJECT.is_empty() {
        return Err(Error::failure(
            "this binary was built without its eBPF probes (AYA_BUILD_SKIP): rebuild with `cargo xtask run`",
        ));
    }
    if !events_dir.join("block").is_dir() {
        return Err(Error::failure(
            "this kernel has no block tracepoints (needs CONFIG_TRACEPOINTS and the block layer's events)",
        ));
    }
    let offsets: Vec<(EventKind, std::result::Result<FieldOffsets, ProbeStatus>)> = EventKind::ALL
        .iter()
        .map(|&kind| (kind, format::read_offsets(events_dir, kind)))
        .collect();
    let resolved: ClassicFields = EventKind::ALL.map(|kind| {
        offsets[kind as usize]
            .1
            .clone()
            .unwrap_or(FieldOffsets::ABSENT)
    });
    let (flavor, object_layout) = choose_flavor(config.accept_noop, config.read_owners)?;
    let filter_owners = config.owners.bits();
    if filter_owners != 0 {
        let owner = object_layout.map_or(tracer_common::OwnerLayout::ABSENT, |l| l.kernel.owner);
        let cgroups = config.owners.cgroups.is_empty() || owner.cgroup_enabled != 0;
        if owner.rq_bio == 0 || !cgroups {
            return Err(Error::usage(
                "-p/--pid, --cgroup and --comm filter in the kernel with the BTF-typed probes, which this kernel's BTF does not support here; trace without them and read the attribution sections instead",
            ));
        }
    }
    let decoding = match (flavor, object_layout) {
        (ProbeFlavor::Noop, _) => Decoding::Nothing,
        (_, Some(object_layout)) => Decoding::Btf(decode::BtfDecoder::new(object_layout)),
        (_, None) => Decoding::Classic(decode::ClassicDecoder::new(resolved)),
    };
    let (filter_devices, device_list) = device_scope(&config.devices);
    let filter_pids: u8 = u8::from(config.pids.is_some());
    let (ring_bytes, floor) = match (config.ring_bytes, ring_bytes_from_env()?) {
        (0, None) => (DEFAULT_RING_BYTES, DEFAULT_RING_FLOOR),
        // Asked for explicitly (tests force overflows this way): as small as a page.
        (0, Some(bytes)) | (bytes, _) => (bytes, PAGE_BYTES),
    };
    let ring_sizes = ring_sizes(
        ring_bytes,
        aya::util::nr_cpus().unwrap_or(names::RINGS),
        floor,
    );
    // Wakeups stay on however big the rings: without them, the bursts of
    // buffered writeback (fsync) overflowed 4 MiB rings between 10 ms drains
    // (638k drops in a 512-byte buffered bench run).
    let wakeup_bytes: u64 = u64::from(ring_sizes[0]) / 4;
    let levers = Levers::from_env()?;
    let smallest_ring = ring_sizes.iter().copied().min().unwrap_or(PAGE_BYTES);
    let wake_check_bytes = levers.wake_check_bytes(smallest_ring);
    let tgid_every_event = u8::from(!levers.submitter_tgid);
    let process_offsets = if config.process_tree {
        format::read_process_offsets(events_dir).map_err(|err| crate::error::one_line(&err))
    } else {
        Err("not requested".to_string())
    };
    let process_fields = process_offsets.clone().unwrap_or(ProcessOffsets::ABSENT);
    let uring = match (config.process_tree, &process_offsets) {
        (true, Ok(_)) => uring_offsets(events_dir),
        _ => Err(UringUnavailable::NotRequested),
    };
    let uring_fields = uring
        .as_ref()
        .map_or(UringOffsets::ABSENT, |(fields, _)| *fields);

    let pause_write_opens: u32 = if config.process_tree && config.pause_write_opens {
        std::process::id()
    } else {
        0
    };
    let mut loader = EbpfLoader::new();
    // Only one flavor runs: the classic programs stay inert under btf.
    let classic_fields: ClassicFields = match flavor {
        ProbeFlavor::Classic => resolved,
        ProbeFlavor::Btf | ProbeFlavor::Noop => [FieldOffsets::ABSENT; EventKind::COUNT],
    };
    loader.override_global(names::CLASSIC_FIELDS, &classic_fields, true);
    let kernel_layout = object_layout.map_or(KernelLayout::ABSENT, |layout| layout.kernel);
    loader.override_global(names::KERNEL_LAYOUT, &kernel_layout, true);
    loader
        .override_global(names::FILTER_DEVICES, &filter_devices, true)
        .override_global(names::DEVICE_LIST, &device_list, true)
        .override_global(names::FILTER_PIDS, &filter_pids, true)
        .override_global(names::FILTER_OWNERS, &filter_owners, true)
        // The LRU map preallocates: without owner filters it is never used.
        .map_max_entries(
            names::FILTERED_BIOS,
            if filter_owners == 0 {
                1
            } else {
                FILTERED_BIOS_MAX
            },
        )
        .override_global(names::WAKEUP_BYTES, &wakeup_bytes, true)
        .override_global(names::WAKE_CHECK_BYTES, &wake_check_bytes, true)
        .override_global(names::TGID_EVERY_EVENT, &tgid_every_event, true)
        .override_global(names::PAUSE_WRITE_OPENS, &pause_write_opens, true)
        .override_global(names::PROCESS_FIELDS, &process_fields, true)
        .override_global(names::URING_FIELDS, &uring_fields, true)
        .map_max_entries(names::PROCESS_EVENTS, PROCESS_RING_BYTES);
    for (name, bytes) in names::EVENT_RINGS.iter().zip(ring_sizes) {
        loader.map_max_entries(name, bytes);
    }
    let mut ebpf = loader.load(PROBES_OBJECT).map_err(|err| {
        Error::failure(format!(
            "the kernel refused the probes ({err}); it needs CONFIG_BPF_SYSCALL and BPF ring buffers (Linux 5.8+)"
        ))
    })?;

    fill_scope(&mut ebpf, config)?;

    // The btf and noop programs are BTF-typed: each is verified against its
    // tracepoint's prototype in the kernel's BTF (read once).
    let kernel_btf = match flavor {
        ProbeFlavor::Classic => None,
        ProbeFlavor::Btf | ProbeFlavor::Noop => Some(Btf::from_sys_fs().map_err(|err| {
            Error::failure(format!(
                "reading the kernel's BTF failed: {err}; set {PROBES_ENV}=classic to use classic tracepoints"
            ))
        })?),
    };
    let mut probes = Vec::new();
    for (kind, offsets) in offsets {
        let status = match (flavor, &kernel_btf) {
            (ProbeFlavor::Btf, Some(btf)) => attach_btf(&mut ebpf, kind, kind.btf_program(), btf),
            (ProbeFlavor::Noop, Some(btf)) => attach_btf(&mut ebpf, kind, &noop_program(kind), btf),
            _ => offsets.and_then(|_| attach(&mut ebpf, kind)),
        };
        if let Err(ProbeStatus::Unsupported(why) | ProbeStatus::Broken(why)) = &status {
            crate::status::status(format_args!("warning: {why}; continuing without it"));
        }
        probes.push(ProbeReport { kind, status });
    }
    let attached = probes.iter().filter(|p| p.status.is_ok()).count();
    if attached == 0 {
        return Err(Error::failure(
            "no block tracepoint could be attached; see the warnings above",
        ));
    }
    let process_probes = match (config.process_tree, process_offsets) {
        (false, _) => None,
        (true, Err(why)) => Some(why),
        (true, Ok(_)) => attach_process_probes(&mut ebpf)
            .err()
            .map(|err| err.to_string()),
    };
    if let Some(why) = &process_probes {
        if config.process_tree {
            crate::status::status(format_args!(
                "warning: cannot follow the command's syscalls ({why}); block I/O is still traced"
            ));
        }
    }
    let uring_probes = match (config.process_tree, &process_probes, uring) {
        (false, _, _) => None,
        (true, Some(why), _) => Some(why.clone()),
        (true, None, Err(why)) => Some(why.to_string()),
        (true, None, Ok((fields, tracepoint))) => attach_uring_probes(
            &mut ebpf,
            tracepoint,
            fields.async_opcode != NO_FIELD,
            fields.register_ctx != NO_FIELD,
        )
        .err()
        .map(|err| err.to_string()),
    };
    Ok((
        ebpf,
        probes,
        process_probes,
        uring_probes,
        decoding,
        ring_sizes,
    ))
}

/// The floor's program for `kind`, as `probes/noop.rs` names it.
fn noop_program(kind: EventKind) -> String {
    format!("noop_{}", kind.btf_program())
}

/// `program`, a BTF-typed tracepoint (`tp_btf`), on `kind`'s tracepoint.
fn attach_btf(
    ebpf: &mut Ebpf,
    kind: EventKind,
    program: &str,
    btf: &Btf,
) -> std::result::Result<(), ProbeStatus> {
    let broken = |what: &str, err: &dyn std::fmt::Display| {
        ProbeStatus::Broken(format!("{} (raw): {what} failed: {err}", kind.tracepoint()))
    };
    let program: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| broken("finding the program", &"not in the object"))?
        .try_into()
        .map_err(|err| broken("program type", &err))?;
    program
        .load(kind.tracepoint(), btf)
        .map_err(|err| broken("loading", &err))?;
    program.attach().map_err(|err| broken("attaching", &err))?;
    Ok(())
}

/// Why the process probes did not attach: which program, at which step.
#[derive(Debug, thiserror::Error)]
#[error("{step} {program}: {reason}")]
pub struct ProcessProbeError {
    step: &'static str,
    program: String,
    reason: String,
}

/// Fork following plus entry/exit probes for the write-family syscalls and
/// the ones that change the fd table (open, dup, close).
fn attach_process_probes(ebpf: &mut Ebpf) -> std::result::Result<(), ProcessProbeError> {
    let mut attach_one = |program: &str, category: &str, name: &str, load: bool| {
        let failed = |step: &'static str, reason: &dyn std::fmt::Display| ProcessProbeError {
            step,
            program: format!("{program} ({category}/{name})"),
            reason: reason.to_string(),
        };
        let tracepoint: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or_else(|| failed("finding", &"not in the object"))?
            .try_into()
            .map_err(|err| failed("typing", &err))?;
        if load {
            tracepoint.load().map_err(|err| failed("loading", &err))?;
        }
        tracepoint
            .attach(category, name)
            .map(|_| ())
            .map_err(|err| failed("attaching", &err))
    };
    attach_one(
        ProcessEventKind::Fork.enter_program(),
        "sched",
        "sched_process_fork",
        true,
    )?;
    attach_one(
        ProcessEventKind::Exec.enter_program(),
        "sched",
        "sched_process_exec",
        true,
    )?;
    attach_one("process_exit", "sched", "sched_process_exit", true)?;
    for (index, kind) in ProcessEventKind::SYSCALLS.iter().enumerate() {
        let enter = format!("sys_enter_{}", kind.name());
        let exit = format!("sys_exit_{}", kind.name());
        let attached = attach_one(kind.enter_program(), "syscalls", &enter, true);
        // openat2, open and dup2 are optional (older kernels, other architectures).
        let optional = matches!(
            kind,
            ProcessEventKind::Openat2 | ProcessEventKind::Open | ProcessEventKind::Dup2
        );
        if attached.is_err() && optional {
            continue;
        }
        attached?;
        // One exit program serves the whole family: load it once.
        attach_one("exit_write_family", "syscalls", &exit, index == 0)?;
    }
    // close_range (5.9 and later) reads its own fields; without it, the fds
    // it closes stay known until reused by an open or dup.
    let close_range = ProcessEventKind::CloseRange;
    if attach_one(
        close_range.enter_program(),
        "syscalls",
        "sys_enter_close_range",
        true,
    )
    .is_ok()
    {
        attach_one(
            "exit_write_family",
            "syscalls",
            "sys_exit_close_range",
            false,
        )?;
    }
    // io_submit (libaio) has its own exit program: it reads the iocbs.
    // Without CONFIG_AIO there is no tracepoint (nor an io_submit that
    // works); a program the verifier refuses is an error all the same.
    match attach_one(
        ProcessEventKind::IoSubmit.enter_program(),
        "syscalls",
        "sys_enter_io_submit",
        true,
    ) {
        Ok(()) => attach_one("exit_io_submit", "syscalls", "sys_exit_io_submit", true)?,
        Err(err) if err.step == "attaching" => {}
        Err(err) => return Err(err),
    }
    Ok(())
}

/// Why io_uring submissions cannot be followed here.
#[derive(Debug, thiserror::Error)]
enum UringUnavailable {
    #[error("not requested")]
    NotRequested,
    #[error("{}", crate::error::one_line(.0))]
    Format(#[from] format::FormatError),
    #[error("the kernel's BTF: {0}")]
    Btf(#[from] btf::BtfError),
    #[error("the kernel's BTF: {}", crate::error::one_line(.0))]
    Layout(#[from] layout::LayoutError),
}

/// The io_uring fields `run` reads: the submit record's from its format
/// file, the request's from BTF; or why io_uring cannot be followed here.
fn uring_offsets(
    events_dir: &Path,
) -> std::result::Result<(UringOffsets, &'static str), UringUnavailable> {
    let (mut fields, tracepoint) = format::read_uring_offsets(events_dir)?;
    let btf = btf::Btf::from_sys_fs()?;
    layout::uring_request_offsets(&btf, &mut fields)?;
    fields.enabled = 1;
    Ok((fields, tracepoint))
}

/// The io_uring submission probe, the io-wq punt counter when the kernel
/// has `io_uring_queue_async_work` with an opcode, and the registered-file
/// probes when `io_uring_register` and its syscall have the fields read.
fn attach_uring_probes(
    ebpf: &mut Ebpf,
    submit: &str,
    punts: bool,
    registered_files: bool,
) -> std::result::Result<(), ProcessProbeError> {
    let mut attach_one = |program: &str, category: &str, name: &str| {
        let failed = |step: &'static str, reason: &dyn std::fmt::Display| ProcessProbeError {
            step,
            program: format!("{program} ({category}/{name})"),
            reason: reason.to_string(),
        };
        let tracepoint: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or_else(|| failed("finding", &"not in the object"))?
            .try_into()
            .map_err(|err| failed("typing", &err))?;
        tracepoint.load().map_err(|err| failed("loading", &err))?;
        tracepoint
            .attach(category, name)
            .map(|_| ())
            .map_err(|err| failed("attaching", &err))
    };
    attach_one(
        ProcessEventKind::UringWrite.enter_program(),
        "io_uring",
        submit,
    )?;
    if punts {
        attach_one(
            ProcessEventKind::UringPunt.enter_program(),
            "io_uring",
            "io_uring_queue_async_work",
        )?;
    }
    // Registered files: the syscall's arguments, then the ring it registered to.
    if registered_files {
        attach_one(
            ProcessEventKind::UringFile.enter_program(),
            "syscalls",
            "sys_enter_io_uring_register",
        )?;
        attach_one("uring_register", "io_uring", "io_uring_register")?;
    }
    Ok(())
}

fn attach(ebpf: &mut Ebpf, kind: EventKind) -> std::result::Result<(), ProbeStatus> {
    let broken = |what: &str, err: &dyn std::fmt::Display| {
        ProbeStatus::Broken(format!("{}: {what} failed: {err}", kind.tracepoint()))
    };
    let program = ebpf
        .program_mut(kind.program())
        .ok_or_else(|| broken("finding the program", &"not in the object"))?;
    let tracepoint: &mut TracePoint = program
        .try_into()
        .map_err(|err| broken("program type", &err))?;
    tracepoint.load().map_err(|err| broken("loading", &err))?;
    tracepoint
        .attach("block", kind.tracepoint())
        .map_err(|err| broken("attaching", &err))?;
    Ok(())
}

fn fill_scope(ebpf: &mut Ebpf, config: &CaptureConfig) -> Result<()> {
    let map_error =
        |err: &dyn std::fmt::Display| Error::failure(format!("cannot set the trace scope: {err}"));
    let map = ebpf
        .map_mut(names::DEVICES)
        .ok_or_else(|| map_error(&"DEVICES map missing"))?;
    let mut devices: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for dev in &config.devices {
        devices
            .insert(dev.to_kernel(), 1, 0)
            .map_err(|e| map_error(&e))?;
    }
    fill_owner_filter(ebpf, &config.owners)?;
    if let Some(pids) = &config.pids {
        let map = ebpf
            .map_mut(names::PIDS)
            .ok_or_else(|| map_error(&"PIDS map missing"))?;
        let mut table: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
        for pid in pids {
            table.insert(pid, 1, 0).map_err(|e| map_error(&e))?;
        }
    }
    Ok(())
}

/// The owner filters' values, into their kernel maps.
fn fill_owner_filter(ebpf: &mut Ebpf, owners: &OwnerFilter) -> Result<()> {
    let map_error = |what: &dyn std::fmt::Display| {
        Error::failure(format!("cannot set the owner filter: {what}"))
    };
    let missing = |name: &str| map_error(&format!("{name} map missing"));
    let map = ebpf
        .map_mut(names::OWNER_PIDS)
        .ok_or_else(|| missing(names::OWNER_PIDS))?;
    let mut pids: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for pid in &owners.pids {
        pids.insert(pid, 1, 0).map_err(|e| map_error(&e))?;
    }
    let map = ebpf
        .map_mut(names::OWNER_CGROUPS)
        .ok_or_else(|| missing(names::OWNER_CGROUPS))?;
    let mut cgroups: HashMap<_, u64, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for id in &owners.cgroups {
        cgroups.insert(id, 1, 0).map_err(|e| map_error(&e))?;
    }
    let map = ebpf
        .map_mut(names::OWNER_COMMS)
        .ok_or_else(|| missing(names::OWNER_COMMS))?;
    let mut comms: HashMap<_, [u8; tracer_common::COMM_BYTES], u8> =
        HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for comm in &owners.comms {
        comms.insert(comm, 1, 0).map_err(|e| map_error(&e))?;
    }
    Ok(())
}

/// Per-device dirty-buffer totals, summed over CPUs.
fn dirty_totals(map: &PerCpuHashMap<MapData, u32, DirtyCounts>) -> Vec<(u32, DirtyCounts)> {
    map.iter()
        .filter_map(|entry| entry.ok())
        .map(|(dev, per_cpu)| {
            let mut total = DirtyCounts::default();
            for counts in per_cpu.iter() {
                for (sum, count) in total.by_size.iter_mut().zip(counts.by_size) {
                    *sum += count;
                }
            }
            (dev, total)
        })
        .collect()
}

/// Duplicated program fds, so their `recursion_misses` stay readable in
/// `/proc/self/fdinfo` after the probes are detached.
struct ProgramMisses {
    block: Vec<OwnedFd>,
    process: Vec<OwnedFd>,
}

impl ProgramMisses {
    fn of(ebpf: &Ebpf) -> ProgramMisses {
        let mut misses = ProgramMisses {
            block: Vec::new(),
            process: Vec::new(),
        };
        for (name, program) in ebpf.programs() {
            let Some(fd) = program
                .fd()
                .ok()
                .and_then(|fd| fd.as_fd().try_clone_to_owned().ok())
            else {
                continue;
            };
            let block = EventKind::ALL
                .iter()
                .any(|kind| kind.program() == name || kind.btf_program() == name);
            match block {
                true => misses.block.push(fd),
                false => misses.process.push(fd),
            }
        }
        misses
    }

    fn block(&self) -> u64 {
        self.block.iter().map(recursion_misses).sum()
    }

    fn process(&self) -> u64 {
        self.process.iter().map(recursion_misses).sum()
    }
}

/// The kernel's count of runs it skipped for this program (Linux 5.12+; 0 before).
fn recursion_misses(fd: &OwnedFd) -> u64 {
    let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| parse_recursion_misses(&text))
        .unwrap_or(0)
}

fn parse_recursion_misses(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("recursion_misses:"))
        .and_then(|value| value.trim().parse().ok())
}

fn read_counters(counters: &PerCpuArray<MapData, u64>) -> KernelCounters {
    KernelCounters {
        dropped: counter_total(counters, counter::DROPPED),
        syscall_dropped: counter_total(counters, counter::PROCESS_DROPPED),
        read_failed: counter_total(counters, counter::READ_FAILED),
        missed: 0,
    }
}

/// One counter summed over the CPUs.
fn counter_total(counters: &PerCpuArray<MapData, u64>, index: u32) -> u64 {
    counters
        .get(&index, 0)
        .map(|per_cpu| per_cpu.iter().sum())
        .unwrap_or(0)
}

/// Edge-triggered wait on the rings (mio registers every source with
/// `EPOLLET`): wakes only when a probe forces a wakeup (a ring is filling up)
/// or after the timeout (`DRAIN_INTERVAL`), so a steady stream is drained in batches
/// instead of once per event.
struct Waiter {
    poll: mio::Poll,
    /// Capacity 1, allocated once: which ring woke us does not matter.
    ready: mio::Events,
}

impl Waiter {
    fn new(ring_fds: &[i32]) -> std::io::Result<Waiter> {
        let poll = mio::Poll::new()?;
        for ring_fd in ring_fds {
            poll.registry().register(
                &mut mio::unix::SourceFd(ring_fd),
                mio::Token(0),
                mio::Interest::READABLE,
            )?;
        }
        Ok(Waiter {
            poll,
            ready: mio::Events::with_capacity(1),
        })
    }

    fn wait(&mut self, timeout: Duration) {
        // An interrupted or failed wait only means an early drain.
        let _ = self.poll.poll(&mut self.ready, Some(timeout));
    }
}

/// The consumer's nice value, where it may take one (root, CAP_SYS_NICE).
const CONSUMER_NICE: i32 = -10;

/// The consumer needs little CPU, but needs it in time: a busy machine (the
/// traced workload, many scrapers) otherwise delays its drains until the
/// rings fill. Without the privilege it keeps the nice value it has.
fn favour_this_thread() {
    // SAFETY: gettid and setpriority read no memory of ours; on Linux,
    // PRIO_PROCESS with a thread id sets that one thread's nice value.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, thread, CONSUMER_NICE);
    }
}

fn consume<S: EventSink>(
    mut ebpf: Ebpf,
    mut events: Vec<ring::BatchRing>,
    mut logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    decoder: Decoding,
    mut sink: S,
    inbox: mpsc::Receiver<Control<S>>,
) -> S {
    let mut process_events = ebpf
        .take_map(names::PROCESS_EVENTS)
        .and_then(|map| RingBuf::try_from(map).ok());
    let mut fds: Vec<i32> = events.iter().map(ring::BatchRing::fd).collect();
    // The process ring wakes us only for the records its probes submit with
    // a wakeup (opens for writing: `run` takes hold of the file at once).
    if let Some(process_events) = &process_events {
        use std::os::fd::AsRawFd;
        fds.push(process_events.as_raw_fd());
    }
    let mut waiter = Waiter::new(&fds).ok();
    let mut reorder = reorder::Reorder::default();
    let counters = ebpf
        .take_map(names::COUNTERS)
        .and_then(|map| PerCpuArray::<MapData, u64>::try_from(map).ok());
    let counters_now = |counters: &Option<PerCpuArray<MapData, u64>>| {
        counters.as_ref().map(read_counters).unwrap_or_default()
    };
    let dirty_buffers = ebpf
        .take_map(names::DIRTY_BUFFERS)
        .and_then(|map| PerCpuHashMap::<MapData, u32, DirtyCounts>::try_from(map).ok());
    let report_dirty = |sink: &mut S| {
        if let Some(map) = &dirty_buffers {
            sink.dirty_buffer_totals(&dirty_totals(map));
        }
    };
    let misses = ProgramMisses::of(&ebpf);
    let counters_now = |counters: &Option<PerCpuArray<MapData, u64>>| {
        let mut now = counters_now(counters);
        now.missed = misses.block();
        now.syscall_dropped += misses.process();
        now
    };
    // Owned here so that finishing can detach every probe (by dropping the
    // programs) while the rings and counters, taken out above, live on.
    let mut programs = Some(ebpf);
    // Block events the kernel dropped so far (one map read per drain): the
    // sink hears of each new loss, so chains in flight count as incomplete.
    let dropped_now = |counters: &Option<PerCpuArray<MapData, u64>>| {
        counters
            .as_ref()
            .map_or(0, |map| counter_total(map, counter::DROPPED))
    };
    let mut dropped_seen = 0;
    let mut note_losses = |dropped: u64, sink: &mut S| {
        if dropped > dropped_seen {
            dropped_seen = dropped;
            sink.events_lost();
        }
    };
    loop {
        match &mut waiter {
            Some(waiter) => waiter.wait(DRAIN_INTERVAL),
            None => std::thread::sleep(DRAIN_INTERVAL),
        }
        // Read before the cutoff: a drop counted now hit a chain queued before it.
        let dropped = dropped_now(&counters);
        let cutoff = reorder::monotonic_ns();
        drain(
            &mut events,
            process_events.as_mut(),
            &decoder,
            &mut reorder,
            cutoff,
            &mut sink,
        );
        note_losses(dropped, &mut sink);
        if let Some(logger) = logger.as_mut() {
            logger.flush();
        }
        sink.drained(Instant::now());
        loop {
            let last_job = match inbox.try_recv() {
                Ok(Control::Run(job)) => {
                    report_dirty(&mut sink);
                    job(&mut sink, counters_now(&counters));
                    continue;
                }
                Ok(Control::Finish(job)) => {
                    drop(programs.take());
                    Some(job)
                }
                Ok(Control::Stop) | Err(mpsc::TryRecvError::Disconnected) => None,
                Err(mpsc::TryRecvError::Empty) => break,
            };
            // The last drain: everything the probes left, whatever its stamp.
            // Detaching does not wait for a probe already running on another
            // CPU: its record may still be reserved, and is read once committed.
            let settle_until = Instant::now() + FINAL_SETTLE;
            loop {
                std::thread::sleep(Duration::from_millis(1));
                drain(
                    &mut events,
                    process_events.as_mut(),
                    &decoder,
                    &mut reorder,
                    u64::MAX,
                    &mut sink,
                );
                if !events.iter().any(ring::BatchRing::pending) || Instant::now() >= settle_until {
                    break;
                }
            }
            note_losses(dropped_now(&counters), &mut sink);
            sink.drained(Instant::now());
            if let Some(job) = last_job {
                report_dirty(&mut sink);
                job(&mut sink, counters_now(&counters));
            }
            return sink;
        }
    }
}

/// Reads every ring, then hands on the block events stamped up to `cutoff_ns`
/// (sampled before the rings were read) in time order.
fn drain<S: EventSink>(
    events: &mut [ring::BatchRing],
    process_events: Option<&mut RingBuf<MapData>>,
    decoder: &Decoding,
    reorder: &mut reorder::Reorder,
    cutoff_ns: u64,
    sink: &mut S,
) {
    // Process events first: a fork must be known before its child's I/O.
    if let Some(process_events) = process_events {
        while let Some(item) = process_events.next() {
            if item.len() >= std::mem::size_of::<OpenEvent>() {
                // SAFETY: an item this long is a whole `OpenEvent` (checked length).
                let open = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<OpenEvent>()) };
                sink.open_event(&open);
            } else if item.len() >= std::mem::size_of::<ProcessEvent>() {
                // SAFETY: the probes write whole `ProcessEvent`s (checked length).
                let event =
                    unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ProcessEvent>()) };
                sink.process_event(&event);
            }
        }
    }
    for ring in events.iter_mut() {
        ring.drain(|item| decoder.decode(item, |event| reorder.push(event)));
    }
    reorder.release(cutoff_ns, |event| sink.block_event(event));
}

#[cfg(test)]
mod tests {
    use super::{
        device_scope, parse_recursion_misses, parse_ring_kb, ring_sizes, Waiter,
        DEFAULT_RING_FLOOR, PAGE_BYTES, PROBES_OBJECT,
    };
    use crate::geometry::DevId;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};
    use tracer_common::{
        device_filter, names, ClassicFields, EventKind, KernelLayout, ProcessEventKind,
        ProcessOffsets, UringOffsets, DEVICE_LIST_LEN,
    };

    /// Global symbols of a little-endian ELF64 object and their sizes.
    fn elf_symbols(elf: &[u8]) -> Vec<(String, u64)> {
        let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
        let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
        let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
        assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 object");
        let (sections, entry, count) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c));
        let header = |index: usize| sections + index * entry;
        let mut symbols = Vec::new();
        for index in 0..count {
            let section = header(index);
            if u32_at(section + 4) != 2 {
                continue; // not SHT_SYMTAB
            }
            let (table, size) = (
                u64_at(section + 0x18) as usize,
                u64_at(section + 0x20) as usize,
            );
            let strings = u64_at(header(u32_at(section + 0x28)) + 0x18) as usize;
            for symbol in (table..table + size).step_by(24) {
                if elf[symbol + 4] >> 4 == 0 {
                    continue; // STB_LOCAL
                }
                let name = &elf[strings + u32_at(symbol)..];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
                symbols.push((
                    String::from_utf8_lossy(name).into_owned(),
                    u64_at(symbol + 16),
                ));
            }
        }
        symbols
    }

    /// Userspace finds programs, maps and globals by name: every name it
    /// uses must be in the object, and every global the size it writes.
    #[test]
    fn every_name_userspace_looks_up_is_in_the_probes_object() {
        assert!(
            !PROBES_OBJECT.is_empty(),
            "built with AYA_BUILD_SKIP: this test needs the real probes object"
        );
        let symbols = elf_symbols(PROBES_OBJECT);
        let size_of = |name: &str| {
            symbols
                .iter()
                .find(|(symbol, _)| symbol == name)
                .map(|&(_, size)| size)
                .unwrap_or_else(|| panic!("`{name}` is not in the probes object"))
        };
        for kind in EventKind::ALL {
            size_of(kind.program());
            size_of(kind.btf_program());
        }
        for kind in ProcessEventKind::ALL {
            size_of(kind.enter_program());
        }
        size_of("exit_write_family");
        size_of("exit_io_submit");
        size_of("uring_submit_req");
        size_of("uring_queue_async_work");
        size_of("uring_register");
        size_of("enter_io_uring_register");
        for ring in names::EVENT_RINGS {
            size_of(ring);
        }
        for map in [
            names::PROCESS_EVENTS,
            names::DIRTY_BUFFERS,
            names::COUNTERS,
            names::DEVICES,
            names::PIDS,
            names::OWNER_PIDS,
            names::OWNER_CGROUPS,
            names::OWNER_COMMS,
            names::FILTERED_BIOS,
        ] {
            size_of(map);
        }
        let globals = [
            (names::CLASSIC_FIELDS, std::mem::size_of::<ClassicFields>()),
            (names::KERNEL_LAYOUT, std::mem::size_of::<KernelLayout>()),
            (names::PROCESS_FIELDS, std::mem::size_of::<ProcessOffsets>()),
            (names::URING_FIELDS, std::mem::size_of::<UringOffsets>()),
            (names::FILTER_OWNERS, std::mem::size_of::<u32>()),
            (names::FILTER_DEVICES, 1),
            (names::DEVICE_LIST, 4 * DEVICE_LIST_LEN),
            (names::FILTER_PIDS, 1),
            (names::WAKEUP_BYTES, 8),
            (names::WAKE_CHECK_BYTES, 8),
            (names::TGID_EVERY_EVENT, 1),
            (names::PAUSE_WRITE_OPENS, 4),
        ];
        for (global, size) in globals {
            assert_eq!(size_of(global), size as u64, "size of {global}");
        }
    }

    #[test]
    fn a_few_devices_are_listed_and_many_go_to_the_map() {
        assert_eq!(
            device_scope(&[]),
            (device_filter::ALL, [0; DEVICE_LIST_LEN])
        );
        let two = [DevId::new(7, 0), DevId::new(259, 1)];
        let (filter, list) = device_scope(&two);
        assert_eq!(filter, device_filter::LIST);
        assert_eq!(&list[..3], &[(7 << 20), (259 << 20) | 1, 0]);
        let many: Vec<DevId> = (0..=DEVICE_LIST_LEN as u32)
            .map(|n| DevId::new(7, n))
            .collect();
        assert_eq!(device_scope(&many).0, device_filter::MAP);
        assert_eq!(
            device_scope(&many[..DEVICE_LIST_LEN]).0,
            device_filter::LIST
        );
        // Device 0:0 would end the list early.
        assert_eq!(device_scope(&[DevId::new(0, 0)]).0, device_filter::MAP);
    }

    /// A socket stands in for a ring fd: both signal readiness through epoll.
    #[test]
    fn the_waiter_wakes_on_a_new_edge_only_or_at_the_timeout() {
        let (mut writer, reader) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut waiter = Waiter::new(&[reader.as_raw_fd()]).unwrap();
        let timed = |waiter: &mut Waiter, timeout: Duration| {
            let start = Instant::now();
            waiter.wait(timeout);
            start.elapsed()
        };
        let short = Duration::from_millis(100);
        assert!(timed(&mut waiter, short) >= short, "nothing to read: waits");
        writer.write_all(b"x").unwrap();
        let long = Duration::from_secs(30);
        assert!(timed(&mut waiter, long) < long / 2, "a new record wakes it");
        // Still unread, but no new edge: level-triggered would return at once.
        assert!(timed(&mut waiter, short) >= short, "edge-triggered");
        writer.write_all(b"y").unwrap();
        assert!(
            timed(&mut waiter, long) < long / 2,
            "the next record wakes it again"
        );
    }

    #[test]
    fn the_rings_share_the_total_among_the_cpus_that_write_them() {
        let floor = DEFAULT_RING_FLOOR;
        assert_eq!(
            ring_sizes(16 << 20, 2, floor)[..3],
            [8 << 20, 8 << 20, PAGE_BYTES]
        );
        assert_eq!(ring_sizes(16 << 20, 1, floor)[0], 16 << 20);
        // Three CPUs: powers of two only, so 4 MiB each.
        assert_eq!(
            ring_sizes(16 << 20, 3, floor)[..4],
            [4 << 20, 4 << 20, 4 << 20, PAGE_BYTES]
        );
        // 64 CPUs share 8 rings; never below 1 MiB.
        assert!(ring_sizes(4 << 20, 64, floor)
            .iter()
            .all(|&bytes| bytes == 1 << 20));
    }

    #[test]
    fn a_small_ring_setting_goes_down_to_a_page_per_ring() {
        assert_eq!(
            ring_sizes(8 << 10, 2, PAGE_BYTES)[..3],
            [PAGE_BYTES, PAGE_BYTES, PAGE_BYTES]
        );
        // 6 KiB over two CPUs: 3 KiB each, rounded up to the kernel's page.
        assert_eq!(ring_sizes(6 << 10, 2, PAGE_BYTES)[0], PAGE_BYTES);
        assert_eq!(ring_sizes(64 << 10, 2, PAGE_BYTES)[0], 32 << 10);
    }

    #[test]
    fn ring_kb_accepts_kib_from_a_page_to_a_gib() {
        assert_eq!(parse_ring_kb("8"), Some(8 << 10));
        assert_eq!(parse_ring_kb(" 1048576 "), Some(1 << 30));
        for bad in ["", "0", "3", "1048577", "-8", "8k", "99999999999"] {
            assert_eq!(parse_ring_kb(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn recursion_misses_come_from_the_fdinfo_line() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nprog_type:\t5\nrun_cnt:\t0\nrecursion_misses:\t174\nverified_insns:\t80\n";
        assert_eq!(parse_recursion_misses(fdinfo), Some(174));
        assert_eq!(parse_recursion_misses("prog_type:\t5\n"), None);
    }
}
