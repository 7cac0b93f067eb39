//! Synthetic event sequences of every shape the kernel produces.

use tracer_common::{BlockEvent, EventKind, RWBS_BYTES};

use super::*;
use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
use crate::model::{
    Code, DeviceReport, Evidence, Finding, LiveEvidence, MergeFix, MergeLimits,
    MisalignedStartEvidence, Op, OpMeasures, PartitionPlace, RequeueFix, Severity, SplitCause,
    SplitCost, SplitFix, SubpageBlockSizeEvidence, SubpageFix, SubpageSeen,
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

#[test]
fn rwbs_operation_classes() {
    assert_eq!(op_from_rwbs(b"W\0\0\0\0\0\0\0"), Op::Write);
    assert_eq!(op_from_rwbs(b"WS"), Op::Write);
    assert_eq!(op_from_rwbs(b"FWS"), Op::Write);
    assert_eq!(op_from_rwbs(b"FWFS"), Op::Write);
    assert_eq!(op_from_rwbs(b"R"), Op::Read);
    assert_eq!(op_from_rwbs(b"RA"), Op::Read);
    assert_eq!(op_from_rwbs(b"FR"), Op::Read);
    assert_eq!(op_from_rwbs(b"D"), Op::Discard);
    assert_eq!(op_from_rwbs(b"DE"), Op::Discard);
    assert_eq!(op_from_rwbs(b"F"), Op::Flush);
    assert_eq!(op_from_rwbs(b"FN"), Op::Flush);
    assert_eq!(op_from_rwbs(b"FF"), Op::Flush);
    assert_eq!(op_from_rwbs(b"N"), Op::Other);
    assert_eq!(op_from_rwbs(b""), Op::Other);
    assert_eq!(op_from_rwbs(b"\0\0"), Op::Other);
}

#[test]
fn one_bio_split_into_three_commands() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 2048, 768),
            split(MS, LOOP0, 2048, 2304),
            split(MS, LOOP0, 2304, 2560),
            issue(2 * MS, LOOP0, 2048, 256),
            issue(2 * MS, LOOP0, 2304, 256),
            issue(2 * MS, LOOP0, 2560, 256),
            complete(3 * MS, LOOP0, 2304, 256),
            complete(3 * MS, LOOP0, 2048, 256),
        ],
    );
    assert_eq!(engine.correlation().in_flight, 1, "one fragment still out");
    engine.ingest(&complete(5 * MS, LOOP0, 2560, 256));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 1);
    assert_eq!(write.fragments, 3);
    assert_eq!(write.splits, 2);
    assert_eq!(write.commands, 3);
    assert_eq!(write.bytes, 768 * 512);
    assert!((write.amplification - 3.0).abs() < 1e-9);
    assert_eq!(write.split_causes.get(&SplitCause::MaxSectors), Some(&2));
    assert_eq!(write.fragments_per_io.p50, 3);
    assert_eq!(write.commands_per_io.p50, 3);
    assert_eq!(write.command_size.p50, 256 * 512);
    assert_eq!(write.user_io_size.max, 768 * 512);
    assert_near(write.queue_to_complete_us.max, 4000);
    assert_eq!(write.issue_to_complete_us.count, 3);
    assert_eq!(write.misaligned_pbs_commands, 0);
}

#[test]
fn seed_case_64_sector_bios_back_merged_into_one_command() {
    let mut engine = engine();
    let start = 4096;
    for index in 0..64u64 {
        engine.ingest(&queue(MS + index, LOOP0, start + index, 1));
        if index > 0 {
            engine.ingest(&backmerge(MS + index, LOOP0, start + index, 1));
        }
    }
    engine.ingest(&issue(2 * MS, LOOP0, start, 64));
    engine.ingest(&complete(3 * MS, LOOP0, start, 64));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 64);
    assert_eq!(write.commands, 1);
    assert_eq!(write.merges, 63);
    assert!((write.amplification - 1.0 / 64.0).abs() < 1e-12);
    assert_eq!(write.commands_per_io.count, 64);
    assert_eq!(write.commands_per_io.max, 1);
    assert_eq!(write.user_io_size.p50, 512);
    assert_eq!(write.command_size.p50, 64 * 512);
    // 64 sectors at 4096 is a whole number of 4 KiB blocks.
    assert_eq!(write.misaligned_pbs_commands, 0);
}

#[test]
fn front_merge_and_request_merge_form_one_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 100, 8),
            queue(MS, LOOP0, 92, 8),
            event(EventKind::Frontmerge, MS, LOOP0, 92, 8),
            queue(MS, LOOP0, 116, 8),
            queue(MS, LOOP0, 108, 8),
            backmerge(MS, LOOP0, 108, 8),
            // The request at 116 is merged into the one at 92.
            event(EventKind::RqMerge, MS, LOOP0, 116, 8),
            issue(2 * MS, LOOP0, 92, 32),
            complete(3 * MS, LOOP0, 92, 32),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 4);
    assert_eq!(write.merges, 3);
    assert_eq!(write.commands, 1);
    assert_eq!(write.commands_per_io.count, 4);
    // Starts at 92: not 4 KiB aligned.
    assert_eq!(write.misaligned_4k_commands, 1);
    assert_eq!(write.misaligned_pbs_commands, 1);
}

#[test]
fn partial_completions_complete_fragment_by_fragment() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(MS, LOOP0, 8, 8),
            backmerge(MS, LOOP0, 8, 8),
            issue(2 * MS, LOOP0, 0, 16),
            complete(3 * MS, LOOP0, 0, 4),
        ],
    );
    assert_eq!(engine.correlation().in_flight, 2, "half a fragment done");
    engine.ingest(&complete(4 * MS, LOOP0, 4, 4));
    assert_eq!(engine.correlation().in_flight, 1, "first bio done");
    engine.ingest(&complete(5 * MS, LOOP0, 8, 8));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_near(write.queue_to_complete_us.min, 3000);
    assert_near(write.queue_to_complete_us.max, 4000);
    assert_eq!(write.issue_to_complete_us.count, 1);
    assert_near(write.issue_to_complete_us.p50, 3000);
}

#[test]
fn partition_remap_attributes_to_the_partition() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 2048 + 16, 8, P1, 16),
            queue(MS, LOOP0, 2048 + 16, 8),
            issue(MS, LOOP0, 2048 + 16, 8),
            complete(MS, LOOP0, 2048 + 16, 8),
            // Straight to the whole disk: not a partition's I/O.
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            complete(MS, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 1);
    assert_eq!(p1.commands, 1);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).user_ios, 2);
    let reports = engine.devices();
    let p2 = &device(&reports, "loop0").partitions[1];
    assert_eq!(p2.name, "loop0p2");
    assert!(p2.measures.ops.is_empty());
}

#[test]
fn remaps_match_queues_first_in_first_out_and_unknown_partitions_appear() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 7);
    feed(
        &mut engine,
        &[
            // Same bio range remapped from two partitions: FIFO decides.
            remap(MS, LOOP0, 30000, 8, P2, 19759),
            remap(MS, LOOP0, 30000, 8, unknown_part, 0),
            queue(MS, LOOP0, 30000, 8),
            queue(MS, LOOP0, 30000, 8),
        ],
    );
    assert_eq!(part_op(&engine, "loop0", "loop0p2", Op::Write).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "259:7", Op::Write).user_ios, 1);
}

#[test]
fn a_remap_waits_for_its_queue_behind_older_remaps_and_other_events() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 7);
    let read = |event: BlockEvent| BlockEvent {
        rwbs: rwbs("R"),
        ..event
    };
    feed(
        &mut engine,
        &[
            // The second remap is the newest when the first queue comes, but
            // the first remap of that range is the one the queue takes.
            remap(MS, LOOP0, 30000, 8, P2, 19759),
            remap(MS, LOOP0, 30000, 8, unknown_part, 0),
            read(queue(MS, LOOP0, 30000, 8)),
            queue(MS, LOOP0, 30000, 8),
            // A queue of another range between a remap and its own queue.
            remap(2 * MS, LOOP0, 2048 + 64, 8, P1, 64),
            queue(2 * MS, LOOP0, 90000, 8),
            queue(2 * MS, LOOP0, 2048 + 64, 8),
        ],
    );
    assert_eq!(part_op(&engine, "loop0", "loop0p2", Op::Read).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "259:7", Op::Write).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios, 1);
    assert_eq!(engine.correlation().unmatched_events, 0);
}

#[test]
fn missing_queue_is_unmatched_but_the_command_still_counts() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[issue(MS, LOOP0, 0, 8), complete(2 * MS, LOOP0, 0, 8)],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 1);
    assert_eq!(stats.incomplete, 0);
    assert_eq!(stats.in_flight, 0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.commands, 1);
    assert_eq!(write.user_ios, 0);
    assert_near(write.issue_to_complete_us.p50, 1000);
}

#[test]
fn missing_issue_leaves_the_chain_to_age_out_as_incomplete() {
    let limits = EngineLimits {
        max_age_ns: 10 * MS,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), complete(2 * MS, LOOP0, 0, 8)],
    );
    assert_eq!(engine.correlation().unmatched_events, 1);
    assert_eq!(engine.correlation().in_flight, 1);
    // Any later event moves the clock: the chain is now too old.
    engine.ingest(&queue(20 * MS, LOOP0, 64, 8));
    let stats = engine.correlation();
    assert_eq!(stats.aged_out, 1);
    assert_eq!(stats.incomplete, 1);
    assert_eq!(stats.in_flight, 1, "only the new bio");
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.queue_to_complete_us.count, 0);
}

#[test]
fn gap_in_an_issued_range_is_unmatched() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            // The bio at 8 was dropped by the ring buffer.
            issue(MS, LOOP0, 0, 16),
            complete(2 * MS, LOOP0, 0, 16),
        ],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 1);
    assert_eq!(stats.in_flight, 0, "the bio we saw completed");
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 1);
}

#[test]
fn bio_based_device_completes_bios_as_commands() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, ZRAM, 0, 8),
            queue(MS, ZRAM, 8, 8),
            bio_complete(2 * MS, ZRAM, 8, 8),
            bio_complete(3 * MS, ZRAM, 0, 8),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "zram0", Op::Write);
    assert_eq!(write.user_ios, 2);
    assert_eq!(write.commands, 2);
    assert_eq!(write.commands_per_io.max, 1);
    assert_near(write.queue_to_complete_us.max, 2000);
}

#[test]
fn unknown_device_without_issues_is_bio_based_and_named_by_number() {
    let mut engine = engine();
    let unknown = DevId::new(43, 0);
    feed(
        &mut engine,
        &[
            queue(MS, unknown, 0, 8),
            bio_complete(2 * MS, unknown, 0, 8),
        ],
    );
    assert_clean(&engine);
    let reports = engine.devices();
    let report = device(&reports, "43:0");
    assert_eq!(report.dev, "43:0");
    assert!(report.geometry.name.is_empty());
    assert_eq!(report.measures.op(Op::Write).map(|op| op.commands), Some(1));
}

