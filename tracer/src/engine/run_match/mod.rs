//! `run`'s correlation beside the engine: the command's write syscalls, the
//! block devices they went to, and the device commands issued, so each write
//! can be matched by sector range to the commands that carried it.
//!
//! Regular files on a block device are targets too: their writes' file
//! offsets become device bytes through the file's extent map, which the
//! frontend reads (FIEMAP) after the command and hands in with
//! [`RunMatcher::set_file_map`].
//!
//! Pure: files are named through the injected [`FdResolver`] (the /proc-based
//! one lives in `frontend::run`), so it is unit-tested with a fake.
//!
//! Where things live:
//! - `sector_match`: the writes, commands and bios kept, and their matching.
//! - `block_events`: the one place block events come in.
//! - `engine_totals`: what the engine itself counted on the devices `run` touched.

mod block_events;
mod engine_totals;
mod sector_match;
#[cfg(test)]
mod test_fixtures;

use std::collections::{HashMap, HashSet};

use hdrhistogram::Histogram;
use tracer_common::{
    OpenEvent, ProcessEvent, ProcessEventKind, CLOSE_RANGE_CLOEXEC, O_APPEND, O_CLOEXEC,
    UNKNOWN_OFFSET,
};

use super::stats::new_histogram;
use crate::geometry::fiemap::FileMap;
use crate::geometry::DevId;
use sector_match::SectorMatcher;

pub use sector_match::{WriteBytes, WriteMatch};

/// A block device a file descriptor pointed at, or a regular file on one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FdTarget {
    /// Kernel name, e.g. "loop0p2" (for a file, its filesystem's device).
    pub device: String,
    /// The whole disk, whose absolute sectors the commands carry.
    pub disk_dev: DevId,
    /// Partition start (0 for a whole disk), in sectors.
    pub start_sector: u64,
    /// Set when the target is a regular file on `device`.
    pub file: Option<TargetFile>,
}

/// A regular file, by the path it was opened as and its inode.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetFile {
    pub path: String,
    pub inode: u64,
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
pub const MAX_BIOS: usize = 1 << 21;
/// Open file descriptions whose position is followed.
const MAX_DESCRIPTIONS: usize = 1 << 20;

/// A write syscall placed on its target: the hand-over to `sector_match`.
#[derive(Clone, Copy, Debug)]
struct WriteCall {
    /// Index into [`RunMatcher::targets`].
    target: usize,
    /// Byte offset within the target, when the syscall carried one or the
    /// file position was followed.
    offset: Option<u64>,
    bytes: u64,
}

/// What the caps dropped: writes, commands and bios not kept for matching.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotKept {
    pub writes: u64,
    pub commands: u64,
    pub bios: u64,
}

/// Per target: the syscalls the command made to it.
pub struct TargetCalls {
    pub target: FdTarget,
    pub write_syscalls: u64,
    pub write_bytes: u64,
    /// Made at the first write: most files a command opens are only read.
    pub write_size: Option<Histogram<u64>>,
    pub fsync_calls: u64,
    /// Writes whose offset was unknown (plain write/writev), not matchable.
    pub unknown_offset_writes: u64,
    /// A file's extent map, or why it could not be read.
    pub file_map: Option<Result<FileMap, String>>,
}

/// An fd of the traced tree that is a target: which one, and the open file
/// description it shares with its dups and its forks' copies.
#[derive(Clone, Copy, Debug)]
struct OpenTarget {
    target: usize,
    /// Index into the followed positions (files only, opens seen only).
    description: Option<usize>,
}

/// Follows the traced tree's write syscalls to their targets, keeps the
/// device's write commands and bios, and matches the two by sector range.
/// In memory only: nothing here is written to a recording.
pub struct RunMatcher<R: FdResolver> {
    resolver: R,
    fds: HashMap<(u32, u32), Option<OpenTarget>>,
    /// The fds an exec closes (opened O_CLOEXEC, or marked by close_range).
    close_on_exec: HashSet<(u32, u32)>,
    /// Per open file description: its file position. A file opened while
    /// traced starts at 0, plain write()s advance it and lseek sets it; an
    /// O_APPEND open has none (its writes land at the end, unseen here).
    positions: Vec<u64>,
    targets: Vec<TargetCalls>,
    /// Where each target is in `targets` (a build opens thousands of files).
    target_index: HashMap<FdTarget, usize>,
    /// The writes, commands and bios kept for matching.
    sectors: SectorMatcher,
    /// Processes (and threads) the command's tree forked, itself included.
    pub processes: u64,
    /// Writes and syncs that failed, on any fd.
    pub failed_syscalls: u64,
}

