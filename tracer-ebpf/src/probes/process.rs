//! The traced process tree (`run`): forks that grow it, its opens, dups and
//! closes (so each fd is known to be a block device or not, even after the
//! process is gone), and its write-family syscalls with fd, offset and
//! result, as `ProcessEvent`s and `OpenEvent`s.
//!
//! Attached only by `run`. An entry probe stashes the arguments and the
//! entry time per thread; the exit probe emits one record with the result
//! and the call's duration (in `ring`), so userspace knows when it began.
//! An open for writing is submitted with a wakeup, so `run` can take hold
//! of the file before the command renames or removes it; unless `run
//! --no-pause`, the process is also stopped (SIGSTOP, before the record is
//! committed, so the reader's SIGCONT always comes after it) until then.
//!
//! io_submit (libaio) is followed at its exit: of the iocbs the kernel
//! accepted (its return value; the first ones of the array, in order), the
//! first [`AIO_IOCBS_READ`] are read from the caller's memory, and each
//! write or sync among them becomes one `ProcessEvent` (`Aio*` kinds) with
//! its fd, offset and bytes, as a pwrite's would. Then one `IoSubmit`
//! record says how many accepted iocbs were not followed. Read at the exit,
//! not the entry, so iocbs the kernel refused are not counted; the iocbs
//! stay the caller's until it reaps their completions, after io_submit
//! returns (a reaper thread reusing an iocb sooner would be misread).
//!
//! io_uring is followed at `io_uring_submit_req` (one event per write or
//! fsync SQE, its fd, offset and length read from the prepared request at
//! offsets BTF gave), its punts to io-wq at `io_uring_queue_async_work`,
//! and its registered files at io_uring_register (the fd array, per slot).

use aya_ebpf::{
    bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        bpf_probe_read_user_str_bytes, bpf_send_signal,
    },
    macros::{map, tracepoint},
    maps::{HashMap, RingBuf},
    programs::TracePointContext,
    Global,
};
use tracer_common::{
    counter, iocb_cmd, nvme_uring, uring_how, uring_op, uring_register, IocbHead, Iovec, OpenEvent,
    ProcessEvent, ProcessEventKind, ProcessOffsets, UringOffsets, AIO_IOCBS_READ, AIO_IOVECS_READ,
    IORING_FSYNC_DATASYNC, MAPPING_PAGE, MAP_ANONYMOUS, MAP_SHARED, NO_FIELD, OPEN_PAUSED,
    PROT_WRITE, REQ_F_FIXED_FILE, RWF_APPEND, UNKNOWN_OFFSET, URING_FILES_READ,
};

use super::shared::{bump, PIDS};

/// `O_WRONLY | O_RDWR`: an open's access mode bits (<fcntl.h>).
const O_ACCMODE: u64 = 0o3;

#[map(name = "PROCESS_EVENTS")]
static PROCESS_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// A syscall between entry and exit, per thread.
#[derive(Clone, Copy)]
#[repr(C)]
struct PendingCall {
    offset: u64,
    fd: u32,
    kind: u8,
    _pad: [u8; 3],
    /// Opens: their flags (`O_APPEND` decides whether positions can be followed).
    open_flags: u64,
    /// When the call began: a direct write's commands are issued before it
    /// returns, so `run` places a write at its entry.
    enter_ns: u64,
}

/// The call's duration from `enter_ns` to `exit_ns`, in microseconds
/// rounded up (saturating): the `ring` field of a syscall's record.
#[inline(always)]
fn duration_us(enter_ns: u64, exit_ns: u64) -> u32 {
    let us = exit_ns.saturating_sub(enter_ns).div_ceil(1000);
    if us > u32::MAX as u64 {
        u32::MAX
    } else {
        us as u32
    }
}

#[map(name = "PENDING_CALLS")]
static PENDING_CALLS: HashMap<u64, PendingCall> = HashMap::with_max_entries(4096, 0);

#[unsafe(no_mangle)]
static PROCESS_FIELDS: Global<ProcessOffsets> = Global::new(ProcessOffsets::ABSENT);

/// 0, or the tracer's tgid: opens for writing stop every other traced process.
#[unsafe(no_mangle)]
static PAUSE_WRITE_OPENS: Global<u32> = Global::new(0);

/// `SIGSTOP` (<signal.h>).
const SIGSTOP: u32 = 19;

