//! The files `run` holds open so their extent maps can be read after the
//! command, even once it has renamed or removed them.
//!
//! A file target is taken hold of as soon as its open for writing reaches
//! us (the probe wakes the reader for such opens), at a dup of it, or at
//! its first write seen otherwise: `/proc/PID/fd/N` (or, when that fd is
//! closed already, the path it was opened as) is opened read-only and kept
//! if it is still the same inode. An open file keeps its inode and its blocks while
//! the command renames it, renames another file over it or unlinks it, so
//! FIEMAP through the held fd reads where its bytes went, after the run's
//! I/O has settled, as for any other file.
//!
//! A hold is let go, after its map is taken through it, when the command
//! closes its last fd of the file and every write to it so far came before
//! an fsync or fdatasync (their extents are then on disk); that map is used
//! if the file is gone at the end. So files the command closes unsynced
//! stay open until `run` ends: their space is freed only then, and an
//! unmount of their filesystem inside the run fails with EBUSY.
//!
//! No race with the command: the probe stops its process (SIGSTOP) at each
//! open for writing, and the reader sends SIGCONT once it has handled the
//! open, so the file is held before the command's next instruction. A parent
//! that sees its child stop may stop itself in turn (su, runuser, sudo
//! pass job control on that way, and would wait forever):
//! [`StoppedParents`] sends it SIGCONT too, but only a stop seen at two
//! looks with a drain between, so never one of the probe's own. With
//! `run --no-pause` it is a race: a file opened, written, closed and
//! removed before the reader has handled its open is missed, and its
//! writes are "not matched" with the reason (or, when its path was gone
//! before the open was resolved, not followed at all). docs/usage.md has
//! the measured cases.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::geometry::fiemap::{self, FileMap};

/// Files held at once; past it, files are read by path at the end. Never
/// more than half the soft RLIMIT_NOFILE either (not raised: the command
/// would inherit it), so the tracer's own opens still succeed.
pub const MAX_PINS: usize = 4096;

/// How many files may be held: [`MAX_PINS`], or half the fd limit.
fn pin_cap() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 256;
    }
    usize::try_from(limit.rlim_cur / 2).map_or(MAX_PINS, |half| half.min(MAX_PINS))
}

/// What happened to the holds, for the report's status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinCounts {
    /// Files taken hold of.
    pub pinned: u64,
    /// Files that could not be (gone or replaced before we looked, no
    /// access, over [`MAX_PINS`]).
    pub missed: u64,
    /// Opens for writing the command was stopped at until they were handled,
    /// and how long it was stopped at them, summed.
    pub paused: u64,
    pub paused_ns: u64,
}

/// Held files and the maps taken when a hold was let go, by target number.
pub struct FilePins {
    held: HashMap<usize, File>,
    released: HashMap<usize, FileMap>,
    cap: usize,
    pub counts: PinCounts,
}

impl Default for FilePins {
    fn default() -> Self {
        FilePins {
            held: HashMap::new(),
            released: HashMap::new(),
            cap: pin_cap(),
            counts: PinCounts::default(),
        }
    }
}

impl FilePins {
    pub fn is_held(&self, target: usize) -> bool {
        self.held.contains_key(&target)
    }

    /// Takes hold of `target` through fd `fd` of `tgid`, or else at `path`
    /// (the process may have dup'ed and closed that fd already), if that is
    /// still inode `inode`. Returns whether it is held now.
    pub fn pin(&mut self, target: usize, inode: u64, path: &str, tgid: u32, fd: u32) -> bool {
        if self.held.contains_key(&target) {
            return true;
        }
        if self.held.len() >= self.cap {
            self.counts.missed += 1;
            return false;
        }
        let opened = open_same_file(&format!("/proc/{tgid}/fd/{fd}"), inode)
            .or_else(|| open_same_file(path, inode));
        match opened {
            Some(file) => {
                self.held.insert(target, file);
                self.released.remove(&target);
                self.counts.pinned += 1;
                true
            }
            None => {
                self.counts.missed += 1;
                false
            }
        }
    }

    /// Lets go of `target`, keeping its map as it is now when `written`.
    pub fn release(&mut self, target: usize, written: bool) {
        if let Some(file) = self.held.remove(&target) {
            if written {
                if let Ok(map) = fiemap::open_file_map(&file) {
                    self.released.insert(target, map);
                }
            }
        }
    }

