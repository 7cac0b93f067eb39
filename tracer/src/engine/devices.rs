//! Disk and partition state, found by device number, and where an event's
//! numbers go when it matched no chain.

use tracer_common::BlockEvent;

use super::service::ServiceSamples;
use super::split::SplitLimits;
use super::stats::{DeviceStats, OP_COUNT};
use super::streams::LastQueued;
use super::table::SlotRef;
use super::target::{op_of, Target, NO_PART};
use super::Engine;
use crate::blk::SECTOR_BYTES;
use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};

#[derive(Clone, Copy, Debug)]
pub(super) struct LastIssue {
    pub(super) end: u64,
    pub(super) sectors: u64,
    pub(super) issue_ns: u64,
    /// Fragments it carried (a lower bound on its segments).
    pub(super) bios: u64,
    /// The user I/O of its last fragment.
    pub(super) last_io: SlotRef,
    pub(super) valid: bool,
}

impl Default for LastIssue {
    fn default() -> Self {
        LastIssue {
            end: 0,
            sectors: 0,
            issue_ns: 0,
            bios: 0,
            last_io: SlotRef::NONE,
            valid: false,
        }
    }
}

/// `block_dirty_buffer` sizes seen on one device (partition or disk).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DirtyStats {
    pub count: u64,
    /// Counts by power-of-two size from 512 B (index 0) to 64 KiB (index 7).
    pub by_size: [u64; DIRTY_SIZES],
}

pub(crate) const DIRTY_SIZES: usize = 8;

impl DirtyStats {
    pub(super) fn record(&mut self, bytes: u64) {
        self.count += 1;
        let sectors = (bytes / SECTOR_BYTES).max(1);
        let index = (63 - sectors.leading_zeros()) as usize;
        self.by_size[index.min(DIRTY_SIZES - 1)] += 1;
    }

    pub fn size_of(index: usize) -> u64 {
        SECTOR_BYTES << index
    }

