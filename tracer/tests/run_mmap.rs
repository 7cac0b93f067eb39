//! `run` on stores through a shared file mapping (python3's mmap module: a
//! program we did not write): 1 MiB of a file on ext4 mapped shared and
//! writable, its fd closed at once, 16 pages stored and msync'd, 8 more
//! and msync'd again, 4 more, then munmap and an fsync of the file. The
//! bytes `run` says were written through the mapping equal the bytes the
//! kernel's blk tracer saw issued over the file's sectors, none of them
//! counted as write syscalls. (On 6.18 ext4 caches the file in large
//! folios: a store dirties its whole folio, and the device writes it, so
//! those bytes are more than the 28 pages stored.)
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{privileged, run_file_target, run_json, BlkTracer, Ext4Disk};

const PAGE: u64 = 4096;

/// Stores to every other page, so each page is a command of its own.
const WRITER: &str = r#"
import mmap, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
def store(first, last, byte):
    for page in range(first, last):
        m[page * 2 * 4096 : page * 2 * 4096 + 4096] = bytes([byte]) * 4096
store(0, 16, 1)
m.flush()
store(16, 24, 2)
m.flush()
store(24, 28, 3)
m.close()
fd = os.open(path, os.O_RDWR)
os.fsync(fd)
os.close(fd)
"#;

#[test]
fn stores_through_a_shared_mapping_are_the_bytes_written_through_it() {
    if !privileged("stores_through_a_shared_mapping_are_the_bytes_written_through_it") {
        return;
    }
    let disk = Ext4Disk::new("mmap", 32);
    let file = disk.path("mapped");
    // Allocated and clean before the run: the run's commands over it are the stores'.
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    common::sh("sync", &[file.to_str().unwrap()]);
    let sectors = disk_sectors(&file, 2048);
    let blk = BlkTracer::start(&disk.disk.name);
    let report = run_json(&["/usr/bin/python3", "-c", WRITER, file.to_str().unwrap()]);
    let trace = blk.finish();
    drop(blk);
    let issued = issued_bytes_over(&trace, sectors);
    assert_eq!(report["events"]["dropped"], 0, "{}", report["events"]);
    let target = run_file_target(&report, &file);
    let mapped = &target["mapped"];
    assert_eq!(mapped["mappings"], 1, "{target}");
    assert_eq!(mapped["msync_calls"], 2, "{target}");
    assert!(
        issued >= 28 * PAGE,
        "the blk tracer saw {issued} B over the file"
    );
    assert_eq!(mapped["written_bytes"], issued, "{target}");
    // Flushed: the whole mapping at each msync and at munmap.
    assert_eq!(mapped["flushed_bytes"], 3 << 20, "{target}");
    assert_eq!(mapped["not_written_bytes"], (3 << 20) - issued, "{target}");
    assert_eq!(target["write_syscalls"], 0, "{target}");
    assert!(target["commands"].as_u64().unwrap() >= 3, "{target}");
    let summary = target["summary"].as_str().unwrap();
    assert!(
        summary.contains("through 1 shared mapping (2 msyncs)"),
        "{summary}"
    );
}

/// The file's disk sectors `[first, end)`, from `filefrag` (one extent
/// expected: the file was written at once), on a partition from `start`.
fn disk_sectors(file: &std::path::Path, start: u64) -> (u64, u64) {
    let out = common::sh("filefrag", &["-e", "-b512", file.to_str().unwrap()]);
    let extents: Vec<&str> = out
        .lines()
        .filter(|line| line.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(extents.len(), 1, "{out}");
    // " 0:  0..  2047:  20482..  22529:  2048: ..."
    let fields: Vec<&str> = extents[0].split(':').collect();
    let physical = fields[2].trim();
    let (first, last) = physical.split_once("..").unwrap();
    let (first, last): (u64, u64) = (first.trim().parse().unwrap(), last.trim().parse().unwrap());
    (start + first, start + last + 1)
}

/// Bytes of the write commands (`D` with a `W`) the blk tracer saw over `[first, end)`.
fn issued_bytes_over(trace: &str, (first, end): (u64, u64)) -> u64 {
    let mut bytes = 0;
    for line in trace.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|word| *word == "D") else {
            continue;
        };
        if !words.get(at + 1).is_some_and(|rwbs| rwbs.contains('W'))
            || words.get(at + 3) != Some(&"+")
        {
            continue;
        }
        let (Some(Ok(sector)), Some(Ok(count))) = (
            words.get(at + 2).map(|w| w.parse::<u64>()),
            words.get(at + 4).map(|w| w.parse::<u64>()),
        ) else {
            continue;
        };
        let (from, to) = (sector.max(first), (sector + count).min(end));
        if to > from {
            bytes += (to - from) * 512;
        }
    }
    bytes
}
