//! `scsi-debug-io-opt.sh`: scsi_debug with 4 KiB physical blocks and a
//! 128 KiB optimal I/O size, one partition aligned to each; and untorn
//! writes (#50): where the guest's scsi_debug has atomic write parameters,
//! statx and pwritev2(RWF_ATOMIC) on each partition against check's
//! `atomic_writes_lost` verdicts; where it has none, check must say the
//! kernel offers none and find nothing.

use std::time::Duration;

use super::{expect_geometry, Scenario};
use crate::vm::check::{diagnoses_on, expect_diagnoses, expect_no_warning, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::report::{Audit, Code};

/// The atomic parameters' unit: `atomic_wr_gran=8` blocks of 512 bytes, and
/// `atomic_wr_max_length=128` blocks.
const UNIT_MIN: u64 = 8 * 512;
const UNIT_MAX: u64 = 128 * 512;
/// The partition off the 8-sector atomic grid, and the next start on it.
const MISALIGNED_START: u64 = 206_849;
const NEXT_ALIGNED_START: u64 = 206_856;
/// The untorn writes each partition takes (guest-io atomic … 65536 16384 64).
const ATOMIC_WRITES: u64 = 64;
const ATOMIC_OFFSET_SECTORS: u64 = 65536 / 512;
const ATOMIC_SECTORS: u64 = 16384 / 512;
/// Where the partitions start, as the script's sfdisk table has them.
const STARTS: [(&str, u64); 3] = [
    ("sda1", 2056),
    ("sda2", 264_192),
    ("sda3", MISALIGNED_START),
];
const PARTITIONS: [&str; 3] = ["sda1", "sda2", "sda3"];

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
    checks.extend(atomic_checks(results));
    checks
}

/// Whether the guest's scsi_debug has the atomic write parameters, as its
/// modinfo listed them (an error when modinfo listed nothing: no verdict).
fn scsi_debug_has_atomics(results: &Results) -> Result<bool, String> {
    let parms = results.text("scsi_debug.parm")?;
    if !parms.lines().any(|line| line.starts_with("opt_blks:")) {
        return Err(format!(
            "modinfo listed no scsi_debug parameters: {parms:?}"
        ));
    }
    let names = [
        "atomic_wr",
        "atomic_wr_gran",
        "atomic_wr_align",
        "atomic_wr_max_length",
    ];
    let listed = |name: &str| {
        parms
            .lines()
            .any(|line| line.split(':').next() == Some(name))
    };
    Ok(names.iter().all(|name| listed(name)))
}

fn atomic_checks(results: &Results) -> Vec<Check> {
    let what = "untorn writes: scsi_debug's modinfo lists atomic_wr, _gran, _align, _max_length";
    let atomics = match scsi_debug_has_atomics(results) {
        Ok(atomics) => atomics,
        Err(why) => return vec![Check::missing(what, "a parameter list", why)],
    };
    let mut checks = vec![Check::new(
        what,
        "listed, or none of them (a kernel before atomic writes)",
        if atomics { "listed" } else { "none" },
        true,
    )];
    let report = results.audit("check.json");
    if atomics {
        checks.extend(atomic_layout_checks(results, &report));
    } else {
        checks.extend(no_atomic_checks(results, &report));
    }
    checks
}

/// `key=value` numbers of a results file.
fn numbers(results: &Results, file: &str) -> Result<Vec<(String, u64)>, String> {
    Ok(results
        .values(file)?
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.trim().parse().ok()?)))
        .collect())
}

fn number(results: &Results, file: &str, key: &str) -> Option<u64> {
    numbers(results, file)
        .ok()?
        .into_iter()
        .find_map(|(k, value)| (k == key).then_some(value))
}

/// `statx` of a device: (unit min, unit max), 0 when it reports none.
fn statx_units(results: &Results, device: &str) -> Option<(u64, u64)> {
    let file = format!("{device}.statx");
    Some((
        number(results, &file, "atomic_unit_min")?,
        number(results, &file, "atomic_unit_max")?,
    ))
}

/// What `guest-io atomic` did on a partition: writes done, the errno that
/// stopped them, its exit status.
fn atomic_outcome(results: &Results, part: &str) -> (Option<u64>, Option<String>, Option<u64>) {
    let file = format!("{part}.atomic");
    let errno = results
        .values(&file)
        .ok()
        .and_then(|mut values| values.remove("atomic_errno"));
    (
        number(results, &file, "atomic_written"),
        errno,
        number(results, &file, "rc"),
    )
}

