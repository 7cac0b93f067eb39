//! The documentation against the repository (no root, no probes): the
//! README stays a front door, every relative link resolves inside the
//! repository, and docs/json-schema.md names every key the JSON output has.
//!
//! The keys come from the real binary (`analyze --json`) on the committed
//! corpus and on synthetic recordings written here that raise every
//! diagnosis code, and from `check --json` on the seed's fixture sysfs
//! trees. The check runs both ways: a key the output has must be documented,
//! and a documented key must come out of these inputs (or be listed in
//! [`NOT_PRODUCED`]), so the inputs keep covering the schema.

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use iosplit_trace::frontend::check::check_in;
use iosplit_trace::geometry::ioctl::NoIoctls;
use iosplit_trace::geometry::stack::{CryptMaxIo, Stack, StackLeg, StackLevel};
use iosplit_trace::geometry::{AtomicLimits, DevId, DiskGeometry, PartitionGeometry};
use iosplit_trace::model::{
    AttachEnd, Code, Distribution, FilesNotListed, IoSubmitReport, Measures, OwnerNames,
    RunAttached, RunFile, RunMapped, RunReport, RunTarget, RunTimeWithFix, UringReport,
};
use iosplit_trace::record::format::RunRecord;
use iosplit_trace::record::{RecordHeader, RecordingSink, Trailer, Writer};
use iosplit_trace::sink::EventSink;
use serde_json::Value;
use tracer_common::{owner_flags, BlockEvent, EventKind, RWBS_BYTES};

const README_MAX_LINES: usize = 300;
const README_MAX_LINE_CHARS: usize = 200;

/// Documented keys no unprivileged input here can produce, and why.
const NOT_PRODUCED: &[(&str, &str)] = &[
    (
        "mount",
        "set only when a live run resolves a file's mount point",
    ),
    (
        "probes",
        "iosplit-trace/floor needs the noop probes loaded (root)",
    ),
    ("captured", "iosplit-trace/floor"),
    ("seconds", "iosplit-trace/floor"),
    ("note", "iosplit-trace/floor"),
    (
        "pod_uid",
        "read from live cgroup paths (tests/attribution.rs makes the kubelet's)",
    ),
    ("qos", "read from live cgroup paths"),
    ("container_id", "read from live cgroup paths"),
    ("unit", "read from live cgroup paths"),
    (
        "requeues_inferred",
        "left out when 0; a trace lacking a requeue (engine/tests/fidelity.rs)",
    ),
    (
        "splits_inferred",
        "left out when 0; an md cut no block_split traced (engine/tests/stacks.rs; the VM's stacks on 6.1)",
    ),
    (
        "tag_waits",
        "counted live in the kernel (7.2+), not recorded: the VM's blk-oracle on 7.x",
    ),
    (
        "passthrough",
        "live NVMe passthrough joined to nvme_setup_cmd (importers skip passthrough lines): the VM's nvme-virt-boundary",
    ),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// README.md and every docs/*.md.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn readme_is_a_front_door() {
    let readme = read(&repo_root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}): move detail into docs/"
    );
    let long: Vec<String> = readme
        .lines()
        .enumerate()
        .filter(|(_, line)| line.chars().count() > README_MAX_LINE_CHARS)
        .map(|(index, line)| format!("line {}: {} chars", index + 1, line.chars().count()))
        .collect();
    assert!(
        long.is_empty(),
        "README.md lines over {README_MAX_LINE_CHARS} characters: {long:?}"
    );
    // One line per diagnosis code, so a new code is listed where readers start.
    for code in all_codes() {
        assert!(
            readme.contains(&format!("**`{code}`**")),
            "README.md's \"What it finds\" lacks `{code}`"
        );
    }
}

