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
//! - `block_rq_complete` completes a prefix of a command (completions can be
//!   partial); a user I/O ends when its last fragment completes.
//! - On bio-based devices (no requests) a fragment is the command: it is
//!   counted when `block_bio_complete` completes it, or when a `block_bio_remap`
//!   sends it down to a lower device, where the chain continues.
//!
//! Zero-length I/O (flushes) is counted, not correlated. Missing events leave
//! fragments or commands behind; they age out (or are evicted when the table
//! is full) and their user I/Os are counted as incomplete.

pub mod audit;
mod diagnose;
mod faults;
pub mod split;
pub mod stats;
mod table;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use tracer_common::{BlockEvent, DirtyCounts, EventKind};

use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
use crate::model::PartitionReport;
use crate::model::{CorrelationStats, DeviceReport, Diagnosis, EventCounts, Measures, Op};
use split::{split_cause, SplitLimits, SECTOR_BYTES};
use stats::{op_index, OpStats, ScopeStats, ALL_ORIGINS, OP_COUNT};
use table::{FastMap, KeyHasher, SlotRef, Table, NIL};

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
/// "The whole disk, no partition."
const NO_PART: u32 = u32::MAX;
/// Command sizes at most `max_sectors / SMALL_COMMAND_DIVISOR` count as far
/// below `max_sectors` for `merge_blocked`.
const SMALL_COMMAND_DIVISOR: u64 = 4;
/// `max_sectors` assumed for that test when the device's is unknown (128 KiB).
const DEFAULT_MAX_SECTORS: u64 = 256;

/// Where an I/O's numbers go: disk, partition, operation and origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    disk: u32,
    part: u32,
    op: Op,
    tracked: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            disk: 0,
            part: NO_PART,
            op: Op::Other,
            tracked: false,
        }
    }
}

/// A bio as submitted to a block device (block_bio_queue).
#[derive(Clone, Copy, Debug, Default)]
struct UserIo {
    target: Target,
    tgid: u32,
    queue_ns: u64,
    /// Fragments not yet completed.
    outstanding: u32,
    fragments: u32,
    /// Distinct commands that carried any of its fragments.
    commands: u32,
    last_command: u64,
    /// An event of its chain was missed or dropped.
    incomplete: bool,
    /// Counted once in `evicted` or `aged_out`.
    dropped: bool,
    epoch: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FragmentState {
    /// Queued, possibly merged into a request, not yet issued.
    #[default]
    Pending,
    /// Sent down to a lower device by a stacked (bio-based) device.
    SentDown,
    /// Part of an issued command.
    InCommand,
}

/// A piece of a user I/O after splitting: `[start, end)` on `dev`.
#[derive(Clone, Copy, Debug)]
struct Fragment {
    io: SlotRef,
    start: u64,
    end: u64,
    state: FragmentState,
    /// Next fragment in the same command.
    next: u32,
}

impl Default for Fragment {
    fn default() -> Self {
        Fragment {
            io: SlotRef::NONE,
            start: 0,
            end: 0,
            state: FragmentState::Pending,
            next: NIL,
        }
    }
}

/// One device command (block_rq_issue); `start` moves on partial completion.
#[derive(Clone, Copy, Debug)]
struct Command {
    start: u64,
    end: u64,
    issue_ns: u64,
    target: Target,
    epoch: u32,
    /// Its fragments in sector order.
    head: u32,
    tail: u32,
    /// In flight when events were lost: the completion it gets may be another
    /// command's, so its latency is not recorded.
    lost: bool,
}

impl Default for Command {
    fn default() -> Self {
        Command {
            start: 0,
            end: 0,
            issue_ns: 0,
            target: Target::default(),
            epoch: 0,
            head: NIL,
            tail: NIL,
            lost: false,
        }
    }
}

/// A `block_bio_remap` waiting for the `block_bio_queue` of the same bio.
#[derive(Clone, Copy, Debug)]
struct Remap {
    /// The partition the bio was sent to (kernel dev_t), if it came from one.
    partition: Option<u32>,
    /// The upper device's user I/O, for a stacked remap.
    parent: SlotRef,
}

impl Default for Remap {
    fn default() -> Self {
        Remap {
            partition: None,
            parent: SlotRef::NONE,
        }
    }
}

type SectorKey = (u32, u64);
type RemapKey = (u32, u64, u32);

#[derive(Clone, Copy, Debug)]
enum DropReason {
    AgedOut,
    Evicted,
}

#[derive(Clone, Copy, Debug, Default)]
struct LastIssue {
    end: u64,
    sectors: u64,
    issue_ns: u64,
    valid: bool,
}

/// `block_dirty_buffer` sizes seen on one device (partition or disk).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DirtyStats {
    pub count: u64,
    /// Counts by power-of-two size from 512 B (index 0) to 64 KiB (index 7).
    pub by_size: [u64; DIRTY_SIZES],
}

