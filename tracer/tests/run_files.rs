//! `iosplit-trace run -- dd of=FILE` on ext4 and xfs: the file's writes are
//! carried to the device commands through its extent map, checked against
//! the kernel's blk tracer and filefrag.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use common::{binary, privileged, run_json, sh, BlkTracer, LoopDisk, Mounted, PartitionSpec};
use serde_json::Value;

/// The blk tracer is global: one test at a time uses it.
static SERIAL: Mutex<()> = Mutex::new(());

/// 32 writes of 64 KiB.
const WRITTEN: u64 = 32 * 65536;
const PARTITION_START: u64 = 2048;

/// A disk with one partition of `partition_mib` (xfs wants 300 MiB).
fn disk(tag: &str, partition_mib: u64) -> (LoopDisk, String) {
    let disk = LoopDisk::new(
        tag,
        partition_mib + 2,
        &[PartitionSpec {
            start: PARTITION_START,
            size: partition_mib * 2048,
        }],
    );
    let partition = disk.partition(1);
    (disk, partition)
}

/// The run target for `file`, or a panic naming what was seen.
fn file_target<'a>(report: &'a Value, file: &Path) -> &'a Value {
    report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["file"]["path"] == file.to_str().unwrap())
        .unwrap_or_else(|| panic!("no target for {}: {}", file.display(), report["run"]))
}

fn dd_to(file: &Path, flags: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["dd", "if=/dev/zero", "bs=64k", "count=32", "status=none"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.push(format!("of={}", file.display()));
    args.extend(flags.iter().map(|f| f.to_string()));
    args
}

/// The file's extents as disk sector ranges [start, end), from filefrag.
fn extents_on_disk(file: &Path) -> Vec<(u64, u64)> {
    let out = sh("filefrag", &["-v", "-b512", file.to_str().unwrap()]);
    // "   0:        0..    4095:      17026..     21121:   4096:   last,eof"
    out.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').map(str::trim).collect();
            fields.first()?.parse::<u64>().ok()?;
            let (first, last) = fields.get(2)?.split_once("..")?;
            let first: u64 = first.trim().parse().ok()?;
            let last: u64 = last.trim().parse().ok()?;
            Some((PARTITION_START + first, PARTITION_START + last + 1))
        })
        .collect()
}

/// Writes with blk tracer `action` (`Q` bios, `D` commands) on `dev` as [sector, end).
fn traced_writes(trace: &str, dev: &str, action: &str) -> Vec<(u64, u64)> {
    trace
        .lines()
        .filter_map(|line| {
            // "dd-123 [001] ..... 12.3: 7,0    D  WS 2048 + 128 [dd]"
            let (_, event) = line.split_once(": ")?;
            let words: Vec<&str> = event.split_whitespace().collect();
            if words.len() < 6 || words[0] != dev || words[1] != action || !words[2].contains('W') {
                return None;
            }
            let sector: u64 = words[3].parse().ok()?;
            let count: u64 = words[5].parse().ok()?;
            (count > 0).then_some((sector, sector + count))
        })
        .collect()
}

