//! What the kernel must offer before probes load: privileges and tracefs.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability bits from a `/proc/<pid>/status` text.
pub fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// Why these capabilities cannot trace, or `None` when they can.
pub fn missing_privileges(caps: u64) -> Option<&'static str> {
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        None
    } else if has(CAP_BPF) {
        Some("CAP_PERFMON is missing")
    } else {
        Some("CAP_BPF and CAP_PERFMON are missing")
    }
}

/// Fails with the fix when this process may not load tracing programs.
pub fn require_privileges() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = effective_caps(&status).unwrap_or(0);
    match missing_privileges(caps) {
        None => Ok(()),
        Some(why) => Err(Error::failure(format!(
            "tracing needs root ({why}): run it with sudo, or grant the binary \
             `setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep` (tracefs must then be mounted already, \
             it is mode 0700); `iosplit-trace check` works without"
        ))),
    }
}

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracefs `events` directory: at its usual places, else mounted there
/// (says so on stderr), else wherever tracefs is already mounted.
pub fn tracefs_events() -> Result<PathBuf> {
    for root in [TRACEFS, DEBUGFS_TRACING] {
        let events = Path::new(root).join("events");
        if events.is_dir() {
            return Ok(events);
        }
    }
    // Mounted but unreadable (tracefs is mode 0700): mounting again cannot help.
    for root in [TRACEFS, DEBUGFS_TRACING] {
        if let Err(err) = std::fs::metadata(Path::new(root).join("events")) {
            if err.kind() == std::io::ErrorKind::PermissionDenied {
                return Err(Error::failure(format!(
                    "tracefs at {root} is not readable by this process ({err}): run as root, \
                     or grant the binary cap_dac_read_search with cap_bpf and cap_perfmon"
                )));
            }
        }
    }
    let mounted = match mount_tracefs() {
        Ok(()) => {
            crate::status::status(format_args!("mounted tracefs at {TRACEFS}"));
            let events = Path::new(TRACEFS).join("events");
            if events.is_dir() {
                return Ok(events);
            }
            return Err(Error::failure(format!(
                "tracefs is mounted at {TRACEFS} but has no events: this kernel lacks tracepoints (CONFIG_TRACEPOINTS)"
            )));
        }
        Err(err) => err,
    };
    // Mounted elsewhere (another namespace's layout, or a custom path) is usable.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    match tracefs_elsewhere(&mounts)
        .into_iter()
        .find(|events| events.is_dir())
    {
        Some(events) => Ok(events),
        None => Err(mounted),
    }
}

/// Candidate `events` directories from a `/proc/self/mounts` text: every
/// tracefs mount, then `tracing/` under every debugfs mount.
fn tracefs_elsewhere(mounts: &str) -> Vec<PathBuf> {
    let mut tracefs = Vec::new();
    let mut debugfs = Vec::new();
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (Some(_), Some(target), Some(fstype)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let target = PathBuf::from(unescape_mount_path(target));
        match fstype {
            "tracefs" => tracefs.push(target.join("events")),
            "debugfs" => debugfs.push(target.join("tracing").join("events")),
            _ => {}
        }
    }
    tracefs.extend(debugfs);
    tracefs
}

/// `/proc/self/mounts` writes space, tab, newline and backslash as octal escapes.
fn unescape_mount_path(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|oct| u8::from_str_radix(oct, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn mount_tracefs() -> Result<()> {
    let target = c"/sys/kernel/tracing";
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let err = std::io::Error::last_os_error();
        Err(Error::failure(format!(
            "tracefs is not mounted and mounting it at {TRACEFS} failed ({err}): run `mount -t tracefs nodev {TRACEFS}` as root"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_is_found_wherever_it_is_mounted() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
                      debugfs /dbg debugfs rw 0 0\n\
                      nodev /mnt/my\\040trace tracefs rw 0 0\n\
                      broken\n";
        assert_eq!(
            tracefs_elsewhere(mounts),
            [
                PathBuf::from("/mnt/my trace/events"),
                PathBuf::from("/dbg/tracing/events")
            ]
        );
        assert!(tracefs_elsewhere("proc /proc proc rw 0 0\n").is_empty());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\011b\\134c"), "/a\tb\\c");
        assert_eq!(unescape_mount_path("/odd\\9"), "/odd\\9");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
    }

    #[test]
    fn root_caps_are_enough() {
        let status = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert_eq!(missing_privileges(effective_caps(status).unwrap()), None);
    }

    #[test]
    fn unprivileged_user_is_told_what_is_missing() {
        let caps = effective_caps("CapEff:\t0000000000000000\n").unwrap();
        assert_eq!(
            missing_privileges(caps),
            Some("CAP_BPF and CAP_PERFMON are missing")
        );
        let bpf_only = 1u64 << CAP_BPF;
        assert_eq!(missing_privileges(bpf_only), Some("CAP_PERFMON is missing"));
        assert_eq!(missing_privileges(bpf_only | 1 << CAP_PERFMON), None);
    }
}
