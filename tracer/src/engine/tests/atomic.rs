//! Untorn writes (issue #50): each `REQ_ATOMIC` write is proven when it left
//! the stack as exactly one command of its own sectors. block/bio.c refuses
//! to split one ("atomic writes cannot be split") and blk-merge.c merges one
//! only with another of the same request limits, so anything else is named.

use super::*;

fn untorn(mut event: BlockEvent) -> BlockEvent {
    event.rwbs = rwbs("WSU");
    event
}

fn failed(mut event: BlockEvent, error: i32) -> BlockEvent {
    event.error = error;
    event
}

#[test]
fn each_untorn_write_alone_in_its_command_is_proven() {
    let mut engine = engine();
    let mut events = Vec::new();
    for n in 0..4u64 {
        let (at, sector) = (n * 10 * MS, 2048 + n * 32);
        events.extend([
            untorn(queue(at + MS, LOOP0, sector, 32)),
            untorn(issue(at + 2 * MS, LOOP0, sector, 32)),
            untorn(complete(at + 3 * MS, LOOP0, sector, 32)),
        ]);
    }
    // A plain write beside them is not counted as untorn.
    events.extend([
        queue(50 * MS, LOOP0, 8192, 8),
        issue(51 * MS, LOOP0, 8192, 8),
        complete(52 * MS, LOOP0, 8192, 8),
    ]);
    feed(&mut engine, &events);
    let writes = disk_op(&engine, "loop0", Op::Write);
    let atomic = writes.atomic_writes.expect("untorn writes counted");
    assert_eq!((atomic.proven, atomic.not_proven), (4, 0));
    assert_eq!(
        (atomic.smallest_bytes, atomic.largest_bytes),
        (16384, 16384)
    );
    assert!(atomic.not_proven_writes.is_empty());
}

#[test]
fn a_merged_split_or_failed_untorn_write_is_named_with_its_sector() {
    let mut engine = engine();
    let events = [
        // Two untorn writes in one command: neither is proven.
        untorn(queue(MS, LOOP0, 0, 8)),
        untorn(queue(2 * MS, LOOP0, 8, 8)),
        untorn(backmerge(2 * MS, LOOP0, 8, 8)),
        untorn(issue(3 * MS, LOOP0, 0, 16)),
        untorn(complete(4 * MS, LOOP0, 0, 16)),
        // One cut in two (a kernel without the refusal, or an import).
        untorn(queue(10 * MS, LOOP0, 4096, 16)),
        untorn(split(11 * MS, LOOP0, 4096, 4104)),
        untorn(issue(12 * MS, LOOP0, 4096, 8)),
        untorn(issue(12 * MS, LOOP0, 4104, 8)),
        untorn(complete(13 * MS, LOOP0, 4096, 8)),
        untorn(complete(13 * MS, LOOP0, 4104, 8)),
        // One the device failed.
        untorn(queue(20 * MS, LOOP0, 9000, 8)),
        untorn(issue(21 * MS, LOOP0, 9000, 8)),
        failed(untorn(complete(22 * MS, LOOP0, 9000, 8)), -5),
    ];
    feed(&mut engine, &events);
    let atomic = disk_op(&engine, "loop0", Op::Write)
        .atomic_writes
        .expect("untorn writes counted");
    assert_eq!((atomic.proven, atomic.not_proven), (0, 4));
    assert_eq!(atomic.reasons.get("shared_command"), Some(&2));
    assert_eq!(atomic.reasons.get("split"), Some(&1));
    assert_eq!(atomic.reasons.get("failed"), Some(&1));
    let named: Vec<(u64, &str)> = atomic
        .not_proven_writes
        .iter()
        .map(|miss| (miss.sector, miss.reason.as_str()))
        .collect();
    assert!(named.contains(&(4096, "split")), "{named:?}");
    assert!(named.contains(&(9000, "failed")), "{named:?}");
    assert_eq!(atomic.smallest_bytes, 4096);
    assert_eq!(atomic.largest_bytes, 8192);
}
