//! Stacked devices (dm, md, multipath): remaps carry the top user I/O's chain down to the disk.

use super::*;

#[test]
fn stacked_remap_continues_the_chain_on_the_lower_partition() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut on_dm = queue(MS, DM, 100, 8);
    on_dm.tgid = 42;
    // The lower bio is submitted by a kernel thread.
    let mut lower = queue(MS, LOOP0, 2148, 8);
    lower.tgid = 7;
    feed(
        &mut engine,
        &[
            on_dm,
            // dm remaps to loop0p1 (sector relative to it), then the partition remap.
            remap(MS, LOOP0, 100, 8, DM, 100),
            remap(MS, LOOP0, 2148, 8, P1, 100),
            lower,
            issue(2 * MS, LOOP0, 2148, 8),
            complete(3 * MS, LOOP0, 2148, 8),
            bio_complete(4 * MS, DM, 100, 8),
        ],
    );
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(upper.user_ios, 1);
    assert_eq!(upper.commands, 1);
    assert_near(upper.queue_to_complete_us.p50, 3000);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 1);
    assert_eq!(p1.commands, 1);
    // The lower bio inherits the upper bio's process.
    let origins = engine.origins();
    let p1_origin = origins
        .iter()
        .find(|origin| origin.device == "loop0p1")
        .unwrap();
    assert_eq!(
        p1_origin.tracked.op(Op::Write).map(|op| op.user_ios),
        Some(1)
    );
    assert!(p1_origin.other.ops.is_empty());
}

/// dm-crypt on 6.12 cuts a 1 MiB write into 128 KiB clones: device-mapper
/// traces each cut on the bio it trims (`X 256 / 256`: its start is already
/// the cut), remaps each clone, and traces one completion, of the last
/// piece, for the whole bio (as the `stacks` VM scenario's blk trace shows).
#[test]
fn device_mapper_cuts_traced_on_the_trimmed_bio_keep_the_chain() {
    let mut engine = engine();
    let mut events = vec![queue(MS, DM, 0, 1024)];
    for cut in [256, 512, 768] {
        events.push(split(MS, DM, cut, cut));
    }
    for piece in 0..4u64 {
        let sector = piece * 256;
        events.push(remap(2 * MS, LOOP0, sector, 256, DM, sector));
        events.push(remap(2 * MS, LOOP0, 2048 + sector, 256, P1, sector));
        events.push(queue(2 * MS, LOOP0, 2048 + sector, 256));
        events.push(issue(3 * MS, LOOP0, 2048 + sector, 256));
        events.push(complete(4 * MS, LOOP0, 2048 + sector, 256));
    }
    events.push(bio_complete(5 * MS, DM, 768, 256));
    feed(&mut engine, &events);
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.fragments, upper.splits), (1, 4, 3));
    assert_eq!(
        upper.commands, 4,
        "each clone sent down is a command of dm-0"
    );
    assert_near(upper.queue_to_complete_us.p50, 4000);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (4, 4));
}

/// dm-striped maps each chunk's clone before it traces the trim (6.1 and
/// 6.12 alike, in the `stacks` VM scenario): Q, then per chunk A, A, Q on
/// the disk, and only then `X 128 / 128` on the trimmed bio.
/// A 256 KiB bio on dm-0 sent down as four 64 KiB clones, each remapped
/// before its trim is traced (`traced`) or with no trim traced at all.
fn four_clones(traced: bool) -> Vec<BlockEvent> {
    let mut events = vec![queue(MS, DM, 0, 512)];
    for piece in 0..4u64 {
        let sector = piece * 128;
        events.push(remap(MS, LOOP0, sector, 128, DM, sector));
        events.push(remap(MS, LOOP0, 2048 + sector, 128, P1, sector));
        events.push(queue(MS, LOOP0, 2048 + sector, 128));
        if traced && piece < 3 {
            events.push(split(MS, DM, sector + 128, sector + 128));
        }
    }
    for piece in 0..4u64 {
        let sector = 2048 + piece * 128;
        events.push(issue(2 * MS, LOOP0, sector, 128));
        events.push(complete(3 * MS, LOOP0, sector, 128));
    }
    events.push(bio_complete(4 * MS, DM, 384, 128));
    events
}

