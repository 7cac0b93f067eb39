//! Sector matching: the writes kept, placed on their disk's bytes (a
//! device's own offsets, or a file's offsets through its extent map), and
//! the write commands and bios kept over the same bytes, counted both ways
//! (commands per write, writes per command).
//!
//! A command carries a write's data when it is over the write's bytes and
//! was issued after the write began and before a later write over those
//! disk bytes began, through any target (from then on the bytes are the
//! later write's; a file renamed is a new target with the same bytes). So a block rewritten and synced fifty times is fifty writes of
//! about one command each, not fifty writes of fifty. Bytes a later write
//! replaced before any command wrote them are counted as overwritten, not
//! as a miss. Bios stay matched by sector range alone.

use std::collections::{BTreeMap, HashMap, HashSet};

use hdrhistogram::Histogram;

use super::{NotKept, TargetCalls, WriteCall, MAX_BIOS, MAX_COMMANDS, MAX_WRITES};
use crate::blk::SECTOR_BYTES;
use crate::engine::outcome::AtomicWrite;
use crate::engine::stats::{new_histogram, AtomicTally};
use crate::geometry::fiemap::{ExtentKind, FileMap};

/// A write command issued, or a write bio queued, on a whole disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct DiskRange {
    /// The disk's `dev_t`, as the kernel gives it.
    pub(super) disk: u32,
    /// Its first sector, absolute on the disk.
    pub(super) sector: u64,
    pub(super) nr_sector: u32,
    /// When it was issued (a command) or queued (a bio), kernel monotonic ns.
    pub(super) ts_ns: u64,
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
    /// Untorn writes among the bios over the writes' sectors, each proven
    /// one command of its own or named.
    pub atomic: AtomicTally,
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
    /// Replaced by a later write of the command before any device command
    /// wrote them: their data was never meant to reach the device.
    pub overwritten: u64,
    /// In delayed-allocation extents: still dirty, and no sectors yet.
    pub delalloc: u64,
    /// No device address: extents FIEMAP could not place, holes (cut or
    /// punched since), or a map that could not be read.
    pub unmappable: u64,
    /// Writes whose file offset was not known.
    pub unknown_offset: u64,
    /// Flushed ranges of shared mappings (kept apart from the bytes of
    /// write syscalls above): bytes commands wrote during the run, and
    /// the rest (pages not stored to, still dirty, or holes).
    pub mapped_written: u64,
    pub mapped_not_written: u64,
}

/// The writes, commands and bios of the run, kept for matching.
#[derive(Default)]
pub(super) struct SectorMatcher {
    writes: Vec<WriteCall>,
    commands: Vec<DiskRange>,
    /// Write bios as queued (after partition remapping): a file's bios are
    /// those over its sectors, whoever submitted them (writeback included).
    bios: Vec<DiskRange>,
    /// Untorn write bios as they ended, in `atomic_ranges`' order once sorted.
    atomic: Vec<(DiskRange, AtomicWrite)>,
    atomic_ranges: Vec<DiskRange>,
    /// `writes`, `commands` and `bios` are in matching order (see `sort_for_matching`).
    sorted: bool,
    /// Per disk, its longest command and bio in bytes: how far before a
    /// write's first byte the sorted search must start.
    longest_command: HashMap<u32, u64>,
    longest_bio: HashMap<u32, u64>,
    /// Per disk: its writes placed and cut, made at the first match there.
    plans: HashMap<u32, DiskPlan>,
    pub(super) not_kept: NotKept,
}

impl SectorMatcher {
    pub(super) fn keep_write(&mut self, write: WriteCall) {
        if self.writes.len() < MAX_WRITES {
            self.sorted = false;
            self.writes.push(write);
        } else {
            self.not_kept.writes += 1;
        }
    }

    pub(super) fn keep_command(&mut self, command: DiskRange) {
        if self.commands.len() < MAX_COMMANDS {
            self.sorted = false;
            self.commands.push(command);
        } else {
            self.not_kept.commands += 1;
        }
    }

