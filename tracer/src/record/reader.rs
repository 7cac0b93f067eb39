//! Reads a recording: the header first, then its items in kernel order.
//! `analyze` replays them into an engine; a viewer (HTML, Perfetto) can walk
//! the same iterator.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use tracer_common::{BlockEvent, DirtyCounts, OpenEvent, ProcessEvent};

use crate::geometry::DiskGeometry;

use super::format::{
    self, read_pod, BlockHeader, BlockKind, RecordError, RecordHeader, Trailer, BARE_BLOCK_BYTES,
    BLOCK_EVENT_BYTES, BLOCK_HEADER_BYTES, DIRTY_COUNTS_BYTES, OPEN_EVENT_BYTES, PREAMBLE_BYTES,
    PROCESS_EVENT_BYTES, TAG_BLOCK, TAG_BLOCK_BARE, TAG_DIRTY, TAG_GEOMETRY, TAG_INTERVAL,
    TAG_LOST, TAG_NAMES, TAG_OPEN, TAG_PROCESS, TAG_RUN,
};
use super::pack;

/// One recorded item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Block(BlockEvent),
    Process(ProcessEvent),
    Open(Box<OpenEvent>),
    DirtyTotals(Vec<(u32, DirtyCounts)>),
    /// The kernel dropped block events here (a ring was full).
    EventsLost,
    /// The disks changed (a device came or went): the engine's new geometry.
    Geometry(Vec<DiskGeometry>),
    /// `report --interval` printed a report here, with these counters and
    /// duration, then reset the engine.
    Interval(Trailer),
    /// The owner names the live report printed next.
    OwnerNames(crate::model::OwnerNames),
    /// What `run` concluded (its report section and device choice).
    Run(Box<super::format::RunRecord>),
}

/// Where a file cut short ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Complete blocks read before the cut.
    pub complete_blocks: u64,
    /// Bytes of the file up to the end of the last complete block.
    pub complete_bytes: u64,
}

/// An open recording: its header, then [`Iterator`] over its items.
pub struct Recording<R: Read> {
    pub header: RecordHeader,
    input: R,
    /// The last trailer seen so far (the final counters once iteration ends).
    pub trailer: Option<Trailer>,
    /// Set when the file ends inside a block.
    pub truncated: Option<Truncation>,
    blocks: u64,
    offset: u64,
    raw: Vec<u8>,
    cursor: usize,
    failed: bool,
}

impl Recording<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        Recording::new(BufReader::new(File::open(path)?))
    }
}

enum Next {
    Block(BlockKind, Vec<u8>),
    End,
}

impl<R: Read> Recording<R> {
    /// Checks the preamble and reads the header block.
    pub fn new(mut input: R) -> Result<Self, RecordError> {
        let mut preamble = [0u8; PREAMBLE_BYTES];
        let got = read_full(&mut input, &mut preamble)?;
        if got < PREAMBLE_BYTES {
            // A prefix of our magic is a recording cut before its header.
            let magic = got.min(format::MAGIC.len());
            return Err(match preamble[..magic] == format::MAGIC[..magic] {
                true => RecordError::Empty,
                false => RecordError::Foreign,
            });
        }
        format::check_preamble(&preamble)?;
        let mut recording = Recording {
            header: RecordHeader::default(),
            input,
            trailer: None,
            truncated: None,
            blocks: 0,
            offset: PREAMBLE_BYTES as u64,
            raw: Vec::new(),
            cursor: 0,
            failed: false,
        };
        match recording.next_block()? {
            Next::Block(BlockKind::Header, json) => {
                recording.header = serde_json::from_slice(&json).map_err(RecordError::Header)?;
                Ok(recording)
            }
            _ => Err(RecordError::NoHeader),
        }
    }

    /// A u32 length and that much JSON: the value (None when the block
    /// ends first) and the bytes it took.
    fn json_record<T: serde::de::DeserializeOwned>(
        &self,
        rest: &[u8],
        what: &str,
    ) -> Result<(Option<T>, usize), RecordError> {
        let length = read_pod::<u32>(rest).unwrap_or(u32::MAX) as usize;
        let used = length.saturating_add(4);
        let value = match rest.get(4..used) {
            Some(json) => Some(
                serde_json::from_slice(json)
                    .map_err(|err| self.corrupt(format!("bad {what} record: {err}")))?,
            ),
            None => None,
        };
        Ok((value, used))
    }

    fn corrupt(&self, why: impl Into<String>) -> RecordError {
        RecordError::Corrupt {
            index: self.blocks,
            offset: self.offset,
            why: why.into(),
        }
    }