#[test]
fn a_clone_remapped_before_its_trim_is_traced_is_cut_once() {
    let mut engine = engine();
    feed(&mut engine, &four_clones(true));
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.fragments, upper.splits), (1, 4, 3));
    assert_eq!(upper.commands, 4);
    assert_eq!(upper.disk_commands, 4);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (4, 4));
    assert_eq!(p1.disk_commands, 0, "a disk's commands are its own");
    // Each cut was traced after its clone's remap: none was inferred.
    assert_eq!(engine.correlation().splits_inferred, 0);
}

/// A bio-based device's cuts with no trace_block_split, on a device-mapper
/// device (one completion for the whole bio): only the pieces' remaps show
/// the cuts. They count as the same splits, with the same cause, and are
/// marked inferred. md's own case, as the 6.1 guest shows it, is
/// `md_cuts_untraced_before_6_18_count_as_the_traced_ones`.
#[test]
fn untraced_md_cuts_are_inferred_from_the_pieces_remaps() {
    let run = |traced: bool| {
        let mut engine = engine();
        feed(&mut engine, &four_clones(traced));
        // Every chain ended, nothing unmatched: only the inferred count may differ.
        assert_eq!(
            CorrelationStats {
                splits_inferred: 0,
                ..engine.correlation()
            },
            CorrelationStats::default()
        );
        let upper = disk_op(&engine, "dm-0", Op::Write);
        (
            upper.splits,
            upper.split_causes.clone(),
            upper.commands,
            engine.correlation().splits_inferred,
        )
    };
    let (traced, untraced) = (run(true), run(false));
    assert_eq!(traced.3, 0);
    assert_eq!(untraced.3, 3);
    assert_eq!(
        (traced.0, traced.1, traced.2),
        (untraced.0, untraced.1, untraced.2)
    );
}

/// Two clones of one dm write merged into one command on the disk: dm-0's
/// user I/O went out as two pieces and reached the disk as one command.
#[test]
fn clones_merged_below_count_once_as_the_top_io_s_disk_command() {
    let mut engine = engine();
    let mut events = vec![queue(MS, DM, 0, 256), split(MS, DM, 128, 128)];
    for piece in 0..2u64 {
        let sector = piece * 128;
        events.push(remap(MS, LOOP0, sector, 128, DM, sector));
        events.push(remap(MS, LOOP0, 2048 + sector, 128, P1, sector));
        events.push(queue(MS, LOOP0, 2048 + sector, 128));
    }
    events.push(backmerge(MS, LOOP0, 2176, 128));
    events.push(issue(2 * MS, LOOP0, 2048, 256));
    events.push(complete(3 * MS, LOOP0, 2048, 256));
    events.push(bio_complete(4 * MS, DM, 128, 128));
    feed(&mut engine, &events);
    assert_clean(&engine);
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(
        (upper.user_ios, upper.commands, upper.disk_commands),
        (1, 2, 1)
    );
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (2, 1));
}

/// md raid1 over loop0p1 and loop0p2: the write to the array is remapped
/// twice, one clone per mirror, from the same sector of md. Both mirrors'
/// commands are the top write's, and its owner's.
#[test]
fn each_mirror_of_a_raid1_write_continues_the_same_user_io() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut on_md = queue(MS, DM, 0, 8);
    on_md.tgid = 42;
    let mut events = vec![on_md];
    for (part, start) in [(P1, 2048), (P2, 10241)] {
        let mut lower = queue(MS, LOOP0, start, 8);
        lower.tgid = 7;
        events.extend([
            remap(MS, LOOP0, 0, 8, DM, 0),
            remap(MS, LOOP0, start, 8, part, 0),
            lower,
        ]);
    }
    for start in [2048, 10241] {
        events.push(issue(2 * MS, LOOP0, start, 8));
        events.push(complete(3 * MS, LOOP0, start, 8));
    }
    events.push(bio_complete(4 * MS, DM, 0, 8));
    feed(&mut engine, &events);
    assert_eq!(
        engine.correlation(),
        CorrelationStats {
            mirrored_remaps: 1,
            ..CorrelationStats::default()
        }
    );
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!(
        (upper.user_ios, upper.commands, upper.disk_commands),
        (1, 1, 2),
        "one write to the array, one bio per mirror, a command on each"
    );
    for part in ["loop0p1", "loop0p2"] {
        let mirror = part_op(&engine, "loop0", part, Op::Write);
        assert_eq!((mirror.user_ios, mirror.commands), (1, 1), "{part}");
    }
    let origins = engine.origins();
    for part in ["loop0p1", "loop0p2"] {
        let origin = origins.iter().find(|o| o.device == part).unwrap();
        assert_eq!(
            origin.tracked.op(Op::Write).map(|op| op.user_ios),
            Some(1),
            "{part} is the tracked writer's"
        );
    }
}

