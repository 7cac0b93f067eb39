//! Commands named by their request (hctx, tag): a reused tag retires only a command it lost.

use super::*;

#[test]
fn a_chain_in_flight_when_the_ring_dropped_events_is_blamed_on_the_ring() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), named(issue(2 * MS, LOOP0, 0, 8), 5)],
    );
    // The ring was full: its completion may be among the dropped events.
    engine.events_lost();
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 5),
        ],
    );
    let correlation = engine.correlation();
    assert_eq!(correlation.ring_dropped, 1, "{correlation:?}");
    assert_eq!(correlation.completion_lost, 0, "{correlation:?}");
    assert_eq!(correlation.in_flight, 0, "{correlation:?}");
}

#[test]
fn a_request_issued_again_retires_the_command_whose_completion_never_came() {
    let mut engine = engine();
    // Pass 1 at sector 0: issued as request 5; the kernel reports no completion.
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), named(issue(2 * MS, LOOP0, 0, 8), 5)],
    );
    // Pass 2 at the same sector, on the same request: pass 1's command is gone.
    feed(
        &mut engine,
        &[
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 5),
            named(complete(5 * MS, LOOP0, 0, 8), 5),
        ],
    );
    let correlation = engine.correlation();
    assert_eq!(correlation.completion_lost, 1);
    assert_eq!(correlation.incomplete, 1);
    assert_eq!(correlation.in_flight, 0, "{correlation:?}");
    // Pass 2's latency is its own 1 ms, not pass 1's 3 ms.
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(writes.issue_to_complete_us.max, 1000);
    assert_eq!(writes.commands, 2);
}

#[test]
fn a_completion_naming_its_request_skips_older_commands_at_the_same_sector() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            queue(3 * MS, LOOP0, 0, 8),
            named(issue(4 * MS, LOOP0, 0, 8), 6),
            // The second completes first; by sector alone it would take the first.
            named(complete(5 * MS, LOOP0, 0, 8), 6),
        ],
    );
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(writes.issue_to_complete_us.max, 1000);
    engine.ingest(&named(complete(9 * MS, LOOP0, 0, 8), 5));
    let writes = disk_op(&engine, "loop0", Op::Write);
    assert_near(writes.issue_to_complete_us.max, 7000);
    assert_clean(&engine);
}

#[test]
fn a_flush_borrowing_a_busy_tag_retires_nothing() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            named(issue(2 * MS, LOOP0, 0, 8), 5),
            named(issue(3 * MS, LOOP0, 0, 0), 5),
            named(complete(4 * MS, LOOP0, 0, 8), 5),
        ],
    );
    assert_clean(&engine);
}

#[test]
fn a_passthrough_command_counts_as_a_command_of_its_range_and_nothing_unmatched() {
    let mut engine = engine();
    let passthrough = |event: BlockEvent| BlockEvent {
        flags: tracer_common::event_flags::PASSTHROUGH,
        ..event
    };
    feed(
        &mut engine,
        &[
            passthrough(named(issue(MS, LOOP0, 2048, 8), 3)),
            passthrough(named(complete(2 * MS, LOOP0, 2048, 8), 3)),
        ],
    );
    let correlation = engine.correlation();
    assert_eq!(correlation.unmatched_events, 0, "{correlation:?}");
    assert_eq!(correlation.in_flight, 0, "{correlation:?}");
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.commands, write.commands_without_user_io), (1, 1));
    let device = engine
        .devices()
        .into_iter()
        .find(|d| d.name == "loop0")
        .unwrap();
    assert_eq!(device.passthrough.len(), 1);
    assert_eq!(
        (
            device.passthrough[0].op.as_str(),
            device.passthrough[0].first_sector
        ),
        ("write", 2048)
    );
    // The same issue without its NVMe command is unmatched, as before.
    let mut plain = super::engine();
    feed(&mut plain, &[named(issue(MS, LOOP0, 2048, 8), 3)]);
    assert_eq!(plain.correlation().unmatched_events, 1);
}
