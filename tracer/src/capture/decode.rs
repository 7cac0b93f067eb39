//! Raw record bytes from the probes → [`BlockEvent`], using the offsets read
//! from the format files. Pure, so each kernel layout is unit-tested.

use tracer_common::{
    BlockEvent, EventKind, FieldOffsets, RawBlockEvent, NO_FIELD, RAW_BYTES, RAW_START, RWBS_BYTES,
};

/// Decodes events of every kind with this kernel's layouts.
#[derive(Clone, Debug)]
pub struct Decoder {
    offsets: [FieldOffsets; EventKind::COUNT],
}

/// Whether a field of `size` bytes at record offset `offset` lies in the copied bytes.
pub fn within_copy(offset: u16, size: usize) -> bool {
    offset == NO_FIELD
        || (usize::from(offset) >= RAW_START && usize::from(offset) + size <= RAW_START + RAW_BYTES)
}

impl Decoder {
    /// `offsets[kind as usize]` for each kind; absent kinds are never decoded.
    pub fn new(offsets: [FieldOffsets; EventKind::COUNT]) -> Decoder {
        Decoder { offsets }
    }

    pub fn decode(&self, raw: &RawBlockEvent) -> Option<BlockEvent> {
        let kind = EventKind::from_u8(raw.kind)?;
        let fields = &self.offsets[kind as usize];
        let bytes = &raw.raw;
        let at = |offset: u16, size: usize| -> Option<&[u8]> {
            if offset == NO_FIELD {
                return None;
            }
            let start = usize::from(offset).checked_sub(RAW_START)?;
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
            ts_ns: raw.ts_ns,
            sector: u64_at(fields.sector),
            aux_sector: u64_at(fields.aux_sector),
            dev: u32_at(fields.dev),
            aux_dev: u32_at(fields.aux_dev),
            nr_sector: u32_at(fields.nr_sector),
            tgid: raw.tgid,
            rwbs,
            kind: raw.kind,
            _pad: [0; 3],
            error: u32_at(fields.error) as i32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::format::{offsets_for, parse_fields};

    fn offsets(version: &str) -> [FieldOffsets; EventKind::COUNT] {
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
        fields: &FieldOffsets,
        dev: u32,
        sector: u64,
        nr: u32,
        aux: u64,
        rwbs: &[u8],
    ) -> [u8; RAW_BYTES] {
        let mut raw = [0u8; RAW_BYTES];
        let mut put = |offset: u16, bytes: &[u8]| {
            if offset != NO_FIELD {
                let start = usize::from(offset) - RAW_START;
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
            let decoder = Decoder::new(table);
            let issue = &table[EventKind::Issue as usize];
            let raw = RawBlockEvent {
                ts_ns: 5,
                tgid: 9,
                kind: EventKind::Issue as u8,
                _pad: [0; 3],
                raw: record(issue, 7 << 20, 2048, 128, 0, b"WS\0\0\0\0\0\0"),
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
            let raw = RawBlockEvent {
                kind: EventKind::Split as u8,
                raw: record(split, 7 << 20, 2048, 0, 2176, b"W\0\0\0\0\0\0\0"),
                ..raw
            };
            let event = decoder.decode(&raw).unwrap();
            assert_eq!(
                (event.sector, event.aux_sector, event.nr_sector),
                (2048, 2176, 0),
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
        let decoder = Decoder::new(offsets("6.18"));
        let raw = RawBlockEvent {
            ts_ns: 0,
            tgid: 0,
            kind: 200,
            _pad: [0; 3],
            raw: [0; RAW_BYTES],
        };
        assert!(decoder.decode(&raw).is_none());
    }
}