/// The text outside fenced code blocks and inline code spans.
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Targets of inline links and images, `[text](target)`.
fn link_targets(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // Targets may hold balanced parentheses; they end at the one closing the link.
        let mut depth = 0;
        let mut end = None;
        for (index, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(index);
                    break;
                }
                ')' => depth -= 1,
                '\n' => break,
                _ => {}
            }
        }
        if let Some(end) = end {
            // `[text](target "title")`: the title is not part of the target.
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_string());
        }
        rest = after;
    }
    targets
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to
/// hyphens; repeated headings get `-1`, `-2`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// `path` with `.` and `..` folded, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn relative_links_resolve_inside_the_repository() {
    let root = repo_root();
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let name = file.strip_prefix(&root).unwrap().display().to_string();
            if target.contains("://") || target.starts_with("mailto:") || path.starts_with('/') {
                broken.push(format!("{name}: {target} (not a relative link)"));
                continue;
            }
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                normalize(&dir.join(path))
            };
            if !resolved.starts_with(&root) {
                broken.push(format!("{name}: {target} leaves the repository"));
            } else if !resolved.exists() {
                broken.push(format!("{name}: {target} does not exist"));
            } else if let Some(anchor) = anchor {
                let is_markdown = resolved.extension().is_some_and(|ext| ext == "md");
                if is_markdown && !anchors(&read(&resolved)).contains(anchor) {
                    broken.push(format!("{name}: {target}: no heading makes #{anchor}"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

// ---- The JSON schema ----

/// Every diagnosis code (`Code::ALL`); a new one goes into the synthetic recording.
fn all_codes() -> impl Iterator<Item = &'static str> {
    Code::ALL.into_iter().map(Code::as_str)
}

/// Every key of every object in `value`, each with one path where it occurs
/// (arrays flattened as `[]`). Keys that are numbers (`dirty_buffer_sizes`)
/// are data, not names.
fn collect_keys(value: &Value, path: &str, keys: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                if !key.chars().all(|c| c.is_ascii_digit()) {
                    keys.entry(key.clone())
                        .or_insert_with(|| child_path.clone());
                }
                collect_keys(child, &child_path, keys);
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_keys(item, &format!("{path}[]"), keys);
            }
        }
        _ => {}
    }
}

/// The keys docs/json-schema.md documents: the backticked names in the first
/// column of its tables.
fn documented_keys(schema: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in schema.lines() {
        let Some(row) = line.strip_prefix('|') else {
            continue;
        };
        let first = row.split('|').next().unwrap_or("");
        for (index, piece) in first.split('`').enumerate() {
            if index % 2 == 1 && !piece.is_empty() {
                keys.insert(piece.to_string());
            }
        }
    }
    keys
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("iosplit-docs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Nothing;

impl EventSink for Nothing {
    fn block_event(&mut self, _event: &BlockEvent) {}
}

const MS: u64 = 1_000_000;
const LOOP9: DevId = DevId::new(7, 9);
const LOOP9P1: DevId = DevId::new(259, 1);
const LOOP9P2: DevId = DevId::new(259, 2);
const LOOP9P3: DevId = DevId::new(259, 3);
const VIRTIO: DevId = DevId::new(254, 0);
const NOMERGES: DevId = DevId::new(7, 8);
const RAID: DevId = DevId::new(8, 0);
const RAID1: DevId = DevId::new(8, 1);
const FAILING: DevId = DevId::new(7, 7);
const DISCARDING: DevId = DevId::new(7, 6);
const STRIPED: DevId = DevId::new(253, 4);
const OFFSET_DM: DevId = DevId::new(253, 5);

fn rwbs(text: &str) -> [u8; RWBS_BYTES] {
    let mut bytes = [0; RWBS_BYTES];
    for (slot, byte) in bytes.iter_mut().zip(text.bytes()) {
        *slot = byte;
    }
    bytes
}

fn event(kind: EventKind, ts_ns: u64, dev: DevId, sector: u64, nr_sector: u32) -> BlockEvent {
    BlockEvent {
        ts_ns,
        sector,
        dev: dev.to_kernel(),
        nr_sector,
        tgid: 100,
        rwbs: rwbs("W"),
        kind: kind as u8,
        ..BlockEvent::ZERO
    }
}

fn queue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Queue, ts, dev, sector, nr)
}
fn issue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Issue, ts, dev, sector, nr)
}
fn complete(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Complete, ts, dev, sector, nr)
}
fn requeue(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::Requeue, ts, dev, sector, nr)
}
fn split(ts: u64, dev: DevId, sector: u64, new_sector: u64) -> BlockEvent {
    BlockEvent {
        aux_sector: new_sector,
        ..event(EventKind::Split, ts, dev, sector, 0)
    }
}
fn bio_complete(ts: u64, dev: DevId, sector: u64, nr: u32) -> BlockEvent {
    event(EventKind::BioComplete, ts, dev, sector, nr)
}
fn remap(ts: u64, dev: DevId, sector: u64, nr: u32, old: DevId, old_sector: u64) -> BlockEvent {
    BlockEvent {
        aux_dev: old.to_kernel(),
        aux_sector: old_sector,
        ..event(EventKind::Remap, ts, dev, sector, nr)
    }
}

