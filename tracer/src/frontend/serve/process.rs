//! The exporter's own footprint, under the names every Prometheus client
//! library uses (`process_*`), so a fleet can watch what leaving it on costs.

use crate::frontend::prometheus::{Family, Kind, Value};

/// What /proc says about this process now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub resident_bytes: u64,
    pub cpu_seconds: f64,
    pub start_time_seconds: f64,
    pub open_fds: u64,
}

impl ProcessStats {
    /// Read from /proc/self; `None` where /proc is not mounted.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| boot_time(&text));
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
        // SAFETY: sysconf only reads a system constant.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        parse(
            &stat,
            &statm,
            boot_time?,
            ticks as f64,
            page as u64,
            open_fds,
        )
    }

    pub fn families(&self) -> Vec<Family> {
        vec![
            Family::new(
                "process_resident_memory_bytes",
                "Resident memory of the exporter.",
                Kind::Gauge,
                vec![(Vec::new(), Value::Gauge(self.resident_bytes as f64))],
            ),
            Family::new(
                "process_cpu_seconds",
                "User and system CPU time of the exporter (all its threads).",
                Kind::Counter,
                vec![(Vec::new(), Value::Seconds(self.cpu_seconds))],
            ),
            Family::new(
                "process_start_time_seconds",
                "When the exporter started, in seconds since the Unix epoch.",
                Kind::Gauge,
                vec![(Vec::new(), Value::Gauge(self.start_time_seconds))],
            ),
            Family::new(
                "process_open_fds",
                "File descriptors the exporter holds open.",
                Kind::Gauge,
                vec![(Vec::new(), Value::Gauge(self.open_fds as f64))],
            ),
        ]
    }
}

/// `btime` in /proc/stat: the boot time in seconds since the epoch.
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

fn parse(
    stat: &str,
    statm: &str,
    boot_time: f64,
    ticks_per_second: f64,
    page_bytes: u64,
    open_fds: u64,
) -> Option<ProcessStats> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // After the name, field 3 (state) is index 0: utime is 14, stime 15, starttime 22.
    let field = |number: usize| fields.get(number - 3)?.parse::<f64>().ok();
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    (ticks_per_second > 0.0).then_some(())?;
    Some(ProcessStats {
        resident_bytes: resident_pages * page_bytes,
        cpu_seconds: (field(14)? + field(15)?) / ticks_per_second,
        start_time_seconds: boot_time + field(22)? / ticks_per_second,
        open_fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // A name with a space and a ')' of its own; utime 150, stime 50, starttime 1000.
        let stat = "4242 (iosplit (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 3 0 1000 12345 678";
        let stats = parse(
            stat,
            "5000 2048 300 10 0 900 0\n",
            1_700_000_000.0,
            100.0,
            4096,
            7,
        )
        .expect("parses");
        assert_eq!(stats.resident_bytes, 2048 * 4096);
        assert!((stats.cpu_seconds - 2.0).abs() < 1e-9, "{stats:?}");
        assert!(
            (stats.start_time_seconds - 1_700_000_010.0).abs() < 1e-9,
            "{stats:?}"
        );
        assert_eq!(stats.open_fds, 7);
    }

    #[test]
    fn this_process_reads() {
        let stats = ProcessStats::read().expect("/proc is mounted");
        assert!(stats.resident_bytes > 0);
        assert!(stats.open_fds >= 3, "{stats:?}");
        let started = stats.start_time_seconds;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0 * 365.0,
            "{started}"
        );
    }

    #[test]
    fn a_garbled_stat_is_none() {
        assert_eq!(parse("garbage", "1 2", 0.0, 100.0, 4096, 0), None);
        assert_eq!(parse("1 (x) S 1", "1 2", 0.0, 100.0, 4096, 0), None);
    }
}