pub(crate) const DIRTY_SIZES: usize = 8;

impl DirtyStats {
    fn record(&mut self, bytes: u64) {
        self.count += 1;
        let sectors = (bytes / SECTOR_BYTES).max(1);
        let index = (63 - sectors.leading_zeros()) as usize;
        self.by_size[index.min(DIRTY_SIZES - 1)] += 1;
    }

    pub fn size_of(index: usize) -> u64 {
        SECTOR_BYTES << index
    }

    fn add(&mut self, index: usize, count: u64) {
        self.count += count;
        self.by_size[index.min(DIRTY_SIZES - 1)] += count;
    }
}

#[derive(Clone, Copy, Debug)]
struct DevSlot {
    disk: u32,
    part: u32,
}

pub(crate) struct PartState {
    pub dev: u32,
    pub name: String,
    pub geometry: PartitionGeometry,
    pub stats: ScopeStats,
    /// Missing from sysfs at the last refresh.
    pub gone: bool,
}

pub(crate) struct DeviceState {
    pub dev: Option<u32>,
    pub name: String,
    pub geometry: DiskGeometry,
    /// Geometry came from `disks` (otherwise it is a default placeholder).
    pub known: bool,
    pub limits: SplitLimits,
    /// Traffic to the disk itself, not through a partition.
    pub whole: ScopeStats,
    pub parts: Vec<PartState>,
    /// Missing from sysfs (or without media) at the last refresh.
    pub gone: bool,
    seen_issue: bool,
    last_issue: [LastIssue; OP_COUNT],
}

impl DeviceState {
    fn unknown(dev: u32) -> DeviceState {
        DeviceState {
            dev: Some(dev),
            name: DevId::from_kernel(dev).to_string(),
            geometry: DiskGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..DiskGeometry::default()
            },
            known: false,
            limits: SplitLimits::default(),
            whole: ScopeStats::default(),
            parts: Vec::new(),
            gone: false,
            seen_issue: false,
            last_issue: [LastIssue::default(); OP_COUNT],
        }
    }

    fn stats_mut(&mut self, part: u32) -> &mut ScopeStats {
        match self.parts.get_mut(part as usize) {
            Some(partition) => &mut partition.stats,
            None => &mut self.whole,
        }
    }

    /// Bio-based: declared so, and no request was ever issued on it.
    fn bio_based(&self) -> bool {
        !(self.geometry.request_based || self.seen_issue)
    }

    fn partition_at(&self, sector: u64) -> u32 {
        self.parts
            .iter()
            .position(|part| {
                part.geometry.size != 0
                    && sector >= part.geometry.start
                    && sector - part.geometry.start < part.geometry.size
            })
            .map_or(NO_PART, |index| index as u32)
    }
}

/// The operation class from `rwbs`: a leading preflush `F` is skipped when an
/// R/W/D follows; `F` alone (or `FN`) is a flush.
pub fn op_from_rwbs(rwbs: &[u8]) -> Op {
    let mut letters = rwbs;
    if letters.first() == Some(&b'F') {
        match letters.get(1) {
            Some(b'R' | b'W' | b'D') => letters = &letters[1..],
            _ => return Op::Flush,
        }
    }
    match letters.first() {
        Some(b'R') => Op::Read,
        Some(b'W') => Op::Write,
        Some(b'D') => Op::Discard,
        _ => Op::Other,
    }
}

/// The event's operation; an empty bio with a preflush is a flush, whatever follows.
fn op_of(event: &BlockEvent) -> Op {
    if event.nr_sector == 0 && event.rwbs[0] == b'F' {
        return Op::Flush;
    }
    op_from_rwbs(&event.rwbs)
}

pub struct Engine {
    limits: EngineLimits,
    devices: Vec<DeviceState>,
    dev_index: FastMap<u32, DevSlot>,
    user_ios: Table<u8, UserIo>,
    fragments: Table<SectorKey, Fragment>,
    commands: Table<SectorKey, Command>,
    remaps: Table<RemapKey, Remap>,
    dirty: FastMap<u32, DirtyStats>,
    /// The kernel's running dirty-buffer totals per device, as last seen.
    dirty_kernel: FastMap<u32, DirtyCounts>,
    tracked: HashSet<u32, BuildHasherDefault<KeyHasher>>,
    events: EventCounts,
    correlation: CorrelationStats,
    now_ns: u64,
    /// Bumped by `reset`, so chains from before it do not feed new histograms.
    epoch: u32,
    next_command: u64,
}

