//! Traces other tools took, as recording items: blkparse's default text
//! output and the kernel's ftrace `blk` tracer (and, in [`super::blktrace`],
//! blktrace's binary files). All print the blktrace actions (A Q X M F G I D
//! C R …) one per line; the block events the engine reads become
//! [`BlockEvent`]s, the rest (G I P U, notify messages, passthrough commands)
//! are skipped and counted by kind.
//!
//! What an expert does before reading such a trace, the importer does too:
//! blkparse's wrapped negative timestamps (events before its first one print
//! as 1266874889.7 s: 2^64 ns taken mod 2^32 s) are unwrapped, the events are
//! sorted by time (`blkparse -i -` and per-CPU batches print out of order),
//! a completion's `[N]` is its errno however it was printed (65531 is -5),
//! and partition starts are read off the remap lines.
//!
//! What the text lacks, [`Import::notes`] says: no dirty-buffer events,
//! request merges that read like bio back merges, and whatever a trace
//! without Q, D or C lines cannot measure.

use std::collections::BTreeMap;
use std::fmt;

use tracer_common::{BlockAction, BlockEvent, EventKind, RWBS_BYTES};

use crate::geometry::{DevId, DiskGeometry};

/// Which input `--from` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextFormat {
    /// `blkparse -i TRACE` default output.
    Blkparse,
    /// `/sys/kernel/tracing/trace` with the `blk` tracer.
    FtraceBlk,
    /// blktrace's binary per-CPU files: FILE is one of them
    /// (`sda.blktrace.0`: all `sda.blktrace.N` beside it are read), their
    /// prefix (`sda`), or a directory holding one device's files.
    Blktrace,
}

impl TextFormat {
    pub fn name(self) -> &'static str {
        match self {
            TextFormat::Blkparse => "blkparse",
            TextFormat::FtraceBlk => "ftrace-blk",
            TextFormat::Blktrace => "blktrace",
        }
    }
}

/// The imported events and what could not be carried over.
#[derive(Clone, Debug, Default)]
pub struct Import {
    /// In time order, stable for equal stamps.
    pub events: Vec<BlockEvent>,
    /// Lines that looked like events but did not parse.
    pub unparsed: u64,
    /// Event lines the engine has no use for (G, I, P, U, notify messages,
    /// passthrough commands …); what they were is in `skipped_kinds`.
    pub skipped: u64,
    /// `skipped` by kind: the action ("G", "UT" …), "notify" (`m N` message
    /// lines), "passthrough" (commands with a byte count and no sectors), and
    /// in binary traces "process name" and "timestamp" records.
    pub skipped_kinds: BTreeMap<String, u64>,
    /// Completions that failed (a non-zero errno).
    pub failed: u64,
    /// Partition starts read off the remap lines (`A (8,0) <- (8,2) 2048`).
    pub partition_starts: Vec<PartitionStart>,
    /// What every line of a text trace was (all zero for binary traces).
    pub lines: LineCounts,
    /// blkparse's own `Total (dev):` blocks, set beside what the import read.
    pub summaries: Vec<SummaryCheck>,
    /// Devices whose G or I lines show requests: request-based, whether or
    /// not a command was dispatched.
    pub request_devices: Vec<u32>,
    pub notes: Vec<String>,
}

/// Every line of a text trace is one of these, so none is lost unsaid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineCounts {
    pub total: u64,
    /// Read as events (including the kinds the engine skips).
    pub events: u64,
    pub blank: u64,
    /// ftrace's `#` header, blkparse's `Input file … added`.
    pub header: u64,
    /// blkparse's summary blocks (`CPU0 (8,16):`, `Total (sda):`) …
    pub summary_blocks: u64,
    /// … their lines, with `Throughput`, `Events (…)` and `Skips:`.
    pub summary_lines: u64,
    /// `...` where whoever published the trace left lines out.
    pub elided: u64,
    /// Event lines with an I/O priority column (`Q WZS BEST 4 0 + 8`).
    pub priority: u64,
    /// Lines that look like events and do not parse.
    pub unreadable: u64,
    /// Lines that are neither events nor any of the above.
    pub other: u64,
}

/// One device's counts by blkparse's own reckoning (its `Total` block) and
/// by the import's: reads and writes queued, dispatched, requeued,
/// completed and merged, and the event lines (`Events (dev): N entries`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryCheck {
    pub device: String,
    pub blkparse: ActionCounts,
    pub import: ActionCounts,
}

/// Counts as blkparse's summary keeps them: `[read, write]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActionCounts {
    pub queued: [u64; 2],
    pub dispatched: [u64; 2],
    pub requeued: [u64; 2],
    pub completed: [u64; 2],
    pub merged: [u64; 2],
    /// `None` where the summary printed no `Events` line.
    pub entries: Option<u64>,
}

/// A partition's first sector on its disk, from a remap line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionStart {
    pub partition: DevId,
    pub disk: DevId,
    pub start: u64,
}

/// Why an import failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("no {format} event lines found (is this {format} output?)")]
    NoEvents { format: &'static str },
    #[error("{unreadable} of {looked} lines are not {format} output this reads (line {line_no}: `{line}`): a patched or custom-format (`blkparse -f`) trace? Only the default format is read, with or without -t")]
    Unreadable {
        format: &'static str,
        unreadable: u64,
        looked: u64,
        line_no: usize,
        line: String,
    },
    #[error("{0}")]
    Binary(String),
}

impl fmt::Display for TextFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What blkparse prints for time 0 when an event precedes its first one:
/// `(int)(t / 1e9)` and `t % 1e9` of `t = 2^64 - d`, i.e. 2^64 - 4·2^32·1e9 ns.
pub(crate) const BLKPARSE_WRAP_NS: i64 = 1_266_874_889_709_551_616;
/// Events printed this close below [`BLKPARSE_WRAP_NS`] are wrapped negatives.
const WRAP_WINDOW_NS: i64 = 3_600 * 1_000_000_000;

/// Where a C line's status goes, and what the importer saw of it.
#[derive(Default)]
struct Statuses {
    /// `[6367]`: a positive number is no errno (the 2009 ftrace plugin
    /// printed the sector there); read as success.
    not_errno: u64,
}

