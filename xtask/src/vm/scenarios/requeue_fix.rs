//! `requeue-fix.sh`: `requeued_commands` on a 16-descriptor ring without
//! indirect descriptors, then the same workload after a reboot with the
//! host-side fix it names, against its `what_if`.

use std::rc::Rc;
use std::time::Duration;

use tracer_common::EventKind;

use super::{
    device_number, Scenario, INDIRECT_DESC_BIT, MIB, REQUEUE_DISK, REQUEUE_RING, WHAT_IF_TOLERANCE,
};
use crate::vm::check::{expect_oracle_agreement, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::oracle;
use crate::vm::qemu::{Bus, Disk, Throttle};
use crate::vm::report::{Code, Diagnosis, Entry, Findings, Report};

/// The requeue disk with the host-side fix `requeued_commands` names.
const REQUEUE_DISK_FIXED: Bus = Bus::VirtioBlkSmallRing {
    queue_size: REQUEUE_RING,
    indirect_desc: true,
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "requeue-fix",
        summary: "requeued_commands on a 16-descriptor ring without indirect descriptors, then rebooted with indirect_desc=on: issues vs what_if",
        disks: vec![Disk {
            serial: "requeue",
            bytes: 64 * MIB,
            bus: REQUEUE_DISK,
            partition: None,
            throttle: Throttle::None,
        }],
        timeout: Duration::from_secs(300),
        fixed_disks: vec![Disk {
            serial: "requeue",
            bytes: 64 * MIB,
            bus: REQUEUE_DISK_FIXED,
            partition: None,
            throttle: Throttle::None,
        }],
        evaluate,
        extra_tools: &[],
    }
}

/// What one boot of requeue-fix left: `prefix` is "" or "fixed.".
struct RequeueRun {
    report: Rc<Report>,
    /// `virtio.features` bit 28 (VIRTIO_RING_F_INDIRECT_DESC).
    indirect: Option<char>,
    max_segments: String,
    /// blk tracer on the disk: issues carrying data, and requeues.
    data_issues: u64,
    requeues: u64,
    device: String,
}

fn requeue_run(results: &Results, prefix: &str) -> Result<RequeueRun, String> {
    let geometry = results.values(&format!("{prefix}geometry"))?;
    let trace = results.text(&format!("{prefix}blk.trace"))?;
    let device = results.value(&format!("{prefix}names"), "requeue")?;
    let dev_text = results.value(&format!("{prefix}names"), "requeue_dev")?;
    let dev = device_number(&dev_text).ok_or_else(|| format!("bad device number {dev_text}"))?;
    let (data_issues, _flushes) = oracle::lines_with_data(&trace, dev, "D");
    let requeues = oracle::parse_blk_trace(&trace)
        .per_device
        .get(&dev)
        .and_then(|actions| actions.get("R").copied())
        .unwrap_or(0);
    Ok(RequeueRun {
        report: results.report(&format!("{prefix}report.json"))?,
        indirect: geometry
            .get("virtio.features")
            .and_then(|bits| bits.chars().nth(INDIRECT_DESC_BIT)),
        max_segments: geometry
            .get("disk.max_segments")
            .cloned()
            .unwrap_or_else(|| "?".into()),
        data_issues,
        requeues,
        device,
    })
}

/// `requeued_commands` on `device` in a report, if any.
fn requeue_diagnosis<'a>(report: &'a Report, device: &str) -> Option<&'a Diagnosis> {
    report
        .diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code() == Code::RequeuedCommands && diagnosis.is_on(device))
}

