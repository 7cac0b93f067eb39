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
        extra_tools: &["fio"],
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
    let mut checks = passthrough(results);
    let mask = expected_mask(line);
    if mask == "0" {
        checks.extend(without_boundary(results));
        return checks;
    }
    checks.extend(geometry_and_oracle(results, "nvme virt boundary", mask));
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

/// The NVMe commands the kernel's own `nvme_setup_cmd` event printed for
/// I/O queues, as (opcode name, slba, blocks): "cmd=(nvme_cmd_write slba=2048, len=7, …)".
fn setup_commands(trace: &str) -> Vec<(String, u64, u64)> {
    trace
        .lines()
        .filter(|line| line.contains("nvme_setup_cmd:") && !line.contains("qid=0,"))
        .filter_map(|line| {
            let command = line.split_once("cmd=(")?.1;
            let opcode = command.split_whitespace().next()?.to_string();
            let field = |name: &str| -> Option<u64> {
                let value = command.split_once(&format!("{name}="))?.1;
                value
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            };
            Some((opcode, field("slba")?, field("len")? + 1))
        })
        .collect()
}

/// The blk tracer's dispatches of passthrough commands: a byte count with
/// no `+ sectors` ("259,0 D W 4096 [fio]"; blk_log_generic's passthrough form).
fn passthrough_dispatches(trace: &str) -> usize {
    trace
        .lines()
        .filter(|line| {
            let mut fields = line.split_whitespace().skip_while(|field| {
                !(field.contains(',') && field.split(',').all(|n| n.parse::<u32>().is_ok()))
            });
            fields.next();
            let (action, _rwbs, bytes, then) =
                (fields.next(), fields.next(), fields.next(), fields.next());
            action == Some("D")
                && bytes.is_some_and(|n| n.parse::<u64>().is_ok())
                && then != Some("+")
        })
        .count()
}