fn rq_remap(ts: u64, dev: DevId, sector: u64, nr: u32, old: DevId, old_sector: u64) -> BlockEvent {
    BlockEvent {
        kind: EventKind::RqRemap as u8,
        ..remap(ts, dev, sector, nr, old, old_sector)
    }
}

/// dm-multipath is request-based: dm-0 issues a request, clones it onto a
/// path (`block_rq_remap`), and the clone is issued there with no queue of
/// its own. Two writes merged into one dm-0 request reach the path as one
/// command, each write's disk command; blkparse's `A` line for the clone
/// (a bio remap to an importer) reads the same.
#[test]
fn a_multipath_clone_issued_on_its_path_is_the_upper_writes_disk_command() {
    for as_bio_remap in [false, true] {
        let mut engine = engine();
        let clone = match as_bio_remap {
            false => rq_remap(2 * MS, LOOP0, 0, 16, DM, 0),
            true => remap(2 * MS, LOOP0, 0, 16, DM, 0),
        };
        feed(
            &mut engine,
            &[
                queue(MS, DM, 0, 8),
                queue(MS, DM, 8, 8),
                backmerge(MS, DM, 8, 8),
                issue(2 * MS, DM, 0, 16),
                clone,
                issue(2 * MS, LOOP0, 0, 16),
                complete(3 * MS, LOOP0, 0, 16),
                complete(4 * MS, DM, 0, 16),
            ],
        );
        assert_clean(&engine);
        let upper = disk_op(&engine, "dm-0", Op::Write);
        assert_eq!(
            (upper.user_ios, upper.commands, upper.disk_commands),
            (2, 1, 2),
            "as a bio remap: {as_bio_remap}"
        );
        assert_near(upper.queue_to_complete_us.p50, 3000);
        let path = disk_op(&engine, "loop0", Op::Write);
        assert_eq!((path.user_ios, path.commands), (0, 1));
    }
}

/// `blktrace -d` on the lower disk of LVM on a partition (as on CentOS 7,
/// where the dm remap names the partition): no queue on dm-0, two remaps.
/// The dm bio is the user I/O, and the chain reaches the partition's bio.
#[test]
fn an_untraced_upper_device_is_read_from_its_remap_and_chained_down() {
    let mut engine = engine();
    engine.track_processes([42]);
    let mut first = remap(MS, P1, 100, 8, DM, 60);
    first.tgid = 42;
    let mut lower = queue(MS, LOOP0, 2148, 8);
    lower.tgid = 7;
    feed(
        &mut engine,
        &[
            first,
            remap(MS, LOOP0, 2148, 8, P1, 100),
            lower,
            issue(2 * MS, LOOP0, 2148, 8),
            complete(3 * MS, LOOP0, 2148, 8),
        ],
    );
    let upper = disk_op(&engine, "dm-0", Op::Write);
    assert_eq!((upper.user_ios, upper.bytes), (1, 4096));
    // dm-0's completion is not in the trace: its user I/O ends with its bio's.
    assert_near(upper.queue_to_complete_us.p50, 2000);
    assert_eq!(engine.correlation().in_flight, 0);
    assert_eq!(engine.correlation().incomplete, 0);
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((p1.user_ios, p1.commands), (1, 1));
    assert_eq!(engine.correlation().queues_from_remaps, 1);
    assert_eq!(engine.correlation().unmatched_events, 0);
    // Chained: the partition's bio is the tracked process's, not the kernel thread's.
    let origins = engine.origins();
    let p1_origin = origins.iter().find(|o| o.device == "loop0p1").unwrap();
    assert_eq!(
        p1_origin.tracked.op(Op::Write).map(|op| op.user_ios),
        Some(1)
    );
}

/// dm's clones of part of a traced bio (a target boundary, a stripe chunk)
/// are remaps with no fragment of their size: never a second user I/O.
#[test]
fn partial_clones_of_a_traced_upper_bio_are_not_user_ios_again() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, DM, 100, 16),
            remap(MS, LOOP0, 2148, 8, DM, 100),
            remap(MS, LOOP0, 4196, 8, DM, 108),
        ],
    );
    assert_eq!(disk_op(&engine, "dm-0", Op::Write).user_ios, 1);
    assert_eq!(engine.correlation().queues_from_remaps, 0);
}

