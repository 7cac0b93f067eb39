//! Recording without cost on the hot path: [`RecordingSink`] copies each
//! event's fixed bytes into a preallocated buffer (no syscall, allocation,
//! lock or formatting per event) and hands a full buffer to the writer
//! thread, which packs and compresses it into one block and appends it. Buffers go
//! back to the sink for reuse, so steady state allocates nothing.

use std::fs::File;
use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracer_common::{BlockEvent, DirtyCounts, OpenEvent, Owner, ProcessEvent};

use crate::error::{Context, Error, Result};
use crate::geometry::DiskGeometry;
use crate::sink::{DiskSink, EventSink};

use super::format::{
    self, bytes_of, BlockHeader, BlockKind, RecordError, RecordHeader, Trailer, BARE_BLOCK_BYTES,
    BLOCK_RAW_BYTES, OPEN_EVENT_BYTES, TAG_BLOCK, TAG_BLOCK_BARE, TAG_DIRTY, TAG_GEOMETRY,
    TAG_INTERVAL, TAG_LOST, TAG_NAMES, TAG_OPEN, TAG_PROCESS,
};
use super::pack;

/// A partial block older than this is shipped anyway, so a killed recorder
/// loses at most about this much of the trace.
const SHIP_EVERY: Duration = Duration::from_secs(1);
/// zstd's fastest regular level: the writer thread shares the CPUs with the
/// workload; ratio matters less than staying cheap.
const ZSTD_LEVEL: i32 = 1;
/// Room past a full block for the largest fixed record, so a push never grows the buffer.
const BUFFER_BYTES: usize = BLOCK_RAW_BYTES + 1 + OPEN_EVENT_BYTES;

enum Message {
    Header(Box<RecordHeader>),
    Events(Vec<u8>),
    Trailer(Trailer),
}

/// Tees events into a recording, then passes them to `inner`.
pub struct RecordingSink<S> {
    pub inner: S,
    recorder: Option<Recorder>,
}

struct Recorder {
    buffer: Vec<u8>,
    to_writer: Sender<Message>,
    spares: Receiver<Vec<u8>>,
    last_ship: Option<Instant>,
}

impl<S> RecordingSink<S> {
    /// Without a writer it only passes events on (one branch per event).
    pub fn new(inner: S, writer: Option<&mut Writer>) -> RecordingSink<S> {
        let recorder = writer.map(|writer| Recorder {
            buffer: Vec::with_capacity(BUFFER_BYTES),
            to_writer: writer.to_thread.clone(),
            // A second sink on one writer gets no recycled buffers, nothing worse.
            spares: writer.spares.take().unwrap_or_else(|| mpsc::channel().1),
            last_ship: None,
        });
        RecordingSink { inner, recorder }
    }

    /// Ships what is buffered and the final counters (on the consumer
    /// thread, after the last drain).
    pub fn finish_recording(&mut self, trailer: Trailer) {
        if let Some(recorder) = &mut self.recorder {
            recorder.ship();
            let _ = recorder.to_writer.send(Message::Trailer(trailer));
        }
    }
}

impl<S> RecordingSink<S> {
    /// `report --interval` printed a report here and will reset the engine:
    /// `analyze` prints one here too.
    /// The names the live report gave its owners, before its interval mark
    /// or trailer, so `analyze` prints the same names.
    pub fn record_names(&mut self, names: &crate::model::OwnerNames) {
        self.push_json(TAG_NAMES, names);
    }

    /// What `run` concluded, before the trailer, so `analyze` prints it too.
    pub fn record_run(&mut self, run: &super::format::RunRecord) {
        self.push_json(super::format::TAG_RUN, run);
    }

    /// A record of a tag, a u32 length and JSON.
    fn push_json(&mut self, tag: u8, value: &impl serde::Serialize) {
        if let Some(recorder) = &mut self.recorder {
            if let Ok(json) = serde_json::to_vec(value) {
                recorder.buffer.push(tag);
                recorder
                    .buffer
                    .extend_from_slice(&(json.len() as u32).to_le_bytes());
                recorder.buffer.extend_from_slice(&json);
                recorder.ship_if_full();
            }
        }
    }

    pub fn mark_interval(&mut self, numbers: Trailer) {
        if let Some(recorder) = &mut self.recorder {
            recorder.push(TAG_INTERVAL, &numbers.to_bytes());
        }
    }
}

impl Recorder {
    #[inline(always)]
    fn push(&mut self, tag: u8, bytes: &[u8]) {
        self.buffer.push(tag);
        self.buffer.extend_from_slice(bytes);
        self.ship_if_full();
    }

    #[inline(always)]
    fn ship_if_full(&mut self) {
        if self.buffer.len() >= BLOCK_RAW_BYTES {
            self.ship();
        }
    }

    /// Hands the buffer to the writer and takes a spare (once per block).
    fn ship(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let spare = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BUFFER_BYTES));
        let full = std::mem::replace(&mut self.buffer, spare);
        // A writer that stopped (its error is reported at close) drops the block.
        let _ = self.to_writer.send(Message::Events(full));
        self.last_ship = Some(Instant::now());
    }
}

