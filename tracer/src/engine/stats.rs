//! Counters and histograms of one (disk or partition, origin, operation), and
//! their conversion into the report model.

use std::borrow::Cow;
use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::outcome::{AtomicFate, AtomicWrite};
use super::split::SplitCause;
use super::streams::StreamSizes;
use crate::blk::SECTOR_BYTES;
use crate::model::{AtomicMiss, AtomicWrites, Bucket, Distribution, Measures, Op, OpMeasures};

pub use super::histogram::new_histogram;

/// A histogram that holds a run of equal values and records the run at once
/// when a different value comes. Sizes and counts per I/O repeat one value
/// almost always (8 sectors, 1 fragment, 1 command), and hdrhistogram's record
/// was the consumer's largest single symbol. No `Deref`: every reader goes
/// through [`RunHistogram::histogram`], which adds the held run.
pub struct RunHistogram {
    recorded: Histogram<u64>,
    held_value: u64,
    held_count: u64,
}

impl Default for RunHistogram {
    fn default() -> Self {
        RunHistogram {
            recorded: new_histogram(),
            held_value: 0,
            held_count: 0,
        }
    }
}

impl RunHistogram {
    #[inline]
    pub fn record(&mut self, value: u64) {
        if value == self.held_value {
            self.held_count += 1;
        } else {
            self.flush();
            self.held_value = value;
            self.held_count = 1;
        }
    }

    fn flush(&mut self) {
        if self.held_count != 0 {
            self.recorded
                .saturating_record_n(self.held_value, self.held_count);
            self.held_count = 0;
        }
    }

    /// Everything recorded, the held run included.
    pub fn histogram(&self) -> Cow<'_, Histogram<u64>> {
        if self.held_count == 0 {
            return Cow::Borrowed(&self.recorded);
        }
        let mut whole = self.recorded.clone();
        whole.saturating_record_n(self.held_value, self.held_count);
        Cow::Owned(whole)
    }

    pub fn len(&self) -> u64 {
        self.recorded.len() + self.held_count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `other` (its held run too) into `self`.
    pub fn absorb(&mut self, other: &RunHistogram) {
        self.flush();
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.recorded.add(&other.recorded);
        if other.held_count != 0 {
            self.recorded
                .saturating_record_n(other.held_value, other.held_count);
        }
    }
}

pub const fn op_index(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Discard => 2,
        Op::Flush => 3,
        Op::Other => 4,
    }
}

pub const OP_COUNT: usize = Op::ALL.len();

/// Everything measured for one operation class on one disk or partition.
pub struct OpStats {
    pub user_ios: u64,
    pub fragments: u64,
    pub commands: u64,
    /// Commands that carried no traced bio (see [`OpMeasures`]).
    pub commands_without_user_io: u64,
    /// Stacked devices: commands on the disks below that carried this
    /// device's user I/Os (0 on a disk, whose commands are its own).
    pub disk_commands: u64,
    pub bytes: u64,
    pub splits: u64,
    /// User I/Os cut at least once (a user I/O split twice counts once).
    pub split_user_ios: u64,
    pub merges: u64,
    pub misaligned_pbs: u64,
    pub misaligned_4k: u64,
    pub split_causes: [u64; SplitCause::COUNT],
    /// The fewest trailing zero bits of any split point (64: none yet): every
    /// cut fell on a multiple of `1 << split_point_zeros` sectors.
    pub split_point_zeros: u32,
    /// Commands adjacent to the previous command of the same op on the same
    /// disk, both far below `max_sectors`, whose bios were queued before the
    /// previous one was issued: merges that could have happened and did not.
    pub adjacent_unmerged: u64,
    /// User I/O size, in sectors.
    pub user_io_sectors: RunHistogram,
    /// Command size, in sectors.
    pub command_sectors: RunHistogram,
    pub fragments_per_io: RunHistogram,
    pub commands_per_io: RunHistogram,
    pub queue_to_complete_us: Histogram<u64>,
    /// From block_bio_queue to the first command carrying the user I/O (Q2D).
    pub queue_to_issue_us: Histogram<u64>,
    pub issue_to_complete_us: Histogram<u64>,
    /// Sizes of mergeable runs of user I/Os, replayed by `what_if`.
    pub streams: StreamSizes,
    /// Commands the driver gave back to be issued again (block_rq_requeue).
    pub requeues: u64,
    /// From a requeue to the command's next issue.
    pub requeue_delay_us: Histogram<u64>,
    /// Commands that completed with an error status.
    pub failed_commands: u64,
    /// User I/Os with at least one failed fragment.
    pub failed_user_ios: u64,
    /// Failed commands by (negative) errno; short, grown only on failure.
    pub errors: Vec<(i32, u64)>,
    /// Lowest first and highest last sector of the failed commands; set only on failure.
    pub failed_sectors: Option<(u64, u64)>,
    /// Untorn (atomic) writes, proven one by one.
    pub atomic: AtomicTally,
}

