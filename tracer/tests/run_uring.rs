//! `iosplit-trace run -- fio --ioengine=io_uring`: write and fsync SQEs are
//! followed like pwrite's, one per SQE, and counted against what fio says
//! it did.
//!
//! The oracle is fio (fio 3.x, Jens Axboe's flexible I/O tester, which we did
//! not write): its `--output-format=json` report gives, per job,
//! `write.total_ios` (I/Os it completed), `write.io_bytes` (their bytes) and
//! `sync.total_ios` (its fsyncs). fio's io_uring engine submits WRITEV by
//! default, WRITE with `nonvectored=1` and WRITE_FIXED with `fixedbufs=1`;
//! `force_async=N` hands every Nth SQE to io-wq, and `sqthread_poll=1`
//! submits from the SQPOLL thread (fio 3.33 then registers its files too:
//! seen as `flags 0x400001`, REQ_F_FIXED_FILE, in the tracepoint's own text).
//! `registerfiles=1` names registered files, which run resolves through
//! io_uring_register.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::fio::{device_target as target, fio_writes, one_partition, partition_writes};
use common::{binary, privileged, Mounted, ScratchFile};
use serde_json::Value;

/// `run --json -- fio …` writing to `filename` (a partition or a file)
/// with io_uring; run's report and fio's own.
fn run_fio(filename: &str, tag: &str, extra: &[&str]) -> (Value, Value) {
    let mut args = vec!["--ioengine=io_uring".to_string()];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    common::fio::run_fio("uring", filename, &format!("uring-{tag}"), &args)
}

/// fio io_uring, direct, QD8, 64 KiB x 256 on a raw partition, with each
/// of the SQE opcodes and submission paths: run's writes and bytes are
/// fio's own totals, its bios and commands the partition's in the same report.
#[test]
fn uring_writes_are_counted_as_fio_counts_them() {
    if !privileged("uring_writes_are_counted_as_fio_counts_them") {
        return;
    }
    let (disk, partition, name) = one_partition("run-uring");
    let base = ["--direct=1", "--bs=64k", "--iodepth=8", "--size=16M"];
    for (case, extra) in [
        ("writev", &[][..]),
        ("write", &["--nonvectored=1"][..]),
        ("write_fixed", &["--fixedbufs=1"][..]),
        ("io-wq", &["--nonvectored=1", "--force_async=4"][..]),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (report, fio) = run_fio(&partition, case, &args);
        let (ios, bytes) = fio_writes(&fio);
        assert_eq!((ios, bytes), (256, 16 << 20), "{case}: fio's own totals");
        assert_eq!(
            report["events"]["dropped"], 0,
            "{case}: {}",
            report["events"]
        );
        let uring = &report["run"]["io_uring"];
        assert!(uring["unsupported"].is_null(), "{case}: {uring}");
        let target = target(&report, &name).unwrap_or_else(|| panic!("{case}: {}", report["run"]));
        assert_eq!(target["write_syscalls"], ios, "{case}: {target}");
        assert_eq!(target["write_syscall_bytes"], bytes, "{case}: {target}");
        assert_eq!(target["uring_writes"], ios, "{case}: {target}");
        assert_eq!(target["uring_write_bytes"], bytes, "{case}: {target}");
        assert_eq!(target["aio_writes"], 0, "{case}: {target}");
        assert_eq!(uring["writes"], ios, "{case}: {uring}");
        assert_eq!(uring["fixed_files_not_followed"], 0, "{case}: {uring}");
        assert_eq!(uring["not_followed"], 0, "{case}: {uring}");
        let measured = partition_writes(&report, &disk.name, &name);
        assert_eq!(target["bios"], measured["user_ios"], "{case}: {measured}");
        assert_eq!(target["commands"], measured["commands"], "{case}");
        assert!(target["bios"].as_u64().unwrap() >= ios, "{case}: {target}");
        // Each 64 KiB write lands on its own sectors: one command or more each.
        assert_eq!(target["commands_per_write"]["count"], ios, "{case}");
        let summary = target["summary"].as_str().unwrap();
        assert!(
            summary.contains(&format!(
                "fio issued 256 writes of 64 KiB to {name} through io_uring;"
            )),
            "{case}: {summary}"
        );
        let (sqpoll, punted) = (
            uring["sqpoll"].as_u64().unwrap(),
            uring["punted_to_io_wq"].as_u64().unwrap(),
        );
        assert_eq!(sqpoll, 0, "{case}: {uring}");
        if case == "io-wq" {
            // IOSQE_ASYNC on every 4th SQE: those at least go to io-wq.
            assert!(punted >= ios / 4, "{uring}");
        }
    }
}