/// md on NVMe printed A, D, C and no Q: the md bio is read off the remap,
/// the remapped bio is queued at its issue, and the md bio's time is A→C.
#[test]
fn a_remapped_bio_issued_without_a_queue_is_queued_at_its_issue() {
    let mut engine = engine();
    let md = DevId::new(9, 127);
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 4096, 8, md, 1024),
            issue(2 * MS, LOOP0, 4096, 8),
            complete(3 * MS, LOOP0, 4096, 8),
        ],
    );
    let upper = disk_op(&engine, "9:127", Op::Write);
    assert_eq!(upper.user_ios, 1);
    assert_near(upper.queue_to_complete_us.p50, 2000);
    let lower = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((lower.user_ios, lower.commands), (1, 1));
    let correlation = engine.correlation();
    assert_eq!(correlation.queues_from_remaps, 2);
    assert_eq!(
        (correlation.unmatched_events, correlation.in_flight),
        (0, 0)
    );
}

/// md raid5 writes a stripe's data and parity in 4 KiB bios of its own,
/// each remapped from md2 (the parity ones from its sector 0, as the
/// `stacks` VM scenario's trace shows), and completes the user's bio whole.
/// Those remaps neither cut the user's bio nor leave it in flight.
#[test]
fn raid5_stripe_bios_continue_the_write_without_cutting_it() {
    let md = DevId::new(9, 2);
    let raid5 = DiskGeometry {
        name: "md2".into(),
        dev: Some(md),
        logical_block_size: 512,
        physical_block_size: 4096,
        request_based: false,
        stack: Some(crate::geometry::stack::Stack {
            kind: "md-raid5".into(),
            chunk_sectors: 128,
            ..Default::default()
        }),
        ..DiskGeometry::default()
    };
    let mut engine = Engine::new(vec![loop0(), raid5], EngineLimits::default());
    engine.track_processes([42]);
    let mut on_md = queue(MS, md, 0, 16);
    on_md.tgid = 42;
    let mut events = vec![on_md];
    for stripe in 0..2u64 {
        let sector = stripe * 8;
        for (part, start, from) in [(P1, 2048, sector), (P2, 10241, 0)] {
            let mut lower = queue(MS, LOOP0, start + sector, 8);
            lower.tgid = 7;
            events.extend([
                remap(MS, LOOP0, sector, 8, md, from),
                remap(MS, LOOP0, start + sector, 8, part, sector),
                lower,
            ]);
            if stripe == 1 {
                events.push(backmerge(MS, LOOP0, start + sector, 8));
            }
        }
    }
    for start in [2048, 10241] {
        events.push(issue(2 * MS, LOOP0, start, 16));
        events.push(complete(3 * MS, LOOP0, start, 16));
    }
    events.push(bio_complete(4 * MS, md, 0, 16));
    feed(&mut engine, &events);
    assert_eq!(
        engine.correlation(),
        CorrelationStats {
            stripe_remaps: 4,
            ..CorrelationStats::default()
        }
    );
    let upper = disk_op(&engine, "md2", Op::Write);
    assert_eq!(
        (
            upper.user_ios,
            upper.splits,
            upper.commands,
            upper.disk_commands
        ),
        (1, 0, 1, 2),
        "one write, never cut, one command on each of its two disks"
    );
    assert_near(upper.queue_to_complete_us.p50, 3000);
    let origins = engine.origins();
    for part in ["loop0p1", "loop0p2"] {
        let origin = origins.iter().find(|o| o.device == part).unwrap();
        assert_eq!(
            origin.tracked.op(Op::Write).map(|op| op.user_ios),
            Some(2),
            "{part}: md's stripe bios are the writer's"
        );
    }
}

/// An md array over loop0p1 and loop0p2 with 64 KiB chunks, of `kind`.
fn md_array(kind: &str, dev: DevId) -> DiskGeometry {
    DiskGeometry {
        name: format!("md{}", dev.minor),
        dev: Some(dev),
        logical_block_size: 512,
        physical_block_size: 4096,
        max_sectors_kb: 1280,
        request_based: false,
        stack: Some(crate::geometry::stack::Stack {
            kind: kind.into(),
            chunk_sectors: 128,
            ..Default::default()
        }),
        ..DiskGeometry::default()
    }
}

