//! `iosplit-trace compare BEFORE AFTER`: two reports of the same workload,
//! one taken before a fix and one after, side by side, and each prediction
//! BEFORE made (`what_if`) against what AFTER measured. This is how a user
//! proves a fix, and how the what-if tests check theirs.
//!
//! Either side is a JSON report (`report --json`, `run --json`, `analyze
//! --json`) or a recording, which is analyzed first. Reports are read as
//! JSON values, so a report of an older schema still compares.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::Value;

use crate::cli::CompareArgs;
use crate::error::{Context, Error, Result};
use crate::record::Recording;

use super::analyze::{replay, Views};
use super::output::{Document, Format, Output};
use super::units;

/// The operations a report measures, in its order; flushes carry no data.
const DATA_OPS: [&str; 4] = ["read", "write", "discard", "other"];

/// What one side measured on one device and operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Side {
    pub user_ios: u64,
    pub commands: u64,
    pub bytes: u64,
    pub command_size_p50: u64,
    pub issue_to_complete_p50_us: u64,
    pub issue_to_complete_p99_us: u64,
    pub queue_to_complete_p50_us: u64,
    pub queue_to_complete_p99_us: u64,
}

impl Side {
    fn of(op: &Value) -> Side {
        let number = |value: &Value| value.as_u64().unwrap_or(0);
        Side {
            user_ios: number(&op["user_ios"]),
            commands: number(&op["commands"]),
            bytes: number(&op["bytes"]),
            command_size_p50: number(&op["command_size"]["p50"]),
            issue_to_complete_p50_us: number(&op["issue_to_complete_us"]["p50"]),
            issue_to_complete_p99_us: number(&op["issue_to_complete_us"]["p99"]),
            queue_to_complete_p50_us: number(&op["queue_to_complete_us"]["p50"]),
            queue_to_complete_p99_us: number(&op["queue_to_complete_us"]["p99"]),
        }
    }
}

/// One device of BEFORE and the device of AFTER it is compared with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DevicePair {
    pub before: String,
    pub after: String,
    /// Per data operation either side saw.
    pub ops: Vec<OpPair>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpPair {
    pub op: String,
    pub before: Side,
    pub after: Side,
}

/// A prediction of BEFORE checked against AFTER.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictionCheck {
    pub code: String,
    pub device: String,
    /// The device of AFTER that was measured (its pair).
    pub measured_on: Option<String>,
    /// The operation the prediction counted (the one whose BEFORE commands
    /// it started from), or `"data"` for all data operations.
    pub scope: String,
    pub commands_now: u64,
    pub predicted_commands: u64,
    pub measured_commands: Option<u64>,
    /// (measured − predicted) / predicted.
    pub error: Option<f64>,
}

/// The whole comparison: what `--json` prints and the text renders.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub before: String,
    pub after: String,
    /// Seconds each report covers: for `run`, the command's run.
    pub before_duration_s: f64,
    pub after_duration_s: f64,
    /// Both reports come from `run`: their durations are the command's time.
    pub timed_runs: bool,
    pub devices: Vec<DevicePair>,
    pub predictions: Vec<PredictionCheck>,
    /// How the devices were paired, when not by name.
    pub notes: Vec<String>,
}

