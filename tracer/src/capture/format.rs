//! Tracepoint `format` files → field offsets for the probes.
//!
//! Offsets differ across kernels (`ioprio` arrived in 6.11, `rwbs` grew from 8
//! to 10 bytes in 2025), so they are read at start-up, never hard-coded.

use std::path::{Path, PathBuf};

use tracer_common::{
    EventKind, FieldOffsets, ProcessEventKind, ProcessOffsets, TagWaitFields, UringOffsets,
    NO_FIELD,
};

/// One `field:` line of a format file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Name without any array suffix (`rwbs`, not `rwbs[10]`).
    pub name: String,
    pub offset: u16,
    pub size: u16,
}

/// Why a format file, or the set of them the probes need, was refused.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unreadable field line: {0}")]
    UnreadableField(String),
    #[error("no fields found")]
    NoFields,
    #[error("field `{name}` is missing")]
    MissingField { name: &'static str },
    #[error("field `{name}` has size {size}, expected {expected:?}")]
    FieldSize {
        name: &'static str,
        size: u16,
        expected: &'static [u16],
    },
    #[error("field `{name}` at offset {offset} lies past the bytes the probe copies")]
    PastCopy { name: &'static str, offset: u16 },
    #[error("no {size}-byte field `{name}`")]
    NoSuchField { name: &'static str, size: u16 },
    #[error("`{name}` is at another offset than in the rest of the write family")]
    OffsetDiffers { name: &'static str },
    /// Which tracepoint (`category/event`) the inner error is about.
    #[error("{tracepoint}")]
    In {
        tracepoint: String,
        #[source]
        source: Box<FormatError>,
    },
}

impl FormatError {
    fn within(self, tracepoint: String) -> FormatError {
        FormatError::In {
            tracepoint,
            source: Box::new(self),
        }
    }
}

/// Parses the `field:` lines of a tracepoint format file.
pub fn parse_fields(text: &str) -> Result<Vec<Field>, FormatError> {
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(value) = part.strip_prefix("offset:") {
                offset = value.parse::<u16>().ok();
            } else if let Some(value) = part.strip_prefix("size:") {
                size = value.parse::<u16>().ok();
            } else if decl.is_none() && !part.is_empty() && !part.starts_with("signed:") {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            return Err(FormatError::UnreadableField(line.to_string()));
        };
        let last = decl.split_whitespace().last().unwrap_or(decl);
        let name = last.split('[').next().unwrap_or(last).to_string();
        fields.push(Field { name, offset, size });
    }
    if fields.is_empty() {
        return Err(FormatError::NoFields);
    }
    Ok(fields)
}

/// Which record fields feed which `BlockEvent` slots, and the sizes accepted.
struct Wanted {
    slot: Slot,
    name: &'static str,
    sizes: &'static [u16],
    required: bool,
}

#[derive(Clone, Copy)]
enum Slot {
    Dev,
    Sector,
    NrSector,
    AuxSector,
    AuxDev,
    Rwbs,
    Error,
}

const fn want(slot: Slot, name: &'static str, sizes: &'static [u16], required: bool) -> Wanted {
    Wanted {
        slot,
        name,
        sizes,
        required,
    }
}

const DEV: Wanted = want(Slot::Dev, "dev", &[4], true);
const SECTOR: Wanted = want(Slot::Sector, "sector", &[8], true);
const NR_SECTOR: Wanted = want(Slot::NrSector, "nr_sector", &[4], true);
// The probe copies 8 bytes; any rwbs of at least 6 is read safely (it is
// followed by more record bytes) and decoded up to its NUL.
const RWBS: Wanted = want(Slot::Rwbs, "rwbs", &[6, 7, 8, 9, 10, 11, 12, 16], true);
const ERROR: Wanted = want(Slot::Error, "error", &[4], false);

fn wanted(kind: EventKind) -> Vec<Wanted> {
    match kind {
        EventKind::Remap | EventKind::RqRemap => vec![
            DEV,
            SECTOR,
            NR_SECTOR,
            want(Slot::AuxDev, "old_dev", &[4], true),
            want(Slot::AuxSector, "old_sector", &[8], true),
            RWBS,
        ],
        EventKind::Queue
        | EventKind::Backmerge
        | EventKind::Frontmerge
        | EventKind::RqMerge
        | EventKind::Issue
        | EventKind::Requeue => vec![DEV, SECTOR, NR_SECTOR, RWBS],
        EventKind::Split => vec![
            DEV,
            SECTOR,
            want(Slot::AuxSector, "new_sector", &[8], true),
            RWBS,
        ],
        EventKind::Complete | EventKind::BioComplete => {
            vec![DEV, SECTOR, NR_SECTOR, ERROR, RWBS]
        }
        EventKind::DirtyBuffer => vec![DEV, SECTOR, want(Slot::AuxSector, "size", &[8], true)],
    }
}

/// Maps one tracepoint's fields to probe offsets, or says why it cannot.
pub fn offsets_for(kind: EventKind, fields: &[Field]) -> Result<FieldOffsets, FormatError> {
    let mut offsets = FieldOffsets::ABSENT;
    for wanted in wanted(kind) {
        let Some(field) = fields.iter().find(|f| f.name == wanted.name) else {
            if wanted.required {
                return Err(FormatError::MissingField { name: wanted.name });
            }
            continue;
        };
        if !wanted.sizes.contains(&field.size) {
            return Err(FormatError::FieldSize {
                name: wanted.name,
                size: field.size,
                expected: wanted.sizes,
            });
        }
        let slot = match wanted.slot {
            Slot::Dev => &mut offsets.dev,
            Slot::Sector => &mut offsets.sector,
            Slot::NrSector => &mut offsets.nr_sector,
            Slot::AuxSector => &mut offsets.aux_sector,
            Slot::AuxDev => &mut offsets.aux_dev,
            Slot::Rwbs => &mut offsets.rwbs,
            Slot::Error => &mut offsets.error,
        };
        // The probes copy a fixed window of the record; a field past it cannot
        // be read. NO_FIELD (65535) is past it too, though within_copy takes
        // it for "absent".
        let read = usize::from(field.size.min(tracer_common::RWBS_BYTES as u16));
        if field.offset == NO_FIELD || !super::decode::within_copy(field.offset, read) {
            return Err(FormatError::PastCopy {
                name: wanted.name,
                offset: field.offset,
            });
        }
        *slot = field.offset;
    }
    debug_assert!(offsets.dev != NO_FIELD);
    offsets.enabled = 1;
    Ok(offsets)
}

/// Why a probe is not attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeStatus {
    /// The kernel has no such tracepoint (e.g. block_dirty_buffer without CONFIG_BUFFER_HEAD).
    Unsupported(String),
    /// The tracepoint exists but its layout is not one we can read.
    Broken(String),
}

/// Reads `<events_dir>/block/<tracepoint>/format` for one kind.
pub fn read_offsets(events_dir: &Path, kind: EventKind) -> Result<FieldOffsets, ProbeStatus> {
    let path = events_dir
        .join("block")
        .join(kind.tracepoint())
        .join("format");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(ProbeStatus::Unsupported(format!(
                "{}: this kernel has no such tracepoint",
                kind.tracepoint()
            )))
        }
        Err(err) => return Err(ProbeStatus::Broken(format!("{}: {err}", path.display()))),
    };
    parse_fields(&text)
        .and_then(|fields| offsets_for(kind, &fields))
        .map_err(|why| ProbeStatus::Broken(format!("{}: {why}", kind.tracepoint())))
}