#[test]
fn request_based_bio_completions_do_not_double_count() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            complete(2 * MS, LOOP0, 0, 8),
            // What the kernel reports for a bio advanced to its end.
            bio_complete(2 * MS, LOOP0, 8, 0),
        ],
    );
    assert_clean(&engine);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 1);
}

#[test]
fn stacked_remap_continues_the_chain_on_the_lower_partition() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut on_dm = queue(MS, DM, 100, 8);
    on_dm.tgid = 42;
    // The lower bio is submitted by a kernel thread.
    let mut lower = queue(MS, LOOP0, 2148, 8);
    lower.tgid = 7;
    feed(
        &mut engine,
        &[
            on_dm,
            // dm remaps to loop0p1 (sector relative to it), then the partition remap.
            remap(MS, LOOP0, 100, 8, DM, 100),
            remap(MS, LOOP0, 2148, 8, P1, 100),
            lower,
            issue(2 * MS, LOOP0, 2148, 8),
            complete(3 * MS, LOOP0, 2148, 8),
            bio_complete(4 * MS, DM, 100, 8),
        ],
    );
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(upper.user_ios, 1);
    assert_eq!(upper.commands, 1);
    assert_near(upper.queue_to_complete_us.p50, 3000);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 1);
    assert_eq!(p1.commands, 1);
    // The lower bio inherits the upper bio's process.
    let origins = engine.origins();
    let p1_origin = origins
        .iter()
        .find(|origin| origin.device == "loop0p1")
        .unwrap();
    assert_eq!(
        p1_origin.tracked.op(Op::Write).map(|op| op.user_ios),
        Some(1)
    );
    assert!(p1_origin.other.ops.is_empty());
}

/// dm-crypt on 6.12 cuts a 1 MiB write into 128 KiB clones: device-mapper
/// traces each cut on the bio it trims (`X 256 / 256`: its start is already
/// the cut), remaps each clone, and traces one completion, of the last
/// piece, for the whole bio (as the `stacks` VM scenario's blk trace shows).
#[test]
fn device_mapper_cuts_traced_on_the_trimmed_bio_keep_the_chain() {
    let mut engine = engine();
    let mut events = vec![queue(MS, DM, 0, 1024)];
    for cut in [256, 512, 768] {
        events.push(split(MS, DM, cut, cut));
    }
    for piece in 0..4u64 {
        let sector = piece * 256;
        events.push(remap(2 * MS, LOOP0, sector, 256, DM, sector));
        events.push(remap(2 * MS, LOOP0, 2048 + sector, 256, P1, sector));
        events.push(queue(2 * MS, LOOP0, 2048 + sector, 256));
        events.push(issue(3 * MS, LOOP0, 2048 + sector, 256));
        events.push(complete(4 * MS, LOOP0, 2048 + sector, 256));
    }
    events.push(bio_complete(5 * MS, DM, 768, 256));
    feed(&mut engine, &events);
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.fragments, upper.splits), (1, 4, 3));
    assert_eq!(
        upper.commands, 4,
        "each clone sent down is a command of dm-0"
    );
    assert_near(upper.queue_to_complete_us.p50, 4000);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (4, 4));
}

/// dm-striped maps each chunk's clone before it traces the trim (6.1 and
/// 6.12 alike, in the `stacks` VM scenario): Q, then per chunk A, A, Q on
/// the disk, and only then `X 128 / 128` on the trimmed bio.
#[test]
fn a_clone_remapped_before_its_trim_is_traced_is_cut_once() {
    let mut engine = engine();
    let mut events = vec![queue(MS, DM, 0, 512)];
    for piece in 0..4u64 {
        let sector = piece * 128;
        events.push(remap(MS, LOOP0, sector, 128, DM, sector));
        events.push(remap(MS, LOOP0, 2048 + sector, 128, P1, sector));
        events.push(queue(MS, LOOP0, 2048 + sector, 128));
        if piece < 3 {
            events.push(split(MS, DM, sector + 128, sector + 128));
        }
    }
    for piece in 0..4u64 {
        let sector = 2048 + piece * 128;
        events.push(issue(2 * MS, LOOP0, sector, 128));
        events.push(complete(3 * MS, LOOP0, sector, 128));
    }
    events.push(bio_complete(4 * MS, DM, 384, 128));
    feed(&mut engine, &events);
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.fragments, upper.splits), (1, 4, 3));
    assert_eq!(upper.commands, 4);
    assert_eq!(upper.disk_commands, 4);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (4, 4));
    assert_eq!(p1.disk_commands, 0, "a disk's commands are its own");
}

/// Two clones of one dm write merged into one command on the disk: dm-0's
/// user I/O went out as two pieces and reached the disk as one command.
#[test]
fn clones_merged_below_count_once_as_the_top_io_s_disk_command() {
    let mut engine = engine();
    let mut events = vec![queue(MS, DM, 0, 256), split(MS, DM, 128, 128)];
    for piece in 0..2u64 {
        let sector = piece * 128;
        events.push(remap(MS, LOOP0, sector, 128, DM, sector));
        events.push(remap(MS, LOOP0, 2048 + sector, 128, P1, sector));
        events.push(queue(MS, LOOP0, 2048 + sector, 128));
    }
    events.push(backmerge(MS, LOOP0, 2176, 128));
    events.push(issue(2 * MS, LOOP0, 2048, 256));
    events.push(complete(3 * MS, LOOP0, 2048, 256));
    events.push(bio_complete(4 * MS, DM, 128, 128));
    feed(&mut engine, &events);
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(
        (upper.user_ios, upper.commands, upper.disk_commands),
        (1, 2, 1)
    );
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (2, 1));
}

/// md raid1 over loop0p1 and loop0p2: the write to the array is remapped
/// twice, one clone per mirror, from the same sector of md. Both mirrors'
/// commands are the top write's, and its owner's.
#[test]
fn each_mirror_of_a_raid1_write_continues_the_same_user_io() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut on_md = queue(MS, DM, 0, 8);
    on_md.tgid = 42;
    let mut events = vec![on_md];
    for (part, start) in [(P1, 2048), (P2, 10241)] {
        let mut lower = queue(MS, LOOP0, start, 8);
        lower.tgid = 7;
        events.extend([
            remap(MS, LOOP0, 0, 8, DM, 0),
            remap(MS, LOOP0, start, 8, part, 0),
            lower,
        ]);
    }
    for start in [2048, 10241] {
        events.push(issue(2 * MS, LOOP0, start, 8));
        events.push(complete(3 * MS, LOOP0, start, 8));
    }
    events.push(bio_complete(4 * MS, DM, 0, 8));
    feed(&mut engine, &events);
    assert_eq!(
        engine.correlation(),
        CorrelationStats {
            mirrored_remaps: 1,
            ..CorrelationStats::default()
        }
    );
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(
        (upper.user_ios, upper.commands, upper.disk_commands),
        (1, 1, 2),
        "one write to the array, one bio per mirror, a command on each"
    );
    for part in ["loop0p1", "loop0p2"] {
        let mirror = part_op(&engine, "loop0", part, Op::Write);
        assert_eq!((mirror.user_ios, mirror.commands), (1, 1), "{part}");
    }
    let origins = engine.origins();
    for part in ["loop0p1", "loop0p2"] {
        let origin = origins.iter().find(|o| o.device == part).unwrap();
        assert_eq!(
            origin.tracked.op(Op::Write).map(|op| op.user_ios),
            Some(1),
            "{part} is the tracked writer's"
        );
    }
}

fn rq_remap(ts: u64, dev: DevId, sector: u64, nr: u32, old: DevId, old_sector: u64) -> BlockEvent {
    BlockEvent {
        kind: EventKind::RqRemap as u8,
        ..remap(ts, dev, sector, nr, old, old_sector)
    }
}

/// dm-multipath is request-based: dm-0 issues a request, clones it onto a
/// path (`block_rq_remap`), and the clone is issued there with no queue of
/// its own. Two writes merged into one dm-0 request reach the path as one
/// command, each write's disk command; blkparse's `A` line for the clone
/// (a bio remap to an importer) reads the same.
#[test]
fn a_multipath_clone_issued_on_its_path_is_the_upper_writes_disk_command() {
    for as_bio_remap in [false, true] {
        let mut engine = engine();
        let clone = match as_bio_remap {
            false => rq_remap(2 * MS, LOOP0, 0, 16, DM, 0),
            true => remap(2 * MS, LOOP0, 0, 16, DM, 0),
        };
        feed(
            &mut engine,
            &[
                queue(MS, DM, 0, 8),
                queue(MS, DM, 8, 8),
                backmerge(MS, DM, 8, 8),
                issue(2 * MS, DM, 0, 16),
                clone,
                issue(2 * MS, LOOP0, 0, 16),
                complete(3 * MS, LOOP0, 0, 16),
                complete(4 * MS, DM, 0, 16),
            ],
        );
        assert_clean(&engine);
        let upper = disk_op(&engine, "dm-0", Op::Write);
        assert_eq!(
            (upper.user_ios, upper.commands, upper.disk_commands),
            (2, 1, 2),
            "as a bio remap: {as_bio_remap}"
        );
        assert_near(upper.queue_to_complete_us.p50, 3000);
        let path = disk_op(&engine, "loop0", Op::Write);
        assert_eq!((path.user_ios, path.commands), (0, 1));
    }
}

/// `blktrace -d` on the lower disk of LVM on a partition (as on CentOS 7,
/// where the dm remap names the partition): no queue on dm-0, two remaps.
/// The dm bio is the user I/O, and the chain reaches the partition's bio.
#[test]
fn an_untraced_upper_device_is_read_from_its_remap_and_chained_down() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut first = remap(MS, P1, 100, 8, DM, 60);
    first.tgid = 42;
    let mut lower = queue(MS, LOOP0, 2148, 8);
    lower.tgid = 7;
    feed(
        &mut engine,
        &[
            first,
            remap(MS, LOOP0, 2148, 8, P1, 100),
            lower,
            issue(2 * MS, LOOP0, 2148, 8),
            complete(3 * MS, LOOP0, 2148, 8),
        ],
    );
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.bytes), (1, 4096));
    // dm-0's completion is not in the trace: its user I/O ends with its bio's.
    assert_near(upper.queue_to_complete_us.p50, 2000);
    assert_eq!(engine.correlation().in_flight, 0);
    assert_eq!(engine.correlation().incomplete, 0);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (1, 1));
    assert_eq!(engine.correlation().queues_from_remaps, 1);
    assert_eq!(engine.correlation().unmatched_events, 0);
    // Chained: the partition's bio is the tracked process's, not the kernel thread's.
    let origins = engine.origins();
    let p1_origin = origins.iter().find(|o| o.device == "loop0p1").unwrap();
    assert_eq!(
        p1_origin.tracked.op(Op::Write).map(|op| op.user_ios),
        Some(1)
    );
}

