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
    /// Where the run sat in its round: 0 opens it, `slots` runs make a round.
    /// The closing baseline after the last round is round `rounds`, slot 0.
    pub slot: u32,
    pub slots: u32,
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
    /// Median over rounds of IOPS / the baseline IOPS at the run's place in
    /// its round (see [`baseline_at`]).
    pub iops_ratio_paired: Option<f64>,
    /// Each round's paired ratio, by round.
    pub paired_by_round: Vec<(u32, f64)>,
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
    /// `report --record`: the recording's size, median over the rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_bytes_per_event: Option<f64>,
    /// `serve`: scrapes of /metrics that answered 200, and the others, over the rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrapes_ok: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrapes_failed: Option<u64>,
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
    // Each run against the baseline of its own round, which ran minutes
    // apart at most: robust to slow drift in the machine's load.
    let paired_with = |reference: &[&RunRecord]| {
        median_of(runs, |r| {
            let base = reference.iter().find(|b| b.round == r.round)?;
            ratio(r.fio.iops, base.fio.iops)
        })
    };
    let paired_by_round: Vec<(u32, f64)> = runs
        .iter()
        .filter_map(|r| Some((r.round, ratio(r.fio.iops, baseline_at(baseline, r)?)?)))
        .collect();
    let paired = median(&mut paired_by_round.iter().map(|(_, p)| *p).collect::<Vec<_>>());
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
        paired_by_round,
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
        recording_mib: median_of(runs, |r| {
            Some(r.tracer.as_ref()?.recording_bytes? as f64 / MIB)
        }),
        recording_bytes_per_event: median_of(runs, |r| {
            let t = r.tracer.as_ref()?;
            (t.events > 0).then(|| t.recording_bytes.map(|b| b as f64 / t.events as f64))?
        }),
        scrapes_ok: sum_of(&tracers, |t| Some(t.scrapes.as_ref()?.ok)),
        scrapes_failed: sum_of(&tracers, |t| Some(t.scrapes.as_ref()?.failed)),
    }
}

/// The baseline IOPS where `run` sat: interpolated between the baseline that
/// opened its round and the one that opened the next round (or closed the
/// last), so a configuration late in every round is not judged against a
/// machine that drifted since the baseline ran. Without a next baseline, the
/// round's own.
fn baseline_at(baseline: &[&RunRecord], run: &RunRecord) -> Option<f64> {
    let opening = baseline.iter().find(|b| b.round == run.round)?.fio.iops;
    let Some(next) = baseline.iter().find(|b| b.round == run.round + 1) else {
        return Some(opening);
    };
    let along = f64::from(run.slot) / f64::from(run.slots.max(1));
    Some(opening + (next.fio.iops - opening) * along)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Round by round, how often `row` was ahead of `peer` and the range of the
/// gaps: a median gap smaller than the rounds' spread is within the noise.
fn round_gaps(row: &Row, peer: &Row) -> String {
    let gaps: Vec<f64> = row
        .paired_by_round
        .iter()
        .filter_map(|(round, mine)| {
            let theirs = peer.paired_by_round.iter().find(|(r, _)| r == round)?.1;
            Some(mine - theirs)
        })
        .collect();
    if gaps.len() < 2 {
        return String::new();
    }
    let low = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    let high = gaps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "; ahead in {} of {} rounds, gaps {low:.3} to {high:.3}",
        gaps.iter().filter(|gap| **gap >= 0.0).count(),
        gaps.len()
    )
}

