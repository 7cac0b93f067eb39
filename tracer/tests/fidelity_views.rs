//! The views say what an imported trace holds (#47):
//!
//! - a trace with commands but no user I/Os, or completions alone, is not
//!   "no I/O seen": the text shows the commands and the completions the
//!   JSON counts;
//! - an import's text and page give no advice about tracing live;
//! - the HTML header counts a stacked I/O once: user I/Os as submitted,
//!   commands on the devices at the bottom of the stack.
//!
//! The inputs are the corpus's real traces (see `corpus/MANIFEST.md`). No
//! public trace of `blktrace -a issue -a complete` or `-a complete` could
//! be found, so those are made from the corpus's full traces by keeping
//! the lines such a capture keeps: blktrace's action mask records only the
//! actions asked for (blktrace(8) `-a`), and blkparse prints each recorded
//! event as it would have in the full trace, so the kept lines are the
//! full trace's D and C lines (or C lines) byte for byte. Message (`m N`)
//! lines are not kept: they are not in the issue or complete mask.

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// A scratch directory for this test binary's run.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "iosplit-fidelity-views-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `analyze --from FROM FILE [ARGS]`: (stdout, stderr).
fn analyze(from: &str, file: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", from])
        .arg(file)
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "analyze {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json(from: &str, file: &Path) -> Value {
    serde_json::from_str(&analyze(from, file, &["--json"]).0).unwrap()
}

/// The action column of a blkparse line (`dev cpu seq time pid ACTION ...`).
fn action(line: &str) -> Option<&str> {
    line.split_whitespace().nth(5)
}

/// The lines of `source` a capture masked to `actions` would print.
fn masked(source: &str, actions: &[&str], scratch: &Scratch, tag: &str) -> (PathBuf, usize) {
    let text = std::fs::read_to_string(corpus(source)).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| action(line).is_some_and(|a| actions.contains(&a)))
        .collect();
    let path = scratch.0.join(format!("{tag}-{source}"));
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    (path, kept.len())
}

/// The corpus's blkparse traces that issue and complete commands.
const WITH_COMMANDS: [&str; 4] = [
    "kulkarni-nullb-mq-deadline-merge.blkparse.txt",
    "kulkarni-nullb-requeue.blkparse.txt",
    "marod-nvme-4.4.blkparse.txt",
    "ruffell-lvm-nvme-4.15-merge.blkparse.txt",
];

/// (device name, op, commands) of every op with commands in the report.
fn commands_by_op(report: &Value) -> Vec<(String, String, u64)> {
    let mut seen = Vec::new();
    for device in report["devices"].as_array().unwrap() {
        for (op, measures) in device["measures"]["ops"].as_object().unwrap() {
            let commands = measures["commands"].as_u64().unwrap();
            if commands > 0 {
                seen.push((
                    device["name"].as_str().unwrap().to_string(),
                    op.clone(),
                    commands,
                ));
            }
        }
    }
    seen
}

#[test]
fn issue_and_complete_only_traces_show_their_commands() {
    let scratch = Scratch::new("dc");
    for source in WITH_COMMANDS {
        let (path, lines) = masked(source, &["D", "C"], &scratch, "dc");
        assert!(lines > 0, "{source} has D and C lines");
        let report = json("blkparse", &path);
        let (text, _) = analyze("blkparse", &path, &[]);
        let commands = commands_by_op(&report);
        assert!(!commands.is_empty(), "{source}: {report}");
        assert!(!text.contains("no I/O seen"), "{source}:\n{text}");
        for (device, op, count) in commands {
            let at = text
                .find(&format!("{device} ("))
                .unwrap_or_else(|| panic!("{source}: {device} missing:\n{text}"));
            assert!(
                text[at..].contains(&format!("{op}: {count} commands")),
                "{source}: {device} {op} {count} commands:\n{text}"
            );
        }
        // No ratio to user I/Os that are not there.
        assert!(text.contains("no user I/Os seen"), "{source}:\n{text}");
        assert!(!text.contains("0 user I/Os"), "{source}:\n{text}");
    }
}

#[test]
fn completions_only_traces_say_what_they_hold() {
    let scratch = Scratch::new("c");
    for source in WITH_COMMANDS {
        let (path, lines) = masked(source, &["C"], &scratch, "c");
        assert!(lines > 0, "{source} has C lines");
        let report = json("blkparse", &path);
        let completions = report["events"]["complete"].as_u64().unwrap();
        assert_eq!(completions as usize, lines, "{source}: {report}");
        // Each device the completions name is in the report, holding them.
        let held: u64 = report["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|device| {
                device["measures"]["unpaired_completions"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .sum();
        assert_eq!(held, completions, "{source}: {report}");
        let (text, _) = analyze("blkparse", &path, &[]);
        assert!(!text.contains("no I/O seen"), "{source}:\n{text}");
        assert!(
            text.contains("completions whose queue and issue are not in the trace"),
            "{source}:\n{text}"
        );
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&format!(
                "the trace holds {completions} command completions"
            )),
            "{source}:\n{text}"
        );
    }
}