/// Reads a format file, naming it in the error.
trait PipeRead {
    fn pipe_read(self) -> Result<String, FormatError>;
}

impl PipeRead for PathBuf {
    fn pipe_read(self) -> Result<String, FormatError> {
        std::fs::read_to_string(&self).map_err(|source| FormatError::Read { path: self, source })
    }
}

/// The io_uring submission tracepoints, newest name first: 6.4 renamed
/// `io_uring_submit_sqe` (which also had `force_nonblock`) to
/// `io_uring_submit_req`. Both carry `req`, `opcode`, `flags` and `sq_thread`.
pub const URING_SUBMIT_TRACEPOINTS: [&str; 2] = ["io_uring_submit_req", "io_uring_submit_sqe"];

/// The io_uring record offsets `run` reads (the request's own come from
/// BTF), and which submission tracepoint this kernel has. `flags` is 4
/// bytes on 6.1 and 8 since; only its low byte is read (`REQ_F_FIXED_FILE`).
pub fn read_uring_offsets(events_dir: &Path) -> Result<(UringOffsets, &'static str), FormatError> {
    let fields = |event: &str| -> Result<Vec<Field>, FormatError> {
        let path = events_dir.join("io_uring").join(event).join("format");
        std::fs::read_to_string(&path)
            .map_err(|source| FormatError::Read { path, source })
            .and_then(|text| parse_fields(&text))
            .map_err(|err| err.within(format!("io_uring/{event}")))
    };
    let find = |fields: &[Field], name: &'static str, sizes: &'static [u16]| {
        let field = fields
            .iter()
            .find(|f| f.name == name)
            .ok_or(FormatError::MissingField { name })?;
        if !sizes.contains(&field.size) {
            return Err(FormatError::FieldSize {
                name,
                size: field.size,
                expected: sizes,
            });
        }
        Ok(field.offset)
    };
    let mut first_error = None;
    for event in URING_SUBMIT_TRACEPOINTS {
        let submit = match fields(event) {
            Ok(submit) => submit,
            Err(err) => {
                first_error.get_or_insert(err);
                continue;
            }
        };
        let within = |err: FormatError| err.within(format!("io_uring/{event}"));
        let mut offsets = UringOffsets {
            submit_req: find(&submit, "req", &[8]).map_err(within)?,
            submit_opcode: find(&submit, "opcode", &[1]).map_err(within)?,
            submit_flags: find(&submit, "flags", &[4, 8]).map_err(within)?,
            submit_sq_thread: find(&submit, "sq_thread", &[1]).map_err(within)?,
            ..UringOffsets::ABSENT
        };
        // Without it, punts to io-wq are not counted; the writes still are.
        offsets.async_opcode = fields("io_uring_queue_async_work")
            .and_then(|queued| find(&queued, "opcode", &[1]))
            .unwrap_or(NO_FIELD);
        // Registered files, followed through io_uring_register: without any
        // of these, SQEs on them are counted as not followed.
        let register = fields("io_uring_register");
        let enter = events_dir
            .join("syscalls/sys_enter_io_uring_register/format")
            .pipe_read()
            .and_then(|text| parse_fields(&text));
        if let (Ok(ctx), Ok(register), Ok(enter)) = (find(&submit, "ctx", &[8]), register, enter) {
            let found = (
                find(&register, "ctx", &[8]),
                find(&register, "opcode", &[4]),
                find(&register, "ret", &[8]),
                find(&enter, "opcode", &[8]),
                find(&enter, "arg", &[8]),
                find(&enter, "nr_args", &[8]),
            );
            if let (Ok(r_ctx), Ok(r_opcode), Ok(r_ret), Ok(e_opcode), Ok(e_arg), Ok(e_nr)) = found {
                offsets.submit_ctx = ctx;
                (offsets.register_ctx, offsets.register_opcode) = (r_ctx, r_opcode);
                offsets.register_ret = r_ret;
                (offsets.enter_register_opcode, offsets.enter_register_arg) = (e_opcode, e_arg);
                offsets.enter_register_nr = e_nr;
            }
        }
        return Ok((offsets, event));
    }
    Err(first_error.unwrap_or(FormatError::NoFields))
}

