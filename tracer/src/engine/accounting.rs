//! The accounting: every counter, histogram, service sample, owner's
//! measure and what-if stream grows here, from the correlation's
//! [`Outcome`]s and nothing else. The correlator decides what happened;
//! this decides what it counts for. [`Accounting`] owns what was measured
//! per device ([`DeviceMeasures`]), per owner and per dirty buffer, and
//! [`Sink`] is how the correlator hands it each outcome.

use tracer_common::DirtyCounts;
use tracer_common::Owner;

use super::attribution::{AttributionTables, OwnerSlots, Place, OWNER_CAPACITY};
use super::outcome::{Account, CommandEnds, IoId, Outcome};
use super::service::ServiceSamples;
use super::split::SplitLimits;
use super::stats::{op_index, DeviceStats, OpStats, OP_COUNT};
use super::table::{FastMap, SlotRef};
use super::target::{Target, NO_PART};
use crate::blk::SECTOR_BYTES;

/// Command sizes at most `max_sectors / SMALL_COMMAND_DIVISOR` count as far
/// below `max_sectors` for `merge_blocked`.
const SMALL_COMMAND_DIVISOR: u64 = 4;
/// `max_sectors` assumed for that test when the device's is unknown (128 KiB).
const DEFAULT_MAX_SECTORS: u64 = 256;

/// Whether the command `[start, +sectors)` with these ends is a merge the
/// kernel could have made with the previous command of its op and did not:
/// it starts where that one ended, its bios were queued before that one was
/// issued, both are far below `max_sectors`, and merging them would break no
/// limit. Pieces of one split are never candidates (the split made them fit),
/// nor is a merge that would exceed `max_sectors` or `max_segments` (counted
/// bio by bio, as the kernel does) or cross a chunk boundary.
fn missed_merge(
    limits: &SplitLimits,
    last: &LastIssue,
    start: u64,
    sectors: u64,
    ends: &CommandEnds,
) -> bool {
    let max_sectors = match limits.max_sectors {
        0 => DEFAULT_MAX_SECTORS,
        known => known,
    };
    let small = |length: u64| length * SMALL_COMMAND_DIVISOR <= max_sectors;
    last.valid
        && last.end == start
        && ends.queued_ns <= last.issue_ns
        && small(sectors)
        && small(last.sectors)
        && last.sectors + sectors <= max_sectors
        && last.last_io != ends.first_io
        && !ends.starts_full
        && (limits.max_segments == 0 || last.bios + ends.bios <= limits.max_segments)
        && (limits.chunk_sectors == 0 || !start.is_multiple_of(limits.chunk_sectors))
}

/// The last command issued on a disk for one op, which the next may have
/// missed a merge with.
#[derive(Clone, Copy, Debug)]
struct LastIssue {
    end: u64,
    sectors: u64,
    issue_ns: u64,
    /// Fragments it carried (a lower bound on its segments).
    bios: u64,
    /// The user I/O of its last fragment.
    last_io: SlotRef,
    valid: bool,
}

impl Default for LastIssue {
    fn default() -> Self {
        LastIssue {
            end: 0,
            sectors: 0,
            issue_ns: 0,
            bios: 0,
            last_io: SlotRef::NONE,
            valid: false,
        }
    }
}

/// The last user I/O queued on a disk for one op: where the next one must
/// start, and whether it is still in flight, to continue its stream.
/// The last user I/O queued on a disk for one op, which the next may continue.
#[derive(Clone, Copy, Debug, Default)]
struct LastQueued {
    end: u64,
    part: u32,
    tracked: bool,
    /// While it is in flight.
    io: Option<IoId>,
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

/// What was measured on one disk: its own traffic, each partition's (by
/// the registry's partition index), its commands' service times, and the
/// last command and user I/O per op that the next one is measured against.
#[derive(Default)]
pub(super) struct DeviceMeasures {
    /// Copied from the registry when geometry is installed: the merge test
    /// and the alignment counts read them per command.
    limits: SplitLimits,
    pub(super) whole: DeviceStats,
    parts: Vec<DeviceStats>,
    /// Per op: the commands' service times, which the what-if's times replay.
    pub(super) service: [ServiceSamples; OP_COUNT],
    last_issue: [LastIssue; OP_COUNT],
    /// Per op: the last user I/O, which the next may continue (what-if streams).
    last_queued: [LastQueued; OP_COUNT],
}

impl DeviceMeasures {
    /// Partition `part`'s traffic (by the registry's index), if it had any.
    pub(super) fn part(&self, part: usize) -> Option<&DeviceStats> {
        self.parts.get(part)
    }

