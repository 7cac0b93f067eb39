//! Ordinary workloads on healthy, aligned devices raise no `warning` or
//! `critical` diagnosis: every alarm must be one an expert reading the raw
//! blk trace would agree with. Real devices, as root; each case cleans up
//! its loop disk, mount and queue settings, also on failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use common::{
    dd, device_named, disk_holding, ops_total, privileged, scattered_direct_writes, sh, LoopDisk,
    PartitionSpec, ScratchFile, Tracer,
};
use serde_json::Value;

/// One case at a time: they share the CPUs, and the vda case reads the
/// root disk that the others' tools live on.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A 320 MiB loop disk with one partition at 1 MiB whose size is a multiple
/// of 4 KiB, and the loop driver's default queue settings (a loop number
/// keeps what its last user set).
fn healthy_disk(tag: &str) -> LoopDisk {
    let mut disk = LoopDisk::new(
        tag,
        320,
        &[PartitionSpec {
            start: 2048,
            size: 600 * 1024,
        }],
    );
    let hw = std::fs::read_to_string(format!("/sys/block/{}/queue/max_hw_sectors_kb", disk.name))
        .unwrap();
    disk.set_queue("max_sectors_kb", hw.trim());
    disk.set_queue("nomerges", "0");
    disk
}

/// Traces `devices` with `report --json` while `workload` runs.
fn traced(devices: &[&str], workload: impl FnOnce()) -> Value {
    let mut args = vec!["report", "--json"];
    for device in devices {
        args.extend(["-d", device]);
    }
    let tracer = Tracer::start(&args);
    workload();
    let out = tracer.stop();
    serde_json::from_str(&out).unwrap_or_else(|err| panic!("not JSON ({err}): {out}"))
}

/// The privileged check, then this case's turn: None when not root.
fn one_at_a_time(case: &str) -> Option<MutexGuard<'static, ()>> {
    if !privileged(case) {
        return None;
    }
    Some(
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

/// Traces `disk` while `workload` runs, and checks it raised no alarm.
fn assert_quiet(case: &str, disk: &str, workload: impl FnOnce()) {
    let report = traced(&[disk], workload);
    assert_no_alarm(case, &report, disk, &[]);
}

/// Checks that the workload was seen and raised nothing but `allowed` codes
/// at warning or above.
fn assert_no_alarm(case: &str, report: &Value, disk: &str, allowed: &[&str]) {
    assert_eq!(
        report["events"]["dropped"], 0,
        "{case}: {}",
        report["events"]
    );
    let device = device_named(report, disk);
    let seen: u64 = std::iter::once(&device["measures"])
        .chain(
            device["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|part| &part["measures"]),
        )
        .map(|measures| ops_total(measures, "commands"))
        .sum();
    assert!(seen > 0, "{case}: no command seen on {disk}");
    let alarms: Vec<String> = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] != "info")
        .filter(|d| !allowed.iter().any(|code| d["code"] == *code))
        .map(|d| {
            format!(
                "{} {} on {}: {} evidence {}",
                d["severity"], d["code"], d["device"], d["explanation"], d["evidence"]
            )
        })
        .collect();
    assert!(
        alarms.is_empty(),
        "{case}: false alarms:\n{}",
        alarms.join("\n")
    );
    eprintln!(
        "{case}: {seen} commands on {disk}, diagnoses {}",
        codes_and_severities(report)
    );
}

fn codes_and_severities(report: &Value) -> String {
    let found: Vec<String> = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| format!("{}({})", d["code"].as_str().unwrap_or("?"), d["severity"]))
        .collect();
    format!("[{}]", found.join(", "))
}

/// A mounted filesystem, unmounted and its directory removed when dropped.
struct Mount(PathBuf);

