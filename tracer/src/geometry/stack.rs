//! Stacked devices (device-mapper, md): where each one's data lands on the
//! disks below it, through every level. Device-mapper offsets come from the
//! table (DM_TABLE_STATUS, [`DeviceProbe::dm_table`]), md's from sysfs
//! (`md/dev-*/offset`), partitions' from their `start`.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ioctl::{DeviceProbe, DmTarget};
use super::{sysfs, DevId, DiskGeometry};

/// Levels followed below one top device before giving up (a loop in sysfs,
/// or a stack deeper than anyone builds).
const MAX_DEPTH: usize = 8;

/// How a device-mapper or md device maps its data onto the devices below.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    /// What the top device is: `dm-linear`, `dm-crypt`, `dm-striped`,
    /// `md-raid0`, ... (`dm-` + the target types, or `md-` + the level).
    pub kind: String,
    /// `dm/name`: the name `dmsetup` knows it by (empty for md).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dm_name: String,
    /// `dm/uuid`: which tool made it (`LVM-`, `CRYPT-`, `mpath-`), if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// dm-crypt's encryption sector size, bytes (`sector_size:`; 512 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypt_sector_size: Option<u32>,
    /// The largest read and write dm-crypt passes down in one piece, bytes:
    /// 128 KiB since 6.11 (`max_read_size`/`max_write_size` can only lower
    /// it), or 1 MiB writes before; `None` for reads there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypt_max_io: Option<CryptMaxIo>,
    /// The stripe or RAID chunk, sectors (0: none).
    #[serde(default)]
    pub chunk_sectors: u64,
    /// Each place the top device's data lands on a disk.
    pub legs: Vec<StackLeg>,
    /// Why the mapping could not be read (no permission for the dm control
    /// node, an old kernel), so the audit says it did not look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// The dm-crypt cap on one piece of I/O (`dm_crypt` module parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CryptMaxIo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    pub write_bytes: u64,
    /// The kernel has the module parameters (they can lower the cap; since
    /// the 2025 zone fix, in stable kernels too, not raise it past 128 KiB).
    pub tunable: bool,
}

/// Defaults in drivers/md/dm-crypt.c: `DM_CRYPT_DEFAULT_MAX_{READ,WRITE}_SIZE`,
/// and writes never above `BIO_MAX_VECS` pages.
const CRYPT_DEFAULT_MAX_IO: u64 = 128 * 1024;
const CRYPT_MAX_WRITE: u64 = 256 * 4096;

/// dm-crypt's cap, from `/sys/module/dm_crypt/parameters`: the smaller of
/// the parameter (0: unset) and the 128 KiB default, as `crypt_map` takes it
/// (`min_not_zero`), rounded down to the encryption sector.
fn read_crypt_max_io(sysfs_root: &Path, sector_size: u32) -> CryptMaxIo {
    let parameters = sysfs_root.join("module/dm_crypt/parameters");
    let parameter =
        |name: &str| read_text(&parameters, name).and_then(|text| text.trim().parse::<u64>().ok());
    let align = u64::from(sector_size).max(512);
    let aligned = |bytes: u64| (bytes / align * align).max(align);
    match (parameter("max_read_size"), parameter("max_write_size")) {
        (Some(read), Some(write)) => {
            let or_default = |bytes: u64| match bytes {
                0 => CRYPT_DEFAULT_MAX_IO,
                set => set.min(CRYPT_DEFAULT_MAX_IO),
            };
            CryptMaxIo {
                read_bytes: Some(aligned(or_default(read))),
                write_bytes: aligned(or_default(write).min(CRYPT_MAX_WRITE)),
                tunable: true,
            }
        }
        _ => CryptMaxIo {
            read_bytes: None,
            write_bytes: CRYPT_MAX_WRITE,
            tunable: false,
        },
    }
}

