//! The human report: what `report`, `run` and the TUI's exit print.
//!
//! Diagnoses come first (they answer "what do I change"), then the measures
//! behind them per disk and partition. Every line fits the given width: prose
//! is word-wrapped, tables are sized to fit 80 columns.

use std::collections::BTreeSet;

use unicode_width::UnicodeWidthStr;

use crate::geometry::{DiskGeometry, PartitionGeometry};
use crate::model::{
    AttachEnd, Attribution, Diagnosis, Distribution, Dominant, Measures, Op, OpMeasures,
    OwnerEntry, OwnerKnown, OwnerView, Report, RunFile, RunReport, Severity,
};

use super::{units, words};

/// Width used when the caller has no terminal to measure.
pub const DEFAULT_WIDTH: u16 = 80;
/// Below this the layout cannot be kept; narrower requests render at this width.
const MIN_WIDTH: usize = 40;
/// Longest histogram bar, so wide terminals do not stretch the bars absurdly.
const MAX_BAR: usize = 32;
/// Histograms fill empty buckets between the smallest and largest size up to this many rows.
const MAX_FILLED_ROWS: usize = 24;

/// Width to render a report for stdout: the terminal's, or [`DEFAULT_WIDTH`]
/// when stdout is a pipe or file (then lines stay readable in an editor).
pub fn stdout_width() -> u16 {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return DEFAULT_WIDTH;
    }
    match ratatui::crossterm::terminal::size() {
        Ok((columns, _)) if columns > 0 => columns,
        _ => DEFAULT_WIDTH,
    }
}