/// Offsets for the `run` probes: syscall arguments and the fork's child pid.
pub fn read_process_offsets(events_dir: &Path) -> Result<ProcessOffsets, FormatError> {
    let fields = |category: &str, event: &str| -> Result<Vec<Field>, FormatError> {
        let path = events_dir.join(category).join(event).join("format");
        std::fs::read_to_string(&path)
            .map_err(|source| FormatError::Read { path, source })
            .and_then(|text| parse_fields(&text))
            .map_err(|err| err.within(format!("{category}/{event}")))
    };
    // The offset of the `size`-byte field `name` in `category/event`.
    let offset = |category: &str, event: &str, name: &'static str, size: u16| {
        let found = fields(category, event)?
            .iter()
            .find(|f| f.name == name && f.size == size)
            .map(|f| f.offset);
        found.ok_or_else(|| {
            FormatError::NoSuchField { name, size }.within(format!("{category}/{event}"))
        })
    };
    let differs = |event: &str, name: &'static str| {
        FormatError::OffsetDiffers { name }.within(format!("syscalls/{event}"))
    };
    let mut offsets = ProcessOffsets::ABSENT;
    // The probes read one fd offset and one ret offset for the whole family
    // (the dup family names its fd otherwise; opens, dups and the mapping
    // calls are read below).
    for kind in ProcessEventKind::SYSCALLS.iter().filter(|k| {
        !k.is_open() && !k.is_mapping() && (!k.is_dup() || **k == ProcessEventKind::Fcntl)
    }) {
        let enter = format!("sys_enter_{}", kind.name());
        let exit = format!("sys_exit_{}", kind.name());
        let fd = offset("syscalls", &enter, "fd", 8)?;
        let ret = offset("syscalls", &exit, "ret", 8)?;
        if offsets.enabled != 0 && fd != offsets.fd {
            return Err(differs(&enter, "fd"));
        }
        if offsets.enabled != 0 && ret != offsets.ret {
            return Err(differs(&exit, "ret"));
        }
        offsets.fd = fd;
        offsets.ret = ret;
        offsets.enabled = 1;
    }
    offsets.openat_filename = offset("syscalls", "sys_enter_openat", "filename", 8)?;
    if offset("syscalls", "sys_exit_openat", "ret", 8)? != offsets.ret {
        return Err(differs("sys_exit_openat", "ret"));
    }
    // `open` does not exist on every architecture; without it, opens via openat still count.
    offsets.open_filename = offset("syscalls", "sys_enter_open", "filename", 8).unwrap_or(NO_FIELD);
    offsets.openat_flags = offset("syscalls", "sys_enter_openat", "flags", 8)?;
    offsets.open_flags = offset("syscalls", "sys_enter_open", "flags", 8).unwrap_or(NO_FIELD);
    // openat2 is 5.6 and later; without it, its opens are not traced at all.
    offsets.openat2_how = offset("syscalls", "sys_enter_openat2", "how", 8).unwrap_or(NO_FIELD);
    // close_range is 5.9 and later; without it, fds it closes stay known (stale).
    if let (Ok(fd), Ok(max_fd), Ok(flags)) = (
        offset("syscalls", "sys_enter_close_range", "fd", 8),
        offset("syscalls", "sys_enter_close_range", "max_fd", 8),
        offset("syscalls", "sys_enter_close_range", "flags", 8),
    ) {
        (offsets.close_range_fd, offsets.close_range_max_fd) = (fd, max_fd);
        offsets.close_range_flags = flags;
    }
    // io_submit needs CONFIG_AIO; without it, libaio writes are not followed
    // (and fail in the command anyway).
    if let (Ok(nr), Ok(iocbpp), Ok(ret)) = (
        offset("syscalls", "sys_enter_io_submit", "nr", 8),
        offset("syscalls", "sys_enter_io_submit", "iocbpp", 8),
        offset("syscalls", "sys_exit_io_submit", "ret", 8),
    ) {
        if ret != offsets.ret {
            return Err(differs("sys_exit_io_submit", "ret"));
        }
        (offsets.io_submit_nr, offsets.io_submit_iocbpp) = (nr, iocbpp);
    }
    // Shared writable mappings: all or nothing (without them, stores
    // through mappings are not followed, and the report says so).
    let mapping = (|| -> Result<[u16; 10], FormatError> {
        for exit in ["sys_exit_mmap", "sys_exit_msync", "sys_exit_munmap"] {
            if offset("syscalls", exit, "ret", 8)? != offsets.ret {
                return Err(differs(exit, "ret"));
            }
        }
        Ok([
            offset("syscalls", "sys_enter_mmap", "len", 8)?,
            offset("syscalls", "sys_enter_mmap", "prot", 8)?,
            offset("syscalls", "sys_enter_mmap", "flags", 8)?,
            offset("syscalls", "sys_enter_mmap", "fd", 8)?,
            offset("syscalls", "sys_enter_mmap", "off", 8)?,
            offset("syscalls", "sys_enter_msync", "start", 8)?,
            offset("syscalls", "sys_enter_msync", "len", 8)?,
            offset("syscalls", "sys_enter_msync", "flags", 8)?,
            offset("syscalls", "sys_enter_munmap", "addr", 8)?,
            offset("syscalls", "sys_enter_munmap", "len", 8)?,
        ])
    })();
    if let Ok(fields) = mapping {
        [
            offsets.mmap_len,
            offsets.mmap_prot,
            offsets.mmap_flags,
            offsets.mmap_fd,
            offsets.mmap_off,
            offsets.msync_start,
            offsets.msync_len,
            offsets.msync_flags,
            offsets.munmap_addr,
            offsets.munmap_len,
        ] = fields;
    }
    offsets.pwrite_pos = offset("syscalls", "sys_enter_pwrite64", "pos", 8)?;
    let pwritev_pos = offset("syscalls", "sys_enter_pwritev", "pos_l", 8)?;
    if offset("syscalls", "sys_enter_pwritev2", "pos_l", 8)? != pwritev_pos {
        return Err(differs("sys_enter_pwritev2", "pos_l"));
    }
    offsets.pwritev_pos = pwritev_pos;
    offsets.child_pid = offset("sched", "sched_process_fork", "child_pid", 4)?;
    offsets.fcntl_cmd = offset("syscalls", "sys_enter_fcntl", "cmd", 8)?;
    offsets.dup_fildes = offset("syscalls", "sys_enter_dup", "fildes", 8)?;
    offsets.dup3_oldfd = offset("syscalls", "sys_enter_dup3", "oldfd", 8)?;
    for exit in ["sys_exit_dup", "sys_exit_dup3"] {
        if offset("syscalls", exit, "ret", 8)? != offsets.ret {
            return Err(differs(exit, "ret"));
        }
    }
    // `dup2` does not exist on every architecture (arm64 has only dup3).
    if let Ok(oldfd) = offset("syscalls", "sys_enter_dup2", "oldfd", 8) {
        if oldfd != offsets.dup3_oldfd {
            return Err(differs("sys_enter_dup2", "oldfd"));
        }
        if offset("syscalls", "sys_exit_dup2", "ret", 8)? != offsets.ret {
            return Err(differs("sys_exit_dup2", "ret"));
        }
    }
    Ok(offsets)
}