impl Engine {
    pub fn new(disks: Vec<DiskGeometry>, limits: EngineLimits) -> Engine {
        let cap = limits.max_in_flight.max(1);
        let reserve = cap.min(RESERVED_SLOTS);
        let mut engine = Engine {
            limits,
            devices: Vec::new(),
            dev_index: FastMap::default(),
            user_ios: Table::new(cap, reserve),
            fragments: Table::new(cap, reserve),
            commands: Table::new(cap, reserve),
            remaps: Table::new(cap.min(RESERVED_SLOTS), reserve),
            dirty: FastMap::default(),
            dirty_kernel: FastMap::default(),
            tracked: HashSet::default(),
            events: EventCounts::default(),
            correlation: CorrelationStats::default(),
            now_ns: 0,
            epoch: 0,
            next_command: 1,
        };
        engine.set_disks(disks);
        engine
    }

    /// Installs fresh geometry. Devices and partitions keep their measures
    /// (matched by device number); ones no longer listed are kept as they were.
    pub fn set_disks(&mut self, disks: Vec<DiskGeometry>) {
        for disk in disks {
            let dev = disk.dev.map(DevId::to_kernel);
            let existing = match dev {
                Some(dev) => self
                    .dev_index
                    .get(&dev)
                    .filter(|slot| slot.part == NO_PART)
                    .map(|slot| slot.disk as usize),
                None => self
                    .devices
                    .iter()
                    .position(|device| device.dev.is_none() && device.name == disk.name),
            };
            let index = match existing {
                Some(index) => index,
                None => {
                    let mut device = DeviceState::unknown(dev.unwrap_or(0));
                    device.dev = dev;
                    self.devices.push(device);
                    self.devices.len() - 1
                }
            };
            if let Some(dev) = dev {
                self.dev_index.insert(
                    dev,
                    DevSlot {
                        disk: index as u32,
                        part: NO_PART,
                    },
                );
            }
            for partition in &disk.partitions {
                self.install_partition(index, partition);
            }
            let device = &mut self.devices[index];
            if !disk.name.is_empty() {
                device.name = disk.name.clone();
            }
            device.limits = SplitLimits::from_geometry(&disk);
            device.known = true;
            device.geometry = disk;
        }
    }