impl<S> Deref for RecordingSink<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.inner
    }
}

impl<S> DerefMut for RecordingSink<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

/// Forwards every `EventSink` method: a new one must be recorded and passed on here.
impl<S: EventSink> EventSink for RecordingSink<S> {
    #[inline]
    fn block_event(&mut self, event: &BlockEvent) {
        if let Some(recorder) = &mut self.recorder {
            if event.owner == Owner::UNKNOWN {
                recorder.push(TAG_BLOCK_BARE, &bytes_of(event)[..BARE_BLOCK_BYTES]);
            } else {
                recorder.push(TAG_BLOCK, bytes_of(event));
            }
        }
        self.inner.block_event(event);
    }

    fn process_event(&mut self, event: &ProcessEvent) {
        if let Some(recorder) = &mut self.recorder {
            recorder.push(TAG_PROCESS, bytes_of(event));
        }
        self.inner.process_event(event);
    }

    fn open_event(&mut self, event: &OpenEvent) {
        if let Some(recorder) = &mut self.recorder {
            recorder.push(TAG_OPEN, bytes_of(event));
        }
        self.inner.open_event(event);
    }

    /// Not recorded: a replay has no tag waits (docs/recording.md).
    fn tag_wait_totals(&mut self, totals: &[(tracer_common::TagWaitKey, tracer_common::TagWaits)]) {
        self.inner.tag_wait_totals(totals);
    }

    fn dirty_buffer_totals(&mut self, totals: &[(u32, DirtyCounts)]) {
        if let Some(recorder) = &mut self.recorder {
            // Once per query, not per event: may grow the buffer.
            recorder.buffer.push(TAG_DIRTY);
            let count = totals.len() as u32;
            recorder.buffer.extend_from_slice(&count.to_le_bytes());
            for (dev, counts) in totals {
                recorder.buffer.extend_from_slice(&dev.to_le_bytes());
                recorder.buffer.extend_from_slice(bytes_of(counts));
            }
            recorder.ship_if_full();
        }
        self.inner.dirty_buffer_totals(totals);
    }

    fn owners_read(&mut self, read: bool) {
        self.inner.owners_read(read);
    }

    fn events_lost(&mut self) {
        if let Some(recorder) = &mut self.recorder {
            recorder.push(TAG_LOST, &[]);
        }
        self.inner.events_lost();
    }

    fn drained(&mut self, now: Instant) {
        if let Some(recorder) = &mut self.recorder {
            let due = recorder
                .last_ship
                .is_none_or(|last| now.saturating_duration_since(last) >= SHIP_EVERY);
            if due && !recorder.buffer.is_empty() {
                recorder.ship();
            }
        }
        self.inner.drained(now);
    }
}

impl<S: DiskSink> DiskSink for RecordingSink<S> {
    fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
        if let Some(recorder) = &mut self.recorder {
            // Rare (a device came or went): JSON, like the header's geometry.
            if let Ok(json) = serde_json::to_vec(&disks) {
                recorder.buffer.push(TAG_GEOMETRY);
                recorder
                    .buffer
                    .extend_from_slice(&(json.len() as u32).to_le_bytes());
                recorder.buffer.extend_from_slice(&json);
                recorder.ship_if_full();
            }
        }
        self.inner.refresh_disks(disks);
    }
}

/// The writer thread and the file it appends to.
pub struct Writer {
    path: PathBuf,
    to_thread: Sender<Message>,
    /// Taken by the one [`RecordingSink`] this writer feeds.
    spares: Option<Receiver<Vec<u8>>>,
    thread: Option<JoinHandle<std::result::Result<WriteSummary, RecordError>>>,
}

/// What the writer wrote.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteSummary {
    pub blocks: u64,
    pub bytes: u64,
}

impl Writer {
    /// Creates the file now (so a bad path fails before tracing starts) and
    /// starts the thread. Blocks wait for [`Writer::header`].
    pub fn create(path: &Path) -> Result<Writer> {
        let file = File::create(path)
            .with_context(|| format!("cannot create the recording {}", path.display()))?;
        let (to_thread, inbox) = mpsc::channel();
        let (spare_tx, spares) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("iosplit-writer".into())
            .spawn(move || write_blocks(file, inbox, spare_tx))
            .map_err(|err| Error::failure(format!("cannot start the writer thread: {err}")))?;
        Ok(Writer {
            path: path.to_path_buf(),
            to_thread,
            spares: Some(spares),
            thread: Some(thread),
        })
    }

    /// The header, once the probes are attached (the flavor is known then).
    pub fn header(&self, header: RecordHeader) {
        let _ = self.to_thread.send(Message::Header(Box::new(header)));
    }

    /// Waits for every block to be written; the sink must be gone or finished.
    pub fn close(mut self) -> Result<WriteSummary> {
        match self.join() {
            Some(Ok(Ok(summary))) => Ok(summary),
            Some(Ok(Err(err))) => Err(Error::caused(
                format!(
                    "the recording {} stopped early (it reads up to its last complete block)",
                    self.path.display()
                ),
                err,
            )),
            _ => Err(Error::failure(
                "the recording's writer thread stopped unexpectedly",
            )),
        }
    }

