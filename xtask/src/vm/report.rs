//! The parts of iosplit-trace's JSON documents the scenarios read, typed.
//!
//! Field names are the tracer's (`tracer/src/model.rs`, `model/evidence.rs`,
//! `geometry/`; docs/json-schema.md). xtask does not link the tracer, so
//! these are its own small copies. A key the tracer always writes is
//! required here: a renamed one fails the file's load with serde's message
//! instead of reading as 0 or None. `Option` fields are the keys the tracer
//! leaves out when they do not apply; `nullable` ones are always written,
//! possibly as `null`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use tracer_common::EventKind;

/// A key the tracer always writes whose value may be `null`: present, unlike
/// a plain `Option` field, which serde lets go missing.
fn nullable<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// `report --json` and `run --json` (`iosplit-trace/report`).
#[derive(Debug, Deserialize)]
pub struct Report {
    pub events: Events,
    pub correlation: Correlation,
    pub diagnoses: Vec<Diagnosis>,
    pub devices: Vec<Device>,
    /// `run` only.
    pub run: Option<Run>,
    /// Left out with `--no-owners`.
    pub attribution: Option<Attribution>,
    pub unsupported_probes: Vec<String>,
}

/// `check --json` (`iosplit-trace/check`): the report model without traffic.
#[derive(Debug, Deserialize)]
pub struct Audit {
    pub diagnoses: Vec<Diagnosis>,
    pub devices: Vec<Device>,
}

/// What a report and an audit both carry.
pub trait Findings {
    fn diagnoses(&self) -> &[Diagnosis];
    fn devices(&self) -> &[Device];

    /// The `devices[]` or `devices[].partitions[]` entry named `name`.
    fn device(&self, name: &str) -> Option<&Entry> {
        self.devices().iter().find_map(|device| {
            if device.entry.name == name {
                return Some(&device.entry);
            }
            device.partitions.iter().find(|part| part.name == name)
        })
    }

    /// The first diagnosis `code` on exactly `device`.
    fn diagnosis(&self, device: &str, code: Code) -> Option<&Diagnosis> {
        self.diagnoses()
            .iter()
            .find(|d| d.code() == code && d.device == device)
    }
}

impl Findings for Report {
    fn diagnoses(&self) -> &[Diagnosis] {
        &self.diagnoses
    }
    fn devices(&self) -> &[Device] {
        &self.devices
    }
}

impl Findings for Audit {
    fn diagnoses(&self) -> &[Diagnosis] {
        &self.diagnoses
    }
    fn devices(&self) -> &[Device] {
        &self.devices
    }
}

/// `events`: one count per block tracepoint (under the probe table's JSON
/// keys, every one required), and the losses.
#[derive(Debug, Deserialize)]
#[serde(try_from = "BTreeMap<String, u64>")]
pub struct Events {
    received: [u64; EventKind::COUNT],
    pub dropped: u64,
    pub missed: u64,
}

impl Events {
    pub fn count(&self, kind: EventKind) -> u64 {
        self.received[kind as usize]
    }
}

impl TryFrom<BTreeMap<String, u64>> for Events {
    type Error = String;

    fn try_from(counts: BTreeMap<String, u64>) -> Result<Events, String> {
        let count = |key: &str| {
            counts
                .get(key)
                .copied()
                .ok_or_else(|| format!("events has no `{key}`"))
        };
        let mut received = [0; EventKind::COUNT];
        for kind in EventKind::ALL {
            received[kind as usize] = count(kind.json_key())?;
        }
        Ok(Events {
            received,
            dropped: count("dropped")?,
            missed: count("missed")?,
        })
    }
}

/// `correlation`: how the chains ended.
#[derive(Debug, Deserialize)]
pub struct Correlation {
    pub unmatched_events: u64,
    pub in_flight: u64,
    /// Cuts seen only as a piece's remap (md before 6.18); left out when 0.
    #[serde(default)]
    pub splits_inferred: u64,
    /// Further clones of one piece (raid1/raid10 mirrors); left out when 0.
    #[serde(default)]
    pub mirrored_remaps: u64,
}

