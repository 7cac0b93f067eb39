//! The report model: what the engine produces and every frontend shows.
//!
//! `--json` serializes these types directly, so the human report, the TUI and
//! the JSON can never disagree. Changing a field name is a schema change:
//! bump [`SCHEMA_VERSION`] and update docs/json-schema.md (tests/docs.rs checks it).

use std::collections::BTreeMap;

use serde::Serialize;
use tracer_common::EventKind;

use crate::geometry::{DiskGeometry, PartitionGeometry};

mod cause;
mod code;
mod evidence;
mod fix;
pub use cause::{RequeueCause, SplitCause};
pub use code::Code;
pub use evidence::*;
pub use fix::*;

/// Version of the JSON document layout.
pub const SCHEMA_VERSION: u32 = 1;
pub const SCHEMA_NAME: &str = "iosplit-trace/report";

/// One complete report: `report`, `run` and the TUI's exit summary.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub schema_version: u32,
    /// Seconds of tracing this report covers.
    pub duration_s: f64,
    pub events: EventCounts,
    pub correlation: CorrelationStats,
    pub diagnoses: Vec<Diagnosis>,
    /// `run` only: findings on devices the command did not write (static
    /// geometry findings elsewhere on the disks it touched); empty otherwise.
    pub other_findings: Vec<Diagnosis>,
    pub devices: Vec<DeviceReport>,
    /// Present for `run`: the command and what its writes became.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunReport>,
    /// Who caused the I/O: per process, cgroup and file, and device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// Probes that could not be attached, with the reason.
    pub unsupported_probes: Vec<String>,
}

/// Events received from the kernel, per tracepoint, for devices in scope.
///
/// Serialized as one object: each kind under its `json_key`, in table order,
/// then the loss counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Per block tracepoint, indexed by [`EventKind`] (also `counts[kind]`).
    pub received: [u64; EventKind::COUNT],
    /// Events the kernel could not hand over (ring buffer full).
    pub dropped: u64,
    /// Syscall events lost (only `run` traces syscalls).
    pub syscall_dropped: u64,
    /// Tracepoint records whose fields could not be read.
    pub read_failed: u64,
    /// Block probe runs the kernel skipped because another BPF program was
    /// running on that CPU (its `recursion_misses`; any device, not only those traced).
    pub missed: u64,
}

impl std::ops::Index<EventKind> for EventCounts {
    type Output = u64;

    fn index(&self, kind: EventKind) -> &u64 {
        &self.received[kind as usize]
    }
}

impl std::ops::IndexMut<EventKind> for EventCounts {
    fn index_mut(&mut self, kind: EventKind) -> &mut u64 {
        &mut self.received[kind as usize]
    }
}

impl Serialize for EventCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(EventKind::COUNT + 4))?;
        for kind in EventKind::ALL {
            map.serialize_entry(kind.json_key(), &self[kind])?;
        }
        map.serialize_entry("dropped", &self.dropped)?;
        map.serialize_entry("syscall_dropped", &self.syscall_dropped)?;
        map.serialize_entry("read_failed", &self.read_failed)?;
        map.serialize_entry("missed", &self.missed)?;
        map.end()
    }
}

impl EventCounts {
    /// All block events received.
    pub fn total(&self) -> u64 {
        self.received.iter().sum()
    }
}

/// How complete the correlation was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CorrelationStats {
    /// User I/Os whose chain missed an event (drops, or a trace started mid-flight).
    pub incomplete: u64,
    /// Events that matched no known user I/O, fragment or command.
    pub unmatched_events: u64,
    /// Chains dropped because the in-flight table was full.
    pub evicted: u64,
    /// Chains dropped because they stayed in flight too long.
    pub aged_out: u64,
    /// Chains dropped because their command's request was issued again with
    /// no completion seen between (no probe ran for it; BTF tracepoints), or
    /// because it was still in flight at the end of an imported trace far
    /// longer than its device's own completions ever took.
    pub completion_lost: u64,
    /// Chains dropped that were in flight when the ring was full: an event
    /// of theirs may be among the dropped ones (`events.dropped`).
    #[serde(default)]
    pub ring_dropped: u64,
    /// Chains still in flight when the report was made.
    pub in_flight: u64,
    /// User I/Os whose queue the trace lacks, read from the remap that
    /// moved them: an upper device's (dm, md) bio, or the remapped bio
    /// issued below it with no queue of its own.
    #[serde(default)]
    pub queues_from_remaps: u64,
    /// Remaps of a bio its upper device had already sent down whole: one
    /// more copy below (raid1's mirrors, a read retried on another leg),
    /// the same user I/O.
    #[serde(default)]
    pub mirrored_remaps: u64,
    /// Remaps of md raid4/5/6's own stripe bios (data, parity, reads for a
    /// read-modify-write) to its members, each continuing the user I/O md
    /// was writing.
    #[serde(default)]
    pub stripe_remaps: u64,
    /// Issues of exactly a live command's range, same op, with no
    /// completion, requeue or new bio there between: re-dispatches whose
    /// requeue the trace lacks, counted as requeues of that command, not as
    /// new commands. Left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues_inferred: u64,
    /// Splits of a bio-based device (dm, md) that no `block_split` traced,
    /// read from a remap of the front of a pending bio: md before 6.18 and
    /// the blk-crypto fallback split without the tracepoint. Counted as
    /// splits with their cause; left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub splits_inferred: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Operation class of an I/O, from the first letters of `rwbs`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    Discard,
    Flush,
    Other,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Discard, Op::Flush, Op::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Discard => "discard",
            Op::Flush => "flush",
            Op::Other => "other",
        }
    }
}

