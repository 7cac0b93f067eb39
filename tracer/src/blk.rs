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
