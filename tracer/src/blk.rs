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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicted_block_size_follows_the_seed_table() {
        // The three partition sizes of the reference case (seed README).
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
