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
    // The live view's owner flags (each subcommand that applies them has its own).
    #[command(flatten)]
    pub filter: OwnerFilter,
    #[command(flatten)]
    pub read: ReadOwners,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The devices the user selected with `-d` (none: every disk).
#[derive(Debug, Clone, Default, Args)]
pub struct DeviceSelection {
    /// Device to trace: sdc, sdc2, /dev/sdc2 or 8:34 (repeatable; a partition implies its disk). Default: every disk.
    #[arg(short = 'd', long = "device", value_name = "DEV", global = true)]
    pub devices: Vec<String>,
}

/// Whose I/O to keep: `-p`, `--cgroup`, `--comm`, applied in the kernel. Only
/// the live view and `report` apply them, so only they accept them.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct OwnerFilter {
    /// Trace only I/O submitted by process PID (repeatable). Filtered in the kernel; writeback by kernel threads is not the process's.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace only I/O charged to cgroup PATH, as /proc/PID/cgroup shows it in the blkio (v1) or unified (v2) hierarchy (repeatable; not its children). Filtered in the kernel.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// Trace only I/O submitted by tasks named NAME, as `ps -o comm` shows them (repeatable). Filtered in the kernel.
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
}

impl OwnerFilter {
    /// Whether any owner filter (`-p`, `--cgroup`, `--comm`) was given.
    pub fn filters_owners(&self) -> bool {
        !self.pids.is_empty() || !self.cgroups.is_empty() || !self.comms.is_empty()
    }

    /// The flag a user gave first, for a usage error.
    fn first_flag(&self) -> Option<&'static str> {
        [
            (!self.pids.is_empty(), "-p/--pid"),
            (!self.cgroups.is_empty(), "--cgroup"),
            (!self.comms.is_empty(), "--comm"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    fn absorb(&mut self, before: OwnerFilter) {
        let OwnerFilter {
            pids,
            cgroups,
            comms,
        } = before;
        self.pids.splice(0..0, pids);
        self.cgroups.splice(0..0, cgroups);
        self.comms.splice(0..0, comms);
    }
}

/// `--no-owners` (and `--owners`, the default), in every command that traces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Args)]
pub struct ReadOwners {
    /// Read who submitted each bio (process, cgroup, file) for the attribution views. The default; accepted so scripts that ask for it keep working.
    #[arg(long = "owners", overrides_with = "no_owners")]
    pub owners: bool,
    /// Do not read who submitted each bio: no attribution views, for the last bit of overhead (see docs/benchmarks.md). --by and the owner filters still read owners where a command takes them.
    #[arg(long = "no-owners", overrides_with = "owners")]
    pub no_owners: bool,
}

impl ReadOwners {
    /// Whether owners are read: unless turned off, or when `implied` (by an
    /// owner filter or an attribution view, like `--by`).
    pub fn reads_owners(self, implied: bool) -> bool {
        !self.no_owners || implied
    }
}

/// Parses the command line; on a usage error prints it and exits with
/// status 2, as clap does.
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|err| err.exit())
}

/// Parses `args`, then hands the owner flags given before the subcommand
/// (`iosplit-trace --owners report`) to the subcommand. A subcommand that does
/// not apply a flag refuses it there too, as a usage error naming it.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cli = Cli::try_parse_from(args)?;
    let Some(command) = cli.command.as_mut() else {
        return Ok(cli);
    };
    let filter = std::mem::take(&mut cli.filter);
    let read = std::mem::take(&mut cli.read);
    let name = command.name();
    let refuse = |flag: &str| {
        use clap::CommandFactory;
        let mut top = Cli::command();
        // Built, so the usage it prints names the program.
        top.build();
        let message = format!("the argument '{flag}' cannot be used with '{name}'");
        match top.find_subcommand_mut(name) {
            Some(sub) => sub.error(clap::error::ErrorKind::ArgumentConflict, message),
            None => top.error(clap::error::ErrorKind::ArgumentConflict, message),
        }
    };
    match command.owner_filter_mut() {
        Some(own) => own.absorb(filter),
        None => {
            if let Some(flag) = filter.first_flag() {
                return Err(refuse(flag));
            }
        }
    }
    match command.read_owners_mut() {
        // The subcommand's own flag wins over one given before it.
        Some(own) if !own.owners && !own.no_owners => *own = read,
        Some(_) => {}
        None if read.owners => return Err(refuse("--owners")),
        None if read.no_owners => return Err(refuse("--no-owners")),
        None => {}
    }
    Ok(cli)
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
    /// Compare two reports of one workload, before and after a fix: side by side, and each prediction against what was measured.
    #[command(
        after_help = "Examples:\n  sudo iosplit-trace run --json -o before.json -- mkfs.ext4 -F /dev/sdc2\n  (apply the fix the report names, then)\n  sudo iosplit-trace run --json -o after.json -- mkfs.ext4 -F /dev/sdc2\n  iosplit-trace compare before.json after.json\n\nEither side is a JSON report (report, run or analyze --json) or a recording."
    )]
    Compare(CompareArgs),
}

