//! In-flight tables stay bounded: full ones evict the oldest, idle ones shrink, steady ones reuse.

use super::*;

#[test]
fn full_table_evicts_the_oldest_chains() {
    let limits = EngineLimits {
        max_in_flight: 4,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    for index in 0..10 {
        engine.ingest(&queue(MS + index, LOOP0, index * 8, 8));
    }
    let stats = engine.correlation();
    assert_eq!(stats.evicted, 6);
    assert_eq!(stats.incomplete, 6);
    assert_eq!(stats.in_flight, 4);
    // The newest survive: issuing the last one still correlates.
    feed(
        &mut engine,
        &[issue(2 * MS, LOOP0, 72, 8), complete(3 * MS, LOOP0, 72, 8)],
    );
    assert_eq!(engine.correlation().in_flight, 3);
    assert_eq!(engine.correlation().unmatched_events, 0);
    // An evicted one no longer does.
    engine.ingest(&issue(3 * MS, LOOP0, 0, 8));
    assert_eq!(engine.correlation().unmatched_events, 1);
}

#[test]
fn full_command_table_evicts_the_oldest_command_and_its_chain() {
    let limits = EngineLimits {
        max_in_flight: 2,
        ..EngineLimits::default()
    };
    let mut engine = Engine::new(vec![loop0()], limits);
    for index in 0..3 {
        feed(
            &mut engine,
            &[
                queue(MS, LOOP0, index * 8, 8),
                issue(MS, LOOP0, index * 8, 8),
            ],
        );
    }
    let stats = engine.correlation();
    assert_eq!(stats.evicted, 1);
    assert_eq!(stats.in_flight, 2);
    engine.ingest(&complete(2 * MS, LOOP0, 0, 8));
    assert_eq!(engine.correlation().unmatched_events, 1);
}

#[test]
fn idle_tables_give_back_a_burst_and_keep_correlating() {
    let mut engine = engine();
    let burst = RESERVED_SLOTS as u64 + 4000;
    // Every bio queued before any is issued: the whole burst is in flight.
    for index in 0..burst {
        engine.ingest(&queue(MS + index, LOOP0, index * 8, 8));
    }
    let now = std::time::Instant::now();
    engine.drained(now);
    assert_eq!(
        engine.correlator.allocated()[0],
        burst as usize,
        "kept while in flight"
    );
    for index in 0..burst {
        feed(
            &mut engine,
            &[
                issue(2 * MS + index, LOOP0, index * 8, 8),
                complete(2 * MS + index + 1, LOOP0, index * 8, 8),
            ],
        );
    }
    assert_eq!(engine.correlation().in_flight, 0);
    engine.drained(now);
    assert_eq!(engine.correlator.allocated()[0], RESERVED_SLOTS);
    assert_eq!(engine.correlator.allocated()[1], RESERVED_SLOTS);
    // The next chain correlates as before.
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            issue(3 * MS + 1, LOOP0, 0, 8),
            complete(3 * MS + 2, LOOP0, 0, 8),
        ],
    );
    assert_clean(&engine);
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((writes.user_ios, writes.commands), (burst + 1, burst + 1));
}

#[test]
fn steady_state_reuses_slots() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    let warm = (
        engine.correlator.allocated()[1],
        engine.correlator.allocated()[2],
        engine.correlator.allocated()[0],
        engine.correlator.allocated()[3],
    );
    for _ in 0..20 {
        mixed_workload(&mut engine);
    }
    assert_clean(&engine);
    let after = (
        engine.correlator.allocated()[1],
        engine.correlator.allocated()[2],
        engine.correlator.allocated()[0],
        engine.correlator.allocated()[3],
    );
    assert_eq!(warm, after);
    // At most one write (2 fragments) and four reads in flight at once.
    assert!(after.0 <= 6, "{after:?}");
}
