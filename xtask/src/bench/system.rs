//! What the benchmark changes on the machine, each behind a guard that puts
//! it back on drop (also on error and panic), and the /proc readers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::util::{display, Result};

/// Set by SIGINT/SIGTERM; the benchmark stops at the next check and unwinds
/// through its guards instead of dying with the machine half set up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn install_interrupt_handler() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe;
        // `sigaction` gets a zeroed struct with just the handler set.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err("interrupted; everything the benchmark set up has been put back".to_string())
    } else {
        Ok(())
    }
}

/// Sleeps, but wakes early (with an error) when interrupted.
pub fn pause(duration: Duration) -> Result<()> {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        check_interrupted()?;
        sleep(Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())));
    }
    check_interrupted()
}

pub fn read_trimmed(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|text| text.trim().to_string())
        .map_err(|err| format!("cannot read {}: {err}", path.display()))
}

pub fn write_value(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .map_err(|err| format!("cannot write {value} to {}: {err}", path.display()))
}

/// A sysfs or procfs value changed for the run; the old value is written back on drop.
pub struct Setting {
    path: PathBuf,
    original: String,
}

impl Setting {
    pub fn set(path: impl Into<PathBuf>, value: &str) -> Result<Self> {
        let path = path.into();
        let original = read_trimmed(&path)?;
        write_value(&path, value)?;
        Ok(Self { path, original })
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        if let Err(err) = write_value(&self.path, &self.original) {
            eprintln!(
                "xtask bench: could not restore {}: {err}",
                self.path.display()
            );
        }
    }
}

/// One benchmark at a time: a second one would record the first one's
/// settings (bpf_stats, max_sectors_kb) as the originals and restore those.
/// The kernel releases the lock when the process exits, however it exits.
pub struct BenchLock {
    _file: fs::File,
}

const LOCK_PATH: &str = "/run/lock/iosplit-bench.lock";

impl BenchLock {
    pub fn acquire() -> Result<Self> {
        use std::os::fd::AsRawFd;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_PATH)
            .map_err(|err| format!("cannot open {LOCK_PATH}: {err}"))?;
        // SAFETY: flock on a descriptor we own for as long as `file` lives.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            return Err(format!(
                "another `cargo xtask bench` is running (it holds {LOCK_PATH})"
            ));
        }
        Ok(Self { _file: file })
    }
}

/// Scratch files (tracer output, fio JSON) in /dev/shm, removed on drop.
pub struct ScratchDir {
    pub path: PathBuf,
}

impl ScratchDir {
    pub fn create() -> Result<Self> {
        let path = PathBuf::from(format!("/dev/shm/iosplit-bench-{}", std::process::id()));
        fs::create_dir_all(&path)
            .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
        Ok(Self { path })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_dir_all(&self.path) {
            eprintln!(
                "xtask bench: could not remove {}: {err}",
                self.path.display()
            );
        }
    }
}

/// Mounts tracefs when it is not mounted yet (bpftrace needs it), and
/// unmounts it on drop only if this run mounted it.
pub struct TracefsMount {
    mounted_here: bool,
}

const TRACEFS: &str = "/sys/kernel/tracing";

impl TracefsMount {
    pub fn ensure() -> Result<Self> {
        if Path::new(TRACEFS).join("events").is_dir() {
            return Ok(Self {
                mounted_here: false,
            });
        }
        crate::util::run(Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]))?;
        Ok(Self { mounted_here: true })
    }
}

impl Drop for TracefsMount {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = Command::new("umount").arg(TRACEFS).status();
        }
    }
}

/// Resources a process used, from `wait4` when it was reaped (CPU only:
/// its `ru_maxrss` starts at the spawning bench's own size).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub cpu: Duration,
}

/// A child process that is killed (SIGKILL) and reaped on drop unless it was
/// already reaped: no tracer or fio outlives the benchmark.
pub struct Process {
    name: String,
    child: Child,
    reaped: bool,
}

impl Process {
    pub fn spawn(cmd: &mut Command) -> Result<Self> {
        let name = display(cmd);
        let child = cmd
            .spawn()
            .map_err(|err| format!("cannot start {name}: {err}"))?;
        Ok(Self {
            name,
            child,
            reaped: false,
        })
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reaps the child if it has exited, returning its status and usage.
    pub fn try_reap(&mut self) -> Result<Option<(ExitStatus, Usage)>> {
        if self.reaped {
            return Err(format!("{} was already reaped", self.name));
        }
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: the pid is our own unreaped child; the pointers are to live locals.
        let reaped = unsafe { libc::wait4(self.pid(), &mut status, libc::WNOHANG, &mut usage) };
        match reaped {
            0 => Ok(None),
            pid if pid == self.pid() => {
                self.reaped = true;
                use std::os::unix::process::ExitStatusExt;
                Ok(Some((ExitStatus::from_raw(status), usage_of(&usage))))
            }
            _ => Err(format!(
                "waiting for {} failed: {}",
                self.name,
                std::io::Error::last_os_error()
            )),
        }
    }

    /// Waits until the child exits, killing it past `timeout` or on interrupt.
    pub fn wait(&mut self, timeout: Duration) -> Result<(ExitStatus, Usage)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(done) = self.try_reap()? {
                return Ok(done);
            }
            check_interrupted()?;
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("{} did not finish within {timeout:?}", self.name));
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// Sends SIGINT, as Ctrl-C would, and waits for the child to exit.
    pub fn interrupt_and_wait(&mut self, timeout: Duration) -> Result<(ExitStatus, Usage)> {
        // SAFETY: kill(2) on our own unreaped child; the pid cannot have been reused.
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        self.wait(timeout)
    }