/// Untorn writes: how many left the stack as one command of their own range,
/// and the first few that did not, by sector.
#[derive(Clone, Debug, Default)]
pub struct AtomicTally {
    pub proven: u64,
    /// By [`AtomicFate`] other than `OneCommand`, in its declaration order.
    pub not_proven: [u64; AtomicTally::REASONS.len()],
    /// Smallest and largest write, sectors; set by the first one.
    pub sizes: Option<(u32, u32)>,
    /// The first writes not proven: grown only then, and bounded.
    pub(crate) misses: Vec<AtomicWrite>,
}

impl AtomicTally {
    pub(crate) const REASONS: [AtomicFate; 4] = [
        AtomicFate::Failed,
        AtomicFate::Split,
        AtomicFate::SharedCommand,
        AtomicFate::Unfollowed,
    ];
    /// Writes not proven that are named one by one.
    pub const MISSES_KEPT: usize = 16;

    pub(crate) fn count(&mut self, write: AtomicWrite) {
        let (low, high) = self.sizes.unwrap_or((write.sectors, write.sectors));
        self.sizes = Some((low.min(write.sectors), high.max(write.sectors)));
        match Self::REASONS
            .iter()
            .position(|&reason| reason == write.fate)
        {
            None => self.proven += 1,
            Some(at) => {
                self.not_proven[at] += 1;
                if self.misses.len() < Self::MISSES_KEPT {
                    self.misses.push(write);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_none()
    }

    fn absorb(&mut self, other: &AtomicTally) {
        self.proven += other.proven;
        for (mine, theirs) in self.not_proven.iter_mut().zip(other.not_proven) {
            *mine += theirs;
        }
        if let Some((low, high)) = other.sizes {
            let (mine_low, mine_high) = self.sizes.unwrap_or((low, high));
            self.sizes = Some((mine_low.min(low), mine_high.max(high)));
        }
        let room = Self::MISSES_KEPT.saturating_sub(self.misses.len());
        self.misses.extend(other.misses.iter().take(room).copied());
    }

    pub(crate) fn to_model(&self) -> Option<AtomicWrites> {
        let (smallest, largest) = self.sizes?;
        Some(AtomicWrites {
            proven: self.proven,
            not_proven: self.not_proven.iter().sum(),
            reasons: Self::REASONS
                .iter()
                .zip(self.not_proven)
                .filter(|(_, count)| *count > 0)
                .map(|(reason, count)| (reason.name().to_string(), count))
                .collect(),
            smallest_bytes: u64::from(smallest) * SECTOR_BYTES,
            largest_bytes: u64::from(largest) * SECTOR_BYTES,
            not_proven_writes: self
                .misses
                .iter()
                .map(|write| AtomicMiss {
                    sector: write.sector,
                    bytes: u64::from(write.sectors) * SECTOR_BYTES,
                    reason: write.fate.name().to_string(),
                })
                .collect(),
        })
    }
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            user_ios: 0,
            fragments: 0,
            commands: 0,
            commands_without_user_io: 0,
            disk_commands: 0,
            bytes: 0,
            splits: 0,
            split_user_ios: 0,
            merges: 0,
            misaligned_pbs: 0,
            misaligned_4k: 0,
            split_causes: [0; SplitCause::COUNT],
            split_point_zeros: 64,
            adjacent_unmerged: 0,
            user_io_sectors: RunHistogram::default(),
            command_sectors: RunHistogram::default(),
            fragments_per_io: RunHistogram::default(),
            commands_per_io: RunHistogram::default(),
            queue_to_complete_us: new_histogram(),
            queue_to_issue_us: new_histogram(),
            issue_to_complete_us: new_histogram(),
            streams: StreamSizes::default(),
            requeues: 0,
            requeue_delay_us: new_histogram(),
            failed_commands: 0,
            failed_user_ios: 0,
            errors: Vec::new(),
            failed_sectors: None,
            atomic: AtomicTally::default(),
        }
    }
}

impl OpStats {
    /// Adds `other` into `self` (merging partitions or origins for a report).
    pub fn absorb(&mut self, other: &OpStats) {
        self.split_point_zeros = self.split_point_zeros.min(other.split_point_zeros);
        self.user_ios += other.user_ios;
        self.fragments += other.fragments;
        self.commands += other.commands;
        self.commands_without_user_io += other.commands_without_user_io;
        self.disk_commands += other.disk_commands;
        self.bytes += other.bytes;
        self.splits += other.splits;
        self.split_user_ios += other.split_user_ios;
        self.merges += other.merges;
        self.misaligned_pbs += other.misaligned_pbs;
        self.misaligned_4k += other.misaligned_4k;
        for (mine, theirs) in self.split_causes.iter_mut().zip(other.split_causes) {
            *mine += theirs;
        }
        self.adjacent_unmerged += other.adjacent_unmerged;
        // Same bounds on both sides, so adding cannot fail.
        self.user_io_sectors.absorb(&other.user_io_sectors);
        self.command_sectors.absorb(&other.command_sectors);
        self.fragments_per_io.absorb(&other.fragments_per_io);
        self.commands_per_io.absorb(&other.commands_per_io);
        let _ = self.queue_to_complete_us.add(&other.queue_to_complete_us);
        let _ = self.queue_to_issue_us.add(&other.queue_to_issue_us);
        let _ = self.issue_to_complete_us.add(&other.issue_to_complete_us);
        self.streams.absorb(&other.streams);
        self.requeues += other.requeues;
        let _ = self.requeue_delay_us.add(&other.requeue_delay_us);
        self.failed_commands += other.failed_commands;
        self.failed_user_ios += other.failed_user_ios;
        for &(error, count) in &other.errors {
            self.add_errors(error, count);
        }
        if let Some((first, last)) = other.failed_sectors {
            self.add_failed_sectors(first, last);
        }
        self.atomic.absorb(&other.atomic);
    }

