//! Every line of an imported text is read, recognised or refused: a trace
//! in a format the importer does not read fails with one clear line and
//! exit 1, never "no I/O seen" (issue #47, class 11); blkparse's own
//! summary is read and set beside the import (class 14).
//!
//! The custom-format inputs here are derived from a real corpus trace
//! (marod-nvme-4.4, see tests/corpus/MANIFEST.md) by blkparse's documented
//! `-f`/`-F` rules (blkparse(1), "OUTPUT DESCRIPTION AND FORMATTING";
//! blkparse_fmt.c `print_field`): the same events, printed as those formats
//! print them. The patched-format and `-t` traces are real (corpus).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn corpus(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(file)
}

fn analyze(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", "blkparse", "--json"])
        .arg(file)
        .output()
        .expect("run iosplit-trace")
}

/// Writes `text` beside the other test inputs and analyzes it.
fn analyze_text(name: &str, text: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("iosplit-import-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write input");
    let out = analyze(&path);
    let _ = std::fs::remove_file(&path);
    out
}

/// The event lines of marod-nvme-4.4 as words: dev cpu seq time pid action
/// rwbs sector + n [name-or-status] (the `UT` lines have no range).
fn marod_events() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(corpus("marod-nvme-4.4.blkparse.txt")).expect("corpus");
    text.lines()
        .take_while(|line| !line.starts_with("Total"))
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// The patched blkparse of the priority-extension RFC (a column after
/// rwbs): before, its Q, D and C lines were lost and the import exited 0
/// with no I/O; now every line is read.
#[test]
fn a_patched_blkparse_format_is_read_whole() {
    let out = analyze(&corpus("kulkarni-blktrace-ext-prio-all.blkparse.txt"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("read 20 event lines of 20"), "{stderr}");
    assert!(!stderr.contains("no block I/O events"), "{stderr}");
    assert!(!stderr.contains("could not be parsed"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for kind in ["queue", "issue", "complete"] {
        assert_eq!(report["events"][kind], 4, "{kind}");
    }
}

/// `blkparse -f "%5T.%9t, %p, %C, %a, %S, %N\n"` (a format a public
/// tracing script uses): fields in another order, no device column.
/// Nothing is read, so nothing is reported.
#[test]
fn a_custom_format_with_fields_in_another_order_is_refused() {
    let text: String = marod_events()
        .iter()
        .map(|w| {
            let (secs, nanos) = w[3].split_once('.').expect("time");
            let (sector, bytes) = match w.get(8).map(String::as_str) {
                Some("+") => (w[7].clone(), w[9].parse::<u64>().expect("n") * 512),
                _ => ("0".into(), 0),
            };
            format!(
                "{secs:>5}.{nanos}, {}, fio, {}, {sector}, {bytes}\n",
                w[4], w[5]
            )
        })
        .collect();
    let out = analyze_text("fields-reordered.txt", &text);
    assert_refused(&out, "no blkparse event lines found");
}

/// `blkparse -f "%D %2c %8s %5T.%9t %6p %2a %3d %10S + %10U (%4e) [%C]\n"`
/// (asked for on linux-scsi, 2022-02-21, Message-ID
/// `<YhOlbX0+0SxYl3Dq@T590>` quoting it): the default header, then the
/// payload integer where the length belongs and the command where the
/// status belongs. Its C lines cannot be read as blkparse's; the trace is
/// refused rather than read with lengths of 0.
#[test]
fn a_custom_format_with_the_default_header_is_refused() {
    let text: String = marod_events()
        .iter()
        .map(|w| {
            let sector = if w.get(8).map(String::as_str) == Some("+") {
                w[7].as_str()
            } else {
                "0"
            };
            let name = match w[5].as_str() {
                "C" => "swapper".to_owned(),
                _ => w[w.len() - 1].trim_matches(|c| c == '[' || c == ']').to_owned(),
            };
            format!(
                "{:>7} {:>2} {:>8} {:>15} {:>6} {:>2} {:>3} {sector:>10} + {:>10} ({:>4}) [{name}]\n",
                w[0], w[1], w[2], w[3], w[4], w[5], w[6], 0, 0
            )
        })
        .collect();
    let out = analyze_text("default-header-custom-tail.txt", &text);
    assert_refused(&out, "5 of 30 lines are not blkparse output this reads");
}

/// `blkparse -F "Q,%a %S %n\n"`: one action in its own format, the rest in
/// the default. The Q lines are no blkparse event lines; a trace that lost
/// them would read no user I/O, so it is refused.
#[test]
fn a_per_action_format_is_refused_not_read_without_those_lines() {
    let text: String = marod_events()
        .iter()
        .map(|w| match w[5].as_str() {
            "Q" => format!("Q {} {}\n", w[7], w[9]),
            _ => format!("{}\n", w.join(" ")),
        })
        .collect();
    let out = analyze_text("per-action-format.txt", &text);
    assert_refused(&out, "5 of 30 lines are not blkparse output this reads");
}

/// blkparse's own Total block, where a trace keeps it, is an independent
/// reading: it agrees on both corpus traces that keep one, and a copy that
/// lost two D lines is said to differ, with both numbers.
#[test]
fn blkparse_own_summary_is_compared_with_the_import() {
    for (file, dev, counts) in [
        (
            "marod-md127-nvme-5.4.blkparse.txt",
            "259,0",
            "Q 0r/0w, D 0r/5w, R 0r/0w, C 0r/5w, M 0r/0w, 30 events",
        ),
        (
            "marod-nvme-4.4.blkparse.txt",
            "259,1",
            "Q 0r/5w, D 0r/5w, R 0r/0w, C 0r/5w, M 0r/0w, 30 events",
        ),
    ] {
        let out = analyze(&corpus(file));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let want = format!("blkparse's own summary for {dev} agrees with the import: {counts}");
        assert!(stderr.contains(&want), "{file}: {stderr}");
        assert!(
            stderr.contains("1 summary block (10 lines"),
            "{file}: {stderr}"
        );
    }
    let text = std::fs::read_to_string(corpus("marod-nvme-4.4.blkparse.txt")).expect("corpus");
    let mut dropped = 0;
    let cut: String = text
        .lines()
        .filter(|line| {
            let drop = dropped < 2 && line.split_whitespace().nth(5) == Some("D");
            dropped += u32::from(drop);
            !drop
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let out = analyze_text("marod-two-d-lost.txt", &cut);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let note = stderr
        .lines()
        .find(|l| l.contains("own summary for 259,1"))
        .unwrap_or_else(|| panic!("no summary note in {stderr}"));
    assert!(note.contains("differs"), "{note}");
    assert!(note.contains("blkparse Q 0r/5w, D 0r/5w"), "{note}");
    assert!(note.contains("import Q 0r/5w, D 0r/3w"), "{note}");
    assert!(
        note.contains("30 events") && note.contains("28 events"),
        "{note}"
    );
}

/// `blkparse -t` output (real, corpus): each C's elapsed time in
/// parentheses before its status, and the publisher's `...` elisions: all
/// 38 completions read, the elisions counted, nothing unread.
#[test]
fn track_ios_output_and_elisions_are_read_and_counted() {
    let out = analyze(&corpus("gurney-nvme-track-ios-t.blkparse.txt"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("read 38 event lines of 42; also 2 elision lines (`...`"),
        "{stderr}"
    );
    assert!(!stderr.contains("do not parse"), "{stderr}");
    assert!(!stderr.contains("other line"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["events"]["complete"], 38);
}

/// blkparse as of September 2005 (blkparse.c before "Add support for
/// tracing multiple devices", 2005-09-12) printed no device column: the
/// header was `"%c %3d %15ld %5Lu.%09Lu %5u %c %3s"` (a backwards-time mark,
/// CPU, sequence, time, pid, action, rwbs). Not read (it names no device);
/// refused in one line rather than reported as a trace without I/O.
#[test]
fn the_2005_format_without_a_device_column_is_refused() {
    let text: String = marod_events()
        .iter()
        .map(|w| {
            let (secs, nanos) = w[3].split_once('.').expect("time");
            format!(
                "  {:>3} {:>15} {secs:>5}.{nanos} {:>5} {} {:>3} {}\n",
                w[1],
                w[2],
                w[4],
                &w[5][..1],
                w[6],
                w[7..].join(" ")
            )
        })
        .collect();
    let out = analyze_text("blkparse-2005.txt", &text);
    assert_refused(&out, "no blkparse event lines found");
}
