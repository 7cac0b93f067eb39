//! Attribution on real loop disks (root): cgroups (v1 blkio, as this
//! machine mounts it), processes for direct and buffered writers, and a
//! file written with O_DIRECT on ext4 found by path. Run under
//! `flock /tmp/iosplit-root.lock`; every guard undoes what it did, also on panic.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use common::{privileged, LoopDisk, Mounted, PartitionSpec, Tracer};
use serde_json::Value;

/// The tests share kernel state (tracer, loop devices): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BLKIO: &str = "/sys/fs/cgroup/blkio";

/// A cgroup v1 blkio group, removed on drop (its writers have exited by then).
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        let path = Path::new(BLKIO).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&path).unwrap_or_else(|err| panic!("mkdir {path:?}: {err}"));
        Cgroup { path }
    }

    /// As `/proc/PID/cgroup` and the report spell it.
    fn name(&self) -> String {
        format!("/{}", self.path.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Anything still inside goes back to the root first.
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(Path::new(BLKIO).join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// An ext4 filesystem mounted on a fresh directory, unmounted on drop.
/// Runs `dd ARGS` inside `cgroup` (if any); returns dd's pid.
fn dd_in(cgroup: Option<&Cgroup>, args: &[&str]) -> u32 {
    let join = match cgroup {
        Some(cgroup) => format!("echo $$ > {}/cgroup.procs && ", cgroup.path.display()),
        None => String::new(),
    };
    let script = format!("{join}exec dd {} status=none", args.join(" "));
    let child = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "dd {args:?} failed");
    pid
}

fn parse(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|err| panic!("not JSON ({err}): {out}"))
}

fn entries<'a>(report: &'a Value, view: &str) -> &'a Vec<Value> {
    report["attribution"][view]
        .as_array()
        .unwrap_or_else(|| panic!("no attribution.{view}: {report}"))
}

fn number(entry: &Value, key: &str) -> u64 {
    entry["measures"][key].as_u64().unwrap()
}

fn two_partitions(tag: &str) -> LoopDisk {
    LoopDisk::new(
        tag,
        64,
        &[
            PartitionSpec {
                start: 2048,
                size: 40960,
            },
            PartitionSpec {
                start: 43008,
                size: 40960,
            },
        ],
    )
}

#[test]
fn each_cgroups_commands_land_on_its_own_partition() {
    if !privileged("each_cgroups_commands_land_on_its_own_partition") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let disk = two_partitions("attr-cg");
    let (a, b) = (Cgroup::new("iosplit-attr-a"), Cgroup::new("iosplit-attr-b"));
    let tracer = Tracer::start(&["-d", &disk.name, "--owners", "report", "--json"]);
    let p1 = disk.partition(1);
    let p2 = disk.partition(2);
    dd_in(
        Some(&a),
        &[
            "if=/dev/zero",
            &format!("of={p1}"),
            "bs=64k",
            "count=64",
            "oflag=direct",
        ],
    );
    dd_in(
        Some(&b),
        &[
            "if=/dev/zero",
            &format!("of={p2}"),
            "bs=64k",
            "count=32",
            "oflag=direct",
        ],
    );
    let report = parse(&tracer.stop());
    let cgroups = entries(&report, "cgroups");
    let on = |cgroup: &Cgroup| -> Vec<&Value> {
        cgroups
            .iter()
            .filter(|entry| entry["cgroup"].as_str() == Some(&cgroup.name()))
            .collect()
    };
    for (cgroup, partition, writes) in [(&a, &p1, 64), (&b, &p2, 32)] {
        let found = on(cgroup);
        let device = partition.trim_start_matches("/dev/");
        assert_eq!(
            found.len(),
            1,
            "{} on one device only: {cgroups:#?}",
            cgroup.name()
        );
        assert_eq!(found[0]["device"], device, "{cgroups:#?}");
        assert!(number(found[0], "user_ios") >= writes, "{:#?}", found[0]);
        assert!(number(found[0], "commands") >= writes, "{:#?}", found[0]);
        assert_eq!(number(found[0], "bytes"), writes * 65536, "{:#?}", found[0]);
        assert!(found[0]["cgroup_id"].as_u64().unwrap() > 1);
    }
}

