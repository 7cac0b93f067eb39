//! One device's chains: queues, splits, merges, issues and completions make user I/Os and commands.

use super::*;
use crate::model::SplitCause;

#[test]
fn one_bio_split_into_three_commands() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 2048, 768),
            split(MS, LOOP0, 2048, 2304),
            split(MS, LOOP0, 2304, 2560),
            issue(2 * MS, LOOP0, 2048, 256),
            issue(2 * MS, LOOP0, 2304, 256),
            issue(2 * MS, LOOP0, 2560, 256),
            complete(3 * MS, LOOP0, 2304, 256),
            complete(3 * MS, LOOP0, 2048, 256),
        ],
    );
    assert_eq!(engine.correlation().in_flight, 1, "one fragment still out");
    engine.ingest(&complete(5 * MS, LOOP0, 2560, 256));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 1);
    assert_eq!(write.fragments, 3);
    assert_eq!(write.splits, 2);
    assert_eq!(write.commands, 3);
    assert_eq!(write.bytes, 768 * 512);
    assert!((write.amplification - 3.0).abs() < 1e-9);
    assert_eq!(write.split_causes.get(&SplitCause::MaxSectors), Some(&2));
    assert_eq!(write.fragments_per_io.p50, 3);
    assert_eq!(write.commands_per_io.p50, 3);
    assert_eq!(write.command_size.p50, 256 * 512);
    assert_eq!(write.user_io_size.max, 768 * 512);
    assert_near(write.queue_to_complete_us.max, 4000);
    assert_eq!(write.issue_to_complete_us.count, 3);
    assert_eq!(write.misaligned_pbs_commands, 0);
}

#[test]
fn seed_case_64_sector_bios_back_merged_into_one_command() {
    let mut engine = engine();
    let start = 4096;
    for index in 0..64u64 {
        engine.ingest(&queue(MS + index, LOOP0, start + index, 1));
        if index > 0 {
            engine.ingest(&backmerge(MS + index, LOOP0, start + index, 1));
        }
    }
    engine.ingest(&issue(2 * MS, LOOP0, start, 64));
    engine.ingest(&complete(3 * MS, LOOP0, start, 64));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 64);
    assert_eq!(write.commands, 1);
    assert_eq!(write.merges, 63);
    assert!((write.amplification - 1.0 / 64.0).abs() < 1e-12);
    assert_eq!(write.commands_per_io.count, 64);
    assert_eq!(write.commands_per_io.max, 1);
    assert_eq!(write.user_io_size.p50, 512);
    assert_eq!(write.command_size.p50, 64 * 512);
    // 64 sectors at 4096 is a whole number of 4 KiB blocks.
    assert_eq!(write.misaligned_pbs_commands, 0);
}

#[test]
fn front_merge_and_request_merge_form_one_command() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 100, 8),
            queue(MS, LOOP0, 92, 8),
            event(EventKind::Frontmerge, MS, LOOP0, 92, 8),
            queue(MS, LOOP0, 116, 8),
            queue(MS, LOOP0, 108, 8),
            backmerge(MS, LOOP0, 108, 8),
            // The request at 116 is merged into the one at 92.
            event(EventKind::RqMerge, MS, LOOP0, 116, 8),
            issue(2 * MS, LOOP0, 92, 32),
            complete(3 * MS, LOOP0, 92, 32),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.user_ios, 4);
    assert_eq!(write.merges, 3);
    assert_eq!(write.commands, 1);
    assert_eq!(write.commands_per_io.count, 4);
    // Starts at 92: not 4 KiB aligned.
    assert_eq!(write.misaligned_4k_commands, 1);
    assert_eq!(write.misaligned_pbs_commands, 1);
}

#[test]
fn partial_completions_complete_fragment_by_fragment() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(MS, LOOP0, 8, 8),
            backmerge(MS, LOOP0, 8, 8),
            issue(2 * MS, LOOP0, 0, 16),
            complete(3 * MS, LOOP0, 0, 4),
        ],
    );
    assert_eq!(engine.correlation().in_flight, 2, "half a fragment done");
    engine.ingest(&complete(4 * MS, LOOP0, 4, 4));
    assert_eq!(engine.correlation().in_flight, 1, "first bio done");
    engine.ingest(&complete(5 * MS, LOOP0, 8, 8));
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_near(write.queue_to_complete_us.min, 3000);
    assert_near(write.queue_to_complete_us.max, 4000);
    assert_eq!(write.issue_to_complete_us.count, 1);
    assert_near(write.issue_to_complete_us.p50, 3000);
}

#[test]
fn partition_remap_attributes_to_the_partition() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 2048 + 16, 8, P1, 16),
            queue(MS, LOOP0, 2048 + 16, 8),
            issue(MS, LOOP0, 2048 + 16, 8),
            complete(MS, LOOP0, 2048 + 16, 8),
            // Straight to the whole disk: not a partition's I/O.
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            complete(MS, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 1);
    assert_eq!(p1.commands, 1);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).user_ios, 2);
    let reports = engine.devices();
    let p2 = &device(&reports, "loop0").partitions[1];
    assert_eq!(p2.name, "loop0p2");
    assert!(p2.measures.ops.is_empty());
}

