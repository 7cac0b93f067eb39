//! The whole report: the header (events, chains, losses), the run chain
//! when there is one, the diagnoses most severe first, then each disk and
//! partition with its measures, and the owner views asked for.

use crate::frontend::{units, words};
use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{Diagnosis, Dominant, Measures, Op, OpMeasures, Report};

use super::histogram::size_histogram;
use super::layout::Out;
use super::owners::owner_section;
use super::run::run_summary;

/// The whole report. When `report.run` is set, the `run` chain (the same
/// block [`render_run_summary`](super::render_run_summary) renders alone)
/// follows the header, so callers print this one string and nothing else.
pub fn render_report(report: &Report, width: u16) -> String {
    render(report, width, Origin::Traced)
}

/// The report of a trace another tool captured (`analyze --from`): no
/// advice about tracing, which was not ours to do.
pub fn render_imported_report(report: &Report, width: u16) -> String {
    render(report, width, Origin::Imported)
}

/// Where the report's events came from: what the reader can do about an
/// empty one depends on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Traced by this tool (live, or a recording of a live run).
    Traced,
    /// Imported from another tool's text.
    Imported,
}

fn render(report: &Report, width: u16, origin: Origin) -> String {
    let mut out = Out::new(width);
    header(&mut out, report);
    if let Some(run) = &report.run {
        out.blank();
        run_summary(&mut out, run);
    }
    if no_io_seen(report) {
        out.blank();
        match origin {
            Origin::Traced => {
                out.line(&format!(
                    "no I/O seen on the traced devices in {}.",
                    units::seconds(report.duration_s)
                ));
                out.line("  (write to a traced device while tracing, or check --device)");
            }
            // Its skipped lines (notify, passthrough without a sector
            // range) may still be I/O: say what was not found, not "none".
            Origin::Imported => out.wrapped(
                "",
                "  ",
                &format!(
                    "nothing measured in {}: the imported trace holds no queue, issue, \
                     completion or requeue of a sector range (the lines it does hold are \
                     named on stderr).",
                    units::seconds(report.duration_s)
                ),
            ),
        }
        return out.finish();
    }
    if nothing_measured(report) {
        // Events, but none that made a user I/O or a command (completions
        // of commands issued before the trace, a filtered trace).
        out.blank();
        out.wrapped("", "  ", &events_without_measures(report));
    }
    if !report.diagnoses.is_empty() {
        out.blank();
        diagnoses(&mut out, report, &report.diagnoses);
    }
    if !report.other_findings.is_empty() {
        out.blank();
        out.line(&format!(
            "Other findings ({}, on devices the command did not write)",
            report.other_findings.len()
        ));
        for diagnosis in words::by_severity(&report.other_findings) {
            diagnosis_block(
                &mut out,
                diagnosis,
                words::measures_of(report, &diagnosis.device),
            );
        }
    }
    for device in &report.devices {
        out.blank();
        let diagnosed = codes_for(&report.diagnoses, &device.name);
        out.line(&format!(
            "{}{} ({}): {}{}",
            marker(&diagnosed),
            device.name,
            device.dev,
            gone_note(device.gone),
            disk_summary(&device.geometry, device.geometry_known)
        ));
        if let Some(stack) = &device.geometry.stack {
            out.wrapped("  stack: ", "    ", &stack.summary(&device.name));
        }
        diagnosed_line(&mut out, "  ", &diagnosed);
        measures(&mut out, "  ", &device.measures);
        if let Some(waits) = words::tag_waits(&device.tag_waits) {
            out.wrapped("  tag waits: ", "    ", &waits);
        }
        if let Some(passthrough) = words::passthrough(&device.passthrough) {
            out.wrapped("  passthrough: ", "    ", &passthrough);
        }
        for partition in &device.partitions {
            out.blank();
            let diagnosed = codes_for(&report.diagnoses, &partition.name);
            out.line(&format!(
                "  {}{} ({}): {}{}",
                marker(&diagnosed),
                partition.name,
                partition.dev,
                gone_note(partition.gone),
                partition_summary(&partition.geometry, partition.geometry_known)
            ));
            diagnosed_line(&mut out, "    ", &diagnosed);
            measures(&mut out, "    ", &partition.measures);
        }
    }
    if let Some(attribution) = &report.attribution {
        for view in &attribution.text_views {
            out.blank();
            owner_section(&mut out, attribution, *view);
        }
    }
    out.finish()
}

