//! The fio workloads and what we read back from fio's JSON.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;
use serde_json::Value;

use super::devices::{DeviceKind, TestDevice};
use crate::util::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum Workload {
    /// 4 KiB random write, QD32, io_uring, O_DIRECT.
    #[serde(rename = "randwrite-4k-qd32")]
    RandWrite,
    /// 4 KiB random read, QD32, io_uring, O_DIRECT.
    #[serde(rename = "randread-4k-qd32")]
    RandRead,
    /// 1 MiB sequential write, QD8, O_DIRECT, with max_sectors_kb lowered to 64.
    #[serde(rename = "seqwrite-1m-split64k")]
    SplitWrite,
    /// 512-byte buffered writes, fsync at the end of each pass.
    #[serde(rename = "buffered-512b-fsync")]
    Buffered512,
}

/// max_sectors_kb for the split workload: each 1 MiB bio becomes 16 pieces.
pub const SPLIT_MAX_SECTORS_KB: &str = "64";

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::RandWrite,
        Workload::RandRead,
        Workload::SplitWrite,
        Workload::Buffered512,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Workload::RandWrite => "randwrite-4k-qd32",
            Workload::RandRead => "randread-4k-qd32",
            Workload::SplitWrite => "seqwrite-1m-split64k",
            Workload::Buffered512 => "buffered-512b-fsync",
        }
    }

    /// Where this workload runs on `device`, or why it does not.
    pub fn target(self, device: &TestDevice) -> std::result::Result<PathBuf, &'static str> {
        match (self, device.kind) {
            (Workload::SplitWrite, DeviceKind::Zram) => Err(
                "bio-based zram does not split at max_sectors_kb (measured: 64 MiB of 1 MiB writes \
                 with max_sectors_kb=64 gave 64 block_bio_queue and 0 block_split)",
            ),
            (Workload::Buffered512, DeviceKind::Loop) => device
                .odd_partition
                .clone()
                .ok_or("the loop disk has no odd-sized partition"),
            _ => Ok(device.aligned.clone()),
        }
    }

    /// A fio command for about `runtime_s` seconds of this workload on `target`,
    /// writing its JSON report to `report`.
    pub fn fio(self, target: &Path, kind: DeviceKind, runtime_s: u32, report: &Path) -> Command {
        let mut cmd = Command::new("fio");
        cmd.arg("--name=bench")
            .arg(format!("--filename={}", target.display()))
            .arg(format!("--output={}", report.display()))
            .args(["--output-format=json", "--randrepeat=0", "--norandommap"])
            .stdout(Stdio::null());
        let direct = [
            "--ioengine=io_uring",
            "--direct=1",
            "--time_based",
            "--runtime",
        ];
        match self {
            Workload::RandWrite | Workload::RandRead => {
                let rw = if self == Workload::RandWrite {
                    "randwrite"
                } else {
                    "randread"
                };
                cmd.args(direct)
                    .arg(runtime_s.to_string())
                    .args(["--bs=4k", "--iodepth=32"])
                    .arg(format!("--rw={rw}"));
            }
            Workload::SplitWrite => {
                cmd.args(direct).arg(runtime_s.to_string()).args([
                    "--bs=1M",
                    "--iodepth=8",
                    "--rw=write",
                ]);
            }
            Workload::Buffered512 => {
                // Whole passes over the target, each ending in fsync (fio's
                // end_fsync runs inside each loop and counts in its runtime);
                // `runtime` caps the number of passes.
                cmd.args(["--ioengine=psync", "--direct=0", "--bs=512", "--rw=write"])
                    .args(["--end_fsync=1", "--loops=1000", "--runtime"])
                    .arg(runtime_s.to_string());
                if kind == DeviceKind::Zram {
                    // zram0 is 1 GiB: one pass over all of it would take ~10 s.
                    cmd.arg("--size=100M");
                }
            }
        }
        cmd
    }
}

/// What one fio run achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FioResult {
    pub iops: f64,
    pub total_ios: u64,
    pub runtime_s: f64,
    /// fio's own CPU time (user + system) over the run.
    pub cpu_s: f64,
}

pub fn parse_fio(report: &str) -> Result<FioResult> {
    // fio may print notes before the JSON document.
    let start = report.find('{').ok_or("fio wrote no JSON report")?;
    let document: Value = serde_json::from_str(&report[start..])
        .map_err(|err| format!("fio's JSON report does not parse: {err}"))?;
    let job = document
        .get("jobs")
        .and_then(|jobs| jobs.get(0))
        .ok_or("fio's report has no job")?;
    let number = |value: Option<&Value>| value.and_then(Value::as_f64).unwrap_or(0.0);
    let mut result = FioResult::default();
    for direction in ["read", "write"] {
        let stats = job.get(direction);
        result.iops += number(stats.and_then(|s| s.get("iops")));
        result.total_ios += number(stats.and_then(|s| s.get("total_ios"))) as u64;
    }
    result.runtime_s = number(job.get("job_runtime")) / 1000.0;
    let cpu_percent = number(job.get("usr_cpu")) + number(job.get("sys_cpu"));
    result.cpu_s = cpu_percent / 100.0 * result.runtime_s;
    if result.total_ios == 0 || result.runtime_s <= 0.0 {
        return Err("fio did no I/O".to_string());
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_report_gives_iops_and_cpu_time() {
        let report = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"jobname":"bench","job_runtime":3000,"usr_cpu":6.5,"sys_cpu":31.5,
 "read":{"iops":0.0,"total_ios":0},"write":{"iops":197281.9,"total_ios":591845}}]}"#;
        let result = parse_fio(report).unwrap();
        assert_eq!(result.total_ios, 591845);
        assert!((result.iops - 197281.9).abs() < 1e-6);
        assert!((result.runtime_s - 3.0).abs() < 1e-9);
        assert!((result.cpu_s - 0.38 * 3.0).abs() < 1e-9);
    }

    #[test]
    fn json_names_match_the_table_names() {
        for workload in Workload::ALL {
            let json = serde_json::to_value(workload).unwrap();
            assert_eq!(json.as_str(), Some(workload.key()));
        }
    }

    #[test]
    fn a_run_without_io_is_an_error() {
        let report = r#"{"jobs":[{"job_runtime":0,"read":{"iops":0,"total_ios":0},"write":{"iops":0,"total_ios":0}}]}"#;
        assert!(parse_fio(report).is_err());
        assert!(parse_fio("fio: engine io_uring not loadable").is_err());
    }

    #[test]
    fn direct_workloads_are_time_based_and_buffered_ends_in_fsync() {
        let report = Path::new("/tmp/r.json");
        let target = Path::new("/dev/loop9p1");
        let args = |w: Workload| -> Vec<String> {
            w.fio(target, DeviceKind::Loop, 7, report)
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let rand = args(Workload::RandWrite);
        assert!(rand.iter().any(|a| a == "--direct=1"));
        assert!(rand.iter().any(|a| a == "--iodepth=32"));
        assert!(rand.iter().any(|a| a == "--rw=randwrite"));
        assert!(rand.windows(2).any(|w| w[0] == "--runtime" && w[1] == "7"));
        let buffered = args(Workload::Buffered512);
        assert!(buffered.iter().any(|a| a == "--direct=0"));
        assert!(buffered.iter().any(|a| a == "--bs=512"));
        assert!(buffered.iter().any(|a| a == "--end_fsync=1"));
        assert!(!buffered.iter().any(|a| a == "--time_based"));
    }
}
