//! Passthrough commands (`REQ_OP_DRV_*`: io_uring `URING_CMD` on an NVMe
//! generic device, nvme-cli, SCSI generic): issued per device and op, with
//! the range their NVMe command gave them, or counted apart as commands whose
//! range the trace does not know. Never a command at sector 0 of length 0.

use std::collections::BTreeMap;

use tracer_common::{event_flags, BlockEvent};

use crate::model::PassthroughReport;

#[derive(Debug, Default)]
pub(super) struct PassthroughTally {
    by_device: BTreeMap<u32, BTreeMap<&'static str, PassthroughReport>>,
}

/// What a passthrough issue's `rwbs` says its op was (`N`: no NVMe command
/// joined, or one with an op the block layer has no letter for).
fn op_name(event: &BlockEvent) -> &'static str {
    if event.flags & event_flags::PASSTHROUGH == 0 {
        return "unknown";
    }
    match (event.rwbs[0], event.rwbs[1]) {
        (b'W', b'Z') => "write_zeroes",
        (b'W', _) => "write",
        (b'R', _) => "read",
        (b'F', _) => "flush",
        (b'D', _) => "discard",
        _ => "other",
    }
}

impl PassthroughTally {
    /// Whether an issue is of a passthrough command: joined to its NVMe
    /// command, or spelled `N` with no range as the block tracepoints give it.
    pub(super) fn is_passthrough(event: &BlockEvent) -> bool {
        event.flags & event_flags::PASSTHROUGH != 0
            || (event.rwbs[0] == b'N' && event.nr_sector == 0)
    }

    pub(super) fn issue(&mut self, event: &BlockEvent) {
        let op = op_name(event);
        let entry = self
            .by_device
            .entry(event.dev)
            .or_default()
            .entry(op)
            .or_insert_with(|| PassthroughReport {
                op: op.to_string(),
                commands: 0,
                with_range: 0,
                sectors: 0,
                first_sector: u64::MAX,
                end_sector: 0,
            });
        entry.commands += 1;
        if event.nr_sector > 0 {
            entry.with_range += 1;
            entry.sectors += u64::from(event.nr_sector);
            entry.first_sector = entry.first_sector.min(event.sector);
            entry.end_sector = entry
                .end_sector
                .max(event.sector + u64::from(event.nr_sector));
        }
    }

    pub(super) fn clear(&mut self) {
        self.by_device.clear();
    }

    /// The passthrough commands issued to `dev` (kernel `dev_t`), by op.
    pub(super) fn on(&self, dev: u32) -> Vec<PassthroughReport> {
        self.by_device
            .get(&dev)
            .map(|ops| {
                ops.values()
                    .map(|report| PassthroughReport {
                        first_sector: match report.with_range {
                            0 => 0,
                            _ => report.first_sector,
                        },
                        ..report.clone()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::{EventKind, RWBS_BYTES};

    fn issue(dev: u32, rwbs: &[u8], sector: u64, nr_sector: u32, flags: u8) -> BlockEvent {
        let mut letters = [0u8; RWBS_BYTES];
        letters[..rwbs.len()].copy_from_slice(rwbs);
        BlockEvent {
            kind: EventKind::Issue as u8,
            dev,
            sector,
            nr_sector,
            rwbs: letters,
            flags,
            ..BlockEvent::ZERO
        }
    }

    #[test]
    fn joined_commands_count_with_their_ranges_and_unjoined_ones_apart() {
        let mut tally = PassthroughTally::default();
        let joined = [
            issue(1, b"W", 2048, 8, event_flags::PASSTHROUGH),
            issue(1, b"W", 4096, 16, event_flags::PASSTHROUGH),
            issue(1, b"N", 0, 0, 0),
        ];
        for event in &joined {
            assert!(PassthroughTally::is_passthrough(event));
            tally.issue(event);
        }
        assert!(!PassthroughTally::is_passthrough(&issue(1, b"W", 8, 8, 0)));
        let ops = tally.on(1);
        let write = ops.iter().find(|op| op.op == "write").unwrap();
        assert_eq!(
            (write.commands, write.with_range, write.sectors),
            (2, 2, 24)
        );
        assert_eq!((write.first_sector, write.end_sector), (2048, 4112));
        let unknown = ops.iter().find(|op| op.op == "unknown").unwrap();
        assert_eq!(
            (unknown.commands, unknown.with_range, unknown.first_sector),
            (1, 0, 0)
        );
        assert!(tally.on(2).is_empty());
    }
}
