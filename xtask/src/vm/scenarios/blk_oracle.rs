//! `blk-oracle.sh`: the BTF and classic (format-file layout) probes against
//! the ftrace blk tracer, on the seed's misaligned partition and on a
//! small-ring disk that requeues.

use std::time::Duration;

use tracer_common::EventKind;

use super::{
    device_number, expect_all_probes, expect_geometry, Scenario, INDIRECT_DESC_BIT, MIB,
    REQUEUE_DISK, REQUEUE_RING, SEED_512E, SEED_LAYOUTS,
};
use crate::vm::btt;
use crate::vm::check::{expect_oracle_agreement, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::oracle;
use crate::vm::qemu::{Disk, Throttle};

pub fn scenario() -> Scenario {
    Scenario {
        name: "blk-oracle",
        summary:
            "btf and classic (format layout) probes vs the ftrace blk tracer, requeues included",
        disks: vec![
            Disk {
                serial: "oracle",
                bytes: 256 * MIB,
                bus: SEED_512E,
                partition: Some(SEED_LAYOUTS[0]),
                throttle: Throttle::None,
            },
            Disk {
                serial: "requeue",
                bytes: 64 * MIB,
                bus: REQUEUE_DISK,
                partition: None,
                throttle: Throttle::None,
            },
        ],
        timeout: Duration::from_secs(300),
        evaluate,
        // 1.2.0 from the host for the btt captures; 1.3.0 from sid for the
        // protocol comparison (#49).
        extra_tools: &["blktrace", crate::vm::blktrace13::TOOL],
        fixed_disks: Vec::new(),
    }
}

/// `name[size] at offset` for each field of a tracepoint `format` file that
/// the 6.1 and later layouts disagree on (`rwbs`, `ioprio`).
fn issue_layout(format: &str) -> String {
    let mut described = Vec::new();
    for wanted in ["ioprio", "rwbs"] {
        let field = format.lines().find_map(|entry| {
            let declaration = entry.trim().strip_prefix("field:")?;
            let (declaration, rest) = declaration.split_once(';')?;
            let name = declaration.split_whitespace().last()?;
            (name == wanted || name.starts_with(&format!("{wanted}[")))
                .then_some((name.to_string(), rest))
        });
        described.push(match field {
            Some((name, rest)) => {
                let offset = rest
                    .split(';')
                    .find_map(|part| part.trim().strip_prefix("offset:"))
                    .unwrap_or("?");
                format!("{name} at {offset}")
            }
            None => format!("no {wanted}"),
        });
    }
    described.join(", ")
}

/// The `block_rq_issue` layout each kernel line has: the classic probes must
/// read it from the format file, not assume the host's.
fn expected_issue_layout(line: &Line) -> &'static str {
    match line.name {
        "6.1" => "no ioprio, rwbs[8] at 32",
        "6.12" => "ioprio at 32, rwbs[8] at 34",
        // 6.16 widened rwbs for the atomic `U` and the zone operations.
        "7" => "ioprio at 32, rwbs[10] at 34",
        // A line added to LINES without its layout: the check fails and says so.
        _ => "a layout listed for this kernel line",
    }
}

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "512e partition at 1785",
        results,
        "geometry",
        &[
            ("part.alignment_offset", "3584"),
            ("part.block_size", "512"),
        ],
    )];
    checks.push(expect_all_probes(
        &format!("report probes on {}", line.name),
        results,
        "report.json",
    ));
    let what = format!("{} block_rq_issue layout", line.name);
    let expected = expected_issue_layout(line);
    checks.push(match results.text("format.block_rq_issue") {
        Ok(format) => {
            let found = issue_layout(&format);
            let pass = found == expected;
            Check::new(what, expected, found, pass)
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.push(requeue_disk(results));
    checks.push(expect_oracle_agreement(
        "mkfs + O_DIRECT + aio + reads: events vs blk",
        results,
        "report.json",
        "blk.trace",
    ));
    checks.push(expect_all_probes(
        &format!("classic report probes on {}", line.name),
        results,
        "report-classic.json",
    ));
    checks.push(expect_oracle_agreement(
        "same, classic tracepoints: events vs blk",
        results,
        "report-classic.json",
        "blk.trace",
    ));
    // Requeues on their own line: the agreement rows above include them, but
    // this one says whether the requeue probe is there at all.
    let what = "requeues: events.requeue vs blk R";
    let expected = "btf = classic = blk R > 0 (short only by a flavor's declared misses)";
    checks.push(
        match (
            results.text("blk.trace"),
            results.report("report.json"),
            results.report("report-classic.json"),
        ) {
            (Ok(trace), Ok(btf), Ok(classic)) => {
                let requeues = oracle::parse_blk_trace(&trace).total("R");
                // A probe run the kernel skipped (recursion_misses: the
                // other flavor's program was running on that CPU) is
                // declared in `events.missed`, as the agreement rows allow.
                let agrees = |count: u64, missed: u64| {
                    count <= requeues && requeues - count <= missed
                };
                let (btf_missed, classic_missed) = (btf.events.missed, classic.events.missed);
                let (btf, classic) = (
                    btf.events.count(EventKind::Requeue),
                    classic.events.count(EventKind::Requeue),
                );
                Check::new(
                    what,
                    expected,
                    format!(
                        "blk R {requeues}, btf {btf} (missed {btf_missed}), classic {classic} (missed {classic_missed})"
                    ),
                    requeues > 0 && agrees(btf, btf_missed) && agrees(classic, classic_missed),
                )
            }
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
                Check::missing(what, expected, why)
            }
        },
    );
    // The comparison only proves kinds that occurred: the workload must produce all eight.
    let what = "workload covers every action";
    let expected = "A Q X M F D R C all > 0";
    checks.push(match results.text("blk.trace") {
        Ok(trace) => {
            let counts = oracle::parse_blk_trace(&trace);
            let absent: Vec<&str> = oracle::mapping()
                .into_iter()
                .map(|(action, _)| action)
                .filter(|action| counts.total(action) == 0)
                .collect();
            Check::new(
                what,
                expected,
                if absent.is_empty() {
                    "all seen".to_string()
                } else {
                    format!("never seen: {}", absent.join(" "))
                },
                absent.is_empty(),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.extend(blktrace_checks(results, line));
    checks.extend(protocol_checks(results, line));
    checks.push(tag_wait_check(results));
    checks
}

/// The same workload captured in blktrace protocol versions 7 and 8
/// (`vm/protocol_v2.rs`).
fn protocol_checks(results: &Results, line: &Line) -> Vec<Check> {
    match crate::vm::tracer() {
        Some(tracer) => crate::vm::protocol_v2::checks(
            results,
            line,
            &crate::util::workspace_root().join("target/vm"),
            tracer,
        ),
        None => vec![Check::missing(
            "blktrace protocol v2 readings",
            "the tracer binary",
            "unset".into(),
        )],
    }
}

/// blk-oracle.sh's last window: 4 scheduler tags, no merging, 64 writes in
/// one io_submit. Where the kernel has `block_rq_tag_wait`, the report's
/// tag waits on the disk equal the kernel's own event lines (short only by
/// declared misses) and are scheduler tags; where it has none, none are
/// reported.
fn tag_wait_check(results: &Results) -> Check {
    let what = "tag waits: report vs the kernel's block_rq_tag_wait lines";
    let loaded = (|| -> Result<_, String> {
        Ok((
            results.values("tagwait.setup")?,
            results.report("report-tagwait.json")?,
            results.value("names", "oracle")?,
        ))
    })();
    let (setup, report, part) = match loaded {
        Ok(loaded) => loaded,
        Err(why) => return Check::missing(what, "tagwait.setup and report-tagwait.json", why),
    };
    let disk = part
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_string();
    let reported: Vec<_> = report
        .devices
        .iter()
        .filter(|device| device.entry.name == disk)
        .flat_map(|device| device.tag_waits.iter())
        .collect();
    let waits: u64 = reported.iter().map(|wait| wait.waits).sum();
    let scheduler = reported.iter().any(|wait| wait.tags == "scheduler");
    let missed = report.events.missed;
    if setup.get("tracepoint").map(String::as_str) != Some("yes") {
        return Check::new(
            what,
            "no such tracepoint on this kernel: no tag waits reported",
            format!("{waits} reported"),
            reported.is_empty(),
        );
    }
    let lines = results
        .text("tagwait.trace")
        .map(|trace| {
            trace
                .lines()
                .filter(|l| l.contains("block_rq_tag_wait"))
                .count() as u64
        })
        .unwrap_or(0);
    Check::new(
        what,
        "kernel lines > 0 = reported waits (short only by declared misses), scheduler tags",
        format!(
            "kernel {lines}, reported {waits} ({}), missed {missed}; {}",
            reported
                .iter()
                .map(|w| format!("hctx {} {} {}", w.hctx, w.tags, w.waits))
                .collect::<Vec<_>>()
                .join(", "),
            setup.get("nr_requests").map_or("?", String::as_str)
        ),
        lines > 0 && waits <= lines && lines - waits <= missed && scheduler,
    )
}

/// The blktrace captures (#47): each device's binary files read by
/// Debian's blkparse and btt and by `analyze --from blktrace` on the host,
/// judged by the rules in `vm/btt.rs`; and the live report of the same
/// window against blkparse's lines of all three.
fn blktrace_checks(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = Vec::new();
    let what = "blktrace captured every event";
    let expected = "3 device captures, each `dropped 0`, exit 0";
    checks.push(
        match (results.text("blktrace.out"), results.text("blktrace.rc")) {
            (Ok(out), Ok(rc)) => {
                let totals: Vec<&str> = out
                    .lines()
                    .filter(|l| l.trim_start().starts_with("Total:"))
                    .collect();
                let clean = totals.len() == 3
                    && totals.iter().all(|l| l.contains("(dropped 0)"))
                    && rc.lines().all(|l| l.trim() == "0");
                Check::new(
                    what,
                    expected,
                    format!(
                        "{} totals, rc {}",
                        totals.len(),
                        rc.split_whitespace().collect::<Vec<_>>().join(",")
                    ),
                    clean,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let Some(tracer) = crate::vm::tracer() else {
        checks.push(Check::missing(
            "blktrace readings",
            "the tracer binary",
            "unset".into(),
        ));
        return checks;
    };
    let disks = match results.value("names", "btdisks") {
        Ok(disks) => disks,
        Err(why) => {
            checks.push(Check::missing("blktrace readings", "names: btdisks", why));
            return checks;
        }
    };
    // `clean` holds only bios btt follows; the disks' own captures do not.
    let mut units = vec![("clean".to_string(), true)];
    units.extend(
        disks
            .split_whitespace()
            .map(|disk| (disk.to_string(), false)),
    );
    let geometry = results.dir.join("bt.check.json");
    let scratch = std::env::temp_dir().join(format!("xtask-btt-{}", std::process::id()));
    let mut lines = oracle::BlkCounts::default();
    for (prefix, follows_all) in &units {
        let label = format!("{} blktrace {prefix}", line.name);
        let read = btt::isolate(results.dir, prefix, &scratch.join(prefix))
            .and_then(|dir| btt::read(&dir, prefix, tracer, Some(&geometry)));
        match read {
            Ok(readings) => {
                let device = lines.per_device.entry((0, 0)).or_default();
                for (action, count) in btt::actions(&readings.blkparse) {
                    *device.entry(action).or_default() += count;
                }
                checks.extend(
                    btt::judge(&label, &readings, *follows_all)
                        .into_iter()
                        .map(|j| Check::new(j.what, j.expected, j.found, j.pass)),
                );
            }
            Err(why) => checks.push(Check::missing(label, "blkparse, btt, analyze", why)),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    // The live report ran over both captures and nothing else: its events are
    // blkparse's lines of all three, short only by what it declares missed.
    let what = "live report vs blkparse lines (both captures)";
    let expected = "A Q X M F D R C equal (but for declared misses)";
    checks.push(match results.report("report-bt.json") {
        Ok(report) => {
            let rows = oracle::compare(&report.events, &lines);
            let pass = oracle::agrees_allowing_declared_misses(&rows, report.events.missed)
                && rows.iter().map(|row| row.oracle).sum::<u64>() > 0;
            Check::new(
                what,
                expected,
                rows.iter()
                    .map(|row| {
                        let letter = row.label.split(' ').next().unwrap_or("?");
                        if row.report == row.oracle {
                            format!("{letter}{}", row.oracle)
                        } else {
                            format!("{letter} {} vs {}", row.report, row.oracle)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                pass,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// The small-ring disk as the guest saw it: no indirect descriptors offered
/// (virtio feature bit 28, VIRTIO_RING_F_INDIRECT_DESC), and requeued commands
/// on that disk in the blk trace.
fn requeue_disk(results: &Results) -> Check {
    let what = format!("small-ring virtio disk (queue-size {REQUEUE_RING}, indirect_desc=off)");
    let expected = "no indirect descriptors; blk R on it > 0";
    let (geometry, trace, device) = match (
        results.values("requeue.geometry"),
        results.text("blk.trace"),
        results.value("names", "requeue_dev"),
    ) {
        (Ok(geometry), Ok(trace), Ok(device)) => (geometry, trace, device),
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
            return Check::missing(what, expected, why)
        }
    };
    let indirect = geometry
        .get("virtio.features")
        .and_then(|bits| bits.chars().nth(INDIRECT_DESC_BIT));
    let dev = device_number(&device);
    let requeues = dev
        .and_then(|dev| {
            oracle::parse_blk_trace(&trace)
                .per_device
                .get(&dev)
                .and_then(|actions| actions.get("R").copied())
        })
        .unwrap_or(0);
    let field = |key: &str| geometry.get(key).map_or("?", String::as_str);
    Check::new(
        what,
        expected,
        format!(
            "indirect {}; max_segments {}, nr_requests {}; blk R {requeues}",
            match indirect {
                Some('0') => "off",
                Some('1') => "on",
                _ => "?",
            },
            field("disk.max_segments"),
            field("disk.nr_requests"),
        ),
        indirect == Some('0') && requeues > 0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_layouts_are_read_from_the_format_file() {
        let v61 = "\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;\n\
                   \tfield:char rwbs[8];\toffset:32;\tsize:8;\tsigned:0;\n";
        assert_eq!(issue_layout(v61), "no ioprio, rwbs[8] at 32");
        let v618 = "\tfield:unsigned short ioprio;\toffset:32;\tsize:2;\tsigned:0;\n\
                    \tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:0;\n";
        assert_eq!(issue_layout(v618), "ioprio at 32, rwbs[10] at 34");
        assert_eq!(issue_layout(""), "no ioprio, no rwbs");
    }
}
