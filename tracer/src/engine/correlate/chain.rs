//! The chain from a user I/O to device commands: the in-flight records
//! (user I/O, fragment, command, remap), and [`Chains`], their owner, with
//! the bookkeeping every handler shares: gather a command's fragments,
//! complete, drop and expire them, hold remaps, name requests. What the
//! chains conclude goes to a [`Sink`] as outcomes; nothing here counts.

use std::collections::VecDeque;

use crate::engine::accounting::Sink;
use crate::engine::attribution::OwnerSlots;
pub(super) use crate::engine::outcome::DropReason;
use crate::engine::outcome::{
    Account, AtomicFate, AtomicWrite, CommandEnds, CommandId, IoId, Outcome,
};
use crate::engine::stats::OP_COUNT;
use crate::engine::table::{FastMap, SlotRef, Table, NIL};
use crate::engine::target::Target;
use crate::engine::EngineLimits;
use crate::model::{CorrelationStats, Op};

/// The correlation's in-flight state: the chains followed from user I/O
/// to command, and what links them (remaps, requests, clones), with the
/// correlation's own clock, epoch and health counters. Only the correlator
/// and the bookkeeping here change it.
pub(super) struct Chains {
    pub(super) limits: EngineLimits,
    /// The newest event timestamp seen.
    pub(super) now_ns: u64,
    /// Bumped by a reset, so chains from before it do not feed new histograms.
    pub(super) epoch: u32,
    /// How the correlation went: evictions, age-outs, unmatched events.
    pub(super) correlation: CorrelationStats,
    pub(super) user_ios: Table<u8, UserIo>,
    pub(super) fragments: Table<SectorKey, Fragment>,
    pub(super) commands: Table<SectorKey, Command>,
    pub(super) remaps: Table<RemapKey, Remap>,
    /// The newest remap (key, remap, when it came), held outside `remaps`
    /// until the next event: that is nearly always its bio's queue, which
    /// then takes it without a table insert, lookup and removal (the cost
    /// is in docs/benchmarks.md, "Changes"). Any other event first
    /// puts it in the table, so no lookup misses it.
    pub(super) held_remap: Option<(RemapKey, Remap, u64)>,
    /// The command each in-flight request (dev, hctx and tag) carries.
    by_request: FastMap<(u32, u64), SlotRef>,
    /// Request-based dm's clones waiting for their issue below: (dev,
    /// sector, length) there → the upper device's command.
    pub(super) rq_remaps: FastMap<RemapKey, SlotRef>,
    /// User I/Os the command being gathered newly carries, with the wait
    /// of those it is the first command of; told once the gather is done.
    carried: Vec<Carried>,
    /// The next command's number.
    pub(super) next_command: u64,
    /// By the registry's disk index.
    marks: Vec<ChainMarks>,
    /// Commands without a range (flushes) in flight, per device and op, in
    /// issue order: a completion without a range ends the oldest.
    pub(super) empty_commands: FastMap<(u32, u8), VecDeque<EmptyCommand>>,
    /// Empty preflush bios queued per device, oldest first: each ends with
    /// the next flush command that completes there.
    queued_flushes: FastMap<u32, VecDeque<QueuedFlush>>,
}

/// An empty preflush bio waiting for the flush that serves it.
#[derive(Clone, Copy, Debug)]
pub(super) struct QueuedFlush {
    pub(super) queue_ns: u64,
    pub(super) account: Account,
    pub(super) epoch: u32,
}

/// Empty commands kept waiting per device and op, at most: past this, the
/// trace lacks their completions.
const MAX_EMPTY_COMMANDS: usize = 1 << 10;

/// A command without a range (a flush) waiting for its completion.
#[derive(Clone, Copy, Debug)]
pub(super) struct EmptyCommand {
    pub(super) serial: u64,
    pub(super) issue_ns: u64,
    pub(super) target: Target,
    pub(super) epoch: u32,
    /// In flight when events were lost.
    pub(super) lost: bool,
}

/// A user I/O a command carries: its first command waits `first_wait`.
#[derive(Clone, Copy, Debug)]
struct Carried {
    io: SlotRef,
    first_wait: Option<(Account, u64)>,
}