/// A disk, and its partitions.
#[derive(Debug, Deserialize)]
pub struct Device {
    #[serde(flatten)]
    pub entry: Entry,
    pub partitions: Vec<Entry>,
    /// Waits for a free tag (7.2+), by hardware queue and tag set.
    #[serde(default)]
    pub tag_waits: Vec<TagWait>,
    /// Passthrough commands, by op.
    #[serde(default)]
    pub passthrough: Vec<Passthrough>,
}

#[derive(Debug, Deserialize)]
pub struct Passthrough {
    pub op: String,
    pub commands: u64,
    pub with_range: u64,
    pub sectors: u64,
    pub first_sector: u64,
    pub end_sector: u64,
}

#[derive(Debug, Deserialize)]
pub struct TagWait {
    pub hctx: u32,
    pub tags: String,
    pub waits: u64,
}

/// What a disk and a partition entry both carry.
#[derive(Debug, Deserialize)]
pub struct Entry {
    pub name: String,
    /// "major:minor".
    pub dev: String,
    pub geometry: EntryGeometry,
    pub measures: Measures,
}

impl Entry {
    /// The measures of its writes, when it had any.
    pub fn writes(&self) -> Option<&OpMeasures> {
        self.measures.ops.get(&Op::Write)
    }
}

#[derive(Debug, Deserialize)]
pub struct EntryGeometry {
    /// Device-mapper and md devices only.
    pub stack: Option<Stack>,
    /// Disks only: the size cap, its hardware limit, the optimal I/O size
    /// and where `check` says the cap comes from.
    pub max_sectors_kb: Option<u64>,
    pub max_hw_sectors_kb: Option<u64>,
    pub optimal_io_size: Option<u64>,
    pub max_sectors_source: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Stack {
    /// `dm-linear`, `dm-crypt`, `md-raid1`, ...
    pub kind: String,
    /// `dm/uuid`; left out when empty.
    #[serde(default)]
    pub uuid: String,
    /// dm-crypt only.
    pub crypt_sector_size: Option<u64>,
    pub legs: Vec<StackLeg>,
}

#[derive(Debug, Deserialize)]
pub struct StackLeg {
    pub bottom: StackBottom,
}

#[derive(Debug, Deserialize)]
pub struct StackBottom {
    pub name: String,
}

/// Operation class, from the first letters of `rwbs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    Discard,
    Flush,
    Other,
}

#[derive(Debug, Deserialize)]
pub struct Measures {
    pub ops: BTreeMap<Op, OpMeasures>,
}

#[derive(Debug, Deserialize)]
pub struct OpMeasures {
    pub user_ios: u64,
    pub fragments: u64,
    pub commands: u64,
    pub disk_commands: u64,
    pub splits: u64,
    pub misaligned_pbs_commands: u64,
    pub misaligned_4k_commands: u64,
    pub failed_commands: u64,
    pub failed_user_ios: u64,
    /// Splits by cause key.
    pub split_causes: BTreeMap<String, u64>,
}

/// The diagnosis codes, named as the JSON names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    SubpageBlockSize,
    MisalignedStart,
    MisalignedIoOpt,
    MisalignedStack,
    CryptSectorSize,
    AtomicWritesLost,
    SplitAmplification,
    MergeBlocked,
    RequeuedCommands,
    IoErrors,
}