/// Registered files: the SQE's fd is a slot of the ring's registered
/// files, which run follows through io_uring_register (fio registers its
/// file with `registerfiles=1`, and always with `sqthread_poll=1`). The
/// writes are fio's, placed on the partition; with SQPOLL, all submitted
/// by the SQPOLL thread.
#[test]
fn uring_writes_to_registered_files_are_followed_through_the_registration() {
    if !privileged("uring_writes_to_registered_files_are_followed_through_the_registration") {
        return;
    }
    let (disk, partition, name) = one_partition("run-uring-fixed");
    for (case, flag, sqpoll) in [
        ("registered", "--registerfiles=1", false),
        ("sqpoll", "--sqthread_poll=1", true),
    ] {
        let (report, fio) = run_fio(
            &partition,
            case,
            &["--direct=1", "--bs=64k", "--iodepth=8", "--size=4M", flag],
        );
        let (ios, bytes) = fio_writes(&fio);
        assert_eq!((ios, bytes), (64, 4 << 20), "{case}: fio's own totals");
        let uring = &report["run"]["io_uring"];
        assert_eq!(uring["fixed_files_not_followed"], 0, "{case}: {uring}");
        assert_eq!(uring["writes"], ios, "{case}: {uring}");
        let by_sqpoll = if sqpoll { ios } else { 0 };
        assert_eq!(uring["sqpoll"], by_sqpoll, "{case}: {uring}");
        let target = target(&report, &name).unwrap_or_else(|| panic!("{case}: {}", report["run"]));
        assert_eq!(target["uring_writes"], ios, "{case}: {target}");
        assert_eq!(target["write_syscall_bytes"], bytes, "{case}: {target}");
        let measured = partition_writes(&report, &disk.name, &name);
        assert_eq!(target["commands"], measured["commands"], "{case}");
        assert_eq!(target["commands_per_write"]["count"], ios, "{case}");
    }
}