    fn install_partition(&mut self, disk: usize, partition: &PartitionGeometry) {
        let dev = partition.dev.map(DevId::to_kernel);
        let device = &mut self.devices[disk];
        let existing = device.parts.iter().position(|part| match dev {
            Some(dev) => part.dev == dev,
            None => part.name == partition.name,
        });
        let name = if partition.name.is_empty() {
            dev.map_or_else(String::new, |dev| DevId::from_kernel(dev).to_string())
        } else {
            partition.name.clone()
        };
        let index = match existing {
            Some(index) => index,
            None => {
                device.parts.push(PartState {
                    dev: dev.unwrap_or(0),
                    name: String::new(),
                    geometry: PartitionGeometry::default(),
                    stats: ScopeStats::default(),
                    gone: false,
                });
                device.parts.len() - 1
            }
        };
        let part = &mut device.parts[index];
        part.name = name;
        part.geometry = partition.clone();
        if let Some(dev) = dev {
            self.dev_index.insert(
                dev,
                DevSlot {
                    disk: disk as u32,
                    part: index as u32,
                },
            );
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
            in_flight: self.user_ios.len() as u64,
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
        }
        self.dirty.clear();
        self.events = EventCounts::default();
        self.correlation = CorrelationStats::default();
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// The hot path: one kernel event, in kernel order.
    pub fn ingest(&mut self, event: &BlockEvent) {
        let Some(kind) = EventKind::from_u8(event.kind) else {
            self.correlation.unmatched_events += 1;
            return;
        };
        *self.events.slot(kind) += 1;
        self.now_ns = self.now_ns.max(event.ts_ns);
        self.expire_aged();
        match kind {
            EventKind::Remap => self.on_remap(event),
            EventKind::Queue => self.on_queue(event),
            EventKind::Split => self.on_split(event),
            EventKind::Backmerge | EventKind::Frontmerge | EventKind::RqMerge => {
                self.on_merge(event, kind)
            }
            EventKind::Issue => self.on_issue(event),
            EventKind::Complete => self.on_complete(event),
            EventKind::BioComplete => self.on_bio_complete(event),
            EventKind::DirtyBuffer => {
                self.dirty
                    .entry(event.dev)
                    .or_default()
                    .record(event.aux_sector);
            }
        }
    }

    // ----- event handlers -------------------------------------------------

    fn on_remap(&mut self, event: &BlockEvent) {
        let length = u64::from(event.nr_sector);
        // Stacked: the old device holds this bio as a pending fragment of its own.
        let upper = if length == 0 {
            None
        } else {
            self.fragments
                .find(&(event.aux_dev, event.aux_sector), |fragment| {
                    fragment.state == FragmentState::Pending
                        && fragment.end - fragment.start == length
                })
        };
        if let Some(index) = upper {
            let (io, start) = match self.fragments.get_mut(index) {
                Some(fragment) => {
                    fragment.state = FragmentState::SentDown;
                    (fragment.io, fragment.start)
                }
                None => return,
            };
            self.count_bio_command(io, start, length);
            self.push_remap(
                (event.dev, event.sector, event.nr_sector),
                Remap {
                    partition: None,
                    parent: io,
                },
            );
            return;
        }
        // A stacked bio reaching a partition of the lower disk: carry the link on.
        let carried = self
            .remaps
            .find(&(event.dev, event.aux_sector, event.nr_sector), |remap| {
                remap.partition.is_none() && remap.parent != SlotRef::NONE
            });
        let parent = match carried.and_then(|index| self.remaps.remove(index)) {
            Some(remap) => remap.parent,
            None => SlotRef::NONE,
        };
        self.push_remap(
            (event.dev, event.sector, event.nr_sector),
            Remap {
                partition: Some(event.aux_dev),
                parent,
            },
        );
    }

    fn push_remap(&mut self, key: RemapKey, remap: Remap) {
        if self.remaps.is_full() {
            if let Some((oldest, _)) = self.remaps.oldest() {
                self.remaps.remove(oldest);
                self.correlation.unmatched_events += 1;
            }
        }
        if self
            .remaps
            .insert(remap, Some(key), self.now_ns, true)
            .is_none()
        {
            self.correlation.unmatched_events += 1;
        }
    }

    fn on_queue(&mut self, event: &BlockEvent) {
        let disk = self.ensure_disk(event.dev);
        let remap = self
            .remaps
            .find(&(event.dev, event.sector, event.nr_sector), |_| true)
            .and_then(|index| self.remaps.remove(index))
            .unwrap_or_default();
        let part = match remap.partition {
            Some(partition) => self.ensure_partition(disk, partition),
            None => NO_PART,
        };
        let parent = self
            .user_ios
            .resolve(remap.parent)
            .and_then(|index| self.user_ios.get(index))
            .map(|parent| (parent.tgid, parent.target.tracked));
        let (tgid, tracked) = match parent {
            Some(inherited) => inherited,
            None => (event.tgid, self.is_tracked(event.tgid)),
        };
        let target = Target {
            disk,
            part,
            op: op_of(event),
            tracked,
        };
        let sectors = u64::from(event.nr_sector);
        let stats = self.stats_mut(target);
        stats.user_ios += 1;
        stats.fragments += 1;
        stats.bytes += sectors * SECTOR_BYTES;
        stats.user_io_sectors.saturating_record(sectors);
        if sectors == 0 {
            return;
        }
        if !self.make_room_for_fragment() {
            self.correlation.evicted += 1;
            return;
        }
        let io = UserIo {
            target,
            tgid,
            queue_ns: self.now_ns,
            outstanding: 1,
            fragments: 1,
            commands: 0,
            last_command: 0,
            incomplete: false,
            dropped: false,
            epoch: self.epoch,
        };
        let Some(io_index) = self.user_ios.insert(io, None, self.now_ns, false) else {
            self.correlation.evicted += 1;
            return;
        };
        let fragment = Fragment {
            io: self.user_ios.slot_ref(io_index),
            start: event.sector,
            end: event.sector.saturating_add(sectors),
            state: FragmentState::Pending,
            next: NIL,
        };
        if self
            .fragments
            .insert(fragment, Some((event.dev, event.sector)), self.now_ns, true)
            .is_none()
        {
            self.user_ios.remove(io_index);
            self.correlation.evicted += 1;
        }
    }

    fn on_split(&mut self, event: &BlockEvent) {
        let new_sector = event.aux_sector;
        // Room first: making room may evict the very fragment we are about to cut.
        let room = self.make_room_for_fragment();
        let found = if new_sector > event.sector {
            self.fragments.find(&(event.dev, event.sector), |fragment| {
                fragment.state == FragmentState::Pending && fragment.end > new_sector
            })
        } else {
            None
        };
        let io_index = found
            .and_then(|index| self.fragments.get(index))
            .and_then(|fragment| self.user_ios.resolve(fragment.io));
        let target = match io_index.and_then(|index| self.user_ios.get(index)) {
            Some(io) => io.target,
            None => self.fallback_target(event),
        };
        let cause = split_cause(
            &self.devices[target.disk as usize].limits,
            target.op,
            event.sector,
            new_sector,
        );
        let stats = self.stats_mut(target);
        stats.splits += 1;
        stats.fragments += 1;
        stats.split_causes[cause.index()] += 1;
        let Some(index) = found else {
            self.correlation.unmatched_events += 1;
            return;
        };
        let Some(front) = self.fragments.get_mut(index) else {
            return;
        };
        let remainder = Fragment {
            start: new_sector,
            end: front.end,
            ..*front
        };
        front.end = new_sector;
        let inserted = room
            && self
                .fragments
                .insert(remainder, Some((event.dev, new_sector)), self.now_ns, true)
                .is_some();
        if let Some(io) = io_index.and_then(|index| self.user_ios.get_mut(index)) {
            io.fragments += 1;
            if inserted {
                io.outstanding += 1;
            } else {
                io.incomplete = true;
            }
        }
    }

    fn on_merge(&mut self, event: &BlockEvent, kind: EventKind) {
        let length = u64::from(event.nr_sector);
        let found = self.fragments.find(&(event.dev, event.sector), |fragment| {
            fragment.state == FragmentState::Pending
                && (kind == EventKind::RqMerge || fragment.end - fragment.start == length)
        });
        let target = match found.and_then(|index| self.io_of_fragment(index)) {
            Some(io) => io.target,
            None => self.fallback_target(event),
        };
        self.stats_mut(target).merges += 1;
        if found.is_none() {
            self.correlation.unmatched_events += 1;
        }
    }

    fn on_issue(&mut self, event: &BlockEvent) {
        let disk = self.ensure_disk(event.dev);
        self.devices[disk as usize].seen_issue = true;
        let start = event.sector;
        let sectors = u64::from(event.nr_sector);
        let end = start.saturating_add(sectors);
        let serial = self.next_command;
        self.next_command += 1;

        let mut target = None;
        let mut first_queue_ns = None;
        let mut command_index = None;
        if sectors > 0 {
            // A requeued command is issued again with the same range.
            let reissued = self
                .commands
                .find(&(event.dev, start), |command| command.end == end)
                .is_some()
                && self
                    .fragments
                    .find(&(event.dev, start), |fragment| {
                        fragment.state == FragmentState::Pending
                    })
                    .is_none();
            if reissued {
                let fallback = self.fallback_target(event);
                self.count_command(fallback, start, sectors, None);
                return;
            }
            while self.commands.is_full() {
                let Some((oldest, _)) = self.commands.oldest() else {
                    break;
                };
                self.expire_command(oldest, DropReason::Evicted);
            }
            let command = Command {
                start,
                end,
                issue_ns: self.now_ns,
                target: Target::default(),
                epoch: self.epoch,
                head: NIL,
                tail: NIL,
                lost: false,
            };
            command_index =
                self.commands
                    .insert(command, Some((event.dev, start)), self.now_ns, true);
            match command_index {
                Some(index) => {
                    (target, first_queue_ns) =
                        self.gather_fragments(index, event.dev, start, end, serial);
                }
                None => self.correlation.unmatched_events += 1,
            }
        }
        let target = target.unwrap_or_else(|| self.fallback_target(event));
        if let Some(command) = command_index.and_then(|index| self.commands.get_mut(index)) {
            command.target = target;
        }
        self.count_command(target, start, sectors, first_queue_ns);
    }

    /// Moves the pending fragments tiling `[start, end)` on `dev` into the
    /// command. Returns the first fragment's target and the earliest queue time.
    fn gather_fragments(
        &mut self,
        command_index: u32,
        dev: u32,
        start: u64,
        end: u64,
        serial: u64,
    ) -> (Option<Target>, Option<u64>) {
        let mut target = None;
        let mut first_queue_ns: Option<u64> = None;
        let mut cursor = start;
        let mut tail = NIL;
        while cursor < end {
            let Some(index) = self.fragments.find(&(dev, cursor), |fragment| {
                fragment.state == FragmentState::Pending
                    && fragment.end > fragment.start
                    && fragment.end <= end
            }) else {
                // A bio we never saw (dropped, or queued before tracing began).
                self.correlation.unmatched_events += 1;
                break;
            };
            self.fragments.set_key(index, None);
            self.fragments.set_aged(index, false);
            let Some(fragment) = self.fragments.get_mut(index) else {
                break;
            };
            fragment.state = FragmentState::InCommand;
            fragment.next = NIL;
            cursor = fragment.end;
            let io_ref = fragment.io;
            if tail == NIL {
                if let Some(command) = self.commands.get_mut(command_index) {
                    command.head = index;
                }
            } else if let Some(previous) = self.fragments.get_mut(tail) {
                previous.next = index;
            }
            tail = index;
            if let Some(command) = self.commands.get_mut(command_index) {
                command.tail = index;
            }
            if let Some(io) = self
                .user_ios
                .resolve(io_ref)
                .and_then(|io_index| self.user_ios.get_mut(io_index))
            {
                if io.last_command != serial {
                    io.last_command = serial;
                    io.commands += 1;
                }
                target.get_or_insert(io.target);
                first_queue_ns = Some(first_queue_ns.map_or(io.queue_ns, |ns| ns.min(io.queue_ns)));
            }
        }
        (target, first_queue_ns)
    }

    fn on_complete(&mut self, event: &BlockEvent) {
        let done = u64::from(event.nr_sector);
        if done == 0 {
            // Flush completions: counted, not correlated.
            return;
        }
        let key = (event.dev, event.sector);
        let found = self
            .commands
            .find(&key, |command| command.end - command.start >= done)
            .or_else(|| self.commands.find(&key, |_| true));
        let Some(index) = found else {
            self.correlation.unmatched_events += 1;
            return;
        };
        let done_end = event.sector.saturating_add(done);
        let Some(command) = self.commands.get(index).copied() else {
            return;
        };
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.fragments.get_mut(head) else {
                head = NIL;
                break;
            };
            if fragment.end <= done_end {
                let next = fragment.next;
                self.complete_fragment(head);
                head = next;
            } else {
                if fragment.start < done_end {
                    fragment.start = done_end;
                }
                break;
            }
        }
        if done_end >= command.end {
            if command.epoch == self.epoch && !command.lost {
                let latency_us = self.now_ns.saturating_sub(command.issue_ns) / 1000;
                self.stats_mut(command.target)
                    .issue_to_complete_us
                    .saturating_record(latency_us);
            }
            // Fragments past the command's end cannot exist; complete any leftovers.
            while head != NIL {
                let next = self
                    .fragments
                    .get(head)
                    .map_or(NIL, |fragment| fragment.next);
                self.complete_fragment(head);
                head = next;
            }
            self.commands.remove(index);
        } else {
            if let Some(command) = self.commands.get_mut(index) {
                command.start = done_end;
                command.head = head;
                if head == NIL {
                    command.tail = NIL;
                }
            }
            self.commands.set_key(index, Some((event.dev, done_end)));
        }
    }