/// One path from the top device down to the device its data lands on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StackLeg {
    /// The top device's first sector that this leg maps.
    pub top_sector: u64,
    /// From just below the top to the bottom: each device, how the level
    /// above reaches it, and where the top's data starts in it.
    pub levels: Vec<StackLevel>,
    /// The device the leg ends on (a disk, or a RAID or stripe device whose
    /// chunks are its alignment), without partitions or stack of its own.
    pub bottom: Box<DiskGeometry>,
    /// The top's data start on `bottom`, sectors.
    pub bottom_start: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackLevel {
    pub device: String,
    /// `linear`, `crypt`, `striped`, `raid1 data offset`, `partition`, ...
    pub via: String,
    /// The sector of `device` where the leg's top sector lands.
    pub start_sectors: u64,
}

impl Stack {
    /// Each leg as the way down from `top`: `dm-1 → vda1 (crypt 0) → vda
    /// (partition 2048)`, the sector each level's data starts at.
    pub fn paths(&self, top: &str) -> Vec<String> {
        self.legs
            .iter()
            .map(|leg| {
                let mut path = top.to_string();
                for level in &leg.levels {
                    path.push_str(&format!(
                        " → {} ({} {})",
                        level.device, level.via, level.start_sectors
                    ));
                }
                path
            })
            .collect()
    }

    /// One line naming the stack and its ways down, for the report and the TUI.
    pub fn summary(&self, top: &str) -> String {
        let name = match self.dm_name.as_str() {
            "" => String::new(),
            name => format!(" `{name}`"),
        };
        match &self.unreadable {
            Some(why) => format!("{}{name}, not read: {why}", self.kind),
            None => format!("{}{name}: {}", self.kind, self.paths(top).join("; ")),
        }
    }
}

impl StackLeg {
    /// Sectors by which the top's blocks are shifted on the bottom: a top
    /// sector `s` lands on bottom sector `s + shift`.
    pub fn shift(&self) -> i128 {
        i128::from(self.bottom_start) - i128::from(self.top_sector)
    }

    /// The bottom sector the top's sector 0 would land on, kept
    /// non-negative modulo every boundary the bottom has (a later target
    /// can map onto a lower sector than its own start).
    pub fn top_zero_on_bottom(&self) -> u64 {
        let bottom = &self.bottom;
        let period = [
            2048,
            u64::from(bottom.physical_block_size.max(bottom.minimum_io_size)) / 512,
            u64::from(bottom.optimal_io_size) / 512,
            u64::from(bottom.chunk_sectors),
        ]
        .into_iter()
        .filter(|&sectors| sectors > 1)
        .fold(1u64, |a, b| a / gcd(a, b) * b);
        let period = i128::from(period);
        u64::try_from(self.shift().rem_euclid(period) + period).unwrap_or(0)
    }

    /// The first level, from the top, whose own offset is not a multiple
    /// of `unit` sectors: where the fix goes. `None` when the shift is one.
    pub fn culprit(&self, unit: u64) -> Option<&StackLevel> {
        let unit = i128::from(unit.max(1));
        if self.shift().rem_euclid(unit) == 0 {
            return None;
        }
        let mut above = i128::from(self.top_sector);
        for level in &self.levels {
            let here = i128::from(level.start_sectors);
            if (here - above).rem_euclid(unit) != 0 {
                return Some(level);
            }
            above = here;
        }
        self.levels.last()
    }

    /// The sectors the level `index` adds to the shift.
    pub fn level_offset(&self, index: usize) -> i128 {
        let above = match index {
            0 => self.top_sector,
            _ => self.levels[index - 1].start_sectors,
        };
        i128::from(self.levels[index].start_sectors) - i128::from(above)
    }
}

/// The stack below `name` when it is a device-mapper or md device.
pub fn read_stack(sysfs_root: &Path, name: &str, probe: &dyn DeviceProbe) -> Option<Stack> {
    let dir = sysfs_root.join("block").join(name);
    if dir.join("dm").is_dir() {
        Some(read_dm(sysfs_root, &dir, probe))
    } else if dir.join("md").is_dir() {
        Some(read_md(sysfs_root, &dir, probe))
    } else {
        None
    }
}

