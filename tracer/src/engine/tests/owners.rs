//! Who did the I/O: tracked processes and owners, followed to their partition; nothing when off.

use super::*;

#[test]
fn origins_split_tracked_from_other_io() {
    let mut engine = engine();
    engine.track_processes([100]);
    let mut other = queue(MS, LOOP0, 64, 8);
    other.tgid = 5;
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 0, 8),
            other,
            issue(MS, LOOP0, 0, 8),
            issue(MS, LOOP0, 64, 8),
        ],
    );
    // The process tree grows.
    engine.track_processes([5]);
    engine.ingest(&queue(2 * MS, LOOP0, 128, 8));
    let origins = engine.origins();
    assert_eq!(origins.len(), 1);
    let loop0 = &origins[0];
    assert_eq!(loop0.device, "loop0");
    let tracked = loop0.tracked.op(Op::Write).unwrap();
    let other = loop0.other.op(Op::Write).unwrap();
    assert_eq!(tracked.user_ios, 2);
    assert_eq!(tracked.commands, 1);
    assert_eq!(other.user_ios, 1);
    assert_eq!(other.commands, 1);
}

fn owned(mut event: BlockEvent, tgid: u32, comm: &str, cgroup: u64, flags: u32) -> BlockEvent {
    use tracer_common::owner_flags;
    event.tgid = tgid;
    event.owner.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    event.owner.cgroup = cgroup;
    event.owner.ino = u64::from(tgid) * 10;
    event.owner.file_dev = k(P1);
    event.owner.flags = owner_flags::COMM | owner_flags::CGROUP | owner_flags::FILE | flags;
    event
}

/// Writer A (tgid 1, cgroup 5): two 4 KiB bios on p1, merged into one command.
fn writer_a_merged_on_p1() -> [BlockEvent; 7] {
    let a = |event| owned(event, 1, "writer-a", 5, 0);
    [
        remap(MS, LOOP0, 2048, 8, P1, 0),
        a(queue(MS, LOOP0, 2048, 8)),
        remap(MS, LOOP0, 2056, 8, P1, 8),
        a(queue(MS, LOOP0, 2056, 8)),
        backmerge(MS, LOOP0, 2056, 8),
        issue(3 * MS, LOOP0, 2048, 16),
        complete(4 * MS, LOOP0, 2048, 16),
    ]
}

#[test]
fn attribution_follows_each_owner_to_its_partition_with_queue_and_device_time() {
    use crate::model::{Dominant, OwnerKnown};
    let mut engine = engine();
    let b = |event| owned(event, 2, "writer-b", 6, 0);
    let kernel = |event| {
        owned(
            event,
            3,
            "kworker/u8:0",
            5,
            tracer_common::owner_flags::KERNEL_THREAD,
        )
    };
    feed(&mut engine, &writer_a_merged_on_p1());
    feed(
        &mut engine,
        &[
            // B: one 8 KiB bio on p2, split into two commands.
            remap(5 * MS, LOOP0, 12000, 16, P2, 1759),
            b(queue(5 * MS, LOOP0, 12000, 16)),
            split(5 * MS, LOOP0, 12000, 12008),
            issue(5 * MS + 100_000, LOOP0, 12000, 8),
            issue(5 * MS + 100_000, LOOP0, 12008, 8),
            complete(8 * MS, LOOP0, 12000, 8),
            complete(8 * MS, LOOP0, 12008, 8),
            // Writeback by a kernel thread, charged to A's cgroup.
            remap(9 * MS, LOOP0, 2100, 8, P1, 52),
            kernel(queue(9 * MS, LOOP0, 2100, 8)),
            issue(9 * MS, LOOP0, 2100, 8),
            complete(10 * MS, LOOP0, 2100, 8),
        ],
    );
    let report = engine.attribution(attribution::TOP_OWNERS);
    let process = |pid: u32| {
        report
            .processes
            .iter()
            .find(|entry| entry.pid == Some(pid))
            .unwrap()
    };
    let (first, second) = (process(1), process(2));
    assert_eq!(first.comm.as_deref(), Some("writer-a"));
    assert_eq!(first.device, "loop0p1");
    assert_eq!(
        (
            first.measures.user_ios,
            first.measures.commands,
            first.measures.merges
        ),
        (2, 1, 1)
    );
    assert_eq!(first.measures.bytes, 8192);
    // Queued at 1 ms, issued at 3 ms, complete at 4 ms: the queue dominates.
    // Owner histograms keep one significant digit (about 6%).
    let waited = first.measures.queue_to_issue_us.p99;
    assert!((1880..=2000).contains(&waited), "{waited}");
    assert_eq!(first.measures.issue_to_complete_us.count, 1);
    assert_eq!(first.measures.dominant, Some(Dominant::Queue));
    assert_eq!(second.device, "loop0p2");
    assert_eq!(
        (
            second.measures.user_ios,
            second.measures.commands,
            second.measures.splits
        ),
        (1, 2, 1)
    );
    assert_eq!(second.measures.amplification, 2.0);
    assert_eq!(second.measures.dominant, Some(Dominant::Device));
    assert_eq!(second.measures.commands_per_io.p99, 2);
    // The kworker is not a process here; its cgroup is A's.
    let writeback = report
        .processes
        .iter()
        .find(|entry| entry.owner == OwnerKnown::KernelThread)
        .unwrap();
    assert_eq!((writeback.pid, writeback.measures.user_ios), (None, 1));
    let cgroup = |id: u64| {
        report
            .cgroups
            .iter()
            .find(|entry| entry.cgroup_id == Some(id))
            .unwrap()
    };
    assert_eq!(cgroup(5).measures.user_ios, 3);
    assert_eq!(cgroup(5).device, "loop0p1");
    assert_eq!(cgroup(6).measures.user_ios, 1);
    assert_eq!(cgroup(6).device, "loop0p2");
    assert_eq!(report.files.len(), 3);
    assert_eq!(report.folded.processes, 0);
    // The devices get the same queue->issue, and the verdict.
    let p1 = part_op(&engine, "loop0", "loop0p1", Op::Write);
    assert_eq!(
        p1.queue_to_issue_us.count, 3,
        "A's two bios and the kworker's"
    );
    assert_eq!(p1.queue_to_issue_us.max, 2000);
    assert_eq!(p1.dominant, Some(Dominant::Queue));
    let p2 = part_op(&engine, "loop0", "loop0p2", Op::Write);
    assert_eq!(p2.queue_to_issue_us.count, 1);
    assert_eq!(p2.dominant, Some(Dominant::Device));
}

#[test]
fn without_owners_the_engine_attributes_nothing_and_measures_the_same() {
    let events = writer_a_merged_on_p1();
    let mut kept = engine();
    feed(&mut kept, &events);
    let mut off = engine();
    off.attribute_owners(false);
    feed(&mut off, &events);
    assert_eq!(kept.attribution(attribution::TOP_OWNERS).processes.len(), 1);
    let nothing = off.attribution(attribution::TOP_OWNERS);
    assert!(nothing.processes.is_empty() && nothing.cgroups.is_empty() && nothing.files.is_empty());
    assert_eq!(
        part_op(&kept, "loop0", "loop0p1", Op::Write),
        part_op(&off, "loop0", "loop0p1", Op::Write)
    );
    assert_eq!(part_op(&off, "loop0", "loop0p1", Op::Write).merges, 1);
    assert_clean(&off);
}
