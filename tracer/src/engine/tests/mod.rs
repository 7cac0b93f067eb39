//! Synthetic event sequences of every shape the kernel produces, one file
//! per theme. Here: the fixtures they share (geometries, event builders,
//! lookups, assertions), which explain's tests use too.

mod accounting;
mod atomic;
mod chains;
mod devices;
mod diagnoses;
mod fidelity;
mod owners;
mod requests;
mod requeue;
mod split_findings;
mod stacks;
mod tables;
mod workloads;

use tracer_common::{BlockEvent, EventKind, RWBS_BYTES};

use super::*;
use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
use crate::model::{Code, DeviceReport, Finding, Op, OpMeasures};
use workloads::mixed_workload;
pub(crate) use workloads::{
    max_sectors_splits, misaligned_writes, requeued_tails, split_megabyte_writes,
    unmerged_small_writes,
};

pub(crate) const LOOP0: DevId = DevId::new(7, 0);
pub(crate) const P1: DevId = DevId::new(259, 0);
pub(crate) const P2: DevId = DevId::new(259, 1);
const ZRAM: DevId = DevId::new(252, 0);
const DM: DevId = DevId::new(253, 0);
pub(crate) const MS: u64 = 1_000_000;

fn k(dev: DevId) -> u32 {
    dev.to_kernel()
}

/// loop0: 4 KiB physical blocks, 128 KiB max commands; p1 aligned, p2 not
/// (start 10241, odd size 20001).
pub(crate) fn loop0() -> DiskGeometry {
    DiskGeometry {
        name: "loop0".into(),
        dev: Some(LOOP0),
        size_sectors: 40960,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        max_sectors_kb: 128,
        max_hw_sectors_kb: 2048,
        max_segments: 128,
        max_segment_size: 65536,
        scheduler: "none".into(),
        request_based: true,
        partitions: vec![
            PartitionGeometry {
                name: "loop0p1".into(),
                dev: Some(P1),
                number: 1,
                start: 2048,
                size: 8192,
                ..PartitionGeometry::default()
            },
            PartitionGeometry {
                name: "loop0p2".into(),
                dev: Some(P2),
                number: 2,
                start: 10241,
                size: 20001,
                ..PartitionGeometry::default()
            },
        ],
        ..DiskGeometry::default()
    }
}

fn zram() -> DiskGeometry {
    DiskGeometry {
        name: "zram0".into(),
        dev: Some(ZRAM),
        logical_block_size: 4096,
        physical_block_size: 4096,
        request_based: false,
        ..DiskGeometry::default()
    }
}

fn dm() -> DiskGeometry {
    DiskGeometry {
        name: "dm-0".into(),
        dev: Some(DM),
        logical_block_size: 512,
        physical_block_size: 4096,
        max_sectors_kb: 128,
        request_based: false,
        ..DiskGeometry::default()
    }
}

/// vda on this machine: 4 MiB max_sectors_kb, 254 segments, so a 1 MiB
/// O_DIRECT write of 4 KiB pages splits into 2032 + 16 sectors.
pub(crate) fn vda_like() -> DiskGeometry {
    DiskGeometry {
        max_sectors_kb: 4096,
        max_hw_sectors_kb: 4096,
        max_segments: 254,
        max_segment_size: u32::MAX,
        physical_block_size: 512,
        minimum_io_size: 512,
        ..loop0()
    }
}

/// vda_like as this machine's vda: virtio, no indirect descriptors, 128 tags.
pub(crate) fn virtio_vda() -> DiskGeometry {
    DiskGeometry {
        nr_requests: 256,
        hw_queue_tags: 128,
        virtio_indirect_desc: Some(false),
        ..vda_like()
    }
}

pub(crate) fn engine() -> Engine {
    Engine::new(vec![loop0(), zram(), dm()], EngineLimits::default())
}

fn rwbs(text: &str) -> [u8; RWBS_BYTES] {
    let mut bytes = [0; RWBS_BYTES];
    for (slot, byte) in bytes.iter_mut().zip(text.bytes()) {
        *slot = byte;
    }
    bytes
}

pub(crate) fn event(
    kind: EventKind,
    ts_ns: u64,
    dev: DevId,
    sector: u64,
    nr_sector: u32,
) -> BlockEvent {
    BlockEvent {
        ts_ns,
        sector,
        dev: k(dev),
        nr_sector,
        tgid: 100,
        rwbs: rwbs("W"),
        kind: kind as u8,
        ..BlockEvent::ZERO
    }
}

pub(crate) fn queue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Queue, ts, dev, sector, nr)
}
pub(crate) fn issue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Issue, ts, dev, sector, nr)
}
pub(crate) fn complete(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Complete, ts, dev, sector, nr)
}
pub(crate) fn backmerge(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Backmerge, ts, dev, sector, nr)
}
fn split(ts: u64, dev: DevId, sector: u64, new_sector: u64) -> BlockEvent {
    BlockEvent {
        aux_sector: new_sector,
        ..event(EventKind::Split, ts, dev, sector, 0)
    }
}
fn remap(ts: u64, dev: DevId, sector: u64, nr: u32, old: DevId, old_sector: u64) -> BlockEvent {
    BlockEvent {
        aux_dev: k(old),
        aux_sector: old_sector,
        ..event(EventKind::Remap, ts, dev, sector, nr)
    }
}
fn bio_complete(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::BioComplete, ts, dev, sector, nr)
}

fn requeue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Requeue, ts, dev, sector, nr)
}

/// An issue or completion naming its request (raw tracepoints' hctx and tag).
fn named(event: BlockEvent, request: u64) -> BlockEvent {
    BlockEvent {
        aux_sector: request,
        ..event
    }
}

pub(crate) fn feed(engine: &mut Engine, events: &[BlockEvent]) {
    for event in events {
        engine.ingest(event);
    }
}

fn device<'a>(reports: &'a [DeviceReport], name: &str) -> &'a DeviceReport {
    reports
        .iter()
        .find(|report| report.name == name)
        .unwrap_or_else(|| panic!("no device {name}"))
}

pub(crate) fn disk_op(engine: &Engine, name: &str, op: Op) -> OpMeasures {
    let reports = engine.devices();
    device(&reports, name)
        .measures
        .op(op)
        .cloned()
        .unwrap_or_else(|| panic!("no {op:?} on {name}"))
}

pub(crate) fn part_op(engine: &Engine, disk: &str, part: &str, op: Op) -> OpMeasures {
    let reports = engine.devices();
    device(&reports, disk)
        .partitions
        .iter()
        .find(|report| report.name == part)
        .and_then(|report| report.measures.op(op).cloned())
        .unwrap_or_else(|| panic!("no {op:?} on {part}"))
}

/// The first finding of `code` on `engine`.
fn finding_of(engine: &Engine, code: Code) -> Finding {
    let found = engine.diagnoses();
    found
        .iter()
        .find(|finding| finding.code == code)
        .cloned()
        .unwrap_or_else(|| panic!("no {code}: {found:?}"))
}

/// Histograms keep two significant digits: 1% resolution.
pub(crate) fn assert_near(actual: u64, expected: u64) {
    assert!(
        actual.abs_diff(expected) * 100 <= expected,
        "{actual} is not within 1% of {expected}"
    );
}

pub(crate) fn assert_clean(engine: &Engine) {
    assert_eq!(engine.correlation(), CorrelationStats::default());
}
