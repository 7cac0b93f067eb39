//! The correlator: one handler per kernel event, in kernel order. It
//! follows each user I/O through the [`Chains`] it owns, asks the device
//! registry what each device is, and hands what it concludes to the
//! [`Sink`] as outcomes. It counts nothing itself.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use tracer_common::{BlockAction, BlockEvent, EventKind};

mod chain;

use crate::engine::accounting::Sink;
use crate::engine::attribution::OwnerSlots;
use crate::engine::devices::Devices;
use crate::engine::outcome::{Account, CommandId, IoId, Outcome};
use crate::engine::split::split_cause;
use crate::engine::stats::op_index;
use crate::engine::table::{KeyHasher, SlotRef, NIL};
use crate::engine::target::{is_atomic, op_of, Target, NO_PART};
use crate::engine::EngineLimits;
use crate::model::{CorrelationStats, Op};
use chain::{
    Chains, Command, DropReason, EmptyCommand, Fragment, FragmentState, QueuedFlush, Remap, UserIo,
};

/// Request remaps kept waiting for their clone's issue, at most.
const MAX_RQ_REMAPS: usize = 1 << 12;

pub(super) struct Correlator {
    /// The chains in flight, and the correlation's clock and counters.
    chains: Chains,
    /// Processes whose I/O counts as tracked.
    tracked: HashSet<u32, BuildHasherDefault<KeyHasher>>,
}

impl Correlator {
    /// Tables bounded by `limits`, `reserve` slots each allocated up front.
    pub(super) fn new(limits: EngineLimits, reserve: usize) -> Correlator {
        Correlator {
            chains: Chains::new(limits, reserve, reserve),
            tracked: HashSet::default(),
        }
    }

    /// How the correlation went, with what is in flight now.
    pub(super) fn correlation(&self) -> CorrelationStats {
        CorrelationStats {
            in_flight: self.chains.in_flight(),
            ..self.chains.correlation
        }
    }

    /// An event no handler reads (an unknown kind).
    pub(super) fn unmatched(&mut self) {
        self.chains.correlation.unmatched_events += 1;
    }

    /// A reset: chains in flight go on, but feed no new histograms.
    pub(super) fn reset(&mut self) {
        self.chains.new_epoch();
    }

    /// The kernel dropped events: every chain in flight may have lost one.
    pub(super) fn events_lost(&mut self) {
        self.chains.events_lost();
    }

    /// The end of a trace at `now_ns` (an import's last event): commands
    /// still in flight far longer than their device's own completions took
    /// lost their completions; their chains end incomplete. Returns how many
    /// commands were given up.
    pub(super) fn settle_at_end(&mut self, now_ns: u64, out: &mut Sink) -> u64 {
        self.chains.settle_at_end(now_ns, out)
    }

    /// With nothing in flight, the tables give back what a burst grew
    /// beyond `keep` slots. True if one shrank.
    pub(super) fn shrink_idle(&mut self, keep: usize) -> bool {
        let keep = self.chains.limits.max_in_flight.min(keep);
        self.chains.shrink_idle(keep)
    }

    /// Slots allocated in the user I/O, fragment, command and remap tables.
    #[cfg(test)]
    pub(super) fn allocated(&self) -> [usize; 4] {
        self.chains.allocated()
    }

    /// Adds processes whose I/O counts as tracked.
    pub(super) fn track_processes(&mut self, tgids: impl IntoIterator<Item = u32>) {
        self.tracked.extend(tgids);
    }

    fn is_tracked(&self, tgid: u32) -> bool {
        !self.tracked.is_empty() && self.tracked.contains(&tgid)
    }

    /// One kernel event of a chain, in kernel order.
    #[inline(always)]
    pub(super) fn ingest(
        &mut self,
        event: &BlockEvent,
        action: BlockAction,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let chains = &mut self.chains;
        chains.now_ns = chains.now_ns.max(event.ts_ns);
        if action.kind() != EventKind::Queue || chains.held_remap_aged() {
            chains.store_held_remap();
        }
        chains.expire_aged(out);
        match action {
            BlockAction::Remap {
                from_dev,
                from_sector,
            } => self.on_remap(event, from_dev, from_sector, devices, out),
            BlockAction::Queue => self.on_queue(event, true, devices, out),
            BlockAction::Split { remainder } => self.on_split(event, remainder, devices, out),
            BlockAction::Merge(kind) => self.on_merge(event, kind, devices, out),
            BlockAction::Issue { request } => self.on_issue(event, request, devices, out),
            BlockAction::Complete { request, error } => {
                self.on_complete(event, request, error, devices, out)
            }
            BlockAction::BioComplete { error } => self.on_bio_complete(event, error, devices, out),
            BlockAction::Requeue => self.on_requeue(event, devices, out),
            BlockAction::RqRemap {
                from_dev,
                from_sector,
            } => self.on_rq_remap(event, from_dev, from_sector),
            // Counted by the engine, not a step of any chain.
            BlockAction::DirtyBuffer { .. } => {}
        }
    }

    /// Where an event that matched no chain is counted: by its own device,
    /// the partition holding its sector, and its own rwbs.
    fn fallback_target(&self, event: &BlockEvent, devices: &mut Devices) -> Target {
        let disk = devices.ensure_disk(event.dev);
        Target {
            disk,
            part: devices.get(disk).partition_at(event.sector),
            op: op_of(event),
            tracked: self.is_tracked(event.tgid),
        }
    }

