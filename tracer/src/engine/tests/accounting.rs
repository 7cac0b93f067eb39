//! Each event is counted once, where it landed: totals match the events and the outcomes.

use super::*;
use crate::model::SplitCause;

#[test]
fn rwbs_operation_classes() {
    assert_eq!(op_from_rwbs(b"W\0\0\0\0\0\0\0"), Op::Write);
    assert_eq!(op_from_rwbs(b"WS"), Op::Write);
    assert_eq!(op_from_rwbs(b"FWS"), Op::Write);
    assert_eq!(op_from_rwbs(b"FWFS"), Op::Write);
    assert_eq!(op_from_rwbs(b"R"), Op::Read);
    assert_eq!(op_from_rwbs(b"RA"), Op::Read);
    assert_eq!(op_from_rwbs(b"FR"), Op::Read);
    assert_eq!(op_from_rwbs(b"D"), Op::Discard);
    assert_eq!(op_from_rwbs(b"DE"), Op::Discard);
    assert_eq!(op_from_rwbs(b"F"), Op::Flush);
    assert_eq!(op_from_rwbs(b"FN"), Op::Flush);
    assert_eq!(op_from_rwbs(b"FF"), Op::Flush);
    assert_eq!(op_from_rwbs(b"N"), Op::Other);
    assert_eq!(op_from_rwbs(b""), Op::Other);
    assert_eq!(op_from_rwbs(b"\0\0"), Op::Other);
}

#[test]
fn flushes_are_counted_not_correlated() {
    let mut engine = engine();
    let mut flush_bio = queue(MS, LOOP0, 0, 0);
    flush_bio.rwbs = rwbs("FWS");
    let mut flush_rq = issue(MS, LOOP0, 0, 0);
    flush_rq.rwbs = rwbs("FF");
    let mut flush_done = complete(2 * MS, LOOP0, 0, 0);
    flush_done.rwbs = rwbs("FF");
    feed(&mut engine, &[flush_bio, flush_rq, flush_done]);
    assert_clean(&engine);
    let flush = disk_op(&engine, "loop0", Op::Flush);
    assert_eq!(flush.user_ios, 1);
    assert_eq!(flush.commands, 1);
    assert!(engine.devices()[0].measures.op(Op::Write).is_none());
}

#[test]
fn events_without_a_chain_are_counted_where_they_landed() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            // Queued before tracing began: split, merge and completion match nothing.
            split(MS, LOOP0, 10241, 10496),
            backmerge(MS, LOOP0, 10496, 8),
            bio_complete(MS, ZRAM, 0, 8),
        ],
    );
    let stats = engine.correlation();
    assert_eq!(stats.unmatched_events, 3);
    assert_eq!(stats.in_flight, 0);
    // Attributed by sector to loop0p2, by rwbs to writes.
    let p2 = part_op(&engine, "loop0", "loop0p2", Op::Write);
    assert_eq!(p2.splits, 1);
    assert_eq!(p2.merges, 1);
    assert_eq!(p2.split_causes.get(&SplitCause::PhysicalBlock), Some(&1));
    assert!(
        engine.devices()[1].measures.ops.is_empty(),
        "zram saw no I/O"
    );
}

#[test]
fn totals_agree_with_event_counts() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    assert_clean(&engine);
    let events = engine.events();
    let reports = engine.devices();
    let ops: Vec<&OpMeasures> = reports
        .iter()
        .flat_map(|report| report.measures.ops.values())
        .collect();
    let sum = |field: fn(&OpMeasures) -> u64| -> u64 { ops.iter().map(|op| field(op)).sum() };
    assert_eq!(sum(|op| op.user_ios), events[EventKind::Queue]);
    assert_eq!(sum(|op| op.splits), events[EventKind::Split]);
    assert_eq!(sum(|op| op.commands), events[EventKind::Issue]);
    assert_eq!(
        sum(|op| op.merges),
        events[EventKind::Backmerge] + events[EventKind::Frontmerge] + events[EventKind::RqMerge]
    );
    assert_eq!(
        sum(|op| op.fragments),
        events[EventKind::Queue] + events[EventKind::Split]
    );
    // Partition measures are inside the disk's.
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(p1.user_ios, 50);
    assert_eq!(p1.commands, 100);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).user_ios, 50);
    assert_eq!(disk_op(&engine, "loop0", Op::Read).commands, 50);
}

#[test]
fn reset_zeroes_counters_and_keeps_chains_in_flight() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    feed(
        &mut engine,
        &[queue(100 * MS, LOOP0, 0, 8), issue(100 * MS, LOOP0, 0, 8)],
    );
    engine.reset();
    assert_eq!(engine.events(), EventCounts::default());
    assert!(engine
        .devices()
        .iter()
        .all(|report| report.measures.ops.is_empty()));
    assert_eq!(engine.correlation().in_flight, 1);
    engine.ingest(&complete(101 * MS, LOOP0, 0, 8));
    let stats = engine.correlation();
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.unmatched_events, 0);
    // The pre-reset chain does not feed the new latency histograms.
    let reports = engine.devices();
    let write = device(&reports, "loop0").measures.op(Op::Write);
    assert!(write.is_none_or(|write| write.queue_to_complete_us.count == 0));
}

