//! Capture: loads and attaches the probes, and drains their ring buffers on a
//! dedicated consumer thread into an [`EventSink`].
//!
//! The consumer owns the sink (usually the engine), so the hot path takes no
//! lock and allocates nothing: it reads fixed-size records straight out of the
//! ring. Frontends talk to it with [`Capture::query`], which runs a closure on
//! the consumer thread between drains.
//!
//! Which file owns what:
//! - this file: the API ([`CaptureConfig`], [`Capture`] and what it reports);
//! - `levers`: what the environment chooses (the probe flavor, the hidden knobs);
//! - `load`: loading the probes object into the kernel, its globals and maps;
//! - `attach`: attaching its programs to their tracepoints;
//! - `consumer`: the consumer thread, its drains and the kernel's counters;
//! - `ring`, `reorder`, `decode`: reading a ring, putting events in time
//!   order, turning records into events;
//! - `format`, `btf`, `layout`: the kernel's tracepoint formats and BTF,
//!   for the probes' offsets;
//! - `system`: privileges and tracefs.

mod attach;
pub mod btf;
mod consumer;
pub mod decode;
pub mod format;
pub mod layout;
mod levers;
mod load;
pub(crate) mod passthrough;
mod reorder;
mod ring;
pub mod system;

pub use consumer::DRAIN_INTERVAL;
pub use levers::{ProbeFlavor, LEVERS_OFF_ENV, PROBES_ENV, RING_KB_ENV};
pub use load::DEFAULT_RING_BYTES;
pub use reorder::monotonic_ns;

use std::{sync::mpsc, thread::JoinHandle, time::Instant};

use aya::maps::{HashMap, MapData};
use tracer_common::{names, EventKind};

use crate::error::{Error, Result};
use crate::geometry::DevId;
pub use crate::sink::EventSink;
use consumer::{Control, Job};
use format::ProbeStatus;

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
        let load::Loaded {
            mut ebpf,
            probes,
            process_probes,
            uring_probes,
            decoding,
            ring_sizes,
        } = load::load(config, &events_dir)?;
        let events = consumer::take_event_rings(&mut ebpf, ring_sizes)?;
        let flavor = decoding.flavor();
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
        let (control, thread) = consumer::spawn(ebpf, events, logger, decoding, sink)?;
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
