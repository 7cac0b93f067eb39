//! The kernel's ftrace `blk` tracer as an oracle: its action counts against
//! the `events` counts of an iosplit-trace JSON report.

use std::collections::BTreeMap;

use tracer_common::EventKind;

use super::report::Events;

/// Actions counted per device: `(major, minor)` -> action letter -> lines.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BlkCounts {
    pub per_device: BTreeMap<(u32, u32), BTreeMap<String, u64>>,
}

impl BlkCounts {
    /// Lines with `action` on any device.
    pub fn total(&self, action: &str) -> u64 {
        self.per_device
            .values()
            .filter_map(|actions| actions.get(action))
            .sum()
    }
}

/// Parses `/sys/kernel/tracing/trace` as the blk tracer prints it:
/// `  comm-pid  [cpu] flags  ts: MAJ,MIN  ACTION  RWBS sector + n ...`.
pub fn parse_blk_trace(text: &str) -> BlkCounts {
    let mut counts = BlkCounts::default();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        // The timestamp ends with ": "; the device and action follow.
        let Some((_, rest)) = line.split_once(": ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(device), Some(action)) = (words.next(), words.next()) else {
            continue;
        };
        let Some((major, minor)) = device.split_once(',') else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
            continue;
        };
        *counts
            .per_device
            .entry((major, minor))
            .or_default()
            .entry(action.to_string())
            .or_default() += 1;
    }
    counts
}

/// `action` lines on device `dev`, split into (with data, without): a line
/// carries data when it shows a `sector + n` range with n > 0.
pub fn lines_with_data(text: &str, dev: (u32, u32), action: &str) -> (u64, u64) {
    let device = format!("{},{}", dev.0, dev.1);
    let mut with_data = 0;
    let mut without = 0;
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(": ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if words.len() < 2 || words[0] != device || words[1] != action {
            continue;
        }
        let length = words
            .iter()
            .position(|word| *word == "+")
            .and_then(|plus| words.get(plus + 1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if length > 0 {
            with_data += 1;
        } else {
            without += 1;
        }
    }
    (with_data, without)
}

/// `C` lines on device `dev` whose status (the bracketed number the blk
/// tracer prints after the range) is not 0.
pub fn failed_completions(text: &str, dev: (u32, u32)) -> u64 {
    let device = format!("{},{}", dev.0, dev.1);
    text.lines()
        .filter_map(|line| line.split_once(": ").map(|(_, rest)| rest))
        .filter(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            words.len() >= 2
                && words[0] == device
                && words[1] == "C"
                && words.last().is_some_and(|last| {
                    last.strip_prefix('[')
                        .and_then(|n| n.strip_suffix(']'))
                        .and_then(|n| n.parse::<i64>().ok())
                        .is_some_and(|status| status != 0)
                })
        })
        .count() as u64
}

/// One row of the comparison: the report's events against the tracer's actions.
#[derive(Debug, PartialEq, Eq)]
pub struct Agreement {
    pub label: String,
    pub report: u64,
    pub oracle: u64,
}

/// How iosplit-trace's event kinds map onto blk tracer actions: the probe
/// table's letters. M covers back merges and request merges; C both
/// completion tracepoints. D counts every issue, re-issues after a requeue
/// (R) included.
pub fn mapping() -> Vec<(&'static str, Vec<EventKind>)> {
    let mut rows: Vec<(&'static str, Vec<EventKind>)> = Vec::new();
    for kind in EventKind::ALL {
        let letter = kind.blk_action();
        if letter.is_empty() {
            continue;
        }
        match rows.iter_mut().find(|(seen, _)| *seen == letter) {
            Some((_, kinds)) => kinds.push(kind),
            None => rows.push((letter, vec![kind])),
        }
    }
    rows
}

/// Compares a report's `events` against the tracer's counts (all devices).
pub fn compare(events: &Events, oracle: &BlkCounts) -> Vec<Agreement> {
    mapping()
        .into_iter()
        .map(|(action, kinds)| Agreement {
            label: format!(
                "{action} {}",
                kinds
                    .iter()
                    .map(|kind| kind.json_key())
                    .collect::<Vec<_>>()
                    .join("+")
            ),
            report: kinds.iter().map(|kind| events.count(*kind)).sum(),
            oracle: oracle.total(action),
        })
        .collect()
}

/// Whether the rows agree once the probe runs the tool declared missed
/// (`events.missed`, from the kernel's recursion_misses) are allowed for: the
/// tool may count fewer events than the tracer, never more, and at most that
/// many fewer. Classic tracepoints skip a program that fires while another
/// runs on the same CPU (a completion interrupt during an issue probe); the
/// single-CPU guest makes that occasional. Exact agreement needs no allowance.
pub fn agrees_allowing_declared_misses(rows: &[Agreement], missed: u64) -> bool {
    let shortfall: u64 = rows
        .iter()
        .map(|row| row.oracle.saturating_sub(row.report))
        .sum();
    rows.iter().all(|row| row.report <= row.oracle) && shortfall <= missed
}

/// Overruns the tracer reports in `per_cpu/cpu*/stats` (non-zero: lost lines).
pub fn overruns(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|line| line.strip_prefix("overrun:"))
        .filter_map(|value| value.trim().parse::<u64>().ok())
        .sum()
}