    /// `target`'s extent map at the end: through its hold, else at `path`
    /// if that is still inode `inode`, else as taken when its hold was let go.
    pub fn final_map(&self, target: usize, path: &str, inode: u64) -> io::Result<FileMap> {
        if let Some(file) = self.held.get(&target) {
            return fiemap::open_file_map(file);
        }
        match fiemap::file_map(std::path::Path::new(path), inode) {
            Ok(map) => Ok(map),
            Err(err) => self.released.get(&target).cloned().ok_or(err),
        }
    }

    /// Closes every held file.
    pub fn clear(&mut self) {
        self.held.clear();
        self.released.clear();
    }
}

/// The parents of processes stopped at an open, watched while they live:
/// one found stopped is sent SIGCONT (it stopped itself on seeing its child
/// stop; a stop by anyone else is undone too, the price of not hanging).
///
/// Only a stop seen at two looks is undone: a watched parent may be paused
/// at an open of its own (a shell that forked a paused child, then ran a
/// redirection or exec'd the program that writes), and continuing that
/// stop before the reader has handled the open lets the process run on and
/// remove the file before it is held. The probe commits an open's record
/// before its process stops, and a drain comes between two looks, so a
/// stop that is the probe's is handled (and continued,
/// [`StoppedParents::continued`]) before the second look. A parent still
/// stopped then, and not run since (the same count of context switches),
/// was stopped by something else. Continuing at the first look made about
/// one run in eight of a test writing 200 files miss one (issue #48): the
/// pyenv `python3` shim, a bash script, was watched as the parent of a
/// child it forked, then exec'd python3, whose stops the watcher undid.
#[derive(Default)]
pub struct StoppedParents {
    /// Each watched parent, with its context switches when the last look
    /// found it stopped (`None`: it was not, or was continued since).
    watched: Vec<(u32, Option<u64>)>,
    last_look: Option<std::time::Instant>,
}

impl StoppedParents {
    /// How often the watched parents are looked at.
    const EVERY: std::time::Duration = std::time::Duration::from_millis(10);

    /// Watches the parent of `tgid` (stopped now), unless it is `tracer`.
    pub fn watch_parent_of(&mut self, tgid: u32, tracer: u32) {
        let Some(parent) = process_state(tgid).map(|(_, parent)| parent) else {
            return;
        };
        if parent > 1 && parent != tracer && !self.watched.iter().any(|&(p, _)| p == parent) {
            self.watched.push((parent, None));
        }
    }

    /// The reader has continued `tgid`, stopped at an open it handled: a
    /// stop of it seen by the last look was that one.
    pub fn continued(&mut self, tgid: u32) {
        for (parent, stop) in &mut self.watched {
            if *parent == tgid {
                *stop = None;
            }
        }
    }

    /// Call after each drain. Sends SIGCONT to each watched parent found
    /// stopped by this look and the last one, not run and not continued in
    /// between; forgets the gone. Returns how many were continued.
    pub fn continue_stopped(&mut self, now: std::time::Instant) -> u64 {
        if self.watched.is_empty()
            || self
                .last_look
                .is_some_and(|last| now.duration_since(last) < Self::EVERY)
        {
            return 0;
        }
        self.last_look = Some(now);
        let mut continued = 0;
        self.watched
            .retain_mut(|(parent, seen)| match process_stop(*parent) {
                Some((state, switches)) => {
                    let stop = (state == 'T').then_some(switches);
                    if stop.is_some() && stop == *seen {
                        // SAFETY: a signal to a process of the command's tree.
                        unsafe { libc::kill(*parent as i32, libc::SIGCONT) };
                        continued += 1;
                        *seen = None;
                    } else {
                        *seen = stop;
                    }
                    state != 'Z' && state != 'X'
                }
                None => false,
            });
        continued
    }
}

/// A process's state letter and its context switches so far (voluntary
/// and not), from `/proc/PID/status`.
fn process_stop(tgid: u32) -> Option<(char, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok()?;
    parse_status(&status)
}