    pub(super) fn keep_bio(&mut self, bio: DiskRange) {
        if self.bios.len() < MAX_BIOS {
            self.sorted = false;
            self.bios.push(bio);
        } else {
            self.not_kept.bios += 1;
        }
    }

    pub(super) fn keep_atomic(&mut self, write: AtomicWrite, queue_ns: u64) {
        if self.atomic.len() < MAX_BIOS {
            self.sorted = false;
            let range = DiskRange {
                disk: write.dev,
                sector: write.sector,
                nr_sector: write.sectors,
                ts_ns: queue_ns,
            };
            self.atomic.push((range, write));
        } else {
            self.not_kept.bios += 1;
        }
    }

    /// The writes to target number `target` of `targets` (none matches
    /// nothing) matched: see [`super::RunMatcher::match_writes`].
    pub(super) fn match_writes(&mut self, target: usize, targets: &[TargetCalls]) -> WriteMatch {
        self.sort_for_matching();
        let mut result = WriteMatch {
            commands_per_write: new_histogram(),
            writes_per_command: new_histogram(),
            commands: 0,
            bios: 0,
            bio_size: new_histogram(),
            bytes: WriteBytes::default(),
            atomic: AtomicTally::default(),
        };
        let Some(calls) = targets.get(target) else {
            return result;
        };
        let disk = calls.target.disk_dev.to_kernel();
        if !self.plans.contains_key(&disk) {
            let plan = self.plan(disk, targets);
            self.plans.insert(disk, plan);
        }
        let plan = &self.plans[&disk];
        let commands = on_disk(&self.commands, disk);
        let bios = on_disk(&self.bios, disk);
        let mut carried_bios: HashSet<usize> = HashSet::new();
        let atomic_from = self.atomic_ranges.partition_point(|r| r.disk < disk);
        let atomic_to = self.atomic_ranges.partition_point(|r| r.disk <= disk);
        let atomic = &self.atomic_ranges[atomic_from..atomic_to];
        let longest_atomic = atomic
            .iter()
            .map(|r| u64::from(r.nr_sector) * SECTOR_BYTES)
            .max()
            .unwrap_or(0);
        let mut carried_atomic: HashSet<usize> = HashSet::new();
        let longest_bio = self.longest_bio.get(&disk).copied().unwrap_or(0);
        // Commands never exceed this length, so a search window of it is complete.
        let longest_command = self.longest_command.get(&disk).copied().unwrap_or(0);
        let from = self.writes.partition_point(|w| w.target < target);
        let to = self.writes.partition_point(|w| w.target <= target);
        if let Some(tally) = plan.tallies.get(&target) {
            result.bytes = *tally;
        }
        let segments = {
            let first = plan.segments.partition_point(|s| s.write < from);
            let last = plan.segments.partition_point(|s| s.write < to);
            &plan.segments[first..last]
        };
        // Per command that carried any of the writes: how many, and the last
        // one counted, so a write over several segments counts it once.
        let mut carried_writes: HashMap<usize, (u64, usize)> = HashMap::new();
        let mut carried = vec![0u64; to - from];
        for segment in segments {
            let number = segment.write;
            let from_ns = self.writes[number].at_ns;
            // Union of the in-window commands' overlap with the segment, in start order.
            let mut covered_to = segment.first;
            let mut covered = 0;
            for_each_overlapping(
                commands,
                longest_command,
                segment.first,
                segment.end,
                |index, start, stop| {
                    let issued = commands[index].ts_ns;
                    if issued < from_ns || issued >= segment.until_ns {
                        return;
                    }
                    let (writes, last) = carried_writes.entry(index).or_insert((0, usize::MAX));
                    if *last != number {
                        *last = number;
                        *writes += 1;
                        carried[number - from] += 1;
                    }
                    let (from, to) = (start.max(covered_to), stop.min(segment.end));
                    if to > from {
                        covered += to - from;
                        covered_to = to;
                    }
                },
            );
            let length = segment.end - segment.first;
            if self.writes[number].mapped {
                result.bytes.mapped_written += covered;
                result.bytes.mapped_not_written += length - covered;
                continue;
            }
            result.bytes.matched += covered;
            if segment.until_ns == u64::MAX {
                result.bytes.not_written_back += length - covered;
            } else {
                result.bytes.overwritten += length - covered;
            }
        }
        for number in from..to {
            let Some(ranges) = plan.placed.get(&number) else {
                continue;
            };
            let _ = result.commands_per_write.record(carried[number - from]);
            for &(first, length) in ranges {
                for_each_overlapping(bios, longest_bio, first, first + length, |index, _, _| {
                    carried_bios.insert(index);
                });
                for_each_overlapping(
                    atomic,
                    longest_atomic,
                    first,
                    first + length,
                    |index, _, _| {
                        carried_atomic.insert(atomic_from + index);
                    },
                );
            }
        }
        for (count, _) in carried_writes.into_values() {
            result.commands += 1;
            let _ = result.writes_per_command.record(count);
        }
        let mut carried_atomic: Vec<usize> = carried_atomic.into_iter().collect();
        carried_atomic.sort_unstable();
        for index in carried_atomic {
            result.atomic.count(self.atomic[index].1);
        }
        for index in carried_bios {
            result.bios += 1;
            let (start, stop) = bios[index].bytes();
            let _ = result.bio_size.record((stop - start).max(1));
        }
        result
    }