/// Parses the whole text. `C` completes a request on a request-based disk
/// of `geometry`, and a bio anywhere else (bio-based disks, and partitions,
/// where unremapped empty flushes complete); all `C` are requests when the
/// geometry is unknown.
pub fn import(
    text: &str,
    format: TextFormat,
    geometry: &[DiskGeometry],
) -> Result<Import, ImportError> {
    let request_based = request_based(geometry);
    let mut stamped: Vec<(i64, BlockEvent)> = Vec::new();
    let mut builder = Builder::default();
    let mut statuses = Statuses::default();
    let mut wrapped = 0u64;
    let mut bounced = Vec::new();
    let mut lines = LineCounts::default();
    let mut summary = SummaryReader::default();
    let mut counted: BTreeMap<String, ActionCounts> = BTreeMap::new();
    // The first line of each kind nobody reads, to quote in the refusal.
    let mut first_unreadable: Option<(usize, &str)> = None;
    let mut first_other: Option<(usize, &str)> = None;
    let mut prefix = LinePrefix::default();
    // Other lines that are no publisher's words: another format's data.
    let mut other_data = 0u64;
    let mut first_other_data: Option<(usize, &str)> = None;
    for (index, raw) in text.lines().enumerate() {
        lines.total += 1;
        // A Ctrl-C echoed by the terminal glues "^C" to the next line.
        let line = raw.strip_prefix("^C").unwrap_or(raw);
        let parsed = match format {
            TextFormat::Blkparse => {
                blkparse_fields(line).or_else(|| prefix.read_past(line, blkparse_fields))
            }
            TextFormat::FtraceBlk => ftrace_fields(line),
            TextFormat::Blktrace => None,
        };
        let mut unreadable = |lines: &mut LineCounts| {
            lines.unreadable += 1;
            first_unreadable.get_or_insert((index + 1, line));
        };
        let Some(mut fields) = parsed else {
            match non_event(format, line, &mut summary) {
                NonEvent::Blank => lines.blank += 1,
                NonEvent::Header => lines.header += 1,
                NonEvent::Elision => lines.elided += 1,
                NonEvent::SummaryHeader => {
                    lines.summary_blocks += 1;
                    lines.summary_lines += 1;
                }
                NonEvent::Summary => lines.summary_lines += 1,
                NonEvent::Unknown if looks_like_event(format, line) => unreadable(&mut lines),
                NonEvent::Unknown => {
                    lines.other += 1;
                    first_other.get_or_insert((index + 1, line));
                    if !is_prose(line) {
                        other_data += 1;
                        first_other_data.get_or_insert((index + 1, line));
                    }
                }
            }
            continue;
        };
        summary.block = None;
        if fields.priority {
            lines.priority += 1;
        }
        if format == TextFormat::Blkparse && fields.ts_ns > BLKPARSE_WRAP_NS - WRAP_WINDOW_NS {
            if fields.ts_ns < BLKPARSE_WRAP_NS {
                fields.ts_ns -= BLKPARSE_WRAP_NS;
                wrapped += 1;
            } else {
                builder.unparsed += 1;
                unreadable(&mut lines);
                continue;
            }
        }
        if fields.action == "B" {
            bounced.extend(line_range(&fields));
        }
        if matches!(fields.action, "G" | "I") {
            let range = line_range(&fields);
            builder.saw_request(dev_of(fields.dev), fields.action == "I", range);
        }
        match event_of(&fields, request_based.as_deref(), &mut statuses) {
            Parsed::Event(event) => stamped.push((fields.ts_ns, event)),
            Parsed::Skipped(kind) => builder.skip(kind),
            Parsed::Bad => {
                builder.unparsed += 1;
                unreadable(&mut lines);
                continue;
            }
        }
        lines.events += 1;
        count_as_blkparse(counted.entry(fields.dev.to_owned()).or_default(), &fields);
    }
    // Lines nobody reads: a few are a damaged or annotated trace, more are
    // another format, which is refused rather than half read.
    let looked = lines.events + lines.unreadable;
    // (A text with no event at all, where a line or two only starts like
    // one, is no trace: refused below as such.)
    let mostly_trace = lines.events > 0 || lines.unreadable > tolerated(looked + lines.other);
    let refused = if lines.unreadable > tolerated(looked) && mostly_trace {
        first_unreadable.map(|at| (lines.unreadable, looked, at))
    } else if format == TextFormat::Blkparse
        && lines.events > 0
        && (other_data > tolerated(looked + lines.other) || lines.other > lines.events)
    {
        // Words between events are a publisher's remarks; lines of data
        // in no blkparse shape are a custom format (`-F "Q,%a %S %n"`)
        // whose events would be lost. (An ftrace buffer holds other
        // tracers' events as a rule.)
        let first = first_other_data.or(first_other);
        first.map(|at| {
            (
                other_data.max(lines.other - other_data),
                looked + lines.other,
                at,
            )
        })
    } else {
        None
    };
    if let Some((unreadable, looked, (line_no, line))) = refused {
        return Err(ImportError::Unreadable {
            format: format.name(),
            unreadable,
            looked,
            line_no,
            line: line.trim().chars().take(100).collect(),
        });
    }
    // Shift a trace with unwrapped negatives so it starts at 0.
    let shift = stamped.iter().map(|(ts, _)| *ts).min().unwrap_or(0).min(0);
    let events = stamped
        .into_iter()
        .map(|(ts, mut event)| {
            event.ts_ns = (ts - shift) as u64;
            event
        })
        .collect();
    let mut import = builder.finish(events, format)?;
    import.summaries = summary.checks(&counted);
    let bio_completions = bounced_bio_completions(&mut import.events, &bounced);
    if bio_completions > 0 {
        import.notes.push(format!(
            "{bio_completions} C lines are bounced bios' own completions after their request's (blk traces a bio's completion when it was bounced): read as bio completions, not commands"
        ));
    }
    if wrapped > 0 {
        import.notes.insert(
            0,
            format!(
                "{wrapped} events precede blkparse's first one (printed as 1266874889.7 s, 2^64 ns wrapped): read as {:.6} s before it, and the trace shifted to start at 0",
                -shift as f64 / 1e9
            ),
        );
    }
    if statuses.not_errno > 0 {
        import.notes.push(format!(
            "{} completions print a status that is no errno (a positive [N]): read as success",
            statuses.not_errno
        ));
    }
    if format == TextFormat::FtraceBlk {
        import
            .notes
            .push("ftrace timestamps have microsecond resolution: latencies are rounded".into());
    }
    import.notes.push(lines_note(&lines, first_other));
    if let Some(note) = prefix.note() {
        import.notes.push(note);
    }
    if lines.priority > 0 {
        import.notes.push(format!(
            "{} event lines carry an I/O priority column after rwbs (`Q WZS BEST 4 0 + 8`, as blktrace-tools' priority extension prints): read past it",
            lines.priority
        ));
    }
    for check in &import.summaries {
        import.notes.push(check.note(lines.elided));
    }
    if lines.elided > 0 {
        // The D of a request still waiting may be among the lines left out.
        for note in import.notes.iter_mut() {
            if note.contains("never dispatched") {
                note.push_str(" (or their D is among the lines the publisher left out)");
            }
        }
    }
    import.lines = lines;
    Ok(import)
}

/// Words a tool put before every line (`ts`, a log collector: `Jan 10
/// 22:42:56   8,0 3 7 …`), found on the first line that reads only
/// without them, then read past on every line.
#[derive(Default)]
struct LinePrefix {
    words: Option<usize>,
    example: String,
    lines: u64,
}

impl LinePrefix {
    /// The longest prefix looked for: a date and a time, a host, a tag.
    const MAX_WORDS: usize = 5;

    fn read_past<'a>(
        &mut self,
        line: &'a str,
        fields: impl Fn(&'a str) -> Option<Fields<'a>>,
    ) -> Option<Fields<'a>> {
        let after = |n: usize| {
            let mut words = Words(line);
            for _ in 0..n {
                words.next()?;
            }
            Some(words.0)
        };
        // The count found first, then any (a line number with or
        // without a marker: `* 1 249,0 …`, `  3   8,0 …`).
        let n = self
            .words
            .filter(|&n| after(n).and_then(&fields).is_some())
            .or_else(|| (1..=Self::MAX_WORDS).find(|&n| after(n).and_then(&fields).is_some()))?;
        let prefix = &line[..line.len() - after(n)?.len()];
        if prefix.contains(',') {
            // A device number in it: a damaged line, not a prefix.
            return None;
        }
        if self.words.is_none() {
            self.example = prefix.trim().to_owned();
            self.words = Some(n);
        }
        let read = fields(after(n)?)?;
        self.lines += 1;
        Some(read)
    }

    fn note(&self) -> Option<String> {
        (self.lines > 0).then(|| {
            format!(
                "{} lines carry words before the trace's own fields (`{}`, as `ts`, a log collector or a line count adds): read past them",
                self.lines,
                self.example
            )
        })
    }
}

/// Unreadable lines a trace may hold and still be read: one in fifty (a
/// mail's wrapped line, a cut last line), never more.
fn tolerated(looked: u64) -> u64 {
    looked / 50
}

/// "read 57 event lines; also 2 summary blocks (22 lines), 2 elision lines
/// (`...`), 3 blank": where every line went.
fn lines_note(lines: &LineCounts, first_other: Option<(usize, &str)>) -> String {
    let mut also = Vec::new();
    if lines.summary_blocks > 0 || lines.summary_lines > 0 {
        also.push(format!(
            "{} summary block{} ({} lines, blkparse's own counts)",
            lines.summary_blocks,
            if lines.summary_blocks == 1 { "" } else { "s" },
            lines.summary_lines
        ));
    }
    if lines.elided > 0 {
        also.push(format!(
            "{} elision line{} (`...`: lines the publisher left out)",
            lines.elided,
            if lines.elided == 1 { "" } else { "s" }
        ));
    }
    if lines.header > 0 {
        also.push(format!("{} header", lines.header));
    }
    if lines.blank > 0 {
        also.push(format!("{} blank", lines.blank));
    }
    if lines.unreadable > 0 {
        also.push(format!(
            "{} event lines that do not parse, left out",
            lines.unreadable
        ));
    }
    if let Some((line_no, line)) = first_other {
        also.push(format!(
            "{} other line{} (first, line {line_no}: `{}`)",
            lines.other,
            if lines.other == 1 { "" } else { "s" },
            line.trim().chars().take(60).collect::<String>()
        ));
    }
    let mut note = format!("read {} event lines of {}", lines.events, lines.total);
    if !also.is_empty() {
        note.push_str("; also ");
        note.push_str(&also.join(", "));
    }
    note
}