    /// A user I/O just queued: whether it continues the stream of the last
    /// one on its disk and op, starting where that one ended, on the same
    /// partition and origin, while that one is in flight.
    fn stream_step(&mut self, target: Target, io: Option<IoId>, start: u64, sectors: u64) -> bool {
        let last = &mut self.last_queued[op_index(target.op)];
        let continues = last.end == start
            && last.part == target.part
            && last.tracked == target.tracked
            && last.io.is_some();
        *last = LastQueued {
            end: start.saturating_add(sectors),
            part: target.part,
            tracked: target.tracked,
            io,
        };
        continues
    }

    #[inline]
    fn stats_mut(&mut self, part: u32) -> &mut DeviceStats {
        if part == NO_PART {
            return &mut self.whole;
        }
        let part = part as usize;
        if part >= self.parts.len() {
            self.grow_parts(part);
        }
        &mut self.parts[part]
    }

    /// A partition's first traffic: off the hot path.
    #[cold]
    #[inline(never)]
    fn grow_parts(&mut self, part: usize) {
        self.parts.resize_with(part + 1, DeviceStats::default);
    }

    fn clear(&mut self) {
        let limits = self.limits;
        *self = DeviceMeasures {
            limits,
            ..DeviceMeasures::default()
        };
    }
}

/// Everything the outcomes are counted into.
pub(super) struct Accounting {
    /// By the registry's disk index.
    devices: Vec<DeviceMeasures>,
    /// Who caused the I/O: per process, cgroup and file, and device.
    pub(super) attribution: AttributionTables,
    dirty: FastMap<u32, DirtyStats>,
    /// The kernel's running dirty-buffer totals per device, as last seen.
    dirty_kernel: FastMap<u32, DirtyCounts>,
}

/// Where the correlator hands its outcomes: the accounting counts each one,
/// and the views that asked for them keep it.
pub(super) struct Sink<'a> {
    accounting: &'a mut Accounting,
    kept: Option<&'a mut Vec<Outcome>>,
}

impl<'a> Sink<'a> {
    pub(super) fn new(accounting: &'a mut Accounting, kept: Option<&'a mut Vec<Outcome>>) -> Self {
        Sink { accounting, kept }
    }

    /// Counts an outcome, and keeps it for the views that asked. Inlined,
    /// so each emit keeps only its outcome's arm of the accounting.
    #[inline(always)]
    pub(super) fn emit(&mut self, outcome: Outcome) {
        self.accounting.account(&outcome);
        if let Some(kept) = self.kept.as_deref_mut() {
            kept.push(outcome);
        }
    }

    /// Whether views keep outcomes.
    pub(super) fn keeps(&self) -> bool {
        self.kept.is_some()
    }

    /// Keeps an outcome for the views without counting it (one the
    /// accounting has no use for).
    pub(super) fn keep(&mut self, outcome: Outcome) {
        if let Some(kept) = self.kept.as_deref_mut() {
            kept.push(outcome);
        }
    }

    /// The owners a bio queued by `owner` (as `tgid`) on `place` counts to.
    #[inline]
    pub(super) fn owners_of(&mut self, owner: &Owner, tgid: u32, place: Place) -> OwnerSlots {
        self.accounting.attribution.owners_of(owner, tgid, place)
    }
}

impl Accounting {
    pub(super) fn new() -> Accounting {
        Accounting {
            devices: Vec::new(),
            attribution: AttributionTables::new(OWNER_CAPACITY),
            dirty: FastMap::default(),
            dirty_kernel: FastMap::default(),
        }
    }

    /// What was measured on disk `disk`, if anything.
    pub(super) fn device(&self, disk: usize) -> Option<&DeviceMeasures> {
        self.devices.get(disk)
    }

    pub(super) fn dirty(&self) -> &FastMap<u32, DirtyStats> {
        &self.dirty
    }

    /// The disk's limits, as the registry now has them.
    pub(super) fn set_limits(&mut self, disk: usize, limits: SplitLimits) {
        self.device_mut(disk).limits = limits;
    }

    #[inline]
    fn device_mut(&mut self, disk: usize) -> &mut DeviceMeasures {
        if disk >= self.devices.len() {
            self.grow_devices(disk);
        }
        &mut self.devices[disk]
    }

