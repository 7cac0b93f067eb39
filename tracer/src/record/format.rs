//! The recording file, format version [`FORMAT_VERSION`].
//!
//! ```text
//! file      = preamble block*
//! preamble  = "IOSPLTRC" | u32 format version | u32 size of BlockEvent    (16 bytes, little-endian)
//! block     = block header (24 bytes) | payload (one zstd frame)
//! header    = "BLK\0" | u8 kind | 3 zero bytes | u32 raw length | u32 payload length
//!             | u64 FNV-1a of the payload
//! ```
//! Block kinds: [`BlockKind::Header`] (JSON [`RecordHeader`], first),
//! [`BlockKind::Events`] (tagged records in kernel order),
//! [`BlockKind::PackedEvents`] (the same records with each block event
//! packed into varints before compression, see [`super::pack`]) and
//! [`BlockKind::Trailer`] (JSON [`Trailer`]; the last one wins). An events
//! payload is a run of records, each a tag byte and its fixed bytes:
//! a `BlockEvent`, a `ProcessEvent`, an `OpenEvent`, the dirty-buffer
//! totals (u32 count, then count × (u32 dev, `DirtyCounts`)), "events were
//! lost" (no bytes), the disks as they changed mid-trace (u32 length, then
//! JSON `Vec<DiskGeometry>`), an interval mark (`report --interval`
//! printed a report here and reset the engine: the [`Trailer`] numbers as
//! four u64 and one f64), the owner names a live report resolved, or (from
//! format 3) what `run` concluded (u32 length, then JSON [`RunRecord`]), and
//! block events without an owner stored without it ([`TAG_BLOCK_BARE`]).
//!
//! This build writes format 4 and reads 2 to 4: format 3 is format 4
//! without packed blocks, and format 2 is format 3 without the run record.
//! The header's `raw length` is what the zstd frame holds: for a packed
//! block, the packed bytes.
//!
//! Each block stands alone, so a file cut short (full disk, killed recorder)
//! reads up to its last complete block. The event structs are stored as
//! their in-memory bytes: their layout is part of the version, and
//! `layout_is_pinned_to_the_version` fails when one changes without a bump.

use serde::{Deserialize, Serialize};
use tracer_common::{BlockEvent, DirtyCounts, OpenEvent, ProcessEvent};

use crate::geometry::DiskGeometry;

pub const MAGIC: [u8; 8] = *b"IOSPLTRC";
/// Bump on any change of the layout below or of the event structs.
pub const FORMAT_VERSION: u32 = 4;
/// The oldest format this build still reads (same event layout, fewer tags
/// and no packed blocks).
pub const OLDEST_READABLE: u32 = 2;
pub const PREAMBLE_BYTES: usize = 16;
pub const BLOCK_MAGIC: [u8; 4] = *b"BLK\0";
pub const BLOCK_HEADER_BYTES: usize = 24;
/// Raw bytes of events per block: about 18,000 block events.
pub const BLOCK_RAW_BYTES: usize = 1 << 20;
/// Refused above this, so a corrupt length cannot ask for gigabytes.
pub const MAX_BLOCK_BYTES: usize = 64 << 20;

pub const TAG_BLOCK: u8 = 1;
pub const TAG_PROCESS: u8 = 2;
pub const TAG_OPEN: u8 = 3;
pub const TAG_DIRTY: u8 = 4;
pub const TAG_LOST: u8 = 5;
pub const TAG_GEOMETRY: u8 = 6;
pub const TAG_INTERVAL: u8 = 7;
/// The owner names a live report resolved (JSON [`crate::model::OwnerNames`]).
pub const TAG_NAMES: u8 = 8;
/// What `run` concluded (JSON [`RunRecord`]), just before the trailer.
pub const TAG_RUN: u8 = 9;
/// A `BlockEvent` without an owner (every event but a queue with owners
/// read): its first [`BARE_BLOCK_BYTES`], the owner left unknown. Saves the
/// writer 40 of 96 bytes on three events of four.
pub const TAG_BLOCK_BARE: u8 = 10;
pub const BARE_BLOCK_BYTES: usize = std::mem::offset_of!(BlockEvent, owner);
/// An interval mark: the trailer's five numbers, little-endian.
pub const INTERVAL_BYTES: usize = 40;

pub const BLOCK_EVENT_BYTES: usize = std::mem::size_of::<BlockEvent>();
pub const PROCESS_EVENT_BYTES: usize = std::mem::size_of::<ProcessEvent>();
pub const OPEN_EVENT_BYTES: usize = std::mem::size_of::<OpenEvent>();
pub const DIRTY_COUNTS_BYTES: usize = std::mem::size_of::<DirtyCounts>();

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    Header = 1,
    Events = 2,
    Trailer = 3,
    /// Events, packed (from format 4): see [`super::pack`].
    PackedEvents = 4,
}

