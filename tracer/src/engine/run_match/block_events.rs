//! The one place block events come in. The engine correlates the same
//! events itself; here they are read again, raw, for three facts only:
//! a write command issued, a write command requeued (to be issued again),
//! a write bio queued. Each has its own method, so another source of the
//! same facts can call them instead of [`RunMatcher::block_event`].

use tracer_common::{BlockEvent, EventKind};

use super::sector_match::DiskRange;
use super::{FdResolver, RunMatcher};

/// How far back a requeued command is looked for among the kept ones.
const REQUEUE_LOOKBACK: usize = 4096;

impl<R: FdResolver> RunMatcher<R> {
    /// Keeps write commands as issued (block_rq_issue) and write bios as
    /// queued (block_bio_queue); a requeued command (block_rq_requeue) is
    /// forgotten until its re-issue. Bio-based devices issue no requests:
    /// no command of theirs is kept.
    pub fn block_event(&mut self, event: &BlockEvent) {
        if !is_write(&event.rwbs) {
            return;
        }
        let range = DiskRange {
            disk: event.dev,
            sector: event.sector,
            nr_sector: event.nr_sector,
        };
        if event.kind == EventKind::Requeue as u8 {
            self.write_command_requeued(range);
        } else if event.kind == EventKind::Queue as u8 {
            self.write_bio_queued(range);
        } else if event.kind == EventKind::Issue as u8 {
            self.write_command_issued(range);
        }
    }

    /// A write command the device was sent (zero-length ones included).
    fn write_command_issued(&mut self, command: DiskRange) {
        self.sectors.keep_command(command);
    }

    /// A write command handed back to be issued again.
    fn write_command_requeued(&mut self, requeued: DiskRange) {
        // Its re-issue will be kept again: one command, not two. A partly
        // completed command is requeued with its remaining range. It was
        // issued at most a queue depth of commands ago.
        let end = requeued.end_sector();
        self.sectors
            .forget_recent_command(REQUEUE_LOOKBACK, |command| {
                command.disk == requeued.disk
                    && command.sector <= requeued.sector
                    && command.end_sector() == end
            });
    }

    /// A write bio queued on its disk (after partition remapping).
    fn write_bio_queued(&mut self, bio: DiskRange) {
        if bio.nr_sector == 0 {
            return;
        }
        self.sectors.keep_bio(bio);
    }
}

/// True for a write command: the op letter after an optional preflush `F`.
fn is_write(rwbs: &[u8; 8]) -> bool {
    let op = match rwbs {
        [b'F', next, ..] if *next != 0 => *next,
        [first, ..] => *first,
    };
    op == b'W'
}

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::{issue, write, OnePartition};
    use super::*;

    #[test]
    fn a_requeued_command_is_matched_once() {
        let mut matcher = RunMatcher::new(OnePartition);
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
    fn preflush_write_counts_as_write() {
        assert!(is_write(b"FWS\0\0\0\0\0"));
        assert!(is_write(b"WFS\0\0\0\0\0"));
        assert!(!is_write(b"F\0\0\0\0\0\0\0"));
        assert!(!is_write(b"RA\0\0\0\0\0\0"));
    }
}