/// A queue event with the owner the BTF probe reads.
fn owned(mut event: BlockEvent, tgid: u32, comm: &str, flags: u32) -> BlockEvent {
    event.tgid = tgid;
    event.owner.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    event.owner.cgroup = 5;
    event.owner.ino = 10;
    event.owner.file_dev = LOOP9P1.to_kernel();
    event.owner.flags = owner_flags::COMM | owner_flags::CGROUP | flags;
    event
}

/// loop9: 4 KiB physical blocks, 128 KiB commands, `none` scheduler, atomic
/// writes of 4 KiB to 64 KiB; p1 aligned, p2 misaligned with an odd size
/// (so it loses the atomic writes), p3 odd-sized but held open with 4 KiB
/// blocks.
fn loop9() -> DiskGeometry {
    DiskGeometry {
        name: "loop9".into(),
        dev: Some(LOOP9),
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
        nr_requests: 128,
        hw_queue_tags: 128,
        block_size: Some(4096),
        atomic: Some(AtomicLimits {
            unit_min_bytes: 4096,
            unit_max_bytes: 65536,
            max_bytes: 65536,
            boundary_bytes: 0,
        }),
        partitions: vec![
            PartitionGeometry {
                name: "loop9p1".into(),
                dev: Some(LOOP9P1),
                number: 1,
                start: 2048,
                size: 8192,
                block_size: Some(4096),
                ..Default::default()
            },
            PartitionGeometry {
                name: "loop9p2".into(),
                dev: Some(LOOP9P2),
                number: 2,
                start: 10241,
                size: 20001,
                alignment_offset: 3584,
                ..Default::default()
            },
            PartitionGeometry {
                name: "loop9p3".into(),
                dev: Some(LOOP9P3),
                number: 3,
                start: 30720,
                size: 8193,
                block_size: Some(4096),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// A virtio disk without indirect descriptors (its ring fills).
fn virtio() -> DiskGeometry {
    DiskGeometry {
        name: "vdt".into(),
        dev: Some(VIRTIO),
        size_sectors: 1 << 21,
        logical_block_size: 512,
        physical_block_size: 512,
        minimum_io_size: 512,
        max_sectors_kb: 4096,
        max_hw_sectors_kb: 4096,
        max_segments: 254,
        max_segment_size: u32::MAX,
        scheduler: "mq-deadline".into(),
        request_based: true,
        nr_requests: 256,
        hw_queue_tags: 128,
        virtio_indirect_desc: Some(false),
        ..Default::default()
    }
}

fn nomerges_disk() -> DiskGeometry {
    DiskGeometry {
        name: "loop8".into(),
        dev: Some(NOMERGES),
        nomerges: 2,
        partitions: Vec::new(),
        block_size: None,
        ..loop9()
    }
}

/// A disk whose backing store fills: some writes fail with ENOSPC.
fn failing_disk() -> DiskGeometry {
    DiskGeometry {
        name: "loop7".into(),
        dev: Some(FAILING),
        partitions: Vec::new(),
        block_size: None,
        ..loop9()
    }
}

/// An SSD-like disk whose discard cap (64 KiB) is far below what it takes.
fn discard_disk() -> DiskGeometry {
    DiskGeometry {
        name: "loop6".into(),
        dev: Some(DISCARDING),
        partitions: Vec::new(),
        block_size: None,
        discard_granularity: 4096,
        discard_max_bytes: 64 << 10,
        discard_max_hw_bytes: 2 << 30,
        ..loop9()
    }
}

/// 1 MiB discards to loop6, each cut into 16 pieces at its 64 KiB cap.
fn capped_discards(sink: &mut impl EventSink, base: u64, count: u64) {
    let discard = |event: BlockEvent| BlockEvent {
        rwbs: rwbs("DS"),
        ..event
    };
    for index in 0..count {
        let sector = index * 2048;
        let ts = base + MS * (index + 1);
        sink.block_event(&discard(queue(ts, DISCARDING, sector, 2048)));
        for piece in 0..16 {
            let start = sector + piece * 128;
            if piece < 15 {
                sink.block_event(&discard(split(ts, DISCARDING, start, start + 128)));
            }
            sink.block_event(&discard(issue(ts + 1000, DISCARDING, start, 128)));
            sink.block_event(&discard(complete(ts + 9000, DISCARDING, start, 128)));
        }
    }
}

/// A dm-stripe device: bio-based, its 64 KiB chunks no queue limit names.
fn striped_dm() -> DiskGeometry {
    DiskGeometry {
        name: "dm-4".into(),
        dev: Some(STRIPED),
        partitions: Vec::new(),
        block_size: None,
        request_based: false,
        max_sectors_kb: 1024,
        ..loop9()
    }
}

/// A plain dm-crypt mapping 3 sectors into sdz1 (which starts at 2056):
/// its data lands 1536 bytes past a physical block of sdz, and off the
/// 4 KiB atomic grid sdz's atomic writes need, so it offers none of them.
fn offset_dm() -> DiskGeometry {
    let level = |device: &str, via: &str, start_sectors| StackLevel {
        device: device.into(),
        via: via.into(),
        start_sectors,
    };
    let mut bottom = raid();
    bottom.partitions.clear();
    bottom.atomic = Some(AtomicLimits {
        unit_min_bytes: 4096,
        unit_max_bytes: 65536,
        max_bytes: 65536,
        boundary_bytes: 0,
    });
    DiskGeometry {
        name: "dm-5".into(),
        dev: Some(OFFSET_DM),
        size_sectors: 8184,
        partitions: Vec::new(),
        request_based: false,
        atomic: Some(AtomicLimits::default()),
        stack: Some(Stack {
            kind: "dm-crypt".into(),
            dm_name: "offset".into(),
            uuid: "CRYPT-PLAIN-offset".into(),
            crypt_sector_size: Some(512),
            crypt_max_io: Some(CryptMaxIo {
                read_bytes: Some(128 << 10),
                write_bytes: 128 << 10,
                tunable: true,
            }),
            legs: vec![StackLeg {
                top_sector: 0,
                levels: vec![level("sdz1", "crypt", 3), level("sdz", "partition", 2059)],
                bottom: Box::new(bottom),
                bottom_start: 2059,
            }],
            ..Stack::default()
        }),
        ..raid()
    }
}

/// A dm device whose table could not be read (as without root).
fn unread_dm() -> DiskGeometry {
    DiskGeometry {
        name: "dm-6".into(),
        dev: Some(DevId::new(253, 6)),
        stack: Some(Stack {
            kind: "dm".into(),
            unreadable: Some("/dev/mapper/control: Permission denied".into()),
            ..Stack::default()
        }),
        ..striped_dm()
    }
}

/// 144 KiB writes to dm-4 starting 32 sectors before a chunk ends, cut at
/// each chunk boundary, as dm-stripe traced alone prints them (Q and X).
fn chunk_splits(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let sector = index * 1024 + 96;
        let ts = base + MS * (index + 1);
        sink.block_event(&queue(ts, STRIPED, sector, 288));
        sink.block_event(&split(ts, STRIPED, sector, sector + 32));
        sink.block_event(&split(ts, STRIPED, sector + 32, sector + 160));
    }
}

/// 1 MiB writes to the dm-crypt device dm-5 cut at its 128 KiB cap, as
/// device-mapper traces it (on the trimmed bio), each piece sent to sdz.
fn crypt_cap_splits(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let sector = index * 4096;
        let ts = base + MS * (index + 1);
        sink.block_event(&queue(ts, OFFSET_DM, sector, 2048));
        for cut in (1..8).map(|piece| sector + piece * 256) {
            sink.block_event(&split(ts, OFFSET_DM, cut, cut));
        }
        for piece in (0..8).map(|piece| sector + piece * 256) {
            let below = 2059 + piece;
            sink.block_event(&remap(ts, RAID, below, 256, OFFSET_DM, piece));
            sink.block_event(&queue(ts, RAID, below, 256));
            sink.block_event(&issue(ts, RAID, below, 256));
            sink.block_event(&complete(ts + MS / 2, RAID, below, 256));
        }
        sink.block_event(&bio_complete(ts + MS / 2, OFFSET_DM, sector + 7 * 256, 256));
    }
}

/// An array-like disk: a partition on the 4 KiB grid but off its 1 MiB
/// optimal I/O size and 64 KiB chunks.
fn raid() -> DiskGeometry {
    DiskGeometry {
        name: "sdz".into(),
        dev: Some(RAID),
        size_sectors: 1 << 20,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        optimal_io_size: 1 << 20,
        chunk_sectors: 128,
        max_sectors_kb: 1024,
        max_hw_sectors_kb: 1024,
        max_segments: 128,
        max_segment_size: 65536,
        discard_granularity: 4096,
        rotational: true,
        scheduler: "mq-deadline".into(),
        request_based: true,
        partitions: vec![PartitionGeometry {
            name: "sdz1".into(),
            dev: Some(RAID1),
            number: 1,
            start: 2056,
            size: 8192,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// 128 KiB writes into loop9p2 (starts at 10241), each split on the 4 KiB
/// physical-block grid into two commands, from an owner that writes a file.
/// 16 KiB untorn writes (`U`) to loop9, one command each, then one the
/// device failed: `atomic_writes` with a write named.
fn untorn_writes(sink: &mut impl EventSink, base: u64, count: u64) {
    let untorn = |mut event: BlockEvent| {
        event.rwbs = rwbs("WSU");
        event
    };
    for index in 0..=count {
        let (ts, sector) = (base + MS * (index + 1), 300_000 + index * 32);
        let mut done = untorn(complete(ts + MS / 2, LOOP9, sector, 32));
        if index == count {
            done.error = -5;
        }
        for event in [
            untorn(queue(ts, LOOP9, sector, 32)),
            untorn(issue(ts + 1000, LOOP9, sector, 32)),
            done,
        ] {
            sink.block_event(&event);
        }
    }
}

fn misaligned_writes(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let relative = index * 256;
        let start = 10241 + relative;
        let cut = (start + 256) & !7;
        let ts = base + MS * (index + 1);
        let flags = if index % 2 == 0 {
            owner_flags::FILE
        } else {
            owner_flags::FILE | owner_flags::FILE_DIRECT
        };
        for event in [
            remap(ts, LOOP9, start, 256, LOOP9P2, relative),
            owned(queue(ts, LOOP9, start, 256), 1, "writer", flags),
            split(ts, LOOP9, start, cut),
            issue(ts + 1000, LOOP9, start, (cut - start) as u32),
            issue(ts + 2000, LOOP9, cut, (start + 256 - cut) as u32),
            complete(ts + MS / 2, LOOP9, start, (cut - start) as u32),
            complete(ts + MS / 2, LOOP9, cut, (start + 256 - cut) as u32),
        ] {
            sink.block_event(&event);
        }
    }
}

/// 256 KiB writes to loop9 itself, each split at max_sectors (128 KiB), by
/// a kernel thread and by a task whose pages belong to no file.
fn max_sectors_splits(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let sector = index * 512;
        let ts = base + MS * (index + 1);
        let submitter = if index % 2 == 0 {
            owned(
                queue(ts, LOOP9, sector, 512),
                2,
                "kworker/u8:1",
                owner_flags::KERNEL_THREAD,
            )
        } else {
            owned(
                queue(ts, LOOP9, sector, 512),
                3,
                "dd",
                owner_flags::ANONYMOUS_PAGE,
            )
        };
        for event in [
            submitter,
            split(ts, LOOP9, sector, sector + 256),
            issue(ts + 1000, LOOP9, sector, 256),
            issue(ts + 2000, LOOP9, sector + 256, 256),
            complete(ts + 300_000, LOOP9, sector, 256),
            complete(ts + 400_000, LOOP9, sector + 256, 256),
        ] {
            sink.block_event(&event);
        }
    }
}

/// 512-byte buffers dirtied through loop9p2: its block size, live.
fn subpage_buffers(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, base, LOOP9P2, index, 0)
        };
        sink.block_event(&buffer);
    }
}

/// 1 MiB writes to the virtio disk split 2032 + 16 sectors by
/// max_segments, each tail requeued until the head completes.
fn requeued_tails(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let start = index * 2048;
        let ts = base + MS * 10 * (index + 1);
        let reissue = ts + 100 + 2 * MS;
        for event in [
            queue(ts, VIRTIO, start, 2048),
            split(ts, VIRTIO, start, start + 2032),
            issue(ts + 10, VIRTIO, start, 2032),
            issue(ts + 20, VIRTIO, start + 2032, 16),
            requeue(ts + 100, VIRTIO, start + 2032, 16),
            complete(reissue - 50, VIRTIO, start, 2032),
            issue(reissue, VIRTIO, start + 2032, 16),
            complete(reissue + 100_000, VIRTIO, start + 2032, 16),
        ] {
            sink.block_event(&event);
        }
    }
}