    fn on_remap(
        &mut self,
        event: &BlockEvent,
        from_dev: u32,
        from_sector: u64,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        if devices.is_request_device(from_dev) {
            // blkparse prints a request's remap as a bio's: both are `A`.
            return self.on_rq_remap(event, from_dev, from_sector);
        }
        let length = u64::from(event.nr_sector);
        let stripes = length > 0 && devices.is_stripe_writer(from_dev);
        // Stacked: the old device holds this bio as a pending fragment of its own.
        let traced = if length == 0 {
            None
        } else {
            self.chains
                .fragments
                .find(&(from_dev, from_sector), |fragment| {
                    fragment.state == FragmentState::Pending
                        && fragment.end - fragment.start == length
                })
                .or_else(|| self.cut_front_for_clone(event, from_dev, from_sector, devices, out))
        };
        if traced.is_none() && stripes {
            self.remap_stripe_io(event, from_dev, devices);
            return;
        }
        if traced.is_none() && length > 0 && self.remap_another_clone(event, from_dev, from_sector)
        {
            return;
        }
        let inferred = match (traced, length) {
            (None, 1..) => {
                self.queue_seen_only_in_remap(event, from_dev, from_sector, devices, out)
            }
            _ => None,
        };
        if let Some(index) = traced.or(inferred) {
            let (io, start, untraced_end) = match self.chains.fragments.get_mut(index) {
                Some(fragment) => {
                    fragment.state = FragmentState::SentDown;
                    (fragment.io, fragment.start, fragment.untraced_end)
                }
                None => return,
            };
            self.chains
                .count_bio_command(from_dev, io, start, length, out);
            if untraced_end {
                self.chains.complete_fragment(index, false, out);
            }
            // The upper device's completion is not in the trace: its user I/O
            // ends with the bio it became.
            let upper_fragment = match inferred {
                Some(index) => self.chains.fragments.slot_ref(index),
                None => SlotRef::NONE,
            };
            self.chains.push_remap(
                (event.dev, event.sector, event.nr_sector),
                Remap {
                    parent: io,
                    upper_fragment,
                    ..Remap::default()
                },
            );
            return;
        }
        // A stacked bio reaching a partition of the lower disk: carry the link
        // on. The upper remap named the disk (bio_dev is the disk's since
        // 5.12) or, on older kernels, the partition itself.
        let carried_on = |remap: &Remap| remap.partition.is_none() && remap.parent != SlotRef::NONE;
        let carried = self
            .chains
            .remaps
            .find(&(event.dev, from_sector, event.nr_sector), carried_on)
            .or_else(|| {
                self.chains
                    .remaps
                    .find(&(from_dev, from_sector, event.nr_sector), carried_on)
            });
        let upper = carried
            .and_then(|index| self.chains.remaps.remove(index))
            .unwrap_or_default();
        self.chains.push_remap(
            (event.dev, event.sector, event.nr_sector),
            Remap {
                partition: Some(from_dev),
                partition_start: event.sector.saturating_sub(from_sector),
                parent: upper.parent,
                upper_fragment: upper.upper_fragment,
            },
        );
    }

    /// md raid4/5/6's own bio for a stripe (data, parity, or a read for a
    /// read-modify-write) sent to a member: the user's bio stays whole, and
    /// the stripe bio continues the device's last user I/O, the one md is
    /// writing (its sector names the stripe, not a piece of that bio).
    fn remap_stripe_io(&mut self, event: &BlockEvent, from_dev: u32, devices: &mut Devices) {
        let parent = devices
            .slot(from_dev)
            .map(|slot| self.chains.marks(slot.disk).last_fragment)
            .and_then(|fragment| self.chains.fragments.resolve(fragment))
            .and_then(|index| self.chains.fragments.get(index))
            .map_or(SlotRef::NONE, |fragment| fragment.io);
        self.chains.correlation.stripe_remaps += 1;
        self.chains.push_remap(
            (event.dev, event.sector, event.nr_sector),
            Remap {
                parent,
                ..Remap::default()
            },
        );
    }

    /// A second remap of a bio already sent down whole (raid1's mirrors, a
    /// read retried on another leg): the same user I/O goes on below on one
    /// more device. Not another command of the upper device; the disk
    /// commands it becomes are counted to it.
    fn remap_another_clone(&mut self, event: &BlockEvent, from_dev: u32, from_sector: u64) -> bool {
        let length = u64::from(event.nr_sector);
        let sent = self
            .chains
            .fragments
            .find(&(from_dev, from_sector), |fragment| {
                fragment.state == FragmentState::SentDown && fragment.end - fragment.start == length
            });
        let Some(io) = sent
            .and_then(|index| self.chains.fragments.get(index))
            .map(|f| f.io)
        else {
            return false;
        };
        self.chains.correlation.mirrored_remaps += 1;
        self.chains.push_remap(
            (event.dev, event.sector, event.nr_sector),
            Remap {
                parent: io,
                ..Remap::default()
            },
        );
        true
    }

    /// A remap from an upper device (dm, md) whose own queue was not traced,
    /// as with `blktrace -d` on the lower disk: the remap proves a bio of
    /// this size was submitted there, so that bio is the user I/O, queued
    /// where the remap says. Returns its pending fragment.
    fn queue_seen_only_in_remap(
        &mut self,
        event: &BlockEvent,
        from_dev: u32,
        from_sector: u64,
        devices: &mut Devices,
        out: &mut Sink,
    ) -> Option<u32> {
        if !devices.is_upper_device(event.dev, from_dev) {
            return None;
        }
        self.chains.correlation.queues_from_remaps += 1;
        let queued = BlockEvent {
            dev: from_dev,
            sector: from_sector,
            ..*event
        };
        self.on_queue(&queued, false, devices, out);
        self.chains
            .fragments
            .find(&(from_dev, from_sector), |fragment| {
                fragment.state == FragmentState::Pending
            })
    }

