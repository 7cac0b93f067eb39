//! Debian's `blkparse` (1.2.0) and `btt` (2.09) as an oracle on blktrace's
//! binary files (#47): both read one device's `PREFIX.blktrace.N`, and so does
//! `iosplit-trace analyze --from blktrace`; the rules below say where the
//! three must agree. Used by blk-oracle's evaluator in the VM matrix and, by
//! `#[path]`, by `tracer/tests/corpus_btt.rs` on the committed captures, so
//! both hold the same rules. Only std and serde_json: both crates have them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One device's capture, read by the three tools.
pub struct Readings {
    /// `blkparse -i PREFIX`: its event lines and its summary.
    pub blkparse: String,
    /// `btt -i` on blkparse's binary dump of the same files.
    pub btt: String,
    /// `iosplit-trace analyze --from blktrace --json`.
    pub ours: Value,
}

/// Runs blkparse, btt and `tracer analyze` on `dir/prefix.blktrace.N`;
/// `geometry` is the traced machine's `check --json`.
pub fn read(
    dir: &Path,
    prefix: &str,
    tracer: &Path,
    geometry: Option<&Path>,
) -> Result<Readings, String> {
    // btt leaves per-device `*_iops_fp.dat` files in its working directory:
    // it runs in a scratch directory of its own, with blkparse's dump.
    let scratch = std::env::temp_dir().join(format!(
        "btt-oracle-{}-{prefix}-{}",
        std::process::id(),
        unique()
    ));
    std::fs::create_dir_all(&scratch)
        .map_err(|err| format!("cannot create {}: {err}", scratch.display()))?;
    let dump = scratch.join("dump.bin");
    // Text on stdout and the binary dump btt reads, in one pass. One file
    // is read from stdin: blkparse's file mode refuses a `.blktrace.0`
    // whose records name another CPU (a capture renamed by whoever
    // published it), and reads the same stream either way.
    let mut blkparse = Command::new("blkparse");
    blkparse_input(&mut blkparse, dir, prefix)?;
    blkparse.arg("-d").arg(&dump);
    let blkparse = output(&mut blkparse);
    let btt = blkparse.is_ok().then(|| {
        output(
            Command::new("btt")
                .arg("-i")
                .arg(&dump)
                .current_dir(&scratch),
        )
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let blkparse = blkparse?;
    let btt = btt.expect("run when blkparse succeeded")?;
    let mut analyze = Command::new(tracer);
    analyze.args(["analyze", "--from", "blktrace", "--json"]);
    if let Some(geometry) = geometry {
        analyze.arg("--geometry").arg(geometry);
    }
    let ours = output(analyze.arg(dir.join(format!("{prefix}.blktrace.0"))))?;
    let ours = serde_json::from_str(&ours)
        .map_err(|err| format!("analyze --from blktrace wrote no JSON: {err}"))?;
    Ok(Readings {
        blkparse,
        btt,
        ours,
    })
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn output(command: &mut Command) -> Result<String, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let out = command
        .output()
        .map_err(|err| format!("cannot run {program} (Debian package blktrace): {err}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `*.blktrace.N` files in `dir` by prefix (one device each).
#[allow(dead_code)] // tracer/tests/corpus_btt.rs lists its captures' devices
pub fn prefixes(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name().into_string().ok()?;
                    let (prefix, cpu) = name.rsplit_once(".blktrace.")?;
                    cpu.parse::<u32>().ok()?;
                    Some(prefix.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.dedup();
    found
}

/// Copies `dir/prefix.blktrace.N` into a directory of their own (the
/// importer reads one device's files; a results directory holds several).
pub fn isolate(dir: &Path, prefix: &str, into: &Path) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(into).map_err(|err| format!("{}: {err}", into.display()))?;
    let entries = std::fs::read_dir(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name
            .strip_prefix(&format!("{prefix}.blktrace."))
            .is_some_and(|cpu| cpu.parse::<u32>().is_ok())
        {
            std::fs::copy(entry.path(), into.join(&name))
                .map_err(|err| format!("cannot copy {name}: {err}"))?;
        }
    }
    Ok(into.to_path_buf())
}

/// blkparse's summary of one device, reads and writes added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub queued: u64,
    pub dispatched: u64,
    pub requeued: u64,
    pub completed: u64,
    pub merged: u64,
}

/// blkparse's `Total (dev):` block, or the sum of its `CPUn (dev):` blocks:
/// it prints a Total only when the trace has more than one CPU.
pub fn summary(text: &str) -> Result<Summary, String> {
    let mut cpus = Summary::default();
    let mut total = None;
    let mut current: Option<(bool, Summary)> = None;
    let mut finish = |block: Option<(bool, Summary)>, cpus: &mut Summary| {
        if let Some((is_total, counts)) = block {
            if is_total {
                total = Some(counts);
            } else {
                cpus.queued += counts.queued;
                cpus.dispatched += counts.dispatched;
                cpus.requeued += counts.requeued;
                cpus.completed += counts.completed;
                cpus.merged += counts.merged;
            }
        }
    };
    let mut blocks = 0;
    for line in text.lines() {
        let trimmed = line.trim();
        let starts_block = (trimmed.starts_with("CPU") || trimmed.starts_with("Total ("))
            && trimmed.ends_with("):");
        if starts_block {
            finish(current.take(), &mut cpus);
            current = Some((trimmed.starts_with("Total"), Summary::default()));
            blocks += 1;
            continue;
        }
        let Some((_, counts)) = current.as_mut() else {
            continue;
        };
        if trimmed.is_empty() {
            finish(current.take(), &mut cpus);
            continue;
        }
        // " Reads Queued:   1,  1024KiB\t Writes Queued:   134,  4160KiB"
        for half in line.split('\t') {
            let Some((label, value)) = half.split_once(':') else {
                continue;
            };
            let number = value
                .split(',')
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
            let label = label.trim();
            let field = match label {
                "Reads Queued" | "Writes Queued" => &mut counts.queued,
                "Read Dispatches" | "Write Dispatches" => &mut counts.dispatched,
                "Reads Requeued" | "Writes Requeued" => &mut counts.requeued,
                "Reads Completed" | "Writes Completed" => &mut counts.completed,
                "Read Merges" | "Write Merges" => &mut counts.merged,
                _ => continue,
            };
            *field += number;
        }
    }
    finish(current.take(), &mut cpus);
    if blocks == 0 {
        return Err("blkparse printed no summary".to_string());
    }
    Ok(total.unwrap_or(cpus))
}

/// blkparse's event lines by action letter
/// (`254,0  0  1  0.000000000  482  A  WS 67321 + 2048 <- (254,1) 65536`).
pub fn actions(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 6
            || !words[0].contains(',')
            || words[3].parse::<f64>().is_err()
            || words[2].parse::<u64>().is_err()
        {
            continue;
        }
        *counts.entry(words[5].to_string()).or_default() += 1;
    }
    counts
}

/// One row of btt's "All Devices" table, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latency {
    pub min_ns: u64,
    pub max_ns: u64,
    pub n: u64,
}

/// What btt says: Q2C and D2C over all devices, and `#D` per device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Btt {
    pub q2c: Option<Latency>,
    pub d2c: Option<Latency>,
    /// "Device Merge Information": `#D` by device, `(254,  0)` as "254,0".
    pub dispatches: BTreeMap<String, u64>,
}

/// Seconds with 9 decimals, as btt prints them, in nanoseconds.
fn nanoseconds(text: &str) -> Option<u64> {
    let (seconds, fraction) = text.split_once('.')?;
    if fraction.len() != 9 {
        return None;
    }
    Some(seconds.parse::<u64>().ok()? * 1_000_000_000 + fraction.parse::<u64>().ok()?)
}

pub fn btt(text: &str) -> Btt {
    let mut read = Btt::default();
    let mut section = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("==================== ") {
            section = name.trim_end_matches('=').trim();
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match section {
            "All Devices" if words.len() == 5 => {
                let (Some(min_ns), Some(max_ns), Ok(n)) = (
                    nanoseconds(words[1]),
                    nanoseconds(words[3]),
                    words[4].parse::<u64>(),
                ) else {
                    continue;
                };
                // btt files a bio's Q2C under Q2Cdm when it saw the bio
                // remapped (a partition's A): the same measure.
                let slot = match words[0] {
                    "Q2C" | "Q2Cdm" => &mut read.q2c,
                    "D2C" => &mut read.d2c,
                    _ => continue,
                };
                *slot = Some(match *slot {
                    None => Latency { min_ns, max_ns, n },
                    Some(seen) => Latency {
                        min_ns: seen.min_ns.min(min_ns),
                        max_ns: seen.max_ns.max(max_ns),
                        n: seen.n + n,
                    },
                });
            }
            "Device Merge Information" => {
                // " (254,  0) |      133       26     5.1 | ..."
                let Some(rest) = line.trim_start().strip_prefix('(') else {
                    continue;
                };
                let Some((device, rest)) = rest.split_once(')') else {
                    continue;
                };
                let device: String = device.chars().filter(|c| !c.is_whitespace()).collect();
                let columns: Vec<&str> = rest
                    .trim_start_matches(|c: char| c.is_whitespace() || c == '|')
                    .split_whitespace()
                    .collect();
                if let Some(Ok(dispatches)) = columns.get(1).map(|n| n.parse::<u64>()) {
                    read.dispatches.insert(device, dispatches);
                }
            }
            _ => {}
        }
    }
    read
}

/// What the report gives for one measure, over the ops that carry data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ours {
    pub count: u64,
    pub min_us: u64,
    pub max_us: u64,
}