/// The whole report. When `report.run` is set, the `run` chain (the same
/// block [`render_run_summary`] renders alone) follows the header, so callers
/// print this one string and nothing else.
pub fn render_report(report: &Report, width: u16) -> String {
    let mut out = Out::new(width);
    header(&mut out, report);
    if let Some(run) = &report.run {
        out.blank();
        run_summary(&mut out, run);
    }
    if no_io_seen(report) {
        out.blank();
        out.line(&format!(
            "no I/O seen on the traced devices in {}.",
            units::seconds(report.duration_s)
        ));
        out.line("  (write to a traced device while tracing, or check --device)");
        return out.finish();
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
        for diagnosis in by_severity(&report.other_findings) {
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

/// `report --by VIEW`: the top owners of one view, each on its device.
fn owner_section(out: &mut Out, attribution: &Attribution, view: OwnerView) {
    let (title, entries, folded) = match view {
        OwnerView::Process => (
            "process",
            &attribution.processes,
            attribution.folded.processes,
        ),
        OwnerView::Cgroup => ("cgroup", &attribution.cgroups, attribution.folded.cgroups),
        OwnerView::File => ("file", &attribution.files, attribution.folded.files),
    };
    let folded = match folded {
        0 => String::new(),
        n => format!("; {} more summed into other", units::thousands(n)),
    };
    out.line(&format!("by {title} (top by commands{folded}):"));
    if entries.is_empty() {
        out.line("  no I/O seen");
        return;
    }
    for entry in entries {
        let m = &entry.measures;
        out.line(&format!("  {} on {}:", owner_name(entry), entry.device));
        out.line(&format!(
            "    {} user I/Os (avg {}) -> {} commands ({} per user I/O), {}",
            units::thousands(m.user_ios),
            units::bytes(words::bytes_per_user_io(m.bytes, m.user_ios)),
            units::thousands(m.commands),
            units::ratio(m.amplification),
            units::bytes(m.bytes as f64),
        ));
        out.line(&format!(
            "    splits {}, merges {} of user I/Os",
            units::percent(m.split_share),
            units::percent(m.merge_share),
        ));
        let p99 = |dist: &crate::model::Distribution| {
            if dist.count == 0 {
                "-".to_string()
            } else {
                units::micros(dist.p99)
            }
        };
        out.line(&format!(
            "    p99 queue->issue {}, issue->complete {}, queue->complete {}",
            p99(&m.queue_to_issue_us),
            p99(&m.issue_to_complete_us),
            p99(&m.queue_to_complete_us),
        ));
        match m.dominant {
            Some(Dominant::Queue) => {
                out.line("    queue time dominates (mean queue->issue above issue->complete)")
            }
            Some(Dominant::Device) => {
                out.line("    device time dominates (mean issue->complete above queue->issue)")
            }
            None => {}
        }
    }
}

/// How an owner reads in the text report; says plainly what is unknown.
fn owner_name(entry: &OwnerEntry) -> String {
    match entry.owner {
        OwnerKnown::Other => "other".to_string(),
        OwnerKnown::KernelThread => {
            "a kernel thread (writeback: the kernel does not say for which process)".to_string()
        }
        OwnerKnown::NoFile => {
            "no file (pages of no file: user-buffer direct I/O or swap)".to_string()
        }
        OwnerKnown::Unknown => "unknown (not told by the kernel or this probe flavor)".to_string(),
        OwnerKnown::Known => {
            if let Some(pid) = entry.pid {
                return match &entry.comm {
                    Some(comm) => format!("{comm} (pid {pid})"),
                    None => format!("pid {pid}"),
                };
            }
            if let Some(id) = entry.cgroup_id {
                let workload = &entry.workload;
                // A container's id is told apart by its first 12 digits, as runtimes print it.
                let container = workload
                    .container_id
                    .as_deref()
                    .map(|id| format!("container {}", &id[..id.len().min(12)]));
                return match (&workload.pod_uid, container, &entry.cgroup) {
                    (Some(pod), container, _) => {
                        let qos = workload.qos.as_deref().unwrap_or("?");
                        match container {
                            Some(container) => format!("pod {pod} ({qos}), {container}"),
                            None => format!("pod {pod} ({qos})"),
                        }
                    }
                    (None, Some(container), _) => container,
                    (None, None, Some(path)) => path.clone(),
                    (None, None, None) => format!("cgroup id {id}"),
                };
            }
            let direct = if entry.direct { " (direct I/O)" } else { "" };
            match entry.file_name() {
                Some(name) => format!("{name}{direct}"),
                None => "unknown file".to_string(),
            }
        }
    }
}

/// The `run` chain: per target, the sentence the engine wrote and the numbers behind it.
pub fn render_run_summary(run: &RunReport) -> String {
    let mut out = Out::new(DEFAULT_WIDTH);
    run_summary(&mut out, run);
    out.finish()
}

fn run_summary(out: &mut Out, run: &RunReport) {
    let status = match (&run.attached, run.exit_status) {
        (Some(attached), _) => format!(
            "pid {}, followed for {:.1} s from attach {}",
            attached.pid,
            attached.window_s,
            match attached.ended {
                AttachEnd::Exited => "until it exited",
                AttachEnd::Interrupted => "until Ctrl-C (it goes on, untraced)",
            }
        ),
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "killed by a signal".to_string(),
    };
    out.line(&format!(
        "run: {} ({status}, {} process{})",
        run.command.join(" "),
        units::thousands(run.processes),
        if run.processes == 1 { "" } else { "es" }
    ));
    // Worth a line once it is a noticeable part of the command's time.
    if run.paused_opens > 0
        && run
            .command_s
            .is_some_and(|took| run.paused_s * 100.0 >= took)
    {
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "stopped at {} open{} for writing until each file was held, {:.1} ms in all \
                 (left out of its time; --no-pause races instead)",
                units::thousands(run.paused_opens),
                if run.paused_opens == 1 { "" } else { "s" },
                run.paused_s * 1000.0
            ),
        );
    }
    if let Some(estimate) = &run.time_with_fix {
        out.wrapped("  ", "    ", &words::run_time_with_fix(run, estimate));
    }
    if run.targets.is_empty() {
        out.line("  the command wrote nothing to the traced devices.");
    }
    for target in &run.targets {
        out.blank();
        out.wrapped(&format!("  {}: ", target.device), "    ", &target.summary);
        let what = if target.aio_writes + target.uring_writes == 0 {
            "write syscalls"
        } else {
            "writes"
        };
        out.line(&format!(
            "    {what} {} ({}, avg {}), fsync {}",
            units::thousands(target.write_syscalls),
            units::bytes(target.write_syscall_bytes as f64),
            units::bytes(target.write_syscall_size.mean),
            units::thousands(target.fsync_calls),
        ));
        if target.aio_writes + target.uring_writes > 0 {
            let mut parts = vec![format!(
                "{} write syscalls ({})",
                units::thousands(target.write_syscalls - target.aio_writes - target.uring_writes),
                units::bytes(
                    (target.write_syscall_bytes - target.aio_write_bytes - target.uring_write_bytes)
                        as f64
                ),
            )];
            if target.aio_writes > 0 {
                parts.push(format!(
                    "{} through libaio (io_submit) ({})",
                    units::thousands(target.aio_writes),
                    units::bytes(target.aio_write_bytes as f64),
                ));
            }
            if target.uring_writes > 0 {
                parts.push(format!(
                    "{} through io_uring ({})",
                    units::thousands(target.uring_writes),
                    units::bytes(target.uring_write_bytes as f64),
                ));
            }
            out.line(&format!("      {}", parts.join(", ")));
        }
        // Writes without an offset (plain write()) cannot be matched to commands.
        let per_command = if target.writes_per_command.count > 0 {
            format!(
                " (avg writes per command {})",
                units::ratio(target.writes_per_command.mean)
            )
        } else {
            String::new()
        };
        out.line(&format!(
            "    bios {} (avg {}) -> commands {}{per_command}",
            units::thousands(target.bios),
            units::bytes(target.bio_size.mean),
            units::thousands(target.commands),
        ));
        if target.commands_per_write.count > 0 {
            out.line(&format!(
                "    commands per write: p50 {}, p99 {}, max {}",
                target.commands_per_write.p50,
                target.commands_per_write.p99,
                target.commands_per_write.max
            ));
        }
        if let Some(file) = &target.file {
            run_file_lines(out, file);
        }
    }
    if let Some(rest) = &run.files_not_listed {
        out.blank();
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "{} more files written ({} writes, {}) are not listed.",
                units::thousands(rest.files),
                units::thousands(rest.write_syscalls),
                units::bytes(rest.write_syscall_bytes as f64)
            ),
        );
    }
    if let Some(aio) = &run.io_submit {
        out.blank();
        out.line(&format!(
            "  io_submit (libaio): {} calls submitted {} iocbs",
            units::thousands(aio.calls),
            units::thousands(aio.iocbs),
        ));
        if aio.iocbs_not_followed > 0 {
            out.wrapped(
                "    ",
                "    ",
                &format!(
                    "{} iocbs NOT followed (more than {} in one call, or a PWRITEV of more than {} iovecs): their writes are in no count above",
                    units::thousands(aio.iocbs_not_followed),
                    tracer_common::AIO_IOCBS_READ,
                    tracer_common::AIO_IOVECS_READ,
                ),
            );
        }
    }
    if let Some(uring) = &run.io_uring {
        run_uring_lines(out, uring);
    }
    let background: u64 = run.background.ops.values().map(|m| m.user_ios).sum();
    if background > 0 {
        let commands: u64 = run.background.ops.values().map(|m| m.commands).sum();
        out.blank();
        out.line(&format!(
            "  background writeback by other tasks: {} user I/Os -> {} commands",
            units::thousands(background),
            units::thousands(commands)
        ));
    }
}