    /// Every write of the targets on `disk` placed on its bytes, and cut into
    /// segments by the later writes over them, whichever target made those
    /// (a file renamed keeps its bytes under a new name, a new target).
    fn plan(&self, disk: u32, targets: &[TargetCalls]) -> DiskPlan {
        let mut plan = DiskPlan::default();
        let mut order: Vec<(u64, usize)> = Vec::new();
        for (number, write) in self.writes.iter().enumerate() {
            let Some(calls) = targets.get(write.target) else {
                continue;
            };
            if calls.target.disk_dev.to_kernel() != disk {
                continue;
            }
            let tally = plan.tallies.entry(write.target).or_default();
            // A mapping's holes and delalloc bytes are pages not (yet) written back.
            let mut mapped_tally = WriteBytes::default();
            let placed = place(
                write,
                calls,
                if write.mapped {
                    &mut mapped_tally
                } else {
                    tally
                },
            );
            tally.mapped_not_written += mapped_tally.delalloc + mapped_tally.unmappable;
            if let Some(ranges) = placed {
                plan.placed.insert(number, ranges);
                order.push((write.at_ns, number));
            }
        }
        order.sort_unstable();
        plan.segments = carried_until(&order, &plan.placed);
        plan
    }

    /// A file's extent map changed: the plans are made afresh.
    pub(super) fn maps_changed(&mut self) {
        self.plans.clear();
    }

    /// Commands by disk and sector, writes by target (each target's in
    /// program order), and each disk's longest command and bio.
    fn sort_for_matching(&mut self) {
        if self.sorted {
            return;
        }
        self.plans.clear();
        self.commands.sort();
        self.bios.sort();
        self.atomic.sort_by_key(|(range, _)| *range);
        self.atomic_ranges = self.atomic.iter().map(|(range, _)| *range).collect();
        // Stable: writes that began at the same instant keep their order.
        self.writes.sort_by_key(|write| (write.target, write.at_ns));
        self.longest_command = longest_by_disk(&self.commands);
        self.longest_bio = longest_by_disk(&self.bios);
        self.sorted = true;
    }
}

/// One disk's writes placed and cut, for [`SectorMatcher::match_writes`].
#[derive(Default)]
struct DiskPlan {
    /// By write number: its disk byte ranges (placed writes only).
    placed: HashMap<usize, Vec<(u64, u64)>>,
    /// By write number, then start.
    segments: Vec<Segment>,
    /// Per target: its bytes that could not be placed, and why.
    tallies: HashMap<usize, WriteBytes>,
}