#[test]
fn kernel_dirty_totals_count_only_what_grew_and_survive_a_reset() {
    let mut engine = engine();
    let p2 = k(P2);
    let totals = |small: u64| {
        let mut counts = tracer_common::DirtyCounts::default();
        counts.by_size[0] = small;
        vec![(p2, counts)]
    };
    engine.dirty_buffer_totals(&totals(100));
    engine.dirty_buffer_totals(&totals(100));
    assert_eq!(
        engine.events()[EventKind::DirtyBuffer],
        100,
        "an unchanged total adds nothing"
    );
    let found = engine
        .diagnoses()
        .into_iter()
        .find(|d| d.code == Code::SubpageBlockSize)
        .expect("subpage_block_size");
    assert_eq!(found.evidence.to_map()["dirty_buffers"], 100);
    engine.reset();
    engine.dirty_buffer_totals(&totals(130));
    assert_eq!(
        engine.events()[EventKind::DirtyBuffer],
        30,
        "after a reset only the growth counts"
    );
}

/// A deterministic xorshift generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn garbage(rng: &mut Rng, ts: &mut u64) -> BlockEvent {
    let devs = [LOOP0, P1, P2, ZRAM, DM, DevId::new(8, 0), DevId::new(0, 0)];
    let rwbs_set = ["W", "R", "FWS", "D", "F", "N", "", "FN", "RA"];
    *ts = match rng.below(100) {
        0 => rng.next(),
        1 => ts.saturating_sub(rng.below(MS)),
        _ => ts.saturating_add(rng.below(MS)),
    };
    let sector = if rng.below(10) == 0 {
        rng.next()
    } else {
        rng.below(64) * 8 + rng.below(3)
    };
    BlockEvent {
        ts_ns: *ts,
        sector,
        aux_sector: if rng.below(2) == 0 {
            sector + rng.below(300)
        } else {
            rng.next()
        },
        dev: k(devs[rng.below(devs.len() as u64) as usize]),
        aux_dev: k(devs[rng.below(devs.len() as u64) as usize]),
        nr_sector: match rng.below(10) {
            0 => rng.next() as u32,
            1 => 0,
            _ => rng.below(300) as u32,
        },
        tgid: rng.below(4) as u32,
        rwbs: rwbs(rwbs_set[rng.below(rwbs_set.len() as u64) as usize]),
        kind: rng.below(EventKind::COUNT as u64 + 3) as u8,
        flags: 0,
        segments: rng.below(300) as u16,
        error: rng.next() as i32,
        // Many owners, so attribution's tables fill and fold.
        owner: tracer_common::Owner {
            comm: [b'a' + rng.below(26) as u8; tracer_common::COMM_BYTES],
            cgroup: rng.below(600),
            ino: rng.below(600),
            file_dev: rng.below(3) as u32,
            flags: rng.next() as u32,
        },
    }
}

#[test]
fn garbage_events_never_panic() {
    for (seed, limits) in [
        (1, EngineLimits::default()),
        (
            2,
            EngineLimits {
                max_in_flight: 8,
                max_age_ns: 5 * MS,
            },
        ),
        (
            3,
            EngineLimits {
                max_in_flight: 0,
                max_age_ns: 0,
            },
        ),
    ] {
        let mut engine = Engine::new(vec![loop0(), zram(), dm()], limits);
        engine.track_processes([1, 3]);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut ts = 0;
        let mut queues = 0;
        let mut splits = 0;
        let mut inferred_at_reset = 0;
        for round in 0..100_000 {
            let event = garbage(&mut rng, &mut ts);
            queues += u64::from(event.kind == EventKind::Queue as u8);
            splits += u64::from(event.kind == EventKind::Split as u8);
            engine.ingest(&event);
            if round % 25_000 == 0 {
                let _ = engine.devices();
                let _ = engine.diagnoses();
            }
            if round == 60_000 {
                engine.reset();
                queues = 0;
                splits = 0;
                inferred_at_reset = engine.correlation().queues_from_remaps;
            }
        }
        let reports = engine.devices();
        let _ = engine.diagnoses();
        let _ = engine.origins();
        let _ = serde_json::to_string(&reports).unwrap();
        let sum = |field: fn(&OpMeasures) -> u64| -> u64 {
            reports
                .iter()
                .flat_map(|report| report.measures.ops.values())
                .map(field)
                .sum()
        };
        // Every queue and split is counted somewhere, whatever the chain,
        // and so is every queue read off a remap.
        let inferred = engine.correlation().queues_from_remaps - inferred_at_reset;
        assert_eq!(sum(|op| op.user_ios), queues + inferred);
        assert_eq!(sum(|op| op.splits), splits);
        assert_eq!(engine.events()[EventKind::Queue], queues);
        let stats = engine.correlation();
        assert!(stats.in_flight <= limits.max_in_flight.max(1) as u64);
    }
}

