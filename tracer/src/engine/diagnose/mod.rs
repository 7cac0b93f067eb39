//! Diagnoses, one file per code. Each is a [`Check`]: what geometry alone
//! shows (the static audit, `check`), what one disk's or partition's traffic
//! shows, or both, and the predicted effect of its fix. [`CHECKS`] lists
//! them all; the audit ([`crate::engine::audit::audit_partition`]) and the
//! live diagnosis here walk that one list.
//!
//! A check decides; it does not write. Its [`Finding`] holds the numbers,
//! the severity and the fix it chose (`model/fix.rs`), which its what-if
//! replays; `crate::explain` words it for the report.
//!
//! The live diagnosis enriches the audit's findings with what the traffic
//! showed, and adds those only traffic can support. A code the audit raised
//! for a device is not raised again from its traffic.
//!
//! A new code touches: its row in `model/code.rs`, its evidence struct and
//! `Evidence` variant (`model/evidence.rs`; the compiler then asks for its
//! arm in each of `Evidence`'s accessors), one file here and its line in
//! [`CHECKS`], one file in `crate::explain` (its words and who pays) and its
//! arms in `words` and `who_pays`, the arms of `frontend/words.rs`'s
//! per-code matches, its line in the README's "What it finds",
//! `docs/diagnoses.md`, its evidence keys in `docs/json-schema.md`, and
//! events in `tests/docs.rs`'s synthetic recording that raise it.

mod atomic_writes_lost;
mod crypt_sector_size;
mod io_errors;
mod merge_blocked;
mod misaligned_io_opt;
pub(crate) mod misaligned_stack;
mod misaligned_start;
mod requeued_commands;
mod split_amplification;
mod subpage_block_size;

/// Diagnoses for one disk and its partitions from geometry alone
/// (`subpage_block_size`, `misaligned_start`, `misaligned_io_opt`), and for
/// a stacked device, for where its data lands below (`misaligned_stack`).
pub fn audit_disk(disk: &DiskGeometry) -> Vec<Finding> {
    let mut found: Vec<Finding> = disk
        .partitions
        .iter()
        .flat_map(|part| audit_partition(disk, part))
        .collect();
    if let Some(stack) = &disk.stack {
        let audit = StackAudit { top: disk, stack };
        found.extend(CHECKS.iter().filter_map(|check| check.audit_stack(&audit)));
    }
    found
}

/// Diagnoses for one partition of `disk`, in the order misaligned_start,
/// misaligned_io_opt, subpage_block_size.
pub fn audit_partition(disk: &DiskGeometry, part: &PartitionGeometry) -> Vec<Finding> {
    let placement = Placement::of(disk, part.start);
    let audit = PartitionAudit {
        disk,
        part,
        placement,
        proposal: propose(disk, part, &placement),
    };
    CHECKS
        .iter()
        .filter_map(|check| check.audit(&audit))
        .collect()
}

#[cfg(test)]
pub use split_amplification::MIN_SPLITS;

use misaligned_stack::StackAudit;

use super::accounting::{Accounting, DeviceMeasures, DirtyStats, DIRTY_SIZES};
use super::devices::{DeviceState, Devices};
use super::placement::{place_of, propose, PartitionAudit, Placement};
use super::service::ServiceFit;
use super::service::ServiceSamples;
use super::stats::{op_index, quantile_bytes, OpStats, ALL_ORIGINS, OP_COUNT};
use super::table::FastMap;
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{
    ratio, Code, DirtyBuffers, Finding, LiveEvidence, ObservedTraffic, Op, PartitionPlace,
    TimeBounds, TimeUnavailable, WhatIf, WhatIfScope,
};

/// One diagnosis code: its static side, its live side, or both, and its
/// fix's predicted effect. Every method has a default, so a code implements
/// only the sides it has.
pub(crate) trait Check: Sync {
    /// The code its diagnoses carry.
    fn code(&self) -> Code;

    /// From geometry alone: one partition of a disk.
    fn audit(&self, _partition: &PartitionAudit<'_>) -> Option<Finding> {
        None
    }

    /// From geometry alone: one device-mapper or md device and its stack.
    fn audit_stack(&self, _stack: &StackAudit<'_>) -> Option<Finding> {
        None
    }

    /// From the traffic of one disk (its own) or one partition.
    fn diagnose(&self, _traffic: &DeviceTraffic<'_>) -> Option<Finding> {
        None
    }

