//! Failed I/O on a real failing device, against the kernel's `blk` tracer.
//!
//! This kernel has no dm, scsi_debug or null_blk to inject errors, but a
//! loop device whose backing file lives on a tiny tmpfs fails for real: the
//! file is sparse, so once the tmpfs is full the loop driver's writes to it
//! fail and it completes the requests with the error (ENOSPC). Direct
//! writes past that point fail; the `blk` tracer's C lines carry the status
//! in brackets (`[65508]`, the kernel's u16 of -28). Each probe flavor in
//! turn must count exactly those failed commands, name the same status,
//! fail the user I/Os they carried, and raise `io_errors` on the device.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::{
    count_actions_in_init_context, device_named, ops_total, privileged, sh, BlkTracer, Tracer,
};

/// The tmpfs holding the backing file: a few MiB of room.
const TMPFS: &str = "size=2m";
/// The backing file's (sparse) size, MiB: far more than the tmpfs holds.
const BACKING_MIB: u64 = 64;

/// A tmpfs mounted on a scratch directory; unmounted and removed on drop.
struct Tmpfs {
    point: PathBuf,
}

impl Tmpfs {
    fn mount(tag: &str) -> Tmpfs {
        let point = std::env::temp_dir().join(format!("iosplit-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&point).unwrap();
        let tmpfs = Tmpfs { point };
        sh(
            "mount",
            &["-t", "tmpfs", "-o", TMPFS, "tmpfs", tmpfs.path()],
        );
        tmpfs
    }

    fn path(&self) -> &str {
        self.point.to_str().unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.point).status();
        let _ = std::fs::remove_dir(&self.point);
    }
}

/// A loop device over a file; detached on drop (declare it after the
/// [`Tmpfs`] its file is on, so it is dropped first).
struct FailingLoop {
    name: String,
}

impl FailingLoop {
    fn over(file: &str) -> FailingLoop {
        let device = sh("losetup", &["-f", "--show", file]);
        FailingLoop {
            name: device.trim().trim_start_matches("/dev/").to_string(),
        }
    }

    fn device(&self) -> String {
        format!("/dev/{}", self.name)
    }

    /// "major,minor" as the blk tracer prints it.
    fn blk_dev(&self) -> String {
        let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", self.name)).unwrap();
        dev.trim().replace(':', ",")
    }
}

impl Drop for FailingLoop {
    fn drop(&mut self) {
        let _ = Command::new("losetup")
            .args(["-d", &self.device()])
            .status();
    }
}

/// The failed completions (C lines with a non-zero status) the `blk` tracer
/// logged for `dev`, by status as printed (the kernel's u16).
fn failed_completions(trace: &str, dev: &str) -> BTreeMap<u64, u64> {
    let mut failed = BTreeMap::new();
    for line in trace.lines().filter(|line| !line.starts_with('#')) {
        // "  kworker-28 [001] d.s1. 5481.4: 7,0    C  WS 4096 + 1024 [65508]"
        let Some((_, event)) = line.split_once(": ") else {
            continue;
        };
        let words: Vec<&str> = event.split_whitespace().collect();
        if words.first() != Some(&dev) || words.get(1) != Some(&"C") {
            continue;
        }
        let status = words
            .last()
            .and_then(|last| last.strip_prefix('['))
            .and_then(|last| last.strip_suffix(']'))
            .and_then(|status| status.parse::<u64>().ok());
        if let Some(status) = status.filter(|&status| status != 0) {
            *failed.entry(status).or_insert(0) += 1;
        }
    }
    failed
}

/// The errno name of a status as the `blk` tracer prints it.
fn errno_name(printed: u64) -> &'static str {
    match 65536 - printed {
        5 => "EIO",
        28 => "ENOSPC",
        other => panic!("unexpected status [{printed}] (-{other})"),
    }
}

/// Direct writes that fill the tmpfs and fail: 8 MiB from the start (the
/// first 2 MiB fit; dd stops at its first failed write), then 1 MiB further
/// on, which fails too. dd's failure is the point, so its status is not
/// checked; that some commands failed is, against the tracer.
fn fill_and_fail(device: &str) {
    for (count, seek) in [("8", "0"), ("1", "16")] {
        let out = Command::new("dd")
            .args([
                "if=/dev/zero",
                &format!("of={device}"),
                "bs=1M",
                &format!("count={count}"),
                &format!("seek={seek}"),
                "oflag=direct",
                "status=none",
            ])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "dd to a loop over a full tmpfs should fail"
        );
    }
}