    /// The next whole block; a short one marks the file truncated.
    fn next_block(&mut self) -> Result<Next, RecordError> {
        let mut head = [0u8; BLOCK_HEADER_BYTES];
        let got = read_full(&mut self.input, &mut head)?;
        if got == 0 {
            return Ok(Next::End);
        }
        if got < BLOCK_HEADER_BYTES {
            return Ok(self.cut());
        }
        let header = BlockHeader::decode(&head).map_err(|why| self.corrupt(why.to_string()))?;
        let mut payload = Vec::new();
        (&mut self.input)
            .take(u64::from(header.payload_len))
            .read_to_end(&mut payload)?;
        if payload.len() < header.payload_len as usize {
            return Ok(self.cut());
        }
        if format::checksum(&payload) != header.checksum {
            return Err(self.corrupt("checksum mismatch"));
        }
        let kind = BlockKind::from_u8(header.kind)
            .ok_or_else(|| self.corrupt(format!("unknown block kind {}", header.kind)))?;
        let raw = zstd::bulk::decompress(&payload, header.raw_len as usize)
            .map_err(|err| self.corrupt(format!("cannot decompress: {err}")))?;
        if raw.len() != header.raw_len as usize {
            return Err(self.corrupt("decompressed length differs from the header's"));
        }
        self.blocks += 1;
        self.offset += (BLOCK_HEADER_BYTES + payload.len()) as u64;
        Ok(Next::Block(kind, raw))
    }

    fn cut(&mut self) -> Next {
        self.truncated = Some(Truncation {
            complete_blocks: self.blocks,
            complete_bytes: self.offset,
        });
        Next::End
    }

    /// The next item, reading blocks as needed; `None` at the end.
    fn next_item(&mut self) -> Result<Option<Item>, RecordError> {
        loop {
            if self.cursor < self.raw.len() {
                return self.decode_item().map(Some);
            }
            match self.next_block()? {
                Next::End => return Ok(None),
                Next::Block(BlockKind::Events, raw) => {
                    self.raw = raw;
                    self.cursor = 0;
                }
                Next::Block(BlockKind::PackedEvents, packed) => {
                    let mut raw = std::mem::take(&mut self.raw);
                    pack::unpack(&packed, &mut raw)
                        .map_err(|why| self.corrupt(format!("bad packed block: {why}")))?;
                    self.raw = raw;
                    self.cursor = 0;
                }
                Next::Block(BlockKind::Trailer, json) => {
                    self.trailer = Some(
                        serde_json::from_slice(&json)
                            .map_err(|err| self.corrupt(format!("bad trailer: {err}")))?,
                    );
                }
                Next::Block(BlockKind::Header, _) => {
                    return Err(self.corrupt("a second header"));
                }
            }
        }
    }

    fn decode_item(&mut self) -> Result<Item, RecordError> {
        let tag = self.raw[self.cursor];
        let rest = &self.raw[self.cursor + 1..];
        let (item, used) = match tag {
            TAG_BLOCK => (read_pod(rest).map(Item::Block), BLOCK_EVENT_BYTES),
            TAG_BLOCK_BARE => (bare_block(rest).map(Item::Block), BARE_BLOCK_BYTES),
            TAG_PROCESS => (read_pod(rest).map(Item::Process), PROCESS_EVENT_BYTES),
            TAG_OPEN => (
                read_pod(rest).map(|open: OpenEvent| Item::Open(Box::new(open))),
                OPEN_EVENT_BYTES,
            ),
            TAG_DIRTY => {
                let count = read_pod::<u32>(rest).unwrap_or(u32::MAX) as usize;
                let entry = 4 + DIRTY_COUNTS_BYTES;
                let used = count.saturating_mul(entry).saturating_add(4);
                let item = (rest.len() >= used).then(|| {
                    let totals = (0..count)
                        .filter_map(|index| {
                            let at = &rest[4 + index * entry..];
                            Some((read_pod::<u32>(at)?, read_pod::<DirtyCounts>(&at[4..])?))
                        })
                        .collect();
                    Item::DirtyTotals(totals)
                });
                (item, used)
            }
            TAG_LOST => (Some(Item::EventsLost), 0),
            TAG_INTERVAL => (
                Trailer::from_bytes(rest).map(Item::Interval),
                format::INTERVAL_BYTES,
            ),
            TAG_GEOMETRY => {
                let (disks, used) = self.json_record(rest, "geometry")?;
                (disks.map(Item::Geometry), used)
            }
            TAG_NAMES => {
                let (names, used) = self.json_record(rest, "owner names")?;
                (names.map(Item::OwnerNames), used)
            }
            TAG_RUN => {
                let (run, used) = self.json_record(rest, "run")?;
                (run.map(|run| Item::Run(Box::new(run))), used)
            }
            other => return Err(self.corrupt(format!("unknown record tag {other}"))),
        };
        let item = item.ok_or_else(|| self.corrupt("a record runs past its block"))?;
        self.cursor += 1 + used;
        Ok(item)
    }
}

impl<R: Read> Iterator for Recording<R> {
    type Item = Result<Item, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.next_item().transpose();
        if matches!(next, Some(Err(_))) {
            self.failed = true;
        }
        next
    }
}

/// Reads until `buf` is full or the input ends; the count read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(got)
}

/// A [`TAG_BLOCK_BARE`] record: the event's bytes up to its owner, which is unknown.
fn bare_block(rest: &[u8]) -> Option<BlockEvent> {
    let bare = rest.get(..BARE_BLOCK_BYTES)?;
    let mut bytes = [0u8; std::mem::size_of::<BlockEvent>()];
    bytes[..BARE_BLOCK_BYTES].copy_from_slice(bare);
    let mut event: BlockEvent = read_pod(&bytes)?;
    event.owner = tracer_common::Owner::UNKNOWN;
    Some(event)
}