#[unsafe(no_mangle)]
static URING_FIELDS: Global<UringOffsets> = Global::new(UringOffsets::ABSENT);

#[inline(always)]
fn tracked(tgid: u32) -> bool {
    // SAFETY: a lookup in a map of plain integers; the value is not kept.
    unsafe { PIDS.get(&tgid) }.is_some()
}

#[inline(always)]
fn read_u64(ctx: &TracePointContext, offset: u16) -> Option<u64> {
    if offset == NO_FIELD {
        return None;
    }
    // SAFETY: offset from the tracepoint's format file; probe_read faults safely.
    unsafe { ctx.read_at::<u64>(offset as usize) }.ok()
}

#[inline(always)]
fn emit(event: ProcessEvent) {
    match PROCESS_EVENTS.reserve::<ProcessEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => bump(counter::PROCESS_DROPPED),
    }
}

#[inline(always)]
fn enter(ctx: &TracePointContext, kind: ProcessEventKind, pos_offset: u16) -> u32 {
    enter_with_fd_at(ctx, kind, PROCESS_FIELDS.load().fd, pos_offset)
}

/// Stashes the call of a tracked process: its fd (read at `fd_offset`) and,
/// when `pos_offset` names one, its file offset.
#[inline(always)]
fn enter_with_fd_at(
    ctx: &TracePointContext,
    kind: ProcessEventKind,
    fd_offset: u16,
    pos_offset: u16,
) -> u32 {
    let fields = PROCESS_FIELDS.load();
    if fields.enabled == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tracked((pid_tgid >> 32) as u32) {
        return 0;
    }
    // munmap has no fd.
    let fd = if fd_offset == NO_FIELD {
        Some(0)
    } else {
        read_u64(ctx, fd_offset)
    };
    let Some(fd) = fd else {
        return 0;
    };
    let offset = read_u64(ctx, pos_offset).unwrap_or(UNKNOWN_OFFSET);
    // Opens: their flags; mapping calls: their length.
    let open_flags = match kind {
        ProcessEventKind::Openat => read_u64(ctx, fields.openat_flags),
        ProcessEventKind::Open => read_u64(ctx, fields.open_flags),
        ProcessEventKind::Openat2 => read_u64(ctx, fields.openat2_how).and_then(|how| {
            // SAFETY: the caller's `struct open_how`, read with a faulting-safe helper.
            unsafe { bpf_probe_read_user(how as *const u64) }.ok()
        }),
        ProcessEventKind::Mmap => read_u64(ctx, fields.mmap_len),
        ProcessEventKind::Msync => read_u64(ctx, fields.msync_len),
        ProcessEventKind::Munmap => read_u64(ctx, fields.munmap_len),
        _ => None,
    };
    let call = PendingCall {
        offset,
        fd: fd as u32,
        kind: kind as u8,
        _pad: [0; 3],
        open_flags: open_flags.unwrap_or(0),
        // SAFETY: a helper with no preconditions.
        enter_ns: unsafe { bpf_ktime_get_ns() },
    };
    let _ = PENDING_CALLS.insert(&pid_tgid, &call, 0);
    0
}

macro_rules! enter_probe {
    ($program:ident, $kind:expr, $pos:ident) => {
        #[tracepoint]
        pub fn $program(ctx: TracePointContext) -> u32 {
            enter(&ctx, $kind, PROCESS_FIELDS.load().$pos)
        }
    };
    ($program:ident, $kind:expr) => {
        #[tracepoint]
        pub fn $program(ctx: TracePointContext) -> u32 {
            enter(&ctx, $kind, NO_FIELD)
        }
    };
}

enter_probe!(enter_write, ProcessEventKind::Write);
enter_probe!(enter_pwrite64, ProcessEventKind::Pwrite64, pwrite_pos);
enter_probe!(enter_writev, ProcessEventKind::Writev);
enter_probe!(enter_pwritev, ProcessEventKind::Pwritev, pwritev_pos);
enter_probe!(enter_pwritev2, ProcessEventKind::Pwritev2, pwritev_pos);
enter_probe!(enter_fsync, ProcessEventKind::Fsync);
enter_probe!(enter_fdatasync, ProcessEventKind::Fdatasync);
// For opens the stashed "offset" is the user pointer to the file name.
enter_probe!(enter_openat, ProcessEventKind::Openat, openat_filename);
enter_probe!(enter_openat2, ProcessEventKind::Openat2, openat_filename);
enter_probe!(enter_open, ProcessEventKind::Open, open_filename);
// dd opens its output as fd 3, then dup2s it onto fd 1 and closes fd 3.
enter_probe!(enter_close, ProcessEventKind::Close);
// A moved file position: plain write()s to a file follow it.
enter_probe!(enter_lseek, ProcessEventKind::Lseek);

