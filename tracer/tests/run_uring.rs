//! `iosplit-trace run -- fio --ioengine=io_uring`: write and fsync SQEs are
//! followed like pwrite's, one per SQE, and counted against what fio says
//! it did.
//!
//! The oracle is fio (fio 3.x, Jens Axboe's flexible I/O tester, which we did
//! not write): its `--output-format=json` report gives, per job,
//! `write.total_ios` (I/Os it completed), `write.io_bytes` (their bytes) and
//! `sync.total_ios` (its fsyncs). fio's io_uring engine submits WRITEV by
//! default, WRITE with `nonvectored=1` and WRITE_FIXED with `fixedbufs=1`;
//! `registerfiles=1` names registered files (not followed: counted so),
//! `force_async=N` hands every Nth SQE to io-wq, and `sqthread_poll=1`
//! submits from the SQPOLL thread (fio 3.33 then registers its files too:
//! seen as `flags 0x400001`, REQ_F_FIXED_FILE, in the tracepoint's own text).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{binary, device_named, privileged, LoopDisk, Mounted, PartitionSpec, ScratchFile};
use serde_json::Value;

/// What fio says its one job wrote: (write total_ios, io_bytes).
fn fio_writes(fio_json: &Value) -> (u64, u64) {
    let write = &fio_json["jobs"][0]["write"];
    (
        write["total_ios"].as_u64().unwrap(),
        write["io_bytes"].as_u64().unwrap(),
    )
}

/// `run --json -- fio …` writing to `filename` (a partition or a file; its
/// last component names fio's report) with io_uring; run's report and fio's own.
fn run_fio(filename: &str, tag: &str, extra: &[&str]) -> (Value, Value) {
    // Named by the partition and case too: the tests run in parallel.
    let fio_out = ScratchFile(std::env::temp_dir().join(format!(
        "iosplit-fio-uring-{tag}-{}-{}.json",
        filename.rsplit('/').next().unwrap_or(filename),
        std::process::id()
    )));
    let out = Command::new(binary())
        .args(["run", "--json", "--", "fio", "--name=uring"])
        .arg(format!("--filename={filename}"))
        .args(["--ioengine=io_uring", "--rw=write", "--output-format=json"])
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

/// The run target `device` (None when the command wrote nothing there that was followed).
fn target<'a>(report: &'a Value, device: &str) -> Option<&'a Value> {
    report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == device && t["file"].is_null())
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

/// fio io_uring, direct, QD8, 64 KiB x 256 on a raw partition, with each
/// of the SQE opcodes and submission paths: run's writes and bytes are
/// fio's own totals, its bios and commands the partition's in the same report.
#[test]
fn uring_writes_are_counted_as_fio_counts_them() {
    if !privileged("uring_writes_are_counted_as_fio_counts_them") {
        return;
    }
    let (disk, partition, name) = one_partition("run-uring");
    let base = ["--direct=1", "--bs=64k", "--iodepth=8", "--size=16M"];
    for (case, extra) in [
        ("writev", &[][..]),
        ("write", &["--nonvectored=1"][..]),
        ("write_fixed", &["--fixedbufs=1"][..]),
        ("io-wq", &["--nonvectored=1", "--force_async=4"][..]),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (report, fio) = run_fio(&partition, case, &args);
        let (ios, bytes) = fio_writes(&fio);
        assert_eq!((ios, bytes), (256, 16 << 20), "{case}: fio's own totals");
        assert_eq!(
            report["events"]["dropped"], 0,
            "{case}: {}",
            report["events"]
        );
        let uring = &report["run"]["io_uring"];
        assert!(uring["unsupported"].is_null(), "{case}: {uring}");
        let target = target(&report, &name).unwrap_or_else(|| panic!("{case}: {}", report["run"]));
        assert_eq!(target["write_syscalls"], ios, "{case}: {target}");
        assert_eq!(target["write_syscall_bytes"], bytes, "{case}: {target}");
        assert_eq!(target["uring_writes"], ios, "{case}: {target}");
        assert_eq!(target["uring_write_bytes"], bytes, "{case}: {target}");
        assert_eq!(target["aio_writes"], 0, "{case}: {target}");
        assert_eq!(uring["writes"], ios, "{case}: {uring}");
        assert_eq!(uring["fixed_files_not_followed"], 0, "{case}: {uring}");
        assert_eq!(uring["not_followed"], 0, "{case}: {uring}");
        let measured = partition_writes(&report, &disk.name, &name);
        assert_eq!(target["bios"], measured["user_ios"], "{case}: {measured}");
        assert_eq!(target["commands"], measured["commands"], "{case}");
        assert!(target["bios"].as_u64().unwrap() >= ios, "{case}: {target}");
        // Each 64 KiB write lands on its own sectors: one command or more each.
        assert_eq!(target["commands_per_write"]["count"], ios, "{case}");
        let summary = target["summary"].as_str().unwrap();
        assert!(
            summary.contains(&format!(
                "fio issued 256 writes of 64 KiB to {name} through io_uring;"
            )),
            "{case}: {summary}"
        );
        let (sqpoll, punted) = (
            uring["sqpoll"].as_u64().unwrap(),
            uring["punted_to_io_wq"].as_u64().unwrap(),
        );
        assert_eq!(sqpoll, 0, "{case}: {uring}");
        if case == "io-wq" {
            // IOSQE_ASYNC on every 4th SQE: those at least go to io-wq.
            assert!(punted >= ios / 4, "{uring}");
        }
    }
}

