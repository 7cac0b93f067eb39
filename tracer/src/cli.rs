//! The command line. The man page and shell completions are generated from
//! these definitions (`iosplit-trace generate man|bash|zsh|fish`; `cargo xtask
//! run` and `test` write them under target/share/).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Why does my write become so many small device commands?
///
/// iosplit-trace follows each block I/O through its splits and merges to the
/// device commands it became, and names the cause: unaligned partitions,
/// sub-page block sizes, queue limits. With no subcommand it starts the live TUI.
#[derive(Debug, Parser)]
#[command(
    name = "iosplit-trace",
    version,
    after_help = "Examples:\n  sudo iosplit-trace                      live view of every disk\n  sudo iosplit-trace report -d sdc --duration 10\n  sudo iosplit-trace run -- mkfs.ext4 /dev/sdc2\n  iosplit-trace check sdc"
)]
pub struct Cli {
    #[command(flatten)]
    pub selection: DeviceSelection,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The devices the user selected with `-d` (none: every disk).
#[derive(Debug, Clone, Default, Args)]
pub struct DeviceSelection {
    /// Device to trace: sdc, sdc2, /dev/sdc2 or 8:34 (repeatable; a partition implies its disk). Default: every disk.
    #[arg(short = 'd', long = "device", value_name = "DEV", global = true)]
    pub devices: Vec<String>,
    /// Trace only I/O submitted by process PID (repeatable). Filtered in the kernel; writeback by kernel threads is not the process's.
    #[arg(short = 'p', long = "pid", value_name = "PID", global = true)]
    pub pids: Vec<u32>,
    /// Trace only I/O charged to cgroup PATH, as /proc/PID/cgroup shows it in the blkio (v1) or unified (v2) hierarchy (repeatable; not its children). Filtered in the kernel.
    #[arg(long = "cgroup", value_name = "PATH", global = true)]
    pub cgroups: Vec<String>,
    /// Trace only I/O submitted by tasks named NAME, as `ps -o comm` shows them (repeatable). Filtered in the kernel.
    #[arg(long = "comm", value_name = "NAME", global = true)]
    pub comms: Vec<String>,
    /// Read who submitted each bio (process, cgroup, file) for the attribution views. Costs about 0.3 µs per queued bio, so it is off unless asked: implied by --by, -p, --cgroup and --comm.
    #[arg(long = "owners", global = true)]
    pub owners: bool,
}

impl DeviceSelection {
    /// Whether owners are read: asked for, or implied by a filter or by
    /// `views` (an attribution view asked for, like `--by`).
    pub fn reads_owners(&self, views: bool) -> bool {
        self.owners || views || self.filters_owners()
    }

    /// Whether any owner filter (`-p`, `--cgroup`, `--comm`) was given.
    pub fn filters_owners(&self) -> bool {
        !self.pids.is_empty() || !self.cgroups.is_empty() || !self.comms.is_empty()
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace for a while, then print a report with histograms and diagnoses.
    #[command(
        after_help = "Examples:\n  sudo iosplit-trace report --duration 10\n  sudo iosplit-trace report -d loop0 --interval 1 --duration 5\n  sudo iosplit-trace report --duration 5 --json | jq .diagnoses"
    )]
    Report(ReportArgs),
    /// Run a command, trace the I/O it causes, and report when it ends.
    #[command(
        after_help = "Examples:\n  sudo iosplit-trace run -- mkfs.ext4 -F /dev/sdc2\n  sudo iosplit-trace run --json --output mkfs.json -- dd if=/dev/zero of=/dev/sdc2 bs=32k count=256"
    )]
    Run(RunArgs),
    /// Print the man page or a shell completion script, generated from these definitions.
    #[command(hide = true)]
    Generate {
        #[arg(value_enum)]
        what: Generated,
    },
    /// Audit partition alignment and queue limits from geometry alone (no tracing, no root).
    #[command(
        after_help = "Examples:\n  iosplit-trace check\n  iosplit-trace check sdc /dev/sdd --json\n  iosplit-trace check --prometheus -o /var/lib/prometheus/node-exporter/iosplit-trace.prom\n\nExit status: 0 when the audit ran, with or without findings; 2 for an unknown\ndevice; 1 when sysfs cannot be read."
    )]
    Check(CheckArgs),
    /// Trace for a while and write a recording for `analyze` (no report).
    #[command(
        after_help = "Examples:\n  sudo iosplit-trace record -o sdc.iotrace -d sdc --duration 60\n  iosplit-trace analyze sdc.iotrace"
    )]
    Record(RecordArgs),
    /// Report on a recording, or on blkparse / ftrace `blk` text, as the live run would.
    #[command(
        after_help = "Examples:\n  iosplit-trace analyze sdc.iotrace --json\n  iosplit-trace analyze --from blkparse --geometry check.json sdc.blkparse.txt\n  iosplit-trace analyze --from ftrace-blk --geometry check.json trace.txt\n\nThe geometry snapshot comes from `iosplit-trace check --json` on the traced machine."
    )]
    Analyze(AnalyzeArgs),
    /// Serve the measures and diagnoses to Prometheus on /metrics (and /healthz) until stopped.
    #[command(
        after_help = "Examples:\n  sudo iosplit-trace serve\n  sudo iosplit-trace serve --listen 0.0.0.0:9788 -d sdc\n\nSIGHUP re-reads the devices and starts the diagnoses afresh; served counters\nnever go down. Metrics are listed in docs/prometheus.md."
    )]
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Generated {
    Man,
    Bash,
    Zsh,
    Fish,
}

