//! Sector matching: the writes kept, placed on their disk's bytes (a
//! device's own offsets, or a file's offsets through its extent map), and
//! the write commands and bios kept over the same bytes, counted both ways
//! (commands per write, writes per command). By sector range alone: the
//! commands and bios are the whole run's, before or after the write.

use std::collections::{HashMap, HashSet};

use hdrhistogram::Histogram;

use super::{NotKept, TargetCalls, WriteCall, MAX_BIOS, MAX_COMMANDS, MAX_WRITES};
use crate::blk::SECTOR_BYTES;
use crate::engine::stats::new_histogram;
use crate::geometry::fiemap::{ExtentKind, FileMap};

/// A write command issued, or a write bio queued, on a whole disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct DiskRange {
    /// The disk's `dev_t`, as the kernel gives it.
    pub(super) disk: u32,
    /// Its first sector, absolute on the disk.
    pub(super) sector: u64,
    pub(super) nr_sector: u32,
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

/// The writes, commands and bios of the run, kept for matching.
#[derive(Default)]
pub(super) struct SectorMatcher {
    writes: Vec<WriteCall>,
    commands: Vec<DiskRange>,
    /// Write bios as queued (after partition remapping): a file's bios are
    /// those over its sectors, whoever submitted them (writeback included).
    bios: Vec<DiskRange>,
    /// `writes`, `commands` and `bios` are in matching order (see `sort_for_matching`).
    sorted: bool,
    /// Per disk, its longest command and bio in bytes: how far before a
    /// write's first byte the sorted search must start.
    longest_command: HashMap<u32, u64>,
    longest_bio: HashMap<u32, u64>,
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

    /// The writes to target number `target` (whose tally is `calls`; none
    /// matches nothing) matched: see [`super::RunMatcher::match_writes`].
    pub(super) fn match_writes(
        &mut self,
        target: usize,
        calls: Option<&TargetCalls>,
    ) -> WriteMatch {
        self.sort_for_matching();
        let mut result = WriteMatch {
            commands_per_write: new_histogram(),
            writes_per_command: new_histogram(),
            commands: 0,
            bios: 0,
            bio_size: new_histogram(),
            bytes: WriteBytes::default(),
        };
        let Some(calls) = calls else {
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
        let longest_command = self.longest_command.get(&disk).copied().unwrap_or(0);
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
                    Some(Ok(map)) => disk_byte_ranges(
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
                for_each_overlapping(
                    commands,
                    longest_command,
                    first,
                    end,
                    |index, start, stop| {
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
                    },
                );
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
    /// program order), and each disk's longest command and bio.
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
            }
        );
        // Without a map, nothing of the file can be placed.
        matcher.set_file_map(0, Err(std::io::Error::other("removed")));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.bytes.unmappable, 4 * 4096);
        assert_eq!(matched.commands, 0);
    }
}
