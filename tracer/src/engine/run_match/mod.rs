//! `run`'s matching beside the engine: which of the traced command's write
//! syscalls went to which block device (or regular file on one), and which
//! device write commands and bios carried them.
//!
//! Contract:
//! - In, in kernel order: the traced tree's opens and syscalls
//!   ([`RunMatcher::open_event`], [`RunMatcher::process_event`]) and the
//!   block events ([`RunMatcher::outcome`], the correlation's outcomes). After the command, once
//!   its I/O has settled, the extent map of each file it wrote
//!   ([`RunMatcher::written_files`], [`RunMatcher::set_file_map`]), which
//!   the frontend reads (FIEMAP).
//! - Out: per target, the syscalls made to it ([`RunMatcher::targets`]);
//!   once the run is over, its writes matched to the commands and bios over
//!   the same sectors, and where its written bytes ended up
//!   ([`RunMatcher::match_writes`]). A command counts for a write when it
//!   is over its sectors and was issued after the write began and before a
//!   later write over the same disk bytes began.
//! - Pure: files are named through the injected [`FdResolver`] (the
//!   /proc-based one lives in `frontend::run`), so it is unit-tested with a
//!   fake. Nothing here reads the clock or writes to disk.
//! - Bounded: past [`MAX_WRITES`], [`MAX_COMMANDS`] and [`MAX_BIOS`] more
//!   are dropped and counted ([`RunMatcher::not_kept`]).
//!
//! Where things live:
//! - `fd_table`: the process model. What each fd of the traced tree points
//!   at (a target, or nothing) across open, dup, close, close_range, fork
//!   and exec, and each open file's position (lseek, plain writes): a write
//!   syscall becomes a `WriteCall` (target, offset, bytes).
//! - `mappings`: shared writable mappings (mmap, msync, munmap, fork,
//!   exec): each flushed range becomes a mapped `WriteCall`.
//! - `sector_match`: the writes, commands and bios kept, and their
//!   matching: a write's offsets become disk bytes (a device's own offsets,
//!   or a file's through its extent map), then the commands and bios over
//!   them are counted.
//! - `block_events`: the one place block events come in: which are write
//!   commands issued or requeued, and which write bios queued.
//!
//! What the engine itself counted on the devices `run` touched (the
//! tracked writes, other tasks' traffic) is the engine's own report
//! (`Engine::tracked_writes_on`, `Engine::other_traffic_on`).

mod block_events;
mod fd_table;
mod mappings;
mod sector_match;
#[cfg(test)]
mod test_fixtures;

use std::collections::HashSet;

use hdrhistogram::Histogram;
use tracer_common::{uring_how, OpenEvent, ProcessEvent, ProcessEventKind};

use super::stats::new_histogram;
use crate::geometry::fiemap::FileMap;
use crate::geometry::DevId;
use fd_table::{FdTable, Syscall};
use mappings::Mappings;
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
    /// Bytes per logical block of a device target: an NVMe passthrough
    /// write names its range in them.
    fn logical_block_bytes(&mut self, _target: &FdTarget) -> u64 {
        512
    }
}

/// Caps so a long run cannot grow memory without bound (dropped ones are counted).
pub const MAX_WRITES: usize = 1 << 21;
pub const MAX_COMMANDS: usize = 1 << 21;
pub const MAX_BIOS: usize = 1 << 21;

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
    /// The part of `write_syscalls` and `write_bytes` submitted through
    /// io_submit (libaio), one per iocb.
    pub aio_writes: u64,
    pub aio_write_bytes: u64,
    /// The part submitted through io_uring, one per SQE.
    pub uring_writes: u64,
    pub uring_write_bytes: u64,
    /// The part of `uring_writes` that were NVMe passthrough commands
    /// (`URING_CMD` on `/dev/ngXnY`): no bio carries them.
    pub passthrough_writes: u64,
    /// A file's extent map, or why it could not be read.
    pub file_map: Option<std::io::Result<FileMap>>,
    /// When the last write syscall returned, and the last fsync or
    /// fdatasync began (kernel monotonic ns; 0: none).
    pub last_write_ns: u64,
    pub last_sync_ns: u64,
    /// Shared writable mappings of it (mmap), msync calls over them, and
    /// the bytes of the ranges flushed (at msync, munmap, exec, the end).
    pub mappings: u64,
    pub msync_calls: u64,
    pub mapped_flushed_bytes: u64,
    /// Pages a buffered write covered only in part before any write had
    /// covered them: with 4 KiB blocks, the page cache reads each first.
    pub partial_pages: u64,
    /// The pages written so far, up to [`MAX_TOUCHED_PAGES`].
    touched_pages: HashSet<u64>,
    /// Write calls the kernel refused, by errno (positive).
    pub failed_writes: std::collections::BTreeMap<i32, u64>,
    /// Writes through an fd opened O_DIRECT (the kind untorn writes need).
    pub direct_writes: u64,
}

