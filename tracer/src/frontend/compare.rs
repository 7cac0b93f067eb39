//! `iosplit-trace compare BEFORE AFTER`: two reports of the same workload,
//! one taken before a fix and one after, side by side, and each prediction
//! BEFORE made (`what_if`) against what AFTER measured. This is how a user
//! proves a fix, and how the what-if tests check theirs.
//!
//! Either side is a JSON report (`report --json`, `run --json`, `analyze
//! --json`) or a recording, which is analyzed first. Reports are read into
//! the report model's types, so a field renamed or missing is an error that
//! names the file, never a count of 0; fields added since a report was
//! written have defaults.

use std::path::Path;
use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::CompareArgs;
use crate::error::{Context, Error, Result};
use crate::model::{Code, DeviceReport, Measures, Op, OpMeasures, RunReport, WhatIf};
use crate::record::Recording;

use super::analyze::{replay, Views};
use super::output::{Document, Format, Output};
use super::units;

/// The operations a report measures, in its order; flushes carry no data.
const DATA_OPS: [Op; 4] = [Op::Read, Op::Write, Op::Discard, Op::Other];

/// A report as `compare` reads it: the parts of [`crate::model::Report`] it
/// compares, in the model's own types.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ComparedReport {
    /// Seconds of tracing the report covers.
    duration_s: f64,
    diagnoses: Vec<Predicting>,
    devices: Vec<DeviceReport>,
    /// Present for `run`.
    run: Option<RunReport>,
}

/// A diagnosis as `compare` reads it: its code, its device and the
/// prediction its evidence carries, if any.
#[derive(Clone, Debug, PartialEq, Deserialize)]
struct Predicting {
    code: Code,
    device: String,
    evidence: PredictingEvidence,
}

/// The evidence's `what_if`; the rest of it differs by code.
#[derive(Clone, Debug, PartialEq, Deserialize)]
struct PredictingEvidence {
    what_if: Option<WhatIf>,
}

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
    /// One operation's measures; an operation the side did not see is all 0.
    fn of(op: Option<&OpMeasures>) -> Side {
        let Some(op) = op else {
            return Side::default();
        };
        Side {
            user_ios: op.user_ios,
            commands: op.commands,
            bytes: op.bytes,
            command_size_p50: op.command_size.p50,
            issue_to_complete_p50_us: op.issue_to_complete_us.p50,
            issue_to_complete_p99_us: op.issue_to_complete_us.p99,
            queue_to_complete_p50_us: op.queue_to_complete_us.p50,
            queue_to_complete_p99_us: op.queue_to_complete_us.p99,
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
    pub code: Code,
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

/// A JSON report, or a recording analyzed into one.
fn load(path: &Path) -> Result<ComparedReport> {
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
        return read_report(path, &bytes);
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
    let json = serde_json::to_vec(&analysis.report)
        .with_context(|| format!("cannot compare {}", path.display()))?;
    read_report(path, &json)
}

/// `json`, the report of `path`, in the model's types: one line naming the
/// file and what is wrong when a field is missing or of the wrong type.
fn read_report(path: &Path, json: &[u8]) -> Result<ComparedReport> {
    serde_json::from_slice(json).map_err(|err| {
        Error::usage(format!(
            "{} is not a report this version can compare: {err}",
            path.display()
        ))
    })
}

/// Every disk and partition of a report, by name, with its measures.
fn devices(report: &ComparedReport) -> Vec<(String, &Measures)> {
    let mut found = Vec::new();
    for disk in &report.devices {
        found.push((disk.name.clone(), &disk.measures));
        for part in &disk.partitions {
            found.push((part.name.clone(), &part.measures));
        }
    }
    found
}

/// The measures of the device named `name`.
fn measures_of<'a>(side: &[(String, &'a Measures)], name: &str) -> Option<&'a Measures> {
    side.iter().find(|(n, _)| n == name).map(|(_, m)| *m)
}

/// Commands of `op` in `measures`; 0 when the device saw none of it.
fn commands(measures: &Measures, op: Op) -> u64 {
    measures.op(op).map_or(0, |measured| measured.commands)
}

fn has_traffic(measures: &Measures) -> bool {
    DATA_OPS.iter().any(|&op| commands(measures, op) > 0)
}