    /// A disk's first traffic or limits: off the hot path.
    #[cold]
    #[inline(never)]
    fn grow_devices(&mut self, disk: usize) {
        self.devices.resize_with(disk + 1, DeviceMeasures::default);
    }

    fn stats_mut(&mut self, target: Target) -> &mut OpStats {
        self.device_mut(target.disk as usize)
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op)
    }

    /// Counters, histograms and samples back to zero; the limits stay.
    pub(super) fn clear(&mut self) {
        for device in &mut self.devices {
            device.clear();
        }
        self.dirty.clear();
        self.attribution.clear();
    }

    /// One `block_dirty_buffer` of `bytes` on `dev`.
    pub(super) fn dirty_buffer(&mut self, dev: u32, bytes: u64) {
        self.dirty.entry(dev).or_default().record(bytes);
    }

    /// The kernel's running per-device dirty-buffer totals; returns how
    /// many buffers are new since the last call.
    pub(super) fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) -> u64 {
        let mut new = 0;
        for (dev, now) in totals {
            let before = self.dirty_kernel.insert(*dev, *now).unwrap_or_default();
            let stats = self.dirty.entry(*dev).or_default();
            for (index, (now, before)) in now.by_size.iter().zip(before.by_size).enumerate() {
                let grown = now.saturating_sub(before);
                if grown > 0 {
                    stats.add(index, grown);
                    new += grown;
                }
            }
        }
        new
    }

    /// Counts one outcome where its account says: the accounting's one
    /// entry point. Inlined into each emit, where the outcome's variant is
    /// known, so only its arm remains.
    #[inline(always)]
    fn account(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Queued {
                io,
                sector,
                sectors,
                account,
                inherited,
                segments,
                ..
            } => self.count_queued(account, io, sector, u64::from(sectors), inherited, segments),
            Outcome::Split {
                at,
                account,
                cause,
                first_cut,
                ..
            } => {
                let first_cut = u64::from(first_cut);
                self.attribution.each(account.owners, |stats| {
                    stats.splits += 1;
                    stats.split_user_ios += first_cut;
                });
                let stats = self.stats_mut(account.target);
                stats.splits += 1;
                stats.split_user_ios += first_cut;
                stats.fragments += 1;
                stats.split_causes[cause.index()] += 1;
                stats.split_point_zeros = stats.split_point_zeros.min(at.trailing_zeros());
            }
            Outcome::Merged { account, .. } => {
                self.stats_mut(account.target).merges += 1;
                self.attribution
                    .each(account.owners, |stats| stats.merges += 1);
            }
            Outcome::Waited { account, waited_us } => {
                self.attribution.each(account.owners, |stats| {
                    stats.queue_to_issue_us.saturating_record(waited_us)
                });
                self.stats_mut(account.target)
                    .queue_to_issue_us
                    .saturating_record(waited_us);
            }
            Outcome::Issued {
                sector,
                sectors,
                ts_ns,
                account,
                ends,
                ..
            } => self.count_command(account, sector, sectors, ts_ns, ends),
            Outcome::ReachedDisk { account } => {
                self.stats_mut(account.target).disk_commands += 1;
            }
            Outcome::Requeued { account, .. } => {
                self.stats_mut(account.target).requeues += 1;
            }
            Outcome::Reissued {
                waited_ns,
                account,
                measured: true,
                ..
            } => {
                self.stats_mut(account.target)
                    .requeue_delay_us
                    .saturating_record(waited_ns / 1000);
            }
            Outcome::Completed {
                whole: true,
                latency_us: Some(latency_us),
                last_issue_ns,
                ts_ns,
                account,
                sectors,
                ..
            } => {
                let target = account.target;
                // A flush moves no bytes: the service model fits data commands.
                if sectors > 0 {
                    self.device_mut(target.disk as usize).service[op_index(target.op)].complete(
                        last_issue_ns,
                        ts_ns,
                        sectors,
                    );
                }
                self.stats_mut(target)
                    .issue_to_complete_us
                    .saturating_record(latency_us);
                self.attribution.each(account.owners, |stats| {
                    stats.issue_to_complete_us.saturating_record(latency_us)
                });
            }
            Outcome::Failed {
                account,
                error,
                start,
                end,
            } => {
                let stats = self.stats_mut(account.target);
                stats.failed_commands += 1;
                stats.add_errors(error, 1);
                stats.add_failed_sectors(start, end.saturating_sub(1).max(start));
            }
            Outcome::Finished {
                io,
                complete,
                failed,
                account,
                measured,
                queue_ns,
                fragments,
                commands,
                ts_ns,
                atomic,
            } => {
                self.end_stream_io(account.target, io);
                if !measured {
                    return;
                }
                if let Some(write) = atomic {
                    self.stats_mut(account.target).atomic.count(write);
                }
                if failed {
                    // Failed, not complete: it feeds no completion measure.
                    self.stats_mut(account.target).failed_user_ios += 1;
                    return;
                }
                if !complete {
                    return;
                }
                let latency_us = ts_ns.saturating_sub(queue_ns) / 1000;
                let stats = self.stats_mut(account.target);
                stats.fragments_per_io.record(u64::from(fragments));
                stats.commands_per_io.record(u64::from(commands));
                stats.queue_to_complete_us.saturating_record(latency_us);
                self.attribution.each(account.owners, |stats| {
                    stats.commands_per_io.saturating_record(u64::from(commands));
                    stats.queue_to_complete_us.saturating_record(latency_us);
                });
            }
            Outcome::FlushFinished {
                ts_ns,
                queue_ns,
                failed,
                account,
                measured: true,
            } => {
                let stats = self.stats_mut(account.target);
                if failed {
                    stats.failed_user_ios += 1;
                    return;
                }
                let latency_us = ts_ns.saturating_sub(queue_ns) / 1000;
                stats.fragments_per_io.record(1);
                stats.commands_per_io.record(1);
                stats.queue_to_complete_us.saturating_record(latency_us);
                self.attribution.each(account.owners, |stats| {
                    stats.commands_per_io.saturating_record(1);
                    stats.queue_to_complete_us.saturating_record(latency_us);
                });
            }
            Outcome::FlushFinished { .. }
            | Outcome::Reissued { .. }
            | Outcome::Completed { .. }
            | Outcome::Carries { .. }
            | Outcome::CommandDropped { .. }
            | Outcome::Dropped { .. } => {}
        }
    }

    fn count_queued(
        &mut self,
        account: Account,
        io: Option<IoId>,
        start: u64,
        sectors: u64,
        inherited: bool,
        segments: Option<u16>,
    ) {
        let bytes = sectors * SECTOR_BYTES;
        if !inherited {
            self.attribution.each(account.owners, |stats| {
                stats.user_ios += 1;
                stats.bytes += bytes;
            });
        }
        let target = account.target;
        let device = self.device_mut(target.disk as usize);
        let continues = segments.map(|_| device.stream_step(target, io, start, sectors));
        let stats = device
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op);
        stats.user_ios += 1;
        stats.fragments += 1;
        stats.bytes += bytes;
        stats.user_io_sectors.record(sectors);
        if let (Some(continues), Some(segments)) = (continues, segments) {
            stats.streams.record(continues, sectors, segments);
        }
    }

    /// A user I/O finished: a stream it was last of can no longer be continued.
    fn end_stream_io(&mut self, target: Target, io: IoId) {
        if let Some(device) = self.devices.get_mut(target.disk as usize) {
            let last = &mut device.last_queued[op_index(target.op)];
            if last.io == Some(io) {
                last.io = None;
            }
        }
    }

    /// A new command: the one place where a device's command count grows,
    /// so views that read [`Outcome::Issued`] count what the report counts.
    fn count_command(
        &mut self,
        account: Account,
        start: u64,
        sectors: u64,
        now_ns: u64,
        ends: Option<CommandEnds>,
    ) {
        self.attribution
            .each(account.owners, |stats| stats.commands += 1);
        let target = account.target;
        let device = self.device_mut(target.disk as usize);
        let limits = device.limits;
        let pbs = limits.pbs_sectors.max(1);
        let last = &mut device.last_issue[op_index(target.op)];
        let adjacent_unmerged = sectors > 0
            && ends.is_some_and(|ends| missed_merge(&limits, last, start, sectors, &ends));
        if let Some(ends) = ends.filter(|_| sectors > 0) {
            *last = LastIssue {
                end: start.saturating_add(sectors),
                sectors,
                issue_ns: now_ns,
                bios: ends.bios,
                last_io: ends.last_io,
                valid: true,
            };
        }
        let stats = device
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op);
        stats.commands += 1;
        if ends.is_none() && sectors > 0 {
            stats.commands_without_user_io += 1;
        }
        stats.command_sectors.record(sectors);
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
}