    /// Sets the predicted effect of the fix `finding` proposes (one of this
    /// code's, on the traffic's device) into its evidence.
    fn what_if(&self, _finding: &mut Finding, _traffic: &DeviceTraffic<'_>) {}
}

/// Every diagnosis code, once. The order is the audit's order on one
/// partition, and the live order on one device.
pub(crate) const CHECKS: &[&dyn Check] = &[
    &misaligned_start::MisalignedStart,
    &misaligned_io_opt::MisalignedIoOpt,
    &misaligned_stack::MisalignedStack,
    &crypt_sector_size::CryptSectorSize,
    &atomic_writes_lost::AtomicWritesLost,
    &subpage_block_size::SubpageBlockSize,
    &split_amplification::SplitAmplification,
    &merge_blocked::MergeBlocked,
    &requeued_commands::RequeuedCommands,
    &io_errors::IoErrors,
];

fn check_of(code: Code) -> Option<&'static dyn Check> {
    CHECKS.iter().copied().find(|check| check.code() == code)
}

/// One disk's own traffic, or one partition's: what a diagnosis is about.
pub(crate) struct DeviceTraffic<'a> {
    name: String,
    device: &'a DeviceState,
    partition: Option<&'a PartitionGeometry>,
    /// Data operations (everything but flushes), all origins.
    total: OpStats,
    /// The operation with the most user I/Os, which the findings' counts name.
    main_op: Op,
    /// Each operation on its own, all origins.
    per_op: [Option<OpStats>; OP_COUNT],
    dirty: Option<&'a DirtyStats>,
    /// Per op: the disk's commands' service times, when it had any.
    service: Option<&'a [ServiceSamples; OP_COUNT]>,
}

impl DeviceTraffic<'_> {
    fn disk_name(&self) -> &str {
        &self.device.name
    }

    fn op(&self, op: Op) -> Option<&OpStats> {
        self.per_op[op_index(op)].as_ref()
    }
}

fn traffic_of<'a>(
    device: &'a DeviceState,
    measures: Option<&'a DeviceMeasures>,
    dirty: &'a FastMap<u32, DirtyStats>,
) -> Vec<DeviceTraffic<'a>> {
    let mut observed = Vec::with_capacity(device.parts.len() + 1);
    let build = |name: String,
                 stats: Option<&super::stats::DeviceStats>,
                 partition: Option<&'a PartitionGeometry>,
                 dev: Option<u32>| {
        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
        if let Some(stats) = stats {
            stats.collect_into(&ALL_ORIGINS, &mut per_op);
        }
        let mut total = OpStats::default();
        let mut main_op = Op::Write;
        let mut main_count = 0;
        for op in Op::ALL {
            if op == Op::Flush {
                continue;
            }
            if let Some(stats) = &per_op[op_index(op)] {
                total.absorb(stats);
                if stats.user_ios > main_count {
                    main_count = stats.user_ios;
                    main_op = op;
                }
            }
        }
        DeviceTraffic {
            name,
            device,
            partition,
            total,
            main_op,
            per_op,
            dirty: dev.and_then(|dev| dirty.get(&dev)),
            service: measures.map(|measures| &measures.service),
        }
    };
    let whole = measures.map(|measures| &measures.whole);
    observed.push(build(device.name.clone(), whole, None, device.dev));
    for (index, part) in device.parts.iter().enumerate() {
        observed.push(build(
            part.name.clone(),
            measures.and_then(|measures| measures.part(index)),
            Some(&part.geometry),
            Some(part.dev),
        ));
    }
    observed
}

pub(super) fn diagnose(devices: &Devices, accounting: &Accounting) -> Vec<Finding> {
    diagnose_with(devices, accounting, audit_disk)
}

/// [`diagnose`] with the static audit passed in, so tests can supply findings.
pub(super) fn diagnose_with(
    devices: &Devices,
    accounting: &Accounting,
    audit: impl Fn(&DiskGeometry) -> Vec<Finding>,
) -> Vec<Finding> {
    let mut found = Vec::new();
    for (disk, device) in devices.iter().enumerate() {
        let first_of_device = found.len();
        let mut audited = if device.known {
            audit(&device.geometry)
        } else {
            Vec::new()
        };
        let observed = traffic_of(device, accounting.device(disk), accounting.dirty());
        for finding in &mut audited {
            let traffic = observed
                .iter()
                .find(|traffic| traffic.name == finding.device);
            if let (Some(traffic), Some(live)) = (traffic, finding.evidence.live_mut()) {
                add_live_evidence(live, traffic);
            }
        }
        for traffic in &observed {
            for check in CHECKS {
                let audited_here = audited
                    .iter()
                    .any(|finding| finding.code == check.code() && finding.device == traffic.name);
                if !audited_here {
                    found.extend(check.diagnose(traffic));
                }
            }
        }
        found.extend(audited);
        for finding in &mut found[first_of_device..] {
            let traffic = observed.iter().find(|t| t.name == finding.device);
            if let (Some(traffic), Some(check)) = (traffic, check_of(finding.code)) {
                check.what_if(finding, traffic);
                add_times(finding, traffic);
            }
        }
    }
    found
}

