//! A requeued command is one command timed from its last issue; commands are issues less requeues.

use super::*;

#[test]
fn a_requeued_request_is_not_a_lost_completion() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            named(requeue(3 * MS, LOOP0, 0, 8), 5),
            // Re-issued under another tag; tag 5 goes to other work meanwhile.
            named(issue(4 * MS, LOOP0, 0, 8), 9),
            queue(4 * MS, LOOP0, 64, 8),
            named(issue(4 * MS, LOOP0, 64, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 9),
            named(complete(5 * MS, LOOP0, 64, 8), 5),
        ],
    );
    assert_clean(&engine);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (2, 1));
}

#[test]
fn a_reissue_whose_requeue_was_not_seen_is_one_command_and_completes_once() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            issue(2 * MS, LOOP0, 0, 8),
            complete(3 * MS, LOOP0, 0, 8),
        ],
    );
    assert_eq!(engine.correlation().requeues_inferred, 1);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.commands, writes.requeues), (1, 1));
}

/// Commands are issues minus the re-issues of requeued commands.
fn assert_commands_are_issues_minus_requeues(engine: &Engine) {
    let events = engine.events();
    let (commands, requeues) = engine
        .devices()
        .iter()
        .flat_map(|device| device.measures.ops.values())
        .fold((0, 0), |(commands, requeues), op| {
            (commands + op.commands, requeues + op.requeues)
        });
    assert_eq!(requeues, events[EventKind::Requeue]);
    assert_eq!(
        commands,
        events[EventKind::Issue] - events[EventKind::Requeue]
    );
}

/// After a requeue case: nothing left in flight, commands counted as issues
/// minus requeues; loop0's write measures.
fn settled_loop0_writes(engine: &Engine) -> OpMeasures {
    assert_clean(engine);
    assert_commands_are_issues_minus_requeues(engine);
    disk_op(engine, "loop0", Op::Write)
}

#[test]
fn a_requeued_command_is_one_command_timed_from_its_last_issue() {
    let mut engine = engine();
    // The vda case: a 1 MiB write split 2032 + 16, the tail requeued while
    // the head fills the virtqueue, and issued again 2 ms later.
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 2048),
            split(MS, LOOP0, 0, 2032),
            issue(MS, LOOP0, 0, 2032),
            issue(MS, LOOP0, 2032, 16),
            requeue(MS + 10_000, LOOP0, 2032, 16),
            complete(3 * MS, LOOP0, 0, 2032),
            issue(3 * MS + 10_000, LOOP0, 2032, 16),
            complete(4 * MS, LOOP0, 2032, 16),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.commands, write.requeues), (1, 2, 1));
    assert_eq!(write.commands_per_io.max, 2);
    assert!((write.amplification - 2.0).abs() < 1e-9);
    assert!((write.requeue_share() - 0.5).abs() < 1e-9);
    assert_eq!(write.requeue_delay_us.count, 1);
    assert_near(write.requeue_delay_us.p50, 2000);
    // The tail: 990 us from its last issue, not 3 ms from its first.
    assert_eq!(write.issue_to_complete_us.count, 2);
    assert_near(write.issue_to_complete_us.min, 990);
    assert_near(write.issue_to_complete_us.max, 2000);
    assert_eq!(engine.events()[EventKind::Requeue], 1);
}

#[test]
fn a_command_requeued_twice_is_still_one_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            requeue(2 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            requeue(4 * MS, LOOP0, 0, 8),
            issue(7 * MS, LOOP0, 0, 8),
            complete(8 * MS, LOOP0, 0, 8),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.commands, write.requeues), (1, 2));
    assert_eq!(write.requeue_delay_us.count, 2);
    assert_near(write.requeue_delay_us.max, 3000);
    assert_near(write.issue_to_complete_us.max, 1000);
}

#[test]
fn partial_completions_around_a_requeue_finish_the_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(MS, LOOP0, 8, 8),
            backmerge(MS, LOOP0, 8, 8),
            queue(MS, LOOP0, 16, 8),
            backmerge(MS, LOOP0, 16, 8),
            issue(2 * MS, LOOP0, 0, 24),
            // Part done, the rest given back and issued again with its remaining range.
            complete(3 * MS, LOOP0, 0, 8),
            requeue(3 * MS, LOOP0, 8, 16),
            issue(4 * MS, LOOP0, 8, 16),
            // Partial completion after the requeue.
            complete(5 * MS, LOOP0, 8, 8),
        ],
    );
    assert_eq!(
        engine.correlation().in_flight,
        1,
        "the last bio is still out"
    );
    engine.ingest(&complete(6 * MS, LOOP0, 16, 8));
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.commands, write.requeues), (3, 1, 1));
    assert_eq!(write.commands_per_io.max, 1);
    assert_near(write.issue_to_complete_us.max, 2000);
    assert_near(write.queue_to_complete_us.max, 5000);
}

#[test]
fn a_requeued_merged_request_carries_all_its_bios_once() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 64, 8),
            queue(MS, LOOP0, 72, 8),
            backmerge(MS, LOOP0, 72, 8),
            issue(2 * MS, LOOP0, 64, 16),
            requeue(2 * MS, LOOP0, 64, 16),
            issue(3 * MS, LOOP0, 64, 16),
            complete(4 * MS, LOOP0, 64, 16),
        ],
    );
    let write = settled_loop0_writes(&engine);
    assert_eq!((write.user_ios, write.merges), (2, 1));
    assert_eq!((write.commands, write.requeues), (1, 1));
    assert_eq!(write.commands_per_io.max, 1);
    assert_eq!(write.command_size.max, 16 * 512);
}

#[test]
fn requeues_of_commands_issued_before_tracing_or_without_a_range_keep_the_count() {
    let mut engine = engine();
    let mut flush = issue(MS, LOOP0, 0, 0);
    flush.rwbs = rwbs("FF");
    let mut flush_requeue = requeue(MS, LOOP0, 0, 0);
    flush_requeue.rwbs = rwbs("FF");
    let mut flush_reissue = issue(2 * MS, LOOP0, 0, 0);
    flush_reissue.rwbs = rwbs("FF");
    feed(
        &mut engine,
        &[
            // Issued before the trace began: only its requeue and re-issue are seen.
            requeue(MS, LOOP0, 512, 8),
            issue(2 * MS, LOOP0, 512, 8),
            complete(3 * MS, LOOP0, 512, 8),
            flush,
            flush_requeue,
            flush_reissue,
        ],
    );
    assert_commands_are_issues_minus_requeues(&engine);
    assert_eq!(engine.correlation().in_flight, 0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.commands, write.requeues), (0, 1));
    assert_near(write.requeue_delay_us.max, 1000);
    let flush = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!((flush.commands, flush.requeues), (1, 1));
}