/// dm's clones of part of a traced bio (a target boundary, a stripe chunk)
/// are remaps with no fragment of their size: never a second user I/O.
#[test]
fn partial_clones_of_a_traced_upper_bio_are_not_user_ios_again() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, DM, 100, 16),
            remap(MS, LOOP0, 2148, 8, DM, 100),
            remap(MS, LOOP0, 4196, 8, DM, 108),
        ],
    );
    assert_eq!(disk_op(&engine, "dm-0", Op::Write).user_ios, 1);
    assert_eq!(engine.correlation().queues_from_remaps, 0);
}

#[test]
fn concurrent_io_to_the_same_sectors_is_first_in_first_out() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(2 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            complete(MS + 2048 * 1000, LOOP0, 0, 8),
            issue(4 * MS, LOOP0, 0, 8),
            complete(2 * MS + 16384 * 1000, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    // First queued, first completed: 2048 µs and 16384 µs (LIFO would give 1048 and 17384).
    assert_eq!(write.queue_to_complete_us.min, 2048);
    assert_eq!(write.queue_to_complete_us.max, 16384);
}

#[test]
fn full_table_evicts_the_oldest_chains() {
    let limits = EngineLimits {
        max_in_flight: 4,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    for index in 0..10 {
        engine.ingest(&queue(MS + index, LOOP0, index * 8, 8));
    }
    let stats = engine.correlation();
    assert_eq!(stats.evicted, 6);
    assert_eq!(stats.incomplete, 6);
    assert_eq!(stats.in_flight, 4);
    // The newest survive: issuing the last one still correlates.
    feed(
        &mut engine,
        &[issue(2 * MS, LOOP0, 72, 8), complete(3 * MS, LOOP0, 72, 8)],
    );
    assert_eq!(engine.correlation().in_flight, 3);
    assert_eq!(engine.correlation().unmatched_events, 0);
    // An evicted one no longer does.
    engine.ingest(&issue(3 * MS, LOOP0, 0, 8));
    assert_eq!(engine.correlation().unmatched_events, 1);
}

/// An issue or completion naming its request (raw tracepoints' hctx and tag).
fn named(event: BlockEvent, request: u64) -> BlockEvent {
    BlockEvent {
        aux_sector: request,
        ..event
    }
}

#[test]
fn a_chain_in_flight_when_the_ring_dropped_events_is_blamed_on_the_ring() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), named(issue(2 * MS, LOOP0, 0, 8), 5)],
    );
    // The ring was full: its completion may be among the dropped events.
    engine.events_lost();
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 5),
        ],
    );
    let correlation = engine.correlation();
    assert_eq!(correlation.ring_dropped, 1, "{correlation:?}");
    assert_eq!(correlation.completion_lost, 0, "{correlation:?}");
    assert_eq!(correlation.in_flight, 0, "{correlation:?}");
}

#[test]
fn a_request_issued_again_retires_the_command_whose_completion_never_came() {
    let mut engine = engine();
    // Pass 1 at sector 0: issued as request 5; the kernel reports no completion.
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), named(issue(2 * MS, LOOP0, 0, 8), 5)],
    );
    // Pass 2 at the same sector, on the same request: pass 1's command is gone.
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 5),
        ],
    );
    let correlation = engine.correlation();
    assert_eq!(correlation.completion_lost, 1);
    assert_eq!(correlation.incomplete, 1);
    assert_eq!(correlation.in_flight, 0, "{correlation:?}");
    // Pass 2's latency is its own 1 ms, not pass 1's 3 ms.
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(writes.issue_to_complete_us.max, 1000);
    assert_eq!(writes.commands, 2);
}

#[test]
fn a_completion_naming_its_request_skips_older_commands_at_the_same_sector() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 6),
            // The second completes first; by sector alone it would take the first.
            named(complete(5 * MS, LOOP0, 0, 8), 6),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(writes.issue_to_complete_us.max, 1000);
    engine.ingest(&named(complete(9 * MS, LOOP0, 0, 8), 5));
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_near(writes.issue_to_complete_us.max, 7000);
    assert_clean(&engine);
}

#[test]
fn a_flush_borrowing_a_busy_tag_retires_nothing() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            named(issue(3 * MS, LOOP0, 0, 0), 5),
            named(complete(4 * MS, LOOP0, 0, 8), 5),
        ],
    );
    assert_clean(&engine);
}

#[test]
fn a_requeued_request_is_not_a_lost_completion() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            named(requeue(3 * MS, LOOP0, 0, 8), 5),
            // Re-issued under another tag; tag 5 goes to other work meanwhile.
            named(issue(4 * MS, LOOP0, 0, 8), 9),
            queue(4 * MS, LOOP0, 64, 8),
            named(issue(4 * MS, LOOP0, 64, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 9),
            named(complete(5 * MS, LOOP0, 64, 8), 5),
        ],
    );
    assert_clean(&engine);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (2, 1));
}

#[test]
fn idle_tables_give_back_a_burst_and_keep_correlating() {
    let mut engine = engine();
    let burst = RESERVED_SLOTS as u64 + 4000;
    // Every bio queued before any is issued: the whole burst is in flight.
    for index in 0..burst {
        engine.ingest(&queue(MS + index, LOOP0, index * 8, 8));
    }
    let now = std::time::Instant::now();
    engine.drained(now);
    assert_eq!(
        engine.correlator.chains.user_ios.allocated(),
        burst as usize,
        "kept while in flight"
    );
    for index in 0..burst {
        feed(
            &mut engine,
            &[
                issue(2 * MS + index, LOOP0, index * 8, 8),
                complete(2 * MS + index + 1, LOOP0, index * 8, 8),
            ],
        );
    }
    assert_eq!(engine.correlation().in_flight, 0);
    engine.drained(now);
    assert_eq!(
        engine.correlator.chains.user_ios.allocated(),
        RESERVED_SLOTS
    );
    assert_eq!(
        engine.correlator.chains.fragments.allocated(),
        RESERVED_SLOTS
    );
    // The next chain correlates as before.
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            issue(3 * MS + 1, LOOP0, 0, 8),
            complete(3 * MS + 2, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.user_ios, writes.commands), (burst + 1, burst + 1));
}

#[test]
fn full_command_table_evicts_the_oldest_command_and_its_chain() {
    let limits = EngineLimits {
        max_in_flight: 2,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    for index in 0..3 {
        feed(
            &mut engine,
            &[
                queue(MS, LOOP0, index * 8, 8),
                issue(MS, LOOP0, index * 8, 8),
            ],
        );
    }
    let stats = engine.correlation();
    assert_eq!(stats.evicted, 1);
    assert_eq!(stats.in_flight, 2);
    engine.ingest(&complete(2 * MS, LOOP0, 0, 8));
    assert_eq!(engine.correlation().unmatched_events, 1);
}

#[test]
fn flushes_are_counted_not_correlated() {
    let mut engine = engine();
    let mut flush_bio = queue(MS, LOOP0, 0, 0);
    flush_bio.rwbs = rwbs("FWS");
    let mut flush_rq = issue(MS, LOOP0, 0, 0);
    flush_rq.rwbs = rwbs("FF");
    let mut flush_done = complete(2 * MS, LOOP0, 0, 0);
    flush_done.rwbs = rwbs("FF");
    feed(&mut engine, &[flush_bio, flush_rq, flush_done]);
    assert_clean(&engine);
    let flush = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!(flush.user_ios, 1);
    assert_eq!(flush.commands, 1);
    assert!(engine.devices()[0].measures.op(Op::Write).is_none());
}

#[test]
fn a_reissue_whose_requeue_was_not_seen_counts_again_and_completes_once() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            issue(2 * MS, LOOP0, 0, 8),
            complete(3 * MS, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 2);
}

fn requeue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Requeue, ts, dev, sector, nr)
}

/// Commands are issues minus the re-issues of requeued commands.
fn assert_commands_are_issues_minus_requeues(engine: &Engine) {
    let events = engine.events();
    let (commands, requeues) = engine
        .devices()
        .iter()
        .flat_map(|device| device.measures.ops.values())
        .fold((0, 0), |(commands, requeues), op| {
            (commands + op.commands, requeues + op.requeues)
        });
    assert_eq!(requeues, events[EventKind::Requeue]);
    assert_eq!(
        commands,
        events[EventKind::Issue] - events[EventKind::Requeue]
    );
}

/// After a requeue case: nothing left in flight, commands counted as issues
/// minus requeues; loop0's write measures.
fn settled_loop0_writes(engine: &Engine) -> OpMeasures {
    assert_clean(engine);
    assert_commands_are_issues_minus_requeues(engine);
    disk_op(engine, "loop0", Op::Write)
}

#[test]
fn a_requeued_command_is_one_command_timed_from_its_last_issue() {
    let mut engine = engine();
    // The vda case: a 1 MiB write split 2032 + 16, the tail requeued while
    // the head fills the virtqueue, and issued again 2 ms later.
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 2048),
            split(MS, LOOP0, 0, 2032),
            issue(MS, LOOP0, 0, 2032),
            issue(MS, LOOP0, 2032, 16),
            requeue(MS + 10_000, LOOP0, 2032, 16),
            complete(3 * MS, LOOP0, 0, 2032),
            issue(3 * MS + 10_000, LOOP0, 2032, 16),
            complete(4 * MS, LOOP0, 2032, 16),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.commands, write.requeues), (1, 2, 1));
    assert_eq!(write.commands_per_io.max, 2);
    assert!((write.amplification - 2.0).abs() < 1e-9);
    assert!((write.requeue_share() - 0.5).abs() < 1e-9);
    assert_eq!(write.requeue_delay_us.count, 1);
    assert_near(write.requeue_delay_us.p50, 2000);
    // The tail: 990 us from its last issue, not 3 ms from its first.
    assert_eq!(write.issue_to_complete_us.count, 2);
    assert_near(write.issue_to_complete_us.min, 990);
    assert_near(write.issue_to_complete_us.max, 2000);
    assert_eq!(engine.events()[EventKind::Requeue], 1);
}

#[test]
fn a_command_requeued_twice_is_still_one_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            requeue(2 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            requeue(4 * MS, LOOP0, 0, 8),
            issue(7 * MS, LOOP0, 0, 8),
            complete(8 * MS, LOOP0, 0, 8),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.commands, write.requeues), (1, 2));
    assert_eq!(write.requeue_delay_us.count, 2);
    assert_near(write.requeue_delay_us.max, 3000);
    assert_near(write.issue_to_complete_us.max, 1000);
}

