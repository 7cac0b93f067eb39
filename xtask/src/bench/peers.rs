//! The configurations compared: no tracer, the floor (iosplit-trace's BTF
//! tracepoints with programs that return at once), iosplit-trace (`report`;
//! with `--no-owners`; with `--record`; `serve` scraped every second; with
//! one probe lever turned off, when asked for), and
//! bpftrace with in-kernel counting or with one printf per event on the same
//! tracepoints, or keeping biolatency's per-request latency histogram.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tracer_common::EventKind;

use super::devices::TestDevice;
use super::scrape::{self, ScrapeLog, Scraper};
use super::system::{
    bpf_run_stats, check_interrupted, process_cpu, vm_hwm_kib, BpfRunStats, Process,
};
use crate::util::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    Baseline,
    /// `IOSPLIT_PROBES=noop`: the tracepoints' dispatch alone, nothing captured.
    Floor,
    IosplitTrace,
    /// `report --no-owners`: the queue probe reads no owners (attribution's
    /// cost, beside the default `report`, which reads them).
    NoOwners,
    /// `report --record FILE`, FILE in the scratch directory (/dev/shm).
    Record,
    /// `serve`, scraped every second by a thread here; events from its /metrics.
    Serve,
    /// iosplit-trace forced onto its fallback probes (`--classic`).
    IosplitClassic,
    BpftraceCount,
    /// bpftrace timing each request as biolatency does on tracepoints: its
    /// start in a map by (dev, sector) at block_rq_issue, a hist() of the
    /// latency at block_rq_complete (request-based devices only).
    BpftraceBiolatency,
    BpftracePrintf,
    /// `report` with `IOSPLIT_LEVERS_OFF=wake-check` (every record asks its
    /// ring's fill): that lever alone, only with `--config`.
    LeverOffWakeCheck,
    /// `report` with `IOSPLIT_LEVERS_OFF=submitter-tgid` (every record reads
    /// the current task): that lever alone, only with `--config`.
    LeverOffSubmitterTgid,
}

impl Config {
    pub const ALL: [Config; 12] = [
        Config::Baseline,
        Config::Floor,
        Config::IosplitTrace,
        Config::NoOwners,
        Config::Record,
        Config::Serve,
        Config::IosplitClassic,
        Config::BpftraceCount,
        Config::BpftraceBiolatency,
        Config::BpftracePrintf,
        Config::LeverOffWakeCheck,
        Config::LeverOffSubmitterTgid,
    ];

    /// Run only when `--config` names them.
    pub fn only_when_named(self) -> bool {
        matches!(
            self,
            Config::LeverOffWakeCheck | Config::LeverOffSubmitterTgid
        )
    }