/// requeued_commands on the ring filler, then the fix it names applied on the
/// host (a second boot) and the same workload's issues against its `what_if`.
fn evaluate(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = Vec::new();
    for (what, report, trace) in [
        ("before: events vs blk", "report.json", "blk.trace"),
        (
            "after fix: events vs blk",
            "fixed.report.json",
            "fixed.blk.trace",
        ),
    ] {
        checks.push(expect_oracle_agreement(what, results, report, trace));
    }
    let what = "before: requeued_commands, cause and fix";
    let expected =
        "blk R > 0; cause virtio_ring_full, virtio_indirect_desc false, fix names indirect_desc=on and features bit 28, what_if.commands_now = blk D";
    let before = match requeue_run(results, "") {
        Ok(run) => run,
        Err(why) => {
            checks.push(Check::missing(what, expected, why));
            return checks;
        }
    };
    let diagnosis = requeue_diagnosis(&before.report, &before.device);
    let evidence = diagnosis.and_then(Diagnosis::requeued_commands);
    let what_if = diagnosis.and_then(Diagnosis::what_if);
    let (now, predicted) = (
        what_if.map(|w| w.commands_now),
        what_if.map(|w| w.commands_after_fix),
    );
    let cause = evidence.and_then(|e| e.cause.as_deref()).unwrap_or("none");
    let indirect_evidence = evidence.and_then(|e| e.virtio_indirect_desc);
    let fix = diagnosis.map_or("", |d| d.fix.as_str());
    let names_fix = fix.contains("indirect_desc=on") && fix.contains("bit 28");
    checks.push(Check::new(
        what,
        expected,
        match diagnosis {
            None => format!(
                "no requeued_commands on {} (blk R {}, D {})",
                before.device, before.requeues, before.data_issues
            ),
            Some(_) => format!(
                "blk R {}, D {}; cause {cause}, virtio_indirect_desc {}, fix {}; what_if {} -> {}",
                before.requeues,
                before.data_issues,
                indirect_evidence.map_or("absent".into(), |indirect| indirect.to_string()),
                if names_fix { "names both" } else { "does not" },
                now.map_or("?".into(), |n| n.to_string()),
                predicted.map_or("?".into(), |n| n.to_string()),
            ),
        },
        before.requeues > 0
            && before.indirect == Some('0')
            && cause == "virtio_ring_full"
            && indirect_evidence == Some(false)
            && names_fix
            && now == Some(before.data_issues),
    ));
    let what = "after fix: guest sees indirect descriptors";
    let expected = format!("features bit 28 = 1, max_segments {}", before.max_segments);
    let after = match requeue_run(results, "fixed.") {
        Ok(run) => run,
        Err(why) => {
            checks.push(Check::missing(what, expected, why));
            return checks;
        }
    };
    checks.push(Check::new(
        what,
        expected,
        format!(
            "bit 28 = {}, max_segments {}",
            after.indirect.unwrap_or('?'),
            after.max_segments
        ),
        after.indirect == Some('1') && after.max_segments == before.max_segments,
    ));
    let requeued_after = after.report.events.count(EventKind::Requeue);
    let what = "after fix: blk D vs what_if.commands_after_fix";
    let expected = format!("within {:.0}%", WHAT_IF_TOLERANCE * 100.0);
    checks.push(match predicted {
        Some(predicted) if predicted > 0 => {
            let error = (after.data_issues as f64 - predicted as f64).abs() / predicted as f64;
            Check::new(
                what,
                expected,
                format!(
                    "D {} (tool: {} commands + {} requeues), predicted {predicted}: {:.1}% off",
                    after.data_issues,
                    // Shown only: no writes on the disk reads as none.
                    after
                        .report
                        .device(&after.device)
                        .and_then(Entry::writes)
                        .map_or(0, |writes| writes.commands),
                    requeued_after,
                    error * 100.0
                ),
                error <= WHAT_IF_TOLERANCE,
            )
        }
        _ => Check::missing(what, expected, "no what_if.commands_after_fix".into()),
    });
    let what = "after fix: requeues gone";
    let expected = "blk R 0, events.requeue 0, no requeued_commands";
    let still = requeue_diagnosis(&after.report, &after.device).is_some();
    checks.push(Check::new(
        what,
        expected,
        format!(
            "blk R {}, events.requeue {requeued_after}, requeued_commands {}",
            after.requeues,
            if still { "still" } else { "gone" }
        ),
        after.requeues == 0 && requeued_after == 0 && !still,
    ));
    checks
}