fn read_dm(sysfs_root: &Path, dir: &Path, probe: &dyn DeviceProbe) -> Stack {
    let uuid = read_text(&dir.join("dm"), "uuid").unwrap_or_default();
    let dm_name = read_text(&dir.join("dm"), "name").unwrap_or_default();
    let Some(dev) = read_text(dir, "dev").and_then(|text| parse_dev(&text)) else {
        return unreadable("dm", uuid, "no dev number in sysfs".into());
    };
    let targets = match probe.dm_table(dev) {
        Ok(targets) => targets,
        Err(why) => return unreadable("dm", uuid, why),
    };
    let mut kinds: Vec<&str> = Vec::new();
    for target in &targets {
        if !kinds.contains(&target.target_type.as_str()) {
            kinds.push(&target.target_type);
        }
    }
    let mut stack = Stack {
        kind: format!("dm-{}", kinds.join("+")),
        dm_name,
        uuid,
        ..Stack::default()
    };
    for target in &targets {
        let mapping = TargetMapping::parse(target);
        if let Some(size) = mapping.crypt_sector_size {
            stack.crypt_sector_size = Some(size);
            stack.crypt_max_io = Some(read_crypt_max_io(sysfs_root, size));
        }
        stack.chunk_sectors = stack.chunk_sectors.max(mapping.chunk_sectors);
        for (lower, offset) in mapping.lowers {
            let Some(lower) = sysfs::name_of_dev_in(sysfs_root, lower) else {
                continue;
            };
            if let Some(leg) = follow(
                sysfs_root,
                probe,
                target.start,
                &lower,
                &target.target_type,
                offset,
            ) {
                stack.legs.push(leg);
            }
        }
    }
    stack
}

fn read_md(sysfs_root: &Path, dir: &Path, probe: &dyn DeviceProbe) -> Stack {
    let md = dir.join("md");
    let level = read_text(&md, "level").unwrap_or_default();
    let mut stack = Stack {
        kind: format!("md-{level}"),
        chunk_sectors: read_text(&md, "chunk_size")
            .and_then(|text| text.parse::<u64>().ok())
            .map(|bytes| bytes / 512)
            .unwrap_or(0),
        ..Stack::default()
    };
    let Ok(entries) = fs::read_dir(&md) else {
        return stack;
    };
    let mut members: Vec<_> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("dev-"))
        .map(|entry| entry.path())
        .collect();
    members.sort();
    for member in members {
        let Some(lower) = fs::read_link(member.join("block"))
            .ok()
            .and_then(|target| Some(target.file_name()?.to_string_lossy().into_owned()))
        else {
            continue;
        };
        let offset = read_text(&member, "offset")
            .and_then(|text| text.parse().ok())
            .unwrap_or(0);
        let via = format!("{level} data offset");
        if let Some(leg) = follow(sysfs_root, probe, 0, &lower, &via, offset) {
            stack.legs.push(leg);
        }
    }
    stack
}

fn unreadable(kind: &str, uuid: String, why: String) -> Stack {
    Stack {
        kind: kind.to_string(),
        uuid,
        unreadable: Some(why),
        ..Stack::default()
    }
}

/// Follows the top's data from sector `start` of `device` down through
/// partitions and single-device dm targets (linear, crypt, flakey, delay)
/// to the device it lands on.
fn follow(
    sysfs_root: &Path,
    probe: &dyn DeviceProbe,
    top_sector: u64,
    device: &str,
    via: &str,
    start: u64,
) -> Option<StackLeg> {
    let mut levels = vec![StackLevel {
        device: device.to_string(),
        via: via.to_string(),
        start_sectors: start,
    }];
    for _ in 0..MAX_DEPTH {
        let here = levels.last()?;
        let Some(lower) = step_down(sysfs_root, probe, &here.device, here.start_sectors) else {
            let mut bottom = sysfs::read_disk_in(sysfs_root, &here.device, probe).ok()?;
            bottom.partitions.clear();
            let bottom_start = here.start_sectors;
            return Some(StackLeg {
                top_sector,
                levels,
                bottom: Box::new(bottom),
                bottom_start,
            });
        };
        levels.push(lower);
    }
    None
}

