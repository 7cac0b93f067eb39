//! What the correlation concluded, one typed outcome at a time.
//!
//! The engine is the one correlator: views that draw chains (the HTML time
//! series, the Perfetto timeline) read these outcomes instead of matching
//! raw events again on rules of their own, so every view counts a requeued
//! command once and ends a command at its last completion, as the report does.
//!
//! The accounting is the first reader of every outcome
//! (`super::accounting`): devices' counters and histograms, attribution
//! and the what-if's streams grow from what is emitted here and from nothing
//! else, so a view that reads the outcomes sees what the report counted.
//! Outcomes are kept for views only when asked for
//! ([`super::Engine::keep_outcomes`]); the live path then pays one untaken
//! branch per outcome.

use crate::model::{Op, SplitCause};

use super::attribution::OwnerSlots;
use super::table::SlotRef;
use super::target::Target;

/// Where an outcome's numbers go (device, partition, op, origin) and whose
/// they are (the owners' combination in the attribution tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) target: Target,
    pub(crate) owners: OwnerSlots,
}

/// What the merge-candidate test needs to know about a command's ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommandEnds {
    /// The earliest queue time of the user I/Os it carries.
    pub(crate) queued_ns: u64,
    /// Fragments it carries: a lower bound on its segments, since the kernel
    /// counts a merged request's segments bio by bio.
    pub(crate) bios: u64,
    /// The user I/O of its first and of its last fragment.
    pub(crate) first_io: SlotRef,
    pub(crate) last_io: SlotRef,
    /// The owners of its first user I/O.
    pub(crate) owners: OwnerSlots,
    /// Its first fragment is a split piece cut at a size or segment limit.
    pub(crate) starts_full: bool,
}

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

/// An untorn (atomic) write as it left the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicWrite {
    /// The device it was queued on (kernel `dev_t`: the disk, for a
    /// partition's write), where it was (absolute there) and its size, in sectors.
    pub(crate) dev: u32,
    pub(crate) sector: u64,
    pub(crate) sectors: u32,
    pub(crate) fate: AtomicFate,
}

/// What became of an untorn write, the first thing that broke it named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicFate {
    /// Exactly one command of its own range: proven untorn.
    OneCommand,
    /// A command carrying it failed (a refused split fails the bio too).
    Failed,
    /// Cut into pieces.
    Split,
    /// Its command also carried another write, or it took several commands.
    SharedCommand,
    /// An event of its chain was missed: neither proven nor disproven.
    Unfollowed,
}

