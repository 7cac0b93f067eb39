//! `cargo xtask bench`: iosplit-trace's overhead against a baseline from the
//! same run, against the floor (the same BTF tracepoints with programs that
//! return at once, `IOSPLIT_PROBES=noop`: what any tracepoint-based tracer
//! pays on this host) and against bpftrace (counting the same tracepoints,
//! and keeping biolatency's per-request latency histogram), on a blk-mq loop
//! disk and on bio-based zram. The targets compare within the run, per workload, since
//! per-event costs differ severalfold between hosts. iosplit-trace also runs
//! with `--owners` (attribution's cost), with `--record`, and as `serve`
//! scraped every second; `--serve-soak` watches serve's RSS for longer.
//!
//! Configurations run in turn (A B C D, A B C D, …) so that drift and other
//! load on the machine hit them alike; the table reports medians over the
//! rounds. Everything the run changes (loop devices, partitions, zram,
//! max_sectors_kb, kernel.bpf_stats_enabled, tracers it started, /dev/shm
//! files) sits behind a guard and is put back on exit, on error, on panic and
//! on Ctrl-C.
//!
//! Where the cost is measured:
//! - consumer: the tracer process's utime + stime from attach to exit (wait4);
//! - BPF programs: `run_time_ns` of the programs the tracer holds open, from
//!   /proc/PID/fdinfo with `kernel.bpf_stats_enabled=1`. This is the programs'
//!   own time, not the tracepoint's record assembly around them;
//! - the rest of the in-kernel cost shows as fio's and the machine's CPU per
//!   I/O above the baseline's (noisy when other work shares the machine, so
//!   the load average is recorded with every run).

mod devices;
mod peers;
mod scrape;
mod summary;
mod system;
mod workload;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde::Serialize;

use crate::util::{is_root, on_path, output, workspace_root, Result};
use devices::{DeviceKind, TestDevice};
use peers::{Config, RunningTracer};
use summary::{RunRecord, ServeSoakRecord, SoakRecord};
use system::{
    busy_between, load_average, machine_ticks, pause, read_trimmed, BenchLock, Process, ScratchDir,
    Setting, TracefsMount,
};
use workload::{parse_fio, Workload, SPLIT_MAX_SECTORS_KB};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Smoke run: 1 round of 2 s per run and no soak (about 1.5 minutes).
    #[arg(long)]
    quick: bool,
    /// Rounds of every configuration per workload [default: 3; --quick: 1].
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,
    /// fio runtime of one run, in seconds [default: 4; --quick: 2].
    #[arg(long, value_name = "SECS")]
    runtime: Option<u32>,
    /// Sustained zero-drop check at the highest event rate, in seconds; 0 skips it
    /// [default: 60; --quick: 0].
    #[arg(long, value_name = "SECS")]
    soak: Option<u32>,
    /// Also run `serve` this long (the issue's soak is 600) on the workload
    /// where it saw the most events, scraped every second, its VmRSS sampled
    /// every 10 s: is the last minute's RSS within 10% of the first's?
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(20..))]
    serve_soak: Option<u32>,
    /// Only these devices (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "DEV")]
    device: Vec<DeviceKind>,
    /// Only these workloads (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "WORKLOAD")]
    workload: Vec<Workload>,
    /// Only these configurations (comma-separated); the baseline always runs.
    /// Targets whose peer was left out show as not measured.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "CONFIG")]
    config: Vec<Config>,
    /// Leave kernel.bpf_stats_enabled alone (no BPF run-time figures; its
    /// clock reads then cost nothing).
    #[arg(long)]
    no_bpf_stats: bool,
    /// Also run iosplit-trace on its fallback classic tracepoints, to compare
    /// the probe flavors in the same run (adds a configuration: ~2 minutes).
    #[arg(long)]
    classic: bool,
    /// Also run bpftrace with one printf per event (adds a configuration:
    /// ~1.5 minutes).
    #[arg(long)]
    printf: bool,
    /// Benchmark this iosplit-trace binary instead of building target/release's.
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
}

struct Plan {
    rounds: u32,
    runtime_s: u32,
    soak_s: u32,
    serve_soak_s: Option<u32>,
    devices: Vec<DeviceKind>,
    workloads: Vec<Workload>,
    configs: Vec<Config>,
    bpf_stats: bool,
}

