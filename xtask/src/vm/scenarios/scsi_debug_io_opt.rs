//! `scsi-debug-io-opt.sh`: scsi_debug with 4 KiB physical blocks and a
//! 128 KiB optimal I/O size, one partition aligned to each; and untorn
//! writes (#50): where the guest's scsi_debug has atomic write parameters,
//! statx and pwritev2(RWF_ATOMIC) on each partition against check's
//! `atomic_writes_lost` verdicts; where it has none, check must say the
//! kernel offers none and find nothing.

use std::time::Duration;

use super::{expect_geometry, json_text, Scenario, WHAT_IF_TOLERANCE};
use crate::vm::check::{diagnoses_on, expect_diagnoses, expect_no_warning, Check, Results};
use crate::vm::kernel::Line;
use crate::vm::report::{Audit, Code, Findings};

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

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
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
    checks.extend(max_sectors_checks(results, line));
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
    checks.push(recreated_check(results));
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

/// The fix applied: sda3 recreated at 206856 keeps untorn writes, as statx,
/// check (no `atomic_writes_lost`) and run (64 proven) all say.
fn recreated_check(results: &Results) -> Check {
    let what = "untorn writes: sda3 recreated at 206856 keeps them (statx, check, run)";
    let expected = format!(
        "start {NEXT_ALIGNED_START}; statx ({UNIT_MIN}, {UNIT_MAX}); no atomic_writes_lost on sda3; {ATOMIC_WRITES} written = run's {ATOMIC_WRITES} proven"
    );
    let start = number(results, "sda3-fixed.geometry", "start");
    let statx = statx_units(results, "sda3-fixed");
    let (written, errno, _) = atomic_outcome(results, "sda3-fixed");
    let lost = results.audit("sda3-fixed.check.json").map(|audit| {
        audit
            .diagnoses
            .iter()
            .filter(|d| d.is_on("sda3"))
            .filter(|d| d.atomic_writes_lost().is_some())
            .count()
    });
    let report = results.report("sda3-fixed.atomic.run.json");
    let proven = report.as_ref().ok().and_then(|report| {
        let target = report.run.as_ref()?.target("sda3")?;
        target
            .atomic_writes
            .as_ref()
            .map(|a| (a.proven, a.not_proven))
    });
    Check::new(
        what,
        expected,
        format!(
            "start {start:?}; statx {statx:?}; atomic_writes_lost on sda3: {lost:?}; written {written:?}{}; run proven/not {proven:?}",
            errno.map(|e| format!(" ({e})")).unwrap_or_default()
        ),
        start == Some(NEXT_ALIGNED_START)
            && statx == Some((UNIT_MIN, UNIT_MAX))
            && lost == Ok(0)
            && written == Some(ATOMIC_WRITES)
            && proven == Some((ATOMIC_WRITES, 0)),
    )
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

/// The guest's own reading of sda's queue before the runs (`maxsec.values`,
/// written by the script with `cat`, not by iosplit-trace).
#[derive(Clone, Copy)]
struct MaxSectorsReading {
    release: (u32, u32),
    max_kb: u64,
    hw_kb: u64,
    io_opt: u64,
}

fn max_sectors_reading(results: &Results) -> Result<MaxSectorsReading, String> {
    let file = "maxsec.values";
    let release = results.value(file, "osrelease")?;
    let version = release_version(&release).ok_or(format!("osrelease {release:?}"))?;
    let read =
        |key: &str| number(results, file, key).ok_or_else(|| format!("{file} has no number {key}"));
    Ok(MaxSectorsReading {
        release: version,
        max_kb: read("max_sectors_kb")?,
        hw_kb: read("max_hw_sectors_kb")?,
        io_opt: read("optimal_io_size")?,
    })
}

/// "6.1.0-28-amd64" -> (6, 1); "7.3.4+deb13-amd64" -> (7, 3).
fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The block layer's default cap in KiB: 2560 sectors (BLK_DEF_MAX_SECTORS,
/// include/linux/blkdev.h) until 9b8b84879d4a made it 8192 in 6.17.
fn default_cap_kb(release: (u32, u32)) -> u64 {
    if release >= (6, 17) {
        4096
    } else {
        1280
    }
}

/// What the kernel's rules, read from its source, make of these numbers:
/// the source of the cap (the expectation `check` must meet), written apart
/// from the tracer's own classifier.
fn expected_source(reading: &MaxSectorsReading) -> &'static str {
    let MaxSectorsReading {
        release,
        max_kb,
        hw_kb,
        io_opt,
    } = *reading;
    let cap = default_cap_kb(release);
    // sd's rw_max before 6.11 takes any valid io_opt; blk_validate_limits
    // since (a23634644afc, 37105615f731) only one above the default cap.
    let io_opt_rule = io_opt != 0
        && io_opt.is_multiple_of(1024)
        && max_kb == io_opt / 1024
        && (release < (6, 11) || io_opt / 1024 > cap);
    if max_kb == 0 {
        "user_or_unknown"
    } else if max_kb == hw_kb {
        "hardware"
    } else if io_opt_rule {
        "optimal_io_size"
    } else if max_kb == cap && max_kb < hw_kb {
        "kernel_default_cap"
    } else {
        "user_or_unknown"
    }
}

