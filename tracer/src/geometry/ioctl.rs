//! Block sizes: the one geometry value sysfs does not show. The current one
//! comes from BLKBSZGET, kept behind [`BlockSizeProbe`] so sysfs readers can
//! run on fixture trees without touching `/dev`; the one the kernel will pick
//! comes from [`crate::blk::predicted_block_size`].

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `_IOR(0x12, 112, size_t)` from `<linux/fs.h>`. The kernel writes an `int`
/// through the pointer despite the `size_t` in the encoding.
const BLKBSZGET: u64 = ioc_read(0x12, 112, std::mem::size_of::<libc::size_t>() as u64);

/// `_IOR(type, nr, size)` for the asm-generic ioctl layout (x86, arm64, riscv).
const fn ioc_read(kind: u64, nr: u64, size: u64) -> u64 {
    const IOC_READ: u64 = 2;
    (IOC_READ << 30) | (size << 16) | (kind << 8) | nr
}

/// Where the current block size of a device comes from.
pub trait BlockSizeProbe {
    /// Block size in bytes of the device with this kernel name (`sdc2`), or
    /// `None` when it cannot be read (no node, no permission).
    fn block_size(&self, name: &str) -> Option<u32>;
}

/// Never knows a block size: for fixture trees and unprivileged callers that
/// want predictions only.
pub struct NoBlockSize;

impl BlockSizeProbe for NoBlockSize {
    fn block_size(&self, _name: &str) -> Option<u32> {
        None
    }
}

/// Reads BLKBSZGET from device nodes under a directory (normally `/dev`).
pub struct DevNodeProbe {
    pub dev_dir: PathBuf,
}

impl Default for DevNodeProbe {
    fn default() -> Self {
        DevNodeProbe {
            dev_dir: PathBuf::from("/dev"),
        }
    }
}

impl BlockSizeProbe for DevNodeProbe {
    fn block_size(&self, name: &str) -> Option<u32> {
        block_size_of(&self.dev_dir.join(name)).ok()
    }
}

/// BLKBSZGET on the block device at `path`. Opening a device nobody holds
/// makes the kernel (re)compute its initial block size, so the answer is what
/// the next raw writer (mkfs, dd) gets.
pub fn block_size_of(path: &Path) -> io::Result<u32> {
    // O_NONBLOCK: do not wait for media on removable drives.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let mut size: libc::c_int = 0;
    // SAFETY: the fd is open for the duration of the call, and BLKBSZGET
    // writes exactly one int through the pointer, which points at `size`.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKBSZGET as _,
            &mut size as *mut libc::c_int,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(size)
        .ok()
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "block size out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_linux_fs_h() {
        // 0x80081270 is BLKBSZGET on 64-bit Linux (size_t is 8 bytes).
        #[cfg(target_pointer_width = "64")]
        assert_eq!(BLKBSZGET, 0x8008_1270);
    }

    #[test]
    fn a_regular_file_is_not_a_block_device() {
        let err = block_size_of(Path::new("/proc/self/status")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
    }

    #[test]
    fn a_missing_node_yields_none() {
        let probe = DevNodeProbe {
            dev_dir: PathBuf::from("/nonexistent-dev-dir"),
        };
        assert_eq!(probe.block_size("sdc2"), None);
        assert_eq!(NoBlockSize.block_size("sdc2"), None);
    }
}
