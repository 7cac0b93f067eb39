//! `nvme-virt-boundary.sh`: qemu's NVMe (a 4 KiB virt boundary) against a
//! virtio control disk, under batched 512 B writes and a gappy writev.

use std::time::Duration;

use tracer_common::EventKind;

use super::{expect_geometry, Scenario, MIB};
use crate::vm::check::{
    describe, diagnoses_on, expect_no_warning, expect_oracle_agreement, Check, Results,
};
use crate::vm::kernel::Line;
use crate::vm::qemu::{Bus, Disk, Throttle};
use crate::vm::report::{Code, Report};

pub fn scenario() -> Scenario {
    Scenario {
        name: "nvme-virt-boundary",
        summary:
            "qemu NVMe (virt_boundary_mask 4095) vs virtio: batched 512 B writes, gappy writev",
        disks: vec![
            Disk {
                serial: "vmtest-nvme",
                bytes: 256 * MIB,
                bus: Bus::Nvme {
                    logical: 512,
                    physical: 512,
                },
                partition: None,
                throttle: Throttle::None,
            },
            Disk {
                serial: "control",
                bytes: 256 * MIB,
                bus: Bus::VirtioBlk {
                    logical: 512,
                    physical: 512,
                },
                partition: None,
                throttle: Throttle::None,
            },
        ],
        timeout: Duration::from_secs(300),
        evaluate,
        extra_tools: &[],
        fixed_disks: Vec::new(),
    }
}

/// Merges and commands of one workload's report.
fn merge_counts(report: &Report) -> (u64, u64, u64) {
    let count = |kind| report.events.count(kind);
    (
        count(EventKind::Backmerge) + count(EventKind::Frontmerge) + count(EventKind::RqMerge),
        count(EventKind::Split),
        count(EventKind::Issue),
    )
}

/// A diagnosis `code` on `device` whose cause names the virt boundary.
fn names_virt_boundary(report: &Report, device: &str, code: Code) -> bool {
    diagnoses_on(report, device)
        .iter()
        .any(|found| found.code == code && found.names_virt_boundary)
}

/// The virt boundary nvme-pci sets on qemu's controller, by kernel line:
/// 6.1 and 6.12 set the PRP page boundary (4095); 7.x, measured here, sets
/// none (the controller offers SGLs), so its requests merge and split as
/// virtio's do, and nothing may be named.
fn expected_mask(line: &Line) -> &'static str {
    match line.name {
        "6.1" | "6.12" => "4095",
        _ => "0",
    }
}

