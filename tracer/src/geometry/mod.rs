//! Device geometry: partition placement and queue limits, read from sysfs and
//! ioctls. Readers take a sysfs root so tests run on fixture trees.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A block device number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevId {
    pub major: u32,
    pub minor: u32,
}

impl DevId {
    pub const fn new(major: u32, minor: u32) -> Self {
        DevId { major, minor }
    }

    /// From the kernel-internal `dev_t` that tracepoints carry (`major << 20 | minor`).
    pub const fn from_kernel(dev: u32) -> Self {
        DevId {
            major: dev >> 20,
            minor: dev & ((1 << 20) - 1),
        }
    }

    pub const fn to_kernel(self) -> u32 {
        (self.major << 20) | (self.minor & ((1 << 20) - 1))
    }

    /// From a userspace `st_rdev` (glibc encoding).
    pub fn from_rdev(rdev: u64) -> Self {
        DevId {
            major: libc::major(rdev),
            minor: libc::minor(rdev),
        }
    }
}

impl fmt::Display for DevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl Serialize for DevId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read back from its "major:minor" form (recordings, `check --json` snapshots).
impl<'de> Deserialize<'de> for DevId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let parsed = text
            .split_once(':')
            .and_then(|(major, minor)| Some(DevId::new(major.parse().ok()?, minor.parse().ok()?)));
        parsed.ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not major:minor")))
    }
}

/// One whole disk and its queue limits. Sizes in bytes unless named `_sectors`
/// (512-byte units) or `_kb`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskGeometry {
    pub name: String,
    pub dev: Option<DevId>,
    pub size_sectors: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    pub minimum_io_size: u32,
    pub optimal_io_size: u32,
    pub alignment_offset: u32,
    pub max_sectors_kb: u32,
    pub max_hw_sectors_kb: u32,
    /// Where `max_sectors_kb` comes from, by the numbers above and the
    /// kernel's version ([`max_sectors`]): set whenever sysfs was read;
    /// `None` for a geometry from a recording or snapshot that predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sectors_source: Option<MaxSectorsSource>,
    pub max_segments: u32,
    pub max_segment_size: u32,
    pub virt_boundary_mask: u64,
    pub chunk_sectors: u32,
    pub nomerges: u32,
    pub discard_granularity: u32,
    /// `queue/discard_max_bytes`: the longest discard one command takes
    /// (0: none, or unknown), and the hardware's ceiling for it.
    #[serde(default)]
    pub discard_max_bytes: u64,
    #[serde(default)]
    pub discard_max_hw_bytes: u64,
    pub rotational: bool,
    /// Active I/O scheduler, e.g. "mq-deadline" or "none".
    pub scheduler: String,
    /// False for bio-based devices (zram, device-mapper, md): no requests.
    pub request_based: bool,
    /// Requests the queue allocates (`queue/nr_requests`; 0 when bio-based).
    pub nr_requests: u32,
    /// Commands one hardware queue takes at once (`mq/*/nr_tags`, the
    /// smallest; 0 when bio-based).
    pub hw_queue_tags: u32,
    /// A virtio disk: whether the device offers indirect descriptors
    /// (VIRTIO_RING_F_INDIRECT_DESC). Without them every segment of a command
    /// takes a slot of the virtqueue ring. `None` for other disks.
    pub virtio_indirect_desc: Option<bool>,
    /// The whole device's current block size (BLKBSZGET), if it could be read.
    pub block_size: Option<u32>,
    pub partitions: Vec<PartitionGeometry>,
    /// For a device-mapper or md device: where its data lands below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<stack::Stack>,
    /// Untorn (atomic) write limits (`queue/atomic_write_*`): `None` when
    /// the kernel has no such files (it predates atomic writes, 6.11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic: Option<AtomicLimits>,
}

/// A queue's atomic write limits as sysfs gives them, bytes. A unit minimum
/// of 0 is a kernel that knows atomic writes on a device that offers none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicLimits {
    /// `atomic_write_unit_min_bytes`: the smallest atomic write.
    pub unit_min_bytes: u32,
    /// `atomic_write_unit_max_bytes`: the largest one `statx` offers.
    pub unit_max_bytes: u32,
    /// `atomic_write_max_bytes`: the largest the device merges atomically.
    pub max_bytes: u32,
    /// `atomic_write_boundary_bytes`: no atomic write may cross a multiple
    /// of it (0: no boundary).
    pub boundary_bytes: u32,
}

impl AtomicLimits {
    /// Whether the device offers atomic writes at all.
    pub fn offered(&self) -> bool {
        self.unit_min_bytes != 0
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartitionGeometry {
    pub name: String,
    pub dev: Option<DevId>,
    pub number: u32,
    /// First sector, disk-absolute.
    pub start: u64,
    /// Length in sectors.
    pub size: u64,
    /// Bytes from the partition start to the next natural alignment boundary (sysfs).
    pub alignment_offset: u32,
    /// The partition's current block size (BLKBSZGET; not in sysfs).
    pub block_size: Option<u32>,
}

impl DiskGeometry {
    /// The partition with this device number, if it belongs to this disk.
    pub fn partition(&self, dev: DevId) -> Option<&PartitionGeometry> {
        self.partitions.iter().find(|part| part.dev == Some(dev))
    }

    /// The partition holding this disk-absolute sector.
    pub fn partition_at(&self, sector: u64) -> Option<&PartitionGeometry> {
        self.partitions
            .iter()
            .find(|part| sector >= part.start && sector < part.start + part.size)
    }
}

pub mod disks;
pub mod error;
pub mod fiemap;
pub mod ioctl;
pub mod max_sectors;
pub mod resolve;
pub mod stack;
pub mod sysfs;

// Kept for callers outside engine and geometry; the rule lives in `blk`.
pub use crate::blk::predicted_block_size;
pub use max_sectors::MaxSectorsSource;
