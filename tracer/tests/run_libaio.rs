//! `iosplit-trace run -- fio --ioengine=libaio`: writes submitted through
//! io_submit are followed like pwrite's, one per iocb, and counted against
//! what fio says it did.
//!
//! The oracle is fio (fio 3.x, Jens Axboe's flexible I/O tester, which we did
//! not write): its `--output-format=json` report gives, per job,
//! `write.total_ios` (I/Os it completed) and `write.io_bytes` (their bytes).
//! Each fio run is checked against its own JSON; psync (pwrite64) is the
//! control, whose writes `run` followed before io_submit was.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{binary, device_named, privileged, LoopDisk, Mounted, PartitionSpec, ScratchFile};
use serde_json::Value;

/// What fio says its one job wrote: (total_ios, io_bytes).
fn fio_writes(fio_json: &Value) -> (u64, u64) {
    let write = &fio_json["jobs"][0]["write"];
    (
        write["total_ios"].as_u64().unwrap(),
        write["io_bytes"].as_u64().unwrap(),
    )
}

/// `run --json -- fio …` writing direct to `filename` (a partition or a
/// file; its last component names fio's report) with `engine`; run's
/// report and fio's own.
fn run_fio(filename: &str, engine: &str, extra: &[&str]) -> (Value, Value) {
    // Named by the partition too: the tests run in parallel.
    let fio_out = ScratchFile(std::env::temp_dir().join(format!(
        "iosplit-fio-{engine}-{}-{}.json",
        filename.rsplit('/').next().unwrap_or(filename),
        std::process::id()
    )));
    let out = Command::new(binary())
        .args(["run", "--json", "--", "fio", "--name=aio"])
        .arg(format!("--filename={filename}"))
        .arg(format!("--ioengine={engine}"))
        .args(["--rw=write", "--direct=1", "--output-format=json"])
        .arg(format!("--output={}", fio_out.0.display()))
        .args(extra)
        .output()
        .expect("iosplit-trace runs");
    assert!(
        out.status.success(),
        "run or fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout)));
    let fio: Value = serde_json::from_str(&std::fs::read_to_string(&fio_out.0).unwrap())
        .unwrap_or_else(|err| panic!("fio's JSON: {err}"));
    (report, fio)
}

/// The run target `device`.
fn target<'a>(report: &'a Value, device: &str) -> &'a Value {
    report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == device)
        .unwrap_or_else(|| panic!("no target {device}: {}", report["run"]))
}

/// The partition's own write measures in the report's device section.
fn partition_writes<'a>(report: &'a Value, disk: &str, partition: &str) -> &'a Value {
    let partitions = device_named(report, disk)["partitions"].as_array().unwrap();
    let found = partitions
        .iter()
        .find(|p| p["name"] == partition)
        .unwrap_or_else(|| panic!("no partition {partition}: {partitions:?}"));
    &found["measures"]["ops"]["write"]
}

/// A 64 MiB loop disk with one 32 MiB partition.
fn one_partition(tag: &str) -> (LoopDisk, String, String) {
    let disk = LoopDisk::new(
        tag,
        64,
        &[PartitionSpec {
            start: 2048,
            size: 65536,
        }],
    );
    let path = disk.partition(1);
    let name = format!("{}p1", disk.name);
    (disk, path, name)
}