/// `block/block_rq_tag_wait`'s fields (Linux 7.2+), from its format file:
/// `None` when this kernel has no such tracepoint.
pub fn read_tag_wait_offsets(events_dir: &Path) -> Option<Result<TagWaitFields, FormatError>> {
    let path = events_dir.join("block/block_rq_tag_wait/format");
    let text = std::fs::read_to_string(&path).ok()?;
    Some(tag_wait_offsets(&text).map_err(|err| err.within("block/block_rq_tag_wait".into())))
}

fn tag_wait_offsets(text: &str) -> Result<TagWaitFields, FormatError> {
    let fields = parse_fields(text)?;
    let offset = |name: &'static str, size: u16| {
        fields
            .iter()
            .find(|f| f.name == name && f.size == size)
            .map(|f| f.offset)
            .ok_or(FormatError::NoSuchField { name, size })
    };
    Ok(TagWaitFields {
        dev: offset("dev", 4)?,
        hctx_id: offset("hctx_id", 4)?,
        // The tag set's size only says how small it was: optional.
        nr_tags: offset("nr_tags", 4).unwrap_or(NO_FIELD),
        is_sched_tag: offset("is_sched_tag", 1)?,
    })
}

#[cfg(test)]
mod tag_wait_tests {
    use super::*;

