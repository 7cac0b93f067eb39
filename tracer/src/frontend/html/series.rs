//! Time series for the HTML report, built from the engine's correlation
//! outcomes while a recording is replayed, so the page counts what the
//! report counts: a requeued command once, its latency from its last issue
//! to its last completion. Pure: outcomes in, grids out.

use std::collections::BTreeSet;

use tracer_common::{BlockAction, BlockEvent};

use crate::engine::outcome::Outcome;

/// Columns of every time plot.
pub const TIME_BINS: usize = 60;
/// Rows of the offset heatmap (sector ranges across the disk).
pub const OFFSET_ROWS: usize = 48;
/// Log2 latency rows: `[2^i, 2^(i+1))` microseconds, the last open-ended.
pub const LATENCY_ROWS: usize = 24;

/// One user I/O or command: when, where, how big.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Point {
    ts_ns: u64,
    dev: u32,
    sector: u64,
    sectors: u64,
    /// A user I/O remapped from an upper device's, or a command of a stacked
    /// device: counted where it came from or where it went, not here.
    again: bool,
}

/// Collects the points while the recording is replayed.
#[derive(Default)]
pub struct Collector {
    user_ios: Vec<Point>,
    commands: Vec<Point>,
    /// Devices that remapped I/O to a device below (dm, md, a partition):
    /// their commands are bios handed down, which the disks below carry
    /// again, so the totals leave them out.
    stacked: BTreeSet<u32>,
    /// (last issue time, issue→complete microseconds) of each measured command.
    latencies: Vec<(u64, u64)>,
}

impl Collector {
    /// A kernel event as the engine reads it: a remap says its source
    /// device is stacked on the one it names.
    pub fn see_event(&mut self, event: &BlockEvent) {
        if let Some(BlockAction::Remap { from_dev, .. } | BlockAction::RqRemap { from_dev, .. }) =
            event.action()
        {
            if from_dev != event.dev {
                self.stacked.insert(from_dev);
            }
        }
    }

    pub(crate) fn see(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Queued {
                dev,
                sector,
                sectors,
                ts_ns,
                inherited,
                ..
            } => self.user_ios.push(Point {
                ts_ns,
                dev,
                sector,
                sectors: u64::from(sectors),
                again: inherited,
            }),
            Outcome::Issued {
                dev,
                sector,
                sectors,
                ts_ns,
                ..
            } => self.commands.push(Point {
                ts_ns,
                dev,
                sector,
                sectors,
                // Known at the end, when every remap has been seen.
                again: false,
            }),
            Outcome::Completed {
                last_issue_ns,
                latency_us: Some(us),
                ..
            } => self.latencies.push((last_issue_ns, us)),
            _ => {}
        }
    }

    /// The grids, over the span of the events seen. `disk_sectors` gives a
    /// disk's size (kernel dev_t → sectors) for the offset heatmap's scale.
    pub fn finish(&self, disk_sectors: &dyn Fn(u32) -> Option<u64>) -> Series {
        let all = self.user_ios.iter().chain(&self.commands);
        let start_ns = all.clone().map(|p| p.ts_ns).min().unwrap_or(0);
        let end_ns = all.map(|p| p.ts_ns).max().unwrap_or(0);
        // At least 1 µs per bin so a single instant still has a width.
        let bin_ns = (end_ns - start_ns).div_ceil(TIME_BINS as u64).max(1000);
        let bin = |ts: u64| (((ts.saturating_sub(start_ns)) / bin_ns) as usize).min(TIME_BINS - 1);

        let mut user_ios_per_bin = vec![0u64; TIME_BINS];
        let mut user_ios = 0;
        for point in self.user_ios.iter().filter(|point| !point.again) {
            user_ios += 1;
            user_ios_per_bin[bin(point.ts_ns)] += 1;
        }
        let mut commands_per_bin = vec![0u64; TIME_BINS];
        let mut offsets: Vec<OffsetGrid> = Vec::new();
        let mut misaligned_4k = 0;
        let mut commands = 0;
        for point in &self.commands {
            // Each device's offsets are its own; the totals count a command
            // once, on the device at the bottom that carried it.
            if !self.stacked.contains(&point.dev) {
                commands += 1;
                commands_per_bin[bin(point.ts_ns)] += 1;
                if point.sector % 8 != 0 || point.sectors % 8 != 0 {
                    misaligned_4k += 1;
                }
            }
            let grid = match offsets.iter_mut().position(|g| g.dev == point.dev) {
                Some(at) => &mut offsets[at],
                None => {
                    let max_seen = self
                        .commands
                        .iter()
                        .filter(|p| p.dev == point.dev)
                        .map(|p| p.sector.saturating_add(p.sectors))
                        .max()
                        .unwrap_or(1);
                    offsets.push(OffsetGrid {
                        dev: point.dev,
                        sectors: disk_sectors(point.dev).unwrap_or(max_seen).max(1),
                        cells: vec![[0; OFFSET_ROWS]; TIME_BINS],
                    });
                    let last = offsets.len() - 1;
                    &mut offsets[last]
                }
            };
            let row = ((u128::from(point.sector) * OFFSET_ROWS as u128 / u128::from(grid.sectors))
                as usize)
                .min(OFFSET_ROWS - 1);
            grid.cells[bin(point.ts_ns)][row] += 1;
        }
        let mut latency = vec![[0u64; LATENCY_ROWS]; TIME_BINS];
        for &(issued, us) in &self.latencies {
            latency[bin(issued)][latency_row(us)] += 1;
        }
        Series {
            start_ns,
            bin_ns,
            user_ios_per_bin,
            commands_per_bin,
            latency,
            offsets,
            user_ios,
            commands,
            stacked_commands: self.commands.len() as u64 - commands,
            misaligned_4k_commands: misaligned_4k,
        }
    }
}