/// Registered files: the SQE's fd is an index into the ring's file table,
/// which run does not read. Every such SQE is counted as not followed, and
/// no write is invented for it.
#[test]
fn uring_writes_to_registered_files_are_counted_as_not_followed() {
    if !privileged("uring_writes_to_registered_files_are_counted_as_not_followed") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-uring-fixed");
    for (case, flag, sqpoll) in [
        ("registered", "--registerfiles=1", false),
        ("sqpoll", "--sqthread_poll=1", true),
    ] {
        let (report, fio) = run_fio(
            &partition,
            case,
            &["--direct=1", "--bs=64k", "--iodepth=8", "--size=4M", flag],
        );
        let (ios, _) = fio_writes(&fio);
        assert_eq!(ios, 64, "{case}: fio's own totals");
        let uring = &report["run"]["io_uring"];
        assert_eq!(uring["fixed_files_not_followed"], ios, "{case}: {uring}");
        assert_eq!(uring["writes"], 0, "{case}: {uring}");
        // How they were submitted is counted all the same.
        let by_sqpoll = if sqpoll { ios } else { 0 };
        assert_eq!(uring["sqpoll"], by_sqpoll, "{case}: {uring}");
        if let Some(target) = target(&report, &name) {
            assert_eq!(target["uring_writes"], 0, "{case}: {target}");
        }
    }
}

/// Buffered io_uring writes with an FSYNC SQE every 8 writes, into a raw
/// partition: the writes are fio's, and so are the fsyncs.
#[test]
fn buffered_uring_writes_and_fsyncs_are_counted() {
    if !privileged("buffered_uring_writes_and_fsyncs_are_counted") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-uring-sync");
    let (report, fio) = run_fio(
        &partition,
        "fsync",
        &[
            "--direct=0",
            "--bs=64k",
            "--iodepth=8",
            "--size=8M",
            "--fsync=8",
        ],
    );
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (128, 8 << 20), "fio's own totals");
    let syncs = fio["jobs"][0]["sync"]["total_ios"].as_u64().unwrap();
    assert!(syncs >= 16, "fio's fsyncs: {}", fio["jobs"][0]["sync"]);
    let target = target(&report, &name).unwrap_or_else(|| panic!("{}", report["run"]));
    assert_eq!(target["uring_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["fsync_calls"], syncs, "{target}");
    assert_eq!(report["run"]["io_uring"]["syncs"], syncs);
}

/// io_uring into a file on ext4: the SQEs' offsets are the file's, carried
/// to sectors through its extent map like pwrite's.
#[test]
fn uring_writes_to_a_file_are_placed_through_its_extent_map() {
    if !privileged("uring_writes_to_a_file_are_placed_through_its_extent_map") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-uring-file");
    let mounted = Mounted::ext4(&partition);
    let path = mounted.point.join("uring-data");
    let path = path.to_str().unwrap();
    let (report, fio) = run_fio(
        path,
        "file",
        &["--direct=1", "--bs=64k", "--iodepth=8", "--size=8M"],
    );
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
    assert_eq!(target["uring_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["matched_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["unknown_offset_bytes"], 0, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= ios, "{target}");
    drop(mounted);
}
