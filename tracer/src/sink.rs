//! The seam between capture and everything that consumes events.
//!
//! Capture drives an [`EventSink`]; the engine and `run`'s matcher implement
//! one. It lives here, not in `capture`, so the pure engine never imports the
//! aya-facing capture module, and tests can drive a sink with a synthetic or
//! recorded stream. The engine's impls are here too: the engine knows
//! nothing of sinks.

use std::time::Instant;

use tracer_common::{BlockEvent, DirtyCounts, OpenEvent, ProcessEvent, TagWaitKey, TagWaits};

use crate::engine::Engine;
use crate::geometry::DiskGeometry;

/// Receives every event in kernel order, on the consumer thread.
pub trait EventSink: Send + 'static {
    /// Once, before any event: whether the probes read owners (process,
    /// cgroup, file). Without them no report shows attribution.
    fn owners_read(&mut self, _read: bool) {}
    fn block_event(&mut self, event: &BlockEvent);
    /// Only when the process tree is traced (`run`): syscalls and forks.
    fn process_event(&mut self, _event: &ProcessEvent) {}
    /// Only when the process tree is traced (`run`): a file the tree opened.
    fn open_event(&mut self, _event: &OpenEvent) {}
    /// Before each query: the kernel's running dirty-buffer totals per device.
    fn dirty_buffer_totals(&mut self, _totals: &[(u32, DirtyCounts)]) {}
    /// Before each query: the kernel's running tag-wait totals (7.2+).
    fn tag_wait_totals(&mut self, _totals: &[(TagWaitKey, TagWaits)]) {}
    /// The kernel dropped block events since the last drain (a ring was full).
    fn events_lost(&mut self) {}
    /// Called after each drain, with the consumer's clock.
    fn drained(&mut self, _now: Instant) {}
}

/// A sink whose engine's disks change during a trace (devices come and go);
/// a recording in front of it keeps each change in order with the events.
pub trait DiskSink: EventSink {
    fn refresh_disks(&mut self, disks: Vec<DiskGeometry>);
}

impl EventSink for Engine {
    fn block_event(&mut self, event: &BlockEvent) {
        self.ingest(event)
    }

    fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        Engine::dirty_buffer_totals(self, totals)
    }

    fn tag_wait_totals(&mut self, totals: &[(TagWaitKey, TagWaits)]) {
        Engine::tag_wait_totals(self, totals)
    }

    fn owners_read(&mut self, read: bool) {
        Engine::attribute_owners(self, read)
    }

    fn events_lost(&mut self) {
        Engine::events_lost(self)
    }

    fn drained(&mut self, now: std::time::Instant) {
        Engine::drained(self, now)
    }
}

impl DiskSink for Engine {
    fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
        Engine::refresh_disks(self, disks)
    }
}
