//! The scenario matrix: each boots the guest with its own disks, runs
//! `xtask/vm/scenarios/<name>.sh` inside, and judges the results it left.

use std::time::Duration;

use serde_json::Value;

use super::check::{
    describe, device_entry, diagnoses_on, event, expect_diagnoses, expect_oracle_agreement,
    op_measure, Check, Results,
};
use super::kernel::Line;
use super::qemu::{Bus, Disk, Throttle};

pub struct Scenario {
    pub name: &'static str,
    pub summary: &'static str,
    pub disks: Vec<Disk>,
    pub timeout: Duration,
    /// Disks for a second boot after the first (none: one boot). The same
    /// script runs again; that boot's files come back prefixed `fixed.`.
    pub fixed_disks: Vec<Disk>,
    /// Judges the results a guest running `Line`'s kernel left.
    pub evaluate: fn(&Results, &Line) -> Vec<Check>,
    /// Host tools beyond the shared ones, in an initramfs of this
    /// scenario's own: fio's 80 MB of libraries in every guest changed its
    /// memory enough that the throttled split's scattered pages merged.
    pub extra_tools: &'static [&'static str],
}

const MIB: u64 = 1 << 20;
/// The seed disk's 512e geometry: 512-byte logical, 4096-byte physical sectors.
const SEED_512E: Bus = Bus::VirtioBlk {
    logical: 512,
    physical: 4096,
};
/// The same on qemu's NVMe, whose 4 KiB virt boundary the seed's storvsc had.
const SEED_512E_NVME: Bus = Bus::Nvme {
    logical: 512,
    physical: 4096,
};

/// Descriptors in the requeue disk's ring: with 2 per request and no indirect
/// descriptors, virtio-blk allows 8 requests in flight, but one of up to
/// 14 segments takes 16, so a split 1 MiB write fills the ring at once.
const REQUEUE_RING: u16 = 16;
const REQUEUE_DISK: Bus = Bus::VirtioBlkSmallRing {
    queue_size: REQUEUE_RING,
    indirect_desc: false,
};
/// The same disk with the host-side fix `requeued_commands` names.
const REQUEUE_DISK_FIXED: Bus = Bus::VirtioBlkSmallRing {
    queue_size: REQUEUE_RING,
    indirect_desc: true,
};

/// The seed report's three layouts on a 256 MiB disk, keeping start and size
/// residues modulo 8 (seed: 14281785/27647865, 14282752/27646898, 14282752/27660288).
pub const SEED_LAYOUTS: [(u64, u64); 3] = [(1785, 400_001), (2048, 400_002), (2048, 522_240)];

/// The layout `subpage_block_size`'s fix gives a partition: moved to sector
/// 2048, its end kept, its size rounded down to whole 4 KiB (layout 1 →
/// start 2048, 399,736 sectors: as `sfdisk` is told in the README). The
/// same size, so a mkfs there does the same work as on the partition it fixes.
const fn fixed_layout((start, size): (u64, u64)) -> (u64, u64) {
    (2048, (start + size - 2048) / 8 * 8)
}

pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "seed-512e",
            summary: "seed's three partition layouts on a 512e virtio disk: run -- mkfs.ext4, O_DIRECT 1 MiB",
            disks: SEED_LAYOUTS
                .iter()
                .zip(["layout1", "layout2", "layout3"])
                .map(|(&(start, size), serial)| Disk {
                    serial,
                    bytes: 256 * MIB,
                    bus: SEED_512E,
                    partition: Some((start, size)),
                    throttle: Throttle::None,
                })
                .collect(),
            timeout: Duration::from_secs(600),
            evaluate: seed_512e,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "scsi-debug-io-opt",
            summary: "scsi_debug physblk_exp=3 opt_blks=256: partition 4 KiB- but not io_opt-aligned",
            disks: Vec::new(),
            timeout: Duration::from_secs(300),
            evaluate: scsi_debug_io_opt,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "nvme-virt-boundary",
            summary: "qemu NVMe (virt_boundary_mask 4095) vs virtio: batched 512 B writes, gappy writev",
            disks: vec![
                Disk {
                    serial: "vmtest-nvme",
                    bytes: 256 * MIB,
                    bus: Bus::Nvme {
                        logical: 512,
                        physical: 512,
                    },
                    partition: None,
                    throttle: Throttle::None,
                },
                Disk {
                    serial: "control",
                    bytes: 256 * MIB,
                    bus: Bus::VirtioBlk {
                        logical: 512,
                        physical: 512,
                    },
                    partition: None,
                    throttle: Throttle::None,
                },
            ],
            timeout: Duration::from_secs(300),
            evaluate: nvme_virt_boundary,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "blk-oracle",
            summary: "btf and classic (format layout) probes vs the ftrace blk tracer, requeues included",
            disks: vec![
                Disk {
                    serial: "oracle",
                    bytes: 256 * MIB,
                    bus: SEED_512E,
                    partition: Some(SEED_LAYOUTS[0]),
                    throttle: Throttle::None,
                },
                Disk {
                    serial: "requeue",
                    bytes: 64 * MIB,
                    bus: REQUEUE_DISK,
                    partition: None,
                    throttle: Throttle::None,
                },
            ],
            timeout: Duration::from_secs(300),
            evaluate: blk_oracle,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "stacks",
            summary: "dm over a partition: linear (aligned; 3 sectors off, fixed by reload), linear + error, crypt 512/4096 (and its 128 KiB cap, which max_write_size does not raise); md raid1 on sector-63 partitions (fixed at 64; then capped at 32 KiB, raised as the finding says), raid0 (64 KiB chunks) and a table 8 sectors into it; dm-striped; dm-flakey; dm-multipath over two paths; an LVM volume off the grid, recreated with pvcreate --dataalignment",
            disks: [
                ("stacked", 256 * MIB, 2048, 400_000),
                // Legacy DOS partitions at sector 63 for raid1; aligned ones for raid0.
                ("mirror-a", 64 * MIB, 63, 100_000),
                ("mirror-b", 64 * MIB, 63, 100_000),
                ("stripe-a", 64 * MIB, 2048, 100_000),
                ("stripe-b", 64 * MIB, 2048, 100_000),
            ]
            .into_iter()
            .map(|(serial, bytes, start, size)| Disk {
                serial,
                bytes,
                bus: SEED_512E,
                partition: Some((start, size)),
                throttle: Throttle::None,
            })
            .collect(),
            timeout: Duration::from_secs(420),
            evaluate: stacks,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "requeue-fix",
            summary: "requeued_commands on a 16-descriptor ring without indirect descriptors, then rebooted with indirect_desc=on: issues vs what_if",
            disks: vec![Disk {
                serial: "requeue",
                bytes: 64 * MIB,
                bus: REQUEUE_DISK,
                partition: None,
                throttle: Throttle::None,
            }],
            timeout: Duration::from_secs(300),
            fixed_disks: vec![Disk {
                serial: "requeue",
                bytes: 64 * MIB,
                bus: REQUEUE_DISK_FIXED,
                partition: None,
                throttle: Throttle::None,
            }],
            evaluate: requeue_fix,
            extra_tools: &[],
        },
        Scenario {
            name: "throttled",
            summary: "what a fix buys in time: split (max_sectors_kb 32), nomerges, a misaligned start and the seed's layouts on 512e virtio and NVMe disks throttled to 200 IOPS or 8 MiB/s; run's predicted time after each fix against the fix applied",
            disks: [
                ("iops", 2048, 400_000, Throttle::Iops(200)),
                ("bw", 2048, 400_000, Throttle::Bandwidth(8 * MIB)),
                ("seed", SEED_LAYOUTS[0].0, SEED_LAYOUTS[0].1, Throttle::Iops(200)),
                ("seedfix", SEED_LAYOUTS[2].0, SEED_LAYOUTS[2].1, Throttle::Iops(200)),
                ("mis", 2049, 400_000, Throttle::Iops(200)),
            ]
            .into_iter()
            .map(|(serial, start, size, throttle)| (serial, SEED_512E, start, size, throttle))
            .chain([
                ("nvseed", SEED_512E_NVME, SEED_LAYOUTS[0].0, SEED_LAYOUTS[0].1, Throttle::Iops(200)),
                ("nvfix", SEED_512E_NVME, fixed_layout(SEED_LAYOUTS[0]).0, fixed_layout(SEED_LAYOUTS[0]).1, Throttle::Iops(200)),
            ])
            .map(|(serial, bus, start, size, throttle)| Disk {
                serial,
                bytes: 256 * MIB,
                bus,
                partition: Some((start, size)),
                throttle,
            })
            .collect(),
            timeout: Duration::from_secs(600),
            evaluate: throttled,
            extra_tools: &[],
            fixed_disks: Vec::new(),
        },
        Scenario {
            name: "cgroup-writeback",
            summary: "cgroup v2 (+io +memory): buffered ext4 writes in /a flushed by sync's kworker stay charged to /a; O_DIRECT in /b to /b; then run under fio's io_uring (plain, fixed files and buffers) and libaio against fio's own totals",
            disks: ["cgwb", "async"]
                .into_iter()
                .map(|serial| Disk {
                    serial,
                    bytes: if serial == "cgwb" { 256 * MIB } else { 64 * MIB },
                    bus: Bus::VirtioBlk {
                        logical: 512,
                        physical: 512,
                    },
                    partition: None,
                    throttle: Throttle::None,
                })
                .collect(),
            timeout: Duration::from_secs(300),
            evaluate: cgroup_writeback,
            extra_tools: &["fio"],
            fixed_disks: Vec::new(),
        },
    ]
}

/// The partition's geometry as the guest kernel saw it, against what the disk was built with.
fn expect_geometry(what: &str, results: &Results, file: &str, wanted: &[(&str, &str)]) -> Check {
    let expected = wanted
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(" ");
    match results.values(file) {
        Err(why) => Check::missing(what, expected, why),
        Ok(values) => {
            let found = wanted
                .iter()
                .map(|(key, _)| format!("{key}={}", values.get(*key).map_or("?", String::as_str)))
                .collect::<Vec<_>>()
                .join(" ");
            let pass = wanted
                .iter()
                .all(|(key, value)| values.get(*key).is_some_and(|v| v == value));
            Check::new(what, expected, found, pass)
        }
    }
}

/// What one seed layout must look like: in the guest kernel, and to `run`.
struct SeedExpectation {
    layout: &'static str,
    codes: &'static [&'static str],
    /// `evidence.block_size` of `subpage_block_size`.
    block_size: Option<u64>,
    /// `blockdev --getbsz` in the guest.
    kernel_block_size: &'static str,
    alignment_offset: &'static str,
}

const SEED_EXPECTATIONS: [SeedExpectation; 3] = [
    SeedExpectation {
        layout: "layout1",
        codes: &["misaligned_start", "subpage_block_size"],
        block_size: Some(512),
        kernel_block_size: "512",
        alignment_offset: "3584",
    },
    SeedExpectation {
        layout: "layout2",
        codes: &["subpage_block_size"],
        block_size: Some(1024),
        kernel_block_size: "1024",
        alignment_offset: "0",
    },
    SeedExpectation {
        layout: "layout3",
        codes: &[],
        block_size: None,
        kernel_block_size: "4096",
        alignment_offset: "0",
    },
];

