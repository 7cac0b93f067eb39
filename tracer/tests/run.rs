//! `iosplit-trace run -- mkfs.ext4` on real partitions: the seed's case.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{binary, privileged, run_json, LoopDisk, PartitionSpec};

fn run_mkfs(partition: &str) -> (serde_json::Value, std::process::ExitStatus) {
    let out = Command::new(binary())
        .args(["run", "--json", "--", "mkfs.ext4", "-q", "-F", "-b", "4096"])
        .args(["-E", "lazy_itable_init=0,lazy_journal_init=0", partition])
        .output()
        .expect("iosplit-trace runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, out.status)
}

fn codes_for<'a>(report: &'a serde_json::Value, device: &str) -> Vec<&'a str> {
    report["diagnoses"]
        .as_array()
        .expect("diagnoses is a list")
        .iter()
        .filter(|d| d["device"] == device)
        .filter_map(|d| d["code"].as_str())
        .collect()
}

#[test]
fn mkfs_on_an_odd_sized_partition_is_explained_and_an_aligned_one_is_clean() {
    if !privileged("mkfs_on_an_odd_sized_partition_is_explained_and_an_aligned_one_is_clean") {
        return;
    }
    let disk = LoopDisk::new(
        "run",
        160,
        &[
            PartitionSpec {
                start: 2048,
                size: 131072,
            },
            PartitionSpec {
                start: 133120,
                size: 131073,
            },
        ],
    );
    let odd = format!("{}p2", disk.name);
    let (report, status) = run_mkfs(&disk.partition(2));
    assert!(status.success(), "run exits with mkfs's status: {status:?}");
    assert_eq!(report["run"]["exit_status"], 0);
    let subpage = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "subpage_block_size" && d["device"] == odd.as_str())
        .unwrap_or_else(|| panic!("no subpage_block_size on {odd}: {}", report["diagnoses"]));
    assert_eq!(subpage["evidence"]["block_size"], 512);
    assert_eq!(subpage["evidence"]["partition_size"], 131073);

    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == odd.as_str())
        .unwrap_or_else(|| panic!("mkfs's writes to {odd} were not seen: {}", report["run"]));
    assert_eq!(
        report["events"]["dropped"], 0,
        "events were lost: {}",
        report["events"]
    );
    let writes = target["write_syscalls"].as_u64().unwrap();
    let bios = target["bios"].as_u64().unwrap();
    let commands = target["commands"].as_u64().unwrap();
    assert!(writes > 0 && bios > 0 && commands > 0, "{target}");
    // 512-byte buffers: each 4 KiB write became about eight 512-byte bios.
    assert_eq!(target["bio_size"]["p50"], 512, "{target}");
    assert!(bios > 4 * writes, "bios {bios} vs writes {writes}");
    let summary = target["summary"].as_str().unwrap();
    assert!(
        summary.contains("mkfs.ext4 issued") && summary.contains(&odd),
        "{summary}"
    );

    // The same on a partition whose size is a multiple of 4 KiB: no such diagnosis.
    let aligned = format!("{}p1", disk.name);
    let (report, status) = run_mkfs(&disk.partition(1));
    assert!(status.success());
    let codes = codes_for(&report, &aligned);
    assert!(!codes.contains(&"subpage_block_size"), "{codes:?}");
    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == aligned.as_str())
        .expect("writes to the aligned partition seen");
    assert_eq!(target["bio_size"]["p50"], 4096, "{target}");
}

#[test]
fn run_exits_with_the_commands_status() {
    if !privileged("run_exits_with_the_commands_status") {
        return;
    }
    let status = Command::new(binary())
        .args(["run", "--json", "--", "sh", "-c", "exit 7"])
        .output()
        .expect("runs")
        .status;
    assert_eq!(status.code(), Some(7));
}