/// Where sector `at` of `device` lands one level down, when the level maps
/// it linearly onto one lower device (a partition, or a single-device dm
/// target); `None` at a disk, a RAID or a stripe.
fn step_down(
    sysfs_root: &Path,
    probe: &dyn DeviceProbe,
    device: &str,
    at: u64,
) -> Option<StackLevel> {
    let class = sysfs_root.join("class/block").join(device);
    if class.join("partition").is_file() {
        let start: u64 = read_text(&class, "start")?.parse().ok()?;
        let disk = fs::canonicalize(&class).ok()?;
        let disk = disk.parent()?.file_name()?.to_string_lossy().into_owned();
        return Some(StackLevel {
            device: disk,
            via: "partition".to_string(),
            start_sectors: start + at,
        });
    }
    let dir = sysfs_root.join("block").join(device);
    if !dir.join("dm").is_dir() {
        return None;
    }
    let dev = parse_dev(&read_text(&dir, "dev")?)?;
    let targets = probe.dm_table(dev).ok()?;
    let target = targets
        .iter()
        .find(|target| at >= target.start && at < target.start + target.length)?;
    let mapping = TargetMapping::parse(target);
    match mapping.lowers.as_slice() {
        [(lower, offset)] if mapping.chunk_sectors == 0 => Some(StackLevel {
            device: sysfs::name_of_dev_in(sysfs_root, *lower)?,
            via: target.target_type.clone(),
            start_sectors: offset + (at - target.start),
        }),
        _ => None,
    }
}

/// What one table line maps onto: lower devices with their offsets.
#[derive(Debug, Default, PartialEq, Eq)]
struct TargetMapping {
    lowers: Vec<(DevId, u64)>,
    chunk_sectors: u64,
    crypt_sector_size: Option<u32>,
}

impl TargetMapping {
    /// From `dmsetup table`'s words for the targets that carry data to a
    /// known place; others (error, zero, thin) map to nothing.
    fn parse(target: &DmTarget) -> TargetMapping {
        let words: Vec<&str> = target.params.split_whitespace().collect();
        let pair = |dev: usize, offset: usize| -> Option<(DevId, u64)> {
            Some((
                parse_dev(words.get(dev)?)?,
                words.get(offset)?.parse().ok()?,
            ))
        };
        let mut mapping = TargetMapping::default();
        match target.target_type.as_str() {
            // <dev> <offset> ...
            "linear" | "flakey" | "delay" => mapping.lowers.extend(pair(0, 1)),
            // <cipher> <key> <iv_offset> <dev> <offset> [<#opts> <opt>...]
            "crypt" => {
                mapping.lowers.extend(pair(3, 4));
                mapping.crypt_sector_size = Some(
                    words
                        .iter()
                        .find_map(|word| word.strip_prefix("sector_size:")?.parse().ok())
                        .unwrap_or(512),
                );
            }
            // <#stripes> <chunk> (<dev> <offset>)...
            "striped" => {
                let stripes: usize = words.first().and_then(|w| w.parse().ok()).unwrap_or(0);
                mapping.chunk_sectors = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(0);
                for stripe in 0..stripes {
                    mapping.lowers.extend(pair(2 + 2 * stripe, 3 + 2 * stripe));
                }
            }
            // Every path is the whole device: each major:minor word is one.
            "multipath" => mapping.lowers.extend(
                words
                    .iter()
                    .filter_map(|word| parse_dev(word))
                    .map(|dev| (dev, 0)),
            ),
            _ => {}
        }
        mapping
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// "254:1" (as tables and sysfs print device numbers).
fn parse_dev(text: &str) -> Option<DevId> {
    let (major, minor) = text.trim().split_once(':')?;
    Some(DevId::new(major.parse().ok()?, minor.parse().ok()?))
}

fn read_text(dir: &Path, attr: &str) -> Option<String> {
    fs::read_to_string(dir.join(attr))
        .ok()
        .map(|text| text.trim().to_string())
}
