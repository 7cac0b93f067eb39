//! `scsi-debug-io-opt.sh`: scsi_debug with 4 KiB physical blocks and a
//! 128 KiB optimal I/O size, one partition aligned to each.

use std::time::Duration;

use super::{expect_geometry, Scenario};
use crate::vm::check::{expect_diagnoses, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::report::Code;

pub fn scenario() -> Scenario {
    Scenario {
        name: "scsi-debug-io-opt",
        summary: "scsi_debug physblk_exp=3 opt_blks=256: partition 4 KiB- but not io_opt-aligned",
        disks: Vec::new(),
        timeout: Duration::from_secs(300),
        evaluate,
        extra_tools: &[],
        fixed_disks: Vec::new(),
    }
}

fn evaluate(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "scsi_debug geometry",
        results,
        "sda1.geometry",
        &[
            ("disk.physical_block_size", "4096"),
            ("disk.optimal_io_size", "131072"),
            ("part.start", "2056"),
        ],
    )];
    let report = results.audit("check.json");
    checks.push(expect_diagnoses(
        "check: start 2056 (4 KiB-aligned, not 128 KiB)",
        &report,
        "sda1",
        &[Code::MisalignedIoOpt],
        None,
    ));
    checks.push(expect_diagnoses(
        "check: start 264192 (128 KiB-aligned)",
        &report,
        "sda2",
        &[],
        None,
    ));
    checks
}