/// `dup`, `dup2` and `dup3` name their source fd otherwise than `fd`.
macro_rules! dup_probe {
    ($program:ident, $kind:expr, $oldfd:ident) => {
        #[tracepoint]
        pub fn $program(ctx: TracePointContext) -> u32 {
            enter_with_fd_at(&ctx, $kind, PROCESS_FIELDS.load().$oldfd, NO_FIELD)
        }
    };
}

dup_probe!(enter_dup, ProcessEventKind::Dup, dup_fildes);
dup_probe!(enter_dup2, ProcessEventKind::Dup2, dup3_oldfd);
dup_probe!(enter_dup3, ProcessEventKind::Dup3, dup3_oldfd);

/// `F_DUPFD` and `F_DUPFD_CLOEXEC` (`F_LINUX_SPECIFIC_BASE + 6`) from <fcntl.h>.
const F_DUPFD: u64 = 0;
const F_DUPFD_CLOEXEC: u64 = 1030;

/// Only fcntl's duplications change which file an fd is; the rest are not stashed.
#[tracepoint]
pub fn enter_fcntl(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    match read_u64(&ctx, fields.fcntl_cmd).map(|cmd| cmd & 0xffff_ffff) {
        Some(F_DUPFD | F_DUPFD_CLOEXEC) => {
            enter_with_fd_at(&ctx, ProcessEventKind::Fcntl, fields.fd, NO_FIELD)
        }
        _ => 0,
    }
}

/// mmap of a file, shared and writable: stores to it reach the file. Other
/// mappings (private, read-only, anonymous) are not stashed.
#[tracepoint]
pub fn enter_mmap(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    let (Some(prot), Some(flags)) = (
        read_u64(&ctx, fields.mmap_prot),
        read_u64(&ctx, fields.mmap_flags),
    ) else {
        return 0;
    };
    if prot & PROT_WRITE == 0 || flags & MAP_SHARED == 0 || flags & MAP_ANONYMOUS != 0 {
        return 0;
    }
    enter_with_fd_at(
        &ctx,
        ProcessEventKind::Mmap,
        fields.mmap_fd,
        fields.mmap_off,
    )
}

/// msync: its flags stand in the fd's place.
#[tracepoint]
pub fn enter_msync(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    enter_with_fd_at(
        &ctx,
        ProcessEventKind::Msync,
        fields.msync_flags,
        fields.msync_start,
    )
}

#[tracepoint]
pub fn enter_munmap(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    if fields.munmap_addr == NO_FIELD {
        return 0;
    }
    enter_with_fd_at(&ctx, ProcessEventKind::Munmap, NO_FIELD, fields.munmap_addr)
}