    /// `traced` unless the queue is inferred from a remap.
    fn on_queue(
        &mut self,
        event: &BlockEvent,
        traced: bool,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let disk = devices.ensure_disk(event.dev);
        devices.get_mut(disk).seen_queue |= traced;
        let remap = self
            .chains
            .take_remap((event.dev, event.sector, event.nr_sector))
            .unwrap_or_default();
        let part = match remap.partition {
            Some(partition) => {
                let part = devices.ensure_partition(disk, partition);
                devices.learn_partition_start(disk, part, remap.partition_start);
                part
            }
            None => NO_PART,
        };
        let parent = self
            .chains
            .user_ios
            .resolve(remap.parent)
            .and_then(|index| self.chains.user_ios.get(index))
            .map(|parent| (parent.tgid, parent.target.tracked, parent.owners));
        let (tgid, tracked, inherited_owners) = match parent {
            Some((tgid, tracked, owners)) => (tgid, tracked, Some(owners)),
            None => (event.tgid, self.is_tracked(event.tgid), None),
        };
        let target = Target {
            disk,
            part,
            op: op_of(event),
            tracked,
        };
        let sectors = u64::from(event.nr_sector);
        let inherited = inherited_owners.is_some();
        let owners = match inherited_owners {
            // A stacked device's bio belongs to whoever queued the upper one.
            Some(owners) => owners,
            None => out.owners_of(&event.owner, event.tgid, (disk, part)),
        };
        let queued = |io: Option<IoId>, segments: Option<u16>| Outcome::Queued {
            io,
            dev: event.dev,
            sector: event.sector,
            sectors: event.nr_sector,
            op: target.op,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
            inherited,
            segments,
        };
        if sectors == 0 {
            if target.op == Op::Flush {
                let flush = QueuedFlush {
                    queue_ns: self.chains.now_ns,
                    account: Account { target, owners },
                    epoch: self.chains.epoch,
                };
                self.chains.push_queued_flush(event.dev, flush);
            }
            out.emit(queued(None, None));
            return;
        }
        if !self.chains.make_room_for_fragment(out) {
            self.chains.correlation.evicted += 1;
            out.emit(queued(None, None));
            return;
        }
        let io = UserIo {
            target,
            tgid,
            queue_ns: self.chains.now_ns,
            outstanding: 1,
            fragments: 1,
            commands: 0,
            last_command: 0,
            owners,
            incomplete: false,
            dropped: false,
            in_ring_drop: false,
            failed: false,
            epoch: self.chains.epoch,
            upper_fragment: remap.upper_fragment,
            parent: remap.parent,
            last_disk_command: 0,
            atomic: is_atomic(&event.rwbs),
            shared_command: false,
            dev: event.dev,
            sector: event.sector,
            sectors: event.nr_sector,
        };
        let Some(io_index) = self
            .chains
            .user_ios
            .insert(io, None, self.chains.now_ns, false)
        else {
            self.chains.correlation.evicted += 1;
            out.emit(queued(None, None));
            return;
        };
        let io_ref = self.chains.user_ios.slot_ref(io_index);
        let stream = Some(event.segments);
        let fragment = Fragment {
            io: io_ref,
            start: event.sector,
            end: event.sector.saturating_add(sectors),
            op: target.op,
            state: FragmentState::Pending,
            full: false,
            untraced_end: false,
            next: NIL,
        };
        let Some(fragment_index) = self.chains.fragments.insert(
            fragment,
            Some((event.dev, event.sector)),
            self.chains.now_ns,
            true,
        ) else {
            self.chains.user_ios.remove(io_index);
            self.chains.correlation.evicted += 1;
            out.emit(queued(None, stream));
            return;
        };
        if devices.get(disk).bio_based() {
            self.chains.marks_mut(disk).last_fragment =
                self.chains.fragments.slot_ref(fragment_index);
        }
        out.emit(queued(Some(IoId::of(io_ref)), stream));
    }

    /// The pending fragment a split at `new_sector` cuts. block/blk-merge.c
    /// traces the piece cut off (its start, then the cut); device-mapper
    /// traces the bio it trimmed, whose start is already the cut, so that
    /// piece is the device's last fragment, if the cut falls inside it.
    fn fragment_split_at(
        &self,
        event: &BlockEvent,
        new_sector: u64,
        devices: &Devices,
    ) -> Option<(u32, u64)> {
        if new_sector > event.sector {
            let found = self
                .chains
                .fragments
                .find(&(event.dev, event.sector), |fragment| {
                    fragment.state == FragmentState::Pending && fragment.end > new_sector
                })?;
            return Some((found, event.sector));
        }
        if new_sector != event.sector {
            return None;
        }
        let slot = devices.slot(event.dev)?;
        let last_fragment = self.chains.marks(slot.disk).last_fragment;
        let index = self.chains.fragments.resolve(last_fragment)?;
        let fragment = self.chains.fragments.get(index)?;
        let inside = fragment.start < new_sector && new_sector < fragment.end;
        (fragment.state == FragmentState::Pending && inside).then_some((index, fragment.start))
    }

    fn on_split(
        &mut self,
        event: &BlockEvent,
        new_sector: u64,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        if new_sector == event.sector && self.take_precut(event.dev, new_sector, devices) {
            // A clone's remap already cut the bio here (dm-striped maps the
            // clone before it traces the trim): traced after all.
            let inferred = &mut self.chains.correlation.splits_inferred;
            *inferred = inferred.saturating_sub(1);
            return;
        }
        // Room first: making room may evict the very fragment we are about to cut.
        let room = self.chains.make_room_for_fragment(out);
        let cut = self.fragment_split_at(event, new_sector, devices);
        self.cut_fragment(event, cut, new_sector, room, devices, out);
    }

