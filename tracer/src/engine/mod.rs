//! The correlation and diagnosis engine. Pure: events and geometry in,
//! measures and diagnoses out. No sysfs, no BPF, no clock it did not receive.
//!
//! Reconstruction, in kernel event order:
//! - `block_bio_queue` starts a **user I/O** with one **fragment** covering its
//!   range on the queueing device (the whole disk, absolute sectors). A
//!   preceding `block_bio_remap` from a partition, matched on (dev, sector,
//!   length) first-in first-out, names the partition.
//! - `block_split` cuts the pending fragment that starts at `sector`: the front
//!   piece keeps the slot, the remainder becomes a new fragment at `new_sector`.
//! - bio and request merges are counted against the fragment they name.
//! - `block_rq_issue` makes a **command** out of the pending fragments that tile
//!   its range, walking from its start by (dev, start sector).
//! - `block_rq_requeue` hands an issued command back to be issued again: its
//!   next `block_rq_issue` of the same range is the same command, not a new
//!   one (issue→complete runs from that last issue; the wait is `requeue_delay_us`).
//! - `block_rq_remap` (request-based dm, multipath) sends a clone of an
//!   issued command down a path: the clone's issue there is a disk command
//!   of the user I/Os the upper command carries.
//! - `block_rq_complete` completes a prefix of a command (completions can be
//!   partial); a user I/O ends when its last fragment completes.
//! - On bio-based devices (no requests) a fragment is the command: it is
//!   counted when `block_bio_complete` completes it, or when a `block_bio_remap`
//!   sends it down to a lower device, where the chain continues.
//!
//! Flushes are matched first in first out per device; other zero-length
//! I/O is counted, not correlated. Missing events leave
//! fragments or commands behind; they age out (or are evicted when the table
//! is full) and their user I/Os are counted as incomplete.
//!
//! Who owns what: [`Engine`] composes three owners and answers for them.
//! - `devices`: the registry, what each disk and partition is.
//! - `correlate/`: the correlator, one handler per kernel event, and the
//!   in-flight chains it owns (`correlate/chain.rs`: user I/Os, fragments,
//!   commands, remaps, requests, and their bookkeeping). It hands what it
//!   concludes to the accounting as typed `outcome::Outcome`s.
//! - `accounting`: what each outcome counts for; the only owner of what
//!   was measured (devices' counters, histograms, service samples, the
//!   what-if's streams, attribution, dirty buffers).
//!
//! The rest are pure helpers and readers: `outcome` (the vocabulary the
//! correlator, the accounting and the views share), `target`, `stats`,
//! `histogram`, `streams`, `service`, `table`; `reports` (what is read out);
//! `fix_time` (what a fix would save a `run`, from its what-ifs);
//! `diagnose/`, `audit`, `placement`, `split`, `what_if` (the diagnoses and
//! what a fix would buy); `attribution` (who caused the I/O); `run_match/`
//! (`run`'s writes matched to the commands that carried them).
//!
//! Where a change goes (a new tracepoint, diagnosis or measure):
//! docs/design.md, "Where a change goes".

mod accounting;
pub mod attribution;
pub mod audit;
mod correlate;
mod devices;
mod diagnose;
pub mod fix_time;
mod histogram;
pub mod outcome;
mod passthrough;
mod placement;
mod reports;
pub mod run_match;
pub mod service;
pub mod split;
pub mod stats;
mod streams;
mod table;
mod tag_waits;
mod target;
#[cfg(test)]
pub(crate) mod tests;
pub mod what_if;

use tracer_common::{BlockAction, BlockEvent, DirtyCounts, EventKind, TagWaitKey, TagWaits};

use crate::geometry::DiskGeometry;
use crate::model::{CorrelationStats, DeviceReport, EventCounts, Finding, Measures, OpMeasures};
use accounting::{Accounting, Sink};
use correlate::Correlator;
use devices::Devices;
use outcome::Outcome;

pub use target::op_from_rwbs;

/// Bounds on the in-flight tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLimits {
    /// Most fragments (and, separately, commands) tracked at once; the oldest
    /// is evicted beyond that.
    pub max_in_flight: usize,
    /// A fragment or command older than this (by event timestamps) is dropped.
    pub max_age_ns: u64,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            max_in_flight: 1 << 20,
            max_age_ns: 30_000_000_000,
        }
    }
}

/// Measures of one device split by who submitted the I/O.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OriginMeasures {
    pub device: String,
    /// I/O queued by the tracked processes (or remapped from their I/O).
    pub tracked: Measures,
    pub other: Measures,
}