/// The log2 row of a latency in microseconds.
pub fn latency_row(us: u64) -> usize {
    (u64::BITS - us.max(1).leading_zeros() - 1).min(LATENCY_ROWS as u32 - 1) as usize
}

/// Commands per (time bin, sector row) on one disk.
#[derive(Clone, Debug, PartialEq)]
pub struct OffsetGrid {
    /// Kernel dev_t.
    pub dev: u32,
    /// The sector range the rows cover: `[0, sectors)`.
    pub sectors: u64,
    pub cells: Vec<[u64; OFFSET_ROWS]>,
}

/// What the time plots draw.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Timestamp of the first event; bins count from it.
    pub start_ns: u64,
    pub bin_ns: u64,
    pub user_ios_per_bin: Vec<u64>,
    pub commands_per_bin: Vec<u64>,
    /// Per time bin, commands per log2-microsecond row (by issue time).
    pub latency: Vec<[u64; LATENCY_ROWS]>,
    pub offsets: Vec<OffsetGrid>,
    /// User I/Os as submitted: those remapped from a stacked device's are
    /// that device's, counted once.
    pub user_ios: u64,
    /// Commands on the devices at the bottom of their stacks (the disks).
    pub commands: u64,
    /// Bios stacked devices handed down (their commands), not in `commands`.
    pub stacked_commands: u64,
    /// Commands whose start or length is not a multiple of 4 KiB.
    pub misaligned_4k_commands: u64,
}