/// 512-byte bios queued together on the nomerges disk, each its own command.
fn unmerged_small_writes(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        sink.block_event(&queue(base + MS, NOMERGES, 4096 + index, 1));
    }
    for index in 0..count {
        let ts = base + 2 * MS + index * 1000;
        sink.block_event(&issue(ts, NOMERGES, 4096 + index, 1));
        sink.block_event(&complete(ts + 500, NOMERGES, 4096 + index, 1));
    }
}

/// 4 KiB writes to the failing disk, one at a time and never adjacent;
/// every other one completes with ENOSPC.
fn failed_writes(sink: &mut impl EventSink, base: u64, count: u64) {
    for index in 0..count {
        let sector = index * 64;
        let ts = base + MS * (index + 1);
        let error = if index % 2 == 1 { -28 } else { 0 };
        for event in [
            queue(ts, FAILING, sector, 8),
            issue(ts + 1000, FAILING, sector, 8),
            BlockEvent {
                error,
                ..complete(ts + 200_000, FAILING, sector, 8)
            },
        ] {
            sink.block_event(&event);
        }
    }
}

/// Writes a recording of `disks` whose events `feed` emits; `run` makes it
/// a `run` recording with that conclusion.
fn write_recording(
    path: &Path,
    disks: Vec<DiskGeometry>,
    run: Option<RunRecord>,
    feed: impl FnOnce(&mut RecordingSink<Nothing>),
) {
    let mut writer = Writer::create(path).unwrap();
    let mut sink = RecordingSink::new(Nothing, Some(&mut writer));
    writer.header(RecordHeader {
        tool: "docs test".into(),
        kernel_release: "6.18.0-test".into(),
        probe_flavor: "BTF tracepoints".into(),
        recorded_by: if run.is_some() { "run" } else { "report" }.into(),
        geometry: disks,
        unsupported_probes: vec!["block_bio_complete: not in this kernel (test)".into()],
        run_command: run.as_ref().map(|record| record.run.command.clone()),
        owners: true,
        ..Default::default()
    });
    sink.owners_read(true);
    feed(&mut sink);
    sink.record_names(&OwnerNames {
        cgroups: vec![(5, "/writers".into())],
        files: vec![(LOOP9P1.to_string(), 10, "/mnt/data".into())],
    });
    if let Some(run) = &run {
        sink.record_run(run);
    }
    sink.finish_recording(Trailer {
        duration_s: 2.0,
        ..Default::default()
    });
    drop(sink);
    writer.close().unwrap();
}

