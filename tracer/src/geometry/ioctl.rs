//! What sysfs does not show: a device's current block size (BLKBSZGET) and a
//! device-mapper device's table (DM_TABLE_STATUS), kept behind
//! [`DeviceProbe`] so sysfs readers can run on fixture trees without touching
//! `/dev`. The block size the kernel will pick comes from
//! [`crate::blk::predicted_block_size`].

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::DevId;

/// `_IOR(0x12, 112, size_t)` from `<linux/fs.h>`. The kernel writes an `int`
/// through the pointer despite the `size_t` in the encoding.
const BLKBSZGET: u64 = ioc_read(0x12, 112, std::mem::size_of::<libc::size_t>() as u64);

/// `_IOR(type, nr, size)` for the asm-generic ioctl layout (x86, arm64, riscv).
const fn ioc_read(kind: u64, nr: u64, size: u64) -> u64 {
    const IOC_READ: u64 = 2;
    (IOC_READ << 30) | (size << 16) | (kind << 8) | nr
}

/// Where what only an ioctl tells comes from.
pub trait DeviceProbe {
    /// Block size in bytes of the device with this kernel name (`sdc2`), or
    /// `None` when it cannot be read (no node, no permission).
    fn block_size(&self, name: &str) -> Option<u32>;

    /// The active table of the device-mapper device `dev`, or why it could
    /// not be read.
    fn dm_table(&self, dev: DevId) -> Result<Vec<DmTarget>, String>;
}

/// Never knows a block size or a table: for fixture trees and unprivileged
/// callers that want predictions only.
pub struct NoIoctls;

impl DeviceProbe for NoIoctls {
    fn block_size(&self, _name: &str) -> Option<u32> {
        None
    }

    fn dm_table(&self, _dev: DevId) -> Result<Vec<DmTarget>, String> {
        Err("device-mapper tables are not read here".to_string())
    }
}

/// Reads BLKBSZGET from device nodes under a directory (normally `/dev`),
/// and dm tables from its `mapper/control`.
pub struct DevNodeProbe {
    pub dev_dir: PathBuf,
    /// False: leave the devices unopened (opening one recomputes its block
    /// size); tables are read through the control node either way.
    pub block_sizes: bool,
}

impl Default for DevNodeProbe {
    fn default() -> Self {
        DevNodeProbe {
            dev_dir: PathBuf::from("/dev"),
            block_sizes: true,
        }
    }
}

impl DevNodeProbe {
    /// Tables only: for a cheap, repeated look.
    pub fn tables_only() -> Self {
        DevNodeProbe {
            block_sizes: false,
            ..DevNodeProbe::default()
        }
    }
}

impl DeviceProbe for DevNodeProbe {
    fn block_size(&self, name: &str) -> Option<u32> {
        if !self.block_sizes {
            return None;
        }
        block_size_of(&self.dev_dir.join(name)).ok()
    }

    fn dm_table(&self, dev: DevId) -> Result<Vec<DmTarget>, String> {
        let control = self.dev_dir.join("mapper/control");
        dm_table_status(&control, dev).map_err(|err| format!("{}: {err}", control.display()))
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

/// One target of a device-mapper table, as `dmsetup table` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmTarget {
    /// First sector of the dm device this target maps, and how many.
    pub start: u64,
    pub length: u64,
    /// "linear", "crypt", "striped", ...
    pub target_type: String,
    /// The target's table line after its type ("254:1 2048" for linear);
    /// device-mapper prints key material of crypt as it was loaded.
    pub params: String,
}

/// `<linux/dm-ioctl.h>`: interface version 4, `struct dm_ioctl` (312 bytes)
/// and `struct dm_target_spec` (40 bytes, then its NUL-terminated params).
const DM_VERSION_MAJOR: u32 = 4;
const DM_IOCTL_SIZE: usize = 312;
const DM_TARGET_SPEC_SIZE: usize = 40;
/// `_IOWR(0xfd, DM_TABLE_STATUS_CMD = 12, struct dm_ioctl)`.
const DM_TABLE_STATUS: u64 = (3 << 30) | ((DM_IOCTL_SIZE as u64) << 16) | (0xfd << 8) | 12;
/// Return the table, not the targets' status lines.
const DM_STATUS_TABLE_FLAG: u32 = 1 << 4;
/// The kernel's answer did not fit the buffer.
const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;

/// DM_TABLE_STATUS on `control` (`/dev/mapper/control`) for the device `dev`,
/// growing the buffer until the whole table fits.
pub fn dm_table_status(control: &Path, dev: DevId) -> io::Result<Vec<DmTarget>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(control)?;
    let mut size = 16 * 1024;
    loop {
        // u64 words keep the buffer 8-byte aligned, as the struct is.
        let mut buffer = vec![0u64; size / 8];
        let bytes = bytes_of_mut(&mut buffer);
        put_u32(bytes, 0, DM_VERSION_MAJOR);
        put_u32(bytes, 12, size as u32);
        put_u32(bytes, 16, DM_IOCTL_SIZE as u32);
        put_u32(bytes, 28, DM_STATUS_TABLE_FLAG);
        bytes[40..48].copy_from_slice(&huge_encode_dev(dev).to_ne_bytes());
        // SAFETY: the buffer is `size` bytes, as data_size tells the kernel,
        // and lives across the call; the kernel writes only inside it.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), DM_TABLE_STATUS as _, bytes.as_mut_ptr()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        if get_u32(bytes, 28) & DM_BUFFER_FULL_FLAG != 0 && size < 4 << 20 {
            size *= 4;
            continue;
        }
        return parse_dm_table(bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed dm table"));
    }
}