/// Where a file's written bytes went: matched, still dirty, or unmappable.
/// The run's io_uring SQEs: how many, how they were submitted, and the
/// ones not followed; or that this kernel's io_uring is not followed.
fn run_uring_lines(out: &mut Out, uring: &crate::model::UringReport) {
    out.blank();
    if let Some(why) = &uring.unsupported {
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "io_uring: submissions NOT followed on this kernel ({why}); writes the command made through io_uring are in no count above"
            ),
        );
        return;
    }
    let submitted =
        uring.writes + uring.syncs + uring.fixed_files_not_followed + uring.not_followed;
    out.wrapped(
        "  ",
        "    ",
        &format!(
            "io_uring: {} write and fsync SQEs ({} writes and {} fsyncs followed): {} by io_uring_enter, {} by the SQPOLL thread; {} handed to io-wq workers (iou-wrk)",
            units::thousands(submitted),
            units::thousands(uring.writes),
            units::thousands(uring.syncs),
            units::thousands(submitted.saturating_sub(uring.sqpoll)),
            units::thousands(uring.sqpoll),
            units::thousands(uring.punted_to_io_wq),
        ),
    );
    if uring.fixed_files_not_followed > 0 {
        out.wrapped(
            "    ",
            "    ",
            &format!(
                "{} SQEs on registered (fixed) files NOT followed (registered before tracing, past the first {} slots, or changed since): their writes are in no count above",
                units::thousands(uring.fixed_files_not_followed),
                tracer_common::URING_FILES_READ,
            ),
        );
    }
    if uring.not_followed > 0 {
        out.wrapped(
            "    ",
            "    ",
            &format!(
                "{} SQEs NOT followed (a WRITEV of more than {} iovecs, or unreadable): their writes are in no count above",
                units::thousands(uring.not_followed),
                tracer_common::AIO_IOVECS_READ,
            ),
        );
    }
}

