//! Fidelity of the reading to the kernel's rules (issue #47): a re-dispatch
//! whose requeue the trace lacks, flushes timed as commands, completions
//! lost at the end of a trace, a failed piece failing its user I/O. Each
//! case is built from block/blk-mq.c's and blk-flush.c's rules, as its doc
//! comment says; the real traces showing them are asserted in
//! tests/corpus.rs.

use super::*;
use crate::engine::outcome::{of_events, Outcome};

fn discard(mut event: BlockEvent) -> BlockEvent {
    event.rwbs = rwbs("D");
    event
}

fn flush(mut event: BlockEvent, letters: &str) -> BlockEvent {
    event.rwbs = rwbs(letters);
    event
}

fn read(mut event: BlockEvent) -> BlockEvent {
    event.rwbs = rwbs("R");
    event
}

fn failed(mut event: BlockEvent, error: i32) -> BlockEvent {
    event.error = error;
    event
}

/// blk-mq issues a request once per dispatch (`blk_mq_start_request`
/// traces block_rq_issue) and dispatches it again only after the driver
/// gave it back (`blk_mq_requeue_request` traces block_rq_requeue). A
/// trace whose mask left out `R` shows the second issue of the same range
/// with no completion between: one command, requeued once, timed from its
/// last issue.
#[test]
fn a_redispatch_without_its_requeue_is_the_same_command_requeued() {
    let mut engine = engine();
    let mut events = Vec::new();
    // Five discards, each dispatched twice (the "10 commands for 5" reading).
    for n in 0..5u64 {
        let (at, sector) = (n * 10 * MS, n * 8);
        events.extend([
            discard(queue(at + MS, LOOP0, sector, 8)),
            discard(issue(at + 2 * MS, LOOP0, sector, 8)),
            discard(issue(at + 5 * MS, LOOP0, sector, 8)),
            discard(complete(at + 6 * MS, LOOP0, sector, 8)),
        ]);
    }
    feed(&mut engine, &events);
    let discards = disk_op(&engine, "loop0", Op::Discard);
    assert_eq!((discards.commands, discards.requeues), (5, 5));
    assert_eq!(discards.user_ios, 5);
    // Timed from the last issue: 1 ms, not 4.
    assert_eq!(discards.issue_to_complete_us.max, 1000);
    let correlation = engine.correlation();
    assert_eq!(correlation.requeues_inferred, 5);
    assert_eq!(
        CorrelationStats {
            requeues_inferred: 0,
            ..correlation
        },
        CorrelationStats::default()
    );
}

/// The same range issued again while a new bio waits there is a new
/// request carrying that bio (two O_DIRECT writes of one sector in flight
/// together), not a re-dispatch; nor is an issue of another op.
#[test]
fn an_issue_carrying_a_new_bio_of_the_same_range_is_a_new_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(2 * MS, LOOP0, 0, 8),
            queue(3 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            discard(issue(3 * MS, LOOP0, 64, 8)),
            discard(issue(3 * MS, LOOP0, 64, 8)),
            complete(4 * MS, LOOP0, 0, 8),
            complete(5 * MS, LOOP0, 0, 8),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (2, 0));
    assert_eq!(writes.queue_to_complete_us.count, 2);
    assert_eq!(engine.correlation().requeues_inferred, 1);
}

/// A request carries bios of its own op only (blk-merge.c's
/// `blk_rq_merge_ok` refuses another op), so a write issued where a read
/// bio still waits (its own issue and completion lost with a CPU's file)
/// carries the write queued there, and its requeues are the write's:
/// 0 read and 2 write requeues, not the read's op lent to the write.
#[test]
fn an_issue_takes_its_own_ops_bio_not_a_stale_one_of_another_op() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            read(queue(MS, LOOP0, 0, 8)),
            queue(2 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            requeue(4 * MS, LOOP0, 0, 8),
            issue(5 * MS, LOOP0, 0, 8),
            requeue(6 * MS, LOOP0, 0, 8),
            issue(7 * MS, LOOP0, 0, 8),
            complete(8 * MS, LOOP0, 0, 8),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (1, 2));
    assert_eq!(writes.queue_to_complete_us.count, 1);
    let reads = disk_op(&engine, "loop0", Op::Read);
    assert_eq!((reads.commands, reads.requeues), (0, 0));
    assert_eq!(reads.queue_to_complete_us.count, 0);
}