/// `write`'s disk byte ranges through its target (`calls`), or `None` when
/// it cannot be placed (the reason tallied). A file's delalloc bytes and
/// holes are tallied, and the rest placed.
fn place(
    write: &WriteCall,
    calls: &TargetCalls,
    tally: &mut WriteBytes,
) -> Option<Vec<(u64, u64)>> {
    let Some(offset) = write.offset else {
        tally.unknown_offset += write.bytes;
        return None;
    };
    if write.bytes == 0 {
        return None;
    }
    let base = calls.target.start_sector * SECTOR_BYTES;
    let mut ranges = Vec::new();
    match &calls.target.file {
        None => ranges.push((base + offset, write.bytes)),
        Some(_) => match &calls.file_map {
            Some(Ok(map)) => disk_byte_ranges(map, base, offset, write.bytes, &mut ranges, tally),
            _ => {
                tally.unmappable += write.bytes;
                return None;
            }
        },
    }
    Some(ranges)
}

/// A run of disk bytes [first, end) that were write number `write`'s from
/// its start until `until_ns`, when a later write over them began
/// (`u64::MAX`: none did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    write: usize,
    first: u64,
    end: u64,
    until_ns: u64,
}

/// Cuts each placed write's disk ranges (`placed`, by write number) into
/// segments, each until the next write over it began, the writes taken in
/// `order` (the instant each began, and its number): one sweep from the
/// last write back, keeping the bytes' nearest later writer in an interval
/// map. Segments come out by write number, then start.
fn carried_until(order: &[(u64, usize)], placed: &HashMap<usize, Vec<(u64, u64)>>) -> Vec<Segment> {
    // Disjoint intervals: start -> (end, the nearest later write's start).
    let mut later: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut segments = Vec::new();
    for &(at_ns, number) in order.iter().rev() {
        let Some(ranges) = placed.get(&number) else {
            continue;
        };
        for &(first, length) in ranges {
            let end = first + length;
            let mut cursor = first;
            for (start, stop, until_ns) in overlapping(&later, first, end) {
                let (from, to) = (start.max(first), stop.min(end));
                if from > cursor {
                    segments.push(Segment {
                        write: number,
                        first: cursor,
                        end: from,
                        until_ns: u64::MAX,
                    });
                }
                segments.push(Segment {
                    write: number,
                    first: from,
                    end: to,
                    until_ns,
                });
                cursor = to;
            }
            if cursor < end {
                segments.push(Segment {
                    write: number,
                    first: cursor,
                    end,
                    until_ns: u64::MAX,
                });
            }
        }
        // Only now, so a write's own ranges never cut each other.
        for &(first, length) in ranges {
            overwrite(&mut later, first, first + length, at_ns);
        }
    }
    segments.sort_unstable_by_key(|segment| (segment.write, segment.first));
    segments
}

/// The intervals of `map` that overlap [first, end), in order.
fn overlapping(map: &BTreeMap<u64, (u64, u64)>, first: u64, end: u64) -> Vec<(u64, u64, u64)> {
    let before = map
        .range(..first)
        .next_back()
        .filter(|(_, &(stop, _))| stop > first);
    before
        .into_iter()
        .chain(map.range(first..end))
        .map(|(&start, &(stop, value))| (start, stop, value))
        .collect()
}

/// Sets [first, end) of `map` to `value`, cutting what it overlapped.
fn overwrite(map: &mut BTreeMap<u64, (u64, u64)>, first: u64, end: u64, value: u64) {
    for (start, stop, old) in overlapping(map, first, end) {
        map.remove(&start);
        if start < first {
            map.insert(start, (first, old));
        }
        if stop > end {
            map.insert(end, (stop, old));
        }
    }
    map.insert(first, (end, value));
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
    /// Its disk byte range, [start, end).
    fn bytes(&self) -> (u64, u64) {
        let start = self.sector * SECTOR_BYTES;
        (start, start + u64::from(self.nr_sector) * SECTOR_BYTES)
    }
}