/// `State:\tT (stopped)` and the two `*ctxt_switches:` lines.
fn parse_status(status: &str) -> Option<(char, u64)> {
    let mut state = None;
    let mut switches = 0;
    let mut counts = 0;
    for line in status.lines() {
        if let Some(value) = line.strip_prefix("State:") {
            state = value.trim_start().chars().next();
        } else if let Some(value) = line
            .strip_prefix("voluntary_ctxt_switches:")
            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
        {
            switches += value.trim().parse::<u64>().ok()?;
            counts += 1;
        }
    }
    (counts == 2).then_some((state?, switches))
}

/// A process's state letter and parent, from `/proc/PID/stat`.
fn process_state(tgid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{tgid}/stat")).ok()?;
    parse_stat(&stat)
}

/// `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses.
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// `path` opened read-only, if it is the regular file `inode`.
fn open_same_file(path: &str, inode: u64) -> Option<File> {
    // O_NONBLOCK: a FIFO must not hang us (checked after); O_NOATIME where
    // allowed, so holding a file leaves no trace on it.
    let open = |flags| {
        File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags)
            .open(path)
    };
    let file = open(libc::O_NOATIME).or_else(|_| open(0)).ok()?;
    let metadata = file.metadata().ok()?;
    (metadata.is_file() && metadata.ino() == inode).then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_stat_line_gives_state_and_parent_whatever_the_name() {
        assert_eq!(parse_stat("42 (dd) T 7 42 7 0"), Some(('T', 7)));
        assert_eq!(parse_stat("42 (a) b (c) S 9 1"), Some(('S', 9)));
        assert_eq!(parse_stat("42 (dd"), None);
    }

    #[test]
    fn a_status_gives_state_and_context_switches() {
        let status = "Name:\tsu\nState:\tT (stopped)\nPPid:\t7\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t2\n";
        assert_eq!(parse_status(status), Some(('T', 7)));
        assert_eq!(parse_status("State:\tS (sleeping)\n"), None);
    }

    /// A parent stopped by the probe at an open of its own is left to the
    /// reader: only a stop seen twice, with the reader not continuing it
    /// in between, is undone.
    #[test]
    fn a_stopped_parent_is_continued_and_a_gone_one_forgotten() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // SAFETY: stopping our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let stopped = |want: char| {
            (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                process_state(pid).is_some_and(|(state, _)| state == want)
            })
        };
        assert!(stopped('T'));
        let mut parents = StoppedParents {
            watched: vec![(pid, None)],
            last_look: None,
        };
        let every = StoppedParents::EVERY;
        let start = std::time::Instant::now();
        assert_eq!(parents.continue_stopped(start), 0, "first seen stopped");
        // The reader continued it at an open meanwhile: not this stop.
        parents.continued(pid);
        assert_eq!(parents.continue_stopped(start + every), 0);
        assert_eq!(
            parents.continue_stopped(start + every / 2 * 3),
            0,
            "too soon"
        );
        assert_eq!(parents.continue_stopped(start + 2 * every), 1, "seen twice");
        assert!(stopped('S'), "continued");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(parents.continue_stopped(start + 3 * every), 0);
        assert!(parents.watched.is_empty());
    }

    #[test]
    fn a_held_file_is_mapped_after_it_is_removed_and_only_if_it_is_the_same_inode() {
        let dir = std::env::temp_dir().join(format!("iosplit-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut file = File::create(&path).unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        file.sync_all().unwrap();
        let inode = file.metadata().unwrap().ino();
        let (tgid, fd) = (std::process::id(), file.as_raw_fd() as u32);
        let mut pins = FilePins::default();
        let named = path.to_string_lossy().into_owned();
        assert!(
            !pins.pin(0, inode + 1, &named, tgid, fd),
            "another inode is not held"
        );
        // The fd named is not open: found by its path.
        assert!(pins.pin(0, inode, &named, tgid, 999_999));
        pins.release(0, false);
        assert!(pins.pin(0, inode, "/nonexistent", tgid, fd));
        std::fs::remove_file(&path).unwrap();
        drop(file);
        let path = path.to_string_lossy().into_owned();
        // tmpfs has no FIEMAP: the point is that the file is still reached.
        let held = pins.final_map(0, &path, inode);
        assert!(
            !matches!(&held, Err(err) if err.kind() == io::ErrorKind::NotFound),
            "{held:?}"
        );
        pins.release(0, true);
        assert!(!pins.is_held(0));
        assert_eq!(
            pins.counts,
            PinCounts {
                pinned: 2,
                missed: 1,
                ..PinCounts::default()
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