impl Plan {
    fn from_args(args: &BenchArgs, notes: &mut Vec<String>) -> Self {
        let (rounds, runtime_s, soak_s) = if args.quick { (1, 2, 0) } else { (3, 4, 60) };
        let mut configs = Config::ALL.to_vec();
        let named = |config| args.config.contains(&config);
        if !args.classic && !named(Config::IosplitClassic) {
            configs.retain(|&c| c != Config::IosplitClassic);
        }
        if !args.printf && !named(Config::BpftracePrintf) {
            configs.retain(|&c| c != Config::BpftracePrintf);
        }
        configs.retain(|&c| !c.only_when_named() || named(c));
        if !args.config.is_empty() {
            configs.retain(|c| *c == Config::Baseline || args.config.contains(c));
        }
        if !on_path("bpftrace") {
            notes.push("bpftrace is not installed: its configurations were skipped".into());
            configs.retain(|c| !c.uses_bpftrace());
        }
        Self {
            rounds: args.rounds.unwrap_or(rounds).max(1),
            runtime_s: args.runtime.unwrap_or(runtime_s).max(1),
            soak_s: args.soak.unwrap_or(soak_s),
            serve_soak_s: args.serve_soak,
            devices: or_all(&args.device, &DeviceKind::ALL),
            workloads: or_all(&args.workload, &Workload::ALL),
            configs,
            bpf_stats: !args.no_bpf_stats,
        }
    }
}

pub fn bench(args: &BenchArgs) -> Result<()> {
    if !is_root() {
        return Err("the benchmark needs root (loop devices, zram, BPF); run it with sudo".into());
    }
    for tool in ["fio", "losetup", "partx", "sfdisk"] {
        if !on_path(tool) {
            return Err(format!(
                "{tool} is missing; `cargo xtask setup` installs it"
            ));
        }
    }
    let root = workspace_root();
    let binary = match &args.binary {
        Some(binary) => binary.clone(),
        None => crate::util::build_release_tracer()?,
    };
    if !binary.is_file() {
        return Err(format!("{} does not exist", binary.display()));
    }
    system::install_interrupt_handler();

    let mut notes = Vec::new();
    let plan = Plan::from_args(args, &mut notes);
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let load_start = load_average();

    // Guards, dropped in reverse order at the end or on any error.
    let _lock = BenchLock::acquire()?;
    let scratch = ScratchDir::create()?;
    let _tracefs = TracefsMount::ensure()?;
    let _bpf_stats = if plan.bpf_stats {
        Some(Setting::set("/proc/sys/kernel/bpf_stats_enabled", "1")?)
    } else {
        None
    };

    let mut records = Vec::new();
    let mut bench = Bench {
        plan: &plan,
        binary: &binary,
        scratch: &scratch,
        done: 0,
        total: 0,
    };
    bench.total = bench.count_runs();
    eprintln!(
        "xtask bench: {} runs of {} s, {} rounds{}{}; load average {:.2} {:.2} {:.2}",
        bench.total,
        plan.runtime_s,
        plan.rounds,
        if plan.soak_s > 0 {
            format!(", then a {} s soak", plan.soak_s)
        } else {
            String::new()
        },
        plan.serve_soak_s
            .map_or(String::new(), |s| format!(", then a {s} s serve soak")),
        load_start[0],
        load_start[1],
        load_start[2],
    );
    for &kind in &plan.devices {
        match bench.device(kind, &mut records, &mut notes) {
            Ok(()) => {}
            Err(err) if err.starts_with("setup:") => {
                eprintln!("xtask bench: skipping {}: {err}", kind.title());
                notes.push(format!("{} skipped: {err}", kind.title()));
            }
            Err(err) => return Err(err),
        }
    }
    if records.is_empty() {
        return Err("no run completed".into());
    }

    let rows = summary::rows(&records);
    let soak = if plan.soak_s > 0 {
        bench.soak(&rows)?
    } else {
        notes.push("no soak run (--soak 0 or --quick)".into());
        None
    };
    let serve_soak = match plan.serve_soak_s {
        Some(seconds) => bench.serve_soak(&rows, seconds)?,
        None => None,
    };
    let mut targets = summary::targets(&rows, soak.as_ref(), &plan.configs);
    targets.extend(
        serve_soak
            .as_ref()
            .map(ServeSoakRecord::targets)
            .into_iter()
            .flatten(),
    );
    let kernel = output(Command::new("uname").arg("-r"))
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    let cpu_model = cpu_model().unwrap_or_else(|| "unknown CPU".into());
    // Per-event costs depend on the host: every table names it.
    let table = format!(
        "Host: {cpu_model}, {} CPUs, Linux {kernel}\n\n{}",
        cpu_count(),
        summary::markdown(&rows, &targets, soak.as_ref(), serve_soak.as_ref())
    );
    let load_end = load_average();
    notes.push(MEASUREMENT_NOTE.into());

    println!("{table}");
    for note in &notes {
        println!("- {note}");
    }
    println!(
        "\nload average at start {:.2} {:.2} {:.2}, at end {:.2} {:.2} {:.2} ({} CPUs); {:.0} s in all",
        load_start[0],
        load_start[1],
        load_start[2],
        load_end[0],
        load_end[1],
        load_end[2],
        cpu_count(),
        started.elapsed().as_secs_f64()
    );

    let document = BenchDocument {
        schema: "iosplit-trace/bench",
        schema_version: 2,
        started_unix,
        elapsed_s: started.elapsed().as_secs_f64(),
        kernel,
        cpu_model,
        cpus: cpu_count(),
        load_average_start: load_start,
        load_average_end: load_end,
        rounds: plan.rounds,
        runtime_s: plan.runtime_s,
        soak_s: plan.soak_s,
        serve_soak_s: plan.serve_soak_s,
        bpf_stats: plan.bpf_stats,
        notes,
        targets,
        rows,
        soak,
        serve_soak,
        runs: records,
        table: table.clone(),
    };
    write_outputs(&root, &document, &table)
}