    pub fn title(self) -> &'static str {
        match self {
            Config::Baseline => "baseline (no tracer)",
            Config::Floor => "floor: noop probes (events = hits)",
            Config::IosplitTrace => "iosplit-trace report",
            Config::NoOwners => "iosplit-trace report --no-owners",
            Config::Record => "iosplit-trace report --record",
            Config::Serve => "iosplit-trace serve, scraped 1/s",
            Config::IosplitClassic => "iosplit-trace, classic tracepoints",
            Config::BpftraceCount => "bpftrace count()",
            Config::BpftraceBiolatency => "bpftrace biolatency",
            Config::BpftracePrintf => "bpftrace printf/event",
            Config::LeverOffWakeCheck => "report, lever off: wake-check",
            Config::LeverOffSubmitterTgid => "report, lever off: submitter-tgid",
        }
    }

    pub fn uses_bpftrace(self) -> bool {
        matches!(
            self,
            Config::BpftraceCount | Config::BpftraceBiolatency | Config::BpftracePrintf
        )
    }

    /// A failed run costs only its own sample (noted), not the benchmark:
    /// the peers, and `serve` when no scrape got through ("fail the row").
    pub fn loses_only_its_sample(self) -> bool {
        self.uses_bpftrace() || self == Config::Serve
    }

    /// iosplit-trace capturing on its default probes: the runs held to zero drops.
    pub fn captures(self) -> bool {
        matches!(
            self,
            Config::IosplitTrace
                | Config::NoOwners
                | Config::Record
                | Config::Serve
                | Config::LeverOffWakeCheck
                | Config::LeverOffSubmitterTgid
        )
    }

    fn runs_iosplit(self) -> bool {
        !(self == Config::Baseline || self.uses_bpftrace())
    }

    /// The iosplit-trace command line (after the binary) and its environment.
    fn iosplit_command(
        self,
        disk: &str,
        recording: &Path,
    ) -> (Vec<String>, Vec<(&'static str, &'static str)>) {
        let mut args: Vec<String> = match self {
            Config::Serve => ["serve", "--listen", SERVE_LISTEN]
                .map(String::from)
                .to_vec(),
            _ => ["report", "--json"].map(String::from).to_vec(),
        };
        args.extend(["-d".to_string(), disk.to_string()]);
        if self == Config::Record {
            args.push("--record".into());
            args.push(recording.display().to_string());
        }
        if self == Config::NoOwners {
            args.push("--no-owners".into());
        }
        let probes = match self {
            Config::IosplitClassic => "classic",
            Config::Floor => "noop",
            _ => "btf",
        };
        let mut env = vec![("IOSPLIT_PROBES", probes)];
        match self {
            Config::LeverOffWakeCheck => env.push(("IOSPLIT_LEVERS_OFF", "wake-check")),
            Config::LeverOffSubmitterTgid => env.push(("IOSPLIT_LEVERS_OFF", "submitter-tgid")),
            _ => {}
        }
        (args, env)
    }
}

/// Port 0: the kernel picks a free one, and `serve` prints where it listens.
const SERVE_LISTEN: &str = "127.0.0.1:0";
const SERVE_LISTENING: &str = "serving http://";

/// Printed from BEGIN, which bpftrace runs after every probe is attached.
const BPFTRACE_ATTACHED: &str = "BENCH-ATTACHED";
const IOSPLIT_ATTACHED: &str = "probes attached";

/// `args->dev == (uint32)A || args->dev == (uint32)B`: the test devices.
fn device_test(kernel_devs: &[u32]) -> String {
    let tests: Vec<String> = kernel_devs
        .iter()
        .map(|dev| format!("args->dev == (uint32){dev}"))
        .collect();
    tests.join(" || ")
}

fn device_filter(kernel_devs: &[u32]) -> String {
    format!("/{}/", device_test(kernel_devs))
}

/// bpftrace program: one `count()` per tracepoint, in-kernel, printed at exit.
pub fn bpftrace_count_script(kernel_devs: &[u32]) -> String {
    // The tracepoints iosplit-trace attaches: the probe table's rows.
    let probes: Vec<String> = EventKind::ALL
        .iter()
        .map(|kind| format!("tracepoint:block:{}", kind.tracepoint()))
        .collect();
    format!(
        "BEGIN {{ printf(\"{BPFTRACE_ATTACHED}\\n\"); }}\n{}\n{} {{ @[probe] = count(); }}\n",
        probes.join(",\n"),
        device_filter(kernel_devs)
    )
}

/// The biolatency peer's histogram: request latency in µs.
const BIOLATENCY_HIST: &str = "@usecs";

/// bpftrace program: biolatency's per-request latency map on tracepoints,
/// what a user runs for always-on latency. It follows bcc's
/// tools/biolatency.py (iovisor/bcc at 6d0a964c): when its completion side
/// is a tracepoint (`block_io_done`, or `block_rq_complete` on kernels
/// without it), the start time is kept in a hash map keyed by
/// `struct start_key { dev; sector; }` (the tracepoint's `args->dev` and
/// `args->sector`, not the request pointer, which a tracepoint's `args`
/// does not carry), looked up at completion, put into a log2 histogram and
/// deleted. bcc stamps the start in `blk_mq_start_request`, the function
/// that fires `block_rq_issue`; the tracepoint is used here, so no kprobe
/// is involved. bpftrace's own tools/biolatency.bt (bpftrace/bpftrace at
/// e1b7c393) has the same shape but starts at `block_bio_queue` keyed by
/// sector alone; its older kprobe form (tools/biolatency-kp.bt, the tool of
/// *BPF Performance Tools*) keys by the request pointer of
/// `blk_account_io_start`. Like the other peers it filters on the test
/// devices, at both probes, so other disks' completions skip the map
/// lookup; like biolatency.bt, `END` clears the starts still in flight so
/// that only the histogram is printed.
pub fn bpftrace_biolatency_script(kernel_devs: &[u32]) -> String {
    let devices = device_test(kernel_devs);
    let key = "@start[args->dev, args->sector]";
    format!(
        "BEGIN {{ printf(\"{BPFTRACE_ATTACHED}\\n\"); }}\n\
         tracepoint:block:block_rq_issue /{devices}/ {{ {key} = nsecs; }}\n\
         tracepoint:block:block_rq_complete /({devices}) && {key}/ {{ \
         {BIOLATENCY_HIST} = hist((nsecs - {key}) / 1000); delete({key}); }}\n\
         END {{ clear(@start); }}\n"
    )
}

