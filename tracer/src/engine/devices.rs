//! The device registry: the disks and partitions known by geometry or
//! seen in the trace, found by device number. [`Devices`] owns what each
//! device is (name, geometry, limits, present or gone, what the trace
//! showed of it); what was measured on it is the accounting's.

use super::split::SplitLimits;
use super::table::FastMap;
use super::target::NO_PART;
use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};

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
    pub parts: Vec<PartState>,
    /// Missing from sysfs (or without media) at the last refresh.
    pub gone: bool,
    pub(super) seen_issue: bool,
    /// An imported trace showed its requests (G or I) though it may
    /// dispatch none.
    pub(super) seen_request: bool,
    /// Completions that matched no command of its (see [`Measures`]).
    ///
    /// [`Measures`]: crate::model::Measures
    pub(super) unpaired_completions: u64,
    /// A `block_bio_queue` of its own was traced (not only remaps from it).
    pub(super) seen_queue: bool,
}

impl DeviceState {
    fn unknown(dev: u32) -> DeviceState {
        DeviceState {
            dev: Some(dev),
            name: DevId::from_kernel(dev).to_string(),
            geometry: DiskGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..DiskGeometry::default()
            },
            known: false,
            limits: SplitLimits::default(),
            parts: Vec::new(),
            gone: false,
            seen_issue: false,
            seen_request: false,
            unpaired_completions: 0,
            seen_queue: false,
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

    /// md (any level, by its stack or its major): its own `bio_split` carries
    /// the completion trace to the piece it cuts off, so each piece's end
    /// is traced (device-mapper traces one completion for the whole bio).
    pub(super) fn is_md(&self) -> bool {
        const MD_MAJOR: u32 = 9;
        let by_stack = self.geometry.stack.as_ref();
        by_stack.is_some_and(|stack| stack.kind.starts_with("md-"))
            || self
                .dev
                .is_some_and(|dev| DevId::from_kernel(dev).major == MD_MAJOR)
    }

    /// Bio-based: declared so, and no request was ever seen on it.
    pub(super) fn bio_based(&self) -> bool {
        !(self.geometry.request_based || self.seen_issue || self.seen_request)
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

/// The registry: every device known, by index, and the index by device number.
#[derive(Default)]
pub(super) struct Devices {
    list: Vec<DeviceState>,
    index: FastMap<u32, DevSlot>,
}

impl Devices {
    /// Every disk, in index order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, DeviceState> {
        self.list.iter()
    }

    pub(super) fn get(&self, disk: u32) -> &DeviceState {
        &self.list[disk as usize]
    }

    pub(super) fn get_mut(&mut self, disk: u32) -> &mut DeviceState {
        &mut self.list[disk as usize]
    }

    /// Where `dev` is: its disk, and its partition there.
    pub(super) fn slot(&self, dev: u32) -> Option<DevSlot> {
        self.index.get(&dev).copied()
    }

    /// Installs fresh geometry. Devices and partitions keep their measures
    /// (matched by device number); ones no longer listed are kept as they were.
    pub(super) fn set_disks(&mut self, disks: Vec<DiskGeometry>) {
        for disk in disks {
            let dev = disk.dev.map(DevId::to_kernel);
            let existing = match dev {
                Some(dev) => self
                    .index
                    .get(&dev)
                    .filter(|slot| slot.part == NO_PART)
                    .map(|slot| slot.disk as usize),
                None => self
                    .list
                    .iter()
                    .position(|device| device.dev.is_none() && device.name == disk.name),
            };
            let index = match existing {
                Some(index) => index,
                None => {
                    let mut device = DeviceState::unknown(dev.unwrap_or(0));
                    device.dev = dev;
                    self.list.push(device);
                    self.list.len() - 1
                }
            };
            if let Some(dev) = dev {
                self.index.insert(
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
            let device = &mut self.list[index];
            if !disk.name.is_empty() {
                device.name = disk.name.clone();
            }
            device.limits = SplitLimits::from_geometry(&disk);
            device.known = true;
            device.geometry = disk;
        }
    }

    fn install_partition(&mut self, disk: usize, partition: &PartitionGeometry) {
        let dev = partition.dev.map(DevId::to_kernel);
        let device = &mut self.list[disk];
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
            self.index.insert(
                dev,
                DevSlot {
                    disk: disk as u32,
                    part: index as u32,
                },
            );
        }
    }

    /// Whether `dev` is a whole md raid4/5/6 device (see
    /// [`DeviceState::writes_own_stripes`]).
    pub(super) fn is_stripe_writer(&self, dev: u32) -> bool {
        self.index.get(&dev).is_some_and(|slot| {
            slot.part == NO_PART && self.list[slot.disk as usize].writes_own_stripes()
        })
    }

    /// Whether `dev` is a whole device that issues requests: a remap from
    /// it moves a request (request-based dm), not a bio.
    pub(super) fn is_request_device(&self, dev: u32) -> bool {
        self.index
            .get(&dev)
            .is_some_and(|slot| slot.part == NO_PART && !self.list[slot.disk as usize].bio_based())
    }

    /// Whether a remap onto `dev` from `from` comes from a device stacked
    /// above it whose queues are not traced, rather than from one of its
    /// partitions: a known whole device never seen queuing, or an unknown
    /// one of another major (partitions share their disk's major or take
    /// the extended one, as a loop disk's do; two dm devices share one
    /// too, so dm on dm is told apart only when the geometry knows them).
    /// A device whose queues are traced has its bios as fragments already;
    /// dm's partial clones of them must not count twice.
    pub(super) fn is_upper_device(&self, dev: u32, from: u32) -> bool {
        if from == dev {
            return false;
        }
        match self.index.get(&from) {
            Some(slot) => slot.part == NO_PART && !self.list[slot.disk as usize].seen_queue,
            None => {
                let major = DevId::from_kernel(from).major;
                major != BLOCK_EXT_MAJOR && major != DevId::from_kernel(dev).major
            }
        }
    }

    /// The disk an event's dev names, created (as unknown) on first sight.
    pub(super) fn ensure_disk(&mut self, dev: u32) -> u32 {
        if let Some(slot) = self.index.get(&dev) {
            return slot.disk;
        }
        self.list.push(DeviceState::unknown(dev));
        let disk = (self.list.len() - 1) as u32;
        self.index.insert(
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
        if let Some(slot) = self.index.get(&dev) {
            return if slot.disk == disk {
                slot.part
            } else {
                NO_PART
            };
        }
        let device = &mut self.list[disk as usize];
        device.parts.push(PartState {
            dev,
            name: DevId::from_kernel(dev).to_string(),
            geometry: PartitionGeometry {
                dev: Some(DevId::from_kernel(dev)),
                ..PartitionGeometry::default()
            },
            gone: false,
            known: false,
        });
        let part = (device.parts.len() - 1) as u32;
        self.index.insert(dev, DevSlot { disk, part });
        part
    }

    /// A partition the geometry does not know starts where its remaps say
    /// (the first that says; a partition does not move while traced).
    pub(super) fn learn_partition_start(&mut self, disk: u32, part: u32, start: u64) {
        let Some(part) = self.list[disk as usize].parts.get_mut(part as usize) else {
            return;
        };
        if !part.known && part.geometry.start == 0 {
            part.geometry.start = start;
        }
    }

    /// Installs the disks present now (as [`Devices::set_disks`] does) and marks
    /// every disk and partition with known geometry that is not among them as
    /// gone; one that comes back (same device number) is present again. The
    /// measures of a gone device are kept.
    pub(super) fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
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
        for device in &mut self.list {
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
