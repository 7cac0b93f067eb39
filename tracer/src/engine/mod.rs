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
//! Zero-length I/O (flushes) is counted, not correlated. Missing events leave
//! fragments or commands behind; they age out (or are evicted when the table
//! is full) and their user I/Os are counted as incomplete.
//!
//! Where things live:
//! - `mod.rs`: the [`Engine`], its construction, `ingest` dispatch and counters.
//! - `handlers`: one `on_*` method per kernel event.
//! - `chain`: the in-flight [`chain::Chains`] (user I/Os, fragments,
//!   commands, remaps, requests) and their bookkeeping (gather, complete,
//!   expire, make room, events the kernel dropped).
//! - `outcome`: the typed [`outcome::Outcome`]s the correlation emits; the
//!   accounting, the HTML series, the Perfetto timeline and `run`'s matcher
//!   read them.
//! - `accounting`: what each outcome counts for: the only writer of the
//!   devices' counters, histograms and service samples, the attribution
//!   and the what-if's streams.
//! - `target`: where an event's numbers go, and an event's operation.
//! - `devices`: disk and partition state, and disks that come and go.
//! - `stats`, `histogram`, `streams`: per-device counters and histograms, and
//!   the stream sizes the what-if replays.
//! - `attribution`: who caused the I/O (process, cgroup, file).
//! - `reports`: measures and findings read out of the engine.
//! - `diagnose/`: one file per diagnosis code behind the `Check` registry
//!   (live side and geometry side); `audit` and `placement`: the static
//!   audit's entry points and where a partition sits.
//! - `split`: why the kernel split a bio.
//! - `run_match/`: `run`'s write syscalls matched to the commands that carried them.
//! - `what_if`: what a fix would buy, replayed from the observed streams.
//!
//! A new kernel event gets a row in `tracer_common::with_block_probes!`, an
//! `on_*` handler in `handlers` and one arm in [`Engine::ingest`]. A new
//! diagnosis is a file under `diagnose/` listed in its `CHECKS`, with its
//! words under `crate::explain` (see `diagnose/mod.rs`).

mod accounting;
pub mod attribution;
pub mod audit;
mod chain;
mod devices;
mod diagnose;
pub mod fix_time;
mod handlers;
mod histogram;
pub mod outcome;
mod placement;
mod reports;
pub mod run_match;
pub mod service;
pub mod split;
pub mod stats;
mod streams;
mod table;
mod target;
#[cfg(test)]
pub(crate) mod tests;
pub mod what_if;

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use tracer_common::{BlockAction, BlockEvent, DirtyCounts, EventKind};

use attribution::AttributionTables;

use crate::geometry::DiskGeometry;
use crate::model::{CorrelationStats, EventCounts, Measures};
use chain::Chains;
use devices::{DevSlot, DeviceState, DirtyStats, LastIssue};
use outcome::Outcome;
use stats::OP_COUNT;
use table::{FastMap, KeyHasher};

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

pub struct Engine {
    limits: EngineLimits,
    devices: Vec<DeviceState>,
    dev_index: FastMap<u32, DevSlot>,
    /// The correlation's in-flight state.
    chains: Chains,
    dirty: FastMap<u32, DirtyStats>,
    /// The kernel's running dirty-buffer totals per device, as last seen.
    dirty_kernel: FastMap<u32, DirtyCounts>,
    tracked: HashSet<u32, BuildHasherDefault<KeyHasher>>,
    events: EventCounts,
    correlation: CorrelationStats,
    now_ns: u64,
    /// Bumped by `reset`, so chains from before it do not feed new histograms.
    epoch: u32,
    /// Who caused the I/O: per process, cgroup and file, and device.
    attribution: AttributionTables,
    /// When the tables last gave memory back (consumer clock, from `drained`).
    last_shrink: Option<std::time::Instant>,
    /// Whether a view reads the correlation's outcomes.
    keep_outcomes: bool,
    /// The outcomes since the last drain, when kept.
    outcomes: Vec<Outcome>,
}

impl Engine {
    pub fn new(disks: Vec<DiskGeometry>, limits: EngineLimits) -> Engine {
        let cap = limits.max_in_flight.max(1);
        let reserve = cap.min(RESERVED_SLOTS);
        let mut engine = Engine {
            limits,
            devices: Vec::new(),
            dev_index: FastMap::default(),
            chains: Chains::new(cap, reserve, RESERVED_SLOTS),
            dirty: FastMap::default(),
            dirty_kernel: FastMap::default(),
            tracked: HashSet::default(),
            events: EventCounts::default(),
            correlation: CorrelationStats::default(),
            now_ns: 0,
            epoch: 0,
            attribution: AttributionTables::new(attribution::OWNER_CAPACITY),
            last_shrink: None,
            keep_outcomes: false,
            outcomes: Vec::new(),
        };
        engine.set_disks(disks);
        engine
    }