impl Chains {
    /// Tables of at most `limits.max_in_flight` entries each (remaps at most
    /// `remap_cap`), `reserve` slots allocated up front.
    pub(super) fn new(limits: EngineLimits, reserve: usize, remap_cap: usize) -> Chains {
        let cap = limits.max_in_flight.max(1);
        let reserve = cap.min(reserve);
        Chains {
            limits,
            now_ns: 0,
            epoch: 0,
            correlation: CorrelationStats::default(),
            user_ios: Table::new(cap, reserve),
            fragments: Table::new(cap, reserve),
            commands: Table::new(cap, reserve),
            remaps: Table::new(cap.min(remap_cap), reserve),
            held_remap: None,
            by_request: FastMap::default(),
            rq_remaps: FastMap::default(),
            carried: Vec::new(),
            next_command: 1,
            marks: Vec::new(),
            empty_commands: FastMap::default(),
            queued_flushes: FastMap::default(),
        }
    }
}

/// A bio as submitted to a block device (block_bio_queue).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UserIo {
    pub(super) target: Target,
    pub(super) tgid: u32,
    pub(super) queue_ns: u64,
    /// Fragments not yet completed.
    pub(super) outstanding: u32,
    pub(super) fragments: u32,
    /// Distinct commands that carried any of its fragments.
    pub(super) commands: u32,
    pub(super) last_command: u64,
    /// Its process, cgroup and file entries in the attribution tables.
    pub(super) owners: OwnerSlots,
    /// An event of its chain was missed or dropped.
    pub(super) incomplete: bool,
    /// Counted once in `evicted` or `aged_out`.
    pub(super) dropped: bool,
    /// In flight when the ring dropped events: a drop of its chain is theirs.
    pub(super) in_ring_drop: bool,
    /// A command carrying part of it completed with an error.
    pub(super) failed: bool,
    pub(super) epoch: u32,
    /// The fragment it continues of an upper device's user I/O read off a
    /// remap: the trace lacks that device's completions, so it ends here.
    pub(super) upper_fragment: SlotRef,
    /// The upper device's user I/O this bio was remapped from (stacked).
    pub(super) parent: SlotRef,
    /// The last disk command counted for it as an upper user I/O.
    pub(super) last_disk_command: u64,
    /// Submitted as an untorn write (`REQ_ATOMIC`, `U` in `rwbs`).
    pub(super) atomic: bool,
    /// A command that carried it covered more or less than its fragment:
    /// it was merged with a neighbour, or a piece of it went alone.
    pub(super) shared_command: bool,
    /// Where it was queued, for naming an untorn write that was not kept whole.
    pub(super) dev: u32,
    pub(super) sector: u64,
    pub(super) sectors: u32,
}

