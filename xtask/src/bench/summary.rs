//! Medians, ratios against the same run's baseline and floor, the targets,
//! and the markdown table. Pure: records in, text and numbers out.

use serde::Serialize;

use super::devices::DeviceKind;
use super::peers::{Config, TracerOutcome};
use super::workload::{FioResult, Workload};

/// One fio run under one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    pub device: DeviceKind,
    pub workload: Workload,
    pub config: Config,
    pub round: u32,
    pub fio: FioResult,
    /// Busy CPU time of the whole machine while fio ran (all CPUs).
    pub machine_busy_s: f64,
    pub load_1m: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracer: Option<TracerOutcome>,
}

impl RunRecord {
    fn fio_cpu_per_io_ns(&self) -> f64 {
        self.fio.cpu_s * 1e9 / self.fio.total_ios.max(1) as f64
    }

    /// Machine CPU per I/O outside the tracer process: fio, kworkers, irqs and
    /// every probe's in-kernel cost (plus whatever else the machine ran).
    fn machine_cpu_per_io_ns(&self) -> f64 {
        let consumer = self.tracer.as_ref().map_or(0.0, |t| t.window_cpu_s);
        (self.machine_busy_s - consumer).max(0.0) * 1e9 / self.fio.total_ios.max(1) as f64
    }
}

pub fn median(values: &mut [f64]) -> Option<f64> {
    let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return None;
    }
    finite.sort_by(f64::total_cmp);
    let mid = finite.len() / 2;
    Some(if finite.len() % 2 == 1 {
        finite[mid]
    } else {
        (finite[mid - 1] + finite[mid]) / 2.0
    })
}

fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0 && numerator.is_finite()).then(|| numerator / denominator)
}

/// One table row: a configuration's medians over the rounds of one workload.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub device: DeviceKind,
    pub workload: Workload,
    pub config: Config,
    pub runs: usize,
    pub iops_median: f64,
    pub iops_min: f64,
    pub iops_max: f64,
    /// Median IOPS over the baseline's median IOPS, same workload, same run.
    pub iops_ratio: Option<f64>,
    /// Median over rounds of IOPS / the same round's baseline IOPS.
    pub iops_ratio_paired: Option<f64>,
    /// Median over rounds of IOPS / the same round's floor IOPS (the floor:
    /// the same tracepoints with programs that return at once).
    pub floor_ratio_paired: Option<f64>,
    pub events_per_s: Option<f64>,
    pub drops: Option<u64>,
    /// Tracer process CPU (user + system, attach to exit) per event, µs.
    pub consumer_us_per_event: Option<f64>,
    /// BPF program run time (bpf_stats) per event handled, µs.
    pub bpf_us_per_event: Option<f64>,
    /// BPF program run time per probe hit (hits include other devices' I/O,
    /// which the programs filter out), ns.
    pub bpf_ns_per_hit: Option<f64>,
    /// fio's own CPU per I/O minus the baseline's, ns.
    pub fio_cpu_delta_ns_per_io: Option<f64>,
    /// Machine CPU per I/O outside the tracer process minus the baseline's, ns.
    pub machine_cpu_delta_ns_per_io: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    pub attach_ms_max: Option<f64>,
    pub load_1m_median: f64,
}

impl Row {
    /// User + kernel CPU per event: the consumer plus the BPF programs.
    pub fn cpu_us_per_event(&self) -> Option<f64> {
        Some(self.consumer_us_per_event? + self.bpf_us_per_event.unwrap_or(0.0))
    }
}

pub fn rows(records: &[RunRecord]) -> Vec<Row> {
    let mut rows = Vec::new();
    for device in DeviceKind::ALL {
        for workload in Workload::ALL {
            let of = |config: Config| -> Vec<&RunRecord> {
                records
                    .iter()
                    .filter(|r| r.device == device && r.workload == workload && r.config == config)
                    .collect()
            };
            let baseline = of(Config::Baseline);
            let floor = of(Config::Floor);
            for config in Config::ALL {
                let runs = of(config);
                if !runs.is_empty() {
                    rows.push(row(&runs, &baseline, &floor));
                }
            }
        }
    }
    rows
}

fn median_of<'a>(
    runs: impl IntoIterator<Item = &'a &'a RunRecord>,
    f: impl Fn(&RunRecord) -> Option<f64>,
) -> Option<f64> {
    median(&mut runs.into_iter().filter_map(|r| f(r)).collect::<Vec<_>>())
}