/// Commands of all data operations of one device's measures.
fn data_commands(measures: &Measures) -> u64 {
    DATA_OPS.iter().map(|&op| commands(measures, op)).sum()
}

/// Pairs the devices (by `pairs`, then by name; a lone busy device on
/// each side pairs with the other), compares them and checks BEFORE's
/// predictions.
pub fn compare(
    (before_name, before): (&str, &ComparedReport),
    (after_name, after): (&str, &ComparedReport),
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
        let busy = |side: &[(String, &Measures)]| -> Vec<String> {
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
    let mut device_pairs = Vec::new();
    for (b, a) in &paired {
        let (Some(old_m), Some(new_m)) = (measures_of(&old, b), measures_of(&new, a)) else {
            notes.push(format!("--pair {b}={a}: no such device on one side"));
            continue;
        };
        let ops = DATA_OPS
            .iter()
            .filter(|&&op| old_m.op(op).is_some() || new_m.op(op).is_some())
            .map(|&op| OpPair {
                op: op.as_str().to_string(),
                before: Side::of(old_m.op(op)),
                after: Side::of(new_m.op(op)),
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
    for diagnosis in &before.diagnoses {
        let Some(what_if) = &diagnosis.evidence.what_if else {
            continue;
        };
        let (now, predicted) = (what_if.commands_now, what_if.commands_after_fix);
        let device = diagnosis.device.clone();
        // The scope is the op whose BEFORE commands the prediction started
        // from; failing that (`None`), all data operations.
        let scope = measures_of(&old, &device).and_then(|m| {
            DATA_OPS
                .iter()
                .copied()
                .find(|&op| m.op(op).map(|measured| measured.commands) == Some(now))
        });
        let measured_on = paired
            .iter()
            .find(|(b, _)| *b == device)
            .map(|(_, a)| a.clone());
        let measured =
            measured_on
                .as_ref()
                .and_then(|a| measures_of(&new, a))
                .map(|m| match scope {
                    None => data_commands(m),
                    Some(op) => commands(m, op),
                });
        predictions.push(PredictionCheck {
            code: diagnosis.code,
            device,
            measured_on,
            scope: scope.map_or("data", Op::as_str).to_string(),
            commands_now: now,
            predicted_commands: predicted,
            measured_commands: measured,
            error: measured
                .filter(|_| predicted > 0)
                .map(|m| (m as f64 - predicted as f64) / predicted as f64),
        });
    }
    Comparison {
        before: before_name.to_string(),
        after: after_name.to_string(),
        before_duration_s: before.duration_s,
        after_duration_s: after.duration_s,
        timed_runs: before.run.is_some() && after.run.is_some(),
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::frontend::test_reports::{empty_report, seed_diagnosis};
    use crate::model::{Report, WhatIf};

    /// loop0 wrote 16 MiB in `commands` commands and read 3 pages;
    /// `what_if` is a prediction of its commands now and after a fix.
    fn report(device: &str, commands: u64, what_if: Option<(u64, u64)>) -> Report {
        let mut report = empty_report();
        report.duration_s = 2.0;
        report.run = Some(RunReport::default());
        if let Some((now, after)) = what_if {
            let mut diagnosis = seed_diagnosis();
            diagnosis.device = device.to_string();
            diagnosis.evidence.set_what_if(WhatIf {
                commands_now: now,
                commands_after_fix: after,
                ..WhatIf::default()
            });
            report.diagnoses.push(diagnosis);
        }
        let op = |user_ios, commands, bytes| OpMeasures {
            user_ios,
            commands,
            bytes,
            ..OpMeasures::default()
        };
        report.devices.push(DeviceReport {
            name: "loop0".to_string(),
            dev: "7:0".to_string(),
            geometry: Default::default(),
            geometry_known: true,
            measures: Measures {
                ops: BTreeMap::from([
                    (Op::Write, op(16, commands, 16 << 20)),
                    (Op::Read, op(3, 3, 12288)),
                ]),
                ..Default::default()
            },
            partitions: Vec::new(),
            gone: false,
            service: BTreeMap::new(),
            tag_waits: Vec::new(),
            passthrough: Vec::new(),
        });
        report
    }

    /// `report` as `compare` reads it from a file.
    fn read(report: &Report) -> ComparedReport {
        let json = serde_json::to_vec_pretty(report).unwrap();
        read_report(Path::new("report.json"), &json).unwrap()
    }

    /// The prediction is checked on the op it counted, not on every op.
    #[test]
    fn a_prediction_is_checked_on_the_op_whose_commands_it_started_from() {
        let before = read(&report("loop0", 256, Some((256, 32))));
        let after = read(&report("loop0", 40, None));
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
        let json = serde_json::to_value(&comparison).unwrap();
        assert_eq!(json["predictions"][0]["code"], "subpage_block_size");
        assert_eq!(json["devices"][0]["ops"][0]["op"], "read");
    }

    /// A fix that recreated the device under another name still compares.
    #[test]
    fn lone_busy_devices_of_different_names_pair_and_say_so() {
        let before = read(&report("loop0", 256, Some((256, 32))));
        let mut renamed = report("loop0", 32, None);
        renamed.devices[0].name = "loop1".to_string();
        let after = read(&renamed);
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

    /// A field renamed (or dropped) in a report is an error that names the
    /// file and the field, on one line: never a count of 0.
    #[test]
    fn a_renamed_field_is_an_error_not_a_zero() {
        let mut json = serde_json::to_value(report("loop0", 256, Some((256, 32)))).unwrap();
        let write = json["devices"][0]["measures"]["ops"]["write"]
            .as_object_mut()
            .unwrap();
        let commands = write.remove("commands").unwrap();
        write.insert("command_count".to_string(), commands);
        let bytes = serde_json::to_vec_pretty(&json).unwrap();
        let error = read_report(Path::new("before.json"), &bytes)
            .unwrap_err()
            .chain_text();
        assert!(error.starts_with("before.json is not a report"), "{error}");
        assert!(error.contains("missing field `commands`"), "{error}");
        assert!(!error.contains('\n'), "{error}");

        let mut json = serde_json::to_value(report("loop0", 256, Some((256, 32)))).unwrap();
        json["diagnoses"][0]["evidence"]["what_if"]
            .as_object_mut()
            .unwrap()
            .remove("commands_after_fix");
        let bytes = serde_json::to_vec(&json).unwrap();
        let error = read_report(Path::new("before.json"), &bytes)
            .unwrap_err()
            .chain_text();
        assert!(
            error.contains("missing field `commands_after_fix`"),
            "{error}"
        );
    }

    /// What the engine's reports hold reads back as it was written.
    #[test]
    fn a_report_reads_back_as_written() {
        let mut written = crate::frontend::test_reports::requeued_report();
        written.run = Some(RunReport::default());
        let model = crate::model::ServiceModel {
            commands_fitted: 128,
            per_command_ms: 0.25,
            ms_per_mib: 1.5,
            in_flight: 2.0,
            ceiling_mib_per_s: 666.667,
            busy_ms: 40.0,
            span_ms: 55.0,
            bound: crate::model::ServiceBound::Iops,
        };
        written.devices[0].service.insert(Op::Write, model);
        written.diagnoses[0].evidence.set_what_if(WhatIf {
            time_after_fix_bounds_ms: None,
            commands_now: 129,
            commands_after_fix: 16,
            time_now_ms: Some(32.5),
            time_after_fix_ms: Some(4.0),
            time_unavailable: None,
            service_model: Some(model),
            busy_ms: Some(40.0),
            segments: Some(crate::model::SegmentSource::PartlyObserved),
        });
        let read = read(&written);
        assert_eq!(read.devices, written.devices);
        assert_eq!(read.duration_s, written.duration_s);
        assert_eq!(read.run, written.run);
        let codes: Vec<Code> = written.diagnoses.iter().map(|d| d.code).collect();
        assert_eq!(
            read.diagnoses.iter().map(|d| d.code).collect::<Vec<_>>(),
            codes
        );
        let what_ifs: Vec<Option<&WhatIf>> = written
            .diagnoses
            .iter()
            .map(|d| d.evidence.what_if())
            .collect();
        assert_eq!(
            read.diagnoses
                .iter()
                .map(|d| d.evidence.what_if.as_ref())
                .collect::<Vec<_>>(),
            what_ifs
        );
    }
}
