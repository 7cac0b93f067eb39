//! `iosplit-trace analyze FILE`: replays a recording into a fresh engine
//! built with the recorded geometry and prints the report the live run
//! printed; or imports blkparse / ftrace `blk` text (`--from`) into the same
//! engine. What a source lacks is said on stderr, one line each.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Deserialize;

use crate::capture::KernelCounters;
use crate::cli::AnalyzeArgs;
use crate::engine::Engine;
use crate::error::{Context, Error, Result, EXIT_FAILURE};
use crate::geometry::DiskGeometry;
use crate::model::Report;
use crate::record::import::{self, TextFormat};
use crate::record::{Item, Recording, Trailer};

use super::html;
use super::output::{self, Format, Output};
use super::perfetto;
use super::session;

/// A report and what the reader should know about its source.
pub struct Analysis {
    /// `report --interval`'s reports before the last, at their marks.
    pub intervals: Vec<Report>,
    /// The last (or only) report.
    pub report: Report,
    pub notes: Vec<String>,
    /// The recording ends inside a block (full disk, killed recorder).
    pub truncated: bool,
}

/// What `--html` and `--perfetto` build from the same pass over the events.
pub struct Views {
    pub html: Option<html::Collector>,
    pub perfetto: Option<perfetto::Matcher>,
}

impl Views {
    fn new(args: &AnalyzeArgs, geometry: &[DiskGeometry]) -> Views {
        Views {
            html: args.html.as_ref().map(|_| html::Collector::default()),
            perfetto: args
                .perfetto
                .as_ref()
                .map(|_| perfetto::Matcher::new(geometry.to_vec())),
        }
    }

    fn wanted(&self) -> bool {
        self.html.is_some() || self.perfetto.is_some()
    }

    /// Asks `engine` for its outcomes when a view draws them.
    fn attach(&self, engine: &mut Engine) {
        if self.wanted() {
            engine.keep_outcomes();
        }
    }

    /// Feeds `event`, just ingested by `engine`, then the outcomes it reached.
    fn see_after(&mut self, event: &tracer_common::BlockEvent, engine: &mut Engine) {
        if let Some(collector) = &mut self.html {
            collector.see_event(event);
        }
        self.see(engine);
    }

    /// Feeds the outcomes `engine` reached since the last call.
    fn see(&mut self, engine: &mut Engine) {
        for outcome in engine.drain_outcomes() {
            if let Some(collector) = &mut self.html {
                collector.see(&outcome);
            }
            if let Some(matcher) = &mut self.perfetto {
                matcher.see(&outcome);
            }
        }
    }