/// Slots reserved up front in each table, so the first seconds do not grow them.
const RESERVED_SLOTS: usize = 1 << 14;
/// How often idle tables may give back a burst's memory.
const SHRINK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The engine: the device registry, the correlator that follows chains
/// across it, and the accounting that counts what the correlator
/// concludes. Each owns its state; the engine composes them and answers
/// for them.
pub struct Engine {
    /// What each device is.
    devices: Devices,
    /// The chains in flight, from user I/O to command.
    correlator: Correlator,
    /// What was measured, per device and owner.
    accounting: Accounting,
    events: EventCounts,
    /// When the tables last gave memory back (consumer clock, from `drained`).
    last_shrink: Option<std::time::Instant>,
    /// Whether a view reads the correlation's outcomes.
    keep_outcomes: bool,
    /// The outcomes since the last drain, when kept.
    outcomes: Vec<Outcome>,
    /// Waits for a free tag, as the kernel counted them (7.2+).
    tag_waits: tag_waits::TagWaitTally,
    /// Passthrough commands, by device and op.
    passthrough: passthrough::PassthroughTally,
}

impl Engine {
    pub fn new(disks: Vec<DiskGeometry>, limits: EngineLimits) -> Engine {
        let mut engine = Engine {
            devices: Devices::default(),
            correlator: Correlator::new(limits, RESERVED_SLOTS),
            accounting: Accounting::new(),
            events: EventCounts::default(),
            last_shrink: None,
            keep_outcomes: false,
            outcomes: Vec::new(),
            tag_waits: tag_waits::TagWaitTally::default(),
            passthrough: passthrough::PassthroughTally::default(),
        };
        engine.set_disks(disks);
        engine
    }

    /// Installs fresh geometry. Devices and partitions keep their measures
    /// (matched by device number); ones no longer listed are kept as they were.
    pub fn set_disks(&mut self, disks: Vec<DiskGeometry>) {
        self.devices.set_disks(disks);
        self.copy_limits();
    }

