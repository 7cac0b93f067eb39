//! A batch reader for one of the per-CPU `EVENTS<n>` BPF ring buffers
//! (either probe flavor's records; the reader does not look inside them).
//!
//! aya's reader publishes the consumer position after every record. Every
//! probe's reserve reads that position too, so at a million events a second
//! its cache line would bounce between the consumer's CPU and the probes' on
//! every event. This reader walks all committed records first and publishes
//! the position once per batch.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use aya::maps::MapData;

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const LENGTH_MASK: u32 = !(BUSY_BIT | DISCARD_BIT);
const HEADER_BYTES: usize = 8;

/// One mapping, unmapped on drop.
struct Mapping {
    address: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize, protection: i32, offset: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a ring buffer map fd, at the offsets
        // the kernel defines for it; the result is checked below.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                protection,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { address, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.address, self.len) };
    }
}

/// Reads a BPF ring buffer map: consumer page (read-write) at offset 0;
/// producer page then the data pages, mapped twice so a record that wraps
/// around the end reads as one slice, all read-only, after it.
pub struct BatchRing {
    _map: MapData,
    consumer: Mapping,
    producer: Mapping,
    page_size: usize,
    mask: usize,
    position: usize,
}

// SAFETY: the mappings are only touched through `&mut self` (or read-only),
// and the kernel side is synchronized through the atomic positions.
unsafe impl Send for BatchRing {}

impl BatchRing {
    pub fn new(map: MapData, ring_bytes: u32) -> std::io::Result<BatchRing> {
        // SAFETY: sysconf has no preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let size = ring_bytes as usize;
        if !size.is_power_of_two() || !size.is_multiple_of(page_size) {
            return Err(std::io::Error::other(
                "ring size must be a power-of-two multiple of the page size",
            ));
        }
        let fd = map.fd().as_fd().as_raw_fd();
        let consumer = Mapping::new(fd, page_size, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(fd, page_size + 2 * size, libc::PROT_READ, page_size)?;
        let mut ring = BatchRing {
            _map: map,
            consumer,
            producer,
            page_size,
            mask: size - 1,
            position: 0,
        };
        ring.position = ring.consumer_position().load(Ordering::Acquire);
        Ok(ring)
    }

    pub fn fd(&self) -> i32 {
        self._map.fd().as_fd().as_raw_fd()
    }

    fn consumer_position(&self) -> &AtomicUsize {
        // SAFETY: the consumer page starts with the kernel's `consumer_pos`,
        // an aligned unsigned long that lives as long as the mapping.
        unsafe { &*(self.consumer.address as *const AtomicUsize) }
    }

    fn producer_position(&self) -> &AtomicUsize {
        // SAFETY: as above, for `producer_pos` at the start of the producer page.
        unsafe { &*(self.producer.address as *const AtomicUsize) }
    }

    /// A record reserved but not yet committed (or not yet read) remains.
    pub fn pending(&self) -> bool {
        self.producer_position().load(Ordering::Acquire) != self.position
    }

    /// Hands every committed record to `each`, in ring order, then releases
    /// their space at once. Stops at a record still being written.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        // Acquire pairs with the kernel's release of the producer position.
        let produced = self.producer_position().load(Ordering::Acquire);
        // SAFETY: the data pages, mapped twice, follow the producer page and
        // live as long as the mapping.
        let data = unsafe {
            std::slice::from_raw_parts(
                (self.producer.address as *const u8).add(self.page_size),
                2 * (self.mask + 1),
            )
        };
        let (position, records) = walk(data, self.mask, self.position, produced, &mut each);
        if position != self.position {
            // Release: the records are read before the kernel may reuse them.
            self.consumer_position().store(position, Ordering::Release);
            self.position = position;
        }
        records
    }
}

/// Walks the records in `[from, to)` of a double-mapped ring `data` (two
/// copies of `mask + 1` bytes), handing each committed one to `each`. Returns
/// the position after the last record read, and how many were handed over.
fn walk(
    data: &[u8],
    mask: usize,
    from: usize,
    to: usize,
    each: &mut impl FnMut(&[u8]),
) -> (usize, usize) {
    let mut position = from;
    let mut records = 0;
    while position != to {
        let offset = position & mask;
        prefetch(data, offset + PREFETCH_AHEAD);
        let Some(header_bytes) = data.get(offset..offset + 4) else {
            break;
        };
        // SAFETY: 4 in-bounds bytes at an 8-aligned record start; the kernel
        // commits a header with an atomic xchg, so read it atomically.
        let header =
            unsafe { &*(header_bytes.as_ptr() as *const AtomicU32) }.load(Ordering::Acquire);
        if header & BUSY_BIT != 0 {
            break;
        }
        let len = (header & LENGTH_MASK) as usize;
        if header & DISCARD_BIT == 0 {
            let start = offset + HEADER_BYTES;
            let Some(record) = data.get(start..start + len) else {
                break;
            };
            each(record);
            records += 1;
        }
        position += (HEADER_BYTES + len).next_multiple_of(8);
    }
    (position, records)
}

/// Records written by the probes on another CPU arrive as cache misses;
/// asking for the lines a few records ahead overlaps those misses.
const PREFETCH_AHEAD: usize = 512;

#[inline(always)]
fn prefetch(data: &[u8], offset: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(byte) = data.get(offset) {
        // SAFETY: a prefetch hint on an in-bounds address; it reads nothing.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (byte as *const u8).cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A double-mapped ring of `size` bytes holding `records` (header, payload) from `start`.
    fn ring(size: usize, start: usize, records: &[(u32, &[u8])]) -> (Vec<u64>, usize) {
        let mut ring = vec![0u8; size];
        let mut position = start;
        for (flags, payload) in records {
            let header = flags | payload.len() as u32;
            for (i, byte) in header
                .to_ne_bytes()
                .iter()
                .chain(&[0; 4])
                .chain(*payload)
                .enumerate()
            {
                ring[(position + i) % size] = *byte;
            }
            position += (HEADER_BYTES + payload.len()).next_multiple_of(8);
        }
        // Two copies, as the kernel maps them; u64 storage keeps headers aligned.
        let doubled: Vec<u8> = ring.iter().chain(ring.iter()).copied().collect();
        let words = doubled
            .chunks(8)
            .map(|chunk| u64::from_ne_bytes(chunk.try_into().unwrap()))
            .collect();
        (words, position)
    }

    fn bytes(words: &[u64]) -> &[u8] {
        // SAFETY: viewing initialized u64s as bytes.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
    }

    #[test]
    fn committed_records_are_read_in_order_across_the_wrap_and_discards_skipped() {
        let (words, end) = ring(
            64,
            40,
            &[(0, b"first"), (DISCARD_BIT, b"dropped"), (0, b"wrapped!")],
        );
        let mut seen = Vec::new();
        let (position, records) = walk(bytes(&words), 63, 40, end, &mut |r| seen.push(r.to_vec()));
        assert_eq!(seen, vec![b"first".to_vec(), b"wrapped!".to_vec()]);
        assert_eq!((position, records), (end, 2));
    }

    #[test]
    fn a_record_still_being_written_stops_the_walk_before_it() {
        let (words, end) = ring(64, 0, &[(0, b"done"), (BUSY_BIT, b"busy"), (0, b"later")]);
        let mut seen = Vec::new();
        let (position, records) = walk(bytes(&words), 63, 0, end, &mut |r| seen.push(r.to_vec()));
        assert_eq!(seen, vec![b"done".to_vec()]);
        assert_eq!((position, records), (16, 1));
    }
}
