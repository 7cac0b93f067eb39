//! What `serve` serves, kept on this side of the engine: counters and
//! histograms that only grow, across engine resets (SIGHUP) and devices
//! coming and going, beside what the last scrape saw (diagnoses, chains in
//! flight, the devices the engine knows).

use std::collections::BTreeMap;

use tracer_common::EventKind;

use crate::capture::KernelCounters;
use crate::frontend::prometheus::Labels;
use crate::model::{
    Attribution, CorrelationStats, DeviceReport, Diagnosis, Distribution, EventCounts, Measures,
    OwnerView,
};

use super::owners::OwnerSeries;
use super::tables::{
    Total, CHAINS_DROPPED, DROPPED, ERRORS, EVENTS, INCOMPLETE, LATENCY_HISTOGRAMS, MISSED,
    OP_COUNTERS, READ_FAILED, SIZE_HISTOGRAMS, SPLITS,
};

/// A histogram served cumulatively from the engine's power-of-two buckets.
#[derive(Clone, Debug, Default)]
pub struct HistogramTotal {
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

    pub fn count_served(&self) -> u64 {
        self.count.served
    }

    pub fn sum_served(&self) -> f64 {
        self.sum_served
    }

    /// Prometheus buckets (per bucket; the writer accumulates), ending in +Inf.
    pub fn ladder(&self, bits: &std::ops::RangeInclusive<u32>, scale: f64) -> Vec<(f64, u64)> {
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

/// What one query takes out of the engine.
pub struct Snapshot {
    pub devices: Vec<DeviceReport>,
    pub diagnoses: Vec<Diagnosis>,
    pub events: EventCounts,
    pub correlation: CorrelationStats,
    pub kernel: KernelCounters,
    /// Every owner's counters, when `--by` asked for any view.
    pub attribution: Option<Attribution>,
}

/// Everything served, cumulative since `serve` started.
#[derive(Default)]
pub struct Served {
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
    owners: OwnerSeries,
    /// The static geometry audit of the devices served now, as `check` finds it.
    audit: Vec<Diagnosis>,
    /// Why the probes are not tracing, when they could not load.
    not_tracing: Option<String>,
}

impl Served {
    /// Nothing served yet; owners by the `--by` views.
    pub fn new(views: Vec<OwnerView>) -> Served {
        Served {
            owners: OwnerSeries::new(views),
            ..Served::default()
        }
    }

    pub fn absorb(&mut self, snapshot: &Snapshot) {
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
                .entry((EVENTS.name, vec![("kind", kind.json_key().to_string())]))
                .or_default()
                .observe(snapshot.events[kind]);
        }
        self.in_flight = snapshot.correlation.in_flight;
        self.counters
            .entry((INCOMPLETE.name, Labels::new()))
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
                .entry((CHAINS_DROPPED.name, vec![("reason", reason.to_string())]))
                .or_default()
                .observe(value);
        }
        for (name, value) in [
            (DROPPED.name, snapshot.kernel.dropped),
            (MISSED.name, snapshot.kernel.missed),
            (READ_FAILED.name, snapshot.kernel.read_failed),
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
            for counter in &OP_COUNTERS {
                self.counters
                    .entry((counter.name, labels.clone()))
                    .or_default()
                    .observe((counter.value)(m));
            }
            for (cause, &count) in &m.split_causes {
                let mut labels = labels.clone();
                labels.push(("cause", cause.key().to_string()));
                self.counters
                    .entry((SPLITS.name, labels))
                    .or_default()
                    .observe(count);
            }
            for (status, &count) in &m.errors {
                let mut labels = labels.clone();
                labels.push(("status", status.clone()));
                self.counters
                    .entry((ERRORS.name, labels))
                    .or_default()
                    .observe(count);
            }
            for histogram in SIZE_HISTOGRAMS.iter().chain(&LATENCY_HISTOGRAMS) {
                self.histograms
                    .entry((histogram.name, labels.clone()))
                    .or_default()
                    .observe((histogram.distribution)(m));
            }
        }
    }

    /// The engine's counters restarted from zero (the kernel's did not).
    pub fn engine_was_reset(&mut self) {
        self.counters.values_mut().for_each(|total| total.seen = 0);
        self.histograms
            .values_mut()
            .for_each(HistogramTotal::restart);
        self.owners.engine_was_reset();
    }

    /// The audit of the devices served from now on.
    pub fn set_audit(&mut self, audit: Vec<Diagnosis>) {
        self.audit = audit;
    }

    /// The probes could not load, for this reason.
    pub fn set_not_tracing(&mut self, reason: String) {
        self.not_tracing = Some(reason);
    }

    /// Every series of the counter `name`, with its served value.
    pub fn counter_series(&self, name: &'static str) -> impl Iterator<Item = (&Labels, u64)> {
        self.counters
            .range((name, Labels::new())..)
            .take_while(move |((metric, _), _)| *metric == name)
            .map(|((_, labels), total)| (labels, total.served))
    }

    /// Every series of the histogram `name`.
    pub fn histogram_series(
        &self,
        name: &'static str,
    ) -> impl Iterator<Item = (&Labels, &HistogramTotal)> {
        self.histograms
            .range((name, Labels::new())..)
            .take_while(move |((metric, _), _)| *metric == name)
            .map(|((_, labels), total)| (labels, total))
    }

    /// The served value of the kernel's counter `name`.
    pub fn kernel_total(&self, name: &str) -> u64 {
        self.kernel.get(name).map_or(0, |total| total.served)
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    pub fn diagnoses(&self) -> &[Diagnosis] {
        &self.diagnoses
    }

    /// Every disk and partition the engine has known: name, disk, "major:minor".
    pub fn devices(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.devices
            .iter()
            .map(|(name, (disk, dev))| (name.as_str(), disk.as_str(), dev.as_str()))
    }

    pub fn owners(&self) -> &OwnerSeries {
        &self.owners
    }

    pub fn audit(&self) -> &[Diagnosis] {
        &self.audit
    }

    pub fn not_tracing(&self) -> Option<&str> {
        self.not_tracing.as_deref()
    }
}