/// Pages remembered per target for `partial_pages`; past that, pages not
/// yet seen are taken as written (the count is then a lower bound).
const MAX_TOUCHED_PAGES: usize = 1 << 20;
const PAGE_BYTES: u64 = 4096;

impl TargetCalls {
    /// Notes a write of `bytes` at `offset`: its first and last page, when
    /// it covers them only in part and no write touched them before, are
    /// pages a 4 KiB block size would read first.
    fn note_pages(&mut self, offset: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let end = offset.saturating_add(bytes);
        let (first, last) = (offset / PAGE_BYTES, (end - 1) / PAGE_BYTES);
        let partial = |page: u64| {
            let start = page * PAGE_BYTES;
            offset > start || end < start + PAGE_BYTES
        };
        for page in [first, last] {
            if partial(page)
                && !self.touched_pages.contains(&page)
                && self.touched_pages.len() < MAX_TOUCHED_PAGES
            {
                self.partial_pages += 1;
                self.touched_pages.insert(page);
            }
        }
        for page in first..=last {
            if self.touched_pages.len() >= MAX_TOUCHED_PAGES {
                break;
            }
            self.touched_pages.insert(page);
        }
    }

    /// Every write made to it so far is on the device by the command's own
    /// word: its last fsync or fdatasync began after its last write
    /// returned. Not for writes through libaio or io_uring, whose
    /// completions are not traced.
    pub fn synced(&self) -> bool {
        self.aio_writes + self.uring_writes + self.mappings == 0
            && self.last_sync_ns >= self.last_write_ns
    }
}

impl TargetCalls {
    fn new(target: FdTarget) -> Self {
        TargetCalls {
            target,
            write_syscalls: 0,
            write_bytes: 0,
            write_size: None,
            fsync_calls: 0,
            unknown_offset_writes: 0,
            aio_writes: 0,
            aio_write_bytes: 0,
            uring_writes: 0,
            uring_write_bytes: 0,
            passthrough_writes: 0,
            file_map: None,
            last_write_ns: 0,
            last_sync_ns: 0,
            mappings: 0,
            msync_calls: 0,
            mapped_flushed_bytes: 0,
            partial_pages: 0,
            touched_pages: HashSet::new(),
            failed_writes: std::collections::BTreeMap::new(),
            direct_writes: 0,
        }
    }
}

/// A write syscall as the process model placed it: the hand-over from
/// `fd_table` to `sector_match`.
#[derive(Clone, Copy, Debug)]
struct WriteCall {
    /// Index into [`RunMatcher::targets`].
    target: usize,
    /// Byte offset within the target, when the syscall carried one or the
    /// file position was followed.
    offset: Option<u64>,
    bytes: u64,
    /// When the syscall began (an SQE: its submission), kernel
    /// monotonic ns: only commands issued after it can carry its data.
    at_ns: u64,
    /// Stores through a shared mapping, flushed (`mappings`): its bytes
    /// are the range flushed, not all of them stored to.
    mapped: bool,
    /// Through an fd opened O_DIRECT: no page cache, so no page is read
    /// before it, whatever the block size.
    direct: bool,
}

