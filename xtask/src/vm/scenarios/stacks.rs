//! `stacks.sh`: device-mapper and md stacks over partitions of 512e disks,
//! each against the blk tracer, its findings and their fixes: dm-linear
//! (aligned; 3 sectors off, fixed by a reload), linear + error, dm-crypt,
//! md raid1/raid0/raid5/raid10 (and md's cuts 6.1 does not trace), dm-striped, dm-flakey, dm-multipath and LVM.

use std::collections::BTreeMap;
use std::time::Duration;

use tracer_common::EventKind;

use super::{device_number, expect_geometry, json_text, Scenario, MIB, SEED_512E};
use crate::vm::check::{
    diagnoses_on, expect_diagnoses, expect_no_warning, expect_oracle_agreement, Check, Results,
};
use crate::vm::kernel::Line;
use crate::vm::oracle;
use crate::vm::qemu::{Disk, Throttle};
use crate::vm::report::{
    Code, Diagnosis, Entry, Findings, MisalignedStack, OpMeasures, Report, RunTarget, Severity,
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "stacks",
        summary: "dm over a partition: linear (aligned; 3 sectors off, fixed by reload), linear + error, crypt 512/4096 (and its 128 KiB cap, which max_write_size does not raise); md raid1 on sector-63 partitions (fixed at 64; then capped at 32 KiB, raised as the finding says), raid0 (64 KiB chunks) and a table 8 sectors into it; raid10 and raid5 reads cut at md's chunks (untraced on 6.1, counted as traced); dm-striped; dm-flakey; dm-multipath over two paths; an LVM volume off the grid, recreated with pvcreate --dataalignment",
        disks: [
            ("stacked", 256 * MIB, 2048, 400_000),
            // Legacy DOS partitions at sector 63 for raid1; aligned ones for raid0.
            ("mirror-a", 64 * MIB, 63, 100_000),
            ("mirror-b", 64 * MIB, 63, 100_000),
            ("stripe-a", 64 * MIB, 2048, 100_000),
            ("stripe-b", 64 * MIB, 2048, 100_000),
        ]
        .into_iter()
        .map(|(serial, bytes, start, size)| Disk {
            serial,
            bytes,
            bus: SEED_512E,
            partition: Some((start, size)),
            throttle: Throttle::None,
        })
        .collect(),
        timeout: Duration::from_secs(420),
        evaluate,
        extra_tools: &[],
        fixed_disks: Vec::new(),
    }
}

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "dm-linear table",
        results,
        "dm.geometry",
        &[("dm.target", "linear")],
    )];
    checks.push(expect_oracle_agreement(
        "dm-0 + vda: events vs blk tracer",
        results,
        "report.json",
        "blk.trace",
    ));
    // Each data bio to dm-0 is remapped twice (dm-0 -> vda1, vda1 -> vda); an
    // empty flush only once (partitions remap only bios with sectors).
    let what = "remaps per dm-0 bio: 2 (data), 1 (flush)";
    let expected = "tool remap = blk A = 2 x data Q(dm-0) + empty Q(dm-0)";
    checks.push(
        match (results.text("blk.trace"), results.value("names", "dm_dev")) {
            (Ok(trace), Ok(dm_dev)) => {
                let dm = device_number(&dm_dev).unwrap_or((0, 0));
                let (data, empty) = oracle::lines_with_data(&trace, dm, "Q");
                let remaps = oracle::parse_blk_trace(&trace).total("A");
                let tool_remaps = results
                    .report("report.json")
                    .map_or(0, |r| r.events.count(EventKind::Remap));
                Check::new(
                    what,
                    expected,
                    format!(
                        "tool {tool_remaps}, blk A {remaps}, Q(dm-0) {data} data + {empty} empty"
                    ),
                    data > 0 && remaps == 2 * data + empty && tool_remaps == remaps,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    // `run` follows the command's bios on dm-0 down to the commands on vda.
    let what = "run -- O_DIRECT on dm-0: chain to commands";
    let expected = "target dm-0 with bios > 0 and commands > 0";
    checks.push(match results.report("run.json") {
        Ok(report) => {
            let run_targets = report.run.as_ref().map_or(&[][..], |run| &run.targets);
            let targets: Vec<String> = run_targets
                .iter()
                .map(|target| {
                    format!(
                        "{} bios {} cmds {}",
                        target.device, target.bios, target.commands
                    )
                })
                .collect();
            let chained = run_targets
                .iter()
                .any(|target| target.device == "dm-0" && target.bios > 0 && target.commands > 0);
            Check::new(
                what,
                expected,
                if targets.is_empty() {
                    "no run targets".to_string()
                } else {
                    targets.join("; ")
                },
                chained,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    if let Ok(dm) = results.value("names", "dm") {
        checks.push(expect_no_warning(
            "report: writes and mkfs on the aligned dm-linear table (false alarm)",
            &results.report("report.json"),
            &dm,
        ));
    }
    checks.extend(misaligned_table(results));
    checks.extend(failing_table(results));
    for sector_size in [512, 4096] {
        checks.extend(crypt_table(results, sector_size));
    }
    checks.extend(md_arrays(results));
    checks.extend(raid1_fixed(results));
    checks.extend(raid1_capped(results));
    checks.extend(raid5_array(results));
    checks.extend(md_untraced_cuts(results, line));
    checks.extend(striped_table(results));
    checks.extend(flakey_table(results));
    checks.extend(multipath_table(results));
    checks.extend(lvm_volume(results));
    // The same stacks on the classic tracepoints: dm's splits on the
    // trimmed bio, md's remaps, request remaps, against the blk tracer.
    for (name, what) in [
        (
            "crypt-classic",
            "dm-crypt (4096 B sectors) + vda, classic tracepoints",
        ),
        ("md-classic", "md0 + md1 + members, classic tracepoints"),
        (
            "stripe-classic",
            "dm-striped + both disks, classic tracepoints",
        ),
        (
            "mpath-classic",
            "dm-multipath + both paths, classic tracepoints",
        ),
    ] {
        checks.push(expect_oracle_agreement(
            &format!("{what}: events vs blk tracer"),
            results,
            &format!("report-{name}.json"),
            &format!("blk-{name}.trace"),
        ));
        let said = results.text(&format!("report-{name}.json.stderr"));
        checks.push(Check::new(
            format!("{what}: the flavor asked for"),
            "stderr says classic tracepoints",
            said.as_deref().unwrap_or("no stderr").trim().to_string(),
            said.is_ok_and(|text| text.contains("classic tracepoints")),
        ));
    }
    checks
}

/// The names stacks.sh wrote for `what` under `keys`, or the one check
/// saying they are missing.
fn stack_names<const N: usize>(
    results: &Results,
    what: &str,
    keys: [&str; N],
) -> Result<[String; N], Vec<Check>> {
    let mut names = Vec::with_capacity(N);
    for key in keys {
        match results.value("names", key) {
            Ok(name) => names.push(name),
            Err(why) => {
                return Err(vec![Check::missing(
                    what.to_string(),
                    format!("names {}", keys.join(", ")),
                    format!("stacks.sh did not name the device: {why}"),
                )])
            }
        }
    }
    Ok(names
        .try_into()
        .unwrap_or_else(|_| unreachable!("one name per key")))
}

/// stacks.sh's dm-striped table: 2 stripes of 64 KiB chunks, 4 writes of 1 MiB.
fn striped_table(results: &Results) -> Vec<Check> {
    let [striped, dev] = match stack_names(results, "dm-striped", ["striped", "striped_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-striped + both disks: events vs blk tracer",
        results,
        "report-stripe.json",
        "blk-stripe.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let (stripe_a, stripe_b) = (disk("stripe_a_disk"), disk("stripe_b_disk"));
    checks.push(top_to_bottom(
        results,
        "report-stripe.json",
        "blk-stripe.trace",
        &striped,
        &[&stripe_a, &stripe_b],
        Below::Exact,
    ));
    checks.push(expect_no_warning(
        "report: 1 MiB writes on dm-striped, cut per chunk by design (false alarm)",
        &results.report("report-stripe.json"),
        &striped,
    ));
    let what = "dm-striped: 4 user I/Os cut at each 64 KiB chunk, named so; every chain ended";
    let expected =
        "4 user I/Os; split_causes only chunk_boundary = blk X (60); unmatched 0, in flight 0";
    checks.push(
        match (
            results.report("report-stripe.json"),
            results.text("blk-stripe.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let writes = report.device(&striped).and_then(Entry::writes);
                let user_ios = writes.map(|w| w.user_ios);
                let causes = SplitCauses::of(writes);
                let cuts = device_number(&dev)
                    .map(|dev| oracle::lines_with_data(&trace, dev, "X"))
                    .map_or(0, |(with, without)| with + without);
                let (chunk, only) = (causes.chunk_boundary(), causes.only_one());
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!("user I/Os {user_ios:?}; {causes}; blk X {cuts}; {leftovers}"),
                    user_ios == Some(4)
                        && only
                        && chunk == Some(cuts)
                        && cuts == 60
                        && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// stacks.sh's raid1 after its fix: the mirrors' partitions recreated at
/// sector 64, as `misaligned_stack` proposed, and the same 16 writes again.
fn raid1_fixed(results: &Results) -> Vec<Check> {
    let [part, start] = match stack_names(
        results,
        "raid1 fixed",
        ["mirror_part", "mirror_start_fixed"],
    ) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_diagnoses(
        "check: raid1 on partitions recreated at 64 (the fix)",
        &results.audit("check-md-fixed.json"),
        "md0",
        &[],
        None,
    )];
    // md writes its superblock and bitmap in small pieces of its own: of
    // the commands after the fix, only those beyond the 16 writes may be off.
    let what =
        "raid1 writes after the fix: same commands on the mirror, the writes on the 4 KiB grid";
    let expected = "partition at 64; commands within 20%; misaligned share > 0.9 before, at most md's own beyond 16 writes after";
    checks.push(
        match (
            results.report("report-md.json"),
            results.report("report-md-fixed.json"),
        ) {
            (Ok(before), Ok(after)) => {
                let (now, then) = (
                    write_commands(&before, &part),
                    write_commands(&after, &part),
                );
                let pass = start == "64"
                    && matches!((now, then), (Some((b, off_b)), Some((a, off_a)))
                        if b > 0 && a.abs_diff(b) * 5 <= b && off_b * 10 > b * 9 && off_a <= a.saturating_sub(16));
                Check::new(
                    what,
                    expected,
                    format!(
                        "{part} at {start}: (commands, misaligned) before {now:?}, after {then:?}"
                    ),
                    pass,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// stacks.sh's raid1 with its own `max_sectors_kb` (32) below what its
/// disks take: md splits each 64 KiB write. The finding names md0's queue
/// and the raise; written as it says, the writes go whole.
fn raid1_capped(results: &Results) -> Vec<Check> {
    let what =
        "md0 capped at 32 KiB: split_amplification by max_sectors on the stack, raise proposed";
    let expected = "cause max_sectors on md0, a warning, proposed_max_sectors_kb >= 64 (its disks take it), 16 splits";
    let capped = results.report("run-md-capped.json");
    let predicted = capped.as_ref().ok().and_then(|report| {
        report
            .diagnosis("md0", Code::SplitAmplification)?
            .what_if()
            .map(|what_if| what_if.commands_after_fix)
    });
    let splits = |report: &Report| {
        report
            .device("md0")
            .and_then(Entry::writes)
            .map(|w| w.splits)
    };
    let mut checks = vec![match &capped {
        Ok(report) => {
            let finding = report.diagnosis("md0", Code::SplitAmplification);
            let evidence = finding.and_then(Diagnosis::split_amplification);
            let cause = evidence.map(|e| e.cause.as_str());
            let severity = finding.map(|f| f.severity);
            let proposed = evidence.and_then(|e| e.proposed_max_sectors_kb);
            Check::new(
                what,
                expected,
                format!(
                    "cause {cause:?}, severity {:?}, proposed {proposed:?}, splits {:?}, predicted {predicted:?}",
                    severity.map(Severity::as_str),
                    splits(report)
                ),
                cause == Some("max_sectors")
                    && severity == Some(Severity::Warning)
                    && proposed.is_some_and(|kb| kb >= 64)
                    && splits(report) == Some(16),
            )
        }
        Err(why) => Check::missing(what, expected, why.clone()),
    }];
    let what = "md0 raised as the fix says: no split, commands = what-if";
    let expected = "splits 0; md0 commands within 20% of commands_after_fix";
    checks.push(match results.report("run-md-raised.json") {
        Ok(report) => {
            let commands =
                report.device("md0").and_then(Entry::writes).map(|w| w.commands);
            Check::new(
                what,
                expected,
                format!("splits {:?}, commands {commands:?}, predicted {predicted:?}", splits(&report)),
                splits(&report) == Some(0)
                    && matches!((commands, predicted), (Some(c), Some(p)) if p > 0 && c.abs_diff(p) * 5 <= p),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// stacks.sh's raid5 (3 members, 64 KiB chunks): 16 writes of 64 KiB and
/// 4 of 1 MiB. md writes each stripe's data and parity itself, in 4 KiB
/// bios remapped from md2: no split of the user's write, no false alarm.
fn raid5_array(results: &Results) -> Vec<Check> {
    let [md2_dev] = match stack_names(results, "md raid5", ["md2_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "md2 (raid5) + members: events vs blk tracer",
        results,
        "report-raid5.json",
        "blk-raid5.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let members = [
        disk("mirror_disk"),
        disk("mirror_b_disk"),
        disk("stripe_b_disk"),
    ];
    checks.push(top_to_bottom(
        results,
        "report-raid5.json",
        "blk-raid5.trace",
        "md2",
        &[&members[0], &members[1], &members[2]],
        Below::AtMost { per_user_io: 1 },
    ));
    let what = "md2 (raid5): user I/Os = what was submitted; every chain ended";
    let expected = "20 user I/Os (= blk Q with data on md2); unmatched 0, in flight 0";
    checks.push(
        match (
            results.report("report-raid5.json"),
            results.text("blk-raid5.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let queued = device_number(&md2_dev)
                    .map_or(0, |dev| oracle::lines_with_data(&trace, dev, "Q").0);
                let user_ios = report
                    .device("md2")
                    .and_then(Entry::writes)
                    .map(|w| w.user_ios);
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!("user I/Os {user_ios:?} (blk Q {queued}); {leftovers}"),
                    user_ios == Some(20) && queued == 20 && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks.push(expect_no_warning(
        "report: writes on raid5 md2 (false alarm)",
        &results.report("report-raid5.json"),
        "md2",
    ));
    checks
}

/// md's own cuts, which md before 6.18 (22f166218f73) makes with bio_split
/// and never traces: raid10 (near 2 over 3 members) cuts its 8 writes and 8
/// reads of 512 KiB at each 64 KiB chunk, raid5 its 8 chunk-aligned reads
/// (7 cuts each). Debian's 6.1 prints no `X` for them; 6.12.y (stable
/// backport) and 7.x do. Either way the report counts every cut with its
/// cause: as many as md's pieces (its remaps from distinct sectors, the
/// mirrors' second clones aside) beyond one per user bio, and as blk `X`
/// where there is one; on 6.1 all of them inferred (`splits_inferred`).
fn md_untraced_cuts(results: &Results, line: &Line) -> Vec<Check> {
    let untraced = line.name == "6.1";
    let mut checks = Vec::new();
    for (what, report_name, trace_name, md, dev_key, cuts_expected, mirrors) in [
        (
            "md3 (raid10 near 2, 3 members)",
            "report-raid10.json",
            "blk-raid10.trace",
            "md3",
            "md3_dev",
            112,
            64,
        ),
        (
            "md2 (raid5) reads",
            "report-raid5-read.json",
            "blk-raid5-read.trace",
            "md2",
            "md2_dev",
            56,
            0,
        ),
    ] {
        checks.push(expect_oracle_agreement(
            &format!("{what} + members: events vs blk tracer"),
            results,
            report_name,
            trace_name,
        ));
        let check = format!("{what}: md's chunk cuts counted, traced or not");
        let expected = format!(
            "splits = chunk_boundary = md pieces - Q on {md} = {cuts_expected}; blk X {}, splits_inferred {}; mirrored_remaps = {mirrors}; unmatched 0, in flight 0",
            if untraced { "0".to_string() } else { format!("{cuts_expected}") },
            if untraced { format!("{cuts_expected}") } else { "0".to_string() },
        );
        let dev = results.value("names", dev_key);
        checks.push(
            match (results.report(report_name), results.text(trace_name), dev) {
                (Ok(report), Ok(trace), Ok(dev)) => {
                    let dev = device_number(&dev).unwrap_or((0, 0));
                    let (x_data, x_empty) = oracle::lines_with_data(&trace, dev, "X");
                    let traced_cuts = x_data + x_empty;
                    let queued = oracle::lines_with_data(&trace, dev, "Q").0;
                    let (pieces, clones) = md_pieces(&trace, dev);
                    let oracle_cuts = pieces.saturating_sub(queued);
                    let ops = report
                        .device(md)
                        .map(|device| &device.measures.ops)
                        .into_iter()
                        .flat_map(|ops| ops.values());
                    let (mut splits, mut chunk, mut other) = (0, 0, 0);
                    for op in ops {
                        splits += op.splits;
                        for (cause, count) in &op.split_causes {
                            match cause.as_str() {
                                "chunk_boundary" => chunk += count,
                                _ => other += count,
                            }
                        }
                    }
                    let correlation = &report.correlation;
                    let inferred = correlation.splits_inferred;
                    let leftovers = Leftovers::of(&report);
                    let (want_x, want_inferred) = match untraced {
                        true => (0, cuts_expected),
                        false => (cuts_expected, 0),
                    };
                    Check::new(
                        check,
                        expected,
                        format!(
                            "splits {splits} (chunk_boundary {chunk}, other {other}); md pieces {pieces} - Q {queued} = {oracle_cuts}; blk X {traced_cuts}, splits_inferred {inferred}; mirrored_remaps {} (blk: {} second clones); {leftovers}",
                            correlation.mirrored_remaps,
                            clones - pieces,
                        ),
                        splits == cuts_expected
                            && chunk == splits
                            && other == 0
                            && oracle_cuts == splits
                            && traced_cuts == want_x
                            && inferred == want_inferred
                            && correlation.mirrored_remaps == mirrors
                            && clones - pieces == mirrors
                            && leftovers.none(),
                    )
                }
                (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
                    Check::missing(check, expected, why)
                }
            },
        );
    }
    checks
}

/// md's remaps of its pieces to its members (`A ... <- (md) sector`): the
/// distinct pieces (by direction and md sector) and all the clones.
fn md_pieces(trace: &str, md: (u32, u32)) -> (u64, u64) {
    let from = format!("({},{})", md.0, md.1);
    let mut pieces = std::collections::BTreeSet::new();
    let mut clones = 0;
    for line in trace.lines() {
        let Some((_, rest)) = line.split_once(": ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let Some(arrow) = words.iter().position(|word| *word == "<-") else {
            continue;
        };
        if words.get(1) != Some(&"A") || words.get(arrow + 1) != Some(&from.as_str()) {
            continue;
        }
        let direction = words
            .get(2)
            .map_or(' ', |rwbs| if rwbs.contains('W') { 'W' } else { 'R' });
        if let Some(sector) = words.get(arrow + 2) {
            pieces.insert((direction, sector.to_string()));
            clones += 1;
        }
    }
    (pieces.len() as u64, clones)
}

/// What a report's correlation left unended: events in no chain, user I/Os in flight.
struct Leftovers {
    unmatched: u64,
    in_flight: u64,
}

impl Leftovers {
    fn of(report: &Report) -> Leftovers {
        Leftovers {
            unmatched: report.correlation.unmatched_events,
            in_flight: report.correlation.in_flight,
        }
    }

    fn none(&self) -> bool {
        self.unmatched == 0 && self.in_flight == 0
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unmatched {}, in flight {}",
            self.unmatched, self.in_flight
        )
    }
}

/// A device's write `split_causes`, if it had writes.
struct SplitCauses<'a>(Option<&'a BTreeMap<String, u64>>);

impl<'a> SplitCauses<'a> {
    fn of(writes: Option<&'a OpMeasures>) -> SplitCauses<'a> {
        SplitCauses(writes.map(|writes| &writes.split_causes))
    }

    fn chunk_boundary(&self) -> Option<u64> {
        self.0?.get("chunk_boundary").copied()
    }

    /// Only one cause was seen.
    fn only_one(&self) -> bool {
        self.0.is_some_and(|causes| causes.len() == 1)
    }
}

/// As the report prints it: the object, or `null` without writes.
impl std::fmt::Display for SplitCauses<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&json_text(&self.0))
    }
}

/// stacks.sh's dm-multipath table: two paths, round-robin, 16 writes of
/// 64 KiB. Request-based: each dm request's clone is remapped
/// (`block_rq_remap`, blk `A`) and issued on a path with no queue there.
fn multipath_table(results: &Results) -> Vec<Check> {
    let [mpath, dev] = match stack_names(results, "dm-multipath", ["mpath", "mpath_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-multipath + both paths: events vs blk tracer",
        results,
        "report-mpath.json",
        "blk-mpath.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let paths = [disk("stripe_a_disk"), disk("stripe_b_disk")];
    checks.push(top_to_bottom(
        results,
        "report-mpath.json",
        "blk-mpath.trace",
        &mpath,
        &[&paths[0], &paths[1]],
        Below::Exact,
    ));
    let what = "dm-multipath: 16 user I/Os, one request remap per clone, both paths used";
    let expected = "16 user I/Os = blk Q; rq_remap = blk A on the paths; each path > 0 commands; unmatched 0, in flight 0";
    checks.push(
        match (results.report("report-mpath.json"), results.text("blk-mpath.trace")) {
            (Ok(report), Ok(trace)) => {
                let blk = oracle::parse_blk_trace(&trace);
                let queued = device_number(&dev)
                    .map_or(0, |dev| oracle::lines_with_data(&trace, dev, "Q").0);
                let user_ios =
                    report.device(&mpath).and_then(Entry::writes).map(|w| w.user_ios);
                let per_path: Vec<Option<u64>> = paths
                    .iter()
                    .map(|path| {
                        report.device(path).and_then(Entry::writes).map(|w| w.commands)
                    })
                    .collect();
                let rq_remaps = report.events.count(EventKind::RqRemap);
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!(
                        "user I/Os {user_ios:?} (blk Q {queued}); rq_remap {rq_remaps}, blk A {}; path commands {per_path:?}; {leftovers}",
                        blk.total("A")
                    ),
                    user_ios == Some(16)
                        && queued == 16
                        && rq_remaps == blk.total("A")
                        && rq_remaps >= 16
                        && per_path.iter().all(|c| c.is_some_and(|c| c > 0))
                        && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks.push(expect_no_warning(
        "report: writes through dm-multipath (false alarm)",
        &results.report("report-mpath.json"),
        &mpath,
    ));
    checks.push(run_through_stack(results, "run-mpath.json", &mpath, 8));
    checks
}

/// stacks.sh's dm-flakey table, down for its whole life: 6 failing writes.
fn flakey_table(results: &Results) -> Vec<Check> {
    let [flakey, dev] = match stack_names(results, "dm-flakey", ["flakey", "flakey_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-flakey + disk: events vs blk tracer",
        results,
        "report-flakey.json",
        "blk-flakey.trace",
    )];
    let what = "dm-flakey down: failed writes, tool vs blk C status";
    let expected = "blk C with status = tool failed_commands = failed_user_ios = 6; io_errors";
    checks.push(
        match (results.report("report-flakey.json"), results.text("blk-flakey.trace")) {
            (Ok(report), Ok(trace)) => {
                let blk = device_number(&dev)
                    .map_or(0, |dev| oracle::failed_completions(&trace, dev));
                let writes = report.device(&flakey).and_then(Entry::writes);
                let failed = writes.map(|w| w.failed_commands);
                let failed_ios = writes.map(|w| w.failed_user_ios);
                let named = diagnoses_on(&*report, &flakey)
                    .iter()
                    .any(|f| f.code == Code::IoErrors);
                Check::new(
                    what,
                    expected,
                    format!("blk {blk}, tool {failed:?} commands, {failed_ios:?} user I/Os, io_errors {named}"),
                    blk == 6 && failed == Some(blk) && failed_ios == Some(blk) && named,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// A stacked device's user I/Os counted through to the disks: its
/// `disk_commands` against the blk tracer's data D lines on `bottoms`, when
/// nothing else wrote there during the window.
/// How a stacked device's disk commands must relate to the blk tracer's D
/// lines on the disks below it.
#[derive(Clone, Copy)]
enum Below {
    /// dm: every command below is the top device's.
    Exact,
    /// md writes its own superblocks: at most D, and at least this many
    /// commands per user I/O (a raid1 write reaches every mirror).
    AtMost { per_user_io: u64 },
}

fn top_to_bottom(
    results: &Results,
    report_name: &str,
    trace_name: &str,
    top: &str,
    bottoms: &[&str],
    below: Below,
) -> Check {
    let (relation, floor) = match below {
        Below::Exact => ("=", 1),
        Below::AtMost { per_user_io } => ("<=", per_user_io),
    };
    let what = format!(
        "{top}: commands on the disks below {relation} blk D on {}",
        bottoms.join(" + ")
    );
    let expected = format!(
        "write disk_commands {relation} blk D with data on the disks, >= {floor} per user I/O"
    );
    match (results.report(report_name), results.text(trace_name)) {
        (Ok(report), Ok(trace)) => {
            let issued: u64 = bottoms
                .iter()
                .filter_map(|bottom| device_number(&report.device(bottom)?.dev))
                .map(|dev| oracle::lines_with_data(&trace, dev, "D").0)
                .sum();
            let writes = report.device(top).and_then(Entry::writes);
            let disk_commands = writes.map(|w| w.disk_commands);
            let user_ios = writes.map(|w| w.user_ios);
            let enough =
                matches!((disk_commands, user_ios), (Some(d), Some(u)) if u > 0 && d >= floor * u);
            Check::new(
                what,
                expected,
                format!("{top}: {user_ios:?} user I/Os -> {disk_commands:?} disk commands; blk D {issued}"),
                issued > 0
                    && enough
                    && disk_commands.is_some_and(|d| match below {
                        Below::Exact => d == issued,
                        Below::AtMost { .. } => d <= issued,
                    }),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    }
}

/// The `misaligned_stack` evidence on `device` in a report, if any.
fn stack_evidence<'a>(report: &'a impl Findings, device: &str) -> Option<&'a MisalignedStack> {
    report
        .diagnosis(device, Code::MisalignedStack)
        .and_then(Diagnosis::misaligned_stack)
}

/// stacks.sh's md arrays: raid1 md0 on sector-63 partitions, raid0 md1
/// with 64 KiB chunks on aligned ones, a dm table 8 sectors into md1.
fn md_arrays(results: &Results) -> Vec<Check> {
    let names = [
        "mirror_part",
        "mirror_disk",
        "md0_offset",
        "md0_dev",
        "md1_dev",
        "onraid",
    ]
    .map(|key| results.value("names", key));
    let [Ok(mirror_part), Ok(mirror_disk), Ok(md0_offset), Ok(md0_dev), Ok(md1_dev), Ok(onraid)] =
        names
    else {
        return vec![Check::missing(
            "md arrays",
            "names of the arrays",
            format!(
                "stacks.sh did not name them: {}",
                results.text("mdadm.out").unwrap_or_default().trim()
            ),
        )];
    };
    let check = results.audit("check-md.json");
    let mut checks = Vec::new();
    let what = "check: raid1 on partitions at sector 63";
    let offset: u64 = md0_offset.parse().unwrap_or(0);
    let expected = format!(
        "misaligned_stack on md0, bottom_start 63 + data offset {offset}, culprit the partition {mirror_part} (recreate at 64)"
    );
    checks.push(match &check {
        Ok(report) => {
            let evidence = stack_evidence(&**report, "md0");
            let culprit = evidence.map(|e| e.culprit_device.as_str());
            let via = evidence.map(|e| e.culprit_via.as_str());
            let proposed = evidence.map(|e| e.proposed_offset_sectors);
            let bottom_start = evidence.map(|e| e.bottom_start);
            let fix = report
                .diagnosis("md0", Code::MisalignedStack)
                .map_or("", |d| d.fix.as_str());
            Check::new(
                what,
                &expected,
                format!(
                    "{culprit:?} via {via:?} at {:?} -> {proposed:?}, bottom_start {bottom_start:?}",
                    evidence.map(|e| e.culprit_offset_sectors),
                ),
                via == Some("partition")
                    && culprit == Some(mirror_disk.as_str())
                    && bottom_start == Some(63 + offset)
                    && proposed == Some(64)
                    && fix.contains(&format!("Recreate {mirror_part}")),
            )
        }
        Err(why) => Check::missing(what, &expected, why.clone()),
    });
    checks.push(expect_diagnoses(
        "check: raid0 on aligned partitions (false alarm)",
        &check,
        "md1",
        &[],
        None,
    ));
    let what = "check: a table 8 sectors into the raid0 cuts its 64 KiB chunks";
    let expected =
        "misaligned_stack on the dm device: bottom md1, granularity 65536, 4096 bytes past";
    checks.push(match &check {
        Ok(report) => {
            let evidence = stack_evidence(&**report, &onraid);
            let bottom = evidence.map(|e| e.bottom_device.as_str());
            let granularity = evidence.map(|e| e.granularity);
            let offset = evidence.map(|e| e.offset_bytes);
            Check::new(
                what,
                expected,
                format!("bottom {bottom:?}, granularity {granularity:?}, offset {offset:?}"),
                bottom == Some("md1") && granularity == Some(65536) && offset == Some(4096),
            )
        }
        Err(why) => Check::missing(what, expected, why.clone()),
    });
    checks.push(expect_oracle_agreement(
        "md0 + md1 + members: events vs blk tracer",
        results,
        "report-md.json",
        "blk-md.trace",
    ));
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let (mirror_b, stripe_a, stripe_b) = (
        disk("mirror_b_disk"),
        disk("stripe_a_disk"),
        disk("stripe_b_disk"),
    );
    let mirrors = [mirror_disk.as_str(), mirror_b.as_str()];
    let stripes = [stripe_a.as_str(), stripe_b.as_str()];
    checks.push(top_to_bottom(
        results,
        "report-md.json",
        "blk-md.trace",
        "md0",
        &mirrors,
        Below::AtMost { per_user_io: 2 },
    ));
    checks.push(top_to_bottom(
        results,
        "report-md.json",
        "blk-md.trace",
        "md1",
        &stripes,
        Below::AtMost { per_user_io: 1 },
    ));
    checks.push(expect_no_warning(
        "report: 1 MiB writes on raid0 md1, cut per chunk by design (false alarm)",
        &results.report("report-md.json"),
        "md1",
    ));
    let what = "md user I/Os = what was submitted; every chain ended";
    let expected = "md0 16 and md1 4 user I/Os (= blk Q with data); unmatched 0, in flight 0";
    checks.push(
        match (
            results.report("report-md.json"),
            results.text("blk-md.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let user_ios = |name: &str| {
                    report
                        .device(name)
                        .and_then(Entry::writes)
                        .map(|w| w.user_ios)
                };
                let queued = |dev: &str| {
                    device_number(dev)
                        .map(|dev| oracle::lines_with_data(&trace, dev, "Q").0)
                        .unwrap_or(0)
                };
                let leftovers = Leftovers::of(&report);
                let (md0, md1) = (user_ios("md0"), user_ios("md1"));
                let (q0, q1) = (queued(&md0_dev), queued(&md1_dev));
                Check::new(
                    what,
                    expected,
                    format!("md0 {md0:?} (blk {q0}), md1 {md1:?} (blk {q1}); {leftovers}"),
                    md0 == Some(16) && q0 == 16 && md1 == Some(4) && q1 == 4 && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let what = "raid0: 1 MiB writes cut at its 64 KiB chunks, and named so";
    let expected = "md1 split_causes only chunk_boundary, as many as blk X on md1 (60)";
    checks.push(
        match (
            results.report("report-md.json"),
            results.text("blk-md.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let causes = SplitCauses::of(report.device("md1").and_then(Entry::writes));
                let cuts = device_number(&md1_dev)
                    .map(|dev| oracle::lines_with_data(&trace, dev, "X"))
                    .map_or(0, |(with, without)| with + without);
                let (chunk, only) = (causes.chunk_boundary(), causes.only_one());
                Check::new(
                    what,
                    expected,
                    format!("{causes}; blk X {cuts}"),
                    only && chunk == Some(cuts) && cuts == 60,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let what = "run -- dd on raid0: chain to commands";
    let expected = "16 writes, 16 bios on md1, commands > 0";
    checks.push(match results.report("run-md1.json") {
        Ok(report) => {
            let target = report.run.as_ref().and_then(|run| run.target("md1"));
            let field = |of: fn(&RunTarget) -> u64| target.map(of);
            let (writes, bios, commands) = (
                field(|t| t.write_syscalls),
                field(|t| t.bios),
                field(|t| t.commands),
            );
            Check::new(
                what,
                expected,
                format!("writes {writes:?}, bios {bios:?}, commands {commands:?}"),
                writes == Some(16) && bios == Some(16) && commands.is_some_and(|c| c > 0),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// O_DIRECT writes stacks.sh makes on each dm-crypt device: 4 of 1 MiB, 64 of 4 KiB.
const CRYPT_WRITES: u64 = 4 + 64;

/// stacks.sh's dm-crypt table with `sector_size` bytes per encryption sector.
fn crypt_table(results: &Results, sector_size: u64) -> Vec<Check> {
    let keys = [
        format!("crypt{sector_size}"),
        format!("crypt{sector_size}_dev"),
    ];
    let what = format!("dm-crypt sector_size {sector_size}");
    let [crypt, dev] = match stack_names(results, &what, [&keys[0], &keys[1]]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let dev = device_number(&dev).unwrap_or((0, 0));
    let report_name = format!("report-crypt{sector_size}.json");
    let trace_name = format!("blk-crypt{sector_size}.trace");
    let mut checks = vec![expect_oracle_agreement(
        &format!("dm-crypt ({sector_size} B sectors) + vda: events vs blk tracer"),
        results,
        &report_name,
        &trace_name,
    )];
    let disk = results.value("names", "disk").unwrap_or_default();
    checks.push(top_to_bottom(
        results,
        &report_name,
        &trace_name,
        &crypt,
        &[&disk],
        Below::Exact,
    ));
    let what = format!("dm-crypt ({sector_size} B sectors): user I/Os = what was submitted");
    let expected = format!("tool user_ios = blk Q with data on the crypt device = {CRYPT_WRITES}");
    checks.push(
        match (results.report(&report_name), results.text(&trace_name)) {
            (Ok(report), Ok(trace)) => {
                let (queued, _) = oracle::lines_with_data(&trace, dev, "Q");
                let user_ios = report
                    .device(&crypt)
                    .and_then(Entry::writes)
                    .map(|w| w.user_ios);
                Check::new(
                    &what,
                    &expected,
                    format!("tool {user_ios:?}, blk Q {queued}"),
                    user_ios == Some(queued) && queued == CRYPT_WRITES,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(&what, &expected, why),
        },
    );
    // 6.12's dm-crypt cuts large writes into 128 KiB clones, traced as
    // device-mapper traces a cut: on the bio it trimmed.
    let what =
        format!("dm-crypt ({sector_size} B sectors): every event in a chain, every user I/O ended");
    let expected = "correlation.unmatched_events = 0, in_flight = 0".to_string();
    checks.push(match results.report(&report_name) {
        Ok(report) => {
            let leftovers = Leftovers::of(&report);
            Check::new(&what, &expected, leftovers.to_string(), leftovers.none())
        }
        Err(why) => Check::missing(&what, &expected, why),
    });
    let check = results.audit(&format!("check-crypt{sector_size}.json"));
    // 512-byte encryption sectors on a 4 KiB-physical disk are named; 4096 is clean.
    let wanted: &[Code] = if sector_size < 4096 {
        &[Code::CryptSectorSize]
    } else {
        &[]
    };
    let what = format!("check: dm-crypt ({sector_size} B sectors) stack, aligned");
    let expected = format!(
        "stack dm-crypt with crypt_sector_size {sector_size} onto vda; diagnoses: {}",
        if wanted.is_empty() {
            "none".to_string()
        } else {
            wanted
                .iter()
                .map(|code| code.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    checks.push(match &check {
        Ok(report) => {
            let stack = report
                .device(&crypt)
                .and_then(|e| e.geometry.stack.as_ref());
            let kind = stack.map(|s| s.kind.as_str());
            let size = stack.and_then(|s| s.crypt_sector_size);
            let bottom = stack
                .and_then(|s| s.legs.first())
                .map(|leg| leg.bottom.name.as_str());
            let found = diagnoses_on(&**report, &crypt);
            Check::new(
                &what,
                &expected,
                format!(
                    "{kind:?}, sector size {size:?}, bottom {bottom:?}, diagnoses [{}]",
                    found
                        .iter()
                        .map(|f| f.code.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                kind == Some("dm-crypt")
                    && size == Some(sector_size)
                    && bottom.is_some_and(|b| b.starts_with("vd"))
                    && found.iter().map(|f| f.code).collect::<Vec<_>>() == wanted,
            )
        }
        Err(why) => Check::missing(&what, &expected, why.clone()),
    });
    checks.push(expect_no_warning(
        &format!("report: writes on dm-crypt ({sector_size} B sectors), aligned (false alarm)"),
        &results.report(&format!("report-crypt{sector_size}.json")),
        &crypt,
    ));
    checks.push(run_through_stack(
        results,
        &format!("run-crypt{sector_size}.json"),
        &crypt,
        64,
    ));
    if sector_size == 4096 {
        checks.extend(crypt_cap(results, &crypt));
    }
    checks
}

/// `run -- dd` of `writes` O_DIRECT writes to a stacked `device`: each
/// write one bio there, and commands below.
fn run_through_stack(results: &Results, file: &str, device: &str, writes: u64) -> Check {
    let what = format!("run -- dd on {device}: chain to commands ({file})");
    let expected = format!("{writes} writes, {writes} bios on {device}, commands > 0");
    match results.report(file) {
        Ok(report) => {
            let target = report.run.as_ref().and_then(|run| run.target(device));
            let field = |of: fn(&RunTarget) -> u64| target.map(of);
            let (seen, bios, commands) = (
                field(|t| t.write_syscalls),
                field(|t| t.bios),
                field(|t| t.commands),
            );
            Check::new(
                &what,
                &expected,
                format!("writes {seen:?}, bios {bios:?}, commands {commands:?}"),
                seen == Some(writes) && bios == Some(writes) && commands.is_some_and(|c| c > 0),
            )
        }
        Err(why) => Check::missing(&what, &expected, why),
    }
}

/// stacks.sh's table whose second half is dm-error: 4 failing dd writes.
fn failing_table(results: &Results) -> Vec<Check> {
    let [err, dev] = match stack_names(results, "dm-error", ["error_dm", "error_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let dev = device_number(&dev).unwrap_or((0, 0));
    let mut checks = vec![expect_oracle_agreement(
        "linear + error table: events vs blk tracer",
        results,
        "report-error.json",
        "blk-error.trace",
    )];
    let what = "failed writes on the dm-error half: tool vs blk C status";
    let expected = "blk C with status = tool failed_commands = failed_user_ios = 4, all EIO";
    let report = results.report("report-error.json");
    checks.push(match (&report, &results.text("blk-error.trace")) {
        (Ok(report), Ok(trace)) => {
            let blk = oracle::failed_completions(trace, dev);
            let writes = report.device(&err).and_then(Entry::writes);
            let failed = writes.map(|w| w.failed_commands);
            let failed_ios = writes.map(|w| w.failed_user_ios);
            let eio = report
                .diagnosis(&err, Code::IoErrors)
                .and_then(Diagnosis::io_errors)
                .and_then(|evidence| evidence.errors.get("EIO").copied());
            Check::new(
                what,
                expected,
                format!("blk {blk}, tool {failed:?} commands, {failed_ios:?} user I/Os, io_errors EIO {eio:?}"),
                blk == 4 && failed == Some(blk) && failed_ios == Some(blk) && eio == Some(blk),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    checks.push(expect_diagnoses(
        "report on the linear + error table",
        &report,
        &err,
        &[Code::IoErrors],
        None,
    ));
    let run = results.report("run-error.json");
    let what = "run -- dd into dm-error: dd fails and the run says io_errors";
    let expected =
        "dd exit status != 0; io_errors on the dm device; the summary says 1 failed (EIO)";
    checks.push(match (&run, &results.text("run-error.rc")) {
        (Ok(report), Ok(rc)) => {
            let found = diagnoses_on(&**report, &err);
            let summary = report
                .run
                .as_ref()
                .and_then(|run| run.targets.first())
                .map_or("", |target| target.summary.as_str());
            let named = found.iter().any(|f| f.code == Code::IoErrors)
                && summary.contains("1 of them failed (EIO ×1)");
            Check::new(
                what,
                expected,
                format!(
                    "rc {}, {err}: {}",
                    rc.trim(),
                    found
                        .iter()
                        .map(|f| f.code.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                rc.trim() != "0" && named,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    checks
}

/// mkfs.ext4's own warning: "/dev/dm-1 alignment is offset by 2560 bytes."
fn mkfs_alignment_warning(output: &str) -> Option<u64> {
    let rest = output.split("alignment is offset by ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// stacks.sh's 1 MiB writes on the 4096-byte dm-crypt table. Since 6.11
/// each is cut at dm-crypt's 128 KiB cap, named `crypt_max_io` with no
/// setting to raise; the scenario sets `max_write_size` to 1 MiB and reloads
/// the table anyway, and the cuts stay (the parameter only lowers the cap).
/// Before 6.11 the cap is the 1 MiB write itself.
fn crypt_cap(results: &Results, crypt: &str) -> Vec<Check> {
    let big = results.report("run-crypt-big.json");
    let raised = results.report("run-crypt-big-fixed.json");
    let splits = |report: &Report| {
        report
            .device(crypt)
            .and_then(Entry::writes)
            .map(|w| w.splits)
    };
    let what = "dm-crypt 1 MiB writes: cut at its own 128 KiB cap, named crypt_max_io, info";
    let mut checks = Vec::new();
    match (&big, &raised) {
        (Ok(report), Ok(after)) => {
            let finding = report.diagnosis(crypt, Code::SplitAmplification);
            let evidence = finding.and_then(Diagnosis::split_amplification);
            let cause = evidence.map(|e| e.cause.as_str());
            let cap = evidence.and_then(|e| e.crypt_max_io_bytes);
            let severity = finding.map(|f| f.severity);
            let proposed = evidence.and_then(|e| e.proposed_max_sectors_kb);
            checks.push(Check::new(
                what,
                "cause crypt_max_io, cap 131072, severity info, no raise proposed, 56 splits of 8 writes",
                format!(
                    "cause {cause:?}, cap {cap:?}, severity {:?}, proposed {proposed:?}, splits {:?}",
                    severity.map(Severity::as_str),
                    splits(report)
                ),
                cause == Some("crypt_max_io")
                    && cap == Some(131_072)
                    && severity == Some(Severity::Info)
                    && proposed.is_none()
                    && splits(report) == Some(56),
            ));
            checks.push(Check::new(
                "dm-crypt max_write_size set to 1 MiB and the table reloaded: the cap stays (no fix to offer)",
                "56 splits again",
                format!("splits {:?}", splits(after)),
                splits(after) == Some(56),
            ));
        }
        (Ok(report), Err(_)) => checks.push(Check::new(
            what,
            "no max_write_size on this kernel: 1 MiB writes pass whole, no split_amplification",
            format!(
                "splits {:?}, split_amplification {}",
                splits(report),
                report.diagnosis(crypt, Code::SplitAmplification).is_some()
            ),
            splits(report) == Some(0)
                && report.diagnosis(crypt, Code::SplitAmplification).is_none(),
        )),
        (Err(why), _) => checks.push(Check::missing(what, "run-crypt-big.json", why.clone())),
    }
    checks
}

/// (commands, misaligned-4k commands) of writes on `device` in a report.
fn write_commands(report: &Report, device: &str) -> Option<(u64, u64)> {
    let writes = report.device(device)?.writes()?;
    Some((writes.commands, writes.misaligned_4k_commands))
}

/// stacks.sh's second table, 3 sectors into the partition, then reloaded
/// with the offset the finding proposes.
fn misaligned_table(results: &Results) -> Vec<Check> {
    let [offset_dm, aligned_dm] =
        match stack_names(results, "misaligned dm table", ["offset_dm", "dm"]) {
            Ok(names) => names,
            Err(missing) => return missing,
        };
    let part = results.value("names", "part").unwrap_or_default();
    let check = results.audit("check.json");
    let mut checks = vec![
        expect_diagnoses(
            "check: dm table 3 sectors into an aligned partition",
            &check,
            &offset_dm,
            &[Code::MisalignedStack],
            None,
        ),
        expect_diagnoses(
            "check: aligned dm table (false alarm)",
            &check,
            &aligned_dm,
            &[],
            None,
        ),
    ];
    // mkfs.ext4 (libblkid's topology) is the oracle for the offset.
    let what = "misaligned_stack's alignment offset vs mkfs.ext4's warning";
    let expected = "evidence.alignment_offset = mkfs's \"offset by\" = 2560; proposed offset 8";
    checks.push(match (&check, &results.text("mkfs-offset.out")) {
        (Ok(report), Ok(mkfs)) => {
            let mkfs = mkfs.as_str();
            let evidence = stack_evidence(&**report, &offset_dm);
            let warned = mkfs_alignment_warning(mkfs);
            let offset = evidence.map(|e| e.alignment_offset);
            let proposed = evidence.map(|e| e.proposed_offset_sectors);
            Check::new(
                what,
                expected,
                format!("tool {offset:?}, mkfs {warned:?}, proposed {proposed:?}"),
                offset == Some(2560) && warned == offset && proposed == Some(8),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    let run = results.report("run-offset.json");
    checks.push(expect_diagnoses(
        "run -- mkfs.ext4 on the misaligned table",
        &run,
        &offset_dm,
        &[Code::MisalignedStack],
        None,
    ));
    let fixed = results.audit("check-fixed.json");
    checks.push(expect_diagnoses(
        "check after the table is reloaded at offset 8",
        &fixed,
        &offset_dm,
        &[],
        None,
    ));
    checks.push(mkfs_after_the_fix(
        results,
        (
            "run-offset.json",
            "run-offset-fixed.json",
            "mkfs-offset-fixed.out",
        ),
        &part,
    ));
    checks
}

/// mkfs.ext4 run before and after a stack's misalignment is fixed (the
/// run reports and mkfs's output after): no mkfs warning after, the same
/// commands on `part` within 20%, and all of them on the 4 KiB grid.
fn mkfs_after_the_fix(results: &Results, files: (&str, &str, &str), part: &str) -> Check {
    let (before_file, after_file, mkfs_file) = files;
    let what = format!("mkfs.ext4 after the fix ({after_file}): no warning, same commands, none off the 4 KiB grid");
    let expected = "no mkfs warning; commands within 20%; misaligned share > 0.9 before, 0 after";
    match (
        &results.report(before_file),
        &results.report(after_file),
        &results.text(mkfs_file),
    ) {
        (Ok(before), Ok(after), Ok(mkfs)) => {
            let now = write_commands(before, part);
            let then = write_commands(after, part);
            let warned = mkfs_alignment_warning(mkfs);
            let pass = match (now, then) {
                (Some((before, off_before)), Some((after, off_after))) => {
                    warned.is_none()
                        && before > 0
                        && after.abs_diff(before) * 5 <= before
                        && off_before * 10 > before * 9
                        && off_after == 0
                }
                _ => false,
            };
            Check::new(
                &what,
                expected,
                format!(
                    "{part} (commands, misaligned): before {now:?}, after {then:?}; mkfs warning {warned:?}"
                ),
                pass,
            )
        }
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
            Check::missing(&what, expected, why.clone())
        }
    }
}

/// stacks.sh's LVM volume group on a PV whose data area starts 3 sectors
/// past 1 MiB, then recreated with the `pvcreate --dataalignment` the
/// finding gives.
fn lvm_volume(results: &Results) -> Vec<Check> {
    let [lv, pv, fixed_lv] =
        match stack_names(results, "LVM volume", ["lvm_lv", "lvm_pv", "lvm_lv_fixed"]) {
            Ok(names) => names,
            Err(missing) => return missing,
        };
    let check = results.audit("check-lvm.json");
    let what = "check: an LV on a PV whose data starts 1536 B off the grid";
    let expected = format!(
        "misaligned_stack on the LV: kind dm-linear, LVM uuid, culprit {pv}, fix pvcreate --dataalignment"
    );
    let mut checks = vec![match &check {
        Ok(report) => {
            let finding = report.diagnosis(&lv, Code::MisalignedStack);
            let evidence = finding.and_then(Diagnosis::misaligned_stack);
            let fix = finding.map_or("", |d| d.fix.as_str());
            let (kind, culprit) = (
                evidence.map_or("", |e| e.stack_kind.as_str()),
                evidence.map_or("", |e| e.culprit_device.as_str()),
            );
            // A disk entry: the LV is no partition.
            let uuid = report
                .devices
                .iter()
                .find(|d| d.entry.name == lv)
                .and_then(|d| d.entry.geometry.stack.as_ref())
                .map_or("", |stack| stack.uuid.as_str());
            Check::new(
                what,
                &expected,
                format!("kind {kind:?}, uuid {uuid:?}, culprit {culprit:?}; fix: {fix}"),
                kind == "dm-linear"
                    && uuid.starts_with("LVM-")
                    && culprit == pv
                    && fix.contains(&format!("pvcreate --dataalignment 1024k /dev/{pv}")),
            )
        }
        Err(why) => Check::missing(what, &expected, why.clone()),
    }];
    checks.push(expect_diagnoses(
        "run -- mkfs.ext4 on the misaligned LV",
        &results.report("run-lvm.json"),
        &lv,
        &[Code::MisalignedStack],
        None,
    ));
    checks.push(expect_diagnoses(
        "check after pvcreate --dataalignment as the fix says",
        &results.audit("check-lvm-fixed.json"),
        &fixed_lv,
        &[],
        None,
    ));
    checks.push(mkfs_after_the_fix(
        results,
        ("run-lvm.json", "run-lvm-fixed.json", "mkfs-lvm-fixed.out"),
        &pv,
    ));
    checks
}