    /// Counts `count` failed commands with `error`.
    pub fn add_errors(&mut self, error: i32, count: u64) {
        match self.errors.iter_mut().find(|(seen, _)| *seen == error) {
            Some((_, total)) => *total += count,
            None => self.errors.push((error, count)),
        }
    }

    /// Widens the failed sector range to `first..=last`.
    pub fn add_failed_sectors(&mut self, first: u64, last: u64) {
        let (low, high) = self.failed_sectors.unwrap_or((first, last));
        self.failed_sectors = Some((low.min(first), high.max(last)));
    }

    pub fn to_model(&self) -> OpMeasures {
        let split_causes: BTreeMap<SplitCause, u64> = SplitCause::ALL
            .iter()
            .filter(|cause| self.split_causes[cause.index()] != 0)
            .map(|&cause| (cause, self.split_causes[cause.index()]))
            .collect();
        OpMeasures {
            user_ios: self.user_ios,
            fragments: self.fragments,
            commands: self.commands,
            commands_without_user_io: self.commands_without_user_io,
            disk_commands: self.disk_commands,
            bytes: self.bytes,
            splits: self.splits,
            split_user_ios: self.split_user_ios,
            merges: self.merges,
            amplification: crate::model::ratio(
                self.commands - self.commands_without_user_io,
                self.user_ios,
            ),
            misaligned_pbs_commands: self.misaligned_pbs,
            misaligned_4k_commands: self.misaligned_4k,
            split_causes,
            user_io_size: distribution(&self.user_io_sectors.histogram(), SECTOR_BYTES),
            command_size: distribution(&self.command_sectors.histogram(), SECTOR_BYTES),
            fragments_per_io: distribution(&self.fragments_per_io.histogram(), 1),
            commands_per_io: distribution(&self.commands_per_io.histogram(), 1),
            queue_to_complete_us: distribution(&self.queue_to_complete_us, 1),
            queue_to_issue_us: distribution(&self.queue_to_issue_us, 1),
            issue_to_complete_us: distribution(&self.issue_to_complete_us, 1),
            dominant: crate::model::Dominant::of(
                &distribution(&self.queue_to_issue_us, 1),
                &distribution(&self.issue_to_complete_us, 1),
            ),
            requeues: self.requeues,
            requeue_delay_us: distribution(&self.requeue_delay_us, 1),
            failed_commands: self.failed_commands,
            failed_user_ios: self.failed_user_ios,
            errors: self
                .errors
                .iter()
                .map(|&(error, count)| (crate::blk::errno_name(error), count))
                .collect(),
            atomic_writes: self.atomic.to_model(),
        }
    }