impl Command {
    /// The subcommand's name on the command line.
    fn name(&self) -> &'static str {
        match self {
            Command::Report(_) => "report",
            Command::Run(_) => "run",
            Command::Generate { .. } => "generate",
            Command::Check(_) => "check",
            Command::Record(_) => "record",
            Command::Analyze(_) => "analyze",
            Command::Serve(_) => "serve",
            Command::Compare(_) => "compare",
        }
    }

    /// The owner filters, where this subcommand applies them.
    fn owner_filter_mut(&mut self) -> Option<&mut OwnerFilter> {
        match self {
            Command::Report(args) => Some(&mut args.filter),
            _ => None,
        }
    }

    /// `--owners`, where this subcommand traces.
    fn read_owners_mut(&mut self) -> Option<&mut ReadOwners> {
        match self {
            Command::Report(args) => Some(&mut args.read),
            Command::Run(args) => Some(&mut args.read),
            Command::Record(args) => Some(&mut args.read),
            Command::Serve(args) => Some(&mut args.read),
            Command::Generate { .. }
            | Command::Check(_)
            | Command::Analyze(_)
            | Command::Compare(_) => None,
        }
    }
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
    #[command(flatten)]
    pub filter: OwnerFilter,
    #[command(flatten)]
    pub read: ReadOwners,
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
    #[command(flatten)]
    pub read: ReadOwners,
    /// Do not stop the command at each open for writing until the file is
    /// held: files it writes, closes and removes at once may then be missed.
    #[arg(long)]
    pub no_pause: bool,
    /// Follow the running process PID (and the children it forks from now
    /// on) instead of starting a command, until it exits or Ctrl-C.
    #[arg(long, short = 'p', value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// The command and its arguments, after `--`. Everything from the first
    /// word that is not one of run's own flags is the command's; a flag run
    /// does not take, before it, is a usage error.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
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
    #[command(flatten)]
    pub read: ReadOwners,
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

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The report (or recording) taken before the fix.
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,
    /// The report (or recording) of the same workload after it.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Compare device BEFORE_NAME of BEFORE with AFTER_NAME of AFTER, when the
    /// fix renamed it (repeatable; same-named devices pair by themselves).
    #[arg(long, value_name = "BEFORE_NAME=AFTER_NAME")]
    pub pair: Vec<String>,
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
    #[command(flatten)]
    pub read: ReadOwners,
    /// TLS and basic auth, in the web configuration file Prometheus exporters
    /// share (exporter-toolkit's: tls_server_config, basic_auth_users).
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
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
        let cli = parse_from([
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
        // Without the separator too: the command's own flags are its own.
        let cli = parse_from(["iosplit-trace", "run", "--json", "dd", "-d", "x"]).unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        assert!(run.json);
        assert_eq!(run.command, ["dd", "-d", "x"]);
    }

    #[test]
    fn owner_filters_and_views_repeat_next_to_the_device() {
        let cli = parse_from([
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
        let Some(Command::Report(report)) = cli.command else {
            panic!("not report")
        };
        assert_eq!(report.filter.pids, [12, 13]);
        assert_eq!(report.filter.comms, ["dd"]);
        assert_eq!(report.filter.cgroups, ["/a"]);
        assert!(report.filter.filters_owners());
        assert_eq!(report.by, [ByView::File, ByView::Process]);
        assert!(parse_from(["iosplit-trace", "-p", "x"]).is_err());
        assert!(parse_from(["iosplit-trace", "report", "--by", "disk"]).is_err());
    }

    #[test]
    fn owners_are_read_unless_turned_off_and_a_filter_still_reads_them() {
        let read = |args: &[&str]| {
            let cli = parse_from(args).unwrap();
            match cli.command {
                Some(Command::Report(report)) => report.read,
                None => cli.read,
                _ => panic!("not report"),
            }
        };
        assert!(read(&["iosplit-trace", "report"]).reads_owners(false));
        assert!(read(&["iosplit-trace"]).reads_owners(false));
        let off = read(&["iosplit-trace", "report", "--no-owners"]);
        assert!(!off.reads_owners(false));
        assert!(off.reads_owners(true), "an owner filter or --by needs them");
        assert!(!read(&["iosplit-trace", "--no-owners", "report"]).reads_owners(false));
        assert!(read(&["iosplit-trace", "--no-owners", "report", "--owners"]).reads_owners(false));
        assert!(read(&["iosplit-trace", "report", "--owners", "--no-owners"]) == off);
    }

    #[test]
    fn owner_flags_before_the_subcommand_go_to_it_where_it_takes_them() {
        let cli = parse_from([
            "iosplit-trace",
            "-d",
            "loop0",
            "--cgroup",
            "/a",
            "--owners",
            "report",
            "--cgroup",
            "/b",
        ])
        .unwrap();
        assert_eq!(cli.filter, OwnerFilter::default());
        let Some(Command::Report(report)) = cli.command else {
            panic!("not report")
        };
        assert_eq!(report.filter.cgroups, ["/a", "/b"]);
        assert!(report.read.owners);
        let cli = parse_from(["iosplit-trace", "--owners", "run", "--", "true"]).unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        assert!(run.read.owners);
        // The live view keeps its own.
        let cli = parse_from(["iosplit-trace", "-p", "7", "--owners"]).unwrap();
        assert_eq!(cli.filter.pids, [7]);
        assert!(cli.read.owners);
        for (args, flag) in [
            (
                &["iosplit-trace", "--no-owners", "check"][..],
                "--no-owners",
            ),
            (
                &["iosplit-trace", "-p", "1", "run", "--", "true"][..],
                "--pid",
            ),
            (&["iosplit-trace", "--comm", "dd", "serve"], "--comm"),
            (&["iosplit-trace", "--owners", "check"][..], "--owners"),
        ] {
            let err = parse_from(args).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains(flag), "{args:?}: {err}");
        }
    }

    /// A plausible value for an option, so that parsing tests the flag.
    fn sample_value(arg: &clap::Arg) -> Option<String> {
        if !arg.get_action().takes_values() {
            return None;
        }
        if let Some(value) = arg.get_possible_values().first() {
            return Some(value.get_name().to_string());
        }
        let name = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default();
        Some(
            match name.as_str() {
                "PID" | "SECS" => "1",
                "ADDR:PORT" => "127.0.0.1:0",
                _ => "x",
            }
            .to_string(),
        )
    }

    /// The flags a help text lists: each word that starts an option line.
    fn flags_in_help(help: &str) -> Vec<String> {
        help.lines()
            .map(str::trim_start)
            .filter(|line| line.starts_with('-'))
            .flat_map(|line| {
                line.split([' ', ','])
                    .filter(|word| !word.is_empty())
                    .take_while(|word| word.starts_with('-'))
                    .map(|word| word.split('=').next().unwrap_or(word).to_string())
                    .collect::<Vec<_>>()
            })
            .filter(|flag| flag != "-" && flag != "--")
            .collect()
    }

    #[test]
    fn every_flag_a_help_lists_is_one_its_command_takes() {
        // Built, so each subcommand has its help flag and the global -d.
        let mut top = Cli::command();
        top.build();
        let mut checked = 0;
        // The top level (the live view) first, then each subcommand; clap's
        // own `help` subcommand has no flags.
        let commands = std::iter::once((None, &top)).chain(
            top.get_subcommands()
                .filter(|sub| sub.get_name() != "help")
                .map(|sub| (Some(sub.get_name()), sub)),
        );
        for (name, sub) in commands {
            let help = sub.clone().render_long_help().to_string();
            let listed = flags_in_help(&help);
            assert!(listed.iter().any(|f| f == "--help"), "{name:?}: {help}");
            for flag in listed {
                if ["--help", "-h", "--version", "-V"].contains(&flag.as_str()) {
                    continue;
                }
                let arg = sub
                    .get_arguments()
                    .find(|arg| {
                        arg.get_long().map(|l| format!("--{l}")) == Some(flag.clone())
                            || arg.get_short().map(|s| format!("-{s}")) == Some(flag.clone())
                    })
                    .unwrap_or_else(|| panic!("{name:?}: help lists {flag}, no such argument"));
                let mut args = vec!["iosplit-trace".to_string()];
                args.extend(name.map(str::to_string));
                // The flag with a plausible value, then the required positionals.
                args.push(flag.clone());
                args.extend(sample_value(arg));
                for positional in sub.get_positionals().filter(|a| a.is_required_set()) {
                    args.push(sample_value(positional).unwrap_or_else(|| "x".into()));
                }
                // run takes a command or --pid, not both.
                if name == Some("run") && flag != "--pid" && flag != "-p" {
                    args.extend(["--".to_string(), "true".to_string()]);
                }
                let parsed = match parse_from(&args) {
                    Err(err) if err.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
                        // `record` needs -o: add it.
                        let mut more = args.clone();
                        more.extend(["-o".to_string(), "x".to_string()]);
                        parse_from(&more)
                    }
                    other => other,
                };
                let cli = parsed.unwrap_or_else(|err| panic!("{args:?}: {err}"));
                assert_eq!(cli.command.is_some(), name.is_some(), "{args:?}");
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} flags checked");
        // And what a subcommand does not list, it refuses: run's owner filters.
        let err = parse_from(["iosplit-trace", "run", "--cgroup", "/a", "--", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("'--cgroup'"), "{err}");
        // run's --pid is a process to follow, never with a command too.
        let err = parse_from(["iosplit-trace", "run", "-p", "1", "--", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let run_help = top
            .find_subcommand("run")
            .unwrap()
            .clone()
            .render_long_help()
            .to_string();
        for flag in ["--cgroup", "--comm"] {
            assert!(!run_help.contains(flag), "run --help lists {flag}");
        }
        assert!(run_help.contains("--pid <PID>"), "{run_help}");
        assert!(run_help.contains("--owners"), "{run_help}");
    }
}