fn atomic_layout_checks(results: &Results, report: &crate::vm::check::Loaded<Audit>) -> Vec<Check> {
    let mut checks = Vec::new();
    let sysfs = (
        number(results, "sda.atomic_sysfs", "unit_min"),
        number(results, "sda.atomic_sysfs", "unit_max"),
    );
    checks.push(Check::new(
        "untorn writes: sda's sysfs and statx offer the parameters' range",
        format!("sysfs and statx {UNIT_MIN}..{UNIT_MAX}"),
        format!("sysfs {sysfs:?}, statx {:?}", statx_units(results, "sda")),
        sysfs == (Some(UNIT_MIN), Some(UNIT_MAX))
            && statx_units(results, "sda") == Some((UNIT_MIN, UNIT_MAX)),
    ));
    let Ok(audit) = report else {
        checks.push(Check::missing(
            "untorn writes: check's verdicts",
            "check.json",
            report.as_ref().err().cloned().unwrap_or_default(),
        ));
        return checks;
    };
    for part in PARTITIONS {
        let lost: Vec<_> = audit
            .diagnoses
            .iter()
            .filter(|d| d.is_on(part))
            .filter_map(|d| d.atomic_writes_lost())
            .collect();
        let statx = statx_units(results, part);
        let (written, errno, rc) = atomic_outcome(results, part);
        if part == "sda3" {
            let named = lost.first().map(|e| {
                format!(
                    "atomic_writes_lost level {} start {:?} grid {} offered {} proposed {:?}",
                    e.level,
                    e.partition_start,
                    e.grid_sectors,
                    e.offered_unit_max_bytes,
                    e.proposed_start
                )
            });
            checks.push(Check::new(
                format!("untorn writes: {part} at {MISALIGNED_START}: statx none = check's atomic_writes_lost"),
                format!(
                    "statx (0, 0); atomic_writes_lost level partition start {MISALIGNED_START} grid 8 offered 0 proposed {NEXT_ALIGNED_START}"
                ),
                format!("statx {statx:?}; {}", named.as_deref().unwrap_or("no atomic_writes_lost")),
                statx == Some((0, 0))
                    && lost.len() == 1
                    && lost[0].level == "partition"
                    && lost[0].partition_start == Some(MISALIGNED_START)
                    && lost[0].grid_sectors == 8
                    && lost[0].offered_unit_max_bytes == 0
                    && lost[0].atomic_write_unit_max_bytes == UNIT_MAX
                    && lost[0].proposed_start == Some(NEXT_ALIGNED_START),
            ));
            let refused = matches!(errno.as_deref(), Some("EOPNOTSUPP" | "EINVAL"));
            checks.push(Check::new(
                format!("untorn writes: pwritev2(RWF_ATOMIC) 16 KiB on {part} is refused"),
                "0 written, EOPNOTSUPP or EINVAL",
                format!(
                    "{written:?} written, {}",
                    errno.as_deref().unwrap_or("no errno")
                ),
                written == Some(0) && refused && rc == Some(1),
            ));
        } else {
            checks.push(Check::new(
                format!("untorn writes: {part} keeps the disk's range: statx = check (no finding)"),
                format!("statx ({UNIT_MIN}, {UNIT_MAX}); no atomic_writes_lost"),
                format!("statx {statx:?}; {} atomic_writes_lost", lost.len()),
                statx == Some((UNIT_MIN, UNIT_MAX)) && lost.is_empty(),
            ));
            checks.push(Check::new(
                format!("untorn writes: pwritev2(RWF_ATOMIC) 16 KiB on {part} succeeds"),
                format!("{ATOMIC_WRITES} written"),
                format!(
                    "{written:?} written, {}",
                    errno.as_deref().unwrap_or("no errno")
                ),
                written == Some(ATOMIC_WRITES) && rc == Some(0),
            ));
        }
    }
    checks.extend(per_write_checks(results));
    // The false-alarm side: the partition on every grid (4 KiB, io_opt, the
    // atomic unit) with 64 untorn writes proven raises nothing above info.
    checks.push(expect_no_warning(
        "untorn writes on the fully aligned sda2 (false alarm)",
        &results.report("sda2.atomic.run.json"),
        "sda2",
    ));
    checks.extend(stack_checks(results));
    let what = "run: O_DIRECT writes on sda3 say untorn writes were lost there";
    let expected = "sda3's summary names atomic_writes_lost beside its O_DIRECT writes";
    checks.push(match results.report("sda3.direct.run.json") {
        Ok(report) => {
            let summary = report
                .run
                .as_ref()
                .and_then(|run| run.target("sda3"))
                .map_or(String::new(), |target| target.summary.clone());
            let pass = summary.contains("O_DIRECT writes could not be untorn")
                && summary.contains("see atomic_writes_lost");
            Check::new(what, expected, summary, pass)
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.push(expect_diagnoses(
        "check: start 206849 (off 4 KiB, io_opt and the atomic grid)",
        report,
        "sda3",
        &[
            Code::AtomicWritesLost,
            Code::MisalignedIoOpt,
            Code::MisalignedStart,
        ],
        None,
    ));
    let text = results.text("check.txt").unwrap_or_default();
    let line = "atomic    unit 4 KiB to 64 KiB, max 64 KiB";
    checks.push(Check::new(
        "untorn writes: check's text shows the kept range as info",
        format!("`{line}`, `sda1: keeps 4 KiB to 64 KiB`"),
        text.lines()
            .filter(|l| l.trim_start().starts_with("atomic"))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" | "),
        text.contains(line) && text.contains("sda1: keeps 4 KiB to 64 KiB"),
    ));
    checks
}

/// A kernel whose scsi_debug has no atomic parameters: no sysfs files, statx
/// reports none, RWF_ATOMIC is refused, and check says the kernel offers
/// none instead of finding anything.
fn no_atomic_checks(results: &Results, report: &crate::vm::check::Loaded<Audit>) -> Vec<Check> {
    let mut checks = Vec::new();
    let sysfs = results.text("sda.atomic_sysfs").unwrap_or_default();
    let statx: Vec<_> = ["sda"]
        .into_iter()
        .chain(PARTITIONS)
        .map(|device| (device, statx_units(results, device)))
        .collect();
    checks.push(Check::new(
        "no untorn writes: no queue/atomic_write_* files, statx none everywhere",
        "no files; statx (0, 0) on sda, sda1..3",
        format!("files {:?}; statx {statx:?}", sysfs.trim()),
        sysfs.trim().is_empty() && statx.iter().all(|(_, units)| *units == Some((0, 0))),
    ));
    let outcomes: Vec<_> = PARTITIONS
        .iter()
        .map(|part| (part, atomic_outcome(results, part)))
        .collect();
    checks.push(Check::new(
        "no untorn writes: pwritev2(RWF_ATOMIC) is refused on every partition",
        "0 written, EOPNOTSUPP or EINVAL, on sda1..3",
        outcomes
            .iter()
            .map(|(part, (written, errno, _))| {
                format!(
                    "{part}: {written:?} written, {}",
                    errno.as_deref().unwrap_or("no errno")
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        outcomes.iter().all(|(_, (written, errno, rc))| {
            *written == Some(0)
                && matches!(errno.as_deref(), Some("EOPNOTSUPP" | "EINVAL"))
                && *rc == Some(1)
        }),
    ));
    let lost = match report {
        Ok(audit) => PARTITIONS
            .iter()
            .chain(["sda"].iter())
            .map(|device| {
                diagnoses_on(&**audit, device)
                    .iter()
                    .filter(|found| found.code == Code::AtomicWritesLost)
                    .count()
            })
            .sum::<usize>(),
        Err(_) => usize::MAX,
    };
    let text = results.text("check.txt").unwrap_or_default();
    let line = "atomic    none in this kernel";
    checks.push(Check::new(
        "no untorn writes: check says the kernel offers none, and finds no atomic_writes_lost",
        format!("`{line}`; 0 atomic_writes_lost"),
        format!(
            "{}; {lost} atomic_writes_lost",
            text.lines()
                .find(|l| l.trim_start().starts_with("atomic"))
                .unwrap_or("no atomic line")
                .trim()
        ),
        text.contains(line) && lost == 0,
    ));
    checks
}

/// The blk tracer's write commands (`D` with a `W` rwbs) on sda: (sector,
/// sectors, whether rwbs has the atomic `U`), as the kernel printed them.
fn blk_write_dispatches(trace: &str) -> Vec<(u64, u64, bool)> {
    trace
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let (_, rest) = line.split_once(": ")?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            // "8,0 D WSU 2184 + 32 [guest-io]"
            match words.as_slice() {
                [_, "D", rwbs, sector, "+", sectors, ..] if rwbs.starts_with('W') => Some((
                    sector.parse().ok()?,
                    sectors.parse().ok()?,
                    rwbs.contains('U'),
                )),
                _ => None,
            }
        })
        .collect()
}

/// Each untorn write proven one by one (#50): `run`'s count of writes that
/// left the stack as one command of their own, against the program's own
/// count and the blk tracer's commands over the written range; the refused
/// ones on the misaligned partition named as failed calls.
fn per_write_checks(results: &Results) -> Vec<Check> {
    let mut checks = Vec::new();
    let trace = results.text("atomic.blk.trace");
    for (part, start) in STARTS {
        let what = format!("untorn writes under run on {part}: each proven or named");
        let report = results.report(&format!("{part}.atomic.run.json"));
        let run = report.as_ref().map_err(Clone::clone).and_then(|report| {
            report
                .run
                .as_ref()
                .ok_or_else(|| "the report has no run section".to_string())
        });
        let (written, errno, _) = atomic_outcome(results, part);
        let (Ok(run), Ok(trace)) = (&run, &trace) else {
            let why = [run.as_ref().err(), trace.as_ref().err()]
                .into_iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            checks.push(Check::missing(what, "run.json and atomic.blk.trace", why));
            continue;
        };
        let first = start + ATOMIC_OFFSET_SECTORS;
        let end = first + ATOMIC_WRITES * ATOMIC_SECTORS;
        let dispatched: Vec<_> = blk_write_dispatches(trace)
            .into_iter()
            .filter(|(sector, sectors, _)| *sector < end && sector + sectors > first)
            .collect();
        let whole = dispatched
            .iter()
            .filter(|(sector, sectors, _)| {
                *sectors == ATOMIC_SECTORS
                    && *sector >= first
                    && (sector - first).is_multiple_of(ATOMIC_SECTORS)
            })
            .count() as u64;
        let lettered = dispatched.iter().filter(|(_, _, atomic)| *atomic).count();
        let target = run.target(part);
        let atomic = target.and_then(|t| t.atomic_writes.as_ref());
        let found = format!(
            "program wrote {written:?}{}; run: {}; blk: {} commands over the range, {whole} of one write each ({lettered} with U)",
            errno.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
            match (target, atomic) {
                (None, _) => "no target".to_string(),
                (Some(t), None) => format!("no untorn writes, failed calls {:?}", t.failed_writes),
                (Some(_), Some(a)) => format!(
                    "{} proven, {} not {:?}",
                    a.proven, a.not_proven, a.reasons
                ),
            },
            dispatched.len(),
        );
        if part == "sda3" {
            // Refused at the call: no bio, so nothing to prove; the run names the calls.
            let refused = target.map_or(0, |t| t.failed_writes.values().sum::<u64>());
            let named = target.is_some_and(|t| t.summary.contains("see atomic_writes_lost"));
            checks.push(Check::new(
                what,
                "0 written; run: the refused call named with atomic_writes_lost, no untorn write counted; blk: no command",
                format!("{found}; summary names atomic_writes_lost: {named}"),
                written == Some(0)
                    && refused >= 1
                    && named
                    && atomic.is_none()
                    && dispatched.is_empty(),
            ));
        } else {
            checks.push(Check::new(
                what,
                format!(
                    "{ATOMIC_WRITES} written = run's {ATOMIC_WRITES} proven, 0 not = blk's {ATOMIC_WRITES} commands of one write each"
                ),
                found,
                written == Some(ATOMIC_WRITES)
                    && atomic.is_some_and(|a| a.proven == ATOMIC_WRITES && a.not_proven == 0)
                    && whole == ATOMIC_WRITES
                    && dispatched.len() as u64 == ATOMIC_WRITES,
            ));
        }
    }
    checks
}

/// The stacks over the aligned partitions (dm-linear over sda1, md raid0
/// over sda1 and sda2): statx on the stack is the oracle for check's
/// verdict, and for what the 64 untorn writes must do: each proven one
/// command of its own (the blk tracer's commands on sda agree), or each
/// refused before any I/O, with the finding named by run.
fn stack_checks(results: &Results) -> Vec<Check> {
    let mut checks = Vec::new();
    let names = match results.values("atomic-stack.names") {
        Ok(names) => names,
        Err(why) => {
            checks.push(Check::missing(
                "untorn writes through dm and md",
                "atomic-stack.names",
                why,
            ));
            return checks;
        }
    };
    for (key, level) in [("atomic_dm", "dm"), ("atomic_md", "md")] {
        let Some(stack) = names.get(key) else {
            checks.push(Check::missing(
                format!("untorn writes through {level}"),
                key,
                "not created".to_string(),
            ));
            continue;
        };
        let statx = statx_units(results, stack);
        let offers = statx.is_some_and(|(_, max)| max >= ATOMIC_SECTORS * 512);
        let audit = results.audit(&format!("{stack}.check.json"));
        let lost: Vec<String> = match &audit {
            Ok(audit) => audit
                .diagnoses
                .iter()
                .filter(|d| d.is_on(stack))
                .filter_map(|d| d.atomic_writes_lost())
                .map(|e| format!("{} offered {}", e.level, e.offered_unit_max_bytes))
                .collect(),
            Err(why) => vec![format!("no audit: {why}")],
        };
        // The members offer UNIT_MIN..UNIT_MAX: a stack offering less lost some.
        let reduced = statx.is_none_or(|(_, max)| max < UNIT_MAX);
        checks.push(Check::new(
            format!("untorn writes: {level} {stack}: statx = check's verdict"),
            "atomic_writes_lost exactly when statx offers less than the members' 4 KiB..64 KiB",
            format!("statx {statx:?}; findings {lost:?}"),
            audit.is_ok()
                && statx.is_some()
                && reduced != lost.is_empty()
                && lost.iter().all(|l| l.starts_with(level)),
        ));
        let what = format!("untorn writes under run on {level} {stack}: each proven or named");
        let (written, errno, _) = atomic_outcome(results, stack);
        let report = results.report(&format!("{stack}.atomic.run.json"));
        let run = report.as_ref().map_err(Clone::clone).and_then(|report| {
            report
                .run
                .as_ref()
                .ok_or_else(|| "the report has no run section".to_string())
        });
        let trace = results.text(&format!("{stack}.atomic.blk.trace"));
        let (Ok(run), Ok(trace)) = (&run, &trace) else {
            let why = [run.as_ref().err(), trace.as_ref().err()]
                .into_iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            checks.push(Check::missing(what, "run.json and the blk trace", why));
            continue;
        };
        // Superblock and metadata writes are smaller than one untorn write.
        let data: Vec<_> = blk_write_dispatches(trace)
            .into_iter()
            .filter(|(_, sectors, _)| *sectors >= ATOMIC_SECTORS)
            .collect();
        let whole = data
            .iter()
            .filter(|(_, sectors, _)| *sectors == ATOMIC_SECTORS)
            .count() as u64;
        let target = run.target(stack);
        let atomic = target.and_then(|t| t.atomic_writes.as_ref());
        let found = format!(
            "program wrote {written:?}{}; run: {}; blk on sda: {} data commands, {whole} of one write",
            errno.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
            match (target, atomic) {
                (None, _) => "no target".to_string(),
                (Some(t), None) => format!(
                    "no untorn writes, failed calls {:?}, names the finding: {}",
                    t.failed_writes,
                    t.summary.contains("see atomic_writes_lost")
                ),
                (Some(_), Some(a)) => format!("{} proven, {} not {:?}", a.proven, a.not_proven, a.reasons),
            },
            data.len(),
        );
        if offers {
            checks.push(Check::new(
                what,
                format!("{ATOMIC_WRITES} written = run's {ATOMIC_WRITES} proven = blk's {ATOMIC_WRITES} commands of one write"),
                found,
                written == Some(ATOMIC_WRITES)
                    && atomic.is_some_and(|a| a.proven == ATOMIC_WRITES && a.not_proven == 0)
                    && whole == ATOMIC_WRITES
                    && data.len() as u64 == ATOMIC_WRITES,
            ));
        } else {
            let named = target.is_some_and(|t| t.summary.contains("see atomic_writes_lost"));
            checks.push(Check::new(
                what,
                "0 written, refused; run names atomic_writes_lost; blk: no data command",
                found,
                written == Some(0)
                    && matches!(errno.as_deref(), Some("EOPNOTSUPP" | "EINVAL"))
                    && named
                    && data.is_empty(),
            ));
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::blk_write_dispatches;

    #[test]
    fn blk_dispatch_lines_give_sector_size_and_the_atomic_letter() {
        let trace = "# tracer: blk\n\
   guest-io-91 [000] ..... 12.5: 8,0 D WSU 2184 + 32 [guest-io]\n\
   guest-io-91 [000] ..... 12.6: 8,0 C WSU 2184 + 32 [0]\n\
   kworker-1 [001] ..... 12.7: 8,0 D WS 4096 + 8 [kworker]\n\
   kworker-1 [001] ..... 12.8: 8,0 D R 4096 + 8 [kworker]\n";
        assert_eq!(
            blk_write_dispatches(trace),
            vec![(2184, 32, true), (4096, 8, false)]
        );
    }
}