/// The same class one step later: a read command whose completion was lost
/// still holds the range when a write command of that range is requeued.
/// The requeue and the re-issue are the write's (block_rq_requeue traces
/// the request given back, whose op it keeps).
#[test]
fn a_requeue_goes_to_its_own_ops_command_at_a_shared_range() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            read(queue(MS, LOOP0, 0, 8)),
            read(issue(2 * MS, LOOP0, 0, 8)),
            queue(3 * MS, LOOP0, 0, 8),
            issue(4 * MS, LOOP0, 0, 8),
            requeue(5 * MS, LOOP0, 0, 8),
            issue(6 * MS, LOOP0, 0, 8),
            complete(7 * MS, LOOP0, 0, 8),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (1, 1));
    assert_eq!(writes.queue_to_complete_us.count, 1);
    let reads = disk_op(&engine, "loop0", Op::Read);
    assert_eq!((reads.commands, reads.requeues), (1, 0));
}

/// A request's first bios may be queued before the trace began (or lost);
/// blk-merge.c back-merges later bios behind them, and the issue carries
/// those too: a gap at the front of a command's range does not cut off
/// the traced bios after it.
#[test]
fn a_command_carries_its_traced_bios_after_a_gap() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 496, 8),
            queue(MS + 1000, LOOP0, 504, 8),
            issue(2 * MS, LOOP0, 0, 512),
            complete(3 * MS, LOOP0, 0, 512),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.user_ios, writes.commands), (2, 1));
    assert_eq!(writes.queue_to_complete_us.count, 2);
    assert_eq!(engine.correlation().in_flight, 0);
    assert_eq!(engine.correlation().unmatched_events, 1);
}

/// A command whose bios were queued before the trace (gg7's first D) is
/// counted, but it is no command any traced user I/O became: the
/// amplification is 1 command per user I/O, not 2.
#[test]
fn a_command_of_untraced_bios_is_not_amplification() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            issue(MS, LOOP0, 3064, 8),
            complete(2 * MS, LOOP0, 3064, 8),
            queue(3 * MS, LOOP0, 3064, 8),
            issue(4 * MS, LOOP0, 3064, 8),
            complete(5 * MS, LOOP0, 3064, 8),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.user_ios, writes.commands), (1, 2));
    assert_eq!(writes.commands_without_user_io, 1);
    assert!(
        (writes.amplification - 1.0).abs() < 1e-9,
        "{}",
        writes.amplification
    );
}

/// blk-flush.c issues an empty preflush as its own flush request (rwbs
/// `F…`, no sectors) and completes it through the driver like any request:
/// block_rq_issue then block_rq_complete, both empty. Flushes have no
/// sector to be told apart by and borrow another request's tag, so a
/// device's empty completions end its flushes first in, first out.
#[test]
fn a_flush_is_timed_from_issue_to_completion() {
    let mut engine = engine();
    let events = [
        flush(queue(MS, LOOP0, 0, 0), "FWS"),
        flush(issue(MS + 10_000, LOOP0, 0, 0), "FN"),
        flush(issue(MS + 20_000, LOOP0, 0, 0), "FN"),
        flush(complete(MS + 79_500, LOOP0, 0, 0), "FN"),
        flush(complete(MS + 120_000, LOOP0, 0, 0), "FN"),
        queue(2 * MS, LOOP0, 0, 8),
        issue(2 * MS, LOOP0, 0, 8),
        complete(3 * MS, LOOP0, 0, 8),
    ];
    feed(&mut engine, &events);
    let flushes = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!(flushes.commands, 2);
    // 69.5 µs and 100 µs: first in, first out.
    assert_eq!(flushes.issue_to_complete_us.count, 2);
    assert_eq!(flushes.issue_to_complete_us.min, 69);
    assert_eq!(flushes.issue_to_complete_us.max, 100);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.issue_to_complete_us.count), (1, 1));
    // The empty preflush bio too, from its queue to the flush that served it.
    assert_eq!(flushes.queue_to_complete_us.count, 1);
    assert_eq!(flushes.queue_to_complete_us.max, 79);
    assert_clean(&engine);
    // The views see the flush end, as the report counts it.
    let ended = of_events(&events)
        .iter()
        .filter(|outcome| {
            matches!(outcome, Outcome::Completed { whole: true, sectors: 0, account, .. }
                if account.target.op == Op::Flush)
        })
        .count();
    assert_eq!(ended, 2);
}

/// An empty completion with no flush in flight (issued before the trace)
/// ends nothing and counts nothing.
#[test]
fn an_empty_completion_without_its_issue_times_nothing() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            flush(complete(MS, LOOP0, 0, 0), "FN"),
            flush(issue(2 * MS, LOOP0, 0, 0), "FN"),
        ],
    );
    let flushes = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!(flushes.commands, 1);
    assert_eq!(flushes.issue_to_complete_us.count, 0);
}