fn run_file_lines(out: &mut Out, file: &RunFile) {
    out.wrapped(
        "    ",
        "      ",
        &format!(
            "{} extents (FIEMAP after the run); {} of the writes on sectors commands wrote",
            units::thousands(file.extents),
            units::bytes(file.matched_bytes as f64),
        ),
    );
    if let Some(error) = &file.map_error {
        out.wrapped("    ", "      ", &format!("extent map: {error}"));
    }
    if file.not_written_back_bytes > 0 {
        let delalloc = if file.delalloc_bytes > 0 {
            format!(
                ", {} of them in delayed-allocation extents with no sectors yet",
                units::bytes(file.delalloc_bytes as f64)
            )
        } else {
            String::new()
        };
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "NOT written back inside the run (still dirty at exit): {} not matched to commands{delalloc}",
                units::bytes(file.not_written_back_bytes as f64)
            ),
        );
    }
    if file.overwritten_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} rewritten by a later write before any command wrote them (only the later data reached the device)",
                units::bytes(file.overwritten_bytes as f64)
            ),
        );
    }
    if file.unmappable_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} not matched: no device address ({} extents FIEMAP could not place, or holes)",
                units::bytes(file.unmappable_bytes as f64),
                units::thousands(file.unmappable_extents)
            ),
        );
    }
    if file.unknown_offset_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} not matched: written through an fd opened before tracing, at an unknown offset",
                units::bytes(file.unknown_offset_bytes as f64)
            ),
        );
    }
}

/// Diagnoses, most severe first; engine order within one severity.
pub fn by_severity(diagnoses: &[Diagnosis]) -> Vec<&Diagnosis> {
    let mut sorted: Vec<&Diagnosis> = diagnoses.iter().collect();
    sorted.sort_by_key(|diagnosis| std::cmp::Reverse(diagnosis.severity));
    sorted
}

pub fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING",
        Severity::Info => "INFO",
    }
}