/// A distribution summary: percentiles and log2 buckets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Distribution {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    /// Log2 buckets: `count` values in `[low, 2*low)`; empty buckets left out.
    pub buckets: Vec<Bucket>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Bucket {
    pub low: u64,
    pub count: u64,
}

/// Measures of one operation class on one disk or partition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct OpMeasures {
    /// Bios as submitted to the device or partition (block_bio_queue).
    pub user_ios: u64,
    /// Pieces the user I/Os became after splitting (user I/Os + splits).
    pub fragments: u64,
    /// Device commands (block_rq_issue; bios after splitting on bio-based devices).
    pub commands: u64,
    /// Of `commands`, those that carried no bio the trace holds (queued
    /// before it began, or lost): left out of `amplification`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commands_without_user_io: u64,
    /// Stacked devices (dm, md): commands on the disks below that carried
    /// its user I/Os, counted once per command; 0 on a disk.
    #[serde(default)]
    pub disk_commands: u64,
    /// Bytes carried by the user I/Os.
    pub bytes: u64,
    pub splits: u64,
    /// User I/Os cut at least once: the share of split user I/Os counts these.
    #[serde(default)]
    pub split_user_ios: u64,
    /// Bios merged into an existing request (back + front) plus request merges.
    pub merges: u64,
    /// Commands per user I/O (0 when there were none).
    pub amplification: f64,
    /// Commands whose start or length is not a multiple of the physical block size.
    pub misaligned_pbs_commands: u64,
    /// Commands whose start or length is not a multiple of 4 KiB.
    pub misaligned_4k_commands: u64,
    /// Split count by inferred cause (keys as in `split_amplification`'s `cause`).
    pub split_causes: BTreeMap<SplitCause, u64>,
    /// User I/O size in bytes.
    pub user_io_size: Distribution,
    /// Command size in bytes.
    pub command_size: Distribution,
    pub fragments_per_io: Distribution,
    pub commands_per_io: Distribution,
    /// Microseconds from block_bio_queue to the completion of the last fragment.
    pub queue_to_complete_us: Distribution,
    /// Microseconds from block_bio_queue to the first command carrying the
    /// user I/O (Q2D: scheduler, plugging, throttling).
    pub queue_to_issue_us: Distribution,
    /// Microseconds from block_rq_issue to block_rq_complete, per command;
    /// from its last issue for a requeued command.
    pub issue_to_complete_us: Distribution,
    /// The larger of the mean queue→issue and issue→complete; absent without both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominant: Option<Dominant>,
    /// Times the driver gave a command back to be issued again
    /// (block_rq_requeue); a requeued command still counts once in `commands`.
    pub requeues: u64,
    /// Microseconds from each requeue to the command's next issue.
    pub requeue_delay_us: Distribution,
    /// Commands that completed with an error status (EIO, ETIMEDOUT, …).
    #[serde(default)]
    pub failed_commands: u64,
    /// User I/Os a failed command carried part of: failed, not complete.
    #[serde(default)]
    pub failed_user_ios: u64,
    /// Failed commands by status name ("EIO", "ETIMEDOUT", …).
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
    /// Untorn (atomic) writes and whether each left the stack whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_writes: Option<AtomicWrites>,
}

/// Untorn writes (`REQ_ATOMIC`) followed to their commands. One is proven
/// when it became exactly one command of its own sectors: not split, not
/// merged with a neighbour, not failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AtomicWrites {
    pub proven: u64,
    pub not_proven: u64,
    /// Writes not proven by reason: `failed`, `split`, `shared_command`
    /// (merged, or several commands), `unfollowed` (an event was missed).
    pub reasons: BTreeMap<String, u64>,
    pub smallest_bytes: u64,
    pub largest_bytes: u64,
    /// The first writes not proven, by disk sector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_proven_writes: Vec<AtomicMiss>,
}