    fn on_bio_complete(&mut self, event: &BlockEvent) {
        let length = u64::from(event.nr_sector);
        if length == 0 {
            // Request-based completions arrive through block_rq_complete.
            return;
        }
        let found = self.fragments.find(&(event.dev, event.sector), |fragment| {
            fragment.state != FragmentState::InCommand && fragment.end - fragment.start == length
        });
        let bio_based = self
            .dev_index
            .get(&event.dev)
            .is_none_or(|slot| self.devices[slot.disk as usize].bio_based());
        let Some(index) = found else {
            if bio_based {
                self.correlation.unmatched_events += 1;
            }
            return;
        };
        let Some(fragment) = self.fragments.get(index).copied() else {
            return;
        };
        if fragment.state == FragmentState::Pending && bio_based {
            self.count_bio_command(fragment.io, fragment.start, length);
        }
        self.complete_fragment(index);
    }

    // ----- chain bookkeeping ------------------------------------------------

    /// A bio-based device's command: one fragment, counted against its user I/O.
    fn count_bio_command(&mut self, io_ref: SlotRef, start: u64, sectors: u64) {
        let serial = self.next_command;
        self.next_command += 1;
        let io = self
            .user_ios
            .resolve(io_ref)
            .and_then(|index| self.user_ios.get_mut(index));
        let Some(io) = io else {
            return;
        };
        io.commands += 1;
        io.last_command = serial;
        let target = io.target;
        self.count_command(target, start, sectors, None);
    }