impl<R: FdResolver> RunMatcher<R> {
    pub fn new(resolver: R) -> Self {
        RunMatcher {
            resolver,
            fds: HashMap::new(),
            close_on_exec: HashSet::new(),
            positions: Vec::new(),
            targets: Vec::new(),
            target_index: HashMap::new(),
            sectors: SectorMatcher::default(),
            processes: 0,
            failed_syscalls: 0,
        }
    }

    fn target_of(&mut self, tgid: u32, fd: u32) -> Option<OpenTarget> {
        if let Some(known) = self.fds.get(&(tgid, fd)) {
            return *known;
        }
        // Opened before tracking: its position is not known.
        let found = self.resolver.resolve_fd(tgid, fd);
        let found = self.intern(found).map(|target| OpenTarget {
            target,
            description: None,
        });
        self.fds.insert((tgid, fd), found);
        found
    }

    fn intern(&mut self, target: Option<FdTarget>) -> Option<usize> {
        let target = target?;
        if let Some(&index) = self.target_index.get(&target) {
            return Some(index);
        }
        let index = self.targets.len();
        self.target_index.insert(target.clone(), index);
        self.targets.push(TargetCalls {
            target,
            write_syscalls: 0,
            write_bytes: 0,
            write_size: None,
            fsync_calls: 0,
            unknown_offset_writes: 0,
            file_map: None,
        });
        Some(index)
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
        // O_APPEND writes land at the file's end, a position not seen here:
        // their offsets stay unknown rather than guessed.
        let appends = event.offset & O_APPEND != 0;
        let found = self.intern(target).map(|target| OpenTarget {
            target,
            description: (!appends).then(|| self.new_description(target)).flatten(),
        });
        let fd = (event.tgid, event.result as u32);
        self.fds.insert(fd, found);
        if event.offset & O_CLOEXEC != 0 {
            self.close_on_exec.insert(fd);
        } else {
            self.close_on_exec.remove(&fd);
        }
    }

    /// `fd` is closed: its number may come back as anything, resolved afresh.
    fn forget_fd(&mut self, fd: (u32, u32)) {
        self.fds.remove(&fd);
        self.close_on_exec.remove(&fd);
    }

    /// close_range(first, last, flags), `range` packing `flags << 32 | last`.
    fn close_range(&mut self, tgid: u32, first: u32, range: u64) {
        let last = (range & 0xffff_ffff) as u32;
        let in_range = |&(owner, fd): &(u32, u32)| owner == tgid && (first..=last).contains(&fd);
        let fds: Vec<(u32, u32)> = self.fds.keys().copied().filter(in_range).collect();
        for fd in fds {
            if (range >> 32) & CLOSE_RANGE_CLOEXEC != 0 {
                self.close_on_exec.insert(fd);
            } else {
                self.forget_fd(fd);
            }
        }
    }

    /// A fresh open of a file: its position starts at 0.
    fn new_description(&mut self, target: usize) -> Option<usize> {
        if self.targets[target].target.file.is_none() || self.positions.len() >= MAX_DESCRIPTIONS {
            return None;
        }
        self.positions.push(0);
        Some(self.positions.len() - 1)
    }