/// `dd oflag=direct` to a new file: every write matched, and the commands
/// that carried them are exactly the device's writes inside the file's extents.
fn direct_writes_are_matched(fs: &str) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (disk, partition) = disk(&format!("runf-{fs}"), if fs == "xfs" { 320 } else { 64 });
    let mounted = match fs {
        "xfs" => Mounted::xfs(&partition),
        _ => Mounted::ext4(&partition),
    };
    let file = mounted.point.join("direct.bin");
    let command = dd_to(&file, &["oflag=direct"]);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let tracer = BlkTracer::start(&disk.name);
    let report = run_json(&command);
    let trace = tracer.finish();
    drop(tracer);

    assert_eq!(report["events"]["dropped"], 0, "{}", report["events"]);
    let target = file_target(&report, &file);
    assert_eq!(target["device"], format!("{}p1", disk.name), "{target}");
    assert_eq!(target["write_syscalls"], 32, "{target}");
    assert_eq!(target["write_syscall_bytes"], WRITTEN, "{target}");
    let per_write = &target["commands_per_write"];
    assert_eq!(per_write["count"], 32, "every write matched: {target}");
    assert!(per_write["min"].as_u64().unwrap() >= 1, "{target}");
    let file_bytes = &target["file"];
    assert_eq!(file_bytes["matched_bytes"], WRITTEN, "{target}");
    for key in [
        "not_written_back_bytes",
        "delalloc_bytes",
        "unmappable_bytes",
        "unknown_offset_bytes",
    ] {
        assert_eq!(file_bytes[key], 0, "{key}: {target}");
    }

    // The oracle: the blk tracer's write commands, placed with filefrag's extents.
    let extents = extents_on_disk(&file);
    let sectors: u64 = extents.iter().map(|(first, end)| end - first).sum();
    assert_eq!(sectors * 512, WRITTEN, "{extents:?}");
    let inside = |writes: Vec<(u64, u64)>| -> Vec<(u64, u64)> {
        writes
            .into_iter()
            .filter(|(first, end)| extents.iter().any(|(e0, e1)| first < e1 && end > e0))
            .collect()
    };
    let on_file = inside(traced_writes(&trace, &disk.blk_dev(), "D"));
    let bios = inside(traced_writes(&trace, &disk.blk_dev(), "Q"));
    assert!(bios.len() >= 32, "a bio per write at least: {bios:?}");
    assert_eq!(
        target["bios"],
        bios.len() as u64,
        "bios per the blk tracer: {bios:?}"
    );
    for (first, end) in &on_file {
        assert!(
            extents.iter().any(|(e0, e1)| e0 <= first && end <= e1),
            "command {first}..{end} straddles the file's extents {extents:?}"
        );
    }
    let carried: u64 = on_file.iter().map(|(first, end)| end - first).sum();
    assert_eq!(carried * 512, WRITTEN, "the oracle's commands: {on_file:?}");
    assert_eq!(
        target["commands"],
        on_file.len() as u64,
        "commands inside the extents per the blk tracer: {on_file:?}"
    );
}

#[test]
fn direct_writes_to_a_file_on_ext4_are_matched_to_their_commands() {
    if !privileged("direct_writes_to_a_file_on_ext4_are_matched_to_their_commands") {
        return;
    }
    direct_writes_are_matched("ext4");
}

#[test]
fn direct_writes_to_a_file_on_xfs_are_matched_to_their_commands() {
    if !privileged("direct_writes_to_a_file_on_xfs_are_matched_to_their_commands") {
        return;
    }
    direct_writes_are_matched("xfs");
}

#[test]
fn buffered_writes_are_matched_through_writeback_or_said_to_be_dirty() {
    if !privileged("buffered_writes_are_matched_through_writeback_or_said_to_be_dirty") {
        return;
    }
    let (_disk, partition) = disk("runf-buffered", 64);
    let mounted = Mounted::ext4(&partition);

    // conv=fsync: dd's fsync writes the pages back inside the run.
    let synced = mounted.point.join("synced.bin");
    let command = dd_to(&synced, &["conv=fsync"]);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let report = run_json(&command);
    let target = file_target(&report, &synced);
    assert_eq!(target["fsync_calls"], 1, "{target}");
    assert_eq!(target["file"]["matched_bytes"], WRITTEN, "{target}");
    assert_eq!(target["file"]["not_written_back_bytes"], 0, "{target}");
    assert_eq!(target["commands_per_write"]["count"], 32, "{target}");
    assert!(
        target["commands_per_write"]["min"].as_u64().unwrap() >= 1,
        "{target}"
    );
    assert!(target["commands"].as_u64().unwrap() >= 1, "{target}");
    assert!(
        target["bios"].as_u64().unwrap() >= 1,
        "writeback bios: {target}"
    );

    // No fsync and a short run: the pages are still dirty (delalloc) at exit.
    let dirty = mounted.point.join("dirty.bin");
    let command = dd_to(&dirty, &[]);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let report = run_json(&command);
    let target = file_target(&report, &dirty);
    assert_eq!(target["file"]["matched_bytes"], 0, "{target}");
    assert_eq!(
        target["file"]["not_written_back_bytes"], WRITTEN,
        "{target}"
    );
    assert_eq!(target["file"]["delalloc_bytes"], WRITTEN, "{target}");
    assert_eq!(target["commands"], 0, "{target}");

    // The text report says so plainly, with the byte count.
    let again = mounted.point.join("dirty-again.bin");
    let out = Command::new(binary())
        .arg("run")
        .arg("--")
        .args(dd_to(&again, &[]))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "NOT written back inside the run (still dirty at exit): 2 MiB not matched to commands"
        ),
        "{text}"
    );
}

