//! fio (Jens Axboe's flexible I/O tester, which we did not write) under
//! `iosplit-trace run`: its `--output-format=json` report is the oracle for
//! what the command wrote.

use std::process::Command;

use serde_json::Value;

use super::{binary, device_named, LoopDisk, PartitionSpec, ScratchFile};

/// What fio says its one job wrote: (write total_ios, io_bytes).
pub fn fio_writes(fio_json: &Value) -> (u64, u64) {
    let write = &fio_json["jobs"][0]["write"];
    (
        write["total_ios"].as_u64().unwrap(),
        write["io_bytes"].as_u64().unwrap(),
    )
}

/// `run --json -- fio --name=JOB --filename=FILENAME --rw=write ARGS…`;
/// run's report and fio's own. `tag` and the file's last component name
/// fio's report file: the tests run in parallel.
pub fn run_fio(job: &str, filename: &str, tag: &str, args: &[String]) -> (Value, Value) {
    let fio_out = ScratchFile(std::env::temp_dir().join(format!(
        "iosplit-fio-{tag}-{}-{}.json",
        filename.rsplit('/').next().unwrap_or(filename),
        std::process::id()
    )));
    let out = Command::new(binary())
        .args(["run", "--json", "--", "fio"])
        .arg(format!("--name={job}"))
        .arg(format!("--filename={filename}"))
        .args(["--rw=write", "--output-format=json"])
        .arg(format!("--output={}", fio_out.0.display()))
        .args(args)
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

/// The run target for the device itself (None when the command wrote
/// nothing there that was followed).
pub fn device_target<'a>(report: &'a Value, device: &str) -> Option<&'a Value> {
    report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == device && t["file"].is_null())
}

/// The partition's own write measures in the report's device section.
pub fn partition_writes<'a>(report: &'a Value, disk: &str, partition: &str) -> &'a Value {
    let partitions = device_named(report, disk)["partitions"].as_array().unwrap();
    let found = partitions
        .iter()
        .find(|p| p["name"] == partition)
        .unwrap_or_else(|| panic!("no partition {partition}: {partitions:?}"));
    &found["measures"]["ops"]["write"]
}

/// A 64 MiB loop disk with one 32 MiB partition: (disk, its node, its name).
pub fn one_partition(tag: &str) -> (LoopDisk, String, String) {
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
