//! Faults survived on purpose: the real binary while devices come and go,
//! next to a second instance, killed with SIGKILL, with rings too small for
//! the load, and without a usable tracefs. Counts are checked against the
//! kernel's ftrace `blk` tracer or against I/O the test issued itself.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    binary, blk_actions_of, count_actions, count_actions_in_init_context, dd, privileged, sh,
    BlkTracer, LoopDisk, PartitionSpec, ScratchFile, Tmux, Tracer,
};

/// These tests share the kernel's tracing state (the blk tracer, the list of
/// BPF programs), so they run one at a time even when cargo runs them in threads.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the next one still runs.
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One 32 MiB partition at 1 MiB: aligned, 4 KiB blocks.
const ONE_PARTITION: &[PartitionSpec] = &[PartitionSpec {
    start: 2048,
    size: 65536,
}];

fn report_json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|err| panic!("report is not JSON ({err}): {text}"))
}

/// The report's entry for a disk.
fn device<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the report: {}", report["devices"]))
}

/// The report's entry for a partition of a disk.
fn partition<'a>(disk: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    disk["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the report: {}", disk["partitions"]))
}

/// Per blk action, what the kernel's blk tracer saw minus what we received,
/// beyond what no BPF program could see (see count_actions_in_init_context):
/// 0 when all is accounted for.
fn lost_per_action(report: &serde_json::Value, trace: &str, dev: &str) -> Vec<(String, i64)> {
    let theirs = count_actions(trace, dev);
    let hidden = count_actions_in_init_context(trace, dev);
    blk_actions_of(&report["events"])
        .into_iter()
        .map(|(action, ours)| {
            let emitted = theirs.get(action).copied().unwrap_or(0) as i64;
            let hidden = hidden.get(action).copied().unwrap_or(0) as i64;
            let lost = emitted - ours as i64;
            (action.to_string(), lost - lost.clamp(0, hidden))
        })
        .collect()
}

// ----- two instances ----------------------------------------------------------

#[test]
fn two_instances_on_one_device_both_match_the_blk_tracer() {
    if !privileged("two_instances_on_one_device_both_match_the_blk_tracer") {
        return;
    }
    let _serial = one_at_a_time();
    let mut disk = LoopDisk::new("two", 64, ONE_PARTITION);
    disk.set_queue("max_sectors_kb", "64");
    let oracle = BlkTracer::start(&disk.name);
    let args = ["report", "--json", "-d", &disk.name];
    let first = Tracer::start(&args);
    let second = Tracer::start(&args);
    let p1 = disk.partition(1);
    // Direct writes that split (max_sectors_kb=64), buffered ones that merge.
    for (bs, count, flag) in [
        ("4k", "64", "oflag=direct"),
        ("1M", "8", "oflag=direct"),
        ("4k", "512", "conv=fsync"),
    ] {
        dd(&[
            "if=/dev/zero",
            &format!("of={p1}"),
            &format!("bs={bs}"),
            &format!("count={count}"),
            flag,
        ]);
    }
    let first = report_json(&first.stop());
    let second = report_json(&second.stop());
    let trace = oracle.finish();
    let blk = count_actions(&trace, &disk.blk_dev());
    assert!(blk.get("X").copied().unwrap_or(0) > 0, "no splits: {blk:?}");
    for (which, report) in [("first", &first), ("second", &second)] {
        let events = &report["events"];
        assert_eq!(events["dropped"], 0, "{which} dropped events: {events}");
        assert_eq!(events["missed"], 0, "{which} missed events: {events}");
        let lost = lost_per_action(report, &trace, &disk.blk_dev());
        assert!(
            lost.iter().all(|(_, n)| *n == 0),
            "{which} instance differs from the blk tracer (blk minus ours): {lost:?}\nblk: {blk:?}\nours: {events}"
        );
        // The engine's totals for the disk agree too.
        let ops = device(report, &disk.name)["measures"]["ops"]
            .as_object()
            .unwrap();
        let total = |key: &str| -> u64 { ops.values().map(|op| op[key].as_u64().unwrap()).sum() };
        let blk_of = |action: &str| blk.get(action).copied().unwrap_or(0);
        assert_eq!(total("user_ios"), blk_of("Q"), "{which}: {ops:?}");
        assert_eq!(total("splits"), blk_of("X"), "{which}: {ops:?}");
        // A requeued command is issued twice but is one command.
        assert_eq!(
            total("commands"),
            blk_of("D") - blk_of("R"),
            "{which}: {ops:?}"
        );
    }
}

