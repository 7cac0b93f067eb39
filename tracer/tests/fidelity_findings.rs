//! Findings on imported traces, which have no geometry and often no device
//! names: every path a fix tells a user to use exists in the kernel's
//! naming scheme, no number is built on a geometry value never read, and a
//! failure's cause is said no further than the trace shows. Inputs: the
//! corpus of real traces (tests/corpus/, provenance in its MANIFEST.md).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// `analyze --json` of a corpus text trace.
fn analyze(file: &str) -> Value {
    let from = if file.ends_with(".ftrace.txt") {
        "ftrace-blk"
    } else {
        "blkparse"
    };
    let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", from, "--json"])
        .arg(corpus_dir().join(file))
        .output()
        .expect("run analyze");
    assert!(out.status.success(), "{file}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Every text trace of the corpus the importer reads (MANIFEST.md lists
/// the ones it refuses, which tests/corpus_reading.rs holds to that).
fn text_traces() -> Vec<String> {
    let manifest = std::fs::read_to_string(corpus_dir().join("MANIFEST.md")).expect("manifest");
    let refused = |name: &str| {
        let Some(at) = manifest.find(&format!("## {name}")) else {
            return false;
        };
        let entry = &manifest[at + 3..];
        let entry = &entry[..entry.find("\n## ").unwrap_or(entry.len())];
        entry.contains("\n- Refused: ")
    };
    let mut files: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".blkparse.txt") || name.ends_with(".ftrace.txt"))
        .filter(|name| !refused(name))
        .collect();
    files.sort();
    files
}

fn diagnoses(report: &Value) -> Vec<(String, String, String)> {
    report["diagnoses"]
        .as_array()
        .expect("diagnoses")
        .iter()
        .map(|diagnosis| {
            let text = |key: &str| diagnosis[key].as_str().unwrap_or_default().to_string();
            (text("code"), text("explanation"), text("fix"))
        })
        .collect()
}

/// "8:16".
fn is_number(part: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    part.split_once(':')
        .is_some_and(|(major, minor)| digits(major) && digits(minor))
}

/// No `/dev/MAJ:MIN` and no `/sys/block/MAJ:MIN` (neither exists); by
/// number only `/sys/dev/block/MAJ:MIN/…`.
fn check_paths(file: &str, text: &str) {
    let words =
        text.split(|c: char| c.is_whitespace() || matches!(c, '`' | '(' | ')' | ',' | ';' | '\''));
    for path in words.filter(|word| word.starts_with("/dev/") || word.starts_with("/sys/")) {
        let parts: Vec<&str> = path.trim_end_matches('.').split('/').collect();
        match parts.as_slice() {
            ["", "dev", name, ..] | ["", "sys", "block", name, ..] => {
                assert!(!is_number(name), "{file}: {path} in {text}")
            }
            ["", "sys", "dev", "block", number, _, ..] => {
                assert!(is_number(number), "{file}: {path} in {text}")
            }
            _ => panic!("{file}: unexpected path {path} in {text}"),
        }
    }
}

#[test]
fn fixes_on_numbered_devices_name_only_paths_that_exist() {
    let mut checked = 0;
    for file in text_traces() {
        let report = analyze(&file);
        for (_, explanation, fix) in diagnoses(&report) {
            check_paths(&file, &fix);
            check_paths(&file, &explanation);
            checked += 1;
        }
    }
    // The zoned EIO and the discard split at least.
    assert!(checked >= 2, "{checked} diagnoses");
}

/// Geometry values that read 0 when never read, and the forms a number
/// built on one would take in a fix.
#[test]
fn fixes_on_unknown_geometry_build_no_number_on_it() {
    for file in text_traces() {
        let report = analyze(&file);
        for (code, explanation, fix) in diagnoses(&report) {
            for text in [&explanation, &fix] {
                for zero in [
                    "nr_requests 0",
                    " 0 tags",
                    "max_sectors_kb = 0",
                    "max_sectors_kb (0",
                    "max_hw_sectors_kb 0",
                    "max_hw_sectors_kb is 0",
                    "max_segments (0)",
                    "max_segments = 0",
                    "at most 0 ",
                    "0-byte physical",
                    "discard_granularity (0",
                    "to 0 bytes",
                ] {
                    assert!(!text.contains(zero), "{file} {code}: {zero:?} in {text}");
                }
            }
            let words: Vec<&str> = fix.split_whitespace().collect();
            assert!(
                !words
                    .windows(3)
                    .any(|w| w[0] == "echo" && w[1].parse::<u64>().is_ok() && w[2] == ">"),
                "{file} {code}: a number to write, on a device of unknown geometry: {fix}"
            );
        }
    }
}

/// Kawasaki's zoned null_blk (MANIFEST.md): fio's writes to one zone
/// dispatched out of order, the zone refusing the one off its write
/// pointer with EIO. The finding must not call it the device's or the
/// path's, and must name the zone write order.
#[test]
fn a_zoned_eio_is_not_called_a_device_or_path_problem() {
    let report = analyze("kawasaki-zoned-nullb-eio.blkparse.txt");
    let found = diagnoses(&report);
    let (_, explanation, fix) = found
        .iter()
        .find(|(code, _, _)| code == "io_errors")
        .expect("io_errors");
    assert!(
        !explanation.contains("this is a device or path problem"),
        "{explanation}"
    );
    assert!(
        explanation.contains("zone's write pointer")
            && explanation.contains("dispatched out of order by the host"),
        "{explanation}"
    );
    assert!(
        fix.contains("cat /sys/dev/block/251:0/queue/zoned"),
        "{fix}"
    );
    assert!(!fix.contains("/dev/251:0"), "{fix}");
}