/// Buffered io_uring writes with an FSYNC SQE every 8 writes, into a raw
/// partition: the writes are fio's, and so are the fsyncs.
#[test]
fn buffered_uring_writes_and_fsyncs_are_counted() {
    if !privileged("buffered_uring_writes_and_fsyncs_are_counted") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-uring-sync");
    let (report, fio) = run_fio(
        &partition,
        "fsync",
        &[
            "--direct=0",
            "--bs=64k",
            "--iodepth=8",
            "--size=8M",
            "--fsync=8",
        ],
    );
    let (ios, bytes) = fio_writes(&fio);
    assert_eq!((ios, bytes), (128, 8 << 20), "fio's own totals");
    let syncs = fio["jobs"][0]["sync"]["total_ios"].as_u64().unwrap();
    assert!(syncs >= 16, "fio's fsyncs: {}", fio["jobs"][0]["sync"]);
    let target = target(&report, &name).unwrap_or_else(|| panic!("{}", report["run"]));
    assert_eq!(target["uring_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["fsync_calls"], syncs, "{target}");
    assert_eq!(report["run"]["io_uring"]["syncs"], syncs);
}

/// io_uring into a file on ext4: the SQEs' offsets are the file's, carried
/// to sectors through its extent map like pwrite's.
#[test]
fn uring_writes_to_a_file_are_placed_through_its_extent_map() {
    if !privileged("uring_writes_to_a_file_are_placed_through_its_extent_map") {
        return;
    }
    let (_disk, partition, name) = one_partition("run-uring-file");
    let mounted = Mounted::ext4(&partition);
    let path = mounted.point.join("uring-data");
    let path = path.to_str().unwrap();
    let (report, fio) = run_fio(
        path,
        "file",
        &["--direct=1", "--bs=64k", "--iodepth=8", "--size=8M"],
    );
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
    assert_eq!(target["uring_writes"], ios, "{target}");
    assert_eq!(target["write_syscall_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["matched_bytes"], bytes, "{target}");
    assert_eq!(target["file"]["unknown_offset_bytes"], 0, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= ios, "{target}");
    drop(mounted);
}

/// `struct io_uring_sqe` (64 bytes) and `struct io_uring_params` (120) from
/// <linux/io_uring.h>, with only the members the helper sets or reads.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    op_flags: u32,
    user_data: u64,
    tail: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    /// io_sqring_offsets: head, tail, ring_mask, ring_entries, flags,
    /// dropped, array, resv1, then user_addr (u64).
    sq_off: [u32; 10],
    /// io_cqring_offsets: head, tail, ring_mask, ring_entries, overflow,
    /// cqes, flags, resv1, then user_addr (u64).
    cq_off: [u32; 10],
}

const IORING_SETUP_SQPOLL: u32 = 1 << 1;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_SQ_WAKEUP: u32 = 2;
const IORING_SQ_NEED_WAKEUP: u32 = 1;
const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_OP_WRITEV: u8 = 2;
const IORING_OP_FSYNC: u8 = 3;
const IORING_OP_WRITE: u8 = 23;
const IORING_FSYNC_DATASYNC: u32 = 1;
const PAGE: usize = 4096;
/// Where the helper finds the device to write, set only by the test that
/// runs it under `run`.
const HELPER_DEVICE: &str = "IOSPLIT_URING_HELPER_DEVICE";

/// Maps `len` bytes of the ring `fd` at `offset`.
fn map_ring(fd: i32, len: usize, offset: i64) -> *mut u8 {
    // SAFETY: a fresh shared mapping of the ring's own memory.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            offset,
        )
    };
    assert_ne!(
        at,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    at.cast()
}

/// Not a test of its own: the command `run` traces in the test below (this
/// test binary, re-executed with HELPER_DEVICE set). Without it, nothing.
/// One SQPOLL ring on the device (not a registered file, which fio always
/// uses with SQPOLL): 4 WRITEs of 16 KiB, a WRITEV of 9 iovecs (more than
/// the probe sums), an FSYNC with DATASYNC, all submitted by the SQPOLL thread.
#[test]
fn uring_helper() {
    let Ok(device) = std::env::var(HELPER_DEVICE) else {
        return;
    };
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&device)
        .unwrap();
    let fd = file.as_raw_fd();
    let layout = std::alloc::Layout::from_size_align(16 * PAGE, PAGE).unwrap();
    // SAFETY: a non-zero size; freed at the end.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buffer.is_null());
    let iovecs: Vec<libc::iovec> = (0..9)
        .map(|n| libc::iovec {
            // SAFETY: within the 16-page buffer.
            iov_base: unsafe { buffer.add(n * PAGE) }.cast(),
            iov_len: PAGE,
        })
        .collect();
    let mut params = Params {
        flags: IORING_SETUP_SQPOLL,
        sq_thread_idle: 1000,
        ..Params::default()
    };
    // SAFETY: io_uring_setup fills `params`.
    let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 8u32, &mut params as *mut Params) };
    assert!(
        ring >= 0,
        "io_uring_setup: {}",
        std::io::Error::last_os_error()
    );
    let ring = ring as i32;
    let (sq, cq) = (params.sq_off, params.cq_off);
    let sq_ring = map_ring(
        ring,
        (sq[6] + params.sq_entries * 4) as usize,
        IORING_OFF_SQ_RING,
    );
    let cq_ring = map_ring(
        ring,
        (cq[5] + params.cq_entries * 16) as usize,
        IORING_OFF_CQ_RING,
    );
    let sqes = map_ring(ring, params.sq_entries as usize * 64, IORING_OFF_SQES).cast::<Sqe>();
    // SAFETY: the offsets the kernel gave, inside the mappings above.
    let word = |base: *mut u8, at: u32| unsafe { &*base.add(at as usize).cast::<AtomicU32>() };
    // The masks are words in the rings, at those offsets.
    let sq_mask = word(sq_ring, sq[2]).load(Ordering::Relaxed);
    let (sq_tail, sq_flags) = (word(sq_ring, sq[1]), word(sq_ring, sq[4]));
    let sq_array = word(sq_ring, sq[6]) as *const AtomicU32;
    let cq_mask = word(cq_ring, cq[2]).load(Ordering::Relaxed);
    let (cq_head, cq_tail) = (word(cq_ring, cq[0]), word(cq_ring, cq[1]));
    let submit_and_reap = |batch: &[Sqe]| -> Vec<i32> {
        let tail = sq_tail.load(Ordering::Acquire);
        for (n, sqe) in batch.iter().enumerate() {
            let slot = (tail + n as u32) & sq_mask;
            // SAFETY: `slot` is within the ring's entries.
            unsafe {
                sqes.add(slot as usize).write(*sqe);
                (*sq_array.add(slot as usize)).store(slot, Ordering::Relaxed);
            }
        }
        sq_tail.store(tail + batch.len() as u32, Ordering::Release);
        let mut flags = IORING_ENTER_GETEVENTS;
        if sq_flags.load(Ordering::Acquire) & IORING_SQ_NEED_WAKEUP != 0 {
            flags |= IORING_ENTER_SQ_WAKEUP;
        }
        let mut results = Vec::new();
        while results.len() < batch.len() {
            // SAFETY: io_uring_enter on our ring; no signal mask.
            let entered = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    ring,
                    0u32,
                    1u32,
                    flags,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            assert!(
                entered >= 0,
                "io_uring_enter: {}",
                std::io::Error::last_os_error()
            );
            let mut head = cq_head.load(Ordering::Acquire);
            while head != cq_tail.load(Ordering::Acquire) {
                let at = cq[5] as usize + ((head & cq_mask) as usize) * 16;
                // SAFETY: a CQE (user_data u64, res i32, flags u32) inside the CQ mapping.
                results.push(unsafe { cq_ring.add(at + 8).cast::<i32>().read() });
                head += 1;
            }
            cq_head.store(head, Ordering::Release);
            flags = IORING_ENTER_GETEVENTS;
        }
        results
    };
    let write = |n: usize| Sqe {
        opcode: IORING_OP_WRITE,
        fd,
        off: (n * 4 * PAGE) as u64,
        // SAFETY: within the 16-page buffer.
        addr: unsafe { buffer.add(n * 4 * PAGE) } as u64,
        len: (4 * PAGE) as u32,
        ..Sqe::default()
    };
    let writes = submit_and_reap(&[write(0), write(1), write(2), write(3)]);
    assert_eq!(writes, [16 << 10; 4], "the WRITEs' results");
    let writev = Sqe {
        opcode: IORING_OP_WRITEV,
        fd,
        off: 1 << 20,
        addr: iovecs.as_ptr() as u64,
        len: 9,
        ..Sqe::default()
    };
    assert_eq!(
        submit_and_reap(&[writev]),
        [36 << 10],
        "the WRITEV's result"
    );
    let fsync = Sqe {
        opcode: IORING_OP_FSYNC,
        fd,
        op_flags: IORING_FSYNC_DATASYNC,
        ..Sqe::default()
    };
    assert_eq!(submit_and_reap(&[fsync]), [0], "the FSYNC's result");
    // SAFETY: the ring is idle and ours; the buffer was allocated with `layout`.
    unsafe {
        libc::close(ring);
        std::alloc::dealloc(buffer, layout);
    }
}

