//! The process model: what each file descriptor of the traced tree points
//! at, a target (a block device, or a regular file on one) or nothing, at
//! each of its syscalls, and where each open file's position stands.
//!
//! Followed: open (with O_CLOEXEC and O_APPEND), dup, dup2, dup3 and
//! fcntl(F_DUPFD*), close, close_range, fork (the child copies its parent's
//! fds), exec (close-on-exec fds go), and lseek and plain write()s (the
//! position). An fd whose open was not seen is asked of the [`FdResolver`]
//! once, and its position is not known. Writes and syncs submitted through
//! io_submit (libaio) arrive one per iocb and are placed like pwrite's: by
//! their own offset, never the file position; so are io_uring's SQEs.

use std::collections::{HashMap, HashSet};

use tracer_common::{
    uring_how, OpenEvent, ProcessEvent, ProcessEventKind, CLOSE_RANGE_CLOEXEC, O_APPEND, O_CLOEXEC,
    UNKNOWN_OFFSET,
};

use super::{FdResolver, FdTarget, WriteCall, WritePath};

/// `O_DIRECT` in an open's flags: not the same on every architecture, and
/// the flags come from this machine's kernel.
const O_DIRECT: u64 = libc::O_DIRECT as u64;

/// Open file descriptions whose position is followed.
const MAX_DESCRIPTIONS: usize = 1 << 20;

/// A process event of the traced tree, as the fd table resolved it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Syscall {
    /// A new process (or thread) in the tree.
    Fork,
    /// Only the fd table changed (close, close_range, dup, exec, lseek), or
    /// the event's kind is not known.
    FdsOnly,
    /// A write or a sync that failed, whatever its fd; for a write to a
    /// target, which one, and its errno (positive).
    Failed { target: Option<usize>, errno: i32 },
    /// A write or a sync on an fd that is no target (a pipe, a tty, tmpfs).
    NotATarget,
    /// fsync or fdatasync of a target.
    Sync { target: usize },
    /// A write to a target, and how it was submitted.
    Write(WriteCall, WritePath),
    /// One io_submit call: the iocbs it had accepted (its iocbs' writes and
    /// syncs came before), and how many of them the probe did not follow.
    IoSubmit { accepted: u64, not_followed: u64 },
    /// A write or sync SQE on a registered file whose slot is not known
    /// (registered before tracing, past the slots read, or changed since).
    FixedFileNotFollowed,
    /// A shared writable mapping of a target (mmap).
    Mapped { target: usize },
}

/// An fd of the traced tree that is a target: which one, and the open file
/// description it shares with its dups and its forks' copies.
#[derive(Clone, Copy, Debug)]
struct OpenTarget {
    target: usize,
    /// Index into the followed positions (opens seen, or adopted with a
    /// position /proc told).
    description: Option<usize>,
    /// Opened O_DIRECT: its writes bypass the page cache. (fcntl(F_SETFL)
    /// turning it on or off later is not followed.)
    direct: bool,
}

pub(super) struct FdTable<R: FdResolver> {
    resolver: R,
    /// By (tgid, fd): the target it is, or `None` when it is no target.
    fds: HashMap<(u32, u32), Option<OpenTarget>>,
    /// The fds an exec closes (opened O_CLOEXEC, or marked by close_range).
    close_on_exec: HashSet<(u32, u32)>,
    /// Per open file description: its file position. A file or device
    /// opened while traced starts at 0, plain write()s advance it and lseek sets it; an
    /// O_APPEND open has none (its writes land at the end, unseen here).
    positions: Vec<u64>,
    /// Each target's number (a build opens thousands of files).
    target_index: HashMap<FdTarget, usize>,
    /// Targets numbered since [`FdTable::take_new_targets`], in order.
    new_targets: Vec<FdTarget>,
    /// By io_uring ring (the low 32 bits of its address): its registered
    /// files by slot, each resolved when it was registered (the ring holds
    /// the file itself, whatever the fd becomes). A ring missing here has
    /// slots unknown: registered before tracing, or changed since.
    registered: HashMap<u32, HashMap<u32, Option<OpenTarget>>>,
    /// Each target's logical block size, by number (NVMe passthrough
    /// writes come in blocks).
    block_bytes: Vec<u64>,
}

