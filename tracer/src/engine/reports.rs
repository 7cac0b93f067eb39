//! What the engine reports: measures per device and per origin, and diagnoses.

use super::devices::DeviceState;
use super::stats::{self, OpStats, ALL_ORIGINS, OP_COUNT};
use super::{attribution, diagnose, Engine, OriginMeasures};
use crate::geometry::{DevId, DiskGeometry};
use crate::model::{DeviceReport, Finding, Op, PartitionReport};

impl Engine {
    /// Per disk (its own and its partitions' traffic), partitions inside.
    pub fn devices(&self) -> Vec<DeviceReport> {
        self.devices
            .iter()
            .map(|device| {
                let mut disk_total: [Option<OpStats>; OP_COUNT] = Default::default();
                device.whole.collect_into(&ALL_ORIGINS, &mut disk_total);
                let partitions = device
                    .parts
                    .iter()
                    .map(|part| {
                        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
                        part.stats.collect_into(&ALL_ORIGINS, &mut per_op);
                        part.stats.collect_into(&ALL_ORIGINS, &mut disk_total);
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
                    geometry: self.reported_geometry(device),
                    geometry_known: device.known,
                    measures: stats::measures(&disk_total),
                    partitions,
                    gone: device.gone,
                    service: Op::ALL
                        .iter()
                        .filter_map(|&op| {
                            let fit = device.service[stats::op_index(op)].fit().ok()?;
                            Some((op, fit.to_model()))
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// A device's geometry as known, or, for one the geometry does not
    /// know, what the trace showed of it: request-based when it issued
    /// commands (the engine then matched its completions as requests').
    fn reported_geometry(&self, device: &DeviceState) -> DiskGeometry {
        let mut geometry = device.geometry.clone();
        if !device.known {
            geometry.request_based = !device.bio_based();
        }
        geometry
    }

    /// Per disk and partition with traffic: the tracked processes' I/O vs the rest.
    pub fn origins(&self) -> Vec<OriginMeasures> {
        let mut origins = Vec::new();
        for device in &self.devices {
            let mut disk_tracked: [Option<OpStats>; OP_COUNT] = Default::default();
            let mut disk_other: [Option<OpStats>; OP_COUNT] = Default::default();
            device.whole.collect_into(&[true], &mut disk_tracked);
            device.whole.collect_into(&[false], &mut disk_other);
            let mut partitions = Vec::new();
            for part in &device.parts {
                let mut tracked: [Option<OpStats>; OP_COUNT] = Default::default();
                let mut other: [Option<OpStats>; OP_COUNT] = Default::default();
                part.stats.collect_into(&[true], &mut tracked);
                part.stats.collect_into(&[false], &mut other);
                part.stats.collect_into(&[true], &mut disk_tracked);
                part.stats.collect_into(&[false], &mut disk_other);
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
    /// the diagnoses only traffic can support, most severe first. Typed
    /// findings: `crate::explain::diagnoses` words them for a report.
    pub fn diagnoses(&self) -> Vec<Finding> {
        let mut found = diagnose::diagnose(&self.devices, &self.dirty);
        found.sort_by(|left, right| {
            right
                .severity
                .cmp(&left.severity)
                .then_with(|| left.device.cmp(&right.device))
                .then_with(|| left.code.cmp(&right.code))
        });
        found
    }
}

impl Engine {
    /// Who caused the I/O: the top `top` owners per view, by commands, on
    /// each disk or partition; paths are left for the frontend to resolve.
    pub fn attribution(&self, top: usize) -> crate::model::Attribution {
        self.attribution.report(top, |place| self.place_name(place))
    }

    /// Every owner entry with its counters only (see `AttributionTables::counts`).
    pub fn attribution_counts(&self) -> crate::model::Attribution {
        self.attribution.counts(|place| self.place_name(place))
    }

    /// The disk or partition name of an attribution place.
    fn place_name(&self, (disk, part): attribution::Place) -> String {
        let Some(device) = self.devices.get(disk as usize) else {
            return String::new();
        };
        match device.parts.get(part as usize) {
            Some(part) => part.name.clone(),
            None => device.name.clone(),
        }
    }
}
