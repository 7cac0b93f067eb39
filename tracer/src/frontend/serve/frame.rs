//! What `serve` writes at a scrape, in order: every family of the metric
//! tables, with the values [`Served`] holds; a device's series are written
//! while it is present.

use std::collections::BTreeSet;

use crate::frontend::prometheus::{Family, Kind, Labels, Value};
use crate::model::Diagnosis;

use super::owners::OWNER_COUNTERS;
use super::process::ProcessStats;
use super::tables::{
    CHAINS_DROPPED, DROPPED, ERRORS, EVENTS, INCOMPLETE, IN_FLIGHT, LATENCY_BUCKET_BITS,
    LATENCY_HISTOGRAMS, MICROS_PER_SECOND, MISSED, OP_COUNTERS, READ_FAILED, SIZE_BUCKET_BITS,
    SIZE_HISTOGRAMS, SPLITS,
};
use super::totals::Served;

/// The disks and partitions served now.
struct Present<'a>(&'a BTreeSet<String>);

impl Present<'_> {
    fn has(&self, device: &str) -> bool {
        self.0.contains(device)
    }

    /// A series without a `device` label is always served.
    fn serves(&self, labels: &Labels) -> bool {
        labels
            .iter()
            .find(|(key, _)| *key == "device")
            .is_none_or(|(_, device)| self.has(device))
    }
}

/// What to encode now: every series of a device still present, and the rest.
pub fn frame(served: &Served, present: &BTreeSet<String>) -> Vec<Family> {
    let present = Present(present);
    let mut families = device_counters(served, &present);
    families.extend(device_histograms(served, &present));
    families.extend(owner_counters(served, &present));
    families.extend(engine_counters(served, &present));
    families.extend(kernel_counters(served));
    families.extend(diagnosis_families(served, &present));
    families.push(device_info(served, &present));
    if let Some(stats) = ProcessStats::read() {
        families.extend(stats.families());
    }
    families.extend(status_families(served));
    families
}

/// One counter family from the served totals of `name`.
fn counter_family(
    served: &Served,
    present: &Present,
    name: &'static str,
    help: &'static str,
) -> Family {
    let samples = served
        .counter_series(name)
        .filter(|(labels, _)| present.serves(labels))
        .map(|(labels, served)| (labels.clone(), Value::Counter(served)))
        .collect();
    Family::new(name, help, Kind::Counter, samples)
}

/// Per device and op: the op counters, splits and errors.
fn device_counters(served: &Served, present: &Present) -> Vec<Family> {
    let mut families: Vec<Family> = OP_COUNTERS
        .iter()
        .map(|counter| counter_family(served, present, counter.name, counter.help))
        .collect();
    for metric in [SPLITS, ERRORS] {
        families.push(counter_family(served, present, metric.name, metric.help));
    }
    families
}

/// Per device and op: sizes in bytes, latencies in seconds.
fn device_histograms(served: &Served, present: &Present) -> Vec<Family> {
    let mut families = Vec::new();
    for (histograms, bits, scale) in [
        (&SIZE_HISTOGRAMS, &SIZE_BUCKET_BITS, 1.0),
        (&LATENCY_HISTOGRAMS, &LATENCY_BUCKET_BITS, MICROS_PER_SECOND),
    ] {
        for histogram in histograms {
            let samples = served
                .histogram_series(histogram.name)
                .filter(|(labels, _)| present.serves(labels))
                .map(|(labels, total)| {
                    let value = Value::Histogram {
                        sum: total.sum_served() / scale,
                        count: total.count_served(),
                        buckets: total.ladder(bits, scale),
                    };
                    (labels.clone(), value)
                })
                .collect();
            families.push(Family::new(
                histogram.name,
                histogram.help,
                Kind::Histogram,
                samples,
            ));
        }
    }
    families
}

/// `--by`: per device, view and owner; not described without `--by`.
fn owner_counters(served: &Served, present: &Present) -> Vec<Family> {
    if served.owners().is_empty() {
        return Vec::new();
    }
    OWNER_COUNTERS
        .iter()
        .enumerate()
        .map(|(index, (name, help, _))| {
            let samples = served
                .owners()
                .samples(index)
                .into_iter()
                .filter(|(labels, _)| present.serves(labels))
                .map(|(labels, value)| (labels, Value::Counter(value)))
                .collect();
            Family::new(name, help, Kind::Counter, samples)
        })
        .collect()
}

/// The engine's own counters, and the chains it follows now.
fn engine_counters(served: &Served, present: &Present) -> Vec<Family> {
    let mut families: Vec<Family> = [EVENTS, INCOMPLETE, CHAINS_DROPPED]
        .into_iter()
        .map(|metric| counter_family(served, present, metric.name, metric.help))
        .collect();
    families.push(Family::new(
        IN_FLIGHT.name,
        IN_FLIGHT.help,
        Kind::Gauge,
        vec![(Labels::new(), Value::Gauge(served.in_flight() as f64))],
    ));
    families
}