impl<R: FdResolver> FdTable<R> {
    pub(super) fn new(resolver: R) -> Self {
        FdTable {
            resolver,
            fds: HashMap::new(),
            close_on_exec: HashSet::new(),
            positions: Vec::new(),
            target_index: HashMap::new(),
            new_targets: Vec::new(),
            registered: HashMap::new(),
            block_bytes: Vec::new(),
        }
    }

    /// The targets numbered since the last call, in number order.
    pub(super) fn take_new_targets(&mut self) -> std::vec::Drain<'_, FdTarget> {
        self.new_targets.drain(..)
    }

    /// The target number of an fd already in the table.
    pub(super) fn known_target(&self, tgid: u32, fd: u32) -> Option<usize> {
        self.fds
            .get(&(tgid, fd))
            .copied()
            .flatten()
            .map(|open| open.target)
    }

    /// How many fds of the tree (as far as seen; exited processes' stay)
    /// are `target`: one pass over the table.
    pub(super) fn fds_on(&self, target: usize) -> usize {
        self.fds
            .values()
            .filter(|open| open.is_some_and(|open| open.target == target))
            .count()
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
            direct: false,
        });
        self.fds.insert((tgid, fd), found);
        found
    }

    /// The target's number, given at its first sight.
    fn intern(&mut self, target: Option<FdTarget>) -> Option<usize> {
        let target = target?;
        if let Some(&index) = self.target_index.get(&target) {
            return Some(index);
        }
        let index = self.target_index.len();
        self.block_bytes
            .push(self.resolver.logical_block_bytes(&target));
        self.target_index.insert(target.clone(), index);
        self.new_targets.push(target);
        Some(index)
    }

    /// A successful open: from now on this fd is (or is not) that target.
    pub(super) fn open(&mut self, open: &OpenEvent) {
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
        let direct = event.offset & O_DIRECT != 0;
        let found = self.intern(target).map(|target| OpenTarget {
            target,
            description: (!appends).then(|| self.new_description()).flatten(),
            direct,
        });
        let fd = (event.tgid, event.result as u32);
        self.fds.insert(fd, found);
        if event.offset & O_CLOEXEC != 0 {
            self.close_on_exec.insert(fd);
        } else {
            self.close_on_exec.remove(&fd);
        }
    }

    /// An fd open before tracking began, at `position` when known.
    pub(super) fn adopt(&mut self, tgid: u32, fd: u32, position: Option<u64>, direct: bool) {
        self.fds.remove(&(tgid, fd));
        let Some(open) = self.target_of(tgid, fd) else {
            return;
        };
        let description = position.and_then(|at| {
            let description = self.new_description()?;
            self.positions[description] = at;
            Some(description)
        });
        self.fds.insert(
            (tgid, fd),
            Some(OpenTarget {
                description,
                direct,
                ..open
            }),
        );
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

    /// A fresh open of a file or a device: its position starts at 0.
    fn new_description(&mut self) -> Option<usize> {
        if self.positions.len() >= MAX_DESCRIPTIONS {
            return None;
        }
        self.positions.push(0);
        Some(self.positions.len() - 1)
    }

    /// The child starts with a copy of its parent's descriptors.
    fn fork(&mut self, child: u32, parent: u32) {
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
    }

    /// `tgid` runs a new program: its close-on-exec fds are closed.
    fn exec(&mut self, tgid: u32) {
        let closed: Vec<(u32, u32)> = self
            .close_on_exec
            .iter()
            .filter(|(owner, _)| *owner == tgid)
            .copied()
            .collect();
        for fd in closed {
            self.forget_fd(fd);
        }
    }

    /// What `event` did to the fd table, and what it was for the matcher.
    pub(super) fn syscall(&mut self, event: &ProcessEvent) -> Syscall {
        let Some(kind) = ProcessEventKind::from_u8(event.kind) else {
            return Syscall::FdsOnly;
        };
        match kind {
            ProcessEventKind::Fork => {
                // A fork's event names the child in `tgid`, its parent in `fd`.
                self.fork(event.tgid, event.fd);
                return Syscall::Fork;
            }
            // Even a failed close releases the fd; its number may come back as
            // anything (a pipe, another device), so it is resolved afresh.
            ProcessEventKind::Close => self.forget_fd((event.tgid, event.fd)),
            ProcessEventKind::Exec => self.exec(event.tgid),
            ProcessEventKind::CloseRange => {
                if event.result == 0 {
                    self.close_range(event.tgid, event.fd, event.offset);
                }
            }
            // The new fd is the same open file as the source, whatever it
            // was before: dd reaches its output through fd 1 this way, and
            // may be gone before /proc could be asked what fd 1 is. (A dup
            // is not close-on-exec, unless dup3 or F_DUPFD_CLOEXEC made it
            // so: not told here, so it is kept across an exec.)
            _ if kind.is_dup() => {
                if event.result >= 0 {
                    let target = self.target_of(event.tgid, event.fd);
                    let fd = (event.tgid, event.result as u32);
                    self.fds.insert(fd, target);
                    self.close_on_exec.remove(&fd);
                }
            }
            // Counted by the matcher from the event itself; no fd to place.
            ProcessEventKind::UringNotFollowed | ProcessEventKind::UringPunt => {}
            ProcessEventKind::UringFilesRegistered => {
                let _ = self.registered.insert(event.ring, HashMap::new());
            }
            ProcessEventKind::UringFile => {
                let target = self.target_of(event.tgid, event.fd);
                if let Some(slots) = self.registered.get_mut(&event.ring) {
                    slots.insert(event.offset as u32, target);
                }
            }
            ProcessEventKind::UringFilesChanged => {
                self.registered.remove(&event.ring);
            }
            ProcessEventKind::IoSubmit => {
                return match u64::try_from(event.result) {
                    Ok(accepted) => Syscall::IoSubmit {
                        accepted,
                        not_followed: event.offset,
                    },
                    Err(_) => Syscall::Failed {
                        target: None,
                        errno: errno_of(event.result),
                    },
                };
            }
            ProcessEventKind::Lseek => {
                // The new position, from the kernel's answer (whatever `whence` was).
                let description = self
                    .target_of(event.tgid, event.fd)
                    .and_then(|open| open.description);
                if let (Ok(position), Some(description)) =
                    (u64::try_from(event.result), description)
                {
                    self.positions[description] = position;
                }
            }
            // Mappings are the matcher's (`mappings`); mmap only resolves its fd here.
            ProcessEventKind::Msync | ProcessEventKind::Munmap => {}
            ProcessEventKind::Mmap => {
                if event.result < 0 {
                    return Syscall::Failed {
                        target: None,
                        errno: errno_of(event.result),
                    };
                }
                return match self.target_of(event.tgid, event.fd) {
                    Some(open) => Syscall::Mapped {
                        target: open.target,
                    },
                    None => Syscall::NotATarget,
                };
            }
            _ => return self.write_or_sync(kind, event),
        }
        Syscall::FdsOnly
    }

    /// A write or a sync (the kinds left once the fd table's own are taken).
    fn write_or_sync(&mut self, kind: ProcessEventKind, event: &ProcessEvent) -> Syscall {
        let open = if kind.is_uring() && event.how & uring_how::FIXED_FILE != 0 {
            // `fd` is a slot of the ring's registered files.
            let Some(slot) = self
                .registered
                .get(&event.ring)
                .and_then(|slots| slots.get(&event.fd))
            else {
                return Syscall::FixedFileNotFollowed;
            };
            *slot
        } else {
            self.target_of(event.tgid, event.fd)
        };
        if event.result < 0 {
            // A refused write still names its target (a device that lost
            // atomic writes answers EOPNOTSUPP before any I/O).
            let target = open.filter(|_| kind.is_write()).map(|open| open.target);
            return Syscall::Failed {
                target,
                errno: errno_of(event.result),
            };
        }
        let Some(open) = open else {
            return Syscall::NotATarget;
        };
        if !kind.is_write() {
            return Syscall::Sync {
                target: open.target,
            };
        }
        // An NVMe write's range is in the namespace's logical blocks.
        let (bytes, event_offset) = match kind {
            ProcessEventKind::UringNvmeWrite => {
                let block = self.block_bytes.get(open.target).copied().unwrap_or(512);
                (
                    event.result as u64 * block,
                    event.offset.saturating_mul(block),
                )
            }
            _ => (event.result as u64, event.offset),
        };
        let path = if kind.is_aio() {
            WritePath::Libaio
        } else if kind == ProcessEventKind::UringNvmeWrite {
            WritePath::UringCommand
        } else if kind.is_uring() {
            WritePath::Uring
        } else {
            WritePath::Syscall
        };
        let offset = if event.offset != UNKNOWN_OFFSET {
            Some(event_offset)
        } else if path != WritePath::Syscall {
            // RWF_APPEND, or an SQE's off of -1 (the file position, which
            // io_uring advances itself): not followed.
            None
        } else {
            // write(), writev(), pwritev2(-1): at the file position, which they advance.
            open.description.map(|description| {
                let position = &mut self.positions[description];
                let at = *position;
                *position = at.saturating_add(bytes);
                at
            })
        };
        Syscall::Write(
            WriteCall {
                target: open.target,
                offset,
                bytes,
                at_ns: event.entered_ns(),
                mapped: false,
                // A passthrough command bypasses the page cache.
                direct: open.direct || kind == ProcessEventKind::UringNvmeWrite,
            },
            path,
        )
    }
}