#[test]
fn partial_completions_around_a_requeue_finish_the_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(MS, LOOP0, 8, 8),
            backmerge(MS, LOOP0, 8, 8),
            queue(MS, LOOP0, 16, 8),
            backmerge(MS, LOOP0, 16, 8),
            issue(2 * MS, LOOP0, 0, 24),
            // Part done, the rest given back and issued again with its remaining range.
            complete(3 * MS, LOOP0, 0, 8),
            requeue(3 * MS, LOOP0, 8, 16),
            issue(4 * MS, LOOP0, 8, 16),
            // Partial completion after the requeue.
            complete(5 * MS, LOOP0, 8, 8),
        ],
    );
    assert_eq!(
        engine.correlation().in_flight,
        1,
        "the last bio is still out"
    );
    engine.ingest(&complete(6 * MS, LOOP0, 16, 8));
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.commands, write.requeues), (3, 1, 1));
    assert_eq!(write.commands_per_io.max, 1);
    assert_near(write.issue_to_complete_us.max, 2000);
    assert_near(write.queue_to_complete_us.max, 5000);
}

#[test]
fn a_requeued_merged_request_carries_all_its_bios_once() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 64, 8),
            queue(MS, LOOP0, 72, 8),
            backmerge(MS, LOOP0, 72, 8),
            issue(2 * MS, LOOP0, 64, 16),
            requeue(2 * MS, LOOP0, 64, 16),
            issue(3 * MS, LOOP0, 64, 16),
            complete(4 * MS, LOOP0, 64, 16),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.merges), (2, 1));
    assert_eq!((write.commands, write.requeues), (1, 1));
    assert_eq!(write.commands_per_io.max, 1);
    assert_eq!(write.command_size.max, 16 * 512);
}

#[test]
fn requeues_of_commands_issued_before_tracing_or_without_a_range_keep_the_count() {
    let mut engine = engine();
    let mut flush = issue(MS, LOOP0, 0, 0);
    flush.rwbs = rwbs("FF");
    let mut flush_requeue = requeue(MS, LOOP0, 0, 0);
    flush_requeue.rwbs = rwbs("FF");
    let mut flush_reissue = issue(2 * MS, LOOP0, 0, 0);
    flush_reissue.rwbs = rwbs("FF");
    feed(
        &mut engine,
        &[
            // Issued before the trace began: only its requeue and re-issue are seen.
            requeue(MS, LOOP0, 512, 8),
            issue(2 * MS, LOOP0, 512, 8),
            complete(3 * MS, LOOP0, 512, 8),
            flush,
            flush_requeue,
            flush_reissue,
        ],
    );
    assert_commands_are_issues_minus_requeues(&engine);
    assert_eq!(engine.correlation().in_flight, 0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.commands, write.requeues), (0, 1));
    assert_near(write.requeue_delay_us.max, 1000);
    let flush = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!((flush.commands, flush.requeues), (1, 1));
}

/// A deterministic xorshift generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn garbage(rng: &mut Rng, ts: &mut u64) -> BlockEvent {
    let devs = [LOOP0, P1, P2, ZRAM, DM, DevId::new(8, 0), DevId::new(0, 0)];
    let rwbs_set = ["W", "R", "FWS", "D", "F", "N", "", "FN", "RA"];
    *ts = match rng.below(100) {
        0 => rng.next(),
        1 => ts.saturating_sub(rng.below(MS)),
        _ => ts.saturating_add(rng.below(MS)),
    };
    let sector = if rng.below(10) == 0 {
        rng.next()
    } else {
        rng.below(64) * 8 + rng.below(3)
    };
    BlockEvent {
        ts_ns: *ts,
        sector,
        aux_sector: if rng.below(2) == 0 {
            sector + rng.below(300)
        } else {
            rng.next()
        },
        dev: k(devs[rng.below(devs.len() as u64) as usize]),
        aux_dev: k(devs[rng.below(devs.len() as u64) as usize]),
        nr_sector: match rng.below(10) {
            0 => rng.next() as u32,
            1 => 0,
            _ => rng.below(300) as u32,
        },
        tgid: rng.below(4) as u32,
        rwbs: rwbs(rwbs_set[rng.below(rwbs_set.len() as u64) as usize]),
        kind: rng.below(EventKind::COUNT as u64 + 3) as u8,
        _pad: 0,
        segments: rng.below(300) as u16,
        error: rng.next() as i32,
        // Many owners, so attribution's tables fill and fold.
        owner: tracer_common::Owner {
            comm: [b'a' + rng.below(26) as u8; tracer_common::COMM_BYTES],
            cgroup: rng.below(600),
            ino: rng.below(600),
            file_dev: rng.below(3) as u32,
            flags: rng.next() as u32,
        },
    }
}

#[test]
fn garbage_events_never_panic() {
    for (seed, limits) in [
        (1, EngineLimits::default()),
        (
            2,
            EngineLimits {
                max_in_flight: 8,
                max_age_ns: 5 * MS,
            },
        ),
        (
            3,
            EngineLimits {
                max_in_flight: 0,
                max_age_ns: 0,
            },
        ),
    ] {
        let mut engine = Engine::new(vec![loop0(), zram(), dm()], limits);
        engine.track_processes([1, 3]);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut ts = 0;
        let mut queues = 0;
        let mut splits = 0;
        let mut inferred_at_reset = 0;
        for round in 0..100_000 {
            let event = garbage(&mut rng, &mut ts);
            queues += u64::from(event.kind == EventKind::Queue as u8);
            splits += u64::from(event.kind == EventKind::Split as u8);
            engine.ingest(&event);
            if round % 25_000 == 0 {
                let _ = engine.devices();
                let _ = engine.diagnoses();
            }
            if round == 60_000 {
                engine.reset();
                queues = 0;
                splits = 0;
                inferred_at_reset = engine.correlation().queues_from_remaps;
            }
        }
        let reports = engine.devices();
        let _ = engine.diagnoses();
        let _ = engine.origins();
        let _ = serde_json::to_string(&reports).unwrap();
        let sum = |field: fn(&OpMeasures) -> u64| -> u64 {
            reports
                .iter()
                .flat_map(|report| report.measures.ops.values())
                .map(field)
                .sum()
        };
        // Every queue and split is counted somewhere, whatever the chain,
        // and so is every queue read off a remap.
        let inferred = engine.correlation().queues_from_remaps - inferred_at_reset;
        assert_eq!(sum(|op| op.user_ios), queues + inferred);
        assert_eq!(sum(|op| op.splits), splits);
        assert_eq!(engine.events()[EventKind::Queue], queues);
        let stats = engine.correlation();
        assert!(stats.in_flight <= limits.max_in_flight.max(1) as u64);
    }
}

/// A realistic mix on request-based devices: partitions, splits, merges,
/// partial completions.
fn mixed_workload(engine: &mut Engine) {
    let mut ts = MS;
    for round in 0..50u64 {
        ts += MS;
        let base = 2048 + (round % 8) * 1024;
        // A 384-sector write through loop0p1, split at max_sectors.
        let relative = base - 2048;
        feed(
            engine,
            &[
                remap(ts, LOOP0, base, 384, P1, relative),
                queue(ts, LOOP0, base, 384),
                split(ts, LOOP0, base, base + 256),
                issue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base + 256, 128),
                complete(ts + MS, LOOP0, base, 256),
                complete(ts + MS, LOOP0, base + 256, 64),
                complete(ts + MS, LOOP0, base + 320, 64),
            ],
        );
        // Four small reads straight to the disk, back merged.
        let read_base = 32768 + (round % 4) * 64;
        for index in 0..4 {
            let mut bio = queue(ts, LOOP0, read_base + index * 8, 8);
            bio.rwbs = rwbs("R");
            engine.ingest(&bio);
            if index > 0 {
                let mut merge = backmerge(ts, LOOP0, read_base + index * 8, 8);
                merge.rwbs = rwbs("R");
                engine.ingest(&merge);
            }
        }
        let mut read_issue = issue(ts, LOOP0, read_base, 32);
        read_issue.rwbs = rwbs("R");
        let mut read_done = complete(ts + MS, LOOP0, read_base, 32);
        read_done.rwbs = rwbs("R");
        feed(engine, &[read_issue, read_done]);
    }
}

#[test]
fn totals_agree_with_event_counts() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    assert_clean(&engine);
    let events = engine.events();
    let reports = engine.devices();
    let ops: Vec<&OpMeasures> = reports
        .iter()
        .flat_map(|report| report.measures.ops.values())
        .collect();
    let sum = |field: fn(&OpMeasures) -> u64| -> u64 { ops.iter().map(|op| field(op)).sum() };
    assert_eq!(sum(|op| op.user_ios), events[EventKind::Queue]);
    assert_eq!(sum(|op| op.splits), events[EventKind::Split]);
    assert_eq!(sum(|op| op.commands), events[EventKind::Issue]);
    assert_eq!(
        sum(|op| op.merges),
        events[EventKind::Backmerge] + events[EventKind::Frontmerge] + events[EventKind::RqMerge]
    );
    assert_eq!(
        sum(|op| op.fragments),
        events[EventKind::Queue] + events[EventKind::Split]
    );
    // Partition measures are inside the disk's.
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 50);
    assert_eq!(p1.commands, 100);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).user_ios, 50);
    assert_eq!(disk_op(&engine, "loop0", Op::Read).commands, 50);
}

#[test]
fn reset_zeroes_counters_and_keeps_chains_in_flight() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    feed(
        &mut engine,
        &[queue(100 * MS, LOOP0, 0, 8), issue(100 * MS, LOOP0, 0, 8)],
    );
    engine.reset();
    assert_eq!(engine.events(), EventCounts::default());
    assert!(engine
        .devices()
        .iter()
        .all(|report| report.measures.ops.is_empty()));
    assert_eq!(engine.correlation().in_flight, 1);
    engine.ingest(&complete(101 * MS, LOOP0, 0, 8));
    let stats = engine.correlation();
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.unmatched_events, 0);
    // The pre-reset chain does not feed the new latency histograms.
    let reports = engine.devices();
    let write = device(&reports, "loop0").measures.op(Op::Write);
    assert!(write.is_none_or(|write| write.queue_to_complete_us.count == 0));
}

#[test]
fn geometry_refresh_keeps_measures() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    let before = part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios;
    let mut refreshed = loop0();
    refreshed.max_sectors_kb = 1024;
    engine.set_disks(vec![refreshed]);
    assert_eq!(
        part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios,
        before
    );
    let reports = engine.devices();
    assert_eq!(device(&reports, "loop0").geometry.max_sectors_kb, 1024);
    assert_eq!(
        reports
            .iter()
            .filter(|report| report.name == "loop0")
            .count(),
        1
    );
}

// ----- diagnoses ---------------------------------------------------------------

#[test]
fn quiet_aligned_device_has_no_diagnoses() {
    let mut engine = engine();
    for index in 0..64u64 {
        let base = 2048 + index * 256;
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                remap(ts, LOOP0, base, 256, P1, base - 2048),
                queue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base, 256),
                complete(ts + MS / 2, LOOP0, base, 256),
            ],
        );
    }
    assert_clean(&engine);
    // loop0p2 is misaligned and odd-sized by construction (the audit says so);
    // the traffic went to the aligned loop0p1, which must stay quiet.
    let on_p1: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.device != "loop0p2")
        .collect();
    assert_eq!(on_p1, Vec::new());
}

