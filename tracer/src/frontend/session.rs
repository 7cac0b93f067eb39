//! Glue shared by the tracing frontends: geometry, the runtime, and turning
//! the engine's state into a [`Report`].

use std::path::Path;
use std::time::{Duration, Instant};

use crate::capture::{Capture, KernelCounters};
use crate::engine::Engine;
use crate::error::{Context, Result};
use crate::geometry::error::GeometryError;
use crate::geometry::ioctl::{DevNodeProbe, DeviceProbe};
use crate::geometry::resolve::ResolvedDevice;
use crate::geometry::{disks, DiskGeometry};
use crate::model::{Report, SCHEMA_NAME, SCHEMA_VERSION};

use super::live::LiveSource;

/// Geometry of the selected disks (every attached disk when none was
/// named), for the engine's names, limits and diagnoses.
pub fn read_geometry(
    devices: &[ResolvedDevice],
) -> std::result::Result<Vec<DiskGeometry>, GeometryError> {
    if devices.is_empty() {
        let mut disks = disks::read_disks(None)?;
        // Unattached loop devices and empty drives have nothing to show.
        disks.retain(|disk| disk.size_sectors > 0);
        return Ok(disks);
    }
    let names: Vec<String> = devices.iter().map(|d| d.disk_name.clone()).collect();
    disks::read_disks(Some(&names))
}

/// How often the frontends look at sysfs for disks and partitions that came
/// or went while tracing.
pub const GEOMETRY_REFRESH: Duration = Duration::from_secs(1);

/// Disks and partitions coming and going during a trace. A cheap sysfs read
/// (no device opened) is compared with the last one; only a change reads the
/// full geometry (which opens partitions for their block size).
pub struct GeometryWatch {
    disk_names: Option<Vec<String>>,
    last: Vec<DiskGeometry>,
    due: Instant,
}

impl GeometryWatch {
    /// Watches the disks of `devices`, or every disk when none was named,
    /// from `known`: the disks the engine was given. Starting from a fresh
    /// read instead would miss a disk removed between the engine's read and
    /// this one, and the engine would never hear it went.
    pub fn new(devices: &[ResolvedDevice], known: &[DiskGeometry]) -> GeometryWatch {
        let disk_names = match devices.is_empty() {
            true => None,
            false => Some(devices.iter().map(|d| d.disk_name.clone()).collect()),
        };
        GeometryWatch {
            disk_names,
            last: as_watched(known),
            due: Instant::now() + GEOMETRY_REFRESH,
        }
    }

    /// The present disks (with media) in scope; a missing one is left out.
    /// Every disk could not be read when one went while it was read.
    fn read(
        &self,
        probe: &dyn DeviceProbe,
    ) -> std::result::Result<Vec<DiskGeometry>, GeometryError> {
        let sysfs_root = Path::new("/sys");
        let mut disks = match &self.disk_names {
            None => disks::read_disks_in(sysfs_root, None, probe)?,
            // One by one: a named disk that vanished must not hide the others.
            Some(names) => names
                .iter()
                .filter_map(|name| {
                    disks::read_disks_in(sysfs_root, Some(std::slice::from_ref(name)), probe).ok()
                })
                .flatten()
                .collect(),
        };
        // A detached loop device or an empty drive has no media: it is gone.
        disks.retain(|disk| disk.size_sectors > 0);
        Ok(disks)
    }

    /// Fresh geometry of the present disks when something changed since the
    /// last look; looks at most once per [`GEOMETRY_REFRESH`] unless `now`.
    pub fn changed(&mut self, now: bool) -> Option<Vec<DiskGeometry>> {
        if !now && Instant::now() < self.due {
            return None;
        }
        self.due = Instant::now() + GEOMETRY_REFRESH;
        // A read that failed is no news, not "no disks": the next look
        // reads again.
        let seen = self.read(&DevNodeProbe::tables_only()).ok()?;
        if seen == self.last {
            return None;
        }
        let disks = self.read(&DevNodeProbe::default()).ok()?;
        self.last = seen;
        Some(disks)
    }

    /// Fresh geometry of the present disks, changed or not: block sizes
    /// too, which the cheap look leaves out (`serve`'s SIGHUP).
    pub fn reread(&mut self) -> std::result::Result<Vec<DiskGeometry>, GeometryError> {
        self.due = Instant::now() + GEOMETRY_REFRESH;
        let disks = self.read(&DevNodeProbe::default())?;
        self.last = as_watched(&disks);
        Ok(disks)
    }
}

/// `disks` as the watch's cheap read sees them: present ones only, and no
/// block sizes (those need the device opened).
fn as_watched(disks: &[DiskGeometry]) -> Vec<DiskGeometry> {
    let mut watched: Vec<DiskGeometry> = disks
        .iter()
        .filter(|disk| disk.size_sectors > 0)
        .cloned()
        .collect();
    for disk in &mut watched {
        disk.block_size = None;
        for part in &mut disk.partitions {
            part.block_size = None;
        }
        for leg in disk.stack.iter_mut().flat_map(|stack| &mut stack.legs) {
            leg.bottom.block_size = None;
        }
    }
    watched
}