impl Mount {
    fn new(device: &str, tag: &str) -> Mount {
        let dir = PathBuf::from(format!("/tmp/iosplit-fa-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mount = Mount(dir);
        sh("mount", &[device, mount.0.to_str().unwrap()]);
        mount
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A tree of files like a source checkout: this crate's sources and 200
/// files from 1 KiB to 512 KiB.
fn write_tree(root: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    sh("cp", &["-a", src.to_str().unwrap(), root.to_str().unwrap()]);
    let generated = root.join("generated");
    std::fs::create_dir_all(&generated).unwrap();
    for index in 0..200usize {
        let size = 1024 << (index % 10);
        let bytes: Vec<u8> = (0..size).map(|byte| (byte ^ index) as u8).collect();
        std::fs::write(generated.join(format!("file{index}")), bytes).unwrap();
    }
}

#[test]
fn mkfs_then_mount_copy_and_sync() {
    let Some(_one) = one_at_a_time("mkfs_then_mount_copy_and_sync") else {
        return;
    };
    let disk = healthy_disk("fa-mkfs");
    let part = disk.partition(1);
    // mkfs alone: the case (discards, zeroing and table writes),
    // lazily and with every table written at once.
    assert_quiet("mkfs.ext4", &disk.name, || {
        sh("mkfs.ext4", &["-q", "-F", &part]);
    });
    assert_quiet("mkfs.ext4 without lazy init", &disk.name, || {
        let eager = "lazy_itable_init=0,lazy_journal_init=0";
        sh("mkfs.ext4", &["-q", "-F", "-E", eager, &part]);
    });
    assert_quiet("copy a tree and sync", &disk.name, || {
        let mount = Mount::new(&part, "mkfs");
        write_tree(&mount.0);
        sh("sync", &[]);
    });
}

/// 64 MiB of direct 4 KiB `rw` ("randwrite", "randread") at QD32 on `part`.
fn fio_4k_qd32(part: &str, rw: &str) {
    sh(
        "fio",
        &[
            &format!("--name={rw}"),
            &format!("--filename={part}"),
            &format!("--rw={rw}"),
            "--bs=4k",
            "--direct=1",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--size=128M",
            "--io_size=64M",
            "--output=/dev/null",
        ],
    );
}

#[test]
fn fio_4k_random_writes() {
    let Some(_one) = one_at_a_time("fio_4k_random_writes") else {
        return;
    };
    let disk = healthy_disk("fa-fio");
    let part = disk.partition(1);
    assert_quiet("fio 4k randwrite QD32", &disk.name, || {
        fio_4k_qd32(&part, "randwrite");
    });
    assert_quiet("fio 4k randread QD32", &disk.name, || {
        fio_4k_qd32(&part, "randread");
    });
}

#[test]
fn large_sequential_direct_io_on_loop() {
    let Some(_one) = one_at_a_time("large_sequential_direct_io_on_loop") else {
        return;
    };
    let disk = healthy_disk("fa-seq");
    let part = disk.partition(1);
    assert_quiet("dd 1 MiB/4 MiB direct on loop", &disk.name, || {
        dd(&[
            "if=/dev/zero",
            &format!("of={part}"),
            "bs=1M",
            "count=128",
            "oflag=direct",
        ]);
        dd(&[
            &format!("if={part}"),
            "of=/dev/null",
            "bs=1M",
            "count=128",
            "iflag=direct",
        ]);
        dd(&[
            &format!("if={part}"),
            "of=/dev/null",
            "bs=4M",
            "count=32",
            "iflag=direct",
        ]);
    });
    // Buffered sequential reads of the raw partition, through readahead.
    assert_quiet("dd 1 MiB buffered reads on loop", &disk.name, || {
        dd(&[&format!("if={part}"), "of=/dev/null", "bs=1M", "count=128"]);
    });
    // 1 MiB from 256 scattered pages: split in two by max_segments (128).
    assert_quiet("scattered 1 MiB direct writes on loop", &disk.name, || {
        scattered_direct_writes(Path::new(&part), 64);
    });
}

#[test]
fn large_sequential_direct_io_on_the_root_disk() {
    let Some(_one) = one_at_a_time("large_sequential_direct_io_on_the_root_disk") else {
        return;
    };
    let scratch = ScratchFile(PathBuf::from(format!(
        "/var/tmp/iosplit-fa-root-{}",
        std::process::id()
    )));
    let root_disk = disk_holding(Path::new("/var/tmp"));
    let path = scratch.0.to_str().unwrap().to_string();
    let report = traced(&[&root_disk], || {
        scattered_direct_writes(&scratch.0, 64);
        dd(&[
            &format!("if={path}"),
            "of=/dev/null",
            "bs=1M",
            "iflag=direct",
        ]);
        dd(&[
            "if=/dev/zero",
            &format!("of={path}"),
            "bs=1M",
            "count=32",
            "oflag=direct",
        ]);
        // Four 1 MiB writes in flight: each tail is followed by the next
        // write's head, queued before the tail was issued.
        sh(
            "fio",
            &[
                "--name=seqwrite",
                &format!("--filename={path}"),
                "--rw=write",
                "--bs=1M",
                "--direct=1",
                "--ioengine=io_uring",
                "--iodepth=4",
                "--size=64M",
                "--output=/dev/null",
            ],
        );
    });
    // On vda the driver really does requeue: that finding is earned.
    assert_no_alarm(
        "1 MiB direct writes and reads on the root disk",
        &report,
        &root_disk,
        &["requeued_commands"],
    );
    assert_requeues_explained(&report, &root_disk);
}

/// A virtio root disk without indirect descriptors (this machine kind's vda)
/// requeues the short tail of each 1 MiB write while the 254-segment head
/// fills the ring; the report must say so and why.
fn assert_requeues_explained(report: &Value, disk: &str) {
    let device = device_named(report, disk);
    let indirect = &device["geometry"]["virtio_indirect_desc"];
    let found = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "requeued_commands" && d["device"] == disk);
    if *indirect != false {
        eprintln!("{disk}: virtio_indirect_desc {indirect}, not the ring-full case");
        if let Some(found) = found {
            assert_ne!(found["evidence"]["cause"], "virtio_ring_full", "{found}");
        }
        return;
    }
    let found = found.unwrap_or_else(|| {
        panic!(
            "no requeued_commands on {disk} (virtio without indirect descriptors): {}",
            report["diagnoses"]
        )
    });
    let evidence = &found["evidence"];
    assert_eq!(found["severity"], "warning", "{found}");
    assert_eq!(evidence["cause"], "virtio_ring_full", "{found}");
    // One requeued tail per write at least (other tasks may add more).
    assert!(evidence["requeues"].as_u64().unwrap() >= 32, "{found}");
    assert_eq!(
        evidence["largest_command_segments"], evidence["max_segments"],
        "{found}"
    );
    assert!(
        evidence["requeue_delay_p50_us"].as_u64().unwrap() > 0,
        "{found}"
    );
    assert!(
        found["fix"].as_str().unwrap().contains("indirect"),
        "{found}"
    );
    eprintln!("{disk}: {}\n  fix: {}", found["explanation"], found["fix"]);
}

#[test]
fn dd_4k_buffered_writes_with_fsync() {
    let Some(_one) = one_at_a_time("dd_4k_buffered_writes_with_fsync") else {
        return;
    };
    let disk = healthy_disk("fa-dd4k");
    let part = disk.partition(1);
    assert_quiet("dd 4 KiB buffered with fsync", &disk.name, || {
        dd(&[
            "if=/dev/zero",
            &format!("of={part}"),
            "bs=4k",
            "count=8192",
            "conv=fsync",
        ]);
    });
}

#[test]
fn small_synchronous_writes() {
    let Some(_one) = one_at_a_time("small_synchronous_writes") else {
        return;
    };
    let disk = healthy_disk("fa-dsync");
    let part = disk.partition(1);
    assert_quiet(
        "4 KiB dsync and 512 B direct dsync writes",
        &disk.name,
        || {
            dd(&[
                "if=/dev/zero",
                &format!("of={part}"),
                "bs=4k",
                "count=1000",
                "oflag=dsync",
            ]);
            dd(&[
                "if=/dev/zero",
                &format!("of={part}"),
                "bs=512",
                "count=1000",
                "oflag=direct,dsync",
            ]);
        },
    );
}

#[test]
fn fstrim_and_buffered_file_writes_on_ext4() {
    let Some(_one) = one_at_a_time("fstrim_and_buffered_file_writes_on_ext4") else {
        return;
    };
    let disk = healthy_disk("fa-trim");
    let part = disk.partition(1);
    sh("mkfs.ext4", &["-q", "-F", "-E", "nodiscard", &part]);
    let mount = Mount::new(&part, "trim");
    let dir = mount.0.to_str().unwrap().to_string();
    assert_quiet(
        "buffered file writes, readahead, two appenders and fstrim on ext4",
        &disk.name,
        || {
            // 64 MiB of buffered 1 MiB writes, written back by sync.
            dd(&[
                "if=/dev/zero",
                &format!("of={dir}/big"),
                "bs=1M",
                "count=64",
            ]);
            sh("sync", &[]);
            // Buffered sequential reads through readahead, cache dropped first.
            std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
            dd(&[&format!("if={dir}/big"), "of=/dev/null", "bs=128k"]);
            // Two writers appending 4 KiB buffered writes to their own files.
            sh(
                "fio",
                &[
                    "--name=appenders",
                    &format!("--directory={dir}"),
                    "--rw=write",
                    "--bs=4k",
                    "--numjobs=2",
                    "--size=16M",
                    "--end_fsync=1",
                    "--output=/dev/null",
                ],
            );
            std::fs::remove_file(format!("{dir}/big")).unwrap();
            sh("sync", &[]);
            sh("fstrim", &[&dir]);
        },
    );
    drop(mount);
    // The whole partition discarded at once.
    assert_quiet("blkdiscard of the partition", &disk.name, || {
        sh("blkdiscard", &[&part]);
    });
}
