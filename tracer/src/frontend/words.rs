//! Measures and predictions as sentences: the one place the human views
//! (the text report, the TUI detail pane, the HTML page) take their words
//! from, so they say the same thing the same way and none of them prints a
//! measure as JSON. The JSON output is serialized from the model and does
//! not pass through here.
//!
//! A view picks where a sentence goes and how it is wrapped; what the
//! sentence says, and which measures it leaves out because they are zero,
//! is decided here.

use serde_json::Value;

use super::units;
use crate::explain::WhoPays;
use crate::model::{
    ratio, Code, Diagnosis, Distribution, Dominant, Evidence, Measures, Op, OpMeasures, Report,
    RunReport, RunTimeWithFix, SegmentSource, ServiceBound, ServiceModel, Severity,
    TimeUnavailable, WhatIf,
};

/// Evidence keys told in their own sentences (see [`what_ifs`]), not in the
/// evidence line.
const PREDICTION_KEYS: [&str; 2] = ["what_if", "workaround_what_if"];

/// `write` → "writes": what a sentence calls an operation's I/Os.
pub fn op_plural(op: Op) -> &'static str {
    match op {
        Op::Read => "reads",
        Op::Write => "writes",
        Op::Discard => "discards",
        Op::Flush => "flushes",
        Op::Other => "other I/Os",
    }
}

/// A disk's or partition's measures in the report, by name.
pub fn measures_of<'a>(report: &'a Report, device: &str) -> Option<&'a Measures> {
    report.devices.iter().find_map(|disk| {
        if disk.name == device {
            return Some(&disk.measures);
        }
        disk.partitions
            .iter()
            .find(|part| part.name == device)
            .map(|part| &part.measures)
    })
}

/// Which of a diagnosis's predictions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// `evidence.what_if`: what the fix would buy.
    Fix,
    /// `evidence.workaround_what_if`: what the workaround the fix names would buy.
    Workaround,
}

impl Prediction {
    /// The label a view puts before the sentence; the sentence itself says
    /// whether the fix or the workaround is meant.
    pub fn label(self) -> &'static str {
        "what if"
    }
}

/// One prediction of a diagnosis, in words.
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    pub prediction: Prediction,
    pub sentence: String,
}

/// The operation a diagnosis's predictions are about, when it is known:
/// the sub-page finding replays the writes; a requeue finding the
/// operation with the most requeues on its device (as the engine picks it);
/// the others replay all data I/O together.
pub fn what_if_op(diagnosis: &Diagnosis, measures: Option<&Measures>) -> Option<Op> {
    match &diagnosis.evidence {
        Evidence::SubpageBlockSize(_) => Some(Op::Write),
        Evidence::RequeuedCommands(_) => measures?
            .ops
            .iter()
            .max_by_key(|(_, op)| op.requeues)
            .filter(|(_, op)| op.requeues > 0)
            .map(|(op, _)| *op),
        Evidence::MisalignedStart(_)
        | Evidence::MisalignedIoOpt(_)
        | Evidence::MisalignedStack(_)
        | Evidence::CryptSectorSize(_)
        | Evidence::AtomicWritesLost(_)
        | Evidence::SplitAmplification(_)
        | Evidence::MergeBlocked(_)
        | Evidence::IoErrors(_) => None,
    }
}

/// Every prediction of a diagnosis, fix first, as a sentence. `measures`
/// are the diagnosed device's, to name the operation (see [`what_if_op`]).
pub fn what_ifs(diagnosis: &Diagnosis, measures: Option<&Measures>) -> Vec<Said> {
    let subject = match what_if_op(diagnosis, measures) {
        Some(op) => op_plural(op),
        None => "I/Os",
    };
    let (counted, workaround) = match &diagnosis.evidence {
        // Requeue predictions count what the device was handed: each
        // command once, plus once more per requeue.
        Evidence::RequeuedCommands(evidence) => {
            ("device issues", evidence.workaround_what_if.as_ref())
        }
        Evidence::SubpageBlockSize(_)
        | Evidence::MisalignedStart(_)
        | Evidence::MisalignedIoOpt(_)
        | Evidence::MisalignedStack(_)
        | Evidence::CryptSectorSize(_)
        | Evidence::AtomicWritesLost(_)
        | Evidence::SplitAmplification(_)
        | Evidence::MergeBlocked(_)
        | Evidence::IoErrors(_) => ("commands", None),
    };
    let mut said = Vec::new();
    if let Some(fix) = diagnosis.evidence.what_if() {
        said.push(Said {
            prediction: Prediction::Fix,
            sentence: what_if_sentence(fix, Prediction::Fix, subject, counted),
        });
    }
    if let Some(workaround) = workaround {
        said.push(Said {
            prediction: Prediction::Workaround,
            sentence: what_if_sentence(workaround, Prediction::Workaround, subject, counted),
        });
    }
    said
}

