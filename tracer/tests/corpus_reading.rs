//! Every corpus trace (tests/corpus/) read twice: by the importer and the
//! engine, and by an independent reading written here from blkparse's and
//! the `blk` tracer's printing rules (the awk an expert runs: count each
//! action letter per device). The two must agree on every file, and where
//! a trace carries blkparse's own summary blocks, the report must say
//! whether they agree and, where not, why (MANIFEST.md must call the file
//! an excerpt). A new file is checked without anyone writing expectations.
//! A file the importer refuses must be listed in MANIFEST.md as refused,
//! with the words of the one-line refusal.

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The `--from` a corpus file's name says.
fn format_of(name: &str) -> Option<&'static str> {
    if name.ends_with(".blkparse.txt") {
        Some("blkparse")
    } else if name.ends_with(".ftrace.txt") {
        Some("ftrace-blk")
    } else {
        None
    }
}

/// The file's MANIFEST.md entry: from its `## name` heading to the next.
fn manifest_entry<'a>(manifest: &'a str, name: &str) -> Option<&'a str> {
    let heading = format!("## {name}");
    let start = manifest.find(&heading)?;
    let rest = &manifest[start + heading.len()..];
    Some(&rest[..rest.find("\n## ").unwrap_or(rest.len())])
}

/// Action letters per device, as blkparse prints them: which report event
/// counts each one.
const ACTIONS: &[(&str, &[&str])] = &[
    ("Q", &["queue"]),
    ("X", &["split"]),
    ("A", &["remap", "rq_remap"]),
    ("M", &["backmerge", "rq_merge"]),
    ("F", &["frontmerge"]),
    ("D", &["issue"]),
    ("C", &["complete", "bio_complete"]),
    ("R", &["requeue"]),
];

/// One event line's device, action and what follows the action, found the
/// way a reader finds them: blkparse's line starts `maj,min cpu seq time
/// pid action`; the `blk` tracer's has `time: maj,min action` somewhere
/// after the task. A custom prefix (a wall clock stamp) before either is
/// looked past.
fn event_words(format: &str, line: &str) -> Option<(String, String, Vec<String>)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let is_dev = |w: &str| {
        w.split_once(',').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
    };
    let at = match format {
        "blkparse" => (0..words.len()).find(|&i| {
            is_dev(words[i])
                && words.get(i + 3).is_some_and(|t| t.contains('.'))
                && words.get(i + 5).is_some()
        })?,
        _ => (1..words.len()).find(|&i| is_dev(words[i]) && words[i - 1].ends_with(':'))?,
    };
    let dev = words[at].replace(',', ":");
    // A tracepoint's own line: `block_rq_issue: 259,0 WS 16384 () 768 + 32`.
    if let Some(name) = at
        .checked_sub(1)
        .and_then(|i| words[i].strip_prefix("block_"))
    {
        let letter = match name.trim_end_matches(':') {
            "bio_queue" => "Q",
            "split" => "X",
            "bio_remap" | "rq_remap" => "A",
            "bio_backmerge" => "M",
            "bio_frontmerge" => "F",
            "rq_issue" => "D",
            "rq_complete" | "bio_complete" => "C",
            "rq_requeue" => "R",
            _ => "-",
        };
        let rest = words[at + 1..].iter().map(|w| w.to_string()).collect();
        return Some((dev, letter.to_owned(), rest));
    }
    let action_at = if format == "blkparse" { at + 5 } else { at + 1 };
    let action = words.get(action_at)?.to_string();
    let rest = words[action_at + 1..]
        .iter()
        .map(|w| w.to_string())
        .collect();
    Some((dev, action, rest))
}

/// A SCSI passthrough command, which blkparse prints with a byte count or
/// a CDB in parentheses and no `sector + n` (`D R 4 [dmraid]`, `C R [0]`);
/// a completion's bare number is its sector (`C WFS 575480360 [0]`), and
/// an empty flush (`D FN [kworker]`) is block I/O.
fn passthrough(action: &str, rest: &[String]) -> bool {
    let rwbs = rest.first().map_or("", String::as_str);
    if rest.iter().any(|w| matches!(w.as_str(), "+" | "/" | "<-")) || rwbs.starts_with('F') {
        return false;
    }
    let first = rest.get(1).map_or("", String::as_str);
    match action {
        "C" | "R" => first.starts_with('(') || first.starts_with('['),
        _ => {
            first.starts_with('(')
                || (!first.is_empty() && first.bytes().all(|c| c.is_ascii_digit()))
        }
    }
}