/// The cap these kernel rules give this disk: its 128 KiB io_opt before
/// 6.11 (sd), the default cap since; never above the hardware limit.
fn predicted_max_kb(reading: &MaxSectorsReading) -> u64 {
    let rule = if reading.release < (6, 11) && reading.io_opt >= 4096 {
        reading.io_opt / 1024
    } else {
        default_cap_kb(reading.release)
    };
    rule.min(reading.hw_kb)
}

/// `max_sectors_source` (#49): check's source against the guest's numbers,
/// the cap against the kernel's rule, and the split finding's what-if
/// against 1 MiB writes under the raise it proposes.
fn max_sectors_checks(results: &Results, line: &Line) -> Vec<Check> {
    let what = format!(
        "max_sectors ({}): check's source = the guest's numbers",
        line.name
    );
    let reading = match max_sectors_reading(results) {
        Ok(reading) => reading,
        Err(why) => return vec![Check::missing(what, "maxsec.values", why)],
    };
    let mut checks = Vec::new();
    let expected = expected_source(&reading);
    let numbers = format!(
        "{}.{}: max_sectors_kb {} hw {} io_opt {}",
        reading.release.0, reading.release.1, reading.max_kb, reading.hw_kb, reading.io_opt
    );
    let audit = results.audit("check.json");
    let geometry = audit
        .as_ref()
        .ok()
        .and_then(|audit| audit.device("sda"))
        .map(|sda| &sda.geometry);
    let found = geometry.map(|geometry| {
        (
            [
                geometry.max_sectors_kb,
                geometry.max_hw_sectors_kb,
                geometry.optimal_io_size,
            ],
            geometry.max_sectors_source.clone(),
        )
    });
    let show = |value: Option<u64>| value.map_or("?".into(), |v| v.to_string());
    checks.push(Check::new(
        what,
        format!(
            "{numbers} -> {}/{}/{} {expected}",
            reading.max_kb, reading.hw_kb, reading.io_opt
        ),
        match &found {
            Some(([max_kb, hw_kb, io_opt], source)) => format!(
                "{}/{}/{} {}",
                show(*max_kb),
                show(*hw_kb),
                show(*io_opt),
                source.as_deref().unwrap_or("no max_sectors_source")
            ),
            None => format!(
                "no sda in check.json: {}",
                audit.as_ref().err().cloned().unwrap_or_default()
            ),
        },
        found.as_ref().is_some_and(|(numbers, source)| {
            *numbers
                == [
                    Some(reading.max_kb),
                    Some(reading.hw_kb),
                    Some(reading.io_opt),
                ]
                && source.as_deref() == Some(expected)
        }),
    ));
    let predicted = predicted_max_kb(&reading);
    checks.push(Check::new(
        format!(
            "max_sectors ({}): the cap is the kernel rule's for io_opt 128 KiB",
            line.name
        ),
        format!(
            "{predicted} KiB ({})",
            if reading.release < (6, 11) {
                "sd's rw_max: io_opt, before 6.11"
            } else {
                "blk_validate_limits: the default cap, io_opt being below it"
            }
        ),
        format!("{} KiB", reading.max_kb),
        reading.max_kb == predicted,
    ));
    let text = results.text("check.txt").unwrap_or_default();
    let shown = text
        .lines()
        .find(|l| l.trim_start().starts_with("max_sectors "))
        .unwrap_or("no max_sectors line")
        .trim()
        .to_string();
    checks.push(Check::new(
        format!("max_sectors ({}): check's text names the source", line.name),
        format!(
            "`max_sectors {} (...` naming {expected}",
            size_words(reading.max_kb)
        ),
        shown.clone(),
        shown.starts_with(&format!("max_sectors {} ", size_words(reading.max_kb)))
            && shown.contains(source_words(expected)),
    ));
    // The cap the runs saw: this kernel's, or 128 KiB set by hand where
    // this kernel's holds a 1 MiB write whole.
    let run_reading = MaxSectorsReading {
        max_kb: number(results, "maxsec.values", "max_sectors_kb_run").unwrap_or(0),
        ..reading
    };
    let set_by_hand = number(results, "maxsec.values", "user_set");
    let run_source = expected_source(&run_reading);
    checks.push(Check::new(
        format!("max_sectors ({}): the runs' cap", line.name),
        "this kernel's below 1 MiB, else 128 KiB set by hand".to_string(),
        format!(
            "{} KiB ({}, source {run_source})",
            run_reading.max_kb,
            set_by_hand.map_or("the kernel's", |_| "set by hand")
        ),
        match set_by_hand {
            Some(kb) => reading.max_kb >= 1024 && run_reading.max_kb == kb,
            None => reading.max_kb < 1024 && run_reading.max_kb == reading.max_kb,
        },
    ));
    checks.extend(max_sectors_fix_checks(
        results,
        line,
        &run_reading,
        run_source,
    ));
    checks
}

