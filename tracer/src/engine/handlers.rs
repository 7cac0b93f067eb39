//! One handler per kernel event, called by [`Engine::ingest`] in kernel order.

use tracer_common::{BlockEvent, EventKind};

use super::attribution::OwnerSlots;
use super::chain::{DropReason, Fragment, FragmentState, Remap, UserIo};
use super::outcome::{Account, CommandId, IoId, Outcome, StreamStep};
use super::split::split_cause;
use super::stats::op_index;
use super::table::{SlotRef, NIL};
use super::target::{op_of, Target, NO_PART};
use super::Engine;

/// Request remaps kept waiting for their clone's issue, at most.
const MAX_RQ_REMAPS: usize = 1 << 12;
use crate::model::Op;

impl Engine {
    pub(super) fn on_remap(&mut self, event: &BlockEvent, from_dev: u32, from_sector: u64) {
        if self.is_request_device(from_dev) {
            // blkparse prints a request's remap as a bio's: both are `A`.
            return self.on_rq_remap(event, from_dev, from_sector);
        }
        let length = u64::from(event.nr_sector);
        let stripes = length > 0 && self.is_stripe_writer(from_dev);
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
                .or_else(|| match stripes {
                    true => None,
                    false => self.cut_front_for_clone(event, from_dev, from_sector),
                })
        };
        if traced.is_none() && stripes {
            self.remap_stripe_io(event, from_dev);
            return;
        }
        if traced.is_none() && length > 0 && self.remap_another_clone(event, from_dev, from_sector)
        {
            return;
        }
        let inferred = match (traced, length) {
            (None, 1..) => self.queue_seen_only_in_remap(event, from_dev, from_sector),
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
            self.count_bio_command(from_dev, io, start, length);
            if untraced_end {
                self.complete_fragment(index, false);
            }
            // The upper device's completion is not in the trace: its user I/O
            // ends with the bio it became.
            let upper_fragment = match inferred {
                Some(index) => self.chains.fragments.slot_ref(index),
                None => SlotRef::NONE,
            };
            self.push_remap(
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
        self.push_remap(
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
    fn remap_stripe_io(&mut self, event: &BlockEvent, from_dev: u32) {
        let parent = self
            .dev_index
            .get(&from_dev)
            .map(|slot| self.devices[slot.disk as usize].last_fragment)
            .and_then(|fragment| self.chains.fragments.resolve(fragment))
            .and_then(|index| self.chains.fragments.get(index))
            .map_or(SlotRef::NONE, |fragment| fragment.io);
        self.correlation.stripe_remaps += 1;
        self.push_remap(
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
        self.correlation.mirrored_remaps += 1;
        self.push_remap(
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
    ) -> Option<u32> {
        if !self.is_upper_device(event.dev, from_dev) {
            return None;
        }
        self.correlation.queues_from_remaps += 1;
        let queued = BlockEvent {
            dev: from_dev,
            sector: from_sector,
            ..*event
        };
        self.on_queue(&queued, false);
        self.chains
            .fragments
            .find(&(from_dev, from_sector), |fragment| {
                fragment.state == FragmentState::Pending
            })
    }

    /// `traced` unless the queue is inferred from a remap.
    pub(super) fn on_queue(&mut self, event: &BlockEvent, traced: bool) {
        let disk = self.ensure_disk(event.dev);
        self.devices[disk as usize].seen_queue |= traced;
        let remap = self
            .take_remap((event.dev, event.sector, event.nr_sector))
            .unwrap_or_default();
        let part = match remap.partition {
            Some(partition) => {
                let part = self.ensure_partition(disk, partition);
                self.learn_partition_start(disk, part, remap.partition_start);
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
            None => self
                .attribution
                .owners_of(&event.owner, event.tgid, (disk, part)),
        };
        let queued = |io: Option<IoId>, stream: Option<StreamStep>| Outcome::Queued {
            io,
            dev: event.dev,
            sector: event.sector,
            sectors: event.nr_sector,
            op: target.op,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
            inherited,
            stream,
        };
        if sectors == 0 {
            self.emit(queued(None, None));
            return;
        }
        if !self.make_room_for_fragment() {
            self.correlation.evicted += 1;
            self.emit(queued(None, None));
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
            owners,
            incomplete: false,
            dropped: false,
            in_ring_drop: false,
            failed: false,
            epoch: self.epoch,
            upper_fragment: remap.upper_fragment,
            parent: remap.parent,
            last_disk_command: 0,
        };
        let Some(io_index) = self.chains.user_ios.insert(io, None, self.now_ns, false) else {
            self.correlation.evicted += 1;
            self.emit(queued(None, None));
            return;
        };
        let io_ref = self.chains.user_ios.slot_ref(io_index);
        let stream =
            Some(self.stream_step(target, event.sector, sectors, event.segments, io_index));
        let fragment = Fragment {
            io: io_ref,
            start: event.sector,
            end: event.sector.saturating_add(sectors),
            state: FragmentState::Pending,
            full: false,
            untraced_end: false,
            next: NIL,
        };
        let Some(fragment_index) = self.chains.fragments.insert(
            fragment,
            Some((event.dev, event.sector)),
            self.now_ns,
            true,
        ) else {
            self.chains.user_ios.remove(io_index);
            self.correlation.evicted += 1;
            self.emit(queued(None, stream));
            return;
        };
        let device = &mut self.devices[disk as usize];
        if device.bio_based() {
            device.last_fragment = self.chains.fragments.slot_ref(fragment_index);
        }
        self.emit(queued(Some(IoId::of(io_ref)), stream));
    }

    /// The pending fragment a split at `new_sector` cuts. block/blk-merge.c
    /// traces the piece cut off (its start, then the cut); device-mapper
    /// traces the bio it trimmed, whose start is already the cut, so that
    /// piece is the device's last fragment, if the cut falls inside it.
    fn fragment_split_at(&self, event: &BlockEvent, new_sector: u64) -> Option<(u32, u64)> {
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
        let slot = self.dev_index.get(&event.dev)?;
        let device = &self.devices[slot.disk as usize];
        let index = self.chains.fragments.resolve(device.last_fragment)?;
        let fragment = self.chains.fragments.get(index)?;
        let inside = fragment.start < new_sector && new_sector < fragment.end;
        (fragment.state == FragmentState::Pending && inside).then_some((index, fragment.start))
    }

    pub(super) fn on_split(&mut self, event: &BlockEvent, new_sector: u64) {
        if new_sector == event.sector && self.take_precut(event.dev, new_sector) {
            // A clone's remap already cut the bio here (dm-striped maps the
            // clone before it traces the trim).
            return;
        }
        // Room first: making room may evict the very fragment we are about to cut.
        let room = self.make_room_for_fragment();
        let cut = self.fragment_split_at(event, new_sector);
        self.cut_fragment(event, cut, new_sector, room);
    }

    /// Whether a remap already made the cut at `at` on the bio-based `dev`
    /// (and forgets it).
    fn take_precut(&mut self, dev: u32, at: u64) -> bool {
        let Some(slot) = self.dev_index.get(&dev).copied() else {
            return false;
        };
        let device = &mut self.devices[slot.disk as usize];
        let precut = device.precut_at == Some(at);
        if precut {
            device.precut_at = None;
        }
        precut
    }

    /// A remap of a clone of the front of a bio-based device's last
    /// fragment, before the trim is traced: makes that cut now, as the
    /// split that follows names it, and returns the front piece.
    fn cut_front_for_clone(
        &mut self,
        event: &BlockEvent,
        from_dev: u32,
        from_sector: u64,
    ) -> Option<u32> {
        let slot = *self.dev_index.get(&from_dev)?;
        let device = &self.devices[slot.disk as usize];
        if !device.bio_based() {
            return None;
        }
        let index = self.chains.fragments.resolve(device.last_fragment)?;
        let fragment = self.chains.fragments.get(index)?;
        let at = from_sector.checked_add(u64::from(event.nr_sector))?;
        if fragment.state != FragmentState::Pending
            || fragment.start != from_sector
            || fragment.end <= at
        {
            return None;
        }
        let room = self.make_room_for_fragment();
        // As device-mapper will trace it: on the trimmed bio, starting at the cut.
        let trim = BlockEvent {
            dev: from_dev,
            sector: at,
            ..*event
        };
        self.cut_fragment(&trim, Some((index, from_sector)), at, room);
        self.devices[slot.disk as usize].precut_at = Some(at);
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
                None => (self.fallback_target(event), OwnerSlots::NONE, false),
            };
        let cause = split_cause(
            &self.devices[target.disk as usize].limits,
            target.op,
            piece_start,
            new_sector,
        );
        self.emit(Outcome::Split {
            io: io_index.and(io_ref).map(IoId::of),
            dev: event.dev,
            at: new_sector,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
            cause,
            first_cut,
        });
        let Some(index) = found else {
            self.correlation.unmatched_events += 1;
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
                self.now_ns,
                true,
            )
        } else {
            None
        };
        let inserted = remainder_index.is_some();
        if let (Some(index), Some(slot)) =
            (remainder_index, self.dev_index.get(&event.dev).copied())
        {
            let device = &mut self.devices[slot.disk as usize];
            if device.bio_based() {
                device.last_fragment = self.chains.fragments.slot_ref(index);
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

    pub(super) fn on_merge(&mut self, event: &BlockEvent, kind: EventKind) {
        let length = u64::from(event.nr_sector);
        let found = self
            .chains
            .fragments
            .find(&(event.dev, event.sector), |fragment| {
                fragment.state == FragmentState::Pending
                    && (kind == EventKind::RqMerge || fragment.end - fragment.start == length)
            });
        let (target, owners) = match found.and_then(|index| self.io_of_fragment(index)) {
            Some(io) => (io.target, io.owners),
            None => (self.fallback_target(event), OwnerSlots::NONE),
        };
        let io = found
            .and_then(|index| self.chains.fragments.get(index))
            .filter(|fragment| self.chains.user_ios.resolve(fragment.io).is_some())
            .map(|fragment| IoId::of(fragment.io));
        self.emit(Outcome::Merged {
            io,
            ts_ns: event.ts_ns,
            account: Account { target, owners },
        });
        if found.is_none() {
            self.correlation.unmatched_events += 1;
        }
    }

    /// An issue of exactly a remapped range whose queue never came (md on
    /// NVMe traces print A, D, C and no Q): the remapped bio is queued here,
    /// so the command carries it and the chain above it ends with it.
    fn queue_missing_below_remap(&mut self, event: &BlockEvent) {
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
        self.correlation.queues_from_remaps += 1;
        let queued = BlockEvent {
            kind: EventKind::Queue as u8,
            ..*event
        };
        self.on_queue(&queued, false);
    }

    pub(super) fn on_issue(&mut self, event: &BlockEvent, request: u64) {
        // Live, a remap is consumed by its queue before any issue: this
        // costs a length check.
        if event.nr_sector > 0 && (self.chains.held_remap.is_some() || self.chains.remaps.len() > 0)
        {
            self.queue_missing_below_remap(event);
        }
        let disk = self.ensure_disk(event.dev);
        self.devices[disk as usize].seen_issue = true;
        let start = event.sector;
        let sectors = u64::from(event.nr_sector);
        let end = start.saturating_add(sectors);
        let serial = self.chains.next_command;
        self.chains.next_command += 1;
        // Raw tracepoints name the request: one still carrying a command that
        // was not requeued never reported that command's completion. (Not a
        // flush: blk-flush's flush request borrows another request's tag.)
        let identity = if sectors > 0 { request } else { 0 };
        if let Some(stale) = self.command_of_request(event.dev, identity) {
            if self
                .chains
                .commands
                .get(stale)
                .is_some_and(|c| c.requeued_ns.is_none())
            {
                self.expire_command(stale, DropReason::CompletionLost);
            }
        }

        if self.reissue(event.dev, disk, start, end, op_of(event), identity) {
            return;
        }
        let mut target = None;
        let mut ends = None;
        let mut command_index = None;
        if sectors > 0 {
            // A command issued again with the same range whose requeue we did not see.
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
                let fallback = self.fallback_target(event);
                self.issue_command(
                    serial,
                    event.dev,
                    fallback,
                    OwnerSlots::NONE,
                    start,
                    sectors,
                    None,
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
            command_index =
                self.insert_command(serial, event.dev, start, end, None, Target::default());
            match (command_index, clone_of) {
                (Some(index), Some(upper)) => {
                    self.name_request(event.dev, identity, index);
                    self.issue_clone(upper, serial);
                }
                (Some(index), None) => {
                    self.name_request(event.dev, identity, index);
                    (target, ends) = self.gather_fragments(index, event.dev, start, end, serial);
                }
                (None, _) => self.correlation.unmatched_events += 1,
            }
        }
        let target = target.unwrap_or_else(|| self.fallback_target(event));
        let owners = ends.map_or(OwnerSlots::NONE, |ends| ends.owners);
        if let Some(command) = command_index.and_then(|index| self.chains.commands.get_mut(index)) {
            command.target = target;
            command.owners = owners;
        }
        self.issue_command(serial, event.dev, target, owners, start, sectors, ends);
    }

    /// Request-based dm (multipath) cloned its issued request at
    /// `from_sector` and will issue the clone on `event.dev`: that issue
    /// carries the upper command's user I/Os. (An importer's `A` line of a
    /// request reaches here through [`Engine::on_remap`].)
    pub(super) fn on_rq_remap(&mut self, event: &BlockEvent, from_dev: u32, from_sector: u64) {
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
            self.correlation.unmatched_events += 1;
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
    fn issue_clone(&mut self, upper: SlotRef, serial: u64) {
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
            self.count_disk_command_from(fragment.io, serial);
            head = fragment.next;
        }
    }

    /// The driver gave an issued request back; it will be issued again as the
    /// same command (same range), not a new one.
    pub(super) fn on_requeue(&mut self, event: &BlockEvent) {
        let start = event.sector;
        let end = start.saturating_add(u64::from(event.nr_sector));
        if start == end {
            let target = self.fallback_target(event);
            self.devices[target.disk as usize].requeued_empty[op_index(target.op)] += 1;
            self.emit_requeue(None, target);
            return;
        }
        let found = self.chains.commands.find(&(event.dev, start), |command| {
            command.end == end && command.requeued_ns.is_none()
        });
        if let Some(command) = found.and_then(|index| self.chains.commands.get_mut(index)) {
            command.requeued_ns = Some(self.now_ns);
            let (target, serial) = (command.target, command.serial);
            self.emit_requeue(Some(CommandId(serial)), target);
            return;
        }
        // Issued before tracing began (or its issue was lost): keep a command
        // without fragments, so that its re-issue is not counted as a new one.
        self.correlation.unmatched_events += 1;
        let target = self.fallback_target(event);
        self.emit_requeue(None, target);
        let serial = self.chains.next_command;
        self.chains.next_command += 1;
        let _ = self.insert_command(serial, event.dev, start, end, Some(self.now_ns), target);
    }

    fn emit_requeue(&mut self, command: Option<CommandId>, target: Target) {
        self.emit(Outcome::Requeued {
            command,
            ts_ns: self.now_ns,
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
        });
    }

    /// An issue of a requeued command: no new command; issue→complete now
    /// runs from here, and the time spent requeued is its own measure.
    fn reissue(
        &mut self,
        dev: u32,
        disk: u32,
        start: u64,
        end: u64,
        op: Op,
        identity: u64,
    ) -> bool {
        if start == end {
            let waiting = &mut self.devices[disk as usize].requeued_empty[op_index(op)];
            if *waiting == 0 {
                return false;
            }
            *waiting -= 1;
            return true;
        }
        let found = self.chains.commands.find(&(dev, start), |command| {
            command.end == end && command.requeued_ns.is_some()
        });
        let Some(index) = found else {
            return false;
        };
        // Issued again, perhaps under another tag.
        self.name_request(dev, identity, index);
        let Some(command) = self.chains.commands.get_mut(index) else {
            return false;
        };
        let requeued_ns = command.requeued_ns.take().unwrap_or(self.now_ns);
        command.issue_ns = self.now_ns;
        let (target, epoch, serial) = (command.target, command.epoch, command.serial);
        self.emit(Outcome::Reissued {
            command: CommandId(serial),
            ts_ns: self.now_ns,
            waited_ns: self.now_ns.saturating_sub(requeued_ns),
            account: Account {
                target,
                owners: OwnerSlots::NONE,
            },
            measured: epoch == self.epoch,
        });
        true
    }

    pub(super) fn on_complete(&mut self, event: &BlockEvent, request: u64, error: i32) {
        let done = u64::from(event.nr_sector);
        if done == 0 {
            // Flush completions: counted, not correlated.
            return;
        }
        let key = (event.dev, event.sector);
        // The request's own command when it is known; else by sector, first in first out.
        let found = self
            .command_of_request(event.dev, request)
            .filter(|&index| {
                self.chains
                    .commands
                    .get(index)
                    .is_some_and(|c| c.start == event.sector)
            })
            .or_else(|| {
                self.chains
                    .commands
                    .find(&key, |command| command.end - command.start >= done)
            })
            .or_else(|| self.chains.commands.find(&key, |_| true));
        let Some(index) = found else {
            self.correlation.unmatched_events += 1;
            if error != 0 {
                // Issued before the trace (or its issue was lost): the
                // device still reported the failure.
                let target = self.fallback_target(event);
                let end = event.sector.saturating_add(done);
                self.count_failure(target, error, event.sector, end);
            }
            return;
        };
        let done_end = event.sector.saturating_add(done);
        let Some(command) = self.chains.commands.get(index).copied() else {
            return;
        };
        let failed = error != 0;
        if failed && !command.failed {
            if let Some(command) = self.chains.commands.get_mut(index) {
                command.failed = true;
            }
            let end = done_end.max(command.end);
            self.count_failure(command.target, error, event.sector, end);
        }
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.chains.fragments.get_mut(head) else {
                head = NIL;
                break;
            };
            if fragment.end <= done_end {
                let next = fragment.next;
                self.complete_fragment(head, failed);
                head = next;
            } else {
                if fragment.start < done_end {
                    fragment.start = done_end;
                }
                break;
            }
        }
        let whole = done_end >= command.end;
        let measured = whole && command.epoch == self.epoch && !command.lost;
        let latency_us = self.now_ns.saturating_sub(command.issue_ns) / 1000;
        self.emit(Outcome::Completed {
            command: CommandId(command.serial),
            ts_ns: self.now_ns,
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
                self.complete_fragment(head, failed);
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
            self.chains
                .commands
                .set_key(index, Some((event.dev, done_end)));
        }
    }

    pub(super) fn on_bio_complete(&mut self, event: &BlockEvent, error: i32) {
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
        let Some(fragment) = self.chains.fragments.get(index).copied() else {
            return;
        };
        let failed = error != 0;
        if fragment.state == FragmentState::Pending && bio_based {
            let serial = self.chains.next_command;
            self.count_bio_command(event.dev, fragment.io, fragment.start, length);
            self.count_disk_command_above(fragment.io, serial);
            if failed {
                // The bio was this device's command: it failed here.
                let known = self
                    .chains
                    .user_ios
                    .resolve(fragment.io)
                    .and_then(|io| self.chains.user_ios.get(io))
                    .map(|io| io.target);
                let target = known.unwrap_or_else(|| self.fallback_target(event));
                let end = fragment.start.saturating_add(length);
                self.count_failure(target, error, fragment.start, end);
            }
        }
        self.complete_fragment(index, failed);
    }

    /// One failed command on `target`, with the completion's errno and the
    /// sectors `[start, end)` it covered on its device.
    fn count_failure(&mut self, target: Target, error: i32, start: u64, end: u64) {
        self.emit(Outcome::Failed {
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