    pub fn process_event(&mut self, event: &ProcessEvent) {
        let Some(kind) = ProcessEventKind::from_u8(event.kind) else {
            return;
        };
        if kind == ProcessEventKind::Fork {
            self.processes += 1;
            // The child starts with a copy of its parent's descriptors.
            let (child, parent) = (event.tgid, event.fd);
            let inherited: Vec<(u32, Option<OpenTarget>)> = self
                .fds
                .iter()
                .filter(|((tgid, _), _)| *tgid == parent)
                .map(|((_, fd), target)| (*fd, *target))
                .collect();
            for (fd, target) in inherited {
                self.fds.insert((child, fd), target);
                if self.close_on_exec.contains(&(parent, fd)) {
                    self.close_on_exec.insert((child, fd));
                }
            }
            return;
        }
        if kind == ProcessEventKind::Close {
            // Even a failed close releases the fd; its number may come back as
            // anything (a pipe, another device), so it is resolved afresh.
            self.forget_fd((event.tgid, event.fd));
            return;
        }
        if kind == ProcessEventKind::Exec {
            let closed: Vec<(u32, u32)> = self
                .close_on_exec
                .iter()
                .filter(|(tgid, _)| *tgid == event.tgid)
                .copied()
                .collect();
            for fd in closed {
                self.forget_fd(fd);
            }
            return;
        }
        if kind == ProcessEventKind::CloseRange {
            if event.result == 0 {
                self.close_range(event.tgid, event.fd, event.offset);
            }
            return;
        }
        if kind.is_dup() {
            // The new fd is the same open file as the source, whatever it
            // was before: dd reaches its output through fd 1 this way, and
            // may be gone before /proc could be asked what fd 1 is. (A dup
            // is not close-on-exec, unless dup3 or F_DUPFD_CLOEXEC made it
            // so: not told here, so it is kept across an exec.)
            if event.result >= 0 {
                let target = self.target_of(event.tgid, event.fd);
                let fd = (event.tgid, event.result as u32);
                self.fds.insert(fd, target);
                self.close_on_exec.remove(&fd);
            }
            return;
        }
        if kind == ProcessEventKind::Lseek {
            // The new position, from the kernel's answer (whatever `whence` was).
            let description = self
                .target_of(event.tgid, event.fd)
                .and_then(|open| open.description);
            if let (Ok(position), Some(description)) = (u64::try_from(event.result), description) {
                self.positions[description] = position;
            }
            return;
        }
        if event.result < 0 {
            self.failed_syscalls += 1;
            return;
        }
        let Some(open) = self.target_of(event.tgid, event.fd) else {
            return;
        };
        let target = open.target;
        let calls = &mut self.targets[target];
        if !kind.is_write() {
            calls.fsync_calls += 1;
            return;
        }
        let bytes = event.result as u64;
        calls.write_syscalls += 1;
        calls.write_bytes += bytes;
        let _ = calls
            .write_size
            .get_or_insert_with(new_histogram)
            .record(bytes.max(1));
        let offset = if event.offset != UNKNOWN_OFFSET {
            Some(event.offset)
        } else {
            // write(), writev(), pwritev2(-1): at the file position, which they advance.
            open.description.map(|description| {
                let position = &mut self.positions[description];
                let at = *position;
                *position = at.saturating_add(bytes);
                at
            })
        };
        if offset.is_none() {
            calls.unknown_offset_writes += 1;
        }
        self.sectors.keep_write(WriteCall {
            target,
            offset,
            bytes,
        });
    }

    pub fn targets(&self) -> &[TargetCalls] {
        &self.targets
    }

    /// Files the command wrote: their extent maps are wanted.
    pub fn written_files(&self) -> Vec<(usize, TargetFile)> {
        self.targets
            .iter()
            .enumerate()
            .filter(|(_, calls)| calls.write_syscalls > 0)
            .filter_map(|(index, calls)| Some((index, calls.target.file.clone()?)))
            .collect()
    }

    /// A file target's extent map (or why it could not be read).
    pub fn set_file_map(&mut self, target: usize, map: Result<FileMap, String>) {
        if let Some(calls) = self.targets.get_mut(target) {
            calls.file_map = Some(map.map(|mut map| {
                map.extents.sort_by_key(|extent| extent.logical);
                map
            }));
        }
    }

    /// For one target: commands per write and writes per command, matched by
    /// absolute sector range (only writes with a known offset), and where
    /// the written bytes ended up.
    ///
    /// Called once the run is over: it sorts what was kept, so a command
    /// writing thousands of files is matched file by file in one pass each.
    pub fn match_writes(&mut self, target: usize) -> WriteMatch {
        self.sectors.match_writes(target, self.targets.get(target))
    }

    /// What the caps dropped.
    pub fn not_kept(&self) -> NotKept {
        self.sectors.not_kept
    }
}

#[cfg(test)]
mod tests {
    use super::test_fixtures::{
        extent, fd_call, issue, loop0p2, open, plain_write, write, OneFile, OnePartition,
    };
    use super::*;
    use crate::geometry::fiemap::ExtentKind;

