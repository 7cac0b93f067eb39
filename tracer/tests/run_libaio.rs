//! `iosplit-trace run -- fio --ioengine=libaio`: writes submitted through
//! io_submit are followed like pwrite's, one per iocb, and counted against
//! what fio says it did.
//!
//! The oracle is fio (fio 3.x, Jens Axboe's flexible I/O tester, which we did
//! not write): its `--output-format=json` report gives, per job,
//! `write.total_ios` (I/Os it completed) and `write.io_bytes` (their bytes).
//! Each fio run is checked against its own JSON; psync (pwrite64) is the
//! control, whose writes `run` followed before io_submit was.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::fio::{device_target, fio_writes, one_partition, partition_writes};
use common::{binary, privileged, Mounted, ScratchFile};
use serde_json::Value;

/// `run --json -- fio …` writing direct to `filename` (a partition or a
/// file) with `engine`; run's report and fio's own.
fn run_fio(filename: &str, engine: &str, extra: &[&str]) -> (Value, Value) {
    let mut args = vec![format!("--ioengine={engine}"), "--direct=1".to_string()];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    common::fio::run_fio("aio", filename, engine, &args)
}

/// The run target `device`.
fn target<'a>(report: &'a Value, device: &str) -> &'a Value {
    device_target(report, device).unwrap_or_else(|| panic!("no target {device}: {}", report["run"]))
}

#[test]
fn libaio_writes_are_counted_as_fio_counts_them_and_psync_is_unchanged() {
    if !privileged("libaio_writes_are_counted_as_fio_counts_them_and_psync_is_unchanged") {
        return;
    }
    let (disk, partition, name) = one_partition("run-aio");
    for engine in ["libaio", "psync"] {
        let (report, fio) = run_fio(
            &partition,
            engine,
            &["--bs=64k", "--iodepth=8", "--size=16M"],
        );
        let (ios, bytes) = fio_writes(&fio);
        assert_eq!((ios, bytes), (256, 16 << 20), "{engine}: fio's own totals");
        assert_eq!(
            report["events"]["dropped"], 0,
            "{engine}: {}",
            report["events"]
        );
        let target = target(&report, &name);
        assert_eq!(target["write_syscalls"], ios, "{engine}: {target}");
        assert_eq!(target["write_syscall_bytes"], bytes, "{engine}: {target}");
        // The bios and commands run names are the ones the report shows for
        // the partition (nothing else writes to it).
        let measured = partition_writes(&report, &disk.name, &name);
        assert_eq!(target["bios"], measured["user_ios"], "{engine}: {measured}");
        assert_eq!(target["commands"], measured["commands"], "{engine}");
        assert!(
            target["bios"].as_u64().unwrap() >= ios,
            "{engine}: {target}"
        );
        // Each 64 KiB write lands on its own sectors: one command or more each.
        assert_eq!(target["commands_per_write"]["count"], ios, "{engine}");
        let summary = target["summary"].as_str().unwrap();
        assert!(
            summary.contains(&format!("fio issued 256 writes of 64 KiB to {name}")),
            "{summary}"
        );
        let io_submit = &report["run"]["io_submit"];
        if engine == "libaio" {
            assert_eq!(target["aio_writes"], ios, "{target}");
            assert_eq!(target["aio_write_bytes"], bytes, "{target}");
            assert!(summary.contains("through libaio (io_submit)"), "{summary}");
            assert_eq!(io_submit["iocbs"], ios, "{io_submit}");
            assert_eq!(io_submit["iocbs_not_followed"], 0, "{io_submit}");
            assert!(io_submit["calls"].as_u64().unwrap() > 0, "{io_submit}");
        } else {
            assert_eq!(target["aio_writes"], 0, "{target}");
            assert!(!summary.contains("libaio"), "{summary}");
            assert!(io_submit.is_null(), "{io_submit}");
        }
    }
}

/// fio submitting 128 iocbs in one io_submit: the probe reads 64 of a call,
/// and the rest are counted as not followed, never dropped silently.
#[test]
fn iocbs_past_the_per_call_cap_are_counted_not_lost() {
    if !privileged("iocbs_past_the_per_call_cap_are_counted_not_lost") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-aio-cap");
    let (report, fio) = run_fio(
        &partition,
        "libaio",
        &[
            "--bs=4k",
            "--size=8M",
            "--iodepth=128",
            "--iodepth_batch_submit=128",
        ],
    );
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (2048, 8 << 20), "fio's own totals");
    let target = target(&report, &name);
    let io_submit = &report["run"]["io_submit"];
    let followed = target["aio_writes"].as_u64().unwrap();
    let not_followed = io_submit["iocbs_not_followed"].as_u64().unwrap();
    assert!(not_followed > 0, "fio batched more than 64: {io_submit}");
    assert_eq!(followed + not_followed, ios, "{target} {io_submit}");
    assert_eq!(io_submit["iocbs"], ios, "{io_submit}");
    assert_eq!(
        target["write_syscall_bytes"].as_u64().unwrap() + not_followed * 4096,
        bytes
    );
}