/// An untorn write that did not leave the stack as one command of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AtomicMiss {
    /// Absolute on the disk.
    pub sector: u64,
    pub bytes: u64,
    pub reason: String,
}

impl AtomicWrites {
    /// Adds `other`'s counts; the named writes up to the same bound.
    pub fn add(&mut self, other: &AtomicWrites) {
        if self.proven + self.not_proven == 0 {
            *self = other.clone();
            return;
        }
        self.proven += other.proven;
        self.not_proven += other.not_proven;
        for (reason, count) in &other.reasons {
            *self.reasons.entry(reason.clone()).or_insert(0) += count;
        }
        self.smallest_bytes = self.smallest_bytes.min(other.smallest_bytes);
        self.largest_bytes = self.largest_bytes.max(other.largest_bytes);
        let room = 16usize.saturating_sub(self.not_proven_writes.len());
        self.not_proven_writes
            .extend(other.not_proven_writes.iter().take(room).cloned());
    }
}

impl OpMeasures {
    /// Adds `other`'s counters (not its distributions) into `self`, and
    /// recomputes the amplification: one op's totals over disks or partitions.
    pub fn add_counts(&mut self, other: &OpMeasures) {
        self.user_ios += other.user_ios;
        self.fragments += other.fragments;
        self.commands += other.commands;
        self.commands_without_user_io += other.commands_without_user_io;
        self.disk_commands += other.disk_commands;
        self.bytes += other.bytes;
        self.splits += other.splits;
        self.split_user_ios += other.split_user_ios;
        self.merges += other.merges;
        self.requeues += other.requeues;
        self.failed_commands += other.failed_commands;
        self.failed_user_ios += other.failed_user_ios;
        for (status, count) in &other.errors {
            *self.errors.entry(status.clone()).or_insert(0) += count;
        }
        if let Some(theirs) = &other.atomic_writes {
            self.atomic_writes
                .get_or_insert_with(AtomicWrites::default)
                .add(theirs);
        }
        self.misaligned_pbs_commands += other.misaligned_pbs_commands;
        self.misaligned_4k_commands += other.misaligned_4k_commands;
        for (cause, count) in &other.split_causes {
            *self.split_causes.entry(*cause).or_insert(0) += count;
        }
        self.amplification = ratio(self.commands - self.commands_without_user_io, self.user_ios);
    }

    /// Share of commands not aligned to the physical block size, 0..=1.
    pub fn misaligned_pbs_share(&self) -> f64 {
        ratio(self.misaligned_pbs_commands, self.commands)
    }

    pub fn misaligned_4k_share(&self) -> f64 {
        ratio(self.misaligned_4k_commands, self.commands)
    }

    /// Share of user I/Os that were split, 0..=1.
    pub fn split_share(&self) -> f64 {
        ratio(self.split_user_ios, self.user_ios)
    }

    pub fn merge_share(&self) -> f64 {
        ratio(self.merges, self.user_ios)
    }

    /// Requeues per command (a command can be requeued more than once).
    pub fn requeue_share(&self) -> f64 {
        ratio(self.requeues, self.commands)
    }
}

/// `num / den`, or 0 when `den` is 0.
pub fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

/// Measures of one disk or partition, per operation class that was seen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Measures {
    pub ops: BTreeMap<Op, OpMeasures>,
    /// Command completions whose queue and issue the trace lacks (issued
    /// before it began, or a trace of completions only): counted, not timed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpaired_completions: u64,
}