/// Every probe attached on the guest kernel (`unsupported_probes` empty).
fn expect_all_probes(what: &str, results: &Results, report_name: &str) -> Check {
    let expected = "unsupported_probes empty";
    match results.json(report_name) {
        Ok(report) => {
            let unsupported: Vec<String> = report
                .get("unsupported_probes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|probe| probe.as_str().unwrap_or("?").to_string())
                .collect();
            let listed = report
                .get("unsupported_probes")
                .is_some_and(Value::is_array);
            Check::new(
                what,
                expected,
                if !listed {
                    "no unsupported_probes list".to_string()
                } else if unsupported.is_empty() {
                    "all attached".to_string()
                } else {
                    unsupported.join("; ")
                },
                listed && unsupported.is_empty(),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    }
}

fn seed_512e(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = Vec::new();
    // /init leaves tracefs unmounted: the first tracing command must mount it.
    let what = "tool mounts tracefs itself";
    let expected = "layout1 run says it mounted tracefs";
    checks.push(match results.text("layout1.run.json.stderr") {
        Ok(stderr) => {
            let mounted = stderr.contains("mounted tracefs");
            Check::new(
                what,
                expected,
                if mounted {
                    "mounted"
                } else {
                    "no such message"
                },
                mounted,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.push(expect_all_probes(
        &format!("run probes (block + process tree) on {}", line.name),
        results,
        "layout1.run.json",
    ));
    // The probe stops mkfs at its opens for writing until `run` holds them.
    let what = "run pauses at mkfs's opens for writing";
    let expected = "layout1 run: paused_opens >= 1";
    checks.push(match results.json("layout1.run.json") {
        Ok(report) => {
            let paused = report
                .get("run")
                .and_then(|run| run.get("paused_opens"))
                .and_then(Value::as_u64);
            Check::new(
                what,
                expected,
                format!("paused_opens {paused:?}"),
                paused.is_some_and(|paused| paused >= 1),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    for SeedExpectation {
        layout,
        codes,
        block_size,
        kernel_block_size,
        alignment_offset: alignment,
    } in SEED_EXPECTATIONS
    {
        let geometry = format!("{layout}.geometry");
        checks.push(expect_geometry(
            &format!("{layout} guest geometry"),
            results,
            &geometry,
            &[
                ("disk.physical_block_size", "4096"),
                ("part.block_size", kernel_block_size),
                ("part.alignment_offset", alignment),
            ],
        ));
        let part = results
            .value("names", layout)
            .unwrap_or_else(|_| format!("{layout}?"));
        let audit = results.json(&format!("{layout}.check.json"));
        checks.push(expect_diagnoses(
            &format!("{layout} check (geometry only)"),
            &audit,
            &part,
            codes,
            block_size,
        ));
        let report = results.json(&format!("{layout}.run.json"));
        checks.push(expect_diagnoses(
            &format!("{layout} run -- mkfs.ext4"),
            &report,
            &part,
            codes,
            block_size,
        ));
    }
    // O_DIRECT 1 MiB writes on the misaligned layout, the aligned one as control.
    for layout in ["layout1", "layout3"] {
        checks.push(expect_oracle_agreement(
            &format!("{layout} O_DIRECT: events vs blk tracer"),
            results,
            &format!("{layout}.direct.json"),
            &format!("{layout}.direct.trace"),
        ));
    }
    // The kernel fact the tool must report: with a 1 MiB transfer limit the
    // misaligned start splits each 1 MiB write in two; the aligned one does not.
    let splits = |layout: &str| {
        results
            .text(&format!("{layout}.direct.trace"))
            .map(|trace| super::oracle::parse_blk_trace(&trace).total("X"))
    };
    let what = "kernel splits 8 x 1 MiB (blk tracer)";
    let expected = "layout1 8 splits, layout3 0";
    checks.push(match (splits("layout1"), splits("layout3")) {
        (Ok(misaligned), Ok(aligned)) => Check::new(
            what,
            expected,
            format!("layout1 {misaligned} splits, layout3 {aligned}"),
            misaligned == 8 && aligned == 0,
        ),
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    let direct = |layout: &str| -> Result<(u64, u64, u64, u64), String> {
        let part = results.value("names", layout)?;
        let report = results.json(&format!("{layout}.direct.json"))?;
        let entry = device_entry(&report, &part)
            .ok_or_else(|| format!("no devices entry for {part} (devices list empty?)"))?;
        let field = |name| op_measure(entry, "write", name).unwrap_or(0);
        Ok((
            field("user_ios"),
            field("fragments"),
            field("commands"),
            field("misaligned_pbs_commands"),
        ))
    };
    let expected = "layout1: misaligned commands > 0, fragments > user I/Os and > layout3's";
    checks.push(match (direct("layout1"), direct("layout3")) {
        (Ok((ios1, frags1, cmds1, mis1)), Ok((ios3, frags3, cmds3, mis3))) => Check::new(
            "layout1 O_DIRECT 1 MiB report",
            expected,
            format!(
                "layout1 {ios1} ios/{frags1} frags/{cmds1} cmds/{mis1} misaligned; layout3 {ios3}/{frags3}/{cmds3}/{mis3}"
            ),
            ios1 > 0 && mis1 > 0 && frags1 > ios1 && frags1 > frags3 && mis3 == 0,
        ),
        (Err(why), _) | (_, Err(why)) => Check::missing("layout1 O_DIRECT 1 MiB report", expected, why),
    });
    checks
}

fn scsi_debug_io_opt(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "scsi_debug geometry",
        results,
        "sda1.geometry",
        &[
            ("disk.physical_block_size", "4096"),
            ("disk.optimal_io_size", "131072"),
            ("part.start", "2056"),
        ],
    )];
    let report = results.json("check.json");
    checks.push(expect_diagnoses(
        "check: start 2056 (4 KiB-aligned, not 128 KiB)",
        &report,
        "sda1",
        &["misaligned_io_opt"],
        None,
    ));
    checks.push(expect_diagnoses(
        "check: start 264192 (128 KiB-aligned)",
        &report,
        "sda2",
        &[],
        None,
    ));
    checks
}

/// Merges and commands of one workload's report.
fn merge_counts(report: &Value) -> (u64, u64, u64) {
    (
        event(report, "backmerge") + event(report, "frontmerge") + event(report, "rq_merge"),
        event(report, "split"),
        event(report, "issue"),
    )
}

/// A diagnosis `code` on `device` whose cause names the virt boundary.
fn names_virt_boundary(report: &Value, device: &str, code: &str) -> bool {
    super::check::diagnoses_on(report, device)
        .iter()
        .any(|found| found.code == code && found.names_virt_boundary)
}

fn nvme_virt_boundary(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = vec![
        expect_geometry(
            "nvme virt boundary",
            results,
            "nvme.geometry",
            &[("disk.virt_boundary_mask", "4095")],
        ),
        expect_geometry(
            "virtio control",
            results,
            "control.geometry",
            &[("disk.virt_boundary_mask", "0")],
        ),
    ];
    for (disk, workload) in [
        ("nvme", "aio"),
        ("control", "aio"),
        ("nvme", "writev"),
        ("control", "writev"),
    ] {
        checks.push(expect_oracle_agreement(
            &format!("{disk} {workload}: events vs blk tracer"),
            results,
            &format!("{disk}.{workload}.json"),
            &format!("{disk}.{workload}.trace"),
        ));
    }
    let nvme_name = results
        .value("names", "nvme")
        .unwrap_or_else(|_| "nvme0n1".into());
    let control_name = results
        .value("names", "control")
        .unwrap_or_else(|_| "vda".into());
    // 64 adjacent 512 B direct writes in one io_submit: virtio merges them,
    // NVMe cannot (each ends mid-page: a gap at the virt boundary).
    let what = "aio 64x512 B: merges nvme vs virtio";
    let expected = "nvme 0 merges, >=64 cmds; virtio merges > 0";
    checks.push(match (results.json("nvme.aio.json"), results.json("control.aio.json")) {
        (Ok(nvme), Ok(control)) => {
            let (nvme_merges, _, nvme_cmds) = merge_counts(&nvme);
            let (control_merges, _, control_cmds) = merge_counts(&control);
            Check::new(
                what,
                expected,
                format!("nvme {nvme_merges} merges/{nvme_cmds} cmds; virtio {control_merges}/{control_cmds}"),
                nvme_merges == 0 && nvme_cmds >= 64 && control_merges > 0,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    // 4 pwritevs of 16 x 512 B iovecs in separate pages: NVMe splits at each gap.
    let what = "4 writev 16x512 B: splits nvme vs virtio";
    let expected = "nvme 60 splits; virtio 0";
    checks.push(match (results.json("nvme.writev.json"), results.json("control.writev.json")) {
        (Ok(nvme), Ok(control)) => {
            let (_, nvme_splits, nvme_cmds) = merge_counts(&nvme);
            let (_, control_splits, control_cmds) = merge_counts(&control);
            Check::new(
                what,
                expected,
                format!("nvme {nvme_splits} splits/{nvme_cmds} cmds; virtio {control_splits}/{control_cmds}"),
                nvme_splits == 60 && control_splits == 0,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    });
    let what = "report names the virt boundary";
    let expected =
        "nvme: merge_blocked + split_amplification, cause virt boundary; virtio: neither";
    checks.push(
        match (
            results.json("nvme.aio.json"),
            results.json("nvme.writev.json"),
            results.json("control.aio.json"),
            results.json("control.writev.json"),
        ) {
            (Ok(nvme_aio), Ok(nvme_writev), Ok(control_aio), Ok(control_writev)) => {
                let merge = names_virt_boundary(&nvme_aio, &nvme_name, "merge_blocked");
                let split = names_virt_boundary(&nvme_writev, &nvme_name, "split_amplification");
                let control: Vec<_> = super::check::diagnoses_on(&control_aio, &control_name)
                    .into_iter()
                    .chain(super::check::diagnoses_on(&control_writev, &control_name))
                    .filter(|found| {
                        found.code == "merge_blocked" || found.code == "split_amplification"
                    })
                    .collect();
                let nvme_found: Vec<_> = super::check::diagnoses_on(&nvme_aio, &nvme_name)
                    .into_iter()
                    .chain(super::check::diagnoses_on(&nvme_writev, &nvme_name))
                    .collect();
                Check::new(
                    what,
                    expected,
                    format!(
                        "nvme: {}; virtio: {}",
                        super::check::describe(&nvme_found),
                        super::check::describe(&control)
                    ),
                    merge && split && control.is_empty(),
                )
            }
            (Err(why), _, _, _)
            | (_, Err(why), _, _)
            | (_, _, Err(why), _)
            | (_, _, _, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// `name[size] at offset` for each field of a tracepoint `format` file that
/// the 6.1 and later layouts disagree on (`rwbs`, `ioprio`).
fn issue_layout(format: &str) -> String {
    let mut described = Vec::new();
    for wanted in ["ioprio", "rwbs"] {
        let field = format.lines().find_map(|entry| {
            let declaration = entry.trim().strip_prefix("field:")?;
            let (declaration, rest) = declaration.split_once(';')?;
            let name = declaration.split_whitespace().last()?;
            (name == wanted || name.starts_with(&format!("{wanted}[")))
                .then_some((name.to_string(), rest))
        });
        described.push(match field {
            Some((name, rest)) => {
                let offset = rest
                    .split(';')
                    .find_map(|part| part.trim().strip_prefix("offset:"))
                    .unwrap_or("?");
                format!("{name} at {offset}")
            }
            None => format!("no {wanted}"),
        });
    }
    described.join(", ")
}

/// The `block_rq_issue` layout each kernel line has: the classic probes must
/// read it from the format file, not assume the host's.
fn expected_issue_layout(line: &Line) -> &'static str {
    match line.name {
        "6.1" => "no ioprio, rwbs[8] at 32",
        "6.12" => "ioprio at 32, rwbs[8] at 34",
        // A line added to LINES without its layout: the check fails and says so.
        _ => "a layout listed for this kernel line",
    }
}

fn blk_oracle(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "512e partition at 1785",
        results,
        "geometry",
        &[
            ("part.alignment_offset", "3584"),
            ("part.block_size", "512"),
        ],
    )];
    checks.push(expect_all_probes(
        &format!("report probes on {}", line.name),
        results,
        "report.json",
    ));
    let what = format!("{} block_rq_issue layout", line.name);
    let expected = expected_issue_layout(line);
    checks.push(match results.text("format.block_rq_issue") {
        Ok(format) => {
            let found = issue_layout(&format);
            let pass = found == expected;
            Check::new(what, expected, found, pass)
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.push(requeue_disk(results));
    checks.push(expect_oracle_agreement(
        "mkfs + O_DIRECT + aio + reads: events vs blk",
        results,
        "report.json",
        "blk.trace",
    ));
    checks.push(expect_all_probes(
        &format!("classic report probes on {}", line.name),
        results,
        "report-classic.json",
    ));
    checks.push(expect_oracle_agreement(
        "same, classic tracepoints: events vs blk",
        results,
        "report-classic.json",
        "blk.trace",
    ));
    // Requeues on their own line: the agreement rows above include them, but
    // this one says whether the requeue probe is there at all.
    let what = "requeues: events.requeue vs blk R";
    let expected = "btf = classic = blk R > 0";
    checks.push(
        match (
            results.text("blk.trace"),
            results.json("report.json"),
            results.json("report-classic.json"),
        ) {
            (Ok(trace), Ok(raw), Ok(classic)) => {
                let requeues = super::oracle::parse_blk_trace(&trace).total("R");
                let key = |report: &Value| {
                    report
                        .get("events")
                        .and_then(|events| events.get("requeue"))
                        .and_then(Value::as_u64)
                };
                let describe = |count: Option<u64>| {
                    count.map_or_else(|| "no events.requeue".to_string(), |n| n.to_string())
                };
                let (raw, classic) = (key(&raw), key(&classic));
                Check::new(
                    what,
                    expected,
                    format!(
                        "blk R {requeues}, btf {}, classic {}",
                        describe(raw),
                        describe(classic)
                    ),
                    requeues > 0 && raw == Some(requeues) && classic == Some(requeues),
                )
            }
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
                Check::missing(what, expected, why)
            }
        },
    );
    // The comparison only proves kinds that occurred: the workload must produce all eight.
    let what = "workload covers every action";
    let expected = "A Q X M F D R C all > 0";
    checks.push(match results.text("blk.trace") {
        Ok(trace) => {
            let counts = super::oracle::parse_blk_trace(&trace);
            let absent: Vec<&str> = super::oracle::mapping()
                .into_iter()
                .map(|(action, _)| action)
                .filter(|action| counts.total(action) == 0)
                .collect();
            Check::new(
                what,
                expected,
                if absent.is_empty() {
                    "all seen".to_string()
                } else {
                    format!("never seen: {}", absent.join(" "))
                },
                absent.is_empty(),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// The small-ring disk as the guest saw it: no indirect descriptors offered
/// (virtio feature bit 28, VIRTIO_RING_F_INDIRECT_DESC), and requeued commands
/// on that disk in the blk trace.
fn requeue_disk(results: &Results) -> Check {
    const INDIRECT_DESC_BIT: usize = 28;
    let what = format!("small-ring virtio disk (queue-size {REQUEUE_RING}, indirect_desc=off)");
    let expected = "no indirect descriptors; blk R on it > 0";
    let (geometry, trace, device) = match (
        results.values("requeue.geometry"),
        results.text("blk.trace"),
        results.value("names", "requeue_dev"),
    ) {
        (Ok(geometry), Ok(trace), Ok(device)) => (geometry, trace, device),
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
            return Check::missing(what, expected, why)
        }
    };
    let indirect = geometry
        .get("virtio.features")
        .and_then(|bits| bits.chars().nth(INDIRECT_DESC_BIT));
    let dev = device_number(&device);
    let requeues = dev
        .and_then(|dev| {
            super::oracle::parse_blk_trace(&trace)
                .per_device
                .get(&dev)
                .and_then(|actions| actions.get("R").copied())
        })
        .unwrap_or(0);
    let field = |key: &str| geometry.get(key).map_or("?", String::as_str);
    Check::new(
        what,
        expected,
        format!(
            "indirect {}; max_segments {}, nr_requests {}; blk R {requeues}",
            match indirect {
                Some('0') => "off",
                Some('1') => "on",
                _ => "?",
            },
            field("disk.max_segments"),
            field("disk.nr_requests"),
        ),
        indirect == Some('0') && requeues > 0,
    )
}

/// How far the issues after a fix may be from `what_if.commands_after_fix` (issue #10).
const WHAT_IF_TOLERANCE: f64 = 0.2;

/// What one boot of requeue-fix left: `prefix` is "" or "fixed.".
struct RequeueRun {
    report: Value,
    /// `virtio.features` bit 28 (VIRTIO_RING_F_INDIRECT_DESC).
    indirect: Option<char>,
    max_segments: String,
    /// blk tracer on the disk: issues carrying data, and requeues.
    data_issues: u64,
    requeues: u64,
    device: String,
}

fn requeue_run(results: &Results, prefix: &str) -> Result<RequeueRun, String> {
    const INDIRECT_DESC_BIT: usize = 28;
    let geometry = results.values(&format!("{prefix}geometry"))?;
    let trace = results.text(&format!("{prefix}blk.trace"))?;
    let device = results.value(&format!("{prefix}names"), "requeue")?;
    let dev_text = results.value(&format!("{prefix}names"), "requeue_dev")?;
    let dev = device_number(&dev_text).ok_or_else(|| format!("bad device number {dev_text}"))?;
    let (data_issues, _flushes) = super::oracle::lines_with_data(&trace, dev, "D");
    let requeues = super::oracle::parse_blk_trace(&trace)
        .per_device
        .get(&dev)
        .and_then(|actions| actions.get("R").copied())
        .unwrap_or(0);
    Ok(RequeueRun {
        report: results.json(&format!("{prefix}report.json"))?,
        indirect: geometry
            .get("virtio.features")
            .and_then(|bits| bits.chars().nth(INDIRECT_DESC_BIT)),
        max_segments: geometry
            .get("disk.max_segments")
            .cloned()
            .unwrap_or_else(|| "?".into()),
        data_issues,
        requeues,
        device,
    })
}

/// `requeued_commands` on `device` in a report, if any.
fn requeue_diagnosis<'a>(report: &'a Value, device: &str) -> Option<&'a Value> {
    report
        .get("diagnoses")?
        .as_array()?
        .iter()
        .find(|diagnosis| {
            diagnosis.get("code").and_then(Value::as_str) == Some("requeued_commands")
                && diagnosis
                    .get("device")
                    .and_then(Value::as_str)
                    .is_some_and(|name| name.trim_start_matches("/dev/") == device)
        })
}

/// requeued_commands on the ring filler, then the fix it names applied on the
/// host (a second boot) and the same workload's issues against its `what_if`.
fn requeue_fix(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = Vec::new();
    for (what, report, trace) in [
        ("before: events vs blk", "report.json", "blk.trace"),
        (
            "after fix: events vs blk",
            "fixed.report.json",
            "fixed.blk.trace",
        ),
    ] {
        checks.push(expect_oracle_agreement(what, results, report, trace));
    }
    let what = "before: requeued_commands, cause and fix";
    let expected =
        "blk R > 0; cause virtio_ring_full, virtio_indirect_desc false, fix names indirect_desc=on and features bit 28, what_if.commands_now = blk D";
    let before = match requeue_run(results, "") {
        Ok(run) => run,
        Err(why) => {
            checks.push(Check::missing(what, expected, why));
            return checks;
        }
    };
    let diagnosis = requeue_diagnosis(&before.report, &before.device);
    let evidence = diagnosis.and_then(|d| d.get("evidence"));
    let what_if = |key: &str| {
        evidence
            .and_then(|e| e.get("what_if"))
            .and_then(|w| w.get(key))
            .and_then(Value::as_u64)
    };
    let (now, predicted) = (what_if("commands_now"), what_if("commands_after_fix"));
    let cause = evidence
        .and_then(|e| e.get("cause"))
        .and_then(Value::as_str)
        .unwrap_or("none");
    let indirect_evidence = evidence.and_then(|e| e.get("virtio_indirect_desc"));
    let fix = diagnosis
        .and_then(|d| d.get("fix"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let names_fix = fix.contains("indirect_desc=on") && fix.contains("bit 28");
    checks.push(Check::new(
        what,
        expected,
        match diagnosis {
            None => format!(
                "no requeued_commands on {} (blk R {}, D {})",
                before.device, before.requeues, before.data_issues
            ),
            Some(_) => format!(
                "blk R {}, D {}; cause {cause}, virtio_indirect_desc {}, fix {}; what_if {} -> {}",
                before.requeues,
                before.data_issues,
                indirect_evidence.map_or("absent".into(), ToString::to_string),
                if names_fix { "names both" } else { "does not" },
                now.map_or("?".into(), |n| n.to_string()),
                predicted.map_or("?".into(), |n| n.to_string()),
            ),
        },
        before.requeues > 0
            && before.indirect == Some('0')
            && cause == "virtio_ring_full"
            && indirect_evidence == Some(&Value::Bool(false))
            && names_fix
            && now == Some(before.data_issues),
    ));
    let what = "after fix: guest sees indirect descriptors";
    let expected = format!("features bit 28 = 1, max_segments {}", before.max_segments);
    let after = match requeue_run(results, "fixed.") {
        Ok(run) => run,
        Err(why) => {
            checks.push(Check::missing(what, expected, why));
            return checks;
        }
    };
    checks.push(Check::new(
        what,
        expected,
        format!(
            "bit 28 = {}, max_segments {}",
            after.indirect.unwrap_or('?'),
            after.max_segments
        ),
        after.indirect == Some('1') && after.max_segments == before.max_segments,
    ));
    let what = "after fix: blk D vs what_if.commands_after_fix";
    let expected = format!("within {:.0}%", WHAT_IF_TOLERANCE * 100.0);
    checks.push(match predicted {
        Some(predicted) if predicted > 0 => {
            let error = (after.data_issues as f64 - predicted as f64).abs() / predicted as f64;
            Check::new(
                what,
                expected,
                format!(
                    "D {} (tool: {} commands + {} requeues), predicted {predicted}: {:.1}% off",
                    after.data_issues,
                    super::check::device_entry(&after.report, &after.device)
                        .and_then(|entry| op_measure(entry, "write", "commands"))
                        .unwrap_or(0),
                    event(&after.report, "requeue"),
                    error * 100.0
                ),
                error <= WHAT_IF_TOLERANCE,
            )
        }
        _ => Check::missing(what, expected, "no what_if.commands_after_fix".into()),
    });
    let what = "after fix: requeues gone";
    let expected = "blk R 0, events.requeue 0, no requeued_commands";
    let still = requeue_diagnosis(&after.report, &after.device).is_some();
    checks.push(Check::new(
        what,
        expected,
        format!(
            "blk R {}, events.requeue {}, requeued_commands {}",
            after.requeues,
            event(&after.report, "requeue"),
            if still { "still" } else { "gone" }
        ),
        after.requeues == 0 && event(&after.report, "requeue") == 0 && !still,
    ));
    checks
}

fn stacks(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_geometry(
        "dm-linear table",
        results,
        "dm.geometry",
        &[("dm.target", "linear")],
    )];
    checks.push(expect_oracle_agreement(
        "dm-0 + vda: events vs blk tracer",
        results,
        "report.json",
        "blk.trace",
    ));
    // Each data bio to dm-0 is remapped twice (dm-0 -> vda1, vda1 -> vda); an
    // empty flush only once (partitions remap only bios with sectors).
    let what = "remaps per dm-0 bio: 2 (data), 1 (flush)";
    let expected = "tool remap = blk A = 2 x data Q(dm-0) + empty Q(dm-0)";
    checks.push(
        match (results.text("blk.trace"), results.value("names", "dm_dev")) {
            (Ok(trace), Ok(dm_dev)) => {
                let dm = device_number(&dm_dev).unwrap_or((0, 0));
                let (data, empty) = super::oracle::lines_with_data(&trace, dm, "Q");
                let remaps = super::oracle::parse_blk_trace(&trace).total("A");
                let tool_remaps = results
                    .json("report.json")
                    .map(|r| event(&r, "remap"))
                    .unwrap_or(0);
                Check::new(
                    what,
                    expected,
                    format!(
                        "tool {tool_remaps}, blk A {remaps}, Q(dm-0) {data} data + {empty} empty"
                    ),
                    data > 0 && remaps == 2 * data + empty && tool_remaps == remaps,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    // `run` follows the command's bios on dm-0 down to the commands on vda.
    let what = "run -- O_DIRECT on dm-0: chain to commands";
    let expected = "target dm-0 with bios > 0 and commands > 0";
    checks.push(match results.json("run.json") {
        Ok(report) => {
            let targets: Vec<String> = report
                .get("run")
                .and_then(|run| run.get("targets"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|target| {
                    format!(
                        "{} bios {} cmds {}",
                        target.get("device").and_then(Value::as_str).unwrap_or("?"),
                        target.get("bios").and_then(Value::as_u64).unwrap_or(0),
                        target.get("commands").and_then(Value::as_u64).unwrap_or(0)
                    )
                })
                .collect();
            let chained = report
                .get("run")
                .and_then(|run| run.get("targets"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|target| {
                    target.get("device").and_then(Value::as_str) == Some("dm-0")
                        && target.get("bios").and_then(Value::as_u64).unwrap_or(0) > 0
                        && target.get("commands").and_then(Value::as_u64).unwrap_or(0) > 0
                });
            Check::new(
                what,
                expected,
                if targets.is_empty() {
                    "no run targets".to_string()
                } else {
                    targets.join("; ")
                },
                chained,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    if let Ok(dm) = results.value("names", "dm") {
        checks.push(super::check::expect_no_warning(
            "report: writes and mkfs on the aligned dm-linear table (false alarm)",
            &results.json("report.json"),
            &dm,
        ));
    }
    checks.extend(misaligned_table(results));
    checks.extend(failing_table(results));
    for sector_size in [512, 4096] {
        checks.extend(crypt_table(results, sector_size));
    }
    checks.extend(md_arrays(results));
    checks.extend(raid1_fixed(results));
    checks.extend(raid1_capped(results));
    checks.extend(raid5_array(results));
    checks.extend(striped_table(results));
    checks.extend(flakey_table(results));
    checks.extend(multipath_table(results));
    checks.extend(lvm_volume(results));
    // The same stacks on the classic tracepoints: dm's splits on the
    // trimmed bio, md's remaps, request remaps, against the blk tracer.
    for (name, what) in [
        (
            "crypt-classic",
            "dm-crypt (4096 B sectors) + vda, classic tracepoints",
        ),
        ("md-classic", "md0 + md1 + members, classic tracepoints"),
        (
            "stripe-classic",
            "dm-striped + both disks, classic tracepoints",
        ),
        (
            "mpath-classic",
            "dm-multipath + both paths, classic tracepoints",
        ),
    ] {
        checks.push(expect_oracle_agreement(
            &format!("{what}: events vs blk tracer"),
            results,
            &format!("report-{name}.json"),
            &format!("blk-{name}.trace"),
        ));
        let said = results.text(&format!("report-{name}.json.stderr"));
        checks.push(Check::new(
            format!("{what}: the flavor asked for"),
            "stderr says classic tracepoints",
            said.as_deref().unwrap_or("no stderr").trim().to_string(),
            said.is_ok_and(|text| text.contains("classic tracepoints")),
        ));
    }
    checks
}

/// The names stacks.sh wrote for `what` under `keys`, or the one check
/// saying they are missing.
fn stack_names<const N: usize>(
    results: &Results,
    what: &str,
    keys: [&str; N],
) -> Result<[String; N], Vec<Check>> {
    let mut names = Vec::with_capacity(N);
    for key in keys {
        match results.value("names", key) {
            Ok(name) => names.push(name),
            Err(why) => {
                return Err(vec![Check::missing(
                    what.to_string(),
                    format!("names {}", keys.join(", ")),
                    format!("stacks.sh did not name the device: {why}"),
                )])
            }
        }
    }
    Ok(names
        .try_into()
        .unwrap_or_else(|_| unreachable!("one name per key")))
}

/// stacks.sh's dm-striped table: 2 stripes of 64 KiB chunks, 4 writes of 1 MiB.
fn striped_table(results: &Results) -> Vec<Check> {
    let [striped, dev] = match stack_names(results, "dm-striped", ["striped", "striped_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-striped + both disks: events vs blk tracer",
        results,
        "report-stripe.json",
        "blk-stripe.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let (stripe_a, stripe_b) = (disk("stripe_a_disk"), disk("stripe_b_disk"));
    checks.push(top_to_bottom(
        results,
        "report-stripe.json",
        "blk-stripe.trace",
        &striped,
        &[&stripe_a, &stripe_b],
        Below::Exact,
    ));
    checks.push(super::check::expect_no_warning(
        "report: 1 MiB writes on dm-striped, cut per chunk by design (false alarm)",
        &results.json("report-stripe.json"),
        &striped,
    ));
    let what = "dm-striped: 4 user I/Os cut at each 64 KiB chunk, named so; every chain ended";
    let expected =
        "4 user I/Os; split_causes only chunk_boundary = blk X (60); unmatched 0, in flight 0";
    checks.push(
        match (
            results.json("report-stripe.json"),
            results.text("blk-stripe.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let entry = device_entry(&report, &striped);
                let user_ios = entry.and_then(|e| op_measure(e, "write", "user_ios"));
                let causes = entry
                    .and_then(|e| e.pointer("/measures/ops/write/split_causes"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let cuts = device_number(&dev)
                    .map(|dev| super::oracle::lines_with_data(&trace, dev, "X"))
                    .map_or(0, |(with, without)| with + without);
                let chunk = causes.get("chunk_boundary").and_then(Value::as_u64);
                let only = causes.as_object().is_some_and(|c| c.len() == 1);
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!("user I/Os {user_ios:?}; {causes}; blk X {cuts}; {leftovers}"),
                    user_ios == Some(4)
                        && only
                        && chunk == Some(cuts)
                        && cuts == 60
                        && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// stacks.sh's raid1 after its fix: the mirrors' partitions recreated at
/// sector 64, as `misaligned_stack` proposed, and the same 16 writes again.
fn raid1_fixed(results: &Results) -> Vec<Check> {
    let [part, start] = match stack_names(
        results,
        "raid1 fixed",
        ["mirror_part", "mirror_start_fixed"],
    ) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_diagnoses(
        "check: raid1 on partitions recreated at 64 (the fix)",
        &results.json("check-md-fixed.json"),
        "md0",
        &[],
        None,
    )];
    // md writes its superblock and bitmap in small pieces of its own: of
    // the commands after the fix, only those beyond the 16 writes may be off.
    let what =
        "raid1 writes after the fix: same commands on the mirror, the writes on the 4 KiB grid";
    let expected = "partition at 64; commands within 20%; misaligned share > 0.9 before, at most md's own beyond 16 writes after";
    checks.push(
        match (
            results.json("report-md.json"),
            results.json("report-md-fixed.json"),
        ) {
            (Ok(before), Ok(after)) => {
                let (now, then) = (
                    write_commands(&before, &part),
                    write_commands(&after, &part),
                );
                let pass = start == "64"
                    && matches!((now, then), (Some((b, off_b)), Some((a, off_a)))
                        if b > 0 && a.abs_diff(b) * 5 <= b && off_b * 10 > b * 9 && off_a <= a.saturating_sub(16));
                Check::new(
                    what,
                    expected,
                    format!(
                        "{part} at {start}: (commands, misaligned) before {now:?}, after {then:?}"
                    ),
                    pass,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// stacks.sh's raid1 with its own `max_sectors_kb` (32) below what its
/// disks take: md splits each 64 KiB write. The finding names md0's queue
/// and the raise; written as it says, the writes go whole.
fn raid1_capped(results: &Results) -> Vec<Check> {
    let what =
        "md0 capped at 32 KiB: split_amplification by max_sectors on the stack, raise proposed";
    let expected = "cause max_sectors on md0, a warning, proposed_max_sectors_kb >= 64 (its disks take it), 16 splits";
    let capped = results.json("run-md-capped.json");
    let predicted = capped.as_ref().ok().and_then(|report| {
        diagnosis_of(report, "md0", "split_amplification")?
            .pointer("/evidence/what_if/commands_after_fix")?
            .as_u64()
    });
    let splits =
        |report: &Value| device_entry(report, "md0").and_then(|e| op_measure(e, "write", "splits"));
    let mut checks = vec![match &capped {
        Ok(report) => {
            let finding = diagnosis_of(report, "md0", "split_amplification");
            let field = |key: &str| finding.and_then(|f| f.pointer(key)).cloned();
            let proposed = field("/evidence/proposed_max_sectors_kb").and_then(|v| v.as_u64());
            Check::new(
                what,
                expected,
                format!(
                    "cause {:?}, severity {:?}, proposed {proposed:?}, splits {:?}, predicted {predicted:?}",
                    field("/evidence/cause"),
                    field("/severity"),
                    splits(report)
                ),
                field("/evidence/cause") == Some(Value::from("max_sectors"))
                    && field("/severity") == Some(Value::from("warning"))
                    && proposed.is_some_and(|kb| kb >= 64)
                    && splits(report) == Some(16),
            )
        }
        Err(why) => Check::missing(what, expected, why.clone()),
    }];
    let what = "md0 raised as the fix says: no split, commands = what-if";
    let expected = "splits 0; md0 commands within 20% of commands_after_fix";
    checks.push(match results.json("run-md-raised.json") {
        Ok(report) => {
            let commands =
                device_entry(&report, "md0").and_then(|e| op_measure(e, "write", "commands"));
            Check::new(
                what,
                expected,
                format!("splits {:?}, commands {commands:?}, predicted {predicted:?}", splits(&report)),
                splits(&report) == Some(0)
                    && matches!((commands, predicted), (Some(c), Some(p)) if p > 0 && c.abs_diff(p) * 5 <= p),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// stacks.sh's raid5 (3 members, 64 KiB chunks): 16 writes of 64 KiB and
/// 4 of 1 MiB. md writes each stripe's data and parity itself, in 4 KiB
/// bios remapped from md2: no split of the user's write, no false alarm.
fn raid5_array(results: &Results) -> Vec<Check> {
    let [md2_dev] = match stack_names(results, "md raid5", ["md2_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "md2 (raid5) + members: events vs blk tracer",
        results,
        "report-raid5.json",
        "blk-raid5.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let members = [
        disk("mirror_disk"),
        disk("mirror_b_disk"),
        disk("stripe_b_disk"),
    ];
    checks.push(top_to_bottom(
        results,
        "report-raid5.json",
        "blk-raid5.trace",
        "md2",
        &[&members[0], &members[1], &members[2]],
        Below::AtMost { per_user_io: 1 },
    ));
    let what = "md2 (raid5): user I/Os = what was submitted; every chain ended";
    let expected = "20 user I/Os (= blk Q with data on md2); unmatched 0, in flight 0";
    checks.push(
        match (
            results.json("report-raid5.json"),
            results.text("blk-raid5.trace"),
        ) {
            (Ok(report), Ok(trace)) => {
                let queued = device_number(&md2_dev)
                    .map_or(0, |dev| super::oracle::lines_with_data(&trace, dev, "Q").0);
                let user_ios =
                    device_entry(&report, "md2").and_then(|e| op_measure(e, "write", "user_ios"));
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!("user I/Os {user_ios:?} (blk Q {queued}); {leftovers}"),
                    user_ios == Some(20) && queued == 20 && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks.push(super::check::expect_no_warning(
        "report: writes on raid5 md2 (false alarm)",
        &results.json("report-raid5.json"),
        "md2",
    ));
    checks
}

/// What a report's correlation left unended: events in no chain, user I/Os in flight.
struct Leftovers {
    unmatched: Option<u64>,
    in_flight: Option<u64>,
}

impl Leftovers {
    fn of(report: &Value) -> Leftovers {
        let field = |key: &str| {
            report
                .pointer(&format!("/correlation/{key}"))
                .and_then(Value::as_u64)
        };
        Leftovers {
            unmatched: field("unmatched_events"),
            in_flight: field("in_flight"),
        }
    }

    fn none(&self) -> bool {
        self.unmatched == Some(0) && self.in_flight == Some(0)
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unmatched {:?}, in flight {:?}",
            self.unmatched, self.in_flight
        )
    }
}

/// stacks.sh's dm-multipath table: two paths, round-robin, 16 writes of
/// 64 KiB. Request-based: each dm request's clone is remapped
/// (`block_rq_remap`, blk `A`) and issued on a path with no queue there.
fn multipath_table(results: &Results) -> Vec<Check> {
    let [mpath, dev] = match stack_names(results, "dm-multipath", ["mpath", "mpath_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-multipath + both paths: events vs blk tracer",
        results,
        "report-mpath.json",
        "blk-mpath.trace",
    )];
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let paths = [disk("stripe_a_disk"), disk("stripe_b_disk")];
    checks.push(top_to_bottom(
        results,
        "report-mpath.json",
        "blk-mpath.trace",
        &mpath,
        &[&paths[0], &paths[1]],
        Below::Exact,
    ));
    let what = "dm-multipath: 16 user I/Os, one request remap per clone, both paths used";
    let expected = "16 user I/Os = blk Q; rq_remap = blk A on the paths; each path > 0 commands; unmatched 0, in flight 0";
    checks.push(
        match (results.json("report-mpath.json"), results.text("blk-mpath.trace")) {
            (Ok(report), Ok(trace)) => {
                let blk = super::oracle::parse_blk_trace(&trace);
                let queued = device_number(&dev)
                    .map_or(0, |dev| super::oracle::lines_with_data(&trace, dev, "Q").0);
                let user_ios =
                    device_entry(&report, &mpath).and_then(|e| op_measure(e, "write", "user_ios"));
                let per_path: Vec<Option<u64>> = paths
                    .iter()
                    .map(|path| {
                        device_entry(&report, path).and_then(|e| op_measure(e, "write", "commands"))
                    })
                    .collect();
                let rq_remaps = event(&report, "rq_remap");
                let leftovers = Leftovers::of(&report);
                Check::new(
                    what,
                    expected,
                    format!(
                        "user I/Os {user_ios:?} (blk Q {queued}); rq_remap {rq_remaps}, blk A {}; path commands {per_path:?}; {leftovers}",
                        blk.total("A")
                    ),
                    user_ios == Some(16)
                        && queued == 16
                        && rq_remaps == blk.total("A")
                        && rq_remaps >= 16
                        && per_path.iter().all(|c| c.is_some_and(|c| c > 0))
                        && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks.push(super::check::expect_no_warning(
        "report: writes through dm-multipath (false alarm)",
        &results.json("report-mpath.json"),
        &mpath,
    ));
    checks.push(run_through_stack(results, "run-mpath.json", &mpath, 8));
    checks
}

/// stacks.sh's dm-flakey table, down for its whole life: 6 failing writes.
fn flakey_table(results: &Results) -> Vec<Check> {
    let [flakey, dev] = match stack_names(results, "dm-flakey", ["flakey", "flakey_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let mut checks = vec![expect_oracle_agreement(
        "dm-flakey + disk: events vs blk tracer",
        results,
        "report-flakey.json",
        "blk-flakey.trace",
    )];
    let what = "dm-flakey down: failed writes, tool vs blk C status";
    let expected = "blk C with status = tool failed_commands = failed_user_ios = 6; io_errors";
    checks.push(
        match (results.json("report-flakey.json"), results.text("blk-flakey.trace")) {
            (Ok(report), Ok(trace)) => {
                let blk = device_number(&dev)
                    .map_or(0, |dev| super::oracle::failed_completions(&trace, dev));
                let entry = device_entry(&report, &flakey);
                let failed = entry.and_then(|e| op_measure(e, "write", "failed_commands"));
                let failed_ios = entry.and_then(|e| op_measure(e, "write", "failed_user_ios"));
                let named = super::check::diagnoses_on(&report, &flakey)
                    .iter()
                    .any(|f| f.code == "io_errors");
                Check::new(
                    what,
                    expected,
                    format!("blk {blk}, tool {failed:?} commands, {failed_ios:?} user I/Os, io_errors {named}"),
                    blk == 6 && failed == Some(blk) && failed_ios == Some(blk) && named,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    checks
}

/// A stacked device's user I/Os counted through to the disks: its
/// `disk_commands` against the blk tracer's data D lines on `bottoms`, when
/// nothing else wrote there during the window.
/// How a stacked device's disk commands must relate to the blk tracer's D
/// lines on the disks below it.
#[derive(Clone, Copy)]
enum Below {
    /// dm: every command below is the top device's.
    Exact,
    /// md writes its own superblocks: at most D, and at least this many
    /// commands per user I/O (a raid1 write reaches every mirror).
    AtMost { per_user_io: u64 },
}

fn top_to_bottom(
    results: &Results,
    report_name: &str,
    trace_name: &str,
    top: &str,
    bottoms: &[&str],
    below: Below,
) -> Check {
    let (relation, floor) = match below {
        Below::Exact => ("=", 1),
        Below::AtMost { per_user_io } => ("<=", per_user_io),
    };
    let what = format!(
        "{top}: commands on the disks below {relation} blk D on {}",
        bottoms.join(" + ")
    );
    let expected = format!(
        "write disk_commands {relation} blk D with data on the disks, >= {floor} per user I/O"
    );
    match (results.json(report_name), results.text(trace_name)) {
        (Ok(report), Ok(trace)) => {
            let issued: u64 = bottoms
                .iter()
                .filter_map(|bottom| {
                    device_entry(&report, bottom)?
                        .get("dev")?
                        .as_str()
                        .and_then(device_number)
                })
                .map(|dev| super::oracle::lines_with_data(&trace, dev, "D").0)
                .sum();
            let entry = device_entry(&report, top);
            let disk_commands = entry.and_then(|e| op_measure(e, "write", "disk_commands"));
            let user_ios = entry.and_then(|e| op_measure(e, "write", "user_ios"));
            let enough =
                matches!((disk_commands, user_ios), (Some(d), Some(u)) if u > 0 && d >= floor * u);
            Check::new(
                what,
                expected,
                format!("{top}: {user_ios:?} user I/Os -> {disk_commands:?} disk commands; blk D {issued}"),
                issued > 0
                    && enough
                    && disk_commands.is_some_and(|d| match below {
                        Below::Exact => d == issued,
                        Below::AtMost { .. } => d <= issued,
                    }),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
    }
}

/// The `misaligned_stack` evidence on `device` in a report, if any.
fn stack_evidence<'a>(report: &'a Value, device: &str) -> Option<&'a Value> {
    stack_diagnosis(report, device).and_then(|d| d.get("evidence"))
}

/// stacks.sh's md arrays: raid1 md0 on sector-63 partitions, raid0 md1
/// with 64 KiB chunks on aligned ones, a dm table 8 sectors into md1.
fn md_arrays(results: &Results) -> Vec<Check> {
    let names = [
        "mirror_part",
        "mirror_disk",
        "md0_offset",
        "md0_dev",
        "md1_dev",
        "onraid",
    ]
    .map(|key| results.value("names", key));
    let [Ok(mirror_part), Ok(mirror_disk), Ok(md0_offset), Ok(md0_dev), Ok(md1_dev), Ok(onraid)] =
        names
    else {
        return vec![Check::missing(
            "md arrays",
            "names of the arrays",
            format!(
                "stacks.sh did not name them: {}",
                results.text("mdadm.out").unwrap_or_default().trim()
            ),
        )];
    };
    let check = results.json("check-md.json");
    let mut checks = Vec::new();
    let what = "check: raid1 on partitions at sector 63";
    let offset: u64 = md0_offset.parse().unwrap_or(0);
    let expected = format!(
        "misaligned_stack on md0, bottom_start 63 + data offset {offset}, culprit the partition {mirror_part} (recreate at 64)"
    );
    checks.push(match &check {
        Ok(report) => {
            let evidence = stack_evidence(report, "md0");
            let text = |key: &str| evidence.and_then(|e| e.get(key)).and_then(Value::as_str);
            let number = |key: &str| evidence.and_then(|e| e.get(key)).and_then(Value::as_i64);
            let fix = stack_diagnosis(report, "md0")
                .and_then(|d| d.get("fix"))
                .and_then(Value::as_str)
                .unwrap_or("");
            Check::new(
                what,
                &expected,
                format!(
                    "{:?} via {:?} at {:?} -> {:?}, bottom_start {:?}",
                    text("culprit_device"),
                    text("culprit_via"),
                    number("culprit_offset_sectors"),
                    number("proposed_offset_sectors"),
                    number("bottom_start")
                ),
                text("culprit_via") == Some("partition")
                    && text("culprit_device") == Some(mirror_disk.as_str())
                    && number("bottom_start") == Some(63 + offset as i64)
                    && number("proposed_offset_sectors") == Some(64)
                    && fix.contains(&format!("Recreate {mirror_part}")),
            )
        }
        Err(why) => Check::missing(what, &expected, why.clone()),
    });
    checks.push(expect_diagnoses(
        "check: raid0 on aligned partitions (false alarm)",
        &check,
        "md1",
        &[],
        None,
    ));
    let what = "check: a table 8 sectors into the raid0 cuts its 64 KiB chunks";
    let expected =
        "misaligned_stack on the dm device: bottom md1, granularity 65536, 4096 bytes past";
    checks.push(match &check {
        Ok(report) => {
            let evidence = stack_evidence(report, &onraid);
            let field = |key: &str| evidence.and_then(|e| e.get(key)).cloned();
            Check::new(
                what,
                expected,
                format!(
                    "bottom {:?}, granularity {:?}, offset {:?}",
                    field("bottom_device"),
                    field("granularity"),
                    field("offset_bytes")
                ),
                field("bottom_device") == Some(Value::from("md1"))
                    && field("granularity") == Some(Value::from(65536))
                    && field("offset_bytes") == Some(Value::from(4096)),
            )
        }
        Err(why) => Check::missing(what, expected, why.clone()),
    });
    checks.push(expect_oracle_agreement(
        "md0 + md1 + members: events vs blk tracer",
        results,
        "report-md.json",
        "blk-md.trace",
    ));
    let disk = |key: &str| results.value("names", key).unwrap_or_default();
    let (mirror_b, stripe_a, stripe_b) = (
        disk("mirror_b_disk"),
        disk("stripe_a_disk"),
        disk("stripe_b_disk"),
    );
    let mirrors = [mirror_disk.as_str(), mirror_b.as_str()];
    let stripes = [stripe_a.as_str(), stripe_b.as_str()];
    checks.push(top_to_bottom(
        results,
        "report-md.json",
        "blk-md.trace",
        "md0",
        &mirrors,
        Below::AtMost { per_user_io: 2 },
    ));
    checks.push(top_to_bottom(
        results,
        "report-md.json",
        "blk-md.trace",
        "md1",
        &stripes,
        Below::AtMost { per_user_io: 1 },
    ));
    checks.push(super::check::expect_no_warning(
        "report: 1 MiB writes on raid0 md1, cut per chunk by design (false alarm)",
        &results.json("report-md.json"),
        "md1",
    ));
    let what = "md user I/Os = what was submitted; every chain ended";
    let expected = "md0 16 and md1 4 user I/Os (= blk Q with data); unmatched 0, in flight 0";
    checks.push(
        match (results.json("report-md.json"), results.text("blk-md.trace")) {
            (Ok(report), Ok(trace)) => {
                let user_ios = |name: &str| {
                    device_entry(&report, name).and_then(|e| op_measure(e, "write", "user_ios"))
                };
                let queued = |dev: &str| {
                    device_number(dev)
                        .map(|dev| super::oracle::lines_with_data(&trace, dev, "Q").0)
                        .unwrap_or(0)
                };
                let leftovers = Leftovers::of(&report);
                let (md0, md1) = (user_ios("md0"), user_ios("md1"));
                let (q0, q1) = (queued(&md0_dev), queued(&md1_dev));
                Check::new(
                    what,
                    expected,
                    format!("md0 {md0:?} (blk {q0}), md1 {md1:?} (blk {q1}); {leftovers}"),
                    md0 == Some(16) && q0 == 16 && md1 == Some(4) && q1 == 4 && leftovers.none(),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let what = "raid0: 1 MiB writes cut at its 64 KiB chunks, and named so";
    let expected = "md1 split_causes only chunk_boundary, as many as blk X on md1 (60)";
    checks.push(
        match (results.json("report-md.json"), results.text("blk-md.trace")) {
            (Ok(report), Ok(trace)) => {
                let causes = device_entry(&report, "md1")
                    .and_then(|e| e.pointer("/measures/ops/write/split_causes"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let cuts = device_number(&md1_dev)
                    .map(|dev| super::oracle::lines_with_data(&trace, dev, "X"))
                    .map_or(0, |(with, without)| with + without);
                let chunk = causes.get("chunk_boundary").and_then(Value::as_u64);
                let only = causes.as_object().is_some_and(|c| c.len() == 1);
                Check::new(
                    what,
                    expected,
                    format!("{causes}; blk X {cuts}"),
                    only && chunk == Some(cuts) && cuts == 60,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let what = "run -- dd on raid0: chain to commands";
    let expected = "16 writes, 16 bios on md1, commands > 0";
    checks.push(match results.json("run-md1.json") {
        Ok(report) => {
            let target = report
                .pointer("/run/targets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|t| t.get("device").and_then(Value::as_str) == Some("md1"));
            let field = |key: &str| target.and_then(|t| t.get(key)).and_then(Value::as_u64);
            let (writes, bios, commands) =
                (field("write_syscalls"), field("bios"), field("commands"));
            Check::new(
                what,
                expected,
                format!("writes {writes:?}, bios {bios:?}, commands {commands:?}"),
                writes == Some(16) && bios == Some(16) && commands.is_some_and(|c| c > 0),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks
}

/// O_DIRECT writes stacks.sh makes on each dm-crypt device: 4 of 1 MiB, 64 of 4 KiB.
const CRYPT_WRITES: u64 = 4 + 64;

/// stacks.sh's dm-crypt table with `sector_size` bytes per encryption sector.
fn crypt_table(results: &Results, sector_size: u64) -> Vec<Check> {
    let keys = [
        format!("crypt{sector_size}"),
        format!("crypt{sector_size}_dev"),
    ];
    let what = format!("dm-crypt sector_size {sector_size}");
    let [crypt, dev] = match stack_names(results, &what, [&keys[0], &keys[1]]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let dev = device_number(&dev).unwrap_or((0, 0));
    let report_name = format!("report-crypt{sector_size}.json");
    let trace_name = format!("blk-crypt{sector_size}.trace");
    let mut checks = vec![expect_oracle_agreement(
        &format!("dm-crypt ({sector_size} B sectors) + vda: events vs blk tracer"),
        results,
        &report_name,
        &trace_name,
    )];
    let disk = results.value("names", "disk").unwrap_or_default();
    checks.push(top_to_bottom(
        results,
        &report_name,
        &trace_name,
        &crypt,
        &[&disk],
        Below::Exact,
    ));
    let what = format!("dm-crypt ({sector_size} B sectors): user I/Os = what was submitted");
    let expected = format!("tool user_ios = blk Q with data on the crypt device = {CRYPT_WRITES}");
    checks.push(
        match (results.json(&report_name), results.text(&trace_name)) {
            (Ok(report), Ok(trace)) => {
                let (queued, _) = super::oracle::lines_with_data(&trace, dev, "Q");
                let user_ios =
                    device_entry(&report, &crypt).and_then(|e| op_measure(e, "write", "user_ios"));
                Check::new(
                    &what,
                    &expected,
                    format!("tool {user_ios:?}, blk Q {queued}"),
                    user_ios == Some(queued) && queued == CRYPT_WRITES,
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(&what, &expected, why),
        },
    );
    // 6.12's dm-crypt cuts large writes into 128 KiB clones, traced as
    // device-mapper traces a cut: on the bio it trimmed.
    let what =
        format!("dm-crypt ({sector_size} B sectors): every event in a chain, every user I/O ended");
    let expected = "correlation.unmatched_events = 0, in_flight = 0".to_string();
    checks.push(match results.json(&report_name) {
        Ok(report) => {
            let leftovers = Leftovers::of(&report);
            Check::new(&what, &expected, leftovers.to_string(), leftovers.none())
        }
        Err(why) => Check::missing(&what, &expected, why),
    });
    let check = results.json(&format!("check-crypt{sector_size}.json"));
    // 512-byte encryption sectors on a 4 KiB-physical disk are named; 4096 is clean.
    let wanted: &[&str] = if sector_size < 4096 {
        &["crypt_sector_size"]
    } else {
        &[]
    };
    let what = format!("check: dm-crypt ({sector_size} B sectors) stack, aligned");
    let expected = format!(
        "stack dm-crypt with crypt_sector_size {sector_size} onto vda; diagnoses: {}",
        if wanted.is_empty() {
            "none".to_string()
        } else {
            wanted.join(", ")
        }
    );
    checks.push(match &check {
        Ok(report) => {
            let stack = device_entry(report, &crypt).and_then(|e| e.pointer("/geometry/stack"));
            let kind = stack.and_then(|s| s.get("kind")).and_then(Value::as_str);
            let size = stack
                .and_then(|s| s.get("crypt_sector_size"))
                .and_then(Value::as_u64);
            let bottom = stack
                .and_then(|s| s.pointer("/legs/0/bottom/name"))
                .and_then(Value::as_str);
            let found = super::check::diagnoses_on(report, &crypt);
            Check::new(
                &what,
                &expected,
                format!(
                    "{kind:?}, sector size {size:?}, bottom {bottom:?}, diagnoses [{}]",
                    found
                        .iter()
                        .map(|f| f.code.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                kind == Some("dm-crypt")
                    && size == Some(sector_size)
                    && bottom.is_some_and(|b| b.starts_with("vd"))
                    && found.iter().map(|f| f.code.as_str()).collect::<Vec<_>>() == wanted,
            )
        }
        Err(why) => Check::missing(&what, &expected, why.clone()),
    });
    checks.push(super::check::expect_no_warning(
        &format!("report: writes on dm-crypt ({sector_size} B sectors), aligned (false alarm)"),
        &results.json(&format!("report-crypt{sector_size}.json")),
        &crypt,
    ));
    checks.push(run_through_stack(
        results,
        &format!("run-crypt{sector_size}.json"),
        &crypt,
        64,
    ));
    if sector_size == 4096 {
        checks.extend(crypt_cap(results, &crypt));
    }
    checks
}

/// `run -- dd` of `writes` O_DIRECT writes to a stacked `device`: each
/// write one bio there, and commands below.
fn run_through_stack(results: &Results, file: &str, device: &str, writes: u64) -> Check {
    let what = format!("run -- dd on {device}: chain to commands ({file})");
    let expected = format!("{writes} writes, {writes} bios on {device}, commands > 0");
    match results.json(file) {
        Ok(report) => {
            let target = report
                .pointer("/run/targets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|t| t.get("device").and_then(Value::as_str) == Some(device));
            let field = |key: &str| target.and_then(|t| t.get(key)).and_then(Value::as_u64);
            let (seen, bios, commands) =
                (field("write_syscalls"), field("bios"), field("commands"));
            Check::new(
                &what,
                &expected,
                format!("writes {seen:?}, bios {bios:?}, commands {commands:?}"),
                seen == Some(writes) && bios == Some(writes) && commands.is_some_and(|c| c > 0),
            )
        }
        Err(why) => Check::missing(&what, &expected, why),
    }
}

/// stacks.sh's table whose second half is dm-error: 4 failing dd writes.
fn failing_table(results: &Results) -> Vec<Check> {
    let [err, dev] = match stack_names(results, "dm-error", ["error_dm", "error_dev"]) {
        Ok(names) => names,
        Err(missing) => return missing,
    };
    let dev = device_number(&dev).unwrap_or((0, 0));
    let mut checks = vec![expect_oracle_agreement(
        "linear + error table: events vs blk tracer",
        results,
        "report-error.json",
        "blk-error.trace",
    )];
    let what = "failed writes on the dm-error half: tool vs blk C status";
    let expected = "blk C with status = tool failed_commands = failed_user_ios = 4, all EIO";
    let report = results.json("report-error.json");
    checks.push(match (&report, &results.text("blk-error.trace")) {
        (Ok(report), Ok(trace)) => {
            let blk = super::oracle::failed_completions(trace, dev);
            let entry = device_entry(report, &err);
            let failed = entry.and_then(|e| op_measure(e, "write", "failed_commands"));
            let failed_ios = entry.and_then(|e| op_measure(e, "write", "failed_user_ios"));
            let eio = report
                .get("diagnoses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|d| {
                    d.get("code").and_then(Value::as_str) == Some("io_errors")
                        && d.get("device").and_then(Value::as_str) == Some(err.as_str())
                })
                .and_then(|d| d.pointer("/evidence/errors/EIO"))
                .and_then(Value::as_u64);
            Check::new(
                what,
                expected,
                format!("blk {blk}, tool {failed:?} commands, {failed_ios:?} user I/Os, io_errors EIO {eio:?}"),
                blk == 4 && failed == Some(blk) && failed_ios == Some(blk) && eio == Some(blk),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    checks.push(expect_diagnoses(
        "report on the linear + error table",
        &report,
        &err,
        &["io_errors"],
        None,
    ));
    let run = results.json("run-error.json");
    let what = "run -- dd into dm-error: dd fails and the run says io_errors";
    let expected =
        "dd exit status != 0; io_errors on the dm device; the summary says 1 failed (EIO)";
    checks.push(match (&run, &results.text("run-error.rc")) {
        (Ok(report), Ok(rc)) => {
            let found = super::check::diagnoses_on(report, &err);
            let summary = report
                .pointer("/run/targets/0/summary")
                .and_then(Value::as_str)
                .unwrap_or("");
            let named = found.iter().any(|f| f.code == "io_errors")
                && summary.contains("1 of them failed (EIO ×1)");
            Check::new(
                what,
                expected,
                format!(
                    "rc {}, {err}: {}",
                    rc.trim(),
                    found
                        .iter()
                        .map(|f| f.code.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                rc.trim() != "0" && named,
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    checks
}

/// mkfs.ext4's own warning: "/dev/dm-1 alignment is offset by 2560 bytes."
fn mkfs_alignment_warning(output: &str) -> Option<u64> {
    let rest = output.split("alignment is offset by ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// "254:1" as the blk tracer's (major, minor).
fn device_number(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The first `misaligned_stack` diagnosis on `device`.
fn stack_diagnosis<'a>(report: &'a Value, device: &str) -> Option<&'a Value> {
    diagnosis_of(report, device, "misaligned_stack")
}

/// The diagnosis `code` on `device` in a report, if any.
fn diagnosis_of<'a>(report: &'a Value, device: &str, code: &str) -> Option<&'a Value> {
    report.get("diagnoses")?.as_array()?.iter().find(|d| {
        d.get("code").and_then(Value::as_str) == Some(code)
            && d.get("device").and_then(Value::as_str) == Some(device)
    })
}

/// stacks.sh's 1 MiB writes on the 4096-byte dm-crypt table. Since 6.11
/// each is cut at dm-crypt's 128 KiB cap, named `crypt_max_io` with no
/// setting to raise; the scenario sets `max_write_size` to 1 MiB and reloads
/// the table anyway, and the cuts stay (the parameter only lowers the cap).
/// Before 6.11 the cap is the 1 MiB write itself.
fn crypt_cap(results: &Results, crypt: &str) -> Vec<Check> {
    let big = results.json("run-crypt-big.json");
    let raised = results.json("run-crypt-big-fixed.json");
    let splits =
        |report: &Value| device_entry(report, crypt).and_then(|e| op_measure(e, "write", "splits"));
    let what = "dm-crypt 1 MiB writes: cut at its own 128 KiB cap, named crypt_max_io, info";
    let mut checks = Vec::new();
    match (&big, &raised) {
        (Ok(report), Ok(after)) => {
            let finding = diagnosis_of(report, crypt, "split_amplification");
            let field = |key: &str| finding.and_then(|f| f.pointer(key)).cloned();
            checks.push(Check::new(
                what,
                "cause crypt_max_io, cap 131072, severity info, no raise proposed, 56 splits of 8 writes",
                format!(
                    "cause {:?}, cap {:?}, severity {:?}, proposed {:?}, splits {:?}",
                    field("/evidence/cause"),
                    field("/evidence/crypt_max_io_bytes"),
                    field("/severity"),
                    field("/evidence/proposed_max_sectors_kb"),
                    splits(report)
                ),
                field("/evidence/cause") == Some(Value::from("crypt_max_io"))
                    && field("/evidence/crypt_max_io_bytes") == Some(Value::from(131_072))
                    && field("/severity") == Some(Value::from("info"))
                    && field("/evidence/proposed_max_sectors_kb").is_none()
                    && splits(report) == Some(56),
            ));
            checks.push(Check::new(
                "dm-crypt max_write_size set to 1 MiB and the table reloaded: the cap stays (no fix to offer)",
                "56 splits again",
                format!("splits {:?}", splits(after)),
                splits(after) == Some(56),
            ));
        }
        (Ok(report), Err(_)) => checks.push(Check::new(
            what,
            "no max_write_size on this kernel: 1 MiB writes pass whole, no split_amplification",
            format!(
                "splits {:?}, split_amplification {}",
                splits(report),
                diagnosis_of(report, crypt, "split_amplification").is_some()
            ),
            splits(report) == Some(0)
                && diagnosis_of(report, crypt, "split_amplification").is_none(),
        )),
        (Err(why), _) => checks.push(Check::missing(what, "run-crypt-big.json", why.clone())),
    }
    checks
}

/// (commands, misaligned-4k commands) of writes on `device` in a report.
fn write_commands(report: &Value, device: &str) -> Option<(u64, u64)> {
    let entry = device_entry(report, device)?;
    Some((
        op_measure(entry, "write", "commands")?,
        op_measure(entry, "write", "misaligned_4k_commands")?,
    ))
}

/// stacks.sh's second table, 3 sectors into the partition, then reloaded
/// with the offset the finding proposes.
fn misaligned_table(results: &Results) -> Vec<Check> {
    let [offset_dm, aligned_dm] =
        match stack_names(results, "misaligned dm table", ["offset_dm", "dm"]) {
            Ok(names) => names,
            Err(missing) => return missing,
        };
    let part = results.value("names", "part").unwrap_or_default();
    let check = results.json("check.json");
    let mut checks = vec![
        expect_diagnoses(
            "check: dm table 3 sectors into an aligned partition",
            &check,
            &offset_dm,
            &["misaligned_stack"],
            None,
        ),
        expect_diagnoses(
            "check: aligned dm table (false alarm)",
            &check,
            &aligned_dm,
            &[],
            None,
        ),
    ];
    // mkfs.ext4 (libblkid's topology) is the oracle for the offset.
    let what = "misaligned_stack's alignment offset vs mkfs.ext4's warning";
    let expected = "evidence.alignment_offset = mkfs's \"offset by\" = 2560; proposed offset 8";
    checks.push(match (&check, &results.text("mkfs-offset.out")) {
        (Ok(report), Ok(mkfs)) => {
            let mkfs = mkfs.as_str();
            let evidence = stack_diagnosis(report, &offset_dm).and_then(|d| d.get("evidence"));
            let field = |key: &str| evidence.and_then(|e| e.get(key)).and_then(Value::as_i64);
            let warned = mkfs_alignment_warning(mkfs);
            let offset = field("alignment_offset");
            let proposed = field("proposed_offset_sectors");
            Check::new(
                what,
                expected,
                format!("tool {offset:?}, mkfs {warned:?}, proposed {proposed:?}"),
                offset == Some(2560) && warned.map(|w| w as i64) == offset && proposed == Some(8),
            )
        }
        (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why.clone()),
    });
    let run = results.json("run-offset.json");
    checks.push(expect_diagnoses(
        "run -- mkfs.ext4 on the misaligned table",
        &run,
        &offset_dm,
        &["misaligned_stack"],
        None,
    ));
    let fixed = results.json("check-fixed.json");
    checks.push(expect_diagnoses(
        "check after the table is reloaded at offset 8",
        &fixed,
        &offset_dm,
        &[],
        None,
    ));
    checks.push(mkfs_after_the_fix(
        results,
        (
            "run-offset.json",
            "run-offset-fixed.json",
            "mkfs-offset-fixed.out",
        ),
        &part,
    ));
    checks
}

/// mkfs.ext4 run before and after a stack's misalignment is fixed (the
/// run reports and mkfs's output after): no mkfs warning after, the same
/// commands on `part` within 20%, and all of them on the 4 KiB grid.
fn mkfs_after_the_fix(results: &Results, files: (&str, &str, &str), part: &str) -> Check {
    let (before_file, after_file, mkfs_file) = files;
    let what = format!("mkfs.ext4 after the fix ({after_file}): no warning, same commands, none off the 4 KiB grid");
    let expected = "no mkfs warning; commands within 20%; misaligned share > 0.9 before, 0 after";
    match (
        &results.json(before_file),
        &results.json(after_file),
        &results.text(mkfs_file),
    ) {
        (Ok(before), Ok(after), Ok(mkfs)) => {
            let now = write_commands(before, part);
            let then = write_commands(after, part);
            let warned = mkfs_alignment_warning(mkfs);
            let pass = match (now, then) {
                (Some((before, off_before)), Some((after, off_after))) => {
                    warned.is_none()
                        && before > 0
                        && after.abs_diff(before) * 5 <= before
                        && off_before * 10 > before * 9
                        && off_after == 0
                }
                _ => false,
            };
            Check::new(
                &what,
                expected,
                format!(
                    "{part} (commands, misaligned): before {now:?}, after {then:?}; mkfs warning {warned:?}"
                ),
                pass,
            )
        }
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
            Check::missing(&what, expected, why.clone())
        }
    }
}

/// stacks.sh's LVM volume group on a PV whose data area starts 3 sectors
/// past 1 MiB, then recreated with the `pvcreate --dataalignment` the
/// finding gives.
fn lvm_volume(results: &Results) -> Vec<Check> {
    let [lv, pv, fixed_lv] =
        match stack_names(results, "LVM volume", ["lvm_lv", "lvm_pv", "lvm_lv_fixed"]) {
            Ok(names) => names,
            Err(missing) => return missing,
        };
    let check = results.json("check-lvm.json");
    let what = "check: an LV on a PV whose data starts 1536 B off the grid";
    let expected = format!(
        "misaligned_stack on the LV: kind dm-linear, LVM uuid, culprit {pv}, fix pvcreate --dataalignment"
    );
    let mut checks = vec![match &check {
        Ok(report) => {
            let finding = stack_diagnosis(report, &lv);
            let evidence = finding.and_then(|d| d.get("evidence"));
            let text = |value: Option<&Value>, key: &str| {
                value
                    .and_then(|v| v.get(key))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let fix = text(finding, "fix");
            let (kind, culprit) = (
                text(evidence, "stack_kind"),
                text(evidence, "culprit_device"),
            );
            let uuid = report
                .get("devices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|d| d.get("name").and_then(Value::as_str) == Some(lv.as_str()))
                .and_then(|d| d.pointer("/geometry/stack/uuid"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Check::new(
                what,
                &expected,
                format!("kind {kind:?}, uuid {uuid:?}, culprit {culprit:?}; fix: {fix}"),
                kind == "dm-linear"
                    && uuid.starts_with("LVM-")
                    && culprit == pv
                    && fix.contains(&format!("pvcreate --dataalignment 1024k /dev/{pv}")),
            )
        }
        Err(why) => Check::missing(what, &expected, why.clone()),
    }];
    checks.push(expect_diagnoses(
        "run -- mkfs.ext4 on the misaligned LV",
        &results.json("run-lvm.json"),
        &lv,
        &["misaligned_stack"],
        None,
    ));
    checks.push(expect_diagnoses(
        "check after pvcreate --dataalignment as the fix says",
        &results.json("check-lvm-fixed.json"),
        &fixed_lv,
        &[],
        None,
    ));
    checks.push(mkfs_after_the_fix(
        results,
        ("run-lvm.json", "run-lvm-fixed.json", "mkfs-lvm-fixed.out"),
        &pv,
    ));
    checks
}

/// What cgroup-writeback.sh writes: dd's buffered bytes in /a, guest-io's direct ones in /b.
const BUFFERED_BYTES: u64 = 8 * MIB;
const DIRECT_BYTES: u64 = 4 * MIB;

/// `measures.bytes` summed over the entries of one attribution view
/// (`processes`, `cgroups`, `files`) on `device` that `wanted` picks.
fn owner_bytes(report: &Value, view: &str, device: &str, wanted: impl Fn(&Value) -> bool) -> u64 {
    report
        .get("attribution")
        .and_then(|attribution| attribution.get(view))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|entry| entry.get("device").and_then(Value::as_str) == Some(device))
        .filter(|entry| wanted(entry))
        .map(|entry| {
            entry
                .get("measures")
                .and_then(|measures| measures.get("bytes"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        })
        .sum()
}

fn text_field<'a>(entry: &'a Value, key: &str) -> Option<&'a str> {
    entry.get(key).and_then(Value::as_str)
}

fn is_owner(entry: &Value, owner: &str) -> bool {
    text_field(entry, "owner") == Some(owner)
}

fn has_pid(entry: &Value, pid: u64) -> bool {
    entry.get("pid").and_then(Value::as_u64) == Some(pid)
}

fn in_cgroup(entry: &Value, path: &str) -> bool {
    text_field(entry, "cgroup") == Some(path)
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / MIB as f64)
}

/// The guest's ids and pids (`names`), parsed.
struct CgroupRun {
    disk: String,
    a_id: u64,
    b_id: u64,
    writer_pid: u64,
    direct_pid: u64,
    sync_pid: u64,
}

fn cgroup_run(results: &Results) -> Result<CgroupRun, String> {
    let names = results.values("names")?;
    let number = |key: &str| -> Result<u64, String> {
        names
            .get(key)
            .ok_or_else(|| format!("names has no {key}"))?
            .parse()
            .map_err(|_| format!("names: {key} is not a number"))
    };
    for step in ["writer_rc", "direct_rc"] {
        if number(step)? != 0 {
            return Err(format!("guest workload failed: {step}={}", number(step)?));
        }
    }
    Ok(CgroupRun {
        disk: names.get("disk").cloned().ok_or("names has no disk")?,
        a_id: number("a_id")?,
        b_id: number("b_id")?,
        writer_pid: number("writer_pid")?,
        direct_pid: number("direct_pid")?,
        sync_pid: number("sync_pid")?,
    })
}

fn cgroup_writeback(results: &Results, line: &Line) -> Vec<Check> {
    let mut checks = vec![expect_all_probes(
        &format!("report probes on {} (btf: cgroup and file read)", line.name),
        results,
        "report.json",
    )];
    let what = "guest cgroup2 subtree_control";
    let expected = "io and memory enabled";
    checks.push(match results.text("subtree_control") {
        Ok(text) => {
            let enabled: Vec<&str> = text.split_whitespace().collect();
            Check::new(
                what,
                expected,
                text.trim().to_string(),
                enabled.contains(&"io") && enabled.contains(&"memory"),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    // The premise: dd exited with its data dirty and charged to /a, so
    // whatever wrote it later was not dd; sync left nothing dirty.
    let what = "dd exited with its data dirty in /a; sync cleaned it";
    let expected = format!(
        "/a memory.stat file_dirty+file_writeback >= {} before sync, 0 after",
        mib(BUFFERED_BYTES)
    );
    checks.push(
        match (
            results.values("a.before-sync"),
            results.values("a.after-sync"),
        ) {
            (Ok(before), Ok(after)) => {
                let pending = |values: &std::collections::BTreeMap<String, String>| {
                    ["file_dirty", "file_writeback"]
                        .iter()
                        .map(|key| values.get(*key).and_then(|v| v.parse::<u64>().ok()))
                        .sum::<Option<u64>>()
                };
                let (before, after) = (pending(&before), pending(&after));
                Check::new(
                    what,
                    expected,
                    format!(
                        "before {}, after {}",
                        before.map_or("?".into(), mib),
                        after.map_or("?".into(), mib)
                    ),
                    before.is_some_and(|b| b >= BUFFERED_BYTES) && after == Some(0),
                )
            }
            (Err(why), _) | (_, Err(why)) => Check::missing(what, expected, why),
        },
    );
    let (run, report) = match (cgroup_run(results), results.json("report.json")) {
        (Ok(run), Ok(report)) => (run, report),
        (Err(why), _) | (_, Err(why)) => {
            checks.push(Check::missing(
                "cgroup-writeback workload and report",
                "names and report.json",
                why,
            ));
            return checks;
        }
    };
    let disk = run.disk.as_str();
    let a_bytes = owner_bytes(&report, "cgroups", disk, |e| in_cgroup(e, "/a"));
    let b_bytes = owner_bytes(&report, "cgroups", disk, |e| in_cgroup(e, "/b"));
    let a_id_ok = owner_bytes(&report, "cgroups", disk, |e| {
        in_cgroup(e, "/a") && e.get("cgroup_id").and_then(Value::as_u64) == Some(run.a_id)
    }) == a_bytes;
    let b_id_ok = owner_bytes(&report, "cgroups", disk, |e| {
        in_cgroup(e, "/b") && e.get("cgroup_id").and_then(Value::as_u64) == Some(run.b_id)
    }) == b_bytes;
    // /a holds the writeback and nothing of /b's: below the sum of both.
    let what = "cgroup view: kworker writeback charged to /a";
    let expected = format!(
        "/a {} <= bytes < {} (id = /a's inode)",
        mib(BUFFERED_BYTES),
        mib(BUFFERED_BYTES + DIRECT_BYTES)
    );
    checks.push(Check::new(
        what,
        expected,
        format!(
            "/a {}{}",
            mib(a_bytes),
            if a_id_ok { "" } else { ", id mismatch" }
        ),
        a_id_ok && (BUFFERED_BYTES..BUFFERED_BYTES + DIRECT_BYTES).contains(&a_bytes),
    ));
    let what = "cgroup view: O_DIRECT charged to /b";
    let expected = format!("/b exactly {} (id = /b's inode)", mib(DIRECT_BYTES));
    checks.push(Check::new(
        what,
        expected,
        format!(
            "/b {}{}",
            mib(b_bytes),
            if b_id_ok { "" } else { ", id mismatch" }
        ),
        b_id_ok && b_bytes == DIRECT_BYTES,
    ));
    // Process attribution cannot survive writeback: dd issued nothing, a
    // kernel thread (flagged, no pid) issued at least its bytes.
    let writer = owner_bytes(&report, "processes", disk, |e| has_pid(e, run.writer_pid));
    let kernel_threads = owner_bytes(&report, "processes", disk, |e| is_owner(e, "kernel_thread"));
    let flagged_with_pid = report
        .get("attribution")
        .and_then(|a| a.get("processes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|e| {
            is_owner(e, "kernel_thread") && (e.get("pid").is_some() || e.get("comm").is_some())
        });
    let sync = owner_bytes(&report, "processes", disk, |e| has_pid(e, run.sync_pid));
    let what = "process view: writeback under a kernel thread, not dd";
    let expected = format!(
        "dd (pid {}) 0 bytes; kernel_thread entries (no pid) >= {}",
        run.writer_pid,
        mib(BUFFERED_BYTES)
    );
    checks.push(Check::new(
        what,
        expected,
        format!(
            "dd {}, kernel threads {}{}, sync (pid {}) {}",
            mib(writer),
            mib(kernel_threads),
            if flagged_with_pid {
                " (with a pid!)"
            } else {
                ""
            },
            run.sync_pid,
            mib(sync)
        ),
        writer == 0 && kernel_threads >= BUFFERED_BYTES && !flagged_with_pid,
    ));
    let direct = owner_bytes(&report, "processes", disk, |e| {
        has_pid(e, run.direct_pid) && text_field(e, "comm") == Some("guest-io")
    });
    let what = "process view: O_DIRECT writer by pid";
    let expected = format!("guest-io (pid {}) {}", run.direct_pid, mib(DIRECT_BYTES));
    checks.push(Check::new(
        what,
        expected,
        format!("guest-io {}", mib(direct)),
        direct == DIRECT_BYTES,
    ));
    let a_file = owner_bytes(&report, "files", disk, |e| {
        text_field(e, "path") == Some("/mnt/a.dat") && e.get("direct").is_none()
    });
    let b_file = owner_bytes(&report, "files", disk, |e| {
        text_field(e, "path") == Some("/mnt/b.dat")
            && e.get("direct").and_then(Value::as_bool) == Some(true)
    });
    let what = "file view: the written files by path";
    let expected = format!(
        "/mnt/a.dat (page cache) >= {}, /mnt/b.dat (direct) {}",
        mib(BUFFERED_BYTES),
        mib(DIRECT_BYTES)
    );
    checks.push(Check::new(
        what,
        expected,
        format!("a.dat {}, b.dat {}", mib(a_file), mib(b_file)),
        a_file >= BUFFERED_BYTES && b_file == DIRECT_BYTES,
    ));
    // The kernel-side filter on the same window.
    let what = "--cgroup /a keeps the kworker's writeback, drops /b";
    let expected = format!(
        "only /a: >= {} by kernel threads; no /b, no guest-io",
        mib(BUFFERED_BYTES)
    );
    checks.push(match results.json("report-a.json") {
        Ok(filtered) => {
            let a = owner_bytes(&filtered, "cgroups", disk, |e| in_cgroup(e, "/a"));
            let others = owner_bytes(&filtered, "cgroups", disk, |e| !in_cgroup(e, "/a"));
            let threads = owner_bytes(&filtered, "processes", disk, |e| {
                is_owner(e, "kernel_thread")
            });
            let direct = owner_bytes(&filtered, "processes", disk, |e| has_pid(e, run.direct_pid));
            Check::new(
                what,
                expected,
                format!(
                    "/a {}, other cgroups {}, kernel threads {}, guest-io {}",
                    mib(a),
                    mib(others),
                    mib(threads),
                    mib(direct)
                ),
                a >= BUFFERED_BYTES && others == 0 && threads >= BUFFERED_BYTES && direct == 0,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    });
    checks.extend(async_engines(results));
    checks
}

/// fio's io_uring (plain; registered files and buffers) and libaio runs
/// under `run`: its writes and bytes against fio's own totals, each through
/// the path it took, and its commands against the report's for the disk.
fn async_engines(results: &Results) -> Vec<Check> {
    let disk = results.value("names", "async_disk").unwrap_or_default();
    [("uring", "uring_writes"), ("uringfixed", "uring_writes"), ("aio", "aio_writes")]
        .into_iter()
        .map(|(name, path_key)| {
            let what = format!("run -- fio ({name}) on {disk}: writes as fio counts them");
            let expected = format!(
                "write_syscalls and {path_key} = fio's write total_ios, bytes = io_bytes, commands = the device's; io_uring followed"
            );
            let loaded = (|| -> Result<(Value, Value), String> {
                Ok((results.json(&format!("{name}.json"))?, results.json(&format!("{name}.fio.json"))?))
            })();
            let (report, fio) = match loaded {
                Ok(loaded) => loaded,
                Err(why) => return Check::missing(what, expected, why),
            };
            let fio_write = &fio["jobs"][0]["write"];
            let (ios, bytes) = (fio_write["total_ios"].as_u64(), fio_write["io_bytes"].as_u64());
            let run = &report["run"];
            let target = run["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["device"] == disk.as_str());
            let field = |key: &str| target.and_then(|t| t[key].as_u64());
            let device_commands =
                device_entry(&report, &disk).and_then(|entry| op_measure(entry, "write", "commands"));
            let unsupported = run["io_uring"]["unsupported"].as_str();
            let passed = ios.is_some_and(|ios| ios > 0)
                && field("write_syscalls") == ios
                && field(path_key) == ios
                && field("write_syscall_bytes") == bytes
                && device_commands.is_some()
                && field("commands") == device_commands
                && unsupported.is_none();
            let show = |value: Option<u64>| value.map_or("?".to_string(), |v| v.to_string());
            Check::new(
                what,
                expected,
                format!(
                    "fio {} writes of {} B; run {} ({} {path_key}), {} B, {} commands (device {}); io_uring {}",
                    show(ios),
                    show(bytes),
                    show(field("write_syscalls")),
                    show(field(path_key)),
                    show(field("write_syscall_bytes")),
                    show(field("commands")),
                    show(device_commands),
                    unsupported.unwrap_or("followed"),
                ),
                passed,
            )
        })
        .collect()
}

/// How far the predicted run time after a fix may be from the one measured (issue #27).
const TIME_TOLERANCE: f64 = 0.25;
/// Or this far: a 0.1 s run is mostly a process start and exit in the
/// emulated guest, which varies by 20 ms between boots.
const TIME_SLACK_S: f64 = 0.05;

/// One throttled case: a `run` report with the cause in place, one after the fix.
struct TimedCase {
    name: &'static str,
    /// The `names` key of the partition the workload wrote to.
    device: &'static str,
    /// The `names` key of the partition the fixed run wrote to.
    fixed_device: &'static str,
    code: &'static str,
    before: &'static str,
    after: &'static str,
    /// A bandwidth-bound disk: fewer commands must be predicted to save no time.
    bandwidth_bound: bool,
    /// The what-if replays the bios under new limits, so it must say their
    /// segments were observed; moving a partition replays nothing.
    replayed: bool,
}

const TIMED_CASES: [TimedCase; 6] = [
    TimedCase {
        name: "split, 200 IOPS",
        device: "iops",
        fixed_device: "iops",
        code: "split_amplification",
        before: "iops.split.before.json",
        after: "iops.split.after.json",
        bandwidth_bound: false,
        replayed: true,
    },
    // 1 MiB from a huge page: one vector, one command after the fix, where
    // a segment per page would predict two.
    TimedCase {
        name: "split from a huge page, 200 IOPS",
        device: "iops",
        fixed_device: "iops",
        code: "split_amplification",
        before: "iops.huge.before.json",
        after: "iops.huge.after.json",
        bandwidth_bound: false,
        replayed: true,
    },
    TimedCase {
        name: "split, 8 MiB/s",
        device: "bw",
        fixed_device: "bw",
        code: "split_amplification",
        before: "bw.split.before.json",
        after: "bw.split.after.json",
        bandwidth_bound: true,
        replayed: true,
    },
    TimedCase {
        name: "nomerges, 200 IOPS",
        device: "iops",
        fixed_device: "iops",
        code: "merge_blocked",
        before: "iops.nomerges.before.json",
        after: "iops.nomerges.after.json",
        bandwidth_bound: false,
        replayed: true,
    },
    TimedCase {
        name: "nomerges, 8 MiB/s",
        device: "bw",
        fixed_device: "bw",
        code: "merge_blocked",
        before: "bw.nomerges.before.json",
        after: "bw.nomerges.after.json",
        bandwidth_bound: true,
        replayed: true,
    },
    // The fix moves the partition: the same workload on one at sector 2048.
    TimedCase {
        name: "misaligned start, 200 IOPS",
        device: "mis",
        fixed_device: "iops",
        code: "split_amplification",
        before: "mis.misaligned.json",
        after: "iops.misaligned.json",
        bandwidth_bound: false,
        replayed: false,
    },
];

fn number(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}

/// The run's own estimate of its time with the fix, when it is the fix of `code`.
fn predicted_run_s(report: &Value, code: &str) -> Option<f64> {
    let estimate = report.get("run")?.get("time_with_fix")?;
    (estimate.get("code").and_then(Value::as_str) == Some(code))
        .then(|| number(estimate, "run_after_fix_s"))
        .flatten()
}

fn timed_case(results: &Results, case: &TimedCase) -> Vec<Check> {
    let what = format!(
        "throttled {}: {} what-if vs the fix applied",
        case.name, case.code
    );
    let expected = format!(
        "{}commands within {:.0}%, run time within {:.0}% or {:.0} ms{}",
        if case.replayed {
            "segments observed, "
        } else {
            ""
        },
        WHAT_IF_TOLERANCE * 100.0,
        TIME_TOLERANCE * 100.0,
        TIME_SLACK_S * 1000.0,
        if case.bandwidth_bound {
            ", no device time saved predicted"
        } else {
            ""
        }
    );
    let loaded = (|| -> Result<_, String> {
        let device = results.value("names", case.device)?;
        let fixed = results.value("names", case.fixed_device)?;
        Ok((
            device,
            fixed,
            results.json(case.before)?,
            results.json(case.after)?,
        ))
    })();
    let (device, fixed, before, after) = match loaded {
        Ok(loaded) => loaded,
        Err(why) => return vec![Check::missing(what, expected, why)],
    };
    let diagnosis = before
        .get("diagnoses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|d| {
            d.get("code").and_then(Value::as_str) == Some(case.code)
                && d.get("device").and_then(Value::as_str).is_some_and(|name| {
                    let name = name.trim_start_matches("/dev/");
                    name == device || device.starts_with(name)
                })
        });
    let Some(what_if) = diagnosis.and_then(|d| d.get("evidence")?.get("what_if")) else {
        let codes = diagnoses_on(&before, &device);
        return vec![Check::missing(
            what,
            expected,
            format!("no {} what-if on {device}: {}", case.code, describe(&codes)),
        )];
    };
    let predicted = what_if.get("commands_after_fix").and_then(Value::as_u64);
    let measured =
        device_entry(&after, &fixed).and_then(|entry| op_measure(entry, "write", "commands"));
    let predicted_s = predicted_run_s(&before, case.code);
    let measured_s = after.get("run").and_then(|run| number(run, "command_s"));
    let run_s = before.get("run").and_then(|run| number(run, "command_s"));
    let within = |found: f64, wanted: f64, share: f64| {
        wanted > 0.0 && (found - wanted).abs() <= share * wanted
    };
    let commands_ok = matches!((measured, predicted), (Some(m), Some(p)) if within(m as f64, p as f64, WHAT_IF_TOLERANCE));
    let time_ok = matches!((measured_s, predicted_s), (Some(m), Some(p))
        if within(m, p, TIME_TOLERANCE) || (m - p).abs() <= TIME_SLACK_S);
    let (now_ms, after_ms) = (
        number(what_if, "time_now_ms"),
        number(what_if, "time_after_fix_ms"),
    );
    let bound_ok = !case.bandwidth_bound
        || matches!((now_ms, after_ms), (Some(now), Some(after)) if after >= 0.9 * now);
    // The BTF probes read each bio's vectors: the replay uses them.
    let segments = what_if.get("segments").and_then(Value::as_str);
    let segments_ok = !case.replayed || segments == Some("observed");
    let show = |value: Option<f64>| value.map_or("?".to_string(), |v| format!("{v:.2}"));
    let found = format!(
        "segments {}; commands {} -> predicted {} / measured {}; run {} s -> predicted {} s / measured {} s; device {} -> {} ms; model {}; unavailable {}",
        segments.unwrap_or("none"),
        what_if.get("commands_now").and_then(Value::as_u64).unwrap_or(0),
        predicted.map_or("?".into(), |p| p.to_string()),
        measured.map_or("?".into(), |m| m.to_string()),
        show(run_s),
        show(predicted_s),
        show(measured_s),
        show(now_ms),
        show(after_ms),
        what_if.get("service_model").map_or("none".into(), Value::to_string),
        what_if.get("time_unavailable").map_or("null".into(), Value::to_string),
    );
    vec![Check::new(
        what,
        expected,
        found,
        commands_ok && time_ok && bound_ok && segments_ok,
    )]
}

/// What a seed check asserts of layout 1 against layout 3.
#[derive(Clone, Copy, PartialEq)]
enum SeedExpect {
    /// Layout 1 is at least this many times slower, the what-if's commands
    /// and time match layout 3's, and the run says it paid.
    Slower(f64),
    /// The run says it paid little for the finding.
    PaysLittle,
    /// Whatever the device does, the run's verdict holds: paid little and
    /// layout 1 under PAID_RATIO times layout 3's time, or paid and the
    /// what-if's commands and time match layout 3's.
    AsPredicted,
}

/// Below this slowdown a run "paid little" for a finding, as measured.
const PAID_RATIO: f64 = 1.25;

/// The seed's slowdown where it still shows: each workload's run time on
/// layout 1 (the disk `seed`) against layout 3 (`fixed`), and `run` naming
/// the cause on layout 1.
fn seed_slowdown(
    results: &Results,
    (seed_disk, fixed_disk): (&str, &str),
    workload: &str,
    expect: SeedExpect,
) -> Check {
    let what = format!("throttled {seed_disk} {workload}: layout 1 vs layout 3");
    let expected = format!(
        "run names subpage_block_size on layout 1; {}",
        match expect {
            SeedExpect::Slower(at_least) => format!("layout 1 at least {at_least}x layout 3's time; what-if commands within 20% and its run time within 25% of layout 3's; the run paid for it"),
            SeedExpect::PaysLittle => "what-if commands within 20% of layout 3's; the run says it paid little for it".to_string(),
            SeedExpect::AsPredicted => format!("what-if commands within 20% of layout 3's; the run's verdict holds: paid little and under {PAID_RATIO}x layout 3's time, or paid and run time within 25% of layout 3's"),
        }
    );
    let loaded = (|| -> Result<_, String> {
        Ok((
            results.value("names", seed_disk)?,
            results.json(&format!("{seed_disk}.{workload}.json"))?,
            results.json(&format!("{fixed_disk}.{workload}.json"))?,
            results.text(&format!("{seed_disk}.{workload}.compare"))?,
        ))
    })();
    let (device, seed, fixed, compare) = match loaded {
        Ok(loaded) => loaded,
        Err(why) => return Check::missing(what, expected, why),
    };
    let seconds = |report: &Value| report.get("run").and_then(|run| number(run, "command_s"));
    let named = diagnoses_on(&seed, &device)
        .iter()
        .any(|found| found.code == "subpage_block_size");
    let estimate = seed
        .get("run")
        .and_then(|run| run.get("time_with_fix"))
        .map_or("none".into(), Value::to_string);
    let (slow, fast) = (seconds(&seed), seconds(&fixed));
    let ratio = slow.zip(fast).map_or(0.0, |(s, f)| s / f.max(1e-9));
    // The what-if's commands against layout 3's, where the slowdown is asserted.
    let fixed_device = results.value("names", fixed_disk).unwrap_or_default();
    let predicted = seed
        .get("diagnoses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|d| d.get("code").and_then(Value::as_str) == Some("subpage_block_size"))
        .and_then(|d| {
            d.get("evidence")?
                .get("what_if")?
                .get("commands_after_fix")?
                .as_u64()
        });
    let measured = device_entry(&fixed, &fixed_device)
        .and_then(|entry| op_measure(entry, "write", "commands"));
    let commands_ok = matches!((predicted, measured), (Some(p), Some(m)) if p > 0 && (m as f64 - p as f64).abs() <= WHAT_IF_TOLERANCE * p as f64);
    // Severity follows the cost in the run's words: mkfs no longer pays, dd does.
    let pays_little = seed
        .get("run")
        .and_then(|run| run.get("time_with_fix"))
        .and_then(|estimate| estimate.get("pays_little"))
        .and_then(Value::as_bool);
    let predicted_s = predicted_run_s(&seed, "subpage_block_size");
    let time_ok = matches!((predicted_s, fast), (Some(p), Some(m))
            if (m - p).abs() <= (TIME_TOLERANCE * p).max(TIME_SLACK_S));
    let paid = || commands_ok && time_ok && pays_little == Some(false);
    let verdict_ok = match expect {
        SeedExpect::Slower(at_least) => ratio >= at_least && paid(),
        SeedExpect::PaysLittle => commands_ok && pays_little == Some(true),
        SeedExpect::AsPredicted => match pays_little {
            Some(true) => commands_ok && ratio < PAID_RATIO,
            Some(false) => paid(),
            None => false,
        },
    };
    Check::new(
        what,
        expected,
        format!(
            "{:.2} s vs {:.2} s ({:.2}x); commands after the fix predicted {} / measured {}; time after the fix predicted {} s; time_with_fix {estimate}; compare {} lines",
            slow.unwrap_or(0.0),
            fast.unwrap_or(0.0),
            ratio,
            predicted.map_or("?".into(), |p| p.to_string()),
            measured.map_or("?".into(), |m| m.to_string()),
            predicted_s.map_or("?".into(), |p| format!("{p:.2}")),
            compare.lines().count()
        ),
        named && verdict_ok && compare.contains("commands"),
    )
}

fn throttled(results: &Results, _line: &Line) -> Vec<Check> {
    let mut checks: Vec<Check> = TIMED_CASES
        .iter()
        .flat_map(|case| timed_case(results, case))
        .collect();
    checks.push(seed_slowdown(
        results,
        ("seed", "seedfix"),
        "mkfs",
        SeedExpect::PaysLittle,
    ));
    checks.push(seed_slowdown(
        results,
        ("seed", "seedfix"),
        "dd",
        SeedExpect::Slower(2.0),
    ));
    // NVMe merges: whether its 4 KiB virt boundary keeps the sub-page bios
    // apart is the kernel's to decide, and the run must say which it was.
    for workload in ["mkfs", "dd"] {
        checks.push(seed_slowdown(
            results,
            ("nvseed", "nvfix"),
            workload,
            SeedExpect::AsPredicted,
        ));
    }
    checks.push(seed_text(results));
    checks
}

/// The README's example: `run -- mkfs.ext4` on the seed's layout 1, as text,
/// says what mkfs took and what it would take with the fix.
fn seed_text(results: &Results) -> Check {
    let what = "throttled seed mkfs: run's text".to_string();
    let expected =
        "names subpage_block_size, the time mkfs took and its time with the fix".to_string();
    match results.text("seed.mkfs.txt") {
        Ok(text) => {
            let timed = text.lines().find(|line| line.contains("mkfs.ext4 took"));
            let ok = text.contains("subpage_block_size")
                && timed.is_some_and(|line| line.contains("with the fix"));
            Check::new(
                what,
                expected,
                timed
                    .unwrap_or("no \"mkfs.ext4 took\" line")
                    .trim()
                    .to_string(),
                ok,
            )
        }
        Err(why) => Check::missing(what, expected, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_layout_is_the_one_the_fix_names() {
        assert_eq!(fixed_layout(SEED_LAYOUTS[0]), (2048, 399_736));
    }

    #[test]
    fn seed_layouts_keep_the_seeds_residues_modulo_8() {
        let seed = [
            (14_281_785u64, 27_647_865u64),
            (14_282_752, 27_646_898),
            (14_282_752, 27_660_288),
        ];
        for ((start, size), (seed_start, seed_size)) in SEED_LAYOUTS.iter().zip(seed) {
            assert_eq!(start % 8, seed_start % 8);
            assert_eq!(size % 8, seed_size % 8);
            assert!(start + size <= 256 * MIB / 512);
        }
        // Layout 3 ends on the disk's last sector, like the seed's.
        assert_eq!(SEED_LAYOUTS[2].0 + SEED_LAYOUTS[2].1, 256 * MIB / 512);
    }

    #[test]
    fn issue_layouts_are_read_from_the_format_file() {
        let v61 = "\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;\n\
                   \tfield:char rwbs[8];\toffset:32;\tsize:8;\tsigned:0;\n";
        assert_eq!(issue_layout(v61), "no ioprio, rwbs[8] at 32");
        let v618 = "\tfield:unsigned short ioprio;\toffset:32;\tsize:2;\tsigned:0;\n\
                    \tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:0;\n";
        assert_eq!(issue_layout(v618), "ioprio at 32, rwbs[10] at 34");
        assert_eq!(issue_layout(""), "no ioprio, no rwbs");
    }

    /// A guest results directory for cgroup-writeback; `collapsed` has the
    /// writeback issued by dd and charged to the root, as on cgroup v1.
    fn cgroup_writeback_results(dir: &std::path::Path, collapsed: bool) {
        let entry = |fields: Value, bytes: u64| {
            let mut entry = fields;
            entry["device"] = "vda".into();
            entry["measures"] = serde_json::json!({ "bytes": bytes });
            entry
        };
        let (writeback_process, writeback_cgroup) = if collapsed {
            (
                serde_json::json!({"owner": "known", "pid": 218, "comm": "dd"}),
                serde_json::json!({"owner": "known", "cgroup": "/", "cgroup_id": 1}),
            )
        } else {
            (
                serde_json::json!({"owner": "kernel_thread"}),
                serde_json::json!({"owner": "known", "cgroup": "/a", "cgroup_id": 23}),
            )
        };
        let report = serde_json::json!({
            "unsupported_probes": [],
            "attribution": {
                "processes": [
                    entry(writeback_process, BUFFERED_BYTES),
                    entry(serde_json::json!({"owner": "known", "pid": 217, "comm": "guest-io"}), DIRECT_BYTES),
                ],
                "cgroups": [
                    entry(writeback_cgroup, BUFFERED_BYTES),
                    entry(serde_json::json!({"owner": "known", "cgroup": "/b", "cgroup_id": 61}), DIRECT_BYTES),
                ],
                "files": [
                    entry(serde_json::json!({"owner": "known", "path": "/mnt/a.dat"}), BUFFERED_BYTES),
                    entry(serde_json::json!({"owner": "known", "path": "/mnt/b.dat", "direct": true}), DIRECT_BYTES),
                ],
            }
        });
        let mut filtered = report.clone();
        filtered["attribution"]["processes"] =
            serde_json::json!([report["attribution"]["processes"][0]]);
        filtered["attribution"]["cgroups"] =
            serde_json::json!([report["attribution"]["cgroups"][0]]);
        std::fs::create_dir_all(dir).unwrap();
        let files = [
            ("names", "disk=vda\na_id=23\nb_id=61\nwriter_pid=218\nwriter_rc=0\ndirect_pid=217\ndirect_rc=0\nsync_pid=224\n".to_string()),
            ("subtree_control", "io memory\n".to_string()),
            ("a.before-sync", format!("file_dirty={BUFFERED_BYTES}\nfile_writeback=0\n")),
            ("a.after-sync", "file_dirty=0\nfile_writeback=0\n".to_string()),
            ("report.json", report.to_string()),
            ("report-a.json", filtered.to_string()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    #[test]
    fn cgroup_writeback_passes_only_when_the_cgroup_survives_writeback() {
        let root = std::env::temp_dir().join(format!("iosplit-cgwb-{}", std::process::id()));
        let line = &crate::vm::kernel::LINES[0];
        cgroup_writeback_results(&root.join("good"), false);
        cgroup_writeback_results(&root.join("collapsed"), true);
        let good = cgroup_writeback(
            &Results {
                dir: &root.join("good"),
            },
            line,
        );
        let collapsed = cgroup_writeback(
            &Results {
                dir: &root.join("collapsed"),
            },
            line,
        );
        std::fs::remove_dir_all(&root).unwrap();
        // fio's checks are async_engines_are_held_to_fios_totals's.
        let cgroup_only = |checks: Vec<Check>| -> Vec<Check> {
            checks
                .into_iter()
                .filter(|check| !check.what.starts_with("run -- fio"))
                .collect()
        };
        let (good, collapsed) = (cgroup_only(good), cgroup_only(collapsed));
        assert!(good.iter().all(|check| check.pass), "{good:?}");
        let failed: Vec<&str> = collapsed
            .iter()
            .filter(|check| !check.pass)
            .map(|check| check.what.as_str())
            .collect();
        assert_eq!(
            failed,
            [
                "cgroup view: kworker writeback charged to /a",
                "process view: writeback under a kernel thread, not dd",
                "--cgroup /a keeps the kworker's writeback, drops /b",
            ]
        );
    }

    #[test]
    fn async_engines_are_held_to_fios_totals() {
        let root = std::env::temp_dir().join(format!("iosplit-async-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("names"), "async_disk=vdb\n").unwrap();
        let report = |writes: u64, path_key: &str, unsupported: Option<&str>| {
            let mut target = serde_json::json!({
                "device": "vdb",
                "write_syscalls": writes,
                "write_syscall_bytes": writes * 65536,
                "commands": 256,
                "aio_writes": 0,
                "uring_writes": 0,
            });
            target[path_key] = writes.into();
            serde_json::json!({
                "devices": [{"name": "vdb", "measures": {"ops": {"write": {"commands": 256}}}}],
                "run": {"targets": [target], "io_uring": {"unsupported": unsupported}},
            })
        };
        let fio =
            serde_json::json!({"jobs": [{"write": {"total_ios": 256, "io_bytes": 16777216}}]});
        let write = |name: &str, value: &Value| {
            std::fs::write(root.join(name), value.to_string()).unwrap();
        };
        for name in ["uring", "uringfixed", "aio"] {
            write(&format!("{name}.fio.json"), &fio);
        }
        write("uring.json", &report(256, "uring_writes", None));
        // Registered files missed: fewer writes than fio made.
        write("uringfixed.json", &report(0, "uring_writes", None));
        write("aio.json", &report(256, "aio_writes", None));
        let checks = async_engines(&Results { dir: &root });
        let passed: Vec<bool> = checks.iter().map(|check| check.pass).collect();
        assert_eq!(passed, [true, false, true], "{checks:?}");
        // Said unsupported: never a pass, even with the right counts.
        write(
            "uring.json",
            &report(256, "uring_writes", Some("no tracepoint")),
        );
        assert!(!async_engines(&Results { dir: &root })[0].pass);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn scenario_names_are_unique_and_have_scripts() {
        let scenarios = all();
        let mut names: Vec<_> = scenarios.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), scenarios.len());
        let dir = crate::util::workspace_root().join("xtask/vm/scenarios");
        for name in names {
            assert!(
                dir.join(format!("{name}.sh")).is_file(),
                "{name}.sh missing"
            );
        }
    }
}
