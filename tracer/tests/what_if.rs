//! Each fix's predicted effect (`evidence.what_if`) against the real thing:
//! trace a workload, apply the fix the diagnosis names, rerun the same
//! workload, and count the commands the device received.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    disk_holding, privileged, run_json, sfdisk, sh, LoopDisk, PartitionSpec, ScratchFile,
};
use serde_json::Value;

/// How far the observed commands may be from the prediction.
const TOLERANCE: f64 = 0.2;

fn finding<'a>(report: &'a Value, code: &str, device: &str) -> Option<&'a Value> {
    report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == code && d["device"] == device)
}

/// Write commands the report counts on `device` (a disk or a partition), all origins.
fn write_commands(report: &Value, device: &str) -> u64 {
    write_op(report, device)["commands"].as_u64().unwrap_or(0)
}

/// The write measures of `device` (a disk or a partition), all origins.
fn write_op<'a>(report: &'a Value, device: &str) -> &'a Value {
    for disk in report["devices"].as_array().unwrap() {
        let measures = if disk["name"] == device {
            Some(&disk["measures"])
        } else {
            disk["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == device)
                .map(|p| &p["measures"])
        };
        if let Some(measures) = measures {
            return &measures["ops"]["write"];
        }
    }
    panic!("{device} not in the report: {}", report["devices"]);
}

/// The prediction, checked for shape: the fix must buy something.
fn prediction(diagnosis: &Value) -> (u64, u64) {
    let (now, after) = prediction_of(diagnosis);
    assert!(
        after < now,
        "the fix should take commands down: {}",
        diagnosis["evidence"]["what_if"]
    );
    (now, after)
}

/// `evidence.what_if` as (commands now, commands after the fix).
fn prediction_of(diagnosis: &Value) -> (u64, u64) {
    prediction_in(diagnosis, "what_if")
}

/// `evidence.<key>` (`what_if`, `workaround_what_if`) as (commands now, after).
fn prediction_in(diagnosis: &Value, key: &str) -> (u64, u64) {
    let what_if = &diagnosis["evidence"][key];
    let now = what_if["commands_now"]
        .as_u64()
        .unwrap_or_else(|| panic!("no what_if: {diagnosis}"));
    let after = what_if["commands_after_fix"].as_u64().unwrap();
    assert!(after > 0, "{what_if}");
    (now, after)
}

fn assert_within_tolerance(observed: u64, predicted: u64, what: &str) {
    let error = (observed as f64 - predicted as f64).abs() / predicted as f64;
    eprintln!("{what}: predicted {predicted} commands, observed {observed}");
    assert!(predicted > 0, "{what}: nothing predicted");
    assert!(
        error <= TOLERANCE,
        "{what}: observed {observed} commands after the fix, predicted {predicted} ({:.0}% off)",
        error * 100.0
    );
}

