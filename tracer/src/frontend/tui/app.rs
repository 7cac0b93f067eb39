//! TUI state. Pure — no ratatui, no I/O — so it is unit-testable.
//!
//! The event loop feeds it snapshots and decoded keys; [`App::on_key`] decides
//! and returns an [`Action`] whose I/O (reset, quit) the loop performs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::model::{
    ratio, Bucket, Diagnosis, Distribution, Measures, OpMeasures, OwnerEntry, OwnerKnown,
    OwnerMeasures, Report, Severity,
};

use crate::frontend::words::by_severity;
use crate::frontend::{units, words};

/// Keys the TUI reacts to, decoded from terminal events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Enter,
    Tab,
    Esc,
    CtrlC,
    Char(char),
    Other,
}

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do (no redraw needed).
    None,
    Quit,
    /// Zero the counters (the loop calls `LiveSource::reset`).
    Reset,
    TogglePause,
    SelectUp,
    SelectDown,
    ToggleDetail,
    /// Switch the table between devices, processes, cgroups and files.
    NextView,
}

/// What the main table lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableView {
    #[default]
    Devices,
    Processes,
    Cgroups,
    Files,
}

impl TableView {
    pub fn next(self) -> TableView {
        match self {
            TableView::Devices => TableView::Processes,
            TableView::Processes => TableView::Cgroups,
            TableView::Cgroups => TableView::Files,
            TableView::Files => TableView::Devices,
        }
    }

    /// The first column's header.
    pub fn label(self) -> &'static str {
        match self {
            TableView::Devices => "device",
            TableView::Processes => "process",
            TableView::Cgroups => "cgroup",
            TableView::Files => "file",
        }
    }
}

/// Events per second from two counter readings `elapsed` apart; 0 when no time
/// passed, and counters that went backwards (a reset in between) count as 0.
pub fn per_second(now: u64, before: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds <= 0.0 {
        return 0.0;
    }
    now.saturating_sub(before) as f64 / seconds
}

/// Counters of one disk or partition, summed over operation classes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub user_ios: u64,
    pub commands: u64,
    pub bytes: u64,
    pub splits: u64,
    pub merges: u64,
    pub misaligned_pbs_commands: u64,
    /// Bytes the commands carried, where `commands_sized`.
    pub command_bytes: f64,
    /// Whether commands were measured by size: a device's are, an owner's
    /// are not (see [`Totals::of_owner`]).
    pub commands_sized: bool,
    /// Worst p99 queue→complete latency of any operation class, µs; `None`
    /// before any latency was measured.
    pub p99_us: Option<u64>,
}

impl Totals {
    /// An owner's totals, as the report's attribution has them. Its bytes
    /// are its user I/Os' bytes, counted at queue; its commands are those
    /// whose first fragment is its own. So bytes over commands is no command
    /// size (a command credited elsewhere, or merged with another owner's
    /// bios, moves it: half the commands made it read twice the size), and
    /// no size per command is kept; alignment is not kept per owner either.
    pub fn of_owner(measures: &OwnerMeasures) -> Totals {
        Totals {
            user_ios: measures.user_ios,
            commands: measures.commands,
            bytes: measures.bytes,
            splits: measures.splits,
            merges: measures.merges,
            misaligned_pbs_commands: 0,
            command_bytes: 0.0,
            commands_sized: false,
            p99_us: (measures.queue_to_complete_us.count > 0)
                .then_some(measures.queue_to_complete_us.p99),
        }
    }

    pub fn of(measures: &Measures) -> Totals {
        let mut totals = Totals::default();
        let mut counts = OpMeasures::default();
        for op in measures.ops.values() {
            counts.add_counts(op);
            totals.command_bytes += op.command_size.mean * op.command_size.count as f64;
            if op.queue_to_complete_us.count > 0 {
                let p99 = op.queue_to_complete_us.p99;
                totals.p99_us = Some(totals.p99_us.map_or(p99, |worst| worst.max(p99)));
            }
        }
        totals.user_ios = counts.user_ios;
        totals.commands = counts.commands;
        totals.bytes = counts.bytes;
        totals.splits = counts.splits;
        totals.merges = counts.merges;
        totals.misaligned_pbs_commands = counts.misaligned_pbs_commands;
        totals.commands_sized = true;
        totals
    }