/// "the fix would take these writes from 1,000 commands to ~130 (7.69x
/// fewer); time not estimated". Every field of [`WhatIf`] is said: the
/// times when present, and that they are not estimated when absent; the
/// segments when they were assumed rather than read.
pub fn what_if_sentence(
    what_if: &WhatIf,
    prediction: Prediction,
    subject: &str,
    counted: &str,
) -> String {
    let (now, after) = (what_if.commands_now, what_if.commands_after_fix);
    let change = if after == 0 || after == now {
        String::new()
    } else if after < now {
        format!(" ({}x fewer)", units::ratio(now as f64 / after as f64))
    } else if now == 0 {
        String::new()
    } else {
        format!(" ({}x more)", units::ratio(after as f64 / now as f64))
    };
    let who = match prediction {
        Prediction::Fix => "the fix",
        Prediction::Workaround => "the workaround",
    };
    let mut sentence = format!(
        "{who} would take these {subject} from {} {counted} to ~{}{change}",
        units::thousands(now),
        units::thousands(after)
    );
    let time = |ms: f64| units::micros((ms.max(0.0) * 1000.0).round() as u64);
    match (what_if.time_now_ms, what_if.time_after_fix_ms) {
        (Some(now), Some(after)) => sentence.push_str(&format!(
            ", and their device time from {} to ~{}",
            time(now),
            time(after)
        )),
        (Some(now), None) => sentence.push_str(&format!(
            "; device time now {}, after it not estimated",
            time(now)
        )),
        (None, Some(after)) => {
            sentence.push_str(&format!("; device time after it ~{}", time(after)))
        }
        (None, None) => match what_if.time_after_fix_bounds_ms {
            Some(bounds) => sentence.push_str(&format!(
                "; their device time ~{} if each command costs the same (an IOPS-capped disk), ~{} if it goes with the bytes: every command had one size, so the two cannot be told apart",
                time(bounds.iops_bound),
                time(bounds.bandwidth_bound),
            )),
            None => {
                sentence.push_str("; time not estimated");
                if let Some(reason) = what_if.time_unavailable {
                    sentence.push_str(": ");
                    sentence.push_str(time_unavailable(reason));
                }
            }
        },
    }
    match (&what_if.service_model, what_if.busy_ms) {
        (Some(model), _) => {
            sentence.push_str(&format!(" (device model: {})", service_model(model)))
        }
        // The model carries the busy time; without one it is said alone.
        (None, Some(busy)) => {
            sentence.push_str(&format!("; the device was busy {} in all", time(busy)))
        }
        (None, None) => {}
    }
    // Read segment counts are the rule; an assumed density is said.
    match what_if.segments {
        Some(SegmentSource::OnePerPage) => {
            sentence.push_str("; segments assumed one per page (not read from the bios)")
        }
        Some(SegmentSource::PartlyObserved) => sentence
            .push_str("; segments read from the bios, one per page assumed where they were not"),
        Some(SegmentSource::Observed) | None => {}
    }
    sentence
}

/// "mkfs.ext4 took 31.4 s; with the fix ≈ 4.2 s (7.48x faster)
/// (split_amplification on loop0p1, which was busy 29.8 s of the run: only
/// that part is scaled)".
pub fn run_time_with_fix(run: &RunReport, estimate: &RunTimeWithFix) -> String {
    let program = run
        .command
        .first()
        .map(|path| path.rsplit('/').next().unwrap_or(path))
        .unwrap_or("the command");
    let took = format!("{program} took {}", seconds_short(estimate.run_s));
    let mut words = time_with_fix_words(&took, estimate);
    if estimate.reads_after_fix > 0 {
        words.push_str(&format!(
            ". With 4 KiB blocks its writes that cover a page in part would first read it: {} reads of 4 KiB{}",
            units::thousands(estimate.reads_after_fix),
            match estimate.run_after_fix_s {
                Some(_) => ", counted in that time",
                None => "",
            },
        ));
    }
    if estimate.pays_little {
        words.push_str(&format!(
            ". This run paid little for {}: the fix would take its {} commands to ~{}",
            estimate.code,
            units::thousands(estimate.commands_now),
            units::thousands(estimate.commands_after_fix),
        ));
        let pays = Code::named(&estimate.code).map(crate::explain::who_pays);
        if let Some(WhoPays::Workloads(who)) = pays {
            words.push_str(&format!(". It costs most {who}"));
        }
    }
    words
}

fn time_with_fix_words(took: &str, estimate: &RunTimeWithFix) -> String {
    if let (None, Some(bounds)) = (estimate.run_after_fix_s, estimate.run_after_fix_bounds_s) {
        return format!(
            "{took}; with the fix of {} on {} between ≈ {} if each command costs the same (an IOPS-capped disk) and ≈ {} if the time goes with the bytes: every command had one size, so which of the two the device is cannot be told from this run",
            estimate.code,
            estimate.device,
            seconds_short(bounds.iops_bound),
            seconds_short(bounds.bandwidth_bound),
        );
    }
    match (estimate.run_after_fix_s, estimate.unavailable) {
        (Some(after), None) => {
            let change = match estimate.speedup {
                Some(speedup) if speedup >= 1.005 => {
                    format!(" ({}x faster)", units::ratio(speedup))
                }
                Some(speedup) if speedup > 0.0 && speedup <= 0.995 => {
                    format!(" ({}x slower)", units::ratio(1.0 / speedup))
                }
                _ => " (no faster: the device's time went to bytes, not commands)".to_string(),
            };
            format!(
                "{took}; with the fix ≈ {}{change} ({} on {}, which was busy {} of the run: only that part is scaled)",
                seconds_short(after),
                estimate.code,
                estimate.device,
                seconds_short(estimate.device_busy_s.unwrap_or(0.0)),
            )
        }
        (_, reason) => {
            let busy = estimate
                .device_busy_s
                .map(|busy| {
                    format!(
                        " ({} was busy {} of it)",
                        estimate.device,
                        seconds_short(busy)
                    )
                })
                .unwrap_or_default();
            format!(
                "{took}{busy}; its time with the fix of {} on {} is not estimated: {}",
                estimate.code,
                estimate.device,
                time_unavailable(reason.unwrap_or(TimeUnavailable::NoServiceTime))
            )
        }
    }
}

