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
//! `engine_totals`: what the engine itself counted on the devices `run` touched.

mod engine_totals;

use std::collections::{HashMap, HashSet};

use hdrhistogram::Histogram;
use tracer_common::{
    BlockEvent, EventKind, OpenEvent, ProcessEvent, ProcessEventKind, CLOSE_RANGE_CLOEXEC,
    O_APPEND, O_CLOEXEC, UNKNOWN_OFFSET,
};

use super::stats::new_histogram as histogram;
use crate::blk::SECTOR_BYTES;
use crate::geometry::fiemap::{ExtentKind, FileMap};
use crate::geometry::DevId;

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
/// How far back a requeued command is looked for among the kept ones.
const REQUEUE_LOOKBACK: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct WriteCall {
    target: usize,
    /// Byte offset within the target, when the syscall carried one.
    offset: Option<u64>,
    bytes: u64,
}

/// A write command issued, or a write bio queued, on a whole disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DiskRange {
    disk: u32,
    sector: u64,
    nr_sector: u32,
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

/// Matching of writes to the device commands covering their sectors.
pub struct WriteMatch {
    pub commands_per_write: Histogram<u64>,
    pub writes_per_command: Histogram<u64>,
    /// Commands that carried at least one of the writes.
    pub commands: u64,
    /// Bios over the writes' sectors (any submitter), and their sizes in bytes.
    pub bios: u64,
    pub bio_size: Histogram<u64>,
    pub bytes: WriteBytes,
}

