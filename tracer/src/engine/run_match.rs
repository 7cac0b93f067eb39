//! `run`'s correlation beside the engine: the command's write syscalls, the
//! block devices they went to, and the device commands issued, so each write
//! can be matched by sector range to the commands that carried it.
//!
//! Pure: files are named through the injected [`FdResolver`] (the /proc-based
//! one lives in `frontend::run`), so it is unit-tested with a fake.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use tracer_common::{
    BlockEvent, EventKind, OpenEvent, ProcessEvent, ProcessEventKind, UNKNOWN_OFFSET,
};

use super::stats::{self, new_histogram as histogram, OpStats, OP_COUNT};
use crate::geometry::DevId;
use crate::model::{Measures, Op, OpMeasures};

/// A block device a file descriptor pointed at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdTarget {
    /// Kernel name, e.g. "loop0p2".
    pub device: String,
    /// The whole disk, whose absolute sectors the commands carry.
    pub disk_dev: DevId,
    /// Partition start (0 for a whole disk), in sectors.
    pub start_sector: u64,
}

/// Finds which block device a file is; `None` for anything else.
pub trait FdResolver: Send {
    /// A path the process opened (relative paths are from its cwd).
    fn resolve_path(&mut self, tgid: u32, path: &str) -> Option<FdTarget>;
    /// An fd whose open was not seen (inherited from before tracking).
    fn resolve_fd(&mut self, tgid: u32, fd: u32) -> Option<FdTarget>;
}