/// Side-by-side log2 histograms of user I/O size and command size, each bar
/// scaled to its own column's largest bucket. Lines start with `indent` and
/// fit `width` columns.
pub fn size_histogram(
    user: &Distribution,
    commands: &Distribution,
    indent: &str,
    width: usize,
) -> Vec<String> {
    let lows = histogram_rows(user, commands);
    if lows.is_empty() {
        return Vec::new();
    }
    let count_at = |dist: &Distribution, low: u64| {
        dist.buckets
            .iter()
            .filter(|bucket| bucket.low == low)
            .map(|bucket| bucket.count)
            .sum::<u64>()
    };
    let all_rows: Vec<(String, u64, u64)> = lows
        .iter()
        .map(|&low| {
            (
                units::bucket_label(low),
                count_at(user, low),
                count_at(commands, low),
            )
        })
        .collect();
    let rows = collapse_empty_runs(all_rows);
    let label_width = rows
        .iter()
        .map(|(label, _, _)| label.len())
        .max()
        .unwrap_or(0)
        .max("size".len());
    let count_width = |pick: fn(&(String, u64, u64)) -> u64| {
        rows.iter()
            .map(|row| units::thousands(pick(row)).len())
            .max()
            .unwrap_or(1)
    };
    let user_width = count_width(|row| row.1);
    let command_width = count_width(|row| row.2);
    let fixed = indent.width() + label_width + 2 + user_width + 1 + 2 + command_width + 1;
    let bar = (width.saturating_sub(fixed) / 2).clamp(1, MAX_BAR);
    let user_max = rows.iter().map(|row| row.1).max().unwrap_or(0);
    let command_max = rows.iter().map(|row| row.2).max().unwrap_or(0);

    let user_column = user_width + 1 + bar;
    let mut lines = vec![format!(
        "{indent}{:<label_width$}  {:<user_column$}  commands",
        "size", "user I/Os"
    )];
    for (label, user_count, command_count) in &rows {
        if label == GAP {
            lines.push(format!("{indent}{GAP}"));
            continue;
        }
        let line = format!(
            "{indent}{label:<label_width$}  {:>user_width$} {:<bar$}  {:>command_width$} {}",
            units::thousands(*user_count),
            bar_of(*user_count, user_max, bar),
            units::thousands(*command_count),
            bar_of(*command_count, command_max, bar),
        );
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Bucket lows shown: every bucket seen, plus the empty powers of two between
/// them so the distance between sizes is visible.
fn histogram_rows(user: &Distribution, commands: &Distribution) -> Vec<u64> {
    let seen: BTreeSet<u64> = user
        .buckets
        .iter()
        .chain(&commands.buckets)
        .filter(|bucket| bucket.count > 0)
        .map(|bucket| bucket.low)
        .collect();
    let (Some(&first), Some(&last)) = (seen.iter().find(|&&low| low > 0), seen.last()) else {
        return seen.into_iter().collect();
    };
    let all_powers = seen.iter().all(|&low| low == 0 || low.is_power_of_two());
    let span = (last.trailing_zeros() - first.trailing_zeros()) as usize + 1;
    if !all_powers || span > MAX_FILLED_ROWS {
        return seen.into_iter().collect();
    }
    let mut rows: Vec<u64> = seen.iter().copied().filter(|&low| low == 0).collect();
    let mut low = first;
    while low <= last {
        rows.push(low);
        match low.checked_mul(2) {
            Some(next) => low = next,
            None => break,
        }
    }
    rows
}

/// Label of a row standing for several empty buckets.
const GAP: &str = "…";
/// Longer runs of empty buckets than this are shown as one [`GAP`] row.
const MAX_EMPTY_RUN: usize = 2;

/// Keeps the histogram short: a run of more than [`MAX_EMPTY_RUN`] empty
/// buckets between sizes becomes a single `…` row.
fn collapse_empty_runs(rows: Vec<(String, u64, u64)>) -> Vec<(String, u64, u64)> {
    let mut kept: Vec<(String, u64, u64)> = Vec::with_capacity(rows.len());
    let mut empty_run: Vec<(String, u64, u64)> = Vec::new();
    for row in rows {
        if row.1 == 0 && row.2 == 0 {
            empty_run.push(row);
            continue;
        }
        if empty_run.len() > MAX_EMPTY_RUN {
            kept.push((GAP.to_string(), 0, 0));
            empty_run.clear();
        }
        kept.append(&mut empty_run);
        kept.push(row);
    }
    kept
}

fn bar_of(count: u64, max: u64, width: usize) -> String {
    if count == 0 || max == 0 {
        return String::new();
    }
    // Round up so a single non-zero bucket is never invisible.
    let cells = ((count as f64 / max as f64) * width as f64).ceil() as usize;
    "█".repeat(cells.clamp(1, width))
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

fn no_io_seen(report: &Report) -> bool {
    let empty = |measures: &Measures| measures.ops.values().all(|op| op.user_ios == 0);
    report.diagnoses.is_empty()
        && report.devices.iter().all(|device| {
            empty(&device.measures) && device.partitions.iter().all(|p| empty(&p.measures))
        })
}

fn diagnoses(out: &mut Out, report: &Report, diagnoses: &[Diagnosis]) {
    out.line(&format!(
        "Diagnoses ({}, most severe first)",
        diagnoses.len()
    ));
    for diagnosis in by_severity(diagnoses) {
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
    out.text
}

/// `measures` are the diagnosed device's, when known: they name the
/// operation a prediction is about.
fn diagnosis_block(out: &mut Out, diagnosis: &Diagnosis, measures: Option<&Measures>) {
    out.line(&format!(
        "  {} {} on {}",
        severity_label(diagnosis.severity),
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
    by_severity(diagnoses)
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
            true => "request-based (commands seen)",
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
    let seen: Vec<_> = measures
        .ops
        .iter()
        .filter(|(_, op)| op.user_ios > 0 || op.commands > 0 || op.failed_commands > 0)
        .collect();
    if seen.is_empty() {
        out.line(&format!("{indent}no I/O seen"));
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
    if let Some(requeues) = words::requeues(m) {
        out.wrapped(
            &format!("{inner}requeues: "),
            &format!("{inner}  "),
            &requeues,
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
    for line in size_histogram(&m.user_io_size, &m.command_size, &inner, out.width) {
        out.line(&line);
    }
}

/// Collects lines, keeping each within the width.
struct Out {
    width: usize,
    text: String,
}

impl Out {
    fn new(width: u16) -> Self {
        Out {
            width: usize::from(width).max(MIN_WIDTH),
            text: String::new(),
        }
    }

    fn blank(&mut self) {
        self.text.push('\n');
    }

    /// A structured line; wrapped with a hanging indent only if it is too long.
    fn line(&mut self, line: &str) {
        if line.width() <= self.width {
            self.text.push_str(line);
            self.text.push('\n');
            return;
        }
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        self.wrapped(indent, &format!("{indent}  "), body);
    }

    /// Prose after `first`, continued on lines starting with `rest`.
    fn wrapped(&mut self, first: &str, rest: &str, prose: &str) {
        for line in wrap(prose, first, rest, self.width) {
            self.text.push_str(&line);
            self.text.push('\n');
        }
    }

    fn finish(self) -> String {
        self.text
    }
}

/// Greedy word wrap; words longer than a line are cut.
pub fn wrap(prose: &str, first: &str, rest: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = first.to_string();
    let mut has_word = false;
    for word in prose.split_whitespace() {
        let needed = if has_word { 1 } else { 0 } + word.width();
        if has_word && current.width() + needed > width {
            lines.push(std::mem::replace(&mut current, rest.to_string()));
            has_word = false;
        }
        if has_word {
            current.push(' ');
        }
        // A single word wider than the line: cut it at the edge.
        let mut remaining = word;
        while current.width() + remaining.width() > width && !remaining.is_empty() {
            let room = width.saturating_sub(current.width());
            let cut = cut_at_width(remaining, room.max(1));
            if cut == 0 || (room == 0 && has_word) {
                lines.push(std::mem::replace(&mut current, rest.to_string()));
                has_word = false;
                continue;
            }
            current.push_str(&remaining[..cut]);
            lines.push(std::mem::replace(&mut current, rest.to_string()));
            remaining = &remaining[cut..];
        }
        current.push_str(remaining);
        has_word = true;
    }
    if has_word || lines.is_empty() {
        lines.push(current.trim_end().to_string());
    }
    lines
}

/// Byte index of the longest prefix of `text` at most `width` columns wide.
fn cut_at_width(text: &str, width: usize) -> usize {
    let mut used = 0;
    for (index, ch) in text.char_indices() {
        let ch_width = unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0);
        if used + ch_width > width {
            return index;
        }
        used += ch_width;
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::{
        distribution, empty_report, requeued_report, seed_report, seed_run,
    };

    #[test]
    fn a_stacked_device_says_what_reached_the_disks_below() {
        let mut stacked = crate::frontend::test_reports::writes(&[(4096, 68)], &[(4096, 96)]);
        stacked.disk_commands = 75;
        let mut out = Out::new(80);
        op_block(&mut out, "", Op::Write, &stacked);
        assert!(
            out.text
                .contains("on the disks below: 75 commands (1.10 per user I/O)"),
            "{}",
            out.text
        );
        let mut plain = Out::new(80);
        op_block(
            &mut plain,
            "",
            Op::Write,
            &crate::frontend::test_reports::writes(&[(4096, 4)], &[(4096, 4)]),
        );
        assert!(!plain.text.contains("disks below"), "{}", plain.text);
    }

    /// The text with every run of whitespace (line breaks of the wrap
    /// included) turned into one space.
    fn squeezed(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
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
    fn an_owner_says_its_bytes_per_user_io_as_json_has_them() {
        use crate::model::{OwnerKnown, OwnerMeasures};
        let mut dd = OwnerEntry::new(
            OwnerKnown::Known,
            "vda".into(),
            OwnerMeasures {
                user_ios: 1600,
                commands: 800,
                bytes: 1600 * 65230,
                amplification: 0.5,
                ..OwnerMeasures::default()
            },
        );
        dd.pid = Some(101);
        dd.comm = Some("dd".into());
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd],
            text_views: vec![OwnerView::Process],
            ..Attribution::default()
        });
        let text = render_report(&report, 80);
        assert!(
            text.contains("1,600 user I/Os (avg 63.7 KiB) -> 800 commands"),
            "{text}"
        );
        assert!(!text.contains("127"), "{text}");
    }

    /// `--by process,file`: the sections appear in the order asked, the
    /// kworker and the unknown file say so, and nothing is wider than the page.
    #[test]
    fn owner_sections_name_what_is_known_and_say_what_is_not() {
        use crate::model::{FoldedOwners, OwnerMeasures};
        let measures = OwnerMeasures {
            user_ios: 32,
            commands: 64,
            bytes: 2 << 20,
            amplification: 2.0,
            queue_to_issue_us: distribution(&[(10, 32)]),
            issue_to_complete_us: distribution(&[(900, 64)]),
            dominant: Some(Dominant::Device),
            ..OwnerMeasures::default()
        };
        let mut dd = OwnerEntry::new(OwnerKnown::Known, "loop0p1".into(), measures.clone());
        dd.pid = Some(4242);
        dd.comm = Some("dd".into());
        let kworker = OwnerEntry::new(OwnerKnown::KernelThread, "loop0p1".into(), measures.clone());
        let mut file = OwnerEntry::new(OwnerKnown::Known, "loop0p1".into(), measures.clone());
        file.inode = Some(12);
        file.dev = Some("259:0".into());
        file.direct = true;
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd, kworker],
            cgroups: Vec::new(),
            files: vec![file],
            folded: FoldedOwners {
                processes: 3,
                ..FoldedOwners::default()
            },
            text_views: vec![OwnerView::File, OwnerView::Process],
        });
        let text = render_report(&report, 80);
        assert_fits(&text, 80);
        let file_at = text.find("by file (top by commands):").unwrap();
        let process_at = text
            .find("by process (top by commands; 3 more summed into other):")
            .unwrap();
        assert!(file_at < process_at, "{text}");
        assert!(text.contains("dd (pid 4242) on loop0p1:"), "{text}");
        assert!(text.contains("kernel thread (writeback"), "{text}");
        assert!(
            text.contains("inode 12 on 259:0 (direct I/O) on loop0p1:"),
            "{text}"
        );
        assert!(text.contains("device time dominates"), "{text}");
        assert!(!text.contains("by cgroup"), "{text}");
    }

    fn assert_fits(text: &str, width: usize) {
        for line in text.lines() {
            assert!(
                line.width() <= width,
                "line wider than {width}: {:?} ({})",
                line,
                line.width()
            );
        }
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
    fn histogram_puts_user_ios_and_commands_side_by_side() {
        let user = distribution(&[(512, 16385)]);
        let commands = distribution(&[(512, 1), (65536, 128)]);
        let lines = size_histogram(&user, &commands, "  ", 80);
        assert!(lines[0].contains("size") && lines[0].contains("user I/Os"));
        assert!(lines[0].contains("commands"));
        // 512B, a gap row for the six empty sizes 1K..32K, 64K, plus the header.
        assert_eq!(lines.len(), 1 + 3, "{lines:#?}");
        assert_eq!(lines[2].trim(), "…");
        let row_512 = &lines[1];
        assert!(row_512.trim_start().starts_with("512B"));
        assert!(row_512.contains("16,385 █"));
        let row_64k = lines
            .iter()
            .find(|l| l.trim_start().starts_with("64K"))
            .unwrap();
        assert!(row_64k.contains(" 0 "), "{row_64k}");
        for line in &lines {
            assert!(line.width() <= 80);
        }
        // Each side is scaled to its own largest bucket: 16,385 user I/Os and
        // 128 commands both get the full bar; the single 512 B command one cell.
        let full = row_64k.matches('█').count();
        assert!((10..=MAX_BAR).contains(&full), "bar of {full} cells");
        assert_eq!(row_512.matches('█').count(), full + 1);
        assert!(row_512.ends_with("  1 █"), "{row_512}");
        assert!(row_64k.ends_with(&format!("128 {}", "█".repeat(full))));
    }

    #[test]
    fn histogram_keeps_short_gaps_and_fills_missing_powers() {
        let user = distribution(&[(4096, 10), (16384, 5)]);
        let commands = distribution(&[(4096, 3)]);
        let lines = size_histogram(&user, &commands, "", 80);
        let labels: Vec<&str> = lines[1..]
            .iter()
            .map(|line| line.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(labels, vec!["4K", "8K", "16K"]);
        assert!(lines[2].contains(" 0 ") && !lines[2].contains('█'));
    }

    #[test]
    fn histogram_of_nothing_is_empty() {
        let none = Distribution::default();
        assert!(size_histogram(&none, &none, "", 80).is_empty());
    }

    #[test]
    fn empty_report_says_no_io_seen() {
        let text = render_report(&empty_report(), 80);
        assert!(text.contains("no I/O seen on the traced devices"));
        assert!(text.contains("0 dropped"));
        assert_fits(&text, 80);
    }

    #[test]
    fn tiny_width_does_not_panic() {
        let text = render_report(&seed_report(), 10);
        assert!(text.contains("subpage_block_size"));
    }

    #[test]
    fn wrap_keeps_words_and_width() {
        let lines = wrap("aaa bbb ccc ddd", "> ", "  ", 9);
        assert_eq!(lines, vec!["> aaa bbb", "  ccc ddd"]);
        let cut = wrap("abcdefghijkl", "", "", 5);
        assert_eq!(cut, vec!["abcde", "fghij", "kl"]);
        assert_eq!(wrap("", "fix: ", "", 80), vec!["fix:"]);
    }

    #[test]
    fn run_summary_lists_targets() {
        let text = render_run_summary(&seed_run());
        assert!(text.starts_with("run: mkfs.ext4 /dev/loop0p2 (exit status 0, 1 process)"));
        assert!(text.contains("loop0p2: mkfs.ext4 issued 2,048 writes of 32 KiB"));
        assert!(text.contains("write syscalls 2,048 (64 MiB, avg 32 KiB), fsync 1"));
        assert!(text.contains("bios 131,072 (avg 512 B) -> commands 1,032"));
        assert!(text.contains("background writeback by other tasks: 10 user I/Os -> 10 commands"));
        assert_fits(&text, 80);
    }

    #[test]
    fn pauses_at_opens_are_said_once_they_are_a_hundredth_of_the_time() {
        let mut run = seed_run();
        run.command_s = Some(31.4);
        assert!(!render_run_summary(&run).contains("stopped at"));
        run.paused_opens = 200;
        run.paused_s = 0.08;
        run.command_s = Some(0.12);
        let text = squeezed(&render_run_summary(&run));
        assert!(
            text.contains(
                "stopped at 200 opens for writing until each file was held, 80.0 ms in all"
            ),
            "{text}"
        );
    }

    #[test]
    fn libaio_writes_and_iocbs_not_followed_are_said() {
        let mut run = seed_run();
        run.targets[0].aio_writes = 2000;
        run.targets[0].aio_write_bytes = 2000 * 32768;
        run.io_submit = Some(crate::model::IoSubmitReport {
            calls: 300,
            iocbs: 2064,
            iocbs_not_followed: 16,
        });
        let text = render_run_summary(&run);
        assert!(
            text.contains("writes 2,048 (64 MiB, avg 32 KiB), fsync 1"),
            "{text}"
        );
        assert!(
            text.contains("48 write syscalls (1.5 MiB), 2,000 through libaio (io_submit)"),
            "{text}"
        );
        assert!(text.contains("io_submit (libaio): 300 calls submitted 2,064 iocbs"));
        assert!(
            squeezed(&text).contains("16 iocbs NOT followed (more than 64 in one call"),
            "{text}"
        );
        assert_fits(&text, 80);
        // Without io_submit, the lines are as before.
        let text = render_run_summary(&seed_run());
        assert!(
            !text.contains("libaio") && !text.contains("io_submit"),
            "{text}"
        );
    }

    #[test]
    fn uring_writes_how_they_were_submitted_and_sqes_not_followed_are_said() {
        let mut run = seed_run();
        run.targets[0].uring_writes = 2000;
        run.targets[0].uring_write_bytes = 2000 * 32768;
        run.io_uring = Some(crate::model::UringReport {
            writes: 2000,
            syncs: 1,
            sqpoll: 500,
            punted_to_io_wq: 64,
            fixed_files_not_followed: 7,
            not_followed: 2,
            unsupported: None,
        });
        let text = render_run_summary(&run);
        let flat = squeezed(&text);
        assert!(
            text.contains("48 write syscalls (1.5 MiB), 2,000 through io_uring (62.5 MiB)"),
            "{text}"
        );
        assert!(
            flat.contains("io_uring: 2,010 write and fsync SQEs (2,000 writes and 1 fsyncs followed): 1,510 by io_uring_enter, 500 by the SQPOLL thread; 64 handed to io-wq workers"),
            "{text}"
        );
        assert!(
            flat.contains("7 SQEs on registered (fixed) files NOT followed (registered before"),
            "{text}"
        );
        assert!(
            flat.contains("2 SQEs NOT followed (a WRITEV of more than 8"),
            "{text}"
        );
        assert_fits(&text, 80);
        // A kernel whose io_uring cannot be followed says so, with no counts.
        run.io_uring = Some(crate::model::UringReport {
            unsupported: Some("io_uring/io_uring_submit_req: cannot read it".into()),
            ..crate::model::UringReport::default()
        });
        let flat = squeezed(&render_run_summary(&run));
        assert!(
            flat.contains("io_uring: submissions NOT followed on this kernel (io_uring/io_uring_submit_req: cannot read it)"),
            "{flat}"
        );
        assert!(!flat.contains("SQEs ("), "{flat}");
        // Without io_uring, nothing is said of it.
        assert!(!render_run_summary(&seed_run()).contains("io_uring"));
    }

    #[test]
    fn a_files_dirty_and_unplaceable_bytes_are_said_with_their_counts() {
        let mut run = seed_run();
        run.targets[0].file = Some(crate::model::RunFile {
            path: "/mnt/x/file".to_string(),
            inode: 12,
            extents: 3,
            unmappable_extents: 1,
            map_error: None,
            matched_bytes: 1 << 20,
            not_written_back_bytes: 512 << 10,
            delalloc_bytes: 256 << 10,
            unmappable_bytes: 4096,
            unknown_offset_bytes: 0,
            overwritten_bytes: 8192,
        });
        let text = render_run_summary(&run);
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "3 extents (FIEMAP after the run); 1 MiB of the writes on sectors commands wrote"
            ),
            "{text}"
        );
        assert!(
            flat.contains("NOT written back inside the run (still dirty at exit): 512 KiB not matched to commands, 256 KiB of them in delayed-allocation extents"),
            "{text}"
        );
        assert!(
            flat.contains("4 KiB not matched: no device address (1 extents"),
            "{text}"
        );
        assert!(
            flat.contains("8 KiB rewritten by a later write before any command wrote them"),
            "{text}"
        );
        assert!(!flat.contains("unknown offset"), "{text}");
        assert_fits(&text, 80);
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

    #[test]
    fn seed_report_snapshot() {
        insta::assert_snapshot!(render_report(&seed_report(), 80));
    }
}
