//! Packed event blocks (format 4): the writer thread shrinks each block
//! event before zstd sees it, because zstd's time follows its input's size
//! and block events are most of that input.
//!
//! A block event's first 56 bytes are seven little-endian u64 words (time,
//! sector, aux sector, the two devices, length and tgid, `rwbs`, kind and
//! error). A packed one is a tag, its kind, and each word as a LEB128
//! varint against a prediction (see [`Model`]): the first three as a
//! zigzagged difference (times and sectors move by small steps), the other
//! four XORed (they repeat). A record with an owner keeps its 40 owner
//! bytes as they are. Every other record is copied unchanged. The model
//! starts at zero in each block, so every block still stands alone.

use super::format::{
    Damage, BARE_BLOCK_BYTES, BLOCK_EVENT_BYTES, DIRTY_COUNTS_BYTES, INTERVAL_BYTES,
    MAX_BLOCK_BYTES, OPEN_EVENT_BYTES, PROCESS_EVENT_BYTES, TAG_BLOCK, TAG_BLOCK_BARE, TAG_DIRTY,
    TAG_GEOMETRY, TAG_INTERVAL, TAG_LOST, TAG_NAMES, TAG_OPEN, TAG_PROCESS, TAG_RUN,
};

/// In a packed block only: a [`TAG_BLOCK_BARE`] record as seven varints.
const TAG_PACKED_BARE: u8 = 11;
/// In a packed block only: a [`TAG_BLOCK`] record as seven varints and its owner.
const TAG_PACKED_OWNED: u8 = 12;

const WORDS: usize = BARE_BLOCK_BYTES / 8;
/// Words stored as differences; the rest are XORed.
const DIFFERENCED: usize = 3;
const OWNER_BYTES: usize = BLOCK_EVENT_BYTES - BARE_BLOCK_BYTES;

/// Bytes after a record's tag, or `None` for an unknown tag or a record
/// that runs past `rest`.
pub fn record_len(tag: u8, rest: &[u8]) -> Option<usize> {
    let length = match tag {
        TAG_BLOCK => BLOCK_EVENT_BYTES,
        TAG_BLOCK_BARE => BARE_BLOCK_BYTES,
        TAG_PROCESS => PROCESS_EVENT_BYTES,
        TAG_OPEN => OPEN_EVENT_BYTES,
        TAG_LOST => 0,
        TAG_INTERVAL => INTERVAL_BYTES,
        TAG_DIRTY => {
            let count = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            count.checked_mul(4 + DIRTY_COUNTS_BYTES)?.checked_add(4)?
        }
        TAG_GEOMETRY | TAG_NAMES | TAG_RUN => {
            let json = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            json.checked_add(4)?
        }
        _ => return None,
    };
    (length <= rest.len()).then_some(length)
}

/// What the next block event is predicted from: the previous event's time
/// and sector (a chain's events follow each other), and the other words of
/// the previous event of the same kind (an issue's request names and a
/// remap's devices repeat per kind, not from one event to the next).
struct Model {
    time_and_sector: [u64; 2],
    by_kind: [[u64; WORDS]; KIND_SLOTS],
}

/// Kinds are kept apart in this many slots (more than there are kinds).
const KIND_SLOTS: usize = 16;
/// Where the kind byte sits in the event (word 6's first byte).
const KIND_AT: usize = 48;

impl Model {
    fn new() -> Model {
        Model {
            time_and_sector: [0; 2],
            by_kind: [[0; WORDS]; KIND_SLOTS],
        }
    }

    /// The stored value of word `index` of an event of `kind` that holds `word`.
    #[inline(always)]
    fn encode(&mut self, kind: u8, index: usize, word: u64) -> u64 {
        let previous = self.previous(kind, index);
        let stored = match index < DIFFERENCED {
            true => zigzag(word.wrapping_sub(*previous)),
            false => word ^ *previous,
        };
        *previous = word;
        stored
    }