    fn count_command(&mut self, target: Target, start: u64, sectors: u64, queued_ns: Option<u64>) {
        let now_ns = self.now_ns;
        let device = &mut self.devices[target.disk as usize];
        let pbs = device.limits.pbs_sectors.max(1);
        let max_sectors = match device.limits.max_sectors {
            0 => DEFAULT_MAX_SECTORS,
            known => known,
        };
        let small = |length: u64| length * SMALL_COMMAND_DIVISOR <= max_sectors;
        let last = &mut device.last_issue[op_index(target.op)];
        let adjacent_unmerged = sectors > 0
            && last.valid
            && last.end == start
            && small(sectors)
            && small(last.sectors)
            && queued_ns.is_some_and(|queued| queued <= last.issue_ns);
        if sectors > 0 && queued_ns.is_some() {
            *last = LastIssue {
                end: start.saturating_add(sectors),
                sectors,
                issue_ns: now_ns,
                valid: true,
            };
        }
        let stats = device
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op);
        stats.commands += 1;
        stats.command_sectors.saturating_record(sectors);
        if sectors > 0 {
            if !start.is_multiple_of(pbs) || !sectors.is_multiple_of(pbs) {
                stats.misaligned_pbs += 1;
            }
            if !start.is_multiple_of(8) || !sectors.is_multiple_of(8) {
                stats.misaligned_4k += 1;
            }
        }
        if adjacent_unmerged {
            stats.adjacent_unmerged += 1;
        }
    }

    /// A fragment finished normally.
    fn complete_fragment(&mut self, index: u32) {
        let Some(fragment) = self.fragments.remove(index) else {
            return;
        };
        let Some(io_index) = self.user_ios.resolve(fragment.io) else {
            return;
        };
        let finished = match self.user_ios.get_mut(io_index) {
            Some(io) => {
                io.outstanding = io.outstanding.saturating_sub(1);
                io.outstanding == 0
            }
            None => false,
        };
        if finished {
            self.finish_io(io_index);
        }
    }

    fn finish_io(&mut self, io_index: u32) {
        let Some(io) = self.user_ios.remove(io_index) else {
            return;
        };
        if io.incomplete {
            self.correlation.incomplete += 1;
            return;
        }
        if io.epoch != self.epoch {
            return;
        }
        let latency_us = self.now_ns.saturating_sub(io.queue_ns) / 1000;
        let stats = self.stats_mut(io.target);
        stats
            .fragments_per_io
            .saturating_record(u64::from(io.fragments));
        stats
            .commands_per_io
            .saturating_record(u64::from(io.commands));
        stats.queue_to_complete_us.saturating_record(latency_us);
    }

    /// A fragment dropped without completing: its user I/O is incomplete.
    fn drop_fragment(&mut self, fragment: Fragment, reason: DropReason) {
        let Some(io_index) = self.user_ios.resolve(fragment.io) else {
            return;
        };
        let (finished, newly_dropped) = match self.user_ios.get_mut(io_index) {
            Some(io) => {
                let newly_dropped = !io.dropped;
                io.dropped = true;
                io.incomplete = true;
                io.outstanding = io.outstanding.saturating_sub(1);
                (io.outstanding == 0, newly_dropped)
            }
            None => return,
        };
        if newly_dropped {
            match reason {
                DropReason::AgedOut => self.correlation.aged_out += 1,
                DropReason::Evicted => self.correlation.evicted += 1,
            }
        }
        if finished {
            self.finish_io(io_index);
        }
    }

    /// Drops a fragment that is not part of a command.
    fn expire_fragment(&mut self, index: u32, reason: DropReason) {
        if let Some(fragment) = self.fragments.remove(index) {
            self.drop_fragment(fragment, reason);
        }
    }

    /// Drops a command and the fragments it carries.
    fn expire_command(&mut self, index: u32, reason: DropReason) {
        let Some(command) = self.commands.remove(index) else {
            return;
        };
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.fragments.remove(head) else {
                break;
            };
            head = fragment.next;
            self.drop_fragment(fragment, reason);
        }
    }

    /// Lazy age-out, from the newest event timestamp seen.
    fn expire_aged(&mut self) {
        let Some(threshold) = self.now_ns.checked_sub(self.limits.max_age_ns) else {
            return;
        };
        while let Some((index, born_ns)) = self.fragments.oldest() {
            if born_ns >= threshold {
                break;
            }
            self.expire_fragment(index, DropReason::AgedOut);
        }
        while let Some((index, born_ns)) = self.commands.oldest() {
            if born_ns >= threshold {
                break;
            }
            self.expire_command(index, DropReason::AgedOut);
        }
        while let Some((index, born_ns)) = self.remaps.oldest() {
            if born_ns >= threshold {
                break;
            }
            self.remaps.remove(index);
            self.correlation.unmatched_events += 1;
        }
    }

    /// Makes room for one more user I/O and fragment, evicting the oldest.
    fn make_room_for_fragment(&mut self) -> bool {
        while self.fragments.is_full() || self.user_ios.is_full() {
            if let Some((oldest, _)) = self.fragments.oldest() {
                self.expire_fragment(oldest, DropReason::Evicted);
            } else if let Some((oldest, _)) = self.commands.oldest() {
                self.expire_command(oldest, DropReason::Evicted);
            } else {
                return false;
            }
        }
        true
    }

    fn io_of_fragment(&self, index: u32) -> Option<&UserIo> {
        let fragment = self.fragments.get(index)?;
        let io_index = self.user_ios.resolve(fragment.io)?;
        self.user_ios.get(io_index)
    }

    // ----- devices ------------------------------------------------------------

    fn is_tracked(&self, tgid: u32) -> bool {
        !self.tracked.is_empty() && self.tracked.contains(&tgid)
    }

    /// Where an event that matched no chain is counted: by its own device,
    /// the partition holding its sector, and its own rwbs.
    fn fallback_target(&mut self, event: &BlockEvent) -> Target {
        let disk = self.ensure_disk(event.dev);
        let device = &self.devices[disk as usize];
        Target {
            disk,
            part: device.partition_at(event.sector),
            op: op_of(event),
            tracked: self.is_tracked(event.tgid),
        }
    }

    /// The disk an event's dev names, created (as unknown) on first sight.
    fn ensure_disk(&mut self, dev: u32) -> u32 {
        if let Some(slot) = self.dev_index.get(&dev) {
            return slot.disk;
        }
        self.devices.push(DeviceState::unknown(dev));
        let disk = (self.devices.len() - 1) as u32;
        self.dev_index.insert(
            dev,
            DevSlot {
                disk,
                part: NO_PART,
            },
        );
        disk
    }

    /// The partition `dev` of `disk`, created (as unknown) on first sight.
    fn ensure_partition(&mut self, disk: u32, dev: u32) -> u32 {
        if let Some(slot) = self.dev_index.get(&dev) {
            return if slot.disk == disk {
                slot.part
            } else {
                NO_PART
            };
        }
        let device = &mut self.devices[disk as usize];
        device.parts.push(PartState {
            dev,
            name: DevId::from_kernel(dev).to_string(),
            geometry: PartitionGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..PartitionGeometry::default()
            },
            stats: ScopeStats::default(),
            gone: false,
        });
        let part = (device.parts.len() - 1) as u32;
        self.dev_index.insert(dev, DevSlot { disk, part });
        part
    }

    fn stats_mut(&mut self, target: Target) -> &mut OpStats {
        self.devices[target.disk as usize]
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op)
    }

    // ----- reports ------------------------------------------------------------

    /// Per disk (its own and its partitions' traffic), partitions inside.
    pub fn devices(&self) -> Vec<DeviceReport> {
        self.devices
            .iter()
            .map(|device| {
                let mut disk_total: [Option<OpStats>; OP_COUNT] = Default::default();
                device.whole.collect_into(&ALL_ORIGINS, &mut disk_total);
                let partitions = device
                    .parts
                    .iter()
                    .map(|part| {
                        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
                        part.stats.collect_into(&ALL_ORIGINS, &mut per_op);
                        part.stats.collect_into(&ALL_ORIGINS, &mut disk_total);
                        PartitionReport {
                            name: part.name.clone(),
                            dev: DevId::from_kernel(part.dev).to_string(),
                            geometry: part.geometry.clone(),
                            measures: stats::measures(&per_op),
                            gone: part.gone,
                        }
                    })
                    .collect();
                DeviceReport {
                    name: device.name.clone(),
                    dev: device
                        .dev
                        .map_or_else(String::new, |dev| DevId::from_kernel(dev).to_string()),
                    geometry: device.geometry.clone(),
                    measures: stats::measures(&disk_total),
                    partitions,
                    gone: device.gone,
                }
            })
            .collect()
    }

    /// Per disk and partition with traffic: the tracked processes' I/O vs the rest.
    pub fn origins(&self) -> Vec<OriginMeasures> {
        let mut origins = Vec::new();
        for device in &self.devices {
            let mut disk_tracked: [Option<OpStats>; OP_COUNT] = Default::default();
            let mut disk_other: [Option<OpStats>; OP_COUNT] = Default::default();
            device.whole.collect_into(&[true], &mut disk_tracked);
            device.whole.collect_into(&[false], &mut disk_other);
            let mut partitions = Vec::new();
            for part in &device.parts {
                let mut tracked: [Option<OpStats>; OP_COUNT] = Default::default();
                let mut other: [Option<OpStats>; OP_COUNT] = Default::default();
                part.stats.collect_into(&[true], &mut tracked);
                part.stats.collect_into(&[false], &mut other);
                part.stats.collect_into(&[true], &mut disk_tracked);
                part.stats.collect_into(&[false], &mut disk_other);
                let entry = OriginMeasures {
                    device: part.name.clone(),
                    tracked: stats::measures(&tracked),
                    other: stats::measures(&other),
                };
                if !entry.tracked.ops.is_empty() || !entry.other.ops.is_empty() {
                    partitions.push(entry);
                }
            }
            let entry = OriginMeasures {
                device: device.name.clone(),
                tracked: stats::measures(&disk_tracked),
                other: stats::measures(&disk_other),
            };
            if !entry.tracked.ops.is_empty() || !entry.other.ops.is_empty() {
                origins.push(entry);
            }
            origins.extend(partitions);
        }
        origins
    }

    /// The static audit of each known disk, enriched with live evidence, plus
    /// the diagnoses only traffic can support.
    pub fn diagnoses(&self) -> Vec<Diagnosis> {
        let mut found = diagnose::diagnose(&self.devices, &self.dirty);
        found.sort_by(|left, right| {
            right
                .severity
                .cmp(&left.severity)
                .then_with(|| left.device.cmp(&right.device))
                .then_with(|| left.code.cmp(right.code))
        });
        found
    }
}

impl Engine {
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
                    self.events.dirty_buffer += grown;
                }
            }
        }
    }
}

impl crate::sink::EventSink for Engine {
    fn block_event(&mut self, event: &BlockEvent) {
        self.ingest(event)
    }

    fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        Engine::dirty_buffer_totals(self, totals)
    }

    fn events_lost(&mut self) {
        Engine::events_lost(self)
    }
}
