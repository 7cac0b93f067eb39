//! Probe records → [`BlockEvent`], one decoder per probe flavor: the classic
//! tracepoints' record bytes with the format-file offsets
//! ([`ClassicDecoder`]), and the BTF tracepoints' windows of `struct bio` and
//! `struct request` with the BTF offsets ([`BtfDecoder`]); `Decoding` holds
//! the loaded flavor's for the consumer. Pure, so each kernel layout is
//! unit-tested.

use tracer_common::{
    BlockEvent, BtfEvent, BtfQueueEvent, ClassicFields, ClassicRecord, EventKind, PassthroughEvent,
    ProbeObject, CLASSIC_RECORD_BYTES, CLASSIC_RECORD_START, NO_FIELD, RWBS_BYTES,
};

use super::layout::ObjectLayout;
use super::passthrough::PassthroughJoin;
use super::ProbeFlavor;

/// Decodes the classic probes' records of every kind with this kernel's
/// format-file offsets.
#[derive(Clone, Debug)]
pub struct ClassicDecoder {
    offsets: ClassicFields,
}

/// Whether a field of `size` bytes at record offset `offset` lies in the copied bytes.
pub fn within_copy(offset: u16, size: usize) -> bool {
    offset == NO_FIELD
        || (usize::from(offset) >= CLASSIC_RECORD_START
            && usize::from(offset) + size <= CLASSIC_RECORD_START + CLASSIC_RECORD_BYTES)
}

impl ClassicDecoder {
    /// `offsets[kind as usize]` for each kind; absent kinds are never decoded.
    pub fn new(offsets: ClassicFields) -> ClassicDecoder {
        ClassicDecoder { offsets }
    }

    pub fn decode(&self, record: &ClassicRecord) -> Option<BlockEvent> {
        let kind = EventKind::from_u8(record.kind)?;
        let fields = &self.offsets[kind as usize];
        let bytes = &record.record;
        let at = |offset: u16, size: usize| -> Option<&[u8]> {
            if offset == NO_FIELD {
                return None;
            }
            let start = usize::from(offset).checked_sub(CLASSIC_RECORD_START)?;
            bytes.get(start..start + size)
        };
        let u32_at =
            |offset| at(offset, 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        let u64_at = |offset| {
            at(offset, 8).map_or(0, |b| {
                u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            })
        };
        let mut rwbs = [0u8; RWBS_BYTES];
        if let Some(text) = at(fields.rwbs, RWBS_BYTES) {
            rwbs.copy_from_slice(text);
        }
        Some(BlockEvent {
            ts_ns: record.ts_ns,
            sector: u64_at(fields.sector),
            aux_sector: u64_at(fields.aux_sector),
            dev: u32_at(fields.dev),
            aux_dev: u32_at(fields.aux_dev),
            nr_sector: u32_at(fields.nr_sector),
            tgid: record.tgid,
            rwbs,
            kind: record.kind,
            flags: 0,
            segments: 0,
            error: u32_at(fields.error) as i32,
            // The classic flavor knows only the tgid: no bio to follow.
            owner: tracer_common::Owner::UNKNOWN,
        })
    }
}

/// Decodes the BTF-typed probes' `BtfEvent`s the way the classic
/// tracepoints would have formatted them (`TP_fast_assign` of each event).
#[derive(Clone, Copy, Debug)]
pub struct BtfDecoder {
    layout: ObjectLayout,
}

impl BtfDecoder {
    pub fn new(layout: ObjectLayout) -> BtfDecoder {
        BtfDecoder { layout }
    }