fn kernel_counters(served: &Served) -> Vec<Family> {
    [DROPPED, MISSED, READ_FAILED]
        .into_iter()
        .map(|metric| {
            let value = Value::Counter(served.kernel_total(metric.name));
            Family::new(
                metric.name,
                metric.help,
                Kind::Counter,
                vec![(Labels::new(), value)],
            )
        })
        .collect()
}

/// A diagnosis's labels, with `case` where it has one.
fn diagnosis_labels(d: &Diagnosis, case: &str) -> Labels {
    vec![
        ("code", d.code.to_string()),
        ("device", d.device.clone()),
        ("case", case.to_string()),
    ]
}

/// The live diagnoses of present devices, and their what-if numbers.
fn diagnosis_families(served: &Served, present: &Present) -> Vec<Family> {
    let diagnoses: Vec<&Diagnosis> = served
        .diagnoses()
        .iter()
        .filter(|d| present.has(&d.device))
        .collect();
    let what_ifs = || {
        diagnoses
            .iter()
            .filter_map(|d| d.evidence.what_if().map(|what_if| (*d, what_if)))
    };
    vec![
        Family::new(
            "iosplit_diagnosis",
            "1 for every live diagnosis (codes and severities in docs/diagnoses.md).",
            Kind::Gauge,
            diagnoses
                .iter()
                .map(|d| (severity_labels(d), Value::Gauge(1.0)))
                .collect(),
        ),
        Family::new(
            "iosplit_diagnosis_commands",
            "Commands of the observed workload now, and replayed under the diagnosis's fix (where known).",
            Kind::Gauge,
            what_ifs()
                .flat_map(|(d, what_if)| {
                    [
                        ("now", what_if.commands_now),
                        ("after_fix", what_if.commands_after_fix),
                    ]
                    .map(|(case, commands)| {
                        (diagnosis_labels(d, case), Value::Gauge(commands as f64))
                    })
                })
                .collect(),
        ),
        Family::new(
            "iosplit_diagnosis_seconds",
            "Device time of the observed workload now, and replayed under the diagnosis's fix, from the device's service model (where it applies).",
            Kind::Gauge,
            what_ifs()
                .flat_map(|(d, what_if)| {
                    [
                        ("now", what_if.time_now_ms),
                        ("after_fix", what_if.time_after_fix_ms),
                    ]
                    .into_iter()
                    .filter_map(move |(case, ms)| {
                        Some((diagnosis_labels(d, case), Value::Gauge(ms? / 1000.0)))
                    })
                })
                .collect(),
        ),
    ]
}

/// `code`, `device` and `severity`: a diagnosis's or an audit finding's.
fn severity_labels(d: &Diagnosis) -> Labels {
    vec![
        ("code", d.code.to_string()),
        ("device", d.device.clone()),
        ("severity", d.severity.as_str().to_string()),
    ]
}

fn device_info(served: &Served, present: &Present) -> Family {
    Family::new(
        "iosplit_device",
        "Disks and partitions served now.",
        Kind::Info,
        served
            .devices()
            .filter(|(name, _, _)| present.has(name))
            .map(|(name, disk, dev)| {
                let labels = vec![
                    ("device", name.to_string()),
                    ("disk", disk.to_string()),
                    ("dev", dev.to_string()),
                ];
                (labels, Value::Info)
            })
            .collect(),
    )
}

/// The audit's findings, whether the probes trace, and the build.
fn status_families(served: &Served) -> Vec<Family> {
    let tracing = match served.not_tracing() {
        None => (vec![("reason", String::new())], Value::Gauge(1.0)),
        Some(reason) => (vec![("reason", reason.to_string())], Value::Gauge(0.0)),
    };
    vec![
        Family::new(
            "iosplit_finding",
            "1 for every finding of the static geometry audit (as iosplit-trace check finds it; codes in docs/diagnoses.md).",
            Kind::Gauge,
            served
                .audit()
                .iter()
                .map(|finding| (severity_labels(finding), Value::Gauge(1.0)))
                .collect(),
        ),
        Family::new(
            "iosplit_tracing",
            "1 while the probes trace; 0 when they could not load, with the reason (the audit is still served).",
            Kind::Gauge,
            vec![tracing],
        ),
        Family::new(
            "iosplit_build",
            "The iosplit-trace build serving these metrics.",
            Kind::Info,
            vec![(
                vec![("version", env!("CARGO_PKG_VERSION").to_string())],
                Value::Info,
            )],
        ),
    ]
}