/// A line that is no event line, by what it is.
enum NonEvent {
    Blank,
    Header,
    Elision,
    SummaryHeader,
    Summary,
    Unknown,
}

/// blkparse's summary lines, by their labels (`dump_io_stats` and the end
/// of the run).
const SUMMARY_LABELS: &[&str] = &[
    "Reads Queued:",
    "Read Dispatches:",
    "Reads Requeued:",
    "Reads Completed:",
    "Read Merges:",
    "Read depth:",
    "PC Reads Queued:",
    "PC Read Disp.:",
    "PC Reads Req.:",
    "PC Reads Compl.:",
    "IO unplugs:",
    "Allocation wait:",
    "Dispatch wait:",
    "Completion wait:",
    "Throughput (R/W):",
    "Events (",
    "Skips:",
];

/// Reads blkparse's summary blocks as they go by.
#[derive(Default)]
struct SummaryReader {
    /// The block being read: `(true, dev)` for `Total (dev):`, `(false,
    /// dev)` for `CPU3 (dev):`.
    block: Option<(bool, String)>,
    /// By device: the `Total` block's counts.
    totals: BTreeMap<String, ActionCounts>,
    /// By device: the per-CPU blocks' counts and how many there were (with
    /// one CPU blkparse prints no `Total`: that CPU's block is it).
    cpus: BTreeMap<String, (u32, ActionCounts)>,
    /// By device: `Events (dev): N entries`.
    entries: BTreeMap<String, u64>,
}

impl SummaryReader {
    fn open(&mut self, total: bool, dev: &str) {
        self.block = Some((total, dev.to_owned()));
        if !total {
            self.cpus.entry(dev.to_owned()).or_default().0 += 1;
        }
    }

    /// Takes the numbers of a summary line.
    fn read(&mut self, line: &str) {
        if let Some(rest) = line.trim().strip_prefix("Events (") {
            // "Events (259,0): 30 entries": after the blocks, named.
            if let Some((dev, count)) = rest.split_once("): ") {
                if let Some(n) = count.strip_suffix(" entries").and_then(number) {
                    self.entries.insert(dev.to_owned(), n);
                }
            }
            return;
        }
        let counts = match &self.block {
            Some((true, dev)) => self.totals.entry(dev.clone()).or_default(),
            Some((false, dev)) => &mut self.cpus.entry(dev.clone()).or_default().1,
            None => return,
        };
        let ActionCounts {
            queued: [qr, qw],
            dispatched: [dr, dw],
            requeued: [rr, rw],
            completed: [cr, cw],
            merged: [mr, mw],
            ..
        } = counts;
        for (label, slot) in [
            ("Reads Queued:", qr),
            ("Writes Queued:", qw),
            ("Read Dispatches:", dr),
            ("Write Dispatches:", dw),
            ("Reads Requeued:", rr),
            ("Writes Requeued:", rw),
            ("Reads Completed:", cr),
            ("Writes Completed:", cw),
            ("Read Merges:", mr),
            ("Write Merges:", mw),
        ] {
            if let Some((_, after)) = line.split_once(label) {
                if let Some(n) = number(after) {
                    // Per-CPU blocks add up when a device has several.
                    *slot += n;
                }
            }
        }
    }

    /// blkparse's totals set beside what the import counted: a device's
    /// `Total` block, or its one CPU's block when it ran on one, with its
    /// `Events` count. A block named by disk name (`Total (sda):`) is
    /// matched when the trace holds one device only.
    fn checks(&self, counted: &BTreeMap<String, ActionCounts>) -> Vec<SummaryCheck> {
        let mut devices: Vec<&String> = self.totals.keys().collect();
        devices.extend(self.cpus.keys().filter(|d| !self.totals.contains_key(*d)));
        devices
            .into_iter()
            .filter_map(|device| {
                let mut blkparse = match (self.totals.get(device), self.cpus.get(device)) {
                    (Some(total), _) => *total,
                    (None, Some((1, cpu))) => *cpu,
                    // Several CPUs and no Total: an excerpt; no check.
                    _ => return None,
                };
                blkparse.entries = self.entries.get(device).copied();
                let import = match counted.get(device) {
                    Some(counts) => *counts,
                    None if counted.len() == 1 => *counted.values().next()?,
                    None => ActionCounts::default(),
                };
                Some(SummaryCheck {
                    device: device.clone(),
                    blkparse,
                    import: ActionCounts {
                        entries: blkparse.entries.and(import.entries),
                        ..import
                    },
                })
            })
            .collect()
    }
}

/// "1,234,  " → 1234: blkparse prints its counts with thousands separators.
fn number(text: &str) -> Option<u64> {
    let text = text.trim_start();
    let bytes = text.as_bytes();
    let mut digits = String::new();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'0'..=b'9' => digits.push(*b as char),
            b',' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {}
            _ => break,
        }
    }
    digits.parse().ok()
}

impl SummaryCheck {
    /// Whether blkparse's reckoning and the import's agree.
    pub fn agrees(&self) -> bool {
        self.blkparse == self.import
    }

    /// `elided`: the text's `...` lines, which explain a difference.
    fn note(&self, elided: u64) -> String {
        let text = |c: &ActionCounts| {
            let mut parts = Vec::new();
            for (name, [r, w]) in [
                ("Q", c.queued),
                ("D", c.dispatched),
                ("R", c.requeued),
                ("C", c.completed),
                ("M", c.merged),
            ] {
                parts.push(format!("{name} {r}r/{w}w"));
            }
            if let Some(n) = c.entries {
                parts.push(format!("{n} events"));
            }
            parts.join(", ")
        };
        if self.agrees() {
            format!(
                "blkparse's own summary for {} agrees with the import: {}",
                self.device,
                text(&self.import)
            )
        } else {
            let why = match elided {
                0 => "lines missing from this text, or an excerpt?".to_owned(),
                n => format!("an excerpt: the publisher left lines out at {n} places"),
            };
            format!(
                "blkparse's own summary for {} differs from the import ({why}): blkparse {}; import {}",
                self.device,
                text(&self.blkparse),
                text(&self.import)
            )
        }
    }
}

/// What blkparse's summary counts for an event line (`dump_trace_fs`): Q,
/// D, R, C and both merges, by the write bit; passthrough commands apart.
fn count_as_blkparse(counts: &mut ActionCounts, fields: &Fields<'_>) {
    *counts.entries.get_or_insert(0) += 1;
    if is_passthrough(fields.action, fields.rest) {
        return;
    }
    // fill_rwbs: an optional F (flush), then D (discard, a write), W, R or N.
    let letters = fields.rwbs.strip_prefix('F').filter(|l| !l.is_empty());
    let first = letters.unwrap_or(fields.rwbs).bytes().next();
    let w = usize::from(matches!(first, Some(b'W' | b'D')));
    let slot = match fields.action {
        "Q" => &mut counts.queued,
        "D" => &mut counts.dispatched,
        "R" => &mut counts.requeued,
        "C" => &mut counts.completed,
        "M" | "F" => &mut counts.merged,
        _ => return,
    };
    slot[w] += 1;
}

