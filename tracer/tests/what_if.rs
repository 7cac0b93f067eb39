//! Each fix's predicted effect (`evidence.what_if`) against the real thing:
//! trace a workload, apply the fix the diagnosis names, rerun the same
//! workload, and count the commands the device received.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{binary, privileged, sh, LoopDisk, PartitionSpec};
use serde_json::Value;

/// How far the observed commands may be from the prediction.
const TOLERANCE: f64 = 0.2;

fn run_json(command: &[&str]) -> Value {
    let out = Command::new(binary())
        .args(["run", "--json", "--"])
        .args(command)
        .output()
        .expect("iosplit-trace runs");
    assert!(
        out.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn finding<'a>(report: &'a Value, code: &str, device: &str) -> Option<&'a Value> {
    report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == code && d["device"] == device)
}

/// Write commands the report counts on `device` (a disk or a partition), all origins.
fn write_commands(report: &Value, device: &str) -> u64 {
    for disk in report["devices"].as_array().unwrap() {
        let measures = if disk["name"] == device {
            Some(&disk["measures"])
        } else {
            disk["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == device)
                .map(|p| &p["measures"])
        };
        if let Some(measures) = measures {
            return measures["ops"]["write"]["commands"].as_u64().unwrap_or(0);
        }
    }
    panic!("{device} not in the report: {}", report["devices"]);
}

/// The prediction, checked for shape: the fix must buy something.
fn prediction(diagnosis: &Value) -> (u64, u64) {
    let what_if = &diagnosis["evidence"]["what_if"];
    let now = what_if["commands_now"]
        .as_u64()
        .unwrap_or_else(|| panic!("no what_if: {diagnosis}"));
    let after = what_if["commands_after_fix"].as_u64().unwrap();
    assert!(
        after > 0 && after < now,
        "the fix should take commands down: {what_if}"
    );
    (now, after)
}

fn assert_within_tolerance(observed: u64, predicted: u64, what: &str) {
    let error = (observed as f64 - predicted as f64).abs() / predicted as f64;
    eprintln!("{what}: predicted {predicted} commands, observed {observed}");
    assert!(
        error <= TOLERANCE,
        "{what}: observed {observed} commands after the fix, predicted {predicted} ({:.0}% off)",
        error * 100.0
    );
}

/// Replaces partition `number` of `disk` with one of `spec`, as a resize
/// with sfdisk and partx does on a real disk.
fn resize_partition(disk: &LoopDisk, number: usize, spec: PartitionSpec) {
    let device = disk.device();
    let nr = number.to_string();
    sh("partx", &["-d", "--nr", &nr, &device]);
    let mut child = Command::new("sfdisk")
        .args(["--no-reread", "--no-tell-kernel", "-q", "-N", &nr, &device])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run sfdisk");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("start={}, size={}\n", spec.start, spec.size).as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "sfdisk failed");
    sh("partx", &["-a", "--nr", &nr, &device]);
    let part = disk.partition(number);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !Path::new(&part).exists() {
        assert!(Instant::now() < deadline, "{part} did not reappear");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn subpage_block_size_fix_takes_commands_where_predicted() {
    if !privileged("subpage_block_size_fix_takes_commands_where_predicted") {
        return;
    }
    // The seed's case: an odd-sized partition, buffered 32 KiB writes with fsync.
    let odd = PartitionSpec {
        start: 2048,
        size: 131073,
    };
    let disk = LoopDisk::new("what-if-subpage", 96, &[odd]);
    let partition = disk.partition(1);
    let name = format!("{}p1", disk.name);
    let output = format!("of={partition}");
    let workload = [
        "dd",
        "if=/dev/zero",
        output.as_str(),
        "bs=32K",
        "count=256",
        "conv=fsync",
        "status=none",
    ];
    let before = run_json(&workload);
    let diagnosis = finding(&before, "subpage_block_size", &name)
        .unwrap_or_else(|| panic!("no subpage_block_size on {name}: {}", before["diagnoses"]));
    let (now, predicted) = prediction(diagnosis);
    assert_eq!(
        now,
        write_commands(&before, &name),
        "commands_now is what the device received"
    );

    // The fix: a size that is a multiple of 8 sectors.
    resize_partition(
        &disk,
        1,
        PartitionSpec {
            size: odd.size - odd.size % 8,
            ..odd
        },
    );
    let after = run_json(&workload);
    assert!(
        finding(&after, "subpage_block_size", &name).is_none(),
        "the resize did not fix it: {}",
        after["diagnoses"]
    );
    assert_within_tolerance(
        write_commands(&after, &name),
        predicted,
        "subpage_block_size",
    );
}

#[test]
fn max_sectors_fix_takes_commands_where_predicted() {
    if !privileged("max_sectors_fix_takes_commands_where_predicted") {
        return;
    }
    let mut disk = LoopDisk::new("what-if-max-sectors", 64, &[]);
    disk.set_queue("max_sectors_kb", "64");
    let output = format!("of={}", disk.device());
    let workload = [
        "dd",
        "if=/dev/zero",
        output.as_str(),
        "bs=1M",
        "count=16",
        "oflag=direct",
        "status=none",
    ];
    let before = run_json(&workload);
    let diagnosis = finding(&before, "split_amplification", &disk.name).unwrap_or_else(|| {
        panic!(
            "no split_amplification on {}: {}",
            disk.name, before["diagnoses"]
        )
    });
    let (now, predicted) = prediction(diagnosis);
    assert_eq!(now, write_commands(&before, &disk.name));
    let proposed = diagnosis["evidence"]["proposed_max_sectors_kb"]
        .as_u64()
        .unwrap_or_else(|| panic!("no proposed_max_sectors_kb: {diagnosis}"));
    assert!(
        diagnosis["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("max_sectors_kb to {proposed}")),
        "the fix names the value the prediction used: {diagnosis}"
    );

    // The fix, as the diagnosis says it (Drop puts the old value back).
    disk.set_queue("max_sectors_kb", &proposed.to_string());
    let after = run_json(&workload);
    assert_within_tolerance(
        write_commands(&after, &disk.name),
        predicted,
        "split_amplification (max_sectors)",
    );
}
