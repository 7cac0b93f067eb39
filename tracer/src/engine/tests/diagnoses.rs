//! Live checks: raised on the traffic that shows them, quiet otherwise, with fix and evidence.

use super::*;
use crate::model::{
    Evidence, LiveEvidence, MergeFix, MergeLimits, MisalignedStartEvidence, PartitionPlace,
    RequeueFix, Severity, SplitCost, SplitFix, SubpageBlockSizeEvidence, SubpageFix, SubpageSeen,
};

#[test]
fn quiet_aligned_device_has_no_diagnoses() {
    let mut engine = engine();
    for index in 0..64u64 {
        let base = 2048 + index * 256;
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                remap(ts, LOOP0, base, 256, P1, base - 2048),
                queue(ts, LOOP0, base, 256),
                issue(ts, LOOP0, base, 256),
                complete(ts + MS / 2, LOOP0, base, 256),
            ],
        );
    }
    assert_clean(&engine);
    // loop0p2 is misaligned and odd-sized by construction (the audit says so);
    // the traffic went to the aligned loop0p1, which must stay quiet.
    let on_p1: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.device != "loop0p2")
        .collect();
    assert_eq!(on_p1, Vec::new());
}

#[test]
fn synchronous_sequential_writes_are_not_merge_blocked() {
    let mut engine = engine();
    // Queue depth one: each bio is queued after the previous command completed.
    for index in 0..64u64 {
        let ts = MS * (index + 1);
        feed(
            &mut engine,
            &[
                queue(ts, LOOP0, 4096 + index * 8, 8),
                issue(ts + 10, LOOP0, 4096 + index * 8, 8),
                complete(ts + 500, LOOP0, 4096 + index * 8, 8),
            ],
        );
    }
    assert_clean(&engine);
    let live: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.code == Code::MergeBlocked || d.code == Code::SplitAmplification)
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

#[test]
fn merges_that_would_exceed_max_segments_are_not_missed_merges() {
    let mut geometry = loop0();
    geometry.max_segments = 8;
    geometry.max_sectors_kb = 1024;
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    // 160 one-sector bios, merged 8 per command (one segment each at least):
    // the kernel merged all that max_segments allows.
    for index in 0..160u64 {
        engine.ingest(&queue(MS, LOOP0, index, 1));
        if index % 8 != 0 {
            engine.ingest(&backmerge(MS, LOOP0, index, 1));
        }
    }
    for command in 0..20u64 {
        let ts = 2 * MS + command * 1000;
        feed(
            &mut engine,
            &[
                issue(ts, LOOP0, command * 8, 8),
                complete(ts + 100, LOOP0, command * 8, 8),
            ],
        );
    }
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.user_ios, write.commands), (160, 20));
    let blocked: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.code == Code::MergeBlocked)
        .collect();
    assert!(blocked.is_empty(), "{blocked:?}");
}

#[test]
fn page_sized_dirty_buffers_raise_nothing() {
    let mut engine = engine();
    for index in 0..100 {
        let buffer = BlockEvent {
            aux_sector: 4096,
            ..event(EventKind::DirtyBuffer, MS, P1, index, 0)
        };
        engine.ingest(&buffer);
    }
    let on_p1: Vec<_> = engine
        .diagnoses()
        .into_iter()
        .filter(|d| d.device == "loop0p1")
        .collect();
    assert!(on_p1.is_empty(), "{on_p1:?}");
}