/// The ops btt follows: it drops zero-byte flushes at setup.
const DATA_OPS: [&str; 2] = ["read", "write"];

fn ops(report: &Value) -> impl Iterator<Item = (&str, &Value)> {
    report["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|device| device["measures"]["ops"].as_object().into_iter().flatten())
        .map(|(op, measures)| (op.as_str(), measures))
}

fn sum_ops(report: &Value, wanted: &dyn Fn(&str) -> bool, field: &str) -> u64 {
    ops(report)
        .filter(|(op, _)| wanted(op))
        .map(|(_, measures)| measures[field].as_u64().unwrap_or(0))
        .sum()
}

/// A latency distribution summed over the data ops of every device.
pub fn ours(report: &Value, field: &str) -> Ours {
    let mut summed = Ours::default();
    for (op, measures) in ops(report) {
        let distribution = &measures[field];
        let count = distribution["count"].as_u64().unwrap_or(0);
        if !DATA_OPS.contains(&op) || count == 0 {
            continue;
        }
        let (min, max) = (
            distribution["min"].as_u64().unwrap_or(0),
            distribution["max"].as_u64().unwrap_or(0),
        );
        summed.min_us = if summed.count == 0 {
            min
        } else {
            summed.min_us.min(min)
        };
        summed.max_us = summed.max_us.max(max);
        summed.count += count;
    }
    summed
}

fn event(report: &Value, key: &str) -> u64 {
    report["events"][key].as_u64().unwrap_or(0)
}

/// Our event kinds behind each blktrace action letter (the probe table's
/// letters: M is a bio back merge or a request merge, C either completion).
const LETTERS: [(&str, &[&str]); 8] = [
    ("A", &["remap", "rq_remap"]),
    ("Q", &["queue"]),
    ("X", &["split"]),
    ("M", &["backmerge", "rq_merge"]),
    ("F", &["frontmerge"]),
    ("D", &["issue"]),
    ("C", &["complete", "bio_complete"]),
    ("R", &["requeue"]),
];

/// How many events of `letter` the report counted.
pub fn ours_of_letter(report: &Value, letter: &str) -> u64 {
    LETTERS
        .iter()
        .find(|(seen, _)| *seen == letter)
        .map_or(0, |(_, keys)| {
            keys.iter().map(|key| event(report, key)).sum()
        })
}

/// The letters compared, in order.
pub fn letters() -> impl Iterator<Item = &'static str> {
    LETTERS.iter().map(|(letter, _)| *letter)
}