/// What `run` concluded, with every optional part present. Written out
/// field by field (no `..Default::default()`), so a field added to these
/// types stops this test from compiling until it is set here and documented.
fn run_record() -> RunRecord {
    let file = RunFile {
        path: "/mnt/data/out.bin".into(),
        inode: 10,
        extents: 2,
        unmappable_extents: 1,
        map_error: Some("an extent has no device address (delalloc)".into()),
        matched_bytes: 1 << 20,
        not_written_back_bytes: 4096,
        delalloc_bytes: 4096,
        unmappable_bytes: 4096,
        unknown_offset_bytes: 0,
        overwritten_bytes: 8192,
    };
    let target = RunTarget {
        device: "loop9p2".into(),
        file: Some(file),
        write_syscalls: 20,
        failed_writes: [("EOPNOTSUPP".to_string(), 2)].into(),
        write_syscall_bytes: 20 * 128 * 1024,
        write_syscall_size: Distribution::default(),
        aio_writes: 6,
        aio_write_bytes: 6 * 128 * 1024,
        uring_writes: 6,
        uring_write_bytes: 6 * 128 * 1024,
        passthrough_writes: 2,
        fsync_calls: 1,
        partial_pages: 3,
        bios: 20,
        bio_size: Distribution::default(),
        commands: 40,
        commands_per_write: Distribution::default(),
        writes_per_command: Distribution::default(),
        mapped: Some(RunMapped {
            mappings: 1,
            msync_calls: 2,
            flushed_bytes: 2 << 20,
            written_bytes: 98304,
            not_written_bytes: (2 << 20) - 98304,
        }),
        atomic_writes: None,
        direct_writes: 0,
        summary: "writer issued 20 writes of 128 KiB to loop9p2".into(),
    };
    let run = RunReport {
        time_with_each_fix: Vec::new(),
        command: vec!["writer".into(), "/mnt/data/out.bin".into()],
        exit_status: Some(0),
        command_s: Some(31.4),
        paused_opens: 1,
        paused_s: 0.0004,
        time_with_fix: Some(RunTimeWithFix {
            run_after_fix_bounds_s: Some(iosplit_trace::model::TimeBounds {
                iops_bound: 0.4,
                bandwidth_bound: 13.6,
            }),
            code: "split_amplification".into(),
            device: "loop9p2".into(),
            run_s: 31.4,
            device_busy_s: Some(29.8),
            run_after_fix_s: Some(4.2),
            speedup: Some(31.4 / 4.2),
            unavailable: None,
            commands_now: 1024,
            commands_after_fix: 128,
            pays_little: false,
            reads_after_fix: 0,
        }),
        attached: Some(RunAttached {
            pid: 4242,
            processes_at_attach: 1,
            window_s: 12.5,
            ended: AttachEnd::Exited,
        }),
        processes: 1,
        targets: vec![target],
        files_not_listed: Some(FilesNotListed {
            files: 40,
            write_syscalls: 80,
            write_syscall_bytes: 80 * 4096,
        }),
        background: Measures::default(),
        io_submit: Some(IoSubmitReport {
            calls: 3,
            iocbs: 12,
            iocbs_not_followed: 0,
        }),
        io_uring: Some(UringReport {
            writes: 6,
            syncs: 1,
            sqpoll: 0,
            punted_to_io_wq: 2,
            fixed_files_not_followed: 1,
            not_followed: 0,
            unsupported: Some("io_uring/io_uring_submit_req: cannot read it".into()),
        }),
    };
    RunRecord {
        run,
        tracked_devices: vec!["loop9p2".into()],
        named: Vec::new(),
        written: vec!["loop9p2".into()],
    }
}

