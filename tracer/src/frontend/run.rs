//! `iosplit-trace run -- CMD`: trace while CMD runs, then report what its
//! writes became, and exit with CMD's own status.
//!
//! The child joins the kernel's tracked set at fork time, and so do its own
//! forks, so not one of its I/Os is missed. `run --pid PID` follows a
//! process already running instead, from the instant it is attached
//! (`run_attach`).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::time::{Duration, Instant};
use tokio::signal::unix::{Signal, SignalKind};

use tracer_common::{
    BlockEvent, DirtyCounts, OpenEvent, ProcessEvent, ProcessEventKind, OPEN_PAUSED,
};

use crate::capture::{Capture, CaptureConfig};
use crate::cli::{DeviceSelection, RunArgs};
use crate::engine::fix_time::{self, ProposedFix};
use crate::engine::run_match::{FdResolver, FdTarget, RunMatcher, TargetFile, WriteMatch};
use crate::engine::stats::distribution;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::geometry::resolve::resolve;
use crate::geometry::{fiemap, sysfs, DevId};
use crate::model::{
    AttachEnd, FilesNotListed, IoSubmitReport, Report, RunAttached, RunFile, RunMapped, RunReport,
    RunTarget, RunTimeWithFix, UringReport,
};
use crate::record::format::RunRecord;
use crate::record::{RecordingSink, Writer};
use crate::sink::EventSink;

use super::output::{Format, Output};
use super::run_attach::{self, AttachTarget, OpenFd, StoppedTree};
use super::run_pins::{FilePins, StoppedParents};
use super::{output, selection, session, units};

/// `O_WRONLY | O_RDWR` in an open's flags.
const O_ACCMODE: u64 = libc::O_ACCMODE as u64;

/// How long to wait after the command exits for its I/O to complete.
const SETTLE: Duration = Duration::from_secs(2);

/// Resolves opened paths (and, for fds opened before tracking, `/proc/PID/fd`)
/// to block devices, or regular files on one, through sysfs.
#[derive(Default)]
pub struct ProcFdResolver {
    /// Filesystems' devices by `st_dev`, so each is looked up in sysfs once.
    filesystems: HashMap<u64, Option<FdTarget>>,
}

impl FdResolver for ProcFdResolver {
    fn resolve_path(&mut self, tgid: u32, path: &str) -> Option<FdTarget> {
        let path = Path::new(path);
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::fs::read_link(format!("/proc/{tgid}/cwd"))
                .or_else(|_| std::env::current_dir())
                .ok()?
                .join(path)
        };
        // Follows /dev/disk/by-* links to the kernel name.
        let real = std::fs::canonicalize(&absolute).ok()?;
        self.target(&real)
    }

    fn resolve_fd(&mut self, tgid: u32, fd: u32) -> Option<FdTarget> {
        let path = std::fs::read_link(format!("/proc/{tgid}/fd/{fd}")).ok()?;
        self.target(&path)
    }

    fn logical_block_bytes(&mut self, target: &FdTarget) -> u64 {
        std::fs::read_to_string(format!(
            "/sys/class/block/{}/queue/logical_block_size",
            target.device
        ))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(512)
    }
}

impl ProcFdResolver {
    /// The block device at `path`, or the regular file there when its
    /// filesystem sits on a block device (not tmpfs, not an overlay).
    fn target(&mut self, path: &Path) -> Option<FdTarget> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let metadata = std::fs::metadata(path).ok()?;
        if metadata.file_type().is_block_device() {
            return block_target(DevId::from_rdev(metadata.rdev()));
        }
        if metadata.file_type().is_char_device() {
            return nvme_generic_namespace(DevId::from_rdev(metadata.rdev()))
                .and_then(block_target);
        }
        if !metadata.is_file() {
            return None;
        }
        let filesystem = self
            .filesystems
            .entry(metadata.dev())
            .or_insert_with(|| block_target(DevId::from_rdev(metadata.dev())))
            .clone()?;
        Some(FdTarget {
            file: Some(TargetFile {
                path: path.to_string_lossy().into_owned(),
                inode: metadata.ino(),
            }),
            ..filesystem
        })
    }
}

/// The block device with this number.
/// The namespace's block device behind an NVMe generic char device
/// (`/dev/ngXnY` is `nvmeXnY`'s passthrough node): its commands are
/// issued on that disk's queue.
fn nvme_generic_namespace(dev: DevId) -> Option<DevId> {
    let link = std::fs::read_link(format!("/sys/dev/char/{}:{}", dev.major, dev.minor)).ok()?;
    let name = link.file_name()?.to_str()?;
    let namespace = name.strip_prefix("ng")?;
    let block = std::fs::read_to_string(format!("/sys/class/block/nvme{namespace}/dev")).ok()?;
    let (major, minor) = block.trim().split_once(':')?;
    Some(DevId::new(major.parse().ok()?, minor.parse().ok()?))
}

fn block_target(dev: DevId) -> Option<FdTarget> {
    let name = sysfs::name_of_dev(dev)?;
    let device = resolve(&name).ok()?;
    let start_sector = if device.is_partition() {
        sysfs::partition_start(&device.name)?
    } else {
        0
    };
    Some(FdTarget {
        device: device.name,
        disk_dev: device.disk_dev,
        start_sector,
        file: None,
    })
}

