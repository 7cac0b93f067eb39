//! The one place block I/O comes in: the engine's correlation outcomes,
//! not raw events, so `run` counts the commands the report counts (a
//! requeued command once, a flush as no write). Two facts are kept: a
//! write command issued, and a write bio queued.

use super::sector_match::DiskRange;
use super::{FdResolver, RunMatcher};
use crate::engine::outcome::Outcome;
use crate::model::Op;

impl<R: FdResolver> RunMatcher<R> {
    /// Keeps write commands as issued and write bios as queued, by the
    /// engine's word: a re-issue after a requeue is no new command, and on
    /// a bio-based device each bio the engine counts as a command is kept.
    pub(crate) fn outcome(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Issued {
                dev,
                sector,
                sectors,
                op: Op::Write,
                ts_ns,
                ..
            } => self.sectors.keep_command(DiskRange {
                disk: dev,
                sector,
                nr_sector: u32::try_from(sectors).unwrap_or(u32::MAX),
                ts_ns,
            }),
            Outcome::Queued {
                dev,
                sector,
                sectors,
                op: Op::Write,
                ts_ns,
                ..
            } if sectors > 0 => self.sectors.keep_bio(DiskRange {
                disk: dev,
                sector,
                nr_sector: sectors,
                ts_ns,
            }),
            Outcome::Finished {
                atomic: Some(write),
                queue_ns,
                ..
            } => self.sectors.keep_atomic(write, queue_ns),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{BlockEvent, EventKind};

    use super::super::test_fixtures::{issue, write, OnePartition, Traced};

    #[test]
    fn a_requeued_command_is_matched_once() {
        let mut matcher = Traced::new(OnePartition);
        matcher.process_event(&write(3, 0, 1 << 20));
        // A 2048-sector write split 2032 + 16; the tail requeued, then issued again.
        matcher.block_event(&issue(1000, 2032));
        matcher.block_event(&issue(3032, 16));
        matcher.block_event(&BlockEvent {
            kind: EventKind::Requeue as u8,
            ..issue(3032, 16)
        });
        matcher.block_event(&issue(3032, 16));
        let matched = matcher.match_writes(0);
        assert_eq!(matched.commands_per_write.max(), 2);
        assert_eq!(matched.writes_per_command.len(), 2);
    }

    #[test]
    fn preflush_writes_are_writes_and_empty_flushes_are_not() {
        let mut matcher = Traced::new(OnePartition);
        matcher.process_event(&write(3, 0, 4096));
        matcher.block_event(&BlockEvent {
            rwbs: *b"FWS\0\0\0\0\0",
            ..issue(1000, 8)
        });
        // An empty preflush inside the write's range carries none of its data.
        matcher.block_event(&BlockEvent {
            rwbs: *b"FWS\0\0\0\0\0",
            ..issue(1004, 0)
        });
        let matched = matcher.match_writes(0);
        assert_eq!(matched.writes_per_command.len(), 1);
        assert_eq!(matched.commands_per_write.max(), 1);
    }
}
