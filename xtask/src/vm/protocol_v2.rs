//! blktrace protocol v2 against version 7 (#49), judged on what blk-oracle.sh
//! leaves: one fixed workload captured by Debian sid's blktrace 1.3.0
//! (`BLKTRACESETUP`, so `v7.blktrace.N` holds version 7 records) and by
//! `guest-io blktrace2` (`BLKTRACESETUP2`, Linux 6.19 on: `v2.blktrace.N`,
//! version 8). On the host, `iosplit-trace analyze --from blktrace` reads
//! both and blkparse 1.3.0 (which refuses version 8) reads the first; their
//! counts per action letter must all agree. Kernels before 6.19 must refuse
//! `BLKTRACESETUP2`, and the refusal must be on record.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::check::{parse_values, Check, Results};
use super::kernel::Line;
use super::{blktrace13, btt};

/// `BLK_IO_TRACE_MAGIC` without its version byte.
const MAGIC: u32 = 0x6561_7400;

/// Whole records per protocol version in one per-CPU file (the guest is
/// little-endian): version 7 records are 48 bytes with `pdu_len` at 46,
/// version 8 ones 64 bytes with `pdu_len` at 50, each followed by its payload.
pub fn record_versions(bytes: &[u8]) -> Result<BTreeMap<u8, u64>, String> {
    let mut versions = BTreeMap::new();
    let mut at = 0;
    while at < bytes.len() {
        let word = |offset: usize, width: usize| -> Result<u64, String> {
            let field = bytes
                .get(at + offset..at + offset + width)
                .ok_or_else(|| format!("a record cut short at offset {at}"))?;
            Ok(field
                .iter()
                .rev()
                .fold(0u64, |value, byte| value << 8 | u64::from(*byte)))
        };
        let magic = word(0, 4)? as u32;
        if magic & !0xff != MAGIC {
            return Err(format!("no blktrace magic at offset {at} ({magic:#x})"));
        }
        let version = (magic & 0xff) as u8;
        let (size, pdu_at) = match version {
            7 => (48, 46),
            8 => (64, 50),
            other => return Err(format!("version {other} at offset {at}")),
        };
        let pdu = word(pdu_at, 2)? as usize;
        if at + size + pdu > bytes.len() {
            return Err(format!("a record cut short at offset {at}"));
        }
        *versions.entry(version).or_default() += 1;
        at += size + pdu;
    }
    Ok(versions)
}

/// The action letters the importer skipped, from its note
/// ("28 lines the engine has no use for were skipped: 6 G, 6 I, 6 P, 6 U,
/// 3 process name (pid → command), 1 timestamp (trace start, wall clock)"):
/// the single-letter kinds only, not the notify records.
pub fn skipped_letters(stderr: &str) -> BTreeMap<String, u64> {
    let mut letters = BTreeMap::new();
    for line in stderr.lines() {
        let Some((_, list)) = line.split_once("were skipped:") else {
            continue;
        };
        for item in list.split(", ") {
            let mut words = item.split_whitespace();
            let (Some(count), Some(kind), None) = (words.next(), words.next(), words.next()) else {
                continue;
            };
            let (Ok(count), true) = (
                count.parse::<u64>(),
                kind.chars().all(|c| c.is_ascii_uppercase()),
            ) else {
                continue;
            };
            *letters.entry(kind.to_string()).or_default() += count;
        }
    }
    letters
}

/// The import's count per action letter: its events by blkparse's letters
/// and the letters it skipped. Letters counted zero are left out.
pub fn import_letters(report: &Value, stderr: &str) -> BTreeMap<String, u64> {
    let mut letters = skipped_letters(stderr);
    for letter in btt::letters() {
        let count = btt::ours_of_letter(report, letter);
        if count > 0 {
            *letters.entry(letter.to_string()).or_default() += count;
        }
    }
    letters
}