#[test]
fn a_loop_over_a_full_tmpfs_fails_writes_and_both_flavors_count_them() {
    if !privileged("a_loop_over_a_full_tmpfs_fails_writes_and_both_flavors_count_them") {
        return;
    }
    for flavor in ["btf", "classic"] {
        eprintln!("--- {flavor} tracepoints");
        // A fresh store each time, so each flavor sees the same failures.
        let tmpfs = Tmpfs::mount(&format!("failing-{flavor}"));
        let backing = format!("{}/backing.img", tmpfs.path());
        let file = std::fs::File::create(&backing).unwrap();
        file.set_len(BACKING_MIB << 20).unwrap();
        drop(file);
        let disk = FailingLoop::over(&backing);

        let oracle = BlkTracer::start(&disk.name);
        let tracer = Tracer::start_with(
            &["report", "--json", "-d", &disk.name],
            &[("IOSPLIT_PROBES", flavor)],
        );
        fill_and_fail(&disk.device());
        let report: serde_json::Value =
            serde_json::from_str(&tracer.stop()).expect("report is JSON");
        let trace = oracle.finish();
        drop(oracle);

        let theirs = failed_completions(&trace, &disk.blk_dev());
        let their_failed: u64 = theirs.values().sum();
        // Completions no BPF program could see here (see common's doc).
        let hidden = count_actions_in_init_context(&trace, &disk.blk_dev())
            .get("C")
            .copied()
            .unwrap_or(0);
        let measures = &device_named(&report, &disk.name)["measures"];
        let failed_commands = ops_total(measures, "failed_commands");
        let failed_user_ios = ops_total(measures, "failed_user_ios");
        let write = &measures["ops"]["write"];
        eprintln!(
            "blk tracer: failed C {theirs:?} ({hidden} C hidden from BPF); ours: \
             failed_commands {failed_commands}, errors {}, failed_user_ios {failed_user_ios}",
            write["errors"]
        );
        assert!(their_failed > 0, "the loop device failed nothing: {trace}");
        assert_eq!(report["events"]["dropped"], 0, "{}", report["events"]);
        if hidden == 0 {
            assert_eq!(failed_commands, their_failed, "{flavor}: failed commands");
        } else {
            assert!(
                (their_failed.saturating_sub(hidden)..=their_failed).contains(&failed_commands),
                "{flavor}: failed commands {failed_commands}, blk tracer {their_failed} ({hidden} hidden)"
            );
        }
        // The same status, by name, and only it.
        let expected: BTreeMap<String, u64> = theirs
            .iter()
            .map(|(&status, &count)| (errno_name(status).to_string(), count))
            .collect();
        let ours: BTreeMap<String, u64> = write["errors"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(status, count)| (status.clone(), count.as_u64().unwrap()))
            .collect();
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{flavor}: statuses"
        );
        if hidden == 0 {
            assert_eq!(ours, expected, "{flavor}: errors by status");
        }
        assert_eq!(write["failed_commands"].as_u64(), Some(failed_commands));
        assert!(failed_user_ios > 0, "{flavor}: no failed user I/O");

        let diagnosis = report["diagnoses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == "io_errors")
            .unwrap_or_else(|| panic!("{flavor}: no io_errors: {}", report["diagnoses"]));
        assert_eq!(diagnosis["device"], disk.name.as_str(), "{diagnosis}");
        assert_eq!(diagnosis["severity"], "warning", "{diagnosis}");
        let evidence = &diagnosis["evidence"];
        assert_eq!(evidence["failed_commands"].as_u64(), Some(failed_commands));
        let failed_write = &evidence["failed_ops"]["write"];
        let (low, high) = (
            failed_write["lowest_failed_sector"].as_u64().unwrap(),
            failed_write["highest_failed_sector"].as_u64().unwrap(),
        );
        // The first 2 MiB fit; the failures lie past them, up to the second
        // write's end (seek 16 MiB, 1 MiB).
        assert!(
            low >= 4096 && high < 17 * 2048 && low <= high,
            "{flavor}: failed sectors {low}-{high}"
        );
        let explanation = diagnosis["explanation"].as_str().unwrap();
        assert!(
            explanation.contains(&disk.name) && explanation.contains("not a geometry"),
            "{explanation}"
        );
        assert!(diagnosis["fix"].as_str().unwrap().contains("losetup -l"));
        drop(disk);
        drop(tmpfs);
    }
}