    pub fn amplification(&self) -> f64 {
        ratio(self.commands, self.user_ios)
    }

    pub fn split_share(&self) -> f64 {
        ratio(self.splits, self.user_ios)
    }

    pub fn merge_share(&self) -> f64 {
        ratio(self.merges, self.user_ios)
    }

    pub fn misaligned_share(&self) -> f64 {
        ratio(self.misaligned_pbs_commands, self.commands)
    }

    /// Bytes per user I/O: for an owner the number the report's
    /// attribution gives (its `bytes` over its `user_ios`).
    pub fn avg_user_io_bytes(&self) -> f64 {
        words::bytes_per_user_io(self.bytes, self.user_ios)
    }

    /// Bytes per command, where `commands_sized` (0 otherwise, and without commands).
    pub fn avg_command_bytes(&self) -> f64 {
        if self.commands == 0 || !self.commands_sized {
            0.0
        } else {
            self.command_bytes / self.commands as f64
        }
    }
}

/// One line of the device table: rates over the last interval, everything
/// else since the start (or the last reset).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub is_partition: bool,
    /// A process, cgroup or file on a device (no alignment counts): its
    /// index in the view's list of the report's attribution.
    pub owner: Option<usize>,
    /// Most severe diagnosis on this device, if any.
    pub severity: Option<Severity>,
    pub user_ios_per_s: f64,
    pub commands_per_s: f64,
    pub totals: Totals,
}

/// What the detail pane shows for the selected row.
#[derive(Clone, Debug, PartialEq)]
pub struct Detail<'a> {
    pub name: &'a str,
    pub user_io_size: Distribution,
    pub command_size: Distribution,
    pub splits: u64,
    pub split_causes: BTreeMap<String, u64>,
    pub diagnoses: Vec<&'a Diagnosis>,
    /// The row's device measures (none for owners): they name the operation
    /// a diagnosis's prediction is about.
    pub measures: Option<&'a Measures>,
    /// Per operation, what only some devices have (requeues), in words;
    /// empty on a quiet device.
    pub notes: Vec<String>,
    /// Owner rows: queue->issue against issue->complete, and which dominates.
    pub times: Vec<String>,
}

/// Counters at one instant, to compute rates from the next.
#[derive(Clone, Debug, Default)]
struct Sample {
    at: Duration,
    events: u64,
    totals: HashMap<String, Totals>,
}

#[derive(Debug, Default)]
pub struct App {
    /// The report on screen (frozen while paused).
    pub report: Option<Report>,
    pub rows: Vec<Row>,
    pub events_per_s: f64,
    pub selected: usize,
    pub detail: bool,
    pub paused: bool,
    pub view: TableView,
    /// Trace uptime at the shown snapshot.
    pub uptime: Duration,
    previous: Sample,
}

impl App {
    pub fn new() -> Self {
        App::default()
    }

    /// Takes a new snapshot taken at `uptime`. Ignored while paused; returns
    /// whether the view changed.
    pub fn on_snapshot(&mut self, report: Report, uptime: Duration) -> bool {
        if self.paused {
            return false;
        }
        let elapsed = uptime.saturating_sub(self.previous.at);
        let mut sample = Sample {
            at: uptime,
            events: report.events.total(),
            totals: HashMap::new(),
        };
        let selected_name = self.rows.get(self.selected).map(|row| row.name.clone());
        let (rows, totals) = self.rows_of(&report, elapsed);
        sample.totals = totals;
        self.events_per_s = per_second(sample.events, self.previous.events, elapsed);
        // Keep the same device selected when rows come and go.
        self.selected = selected_name
            .and_then(|name| rows.iter().position(|row| row.name == name))
            .unwrap_or(self.selected)
            .min(rows.len().saturating_sub(1));
        self.rows = rows;
        self.report = Some(report);
        self.uptime = uptime;
        self.previous = sample;
        true
    }