/// Seconds with about three significant digits: `31.4 s`, `0.42 s`, `125 s`.
fn seconds_short(value: f64) -> String {
    format!("{} s", units::ratio(value.max(0.0)))
}

/// Why a what-if has no time, as a clause.
pub fn time_unavailable(reason: TimeUnavailable) -> &'static str {
    match reason {
        TimeUnavailable::TooFewCommands => "too few commands measured to fit the device (32 needed)",
        TimeUnavailable::OneCommandSize => {
            "nearly every command had one size, so a command's cost cannot be told from its bytes'"
        }
        TimeUnavailable::NoServiceTime => "no issue-to-complete time was measured on this device",
        TimeUnavailable::NotIoBound => {
            "the device was busy less than a fifth of the run, so the run's time is not the device's"
        }
    }
}

/// "~0.42 ms per command + 2.1 ms/MiB, 4 in flight, IOPS-bound".
pub fn service_model(model: &ServiceModel) -> String {
    let ms = |value: f64| {
        let us = (value * 1000.0).max(0.0);
        if us < 1000.0 {
            format!("{} µs", units::ratio(us))
        } else {
            format!("{} ms", units::ratio(value))
        }
    };
    let bound = match model.bound {
        ServiceBound::Latency => "latency-bound",
        ServiceBound::Iops => "IOPS-bound",
        ServiceBound::Bandwidth => "bandwidth-bound",
    };
    format!(
        "~{} per command + {}/MiB, {} in flight, {bound}",
        ms(model.per_command_ms),
        ms(model.ms_per_mib),
        units::ratio(model.in_flight)
    )
}

/// "66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms
/// before re-issue"; `None` when nothing was requeued, so quiet devices stay
/// quiet. A command can be requeued more than once, so the share is
/// requeues per command.
pub fn requeues(measures: &OpMeasures) -> Option<String> {
    if measures.requeues == 0 {
        return None;
    }
    let delay = &measures.requeue_delay_us;
    let waited = if delay.count == 0 {
        "no re-issue seen yet".to_string()
    } else {
        format!(
            "waiting p50 {} / p99 {} before re-issue",
            units::micros(delay.p50),
            units::micros(delay.p99)
        )
    };
    Some(format!(
        "{} requeue{} for {} commands ({}), {waited}",
        units::thousands(measures.requeues),
        if measures.requeues == 1 { "" } else { "s" },
        units::thousands(measures.commands),
        units::percent(measures.requeue_share()),
    ))
}

