//! The block layer's pure rules: its units and the arithmetic the kernel does
//! on them, in one place for the engine and geometry alike. No I/O here.

/// Bytes per sector, the unit of every tracepoint range and sysfs size.
pub const SECTOR_BYTES: u64 = 512;
/// The page size (x86-64 and arm64 with 4k pages): the cap on block sizes,
/// and the unit of segment and virt-boundary reasoning.
pub const PAGE_BYTES: u64 = 4096;

/// virtio-blk without indirect descriptors gives the block layer half as
/// many tags as the ring has descriptors (every command takes at least two).
pub const VIRTIO_DESCRIPTORS_PER_TAG: u64 = 2;
/// Descriptors a virtio-blk command takes beyond its data segments (the
/// request header and the status byte).
pub const VIRTIO_HEADER_DESCRIPTORS: u64 = 2;

/// The block size the kernel gives a device or partition of `size_sectors`
/// when it is first opened (`set_init_blocksize` in block/bdev.c): the
/// largest power of two from the logical block size up to the page size that
/// divides the size in bytes.
pub fn predicted_block_size(size_sectors: u64, logical_block_size: u32) -> u32 {
    let size_bytes = size_sectors.saturating_mul(SECTOR_BYTES);
    let mut block_size = logical_block_size.max(SECTOR_BYTES as u32);
    while u64::from(block_size) < PAGE_BYTES {
        if size_bytes & u64::from(block_size) != 0 {
            break;
        }
        block_size <<= 1;
    }
    block_size
}

/// The grid, in sectors, a partition must start on to keep its disk's atomic
/// writes: max(atomic write unit minimum, atomic write boundary), as
/// `blk_atomic_write_start_sect_aligned()` takes it for
/// `bdev_can_atomic_write()` (include/linux/blkdev.h, v6.18; the kernel reads
/// the hardware unit minimum, which sysfs's `atomic_write_unit_min_bytes`
/// equals whenever it is not 0). `None` when the disk offers no atomic writes.
pub fn atomic_start_grid_sectors(unit_min_bytes: u32, boundary_bytes: u32) -> Option<u64> {
    if unit_min_bytes == 0 {
        return None;
    }
    let grid = u64::from(unit_min_bytes.max(boundary_bytes)) / SECTOR_BYTES;
    Some(grid.max(1))
}

/// Whether a partition starting at `start` (sectors) offers the atomic writes
/// of a disk with these limits: `bdev_can_atomic_write()` is false for a
/// partition whose start is off [`atomic_start_grid_sectors`], and `statx`
/// then reports no atomic unit (`bdev_statx`, block/bdev.c).
pub fn partition_keeps_atomic(start: u64, unit_min_bytes: u32, boundary_bytes: u32) -> bool {
    atomic_start_grid_sectors(unit_min_bytes, boundary_bytes)
        .is_some_and(|grid| start.is_multiple_of(grid))
}

/// The errno the kernel reports for a `blk_status_t` (`blk_status_to_errno`,
/// block/blk-core.c), negative; an unknown status is -EIO, as there. BTF
/// tracepoints see the raw status, classic ones and blktrace the errno.
pub fn errno_of_blk_status(status: u8) -> i32 {
    -match status {
        0 => 0,
        1 => 95,   // NOTSUPP: EOPNOTSUPP
        2 => 110,  // TIMEOUT: ETIMEDOUT
        3 => 28,   // NOSPC: ENOSPC
        4 => 67,   // TRANSPORT: ENOLINK
        5 => 121,  // TARGET: EREMOTEIO
        6 => 52,   // NEXUS, later RESV_CONFLICT: EBADE
        7 => 61,   // MEDIUM: ENODATA
        8 => 84,   // PROTECTION: EILSEQ
        9 => 12,   // RESOURCE: ENOMEM
        11 => 78,  // DM_REQUEUE: EREMCHG
        12 => 11,  // AGAIN: EAGAIN
        13 => 16,  // DEV_RESOURCE: EBUSY
        14 => 109, // ZONE_OPEN_RESOURCE: ETOOMANYREFS
        15 => 75,  // ZONE_ACTIVE_RESOURCE: EOVERFLOW
        16 => 19,  // OFFLINE: ENODEV
        17 => 62,  // DURATION_LIMIT: ETIME
        19 => 22,  // INVAL: EINVAL
        _ => 5,    // IOERR and anything newer: EIO
    }
}