impl Measures {
    pub fn op(&self, op: Op) -> Option<&OpMeasures> {
        self.ops.get(&op)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct DeviceReport {
    pub name: String,
    /// "major:minor".
    pub dev: String,
    pub geometry: DiskGeometry,
    /// The geometry came from sysfs or `--geometry`; when false it is what
    /// the trace showed: request-based if commands were seen, all else 0.
    pub geometry_known: bool,
    pub measures: Measures,
    pub partitions: Vec<PartitionReport>,
    /// Removed (or its media gone) during the trace; measures are from before.
    pub gone: bool,
    /// Per op, the disk's service model fitted from its commands, where it
    /// applies (the what-ifs' times replay it).
    pub service: BTreeMap<Op, ServiceModel>,
    /// Submitters that waited for a free tag (`block_rq_tag_wait`, 7.2+):
    /// the queue was full. Empty when none waited or the kernel cannot say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_waits: Vec<TagWaitReport>,
    /// Passthrough commands (`REQ_OP_DRV_*`) issued here, by op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<PassthroughReport>,
}

/// Passthrough commands of one op on a disk (io_uring `URING_CMD` on an
/// NVMe generic device, nvme-cli): the block tracepoints give them no
/// range; the NVMe command (`nvme_setup_cmd`, BTF probes) does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PassthroughReport {
    /// `write`, `read`, `write_zeroes`, `flush`, `discard`, `other`, or
    /// `unknown` (no NVMe command was joined: classic probes, or not NVMe).
    pub op: String,
    pub commands: u64,
    /// Commands whose range the NVMe command gave.
    pub with_range: u64,
    /// 512-byte sectors those ranges cover.
    pub sectors: u64,
    /// The lowest sector and the end of the highest range (0, 0 when none).
    pub first_sector: u64,
    pub end_sector: u64,
}

/// Waits for a free tag on one hardware queue of a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TagWaitReport {
    /// The hardware queue's index.
    pub hctx: u32,
    /// Whose tags ran out: `scheduler` (the I/O scheduler's, `nr_requests`)
    /// or `driver` (the device's queue depth).
    pub tags: String,
    pub waits: u64,
    /// The tag set's size at the last wait.
    pub nr_tags: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct PartitionReport {
    pub name: String,
    pub dev: String,
    pub geometry: PartitionGeometry,
    /// As for the disk; when false, `start` is read off the remaps (0 if
    /// none said) and the size is unknown (0).
    pub geometry_known: bool,
    pub measures: Measures,
    /// Removed during the trace (or with its disk); measures are from before.
    pub gone: bool,
}

/// Who caused the I/O (`attribution` in JSON): per owner and device, the
/// top owners by commands; the rest of each device is summed into an
/// `other` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Attribution {
    pub processes: Vec<OwnerEntry>,
    pub cgroups: Vec<OwnerEntry>,
    pub files: Vec<OwnerEntry>,
    /// Distinct (owner, device) entries summed into `other` entries, per view.
    pub folded: FoldedOwners,
    /// The views the text report shows (`report --by`); JSON has them all.
    #[serde(skip)]
    pub text_views: Vec<OwnerView>,
}

/// One way of grouping I/O by who caused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerView {
    Process,
    Cgroup,
    File,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FoldedOwners {
    pub processes: u64,
    pub cgroups: u64,
    pub files: u64,
}

/// What is known about an entry's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerKnown {
    /// Named by the fields beside it.
    Known,
    /// Submitted by a kernel thread (writeback, a flusher): the kernel does
    /// not say which process the data came from. See the cgroup and file views.
    KernelThread,
    /// The bio's pages belong to no file (direct I/O from a user buffer on a
    /// path the probes cannot follow, or swap).
    NoFile,
    /// The kernel (or this probe flavor) did not tell.
    Unknown,
    /// Everything past the top entries (or past the engine's table), summed.
    Other,
}

/// The names a live run resolved for its owners (cgroup paths, file paths),
/// kept in a recording: they belong to the machine that was traced, so
/// `analyze` elsewhere shows the same names instead of resolving its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct OwnerNames {
    /// Cgroup id and its path.
    pub cgroups: Vec<(u64, String)>,
    /// File (filesystem device "major:minor", inode) and its path.
    pub files: Vec<(String, u64, String)>,
}

impl OwnerNames {
    pub fn of(attribution: &Attribution) -> OwnerNames {
        let cgroups = attribution
            .cgroups
            .iter()
            .filter_map(|entry| Some((entry.cgroup_id?, entry.cgroup.clone()?)))
            .collect();
        let files = attribution
            .files
            .iter()
            .filter_map(|entry| Some((entry.dev.clone()?, entry.inode?, entry.path.clone()?)))
            .collect();
        OwnerNames { cgroups, files }
    }

    pub fn apply(&self, attribution: &mut Attribution) {
        for entry in &mut attribution.cgroups {
            if let Some((_, path)) = self
                .cgroups
                .iter()
                .find(|(id, _)| Some(*id) == entry.cgroup_id)
            {
                entry.cgroup = Some(path.clone());
            }
        }
        for entry in &mut attribution.files {
            if let Some((_, _, path)) = self.files.iter().find(|(dev, inode, _)| {
                entry.dev.as_deref() == Some(dev.as_str()) && entry.inode == Some(*inode)
            }) {
                entry.path = Some(path.clone());
            }
        }
    }
}

/// One owner on one device (disk or partition).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OwnerEntry {
    pub owner: OwnerKnown,
    /// processes: the submitter's tgid and name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// cgroups: the path under the blkio (v1) or unified (v2) mount, and its id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// cgroups: the pod, container and unit the path names, where it does.
    #[serde(flatten)]
    pub workload: Workload,
    /// files: the path when it could be found without scanning the
    /// filesystem, else the inode and the filesystem's device ("major:minor").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// files without a `path`: where that filesystem is mounted, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// Found through an iomap direct I/O rather than the page cache.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// The disk or partition the I/O was queued to.
    pub device: String,
    pub measures: OwnerMeasures,
}

