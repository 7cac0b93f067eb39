//! Puts the events of the per-CPU rings back into one kernel-time order.
//!
//! Each probe reads its timestamp after reserving its ring slot, so an event
//! reserved after the consumer sampled the clock carries a later timestamp.
//! A drain therefore samples the clock first, reads every ring, and hands on
//! only events stamped up to that instant; later ones wait for the next drain,
//! where rings that were behind may still add earlier ones.

use tracer_common::BlockEvent;

#[derive(Default)]
pub struct Reorder {
    pending: Vec<BlockEvent>,
    /// Each releasable event's timestamp (high bits) and arrival index (low
    /// 32), sorted in place: unique keys, so any sort is stable. Kept with
    /// the merge buffer between drains, so ordering allocates nothing. (A
    /// stable sort of the events themselves allocated a buffer as large as
    /// the drain, which `serve`'s allocator mapped afresh at every drain:
    /// docs/benchmarks.md, "Changes".)
    order: Vec<u128>,
    merge: Vec<u128>,
    runs: Vec<usize>,
}

impl Reorder {
    pub fn push(&mut self, event: BlockEvent) {
        self.pending.push(event);
    }

    /// Hands on, in timestamp order (ties in arrival order), every pending
    /// event stamped at or before `cutoff_ns`; keeps the rest.
    pub fn release(&mut self, cutoff_ns: u64, mut each: impl FnMut(&BlockEvent)) {
        self.order.clear();
        self.order.extend(
            self.pending
                .iter()
                .enumerate()
                .filter(|(_, event)| event.ts_ns <= cutoff_ns)
                .map(|(index, event)| (u128::from(event.ts_ns) << 32) | index as u128),
        );
        if self.order.is_empty() {
            return;
        }
        sort_runs(&mut self.order, &mut self.merge, &mut self.runs);
        for key in &self.order {
            each(&self.pending[(*key as u32) as usize]);
        }
        if self.order.len() == self.pending.len() {
            self.pending.clear();
        } else {
            self.pending.retain(|event| event.ts_ns > cutoff_ns);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }
}

/// Runs shorter than this are extended by insertion before merging.
const MIN_RUN: usize = 32;

/// Sorts `keys` as a natural merge sort: each ring's events arrive nearly in
/// order, so the input is a few long runs, merged pairwise through `merge`.
/// Linear in the keys per pass, log2(runs) passes, where a quicksort
/// ignores the runs (docs/benchmarks.md, "Changes").
fn sort_runs(keys: &mut Vec<u128>, merge: &mut Vec<u128>, runs: &mut Vec<usize>) {
    let len = keys.len();
    runs.clear();
    runs.push(0);
    let mut start = 0;
    while start < len {
        let mut end = start + 1;
        let short = (start + MIN_RUN).min(len);
        while end < len {
            if keys[end - 1] > keys[end] {
                if end >= short {
                    break;
                }
                // Insert keys[end] into the sorted keys[start..end].
                let key = keys[end];
                let mut at = end;
                while at > start && keys[at - 1] > key {
                    keys[at] = keys[at - 1];
                    at -= 1;
                }
                keys[at] = key;
            }
            end += 1;
        }
        runs.push(end);
        start = end;
    }
    while runs.len() > 2 {
        merge.clear();
        let mut kept = 1;
        let mut at = 0;
        while at + 2 < runs.len() {
            let (first, middle, last) = (runs[at], runs[at + 1], runs[at + 2]);
            merge_into(&keys[first..middle], &keys[middle..last], merge);
            runs[kept] = last;
            kept += 1;
            at += 2;
        }
        if at + 1 < runs.len() {
            merge.extend_from_slice(&keys[runs[at]..runs[at + 1]]);
            runs[kept] = runs[at + 1];
            kept += 1;
        }
        runs.truncate(kept);
        std::mem::swap(keys, merge);
    }
}

/// Appends the merge of two sorted slices to `out`.
fn merge_into(left: &[u128], right: &[u128], out: &mut Vec<u128>) {
    let (mut i, mut j) = (0, 0);
    while i < left.len() && j < right.len() {
        if left[i] <= right[j] {
            out.push(left[i]);
            i += 1;
        } else {
            out.push(right[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&left[i..]);
    out.extend_from_slice(&right[j..]);
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ts_ns: u64, sector: u64) -> BlockEvent {
        BlockEvent {
            ts_ns,
            sector,
            ..BlockEvent::ZERO
        }
    }

    #[test]
    fn rings_are_merged_by_time_and_later_events_wait() {
        let mut reorder = Reorder::default();
        // Ring 0 then ring 1, as a drain reads them.
        for (ts, sector) in [(10, 1), (30, 3), (50, 5), (20, 2), (40, 4), (40, 6)] {
            reorder.push(event(ts, sector));
        }
        let mut seen = Vec::new();
        reorder.release(40, |e| seen.push(e.sector));
        // Equal stamps keep arrival order; 50 waits for the next drain.
        assert_eq!(seen, vec![1, 2, 3, 4, 6]);
        assert_eq!(reorder.len(), 1);
        // A ring that was behind adds an earlier event next time.
        reorder.push(event(45, 7));
        seen.clear();
        reorder.release(u64::MAX, |e| seen.push(e.sector));
        assert_eq!(seen, vec![7, 5]);
        assert_eq!(reorder.len(), 0);
    }

    /// A reproducible stream of pseudo-random numbers (an LCG's high bits).
    fn numbers(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        }
    }

    #[test]
    fn sort_runs_sorts_any_input() {
        let mut next = numbers(11);
        let (mut merge, mut runs) = (Vec::new(), Vec::new());
        for len in [0usize, 1, 2, 31, 32, 33, 100, 1000, 5000] {
            for shape in 0..4 {
                let mut keys: Vec<u128> = (0..len)
                    .map(|i| match shape {
                        0 => u128::from(next()),
                        1 => i as u128,
                        2 => (len - i) as u128,
                        _ => ((i % 3) as u128) << 40 | i as u128,
                    })
                    .collect();
                let mut expected = keys.clone();
                expected.sort();
                sort_runs(&mut keys, &mut merge, &mut runs);
                assert_eq!(keys, expected, "len {len} shape {shape}");
            }
        }
    }

    #[test]
    fn release_matches_a_stable_sort_over_many_drains() {
        // Three rings, nearly sorted each, with equal stamps across them.
        let mut next = numbers(7);
        let mut reorder = Reorder::default();
        let mut expected_pending: Vec<BlockEvent> = Vec::new();
        let mut sector = 0;
        let mut clock = [0u64; 3];
        for drain in 1..=40u64 {
            for ring_clock in clock.iter_mut() {
                for _ in 0..next() % 300 {
                    *ring_clock += next() % 4;
                    // Now and then a stamp from before the previous one.
                    let ts =
                        ring_clock.saturating_sub(if next().is_multiple_of(50) { 6 } else { 0 });
                    sector += 1;
                    reorder.push(event(ts, sector));
                    expected_pending.push(event(ts, sector));
                }
            }
            let cutoff = drain * 200;
            let mut seen = Vec::new();
            reorder.release(cutoff, |e| seen.push((e.ts_ns, e.sector)));
            let mut expected: Vec<(u64, u64)> = expected_pending
                .iter()
                .filter(|e| e.ts_ns <= cutoff)
                .map(|e| (e.ts_ns, e.sector))
                .collect();
            expected.sort_by_key(|&(ts, _)| ts);
            expected_pending.retain(|e| e.ts_ns > cutoff);
            assert_eq!(seen, expected, "drain {drain}");
            assert_eq!(reorder.len(), expected_pending.len());
        }
    }

    /// Privileged: loads the probes, runs one `dd` that writes a block with
    /// O_DIRECT, and checks that every bio that process queued carries a
    /// probe stamp between two `monotonic_ns` samples taken around its whole
    /// life. A consumer clock with another origin than `bpf_ktime_get_ns`
    /// (REALTIME, TAI, a CPU-time clock) fails this. BOOTTIME differs only by
    /// time suspended, so no test on a machine that never slept can tell it
    /// apart. A child process, not this one: other test threads share our
    /// tgid and may read files at any time.
    #[test]
    fn the_clock_is_the_probes_clock() {
        use crate::capture::{Capture, CaptureConfig, EventSink};
        use tracer_common::EventKind;

        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var("CI").is_err(),
                "the_clock_is_the_probes_clock must run as root in CI"
            );
            eprintln!("SKIPPED the_clock_is_the_probes_clock: needs root");
            return;
        }
        /// (process, stamp) of every bio queued while tracing.
        struct Queued(Vec<(u32, u64)>);
        impl EventSink for Queued {
            fn block_event(&mut self, event: &BlockEvent) {
                if event.kind == EventKind::Queue as u8 {
                    self.0.push((event.tgid, event.ts_ns));
                }
            }
        }
        let capture = Capture::start(&CaptureConfig::default(), Queued(Vec::new())).unwrap();
        // /tmp lies on a block device (vda); O_DIRECT submits the bio from dd.
        let path = std::env::temp_dir().join(format!("iosplit-clock-{}", std::process::id()));
        let before = monotonic_ns();
        let mut dd = std::process::Command::new("dd")
            .args([
                "if=/dev/zero",
                "bs=4096",
                "count=1",
                "oflag=direct",
                "conv=fsync",
            ])
            .arg(format!("of={}", path.display()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let tgid = dd.id();
        let status = dd.wait().unwrap();
        let after = monotonic_ns();
        let queued = capture.finish(|sink, _| sink.0.clone()).unwrap();
        let stamps: Vec<u64> = queued
            .iter()
            .filter(|(by, _)| *by == tgid)
            .map(|(_, stamp)| *stamp)
            .collect();
        let _ = std::fs::remove_file(&path);
        assert!(status.success(), "dd failed: {status}");
        assert!(!stamps.is_empty(), "no bio queued by dd was seen");
        for stamp in stamps {
            assert!(
                (before..=after).contains(&stamp),
                "probe stamp {stamp} outside the consumer's [{before}, {after}]"
            );
        }
    }
}