impl AtomicFate {
    /// The reason's name in reports (`OneCommand` is not a reason).
    pub(crate) fn name(self) -> &'static str {
        match self {
            AtomicFate::OneCommand => "one_command",
            AtomicFate::Failed => "failed",
            AtomicFate::Split => "split",
            AtomicFate::SharedCommand => "shared_command",
            AtomicFate::Unfollowed => "unfollowed",
        }
    }
}

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
/// device that `dev` names (kernel dev_t). `account` says where the step
/// is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A user I/O was submitted (`block_bio_queue`). `io` is `None` for an
    /// empty bio (a flush), which is counted but not correlated, and when no
    /// room was left to follow it. `inherited`: its owners are those of the
    /// upper device's user I/O it was remapped from, which counted them.
    Queued {
        io: Option<IoId>,
        dev: u32,
        sector: u64,
        sectors: u32,
        op: Op,
        ts_ns: u64,
        account: Account,
        inherited: bool,
        /// Its segments (bio vectors; 0 when unknown) when it is a step of
        /// its device's stream, which the what-if replays.
        segments: Option<u16>,
    },
    /// The kernel cut a user I/O's fragment at `at` (`block_split`), for
    /// `cause`; `first_cut` when its user I/O was whole until then.
    Split {
        io: Option<IoId>,
        dev: u32,
        at: u64,
        ts_ns: u64,
        account: Account,
        cause: SplitCause,
        first_cut: bool,
    },
    /// A bio was merged into a pending request or bio.
    Merged {
        io: Option<IoId>,
        ts_ns: u64,
        account: Account,
    },
    /// A user I/O's first command was issued `waited_us` after its queue
    /// (measured only within the epoch it was queued in).
    Waited { account: Account, waited_us: u64 },
    /// A new device command. A re-issue after a requeue is
    /// [`Outcome::Reissued`]. `ends` tells the merge-candidate test about
    /// the fragments it gathered (none for a bio-based command or one
    /// whose fragments were not traced).
    Issued {
        command: CommandId,
        dev: u32,
        sector: u64,
        sectors: u64,
        op: Op,
        ts_ns: u64,
        account: Account,
        ends: Option<CommandEnds>,
    },
    /// The command carries (part of) this user I/O; once per pair.
    Carries { command: CommandId, io: IoId },
    /// A command on a disk below carried (part of) a user I/O of the
    /// stacked device `account` names; once per pair.
    ReachedDisk { account: Account },
    /// The driver handed the command back (`block_rq_requeue`); `command` is
    /// `None` for one without a range or issued before the trace.
    Requeued {
        command: Option<CommandId>,
        ts_ns: u64,
        account: Account,
    },
    /// The requeued command was issued again after `waited_ns`; `measured`
    /// unless it was issued before a reset.
    Reissued {
        command: CommandId,
        ts_ns: u64,
        waited_ns: u64,
        account: Account,
        measured: bool,
    },
    /// A completion covered the command's sectors up to `done_to`. `whole`
    /// when that was its last sector; then `latency_us` is its
    /// issue→complete time from its last issue, when the report measured it
    /// (not across a reset, nor after lost events), for the `sectors` still
    /// outstanding at that issue. `error` is the completion's negative
    /// errno, 0 when it succeeded.
    Completed {
        command: CommandId,
        ts_ns: u64,
        done_to: u64,
        whole: bool,
        last_issue_ns: u64,
        latency_us: Option<u64>,
        error: i32,
        account: Account,
        sectors: u64,
    },
    /// A command failed with `error` over `[start, end)`: counted once per
    /// command, also for one issued before the trace.
    Failed {
        account: Account,
        error: i32,
        start: u64,
        end: u64,
    },
    /// The command was given up without its completion.
    CommandDropped {
        command: CommandId,
        reason: DropReason,
    },
    /// The user I/O's last fragment ended; `complete` is false when an event
    /// of its chain was missed or dropped, `failed` when a command carrying
    /// part of it completed with an error. `measured`: queued in this
    /// epoch, so its numbers feed the histograms.
    Finished {
        io: IoId,
        ts_ns: u64,
        complete: bool,
        failed: bool,
        account: Account,
        measured: bool,
        queue_ns: u64,
        fragments: u32,
        commands: u32,
        /// Set for an untorn write (`REQ_ATOMIC`): what became of it.
        atomic: Option<AtomicWrite>,
    },
    /// A fragment of the user I/O was given up (counted once per user I/O).
    Dropped { io: IoId, reason: DropReason },
    /// An empty preflush bio (no sectors, so no chain) ended with the flush
    /// command that served it: queued at `queue_ns`, done at `ts_ns`.
    FlushFinished {
        ts_ns: u64,
        queue_ns: u64,
        failed: bool,
        account: Account,
        measured: bool,
    },
}

/// The outcomes a fresh engine reaches on `events`, for the views' tests.
#[cfg(test)]
pub(crate) fn of_events(events: &[tracer_common::BlockEvent]) -> Vec<Outcome> {
    let mut engine = super::Engine::new(Vec::new(), Default::default());
    engine.keep_outcomes();
    let mut outcomes = Vec::new();
    for event in events {
        engine.ingest(event);
        outcomes.extend(engine.drain_outcomes());
    }
    outcomes
}