/// "40 waits for a free scheduler tag (nr_requests 4) on hardware queue 0:
/// the queue was full"; `None` when no submitter waited.
pub fn tag_waits(waits: &[crate::model::TagWaitReport]) -> Option<String> {
    if waits.is_empty() {
        return None;
    }
    let each = waits
        .iter()
        .map(|wait| {
            let tags = match wait.tags.as_str() {
                "scheduler" => format!("scheduler tag (nr_requests {})", wait.nr_tags),
                _ => format!("driver tag (queue depth {})", wait.nr_tags),
            };
            format!(
                "{} wait{} for a free {tags} on hardware queue {}",
                units::thousands(wait.waits),
                if wait.waits == 1 { "" } else { "s" },
                wait.hctx
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(format!(
        "{each}: the queue was full, and that wait is part of queue time"
    ))
}

/// "64 passthrough writes, 256 KiB in sectors 2048..2560 (their NVMe
/// commands' ranges)", per op, and the ones whose range is unknown; `None`
/// when none was issued.
pub fn passthrough(ops: &[crate::model::PassthroughReport]) -> Option<String> {
    if ops.is_empty() {
        return None;
    }
    let each = ops
        .iter()
        .map(|op| {
            let plural = if op.commands == 1 { "" } else { "s" };
            let named = match op.op.as_str() {
                "unknown" => format!("{} passthrough command{plural}", units::thousands(op.commands)),
                name => format!(
                    "{} passthrough {}{plural}",
                    units::thousands(op.commands),
                    name.replace('_', " ")
                ),
            };
            let ranged = match op.with_range {
                0 => String::new(),
                n => format!(
                    ", {} in sectors {}..{}{}",
                    units::bytes((op.sectors * 512) as f64),
                    op.first_sector,
                    op.end_sector,
                    if n == op.commands {
                        String::new()
                    } else {
                        format!(" ({} with a range)", units::thousands(n))
                    }
                ),
            };
            let unranged = op.commands - op.with_range;
            let without = match (unranged, op.op.as_str()) {
                (0, _) => String::new(),
                (_, "unknown") => " without a range: their NVMe commands were not seen (the BTF probes and a loaded nvme module show them)".to_string(),
                (_, "flush" | "discard" | "other") => String::new(),
                (n, _) => format!(", {} without a range", units::thousands(n)),
            };
            format!("{named}{ranged}{without}")
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(each)
}

/// "64 untorn writes of 16 KiB: each one command of its own sectors", or
/// the ones that were not, by reason and with the first by sector; `None`
/// when no write asked to be untorn.
pub fn atomic_writes(atomic: &crate::model::AtomicWrites) -> Option<String> {
    let total = atomic.proven + atomic.not_proven;
    if total == 0 {
        return None;
    }
    let sizes = if atomic.smallest_bytes == atomic.largest_bytes {
        format!("of {}", units::bytes(atomic.smallest_bytes as f64))
    } else {
        format!(
            "of {} to {}",
            units::bytes(atomic.smallest_bytes as f64),
            units::bytes(atomic.largest_bytes as f64)
        )
    };
    let writes = format!(
        "{} untorn write{} {sizes}",
        units::thousands(total),
        if total == 1 { "" } else { "s" }
    );
    if atomic.not_proven == 0 {
        let each = if total == 1 { "it went" } else { "each went" };
        return Some(format!(
            "{writes}: {each} down as one command of its own sectors (proven)"
        ));
    }
    let reasons = atomic
        .reasons
        .iter()
        .map(|(reason, count)| format!("{} {}", units::thousands(*count), reason.replace('_', " ")))
        .collect::<Vec<_>>()
        .join(", ");
    let first = atomic
        .not_proven_writes
        .first()
        .map(|miss| {
            format!(
                "; first at sector {} ({}, {})",
                miss.sector,
                units::bytes(miss.bytes as f64),
                miss.reason.replace('_', " ")
            )
        })
        .unwrap_or_default();
    Some(format!(
        "{writes}: {} proven one command each, {} not ({reasons}){first}",
        units::thousands(atomic.proven),
        units::thousands(atomic.not_proven),
    ))
}

/// "3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os
/// failed"; `None` when nothing failed, so healthy devices stay quiet. A
/// failure whose command was issued before the trace began is counted
/// without one, so the share is not claimed when failures exceed commands.
pub fn failures(op: Op, measures: &OpMeasures) -> Option<String> {
    let (failed, user_ios) = (measures.failed_commands, measures.failed_user_ios);
    if failed == 0 && user_ios == 0 {
        return None;
    }
    let mut said = Vec::new();
    if failed > 0 {
        let (of, plural) = match measures.commands >= failed {
            true => (
                format!(
                    "{} of {} ",
                    units::thousands(failed),
                    units::thousands(measures.commands)
                ),
                true,
            ),
            false => (format!("{} ", units::thousands(failed)), failed != 1),
        };
        let statuses = match measures.errors.is_empty() {
            true => String::new(),
            false => format!(" ({})", crate::explain::statuses(&measures.errors)),
        };
        said.push(format!(
            "{of}{} command{} failed{statuses}",
            op.as_str(),
            if plural { "s" } else { "" },
        ));
    }
    if user_ios > 0 {
        said.push(format!(
            "{} user I/O{} failed",
            units::thousands(user_ios),
            if user_ios == 1 { "" } else { "s" }
        ));
    }
    Some(said.join("; "))
}

/// An owner's average user I/O: its bytes over its user I/Os, as the
/// report's attribution counts both (at queue). The TUI's owner rows and
/// the text report's owner sections both show this number.
pub fn bytes_per_user_io(bytes: u64, user_ios: u64) -> f64 {
    ratio(bytes, user_ios)
}

/// Every measure of one operation on one device, a sentence each; zero
/// counts that would only say "nothing happened" are left out.
pub fn op_sentences(op: Op, m: &OpMeasures) -> Vec<String> {
    let mut said = vec![format!(
        "{} {} (user I/Os, {} in all, avg {}) became {} fragments and {} commands (avg {}): {} commands per user I/O",
        units::thousands(m.user_ios),
        op_plural(op),
        units::bytes(m.bytes as f64),
        units::bytes(m.user_io_size.mean),
        units::thousands(m.fragments),
        units::thousands(m.commands),
        units::bytes(m.command_size.mean),
        units::ratio(m.amplification),
    )];
    if m.splits > 0 {
        let causes = m
            .split_causes
            .iter()
            .map(|(cause, count)| format!("{cause} {}", units::thousands(*count)))
            .collect::<Vec<_>>();
        let causes = match causes.is_empty() {
            true => String::new(),
            false => format!(", by cause: {}", causes.join(", ")),
        };
        said.push(format!(
            "{} user I/Os split ({}), {} splits in all{causes}",
            units::thousands(m.split_user_ios),
            units::percent(m.split_share()),
            units::thousands(m.splits),
        ));
    }
    if m.merges > 0 {
        said.push(format!(
            "{} merges ({} of user I/Os)",
            units::thousands(m.merges),
            units::percent(m.merge_share())
        ));
    }
    if m.misaligned_pbs_commands > 0 || m.misaligned_4k_commands > 0 {
        said.push(format!(
            "{} commands ({}) not aligned to the physical block, {} ({}) not aligned to 4 KiB",
            units::thousands(m.misaligned_pbs_commands),
            units::percent(m.misaligned_pbs_share()),
            units::thousands(m.misaligned_4k_commands),
            units::percent(m.misaligned_4k_share()),
        ));
    }
    if let Some(untorn) = m.atomic_writes.as_ref().and_then(atomic_writes) {
        said.push(untorn);
    }
    let latencies = [
        ("queue to complete", &m.queue_to_complete_us),
        ("queue to issue", &m.queue_to_issue_us),
        ("issue to complete", &m.issue_to_complete_us),
    ]
    .into_iter()
    .filter_map(|(label, dist)| percentiles(dist).map(|p| format!("{label} {p}")))
    .collect::<Vec<_>>();
    if !latencies.is_empty() {
        let dominant = match m.dominant {
            Some(Dominant::Queue) => "; queue time dominates",
            Some(Dominant::Device) => "; device time dominates",
            None => "",
        };
        said.push(format!("latency {}{dominant}", latencies.join(", ")));
    }
    if m.commands_per_io.count > 0 {
        said.push(format!(
            "commands per user I/O p50 {}, p99 {}, max {}",
            m.commands_per_io.p50, m.commands_per_io.p99, m.commands_per_io.max
        ));
    }
    said.extend(requeues(m));
    said.extend(failures(op, m));
    said
}

/// "p50 1 ms / p99 4.1 ms", or `None` without samples.
fn percentiles(dist: &Distribution) -> Option<String> {
    (dist.count > 0).then(|| {
        format!(
            "p50 {} / p99 {}",
            units::micros(dist.p50),
            units::micros(dist.p99)
        )
    })
}

/// A diagnosis's evidence as `(key, value)` pairs, keys sorted as in its
/// JSON, values in plain text (nested maps as `key:value` lists); the
/// predictions are left out, told by [`what_ifs`].
pub fn evidence_pairs(diagnosis: &Diagnosis) -> Vec<(String, String)> {
    diagnosis
        .evidence
        .to_map()
        .into_iter()
        .filter(|(key, _)| !PREDICTION_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key, plain(&value)))
        .collect()
}

/// The evidence as one `key=value` line (see [`evidence_pairs`]).
pub fn evidence_line(diagnosis: &Diagnosis) -> String {
    evidence_pairs(diagnosis)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A JSON value without JSON's punctuation: strings bare, maps as
/// `key:value` joined by commas, lists joined by commas.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "none".to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(","),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}:{}", plain(value)))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Diagnoses, most severe first; engine order within one severity.
pub fn by_severity(diagnoses: &[Diagnosis]) -> Vec<&Diagnosis> {
    let mut sorted: Vec<&Diagnosis> = diagnoses.iter().collect();
    sorted.sort_by_key(|diagnosis| std::cmp::Reverse(diagnosis.severity));
    sorted
}

/// How the text report, the TUI and the HTML page name a severity.
pub fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING",
        Severity::Info => "INFO",
    }
}

#[cfg(test)]
mod tag_wait_tests {
    use super::tag_waits;
    use crate::model::TagWaitReport;

    #[test]
    fn passthrough_names_each_ops_range_and_the_unknown_ones() {
        use crate::model::PassthroughReport;
        assert_eq!(super::passthrough(&[]), None);
        let write = PassthroughReport {
            op: "write".into(),
            commands: 64,
            with_range: 64,
            sectors: 512,
            first_sector: 2048,
            end_sector: 2560,
        };
        let unknown = PassthroughReport {
            op: "unknown".into(),
            commands: 2,
            with_range: 0,
            sectors: 0,
            first_sector: 0,
            end_sector: 0,
        };
        let text = super::passthrough(&[write, unknown]).unwrap();
        assert!(
            text.starts_with("64 passthrough writes, 256 KiB in sectors 2048..2560; "),
            "{text}"
        );
        assert!(
            text.contains(
                "2 passthrough commands without a range: their NVMe commands were not seen"
            ),
            "{text}"
        );
    }

    #[test]
    fn tag_waits_say_whose_tags_ran_out_and_where() {
        assert_eq!(tag_waits(&[]), None);
        let text = tag_waits(&[
            TagWaitReport {
                hctx: 0,
                tags: "scheduler".into(),
                waits: 40,
                nr_tags: 4,
            },
            TagWaitReport {
                hctx: 1,
                tags: "driver".into(),
                waits: 1,
                nr_tags: 128,
            },
        ])
        .unwrap();
        assert!(
            text.starts_with("40 waits for a free scheduler tag (nr_requests 4) on hardware queue 0; 1 wait for a free driver tag (queue depth 128) on hardware queue 1"),
            "{text}"
        );
    }
}

#[cfg(test)]
mod atomic_tests {
    use super::atomic_writes;
    use crate::model::{AtomicMiss, AtomicWrites};

    #[test]
    fn untorn_writes_are_proven_or_named_by_sector() {
        let mut atomic = AtomicWrites {
            proven: 64,
            smallest_bytes: 16384,
            largest_bytes: 16384,
            ..AtomicWrites::default()
        };
        assert_eq!(
            atomic_writes(&atomic).unwrap(),
            "64 untorn writes of 16 KiB: each went down as one command of its own sectors (proven)"
        );
        atomic.not_proven = 2;
        atomic.reasons.insert("failed".into(), 2);
        atomic.not_proven_writes.push(AtomicMiss {
            sector: 206_849,
            bytes: 16384,
            reason: "failed".into(),
        });
        let text = atomic_writes(&atomic).unwrap();
        assert!(
            text.starts_with("66 untorn writes of 16 KiB: 64 proven"),
            "{text}"
        );
        assert!(
            text.contains("2 not (2 failed); first at sector 206849"),
            "{text}"
        );
        assert_eq!(atomic_writes(&AtomicWrites::default()), None);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::frontend::test_reports::{requeued_diagnosis, requeued_writes, seed_report, writes};

    fn what_if(now: u64, after: u64) -> WhatIf {
        WhatIf {
            commands_now: now,
            commands_after_fix: after,
            time_now_ms: None,
            time_after_fix_ms: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_what_if_says_when_its_segments_were_assumed() {
        let said = |segments| {
            let what_if = WhatIf {
                segments,
                ..what_if(128, 16)
            };
            what_if_sentence(&what_if, Prediction::Fix, "writes", "commands")
        };
        assert_eq!(said(Some(SegmentSource::Observed)), said(None));
        assert!(said(Some(SegmentSource::OnePerPage))
            .ends_with("; segments assumed one per page (not read from the bios)"));
        assert!(said(Some(SegmentSource::PartlyObserved)).contains("one per page assumed where"));
    }

    #[test]
    fn a_what_if_names_its_op_its_counts_and_says_time_was_not_estimated() {
        assert_eq!(
            what_if_sentence(&what_if(128, 16), Prediction::Fix, "writes", "commands"),
            "the fix would take these writes from 128 commands to ~16 (8.00x fewer); time not estimated"
        );
        assert_eq!(
            what_if_sentence(&what_if(10, 10), Prediction::Fix, "I/Os", "commands"),
            "the fix would take these I/Os from 10 commands to ~10; time not estimated"
        );
        assert_eq!(
            what_if_sentence(
                &what_if(593, 700),
                Prediction::Workaround,
                "writes",
                "device issues"
            ),
            "the workaround would take these writes from 593 device issues to ~700 (1.18x more); time not estimated"
        );
    }

    #[test]
    fn a_what_if_says_the_times_it_has() {
        let both = WhatIf {
            time_now_ms: Some(45.0),
            time_after_fix_ms: Some(6.2),
            ..what_if(1000, 130)
        };
        assert_eq!(
            what_if_sentence(&both, Prediction::Fix, "writes", "commands"),
            "the fix would take these writes from 1,000 commands to ~130 (7.69x fewer), and their device time from 45 ms to ~6.2 ms"
        );
        let now_only = WhatIf {
            time_now_ms: Some(1500.0),
            ..what_if(1000, 130)
        };
        assert!(
            what_if_sentence(&now_only, Prediction::Fix, "writes", "commands")
                .ends_with("; device time now 1.5 s, after it not estimated")
        );
        let after_only = WhatIf {
            time_after_fix_ms: Some(0.4),
            ..what_if(1000, 130)
        };
        assert!(
            what_if_sentence(&after_only, Prediction::Fix, "writes", "commands")
                .ends_with("; device time after it ~400 µs")
        );
    }

    #[test]
    fn a_what_if_says_its_device_model_or_why_it_has_no_time() {
        let timed = WhatIf {
            time_now_ms: Some(31_400.0),
            time_after_fix_ms: Some(4_200.0),
            service_model: Some(ServiceModel {
                commands_fitted: 4000,
                per_command_ms: 0.42,
                ms_per_mib: 2.1,
                in_flight: 4.0,
                ceiling_mib_per_s: 1904.8,
                busy_ms: 31_400.0,
                span_ms: 32_000.0,
                bound: ServiceBound::Iops,
            }),
            ..what_if(128, 16)
        };
        assert_eq!(
            what_if_sentence(&timed, Prediction::Fix, "writes", "commands"),
            "the fix would take these writes from 128 commands to ~16 (8.00x fewer), and their device time from 31.4 s to ~4.2 s (device model: ~420 µs per command + 2.10 ms/MiB, 4.00 in flight, IOPS-bound)"
        );
        let few = WhatIf {
            time_unavailable: Some(TimeUnavailable::TooFewCommands),
            ..what_if(20, 10)
        };
        assert!(
            what_if_sentence(&few, Prediction::Fix, "writes", "commands").ends_with(
                "; time not estimated: too few commands measured to fit the device (32 needed)"
            )
        );
        let few_busy = WhatIf {
            busy_ms: Some(52.0),
            ..few
        };
        assert!(
            what_if_sentence(&few_busy, Prediction::Fix, "writes", "commands")
                .ends_with("(32 needed); the device was busy 52 ms in all")
        );
    }

    #[test]
    fn a_run_says_its_time_with_the_fix_or_why_not() {
        let run = RunReport {
            command: vec!["/sbin/mkfs.ext4".into(), "/dev/loop0p1".into()],
            ..RunReport::default()
        };
        let estimate = RunTimeWithFix {
            run_after_fix_bounds_s: None,
            code: "split_amplification".into(),
            device: "loop0p1".into(),
            run_s: 31.4,
            device_busy_s: Some(29.8),
            run_after_fix_s: Some(4.2),
            speedup: Some(31.4 / 4.2),
            unavailable: None,
            commands_now: 1024,
            commands_after_fix: 128,
            pays_little: false,
            reads_after_fix: 0,
        };
        let reading = RunTimeWithFix {
            reads_after_fix: 81,
            ..estimate.clone()
        };
        assert!(run_time_with_fix(&run, &reading).ends_with(
            "only that part is scaled). With 4 KiB blocks its writes that cover a page in part would first read it: 81 reads of 4 KiB, counted in that time"
        ));
        assert_eq!(
            run_time_with_fix(&run, &estimate),
            "mkfs.ext4 took 31.4 s; with the fix ≈ 4.20 s (7.48x faster) (split_amplification on loop0p1, which was busy 29.8 s of the run: only that part is scaled)"
        );
        let same = RunTimeWithFix {
            run_after_fix_s: Some(31.4),
            speedup: Some(1.0),
            ..estimate.clone()
        };
        assert!(run_time_with_fix(&run, &same).starts_with(
            "mkfs.ext4 took 31.4 s; with the fix ≈ 31.4 s (no faster: the device's time went to bytes, not commands)"
        ));
        let idle = RunTimeWithFix {
            run_after_fix_s: None,
            speedup: None,
            unavailable: Some(TimeUnavailable::NotIoBound),
            device_busy_s: Some(0.8),
            ..estimate
        };
        assert!(run_time_with_fix(&run, &idle).starts_with(
            "mkfs.ext4 took 31.4 s (loop0p1 was busy 0.80 s of it); its time with the fix of split_amplification on loop0p1 is not estimated: the device was busy less than a fifth"
        ));
        let unmeasured = RunTimeWithFix {
            device_busy_s: None,
            ..idle.clone()
        };
        assert!(run_time_with_fix(&run, &unmeasured)
            .starts_with("mkfs.ext4 took 31.4 s; its time with the fix"));
        // The seed's mkfs in a throttled 6.1 guest: 14 commands, 12 after the fix.
        let little = RunTimeWithFix {
            code: "subpage_block_size".into(),
            commands_now: 14,
            commands_after_fix: 12,
            pays_little: true,
            unavailable: Some(TimeUnavailable::TooFewCommands),
            ..idle
        };
        let words = run_time_with_fix(&run, &little);
        assert!(
            words.contains(
                ". This run paid little for subpage_block_size: the fix would take its 14 commands to ~12. It costs most buffered I/O through the raw partition"
            ),
            "{words}"
        );
    }

    #[test]
    fn the_op_of_a_what_if_is_named_when_known() {
        let report = seed_report();
        let subpage = report
            .diagnoses
            .iter()
            .find(|d| d.code == crate::model::Code::SubpageBlockSize)
            .unwrap();
        assert_eq!(what_if_op(subpage, None), Some(Op::Write));
        let split = report
            .diagnoses
            .iter()
            .find(|d| d.code == crate::model::Code::SplitAmplification)
            .unwrap();
        assert_eq!(what_if_op(split, measures_of(&report, "loop1")), None);

        let requeued = requeued_diagnosis("vda");
        let mut measures = Measures {
            ops: BTreeMap::from([
                (Op::Read, writes(&[(4096, 10)], &[(4096, 10)])),
                (Op::Write, requeued_writes()),
            ]),
            ..Default::default()
        };
        assert_eq!(what_if_op(&requeued, Some(&measures)), Some(Op::Write));
        let said = what_ifs(&requeued, Some(&measures));
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(said[0].prediction, Prediction::Fix);
        assert_eq!(
            said[0].sentence,
            "the fix would take these writes from 593 device issues to ~527 (1.13x fewer); time not estimated"
        );
        assert_eq!(said[1].prediction, Prediction::Workaround);
        assert!(
            said[1].sentence.starts_with(
                "the workaround would take these writes from 593 device issues to ~357"
            ),
            "{said:?}"
        );
        // Unknown without the device's measures, or without requeues in them.
        assert_eq!(what_if_op(&requeued, None), None);
        for op in measures.ops.values_mut() {
            op.requeues = 0;
        }
        assert_eq!(what_if_op(&requeued, Some(&measures)), None);
        assert!(what_ifs(&requeued, Some(&measures))[0]
            .sentence
            .contains("these I/Os"));
    }

    #[test]
    fn requeues_are_said_only_when_there_are_some() {
        let quiet = writes(&[(4096, 10)], &[(4096, 10)]);
        assert_eq!(requeues(&quiet), None);
        assert_eq!(
            requeues(&requeued_writes()).unwrap(),
            "66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms before re-issue"
        );
        let mut unseen = requeued_writes();
        unseen.requeues = 1;
        unseen.requeue_delay_us = Distribution::default();
        assert_eq!(
            requeues(&unseen).unwrap(),
            "1 requeue for 527 commands (0.2%), no re-issue seen yet"
        );
    }

    #[test]
    fn failures_are_said_only_when_there_are_some() {
        use crate::frontend::test_reports::failed_writes;
        let quiet = writes(&[(4096, 10)], &[(4096, 10)]);
        assert_eq!(failures(Op::Write, &quiet), None);
        assert_eq!(
            failures(Op::Write, &failed_writes()).unwrap(),
            "3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os failed"
        );
        // Ties by name; one failure; none of the user I/Os it carried seen.
        let mut one = failed_writes();
        one.failed_commands = 1;
        one.failed_user_ios = 0;
        one.errors = BTreeMap::from([("ENOSPC".to_string(), 1)]);
        assert_eq!(
            failures(Op::Read, &one).unwrap(),
            "1 of 527 read commands failed (ENOSPC ×1)"
        );
        // Failures of commands issued before the trace: no share claimed.
        let mut before = one.clone();
        before.commands = 0;
        assert_eq!(
            failures(Op::Write, &before).unwrap(),
            "1 write command failed (ENOSPC ×1)"
        );
        before.failed_commands = 2;
        before.errors = BTreeMap::from([("EIO".to_string(), 1), ("ENOSPC".to_string(), 1)]);
        assert_eq!(
            failures(Op::Write, &before).unwrap(),
            "2 write commands failed (EIO ×1, ENOSPC ×1)"
        );
        let mut user_only = quiet.clone();
        user_only.failed_user_ios = 1;
        assert_eq!(
            failures(Op::Write, &user_only).unwrap(),
            "1 user I/O failed"
        );
        // In the op's sentences, after the requeues.
        let said = op_sentences(Op::Write, &failed_writes());
        assert_eq!(
            said.last().unwrap(),
            "3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os failed"
        );
        assert!(!op_sentences(Op::Write, &quiet)
            .iter()
            .any(|line| line.contains("failed")));
    }

    #[test]
    fn op_sentences_say_every_nonzero_measure() {
        let said = op_sentences(Op::Write, &requeued_writes()).join("\n");
        assert!(said.contains("527 writes (user I/Os"), "{said}");
        assert!(
            said.contains("became 527 fragments and 527 commands"),
            "{said}"
        );
        assert!(said.contains("latency queue to complete p50"), "{said}");
        assert!(said.contains("66 requeues for 527 commands"), "{said}");
        let quiet = op_sentences(Op::Write, &writes(&[(4096, 10)], &[(4096, 10)])).join("\n");
        assert!(!quiet.contains("requeue"), "{quiet}");
        assert!(
            !quiet.contains("split") && !quiet.contains("merges"),
            "{quiet}"
        );
        let split = op_sentences(
            Op::Write,
            &crate::frontend::test_reports::split_disk_writes(),
        );
        assert!(
            split.iter().any(|line| line
                == "100 user I/Os split (100.0%), 700 splits in all, by cause: max_sectors 700"),
            "{split:?}"
        );
    }

    #[test]
    fn evidence_is_plain_text_without_the_predictions() {
        let line = evidence_line(&requeued_diagnosis("vda"));
        assert!(line.contains("requeues=66"), "{line}");
        assert!(line.contains("cause=virtio_ring_full"), "{line}");
        assert!(line.contains("virtio_indirect_desc=false"), "{line}");
        assert!(!line.contains("what_if"), "{line}");
        assert!(!line.contains('{') && !line.contains('"'), "{line}");
        let split = seed_report()
            .diagnoses
            .into_iter()
            .find(|d| d.code == crate::model::Code::SplitAmplification)
            .unwrap();
        assert!(evidence_line(&split).contains("causes=max_sectors:700"));
        let nested = serde_json::json!({"512": 640, "4096": [1, 2], "x": null});
        assert_eq!(plain(&nested), "4096:1,2,512:640,x:none");
    }

    #[test]
    fn owner_bytes_per_user_io_guard_zero() {
        assert_eq!(bytes_per_user_io(0, 0), 0.0);
        assert_eq!(bytes_per_user_io(65230 * 3, 3), 65230.0);
    }

    #[test]
    fn one_command_size_gives_both_ends_the_data_allow() {
        let bounds = crate::model::TimeBounds::of(13_600.0, 2048, 64).unwrap();
        assert_eq!(
            (bounds.iops_bound, bounds.bandwidth_bound),
            (425.0, 13_600.0)
        );
        let what_if = WhatIf {
            time_unavailable: Some(TimeUnavailable::OneCommandSize),
            busy_ms: Some(13_600.0),
            time_after_fix_bounds_ms: Some(bounds),
            ..what_if(2048, 64)
        };
        let said = what_if_sentence(&what_if, Prediction::Fix, "writes", "commands");
        assert!(
            said.contains("~425 ms if each command costs the same")
                && said.contains("~13.6 s if it goes with the bytes"),
            "{said}"
        );
        let run = RunTimeWithFix {
            code: "split_amplification".into(),
            device: "vdb".into(),
            run_s: 13.6,
            unavailable: Some(TimeUnavailable::OneCommandSize),
            run_after_fix_bounds_s: Some(crate::model::TimeBounds {
                iops_bound: 0.425,
                bandwidth_bound: 13.6,
            }),
            ..RunTimeWithFix::default()
        };
        let said = time_with_fix_words("dd took 13.6 s", &run);
        assert!(
            said.contains("between ≈ 0.42 s if each command costs the same"),
            "{said}"
        );
    }
}
