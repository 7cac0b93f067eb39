//! What the engine reports: measures per device and per origin, diagnoses,
//! and the totals `run` reads, each read from the registry (what a device
//! is) and the accounting (what was measured on it).

use super::accounting::{Accounting, DeviceMeasures};
use super::attribution;
use super::devices::{DeviceState, Devices};
use super::diagnose;
use super::stats::{self, DeviceStats, OpStats, ALL_ORIGINS, OP_COUNT};
use super::OriginMeasures;
use crate::geometry::{DevId, DiskGeometry};
use crate::model::{DeviceReport, Finding, Measures, Op, OpMeasures, PartitionReport};

/// A disk's own traffic, and partition `part`'s, as measured (none yet: empty).
struct Traffic<'a> {
    measures: Option<&'a DeviceMeasures>,
}

impl<'a> Traffic<'a> {
    fn of(accounting: &'a Accounting, disk: usize) -> Traffic<'a> {
        Traffic {
            measures: accounting.device(disk),
        }
    }

    fn whole(&self) -> Option<&'a DeviceStats> {
        self.measures.map(|measures| &measures.whole)
    }

    fn part(&self, part: usize) -> Option<&'a DeviceStats> {
        self.measures.and_then(|measures| measures.part(part))
    }
}

/// Adds `stats` of the selected origins into `into`, when there are any.
fn collect(stats: Option<&DeviceStats>, origins: &[bool], into: &mut [Option<OpStats>; OP_COUNT]) {
    if let Some(stats) = stats {
        stats.collect_into(origins, into);
    }
}

/// Per disk (its own and its partitions' traffic), partitions inside.
pub(super) fn devices(devices: &Devices, accounting: &Accounting) -> Vec<DeviceReport> {
    devices
        .iter()
        .enumerate()
        .map(|(disk, device)| {
            let traffic = Traffic::of(accounting, disk);
            let mut disk_total: [Option<OpStats>; OP_COUNT] = Default::default();
            collect(traffic.whole(), &ALL_ORIGINS, &mut disk_total);
            let partitions = device
                .parts
                .iter()
                .enumerate()
                .map(|(index, part)| {
                    let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
                    collect(traffic.part(index), &ALL_ORIGINS, &mut per_op);
                    collect(traffic.part(index), &ALL_ORIGINS, &mut disk_total);
                    PartitionReport {
                        name: part.name.clone(),
                        dev: DevId::from_kernel(part.dev).to_string(),
                        geometry: part.geometry.clone(),
                        geometry_known: part.known,
                        measures: stats::measures(&per_op),
                        gone: part.gone,
                    }
                })
                .collect();
            DeviceReport {
                name: device.name.clone(),
                dev: device
                    .dev
                    .map_or_else(String::new, |dev| DevId::from_kernel(dev).to_string()),
                geometry: reported_geometry(device),
                geometry_known: device.known,
                measures: Measures {
                    unpaired_completions: device.unpaired_completions,
                    ..stats::measures(&disk_total)
                },
                partitions,
                gone: device.gone,
                service: Op::ALL
                    .iter()
                    .filter_map(|&op| {
                        let samples = traffic.measures?.service[stats::op_index(op)];
                        let fit = samples.fit().ok()?;
                        Some((op, fit.to_model()))
                    })
                    .collect(),
                // The engine fills them in from the kernel's counts.
                tag_waits: Vec::new(),
                passthrough: Vec::new(),
            }
        })
        .collect()
}

/// A device's geometry as known, or, for one the geometry does not
/// know, what the trace showed of it: request-based when it issued
/// commands (the engine then matched its completions as requests').
fn reported_geometry(device: &DeviceState) -> DiskGeometry {
    let mut geometry = device.geometry.clone();
    if !device.known {
        geometry.request_based = !device.bio_based();
    }
    geometry
}

/// Per disk and partition with traffic: the tracked processes' I/O vs the rest.
pub(super) fn origins(devices: &Devices, accounting: &Accounting) -> Vec<OriginMeasures> {
    let mut origins = Vec::new();
    for (disk, device) in devices.iter().enumerate() {
        let traffic = Traffic::of(accounting, disk);
        let mut disk_tracked: [Option<OpStats>; OP_COUNT] = Default::default();
        let mut disk_other: [Option<OpStats>; OP_COUNT] = Default::default();
        collect(traffic.whole(), &[true], &mut disk_tracked);
        collect(traffic.whole(), &[false], &mut disk_other);
        let mut partitions = Vec::new();
        for (index, part) in device.parts.iter().enumerate() {
            let stats = traffic.part(index);
            let mut tracked: [Option<OpStats>; OP_COUNT] = Default::default();
            let mut other: [Option<OpStats>; OP_COUNT] = Default::default();
            collect(stats, &[true], &mut tracked);
            collect(stats, &[false], &mut other);
            collect(stats, &[true], &mut disk_tracked);
            collect(stats, &[false], &mut disk_other);
            let entry = OriginMeasures {
                device: part.name.clone(),
                tracked: stats::measures(&tracked),
                other: stats::measures(&other),
            };
            if !entry.tracked.ops.is_empty() || !entry.other.ops.is_empty() {
                partitions.push(entry);
            }
        }
        let entry = OriginMeasures {
            device: device.name.clone(),
            tracked: stats::measures(&disk_tracked),
            other: stats::measures(&disk_other),
        };
        if !entry.tracked.ops.is_empty() || !entry.other.ops.is_empty() {
            origins.push(entry);
        }
        origins.extend(partitions);
    }
    origins
}