/// A syscall's `-errno` result as a positive errno.
fn errno_of(result: i64) -> i32 {
    i32::try_from(result.saturating_neg()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use tracer_common::{
        ProcessEvent, ProcessEventKind, CLOSE_RANGE_CLOEXEC, O_APPEND, O_CLOEXEC, UNKNOWN_OFFSET,
    };

    use super::super::test_fixtures::{
        extent, fd_call, issue, loop0p2, open, plain_write, write, OneFile, OnePartition, Traced,
    };
    use super::super::{FdResolver, FdTarget, RunMatcher, WriteBytes};
    use super::O_DIRECT;
    use crate::geometry::fiemap::{ExtentKind, FileMap};

    #[test]
    fn opens_name_fds_and_forks_inherit_them() {
        let mut matcher = Traced::new(OnePartition);
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
        let mut matcher = Traced::new(Exited { fd_lookups: 0 });
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
            matcher.fds.resolver.fd_lookups, 1,
            "only the closed fd 3 was looked up, not fd 1"
        );
    }

    #[test]
    fn a_closed_fd_number_reused_for_another_file_is_not_the_device() {
        let mut matcher = Traced::new(Exited { fd_lookups: 0 });
        matcher.open_event(&open(42, 5, "/dev/loop0p2"));
        matcher.process_event(&write(5, 0, 4096));
        matcher.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        matcher.open_event(&open(42, 5, "/tmp/log"));
        matcher.process_event(&write(5, 0, 4096));
        // Closed again and reused by something not opened (a pipe): asked afresh.
        matcher.process_event(&fd_call(ProcessEventKind::Close, 5, 0));
        matcher.process_event(&write(5, 0, 4096));
        assert_eq!(matcher.targets()[0].write_syscalls, 1);
        assert_eq!(matcher.fds.resolver.fd_lookups, 1);
        // dup2 onto an fd that was the device makes it the new file instead.
        matcher.open_event(&open(42, 6, "/dev/loop0p2"));
        matcher.open_event(&open(42, 7, "/tmp/log"));
        matcher.process_event(&fd_call(ProcessEventKind::Dup2, 7, 6));
        matcher.process_event(&write(6, 0, 4096));
        assert_eq!(matcher.targets()[0].write_syscalls, 1);
    }

    #[test]
    fn dup_dup3_and_fcntl_dupfd_copy_the_target_and_forks_inherit_it() {
        let mut matcher = Traced::new(Exited { fd_lookups: 0 });
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
        assert_eq!(matcher.fds.resolver.fd_lookups, 0);
    }

    /// Matches `matcher`'s writes against one extent (file 0..1 MiB at
    /// partition byte 1 MiB) and one 64 KiB command at each of `at`.
    fn matched_with_commands_at(mut matcher: Traced<OneFile>, at: &[u64]) -> WriteBytes {
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
        let before = matcher.targets().first().map_or(0, |t| t.write_syscalls);
        matcher.process_event(&plain_write(fd));
        matcher.targets().first().map_or(0, |t| t.write_syscalls) > before
    }

    #[test]
    fn an_exec_closes_close_on_exec_fds_and_keeps_the_rest() {
        let mut matcher = Traced::new(OneFile);
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
        let mut matcher = Traced::new(OneFile);
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
        let mut matcher = Traced::new(OneFile);
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
    fn an_fd_adopted_at_attach_writes_from_its_position_in_proc() {
        // fd 9 was open before tracing: unplaced unless adopted with its position.
        let mut unadopted = Traced::new(OneFile);
        unadopted.process_event(&plain_write(9));
        let bytes = matched_with_commands_at(unadopted, &[512 << 10]);
        assert_eq!(
            (bytes.matched, bytes.unknown_offset),
            (0, 65536),
            "{bytes:?}"
        );

        let mut matcher = Traced::new(OneFile);
        matcher.adopt_fd(42, 9, Some(512 << 10), false);
        matcher.process_event(&plain_write(9));
        matcher.process_event(&plain_write(9));
        // An fd that is no target, or not open, adopts nothing.
        matcher.adopt_fd(42, 4, Some(0), false);
        assert_eq!(matcher.targets().len(), 1);
        let bytes = matched_with_commands_at(matcher, &[512 << 10, (512 << 10) + 65536]);
        assert_eq!(
            (bytes.matched, bytes.unknown_offset),
            (2 * 65536, 0),
            "{bytes:?}"
        );
    }

    #[test]
    fn stores_through_a_shared_mapping_are_matched_by_the_range_msync_flushed() {
        use super::super::test_fixtures::ISSUED_NS;
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        // 1 MiB of the file from byte 0 mapped at 0x7000_0000 (256 pages).
        matcher.process_event(&ProcessEvent {
            result: 0x7000_0000,
            offset: 0,
            ring: 256,
            ..fd_call(ProcessEventKind::Mmap, 3, 0)
        });
        // An msync after the commands: they carried the stores it flushed.
        matcher.process_event(&ProcessEvent {
            ts_ns: ISSUED_NS + 1,
            offset: 0x7000_0000,
            ring: 256,
            ..fd_call(ProcessEventKind::Msync, 4, 0)
        });
        // The mapping lives on to the end, flushed again with nothing after.
        matcher.end_mappings();
        let calls = &matcher.targets()[0];
        assert_eq!((calls.mappings, calls.msync_calls), (1, 1));
        assert_eq!(calls.mapped_flushed_bytes, 2 << 20);
        assert_eq!(calls.write_syscalls, 0);
        let bytes = matched_with_commands_at(matcher, &[0, 65536]);
        assert_eq!(bytes.mapped_written, 2 * 65536, "{bytes:?}");
        assert_eq!(bytes.mapped_not_written, (2 << 20) - 2 * 65536, "{bytes:?}");
        // None of it is a write syscall's.
        assert_eq!((bytes.matched, bytes.not_written_back), (0, 0), "{bytes:?}");
    }

    /// One iocb of an io_submit by process 42, as the probe emits it.
    fn iocb(kind: ProcessEventKind, fd: u32, offset: u64, bytes: i64) -> ProcessEvent {
        ProcessEvent {
            kind: kind as u8,
            ..write(fd, offset, bytes)
        }
    }

    #[test]
    fn io_submit_writes_are_placed_by_their_own_offset_and_counted_apart() {
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        // Two iocbs at 512 KiB and 0 (PWRITE, PWRITEV), an FDSYNC, then the call's record.
        matcher.process_event(&iocb(ProcessEventKind::AioPwrite, 3, 512 << 10, 65536));
        matcher.process_event(&iocb(ProcessEventKind::AioPwritev, 3, 0, 65536));
        matcher.process_event(&iocb(ProcessEventKind::AioFdsync, 3, 0, 0));
        let call = ProcessEvent {
            offset: 2,
            ..fd_call(ProcessEventKind::IoSubmit, 0, 5)
        };
        matcher.process_event(&call);
        // RWF_APPEND: no offset, and the file position (still 0) is not used.
        matcher.process_event(&iocb(ProcessEventKind::AioPwrite, 3, UNKNOWN_OFFSET, 4096));
        // A refused call (EAGAIN) is a failed syscall, not iocbs.
        matcher.process_event(&fd_call(ProcessEventKind::IoSubmit, 0, -11));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.aio_writes), (3, 3));
        assert_eq!(calls.aio_write_bytes, 2 * 65536 + 4096);
        assert_eq!((calls.fsync_calls, calls.unknown_offset_writes), (1, 1));
        assert_eq!(
            matcher.io_submit,
            super::super::IoSubmitCalls {
                calls: 1,
                iocbs: 5,
                iocbs_not_followed: 2
            }
        );
        assert_eq!(matcher.failed_syscalls, 1);
        // A plain write() after them is at position 0: the iocbs did not
        // move it. It replaces the iocb's bytes there before the command.
        matcher.process_event(&plain_write(3));
        let bytes = matched_with_commands_at(matcher, &[0, 512 << 10]);
        assert_eq!(bytes.matched, 2 * 65536, "{bytes:?}");
        assert_eq!(bytes.overwritten, 65536, "{bytes:?}");
        assert_eq!(bytes.unknown_offset, 4096);
    }

    #[test]
    fn an_nvme_passthrough_write_is_placed_by_its_lba_in_logical_blocks() {
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        // LBA 1024 and 128 blocks of 512 bytes: 64 KiB at 512 KiB.
        matcher.process_event(&iocb(ProcessEventKind::UringNvmeWrite, 3, 1024, 128));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.uring_writes, calls.uring_write_bytes), (1, 65536));
        let bytes = matched_with_commands_at(matcher, &[512 << 10]);
        assert_eq!(bytes.matched, 65536, "{bytes:?}");
    }

    #[test]
    fn uring_sqes_are_placed_by_their_own_offset_and_counted_by_how() {
        use tracer_common::uring_how;
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        // WRITE at 512 KiB (io_uring_enter), WRITEV at 0 (SQPOLL), an FSYNC.
        matcher.process_event(&iocb(ProcessEventKind::UringWrite, 3, 512 << 10, 65536));
        matcher.process_event(&ProcessEvent {
            how: uring_how::SQPOLL,
            ..iocb(ProcessEventKind::UringWritev, 3, 0, 65536)
        });
        matcher.process_event(&iocb(ProcessEventKind::UringFdsync, 3, 0, 0));
        // off = -1: at the file position, which io_uring moves itself: unknown.
        matcher.process_event(&iocb(
            ProcessEventKind::UringWriteFixed,
            3,
            UNKNOWN_OFFSET,
            4096,
        ));
        // A WRITEV of too many iovecs (on a registered file) and a punt: counted, no write.
        matcher.process_event(&ProcessEvent {
            how: uring_how::FIXED_FILE | uring_how::SQPOLL,
            ..iocb(ProcessEventKind::UringNotFollowed, 0, 2, 0)
        });
        matcher.process_event(&iocb(ProcessEventKind::UringPunt, 0, 23, 0));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.uring_writes), (3, 3));
        assert_eq!(calls.uring_write_bytes, 2 * 65536 + 4096);
        assert_eq!((calls.aio_writes, calls.fsync_calls), (0, 1));
        assert_eq!(calls.unknown_offset_writes, 1);
        assert_eq!(
            matcher.uring,
            super::super::UringSqes {
                writes: 3,
                syncs: 1,
                sqpoll: 2,
                punted: 1,
                fixed_files: 0,
                not_followed: 1
            }
        );
        // A plain write() after them is at position 0: the SQEs did not
        // move it. It replaces the SQE's bytes there before the command.
        matcher.process_event(&plain_write(3));
        let bytes = matched_with_commands_at(matcher, &[0, 512 << 10]);
        assert_eq!(bytes.matched, 2 * 65536, "{bytes:?}");
        assert_eq!(bytes.overwritten, 65536, "{bytes:?}");
        assert_eq!(bytes.unknown_offset, 4096);
    }

    #[test]
    fn registered_files_are_resolved_per_ring_as_they_were_registered() {
        use tracer_common::uring_how;
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        let on_ring = |kind, fd, offset, bytes, ring| ProcessEvent {
            ring,
            ..iocb(kind, fd, offset, bytes)
        };
        // Ring 7 registers fd 3 at slot 1; then fd 3 is closed (the ring keeps the file).
        matcher.process_event(&on_ring(ProcessEventKind::UringFilesRegistered, 0, 0, 2, 7));
        matcher.process_event(&on_ring(ProcessEventKind::UringFile, 3, 1, 0, 7));
        matcher.process_event(&fd_call(ProcessEventKind::Close, 3, 0));
        let fixed = |slot, offset, ring| ProcessEvent {
            how: uring_how::FIXED_FILE,
            ..on_ring(ProcessEventKind::UringWrite, slot, offset, 65536, ring)
        };
        matcher.process_event(&fixed(1, 0, 7));
        // Slot 0 is empty, ring 8 registered nothing seen: not followed.
        matcher.process_event(&fixed(0, 0, 7));
        matcher.process_event(&fixed(1, 0, 8));
        // An update: ring 7's slots are unknown from now on.
        matcher.process_event(&on_ring(ProcessEventKind::UringFilesChanged, 0, 6, 0, 7));
        matcher.process_event(&fixed(1, 512 << 10, 7));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.uring_writes), (1, 1));
        assert_eq!((matcher.uring.writes, matcher.uring.fixed_files), (1, 3));
        let bytes = matched_with_commands_at(matcher, &[0]);
        assert_eq!(bytes.matched, 65536, "{bytes:?}");
    }

    #[test]
    fn only_buffered_writes_count_pages_read_before_them() {
        let mut matcher = Traced::new(OnePartition);
        let mut direct = open(42, 3, "/dev/loop0p2");
        direct.event.offset = O_DIRECT | 0o2; // O_RDWR | O_DIRECT
        matcher.open_event(&direct);
        matcher.open_event(&open(42, 4, "/dev/loop0p2"));
        // 512-byte writes, each the start of its own page.
        matcher.process_event(&write(3, 0, 512));
        matcher.process_event(&write(3, 8192, 512));
        assert_eq!(matcher.targets()[0].partial_pages, 0);
        // The same through the buffered fd: the page cache reads each page.
        matcher.process_event(&write(4, 16384, 512));
        matcher.process_event(&write(4, 24576, 512));
        assert_eq!(matcher.targets()[0].partial_pages, 2);
        // A dup shares the description, and with it O_DIRECT.
        matcher.process_event(&fd_call(ProcessEventKind::Dup, 3, 5));
        matcher.process_event(&write(5, 32768, 512));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.partial_pages), (5, 2));
    }

    #[test]
    fn o_append_writes_have_unknown_offsets_not_guessed_ones() {
        let mut matcher = Traced::new(OneFile);
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