/// How a write reached the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePath {
    /// A write-family syscall (write, pwrite64, writev, pwritev, pwritev2).
    Syscall,
    /// An iocb submitted through io_submit (libaio).
    Libaio,
    /// An SQE submitted through io_uring.
    Uring,
    /// An io_uring `URING_CMD` SQE carrying an NVMe write: a passthrough
    /// command, with no bio.
    UringCommand,
}

/// The traced tree's io_uring SQEs that `run` follows (writes and
/// fsyncs), to any fd, and how they were submitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringSqes {
    /// WRITE, WRITEV and WRITE_FIXED SQEs followed.
    pub writes: u64,
    /// FSYNC SQEs followed (with or without DATASYNC).
    pub syncs: u64,
    /// Of all write and sync SQEs (followed or not), the ones the ring's
    /// SQPOLL thread submitted; the rest came through io_uring_enter.
    pub sqpoll: u64,
    /// Write and sync requests handed to io-wq workers (`iou-wrk-*`),
    /// after their submission was counted.
    pub punted: u64,
    /// Write and sync SQEs on registered (fixed) files whose slot is not
    /// known (registered before tracing, past the slots read, or changed
    /// since): not followed, so in no count but this one.
    pub fixed_files: u64,
    /// Other write and sync SQEs not followed (a WRITEV of more iovecs
    /// than the probe sums, unreadable memory).
    pub not_followed: u64,
}

/// The traced tree's io_submit calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoSubmitCalls {
    /// Calls that the kernel accepted iocbs from (a failed one is in
    /// [`RunMatcher::failed_syscalls`]).
    pub calls: u64,
    pub iocbs: u64,
    /// Accepted iocbs the probe did not read (past its per-call cap, a
    /// PWRITEV of too many iovecs, unreadable memory): their writes are
    /// not counted anywhere else.
    pub iocbs_not_followed: u64,
}

/// What the caps dropped: writes, commands and bios not kept for matching.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotKept {
    pub writes: u64,
    pub commands: u64,
    pub bios: u64,
}

/// Follows the traced tree's write syscalls to their targets, keeps the
/// devices' write commands and bios, and matches the two by sector range.
/// In memory only: nothing here is written to a recording.
pub struct RunMatcher<R: FdResolver> {
    /// The process model: what each fd is, and open files' positions.
    fds: FdTable<R>,
    /// One per target the fd table has met, in its numbering.
    targets: Vec<TargetCalls>,
    /// The writes, commands and bios kept for matching.
    sectors: SectorMatcher,
    /// Processes (and threads) the command's tree forked, itself included.
    pub processes: u64,
    /// Writes and syncs that failed, on any fd.
    pub failed_syscalls: u64,
    pub io_submit: IoSubmitCalls,
    pub uring: UringSqes,
    /// The tree's shared writable mappings of targets.
    mappings: Mappings,
}

impl<R: FdResolver> RunMatcher<R> {
    pub fn new(resolver: R) -> Self {
        RunMatcher {
            fds: FdTable::new(resolver),
            targets: Vec::new(),
            sectors: SectorMatcher::default(),
            processes: 0,
            failed_syscalls: 0,
            io_submit: IoSubmitCalls::default(),
            uring: UringSqes::default(),
            mappings: Mappings::default(),
        }
    }

    /// A successful open: from now on this fd is (or is not) that target.
    pub fn open_event(&mut self, open: &OpenEvent) {
        self.fds.open(open);
        self.add_new_targets();
    }

    /// A process of a tree followed from attach (`run --pid`): its open
    /// `fd` is taken as it is now, at file `position` when /proc told it
    /// (not for O_APPEND: those writes land at the end, unseen here).
    /// `direct`: it was opened O_DIRECT.
    pub fn adopt_fd(&mut self, tgid: u32, fd: u32, position: Option<u64>, direct: bool) {
        self.fds.adopt(tgid, fd, position, direct);
        self.add_new_targets();
    }

