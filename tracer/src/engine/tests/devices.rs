//! Disks that change, go and come back keep their measures; a loss leaves its chains incomplete.

use super::*;

#[test]
fn geometry_refresh_keeps_measures() {
    let mut engine = engine();
    mixed_workload(&mut engine);
    let before = part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios;
    let mut refreshed = loop0();
    refreshed.max_sectors_kb = 1024;
    engine.set_disks(vec![refreshed]);
    assert_eq!(
        part_op(&engine, "loop0", "loop0p1", Op::Write).user_ios,
        before
    );
    let reports = engine.devices();
    assert_eq!(device(&reports, "loop0").geometry.max_sectors_kb, 1024);
    assert_eq!(
        reports
            .iter()
            .filter(|report| report.name == "loop0")
            .count(),
        1
    );
}

#[test]
fn a_disk_missing_from_a_refresh_is_gone_and_keeps_its_measures() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            remap(MS, LOOP0, 2048, 8, P1, 0),
            queue(MS, LOOP0, 2048, 8),
            issue(2 * MS, LOOP0, 2048, 8),
            complete(3 * MS, LOOP0, 2048, 8),
        ],
    );
    // loop0 detached: only zram and dm are left.
    engine.refresh_disks(vec![zram(), dm()]);
    let devices = engine.devices();
    let gone = device(&devices, "loop0");
    assert!(gone.gone);
    assert!(gone.partitions.iter().all(|part| part.gone));
    assert!(!device(&devices, "zram0").gone);
    let writes = gone.partitions[0].measures.op(Op::Write).unwrap();
    assert_eq!((writes.user_ios, writes.commands), (1, 1));

    // Attached again under the same number, without its second partition.
    let mut back = loop0();
    back.partitions.truncate(1);
    engine.refresh_disks(vec![back, zram(), dm()]);
    let devices = engine.devices();
    let again = device(&devices, "loop0");
    assert!(!again.gone);
    assert!(!again.partitions[0].gone);
    assert!(again.partitions[1].gone, "loop0p2 was deleted");
}

#[test]
fn a_disk_never_in_sysfs_is_not_called_gone() {
    let mut engine = engine();
    let stray = DevId::new(8, 0);
    feed(&mut engine, &[queue(MS, stray, 0, 8)]);
    engine.refresh_disks(vec![loop0(), zram(), dm()]);
    let devices = engine.devices();
    assert!(!device(&devices, "8:0").gone);
}

#[test]
fn chains_in_flight_at_a_loss_are_incomplete_and_feed_no_histogram() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[queue(MS, LOOP0, 0, 8), issue(2 * MS, LOOP0, 0, 8)],
    );
    // The ring overflowed here: this chain may have lost an event.
    engine.events_lost();
    feed(
        &mut engine,
        &[
            complete(3 * MS, LOOP0, 0, 8),
            // A chain that starts after the loss is whole.
            queue(4 * MS, LOOP0, 64, 8),
            issue(5 * MS, LOOP0, 64, 8),
            complete(6 * MS, LOOP0, 64, 8),
        ],
    );
    assert_eq!(engine.correlation().incomplete, 1);
    assert_eq!(engine.correlation().in_flight, 0);
    let devices = engine.devices();
    let writes = device(&devices, "loop0").measures.op(Op::Write).unwrap();
    assert_eq!(writes.user_ios, 2);
    assert_eq!(writes.commands, 2);
    assert_eq!(writes.commands_per_io.count, 1);
    assert_eq!(writes.queue_to_complete_us.count, 1);
    assert_eq!(
        writes.issue_to_complete_us.count, 1,
        "the lost command's latency is not recorded"
    );
}