    #[inline(always)]
    fn decode(&mut self, kind: u8, index: usize, stored: u64) -> u64 {
        let previous = self.previous(kind, index);
        let word = match index < DIFFERENCED {
            true => previous.wrapping_add(unzigzag(stored)),
            false => stored ^ *previous,
        };
        *previous = word;
        word
    }

    #[inline(always)]
    fn previous(&mut self, kind: u8, index: usize) -> &mut u64 {
        match index {
            0 | 1 => &mut self.time_and_sector[index],
            _ => &mut self.by_kind[usize::from(kind) % KIND_SLOTS][index],
        }
    }
}

/// Packs a block of records into `out` (cleared first); `false` if `raw`
/// is not a whole run of known records (the caller then writes it unpacked).
pub fn pack(raw: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    out.reserve(raw.len() / 2);
    let mut model = Model::new();
    let mut at = 0;
    while at < raw.len() {
        let tag = raw[at];
        let rest = &raw[at + 1..];
        let Some(length) = record_len(tag, rest) else {
            return false;
        };
        if tag == TAG_BLOCK || tag == TAG_BLOCK_BARE {
            // Encoded on the stack and appended once: a push per byte costs more.
            let mut event = [0u8; 2 + WORDS * 10];
            let kind = rest[KIND_AT];
            event[0] = match tag {
                TAG_BLOCK => TAG_PACKED_OWNED,
                _ => TAG_PACKED_BARE,
            };
            event[1] = kind;
            let mut used = 2;
            for index in 0..WORDS {
                let mut word = [0u8; 8];
                word.copy_from_slice(&rest[index * 8..][..8]);
                let word = u64::from_le_bytes(word);
                used += put_varint(&mut event[used..], model.encode(kind, index, word));
            }
            out.extend_from_slice(&event[..used]);
            out.extend_from_slice(&rest[BARE_BLOCK_BYTES..length]);
        } else {
            out.extend_from_slice(&raw[at..at + 1 + length]);
        }
        at += 1 + length;
    }
    true
}

/// The records a packed block holds, into `out` (cleared first), or why
/// it cannot be read.
pub fn unpack(packed: &[u8], out: &mut Vec<u8>) -> Result<(), Damage> {
    out.clear();
    out.reserve(packed.len() * 4);
    let mut model = Model::new();
    let mut at = 0;
    while at < packed.len() {
        if out.len() > MAX_BLOCK_BYTES {
            return Err(Damage::UnpacksTooLong);
        }
        let tag = packed[at];
        at += 1;
        if tag == TAG_PACKED_BARE || tag == TAG_PACKED_OWNED {
            let kind = *packed.get(at).ok_or(Damage::EventCut)?;
            at += 1;
            out.push(match tag {
                TAG_PACKED_OWNED => TAG_BLOCK,
                _ => TAG_BLOCK_BARE,
            });
            for index in 0..WORDS {
                let (stored, used) = get_varint(&packed[at..]).ok_or(Damage::EventCut)?;
                at += used;
                out.extend_from_slice(&model.decode(kind, index, stored).to_le_bytes());
            }
            if tag == TAG_PACKED_OWNED {
                let owner = packed.get(at..at + OWNER_BYTES).ok_or(Damage::OwnerCut)?;
                out.extend_from_slice(owner);
                at += OWNER_BYTES;
            }
        } else {
            let length = record_len(tag, &packed[at..]).ok_or(Damage::BadRecord(tag))?;
            out.push(tag);
            out.extend_from_slice(&packed[at..at + length]);
            at += length;
        }
    }
    Ok(())
}

#[inline(always)]
fn zigzag(value: u64) -> u64 {
    (value << 1) ^ ((value as i64 >> 63) as u64)
}

#[inline(always)]
fn unzigzag(value: u64) -> u64 {
    (value >> 1) ^ (value & 1).wrapping_neg()
}