#[test]
fn remaps_match_queues_first_in_first_out_and_unknown_partitions_appear() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 7);
    feed(
        &mut engine,
        &[
            // Same bio range remapped from two partitions: FIFO decides.
            remap(MS, LOOP0, 30000, 8, P2, 19759),
            remap(MS, LOOP0, 30000, 8, unknown_part, 0),
            queue(MS, LOOP0, 30000, 8),
            queue(MS, LOOP0, 30000, 8),
        ],
    );
    assert_eq!(part_op(&engine, "loop0", "loop0p2", Op::Write).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "259:7", Op::Write).user_ios, 1);
}

#[test]
fn a_remap_waits_for_its_queue_behind_older_remaps_and_other_events() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 7);
    let read = |event: BlockEvent| BlockEvent {
        rwbs: rwbs("R"),
        ..event
    };
    feed(
        &mut engine,
        &[
            // The second remap is the newest when the first queue comes, but
            // the first remap of that range is the one the queue takes.
            remap(MS, LOOP0, 30000, 8, P2, 19759),
            remap(MS, LOOP0, 30000, 8, unknown_part, 0),
            read(queue(MS, LOOP0, 30000, 8)),
            queue(MS, LOOP0, 30000, 8),
            // A queue of another range between a remap and its own queue.
            remap(2 * MS, LOOP0, 2048 + 64, 8, P1, 64),
            queue(2 * MS, LOOP0, 90000, 8),
            queue(2 * MS, LOOP0, 2048 + 64, 8),
        ],
    );
    assert_eq!(part_op(&engine, "loop0", "loop0p2", Op::Read).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "259:7", Op::Write).user_ios, 1);
    assert_eq!(part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios, 1);
    assert_eq!(engine.correlation().unmatched_events, 0);
}

#[test]
fn missing_queue_is_unmatched_but_the_command_still_counts() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[issue(MS, LOOP0, 0, 8), complete(2 * MS, LOOP0, 0, 8)],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 1);
    assert_eq!(stats.incomplete, 0);
    assert_eq!(stats.in_flight, 0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.commands, 1);
    assert_eq!(write.user_ios, 0);
    assert_near(write.issue_to_complete_us.p50, 1000);
}

#[test]
fn missing_issue_leaves_the_chain_to_age_out_as_incomplete() {
    let limits = EngineLimits {
        max_age_ns: 10 * MS,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), complete(2 * MS, LOOP0, 0, 8)],
    );
    assert_eq!(engine.correlation().unmatched_events, 1);
    assert_eq!(engine.correlation().in_flight, 1);
    // Any later event moves the clock: the chain is now too old.
    engine.ingest(&queue(20 * MS, LOOP0, 64, 8));
    let stats = engine.correlation();
    assert_eq!(stats.aged_out, 1);
    assert_eq!(stats.incomplete, 1);
    assert_eq!(stats.in_flight, 1, "only the new bio");
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(write.queue_to_complete_us.count, 0);
}

#[test]
fn gap_in_an_issued_range_is_unmatched() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            // The bio at 8 was dropped by the ring buffer.
            issue(MS, LOOP0, 0, 16),
            complete(2 * MS, LOOP0, 0, 16),
        ],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 1);
    assert_eq!(stats.in_flight, 0, "the bio we saw completed");
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 1);
}

#[test]
fn bio_based_device_completes_bios_as_commands() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, ZRAM, 0, 8),
            queue(MS, ZRAM, 8, 8),
            bio_complete(2 * MS, ZRAM, 8, 8),
            bio_complete(3 * MS, ZRAM, 0, 8),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "zram0", Op::Write);
    assert_eq!(write.user_ios, 2);
    assert_eq!(write.commands, 2);
    assert_eq!(write.commands_per_io.max, 1);
    assert_near(write.queue_to_complete_us.max, 2000);
}

#[test]
fn unknown_device_without_issues_is_bio_based_and_named_by_number() {
    let mut engine = engine();
    let unknown = DevId::new(43, 0);
    feed(
        &mut engine,
        &[
            queue(MS, unknown, 0, 8),
            bio_complete(2 * MS, unknown, 0, 8),
        ],
    );
    assert_clean(&engine);
    let reports = engine.devices();
    let report = device(&reports, "43:0");
    assert_eq!(report.dev, "43:0");
    assert!(report.geometry.name.is_empty());
    assert_eq!(report.measures.op(Op::Write).map(|op| op.commands), Some(1));
}

#[test]
fn request_based_bio_completions_do_not_double_count() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 0, 8),
            complete(2 * MS, LOOP0, 0, 8),
            // What the kernel reports for a bio advanced to its end.
            bio_complete(2 * MS, LOOP0, 8, 0),
        ],
    );
    assert_clean(&engine);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 1);
}

#[test]
fn concurrent_io_to_the_same_sectors_is_first_in_first_out() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            queue(2 * MS, LOOP0, 0, 8),
            issue(3 * MS, LOOP0, 0, 8),
            complete(MS + 2048 * 1000, LOOP0, 0, 8),
            issue(4 * MS, LOOP0, 0, 8),
            complete(2 * MS + 16384 * 1000, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    // First queued, first completed: 2048 µs and 16384 µs (LIFO would give 1048 and 17384).
    assert_eq!(write.queue_to_complete_us.min, 2048);
    assert_eq!(write.queue_to_complete_us.max, 16384);
}