    /// The rows of the current view, rates against the previous sample.
    fn rows_of(&self, report: &Report, elapsed: Duration) -> (Vec<Row>, HashMap<String, Totals>) {
        let mut entries: Vec<(String, Totals, bool, Option<usize>)> = Vec::new();
        let owners = |list: fn(&crate::model::Attribution) -> &Vec<OwnerEntry>| {
            report
                .attribution
                .as_ref()
                .map_or(Vec::new(), |attribution| {
                    list(attribution)
                        .iter()
                        .enumerate()
                        .map(|(index, entry)| {
                            let name = format!("{} ({})", owner_label(entry), entry.device);
                            (name, Totals::of_owner(&entry.measures), false, Some(index))
                        })
                        .collect()
                })
        };
        match self.view {
            TableView::Devices => {
                for device in &report.devices {
                    entries.push((
                        device.name.clone(),
                        Totals::of(&device.measures),
                        false,
                        None,
                    ));
                    for part in &device.partitions {
                        entries.push((part.name.clone(), Totals::of(&part.measures), true, None));
                    }
                }
            }
            TableView::Processes => entries = owners(|a| &a.processes),
            TableView::Cgroups => entries = owners(|a| &a.cgroups),
            TableView::Files => entries = owners(|a| &a.files),
        }
        let mut rows = Vec::new();
        let mut totals_by_name = HashMap::new();
        for (name, totals, is_partition, owner) in entries {
            let before = self.previous.totals.get(&name);
            let before_user = before.map_or(0, |t| t.user_ios);
            let before_commands = before.map_or(0, |t| t.commands);
            rows.push(Row {
                severity: owner
                    .is_none()
                    .then(|| most_severe(&report.diagnoses, &name))
                    .flatten(),
                user_ios_per_s: per_second(totals.user_ios, before_user, elapsed),
                commands_per_s: per_second(totals.commands, before_commands, elapsed),
                name: name.clone(),
                is_partition,
                owner,
                totals: totals.clone(),
            });
            totals_by_name.insert(name, totals);
        }
        (rows, totals_by_name)
    }

    /// The next view, from the report on screen; its rates start at the next snapshot.
    fn switch_view(&mut self) {
        self.view = self.view.next();
        self.selected = 0;
        self.detail = false;
        let Some(report) = self.report.take() else {
            self.rows.clear();
            return;
        };
        let (mut rows, totals) = self.rows_of(&report, Duration::ZERO);
        for row in &mut rows {
            row.user_ios_per_s = 0.0;
            row.commands_per_s = 0.0;
        }
        self.rows = rows;
        self.previous.totals = totals;
        self.report = Some(report);
    }

    /// Counters were zeroed at `uptime`: drop what is shown, rates restart from there.
    pub fn on_reset(&mut self, uptime: Duration) {
        self.previous = Sample {
            at: uptime,
            ..Sample::default()
        };
        self.report = None;
        self.rows.clear();
        self.events_per_s = 0.0;
        self.selected = 0;
        self.uptime = uptime;
    }

    pub fn on_key(&mut self, key: Key) -> Action {
        let action = match key {
            Key::Char('q') | Key::CtrlC => Action::Quit,
            Key::Char('r') => Action::Reset,
            Key::Char('p') => Action::TogglePause,
            Key::Up | Key::Char('k') => Action::SelectUp,
            Key::Down | Key::Char('j') => Action::SelectDown,
            Key::Enter | Key::Tab => Action::ToggleDetail,
            Key::Esc if self.detail => Action::ToggleDetail,
            Key::Char('v') => Action::NextView,
            _ => Action::None,
        };
        match action {
            Action::TogglePause => self.paused = !self.paused,
            Action::SelectUp => self.selected = self.selected.saturating_sub(1),
            Action::SelectDown => {
                if self.selected + 1 < self.rows.len() {
                    self.selected += 1;
                }
            }
            Action::ToggleDetail => self.detail = !self.detail,
            Action::NextView => self.switch_view(),
            Action::None | Action::Quit | Action::Reset => {}
        }
        action
    }

    /// Events the kernel could not hand over since the start (or reset).
    /// Block events lost: ring full, or skipped by the kernel.
    pub fn drops(&self) -> u64 {
        self.report
            .as_ref()
            .map_or(0, |report| report.events.dropped + report.events.missed)
    }

    pub fn selected_row(&self) -> Option<&Row> {
        self.rows.get(self.selected)
    }

