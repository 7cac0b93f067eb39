//! `seed-512e.sh`: the seed's three partition layouts on a 512e virtio
//! disk, audited, under `run -- mkfs.ext4`, and under O_DIRECT 1 MiB writes.

use std::time::Duration;

use super::{expect_all_probes, expect_geometry, Scenario, MIB, SEED_512E, SEED_LAYOUTS};
use crate::vm::check::{expect_diagnoses, expect_oracle_agreement, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::oracle;
use crate::vm::qemu::{Disk, Throttle};
use crate::vm::report::{Code, Findings, OpMeasures};

pub fn scenario() -> Scenario {
    Scenario {
        name: "seed-512e",
        summary:
            "seed's three partition layouts on a 512e virtio disk: run -- mkfs.ext4, O_DIRECT 1 MiB",
        disks: SEED_LAYOUTS
            .iter()
            .zip(["layout1", "layout2", "layout3"])
            .map(|(&(start, size), serial)| Disk {
                serial,
                bytes: 256 * MIB,
                bus: SEED_512E,
                partition: Some((start, size)),
                throttle: Throttle::None,
            })
            .collect(),
        timeout: Duration::from_secs(600),
        evaluate,
        extra_tools: &[],
        fixed_disks: Vec::new(),
    }
}

/// What one seed layout must look like: in the guest kernel, and to `run`.
struct SeedExpectation {
    layout: &'static str,
    codes: &'static [Code],
    /// `evidence.block_size` of `subpage_block_size`.
    block_size: Option<u64>,
    /// `blockdev --getbsz` in the guest.
    kernel_block_size: &'static str,
    alignment_offset: &'static str,
}

const SEED_EXPECTATIONS: [SeedExpectation; 3] = [
    SeedExpectation {
        layout: "layout1",
        codes: &[Code::MisalignedStart, Code::SubpageBlockSize],
        block_size: Some(512),
        kernel_block_size: "512",
        alignment_offset: "3584",
    },
    SeedExpectation {
        layout: "layout2",
        codes: &[Code::SubpageBlockSize],
        block_size: Some(1024),
        kernel_block_size: "1024",
        alignment_offset: "0",
    },
    SeedExpectation {
        layout: "layout3",
        codes: &[],
        block_size: None,
        kernel_block_size: "4096",
        alignment_offset: "0",
    },
];

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = Vec::new();
    // /init leaves tracefs unmounted: the first tracing command must mount it.
    let what = "tool mounts tracefs itself";
    let expected = "layout1 run says it mounted tracefs";
    checks.push(match results.text("layout1.run.json.stderr") {
        Ok(stderr) => {
            let mounted = stderr.contains("mounted tracefs");
            Check::new(
                what,
                expected,
                if mounted {
                    "mounted"
                } else {
                    "no such message"
                },
                mounted,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.push(expect_all_probes(
        &format!("run probes (block + process tree) on {}", line.name),
        results,
        "layout1.run.json",
    ));
    // The probe stops mkfs at its opens for writing until `run` holds them.
    let what = "run pauses at mkfs's opens for writing";
    let expected = "layout1 run: paused_opens >= 1";
    checks.push(match results.report("layout1.run.json") {
        Ok(report) => {
            let paused = report.run.as_ref().map(|run| run.paused_opens);
            Check::new(
                what,
                expected,
                format!("paused_opens {paused:?}"),
                paused.is_some_and(|paused| paused >= 1),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    for SeedExpectation {
        layout,
        codes,
        block_size,
        kernel_block_size,
        alignment_offset: alignment,
    } in SEED_EXPECTATIONS
    {
        let geometry = format!("{layout}.geometry");
        checks.push(expect_geometry(
            &format!("{layout} guest geometry"),
            results,
            &geometry,
            &[
                ("disk.physical_block_size", "4096"),
                ("part.block_size", kernel_block_size),
                ("part.alignment_offset", alignment),
            ],
        ));
        let part = results
            .value("names", layout)
            .unwrap_or_else(|_| format!("{layout}?"));
        checks.push(expect_diagnoses(
            &format!("{layout} check (geometry only)"),
            &results.audit(&format!("{layout}.check.json")),
            &part,
            codes,
            block_size,
        ));
        checks.push(expect_diagnoses(
            &format!("{layout} run -- mkfs.ext4"),
            &results.report(&format!("{layout}.run.json")),
            &part,
            codes,
            block_size,
        ));
    }
    // O_DIRECT 1 MiB writes on the misaligned layout, the aligned one as control.
    for layout in ["layout1", "layout3"] {
        checks.push(expect_oracle_agreement(
            &format!("{layout} O_DIRECT: events vs blk tracer"),
            results,
            &format!("{layout}.direct.json"),
            &format!("{layout}.direct.trace"),
        ));
    }
    // The kernel fact the tool must report: with a 1 MiB transfer limit the
    // misaligned start splits each 1 MiB write in two; the aligned one does not.
    let splits = |layout: &str| {
        results
            .text(&format!("{layout}.direct.trace"))
            .map(|trace| oracle::parse_blk_trace(&trace).total("X"))
    };
    let what = "kernel splits 8 x 1 MiB (blk tracer)";
    let expected = "layout1 8 splits, layout3 0";
    checks.push(match (splits("layout1"), splits("layout3")) {
        (Ok(misaligned), Ok(aligned)) => Check::new(
            what,
            expected,
            format!("layout1 {misaligned} splits, layout3 {aligned}"),
            misaligned == 8 && aligned == 0,
        ),
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    let direct = |layout: &str| -> Result<(u64, u64, u64, u64), String> {
        let part = results.value("names", layout)?;
        let report = results.report(&format!("{layout}.direct.json"))?;
        let entry = report
            .device(&part)
            .ok_or_else(|| format!("no devices entry for {part} (devices list empty?)"))?;
        // No writes on it at all counts as none of each.
        let writes = entry.writes();
        let count = |of: fn(&OpMeasures) -> u64| writes.map_or(0, of);
        Ok((
            count(|w| w.user_ios),
            count(|w| w.fragments),
            count(|w| w.commands),
            count(|w| w.misaligned_pbs_commands),
        ))
    };
    let expected = "layout1: misaligned commands > 0, fragments > user I/Os and > layout3's";
    checks.push(match (direct("layout1"), direct("layout3")) {
        (Ok((ios1, frags1, cmds1, mis1)), Ok((ios3, frags3, cmds3, mis3))) => Check::new(
            "layout1 O_DIRECT 1 MiB report",
            expected,
            format!(
                "layout1 {ios1} ios/{frags1} frags/{cmds1} cmds/{mis1} misaligned; layout3 {ios3}/{frags3}/{cmds3}/{mis3}"
            ),
            ios1 > 0 && mis1 > 0 && frags1 > ios1 && frags1 > frags3 && mis3 == 0,
        ),
        (Err(why), _) | (_, Err(why)) => Check::missing("layout1 O_DIRECT 1 MiB report", expected, why),
    });
    checks
}
