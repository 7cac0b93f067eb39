//! The split finding counts user I/Os of the op it names and prices its cuts by their cause.

use super::*;
use crate::model::{Evidence, Severity, SplitCause, SplitCost, SplitFix};

#[test]
fn too_few_splits_raise_nothing() {
    let mut engine = engine();
    misaligned_writes(&mut engine, diagnose::MIN_SPLITS - 1);
    assert!(engine
        .diagnoses()
        .iter()
        .all(|diagnosis| diagnosis.code != Code::SplitAmplification));
}

/// A split finding counts user I/Os, not cuts, and only of the op it names:
/// 10 writes cut 3 times each among 200 unsplit reads are 10 of 10 writes.
#[test]
fn split_shares_count_user_ios_of_the_op_they_name() {
    let mut engine = engine();
    for index in 0..10 {
        let base = index * 1024;
        let ts = MS * (index + 1);
        let mut events = vec![queue(ts, LOOP0, base, 1024)];
        for piece in 1..4 {
            events.push(split(
                ts,
                LOOP0,
                base + (piece - 1) * 256,
                base + piece * 256,
            ));
        }
        for piece in 0..4 {
            events.push(issue(ts, LOOP0, base + piece * 256, 256));
            events.push(complete(ts, LOOP0, base + piece * 256, 256));
        }
        feed(&mut engine, &events);
    }
    for index in 0..200 {
        let read = |event: BlockEvent| BlockEvent {
            rwbs: rwbs("R"),
            ..event
        };
        let (ts, sector) = (20 * MS + index * 1000, 100_000 + index * 8);
        feed(
            &mut engine,
            &[
                read(queue(ts, LOOP0, sector, 8)),
                read(issue(ts, LOOP0, sector, 8)),
                read(complete(ts, LOOP0, sector, 8)),
            ],
        );
    }
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.op, Op::Write);
    assert_eq!(
        (split.split_user_ios, split.user_ios, split.splits),
        (10, 10, 30)
    );
    assert_eq!((split.fragments, split.commands), (40, 40));
    assert_eq!(split.split_share, 1.0);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.split_user_ios, write.splits), (10, 30));
    assert_eq!(write.split_share(), 1.0);
    assert_eq!(disk_op(&engine, "loop0", Op::Read).split_user_ios, 0);
}

/// dm-stripe traced alone prints Q and X lines only: no command below the
/// splits, so nothing is concluded about their cost, and the fix is dm's own
/// boundaries, not "a stacked device above" the dm device itself.
#[test]
fn splits_on_a_bio_based_device_with_no_commands_in_the_trace_are_not_priced() {
    let mut engine = engine();
    for index in 0..20 {
        // 144 KiB writes starting 32 sectors before a 64 KiB stripe chunk
        // ends: cut there and at the next chunk; no queue limit of dm-0 says so.
        let base = index * 1024 + 96;
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                queue(ts, DM, base, 288),
                split(ts, DM, base, base + 32),
                split(ts, DM, base + 32, base + 160),
            ],
        );
    }
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cost, split.fix),
        (
            SplitCost::Unmeasured,
            SplitFix::AlignToOwnBoundaries {
                boundary_sectors: 128
            }
        )
    );
    assert_eq!(split.commands, 0);
    assert!(split.what_if.is_none());
    assert_eq!(finding.severity, Severity::Info);
    let words = crate::explain::words(&finding);
    assert!(
        words.explanation.contains("cannot be measured"),
        "{}",
        words.explanation
    );
    assert!(
        !words.explanation.contains("cost nothing"),
        "{}",
        words.explanation
    );
    assert!(words.fix.contains("dmsetup table dm-0"), "{}", words.fix);
    assert!(
        words
            .explanation
            .contains("Every split point is a multiple of 128 sectors (64 KiB)"),
        "{}",
        words.explanation
    );
    assert!(!words.fix.contains("above dm-0"), "{}", words.fix);
}

