//! Shared writable mappings of the traced tree: stores to them are writes
//! no syscall shows. Each mapping (process, address range, file offset,
//! target) is flushed as a mapped write over its file range at msync, at
//! munmap, at exec, and when the run ends: a write that began when the
//! mapping was made or last flushed, so the commands over its bytes from
//! then on (written back by msync, fsync or the kernel's flusher) carried
//! its stores. Which pages were stored to is not seen: the bytes of a
//! mapped write that no command wrote are pages not stored to, or still
//! dirty, never a miss.

use super::WriteCall;

/// One mapping of a target, as mmap made it (munmap may trim it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    tgid: u32,
    start: u64,
    end: u64,
    /// The target's byte at `start`.
    file_offset: u64,
    target: usize,
    /// When its stores since the last flush began: made or last flushed.
    since_ns: u64,
}

/// Mappings beyond this many are not followed (counted).
const MAX_MAPPINGS: usize = 4096;

#[derive(Default)]
pub(super) struct Mappings {
    live: Vec<Mapping>,
    /// mmaps not followed: past [`MAX_MAPPINGS`].
    pub(super) not_followed: u64,
}

impl Mappings {
    /// mmap: `bytes` from address `start`, over `target` from `file_offset`.
    pub(super) fn map(
        &mut self,
        tgid: u32,
        start: u64,
        bytes: u64,
        file_offset: u64,
        target: usize,
        at_ns: u64,
    ) {
        if self.live.len() >= MAX_MAPPINGS {
            self.not_followed += 1;
            return;
        }
        // A fixed mapping over an old one replaces it (not flushed: rare).
        self.cut(tgid, start, start.saturating_add(bytes), &mut Vec::new());
        self.live.push(Mapping {
            tgid,
            start,
            end: start.saturating_add(bytes),
            file_offset,
            target,
            since_ns: at_ns,
        });
    }

    /// msync of `[start, start + bytes)`: each mapping's part in it is
    /// flushed, and its stores start afresh at `at_ns` (the call's return,
    /// so the commands msync issued belong to the write it flushed).
    pub(super) fn sync(&mut self, tgid: u32, start: u64, bytes: u64, at_ns: u64) -> Vec<WriteCall> {
        let end = start.saturating_add(bytes);
        let mut writes = Vec::new();
        for mapping in &mut self.live {
            if mapping.tgid != tgid || mapping.end <= start || mapping.start >= end {
                continue;
            }
            writes.push(flushed(
                mapping,
                start.max(mapping.start),
                end.min(mapping.end),
            ));
            mapping.since_ns = at_ns;
        }
        writes
    }

    /// munmap of `[start, start + bytes)`: the parts unmapped are flushed
    /// and forgotten; what is left of a mapping around them stays.
    pub(super) fn unmap(&mut self, tgid: u32, start: u64, bytes: u64) -> Vec<WriteCall> {
        let mut writes = Vec::new();
        self.cut(tgid, start, start.saturating_add(bytes), &mut writes);
        writes
    }

    /// The child of a fork shares its parent's shared mappings.
    pub(super) fn fork(&mut self, child: u32, parent: u32) {
        let inherited: Vec<Mapping> = self
            .live
            .iter()
            .filter(|mapping| mapping.tgid == parent)
            .map(|mapping| Mapping {
                tgid: child,
                ..*mapping
            })
            .collect();
        self.live.extend(inherited);
    }

    /// `tgid` exec'd: its address space, and so its mappings, are gone.
    pub(super) fn exec(&mut self, tgid: u32) -> Vec<WriteCall> {
        self.unmap(tgid, 0, u64::MAX)
    }

    /// The run is over: every mapping still there is flushed.
    pub(super) fn end(&mut self) -> Vec<WriteCall> {
        self.live
            .drain(..)
            .map(|mapping| flushed(&mapping, mapping.start, mapping.end))
            .collect()
    }

    /// Removes `[start, end)` of `tgid`'s mappings, flushing the parts removed into `writes`.
    fn cut(&mut self, tgid: u32, start: u64, end: u64, writes: &mut Vec<WriteCall>) {
        let mut kept = Vec::with_capacity(self.live.len());
        for mapping in self.live.drain(..) {
            if mapping.tgid != tgid || mapping.end <= start || mapping.start >= end {
                kept.push(mapping);
                continue;
            }
            writes.push(flushed(
                &mapping,
                start.max(mapping.start),
                end.min(mapping.end),
            ));
            if mapping.start < start {
                kept.push(Mapping {
                    end: start,
                    ..mapping
                });
            }
            if mapping.end > end {
                kept.push(Mapping {
                    start: end,
                    file_offset: mapping.file_offset + (end - mapping.start),
                    ..mapping
                });
            }
        }
        self.live = kept;
    }
}

/// The mapped write of `mapping`'s addresses `[from, to)`.
fn flushed(mapping: &Mapping, from: u64, to: u64) -> WriteCall {
    WriteCall {
        target: mapping.target,
        offset: Some(mapping.file_offset + (from - mapping.start)),
        bytes: to - from,
        at_ns: mapping.since_ns,
        mapped: true,
        direct: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn spans(writes: &[WriteCall]) -> Vec<(usize, u64, u64, u64)> {
        writes
            .iter()
            .map(|w| (w.target, w.offset.unwrap(), w.bytes, w.at_ns))
            .collect()
    }

    #[test]
    fn msync_flushes_the_part_synced_and_starts_its_stores_afresh() {
        let mut mappings = Mappings::default();
        // 16 pages at 0x10000 over target 3 from its byte 1 MiB, made at t=100.
        mappings.map(42, 0x10000, 16 * PAGE, 1 << 20, 3, 100);
        // Another process's msync of the same addresses is not this mapping's.
        assert!(mappings.sync(43, 0x10000, 16 * PAGE, 150).is_empty());
        let writes = mappings.sync(42, 0x10000 + 4 * PAGE, 4 * PAGE, 200);
        assert_eq!(spans(&writes), [(3, (1 << 20) + 4 * PAGE, 4 * PAGE, 100)]);
        assert!(writes[0].mapped);
        // The next flush of the whole mapping began at the last msync's return.
        let writes = mappings.sync(42, 0, u64::MAX, 300);
        assert_eq!(spans(&writes), [(3, 1 << 20, 16 * PAGE, 200)]);
    }

    #[test]
    fn munmap_flushes_and_trims_and_fork_exec_and_end_follow_the_tree() {
        let mut mappings = Mappings::default();
        mappings.map(42, 0x10000, 16 * PAGE, 0, 3, 100);
        mappings.fork(43, 42);
        // The middle 4 pages unmapped: flushed; the two ends stay.
        let writes = mappings.unmap(42, 0x10000 + 6 * PAGE, 4 * PAGE);
        assert_eq!(spans(&writes), [(3, 6 * PAGE, 4 * PAGE, 100)]);
        let writes = mappings.sync(42, 0x10000, 16 * PAGE, 300);
        assert_eq!(
            spans(&writes),
            [(3, 0, 6 * PAGE, 100), (3, 10 * PAGE, 6 * PAGE, 100)]
        );
        // The child's copy is whole; exec flushes and forgets it.
        let writes = mappings.exec(43);
        assert_eq!(spans(&writes), [(3, 0, 16 * PAGE, 100)]);
        assert!(mappings.exec(43).is_empty());
        let writes = mappings.end();
        assert_eq!(
            spans(&writes),
            [(3, 0, 6 * PAGE, 300), (3, 10 * PAGE, 6 * PAGE, 300)]
        );
        assert!(mappings.end().is_empty());
    }
}