/// 128 KiB writes at the start of the misaligned loop0p2 (absolute 10241):
/// the kernel cuts 255 sectors to end on a 4 KiB boundary, then 1 more.
pub(crate) fn misaligned_writes(engine: &mut Engine, count: u64) {
    for index in 0..count {
        let relative = index * 256;
        let start = 10241 + relative;
        let cut = (start + 256) & !7;
        let ts = MS * (index + 1);
        feed(
            engine,
            &[
                remap(ts, LOOP0, start, 256, P2, relative),
                queue(ts, LOOP0, start, 256),
                split(ts, LOOP0, start, cut),
                issue(ts, LOOP0, start, (cut - start) as u32),
                issue(ts, LOOP0, cut, (start + 256 - cut) as u32),
                complete(ts + MS / 2, LOOP0, start, (cut - start) as u32),
                complete(ts + MS / 2, LOOP0, cut, (start + 256 - cut) as u32),
            ],
        );
    }
}

#[test]
fn too_few_splits_raise_nothing() {
    let mut engine = engine();
    misaligned_writes(&mut engine, diagnose::MIN_SPLITS - 1);
    assert!(engine
        .diagnoses()
        .iter()
        .all(|diagnosis| diagnosis.code != Code::SplitAmplification));
}

/// `count` 512-sector writes straight to loop0 from sector 0, each split at
/// max_sectors (128 KiB) into two 256-sector commands.
pub(crate) fn max_sectors_splits(engine: &mut Engine, count: u64) {
    for index in 0..count {
        let base = index * 512;
        let ts = MS * (index + 1);
        feed(
            engine,
            &[
                queue(ts, LOOP0, base, 512),
                split(ts, LOOP0, base, base + 256),
                issue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base + 256, 256),
                complete(ts, LOOP0, base, 256),
                complete(ts, LOOP0, base + 256, 256),
            ],
        );
    }
}

/// `count` 512-byte bios queued together, each issued as its own command.
pub(crate) fn unmerged_small_writes(engine: &mut Engine, count: u64) {
    for index in 0..count {
        engine.ingest(&queue(MS, LOOP0, 4096 + index, 1));
    }
    for index in 0..count {
        let ts = 2 * MS + index * 1000;
        feed(
            engine,
            &[
                issue(ts, LOOP0, 4096 + index, 1),
                complete(ts + 500, LOOP0, 4096 + index, 1),
            ],
        );
    }
}

#[test]
fn synchronous_sequential_writes_are_not_merge_blocked() {
    let mut engine = engine();
    // Queue depth one: each bio is queued after the previous command completed.
    for index in 0..64u64 {
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                queue(ts, LOOP0, 4096 + index * 8, 8),
                issue(ts + 10, LOOP0, 4096 + index * 8, 8),
                complete(ts + 500, LOOP0, 4096 + index * 8, 8),
            ],
        );
    }
    assert_clean(&engine);
    let live: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.code == Code::MergeBlocked || d.code == Code::SplitAmplification)
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

#[test]
fn merges_that_would_exceed_max_segments_are_not_missed_merges() {
    let mut geometry = loop0();
    geometry.max_segments = 8;
    geometry.max_sectors_kb = 1024;
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    // 160 one-sector bios, merged 8 per command (one segment each at least):
    // the kernel merged all that max_segments allows.
    for index in 0..160u64 {
        engine.ingest(&queue(MS, LOOP0, index, 1));
        if index % 8 != 0 {
            engine.ingest(&backmerge(MS, LOOP0, index, 1));
        }
    }
    for command in 0..20u64 {
        let ts = 2 * MS + command * 1000;
        feed(
            &mut engine,
            &[
                issue(ts, LOOP0, command * 8, 8),
                complete(ts + 100, LOOP0, command * 8, 8),
            ],
        );
    }
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.user_ios, write.commands), (160, 20));
    let blocked: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.code == Code::MergeBlocked)
        .collect();
    assert!(blocked.is_empty(), "{blocked:?}");
}

#[test]
fn page_sized_dirty_buffers_raise_nothing() {
    let mut engine = engine();
    for index in 0..100 {
        let buffer = BlockEvent {
            aux_sector: 4096,
            ..event(EventKind::DirtyBuffer, MS, P1, index, 0)
        };
        engine.ingest(&buffer);
    }
    let on_p1: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.device == "loop0p1")
        .collect();
    assert!(on_p1.is_empty(), "{on_p1:?}");
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

/// Each check decides its fix in the engine, as a value the fix text and
/// the what-if both read (the words are `explain`'s, tested there).
#[test]
fn each_check_decides_its_fix() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 20);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    // loop0p2 starts at 10241: the next 1 MiB boundary.
    assert_eq!(split.fix, SplitFix::MovePartitionStart { start: 12288 });
    assert_eq!(
        (split.op, split.cost),
        (Op::Write, SplitCost::ExtraCommands)
    );

    let mut engine = self::engine();
    max_sectors_splits(&mut engine, 20);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.fix, SplitFix::RaiseMaxSectorsKb { to_kb: 256 });

    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 1);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(
        (split.fix, split.cost),
        (SplitFix::FewerSegments, SplitCost::LargePieces)
    );

    for (geometry, fix) in [
        (
            DiskGeometry {
                nomerges: 2,
                ..loop0()
            },
            MergeFix::AllowMerging,
        ),
        (
            DiskGeometry {
                virt_boundary_mask: 4095,
                ..loop0()
            },
            MergeFix::PageAlignedBios,
        ),
        (loop0(), MergeFix::UseMqDeadline),
        (
            DiskGeometry {
                scheduler: "mq-deadline".into(),
                ..loop0()
            },
            MergeFix::CheckFlags,
        ),
    ] {
        let mut engine = Engine::new(vec![geometry], EngineLimits::default());
        unmerged_small_writes(&mut engine, 32);
        let Evidence::MergeBlocked(merge) = finding_of(&engine, Code::MergeBlocked).evidence else {
            panic!("not merge_blocked");
        };
        assert_eq!(merge.fix, fix);
        assert_eq!((merge.op, merge.bios), (Op::Write, 32));
    }

    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let Evidence::RequeuedCommands(requeued) = finding_of(&engine, Code::RequeuedCommands).evidence
    else {
        panic!("not requeued_commands");
    };
    // 128 tags, twice as many descriptors; two commands of 126 pages fit.
    assert_eq!(
        requeued.fix,
        RequeueFix::IndirectDescriptors {
            ring_descriptors: 256,
            io_pages: 126
        }
    );
    let geometry = DiskGeometry {
        virtio_indirect_desc: Some(true),
        ..virtio_vda()
    };
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let Evidence::RequeuedCommands(requeued) = finding_of(&engine, Code::RequeuedCommands).evidence
    else {
        panic!("not requeued_commands");
    };
    assert_eq!(
        requeued.fix,
        RequeueFix::LowerNrRequests { nr_requests: 64 }
    );

    let mut engine = self::engine();
    for index in 0..1000 {
        let buffer = BlockEvent {
            aux_sector: 1024,
            ..event(EventKind::DirtyBuffer, MS, P1, index, 0)
        };
        engine.ingest(&buffer);
    }
    let subpage = engine
        .diagnoses()
        .into_iter()
        .find(|finding| finding.code == Code::SubpageBlockSize && finding.device == "loop0p1")
        .expect("subpage_block_size on loop0p1");
    let Evidence::SubpageBlockSize(subpage) = subpage.evidence else {
        panic!("not subpage_block_size");
    };
    assert_eq!(subpage.fix, SubpageFix::FilesystemBlocks);
    assert_eq!(
        subpage.seen,
        SubpageSeen::ChosenBlocks {
            buffers: 1000,
            total: 1000,
            size: 8192
        }
    );
}

#[test]
fn origins_split_tracked_from_other_io() {
    let mut engine = engine();
    engine.track_processes([100]);
    let mut other = queue(MS, LOOP0, 64, 8);
    other.tgid = 5;
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            other,
            issue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 64, 8),
        ],
    );
    // The process tree grows.
    engine.track_processes([5]);
    engine.ingest(&queue(2 * MS, LOOP0, 128, 8));
    let origins = engine.origins();
    assert_eq!(origins.len(), 1);
    let loop0 = &origins[0];
    assert_eq!(loop0.device, "loop0");
    let tracked = loop0.tracked.op(Op::Write).unwrap();
    let other = loop0.other.op(Op::Write).unwrap();
    assert_eq!(tracked.user_ios, 2);
    assert_eq!(tracked.commands, 1);
    assert_eq!(other.user_ios, 1);
    assert_eq!(other.commands, 1);
}

#[test]
fn steady_state_reuses_slots() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    let warm = (
        engine.correlator.chains.fragments.allocated(),
        engine.correlator.chains.commands.allocated(),
        engine.correlator.chains.user_ios.allocated(),
        engine.correlator.chains.remaps.allocated(),
    );
    for _ in 0..20 {
        mixed_workload(&mut engine);
    }
    assert_clean(&engine);
    let after = (
        engine.correlator.chains.fragments.allocated(),
        engine.correlator.chains.commands.allocated(),
        engine.correlator.chains.user_ios.allocated(),
        engine.correlator.chains.remaps.allocated(),
    );
    assert_eq!(warm, after);
    // At most one write (2 fragments) and four reads in flight at once.
    assert!(after.0 <= 6, "{after:?}");
}

#[test]
fn audit_findings_get_live_evidence() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 20);
    for index in 0..5 {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let audit = |disk: &DiskGeometry| -> Vec<Finding> {
        if disk.name != "loop0" {
            return Vec::new();
        }
        ["loop0p2", "loop0p1"]
            .iter()
            .map(|name| {
                let evidence = MisalignedStartEvidence::past_a_4k_block(PartitionPlace {
                    partition_start: 10241,
                    partition_size: 20001,
                });
                Finding::new(
                    name.to_string(),
                    disk.name.clone(),
                    Severity::Warning,
                    Evidence::MisalignedStart(evidence),
                )
            })
            .collect()
    };
    let diagnoses = diagnose::diagnose_with(&engine.devices, &engine.accounting, audit);
    let p2 = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MisalignedStart && diagnosis.device == "loop0p2")
        .unwrap();
    assert_eq!(
        p2.evidence.to_map()["partition_start"],
        10241,
        "static evidence kept"
    );
    assert_eq!(p2.evidence.to_map()["observed_user_ios"], 20);
    assert_eq!(p2.evidence.to_map()["observed_bio_size_p50"], 256 * 512);
    assert_eq!(p2.evidence.to_map()["extra_split_fragments"], 20);
    assert_eq!(p2.evidence.to_map()["misaligned_command_share"], 1.0);
    assert_eq!(p2.evidence.to_map()["bios_per_command"], 0.5);
    assert_eq!(p2.evidence.to_map()["dirty_buffers"], 5);
    assert_eq!(p2.evidence.to_map()["dirty_buffer_sizes"]["512"], 5);
    // No traffic on p1: its finding is left as the audit made it.
    let p1 = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MisalignedStart && diagnosis.device == "loop0p1")
        .unwrap();
    let Evidence::MisalignedStart(p1) = &p1.evidence else {
        panic!("{p1:?}");
    };
    assert_eq!(p1.live, LiveEvidence::default());
}

