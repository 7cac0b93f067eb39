//! Glue shared by the tracing frontends: geometry, the runtime, and turning
//! the engine's state into a [`Report`].

use std::time::{Duration, Instant};

use crate::capture::{Capture, KernelCounters};
use crate::engine::Engine;
use crate::error::{Context, Result};
use crate::geometry::error::GeometryError;
use crate::geometry::resolve::ResolvedDevice;
use crate::geometry::{sysfs, DiskGeometry};
use crate::model::{Report, SCHEMA_NAME, SCHEMA_VERSION};

use super::live::LiveSource;

/// Geometry of the selected disks (every attached disk when none was
/// named), for the engine's names, limits and diagnoses.
pub fn read_geometry(
    devices: &[ResolvedDevice],
) -> std::result::Result<Vec<DiskGeometry>, GeometryError> {
    if devices.is_empty() {
        let mut disks = sysfs::read_disks(None)?;
        // Unattached loop devices and empty drives have nothing to show.
        disks.retain(|disk| disk.size_sectors > 0);
        return Ok(disks);
    }
    let names: Vec<String> = devices.iter().map(|d| d.disk_name.clone()).collect();
    sysfs::read_disks(Some(&names))
}

/// A single-threaded tokio runtime: signals, timers and the child process.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The engine's view plus the kernel's drop counters, as one report.
pub fn report(
    engine: &Engine,
    counters: KernelCounters,
    elapsed: Duration,
    unsupported_probes: Vec<String>,
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
        diagnoses: engine.diagnoses(),
        devices: engine.devices(),
        run: None,
        attribution: Some(engine.attribution(crate::engine::attribution::TOP_OWNERS)),
        unsupported_probes,
    }
}

/// The running capture and engine, as the live TUI sees them.
pub struct LiveSession {
    capture: Capture<Engine>,
    unsupported: Vec<String>,
    counting_since: Instant,
}

impl LiveSession {
    pub fn new(capture: Capture<Engine>) -> LiveSession {
        LiveSession {
            unsupported: capture.unsupported(),
            counting_since: capture.started,
            capture,
        }
    }
}

impl LiveSource for LiveSession {
    fn snapshot(&mut self) -> Result<Report> {
        let elapsed = self.counting_since.elapsed();
        let unsupported = self.unsupported.clone();
        self.capture
            .query(move |engine, counters| report(engine, counters, elapsed, unsupported))
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
