//! Turns what a user types (`sdc`, `sdc2`, `/dev/sdc2`, `8:34`) into devices.

use std::path::Path;

use super::error::GeometryError;
use super::DevId;

type Result<T> = std::result::Result<T, GeometryError>;

/// A device named on the command line, with the disk it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedDevice {
    pub name: String,
    pub dev: DevId,
    /// The whole disk: itself unless this is a partition.
    pub disk_name: String,
    pub disk_dev: DevId,
}

impl ResolvedDevice {
    pub fn is_partition(&self) -> bool {
        self.dev != self.disk_dev
    }
}

fn read_dev(path: &Path) -> Option<DevId> {
    let text = std::fs::read_to_string(path).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some(DevId::new(major.parse().ok()?, minor.parse().ok()?))
}

/// Resolves one argument against a sysfs tree rooted at `sysfs` (normally `/sys`).
pub fn resolve_in(sysfs: &Path, arg: &str) -> Result<ResolvedDevice> {
    let unknown = || GeometryError::UnknownDevice {
        name: arg.to_string(),
    };
    let name = if let Some((major, minor)) = arg.split_once(':') {
        let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
            return Err(unknown());
        };
        let link = sysfs.join("dev/block").join(format!("{major}:{minor}"));
        let target = std::fs::read_link(&link).map_err(|_| unknown())?;
        target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(unknown)?
    } else if let Some(rest) = arg.strip_prefix("/dev/") {
        // Follow /dev symlinks (e.g. /dev/disk/by-id/...) to the kernel name.
        let real = std::fs::canonicalize(arg).unwrap_or_else(|_| Path::new(arg).to_path_buf());
        real.strip_prefix("/dev")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| rest.to_string())
    } else {
        arg.to_string()
    };
    if name.is_empty() || name.contains('/') && !name.starts_with("mapper/") {
        return Err(unknown());
    }
    let class = sysfs.join("class/block").join(&name);
    let dev = read_dev(&class.join("dev")).ok_or_else(unknown)?;
    if class.join("partition").exists() {
        // sysfs places a partition inside its disk's directory.
        let real = std::fs::canonicalize(&class).map_err(|_| unknown())?;
        let disk_dir = real.parent().ok_or_else(unknown)?;
        let disk_name = disk_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(unknown)?;
        let disk_dev = read_dev(&disk_dir.join("dev")).ok_or_else(unknown)?;
        Ok(ResolvedDevice {
            name,
            dev,
            disk_name,
            disk_dev,
        })
    } else {
        Ok(ResolvedDevice {
            disk_name: name.clone(),
            disk_dev: dev,
            name,
            dev,
        })
    }
}

/// Device numbers of a disk's partitions, from a sysfs tree.
pub fn partitions_in(sysfs: &Path, disk_name: &str) -> Vec<DevId> {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class/block").join(disk_name)) else {
        return Vec::new();
    };
    let mut found: Vec<DevId> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("partition").exists())
        .filter_map(|entry| read_dev(&entry.path().join("dev")))
        .collect();
    found.sort();
    found
}

/// Resolves against the live `/sys`.
pub fn resolve(arg: &str) -> Result<ResolvedDevice> {
    resolve_in(Path::new("/sys"), arg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A minimal sysfs: disk sdc (8:32) with partition sdc2 (8:34).
    fn fixture(tag: &str) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("iosplit-resolve-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let disk = root.join("devices/virtual/block/sdc");
        fs::create_dir_all(disk.join("sdc2")).unwrap();
        fs::write(disk.join("dev"), "8:32\n").unwrap();
        fs::write(disk.join("sdc2/dev"), "8:34\n").unwrap();
        fs::write(disk.join("sdc2/partition"), "2\n").unwrap();
        fs::create_dir_all(root.join("class/block")).unwrap();
        fs::create_dir_all(root.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(&disk, root.join("class/block/sdc")).unwrap();
        std::os::unix::fs::symlink(disk.join("sdc2"), root.join("class/block/sdc2")).unwrap();
        std::os::unix::fs::symlink(disk.join("sdc2"), root.join("dev/block/8:34")).unwrap();
        root
    }

    #[test]
    fn every_spelling_of_a_partition_finds_its_disk() {
        let root = fixture("spellings");
        for arg in ["sdc2", "/dev/sdc2", "8:34"] {
            let found = resolve_in(&root, arg).unwrap();
            assert_eq!(found.name, "sdc2", "{arg}");
            assert_eq!(found.dev, DevId::new(8, 34));
            assert_eq!(
                (found.disk_name.as_str(), found.disk_dev),
                ("sdc", DevId::new(8, 32))
            );
            assert!(found.is_partition());
        }
        let disk = resolve_in(&root, "sdc").unwrap();
        assert!(!disk.is_partition());
        assert_eq!(partitions_in(&root, "sdc"), [DevId::new(8, 34)]);
        let _ = fs::remove_dir_all(root);
    }

    #[test]
    fn unknown_devices_get_a_usage_error() {
        let root = fixture("unknown");
        for arg in ["sdz", "9:9", "x:y", "/dev/nope", ""] {
            let err = resolve_in(&root, arg).unwrap_err();
            assert!(
                matches!(&err, GeometryError::UnknownDevice { name } if name == arg),
                "{arg}: {err}"
            );
            assert!(err.to_string().starts_with("unknown device"), "{err}");
            assert!(err.is_usage());
        }
        let _ = fs::remove_dir_all(root);
    }
}