#[test]
fn audited_subpage_is_not_repeated_from_live_evidence() {
    let mut engine = engine();
    for index in 0..10 {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let audit = |disk: &DiskGeometry| -> Vec<Finding> {
        if disk.name != "loop0" {
            return Vec::new();
        }
        let evidence = SubpageBlockSizeEvidence {
            block_size: 512,
            block_size_source: None,
            current_block_size: None,
            size_mod_8: None,
            partition: None,
            fix: SubpageFix::Partition(None),
            live: LiveEvidence::default(),
            what_if: None,
            seen: SubpageSeen::Geometry {
                predicted_block_size: 512,
                merging: MergeLimits::default(),
            },
        };
        vec![Finding::new(
            "loop0p2".into(),
            "loop0".into(),
            Severity::Warning,
            Evidence::SubpageBlockSize(evidence),
        )]
    };
    let diagnoses = diagnose::diagnose_with(&engine.devices, &engine.accounting, audit);
    assert_eq!(diagnoses.len(), 1);
    let Evidence::SubpageBlockSize(evidence) = &diagnoses[0].evidence else {
        panic!("{diagnoses:?}");
    };
    assert_eq!(
        (evidence.seen, evidence.fix),
        (
            SubpageSeen::Geometry {
                predicted_block_size: 512,
                merging: MergeLimits::default(),
            },
            SubpageFix::Partition(None)
        ),
        "the audit's finding, not one made again from the dirty buffers"
    );
    assert_eq!(diagnoses[0].evidence.to_map()["dirty_buffers"], 10);
}

#[test]
fn uniform_subpage_writes_on_an_unknown_partition_raise_subpage_info() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 9);
    for index in 0..100u64 {
        let sector = 30000 + index * 2;
        feed(
            &mut engine,
            &[
                remap(MS, LOOP0, sector, 2, unknown_part, index * 2),
                queue(MS, LOOP0, sector, 2),
            ],
        );
    }
    let diagnoses = engine.diagnoses();
    // loop0p2's own finding comes from the audit; this one from the bios alone.
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SubpageBlockSize && diagnosis.device == "259:9")
        .unwrap_or_else(|| panic!("{diagnoses:?}"));
    assert_eq!(found.severity, Severity::Info);
    assert_eq!(found.evidence.to_map()["block_size"], 1024);
    // A known partition's geometry belongs to the audit: nothing from bios alone.
    let mut engine = self::engine();
    for index in 0..100u64 {
        let sector = 2048 + index * 2;
        feed(
            &mut engine,
            &[
                remap(MS, LOOP0, sector, 2, P1, index * 2),
                queue(MS, LOOP0, sector, 2),
            ],
        );
    }
    assert!(
        engine
            .diagnoses()
            .iter()
            .all(|diagnosis| diagnosis.code != Code::SubpageBlockSize
                || diagnosis.device != "loop0p1")
    );
}

/// Repeated mixed traffic is counted exactly and stays clean; prints the hot
/// path's throughput (measured, not asserted). For a meaningful number run it in release:
/// `cargo test --release -p iosplit-trace --lib ingest_throughput -- --nocapture`.
#[test]
fn ingest_throughput() {
    let mut engine = engine();
    // Pre-build the events so only ingestion is timed.
    let mut events = Vec::new();
    let mut probe = Engine::new(vec![loop0()], EngineLimits::default());
    let rounds = 2_000u64;
    for round in 0..rounds {
        let ts = MS * (round + 1);
        let base = 2048 + (round % 16) * 512;
        events.extend_from_slice(&[
            remap(ts, LOOP0, base, 512, P1, base - 2048),
            queue(ts, LOOP0, base, 512),
            split(ts, LOOP0, base, base + 256),
            issue(ts, LOOP0, base, 256),
            issue(ts, LOOP0, base + 256, 256),
            complete(ts + 10, LOOP0, base, 256),
            complete(ts + 10, LOOP0, base + 256, 256),
        ]);
        for index in 0..8 {
            events.push(queue(ts, LOOP0, 20000 + index, 1));
            if index > 0 {
                events.push(backmerge(ts, LOOP0, 20000 + index, 1));
            }
        }
        events.push(issue(ts, LOOP0, 20000, 8));
        events.push(complete(ts + 10, LOOP0, 20000, 8));
    }
    feed(&mut probe, &events);
    assert_clean(&probe);
    let repeats = if cfg!(debug_assertions) { 2 } else { 50 };
    let started = std::time::Instant::now();
    for repeat in 0..repeats {
        for event in &events {
            let mut event = *event;
            event.ts_ns += repeat * 10_000 * MS;
            engine.ingest(&event);
        }
    }
    let elapsed = started.elapsed();
    assert_clean(&engine);
    // Per round: one partition write split into two commands, and eight
    // one-sector writes to the disk merged into one command.
    let n = rounds * repeats;
    let events_seen = engine.events();
    assert_eq!(
        (
            events_seen[EventKind::Queue],
            events_seen[EventKind::Issue],
            events_seen[EventKind::Complete],
        ),
        (9 * n, 3 * n, 3 * n)
    );
    let disk = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(
        (disk.user_ios, disk.fragments, disk.commands),
        (9 * n, 10 * n, 3 * n)
    );
    assert_eq!((disk.splits, disk.merges), (n, 7 * n));
    assert_eq!(disk.bytes, (512 + 8) * 512 * n);
    let part = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((part.user_ios, part.commands, part.splits), (n, 2 * n, n));
    assert_eq!(part.commands_per_io.max, 2);
    let count = events.len() as f64 * repeats as f64;
    println!(
        "{count} events in {elapsed:?}: {:.1} M events/s",
        count / elapsed.as_secs_f64() / 1e6
    );
}

#[test]
fn events_without_a_chain_are_counted_where_they_landed() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            // Queued before tracing began: split, merge and completion match nothing.
            split(MS, LOOP0, 10241, 10496),
            backmerge(MS, LOOP0, 10496, 8),
            bio_complete(MS, ZRAM, 0, 8),
        ],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 3);
    assert_eq!(stats.in_flight, 0);
    // Attributed by sector to loop0p2, by rwbs to writes.
    let p2 = part_op(&engine, "loop0", "loop0p2", Op::Write);
    assert_eq!(p2.splits, 1);
    assert_eq!(p2.merges, 1);
    assert_eq!(p2.split_causes.get(&SplitCause::PhysicalBlock), Some(&1));
    assert!(
        engine.devices()[1].measures.ops.is_empty(),
        "zram saw no I/O"
    );
}

#[test]
fn kernel_dirty_totals_count_only_what_grew_and_survive_a_reset() {
    let mut engine = engine();
    let p2 = k(P2);
    let totals = |small: u64| {
        let mut counts = tracer_common::DirtyCounts::default();
        counts.by_size[0] = small;
        vec![(p2, counts)]
    };
    engine.dirty_buffer_totals(&totals(100));
    engine.dirty_buffer_totals(&totals(100));
    assert_eq!(
        engine.events()[EventKind::DirtyBuffer],
        100,
        "an unchanged total adds nothing"
    );
    let found = engine
        .diagnoses()
        .into_iter()
        .find(|d| d.code == Code::SubpageBlockSize)
        .expect("subpage_block_size");
    assert_eq!(found.evidence.to_map()["dirty_buffers"], 100);
    engine.reset();
    engine.dirty_buffer_totals(&totals(130));
    assert_eq!(
        engine.events()[EventKind::DirtyBuffer],
        30,
        "after a reset only the growth counts"
    );
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

/// `count` 1 MiB writes split by max_segments, `depth` of them queued at once.
pub(crate) fn split_megabyte_writes(engine: &mut Engine, count: u64, depth: u64) {
    for batch in 0..count / depth {
        let ts = MS * (batch + 1) * 10;
        let first = batch * depth;
        let starts: Vec<u64> = (first..first + depth).map(|index| index * 2048).collect();
        for &start in &starts {
            feed(
                engine,
                &[
                    queue(ts, LOOP0, start, 2048),
                    split(ts, LOOP0, start, start + 2032),
                ],
            );
        }
        for (offset, &start) in starts.iter().enumerate() {
            let at = ts + 100 + offset as u64 * 10;
            feed(
                engine,
                &[
                    issue(at, LOOP0, start, 2032),
                    issue(at + 5, LOOP0, start + 2032, 16),
                ],
            );
        }
        for &start in &starts {
            feed(
                engine,
                &[
                    complete(ts + MS, LOOP0, start, 2032),
                    complete(ts + MS, LOOP0, start + 2032, 16),
                ],
            );
        }
    }
}

#[test]
fn pieces_of_one_split_are_never_missed_merges() {
    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 1);
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.user_ios, write.splits, write.commands), (32, 32, 64));
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::MergeBlocked), "{codes:?}");
}

#[test]
fn a_piece_cut_at_the_segment_limit_takes_no_merge_from_its_neighbour() {
    // Four writes in flight: each tail is followed by the next write's full
    // front piece, queued before the tail was issued, but 16 sectors more
    // would not fit its 254 segments.
    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 4);
    assert_clean(&engine);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 64);
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::MergeBlocked), "{codes:?}");
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

/// `count` 1 MiB writes split 2032 + 16, each tail requeued once and issued
/// again `delay_us` later, after the head completed.
pub(crate) fn requeued_tails(engine: &mut Engine, count: u64, delay_us: u64) {
    for index in 0..count {
        let start = index * 2048;
        let ts = MS * 10 * (index + 1);
        let reissue = ts + 100 + delay_us * 1000;
        feed(
            engine,
            &[
                queue(ts, LOOP0, start, 2048),
                split(ts, LOOP0, start, start + 2032),
                issue(ts + 10, LOOP0, start, 2032),
                issue(ts + 20, LOOP0, start + 2032, 16),
                requeue(ts + 100, LOOP0, start + 2032, 16),
                complete(reissue - 50, LOOP0, start, 2032),
                issue(reissue, LOOP0, start + 2032, 16),
                complete(reissue + 100_000, LOOP0, start + 2032, 16),
            ],
        );
    }
}

#[test]
fn a_few_requeues_raise_nothing() {
    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 8, 2000);
    split_megabyte_writes(&mut engine, 32, 1);
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::RequeuedCommands), "{codes:?}");
}