impl OwnerEntry {
    /// A file entry's name: its path, else its inode, filesystem device and
    /// mount point; None for entries of other views.
    pub fn file_name(&self) -> Option<String> {
        if let Some(path) = &self.path {
            return Some(path.clone());
        }
        let (inode, dev) = (self.inode?, self.dev.as_deref()?);
        Some(match &self.mount {
            Some(mount) => format!("inode {inode} on {dev} (mounted at {mount})"),
            None => format!("inode {inode} on {dev}"),
        })
    }

    pub fn new(owner: OwnerKnown, device: String, measures: OwnerMeasures) -> OwnerEntry {
        OwnerEntry {
            owner,
            pid: None,
            comm: None,
            cgroup: None,
            cgroup_id: None,
            workload: Workload::default(),
            path: None,
            inode: None,
            dev: None,
            mount: None,
            direct: false,
            device,
            measures,
        }
    }
}

/// Who a cgroup belongs to, as far as its path says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Workload {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// `guaranteed`, `burstable` or `besteffort`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The innermost systemd unit that is not a container's scope or a pod's
    /// slice: `nginx.service`, `session-3.scope`, `user@1000.service`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl Workload {
    pub fn is_empty(&self) -> bool {
        *self == Workload::default()
    }
}

/// Which part of a user I/O's life was longer, on average.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dominant {
    /// queue→issue (Q2D): waiting in the scheduler, plugs, throttling.
    Queue,
    /// issue→complete (D2C): the device.
    Device,
}

impl Dominant {
    /// Which of queue→issue and issue→complete took longer on average.
    pub fn of(q2d: &Distribution, d2c: &Distribution) -> Option<Dominant> {
        if q2d.count == 0 || d2c.count == 0 {
            return None;
        }
        Some(if q2d.mean > d2c.mean {
            Dominant::Queue
        } else {
            Dominant::Device
        })
    }
}

/// The device measures that make sense per owner, all operations together.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OwnerMeasures {
    pub user_ios: u64,
    pub commands: u64,
    pub bytes: u64,
    pub splits: u64,
    /// User I/Os cut at least once.
    pub split_user_ios: u64,
    pub merges: u64,
    /// Commands per user I/O (0 when there were none).
    pub amplification: f64,
    /// Share of user I/Os split (0..=1), and merges per user I/O.
    pub split_share: f64,
    pub merge_share: f64,
    pub commands_per_io: Distribution,
    /// Microseconds from block_bio_queue to the completion of the last fragment.
    pub queue_to_complete_us: Distribution,
    /// Microseconds from block_bio_queue to the first command carrying it (Q2D).
    pub queue_to_issue_us: Distribution,
    /// Microseconds from block_rq_issue to completion of the commands it
    /// started (D2C; a command counts for the owner of its first fragment).
    pub issue_to_complete_us: Distribution,
    /// The larger of the mean Q2D and D2C; absent without both.
    pub dominant: Option<Dominant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// As the JSON and the Prometheus labels spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One finding as the engine makes it: the device, how severe, and the
/// evidence, which also holds the fix the engine decided on. Typed, no
/// prose: `crate::explain` words it into a [`Diagnosis`].
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// Always `evidence.code()`.
    pub code: Code,
    /// Device name, e.g. "loop0p2".
    pub device: String,
    /// The disk `device` is, or is a partition of: where the fix's queue
    /// settings and partition table are.
    pub disk: String,
    pub severity: Severity,
    /// Numbers behind the finding and its fix, typed per code (see [`Evidence`]).
    pub evidence: Evidence,
}

impl Finding {
    /// A finding whose code is the one its evidence supports.
    pub fn new(device: String, disk: String, severity: Severity, evidence: Evidence) -> Finding {
        Finding {
            code: evidence.code(),
            device,
            disk,
            severity,
            evidence,
        }
    }
}

/// One finding as a report carries it: evidence in numbers, an
/// explanation, and the fix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Always `evidence.code()`; kept as a field for the JSON and for readers.
    pub code: Code,
    /// Device name, e.g. "loop0p2".
    pub device: String,
    pub severity: Severity,
    /// Numbers behind the finding, typed per code (see [`Evidence`]).
    pub evidence: Evidence,
    pub explanation: String,
    pub fix: String,
}

impl Diagnosis {
    /// A diagnosis whose code is the one its evidence supports.
    pub fn new(
        device: String,
        severity: Severity,
        evidence: Evidence,
        explanation: String,
        fix: String,
    ) -> Diagnosis {
        Diagnosis {
            code: evidence.code(),
            device,
            severity,
            evidence,
            explanation,
            fix,
        }
    }

