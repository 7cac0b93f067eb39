//! The accounting: every counter, histogram, service sample, owner's
//! measure and what-if stream grows here, from the correlation's
//! [`Outcome`]s and nothing else. The handlers decide what happened; this
//! decides what it counts for.

use super::devices::LastIssue;
use super::outcome::{Account, CommandEnds, Outcome, StreamStep};
use super::split::SplitLimits;
use super::stats::{op_index, OpStats};
use super::target::Target;
use super::Engine;
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

impl Engine {
    fn stats_mut(&mut self, target: Target) -> &mut OpStats {
        self.devices[target.disk as usize]
            .stats_mut(target.part)
            .get_mut(target.tracked, target.op)
    }

    /// Counts one outcome where its account says. Inlined into each emit,
    /// where the outcome's variant is known, so only its arm remains.
    #[inline(always)]
    pub(super) fn account(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Queued {
                sectors,
                account,
                inherited,
                stream,
                ..
            } => self.count_queued(account, u64::from(sectors), inherited, stream),
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
                self.devices[target.disk as usize].service[op_index(target.op)].complete(
                    last_issue_ns,
                    ts_ns,
                    sectors,
                );
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
                complete,
                failed,
                account,
                measured: true,
                queue_ns,
                fragments,
                commands,
                ts_ns,
                ..
            } => {
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
            Outcome::Reissued { .. }
            | Outcome::Completed { .. }
            | Outcome::Finished { .. }
            | Outcome::Carries { .. }
            | Outcome::CommandDropped { .. }
            | Outcome::Dropped { .. } => {}
        }
    }

    fn count_queued(
        &mut self,
        account: Account,
        sectors: u64,
        inherited: bool,
        stream: Option<StreamStep>,
    ) {
        let bytes = sectors * SECTOR_BYTES;
        if !inherited {
            self.attribution.each(account.owners, |stats| {
                stats.user_ios += 1;
                stats.bytes += bytes;
            });
        }
        let stats = self.stats_mut(account.target);
        stats.user_ios += 1;
        stats.fragments += 1;
        stats.bytes += bytes;
        stats.user_io_sectors.record(sectors);
        if let Some(step) = stream {
            stats.streams.record(step.continues, sectors, step.segments);
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
        let device = &mut self.devices[target.disk as usize];
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