// ----- SIGKILL --------------------------------------------------------------

/// Ids of the loaded BPF programs, links (with their program) and maps.
#[derive(Debug, Default)]
struct BpfObjects {
    programs: BTreeSet<u64>,
    links: BTreeSet<(u64, u64)>,
    maps: BTreeSet<u64>,
}

impl BpfObjects {
    fn now() -> BpfObjects {
        let list = |what: &str| -> Vec<serde_json::Value> {
            let text = sh("bpftool", &[what, "show", "--json"]);
            serde_json::from_str(&text).unwrap_or_default()
        };
        let id = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap_or(0);
        BpfObjects {
            programs: list("prog").iter().map(|p| id(p, "id")).collect(),
            links: list("link")
                .iter()
                .map(|l| (id(l, "id"), id(l, "prog_id")))
                .collect(),
            maps: list("map").iter().map(|m| id(m, "id")).collect(),
        }
    }

    /// What is here and was not in `before`.
    fn since(&self, before: &BpfObjects) -> BpfObjects {
        BpfObjects {
            programs: self
                .programs
                .difference(&before.programs)
                .copied()
                .collect(),
            links: self.links.difference(&before.links).copied().collect(),
            maps: self.maps.difference(&before.maps).copied().collect(),
        }
    }

    /// Which of `ours` are still loaded.
    fn left_of(&self, ours: &BpfObjects) -> BpfObjects {
        BpfObjects {
            programs: self
                .programs
                .intersection(&ours.programs)
                .copied()
                .collect(),
            links: self
                .links
                .iter()
                .filter(|(link, prog)| {
                    ours.programs.contains(prog) || ours.links.iter().any(|(l, _)| l == link)
                })
                .copied()
                .collect(),
            maps: self.maps.intersection(&ours.maps).copied().collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.programs.is_empty() && self.links.is_empty() && self.maps.is_empty()
    }
}

#[test]
fn sigkill_leaves_no_program_link_or_map_behind() {
    if !privileged("sigkill_leaves_no_program_link_or_map_behind") {
        return;
    }
    let _serial = one_at_a_time();
    let disk = LoopDisk::new("kill", 16, &[]);
    for flavor in ["btf", "classic"] {
        let before = BpfObjects::now();
        let tracer =
            Tracer::start_with(&["report", "-d", &disk.name], &[("IOSPLIT_PROBES", flavor)]);
        dd(&[
            "if=/dev/zero",
            &format!("of={}", disk.device()),
            "bs=4k",
            "count=16",
            "oflag=direct",
        ]);
        let ours = BpfObjects::now().since(&before);
        assert!(
            ours.programs.len() >= 8 && !ours.links.is_empty() || flavor == "classic",
            "{flavor}: the running tracer's programs and links are not listed: {ours:?}"
        );
        assert!(
            !ours.programs.is_empty() && !ours.maps.is_empty(),
            "{flavor}: nothing of the running tracer is listed: {ours:?}"
        );
        tracer.kill();
        // The kernel frees programs after an RCU grace period: allow a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = BpfObjects::now().left_of(&ours);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{flavor}: after SIGKILL these are still loaded: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

// ----- forced ring overflow -------------------------------------------------

/// The figure after `label` in the text report's header ("… 1,234 dropped").
fn figure_before(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("events:"))
        .unwrap_or_else(|| panic!("no events line in:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_end_matches(',') == label)
        .unwrap_or_else(|| panic!("no {label} in {line}"));
    words[at - 1].replace(',', "").parse().unwrap()
}

#[test]
fn a_forced_ring_overflow_is_counted_exactly_and_stated() {
    if !privileged("a_forced_ring_overflow_is_counted_exactly_and_stated") {
        return;
    }
    let _serial = one_at_a_time();
    let mut disk = LoopDisk::new("overflow", 64, ONE_PARTITION);
    // One command per user I/O: any other shape in the report is misattribution.
    disk.set_queue("nomerges", "2");
    let oracle = BlkTracer::start(&disk.name);
    // Two 4 KiB rings (one page per CPU on this machine's two CPUs).
    let small = [("IOSPLIT_RING_KB", "8")];
    let json = Tracer::start_with(&["report", "--json", "-d", &disk.name], &small);
    let text = Tracer::start_with(&["report", "-d", &disk.name], &small);
    let p1 = disk.partition(1);
    sh(
        "fio",
        &[
            "--name=overflow",
            &format!("--filename={p1}"),
            "--rw=randwrite",
            "--bs=4k",
            "--direct=1",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--size=32m",
            "--io_size=64m",
        ],
    );
    let json = report_json(&json.stop());
    let text = text.stop();
    let trace = oracle.finish();
    let dev = disk.blk_dev();
    let blk = count_actions(&trace, &dev);

    let ours = blk_actions_of(&json["events"]);
    let emitted: u64 = ours
        .iter()
        .map(|(action, _)| blk.get(*action).copied().unwrap_or(0))
        .sum();
    let received: u64 = ours.iter().map(|(_, n)| n).sum();
    let hidden = count_actions_in_init_context(&trace, &dev);
    let hidden: u64 = ours
        .iter()
        .map(|(action, _)| hidden.get(*action).copied().unwrap_or(0))
        .sum();
    let events = &json["events"];
    let dropped = events["dropped"].as_u64().unwrap();
    eprintln!("blk: {blk:?}\nours: {events}\n{}", json["correlation"]);
    assert!(dropped > 0, "the small rings never overflowed: {events}");
    assert_eq!(events["missed"], 0, "{events}");
    // Exact, but for what no BPF program could see: a softirq that completed
    // a batch of loop requests while a thread of init was current (see
    // count_actions_in_init_context). Those are neither received nor dropped,
    // the same in both instances.
    // Never more dropped than lost.
    let unaccounted = (emitted - received)
        .checked_sub(dropped)
        .unwrap_or_else(|| {
            panic!("dropped {dropped} exceeds emitted {emitted} minus received {received}")
        });
    assert!(
        unaccounted <= hidden,
        "dropped ({dropped}) must be what the probes emitted ({emitted}, the blk tracer's count) minus what was received ({received})"
    );
    if unaccounted > 0 {
        eprintln!(
            "NOTE: {unaccounted} events neither received nor dropped, of {hidden} logged while init was current"
        );
    }
    // No action was received more often than the kernel emitted it.
    let lost = lost_per_action(&json, &trace, &dev);
    assert!(lost.iter().all(|(_, n)| *n >= 0), "{lost:?}");

    // The text instance overflowed on its own rings, and says so.
    let text_received = figure_before(&text, "received");
    let text_dropped = figure_before(&text, "dropped");
    assert!(text_dropped > 0, "{text}");
    let text_unaccounted = (emitted - text_received)
        .checked_sub(text_dropped)
        .unwrap_or_else(|| panic!("the text report drops more than was lost:\n{text}"));
    assert!(text_unaccounted <= hidden, "{text}");
    if text_unaccounted > 0 {
        eprintln!(
            "NOTE: text report: {text_unaccounted} events neither received nor dropped, of {hidden} logged while init was current"
        );
    }
    assert!(
        text.contains("lost (ring buffer full)"),
        "the text report does not state the loss:\n{text}"
    );

    // Chains that lost an event are not misattributed: every chain that
    // completed is one 4 KiB user I/O carried by one 4 KiB command.
    let correlation = &json["correlation"];
    let writes = &partition(device(&json, &disk.name), &format!("{}p1", disk.name))["measures"]
        ["ops"]["write"];
    let count = |key: &str| writes[key].as_u64().unwrap();
    assert_eq!(count("splits"), 0, "{writes}");
    assert_eq!(count("merges"), 0, "{writes}");
    for histogram in ["user_io_size", "command_size"] {
        let h = &writes[histogram];
        assert_eq!(h["min"], 4096, "{histogram}: {h}");
        assert_eq!(h["max"], 4096, "{histogram}: {h}");
    }
    for histogram in ["fragments_per_io", "commands_per_io"] {
        let h = &writes[histogram];
        assert_eq!(h["max"], 1, "{histogram}: {h}");
    }
    let completed = writes["commands_per_io"]["count"].as_u64().unwrap();
    // Chains: every queued I/O with sectors (a flush has none), on the whole disk.
    let ops = device(&json, &disk.name)["measures"]["ops"]
        .as_object()
        .unwrap();
    let chains = |key: &str| -> u64 {
        ops.iter()
            .filter(|(op, _)| *op != "flush")
            .map(|(_, m)| m[key].as_u64().unwrap())
            .sum()
    };
    let queued = chains("user_ios");
    let completed_anywhere: u64 = ops
        .iter()
        .filter(|(op, _)| *op != "flush")
        .map(|(_, m)| m["commands_per_io"]["count"].as_u64().unwrap())
        .sum();
    let received_of = |action: &str| {
        blk_actions_of(events)
            .into_iter()
            .find(|(a, _)| *a == action)
            .unwrap()
            .1
    };
    assert!(completed <= received_of("D").min(received_of("C")));
    // Every queued chain is accounted for: completed, incomplete or in flight.
    let unfinished =
        correlation["incomplete"].as_u64().unwrap() + correlation["in_flight"].as_u64().unwrap();
    assert_eq!(
        queued,
        completed_anywhere + unfinished,
        "{correlation} {ops:?}"
    );
    let lost_d_or_c: i64 = lost
        .iter()
        .filter(|(a, _)| a == "D" || a == "C")
        .map(|(_, n)| n)
        .sum();
    assert!(
        correlation["incomplete"].as_u64().unwrap() > 0 || lost_d_or_c == 0,
        "chains lost {lost_d_or_c} issues or completions but none is counted incomplete: {correlation}"
    );
}

#[test]
fn a_bad_ring_size_is_one_clear_line() {
    if !privileged("a_bad_ring_size_is_one_clear_line") {
        return;
    }
    let _serial = one_at_a_time();
    let out = Command::new(binary())
        .args(["report", "--duration", "1"])
        .env("IOSPLIT_RING_KB", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("IOSPLIT_RING_KB=2"), "{stderr}");
}

// ----- tracefs ----------------------------------------------------------------

/// A shell line, run in a private mount namespace, that hides tracefs at its
/// usual places and then runs `then` without CAP_SYS_ADMIN (so it cannot
/// mount tracefs itself). Nothing leaves the namespace.
fn without_tracefs(mount_elsewhere: Option<&str>, then: &str) -> Command {
    let mut script = String::from("set -e; mount -t tmpfs none /sys/kernel/tracing; ");
    script
        .push_str("if [ -d /sys/kernel/debug ]; then mount -t tmpfs none /sys/kernel/debug; fi; ");
    if let Some(path) = mount_elsewhere {
        script.push_str(&format!("mount -t tracefs nodev {path}; "));
    }
    script.push_str("exec setpriv --bounding-set -sys_admin -- ");
    script.push_str(then);
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    command
}

#[test]
fn tracefs_that_cannot_be_mounted_is_one_clear_line() {
    if !privileged("tracefs_that_cannot_be_mounted_is_one_clear_line") {
        return;
    }
    let _serial = one_at_a_time();
    let out = without_tracefs(None, &format!("{} report --duration 1", binary()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(
        stderr.contains("tracefs") && stderr.contains("mount -t tracefs"),
        "{stderr}"
    );
}

/// An empty directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn tracefs_mounted_elsewhere_is_used() {
    if !privileged("tracefs_mounted_elsewhere_is_used") {
        return;
    }
    let _serial = one_at_a_time();
    let disk = LoopDisk::new("tracefs", 16, &[]);
    let elsewhere =
        TempDir(std::env::temp_dir().join(format!("iosplit-tracefs-{}", std::process::id())));
    std::fs::create_dir_all(&elsewhere.0).unwrap();
    let tracer = Tracer::start_command(without_tracefs(
        Some(elsewhere.0.to_str().unwrap()),
        &format!("{} report --json -d {}", binary(), disk.name),
    ));
    dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.device()),
        "bs=4k",
        "count=32",
        "oflag=direct",
    ]);
    let report = report_json(&tracer.stop());
    let writes = &device(&report, &disk.name)["measures"]["ops"]["write"];
    assert_eq!(writes["user_ios"], 32, "{writes}");
    assert_eq!(writes["commands"], 32, "{writes}");
}

// ----- devices coming and going ---------------------------------------------

/// Direct 4 KiB writes: one user I/O and one command each.
fn write_direct(target: &str, count: u32) {
    dd(&[
        "if=/dev/zero",
        &format!("of={target}"),
        "bs=4k",
        &format!("count={count}"),
        "oflag=direct",
    ]);
}

#[test]
fn a_device_removed_mid_trace_is_marked_gone_and_keeps_its_counts() {
    if !privileged("a_device_removed_mid_trace_is_marked_gone_and_keeps_its_counts") {
        return;
    }
    let _serial = one_at_a_time();
    let disk = LoopDisk::new("gone", 48, ONE_PARTITION);
    let name = disk.name.clone();
    let json = Tracer::start(&["report", "--json", "-d", &name]);
    let text = Tracer::start(&["report", "-d", &name]);
    write_direct(&disk.partition(1), 64);
    write_direct(&disk.device(), 16);
    // Detach the loop device (partitions first) while both still trace it.
    drop(disk);
    std::thread::sleep(Duration::from_millis(2500));
    let report = report_json(&json.stop());
    let text = text.stop();

    let gone = device(&report, &name);
    assert_eq!(gone["gone"], true, "the disk is not marked gone: {gone}");
    let part = partition(gone, &format!("{name}p1"));
    assert_eq!(
        part["gone"], true,
        "the partition is not marked gone: {part}"
    );
    // Nothing counted before the removal is lost.
    let part_writes = &part["measures"]["ops"]["write"];
    assert_eq!(part_writes["user_ios"], 64, "{part_writes}");
    assert_eq!(part_writes["commands"], 64, "{part_writes}");
    let disk_writes = &gone["measures"]["ops"]["write"];
    assert_eq!(disk_writes["user_ios"], 64 + 16, "{disk_writes}");
    assert_eq!(disk_writes["commands"], 64 + 16, "{disk_writes}");
    let header = text
        .lines()
        .find(|l| !l.starts_with(' ') && l.contains(&format!("{name} (")))
        .unwrap_or_else(|| panic!("no {name} section in:\n{text}"));
    assert!(header.contains("gone"), "{header}");
}

#[test]
fn a_device_added_mid_trace_appears_in_a_later_interval() {
    if !privileged("a_device_added_mid_trace_appears_in_a_later_interval") {
        return;
    }
    let _serial = one_at_a_time();
    let tracer = Tracer::start(&["report", "--json", "--interval", "1"]);
    std::thread::sleep(Duration::from_millis(1200));
    let disk = LoopDisk::new("added", 48, ONE_PARTITION);
    write_direct(&disk.partition(1), 32);
    std::thread::sleep(Duration::from_millis(2500));
    let out = tracer.stop();
    let intervals: Vec<serde_json::Value> = out.lines().map(report_json).collect();
    assert!(intervals.len() >= 3, "{} intervals", intervals.len());
    let listed = |report: &serde_json::Value| {
        report["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == disk.name.as_str())
    };
    assert!(
        !listed(&intervals[0]),
        "{} listed before it existed",
        disk.name
    );
    let later = intervals
        .iter()
        .rposition(listed)
        .unwrap_or_else(|| panic!("{} never listed by name", disk.name));
    let part_name = format!("{}p1", disk.name);
    let written: u64 = intervals[later..]
        .iter()
        .chain(intervals[..later].iter().filter(|r| listed(r)))
        .map(|r| {
            partition(device(r, &disk.name), &part_name)["measures"]["ops"]["write"]["user_ios"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(written, 32, "writes to {part_name} across the intervals");
}

#[test]
fn a_device_added_mid_trace_appears_in_the_live_view() {
    if !privileged("a_device_added_mid_trace_appears_in_the_live_view") {
        return;
    }
    let _serial = one_at_a_time();
    let session = format!("iosplit-faults-{}", std::process::id());
    let tmux = Tmux::start(&session, &format!("{}; echo EXITED=$?; sleep 60", binary()));
    tmux.wait_for(&["iosplit-trace", "events/s"], Duration::from_secs(20));
    let disk = LoopDisk::new("live-added", 48, ONE_PARTITION);
    let part = format!("{}p1", disk.name);
    let deadline = Instant::now() + Duration::from_secs(15);
    let screen = loop {
        write_direct(&disk.partition(1), 64);
        let screen = tmux.screen();
        if screen.contains(&part) || Instant::now() > deadline {
            break screen;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        screen.contains(&part),
        "the live view never showed {part}:\n{screen}"
    );
    tmux.keys(&["q"]);
    tmux.wait_for(&["EXITED=0"], Duration::from_secs(10));
}

#[test]
fn a_terminal_that_hangs_up_ends_the_live_view() {
    if !privileged("a_terminal_that_hangs_up_ends_the_live_view") {
        return;
    }
    let _serial = one_at_a_time();
    let disk = LoopDisk::new("hangup", 16, &[]);
    let before = BpfObjects::now();
    let session = format!("iosplit-hangup-{}", std::process::id());
    let tmux = Tmux::start(
        &session,
        &format!("{} -d {}; sleep 60", binary(), disk.name),
    );
    tmux.wait_for(&["iosplit-trace", "events/s"], Duration::from_secs(20));
    let tracer = tmux.pane_children();
    assert_eq!(tracer.len(), 1, "one tracer in the pane: {tracer:?}");
    let ours = BpfObjects::now().since(&before);
    tmux.hang_up();
    let pid = tracer[0];
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            // SAFETY: the tracer this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the live view kept running after its terminal hung up");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !BpfObjects::now().left_of(&ours).is_empty() {
        assert!(Instant::now() < deadline, "probes left after the hangup");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ----- Ctrl-C right after "tracing" -----------------------------------------

/// A Ctrl-C sent the moment the "tracing" line shows stops every tracing
/// command cleanly (report printed, recording closed, server shut down):
/// the signal is listened for before that line, never left to its default
/// action. Seen in CI before: `report` was killed by SIGINT, printing nothing.
#[test]
fn ctrl_c_right_after_the_tracing_line_stops_cleanly() {
    if !privileged("ctrl_c_right_after_the_tracing_line_stops_cleanly") {
        return;
    }
    let _serial = one_at_a_time();
    let disk = LoopDisk::new("ctrlc", 16, &[]);
    let recording = ScratchFile(std::env::temp_dir().join("iosplit-ctrlc.iotrace"));
    let path = recording.0.to_str().unwrap().to_string();
    for round in 0..5 {
        let report = Tracer::start(&["report", "--json", "-d", &disk.name]).stop();
        let parsed: serde_json::Value = serde_json::from_str(&report)
            .unwrap_or_else(|err| panic!("round {round}: report is not JSON ({err}): {report:?}"));
        assert!(parsed["devices"].is_array(), "round {round}: {parsed}");

        let _ = std::fs::remove_file(&recording.0);
        Tracer::start(&["record", "-d", &disk.name, "-o", &path]).stop();
        let analyzed = Command::new(binary())
            .args(["analyze", "--json", &path])
            .output()
            .unwrap();
        assert!(
            analyzed.status.success(),
            "round {round}: the recording does not analyze: {}",
            String::from_utf8_lossy(&analyzed.stderr)
        );

        Tracer::start(&["serve", "-d", &disk.name, "--listen", "127.0.0.1:0"]).stop();
    }
}