/// Each check decides its fix in the engine, as a value the fix text and
/// the what-if both read (the words are `explain`'s, tested there).
#[test]
fn each_check_decides_its_fix() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 20);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    // loop0p2 starts at 10241: the next 1 MiB boundary.
    assert_eq!(split.fix, SplitFix::MovePartitionStart { start: 12288 });
    assert_eq!(
        (split.op, split.cost),
        (Op::Write, SplitCost::ExtraCommands)
    );

    let mut engine = self::engine();
    max_sectors_splits(&mut engine, 20);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(split.fix, SplitFix::RaiseMaxSectorsKb { to_kb: 256 });

    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 1);
    let Evidence::SplitAmplification(split) =
        finding_of(&engine, Code::SplitAmplification).evidence
    else {
        panic!("not a split");
    };
    assert_eq!(
        (split.fix, split.cost),
        (SplitFix::FewerSegments, SplitCost::LargePieces)
    );

    for (geometry, fix) in [
        (
            DiskGeometry {
                nomerges: 2,
                ..loop0()
            },
            MergeFix::AllowMerging,
        ),
        (
            DiskGeometry {
                virt_boundary_mask: 4095,
                ..loop0()
            },
            MergeFix::PageAlignedBios,
        ),
        (loop0(), MergeFix::UseMqDeadline),
        (
            DiskGeometry {
                scheduler: "mq-deadline".into(),
                ..loop0()
            },
            MergeFix::CheckFlags,
        ),
    ] {
        let mut engine = Engine::new(vec![geometry], EngineLimits::default());
        unmerged_small_writes(&mut engine, 32);
        let Evidence::MergeBlocked(merge) = finding_of(&engine, Code::MergeBlocked).evidence else {
            panic!("not merge_blocked");
        };
        assert_eq!(merge.fix, fix);
        assert_eq!((merge.op, merge.bios), (Op::Write, 32));
    }

    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let Evidence::RequeuedCommands(requeued) = finding_of(&engine, Code::RequeuedCommands).evidence
    else {
        panic!("not requeued_commands");
    };
    // 128 tags, twice as many descriptors; two commands of 126 pages fit.
    assert_eq!(
        requeued.fix,
        RequeueFix::IndirectDescriptors {
            ring_descriptors: 256,
            io_pages: 126
        }
    );
    let geometry = DiskGeometry {
        virtio_indirect_desc: Some(true),
        ..virtio_vda()
    };
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let Evidence::RequeuedCommands(requeued) = finding_of(&engine, Code::RequeuedCommands).evidence
    else {
        panic!("not requeued_commands");
    };
    assert_eq!(
        requeued.fix,
        RequeueFix::LowerNrRequests { nr_requests: 64 }
    );

    let mut engine = self::engine();
    for index in 0..1000 {
        let buffer = BlockEvent {
            aux_sector: 1024,
            ..event(EventKind::DirtyBuffer, MS, P1, index, 0)
        };
        engine.ingest(&buffer);
    }
    let subpage = engine
        .diagnoses()
        .into_iter()
        .find(|finding| finding.code == Code::SubpageBlockSize && finding.device == "loop0p1")
        .expect("subpage_block_size on loop0p1");
    let Evidence::SubpageBlockSize(subpage) = subpage.evidence else {
        panic!("not subpage_block_size");
    };
    assert_eq!(subpage.fix, SubpageFix::FilesystemBlocks);
    assert_eq!(
        subpage.seen,
        SubpageSeen::ChosenBlocks {
            buffers: 1000,
            total: 1000,
            size: 8192
        }
    );
}