impl UserIo {
    /// What became of it as an untorn write: one command of exactly its own
    /// range proves it was not torn; the first thing that breaks that is named.
    fn atomic_fate(&self) -> AtomicFate {
        if self.failed {
            AtomicFate::Failed
        } else if self.incomplete || self.commands == 0 {
            AtomicFate::Unfollowed
        } else if self.fragments > 1 {
            AtomicFate::Split
        } else if self.commands > 1 || self.shared_command {
            AtomicFate::SharedCommand
        } else {
            AtomicFate::OneCommand
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum FragmentState {
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
pub(super) struct Fragment {
    pub(super) io: SlotRef,
    pub(super) start: u64,
    pub(super) end: u64,
    /// The bio's operation: an issue gathers its own op's fragments first.
    pub(super) op: Op,
    pub(super) state: FragmentState,
    /// The front piece of a split cut at a size or segment limit: its request
    /// can take nothing more, so it is never a missed merge.
    pub(super) full: bool,
    /// Cut off by device-mapper from a bio it trims and resubmits: no
    /// completion of its own is traced (the trimmed bio's covers it), so it
    /// ends when it is sent down.
    pub(super) untraced_end: bool,
    /// Next fragment in the same command.
    pub(super) next: u32,
}

impl Default for Fragment {
    fn default() -> Self {
        Fragment {
            io: SlotRef::NONE,
            start: 0,
            end: 0,
            op: Op::Other,
            state: FragmentState::Pending,
            full: false,
            untraced_end: false,
            next: NIL,
        }
    }
}

/// One device command (block_rq_issue); `start` moves on partial completion.
/// A requeued command stays one command: its re-issue moves `issue_ns`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Command {
    /// Its number in issue order, kept across requeues.
    pub(super) serial: u64,
    /// The device it was issued on (kernel dev_t).
    pub(super) dev: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    /// The last issue.
    pub(super) issue_ns: u64,
    /// When the driver gave it back (block_rq_requeue), until it is issued again.
    pub(super) requeued_ns: Option<u64>,
    pub(super) target: Target,
    /// The owners of its first fragment's user I/O.
    pub(super) owners: OwnerSlots,
    pub(super) epoch: u32,
    /// Its fragments in sector order.
    pub(super) head: u32,
    pub(super) tail: u32,
    /// In flight when events were lost: the completion it gets may be another
    /// command's, so its latency is not recorded.
    pub(super) lost: bool,
    /// Which request carries it (hardware queue and tag, from BTF
    /// tracepoints); 0 when unknown.
    identity: u64,
    /// A completion of it reported an error (counted once).
    pub(super) failed: bool,
}

impl Default for Command {
    fn default() -> Self {
        Command {
            serial: 0,
            dev: 0,
            start: 0,
            end: 0,
            issue_ns: 0,
            requeued_ns: None,
            target: Target::default(),
            owners: OwnerSlots::NONE,
            epoch: 0,
            head: NIL,
            tail: NIL,
            lost: false,
            identity: 0,
            failed: false,
        }
    }
}

/// A `block_bio_remap` waiting for the `block_bio_queue` of the same bio.
#[derive(Clone, Copy, Debug)]
pub(super) struct Remap {
    /// The partition the bio was sent to (kernel dev_t), if it came from one.
    pub(super) partition: Option<u32>,
    /// Where that partition starts on the disk (the remap's two sectors
    /// apart), for a partition the geometry does not know.
    pub(super) partition_start: u64,
    /// The upper device's user I/O, for a stacked remap.
    pub(super) parent: SlotRef,
    /// Its fragment, when the upper device's completions are not traced.
    pub(super) upper_fragment: SlotRef,
}

impl Default for Remap {
    fn default() -> Self {
        Remap {
            partition: None,
            partition_start: 0,
            parent: SlotRef::NONE,
            upper_fragment: SlotRef::NONE,
        }
    }
}

/// The correlator's marks on one disk.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChainMarks {
    /// Requeued commands without a range (flushes, passthrough), per op:
    /// the next such issue is their re-issue, not a new command.
    pub(super) requeued_empty: [u32; OP_COUNT],
    /// Bio-based only: the fragment queued or cut last. Device-mapper traces
    /// a split on the bio it trimmed, which already starts at the cut, so
    /// the piece it was cut from is found here, not by its start.
    pub(super) last_fragment: SlotRef,
    /// Where a clone's remap cut the last fragment before its trim was
    /// traced: the split that follows is that cut, already made.
    pub(super) precut_at: Option<u64>,
    /// Its whole commands' issue→complete times seen, by power of two of
    /// nanoseconds: what a command still in flight at the end is measured
    /// against.
    pub(super) completions: [u32; 64],
}

impl Default for ChainMarks {
    fn default() -> Self {
        ChainMarks {
            requeued_empty: [0; OP_COUNT],
            last_fragment: SlotRef::NONE,
            precut_at: None,
            completions: [0; 64],
        }
    }
}

impl ChainMarks {
    /// A whole command took `latency_ns` from its last issue.
    pub(super) fn saw_completion(&mut self, latency_ns: u64) {
        let bucket = 63 - (latency_ns | 1).leading_zeros() as usize;
        self.completions[bucket] = self.completions[bucket].saturating_add(1);
    }

    /// The 99th percentile of the completions seen (the upper end of its
    /// power of two), if any were.
    pub(super) fn completion_p99_ns(&self) -> Option<u64> {
        let total: u64 = self.completions.iter().map(|&n| u64::from(n)).sum();
        if total == 0 {
            return None;
        }
        let rank = total - total / 100;
        let mut seen = 0;
        for (bucket, &count) in self.completions.iter().enumerate() {
            seen += u64::from(count);
            if seen >= rank {
                return Some(1u64.checked_shl(bucket as u32 + 1).unwrap_or(u64::MAX));
            }
        }
        None
    }
}

type SectorKey = (u32, u64);
type RemapKey = (u32, u64, u32);

impl Chains {
    /// Holds `remap` for the next event (see [`Chains::held_remap`]).
    pub(super) fn push_remap(&mut self, key: RemapKey, remap: Remap) {
        self.store_held_remap();
        self.held_remap = Some((key, remap, self.now_ns));
    }

    /// Puts the held remap, if any, in the table.
    pub(super) fn store_held_remap(&mut self) {
        if let Some((key, remap, born_ns)) = self.held_remap.take() {
            self.insert_remap(key, remap, born_ns);
        }
    }

    /// Whether the held remap is old enough to age out (as it would have in
    /// the table).
    pub(super) fn held_remap_aged(&self) -> bool {
        let threshold = self.now_ns.checked_sub(self.limits.max_age_ns);
        match (self.held_remap, threshold) {
            (Some((_, _, born_ns)), Some(threshold)) => born_ns < threshold,
            _ => false,
        }
    }

    /// The remap a bio's queue carries on from `key`: the held one when the
    /// table is empty (with entries there, an older one of the same key
    /// comes first), else the table's oldest of that key.
    pub(super) fn take_remap(&mut self, key: RemapKey) -> Option<Remap> {
        match self.held_remap {
            Some((held, remap, _)) if held == key && self.remaps.len() == 0 => {
                self.held_remap = None;
                return Some(remap);
            }
            Some(_) => self.store_held_remap(),
            None => {}
        }
        self.remaps
            .find(&key, |_| true)
            .and_then(|index| self.remaps.remove(index))
    }

    fn insert_remap(&mut self, key: RemapKey, remap: Remap, born_ns: u64) {
        if self.remaps.is_full() {
            if let Some((oldest, _)) = self.remaps.oldest() {
                self.remaps.remove(oldest);
                self.correlation.unmatched_events += 1;
            }
        }
        if self
            .remaps
            .insert(remap, Some(key), born_ns, true)
            .is_none()
        {
            self.correlation.unmatched_events += 1;
        }
    }

    /// Past a gap in a command's range, where its next traced bio starts:
    /// a scan, as gaps come only from lost or pre-trace bios, and bounded.
    fn next_pending_start(&self, dev: u32, after: u64, end: u64) -> Option<u64> {
        const MOST_SCANNED: usize = 1 << 16;
        if self.fragments.len() > MOST_SCANNED {
            return None;
        }
        self.fragments
            .values()
            .filter(|f| {
                f.state == FragmentState::Pending
                    && f.start > after
                    && f.start < end
                    && f.end <= end
                    && f.end > f.start
            })
            // On `dev`: the fragment is the one keyed there.
            .filter(|f| {
                self.fragments
                    .find(&(dev, f.start), |g| std::ptr::eq(g, *f))
                    .is_some()
            })
            .map(|f| f.start)
            .min()
    }

    /// The pending fragment at `(dev, at)` that ends by `end`: one of the
    /// command's own op first, so a stale bio of another op at the same
    /// sector (its issue lost with a CPU's file) does not lend the command
    /// its op; then any op, as the 2009 `blk` plugin printed different
    /// letters on a request's Q and D.
    fn pending_fragment(&self, dev: u32, at: u64, end: u64, op: Op) -> Option<u32> {
        let fits = |fragment: &Fragment| {
            fragment.state == FragmentState::Pending
                && fragment.end > fragment.start
                && fragment.end <= end
        };
        self.fragments
            .find(&(dev, at), |fragment| fits(fragment) && fragment.op == op)
            .or_else(|| self.fragments.find(&(dev, at), fits))
    }

    /// Links the pending fragments that tile `[start, end)` on `dev` into the
    /// command, and notes the user I/Os it newly carries for
    /// [`Chains::settle_carried`]. Returns the first fragment's target and
    /// the command's ends.
    pub(super) fn gather_fragments(
        &mut self,
        command_index: u32,
        dev: u32,
        start: u64,
        end: u64,
        serial: u64,
        op: Op,
    ) -> (Option<Target>, Option<CommandEnds>) {
        let mut target = None;
        let mut ends: Option<CommandEnds> = None;
        let mut cursor = start;
        let mut tail = NIL;
        while cursor < end {
            let Some(index) = self.pending_fragment(dev, cursor, end, op) else {
                // A bio we never saw (dropped, or queued before tracing
                // began); bios merged behind it are still carried.
                self.correlation.unmatched_events += 1;
                match self.next_pending_start(dev, cursor, end) {
                    Some(next) => {
                        cursor = next;
                        continue;
                    }
                    None => break,
                }
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
            let full = fragment.full;
            let exact = fragment.start == start && fragment.end == end;
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
            let Some(io) = self
                .user_ios
                .resolve(io_ref)
                .and_then(|io_index| self.user_ios.get_mut(io_index))
            else {
                continue;
            };
            io.shared_command |= !exact;
            if io.last_command != serial {
                io.last_command = serial;
                io.commands += 1;
                let first_wait = (io.commands == 1 && io.epoch == self.epoch).then(|| {
                    let waited_us = self.now_ns.saturating_sub(io.queue_ns) / 1000;
                    (
                        Account {
                            target: io.target,
                            owners: io.owners,
                        },
                        waited_us,
                    )
                });
                self.carried.push(Carried {
                    io: io_ref,
                    first_wait,
                });
            }
            target.get_or_insert(io.target);
            let queued_ns = io.queue_ns;
            let ends = ends.get_or_insert(CommandEnds {
                queued_ns,
                bios: 0,
                first_io: io_ref,
                last_io: io_ref,
                owners: io.owners,
                starts_full: full,
            });
            ends.queued_ns = ends.queued_ns.min(queued_ns);
            ends.bios += 1;
            ends.last_io = io_ref;
        }
        (target, ends)
    }

    /// Tells what the gathered command `serial` means for each user I/O it
    /// newly carries: a disk command for the I/Os above it, and the wait of
    /// those it is the first command of.
    pub(super) fn settle_carried(&mut self, serial: u64, out: &mut Sink) {
        for at in 0..self.carried.len() {
            let Carried { io, first_wait } = self.carried[at];
            self.count_disk_command_above(io, serial, out);
            if let Some((account, waited_us)) = first_wait {
                out.emit(Outcome::Waited { account, waited_us });
            }
        }
    }

    /// A disk command `serial` carrying `io`: one more for each user I/O on
    /// the devices above that `io` was remapped from, once per command.
    pub(super) fn count_disk_command_above(&mut self, io: SlotRef, serial: u64, out: &mut Sink) {
        let upper = match self
            .user_ios
            .resolve(io)
            .and_then(|index| self.user_ios.get(index))
        {
            Some(io) => io.parent,
            None => return,
        };
        self.count_disk_command_from(upper, serial, out);
    }

    /// A disk command `serial` carrying (part of) the user I/O `upper`:
    /// one more for it and for each user I/O above it, once per command.
    pub(super) fn count_disk_command_from(
        &mut self,
        mut upper: SlotRef,
        serial: u64,
        out: &mut Sink,
    ) {
        // A stack deeper than this is a loop in the links, not a stack.
        for _ in 0..8 {
            let Some(index) = self.user_ios.resolve(upper) else {
                return;
            };
            let Some(io) = self.user_ios.get_mut(index) else {
                return;
            };
            if io.last_disk_command == serial {
                return;
            }
            io.last_disk_command = serial;
            let (account, parent) = (
                Account {
                    target: io.target,
                    owners: io.owners,
                },
                io.parent,
            );
            out.emit(Outcome::ReachedDisk { account });
            upper = parent;
        }
    }

    /// A fragment of a bio-based device counted as its command, on `dev`.
    pub(super) fn count_bio_command(
        &mut self,
        dev: u32,
        io_ref: SlotRef,
        start: u64,
        sectors: u64,
        out: &mut Sink,
    ) {
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
        let account = Account {
            target: io.target,
            owners: io.owners,
        };
        let first = io.commands == 1 && io.epoch == self.epoch;
        let waited_us = self.now_ns.saturating_sub(io.queue_ns) / 1000;
        if first {
            out.emit(Outcome::Waited { account, waited_us });
        }
        self.issue_command(
            serial,
            dev,
            account.target,
            account.owners,
            start,
            sectors,
            None,
            out,
        );
        out.emit(Outcome::Carries {
            command: CommandId(serial),
            io: IoId::of(io_ref),
        });
    }

    /// A new command `serial` issued on `dev`, then the user I/Os it carries.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue_command(
        &mut self,
        serial: u64,
        dev: u32,
        target: Target,
        owners: OwnerSlots,
        start: u64,
        sectors: u64,
        ends: Option<CommandEnds>,
        out: &mut Sink,
    ) {
        out.emit(Outcome::Issued {
            command: CommandId(serial),
            dev,
            sector: start,
            sectors,
            op: target.op,
            ts_ns: self.now_ns,
            account: Account { target, owners },
            ends,
        });
        if out.keeps() {
            for carried in &self.carried {
                out.keep(Outcome::Carries {
                    command: CommandId(serial),
                    io: IoId::of(carried.io),
                });
            }
        }
        self.carried.clear();
    }

    /// A fragment finished, successfully unless `failed`.
    pub(super) fn complete_fragment(&mut self, index: u32, failed: bool, out: &mut Sink) {
        let Some(fragment) = self.fragments.remove(index) else {
            return;
        };
        let Some(io_index) = self.user_ios.resolve(fragment.io) else {
            return;
        };
        let finished = match self.user_ios.get_mut(io_index) {
            Some(io) => {
                io.failed |= failed;
                io.outstanding = io.outstanding.saturating_sub(1);
                io.outstanding == 0
            }
            None => false,
        };
        if finished {
            self.finish_io(io_index, out);
        }
    }

    fn finish_io(&mut self, io_index: u32, out: &mut Sink) {
        let reference = self.user_ios.slot_ref(io_index);
        let Some(io) = self.user_ios.remove(io_index) else {
            return;
        };
        if let Some(upper) = self.fragments.resolve(io.upper_fragment) {
            self.complete_fragment(upper, io.failed, out);
        }
        out.emit(Outcome::Finished {
            io: IoId::of(reference),
            ts_ns: self.now_ns,
            complete: !io.incomplete,
            failed: io.failed,
            account: Account {
                target: io.target,
                owners: io.owners,
            },
            measured: io.epoch == self.epoch,
            queue_ns: io.queue_ns,
            fragments: io.fragments,
            commands: io.commands,
            atomic: io.atomic.then(|| AtomicWrite {
                dev: io.dev,
                sector: io.sector,
                sectors: io.sectors,
                fate: io.atomic_fate(),
            }),
        });
        if io.incomplete && !io.failed {
            self.correlation.incomplete += 1;
        }
    }

    /// A fragment dropped without completing: its user I/O is incomplete.
    fn drop_fragment(&mut self, fragment: Fragment, reason: DropReason, out: &mut Sink) {
        let Some(io_index) = self.user_ios.resolve(fragment.io) else {
            return;
        };
        let (finished, newly_dropped, in_ring_drop) = match self.user_ios.get_mut(io_index) {
            Some(io) => {
                let newly_dropped = !io.dropped;
                let in_ring_drop = io.in_ring_drop;
                io.dropped = true;
                io.incomplete = true;
                io.outstanding = io.outstanding.saturating_sub(1);
                (io.outstanding == 0, newly_dropped, in_ring_drop)
            }
            None => return,
        };
        // Blame the full ring, not the table or the kernel, for what it may have eaten.
        let reason = match in_ring_drop {
            true => DropReason::RingDropped,
            false => reason,
        };
        if newly_dropped {
            out.emit(Outcome::Dropped {
                io: IoId::of(fragment.io),
                reason,
            });
            match reason {
                DropReason::AgedOut => self.correlation.aged_out += 1,
                DropReason::Evicted => self.correlation.evicted += 1,
                DropReason::CompletionLost => self.correlation.completion_lost += 1,
                DropReason::RingDropped => self.correlation.ring_dropped += 1,
            }
        }
        if finished {
            self.finish_io(io_index, out);
        }
    }

    /// Drops a fragment that is not part of a command.
    fn expire_fragment(&mut self, index: u32, reason: DropReason, out: &mut Sink) {
        if let Some(fragment) = self.fragments.remove(index) {
            self.drop_fragment(fragment, reason, out);
        }
    }

    /// Drops a command and the fragments it carries.
    pub(super) fn expire_command(&mut self, index: u32, reason: DropReason, out: &mut Sink) {
        let Some(command) = self.commands.remove(index) else {
            return;
        };
        out.emit(Outcome::CommandDropped {
            command: CommandId(command.serial),
            reason,
        });
        let mut head = command.head;
        while head != NIL {
            let Some(fragment) = self.fragments.remove(head) else {
                break;
            };
            head = fragment.next;
            self.drop_fragment(fragment, reason, out);
        }
    }

    /// The kernel dropped events (a ring was full). Any chain or command in
    /// flight may have lost one, so none of them feeds the histograms: each
    /// chain is counted incomplete when it ends.
    pub(super) fn events_lost(&mut self) {
        for io in self.user_ios.values_mut() {
            io.incomplete = true;
            io.in_ring_drop = true;
        }
        for command in self.commands.values_mut() {
            command.lost = true;
        }
        for waiting in self.empty_commands.values_mut() {
            for command in waiting.iter_mut() {
                command.lost = true;
            }
        }
    }

    /// A command without a range issued on `dev`, waiting for its completion.
    pub(super) fn push_empty_command(&mut self, dev: u32, op: u8, command: EmptyCommand) {
        let waiting = self.empty_commands.entry((dev, op)).or_default();
        if waiting.len() >= MAX_EMPTY_COMMANDS {
            waiting.pop_front();
        }
        waiting.push_back(command);
    }

    /// An empty preflush bio queued on `dev` (bounded: a device that issues
    /// no flush of its own, as device-mapper, keeps only the newest).
    pub(super) fn push_queued_flush(&mut self, dev: u32, flush: QueuedFlush) {
        let waiting = self.queued_flushes.entry(dev).or_default();
        if waiting.len() >= MAX_EMPTY_COMMANDS {
            waiting.pop_front();
        }
        waiting.push_back(flush);
    }

    /// The oldest empty preflush bio on `dev` queued by `issue_ns`: the one
    /// the flush command issued then served.
    pub(super) fn pop_queued_flush(&mut self, dev: u32, issue_ns: u64) -> Option<QueuedFlush> {
        let waiting = self.queued_flushes.get_mut(&dev)?;
        if waiting.front()?.queue_ns > issue_ns {
            return None;
        }
        waiting.pop_front()
    }

    /// The oldest command without a range in flight on `dev`, first in first
    /// out: such commands have no sector to be told apart by.
    pub(super) fn pop_empty_command(&mut self, dev: u32, op: u8) -> Option<EmptyCommand> {
        self.empty_commands.get_mut(&(dev, op))?.pop_front()
    }

    /// The end of a trace at `now_ns`: a command still in flight much longer
    /// than its device ever took (the bound [`Chains::lost_after_ns`] sets)
    /// lost its completion, so its chains end incomplete instead of staying
    /// in flight. Returns how many commands it gave up.
    pub(super) fn settle_at_end(&mut self, now_ns: u64, out: &mut Sink) -> u64 {
        let now_ns = self.now_ns.max(now_ns);
        let mut overdue = Vec::new();
        for command in self.commands.values_mut() {
            if command.requeued_ns.is_some() {
                continue;
            }
            let Some(bound) = self
                .marks
                .get(command.target.disk as usize)
                .and_then(|marks| marks.completion_p99_ns().map(Chains::lost_after_ns))
            else {
                continue;
            };
            if now_ns.saturating_sub(command.issue_ns) > bound {
                overdue.push((command.dev, command.start, command.serial));
            }
        }
        let mut settled = 0;
        for (dev, start, serial) in overdue {
            if let Some(index) = self.commands.find(&(dev, start), |c| c.serial == serial) {
                self.expire_command(index, DropReason::CompletionLost, out);
                settled += 1;
            }
        }
        settled
    }

    /// How long a command may stay in flight on a device whose completions'
    /// 99th percentile is `p99_ns` before its completion is taken as lost:
    /// a hundred times that, and never less than a second.
    pub(super) fn lost_after_ns(p99_ns: u64) -> u64 {
        p99_ns.saturating_mul(100).max(1_000_000_000)
    }

    /// Lazy age-out, from the newest event timestamp seen.
    pub(super) fn expire_aged(&mut self, out: &mut Sink) {
        let Some(threshold) = self.now_ns.checked_sub(self.limits.max_age_ns) else {
            return;
        };
        while let Some((index, born_ns)) = self.fragments.oldest() {
            if born_ns >= threshold {
                break;
            }
            self.expire_fragment(index, DropReason::AgedOut, out);
        }
        while let Some((index, born_ns)) = self.commands.oldest() {
            if born_ns >= threshold {
                break;
            }
            self.expire_command(index, DropReason::AgedOut, out);
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
    pub(super) fn make_room_for_fragment(&mut self, out: &mut Sink) -> bool {
        while self.fragments.is_full() || self.user_ios.is_full() {
            if let Some((oldest, _)) = self.fragments.oldest() {
                self.expire_fragment(oldest, DropReason::Evicted, out);
            } else if let Some((oldest, _)) = self.commands.oldest() {
                self.expire_command(oldest, DropReason::Evicted, out);
            } else {
                return false;
            }
        }
        true
    }

    /// A new in-flight command issued now, evicting the oldest when the table is full.
    pub(super) fn insert_command(
        &mut self,
        serial: u64,
        dev: u32,
        (start, end): (u64, u64),
        requeued_ns: Option<u64>,
        target: Target,
        out: &mut Sink,
    ) -> Option<u32> {
        while self.commands.is_full() {
            let Some((oldest, _)) = self.commands.oldest() else {
                break;
            };
            self.expire_command(oldest, DropReason::Evicted, out);
        }
        let command = Command {
            serial,
            dev,
            start,
            end,
            issue_ns: self.now_ns,
            requeued_ns,
            target,
            owners: OwnerSlots::NONE,
            epoch: self.epoch,
            head: NIL,
            tail: NIL,
            lost: false,
            identity: 0,
            failed: false,
        };
        self.commands
            .insert(command, Some((dev, start)), self.now_ns, true)
    }

    /// The live command that request `identity` on `dev` carries, if any.
    pub(super) fn command_of_request(&self, dev: u32, identity: u64) -> Option<u32> {
        if identity == 0 {
            return None;
        }
        let index = self
            .commands
            .resolve(*self.by_request.get(&(dev, identity))?)?;
        let command = self.commands.get(index)?;
        (command.identity == identity).then_some(index)
    }

    /// Notes that request `identity` on `dev` now carries command `index`.
    pub(super) fn name_request(&mut self, dev: u32, identity: u64, index: u32) {
        if identity == 0 {
            return;
        }
        if let Some(command) = self.commands.get_mut(index) {
            command.identity = identity;
            let reference = self.commands.slot_ref(index);
            self.by_request.insert((dev, identity), reference);
        }
    }

    #[cfg(test)]
    pub(super) fn allocated(&self) -> [usize; 4] {
        [
            self.user_ios.allocated(),
            self.fragments.allocated(),
            self.commands.allocated(),
            self.remaps.allocated(),
        ]
    }

    /// The correlator's marks on `disk`.
    pub(super) fn marks(&self, disk: u32) -> ChainMarks {
        self.marks.get(disk as usize).copied().unwrap_or_default()
    }

    pub(super) fn marks_mut(&mut self, disk: u32) -> &mut ChainMarks {
        let disk = disk as usize;
        if disk >= self.marks.len() {
            self.marks.resize_with(disk + 1, ChainMarks::default);
        }
        &mut self.marks[disk]
    }

    /// User I/Os in flight.
    pub(super) fn in_flight(&self) -> u64 {
        self.user_ios.len() as u64
    }

    /// A reset: chains in flight go on, but feed no new histograms, and the
    /// correlation's counters start again.
    pub(super) fn new_epoch(&mut self) {
        self.correlation = CorrelationStats::default();
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// With nothing in flight, gives back what a burst grew beyond `keep`
    /// slots (writeback can queue tens of thousands of bios at once).
    /// True if a table shrank.
    pub(super) fn shrink_idle(&mut self, keep: usize) -> bool {
        // Commands hold raw fragment indices: shrink the three together.
        let idle =
            self.user_ios.len() == 0 && self.fragments.len() == 0 && self.commands.len() == 0;
        if !idle {
            return false;
        }
        let shrunk = [
            self.user_ios.shrink_idle(keep),
            self.fragments.shrink_idle(keep),
            self.commands.shrink_idle(keep),
            self.remaps.shrink_idle(keep),
        ];
        // Nothing in flight: every entry is stale.
        self.by_request.clear();
        self.rq_remaps.clear();
        shrunk.contains(&true)
    }

    pub(super) fn io_of_fragment(&self, index: u32) -> Option<&UserIo> {
        let fragment = self.fragments.get(index)?;
        let io_index = self.user_ios.resolve(fragment.io)?;
        self.user_ios.get(io_index)
    }
}
