//! `run` on files rewritten in place and on files renamed or removed
//! before the command exits, on ext4 on a loop partition:
//! - a 4 KiB block rewritten and synced 50 times (dd, python3): each write
//!   is matched to the about one command that carried it, not to every
//!   command that ever wrote the block;
//! - a file written, synced and removed, and one renamed over another:
//!   their writes are matched through the extents `run` took in time;
//! - 200 files each created, written, synced, closed and removed by one
//!   python3 process, with no pause between: all but at most 2 are
//!   followed (the probe stops the process at each open until `run` holds
//!   the file);
//! - a later process given the number of the command's exited child is not
//!   traced.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_file_all_matched, privileged, run_file_target, run_json, Ext4Disk};
use serde_json::Value;

const REWRITES: u64 = 50;

/// Asserts a rewritten block's writes: `REWRITES` of 4 KiB, about one
/// command each, and each command one write.
fn assert_one_command_per_rewrite(target: &Value) {
    assert_eq!(target["write_syscalls"], REWRITES, "{target}");
    assert_eq!(target["write_syscall_bytes"], REWRITES * 4096, "{target}");
    assert_eq!(target["fsync_calls"], REWRITES, "{target}");
    let per_write = &target["commands_per_write"];
    assert_eq!(per_write["count"], REWRITES, "every write placed: {target}");
    assert_eq!(per_write["p50"], 1, "{target}");
    assert!(per_write["max"].as_u64().unwrap() <= 2, "{target}");
    let per_command = &target["writes_per_command"];
    assert_eq!(per_command["max"], 1, "{target}");
    // Every rewrite reached the device: synced before the next began.
    assert_eq!(target["file"]["matched_bytes"], REWRITES * 4096, "{target}");
    assert_file_all_matched(target);
}

/// A 4 KiB file written and synced before the run, so its block is allocated.
fn one_block_file(disk: &Ext4Disk, name: &str) -> std::path::PathBuf {
    let file = disk.path(name);
    std::fs::write(&file, [0u8; 4096]).unwrap();
    common::sh("sync", &[file.to_str().unwrap()]);
    file
}

#[test]
fn a_block_rewritten_and_synced_by_dd_is_one_command_per_write() {
    if !privileged("a_block_rewritten_and_synced_by_dd_is_one_command_per_write") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-dd", 64);
    let file = one_block_file(&disk, "block");
    let script = format!(
        "for i in $(seq {REWRITES}); do dd if=/dev/urandom of={} bs=4k count=1 conv=notrunc,fsync status=none || exit 1; done",
        file.display()
    );
    let report = run_json(&["sh", "-c", &script]);
    assert_eq!(report["events"]["dropped"], 0, "{}", report["events"]);
    let target = run_file_target(&report, &file);
    assert_one_command_per_rewrite(target);
    // Fifty processes wrote it: the commands are the file's, not shared.
    assert!(target["commands"].as_u64().unwrap() >= REWRITES, "{target}");
}

#[test]
fn a_block_rewritten_by_python_with_fdatasync_is_one_command_per_write() {
    if !privileged("a_block_rewritten_by_python_with_fdatasync_is_one_command_per_write") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-py", 64);
    let file = one_block_file(&disk, "block");
    let program = format!(
        "import os\nfd = os.open({:?}, os.O_RDWR)\nfor i in range({REWRITES}):\n    os.pwrite(fd, os.urandom(4096), 0)\n    os.fdatasync(fd)\nos.close(fd)\n",
        file.to_str().unwrap()
    );
    let report = run_json(&["python3", "-c", &program]);
    let target = run_file_target(&report, &file);
    assert_one_command_per_rewrite(target);
}