/// The engine plus what only `run` needs.
pub struct RunSink {
    pub engine: Engine,
    pub matcher: RunMatcher<ProcFdResolver>,
    own_pid: u32,
    /// The written files held open, so renames and removals do not hide
    /// their extents.
    pins: FilePins,
    /// Parents of the processes stopped at their opens, which may stop too.
    stopped_parents: StoppedParents,
}

impl RunSink {
    /// Takes hold of `fd`'s file when it is a file target not held yet.
    fn pin_fd(&mut self, tgid: u32, fd: u32) {
        let Some(target) = self.matcher.fd_target(tgid, fd) else {
            return;
        };
        if self.pins.is_held(target) {
            return;
        }
        if let Some(file) = &self.matcher.targets()[target].target.file {
            self.pins.pin(target, file.inode, &file.path, tgid, fd);
        }
    }

    /// Each written file's extent map now: through its hold, by path, or as
    /// taken when its hold was let go.
    fn final_maps(&self) -> Vec<(usize, std::io::Result<fiemap::FileMap>)> {
        self.matcher
            .written_files()
            .into_iter()
            .map(|(target, file)| (target, self.pins.final_map(target, &file.path, file.inode)))
            .collect()
    }
}

impl EventSink for RunSink {
    fn block_event(&mut self, event: &BlockEvent) {
        self.engine.ingest(event);
        for outcome in self.engine.drain_outcomes() {
            self.matcher.outcome(&outcome);
        }
    }

    fn process_event(&mut self, event: &ProcessEvent) {
        // Our own events are only the fork that started the command.
        if event.tgid == self.own_pid {
            return;
        }
        if event.kind == ProcessEventKind::Fork as u8 {
            self.engine.track_processes([event.tgid]);
        }
        let kind = ProcessEventKind::from_u8(event.kind);
        // Which file a close lets go of: known only before the fd table forgets it.
        let closed = (kind == Some(ProcessEventKind::Close))
            .then(|| self.matcher.fd_target(event.tgid, event.fd))
            .flatten();
        self.matcher.process_event(event);
        match kind {
            // A write through an fd whose open was not seen, or a file let
            // go of and written again: held from now on.
            Some(kind)
                if kind.is_write() && !kind.is_uring() && !kind.is_aio() && event.result > 0 =>
            {
                self.pin_fd(event.tgid, event.fd);
            }
            // dd opens its output as fd 3, dup2s it onto 1 and closes 3.
            Some(kind) if kind.is_dup() && event.result >= 0 => {
                self.pin_fd(event.tgid, event.result as u32);
            }
            // A mapping outlives its fd: held from the mmap.
            Some(ProcessEventKind::Mmap) if event.result >= 0 => {
                self.pin_fd(event.tgid, event.fd);
            }
            _ => {}
        }
        if let Some(target) = closed.filter(|&target| self.pins.is_held(target)) {
            let calls = &self.matcher.targets()[target];
            if calls.synced() && self.matcher.fds_on(target) == 0 {
                self.pins.release(target, calls.write_syscalls > 0);
            }
        }
    }

    fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        self.engine.dirty_buffer_totals(totals);
    }

    fn tag_wait_totals(&mut self, totals: &[(tracer_common::TagWaitKey, tracer_common::TagWaits)]) {
        self.engine.tag_wait_totals(totals);
    }

    fn owners_read(&mut self, read: bool) {
        self.engine.attribute_owners(read);
    }

    fn events_lost(&mut self) {
        self.engine.events_lost();
    }

    fn drained(&mut self, now: std::time::Instant) {
        self.engine.drained(now);
        self.stopped_parents.continue_stopped(now);
    }

    fn open_event(&mut self, event: &OpenEvent) {
        if event.event.tgid == self.own_pid {
            return;
        }
        self.matcher.open_event(event);
        // Opened for writing: held before it can be renamed or removed.
        let (opened, flags) = (event.event.result, event.event.offset);
        if opened >= 0 && flags & O_ACCMODE != 0 {
            self.pin_fd(event.event.tgid, opened as u32);
        }
        // The probe stopped the process at this open: held (or not a file), it goes on.
        if event.event.how & OPEN_PAUSED != 0 {
            self.stopped_parents
                .watch_parent_of(event.event.tgid, self.own_pid);
            // SAFETY: a signal to a process of the command's tree.
            unsafe { libc::kill(event.event.tgid as i32, libc::SIGCONT) };
            // A watched parent too? Its stop seen by the last look may be this one.
            self.stopped_parents.continued(event.event.tgid);
            let counts = &mut self.pins.counts;
            counts.paused += 1;
            counts.paused_ns += crate::capture::monotonic_ns().saturating_sub(event.event.ts_ns);
        }
    }
}

/// Finds the program like the shell would, so a typo fails before tracing starts.
fn find_program(program: &str) -> Option<PathBuf> {
    let executable = |path: &Path| {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|path| executable(path))
}

/// The reader holds each written file when it handles the file's open,
/// the command stopped meanwhile (or racing it, with `--no-pause`): on a
/// busy machine the command must not starve it. Threads made from here on inherit the higher priority;
/// the command gets back the niceness we had. Returns that niceness.
fn raise_tracer_priority() -> libc::c_int {
    // SAFETY: plain syscalls on the calling thread.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if *libc::__errno_location() != 0 {
            return 0;
        }
        // Without CAP_SYS_NICE this fails, and the race is as before.
        if libc::setpriority(libc::PRIO_PROCESS, 0, nice - TRACER_NICE_BOOST) != 0 {
            log::debug!(
                "tracer priority not raised: {}",
                std::io::Error::last_os_error()
            );
        }
        nice
    }
}