    #[test]
    fn other_files_reads_failures_and_unknown_offsets_are_kept_apart() {
        let mut matcher = RunMatcher::new(OnePartition);
        matcher.process_event(&write(9, 0, 100)); // not a block device
        matcher.process_event(&write(3, 0, -5)); // EIO
        let mut plain = write(3, UNKNOWN_OFFSET, 512);
        plain.kind = ProcessEventKind::Write as u8;
        matcher.process_event(&plain);
        let mut read_command = issue(1000, 1);
        read_command.rwbs = *b"R\0\0\0\0\0\0\0";
        matcher.block_event(&read_command);
        assert_eq!(matcher.failed_syscalls, 1);
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.unknown_offset_writes), (1, 1));
        let matched = matcher.match_writes(0);
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

    #[test]
    fn opens_name_fds_and_forks_inherit_them() {
        let mut matcher = RunMatcher::new(OnePartition);
        // fd 5 opened as the partition; fd 3 reopened as a regular file.
        matcher.open_event(&open(42, 5, "/dev/loop0p2"));
        matcher.open_event(&open(42, 3, "/tmp/log"));
        matcher.process_event(&write(5, 0, 4096));
        matcher.process_event(&write(3, 0, 4096));
        let fork = ProcessEvent {
            tgid: 43,
            fd: 42,
            kind: ProcessEventKind::Fork as u8,
            ..ProcessEvent::ZERO
        };
        matcher.process_event(&fork);
        let mut child_write = write(5, 4096, 4096);
        child_write.tgid = 43;
        matcher.process_event(&child_write);
        let calls = &matcher.targets()[0];
        assert_eq!(matcher.targets().len(), 1);
        assert_eq!(
            calls.write_syscalls, 2,
            "the parent's and the child's writes to fd 5"
        );
        assert_eq!(matcher.processes, 1);
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

    #[test]
    fn dd_writes_through_the_fd_it_dup2ed_its_output_to() {
        let mut matcher = RunMatcher::new(Exited { fd_lookups: 0 });
        // What coreutils dd does with of=: open as 3, dup2 onto 1, close 3.
        matcher.open_event(&open(42, 3, "/dev/loop0p2"));
        matcher.process_event(&fd_call(ProcessEventKind::Dup2, 3, 1));
        matcher.process_event(&fd_call(ProcessEventKind::Close, 3, 0));
        for _ in 0..32 {
            matcher.process_event(&plain_write(1));
        }
        // fd 3 is closed: a write there is not the device's.
        matcher.process_event(&plain_write(3));
        assert_eq!(matcher.targets().len(), 1);
        let calls = &matcher.targets()[0];
        assert_eq!(calls.target, loop0p2());
        assert_eq!((calls.write_syscalls, calls.write_bytes), (32, 32 * 65536));
        assert_eq!(
            matcher.resolver.fd_lookups, 1,
            "only the closed fd 3 was looked up, not fd 1"
        );
    }

    #[test]
    fn a_closed_fd_number_reused_for_another_file_is_not_the_device() {
        let mut matcher = RunMatcher::new(Exited { fd_lookups: 0 });
        matcher.open_event(&open(42, 5, "/dev/loop0p2"));
        matcher.process_event(&write(5, 0, 4096));
        matcher.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        matcher.open_event(&open(42, 5, "/tmp/log"));
        matcher.process_event(&write(5, 0, 4096));
        // Closed again and reused by something not opened (a pipe): asked afresh.
        matcher.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        matcher.process_event(&write(5, 0, 4096));
        assert_eq!(matcher.targets()[0].write_syscalls, 1);
        assert_eq!(matcher.resolver.fd_lookups, 1);
        // dup2 onto an fd that was the device makes it the new file instead.
        matcher.open_event(&open(42, 6, "/dev/loop0p2"));
        matcher.open_event(&open(42, 7, "/tmp/log"));
        matcher.process_event(&fd_call(ProcessEventKind::Dup2, 7, 6));
        matcher.process_event(&write(6, 0, 4096));
        assert_eq!(matcher.targets()[0].write_syscalls, 1);
    }

    #[test]
    fn dup_dup3_and_fcntl_dupfd_copy_the_target_and_forks_inherit_it() {
        let mut matcher = RunMatcher::new(Exited { fd_lookups: 0 });
        matcher.open_event(&open(42, 3, "/dev/loop0p2"));
        matcher.process_event(&fd_call(ProcessEventKind::Dup, 3, 7));
        matcher.process_event(&fd_call(ProcessEventKind::Dup3, 7, 8));
        matcher.process_event(&fd_call(ProcessEventKind::Fcntl, 8, 10));
        // A failed dup (EBADF) maps nothing and is not a failed write.
        matcher.process_event(&fd_call(ProcessEventKind::Dup, 30, -9));
        matcher.process_event(&fd_call(ProcessEventKind::Close, 3, 0));
        matcher.process_event(&ProcessEvent {
            tgid: 43,
            fd: 42,
            kind: ProcessEventKind::Fork as u8,
            ..ProcessEvent::ZERO
        });
        for fd in [7, 8, 10] {
            matcher.process_event(&write(fd, 0, 512));
        }
        matcher.process_event(&ProcessEvent {
            tgid: 43,
            ..write(10, 512, 512)
        });
        assert_eq!(matcher.targets()[0].write_syscalls, 4);
        assert_eq!(matcher.failed_syscalls, 0);
        assert_eq!(matcher.resolver.fd_lookups, 0);
    }

    /// Matches `matcher`'s writes against one extent (file 0..1 MiB at
    /// partition byte 1 MiB) and one 64 KiB command at each of `at`.
    fn matched_with_commands_at(mut matcher: RunMatcher<OneFile>, at: &[u64]) -> WriteBytes {
        matcher.set_file_map(
            0,
            Ok(FileMap {
                extents: vec![extent(0, 1 << 20, 1 << 20, ExtentKind::Mapped)],
                truncated: false,
            }),
        );
        for offset in at {
            matcher.block_event(&issue(1000 + ((1 << 20) + offset) / 512, 128));
        }
        matcher.match_writes(0).bytes
    }

    /// Whether a write on `fd` still counts for the file target.
    fn counts_for_the_file(matcher: &mut RunMatcher<OneFile>, fd: u32) -> bool {
        let before = matcher.targets.first().map_or(0, |t| t.write_syscalls);
        matcher.process_event(&plain_write(fd));
        matcher.targets.first().map_or(0, |t| t.write_syscalls) > before
    }

    #[test]
    fn an_exec_closes_close_on_exec_fds_and_keeps_the_rest() {
        let mut matcher = RunMatcher::new(OneFile);
        let mut cloexec = open(42, 3, "/mnt/f");
        cloexec.event.offset = O_CLOEXEC | 0o1;
        matcher.open_event(&cloexec);
        matcher.open_event(&open(42, 4, "/mnt/f"));
        // dup2 makes fd 5 a copy without close-on-exec.
        matcher.process_event(&fd_call(ProcessEventKind::Dup2, 3, 5));
        matcher.process_event(&fd_call(ProcessEventKind::Exec, 0, 0));
        // fd 3 is gone (a pipe could have its number now); 4 and 5 stay.
        assert!(!counts_for_the_file(&mut matcher, 3));
        assert!(counts_for_the_file(&mut matcher, 4));
        assert!(counts_for_the_file(&mut matcher, 5));
    }

    #[test]
    fn close_range_closes_or_marks_its_range() {
        let mut matcher = RunMatcher::new(OneFile);
        for fd in 3..=6 {
            matcher.open_event(&open(42, fd, "/mnt/f"));
        }
        // close_range(3, 4, 0) closes 3 and 4; close_range(5, ~0, CLOEXEC) marks 5 and 6.
        matcher.process_event(&ProcessEvent {
            offset: 4,
            ..fd_call(ProcessEventKind::CloseRange, 3, 0)
        });
        matcher.process_event(&ProcessEvent {
            offset: (CLOSE_RANGE_CLOEXEC << 32) | 0xffff_ffff,
            ..fd_call(ProcessEventKind::CloseRange, 5, 0)
        });
        assert!(!counts_for_the_file(&mut matcher, 3));
        assert!(!counts_for_the_file(&mut matcher, 4));
        assert!(counts_for_the_file(&mut matcher, 5));
        matcher.process_event(&fd_call(ProcessEventKind::Exec, 0, 0));
        assert!(!counts_for_the_file(&mut matcher, 5));
        assert!(!counts_for_the_file(&mut matcher, 6));
    }

    #[test]
    fn lseek_moves_the_followed_position() {
        let mut matcher = RunMatcher::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        // write at 0, lseek to 512 KiB (the kernel's answer), write there.
        matcher.process_event(&plain_write(3));
        matcher.process_event(&fd_call(ProcessEventKind::Lseek, 3, 512 << 10));
        matcher.process_event(&plain_write(3));
        // A failed lseek changes nothing and is not a failed write.
        matcher.process_event(&fd_call(ProcessEventKind::Lseek, 3, -22));
        let bytes = matched_with_commands_at(matcher, &[0, 512 << 10]);
        assert_eq!(bytes.matched, 2 * 65536, "{bytes:?}");
        assert_eq!(bytes.unknown_offset, 0);
    }

    #[test]
    fn o_append_writes_have_unknown_offsets_not_guessed_ones() {
        let mut matcher = RunMatcher::new(OneFile);
        let mut appending = open(42, 3, "/mnt/f");
        appending.event.offset = O_APPEND | 0o1; // O_WRONLY | O_APPEND
        matcher.open_event(&appending);
        matcher.process_event(&plain_write(3));
        // A command sits where a position of 0 would have guessed.
        let bytes = matched_with_commands_at(matcher, &[0]);
        assert_eq!(bytes.matched, 0, "{bytes:?}");
        assert_eq!(bytes.unknown_offset, 65536);
    }
}
