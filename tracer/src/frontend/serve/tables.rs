//! The metric tables: each family `serve` writes, with its name, HELP
//! text and where its value comes from in the measures; and [`Total`], how
//! a value the engine may restart at 0 is served as a counter that only
//! grows. What is written, and in which order, is `frame.rs`'s.

use crate::model::{Distribution, OpMeasures};

/// Histogram buckets are powers of two, as the engine keeps them: the bucket
/// `le = 2^k - 1` holds every value below `2^k`. Sizes: 512 B .. 128 MiB.
pub const SIZE_BUCKET_BITS: std::ops::RangeInclusive<u32> = 9..=27;
/// Latencies: 16 µs .. 33.5 s (in seconds on the wire).
pub const LATENCY_BUCKET_BITS: std::ops::RangeInclusive<u32> = 4..=25;
pub const MICROS_PER_SECOND: f64 = 1e6;

/// A family's name and HELP text.
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
}

/// A per-device, per-op counter, and its value in the measures.
pub struct OpCounter {
    pub name: &'static str,
    pub help: &'static str,
    pub value: fn(&OpMeasures) -> u64,
}

/// A per-device, per-op histogram, and its distribution in the measures.
pub struct OpHistogram {
    pub name: &'static str,
    pub help: &'static str,
    pub distribution: fn(&OpMeasures) -> &Distribution,
}

pub const OP_COUNTERS: [OpCounter; 7] = [
    OpCounter {
        name: "iosplit_user_ios",
        help: "User I/Os: bios as submitted to the device or partition.",
        value: |m| m.user_ios,
    },
    OpCounter {
        name: "iosplit_commands",
        help: "Device commands (block_rq_issue; on bio-based devices, bios after splitting).",
        value: |m| m.commands,
    },
    OpCounter {
        name: "iosplit_bytes",
        help: "Bytes carried by the user I/Os.",
        value: |m| m.bytes,
    },
    OpCounter {
        name: "iosplit_merges",
        help: "Bios merged into an existing request, plus request merges.",
        value: |m| m.merges,
    },
    OpCounter {
        name: "iosplit_requeues",
        help: "Commands the driver handed back to be issued again.",
        value: |m| m.requeues,
    },
    OpCounter {
        name: "iosplit_atomic_writes_proven",
        help: "Untorn (REQ_ATOMIC) writes that left the stack as one command of their own sectors.",
        value: |m| m.atomic_writes.as_ref().map_or(0, |a| a.proven),
    },
    OpCounter {
        name: "iosplit_atomic_writes_not_proven",
        help: "Untorn writes that failed, were split, shared a command, or whose chain missed an event.",
        value: |m| m.atomic_writes.as_ref().map_or(0, |a| a.not_proven),
    },
];
/// Per device and op, with a `cause` label.
pub const SPLITS: Metric = Metric {
    name: "iosplit_splits",
    help: "Bio splits, by inferred cause.",
};
/// Per device and op, with a `status` label.
pub const ERRORS: Metric = Metric {
    name: "iosplit_errors",
    help: "Commands that completed with an error, by status (EIO, ETIMEDOUT, ENOSPC, ...).",
};

pub const SIZE_HISTOGRAMS: [OpHistogram; 2] = [
    OpHistogram {
        name: "iosplit_user_io_size_bytes",
        help: "User I/O size.",
        distribution: |m| &m.user_io_size,
    },
    OpHistogram {
        name: "iosplit_command_size_bytes",
        help: "Device command size.",
        distribution: |m| &m.command_size,
    },
];
pub const LATENCY_HISTOGRAMS: [OpHistogram; 2] = [
    OpHistogram {
        name: "iosplit_queue_to_complete_seconds",
        help: "From block_bio_queue to the completion of the user I/O's last fragment.",
        distribution: |m| &m.queue_to_complete_us,
    },
    OpHistogram {
        name: "iosplit_issue_to_complete_seconds",
        help: "From a command's (last) block_rq_issue to its completion.",
        distribution: |m| &m.issue_to_complete_us,
    },
];

/// Engine counters that are not per device, with a `kind` label.
pub const EVENTS: Metric = Metric {
    name: "iosplit_events",
    help: "Block tracepoint events received, by kind.",
};
pub const INCOMPLETE: Metric = Metric {
    name: "iosplit_incomplete_chains",
    help: "User I/Os whose chain missed an event.",
};
/// With a `reason` label.
pub const CHAINS_DROPPED: Metric = Metric {
    name: "iosplit_chains_dropped",
    help: "User I/Os the engine stopped following before their last completion, by reason: aged_out, evicted, completion_lost (their request was issued again before any probe saw its completion), ring_dropped (in flight when the ring dropped events).",
};
pub const IN_FLIGHT: Metric = Metric {
    name: "iosplit_chains_in_flight",
    help: "User I/Os queued and not yet completed, as the engine tracks them now.",
};

/// The kernel's own counters (the engine's resets do not touch them).
pub const DROPPED: Metric = Metric {
    name: "iosplit_events_dropped",
    help: "Events the kernel could not hand over (ring buffer full).",
};
pub const MISSED: Metric = Metric {
    name: "iosplit_probe_missed",
    help: "Probe runs the kernel skipped while another BPF program ran on the CPU.",
};
pub const READ_FAILED: Metric = Metric {
    name: "iosplit_read_failed",
    help: "Tracepoint records whose fields could not be read.",
};

/// A counter served cumulatively from an engine value that may restart at 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct Total {
    /// The engine's value at the last scrape.
    pub seen: u64,
    pub served: u64,
}

impl Total {
    pub fn observe(&mut self, now: u64) {
        // A value below the last one means the source restarted from zero.
        let grown = now.checked_sub(self.seen).unwrap_or(now);
        self.served = self.served.saturating_add(grown);
        self.seen = now;
    }
}