/// How much nicer than the command the tracer's threads run.
const TRACER_NICE_BOOST: libc::c_int = 10;

pub fn run(selection: &DeviceSelection, args: &RunArgs) -> Result<ExitCode> {
    let launch = match args.pid {
        Some(pid) => Launch::Attach(AttachTarget::open(pid)?),
        None => {
            let Some(program) = args.command.first() else {
                return Err(Error::MissingCommand);
            };
            let Some(program_path) = find_program(program) else {
                return Err(Error::CommandNotFound(program.clone()));
            };
            Launch::Spawn(program_path)
        }
    };
    let command = match &launch {
        Launch::Attach(target) => target.command.clone(),
        Launch::Spawn(_) => args.command.clone(),
    };
    let named = selection::resolve_selection(selection)?;
    // Created now, so a bad -o path fails before the command runs.
    let mut out = Output::to(args.output.as_deref())?;
    let disks = session::read_geometry(&[])?;
    let mut writer = args.record.as_deref().map(Writer::create).transpose()?;
    let mut engine = Engine::new(disks.clone(), Default::default());
    // The matcher reads the engine's commands, not the raw events.
    engine.keep_outcomes();
    let sink = RunSink {
        engine,
        matcher: RunMatcher::new(ProcFdResolver::default()),
        own_pid: std::process::id(),
        pins: FilePins::default(),
        stopped_parents: StoppedParents::default(),
    };
    let sink = RecordingSink::new(sink, writer.as_mut());
    // Every device: which ones the command touches is known only afterwards.
    let config = CaptureConfig {
        process_tree: true,
        pause_write_opens: !args.no_pause,
        read_owners: args.read.reads_owners(false),
        ..CaptureConfig::default()
    };
    let command_nice = raise_tracer_priority();
    let mut capture = Capture::start(&config, sink)?;
    if let Some(writer) = &writer {
        let header = super::record::header("run", &disks, &capture, Some(command.clone()));
        writer.header(header);
    }
    let runtime = session::runtime()?;
    // Listened for before "tracing" shows (see `session::listen`), so no
    // Ctrl-C can kill us and orphan the command.
    let mut stop_signals = StopSignals {
        interrupt: session::listen(&runtime, SignalKind::interrupt())?,
        terminate: session::listen(&runtime, SignalKind::terminate())?,
    };
    let mut started = Instant::now();
    let (exit_status, attached) = match launch {
        Launch::Spawn(program_path) => {
            output::status(format_args!(
                "tracing `{}` and the I/O it causes",
                command.join(" ")
            ));
            let status = runtime.block_on(spawn_and_wait(
                &mut capture,
                &program_path,
                &command,
                command_nice,
                &mut stop_signals,
            ))?;
            (Some(exit_code_of(status)), None)
        }
        Launch::Attach(target) => {
            let processes = attach(&mut capture, &target)?;
            started = Instant::now();
            output::status(format_args!(
                "tracing process {} (`{}`) and the I/O it causes, until it exits or Ctrl-C",
                target.pid,
                command.join(" ")
            ));
            let ended = runtime.block_on(wait_attached(&target, &mut stop_signals))?;
            (None, Some((target.pid, processes, ended)))
        }
    };
    let command_elapsed = started.elapsed();

    // Let the command's last I/O (fsync, writeback it forced) complete.
    let settle_until = Instant::now() + SETTLE;
    while Instant::now() < settle_until {
        let in_flight = capture.query(|sink, _| sink.engine.correlation().in_flight)?;
        if in_flight == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // The files' extent maps are read now, not as they are written: blocks
    // are allocated at writeback (delalloc) and direct writes into
    // preallocated extents convert them at completion, so only once the
    // command has exited and its I/O has settled do the extents hold where
    // its bytes went. Dirty data left behind shows as delalloc extents.
    // Files renamed or removed since are read through the fd `run` holds
    // (`run_pins`), then let go of.
    let (file_maps, pins) = capture.query(|sink, _| {
        let maps = sink.final_maps();
        let counts = sink.pins.counts;
        sink.pins.clear();
        (maps, counts)
    })?;
    if pins.missed > 0 {
        output::status(format_args!(
            "{} written files could not be held open (gone before they were seen, or too many): their extents are read by path",
            units::thousands(pins.missed)
        ));
    }

    let named: Vec<DevId> = named.iter().map(|d| d.dev).collect();
    let unsupported = capture.unsupported();
    let uring_probes = capture.uring_probes.clone();
    let owners_read = capture.owners_read;
    let elapsed = started.elapsed();
    let report = capture.finish(move |sink, counters| {
        sink.matcher.end_mappings();
        for (target, map) in file_maps {
            sink.matcher.set_file_map(target, map);
        }
        sink.engine.settle_at_end(0);
        let mut report = session::report(&sink.engine, counters, elapsed, unsupported, owners_read);
        let mut run = run_report(&mut *sink, &command, exit_status, uring_probes);
        // Less the pauses at its opens: the time the command itself took.
        let paused_s = pins.paused_ns as f64 / 1e9;
        let command_s = (command_elapsed.as_secs_f64() - paused_s).max(0.0);
        run.command_s = Some(command_s);
        run.attached = attached.map(|(pid, processes_at_attach, ended)| RunAttached {
            pid,
            processes_at_attach,
            window_s: command_s,
            ended,
        });
        run.paused_opens = pins.paused;
        run.paused_s = paused_s;
        let tracked_devices: Vec<String> = sink
            .engine
            .origins()
            .into_iter()
            .filter(|origin| !origin.tracked.ops.is_empty())
            .map(|origin| origin.device)
            .collect();
        let mut written: BTreeSet<String> = sink
            .engine
            .devices_written_by_tracked()
            .into_iter()
            .collect();
        written.extend(run.targets.iter().map(|t| t.device.clone()));
        // Cgroup and file paths (the probes are detached: nothing waits).
        if let Some(attribution) = report.attribution.as_mut() {
            crate::owners::resolve(attribution);
            sink.record_names(&crate::model::OwnerNames::of(attribution));
        }
        let conclusion = RunRecord {
            run,
            tracked_devices,
            named: named.iter().map(|dev| dev.to_string()).collect(),
            written: written.into_iter().collect(),
        };
        sink.record_run(&conclusion);
        sink.finish_recording(super::record::trailer(counters, elapsed));
        conclude(&mut report, conclusion);
        report
    })?;
    match out.print(&report, Format::from_flags(args.json, false)) {
        // A closed pipe is no failure: CMD's status still stands.
        Err(err) if err.is_broken_pipe() => {}
        printed => printed?,
    }
    if let Some(writer) = writer {
        writer.close()?;
    }
    Ok(ExitCode::from(exit_status.unwrap_or(0).clamp(0, 255) as u8))
}

/// What `run` follows: a command it starts, or a process already running.
enum Launch {
    Spawn(PathBuf),
    Attach(AttachTarget),
}

/// Starts the command as a tracked child and waits for it, passing on Ctrl-C.
async fn spawn_and_wait(
    capture: &mut Capture<RecordingSink<RunSink>>,
    program_path: &Path,
    command: &[String],
    command_nice: libc::c_int,
    stop_signals: &mut StopSignals,
) -> Result<std::process::ExitStatus> {
    let mut child_command = tokio::process::Command::new(program_path);
    child_command.args(&command[1..]);
    // SAFETY: setpriority is async-signal-safe and touches no memory.
    unsafe {
        child_command.pre_exec(move || {
            libc::setpriority(libc::PRIO_PROCESS, 0, command_nice);
            Ok(())
        });
    }
    // Tracking ourselves for the instant of the fork makes the kernel's
    // fork probe add the child and report it in order with its I/O, so
    // not one of the child's events precedes its tracking.
    let own_pid = std::process::id();
    capture.track_process(own_pid)?;
    let spawned = child_command.spawn();
    capture.untrack_process(own_pid)?;
    let mut child =
        spawned.map_err(|err| Error::failure(format!("cannot start `{}`: {err}", command[0])))?;
    let target = SignalTarget::of(child.id());
    forward_signals_until_exit(&mut child, target, stop_signals).await
}

/// Takes over `target`'s tree while it is stopped: tracks every process,
/// adopts its open fds at their positions, holds the files open for
/// writing, then lets it go. Returns the processes of the tree.
fn attach(capture: &mut Capture<RecordingSink<RunSink>>, target: &AttachTarget) -> Result<u64> {
    let tree = StoppedTree::stop(target.pid)?;
    let taken = (|| {
        for &tgid in &tree.processes {
            capture.track_process(tgid)?;
        }
        let fds: Vec<(u32, Vec<OpenFd>)> = tree
            .processes
            .iter()
            .map(|&tgid| (tgid, run_attach::open_fds(tgid)))
            .collect();
        capture.query(move |sink, _| {
            let sink: &mut RunSink = sink;
            sink.engine
                .track_processes(fds.iter().map(|(tgid, _)| *tgid));
            sink.matcher.processes += fds.len() as u64;
            for (tgid, open) in fds {
                for open_fd in open {
                    sink.matcher
                        .adopt_fd(tgid, open_fd.fd, open_fd.position, open_fd.direct);
                    if open_fd.writable {
                        sink.pin_fd(tgid, open_fd.fd);
                    }
                }
            }
        })
    })();
    tree.resume();
    taken.map(|()| tree.processes.len() as u64)
}

/// Until the attached process exits, or Ctrl-C or SIGTERM to `run` (which
/// are not passed on: the process is not ours).
async fn wait_attached(target: &AttachTarget, signals: &mut StopSignals) -> Result<AttachEnd> {
    let exit = target.exit_fd()?;
    tokio::select! {
        readable = exit.readable() => readable
            .map(|_| AttachEnd::Exited)
            .map_err(|err| Error::failure(format!("waiting for process {} failed: {err}", target.pid))),
        _ = signals.interrupt.recv() => Ok(AttachEnd::Interrupted),
        _ = signals.terminate.recv() => Ok(AttachEnd::Interrupted),
    }
}

/// The signals `run` passes on to its command.
struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

/// Waits for the child; Ctrl-C and SIGTERM are passed on to it, when it
/// has a pid to pass them to.
async fn forward_signals_until_exit(
    child: &mut tokio::process::Child,
    target: Option<SignalTarget>,
    signals: &mut StopSignals,
) -> Result<std::process::ExitStatus> {
    let forward = |signal| {
        if let Some(target) = target {
            target.send(signal);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                return status.map_err(|err| Error::failure(format!("waiting for the command failed: {err}")));
            }
            _ = signals.interrupt.recv() => forward(libc::SIGINT),
            _ = signals.terminate.recv() => forward(libc::SIGTERM),
        }
    }
}