fn owned(mut event: BlockEvent, tgid: u32, comm: &str, cgroup: u64, flags: u32) -> BlockEvent {
    use tracer_common::owner_flags;
    event.tgid = tgid;
    event.owner.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    event.owner.cgroup = cgroup;
    event.owner.ino = u64::from(tgid) * 10;
    event.owner.file_dev = k(P1);
    event.owner.flags = owner_flags::COMM | owner_flags::CGROUP | owner_flags::FILE | flags;
    event
}

/// Writer A (tgid 1, cgroup 5): two 4 KiB bios on p1, merged into one command.
fn writer_a_merged_on_p1() -> [BlockEvent; 7] {
    let a = |event| owned(event, 1, "writer-a", 5, 0);
    [
        remap(MS, LOOP0, 2048, 8, P1, 0),
        a(queue(MS, LOOP0, 2048, 8)),
        remap(MS, LOOP0, 2056, 8, P1, 8),
        a(queue(MS, LOOP0, 2056, 8)),
        backmerge(MS, LOOP0, 2056, 8),
        issue(3 * MS, LOOP0, 2048, 16),
        complete(4 * MS, LOOP0, 2048, 16),
    ]
}

#[test]
fn attribution_follows_each_owner_to_its_partition_with_queue_and_device_time() {
    use crate::model::{Dominant, OwnerKnown};
    let mut engine = engine();
    let b = |event| owned(event, 2, "writer-b", 6, 0);
    let kernel = |event| {
        owned(
            event,
            3,
            "kworker/u8:0",
            5,
            tracer_common::owner_flags::KERNEL_THREAD,
        )
    };
    feed(&mut engine, &writer_a_merged_on_p1());
    feed(
        &mut engine,
        &[
            // B: one 8 KiB bio on p2, split into two commands.
            remap(5 * MS, LOOP0, 12000, 16, P2, 1759),
            b(queue(5 * MS, LOOP0, 12000, 16)),
            split(5 * MS, LOOP0, 12000, 12008),
            issue(5 * MS + 100_000, LOOP0, 12000, 8),
            issue(5 * MS + 100_000, LOOP0, 12008, 8),
            complete(8 * MS, LOOP0, 12000, 8),
            complete(8 * MS, LOOP0, 12008, 8),
            // Writeback by a kernel thread, charged to A's cgroup.
            remap(9 * MS, LOOP0, 2100, 8, P1, 52),
            kernel(queue(9 * MS, LOOP0, 2100, 8)),
            issue(9 * MS, LOOP0, 2100, 8),
            complete(10 * MS, LOOP0, 2100, 8),
        ],
    );
    let report = engine.attribution(attribution::TOP_OWNERS);
    let process = |pid: u32| {
        report
            .processes
            .iter()
            .find(|entry| entry.pid == Some(pid))
            .unwrap()
    };
    let (first, second) = (process(1), process(2));
    assert_eq!(first.comm.as_deref(), Some("writer-a"));
    assert_eq!(first.device, "loop0p1");
    assert_eq!(
        (
            first.measures.user_ios,
            first.measures.commands,
            first.measures.merges
        ),
        (2, 1, 1)
    );
    assert_eq!(first.measures.bytes, 8192);
    // Queued at 1 ms, issued at 3 ms, complete at 4 ms: the queue dominates.
    // Owner histograms keep one significant digit (about 6%).
    let waited = first.measures.queue_to_issue_us.p99;
    assert!((1880..=2000).contains(&waited), "{waited}");
    assert_eq!(first.measures.issue_to_complete_us.count, 1);
    assert_eq!(first.measures.dominant, Some(Dominant::Queue));
    assert_eq!(second.device, "loop0p2");
    assert_eq!(
        (
            second.measures.user_ios,
            second.measures.commands,
            second.measures.splits
        ),
        (1, 2, 1)
    );
    assert_eq!(second.measures.amplification, 2.0);
    assert_eq!(second.measures.dominant, Some(Dominant::Device));
    assert_eq!(second.measures.commands_per_io.p99, 2);
    // The kworker is not a process here; its cgroup is A's.
    let writeback = report
        .processes
        .iter()
        .find(|entry| entry.owner == OwnerKnown::KernelThread)
        .unwrap();
    assert_eq!((writeback.pid, writeback.measures.user_ios), (None, 1));
    let cgroup = |id: u64| {
        report
            .cgroups
            .iter()
            .find(|entry| entry.cgroup_id == Some(id))
            .unwrap()
    };
    assert_eq!(cgroup(5).measures.user_ios, 3);
    assert_eq!(cgroup(5).device, "loop0p1");
    assert_eq!(cgroup(6).measures.user_ios, 1);
    assert_eq!(cgroup(6).device, "loop0p2");
    assert_eq!(report.files.len(), 3);
    assert_eq!(report.folded.processes, 0);
    // The devices get the same queue->issue, and the verdict.
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(
        p1.queue_to_issue_us.count, 3,
        "A's two bios and the kworker's"
    );
    assert_eq!(p1.queue_to_issue_us.max, 2000);
    assert_eq!(p1.dominant, Some(Dominant::Queue));
    let p2 = part_op(&engine, "loop0", "loop0p2", Op::Write);
    assert_eq!(p2.queue_to_issue_us.count, 1);
    assert_eq!(p2.dominant, Some(Dominant::Device));
}

// ----- devices coming and going, and losses ---------------------------------

#[test]
fn a_disk_missing_from_a_refresh_is_gone_and_keeps_its_measures() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 2048, 8, P1, 0),
            queue(MS, LOOP0, 2048, 8),
            issue(2 * MS, LOOP0, 2048, 8),
            complete(3 * MS, LOOP0, 2048, 8),
        ],
    );
    // loop0 detached: only zram and dm are left.
    engine.refresh_disks(vec![zram(), dm()]);
    let devices = engine.devices();
    let gone = device(&devices, "loop0");
    assert!(gone.gone);
    assert!(gone.partitions.iter().all(|part| part.gone));
    assert!(!device(&devices, "zram0").gone);
    let writes = gone.partitions[0].measures.op(Op::Write).unwrap();
    assert_eq!((writes.user_ios, writes.commands), (1, 1));

    // Attached again under the same number, without its second partition.
    let mut back = loop0();
    back.partitions.truncate(1);
    engine.refresh_disks(vec![back, zram(), dm()]);
    let devices = engine.devices();
    let again = device(&devices, "loop0");
    assert!(!again.gone);
    assert!(!again.partitions[0].gone);
    assert!(again.partitions[1].gone, "loop0p2 was deleted");
}

#[test]
fn a_disk_never_in_sysfs_is_not_called_gone() {
    let mut engine = engine();
    let stray = DevId::new(8, 0);
    feed(&mut engine, &[queue(MS, stray, 0, 8)]);
    engine.refresh_disks(vec![loop0(), zram(), dm()]);
    let devices = engine.devices();
    assert!(!device(&devices, "8:0").gone);
}

#[test]
fn chains_in_flight_at_a_loss_are_incomplete_and_feed_no_histogram() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), issue(2 * MS, LOOP0, 0, 8)],
    );
    // The ring overflowed here: this chain may have lost an event.
    engine.events_lost();
    feed(
        &mut engine,
        &[
            complete(3 * MS, LOOP0, 0, 8),
            // A chain that starts after the loss is whole.
            queue(4 * MS, LOOP0, 64, 8),
            issue(5 * MS, LOOP0, 64, 8),
            complete(6 * MS, LOOP0, 64, 8),
        ],
    );
    assert_eq!(engine.correlation().incomplete, 1);
    assert_eq!(engine.correlation().in_flight, 0);
    let devices = engine.devices();
    let writes = device(&devices, "loop0").measures.op(Op::Write).unwrap();
    assert_eq!(writes.user_ios, 2);
    assert_eq!(writes.commands, 2);
    assert_eq!(writes.commands_per_io.count, 1);
    assert_eq!(writes.queue_to_complete_us.count, 1);
    assert_eq!(
        writes.issue_to_complete_us.count, 1,
        "the lost command's latency is not recorded"
    );
}

#[test]
fn without_owners_the_engine_attributes_nothing_and_measures_the_same() {
    let events = writer_a_merged_on_p1();
    let mut kept = engine();
    feed(&mut kept, &events);
    let mut off = engine();
    off.attribute_owners(false);
    feed(&mut off, &events);
    assert_eq!(kept.attribution(attribution::TOP_OWNERS).processes.len(), 1);
    let nothing = off.attribution(attribution::TOP_OWNERS);
    assert!(nothing.processes.is_empty() && nothing.cgroups.is_empty() && nothing.files.is_empty());
    assert_eq!(
        part_op(&kept, "loop0", "loop0p1", Op::Write),
        part_op(&off, "loop0", "loop0p1", Op::Write)
    );
    assert_eq!(part_op(&off, "loop0", "loop0p1", Op::Write).merges, 1);
    assert_clean(&off);
}

/// A split finding counts user I/Os, not cuts, and only of the op it names:
/// 10 writes cut 3 times each among 200 unsplit reads are 10 of 10 writes.
#[test]
fn split_shares_count_user_ios_of_the_op_they_name() {
    let mut engine = engine();
    for index in 0..10 {
        let base = index * 1024;
        let ts = MS * (index + 1);
        let mut events = vec![queue(ts, LOOP0, base, 1024)];
        for piece in 1..4 {
            events.push(split(
                ts,
                LOOP0,
                base + (piece - 1) * 256,
                base + piece * 256,
            ));
        }
        for piece in 0..4 {
            events.push(issue(ts, LOOP0, base + piece * 256, 256));
            events.push(complete(ts, LOOP0, base + piece * 256, 256));
        }
        feed(&mut engine, &events);
    }
    for index in 0..200 {
        let read = |event: BlockEvent| BlockEvent {
            rwbs: rwbs("R"),
            ..event
        };
        let (ts, sector) = (20 * MS + index * 1000, 100_000 + index * 8);
        feed(
            &mut engine,
            &[
                read(queue(ts, LOOP0, sector, 8)),
                read(issue(ts, LOOP0, sector, 8)),
                read(complete(ts, LOOP0, sector, 8)),
            ],
        );
    }
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.op, Op::Write);
    assert_eq!(
        (split.split_user_ios, split.user_ios, split.splits),
        (10, 10, 30)
    );
    assert_eq!((split.fragments, split.commands), (40, 40));
    assert_eq!(split.split_share, 1.0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.split_user_ios, write.splits), (10, 30));
    assert_eq!(write.split_share(), 1.0);
    assert_eq!(disk_op(&engine, "loop0", Op::Read).split_user_ios, 0);
}