/// What a line that is no event line is.
fn non_event(format: TextFormat, line: &str, summary: &mut SummaryReader) -> NonEvent {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        summary.block = None;
        return NonEvent::Blank;
    }
    if is_elision(trimmed) {
        return NonEvent::Elision;
    }
    let rule = |c: char| matches!(c, '-' | '=' | '*' | '~');
    if trimmed.chars().filter(|c| rule(*c)).count() >= 3
        && trimmed.chars().all(|c| rule(c) || c == ' ')
    {
        // A rule drawn between captures.
        return NonEvent::Header;
    }
    match format {
        TextFormat::FtraceBlk if trimmed.starts_with('#') => return NonEvent::Header,
        TextFormat::Blkparse => {}
        _ => return NonEvent::Unknown,
    }
    if trimmed.starts_with("Input file ") && trimmed.ends_with(" added") {
        return NonEvent::Header;
    }
    // "CPU0 (8,16):", "Total (sda):"
    if let Some(name) = trimmed
        .strip_suffix("):")
        .and_then(|head| head.split_once(" ("))
    {
        let (who, dev) = name;
        let cpu = who
            .strip_prefix("CPU")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if who == "Total" || cpu {
            summary.open(who == "Total", dev);
            return NonEvent::SummaryHeader;
        }
    }
    if summary.block.is_some() || SUMMARY_LABELS.iter().any(|l| trimmed.starts_with(l)) {
        summary.read(trimmed);
        return NonEvent::Summary;
    }
    NonEvent::Unknown
}

/// A publisher's words between events (`Split off chunk-sized (1024
/// sectors) request:`): mostly words of letters, unlike a custom format's
/// data (`Q 401408 8`).
fn is_prose(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let core = |w: &&str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_owned();
    let wordy = words
        .iter()
        .map(core)
        .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_alphabetic() || c == '-' || c == '_'))
        .count();
    let numbers = words
        .iter()
        .map(core)
        .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
        .count();
    (words.len() >= 3 && wordy * 2 >= words.len()) || (numbers == 0 && wordy > 0)
}

/// Where a publisher left lines out: `...`, `…`, `[...]`, `<snip>`, or a
/// whole-line remark in brackets (`(alot of the same)`).
fn is_elision(trimmed: &str) -> bool {
    let inner = trimmed
        .strip_prefix(['[', '(', '<'])
        .and_then(|rest| rest.strip_suffix([']', ')', '>']))
        .unwrap_or(trimmed)
        .trim();
    let dots = |text: &str| !text.is_empty() && text.chars().all(|c| c == '.' || c == '…');
    let bracketed = inner.len() < trimmed.len();
    dots(inner)
        || matches!(
            inner.to_ascii_lowercase().as_str(),
            "snip" | "snipped" | "cut"
        )
        || (bracketed && !inner.starts_with(|c: char| c.is_ascii_digit()))
}

/// Whether a line nobody read looks like an event line: blkparse's begin
/// with the device (`8,16`).
fn looks_like_event(format: TextFormat, line: &str) -> bool {
    format == TextFormat::Blkparse
        && line.split_whitespace().next().is_some_and(|word| {
            word.split_once(',').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        })
}

/// Which disks complete requests (`None`: unknown, all `C` are requests).
pub(crate) fn request_based(geometry: &[DiskGeometry]) -> Option<Vec<u32>> {
    (!geometry.is_empty()).then(|| {
        geometry
            .iter()
            .filter(|disk| disk.request_based)
            .filter_map(|disk| disk.dev.map(DevId::to_kernel))
            .collect()
    })
}

/// What both readers (text and binary) count while they read.
#[derive(Default)]
pub(crate) struct Builder {
    pub(crate) unparsed: u64,
    pub(crate) skipped: u64,
    pub(crate) skipped_kinds: BTreeMap<String, u64>,
    /// Devices with G or I lines: only request-based devices print them.
    request_devices: std::collections::BTreeSet<u32>,
    /// Requests inserted into the scheduler (I), by range.
    inserted: BTreeMap<(u32, u64, u32), u64>,
}

impl Builder {
    /// A G or I line: the device is request-based; an I's request waits in
    /// the scheduler until a D of its range dispatches it.
    pub(crate) fn saw_request(
        &mut self,
        dev: Option<u32>,
        inserted: bool,
        range: Option<(u32, u64, u32)>,
    ) {
        self.request_devices.extend(dev);
        if let (true, Some(range)) = (inserted, range) {
            *self.inserted.entry(range).or_default() += 1;
        }
    }

    /// Per device, the requests inserted (I) that no D of their range dispatched.
    fn undispatched(&self, events: &[BlockEvent]) -> BTreeMap<u32, u64> {
        let mut waiting = self.inserted.clone();
        for event in events.iter().filter(|e| e.kind == EventKind::Issue as u8) {
            if let Some(n) = waiting.get_mut(&(event.dev, event.sector, event.nr_sector)) {
                *n = n.saturating_sub(1);
            }
        }
        let mut by_dev = BTreeMap::new();
        for ((dev, _, _), n) in waiting.into_iter().filter(|(_, n)| *n > 0) {
            *by_dev.entry(dev).or_default() += n;
        }
        by_dev
    }

    pub(crate) fn skip(&mut self, kind: &str) {
        self.skipped += 1;
        *self.skipped_kinds.entry(kind.to_owned()).or_default() += 1;
    }

    /// Sorts the events by time (stably) and says what the trace cannot give.
    pub(crate) fn finish(
        self,
        mut events: Vec<BlockEvent>,
        format: TextFormat,
    ) -> Result<Import, ImportError> {
        let request_devices: Vec<u32> = self.request_devices.iter().copied().collect();
        let mut waiting_notes = Vec::new();
        for (dev, n) in self.undispatched(&events) {
            waiting_notes.push(format!(
                "{n} requests on {} were inserted into the I/O scheduler (I) and never dispatched (no D of their range): they were still waiting when the trace ended, held by the scheduler or by a device that took no more commands, not lost by the capture",
                DevId::from_kernel(dev)
            ));
        }
        if events.is_empty() && self.skipped == 0 {
            return Err(ImportError::NoEvents {
                format: format.name(),
            });
        }
        if events.is_empty() {
            // A trace of messages or passthrough commands only: a valid trace
            // with no block I/O in it, not a wrong format.
            let mut notes = vec![format!(
                "no block I/O events: only {} lines the engine has no use for ({})",
                self.skipped,
                kinds_text(&self.skipped_kinds)
            )];
            if self.unparsed > 0 {
                notes.push(format!(
                    "{} event lines could not be parsed and were left out",
                    self.unparsed
                ));
            }
            notes.extend(waiting_notes);
            return Ok(Import {
                unparsed: self.unparsed,
                skipped: self.skipped,
                skipped_kinds: self.skipped_kinds,
                request_devices,
                notes,
                ..Default::default()
            });
        }
        let out_of_order = events
            .windows(2)
            .filter(|w| w[1].ts_ns < w[0].ts_ns)
            .count();
        events.sort_by_key(|event| event.ts_ns);
        let split_points_read = read_split_points(&mut events);
        let count = |kinds: &[EventKind]| {
            events
                .iter()
                .filter(|e| kinds.iter().any(|k| *k as u8 == e.kind))
                .count()
        };
        let queued = count(&[EventKind::Queue]);
        let issued = count(&[EventKind::Issue]);
        let completed = count(&[EventKind::Complete, EventKind::BioComplete]);
        let merges = count(&[EventKind::Backmerge]);
        let failed: Vec<i32> = events
            .iter()
            .filter(|e| {
                matches!(
                    EventKind::from_u8(e.kind),
                    Some(EventKind::Complete | EventKind::BioComplete)
                ) && e.error != 0
            })
            .map(|e| e.error)
            .collect();
        let partition_starts = partition_starts(&events);
        let mut notes = Vec::new();
        if out_of_order > 0 {
            notes.push(format!(
                "{format} lines are not in time order ({out_of_order} steps back, as `blkparse -i -` and per-CPU batches print): events sorted by time"
            ));
        }
        if split_points_read > 0 {
            notes.push(format!(
                "{split_points_read} splits print no split point (`X … / 0`, as some kernels print discards): each read off the next line of its range, the piece it left"
            ));
        }
        if queued == 0 {
            notes.push(format!(
                "no Q lines (a bio-based device such as md or dm, or a filtered trace): user I/Os cannot be measured, only what the trace shows below them ({issued} D, {completed} C)"
            ));
        }
        if issued == 0 {
            notes.push(format!(
                "no D lines: device commands cannot be counted and issue-to-complete times cannot be measured ({queued} Q, {completed} C)"
            ));
        }
        if completed == 0 {
            notes.push(format!(
                "no C lines: nothing completes in this trace, so no latency can be measured ({queued} Q, {issued} D)"
            ));
        }
        if !failed.is_empty() {
            let mut by_errno: BTreeMap<i32, u64> = BTreeMap::new();
            for errno in &failed {
                *by_errno.entry(*errno).or_default() += 1;
            }
            let list: Vec<String> = by_errno
                .iter()
                .map(|(errno, n)| format!("{n} × {errno}"))
                .collect();
            notes.push(format!(
                "{} completions failed (errno {})",
                failed.len(),
                list.join(", ")
            ));
        }
        for part in &partition_starts {
            notes.push(format!(
                "partition {} starts at sector {} of {} (read off its remap lines)",
                part.partition, part.start, part.disk
            ));
        }
        if format != TextFormat::Blktrace {
            notes.push(format!(
                "{format} has no dirty-buffer events: buffered sub-page writes are not measured"
            ));
        }
        if merges > 0 {
            notes.push(format!(
                "{format} prints request merges like bio back merges (M): {merges} merges counted as back merges"
            ));
        }
        notes.extend(waiting_notes);
        if self.skipped > 0 {
            notes.push(format!(
                "{} lines the engine has no use for were skipped: {}",
                self.skipped,
                kinds_text(&self.skipped_kinds)
            ));
        }
        if self.unparsed > 0 {
            notes.push(format!(
                "{} event lines could not be parsed and were left out",
                self.unparsed
            ));
        }
        Ok(Import {
            events,
            unparsed: self.unparsed,
            skipped: self.skipped,
            skipped_kinds: self.skipped_kinds,
            failed: failed.len() as u64,
            partition_starts,
            lines: LineCounts::default(),
            summaries: Vec::new(),
            request_devices,
            notes,
        })
    }
}