    /// `finding` with its words (`crate::explain::diagnosis` makes them).
    pub fn worded(finding: Finding, explanation: String, fix: String) -> Diagnosis {
        Diagnosis {
            code: finding.code,
            device: finding.device,
            severity: finding.severity,
            evidence: finding.evidence,
            explanation,
            fix,
        }
    }
}

/// What a diagnosis's fix would buy for the observed workload: the same
/// user I/Os replayed through the kernel's split and merge rules under the
/// fixed geometry or limits. Times are present where they can be estimated:
/// the commands replayed through the device's service model
/// (`engine/service.rs`); otherwise `time_unavailable` says why.
#[derive(Clone, Debug, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct WhatIf {
    pub commands_now: u64,
    pub commands_after_fix: u64,
    pub time_now_ms: Option<f64>,
    pub time_after_fix_ms: Option<f64>,
    /// Why the times are null; `None` when they are estimated.
    pub time_unavailable: Option<TimeUnavailable>,
    /// The fit the times come from.
    pub service_model: Option<ServiceModel>,
    /// The disk's busy time for this op over the trace (at least one of its
    /// commands in flight), measured with or without a fit; `None` before
    /// any command completed.
    pub busy_ms: Option<f64>,
    /// Where the replayed bios' segment counts came from; `None` for a
    /// prediction that does not replay them.
    pub segments: Option<SegmentSource>,
    /// With one command size (`time_unavailable: one_command_size`), the
    /// device time after the fix the data allow, from the busy time now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_after_fix_bounds_ms: Option<TimeBounds>,
}

/// A time after a fix when the commands seen had one size, so a command's
/// cost cannot be told from its bytes': the two ends the data allow.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct TimeBounds {
    /// Each command costs the same, whatever its size (an IOPS-capped disk):
    /// the time scales with the commands.
    pub iops_bound: f64,
    /// The time goes with the bytes (a bandwidth-capped disk): the fix,
    /// which moves the same bytes, leaves it as it is.
    pub bandwidth_bound: f64,
}

impl TimeBounds {
    /// The bounds of `busy` (any unit) when `now` commands become `after`.
    pub fn of(busy: f64, now: u64, after: u64) -> Option<TimeBounds> {
        (now > 0 && busy > 0.0).then(|| TimeBounds {
            iops_bound: busy * after as f64 / now as f64,
            bandwidth_bound: busy,
        })
    }
}

/// Where a what-if's segments per bio came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentSource {
    /// Every replayed bio's vector count was read (`bi_vcnt`, BTF probes).
    Observed,
    /// Some were read; the rest (clones of stacked devices, classic probes,
    /// imported traces) were counted one per page.
    PartlyObserved,
    /// None were read: one segment per page was assumed.
    OnePerPage,
}

/// Why a what-if (or a run's time with the fix) carries no time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnavailable {
    /// Fewer measured commands than the fit needs (32).
    TooFewCommands,
    /// Nearly every command had one size: a command's cost cannot be told
    /// from its bytes' cost.
    OneCommandSize,
    /// Commands completed, but no issue→complete time was measured
    /// (bio-based devices: their commands are bios, not timed).
    NoServiceTime,
    /// `run` only: the device was busy less than a fifth of the run, so
    /// the run's time is not the device's.
    NotIoBound,
}

/// `run`: how long the command would take with the fix of the diagnosis
/// whose what-if saves the most device time. Only the part of the run the
/// device was busy is scaled.
#[derive(Clone, Debug, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct RunTimeWithFix {
    /// The diagnosis whose what-if this is, and its device.
    pub code: String,
    pub device: String,
    pub run_s: f64,
    /// The device's busy time during the run (at most `run_s`).
    pub device_busy_s: Option<f64>,
    pub run_after_fix_s: Option<f64>,
    /// `run_s / run_after_fix_s`.
    pub speedup: Option<f64>,
    /// With one command size: the run's time with the fix at both ends the
    /// data allow, only the device-busy part scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_after_fix_bounds_s: Option<TimeBounds>,
    /// Why there is no estimate; `None` when there is one.
    pub unavailable: Option<TimeUnavailable>,
    /// The what-if's commands, now and after the fix.
    #[serde(default)]
    pub commands_now: u64,
    #[serde(default)]
    pub commands_after_fix: u64,
    /// This run paid little for the finding: the fix saves under a fifth
    /// of its commands, or under a tenth of its time. The finding keeps
    /// its severity (`check` too); the run's words weigh what it cost.
    #[serde(default)]
    pub pays_little: bool,
    /// `subpage_block_size`: the 4 KiB reads its fix adds, one per page the
    /// run's writes to the device covered only in part first (the page
    /// cache reads such a page before a sub-block write); each is a command
    /// the writer waits for, counted in `run_after_fix_s`.
    #[serde(default)]
    pub reads_after_fix: u64,
}