impl BlockKind {
    pub fn from_u8(value: u8) -> Option<BlockKind> {
        match value {
            1 => Some(BlockKind::Header),
            2 => Some(BlockKind::Events),
            3 => Some(BlockKind::Trailer),
            4 => Some(BlockKind::PackedEvents),
            _ => None,
        }
    }
}

/// Everything analysis needs besides the events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordHeader {
    /// "iosplit-trace 0.1.0".
    pub tool: String,
    /// The traced kernel's `uname -r`.
    pub kernel_release: String,
    /// "raw tracepoints", "classic tracepoints", or the imported text's kind.
    pub probe_flavor: String,
    /// The command that recorded: "record", "report" or "run".
    pub recorded_by: String,
    /// Wall clock at the start, nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
    /// The geometry the live engine was built with.
    pub geometry: Vec<DiskGeometry>,
    pub unsupported_probes: Vec<String>,
    /// `run`'s command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_command: Option<Vec<String>>,
    /// Sizes of BlockEvent, ProcessEvent, OpenEvent, DirtyCounts, for a human
    /// reading the header; the reader checks the preamble.
    pub event_layout: [usize; 4],
    /// Whether owners were read (not `--no-owners`); recordings before
    /// the flag always read them.
    #[serde(default = "owners_by_default")]
    pub owners: bool,
}

fn owners_by_default() -> bool {
    true
}

/// What `run` concluded on the traced machine: its section of the report,
/// which needs that machine's /proc and the files' extent maps, and what
/// decided which devices its report kept. `analyze` prints the same.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run: crate::model::RunReport,
    /// Devices the command's process tree queued I/O to.
    pub tracked_devices: Vec<String>,
    /// "major:minor" of the devices named on the command line.
    pub named: Vec<String>,
    /// Devices the command wrote to (diagnoses elsewhere are other findings).
    pub written: Vec<String>,
}

/// The kernel's loss counters and the traced time, as at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trailer {
    pub dropped: u64,
    pub syscall_dropped: u64,
    pub read_failed: u64,
    pub missed: u64,
    /// Seconds the live report covered.
    pub duration_s: f64,
}