/// A single-threaded tokio runtime: signals, timers and the child process.
/// A signal listened for from now on. Every frontend listens before it says
/// "tracing": a Ctrl-C sent the moment that line shows must stop the trace
/// with its report, not kill the process by the default action.
pub fn listen(
    runtime: &tokio::runtime::Runtime,
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal> {
    let _entered = runtime.enter();
    tokio::signal::unix::signal(kind).context("cannot listen for signals")
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The engine's view plus the kernel's drop counters, as one report; with
/// the attribution section when owners were read.
pub fn report(
    engine: &Engine,
    counters: KernelCounters,
    elapsed: Duration,
    unsupported_probes: Vec<String>,
    owners_read: bool,
) -> Report {
    let mut events = engine.events();
    events.dropped = counters.dropped;
    events.syscall_dropped = counters.syscall_dropped;
    events.read_failed = counters.read_failed;
    events.missed = counters.missed;
    Report {
        schema: SCHEMA_NAME,
        schema_version: SCHEMA_VERSION,
        duration_s: elapsed.as_secs_f64(),
        events,
        correlation: engine.correlation(),
        diagnoses: crate::explain::diagnoses(engine.diagnoses()),
        other_findings: Vec::new(),
        devices: engine.devices(),
        run: None,
        attribution: owners_read
            .then(|| engine.attribution(crate::engine::attribution::TOP_OWNERS)),
        unsupported_probes,
    }
}

/// The running capture and engine, as the live TUI sees them.
pub struct LiveSession {
    capture: Capture<Engine>,
    unsupported: Vec<String>,
    counting_since: Instant,
    geometry: GeometryWatch,
}

impl LiveSession {
    pub fn new(
        capture: Capture<Engine>,
        devices: &[ResolvedDevice],
        known: &[DiskGeometry],
    ) -> LiveSession {
        LiveSession {
            unsupported: capture.unsupported(),
            counting_since: capture.started,
            capture,
            geometry: GeometryWatch::new(devices, known),
        }
    }
}

/// Hands the engine the disks present now, if they changed.
pub fn refresh_geometry<S: crate::sink::DiskSink>(
    capture: &Capture<S>,
    watch: &mut GeometryWatch,
    now: bool,
) -> Result<()> {
    match watch.changed(now) {
        Some(disks) => capture.query(move |sink, _| sink.refresh_disks(disks)),
        None => Ok(()),
    }
}

impl LiveSource for LiveSession {
    fn snapshot(&mut self) -> Result<Report> {
        refresh_geometry(&self.capture, &mut self.geometry, false)?;
        let elapsed = self.counting_since.elapsed();
        let unsupported = self.unsupported.clone();
        let owners_read = self.capture.owners_read;
        self.capture.query(move |engine, counters| {
            report(engine, counters, elapsed, unsupported, owners_read)
        })
    }

    fn reset(&mut self) -> Result<()> {
        self.capture.query(|engine, _| engine.reset())?;
        self.counting_since = Instant::now();
        Ok(())
    }

    fn uptime(&self) -> Duration {
        self.capture.started.elapsed()
    }
}

/// The attribution sections the text report adds (`--by`); JSON has them all.
pub fn show_views(report: &mut crate::model::Report, by: &[crate::cli::ByView]) {
    if let Some(attribution) = report.attribution.as_mut() {
        for view in by {
            if !attribution.text_views.contains(&view.view()) {
                attribution.text_views.push(view.view());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::DevId;

    #[test]
    fn a_disk_gone_before_the_watch_starts_is_still_a_change() {
        // The engine was given this disk; by the watch's first look it is gone.
        let name = "iosplit-test-no-such-disk";
        let known = vec![DiskGeometry {
            name: name.to_string(),
            size_sectors: 2048,
            block_size: Some(4096),
            ..Default::default()
        }];
        let dev = DevId {
            major: 7,
            minor: 999,
        };
        let device = ResolvedDevice {
            name: name.to_string(),
            dev,
            disk_name: name.to_string(),
            disk_dev: dev,
        };
        let mut watch = GeometryWatch::new(&[device], &known);
        assert_eq!(watch.changed(true), Some(Vec::new()));
        assert_eq!(watch.changed(true), None, "a change is told once");
    }

    #[test]
    fn a_reread_answers_changed_or_not_and_is_the_next_looks_baseline() {
        let name = "iosplit-test-no-such-disk";
        let known = vec![DiskGeometry {
            name: name.to_string(),
            size_sectors: 2048,
            ..Default::default()
        }];
        let dev = DevId {
            major: 7,
            minor: 999,
        };
        let device = ResolvedDevice {
            name: name.to_string(),
            dev,
            disk_name: name.to_string(),
            disk_dev: dev,
        };
        let mut watch = GeometryWatch::new(&[device], &known);
        assert_eq!(watch.reread().unwrap(), Vec::new());
        assert_eq!(watch.reread().unwrap(), Vec::new(), "told again");
        assert_eq!(watch.changed(true), None, "the reread was the news");
    }

    #[test]
    fn a_watch_started_from_the_engines_disks_sees_no_change_yet() {
        let known = read_geometry(&[]).expect("sysfs readable");
        let mut watch = GeometryWatch::new(&[], &known);
        assert_eq!(watch.changed(true), None);
    }
}