    /// mmap, msync, munmap, and the forks and execs that copy or end
    /// mappings: the mapped writes they flush are kept like write syscalls.
    fn follow_mappings(&mut self, event: &ProcessEvent, syscall: &Syscall) {
        let Some(kind) = ProcessEventKind::from_u8(event.kind) else {
            return;
        };
        let bytes = u64::from(event.ring) * tracer_common::MAPPING_PAGE;
        let writes = match (kind, syscall) {
            (ProcessEventKind::Mmap, Syscall::Mapped { target }) => {
                self.targets[*target].mappings += 1;
                let start = event.result as u64;
                self.mappings
                    .map(event.tgid, start, bytes, event.offset, *target, event.ts_ns);
                return;
            }
            // A fork's event names the child in `tgid`, its parent in `fd`.
            (ProcessEventKind::Fork, _) => {
                self.mappings.fork(event.tgid, event.fd);
                return;
            }
            (ProcessEventKind::Exec, _) => self.mappings.exec(event.tgid),
            (ProcessEventKind::Msync, _) if event.result == 0 => {
                let writes = self
                    .mappings
                    .sync(event.tgid, event.offset, bytes, event.ts_ns);
                let mut counted: Vec<usize> = Vec::new();
                for write in &writes {
                    if !counted.contains(&write.target) {
                        counted.push(write.target);
                        self.targets[write.target].msync_calls += 1;
                    }
                }
                writes
            }
            (ProcessEventKind::Munmap, _) if event.result == 0 => {
                self.mappings.unmap(event.tgid, event.offset, bytes)
            }
            _ => return,
        };
        self.keep_mapped(writes);
    }

    fn keep_mapped(&mut self, writes: Vec<WriteCall>) {
        for write in writes {
            self.targets[write.target].mapped_flushed_bytes += write.bytes;
            self.sectors.keep_write(write);
        }
    }

    /// The run is over: the mappings still there are flushed, so the
    /// commands over them since their last flush count for their stores.
    /// Call once, before matching.
    pub fn end_mappings(&mut self) {
        let writes = self.mappings.end();
        self.keep_mapped(writes);
    }

    /// mmaps past the mappings followed at once.
    pub fn mappings_not_followed(&self) -> u64 {
        self.mappings.not_followed
    }

    /// A syscall, fork or exec of the traced tree.
    pub fn process_event(&mut self, event: &ProcessEvent) {
        let syscall = self.fds.syscall(event);
        self.count_uring(event, &syscall);
        self.add_new_targets();
        self.follow_mappings(event, &syscall);
        match syscall {
            Syscall::Fork => self.processes += 1,
            Syscall::FdsOnly
            | Syscall::NotATarget
            | Syscall::FixedFileNotFollowed
            | Syscall::Mapped { .. } => {}
            Syscall::Failed { target, errno } => {
                self.failed_syscalls += 1;
                if let Some(calls) = target.and_then(|target| self.targets.get_mut(target)) {
                    *calls.failed_writes.entry(errno).or_default() += 1;
                }
            }
            Syscall::Sync { target } => {
                let calls = &mut self.targets[target];
                calls.fsync_calls += 1;
                calls.last_sync_ns = calls.last_sync_ns.max(event.entered_ns());
            }
            Syscall::IoSubmit {
                accepted,
                not_followed,
            } => {
                self.io_submit.calls += 1;
                self.io_submit.iocbs += accepted;
                self.io_submit.iocbs_not_followed += not_followed;
            }
            Syscall::Write(write, path) => {
                let calls = &mut self.targets[write.target];
                calls.write_syscalls += 1;
                calls.last_write_ns = calls.last_write_ns.max(event.ts_ns);
                calls.write_bytes += write.bytes;
                match path {
                    WritePath::Libaio => {
                        calls.aio_writes += 1;
                        calls.aio_write_bytes += write.bytes;
                    }
                    WritePath::Uring => {
                        calls.uring_writes += 1;
                        calls.uring_write_bytes += write.bytes;
                    }
                    WritePath::UringCommand => {
                        calls.uring_writes += 1;
                        calls.uring_write_bytes += write.bytes;
                        calls.passthrough_writes += 1;
                    }
                    WritePath::Syscall => {}
                }
                let _ = calls
                    .write_size
                    .get_or_insert_with(new_histogram)
                    .record(write.bytes.max(1));
                calls.direct_writes += u64::from(write.direct);
                match write.offset {
                    Some(offset) if !write.mapped && !write.direct => {
                        calls.note_pages(offset, write.bytes)
                    }
                    Some(_) => {}
                    None => calls.unknown_offset_writes += 1,
                }
                self.sectors.keep_write(write);
            }
        }
    }