#[test]
fn audit_findings_get_live_evidence() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 20);
    for index in 0..5 {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let audit = |disk: &DiskGeometry| -> Vec<Finding> {
        if disk.name != "loop0" {
            return Vec::new();
        }
        ["loop0p2", "loop0p1"]
            .iter()
            .map(|name| {
                let evidence = MisalignedStartEvidence::past_a_4k_block(PartitionPlace {
                    partition_start: 10241,
                    partition_size: 20001,
                });
                Finding::new(
                    name.to_string(),
                    disk.name.clone(),
                    Severity::Warning,
                    Evidence::MisalignedStart(evidence),
                )
            })
            .collect()
    };
    let diagnoses = diagnose::diagnose_with(&engine.devices, &engine.accounting, audit);
    let p2 = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MisalignedStart && diagnosis.device == "loop0p2")
        .unwrap();
    assert_eq!(
        p2.evidence.to_map()["partition_start"],
        10241,
        "static evidence kept"
    );
    assert_eq!(p2.evidence.to_map()["observed_user_ios"], 20);
    assert_eq!(p2.evidence.to_map()["observed_bio_size_p50"], 256 * 512);
    assert_eq!(p2.evidence.to_map()["extra_split_fragments"], 20);
    // The words name the mechanism only with the splits this trace showed.
    let said = crate::explain::words(p2).explanation;
    assert!(said.contains("split I/Os here 20 times"), "{said}");

    assert_eq!(p2.evidence.to_map()["misaligned_command_share"], 1.0);
    assert_eq!(p2.evidence.to_map()["bios_per_command"], 0.5);
    assert_eq!(p2.evidence.to_map()["dirty_buffers"], 5);
    assert_eq!(p2.evidence.to_map()["dirty_buffer_sizes"]["512"], 5);
    // No traffic on p1: its finding is left as the audit made it.
    let p1 = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MisalignedStart && diagnosis.device == "loop0p1")
        .unwrap();
    // Without traffic, the rule is said as the kernel's, not as seen.
    let said = crate::explain::words(p1).explanation;
    assert!(
        said.contains("Where an I/O exceeds max_sectors_kb"),
        "{said}"
    );
    let Evidence::MisalignedStart(p1) = &p1.evidence else {
        panic!("{p1:?}");
    };
    assert_eq!(p1.live, LiveEvidence::default());
}

#[test]
fn audited_subpage_is_not_repeated_from_live_evidence() {
    let mut engine = engine();
    for index in 0..10 {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let audit = |disk: &DiskGeometry| -> Vec<Finding> {
        if disk.name != "loop0" {
            return Vec::new();
        }
        let evidence = SubpageBlockSizeEvidence {
            block_size: 512,
            block_size_source: None,
            current_block_size: None,
            size_mod_8: None,
            partition: None,
            fix: SubpageFix::Partition(None),
            live: LiveEvidence::default(),
            what_if: None,
            seen: SubpageSeen::Geometry {
                predicted_block_size: 512,
                merging: MergeLimits::default(),
            },
        };
        vec![Finding::new(
            "loop0p2".into(),
            "loop0".into(),
            Severity::Warning,
            Evidence::SubpageBlockSize(evidence),
        )]
    };
    let diagnoses = diagnose::diagnose_with(&engine.devices, &engine.accounting, audit);
    assert_eq!(diagnoses.len(), 1);
    let Evidence::SubpageBlockSize(evidence) = &diagnoses[0].evidence else {
        panic!("{diagnoses:?}");
    };
    assert_eq!(
        (evidence.seen, evidence.fix),
        (
            SubpageSeen::Geometry {
                predicted_block_size: 512,
                merging: MergeLimits::default(),
            },
            SubpageFix::Partition(None)
        ),
        "the audit's finding, not one made again from the dirty buffers"
    );
    assert_eq!(diagnoses[0].evidence.to_map()["dirty_buffers"], 10);
}

#[test]
fn uniform_subpage_writes_on_an_unknown_partition_raise_subpage_info() {
    let mut engine = engine();
    let unknown_part = DevId::new(259, 9);
    for index in 0..100u64 {
        let sector = 30000 + index * 2;
        feed(
            &mut engine,
            &[
                remap(MS, LOOP0, sector, 2, unknown_part, index * 2),
                queue(MS, LOOP0, sector, 2),
            ],
        );
    }
    let diagnoses = engine.diagnoses();
    // loop0p2's own finding comes from the audit; this one from the bios alone.
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SubpageBlockSize && diagnosis.device == "259:9")
        .unwrap_or_else(|| panic!("{diagnoses:?}"));
    assert_eq!(found.severity, Severity::Info);
    assert_eq!(found.evidence.to_map()["block_size"], 1024);
    // A known partition's geometry belongs to the audit: nothing from bios alone.
    let mut engine = self::engine();
    for index in 0..100u64 {
        let sector = 2048 + index * 2;
        feed(
            &mut engine,
            &[
                remap(MS, LOOP0, sector, 2, P1, index * 2),
                queue(MS, LOOP0, sector, 2),
            ],
        );
    }
    assert!(
        engine
            .diagnoses()
            .iter()
            .all(|diagnosis| diagnosis.code != Code::SubpageBlockSize
                || diagnosis.device != "loop0p1")
    );
}