fn header(out: &mut Out, report: &Report) {
    let events = &report.events;
    let correlation = &report.correlation;
    out.line(&format!(
        "iosplit-trace report: {} traced",
        units::seconds(report.duration_s)
    ));
    out.line(&format!(
        "  events: {} received, {} dropped, {} skipped by the kernel, {} read failures",
        units::thousands(events.total()),
        units::thousands(events.dropped),
        units::thousands(events.missed),
        units::thousands(events.read_failed),
    ));
    out.line(&format!(
        "  chains: {} incomplete, {} unmatched events, {} evicted, {} aged out, {} in flight",
        units::thousands(correlation.incomplete),
        units::thousands(correlation.unmatched_events),
        units::thousands(correlation.evicted),
        units::thousands(correlation.aged_out),
        units::thousands(correlation.in_flight),
    ));
    if correlation.ring_dropped > 0 {
        out.line(&format!(
            "  {} chains were in flight when the ring dropped events and never completed",
            units::thousands(correlation.ring_dropped)
        ));
    }
    if correlation.completion_lost > 0 {
        out.line(&format!(
            "  {} chains lost their command's completion (no probe saw it before the request was reused)",
            units::thousands(correlation.completion_lost)
        ));
    }
    if events.dropped > 0 || events.syscall_dropped > 0 {
        out.wrapped(
            "  warning: ",
            "    ",
            &format!(
                "{} block and {} syscall events were lost (ring buffer full); \
                 counts below are lower bounds and some chains are incomplete.",
                units::thousands(events.dropped),
                units::thousands(events.syscall_dropped)
            ),
        );
    }
    if events.missed > 0 {
        out.wrapped(
            "  warning: ",
            "    ",
            &format!(
                "the kernel skipped {} block probe runs because another BPF program \
                 was running on the same CPU (interrupt nesting); some chains are incomplete.",
                units::thousands(events.missed)
            ),
        );
    }
    for probe in &report.unsupported_probes {
        out.wrapped("  note: unsupported probe ", "    ", probe);
    }
}

/// Nothing at all: no measure counted anything and no block event was
/// received. Any count (commands without user I/Os, completions alone,
/// requeues, failures, flushes) is something seen, and is shown.
fn no_io_seen(report: &Report) -> bool {
    nothing_measured(report) && block_events(report).is_empty()
}

/// No device or partition counted a user I/O, a command, a requeue or a failure.
fn nothing_measured(report: &Report) -> bool {
    let empty = |measures: &Measures| measures.ops.values().all(|op| !counted(op));
    report.diagnoses.is_empty()
        && report.devices.iter().all(|device| {
            empty(&device.measures) && device.partitions.iter().all(|p| empty(&p.measures))
        })
}

/// An op's measures counted something.
fn counted(op: &OpMeasures) -> bool {
    op.user_ios > 0
        || op.commands > 0
        || op.disk_commands > 0
        || op.requeues > 0
        || op.failed_commands > 0
        || op.failed_user_ios > 0
}

/// The block events received, by kind, in words (dirty buffers are page
/// cache, not block I/O).
fn block_events(report: &Report) -> Vec<String> {
    use tracer_common::EventKind;
    EventKind::ALL
        .iter()
        .filter(|kind| **kind != EventKind::DirtyBuffer)
        .filter(|kind| report.events[**kind] > 0)
        .map(|kind| {
            let what = match kind {
                EventKind::Queue => "user I/Os queued",
                EventKind::Issue => "command issues",
                EventKind::Complete => "command completions",
                EventKind::BioComplete => "bio completions",
                EventKind::Requeue => "requeues",
                EventKind::Split => "splits",
                EventKind::Remap | EventKind::RqRemap => "remaps",
                EventKind::Backmerge | EventKind::Frontmerge | EventKind::RqMerge => "merges",
                EventKind::DirtyBuffer => "dirty buffers",
            };
            (what, report.events[*kind])
        })
        .fold(Vec::<(&str, u64)>::new(), |mut kinds, (what, count)| {
            match kinds.iter_mut().find(|(known, _)| *known == what) {
                Some((_, total)) => *total += count,
                None => kinds.push((what, count)),
            }
            kinds
        })
        .into_iter()
        .map(|(what, count)| format!("{} {what}", units::thousands(count)))
        .collect()
}