/// One configuration's row; `runs` share device, workload and configuration.
fn row(runs: &[&RunRecord], baseline: &[&RunRecord], floor: &[&RunRecord]) -> Row {
    let first = runs[0];
    let config = first.config;
    let iops: Vec<f64> = runs.iter().map(|r| r.fio.iops).collect();
    let iops_median = median(&mut iops.clone()).unwrap_or(0.0);
    let base_iops = median_of(baseline, |r| Some(r.fio.iops));
    // Each run against the baseline run of its own round, which ran minutes
    // apart at most: robust to slow drift in the machine's load.
    let paired_with = |reference: &[&RunRecord]| {
        median_of(runs, |r| {
            let base = reference.iter().find(|b| b.round == r.round)?;
            ratio(r.fio.iops, base.fio.iops)
        })
    };
    let paired = paired_with(baseline);
    let tracers: Vec<&TracerOutcome> = runs.iter().filter_map(|r| r.tracer.as_ref()).collect();
    let traced = !tracers.is_empty();
    let per_event =
        |t: &TracerOutcome, cost_s: f64| (t.events > 0).then(|| cost_s * 1e6 / t.events as f64);
    let delta = |f: fn(&RunRecord) -> f64| {
        (config != Config::Baseline)
            .then(|| Some(median_of(runs, |r| Some(f(r)))? - median_of(baseline, |r| Some(f(r)))?))
            .flatten()
    };
    Row {
        device: first.device,
        workload: first.workload,
        config,
        runs: runs.len(),
        iops_median,
        iops_min: iops.iter().copied().fold(f64::INFINITY, f64::min),
        iops_max: iops.iter().copied().fold(0.0, f64::max),
        iops_ratio: base_iops.and_then(|base| ratio(iops_median, base)),
        iops_ratio_paired: paired,
        floor_ratio_paired: (config != Config::Baseline)
            .then(|| paired_with(floor))
            .flatten(),
        events_per_s: median_of(runs, |r| {
            let t = r.tracer.as_ref()?;
            Some(t.events as f64 / r.fio.runtime_s.max(1e-9))
        }),
        drops: traced.then(|| tracers.iter().map(|t| t.dropped).sum()),
        consumer_us_per_event: median_of(runs, |r| {
            let t = r.tracer.as_ref()?;
            per_event(t, t.consumer_cpu_s)
        }),
        bpf_us_per_event: median_of(runs, |r| {
            let t = r.tracer.as_ref()?;
            (t.bpf.run_cnt > 0).then_some(())?;
            per_event(t, t.bpf.run_time_ns as f64 / 1e9)
        }),
        bpf_ns_per_hit: median_of(runs, |r| {
            let bpf = r.tracer.as_ref()?.bpf;
            (bpf.run_cnt > 0).then(|| bpf.run_time_ns as f64 / bpf.run_cnt as f64)
        }),
        fio_cpu_delta_ns_per_io: delta(RunRecord::fio_cpu_per_io_ns),
        machine_cpu_delta_ns_per_io: delta(RunRecord::machine_cpu_per_io_ns),
        peak_rss_mib: traced.then(|| {
            tracers
                .iter()
                .map(|t| t.peak_rss_kib as f64 / 1024.0)
                .fold(0.0, f64::max)
        }),
        attach_ms_max: traced.then(|| {
            tracers
                .iter()
                .map(|t| t.attach_s * 1000.0)
                .fold(0.0, f64::max)
        }),
        load_1m_median: median_of(runs, |r| Some(r.load_1m)).unwrap_or(f64::NAN),
    }
}

/// The sustained zero-drop check.
#[derive(Clone, Debug, Serialize)]
pub struct SoakRecord {
    pub device: DeviceKind,
    pub workload: Workload,
    pub seconds: u32,
    pub fio: FioResult,
    pub tracer: TracerOutcome,
    pub load_1m: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub name: String,
    pub goal: &'static str,
    pub measured: String,
    pub met: Option<bool>,
}