#[test]
fn pieces_of_one_split_are_never_missed_merges() {
    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 1);
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!((write.user_ios, write.splits, write.commands), (32, 32, 64));
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::MergeBlocked), "{codes:?}");
}

#[test]
fn a_piece_cut_at_the_segment_limit_takes_no_merge_from_its_neighbour() {
    // Four writes in flight: each tail is followed by the next write's full
    // front piece, queued before the tail was issued, but 16 sectors more
    // would not fit its 254 segments.
    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 4);
    assert_clean(&engine);
    assert_eq!(disk_op(&engine, "loop0", Op::Write).commands, 64);
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::MergeBlocked), "{codes:?}");
}

#[test]
fn a_few_requeues_raise_nothing() {
    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 8, 2000);
    split_megabyte_writes(&mut engine, 32, 1);
    let codes: Vec<_> = engine.diagnoses().iter().map(|d| d.code).collect();
    assert!(!codes.contains(&Code::RequeuedCommands), "{codes:?}");
}

/// A partition with 512-byte blocks on a disk with `nomerges` set: two
/// causes, each with its fix. The setting's fix (a sysfs write) is found
/// and listed before the repartition at the same severity, with its own
/// what-if (issue #48: the seed's odd partition with nomerges=2 was told
/// only to shrink the partition).
#[test]
fn a_setting_that_forbids_merges_is_found_beside_small_blocks_and_listed_first() {
    let mut geometry = loop0();
    geometry.nomerges = 2;
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    for index in 0..64u64 {
        feed(
            &mut engine,
            &[
                remap(MS, LOOP0, 10241 + index, 1, P2, index),
                queue(MS, LOOP0, 10241 + index, 1),
            ],
        );
    }
    for index in 0..64u64 {
        let at = 2 * MS + index * 1000;
        feed(
            &mut engine,
            &[
                issue(at, LOOP0, 10241 + index, 1),
                complete(at + 500, LOOP0, 10241 + index, 1),
            ],
        );
    }
    let diagnoses = engine.diagnoses();
    let on_p2: Vec<_> = diagnoses
        .iter()
        .filter(|d| d.device == "loop0p2")
        .map(|d| (d.code, d.severity))
        .collect();
    let merge = diagnoses
        .iter()
        .position(|d| d.code == Code::MergeBlocked && d.device == "loop0p2")
        .unwrap_or_else(|| panic!("no merge_blocked: {on_p2:?}"));
    let Evidence::MergeBlocked(evidence) = &diagnoses[merge].evidence else {
        panic!("{:?}", diagnoses[merge]);
    };
    assert_eq!(evidence.fix, MergeFix::AllowMerging);
    assert!(evidence.what_if.is_some(), "{evidence:?}");
    for code in [Code::SubpageBlockSize, Code::MisalignedStart] {
        let at = diagnoses
            .iter()
            .position(|d| d.code == code && d.device == "loop0p2")
            .unwrap_or_else(|| panic!("no {code:?}: {on_p2:?}"));
        // Both critical here (every command was one 512-byte bio).
        if code == Code::SubpageBlockSize {
            assert_eq!(
                diagnoses[at].severity, diagnoses[merge].severity,
                "{on_p2:?}"
            );
        }
        if diagnoses[at].severity == diagnoses[merge].severity {
            assert!(merge < at, "the sysfs fix after {code:?}: {on_p2:?}");
        }
    }
}