#[test]
fn a_trace_of_lines_the_engine_does_not_read_is_not_called_empty_of_io() {
    // Notify lines only, and passthrough commands (no sector range): the
    // engine measures nothing, but the trace is not "no I/O".
    for source in [
        "martins3-md10-notify-only.blkparse.txt",
        "linfeng-dmraid-bfq-passthrough.blkparse.txt",
    ] {
        let (text, stderr) = analyze("blkparse", &corpus(source), &[]);
        assert!(!text.contains("no I/O seen"), "{source}:\n{text}");
        assert!(text.contains("nothing measured"), "{source}:\n{text}");
        assert!(stderr.contains("no use for"), "{source}: {stderr}");
    }
}

#[test]
fn imports_give_no_advice_about_tracing_live() {
    let scratch = Scratch::new("hint");
    let mut inputs = vec![
        ("blkparse", corpus("martins3-md10-notify-only.blkparse.txt")),
        (
            "blkparse",
            corpus("linfeng-dmraid-bfq-passthrough.blkparse.txt"),
        ),
        (
            "blkparse",
            corpus("martins3-stuck-disk-no-issue.blkparse.txt"),
        ),
        ("ftrace-blk", corpus("martins3-dm-on-sdc.ftrace.txt")),
    ];
    inputs.push((
        "blkparse",
        masked(WITH_COMMANDS[0], &["G"], &scratch, "g").0,
    ));
    for (from, path) in inputs {
        let page = scratch.0.join("page.html");
        let (text, _) = analyze(from, &path, &["--html", page.to_str().unwrap()]);
        let html = std::fs::read_to_string(&page).unwrap();
        for live in ["--device", "while tracing", "sudo", "--duration"] {
            assert!(!text.contains(live), "{}: {live}:\n{text}", path.display());
            assert!(
                !html.contains(live),
                "{}: {live} in the page",
                path.display()
            );
        }
    }
}

/// (user I/Os, commands) in the page's header line.
fn header_counts(page: &str) -> (u64, u64) {
    let head = page.split(" commands</p>").next().unwrap();
    let mut fields = head.rsplit(" · ");
    let commands = fields.next().unwrap().replace(',', "").parse().unwrap();
    let user_ios = fields
        .next()
        .unwrap()
        .trim_end_matches(" user I/Os")
        .replace(',', "")
        .parse()
        .unwrap();
    (user_ios, commands)
}

fn device<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

fn total(device: &Value, key: &str) -> u64 {
    device["measures"]["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|op| op[key].as_u64().unwrap())
        .sum()
}

#[test]
fn the_page_header_counts_a_stacked_io_once() {
    let scratch = Scratch::new("stack");
    // (trace, format, the stacked device on top, the disk below it).
    for (source, from, top, disk) in [
        (
            "martins3-dm-on-sdc.ftrace.txt",
            "ftrace-blk",
            "253:1",
            "8:32",
        ),
        (
            "ruffell-lvm-nvme-4.15-merge.blkparse.txt",
            "blkparse",
            "253:0",
            "259:0",
        ),
        (
            "marod-md127-nvme-5.4.blkparse.txt",
            "blkparse",
            "9:127",
            "259:0",
        ),
        (
            "dwj-lvm-on-sda2-two-level-remap.blkparse.txt",
            "blkparse",
            "253:0",
            "8:0",
        ),
    ] {
        let path = corpus(source);
        let report = json(from, &path);
        let page = scratch.0.join("page.html");
        analyze(from, &path, &["--html", page.to_str().unwrap()]);
        let html = std::fs::read_to_string(&page).unwrap();
        let (user_ios, commands) = header_counts(&html);
        let (top, disk) = (device(&report, top), device(&report, disk));
        assert_eq!(commands, total(disk, "commands"), "{source}: {html}");
        assert_eq!(user_ios, total(top, "user_ios"), "{source}: {html}");
        // The stacked device's own bios handed down are said apart.
        let handed_down = total(top, "commands");
        assert!(handed_down > 0, "{source}");
        assert!(
            html.contains(&format!("carried them again: {handed_down};")),
            "{source}: {html}"
        );
    }
}

/// martins3-stuck-disk-no-issue: Q G P U I and nothing after. The G and I
/// lines show a request-based disk whose request waits in the scheduler:
/// said so, not "bio-based, or not traced" (a capture gap).
#[test]
fn a_request_never_dispatched_is_said_waiting_not_a_capture_gap() {
    let path = corpus("martins3-stuck-disk-no-issue.blkparse.txt");
    let report = json("blkparse", &path);
    let disk = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|device| device["dev"] == "8:144")
        .unwrap_or_else(|| panic!("no 8:144 in {report}"));
    assert_eq!(disk["geometry"]["request_based"], true, "{disk}");
    let (text, notes) = analyze("blkparse", &path, &[]);
    assert!(!text.contains("bio-based, or not traced"), "{text}");
    assert!(text.contains("request-based (requests seen)"), "{text}");
    assert!(
        notes.contains(
            "1 requests on 8:144 were inserted into the I/O scheduler (I) and never dispatched"
        ),
        "{notes}"
    );
}