fn devices_of(findings: &serde_json::Value) -> Vec<(String, String)> {
    findings
        .as_array()
        .expect("a list of findings")
        .iter()
        .map(|d| {
            (
                d["device"].as_str().unwrap().to_string(),
                d["code"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn run_speaks_only_of_the_devices_the_command_wrote() {
    if !privileged("run_speaks_only_of_the_devices_the_command_wrote") {
        return;
    }
    // p1 has an odd size (a static finding); the command only writes p2.
    let disk = LoopDisk::new(
        "run-scope",
        160,
        &[
            PartitionSpec {
                start: 2048,
                size: 131073,
            },
            PartitionSpec {
                start: 135168,
                size: 131072,
            },
        ],
    );
    let odd = format!("{}p1", disk.name);
    let written = format!("{}p2", disk.name);
    // Like mkfs on the Debian guest: the whole disk is opened, a partition written.
    let script = format!(
        "exec 3<{}; mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 {}",
        disk.device(),
        disk.partition(2)
    );
    let report = run_json(&["sh", "-c", &script]);
    let diagnoses = devices_of(&report["diagnoses"]);
    assert!(
        diagnoses.iter().all(|(device, _)| *device == written),
        "diagnoses on devices mkfs did not write: {diagnoses:?}"
    );
    let others = devices_of(&report["other_findings"]);
    assert!(
        others.contains(&(odd.clone(), "subpage_block_size".to_string())),
        "the odd-sized {odd} belongs under other_findings: {others:?}"
    );
    let targets: Vec<&str> = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["device"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        vec![written.as_str()],
        "only the written partition is a target, not the disk that was only opened"
    );
    let target = &report["run"]["targets"][0];
    assert!(target["write_syscalls"].as_u64().unwrap() > 0, "{target}");

    // The text report keeps them apart under their own heading.
    let out = Command::new(binary())
        .args(["run", "--", "sh", "-c", &script])
        .output()
        .expect("iosplit-trace runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let heading = text
        .find("Other findings")
        .unwrap_or_else(|| panic!("no Other findings heading:\n{text}"));
    let odd_finding = text
        .find(&format!("subpage_block_size on {odd}"))
        .unwrap_or_else(|| panic!("{odd}'s finding not printed:\n{text}"));
    assert!(
        odd_finding > heading,
        "{odd}'s finding is not under Other findings:\n{text}"
    );
}

/// A 16 MiB loop disk with one 8 MiB partition: the disk (detached when
/// dropped), the partition's path and its name.
fn one_partition_disk(tag: &str) -> (LoopDisk, String, String) {
    let disk = LoopDisk::new(
        tag,
        16,
        &[PartitionSpec {
            start: 2048,
            size: 16384,
        }],
    );
    let partition = disk.partition(1);
    let name = format!("{}p1", disk.name);
    (disk, partition, name)
}

/// The target `device` in a run report, or a panic naming what was seen.
fn target_named<'a>(report: &'a serde_json::Value, device: &str) -> &'a serde_json::Value {
    report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == device)
        .unwrap_or_else(|| panic!("no target {device}: {}", report["run"]))
}

#[test]
fn dd_writes_through_the_fd_it_dup2s_its_output_to_are_all_counted() {
    if !privileged("dd_writes_through_the_fd_it_dup2s_its_output_to_are_all_counted") {
        return;
    }
    let (_disk, partition, name) = one_partition_disk("run-dd");
    let of = format!("of={partition}");
    // dd opens of= as fd 3, dup2s it onto fd 1 and closes fd 3, then exits
    // before /proc could be asked: repeated so a race shows.
    for round in 1..=5 {
        let report = run_json(&[
            "dd",
            "if=/dev/zero",
            &of,
            "bs=64k",
            "count=32",
            "oflag=direct",
            "status=none",
        ]);
        assert_eq!(report["events"]["dropped"], 0, "round {round}: {report}");
        let target = target_named(&report, &name);
        assert_eq!(target["write_syscalls"], 32, "round {round}: {target}");
        assert_eq!(
            target["write_syscall_bytes"],
            32 * 65536,
            "round {round}: {target}"
        );
        assert!(
            target["commands"].as_u64().unwrap() >= 32,
            "round {round}: {target}"
        );
        let summary = target["summary"].as_str().unwrap();
        assert!(summary.contains("dd issued 32 writes"), "{summary}");
    }
}

/// dd's 512-byte writes, each at the start of its own 4 KiB page (seek in
/// steps of 8 blocks): buffered, each page is one the page cache would read
/// first through 4 KiB blocks; with `oflag=direct` no page is. Either way
/// each write, placed by dd's lseek on the device, is matched to the one
/// command that carried it.
#[test]
fn only_buffered_writes_count_the_pages_a_4k_block_would_read_first() {
    if !privileged("only_buffered_writes_count_the_pages_a_4k_block_would_read_first") {
        return;
    }
    let (_disk, partition, name) = one_partition_disk("run-pages");
    let script = |flags: &str| {
        format!(
            "for page in 0 1 2 3 4 5 6 7; do dd if=/dev/zero of={partition} bs=512 count=1 seek=$((page * 8)) conv=notrunc {flags} status=none; done; sync"
        )
    };
    let buffered = run_json(&["sh", "-c", &script("")]);
    let target = target_named(&buffered, &name);
    assert_eq!(target["write_syscalls"], 8, "{target}");
    assert_eq!(target["partial_pages"], 8, "{target}");
    assert_eq!(target["commands_per_write"]["count"], 8, "{target}");
    assert_eq!(target["commands_per_write"]["max"], 1, "{target}");
    let direct = run_json(&["sh", "-c", &script("oflag=direct")]);
    let target = target_named(&direct, &name);
    assert_eq!(target["write_syscalls"], 8, "{target}");
    assert_eq!(target["partial_pages"], 0, "{target}");
    assert_eq!(target["commands_per_write"]["count"], 8, "{target}");
    assert_eq!(target["commands_per_write"]["max"], 1, "{target}");
}

#[test]
fn shell_redirections_pipes_and_reused_fd_numbers_are_followed() {
    if !privileged("shell_redirections_pipes_and_reused_fd_numbers_are_followed") {
        return;
    }
    let (_disk, partition, name) = one_partition_disk("run-sh");
    // dash saves fd 1 with fcntl(F_DUPFD), dup2s the file onto it and
    // restores it; `exec 7>` keeps a dup2ed fd across forks. In the
    // pipeline, the left side's fd 1 is a pipe (made by pipe(), not traced)
    // while the partition is opened there as the reused fd 3: the 512-byte
    // writes into the pipe must not count as the partition's.
    let script = format!(
        "dd if=/dev/zero bs=64k count=4 oflag=direct status=none > {partition}; \
         exec 7> {partition}; \
         dd if=/dev/zero bs=64k count=4 oflag=direct status=none >&7; \
         exec 7>&-; \
         {{ dd if=/dev/zero bs=64k count=4 oflag=direct status=none > {partition}; \
            dd if=/dev/zero bs=512 count=3 status=none; }} | cat > /dev/null"
    );
    let report = run_json(&["sh", "-c", &script]);
    assert_eq!(report["events"]["dropped"], 0, "{report}");
    let target = target_named(&report, &name);
    assert_eq!(target["write_syscalls"], 12, "{target}");
    assert_eq!(target["write_syscall_bytes"], 12 * 65536, "{target}");
    assert_eq!(
        report["run"]["targets"].as_array().unwrap().len(),
        1,
        "{}",
        report["run"]
    );
}

/// Untorn writes (`pwritev2(RWF_ATOMIC)`, 16 KiB, O_DIRECT) to a device
/// without atomic support: the kernel refuses each call (EOPNOTSUPP)
/// before any I/O. The run still lists the device as a target, with the
/// refused calls by errno, equal to the program's own count (#48).
#[test]
fn writes_refused_at_the_call_are_a_target_with_their_errno() {
    if !privileged("writes_refused_at_the_call_are_a_target_with_their_errno") {
        return;
    }
    let disk = LoopDisk::new("run-refused", 16, &[]);
    let counts = std::env::temp_dir().join(format!("iosplit-refused-{}", std::process::id()));
    let program = r#"
import json, mmap, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 16384)
errors = {}
for i in range(64):
    try:
        os.pwritev(fd, [buf], i * 16384, 0x40)  # RWF_ATOMIC
    except OSError as error:
        errors[str(error.errno)] = errors.get(str(error.errno), 0) + 1
open(sys.argv[2], "w").write(json.dumps(errors))
"#;
    let counts_path = counts.to_str().unwrap().to_string();
    let report = run_json(&["python3", "-c", program, &disk.device(), &counts_path]);
    let own: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&counts).unwrap()).unwrap();
    let _ = std::fs::remove_file(&counts);
    // The program's own count: every call refused, as this kernel does for
    // a device that offers no atomic writes.
    assert_eq!(own, serde_json::json!({"95": 64}), "the program saw {own}");
    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["device"] == disk.name.as_str())
        .unwrap_or_else(|| panic!("no target {}: {}", disk.name, report["run"]["targets"]));
    assert_eq!(target["write_syscalls"], 0, "{target}");
    assert_eq!(target["failed_writes"]["EOPNOTSUPP"], 64, "{target}");
    let summary = target["summary"].as_str().unwrap();
    assert!(
        summary.contains("64 writes") && summary.contains("all failed at the call"),
        "{summary}"
    );
}