/// The independent reading: per action letter, how many event lines.
fn count_actions(format: &str, text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // A terminal's echoed Ctrl-C glued to a line.
        let line = line.strip_prefix("^C").unwrap_or(line);
        let Some((_, action, rest)) = event_words(format, line) else {
            continue;
        };
        if !ACTIONS.iter().any(|(letter, _)| *letter == action) || passthrough(&action, &rest) {
            continue;
        }
        *counts.entry(action).or_default() += 1;
    }
    counts
}

fn analyze(format: &str, path: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--json", "--from", format])
        .arg(path)
        .output()
        .expect("run iosplit-trace")
}

#[test]
fn every_corpus_trace_agrees_with_an_independent_reading() {
    let manifest = std::fs::read_to_string(corpus_dir().join("MANIFEST.md")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| format_of(name).is_some())
        .collect();
    names.sort();
    assert!(names.len() >= 35, "the corpus shrank: {}", names.len());
    let mut failures = Vec::new();
    let mut read = 0;
    for name in &names {
        let format = format_of(name).unwrap();
        let path = corpus_dir().join(name);
        let entry = manifest_entry(&manifest, name)
            .or_else(|| manifest_entry(&manifest, &format!("`{name}`")))
            .unwrap_or_default();
        let out = analyze(format, &path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refusal = entry
            .lines()
            .find_map(|line| line.trim().strip_prefix("- Refused: "));
        if let Some(words) = refusal {
            let words = words.trim_matches('`');
            if out.status.code() != Some(1)
                || stderr.lines().count() != 1
                || !stderr.contains(words)
            {
                failures.push(format!(
                    "{name}: MANIFEST says refused ({words}); got {:?}: {stderr}",
                    out.status
                ));
            }
            continue;
        }
        if !out.status.success() {
            failures.push(format!("{name}: exit {:?}: {stderr}", out.status));
            continue;
        }
        read += 1;
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let independent = count_actions(format, &text);
        for (letter, keys) in ACTIONS {
            let ours: u64 = keys
                .iter()
                .map(|key| report["events"][key].as_u64().unwrap())
                .sum();
            let theirs = independent.get(*letter).copied().unwrap_or(0);
            if ours != theirs {
                failures.push(format!(
                    "{name}: {letter} lines: the independent reading counts {theirs}, the report {ours}"
                ));
            }
        }
        // blkparse's own summary: said to agree, or why not.
        let has_summary = text.lines().any(|line| {
            let line = line.trim();
            line.starts_with("Total (") || (line.starts_with("CPU") && line.ends_with("):"))
        });
        if has_summary && format == "blkparse" {
            let agrees = stderr.contains("blkparse's own summary for")
                && !stderr.contains("differs from the import");
            let differs_explained = stderr.contains("differs from the import (an excerpt")
                || (stderr.contains("differs from the import") && entry.contains("excerpt"));
            if !agrees && !differs_explained {
                failures.push(format!(
                    "{name}: blkparse's summary neither agrees nor is explained:\n{stderr}"
                ));
            }
        }
    }
    assert!(read >= 25, "only {read} corpus traces read");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reading itself can fail: a trace that drops one D must disagree.
#[test]
fn the_independent_reading_sees_a_line_the_import_lost() {
    let text = "  8,0    1        1     0.000000000  100  Q   W 0 + 8 [dd]\n  8,0    1        2     0.000001000  100  D   W 0 + 8 [dd]\n  8,0    1        3     0.000002000    0  C   W 0 + 8 [0]\n";
    let counts = count_actions("blkparse", text);
    assert_eq!(counts.get("D"), Some(&1));
    assert_eq!(counts.get("C"), Some(&1));
    let ftrace = "            dd-100   [001] d..1.   10.000001: 8,0    D   W 0 + 8 [dd]\n          <idle>-0     [001] d.h1.   10.000002: 8,0    C   W 0 + 8 [0]\n";
    let counts = count_actions("ftrace-blk", ftrace);
    assert_eq!((counts.get("D"), counts.get("C")), (Some(&1), Some(&1)));
    // Passthrough commands are not block I/O events.
    let passthrough = "  8,0    1        1     0.000000000  100  D   R 4 [dmraid]\n  8,0    1        2     0.000001000    0  C   R [0]\n";
    assert!(count_actions("blkparse", passthrough).is_empty());
}
