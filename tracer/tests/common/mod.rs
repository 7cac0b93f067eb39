//! Helpers for privileged integration tests: real loop disks with partitions,
//! the kernel's ftrace `blk` tracer as an oracle, and the real binary.
//! Every guard puts back what it changed when dropped, also on panic.
#![allow(dead_code)]

pub mod fio;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// True when privileged tests may run. Under CI=true a non-root run fails
/// instead of skipping; elsewhere it says that it skipped.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: privileged tests must run in CI, but this is not root");
    }
    eprintln!("SKIPPED {test}: needs root (run `sudo cargo xtask test`)");
    false
}

/// One tracer at a time within a test binary: tracers capturing every disk
/// at once on a 2-CPU machine starved their readers (stop 35), which hold
/// each file when they handle its open. Held for the test's length.
pub fn one_tracer_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a command and panics with its output if it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {program}: {err}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes partition `table` (sfdisk's input) with sfdisk `args`, leaving the
/// kernel's view alone: callers tell it with partx.
pub fn sfdisk(args: &[&str], table: &str) {
    use std::io::Write;
    let mut child = Command::new("sfdisk")
        .args(["--no-reread", "--no-tell-kernel", "-q"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run sfdisk");
    child
        .stdin
        .take()
        .expect("sfdisk's stdin is piped")
        .write_all(table.as_bytes())
        .expect("write sfdisk's input");
    assert!(
        child.wait().expect("sfdisk exits").success(),
        "sfdisk failed"
    );
}

/// `iosplit-trace run --json -- command`: the report, after asserting the
/// run succeeded.
pub fn run_json(command: &[&str]) -> serde_json::Value {
    let out = Command::new(binary())
        .args(["run", "--json", "--"])
        .args(command)
        .output()
        .expect("iosplit-trace runs");
    assert!(
        out.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `run`'s target for the regular file `path`, or a panic naming what was seen.
pub fn run_file_target<'a>(report: &'a serde_json::Value, path: &Path) -> &'a serde_json::Value {
    report["run"]["targets"]
        .as_array()
        .expect("a list of targets")
        .iter()
        .find(|t| t["file"]["path"] == path.to_str().expect("a UTF-8 path"))
        .unwrap_or_else(|| panic!("no target for {}: {}", path.display(), report["run"]))
}

/// Asserts that none of a file target's written bytes went unmatched for
/// lack of its extents or of writeback: all matched, or replaced by a later
/// write of the command before reaching the device (`overwritten_bytes`).
pub fn assert_file_all_matched(target: &serde_json::Value) {
    let file = &target["file"];
    assert!(file["map_error"].is_null(), "{target}");
    for key in [
        "not_written_back_bytes",
        "delalloc_bytes",
        "unmappable_bytes",
        "unknown_offset_bytes",
    ] {
        assert_eq!(file[key], 0, "{key}: {target}");
    }
    let matched = file["matched_bytes"].as_u64().expect("matched_bytes");
    let overwritten = file["overwritten_bytes"]
        .as_u64()
        .expect("overwritten_bytes");
    assert_eq!(
        matched + overwritten,
        target["write_syscall_bytes"].as_u64().expect("bytes"),
        "{target}"
    );
}

/// An ext4 filesystem on the one partition of a new loop disk (dropped
/// in order: unmounted, then the disk detached).
pub struct Ext4Disk {
    pub mounted: Mounted,
    pub disk: LoopDisk,
}

impl Ext4Disk {
    /// A disk of `mib` + 2 MiB with one partition of `mib` from sector 2048.
    pub fn new(tag: &str, mib: u64) -> Ext4Disk {
        let disk = LoopDisk::new(
            tag,
            mib + 2,
            &[PartitionSpec {
                start: 2048,
                size: mib * 2048,
            }],
        );
        let mounted = Mounted::ext4(&disk.partition(1));
        Ext4Disk { mounted, disk }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mounted.point.join(name)
    }
}

/// The device `name` in a JSON report, or a panic naming the ones there.
pub fn device_named<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["devices"]
        .as_array()
        .expect("a list of devices")
        .iter()
        .find(|device| device["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the report: {}", report["devices"]))
}

/// Counter `key` summed over the ops of one device's (or partition's) `measures`.
pub fn ops_total(measures: &serde_json::Value, key: &str) -> u64 {
    measures["ops"]
        .as_object()
        .expect("ops by name")
        .values()
        .map(|op| op[key].as_u64().expect("a counter"))
        .sum()
}

/// A partition to create: start and size in 512-byte sectors.
#[derive(Clone, Copy, Debug)]
pub struct PartitionSpec {
    pub start: u64,
    pub size: u64,
}

/// A loop device over a file in /dev/shm, with partitions made by sfdisk and
/// registered with `partx -a` (this kernel has no partition-table parsers).
pub struct LoopDisk {
    pub name: String,
    pub image: PathBuf,
    partitions: usize,
    saved_queue: Vec<(String, String)>,
}

impl LoopDisk {
    pub fn new(tag: &str, size_mib: u64, partitions: &[PartitionSpec]) -> LoopDisk {
        let image = PathBuf::from(format!(
            "/dev/shm/iosplit-test-{tag}-{}.img",
            std::process::id()
        ));
        let file = std::fs::File::create(&image).expect("create image");
        file.set_len(size_mib << 20).expect("size image");
        drop(file);
        let device = sh("losetup", &["-f", "--show", "-P", image.to_str().unwrap()]);
        let device = device.trim().to_string();
        let name = device.trim_start_matches("/dev/").to_string();
        let mut disk = LoopDisk {
            name,
            image,
            partitions: 0,
            saved_queue: Vec::new(),
        };
        if !partitions.is_empty() {
            let table: String = partitions
                .iter()
                .map(|p| format!("start={}, size={}\n", p.start, p.size))
                .collect();
            sfdisk(&[&device], &table);
            sh("partx", &["-a", &device]);
            disk.partitions = partitions.len();
            for n in 1..=partitions.len() {
                let part = disk.partition(n);
                let deadline = Instant::now() + Duration::from_secs(5);
                while !Path::new(&part).exists() {
                    assert!(Instant::now() < deadline, "{part} did not appear");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        disk
    }

    pub fn device(&self) -> String {
        format!("/dev/{}", self.name)
    }

    /// `/dev/loopNpK`.
    pub fn partition(&self, number: usize) -> String {
        format!("/dev/{}p{number}", self.name)
    }

    /// "major,minor" as the blk tracer prints it.
    pub fn blk_dev(&self) -> String {
        let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", self.name)).unwrap();
        dev.trim().replace(':', ",")
    }

    /// Sets a queue attribute, remembering the old value for Drop
    /// (loop devices keep queue settings after detach).
    pub fn set_queue(&mut self, attribute: &str, value: &str) {
        let path = format!("/sys/block/{}/queue/{attribute}", self.name);
        let old = std::fs::read_to_string(&path).unwrap().trim().to_string();
        if !self.saved_queue.iter().any(|(a, _)| a == attribute) {
            self.saved_queue.push((attribute.to_string(), old));
        }
        std::fs::write(&path, value).unwrap_or_else(|err| panic!("write {path}: {err}"));
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        for (attribute, value) in self.saved_queue.drain(..).rev() {
            let _ = std::fs::write(format!("/sys/block/{}/queue/{attribute}", self.name), value);
        }
        let device = self.device();
        if self.partitions > 0 {
            let _ = Command::new("partx").args(["-d", &device]).status();
        }
        let _ = Command::new("losetup").args(["-d", &device]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// A filesystem made on a device and mounted; unmounted when dropped
/// (declare it after its `LoopDisk`, so it is dropped first).
pub struct Mounted {
    pub point: PathBuf,
}

impl Mounted {
    pub fn ext4(device: &str) -> Mounted {
        Mounted::make("mkfs.ext4", &["-q", "-F"], device)
    }

    /// Needs mkfs.xfs (xfsprogs, which `cargo xtask setup` installs) and a
    /// device of at least 300 MiB.
    pub fn xfs(device: &str) -> Mounted {
        Mounted::make("mkfs.xfs", &["-q", "-f"], device)
    }

    fn make(mkfs: &str, args: &[&str], device: &str) -> Mounted {
        match Command::new(mkfs).args(args).arg(device).output() {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                panic!("{mkfs} is not installed: `cargo xtask setup` installs it")
            }
            Err(err) => panic!("cannot run {mkfs}: {err}"),
            Ok(out) => assert!(
                out.status.success(),
                "{mkfs} {device} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
        let name = device.trim_start_matches("/dev/");
        let point = std::env::temp_dir().join(format!("iosplit-mnt-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&point).unwrap();
        let mounted = Mounted { point };
        sh("mount", &[device, mounted.point.to_str().unwrap()]);
        mounted
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.point).status();
        let _ = std::fs::remove_dir(&self.point);
    }
}

const TRACING: &str = "/sys/kernel/tracing";

fn ensure_tracefs() {
    if !Path::new(TRACING).join("trace").exists() {
        sh("mount", &["-t", "tracefs", "nodev", TRACING]);
    }
}

/// The kernel's ftrace `blk` tracer on some disks: the event-count oracle.
pub struct BlkTracer {
    disks: Vec<String>,
    old_buffer_kb: String,
}

/// The size to put back: `buffer_size_kb` reads "7 (expanded: 1408)" before
/// the buffer was first used, and only the number after it can be written.
fn buffer_kb(text: &str) -> String {
    let text = text.trim();
    match text.split_once("(expanded: ") {
        Some((_, expanded)) => expanded.trim_end_matches(')').trim().to_string(),
        None => text.to_string(),
    }
}

impl BlkTracer {
    pub fn start(disk: &str) -> BlkTracer {
        BlkTracer::start_disks(&[disk])
    }

    pub fn start_disks(disks: &[&str]) -> BlkTracer {
        ensure_tracefs();
        let old_buffer_kb =
            buffer_kb(&std::fs::read_to_string(format!("{TRACING}/buffer_size_kb")).unwrap());
        let tracer = BlkTracer {
            disks: disks.iter().map(|disk| disk.to_string()).collect(),
            old_buffer_kb,
        };
        std::fs::write(format!("{TRACING}/buffer_size_kb"), "65536").unwrap();
        std::fs::write(format!("{TRACING}/trace"), "").unwrap();
        for disk in disks {
            std::fs::write(format!("/sys/block/{disk}/trace/enable"), "1").unwrap();
        }
        std::fs::write(format!("{TRACING}/current_tracer"), "blk").unwrap();
        // Someone may have left tracing off; Drop turns it back on either way.
        std::fs::write(format!("{TRACING}/tracing_on"), "1").unwrap();
        tracer
    }

    /// Writes `text` into the trace, in time order with the events.
    pub fn marker(&self, text: &str) {
        std::fs::write(format!("{TRACING}/trace_marker"), text).unwrap();
    }

    /// The trace text so far, without stopping.
    pub fn trace_so_far(&self) -> String {
        std::fs::read_to_string(format!("{TRACING}/trace")).unwrap()
    }

    /// Stops tracing and returns the trace text; panics if the buffer overran.
    pub fn finish(&self) -> String {
        std::fs::write(format!("{TRACING}/tracing_on"), "0").unwrap();
        let trace = std::fs::read_to_string(format!("{TRACING}/trace")).unwrap();
        for cpu in std::fs::read_dir(format!("{TRACING}/per_cpu")).unwrap() {
            let stats = std::fs::read_to_string(cpu.unwrap().path().join("stats")).unwrap();
            let overrun = stats
                .lines()
                .find_map(|l| l.strip_prefix("overrun: "))
                .unwrap_or("0");
            assert_eq!(overrun.trim(), "0", "the blk tracer's buffer overran");
        }
        trace
    }
}

impl Drop for BlkTracer {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("{TRACING}/current_tracer"), "nop");
        for disk in &self.disks {
            let _ = std::fs::write(format!("/sys/block/{disk}/trace/enable"), "0");
        }
        let _ = std::fs::write(format!("{TRACING}/tracing_on"), "1");
        let _ = std::fs::write(format!("{TRACING}/buffer_size_kb"), &self.old_buffer_kb);
        let _ = std::fs::write(format!("{TRACING}/trace"), "");
    }
}

/// Counts blk tracer actions (A, Q, X, M, F, D, R, C …) for one "major,minor".
pub fn count_actions(trace: &str, dev: &str) -> std::collections::BTreeMap<String, u64> {
    count_actions_where(trace, dev, |_, _| true)
}

/// As [`count_actions`], only between the trace markers `from` and `to`
/// (written with [`BlkTracer::marker`]); `to` "" means to the end.
pub fn count_actions_between(
    trace: &str,
    dev: &str,
    from: &str,
    to: &str,
) -> std::collections::BTreeMap<String, u64> {
    let mut between = between_markers(from, to);
    count_actions_where(trace, dev, |_, event| between(event))
}

/// The events among [`count_actions`] that no BPF program could see on this
/// machine: those logged while a thread of its init (PID 1) was current.
///
/// The sandbox's kernel these tests run on hides its init, the VM's agent,
/// from BPF: no BPF program runs while one of its threads is current, also
/// not for a block completion in a softirq that runs on that thread's stack,
/// and no miss is counted (bpftrace's counts are short by the same events).
/// The blk tracer, which is not BPF, still logs those completions. Elsewhere
/// init's threads are traced like any other, so this is only a bound.
pub fn count_actions_in_init_context(
    trace: &str,
    dev: &str,
) -> std::collections::BTreeMap<String, u64> {
    let mut init = InitThreads::default();
    count_actions_where(trace, dev, |line, _| init.is_current(line))
}

/// [`count_actions_in_init_context`] between two markers, as [`count_actions_between`].
pub fn count_actions_in_init_context_between(
    trace: &str,
    dev: &str,
    from: &str,
    to: &str,
) -> std::collections::BTreeMap<String, u64> {
    let mut init = InitThreads::default();
    let mut between = between_markers(from, to);
    count_actions_where(trace, dev, |line, event| {
        between(event) && init.is_current(line)
    })
}

fn between_markers<'a>(from: &'a str, to: &'a str) -> impl FnMut(&str) -> bool + 'a {
    let mut between = false;
    move |event: &str| {
        match event.strip_prefix("tracing_mark_write: ").map(str::trim) {
            Some(marker) if marker == from => between = true,
            Some(marker) if marker == to => between = false,
            _ => {}
        }
        between
    }
}

/// Which thread ids in a trace belong to PID 1 (looked up once each).
#[derive(Default)]
struct InitThreads(std::collections::HashMap<u32, bool>);

impl InitThreads {
    /// Whether the trace `line`'s current task ("comm-tid [cpu] ...") is one
    /// of init's threads.
    fn is_current(&mut self, line: &str) -> bool {
        let task = line.trim_start().split(" [").next().unwrap_or("");
        let Some(tid) = task
            .trim_end()
            .rsplit_once('-')
            .and_then(|(_, tid)| tid.parse::<u32>().ok())
        else {
            return false;
        };
        *self.0.entry(tid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{tid}/status")).is_ok_and(|status| {
                status
                    .lines()
                    .any(|line| line.split_whitespace().eq(["Tgid:", "1"]))
            })
        })
    }
}

fn count_actions_where(
    trace: &str,
    dev: &str,
    mut wanted: impl FnMut(&str, &str) -> bool,
) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    for line in trace.lines().filter(|l| !l.starts_with('#')) {
        // "  dd-123  [001] ..... 12.345678: 7,0    Q  WS 2048 + 8 [dd]"
        let Some((_, event)) = line.split_once(": ") else {
            continue;
        };
        if !wanted(line, event) {
            continue;
        }
        let mut words = event.split_whitespace();
        if words.next() != Some(dev) {
            continue;
        }
        if let Some(action) = words.next() {
            *counts.entry(action.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// The whole disk that holds `path` (e.g. "vda" for a file on /dev/vda or /dev/vda1).
pub fn disk_holding(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let node =
        std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).unwrap_or_else(|err| {
            panic!(
                "{} is on {major}:{minor}, not a block device: {err}",
                path.display()
            )
        });
    let disk = match node.join("partition").exists() {
        true => node.parent().unwrap().to_path_buf(),
        false => node,
    };
    disk.file_name().unwrap().to_string_lossy().into_owned()
}

/// A scratch directory under the temp dir, removed when dropped, also on panic.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    /// `iosplit-<test>-<pid>-<name>`: distinct per test binary and run.
    pub fn new(test: &str, name: &str) -> ScratchDir {
        let dir =
            std::env::temp_dir().join(format!("iosplit-{test}-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sink that keeps nothing: what a recording test puts behind its writer.
pub struct NoSink;

impl iosplit_trace::sink::EventSink for NoSink {
    fn block_event(&mut self, _event: &tracer_common::BlockEvent) {}
}

/// A file that is removed when dropped, also on panic.
pub struct ScratchFile(pub PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The real binary, running in the background until stopped.
pub struct Tracer {
    child: Option<Child>,
    stderr_lines: Vec<String>,
    stderr_rest: Option<std::thread::JoinHandle<String>>,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_iosplit-trace")
}

impl Tracer {
    /// Starts `iosplit-trace ARGS` and waits for its "tracing …" line.
    pub fn start(args: &[&str]) -> Tracer {
        Tracer::start_with(args, &[])
    }

    /// As [`Tracer::start`], with extra environment variables.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Tracer {
        let mut command = Command::new(binary());
        command.args(args).envs(env.iter().copied());
        Tracer::start_command(command)
    }

    /// Starts a prepared command that runs the binary (e.g. under `unshare`).
    pub fn start_command(mut command: Command) -> Tracer {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start iosplit-trace");
        let stderr = child.stderr.take().unwrap();
        let mut reader = BufReader::new(stderr);
        let mut stderr_lines = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            let read = reader.read_line(&mut line).unwrap();
            assert!(
                read > 0,
                "iosplit-trace exited before tracing: {stderr_lines:?}"
            );
            stderr_lines.push(line.trim_end().to_string());
            if line.contains("iosplit-trace: tracing") {
                break;
            }
        }
        // Keep draining stderr so the child never blocks on a full pipe; a
        // failed stop shows it.
        let stderr_rest = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
            if !rest.is_empty() {
                eprint!("{rest}");
            }
            rest
        });
        Tracer {
            child: Some(child),
            stderr_lines,
            stderr_rest: Some(stderr_rest),
        }
    }

    /// Sends SIGINT (Ctrl-C) and returns stdout; panics on a non-zero exit.
    pub fn stop(mut self) -> String {
        let child = self.child.take().unwrap();
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            let rest = self
                .stderr_rest
                .take()
                .and_then(|thread| thread.join().ok())
                .unwrap_or_default();
            panic!(
                "iosplit-trace failed: {:?}; stderr: {:?} {rest:?}",
                out.status, self.stderr_lines
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Tracer {
    /// Waits for the tracer to exit by itself and returns stdout; panics on
    /// a non-zero exit or after `timeout` (then it is killed).
    pub fn wait(mut self, timeout: Duration) -> String {
        let mut child = self.child.take().unwrap();
        // Read stdout meanwhile: a report larger than the pipe (64 KiB, a
        // busy machine's owners) would block the tracer's exit on its write.
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            out
        });
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "iosplit-trace did not exit within {timeout:?}: {:?}",
                    self.stderr_lines
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = reader.join().unwrap();
        assert!(
            status.success(),
            "iosplit-trace failed: {status:?}; stderr: {:?}",
            self.stderr_lines
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The tracer's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Kills the tracer with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

/// Our events as the blk tracer's actions (A remap, Q queue, X split, M/F
/// merges, D issue, C completions, R requeues), from a report's `events`:
/// each probe table row's count under its blk action letter.
pub fn blk_actions_of(events: &serde_json::Value) -> Vec<(&'static str, u64)> {
    let mut actions: Vec<(&'static str, u64)> = Vec::new();
    for kind in tracer_common::EventKind::ALL {
        let letter = kind.blk_action();
        if letter.is_empty() {
            continue;
        }
        let Some(count) = events.get(kind.json_key()).and_then(|n| n.as_u64()) else {
            // Requeues only where the probes report them; every other row must be there.
            assert_eq!(
                kind,
                tracer_common::EventKind::Requeue,
                "events.{} missing: {events}",
                kind.json_key()
            );
            continue;
        };
        match actions.iter_mut().find(|(seen, _)| *seen == letter) {
            Some((_, total)) => *total += count,
            None => actions.push((letter, count)),
        }
    }
    actions
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `dd` with these arguments, panicking on failure.
pub fn dd(args: &[&str]) {
    sh("dd", &[args, &["status=none"]].concat());
}

/// A tmux session, killed on drop.
pub struct Tmux {
    session: String,
}

impl Tmux {
    pub fn start(session: &str, command: &str) -> Tmux {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", session])
            .status();
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "120",
                "-y",
                "40",
                command,
            ])
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        Tmux {
            session: session.to_string(),
        }
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .expect("capture-pane runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .expect("send-keys runs");
        assert!(status.success());
    }

    /// Waits until the screen shows every needle; panics with the screen otherwise.
    pub fn wait_for(&self, needles: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            if needles.iter().all(|n| screen.contains(n)) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "screen never showed {needles:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Tmux {
    /// Processes started by the pane's shell (the binary under test).
    pub fn pane_children(&self) -> Vec<u32> {
        let out = Command::new("tmux")
            .args(["display-message", "-p", "-t", &self.session, "#{pane_pid}"])
            .output()
            .expect("display-message runs");
        let pane = String::from_utf8_lossy(&out.stdout).trim().to_string();
        children_of(&pane)
    }

    /// Kills the session as a closed terminal would: the pane's pty goes away.
    pub fn hang_up(&self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}

/// Process ids whose parent is `parent`, from /proc.
pub fn children_of(parent: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                // "pid (comm) state ppid …": comm may hold spaces, so split after ')'.
                .and_then(|stat| {
                    Some(stat.rsplit_once(')')?.1.split_whitespace().nth(1)? == parent)
                })
                .unwrap_or(false)
        })
        .collect()
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // A binary left running (a failed test) must not outlive the session.
        let children = self.pane_children();
        self.hang_up();
        for pid in children {
            // SAFETY: signalling a process this test started in its pane.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// `count` direct writes of 1 MiB to a new file at `path`, each gathered
/// from one page repeated 256 times, so each write reaches the device as 256
/// segments whatever the memory allocator did (a page never follows itself
/// physically). dd's own buffer, and even every other page of a fresh
/// mapping, is sometimes physically contiguous (a few segments), and then
/// nothing is split or requeued.
pub fn scattered_direct_writes(path: &Path, count: u64) {
    use std::os::unix::ffi::OsStrExt;
    const PAGE: usize = 4096;
    const PAGES: usize = 256;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECT,
            0o600,
        )
    };
    assert!(
        fd >= 0,
        "open {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let length = PAGE;
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let buffer = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    assert_ne!(
        buffer,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    let pages: Vec<libc::iovec> = (0..PAGES)
        .map(|_| libc::iovec {
            iov_base: buffer,
            iov_len: PAGE,
        })
        .collect();
    for write in 0..count {
        let offset = (write * (PAGES * PAGE) as u64) as libc::off_t;
        // SAFETY: the iovecs point into the live mapping.
        let written = unsafe { libc::pwritev(fd, pages.as_ptr(), PAGES as i32, offset) };
        assert_eq!(
            written,
            (PAGES * PAGE) as isize,
            "pwritev: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: unmapping and closing what was created above.
    unsafe {
        libc::munmap(buffer, length);
        libc::close(fd);
    }
}

/// A 96 MiB loop disk with an aligned partition and an odd-sized one (the
/// kernel gives that one 512-byte blocks, the seed's symptom), limited to
/// 64 KiB requests so larger writes split.
pub fn split_prone_disk(name: &str) -> LoopDisk {
    let mut disk = LoopDisk::new(
        name,
        96,
        &[
            PartitionSpec {
                start: 2048,
                size: 65536,
            },
            PartitionSpec {
                start: 69632,
                size: 100001,
            },
        ],
    );
    disk.set_queue("max_sectors_kb", "64");
    disk
}

/// The blk tracer's actions and the report's `events` keys that count them:
/// each probe table row (`with_block_probes!`, whose letters the importers
/// read too) under its blk action letter, letters in the table's order.
pub fn blk_action_keys() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut actions: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for kind in tracer_common::EventKind::ALL {
        let letter = kind.blk_action();
        if letter.is_empty() {
            continue;
        }
        match actions.iter_mut().find(|(seen, _)| *seen == letter) {
            Some((_, keys)) => keys.push(kind.json_key()),
            None => actions.push((letter, vec![kind.json_key()])),
        }
    }
    actions
}