#[test]
fn direct_and_buffered_writers_are_named_by_pid_and_comm() {
    if !privileged("direct_and_buffered_writers_are_named_by_pid_and_comm") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let disk = two_partitions("attr-proc");
    let tracer = Tracer::start(&["-d", &disk.name, "report", "--json", "--by", "process"]);
    let p1 = disk.partition(1);
    let p2 = disk.partition(2);
    let direct = dd_in(
        None,
        &[
            "if=/dev/zero",
            &format!("of={p1}"),
            "bs=64k",
            "count=16",
            "oflag=direct",
        ],
    );
    // fsync writes the dirty pages back from the writer's own context.
    let buffered = dd_in(
        None,
        &[
            "if=/dev/zero",
            &format!("of={p2}"),
            "bs=4k",
            "count=256",
            "conv=fsync",
        ],
    );
    let report = parse(&tracer.stop());
    let processes = entries(&report, "processes");
    let find = |pid: u32| -> Vec<&Value> {
        processes
            .iter()
            .filter(|entry| entry["pid"].as_u64() == Some(u64::from(pid)))
            .collect()
    };
    let direct_entries = find(direct);
    assert_eq!(direct_entries.len(), 1, "{processes:#?}");
    assert_eq!(direct_entries[0]["comm"], "dd");
    assert_eq!(direct_entries[0]["owner"], "known");
    assert_eq!(direct_entries[0]["device"], p1.trim_start_matches("/dev/"));
    assert_eq!(number(direct_entries[0], "bytes"), 16 * 65536);
    // fsync's cache flush is a zero-length bio on the whole disk: its own entry.
    let buffered_entries: Vec<&Value> = find(buffered)
        .into_iter()
        .filter(|entry| entry["device"] == p2.trim_start_matches("/dev/"))
        .collect();
    assert_eq!(buffered_entries.len(), 1, "{processes:#?}");
    assert_eq!(buffered_entries[0]["comm"], "dd");
    // Whatever background writeback took first is a kernel thread's, never dd's.
    let on_p2: u64 = processes
        .iter()
        .filter(|entry| entry["device"] == p2.trim_start_matches("/dev/"))
        .map(|entry| number(entry, "bytes"))
        .sum();
    assert!(number(buffered_entries[0], "bytes") > 0);
    assert!(on_p2 >= 256 * 4096, "{processes:#?}");
    // Neither writer shows on the other's partition.
    assert!(find(direct)
        .iter()
        .all(|e| e["device"] != p2.trim_start_matches("/dev/")));
}

#[test]
fn an_o_direct_file_on_ext4_is_found_by_path() {
    if !privileged("an_o_direct_file_on_ext4_is_found_by_path") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let disk = two_partitions("attr-file");
    let p1 = disk.partition(1);
    let mounted = Mounted::ext4(&p1);
    let file = mounted.point.join("direct.bin");
    let tracer = Tracer::start(&["-d", &disk.name, "--owners", "report", "--json"]);
    dd_in(
        None,
        &[
            "if=/dev/zero",
            &format!("of={}", file.display()),
            "bs=64k",
            "count=32",
            "oflag=direct",
        ],
    );
    let report = parse(&tracer.stop());
    let files = entries(&report, "files");
    let found: Vec<&Value> = files
        .iter()
        .filter(|entry| entry["path"].as_str() == Some(file.to_str().unwrap()))
        .collect();
    assert_eq!(found.len(), 1, "{files:#?}");
    assert_eq!(found[0]["direct"], true);
    assert_eq!(found[0]["device"], p1.trim_start_matches("/dev/"));
    assert_eq!(number(found[0], "bytes"), 32 * 65536);
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&file).unwrap());
    assert_eq!(found[0]["inode"].as_u64(), Some(ino));
}

/// The measures of partition `name` in the report's devices.
fn partition_ops<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|disk| disk["partitions"].as_array().unwrap())
        .find(|part| part["name"] == name)
        .map(|part| &part["measures"]["ops"])
        .unwrap_or_else(|| panic!("no partition {name}: {report}"))
}