/// "12 G, 2 notify (m N), 1 passthrough".
fn kinds_text(kinds: &BTreeMap<String, u64>) -> String {
    let list: Vec<String> = kinds
        .iter()
        .map(|(kind, n)| match kind.as_str() {
            "notify" => format!("{n} notify (m N)"),
            "process name" => format!("{n} process name (pid → command)"),
            "timestamp" => format!("{n} timestamp (trace start, wall clock)"),
            "passthrough" => format!("{n} passthrough (no sector range)"),
            "failed passthrough" => format!(
                "{n} failed passthrough (completions with an error status: the device failed commands a passthrough user such as smartctl sent)"
            ),
            _ => format!("{n} {kind}"),
        })
        .collect();
    list.join(", ")
}

/// A line's range: (dev, sector, sectors).
fn line_range(fields: &Fields<'_>) -> Option<(u32, u64, u32)> {
    let mut words = Words(fields.rest);
    let sector = words.next()?.parse().ok()?;
    if words.next()? != "+" {
        return None;
    }
    Some((dev_of(fields.dev)?, sector, words.next()?.parse().ok()?))
}

/// A request completion (`C`) of exactly a bounced bio's range that comes
/// after a completion already covering it is that bio's own completion
/// (`block_bio_complete`, traced because the bio was bounced), not a
/// second command's. Relabels them; returns how many.
fn bounced_bio_completions(events: &mut [BlockEvent], bounced: &[(u32, u64, u32)]) -> u64 {
    if bounced.is_empty() {
        return 0;
    }
    let bounced: std::collections::HashSet<_> = bounced.iter().copied().collect();
    let mut completed: Vec<(u32, u64, u64)> = Vec::new();
    let mut relabeled = 0;
    for event in events.iter_mut() {
        if event.kind != EventKind::Complete as u8 || event.nr_sector == 0 {
            continue;
        }
        let (start, end) = (event.sector, event.sector + u64::from(event.nr_sector));
        let covered = completed
            .iter()
            .any(|&(dev, s, e)| dev == event.dev && s <= start && end <= e);
        if covered && bounced.contains(&(event.dev, event.sector, event.nr_sector)) {
            event.kind = EventKind::BioComplete as u8;
            relabeled += 1;
        } else {
            completed.push((event.dev, start, end));
        }
    }
    relabeled
}

/// Lines this far ahead are searched for a split's piece.
const SPLIT_LOOKAHEAD: usize = 4096;

/// Splits printed without their split point (`X DS 0 / 0`) take it from the
/// next event of their device at their sector with a length: the piece the
/// cut left (its issue, or its completion). Returns how many were read.
fn read_split_points(events: &mut [BlockEvent]) -> u64 {
    let mut read = 0;
    for index in 0..events.len() {
        let split = events[index];
        if split.kind != EventKind::Split as u8 || split.aux_sector > split.sector {
            continue;
        }
        let piece = events[index + 1..]
            .iter()
            .take(SPLIT_LOOKAHEAD)
            .find(|e| {
                e.dev == split.dev
                    && e.sector == split.sector
                    && e.nr_sector > 0
                    && e.kind != EventKind::Split as u8
            })
            .map(|e| e.nr_sector);
        if let Some(piece) = piece {
            events[index].aux_sector = split.sector + u64::from(piece);
            read += 1;
        }
    }
    read
}

/// Partitions whose remaps onto their disk (same major) all give one start.
fn partition_starts(events: &[BlockEvent]) -> Vec<PartitionStart> {
    let mut starts: BTreeMap<u32, Option<(u32, u64)>> = BTreeMap::new();
    for event in events {
        let Some(BlockAction::Remap {
            from_dev,
            from_sector,
        }) = event.action()
        else {
            continue;
        };
        let (disk, part) = (DevId::from_kernel(event.dev), DevId::from_kernel(from_dev));
        if disk == part || disk.major != part.major {
            continue;
        }
        let seen = event
            .sector
            .checked_sub(from_sector)
            .map(|start| (event.dev, start));
        let entry = starts.entry(from_dev).or_insert(seen);
        if *entry != seen {
            *entry = None;
        }
    }
    starts
        .into_iter()
        .filter_map(|(part, seen)| {
            seen.map(|(disk, start)| PartitionStart {
                partition: DevId::from_kernel(part),
                disk: DevId::from_kernel(disk),
                start,
            })
        })
        .collect()
}

/// Maps a printed completion status to a negative errno: blkparse and the
/// ftrace plugin print the kernel's `u16` (65531 for -5), some tools an
/// `u32` (4294967291), others the signed value. `None`: no errno at all.
pub(crate) fn errno_of(value: i64) -> Option<i32> {
    const MAX_ERRNO: i64 = 4095;
    match value {
        0 => Some(0),
        v if (-MAX_ERRNO..0).contains(&v) => Some(v as i32),
        v if (65536 - MAX_ERRNO..65536).contains(&v) => Some((v - 65536) as i32),
        v if ((1i64 << 32) - MAX_ERRNO..(1i64 << 32)).contains(&v) => {
            Some((v - (1i64 << 32)) as i32)
        }
        _ => None,
    }
}

/// The fields every action line has, borrowed from the line.
#[derive(Debug, PartialEq, Eq)]
struct Fields<'a> {
    dev: &'a str,
    /// Signed: blkparse's wrapped negatives are unwrapped in place.
    ts_ns: i64,
    pid: u32,
    action: &'a str,
    rwbs: &'a str,
    /// What follows rwbs: "2048 + 8 [dd]", "2048 / 2056 [dd]", "2048 + 8 <- (7,1) 0".
    rest: &'a str,
    /// An I/O priority column stood between rwbs and `rest`.
    priority: bool,
    /// A bio's completion (`block_bio_complete`), not a request's.
    bio_completion: bool,
}

/// A cgroup column: "1,0" (ino,gen in hex) or a cgroup path.
fn is_cgroup(word: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    word.starts_with('/')
        || word == "<...>"
        || word.split_once(',').is_some_and(|(a, b)| hex(a) && hex(b))
}