/// The targets in a DM_TABLE_STATUS answer: `target_count` specs from
/// `data_start`, each `next` bytes past `data_start` from the one before.
pub fn parse_dm_table(answer: &[u8]) -> Option<Vec<DmTarget>> {
    let data_start = get_u32(answer, 16) as usize;
    let count = get_u32(answer, 20) as usize;
    let data = answer.get(data_start..)?;
    let mut targets = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        let spec = data.get(at..at + DM_TARGET_SPEC_SIZE)?;
        let start = u64::from_ne_bytes(spec[0..8].try_into().ok()?);
        let length = u64::from_ne_bytes(spec[8..16].try_into().ok()?);
        let next = get_u32(spec, 20) as usize;
        let target_type = c_string(&spec[24..40]);
        let params = c_string(data.get(at + DM_TARGET_SPEC_SIZE..)?);
        targets.push(DmTarget {
            start,
            length,
            target_type,
            params,
        });
        if next <= at {
            break;
        }
        at = next;
    }
    (targets.len() == count).then_some(targets)
}

/// `huge_encode_dev()`: the 64-bit device number DM ioctls carry.
fn huge_encode_dev(dev: DevId) -> u64 {
    let (major, minor) = (u64::from(dev.major), u64::from(dev.minor));
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|word| word.try_into().ok())
        .map(u32::from_ne_bytes)
        .unwrap_or(0)
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_ne_bytes());
}

fn bytes_of_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements, and the slice
    // covers exactly the words' memory, borrowed mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DM_TABLE_STATUS answer laid out as drivers/md/dm-ioctl.c
    /// retrieve_status() writes it: specs 8-byte aligned, `next` relative
    /// to `data_start`.
    fn answer(targets: &[(u64, u64, &str, &str)]) -> Vec<u8> {
        let mut data = Vec::new();
        for (start, length, kind, params) in targets {
            let at = data.len();
            data.extend_from_slice(&start.to_ne_bytes());
            data.extend_from_slice(&length.to_ne_bytes());
            data.extend_from_slice(&0i32.to_ne_bytes());
            data.extend_from_slice(&0u32.to_ne_bytes());
            let mut name = [0u8; 16];
            name[..kind.len()].copy_from_slice(kind.as_bytes());
            data.extend_from_slice(&name);
            data.extend_from_slice(params.as_bytes());
            data.push(0);
            while data.len() % 8 != 0 {
                data.push(0);
            }
            let next = data.len() as u32;
            data[at + 20..at + 24].copy_from_slice(&next.to_ne_bytes());
        }
        let mut answer = vec![0u8; DM_IOCTL_SIZE];
        put_u32(&mut answer, 16, DM_IOCTL_SIZE as u32);
        put_u32(&mut answer, 20, targets.len() as u32);
        answer.extend_from_slice(&data);
        answer
    }

    #[test]
    fn table_status_request_matches_dm_ioctl_h() {
        // DM_TABLE_STATUS as strace prints it on x86_64.
        assert_eq!(DM_TABLE_STATUS, 0xc138_fd0c);
        assert_eq!(huge_encode_dev(DevId::new(254, 0)), 0xfe00);
        assert_eq!(huge_encode_dev(DevId::new(8, 300)), 0x10_082c);
    }

    #[test]
    fn tables_parse_target_by_target() {
        let bytes = answer(&[
            (0, 2048, "linear", "254:1 3"),
            (2048, 4096, "striped", "2 128 8:16 2048 8:32 2048"),
        ]);
        let targets = parse_dm_table(&bytes).unwrap();
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].params, "254:1 3");
        assert_eq!(targets[1].target_type, "striped");
        assert_eq!((targets[1].start, targets[1].length), (2048, 4096));
        let mut short = bytes.clone();
        short.truncate(DM_IOCTL_SIZE + 20);
        assert_eq!(parse_dm_table(&short), None, "a cut answer is not a table");
    }

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
            block_sizes: true,
        };
        assert_eq!(probe.block_size("sdc2"), None);
        assert_eq!(NoIoctls.block_size("sdc2"), None);
    }
}