    /// Lets the thread end (once the sink's sender is gone too) and waits for it.
    fn join(
        &mut self,
    ) -> Option<std::thread::Result<std::result::Result<WriteSummary, RecordError>>> {
        self.to_thread = mpsc::channel().0;
        self.thread.take().map(JoinHandle::join)
    }
}

/// Dropped without `close`: tracing never started (no privileges, no
/// probes). Removes the file it created if it holds nothing but the preamble.
impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(Ok(Err(RecordError::NoHeader))) = self.join() {
            let only_preamble = std::fs::symlink_metadata(&self.path)
                .is_ok_and(|m| m.is_file() && m.len() == format::PREAMBLE_BYTES as u64);
            if only_preamble {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// The writer thread: preamble, header, then blocks in arrival order.
fn write_blocks(
    file: File,
    inbox: Receiver<Message>,
    spares: Sender<Vec<u8>>,
) -> std::result::Result<WriteSummary, RecordError> {
    let mut out = BlockFile {
        file,
        scratch: Vec::new(),
        packed: Vec::new(),
        summary: WriteSummary::default(),
        compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(RecordError::Write)?,
    };
    let mut waiting: Vec<Vec<u8>> = Vec::new();
    let mut header_written = false;
    let mut failed: Option<RecordError> = None;
    out.file
        .write_all(&format::preamble())
        .map_err(RecordError::Write)?;
    out.summary.bytes += format::PREAMBLE_BYTES as u64;
    // After a write error keep receiving, so the sink never waits, but write nothing.
    for message in inbox {
        if failed.is_some() {
            if let Message::Events(buffer) = message {
                recycle(buffer, &spares);
            }
            continue;
        }
        let result = match message {
            Message::Header(header) => {
                let mut result = out.write_json(BlockKind::Header, &*header);
                header_written = true;
                for buffer in waiting.drain(..) {
                    if result.is_ok() {
                        result = out.write_events(&buffer);
                    }
                    recycle(buffer, &spares);
                }
                result
            }
            Message::Events(buffer) if !header_written => {
                waiting.push(buffer);
                Ok(())
            }
            Message::Events(buffer) => {
                let result = out.write_events(&buffer);
                recycle(buffer, &spares);
                result
            }
            Message::Trailer(trailer) => out.write_json(BlockKind::Trailer, &trailer),
        };
        if let Err(err) = result {
            failed = Some(err);
        }
    }
    match failed {
        Some(err) => Err(err),
        None if !header_written => Err(RecordError::NoHeader),
        None => Ok(out.summary),
    }
}

fn recycle(mut buffer: Vec<u8>, spares: &Sender<Vec<u8>>) {
    buffer.clear();
    let _ = spares.send(buffer);
}

/// The recording file as the writer thread appends to it.
struct BlockFile {
    file: File,
    /// The last block's compressed payload, reused.
    scratch: Vec<u8>,
    /// The last events block, packed, reused.
    packed: Vec<u8>,
    /// One compression context for every block (not one per block).
    compressor: zstd::bulk::Compressor<'static>,
    summary: WriteSummary,
}

impl BlockFile {
    fn write_json(
        &mut self,
        kind: BlockKind,
        value: &impl serde::Serialize,
    ) -> std::result::Result<(), RecordError> {
        let json = serde_json::to_vec(value).map_err(RecordError::Encode)?;
        self.write(kind, &json)
    }

    /// Events packed before compression (zstd's time follows its input's
    /// size), or as they are if they do not pack.
    fn write_events(&mut self, raw: &[u8]) -> std::result::Result<(), RecordError> {
        let mut packed = std::mem::take(&mut self.packed);
        let result = match pack::pack(raw, &mut packed) {
            true => self.write(BlockKind::PackedEvents, &packed),
            false => self.write(BlockKind::Events, raw),
        };
        self.packed = packed;
        result
    }

    fn write(&mut self, kind: BlockKind, raw: &[u8]) -> std::result::Result<(), RecordError> {
        let scratch = &mut self.scratch;
        scratch.clear();
        scratch.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.compressor
            .compress_to_buffer(raw, &mut *scratch)
            .map_err(RecordError::Write)?;
        let header = BlockHeader {
            kind: kind as u8,
            raw_len: raw.len() as u32,
            payload_len: scratch.len() as u32,
            checksum: format::checksum(scratch),
        };
        // Header and payload in one write: a cut leaves a short last block, never a gap.
        let mut block = Vec::with_capacity(format::BLOCK_HEADER_BYTES + scratch.len());
        block.extend_from_slice(&header.encode());
        block.extend_from_slice(scratch);
        self.file.write_all(&block).map_err(RecordError::Write)?;
        self.summary.blocks += 1;
        self.summary.bytes += block.len() as u64;
        Ok(())
    }
}