/// Attached to every `sys_exit_*` of the family.
#[tracepoint]
pub fn exit_write_family(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(call) = (unsafe { PENDING_CALLS.get(&pid_tgid) }).copied() else {
        return 0;
    };
    let _ = PENDING_CALLS.remove(&pid_tgid);
    let result = read_u64(&ctx, PROCESS_FIELDS.load().ret).unwrap_or(0) as i64;
    // SAFETY: a helper with no preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    // Compared as bytes, as below: a mapping call's `ring` is its pages.
    let is_mapping = call.kind == ProcessEventKind::Mmap as u8
        || call.kind == ProcessEventKind::Msync as u8
        || call.kind == ProcessEventKind::Munmap as u8;
    let ring = if is_mapping {
        let pages = call.open_flags.div_ceil(MAPPING_PAGE);
        if pages > u32::MAX as u64 {
            u32::MAX
        } else {
            pages as u32
        }
    } else {
        duration_us(call.enter_ns, ts_ns)
    };
    let event = ProcessEvent {
        ts_ns,
        offset: call.offset,
        result,
        tgid: (pid_tgid >> 32) as u32,
        fd: call.fd,
        kind: call.kind,
        how: 0,
        _pad: [0; 2],
        ring,
    };
    // Compared as bytes: 6.1's verifier loses the bound of a table index
    // spilled to the stack (`from_u8`), and rejects the program.
    let is_open = call.kind == ProcessEventKind::Openat as u8
        || call.kind == ProcessEventKind::Openat2 as u8
        || call.kind == ProcessEventKind::Open as u8;
    if !is_open {
        emit(event);
        return 0;
    }
    if result < 0 {
        return 0;
    }
    match PROCESS_EVENTS.reserve::<OpenEvent>(0) {
        Some(mut entry) => {
            let open = entry.as_mut_ptr();
            // SAFETY: `open` points at a reserved, writable OpenEvent; the
            // name is copied from the caller's memory with a faulting-safe helper.
            unsafe {
                (*open).event = ProcessEvent {
                    offset: call.open_flags,
                    ..event
                };
                let path = &mut (*open).path;
                path[0] = 0;
                let _ = bpf_probe_read_user_str_bytes(call.offset as *const u8, path);
            }
            // An open for writing wakes the reader: `run` takes hold of the
            // file (through /proc/PID/fd) before it can be renamed or removed,
            // and the process waits for it, stopped, unless that is off.
            let for_writing = call.open_flags & O_ACCMODE != 0;
            let tracer = PAUSE_WRITE_OPENS.load();
            // SAFETY: a helper acting on the current task only.
            if for_writing
                && tracer != 0
                && tracer != event.tgid
                && unsafe { bpf_send_signal(SIGSTOP) } == 0
            {
                // SAFETY: as above, the reserved OpenEvent.
                unsafe { (*open).event.how = OPEN_PAUSED };
            }
            let wakeup = if for_writing {
                BPF_RB_FORCE_WAKEUP
            } else {
                BPF_RB_NO_WAKEUP
            };
            entry.submit(wakeup as u64);
        }
        None => bump(counter::PROCESS_DROPPED),
    }
    0
}