/// dm-stripe traced alone prints Q and X lines only: no command below the
/// splits, so nothing is concluded about their cost, and the fix is dm's own
/// boundaries, not "a stacked device above" the dm device itself.
#[test]
fn splits_on_a_bio_based_device_with_no_commands_in_the_trace_are_not_priced() {
    let mut engine = engine();
    for index in 0..20 {
        // 144 KiB writes starting 32 sectors before a 64 KiB stripe chunk
        // ends: cut there and at the next chunk; no queue limit of dm-0 says so.
        let base = index * 1024 + 96;
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                queue(ts, DM, base, 288),
                split(ts, DM, base, base + 32),
                split(ts, DM, base + 32, base + 160),
            ],
        );
    }
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cost, split.fix),
        (
            SplitCost::Unmeasured,
            SplitFix::AlignToOwnBoundaries {
                boundary_sectors: 128
            }
        )
    );
    assert_eq!(split.commands, 0);
    assert!(split.what_if.is_none());
    assert_eq!(finding.severity, Severity::Info);
    let words = crate::explain::words(&finding);
    assert!(
        words.explanation.contains("cannot be measured"),
        "{}",
        words.explanation
    );
    assert!(
        !words.explanation.contains("cost nothing"),
        "{}",
        words.explanation
    );
    assert!(words.fix.contains("dmsetup table dm-0"), "{}", words.fix);
    assert!(
        words
            .explanation
            .contains("Every split point is a multiple of 128 sectors (64 KiB)"),
        "{}",
        words.explanation
    );
    assert!(!words.fix.contains("above dm-0"), "{}", words.fix);
}

/// md on NVMe printed A, D, C and no Q: the md bio is read off the remap,
/// the remapped bio is queued at its issue, and the md bio's time is A→C.
#[test]
fn a_remapped_bio_issued_without_a_queue_is_queued_at_its_issue() {
    let mut engine = engine();
    let md = DevId::new(9, 127);
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 4096, 8, md, 1024),
            issue(2 * MS, LOOP0, 4096, 8),
            complete(3 * MS, LOOP0, 4096, 8),
        ],
    );
    let upper = disk_op(&engine, "9:127", Op::Write);
    assert_eq!(upper.user_ios, 1);
    assert_near(upper.queue_to_complete_us.p50, 2000);
    let lower = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((lower.user_ios, lower.commands), (1, 1));
    let correlation = engine.correlation();
    assert_eq!(correlation.queues_from_remaps, 2);
    assert_eq!(
        (correlation.unmatched_events, correlation.in_flight),
        (0, 0)
    );
}

/// A few split writes among many do not hide reads that were all split.
#[test]
fn the_split_finding_names_the_op_that_was_split_enough() {
    let mut engine = engine();
    max_sectors_splits(&mut engine, 20);
    let read = |event: BlockEvent| BlockEvent {
        rwbs: rwbs("R"),
        ..event
    };
    // 200 unsplit writes, so 20 split writes would be 9%...
    for index in 0..200 {
        let (ts, sector) = (30 * MS + index * 1000, 20_000 + index * 8);
        feed(
            &mut engine,
            &[
                queue(ts, LOOP0, sector, 8),
                issue(ts, LOOP0, sector, 8),
                complete(ts, LOOP0, sector, 8),
            ],
        );
    }
    // ...while 18 reads are all split.
    for index in 0..18 {
        let base = 30_000 + index * 512;
        let ts = 60 * MS + index * MS;
        feed(
            &mut engine,
            &[
                read(queue(ts, LOOP0, base, 512)),
                read(split(ts, LOOP0, base, base + 256)),
                read(issue(ts, LOOP0, base, 256)),
                read(issue(ts, LOOP0, base + 256, 256)),
                read(complete(ts, LOOP0, base, 256)),
                read(complete(ts, LOOP0, base + 256, 256)),
            ],
        );
    }
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.op, Op::Read);
    assert_eq!((split.split_user_ios, split.user_ios), (18, 18));
}

/// md raid0 with 64 KiB chunks: `writes` writes of `sectors` each, every
/// one `offset` sectors into a chunk and apart from the others, cut at each
/// chunk boundary; each piece is md1's command.
fn raid0_writes(writes: u64, sectors: u64, offset: u64) -> Engine {
    let md = DevId::new(9, 1);
    let raid0 = DiskGeometry {
        name: "md1".into(),
        dev: Some(md),
        logical_block_size: 512,
        physical_block_size: 4096,
        max_sectors_kb: 64,
        max_hw_sectors_kb: 64,
        chunk_sectors: 128,
        request_based: false,
        ..DiskGeometry::default()
    };
    let mut engine = Engine::new(vec![loop0(), raid0], EngineLimits::default());
    for index in 0..writes {
        let base = index * 4096 + offset;
        let ts = MS * (index + 1);
        let mut events = vec![queue(ts, md, base, sectors as u32)];
        let mut start = base;
        let end = base + sectors;
        while (start / 128 + 1) * 128 < end {
            let cut = (start / 128 + 1) * 128;
            events.push(split(ts, md, start, cut));
            events.push(bio_complete(ts + MS / 2, md, start, (cut - start) as u32));
            start = cut;
        }
        events.push(bio_complete(ts + MS / 2, md, start, (end - start) as u32));
        feed(&mut engine, &events);
    }
    engine
}

/// 1 MiB writes on chunk boundaries become one command per chunk: the
/// stripe working, not amplification to fix (the `stacks` VM scenario's
/// md1 and dm-striped were called critical before).
#[test]
fn chunk_cuts_of_aligned_io_larger_than_a_chunk_are_striping_by_design() {
    let engine = raid0_writes(20, 2048, 0);
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cause, split.commands),
        (SplitCause::ChunkBoundary, 320)
    );
    assert_eq!(split.cost, SplitCost::ByDesign);
    assert_eq!(finding.severity, Severity::Info);
    assert!(split.what_if.is_none(), "{:?}", split.what_if);
    let words = crate::explain::words(&finding);
    assert!(
        words.explanation.contains("striping"),
        "{}",
        words.explanation
    );
}

/// 64 KiB writes starting half a chunk in are each cut once: aligned, each
/// would be one command, and the what-if says so.
#[test]
fn chunk_cuts_of_io_that_straddles_a_chunk_are_priced_to_the_aligned_minimum() {
    let engine = raid0_writes(20, 128, 64);
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cause, split.commands),
        (SplitCause::ChunkBoundary, 40)
    );
    assert_eq!(split.cost, SplitCost::ExtraCommands);
    assert_ne!(finding.severity, Severity::Info);
    let what_if = split.what_if.as_ref().expect("a what-if");
    assert_eq!((what_if.commands_now, what_if.commands_after_fix), (40, 20));
}

/// md raid5 writes a stripe's data and parity in 4 KiB bios of its own,
/// each remapped from md2 (the parity ones from its sector 0, as the
/// `stacks` VM scenario's trace shows), and completes the user's bio whole.
/// Those remaps neither cut the user's bio nor leave it in flight.
#[test]
fn raid5_stripe_bios_continue_the_write_without_cutting_it() {
    let md = DevId::new(9, 2);
    let raid5 = DiskGeometry {
        name: "md2".into(),
        dev: Some(md),
        logical_block_size: 512,
        physical_block_size: 4096,
        request_based: false,
        stack: Some(crate::geometry::stack::Stack {
            kind: "md-raid5".into(),
            chunk_sectors: 128,
            ..Default::default()
        }),
        ..DiskGeometry::default()
    };
    let mut engine = Engine::new(vec![loop0(), raid5], EngineLimits::default());
    engine.track_processes([42]);
    let mut on_md = queue(MS, md, 0, 16);
    on_md.tgid = 42;
    let mut events = vec![on_md];
    for stripe in 0..2u64 {
        let sector = stripe * 8;
        for (part, start, from) in [(P1, 2048, sector), (P2, 10241, 0)] {
            let mut lower = queue(MS, LOOP0, start + sector, 8);
            lower.tgid = 7;
            events.extend([
                remap(MS, LOOP0, sector, 8, md, from),
                remap(MS, LOOP0, start + sector, 8, part, sector),
                lower,
            ]);
            if stripe == 1 {
                events.push(backmerge(MS, LOOP0, start + sector, 8));
            }
        }
    }
    for start in [2048, 10241] {
        events.push(issue(2 * MS, LOOP0, start, 16));
        events.push(complete(3 * MS, LOOP0, start, 16));
    }
    events.push(bio_complete(4 * MS, md, 0, 16));
    feed(&mut engine, &events);
    assert_eq!(
        engine.correlation(),
        CorrelationStats {
            stripe_remaps: 4,
            ..CorrelationStats::default()
        }
    );
    let upper = disk_op(&engine, "md2", Op::Write);
    assert_eq!(
        (
            upper.user_ios,
            upper.splits,
            upper.commands,
            upper.disk_commands
        ),
        (1, 0, 1, 2),
        "one write, never cut, one command on each of its two disks"
    );
    assert_near(upper.queue_to_complete_us.p50, 3000);
    let origins = engine.origins();
    for part in ["loop0p1", "loop0p2"] {
        let origin = origins.iter().find(|o| o.device == part).unwrap();
        assert_eq!(
            origin.tracked.op(Op::Write).map(|op| op.user_ios),
            Some(2),
            "{part}: md's stripe bios are the writer's"
        );
    }
}

/// The accounting counts outcomes and nothing else: on any event stream,
/// the devices' counts are the outcomes' counts, so a view that reads the
/// outcomes can never count other than the report.
#[test]
fn the_report_counts_exactly_what_the_outcomes_say() {
    use super::outcome::Outcome;
    let mut engine = Engine::new(vec![loop0(), zram(), dm()], EngineLimits::default());
    engine.keep_outcomes();
    let mut rng = Rng(0x005e_ed0f_0c0e);
    let mut ts = 0;
    let (mut queued, mut split, mut merged, mut issued) = (0u64, 0u64, 0u64, 0u64);
    let (mut requeued, mut failed, mut reached) = (0u64, 0u64, 0u64);
    for _ in 0..50_000 {
        engine.ingest(&garbage(&mut rng, &mut ts));
        for outcome in engine.drain_outcomes() {
            match outcome {
                Outcome::Queued { .. } => queued += 1,
                Outcome::Split { .. } => split += 1,
                Outcome::Merged { .. } => merged += 1,
                Outcome::Issued { .. } => issued += 1,
                Outcome::Requeued { .. } => requeued += 1,
                Outcome::Failed { .. } => failed += 1,
                Outcome::ReachedDisk { .. } => reached += 1,
                _ => {}
            }
        }
    }
    let mut counted = [0u64; 7];
    for report in engine.devices() {
        for measures in report.measures.ops.values() {
            counted[0] += measures.user_ios;
            counted[1] += measures.splits;
            counted[2] += measures.merges;
            counted[3] += measures.commands;
            counted[4] += measures.requeues;
            counted[5] += measures.failed_commands;
            counted[6] += measures.disk_commands;
        }
    }
    let told = [queued, split, merged, issued, requeued, failed, reached];
    // Random events rarely make a stack; the stacked tests count those.
    assert!(
        told[..6].iter().all(|&count| count > 0),
        "every kind seen: {told:?}"
    );
    assert_eq!(counted, told);
}
