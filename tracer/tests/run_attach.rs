//! `run --pid PID` on writers already running, as a user attaches to a slow
//! mkfs: a `dd oflag=dsync` fed 4 KiB at a time through a pipe, to a
//! loop partition and to a file on ext4. The test stops dd, reads how far
//! it got from /proc/PID/fdinfo, attaches, lets it go, and checks that the
//! writes `run` counts are exactly those dd made after that point, each
//! matched to its commands. Also: Ctrl-C ends the window and leaves the
//! process running, the children it forks later are followed, and a pid
//! that is not there is one line on stderr.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_file_all_matched, binary, children_of, privileged, run_file_target, Ext4Disk, LoopDisk,
    PartitionSpec, Tracer,
};
use serde_json::Value;

const BLOCKS: u64 = 200;
const BLOCK: u64 = 4096;

/// A child killed and reaped when dropped, also when a test fails.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A shell pipeline that feeds dd `BLOCKS` blocks, one each 10 ms; killed on drop.
struct PacedDd {
    shell: Child,
    dd: u32,
}

impl PacedDd {
    fn start(output: &str) -> PacedDd {
        let script = format!(
            "for i in $(seq {BLOCKS}); do head -c {BLOCK} /dev/zero; sleep 0.01; done | \
             dd of={output} bs={BLOCK} iflag=fullblock oflag=dsync conv=notrunc status=none"
        );
        let shell = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let dd = loop {
            let dd = children_of(&shell.id().to_string())
                .into_iter()
                .find(|pid| comm(*pid).as_deref() == Some("dd"));
            if let Some(dd) = dd {
                break dd;
            }
            assert!(Instant::now() < deadline, "dd did not start");
            std::thread::sleep(Duration::from_millis(5));
        };
        PacedDd { shell, dd }
    }