/// How the device behaved over the traced period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceBound {
    /// Fewer than 1.5 commands in flight: each command's latency in turn.
    Latency,
    /// The per-command cost is at least half the device time.
    Iops,
    /// The per-byte cost is more than half the device time.
    Bandwidth,
}

/// The device's service model for one op, fitted from the traced commands:
/// each command keeps the device busy `per_command_ms` + `ms_per_mib` × MiB,
/// at the `in_flight` concurrency the traced workload had.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct ServiceModel {
    pub commands_fitted: u64,
    pub per_command_ms: f64,
    pub ms_per_mib: f64,
    pub in_flight: f64,
    /// `1 / ms_per_mib`, MiB/s; 0 when bytes cost nothing measurable.
    pub ceiling_mib_per_s: f64,
    /// Time at least one command was in flight.
    pub busy_ms: f64,
    /// First issue to last completion of the fitted commands.
    pub span_ms: f64,
    pub bound: ServiceBound,
}

/// What a command run under `iosplit-trace run` did, from syscalls down to commands.
#[derive(Clone, Debug, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct RunReport {
    pub command: Vec<String>,
    pub exit_status: Option<i32>,
    /// The command's own wall time, fork to exit (not the settle after it),
    /// less `paused_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_s: Option<f64>,
    /// Opens for writing at which the probe stopped the command until `run`
    /// held the file (0 with `--no-pause`), and the time stopped, summed.
    #[serde(default)]
    pub paused_opens: u64,
    #[serde(default)]
    pub paused_s: f64,
    pub processes: u64,
    /// Per target device (partition or disk) or regular file the command wrote to.
    pub targets: Vec<RunTarget>,
    /// Files written beyond the ones listed in `targets` (those that wrote most).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_not_listed: Option<FilesNotListed>,
    /// Writeback by other tasks (kernel threads) to the same devices during the run.
    pub background: Measures,
    /// The tree's io_submit (libaio) calls, when it made any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_submit: Option<IoSubmitReport>,
    /// The tree's io_uring write and sync SQEs, when it submitted any, or
    /// why this kernel's io_uring submissions cannot be followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_uring: Option<UringReport>,
    /// The command's time with the fix, when a diagnosis of a device it
    /// wrote carries a what-if.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_with_fix: Option<RunTimeWithFix>,
    /// The command's time with each fix its findings propose, in the
    /// findings' order (cheapest first), when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_with_each_fix: Vec<RunTimeWithFix>,
    /// `run --pid`: a process already running, followed from attach on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<RunAttached>,
}

/// The window `run --pid` followed a process that it did not start.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct RunAttached {
    pub pid: u32,
    /// Processes of its tree when attached (it and its descendants).
    pub processes_at_attach: u64,
    /// Attach to the end of the window, less `paused_s`.
    pub window_s: f64,
    pub ended: AttachEnd,
}

/// How the window of `run --pid` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachEnd {
    /// The process exited (its status is not ours to know).
    Exited,
    /// Ctrl-C or SIGTERM to `run`: the process goes on, no longer traced.
    Interrupted,
}

/// `run`'s io_uring SQEs (WRITE, WRITEV, WRITE_FIXED, FSYNC), to any fd:
/// how many, how they were submitted, and those not followed (registered
/// files; a WRITEV of more iovecs than summed): their writes are in no count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct UringReport {
    pub writes: u64,
    pub syncs: u64,
    /// Of all write and sync SQEs (followed or not), those submitted by
    /// the ring's SQPOLL thread (the rest by io_uring_enter).
    pub sqpoll: u64,
    /// Handed to io-wq workers (`iou-wrk-*`) after submission.
    pub punted_to_io_wq: u64,
    pub fixed_files_not_followed: u64,
    pub not_followed: u64,
    /// Set when io_uring submissions cannot be followed on this kernel
    /// (then every other count is 0, not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
}

/// `run`'s io_submit calls: how many, the iocbs they submitted, and those
/// the probe did not follow (past the iocbs it reads per call, or a
/// PWRITEV of more iovecs than it sums): their writes are in no count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IoSubmitReport {
    pub calls: u64,
    pub iocbs: u64,
    pub iocbs_not_followed: u64,
}