/// Replaces partition `number` of `disk` with one of `spec`, as a resize
/// with sfdisk and partx does on a real disk.
/// `iosplit-trace compare` of the two reports reads the prediction as this
/// test did: `predicted` commands after the fix, `measured` on `device`.
fn assert_compare_agrees(
    (before, after): (&Value, &Value),
    code: &str,
    device: &str,
    predicted: u64,
    measured: u64,
) {
    let tag = format!("{}-{code}", std::process::id());
    let files = [
        ScratchFile(std::env::temp_dir().join(format!("iosplit-compare-before-{tag}.json"))),
        ScratchFile(std::env::temp_dir().join(format!("iosplit-compare-after-{tag}.json"))),
    ];
    std::fs::write(&files[0].0, before.to_string()).unwrap();
    std::fs::write(&files[1].0, after.to_string()).unwrap();
    let run = |json: bool| {
        let mut command = std::process::Command::new(common::binary());
        command.arg("compare").arg(&files[0].0).arg(&files[1].0);
        if json {
            command.arg("--json");
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "compare failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let comparison: Value = serde_json::from_slice(&run(true)).unwrap();
    let check = comparison["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["code"] == code && p["device"] == device)
        .unwrap_or_else(|| panic!("compare checked no {code} on {device}: {comparison}"));
    assert_eq!(check["predicted_commands"], predicted, "{check}");
    assert_eq!(check["measured_commands"], measured, "{check}");
    let text = String::from_utf8(run(false)).unwrap();
    let said = format!(
        "predicted {} after the fix; measured {}",
        thousands(predicted),
        thousands(measured)
    );
    assert!(
        text.contains(&said),
        "compare's text lacks {said:?}:\n{text}"
    );
}

/// 12345 as the report prints it: "12,345".
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn resize_partition(disk: &LoopDisk, number: usize, spec: PartitionSpec) {
    let device = disk.device();
    let nr = number.to_string();
    sh("partx", &["-d", "--nr", &nr, &device]);
    let table = format!("start={}, size={}\n", spec.start, spec.size);
    sfdisk(&["-N", &nr, &device], &table);
    sh("partx", &["-a", "--nr", &nr, &device]);
    let part = disk.partition(number);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !Path::new(&part).exists() {
        assert!(Instant::now() < deadline, "{part} did not reappear");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn subpage_block_size_fix_takes_commands_where_predicted() {
    if !privileged("subpage_block_size_fix_takes_commands_where_predicted") {
        return;
    }
    // The seed's case: an odd-sized partition, buffered 32 KiB writes with fsync.
    let odd = PartitionSpec {
        start: 2048,
        size: 131073,
    };
    let disk = LoopDisk::new("what-if-subpage", 96, &[odd]);
    let partition = disk.partition(1);
    let name = format!("{}p1", disk.name);
    let output = format!("of={partition}");
    let workload = [
        "dd",
        "if=/dev/zero",
        output.as_str(),
        "bs=32K",
        "count=256",
        "conv=fsync",
        "status=none",
    ];
    let before = run_json(&workload);
    let diagnosis = finding(&before, "subpage_block_size", &name)
        .unwrap_or_else(|| panic!("no subpage_block_size on {name}: {}", before["diagnoses"]));
    let (now, predicted) = prediction(diagnosis);
    assert_eq!(
        now,
        write_commands(&before, &name),
        "commands_now is what the device received"
    );

    // The fix: a size that is a multiple of 8 sectors.
    resize_partition(
        &disk,
        1,
        PartitionSpec {
            size: odd.size - odd.size % 8,
            ..odd
        },
    );
    let after = run_json(&workload);
    assert!(
        finding(&after, "subpage_block_size", &name).is_none(),
        "the resize did not fix it: {}",
        after["diagnoses"]
    );
    assert_within_tolerance(
        write_commands(&after, &name),
        predicted,
        "subpage_block_size",
    );
    assert_compare_agrees(
        (&before, &after),
        "subpage_block_size",
        &name,
        predicted,
        write_commands(&after, &name),
    );
}

#[test]
fn max_sectors_fix_takes_commands_where_predicted() {
    if !privileged("max_sectors_fix_takes_commands_where_predicted") {
        return;
    }
    let mut disk = LoopDisk::new("what-if-max-sectors", 64, &[]);
    // 16 direct 1 MiB writes of 256 segments each (scattered pages).
    let device = disk.device();
    let workload = [
        "/usr/bin/python3",
        "-c",
        RECORD_WRITER,
        device.as_str(),
        "16",
        "256",
    ];
    max_sectors_fix_is_predicted(&mut disk, &workload, "scattered pages");
}

/// fio's direct 1 MiB writes from a buffer in a huge page (physically
/// contiguous: one vector per write, where scattered pages take 256), so a
/// raised `max_sectors_kb` leaves one command per write, not two. The model
/// must read the density from the bios, not assume a segment per page.
#[test]
fn max_sectors_fix_is_predicted_for_a_physically_contiguous_buffer() {
    if !privileged("max_sectors_fix_is_predicted_for_a_physically_contiguous_buffer") {
        return;
    }
    let _pages = HugePages::reserve(8);
    let mut disk = LoopDisk::new("what-if-contiguous", 64, &[]);
    let filename = format!("--filename={}", disk.device());
    let workload = [
        "fio",
        "--name=contiguous",
        filename.as_str(),
        "--rw=write",
        "--bs=1M",
        "--size=16M",
        "--direct=1",
        "--ioengine=psync",
        "--iomem=shmhuge",
        "--output=/dev/null",
    ];
    max_sectors_fix_is_predicted(&mut disk, &workload, "a huge-page buffer");
}

/// `vm.nr_hugepages` raised to at least `pages` for a test, put back on drop.
struct HugePages {
    before: String,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePages {
    fn reserve(pages: u64) -> HugePages {
        let before = std::fs::read_to_string(NR_HUGEPAGES)
            .unwrap()
            .trim()
            .to_string();
        let wanted = before.parse::<u64>().unwrap() + pages;
        std::fs::write(NR_HUGEPAGES, wanted.to_string()).unwrap();
        let got: u64 = std::fs::read_to_string(NR_HUGEPAGES)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let reserved = HugePages { before };
        assert_eq!(
            got, wanted,
            "the kernel reserved {got} of {wanted} huge pages"
        );
        reserved
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, &self.before);
    }
}

/// `workload` on `disk` at `max_sectors_kb` 64, then at the value the
/// `split_amplification` fix proposes: the commands within tolerance of
/// the prediction, and `compare` saying so.
fn max_sectors_fix_is_predicted(disk: &mut LoopDisk, workload: &[&str], buffer: &str) {
    disk.set_queue("max_sectors_kb", "64");
    let before = run_json(workload);
    let diagnosis = finding(&before, "split_amplification", &disk.name).unwrap_or_else(|| {
        panic!(
            "no split_amplification on {} ({buffer}): {}",
            disk.name, before["diagnoses"]
        )
    });
    let (now, predicted) = prediction(diagnosis);
    assert_eq!(now, write_commands(&before, &disk.name));
    // The BTF probes read every bio's vector count on a whole disk.
    assert_eq!(
        diagnosis["evidence"]["what_if"]["segments"], "observed",
        "{diagnosis}"
    );
    let proposed = diagnosis["evidence"]["proposed_max_sectors_kb"]
        .as_u64()
        .unwrap_or_else(|| panic!("no proposed_max_sectors_kb: {diagnosis}"));
    assert!(
        diagnosis["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("max_sectors_kb to {proposed}")),
        "the fix names the value the prediction used: {diagnosis}"
    );

    // The fix, as the diagnosis says it (Drop puts the old value back).
    disk.set_queue("max_sectors_kb", &proposed.to_string());
    let after = run_json(workload);
    assert_within_tolerance(
        write_commands(&after, &disk.name),
        predicted,
        &format!("split_amplification (max_sectors, {buffer})"),
    );
    assert_compare_agrees(
        (&before, &after),
        "split_amplification",
        &disk.name,
        predicted,
        write_commands(&after, &disk.name),
    );
}

/// Direct writes of 1 MiB records to a file, each record gathered from the
/// same 4 KiB page 256 times (so no two segments are ever physically
/// contiguous: 256 segments, what scattered user memory gives), in pwritev
/// calls of at most `max_pages` pages. Arguments: path, records, max_pages.
const RECORD_WRITER: &str = r#"
import mmap, os, sys
path, records, max_pages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PAGE, PAGES = 4096, 256
page = mmap.mmap(-1, PAGE)
iov = [memoryview(page)] * PAGES
fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
for record in range(records):
    for first in range(0, PAGES, max_pages):
        count = min(max_pages, PAGES - first)
        done = os.pwritev(fd, iov[:count], (record * PAGES + first) * PAGE)
        assert done == count * PAGE, done
os.close(fd)
"#;

/// Records written per run: 128 MiB, enough to stand above the root disk's other traffic.
const RECORDS: u64 = 128;

fn write_records(path: &Path, max_pages: u64) -> Value {
    run_json(&[
        "/usr/bin/python3",
        "-c",
        RECORD_WRITER,
        path.to_str().unwrap(),
        &RECORDS.to_string(),
        &max_pages.to_string(),
    ])
}

/// Device issues of writes: commands plus the re-issues of requeued ones.
fn write_issues(report: &Value, device: &str) -> u64 {
    let write = write_op(report, device);
    write["commands"].as_u64().unwrap_or(0) + write["requeues"].as_u64().unwrap_or(0)
}

#[test]
fn requeue_fix_takes_issues_where_predicted() {
    if !privileged("requeue_fix_takes_issues_where_predicted") {
        return;
    }
    // The disk under the build directory: this machine's virtio root disk,
    // whose ring (no indirect descriptors) a 1 MiB command of 254 + 2
    // segments overfills, so the tail piece is requeued.
    let scratch_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let disk = disk_holding(scratch_dir);
    let scratch = ScratchFile(scratch_dir.join(format!("what-if-{}.img", std::process::id())));
    let size = format!("{}M", RECORDS);
    sh("fallocate", &["-l", &size, scratch.0.to_str().unwrap()]);
    // Written once untraced, so the traced runs overwrite allocated blocks
    // (no extent conversions journaled in between).
    sh(
        "/usr/bin/python3",
        &[
            "-c",
            RECORD_WRITER,
            scratch.0.to_str().unwrap(),
            &RECORDS.to_string(),
            "256",
        ],
    );

    let before = write_records(&scratch.0, 256);
    let diagnosis = finding(&before, "requeued_commands", &disk)
        .unwrap_or_else(|| panic!("no requeued_commands on {disk}: {}", before["diagnoses"]));
    // The host fix (indirect descriptors) cannot be applied here: each
    // command issued once. The guest-side workaround is applied below.
    let (now, host) = prediction_of(diagnosis);
    assert_eq!(host, write_op(&before, &disk)["commands"].as_u64().unwrap());
    let (workaround_now, predicted) = prediction_in(diagnosis, "workaround_what_if");
    assert_eq!(now, workaround_now);
    assert_eq!(
        now,
        write_issues(&before, &disk),
        "commands_now counts every issue, re-issues included"
    );
    // The fix the diagnosis gives for a ring filler: direct I/O of at most N KiB.
    let fix = diagnosis["fix"].as_str().unwrap();
    let max_kb: u64 = fix
        .split("direct I/O of at most ")
        .nth(1)
        .and_then(|rest| rest.split(" KiB").next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or_else(|| panic!("no I/O size in the fix: {fix}"));
    let max_pages = max_kb / 4;
    assert!((1..256).contains(&max_pages), "{fix}");

    let after = write_records(&scratch.0, max_pages);
    let requeues_before = write_op(&before, &disk)["requeues"].as_u64().unwrap();
    let requeues_after = write_op(&after, &disk)["requeues"].as_u64().unwrap();
    // Our own commands no longer fill the ring; other tasks' large commands
    // on this shared disk still can, so some requeues may remain.
    assert!(
        requeues_after * 2 <= requeues_before,
        "the fix should end most requeues: {requeues_before} before, {requeues_after} after"
    );
    // The root disk is shared: other tasks' writes (counted apart as the
    // run's background) are taken out of the prediction and the observation.
    assert_within_tolerance(
        write_issues(&after, &disk).saturating_sub(background_issues(&after)),
        predicted.saturating_sub(background_issues(&before)),
        "requeued_commands",
    );
}

/// Write issues by tasks other than the command, on the devices it wrote.
fn background_issues(report: &Value) -> u64 {
    let write = &report["run"]["background"]["ops"]["write"];
    write["commands"].as_u64().unwrap_or(0) + write["requeues"].as_u64().unwrap_or(0)
}

#[test]
fn nomerges_fix_takes_commands_where_predicted() {
    if !privileged("nomerges_fix_takes_commands_where_predicted") {
        return;
    }
    let mut disk = LoopDisk::new("what-if-nomerges", 64, &[]);
    disk.set_queue("nomerges", "2");
    let output = format!("of={}", disk.device());
    // 8 MiB of buffered 4 KiB writes: one command per bio while merging is off.
    let workload = [
        "dd",
        "if=/dev/zero",
        output.as_str(),
        "bs=4K",
        "count=2048",
        "conv=fsync",
        "status=none",
    ];
    let before = run_json(&workload);
    let diagnosis = finding(&before, "merge_blocked", &disk.name)
        .unwrap_or_else(|| panic!("no merge_blocked on {}: {}", disk.name, before["diagnoses"]));
    let (now, predicted) = prediction(diagnosis);
    assert_eq!(now, write_commands(&before, &disk.name));
    let fix = diagnosis["fix"].as_str().unwrap();
    assert!(
        fix.contains("echo 0 >") && fix.contains("nomerges"),
        "{fix}"
    );

    disk.set_queue("nomerges", "0");
    let after = run_json(&workload);
    assert_within_tolerance(
        write_commands(&after, &disk.name),
        predicted,
        "merge_blocked (nomerges)",
    );
    assert_compare_agrees(
        (&before, &after),
        "merge_blocked",
        &disk.name,
        predicted,
        write_commands(&after, &disk.name),
    );
}

/// The seed's odd partition (512-byte blocks) on a disk with `nomerges=2`:
/// 16,384 one-sector commands for 8 MiB. Two fixes apply; the cheaper one,
/// merging switched back on (a sysfs write), must be offered first with its
/// own what-if, beside the repartition, and hold when applied (#48).
#[test]
fn merging_switched_on_is_offered_before_the_repartition_and_holds() {
    if !privileged("merging_switched_on_is_offered_before_the_repartition_and_holds") {
        return;
    }
    let mut disk = LoopDisk::new(
        "what-if-nomerges-odd",
        128,
        &[PartitionSpec {
            start: 2048,
            size: 200_001,
        }],
    );
    disk.set_queue("nomerges", "2");
    let part = disk.partition(1);
    let name = format!("{}p1", disk.name);
    let output = format!("of={part}");
    let workload = [
        "dd",
        "if=/dev/zero",
        output.as_str(),
        "bs=32K",
        "count=256",
        "conv=fsync",
        "status=none",
    ];
    let before = run_json(&workload);
    let diagnoses = before["diagnoses"].as_array().unwrap();
    let at = |code: &str| {
        diagnoses
            .iter()
            .position(|d| d["code"] == code && d["device"] == name.as_str())
            .unwrap_or_else(|| panic!("no {code} on {name}: {diagnoses:?}"))
    };
    let (merge, subpage) = (at("merge_blocked"), at("subpage_block_size"));
    assert_eq!(diagnoses[merge]["severity"], diagnoses[subpage]["severity"]);
    assert!(merge < subpage, "the sysfs fix is not first: {diagnoses:?}");
    let fix = diagnoses[merge]["fix"].as_str().unwrap();
    assert!(
        fix.contains("echo 0 >") && fix.contains("nomerges"),
        "{fix}"
    );
    let (now, predicted) = prediction(&diagnoses[merge]);
    assert_eq!(now, write_commands(&before, &name));

    disk.set_queue("nomerges", "0");
    let after = run_json(&workload);
    assert_within_tolerance(
        write_commands(&after, &name),
        predicted,
        "merge_blocked (nomerges) beside subpage_block_size",
    );
}

/// Direct writes to a device: per record, 1 MiB gathered from one page 256
/// times (256 segments), then 4, 16 and 32 KiB from a page-aligned buffer,
/// so the commands have several sizes for the service model to fit.
/// Arguments: path, records.
const MIXED_WRITER: &str = r#"
import mmap, os, sys
path, records = sys.argv[1], int(sys.argv[2])
PAGE, PAGES = 4096, 256
page = mmap.mmap(-1, PAGE)
small = mmap.mmap(-1, 32768)
iov = [memoryview(page)] * PAGES
fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
offset = 0
for record in range(records):
    assert os.pwritev(fd, iov, offset) == PAGES * PAGE
    offset += PAGES * PAGE
    for size in (4096, 16384, 32768):
        assert os.pwritev(fd, [memoryview(small)[:size]], offset) == size
        offset += size
os.close(fd)
"#;

fn service_model(what_if: &Value) -> &Value {
    let model = &what_if["service_model"];
    assert!(model.is_object(), "no service_model: {what_if}");
    model
}

#[test]
fn what_if_times_agree_with_the_device_busy_time() {
    if !privileged("what_if_times_agree_with_the_device_busy_time") {
        return;
    }
    let mut disk = LoopDisk::new(
        "what-if-times",
        128,
        &[PartitionSpec {
            start: 2048,
            size: 120 * 2048,
        }],
    );
    disk.set_queue("max_sectors_kb", "64");
    let partition = disk.partition(1);
    let part_name = partition.trim_start_matches("/dev/").to_string();
    let workload = [
        "/usr/bin/python3",
        "-c",
        MIXED_WRITER,
        partition.as_str(),
        "96",
    ];
    let before = run_json(&workload);
    let diagnosis = finding(&before, "split_amplification", &part_name)
        .or_else(|| finding(&before, "split_amplification", &disk.name))
        .unwrap_or_else(|| {
            panic!(
                "no split_amplification on {part_name}: {}",
                before["diagnoses"]
            )
        });
    let what_if = &diagnosis["evidence"]["what_if"];
    let model = service_model(what_if);
    let now_ms = what_if["time_now_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no time_now_ms: {what_if}"));
    let after_ms = what_if["time_after_fix_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no time_after_fix_ms: {what_if}"));
    let busy_ms = model["busy_ms"].as_f64().unwrap();
    let run = &before["run"];
    let command_s = run["command_s"].as_f64().unwrap();
    eprintln!(
        "before: commands {} -> {}, time {now_ms:.1} ms -> {after_ms:.1} ms, busy {busy_ms:.1} ms of a {command_s:.3} s run; model {model}; run {}",
        what_if["commands_now"], what_if["commands_after_fix"], run["time_with_fix"]
    );
    assert!(
        (now_ms - busy_ms).abs() <= 0.25 * busy_ms,
        "time_now_ms {now_ms} not within 25% of the device-busy time {busy_ms}: {model}"
    );
    assert!(
        busy_ms / 1000.0 <= command_s + 0.5,
        "busy {busy_ms} ms beyond the run's {command_s} s"
    );
    // A command's own cost is what a fix with fewer commands saves: the same
    // bytes take the same time, so the saving is per_command_ms per command.
    let saved_per_command = model["per_command_ms"].as_f64().unwrap();
    let (commands_now, commands_after) = prediction(diagnosis);
    assert!(commands_after < commands_now, "{what_if}");
    let expected_saving = saved_per_command * (commands_now - commands_after) as f64;
    assert!(
        ((now_ms - after_ms) - expected_saving).abs() <= 0.05 * expected_saving + 0.01,
        "the time saved is not the commands saved times their cost: {what_if}"
    );
    let estimate = &run["time_with_fix"];
    assert_eq!(estimate["code"], "split_amplification", "{estimate}");

    // The fix for real: the device time measured after it, for the record.
    let proposed = diagnosis["evidence"]["proposed_max_sectors_kb"]
        .as_u64()
        .unwrap();
    disk.set_queue("max_sectors_kb", &proposed.to_string());
    let after = run_json(&workload);
    let measured = write_commands(&after, &part_name);
    eprintln!(
        "after the fix: {measured} commands, run {} s (predicted {} s)",
        after["run"]["command_s"], estimate["run_after_fix_s"]
    );
}

/// Too few commands for a model, in a run that mostly sleeps: the what-if
/// has no time, but says how long the disk was busy, and `run` says it
/// beside the run's time, so the seconds spent elsewhere show.
#[test]
fn a_run_without_a_device_model_still_says_how_busy_the_disk_was() {
    if !privileged("a_run_without_a_device_model_still_says_how_busy_the_disk_was") {
        return;
    }
    // Odd-sized: a 512-byte block size, so 4 KiB buffered writes go down as
    // 512-byte bios (`subpage_block_size`, with a what-if).
    let disk = LoopDisk::new(
        "what-if-busy",
        80,
        &[PartitionSpec {
            start: 2048,
            size: 131_073,
        }],
    );
    let partition = disk.partition(1);
    let part_name = partition.trim_start_matches("/dev/").to_string();
    let script = format!(
        "dd if=/dev/zero of={partition} bs=4k count=8 conv=fsync status=none; sleep 1; dd if=/dev/zero of={partition} bs=4k count=8 seek=64 conv=fsync status=none"
    );
    let report = run_json(&["sh", "-c", &script]);
    let diagnosis = finding(&report, "subpage_block_size", &part_name)
        .unwrap_or_else(|| panic!("no subpage_block_size: {}", report["diagnoses"]));
    let what_if = &diagnosis["evidence"]["what_if"];
    assert_eq!(what_if["time_unavailable"], "too_few_commands", "{what_if}");
    let busy_ms = what_if["busy_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no busy_ms: {what_if}"));
    let run = &report["run"];
    let command_s = run["command_s"].as_f64().unwrap();
    assert!(
        busy_ms > 0.0 && busy_ms < 500.0 && command_s >= 1.0,
        "busy {busy_ms} ms of a {command_s} s run: {what_if}"
    );
    let estimate = &run["time_with_fix"];
    let device_busy_s = estimate["device_busy_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no device_busy_s: {estimate}"));
    assert!(
        (device_busy_s * 1000.0 - busy_ms).abs() < 0.01,
        "{estimate} against {busy_ms} ms"
    );
}