/// The static audit of each known disk, enriched with live evidence, plus
/// the diagnoses only traffic can support, most severe first; on one
/// device at one severity, the cheapest fix first (a setting before a
/// repartition before a recreated stack).
pub(super) fn diagnoses(devices: &Devices, accounting: &Accounting) -> Vec<Finding> {
    let mut found = diagnose::diagnose(devices, accounting);
    found.sort_by(|left, right| {
        right
            .severity
            .cmp(&left.severity)
            .then_with(|| left.device.cmp(&right.device))
            .then_with(|| left.evidence.fix_cost().cmp(&right.evidence.fix_cost()))
            .then_with(|| left.code.cmp(&right.code))
    });
    found
}

/// The disk or partition name of an attribution place.
pub(super) fn place_name(devices: &Devices, (disk, part): attribution::Place) -> String {
    let Some(device) = devices.iter().nth(disk as usize) else {
        return String::new();
    };
    match device.parts.get(part as usize) {
        Some(part) => part.name.clone(),
        None => device.name.clone(),
    }
}

/// The traffic of the disk or partition named `name`.
fn named_traffic<'a>(
    devices: &Devices,
    accounting: &'a Accounting,
    name: &str,
) -> Option<&'a DeviceStats> {
    devices.iter().enumerate().find_map(|(disk, device)| {
        let traffic = Traffic::of(accounting, disk);
        if device.name == name {
            return Some(traffic.whole());
        }
        device
            .parts
            .iter()
            .position(|part| part.name == name)
            .map(|index| traffic.part(index))
    })?
}

/// Writes the tracked processes queued on `device` itself (a partition's
/// own, or a whole disk's not through a partition), as measures.
pub(super) fn tracked_writes_on(
    devices: &Devices,
    accounting: &Accounting,
    device: &str,
) -> Option<OpMeasures> {
    named_traffic(devices, accounting, device)?
        .get(true, Op::Write)
        .filter(|writes| writes.user_ios > 0)
        .map(OpStats::to_model)
}

/// Other tasks' traffic on `named` (a named disk with its partitions, or a
/// named partition alone), summed per op.
pub(super) fn other_traffic_on(
    devices: &Devices,
    accounting: &Accounting,
    named: &[String],
) -> Measures {
    let is_named = |name: &str| named.iter().any(|device| device == name);
    let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
    for (disk, device) in devices.iter().enumerate() {
        let traffic = Traffic::of(accounting, disk);
        let whole_disk = is_named(&device.name);
        if whole_disk {
            collect(traffic.whole(), &[false], &mut per_op);
        }
        for (index, part) in device.parts.iter().enumerate() {
            if whole_disk || is_named(&part.name) {
                collect(traffic.part(index), &[false], &mut per_op);
            }
        }
    }
    stats::measures(&per_op)
}

/// Disks (their own traffic) and partitions the tracked processes wrote.
pub(super) fn devices_written_by_tracked(
    devices: &Devices,
    accounting: &Accounting,
) -> Vec<String> {
    let wrote = |stats: Option<&DeviceStats>| {
        stats
            .and_then(|stats| stats.get(true, Op::Write))
            .is_some_and(|writes| writes.user_ios > 0)
    };
    let mut written = Vec::new();
    for (disk, device) in devices.iter().enumerate() {
        let traffic = Traffic::of(accounting, disk);
        if wrote(traffic.whole()) {
            written.push(device.name.clone());
        }
        for (index, part) in device.parts.iter().enumerate() {
            if wrote(traffic.part(index)) {
                written.push(part.name.clone());
            }
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use tracer_common::{BlockEvent, EventKind};

    use crate::engine::{Engine, EngineLimits};
    use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
    use crate::model::Op;

    #[test]
    fn background_is_other_tasks_traffic_on_the_devices_named() {
        let part = DevId::new(259, 1);
        let disk = DiskGeometry {
            name: "loop0".into(),
            dev: Some(DevId::new(7, 0)),
            request_based: true,
            partitions: vec![PartitionGeometry {
                name: "loop0p2".into(),
                dev: Some(part),
                start: 1000,
                size: 1000,
                ..PartitionGeometry::default()
            }],
            ..DiskGeometry::default()
        };
        let mut engine = Engine::new(vec![disk], EngineLimits::default());
        engine.track_processes([42]);
        // Through the partition: one write by the command (42), two by others.
        for (n, tgid) in [(0u64, 42u32), (8, 7), (16, 7)] {
            let remap = BlockEvent {
                kind: EventKind::Remap as u8,
                dev: DevId::new(7, 0).to_kernel(),
                sector: 1000 + n,
                nr_sector: 8,
                aux_dev: part.to_kernel(),
                aux_sector: n,
                tgid,
                rwbs: *b"W\0\0\0\0\0\0\0",
                ..BlockEvent::ZERO
            };
            engine.ingest(&remap);
            engine.ingest(&BlockEvent {
                kind: EventKind::Queue as u8,
                ..remap
            });
        }
        // Straight to the disk by another task.
        engine.ingest(&BlockEvent {
            kind: EventKind::Queue as u8,
            dev: DevId::new(7, 0).to_kernel(),
            sector: 0,
            nr_sector: 8,
            tgid: 7,
            rwbs: *b"W\0\0\0\0\0\0\0",
            ..BlockEvent::ZERO
        });
        let on_part = engine.other_traffic_on(&["loop0p2".to_string()]);
        assert_eq!(on_part.op(Op::Write).map(|w| w.user_ios), Some(2));
        let on_disk = engine.other_traffic_on(&["loop0".to_string()]);
        assert_eq!(on_disk.op(Op::Write).map(|w| w.user_ios), Some(3));
        assert_eq!(
            engine.devices_written_by_tracked(),
            vec!["loop0p2".to_string()]
        );
        assert_eq!(engine.tracked_writes_on("loop0").map(|w| w.user_ios), None);
    }
}