const MEASUREMENT_NOTE: &str = "consumer µs/ev = tracer process utime+stime from attach to exit \
(wait4) / events; BPF µs/ev = run_time_ns of the tracer's BPF programs (kernel.bpf_stats_enabled=1, \
/proc/PID/fdinfo) / events handled, which leaves out the tracepoint's own record assembly; \
fio CPU Δ and machine CPU Δ = CPU per I/O above the baseline's (machine: all CPUs busy time \
from /proc/stat minus the tracer process), which includes that remainder and any other load; floor events = runs of its noop programs \
(every device's tracepoint hits: they return before filtering), so its per-event columns are per hit; bpftrace biolatency events = 2 per \
latency in its histogram (the request's issue and its completion)";

/// Runs the plan, one device at a time.
struct Bench<'a> {
    plan: &'a Plan,
    binary: &'a Path,
    scratch: &'a ScratchDir,
    done: usize,
    total: usize,
}

impl Bench<'_> {
    fn count_runs(&self) -> usize {
        // Each round, then the closing baseline.
        let per_workload = self.plan.rounds as usize * self.plan.configs.len()
            + usize::from(self.plan.configs.contains(&Config::Baseline));
        let applicable = self
            .plan
            .devices
            .iter()
            .map(|&kind| {
                self.plan
                    .workloads
                    .iter()
                    .filter(|&&w| !(w == Workload::SplitWrite && kind == DeviceKind::Zram))
                    .count()
            })
            .sum::<usize>();
        applicable * per_workload
    }

    fn device(
        &mut self,
        kind: DeviceKind,
        records: &mut Vec<RunRecord>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let device =
            TestDevice::setup(kind, &self.scratch.path).map_err(|err| format!("setup: {err}"))?;
        eprintln!("xtask bench: {} is /dev/{}", kind.title(), device.disk);
        for &workload in &self.plan.workloads {
            let target = match workload.target(&device) {
                Ok(target) => target,
                Err(reason) => {
                    notes.push(format!(
                        "{} {}: not run: {reason}",
                        kind.title(),
                        workload.key()
                    ));
                    continue;
                }
            };
            let _split = prepare(workload, &device)?;
            self.warm_up(workload, &device, &target)?;
            let slots = self.plan.configs.len() as u32;
            let rounds = self.plan.rounds;
            // Each round in the same order, then one closing baseline: a run
            // is judged against the baselines on either side of it.
            let places = (0..rounds)
                .flat_map(|round| {
                    self.plan
                        .configs
                        .iter()
                        .enumerate()
                        .map(move |(slot, &config)| {
                            (
                                config,
                                Place {
                                    round,
                                    slot: slot as u32,
                                    slots,
                                },
                            )
                        })
                })
                .chain(self.plan.configs.contains(&Config::Baseline).then_some((
                    Config::Baseline,
                    Place {
                        round: rounds,
                        slot: 0,
                        slots,
                    },
                )))
                .collect::<Vec<_>>();
            for (config, place) in places {
                let round = place.round;
                let run = self.run(
                    config,
                    workload,
                    &device,
                    &target,
                    place,
                    self.plan.runtime_s,
                );
                match run {
                    Ok(record) => records.push(record),
                    // A peer tool's failure costs its sample, not the benchmark.
                    Err(why) if config.loses_only_its_sample() => {
                        system::check_interrupted()?;
                        eprintln!("xtask bench: {} failed: {why}", config.title());
                        notes.push(format!(
                            "{} {} {} round {}: no sample ({why})",
                            kind.title(),
                            workload.key(),
                            config.title(),
                            round + 1
                        ));
                    }
                    Err(why) => return Err(why),
                }
            }
        }
        Ok(())
    }

    /// The workload once, unmeasured and untraced: the first fio run after
    /// an idle spell ran at 0.55–0.75 of the next ones on this host (in
    /// 2 s runs, 208k, 265k, 305k, 349k IOPS), a warm-up of the machine,
    /// not of the device, that would have judged every ratio of the first
    /// round against a slow baseline.
    fn warm_up(&mut self, workload: Workload, device: &TestDevice, target: &Path) -> Result<()> {
        pause(Duration::from_millis(300))?;
        let report = self.scratch.file("warm-up.json");
        let seconds = self.plan.runtime_s.max(WARM_UP_MIN_S);
        let mut fio = Process::spawn(&mut workload.fio(target, device.kind, seconds, &report))?;
        let (status, _) = fio.wait(Duration::from_secs(u64::from(seconds) * 4 + 60))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the warm-up {} failed with {status}", fio.name()))
        }
    }

    fn run(
        &mut self,
        config: Config,
        workload: Workload,
        device: &TestDevice,
        target: &Path,
        place: Place,
        runtime_s: u32,
    ) -> Result<RunRecord> {
        let Place { round, slot, slots } = place;
        // Let the previous run's writeback and teardown settle.
        pause(Duration::from_millis(300))?;
        let tracer = RunningTracer::start(config, self.binary, device, &self.scratch.path)?;
        let report = self.scratch.file("fio.json");
        let load_1m = load_average()[0];
        let before = tracer.as_ref().map(RunningTracer::sample);
        let machine_before = machine_ticks().unwrap_or_default();
        let mut fio = Process::spawn(&mut workload.fio(target, device.kind, runtime_s, &report))?;
        let fio_timeout = Duration::from_secs(u64::from(runtime_s) * 4 + 60);
        let (status, _) = fio.wait(fio_timeout)?;
        let machine_after = machine_ticks().unwrap_or_default();
        let after = tracer.as_ref().map(RunningTracer::sample);
        if !status.success() {
            return Err(format!("{} failed with {status}", fio.name()));
        }
        let fio_result = parse_fio(&read_trimmed(&report)?)?;
        let tracer = match (tracer, before, after) {
            (Some(tracer), Some(before), Some(after)) => {
                Some(tracer.finish(after.cpu.saturating_sub(before.cpu), after)?)
            }
            _ => None,
        };
        self.done += 1;
        eprintln!(
            "xtask bench: [{}/{}] {} {} {} {}: {:.0}k IOPS{}",
            self.done,
            self.total,
            device.kind.title(),
            workload.key(),
            config.title(),
            if round == self.plan.rounds {
                "closing the rounds".to_string()
            } else {
                format!("round {}", round + 1)
            },
            fio_result.iops / 1e3,
            tracer.as_ref().map_or(String::new(), |t| format!(
                ", {} events, {} dropped, attached in {:.0} ms",
                t.events,
                t.dropped,
                t.attach_s * 1e3
            )),
        );
        Ok(RunRecord {
            device: device.kind,
            workload,
            config,
            round,
            slot,
            slots,
            fio: fio_result,
            machine_busy_s: busy_between(machine_before, machine_after).as_secs_f64(),
            load_1m,
            tracer,
        })
    }

    /// iosplit-trace alone for `soak_s` seconds on the workload where it saw
    /// the most events per second.
    fn soak(&mut self, rows: &[summary::Row]) -> Result<Option<SoakRecord>> {
        let busiest = rows
            .iter()
            .filter(|r| r.config == Config::IosplitTrace)
            .filter_map(|r| Some((r.events_per_s?, r)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let Some((rate, row)) = busiest else {
            return Ok(None);
        };
        eprintln!(
            "xtask bench: soak: {} s of {} {} (the highest rate seen: {:.0}k events/s)",
            self.plan.soak_s,
            row.device.title(),
            row.workload.key(),
            rate / 1e3
        );
        let record = self.run_alone(Config::IosplitTrace, row, self.plan.soak_s)?;
        let Some(tracer) = record.tracer else {
            return Ok(None);
        };
        Ok(Some(SoakRecord {
            device: row.device,
            workload: row.workload,
            seconds: self.plan.soak_s,
            fio: record.fio,
            tracer,
            load_1m: record.load_1m,
        }))
    }
}

impl Bench<'_> {
    /// `serve` alone for `seconds` on the workload where it (or else
    /// `report`) saw the most events per second, scraped every second.
    fn serve_soak(
        &mut self,
        rows: &[summary::Row],
        seconds: u32,
    ) -> Result<Option<ServeSoakRecord>> {
        let busiest = |config: Config| {
            rows.iter()
                .filter(|r| r.config == config)
                .filter_map(|r| Some((r.events_per_s?, r)))
                .max_by(|a, b| a.0.total_cmp(&b.0))
        };
        let Some((rate, row)) = busiest(Config::Serve).or_else(|| busiest(Config::IosplitTrace))
        else {
            return Ok(None);
        };
        eprintln!(
            "xtask bench: serve soak: {seconds} s of {} {} ({:.0}k events/s seen)",
            row.device.title(),
            row.workload.key(),
            rate / 1e3
        );
        let record = self.run_alone(Config::Serve, row, seconds)?;
        Ok(record.tracer.map(|tracer| {
            ServeSoakRecord::new(row.device, row.workload, seconds, record.fio, tracer)
        }))
    }

    /// One long run of `config` on `row`'s device and workload, on a fresh device.
    fn run_alone(&mut self, config: Config, row: &summary::Row, seconds: u32) -> Result<RunRecord> {
        let device = TestDevice::setup(row.device, &self.scratch.path)?;
        let target = row.workload.target(&device)?;
        let _split = prepare(row.workload, &device)?;
        self.total += 1;
        let place = Place {
            round: 0,
            slot: 0,
            slots: 1,
        };
        self.run(config, row.workload, &device, &target, place, seconds)
    }
}

