//! Joins a passthrough request's NVMe command (`nvme_setup_cmd`) to the
//! request's own issue, requeue and completion records, which carry no
//! range (`blk_rq_trace_sector` is 0 for `REQ_OP_DRV_*`). The command comes
//! first on the same CPU's ring, so the join needs no reordering: the
//! request's name (hardware queue and tag) keys it until its completion.

use std::collections::HashMap;

use tracer_common::{event_flags, BlockEvent, EventKind, NvmeCommand, RWBS_BYTES};

/// What a joined request becomes: the NVMe command's range in 512-byte
/// sectors and its op as the block layer would spell a block request's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ranged {
    sector: u64,
    nr_sector: u32,
    rwbs: [u8; RWBS_BYTES],
}

/// NVMe I/O command set opcodes (NVMe base specification, "Opcodes for
/// NVM Commands").
mod opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const VERIFY: u8 = 0x0c;
}

/// The rwbs a block request of the same op would carry, and whether the
/// command's `cdw10..12` hold a starting LBA and a block count.
fn spelled(code: u8) -> (&'static [u8], bool) {
    match code {
        opcode::WRITE => (b"W", true),
        opcode::READ | opcode::COMPARE | opcode::VERIFY => (b"R", true),
        opcode::WRITE_ZEROES => (b"WZ", true),
        opcode::WRITE_UNCORRECTABLE => (b"W", true),
        opcode::FLUSH => (b"F", false),
        opcode::DATASET_MANAGEMENT => (b"D", false),
        _ => (b"N", false),
    }
}

/// The pending commands of passthrough requests, by device and request.
#[derive(Debug, Default)]
pub struct PassthroughJoin {
    pending: HashMap<(u32, u64), Ranged>,
    /// Logical block size per namespace (`dev_t`), read from sysfs once.
    block_sizes: HashMap<u32, u32>,
}

/// Most commands kept waiting for their request's records: a request
/// whose completion was lost must not hold its entry for ever.
const MAX_PENDING: usize = 1 << 16;

impl PassthroughJoin {
    /// The NVMe command of the request `request` names (decoded from the
    /// same window as its issue record) on namespace `dev`.
    pub fn command(&mut self, request: &BlockEvent, command: &NvmeCommand) {
        let (letters, has_range) = spelled(command.opcode);
        let mut rwbs = [0u8; RWBS_BYTES];
        rwbs[..letters.len()].copy_from_slice(letters);
        let (sector, nr_sector) = match has_range {
            true => {
                let block = u64::from(self.block_size(request.dev) / 512).max(1);
                let lba = u64::from(command.cdw10) | (u64::from(command.cdw11) << 32);
                let blocks = u64::from(command.cdw12 & 0xffff) + 1;
                (lba * block, (blocks * block) as u32)
            }
            false => (0, 0),
        };
        if self.pending.len() >= MAX_PENDING {
            self.pending.clear();
        }
        self.pending.insert(
            (request.dev, request.aux_sector),
            Ranged {
                sector,
                nr_sector,
                rwbs,
            },
        );
    }

    /// Gives a passthrough request's issue, requeue or completion its
    /// command's range and op; others pass unchanged.
    pub fn apply(&mut self, event: &mut BlockEvent) {
        if event.rwbs[0] != b'N' || self.pending.is_empty() {
            return;
        }
        let kind = EventKind::from_u8(event.kind);
        if !matches!(
            kind,
            Some(EventKind::Issue | EventKind::Requeue | EventKind::Complete)
        ) {
            return;
        }
        let key = (event.dev, event.aux_sector);
        let ranged = match kind {
            Some(EventKind::Complete) => self.pending.remove(&key),
            _ => self.pending.get(&key).copied(),
        };
        let Some(ranged) = ranged else {
            return;
        };
        event.sector = ranged.sector;
        if kind != Some(EventKind::Complete) || ranged.nr_sector == 0 {
            event.nr_sector = ranged.nr_sector;
        }
        event.rwbs = ranged.rwbs;
        event.flags |= event_flags::PASSTHROUGH;
    }