/// SQEs made exactly, submitted by an SQPOLL thread on an unregistered fd:
/// each is counted as the probe's contract says, and the writes it
/// followed are matched to the partition's bios.
#[test]
fn sqpoll_writes_writev_cap_and_datasync_are_followed_as_documented() {
    if !privileged("sqpoll_writes_writev_cap_and_datasync_are_followed_as_documented") {
        return;
    }
    let (disk, partition, name) = one_partition("run-uring-raw");
    let report_file = ScratchFile(
        std::env::temp_dir().join(format!("iosplit-uring-raw-{}.json", std::process::id())),
    );
    let helper = std::env::current_exe().unwrap();
    let out = Command::new(binary())
        .args(["run", "--json", "-o"])
        .arg(&report_file.0)
        .arg("--")
        .arg(&helper)
        .args(["uring_helper", "--exact", "--test-threads=1"])
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
    let target = target(&report, &name).unwrap_or_else(|| panic!("{}", report["run"]));
    assert_eq!(target["uring_writes"], 4, "{target}");
    assert_eq!(target["write_syscalls"], 4, "{target}");
    assert_eq!(target["write_syscall_bytes"], 4 * (16 << 10), "{target}");
    assert_eq!(target["fsync_calls"], 1, "{target}");
    let uring = &report["run"]["io_uring"];
    assert_eq!(uring["writes"], 4, "{uring}");
    assert_eq!(uring["syncs"], 1, "{uring}");
    // The 9-iovec WRITEV.
    assert_eq!(uring["not_followed"], 1, "{uring}");
    assert_eq!(
        uring["sqpoll"], 6,
        "every SQE by the SQPOLL thread: {uring}"
    );
    let measured = partition_writes(&report, &disk.name, &name);
    assert_eq!(target["commands"], measured["commands"], "{measured}");
    assert_eq!(target["commands_per_write"]["count"], 4, "{target}");
}