/// Writes the man page or completion script for `what` to `out`.
pub fn generate(what: Generated, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let shell = match what {
        Generated::Man => return clap_mangen::Man::new(command).render(out),
        Generated::Bash => clap_complete::Shell::Bash,
        Generated::Zsh => clap_complete::Shell::Zsh,
        Generated::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut command, "iosplit-trace", out);
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Print one report per interval, like iostat.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub interval: Option<f64>,
    /// Print one JSON document (schema in docs/json-schema.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write every event to a recording FILE, for `analyze` later.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// At the end, also write the HTML page `analyze --html` makes (from a
    /// temporary recording unless --record names one).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Add a section by who caused the I/O: process, cgroup or file (repeatable).
    #[arg(long = "by", value_enum, value_name = "VIEW")]
    pub by: Vec<ByView>,
}

/// `report --by`: the attribution views the text report adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByView {
    Process,
    Cgroup,
    File,
}

impl ByView {
    pub fn view(self) -> crate::model::OwnerView {
        match self {
            ByView::Process => crate::model::OwnerView::Process,
            ByView::Cgroup => crate::model::OwnerView::Cgroup,
            ByView::File => crate::model::OwnerView::File,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write every event to a recording FILE, for `analyze` later.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Devices to audit (default: every disk).
    #[arg(value_name = "DEV")]
    pub devices: Vec<String>,
    /// Print one JSON document instead of text.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print the findings and partition geometry in the Prometheus text format
    /// (for node_exporter's textfile collector).
    #[arg(long)]
    pub prometheus: bool,
    /// Write to FILE instead of stdout, atomically: a temporary file in the
    /// same directory, renamed over FILE once complete.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// The recording to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// A recording (`record`, `--record`), or text with `--from`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read another tool's text instead of a recording.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub from: Option<crate::record::import::TextFormat>,
    /// Geometry of the traced machine for `--from`: its `check --json` output.
    #[arg(long, value_name = "CHECK.json")]
    pub geometry: Option<PathBuf>,
    /// Also write one self-contained HTML page with plots and the diagnoses.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Also write a Chrome trace-event timeline (ui.perfetto.dev opens it).
    #[arg(long, value_name = "OUT.json")]
    pub perfetto: Option<PathBuf>,
    /// Add a section by who caused the I/O: process, cgroup or file (repeatable).
    #[arg(long = "by", value_enum, value_name = "VIEW")]
    pub by: Vec<ByView>,
}

/// Where `serve` listens unless told otherwise (loopback: exposing it is a choice).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9788";

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port to serve /metrics on.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,
    /// Also serve counters by who caused the I/O: process, cgroup or file
    /// (repeatable); the top owners per device plus `other`.
    #[arg(long = "by", value_enum, value_name = "VIEW")]
    pub by: Vec<ByView>,
}

/// Why a `--duration` or `--interval` value was refused (clap prints it).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SecondsError {
    #[error("`{text}` is not a number of seconds")]
    NotANumber {
        text: String,
        #[source]
        source: std::num::ParseFloatError,
    },
    #[error("`{text}` must be a positive number of seconds")]
    NotPositive { text: String },
}

/// A positive, finite number of seconds.
pub fn parse_seconds(text: &str) -> Result<f64, SecondsError> {
    let value: f64 = text.parse().map_err(|source| SecondsError::NotANumber {
        text: text.to_string(),
        source,
    })?;
    if !value.is_finite() || value <= 0.0 {
        return Err(SecondsError::NotPositive {
            text: text.to_string(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn man_page_and_completions_name_every_subcommand() {
        for what in [
            Generated::Man,
            Generated::Bash,
            Generated::Zsh,
            Generated::Fish,
        ] {
            let mut out = Vec::new();
            generate(what, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            for word in ["report", "run", "check", "device"] {
                assert!(text.contains(word), "{what:?} lacks {word}");
            }
        }
    }

    #[test]
    fn negative_and_zero_durations_are_refused() {
        for text in ["-1", "0", "nan", "inf"] {
            assert!(
                matches!(parse_seconds(text), Err(SecondsError::NotPositive { .. })),
                "{text}"
            );
        }
        assert!(matches!(
            parse_seconds("soon"),
            Err(SecondsError::NotANumber { .. })
        ));
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        let err = Cli::try_parse_from(["iosplit-trace", "report", "--duration", "-3"]).unwrap_err();
        assert!(err.to_string().contains("positive"), "{err}");
    }

    #[test]
    fn run_takes_everything_after_the_separator() {
        let cli = Cli::try_parse_from([
            "iosplit-trace",
            "-d",
            "loop0",
            "run",
            "--",
            "mkfs.ext4",
            "-F",
            "/dev/loop0p2",
        ])
        .unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["mkfs.ext4", "-F", "/dev/loop0p2"]);
        assert_eq!(cli.selection.devices, ["loop0"]);
    }

    #[test]
    fn owner_filters_and_views_repeat_next_to_the_device() {
        let cli = Cli::try_parse_from([
            "iosplit-trace",
            "report",
            "-p",
            "12",
            "--pid",
            "13",
            "--comm",
            "dd",
            "--cgroup",
            "/a",
            "--by",
            "file",
            "--by",
            "process",
        ])
        .unwrap();
        assert_eq!(cli.selection.pids, [12, 13]);
        assert_eq!(cli.selection.comms, ["dd"]);
        assert_eq!(cli.selection.cgroups, ["/a"]);
        assert!(cli.selection.filters_owners());
        let Some(Command::Report(report)) = cli.command else {
            panic!("not report")
        };
        assert_eq!(report.by, [ByView::File, ByView::Process]);
        assert!(Cli::try_parse_from(["iosplit-trace", "-p", "x"]).is_err());
        assert!(Cli::try_parse_from(["iosplit-trace", "report", "--by", "disk"]).is_err());
    }
}