pub fn run(args: &CompareArgs) -> Result<ExitCode> {
    let pairs = args
        .pair
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(b, a)| (b.to_string(), a.to_string()))
                .ok_or_else(|| {
                    Error::usage(format!(
                        "--pair takes BEFORE=AFTER device names (e.g. loop0p2=loop1p2), not `{pair}`"
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let before = load(&args.before)?;
    let after = load(&args.after)?;
    let comparison = compare(
        (&args.before.display().to_string(), &before),
        (&args.after.display().to_string(), &after),
        &pairs,
    );
    let mut out = Output::stdout();
    out.print(&comparison, Format::from_flags(args.json, false))?;
    Ok(ExitCode::SUCCESS)
}

/// A JSON report as it is, or a recording analyzed into one.
fn load(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'{') {
        let report: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a JSON report", path.display()))?;
        if !report["devices"].is_array() {
            return Err(Error::usage(format!(
                "{} is JSON but no report (no `devices`): give `report --json`, `run --json` or `analyze --json` output, or a recording",
                path.display()
            )));
        }
        return Ok(report);
    }
    let recording = Recording::open(path).with_context(|| {
        format!(
            "cannot compare {}: neither a JSON report nor a recording",
            path.display()
        )
    })?;
    let mut views = Views {
        html: None,
        perfetto: None,
    };
    let analysis = replay(recording, path, &mut views)?;
    serde_json::to_value(&analysis.report)
        .with_context(|| format!("cannot compare {}", path.display()))
}

/// Every disk and partition of a report, by name, with its measures.
fn devices(report: &Value) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    for disk in report["devices"].as_array().into_iter().flatten() {
        found.push((name_of(disk), &disk["measures"]));
        for part in disk["partitions"].as_array().into_iter().flatten() {
            found.push((name_of(part), &part["measures"]));
        }
    }
    found
}

fn name_of(device: &Value) -> String {
    device["name"].as_str().unwrap_or_default().to_string()
}

fn has_traffic(measures: &Value) -> bool {
    DATA_OPS
        .iter()
        .any(|op| measures["ops"][op]["commands"].as_u64().unwrap_or(0) > 0)
}

/// Commands of all data operations of one device's measures.
fn data_commands(measures: &Value) -> u64 {
    DATA_OPS
        .iter()
        .map(|op| measures["ops"][op]["commands"].as_u64().unwrap_or(0))
        .sum()
}

/// Pairs the devices (by `pairs`, then by name; a lone busy device on
/// each side pairs with the other), compares them and checks BEFORE's
/// predictions.
pub fn compare(
    (before_name, before): (&str, &Value),
    (after_name, after): (&str, &Value),
    pairs: &[(String, String)],
) -> Comparison {
    let (old, new) = (devices(before), devices(after));
    let mut notes = Vec::new();
    let mut paired: Vec<(String, String)> = pairs.to_vec();
    for (name, measures) in &old {
        let already = paired.iter().any(|(b, _)| b == name);
        if !already && has_traffic(measures) && new.iter().any(|(n, _)| n == name) {
            paired.push((name.clone(), name.clone()));
        }
    }
    if paired.is_empty() {
        let busy = |side: &[(String, &Value)]| -> Vec<String> {
            side.iter()
                .filter(|(_, m)| has_traffic(m))
                .map(|(n, _)| n.clone())
                .collect()
        };
        if let ([b], [a]) = (busy(&old).as_slice(), busy(&new).as_slice()) {
            notes.push(format!(
                "no device has the same name on both sides: {b} (before) compared with {a} (after), the only busy one of each; --pair names others"
            ));
            paired.push((b.clone(), a.clone()));
        }
    }
    let measures_of = |side: &[(String, &Value)], name: &str| -> Option<Value> {
        side.iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| (*m).clone())
    };
    let mut device_pairs = Vec::new();
    for (b, a) in &paired {
        let (Some(old_m), Some(new_m)) = (measures_of(&old, b), measures_of(&new, a)) else {
            notes.push(format!("--pair {b}={a}: no such device on one side"));
            continue;
        };
        let ops = DATA_OPS
            .iter()
            .filter(|op| old_m["ops"][op].is_object() || new_m["ops"][op].is_object())
            .map(|op| OpPair {
                op: op.to_string(),
                before: Side::of(&old_m["ops"][op]),
                after: Side::of(&new_m["ops"][op]),
            })
            .filter(|pair| pair.before.commands + pair.after.commands > 0)
            .collect();
        device_pairs.push(DevicePair {
            before: b.clone(),
            after: a.clone(),
            ops,
        });
    }

    let mut predictions = Vec::new();
    for diagnosis in before["diagnoses"].as_array().into_iter().flatten() {
        let what_if = &diagnosis["evidence"]["what_if"];
        let (Some(now), Some(predicted)) = (
            what_if["commands_now"].as_u64(),
            what_if["commands_after_fix"].as_u64(),
        ) else {
            continue;
        };
        let device = diagnosis["device"].as_str().unwrap_or_default().to_string();
        let old_m = measures_of(&old, &device);
        // The scope is the op whose BEFORE commands the prediction started
        // from; failing that, all data operations.
        let scope = old_m
            .as_ref()
            .and_then(|m| {
                DATA_OPS
                    .iter()
                    .find(|op| m["ops"][op]["commands"].as_u64() == Some(now))
                    .map(|op| op.to_string())
            })
            .unwrap_or_else(|| "data".to_string());
        let measured_on = paired
            .iter()
            .find(|(b, _)| *b == device)
            .map(|(_, a)| a.clone());
        let measured = measured_on
            .as_ref()
            .and_then(|a| measures_of(&new, a))
            .map(|m| match scope.as_str() {
                "data" => data_commands(&m),
                op => m["ops"][op]["commands"].as_u64().unwrap_or(0),
            });
        predictions.push(PredictionCheck {
            code: diagnosis["code"].as_str().unwrap_or_default().to_string(),
            device,
            measured_on,
            scope,
            commands_now: now,
            predicted_commands: predicted,
            measured_commands: measured,
            error: measured
                .filter(|_| predicted > 0)
                .map(|m| (m as f64 - predicted as f64) / predicted as f64),
        });
    }
    let is_run = |report: &Value| report["run"].is_object();
    Comparison {
        before: before_name.to_string(),
        after: after_name.to_string(),
        before_duration_s: before["duration_s"].as_f64().unwrap_or(0.0),
        after_duration_s: after["duration_s"].as_f64().unwrap_or(0.0),
        timed_runs: is_run(before) && is_run(after),
        devices: device_pairs,
        predictions,
        notes,
    }
}