    #[inline(always)]
    pub fn decode(&self, object: &BtfEvent) -> Option<BlockEvent> {
        let kind = EventKind::from_u8(object.kind)?;
        let window = &object.window;
        let u32_at = |at: usize| {
            window
                .get(at..at + 4)
                .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        let u64_at = |at: usize| {
            window.get(at..at + 8).map_or(0, |b| {
                u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            })
        };
        let fields = &self.layout.fields;
        let ops = &self.layout.ops;
        let mut event = BlockEvent {
            ts_ns: object.ts_ns,
            dev: object.dev,
            tgid: object.tgid,
            kind: object.kind,
            segments: object.segments,
            ..BlockEvent::ZERO
        };
        match kind.object() {
            // blk_add_trace_rq / block_rq's TP_fast_assign.
            ProbeObject::Request => {
                let opf = u32_at(fields.rq_flags);
                let position = u64_at(fields.rq_sector);
                let passthrough = ops.is_passthrough(opf);
                event.rwbs = ops.rwbs(opf);
                // Issue, requeue and completion name the request itself
                // (hctx address and tag; the kernel's top 16 address bits are
                // all ones), so a completion finds its command exactly.
                let named = matches!(
                    kind,
                    EventKind::Issue | EventKind::Requeue | EventKind::Complete
                );
                if let Some((hctx, tag)) = fields.rq_identity.filter(|_| named) {
                    let tag = u32_at(tag);
                    if tag != u32::MAX {
                        event.aux_sector = (u64_at(hctx) << 16) | u64::from(tag & 0xffff);
                    }
                }
                if kind == EventKind::RqRemap {
                    event.aux_dev = object.arg2;
                    event.aux_sector = object.arg;
                }
                if kind == EventKind::Complete {
                    event.sector = position;
                    event.nr_sector = (object.arg >> 9) as u32;
                    event.error = crate::blk::errno_of_blk_status(object.arg2 as u8);
                } else {
                    event.sector = match passthrough || position == u64::MAX {
                        true => 0,
                        false => position,
                    };
                    event.nr_sector = match passthrough {
                        true => 0,
                        false => u32_at(fields.rq_data_len) >> 9,
                    };
                }
            }
            ProbeObject::BufferHead => return None,
            ProbeObject::Bio => {
                event.rwbs = ops.rwbs(u32_at(fields.bio_opf));
                event.sector = u64_at(fields.bio_sector);
                event.nr_sector = u32_at(fields.bio_size) >> 9;
                match kind {
                    EventKind::Remap => {
                        event.aux_dev = object.arg2;
                        event.aux_sector = object.arg;
                    }
                    EventKind::Split => event.aux_sector = object.arg,
                    EventKind::BioComplete => {
                        let status = window.get(fields.bio_status).copied().unwrap_or(0);
                        event.error = crate::blk::errno_of_blk_status(status);
                    }
                    _ => {}
                }
            }
        }
        Some(event)
    }

    /// The remap a queue record carries (remaps folded, see
    /// `KernelLayout::fold_remaps`): the one `blk_partition_remap` reported
    /// for the bio, which it does only for a bio with sectors.
    #[inline(always)]
    pub fn folded_remap(object: &BtfEvent, queue: &BlockEvent) -> Option<BlockEvent> {
        let partition = object.arg2;
        if object.kind != EventKind::Queue as u8
            || partition == 0
            || partition == object.dev
            || queue.nr_sector == 0
        {
            return None;
        }
        Some(BlockEvent {
            kind: EventKind::Remap as u8,
            aux_dev: partition,
            aux_sector: queue.sector.saturating_sub(object.arg),
            owner: tracer_common::Owner::UNKNOWN,
            segments: 0,
            ..*queue
        })
    }
}

/// How the consumer turns ring records into events: one decoder per flavor.
pub(super) enum Decoding {
    Classic(ClassicDecoder),
    /// With the NVMe commands of passthrough requests, joined to them.
    Btf(BtfDecoder, Box<PassthroughJoin>),
    /// The noop programs write nothing.
    Nothing,
}

impl Decoding {
    pub(super) fn flavor(&self) -> ProbeFlavor {
        match self {
            Decoding::Classic(_) => ProbeFlavor::Classic,
            Decoding::Btf(..) => ProbeFlavor::Btf,
            Decoding::Nothing => ProbeFlavor::Noop,
        }
    }