    /// Whether a remap already made the cut at `at` on the bio-based `dev`
    /// (and forgets it).
    fn take_precut(&mut self, dev: u32, at: u64, devices: &mut Devices) -> bool {
        let Some(slot) = devices.slot(dev) else {
            return false;
        };
        let marks = self.chains.marks_mut(slot.disk);
        let precut = marks.precut_at == Some(at);
        if precut {
            marks.precut_at = None;
        }
        precut
    }

    /// A remap of a clone of the front of a bio-based device's last
    /// fragment, before the trim is traced: makes that cut now, as the
    /// split that follows names it, and returns the front piece.
    ///
    /// md before 6.18 (22f166218f73; Debian's 6.1 guest) never traces its
    /// own cuts (raid10's chunks, raid5's chunk-aligned reads): the piece's
    /// remap is all there is, and its completion is traced. On md raid4/5/6,
    /// whose stripe bios start where the user's bio does too, only a read
    /// cut at a chunk boundary is such a piece.
    fn cut_front_for_clone(
        &mut self,
        event: &BlockEvent,
        from_dev: u32,
        from_sector: u64,
        devices: &mut Devices,
        out: &mut Sink,
    ) -> Option<u32> {
        let slot = devices.slot(from_dev)?;
        if !devices.get(slot.disk).bio_based() {
            return None;
        }
        let last_fragment = self.chains.marks(slot.disk).last_fragment;
        let index = self.chains.fragments.resolve(last_fragment)?;
        let fragment = self.chains.fragments.get(index)?;
        let at = from_sector.checked_add(u64::from(event.nr_sector))?;
        if fragment.state != FragmentState::Pending
            || fragment.start != from_sector
            || fragment.end <= at
        {
            return None;
        }
        let device = devices.get(slot.disk);
        if device.writes_own_stripes() {
            let chunk = device.limits.chunk_sectors;
            if fragment.op != Op::Read || chunk == 0 || !at.is_multiple_of(chunk) {
                return None;
            }
        }
        let md = device.is_md();
        let room = self.chains.make_room_for_fragment(out);
        // As device-mapper will trace it: on the trimmed bio, starting at the cut.
        let trim = BlockEvent {
            dev: from_dev,
            sector: at,
            ..*event
        };
        self.cut_fragment(&trim, Some((index, from_sector)), at, room, devices, out);
        if md {
            if let Some(front) = self.chains.fragments.get_mut(index) {
                front.untraced_end = false;
            }
        }
        self.chains.correlation.splits_inferred += 1;
        self.chains.marks_mut(slot.disk).precut_at = Some(at);
        Some(index)
    }

    /// Cuts the fragment `cut` names (index, its start) at `new_sector`, and
    /// counts the split `event` traced on the device.
    fn cut_fragment(
        &mut self,
        event: &BlockEvent,
        cut: Option<(u32, u64)>,
        new_sector: u64,
        room: bool,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let found = cut.map(|(index, _)| index);
        let piece_start = cut.map_or(event.sector, |(_, start)| start);
        let io_ref = found
            .and_then(|index| self.chains.fragments.get(index))
            .map(|fragment| fragment.io);
        let io_index = io_ref.and_then(|io| self.chains.user_ios.resolve(io));
        let (target, owners, first_cut) =
            match io_index.and_then(|index| self.chains.user_ios.get(index)) {
                Some(io) => (io.target, io.owners, io.fragments == 1),
                None => (
                    self.fallback_target(event, devices),
                    OwnerSlots::NONE,
                    false,
                ),
            };
        let cause = split_cause(
            &devices.get(target.disk).limits,
            target.op,
            piece_start,
            new_sector,
        );
        out.emit(Outcome::Split {
            io: io_index.and(io_ref).map(IoId::of),
            dev: event.dev,
            at: new_sector,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
            cause,
            first_cut,
        });
        let Some(index) = found else {
            self.chains.correlation.unmatched_events += 1;
            return;
        };
        let Some(front) = self.chains.fragments.get_mut(index) else {
            return;
        };
        let remainder = Fragment {
            start: new_sector,
            end: front.end,
            untraced_end: false,
            ..*front
        };
        front.end = new_sector;
        front.full = cause.fills_the_request();
        front.untraced_end = new_sector == event.sector;
        let remainder_index = if room {
            self.chains.fragments.insert(
                remainder,
                Some((event.dev, new_sector)),
                self.chains.now_ns,
                true,
            )
        } else {
            None
        };
        let inserted = remainder_index.is_some();
        if let (Some(index), Some(slot)) = (remainder_index, devices.slot(event.dev)) {
            if devices.get(slot.disk).bio_based() {
                self.chains.marks_mut(slot.disk).last_fragment =
                    self.chains.fragments.slot_ref(index);
            }
        }
        if let Some(io) = io_index.and_then(|index| self.chains.user_ios.get_mut(index)) {
            io.fragments += 1;
            if inserted {
                io.outstanding += 1;
            } else {
                io.incomplete = true;
            }
        }
    }

    fn on_merge(
        &mut self,
        event: &BlockEvent,
        kind: EventKind,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let length = u64::from(event.nr_sector);
        let found = self
            .chains
            .fragments
            .find(&(event.dev, event.sector), |fragment| {
                fragment.state == FragmentState::Pending
                    && (kind == EventKind::RqMerge || fragment.end - fragment.start == length)
            });
        let (target, owners) = match found.and_then(|index| self.chains.io_of_fragment(index)) {
            Some(io) => (io.target, io.owners),
            None => (self.fallback_target(event, devices), OwnerSlots::NONE),
        };
        let io = found
            .and_then(|index| self.chains.fragments.get(index))
            .filter(|fragment| self.chains.user_ios.resolve(fragment.io).is_some())
            .map(|fragment| IoId::of(fragment.io));
        out.emit(Outcome::Merged {
            io,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
        });
        if found.is_none() {
            self.chains.correlation.unmatched_events += 1;
        }
    }