/// "A4 C14 D14 ..." in letter order.
pub fn show(letters: &BTreeMap<String, u64>) -> String {
    if letters.is_empty() {
        return "nothing".to_string();
    }
    letters
        .iter()
        .map(|(letter, count)| format!("{letter}{count}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Record versions over every file of one capture.
fn capture_versions(dir: &Path, prefix: &str) -> Result<BTreeMap<u8, u64>, String> {
    let found = btt::capture_files(dir, prefix);
    if found.is_empty() {
        return Err(format!("no {prefix}.blktrace.N"));
    }
    let mut versions = BTreeMap::new();
    for file in found {
        let bytes = std::fs::read(&file).map_err(|err| format!("{}: {err}", file.display()))?;
        for (version, count) in
            record_versions(&bytes).map_err(|why| format!("{}: {why}", file.display()))?
        {
            *versions.entry(version).or_default() += count;
        }
    }
    Ok(versions)
}

fn describe_versions(versions: &BTreeMap<u8, u64>) -> String {
    versions
        .iter()
        .map(|(version, count)| format!("{count} of version {version}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `analyze --from blktrace --json` of `dir/prefix.blktrace.*`: per letter.
fn import(tracer: &Path, dir: &Path, prefix: &str) -> Result<BTreeMap<String, u64>, String> {
    let out = Command::new(tracer)
        .args(["analyze", "--from", "blktrace", "--json"])
        .arg(dir.join(format!("{prefix}.blktrace.0")))
        .output()
        .map_err(|err| format!("cannot run {}: {err}", tracer.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("analyze --from blktrace failed: {}", stderr.trim()));
    }
    let report: Value = serde_json::from_slice(&out.stdout)
        .map_err(|err| format!("analyze --from blktrace wrote no JSON: {err}"))?;
    Ok(import_letters(&report, &stderr))
}

/// blkparse 1.3.0's event lines of `dir/prefix.blktrace.*`, per letter. One
/// file is read from stdin, as `btt::read` does.
fn blkparse13(cache: &Path, dir: &Path, prefix: &str) -> Result<BTreeMap<String, u64>, String> {
    let root = blktrace13::ensure(cache)?;
    let mut command = blktrace13::blkparse(&root);
    btt::blkparse_input(&mut command, dir, prefix)?;
    let out = command
        .stderr(Stdio::piped())
        .output()
        .map_err(|err| format!("cannot run blkparse 1.3.0: {err}"))?;
    if !out.status.success() {
        return Err(format!(
            "blkparse 1.3.0 failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(btt::actions(&String::from_utf8_lossy(&out.stdout)))
}

/// Every check on the two captures; `cache` is `target/vm`.
pub fn checks(results: &Results, line: &Line, cache: &Path, tracer: &Path) -> Vec<Check> {
    let mut checks = Vec::new();
    let scratch = std::env::temp_dir().join(format!("xtask-v2-{}", std::process::id()));
    let dir = |prefix: &str| btt::isolate(results.dir, prefix, &scratch.join(prefix));

    // The version 7 capture, by blktrace 1.3.0 itself.
    let what = format!("{} blktrace 1.3.0 capture (BLKTRACESETUP)", line.name);
    let expected = "exit 0, dropped 0, every record version 7";
    let versions = capture_versions(results.dir, "v7");
    checks.push(
        match (
            results.text("blktrace13.out"),
            results.text("blktrace13.rc"),
        ) {
            (Ok(out), Ok(rc)) => {
                let dropped_0 = out
                    .lines()
                    .any(|l| l.trim_start().starts_with("Total:") && l.contains("(dropped 0)"));
                let found = format!(
                    "rc {}, {}, {}",
                    rc.trim(),
                    if dropped_0 {
                        "dropped 0"
                    } else {
                        "dropped not 0"
                    },
                    versions
                        .as_ref()
                        .map_or_else(|why| why.clone(), describe_versions)
                );
                let pass = rc.trim() == "0"
                    && dropped_0
                    && versions
                        .as_ref()
                        .is_ok_and(|v| v.len() == 1 && v.get(&7).is_some_and(|n| *n > 0));
                Check::new(what, expected, found, pass)
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let v7 = dir("v7").and_then(|d| Ok((import(tracer, &d, "v7")?, blkparse13(cache, &d, "v7")?)));
    let what = format!("{} v7 capture: import vs blkparse 1.3.0 lines", line.name);
    let expected_text = "equal per action letter";
    checks.push(match &v7 {
        Ok((ours, blkparse)) => Check::new(
            what,
            format!("{expected_text}: {}", show(blkparse)),
            show(ours),
            ours == blkparse && !blkparse.is_empty(),
        ),
        Err(why) => Check::missing(what, expected_text, why.clone()),
    });

    // The version 2 capture, by guest-io.
    let values = results
        .text("blktrace2.out")
        .map(|text| parse_values(&text));
    let v2_files = btt::capture_files(results.dir, "v2");
    if line.name != "7" {
        let what = format!("{} BLKTRACESETUP2 refused (before 6.19)", line.name);
        let expected = "blktrace2_setup=refused with its errno, exit 3, no v2 files";
        checks.push(match values {
            Ok(values) => {
                let field = |key: &str| values.get(key).map_or("?", String::as_str).to_string();
                let pass = field("blktrace2_setup") == "refused"
                    && values.contains_key("blktrace2_errno")
                    && field("blktrace2_rc") == "3"
                    && v2_files.is_empty();
                Check::new(
                    what,
                    expected,
                    format!(
                        "setup {}, errno {}, rc {}, {} v2 files",
                        field("blktrace2_setup"),
                        field("blktrace2_errno"),
                        field("blktrace2_rc"),
                        v2_files.len()
                    ),
                    pass,
                )
            }
            Err(why) => Check::missing(what, expected, why),
        });
        let _ = std::fs::remove_dir_all(&scratch);
        return checks;
    }
    let what = "7 guest-io blktrace2 capture (BLKTRACESETUP2)".to_string();
    let expected = "setup ok, exit 0, dropped 0, every record version 8";
    let versions = capture_versions(results.dir, "v2");
    checks.push(match values {
        Ok(values) => {
            let field = |key: &str| values.get(key).map_or("?", String::as_str).to_string();
            let pass = field("blktrace2_setup") == "ok"
                && field("blktrace2_rc") == "0"
                && field("blktrace2_dropped") == "0"
                && versions
                    .as_ref()
                    .is_ok_and(|v| v.len() == 1 && v.get(&8).is_some_and(|n| *n > 0));
            Check::new(
                what,
                expected,
                format!(
                    "setup {} ({}), rc {}, dropped {}, {} bytes in {} files: {}",
                    field("blktrace2_setup"),
                    field("blktrace2_name"),
                    field("blktrace2_rc"),
                    field("blktrace2_dropped"),
                    field("blktrace2_bytes"),
                    field("blktrace2_files"),
                    versions
                        .as_ref()
                        .map_or_else(|why| why.clone(), describe_versions)
                ),
                pass,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    let what = "7 v2 capture: import vs v7 import and blkparse 1.3.0 (v7)".to_string();
    let expected_text = "equal per action letter";
    let v2 = dir("v2").and_then(|d| import(tracer, &d, "v2"));
    checks.push(match (&v2, &v7) {
        (Ok(v2), Ok((v7, blkparse))) => Check::new(
            what,
            format!(
                "{expected_text}: v7 import {}; blkparse {}",
                show(v7),
                show(blkparse)
            ),
            format!("v2 import {}", show(v2)),
            v2 == v7 && v2 == blkparse && !v2.is_empty(),
        ),
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected_text, why.clone()),
    });
    // The live report over the v2 capture's window, letter by letter for
    // the events the probes see (blktrace's G, I, P and U have no probe).
    let what = "7 v2 capture: import vs the live report of the same window".to_string();
    let expected_text = "A Q X M F D C R equal";
    checks.push(match (&v2, results.json::<Value>("report-v2.json")) {
        (Ok(v2), Ok(live)) => {
            let probed = |letters: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
                letters
                    .iter()
                    .filter(|(letter, _)| btt::letters().any(|probed| probed == letter.as_str()))
                    .map(|(letter, count)| (letter.clone(), *count))
                    .collect()
            };
            let ours: BTreeMap<String, u64> = btt::letters()
                .map(|letter| (letter.to_string(), btt::ours_of_letter(&live, letter)))
                .filter(|(_, count)| *count > 0)
                .collect();
            let imported = probed(v2);
            Check::new(
                what,
                format!("{expected_text}: v2 import {}", show(&imported)),
                format!("live {}", show(&ours)),
                ours == imported && !ours.is_empty(),
            )
        }
        (Err(why), _) => Check::missing(what, expected_text, why.clone()),
        (_, Err(why)) => Check::missing(what, expected_text, why.to_string()),
    });
    let _ = std::fs::remove_dir_all(&scratch);
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u8, pdu: &[u8]) -> Vec<u8> {
        let size = if version == 7 { 48 } else { 64 };
        let mut out = vec![0u8; size];
        out[..4].copy_from_slice(&(MAGIC | u32::from(version)).to_le_bytes());
        let at = if version == 7 { 46 } else { 50 };
        out[at..at + 2].copy_from_slice(&(pdu.len() as u16).to_le_bytes());
        out.extend_from_slice(pdu);
        out
    }

    #[test]
    fn versions_are_counted_record_by_record() {
        let mut bytes = record(8, b"guest-io\0");
        bytes.extend(record(8, &[]));
        bytes.extend(record(7, &[1; 16]));
        let versions = record_versions(&bytes).unwrap();
        assert_eq!(versions, BTreeMap::from([(7, 1), (8, 2)]));
        assert!(record_versions(&bytes[..bytes.len() - 1]).is_err());
        let mut unknown = record(8, &[]);
        unknown[0] = 9;
        assert!(record_versions(&unknown).unwrap_err().contains("version 9"));
        assert!(record_versions(&[0; 64]).is_err());
    }

    #[test]
    fn skipped_letters_leave_notify_records_out() {
        let stderr = "iosplit-trace: note: read 1 blktrace file: v7.blktrace.0\n\
iosplit-trace: note: 28 lines the engine has no use for were skipped: 6 G, 6 I, 6 P, 6 U, 3 process name (pid → command), 1 timestamp (trace start, wall clock)\n";
        let letters = skipped_letters(stderr);
        assert_eq!(
            show(&letters),
            "G6 I6 P6 U6",
            "process names and timestamps are not actions"
        );
        let report: Value = serde_json::json!({
            "events": {"remap": 4, "queue": 4, "split": 16, "issue": 21, "complete": 20, "bio_complete": 1}
        });
        assert_eq!(
            show(&import_letters(&report, stderr)),
            "A4 C21 D21 G6 I6 P6 Q4 U6 X16"
        );
    }
}
