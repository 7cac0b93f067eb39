//! The consumer thread: it owns the sink and the rings, drains them on a
//! wakeup or every [`DRAIN_INTERVAL`], hands the sink the block events in
//! time order, reads the kernel's counters for jobs, and runs the jobs
//! [`Capture`](super::Capture) sends between drains.

use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::{
    maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    Ebpf,
};
use tracer_common::{
    counter, names, DirtyCounts, EventKind, OpenEvent, ProcessEvent, TagWaitKey, TagWaits,
};

use crate::error::{Error, Result};

use super::decode::Decoding;
use super::{reorder, ring, EventSink, KernelCounters};

/// Longest the consumer sleeps between drains when the kernel does not wake it.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// Longest the last drain waits for records that probes running at detach
/// were still writing (a probe runs for microseconds).
const FINAL_SETTLE: Duration = Duration::from_millis(50);

pub(super) type Job<S> = Box<dyn FnOnce(&mut S, KernelCounters) + Send>;

/// What [`Capture`](super::Capture) asks of the consumer.
pub(super) enum Control<S> {
    Run(Job<S>),
    /// Detach the probes, drain what they left in the rings, run the job, stop.
    Finish(Job<S>),
    Stop,
}

/// The block-event rings, taken out of `ebpf` and mapped, `sizes` bytes each.
pub(super) fn take_event_rings(
    ebpf: &mut Ebpf,
    sizes: [u32; names::RINGS],
) -> Result<Vec<ring::BatchRing>> {
    let mut events = Vec::new();
    for (name, bytes) in names::EVENT_RINGS.iter().zip(sizes) {
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
    Ok(events)
}

/// Starts the consumer thread, which drains into `sink` until told to
/// finish or stop, and then hands the sink back.
pub(super) fn spawn<S: EventSink>(
    ebpf: Ebpf,
    events: Vec<ring::BatchRing>,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    decoding: Decoding,
    sink: S,
) -> Result<(mpsc::Sender<Control<S>>, JoinHandle<S>)> {
    let (control, inbox) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("iosplit-consumer".into())
        .spawn(move || {
            favour_this_thread();
            consume(ebpf, events, logger, decoding, sink, inbox)
        })
        .map_err(|err| Error::failure(format!("cannot start the consumer thread: {err}")))?;
    Ok((control, thread))
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

/// Per key, the waits summed over CPUs, and the tag set's size.
fn tag_wait_totals(
    map: &PerCpuHashMap<MapData, TagWaitKey, TagWaits>,
) -> Vec<(TagWaitKey, TagWaits)> {
    map.iter()
        .filter_map(|entry| entry.ok())
        .map(|(key, per_cpu)| {
            let total = per_cpu
                .iter()
                .fold(TagWaits::default(), |sum, waits| TagWaits {
                    waits: sum.waits + waits.waits,
                    nr_tags: sum.nr_tags.max(waits.nr_tags),
                });
            (key, total)
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
    mut decoder: Decoding,
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
    let tag_waits = ebpf
        .take_map(names::TAG_WAITS)
        .and_then(|map| PerCpuHashMap::<MapData, TagWaitKey, TagWaits>::try_from(map).ok());
    let report_dirty = |sink: &mut S| {
        if let Some(map) = &dirty_buffers {
            sink.dirty_buffer_totals(&dirty_totals(map));
        }
        if let Some(map) = &tag_waits {
            sink.tag_wait_totals(&tag_wait_totals(map));
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
            &mut decoder,
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
                    &mut decoder,
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
    decoder: &mut Decoding,
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
    use super::{parse_recursion_misses, Waiter};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

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
    fn recursion_misses_come_from_the_fdinfo_line() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nprog_type:\t5\nrun_cnt:\t0\nrecursion_misses:\t174\nverified_insns:\t80\n";
        assert_eq!(parse_recursion_misses(fdinfo), Some(174));
        assert_eq!(parse_recursion_misses("prog_type:\t5\n"), None);
    }
}