    fn kill(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: our own unreaped child, so the pid still names it.
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        let mut status: libc::c_int = 0;
        // SAFETY: blocking wait for our own child after SIGKILL; it cannot ignore it.
        unsafe { libc::waitpid(self.pid(), &mut status, 0) };
        self.reaped = true;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.reaped {
            eprintln!("xtask bench: stopping {} (pid {})", self.name, self.pid());
            self.kill();
        }
    }
}

fn usage_of(usage: &libc::rusage) -> Usage {
    let timeval = |tv: libc::timeval| {
        Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    };
    Usage {
        cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
    }
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// utime + stime of a process, in clock ticks, from the text of /proc/PID/stat.
pub fn parse_process_ticks(stat: &str) -> Option<u64> {
    // The command name may contain spaces and parentheses: fields restart after the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time (user + system) a live process has used so far.
pub fn process_cpu(pid: i32) -> Option<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_process_ticks(&stat)?;
    Some(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second() as f64,
    ))
}

/// A `kB` field of /proc/PID/status (`VmHWM:`, `VmRSS:`), in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Peak resident set so far.
pub fn vm_hwm_kib(pid: i32) -> Option<u64> {
    parse_status_kib(
        &fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "VmHWM:",
    )
}

/// Resident set now.
pub fn vm_rss_kib(pid: i32) -> Option<u64> {
    parse_status_kib(
        &fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "VmRSS:",
    )
}

/// Busy and total CPU ticks of the whole machine, from the `cpu ` line of /proc/stat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineTicks {
    pub busy: u64,
    pub total: u64,
}

pub fn parse_machine_ticks(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]; guest
    // time is already inside user, so only the first eight count.
    let counted = values.get(..8)?;
    let total: u64 = counted.iter().sum();
    let idle = counted[3] + counted[4];
    Some(MachineTicks {
        busy: total - idle,
        total,
    })
}

pub fn machine_ticks() -> Option<MachineTicks> {
    parse_machine_ticks(&fs::read_to_string("/proc/stat").ok()?)
}

/// Busy CPU time between two samples of the whole machine.
pub fn busy_between(before: MachineTicks, after: MachineTicks) -> Duration {
    let ticks = after.busy.saturating_sub(before.busy);
    Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64)
}

pub fn load_average() -> [f64; 3] {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut values = text
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(f64::NAN));
    [
        values.next().unwrap_or(f64::NAN),
        values.next().unwrap_or(f64::NAN),
        values.next().unwrap_or(f64::NAN),
    ]
}

/// Run time of the BPF programs a process holds open, as the kernel counts it
/// with `kernel.bpf_stats_enabled=1` (zero otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BpfRunStats {
    pub programs: u32,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// `run_time_ns` and `run_cnt` from the fdinfo text of one BPF program fd.
pub fn parse_prog_fdinfo(fdinfo: &str) -> Option<(u64, u64)> {
    let value = |key: &str| {
        fdinfo
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.trim().parse::<u64>().ok())
    };
    fdinfo
        .lines()
        .any(|line| line.starts_with("prog_id:"))
        .then_some(())?;
    Some((value("run_time_ns:")?, value("run_cnt:")?))
}

/// Sums the stats over every BPF program fd in /proc/PID/fd. Program ids are
/// deduplicated, since a process may hold one program through several fds.
pub fn bpf_run_stats(pid: i32) -> BpfRunStats {
    let mut seen = std::collections::BTreeSet::new();
    let mut stats = BpfRunStats::default();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return stats;
    };
    for fd in fds.filter_map(|entry| entry.ok()) {
        let is_prog = fs::read_link(fd.path())
            .is_ok_and(|target| target.to_string_lossy().contains("bpf-prog"));
        if !is_prog {
            continue;
        }
        let info_path = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let Ok(info) = fs::read_to_string(info_path) else {
            continue;
        };
        let id = info
            .lines()
            .find_map(|line| line.strip_prefix("prog_id:"))
            .map(|id| id.trim().to_string());
        if let (Some(id), Some((run_time_ns, run_cnt))) = (id, parse_prog_fdinfo(&info)) {
            if seen.insert(id) {
                stats.programs += 1;
                stats.run_time_ns += run_time_ns;
                stats.run_cnt += run_cnt;
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_ticks_survive_spaces_and_parens_in_the_name() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 99 1000 200";
        assert_eq!(parse_process_ticks(stat), Some(22));
        assert_eq!(parse_process_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn status_sizes_are_read_in_kib() {
        let status =
            "Name:\tiosplit-trace\nVmPeak:\t  90000 kB\nVmHWM:\t   41712 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(41712));
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(40000));
        assert_eq!(parse_status_kib("Name:\tzombie\n", "VmHWM:"), None);
    }

    #[test]
    fn machine_ticks_leave_out_idle_iowait_and_guest() {
        let stat = "cpu  100 5 50 1000 20 3 7 2 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        let ticks = parse_machine_ticks(stat).unwrap();
        assert_eq!(ticks.total, 100 + 5 + 50 + 1000 + 20 + 3 + 7 + 2);
        assert_eq!(ticks.busy, 100 + 5 + 50 + 3 + 7 + 2);
    }

    #[test]
    fn prog_fdinfo_gives_run_time_and_count() {
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t5\nprog_id:\t199\nrun_time_ns:\t93073648\nrun_cnt:\t524936\n";
        assert_eq!(parse_prog_fdinfo(info), Some((93073648, 524936)));
        let map = "pos:\t0\nmap_type:\t27\nmap_id:\t12\n";
        assert_eq!(parse_prog_fdinfo(map), None);
    }
}