/// `sched_process_exec` fires in the task that executed: its close-on-exec
/// fds are gone, without a close each.
#[tracepoint]
pub fn process_exec(_ctx: TracePointContext) -> u32 {
    if PROCESS_FIELDS.load().enabled == 0 {
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tracked(tgid) {
        return 0;
    }
    emit(ProcessEvent {
        // SAFETY: a helper with no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        offset: 0,
        result: 0,
        tgid,
        fd: 0,
        kind: ProcessEventKind::Exec as u8,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    });
    0
}

/// close_range closes (or marks close-on-exec) a range of fds at once:
/// stashed with the range's end and the flags packed in the offset.
#[tracepoint]
pub fn enter_close_range(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    let (Some(max_fd), Some(flags)) = (
        read_u64(&ctx, fields.close_range_max_fd),
        read_u64(&ctx, fields.close_range_flags),
    ) else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    if fields.enabled == 0 || !tracked((pid_tgid >> 32) as u32) {
        return 0;
    }
    let Some(fd) = read_u64(&ctx, fields.close_range_fd) else {
        return 0;
    };
    let call = PendingCall {
        offset: (flags << 32) | (max_fd & 0xffff_ffff),
        fd: fd as u32,
        kind: ProcessEventKind::CloseRange as u8,
        _pad: [0; 3],
        open_flags: 0,
        enter_ns: 0,
    };
    let _ = PENDING_CALLS.insert(&pid_tgid, &call, 0);
    0
}

/// `sched_process_fork` fires in the parent: a tracked parent adds its child.
#[tracepoint]
pub fn process_fork(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    if fields.enabled == 0 || fields.child_pid == NO_FIELD {
        return 0;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tracked(parent) {
        return 0;
    }
    // SAFETY: offset from the format file; probe_read faults safely.
    let Ok(child) = (unsafe { ctx.read_at::<i32>(fields.child_pid as usize) }) else {
        return 0;
    };
    let child = child as u32;
    let _ = PIDS.insert(&child, &1, 0);
    emit(ProcessEvent {
        // SAFETY: a helper with no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        offset: 0,
        result: 0,
        tgid: child,
        fd: parent,
        kind: ProcessEventKind::Fork as u8,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    });
    0
}

/// `sched_process_exit` fires in each exiting task: a tracked one leaves
/// the tree, so a later process given its number (pids wrap at `pid_max`)
/// is not traced, nor stopped at its opens.
#[tracepoint]
pub fn process_exit(_ctx: TracePointContext) -> u32 {
    if PROCESS_FIELDS.load().enabled == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tracked((pid_tgid >> 32) as u32) {
        return 0;
    }
    // The leader's number is the tgid; a thread's was added by its fork.
    let _ = PIDS.remove(&(pid_tgid as u32));
    let _ = PENDING_CALLS.remove(&pid_tgid);
    0
}

/// io_submit(ctx, nr, iocbpp): the array and its length are stashed; the
/// iocbs are read at the exit, once the kernel has said how many it took.
#[tracepoint]
pub fn enter_io_submit(ctx: TracePointContext) -> u32 {
    let fields = PROCESS_FIELDS.load();
    if fields.enabled == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tracked((pid_tgid >> 32) as u32) {
        return 0;
    }
    let (Some(nr), Some(iocbpp)) = (
        read_u64(&ctx, fields.io_submit_nr),
        read_u64(&ctx, fields.io_submit_iocbpp),
    ) else {
        return 0;
    };
    let call = PendingCall {
        offset: iocbpp,
        fd: nr.min(u32::MAX as u64) as u32,
        kind: ProcessEventKind::IoSubmit as u8,
        _pad: [0; 3],
        open_flags: 0,
        // SAFETY: a helper with no preconditions.
        enter_ns: unsafe { bpf_ktime_get_ns() },
    };
    let _ = PENDING_CALLS.insert(&pid_tgid, &call, 0);
    0
}

/// The accepted iocbs, one event per write or sync, then the call's record.
#[tracepoint]
pub fn exit_io_submit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(call) = (unsafe { PENDING_CALLS.get(&pid_tgid) }).copied() else {
        return 0;
    };
    let _ = PENDING_CALLS.remove(&pid_tgid);
    if call.kind != ProcessEventKind::IoSubmit as u8 {
        return 0;
    }
    let accepted = read_u64(&ctx, PROCESS_FIELDS.load().ret).unwrap_or(0) as i64;
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a helper with no preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    let mut not_followed: u64 = 0;
    if accepted > 0 {
        let accepted = accepted as u64;
        let read = if accepted < AIO_IOCBS_READ as u64 {
            accepted
        } else {
            AIO_IOCBS_READ as u64
        };
        not_followed = accepted - read;
        for index in 0..AIO_IOCBS_READ as u64 {
            if index >= read {
                break;
            }
            let slot = call.offset.wrapping_add(index * 8);
            if !follow_iocb(slot, tgid, ts_ns, duration_us(call.enter_ns, ts_ns)) {
                not_followed += 1;
            }
        }
    }
    emit(ProcessEvent {
        ts_ns,
        offset: not_followed,
        result: accepted,
        tgid,
        fd: 0,
        kind: ProcessEventKind::IoSubmit as u8,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    });
    0
}

/// Reads the iocb whose pointer is at `slot` and emits it when it writes
/// or syncs; false when it could not be followed.
#[inline(always)]
fn follow_iocb(slot: u64, tgid: u32, ts_ns: u64, duration_us: u32) -> bool {
    // SAFETY: user pointers read with a faulting-safe helper.
    let Ok(pointer) = (unsafe { bpf_probe_read_user(slot as *const u64) }) else {
        return false;
    };
    // SAFETY: as above; `IocbHead` is plain integers.
    let Ok(iocb) = (unsafe { bpf_probe_read_user(pointer as *const IocbHead) }) else {
        return false;
    };
    let (kind, bytes) = match iocb.aio_lio_opcode {
        iocb_cmd::PWRITE => (ProcessEventKind::AioPwrite, iocb.aio_nbytes),
        // aio_buf is the iovec array, aio_nbytes its length.
        iocb_cmd::PWRITEV => match iovec_bytes(iocb.aio_buf, iocb.aio_nbytes) {
            Some(bytes) => (ProcessEventKind::AioPwritev, bytes),
            None => return false,
        },
        iocb_cmd::FSYNC => (ProcessEventKind::AioFsync, 0),
        iocb_cmd::FDSYNC => (ProcessEventKind::AioFdsync, 0),
        // Reads, polls, no-ops: nothing of `run`'s.
        _ => return true,
    };
    let offset = if iocb.aio_rw_flags & RWF_APPEND != 0 || iocb.aio_offset < 0 {
        UNKNOWN_OFFSET
    } else {
        iocb.aio_offset as u64
    };
    emit(ProcessEvent {
        ts_ns,
        offset,
        result: bytes as i64,
        tgid,
        fd: iocb.aio_fildes,
        kind: kind as u8,
        how: 0,
        _pad: [0; 2],
        // The submission began at the call's entry (a direct write's
        // commands are issued inside io_submit).
        ring: duration_us,
    });
    true
}

/// The summed lengths of `count` iovecs at `array`, or `None` past
/// [`AIO_IOVECS_READ`] or on a fault.
#[inline(always)]
fn iovec_bytes(array: u64, count: u64) -> Option<u64> {
    if count > AIO_IOVECS_READ as u64 {
        return None;
    }
    let mut bytes: u64 = 0;
    for index in 0..AIO_IOVECS_READ as u64 {
        if index >= count {
            break;
        }
        let at = array.wrapping_add(index * core::mem::size_of::<Iovec>() as u64);
        // SAFETY: a user pointer read with a faulting-safe helper.
        let iovec = unsafe { bpf_probe_read_user(at as *const Iovec) }.ok()?;
        bytes = bytes.wrapping_add(iovec.iov_len);
    }
    Some(bytes)
}

/// A byte of a tracepoint record, or `None` without the field.
#[inline(always)]
fn read_u8(ctx: &TracePointContext, offset: u16) -> Option<u8> {
    if offset == NO_FIELD {
        return None;
    }
    // SAFETY: offset from the tracepoint's format file; probe_read faults safely.
    unsafe { ctx.read_at::<u8>(offset as usize) }.ok()
}

/// A `T` at `offset` bytes into the kernel object at `base` (an offset BTF gave).
#[inline(always)]
fn read_kernel<T>(base: u64, offset: u16) -> Option<T> {
    if offset == NO_FIELD {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel faults safely on a bad address.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T) }.ok()
}