/// `  8,0    3        1     0.000000000  1234  Q  WS 2048 + 8 [dd]`, or with
/// a cgroup column before the action: `39952 1,0  m   N bfq …`.
fn blkparse_fields(line: &str) -> Option<Fields<'_>> {
    let mut words = Words(line);
    let dev = words.next()?;
    if !dev.contains(',') {
        return None;
    }
    let _cpu: u32 = words.next()?.parse().ok()?;
    let _sequence: u64 = words.next()?.parse().ok()?;
    let ts_ns = seconds_to_ns(words.next()?)?;
    let pid = words.next()?.parse().ok()?;
    let mut action = words.next()?;
    if is_cgroup(action) {
        action = words.next()?;
    }
    let rwbs = words.next()?;
    let (rest, priority) = after_priority(words.0);
    Some(Fields {
        dev,
        ts_ns: i64::try_from(ts_ns).ok()?,
        pid,
        action,
        rwbs,
        rest,
        priority,
        bio_completion: false,
    })
}

/// The I/O priority column a patched blkparse prints after rwbs
/// (blktrace-tools' priority extension, RFC 2019: `Q WZS BEST 4 0 + 8`):
/// the class (NONE REAL BEST IDLE) and its level, or `ERRR` alone. What
/// follows it, and whether it was there.
fn after_priority(rest: &str) -> (&str, bool) {
    let mut words = Words(rest);
    match words.next() {
        Some("NONE" | "REAL" | "BEST" | "IDLE") => {
            let level = words.next();
            let after = words.0;
            match level.is_some_and(|l| l.len() == 1 && l.bytes().all(|b| b.is_ascii_digit())) {
                true => (after.trim(), true),
                false => (rest.trim(), false),
            }
        }
        Some("ERRR") => (words.0.trim(), true),
        // The RFC's later form prints the class's letter alone
        // (`Q ZAS N 262144 + 8`): where a sector or `[` follows, no rwbs
        // letter can stand there.
        Some("N" | "R" | "B" | "I")
            if words
                .0
                .trim_start()
                .starts_with(|c: char| c.is_ascii_digit() || c == '[') =>
        {
            (words.0.trim(), true)
        }
        _ => (rest.trim(), false),
    }
}

/// `      dd-1234    [001] d..1.   123.456789: 7,0    Q  WS 2048 + 8 [dd]`,
/// with or without the irq-flags column, and with or without a cgroup
/// column after the device (`7,0 1,0  m   N …`).
fn ftrace_fields(line: &str) -> Option<Fields<'_>> {
    if line.starts_with('#') {
        return None;
    }
    let (head, event) = line.split_once(": ")?;
    let (task, after_task) = head.rsplit_once('[')?;
    let (_, pid) = task.trim().rsplit_once('-')?;
    let ts_ns = seconds_to_ns(after_task.split_whitespace().last()?)?;
    let pid = pid.parse().ok()?;
    let ts_ns = i64::try_from(ts_ns).ok()?;
    if let Some((name, args)) = event.split_once(": ") {
        if let Some(tracepoint) = name.trim().strip_prefix("block_") {
            return tracepoint_fields(tracepoint, args, ts_ns, pid);
        }
    }
    let mut words = Words(event);
    let dev = words.next()?;
    if !dev.contains(',') {
        return None;
    }
    let mut action = words.next()?;
    if is_cgroup(action) {
        action = words.next()?;
    }
    let rwbs = words.next()?;
    Some(Fields {
        dev,
        ts_ns,
        pid,
        action,
        rwbs,
        rest: words.0.trim(),
        priority: false,
        bio_completion: false,
    })
}

/// A block tracepoint's own line in the ftrace buffer (`echo 1 >
/// events/block/enable`, or trace_pipe): `block_rq_issue: 259,0 WFSU
/// 16384 () 768 + 32 none,0,0 [xfs_io]`, read as the `blk` tracer's action
/// letter. Request events print bytes and a command `(…)` before the
/// sector (bytes only on issue and insert), and since 6.10 an ioprio after
/// the range, which the status scan steps over.
fn tracepoint_fields<'a>(
    tracepoint: &str,
    args: &'a str,
    ts_ns: i64,
    pid: u32,
) -> Option<Fields<'a>> {
    let (action, request) = match tracepoint {
        "bio_queue" => ("Q", false),
        "getrq" => ("G", false),
        "rq_insert" => ("I", true),
        "rq_issue" => ("D", true),
        "rq_complete" => ("C", true),
        "rq_requeue" => ("R", true),
        "split" => ("X", false),
        "bio_remap" | "rq_remap" => ("A", false),
        "bio_backmerge" => ("M", false),
        "bio_frontmerge" => ("F", false),
        "bio_complete" => ("C", false),
        "bio_bounce" => ("B", false),
        "plug" => ("P", false),
        "unplug" => ("U", false),
        // What the `blk` tracer has no letter for, named.
        "io_start" => ("block_io_start", false),
        "io_done" => ("block_io_done", false),
        "rq_merge" => ("block_rq_merge", false),
        "rq_error" => ("block_rq_error", false),
        "dirty_buffer" | "touch_buffer" => ("buffer event", false),
        _ => ("other block tracepoint", false),
    };
    let skipped = |action| Fields {
        dev: "0,0",
        ts_ns,
        pid,
        action,
        rwbs: "N",
        rest: "",
        priority: false,
        bio_completion: false,
    };
    if !action.bytes().all(|b| b.is_ascii_uppercase()) || matches!(action, "P" | "U") {
        return Some(skipped(action));
    }
    let mut words = Words(args);
    let dev = words.next()?;
    if !dev.contains(',') {
        return None;
    }
    let rwbs = words.next()?;
    let mut rest = words.0.trim_start();
    if request {
        // "16384 () 768 + 32": the bytes (issue, insert), then the command.
        let open = rest.find('(')?;
        let close = open + rest[open..].find(')')?;
        rest = rest[close + 1..].trim_start();
    }
    Some(Fields {
        dev,
        ts_ns,
        pid,
        action,
        rwbs,
        rest: rest.trim(),
        priority: false,
        bio_completion: tracepoint == "bio_complete",
    })
}

/// Whitespace-separated words, keeping the unread rest.
struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let text = self.0.trim_start();
        if text.is_empty() {
            return None;
        }
        let end = text.find(char::is_whitespace).unwrap_or(text.len());
        self.0 = &text[end..];
        Some(&text[..end])
    }
}