    /// The most common split cause, if any split was seen.
    pub fn dominant_cause(&self) -> Option<SplitCause> {
        SplitCause::ALL
            .iter()
            .copied()
            .filter(|cause| self.split_causes[cause.index()] != 0)
            .max_by_key(|cause| {
                (
                    self.split_causes[cause.index()],
                    std::cmp::Reverse(cause.index()),
                )
            })
    }

    pub fn is_empty(&self) -> bool {
        self.user_ios == 0
            && self.commands == 0
            && self.splits == 0
            && self.merges == 0
            && self.requeues == 0
            && self.failed_commands == 0
    }
}

/// Stats of one block device (a disk's own traffic, or a partition's), per origin and op.
#[derive(Default)]
pub struct DeviceStats {
    /// `[tracked as usize][op_index(op)]`, allocated on first use.
    slots: [[Option<Box<OpStats>>; OP_COUNT]; 2],
}

impl DeviceStats {
    pub fn get_mut(&mut self, tracked: bool, op: Op) -> &mut OpStats {
        self.slots[usize::from(tracked)][op_index(op)].get_or_insert_with(Box::default)
    }

    pub fn get(&self, tracked: bool, op: Op) -> Option<&OpStats> {
        self.slots[usize::from(tracked)][op_index(op)].as_deref()
    }

    pub fn clear(&mut self) {
        *self = DeviceStats::default();
    }

