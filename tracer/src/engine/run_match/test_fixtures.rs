//! Fakes and events the matcher's tests share: one partition, one file on
//! it, and the syscalls and commands made to them.

use tracer_common::{
    BlockEvent, EventKind, OpenEvent, ProcessEvent, ProcessEventKind, UNKNOWN_OFFSET,
};

use super::{FdResolver, FdTarget, RunMatcher, TargetFile};
use crate::engine::Engine;
use crate::geometry::fiemap::{ExtentKind, FileExtent};
use crate::geometry::DevId;

/// `/dev/loop0p2`, which fd 3 is when its open was not seen.
pub(super) struct OnePartition;

/// loop0p2: loop0 (7:0) from sector 1000.
pub(super) fn loop0p2() -> FdTarget {
    FdTarget {
        device: "loop0p2".into(),
        disk_dev: DevId::new(7, 0),
        start_sector: 1000,
        file: None,
    }
}

impl FdResolver for OnePartition {
    fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<FdTarget> {
        (path == "/dev/loop0p2").then(loop0p2)
    }

    fn resolve_fd(&mut self, _tgid: u32, fd: u32) -> Option<FdTarget> {
        (fd == 3).then(loop0p2)
    }
}

/// `/mnt/f` on loop0p2 (partition start 1000), opened as fd 3 while
/// traced; fd 9 is it too, inherited from before tracing.
pub(super) struct OneFile;

pub(super) fn file_on_loop0p2() -> FdTarget {
    FdTarget {
        file: Some(TargetFile {
            path: "/mnt/f".into(),
            inode: 12,
        }),
        ..loop0p2()
    }
}

impl FdResolver for OneFile {
    fn resolve_path(&mut self, _tgid: u32, path: &str) -> Option<FdTarget> {
        (path == "/mnt/f").then(file_on_loop0p2)
    }

    fn resolve_fd(&mut self, _tgid: u32, fd: u32) -> Option<FdTarget> {
        (fd == 9).then(file_on_loop0p2)
    }
}

/// pwrite64 of `bytes` (or -errno) at `offset` on `fd` of process 42.
pub(super) fn write(fd: u32, offset: u64, bytes: i64) -> ProcessEvent {
    ProcessEvent {
        ts_ns: 1,
        offset,
        result: bytes,
        tgid: 42,
        fd,
        kind: ProcessEventKind::Pwrite64 as u8,
        how: 0,
        _pad: [0; 2],
        ring: 0,
    }
}

/// A 64 KiB write() on `fd`: at the file position.
pub(super) fn plain_write(fd: u32) -> ProcessEvent {
    ProcessEvent {
        offset: UNKNOWN_OFFSET,
        kind: ProcessEventKind::Write as u8,
        ..write(fd, 0, 65536)
    }
}

/// A syscall of process 42 on `fd`, answered `result`.
pub(super) fn fd_call(kind: ProcessEventKind, fd: u32, result: i64) -> ProcessEvent {
    ProcessEvent {
        tgid: 42,
        fd,
        result,
        kind: kind as u8,
        ..ProcessEvent::ZERO
    }
}

/// `path` opened as `fd` (or -errno) by `tgid`.
pub(super) fn open(tgid: u32, fd: i64, path: &str) -> OpenEvent {
    let mut event = OpenEvent {
        event: ProcessEvent {
            result: fd,
            tgid,
            kind: ProcessEventKind::Openat as u8,
            ..ProcessEvent::ZERO
        },
        path: [0; tracer_common::PATH_BYTES],
    };
    event.path[..path.len()].copy_from_slice(path.as_bytes());
    event
}

/// When [`issue`]'s commands are issued: after the writes of [`write`]
/// began (at 1 ns).
pub(super) const ISSUED_NS: u64 = 1_000_000;

/// A write command issued on loop0, at an absolute sector, at [`ISSUED_NS`].
pub(super) fn issue(sector: u64, nr_sector: u32) -> BlockEvent {
    BlockEvent {
        ts_ns: ISSUED_NS,
        kind: EventKind::Issue as u8,
        dev: DevId::new(7, 0).to_kernel(),
        sector,
        nr_sector,
        rwbs: *b"WS\0\0\0\0\0\0",
        ..BlockEvent::ZERO
    }
}

pub(super) fn extent(logical: u64, physical: u64, length: u64, kind: ExtentKind) -> FileExtent {
    FileExtent {
        logical,
        physical,
        length,
        kind,
    }
}

/// A matcher fed as `run` feeds it: block events go through a real engine,
/// whose outcomes reach the matcher; everything else goes straight to it.
pub(super) struct Traced<R: FdResolver> {
    engine: Engine,
    matcher: RunMatcher<R>,
}

impl<R: FdResolver> Traced<R> {
    pub(super) fn new(resolver: R) -> Traced<R> {
        let mut engine = Engine::new(Vec::new(), Default::default());
        engine.keep_outcomes();
        Traced {
            engine,
            matcher: RunMatcher::new(resolver),
        }
    }

    pub(super) fn block_event(&mut self, event: &BlockEvent) {
        self.engine.ingest(event);
        for outcome in self.engine.drain_outcomes() {
            self.matcher.outcome(&outcome);
        }
    }
}

impl<R: FdResolver> std::ops::Deref for Traced<R> {
    type Target = RunMatcher<R>;
    fn deref(&self) -> &RunMatcher<R> {
        &self.matcher
    }
}

impl<R: FdResolver> std::ops::DerefMut for Traced<R> {
    fn deref_mut(&mut self) -> &mut RunMatcher<R> {
        &mut self.matcher
    }
}