/// bpftrace program: one printf line per event with what iosplit-trace's
/// event carries (time, kind, dev, sector, size or second sector, pid, rwbs).
pub fn bpftrace_printf_script(kernel_devs: &[u32]) -> String {
    let filter = device_filter(kernel_devs);
    let mut script = format!("BEGIN {{ printf(\"{BPFTRACE_ATTACHED}\\n\"); }}\n");
    for kind in EventKind::ALL {
        let (name, tag, fields) = (kind.tracepoint(), kind.json_key(), kind.bpftrace_fields());
        // block_dirty_buffer has no rwbs.
        let (rwbs_format, rwbs_arg) = if kind == EventKind::DirtyBuffer {
            ("", String::new())
        } else {
            (" %s", ", args->rwbs".to_string())
        };
        script.push_str(&format!(
            "tracepoint:block:{name} {filter} {{ printf(\"{tag} %llu %u %llu %llu %lld %d{rwbs_format}\\n\", nsecs, args->dev, args->sector, {fields}, pid{rwbs_arg}); }}\n"
        ));
    }
    script
}

/// A tracer running alongside fio.
pub struct RunningTracer {
    pub config: Config,
    process: Process,
    stdout: PathBuf,
    stderr: PathBuf,
    pub attach: Duration,
    cpu_at_attach: Duration,
    /// `Record`: the recording, measured and removed at the end.
    recording: Option<PathBuf>,
    /// `Serve`: where it listens, and the thread scraping it.
    scraper: Option<(SocketAddr, Scraper)>,
}

/// What we sample from a live tracer (before stopping it).
#[derive(Clone, Copy, Debug, Default)]
pub struct LiveSample {
    pub cpu: Duration,
    pub vm_hwm_kib: u64,
    pub bpf: BpfRunStats,
}

/// What a tracer run handled and cost, measured after it exited.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TracerOutcome {
    pub attach_s: f64,
    /// CPU used before the probes were attached (loading, compiling).
    pub startup_cpu_s: f64,
    /// CPU used from attach to exit (the consumer: draining, correlating, reporting).
    pub consumer_cpu_s: f64,
    /// CPU used while fio ran.
    pub window_cpu_s: f64,
    pub events: u64,
    pub dropped: u64,
    /// VmHWM just before stop. Not wait4's ru_maxrss: a spawned child's
    /// starts at its parent's size (exec keeps the high-water mark), so it
    /// measured this bench process, not the tracer.
    pub peak_rss_kib: u64,
    pub bpf: BpfRunStats,
    /// The iosplit-trace report's correlation statistics, when it has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation: Option<Value>,
    /// `Record`: the recording's size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_bytes: Option<u64>,
    /// `Serve`: the scrapes during the run and the RSS samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrapes: Option<ScrapeLog>,
}

/// How long a tracer may take to attach (bpftrace compiles its program first).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a tracer may take to print its report after SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