    pub(super) fn add(&mut self, index: usize, count: u64) {
        self.count += count;
        self.by_size[index.min(DIRTY_SIZES - 1)] += count;
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct DevSlot {
    pub(super) disk: u32,
    pub(super) part: u32,
}

/// `BLOCK_EXT_MAJOR`: where the kernel puts partitions beyond a disk's own
/// minors (all of a loop disk's), and NVMe namespaces.
const BLOCK_EXT_MAJOR: u32 = 259;

pub(crate) struct PartState {
    pub dev: u32,
    pub name: String,
    pub geometry: PartitionGeometry,
    pub stats: DeviceStats,
    /// Missing from sysfs at the last refresh.
    pub gone: bool,
    /// Its geometry came from sysfs or `--geometry`, not from the trace.
    pub known: bool,
}

pub(crate) struct DeviceState {
    pub dev: Option<u32>,
    pub name: String,
    pub geometry: DiskGeometry,
    /// Geometry came from `disks` (otherwise it is a default placeholder).
    pub known: bool,
    pub limits: SplitLimits,
    /// Traffic to the disk itself, not through a partition.
    pub whole: DeviceStats,
    pub parts: Vec<PartState>,
    /// Missing from sysfs (or without media) at the last refresh.
    pub gone: bool,
    pub(super) seen_issue: bool,
    /// A `block_bio_queue` of its own was traced (not only remaps from it).
    pub(super) seen_queue: bool,
    pub(super) last_issue: [LastIssue; OP_COUNT],
    /// Per op: the last user I/O, which the next may continue (what-if streams).
    pub(super) last_queued: [LastQueued; OP_COUNT],
    /// Requeued commands without a range (flushes, passthrough), per op:
    /// the next such issue is their re-issue, not a new command.
    pub(super) requeued_empty: [u32; OP_COUNT],
    /// Bio-based only: the fragment queued or cut last. Device-mapper traces
    /// a split on the bio it trimmed, which already starts at the cut, so
    /// the piece it was cut from is found here, not by its start.
    pub(super) last_fragment: SlotRef,
    /// Where a clone's remap cut the last fragment before its trim was
    /// traced: the split that follows is that cut, already made.
    pub(super) precut_at: Option<u64>,
    /// Per op: the commands' service times, which the what-if's times replay.
    pub(super) service: [ServiceSamples; OP_COUNT],
}

impl DeviceState {
    pub(super) fn unknown(dev: u32) -> DeviceState {
        DeviceState {
            dev: Some(dev),
            name: DevId::from_kernel(dev).to_string(),
            geometry: DiskGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..DiskGeometry::default()
            },
            known: false,
            limits: SplitLimits::default(),
            whole: DeviceStats::default(),
            parts: Vec::new(),
            gone: false,
            seen_issue: false,
            seen_queue: false,
            last_issue: [LastIssue::default(); OP_COUNT],
            last_queued: [LastQueued::default(); OP_COUNT],
            requeued_empty: [0; OP_COUNT],
            last_fragment: SlotRef::NONE,
            precut_at: None,
            service: [ServiceSamples::default(); OP_COUNT],
        }
    }

    pub(super) fn stats_mut(&mut self, part: u32) -> &mut DeviceStats {
        match self.parts.get_mut(part as usize) {
            Some(partition) => &mut partition.stats,
            None => &mut self.whole,
        }
    }

    /// md raid4/5/6: it writes each stripe's data and parity in bios of
    /// its own (remapped from it, never split from the user's bio), and
    /// completes the user's bio whole.
    pub(super) fn writes_own_stripes(&self) -> bool {
        self.geometry.stack.as_ref().is_some_and(|stack| {
            matches!(stack.kind.as_str(), "md-raid4" | "md-raid5" | "md-raid6")
        })
    }

    /// Bio-based: declared so, and no request was ever issued on it.
    pub(super) fn bio_based(&self) -> bool {
        !(self.geometry.request_based || self.seen_issue)
    }

    pub(super) fn partition_at(&self, sector: u64) -> u32 {
        self.parts
            .iter()
            .position(|part| {
                part.geometry.size != 0
                    && sector >= part.geometry.start
                    && sector - part.geometry.start < part.geometry.size
            })
            .map_or(NO_PART, |index| index as u32)
    }
}

impl Engine {
    /// Installs fresh geometry. Devices and partitions keep their measures
    /// (matched by device number); ones no longer listed are kept as they were.
    pub fn set_disks(&mut self, disks: Vec<DiskGeometry>) {
        for disk in disks {
            let dev = disk.dev.map(DevId::to_kernel);
            let existing = match dev {
                Some(dev) => self
                    .dev_index
                    .get(&dev)
                    .filter(|slot| slot.part == NO_PART)
                    .map(|slot| slot.disk as usize),
                None => self
                    .devices
                    .iter()
                    .position(|device| device.dev.is_none() && device.name == disk.name),
            };
            let index = match existing {
                Some(index) => index,
                None => {
                    let mut device = DeviceState::unknown(dev.unwrap_or(0));
                    device.dev = dev;
                    self.devices.push(device);
                    self.devices.len() - 1
                }
            };
            if let Some(dev) = dev {
                self.dev_index.insert(
                    dev,
                    DevSlot {
                        disk: index as u32,
                        part: NO_PART,
                    },
                );
            }
            for partition in &disk.partitions {
                self.install_partition(index, partition);
            }
            let device = &mut self.devices[index];
            if !disk.name.is_empty() {
                device.name = disk.name.clone();
            }
            device.limits = SplitLimits::from_geometry(&disk);
            device.known = true;
            device.geometry = disk;
        }
    }

    pub(super) fn install_partition(&mut self, disk: usize, partition: &PartitionGeometry) {
        let dev = partition.dev.map(DevId::to_kernel);
        let device = &mut self.devices[disk];
        let existing = device.parts.iter().position(|part| match dev {
            Some(dev) => part.dev == dev,
            None => part.name == partition.name,
        });
        let name = if partition.name.is_empty() {
            dev.map_or_else(String::new, |dev| DevId::from_kernel(dev).to_string())
        } else {
            partition.name.clone()
        };
        let index = match existing {
            Some(index) => index,
            None => {
                device.parts.push(PartState {
                    dev: dev.unwrap_or(0),
                    name: String::new(),
                    geometry: PartitionGeometry::default(),
                    stats: DeviceStats::default(),
                    gone: false,
                    known: true,
                });
                device.parts.len() - 1
            }
        };
        let part = &mut device.parts[index];
        part.name = name;
        part.geometry = partition.clone();
        part.known = true;
        if let Some(dev) = dev {
            self.dev_index.insert(
                dev,
                DevSlot {
                    disk: disk as u32,
                    part: index as u32,
                },
            );
        }
    }

    pub(super) fn is_tracked(&self, tgid: u32) -> bool {
        !self.tracked.is_empty() && self.tracked.contains(&tgid)
    }

