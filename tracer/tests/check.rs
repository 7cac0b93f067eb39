//! `iosplit-trace check`: the seed's three verdicts on geometry read from
//! fixture sysfs trees, and the real binary on a partitioned loop device.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use iosplit_trace::engine::audit::audit_disk;
use iosplit_trace::frontend::check::{check_in, render_text, CHECK_SCHEMA_NAME};
use iosplit_trace::geometry::disks::read_disks_in;
use iosplit_trace::geometry::error::GeometryError;
use iosplit_trace::geometry::ioctl::NoIoctls;
use iosplit_trace::model::{Code, Evidence};
use serde_json::Value;

fn seed_layout(n: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/sysfs/seed-layout{n}"))
}

fn codes_and_evidence(n: u32) -> Vec<(Code, String, Option<u64>)> {
    let disks = read_disks_in(&seed_layout(n), None, &NoIoctls).unwrap();
    assert_eq!(disks.len(), 1);
    audit_disk(&disks[0])
        .into_iter()
        .map(|d| {
            let block_size = d.evidence.block_size().map(u64::from);
            (d.code, d.device, block_size)
        })
        .collect()
}

#[test]
fn seed_disk_is_read_from_sysfs() {
    let disks = read_disks_in(&seed_layout(1), None, &NoIoctls).unwrap();
    let disk = &disks[0];
    assert_eq!(disk.name, "sdc");
    assert_eq!(disk.size_sectors, 41_943_040);
    assert_eq!(
        (disk.logical_block_size, disk.physical_block_size),
        (512, 4096)
    );
    assert_eq!((disk.minimum_io_size, disk.optimal_io_size), (4096, 4096));
    assert_eq!(disk.virt_boundary_mask, 4095);
    assert_eq!(disk.scheduler, "mq-deadline");
    assert!(disk.request_based);
    let part = &disk.partitions[0];
    assert_eq!((part.name.as_str(), part.number), ("sdc2", 2));
    assert_eq!((part.start, part.size), (14_281_785, 27_647_865));
    assert_eq!(part.block_size, None, "fixtures never touch /dev");
}

#[test]
fn seed_layout_1_is_misaligned_with_512_byte_blocks() {
    assert_eq!(
        codes_and_evidence(1),
        [
            (Code::MisalignedStart, "sdc2".to_string(), None),
            (Code::SubpageBlockSize, "sdc2".to_string(), Some(512)),
        ]
    );
    // The audit's alignment offset agrees with the one the kernel wrote to
    // sdc2/alignment_offset in the fixture.
    let disks = read_disks_in(&seed_layout(1), None, &NoIoctls).unwrap();
    let found = audit_disk(&disks[0]);
    let Evidence::MisalignedStart(misaligned) = &found[0].evidence else {
        panic!("{:?}", found[0]);
    };
    assert_eq!(
        misaligned.alignment_offset,
        u64::from(disks[0].partitions[0].alignment_offset)
    );
}

#[test]
fn seed_layout_2_has_1024_byte_blocks() {
    assert_eq!(
        codes_and_evidence(2),
        [(Code::SubpageBlockSize, "sdc2".to_string(), Some(1024))]
    );
}

#[test]
fn seed_layout_3_is_clean() {
    assert_eq!(codes_and_evidence(3), []);
}

#[test]
fn check_resolves_partitions_to_their_disk_and_renders_in_80_columns() {
    for arg in ["sdc2", "8:34", "sdc"] {
        let report = check_in(&seed_layout(1), &[arg.to_string()], &NoIoctls).unwrap();
        assert_eq!(report.schema, CHECK_SCHEMA_NAME);
        assert_eq!(report.devices.len(), 1, "{arg}");
        assert_eq!(report.devices[0].name, "sdc");
        assert_eq!(report.devices[0].partitions[0].dev, "8:34");
        assert_eq!(report.diagnoses.len(), 2);
    }
    let report = check_in(&seed_layout(1), &[], &NoIoctls).unwrap();
    let text = render_text(&report);
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
    }
    let row = text
        .lines()
        .find(|line| line.trim_start().starts_with("sdc2"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "sdc2",
            "14281785",
            "27647865",
            "1",
            "1",
            "≈512",
            "predicted",
            "misaligned"
        ]
    );
    assert!(
        text.contains("CRITICAL subpage_block_size on sdc2"),
        "{text}"
    );
    assert!(
        text.contains("echo 'start=14282752, size=27646896' | sfdisk -N 2 /dev/sdc"),
        "{text}"
    );

    let err = check_in(&seed_layout(1), &["sdz".to_string()], &NoIoctls).unwrap_err();
    assert!(
        matches!(&err, GeometryError::UnknownDevice { name } if name == "sdz"),
        "{err}"
    );
    assert!(err.is_usage());
}