    /// Histograms, split causes and diagnoses of the selected row, over all op classes.
    pub fn detail(&self) -> Option<Detail<'_>> {
        let report = self.report.as_ref()?;
        let row = self.selected_row()?;
        if let Some(index) = row.owner {
            return self.owner_detail(report, row, index);
        }
        let (measures, stack) = report.devices.iter().find_map(|device| {
            if device.name == row.name {
                Some((&device.measures, device.geometry.stack.as_ref()))
            } else {
                device
                    .partitions
                    .iter()
                    .find(|part| part.name == row.name)
                    .map(|part| (&part.measures, None))
            }
        })?;
        let mut split_causes = BTreeMap::new();
        for op in measures.ops.values() {
            for (cause, count) in &op.split_causes {
                *split_causes.entry(cause.key().to_string()).or_insert(0) += count;
            }
        }
        let notes = measures
            .ops
            .iter()
            .flat_map(|(op, m)| {
                let requeues =
                    words::requeues(m).map(|said| format!("{}: {said}", words::op_plural(*op)));
                let failures = words::failures(*op, m)
                    .map(|said| format!("{}: {said}", words::op_plural(*op)));
                let untorn = m
                    .atomic_writes
                    .as_ref()
                    .and_then(words::atomic_writes)
                    .map(|said| format!("untorn: {said}"));
                requeues.into_iter().chain(failures).chain(untorn)
            })
            .chain(stack.map(|stack| format!("stack: {}", stack.summary(&row.name))))
            .collect();
        Some(Detail {
            name: &row.name,
            user_io_size: merged(measures.ops.values().map(|op| &op.user_io_size)),
            command_size: merged(measures.ops.values().map(|op| &op.command_size)),
            splits: row.totals.splits,
            split_causes,
            diagnoses: by_severity(&report.diagnoses)
                .into_iter()
                .filter(|diagnosis| diagnosis.device == row.name)
                .collect(),
            measures: Some(measures),
            notes,
            times: Vec::new(),
        })
    }

    /// An owner row's detail: its counts and timing; sizes and diagnoses
    /// are per device. Lines are short and wrapped by the pane, never cut.
    fn owner_detail<'a>(
        &'a self,
        report: &'a Report,
        row: &'a Row,
        index: usize,
    ) -> Option<Detail<'a>> {
        let attribution = report.attribution.as_ref()?;
        let list = match self.view {
            TableView::Devices => return None,
            TableView::Processes => &attribution.processes,
            TableView::Cgroups => &attribution.cgroups,
            TableView::Files => &attribution.files,
        };
        let measures = &list.get(index)?.measures;
        let p99 = |dist: &Distribution| {
            if dist.count == 0 {
                "-".to_string()
            } else {
                units::micros(dist.p99)
            }
        };
        let verdict = match measures.dominant {
            Some(crate::model::Dominant::Queue) => "queue time dominates",
            Some(crate::model::Dominant::Device) => "device time dominates",
            None => "too few commands to tell queue from device time",
        };
        let times = vec![
            format!(
                "{} user I/Os (avg {}) -> {} commands",
                units::thousands(measures.user_ios),
                units::bytes(words::bytes_per_user_io(measures.bytes, measures.user_ios)),
                units::thousands(measures.commands),
            ),
            format!(
                "splits {}, merges {} of user I/Os",
                units::percent(measures.split_share),
                units::percent(measures.merge_share)
            ),
            format!("queue->issue p99     {}", p99(&measures.queue_to_issue_us)),
            format!(
                "issue->complete p99  {}",
                p99(&measures.issue_to_complete_us)
            ),
            format!(
                "queue->complete p99  {}",
                p99(&measures.queue_to_complete_us)
            ),
            verdict.to_string(),
            "sizes, diagnoses: per device (v)".to_string(),
        ];
        Some(Detail {
            name: &row.name,
            user_io_size: Distribution::default(),
            command_size: Distribution::default(),
            splits: measures.splits,
            split_causes: BTreeMap::new(),
            diagnoses: Vec::new(),
            measures: None,
            notes: Vec::new(),
            times,
        })
    }
}