/// What a trace of events that measured nothing held.
fn events_without_measures(report: &Report) -> String {
    let mut text = format!(
        "no user I/O or command was measured in {}, but the trace holds {}",
        units::seconds(report.duration_s),
        block_events(report).join(", ")
    );
    match report.correlation.unmatched_events {
        0 => text.push('.'),
        n => text.push_str(&format!(
            "; {} of them matched no earlier event (their queue or issue is not in the trace).",
            units::thousands(n)
        )),
    }
    text
}

fn diagnoses(out: &mut Out, report: &Report, diagnoses: &[Diagnosis]) {
    out.line(&format!(
        "Diagnoses ({}, most severe first)",
        diagnoses.len()
    ));
    for diagnosis in words::by_severity(diagnoses) {
        diagnosis_block(
            out,
            diagnosis,
            words::measures_of(report, &diagnosis.device),
        );
    }
}

/// One diagnosis: severity, code and device, evidence, explanation, fix.
/// `check` prints its findings with this too.
pub fn render_diagnosis(diagnosis: &Diagnosis, width: u16) -> String {
    let mut out = Out::new(width);
    diagnosis_block(&mut out, diagnosis, None);
    out.finish()
}

/// `measures` are the diagnosed device's, when known: they name the
/// operation a prediction is about.
fn diagnosis_block(out: &mut Out, diagnosis: &Diagnosis, measures: Option<&Measures>) {
    out.line(&format!(
        "  {} {} on {}",
        words::severity_label(diagnosis.severity),
        diagnosis.code,
        diagnosis.device
    ));
    let evidence = words::evidence_line(diagnosis);
    if !evidence.is_empty() {
        out.wrapped("    evidence: ", "      ", &evidence);
    }
    out.wrapped("    ", "    ", &diagnosis.explanation);
    for said in words::what_ifs(diagnosis, measures) {
        out.wrapped(
            &format!("    {}: ", said.prediction.label()),
            "      ",
            &said.sentence,
        );
    }
    for (index, fix) in diagnosis
        .fix
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
    {
        let prefix = if index == 0 { "    fix: " } else { "         " };
        out.wrapped(prefix, "         ", fix.trim());
    }
}

fn codes_for<'a>(diagnoses: &'a [Diagnosis], device: &str) -> Vec<&'a Diagnosis> {
    words::by_severity(diagnoses)
        .into_iter()
        .filter(|diagnosis| diagnosis.device == device)
        .collect()
}

/// `! ` before a diagnosed device, so it stands out without colour.
fn marker(diagnosed: &[&Diagnosis]) -> &'static str {
    if diagnosed.is_empty() {
        ""
    } else {
        "! "
    }
}

fn diagnosed_line(out: &mut Out, indent: &str, diagnosed: &[&Diagnosis]) {
    if diagnosed.is_empty() {
        return;
    }
    let codes: Vec<&str> = diagnosed.iter().map(|d| d.code.as_str()).collect();
    out.wrapped(
        &format!("{indent}diagnosed: "),
        &format!("{indent}  "),
        &codes.join(", "),
    );
}

/// Said first for a device removed while traced: its measures end there.
fn gone_note(gone: bool) -> &'static str {
    match gone {
        true => "gone (removed while traced), ",
        false => "",
    }
}