/// The report's histograms keep 2 significant digits (hdrhistogram: exact
/// below 256 µs, then buckets 2^(log2 v - 7) wide), and its min and max are
/// bucket floors; btt prints the exact nanoseconds. Floor btt's value to
/// microseconds and to the same bucket, then compare.
pub fn bucket_floor(us: u64) -> u64 {
    if us < 256 {
        return us;
    }
    let shift = 63 - us.leading_zeros() - 7;
    (us >> shift) << shift
}

/// One judgement: what, expected (the oracle), found (ours), pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub what: String,
    pub expected: String,
    pub found: String,
    pub pass: bool,
}

fn judged(what: String, expected: String, found: String, pass: bool) -> Judged {
    Judged {
        what,
        expected,
        found,
        pass,
    }
}

/// Every rule on one device's capture. `follows_all`: the workload was made
/// of bios btt 2.09 follows from Q to C (none split), so its Q2C and D2C
/// must cover every bio and command the report measured.
pub fn judge(label: &str, readings: &Readings, follows_all: bool) -> Vec<Judged> {
    let report = &readings.ours;
    let mut out = Vec::new();
    let lines = actions(&readings.blkparse);
    // blkparse's summary: Queued, Dispatches, Requeued, Completed, Merges
    // (reads + writes; M and F both count as merges).
    match summary(&readings.blkparse) {
        Ok(sum) => {
            let merged = ours_of_letter(report, "M") + ours_of_letter(report, "F");
            let found = Summary {
                queued: ours_of_letter(report, "Q"),
                dispatched: ours_of_letter(report, "D"),
                requeued: ours_of_letter(report, "R"),
                completed: ours_of_letter(report, "C"),
                merged,
            };
            let show = |s: Summary| {
                format!(
                    "Q{} D{} R{} C{} M{}",
                    s.queued, s.dispatched, s.requeued, s.completed, s.merged
                )
            };
            out.push(judged(
                format!("{label}: events vs blkparse summary"),
                show(sum),
                show(found),
                sum == found,
            ));
            // A requeued command is dispatched again: commands are the D
            // lines less the R lines (every R is followed by its D).
            let commands = sum_ops(report, &|_| true, "commands");
            let requeues = sum_ops(report, &|_| true, "requeues");
            out.push(judged(
                format!("{label}: commands = D - R"),
                format!(
                    "{} = {} - {}",
                    sum.dispatched.saturating_sub(sum.requeued),
                    sum.dispatched,
                    sum.requeued
                ),
                format!("commands {commands}, requeues {requeues}"),
                commands + sum.requeued == sum.dispatched && requeues == sum.requeued,
            ));
        }
        Err(why) => out.push(judged(
            format!("{label}: events vs blkparse summary"),
            "a summary".into(),
            why,
            false,
        )),
    }
    let expected: Vec<String> = letters()
        .map(|letter| format!("{letter}{}", lines.get(letter).copied().unwrap_or(0)))
        .collect();
    let found: Vec<String> = letters()
        .map(|letter| format!("{letter}{}", ours_of_letter(report, letter)))
        .collect();
    out.push(judged(
        format!("{label}: events vs blkparse lines"),
        expected.join(" "),
        found.join(" "),
        expected == found,
    ));

    let btt = btt(&readings.btt);
    // btt's #D leaves out D lines without data (it drops zero-byte flushes):
    // the data ops' commands and their re-dispatches.
    let data = |op: &str| DATA_OPS.contains(&op);
    let data_ds = sum_ops(report, &data, "commands") + sum_ops(report, &data, "requeues");
    let btt_ds: u64 = btt.dispatches.values().sum();
    out.push(judged(
        format!("{label}: btt #D vs data commands + requeues"),
        format!("#D {btt_ds}"),
        format!("{data_ds}"),
        btt_ds == data_ds,
    ));

    let q2c = ours(report, "queue_to_complete_us");
    let d2c = ours(report, "issue_to_complete_us");
    // btt 2.09 ignores X and needs I or M lines covering a request's bytes,
    // so it follows only bios that were never split: its Q2C and D2C are
    // over a subset of the report's. When it followed every bio (its Q2C N
    // is the report's count), min and max must agree; otherwise btt's range
    // must lie inside the report's.
    let followed_all = btt.q2c.is_some_and(|row| row.n == q2c.count);
    for (name, row, mine) in [("Q2C", btt.q2c, q2c), ("D2C", btt.d2c, d2c)] {
        let what = format!("{label}: btt {name} vs ours (min, max µs)");
        let found = format!(
            "{}..{} over {} ({})",
            mine.min_us,
            mine.max_us,
            mine.count,
            if followed_all {
                "btt followed every bio"
            } else {
                "btt followed a subset"
            }
        );
        let Some(row) = row else {
            out.push(judged(
                what,
                if follows_all {
                    "a btt row".into()
                } else {
                    "no row: btt followed no bio".into()
                },
                found,
                !follows_all,
            ));
            continue;
        };
        let (low, high) = (
            bucket_floor(row.min_ns / 1000),
            bucket_floor(row.max_ns / 1000),
        );
        let near = |a: u64, b: u64| a.abs_diff(b) <= 1;
        let pass = if followed_all {
            near(mine.min_us, low) && near(mine.max_us, high)
        } else {
            !follows_all && row.min_ns / 1000 + 1 >= mine.min_us && high <= mine.max_us + 1
        };
        out.push(judged(
            what,
            format!(
                "{}{:.3}..{:.3} (N {}; as buckets {low}..{high})",
                if followed_all { "" } else { "inside " },
                row.min_ns as f64 / 1000.0,
                row.max_ns as f64 / 1000.0,
                row.n
            ),
            found,
            pass,
        ));
    }
    out
}

