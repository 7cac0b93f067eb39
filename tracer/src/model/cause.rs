//! Why the kernel cut or sent back an I/O: the causes a report names, typed,
//! serialized as the strings the JSON schema fixes.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The inferred reason for one `block_split` (`engine::split::split_cause`).
///
/// Ordered by its key, as the keys sorted when they were strings, so the
/// `split_causes` maps keep their JSON order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitCause {
    MaxSectors,
    MaxSegments,
    MaxSegmentSize,
    ChunkBoundary,
    PhysicalBlock,
    VirtBoundary,
    DiscardGranularity,
    /// A discard longer than `max_discard_sectors` (`discard_max_bytes`):
    /// the only reason the kernel cuts discards at all.
    MaxDiscard,
    /// dm-crypt's own cap on one piece (`max_write_size`/`max_read_size`).
    CryptMaxIo,
    Unknown,
}

impl SplitCause {
    pub const COUNT: usize = 10;
    pub const ALL: [SplitCause; Self::COUNT] = [
        SplitCause::MaxSectors,
        SplitCause::MaxSegments,
        SplitCause::MaxSegmentSize,
        SplitCause::ChunkBoundary,
        SplitCause::PhysicalBlock,
        SplitCause::VirtBoundary,
        SplitCause::DiscardGranularity,
        SplitCause::MaxDiscard,
        SplitCause::CryptMaxIo,
        SplitCause::Unknown,
    ];

    /// The key used in `split_causes` and in the diagnosis' `cause` evidence.
    pub const fn key(self) -> &'static str {
        match self {
            SplitCause::MaxSectors => "max_sectors",
            SplitCause::MaxSegments => "max_segments",
            SplitCause::MaxSegmentSize => "max_segment_size",
            SplitCause::ChunkBoundary => "chunk_boundary",
            SplitCause::PhysicalBlock => "physical_block",
            SplitCause::VirtBoundary => "virt_boundary",
            SplitCause::DiscardGranularity => "discard_granularity",
            SplitCause::MaxDiscard => "max_discard",
            SplitCause::CryptMaxIo => "crypt_max_io",
            SplitCause::Unknown => "unknown",
        }
    }

    /// The cause a key names, if any.
    pub fn from_key(key: &str) -> Option<SplitCause> {
        SplitCause::ALL.into_iter().find(|cause| cause.key() == key)
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Causes that leave the front piece as large as one request may be (in
    /// sectors or segments), so nothing more can merge into it.
    pub const fn fills_the_request(self) -> bool {
        matches!(
            self,
            SplitCause::MaxSectors
                | SplitCause::PhysicalBlock
                | SplitCause::MaxSegments
                | SplitCause::MaxSegmentSize
        )
    }

    /// Causes that come from where the I/O sits on the disk, not from its size.
    pub const fn is_alignment(self) -> bool {
        matches!(
            self,
            SplitCause::PhysicalBlock
                | SplitCause::ChunkBoundary
                | SplitCause::VirtBoundary
                | SplitCause::DiscardGranularity
        )
    }
}

impl fmt::Display for SplitCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl Ord for SplitCause {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(other.key())
    }
}

impl PartialOrd for SplitCause {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for SplitCause {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.key())
    }
}

/// Recordings keep their measures' `split_causes` under these keys.
impl<'de> Deserialize<'de> for SplitCause {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let key = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        SplitCause::from_key(&key)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown split cause {key:?}")))
    }
}

/// Why a driver sent commands back, where it can be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequeueCause {
    /// virtio without indirect descriptors: a command takes one ring
    /// descriptor per segment plus two, and one large command fills the ring.
    VirtioRingFull,
}

impl RequeueCause {
    pub const fn key(self) -> &'static str {
        match self {
            RequeueCause::VirtioRingFull => "virtio_ring_full",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn split_causes_serialize_to_their_keys_and_sort_by_them() {
        for cause in SplitCause::ALL {
            let json = serde_json::to_string(&cause).unwrap();
            assert_eq!(json, format!("\"{}\"", cause.key()));
            assert_eq!(serde_json::from_str::<SplitCause>(&json).unwrap(), cause);
        }
        assert!(serde_json::from_str::<SplitCause>("\"max_sector\"").is_err());
        let map: BTreeMap<SplitCause, u64> = SplitCause::ALL.into_iter().map(|c| (c, 1)).collect();
        let keys: Vec<&str> = map.keys().map(|cause| cause.key()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "a map of causes keeps the string order");
        assert_eq!(
            serde_json::to_string(&BTreeMap::from([
                (SplitCause::MaxSegments, 2),
                (SplitCause::MaxSegmentSize, 1)
            ]))
            .unwrap(),
            r#"{"max_segment_size":1,"max_segments":2}"#
        );
    }
}
