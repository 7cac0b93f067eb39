//! `run --pid PID`: the process tree of a command already running, taken
//! over at one instant.
//!
//! The tree is stopped (SIGSTOP) before it is tracked, its open fds and
//! their positions are read from /proc while nothing can write, and only
//! then is it let go (SIGCONT). So no write falls between what /proc said
//! and what the probes see: a fork cannot finish while a signal is pending,
//! and a write in progress finishes before its task stops.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a task may take to stop (one in uninterruptible sleep finishes its I/O first).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The process being attached to, checked and held by a pidfd, so that a
/// pid handed out again later is never taken for it.
pub struct AttachTarget {
    pub pid: u32,
    pub command: Vec<String>,
    pidfd: OwnedFd,
}

impl AttachTarget {
    pub fn open(pid: u32) -> Result<AttachTarget> {
        if pid == std::process::id() {
            return Err(Error::usage(format!(
                "--pid {pid} is iosplit-trace itself: give the pid of the command to follow"
            )));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ESRCH) => Error::usage(format!(
                    "no process {pid}: give the pid of a running command (see `pgrep -a NAME`)"
                )),
                _ => Error::failure(format!("cannot follow process {pid}: {err}")),
            });
        }
        // SAFETY: a new fd that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let command: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|word| !word.is_empty())
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        // An empty cmdline is not proof of a kernel thread: a process can be
        // caught while its arguments are not readable (or has cleared them);
        // /proc/PID/stat tells them apart, and its name stands in.
        let command = match command.is_empty() {
            false => command,
            true => match StatLine::read(pid) {
                Some(stat) if stat.state == 'Z' || stat.flags & PF_KTHREAD != 0 => {
                    return Err(Error::usage(format!(
                        "process {pid} is a kernel thread or a zombie: give the pid of a running command"
                    )))
                }
                Some(stat) => vec![format!("[{}]", stat.comm)],
                None => {
                    return Err(Error::usage(format!(
                        "no process {pid}: give the pid of a running command (see `pgrep -a NAME`)"
                    )))
                }
            },
        };
        Ok(AttachTarget {
            pid,
            command,
            pidfd,
        })
    }

    /// Readable once the process has exited.
    pub fn exit_fd(&self) -> Result<tokio::io::unix::AsyncFd<OwnedFd>> {
        let failed = |err: std::io::Error| {
            Error::failure(format!("cannot wait for process {}: {err}", self.pid))
        };
        let pidfd = self.pidfd.try_clone().map_err(failed)?;
        // SAFETY: the AsyncFd owns this duplicate and closes it only when dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
        }
        .map_err(|err| failed(err.into_parts().1))
    }
}

/// The tree, stopped: its processes, and which were stopped already
/// (by job control, a debugger), which are left stopped.
pub struct StoppedTree {
    pub processes: Vec<u32>,
    already_stopped: BTreeSet<u32>,
}