    /// dd's output position, from /proc (fd 1 is its `of=`).
    fn position(&self) -> u64 {
        let fdinfo = std::fs::read_to_string(format!("/proc/{}/fdinfo/1", self.dd)).unwrap();
        fdinfo
            .lines()
            .find_map(|line| line.strip_prefix("pos:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Stops dd once it has written a tenth of its blocks; returns the
    /// blocks written by then.
    fn stop_partway(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.position() < BLOCKS / 10 * BLOCK {
            assert!(Instant::now() < deadline, "dd did not get going");
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(self.dd, libc::SIGSTOP);
        while state(self.dd) != Some('T') {
            std::thread::sleep(Duration::from_millis(1));
        }
        let done = self.position();
        assert_eq!(done % BLOCK, 0);
        done / BLOCK
    }
}

impl Drop for PacedDd {
    fn drop(&mut self) {
        signal(self.dd, libc::SIGKILL);
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: a signal to a process this test started.
    unsafe { libc::kill(pid as i32, signal) };
}

fn comm(pid: u32) -> Option<String> {
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim()
            .to_string(),
    )
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Attaches to the stopped dd, lets it go on, and returns the report of its window.
fn attach_and_report(writer: &PacedDd) -> Value {
    let dd = writer.dd.to_string();
    let tracer = Tracer::start(&["run", "--json", "--pid", &dd]);
    // Stopped by the test, dd stays stopped until the test lets it go.
    assert_eq!(state(writer.dd), Some('T'));
    signal(writer.dd, libc::SIGCONT);
    let out = tracer.wait(Duration::from_secs(60));
    let report: Value = serde_json::from_str(&out).unwrap();
    let run = &report["run"];
    assert_eq!(run["attached"]["pid"], writer.dd, "{run}");
    assert_eq!(run["attached"]["ended"], "exited", "{run}");
    assert!(run["exit_status"].is_null(), "{run}");
    assert_eq!(run["command"][0], "dd", "{run}");
    assert_eq!(report["events"]["dropped"], 0, "{}", report["events"]);
    report
}

#[test]
fn writes_after_attaching_to_dd_on_a_partition_are_those_it_made() {
    if !privileged("writes_after_attaching_to_dd_on_a_partition_are_those_it_made") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = LoopDisk::new(
        "attach-part",
        8,
        &[PartitionSpec {
            start: 2048,
            size: 4096,
        }],
    );
    let partition = disk.partition(1);
    let writer = PacedDd::start(&partition);
    let before = writer.stop_partway();
    let report = attach_and_report(&writer);
    let expected = BLOCKS - before;
    let name = partition.trim_start_matches("/dev/");
    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == name)
        .unwrap_or_else(|| panic!("no {name}: {}", report["run"]));
    assert_eq!(target["write_syscalls"], expected, "{target}");
    assert_eq!(target["write_syscall_bytes"], expected * BLOCK, "{target}");
    // oflag=dsync: each write one bio and one command of its own.
    assert_eq!(target["bios"], expected, "{target}");
    assert_eq!(target["commands"], expected, "{target}");
    let window = report["run"]["attached"]["window_s"].as_f64().unwrap();
    assert!(window > 0.5, "{}", report["run"]);
}

#[test]
fn writes_after_attaching_to_dd_on_an_ext4_file_are_placed_from_its_position() {
    if !privileged("writes_after_attaching_to_dd_on_an_ext4_file_are_placed_from_its_position") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("attach-file", 16);
    let file = disk.path("out");
    let writer = PacedDd::start(file.to_str().unwrap());
    let before = writer.stop_partway();
    let report = attach_and_report(&writer);
    let expected = BLOCKS - before;
    let target = run_file_target(&report, &file);
    assert_eq!(target["write_syscalls"], expected, "{target}");
    assert_eq!(target["write_syscall_bytes"], expected * BLOCK, "{target}");
    // dd's position from fdinfo places every write: none at an unknown offset.
    assert_file_all_matched(target);
    let per_write = &target["commands_per_write"];
    assert_eq!(per_write["count"], expected, "{target}");
    assert!(per_write["p50"].as_u64().unwrap() >= 1, "{target}");
}

#[test]
fn ctrl_c_ends_the_window_and_children_forked_after_attach_are_followed() {
    if !privileged("ctrl_c_ends_the_window_and_children_forked_after_attach_are_followed") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = LoopDisk::new(
        "attach-loop",
        8,
        &[PartitionSpec {
            start: 2048,
            size: 4096,
        }],
    );
    let partition = disk.partition(1);
    // A shell that starts a new dd every 20 ms, for ever.
    let script = format!(
        "while :; do dd if=/dev/zero of={partition} bs=4k count=1 oflag=dsync status=none; sleep 0.02; done"
    );
    // Killed on drop, so a failure below leaves no shell writing to the path.
    let shell = KilledOnDrop(Command::new("sh").args(["-c", &script]).spawn().unwrap());
    let pid = shell.0.id();
    let tracer = Tracer::start(&["run", "--json", "--pid", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(1500));
    let out = tracer.stop();
    let alive = state(pid);
    drop(shell);
    let report: Value = serde_json::from_str(&out).unwrap();
    let run = &report["run"];
    assert_eq!(run["attached"]["ended"], "interrupted", "{run}");
    assert!(
        run["attached"]["processes_at_attach"].as_u64().unwrap() >= 1,
        "{run}"
    );
    // The shell went on, not left stopped (on a busy machine it may be
    // caught in uninterruptible sleep, D, loading dd).
    assert!(
        matches!(alive, Some('S' | 'R' | 'D')),
        "shell state {alive:?}"
    );
    let name = partition.trim_start_matches("/dev/");
    let target = run["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == name)
        .unwrap_or_else(|| panic!("no {name}: {run}"));
    let writes = target["write_syscalls"].as_u64().unwrap();
    assert!(writes >= 10, "{target}");
    assert_eq!(target["write_syscall_bytes"], writes * 4096, "{target}");
    // Each write was a dd forked after the attach.
    assert!(run["processes"].as_u64().unwrap() > writes, "{run}");
}

#[test]
fn a_pid_that_is_not_running_is_one_line_and_status_2() {
    if !privileged("a_pid_that_is_not_running_is_one_line_and_status_2") {
        return;
    }
    // A pid just exited and reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let out = Command::new(binary())
        .args(["run", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("no process {pid}")), "{stderr}");
    // A pid and a command at once: a usage error, not a guess.
    let both = Command::new(binary())
        .args(["run", "--pid", "1", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}