/// Where the bytes of a target's writes ended up; the parts sum to the
/// bytes written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBytes {
    /// On sectors that device commands wrote during the run.
    pub matched: u64,
    /// On sectors no command wrote during the run: still dirty at exit (or
    /// written back later).
    pub not_written_back: u64,
    /// In delayed-allocation extents: still dirty, and no sectors yet.
    pub delalloc: u64,
    /// No device address: extents FIEMAP could not place, holes (cut or
    /// punched since), or a map that could not be read.
    pub unmappable: u64,
    /// Writes whose file offset was not known.
    pub unknown_offset: u64,
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
    writes: Vec<WriteCall>,
    commands: Vec<DiskRange>,
    /// Write bios as queued (after partition remapping): a file's bios are
    /// those over its sectors, whoever submitted them (writeback included).
    bios: Vec<DiskRange>,
    /// `writes`, `commands` and `bios` are in matching order (see `sort_for_matching`).
    sorted: bool,
    longest_command: HashMap<u32, u64>,
    longest_bio: HashMap<u32, u64>,
    /// Processes (and threads) the command's tree forked, itself included.
    pub processes: u64,
    pub writes_not_kept: u64,
    pub commands_not_kept: u64,
    pub bios_not_kept: u64,
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
            writes: Vec::new(),
            commands: Vec::new(),
            bios: Vec::new(),
            sorted: false,
            longest_command: HashMap::new(),
            longest_bio: HashMap::new(),
            processes: 0,
            writes_not_kept: 0,
            commands_not_kept: 0,
            bios_not_kept: 0,
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
            .get_or_insert_with(histogram)
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
        if self.writes.len() < MAX_WRITES {
            self.sorted = false;
            self.writes.push(WriteCall {
                target,
                offset,
                bytes,
            });
        } else {
            self.writes_not_kept += 1;
        }
    }

    /// Keeps write commands as issued (block_rq_issue) and write bios as
    /// queued (block_bio_queue). Bio-based devices issue no requests: no
    /// command of theirs is kept.
    pub fn block_event(&mut self, event: &BlockEvent) {
        if !is_write(&event.rwbs) {
            return;
        }
        if event.kind == EventKind::Requeue as u8 {
            // Its re-issue will be kept again: one command, not two. A
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
        if event.kind == EventKind::Queue as u8 {
            if event.nr_sector == 0 {
                return;
            }
            if self.bios.len() < MAX_BIOS {
                self.sorted = false;
                self.bios.push(DiskRange {
                    disk: event.dev,
                    sector: event.sector,
                    nr_sector: event.nr_sector,
                });
            } else {
                self.bios_not_kept += 1;
            }
            return;
        }
        if event.kind != EventKind::Issue as u8 {
            return;
        }
        if self.commands.len() < MAX_COMMANDS {
            self.sorted = false;
            self.commands.push(DiskRange {
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
        self.sort_for_matching();
        let mut result = WriteMatch {
            commands_per_write: histogram(),
            writes_per_command: histogram(),
            commands: 0,
            bios: 0,
            bio_size: histogram(),
            bytes: WriteBytes::default(),
        };
        let Some(calls) = self.targets.get(target) else {
            return result;
        };
        let disk = calls.target.disk_dev.to_kernel();
        let commands = on_disk(&self.commands, disk);
        let bios = on_disk(&self.bios, disk);
        let mut carried_bios: HashSet<usize> = HashSet::new();
        let longest_bio = self.longest_bio.get(&disk).copied().unwrap_or(0);
        // Per command that carried any of the writes: how many, and the last
        // one counted, so a write that spans several extents counts it once.
        let mut carried_writes: HashMap<usize, (u64, usize)> = HashMap::new();
        // Commands never exceed this length, so a search window of it is complete.
        let longest = self.longest_command.get(&disk).copied().unwrap_or(0);
        let base = calls.target.start_sector * SECTOR_BYTES;
        let mut ranges = Vec::new();
        let writes = {
            let from = self.writes.partition_point(|w| w.target < target);
            let to = self.writes.partition_point(|w| w.target <= target);
            &self.writes[from..to]
        };
        for (number, write) in writes.iter().enumerate() {
            let Some(offset) = write.offset else {
                result.bytes.unknown_offset += write.bytes;
                continue;
            };
            if write.bytes == 0 {
                continue;
            }
            ranges.clear();
            match &calls.target.file {
                None => ranges.push((base + offset, write.bytes)),
                Some(_) => match &calls.file_map {
                    Some(Ok(map)) => device_ranges(
                        map,
                        base,
                        offset,
                        write.bytes,
                        &mut ranges,
                        &mut result.bytes,
                    ),
                    _ => {
                        result.bytes.unmappable += write.bytes;
                        continue;
                    }
                },
            }
            let mut carried = 0;
            for &(first, length) in &ranges {
                let end = first + length;
                // Union of the commands' overlap with [first, end), in start order.
                let mut covered_to = first;
                let mut covered = 0;
                for_each_overlapping(commands, longest, first, end, |index, start, stop| {
                    let (writes, last) = carried_writes.entry(index).or_insert((0, usize::MAX));
                    if *last != number {
                        *last = number;
                        *writes += 1;
                        carried += 1;
                    }
                    let (from, to) = (start.max(covered_to), stop.min(end));
                    if to > from {
                        covered += to - from;
                        covered_to = to;
                    }
                });
                result.bytes.matched += covered;
                result.bytes.not_written_back += length - covered;
                for_each_overlapping(bios, longest_bio, first, end, |index, _, _| {
                    carried_bios.insert(index);
                });
            }
            let _ = result.commands_per_write.record(carried);
        }
        for (count, _) in carried_writes.into_values() {
            result.commands += 1;
            let _ = result.writes_per_command.record(count);
        }
        for index in carried_bios {
            result.bios += 1;
            let (start, stop) = bios[index].bytes();
            let _ = result.bio_size.record((stop - start).max(1));
        }
        result
    }

    /// Commands by disk and sector, writes by target (each target's in
    /// program order), and each disk's longest command.
    fn sort_for_matching(&mut self) {
        if self.sorted {
            return;
        }
        self.commands.sort();
        self.bios.sort();
        self.writes.sort_by_key(|write| write.target);
        self.longest_command = longest_by_disk(&self.commands);
        self.longest_bio = longest_by_disk(&self.bios);
        self.sorted = true;
    }
}

/// The ones on `disk`, of ranges sorted by disk.
fn on_disk(sorted: &[DiskRange], disk: u32) -> &[DiskRange] {
    let from = sorted.partition_point(|c| c.disk < disk);
    let to = sorted.partition_point(|c| c.disk <= disk);
    &sorted[from..to]
}

/// Each disk's longest range, in bytes.
fn longest_by_disk(ranges: &[DiskRange]) -> HashMap<u32, u64> {
    let mut longest: HashMap<u32, u64> = HashMap::new();
    for range in ranges {
        let bytes = longest.entry(range.disk).or_insert(0);
        *bytes = (*bytes).max(u64::from(range.nr_sector) * SECTOR_BYTES);
    }
    longest
}

/// Calls `each(index, start, end)` for the ranges of `sorted` (one disk's,
/// by sector, none longer than `longest` bytes) that overlap [first, end).
fn for_each_overlapping(
    sorted: &[DiskRange],
    longest: u64,
    first: u64,
    end: u64,
    mut each: impl FnMut(usize, u64, u64),
) {
    let lower = first.saturating_sub(longest);
    let from = sorted.partition_point(|c| c.sector * SECTOR_BYTES < lower);
    for (index, range) in sorted.iter().enumerate().skip(from) {
        let (start, stop) = range.bytes();
        if start >= end {
            break;
        }
        if stop > first {
            each(index, start, stop);
        }
    }
}

impl DiskRange {
    /// Its device byte range, [start, end).
    fn bytes(&self) -> (u64, u64) {
        let start = self.sector * SECTOR_BYTES;
        (start, start + u64::from(self.nr_sector) * SECTOR_BYTES)
    }
}

/// The device byte ranges (disk-absolute) holding file bytes
/// [offset, offset + length), into `ranges`; what has none is tallied.
fn device_ranges(
    map: &FileMap,
    base: u64,
    offset: u64,
    length: u64,
    ranges: &mut Vec<(u64, u64)>,
    tally: &mut WriteBytes,
) {
    let end = offset.saturating_add(length);
    let mut cursor = offset;
    let from = map.extents.partition_point(|extent| extent.end() <= offset);
    for extent in &map.extents[from..] {
        if extent.logical >= end {
            break;
        }
        let (first, last) = (extent.logical.max(cursor), extent.end().min(end));
        if last <= first {
            continue;
        }
        // A gap before this extent is a hole.
        tally.unmappable += first - cursor;
        match extent.kind {
            ExtentKind::Mapped => ranges.push((
                base + extent.physical + (first - extent.logical),
                last - first,
            )),
            ExtentKind::Delalloc => tally.delalloc += last - first,
            ExtentKind::Unmappable => tally.unmappable += last - first,
        }
        cursor = last;
    }
    tally.unmappable += end - cursor;
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
            file: None,
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
        let mut matcher = RunMatcher::new(OnePartition);
        // Two 32 KiB writes at partition offsets 0 and 32 KiB.
        matcher.process_event(&write(3, 0, 32768));
        matcher.process_event(&write(3, 32768, 32768));
        // Device saw one-sector commands for the first write, one 64-sector command for the second.
        for sector in 1000..1064 {
            matcher.block_event(&issue(sector, 1));
        }
        matcher.block_event(&issue(1064, 64));
        let calls = &matcher.targets()[0];
        assert_eq!((calls.write_syscalls, calls.write_bytes), (2, 65536));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.len(), 2);
        assert_eq!(matched.commands_per_write.max(), 64);
        assert_eq!(matched.commands_per_write.min(), 1);
        assert_eq!(matched.writes_per_command.len(), 65);
        assert_eq!(matched.writes_per_command.max(), 1);
    }

    #[test]
    fn a_merged_command_carries_several_writes() {
        let mut matcher = RunMatcher::new(OnePartition);
        for n in 0..4 {
            matcher.process_event(&write(3, n * 4096, 4096));
        }
        matcher.block_event(&issue(1000, 32));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.writes_per_command.max(), 4);
        assert_eq!(matched.commands_per_write.max(), 1);
    }

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

    #[test]
    fn a_requeued_command_is_matched_once() {
        let mut matcher = RunMatcher::new(OnePartition);
        matcher.process_event(&write(3, 0, 1 << 20));
        // A 2048-sector write split 2032 + 16; the tail requeued, then issued again.
        matcher.block_event(&issue(1000, 2032));
        matcher.block_event(&issue(3032, 16));
        matcher.block_event(&BlockEvent {
            kind: EventKind::Requeue as u8,
            ..issue(3032, 16)
        });
        matcher.block_event(&issue(3032, 16));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.max(), 2);
        assert_eq!(matched.writes_per_command.len(), 2);
    }

    /// `/mnt/f` on loop0p2 (partition start 1000), opened as fd 3 while traced.
    struct OneFile;

    fn file_on_loop0p2() -> FdTarget {
        FdTarget {
            file: Some(TargetFile {
                path: "/mnt/f".into(),
                inode: 12,
            }),
            ..loop0p2()
        }
    }

    impl FdResolver for OneFile {
        fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<FdTarget> {
            (path == "/mnt/f").then(file_on_loop0p2)
        }

        fn resolve_fd(&mut self, _tgid: u32, _fd: u32) -> Option<FdTarget> {
            None
        }
    }

    fn extent(logical: u64, physical: u64, length: u64, kind: ExtentKind) -> FileExtent {
        FileExtent {
            logical,
            physical,
            length,
            kind,
        }
    }

    use crate::geometry::fiemap::FileExtent;

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

    #[test]
    fn plain_writes_to_a_file_follow_its_position_across_dups_and_extents() {
        let mut matcher = RunMatcher::new(OneFile);
        // dd: open as 3, dup2 onto 1, four 64 KiB write()s without offsets.
        matcher.open_event(&open(42, 3, "/mnt/f"));
        matcher.process_event(&fd_call(ProcessEventKind::Dup2, 3, 1));
        for _ in 0..4 {
            matcher.process_event(&plain_write(1));
        }
        // File bytes 0..128K at partition byte 1 MiB, 128K..256K at 4 MiB.
        matcher.set_file_map(
            0,
            Ok(FileMap {
                extents: vec![
                    extent(131072, 4 << 20, 131072, ExtentKind::Mapped),
                    extent(0, 1 << 20, 131072, ExtentKind::Mapped),
                ],
                truncated: false,
            }),
        );
        let sector = |partition_bytes: u64| 1000 + partition_bytes / 512;
        // One 128-sector command per write; a journal write elsewhere.
        for (at, offset) in [
            (1 << 20, 0),
            (1 << 20, 65536),
            (4 << 20, 0),
            (4 << 20, 65536),
        ] {
            matcher.block_event(&issue(sector(at + offset), 128));
        }
        matcher.block_event(&issue(sector(8 << 20), 8));
        // Bios as queued: two 64 KiB and one 128 KiB over the file, one elsewhere.
        for (at, sectors) in [(1 << 20, 128), (1 << 20, 256), (4 << 20, 256), (8 << 20, 8)] {
            matcher.block_event(&BlockEvent {
                kind: EventKind::Queue as u8,
                ..issue(sector(at), sectors)
            });
        }
        let matched = matcher.match_writes(0);
        assert_eq!(matched.bios, 3);
        assert_eq!(matched.bio_size.min(), 65536);
        assert_eq!(matched.bio_size.count_between(131072, 131072), 2);
        assert_eq!(matched.commands, 4, "the journal write is not the file's");
        assert_eq!(matched.commands_per_write.len(), 4);
        assert_eq!(
            (
                matched.commands_per_write.min(),
                matched.commands_per_write.max()
            ),
            (1, 1)
        );
        assert_eq!(
            matched.bytes,
            WriteBytes {
                matched: 4 * 65536,
                ..WriteBytes::default()
            }
        );
    }

    #[test]
    fn a_write_across_two_extents_counts_a_command_over_both_once() {
        let mut matcher = RunMatcher::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        matcher.process_event(&write(3, 0, 8192));
        // Two physically adjacent extents, one command over both.
        matcher.set_file_map(
            0,
            Ok(FileMap {
                extents: vec![
                    extent(0, 0, 4096, ExtentKind::Mapped),
                    extent(4096, 4096, 4096, ExtentKind::Mapped),
                ],
                truncated: false,
            }),
        );
        matcher.block_event(&issue(1000, 16));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.max(), 1);
        assert_eq!(matched.writes_per_command.max(), 1);
        assert_eq!(matched.bytes.matched, 8192);
    }

    #[test]
    fn dirty_delalloc_holes_and_unknown_offsets_are_not_matched_and_say_why() {
        let mut matcher = RunMatcher::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        for n in 0..4 {
            matcher.process_event(&write(3, n * 4096, 4096));
        }
        // A write through an fd inherited from before tracing.
        matcher.fds.insert(
            (42, 9),
            Some(OpenTarget {
                target: 0,
                description: None,
            }),
        );
        matcher.process_event(&plain_write(9));
        // Block 0 written back; block 1 allocated but still dirty; block 2
        // delalloc; block 3 a hole (punched after the write).
        matcher.set_file_map(
            0,
            Ok(FileMap {
                extents: vec![
                    extent(0, 0, 8192, ExtentKind::Mapped),
                    extent(8192, 0, 4096, ExtentKind::Delalloc),
                ],
                truncated: false,
            }),
        );
        matcher.block_event(&issue(1000, 8));
        let matched = matcher.match_writes(0);
        assert_eq!(
            matched.bytes,
            WriteBytes {
                matched: 4096,
                not_written_back: 4096,
                delalloc: 4096,
                unmappable: 4096,
                unknown_offset: 65536,
            }
        );
        // Without a map, nothing of the file can be placed.
        matcher.set_file_map(0, Err("removed".into()));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.bytes.unmappable, 4 * 4096);
        assert_eq!(matched.commands, 0);
    }

    #[test]
    fn preflush_write_counts_as_write() {
        assert!(is_write(b"FWS\0\0\0\0\0"));
        assert!(is_write(b"WFS\0\0\0\0\0"));
        assert!(!is_write(b"F\0\0\0\0\0\0\0"));
        assert!(!is_write(b"RA\0\0\0\0\0\0"));
    }
}
