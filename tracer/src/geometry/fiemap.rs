//! A regular file's extent map from the `FS_IOC_FIEMAP` ioctl: which device
//! bytes hold which file bytes, so `run` can carry a file's writes down to
//! sectors. The engine receives the result as data ([`FileMap`]).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// `struct fiemap` without its trailing extents, from `<linux/fiemap.h>`.
const HEADER_BYTES: usize = 32;
/// `struct fiemap_extent`.
const EXTENT_BYTES: usize = 56;
/// Extents asked for per call.
const EXTENTS_PER_CALL: usize = 256;
/// Bounds the map of a very fragmented file; the rest is counted as not read.
pub const MAX_EXTENTS: usize = 1 << 18;

/// `_IOWR('f', 11, struct fiemap)` for the asm-generic ioctl layout.
const FS_IOC_FIEMAP: u64 = (3 << 30) | ((HEADER_BYTES as u64) << 16) | ((b'f' as u64) << 8) | 11;

const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
const FIEMAP_EXTENT_ENCODED: u32 = 0x8;
const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x100;
const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
const FIEMAP_EXTENT_DATA_TAIL: u32 = 0x400;

/// Whether an extent's device bytes are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentKind {
    /// At `physical` on the filesystem's device (written or preallocated).
    Mapped,
    /// Delayed allocation: dirty in the page cache, no blocks chosen yet.
    Delalloc,
    /// No exact device address (unknown, inline, encoded or packed tails).
    Unmappable,
}

/// One extent, in bytes; `physical` counts from the start of the
/// filesystem's device (the partition, not the disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileExtent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
    pub kind: ExtentKind,
}

impl FileExtent {
    pub fn end(&self) -> u64 {
        self.logical.saturating_add(self.length)
    }
}

/// A file's extents sorted by file offset, as the filesystem reported them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileMap {
    pub extents: Vec<FileExtent>,
    /// More extents than [`MAX_EXTENTS`]: the rest were not read.
    pub truncated: bool,
}

fn kind_of(flags: u32) -> ExtentKind {
    if flags & FIEMAP_EXTENT_DELALLOC != 0 {
        ExtentKind::Delalloc
    } else if flags
        & (FIEMAP_EXTENT_UNKNOWN
            | FIEMAP_EXTENT_ENCODED
            | FIEMAP_EXTENT_NOT_ALIGNED
            | FIEMAP_EXTENT_DATA_INLINE
            | FIEMAP_EXTENT_DATA_TAIL)
        != 0
    {
        ExtentKind::Unmappable
    } else {
        ExtentKind::Mapped
    }
}

fn u64_at(buffer: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buffer[at..at + 8]);
    u64::from_ne_bytes(bytes)
}

fn u32_at(buffer: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buffer[at..at + 4]);
    u32::from_ne_bytes(bytes)
}

/// The extents one FIEMAP answer holds, and whether the last one was the file's last.
fn parse_answer(buffer: &[u8]) -> (Vec<FileExtent>, bool) {
    let mapped = (u32_at(buffer, 20) as usize).min(EXTENTS_PER_CALL);
    let mut extents = Vec::with_capacity(mapped);
    let mut last = false;
    for index in 0..mapped {
        let at = HEADER_BYTES + index * EXTENT_BYTES;
        if at + EXTENT_BYTES > buffer.len() {
            break;
        }
        let flags = u32_at(buffer, at + 40);
        extents.push(FileExtent {
            logical: u64_at(buffer, at),
            physical: u64_at(buffer, at + 8),
            length: u64_at(buffer, at + 16),
            kind: kind_of(flags),
        });
        last |= flags & FIEMAP_EXTENT_LAST != 0;
    }
    (extents, last)
}

