//! What the engine itself counted on the devices `run` touched: the
//! tracked processes' writes per device, and other tasks' traffic beside
//! them. These read the engine's per-device counters, not block events.

use crate::engine::stats::{self, OpStats, OP_COUNT};
use crate::engine::Engine;
use crate::model::{Measures, Op, OpMeasures};

impl Engine {
    /// Writes the tracked processes queued on `device` itself (a partition's
    /// own, or a whole disk's not through a partition), as measures.
    pub fn tracked_writes_on(&self, device: &str) -> Option<OpMeasures> {
        let stats = self.devices.iter().find_map(|disk| {
            if disk.name == device {
                return Some(&disk.whole);
            }
            disk.parts
                .iter()
                .find(|part| part.name == device)
                .map(|part| &part.stats)
        })?;
        stats
            .get(true, Op::Write)
            .filter(|writes| writes.user_ios > 0)
            .map(OpStats::to_model)
    }

    /// Other tasks' traffic on `devices` (a named disk with its partitions,
    /// or a named partition alone), summed per op.
    pub fn other_traffic_on(&self, devices: &[String]) -> Measures {
        let named = |name: &str| devices.iter().any(|device| device == name);
        let mut per_op: [Option<OpStats>; OP_COUNT] = Default::default();
        for disk in &self.devices {
            let whole_disk = named(&disk.name);
            if whole_disk {
                disk.whole.collect_into(&[false], &mut per_op);
            }
            for part in disk
                .parts
                .iter()
                .filter(|part| whole_disk || named(&part.name))
            {
                part.stats.collect_into(&[false], &mut per_op);
            }
        }
        stats::measures(&per_op)
    }

    /// Disks (their own traffic) and partitions the tracked processes wrote.
    pub fn devices_written_by_tracked(&self) -> Vec<String> {
        let mut written = Vec::new();
        for disk in &self.devices {
            if self.tracked_writes_on(&disk.name).is_some() {
                written.push(disk.name.clone());
            }
            for part in &disk.parts {
                if part
                    .stats
                    .get(true, Op::Write)
                    .is_some_and(|w| w.user_ios > 0)
                {
                    written.push(part.name.clone());
                }
            }
        }
        written
    }
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
