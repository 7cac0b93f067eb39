//! Whole disks as the tool sees them: sysfs geometry and, for a
//! device-mapper or md device, the stack below it.

use std::path::Path;

use super::error::GeometryError;
use super::ioctl::{DevNodeProbe, DeviceProbe};
use super::{stack, sysfs, DiskGeometry};

type Result<T> = std::result::Result<T, GeometryError>;

/// Reads every disk under `/sys/block`, or only the named ones, from the live
/// system; block sizes come from BLKBSZGET on `/dev/NAME` where permitted.
pub fn read_disks(names: Option<&[String]>) -> Result<Vec<DiskGeometry>> {
    read_disks_in(Path::new("/sys"), names, &DevNodeProbe::default())
}

/// Reads every disk under `SYSFS/block` (sorted by name), or the named ones in
/// the given order. A partition name stands for its disk; each disk appears
/// once. An unknown name is a usage error.
pub fn read_disks_in(
    sysfs_root: &Path,
    names: Option<&[String]>,
    probe: &dyn DeviceProbe,
) -> Result<Vec<DiskGeometry>> {
    let disk_names = match names {
        Some(names) => {
            let mut disks: Vec<String> = Vec::new();
            for name in names {
                let disk = sysfs::disk_name_of(sysfs_root, name)?;
                if !disks.contains(&disk) {
                    disks.push(disk);
                }
            }
            disks
        }
        None => sysfs::list_disks(sysfs_root)?,
    };
    disk_names
        .iter()
        .map(|name| {
            let mut disk = sysfs::read_disk_in(sysfs_root, name, probe)?;
            disk.stack = stack::read_stack(sysfs_root, name, probe);
            Ok(disk)
        })
        .collect()
}