/// Caps so a long run cannot grow memory without bound (dropped ones are counted).
pub const MAX_WRITES: usize = 1 << 21;
pub const MAX_COMMANDS: usize = 1 << 21;
/// How far back a requeued command is looked for among the recorded ones.
const REQUEUE_LOOKBACK: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct WriteCall {
    target: usize,
    /// Byte offset within the target, when the syscall carried one.
    offset: Option<u64>,
    bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct IssuedCommand {
    disk: u32,
    sector: u64,
    nr_sector: u32,
}

/// Per target: the syscalls the command made to it.
pub struct TargetCalls {
    pub target: FdTarget,
    pub write_syscalls: u64,
    pub write_bytes: u64,
    pub write_size: Histogram<u64>,
    pub fsync_calls: u64,
    /// Writes whose offset was unknown (plain write/writev), not matchable.
    pub unmatched_writes: u64,
}

/// Matching of writes to the device commands covering their sectors.
pub struct WriteMatch {
    pub commands_per_write: Histogram<u64>,
    pub writes_per_command: Histogram<u64>,
}

pub struct RunRecorder<R: FdResolver> {
    resolver: R,
    fds: HashMap<(u32, u32), Option<usize>>,
    targets: Vec<TargetCalls>,
    writes: Vec<WriteCall>,
    commands: Vec<IssuedCommand>,
    /// Processes (and threads) the command's tree forked, itself included.
    pub processes: u64,
    pub writes_not_kept: u64,
    pub commands_not_kept: u64,
    pub failed_syscalls: u64,
}

impl<R: FdResolver> RunRecorder<R> {
    pub fn new(resolver: R) -> Self {
        RunRecorder {
            resolver,
            fds: HashMap::new(),
            targets: Vec::new(),
            writes: Vec::new(),
            commands: Vec::new(),
            processes: 0,
            writes_not_kept: 0,
            commands_not_kept: 0,
            failed_syscalls: 0,
        }
    }

    fn target_of(&mut self, tgid: u32, fd: u32) -> Option<usize> {
        if let Some(known) = self.fds.get(&(tgid, fd)) {
            return *known;
        }
        let found = self.resolver.resolve_fd(tgid, fd);
        let found = self.intern(found);
        self.fds.insert((tgid, fd), found);
        found
    }

    fn intern(&mut self, target: Option<FdTarget>) -> Option<usize> {
        target.map(
            |target| match self.targets.iter().position(|t| t.target == target) {
                Some(index) => index,
                None => {
                    self.targets.push(TargetCalls {
                        target,
                        write_syscalls: 0,
                        write_bytes: 0,
                        write_size: histogram(),
                        fsync_calls: 0,
                        unmatched_writes: 0,
                    });
                    self.targets.len() - 1
                }
            },
        )
    }

    /// A successful open: from now on this fd is (or is not) that device.
    pub fn open_event(&mut self, open: &OpenEvent) {
        let event = &open.event;
        if event.result < 0 {
            return;
        }
        let end = open
            .path
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(open.path.len());
        let Ok(path) = std::str::from_utf8(&open.path[..end]) else {
            return;
        };
        let target = self.resolver.resolve_path(event.tgid, path);
        let found = self.intern(target);
        self.fds.insert((event.tgid, event.result as u32), found);
    }

    pub fn process_event(&mut self, event: &ProcessEvent) {
        let Some(kind) = ProcessEventKind::from_u8(event.kind) else {
            return;
        };
        if kind == ProcessEventKind::Fork {
            self.processes += 1;
            // The child starts with a copy of its parent's descriptors.
            let (child, parent) = (event.tgid, event.fd);
            let inherited: Vec<(u32, Option<usize>)> = self
                .fds
                .iter()
                .filter(|((tgid, _), _)| *tgid == parent)
                .map(|((_, fd), target)| (*fd, *target))
                .collect();
            for (fd, target) in inherited {
                self.fds.insert((child, fd), target);
            }
            return;
        }
        if kind == ProcessEventKind::Close {
            // Even a failed close releases the fd; its number may come back as
            // anything (a pipe, another device), so it is resolved afresh.
            self.fds.remove(&(event.tgid, event.fd));
            return;
        }
        if kind.is_dup() {
            // The new fd is the same open file as the source, whatever it
            // was before: dd reaches its output through fd 1 this way, and
            // may be gone before /proc could be asked what fd 1 is.
            if event.result >= 0 {
                let target = self.target_of(event.tgid, event.fd);
                self.fds.insert((event.tgid, event.result as u32), target);
            }
            return;
        }
        if event.result < 0 {
            self.failed_syscalls += 1;
            return;
        }
        let Some(target) = self.target_of(event.tgid, event.fd) else {
            return;
        };
        let calls = &mut self.targets[target];
        if !kind.is_write() {
            calls.fsync_calls += 1;
            return;
        }
        let bytes = event.result as u64;
        calls.write_syscalls += 1;
        calls.write_bytes += bytes;
        let _ = calls.write_size.record(bytes.max(1));
        let offset = (event.offset != UNKNOWN_OFFSET).then_some(event.offset);
        if offset.is_none() {
            calls.unmatched_writes += 1;
        }
        if self.writes.len() < MAX_WRITES {
            self.writes.push(WriteCall {
                target,
                offset,
                bytes,
            });
        } else {
            self.writes_not_kept += 1;
        }
    }

    /// Records device write commands (block_rq_issue, and bio completions on bio-based devices).
    pub fn block_event(&mut self, event: &BlockEvent) {
        if !is_write(&event.rwbs) {
            return;
        }
        if event.kind == EventKind::Requeue as u8 {
            // Its re-issue will be recorded again: one command, not two. A
            // partly completed command is requeued with its remaining range.
            // It was issued at most a queue depth of commands ago.
            let end = event.sector.saturating_add(u64::from(event.nr_sector));
            let recent = self.commands.len().saturating_sub(REQUEUE_LOOKBACK);
            let issued = self.commands[recent..].iter().rposition(|command| {
                command.disk == event.dev
                    && command.sector <= event.sector
                    && command.sector.saturating_add(u64::from(command.nr_sector)) == end
            });
            if let Some(index) = issued {
                self.commands.remove(recent + index);
            }
            return;
        }
        if event.kind != EventKind::Issue as u8 {
            return;
        }
        if self.commands.len() < MAX_COMMANDS {
            self.commands.push(IssuedCommand {
                disk: event.dev,
                sector: event.sector,
                nr_sector: event.nr_sector,
            });
        } else {
            self.commands_not_kept += 1;
        }
    }

    pub fn targets(&self) -> &[TargetCalls] {
        &self.targets
    }

    /// For one target: commands per write and writes per command, matched by
    /// absolute sector range (only writes with a known offset).
    pub fn match_writes(&self, target: usize) -> WriteMatch {
        let mut result = WriteMatch {
            commands_per_write: histogram(),
            writes_per_command: histogram(),
        };
        let Some(calls) = self.targets.get(target) else {
            return result;
        };
        let disk = calls.target.disk_dev.to_kernel();
        let mut commands: Vec<IssuedCommand> = self
            .commands
            .iter()
            .copied()
            .filter(|c| c.disk == disk)
            .collect();
        commands.sort();
        let mut writes_on_command = vec![0u64; commands.len()];
        // Commands never exceed this length, so a search window of it is complete.
        let longest = commands
            .iter()
            .map(|c| u64::from(c.nr_sector))
            .max()
            .unwrap_or(0);
        for write in self.writes.iter().filter(|w| w.target == target) {
            let Some(offset) = write.offset else { continue };
            if write.bytes == 0 {
                continue;
            }
            let first = calls.target.start_sector + offset / 512;
            let end = calls.target.start_sector + (offset + write.bytes).div_ceil(512);
            let lower = first.saturating_sub(longest);
            let from = commands.partition_point(|c| c.sector < lower);
            let mut carried = 0;
            for (index, command) in commands.iter().enumerate().skip(from) {
                if command.sector >= end {
                    break;
                }
                if command.sector + u64::from(command.nr_sector) > first {
                    carried += 1;
                    writes_on_command[index] += 1;
                }
            }
            let _ = result.commands_per_write.record(carried);
        }
        for count in writes_on_command.into_iter().filter(|&n| n > 0) {
            let _ = result.writes_per_command.record(count);
        }
        result
    }
}

impl super::Engine {
    /// Writes the tracked processes queued on `device` itself (a partition's
    /// own, or a whole disk's not through a partition), as measures.
    pub fn tracked_writes_on(&self, device: &str) -> Option<OpMeasures> {
        let stats = self.devices.iter().find_map(|disk| {
            if disk.name == device {
                return Some(&disk.whole);
            }
            disk.parts
                .iter()
                .find(|part| part.name == device)
                .map(|part| &part.stats)
        })?;
        stats
            .get(true, Op::Write)
            .filter(|writes| writes.user_ios > 0)
            .map(OpStats::to_model)
    }

    /// Other tasks' traffic on `devices` (a named disk with its partitions,
    /// or a named partition alone), summed per op.
    pub fn other_traffic_on(&self, devices: &[String]) -> Measures {
        let named = |name: &str| devices.iter().any(|device| device == name);
        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
        for disk in &self.devices {
            let whole_disk = named(&disk.name);
            if whole_disk {
                disk.whole.collect_into(&[false], &mut per_op);
            }
            for part in disk
                .parts
                .iter()
                .filter(|part| whole_disk || named(&part.name))
            {
                part.stats.collect_into(&[false], &mut per_op);
            }
        }
        stats::measures(&per_op)
    }

    /// Disks (their own traffic) and partitions the tracked processes wrote.
    pub fn devices_written_by_tracked(&self) -> Vec<String> {
        let mut written = Vec::new();
        for disk in &self.devices {
            if self.tracked_writes_on(&disk.name).is_some() {
                written.push(disk.name.clone());
            }
            for part in &disk.parts {
                if part
                    .stats
                    .get(true, Op::Write)
                    .is_some_and(|w| w.user_ios > 0)
                {
                    written.push(part.name.clone());
                }
            }
        }
        written
    }
}

/// True for a write command: the op letter after an optional preflush `F`.
fn is_write(rwbs: &[u8; 8]) -> bool {
    let op = match rwbs {
        [b'F', next, ..] if *next != 0 => *next,
        [first, ..] => *first,
    };
    op == b'W'
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnePartition;

    fn loop0p2() -> FdTarget {
        FdTarget {
            device: "loop0p2".into(),
            disk_dev: DevId::new(7, 0),
            start_sector: 1000,
        }
    }

    impl FdResolver for OnePartition {
        fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<FdTarget> {
            (path == "/dev/loop0p2").then(loop0p2)
        }

        fn resolve_fd(&mut self, _tgid: u32, fd: u32) -> Option<FdTarget> {
            (fd == 3).then(loop0p2)
        }
    }

    fn write(fd: u32, offset: u64, bytes: i64) -> ProcessEvent {
        ProcessEvent {
            ts_ns: 1,
            offset,
            result: bytes,
            tgid: 42,
            fd,
            kind: ProcessEventKind::Pwrite64 as u8,
            _pad: [0; 7],
        }
    }

    fn issue(sector: u64, nr_sector: u32) -> BlockEvent {
        BlockEvent {
            kind: EventKind::Issue as u8,
            dev: DevId::new(7, 0).to_kernel(),
            sector,
            nr_sector,
            rwbs: *b"WS\0\0\0\0\0\0",
            ..BlockEvent::ZERO
        }
    }

    #[test]
    fn each_32k_write_split_into_512b_commands_is_counted_both_ways() {
        let mut recorder = RunRecorder::new(OnePartition);
        // Two 32 KiB writes at partition offsets 0 and 32 KiB.
        recorder.process_event(&write(3, 0, 32768));
        recorder.process_event(&write(3, 32768, 32768));
        // Device saw one-sector commands for the first write, one 64-sector command for the second.
        for sector in 1000..1064 {
            recorder.block_event(&issue(sector, 1));
        }
        recorder.block_event(&issue(1064, 64));
        let calls = &recorder.targets()[0];
        assert_eq!((calls.write_syscalls, calls.write_bytes), (2, 65536));
        let matched = recorder.match_writes(0);
        assert_eq!(matched.commands_per_write.len(), 2);
        assert_eq!(matched.commands_per_write.max(), 64);
        assert_eq!(matched.commands_per_write.min(), 1);
        assert_eq!(matched.writes_per_command.len(), 65);
        assert_eq!(matched.writes_per_command.max(), 1);
    }

    #[test]
    fn a_merged_command_carries_several_writes() {
        let mut recorder = RunRecorder::new(OnePartition);
        for n in 0..4 {
            recorder.process_event(&write(3, n * 4096, 4096));
        }
        recorder.block_event(&issue(1000, 32));
        let matched = recorder.match_writes(0);
        assert_eq!(matched.writes_per_command.max(), 4);
        assert_eq!(matched.commands_per_write.max(), 1);
    }

    #[test]
    fn other_files_reads_failures_and_unknown_offsets_are_kept_apart() {
        let mut recorder = RunRecorder::new(OnePartition);
        recorder.process_event(&write(9, 0, 100)); // not a block device
        recorder.process_event(&write(3, 0, -5)); // EIO
        let mut plain = write(3, UNKNOWN_OFFSET, 512);
        plain.kind = ProcessEventKind::Write as u8;
        recorder.process_event(&plain);
        let mut read_command = issue(1000, 1);
        read_command.rwbs = *b"R\0\0\0\0\0\0\0";
        recorder.block_event(&read_command);
        assert_eq!(recorder.failed_syscalls, 1);
        let calls = &recorder.targets()[0];
        assert_eq!((calls.write_syscalls, calls.unmatched_writes), (1, 1));
        let matched = recorder.match_writes(0);
        assert_eq!(
            matched.commands_per_write.len(),
            0,
            "unknown offsets are not matched"
        );
        assert_eq!(
            matched.writes_per_command.len(),
            0,
            "reads are not write commands"
        );
    }

    fn open(tgid: u32, fd: i64, path: &str) -> OpenEvent {
        let mut event = OpenEvent {
            event: ProcessEvent {
                result: fd,
                tgid,
                kind: ProcessEventKind::Openat as u8,
                ..ProcessEvent::ZERO
            },
            path: [0; tracer_common::PATH_BYTES],
        };
        event.path[..path.len()].copy_from_slice(path.as_bytes());
        event
    }

    #[test]
    fn opens_name_fds_and_forks_inherit_them() {
        let mut recorder = RunRecorder::new(OnePartition);
        // fd 5 opened as the partition; fd 3 reopened as a regular file.
        recorder.open_event(&open(42, 5, "/dev/loop0p2"));
        recorder.open_event(&open(42, 3, "/tmp/log"));
        recorder.process_event(&write(5, 0, 4096));
        recorder.process_event(&write(3, 0, 4096));
        let fork = ProcessEvent {
            tgid: 43,
            fd: 42,
            kind: ProcessEventKind::Fork as u8,
            ..ProcessEvent::ZERO
        };
        recorder.process_event(&fork);
        let mut child_write = write(5, 4096, 4096);
        child_write.tgid = 43;
        recorder.process_event(&child_write);
        let calls = &recorder.targets()[0];
        assert_eq!(recorder.targets().len(), 1);
        assert_eq!(
            calls.write_syscalls, 2,
            "the parent's and the child's writes to fd 5"
        );
        assert_eq!(recorder.processes, 1);
    }

    /// A process that has exited: /proc knows none of its fds any more.
    struct Exited {
        fd_lookups: u32,
    }

    impl FdResolver for Exited {
        fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<FdTarget> {
            (path == "/dev/loop0p2").then(loop0p2)
        }

        fn resolve_fd(&mut self, _tgid: u32, _fd: u32) -> Option<FdTarget> {
            self.fd_lookups += 1;
            None
        }
    }

    fn fd_call(kind: ProcessEventKind, fd: u32, result: i64) -> ProcessEvent {
        ProcessEvent {
            tgid: 42,
            fd,
            result,
            kind: kind as u8,
            ..ProcessEvent::ZERO
        }
    }

    fn plain_write(fd: u32) -> ProcessEvent {
        ProcessEvent {
            offset: UNKNOWN_OFFSET,
            kind: ProcessEventKind::Write as u8,
            ..write(fd, 0, 65536)
        }
    }

    #[test]
    fn dd_writes_through_the_fd_it_dup2ed_its_output_to() {
        let mut recorder = RunRecorder::new(Exited { fd_lookups: 0 });
        // What coreutils dd does with of=: open as 3, dup2 onto 1, close 3.
        recorder.open_event(&open(42, 3, "/dev/loop0p2"));
        recorder.process_event(&fd_call(ProcessEventKind::Dup2, 3, 1));
        recorder.process_event(&fd_call(ProcessEventKind::Close, 3, 0));
        for _ in 0..32 {
            recorder.process_event(&plain_write(1));
        }
        // fd 3 is closed: a write there is not the device's.
        recorder.process_event(&plain_write(3));
        assert_eq!(recorder.targets().len(), 1);
        let calls = &recorder.targets()[0];
        assert_eq!(calls.target, loop0p2());
        assert_eq!((calls.write_syscalls, calls.write_bytes), (32, 32 * 65536));
        assert_eq!(
            recorder.resolver.fd_lookups, 1,
            "only the closed fd 3 was looked up, not fd 1"
        );
    }

    #[test]
    fn a_closed_fd_number_reused_for_another_file_is_not_the_device() {
        let mut recorder = RunRecorder::new(Exited { fd_lookups: 0 });
        recorder.open_event(&open(42, 5, "/dev/loop0p2"));
        recorder.process_event(&write(5, 0, 4096));
        recorder.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        recorder.open_event(&open(42, 5, "/tmp/log"));
        recorder.process_event(&write(5, 0, 4096));
        // Closed again and reused by something not opened (a pipe): asked afresh.
        recorder.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        recorder.process_event(&write(5, 0, 4096));
        assert_eq!(recorder.targets()[0].write_syscalls, 1);
        assert_eq!(recorder.resolver.fd_lookups, 1);
        // dup2 onto an fd that was the device makes it the new file instead.
        recorder.open_event(&open(42, 6, "/dev/loop0p2"));
        recorder.open_event(&open(42, 7, "/tmp/log"));
        recorder.process_event(&fd_call(ProcessEventKind::Dup2, 7, 6));
        recorder.process_event(&write(6, 0, 4096));
        assert_eq!(recorder.targets()[0].write_syscalls, 1);
    }

    #[test]
    fn dup_dup3_and_fcntl_dupfd_copy_the_target_and_forks_inherit_it() {
        let mut recorder = RunRecorder::new(Exited { fd_lookups: 0 });
        recorder.open_event(&open(42, 3, "/dev/loop0p2"));
        recorder.process_event(&fd_call(ProcessEventKind::Dup, 3, 7));
        recorder.process_event(&fd_call(ProcessEventKind::Dup3, 7, 8));
        recorder.process_event(&fd_call(ProcessEventKind::Fcntl, 8, 10));
        // A failed dup (EBADF) maps nothing and is not a failed write.
        recorder.process_event(&fd_call(ProcessEventKind::Dup, 30, -9));
        recorder.process_event(&fd_call(ProcessEventKind::Close, 3, 0));
        recorder.process_event(&ProcessEvent {
            tgid: 43,
            fd: 42,
            kind: ProcessEventKind::Fork as u8,
            ..ProcessEvent::ZERO
        });
        for fd in [7, 8, 10] {
            recorder.process_event(&write(fd, 0, 512));
        }
        recorder.process_event(&ProcessEvent {
            tgid: 43,
            ..write(10, 512, 512)
        });
        assert_eq!(recorder.targets()[0].write_syscalls, 4);
        assert_eq!(recorder.failed_syscalls, 0);
        assert_eq!(recorder.resolver.fd_lookups, 0);
    }

    #[test]
    fn a_requeued_command_is_matched_once() {
        let mut recorder = RunRecorder::new(OnePartition);
        recorder.process_event(&write(3, 0, 1 << 20));
        // A 2048-sector write split 2032 + 16; the tail requeued, then issued again.
        recorder.block_event(&issue(1000, 2032));
        recorder.block_event(&issue(3032, 16));
        recorder.block_event(&BlockEvent {
            kind: EventKind::Requeue as u8,
            ..issue(3032, 16)
        });
        recorder.block_event(&issue(3032, 16));
        let matched = recorder.match_writes(0);
        assert_eq!(matched.commands_per_write.max(), 2);
        assert_eq!(matched.writes_per_command.len(), 2);
    }

    #[test]
    fn background_is_other_tasks_traffic_on_the_devices_named() {
        use crate::engine::{Engine, EngineLimits};
        use crate::geometry::{DiskGeometry, PartitionGeometry};
        let part = DevId::new(259, 1);
        let disk = DiskGeometry {
            name: "loop0".into(),
            dev: Some(DevId::new(7, 0)),
            request_based: true,
            partitions: vec![PartitionGeometry {
                name: "loop0p2".into(),
                dev: Some(part),
                start: 1000,
                size: 1000,
                ..PartitionGeometry::default()
            }],
            ..DiskGeometry::default()
        };
        let mut engine = Engine::new(vec![disk], EngineLimits::default());
        engine.track_processes([42]);
        // Through the partition: one write by the command (42), two by others.
        for (n, tgid) in [(0u64, 42u32), (8, 7), (16, 7)] {
            let remap = BlockEvent {
                kind: EventKind::Remap as u8,
                dev: DevId::new(7, 0).to_kernel(),
                sector: 1000 + n,
                nr_sector: 8,
                aux_dev: part.to_kernel(),
                aux_sector: n,
                tgid,
                rwbs: *b"W\0\0\0\0\0\0\0",
                ..BlockEvent::ZERO
            };
            engine.ingest(&remap);
            engine.ingest(&BlockEvent {
                kind: EventKind::Queue as u8,
                ..remap
            });
        }
        // Straight to the disk by another task.
        engine.ingest(&BlockEvent {
            kind: EventKind::Queue as u8,
            dev: DevId::new(7, 0).to_kernel(),
            sector: 0,
            nr_sector: 8,
            tgid: 7,
            rwbs: *b"W\0\0\0\0\0\0\0",
            ..BlockEvent::ZERO
        });
        let on_part = engine.other_traffic_on(&["loop0p2".to_string()]);
        assert_eq!(on_part.op(Op::Write).map(|w| w.user_ios), Some(2));
        let on_disk = engine.other_traffic_on(&["loop0".to_string()]);
        assert_eq!(on_disk.op(Op::Write).map(|w| w.user_ios), Some(3));
        assert_eq!(
            engine.devices_written_by_tracked(),
            vec!["loop0p2".to_string()]
        );
        assert_eq!(engine.tracked_writes_on("loop0").map(|w| w.user_ios), None);
    }

    #[test]
    fn preflush_write_counts_as_write() {
        assert!(is_write(b"FWS\0\0\0\0\0"));
        assert!(is_write(b"WFS\0\0\0\0\0"));
        assert!(!is_write(b"F\0\0\0\0\0\0\0"));
        assert!(!is_write(b"RA\0\0\0\0\0\0"));
    }
}