/// Both disks' geometry, NVMe's mask as this kernel sets it, and every
/// workload's events against the blk tracer.
fn geometry_and_oracle(results: &Results, what: &str, mask: &str) -> Vec<Check> {
    let mut checks = vec![
        expect_geometry(
            what,
            results,
            "nvme.geometry",
            &[("disk.virt_boundary_mask", mask)],
        ),
        expect_geometry(
            "virtio control",
            results,
            "control.geometry",
            &[("disk.virt_boundary_mask", "0")],
        ),
    ];
    for (disk, workload) in [
        ("nvme", "aio"),
        ("control", "aio"),
        ("nvme", "writev"),
        ("control", "writev"),
    ] {
        checks.push(expect_oracle_agreement(
            &format!("{disk} {workload}: events vs blk tracer"),
            results,
            &format!("{disk}.{workload}.json"),
            &format!("{disk}.{workload}.trace"),
        ));
    }
    checks
}

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
    let mask = expected_mask(line);
    if mask == "0" {
        return without_boundary(results);
    }
    let mut checks = geometry_and_oracle(results, "nvme virt boundary", mask);
    let nvme_name = results
        .value("names", "nvme")
        .unwrap_or_else(|_| "nvme0n1".into());
    let control_name = results
        .value("names", "control")
        .unwrap_or_else(|_| "vda".into());
    // 64 adjacent 512 B direct writes in one io_submit: virtio merges them,
    // NVMe cannot (each ends mid-page: a gap at the virt boundary).
    let what = "aio 64x512 B: merges nvme vs virtio";
    let expected = "nvme 0 merges, >=64 cmds; virtio merges > 0";
    checks.push(match (results.report("nvme.aio.json"), results.report("control.aio.json")) {
        (Ok(nvme), Ok(control)) => {
            let (nvme_merges, _, nvme_cmds) = merge_counts(&nvme);
            let (control_merges, _, control_cmds) = merge_counts(&control);
            Check::new(
                what,
                expected,
                format!("nvme {nvme_merges} merges/{nvme_cmds} cmds; virtio {control_merges}/{control_cmds}"),
                nvme_merges == 0 && nvme_cmds >= 64 && control_merges > 0,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    // 4 pwritevs of 16 x 512 B iovecs in separate pages: NVMe splits at each gap.
    let what = "4 writev 16x512 B: splits nvme vs virtio";
    let expected = "nvme 60 splits; virtio 0";
    checks.push(match (results.report("nvme.writev.json"), results.report("control.writev.json")) {
        (Ok(nvme), Ok(control)) => {
            let (_, nvme_splits, nvme_cmds) = merge_counts(&nvme);
            let (_, control_splits, control_cmds) = merge_counts(&control);
            Check::new(
                what,
                expected,
                format!("nvme {nvme_splits} splits/{nvme_cmds} cmds; virtio {control_splits}/{control_cmds}"),
                nvme_splits == 60 && control_splits == 0,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    let what = "report names the virt boundary";
    let expected =
        "nvme: merge_blocked + split_amplification, cause virt boundary; virtio: neither";
    checks.push(
        match (
            results.report("nvme.aio.json"),
            results.report("nvme.writev.json"),
            results.report("control.aio.json"),
            results.report("control.writev.json"),
        ) {
            (Ok(nvme_aio), Ok(nvme_writev), Ok(control_aio), Ok(control_writev)) => {
                let merge = names_virt_boundary(&nvme_aio, &nvme_name, Code::MergeBlocked);
                let split = names_virt_boundary(&nvme_writev, &nvme_name, Code::SplitAmplification);
                let control: Vec<_> = diagnoses_on(&*control_aio, &control_name)
                    .into_iter()
                    .chain(diagnoses_on(&*control_writev, &control_name))
                    .filter(|found| {
                        found.code == Code::MergeBlocked || found.code == Code::SplitAmplification
                    })
                    .collect();
                let nvme_found: Vec<_> = diagnoses_on(&*nvme_aio, &nvme_name)
                    .into_iter()
                    .chain(diagnoses_on(&*nvme_writev, &nvme_name))
                    .collect();
                Check::new(
                    what,
                    expected,
                    format!(
                        "nvme: {}; virtio: {}",
                        describe(&nvme_found),
                        describe(&control)
                    ),
                    merge && split && control.is_empty(),
                )
            }
            (Err(why), _, _, _)
            | (_, Err(why), _, _)
            | (_, _, Err(why), _)
            | (_, _, _, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// A kernel whose nvme-pci sets no virt boundary on this controller: the
/// same workloads must then merge on NVMe as on virtio, split on neither,
/// and be named on neither (the false-alarm side of this scenario).
fn without_boundary(results: &Results) -> Vec<Check> {
    let mut checks = geometry_and_oracle(results, "nvme: no virt boundary on this kernel", "0");
    let what = "no boundary: nvme merges and splits as virtio does";
    let expected = "aio: merges > 0 on both; writev: 0 splits on both";
    checks.push(
        match (
            results.report("nvme.aio.json"),
            results.report("control.aio.json"),
            results.report("nvme.writev.json"),
            results.report("control.writev.json"),
        ) {
            (Ok(nvme_aio), Ok(control_aio), Ok(nvme_writev), Ok(control_writev)) => {
                let (nvme_merges, _, _) = merge_counts(&nvme_aio);
                let (control_merges, _, _) = merge_counts(&control_aio);
                let (_, nvme_splits, _) = merge_counts(&nvme_writev);
                let (_, control_splits, _) = merge_counts(&control_writev);
                Check::new(
                    what,
                    expected,
                    format!(
                        "aio merges nvme {nvme_merges}, virtio {control_merges}; writev splits nvme {nvme_splits}, virtio {control_splits}"
                    ),
                    nvme_merges > 0 && control_merges > 0 && nvme_splits == 0 && control_splits == 0,
                )
            }
            (Err(why), ..) | (_, Err(why), ..) | (_, _, Err(why), _) | (.., Err(why)) => {
                Check::missing(what, expected, why)
            }
        },
    );
    let nvme_name = results
        .value("names", "nvme")
        .unwrap_or_else(|_| "nvme0n1".into());
    for file in ["nvme.aio.json", "nvme.writev.json"] {
        checks.push(expect_no_warning(
            &format!("{file}: nothing named without a boundary (false alarm)"),
            &results.report(file),
            &nvme_name,
        ));
    }
    checks
}