impl Trailer {
    pub fn to_bytes(&self) -> [u8; INTERVAL_BYTES] {
        let mut bytes = [0u8; INTERVAL_BYTES];
        let numbers = [
            self.dropped,
            self.syscall_dropped,
            self.read_failed,
            self.missed,
            self.duration_s.to_bits(),
        ];
        for (chunk, number) in bytes.chunks_exact_mut(8).zip(numbers) {
            chunk.copy_from_slice(&number.to_le_bytes());
        }
        bytes
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Trailer> {
        let number = |index: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                bytes.get(index * 8..index * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(Trailer {
            dropped: number(0)?,
            syscall_dropped: number(1)?,
            read_failed: number(2)?,
            missed: number(3)?,
            duration_s: f64::from_bits(number(4)?),
        })
    }
}

/// What is wrong inside one block of a recording.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("no block magic")]
    NoMagic,
    #[error("block lengths {raw} / {payload} exceed {MAX_BLOCK_BYTES}")]
    TooLong { raw: u32, payload: u32 },
    #[error("unpacks to more than {MAX_BLOCK_BYTES} bytes")]
    UnpacksTooLong,
    #[error("a packed block event runs past its block")]
    EventCut,
    #[error("an owner runs past its block")]
    OwnerCut,
    #[error("unknown or cut record (tag {0}) in a packed block")]
    BadRecord(u8),
}

/// Why a recording cannot be read (each prints as one line).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read the recording")]
    Io(#[from] std::io::Error),
    #[error("cannot write the recording")]
    Write(#[source] std::io::Error),
    #[error("not an iosplit-trace recording (no IOSPLTRC magic)")]
    Foreign,
    #[error("the file is shorter than the recording preamble")]
    Empty,
    #[error("recording format {found} with {event_bytes}-byte block events; this build reads formats {OLDEST_READABLE} to {FORMAT_VERSION} with {BLOCK_EVENT_BYTES}-byte events (use the iosplit-trace that wrote it)")]
    Version { found: u32, event_bytes: u32 },
    #[error("block {index} at byte {offset} is corrupt: {why}")]
    Corrupt {
        index: u64,
        offset: u64,
        why: String,
    },
    #[error("the recording has no header block")]
    NoHeader,
    #[error("the recording's header is unreadable")]
    Header(#[source] serde_json::Error),
    #[error("cannot encode the recording's header")]
    Encode(#[source] serde_json::Error),
}

pub fn preamble() -> [u8; PREAMBLE_BYTES] {
    let mut bytes = [0u8; PREAMBLE_BYTES];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(BLOCK_EVENT_BYTES as u32).to_le_bytes());
    bytes
}

/// Checks a preamble: the magic, then the version and the event layout.
pub fn check_preamble(bytes: &[u8; PREAMBLE_BYTES]) -> Result<(), RecordError> {
    if bytes[..8] != MAGIC {
        return Err(RecordError::Foreign);
    }
    let found = le_u32(&bytes[8..12]);
    let event_bytes = le_u32(&bytes[12..16]);
    let readable = (OLDEST_READABLE..=FORMAT_VERSION).contains(&found);
    if !readable || event_bytes as usize != BLOCK_EVENT_BYTES {
        return Err(RecordError::Version { found, event_bytes });
    }
    Ok(())
}

pub struct BlockHeader {
    pub kind: u8,
    pub raw_len: u32,
    pub payload_len: u32,
    pub checksum: u64,
}

impl BlockHeader {
    pub fn encode(&self) -> [u8; BLOCK_HEADER_BYTES] {
        let mut bytes = [0u8; BLOCK_HEADER_BYTES];
        bytes[..4].copy_from_slice(&BLOCK_MAGIC);
        bytes[4] = self.kind;
        bytes[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.checksum.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; BLOCK_HEADER_BYTES]) -> Result<BlockHeader, Damage> {
        if bytes[..4] != BLOCK_MAGIC {
            return Err(Damage::NoMagic);
        }
        let header = BlockHeader {
            kind: bytes[4],
            raw_len: le_u32(&bytes[8..12]),
            payload_len: le_u32(&bytes[12..16]),
            checksum: u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default()),
        };
        if header.raw_len as usize > MAX_BLOCK_BYTES
            || header.payload_len as usize > MAX_BLOCK_BYTES
        {
            return Err(Damage::TooLong {
                raw: header.raw_len,
                payload: header.payload_len,
            });
        }
        Ok(header)
    }
}

/// FNV-1a, 64 bits: catches torn and flipped bytes; not cryptographic.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().unwrap_or_default())
}

/// The in-memory bytes of a wire struct.
pub fn bytes_of<T: aya::Pod>(value: &T) -> &[u8] {
    // SAFETY: `Pod` types are `repr(C)` integers and byte arrays with no
    // padding, so every byte is initialized; the slice borrows `value`.
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
}

/// A wire struct from the front of `bytes`, if there are enough.
pub fn read_pod<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length was checked; `Pod` types are valid for any bit
    // pattern; `read_unaligned` needs no alignment.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new field in an event struct changes its bytes in the file: this
    /// fails until FORMAT_VERSION is bumped together with the sizes here.
    #[test]
    fn layout_is_pinned_to_the_version() {
        assert_eq!(
            (
                FORMAT_VERSION,
                BLOCK_EVENT_BYTES,
                PROCESS_EVENT_BYTES,
                OPEN_EVENT_BYTES,
                DIRTY_COUNTS_BYTES
            ),
            (4, 96, 40, 296, 64)
        );
    }

    #[test]
    fn preamble_round_trips_and_refuses_other_layouts() {
        let bytes = preamble();
        check_preamble(&bytes).unwrap();
        let mut future = bytes;
        let next = FORMAT_VERSION + 1;
        future[8..12].copy_from_slice(&next.to_le_bytes());
        let err = check_preamble(&future).unwrap_err();
        assert!(err.to_string().contains(&format!("format {next}")), "{err}");
        let mut wider = bytes;
        wider[12] = 64;
        assert!(matches!(
            check_preamble(&wider),
            Err(RecordError::Version {
                event_bytes: 64,
                ..
            })
        ));
        let mut foreign = bytes;
        foreign[0] = b'x';
        assert!(matches!(
            check_preamble(&foreign),
            Err(RecordError::Foreign)
        ));
    }

    #[test]
    fn block_header_round_trips_and_bounds_lengths() {
        let header = BlockHeader {
            kind: BlockKind::Events as u8,
            raw_len: 10,
            payload_len: 7,
            checksum: checksum(b"abc"),
        };
        let decoded = BlockHeader::decode(&header.encode()).unwrap();
        assert_eq!(
            (
                decoded.kind,
                decoded.raw_len,
                decoded.payload_len,
                decoded.checksum
            ),
            (2, 10, 7, checksum(b"abc"))
        );
        let mut huge = header.encode();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(BlockHeader::decode(&huge).is_err());
        assert_ne!(checksum(b"abc"), checksum(b"abd"));
    }
}