/// An owner as a table row names it; unknown owners say so.
fn owner_label(entry: &OwnerEntry) -> String {
    match entry.owner {
        OwnerKnown::Other => "other".to_string(),
        OwnerKnown::KernelThread => "[kernel thread]".to_string(),
        OwnerKnown::NoFile => "[no file]".to_string(),
        OwnerKnown::Unknown => "[unknown]".to_string(),
        OwnerKnown::Known => {
            if let Some(pid) = entry.pid {
                return format!("{} {pid}", entry.comm.as_deref().unwrap_or("?"));
            }
            if let Some(id) = entry.cgroup_id {
                return entry
                    .cgroup
                    .clone()
                    .unwrap_or_else(|| format!("cgroup {id}"));
            }
            entry.file_name().unwrap_or_else(|| "[unknown]".to_string())
        }
    }
}

fn most_severe(diagnoses: &[Diagnosis], device: &str) -> Option<Severity> {
    diagnoses
        .iter()
        .filter(|diagnosis| diagnosis.device == device)
        .map(|diagnosis| diagnosis.severity)
        .max()
}

/// Buckets of several distributions added up (percentiles are not mergeable
/// and are left at 0; the detail pane only draws buckets).
fn merged<'a>(parts: impl Iterator<Item = &'a Distribution>) -> Distribution {
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    let mut merged = Distribution::default();
    for part in parts {
        merged.count += part.count;
        for bucket in &part.buckets {
            *buckets.entry(bucket.low).or_insert(0) += bucket.count;
        }
    }
    merged.buckets = buckets
        .into_iter()
        .map(|(low, count)| Bucket { low, count })
        .collect();
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::{empty_report, seed_report};
    use crate::model::{Code, Op};

    fn secs(value: u64) -> Duration {
        Duration::from_secs(value)
    }

    /// A report with two processes on loop0p1, one a kernel thread.
    fn attributed(user_ios: u64) -> Report {
        use crate::model::{Attribution, FoldedOwners};
        let measures = OwnerMeasures {
            user_ios,
            commands: 2 * user_ios,
            bytes: user_ios * 4096,
            ..OwnerMeasures::default()
        };
        let mut dd = OwnerEntry::new(OwnerKnown::Known, "loop0p1".into(), measures.clone());
        dd.pid = Some(77);
        dd.comm = Some("dd".into());
        let kworker = OwnerEntry::new(OwnerKnown::KernelThread, "loop0p1".into(), measures);
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd, kworker],
            cgroups: Vec::new(),
            files: Vec::new(),
            folded: FoldedOwners::default(),
            text_views: Vec::new(),
        });
        report
    }

    #[test]
    fn v_cycles_devices_processes_cgroups_files_and_rates_restart() {
        let mut app = App::new();
        app.on_snapshot(attributed(10), secs(1));
        let devices = app.rows.len();
        assert!(app.rows.iter().all(|row| row.owner.is_none()));
        assert_eq!(app.on_key(Key::Char('v')), Action::NextView);
        assert_eq!(app.view, TableView::Processes);
        let names: Vec<&str> = app.rows.iter().map(|row| row.name.as_str()).collect();
        assert_eq!(names, ["dd 77 (loop0p1)", "[kernel thread] (loop0p1)"]);
        assert!(app
            .rows
            .iter()
            .all(|row| row.owner.is_some() && row.severity.is_none()));
        assert_eq!(app.rows[0].totals.amplification(), 2.0);
        // No spike: the switch took the baseline.
        assert_eq!(app.rows[0].user_ios_per_s, 0.0);
        app.on_snapshot(attributed(30), secs(3));
        assert_eq!(app.rows[0].user_ios_per_s, 10.0);
        // Enter: the owner's timing, not a device's histograms.
        app.on_key(Key::Enter);
        let detail = app.detail().unwrap();
        assert_eq!(detail.name, "dd 77 (loop0p1)");
        assert!(detail
            .times
            .iter()
            .any(|line| line.contains("queue->issue")));
        assert!(detail.diagnoses.is_empty());
        app.on_key(Key::Char('v'));
        assert_eq!(app.view, TableView::Cgroups);
        assert!(app.rows.is_empty());
        app.on_key(Key::Char('v'));
        app.on_key(Key::Char('v'));
        assert_eq!(app.view, TableView::Devices);
        assert_eq!(app.rows.len(), devices);
        // Without attribution (the classic flavor's report still has it, empty) nothing breaks.
        let mut app = App::new();
        app.on_snapshot(empty_report(), secs(1));
        app.on_key(Key::Char('v'));
        assert!(app.rows.is_empty() && app.detail().is_none());
    }

    /// Three `dd bs=64k oflag=direct` runs as the report's attribution has
    /// them: 65,230 B per user I/O each; the engine credited the first with
    /// half as many commands as user I/Os and the last with twice as many.
    fn three_dd_runs() -> Report {
        use crate::model::{Attribution, FoldedOwners};
        let processes = [(101, 800), (102, 1600), (103, 3200)]
            .into_iter()
            .map(|(pid, commands)| {
                let measures = OwnerMeasures {
                    user_ios: 1600,
                    commands,
                    bytes: 1600 * 65230,
                    amplification: ratio(commands, 1600),
                    ..OwnerMeasures::default()
                };
                let mut dd = OwnerEntry::new(OwnerKnown::Known, "vda".into(), measures);
                dd.pid = Some(pid);
                dd.comm = Some("dd".into());
                dd
            })
            .collect();
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes,
            cgroups: Vec::new(),
            files: Vec::new(),
            folded: FoldedOwners::default(),
            text_views: Vec::new(),
        });
        report
    }

    #[test]
    fn owner_rows_show_the_reports_bytes_per_user_io_and_no_command_size() {
        let mut app = App::new();
        app.on_snapshot(three_dd_runs(), secs(1));
        app.on_key(Key::Char('v'));
        assert_eq!(app.rows.len(), 3);
        for row in &app.rows {
            // JSON: bytes / user_ios = 65,230 for every run.
            assert_eq!(row.totals.avg_user_io_bytes(), 65230.0, "{}", row.name);
            // Bytes over the commands credited to the owner is no command size.
            assert!(!row.totals.commands_sized, "{}", row.name);
            assert_eq!(row.totals.avg_command_bytes(), 0.0);
        }
        // Device rows keep their command sizes.
        let devices = Totals::of(&seed_report().devices[1].measures);
        assert!(devices.commands_sized);
        assert_eq!(devices.avg_command_bytes(), 131072.0);

        let screen = super::super::render::testing::screen(&app, 80, 24);
        let rows: Vec<&String> = screen
            .iter()
            .filter(|line| line.contains("dd 10"))
            .collect();
        assert_eq!(rows.len(), 3, "{}", screen.join("\n"));
        for row in rows {
            assert!(row.contains("63.7K"), "{row}");
            assert!(!row.contains("127K") && !row.contains("31.9K"), "{row}");
        }
    }

    #[test]
    fn owner_detail_counts_its_user_ios_like_the_report() {
        let mut app = App::new();
        app.on_snapshot(three_dd_runs(), secs(1));
        app.on_key(Key::Char('v'));
        app.on_key(Key::Enter);
        let detail = app.detail().unwrap();
        assert_eq!(
            detail.times[0],
            "1,600 user I/Os (avg 63.7 KiB) -> 800 commands"
        );
        assert!(detail.notes.is_empty() && detail.measures.is_none());
    }

    #[test]
    fn device_detail_says_requeues_per_op_only_where_there_were_some() {
        let mut app = App::new();
        app.on_snapshot(crate::frontend::test_reports::requeued_report(), secs(1));
        app.selected = app.rows.iter().position(|r| r.name == "vda").unwrap();
        let detail = app.detail().unwrap();
        assert_eq!(
            detail.notes,
            ["writes: 66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms before re-issue"]
        );
        assert!(detail.measures.is_some());
        app.selected = app.rows.iter().position(|r| r.name == "loop0p2").unwrap();
        assert!(app.detail().unwrap().notes.is_empty());
    }

    #[test]
    fn a_stacked_device_s_detail_shows_its_way_down() {
        let mut app = App::new();
        app.on_snapshot(crate::frontend::test_reports::stacked_report(), secs(1));
        app.selected = app.rows.iter().position(|r| r.name == "dm-1").unwrap();
        assert_eq!(
            app.detail().unwrap().notes,
            ["stack: dm-crypt `secret`: dm-1 → vda1 (crypt 0) → vda (partition 2048)"]
        );
    }

    #[test]
    fn device_detail_says_failures_per_op_only_where_there_were_some() {
        let mut app = App::new();
        app.on_snapshot(crate::frontend::test_reports::failed_report(), secs(1));
        app.selected = app.rows.iter().position(|r| r.name == "sdf").unwrap();
        let detail = app.detail().unwrap();
        assert_eq!(
            detail.notes,
            ["writes: 3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os failed"]
        );
        assert!(detail
            .diagnoses
            .iter()
            .any(|d| d.code == crate::model::Code::IoErrors));
        app.selected = app.rows.iter().position(|r| r.name == "loop0p2").unwrap();
        assert!(app.detail().unwrap().notes.is_empty());
    }

    #[test]
    fn per_second_guards_zero_time_and_resets() {
        assert_eq!(per_second(100, 0, Duration::ZERO), 0.0);
        assert_eq!(per_second(150, 50, secs(2)), 50.0);
        assert_eq!(per_second(10, 50, secs(1)), 0.0);
        assert_eq!(per_second(3, 0, Duration::from_millis(500)), 6.0);
    }

    #[test]
    fn totals_ratios_guard_zero() {
        let none = Totals::default();
        assert_eq!(none.amplification(), 0.0);
        assert_eq!(none.avg_command_bytes(), 0.0);
        assert_eq!(none.misaligned_share(), 0.0);
        assert_eq!(none.p99_us, None);
        let seed = seed_report();
        let loop0p2 = &seed.devices[0].partitions[1];
        let totals = Totals::of(&loop0p2.measures);
        assert_eq!(totals.user_ios, 16385);
        assert_eq!(totals.commands, 129);
        assert_eq!(totals.avg_user_io_bytes(), 512.0);
        // 128 commands of 64 KiB and one of 512 B carry the 16,385 × 512 bytes.
        assert!((totals.avg_command_bytes() - 16385.0 * 512.0 / 129.0).abs() < 1e-6);
        assert_eq!(totals.misaligned_share(), 1.0);
        // The synthetic latency distribution's p99 bucket.
        assert_eq!(totals.p99_us, Some(4096));
    }

    #[test]
    fn first_snapshot_rates_are_averages_since_start() {
        let mut app = App::new();
        let report = seed_report();
        let events = report.events.total();
        assert!(app.on_snapshot(report, secs(4)));
        let row = app.rows.iter().find(|row| row.name == "loop0p2").unwrap();
        assert_eq!(row.user_ios_per_s, 16385.0 / 4.0);
        assert_eq!(row.commands_per_s, 129.0 / 4.0);
        assert_eq!(app.events_per_s, events as f64 / 4.0);
        assert_eq!(row.severity, Some(Severity::Critical));
        assert!(row.is_partition);
        let loop1 = app.rows.iter().find(|row| row.name == "loop1").unwrap();
        assert_eq!(loop1.severity, Some(Severity::Warning));
        let loop0p1 = app.rows.iter().find(|row| row.name == "loop0p1").unwrap();
        assert_eq!(loop0p1.severity, None);
    }

    #[test]
    fn rates_come_from_deltas_between_snapshots() {
        let mut app = App::new();
        let first = seed_report();
        let mut second = seed_report();
        let write = second.devices[0].partitions[1]
            .measures
            .ops
            .get_mut(&Op::Write)
            .unwrap();
        write.user_ios += 1000;
        write.commands += 10;
        second.events[tracer_common::EventKind::Queue] += 2000;
        app.on_snapshot(first, secs(10));
        app.on_snapshot(second, Duration::from_millis(10_500));
        let row = app.rows.iter().find(|row| row.name == "loop0p2").unwrap();
        assert_eq!(row.user_ios_per_s, 2000.0);
        assert_eq!(row.commands_per_s, 20.0);
        assert_eq!(app.events_per_s, 4000.0);
        // Nothing changed on loop1.
        let loop1 = app.rows.iter().find(|row| row.name == "loop1").unwrap();
        assert_eq!(loop1.user_ios_per_s, 0.0);
        // A snapshot at the same instant does not divide by zero.
        app.on_snapshot(seed_report(), Duration::from_millis(10_500));
        assert!(app.rows.iter().all(|row| row.user_ios_per_s == 0.0));
    }

    #[test]
    fn reset_restarts_rates_from_the_reset_time() {
        let mut app = App::new();
        app.on_snapshot(seed_report(), secs(10));
        app.on_reset(secs(20));
        assert!(app.rows.is_empty() && app.report.is_none());
        app.on_snapshot(seed_report(), secs(22));
        let row = app.rows.iter().find(|row| row.name == "loop0p2").unwrap();
        assert_eq!(row.user_ios_per_s, 16385.0 / 2.0);
    }

    #[test]
    fn keys_map_to_actions() {
        let mut app = App::new();
        app.on_snapshot(seed_report(), secs(1));
        assert_eq!(app.on_key(Key::Char('q')), Action::Quit);
        assert_eq!(app.on_key(Key::CtrlC), Action::Quit);
        assert_eq!(app.on_key(Key::Char('r')), Action::Reset);
        assert_eq!(app.on_key(Key::Char('x')), Action::None);
        assert_eq!(app.on_key(Key::Other), Action::None);
        assert_eq!(app.on_key(Key::Esc), Action::None);

        assert_eq!(app.on_key(Key::Char('j')), Action::SelectDown);
        assert_eq!(app.on_key(Key::Down), Action::SelectDown);
        assert_eq!(app.selected, 2);
        assert_eq!(app.on_key(Key::Char('k')), Action::SelectUp);
        assert_eq!(app.on_key(Key::Up), Action::SelectUp);
        assert_eq!(app.on_key(Key::Up), Action::SelectUp);
        assert_eq!(app.selected, 0);
        for _ in 0..10 {
            app.on_key(Key::Down);
        }
        assert_eq!(app.selected, app.rows.len() - 1);

        assert_eq!(app.on_key(Key::Enter), Action::ToggleDetail);
        assert!(app.detail);
        assert_eq!(app.on_key(Key::Esc), Action::ToggleDetail);
        assert!(!app.detail);
        app.on_key(Key::Tab);
        assert!(app.detail);
    }

    #[test]
    fn pause_freezes_the_view() {
        let mut app = App::new();
        app.on_snapshot(seed_report(), secs(1));
        assert_eq!(app.on_key(Key::Char('p')), Action::TogglePause);
        assert!(app.paused);
        assert!(!app.on_snapshot(empty_report(), secs(2)));
        assert!(!app.rows.is_empty());
        assert_eq!(app.uptime, secs(1));
        app.on_key(Key::Char('p'));
        assert!(app.on_snapshot(empty_report(), secs(3)));
        assert!(app.rows.is_empty());
    }

    #[test]
    fn selection_follows_the_device_and_stays_in_range() {
        let mut app = App::new();
        app.on_snapshot(seed_report(), secs(1));
        app.on_key(Key::Down);
        app.on_key(Key::Down);
        assert_eq!(app.selected_row().unwrap().name, "loop0p2");
        // loop0p1 disappears: loop0p2 stays selected at its new index.
        let mut fewer = seed_report();
        fewer.devices[0].partitions.remove(0);
        app.on_snapshot(fewer, secs(2));
        assert_eq!(app.selected_row().unwrap().name, "loop0p2");
        app.on_snapshot(empty_report(), secs(3));
        assert_eq!(app.selected, 0);
        assert!(app.selected_row().is_none());
        assert!(app.detail().is_none());
    }

    #[test]
    fn detail_gathers_sizes_causes_and_diagnoses() {
        let mut app = App::new();
        app.on_snapshot(seed_report(), secs(1));
        app.selected = app.rows.iter().position(|r| r.name == "loop0p2").unwrap();
        let detail = app.detail().unwrap();
        assert_eq!(detail.name, "loop0p2");
        assert_eq!(
            detail.user_io_size.buckets,
            vec![Bucket {
                low: 512,
                count: 16385
            }]
        );
        assert_eq!(detail.command_size.count, 129);
        let codes: Vec<_> = detail.diagnoses.iter().map(|d| d.code).collect();
        assert_eq!(codes, vec![Code::SubpageBlockSize, Code::MisalignedStart]);

        app.selected = app.rows.iter().position(|r| r.name == "loop1").unwrap();
        let detail = app.detail().unwrap();
        assert_eq!(detail.split_causes.get("max_sectors"), Some(&700));
        assert_eq!(detail.splits, 700);
    }

    #[test]
    fn drops_come_from_the_shown_report() {
        let mut app = App::new();
        assert_eq!(app.drops(), 0);
        let mut report = seed_report();
        report.events.missed = 7;
        app.on_snapshot(report, secs(1));
        assert_eq!(app.drops(), 42 + 7);
    }
}