#[test]
fn filtered_out_owners_appear_nowhere() {
    if !privileged("filtered_out_owners_appear_nowhere") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let disk = two_partitions("attr-filter");
    let (p1, p2) = (disk.partition(1), disk.partition(2));
    let (name1, name2) = (
        p1.trim_start_matches("/dev/").to_string(),
        p2.trim_start_matches("/dev/").to_string(),
    );
    let (a, b) = (
        Cgroup::new("iosplit-attr-fa"),
        Cgroup::new("iosplit-attr-fb"),
    );
    let write = |cgroup: &Cgroup, partition: &str| {
        dd_in(
            Some(cgroup),
            &[
                "if=/dev/zero",
                &format!("of={partition}"),
                "bs=64k",
                "count=16",
                "oflag=direct",
            ],
        )
    };

    // By cgroup: only A's writes to p1 are seen.
    let tracer = Tracer::start(&["-d", &disk.name, "--cgroup", &a.name(), "report", "--json"]);
    write(&a, &p1);
    write(&b, &p2);
    let report = parse(&tracer.stop());
    assert!(
        partition_ops(&report, &name1)["write"]["user_ios"]
            .as_u64()
            .unwrap()
            >= 16
    );
    assert_eq!(
        partition_ops(&report, &name2),
        &Value::Object(Default::default()),
        "{report}"
    );
    assert!(entries(&report, "cgroups")
        .iter()
        .all(|e| e["cgroup"] != b.name()));
    assert!(entries(&report, "processes")
        .iter()
        .all(|e| e["device"] != name2));

    // By name: a copy of dd under another name is traced, dd itself is not.
    let renamed = std::env::temp_dir().join(format!("iosplit-ddx-{}", std::process::id() % 1000));
    let _copy = common::ScratchFile(renamed.clone());
    std::fs::copy("/bin/dd", &renamed).unwrap();
    let comm = renamed.file_name().unwrap().to_str().unwrap().to_string();
    let tracer = Tracer::start(&["-d", &disk.name, "--comm", &comm, "report", "--json"]);
    let status = Command::new(&renamed)
        .args([
            "if=/dev/zero",
            &format!("of={p2}"),
            "bs=64k",
            "count=8",
            "oflag=direct",
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    write(&a, &p1);
    let report = parse(&tracer.stop());
    assert_eq!(
        partition_ops(&report, &name1),
        &Value::Object(Default::default()),
        "{report}"
    );
    assert_eq!(
        partition_ops(&report, &name2)["write"]["user_ios"].as_u64(),
        Some(8),
        "{report}"
    );
    let processes = entries(&report, "processes");
    assert!(
        processes.iter().all(|e| e["comm"] == comm.as_str()),
        "{processes:#?}"
    );
}

#[test]
fn bad_owner_filters_are_one_line_and_status_2() {
    let run = |args: &[&str]| {
        let out = Command::new(common::binary()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let stderr = run(&[
        "report",
        "--cgroup",
        "/no-such-cgroup-iosplit",
        "--duration",
        "1",
    ]);
    assert!(stderr.contains("no such cgroup"), "{stderr}");
    let stderr = run(&["report", "--comm", "", "--duration", "1"]);
    assert!(stderr.contains("--comm needs a task name"), "{stderr}");
    // run traces its own command: clap refuses the filters (its usage error
    // is several lines, with the usage), before or after the subcommand;
    // run's own --pid (a process to follow) goes with no command.
    for args in [
        &["run", "-p", "1", "--", "true"][..],
        &["-p", "1", "run", "--", "true"],
        &["run", "--cgroup", "/", "--", "true"],
    ] {
        let out = Command::new(common::binary()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("-p") || stderr.contains("--cgroup"),
            "{stderr}"
        );
        assert!(stderr.contains("Usage: iosplit-trace run"), "{stderr}");
    }
}

/// Owners are read by default: a plain report attributes the writes to
/// dd, and `--no-owners` leaves the attribution section out.
#[test]
fn owners_are_read_unless_turned_off() {
    if !privileged("owners_are_read_unless_turned_off") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let disk = two_partitions("attr-optin");
    let p1 = disk.partition(1);
    let write = || {
        dd_in(
            None,
            &[
                "if=/dev/zero",
                &format!("of={p1}"),
                "bs=64k",
                "count=8",
                "oflag=direct",
            ],
        )
    };
    let off = Tracer::start(&["-d", &disk.name, "report", "--json", "--no-owners"]);
    write();
    let off = parse(&off.stop());
    assert!(off.get("attribution").is_none(), "{off}");
    let user_ios = &partition_ops(&off, p1.trim_start_matches("/dev/"))["write"]["user_ios"];
    assert!(user_ios.as_u64().unwrap() >= 8, "{off}");
    let plain = Tracer::start(&["-d", &disk.name, "report", "--json"]);
    write();
    let plain = parse(&plain.stop());
    let dd_bytes: u64 = entries(&plain, "processes")
        .iter()
        .filter(|entry| entry["comm"] == "dd")
        .map(|entry| number(entry, "bytes"))
        .sum();
    assert_eq!(dd_bytes, 8 * 65536, "{}", plain["attribution"]);
}

/// Nested cgroups, made where the kubelet and the runtimes make them, and
/// removed innermost first (their writers have exited by then).
struct NestedCgroup {
    dirs: Vec<PathBuf>,
}

impl NestedCgroup {
    fn new(relative: &str) -> NestedCgroup {
        let mut dirs = Vec::new();
        let mut path = PathBuf::from(BLKIO);
        for component in relative.split('/').filter(|c| !c.is_empty()) {
            path.push(component);
            if !path.exists() {
                std::fs::create_dir(&path).unwrap_or_else(|err| panic!("mkdir {path:?}: {err}"));
                dirs.push(path.clone());
            }
        }
        assert!(!dirs.is_empty(), "{relative} exists already");
        NestedCgroup { dirs }
    }

    fn inner(&self) -> Cgroup {
        Cgroup {
            path: self.dirs.last().unwrap().clone(),
        }
    }
}

impl Drop for NestedCgroup {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev() {
            if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in procs.lines() {
                    let _ = std::fs::write(Path::new(BLKIO).join("cgroup.procs"), pid);
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Writers in cgroups laid out as the kubelet lays them out (systemd driver
/// with containerd, cgroupfs driver with a bare id) are named by pod UID,
/// QoS class and container id.
#[test]
fn kubernetes_cgroups_name_their_pod_qos_and_container() {
    if !privileged("kubernetes_cgroups_name_their_pod_qos_and_container") {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tag = format!("{:012x}", std::process::id());
    let (uid_a, uid_b) = (
        format!("0d4a7e5c-3b1f-4c2a-9e8d-{tag}"),
        format!("7c0b2d9e-1a2b-4c3d-8e9f-{tag}"),
    );
    let (id_a, id_b) = (format!("{:a>52}{tag}", ""), format!("{:b>52}{tag}", ""));
    let systemd = NestedCgroup::new(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id_a}.scope",
        uid_a.replace('-', "_")
    ));
    let cgroupfs = NestedCgroup::new(&format!("kubepods/besteffort/pod{uid_b}/{id_b}"));
    let disk = two_partitions("attr-k8s");
    let tracer = Tracer::start(&["-d", &disk.name, "report", "--by", "cgroup", "--json"]);
    // Kept until the report is made: names are resolved then.
    let writers = [(systemd.inner(), 1), (cgroupfs.inner(), 2)];
    for (cgroup, partition) in &writers {
        dd_in(
            Some(cgroup),
            &[
                "if=/dev/zero",
                &format!("of={}", disk.partition(*partition)),
                "bs=64k",
                "count=16",
                "oflag=direct",
            ],
        );
    }
    let report = parse(&tracer.stop());
    let cgroups = entries(&report, "cgroups");
    let of = |uid: &str| -> &Value {
        cgroups
            .iter()
            .find(|entry| entry["pod_uid"] == uid)
            .unwrap_or_else(|| panic!("no entry for pod {uid}: {cgroups:#?}"))
    };
    for (uid, qos, id, partition) in [
        (&uid_a, "burstable", &id_a, 1),
        (&uid_b, "besteffort", &id_b, 2),
    ] {
        let entry = of(uid);
        assert_eq!(entry["qos"], qos, "{entry:#}");
        assert_eq!(entry["container_id"], id.as_str(), "{entry:#}");
        assert_eq!(
            entry["device"],
            format!("{}p{partition}", disk.name),
            "{entry:#}"
        );
        assert_eq!(number(entry, "bytes"), 16 * 65536, "{entry:#}");
    }
}