    /// An issue of exactly a remapped range whose queue never came (md on
    /// NVMe traces print A, D, C and no Q): the remapped bio is queued here,
    /// so the command carries it and the chain above it ends with it.
    fn queue_missing_below_remap(
        &mut self,
        event: &BlockEvent,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let key = (event.dev, event.sector, event.nr_sector);
        let waiting = matches!(self.chains.held_remap, Some((held, _, _)) if held == key)
            || self.chains.remaps.find(&key, |_| true).is_some();
        if !waiting
            || self
                .chains
                .fragments
                .find(&(event.dev, event.sector), |fragment| {
                    fragment.state == FragmentState::Pending
                })
                .is_some()
        {
            return;
        }
        self.chains.correlation.queues_from_remaps += 1;
        let queued = BlockEvent {
            kind: EventKind::Queue as u8,
            ..*event
        };
        self.on_queue(&queued, false, devices, out);
    }

    fn on_issue(
        &mut self,
        event: &BlockEvent,
        request: u64,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        // Live, a remap is consumed by its queue before any issue: this
        // costs a length check.
        if event.nr_sector > 0 && (self.chains.held_remap.is_some() || self.chains.remaps.len() > 0)
        {
            self.queue_missing_below_remap(event, devices, out);
        }
        let disk = devices.ensure_disk(event.dev);
        devices.get_mut(disk).seen_issue = true;
        let start = event.sector;
        let sectors = u64::from(event.nr_sector);
        let end = start.saturating_add(sectors);
        let serial = self.chains.next_command;
        self.chains.next_command += 1;
        // Raw tracepoints name the request: one still carrying a command that
        // was not requeued never reported that command's completion. (Not a
        // flush: blk-flush's flush request borrows another request's tag.)
        let identity = if sectors > 0 { request } else { 0 };
        if let Some(index) = self
            .redispatched(event, start, end)
            .filter(|_| devices.get(disk).seen_queue)
        {
            self.redispatch(index, event.dev, identity, out);
            return;
        }
        if let Some(stale) = self.chains.command_of_request(event.dev, identity) {
            if self
                .chains
                .commands
                .get(stale)
                .is_some_and(|c| c.requeued_ns.is_none())
            {
                self.chains
                    .expire_command(stale, DropReason::CompletionLost, out);
            }
        }

        if self.reissue(event, disk, identity, out) {
            return;
        }
        let mut target = None;
        let mut ends = None;
        let mut command_index = None;
        if sectors > 0 {
            // Issued again with the same range on a device whose queues the
            // trace lacks: each issue may carry a bio we never saw, so it
            // counts again, and the first command still takes the completion.
            let reissued = self
                .chains
                .commands
                .find(&(event.dev, start), |command| command.end == end)
                .is_some()
                && self
                    .chains
                    .fragments
                    .find(&(event.dev, start), |fragment| {
                        fragment.state == FragmentState::Pending
                    })
                    .is_none();
            if reissued {
                let fallback = self.fallback_target(event, devices);
                self.chains.issue_command(
                    serial,
                    event.dev,
                    fallback,
                    OwnerSlots::NONE,
                    start,
                    sectors,
                    None,
                    out,
                );
                return;
            }
            let clone_of = match self.chains.rq_remaps.is_empty() {
                true => None,
                false => self
                    .chains
                    .rq_remaps
                    .remove(&(event.dev, start, event.nr_sector)),
            };
            command_index = self.chains.insert_command(
                serial,
                event.dev,
                (start, end),
                None,
                Target::default(),
                out,
            );
            match (command_index, clone_of) {
                (Some(index), Some(upper)) => {
                    self.chains.name_request(event.dev, identity, index);
                    self.issue_clone(upper, serial, out);
                }
                // A passthrough command has no bio by nature: none to gather.
                (Some(index), None)
                    if event.flags & tracer_common::event_flags::PASSTHROUGH != 0 =>
                {
                    self.chains.name_request(event.dev, identity, index);
                }
                (Some(index), None) => {
                    self.chains.name_request(event.dev, identity, index);
                    (target, ends) = self.chains.gather_fragments(
                        index,
                        event.dev,
                        start,
                        end,
                        serial,
                        op_of(event),
                    );
                    self.chains.settle_carried(serial, out);
                }
                (None, _) => self.chains.correlation.unmatched_events += 1,
            }
        }
        let target = target.unwrap_or_else(|| self.fallback_target(event, devices));
        let owners = ends.map_or(OwnerSlots::NONE, |ends| ends.owners);
        if let Some(command) = command_index.and_then(|index| self.chains.commands.get_mut(index)) {
            command.target = target;
            command.owners = owners;
        }
        self.chains
            .issue_command(serial, event.dev, target, owners, start, sectors, ends, out);
        if sectors == 0 && target.op == Op::Flush {
            let waiting = EmptyCommand {
                serial,
                issue_ns: self.chains.now_ns,
                target,
                epoch: self.chains.epoch,
                lost: false,
            };
            self.chains
                .push_empty_command(event.dev, op_index(Op::Flush) as u8, waiting);
        }
    }

