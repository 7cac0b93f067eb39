//! `iosplit-trace serve`: the engine's measures and diagnoses as Prometheus
//! metrics on `/metrics` (OpenMetrics text, or the classic text format made
//! from it, as the scraper asks: [`super::prometheus`]), and `/healthz`.
//!
//! Scrapes ask the engine once per round (one `Capture::query`): those that
//! come in while a collect runs share the next one and its encoding, so any
//! number of scrapers cost the consumer one query at a time; nothing is added
//! per event. Served counters are cumulative on this side: a scrape adds what
//! grew since the last one, and SIGHUP (which resets the engine, so
//! diagnoses describe the traffic since then) is absorbed first, so no served
//! counter ever goes down. The block devices in sysfs are listed on every
//! scrape; when the list changes (or every `GEOMETRY_REFRESH`, or on SIGHUP),
//! geometry is re-read: new devices are picked up, vanished ones stop being
//! served (their totals are kept in case they come back).

mod owners;
mod process;
mod web;

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::signal::unix::SignalKind;
use tracer_common::EventKind;

use crate::capture::{Capture, KernelCounters};
use crate::cli::{DeviceSelection, ServeArgs};
use crate::engine::Engine;
use crate::error::{one_line, Error, Result};
use crate::geometry::{disks, DiskGeometry};
use crate::model::{
    CorrelationStats, DeviceReport, Diagnosis, Distribution, EventCounts, Measures,
};

use super::prometheus::{exposition, Family, Kind, Labels, Value};
use super::{output, selection, session};

pub use crate::cli::DEFAULT_LISTEN;

/// Histogram buckets are powers of two, as the engine keeps them: the bucket
/// `le = 2^k - 1` holds every value below `2^k`. Sizes: 512 B .. 128 MiB.
const SIZE_BUCKET_BITS: std::ops::RangeInclusive<u32> = 9..=27;
/// Latencies: 16 µs .. 33.5 s (in seconds on the wire).
const LATENCY_BUCKET_BITS: std::ops::RangeInclusive<u32> = 4..=25;
const MICROS_PER_SECOND: f64 = 1e6;
/// Geometry is also re-read this often, for queue settings changed in place.
const GEOMETRY_REFRESH: Duration = Duration::from_secs(10);

pub fn run(devices_selected: &DeviceSelection, args: &ServeArgs) -> Result<ExitCode> {
    // glibc raises its mmap threshold each time a large block is freed, so
    // later large buffers (scrapes, burst-sized queues) land on the heap and
    // fragment it: RSS crept 40 -> 62 MiB over a 10-minute soak. Pinned,
    // they are mapped and unmapped whole.
    // SAFETY: mallopt only sets an allocator parameter, before any thread starts.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    let devices = selection::resolve_selection(devices_selected)?;
    let web = args.web_config.as_deref().map(web::load).transpose()?;
    if web.as_ref().is_none_or(|web| web.tls.is_none()) && !args.listen.ip().is_loopback() {
        output::status(format_args!(
            "warning: serving {} over plain HTTP without authentication; with --by, process names and file paths show to anyone who can reach it (--web.config.file adds TLS and basic auth)",
            args.listen
        ));
    }
    let disks_selected: Vec<String> = devices.iter().map(|d| d.disk_name.clone()).collect();
    // Bind first: a busy or forbidden address fails before the probes load.
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|err| Error::caused(format!("cannot listen on {}", args.listen), err))?;
    let listening = listener
        .local_addr()
        .map_err(|err| Error::caused("cannot read the listening address", err))?;
    let geometry = current_disks(&disks_selected)?;
    let config = selection::capture_config(&devices, args.read.reads_owners(!args.by.is_empty()));
    // Without probes (no CAP_BPF, a locked-down kernel) the geometry audit
    // is still worth serving: say why once, and keep serving.
    let capture = match Capture::start(&config, Engine::new(geometry.clone(), Default::default())) {
        Ok(capture) => Ok(capture),
        Err(err) => {
            let reason = one_line(&err);
            output::status(format_args!(
                "warning: not tracing ({reason}); serving the geometry audit only"
            ));
            Err(reason)
        }
    };
    let exporter = Arc::new(Exporter::new(Inner {
        capture,
        disks_selected,
        listing: block_listing(),
        geometry_read: Instant::now(),
        present: present_names(&geometry),
        served: Served {
            owners: owners::OwnerSeries::new(args.by.iter().map(|by| by.view()).collect()),
            audit: audit_of(&geometry),
            ..Served::default()
        },
    }));
    let runtime = session::runtime()?;
    // Listened for before "tracing" shows (see `session::listen`).
    let mut interrupt = session::listen(&runtime, SignalKind::interrupt())?;
    let mut terminate = session::listen(&runtime, SignalKind::terminate())?;
    let mut hangup = session::listen(&runtime, SignalKind::hangup())?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|err| Error::caused(format!("cannot listen on {listening}"), err))?;
        if let Ok(Inner {
            capture: Ok(capture),
            ..
        }) = exporter.inner.lock().as_deref()
        {
            selection::announce(&devices, capture);
        }
        output::status(format_args!("serving http://{listening}/metrics"));
        let mut app = axum::Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .with_state(Arc::clone(&exporter));
        if let Some(auth) = web.as_ref().and_then(|web| web.auth.clone()) {
            app = app.layer(axum::middleware::from_fn_with_state(
                auth,
                web::require_auth,
            ));
        }
        let stopped = async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        };
        let tls = web.and_then(|web| web.tls);
        let server = async move {
            match tls {
                None => axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await
                    .map_err(|err| Error::caused("the HTTP server failed", err)),
                Some(tls) => serve_tls(listener, app, tls, stopped).await,
            }
        };
        let hangups = async {
            while hangup.recv().await.is_some() {
                match exporter.scrape(true).await {
                    Ok(_) => output::status(format_args!(
                        "SIGHUP: devices re-read, diagnoses start afresh"
                    )),
                    Err(reason) => output::status(format_args!("SIGHUP: {reason}")),
                }
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            result = server => result,
            () = hangups => Ok(()),
        }
    });
    served?;
    Ok(ExitCode::SUCCESS)
}