/// The extent map of the regular file at `path`, if it is still inode `inode`.
///
/// No `FIEMAP_FLAG_SYNC`: that would write the file's dirty pages back
/// itself, and `run` must report what the command left unwritten.
pub fn file_map(path: &Path, inode: u64) -> io::Result<FileMap> {
    // O_NONBLOCK: a FIFO put in the file's place must not hang us.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() || metadata.ino() != inode {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "removed or replaced after the command wrote it",
        ));
    }
    read_map(&file)
}

/// The extent map of an open file (one `run` holds, even if since renamed or removed).
pub fn open_file_map(file: &File) -> io::Result<FileMap> {
    read_map(file)
}

fn read_map(file: &File) -> io::Result<FileMap> {
    let mut map = FileMap::default();
    // u64 words keep the buffer aligned for the kernel's struct.
    let mut words = vec![0u64; (HEADER_BYTES + EXTENTS_PER_CALL * EXTENT_BYTES) / 8];
    let mut start = 0u64;
    loop {
        words.fill(0);
        words[0] = start; // fm_start
        words[1] = u64::MAX - start; // fm_length: to the end
                                     // fm_flags 0, fm_mapped_extents 0 (word 2); fm_extent_count (low half of word 3).
        words[3] = EXTENTS_PER_CALL as u64;
        // SAFETY: `words` is a writable, aligned buffer of the size the
        // header's fm_extent_count announces; the fd is open.
        let result = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                FS_IOC_FIEMAP as libc::c_ulong,
                words.as_mut_ptr(),
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let (extents, last) = parse_answer(&bytes);
        let Some(end) = extents.last().map(FileExtent::end) else {
            break;
        };
        map.extents.extend(extents);
        if map.extents.len() >= MAX_EXTENTS {
            map.truncated = !last;
            break;
        }
        if last || end <= start {
            break;
        }
        start = end;
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(extents: &[(u64, u64, u64, u32)]) -> Vec<u8> {
        let mut buffer = vec![0u8; HEADER_BYTES + extents.len() * EXTENT_BYTES];
        buffer[20..24].copy_from_slice(&(extents.len() as u32).to_ne_bytes());
        for (index, (logical, physical, length, flags)) in extents.iter().enumerate() {
            let at = HEADER_BYTES + index * EXTENT_BYTES;
            buffer[at..at + 8].copy_from_slice(&logical.to_ne_bytes());
            buffer[at + 8..at + 16].copy_from_slice(&physical.to_ne_bytes());
            buffer[at + 16..at + 24].copy_from_slice(&length.to_ne_bytes());
            buffer[at + 40..at + 44].copy_from_slice(&flags.to_ne_bytes());
        }
        buffer
    }

    #[test]
    fn the_ioctl_number_is_the_kernels() {
        assert_eq!(FS_IOC_FIEMAP, 0xC020_660B);
    }

    #[test]
    fn delalloc_and_inline_extents_have_no_sectors_and_last_ends_the_map() {
        let buffer = answer(&[
            (0, 1 << 20, 65536, 0),
            (
                65536,
                0,
                4096,
                FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC,
            ),
            (
                69632,
                0,
                60,
                FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_NOT_ALIGNED,
            ),
            (
                73728,
                2 << 20,
                4096,
                0x800 | FIEMAP_EXTENT_LAST, // unwritten (preallocated): still placed
            ),
        ]);
        let (extents, last) = parse_answer(&buffer);
        assert!(last);
        let kinds: Vec<ExtentKind> = extents.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                ExtentKind::Mapped,
                ExtentKind::Delalloc,
                ExtentKind::Unmappable,
                ExtentKind::Mapped
            ]
        );
        assert_eq!(extents[3].physical, 2 << 20);
        assert_eq!(extents[0].end(), 65536);
    }

    #[test]
    fn a_count_larger_than_the_answer_reads_no_further() {
        let mut buffer = answer(&[(0, 4096, 4096, 0)]);
        buffer[20..24].copy_from_slice(&9u32.to_ne_bytes());
        let (extents, last) = parse_answer(&buffer);
        assert_eq!(extents.len(), 1);
        assert!(!last);
    }
}