#[test]
fn a_file_synced_then_removed_before_exit_is_matched() {
    if !privileged("a_file_synced_then_removed_before_exit_is_matched") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-rm", 64);
    let file = disk.path("gone.bin");
    let script = format!(
        "dd if=/dev/zero of={0} bs=64k count=32 conv=fsync status=none && rm {0}",
        file.display()
    );
    let report = run_json(&["sh", "-c", &script]);
    assert!(!file.exists());
    let target = run_file_target(&report, &file);
    assert_eq!(target["write_syscall_bytes"], 32 * 65536, "{target}");
    assert_eq!(target["file"]["matched_bytes"], 32 * 65536, "{target}");
    assert_eq!(target["commands_per_write"]["count"], 32, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= 1, "{target}");
    assert_file_all_matched(target);
}

#[test]
fn files_renamed_over_each_other_are_both_matched() {
    if !privileged("files_renamed_over_each_other_are_both_matched") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-mv", 64);
    let (old, new) = (disk.path("old.bin"), disk.path("new.bin"));
    // old is written and synced; new is written, synced and renamed over
    // it (the old inode is removed, the new one no longer at its name).
    let script = format!(
        "dd if=/dev/zero of={0} bs=64k count=16 conv=fsync status=none && \
         dd if=/dev/zero of={1} bs=64k count=32 conv=fsync status=none && mv {1} {0}",
        old.display(),
        new.display()
    );
    let report = run_json(&["sh", "-c", &script]);
    assert!(!new.exists());
    for (file, bytes) in [(&old, 16 * 65536), (&new, 32 * 65536)] {
        let target = run_file_target(&report, file);
        assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
        assert_eq!(target["file"]["matched_bytes"], bytes, "{target}");
        assert_file_all_matched(target);
    }
    // A python3 writer keeps its file open and unsynced across the rename:
    // `run` holds it, and reads its extents once its writeback is done.
    let (kept, renamed) = (disk.path("kept.bin"), disk.path("renamed.bin"));
    let program = format!(
        "import os\nfd = os.open({0:?}, os.O_WRONLY | os.O_CREAT, 0o644)\nfor i in range(16):\n    os.write(fd, b'x' * 65536)\nos.rename({0:?}, {1:?})\nos.fsync(fd)\nos.unlink({1:?})\nos.close(fd)\n",
        kept.to_str().unwrap(),
        renamed.to_str().unwrap()
    );
    let report = run_json(&["python3", "-c", &program]);
    let target = run_file_target(&report, &kept);
    assert_eq!(target["file"]["matched_bytes"], 16 * 65536, "{target}");
    assert_file_all_matched(target);
}