/// `run --json -- dd if=/dev/zero bs=64k of=FILE ARGS` (ARGS give the count).
fn run_dd(file: &Path, args: &[&str]) -> Value {
    let mut command = vec!["dd", "if=/dev/zero", "bs=64k", "status=none"];
    command.extend_from_slice(args);
    let output = format!("of={}", file.display());
    command.push(&output);
    run_json(&command)
}

#[test]
fn a_seek_is_followed_and_an_append_is_not_guessed() {
    if !privileged("a_seek_is_followed_and_an_append_is_not_guessed") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (_disk, partition) = disk("runf-seek", 64);
    let mounted = Mounted::ext4(&partition);
    let file = mounted.point.join("seek.bin");
    // Allocated first, outside the run: 2 MiB of extents.
    sh(
        "dd",
        &dd_to(&file, &["oflag=direct"])[1..]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );

    // dd seek=16 lseeks its output to 1 MiB, then write()s the second half:
    // followed from position 0 these bytes would land on the first half,
    // where no command of the run wrote.
    let report = run_dd(
        &file,
        &["count=16", "seek=16", "conv=notrunc", "oflag=direct"],
    );
    let target = file_target(&report, &file);
    assert_eq!(target["file"]["matched_bytes"], 16 * 65536, "{target}");
    assert_eq!(target["file"]["unknown_offset_bytes"], 0, "{target}");
    assert_eq!(target["file"]["not_written_back_bytes"], 0, "{target}");
    assert_eq!(target["commands_per_write"]["count"], 16, "{target}");

    // O_APPEND writes at the file's end, which the probes do not see: the
    // bytes are counted as of unknown offset, not matched at a guess.
    let report = run_dd(&file, &["count=4", "conv=notrunc", "oflag=append,direct"]);
    let target = file_target(&report, &file);
    assert_eq!(
        target["file"]["unknown_offset_bytes"],
        4 * 65536,
        "{target}"
    );
    assert_eq!(target["file"]["matched_bytes"], 0, "{target}");
    assert_eq!(target["write_syscalls"], 4, "{target}");
}

/// `run --record`: `analyze` prints the run's report again, its run section
/// (files matched through extent maps read on this machine) included.
#[test]
fn analyze_reprints_a_recorded_run() {
    if !privileged("analyze_reprints_a_recorded_run") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (_disk, partition) = disk("runf-record", 64);
    let mounted = Mounted::ext4(&partition);
    let file = mounted.point.join("recorded.bin");
    let recording = common::ScratchFile(
        std::env::temp_dir().join(format!("iosplit-run-{}.iotrace", std::process::id())),
    );
    let live = Command::new(binary())
        .args([
            "run",
            "--json",
            "--record",
            recording.0.to_str().unwrap(),
            "--",
        ])
        .args(dd_to(&file, &["oflag=direct"]))
        .output()
        .unwrap();
    assert!(
        live.status.success(),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );
    let mut live: Value = serde_json::from_slice(&live.stdout).unwrap();
    let replayed = Command::new(binary())
        .args(["analyze", "--json", recording.0.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let mut replayed: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(file_target(&live, &file)["file"]["matched_bytes"], WRITTEN);
    for report in [&mut live, &mut replayed] {
        assert!(report["duration_s"].as_f64().unwrap() > 0.0);
        report["duration_s"] = Value::Null;
    }
    assert_eq!(replayed, live, "analyze differs from the live run");
}