/// libaio into a file on ext4: the iocbs' offsets are the file's, carried
/// to sectors through its extent map like pwrite's.
#[test]
fn libaio_writes_to_a_file_are_placed_through_its_extent_map() {
    if !privileged("libaio_writes_to_a_file_are_placed_through_its_extent_map") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-aio-file");
    let mounted = Mounted::ext4(&partition);
    let path = mounted.point.join("aio-data");
    let path = path.to_str().unwrap();
    let (report, fio) = run_fio(path, "libaio", &["--bs=64k", "--iodepth=8", "--size=8M"]);
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (128, 8 << 20), "fio's own totals");
    let target = report["run"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["file"]["path"] == path)
        .unwrap_or_else(|| panic!("no target {path}: {}", report["run"]));
    assert_eq!(target["device"], name.as_str(), "{target}");
    assert_eq!(target["write_syscalls"], ios, "{target}");
    assert_eq!(target["aio_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["matched_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["unknown_offset_bytes"], 0, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= ios, "{target}");
    drop(mounted);
}

/// `struct iocb` and `struct io_event` from <linux/aio_abi.h> (64 and 32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: u32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FDSYNC: u16 = 3;
const IOCB_CMD_PWRITEV: u16 = 8;
const PAGE: usize = 4096;
/// Where the helper finds the device to write, set only by the test that
/// runs it under `run`.
const HELPER_DEVICE: &str = "IOSPLIT_AIO_HELPER_DEVICE";

/// Submits `iocbs` in one io_submit and reaps them all; panics unless every
/// one was accepted and wrote what it asked (or synced).
fn submit_and_reap(context: u64, iocbs: &mut [Iocb], expect_bytes: &[i64]) {
    let mut list: Vec<*mut Iocb> = iocbs.iter_mut().map(|iocb| iocb as *mut Iocb).collect();
    // SAFETY: the iocbs and the buffers they name outlive the call and the reaping below.
    let accepted = unsafe {
        libc::syscall(
            libc::SYS_io_submit,
            context,
            list.len() as i64,
            list.as_mut_ptr(),
        )
    };
    assert_eq!(
        accepted,
        list.len() as i64,
        "io_submit: {}",
        std::io::Error::last_os_error()
    );
    let mut events = vec![IoEvent::default(); list.len()];
    let mut reaped = 0;
    while reaped < list.len() {
        let want = (list.len() - reaped) as i64;
        // SAFETY: `events` has room for `want` more events.
        let got = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                context,
                1i64,
                want,
                events[reaped..].as_mut_ptr(),
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
        assert!(got > 0, "io_getevents: {}", std::io::Error::last_os_error());
        reaped += got as usize;
    }
    let mut results: Vec<i64> = events.iter().map(|e| e.res).collect();
    results.sort_unstable();
    let mut expected = expect_bytes.to_vec();
    expected.sort_unstable();
    assert_eq!(results, expected, "the iocbs' results");
}