    /// Whether to keep the attribution tables (per process, cgroup and file).
    /// On by default; frontends turn it off when the probes read no owners.
    pub fn attribute_owners(&mut self, on: bool) {
        self.attribution.keep(on);
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

    /// Counts an outcome, and keeps it for the views that asked.
    #[inline(always)]
    fn emit(&mut self, outcome: Outcome) {
        self.account(&outcome);
        if self.keep_outcomes {
            self.outcomes.push(outcome);
        }
    }

    /// Adds processes whose I/O counts as "tracked" in [`Engine::origins`].
    pub fn track_processes(&mut self, tgids: impl IntoIterator<Item = u32>) {
        self.tracked.extend(tgids);
    }

    pub fn events(&self) -> EventCounts {
        self.events
    }

    pub fn correlation(&self) -> CorrelationStats {
        CorrelationStats {
            in_flight: self.chains.user_ios.len() as u64,
            ..self.correlation
        }
    }

    /// Counters and histograms back to zero; chains in flight are kept, but
    /// those queued before the reset do not feed the new histograms.
    pub fn reset(&mut self) {
        for device in &mut self.devices {
            device.whole.clear();
            for part in &mut device.parts {
                part.stats.clear();
            }
            device.last_issue = [LastIssue::default(); OP_COUNT];
            device.last_queued = Default::default();
            device.service = Default::default();
        }
        self.dirty.clear();
        self.attribution.clear();
        self.events = EventCounts::default();
        self.correlation = CorrelationStats::default();
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Between drains: when nothing is in flight, the tables give back what
    /// a burst grew (writeback can queue tens of thousands of bios at once).
    /// At most every [`SHRINK_EVERY`], so bursty work does not regrow them
    /// each time.
    pub fn drained(&mut self, now: std::time::Instant) {
        if self
            .last_shrink
            .is_some_and(|last| now.saturating_duration_since(last) < SHRINK_EVERY)
        {
            return;
        }
        // Commands hold raw fragment indices: shrink the three together.
        let idle = self.chains.user_ios.len() == 0
            && self.chains.fragments.len() == 0
            && self.chains.commands.len() == 0;
        if idle {
            let keep = self.limits.max_in_flight.min(RESERVED_SLOTS);
            let shrunk = [
                self.chains.user_ios.shrink_idle(keep),
                self.chains.fragments.shrink_idle(keep),
                self.chains.commands.shrink_idle(keep),
                self.chains.remaps.shrink_idle(keep),
            ];
            // Nothing in flight: every entry is stale.
            self.chains.by_request.clear();
            self.chains.rq_remaps.clear();
            if shrunk.contains(&true) {
                self.last_shrink = Some(now);
            }
        }
    }

    /// The hot path: one kernel event, in kernel order.
    pub fn ingest(&mut self, event: &BlockEvent) {
        let Some(action) = event.action() else {
            self.correlation.unmatched_events += 1;
            return;
        };
        let kind = action.kind();
        self.events[kind] += 1;
        self.now_ns = self.now_ns.max(event.ts_ns);
        if kind != EventKind::Queue || self.held_remap_aged() {
            self.store_held_remap();
        }
        self.expire_aged();
        match action {
            BlockAction::Remap {
                from_dev,
                from_sector,
            } => self.on_remap(event, from_dev, from_sector),
            BlockAction::Queue => self.on_queue(event, true),
            BlockAction::Split { remainder } => self.on_split(event, remainder),
            BlockAction::Merge(kind) => self.on_merge(event, kind),
            BlockAction::Issue { request } => self.on_issue(event, request),
            BlockAction::Complete { request, error } => self.on_complete(event, request, error),
            BlockAction::BioComplete { error } => self.on_bio_complete(event, error),
            BlockAction::DirtyBuffer { bytes } => {
                self.dirty.entry(event.dev).or_default().record(bytes);
            }
            BlockAction::Requeue => self.on_requeue(event),
            BlockAction::RqRemap {
                from_dev,
                from_sector,
            } => self.on_rq_remap(event, from_dev, from_sector),
        }
    }

    /// The kernel's running per-device dirty-buffer totals (aggregated there,
    /// not streamed); what grew since the last call counts as new events.
    pub fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        for (dev, now) in totals {
            let before = self.dirty_kernel.insert(*dev, *now).unwrap_or_default();
            let stats = self.dirty.entry(*dev).or_default();
            for (index, (now, before)) in now.by_size.iter().zip(before.by_size).enumerate() {
                let grown = now.saturating_sub(before);
                if grown > 0 {
                    stats.add(index, grown);
                    self.events[EventKind::DirtyBuffer] += grown;
                }
            }
        }
    }
}