/// HTTPS: each connection's handshake, then HTTP/1.1 on it. A handshake
/// that fails (plain HTTP, an unverified client certificate) closes that
/// connection only.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Arc<rustls::ServerConfig>,
    stopped: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::pin!(stopped);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of fds or the like: this connection is lost, not the server.
                Err(_) => continue,
            },
            () = &mut stopped => return Ok(()),
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn metrics(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> Response {
    let format = exposition::Exposition::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    match exporter.scrape(false).await {
        Ok(text) => (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::VARY, "Accept"),
            ],
            match format {
                exposition::Exposition::OpenMetrics => String::from(&*text),
                exposition::Exposition::Text => exposition::to_text_format(&text),
            },
        )
            .into_response(),
        Err(reason) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response(),
    }
}

/// Healthy while the event consumer answers.
async fn healthz(State(exporter): State<Arc<Exporter>>) -> Response {
    // Off the runtime's thread: the query waits for the consumer's next drain.
    let alive = tokio::task::spawn_blocking(move || {
        exporter
            .inner
            .lock()
            .map_err(|_| Error::failure("the exporter's state is poisoned"))
            .and_then(|inner| match &inner.capture {
                Ok(capture) => capture.query(|_, _| "ok\n".to_string()),
                // Serving the audit is what it can do: healthy, and saying so.
                Err(reason) => Ok(format!(
                    "ok: serving the geometry audit only, not tracing ({reason})\n"
                )),
            })
            .map_err(|err| one_line(&err))
    })
    .await
    .unwrap_or_else(|_| Err(WORKER_STOPPED.to_string()));
    match alive {
        Ok(text) => (StatusCode::OK, text).into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

const WORKER_STOPPED: &str = "the exporter's worker thread stopped unexpectedly";

/// The static audit's findings on `disks`, worded as `check` words them.
fn audit_of(disks: &[DiskGeometry]) -> Vec<Diagnosis> {
    crate::explain::diagnoses(disks.iter().flat_map(crate::engine::audit::audit_disk))
}

/// Every attached disk (size > 0), or the selected ones that still exist.
fn current_disks(selected: &[String]) -> Result<Vec<DiskGeometry>> {
    let mut disks = disks::read_disks(None)?;
    disks.retain(|disk| {
        disk.size_sectors > 0 && (selected.is_empty() || selected.contains(&disk.name))
    });
    Ok(disks)
}

fn present_names(disks: &[DiskGeometry]) -> BTreeSet<String> {
    disks
        .iter()
        .flat_map(|disk| {
            std::iter::once(disk.name.clone()).chain(disk.partitions.iter().map(|p| p.name.clone()))
        })
        .collect()
}

/// The names under /sys/class/block: cheap to list, and it changes whenever
/// a disk or partition comes or goes.
fn block_listing() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/block")
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

struct Exporter {
    inner: Mutex<Inner>,
    /// Collects started so far: a scrape needs one that started after it came.
    collects_started: AtomicU64,
    /// The newest collect's answer, shared by the scrapes that waited for it.
    latest: tokio::sync::Mutex<Answer>,
}

/// One collect's encoded metrics (OpenMetrics), or why it failed.
struct Answer {
    /// Which collect made it; 0 before the first.
    generation: u64,
    text: std::result::Result<Arc<str>, String>,
}

struct Inner {
    /// The probes, or why they could not load (the audit is served alone).
    capture: std::result::Result<Capture<Engine>, String>,
    disks_selected: Vec<String>,
    listing: Vec<String>,
    geometry_read: Instant,
    /// Disks and partitions served now.
    present: BTreeSet<String>,
    served: Served,
}

/// What one query takes out of the engine.
struct Snapshot {
    devices: Vec<DeviceReport>,
    diagnoses: Vec<Diagnosis>,
    events: EventCounts,
    correlation: CorrelationStats,
    kernel: KernelCounters,
    /// Every owner's counters, when `--by` asked for any view.
    attribution: Option<crate::model::Attribution>,
}

impl Exporter {
    fn new(inner: Inner) -> Exporter {
        Exporter {
            inner: Mutex::new(inner),
            collects_started: AtomicU64::new(0),
            latest: tokio::sync::Mutex::new(Answer {
                generation: 0,
                text: Err("nothing collected yet".to_string()),
            }),
        }
    }

    /// The metrics as of a collect that started after this call: scrapes that
    /// come in together share one engine query and one encoding, so the
    /// consumer answers once per round however many scrapers wait, and keeps
    /// draining the rings between rounds. `reset` (SIGHUP) always collects.
    async fn scrape(self: &Arc<Self>, reset: bool) -> std::result::Result<Arc<str>, String> {
        let arrived = self.collects_started.load(Ordering::SeqCst);
        let mut latest = self.latest.lock().await;
        if !reset && latest.generation > arrived {
            return latest.text.clone();
        }
        let generation = self.collects_started.fetch_add(1, Ordering::SeqCst) + 1;
        let exporter = Arc::clone(self);
        let text = tokio::task::spawn_blocking(move || {
            let text = exporter
                .collect(reset)
                .and_then(|()| exporter.encode())
                .map(Arc::from)
                .map_err(|err| one_line(&err));
            // What the collect built is freed by now: hand the free heap back,
            // so a months-long exporter holds what it uses, not its largest
            // past moment.
            // SAFETY: malloc_trim only releases free memory; no pointer is touched.
            unsafe { libc::malloc_trim(0) };
            text
        })
        .await
        .unwrap_or_else(|_| Err(WORKER_STOPPED.to_string()));
        *latest = Answer {
            generation,
            text: text.clone(),
        };
        text
    }

    /// One engine query: fresh geometry if the devices changed (or `reset`),
    /// the current measures, and on `reset` the engine's reset right after.
    fn collect(&self, reset: bool) -> Result<()> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| Error::failure("the exporter's state is poisoned"))?;
        let listing = block_listing();
        let stale = inner.geometry_read.elapsed() >= GEOMETRY_REFRESH;
        let geometry = if reset || stale || listing != inner.listing {
            match current_disks(&inner.disks_selected) {
                Ok(disks) => {
                    inner.present = present_names(&disks);
                    inner.served.audit = audit_of(&disks);
                    inner.listing = listing;
                    inner.geometry_read = Instant::now();
                    Some(disks)
                }
                Err(err) if reset => return Err(err),
                // A device vanished mid-read (hot-unplug): serve what is
                // known, and read again at the next scrape.
                Err(_) => None,
            }
        } else {
            None
        };
        let by_owner = !inner.served.owners.is_empty();
        let capture = match &inner.capture {
            Ok(capture) => capture,
            Err(reason) => {
                inner.served.not_tracing = Some(reason.clone());
                return Ok(());
            }
        };
        let snapshot = capture.query(move |engine, kernel| {
            if let Some(disks) = geometry {
                engine.set_disks(disks);
            }
            let snapshot = Snapshot {
                devices: engine.devices(),
                diagnoses: crate::explain::diagnoses(engine.diagnoses()),
                events: engine.events(),
                correlation: engine.correlation(),
                kernel,
                attribution: by_owner.then(|| engine.attribution_counts()),
            };
            if reset {
                engine.reset();
            }
            snapshot
        })?;
        inner.served.absorb(&snapshot);
        if reset {
            inner.served.engine_was_reset();
        }
        Ok(())
    }

    fn encode(&self) -> Result<String> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| Error::failure("the exporter's state is poisoned"))?;
        let families = inner.served.frame(&inner.present);
        drop(inner);
        Ok(super::prometheus::openmetrics(&families))
    }
}