/// Not a test of its own: the command `run` traces in the test below (this
/// test binary, re-executed with HELPER_DEVICE set). Without it, nothing.
/// Raw syscalls, as libaio's io_submit is one, so PWRITEV, FDSYNC and more
/// iocbs per call than the probe reads are all submitted exactly.
#[test]
fn aio_helper() {
    let Ok(device) = std::env::var(HELPER_DEVICE) else {
        return;
    };
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&device)
        .unwrap();
    let fd = file.as_raw_fd() as u32;
    // 80 pages, page-aligned for O_DIRECT.
    let layout = std::alloc::Layout::from_size_align(80 * PAGE, PAGE).unwrap();
    // SAFETY: a non-zero size; freed at the end.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buffer.is_null());
    let page = |n: usize| buffer as u64 + (n * PAGE) as u64;
    let iovecs: Vec<libc::iovec> = (0..9)
        .map(|n| libc::iovec {
            iov_base: page(n) as *mut libc::c_void,
            iov_len: PAGE,
        })
        .collect();
    let mut context: u64 = 0;
    // SAFETY: io_setup writes the context id into `context`.
    let set_up = unsafe { libc::syscall(libc::SYS_io_setup, 128u32, &mut context as *mut u64) };
    assert_eq!(set_up, 0, "io_setup: {}", std::io::Error::last_os_error());
    let write = |opcode: u16, buf: u64, nbytes: u64, offset: i64| Iocb {
        aio_lio_opcode: opcode,
        aio_fildes: fd,
        aio_buf: buf,
        aio_nbytes: nbytes,
        aio_offset: offset,
        ..Iocb::default()
    };
    // PWRITEV: aio_buf is the iovec array, aio_nbytes how many of them.
    let vectors = iovecs.as_ptr() as u64;
    // 1. Two PWRITEVs of 4 pages: followed, 16 KiB each.
    submit_and_reap(
        context,
        &mut [
            write(IOCB_CMD_PWRITEV, vectors, 4, 0),
            write(IOCB_CMD_PWRITEV, vectors, 4, 64 << 10),
        ],
        &[16 << 10, 16 << 10],
    );
    // 2. A PWRITEV of 9 iovecs: more than the probe sums, counted.
    submit_and_reap(
        context,
        &mut [write(IOCB_CMD_PWRITEV, vectors, 9, 128 << 10)],
        &[36 << 10],
    );
    // 3. 70 PWRITEs of a page in one call: 64 followed, 6 counted.
    let mut many: Vec<Iocb> = (0..70)
        .map(|n| {
            write(
                IOCB_CMD_PWRITE,
                page(10 + n),
                PAGE as u64,
                (1 << 20) + (n * PAGE) as i64,
            )
        })
        .collect();
    submit_and_reap(context, &mut many, &[PAGE as i64; 70]);
    // 4. An FDSYNC.
    submit_and_reap(context, &mut [write(IOCB_CMD_FDSYNC, 0, 0, 0)], &[0]);
    // SAFETY: the context is ours and idle; the buffer was allocated with `layout`.
    unsafe {
        libc::syscall(libc::SYS_io_destroy, context);
        std::alloc::dealloc(buffer, layout);
    }
}

/// PWRITEV, FDSYNC and the per-call cap, with iocbs made exactly (fio's
/// libaio engine submits only PWRITE): each is counted as the probe's
/// contract says, and the writes it followed are matched to the bios.
#[test]
fn pwritev_fdsync_and_the_cap_are_followed_as_documented() {
    if !privileged("pwritev_fdsync_and_the_cap_are_followed_as_documented") {
        return;
    }
    let (disk, partition, name) = one_partition("run-aio-raw");
    let report_file = ScratchFile(
        std::env::temp_dir().join(format!("iosplit-aio-raw-{}.json", std::process::id())),
    );
    let helper = std::env::current_exe().unwrap();
    let out = Command::new(binary())
        .args(["run", "--json", "-o"])
        .arg(&report_file.0)
        .arg("--")
        .arg(&helper)
        .args(["aio_helper", "--exact", "--test-threads=1"])
        .env(HELPER_DEVICE, &partition)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run or the helper failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_file.0).unwrap()).unwrap();
    let target = target(&report, &name);
    // Followed: 2 PWRITEVs of 16 KiB, 64 PWRITEs of 4 KiB.
    assert_eq!(target["aio_writes"], 66, "{target}");
    assert_eq!(target["write_syscalls"], 66, "{target}");
    assert_eq!(
        target["write_syscall_bytes"],
        2 * (16 << 10) + 64 * 4096,
        "{target}"
    );
    assert_eq!(target["fsync_calls"], 1, "{target}");
    let io_submit = &report["run"]["io_submit"];
    assert_eq!(io_submit["calls"], 4, "{io_submit}");
    assert_eq!(io_submit["iocbs"], 2 + 1 + 70 + 1, "{io_submit}");
    // The 9-iovec PWRITEV and the 6 PWRITEs past 64.
    assert_eq!(io_submit["iocbs_not_followed"], 7, "{io_submit}");
    let measured = partition_writes(&report, &disk.name, &name);
    assert_eq!(target["bios"], measured["user_ios"], "{measured}");
    assert_eq!(target["commands"], measured["commands"], "{measured}");
    // Every followed write has its own sectors, so each matched a command.
    assert_eq!(target["commands_per_write"]["count"], 66, "{target}");
    assert!(
        target["commands_per_write"]["min"].as_u64().unwrap() >= 1,
        "{target}"
    );
}