fn disk_summary(geometry: &DiskGeometry, known: bool) -> String {
    if !known {
        // Only what the trace showed; zeros would read as a real geometry.
        let kind = match geometry.request_based {
            true => "request-based (requests seen)",
            false => "no request commands seen (bio-based, or not traced)",
        };
        return format!("disk, geometry unknown, {kind}");
    }
    let mut parts = vec![format!(
        "disk, {}",
        units::bytes(geometry.size_sectors as f64 * 512.0)
    )];
    parts.push(format!(
        "logical {} / physical {}",
        units::bytes(f64::from(geometry.logical_block_size)),
        units::bytes(f64::from(geometry.physical_block_size))
    ));
    if geometry.optimal_io_size > 0 {
        parts.push(format!(
            "optimal I/O {}",
            units::bytes(f64::from(geometry.optimal_io_size))
        ));
    }
    parts.push(format!("max_sectors_kb {}", geometry.max_sectors_kb));
    if geometry.virt_boundary_mask > 0 {
        parts.push(format!(
            "virt boundary {}",
            units::bytes(geometry.virt_boundary_mask as f64 + 1.0)
        ));
    }
    if geometry.nomerges > 0 {
        parts.push(format!("nomerges {}", geometry.nomerges));
    }
    if !geometry.scheduler.is_empty() {
        parts.push(format!("scheduler {}", geometry.scheduler));
    }
    if !geometry.request_based {
        parts.push("bio-based".to_string());
    }
    parts.join(", ")
}

fn partition_summary(geometry: &PartitionGeometry, known: bool) -> String {
    if !known {
        return match geometry.start {
            0 => "partition, geometry unknown".to_string(),
            start => format!(
                "partition, start sector {} (read off its remaps), size unknown",
                units::thousands(start)
            ),
        };
    }
    let mut text = format!(
        "partition {}, start sector {}, {} sectors ({})",
        geometry.number,
        units::thousands(geometry.start),
        units::thousands(geometry.size),
        units::bytes(geometry.size as f64 * 512.0)
    );
    if let Some(block_size) = geometry.block_size {
        text.push_str(&format!(
            ", block size {}",
            units::bytes(f64::from(block_size))
        ));
    }
    text
}

fn measures(out: &mut Out, indent: &str, measures: &Measures) {
    let seen: Vec<_> = measures.ops.iter().filter(|(_, op)| counted(op)).collect();
    if seen.is_empty() {
        match measures.unpaired_completions {
            0 => out.line(&format!("{indent}no I/O seen")),
            n => out.line(&format!(
                "{indent}{n} command completions whose queue and issue are not in the trace (counted, not timed)"
            )),
        }
        return;
    }
    for (op, op_measures) in seen {
        op_block(out, indent, *op, op_measures);
    }
}

fn op_block(out: &mut Out, indent: &str, op: Op, m: &OpMeasures) {
    let inner = format!("{indent}  ");
    let failures = words::failures(op, m);
    let op = op.as_str();
    if m.user_ios == 0 {
        // Commands (or failures, requeues) whose user I/Os the trace does
        // not hold: what was seen, without ratios to nothing.
        return commands_only_block(out, indent, op, m, failures);
    }
    out.line(&format!(
        "{indent}{op}: {} user I/Os (avg {}) -> {} commands (avg {})",
        units::thousands(m.user_ios),
        units::bytes(m.user_io_size.mean),
        units::thousands(m.commands),
        units::bytes(m.command_size.mean),
    ));
    out.line(&format!(
        "{inner}amplification {} commands per user I/O, {} carried",
        units::ratio(m.amplification),
        units::bytes(m.bytes as f64)
    ));
    if m.commands_without_user_io > 0 {
        out.line(&format!(
            "{inner}{} of the commands carried no bio this trace holds (queued before it began, or lost): not counted in the amplification",
            units::thousands(m.commands_without_user_io)
        ));
    }
    if m.disk_commands > 0 {
        out.line(&format!(
            "{inner}on the disks below: {} commands ({} per user I/O)",
            units::thousands(m.disk_commands),
            units::ratio(crate::model::ratio(m.disk_commands, m.user_ios)),
        ));
    }
    let splits = match m.splits {
        0 => "no splits".to_string(),
        splits => format!(
            "split user I/Os {} ({}) by {} splits",
            units::thousands(m.split_user_ios),
            units::percent(m.split_share()),
            units::thousands(splits),
        ),
    };
    out.line(&format!(
        "{inner}{splits}, merges {} ({}) of user I/Os",
        units::thousands(m.merges),
        units::percent(m.merge_share()),
    ));
    out.line(&format!(
        "{inner}misaligned commands: {} to the physical block, {} to 4 KiB",
        units::percent(m.misaligned_pbs_share()),
        units::percent(m.misaligned_4k_share()),
    ));
    latency_table(out, &inner, m);
    more_lines(out, &inner, m, failures);
}