    /// The layout of 7.3's `trace_event_raw_block_rq_tag_wait` (BTF of
    /// Debian's linux-binary-7.3.4), as its format file prints it.
    const FORMAT_7_3: &str = "name: block_rq_tag_wait
ID: 1234
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:u32 hctx_id;\toffset:12;\tsize:4;\tsigned:0;
\tfield:u32 nr_tags;\toffset:16;\tsize:4;\tsigned:0;
\tfield:bool is_sched_tag;\toffset:20;\tsize:1;\tsigned:0;
\tfield:bool is_reserved;\toffset:21;\tsize:1;\tsigned:0;
";

    #[test]
    fn tag_wait_fields_come_from_the_format() {
        let fields = tag_wait_offsets(FORMAT_7_3).unwrap();
        assert_eq!(
            (
                fields.dev,
                fields.hctx_id,
                fields.nr_tags,
                fields.is_sched_tag
            ),
            (8, 12, 16, 20)
        );
        let without = FORMAT_7_3.replace("is_sched_tag", "sched");
        assert!(tag_wait_offsets(&without).is_err());
    }

    #[test]
    fn a_kernel_without_the_tracepoint_has_no_tag_waits() {
        let dir = std::env::temp_dir().join(format!("iosplit-no-tag-wait-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("block")).unwrap();
        assert!(read_tag_wait_offsets(&dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixtures(version: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/formats")
            .join(version)
    }

    fn offsets(version: &str, kind: EventKind) -> FieldOffsets {
        let text = std::fs::read_to_string(fixtures(version).join(kind.tracepoint()))
            .expect("fixture exists");
        offsets_for(kind, &parse_fields(&text).expect("parses")).expect("understood")
    }

    #[test]
    fn linux_6_18_layout_has_ioprio_and_ten_byte_rwbs() {
        let issue = offsets("6.18", EventKind::Issue);
        assert_eq!((issue.dev, issue.sector, issue.nr_sector), (8, 16, 24));
        assert_eq!(issue.rwbs, 34, "rwbs follows the 2-byte ioprio");
        let complete = offsets("6.18", EventKind::Complete);
        assert_eq!((complete.error, complete.rwbs), (28, 34));
        let split = offsets("6.18", EventKind::Split);
        assert_eq!(
            (split.aux_sector, split.rwbs, split.nr_sector),
            (24, 32, NO_FIELD)
        );
        let remap = offsets("6.18", EventKind::Remap);
        assert_eq!((remap.aux_dev, remap.aux_sector, remap.rwbs), (28, 32, 40));
        let queue = offsets("6.18", EventKind::Queue);
        assert_eq!(queue.rwbs, 28);
        let dirty = offsets("6.18", EventKind::DirtyBuffer);
        assert_eq!((dirty.aux_sector, dirty.rwbs), (24, NO_FIELD));
    }

    #[test]
    fn linux_6_1_layout_has_no_ioprio() {
        let issue = offsets("6.1", EventKind::Issue);
        assert_eq!(issue.rwbs, 32);
        let complete = offsets("6.1", EventKind::Complete);
        assert_eq!((complete.error, complete.rwbs), (28, 32));
        let bio_complete = offsets("6.1", EventKind::BioComplete);
        assert_eq!(
            bio_complete.nr_sector, 24,
            "`unsigned nr_sector` parses too"
        );
    }

    #[test]
    fn every_kind_parses_on_both_layouts() {
        for version in ["6.1", "6.18"] {
            for kind in EventKind::ALL {
                assert_eq!(offsets(version, kind).enabled, 1, "{version} {kind:?}");
            }
        }
    }

    #[test]
    fn a_changed_field_size_is_refused_not_misread() {
        let text = std::fs::read_to_string(fixtures("6.18").join("block_split")).unwrap();
        let text = text.replace(
            "sector_t new_sector;\toffset:24;\tsize:8",
            "u32 new_sector;\toffset:24;\tsize:4",
        );
        let err = offsets_for(EventKind::Split, &parse_fields(&text).unwrap()).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::FieldSize {
                    name: "new_sector",
                    size: 4,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn missing_tracepoint_is_unsupported_not_an_error() {
        let dir = std::env::temp_dir().join("iosplit-no-events");
        let status = read_offsets(&dir, EventKind::DirtyBuffer).unwrap_err();
        assert!(matches!(status, ProbeStatus::Unsupported(_)), "{status:?}");
    }

    #[test]
    fn uring_offsets_come_from_the_submit_formats_of_6_18_and_6_1() {
        let events = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events-6.18");
        let (offsets, tracepoint) = read_uring_offsets(&events).expect("6.18 layout understood");
        assert_eq!(tracepoint, "io_uring_submit_req");
        assert_eq!(
            (
                offsets.submit_req,
                offsets.submit_opcode,
                offsets.submit_flags,
                offsets.submit_sq_thread,
                offsets.async_opcode
            ),
            (16, 32, 40, 48, 32)
        );
        assert_eq!(
            (
                offsets.submit_ctx,
                offsets.register_ctx,
                offsets.register_opcode,
                offsets.register_ret,
                offsets.enter_register_opcode,
                offsets.enter_register_arg,
                offsets.enter_register_nr
            ),
            (8, 8, 16, 32, 24, 32, 40)
        );
        // 6.1's io_uring_submit_sqe, laid out by its TRACE_EVENT (u32 flags,
        // force_nonblock before sq_thread).
        let dir = std::env::temp_dir().join(format!("iosplit-uring-6.1-{}", std::process::id()));
        let submit = dir.join("io_uring/io_uring_submit_sqe");
        std::fs::create_dir_all(&submit).expect("temp dir");
        std::fs::write(
            submit.join("format"),
            "name: io_uring_submit_sqe\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:void * ctx;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:void * req;\toffset:16;\tsize:8;\tsigned:0;\n\
             \tfield:unsigned long long user_data;\toffset:24;\tsize:8;\tsigned:0;\n\
             \tfield:u8 opcode;\toffset:32;\tsize:1;\tsigned:0;\n\
             \tfield:u32 flags;\toffset:36;\tsize:4;\tsigned:0;\n\
             \tfield:bool force_nonblock;\toffset:40;\tsize:1;\tsigned:0;\n\
             \tfield:bool sq_thread;\toffset:41;\tsize:1;\tsigned:0;\n\
             \tfield:__data_loc char[] op_str;\toffset:44;\tsize:4;\tsigned:0;\n",
        )
        .expect("format written");
        let (old, tracepoint) = read_uring_offsets(&dir).expect("6.1 layout understood");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(tracepoint, "io_uring_submit_sqe");
        assert_eq!(
            (old.submit_flags, old.submit_sq_thread, old.async_opcode),
            (36, 41, NO_FIELD)
        );
        // Without io_uring_register's format, registered files are not followed.
        assert_eq!(old.register_ctx, NO_FIELD);
        // No io_uring events (CONFIG_IO_URING off): an error that names the file.
        let none = read_uring_offsets(&std::env::temp_dir().join("iosplit-none")).unwrap_err();
        assert!(
            crate::error::one_line(&none).contains("io_uring/io_uring_submit_req"),
            "{}",
            crate::error::one_line(&none)
        );
    }

    #[test]
    fn process_offsets_come_from_syscall_and_sched_formats() {
        let events = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events-6.18");
        let offsets = read_process_offsets(&events).expect("6.18 layout understood");
        assert_eq!(
            (
                offsets.fd,
                offsets.pwrite_pos,
                offsets.pwritev_pos,
                offsets.ret
            ),
            (16, 40, 40, 16)
        );
        assert_eq!(
            offsets.child_pid, 20,
            "child_pid follows __data_loc comm fields"
        );
        assert_eq!(
            (offsets.dup_fildes, offsets.dup3_oldfd, offsets.fcntl_cmd),
            (16, 16, 24)
        );
        assert_eq!(
            (
                offsets.openat_flags,
                offsets.open_flags,
                offsets.openat2_how
            ),
            (32, 24, 32)
        );
        assert_eq!(
            (
                offsets.close_range_fd,
                offsets.close_range_max_fd,
                offsets.close_range_flags
            ),
            (16, 24, 32)
        );
        assert_eq!(
            (offsets.io_submit_nr, offsets.io_submit_iocbpp),
            (24, 32),
            "after ctx_id"
        );
        assert_eq!(
            (
                offsets.mmap_len,
                offsets.mmap_prot,
                offsets.mmap_flags,
                offsets.mmap_fd,
                offsets.mmap_off
            ),
            (24, 32, 40, 48, 56)
        );
        assert_eq!(
            (offsets.msync_start, offsets.msync_len, offsets.msync_flags),
            (16, 24, 32)
        );
        assert_eq!((offsets.munmap_addr, offsets.munmap_len), (16, 24));
        let missing = read_process_offsets(&std::env::temp_dir().join("iosplit-none")).unwrap_err();
        // The cause chain names the tracepoint, the file and the OS error.
        let FormatError::In { tracepoint, source } = &missing else {
            panic!("{missing:?}");
        };
        assert_eq!(tracepoint, "syscalls/sys_enter_write");
        let FormatError::Read { source: io, .. } = source.as_ref() else {
            panic!("{source:?}");
        };
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(
            parse_fields("name: x\nformat:\n"),
            Err(FormatError::NoFields)
        ));
        assert!(matches!(
            parse_fields("\tfield:int x;\toffset:abc;\tsize:4;"),
            Err(FormatError::UnreadableField(_))
        ));
    }

    /// Regression: a field at offset 65535 (NO_FIELD, "absent" to the probes)
    /// passed the copy-window check, so a required field was silently lost
    /// and a `dev` there tripped the debug assertion.
    #[test]
    fn a_field_at_the_absent_marker_is_refused() {
        let text = std::fs::read_to_string(fixtures("6.18").join("block_rq_issue")).unwrap();
        for field in ["dev_t dev;\toffset:8;", "char rwbs[10];\toffset:34;"] {
            let moved = field.replace(
                field.split('\t').nth(1).unwrap(),
                &format!("offset:{NO_FIELD};"),
            );
            let text = text.replace(field, &moved);
            let err = offsets_for(EventKind::Issue, &parse_fields(&text).unwrap()).unwrap_err();
            assert!(
                matches!(
                    err,
                    FormatError::PastCopy {
                        offset: NO_FIELD,
                        ..
                    }
                ),
                "{field}: {err}"
            );
        }
    }
}