/// Sum of `recursion_misses` over the BPF programs' `/proc/PID/fdinfo` texts.
pub fn recursion_misses(fdinfo: &str) -> u64 {
    fdinfo
        .lines()
        .filter_map(|line| line.strip_prefix("recursion_misses:"))
        .filter_map(|value| value.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_completions_are_c_lines_with_a_status() {
        let trace = "\
              dd-97  [000] d..1.  5.1: 254,2    C  WS 8192 + 128 [5]
              dd-97  [000] d..1.  5.2: 254,2    C  WS 0 + 128 [0]
              dd-97  [000] d..1.  5.3: 254,2    Q  WS 8192 + 128 [dd]
              dd-97  [000] d..1.  5.4: 252,0    C  WS 8192 + 128 [5]
";
        assert_eq!(failed_completions(trace, (254, 2)), 1);
    }

    // Lines as the 6.1 guest's blk tracer printed them.
    const TRACE: &str = "\
# tracer: blk
#
            mkfs-81      [000] .....    14.120339: 254,0    A  WS 1785 + 8 <- (254,1) 0
            mkfs-81      [000] .....    14.120345: 254,0    Q  WS 1785 + 8 [mkfs]
            mkfs-81      [000] .....    14.120360: 254,0    G  WS 1785 + 8 [mkfs]
            mkfs-81      [000] .....    14.120401: 254,0    M  WS 1793 + 8 [mkfs]
            mkfs-81      [000] .....    14.120410: 254,0    X  WS 1785 / 2040 [mkfs]
            mkfs-81      [000] d....    14.120499: 254,0    D  WS 1785 + 16 [mkfs]
          <idle>-0       [000] d.h..    14.121001: 254,0    C  WS 1785 + 16 [0]
            mkfs-81      [000] .....    14.130000: 259,0    Q   R 0 + 8 [mkfs]
    kworker/0:1H-40      [000] d..1.    14.131000: 254,16   R  WS 2048 + 112 [0]
";

    #[test]
    fn counts_actions_per_device_and_skips_comments() {
        let counts = parse_blk_trace(TRACE);
        assert_eq!(counts.per_device.len(), 3);
        // An `R` action is a requeue; an ` R ` rwbs (a read) is not.
        assert_eq!(counts.total("R"), 1);
        assert_eq!(counts.per_device[&(254, 0)]["Q"], 1);
        assert_eq!(counts.total("Q"), 2);
        assert_eq!(counts.total("G"), 1);
        assert_eq!(counts.total("F"), 0);
    }

    /// `events` as a report writes it, every count 0 but those given.
    fn events_of(counts: serde_json::Value) -> Events {
        let mut report = crate::vm::report::tests::empty_report();
        for (key, count) in counts.as_object().unwrap() {
            report["events"][key] = count.clone();
        }
        serde_json::from_value(report["events"].take()).unwrap()
    }

    #[test]
    fn merges_and_completions_are_summed_across_kinds() {
        let counts = parse_blk_trace(TRACE);
        let events = events_of(serde_json::json!({
            "remap": 1, "queue": 2, "split": 1, "backmerge": 0, "rq_merge": 1,
            "frontmerge": 0, "issue": 1, "requeue": 1, "complete": 0, "bio_complete": 1
        }));
        let rows = compare(&events, &counts);
        assert!(rows.iter().all(|row| row.report == row.oracle), "{rows:?}");
        let wrong = events_of(serde_json::json!({"queue": 1}));
        let rows = compare(&wrong, &counts);
        let queue = rows.iter().find(|row| row.label.starts_with('Q')).unwrap();
        assert_eq!((queue.report, queue.oracle), (1, 2));
    }

    #[test]
    fn empty_flushes_are_told_apart_from_data_bios() {
        let text = "\
 guest-io-183 [000] d..1. 6.033093: 253,0    Q FWS [guest-io]
 guest-io-183 [000] d..1. 6.033236: 254,0    A FWS 0 + 0 <- (253,0) 0
 guest-io-183 [000] d..1. 6.033300: 253,0    Q  WS 0 + 2048 [guest-io]
";
        assert_eq!(lines_with_data(text, (253, 0), "Q"), (1, 1));
        assert_eq!(lines_with_data(text, (254, 0), "A"), (0, 1));
        assert_eq!(lines_with_data(text, (254, 0), "Q"), (0, 0));
    }

    #[test]
    fn only_declared_misses_excuse_a_shortfall() {
        let row = |report, oracle| Agreement {
            label: "C complete+bio_complete".into(),
            report,
            oracle,
        };
        assert!(agrees_allowing_declared_misses(&[row(5, 5)], 0));
        assert!(agrees_allowing_declared_misses(&[row(263, 266)], 3));
        // Undeclared losses, more losses than declared, or extra events: disagreement.
        assert!(!agrees_allowing_declared_misses(&[row(263, 266)], 0));
        assert!(!agrees_allowing_declared_misses(
            &[row(263, 266), row(9, 10)],
            3
        ));
        assert!(!agrees_allowing_declared_misses(&[row(7, 5)], 9));
    }

    #[test]
    fn recursion_misses_are_summed_over_programs() {
        let fdinfo = "prog_type:\t5\nrun_cnt:\t0\nrecursion_misses:\t3\nprog_type:\t5\nrecursion_misses:\t4\n";
        assert_eq!(recursion_misses(fdinfo), 7);
        assert_eq!(recursion_misses(""), 0);
    }

    #[test]
    fn overruns_are_summed_over_cpus() {
        let stats = "entries: 10\noverrun: 0\ncommit overrun: 0\nentries: 3\noverrun: 7\n";
        assert_eq!(overruns(stats), 7);
    }
}