/// A counter served cumulatively from an engine value that may restart at 0.
#[derive(Clone, Copy, Debug, Default)]
struct Total {
    /// The engine's value at the last scrape.
    seen: u64,
    served: u64,
}

impl Total {
    fn observe(&mut self, now: u64) {
        // A value below the last one means the source restarted from zero.
        let grown = now.checked_sub(self.seen).unwrap_or(now);
        self.served = self.served.saturating_add(grown);
        self.seen = now;
    }
}

#[derive(Clone, Debug, Default)]
struct HistogramTotal {
    /// By the low end of each power-of-two bucket.
    buckets: BTreeMap<u64, Total>,
    count: Total,
    sum_seen: f64,
    sum_served: f64,
}

impl HistogramTotal {
    fn observe(&mut self, distribution: &Distribution) {
        for bucket in &distribution.buckets {
            self.buckets
                .entry(bucket.low)
                .or_default()
                .observe(bucket.count);
        }
        let restarted = distribution.count < self.count.seen;
        self.count.observe(distribution.count);
        let sum = distribution.mean * distribution.count as f64;
        self.sum_served += if restarted {
            sum
        } else {
            (sum - self.sum_seen).max(0.0)
        };
        self.sum_seen = sum;
    }

    fn restart(&mut self) {
        self.buckets.values_mut().for_each(|total| total.seen = 0);
        self.count.seen = 0;
        self.sum_seen = 0.0;
    }

    /// Prometheus buckets (per bucket; the encoder accumulates), ending in +Inf.
    fn ladder(&self, bits: &std::ops::RangeInclusive<u32>, scale: f64) -> Vec<(f64, u64)> {
        let mut ladder: Vec<(f64, u64)> = bits
            .clone()
            .map(|bit| (((1u64 << bit) - 1) as f64 / scale, 0))
            .collect();
        ladder.push((f64::INFINITY, 0));
        for (&low, total) in &self.buckets {
            // Values in [low, 2 low) fit the first rung 2^k - 1 >= 2 low - 1.
            let top = low.saturating_mul(2);
            let rung = bits
                .clone()
                .position(|bit| top <= 1u64 << bit)
                .unwrap_or(ladder.len() - 1);
            ladder[rung].1 += total.served;
        }
        ladder
    }
}

/// Per-device, per-op counters: name, help, and the value in the measures.
type OpCounter = (
    &'static str,
    &'static str,
    fn(&crate::model::OpMeasures) -> u64,
);
const OP_COUNTERS: [OpCounter; 5] = [
    (
        "iosplit_user_ios",
        "User I/Os: bios as submitted to the device or partition.",
        |m| m.user_ios,
    ),
    (
        "iosplit_commands",
        "Device commands (block_rq_issue; on bio-based devices, bios after splitting).",
        |m| m.commands,
    ),
    ("iosplit_bytes", "Bytes carried by the user I/Os.", |m| {
        m.bytes
    }),
    (
        "iosplit_merges",
        "Bios merged into an existing request, plus request merges.",
        |m| m.merges,
    ),
    (
        "iosplit_requeues",
        "Commands the driver handed back to be issued again.",
        |m| m.requeues,
    ),
];
const SPLITS: (&str, &str) = ("iosplit_splits", "Bio splits, by inferred cause.");
const ERRORS: (&str, &str) = (
    "iosplit_errors",
    "Commands that completed with an error, by status (EIO, ETIMEDOUT, ENOSPC, ...).",
);

type OpHistogram = (
    &'static str,
    &'static str,
    fn(&crate::model::OpMeasures) -> &Distribution,
);
const SIZE_HISTOGRAMS: [OpHistogram; 2] = [
    ("iosplit_user_io_size_bytes", "User I/O size.", |m| {
        &m.user_io_size
    }),
    ("iosplit_command_size_bytes", "Device command size.", |m| {
        &m.command_size
    }),
];
const LATENCY_HISTOGRAMS: [OpHistogram; 2] = [
    (
        "iosplit_queue_to_complete_seconds",
        "From block_bio_queue to the completion of the user I/O's last fragment.",
        |m| &m.queue_to_complete_us,
    ),
    (
        "iosplit_issue_to_complete_seconds",
        "From a command's (last) block_rq_issue to its completion.",
        |m| &m.issue_to_complete_us,
    ),
];