/// An op with commands but no user I/O (a trace without its queue events,
/// or completions of commands issued before it began).
fn commands_only_block(
    out: &mut Out,
    indent: &str,
    op: &str,
    m: &OpMeasures,
    failures: Option<String>,
) {
    let inner = format!("{indent}  ");
    let commands = match m.commands {
        0 => "no commands".to_string(),
        n => format!(
            "{} commands (avg {})",
            units::thousands(n),
            units::bytes(m.command_size.mean)
        ),
    };
    out.line(&format!("{indent}{op}: {commands}"));
    out.wrapped(
        &inner,
        &inner,
        "no user I/Os seen (the trace holds no queue events for them): \
         no amplification, split or merge share can be given",
    );
    if m.commands > 0 {
        out.line(&format!(
            "{inner}misaligned commands: {} to the physical block, {} to 4 KiB",
            units::percent(m.misaligned_pbs_share()),
            units::percent(m.misaligned_4k_share()),
        ));
    }
    latency_table(out, &inner, m);
    more_lines(out, &inner, m, failures);
}

fn latency_table(out: &mut Out, inner: &str, m: &OpMeasures) {
    if m.queue_to_complete_us.count > 0 || m.issue_to_complete_us.count > 0 {
        out.line(&format!(
            "{inner}{:<16}{:>10}{:>10}{:>10}{:>10}",
            "latency", "p50", "p90", "p99", "max"
        ));
        for (label, dist) in [
            ("queue->complete", &m.queue_to_complete_us),
            ("queue->issue", &m.queue_to_issue_us),
            ("issue->complete", &m.issue_to_complete_us),
        ] {
            let cell = |us: u64| {
                if dist.count == 0 {
                    "-".to_string()
                } else {
                    units::micros(us)
                }
            };
            out.line(&format!(
                "{inner}{label:<16}{:>10}{:>10}{:>10}{:>10}",
                cell(dist.p50),
                cell(dist.p90),
                cell(dist.p99),
                cell(dist.max)
            ));
        }
        match m.dominant {
            Some(Dominant::Queue) => out.line(&format!(
                "{inner}queue time dominates (mean queue->issue above issue->complete)"
            )),
            Some(Dominant::Device) => out.line(&format!(
                "{inner}device time dominates (mean issue->complete above queue->issue)"
            )),
            None => {}
        }
    }
}