impl Code {
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::SubpageBlockSize => "subpage_block_size",
            Code::MisalignedStart => "misaligned_start",
            Code::MisalignedIoOpt => "misaligned_io_opt",
            Code::MisalignedStack => "misaligned_stack",
            Code::CryptSectorSize => "crypt_sector_size",
            Code::AtomicWritesLost => "atomic_writes_lost",
            Code::SplitAmplification => "split_amplification",
            Code::MergeBlocked => "merge_blocked",
            Code::RequeuedCommands => "requeued_commands",
            Code::IoErrors => "io_errors",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Ordered by name, so a sorted list of codes reads alphabetically.
impl Ord for Code {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Code {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One element of `diagnoses`: its `code` decides the shape of its `evidence`.
#[derive(Debug, Deserialize)]
pub struct Diagnosis {
    #[serde(flatten)]
    pub evidence: Evidence,
    pub device: String,
    pub severity: Severity,
    pub explanation: String,
    pub fix: String,
}

impl Diagnosis {
    pub fn code(&self) -> Code {
        match self.evidence {
            Evidence::SubpageBlockSize(_) => Code::SubpageBlockSize,
            Evidence::MisalignedStart(_) => Code::MisalignedStart,
            Evidence::MisalignedIoOpt(_) => Code::MisalignedIoOpt,
            Evidence::MisalignedStack(_) => Code::MisalignedStack,
            Evidence::CryptSectorSize(_) => Code::CryptSectorSize,
            Evidence::AtomicWritesLost(_) => Code::AtomicWritesLost,
            Evidence::SplitAmplification(_) => Code::SplitAmplification,
            Evidence::MergeBlocked(_) => Code::MergeBlocked,
            Evidence::RequeuedCommands(_) => Code::RequeuedCommands,
            Evidence::IoErrors(_) => Code::IoErrors,
        }
    }

    /// Whether it is on `device` (a name, or a `/dev/` path).
    pub fn is_on(&self, device: &str) -> bool {
        self.device.trim_start_matches("/dev/") == device
    }

    /// Stable key `evidence.cause`.
    pub fn cause(&self) -> Option<&str> {
        match &self.evidence {
            Evidence::SplitAmplification(evidence) => Some(&evidence.cause),
            Evidence::RequeuedCommands(evidence) => evidence.cause.as_deref(),
            _ => None,
        }
    }

    /// Stable key `evidence.block_size`.
    pub fn block_size(&self) -> Option<u64> {
        match &self.evidence {
            Evidence::SubpageBlockSize(evidence) => Some(evidence.block_size),
            _ => None,
        }
    }

    pub fn misaligned_stack(&self) -> Option<&MisalignedStack> {
        match &self.evidence {
            Evidence::MisalignedStack(evidence) => Some(evidence),
            _ => None,
        }
    }

    pub fn atomic_writes_lost(&self) -> Option<&AtomicWritesLost> {
        match &self.evidence {
            Evidence::AtomicWritesLost(evidence) => Some(evidence),
            _ => None,
        }
    }

    pub fn split_amplification(&self) -> Option<&SplitAmplification> {
        match &self.evidence {
            Evidence::SplitAmplification(evidence) => Some(evidence),
            _ => None,
        }
    }

    pub fn requeued_commands(&self) -> Option<&RequeuedCommands> {
        match &self.evidence {
            Evidence::RequeuedCommands(evidence) => Some(evidence),
            _ => None,
        }
    }

    pub fn io_errors(&self) -> Option<&IoErrors> {
        match &self.evidence {
            Evidence::IoErrors(evidence) => Some(evidence),
            _ => None,
        }
    }

