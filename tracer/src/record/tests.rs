//! Writer → file → reader round trips, cut and corrupted files.

use std::path::PathBuf;

use tracer_common::{BlockEvent, DirtyCounts, EventKind, OpenEvent, ProcessEvent};

use super::format::{RecordError, BLOCK_RAW_BYTES};
use super::*;
use crate::sink::EventSink;

/// Counts what reaches the inner sink.
#[derive(Default)]
struct Counting {
    blocks: u64,
}

impl EventSink for Counting {
    fn block_event(&mut self, _event: &BlockEvent) {
        self.blocks += 1;
    }
}

impl crate::sink::DiskSink for Counting {
    fn refresh_disks(&mut self, _disks: Vec<crate::geometry::DiskGeometry>) {}
}

fn scratch_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iosplit-record-{}-{name}", std::process::id()))
}

fn block(index: u64) -> BlockEvent {
    let mut event = BlockEvent::ZERO;
    event.ts_ns = 1_000 + index;
    event.sector = index * 8;
    event.nr_sector = 8;
    event.dev = 7 << 20;
    event.kind = EventKind::Queue as u8;
    event.rwbs[0] = b'W';
    // Every third event carries an owner (a full record); the rest are bare.
    if index.is_multiple_of(3) {
        event.owner.comm[..2].copy_from_slice(b"dd");
        event.owner.cgroup = 77;
        event.owner.flags = tracer_common::owner_flags::COMM | tracer_common::owner_flags::CGROUP;
    }
    event
}