/// io_uring's submission of one SQE (`io_uring_submit_req`, or
/// `io_uring_submit_sqe` before 6.4), after the kernel prepared it: the
/// request (`struct io_kiocb`) holds the SQE's fd in `cqe.fd` and, for
/// the read/write ops, `off`, `addr` and `len` in the `io_rw` of its
/// `cmd`. One event per WRITE, WRITEV, WRITE_FIXED and FSYNC of a traced
/// process, with the SQPOLL thread and registered files said in `how`.
/// Fired where the SQE is taken (in io_uring_enter, or by the SQPOLL
/// thread, a thread of the same process), before any punt to io-wq.
#[tracepoint]
pub fn uring_submit_req(ctx: TracePointContext) -> u32 {
    let fields = URING_FIELDS.load();
    if fields.enabled == 0 {
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tracked(tgid) {
        return 0;
    }
    let Some(opcode) = read_u8(&ctx, fields.submit_opcode) else {
        return 0;
    };
    // The ring, by the low 32 bits of its address: registered files are its own.
    let ring = read_u64(&ctx, fields.submit_ctx).unwrap_or(0) as u32;
    // SAFETY: a helper with no preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    if uring_op::may_change_files(opcode) {
        emit(ProcessEvent {
            ts_ns,
            offset: opcode as u64,
            result: 0,
            tgid,
            fd: 0,
            kind: ProcessEventKind::UringFilesChanged as u8,
            how: 0,
            _pad: [0; 2],
            ring,
        });
        return 0;
    }
    if !uring_op::is_followed(opcode) {
        return 0;
    }
    let (Some(req), Some(flags)) = (
        read_u64(&ctx, fields.submit_req),
        read_u8(&ctx, fields.submit_flags),
    ) else {
        return 0;
    };
    let mut how = 0u8;
    if read_u8(&ctx, fields.submit_sq_thread).unwrap_or(0) != 0 {
        how |= uring_how::SQPOLL;
    }
    // A registered file's index: the fd table resolves it through the
    // ring's registrations, or counts it as not followed.
    if flags & REQ_F_FIXED_FILE != 0 {
        how |= uring_how::FIXED_FILE;
    }
    let fd = read_kernel::<i32>(req, fields.req_fd);
    let not_followed = |how: u8, fd: u32| ProcessEvent {
        ts_ns,
        offset: opcode as u64,
        result: 0,
        tgid,
        fd,
        kind: ProcessEventKind::UringNotFollowed as u8,
        how,
        _pad: [0; 2],
        ring,
    };
    let Some(fd) = fd else {
        emit(not_followed(how, 0));
        return 0;
    };
    let fd = fd as u32;
    let (kind, offset, bytes) = if opcode == uring_op::URING_CMD {
        match nvme_write(req, &fields) {
            Some((lba, blocks)) => (ProcessEventKind::UringNvmeWrite, lba, blocks),
            // Another driver's command, or an NVMe read or admin command: no write.
            None => return 0,
        }
    } else if opcode == uring_op::FSYNC {
        let datasync = read_kernel::<u32>(req, fields.sync_flags).unwrap_or(0);
        let kind = if datasync & IORING_FSYNC_DATASYNC != 0 {
            ProcessEventKind::UringFdsync
        } else {
            ProcessEventKind::UringFsync
        };
        (kind, 0u64, 0u64)
    } else {
        let (Some(pos), Some(addr), Some(len)) = (
            read_kernel::<i64>(req, fields.rw_pos),
            read_kernel::<u64>(req, fields.rw_addr),
            read_kernel::<u32>(req, fields.rw_len),
        ) else {
            emit(not_followed(how, fd));
            return 0;
        };
        // -1: at the file position (not followed for io_uring, as RWF_APPEND is not).
        let offset = if pos < 0 { UNKNOWN_OFFSET } else { pos as u64 };
        match opcode {
            // addr is the iovec array, len its length (the iovecs are still
            // the caller's: the submitting task or its SQPOLL thread).
            uring_op::WRITEV => match iovec_bytes(addr, len as u64) {
                Some(bytes) => (ProcessEventKind::UringWritev, offset, bytes),
                None => {
                    emit(not_followed(how, fd));
                    return 0;
                }
            },
            uring_op::WRITE_FIXED => (ProcessEventKind::UringWriteFixed, offset, len as u64),
            _ => (ProcessEventKind::UringWrite, offset, len as u64),
        }
    };
    emit(ProcessEvent {
        ts_ns,
        offset,
        result: bytes as i64,
        tgid,
        fd,
        kind: kind as u8,
        how,
        _pad: [0; 2],
        ring,
    });
    0
}