/// A capture's per-CPU files, `dir/prefix.blktrace.N`, sorted.
pub fn capture_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| {
                    path.file_name()
                        .and_then(|name| name.to_str())
                        .and_then(|name| name.strip_prefix(&format!("{prefix}.blktrace.")))
                        .is_some_and(|cpu| cpu.parse::<u32>().is_ok())
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Points a blkparse at the capture `dir/prefix.blktrace.*`: one file on
/// stdin (blkparse's file mode refuses a `.blktrace.0` whose records name
/// another CPU), several by directory and prefix.
pub fn blkparse_input(blkparse: &mut Command, dir: &Path, prefix: &str) -> Result<(), String> {
    match capture_files(dir, prefix).as_slice() {
        [one] => {
            let input = std::fs::File::open(one)
                .map_err(|err| format!("cannot open {}: {err}", one.display()))?;
            blkparse.args(["-i", "-"]).stdin(input);
        }
        _ => {
            blkparse.arg("-D").arg(dir).args(["-i", prefix]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "\
254,0    0        1     0.000000000   482  A  WS 67321 + 2048 <- (254,1) 65536
254,0    0        2     0.000525604   482  Q  WS 67321 + 2048 [guest-io]
254,16   0      637     0.082597441    44  D  FN [kworker/0:1H]
CPU0 (vda):
 Reads Queued:           1,     1024KiB\t Writes Queued:         134,     4160KiB
 Read Dispatches:        7,     1024KiB\t Write Dispatches:       21,     4160KiB
 Reads Requeued:         0\t\t Writes Requeued:         2
 Reads Completed:        7,     1024KiB\t Writes Completed:       23,     4160KiB
 Read Merges:            0,        0KiB\t Write Merges:          127,       63KiB
 Read depth:             2        \t Write depth:             4

Throughput (R/W): 21787KiB/s / 88512KiB/s
Events (vda): 579 entries
";

    #[test]
    fn blkparse_cpu_blocks_add_up_without_a_total() {
        let sum = summary(SUMMARY).unwrap();
        assert_eq!(
            sum,
            Summary {
                queued: 135,
                dispatched: 28,
                requeued: 2,
                completed: 30,
                merged: 127
            }
        );
        let lines = actions(SUMMARY);
        assert_eq!((lines["A"], lines["Q"], lines["D"]), (1, 1, 1));
        assert_eq!(lines.values().sum::<u64>(), 3);
    }

    #[test]
    fn btt_rows_and_dispatches_are_read() {
        let text = "\
==================== All Devices ====================

            ALL           MIN           AVG           MAX           N
--------------- ------------- ------------- ------------- -----------
Q2Qdm             0.000004737   0.000575285   0.015666483         136
Q2Cdm             0.000564673   0.000918087   0.001565226         128
D2C               0.000462240   0.000462240   0.000462240         128

==================== Device Merge Information ====================

       DEV |       #Q       #D   Ratio |   BLKmin   BLKavg   BLKmax    Total
---------- | -------- -------- ------- | -------- -------- -------- --------
 (254,  0) |      133       26     5.1 |        1      398      512    10368
 (254, 16) |      127      127     1.0 |       32       64      112     8192
";
        let read = btt(text);
        assert_eq!(
            read.q2c,
            Some(Latency {
                min_ns: 564_673,
                max_ns: 1_565_226,
                n: 128
            })
        );
        assert_eq!(read.d2c.unwrap().max_ns, 462_240);
        assert_eq!(read.dispatches["254,0"], 26);
        assert_eq!(read.dispatches["254,16"], 127);
    }

    #[test]
    fn bucket_floors_match_two_significant_digits() {
        assert_eq!(bucket_floor(255), 255);
        assert_eq!(bucket_floor(257), 256);
        assert_eq!(bucket_floor(1565), 1560);
        assert_eq!(bucket_floor(11_843), 11_840);
    }
}