fn analyze(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .arg("analyze")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "analyze {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn diagnosis_codes(report: &Value) -> BTreeSet<String> {
    report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|diagnosis| diagnosis["code"].as_str().unwrap().to_string())
        .collect()
}

/// Every JSON document the inputs give, by name.
fn documents() -> Vec<(String, Value)> {
    let root = repo_root();
    let corpus = root.join("fuzz/corpus");
    let path = |p: PathBuf| p.to_str().unwrap().to_string();
    let mut documents = Vec::new();
    for recording in ["loop-partitions-v2.iotrace", "loop-partitions-v4.iotrace"] {
        let file = path(corpus.join("recording").join(recording));
        documents.push((recording.to_string(), analyze(&[&file])));
    }
    let blkparse = path(corpus.join("blkparse/loop-partitions-from-ftrace.txt"));
    let ftrace = path(corpus.join("ftrace_blk/loop-partitions-6.18.txt"));

    // The seed's three layouts, audited as `check --json` prints them.
    let scratch = Scratch::new("schema");
    let mut geometry_file = None;
    for layout in 1..=3 {
        let sysfs = root.join(format!("tracer/tests/fixtures/sysfs/seed-layout{layout}"));
        let check = serde_json::to_value(check_in(&sysfs, &[], &NoIoctls).unwrap()).unwrap();
        if layout == 1 {
            let file = scratch.0.join("check.json");
            std::fs::write(&file, serde_json::to_vec(&check).unwrap()).unwrap();
            geometry_file = Some(path(file));
        }
        documents.push((format!("check seed-layout{layout}"), check));
    }
    let geometry = geometry_file.unwrap();
    documents.push((
        "blkparse".into(),
        analyze(&["--from", "blkparse", "--geometry", &geometry, &blkparse]),
    ));
    documents.push((
        "ftrace-blk".into(),
        analyze(&["--from", "ftrace-blk", &ftrace]),
    ));
    // Completions only, whose issues the trace lacks (a published grep).
    let completions =
        path(root.join("tracer/tests/corpus/yangoliver-sampleblk-completions-grep.blkparse.txt"));
    documents.push((
        "completions only".into(),
        analyze(&["--from", "blkparse", &completions]),
    ));

    // Every diagnosis code, with live evidence and what_if.
    let every = scratch.0.join("every-code.iotrace");
    write_recording(
        &every,
        vec![
            loop9(),
            virtio(),
            nomerges_disk(),
            raid(),
            failing_disk(),
            discard_disk(),
            striped_dm(),
            offset_dm(),
            unread_dm(),
        ],
        None,
        |sink| {
            misaligned_writes(sink, 0, 20);
            max_sectors_splits(sink, 100 * MS, 20);
            subpage_buffers(sink, 200 * MS, 100);
            requeued_tails(sink, 300 * MS, 32);
            unmerged_small_writes(sink, 700 * MS, 32);
            failed_writes(sink, 800 * MS, 8);
            capped_discards(sink, 900 * MS, 20);
            chunk_splits(sink, 1000 * MS, 20);
            crypt_cap_splits(sink, 1100 * MS, 4);
            untorn_writes(sink, 1200 * MS, 4);
        },
    );
    let report = analyze(&[&path(every)]);
    let codes = diagnosis_codes(&report);
    for code in all_codes() {
        assert!(
            codes.contains(code),
            "the synthetic recording no longer raises {code} (it raises {codes:?}): adjust its events"
        );
    }
    documents.push(("every code".into(), report));

    // `run`: its section, targets and other findings.
    let run = scratch.0.join("run.iotrace");
    write_recording(&run, vec![loop9()], Some(run_record()), |sink| {
        misaligned_writes(sink, 0, 20);
    });
    let report = analyze(&[&path(run)]);
    assert!(
        !report["other_findings"].as_array().unwrap().is_empty(),
        "the run recording has no other findings"
    );
    documents.push(("run".into(), report));
    documents
}