/// Writes `value` as a varint at the start of `out` (room for ten bytes); the bytes it took.
#[inline(always)]
fn put_varint(out: &mut [u8], mut value: u64) -> usize {
    let mut used = 0;
    while value >= 0x80 {
        out[used] = value as u8 | 0x80;
        value >>= 7;
        used += 1;
    }
    out[used] = value as u8;
    used + 1
}

/// A varint and the bytes it took; `None` when cut or longer than ten bytes.
#[inline(always)]
fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte < 0x80 {
            return Some((value, index + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare(words: [u64; WORDS]) -> Vec<u8> {
        let mut record = vec![TAG_BLOCK_BARE];
        for word in words {
            record.extend_from_slice(&word.to_le_bytes());
        }
        record
    }

    #[test]
    fn every_record_kind_round_trips_and_block_events_shrink() {
        let mut raw = Vec::new();
        raw.extend(bare([
            1_000,
            2048,
            0,
            7 << 20,
            8,
            u64::from_le_bytes(*b"WS\0\0\0\0\0\0"),
            3,
        ]));
        raw.extend(bare([1_900, 1024, 5 << 16 | 3, 7 << 20, 8, 0x5357, 4]));
        // Backwards in time and sector, and every bit set: still exact.
        raw.extend(bare([900, 0, u64::MAX, u64::MAX, 0, 0, u64::MAX]));
        let mut owned = bare([5_000, 4096, 0, 7 << 20, 16, 0x57, 1]);
        owned[0] = TAG_BLOCK;
        owned.extend((0..OWNER_BYTES as u8).map(|byte| byte.wrapping_mul(37)));
        raw.extend(owned);
        raw.push(TAG_LOST);
        raw.push(TAG_NAMES);
        raw.extend_from_slice(&2u32.to_le_bytes());
        raw.extend_from_slice(b"{}");
        raw.push(TAG_INTERVAL);
        raw.extend_from_slice(&[9; INTERVAL_BYTES]);
        raw.push(TAG_DIRTY);
        raw.extend_from_slice(&1u32.to_le_bytes());
        raw.extend_from_slice(&[3; 4 + DIRTY_COUNTS_BYTES]);
        raw.push(TAG_PROCESS);
        raw.extend_from_slice(&[4; PROCESS_EVENT_BYTES]);

        let mut packed = Vec::new();
        assert!(pack(&raw, &mut packed));
        let mut back = Vec::new();
        unpack(&packed, &mut back).unwrap();
        assert_eq!(back, raw);
        let events = 4 * (1 + BARE_BLOCK_BYTES) + OWNER_BYTES;
        assert!(
            packed.len() < raw.len() - events / 2,
            "{} of {}",
            packed.len(),
            raw.len()
        );
    }

    #[test]
    fn a_run_that_is_not_whole_records_is_left_unpacked() {
        let mut raw = bare([1, 2, 3, 4, 5, 6, 7]);
        raw.pop();
        assert!(!pack(&raw, &mut Vec::new()));
        assert!(!pack(&[200], &mut Vec::new()));
    }

    #[test]
    fn a_cut_or_foreign_packed_block_is_an_error_not_a_panic() {
        let mut packed = Vec::new();
        assert!(pack(&bare([1, 2, 3, 4, 5, 6, u64::MAX]), &mut packed));
        for cut in 1..packed.len() {
            assert!(
                unpack(&packed[..cut], &mut Vec::new()).is_err(),
                "cut {cut}"
            );
        }
        assert!(unpack(
            &[
                TAG_PACKED_BARE,
                1,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0x01
            ],
            &mut Vec::new()
        )
        .is_err());
        assert!(unpack(&[99], &mut Vec::new()).is_err());
    }

    #[test]
    fn varints_and_zigzag_cover_the_extremes() {
        for value in [0, 1, 127, 128, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut bytes = [0u8; 10];
            let used = put_varint(&mut bytes, value);
            assert_eq!(get_varint(&bytes), Some((value, used)));
            assert_eq!(unzigzag(zigzag(value)), value);
        }
        assert_eq!(zigzag(u64::MAX), 1, "-1 is one byte");
    }
}