/// The what-ifs' device times: their commands, now and after the fix,
/// replayed through the disk's service model of the op they counted.
fn add_times(finding: &mut Finding, traffic: &DeviceTraffic<'_>) {
    let (op, stats) = match finding.evidence.what_if_scope() {
        WhatIfScope::Op(op) => (op, traffic.op(op)),
        WhatIfScope::AllData => (traffic.main_op, Some(&traffic.total)),
        WhatIfScope::NoWhatIf => return,
    };
    let Some(stats) = stats else {
        return;
    };
    let samples = traffic
        .service
        .map_or_else(ServiceSamples::default, |service| service[op_index(op)]);
    let samples = &samples;
    let fit = samples.fit();
    // Said even where no model fits: a run that took seconds while its
    // device was busy milliseconds spent them on something else.
    let busy_ms = (samples.commands() > 0).then(|| round3(samples.busy_ns() as f64 / 1e6));
    finding.evidence.for_each_what_if_mut(|what_if| {
        what_if.busy_ms = busy_ms;
        set_times(what_if, &fit, stats.bytes);
    });
}

/// A what-if's times from the fit, or why there are none.
fn set_times(what_if: &mut WhatIf, fit: &Result<ServiceFit, TimeUnavailable>, bytes: u64) {
    match fit {
        Ok(fit) => {
            let ms = |commands| round3(fit.time_ns(commands, bytes) / 1e6);
            what_if.time_now_ms = Some(ms(what_if.commands_now));
            what_if.time_after_fix_ms = Some(ms(what_if.commands_after_fix));
            what_if.time_unavailable = None;
            what_if.service_model = Some(fit.to_model());
        }
        Err(reason) => {
            what_if.time_now_ms = None;
            what_if.time_after_fix_ms = None;
            what_if.time_unavailable = Some(*reason);
            what_if.service_model = None;
            what_if.time_after_fix_bounds_ms = match reason {
                TimeUnavailable::OneCommandSize => what_if.busy_ms.and_then(|busy| {
                    let bounds =
                        TimeBounds::of(busy, what_if.commands_now, what_if.commands_after_fix)?;
                    Some(TimeBounds {
                        iops_bound: round3(bounds.iops_bound),
                        bandwidth_bound: round3(bounds.bandwidth_bound),
                    })
                }),
                _ => None,
            };
        }
    }
}

/// Live numbers added to a static finding when the device saw traffic.
fn add_live_evidence(live: &mut LiveEvidence, traffic: &DeviceTraffic<'_>) {
    let total = &traffic.total;
    if total.user_ios > 0 {
        live.traffic = Some(ObservedTraffic {
            observed_user_ios: total.user_ios,
            observed_bio_size_p50: quantile_bytes(&total.user_io_sectors, 0.5),
            observed_subpage_bio_share: round3(subpage_share(total)),
            observed_commands: total.commands,
            bios_per_command: round3(ratio(total.user_ios, total.commands)),
            misaligned_command_share: round3(ratio(total.misaligned_pbs, total.commands)),
            misaligned_4k_command_share: round3(ratio(total.misaligned_4k, total.commands)),
            extra_split_fragments: total.splits,
        });
    }
    if let Some(dirty) = traffic.dirty {
        live.dirty = Some(DirtyBuffers {
            dirty_buffers: dirty.count,
            dirty_buffer_sizes: (0..DIRTY_SIZES)
                .filter(|&index| dirty.by_size[index] != 0)
                .map(|index| (DirtyStats::size_of(index), dirty.by_size[index]))
                .collect(),
        });
    }
}

/// A partition's place, when its geometry is known.
fn partition_place(partition: Option<&PartitionGeometry>) -> Option<PartitionPlace> {
    partition
        .filter(|partition| partition.size != 0)
        .map(place_of)
}

/// Share of user I/Os smaller than a page.
fn subpage_share(stats: &OpStats) -> f64 {
    let histogram = stats.user_io_sectors.histogram();
    let below = histogram.count_between(1, PAGE_BYTES / SECTOR_BYTES - 1);
    ratio(below, histogram.len())
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_check() {
        let codes: Vec<Code> = CHECKS.iter().map(|check| check.code()).collect();
        for code in Code::ALL {
            assert_eq!(
                codes.iter().filter(|&&listed| listed == code).count(),
                1,
                "{code} in CHECKS: {codes:?}"
            );
        }
        assert_eq!(codes.len(), Code::ALL.len());
    }
}