/// fio's `io_uring_cmd` engine on the generic char device: each passthrough
/// write counted with the range its NVMe command gave, as the kernel's own
/// `nvme_setup_cmd` lines, the blk tracer's `D N` lines and fio's count say.
fn passthrough(results: &Results) -> Vec<Check> {
    let what = "passthrough: fio io_uring_cmd 64 x 4 KiB";
    let fio_writes = results.json::<serde_json::Value>("fio-passthrough.json");
    let rc = results.text("fio-passthrough.rc").unwrap_or_default();
    let issued = fio_writes
        .as_ref()
        .ok()
        .and_then(|fio| fio["jobs"][0]["write"]["total_ios"].as_u64());
    let errors = fio_writes
        .as_ref()
        .ok()
        .and_then(|fio| fio["jobs"][0]["error"].as_u64());
    let mut checks = vec![Check::new(
        what,
        "fio rc 0, 64 writes issued, error 0",
        format!("rc {}, {issued:?} writes, error {errors:?}", rc.trim()),
        rc.trim() == "0" && issued == Some(64) && errors == Some(0),
    )];
    checks.push(expect_oracle_agreement(
        "nvme passthrough: events vs blk tracer",
        results,
        "nvme.passthrough.json",
        "nvme.passthrough.trace",
    ));
    let what = "passthrough writes: report = nvme_setup_cmd = blk passthrough D";
    let expected = "64 writes, each with its range; sectors, first and end equal the kernel's";
    checks.push(
        match (
            results.report("nvme.passthrough.json"),
            results.text("nvme.passthrough.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let writes: Vec<_> = setup_commands(&trace)
                    .into_iter()
                    .filter(|(opcode, ..)| opcode == "nvme_cmd_write")
                    .collect();
                let dispatched = passthrough_dispatches(&trace);
                let sectors: u64 = writes.iter().map(|(_, _, blocks)| blocks).sum();
                let first = writes.iter().map(|(_, slba, _)| *slba).min().unwrap_or(0);
                let end = writes
                    .iter()
                    .map(|(_, slba, blocks)| slba + blocks)
                    .max()
                    .unwrap_or(0);
                let ops: Vec<_> = report
                    .devices
                    .iter()
                    .flat_map(|device| device.passthrough.iter())
                    .collect();
                let write = ops.iter().find(|op| op.op == "write");
                let unknown: u64 = ops
                    .iter()
                    .filter(|op| op.op == "unknown")
                    .map(|op| op.commands)
                    .sum();
                let found = format!(
                    "kernel: {} writes, {dispatched} passthrough D, sectors {sectors} in {first}..{end}; report: {}, {unknown} without a range",
                    writes.len(),
                    write.map_or("no passthrough writes".to_string(), |op| format!(
                        "{} writes ({} with a range), sectors {} in {}..{}",
                        op.commands, op.with_range, op.sectors, op.first_sector, op.end_sector
                    )),
                );
                let pass = writes.len() == 64
                    && dispatched == 64
                    && unknown == 0
                    && write.is_some_and(|op| {
                        op.commands == 64
                            && op.with_range == 64
                            && op.sectors == sectors
                            && op.first_sector == first
                            && op.end_sector == end
                            && first == 2048
                    });
                Check::new(what, expected, found, pass)
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks.push(run_passthrough(results));
    checks
}

/// `run -- fio io_uring_cmd`: each SQE's NVMe write followed to the one
/// command that carried it, on the namespace behind `/dev/ngXnY`.
fn run_passthrough(results: &Results) -> Check {
    let what = "run: fio io_uring_cmd SQEs followed to their commands";
    let expected =
        "rc 0; nvme0n1: 64 passthrough io_uring writes = fio's 64, 64 commands, 1 command per write";
    let rc = results.text("run-passthrough.rc").unwrap_or_default();
    let fio = results
        .json::<serde_json::Value>("fio-run-passthrough.json")
        .ok()
        .and_then(|fio| fio["jobs"][0]["write"]["total_ios"].as_u64());
    let run = match results.json::<serde_json::Value>("run-passthrough.json") {
        Ok(run) => run,
        Err(why) => return Check::missing(what, expected, why),
    };
    let target = run["run"]["targets"]
        .as_array()
        .and_then(|targets| targets.iter().find(|t| t["device"] == "nvme0n1"));
    let Some(target) = target else {
        return Check::new(
            what,
            expected,
            format!(
                "rc {}, no nvme0n1 target: {}",
                rc.trim(),
                run["run"]["targets"]
            ),
            false,
        );
    };
    let number = |key: &str| target[key].as_u64().unwrap_or(0);
    let per_write = &target["commands_per_write"];
    let found = format!(
        "rc {}, fio {fio:?}; uring writes {} ({} passthrough), commands {}, commands per write {}..{} over {} writes: {}",
        rc.trim(),
        number("uring_writes"),
        number("passthrough_writes"),
        number("commands"),
        per_write["min"],
        per_write["max"],
        per_write["count"],
        target["summary"].as_str().unwrap_or("")
    );
    let pass = rc.trim() == "0"
        && fio == Some(64)
        && number("uring_writes") == 64
        && number("passthrough_writes") == 64
        && number("commands") == 64
        && per_write["count"].as_u64() == Some(64)
        && per_write["max"].as_u64() == Some(1)
        && per_write["min"].as_u64() == Some(1);
    Check::new(what, expected, found, pass)
}

#[cfg(test)]
mod tests {
    use super::{passthrough_dispatches, setup_commands};

    #[test]
    fn the_kernels_setup_lines_and_passthrough_dispatches_are_read() {
        let trace = "\
             fio-301     [001] .....    52.100: nvme_setup_cmd: nvme0: disk=nvme0n1, qid=2, cmdid=4, nsid=1, flags=0x0, meta=0x0, cmd=(nvme_cmd_write slba=2048, len=7, ctrl=0x0, dsmgmt=0, reftag=0)
             fio-301     [001] .....    52.101: nvme_setup_cmd: nvme0: qid=0, cmdid=9, nsid=0, flags=0x0, meta=0x0, cmd=(nvme_admin_identify cns=1, ctrlid=0)
             fio-301     [001] d....    52.102: 259,0    D   W 4096 [fio]
             fio-301     [001] .....    52.103: 259,0    D  WS 2048 + 8 [fio]
";
        assert_eq!(
            setup_commands(trace),
            vec![("nvme_cmd_write".to_string(), 2048, 8)]
        );
        assert_eq!(passthrough_dispatches(trace), 1);
    }
}