impl StoppedTree {
    /// Stops `pid` and every descendant, however many forks come meanwhile.
    pub fn stop(pid: u32) -> Result<StoppedTree> {
        let mut tree = StoppedTree {
            processes: Vec::new(),
            already_stopped: BTreeSet::new(),
        };
        let mut signalled = BTreeSet::new();
        loop {
            let now = descendants(pid);
            if !now.contains(&pid) {
                tree.resume();
                return Err(Error::usage(format!(
                    "process {pid} exited before it was attached"
                )));
            }
            let new: Vec<u32> = now.difference(&signalled).copied().collect();
            if new.is_empty() {
                tree.processes = now.into_iter().collect();
                return Ok(tree);
            }
            for &tgid in &new {
                if process_stopped(tgid) {
                    tree.already_stopped.insert(tgid);
                } else {
                    // SAFETY: a signal to a process; root may stop any.
                    unsafe { libc::kill(tgid as i32, libc::SIGSTOP) };
                }
                signalled.insert(tgid);
                tree.processes.push(tgid);
            }
            let deadline = Instant::now() + STOP_TIMEOUT;
            while !new.iter().all(|&tgid| process_stopped(tgid)) {
                if Instant::now() >= deadline {
                    tree.resume();
                    return Err(Error::failure(format!(
                        "process {pid}'s tree did not stop within {} s (a task stuck in uninterruptible I/O?)",
                        STOP_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Lets go of every process this stopped.
    pub fn resume(&self) {
        for tgid in &self.processes {
            if !self.already_stopped.contains(tgid) {
                // SAFETY: as in `stop`.
                unsafe { libc::kill(*tgid as i32, libc::SIGCONT) };
            }
        }
    }
}

/// `pid` and its descendants that exist now, from every process's ppid.
fn descendants(pid: u32) -> BTreeSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut exists = false;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(tgid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        exists |= tgid == pid;
        if let Some((ppid, _)) = stat_fields(tgid) {
            children.entry(ppid).or_default().push(tgid);
        }
    }
    let mut tree = BTreeSet::new();
    if !exists {
        return tree;
    }
    let mut todo = vec![pid];
    while let Some(tgid) = todo.pop() {
        if tree.insert(tgid) {
            todo.extend(children.get(&tgid).into_iter().flatten());
        }
    }
    tree
}

/// A process's parent and state letter, from /proc/PID/stat (the command
/// name may hold spaces and parentheses: fields count from the last ')').
fn stat_fields(tgid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{tgid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Every thread of the process is stopped, or it is gone.
fn process_stopped(tgid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{tgid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let state = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let after = stat.get(stat.rfind(')')? + 1..)?;
                after.split_whitespace().next()?.chars().next()
            });
        matches!(state, None | Some('T' | 't' | 'Z' | 'X'))
    })
}

/// An open fd of a stopped process: its number and file position, the
/// position left out for O_APPEND (its writes go to the end).
pub struct OpenFd {
    pub fd: u32,
    pub position: Option<u64>,
    /// Open for writing (O_WRONLY or O_RDWR).
    pub writable: bool,
    /// Opened O_DIRECT.
    pub direct: bool,
}

/// The fds `tgid` holds now, from /proc/PID/fdinfo.
pub fn open_fds(tgid: u32) -> Vec<OpenFd> {
    let mut fds = Vec::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{tgid}/fdinfo")) else {
        return fds;
    };
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(fdinfo) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let (position, flags) = fdinfo_position(&fdinfo);
        let appends = flags.is_some_and(|flags| flags & libc::O_APPEND as u64 != 0);
        fds.push(OpenFd {
            fd,
            position: position.filter(|_| !appends),
            writable: flags.is_some_and(|flags| flags & libc::O_ACCMODE as u64 != 0),
            direct: flags.is_some_and(|flags| flags & libc::O_DIRECT as u64 != 0),
        });
    }
    fds
}

/// `pos:` (decimal) and `flags:` (octal) of one fdinfo file.
fn fdinfo_position(fdinfo: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        fdinfo
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    (
        field("pos:").and_then(|pos| pos.parse().ok()),
        field("flags:").and_then(|flags| u64::from_str_radix(flags, 8).ok()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn fdinfo_gives_the_position_and_octal_flags() {
        // O_CLOEXEC | O_LARGEFILE | O_WRONLY, then with O_APPEND.
        let fdinfo = "pos:\t8192\nflags:\t02100001\nmnt_id:\t29\nino:\t12\n";
        let (position, flags) = fdinfo_position(fdinfo);
        assert_eq!(position, Some(8192));
        assert_eq!(flags, Some(0o2100001));
        assert!(flags.unwrap() & libc::O_APPEND as u64 == 0);
        let appends = fdinfo_position("pos:\t0\nflags:\t02102001\n").1.unwrap();
        assert!(appends & libc::O_APPEND as u64 != 0);
        assert_eq!(fdinfo_position("garbage"), (None, None));
    }

    #[test]
    fn our_own_tree_is_found_and_our_fds_read() {
        let me = std::process::id();
        let tree = descendants(me);
        assert!(tree.contains(&me));
        assert!(!tree.contains(&1) || me == 1);
        // This test binary holds stdin, stdout and stderr at least.
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let fds = open_fds(me);
        let fd = file.as_raw_fd() as u32;
        let ours = fds
            .iter()
            .find(|open| open.fd == fd)
            .expect("the opened fd");
        assert_eq!(ours.position, Some(0));
        assert!(descendants(u32::MAX).is_empty());
        let parent = std::os::unix::process::parent_id();
        assert_eq!(stat_fields(me).map(|(ppid, _)| ppid), Some(parent));
    }
}

/// `PF_KTHREAD` in `/proc/PID/stat`'s flags (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// What attach reads of `/proc/PID/stat`: the name, state and flags.
struct StatLine {
    comm: String,
    state: char,
    flags: u64,
}

impl StatLine {
    fn read(pid: u32) -> Option<StatLine> {
        StatLine::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// The name sits between the first `(` and the last `)`; the state and
    /// flags are the 1st and 7th fields after it.
    fn parse(line: &str) -> Option<StatLine> {
        let (head, rest) = line.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let flags = fields.nth(5)?.parse().ok()?;
        Some(StatLine { comm, state, flags })
    }
}

#[cfg(test)]
mod stat_tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_name_state_and_kernel_thread_flag() {
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 8 0 0";
        let stat = StatLine::parse(kthread).unwrap();
        assert_eq!((stat.comm.as_str(), stat.state), ("kthreadd", 'S'));
        assert_ne!(stat.flags & PF_KTHREAD, 0);
        let shell = "11490 (sh (odd) name) S 1 11490 9 0 -1 4194560 129 0 0 0 0 0";
        let stat = StatLine::parse(shell).unwrap();
        assert_eq!(stat.comm, "sh (odd) name");
        assert_eq!(stat.flags & PF_KTHREAD, 0);
        // The harness's main thread sleeps while tests run, so only "not a
        // zombie, not a kernel thread" holds for our own pid.
        let own = StatLine::read(std::process::id()).unwrap();
        assert!(own.state != 'Z' && own.flags & PF_KTHREAD == 0);
        assert!(StatLine::parse("garbage").is_none());
    }
}