/// The targets for iosplit-trace (full correlation), judged on the rows and the soak.
pub fn targets(rows: &[Row], soak: Option<&SoakRecord>) -> Vec<Target> {
    let ours: Vec<&Row> = rows
        .iter()
        .filter(|r| r.config == Config::IosplitTrace)
        .collect();
    let label = |r: &Row| format!("{} {}", r.device.title(), r.workload.key());
    let mut targets = Vec::new();

    // Per workload, from the same run: against bpftrace count() and against
    // the floor, on paired ratios (each round against its own baseline),
    // which drift in the machine's other load disturbs least.
    let paired = |r: &Row| r.iops_ratio_paired.or(r.iops_ratio);
    let three = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
    for r in &ours {
        let peer = |config: Config| {
            rows.iter()
                .find(|p| p.config == config && p.device == r.device && p.workload == r.workload)
                .and_then(paired)
        };
        let mine = paired(r);
        let count = peer(Config::BpftraceCount);
        let floor = peer(Config::Floor);
        targets.push(Target {
            name: format!("vs count(): {}", label(r)),
            goal: "× baseline ≥ bpftrace count()'s",
            measured: format!(
                "{} vs {} (gap {})",
                three(mine),
                three(count),
                three(mine.zip(count).map(|(m, c)| m - c))
            ),
            met: mine.zip(count).map(|(m, c)| m >= c),
        });
        targets.push(Target {
            name: format!("vs floor: {}", label(r)),
            goal: "× baseline within 0.05 of the floor's",
            measured: format!(
                "{} vs floor {} (gap {}; × floor {})",
                three(mine),
                three(floor),
                three(mine.zip(floor).map(|(m, f)| f - m)),
                three(r.floor_ratio_paired)
            ),
            met: mine.zip(floor).map(|(m, f)| f - m <= 0.05),
        });
    }

    let drops: Option<u64> = ours
        .iter()
        .map(|r| r.drops)
        .chain(std::iter::once(soak.map(|s| s.tracer.dropped)))
        .flatten()
        .reduce(|a, b| a + b);
    targets.push(Target {
        name: "drops".into(),
        goal: "zero dropped events (all runs and the soak)",
        measured: drops.map_or("no data".into(), |d| {
            format!(
                "{d} dropped{}",
                if soak.is_some() { "" } else { " (no soak run)" }
            )
        }),
        met: drops.map(|d| d == 0),
    });

    let worst_cpu = ours
        .iter()
        .filter_map(|r| Some((r.cpu_us_per_event()?, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    targets.push(Target {
        name: "cpu".into(),
        goal: "tracer CPU ≤ 1 µs per event (consumer + BPF programs)",
        measured: worst_cpu.map_or("no data".into(), |(cpu, r)| {
            format!("worst {cpu:.3} µs/event ({})", label(r))
        }),
        met: worst_cpu.map(|(cpu, _)| cpu <= 1.0),
    });

    let peak_rss = ours
        .iter()
        .filter_map(|r| r.peak_rss_mib)
        .chain(soak.map(|s| s.tracer.peak_rss_kib as f64 / 1024.0))
        .reduce(f64::max);
    targets.push(Target {
        name: "memory".into(),
        goal: "peak RSS ≤ 64 MiB",
        measured: peak_rss.map_or("no data".into(), |mib| format!("max {mib:.1} MiB")),
        met: peak_rss.map(|mib| mib <= 64.0),
    });

    let attach = ours
        .iter()
        .filter_map(|r| r.attach_ms_max)
        .chain(soak.map(|s| s.tracer.attach_s * 1000.0))
        .reduce(f64::max);
    targets.push(Target {
        name: "attach".into(),
        goal: "probes attached within 1 s of start",
        measured: attach.map_or("no data".into(), |ms| format!("max {ms:.0} ms")),
        met: attach.map(|ms| ms <= 1000.0),
    });
    targets
}

/// "ratio of medians (median of paired ratios)".
fn ratios(row: &Row) -> String {
    match (row.iops_ratio, row.iops_ratio_paired) {
        (Some(ratio), Some(paired)) if row.config != Config::Baseline => {
            format!("{ratio:.3} ({paired:.3})")
        }
        (Some(ratio), _) => format!("{ratio:.3}"),
        _ => "–".to_string(),
    }
}

fn cell(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "–".to_string(), format)
}

pub fn markdown(rows: &[Row], targets: &[Target], soak: Option<&SoakRecord>) -> String {
    let mut text = String::new();
    text.push_str(
        "| device | workload | configuration | IOPS median (min–max) | × baseline (paired) | × floor (paired) \
         | events/s | drops | consumer µs/ev | BPF µs/ev | fio CPU Δ ns/IO | machine CPU Δ ns/IO | peak RSS MiB | attach ms (max) |\n",
    );
    text.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for row in rows {
        text.push_str(&format!(
            "| {} | {} | {} | {:.0}k ({:.0}–{:.0}k) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.device.title(),
            row.workload.key(),
            row.config.title(),
            row.iops_median / 1e3,
            row.iops_min / 1e3,
            row.iops_max / 1e3,
            ratios(row),
            cell(row.floor_ratio_paired, |f| format!("{f:.3}")),
            cell(row.events_per_s, |e| format!("{:.0}k", e / 1e3)),
            row.drops.map_or("–".to_string(), |d| d.to_string()),
            cell(row.consumer_us_per_event, |c| format!("{c:.3}")),
            cell(row.bpf_us_per_event, |c| format!("{c:.3}")),
            cell(row.fio_cpu_delta_ns_per_io, |c| format!("{c:+.0}")),
            cell(row.machine_cpu_delta_ns_per_io, |c| format!("{c:+.0}")),
            cell(row.peak_rss_mib, |m| format!("{m:.1}")),
            cell(row.attach_ms_max, |a| format!("{a:.0}")),
        ));
    }
    if let Some(soak) = soak {
        let t = &soak.tracer;
        text.push_str(&format!(
            "\nSoak: iosplit-trace for {} s on {} {}: {:.0}k events/s, {} dropped, \
             consumer {:.3} µs/event, peak RSS {:.1} MiB, IOPS {:.0}k{}.\n",
            soak.seconds,
            soak.device.title(),
            soak.workload.key(),
            t.events as f64 / soak.fio.runtime_s.max(1e-9) / 1e3,
            t.dropped,
            t.consumer_cpu_s * 1e6 / t.events.max(1) as f64,
            t.peak_rss_kib as f64 / 1024.0,
            soak.fio.iops / 1e3,
            t.correlation
                .as_ref()
                .map_or(String::new(), |c| format!("; correlation {c}")),
        ));
    }
    text.push_str("\n| target | goal | measured | met |\n|---|---|---|---|\n");
    for target in targets {
        let met = match target.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "unknown",
        };
        text.push_str(&format!(
            "| {} | {} | {} | {met} |\n",
            target.name, target.goal, target.measured
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::system::BpfRunStats;

    fn record(config: Config, round: u32, iops: f64, tracer: Option<TracerOutcome>) -> RunRecord {
        RunRecord {
            device: DeviceKind::Loop,
            workload: Workload::RandWrite,
            config,
            round,
            fio: FioResult {
                iops,
                total_ios: (iops * 4.0) as u64,
                runtime_s: 4.0,
                cpu_s: 1.0,
            },
            machine_busy_s: 6.0,
            load_1m: 1.0,
            tracer,
        }
    }

    fn outcome(events: u64, dropped: u64, consumer_cpu_s: f64, bpf_ns: u64) -> TracerOutcome {
        TracerOutcome {
            attach_s: 0.05,
            consumer_cpu_s,
            events,
            dropped,
            peak_rss_kib: 40 * 1024,
            bpf: BpfRunStats {
                programs: 10,
                run_time_ns: bpf_ns,
                run_cnt: events,
            },
            ..TracerOutcome::default()
        }
    }

    #[test]
    fn median_ignores_nan_and_averages_the_middle_pair() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn ratios_are_against_the_baseline_median_of_the_same_workload() {
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(Config::Baseline, 1, 200_000.0, None),
            record(Config::Baseline, 2, 150_000.0, None),
            record(
                Config::IosplitTrace,
                0,
                120_000.0,
                Some(outcome(1_000_000, 0, 0.1, 0)),
            ),
            record(
                Config::IosplitTrace,
                1,
                150_000.0,
                Some(outcome(1_000_000, 2, 0.3, 0)),
            ),
            record(
                Config::IosplitTrace,
                2,
                180_000.0,
                Some(outcome(1_000_000, 0, 0.2, 0)),
            ),
        ];
        let rows = rows(&records);
        assert_eq!(rows.len(), 2);
        let ours = &rows[1];
        assert_eq!(ours.config, Config::IosplitTrace);
        assert_eq!(ours.iops_ratio, Some(1.0));
        assert_eq!(ours.drops, Some(2));
        let consumer = ours.consumer_us_per_event.unwrap();
        assert!((consumer - 0.2).abs() < 1e-9, "{consumer}");
        assert_eq!(rows[0].drops, None);
        assert_eq!(rows[0].iops_ratio, Some(1.0));
    }

    #[test]
    fn paired_ratios_compare_each_round_with_its_own_baseline() {
        let traced = || Some(outcome(1_000, 0, 0.0, 0));
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(Config::IosplitTrace, 0, 90_000.0, traced()),
            record(Config::Baseline, 1, 200_000.0, None),
            record(Config::IosplitTrace, 1, 210_000.0, traced()),
            record(Config::Baseline, 2, 300_000.0, None),
            record(Config::IosplitTrace, 2, 240_000.0, traced()),
        ];
        let rows = rows(&records);
        let ours = &rows[1];
        // Medians 210k / 200k, but round by round 0.9, 1.05, 0.8.
        assert!((ours.iops_ratio.unwrap() - 1.05).abs() < 1e-9);
        assert!((ours.iops_ratio_paired.unwrap() - 0.9).abs() < 1e-9);
    }

    #[test]
    fn targets_flag_a_slow_lossy_tracer() {
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(
                Config::Floor,
                0,
                99_000.0,
                Some(outcome(4_000_000, 0, 0.0, 0)),
            ),
            // 0.9 × baseline, 5 drops, 0.8 µs consumer + 0.5 µs BPF per event.
            record(
                Config::IosplitTrace,
                0,
                90_000.0,
                Some(outcome(1_000_000, 5, 0.8, 500_000_000)),
            ),
            record(
                Config::BpftraceCount,
                0,
                95_000.0,
                Some(outcome(1_000_000, 0, 0.0, 0)),
            ),
        ];
        let targets = targets(&rows(&records), None);
        let met = |name: &str| {
            targets
                .iter()
                .find(|t| t.name.starts_with(name))
                .and_then(|t| t.met)
        };
        assert_eq!(met("vs count()"), Some(false));
        assert_eq!(met("vs floor"), Some(false));
        let floor = targets
            .iter()
            .find(|t| t.name.starts_with("vs floor"))
            .unwrap();
        assert!(floor.measured.contains("gap 0.090"), "{}", floor.measured);
        assert_eq!(met("drops"), Some(false));
        assert_eq!(met("cpu"), Some(false));
        assert_eq!(met("memory"), Some(true));
        assert_eq!(met("attach"), Some(true));
        let table = markdown(&rows(&records), &targets, None);
        assert!(table.contains("NOT met"));
        assert!(table.contains("| 0.900 (0.900) | 0.909 |"), "{table}");
    }

    #[test]
    fn a_fast_lossless_tracer_meets_every_target() {
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(
                Config::Floor,
                0,
                100_000.0,
                Some(outcome(4_000_000, 0, 0.0, 0)),
            ),
            record(
                Config::IosplitTrace,
                0,
                96_000.0,
                Some(outcome(1_000_000, 0, 0.1, 100_000_000)),
            ),
            record(
                Config::BpftraceCount,
                0,
                96_000.0,
                Some(outcome(1_000_000, 0, 0.0, 0)),
            ),
        ];
        let rows = rows(&records);
        assert_eq!(rows[1].config, Config::Floor);
        assert_eq!(rows[1].floor_ratio_paired, Some(1.0));
        assert_eq!(rows[0].floor_ratio_paired, None);
        let targets = targets(&rows, None);
        assert_eq!(targets.len(), 2 + 4);
        assert!(targets.iter().all(|t| t.met == Some(true)), "{targets:?}");
    }

    #[test]
    fn comparisons_without_a_peer_are_unknown_not_met() {
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(
                Config::IosplitTrace,
                0,
                99_000.0,
                Some(outcome(1_000_000, 0, 0.1, 0)),
            ),
        ];
        let targets = targets(&rows(&records), None);
        let comparisons: Vec<&Target> = targets
            .iter()
            .filter(|t| t.name.starts_with("vs "))
            .collect();
        assert_eq!(comparisons.len(), 2);
        assert!(
            comparisons.iter().all(|t| t.met.is_none()),
            "{comparisons:?}"
        );
    }
}