#[test]
fn json_schema_documents_every_key() {
    let schema_path = repo_root().join("docs/json-schema.md");
    let schema = read(&schema_path);
    let documented = documented_keys(&schema);

    let mut produced: BTreeMap<String, String> = BTreeMap::new();
    for (name, document) in documents() {
        let mut keys = BTreeMap::new();
        collect_keys(&document, "", &mut keys);
        for (key, path) in keys {
            produced.entry(key).or_insert(format!("{name}: {path}"));
        }
    }

    let undocumented: Vec<String> = produced
        .iter()
        .filter(|(key, _)| !schema.contains(&format!("`{key}`")))
        .map(|(key, path)| format!("`{key}` (at {path})"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "docs/json-schema.md does not document these keys of the JSON output:\n  {}",
        undocumented.join("\n  ")
    );

    let exempt: BTreeSet<&str> = NOT_PRODUCED.iter().map(|(key, _)| *key).collect();
    let unproduced: Vec<&String> = documented
        .iter()
        .filter(|key| !produced.contains_key(*key) && !exempt.contains(key.as_str()))
        .collect();
    assert!(
        unproduced.is_empty(),
        "docs/json-schema.md documents keys no test input produces (stale, or extend the \
         inputs in tests/docs.rs): {unproduced:?}"
    );
}