/// "12.345678" or "0.000000001" seconds, exactly, as nanoseconds.
fn seconds_to_ns(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = whole.parse().ok()?;
    let mut nanos: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    for _ in fraction.len()..9 {
        nanos *= 10;
    }
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// "7,16" as a kernel dev_t.
fn dev_of(text: &str) -> Option<u32> {
    let (major, minor) = text
        .trim_matches(|c| c == '(' || c == ')')
        .split_once(',')?;
    let (major, minor): (u32, u32) = (major.trim().parse().ok()?, minor.trim().parse().ok()?);
    (major < (1 << 12) && minor < (1 << 20)).then(|| DevId::new(major, minor).to_kernel())
}

enum Parsed {
    Event(BlockEvent),
    /// A line of this kind, of no use to the engine.
    Skipped(&'static str),
    Bad,
}

/// Skipped actions, by name (what a skipped line counts as).
fn skipped_action(action: &str) -> Option<&'static str> {
    Some(match action {
        "G" => "G",
        "I" => "I",
        "P" => "P",
        "U" => "U",
        "UT" => "UT",
        "B" => "B",
        "S" => "S",
        "T" => "T",
        "block_io_start" => "block_io_start",
        "block_io_done" => "block_io_done",
        "block_rq_merge" => "block_rq_merge",
        "block_rq_error" => "block_rq_error",
        "buffer event" => "buffer event",
        "other block tracepoint" => "other block tracepoint",
        "m" => "notify",
        _ if action.len() <= 2 && action.bytes().all(|b| b.is_ascii_alphabetic()) => "other",
        _ => return None,
    })
}

/// A passthrough command: blkparse and the ftrace plugin print its byte
/// count and no sector (`D R 4 [dmraid]`, `D R 24 (12 00 …) [sg_inq]`),
/// and its completion with no range at all (`C R [0]`, `C R (…) [0]`).
fn is_passthrough(action: &str, rest: &str) -> bool {
    let mut words = Words(rest);
    let first = words.next().unwrap_or("");
    let opens = |word: &str| word.starts_with('[') || word.starts_with('(');
    match action {
        "C" | "R" => opens(first),
        _ => {
            first.bytes().all(|b| b.is_ascii_digit())
                && !first.is_empty()
                && words.next().is_some_and(opens)
        }
    }
}

fn event_of(fields: &Fields<'_>, request_based: Option<&[u32]>, statuses: &mut Statuses) -> Parsed {
    let Some(dev) = dev_of(fields.dev) else {
        return Parsed::Bad;
    };
    if fields.action == "m" && fields.rwbs == "N" {
        // "m N bfq [bfq_limit_depth] wr_busy 0 …": a scheduler's or md's message.
        return Parsed::Skipped("notify");
    }
    // The letters are the probe table's (`with_block_probes!`).
    let kind = match EventKind::from_blk_action(fields.action) {
        Some(EventKind::Complete)
            if fields.bio_completion
                || request_based.is_some_and(|disks| !disks.contains(&dev)) =>
        {
            EventKind::BioComplete
        }
        Some(kind) => kind,
        None => {
            return match skipped_action(fields.action) {
                Some(name) => Parsed::Skipped(name),
                None => Parsed::Bad,
            }
        }
    };
    if matches!(
        kind,
        EventKind::Queue
            | EventKind::Issue
            | EventKind::Requeue
            | EventKind::Complete
            | EventKind::BioComplete
    ) && is_passthrough(fields.action, fields.rest)
    {
        let failed = matches!(kind, EventKind::Complete | EventKind::BioComplete)
            && Words(fields.rest).any(|word| {
                let status = word.trim_matches(|c| c == '[' || c == ']');
                word.starts_with('[') && status.parse::<i64>().is_ok_and(|n| n != 0)
            });
        return Parsed::Skipped(match failed {
            true => "failed passthrough",
            false => "passthrough",
        });
    }
    let mut event = BlockEvent::ZERO;
    event.kind = kind as u8;
    event.dev = dev;
    event.tgid = fields.pid;
    let letters = fields.rwbs.as_bytes();
    if letters.len() > RWBS_BYTES || !letters.iter().all(u8::is_ascii_uppercase) {
        return Parsed::Bad;
    }
    event.rwbs[..letters.len()].copy_from_slice(letters);
    match range_of(kind, fields.rest, &mut event, statuses) {
        Some(()) => Parsed::Event(event),
        None => Parsed::Bad,
    }
}

/// Fills the sectors from what follows rwbs; zero-length I/O has none.
fn range_of(
    kind: EventKind,
    rest: &str,
    event: &mut BlockEvent,
    statuses: &mut Statuses,
) -> Option<()> {
    let completes = matches!(kind, EventKind::Complete | EventKind::BioComplete);
    let mut words = Words(rest);
    let Some(first) = words.next() else {
        return Some(());
    };
    if first.starts_with('[') || first.starts_with('(') {
        // "FWS [dd]", "N () [kworker]": no range.
        return Some(());
    }
    event.sector = first.parse().ok()?;
    match (words.next()?, kind) {
        ("/", EventKind::Split) => event.aux_sector = words.next()?.parse().ok()?,
        // "C FN 0 [0]": an empty bio's completion prints its sector only;
        // "C W 8 (    1234) [0]" with blkparse -t.
        (status, _) if completes && (status.starts_with('[') || status.starts_with('(')) => {
            event.error = status_after(status, &mut words, statuses)?;
        }
        ("+", _) => {
            event.nr_sector = words.next()?.parse().ok()?;
            if kind == EventKind::Remap {
                // "<- (7,1) 2048": where the I/O came from.
                if words.next()? != "<-" {
                    return None;
                }
                event.aux_dev = dev_of(words.next()?)?;
                event.aux_sector = words.next()?.parse().ok()?;
            } else if completes {
                if let Some(word) = words.next() {
                    event.error = status_after(word, &mut words, statuses)?;
                }
            }
        }
        _ => return None,
    }
    Some(())
}

/// The `[N]` at or after `word` (blkparse -t puts "(   1234)" before it), as
/// a negative errno (0 when no errno). `None` when the brackets hold no
/// number: a command name where the status belongs is a custom format.
fn status_after(word: &str, words: &mut Words<'_>, statuses: &mut Statuses) -> Option<i32> {
    let mut word = Some(word);
    while let Some(w) = word {
        if w.starts_with('[') {
            let value = w
                .strip_prefix('[')
                .and_then(|code| code.strip_suffix(']'))
                .and_then(|code| code.parse::<i64>().ok())?;
            return Some(match errno_of(value) {
                Some(errno) => errno,
                None => {
                    statuses.not_errno += 1;
                    0
                }
            });
        }
        word = words.next();
    }
    Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(request_based: bool) -> DiskGeometry {
        DiskGeometry {
            name: "loop0".into(),
            dev: Some(DevId::new(7, 0)),
            request_based,
            ..Default::default()
        }
    }

    #[test]
    fn ftrace_lines_become_block_events() {
        let text = "# tracer: blk\n\
            #\n\
            \x20           dd-4242    [001] d..1.   123.456789: 7,0    A  WS 2048 + 8 <- (7,1) 0\n\
            \x20           dd-4242    [001] d..1.   123.456790: 7,0    Q  WS 2048 + 8 [dd]\n\
            \x20           dd-4242    [001] d..1.   123.456791: 7,0    X  WS 2048 / 2052 [dd]\n\
            \x20           dd-4242    [001] d..1.   123.456792: 7,0    G  WS 2048 + 4 [dd]\n\
            \x20 kworker/1:1H-77     [001] d..1.   123.456800: 7,0    D  WS 2048 + 8 [kworker/1:1H]\n\
            \x20       <idle>-0       [000] d.h1.   123.457000: 7,0    C  WS 2048 + 8 [0]\n\
            \x20           dd-4242    [001] d..1.   123.458000: 7,0    Q FWS [dd]\n\
            \x20  ksoftirqd/1-22      [001] d.s1.   123.459000:   7,1    C  FN 0 [0]\n\
            \x20           dd-4242    [001] ..... 123.5: tracing_mark_write: hello\n";
        let import = import(text, TextFormat::FtraceBlk, &[disk(true)]).unwrap();
        let kinds: Vec<u8> = import.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Remap,
                EventKind::Queue,
                EventKind::Split,
                EventKind::Issue,
                EventKind::Complete,
                EventKind::Queue,
                EventKind::BioComplete
            ]
            .map(|k| k as u8)
        );
        assert_eq!(import.skipped, 1);
        assert_eq!(import.unparsed, 0);
        let remap = import.events[0];
        assert_eq!(
            (
                remap.dev,
                remap.aux_dev,
                remap.sector,
                remap.nr_sector,
                remap.aux_sector
            ),
            (7 << 20, (7 << 20) | 1, 2048, 8, 0)
        );
        assert_eq!(remap.ts_ns, 123_456_789_000);
        assert_eq!(remap.tgid, 4242);
        assert_eq!(&remap.rwbs[..3], b"WS\0");
        assert_eq!(
            (import.events[2].sector, import.events[2].aux_sector),
            (2048, 2052)
        );
        assert_eq!(import.events[3].tgid, 77);
        assert_eq!(import.events[5].nr_sector, 0);
    }

    #[test]
    fn blkparse_lines_become_block_events_and_bio_disks_complete_bios() {
        let text = "  7,0    1        1     0.000000000  4242  Q  WS 2048 + 8 [dd]\n\
            \x20 7,0    1        2     0.000001500  4242  M  WS 2056 + 8 [dd]\n\
            \x20 7,0    0        3     0.000900000     0  C  WS 2048 + 16 [-5]\n\
            CPU1 (7,0):\n Reads Queued:           0,        0KiB\n";
        let import = import(text, TextFormat::Blkparse, &[disk(false)]).unwrap();
        assert_eq!(import.events.len(), 3);
        assert_eq!(import.events[1].ts_ns, 1_500);
        assert_eq!(import.events[2].kind, EventKind::BioComplete as u8);
        assert_eq!(import.events[2].error, -5);
        assert!(import.notes.iter().any(|n| n.contains("back merges")));
    }

    /// 6.16's `U` and 6.17's zone letters, as blk_fill_rwbs prints them,
    /// in both text formats: each an event with its letters kept, the op
    /// from the first letter (`U` a write's flag; a zone op `other`).
    #[test]
    fn atomic_and_zone_letters_are_read_in_both_text_formats() {
        use crate::model::Op;
        let ftrace = "# tracer: blk\n\
            \x20  fio-9 [001] d..1. 1.000001: 259,0    Q WSU 2048 + 32 [fio]\n\
            \x20  fio-9 [001] d..1. 1.000002: 259,0    D WSU 2048 + 32 [fio]\n\
            \x20  fio-9 [001] d..1. 1.000003: 259,0    Q ZRA 0 + 0 [blkzone]\n\
            \x20  fio-9 [001] d..1. 1.000004: 259,0    D ZR 524288 + 0 [blkzone]\n\
            \x20  fio-9 [001] d..1. 1.000005: 259,0    Q ZAS 1048576 + 8 [fio]\n";
        let blkparse = "259,0    1        1     1.000001000     9  Q WSU 2048 + 32 [fio]\n\
            259,0    1        2     1.000002000     9  D WSU 2048 + 32 [fio]\n\
            259,0    1        3     1.000003000     9  Q ZRA 0 + 0 [blkzone]\n\
            259,0    1        4     1.000004000     9  D ZR 524288 + 0 [blkzone]\n\
            259,0    1        5     1.000005000     9  Q ZAS 1048576 + 8 [fio]\n";
        for (text, format) in [
            (ftrace, TextFormat::FtraceBlk),
            (blkparse, TextFormat::Blkparse),
        ] {
            let import = import(text, format, &[]).unwrap();
            let seen: Vec<(u8, &[u8], u64, u32)> = import
                .events
                .iter()
                .map(|e| {
                    let end = e.rwbs.iter().position(|&b| b == 0).unwrap_or(RWBS_BYTES);
                    (e.kind, &e.rwbs[..end], e.sector, e.nr_sector)
                })
                .collect();
            let queue = EventKind::Queue as u8;
            let issue = EventKind::Issue as u8;
            assert_eq!(
                seen,
                [
                    (queue, &b"WSU"[..], 2048, 32),
                    (issue, b"WSU", 2048, 32),
                    (queue, b"ZRA", 0, 0),
                    (issue, b"ZR", 524288, 0),
                    (queue, b"ZAS", 1048576, 8),
                ],
                "{format:?}"
            );
            assert_eq!(import.unparsed, 0, "{format:?}");
            let ops: Vec<Op> = import
                .events
                .iter()
                .map(|e| crate::engine::op_from_rwbs(&e.rwbs))
                .collect();
            assert_eq!(
                ops,
                [Op::Write, Op::Write, Op::Other, Op::Other, Op::Other],
                "{format:?}"
            );
        }
    }

    #[test]
    fn text_without_events_is_refused() {
        assert_eq!(
            import("hello\nworld\n", TextFormat::Blkparse, &[]).unwrap_err(),
            ImportError::NoEvents { format: "blkparse" }
        );
        assert!(import("", TextFormat::FtraceBlk, &[]).is_err());
    }

    #[test]
    fn odd_numbers_are_refused_not_wrapped() {
        assert_eq!(seconds_to_ns("1.5"), Some(1_500_000_000));
        assert_eq!(seconds_to_ns("99999999999999999999.0"), None);
        assert_eq!(seconds_to_ns("1.0000000001"), None);
        assert_eq!(seconds_to_ns("1.-5"), None);
        assert_eq!(dev_of("(7,1)"), Some((7 << 20) | 1));
        assert_eq!(dev_of("99999,1"), None);
    }
    #[test]
    fn every_line_is_accounted_for_and_summaries_are_read() {
        let text = "  8,16   1        1     0.000000000  4242  Q   W 2048 + 8 [dd]\n\
            ...\n\
            \x20 8,16   1        2     0.000100000     0  C   W 2048 + 8 [0]\n\
            CPU1 (8,16):\n\
            \x20Reads Queued:           0,        0KiB\t Writes Queued:       1,234,    4,936KiB\n\
            \x20Writes Completed:       1\n\
            \n\
            Throughput (R/W): 0KiB/s / 20KiB/s\n\
            Events (8,16): 2 entries\n\
            Skips: 0 forward (0 -   0.0%)\n";
        let import = import(text, TextFormat::Blkparse, &[]).unwrap();
        let lines = &import.lines;
        assert_eq!(
            (lines.total, lines.events, lines.elided, lines.blank),
            (10, 2, 1, 1)
        );
        assert_eq!((lines.summary_blocks, lines.summary_lines), (1, 6));
        assert_eq!((lines.other, lines.unreadable), (0, 0));
        let [check] = import.summaries.as_slice() else {
            panic!("{:?}", import.summaries)
        };
        // blkparse says 1,234 writes queued, the text holds one: said.
        assert_eq!(check.blkparse.queued, [0, 1234]);
        assert_eq!(check.import.queued, [0, 1]);
        assert_eq!(
            (check.blkparse.entries, check.import.entries),
            (Some(2), Some(2))
        );
        assert!(!check.agrees());
        assert!(import
            .notes
            .iter()
            .any(|n| n.contains("differs") && n.contains("Q 0r/1234w") && n.contains("Q 0r/1w")));
        assert!(import
            .notes
            .iter()
            .any(|n| n.starts_with("read 2 event lines of 10; also 1 summary block")));
    }

    #[test]
    fn a_priority_column_is_read_past() {
        let line = "252,0    7        1     0.000000000 11683  Q WZS BEST 4 0 + 8 [blkdiscard]";
        let fields = blkparse_fields(line).unwrap();
        assert_eq!(
            (fields.rwbs, fields.rest, fields.priority),
            ("WZS", "0 + 8 [blkdiscard]", true)
        );
        // A command named like a class is no priority column.
        let plain = blkparse_fields("8,0 1 1 0.1 42 Q W 8 + 8 [NONE]").unwrap();
        assert!(!plain.priority);
    }

    /// A format blkparse prints with `-f` that this does not read: the
    /// default header, then `%10S + %10U (%4e) [%C]` (a command where the
    /// status belongs). Refused, not half read.
    #[test]
    fn a_custom_format_is_refused_not_half_read() {
        let text = "259,1    1        1     0.000000000 82519  Q  WS     399368 +          0 (   0) [fio]\n\
            259,1    1        5     0.000011785  1393  D  WS     399368 +          0 (   0) [kworker/1:1H]\n\
            259,1   15        1     0.000051309     0  C  WS     399368 +          0 (   0) [swapper/15]\n";
        let err = import(text, TextFormat::Blkparse, &[]).unwrap_err();
        assert!(
            matches!(
                err,
                ImportError::Unreadable {
                    unreadable: 1,
                    looked: 3,
                    line_no: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_publishers_words_are_told_from_a_custom_formats_data() {
        for line in [
            "Split off chunk-sized (1024 sectors) request:",
            "bio_list:",
            "Using Priority mask 0x1",
        ] {
            assert!(is_prose(line), "{line}");
        }
        for line in ["Q 401408 8", "202,16   Q 1048576   W", "401408 8 0"] {
            assert!(!is_prose(line), "{line}");
        }
    }

    #[test]
    fn elisions_are_told_from_events_and_remarks_in_any_bracket() {
        for line in [
            "...",
            "…",
            "[...]",
            "(…)",
            "<snip>",
            "[snip]",
            "(alot of the same)",
        ] {
            assert!(is_elision(line), "{line}");
        }
        for line in [
            "8,0 3 1 0.1 1 Q W 0 + 8 [dd]",
            "[12.5] kernel: x",
            "(8,1) 6304",
            "plain words",
        ] {
            assert!(!is_elision(line), "{line}");
        }
    }
}