    /// Installs the disks present now (as [`Engine::set_disks`] does) and marks
    /// every disk and partition with known geometry that is not among them as
    /// gone; one that comes back (same device number) is present again. The
    /// measures of a gone device are kept.
    pub fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
        self.devices.refresh_disks(disks);
        self.copy_limits();
    }

    fn copy_limits(&mut self) {
        for (disk, device) in self.devices.iter().enumerate() {
            self.accounting.set_limits(disk, device.limits);
        }
    }

    /// Whether to keep the attribution tables (per process, cgroup and file).
    /// On by default; frontends turn it off when the probes read no owners.
    pub fn attribute_owners(&mut self, on: bool) {
        self.accounting.attribution.keep(on);
    }

    /// An imported trace shows requests on `dev` (G or I lines): it is
    /// request-based even if it dispatched nothing.
    pub fn saw_requests(&mut self, dev: u32) {
        let disk = self.devices.ensure_disk(dev);
        self.devices.get_mut(disk).seen_request = true;
    }

    /// Keeps every [`Outcome`] from now on, for [`Engine::drain_outcomes`]
    /// (views that draw chains). Off by default: the live path keeps none.
    pub fn keep_outcomes(&mut self) {
        self.keep_outcomes = true;
    }

    /// The outcomes kept since the last call, in order.
    pub(crate) fn drain_outcomes(&mut self) -> std::vec::Drain<'_, Outcome> {
        self.outcomes.drain(..)
    }

    /// Adds processes whose I/O counts as "tracked" in [`Engine::origins`].
    pub fn track_processes(&mut self, tgids: impl IntoIterator<Item = u32>) {
        self.correlator.track_processes(tgids);
    }

    pub fn events(&self) -> EventCounts {
        self.events
    }

    pub fn correlation(&self) -> CorrelationStats {
        self.correlator.correlation()
    }

    /// Counters and histograms back to zero; chains in flight are kept, but
    /// those queued before the reset do not feed the new histograms.
    pub fn reset(&mut self) {
        self.accounting.clear();
        self.correlator.reset();
        self.events = EventCounts::default();
        self.tag_waits.clear();
        self.passthrough.clear();
    }

    /// Between drains: when nothing is in flight, the tables give back what
    /// a burst grew. At most every [`SHRINK_EVERY`], so bursty work does not
    /// regrow them each time.
    pub fn drained(&mut self, now: std::time::Instant) {
        if self
            .last_shrink
            .is_some_and(|last| now.saturating_duration_since(last) < SHRINK_EVERY)
        {
            return;
        }
        if self.correlator.shrink_idle(RESERVED_SLOTS) {
            self.last_shrink = Some(now);
        }
    }

    /// The hot path: one kernel event, in kernel order.
    pub fn ingest(&mut self, event: &BlockEvent) {
        let Some(action) = event.action() else {
            self.correlator.unmatched();
            return;
        };
        self.events[action.kind()] += 1;
        match action {
            BlockAction::DirtyBuffer { bytes } => self.accounting.dirty_buffer(event.dev, bytes),
            BlockAction::Issue { .. } if passthrough::PassthroughTally::is_passthrough(event) => {
                self.passthrough.issue(event)
            }
            _ => {}
        }
        let kept = self.keep_outcomes.then_some(&mut self.outcomes);
        let mut sink = Sink::new(&mut self.accounting, kept);
        self.correlator
            .ingest(event, action, &mut self.devices, &mut sink);
    }

    /// The end of a trace (imported, replayed or live) at `now_ns`, or at
    /// the newest event if that is later: commands still in flight
    /// far longer than their device's own completions took (100 times its
    /// 99th percentile, at least 1 s) lost their completions, and their
    /// chains end incomplete instead of staying in flight.
    pub fn settle_at_end(&mut self, now_ns: u64) {
        let kept = self.keep_outcomes.then_some(&mut self.outcomes);
        let mut sink = Sink::new(&mut self.accounting, kept);
        self.correlator.settle_at_end(now_ns, &mut sink);
    }

    /// The kernel dropped events (a ring was full). Any chain or command in
    /// flight may have lost one, so none of them feeds the histograms: each
    /// chain is counted incomplete when it ends.
    pub fn events_lost(&mut self) {
        self.correlator.events_lost();
    }

    /// The kernel's running per-device dirty-buffer totals (aggregated there,
    /// not streamed); what grew since the last call counts as new events.
    pub fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        self.events[EventKind::DirtyBuffer] += self.accounting.dirty_buffer_totals(totals);
    }

    /// The kernel's running tag-wait totals (7.2+, aggregated there).
    pub fn tag_wait_totals(&mut self, totals: &[(TagWaitKey, TagWaits)]) {
        self.tag_waits.totals(totals);
    }

    /// Per disk (its own and its partitions' traffic), partitions inside.
    pub fn devices(&self) -> Vec<DeviceReport> {
        let mut devices = reports::devices(&self.devices, &self.accounting);
        for device in &mut devices {
            let dev = device.dev.split_once(':').and_then(|(major, minor)| {
                Some(crate::geometry::DevId::new(
                    major.parse().ok()?,
                    minor.parse().ok()?,
                ))
            });
            if let Some(dev) = dev {
                device.tag_waits = self.tag_waits.on(dev.to_kernel());
                device.passthrough = self.passthrough.on(dev.to_kernel());
            }
        }
        devices
    }

    /// Per disk and partition with traffic: the tracked processes' I/O vs the rest.
    pub fn origins(&self) -> Vec<OriginMeasures> {
        reports::origins(&self.devices, &self.accounting)
    }

    /// The static audit of each known disk, enriched with live evidence, plus
    /// the diagnoses only traffic can support, most severe first. Typed
    /// findings: `crate::explain::diagnoses` words them for a report.
    pub fn diagnoses(&self) -> Vec<Finding> {
        reports::diagnoses(&self.devices, &self.accounting)
    }

    /// Who caused the I/O: the top `top` owners per view, by commands, on
    /// each disk or partition; paths are left for the frontend to resolve.
    pub fn attribution(&self, top: usize) -> crate::model::Attribution {
        let devices = &self.devices;
        self.accounting
            .attribution
            .report(top, |place| reports::place_name(devices, place))
    }

    /// Every owner entry with its counters only (see `AttributionTables::counts`).
    pub fn attribution_counts(&self) -> crate::model::Attribution {
        let devices = &self.devices;
        self.accounting
            .attribution
            .counts(|place| reports::place_name(devices, place))
    }

    /// Writes the tracked processes queued on `device` itself (a partition's
    /// own, or a whole disk's not through a partition), as measures.
    pub fn tracked_writes_on(&self, device: &str) -> Option<OpMeasures> {
        reports::tracked_writes_on(&self.devices, &self.accounting, device)
    }

    /// Other tasks' traffic on `devices` (a named disk with its partitions,
    /// or a named partition alone), summed per op.
    pub fn other_traffic_on(&self, devices: &[String]) -> Measures {
        reports::other_traffic_on(&self.devices, &self.accounting, devices)
    }

    /// Disks (their own traffic) and partitions the tracked processes wrote.
    pub fn devices_written_by_tracked(&self) -> Vec<String> {
        reports::devices_written_by_tracked(&self.devices, &self.accounting)
    }
}