    fn block_size(&mut self, dev: u32) -> u32 {
        *self.block_sizes.entry(dev).or_insert_with(|| {
            let id = crate::geometry::DevId::from_kernel(dev);
            std::fs::read_to_string(format!(
                "/sys/dev/block/{}:{}/queue/logical_block_size",
                id.major, id.minor
            ))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(512)
        })
    }

    #[cfg(test)]
    fn with_block_size(dev: u32, bytes: u32) -> PassthroughJoin {
        let mut join = PassthroughJoin::default();
        join.block_sizes.insert(dev, bytes);
        join
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: EventKind, dev: u32, request: u64) -> BlockEvent {
        let mut rwbs = [0u8; RWBS_BYTES];
        rwbs[0] = b'N';
        BlockEvent {
            kind: kind as u8,
            dev,
            aux_sector: request,
            rwbs,
            ..BlockEvent::ZERO
        }
    }

    fn write(lba: u64, blocks: u32) -> NvmeCommand {
        NvmeCommand {
            opcode: opcode::WRITE,
            cdw10: lba as u32,
            cdw11: (lba >> 32) as u32,
            cdw12: blocks - 1,
            ..NvmeCommand::default()
        }
    }

    #[test]
    fn a_passthrough_write_takes_its_commands_range_until_it_completes() {
        let dev = (259 << 20) | 1;
        let mut join = PassthroughJoin::with_block_size(dev, 4096);
        join.command(&record(EventKind::Issue, dev, 7), &write(1 << 33, 4));
        let mut issue = record(EventKind::Issue, dev, 7);
        join.apply(&mut issue);
        // 4 KiB blocks: LBA 2^33 is sector 2^36; 4 blocks are 32 sectors.
        assert_eq!((issue.sector, issue.nr_sector), (1 << 36, 32));
        assert_eq!(&issue.rwbs[..2], b"W\0");
        assert_ne!(issue.flags & event_flags::PASSTHROUGH, 0);
        let mut complete = record(EventKind::Complete, dev, 7);
        complete.nr_sector = 32;
        join.apply(&mut complete);
        assert_eq!((complete.sector, complete.nr_sector), (1 << 36, 32));
        // Completed: another request under the same tag is not this one.
        let mut later = record(EventKind::Issue, dev, 7);
        join.apply(&mut later);
        assert_eq!((later.sector, later.nr_sector, later.flags), (0, 0, 0));
    }

    #[test]
    fn another_request_or_device_is_not_joined() {
        let dev = (259 << 20) | 1;
        let mut join = PassthroughJoin::with_block_size(dev, 512);
        join.command(&record(EventKind::Issue, dev, 7), &write(100, 8));
        for (other_dev, request) in [(dev, 8), (dev + 1, 7)] {
            let mut issue = record(EventKind::Issue, other_dev, request);
            join.apply(&mut issue);
            assert_eq!((issue.sector, issue.flags), (0, 0));
        }
        let mut issue = record(EventKind::Issue, dev, 7);
        join.apply(&mut issue);
        assert_eq!((issue.sector, issue.nr_sector), (100, 8));
    }

    #[test]
    fn a_command_without_a_range_keeps_none_but_names_its_op() {
        let dev = (259 << 20) | 1;
        let mut join = PassthroughJoin::with_block_size(dev, 512);
        let flush = NvmeCommand {
            opcode: opcode::FLUSH,
            cdw10: 55,
            ..NvmeCommand::default()
        };
        join.command(&record(EventKind::Issue, dev, 3), &flush);
        let mut issue = record(EventKind::Issue, dev, 3);
        join.apply(&mut issue);
        assert_eq!((issue.sector, issue.nr_sector), (0, 0));
        assert_eq!(issue.rwbs[0], b'F');
        assert_ne!(issue.flags & event_flags::PASSTHROUGH, 0);
    }
}