/// The one process a signal for the command goes to. Never 0 or negative,
/// which `kill` reads as our own process group, or as every process we may
/// signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SignalTarget(libc::pid_t);

impl SignalTarget {
    /// The child's pid, while it has one (none once it was reaped).
    fn of(pid: Option<u32>) -> Option<SignalTarget> {
        let pid = libc::pid_t::try_from(pid?).ok()?;
        (pid > 0).then_some(SignalTarget(pid))
    }

    fn send(self, signal: i32) {
        // SAFETY: kill takes no pointers; the pid is positive, so it names
        // one process, our child.
        unsafe { libc::kill(self.0, signal) };
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn run_report(
    sink: &mut RunSink,
    command: &[String],
    exit_status: Option<i32>,
    uring_unsupported: Option<String>,
) -> RunReport {
    let matcher = &mut sink.matcher;
    let program = command
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_default();
    let mut targets = Vec::new();
    for index in 0..matcher.targets().len() {
        let calls = &matcher.targets()[index];
        // The device's own writes: a disk's bios through its partitions are
        // the partitions' (mkfs opens the whole disk, then writes a partition).
        let writes = sink.engine.tracked_writes_on(&calls.target.device);
        let bios = writes.as_ref().map_or(0, |m| m.user_ios);
        if calls.write_syscalls == 0
            && calls.mappings == 0
            && calls.failed_writes.is_empty()
            && (bios == 0 || calls.target.file.is_some())
        {
            // Opened, never written: not a target.
            continue;
        }
        let matched = matcher.match_writes(index);
        let calls = &matcher.targets()[index];
        // A file's bios and commands are those over its bytes, whoever
        // submitted them (writeback too); a device's, all the command's there.
        let (bios, bio_size, commands) = match calls.target.file {
            Some(_) => (
                matched.bios,
                distribution(&matched.bio_size, 1),
                matched.commands,
            ),
            // A stacked device's own "commands" are the pieces it sent
            // down; what reached a device is the disks' commands below it.
            None => (
                bios,
                writes
                    .as_ref()
                    .map(|m| m.user_io_size.clone())
                    .unwrap_or_default(),
                writes.as_ref().map_or(0, |m| match m.disk_commands {
                    0 => m.commands,
                    below => below,
                }),
            ),
        };
        // Passthrough commands carry no bio, so the engine attributes none
        // to the command: its commands are the ones over its writes' sectors.
        let commands = match calls.passthrough_writes {
            0 => commands,
            _ => commands.max(matched.commands),
        };
        let received = match writes.as_ref().map_or(0, |m| m.disk_commands) {
            0 => "the device received",
            _ => "the disks below it received",
        };
        let write_size = calls
            .write_size
            .as_ref()
            .map(|sizes| distribution(sizes, 1))
            .unwrap_or_default();
        let to = match &calls.target.file {
            Some(file) => format!("{} on {}", file.path, calls.target.device),
            None => calls.target.device.clone(),
        };
        // A device's failed commands are the command's own; a file's share
        // its device with other writers, so they stay in io_errors.
        let failed = match (&calls.target.file, &writes) {
            (None, Some(writes)) if writes.failed_commands > 0 => format!(
                ", {} of them failed ({}), and {} bios with them: see io_errors",
                units::thousands(writes.failed_commands),
                crate::explain::statuses(&writes.errors),
                units::thousands(writes.failed_user_ios),
            ),
            _ => String::new(),
        };
        let mapped = (calls.mappings > 0).then_some(RunMapped {
            mappings: calls.mappings,
            msync_calls: calls.msync_calls,
            flushed_bytes: calls.mapped_flushed_bytes,
            written_bytes: matched.bytes.mapped_written,
            not_written_bytes: matched.bytes.mapped_not_written,
        });
        let through_mappings = match &mapped {
            Some(mapped) => format!(
                ", and wrote {} through {} shared mapping{} ({} msync{})",
                units::bytes(mapped.written_bytes as f64),
                units::thousands(mapped.mappings),
                if mapped.mappings == 1 { "" } else { "s" },
                units::thousands(mapped.msync_calls),
                if mapped.msync_calls == 1 { "" } else { "s" },
            ),
            None => String::new(),
        };
        let failed_writes: std::collections::BTreeMap<String, u64> = calls
            .failed_writes
            .iter()
            .map(|(errno, n)| (crate::blk::errno_name(*errno), *n))
            .collect();
        let refused: u64 = failed_writes.values().sum();
        let refused_words = failed_writes
            .iter()
            .map(|(name, n)| format!("{} {name}", units::thousands(*n)))
            .collect::<Vec<_>>()
            .join(", ");
        let summary = match (calls.write_syscalls, bios) {
            // Every write refused at the call, before any I/O (a write the
            // device failed reached it, and is said below as such).
            (0, 0) if refused > 0 => format!(
                "{program}'s {} writes to {to} all failed at the call ({refused_words}): no byte reached the block layer",
                units::thousands(refused),
            ),
            _ => format!(
                "{program} issued {} writes of {} to {to}{}{through_mappings}; {}; {received} {} commands{failed}{}",
                units::thousands(calls.write_syscalls),
                units::bytes(write_size.p50 as f64),
                write_paths(calls.write_syscalls, calls.aio_writes, calls.uring_writes),
                match (calls.passthrough_writes, bios) {
                    (0, _) | (_, 1..) => format!(
                        "they reached the block layer as {} bios of {}",
                        units::thousands(bios),
                        units::bytes(bio_size.p50 as f64)
                    ),
                    (passthrough, 0) => format!(
                        "{} of them were NVMe passthrough commands, which no bio carries",
                        units::thousands(passthrough)
                    ),
                },
                units::thousands(commands),
                match refused {
                    0 => String::new(),
                    _ => format!(
                        "; {} write calls returned an error ({refused_words})",
                        units::thousands(refused)
                    ),
                },
            ),
        };
        let atomic_writes = matched.atomic.to_model();
        let summary = match atomic_writes
            .as_ref()
            .and_then(crate::frontend::words::atomic_writes)
        {
            Some(atomic) => format!("{summary}; {atomic}"),
            None => summary,
        };
        let file = calls
            .target
            .file
            .as_ref()
            .map(|file| run_file(file, calls.file_map.as_ref(), &matched));
        targets.push(RunTarget {
            device: calls.target.device.clone(),
            file,
            write_syscalls: calls.write_syscalls,
            failed_writes,
            direct_writes: calls.direct_writes,
            write_syscall_bytes: calls.write_bytes,
            write_syscall_size: write_size,
            aio_writes: calls.aio_writes,
            aio_write_bytes: calls.aio_write_bytes,
            uring_writes: calls.uring_writes,
            uring_write_bytes: calls.uring_write_bytes,
            passthrough_writes: calls.passthrough_writes,
            fsync_calls: calls.fsync_calls,
            partial_pages: calls.partial_pages,
            bios,
            bio_size,
            commands,
            commands_per_write: distribution(&matched.commands_per_write, 1),
            writes_per_command: distribution(&matched.writes_per_command, 1),
            mapped,
            atomic_writes,
            summary,
        });
    }
    let mut touched = sink.engine.devices_written_by_tracked();
    touched.extend(targets.iter().map(|t: &RunTarget| t.device.clone()));
    let background = sink.engine.other_traffic_on(&touched);
    let files_not_listed = keep_busiest_files(&mut targets, LISTED_FILES);
    // Devices first, as opened; then files, most bytes first.
    targets.sort_by_key(|t| {
        (
            t.file.is_some(),
            std::cmp::Reverse(t.file.as_ref().map_or(0, |_| t.write_syscall_bytes)),
        )
    });
    RunReport {
        time_with_each_fix: Vec::new(),
        command: command.to_vec(),
        exit_status,
        processes: matcher.processes,
        targets,
        files_not_listed,
        background,
        io_submit: (matcher.io_submit.calls > 0).then_some(IoSubmitReport {
            calls: matcher.io_submit.calls,
            iocbs: matcher.io_submit.iocbs,
            iocbs_not_followed: matcher.io_submit.iocbs_not_followed,
        }),
        io_uring: uring_report(&matcher.uring, uring_unsupported),
        command_s: None,
        paused_opens: 0,
        paused_s: 0.0,
        time_with_fix: None,
        attached: None,
    }
}

/// io_uring's section: when the tree submitted write or sync SQEs, or when
/// this kernel's io_uring cannot be followed (said, never a silent 0).
fn uring_report(
    sqes: &crate::engine::run_match::UringSqes,
    unsupported: Option<String>,
) -> Option<UringReport> {
    let any = sqes.writes + sqes.syncs + sqes.fixed_files + sqes.not_followed + sqes.punted > 0;
    let shown = any || unsupported.is_some();
    shown.then_some(UringReport {
        writes: sqes.writes,
        syncs: sqes.syncs,
        sqpoll: sqes.sqpoll,
        punted_to_io_wq: sqes.punted,
        fixed_files_not_followed: sqes.fixed_files,
        not_followed: sqes.not_followed,
        unsupported,
    })
}

/// How the writes were submitted, for the summary: nothing when all were
/// write syscalls (the usual case), else through libaio or io_uring in
/// part or whole.
fn write_paths(writes: u64, aio_writes: u64, uring_writes: u64) -> String {
    let syscalls = writes.saturating_sub(aio_writes + uring_writes);
    let paths: Vec<(u64, &str)> = [
        (syscalls, "write syscalls"),
        (aio_writes, "libaio (io_submit)"),
        (uring_writes, "io_uring"),
    ]
    .into_iter()
    .filter(|(count, _)| *count > 0)
    .collect();
    match paths.as_slice() {
        [] | [(_, "write syscalls")] => String::new(),
        [(_, path)] => format!(" through {path}"),
        _ => format!(
            " ({})",
            paths
                .iter()
                .map(|(count, path)| format!("{} through {path}", units::thousands(*count)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Files listed per run: a build or an archive extraction writes thousands.
const LISTED_FILES: usize = 32;

/// Keeps the `listed` files that wrote most bytes (devices all stay); the
/// rest are summed.
fn keep_busiest_files(targets: &mut Vec<RunTarget>, listed: usize) -> Option<FilesNotListed> {
    let mut file_bytes: Vec<u64> = targets
        .iter()
        .filter(|t| t.file.is_some())
        .map(|t| t.write_syscall_bytes)
        .collect();
    if file_bytes.len() <= listed {
        return None;
    }
    file_bytes.sort_unstable_by(|a, b| b.cmp(a));
    let threshold = file_bytes[listed.saturating_sub(1)];
    // Files above the threshold all stay; ties at it, in order, fill the rest.
    let above = file_bytes
        .iter()
        .filter(|&&bytes| bytes > threshold)
        .count();
    let mut ties = listed.saturating_sub(above);
    let mut rest = FilesNotListed::default();
    targets.retain(|target| {
        if target.file.is_none() || target.write_syscall_bytes > threshold {
            return true;
        }
        if target.write_syscall_bytes == threshold && ties > 0 {
            ties -= 1;
            return true;
        }
        rest.files += 1;
        rest.write_syscalls += target.write_syscalls;
        rest.write_syscall_bytes += target.write_syscall_bytes;
        false
    });
    Some(rest)
}

/// Where a file's written bytes went, for the report.
fn run_file(
    file: &TargetFile,
    map: Option<&std::io::Result<fiemap::FileMap>>,
    matched: &WriteMatch,
) -> RunFile {
    let (extents, unmappable_extents, map_error) = match map {
        Some(Ok(map)) => (
            map.extents.len() as u64,
            map.extents
                .iter()
                .filter(|extent| extent.kind != fiemap::ExtentKind::Mapped)
                .count() as u64,
            map.truncated.then(|| {
                format!(
                    "more than {} extents; the rest were not read",
                    fiemap::MAX_EXTENTS
                )
            }),
        ),
        Some(Err(err)) => (0, 0, Some(err.to_string())),
        None => (0, 0, Some("not read".to_string())),
    };
    let bytes = matched.bytes;
    RunFile {
        path: file.path.clone(),
        inode: file.inode,
        extents,
        unmappable_extents,
        map_error,
        matched_bytes: bytes.matched,
        not_written_back_bytes: bytes.not_written_back + bytes.delalloc,
        delalloc_bytes: bytes.delalloc,
        unmappable_bytes: bytes.unmappable,
        unknown_offset_bytes: bytes.unknown_offset,
        overwritten_bytes: bytes.overwritten,
    }
}

/// Keeps the devices the command touched (or that were named with -d). Its
/// diagnoses are the findings on devices it wrote; the rest on those disks
/// become `other_findings`.
/// The run's report: its section, and only the devices it touched (live, or
/// as recorded, for `analyze`).
pub fn conclude(report: &mut Report, conclusion: RunRecord) {
    let written: BTreeSet<String> = conclusion.written.iter().cloned().collect();
    keep_touched_devices(
        report,
        &conclusion.run,
        &conclusion.tracked_devices,
        &conclusion.named,
        &written,
    );
    report.run = Some(conclusion.run);
    name_lost_atomics(report);
    let (estimate, each) = time_with_fix(report);
    if let Some(run) = report.run.as_mut() {
        run.time_with_fix = estimate;
        run.time_with_each_fix = each;
    }
}

/// A target whose write calls were refused as not supported, on a device
/// that lost its untorn writes: EOPNOTSUPP is what `RWF_ATOMIC` gets there
/// (`generic_atomic_write_valid`), so the finding that says why is named.
fn name_lost_atomics(report: &mut Report) {
    let Some(run) = report.run.as_mut() else {
        return;
    };
    for target in &mut run.targets {
        let refused = target.failed_writes.contains_key("EOPNOTSUPP");
        let untorn = target.atomic_writes.as_ref().is_some_and(|a| a.proven > 0);
        if !refused && (target.direct_writes == 0 || untorn) {
            continue;
        }
        let Some(lost) = report.diagnoses.iter().find(|diagnosis| {
            diagnosis.code == crate::model::Code::AtomicWritesLost
                && diagnosis.device == target.device
        }) else {
            continue;
        };
        let why = if refused {
            "EOPNOTSUPP is what an untorn (RWF_ATOMIC) write gets where the device offers none"
                .to_string()
        } else {
            format!(
                "its {} O_DIRECT writes could not be untorn: statx reports no atomic unit there, so a program that asks falls back to its own protection",
                crate::frontend::units::thousands(target.direct_writes)
            )
        };
        target.summary.push_str(&format!(
            "; {why}, and {} lost them: see atomic_writes_lost ({})",
            target.device, lost.fix
        ));
    }
}

/// The run's time with the fix whose what-if saves the most device time
/// (see [`fix_time::time_with_fix`]), over the command's time, or the
/// trace's when the command's is unknown. `None` when no diagnosis carries
/// a what-if.
fn time_with_fix(report: &Report) -> (Option<RunTimeWithFix>, Vec<RunTimeWithFix>) {
    let run = report.run.as_ref();
    let run_s = run
        .and_then(|run| run.command_s)
        .unwrap_or(report.duration_s);
    let fixes: Vec<ProposedFix<'_>> = report
        .diagnoses
        .iter()
        .filter_map(|diagnosis| {
            Some(ProposedFix {
                code: diagnosis.code,
                device: &diagnosis.device,
                what_if: diagnosis.evidence.what_if()?,
            })
        })
        .collect();
    let targets = run.map_or(&[][..], |run| run.targets.as_slice());
    let each = match fixes.len() {
        0 | 1 => Vec::new(),
        _ => fix_time::time_with_each_fix(run_s, &fixes, targets),
    };
    (fix_time::time_with_fix(run_s, &fixes, targets), each)
}

fn keep_touched_devices(
    report: &mut Report,
    run: &RunReport,
    tracked_devices: &[String],
    named: &[String],
    written: &BTreeSet<String>,
) {
    let mut touched: BTreeSet<&str> = run.targets.iter().map(|t| t.device.as_str()).collect();
    touched.extend(tracked_devices.iter().map(String::as_str));
    let named: BTreeSet<&String> = named.iter().collect();
    report.devices.retain(|device| {
        touched.contains(device.name.as_str())
            || named.contains(&device.dev)
            || device
                .partitions
                .iter()
                .any(|p| touched.contains(p.name.as_str()) || named.contains(&p.dev))
    });
    let kept: BTreeSet<String> = report
        .devices
        .iter()
        .flat_map(|d| {
            std::iter::once(d.name.clone()).chain(d.partitions.iter().map(|p| p.name.clone()))
        })
        .collect();
    let (on_written, elsewhere): (Vec<_>, Vec<_>) = std::mem::take(&mut report.diagnoses)
        .into_iter()
        .filter(|diagnosis| kept.contains(&diagnosis.device))
        .partition(|diagnosis| written.contains(&diagnosis.device));
    report.diagnoses = on_written;
    report.other_findings = elsewhere;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(device: &str, file: Option<&str>, bytes: u64) -> RunTarget {
        RunTarget {
            device: device.to_string(),
            file: file.map(|path| RunFile {
                path: path.to_string(),
                ..RunFile::default()
            }),
            write_syscalls: 1,
            write_syscall_bytes: bytes,
            ..RunTarget::default()
        }
    }

    #[test]
    fn no_pid_signals_nobody() {
        assert_eq!(SignalTarget::of(None), None);
        // kill(0, …) would signal our whole process group.
        assert_eq!(SignalTarget::of(Some(0)), None);
        // As pid_t these are negative: -1 is every process we may signal.
        assert_eq!(SignalTarget::of(Some(u32::MAX)), None);
        assert_eq!(SignalTarget::of(Some(1 << 31)), None);
        assert_eq!(SignalTarget::of(Some(4242)), Some(SignalTarget(4242)));
    }

    /// The estimate is over the command's time, or the trace's without it,
    /// and only diagnoses with a what-if propose a fix.
    #[test]
    fn the_time_with_fix_is_over_the_command_or_else_the_trace() {
        use crate::frontend::test_reports::seed_report;
        let mut report = seed_report();
        assert_eq!(time_with_fix(&report).0, None);
        report.diagnoses[1]
            .evidence
            .set_what_if(crate::model::WhatIf {
                commands_now: 800,
                commands_after_fix: 100,
                ..Default::default()
            });
        let estimate = time_with_fix(&report).0.unwrap();
        assert_eq!(estimate.code, report.diagnoses[1].code.to_string());
        assert_eq!(estimate.device, report.diagnoses[1].device);
        assert_eq!(estimate.run_s, report.duration_s);
        report.run = Some(RunReport {
            command_s: Some(3.5),
            ..RunReport::default()
        });
        assert_eq!(time_with_fix(&report).0.unwrap().run_s, 3.5);
    }

    #[test]
    fn the_summary_says_how_writes_were_submitted() {
        assert_eq!(write_paths(5, 0, 0), "");
        assert_eq!(write_paths(256, 256, 0), " through libaio (io_submit)");
        assert_eq!(
            write_paths(1001, 1000, 0),
            " (1 through write syscalls, 1,000 through libaio (io_submit))"
        );
        assert_eq!(write_paths(256, 0, 256), " through io_uring");
        assert_eq!(
            write_paths(12, 2, 8),
            " (2 through write syscalls, 2 through libaio (io_submit), 8 through io_uring)"
        );
    }

    #[test]
    fn the_files_that_wrote_most_are_listed_devices_always() {
        let mut targets = vec![
            target("vda", Some("/a"), 5),
            target("vda", Some("/b"), 5),
            target("loop0p1", None, 1),
            target("vda", Some("/c"), 9),
            target("vda", Some("/d"), 1),
        ];
        let rest = keep_busiest_files(&mut targets, 2);
        let kept: Vec<(&str, u64)> = targets
            .iter()
            .map(|t| (t.device.as_str(), t.write_syscall_bytes))
            .collect();
        assert_eq!(kept, [("vda", 5), ("loop0p1", 1), ("vda", 9)]);
        assert_eq!(
            rest,
            Some(FilesNotListed {
                files: 2,
                write_syscalls: 2,
                write_syscall_bytes: 6
            })
        );
        assert_eq!(keep_busiest_files(&mut targets, 2), None);
    }
}
