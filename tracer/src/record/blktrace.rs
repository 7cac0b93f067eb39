//! blktrace's binary files (`blktrace -d /dev/sda` writes `sda.blktrace.N`,
//! one per CPU): `struct blk_io_trace` records (include/uapi/linux/
//! blktrace_api.h, version 7), each followed by `pdu_len` bytes of payload,
//! in the traced machine's byte order. The files are merged by time, as
//! blkparse merges them; the actions the engine reads become
//! [`BlockEvent`]s and the rest (G I P U, notify records, passthrough
//! commands) are skipped and counted by kind, as in the text importer.

use std::path::{Path, PathBuf};

use tracer_common::{BlockEvent, EventKind, RWBS_BYTES};

use super::import::{errno_of, request_based, Builder, Import, ImportError, TextFormat};
use crate::geometry::DiskGeometry;

/// `BLK_IO_TRACE_MAGIC`; the low byte is the version.
const MAGIC: u32 = 0x6561_7400;
const VERSION: u32 = 7;
/// `sizeof(struct blk_io_trace)`.
const RECORD: usize = 48;

/// Categories (`BLK_TC_*`), in the action's top 16 bits.
mod category {
    pub const WRITE: u32 = 1 << 1;
    pub const FLUSH: u32 = 1 << 2;
    pub const SYNC: u32 = 1 << 3;
    pub const PC: u32 = 1 << 9;
    pub const NOTIFY: u32 = 1 << 10;
    pub const AHEAD: u32 = 1 << 11;
    pub const META: u32 = 1 << 12;
    pub const DISCARD: u32 = 1 << 13;
    pub const FUA: u32 = 1 << 15;
}

/// `__BLK_TA_CGROUP`: the payload starts with the 8-byte cgroup id.
const CGROUP: u32 = 1 << 8;

/// `__BLK_TN_*`: the notify records' kinds.
const NOTIFY_PROCESS: u32 = 0;
const NOTIFY_TIMESTAMP: u32 = 1;
const NOTIFY_MESSAGE: u32 = 2;

/// The files `--from blktrace FILE` reads: FILE's siblings when it is one
/// per-CPU file (`sda.blktrace.0`), `FILE.blktrace.N` when it is their
/// prefix, and every `*.blktrace.N` when it is a directory. Sorted by CPU.
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let cpu_of = |name: &str| -> Option<(String, u32)> {
        let (prefix, cpu) = name.rsplit_once(".blktrace.")?;
        Some((prefix.to_owned(), cpu.parse().ok()?))
    };
    let (dir, prefix) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| ImportError::Binary(format!("{} names no file", path.display())))?;
        let prefix = match cpu_of(name) {
            Some((prefix, _)) => prefix,
            None => name.strip_suffix(".blktrace").unwrap_or(name).to_owned(),
        };
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (dir, Some(prefix))
    };
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| ImportError::Binary(format!("cannot read {}: {e}", dir.display())))?;
    let mut found: Vec<(String, u32, PathBuf)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (file_prefix, cpu) = cpu_of(&name)?;
            prefix
                .as_ref()
                .is_none_or(|p| *p == file_prefix)
                .then(|| (file_prefix, cpu, entry.path()))
        })
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(ImportError::Binary(format!(
            "no blktrace files (NAME.blktrace.CPU) for {}",
            path.display()
        )));
    }
    let devices: std::collections::BTreeSet<&str> = found.iter().map(|f| f.0.as_str()).collect();
    if devices.len() > 1 {
        return Err(ImportError::Binary(format!(
            "{} holds traces of several devices ({}): name one, e.g. {}/{}.blktrace.0",
            dir.display(),
            devices.into_iter().collect::<Vec<_>>().join(", "),
            dir.display(),
            found[0].0
        )));
    }
    Ok(found.into_iter().map(|(_, _, path)| path).collect())
}