/// The accounting counts outcomes and nothing else: on any event stream,
/// the devices' counts are the outcomes' counts, so a view that reads the
/// outcomes can never count other than the report.
#[test]
fn the_report_counts_exactly_what_the_outcomes_say() {
    use super::outcome::Outcome;
    let mut engine = Engine::new(vec![loop0(), zram(), dm()], EngineLimits::default());
    engine.keep_outcomes();
    let mut rng = Rng(0x005e_ed0f_0c0e);
    let mut ts = 0;
    let (mut queued, mut split, mut merged, mut issued) = (0u64, 0u64, 0u64, 0u64);
    let (mut requeued, mut failed, mut reached) = (0u64, 0u64, 0u64);
    for _ in 0..50_000 {
        engine.ingest(&garbage(&mut rng, &mut ts));
        for outcome in engine.drain_outcomes() {
            match outcome {
                Outcome::Queued { .. } => queued += 1,
                Outcome::Split { .. } => split += 1,
                Outcome::Merged { .. } => merged += 1,
                Outcome::Issued { .. } => issued += 1,
                Outcome::Requeued { .. } => requeued += 1,
                Outcome::Failed { .. } => failed += 1,
                Outcome::ReachedDisk { .. } => reached += 1,
                _ => {}
            }
        }
    }
    let mut counted = [0u64; 7];
    for report in engine.devices() {
        for measures in report.measures.ops.values() {
            counted[0] += measures.user_ios;
            counted[1] += measures.splits;
            counted[2] += measures.merges;
            counted[3] += measures.commands;
            counted[4] += measures.requeues;
            counted[5] += measures.failed_commands;
            counted[6] += measures.disk_commands;
        }
    }
    let told = [queued, split, merged, issued, requeued, failed, reached];
    // Random events rarely make a stack; the stacked tests count those.
    assert!(
        told[..6].iter().all(|&count| count > 0),
        "every kind seen: {told:?}"
    );
    assert_eq!(counted, told);
}

/// Repeated mixed traffic is counted exactly and stays clean; prints the hot
/// path's throughput (measured, not asserted). For a meaningful number run it in release:
/// `cargo test --release -p iosplit-trace --lib ingest_throughput -- --nocapture`.
#[test]
fn ingest_throughput() {
    let mut engine = engine();
    // Pre-build the events so only ingestion is timed.
    let mut events = Vec::new();
    let mut probe = Engine::new(vec![loop0()], EngineLimits::default());
    let rounds = 2_000u64;
    for round in 0..rounds {
        let ts = MS * (round + 1);
        let base = 2048 + (round % 16) * 512;
        events.extend_from_slice(&[
            remap(ts, LOOP0, base, 512, P1, base - 2048),
            queue(ts, LOOP0, base, 512),
            split(ts, LOOP0, base, base + 256),
            issue(ts, LOOP0, base, 256),
            issue(ts, LOOP0, base + 256, 256),
            complete(ts + 10, LOOP0, base, 256),
            complete(ts + 10, LOOP0, base + 256, 256),
        ]);
        for index in 0..8 {
            events.push(queue(ts, LOOP0, 20000 + index, 1));
            if index > 0 {
                events.push(backmerge(ts, LOOP0, 20000 + index, 1));
            }
        }
        events.push(issue(ts, LOOP0, 20000, 8));
        events.push(complete(ts + 10, LOOP0, 20000, 8));
    }
    feed(&mut probe, &events);
    assert_clean(&probe);
    let repeats = if cfg!(debug_assertions) { 2 } else { 50 };
    let started = std::time::Instant::now();
    for repeat in 0..repeats {
        for event in &events {
            let mut event = *event;
            event.ts_ns += repeat * 10_000 * MS;
            engine.ingest(&event);
        }
    }
    let elapsed = started.elapsed();
    assert_clean(&engine);
    // Per round: one partition write split into two commands, and eight
    // one-sector writes to the disk merged into one command.
    let n = rounds * repeats;
    let events_seen = engine.events();
    assert_eq!(
        (
            events_seen[EventKind::Queue],
            events_seen[EventKind::Issue],
            events_seen[EventKind::Complete],
        ),
        (9 * n, 3 * n, 3 * n)
    );
    let disk = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(
        (disk.user_ios, disk.fragments, disk.commands),
        (9 * n, 10 * n, 3 * n)
    );
    assert_eq!((disk.splits, disk.merges), (n, 7 * n));
    assert_eq!(disk.bytes, (512 + 8) * 512 * n);
    let part = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!((part.user_ios, part.commands, part.splits), (n, 2 * n, n));
    assert_eq!(part.commands_per_io.max, 2);
    let count = events.len() as f64 * repeats as f64;
    println!(
        "{count} events in {elapsed:?}: {:.1} M events/s",
        count / elapsed.as_secs_f64() / 1e6
    );
}