/// A device completes what it was issued; a command in flight a hundred
/// times longer than the device's own 99th percentile (and over a second)
/// at the end of a trace lost its completion (not traced, or the capture
/// stopped short of it). Its chain ends incomplete instead of in flight;
/// a recent command, and one on a device with no completion to measure
/// against, stay in flight.
#[test]
fn a_command_far_older_than_its_device_ever_took_lost_its_completion() {
    let mut engine = engine();
    let mut events = vec![
        queue(MS, LOOP0, 0, 8),
        issue(MS, LOOP0, 0, 8),
        complete(15 * MS, LOOP0, 0, 8),
    ];
    for n in 0..100u64 {
        events.push(queue(20 * MS + n, LOOP0, 64 + n * 8, 8));
        events.push(issue(20 * MS + n, LOOP0, 64 + n * 8, 8));
    }
    events.extend([
        queue(2500 * MS, LOOP0, 4096, 8),
        issue(2500 * MS, LOOP0, 4096, 8),
        // zram completes nothing in this trace: nothing to measure against.
        queue(20 * MS, ZRAM, 0, 8),
        issue(20 * MS, ZRAM, 0, 8),
    ]);
    feed(&mut engine, &events);
    assert_eq!(engine.correlation().in_flight, 102);
    engine.settle_at_end(3000 * MS);
    let correlation = engine.correlation();
    assert_eq!(correlation.in_flight, 2);
    assert_eq!(correlation.completion_lost, 100);
    assert_eq!(correlation.incomplete, 100);
}

/// block/bio.c's `bio_chain`: a split piece's error becomes its parent's
/// status, and the parent (the user I/O) ends when its last piece does.
/// A request's completion reports the sectors it covers, so one naming
/// no issued start but covering an issued command completes that command
/// (here with EIO, as a zoned write not at the zone's start fails); the
/// user I/O fails once every piece is done.
#[test]
fn a_failed_piece_fails_its_split_user_io() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 765),
            split(MS, LOOP0, 0, 255),
            split(MS, LOOP0, 255, 510),
            issue(2 * MS, LOOP0, 510, 255),
            // Covers [0, 765): the issued piece at 510 fails.
            failed(complete(3 * MS, LOOP0, 0, 765), -5),
            issue(4 * MS, LOOP0, 0, 255),
            complete(5 * MS, LOOP0, 0, 255),
            issue(6 * MS, LOOP0, 255, 255),
            complete(7 * MS, LOOP0, 255, 255),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.failed_commands, writes.failed_user_ios), (1, 1));
    assert_eq!(writes.commands, 3);
    assert_eq!(writes.issue_to_complete_us.count, 3);
    assert_eq!(writes.queue_to_complete_us.count, 0);
    assert_clean(&engine);
}

/// The same chain whose other piece's completion never comes: once that
/// command is given up at the end, the user I/O ends failed, not in flight.
#[test]
fn a_failed_user_io_whose_other_piece_is_lost_ends_failed() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 510),
            split(MS, LOOP0, 0, 255),
            issue(2 * MS, LOOP0, 0, 255),
            issue(2 * MS, LOOP0, 255, 255),
            failed(complete(3 * MS, LOOP0, 0, 255), -5),
        ],
    );
    engine.settle_at_end(5000 * MS);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(writes.failed_user_ios, 1);
    let correlation = engine.correlation();
    assert_eq!((correlation.in_flight, correlation.completion_lost), (0, 1));
    // Failed, so not counted incomplete as well.
    assert_eq!(correlation.incomplete, 0);
}

/// Some kernels print a split discard's completions from sector 0 with the
/// range grown by each piece (`C DS 0 + 4`, `0 + 8`, …): each covers exactly
/// one more issued piece, and completes it.
#[test]
fn growing_range_completions_complete_the_next_piece() {
    let mut engine = engine();
    let mut events = vec![discard(queue(MS, LOOP0, 0, 16))];
    for piece in 0..3u64 {
        events.push(discard(split(MS, LOOP0, piece * 4, (piece + 1) * 4)));
    }
    for piece in 0..4u64 {
        events.push(discard(issue(2 * MS, LOOP0, piece * 4, 4)));
    }
    for piece in 0..4u32 {
        events.push(discard(complete(3 * MS, LOOP0, 0, (piece + 1) * 4)));
    }
    feed(&mut engine, &events);
    let discards = disk_op(&engine, "loop0", Op::Discard);
    assert_eq!(discards.commands, 4);
    assert_eq!(discards.issue_to_complete_us.count, 4);
    assert_eq!(discards.queue_to_complete_us.count, 1);
    assert_clean(&engine);
}