/// An NVMe write in a URING_CMD request: its starting LBA and blocks,
/// from the SQE's `struct nvme_uring_cmd` (a user ABI), when `cmd_op` is
/// an NVMe I/O command and its opcode a write.
#[inline(always)]
fn nvme_write(req: u64, fields: &UringOffsets) -> Option<(u64, u64)> {
    let op = read_kernel::<u32>(req, fields.cmd_op)?;
    if op != nvme_uring::CMD_IO && op != nvme_uring::CMD_IO_VEC {
        return None;
    }
    let pointer = read_kernel::<u64>(req, fields.cmd_pointer)?;
    let payload = pointer + u64::from(fields.cmd_payload);
    // SAFETY: bpf_probe_read_kernel faults safely on a bad address.
    let opcode: u8 =
        unsafe { bpf_probe_read_kernel((payload + nvme_uring::OPCODE) as *const u8) }.ok()?;
    if opcode != nvme_uring::WRITE {
        return None;
    }
    // SAFETY: as above.
    let range: [u32; 3] =
        unsafe { bpf_probe_read_kernel((payload + nvme_uring::CDW10) as *const [u32; 3]) }.ok()?;
    let lba = u64::from(range[0]) | (u64::from(range[1]) << 32);
    Some((lba, u64::from(range[2] & 0xffff) + 1))
}