    /// io_uring's own tallies, whatever fd the SQE named.
    fn count_uring(&mut self, event: &ProcessEvent, syscall: &Syscall) {
        let Some(kind) = ProcessEventKind::from_u8(event.kind) else {
            return;
        };
        let uring = &mut self.uring;
        match kind {
            ProcessEventKind::UringPunt => {
                uring.punted += 1;
                return;
            }
            // Unreadable or past the iovecs summed, on a registered file or not.
            ProcessEventKind::UringNotFollowed => uring.not_followed += 1,
            _ if matches!(syscall, Syscall::FixedFileNotFollowed) => uring.fixed_files += 1,
            _ if kind.is_uring() && kind.is_write() => uring.writes += 1,
            _ if kind.is_uring() => uring.syncs += 1,
            _ => return,
        }
        if event.how & uring_how::SQPOLL != 0 {
            uring.sqpoll += 1;
        }
    }

    /// Gives each target the fd table met since the last call its tally.
    fn add_new_targets(&mut self) {
        self.targets
            .extend(self.fds.take_new_targets().map(TargetCalls::new));
    }

    /// The target `fd` of `tgid` is now, as far as its opens, dups and
    /// closes were seen (nothing is resolved).
    pub fn fd_target(&self, tgid: u32, fd: u32) -> Option<usize> {
        self.fds.known_target(tgid, fd)
    }

    /// How many of the tree's fds are `target` now (a pass over them all).
    pub fn fds_on(&self, target: usize) -> usize {
        self.fds.fds_on(target)
    }

    pub fn targets(&self) -> &[TargetCalls] {
        &self.targets
    }

    /// Files the command wrote: their extent maps are wanted.
    pub fn written_files(&self) -> Vec<(usize, TargetFile)> {
        self.targets
            .iter()
            .enumerate()
            .filter(|(_, calls)| calls.write_syscalls > 0 || calls.mappings > 0)
            // (A file only refused writes holds none of the command's bytes.)
            .filter_map(|(index, calls)| Some((index, calls.target.file.clone()?)))
            .collect()
    }

    /// A file target's extent map (or why it could not be read).
    pub fn set_file_map(&mut self, target: usize, map: std::io::Result<FileMap>) {
        self.sectors.maps_changed();
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
        self.sectors.match_writes(target, &self.targets)
    }

    /// What the caps dropped.
    pub fn not_kept(&self) -> NotKept {
        self.sectors.not_kept
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{ProcessEventKind, UNKNOWN_OFFSET};

    use super::test_fixtures::{issue, write, OnePartition, Traced};

    #[test]
    fn other_files_reads_failures_and_unknown_offsets_are_kept_apart() {
        let mut matcher = Traced::new(OnePartition);
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
}

#[cfg(test)]
mod page_tests {
    use super::*;

    #[test]
    fn pages_first_written_in_part_are_counted_once() {
        let mut calls = TargetCalls::new(FdTarget {
            device: "vdc1".into(),
            disk_dev: DevId::new(253, 32),
            start_sector: 1785,
            file: None,
        });
        // mkfs-style 1 KiB writes: the first of each page counts, the
        // other three find it written.
        for at in [0u64, 1024, 2048, 3072, 8192] {
            calls.note_pages(at, 1024);
        }
        assert_eq!(calls.partial_pages, 2);
        // Whole pages need no read, and make their pages written.
        calls.note_pages(12288, 8192);
        calls.note_pages(13312, 512);
        assert_eq!(calls.partial_pages, 2);
        // A write straddling two unwritten pages reads both.
        calls.note_pages(40960 + 3584, 1024);
        assert_eq!(calls.partial_pages, 4);
    }
}
