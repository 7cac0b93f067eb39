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
}

impl Reorder {
    pub fn push(&mut self, event: BlockEvent) {
        self.pending.push(event);
    }

    /// Hands on, in timestamp order (ties in arrival order), every pending
    /// event stamped at or before `cutoff_ns`; keeps the rest.
    pub fn release(&mut self, cutoff_ns: u64, mut each: impl FnMut(&BlockEvent)) {
        // Stable, and cheap on what it gets: a few already-sorted runs.
        self.pending.sort_by_key(|event| event.ts_ns);
        let ready = self
            .pending
            .partition_point(|event| event.ts_ns <= cutoff_ns);
        for event in &self.pending[..ready] {
            each(event);
        }
        self.pending.drain(..ready);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }
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

    #[test]
    fn the_clock_is_the_probes_clock() {
        let before = monotonic_ns();
        let after = monotonic_ns();
        assert!(before > 0 && after >= before);
    }
}