impl Series {
    /// A bin's count as a rate per second.
    pub fn per_second(&self, count: u64) -> f64 {
        count as f64 * 1e9 / self.bin_ns as f64
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{BlockEvent, EventKind};

    use super::*;

    fn event(kind: EventKind, ts_ns: u64, sector: u64, nr_sector: u32) -> BlockEvent {
        let mut rwbs = [0; tracer_common::RWBS_BYTES];
        rwbs[0] = b'W';
        BlockEvent {
            ts_ns,
            sector,
            aux_sector: 0,
            dev: (7 << 20) | 1,
            aux_dev: 0,
            nr_sector,
            tgid: 1,
            rwbs,
            kind: kind as u8,
            ..BlockEvent::ZERO
        }
    }

    fn split(ts_ns: u64, sector: u64, at: u64) -> BlockEvent {
        BlockEvent {
            aux_sector: at,
            ..event(EventKind::Split, ts_ns, sector, 0)
        }
    }

    /// The events through a fresh engine, its outcomes into a collector.
    fn collect(events: &[BlockEvent]) -> Collector {
        let mut collector = Collector::default();
        for outcome in crate::engine::outcome::of_events(events) {
            collector.see(&outcome);
        }
        collector
    }

    #[test]
    fn bins_rates_latency_and_offsets() {
        // One 1 MiB write at t=0 split into two commands; the last event at 60 ms.
        let collector = collect(&[
            event(EventKind::Queue, 0, 0, 2048),
            split(500_000, 0, 1024),
            event(EventKind::Issue, 1_000_000, 0, 1024),
            event(EventKind::Issue, 1_000_000, 1024, 1024),
            event(EventKind::Complete, 1_100_000, 0, 1024),
            event(EventKind::Complete, 5_000_000, 1024, 1024),
            event(EventKind::Issue, 60_000_000, 2047, 1),
        ]);
        let series = collector.finish(&|_| Some(4096));
        assert_eq!(series.bin_ns, 1_000_000);
        assert_eq!(series.user_ios_per_bin.iter().sum::<u64>(), 1);
        assert_eq!(series.user_ios_per_bin[0], 1);
        assert_eq!(series.commands_per_bin[1], 2);
        assert_eq!(series.commands_per_bin[TIME_BINS - 1], 1);
        assert_eq!(series.per_second(2), 2000.0);
        // 100 µs → row 6 ([64,128)), 4000 µs → row 11 ([2048,4096)).
        assert_eq!(series.latency[1][6], 1);
        assert_eq!(series.latency[1][11], 1);
        assert_eq!(series.latency.iter().flatten().sum::<u64>(), 2);
        let grid = &series.offsets[0];
        assert_eq!(grid.sectors, 4096);
        assert_eq!(grid.cells[1][0], 1);
        assert_eq!(grid.cells[1][12], 1);
        assert_eq!(grid.cells[TIME_BINS - 1][23], 1);
        assert_eq!(series.misaligned_4k_commands, 1);
    }

    #[test]
    fn a_requeued_command_is_one_command_timed_from_its_last_issue() {
        let collector = collect(&[
            event(EventKind::Queue, 0, 0, 16),
            event(EventKind::Issue, 1_000, 0, 16),
            event(EventKind::Requeue, 2_000, 0, 16),
            event(EventKind::Issue, 2_002_000, 0, 16),
            // A partial completion does not end it.
            event(EventKind::Complete, 2_010_000, 0, 8),
            event(EventKind::Complete, 2_052_000, 8, 8),
        ]);
        let series = collector.finish(&|_| Some(4096));
        assert_eq!(series.commands, 1);
        assert_eq!(series.commands_per_bin.iter().sum::<u64>(), 1);
        // 50 µs from the re-issue → row 5 ([32,64)); one latency only.
        assert_eq!(series.latency.iter().flatten().sum::<u64>(), 1);
        assert_eq!(series.latency.iter().map(|row| row[5]).sum::<u64>(), 1);
    }

    #[test]
    fn latency_rows_are_log2_and_capped() {
        assert_eq!(latency_row(0), 0);
        assert_eq!(latency_row(1), 0);
        assert_eq!(latency_row(2), 1);
        assert_eq!(latency_row(1023), 9);
        assert_eq!(latency_row(u64::MAX), LATENCY_ROWS - 1);
    }

    #[test]
    fn extreme_sectors_stay_in_the_grid() {
        let collector = collect(&[
            event(EventKind::Issue, 10, u64::MAX, u32::MAX),
            event(EventKind::Complete, 5, u64::MAX, u32::MAX),
        ]);
        let series = collector.finish(&|_| None);
        assert_eq!(series.offsets[0].cells[0][OFFSET_ROWS - 1], 1);
    }

    #[test]
    fn no_events_gives_empty_grids() {
        let series = Collector::default().finish(&|_| None);
        assert_eq!(series.user_ios_per_bin, vec![0; TIME_BINS]);
        assert!(series.offsets.is_empty());
    }
}