    /// The live command an issue of `[start, end)` dispatches again, if it
    /// is one: a command of the same op with exactly that range, neither
    /// completed nor requeued, and no bio queued there that the issue could
    /// carry instead. blk-mq dispatches a request again only after the driver
    /// gave it back (block_rq_requeue), so such an issue is a re-dispatch
    /// whose requeue the trace lacks (a mask without R, a lost event), not a
    /// new command: the kernel issues a request once per dispatch. Only on
    /// a device whose queues the trace has: without them, an issue may
    /// carry a bio never seen.
    fn redispatched(&self, event: &BlockEvent, start: u64, end: u64) -> Option<u32> {
        if start == end {
            return None;
        }
        let op = op_of(event);
        let index = self.chains.commands.find(&(event.dev, start), |command| {
            command.end == end && command.requeued_ns.is_none() && command.target.op == op
        })?;
        let queued_there = self
            .chains
            .fragments
            .find(&(event.dev, start), |fragment| {
                fragment.state == FragmentState::Pending && fragment.op == op
            })
            .is_some();
        (!queued_there).then_some(index)
    }

    /// Command `index` dispatched again with no requeue traced: counted as a
    /// requeue the correlation inferred, and timed from this issue.
    fn redispatch(&mut self, index: u32, dev: u32, identity: u64, out: &mut Sink) {
        self.chains.name_request(dev, identity, index);
        let Some(command) = self.chains.commands.get_mut(index) else {
            return;
        };
        command.issue_ns = self.chains.now_ns;
        let (target, serial) = (command.target, command.serial);
        self.chains.correlation.requeues_inferred += 1;
        self.emit_requeue(Some(CommandId(serial)), target, out);
        out.emit(Outcome::Reissued {
            command: CommandId(serial),
            ts_ns: self.chains.now_ns,
            // When the driver gave it back is not in the trace.
            waited_ns: 0,
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
            measured: false,
        });
    }

    /// Request-based dm (multipath) cloned its issued request at
    /// `from_sector` and will issue the clone on `event.dev`: that issue
    /// carries the upper command's user I/Os. (An importer's `A` line of a
    /// request reaches here through [`Correlator::on_remap`].)
    fn on_rq_remap(&mut self, event: &BlockEvent, from_dev: u32, from_sector: u64) {
        let length = u64::from(event.nr_sector);
        if length == 0 {
            // A flush's clone: counted, not correlated, as flushes are.
            return;
        }
        let upper = self
            .chains
            .commands
            .find(&(from_dev, from_sector), |command| {
                command.end - command.start == length
            });
        let Some(index) = upper else {
            self.chains.correlation.unmatched_events += 1;
            return;
        };
        if self.chains.rq_remaps.len() >= MAX_RQ_REMAPS {
            // Clones whose issue was never traced (a path outside `-d`).
            self.chains.rq_remaps.clear();
        }
        let upper = self.chains.commands.slot_ref(index);
        self.chains
            .rq_remaps
            .insert((event.dev, event.sector, event.nr_sector), upper);
    }