/// A traced process's write or sync request handed to an io-wq worker
/// (`io_uring_queue_async_work`): counted, to say how the writes ran.
#[tracepoint]
pub fn uring_queue_async_work(ctx: TracePointContext) -> u32 {
    let fields = URING_FIELDS.load();
    if fields.enabled == 0 {
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tracked(tgid) {
        return 0;
    }
    let Some(opcode) = read_u8(&ctx, fields.async_opcode) else {
        return 0;
    };
    if !uring_op::is_followed(opcode) {
        return 0;
    }
    emit(ProcessEvent {
        // SAFETY: a helper with no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        offset: opcode as u64,
        result: 0,
        tgid,
        fd: 0,
        kind: ProcessEventKind::UringPunt as u8,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    });
    0
}

#[map(name = "URING_REGISTERS")]
static URING_REGISTERS: HashMap<u64, PendingCall> = HashMap::with_max_entries(1024, 0);

/// io_uring_register(fd, opcode, arg, nr_args): stashed for the
/// `io_uring_register` tracepoint that the call fires once done, which
/// names the ring (`ctx`) and the result.
#[tracepoint]
pub fn enter_io_uring_register(ctx: TracePointContext) -> u32 {
    let fields = URING_FIELDS.load();
    if fields.enabled == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tracked((pid_tgid >> 32) as u32) {
        return 0;
    }
    let (Some(opcode), Some(arg), Some(nr)) = (
        read_u64(&ctx, fields.enter_register_opcode),
        read_u64(&ctx, fields.enter_register_arg),
        read_u64(&ctx, fields.enter_register_nr),
    ) else {
        return 0;
    };
    let call = PendingCall {
        offset: arg,
        fd: nr.min(u32::MAX as u64) as u32,
        kind: ProcessEventKind::UringFilesRegistered as u8,
        _pad: [0; 3],
        open_flags: opcode & !(uring_register::USE_REGISTERED_RING as u64),
        enter_ns: 0,
    };
    let _ = URING_REGISTERS.insert(&pid_tgid, &call, 0);
    0
}

/// A ring's registered files, from the fd array the caller passed (the
/// first [`URING_FILES_READ`]), or that they changed in a way not followed.
#[tracepoint]
pub fn uring_register(ctx: TracePointContext) -> u32 {
    let fields = URING_FIELDS.load();
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(call) = (unsafe { URING_REGISTERS.get(&pid_tgid) }).copied() else {
        return 0;
    };
    let _ = URING_REGISTERS.remove(&pid_tgid);
    let ret = read_u64(&ctx, fields.register_ret).unwrap_or(u64::MAX) as i64;
    let ring = read_u64(&ctx, fields.register_ctx).unwrap_or(0) as u32;
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a helper with no preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    let event = |kind: ProcessEventKind, offset: u64, result: i64, fd: u32| ProcessEvent {
        ts_ns,
        offset,
        result,
        tgid,
        fd,
        kind: kind as u8,
        how: 0,
        _pad: [0; 2],
        ring,
    };
    let opcode = call.open_flags as u32;
    let (array, count) = match opcode {
        uring_register::FILES => (call.offset, call.fd as u64),
        // struct io_uring_rsrc_register { u32 nr; u32 flags; u64 resv2; u64 data; u64 tags; }
        uring_register::FILES2 => {
            // SAFETY: user memory read with a faulting-safe helper.
            let head = unsafe { bpf_probe_read_user(call.offset as *const [u32; 2]) };
            // SAFETY: as above.
            let data = unsafe { bpf_probe_read_user((call.offset + 16) as *const u64) };
            match (head, data) {
                (Ok([nr, flags]), _) if flags & uring_register::RSRC_SPARSE != 0 => {
                    if ret >= 0 {
                        emit(event(
                            ProcessEventKind::UringFilesRegistered,
                            0,
                            nr as i64,
                            0,
                        ));
                    }
                    return 0;
                }
                (Ok([nr, _]), Ok(data)) => (data, nr as u64),
                _ => (0, u64::MAX),
            }
        }
        uring_register::UNREGISTER_FILES
        | uring_register::FILES_UPDATE
        | uring_register::FILES_UPDATE2 => {
            emit(event(
                ProcessEventKind::UringFilesChanged,
                opcode as u64,
                0,
                0,
            ));
            return 0;
        }
        _ => return 0,
    };
    if ret < 0 {
        return 0;
    }
    if count == u64::MAX {
        emit(event(
            ProcessEventKind::UringFilesChanged,
            opcode as u64,
            0,
            0,
        ));
        return 0;
    }
    emit(event(
        ProcessEventKind::UringFilesRegistered,
        0,
        count as i64,
        0,
    ));
    for index in 0..URING_FILES_READ as u64 {
        if index >= count {
            break;
        }
        // SAFETY: user memory read with a faulting-safe helper.
        let Ok(fd) = (unsafe { bpf_probe_read_user((array + index * 4) as *const i32) }) else {
            break;
        };
        if fd >= 0 {
            emit(event(ProcessEventKind::UringFile, index, 0, fd as u32));
        }
    }
    0
}
