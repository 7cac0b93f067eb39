//! Where an event's numbers go (disk, partition, operation, origin) and the
//! operation an event is: the vocabulary the chain and the accounting share.

use tracer_common::BlockEvent;

use crate::model::Op;

/// "The whole disk, no partition."
pub(crate) const NO_PART: u32 = u32::MAX;

/// Where an I/O's numbers go: disk, partition, operation and origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) disk: u32,
    pub(crate) part: u32,
    pub(crate) op: Op,
    pub(crate) tracked: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            disk: 0,
            part: NO_PART,
            op: Op::Other,
            tracked: false,
        }
    }
}

/// The operation class from `rwbs`: a leading preflush `F` is skipped when an
/// R/W/D follows; `F` alone (or `FN`) is a flush.
pub fn op_from_rwbs(rwbs: &[u8]) -> Op {
    let mut letters = rwbs;
    if letters.first() == Some(&b'F') {
        match letters.get(1) {
            Some(b'R' | b'W' | b'D') => letters = &letters[1..],
            _ => return Op::Flush,
        }
    }
    match letters.first() {
        Some(b'R') => Op::Read,
        Some(b'W') => Op::Write,
        Some(b'D') => Op::Discard,
        _ => Op::Other,
    }
}

/// Whether `rwbs` marks an untorn write: `U` (REQ_ATOMIC) among the flag
/// letters after the operation, as the kernel prints it since 6.16 and the
/// BTF probes spell it on every kernel with the flag.
pub(crate) fn is_atomic(rwbs: &[u8]) -> bool {
    rwbs.iter()
        .skip(1)
        .take_while(|&&letter| letter != 0)
        .any(|&letter| letter == b'U')
}

/// The event's operation; an empty bio with a preflush is a flush, whatever follows.
pub(crate) fn op_of(event: &BlockEvent) -> Op {
    if event.nr_sector == 0 && event.rwbs[0] == b'F' {
        return Op::Flush;
    }
    op_from_rwbs(&event.rwbs)
}