/// A 256 KiB `op` on `md` cut into its four 64 KiB chunks, as the `stacks`
/// VM scenario's blk traces show them: 7.3 (`traced`) traces each cut as
/// block/blk-merge.c does (`X 0 / 128`, the piece, then the cut) before the
/// piece's clones are remapped; 6.1's md calls bio_split without
/// trace_block_split, so the first clone's remap is the only sign of the
/// cut. On both, md's split carries the completion trace to the piece: each
/// piece's completion is traced (`C 0 + 128`). `mirrors`: clones per piece
/// (raid10 near 2: one per copy; a raid5 read: one).
fn md_chunk_pieces(md: DevId, op: &str, traced: bool, mirrors: usize) -> Vec<BlockEvent> {
    let as_op = |event: BlockEvent| BlockEvent {
        rwbs: rwbs(op),
        ..event
    };
    let mut events = vec![as_op(queue(MS, md, 0, 512))];
    let members = [(P1, 2048), (P2, 10241)];
    for piece in 0..4u64 {
        let sector = piece * 128;
        if traced && piece < 3 {
            events.push(as_op(split(MS, md, sector, sector + 128)));
        }
        for &(part, start) in &members[..mirrors] {
            events.push(as_op(remap(MS, LOOP0, sector, 128, md, sector)));
            events.push(as_op(remap(MS, LOOP0, start + sector, 128, part, sector)));
            events.push(as_op(queue(MS, LOOP0, start + sector, 128)));
        }
    }
    for piece in 0..4u64 {
        let sector = piece * 128;
        for &(_, start) in &members[..mirrors] {
            events.push(as_op(issue(2 * MS, LOOP0, start + sector, 128)));
            events.push(as_op(complete(3 * MS, LOOP0, start + sector, 128)));
        }
        events.push(as_op(bio_complete(4 * MS, md, sector, 128)));
    }
    events
}

/// md before 6.18 (22f166218f73; Debian's 6.1 guest) cuts raid10's writes
/// at its chunks, and raid5's reads that skip the stripe cache, without
/// tracing the cut. Each cut is inferred from the first clone's remap and
/// counts as the traced one does, with its cause: the second mirror's clone
/// continues the same piece (not unmatched), each piece's own completion
/// ends it, and a raid5 read's piece is not taken for one of its stripe bios.
#[test]
fn md_cuts_untraced_before_6_18_count_as_the_traced_ones() {
    let raid10 = DevId::new(9, 3);
    let raid5 = DevId::new(9, 2);
    for (kind, md, op, mirrors) in [
        ("md-raid10", raid10, "W", 2),
        ("md-raid10", raid10, "R", 1),
        ("md-raid5", raid5, "R", 1),
    ] {
        let run = |traced: bool| {
            let mut engine =
                Engine::new(vec![loop0(), md_array(kind, md)], EngineLimits::default());
            feed(&mut engine, &md_chunk_pieces(md, op, traced, mirrors));
            let correlation = engine.correlation();
            let ops = if op == "W" { Op::Write } else { Op::Read };
            let upper = disk_op(&engine, &format!("md{}", md.minor), ops);
            (
                CorrelationStats {
                    splits_inferred: 0,
                    ..correlation
                },
                correlation.splits_inferred,
                (upper.user_ios, upper.fragments, upper.splits),
                upper.split_causes.clone(),
                (upper.commands, upper.disk_commands),
            )
        };
        let (traced, untraced) = (run(true), run(false));
        let what = format!("{kind} {op}");
        assert_eq!(
            traced.0,
            CorrelationStats {
                mirrored_remaps: 4 * (mirrors as u64 - 1),
                ..CorrelationStats::default()
            },
            "{what}: every chain ended, nothing unmatched"
        );
        assert_eq!((traced.1, untraced.1), (0, 3), "{what}: inferred cuts");
        assert_eq!(traced.2, (1, 4, 3), "{what}");
        assert_eq!(
            traced
                .3
                .get(&crate::model::SplitCause::ChunkBoundary)
                .copied(),
            Some(3),
            "{what}: cause"
        );
        assert_eq!(
            (&untraced.0, &untraced.2, &untraced.3, untraced.4),
            (&traced.0, &traced.2, &traced.3, traced.4),
            "{what}: untraced cuts count as the traced ones"
        );
    }
}