    /// Adds this device's stats of the selected origins into `into`, per op.
    pub fn collect_into(&self, origins: &[bool], into: &mut [Option<OpStats>; OP_COUNT]) {
        for &tracked in origins {
            for op in Op::ALL {
                if let Some(stats) = self.get(tracked, op) {
                    into[op_index(op)]
                        .get_or_insert_with(OpStats::default)
                        .absorb(stats);
                }
            }
        }
    }
}

pub const ALL_ORIGINS: [bool; 2] = [false, true];

/// Report measures from per-op stats, leaving out ops with no traffic.
pub fn measures(per_op: &[Option<OpStats>; OP_COUNT]) -> Measures {
    let ops = Op::ALL
        .iter()
        .filter_map(|&op| {
            per_op[op_index(op)]
                .as_ref()
                .filter(|stats| !stats.is_empty())
                .map(|stats| (op, stats.to_model()))
        })
        .collect();
    Measures {
        ops,
        ..Measures::default()
    }
}

/// Summary of a histogram, values multiplied by `scale` (sectors → bytes).
pub fn distribution(histogram: &Histogram<u64>, scale: u64) -> Distribution {
    if histogram.is_empty() {
        return Distribution::default();
    }
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for step in histogram.iter_recorded() {
        let value = histogram
            .lowest_equivalent(step.value_iterated_to())
            .saturating_mul(scale);
        let low = if value == 0 {
            0
        } else {
            1u64 << (63 - value.leading_zeros())
        };
        *buckets.entry(low).or_default() += step.count_at_value();
    }
    Distribution {
        count: histogram.len(),
        min: histogram.min().saturating_mul(scale),
        max: histogram
            .lowest_equivalent(histogram.max())
            .saturating_mul(scale),
        mean: histogram.mean() * scale as f64,
        p50: quantile(histogram, 0.5).saturating_mul(scale),
        p90: quantile(histogram, 0.9).saturating_mul(scale),
        p99: quantile(histogram, 0.99).saturating_mul(scale),
        buckets: buckets
            .into_iter()
            .map(|(low, count)| Bucket { low, count })
            .collect(),
    }
}

/// The `q` quantile of a histogram of sectors, in bytes (low end of its bucket).
pub fn quantile_bytes(sectors: &RunHistogram, q: f64) -> u64 {
    let sectors = sectors.histogram();
    if sectors.is_empty() {
        return 0;
    }
    quantile(&sectors, q) * SECTOR_BYTES
}

/// The value at `q`, reported as the low end of its bucket so exact values
/// (sizes that are multiples of the resolution) come back unchanged.
fn quantile(histogram: &Histogram<u64>, q: f64) -> u64 {
    histogram.lowest_equivalent(histogram.value_at_quantile(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_of_exact_sizes() {
        let mut histogram = new_histogram();
        for _ in 0..90 {
            histogram.saturating_record(8);
        }
        for _ in 0..10 {
            histogram.saturating_record(2040);
        }
        let summary = distribution(&histogram, SECTOR_BYTES);
        assert_eq!(summary.count, 100);
        assert_eq!(summary.min, 4096);
        assert_eq!(summary.max, 2040 * 512);
        assert_eq!(summary.p50, 4096);
        assert_eq!(summary.p99, 2040 * 512);
        let expected_mean = (90.0 * 4096.0 + 10.0 * 2040.0 * 512.0) / 100.0;
        // hdrhistogram averages bucket midpoints: within its 1% resolution.
        assert!((summary.mean - expected_mean).abs() < expected_mean / 100.0);
        assert_eq!(
            summary.buckets,
            vec![
                Bucket {
                    low: 4096,
                    count: 90
                },
                Bucket {
                    low: 524288,
                    count: 10
                }
            ]
        );
    }

    #[test]
    fn empty_histogram_is_default_and_zero_lands_in_bucket_zero() {
        assert_eq!(distribution(&new_histogram(), 1), Distribution::default());
        let mut histogram = new_histogram();
        histogram.saturating_record(0);
        histogram.saturating_record(1);
        let summary = distribution(&histogram, 1);
        assert_eq!(
            summary.buckets,
            vec![Bucket { low: 0, count: 1 }, Bucket { low: 1, count: 1 }]
        );
        assert_eq!(summary.min, 0);
    }

    #[test]
    fn a_run_histogram_counts_its_held_run_everywhere_it_is_read() {
        let mut sizes = RunHistogram::default();
        assert!(sizes.is_empty());
        for value in [8, 8, 8, 16, 16, 8, 0] {
            sizes.record(value);
        }
        // The last value (0) is still held, not yet in `recorded`.
        assert_eq!(sizes.len(), 7);
        let whole = sizes.histogram();
        assert_eq!(whole.len(), 7);
        assert_eq!(whole.count_at(8), 4);
        assert_eq!(whole.count_at(16), 2);
        assert_eq!(whole.count_at(0), 1);
        let mut other = RunHistogram::default();
        other.record(16);
        other.record(16);
        sizes.absorb(&other);
        let whole = sizes.histogram();
        assert_eq!(whole.len(), 9);
        assert_eq!(whole.count_at(16), 4);
        assert_eq!(whole.count_at(0), 1);
        assert_eq!(quantile_bytes(&sizes, 0.5), 8 * SECTOR_BYTES);
        assert_eq!(quantile_bytes(&RunHistogram::default(), 0.5), 0);
    }

    #[test]
    fn absorb_adds_counts_and_histograms() {
        let mut left = OpStats {
            user_ios: 2,
            commands: 1,
            ..OpStats::default()
        };
        left.split_causes[SplitCause::PhysicalBlock.index()] = 3;
        left.user_io_sectors.record(8);
        let mut right = OpStats {
            user_ios: 5,
            ..OpStats::default()
        };
        right.split_causes[SplitCause::MaxSectors.index()] = 4;
        right.user_io_sectors.record(16);
        left.absorb(&right);
        assert_eq!(left.user_ios, 7);
        assert_eq!(left.user_io_sectors.len(), 2);
        assert_eq!(left.dominant_cause(), Some(SplitCause::MaxSectors));
        let model = left.to_model();
        assert_eq!(model.split_causes.get(&SplitCause::PhysicalBlock), Some(&3));
        assert_eq!(model.split_causes.len(), 2);
        assert!((model.amplification - 1.0 / 7.0).abs() < 1e-12);
    }
}