    /// `evidence.what_if`, for the codes that carry one.
    pub fn what_if(&self) -> Option<&WhatIf> {
        match &self.evidence {
            Evidence::SubpageBlockSize(evidence) => evidence.what_if.as_ref(),
            Evidence::SplitAmplification(evidence) => evidence.what_if.as_ref(),
            Evidence::MergeBlocked(evidence) => evidence.what_if.as_ref(),
            Evidence::RequeuedCommands(evidence) => evidence.what_if.as_ref(),
            _ => None,
        }
    }
}

/// `code` and `evidence`, read together. Only the keys the scenarios read
/// are fields; the codes none of them looks into take any object.
#[derive(Debug, Deserialize)]
#[serde(tag = "code", content = "evidence", rename_all = "snake_case")]
pub enum Evidence {
    SubpageBlockSize(SubpageBlockSize),
    MisalignedStart(Unread),
    MisalignedIoOpt(Unread),
    MisalignedStack(MisalignedStack),
    CryptSectorSize(Unread),
    AtomicWritesLost(AtomicWritesLost),
    SplitAmplification(SplitAmplification),
    MergeBlocked(MergeBlocked),
    RequeuedCommands(RequeuedCommands),
    IoErrors(IoErrors),
}

#[derive(Debug, Deserialize)]
pub struct AtomicWritesLost {
    pub level: String,
    pub partition_start: Option<u64>,
    pub grid_sectors: u64,
    pub atomic_write_unit_max_bytes: u64,
    pub offered_unit_max_bytes: u64,
    pub proposed_start: Option<u64>,
}

/// Evidence no scenario reads.
#[derive(Debug, Deserialize)]
pub struct Unread {}

#[derive(Debug, Deserialize)]
pub struct SubpageBlockSize {
    pub block_size: u64,
    pub what_if: Option<WhatIf>,
}

#[derive(Debug, Deserialize)]
pub struct MisalignedStack {
    pub stack_kind: String,
    pub bottom_device: String,
    pub bottom_start: u64,
    pub granularity: u64,
    pub offset_bytes: u64,
    pub alignment_offset: u64,
    pub culprit_device: String,
    pub culprit_via: String,
    pub culprit_offset_sectors: i64,
    pub proposed_offset_sectors: i64,
}

#[derive(Debug, Deserialize)]
pub struct SplitAmplification {
    pub cause: String,
    /// Cause `crypt_max_io` only.
    pub crypt_max_io_bytes: Option<u64>,
    /// A `max_sectors` split a setting can fix.
    pub proposed_max_sectors_kb: Option<u64>,
    /// Where the device's `max_sectors_kb` comes from.
    pub max_sectors_source: Option<String>,
    pub what_if: Option<WhatIf>,
}

#[derive(Debug, Deserialize)]
pub struct MergeBlocked {
    pub what_if: Option<WhatIf>,
}

#[derive(Debug, Deserialize)]
pub struct RequeuedCommands {
    pub cause: Option<String>,
    /// virtio disks only.
    pub virtio_indirect_desc: Option<bool>,
    pub what_if: Option<WhatIf>,
}

#[derive(Debug, Deserialize)]
pub struct IoErrors {
    /// Failed commands by status name.
    pub errors: BTreeMap<String, u64>,
}

/// What a diagnosis's fix would buy.
#[derive(Debug, Deserialize)]
pub struct WhatIf {
    pub commands_now: u64,
    pub commands_after_fix: u64,
    #[serde(deserialize_with = "nullable")]
    pub time_now_ms: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub time_after_fix_ms: Option<f64>,
    /// Why the times are null.
    #[serde(deserialize_with = "nullable")]
    pub time_unavailable: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub service_model: Option<ServiceModel>,
    /// `observed`, `partly_observed` or `one_per_page`.
    #[serde(deserialize_with = "nullable")]
    pub segments: Option<String>,
}

/// The fit a what-if's times come from; printed whole in a check.
#[derive(Debug, Deserialize, Serialize)]
pub struct ServiceModel {
    pub commands_fitted: u64,
    pub per_command_ms: f64,
    pub ms_per_mib: f64,
    pub in_flight: f64,
    pub ceiling_mib_per_s: f64,
    pub busy_ms: f64,
    pub span_ms: f64,
    pub bound: String,
}

/// `run`: the command and what its writes became.
#[derive(Debug, Deserialize)]
pub struct Run {
    /// Left out when the command was not timed.
    pub command_s: Option<f64>,
    pub paused_opens: u64,
    pub targets: Vec<RunTarget>,
    /// When the tree used io_uring, or it cannot be followed here.
    pub io_uring: Option<Uring>,
    /// When a diagnosis of a device it wrote carries a what-if.
    pub time_with_fix: Option<TimeWithFix>,
    /// Each proposed fix's own estimate, when there are several.
    #[serde(default)]
    pub time_with_each_fix: Vec<TimeWithFix>,
}

impl Run {
    pub fn target(&self, device: &str) -> Option<&RunTarget> {
        self.targets.iter().find(|target| target.device == device)
    }
}

#[derive(Debug, Deserialize)]
pub struct RunTarget {
    pub device: String,
    pub write_syscalls: u64,
    pub write_syscall_bytes: u64,
    pub aio_writes: u64,
    pub uring_writes: u64,
    pub bios: u64,
    pub commands: u64,
    pub summary: String,
    /// Write calls refused, by errno name.
    #[serde(default)]
    pub failed_writes: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    pub atomic_writes: Option<AtomicWrites>,
}

/// Untorn writes a run or report followed to their commands.
#[derive(Debug, Deserialize)]
pub struct AtomicWrites {
    pub proven: u64,
    pub not_proven: u64,
    pub reasons: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
pub struct Uring {
    /// Why this kernel's io_uring submissions are not followed.
    pub unsupported: Option<String>,
}

/// `run.time_with_fix`; printed whole in a check.
#[derive(Debug, Deserialize, Serialize)]
pub struct TimeWithFix {
    pub code: String,
    pub device: String,
    pub run_s: f64,
    #[serde(deserialize_with = "nullable")]
    pub device_busy_s: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub run_after_fix_s: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub speedup: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub unavailable: Option<String>,
    pub commands_now: u64,
    pub commands_after_fix: u64,
    pub pays_little: bool,
    pub reads_after_fix: u64,
    /// With one command size: the run's time with the fix at both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_after_fix_bounds_s: Option<TimeBounds>,
}

/// `run_after_fix_bounds_s`: each command the same cost, or each byte.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
pub struct TimeBounds {
    pub iops_bound: f64,
    pub bandwidth_bound: f64,
}

/// Who caused the I/O, per view.
#[derive(Debug, Default, Deserialize)]
pub struct Attribution {
    pub processes: Vec<OwnerEntry>,
    pub cgroups: Vec<OwnerEntry>,
    pub files: Vec<OwnerEntry>,
}

/// One owner on one device. Each view sets the fields that name its owners.
#[derive(Debug, Deserialize)]
pub struct OwnerEntry {
    pub owner: Owner,
    pub device: String,
    pub pid: Option<u64>,
    pub comm: Option<String>,
    pub cgroup: Option<String>,
    pub cgroup_id: Option<u64>,
    pub path: Option<String>,
    /// Written only when true.
    #[serde(default)]
    pub direct: bool,
    pub measures: OwnerMeasures,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    Known,
    KernelThread,
    NoFile,
    Unknown,
    Other,
}

#[derive(Debug, Deserialize)]
pub struct OwnerMeasures {
    pub bytes: u64,
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A whole report with nothing in it, as the tracer writes one; tests
    /// put their parts into it.
    pub fn empty_report() -> serde_json::Value {
        let mut events: serde_json::Map<String, serde_json::Value> = EventKind::ALL
            .into_iter()
            .map(|kind| (kind.json_key().to_string(), 0.into()))
            .collect();
        for key in ["dropped", "syscall_dropped", "read_failed", "missed"] {
            events.insert(key.to_string(), 0.into());
        }
        serde_json::json!({
            "schema": "iosplit-trace/report",
            "schema_version": 1,
            "duration_s": 1.5,
            "events": events,
            "correlation": {
                "incomplete": 0, "unmatched_events": 0, "evicted": 0, "aged_out": 0,
                "completion_lost": 0, "ring_dropped": 0, "in_flight": 0,
                "queues_from_remaps": 0, "mirrored_remaps": 0, "stripe_remaps": 0
            },
            "diagnoses": [],
            "other_findings": [],
            "devices": [],
            "unsupported_probes": []
        })
    }