#[test]
fn check_json_has_the_report_model_shape() {
    let report = check_in(&seed_layout(2), &[], &NoIoctls).unwrap();
    let json: Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schema"], CHECK_SCHEMA_NAME);
    assert!(json["schema_version"].as_u64().is_some());
    let device = &json["devices"][0];
    assert_eq!(device["name"], "sdc");
    assert_eq!(device["dev"], "8:32");
    assert_eq!(device["measures"]["ops"], serde_json::json!({}));
    assert_eq!(device["geometry"]["physical_block_size"], 4096);
    assert_eq!(device["partitions"][0]["geometry"]["start"], 14_282_752);
    assert_eq!(
        json["diagnoses"][0]["code"],
        Code::SubpageBlockSize.as_str()
    );
    assert_eq!(json["diagnoses"][0]["severity"], "warning");
}

// ---- The real binary on a loop device (root) ----

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Skips outside CI when not root; under CI=true a missing privilege fails.
fn privileged(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs root under CI=true");
    }
    eprintln!("{test}: skipped (needs root)");
    false
}

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A partitioned loop device; detached and deleted on drop, also on failure.
struct LoopDisk {
    image: PathBuf,
    node: Option<String>,
}

impl LoopDisk {
    fn new(tag: &str, size_bytes: u64, layout: &str) -> LoopDisk {
        let image = std::env::temp_dir().join(format!("iosplit-{tag}-{}.img", std::process::id()));
        let file = std::fs::File::create(&image).unwrap();
        file.set_len(size_bytes).unwrap();
        drop(file);
        let mut disk = LoopDisk { image, node: None };
        let image = disk.image.to_string_lossy().into_owned();
        let node = sh("losetup", &["-f", "--show", "-P", &image])
            .trim()
            .to_string();
        disk.node = Some(node.clone());
        let mut sfdisk = Command::new("sfdisk")
            .args(["--no-reread", "--no-tell-kernel", "-q", &node])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        sfdisk
            .stdin
            .take()
            .unwrap()
            .write_all(layout.as_bytes())
            .unwrap();
        assert!(sfdisk.wait().unwrap().success(), "sfdisk failed");
        // This kernel has no partition parsers: add them through BLKPG.
        sh("partx", &["-a", &node]);
        disk
    }

    fn name(&self) -> String {
        self.node
            .as_deref()
            .unwrap()
            .trim_start_matches("/dev/")
            .to_string()
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        if let Some(node) = &self.node {
            let _ = Command::new("partx").args(["-d", node]).output();
            let _ = Command::new("losetup").args(["-d", node]).output();
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

fn run_check(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .arg("check")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn check_on_a_partitioned_loop_device() {
    if !privileged("check_on_a_partitioned_loop_device") {
        return;
    }
    // p1 aligned, whole pages; p2 odd size (512-byte blocks); p3 size = 2 mod 8
    // (1024-byte blocks). Loop devices have 512-byte physical sectors, so no
    // start is misaligned here (the fixture trees cover that).
    let layout = "label: dos\n\
                  start=2048, size=40960\n\
                  start=43008, size=200001\n\
                  start=243712, size=20002\n";
    let disk = LoopDisk::new("check", 160 << 20, layout);
    let name = disk.name();

    let out = run_check(&[&name, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let device = &json["devices"][0];
    assert_eq!(device["name"], name.as_str());
    let partitions = device["partitions"].as_array().unwrap();
    let geometry: Vec<(u64, u64, u64)> = partitions
        .iter()
        .map(|p| {
            let g = &p["geometry"];
            (
                g["start"].as_u64().unwrap(),
                g["size"].as_u64().unwrap(),
                g["block_size"].as_u64().unwrap(),
            )
        })
        .collect();
    // Block sizes from BLKBSZGET: the kernel's choice, read back.
    assert_eq!(
        geometry,
        [
            (2048, 40960, 4096),
            (43008, 200_001, 512),
            (243_712, 20002, 1024)
        ]
    );
    let found: Vec<(String, String, u64, String)> = json["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_string(),
                d["device"].as_str().unwrap().to_string(),
                d["evidence"]["block_size"].as_u64().unwrap(),
                d["evidence"]["block_size_source"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let blkbszget = "BLKBSZGET".to_string();
    assert_eq!(
        found,
        [
            (
                Code::SubpageBlockSize.to_string(),
                format!("{name}p2"),
                512,
                blkbszget.clone()
            ),
            (
                Code::SubpageBlockSize.to_string(),
                format!("{name}p3"),
                1024,
                blkbszget
            ),
        ]
    );

    // A partition names its disk; the text report stays within 80 columns.
    let out = run_check(&[&format!("/dev/{name}p2")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(&format!("{name} (")), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
    }
    assert!(
        text.contains(&format!("CRITICAL subpage_block_size on {name}p2")),
        "{text}"
    );

    let out = run_check(&["no-such-disk"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
