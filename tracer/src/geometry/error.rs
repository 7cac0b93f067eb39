//! What can go wrong reading devices: a name that names nothing (the user's
//! input), or a sysfs that cannot be read (the system).

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GeometryError {
    /// A `--device` or `check` argument that is no block device here.
    #[error(
        "unknown device `{name}`: give a block device such as sda, sda2, /dev/sda2 or 8:2 (see `lsblk`)"
    )]
    UnknownDevice { name: String },
    /// A disk name with no `SYSFS/block/NAME` directory.
    #[error("unknown disk `{name}`: no {} (see `lsblk`)", dir.display())]
    UnknownDisk { name: String, dir: PathBuf },
    /// `SYSFS/block` cannot be listed.
    #[error("cannot list disks in {} (is sysfs mounted?)", dir.display())]
    ListDisks {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl GeometryError {
    /// True when the user's input was wrong (exit code 2), not the system.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            GeometryError::UnknownDevice { .. } | GeometryError::UnknownDisk { .. }
        )
    }
}