    /// The issue of a clone remapped from an upper device's command: a disk
    /// command for each user I/O that command carries.
    fn issue_clone(&mut self, upper: SlotRef, serial: u64, out: &mut Sink) {
        let Some(command) = self
            .chains
            .commands
            .resolve(upper)
            .and_then(|index| self.chains.commands.get(index))
        else {
            return;
        };
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.chains.fragments.get(head).copied() else {
                break;
            };
            self.chains
                .count_disk_command_from(fragment.io, serial, out);
            head = fragment.next;
        }
    }

    /// The driver gave an issued request back; it will be issued again as the
    /// same command (same range), not a new one.
    fn on_requeue(&mut self, event: &BlockEvent, devices: &mut Devices, out: &mut Sink) {
        let start = event.sector;
        let end = start.saturating_add(u64::from(event.nr_sector));
        if start == end {
            let target = self.fallback_target(event, devices);
            self.chains.marks_mut(target.disk).requeued_empty[op_index(target.op)] += 1;
            self.emit_requeue(None, target, out);
            return;
        }
        let found = self.command_at(event.dev, start, op_of(event), |command| {
            command.end == end && command.requeued_ns.is_none()
        });
        if let Some(command) = found.and_then(|index| self.chains.commands.get_mut(index)) {
            command.requeued_ns = Some(self.chains.now_ns);
            let (target, serial) = (command.target, command.serial);
            self.emit_requeue(Some(CommandId(serial)), target, out);
            return;
        }
        // Issued before tracing began (or its issue was lost): keep a command
        // without fragments, so that its re-issue is not counted as a new one.
        self.chains.correlation.unmatched_events += 1;
        let target = self.fallback_target(event, devices);
        self.emit_requeue(None, target, out);
        let serial = self.chains.next_command;
        self.chains.next_command += 1;
        let _ = self.chains.insert_command(
            serial,
            event.dev,
            (start, end),
            Some(self.chains.now_ns),
            target,
            out,
        );
    }

    /// The command at `(dev, start)` that `accept` takes, one of `op` first:
    /// a requeue or re-issue belongs to its own op's command when a command
    /// of another op (its completion lost) holds the same range.
    fn command_at(
        &self,
        dev: u32,
        start: u64,
        op: Op,
        accept: impl Fn(&Command) -> bool,
    ) -> Option<u32> {
        self.chains
            .commands
            .find(&(dev, start), |command| {
                accept(command) && command.target.op == op
            })
            .or_else(|| self.chains.commands.find(&(dev, start), &accept))
    }

    fn emit_requeue(&mut self, command: Option<CommandId>, target: Target, out: &mut Sink) {
        out.emit(Outcome::Requeued {
            command,
            ts_ns: self.chains.now_ns,
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
        });
    }

    /// An issue of a requeued command: no new command; issue→complete now
    /// runs from here, and the time spent requeued is its own measure.
    fn reissue(&mut self, event: &BlockEvent, disk: u32, identity: u64, out: &mut Sink) -> bool {
        let (dev, start, op) = (event.dev, event.sector, op_of(event));
        let end = start.saturating_add(u64::from(event.nr_sector));
        if start == end {
            let waiting = &mut self.chains.marks_mut(disk).requeued_empty[op_index(op)];
            if *waiting == 0 {
                return false;
            }
            *waiting -= 1;
            return true;
        }
        let found = self.command_at(dev, start, op, |command| {
            command.end == end && command.requeued_ns.is_some()
        });
        let Some(index) = found else {
            return false;
        };
        // Issued again, perhaps under another tag.
        self.chains.name_request(dev, identity, index);
        let Some(command) = self.chains.commands.get_mut(index) else {
            return false;
        };
        let requeued_ns = command.requeued_ns.take().unwrap_or(self.chains.now_ns);
        command.issue_ns = self.chains.now_ns;
        let (target, epoch, serial) = (command.target, command.epoch, command.serial);
        out.emit(Outcome::Reissued {
            command: CommandId(serial),
            ts_ns: self.chains.now_ns,
            waited_ns: self.chains.now_ns.saturating_sub(requeued_ns),
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
            measured: epoch == self.chains.epoch,
        });
        true
    }

    fn on_complete(
        &mut self,
        event: &BlockEvent,
        request: u64,
        error: i32,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let done = u64::from(event.nr_sector);
        if done == 0 {
            self.complete_empty(event, error, devices, out);
            return;
        }
        let key = (event.dev, event.sector);
        // The request's own command when it is known; else by sector, its
        // own op's first, first in first out.
        let found = self
            .chains
            .command_of_request(event.dev, request)
            .filter(|&index| {
                self.chains
                    .commands
                    .get(index)
                    .is_some_and(|c| c.start == event.sector)
            })
            .or_else(|| {
                self.command_at(key.0, key.1, op_of(event), |command| {
                    command.end - command.start >= done
                })
            })
            .or_else(|| self.command_at(key.0, key.1, op_of(event), |_| true));
        let done_end = event.sector.saturating_add(done);
        let found = found.or_else(|| self.zone_append_landed(event));
        if let Some(command) = found
            .filter(|_| event.rwbs.starts_with(b"ZA"))
            .and_then(|index| self.chains.commands.get(index))
        {
            // Completed where the device wrote it: the command is whole.
            let (index, start, end) = (found.unwrap_or(NIL), command.start, command.end);
            self.complete_command(index, event.dev, start, end, error, out);
            return;
        }
        let Some(index) = found else {
            let covered = self.commands_covered(event.dev, event.sector, done_end);
            if !covered.is_empty() {
                for (index, end) in covered {
                    self.complete_command(index, event.dev, event.sector, end, error, out);
                }
                return;
            }
            self.chains.correlation.unmatched_events += 1;
            // Its device still shows it, counted though nothing times it.
            let disk = devices.ensure_disk(event.dev);
            devices.get_mut(disk).unpaired_completions += 1;
            if error != 0 {
                // Issued before the trace (or its issue was lost): the
                // device still reported the failure.
                let target = self.fallback_target(event, devices);
                let end = event.sector.saturating_add(done);
                self.count_failure(target, error, event.sector, end, out);
            }
            return;
        };
        self.complete_command(index, event.dev, event.sector, done_end, error, out);
    }

    /// A zone append's completion names the sector the device wrote it at
    /// (blk-zoned.c sets it on completion), not the zone start it was
    /// issued to: it completes the oldest live zone append of its device
    /// and length issued at or below that sector.
    fn zone_append_landed(&self, event: &BlockEvent) -> Option<u32> {
        if !event.rwbs.starts_with(b"ZA") {
            return None;
        }
        let length = u64::from(event.nr_sector);
        let oldest = self
            .chains
            .commands
            .values()
            .filter(|c| {
                c.dev == event.dev
                    && c.end - c.start == length
                    && c.start <= event.sector
                    && c.requeued_ns.is_none()
                    && c.target.op == op_of(event)
            })
            .map(|c| (c.serial, c.start))
            .min()?;
        self.chains
            .commands
            .find(&(event.dev, oldest.1), |c| c.serial == oldest.0)
    }

    /// The live commands on `dev` lying wholly inside `[start, end)`, with
    /// their ends, in sector order: a completion that names no command's
    /// start but covers these completes them. A request's completion reports
    /// the sectors it covers; some kernels print a discard's from sector 0
    /// with the range grown by each piece (`C DS 0 + 8`, `0 + 12`, …), and an
    /// excerpt may leave out the issue of a failed request's first sectors.
    fn commands_covered(&mut self, dev: u32, start: u64, end: u64) -> Vec<(u32, u64)> {
        let mut inside: Vec<(u64, u64, u64)> = self
            .chains
            .commands
            .values_mut()
            .filter(|c| {
                c.dev == dev
                    && c.start >= start
                    && c.end <= end
                    && c.start < c.end
                    && c.requeued_ns.is_none()
            })
            .map(|c| (c.start, c.end, c.serial))
            .collect();
        inside.sort_unstable();
        inside
            .into_iter()
            .filter_map(|(start, end, serial)| {
                self.chains
                    .commands
                    .find(&(dev, start), |c| c.serial == serial)
                    .map(|index| (index, end))
            })
            .collect()
    }

    /// A completion from `from` up to `done_end` of command `index` on
    /// `dev`, failed with `error` unless 0 (the failure covers what the
    /// completion reported).
    fn complete_command(
        &mut self,
        index: u32,
        dev: u32,
        from: u64,
        done_end: u64,
        error: i32,
        out: &mut Sink,
    ) {
        let Some(command) = self.chains.commands.get(index).copied() else {
            return;
        };
        let failed = error != 0;
        if failed && !command.failed {
            if let Some(command) = self.chains.commands.get_mut(index) {
                command.failed = true;
            }
            let end = done_end.max(command.end);
            self.count_failure(command.target, error, from, end, out);
        }
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.chains.fragments.get_mut(head) else {
                head = NIL;
                break;
            };
            if fragment.end <= done_end {
                let next = fragment.next;
                self.chains.complete_fragment(head, failed, out);
                head = next;
            } else {
                if fragment.start < done_end {
                    fragment.start = done_end;
                }
                break;
            }
        }
        let whole = done_end >= command.end;
        let measured = whole && command.epoch == self.chains.epoch && !command.lost;
        let latency_ns = self.chains.now_ns.saturating_sub(command.issue_ns);
        let latency_us = latency_ns / 1000;
        if whole && !command.lost {
            self.chains
                .marks_mut(command.target.disk)
                .saw_completion(latency_ns);
        }
        out.emit(Outcome::Completed {
            command: CommandId(command.serial),
            ts_ns: self.chains.now_ns,
            done_to: done_end,
            whole,
            last_issue_ns: command.issue_ns,
            latency_us: measured.then_some(latency_us),
            error,
            account: Account {
                target: command.target,
                owners: command.owners,
            },
            sectors: command.end - command.start,
        });
        if whole {
            // Fragments past the command's end cannot exist; complete any leftovers.
            while head != NIL {
                let next = self
                    .chains
                    .fragments
                    .get(head)
                    .map_or(NIL, |fragment| fragment.next);
                self.chains.complete_fragment(head, failed, out);
                head = next;
            }
            self.chains.commands.remove(index);
        } else {
            if let Some(command) = self.chains.commands.get_mut(index) {
                command.start = done_end;
                command.head = head;
                if head == NIL {
                    command.tail = NIL;
                }
            }
            self.chains.commands.set_key(index, Some((dev, done_end)));
        }
    }

    /// A completion without a range: the oldest flush in flight on its
    /// device ends (flushes have no sector to be told apart by, and the
    /// request's identity is borrowed), timed from its issue.
    fn complete_empty(
        &mut self,
        event: &BlockEvent,
        error: i32,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        if op_of(event) != Op::Flush {
            // Other commands without a range: counted, not correlated. A
            // failed one still failed (a preflush's own request ending in
            // error after its flush: `C WS 0 + 0 [-5]`).
            if error != 0 {
                let target = self.fallback_target(event, devices);
                self.count_failure(target, error, event.sector, event.sector, out);
            }
            return;
        }
        let Some(command) = self
            .chains
            .pop_empty_command(event.dev, op_index(Op::Flush) as u8)
        else {
            return;
        };
        if error != 0 {
            self.count_failure(command.target, error, event.sector, event.sector, out);
        }
        let measured = command.epoch == self.chains.epoch && !command.lost;
        if let Some(flush) = self.chains.pop_queued_flush(event.dev, command.issue_ns) {
            out.emit(Outcome::FlushFinished {
                ts_ns: self.chains.now_ns,
                queue_ns: flush.queue_ns,
                failed: error != 0,
                account: flush.account,
                measured: measured && flush.epoch == self.chains.epoch,
            });
        }
        let latency_us = self.chains.now_ns.saturating_sub(command.issue_ns) / 1000;
        out.emit(Outcome::Completed {
            command: CommandId(command.serial),
            ts_ns: self.chains.now_ns,
            done_to: event.sector,
            whole: true,
            last_issue_ns: command.issue_ns,
            latency_us: measured.then_some(latency_us),
            error,
            account: Account {
                target: command.target,
                owners: OwnerSlots::NONE,
            },
            sectors: 0,
        });
    }

    fn on_bio_complete(
        &mut self,
        event: &BlockEvent,
        error: i32,
        devices: &mut Devices,
        out: &mut Sink,
    ) {
        let length = u64::from(event.nr_sector);
        if length == 0 {
            // Request-based completions arrive through block_rq_complete.
            return;
        }
        let found = self
            .chains
            .fragments
            .find(&(event.dev, event.sector), |fragment| {
                fragment.state != FragmentState::InCommand
                    && fragment.end - fragment.start == length
            });
        let bio_based = devices
            .slot(event.dev)
            .is_none_or(|slot| devices.get(slot.disk).bio_based());
        let Some(index) = found else {
            if bio_based {
                self.chains.correlation.unmatched_events += 1;
            }
            return;
        };
        let Some(fragment) = self.chains.fragments.get(index).copied() else {
            return;
        };
        let failed = error != 0;
        if fragment.state == FragmentState::Pending && bio_based {
            let serial = self.chains.next_command;
            self.chains
                .count_bio_command(event.dev, fragment.io, fragment.start, length, out);
            self.chains
                .count_disk_command_above(fragment.io, serial, out);
            if failed {
                // The bio was this device's command: it failed here.
                let known = self
                    .chains
                    .user_ios
                    .resolve(fragment.io)
                    .and_then(|io| self.chains.user_ios.get(io))
                    .map(|io| io.target);
                let target = known.unwrap_or_else(|| self.fallback_target(event, devices));
                let end = fragment.start.saturating_add(length);
                self.count_failure(target, error, fragment.start, end, out);
            }
        }
        self.chains.complete_fragment(index, failed, out);
    }

    /// One failed command on `target`, with the completion's errno and the
    /// sectors `[start, end)` it covered on its device.
    fn count_failure(&mut self, target: Target, error: i32, start: u64, end: u64, out: &mut Sink) {
        out.emit(Outcome::Failed {
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
            error,
            start,
            end,
        });
    }
}