    /// Writes the files asked for.
    fn write(self, args: &AnalyzeArgs, report: &Report, geometry: &[DiskGeometry]) -> Result<()> {
        if let (Some(collector), Some(path)) = (self.html, &args.html) {
            let sectors = |dev: u32| {
                let id = crate::geometry::DevId::from_kernel(dev);
                geometry
                    .iter()
                    .find(|disk| disk.dev == Some(id))
                    .map(|disk| disk.size_sectors)
                    .filter(|sectors| *sectors > 0)
            };
            let series = collector.finish(&sectors);
            let page =
                html::render::page(report, &series, geometry, &args.file.display().to_string());
            std::fs::write(path, page)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let (Some(matcher), Some(path)) = (self.perfetto, &args.perfetto) {
            let text = serde_json::to_vec(&matcher.finish())
                .with_context(|| format!("cannot write {}", path.display()))?;
            std::fs::write(path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

pub fn run(args: &AnalyzeArgs) -> Result<ExitCode> {
    let (analysis, views, geometry) = match args.from {
        None => {
            if args.geometry.is_some() {
                return Err(Error::usage(
                    "--geometry goes with --from: a recording carries its own geometry",
                ));
            }
            let recording = Recording::open(&args.file)
                .with_context(|| format!("cannot analyze {}", args.file.display()))?;
            let geometry = recording.header.geometry.clone();
            let mut views = Views::new(args, &geometry);
            (replay(recording, &args.file, &mut views)?, views, geometry)
        }
        Some(format) => {
            let geometry = match &args.geometry {
                Some(path) => read_check_geometry(path)?,
                None => Vec::new(),
            };
            let mut views = Views::new(args, &geometry);
            (
                import_text(&args.file, format, geometry.clone(), &mut views)?,
                views,
                geometry,
            )
        }
    };
    views.write(args, &analysis.report, &geometry)?;
    let mut out = Output::stdout();
    // Several reports (from `report --interval`) are a stream, as they were live.
    let format = Format::from_flags(args.json, !analysis.intervals.is_empty());
    let mut analysis = analysis;
    for report in &mut analysis.intervals {
        session::show_views(report, &args.by);
        out.print(report, format)?;
    }
    session::show_views(&mut analysis.report, &args.by);
    match args.from {
        Some(_) => out.print(&Imported(&analysis.report), format)?,
        None => out.print(&analysis.report, format)?,
    }
    for note in &analysis.notes {
        output::status(format_args!("note: {note}"));
    }
    // The report stands, but a script should notice the missing tail.
    Ok(match analysis.truncated {
        true => ExitCode::from(EXIT_FAILURE),
        false => ExitCode::SUCCESS,
    })
}

/// A report of another tool's trace: the same document, whose text gives
/// no advice about tracing (the trace was not ours to take).
#[derive(serde::Serialize)]
#[serde(transparent)]
struct Imported<'a>(&'a Report);

impl output::Document for Imported<'_> {
    fn render_text(&self, width: u16) -> String {
        super::text::render_imported_report(self.0, width)
    }
}

/// `report --html`: the page `analyze RECORDING --html OUT` writes.
pub fn write_html(recording: &Path, out: &Path) -> Result<()> {
    let args = AnalyzeArgs {
        file: recording.to_path_buf(),
        json: false,
        from: None,
        geometry: None,
        html: Some(out.to_path_buf()),
        perfetto: None,
        by: Vec::new(),
    };
    let opened = Recording::open(recording)
        .with_context(|| format!("cannot render {}", recording.display()))?;
    let geometry = opened.header.geometry.clone();
    let mut views = Views::new(&args, &geometry);
    let analysis = replay(opened, recording, &mut views)?;
    views.write(&args, &analysis.report, &geometry)
}

/// Feeds every item to a fresh engine; the report as the live run made it.
pub fn replay<R: Read>(
    mut recording: Recording<R>,
    path: &Path,
    views: &mut Views,
) -> Result<Analysis> {
    let header = recording.header.clone();
    let mut engine = Engine::new(header.geometry.clone(), Default::default());
    engine.attribute_owners(header.owners);
    views.attach(&mut engine);
    let mut span = TimeSpan::default();
    let mut notes = Vec::new();
    let mut intervals = Vec::new();
    let mut names = None;
    let mut run = None;
    for item in recording.by_ref() {
        let item = item.with_context(|| format!("cannot analyze {}", path.display()))?;
        match item {
            Item::Block(event) => {
                span.see(event.ts_ns);
                engine.ingest(&event);
                views.see_after(&event, &mut engine);
            }
            Item::DirtyTotals(totals) => engine.dirty_buffer_totals(&totals),
            Item::EventsLost => engine.events_lost(),
            Item::Geometry(disks) => engine.refresh_disks(disks),
            Item::OwnerNames(recorded) => names = Some(recorded),
            Item::Interval(numbers) => {
                let (counters, elapsed) = counters_of(&numbers);
                let mut report = session::report(
                    &engine,
                    counters,
                    elapsed,
                    header.unsupported_probes.clone(),
                    header.owners,
                );
                name_as_recorded(&mut report, names.take());
                intervals.push(report);
                engine.reset();
            }
            // `run`'s matching needs the traced machine's /proc and extent
            // maps: its conclusion is recorded (`Item::Run`) and reprinted.
            Item::Process(_) | Item::Open(_) => {}
            Item::Run(recorded) => run = Some(recorded),
        }
    }
    if header.run_command.is_some() && run.is_none() {
        notes.push(
            "a `run` recording without its run record (format 2, or cut short): its block events are replayed, the run section (syscalls matched to commands) is not".into(),
        );
    }
    let truncated = recording.truncated;
    if let Some(cut) = truncated {
        notes.push(format!(
            "{} ends inside a block: read up to its last complete block ({} blocks, {} bytes)",
            path.display(),
            cut.complete_blocks,
            cut.complete_bytes
        ));
    }
    // As the live run ended: at the newest event.
    engine.settle_at_end(span.last);
    views.see(&mut engine);
    let (counters, elapsed) = match recording.trailer {
        Some(trailer) => counters_of(&trailer),
        None => {
            notes.push(
                "no final counters: drops unknown, duration from the event timestamps".into(),
            );
            (KernelCounters::default(), span.duration())
        }
    };
    let mut report = session::report(
        &engine,
        counters,
        elapsed,
        header.unsupported_probes,
        header.owners,
    );
    name_as_recorded(&mut report, names);
    if let Some(recorded) = run {
        super::run::conclude(&mut report, *recorded);
    }
    Ok(Analysis {
        intervals,
        report,
        notes,
        truncated: truncated.is_some(),
    })
}

/// Imports another tool's text and runs it through the engine.
pub fn import_text(
    path: &Path,
    format: TextFormat,
    geometry: Vec<DiskGeometry>,
    views: &mut Views,
) -> Result<Analysis> {
    let mut notes = Vec::new();
    if geometry.is_empty() {
        notes.push("no --geometry: devices are unnamed and geometry diagnoses are off".into());
    }
    let imported = match format {
        TextFormat::Blktrace => crate::record::blktrace::import_files(path, &geometry),
        _ => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            import::import(&String::from_utf8_lossy(&bytes), format, &geometry)
        }
    }
    .with_context(|| format!("cannot import {}", path.display()))?;
    let mut engine = Engine::new(geometry, Default::default());
    // blkparse and ftrace text name no owners.
    engine.attribute_owners(false);
    for dev in &imported.request_devices {
        engine.saw_requests(*dev);
    }
    views.attach(&mut engine);
    let mut span = TimeSpan::default();
    for event in &imported.events {
        span.see(event.ts_ns);
        engine.ingest(event);
        views.see_after(event, &mut engine);
    }
    engine.settle_at_end(span.last);
    views.see(&mut engine);
    notes.extend(imported.notes);
    let report = session::report(
        &engine,
        KernelCounters::default(),
        span.duration(),
        Vec::new(),
        false,
    );
    Ok(Analysis {
        intervals: Vec::new(),
        report,
        notes,
        truncated: false,
    })
}

/// A trailer's or interval mark's counters and traced time.
fn counters_of(numbers: &Trailer) -> (KernelCounters, Duration) {
    let counters = KernelCounters {
        dropped: numbers.dropped,
        syscall_dropped: numbers.syscall_dropped,
        read_failed: numbers.read_failed,
        missed: numbers.missed,
    };
    let elapsed = Duration::try_from_secs_f64(numbers.duration_s).unwrap_or_default();
    (counters, elapsed)
}

/// The geometry in a `check --json` snapshot.
pub fn read_check_geometry(path: &Path) -> Result<Vec<DiskGeometry>> {
    #[derive(Deserialize)]
    struct Snapshot {
        devices: Vec<Device>,
    }
    #[derive(Deserialize)]
    struct Device {
        geometry: DiskGeometry,
    }
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let snapshot: Snapshot = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a `check --json` snapshot", path.display()))?;
    Ok(snapshot.devices.into_iter().map(|d| d.geometry).collect())
}

/// First and last event timestamps.
#[derive(Default)]
struct TimeSpan {
    first: Option<u64>,
    last: u64,
}

impl TimeSpan {
    fn see(&mut self, ts_ns: u64) {
        self.first.get_or_insert(ts_ns);
        self.last = self.last.max(ts_ns);
    }

    fn duration(&self) -> Duration {
        Duration::from_nanos(self.last.saturating_sub(self.first.unwrap_or(self.last)))
    }
}

/// Owners get the names the live run resolved on the traced machine.
fn name_as_recorded(report: &mut crate::model::Report, names: Option<crate::model::OwnerNames>) {
    if let (Some(attribution), Some(names)) = (report.attribution.as_mut(), names) {
        names.apply(attribution);
    }
}