    pub fn distribution() -> serde_json::Value {
        serde_json::json!({"count": 0, "min": 0, "max": 0, "mean": 0.0,
                           "p50": 0, "p90": 0, "p99": 0, "buckets": []})
    }

    /// One op's measures with every key `OpMeasures` serializes.
    pub fn op_measures(commands: u64) -> serde_json::Value {
        let d = distribution();
        serde_json::json!({
            "user_ios": 4, "fragments": 64, "commands": commands, "disk_commands": 0,
            "bytes": 4194304, "splits": 60, "split_user_ios": 4, "merges": 0,
            "amplification": 16.0, "misaligned_pbs_commands": 0, "misaligned_4k_commands": 0,
            "split_causes": {"chunk_boundary": 60},
            "user_io_size": d, "command_size": d, "fragments_per_io": d, "commands_per_io": d,
            "queue_to_complete_us": d, "queue_to_issue_us": d, "issue_to_complete_us": d,
            "dominant": "device", "requeues": 0, "requeue_delay_us": d,
            "failed_commands": 0, "failed_user_ios": 0, "errors": {}
        })
    }

    /// A `run` report fragment with the keys of the tracer's serializers
    /// (`Report`, `DeviceReport`, `Diagnosis`, `WhatIf`, `RunReport`,
    /// `OwnerEntry`), hand-written.
    fn run_report() -> serde_json::Value {
        let mut report = empty_report();
        report["events"]["queue"] = 4.into();
        report["events"]["requeue"] = 2.into();
        report["correlation"]["in_flight"] = 1.into();
        report["devices"] = serde_json::json!([{
            "name": "vda",
            "dev": "254:0",
            "geometry": {"name": "vda", "dev": "254:0", "size_sectors": 524288,
                         "logical_block_size": 512, "physical_block_size": 4096,
                         "partitions": []},
            "geometry_known": true,
            "measures": {"ops": {"write": op_measures(64)}},
            "partitions": [{
                "name": "vda1", "dev": "254:1",
                "geometry": {"name": "vda1", "dev": "254:1", "number": 1, "start": 1785,
                             "size": 400001, "alignment_offset": 3584, "block_size": 512},
                "geometry_known": true,
                "measures": {"ops": {"write": op_measures(9), "flush": op_measures(1)}},
                "gone": false
            }],
            "gone": false,
            "service": {}
        }, {
            "name": "dm-0", "dev": "253:0",
            "geometry": {"name": "dm-0", "stack": {"kind": "dm-crypt", "uuid": "CRYPT-LUKS2-x",
                "crypt_sector_size": 4096, "chunk_sectors": 0,
                "legs": [{"top_sector": 0, "levels": [], "bottom_start": 2048,
                          "bottom": {"name": "vda", "dev": "254:0"}}]}},
            "geometry_known": true,
            "measures": {"ops": {}},
            "partitions": [],
            "gone": false,
            "service": {}
        }]);
        let what_if = serde_json::json!({
            "commands_now": 64, "commands_after_fix": 8,
            "time_now_ms": 12.5, "time_after_fix_ms": null,
            "time_unavailable": "too_few_commands", "service_model": null,
            "busy_ms": 3.25, "segments": "observed"
        });
        report["diagnoses"] = serde_json::json!([
            {"code": "split_amplification", "device": "vda1", "severity": "warning",
             "evidence": {"cause": "max_sectors", "causes": {"max_sectors": 60}, "splits": 60,
                          "proposed_max_sectors_kb": 1024, "what_if": what_if},
             "explanation": "Each write is cut.", "fix": "echo 1024 > max_sectors_kb"},
            {"code": "requeued_commands", "device": "vda", "severity": "warning",
             "evidence": {"requeues": 2, "commands": 64, "virtio_indirect_desc": false,
                          "cause": "virtio_ring_full"},
             "explanation": "The ring was full.", "fix": "indirect_desc=on (bit 28)"},
            {"code": "subpage_block_size", "device": "vda1", "severity": "info",
             "evidence": {"block_size": 512, "block_size_source": "BLKBSZGET",
                          "partition_start": 1785, "partition_size": 400001},
             "explanation": "", "fix": ""},
            {"code": "misaligned_start", "device": "vda1", "severity": "warning",
             "evidence": {"granularity": 4096, "offset_bytes": 512, "partition_start": 1785},
             "explanation": "", "fix": ""},
            {"code": "io_errors", "device": "dm-0", "severity": "critical",
             "evidence": {"failed_commands": 4, "errors": {"EIO": 4}, "failed_ops": {}},
             "explanation": "", "fix": ""}
        ]);
        report["run"] = serde_json::json!({
            "command": ["dd", "of=/dev/vda1"], "exit_status": 0, "command_s": 0.26,
            "paused_opens": 1, "paused_s": 0.001, "processes": 1,
            "targets": [{"device": "vda1", "write_syscalls": 16, "write_syscall_bytes": 65536,
                         "write_syscall_size": distribution(), "aio_writes": 0,
                         "aio_write_bytes": 0, "uring_writes": 16, "uring_write_bytes": 65536,
                         "fsync_calls": 0, "partial_pages": 0, "bios": 16,
                         "bio_size": distribution(), "commands": 9,
                         "commands_per_write": distribution(),
                         "writes_per_command": distribution(),
                         "summary": "dd issued 16 writes"}],
            "background": {"ops": {}},
            "io_uring": {"writes": 16, "syncs": 0, "sqpoll": 0, "punted_to_io_wq": 0,
                         "fixed_files_not_followed": 0, "not_followed": 0},
            "time_with_fix": {"code": "split_amplification", "device": "vda1", "run_s": 0.26,
                              "device_busy_s": 0.055, "run_after_fix_s": 0.2, "speedup": 1.3,
                              "unavailable": null, "commands_now": 64,
                              "commands_after_fix": 8, "pays_little": false,
                              "reads_after_fix": 0}
        });
        report["attribution"] = serde_json::json!({
            "processes": [{"owner": "kernel_thread", "device": "vda", "measures": {"bytes": 8}}],
            "cgroups": [{"owner": "known", "cgroup": "/a", "cgroup_id": 23, "device": "vda",
                         "measures": {"bytes": 8}}],
            "files": [{"owner": "known", "path": "/mnt/b.dat", "direct": true, "device": "vda",
                       "measures": {"bytes": 4}}],
            "folded": {"processes": 0, "cgroups": 0, "files": 0}
        });
        report
    }