    /// Where an event that matched no chain is counted: by its own device,
    /// the partition holding its sector, and its own rwbs.
    pub(super) fn fallback_target(&mut self, event: &BlockEvent) -> Target {
        let disk = self.ensure_disk(event.dev);
        let device = &self.devices[disk as usize];
        Target {
            disk,
            part: device.partition_at(event.sector),
            op: op_of(event),
            tracked: self.is_tracked(event.tgid),
        }
    }

    /// Whether a remap onto `dev` from `from` comes from a device stacked
    /// above it whose queues are not traced, rather than from one of its
    /// partitions: a known whole device never seen queuing, or an unknown
    /// one of another major (partitions share their disk's major or take
    /// the extended one, as a loop disk's do; two dm devices share one too,
    /// so dm on dm is told apart only when the geometry knows them). A device whose queues are traced has its bios
    /// as fragments already; dm's partial clones of them must not count twice.
    /// Whether `dev` is a whole md raid4/5/6 device (see
    /// [`DeviceState::writes_own_stripes`]).
    pub(super) fn is_stripe_writer(&self, dev: u32) -> bool {
        self.dev_index.get(&dev).is_some_and(|slot| {
            slot.part == NO_PART && self.devices[slot.disk as usize].writes_own_stripes()
        })
    }

    /// Whether `dev` is a whole device that issues requests: a remap from
    /// it moves a request (request-based dm), not a bio.
    pub(super) fn is_request_device(&self, dev: u32) -> bool {
        self.dev_index.get(&dev).is_some_and(|slot| {
            slot.part == NO_PART && !self.devices[slot.disk as usize].bio_based()
        })
    }

    pub(super) fn is_upper_device(&self, dev: u32, from: u32) -> bool {
        if from == dev {
            return false;
        }
        match self.dev_index.get(&from) {
            Some(slot) => slot.part == NO_PART && !self.devices[slot.disk as usize].seen_queue,
            None => {
                let major = DevId::from_kernel(from).major;
                major != BLOCK_EXT_MAJOR && major != DevId::from_kernel(dev).major
            }
        }
    }

    /// The disk an event's dev names, created (as unknown) on first sight.
    pub(super) fn ensure_disk(&mut self, dev: u32) -> u32 {
        if let Some(slot) = self.dev_index.get(&dev) {
            return slot.disk;
        }
        self.devices.push(DeviceState::unknown(dev));
        let disk = (self.devices.len() - 1) as u32;
        self.dev_index.insert(
            dev,
            DevSlot {
                disk,
                part: NO_PART,
            },
        );
        disk
    }

    /// The partition `dev` of `disk`, created (as unknown) on first sight.
    pub(super) fn ensure_partition(&mut self, disk: u32, dev: u32) -> u32 {
        if let Some(slot) = self.dev_index.get(&dev) {
            return if slot.disk == disk {
                slot.part
            } else {
                NO_PART
            };
        }
        let device = &mut self.devices[disk as usize];
        device.parts.push(PartState {
            dev,
            name: DevId::from_kernel(dev).to_string(),
            geometry: PartitionGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..PartitionGeometry::default()
            },
            stats: DeviceStats::default(),
            gone: false,
            known: false,
        });
        let part = (device.parts.len() - 1) as u32;
        self.dev_index.insert(dev, DevSlot { disk, part });
        part
    }

    /// A partition the geometry does not know starts where its remaps say
    /// (the first that says; a partition does not move while traced).
    pub(super) fn learn_partition_start(&mut self, disk: u32, part: u32, start: u64) {
        let Some(part) = self.devices[disk as usize].parts.get_mut(part as usize) else {
            return;
        };
        if !part.known && part.geometry.start == 0 {
            part.geometry.start = start;
        }
    }
}

impl Engine {
    /// Installs the disks present now (as [`Engine::set_disks`] does) and marks
    /// every disk and partition with known geometry that is not among them as
    /// gone; one that comes back (same device number) is present again. The
    /// measures of a gone device are kept.
    pub fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
        let present_disks: Vec<u32> = disks
            .iter()
            .filter_map(|disk| disk.dev.map(DevId::to_kernel))
            .collect();
        let present_parts: Vec<u32> = disks
            .iter()
            .flat_map(|disk| &disk.partitions)
            .filter_map(|part| part.dev.map(DevId::to_kernel))
            .collect();
        self.set_disks(disks);
        for device in &mut self.devices {
            // Only a device seen in sysfs before can be missing from it now.
            device.gone =
                device.known && device.dev.is_some_and(|dev| !present_disks.contains(&dev));
            for part in &mut device.parts {
                part.gone =
                    device.gone || (part.geometry.size != 0 && !present_parts.contains(&part.dev));
            }
        }
    }
}