/// The files a run wrote that its report does not list, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FilesNotListed {
    pub files: u64,
    pub write_syscalls: u64,
    pub write_syscall_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct RunTarget {
    pub device: String,
    /// Set when the target is a regular file on `device`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<RunFile>,
    /// Writes: write-family syscalls, plus iocbs submitted through io_submit.
    pub write_syscalls: u64,
    /// Write calls the kernel refused, by errno name (`EOPNOTSUPP`): in no
    /// other count here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_writes: BTreeMap<String, u64>,
    /// Writes through an fd opened O_DIRECT.
    #[serde(default)]
    pub direct_writes: u64,
    pub write_syscall_bytes: u64,
    pub write_syscall_size: Distribution,
    /// The part of the writes (and their bytes) submitted through io_submit
    /// (libaio): IOCB_CMD_PWRITE and PWRITEV, one per iocb.
    #[serde(default)]
    pub aio_writes: u64,
    #[serde(default)]
    pub aio_write_bytes: u64,
    /// The part submitted through io_uring (WRITE, WRITEV, WRITE_FIXED SQEs).
    #[serde(default)]
    pub uring_writes: u64,
    #[serde(default)]
    pub uring_write_bytes: u64,
    /// Of `uring_writes`, NVMe passthrough writes (`URING_CMD` on
    /// `/dev/ngXnY`), followed from the SQE's NVMe command.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passthrough_writes: u64,
    pub fsync_calls: u64,
    /// Pages its writes covered only in part before any write covered them
    /// (direct writes too: O_DIRECT is not followed). With a 4 KiB block
    /// size the page cache reads each such page first.
    #[serde(default)]
    pub partial_pages: u64,
    /// Bios the command's process tree submitted to this device.
    pub bios: u64,
    pub bio_size: Distribution,
    pub commands: u64,
    /// Device commands per write syscall, where offsets allowed matching.
    pub commands_per_write: Distribution,
    /// Write syscalls per device command.
    pub writes_per_command: Distribution,
    /// Stores through shared writable mappings of it, when it had any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped: Option<RunMapped>,
    /// Untorn writes among its bios, each proven one command of its own or named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_writes: Option<AtomicWrites>,
    /// The one-sentence chain, e.g. "mkfs.ext4 issued 2,048 writes of 32 KiB …".
    pub summary: String,
}

/// A target's shared writable mappings (mmap): which stores reached the
/// device is told by the commands over the ranges flushed, at msync,
/// munmap, exec and the run's end.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct RunMapped {
    pub mappings: u64,
    pub msync_calls: u64,
    /// The ranges flushed, summed (a mapping flushed twice counts twice).
    pub flushed_bytes: u64,
    /// Of them, written by device commands during the run: the bytes
    /// written through the mappings.
    pub written_bytes: u64,
    /// The rest: pages not stored to, still dirty at the end, or holes.
    pub not_written_bytes: u64,
}

/// A regular file `run` wrote: its writes were carried to sectors through
/// its extent map (FIEMAP, read after the command). The byte counts split
/// the file's `write_syscall_bytes`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct RunFile {
    pub path: String,
    pub inode: u64,
    /// Extents in the map, and how many of them had no sectors (delalloc, unknown).
    pub extents: u64,
    pub unmappable_extents: u64,
    /// Why the map is missing or partial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_error: Option<String>,
    /// Written to the device by commands during the run.
    pub matched_bytes: u64,
    /// Not written back inside the run (still dirty at exit), so not matched.
    pub not_written_back_bytes: u64,
    /// The part of `not_written_back_bytes` in delayed-allocation extents.
    pub delalloc_bytes: u64,
    /// In extents without a device address, or holes: not matched.
    pub unmappable_bytes: u64,
    /// Writes through an fd opened before tracing: file offset unknown.
    pub unknown_offset_bytes: u64,
    /// Replaced by a later write of the command before any device command
    /// wrote them: never meant to reach the device, so not a miss.
    #[serde(default)]
    pub overwritten_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `events` keys and their order are part of the schema.
    #[test]
    fn event_counts_keep_their_json_keys_and_order() {
        let mut counts = EventCounts {
            dropped: 12,
            syscall_dropped: 13,
            read_failed: 14,
            missed: 15,
            ..EventCounts::default()
        };
        for kind in EventKind::ALL {
            counts[kind] = kind as u64;
        }
        assert_eq!(
            serde_json::to_string(&counts).unwrap(),
            r#"{"remap":0,"queue":1,"split":2,"backmerge":3,"frontmerge":4,"rq_merge":5,"issue":6,"complete":7,"bio_complete":8,"dirty_buffer":9,"requeue":10,"rq_remap":11,"dropped":12,"syscall_dropped":13,"read_failed":14,"missed":15}"#
        );
        assert_eq!(counts.total(), (0..EventKind::COUNT as u64).sum::<u64>());
    }
}