/// Counters that are not per device: name, help.
const EVENTS: (&str, &str) = (
    "iosplit_events",
    "Block tracepoint events received, by kind.",
);
const DROPPED: (&str, &str) = (
    "iosplit_events_dropped",
    "Events the kernel could not hand over (ring buffer full).",
);
const MISSED: (&str, &str) = (
    "iosplit_probe_missed",
    "Probe runs the kernel skipped while another BPF program ran on the CPU.",
);
const READ_FAILED: (&str, &str) = (
    "iosplit_read_failed",
    "Tracepoint records whose fields could not be read.",
);
const INCOMPLETE: (&str, &str) = (
    "iosplit_incomplete_chains",
    "User I/Os whose chain missed an event.",
);
const CHAINS_DROPPED: (&str, &str) = (
    "iosplit_chains_dropped",
    "User I/Os the engine stopped following before their last completion, by reason: aged_out, evicted, completion_lost (their request was issued again before any probe saw its completion), ring_dropped (in flight when the ring dropped events).",
);

const IN_FLIGHT: (&str, &str) = (
    "iosplit_chains_in_flight",
    "User I/Os queued and not yet completed, as the engine tracks them now.",
);

/// Everything served, cumulative since `serve` started.
#[derive(Default)]
struct Served {
    /// User I/Os in flight at the last scrape (a gauge).
    in_flight: u64,
    /// Engine counters by (metric, labels); the first label is `device`
    /// where there is one.
    counters: BTreeMap<(&'static str, Labels), Total>,
    /// The kernel's own counters (never reset by the engine).
    kernel: BTreeMap<&'static str, Total>,
    histograms: BTreeMap<(&'static str, Labels), HistogramTotal>,
    diagnoses: Vec<Diagnosis>,
    /// Disk and partition names the engine knows, with their disk and "major:minor".
    devices: BTreeMap<String, (String, String)>,
    /// The `--by` views.
    owners: owners::OwnerSeries,
    /// The static geometry audit of the devices served now, as `check` finds it.
    audit: Vec<Diagnosis>,
    /// Why the probes are not tracing, when they could not load.
    not_tracing: Option<String>,
}

impl Served {
    fn absorb(&mut self, snapshot: &Snapshot) {
        for disk in &snapshot.devices {
            self.devices
                .insert(disk.name.clone(), (disk.name.clone(), disk.dev.clone()));
            self.absorb_measures(&disk.name, &disk.name, &disk.measures);
            for part in &disk.partitions {
                self.devices
                    .insert(part.name.clone(), (disk.name.clone(), part.dev.clone()));
                self.absorb_measures(&part.name, &disk.name, &part.measures);
            }
        }
        for kind in EventKind::ALL {
            self.counters
                .entry((EVENTS.0, vec![("kind", kind.json_key().to_string())]))
                .or_default()
                .observe(snapshot.events[kind]);
        }
        self.in_flight = snapshot.correlation.in_flight;
        self.counters
            .entry((INCOMPLETE.0, Labels::new()))
            .or_default()
            .observe(snapshot.correlation.incomplete);
        let correlation = &snapshot.correlation;
        for (reason, value) in [
            ("aged_out", correlation.aged_out),
            ("evicted", correlation.evicted),
            ("completion_lost", correlation.completion_lost),
            ("ring_dropped", correlation.ring_dropped),
        ] {
            self.counters
                .entry((CHAINS_DROPPED.0, vec![("reason", reason.to_string())]))
                .or_default()
                .observe(value);
        }
        for (name, value) in [
            (DROPPED.0, snapshot.kernel.dropped),
            (MISSED.0, snapshot.kernel.missed),
            (READ_FAILED.0, snapshot.kernel.read_failed),
        ] {
            self.kernel.entry(name).or_default().observe(value);
        }
        self.diagnoses = snapshot.diagnoses.clone();
        if let Some(attribution) = &snapshot.attribution {
            // Paths of joining owners only: a few lookups, off the consumer thread.
            self.owners.absorb(attribution, crate::owners::resolve);
        }
    }

    fn absorb_measures(&mut self, device: &str, disk: &str, measures: &Measures) {
        for (op, m) in &measures.ops {
            let labels: Labels = vec![
                ("device", device.to_string()),
                ("disk", disk.to_string()),
                ("op", op.as_str().to_string()),
            ];
            for (name, _, value) in OP_COUNTERS {
                self.counters
                    .entry((name, labels.clone()))
                    .or_default()
                    .observe(value(m));
            }
            for (cause, &count) in &m.split_causes {
                let mut labels = labels.clone();
                labels.push(("cause", cause.key().to_string()));
                self.counters
                    .entry((SPLITS.0, labels))
                    .or_default()
                    .observe(count);
            }
            for (status, &count) in &m.errors {
                let mut labels = labels.clone();
                labels.push(("status", status.clone()));
                self.counters
                    .entry((ERRORS.0, labels))
                    .or_default()
                    .observe(count);
            }
            for (name, _, distribution) in SIZE_HISTOGRAMS.iter().chain(&LATENCY_HISTOGRAMS) {
                self.histograms
                    .entry((name, labels.clone()))
                    .or_default()
                    .observe(distribution(m));
            }
        }
    }

    /// The engine's counters restarted from zero (the kernel's did not).
    fn engine_was_reset(&mut self) {
        self.counters.values_mut().for_each(|total| total.seen = 0);
        self.histograms
            .values_mut()
            .for_each(HistogramTotal::restart);
        self.owners.engine_was_reset();
    }

    /// What to encode now: every series of a device still present, and the rest.
    fn frame(&self, present: &BTreeSet<String>) -> Vec<Family> {
        let live = |labels: &Labels| {
            labels
                .iter()
                .find(|(key, _)| *key == "device")
                .is_none_or(|(_, device)| present.contains(device))
        };
        let mut families = Vec::new();
        let counters = |name: &'static str| -> Vec<(Labels, Value)> {
            self.counters
                .range((name, Labels::new())..)
                .take_while(|((metric, _), _)| *metric == name)
                .filter(|((_, labels), _)| live(labels))
                .map(|((_, labels), total)| (labels.clone(), Value::Counter(total.served)))
                .collect()
        };
        for (name, help, _) in OP_COUNTERS {
            families.push(Family::new(name, help, Kind::Counter, counters(name)));
        }
        families.push(Family::new(
            SPLITS.0,
            SPLITS.1,
            Kind::Counter,
            counters(SPLITS.0),
        ));
        families.push(Family::new(
            ERRORS.0,
            ERRORS.1,
            Kind::Counter,
            counters(ERRORS.0),
        ));
        for (histograms, bits, scale) in [
            (&SIZE_HISTOGRAMS, &SIZE_BUCKET_BITS, 1.0),
            (&LATENCY_HISTOGRAMS, &LATENCY_BUCKET_BITS, MICROS_PER_SECOND),
        ] {
            for (name, help, _) in histograms {
                let samples = self
                    .histograms
                    .range((*name, Labels::new())..)
                    .take_while(|((metric, _), _)| metric == name)
                    .filter(|((_, labels), _)| live(labels))
                    .map(|((_, labels), total)| {
                        (
                            labels.clone(),
                            Value::Histogram {
                                sum: total.sum_served / scale,
                                count: total.count.served,
                                buckets: total.ladder(bits, scale),
                            },
                        )
                    })
                    .collect();
                families.push(Family::new(name, help, Kind::Histogram, samples));
            }
        }
        for (index, (name, help, _)) in owners::OWNER_COUNTERS.iter().enumerate() {
            let samples: Vec<(Labels, Value)> = self
                .owners
                .samples(index)
                .into_iter()
                .filter(|(labels, _)| live(labels))
                .map(|(labels, value)| (labels, Value::Counter(value)))
                .collect();
            if !self.owners.is_empty() {
                families.push(Family::new(name, help, Kind::Counter, samples));
            }
        }
        families.push(Family::new(
            EVENTS.0,
            EVENTS.1,
            Kind::Counter,
            counters(EVENTS.0),
        ));
        families.push(Family::new(
            INCOMPLETE.0,
            INCOMPLETE.1,
            Kind::Counter,
            counters(INCOMPLETE.0),
        ));
        families.push(Family::new(
            CHAINS_DROPPED.0,
            CHAINS_DROPPED.1,
            Kind::Counter,
            counters(CHAINS_DROPPED.0),
        ));
        families.push(Family::new(
            IN_FLIGHT.0,
            IN_FLIGHT.1,
            Kind::Gauge,
            vec![(Labels::new(), Value::Gauge(self.in_flight as f64))],
        ));
        for (name, help) in [DROPPED, MISSED, READ_FAILED] {
            let served = self.kernel.get(name).copied().unwrap_or_default().served;
            families.push(Family::new(
                name,
                help,
                Kind::Counter,
                vec![(Labels::new(), Value::Counter(served))],
            ));
        }
        let diagnoses: Vec<&Diagnosis> = self
            .diagnoses
            .iter()
            .filter(|d| present.contains(&d.device))
            .collect();
        families.push(Family::new(
            "iosplit_diagnosis",
            "1 for every live diagnosis (codes and severities in docs/diagnoses.md).",
            Kind::Gauge,
            diagnoses
                .iter()
                .map(|d| {
                    let severity = d.severity.as_str().to_string();
                    (
                        vec![
                            ("code", d.code.to_string()),
                            ("device", d.device.clone()),
                            ("severity", severity),
                        ],
                        Value::Gauge(1.0),
                    )
                })
                .collect(),
        ));
        families.push(Family::new(
            "iosplit_diagnosis_commands",
            "Commands of the observed workload now, and replayed under the diagnosis's fix (where known).",
            Kind::Gauge,
            diagnoses
                .iter()
                .filter_map(|d| d.evidence.what_if().map(|w| (d, w)))
                .flat_map(|(d, what_if)| {
                    [("now", what_if.commands_now), ("after_fix", what_if.commands_after_fix)].map(
                        |(case, commands)| {
                            (
                                vec![
                                    ("code", d.code.to_string()),
                                    ("device", d.device.clone()),
                                    ("case", case.to_string()),
                                ],
                                Value::Gauge(commands as f64),
                            )
                        },
                    )
                })
                .collect(),
        ));
        families.push(Family::new(
            "iosplit_diagnosis_seconds",
            "Device time of the observed workload now, and replayed under the diagnosis's fix, from the device's service model (where it applies).",
            Kind::Gauge,
            diagnoses
                .iter()
                .filter_map(|d| d.evidence.what_if().map(|w| (d, w)))
                .flat_map(|(d, what_if)| {
                    [
                        ("now", what_if.time_now_ms),
                        ("after_fix", what_if.time_after_fix_ms),
                    ]
                    .into_iter()
                    .filter_map(move |(case, ms)| {
                        Some((
                            vec![
                                ("code", d.code.to_string()),
                                ("device", d.device.clone()),
                                ("case", case.to_string()),
                            ],
                            Value::Gauge(ms? / 1000.0),
                        ))
                    })
                })
                .collect(),
        ));
        families.push(Family::new(
            "iosplit_device",
            "Disks and partitions served now.",
            Kind::Info,
            self.devices
                .iter()
                .filter(|(name, _)| present.contains(*name))
                .map(|(name, (disk, dev))| {
                    (
                        vec![
                            ("device", name.clone()),
                            ("disk", disk.clone()),
                            ("dev", dev.clone()),
                        ],
                        Value::Info,
                    )
                })
                .collect(),
        ));
        if let Some(stats) = process::ProcessStats::read() {
            families.extend(stats.families());
        }
        families.push(Family::new(
            "iosplit_finding",
            "1 for every finding of the static geometry audit (as iosplit-trace check finds it; codes in docs/diagnoses.md).",
            Kind::Gauge,
            self.audit
                .iter()
                .map(|finding| {
                    let labels = vec![
                        ("code", finding.code.to_string()),
                        ("device", finding.device.clone()),
                        ("severity", finding.severity.as_str().to_string()),
                    ];
                    (labels, Value::Gauge(1.0))
                })
                .collect(),
        ));
        let tracing = match &self.not_tracing {
            None => (vec![("reason", String::new())], Value::Gauge(1.0)),
            Some(reason) => (vec![("reason", reason.clone())], Value::Gauge(0.0)),
        };
        families.push(Family::new(
            "iosplit_tracing",
            "1 while the probes trace; 0 when they could not load, with the reason (the audit is still served).",
            Kind::Gauge,
            vec![tracing],
        ));
        families.push(Family::new(
            "iosplit_build",
            "The iosplit-trace build serving these metrics.",
            Kind::Info,
            vec![(
                vec![("version", env!("CARGO_PKG_VERSION").to_string())],
                Value::Info,
            )],
        ));
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bucket, Op, OpMeasures, SplitCause};

    /// An exporter without probes: its collects read only sysfs.
    fn audit_only_exporter() -> Arc<Exporter> {
        Arc::new(Exporter::new(Inner {
            capture: Err("no probes in this test".to_string()),
            disks_selected: Vec::new(),
            listing: Vec::new(),
            geometry_read: Instant::now(),
            present: BTreeSet::new(),
            served: Served::default(),
        }))
    }

    #[test]
    fn scrapes_that_come_in_together_share_one_collect() {
        let exporter = audit_only_exporter();
        let runtime = session::runtime().unwrap();
        let answers = runtime.block_on(async {
            let scrapes: Vec<_> = (0..20)
                .map(|_| {
                    let exporter = Arc::clone(&exporter);
                    tokio::spawn(async move { exporter.scrape(false).await })
                })
                .collect();
            let mut answers = Vec::new();
            for scrape in scrapes {
                answers.push(scrape.await.unwrap());
            }
            answers
        });
        assert!(answers.iter().all(|answer| answer
            .as_ref()
            .is_ok_and(|text| text.contains("iosplit_build_info"))));
        // The first collect started before the others came in; the second
        // answers all 19 of them.
        assert_eq!(exporter.collects_started.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_scrape_after_a_collect_gets_a_fresh_one() {
        let exporter = audit_only_exporter();
        let runtime = session::runtime().unwrap();
        runtime.block_on(async {
            for _ in 0..3 {
                exporter.scrape(false).await.unwrap();
            }
            exporter.scrape(true).await.unwrap();
        });
        assert_eq!(exporter.collects_started.load(Ordering::SeqCst), 4);
    }

    fn distribution(buckets: &[(u64, u64)]) -> Distribution {
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum: u64 = buckets.iter().map(|(low, c)| low * c).sum();
        Distribution {
            count,
            mean: if count == 0 {
                0.0
            } else {
                sum as f64 / count as f64
            },
            buckets: buckets
                .iter()
                .map(|&(low, count)| Bucket { low, count })
                .collect(),
            ..Distribution::default()
        }
    }

    fn snapshot(device: &str, commands: u64, sizes: &[(u64, u64)]) -> Snapshot {
        let measures = Measures {
            ops: [(
                Op::Write,
                OpMeasures {
                    user_ios: commands,
                    commands,
                    command_size: distribution(sizes),
                    split_causes: [(SplitCause::MaxSectors, commands / 2)].into(),
                    ..OpMeasures::default()
                },
            )]
            .into(),
        };
        Snapshot {
            devices: vec![DeviceReport {
                service: Default::default(),
                name: device.to_string(),
                dev: "7:0".to_string(),
                gone: false,
                geometry: DiskGeometry::default(),
                geometry_known: true,
                measures,
                partitions: Vec::new(),
            }],
            diagnoses: Vec::new(),
            events: EventCounts::default(),
            correlation: CorrelationStats::default(),
            kernel: KernelCounters {
                dropped: commands,
                ..KernelCounters::default()
            },
            attribution: None,
        }
    }

    #[test]
    fn owner_series_are_encoded_with_device_view_and_owner() {
        let mut served = Served {
            owners: owners::OwnerSeries::new(vec![crate::model::OwnerView::Process]),
            ..Served::default()
        };
        let owner = |commands: u64| {
            let mut entry = crate::model::OwnerEntry::new(
                crate::model::OwnerKnown::Known,
                "loop0".into(),
                crate::model::OwnerMeasures {
                    user_ios: commands,
                    commands,
                    bytes: commands * 512,
                    ..Default::default()
                },
            );
            entry.pid = Some(7);
            entry.comm = Some("dd".into());
            entry
        };
        for commands in [3, 10] {
            let mut scrape = snapshot("loop0", commands, &[]);
            scrape.attribution = Some(crate::model::Attribution {
                processes: vec![owner(commands)],
                ..Default::default()
            });
            served.absorb(&scrape);
        }
        let text = text(&served, &["loop0"]);
        let series = |owner: &str| {
            sample(
                &text,
                &format!(
                    r#"iosplit_owner_commands_total{{device="loop0",by="process",owner="{owner}"}}"#
                ),
            )
        };
        // Joined at the first scrape (3 commands then are `other`'s), 7 since.
        assert_eq!(series("dd[7]"), Some(7.0), "{text}");
        assert_eq!(series("other"), Some(3.0), "{text}");
        // Gone devices take their owner series with them.
        assert!(!super::tests::text(&served, &[]).contains("iosplit_owner_commands_total{"));
    }

    fn text(served: &Served, present: &[&str]) -> String {
        let present = present.iter().map(|s| s.to_string()).collect();
        super::super::prometheus::openmetrics(&served.frame(&present))
    }

    fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .map(|value| value.parse().unwrap())
    }

    const COMMANDS: &str = r#"iosplit_commands_total{device="loop0",disk="loop0",op="write"}"#;

    #[test]
    fn counters_never_go_down_across_engine_resets() {
        let mut served = Served::default();
        served.absorb(&snapshot("loop0", 10, &[(4096, 10)]));
        served.absorb(&snapshot("loop0", 25, &[(4096, 25)]));
        served.engine_was_reset();
        served.absorb(&snapshot("loop0", 5, &[(4096, 5)]));
        let text = text(&served, &["loop0"]);
        assert_eq!(sample(&text, COMMANDS), Some(30.0), "{text}");
        assert_eq!(
            sample(
                &text,
                r#"iosplit_splits_total{device="loop0",disk="loop0",op="write",cause="max_sectors"}"#
            ),
            Some(14.0),
            "{text}"
        );
        // The kernel's drop counter was not reset: 25 then 5 is a restart too.
        assert_eq!(sample(&text, "iosplit_events_dropped_total"), Some(30.0));
        let count = r#"iosplit_command_size_bytes_count{device="loop0",disk="loop0",op="write"}"#;
        assert_eq!(sample(&text, count), Some(30.0), "{text}");
    }

    #[test]
    fn a_value_that_went_down_without_a_reset_counts_as_a_restart() {
        let mut served = Served::default();
        served.absorb(&snapshot("loop0", 10, &[]));
        served.absorb(&snapshot("loop0", 4, &[]));
        assert_eq!(sample(&text(&served, &["loop0"]), COMMANDS), Some(14.0));
    }

    #[test]
    fn vanished_devices_are_not_served_but_keep_their_totals() {
        let mut served = Served::default();
        served.absorb(&snapshot("loop0", 10, &[]));
        let gone = text(&served, &[]);
        assert_eq!(sample(&gone, COMMANDS), None, "{gone}");
        assert!(gone.contains("# TYPE iosplit_commands counter"), "{gone}");
        served.absorb(&snapshot("loop0", 12, &[]));
        assert_eq!(sample(&text(&served, &["loop0"]), COMMANDS), Some(12.0));
    }

    #[test]
    fn histogram_buckets_are_cumulative_powers_of_two() {
        let mut served = Served::default();
        // 3 values in [512, 1024), 2 in [4096, 8192), 1 in [2^30, 2^31).
        served.absorb(&snapshot("loop0", 6, &[(512, 3), (4096, 2), (1 << 30, 1)]));
        let text = text(&served, &["loop0"]);
        let bucket = |le: &str| {
            sample(
                &text,
                &format!(
                    r#"iosplit_command_size_bytes_bucket{{le="{le}",device="loop0",disk="loop0",op="write"}}"#
                ),
            )
        };
        assert_eq!(bucket("511.0"), Some(0.0), "{text}");
        assert_eq!(bucket("1023.0"), Some(3.0), "{text}");
        assert_eq!(bucket("4095.0"), Some(3.0));
        assert_eq!(bucket("8191.0"), Some(5.0));
        assert_eq!(bucket("134217727.0"), Some(5.0));
        assert_eq!(bucket("+Inf"), Some(6.0));
    }

    #[test]
    fn errors_are_counted_by_status_and_survive_an_engine_reset() {
        let failing = |errors: &[(&str, u64)]| {
            let mut scrape = snapshot("sdf", 100, &[]);
            let write = scrape.devices[0].measures.ops.get_mut(&Op::Write).unwrap();
            write.failed_commands = errors.iter().map(|(_, count)| count).sum();
            write.errors = errors
                .iter()
                .map(|(status, count)| (status.to_string(), *count))
                .collect();
            scrape
        };
        let mut served = Served::default();
        served.absorb(&snapshot("sdf", 100, &[]));
        let quiet = text(&served, &["sdf"]);
        // Described, but no series while nothing failed.
        assert!(quiet.contains("# TYPE iosplit_errors counter"), "{quiet}");
        assert!(!quiet.contains("iosplit_errors_total{"), "{quiet}");
        served.absorb(&failing(&[("EIO", 2), ("ETIMEDOUT", 1)]));
        served.engine_was_reset();
        served.absorb(&failing(&[("EIO", 3)]));
        let text = text(&served, &["sdf"]);
        let series = |status: &str| {
            sample(
                &text,
                &format!(
                    r#"iosplit_errors_total{{device="sdf",disk="sdf",op="write",status="{status}"}}"#
                ),
            )
        };
        assert_eq!(series("EIO"), Some(5.0), "{text}");
        assert_eq!(series("ETIMEDOUT"), Some(1.0), "{text}");
        assert_eq!(series("ENOSPC"), None, "{text}");
        assert!(text.contains("# HELP iosplit_errors Commands that completed with an error"));
    }

    #[test]
    fn what_if_times_are_served_in_seconds_where_the_model_applies() {
        let mut timed = crate::frontend::test_reports::requeued_diagnosis("loop0");
        timed.evidence.set_what_if(crate::model::WhatIf {
            commands_now: 593,
            commands_after_fix: 527,
            time_now_ms: Some(1500.0),
            time_after_fix_ms: Some(250.0),
            ..crate::model::WhatIf::default()
        });
        let mut scrape = snapshot("loop0", 10, &[]);
        scrape.diagnoses = vec![timed];
        let mut served = Served::default();
        served.absorb(&scrape);
        let text = text(&served, &["loop0"]);
        let seconds = |case: &str| {
            sample(
                &text,
                &format!(
                    r#"iosplit_diagnosis_seconds{{code="requeued_commands",device="loop0",case="{case}"}}"#
                ),
            )
        };
        assert_eq!(seconds("now"), Some(1.5), "{text}");
        assert_eq!(seconds("after_fix"), Some(0.25), "{text}");
        // Untimed: described, no series.
        let mut untimed = snapshot("loop0", 10, &[]);
        untimed.diagnoses = vec![crate::frontend::test_reports::requeued_diagnosis("loop0")];
        served.absorb(&untimed);
        let text = super::tests::text(&served, &["loop0"]);
        assert!(
            text.contains("# TYPE iosplit_diagnosis_seconds gauge"),
            "{text}"
        );
        assert!(!text.contains("iosplit_diagnosis_seconds{"), "{text}");
    }

    #[test]
    fn build_info_and_every_family_are_always_described() {
        let text = text(&Served::default(), &[]);
        assert!(text.contains("iosplit_build_info{version=\""), "{text}");
        for name in [
            "iosplit_diagnosis",
            "iosplit_queue_to_complete_seconds",
            "iosplit_splits",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}: {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn chains_in_flight_is_a_gauge_of_the_last_scrape() {
        let mut served = Served::default();
        let mut busy = snapshot("loop0", 10, &[(4096, 10)]);
        busy.correlation.in_flight = 7;
        served.absorb(&busy);
        let idle = snapshot("loop0", 12, &[(4096, 12)]);
        assert!(text(&served, &["loop0"]).contains("\niosplit_chains_in_flight 7.0\n"));
        served.absorb(&idle);
        let shown = text(&served, &["loop0"]);
        assert!(
            shown.contains("# TYPE iosplit_chains_in_flight gauge"),
            "{shown}"
        );
        assert!(
            shown.contains("\niosplit_chains_in_flight 0.0\n"),
            "{shown}"
        );
    }

    #[test]
    fn dropped_chains_are_counted_by_reason_and_survive_an_engine_reset() {
        let mut served = Served::default();
        let mut first = snapshot("loop0", 10, &[(4096, 10)]);
        first.correlation.completion_lost = 3;
        first.correlation.aged_out = 1;
        served.absorb(&first);
        // SIGHUP resets the engine: its counters start again from 0.
        served.engine_was_reset();
        let mut second = snapshot("loop0", 2, &[(4096, 2)]);
        second.correlation.completion_lost = 2;
        served.absorb(&second);
        let shown = text(&served, &["loop0"]);
        let dropped = |reason: &str| {
            sample(
                &shown,
                &format!(r#"iosplit_chains_dropped_total{{reason="{reason}"}}"#),
            )
        };
        assert_eq!(dropped("completion_lost"), Some(5.0), "{shown}");
        assert_eq!(dropped("aged_out"), Some(1.0), "{shown}");
        assert_eq!(dropped("evicted"), Some(0.0), "{shown}");
        assert!(
            shown.contains("# TYPE iosplit_chains_dropped counter"),
            "{shown}"
        );
    }

    /// The exposition without the `process_*` families (they read /proc now).
    fn without_process(text: &str) -> String {
        text.lines()
            .filter(|line| {
                !line.starts_with("process_")
                    && !line.starts_with("# HELP process_")
                    && !line.starts_with("# TYPE process_")
            })
            .map(|line| format!("{line}\n"))
            .collect()
    }

    #[test]
    fn every_family_is_pinned_byte_for_byte() {
        let mut served = Served {
            owners: owners::OwnerSeries::new(vec![crate::model::OwnerView::Process]),
            audit: vec![crate::frontend::test_reports::requeued_diagnosis("loop0p1")],
            ..Served::default()
        };
        for (commands, lost) in [(4, 1), (10, 3)] {
            let mut scrape = snapshot("loop0", commands, &[(512, 1), (4096, commands - 1)]);
            let device = &mut scrape.devices[0];
            let write = device.measures.ops.get_mut(&Op::Write).unwrap();
            write.issue_to_complete_us = distribution(&[(16, 1), (1000, commands - 1)]);
            write.errors = [("EIO".to_string(), commands / 4)].into();
            device.partitions.push(crate::model::PartitionReport {
                name: "loop0p1".to_string(),
                dev: "259:0".to_string(),
                geometry: Default::default(),
                geometry_known: true,
                measures: device.measures.clone(),
                gone: false,
            });
            scrape.correlation.in_flight = commands / 2;
            scrape.correlation.completion_lost = lost;
            scrape.events[EventKind::ALL[0]] = commands * 3;
            let mut timed = crate::frontend::test_reports::requeued_diagnosis("loop0");
            timed.evidence.set_what_if(crate::model::WhatIf {
                commands_now: 593,
                commands_after_fix: 527,
                time_now_ms: Some(1500.0),
                time_after_fix_ms: Some(0.1),
                ..crate::model::WhatIf::default()
            });
            scrape.diagnoses = vec![timed];
            let mut owner = crate::model::OwnerEntry::new(
                crate::model::OwnerKnown::Known,
                "loop0".into(),
                crate::model::OwnerMeasures {
                    user_ios: commands,
                    commands,
                    bytes: commands * 512,
                    ..Default::default()
                },
            );
            owner.pid = Some(7);
            owner.comm = Some("d\"d\\x".into());
            scrape.attribution = Some(crate::model::Attribution {
                processes: vec![owner],
                ..Default::default()
            });
            served.absorb(&scrape);
        }
        served.not_tracing = Some("no \"probes\"\nhere".to_string());
        let shown = without_process(&text(&served, &["loop0", "loop0p1"]));
        assert_eq!(
            shown,
            PINNED_FRAME.replace("{version}", env!("CARGO_PKG_VERSION")),
            "{shown}"
        );
    }

    /// Every family `serve` writes, as it wrote them before the split of serve (#46).
    const PINNED_FRAME: &str =
        include_str!("../../../tests/fixtures/prometheus/serve-frame.openmetrics");

    #[test]
    fn the_footprint_families_are_pinned_byte_for_byte() {
        let stats = process::ProcessStats {
            resident_bytes: 41 << 20,
            cpu_seconds: 2.5,
            start_time_seconds: 1_800_000_000.0,
            open_fds: 9,
        };
        let text = super::super::prometheus::openmetrics(&stats.families());
        assert_eq!(
            text,
            "\
# HELP process_resident_memory_bytes Resident memory of the exporter.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 42991616.0
# HELP process_cpu_seconds User and system CPU time of the exporter (all its threads).
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 2.5
# HELP process_start_time_seconds When the exporter started, in seconds since the Unix epoch.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1800000000.0
# HELP process_open_fds File descriptors the exporter holds open.
# TYPE process_open_fds gauge
process_open_fds 9.0
# EOF
"
        );
    }

    #[test]
    fn the_exporters_own_footprint_is_served() {
        let text = text(&Served::default(), &[]);
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        let resident = text
            .lines()
            .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no resident memory sample: {text}"));
        assert!(resident > 1e6, "{resident}");
    }
}