/// The name of a completion's (negative) errno, as users read it in dmesg.
pub fn errno_name(error: i32) -> String {
    let name = match error.unsigned_abs() {
        1 => "EPERM",
        5 => "EIO",
        9 => "EBADF",
        13 => "EACCES",
        14 => "EFAULT",
        27 => "EFBIG",
        30 => "EROFS",
        11 => "EAGAIN",
        12 => "ENOMEM",
        16 => "EBUSY",
        19 => "ENODEV",
        22 => "EINVAL",
        28 => "ENOSPC",
        52 => "EBADE",
        61 => "ENODATA",
        62 => "ETIME",
        67 => "ENOLINK",
        75 => "EOVERFLOW",
        78 => "EREMCHG",
        84 => "EILSEQ",
        95 => "EOPNOTSUPP",
        109 => "ETOOMANYREFS",
        110 => "ETIMEDOUT",
        121 => "EREMOTEIO",
        other => return format!("errno {other}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    /// `bdev_can_atomic_write()`'s partition rule, from numbers.
    #[test]
    fn a_partition_keeps_atomics_only_on_the_unit_or_boundary_grid() {
        use super::{atomic_start_grid_sectors, partition_keeps_atomic};
        // scsi_debug atomic_wr_gran=8 on 512-byte sectors: unit 4 KiB, no boundary.
        assert_eq!(atomic_start_grid_sectors(4096, 0), Some(8));
        assert!(partition_keeps_atomic(2048, 4096, 0));
        assert!(partition_keeps_atomic(2056, 4096, 0));
        assert!(!partition_keeps_atomic(206_849, 4096, 0));
        assert!(!partition_keeps_atomic(63, 4096, 0));
        // A boundary larger than the unit is the grid: 64 KiB = 128 sectors.
        assert_eq!(atomic_start_grid_sectors(4096, 65536), Some(128));
        assert!(!partition_keeps_atomic(2056, 4096, 65536));
        assert!(partition_keeps_atomic(2048, 4096, 65536));
        // A boundary smaller than the unit does not refine it.
        assert_eq!(atomic_start_grid_sectors(16384, 4096), Some(32));
        // A 512-byte unit keeps any start.
        assert!(partition_keeps_atomic(63, 512, 0));
        // No unit: the disk offers none, so no partition has any to keep.
        assert_eq!(atomic_start_grid_sectors(0, 65536), None);
        assert!(!partition_keeps_atomic(2048, 0, 0));
    }

    use super::*;

    #[test]
    fn block_statuses_read_as_the_kernels_errnos() {
        assert_eq!(errno_of_blk_status(0), 0);
        assert_eq!(errno_name(errno_of_blk_status(10)), "EIO");
        assert_eq!(errno_name(errno_of_blk_status(2)), "ETIMEDOUT");
        assert_eq!(errno_name(errno_of_blk_status(3)), "ENOSPC");
        assert_eq!(errno_name(errno_of_blk_status(1)), "EOPNOTSUPP");
        assert_eq!(errno_name(errno_of_blk_status(200)), "EIO");
        assert_eq!(errno_name(-4095), "errno 4095");
    }

    #[test]
    fn predicted_block_size_follows_the_seed_table() {
        // The three partition sizes of the reference case (docs/diagnoses.md, the seed case).
        assert_eq!(predicted_block_size(27_647_865, 512), 512);
        assert_eq!(predicted_block_size(27_646_898, 512), 1024);
        assert_eq!(predicted_block_size(27_660_288, 512), 4096);
        // size mod 8 == 4: 2048-byte blocks.
        assert_eq!(predicted_block_size(12, 512), 2048);
        // Never above the page size, never below the logical block size.
        assert_eq!(predicted_block_size(1 << 20, 512), 4096);
        assert_eq!(predicted_block_size(8 * 3, 4096), 4096);
        assert_eq!(predicted_block_size(0, 512), 4096);
    }
}