    fn read(value: serde_json::Value) -> Result<Report, String> {
        serde_json::from_value(value).map_err(|err| err.to_string())
    }

    #[test]
    fn a_run_report_reads_with_the_tracers_keys() {
        let report = read(run_report()).unwrap();
        assert_eq!(report.events.count(EventKind::Queue), 4);
        assert_eq!(report.events.count(EventKind::Requeue), 2);
        assert_eq!(report.correlation.in_flight, 1);
        let part = report.device("vda1").unwrap();
        assert_eq!(part.dev, "254:1");
        assert_eq!(part.writes().unwrap().commands, 9);
        let crypt = report.device("dm-0").unwrap();
        let stack = crypt.geometry.stack.as_ref().unwrap();
        assert_eq!(
            (stack.kind.as_str(), stack.crypt_sector_size),
            ("dm-crypt", Some(4096))
        );
        assert_eq!(stack.legs[0].bottom.name, "vda");
        assert!(crypt.writes().is_none());

        let codes: Vec<Code> = report.diagnoses.iter().map(Diagnosis::code).collect();
        assert_eq!(
            codes,
            [
                Code::SplitAmplification,
                Code::RequeuedCommands,
                Code::SubpageBlockSize,
                Code::MisalignedStart,
                Code::IoErrors
            ]
        );
        let split = report.diagnosis("vda1", Code::SplitAmplification).unwrap();
        assert_eq!(split.cause(), Some("max_sectors"));
        assert_eq!(split.severity, Severity::Warning);
        let what_if = split.what_if().unwrap();
        assert_eq!((what_if.commands_now, what_if.commands_after_fix), (64, 8));
        assert_eq!(what_if.time_after_fix_ms, None);
        assert_eq!(what_if.segments.as_deref(), Some("observed"));
        let Evidence::RequeuedCommands(requeued) = &report.diagnoses[1].evidence else {
            panic!("requeued_commands");
        };
        assert_eq!(requeued.virtio_indirect_desc, Some(false));
        assert_eq!(report.diagnoses[2].block_size(), Some(512));
        let Evidence::IoErrors(errors) = &report.diagnoses[4].evidence else {
            panic!("io_errors");
        };
        assert_eq!(errors.errors["EIO"], 4);

        let run = report.run.as_ref().unwrap();
        assert_eq!(run.paused_opens, 1);
        assert_eq!(run.target("vda1").unwrap().uring_writes, 16);
        assert!(run.io_uring.as_ref().unwrap().unsupported.is_none());
        assert!(!run.time_with_fix.as_ref().unwrap().pays_little);
        let attribution = report.attribution.as_ref().unwrap();
        assert_eq!(attribution.processes[0].owner, Owner::KernelThread);
        assert!(attribution.files[0].direct);
        assert_eq!(attribution.cgroups[0].cgroup_id, Some(23));
    }

