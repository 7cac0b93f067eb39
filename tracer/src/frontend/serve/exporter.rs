//! The exporter's state and its scrapes. Scrapes ask the engine once per
//! round (one `Capture::query`): those that come in while a collect runs
//! share the next one and its encoding, so any number of scrapers cost the
//! consumer one query at a time. Each collect also looks for disks and
//! partitions that came or went, and SIGHUP's collect resets the engine
//! after taking its counters.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::capture::Capture;
use crate::engine::Engine;
use crate::error::{one_line, Error, Result};
use crate::frontend::prometheus;
use crate::frontend::session::GeometryWatch;
use crate::geometry::resolve::ResolvedDevice;
use crate::geometry::DiskGeometry;
use crate::model::{Diagnosis, OwnerView};

use super::frame;
use super::totals::{Served, Snapshot};

pub const WORKER_STOPPED: &str = "the exporter's worker thread stopped unexpectedly";

pub struct Exporter {
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
    /// The selected disks, or every disk, as they come and go.
    watch: GeometryWatch,
    /// Disks and partitions served now.
    present: BTreeSet<String>,
    served: Served,
}

impl Exporter {
    /// Serves `capture` (or why there is none) over the disks `watch`
    /// watches, `geometry` being what the engine was given; owners by
    /// `views`.
    pub fn new(
        capture: std::result::Result<Capture<Engine>, String>,
        watch: GeometryWatch,
        geometry: &[DiskGeometry],
        views: Vec<OwnerView>,
    ) -> Exporter {
        let mut served = Served::new(views);
        served.set_audit(audit_of(geometry));
        Exporter {
            inner: Mutex::new(Inner {
                capture,
                watch,
                present: present_names(geometry),
                served,
            }),
            collects_started: AtomicU64::new(0),
            latest: tokio::sync::Mutex::new(Answer {
                generation: 0,
                text: Err("nothing collected yet".to_string()),
            }),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::failure("the exporter's state is poisoned"))
    }

    /// Says what is traced, when the probes loaded.
    pub fn announce(&self, devices: &[ResolvedDevice]) {
        if let Ok(Inner {
            capture: Ok(capture),
            ..
        }) = self.inner.lock().as_deref()
        {
            crate::frontend::selection::announce(devices, capture);
        }
    }

    /// `/healthz`'s answer: whether the event consumer answers. Blocks
    /// until its next drain.
    pub fn health(&self) -> std::result::Result<String, String> {
        self.lock()
            .and_then(|inner| match &inner.capture {
                Ok(capture) => capture.query(|_, _| "ok\n".to_string()),
                // Serving the audit is what it can do: healthy, and saying so.
                Err(reason) => Ok(format!(
                    "ok: serving the geometry audit only, not tracing ({reason})\n"
                )),
            })
            .map_err(|err| one_line(&err))
    }

    /// The metrics as of a collect that started after this call: scrapes that
    /// come in together share one engine query and one encoding, so the
    /// consumer answers once per round however many scrapers wait, and keeps
    /// draining the rings between rounds. `reset` (SIGHUP) always collects.
    pub async fn scrape(self: &Arc<Self>, reset: bool) -> std::result::Result<Arc<str>, String> {
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
        let mut inner = self.lock()?;
        // Every collect looks, however soon after the last: a scrape must
        // not serve a disk that is already gone.
        let geometry = match reset {
            true => Some(inner.watch.reread()?),
            false => inner.watch.changed(true),
        };
        if let Some(disks) = &geometry {
            inner.present = present_names(disks);
            inner.served.set_audit(audit_of(disks));
        }
        let by_owner = !inner.served.owners().is_empty();
        let capture = match &inner.capture {
            Ok(capture) => capture,
            Err(reason) => {
                let reason = reason.clone();
                inner.served.set_not_tracing(reason);
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
        let inner = self.lock()?;
        let families = frame::frame(&inner.served, &inner.present);
        drop(inner);
        Ok(prometheus::openmetrics(&families))
    }
}

/// The static audit's findings on `disks`, worded as `check` words them.
fn audit_of(disks: &[DiskGeometry]) -> Vec<Diagnosis> {
    crate::explain::diagnoses(disks.iter().flat_map(crate::engine::audit::audit_disk))
}

fn present_names(disks: &[DiskGeometry]) -> BTreeSet<String> {
    disks
        .iter()
        .flat_map(|disk| {
            std::iter::once(disk.name.clone()).chain(disk.partitions.iter().map(|p| p.name.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::session;

    /// An exporter without probes: its collects read only sysfs.
    fn audit_only_exporter() -> Arc<Exporter> {
        Arc::new(Exporter::new(
            Err("no probes in this test".to_string()),
            GeometryWatch::new(&[], &[]),
            &[],
            Vec::new(),
        ))
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
}
