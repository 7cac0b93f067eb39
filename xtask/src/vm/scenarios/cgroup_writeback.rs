//! `cgroup-writeback.sh`: cgroup v2 attribution through writeback (dd's
//! buffered writes in /a, flushed by a kworker; O_DIRECT in /b), then `run`
//! under fio's io_uring and libaio engines against fio's own totals.

use std::time::Duration;

use serde::Deserialize;

use super::{expect_all_probes, Scenario, MIB};
use crate::vm::check::{Check, Results};
use crate::vm::kernel::Line;
use crate::vm::qemu::{Bus, Disk, Throttle};
use crate::vm::report::{Attribution, Entry, Findings, Owner, OwnerEntry, Report, RunTarget};

pub fn scenario() -> Scenario {
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
        evaluate,
        extra_tools: &["fio"],
        fixed_disks: Vec::new(),
    }
}

/// The part of fio's `--output-format=json` the checks read: its first
/// job's write totals.
#[derive(Debug, Deserialize)]
struct Fio {
    jobs: Vec<FioJob>,
}

#[derive(Debug, Deserialize)]
struct FioJob {
    write: FioTotals,
}

#[derive(Debug, Deserialize)]
struct FioTotals {
    total_ios: u64,
    io_bytes: u64,
}

/// What cgroup-writeback.sh writes: dd's buffered bytes in /a, guest-io's direct ones in /b.
const BUFFERED_BYTES: u64 = 8 * MIB;
const DIRECT_BYTES: u64 = 4 * MIB;

/// A report's attribution views; none (`--no-owners`) reads as empty ones.
fn attribution(report: &Report) -> &Attribution {
    static NONE: Attribution = Attribution {
        processes: Vec::new(),
        cgroups: Vec::new(),
        files: Vec::new(),
    };
    report.attribution.as_ref().unwrap_or(&NONE)
}

/// `measures.bytes` summed over the entries of one attribution view on
/// `device` that `wanted` picks.
fn owner_bytes(view: &[OwnerEntry], device: &str, wanted: impl Fn(&OwnerEntry) -> bool) -> u64 {
    view.iter()
        .filter(|entry| entry.device == device)
        .filter(|entry| wanted(entry))
        .map(|entry| entry.measures.bytes)
        .sum()
}

fn is_kernel_thread(entry: &OwnerEntry) -> bool {
    entry.owner == Owner::KernelThread
}

fn has_pid(entry: &OwnerEntry, pid: u64) -> bool {
    entry.pid == Some(pid)
}