/// A few split writes among many do not hide reads that were all split.
#[test]
fn the_split_finding_names_the_op_that_was_split_enough() {
    let mut engine = engine();
    max_sectors_splits(&mut engine, 20);
    let read = |event: BlockEvent| BlockEvent {
        rwbs: rwbs("R"),
        ..event
    };
    // 200 unsplit writes, so 20 split writes would be 9%...
    for index in 0..200 {
        let (ts, sector) = (30 * MS + index * 1000, 20_000 + index * 8);
        feed(
            &mut engine,
            &[
                queue(ts, LOOP0, sector, 8),
                issue(ts, LOOP0, sector, 8),
                complete(ts, LOOP0, sector, 8),
            ],
        );
    }
    // ...while 18 reads are all split.
    for index in 0..18 {
        let base = 30_000 + index * 512;
        let ts = 60 * MS + index * MS;
        feed(
            &mut engine,
            &[
                read(queue(ts, LOOP0, base, 512)),
                read(split(ts, LOOP0, base, base + 256)),
                read(issue(ts, LOOP0, base, 256)),
                read(issue(ts, LOOP0, base + 256, 256)),
                read(complete(ts, LOOP0, base, 256)),
                read(complete(ts, LOOP0, base + 256, 256)),
            ],
        );
    }
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.op, Op::Read);
    assert_eq!((split.split_user_ios, split.user_ios), (18, 18));
}

/// md raid0 with 64 KiB chunks: `writes` writes of `sectors` each, every
/// one `offset` sectors into a chunk and apart from the others, cut at each
/// chunk boundary; each piece is md1's command.
fn raid0_writes(writes: u64, sectors: u64, offset: u64) -> Engine {
    let md = DevId::new(9, 1);
    let raid0 = DiskGeometry {
        name: "md1".into(),
        dev: Some(md),
        logical_block_size: 512,
        physical_block_size: 4096,
        max_sectors_kb: 64,
        max_hw_sectors_kb: 64,
        chunk_sectors: 128,
        request_based: false,
        ..DiskGeometry::default()
    };
    let mut engine = Engine::new(vec![loop0(), raid0], EngineLimits::default());
    for index in 0..writes {
        let base = index * 4096 + offset;
        let ts = MS * (index + 1);
        let mut events = vec![queue(ts, md, base, sectors as u32)];
        let mut start = base;
        let end = base + sectors;
        while (start / 128 + 1) * 128 < end {
            let cut = (start / 128 + 1) * 128;
            events.push(split(ts, md, start, cut));
            events.push(bio_complete(ts + MS / 2, md, start, (cut - start) as u32));
            start = cut;
        }
        events.push(bio_complete(ts + MS / 2, md, start, (end - start) as u32));
        feed(&mut engine, &events);
    }
    engine
}

/// 1 MiB writes on chunk boundaries become one command per chunk: the
/// stripe working, not amplification to fix (the `stacks` VM scenario's
/// md1 and dm-striped were called critical before).
#[test]
fn chunk_cuts_of_aligned_io_larger_than_a_chunk_are_striping_by_design() {
    let engine = raid0_writes(20, 2048, 0);
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cause, split.commands),
        (SplitCause::ChunkBoundary, 320)
    );
    assert_eq!(split.cost, SplitCost::ByDesign);
    assert_eq!(finding.severity, Severity::Info);
    assert!(split.what_if.is_none(), "{:?}", split.what_if);
    let words = crate::explain::words(&finding);
    assert!(
        words.explanation.contains("striping"),
        "{}",
        words.explanation
    );
}

/// 64 KiB writes starting half a chunk in are each cut once: aligned, each
/// would be one command, and the what-if says so.
#[test]
fn chunk_cuts_of_io_that_straddles_a_chunk_are_priced_to_the_aligned_minimum() {
    let engine = raid0_writes(20, 128, 64);
    let finding = finding_of(&engine, Code::SplitAmplification);
    let Evidence::SplitAmplification(split) = &finding.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        (split.cause, split.commands),
        (SplitCause::ChunkBoundary, 40)
    );
    assert_eq!(split.cost, SplitCost::ExtraCommands);
    assert_ne!(finding.severity, Severity::Info);
    let what_if = split.what_if.as_ref().expect("a what-if");
    assert_eq!((what_if.commands_now, what_if.commands_after_fix), (40, 20));
}