    #[test]
    fn a_renamed_key_fails_the_load_instead_of_reading_as_zero() {
        let mut renamed = run_report();
        let events = renamed["events"].as_object_mut().unwrap();
        let queue = events.remove("queue").unwrap();
        events.insert("queued".into(), queue);
        assert!(read(renamed).unwrap_err().contains("`queue`"));

        let mut renamed = run_report();
        let ops = &mut renamed["devices"][0]["measures"]["ops"]["write"];
        ops.as_object_mut().unwrap().remove("commands");
        assert!(read(renamed).unwrap_err().contains("`commands`"));

        // A key written as null must still be written.
        let mut renamed = run_report();
        let what_if = &mut renamed["diagnoses"][0]["evidence"]["what_if"];
        what_if.as_object_mut().unwrap().remove("time_after_fix_ms");
        assert!(read(renamed).is_err());

        let mut unknown = run_report();
        unknown["diagnoses"][0]["code"] = "split_amplified".into();
        assert!(read(unknown).is_err());
    }

    #[test]
    fn an_audit_reads_without_traffic() {
        let audit: Audit = serde_json::from_value(serde_json::json!({
            "schema": "iosplit-trace/check",
            "schema_version": 1,
            "diagnoses": [{
                "code": "misaligned_stack", "device": "dm-1", "severity": "warning",
                "evidence": {
                    "stack_kind": "dm-linear",
                    "stack": [{"device": "vda1", "via": "linear", "start_sectors": 3}],
                    "bottom_device": "vda", "bottom_start": 2051, "granularity": 4096,
                    "offset_bytes": 1536, "alignment_offset": 2560,
                    "kernel_alignment_offset": 2560, "physical_block_size": 4096,
                    "minimum_io_size": 4096, "misaligned_legs": 1, "legs": 1,
                    "culprit_device": "dm-1", "culprit_via": "linear",
                    "culprit_offset_sectors": 3, "proposed_offset_sectors": 8
                },
                "explanation": "", "fix": "dmsetup reload"
            }],
            "devices": [{"name": "dm-1", "dev": "253:1",
                         "geometry": {"name": "dm-1"}, "geometry_known": true,
                         "measures": {"ops": {}}, "partitions": [], "gone": false,
                         "service": {}}]
        }))
        .unwrap();
        let finding = audit.diagnosis("dm-1", Code::MisalignedStack).unwrap();
        let Evidence::MisalignedStack(stack) = &finding.evidence else {
            panic!("misaligned_stack");
        };
        assert_eq!(
            (stack.alignment_offset, stack.proposed_offset_sectors),
            (2560, 8)
        );
        assert!(audit.device("dm-1").is_some());
    }

    #[test]
    fn printed_parts_keep_the_tracers_json() {
        let report = read(run_report()).unwrap();
        let estimate = report.run.unwrap().time_with_fix.unwrap();
        let json = serde_json::to_value(&estimate).unwrap().to_string();
        assert_eq!(
            json,
            r#"{"code":"split_amplification","commands_after_fix":8,"commands_now":64,"device":"vda1","device_busy_s":0.055,"pays_little":false,"reads_after_fix":0,"run_after_fix_s":0.2,"run_s":0.26,"speedup":1.3,"unavailable":null}"#
        );
        let written = run_report()["run"]["time_with_fix"].to_string();
        assert_eq!(json, written, "as the report's own object prints");
    }
}