#[test]
fn files_removed_as_soon_as_they_are_synced_are_followed() {
    if !privileged("files_removed_as_soon_as_they_are_synced_are_followed") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-many", 64);
    const FILES: u64 = 200;
    const BYTES: u64 = 16384;
    let dir = disk.path("");
    let program = format!(
        "import os\nfor i in range({FILES}):\n    p = os.path.join({dir:?}, 'f%d' % i)\n    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)\n    os.write(fd, b'y' * {BYTES})\n    os.fsync(fd)\n    os.close(fd)\n    os.unlink(p)\n",
        dir = dir.to_str().unwrap()
    );
    let report = run_json(&["python3", "-c", &program]);
    let run = &report["run"];
    let listed: Vec<&Value> = run["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["file"].is_object())
        .collect();
    let rest = &run["files_not_listed"];
    // Every one. Racing instead (`--no-pause`) follows 45 to 64 of the 200.
    // About one run in eight missed a file until the watcher of stopped
    // parents stopped undoing the probe's own stops (issue #48): python3
    // here is pyenv's shim, a bash script that forks a child (paused at its
    // open of /dev/null, so the shim was watched as its parent) and then
    // execs python3, whose stops at its opens the watcher continued before
    // they were handled.
    let followed = listed.len() as u64 + rest["files"].as_u64().unwrap_or(0);
    assert_eq!(
        followed, FILES,
        "{followed} of {FILES} files are targets: {run}"
    );
    // Each file's open was paused (so were a few opens of /dev/null).
    assert!(run["paused_opens"].as_u64().unwrap() >= FILES, "{run}");
    assert_eq!(
        rest["write_syscall_bytes"].as_u64().unwrap_or(0),
        rest["files"].as_u64().unwrap_or(0) * BYTES,
        "{rest}"
    );
    for target in listed {
        assert_eq!(target["write_syscall_bytes"], BYTES, "{target}");
        assert_eq!(target["file"]["matched_bytes"], BYTES, "{target}");
        assert_file_all_matched(target);
    }
}

/// su and runuser stop themselves when their child stops (passing job
/// control on): `run` continues them, so the command ends, and the file
/// their child wrote and removed is matched.
#[test]
fn commands_under_su_and_runuser_are_not_left_stopped() {
    if !privileged("commands_under_su_and_runuser_are_not_left_stopped") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-su", 64);
    let dir = disk.path("shared");
    std::fs::create_dir(&dir).unwrap();
    common::sh("chmod", &["1777", dir.to_str().unwrap()]);
    for (tool, name) in [("su", "by-su.bin"), ("runuser", "by-runuser.bin")] {
        let file = dir.join(name);
        let script = format!(
            "dd if=/dev/zero of={0} bs=64k count=8 conv=fsync status=none && rm {0}",
            file.display()
        );
        let as_nobody: Vec<&str> = match tool {
            "su" => vec!["su", "nobody", "-s", "/bin/sh", "-c", &script],
            _ => vec!["runuser", "-u", "nobody", "--", "sh", "-c", &script],
        };
        // A stopped parent would hang the run: `timeout` turns that into a failure.
        let out = std::process::Command::new("timeout")
            .args(["60", common::binary(), "run", "--json", "--"])
            .args(&as_nobody)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{tool}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            report["run"]["paused_opens"].as_u64().unwrap() >= 1,
            "{tool}"
        );
        let target = run_file_target(&report, &file);
        assert_eq!(
            target["file"]["matched_bytes"],
            8 * 65536,
            "{tool}: {target}"
        );
        assert_file_all_matched(target);
    }
}

/// A process of the command that exited leaves the traced tree: another
/// process given its number afterwards (here through `ns_last_pid`; on a
/// machine with `pid_max` 32768 pids wrap within minutes) is neither
/// stopped at its opens nor counted as the command's.
#[test]
fn a_later_process_with_an_exited_childs_pid_is_not_traced() {
    if !privileged("a_later_process_with_an_exited_childs_pid_is_not_traced") {
        return;
    }
    let _serial = common::one_tracer_at_a_time();
    let disk = Ext4Disk::new("rewr-pid", 64);
    let pid_file = disk.path("child.pid");
    let go = disk.path("go");
    let stranger = disk.path("stranger.bin");
    // The command's child exits at once; the command waits for the stranger.
    let script = format!(
        "true & wait; echo $! > {pid}; while [ ! -e {go} ]; do sleep 0.05; done",
        pid = pid_file.display(),
        go = go.display()
    );
    let tracer = std::process::Command::new("timeout")
        .args([
            "60",
            common::binary(),
            "run",
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let child_pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Forks elsewhere may take the number first: a few tries.
    let mut reused = false;
    for _ in 0..20 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", child_pid - 1)).unwrap();
        let writer = std::process::Command::new("dd")
            .args([
                "if=/dev/zero",
                &format!("of={}", stranger.display()),
                "bs=64k",
                "count=4",
                "conv=fsync",
                "status=none",
            ])
            .spawn()
            .unwrap();
        let pid = writer.id();
        let mut writer = writer;
        let status = writer.wait().unwrap();
        assert!(status.success(), "dd as pid {pid}: {status:?}");
        if pid == child_pid {
            reused = true;
            break;
        }
    }
    std::fs::write(&go, b"").unwrap();
    let out = tracer.wait_with_output().unwrap();
    assert!(reused, "pid {child_pid} was never given out again");
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &report["run"];
    assert_eq!(
        run["paused_opens"], 1,
        "only the command's own open of the pid file: {run}"
    );
    assert!(
        run["targets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["file"]["path"] != stranger.to_str().unwrap()),
        "the stranger's file is not the command's: {run}"
    );
}