/// The shortest warm-up before a workload's first round.
const WARM_UP_MIN_S: u32 = 5;

/// Where a run sits in the benchmark's order.
#[derive(Clone, Copy)]
struct Place {
    round: u32,
    /// Its position in the round, of `slots`.
    slot: u32,
    slots: u32,
}

/// Queue settings a workload needs, restored when the guard drops.
fn prepare(workload: Workload, device: &TestDevice) -> Result<Option<Setting>> {
    if workload == Workload::SplitWrite {
        Ok(Some(Setting::set(
            device.queue_file("max_sectors_kb"),
            SPLIT_MAX_SECTORS_KB,
        )?))
    } else {
        Ok(None)
    }
}

/// The chosen items, or all of them when none was chosen.
fn or_all<T: Clone>(chosen: &[T], all: &[T]) -> Vec<T> {
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen.to_vec()
    }
}

/// The first `model name` of /proc/cpuinfo.
fn cpu_model() -> Option<String> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").ok()?;
    model_name(&cpuinfo)
}

fn model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

#[derive(Serialize)]
struct BenchDocument {
    schema: &'static str,
    schema_version: u32,
    started_unix: u64,
    elapsed_s: f64,
    kernel: String,
    /// `model name` in /proc/cpuinfo.
    cpu_model: String,
    cpus: usize,
    load_average_start: [f64; 3],
    load_average_end: [f64; 3],
    rounds: u32,
    runtime_s: u32,
    soak_s: u32,
    serve_soak_s: Option<u32>,
    bpf_stats: bool,
    notes: Vec<String>,
    targets: Vec<summary::Target>,
    rows: Vec<summary::Row>,
    soak: Option<SoakRecord>,
    serve_soak: Option<ServeSoakRecord>,
    runs: Vec<RunRecord>,
    table: String,
}

fn write_outputs(root: &Path, document: &BenchDocument, table: &str) -> Result<()> {
    let dir = root.join("target/bench");
    fs::create_dir_all(&dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let json = serde_json::to_string_pretty(document)
        .map_err(|err| format!("cannot encode the results: {err}"))?;
    let stamped: PathBuf = dir.join(format!("bench-{}.json", document.started_unix));
    for (path, text) in [
        (stamped.clone(), json.as_str()),
        (dir.join("latest.json"), json.as_str()),
        (dir.join("latest.md"), table),
    ] {
        fs::write(&path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    }
    eprintln!("xtask bench: results in {}", stamped.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::model_name;

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(model_name(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(model_name("processor\t: 0\n"), None);
    }
}