fn header() -> RecordHeader {
    RecordHeader {
        tool: "iosplit-trace test".into(),
        kernel_release: "6.18.0".into(),
        probe_flavor: "raw tracepoints".into(),
        recorded_by: "report".into(),
        geometry: vec![crate::geometry::DiskGeometry {
            name: "loop0".into(),
            dev: Some(crate::geometry::DevId::new(7, 0)),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Writes `events` block events around one of each other item; returns the file's bytes.
fn write_recording(name: &str, events: u64) -> (Vec<u8>, Vec<Item>) {
    let path = scratch_file(name);
    let mut writer = Writer::create(&path).unwrap();
    let mut sink = RecordingSink::new(Counting::default(), Some(&mut writer));
    let mut expected = Vec::new();
    let mut process = ProcessEvent::ZERO;
    process.tgid = 42;
    sink.process_event(&process);
    expected.push(Item::Process(process));
    for index in 0..events {
        sink.block_event(&block(index));
        expected.push(Item::Block(block(index)));
    }
    let mut dirty = DirtyCounts::default();
    dirty.by_size[1] = 5;
    sink.dirty_buffer_totals(&[(7 << 20, dirty)]);
    expected.push(Item::DirtyTotals(vec![(7 << 20, dirty)]));
    let mark = Trailer {
        missed: 2,
        duration_s: 0.25,
        ..Default::default()
    };
    sink.mark_interval(mark);
    expected.push(Item::Interval(mark));
    sink.events_lost();
    expected.push(Item::EventsLost);
    let disks = header().geometry;
    crate::sink::DiskSink::refresh_disks(&mut sink, disks.clone());
    expected.push(Item::Geometry(disks));
    let open = OpenEvent {
        event: process,
        path: [b'x'; tracer_common::PATH_BYTES],
    };
    sink.open_event(&open);
    expected.push(Item::Open(Box::new(open)));
    let names = crate::model::OwnerNames {
        cgroups: vec![(77, "/a".into())],
        files: Vec::new(),
    };
    sink.record_names(&names);
    expected.push(Item::OwnerNames(names));
    let run = format::RunRecord {
        tracked_devices: vec!["loop0p1".into()],
        written: vec!["loop0p1".into()],
        ..Default::default()
    };
    sink.record_run(&run);
    expected.push(Item::Run(Box::new(run)));
    // The header arrives after the first blocks, as with a live capture.
    writer.header(header());
    sink.finish_recording(Trailer {
        dropped: 3,
        duration_s: 1.5,
        ..Default::default()
    });
    assert_eq!(sink.inner.blocks, events);
    drop(sink);
    writer.close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    (bytes, expected)
}

#[test]
fn a_recording_reads_back_item_for_item() {
    let (bytes, expected) = write_recording("round-trip", 100);
    let mut recording = Recording::new(&bytes[..]).unwrap();
    assert_eq!(recording.header, header());
    let items: Vec<Item> = recording.by_ref().map(Result::unwrap).collect();
    assert_eq!(items, expected);
    assert_eq!(recording.trailer.unwrap().dropped, 3);
    assert_eq!(recording.truncated, None);
}

#[test]
fn a_cut_file_reads_up_to_its_last_complete_block() {
    // Enough events for two full blocks and a partial one.
    let events = (2 * BLOCK_RAW_BYTES / 57 + 100) as u64;
    let (bytes, expected) = write_recording("cut", events);
    let whole: Vec<Item> = Recording::new(&bytes[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(whole.len(), expected.len());
    // Cut inside the last events block: the first blocks' items survive.
    let cut = &bytes[..bytes.len() - 200];
    let mut recording = Recording::new(cut).unwrap();
    let items: Vec<Item> = recording.by_ref().map(Result::unwrap).collect();
    let truncation = recording.truncated.expect("a cut file is marked truncated");
    assert!(truncation.complete_blocks >= 3, "{truncation:?}");
    assert!(items.len() > BLOCK_RAW_BYTES / 57 && items.len() < expected.len());
    assert_eq!(items[..], expected[..items.len()]);
    assert!(recording.trailer.is_none());
}

#[test]
fn every_prefix_of_a_small_recording_reads_or_fails_cleanly() {
    let (bytes, expected) = write_recording("prefixes", 10);
    for length in 0..bytes.len() {
        match Recording::new(&bytes[..length]) {
            Ok(recording) => {
                let items: Vec<Item> = recording.map(Result::unwrap).collect();
                assert_eq!(items[..], expected[..items.len()], "cut at {length}");
            }
            Err(RecordError::Empty | RecordError::NoHeader) => {}
            Err(other) => panic!("cut at {length}: {other}"),
        }
    }
}

#[test]
fn a_flipped_byte_is_corruption_not_garbage() {
    let (mut bytes, _) = write_recording("flip", 1000);
    let last = bytes.len() - 10;
    bytes[last] ^= 0x40;
    let failure = Recording::new(&bytes[..])
        .unwrap()
        .find_map(Result::err)
        .expect("the flipped block fails");
    assert!(
        failure.to_string().contains("checksum mismatch"),
        "{failure}"
    );
}

#[test]
fn a_recording_that_never_started_leaves_no_file() {
    let path = scratch_file("never-started");
    let writer = Writer::create(&path).unwrap();
    assert!(path.exists());
    drop(writer);
    assert!(!path.exists(), "{} was left behind", path.display());
}

/// The same recording with its packed blocks stored as format 3 wrote
/// them (plain records in the zstd frame, version 3 in the preamble).
fn as_format_3(bytes: &[u8]) -> Vec<u8> {
    use format::{BlockHeader, BlockKind, BLOCK_HEADER_BYTES, PREAMBLE_BYTES};
    let mut old = bytes[..PREAMBLE_BYTES].to_vec();
    old[8..12].copy_from_slice(&3u32.to_le_bytes());
    let mut at = PREAMBLE_BYTES;
    while at < bytes.len() {
        let header =
            BlockHeader::decode(bytes[at..][..BLOCK_HEADER_BYTES].try_into().unwrap()).unwrap();
        let payload = &bytes[at + BLOCK_HEADER_BYTES..][..header.payload_len as usize];
        at += BLOCK_HEADER_BYTES + payload.len();
        let (kind, payload) = match BlockKind::from_u8(header.kind) {
            Some(BlockKind::PackedEvents) => {
                let packed = zstd::bulk::decompress(payload, header.raw_len as usize).unwrap();
                let mut raw = Vec::new();
                pack::unpack(&packed, &mut raw).unwrap();
                (
                    BlockKind::Events as u8,
                    zstd::bulk::compress(&raw, 1).unwrap(),
                )
            }
            _ => (header.kind, payload.to_vec()),
        };
        let raw_len = match kind == header.kind {
            true => header.raw_len,
            false => zstd::bulk::decompress(&payload, 64 << 20).unwrap().len() as u32,
        };
        let rewritten = BlockHeader {
            kind,
            raw_len,
            payload_len: payload.len() as u32,
            checksum: format::checksum(&payload),
        };
        old.extend_from_slice(&rewritten.encode());
        old.extend_from_slice(&payload);
    }
    old
}

#[test]
fn event_blocks_are_packed_and_format_3_files_read_the_same() {
    let (bytes, expected) = write_recording("format-3", 2000);
    let old = as_format_3(&bytes);
    assert!(
        bytes.len() < old.len(),
        "packed {} vs plain {}",
        bytes.len(),
        old.len()
    );
    let items: Vec<Item> = Recording::new(&old[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(items, expected);
}