impl RunningTracer {
    /// Starts the tracer for `config` (none for the baseline) and waits until
    /// its probes are attached.
    pub fn start(
        config: Config,
        iosplit_binary: &Path,
        device: &TestDevice,
        scratch: &Path,
    ) -> Result<Option<Self>> {
        let stdout = scratch.join("tracer.out");
        let stderr = scratch.join("tracer.err");
        let recording = scratch.join("bench.iotrace");
        let mut cmd = match config {
            Config::Baseline => return Ok(None),
            Config::Floor
            | Config::IosplitTrace
            | Config::NoOwners
            | Config::Record
            | Config::Serve
            | Config::IosplitClassic
            | Config::LeverOffWakeCheck
            | Config::LeverOffSubmitterTgid => {
                let (args, env) = config.iosplit_command(&device.disk, &recording);
                let mut cmd = Command::new(iosplit_binary);
                cmd.args(args).envs(env);
                cmd
            }
            Config::BpftraceCount | Config::BpftraceBiolatency | Config::BpftracePrintf => {
                let script = match config {
                    Config::BpftraceCount => bpftrace_count_script(&device.kernel_devs),
                    Config::BpftraceBiolatency => bpftrace_biolatency_script(&device.kernel_devs),
                    _ => bpftrace_printf_script(&device.kernel_devs),
                };
                let mut cmd = Command::new("bpftrace");
                cmd.arg("-e").arg(script);
                cmd
            }
        };
        let open = |path: &Path| {
            fs::File::create(path).map_err(|err| format!("cannot create {}: {err}", path.display()))
        };
        cmd.stdin(Stdio::null())
            .stdout(open(&stdout)?)
            .stderr(open(&stderr)?);
        let started = Instant::now();
        let mut process = Process::spawn(&mut cmd)?;
        let (marker_file, marker) = match config {
            // Printed once the probes are attached and the listener is bound.
            Config::Serve => (&stderr, SERVE_LISTENING),
            _ if config.runs_iosplit() => (&stderr, IOSPLIT_ATTACHED),
            _ => (&stdout, BPFTRACE_ATTACHED),
        };
        loop {
            if contains(marker_file, marker) {
                break;
            }
            if let Some((status, _)) = process.try_reap()? {
                return Err(format!(
                    "{} exited with {status} before attaching: {}",
                    config.title(),
                    tail(&stderr)
                ));
            }
            check_interrupted()?;
            if started.elapsed() > ATTACH_TIMEOUT {
                return Err(format!(
                    "{} did not attach within {ATTACH_TIMEOUT:?}",
                    config.title()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let attach = started.elapsed();
        let cpu_at_attach = process_cpu(process.pid()).unwrap_or_default();
        let scraper = match config {
            Config::Serve => {
                let text = fs::read_to_string(&stderr).unwrap_or_default();
                let address = listening_address(&text)
                    .ok_or_else(|| format!("serve did not say where it listens: {text}"))?;
                Some((address, Scraper::start(address, process.pid())?))
            }
            _ => None,
        };
        Ok(Some(Self {
            config,
            process,
            stdout,
            stderr,
            attach,
            cpu_at_attach,
            recording: (config == Config::Record).then_some(recording),
            scraper,
        }))
    }

    pub fn sample(&self) -> LiveSample {
        let pid = self.process.pid();
        LiveSample {
            cpu: process_cpu(pid).unwrap_or_default(),
            vm_hwm_kib: vm_hwm_kib(pid).unwrap_or(0),
            bpf: bpf_run_stats(pid),
        }
    }

    /// Stops the tracer (SIGINT, like Ctrl-C) and reads what it reported.
    /// `window` is CPU used while fio ran; `last` was sampled just before this.
    pub fn finish(mut self, window: Duration, last: LiveSample) -> Result<TracerOutcome> {
        // serve: the scrapes stop, then one last scrape gives the counts.
        let served = match self.scraper.take() {
            Some((address, scraper)) => {
                let log = scraper.stop();
                if log.ok == 0 {
                    return Err(format!(
                        "no scrape of serve's /metrics succeeded ({} failed: {})",
                        log.failed,
                        log.last_error.as_deref().unwrap_or("none tried")
                    ));
                }
                let counts = scrape::served_counts(&scrape::get(address, "/metrics")?)?;
                Some((log, counts))
            }
            None => None,
        };
        let (status, usage) = self.process.interrupt_and_wait(STOP_TIMEOUT)?;
        let stdout = fs::read_to_string(&self.stdout).unwrap_or_default();
        let stderr = fs::read_to_string(&self.stderr).unwrap_or_default();
        if self.config.runs_iosplit() && !status.success() {
            return Err(format!(
                "{} failed with {status}: {}",
                self.process.name(),
                tail(&self.stderr)
            ));
        }
        let counted = match self.config {
            Config::Baseline => Counted::default(),
            Config::Floor => {
                parse_floor_report(&stdout)?;
                // Nothing is captured: the noop programs' runs (tracepoint
                // hits, every device's) stand in for events.
                Counted {
                    events: last.bpf.run_cnt,
                    ..Counted::default()
                }
            }
            Config::IosplitTrace
            | Config::NoOwners
            | Config::Record
            | Config::IosplitClassic
            | Config::LeverOffWakeCheck
            | Config::LeverOffSubmitterTgid => parse_iosplit_report(&stdout)?,
            Config::Serve => served
                .as_ref()
                .map_or_else(Counted::default, |(_, counts)| Counted {
                    events: counts.events,
                    dropped: counts.dropped,
                    correlation: None,
                }),
            Config::BpftraceCount => Counted {
                events: parse_bpftrace_counts(&stdout),
                dropped: parse_bpftrace_lost(&stdout) + parse_bpftrace_lost(&stderr),
                correlation: None,
            },
            // Each latency it recorded took two probe hits on the test
            // devices, the request's issue and its completion.
            Config::BpftraceBiolatency => Counted {
                events: 2 * parse_bpftrace_hist_total(&stdout, BIOLATENCY_HIST),
                dropped: parse_bpftrace_lost(&stdout) + parse_bpftrace_lost(&stderr),
                correlation: None,
            },
            Config::BpftracePrintf => Counted {
                events: count_printf_lines(&stdout),
                dropped: parse_bpftrace_lost(&stdout) + parse_bpftrace_lost(&stderr),
                correlation: None,
            },
        };
        // Large printf outputs and recordings: free the tmpfs memory at once.
        let _ = fs::remove_file(&self.stdout);
        let recording_bytes = match &self.recording {
            Some(path) => {
                let bytes = fs::metadata(path)
                    .map_err(|err| format!("no recording at {}: {err}", path.display()))?
                    .len();
                let _ = fs::remove_file(path);
                Some(bytes)
            }
            None => None,
        };
        Ok(TracerOutcome {
            attach_s: self.attach.as_secs_f64(),
            startup_cpu_s: self.cpu_at_attach.as_secs_f64(),
            consumer_cpu_s: usage.cpu.saturating_sub(self.cpu_at_attach).as_secs_f64(),
            window_cpu_s: window.as_secs_f64(),
            events: counted.events,
            dropped: counted.dropped,
            peak_rss_kib: last.vm_hwm_kib,
            bpf: last.bpf,
            correlation: counted.correlation,
            recording_bytes,
            scrapes: served.map(|(log, _)| log),
        })
    }
}

/// The address in serve's "serving http://ADDR/metrics" line.
fn listening_address(stderr: &str) -> Option<SocketAddr> {
    let rest = stderr.split(SERVE_LISTENING).nth(1)?;
    rest.split('/').next()?.parse().ok()
}

fn contains(path: &Path, needle: &str) -> bool {
    fs::read_to_string(path).is_ok_and(|text| text.contains(needle))
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

#[derive(Debug, Default, PartialEq)]
struct Counted {
    events: u64,
    dropped: u64,
    correlation: Option<Value>,
}

/// What `report` prints under `IOSPLIT_PROBES=noop`: a statement that
/// nothing was captured, never measures.
fn parse_floor_report(stdout: &str) -> Result<()> {
    let start = stdout
        .find('{')
        .ok_or("the floor run (IOSPLIT_PROBES=noop) printed no JSON")?;
    let report: Value = serde_json::from_str(&stdout[start..])
        .map_err(|err| format!("the floor run's JSON does not parse: {err}"))?;
    let is_floor = report.get("schema").and_then(Value::as_str) == Some("iosplit-trace/floor")
        && report.get("captured").and_then(Value::as_bool) == Some(false);
    match is_floor {
        true => Ok(()),
        false => Err(
            "IOSPLIT_PROBES=noop did not run the floor: is the binary older than the noop flavor?"
                .into(),
        ),
    }
}

fn parse_iosplit_report(stdout: &str) -> Result<Counted> {
    let start = stdout.find('{').ok_or("iosplit-trace printed no JSON")?;
    let report: Value = serde_json::from_str(&stdout[start..])
        .map_err(|err| format!("iosplit-trace's JSON does not parse: {err}"))?;
    let events = report
        .get("events")
        .ok_or("iosplit-trace's report has no `events`")?;
    let count = |key: &str| events.get(key).and_then(Value::as_u64).unwrap_or(0);
    Ok(Counted {
        events: EventKind::ALL
            .iter()
            .map(|kind| count(kind.json_key()))
            .sum(),
        dropped: count("dropped") + count("read_failed") + count("missed"),
        correlation: report.get("correlation").cloned(),
    })
}

/// Sums `@[tracepoint:block:…]: N` lines that bpftrace prints at exit.
fn parse_bpftrace_counts(stdout: &str) -> u64 {
    stdout
        .lines()
        .filter(|line| line.starts_with("@["))
        .filter_map(|line| line.rsplit_once(": "))
        .filter_map(|(_, count)| count.trim().parse::<u64>().ok())
        .sum()
}

/// Sums the buckets of the histogram `map` that bpftrace prints at exit
/// (`@usecs:` and then lines like `[256, 512)   17 |@@@   |`).
fn parse_bpftrace_hist_total(stdout: &str, map: &str) -> u64 {
    let header = format!("{map}:");
    let mut inside = false;
    let mut total = 0;
    for line in stdout.lines() {
        let line = line.trim();
        if line.starts_with('@') {
            inside = line == header;
            continue;
        }
        if !inside || !(line.starts_with('[') || line.starts_with('(')) {
            continue;
        }
        let Some(end) = line.find([']', ')']) else {
            continue;
        };
        let rest = &line[end + 1..];
        let count = rest
            .split_once('|')
            .and_then(|(count, _)| count.trim().parse::<u64>().ok());
        total += count.unwrap_or(0);
    }
    total
}

/// Sums bpftrace's `Lost N events` notices.
fn parse_bpftrace_lost(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("Lost ")?;
            rest.strip_suffix(" events")?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// Event lines of the printf program: a kind tag, a space, a timestamp.
fn count_printf_lines(stdout: &str) -> u64 {
    let tags: Vec<&str> = EventKind::ALL.iter().map(|kind| kind.json_key()).collect();
    stdout
        .lines()
        .filter(|line| {
            line.split_once(' ').is_some_and(|(tag, rest)| {
                tags.contains(&tag) && rest.bytes().next().is_some_and(|b| b.is_ascii_digit())
            })
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iosplit_report_events_exclude_the_drop_counters() {
        let stdout = r#"{"schema":"iosplit-trace/report","events":{"remap":5,"queue":5,"split":2,
            "backmerge":0,"frontmerge":0,"rq_merge":0,"issue":7,"complete":7,"bio_complete":0,
            "dirty_buffer":1,"requeue":4,"dropped":3,"syscall_dropped":9,"read_failed":1,"missed":2},
            "correlation":{"incomplete":0}}"#;
        let counted = parse_iosplit_report(stdout).unwrap();
        assert_eq!(counted.events, 5 + 5 + 2 + 7 + 7 + 1 + 4);
        assert_eq!(counted.dropped, 3 + 1 + 2);
        assert!(counted.correlation.is_some());
        assert!(parse_iosplit_report("Error: no permission").is_err());
    }

    #[test]
    fn serve_address_is_read_from_its_status_line() {
        let stderr = "iosplit-trace: tracing loop3 (11/11 probes attached, BTF tracepoints); Ctrl-C to stop\n\
                      iosplit-trace: serving http://127.0.0.1:41234/metrics\n";
        assert_eq!(
            listening_address(stderr),
            Some("127.0.0.1:41234".parse().unwrap())
        );
        assert_eq!(listening_address("iosplit-trace: tracing loop3\n"), None);
    }

    #[test]
    fn each_iosplit_configuration_runs_its_own_command() {
        let recording = Path::new("/dev/shm/x/bench.iotrace");
        let command = |config: Config| config.iosplit_command("loop3", recording);
        let (args, env) = command(Config::NoOwners);
        assert_eq!(args, ["report", "--json", "-d", "loop3", "--no-owners"]);
        assert_eq!(env, [("IOSPLIT_PROBES", "btf")]);
        let (args, env) = command(Config::LeverOffWakeCheck);
        assert_eq!(args, ["report", "--json", "-d", "loop3"]);
        assert_eq!(
            env,
            [
                ("IOSPLIT_PROBES", "btf"),
                ("IOSPLIT_LEVERS_OFF", "wake-check")
            ]
        );
        let (args, env) = command(Config::Record);
        assert_eq!(
            args,
            [
                "report",
                "--json",
                "-d",
                "loop3",
                "--record",
                "/dev/shm/x/bench.iotrace"
            ]
        );
        assert_eq!(env, [("IOSPLIT_PROBES", "btf")]);
        let (args, _) = command(Config::Serve);
        assert_eq!(args, ["serve", "--listen", "127.0.0.1:0", "-d", "loop3"]);
        assert_eq!(command(Config::IosplitTrace).1, [("IOSPLIT_PROBES", "btf")]);
        assert_eq!(command(Config::Floor).1, [("IOSPLIT_PROBES", "noop")]);
        assert!(Config::ALL
            .iter()
            .all(|c| c.runs_iosplit() != (c.uses_bpftrace() || *c == Config::Baseline)));
    }

    #[test]
    fn floor_report_is_recognised_and_a_real_report_is_not() {
        let floor = r#"{"schema":"iosplit-trace/floor","probes":"noop","captured":false,
            "seconds":4.2,"note":"nothing was captured"}"#;
        assert!(parse_floor_report(floor).is_ok());
        let report = r#"{"schema":"iosplit-trace/report","events":{"queue":5}}"#;
        assert!(parse_floor_report(report).is_err());
        assert!(parse_floor_report("").is_err());
    }

    #[test]
    fn the_printf_script_has_one_distinct_line_per_probe_table_row() {
        let script = bpftrace_printf_script(&[7 << 20]);
        for kind in EventKind::ALL {
            let line = format!("tracepoint:block:{} ", kind.tracepoint());
            assert_eq!(script.matches(&line).count(), 1, "{line}");
            assert!(script.contains(&format!("printf(\"{} %llu", kind.json_key())));
        }
        assert!(script.contains("block_rq_requeue"));
    }

    #[test]
    fn bpftrace_map_lines_and_lost_notices_are_summed() {
        let stdout = "Attaching 11 probes...\nBENCH-ATTACHED\nLost 17 events\n\n\n\
                      @[tracepoint:block:block_rq_complete]: 1000\n\
                      @[tracepoint:block:block_bio_queue]: 1200\nLost 3 events\n";
        assert_eq!(parse_bpftrace_counts(stdout), 2200);
        assert_eq!(parse_bpftrace_lost(stdout), 20);
        assert_eq!(parse_bpftrace_lost("nothing lost"), 0);
    }

    #[test]
    fn the_biolatency_script_times_requests_between_issue_and_completion() {
        let devs = [7 << 20, (259 << 20) | 1];
        let script = bpftrace_biolatency_script(&devs);
        // Exactly two probes besides BEGIN and END: issue and completion.
        let probes: Vec<&str> = script
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|probe| !matches!(*probe, "BEGIN" | "END"))
            .collect();
        assert_eq!(
            probes,
            [
                "tracepoint:block:block_rq_issue",
                "tracepoint:block:block_rq_complete"
            ],
            "{script}"
        );
        assert_eq!(script.matches("tracepoint:").count(), 2, "{script}");
        let line = |probe: &str| {
            script
                .lines()
                .find(|line| line.starts_with(&format!("tracepoint:block:{probe} ")))
                .unwrap()
                .to_string()
        };
        let key = "@start[args->dev, args->sector]";
        let issue = line("block_rq_issue");
        assert!(issue.ends_with(&format!("{{ {key} = nsecs; }}")), "{issue}");
        let complete = line("block_rq_complete");
        // Only a request whose issue was seen is timed, then forgotten.
        assert!(complete.contains(&format!("&& {key}/")), "{complete}");
        assert!(
            complete.contains(&format!("@usecs = hist((nsecs - {key}) / 1000);")),
            "{complete}"
        );
        assert!(complete.contains(&format!("delete({key});")), "{complete}");
        assert_eq!(script.matches("hist(").count(), 1);
        assert!(!script.contains("count()") && !script.contains("printf(\"%"));
        for probe in [&issue, &complete] {
            for dev in devs {
                assert!(
                    probe.contains(&format!("args->dev == (uint32){dev}")),
                    "{probe}"
                );
            }
        }
        assert!(script.contains(BPFTRACE_ATTACHED));
        assert!(script.contains("END { clear(@start); }"));
        assert!(Config::BpftraceBiolatency.uses_bpftrace());
        assert!(!Config::BpftraceBiolatency.runs_iosplit());
        assert!(!Config::BpftraceBiolatency.only_when_named());
    }

    #[test]
    fn the_latency_histogram_buckets_are_summed() {
        let stdout = "Attaching 4 probes...\nBENCH-ATTACHED\n\n\n\
                      @usecs:\n\
                      [0]                    3 |                                                    |\n\
                      [1]                    1 |                                                    |\n\
                      [2, 4)                 0 |                                                    |\n\
                      [16, 32)           12040 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
                      [1K, 2K)             956 |@@@@                                                |\n\
                      \n@other:\n[0]  100 |@@@@|\n";
        assert_eq!(
            parse_bpftrace_hist_total(stdout, "@usecs"),
            3 + 1 + 12040 + 956
        );
        assert_eq!(
            parse_bpftrace_hist_total("Attaching 4 probes...\n", "@usecs"),
            0
        );
        assert_eq!(parse_bpftrace_hist_total(stdout, "@start"), 0);
        // bpftrace 0.17 on Linux 6.18, 500 direct writes and 300 direct
        // reads of 4 KiB on a loop disk (its header ends in a space).
        let seen = "Attaching 4 probes...\nBENCH-ATTACHED\n\n\n\n\n@usecs: \n\
                    [4, 8)               726 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
                    [8, 16)               57 |@@@@                                                |\n\
                    [16, 32)              11 |                                                    |\n\
                    [32, 64)               3 |                                                    |\n\
                    [64, 128)              1 |                                                    |\n\
                    [128, 256)             1 |                                                    |\n\
                    [256, 512)             0 |                                                    |\n\
                    [2K, 4K)               1 |                                                    |\n";
        assert_eq!(parse_bpftrace_hist_total(seen, "@usecs"), 800);
    }

    #[test]
    fn printf_lines_are_counted_but_not_notices() {
        let stdout = "Attaching 11 probes...\nBENCH-ATTACHED\nqueue 123 7340033 2048 8 0 42 WS\n\
                      Lost 5 events\ndirty_buffer 124 7340034 9 512 0 42\ncomplete 125 7340033 2048 8 0 0 WS\n";
        assert_eq!(count_printf_lines(stdout), 3);
    }

    #[test]
    fn scripts_cover_every_tracepoint_and_filter_on_the_devices() {
        let devs = [7 << 20, (259 << 20) | 1];
        for script in [bpftrace_count_script(&devs), bpftrace_printf_script(&devs)] {
            for name in EventKind::ALL.map(EventKind::tracepoint) {
                assert!(
                    script.contains(&format!("tracepoint:block:{name}")),
                    "{name}"
                );
            }
            assert!(script.contains(&format!("args->dev == (uint32){}", 7 << 20)));
            assert!(script.contains(BPFTRACE_ATTACHED));
        }
        let printf = bpftrace_printf_script(&devs);
        assert_eq!(printf.matches("printf(").count(), EventKind::COUNT + 1);
        assert!(!printf
            .lines()
            .any(|line| line.contains("block_dirty_buffer") && line.contains("rwbs")));
    }
}