/// Requeues, failures, split causes and the size histogram, where there were some.
fn more_lines(out: &mut Out, inner: &str, m: &OpMeasures, failures: Option<String>) {
    if let Some(requeues) = words::requeues(m) {
        out.wrapped(
            &format!("{inner}requeues: "),
            &format!("{inner}  "),
            &requeues,
        );
    }
    if let Some(atomic) = m.atomic_writes.as_ref().and_then(words::atomic_writes) {
        out.wrapped(
            &format!("{inner}untorn writes: "),
            &format!("{inner}  "),
            &atomic,
        );
    }
    if let Some(failures) = failures {
        out.wrapped(
            &format!("{inner}failures: "),
            &format!("{inner}  "),
            &failures,
        );
    }
    if !m.split_causes.is_empty() {
        let causes = m
            .split_causes
            .iter()
            .map(|(cause, count)| {
                format!(
                    "{cause} {} ({})",
                    units::thousands(*count),
                    units::percent(crate::model::ratio(*count, m.splits))
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.wrapped(
            &format!("{inner}split causes: "),
            &format!("{inner}  "),
            &causes,
        );
    }
    for line in size_histogram(&m.user_io_size, &m.command_size, inner, out.width()) {
        out.line(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::{empty_report, requeued_report, seed_report, seed_run};
    use crate::frontend::text::tests::{assert_fits, squeezed};

    #[test]
    fn a_stacked_device_says_what_reached_the_disks_below() {
        let mut stacked = crate::frontend::test_reports::writes(&[(4096, 68)], &[(4096, 96)]);
        stacked.disk_commands = 75;
        let mut out = Out::new(80);
        op_block(&mut out, "", Op::Write, &stacked);
        let text = out.finish();
        assert!(
            text.contains("on the disks below: 75 commands (1.10 per user I/O)"),
            "{text}"
        );
        let mut plain = Out::new(80);
        op_block(
            &mut plain,
            "",
            Op::Write,
            &crate::frontend::test_reports::writes(&[(4096, 4)], &[(4096, 4)]),
        );
        let text = plain.finish();
        assert!(!text.contains("disks below"), "{text}");
    }

    #[test]
    fn requeues_and_both_predictions_are_said_in_words() {
        let report = requeued_report();
        for width in [80u16, 120] {
            let text = render_report(&report, width);
            assert_fits(&text, usize::from(width));
            let flat = squeezed(&text);
            assert!(
                flat.contains(
                    "requeues: 66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms before re-issue"
                ),
                "{text}"
            );
            assert!(
                flat.contains(
                    "what if: the fix would take these writes from 593 device issues to ~527 (1.13x fewer); time not estimated"
                ),
                "{text}"
            );
            assert!(
                flat.contains(
                    "what if: the workaround would take these writes from 593 device issues to ~357 (1.66x fewer); time not estimated"
                ),
                "{text}"
            );
            assert!(!text.contains("{\""), "JSON in the text report: {text}");
            assert!(!text.contains("what_if"), "{text}");
        }
    }

    #[test]
    fn quiet_devices_say_nothing_of_requeues() {
        let text = render_report(&seed_report(), 80);
        assert!(!text.contains("requeue"), "{text}");
        // Only vda was requeued in this one.
        let text = render_report(&requeued_report(), 80);
        let vda = text.find("vda (254:0)").unwrap();
        assert_eq!(text.matches("requeues: ").count(), 1, "{text}");
        assert!(text.rfind("requeues: ").unwrap() > vda, "{text}");
    }

    #[test]
    fn a_stacked_device_shows_its_way_down_to_the_disk() {
        let text = render_report(&crate::frontend::test_reports::stacked_report(), 100);
        let dm = text.find("dm-1 (253:1)").unwrap();
        let stack = text
            .find("stack: dm-crypt `secret`: dm-1 → vda1 (crypt 0) → vda (partition 2048)")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(stack > dm, "{text}");
        assert_eq!(
            text.matches("stack: ").count(),
            1,
            "only the stacked device: {text}"
        );
    }

    #[test]
    fn failures_are_shown_per_op_only_where_there_were_some() {
        let text = render_report(&seed_report(), 80);
        assert!(!text.contains("failures: "), "{text}");
        let text = render_report(&crate::frontend::test_reports::failed_report(), 100);
        let sdf = text.find("sdf (8:80)").unwrap();
        assert_eq!(text.matches("failures: ").count(), 1, "{text}");
        assert!(text.rfind("failures: ").unwrap() > sdf, "{text}");
        assert!(
            squeezed(&text).contains(
                "failures: 3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os failed"
            ),
            "{text}"
        );
        // The diagnosis, with its words and what to look at.
        assert!(text.contains("io_errors on sdf"), "{text}");
        assert!(squeezed(&text).contains("not a geometry one"), "{text}");
        assert!(text.contains("smartctl -a /dev/sdf"), "{text}");
    }

    #[test]
    fn no_json_in_any_diagnosis_or_finding() {
        let mut report = requeued_report();
        report.other_findings = vec![crate::frontend::test_reports::requeued_diagnosis("vdb")];
        let text = render_report(&report, 80);
        assert!(!text.contains("{\"") && !text.contains("\":"), "{text}");
        // Elsewhere (`check`) the device's measures are unknown: the op is not named.
        let alone = render_diagnosis(&report.other_findings[0], 80);
        assert!(squeezed(&alone).contains("the fix would take these I/Os from 593 device issues"));
        assert!(!alone.contains('{'), "{alone}");
    }

    #[test]
    fn what_if_and_other_findings_are_told_apart() {
        let mut report = seed_report();
        let mut other = report.diagnoses[0].clone();
        other.device = "loop0p1".into();
        report.diagnoses[0]
            .evidence
            .set_what_if(crate::model::WhatIf {
                commands_now: 1000,
                commands_after_fix: 130,
                time_now_ms: None,
                time_after_fix_ms: None,
                ..Default::default()
            });
        report.other_findings = vec![other];
        let text = render_report(&report, 120);
        assert!(
            text.contains(
                "what if: the fix would take these I/Os from 1,000 commands to ~130 (7.69x fewer)"
            ),
            "{text}"
        );
        assert!(!text.contains("what_if="), "{text}");
        let heading = text
            .find("Other findings (1, on devices the command did not write)")
            .unwrap_or_else(|| panic!("{text}"));
        let moved = text
            .find(&format!("{} on loop0p1", report.diagnoses[0].code))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(moved > heading, "{text}");
        assert_fits(&text, 120);
    }

    #[test]
    fn seed_report_fits_80_and_120_columns() {
        let report = seed_report();
        for width in [80u16, 120] {
            let text = render_report(&report, width);
            assert_fits(&text, usize::from(width));
        }
    }

    #[test]
    fn a_removed_device_is_called_gone() {
        let mut report = seed_report();
        report.devices[1].gone = true;
        report.devices[0].partitions[2].gone = true;
        let text = render_report(&report, 100);
        assert!(
            text.contains("loop1 (7:1): gone (removed while traced), disk"),
            "{text}"
        );
        assert!(text.contains("loop0p3 (259:3): gone (removed while traced), partition 3"));
        assert!(!text.contains("loop0 (7:0): gone"));
    }

    #[test]
    fn header_shows_events_drops_failures_and_incomplete_chains() {
        let mut report = seed_report();
        report.events.missed = 7;
        let text = render_report(&report, 80);
        let total = units::thousands(report.events.total());
        assert!(text.contains(&format!("{total} received")), "{text}");
        assert!(text.contains("42 dropped"));
        assert!(text.contains("1 read failures"));
        assert!(text.contains("7 skipped by the kernel"), "{text}");
        assert!(
            text.contains("the kernel skipped 7 block probe runs"),
            "{text}"
        );
        assert!(text.contains("3 incomplete"));
        assert!(text.contains("12.3 s traced"));
        assert!(text.contains("note: unsupported probe block_dirty_buffer"));
    }

    #[test]
    fn diagnoses_come_first_most_severe_first() {
        let text = render_report(&seed_report(), 80);
        let critical = text.find("CRITICAL subpage_block_size on loop0p2").unwrap();
        let warning_split = text.find("WARNING split_amplification on loop1").unwrap();
        let warning_start = text.find("WARNING misaligned_start on loop0p2").unwrap();
        let first_device = text.find("loop0 (7:0)").unwrap();
        assert!(critical < warning_split && critical < warning_start);
        // Engine order is kept within one severity.
        assert!(warning_split < warning_start);
        assert!(warning_start < first_device);
        assert!(text.contains("evidence: block_size=512 partition_size=65537 partition_start=4097"));
        assert!(text.contains("cause=max_sectors"));
        assert!(text.contains("    fix: Make the partition size a multiple of 8 sectors"));
        // The second fix line is aligned under the first, not prefixed again.
        assert!(text.contains("         Or write with O_DIRECT in 4 KiB multiples."));
    }

    #[test]
    fn explanation_is_wrapped_not_cut() {
        let report = seed_report();
        let text = render_report(&report, 80);
        let words: Vec<&str> = report.diagnoses[1].explanation.split_whitespace().collect();
        let rendered: Vec<&str> = text.split_whitespace().collect();
        let start = rendered
            .windows(words.len())
            .position(|window| window == words.as_slice());
        assert!(
            start.is_some(),
            "explanation words not all present in order"
        );
    }

    #[test]
    fn seed_partition_measures_are_human_readable() {
        let text = render_report(&seed_report(), 80);
        assert!(text.contains("write: 16,385 user I/Os (avg 512 B) -> 129 commands"));
        // 129 commands per 16,385 user I/Os.
        assert!(text.contains("amplification 0.008 commands per user I/O"));
        assert!(text.contains("merges 16,256 (99.2%)"));
        assert!(text.contains("misaligned commands: 100.0% to the physical block"));
        assert!(text.contains("block size 512 B"));
        assert!(text.contains("! loop0p2 (259:2)"));
        assert!(text.contains("diagnosed: subpage_block_size, misaligned_start"));
        // The clean partition is not marked; the idle one says so.
        assert!(text.contains("  loop0p1 (259:1)"));
        assert!(!text.contains("! loop0p1"));
        let idle = text.find("loop0p3 (259:3)").unwrap();
        let next_device = text.find("loop1 (7:1)").unwrap();
        assert!(text[idle..next_device].contains("no I/O seen"));
    }

    #[test]
    fn split_causes_and_latency_are_shown() {
        let text = render_report(&seed_report(), 80);
        assert!(text.contains("split user I/Os 100 (100.0%) by 700 splits"));
        assert!(text.contains("split causes: max_sectors 700 (100.0%)"));
        let latency = text
            .lines()
            .find(|l| l.contains("queue->complete"))
            .unwrap();
        // p50 of the synthetic latency distribution is its 1024 µs bucket.
        assert!(latency.contains("1 ms"), "{latency}");
    }

    #[test]
    fn empty_report_says_no_io_seen() {
        let text = render_report(&empty_report(), 80);
        assert!(text.contains("no I/O seen on the traced devices"));
        assert!(text.contains("0 dropped"));
        assert_fits(&text, 80);
    }

    #[test]
    fn only_a_live_trace_is_told_how_to_trace() {
        let live = render_report(&empty_report(), 80);
        assert!(live.contains("check --device"), "{live}");
        let imported = render_imported_report(&empty_report(), 80);
        assert!(!imported.contains("--device"), "{imported}");
        assert!(!imported.contains("while tracing"), "{imported}");
        assert!(!imported.contains("no I/O seen"), "{imported}");
        assert_fits(&imported, 80);
    }

    #[test]
    fn any_count_is_something_seen() {
        use tracer_common::EventKind;
        // Completions alone: no measure, but events.
        let mut completions = empty_report();
        completions.events[EventKind::Complete] = 6;
        completions.correlation.unmatched_events = 6;
        let text = squeezed(&render_report(&completions, 80));
        assert!(!text.contains("no I/O seen"), "{text}");
        assert!(
            text.contains(
                "the trace holds 6 command completions; 6 of them matched no earlier event"
            ),
            "{text}"
        );
        // Commands, requeues or failures without a user I/O: shown, no ratio.
        for set in [
            |m: &mut OpMeasures| m.commands = 3,
            |m: &mut OpMeasures| m.requeues = 2,
            |m: &mut OpMeasures| m.failed_commands = 1,
        ] {
            let mut report = seed_report();
            report.diagnoses.clear();
            report.devices.truncate(1);
            let device = &mut report.devices[0];
            device.partitions.clear();
            let mut measures = OpMeasures::default();
            set(&mut measures);
            device.measures.ops = [(Op::Write, measures)].into();
            let text = render_report(&report, 80);
            assert!(!text.contains("no I/O seen"), "{text}");
            assert!(text.contains("write: "), "{text}");
            assert!(text.contains("no user I/Os seen"), "{text}");
            assert!(!text.contains("per user I/O"), "{text}");
        }
    }

    #[test]
    fn tiny_width_does_not_panic() {
        let text = render_report(&seed_report(), 10);
        assert!(text.contains("subpage_block_size"));
    }

    #[test]
    fn run_chain_follows_the_header_once() {
        let mut report = seed_report();
        report.run = Some(seed_run());
        let text = render_report(&report, 80);
        let run = text.find("run: mkfs.ext4 /dev/loop0p2").unwrap();
        assert!(run > text.find("events:").unwrap());
        assert!(run < text.find("Diagnoses").unwrap());
        assert_eq!(text.matches("run: mkfs.ext4").count(), 1);
        assert_fits(&text, 80);
    }
}