impl Document for Comparison {
    fn render_text(&self, _width: u16) -> String {
        let mut text = String::new();
        let mut line = |s: String| {
            text.push_str(s.trim_end());
            text.push('\n');
        };
        let time = match self.timed_runs {
            true => "ran",
            false => "traced",
        };
        line(format!(
            "compare: before {} ({time} {}) · after {} ({time} {})",
            self.before,
            units::seconds(self.before_duration_s),
            self.after,
            units::seconds(self.after_duration_s),
        ));
        if self.timed_runs && self.before_duration_s > 0.0 && self.after_duration_s > 0.0 {
            line(format!(
                "  the command took {} after against {} before ({:.2}×)",
                units::seconds(self.after_duration_s),
                units::seconds(self.before_duration_s),
                self.before_duration_s / self.after_duration_s
            ));
        }
        for note in &self.notes {
            line(format!("  note: {note}"));
        }
        if self.devices.is_empty() {
            line("  no device to compare: none has I/O under the same name on both sides (--pair BEFORE=AFTER names them)".into());
        }
        for pair in &self.devices {
            line(String::new());
            match pair.before == pair.after {
                true => line(pair.before.clone()),
                false => line(format!("{} (before) → {} (after)", pair.before, pair.after)),
            }
            line(format!(
                "  {:<28}{:>18}{:>18}{:>10}",
                "", "before", "after", "change"
            ));
            for op in &pair.ops {
                let (b, a) = (&op.before, &op.after);
                let change = |before: u64, after: u64| -> String {
                    match (before, after) {
                        (0, _) => String::new(),
                        (b, a) if a == b => "=".into(),
                        (b, a) => format!("{:+.1}%", (a as f64 - b as f64) / b as f64 * 100.0),
                    }
                };
                let row = |label: String, before: String, after: String, change: String| {
                    format!("  {label:<28}{before:>18}{after:>18}{change:>10}")
                };
                line(row(
                    format!("{} user I/Os", op.op),
                    units::thousands(b.user_ios),
                    units::thousands(a.user_ios),
                    change(b.user_ios, a.user_ios),
                ));
                line(row(
                    "  commands".into(),
                    units::thousands(b.commands),
                    units::thousands(a.commands),
                    change(b.commands, a.commands),
                ));
                line(row(
                    "  bytes".into(),
                    units::bytes(b.bytes as f64),
                    units::bytes(a.bytes as f64),
                    change(b.bytes, a.bytes),
                ));
                line(row(
                    "  command size p50".into(),
                    units::bytes(b.command_size_p50 as f64),
                    units::bytes(a.command_size_p50 as f64),
                    change(b.command_size_p50, a.command_size_p50),
                ));
                // A side that timed nothing has a 0 p99.
                let latency = |p50: u64, p99: u64| match p99 {
                    0 => "-".to_string(),
                    _ => format!("{} / {}", units::micros(p50), units::micros(p99)),
                };
                line(row(
                    "  issue→complete p50 / p99".into(),
                    latency(b.issue_to_complete_p50_us, b.issue_to_complete_p99_us),
                    latency(a.issue_to_complete_p50_us, a.issue_to_complete_p99_us),
                    String::new(),
                ));
                line(row(
                    "  queue→complete p50 / p99".into(),
                    latency(b.queue_to_complete_p50_us, b.queue_to_complete_p99_us),
                    latency(a.queue_to_complete_p50_us, a.queue_to_complete_p99_us),
                    String::new(),
                ));
            }
        }
        if !self.predictions.is_empty() {
            line(String::new());
            line("Predictions of before, against after:".into());
        }
        for check in &self.predictions {
            let scope = match check.scope.as_str() {
                "data" => String::new(),
                op => format!(" {op}"),
            };
            let measured = match (check.measured_commands, &check.measured_on, check.error) {
                (Some(measured), Some(on), Some(error)) => format!(
                    "measured {} on {on} ({:+.1}% off the prediction)",
                    units::thousands(measured),
                    error * 100.0
                ),
                (Some(measured), Some(on), None) => {
                    format!("measured {} on {on}", units::thousands(measured))
                }
                _ => "not measured: its device is not paired with one of after".to_string(),
            };
            line(format!(
                "  {} on {}: {}{scope} commands, predicted {} after the fix; {measured}",
                check.code,
                check.device,
                units::thousands(check.commands_now),
                units::thousands(check.predicted_commands),
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(device: &str, commands: u64, what_if: Option<(u64, u64)>) -> Value {
        let diagnoses = match what_if {
            Some((now, after)) => json!([{
                "code": "split_amplification",
                "device": device,
                "evidence": {"what_if": {"commands_now": now, "commands_after_fix": after}},
            }]),
            None => json!([]),
        };
        json!({
            "duration_s": 2.0,
            "run": {},
            "diagnoses": diagnoses,
            "devices": [{
                "name": "loop0",
                "measures": {"ops": {
                    "write": {"user_ios": 16, "commands": commands, "bytes": 16 << 20},
                    "read": {"user_ios": 3, "commands": 3, "bytes": 12288},
                }},
                "partitions": [],
            }],
        })
    }

    /// The prediction is checked on the op it counted, not on every op.
    #[test]
    fn a_prediction_is_checked_on_the_op_whose_commands_it_started_from() {
        let before = report("loop0", 256, Some((256, 32)));
        let after = report("loop0", 40, None);
        let comparison = compare(("b", &before), ("a", &after), &[]);
        assert_eq!(comparison.devices.len(), 1);
        let check = &comparison.predictions[0];
        assert_eq!(check.scope, "write");
        assert_eq!(
            (check.predicted_commands, check.measured_commands),
            (32, Some(40))
        );
        assert_eq!(check.error, Some(0.25));
        let text = comparison.render_text(100);
        assert!(
            text.contains(
                "predicted 32 after the fix; measured 40 on loop0 (+25.0% off the prediction)"
            ),
            "{text}"
        );
        assert!(
            text.contains("the command took 2.0 s after against 2.0 s before (1.00×)"),
            "{text}"
        );
    }

    /// A fix that recreated the device under another name still compares.
    #[test]
    fn lone_busy_devices_of_different_names_pair_and_say_so() {
        let before = report("loop0", 256, Some((256, 32)));
        let mut after = report("loop0", 32, None);
        after["devices"][0]["name"] = json!("loop1");
        let comparison = compare(("b", &before), ("a", &after), &[]);
        assert_eq!(comparison.devices[0].after, "loop1");
        assert!(comparison.notes[0].contains("loop0 (before) compared with loop1 (after)"));
        assert_eq!(comparison.predictions[0].measured_commands, Some(32));
        let explicit = compare(
            ("b", &before),
            ("a", &after),
            &[("loop0".into(), "loop1".into())],
        );
        assert!(explicit.notes.is_empty());
        assert_eq!(explicit.predictions[0].error, Some(0.0));
    }
}