/// The sum over the runs that have the value, or None when none has it.
fn sum_of(tracers: &[&TracerOutcome], f: impl Fn(&TracerOutcome) -> Option<u64>) -> Option<u64> {
    tracers.iter().filter_map(|t| f(t)).reduce(|a, b| a + b)
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

/// The targets for iosplit-trace (full correlation), judged on the rows and
/// the soak; `planned` are the configurations the run tried, so one that
/// never produced a sample is a miss, not a silence.
pub fn targets(rows: &[Row], soak: Option<&SoakRecord>, planned: &[Config]) -> Vec<Target> {
    let ours: Vec<&Row> = rows
        .iter()
        .filter(|r| r.config == Config::IosplitTrace)
        .collect();
    let label = |r: &Row| format!("{} {}", r.device.title(), r.workload.key());
    let mut targets = Vec::new();

    // Per workload, from the same run: against bpftrace count(), bpftrace
    // biolatency and the floor, on paired ratios (each round against its
    // own baseline), which drift in the machine's other load disturbs least.
    for r in &ours {
        let peer = |config: Config| {
            rows.iter()
                .find(|p| p.config == config && p.device == r.device && p.workload == r.workload)
                .and_then(paired)
        };
        let mine = paired(r);
        let count = peer(Config::BpftraceCount);
        let floor = peer(Config::Floor);
        let row_of = |config: Config| {
            rows.iter()
                .find(|p| p.config == config && p.device == r.device && p.workload == r.workload)
        };
        // A miss says where the time went, per I/O, beside the peer's.
        let cause = |met: Option<bool>, config: Config, peer: &str| match (met, row_of(config)) {
            (Some(false), Some(other)) => cost_beside(r, other, peer),
            _ => String::new(),
        };
        let met = mine.zip(count).map(|(m, c)| m >= c);
        targets.push(Target {
            name: format!("vs count(): {}", label(r)),
            goal: "× baseline ≥ bpftrace count()'s",
            measured: format!(
                "{} vs {} (gap {}{}){}",
                three(mine),
                three(count),
                three(mine.zip(count).map(|(m, c)| m - c)),
                row_of(Config::BpftraceCount).map_or(String::new(), |c| round_gaps(r, c)),
                cause(met, Config::BpftraceCount, "count()"),
            ),
            met,
        });
        targets.push(versus_biolatency(r, row_of(Config::BpftraceBiolatency)));
        let met = mine.zip(floor).map(|(m, f)| f - m <= 0.05);
        targets.push(Target {
            name: format!("vs floor: {}", label(r)),
            goal: "× baseline within 0.05 of the floor's",
            measured: format!(
                "{} vs floor {} (gap {}; × floor {}){}",
                three(mine),
                three(floor),
                three(mine.zip(floor).map(|(m, f)| f - m)),
                three(r.floor_ratio_paired),
                cause(met, Config::Floor, "floor"),
            ),
            met,
        });
        if planned.contains(&Config::NoOwners) {
            let off = peer(Config::NoOwners);
            targets.push(Target {
                name: format!("owners: {}", label(r)),
                goal: "report (owners on, the default) × baseline within 0.02 of report --no-owners's",
                measured: format!(
                    "{} vs --no-owners {} (cost {})",
                    three(mine),
                    three(off),
                    three(off.zip(mine).map(|(o, m)| o - m))
                ),
                met: miss_if_absent(
                    row_of(Config::NoOwners),
                    off.zip(mine).map(|(o, m)| o - m <= 0.02),
                ),
            });
        }
        if planned.contains(&Config::Record) {
            let record = row_of(Config::Record);
            let recorded = record.and_then(paired);
            let record_met = mine.zip(recorded).map(|(m, c)| m - c <= 0.03);
            let record_cause = match (record_met, record) {
                (Some(false), Some(record)) => cost_beside(record, r, "report"),
                _ => String::new(),
            };
            targets.push(Target {
                name: format!("record: {}", label(r)),
                goal: "report --record × baseline within 0.03 of report's",
                measured: format!(
                    "{} vs report {} (cost {}); recording {} MiB, {} B/event{record_cause}",
                    three(recorded),
                    three(mine),
                    three(mine.zip(recorded).map(|(m, c)| m - c)),
                    record
                        .and_then(|x| x.recording_mib)
                        .map_or("–".into(), |m| format!("{m:.1}")),
                    record
                        .and_then(|x| x.recording_bytes_per_event)
                        .map_or("–".into(), |b| format!("{b:.2}")),
                ),
                met: miss_if_absent(record, record_met),
            });
        }
        if planned.contains(&Config::Serve) {
            let serve = row_of(Config::Serve);
            let served = serve.and_then(paired);
            targets.push(Target {
                name: format!("serve vs count(): {}", label(r)),
                goal: "serve (scraped 1/s) × baseline ≥ bpftrace count()'s",
                measured: match serve {
                    Some(serve) => format!(
                        "{} vs {} (gap {}{}); peak RSS {} MiB; scrapes {} ok, {} failed{}",
                        three(served),
                        three(count),
                        three(served.zip(count).map(|(s, c)| s - c)),
                        row_of(Config::BpftraceCount)
                            .map_or(String::new(), |c| round_gaps(serve, c)),
                        serve.peak_rss_mib.map_or("–".into(), |m| format!("{m:.1}")),
                        serve.scrapes_ok.unwrap_or(0),
                        serve.scrapes_failed.unwrap_or(0),
                        match (
                            served.zip(count).map(|(s, c)| s >= c),
                            row_of(Config::BpftraceCount)
                        ) {
                            (Some(false), Some(count_row)) =>
                                cost_beside(serve, count_row, "count()"),
                            _ => String::new(),
                        },
                    ),
                    None => "no serve sample (every run failed; see the notes)".into(),
                },
                met: miss_if_absent(serve, served.zip(count).map(|(s, c)| s >= c)),
            });
        }
    }

    // Every configuration that captures: report, --no-owners, record, serve.
    let drops: Option<u64> = rows
        .iter()
        .filter(|r| r.config.captures())
        .map(|r| r.drops)
        .chain(std::iter::once(soak.map(|s| s.tracer.dropped)))
        .flatten()
        .reduce(|a, b| a + b);
    targets.push(Target {
        name: "drops".into(),
        goal: "zero dropped events (all iosplit-trace runs that capture, and the soak)",
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

/// The ratio the comparisons judge: paired when the rounds allow it.
fn paired(r: &Row) -> Option<f64> {
    r.iops_ratio_paired.or(r.iops_ratio)
}

fn three(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.3}"))
}

/// iosplit-trace against bpftrace keeping biolatency's latency histogram
/// (`peer`, None when it has no sample), like the comparison with count().
/// On a device where the request tracepoints never fired (bio-based zram)
/// the peer timed nothing, so its ratio prices no latency: no verdict.
fn versus_biolatency(r: &Row, peer: Option<&Row>) -> Target {
    let (mine, theirs) = (paired(r), peer.and_then(paired));
    let timed = peer.is_some_and(|p| p.events_per_s.is_some_and(|e| e > 0.0));
    let met = mine.zip(theirs).filter(|_| timed).map(|(m, b)| m >= b);
    let why = match (met, peer) {
        (Some(false), Some(peer)) => cost_beside(r, peer, "biolatency"),
        (None, Some(_)) if !timed => "; biolatency timed no request here (block_rq_issue and \
             block_rq_complete fire only for request-based devices): no verdict"
            .to_string(),
        _ => String::new(),
    };
    Target {
        name: format!("vs biolatency: {} {}", r.device.title(), r.workload.key()),
        goal: "× baseline ≥ bpftrace biolatency's",
        measured: format!(
            "{} vs {} (gap {}{}){why}",
            three(mine),
            three(theirs),
            three(mine.zip(theirs).map(|(m, b)| m - b)),
            peer.map_or(String::new(), |p| round_gaps(r, p)),
        ),
        met,
    }
}

/// A tracer's cost per I/O: tracepoint hits it handled, BPF run time and
/// the consumer's CPU (which shares the machine's CPUs with the workload).
struct CostPerIo {
    events: f64,
    bpf_ns: f64,
    consumer_ns: f64,
}

impl CostPerIo {
    fn of(row: &Row) -> Option<CostPerIo> {
        let events = row.events_per_s? / row.iops_median;
        events.is_finite().then(|| CostPerIo {
            events,
            bpf_ns: row.bpf_us_per_event.unwrap_or(0.0) * events * 1e3,
            consumer_ns: row.consumer_us_per_event.unwrap_or(0.0) * events * 1e3,
        })
    }
}

/// "; per I/O: BPF 1389 ns vs floor 0 (2.8 vs 10.1 events), consumer 2222
/// ns vs 0": the miss's cause in numbers, from the same run.
fn cost_beside(row: &Row, peer: &Row, peer_name: &str) -> String {
    match (CostPerIo::of(row), CostPerIo::of(peer)) {
        (Some(mine), Some(theirs)) => format!(
            "; per I/O: BPF {:.0} ns vs {peer_name} {:.0} ({:.1} vs {:.1} events), \
             consumer {:.0} ns vs {:.0}",
            mine.bpf_ns,
            theirs.bpf_ns,
            mine.events,
            theirs.events,
            mine.consumer_ns,
            theirs.consumer_ns,
        ),
        _ => String::new(),
    }
}

/// A planned configuration with no row failed every run: that is a miss.
fn miss_if_absent(row: Option<&Row>, met: Option<bool>) -> Option<bool> {
    match row {
        Some(_) => met,
        None => Some(false),
    }
}

/// `serve` under one steady workload for minutes, scraped every second.
#[derive(Clone, Debug, Serialize)]
pub struct ServeSoakRecord {
    pub device: DeviceKind,
    pub workload: Workload,
    pub seconds: u32,
    pub fio: FioResult,
    pub tracer: TracerOutcome,
    /// The "minute" compared at each end: 60 s, or half the soak if shorter.
    pub window_s: f64,
    /// Largest VmRSS sampled in the first and in the last window, KiB.
    pub first_rss_kib: Option<u64>,
    pub last_rss_kib: Option<u64>,
}

/// How much RSS may move between the first and the last minute.
const RSS_FLAT: f64 = 0.10;

impl ServeSoakRecord {
    pub fn new(
        device: DeviceKind,
        workload: Workload,
        seconds: u32,
        fio: FioResult,
        tracer: TracerOutcome,
    ) -> Self {
        let samples = tracer.scrapes.as_ref().map_or(&[][..], |s| &s.rss_kib[..]);
        let (window_s, first, last) = rss_windows(samples, f64::from(seconds));
        Self {
            device,
            workload,
            seconds,
            fio,
            window_s,
            first_rss_kib: first,
            last_rss_kib: last,
            tracer,
        }
    }

    /// Last window's RSS over the first's, minus one.
    pub fn rss_growth(&self) -> Option<f64> {
        let (first, last) = (self.first_rss_kib?, self.last_rss_kib?);
        (first > 0).then(|| last as f64 / first as f64 - 1.0)
    }

    pub fn targets(&self) -> Vec<Target> {
        let mib =
            |kib: Option<u64>| kib.map_or("–".into(), |k| format!("{:.1}", k as f64 / 1024.0));
        let scrapes = self.tracer.scrapes.as_ref();
        vec![
            Target {
                name: format!("serve soak memory ({} s)", self.seconds),
                goal: "RSS flat within 10%: the last minute's peak VmRSS against the first's",
                measured: format!(
                    "first {:.0} s {} MiB, last {:.0} s {} MiB ({}; {} samples)",
                    self.window_s,
                    mib(self.first_rss_kib),
                    self.window_s,
                    mib(self.last_rss_kib),
                    self.rss_growth()
                        .map_or("–".into(), |g| format!("{:+.1}%", g * 100.0)),
                    scrapes.map_or(0, |s| s.rss_kib.len()),
                ),
                met: self.rss_growth().map(|g| g.abs() <= RSS_FLAT),
            },
            Target {
                name: format!("serve soak drops ({} s)", self.seconds),
                goal: "zero dropped events, every scrape answered",
                measured: format!(
                    "{} dropped; scrapes {} ok, {} failed",
                    self.tracer.dropped,
                    scrapes.map_or(0, |s| s.ok),
                    scrapes.map_or(0, |s| s.failed)
                ),
                met: Some(self.tracer.dropped == 0 && scrapes.is_some_and(|s| s.failed == 0)),
            },
        ]
    }
}

/// The window compared at each end (60 s, or half a shorter soak) and the
/// largest sample in the first and in the last window. Samples land a little
/// after each 10 s mark, so the window edges get a second's slack.
fn rss_windows(samples: &[(f64, u64)], seconds: f64) -> (f64, Option<u64>, Option<u64>) {
    const SLACK_S: f64 = 1.0;
    let window = (seconds / 2.0).min(60.0);
    let largest = |keep: &dyn Fn(f64) -> bool| {
        samples
            .iter()
            .filter(|(at, _)| keep(*at))
            .map(|&(_, kib)| kib)
            .max()
    };
    (
        window,
        largest(&|at| at <= window + SLACK_S),
        largest(&|at| at >= seconds - window - SLACK_S),
    )
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

pub fn markdown(
    rows: &[Row],
    targets: &[Target],
    soak: Option<&SoakRecord>,
    serve_soak: Option<&ServeSoakRecord>,
) -> String {
    let mut text = String::new();
    let label = |row: &Row| format!("{} {}", row.device.title(), row.workload.key());
    let mut shown = vec![false; targets.len()];
    let mut start = 0;
    // One table per workload (rows are configurations), its verdicts under it.
    while start < rows.len() {
        let workload = label(&rows[start]);
        let end = start
            + rows[start..]
                .iter()
                .take_while(|row| label(row) == workload)
                .count();
        text.push_str(&format!(
            "{}### {workload}\n\n| configuration | IOPS median (min–max) | × baseline (paired) | × floor (paired) \
             | consumer µs/ev | BPF µs/ev | drops | events/s | fio CPU Δ ns/IO | machine CPU Δ ns/IO | peak RSS MiB | attach ms (max) |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n",
            if start == 0 { "" } else { "\n" }
        ));
        for row in &rows[start..end] {
            text.push_str(&format!(
                "| {} | {:.0}k ({:.0}–{:.0}k) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.config.title(),
                row.iops_median / 1e3,
                row.iops_min / 1e3,
                row.iops_max / 1e3,
                ratios(row),
                cell(row.floor_ratio_paired, |f| format!("{f:.3}")),
                cell(row.consumer_us_per_event, |c| format!("{c:.3}")),
                cell(row.bpf_us_per_event, |c| format!("{c:.3}")),
                row.drops.map_or("–".to_string(), |d| d.to_string()),
                cell(row.events_per_s, |e| format!("{:.0}k", e / 1e3)),
                cell(row.fio_cpu_delta_ns_per_io, |c| format!("{c:+.0}")),
                cell(row.machine_cpu_delta_ns_per_io, |c| format!("{c:+.0}")),
                cell(row.peak_rss_mib, |m| format!("{m:.1}")),
                cell(row.attach_ms_max, |a| format!("{a:.0}")),
            ));
        }
        let suffix = format!(": {workload}");
        let mine: Vec<usize> = (0..targets.len())
            .filter(|&i| targets[i].name.ends_with(&suffix))
            .collect();
        if !mine.is_empty() {
            text.push_str("\n| met | target | goal | measured |\n|---|---|---|---|\n");
            for i in mine {
                shown[i] = true;
                target_row(&mut text, &targets[i], Some(&suffix));
            }
        }
        start = end;
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
    if let Some(soak) = serve_soak {
        let t = &soak.tracer;
        let scrapes = t.scrapes.as_ref();
        text.push_str(&format!(
            "\nServe soak: iosplit-trace serve for {} s on {} {}, scraped every second \
             ({} ok, {} failed): {:.0}k events/s, {} dropped, consumer {:.3} µs/event, \
             VmRSS {}, peak RSS {:.1} MiB, IOPS {:.0}k.\n",
            soak.seconds,
            soak.device.title(),
            soak.workload.key(),
            scrapes.map_or(0, |s| s.ok),
            scrapes.map_or(0, |s| s.failed),
            t.events as f64 / soak.fio.runtime_s.max(1e-9) / 1e3,
            t.dropped,
            t.consumer_cpu_s * 1e6 / t.events.max(1) as f64,
            scrapes.map_or("–".into(), |s| {
                // A long soak: one sample a minute is enough to read.
                let step = if s.rss_kib.len() > 13 { 6 } else { 1 };
                let mib: Vec<String> = s
                    .rss_kib
                    .iter()
                    .step_by(step)
                    .map(|(_, kib)| format!("{:.1}", *kib as f64 / 1024.0))
                    .collect();
                let every = if step == 1 { "10 s" } else { "minute" };
                format!("[{}] MiB (every {every})", mib.join(", "))
            }),
            t.peak_rss_kib as f64 / 1024.0,
            soak.fio.iops / 1e3,
        ));
    }
    if shown.iter().any(|shown| !shown) {
        text.push_str(
            "\n### Every workload\n\n| met | target | goal | measured |\n|---|---|---|---|\n",
        );
        for (target, _) in targets.iter().zip(&shown).filter(|(_, shown)| !**shown) {
            target_row(&mut text, target, None);
        }
    }
    text
}

/// One verdict, first so it reads at a glance; `suffix` (the workload the
/// table above names) is left out of its name.
fn target_row(text: &mut String, target: &Target, suffix: Option<&str>) {
    let met = match target.met {
        Some(true) => "met",
        Some(false) => "**NOT met**",
        None => "unknown",
    };
    let name = suffix
        .and_then(|suffix| target.name.strip_suffix(suffix))
        .unwrap_or(&target.name);
    text.push_str(&format!(
        "| {met} | {name} | {} | {} |\n",
        target.goal, target.measured
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scrape::ScrapeLog;
    use crate::bench::system::BpfRunStats;

    /// The configurations before --no-owners, record and serve.
    const FOUR: [Config; 4] = [
        Config::Baseline,
        Config::Floor,
        Config::IosplitTrace,
        Config::BpftraceCount,
    ];

    fn record(config: Config, round: u32, iops: f64, tracer: Option<TracerOutcome>) -> RunRecord {
        RunRecord {
            device: DeviceKind::Loop,
            workload: Workload::RandWrite,
            config,
            round,
            slot: Config::ALL.iter().position(|c| *c == config).unwrap_or(0) as u32,
            slots: Config::ALL.len() as u32,
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

    /// `run` at `slot` of `slots` in its round.
    fn at(run: RunRecord, slot: u32, slots: u32) -> RunRecord {
        RunRecord { slot, slots, ..run }
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
        // Each run opens its round with the baseline: the round's own.
        let records = vec![
            at(record(Config::Baseline, 0, 100_000.0, None), 0, 1),
            at(record(Config::IosplitTrace, 0, 90_000.0, traced()), 0, 1),
            at(record(Config::Baseline, 1, 200_000.0, None), 0, 1),
            at(record(Config::IosplitTrace, 1, 210_000.0, traced()), 0, 1),
            at(record(Config::Baseline, 2, 300_000.0, None), 0, 1),
            at(record(Config::IosplitTrace, 2, 240_000.0, traced()), 0, 1),
        ];
        let rows = rows(&records);
        let ours = &rows[1];
        // Medians 210k / 200k, but round by round 0.9, 1.05, 0.8.
        assert!((ours.iops_ratio.unwrap() - 1.05).abs() < 1e-9);
        assert!((ours.iops_ratio_paired.unwrap() - 0.9).abs() < 1e-9);
    }

    #[test]
    fn a_run_late_in_its_round_is_paired_with_the_baseline_where_it_ran() {
        let traced = || Some(outcome(1_000, 0, 0.0, 0));
        // The machine speeds up from 100k to 200k IOPS over round 0; a run
        // half-way through it meets a baseline of 150k there.
        let records = vec![
            at(record(Config::Baseline, 0, 100_000.0, None), 0, 4),
            at(record(Config::IosplitTrace, 0, 135_000.0, traced()), 2, 4),
            at(record(Config::Baseline, 1, 200_000.0, None), 0, 4),
            at(record(Config::IosplitTrace, 1, 190_000.0, traced()), 2, 4),
            at(record(Config::Baseline, 2, 200_000.0, None), 0, 4),
        ];
        let rows = rows(&records);
        assert_eq!(rows[0].runs, 3, "the closing baseline is a baseline sample");
        let paired = rows[1].iops_ratio_paired.unwrap();
        assert!((paired - (0.9 + 0.95) / 2.0).abs() < 1e-9, "{paired}");
    }

    #[test]
    fn a_comparison_says_how_often_each_round_was_ahead() {
        let traced = || Some(outcome(1_000, 0, 0.0, 0));
        let mut records = Vec::new();
        for (round, ours, count) in [
            (0, 80_000.0, 70_000.0),
            (1, 60_000.0, 75_000.0),
            (2, 72_000.0, 70_000.0),
        ] {
            records.push(at(record(Config::Baseline, round, 100_000.0, None), 0, 3));
            records.push(at(
                record(Config::IosplitTrace, round, ours, traced()),
                1,
                3,
            ));
            records.push(at(
                record(Config::BpftraceCount, round, count, traced()),
                2,
                3,
            ));
        }
        let rows = rows(&records);
        let ours = rows
            .iter()
            .find(|r| r.config == Config::IosplitTrace)
            .unwrap();
        let count = rows
            .iter()
            .find(|r| r.config == Config::BpftraceCount)
            .unwrap();
        assert_eq!(
            round_gaps(ours, count),
            "; ahead in 2 of 3 rounds, gaps -0.150 to 0.100"
        );
        let targets = targets(&rows, None, &[Config::IosplitTrace, Config::BpftraceCount]);
        let versus = &targets_named(&targets, "vs count()")[0];
        assert_eq!(versus.met, Some(true), "median 0.72 against 0.70");
        assert!(
            versus.measured.contains("ahead in 2 of 3 rounds"),
            "{}",
            versus.measured
        );
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
        let targets = targets(&rows(&records), None, &FOUR);
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
        // 250k events/s at 90k IOPS: 2.8 events, 0.5 µs BPF and 0.8 µs
        // consumer each, per I/O; the floor's 10.1 hits ran for 0 ns.
        assert!(
            floor.measured.contains(
                "per I/O: BPF 1389 ns vs floor 0 (2.8 vs 10.1 events), consumer 2222 ns vs 0"
            ),
            "{}",
            floor.measured
        );
        assert_eq!(met("drops"), Some(false));
        assert_eq!(met("cpu"), Some(false));
        assert_eq!(met("memory"), Some(true));
        assert_eq!(met("attach"), Some(true));
        let table = markdown(&rows(&records), &targets, None, None);
        assert!(table.contains("NOT met"));
        assert!(table.contains("| 0.900 (0.900) | 0.909 |"), "{table}");
        // One table per workload, its own verdicts under it, the rest after.
        let workload = table
            .find("### loop (blk-mq) randwrite-4k-qd32")
            .expect("a table for the workload");
        let verdict = table
            .find("| **NOT met** | vs floor |")
            .expect("the floor's verdict, named without the workload");
        let every = table.find("### Every workload").expect("the other targets");
        assert!(workload < verdict && verdict < every, "{table}");
        assert!(table[every..].contains("| drops |"), "{table}");
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
            record(
                Config::BpftraceBiolatency,
                0,
                93_000.0,
                Some(outcome(500_000, 0, 0.0, 0)),
            ),
        ];
        let rows = rows(&records);
        assert_eq!(rows[1].config, Config::Floor);
        assert_eq!(rows[1].floor_ratio_paired, Some(1.0));
        assert_eq!(rows[0].floor_ratio_paired, None);
        let targets = targets(&rows, None, &FOUR);
        assert_eq!(targets.len(), 3 + 4);
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
        let targets = targets(&rows(&records), None, &FOUR);
        let comparisons: Vec<&Target> = targets
            .iter()
            .filter(|t| t.name.starts_with("vs "))
            .collect();
        assert_eq!(comparisons.len(), 3);
        assert!(
            comparisons.iter().all(|t| t.met.is_none()),
            "{comparisons:?}"
        );
    }

    /// Three rounds of baseline, report, count() and biolatency on `device`
    /// (IOPS per round; biolatency's events per run).
    fn versus_peers(
        device: DeviceKind,
        ours: [f64; 3],
        count: [f64; 3],
        biolatency: [f64; 3],
        biolatency_events: u64,
    ) -> Vec<RunRecord> {
        let mut records = Vec::new();
        for round in 0..3 {
            let i = round as usize;
            // 4 events per I/O for report and count(), 2 for biolatency;
            // BPF 250 ns per event for report, 400 for biolatency.
            let events = |iops: f64, per_io: f64| (iops * 4.0 * per_io) as u64;
            let runs = [
                (Config::Baseline, 100_000.0, None),
                (
                    Config::IosplitTrace,
                    ours[i],
                    Some(outcome(events(ours[i], 4.0), 0, 0.4, events(ours[i], 1e3))),
                ),
                (
                    Config::BpftraceCount,
                    count[i],
                    Some(outcome(events(count[i], 4.0), 0, 0.0, 0)),
                ),
                (
                    Config::BpftraceBiolatency,
                    biolatency[i],
                    Some(outcome(biolatency_events, 0, 0.0, biolatency_events * 400)),
                ),
            ];
            for (slot, (config, iops, tracer)) in runs.into_iter().enumerate() {
                records.push(RunRecord {
                    device,
                    ..at(record(config, round, iops, tracer), slot as u32, 4)
                });
            }
        }
        records
    }

    #[test]
    fn biolatency_is_judged_like_count_from_the_same_run() {
        // Loop: report 0.80, 0.70, 0.75 × baseline; count() 0.70 flat;
        // biolatency 0.78, 0.74, 0.76: medians 0.75 against 0.76, a miss.
        let records = versus_peers(
            DeviceKind::Loop,
            [80_000.0, 70_000.0, 75_000.0],
            [70_000.0; 3],
            [78_000.0, 74_000.0, 76_000.0],
            2 * 4 * 76_000,
        );
        let rows = rows(&records);
        let biolatency = rows
            .iter()
            .find(|r| r.config == Config::BpftraceBiolatency)
            .unwrap();
        assert_eq!(biolatency.runs, 3);
        // Its BPF run time is read like any peer's: 400 ns per event.
        let bpf = biolatency.bpf_us_per_event.unwrap();
        assert!((bpf - 0.4).abs() < 1e-9, "{bpf}");
        let targets = targets(&rows, None, &Config::ALL);
        let count = &targets_named(&targets, "vs count():")[0];
        assert_eq!(count.met, Some(true));
        let versus = targets_named(&targets, "vs biolatency:");
        assert_eq!(versus.len(), 1, "{targets:?}");
        let versus = versus[0];
        assert_eq!(
            versus.name,
            "vs biolatency: loop (blk-mq) randwrite-4k-qd32"
        );
        assert_eq!(versus.goal, "× baseline ≥ bpftrace biolatency's");
        assert_eq!(versus.met, Some(false));
        // Paired: 0.80 − 0.78, 0.70 − 0.74, 0.75 − 0.76 round by round.
        assert!(
            versus.measured.starts_with(
                "0.750 vs 0.760 (gap -0.010; ahead in 1 of 3 rounds, gaps -0.040 to 0.020)"
            ),
            "{}",
            versus.measured
        );
        // A miss says where the time went, per I/O, beside the peer's.
        assert!(
            versus
                .measured
                .contains("per I/O: BPF 1000 ns vs biolatency 800 (4.0 vs 2.0 events)"),
            "{}",
            versus.measured
        );
        // Listed under its workload's table, after count().
        let table = markdown(&rows, &targets, None, None);
        let count_line = table
            .find("| met | vs count() | × baseline ≥ bpftrace count()'s |")
            .expect(&table);
        let line = table
            .find("| **NOT met** | vs biolatency | × baseline ≥ bpftrace biolatency's | 0.750 vs 0.760")
            .expect(&table);
        assert!(count_line < line, "{table}");
        assert!(
            table.contains("| bpftrace biolatency | 76k (74–78k) |"),
            "{table}"
        );

        // Ahead of it in the median: met.
        let records = versus_peers(
            DeviceKind::Loop,
            [80_000.0, 70_000.0, 75_000.0],
            [70_000.0; 3],
            [72_000.0, 73_000.0, 71_000.0],
            2 * 4 * 72_000,
        );
        let targets = super::targets(&super::rows(&records), None, &Config::ALL);
        let versus = &targets_named(&targets, "vs biolatency:")[0];
        assert_eq!(versus.met, Some(true), "{}", versus.measured);
        assert!(versus.measured.starts_with("0.750 vs 0.720 (gap 0.030;"));
        assert!(!versus.measured.contains("per I/O"), "{}", versus.measured);
    }

    #[test]
    fn biolatency_on_a_bio_based_device_gives_no_verdict() {
        // zram: block_rq_* never fire, so biolatency timed nothing and its
        // ratio is the tracepoints' attachment alone.
        let records = versus_peers(
            DeviceKind::Zram,
            [80_000.0; 3],
            [75_000.0; 3],
            [99_000.0; 3],
            0,
        );
        let rows = rows(&records);
        let targets = targets(&rows, None, &Config::ALL);
        let versus = targets_named(&targets, "vs biolatency:");
        assert_eq!(versus.len(), 1);
        assert_eq!(
            versus[0].name,
            "vs biolatency: zram (bio) randwrite-4k-qd32"
        );
        assert_eq!(versus[0].met, None);
        assert!(
            versus[0]
                .measured
                .starts_with("0.800 vs 0.990 (gap -0.190;"),
            "{}",
            versus[0].measured
        );
        assert!(
            versus[0]
                .measured
                .contains("biolatency timed no request here"),
            "{}",
            versus[0].measured
        );
        assert_eq!(targets_named(&targets, "vs count():")[0].met, Some(true));
    }

    fn targets_named<'a>(targets: &'a [Target], prefix: &str) -> Vec<&'a Target> {
        targets
            .iter()
            .filter(|t| t.name.starts_with(prefix))
            .collect()
    }

    #[test]
    fn owners_record_and_serve_are_judged_against_the_same_run() {
        let recorded = TracerOutcome {
            recording_bytes: Some(6 * 1024 * 1024),
            ..outcome(1_000_000, 0, 0.1, 0)
        };
        let served = TracerOutcome {
            scrapes: Some(ScrapeLog {
                ok: 4,
                failed: 1,
                ..ScrapeLog::default()
            }),
            ..outcome(1_000_000, 2, 0.1, 0)
        };
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(
                Config::IosplitTrace,
                0,
                80_000.0,
                Some(outcome(1_000_000, 0, 0.1, 0)),
            ),
            // Owners cost 0.015 (met); recording 0.05 (not met); serve 0.79 ≥ count's 0.78.
            record(
                Config::NoOwners,
                0,
                81_500.0,
                Some(outcome(1_000_000, 0, 0.1, 0)),
            ),
            record(Config::Record, 0, 75_000.0, Some(recorded)),
            record(Config::Serve, 0, 79_000.0, Some(served)),
            record(
                Config::BpftraceCount,
                0,
                78_000.0,
                Some(outcome(1_000_000, 0, 0.0, 0)),
            ),
        ];
        let rows = rows(&records);
        let record_row = rows.iter().find(|r| r.config == Config::Record).unwrap();
        assert_eq!(record_row.recording_mib, Some(6.0));
        let per_event = record_row.recording_bytes_per_event.unwrap();
        assert!((per_event - 6.291456).abs() < 1e-6, "{per_event}");
        let serve_row = rows.iter().find(|r| r.config == Config::Serve).unwrap();
        assert_eq!(
            (serve_row.scrapes_ok, serve_row.scrapes_failed),
            (Some(4), Some(1))
        );
        assert_eq!(rows[1].scrapes_ok, None);

        let targets = targets(&rows, None, &Config::ALL);
        let one = |prefix: &str| {
            let found = targets_named(&targets, prefix);
            assert_eq!(found.len(), 1, "{prefix}: {targets:?}");
            found[0].clone()
        };
        let owners = one("owners:");
        assert_eq!(owners.met, Some(true));
        assert!(
            owners.measured.contains("cost 0.015"),
            "{}",
            owners.measured
        );
        let record = one("record:");
        assert_eq!(record.met, Some(false));
        assert!(
            record.measured.contains("cost 0.050")
                && record.measured.contains("6.0 MiB, 6.29 B/event"),
            "{}",
            record.measured
        );
        let serve = one("serve vs count():");
        assert_eq!(serve.met, Some(true));
        assert!(
            serve.measured.contains("scrapes 4 ok, 1 failed"),
            "{}",
            serve.measured
        );
        // serve's drops count like report's.
        assert_eq!(one("drops").met, Some(false));
        assert!(one("drops").measured.starts_with("2 dropped"));
    }

    #[test]
    fn a_planned_configuration_without_a_sample_is_a_miss() {
        let records = vec![
            record(Config::Baseline, 0, 100_000.0, None),
            record(
                Config::IosplitTrace,
                0,
                90_000.0,
                Some(outcome(1_000, 0, 0.1, 0)),
            ),
            record(
                Config::BpftraceCount,
                0,
                80_000.0,
                Some(outcome(1_000, 0, 0.0, 0)),
            ),
        ];
        let rows = rows(&records);
        let targets = targets(&rows, None, &[Config::Serve, Config::BpftraceCount]);
        let serve = targets_named(&targets, "serve vs count()");
        assert_eq!(serve.len(), 1);
        assert_eq!(serve[0].met, Some(false));
        assert!(serve[0].measured.contains("no serve sample"));
        // Not planned: no line at all.
        assert!(targets_named(&targets, "owners:").is_empty());
        assert!(targets_named(&targets, "record:").is_empty());
    }

    fn soak_with(rss_kib: Vec<(f64, u64)>, seconds: u32, failed: u64) -> ServeSoakRecord {
        let tracer = TracerOutcome {
            scrapes: Some(ScrapeLog {
                ok: u64::from(seconds),
                failed,
                rss_kib,
                ..ScrapeLog::default()
            }),
            ..outcome(1_000_000, 0, 0.1, 0)
        };
        let fio = record(Config::Serve, 0, 1.0, None).fio;
        ServeSoakRecord::new(
            DeviceKind::Loop,
            Workload::Buffered512,
            seconds,
            fio,
            tracer,
        )
    }

    #[test]
    fn serve_soak_compares_the_first_and_last_minute_peaks() {
        // 600 s: 40 MiB rising to 42 MiB in the first minute, 44 MiB at the end: +4.8%.
        let samples: Vec<(f64, u64)> = (0..=60)
            .map(|i| {
                let at = f64::from(i) * 10.0;
                let mib = if at <= 60.0 { 40 + (i / 3) as u64 } else { 44 };
                (at, mib * 1024)
            })
            .collect();
        let soak = soak_with(samples, 600, 0);
        assert_eq!(soak.window_s, 60.0);
        assert_eq!(soak.first_rss_kib, Some(42 * 1024));
        assert_eq!(soak.last_rss_kib, Some(44 * 1024));
        let targets = soak.targets();
        assert_eq!(targets[0].met, Some(true), "{targets:?}");
        assert!(
            targets[0].measured.contains("+4.8%"),
            "{}",
            targets[0].measured
        );
        assert_eq!(targets[1].met, Some(true));

        // Growing by 20% and a failed scrape: both missed.
        // Sampled just after each mark, as the scraper does.
        let leaking = soak_with(
            vec![(0.0, 900), (10.02, 1000), (20.03, 1100), (30.01, 1200)],
            30,
            1,
        );
        assert_eq!(leaking.window_s, 15.0);
        assert_eq!(
            (leaking.first_rss_kib, leaking.last_rss_kib),
            (Some(1000), Some(1200))
        );
        let targets = leaking.targets();
        assert_eq!(targets[0].met, Some(false));
        assert_eq!(targets[1].met, Some(false));

        // No samples: unknown, not met.
        assert_eq!(soak_with(Vec::new(), 600, 0).targets()[0].met, None);
        let table = markdown(&[], &[], None, Some(&soak));
        assert!(
            table.contains("Serve soak: iosplit-trace serve for 600 s"),
            "{table}"
        );
    }
}