/// Reads and merges the per-CPU files `files_of(path)` names.
pub fn import_files(path: &Path, geometry: &[DiskGeometry]) -> Result<Import, ImportError> {
    let files = files_of(path)?;
    let mut inputs = Vec::with_capacity(files.len());
    for file in &files {
        let bytes = std::fs::read(file)
            .map_err(|e| ImportError::Binary(format!("cannot read {}: {e}", file.display())))?;
        inputs.push((file.display().to_string(), bytes));
    }
    let mut import = import(&inputs, geometry)?;
    import.notes.insert(
        0,
        format!(
            "read {} blktrace file{}: {}",
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            inputs
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    Ok(import)
}

/// Parses the records of each `(name, bytes)` input and merges them by time.
pub fn import(
    inputs: &[(String, Vec<u8>)],
    geometry: &[DiskGeometry],
) -> Result<Import, ImportError> {
    let request_based = request_based(geometry);
    let mut builder = Builder::default();
    let mut events = Vec::new();
    let mut notes = Vec::new();
    for (name, bytes) in inputs {
        let mut at = 0;
        while at < bytes.len() {
            let Some(header) = bytes.get(at..at + RECORD) else {
                notes.push(format!(
                    "{name} ends inside a record ({} bytes left at offset {at}): read up to the last whole one",
                    bytes.len() - at
                ));
                break;
            };
            let order = Order::of(header).ok_or_else(|| {
                ImportError::Binary(format!(
                    "{name} is not a blktrace file: no blk_io_trace magic at offset {at} (found {:02x?})",
                    &header[..4]
                ))
            })?;
            let record = order.record(header);
            if record.magic & 0xff != VERSION {
                return Err(ImportError::Binary(format!(
                    "{name}: blktrace format version {} at offset {at}, only {VERSION} is read",
                    record.magic & 0xff
                )));
            }
            let pdu_start = at + RECORD;
            let pdu_end = pdu_start + usize::from(record.pdu_len);
            let Some(pdu) = bytes.get(pdu_start..pdu_end) else {
                notes.push(format!(
                    "{name} ends inside a record's payload at offset {at}: read up to the last whole record"
                ));
                break;
            };
            let action = (record.action & 0xffff) & !CGROUP;
            if record.action & (category::NOTIFY << 16) == 0
                && matches!(action, TA_GETRQ | TA_INSERT)
            {
                let range = (record.device, record.sector, record.bytes >> 9);
                builder.saw_request(Some(record.device), action == TA_INSERT, Some(range));
            }
            match event_of(&record, pdu, request_based.as_deref()) {
                Parsed::Event(event) => events.push(event),
                Parsed::Skipped(kind) => builder.skip(kind),
                Parsed::Bad => builder.unparsed += 1,
            }
            at = pdu_end;
        }
    }
    // Each file is in time order; across files the merge is a stable sort.
    let mut import = builder.finish(events, TextFormat::Blktrace)?;
    import.notes.splice(0..0, notes);
    Ok(import)
}

/// The byte order the traced machine wrote.
#[derive(Clone, Copy)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn of(header: &[u8]) -> Option<Order> {
        let word = [header[0], header[1], header[2], header[3]];
        if u32::from_le_bytes(word) & !0xff == MAGIC {
            Some(Order::Little)
        } else if u32::from_be_bytes(word) & !0xff == MAGIC {
            Some(Order::Big)
        } else {
            None
        }
    }

    fn u16(self, b: &[u8]) -> u16 {
        let b = [b[0], b[1]];
        match self {
            Order::Little => u16::from_le_bytes(b),
            Order::Big => u16::from_be_bytes(b),
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        match self {
            Order::Little => u32::from_le_bytes(b),
            Order::Big => u32::from_be_bytes(b),
        }
    }

    fn u64(self, b: &[u8]) -> u64 {
        let b = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        match self {
            Order::Little => u64::from_le_bytes(b),
            Order::Big => u64::from_be_bytes(b),
        }
    }

    /// `struct blk_io_trace`.
    fn record(self, h: &[u8]) -> Record {
        Record {
            magic: self.u32(&h[0..]),
            time: self.u64(&h[8..]),
            sector: self.u64(&h[16..]),
            bytes: self.u32(&h[24..]),
            action: self.u32(&h[28..]),
            pid: self.u32(&h[32..]),
            device: self.u32(&h[36..]),
            error: self.u16(&h[44..]),
            pdu_len: self.u16(&h[46..]),
        }
    }
}

/// The fields of `struct blk_io_trace` the importer reads.
struct Record {
    magic: u32,
    time: u64,
    sector: u64,
    bytes: u32,
    action: u32,
    pid: u32,
    /// Kernel `dev_t` (`major << 20 | minor`), as `BlockEvent::dev`.
    device: u32,
    error: u16,
    pdu_len: u16,
}

enum Parsed {
    Event(BlockEvent),
    Skipped(&'static str),
    Bad,
}

/// blkparse's `fill_rwbs`: the categories as the text prints them.
fn rwbs_of(record: &Record) -> [u8; RWBS_BYTES] {
    let has = |c: u32| record.action & (c << 16) != 0;
    let mut rwbs = [0u8; RWBS_BYTES];
    let mut letters = Vec::with_capacity(RWBS_BYTES);
    if has(category::FLUSH) {
        letters.push(b'F');
    }
    letters.push(if has(category::DISCARD) {
        b'D'
    } else if has(category::WRITE) {
        b'W'
    } else if record.bytes != 0 {
        b'R'
    } else {
        b'N'
    });
    for (c, letter) in [
        (category::FUA, b'F'),
        (category::AHEAD, b'A'),
        (category::SYNC, b'S'),
        (category::META, b'M'),
    ] {
        if has(c) {
            letters.push(letter);
        }
    }
    rwbs[..letters.len()].copy_from_slice(&letters);
    rwbs
}

fn event_of(record: &Record, pdu: &[u8], request_based: Option<&[u32]>) -> Parsed {
    if record.action & (category::NOTIFY << 16) != 0 {
        // `enum blktrace_notify`: a pid's command name, the wall-clock time
        // the trace started, or a message (`m N …`); none is an I/O.
        return Parsed::Skipped(match (record.action & 0xffff) & !CGROUP {
            NOTIFY_PROCESS => "process name",
            NOTIFY_TIMESTAMP => "timestamp",
            NOTIFY_MESSAGE => "notify",
            _ => "other notify",
        });
    }
    // The cgroup id, when there is one, comes before the payload proper.
    let pdu = match record.action & CGROUP != 0 {
        true => pdu.get(8..).unwrap_or(&[]),
        false => pdu,
    };
    let action = (record.action & 0xffff) & !CGROUP;
    // The actions are the probe table's (`with_block_probes!`); the rest are skipped by name.
    let kind = match EventKind::from_blk_ta(action as u16) {
        Some(EventKind::Complete)
            if request_based.is_some_and(|disks| !disks.contains(&record.device)) =>
        {
            EventKind::BioComplete
        }
        Some(kind) => kind,
        None => return skipped_ta(action),
    };
    if record.action & (category::PC << 16) != 0 {
        return Parsed::Skipped("passthrough");
    }
    let mut event = BlockEvent::ZERO;
    event.kind = kind as u8;
    event.ts_ns = record.time;
    event.dev = record.device;
    event.tgid = record.pid;
    event.sector = record.sector;
    event.nr_sector = record.bytes >> 9;
    event.rwbs = rwbs_of(record);
    match kind {
        EventKind::Complete | EventKind::BioComplete => {
            event.error = errno_of(i64::from(record.error)).unwrap_or(0);
        }
        // `__be64` new sector.
        EventKind::Split => {
            let Some(bytes) = pdu.get(..8) else {
                return Parsed::Bad;
            };
            event.aux_sector = u64::from_be_bytes(bytes.try_into().unwrap_or_default());
        }
        // `struct blk_io_trace_remap`, big-endian: device_from, device_to,
        // sector_from; blkparse prints the event on device_to.
        EventKind::Remap => {
            let Some(remap) = pdu.get(..16) else {
                return Parsed::Bad;
            };
            let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            event.aux_dev = be32(&remap[0..]);
            event.dev = be32(&remap[4..]);
            event.aux_sector = u64::from_be_bytes(remap[8..16].try_into().unwrap_or_default());
        }
        _ => {}
    }
    Parsed::Event(event)
}

/// `__BLK_TA_GETRQ`, `__BLK_TA_INSERT`: only request-based devices trace them.
const TA_GETRQ: u32 = 4;
const TA_INSERT: u32 = 12;

/// Why a record of a `__BLK_TA_*` action the engine has no use for is skipped.
fn skipped_ta(action: u32) -> Parsed {
    Parsed::Skipped(match action {
        TA_GETRQ => "G",
        5 => "S",
        9 => "P",
        10 => "U",
        11 => "UT",
        TA_INSERT => "I",
        14 => "B",
        16 => "abort",
        17 => "driver data",
        _ => return Parsed::Bad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record in the byte order `big` says, as blktrace writes it.
    pub(crate) fn record(
        big: bool,
        time: u64,
        action: u32,
        sector: u64,
        bytes: u32,
        error: u16,
        pdu: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let put32 = |out: &mut Vec<u8>, v: u32| match big {
            true => out.extend_from_slice(&v.to_be_bytes()),
            false => out.extend_from_slice(&v.to_le_bytes()),
        };
        put32(&mut out, MAGIC | VERSION);
        put32(&mut out, 1);
        let wide = |v: u64| match big {
            true => v.to_be_bytes(),
            false => v.to_le_bytes(),
        };
        out.extend_from_slice(&wide(time));
        out.extend_from_slice(&wide(sector));
        for v in [bytes, action, 4242, (8 << 20), 0] {
            put32(&mut out, v);
        }
        let short = |v: u16| match big {
            true => v.to_be_bytes(),
            false => v.to_le_bytes(),
        };
        out.extend_from_slice(&short(error));
        out.extend_from_slice(&short(pdu.len() as u16));
        out.extend_from_slice(pdu);
        out
    }

    const QUEUE_W: u32 = 1 | ((1 << 4) | category::WRITE | category::SYNC) << 16;
    const ISSUE_W: u32 = 7 | ((1 << 6) | category::WRITE | category::SYNC) << 16;
    const COMPLETE_W: u32 = 8 | ((1 << 7) | category::WRITE | category::SYNC) << 16;

    #[test]
    fn both_byte_orders_read_alike_and_files_merge_by_time() {
        for big in [false, true] {
            let mut remap_pdu = Vec::new();
            remap_pdu.extend_from_slice(&((8u32 << 20) | 2).to_be_bytes());
            remap_pdu.extend_from_slice(&(8u32 << 20).to_be_bytes());
            remap_pdu.extend_from_slice(&100u64.to_be_bytes());
            let cpu0 = [
                record(
                    big,
                    10,
                    15 | (1 << 4) << 16 | category::WRITE << 16,
                    2148,
                    4096,
                    0,
                    &remap_pdu,
                ),
                record(big, 20, QUEUE_W, 2148, 4096, 0, &[]),
                record(big, 40, COMPLETE_W, 2148, 4096, 65531, &[]),
            ]
            .concat();
            let cpu1 = [
                record(big, 30, ISSUE_W, 2148, 4096, 0, &[]),
                // A message: skipped as notify.
                record(big, 35, 2 | category::NOTIFY << 16, 0, 0, 0, b"bfq hello"),
            ]
            .concat();
            let import = import(
                &[
                    ("sda.blktrace.0".into(), cpu0),
                    ("sda.blktrace.1".into(), cpu1),
                ],
                &[],
            )
            .unwrap();
            let kinds: Vec<u8> = import.events.iter().map(|e| e.kind).collect();
            assert_eq!(
                kinds,
                [
                    EventKind::Remap,
                    EventKind::Queue,
                    EventKind::Issue,
                    EventKind::Complete
                ]
                .map(|k| k as u8)
            );
            let remap = import.events[0];
            assert_eq!(
                (remap.dev, remap.aux_dev, remap.aux_sector, remap.nr_sector),
                (8 << 20, (8 << 20) | 2, 100, 8)
            );
            assert_eq!(&import.events[1].rwbs[..3], b"WS\0");
            assert_eq!(import.events[3].error, -5);
            assert_eq!(import.skipped_kinds.get("notify"), Some(&1));
            assert_eq!(import.partition_starts[0].start, 2048);
        }
    }

    /// What `blktrace` writes before any I/O (blktrace.c, kernel/trace/
    /// blktrace.c `trace_note_tsk` and `trace_note_time`), built by the
    /// on-disk format of include/uapi/linux/blktrace_api.h: a process-name
    /// record (pdu: the command), a timestamp record (pdu: seconds and
    /// nanoseconds) and a message, each named for what it is.
    #[test]
    fn notify_records_are_named_by_kind() {
        let notify = category::NOTIFY << 16;
        let trace = [
            record(
                false,
                0,
                notify | NOTIFY_PROCESS,
                0,
                0,
                0,
                b"fio\0\0\0\0\0\0\0\0\0\0\0\0\0",
            ),
            record(false, 0, notify | NOTIFY_TIMESTAMP, 0, 0, 0, &[0u8; 8]),
            record(
                false,
                1,
                notify | NOTIFY_MESSAGE | CGROUP,
                0,
                0,
                0,
                b"\0\0\0\0\0\0\0\x01bfq",
            ),
            record(false, 2, QUEUE_W, 8, 512, 0, &[]),
        ]
        .concat();
        let import = import(&[("sda.blktrace.0".into(), trace)], &[]).unwrap();
        assert_eq!(import.events.len(), 1);
        assert_eq!(import.skipped_kinds.get("process name"), Some(&1));
        assert_eq!(import.skipped_kinds.get("timestamp"), Some(&1));
        assert_eq!(import.skipped_kinds.get("notify"), Some(&1));
        assert_eq!(import.unparsed, 0);
        let note = import.notes.iter().find(|n| n.contains("skipped")).unwrap();
        assert!(
            note.contains("1 process name (pid → command)")
                && note.contains("1 timestamp (trace start, wall clock)")
                && note.contains("1 notify (m N)"),
            "{note}"
        );
    }

    #[test]
    fn garbage_and_cut_records_are_said() {
        let err = import(&[("x".into(), vec![0u8; 64])], &[]).unwrap_err();
        assert!(err.to_string().contains("not a blktrace file"), "{err}");
        let mut cut = record(false, 1, QUEUE_W, 8, 512, 0, &[]);
        cut.extend_from_slice(&record(false, 2, ISSUE_W, 8, 512, 0, &[])[..20]);
        let import = import(&[("cut".into(), cut)], &[]).unwrap();
        assert_eq!(import.events.len(), 1);
        assert!(import
            .notes
            .iter()
            .any(|n| n.contains("ends inside a record")));
    }
}
