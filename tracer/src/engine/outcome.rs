//! What the correlation concluded, one typed outcome at a time.
//!
//! The engine is the one correlator: views that draw chains (the HTML time
//! series, the Perfetto timeline) read these outcomes instead of matching
//! raw events again on rules of their own, so every view counts a requeued
//! command once and ends a command at its last completion, as the report does.
//!
//! Outcomes are kept only when asked for ([`super::Engine::keep_outcomes`]);
//! the live path then pays one untaken branch per outcome.

use crate::model::Op;

use super::table::SlotRef;

/// A user I/O, unique for the whole trace (its slot and the slot's generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoId(pub u64);

impl IoId {
    pub(super) fn of(slot: SlotRef) -> IoId {
        IoId((u64::from(slot.index) << 32) | u64::from(slot.generation))
    }
}

/// A device command, numbered in issue order; a requeued command keeps its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u64);

/// Why a chain ended without its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Older than the engine's age limit.
    AgedOut,
    /// The in-flight table was full.
    Evicted,
    /// Its request was issued again: the completion will never come.
    CompletionLost,
    /// It was in flight when events were dropped (a full ring): the event it
    /// waited for may be one of them.
    RingDropped,
}

/// One step of a chain, in kernel event order. Sectors are absolute on the
/// device that `dev` names (kernel dev_t).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A user I/O was submitted (`block_bio_queue`). `io` is `None` for an
    /// empty bio (a flush), which is counted but not correlated, and when no
    /// room was left to follow it.
    Queued {
        io: Option<IoId>,
        dev: u32,
        sector: u64,
        sectors: u32,
        op: Op,
        ts_ns: u64,
    },
    /// The kernel cut a user I/O's fragment at `at` (`block_split`).
    Split {
        io: Option<IoId>,
        dev: u32,
        at: u64,
        ts_ns: u64,
    },
    /// A bio was merged into a pending request or bio.
    Merged { io: Option<IoId>, ts_ns: u64 },
    /// A new device command. A re-issue after a requeue is [`Outcome::Reissued`].
    Issued {
        command: CommandId,
        dev: u32,
        sector: u64,
        sectors: u64,
        op: Op,
        ts_ns: u64,
    },
    /// The command carries (part of) this user I/O; once per pair.
    Carries { command: CommandId, io: IoId },
    /// The driver handed the command back (`block_rq_requeue`).
    Requeued { command: CommandId, ts_ns: u64 },
    /// The requeued command was issued again after `waited_ns`.
    Reissued {
        command: CommandId,
        ts_ns: u64,
        waited_ns: u64,
    },
    /// A completion covered the command's sectors up to `done_to`. `whole`
    /// when that was its last sector; then `latency_us` is its
    /// issue→complete time from its last issue, when the report measured it
    /// (not across a reset, nor after lost events). `error` is the
    /// completion's negative errno, 0 when it succeeded.
    Completed {
        command: CommandId,
        ts_ns: u64,
        done_to: u64,
        whole: bool,
        last_issue_ns: u64,
        latency_us: Option<u64>,
        error: i32,
    },
    /// The command was given up without its completion.
    CommandDropped {
        command: CommandId,
        reason: DropReason,
    },
    /// The user I/O's last fragment ended; `complete` is false when an event
    /// of its chain was missed or dropped, `failed` when a command carrying
    /// part of it completed with an error.
    Finished {
        io: IoId,
        ts_ns: u64,
        complete: bool,
        failed: bool,
    },
    /// A fragment of the user I/O was given up (counted once per user I/O).
    Dropped { io: IoId, reason: DropReason },
}