fn in_cgroup(entry: &OwnerEntry, path: &str) -> bool {
    entry.cgroup.as_deref() == Some(path)
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

fn evaluate(results: &Results, line: &Line) -> Vec<Check> {
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
    let (run, report) = match (cgroup_run(results), results.report("report.json")) {
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
    let owners = attribution(&report);
    let a_bytes = owner_bytes(&owners.cgroups, disk, |e| in_cgroup(e, "/a"));
    let b_bytes = owner_bytes(&owners.cgroups, disk, |e| in_cgroup(e, "/b"));
    let a_id_ok = owner_bytes(&owners.cgroups, disk, |e| {
        in_cgroup(e, "/a") && e.cgroup_id == Some(run.a_id)
    }) == a_bytes;
    let b_id_ok = owner_bytes(&owners.cgroups, disk, |e| {
        in_cgroup(e, "/b") && e.cgroup_id == Some(run.b_id)
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
    let writer = owner_bytes(&owners.processes, disk, |e| has_pid(e, run.writer_pid));
    let kernel_threads = owner_bytes(&owners.processes, disk, is_kernel_thread);
    let flagged_with_pid = owners
        .processes
        .iter()
        .any(|e| is_kernel_thread(e) && (e.pid.is_some() || e.comm.is_some()));
    let sync = owner_bytes(&owners.processes, disk, |e| has_pid(e, run.sync_pid));
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
    let direct = owner_bytes(&owners.processes, disk, |e| {
        has_pid(e, run.direct_pid) && e.comm.as_deref() == Some("guest-io")
    });
    let what = "process view: O_DIRECT writer by pid";
    let expected = format!("guest-io (pid {}) {}", run.direct_pid, mib(DIRECT_BYTES));
    checks.push(Check::new(
        what,
        expected,
        format!("guest-io {}", mib(direct)),
        direct == DIRECT_BYTES,
    ));
    let a_file = owner_bytes(&owners.files, disk, |e| {
        e.path.as_deref() == Some("/mnt/a.dat") && !e.direct
    });
    let b_file = owner_bytes(&owners.files, disk, |e| {
        e.path.as_deref() == Some("/mnt/b.dat") && e.direct
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
    checks.push(match results.report("report-a.json") {
        Ok(filtered) => {
            let filtered = attribution(&filtered);
            let a = owner_bytes(&filtered.cgroups, disk, |e| in_cgroup(e, "/a"));
            let others = owner_bytes(&filtered.cgroups, disk, |e| !in_cgroup(e, "/a"));
            let threads = owner_bytes(&filtered.processes, disk, is_kernel_thread);
            let direct = owner_bytes(&filtered.processes, disk, |e| has_pid(e, run.direct_pid));
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

/// The part of a run target's writes one submission path counts.
type PathWrites = fn(&RunTarget) -> u64;

/// fio's io_uring (plain; registered files and buffers) and libaio runs
/// under `run`: its writes and bytes against fio's own totals, each through
/// the path it took, and its commands against the report's for the disk.
fn async_engines(results: &Results) -> Vec<Check> {
    let disk = results.value("names", "async_disk").unwrap_or_default();
    let engines: [(&str, &str, PathWrites); 3] = [
        ("uring", "uring_writes", |target| target.uring_writes),
        ("uringfixed", "uring_writes", |target| target.uring_writes),
        ("aio", "aio_writes", |target| target.aio_writes),
    ];
    engines
        .into_iter()
        .map(|(name, path_key, path_writes)| {
            let what = format!("run -- fio ({name}) on {disk}: writes as fio counts them");
            let expected = format!(
                "write_syscalls and {path_key} = fio's write total_ios, bytes = io_bytes, commands = the device's; io_uring followed"
            );
            let loaded = (|| -> Result<_, String> {
                Ok((results.report(&format!("{name}.json"))?, results.json::<Fio>(&format!("{name}.fio.json"))?))
            })();
            let (report, fio) = match loaded {
                Ok(loaded) => loaded,
                Err(why) => return Check::missing(what, expected, why),
            };
            let fio_write = fio.jobs.first().map(|job| &job.write);
            let (ios, bytes) = (fio_write.map(|w| w.total_ios), fio_write.map(|w| w.io_bytes));
            let run = report.run.as_ref();
            let target = run.and_then(|run| run.target(&disk));
            let field = |of: PathWrites| target.map(of);
            let device_commands = report.device(&disk).and_then(Entry::writes).map(|w| w.commands);
            let unsupported = run
                .and_then(|run| run.io_uring.as_ref())
                .and_then(|uring| uring.unsupported.as_deref());
            let passed = ios.is_some_and(|ios| ios > 0)
                && field(|t| t.write_syscalls) == ios
                && field(path_writes) == ios
                && field(|t| t.write_syscall_bytes) == bytes
                && device_commands.is_some()
                && field(|t| t.commands) == device_commands
                && unsupported.is_none();
            let show = |value: Option<u64>| value.map_or("?".to_string(), |v| v.to_string());
            Check::new(
                what,
                expected,
                format!(
                    "fio {} writes of {} B; run {} ({} {path_key}), {} B, {} commands (device {}); io_uring {}",
                    show(ios),
                    show(bytes),
                    show(field(|t| t.write_syscalls)),
                    show(field(path_writes)),
                    show(field(|t| t.write_syscall_bytes)),
                    show(field(|t| t.commands)),
                    show(device_commands),
                    unsupported.unwrap_or("followed"),
                ),
                passed,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::vm::report::tests::{distribution, empty_report, op_measures};

    /// A guest results directory for cgroup-writeback; `collapsed` has the
    /// writeback issued by dd and charged to the root, as on cgroup v1.
    fn cgroup_writeback_results(dir: &std::path::Path, collapsed: bool) {
        let entry = |fields: Value, bytes: u64| {
            let mut entry = fields;
            entry["device"] = "vda".into();
            entry["measures"] = json!({ "bytes": bytes });
            entry
        };
        let (writeback_process, writeback_cgroup) = if collapsed {
            (
                json!({"owner": "known", "pid": 218, "comm": "dd"}),
                json!({"owner": "known", "cgroup": "/", "cgroup_id": 1}),
            )
        } else {
            (
                json!({"owner": "kernel_thread"}),
                json!({"owner": "known", "cgroup": "/a", "cgroup_id": 23}),
            )
        };
        let mut report = empty_report();
        report["attribution"] = json!({
            "processes": [
                entry(writeback_process, BUFFERED_BYTES),
                entry(json!({"owner": "known", "pid": 217, "comm": "guest-io"}), DIRECT_BYTES),
            ],
            "cgroups": [
                entry(writeback_cgroup, BUFFERED_BYTES),
                entry(json!({"owner": "known", "cgroup": "/b", "cgroup_id": 61}), DIRECT_BYTES),
            ],
            "files": [
                entry(json!({"owner": "known", "path": "/mnt/a.dat"}), BUFFERED_BYTES),
                entry(json!({"owner": "known", "path": "/mnt/b.dat", "direct": true}), DIRECT_BYTES),
            ],
            "folded": {"processes": 0, "cgroups": 0, "files": 0}
        });
        let mut filtered = report.clone();
        filtered["attribution"]["processes"] = json!([report["attribution"]["processes"][0]]);
        filtered["attribution"]["cgroups"] = json!([report["attribution"]["cgroups"][0]]);
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
        let good = evaluate(&Results::new(&root.join("good")), line);
        let collapsed = evaluate(&Results::new(&root.join("collapsed")), line);
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
            let mut target = json!({
                "device": "vdb",
                "write_syscalls": writes,
                "write_syscall_bytes": writes * 65536,
                "write_syscall_size": distribution(),
                "commands": 256,
                "aio_writes": 0,
                "uring_writes": 0,
                "bios": 256,
                "summary": "fio issued its writes",
            });
            target[path_key] = writes.into();
            let mut report = empty_report();
            report["devices"] = json!([{"name": "vdb", "dev": "254:16", "geometry": {},
                "measures": {"ops": {"write": op_measures(256)}}, "partitions": []}]);
            report["run"] = json!({"paused_opens": 0, "targets": [target],
                                   "io_uring": {"unsupported": unsupported}});
            report
        };
        let fio = json!({"jobs": [{"write": {"total_ios": 256, "io_bytes": 16777216}}]});
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
        let checks = async_engines(&Results::new(&root));
        let passed: Vec<bool> = checks.iter().map(|check| check.pass).collect();
        assert_eq!(passed, [true, false, true], "{checks:?}");
        // Said unsupported: never a pass, even with the right counts.
        write(
            "uring.json",
            &report(256, "uring_writes", Some("no tracepoint")),
        );
        assert!(!async_engines(&Results::new(&root))[0].pass);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