/// `exact_size` of a KiB count as check prints it.
fn size_words(kb: u64) -> String {
    if kb >= 1024 && kb.is_multiple_of(1024) {
        format!("{} MiB", kb / 1024)
    } else {
        format!("{kb} KiB")
    }
}

/// A phrase check's words for each source contain.
fn source_words(source: &str) -> &'static str {
    match source {
        "hardware" => "the hardware's own limit",
        "kernel_default_cap" => "the block layer's default cap",
        "optimal_io_size" => "the device's optimal I/O size",
        _ => "not a kernel default",
    }
}

/// The 1 MiB writes to sda2 before and after the raise: where the cap cuts
/// them, a `max_sectors` split finding naming the source, whose what-if the
/// second run meets; where it does not, no such finding and nothing to
/// raise. Then the raise across sd's rescan, and the cap put back.
fn max_sectors_fix_checks(
    results: &Results,
    line: &Line,
    reading: &MaxSectorsReading,
    expected_source: &str,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let what = format!(
        "max_sectors ({}): 1 MiB writes to sda2, what-if vs the raise",
        line.name
    );
    let loaded = (|| -> Result<_, String> {
        Ok((
            results.report("maxsec.run.json")?,
            results.report("maxsec-fixed.run.json")?,
        ))
    })();
    let (before, after) = match loaded {
        Ok(loaded) => loaded,
        Err(why) => return vec![Check::missing(what, "both run reports", why)],
    };
    let commands = |report: &crate::vm::report::Report| {
        report
            .device("sda2")
            .and_then(|entry| entry.writes())
            .map(|writes| writes.commands)
    };
    let (now, fixed) = (commands(&before), commands(&after));
    let raised = number(results, "maxsec.values", "max_sectors_kb_raised");
    let split = before
        .diagnoses
        .iter()
        .find(|d| d.is_on("sda2") && d.code() == Code::SplitAmplification);
    let evidence = split.and_then(|d| d.split_amplification());
    if reading.max_kb < 1024 {
        let what_if = split.and_then(|d| d.what_if());
        let predicted = what_if.map(|w| w.commands_after_fix);
        let proposed = evidence.and_then(|e| e.proposed_max_sectors_kb);
        let within = matches!((predicted, fixed), (Some(p), Some(m))
            if p > 0 && (m as f64 - p as f64).abs() <= WHAT_IF_TOLERANCE * p as f64);
        checks.push(Check::new(
            what,
            format!(
                "split_amplification cause max_sectors, source {expected_source}; raised to its proposal; commands within {:.0}% of commands_after_fix",
                WHAT_IF_TOLERANCE * 100.0
            ),
            format!(
                "cause {}, source {}, proposed {proposed:?}, raised to {raised:?}; commands {now:?} -> predicted {predicted:?} / measured {fixed:?}",
                evidence.map_or("none", |e| e.cause.as_str()),
                evidence.and_then(|e| e.max_sectors_source.as_deref()).unwrap_or("none"),
            ),
            evidence.is_some_and(|e| e.cause == "max_sectors")
                && evidence.and_then(|e| e.max_sectors_source.as_deref()) == Some(expected_source)
                && proposed.is_some()
                && proposed == raised
                && what_if.is_some_and(|w| Some(w.commands_now) == now)
                && within,
        ));
        let fix = split.map_or("", |d| d.fix.as_str());
        let command = format!(
            "echo {} > /sys/block/sda/queue/max_sectors_kb",
            proposed.unwrap_or(0)
        );
        let persistent = !matches!(expected_source, "optimal_io_size" | "kernel_default_cap")
            || fix.contains("KERNEL==\"sda\", ATTR{queue/max_sectors_kb}=");
        checks.push(Check::new(
            format!(
                "max_sectors ({}): the fix says how and how to keep it",
                line.name
            ),
            format!("`{command}`; a udev rule where the kernel set the cap"),
            if fix.is_empty() {
                "no fix".to_string()
            } else {
                fix.to_string()
            },
            fix.contains(&command)
                && split.is_some_and(|d| d.explanation.contains(source_words(expected_source)))
                && persistent,
        ));
    } else {
        checks.push(Check::new(
            what,
            "no max_sectors split on sda2 (the cap holds 1 MiB); the same commands after",
            format!(
                "{}; commands {now:?} -> {fixed:?}; raised to {raised:?}",
                evidence.map_or("no split_amplification".to_string(), |e| format!(
                    "split_amplification cause {}",
                    e.cause
                )),
            ),
            evidence.is_none_or(|e| e.cause != "max_sectors") && now.is_some() && now == fixed,
        ));
    }
    let values = results.values("maxsec.values").unwrap_or_default();
    let value = |key: &str| values.get(key).cloned().unwrap_or_else(|| "?".into());
    checks.push(Check::new(
        format!(
            "max_sectors ({}): a raise outlives sd's rescan; the cap put back",
            line.name
        ),
        format!(
            "after rescan {}; restored {}",
            value("max_sectors_kb_raised"),
            value("max_sectors_kb")
        ),
        format!(
            "after rescan {} (rc {}); restored {}; {}",
            value("max_sectors_kb_after_rescan"),
            value("rescan_rc"),
            value("max_sectors_kb_restored"),
            json_text(&values),
        ),
        value("max_sectors_kb_after_rescan") == value("max_sectors_kb_raised")
            && value("max_sectors_kb_restored") == value("max_sectors_kb"),
    ));
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

#[cfg(test)]
mod max_sectors_tests {
    use super::*;

    fn reading(release: (u32, u32), max_kb: u64, io_opt: u64) -> MaxSectorsReading {
        MaxSectorsReading {
            release,
            max_kb,
            hw_kb: 32767,
            io_opt,
        }
    }

    /// The expectation the VM asserts check against, on the scenario's
    /// numbers and their edges.
    #[test]
    fn expected_sources_follow_the_kernel_rules() {
        assert_eq!(release_version("6.1.0-28-amd64"), Some((6, 1)));
        assert_eq!(release_version("7.3.4+deb13-amd64"), Some((7, 3)));
        assert_eq!(
            expected_source(&reading((6, 1), 128, 131072)),
            "optimal_io_size"
        );
        assert_eq!(
            expected_source(&reading((6, 12), 128, 131072)),
            "user_or_unknown"
        );
        assert_eq!(
            expected_source(&reading((6, 12), 1280, 131072)),
            "kernel_default_cap"
        );
        assert_eq!(
            expected_source(&reading((7, 3), 4096, 131072)),
            "kernel_default_cap"
        );
        assert_eq!(
            expected_source(&reading((7, 3), 1280, 131072)),
            "user_or_unknown"
        );
        assert_eq!(expected_source(&reading((6, 1), 32767, 131072)), "hardware");
        assert_eq!(expected_source(&reading((6, 1), 128, 0)), "user_or_unknown");
        assert_eq!(predicted_max_kb(&reading((6, 1), 0, 131072)), 128);
        assert_eq!(predicted_max_kb(&reading((6, 12), 0, 131072)), 1280);
        assert_eq!(predicted_max_kb(&reading((7, 3), 0, 131072)), 4096);
        assert_eq!(size_words(4096), "4 MiB");
        assert_eq!(size_words(1280), "1280 KiB");
    }
}