    /// The block events of one ring record, in kernel order: one, or a
    /// folded partition remap and then its queue.
    #[inline(always)]
    pub(super) fn decode(&mut self, item: &[u8], mut each: impl FnMut(BlockEvent)) {
        match self {
            Decoding::Classic(decoder) => {
                if item.len() < std::mem::size_of::<ClassicRecord>() {
                    return;
                }
                // SAFETY: the classic probes write whole `ClassicRecord`s (checked length).
                let record =
                    unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ClassicRecord>()) };
                if let Some(event) = decoder.decode(&record) {
                    each(event);
                }
            }
            Decoding::Btf(decoder, passthrough) => {
                if item.len() < std::mem::size_of::<BtfEvent>() {
                    return;
                }
                // SAFETY: the BTF-typed probes write whole `BtfEvent`s (checked length).
                let event = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<BtfEvent>()) };
                let Some(mut decoded) = decoder.decode(&event) else {
                    return;
                };
                if item.len() == std::mem::size_of::<PassthroughEvent>() {
                    // SAFETY: only the passthrough probe writes records this long.
                    let record = unsafe {
                        std::ptr::read_unaligned(item.as_ptr().cast::<PassthroughEvent>())
                    };
                    passthrough.command(&decoded, &record.command);
                    return;
                }
                passthrough.apply(&mut decoded);
                if item.len() >= std::mem::size_of::<BtfQueueEvent>() {
                    // SAFETY: a record this long is a whole `BtfQueueEvent` (checked length).
                    let queued =
                        unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<BtfQueueEvent>()) };
                    decoded.owner = queued.owner;
                    if let Some(remap) = BtfDecoder::folded_remap(&event, &decoded) {
                        each(remap);
                    }
                }
                each(decoded);
            }
            Decoding::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::format::{offsets_for, parse_fields};

    fn offsets(version: &str) -> ClassicFields {
        EventKind::ALL.map(|kind| {
            let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/formats")
                .join(version)
                .join(kind.tracepoint());
            let text = std::fs::read_to_string(path).unwrap();
            offsets_for(kind, &parse_fields(&text).unwrap()).unwrap()
        })
    }

    /// A record laid out as the kernel would, from the same offsets.
    fn record(
        fields: &tracer_common::FieldOffsets,
        dev: u32,
        sector: u64,
        nr: u32,
        aux: u64,
        rwbs: &[u8],
    ) -> [u8; CLASSIC_RECORD_BYTES] {
        let mut raw = [0u8; CLASSIC_RECORD_BYTES];
        let mut put = |offset: u16, bytes: &[u8]| {
            if offset != NO_FIELD {
                let start = usize::from(offset) - CLASSIC_RECORD_START;
                raw[start..start + bytes.len()].copy_from_slice(bytes);
            }
        };
        put(fields.dev, &dev.to_ne_bytes());
        put(fields.sector, &sector.to_ne_bytes());
        put(fields.nr_sector, &nr.to_ne_bytes());
        put(fields.aux_sector, &aux.to_ne_bytes());
        put(fields.rwbs, rwbs);
        raw
    }

    #[test]
    fn issue_and_split_decode_on_both_layouts() {
        for version in ["6.1", "6.18"] {
            let table = offsets(version);
            let decoder = ClassicDecoder::new(table);
            let issue = &table[EventKind::Issue as usize];
            let raw = ClassicRecord {
                ts_ns: 5,
                tgid: 9,
                kind: EventKind::Issue as u8,
                _pad: [0; 3],
                record: record(issue, 7 << 20, 2048, 128, 0, b"WS\0\0\0\0\0\0"),
            };
            let event = decoder.decode(&raw).unwrap();
            assert_eq!(
                (event.dev, event.sector, event.nr_sector),
                (7 << 20, 2048, 128),
                "{version}"
            );
            assert_eq!(&event.rwbs[..2], b"WS", "{version}");
            assert_eq!((event.ts_ns, event.tgid), (5, 9));

            let split = &table[EventKind::Split as usize];
            let raw = ClassicRecord {
                kind: EventKind::Split as u8,
                record: record(split, 7 << 20, 2048, 0, 2176, b"W\0\0\0\0\0\0\0"),
                ..raw
            };
            let event = decoder.decode(&raw).unwrap();
            assert_eq!(
                (event.sector, event.aux_sector, event.nr_sector),
                (2048, 2176, 0),
                "{version}"
            );

            // The requeue record has no `bytes` (and, on 6.1, rwbs right after nr_sector).
            let requeue = &table[EventKind::Requeue as usize];
            let raw = ClassicRecord {
                kind: EventKind::Requeue as u8,
                record: record(requeue, 254 << 20, 4064, 16, 0, b"WS\0\0\0\0\0\0"),
                ..raw
            };
            let event = decoder.decode(&raw).unwrap();
            assert_eq!(
                (event.dev, event.sector, event.nr_sector, &event.rwbs[..3]),
                (254 << 20, 4064, 16, &b"WS\0"[..]),
                "{version}"
            );
        }
    }

    #[test]
    fn every_field_of_every_kind_lies_in_the_copy() {
        for version in ["6.1", "6.18"] {
            for fields in offsets(version) {
                for (offset, size) in [
                    (fields.dev, 4),
                    (fields.sector, 8),
                    (fields.nr_sector, 4),
                    (fields.aux_sector, 8),
                    (fields.aux_dev, 4),
                    (fields.rwbs, RWBS_BYTES),
                    (fields.error, 4),
                ] {
                    assert!(within_copy(offset, size), "{version}: {offset}+{size}");
                }
            }
        }
    }

    #[test]
    fn unknown_kinds_are_not_decoded() {
        let decoder = ClassicDecoder::new(offsets("6.18"));
        let raw = ClassicRecord {
            ts_ns: 0,
            tgid: 0,
            kind: 200,
            _pad: [0; 3],
            record: [0; CLASSIC_RECORD_BYTES],
        };
        assert!(decoder.decode(&raw).is_none());
    }

    #[test]
    fn object_events_decode_like_the_formatted_records() {
        use crate::capture::layout::tests::{fields_6_18, ops_6_18};
        use crate::capture::layout::ObjectLayout;
        use tracer_common::{KernelLayout, WINDOW_BYTES};
        let ops = ops_6_18();
        let fields = fields_6_18();
        let decoder = BtfDecoder::new(ObjectLayout {
            kernel: KernelLayout::ABSENT,
            fields,
            ops,
        });
        let object = |kind: EventKind, put: &[(usize, &[u8])], arg: u64, arg2: u32| {
            let mut window = [0u8; WINDOW_BYTES];
            for (at, bytes) in put {
                window[*at..*at + bytes.len()].copy_from_slice(bytes);
            }
            BtfEvent {
                ts_ns: 7,
                arg,
                tgid: 42,
                dev: (7 << 20) | 3,
                arg2,
                kind: kind as u8,
                _pad: 0,
                segments: 0,
                window,
            }
        };
        let write_sync = (1u32 | 1 << 11).to_ne_bytes();
        let remap = object(
            EventKind::Remap,
            &[
                (0, &write_sync),
                (16, &3147776u64.to_ne_bytes()),
                (24, &4096u32.to_ne_bytes()),
            ],
            0,
            (259 << 20) | 1,
        );
        let event = decoder.decode(&remap).unwrap();
        assert_eq!((event.sector, event.nr_sector), (3147776, 8));
        assert_eq!((event.aux_dev, event.aux_sector), ((259 << 20) | 1, 0));
        assert_eq!(&event.rwbs[..3], b"WS\0");
        assert_eq!((event.dev, event.tgid, event.ts_ns), ((7 << 20) | 3, 42, 7));

        // A queue record on partition 259:1, which starts at sector 2048,
        // carries the remap `blk_partition_remap` reported before it.
        let queue = object(
            EventKind::Queue,
            &[
                (0, &write_sync),
                (16, &3147776u64.to_ne_bytes()),
                (24, &4096u32.to_ne_bytes()),
            ],
            2048,
            (259 << 20) | 1,
        );
        let queued = decoder.decode(&queue).unwrap();
        assert_eq!((queued.aux_dev, queued.aux_sector), (0, 0));
        let folded = BtfDecoder::folded_remap(&queue, &queued).unwrap();
        assert_eq!(folded.kind, EventKind::Remap as u8);
        assert_eq!(
            (folded.dev, folded.sector, folded.nr_sector),
            ((7 << 20) | 3, 3147776, 8)
        );
        assert_eq!(
            (folded.aux_dev, folded.aux_sector),
            ((259 << 20) | 1, 3147776 - 2048)
        );
        assert_eq!(
            (folded.ts_ns, folded.tgid, folded.rwbs),
            (7, 42, queued.rwbs)
        );
        // None for a bio sent to the disk itself, or without sectors (the
        // kernel remaps only bios with sectors), or for other kinds.
        let on_disk = BtfEvent { arg2: 0, ..queue };
        assert!(BtfDecoder::folded_remap(&on_disk, &queued).is_none());
        let empty = BlockEvent {
            nr_sector: 0,
            ..queued
        };
        assert!(BtfDecoder::folded_remap(&queue, &empty).is_none());
        assert!(BtfDecoder::folded_remap(&remap, &queued).is_none());

        let split = object(EventKind::Split, &[(16, &2048u64.to_ne_bytes())], 2176, 0);
        assert_eq!(decoder.decode(&split).unwrap().aux_sector, 2176);

        let issue = object(
            EventKind::Issue,
            &[
                (0, &write_sync),
                (20, &65536u32.to_ne_bytes()),
                (24, &2048u64.to_ne_bytes()),
            ],
            0,
            0,
        );
        let event = decoder.decode(&issue).unwrap();
        assert_eq!((event.sector, event.nr_sector), (2048, 128));
        // A requeue reads the same request fields as an issue.
        let requeue = BtfEvent {
            kind: EventKind::Requeue as u8,
            ..issue
        };
        let event = decoder.decode(&requeue).unwrap();
        assert_eq!(
            (event.sector, event.nr_sector, event.kind),
            (2048, 128, EventKind::Requeue as u8)
        );
        assert_eq!(&event.rwbs[..3], b"WS\0");
        // A partial completion: nr_bytes comes from the argument, not the request.
        let complete = object(
            EventKind::Complete,
            &[(24, &2048u64.to_ne_bytes())],
            4096,
            10,
        );
        let event = decoder.decode(&complete).unwrap();
        // Status 10 is BLK_STS_IOERR: -EIO, as the classic tracepoint says.
        assert_eq!((event.sector, event.nr_sector, event.error), (2048, 8, -5));
        // Passthrough commands have no range, as in blk_rq_trace_sector().
        let passthrough = object(
            EventKind::Issue,
            &[
                (0, &34u32.to_ne_bytes()),
                (20, &512u32.to_ne_bytes()),
                (24, &99u64.to_ne_bytes()),
            ],
            0,
            0,
        );
        let event = decoder.decode(&passthrough).unwrap();
        assert_eq!((event.sector, event.nr_sector), (0, 0));
        let unknown = BtfEvent { kind: 200, ..remap };
        assert!(decoder.decode(&unknown).is_none());
    }

    #[test]
    fn issues_and_completions_name_their_request_by_queue_and_tag() {
        use crate::capture::layout::tests::{fields_6_18, ops_6_18};
        use crate::capture::layout::ObjectLayout;
        use tracer_common::{KernelLayout, WINDOW_BYTES};
        // 6.18's request window from mq_hctx: hctx 0, flags 8, tag 16, len 28, sector 32.
        let decoder = BtfDecoder::new(ObjectLayout {
            kernel: KernelLayout::ABSENT,
            fields: crate::capture::layout::WindowFields {
                rq_flags: 8,
                rq_data_len: 28,
                rq_sector: 32,
                rq_identity: Some((0, 16)),
                ..fields_6_18()
            },
            ops: ops_6_18(),
        });
        let hctx: u64 = 0xffff_8880_1234_5600;
        let request = |kind: EventKind, tag: u32| {
            let mut window = [0u8; WINDOW_BYTES];
            window[0..8].copy_from_slice(&hctx.to_ne_bytes());
            window[8..12].copy_from_slice(&1u32.to_ne_bytes());
            window[16..20].copy_from_slice(&tag.to_ne_bytes());
            window[28..32].copy_from_slice(&4096u32.to_ne_bytes());
            window[32..40].copy_from_slice(&2048u64.to_ne_bytes());
            BtfEvent {
                ts_ns: 1,
                arg: 4096,
                tgid: 1,
                dev: 7 << 20,
                arg2: 0,
                kind: kind as u8,
                _pad: 0,
                segments: 0,
                window,
            }
        };
        let named = |kind, tag| decoder.decode(&request(kind, tag)).unwrap().aux_sector;
        let identity = (hctx << 16) | 5;
        assert_eq!(named(EventKind::Issue, 5), identity);
        assert_eq!(named(EventKind::Complete, 5), identity);
        assert_eq!(named(EventKind::Requeue, 5), identity);
        assert_ne!(
            named(EventKind::Issue, 6),
            identity,
            "another tag, another request"
        );
        assert_eq!(
            named(EventKind::RqMerge, 5),
            0,
            "a merge names no issued request"
        );
        assert_eq!(named(EventKind::Issue, u32::MAX), 0, "no tag yet");
        assert_eq!(
            decoder
                .decode(&request(EventKind::Issue, 5))
                .unwrap()
                .sector,
            2048
        );
    }
}