#[test]
fn libaio_writes_are_counted_as_fio_counts_them_and_psync_is_unchanged() {
    if !privileged("libaio_writes_are_counted_as_fio_counts_them_and_psync_is_unchanged") {
        return;
    }
    let (disk, partition, name) = one_partition("run-aio");
    for engine in ["libaio", "psync"] {
        let (report, fio) = run_fio(
            &partition,
            engine,
            &["--bs=64k", "--iodepth=8", "--size=16M"],
        );
        let (ios, bytes) = fio_writes(&fio);
        assert_eq!((ios, bytes), (256, 16 << 20), "{engine}: fio's own totals");
        assert_eq!(
            report["events"]["dropped"], 0,
            "{engine}: {}",
            report["events"]
        );
        let target = target(&report, &name);
        assert_eq!(target["write_syscalls"], ios, "{engine}: {target}");
        assert_eq!(target["write_syscall_bytes"], bytes, "{engine}: {target}");
        // The bios and commands run names are the ones the report shows for
        // the partition (nothing else writes to it).
        let measured = partition_writes(&report, &disk.name, &name);
        assert_eq!(target["bios"], measured["user_ios"], "{engine}: {measured}");
        assert_eq!(target["commands"], measured["commands"], "{engine}");
        assert!(
            target["bios"].as_u64().unwrap() >= ios,
            "{engine}: {target}"
        );
        // Each 64 KiB write lands on its own sectors: one command or more each.
        assert_eq!(target["commands_per_write"]["count"], ios, "{engine}");
        let summary = target["summary"].as_str().unwrap();
        assert!(
            summary.contains(&format!("fio issued 256 writes of 64 KiB to {name}")),
            "{summary}"
        );
        let io_submit = &report["run"]["io_submit"];
        if engine == "libaio" {
            assert_eq!(target["aio_writes"], ios, "{target}");
            assert_eq!(target["aio_write_bytes"], bytes, "{target}");
            assert!(summary.contains("through libaio (io_submit)"), "{summary}");
            assert_eq!(io_submit["iocbs"], ios, "{io_submit}");
            assert_eq!(io_submit["iocbs_not_followed"], 0, "{io_submit}");
            assert!(io_submit["calls"].as_u64().unwrap() > 0, "{io_submit}");
        } else {
            assert_eq!(target["aio_writes"], 0, "{target}");
            assert!(!summary.contains("libaio"), "{summary}");
            assert!(io_submit.is_null(), "{io_submit}");
        }
    }
}

/// fio submitting 128 iocbs in one io_submit: the probe reads 64 of a call,
/// and the rest are counted as not followed, never dropped silently.
#[test]
fn iocbs_past_the_per_call_cap_are_counted_not_lost() {
    if !privileged("iocbs_past_the_per_call_cap_are_counted_not_lost") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-aio-cap");
    let (report, fio) = run_fio(
        &partition,
        "libaio",
        &[
            "--bs=4k",
            "--size=8M",
            "--iodepth=128",
            "--iodepth_batch_submit=128",
        ],
    );
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (2048, 8 << 20), "fio's own totals");
    let target = target(&report, &name);
    let io_submit = &report["run"]["io_submit"];
    let followed = target["aio_writes"].as_u64().unwrap();
    let not_followed = io_submit["iocbs_not_followed"].as_u64().unwrap();
    assert!(not_followed > 0, "fio batched more than 64: {io_submit}");
    assert_eq!(followed + not_followed, ios, "{target} {io_submit}");
    assert_eq!(io_submit["iocbs"], ios, "{io_submit}");
    assert_eq!(
        target["write_syscall_bytes"].as_u64().unwrap() + not_followed * 4096,
        bytes
    );
}

/// libaio into a file on ext4: the iocbs' offsets are the file's, carried
/// to sectors through its extent map like pwrite's.
#[test]
fn libaio_writes_to_a_file_are_placed_through_its_extent_map() {
    if !privileged("libaio_writes_to_a_file_are_placed_through_its_extent_map") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-aio-file");
    let mounted = Mounted::ext4(&partition);
    let path = mounted.point.join("aio-data");
    let path = path.to_str().unwrap();
    let (report, fio) = run_fio(path, "libaio", &["--bs=64k", "--iodepth=8", "--size=8M"]);
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (128, 8 << 20), "fio's own totals");
    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["file"]["path"] == path)
        .unwrap_or_else(|| panic!("no target {path}: {}", report["run"]));
    assert_eq!(target["device"], name.as_str(), "{target}");
    assert_eq!(target["write_syscalls"], ios, "{target}");
    assert_eq!(target["aio_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["matched_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["unknown_offset_bytes"], 0, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= ios, "{target}");
    drop(mounted);
}
