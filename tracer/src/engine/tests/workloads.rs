//! Whole workloads as event streams, shared by the themes here and by explain's tests.

use super::*;

/// A realistic mix on request-based devices: partitions, splits, merges,
/// partial completions.
pub(super) fn mixed_workload(engine: &mut Engine) {
    let mut ts = MS;
    for round in 0..50u64 {
        ts += MS;
        let base = 2048 + (round % 8) * 1024;
        // A 384-sector write through loop0p1, split at max_sectors.
        let relative = base - 2048;
        feed(
            engine,
            &[
                remap(ts, LOOP0, base, 384, P1, relative),
                queue(ts, LOOP0, base, 384),
                split(ts, LOOP0, base, base + 256),
                issue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base + 256, 128),
                complete(ts + MS, LOOP0, base, 256),
                complete(ts + MS, LOOP0, base + 256, 64),
                complete(ts + MS, LOOP0, base + 320, 64),
            ],
        );
        // Four small reads straight to the disk, back merged.
        let read_base = 32768 + (round % 4) * 64;
        for index in 0..4 {
            let mut bio = queue(ts, LOOP0, read_base + index * 8, 8);
            bio.rwbs = rwbs("R");
            engine.ingest(&bio);
            if index > 0 {
                let mut merge = backmerge(ts, LOOP0, read_base + index * 8, 8);
                merge.rwbs = rwbs("R");
                engine.ingest(&merge);
            }
        }
        let mut read_issue = issue(ts, LOOP0, read_base, 32);
        read_issue.rwbs = rwbs("R");
        let mut read_done = complete(ts + MS, LOOP0, read_base, 32);
        read_done.rwbs = rwbs("R");
        feed(engine, &[read_issue, read_done]);
    }
}

/// 128 KiB writes at the start of the misaligned loop0p2 (absolute 10241):
/// the kernel cuts 255 sectors to end on a 4 KiB boundary, then 1 more.
pub(crate) fn misaligned_writes(engine: &mut Engine, count: u64) {
    for index in 0..count {
        let relative = index * 256;
        let start = 10241 + relative;
        let cut = (start + 256) & !7;
        let ts = MS * (index + 1);
        feed(
            engine,
            &[
                remap(ts, LOOP0, start, 256, P2, relative),
                queue(ts, LOOP0, start, 256),
                split(ts, LOOP0, start, cut),
                issue(ts, LOOP0, start, (cut - start) as u32),
                issue(ts, LOOP0, cut, (start + 256 - cut) as u32),
                complete(ts + MS / 2, LOOP0, start, (cut - start) as u32),
                complete(ts + MS / 2, LOOP0, cut, (start + 256 - cut) as u32),
            ],
        );
    }
}

/// `count` 512-sector writes straight to loop0 from sector 0, each split at
/// max_sectors (128 KiB) into two 256-sector commands.
pub(crate) fn max_sectors_splits(engine: &mut Engine, count: u64) {
    for index in 0..count {
        let base = index * 512;
        let ts = MS * (index + 1);
        feed(
            engine,
            &[
                queue(ts, LOOP0, base, 512),
                split(ts, LOOP0, base, base + 256),
                issue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base + 256, 256),
                complete(ts, LOOP0, base, 256),
                complete(ts, LOOP0, base + 256, 256),
            ],
        );
    }
}

/// `count` 512-byte bios queued together, each issued as its own command.
pub(crate) fn unmerged_small_writes(engine: &mut Engine, count: u64) {
    for index in 0..count {
        engine.ingest(&queue(MS, LOOP0, 4096 + index, 1));
    }
    for index in 0..count {
        let ts = 2 * MS + index * 1000;
        feed(
            engine,
            &[
                issue(ts, LOOP0, 4096 + index, 1),
                complete(ts + 500, LOOP0, 4096 + index, 1),
            ],
        );
    }
}

/// `count` 1 MiB writes split by max_segments, `depth` of them queued at once.
pub(crate) fn split_megabyte_writes(engine: &mut Engine, count: u64, depth: u64) {
    for batch in 0..count / depth {
        let ts = MS * (batch + 1) * 10;
        let first = batch * depth;
        let starts: Vec<u64> = (first..first + depth).map(|index| index * 2048).collect();
        for &start in &starts {
            feed(
                engine,
                &[
                    queue(ts, LOOP0, start, 2048),
                    split(ts, LOOP0, start, start + 2032),
                ],
            );
        }
        for (offset, &start) in starts.iter().enumerate() {
            let at = ts + 100 + offset as u64 * 10;
            feed(
                engine,
                &[
                    issue(at, LOOP0, start, 2032),
                    issue(at + 5, LOOP0, start + 2032, 16),
                ],
            );
        }
        for &start in &starts {
            feed(
                engine,
                &[
                    complete(ts + MS, LOOP0, start, 2032),
                    complete(ts + MS, LOOP0, start + 2032, 16),
                ],
            );
        }
    }
}

/// `count` 1 MiB writes split 2032 + 16, each tail requeued once and issued
/// again `delay_us` later, after the head completed.
pub(crate) fn requeued_tails(engine: &mut Engine, count: u64, delay_us: u64) {
    for index in 0..count {
        let start = index * 2048;
        let ts = MS * 10 * (index + 1);
        let reissue = ts + 100 + delay_us * 1000;
        feed(
            engine,
            &[
                queue(ts, LOOP0, start, 2048),
                split(ts, LOOP0, start, start + 2032),
                issue(ts + 10, LOOP0, start, 2032),
                issue(ts + 20, LOOP0, start + 2032, 16),
                requeue(ts + 100, LOOP0, start + 2032, 16),
                complete(reissue - 50, LOOP0, start, 2032),
                issue(reissue, LOOP0, start + 2032, 16),
                complete(reissue + 100_000, LOOP0, start + 2032, 16),
            ],
        );
    }
}