/// The disk byte ranges (absolute, not the partition's) holding file bytes
/// [offset, offset + length), into `ranges`; what has none is tallied.
fn disk_byte_ranges(
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

#[cfg(test)]
mod tests {
    use tracer_common::{BlockEvent, EventKind, ProcessEventKind};

    use super::super::test_fixtures::{
        extent, fd_call, issue, open, plain_write, write, OneFile, OnePartition, Traced,
    };
    use super::*;

    #[test]
    fn each_32k_write_split_into_512b_commands_is_counted_both_ways() {
        let mut matcher = Traced::new(OnePartition);
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

    /// pwrite64 of 4 KiB at partition `offset` that began at `at_ns` and
    /// returned 5 µs later.
    fn write_at(offset: u64, at_ns: u64) -> tracer_common::ProcessEvent {
        tracer_common::ProcessEvent {
            ts_ns: at_ns + 5_000,
            ring: 5,
            ..write(3, offset, 4096)
        }
    }

    /// A command of `nr_sector` at partition sector `sector`, issued at `ts_ns`.
    fn issue_at(sector: u64, nr_sector: u32, ts_ns: u64) -> BlockEvent {
        BlockEvent {
            ts_ns,
            ..issue(1000 + sector, nr_sector)
        }
    }

    #[test]
    fn a_block_rewritten_and_synced_fifty_times_is_one_command_per_write() {
        let mut matcher = Traced::new(OnePartition);
        for n in 0..50u64 {
            let at = 1_000_000 * (n + 1);
            matcher.process_event(&write_at(0, at));
            // Written back after the write returned, before the next began.
            matcher.block_event(&issue_at(0, 8, at + 100_000));
        }
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.len(), 50);
        assert_eq!(
            (
                matched.commands_per_write.min(),
                matched.commands_per_write.max()
            ),
            (1, 1)
        );
        assert_eq!(matched.writes_per_command.max(), 1);
        assert_eq!(matched.commands, 50);
        assert_eq!(matched.bytes.matched, 50 * 4096);
    }

    #[test]
    fn a_direct_write_carries_the_command_issued_inside_its_syscall() {
        let mut matcher = Traced::new(OnePartition);
        // An older command over the same sectors carries none of it.
        matcher.block_event(&issue_at(0, 8, 500_000));
        // Began at 1 ms, returned at 1.005 ms; the command went at 1.002 ms.
        matcher.process_event(&write_at(0, 1_000_000));
        matcher.block_event(&issue_at(0, 8, 1_002_000));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.max(), 1);
        assert_eq!(matched.commands, 1);
    }

    #[test]
    fn bytes_rewritten_before_writeback_belong_to_the_later_write() {
        let mut matcher = Traced::new(OnePartition);
        // 8 KiB at 0, then 4 KiB over its second half, then one command over both.
        matcher.process_event(&tracer_common::ProcessEvent {
            ts_ns: 1_000_000,
            ..write(3, 0, 8192)
        });
        matcher.process_event(&write_at(4096, 2_000_000));
        // And 4 KiB at 64 KiB twice with nothing between: the first never reached the disk.
        matcher.process_event(&write_at(65536, 3_000_000));
        matcher.process_event(&write_at(65536, 4_000_000));
        matcher.block_event(&issue_at(0, 16, 5_000_000));
        matcher.block_event(&issue_at(128, 8, 5_000_000));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands, 2);
        // 1 (the 8 KiB write's first half), 1, 0 (replaced), 1.
        assert_eq!(matched.commands_per_write.len(), 4);
        assert_eq!(matched.commands_per_write.count_between(0, 0), 1);
        assert_eq!(matched.commands_per_write.max(), 1);
        assert_eq!(matched.writes_per_command.max(), 2);
        assert_eq!(
            matched.bytes,
            WriteBytes {
                matched: 4096 + 4096 + 4096,
                overwritten: 4096 + 4096,
                ..WriteBytes::default()
            }
        );
    }

    /// `/mnt/tmp` renamed to `/mnt/seg`: one inode, two targets.
    struct Renamed;

    impl super::super::FdResolver for Renamed {
        fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<super::super::FdTarget> {
            let mut target = super::super::test_fixtures::file_on_loop0p2();
            target.file.as_mut()?.path = path.to_string();
            path.starts_with("/mnt/").then_some(target)
        }

        fn resolve_fd(&mut self, _tgid: u32, _fd: u32) -> Option<super::super::FdTarget> {
            None
        }
    }

    #[test]
    fn a_later_write_under_a_files_new_name_ends_the_old_names_window() {
        let mut matcher = Traced::new(Renamed);
        // PostgreSQL's WAL: zero-filled as xlogtemp, renamed, then written as the segment.
        matcher.open_event(&open(42, 3, "/mnt/tmp"));
        matcher.process_event(&tracer_common::ProcessEvent {
            ts_ns: 1_000_000,
            ..write(3, 0, 8192)
        });
        matcher.block_event(&issue_at(0, 16, 1_500_000));
        matcher.open_event(&open(42, 4, "/mnt/seg"));
        for n in 0..10u64 {
            let at = 2_000_000 * (n + 1);
            matcher.process_event(&tracer_common::ProcessEvent {
                ts_ns: at + 5_000,
                ring: 5,
                ..write(4, 0, 8192)
            });
            matcher.block_event(&issue_at(0, 16, at + 100_000));
        }
        let map = || {
            Ok(FileMap {
                extents: vec![extent(0, 0, 8192, ExtentKind::Mapped)],
                truncated: false,
            })
        };
        matcher.set_file_map(0, map());
        matcher.set_file_map(1, map());
        let zeroed = matcher.match_writes(0);
        assert_eq!(zeroed.commands, 1, "not the segment's ten");
        assert_eq!(zeroed.bytes.matched, 8192);
        let segment = matcher.match_writes(1);
        assert_eq!(segment.commands, 10);
        assert_eq!(segment.commands_per_write.max(), 1);
    }

    #[test]
    fn segments_end_where_the_next_write_over_them_began() {
        // Write 0 over [0, 100), write 1 over [50, 60), write 2 over [0, 10) and [90, 200).
        let order = [(10, 0), (20, 1), (30, 2)];
        let placed = HashMap::from([
            (0, vec![(0, 100)]),
            (1, vec![(50, 10)]),
            (2, vec![(0, 10), (90, 110)]),
        ]);
        let cut: Vec<(usize, u64, u64, u64)> = carried_until(&order, &placed)
            .into_iter()
            .map(|s| (s.write, s.first, s.end, s.until_ns))
            .collect();
        let open = u64::MAX;
        assert_eq!(
            cut,
            [
                (0, 0, 10, 30),
                (0, 10, 50, open),
                (0, 50, 60, 20),
                (0, 60, 90, open),
                (0, 90, 100, 30),
                (1, 50, 60, open),
                (2, 0, 10, open),
                (2, 90, 200, open),
            ]
        );
    }

    #[test]
    fn a_merged_command_carries_several_writes() {
        let mut matcher = Traced::new(OnePartition);
        for n in 0..4 {
            matcher.process_event(&write(3, n * 4096, 4096));
        }
        matcher.block_event(&issue(1000, 32));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.writes_per_command.max(), 4);
        assert_eq!(matched.commands_per_write.max(), 1);
    }

    #[test]
    fn plain_writes_to_a_file_follow_its_position_across_dups_and_extents() {
        let mut matcher = Traced::new(OneFile);
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
        let mut matcher = Traced::new(OneFile);
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
        let mut matcher = Traced::new(OneFile);
        matcher.open_event(&open(42, 3, "/mnt/f"));
        for n in 0..4 {
            matcher.process_event(&write(3, n * 4096, 4096));
        }
        // A write through an fd inherited from before tracing.
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
                overwritten: 0,
                ..WriteBytes::default()
            }
        );
        // Without a map, nothing of the file can be placed.
        matcher.set_file_map(0, Err(std::io::Error::other("removed")));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.bytes.unmappable, 4 * 4096);
        assert_eq!(matched.commands, 0);
    }
}
