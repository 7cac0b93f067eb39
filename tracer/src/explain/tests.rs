//! The words of real findings: the engine's scenarios (`engine::tests`) and
//! the static audit's disks (`engine::audit::tests`), worded here. The
//! engine's own tests check the numbers and the fix it decides; these check
//! what a report says about them, and that the fix text and the what-if
//! read the same proposal.

use tracer_common::{BlockEvent, EventKind};

use super::{diagnoses, exact_size, words};
use crate::engine::audit::audit_disk;
use crate::engine::audit::tests::{linear_dm, seed_disk, striped};
use crate::engine::split::SplitLimits;
use crate::engine::tests::{
    assert_clean, assert_near, backmerge, complete, disk_op, engine, event, feed, issue, loop0,
    max_sectors_splits, misaligned_writes, part_op, queue, requeued_tails, split_megabyte_writes,
    unmerged_small_writes, vda_like, virtio_vda, LOOP0, MS, P1, P2,
};
use crate::engine::what_if;
use crate::engine::{Engine, EngineLimits};
use crate::geometry::{DiskGeometry, MaxSectorsSource};
use crate::model::{Code, Diagnosis, Evidence, Op, RequeueFix, Severity, SplitCause, SplitFix};

/// The engine's diagnoses as a report carries them.
fn worded(engine: &Engine) -> Vec<Diagnosis> {
    diagnoses(engine.diagnoses())
}

fn audited(disk: &DiskGeometry) -> Vec<Diagnosis> {
    diagnoses(audit_disk(disk))
}

fn find(found: &[Diagnosis], code: Code) -> &Diagnosis {
    found
        .iter()
        .find(|diagnosis| diagnosis.code == code)
        .unwrap_or_else(|| panic!("no {code}: {found:?}"))
}

#[test]
fn the_fix_text_and_the_what_if_read_the_same_proposal() {
    // max_sectors_kb: the value the fix tells the user to set is the cap
    // the replay raised, and the JSON's proposed_max_sectors_kb.
    let mut engine = engine();
    max_sectors_splits(&mut engine, 20);
    let mut finding = engine
        .diagnoses()
        .into_iter()
        .find(|finding| finding.code == Code::SplitAmplification)
        .expect("split_amplification");
    let limits = SplitLimits::from_geometry(&loop0());
    for to_kb in [256, 1024] {
        let Evidence::SplitAmplification(evidence) = &mut finding.evidence else {
            panic!("{finding:?}");
        };
        if to_kb != 256 {
            // Another proposal: the text and the replay follow it.
            evidence.fix = SplitFix::RaiseMaxSectorsKb { to_kb };
        }
        assert_eq!(evidence.fix, SplitFix::RaiseMaxSectorsKb { to_kb });
        let raised = what_if::limits_after_split_fix(&evidence.fix, &limits).unwrap();
        assert_eq!(raised.max_sectors * 512 / 1024, to_kb);
        assert_eq!(finding.evidence.to_map()["proposed_max_sectors_kb"], to_kb);
        let fix = words(&finding).fix;
        assert!(
            fix.contains(&format!("/queue/max_sectors_kb to {to_kb} ")),
            "{fix}"
        );
    }

    // The virtio ring's guest-side workaround: the I/O size the fix names
    // is the cap the workaround's replay cut the streams at.
    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let mut finding = engine
        .diagnoses()
        .into_iter()
        .find(|finding| finding.code == Code::RequeuedCommands)
        .expect("requeued_commands");
    let limits = SplitLimits::from_geometry(&virtio_vda());
    for io_pages in [126, 64] {
        let Evidence::RequeuedCommands(evidence) = &mut finding.evidence else {
            panic!("{finding:?}");
        };
        let RequeueFix::IndirectDescriptors {
            ring_descriptors, ..
        } = evidence.fix
        else {
            panic!("{:?}", evidence.fix);
        };
        evidence.fix = RequeueFix::IndirectDescriptors {
            ring_descriptors,
            io_pages,
        };
        let smaller = what_if::limits_after_requeue_workaround(&evidence.fix, &limits).unwrap();
        assert_eq!(smaller.max_sectors, io_pages * 8);
        let fix = words(&finding).fix;
        let kib = io_pages * 4;
        assert!(
            fix.contains(&format!("at most {kib} KiB ({io_pages} pages)")),
            "{fix}"
        );
    }
}

#[test]
fn exact_sizes_use_the_largest_dividing_unit() {
    assert_eq!(exact_size(1 << 20), "1 MiB");
    assert_eq!(exact_size(3 * 65536), "192 KiB");
    assert_eq!(exact_size(3584), "3584 B");
    assert_eq!(exact_size(0), "0 B");
}

// The static audit's words (engine::audit's tests check the same findings'
// numbers and proposals).

#[test]
fn seed_layout_1_names_the_merged_cap_and_one_fix_for_both_codes() {
    let found = audited(&seed_disk(14_281_785, 41_929_649));
    let subpage = find(&found, Code::SubpageBlockSize);
    // 128 segments x 512 B: requests stop at 64 KiB.
    assert!(
        subpage.explanation.contains("= 64 KiB"),
        "{}",
        subpage.explanation
    );
    let start = find(&found, Code::MisalignedStart);
    let line = "echo 'start=14282752, size=27646896' | sfdisk -N 2 /dev/sdc";
    assert!(start.fix.contains(line), "{}", start.fix);
    assert!(
        start
            .fix
            .contains("parted /dev/sdc unit s rm 2 mkpart primary 14282752s 41929647s"),
        "{}",
        start.fix
    );
    assert_eq!(subpage.fix, start.fix, "one geometry fixes both");
}

#[test]
fn seed_layout_2_shrinks_the_partition_in_place() {
    let found = audited(&seed_disk(14_282_752, 41_929_649));
    let subpage = &found[0];
    // The start stays; only the size shrinks by 2 sectors.
    assert!(
        subpage
            .fix
            .contains("echo 'start=14282752, size=27646896' | sfdisk -N 2 /dev/sdc"),
        "{}",
        subpage.fix
    );
    assert!(
        subpage.fix.contains("resizepart 2 41929647s"),
        "{}",
        subpage.fix
    );
    assert!(subpage.fix.contains("by 2 sectors"), "{}", subpage.fix);
}

#[test]
fn sector_63_fixes_name_the_rounded_start() {
    let disk = seed_disk(63, 63 + 8 * 1000 - 1);
    let found = audited(&disk);
    assert!(
        found[0].fix.contains("start=2048, size=6008"),
        "{}",
        found[0].fix
    );
    let mut shifted = disk.clone();
    shifted.alignment_offset = 3584;
    shifted.partitions[0].start = 2048;
    let found = audited(&shifted);
    // Next start that is 7 sectors past a 1 MiB boundary.
    assert!(found[0].fix.contains("start=2055,"), "{}", found[0].fix);
}

#[test]
fn io_opt_fixes_name_the_stripe_aligned_start() {
    let found = audited(&striped(1 << 20, 0, 2056));
    assert!(found[0].fix.contains("start=4096,"), "{}", found[0].fix);
    // Three data disks of 64 KiB: lcm(2048, 384) = 6144 sectors, 3 MiB.
    let found = audited(&striped(3 * 65536, 0, 2048));
    assert!(found[0].fix.contains("start=6144,"), "{}", found[0].fix);
    assert!(found[0].fix.contains("3 MiB"), "{}", found[0].fix);
}

#[test]
fn a_partition_too_small_to_realign_still_gets_a_fix_sentence() {
    let mut disk = seed_disk(2049, 2049 + 4 - 1);
    disk.partitions[0].size = 4;
    let found = audited(&disk);
    assert!(found[0].fix.contains("too small"), "{}", found[0].fix);
}

// The engine's scenarios, worded (moved from engine/tests.rs with the prose).

#[test]
fn misaligned_partition_raises_split_amplification_by_physical_block() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 20);
    assert_clean(&engine);
    let p2 = part_op(&engine, "loop0", "loop0p2", Op::Write);
    assert_eq!(p2.splits, 20);
    assert_eq!(p2.split_causes.get(&SplitCause::PhysicalBlock), Some(&20));
    assert_eq!(p2.commands, 40);
    assert_eq!(p2.misaligned_pbs_commands, 40);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SplitAmplification)
        .expect("split_amplification");
    assert_eq!(found.device, "loop0p2");
    assert_eq!(found.severity, Severity::Critical);
    assert_eq!(found.evidence.to_map()["cause"], "physical_block");
    assert_eq!(found.evidence.to_map()["splits"], 20);
    assert_eq!(found.evidence.to_map()["user_ios"], 20);
    assert_eq!(found.evidence.to_map()["partition_start"], 10241);
    assert_eq!(found.evidence.to_map()["partition_size"], 20001);
    assert_eq!(found.evidence.to_map()["amplification"], 2.0);
    assert!(found.fix.contains("loop0p2"), "{}", found.fix);
    assert!(found.fix.contains("sector 12288"), "{}", found.fix);
    assert!(
        found.explanation.contains("20 of 20"),
        "{}",
        found.explanation
    );
}

#[test]
fn max_sectors_splits_suggest_raising_max_sectors_kb() {
    let mut engine = engine();
    max_sectors_splits(&mut engine, 20);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SplitAmplification)
        .expect("split_amplification");
    assert_eq!(found.device, "loop0");
    assert_eq!(found.evidence.to_map()["cause"], "max_sectors");
    assert_eq!(found.severity, Severity::Warning);
    // A geometry whose source was never read says nothing of it.
    assert_eq!(
        found.fix,
        "raise /sys/block/loop0/queue/max_sectors_kb to 256 (max_hw_sectors_kb is 2048, the most it takes): echo 256 > /sys/block/loop0/queue/max_sectors_kb; I/O of up to 256 KiB then goes down as one command instead of one per 128 KiB."
    );
    assert!(
        found
            .explanation
            .ends_with("Each piece is max_sectors_kb = 128 KiB, the queue's size cap."),
        "{}",
        found.explanation
    );
    // Read as no kernel default: the fix says where to look.
    let mut engine = Engine::new(
        vec![DiskGeometry {
            max_sectors_source: Some(MaxSectorsSource::UserOrUnknown),
            ..loop0()
        }],
        EngineLimits::default(),
    );
    max_sectors_splits(&mut engine, 20);
    let diagnoses = worded(&engine);
    let found = find(&diagnoses, Code::SplitAmplification);
    assert_eq!(
        found.evidence.to_map()["max_sectors_source"],
        "user_or_unknown"
    );
    assert!(
        found.fix.ends_with(" The current cap is no kernel default: if a udev rule or boot script sets it (grep -r max_sectors_kb /etc/udev/rules.d /usr/lib/udev/rules.d), change it there, or it comes back."),
        "{}",
        found.fix
    );
    assert!(
        found.explanation.contains(
            "Each piece is max_sectors_kb = 128 KiB, the queue's size cap: not a kernel default"
        ),
        "{}",
        found.explanation
    );
}

/// A cap the kernel set from the device's optimal I/O size: the finding
/// names that source, and the fix says the kernel sets it again on the next
/// probe unless a udev rule keeps the raise.
#[test]
fn a_cap_from_io_opt_is_named_and_its_raise_made_persistent() {
    let geometry = DiskGeometry {
        name: "sda".to_string(),
        optimal_io_size: 128 * 1024,
        max_sectors_source: Some(MaxSectorsSource::OptimalIoSize),
        ..loop0()
    };
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    max_sectors_splits(&mut engine, 20);
    let diagnoses = worded(&engine);
    let found = find(&diagnoses, Code::SplitAmplification);
    assert_eq!(
        found.evidence.to_map()["max_sectors_source"],
        "optimal_io_size"
    );
    assert_eq!(found.evidence.to_map()["optimal_io_size"], 131072);
    assert!(
        found.explanation.contains(
            "Each piece is max_sectors_kb = 128 KiB, the queue's size cap: the device's optimal I/O size, by sd's rule on kernels before 6.11."
        ),
        "{}",
        found.explanation
    );
    for words in [
        "echo 256 > /sys/block/sda/queue/max_sectors_kb",
        "instead of one per 128 KiB",
        "The kernel sets the cap again (the device's optimal I/O size",
        "whenever it probes sda anew",
        r#"ACTION=="add|change", SUBSYSTEM=="block", KERNEL=="sda", ATTR{queue/max_sectors_kb}="256""#,
    ] {
        assert!(found.fix.contains(words), "{words:?} not in {}", found.fix);
    }
}

#[test]
fn adjacent_unmerged_commands_raise_merge_blocked() {
    let mut geometry = loop0();
    geometry.virt_boundary_mask = 4095;
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    unmerged_small_writes(&mut engine, 32);
    assert_clean(&engine);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MergeBlocked)
        .expect("merge_blocked");
    assert_eq!(found.device, "loop0");
    assert_eq!(found.evidence.to_map()["adjacent_unmerged_commands"], 31);
    assert_eq!(found.evidence.to_map()["commands"], 32);
    assert_eq!(found.evidence.to_map()["virt_boundary_mask"], 4095);
    assert!(found.fix.contains("page-aligned"), "{}", found.fix);
    assert_eq!(found.severity, Severity::Critical);
}

#[test]
fn nomerges_is_named_as_the_fix() {
    let mut geometry = loop0();
    geometry.nomerges = 2;
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    unmerged_small_writes(&mut engine, 32);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MergeBlocked)
        .expect("merge_blocked");
    assert_eq!(found.fix, "echo 0 > /sys/block/loop0/queue/nomerges");
}

#[test]
fn subpage_dirty_buffers_raise_subpage_block_size() {
    let mut engine = engine();
    for index in 0..100 {
        let buffer = BlockEvent {
            aux_sector: 512,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|d| d.code == Code::SubpageBlockSize)
        .unwrap_or_else(|| panic!("{diagnoses:?}"));
    assert_eq!(found.device, "loop0p2");
    assert_eq!(found.evidence.to_map()["block_size"], 512);
    // The live evidence joins the audit's finding.
    assert_eq!(found.evidence.to_map()["dirty_buffers"], 100);
    assert_eq!(found.evidence.to_map()["partition_size"], 20001);
    assert!(found.fix.contains("sfdisk"), "{}", found.fix);
    assert!(
        found.explanation.contains("20001 sectors"),
        "{}",
        found.explanation
    );
}

#[test]
fn every_diagnosis_is_complete() {
    let mut engine = engine();
    misaligned_writes(&mut engine, 40);
    unmerged_small_writes(&mut engine, 40);
    for index in 0..10 {
        let buffer = BlockEvent {
            aux_sector: 1024,
            ..event(EventKind::DirtyBuffer, MS, P2, index, 0)
        };
        engine.ingest(&buffer);
    }
    let diagnoses = worded(&engine);
    let codes: Vec<Code> = diagnoses.iter().map(|diagnosis| diagnosis.code).collect();
    assert!(codes.contains(&Code::SplitAmplification), "{codes:?}");
    assert!(codes.contains(&Code::MergeBlocked), "{codes:?}");
    assert!(codes.contains(&Code::SubpageBlockSize), "{codes:?}");
    for diagnosis in &diagnoses {
        assert!(!diagnosis.device.is_empty());
        assert_eq!(diagnosis.code, diagnosis.evidence.code());
        assert!(!diagnosis.evidence.to_map().is_empty());
        assert!(
            diagnosis.explanation.len() > 40,
            "{}",
            diagnosis.explanation
        );
        assert!(diagnosis.explanation.chars().any(|c| c.is_ascii_digit()));
        assert!(!diagnosis.fix.is_empty());
    }
    // Worst first.
    assert!(diagnoses
        .windows(2)
        .all(|pair| pair[0].severity >= pair[1].severity));
}

#[test]
fn a_split_into_pieces_that_are_still_large_commands_is_info() {
    let mut engine = Engine::new(vec![vda_like()], EngineLimits::default());
    split_megabyte_writes(&mut engine, 32, 1);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SplitAmplification)
        .expect("split_amplification");
    assert_eq!(found.evidence.cause(), Some("max_segments"));
    assert_eq!(found.severity, Severity::Info);
    assert_eq!(found.evidence.to_map()["command_size_mean"], 512 * 1024);
    assert!(
        found
            .explanation
            .contains("still large commands (512 KiB on average)"),
        "{}",
        found.explanation
    );
}

#[test]
fn a_split_that_merges_absorb_is_info() {
    // mkfs-like: a few large writes split at max_sectors (128 KiB) among
    // many small ones merged 32 to a command: fewer commands than user I/Os.
    let mut engine = engine();
    max_sectors_splits(&mut engine, 30);
    let small_base = 30 * 512;
    for command in 0..7u64 {
        let ts = MS * (100 + command);
        let start = small_base + command * 256;
        for bio in 0..32u64 {
            engine.ingest(&queue(ts, LOOP0, start + bio * 8, 8));
            if bio > 0 {
                engine.ingest(&backmerge(ts, LOOP0, start + bio * 8, 8));
            }
        }
        feed(
            &mut engine,
            &[
                issue(ts + 10, LOOP0, start, 256),
                complete(ts + 500, LOOP0, start, 256),
            ],
        );
    }
    assert_clean(&engine);
    let write = disk_op(&engine, "loop0", Op::Write);
    assert_eq!(
        (write.user_ios, write.splits, write.commands),
        (254, 30, 67)
    );
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::SplitAmplification)
        .expect("split_amplification");
    assert_eq!(found.severity, Severity::Info);
    assert!(
        found.explanation.contains("cost nothing here"),
        "{}",
        found.explanation
    );
}

#[test]
fn requeued_tails_on_a_virtio_disk_without_indirect_descriptors() {
    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    assert_clean(&engine);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::RequeuedCommands)
        .unwrap_or_else(|| panic!("requeued_commands: {diagnoses:?}"));
    assert_eq!(found.device, "loop0");
    assert_eq!(found.severity, Severity::Warning);
    let Evidence::RequeuedCommands(evidence) = &found.evidence else {
        panic!("{found:?}");
    };
    assert_eq!((evidence.requeues, evidence.commands), (32, 64));
    assert_eq!(evidence.requeue_share, 0.5);
    assert_near(evidence.requeue_delay_p50_us, 2000);
    assert_eq!(evidence.command_size_max, 2032 * 512);
    assert_eq!(evidence.largest_command_segments, 254);
    assert_eq!((evidence.nr_requests, evidence.hw_queue_tags), (256, 128));
    assert_eq!(evidence.virtio_indirect_desc, Some(false));
    assert_eq!(found.evidence.cause(), Some("virtio_ring_full"));
    // The host fix: the 64 commands issued once each, not 96 times.
    let host = evidence.what_if.as_ref().expect("what_if");
    assert_eq!((host.commands_now, host.commands_after_fix), (96, 64));
    let workaround = evidence.workaround_what_if.as_ref().expect("workaround");
    assert_eq!(workaround.commands_now, 96);
    assert!(
        found.explanation.contains("about 256 descriptors"),
        "{}",
        found.explanation
    );
}

#[test]
fn requeues_with_indirect_descriptors_have_no_known_cause() {
    let geometry = DiskGeometry {
        virtio_indirect_desc: Some(true),
        ..virtio_vda()
    };
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::RequeuedCommands)
        .expect("requeued_commands");
    assert_eq!(found.evidence.cause(), None);
    assert!(found.fix.contains("nr_requests"), "{}", found.fix);
}

#[test]
fn the_virtio_ring_fix_names_the_host_setting_and_the_io_size() {
    let mut engine = Engine::new(vec![virtio_vda()], EngineLimits::default());
    requeued_tails(&mut engine, 32, 2000);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::RequeuedCommands)
        .expect("requeued_commands");
    // Half of the 256-descriptor ring is 126 pages of data.
    assert!(found.fix.contains("indirect_desc=on"), "{}", found.fix);
    assert!(
        found
            .fix
            .contains("bit 28) of /sys/block/loop0/device/features is 1"),
        "{}",
        found.fix
    );
    assert!(found.fix.contains("at most 504 KiB"), "{}", found.fix);
}

#[test]
fn subpage_buffers_on_a_page_sized_partition_are_a_filesystem_choice_and_info() {
    // ext4 on a 300 MiB partition: mkfs picked 1 KiB blocks.
    let mut engine = engine();
    for index in 0..1000 {
        let buffer = BlockEvent {
            aux_sector: 1024,
            ..event(EventKind::DirtyBuffer, MS, P1, index, 0)
        };
        engine.ingest(&buffer);
    }
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|d| d.code == Code::SubpageBlockSize && d.device == "loop0p1")
        .unwrap_or_else(|| panic!("{diagnoses:?}"));
    assert_eq!(found.severity, Severity::Info);
    assert_eq!(found.evidence.block_size(), Some(1024));
    assert_eq!(found.evidence.to_map()["size_mod_8"], 0);
    assert!(
        found.explanation.contains("mkfs.ext4 picks 1024 bytes"),
        "{}",
        found.explanation
    );
    assert!(found.fix.contains("mkfs.ext4 -b 4096"), "{}", found.fix);
}

#[test]
fn unmerged_neighbours_are_explained_by_the_scheduler_not_left_unexplained() {
    // No limit forbids the merges: with no scheduler blk-mq merges only in
    // the plug or one CPU's queue, and mq-deadline's refusal is a flag or
    // cgroup difference the trace cannot show.
    let mut engine = engine();
    unmerged_small_writes(&mut engine, 32);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MergeBlocked)
        .expect("merge_blocked");
    assert_eq!(found.severity, Severity::Warning);
    assert!(
        found.explanation.contains("scheduler (none)"),
        "{}",
        found.explanation
    );
    assert!(found.fix.contains("mq-deadline"), "{}", found.fix);

    let geometry = DiskGeometry {
        scheduler: "mq-deadline".into(),
        ..loop0()
    };
    let mut engine = Engine::new(vec![geometry], EngineLimits::default());
    unmerged_small_writes(&mut engine, 32);
    let diagnoses = worded(&engine);
    let found = diagnoses
        .iter()
        .find(|diagnosis| diagnosis.code == Code::MergeBlocked)
        .expect("merge_blocked");
    assert_eq!(found.severity, Severity::Info);
    assert!(
        found.explanation.contains("flags differ"),
        "{}",
        found.explanation
    );
    for diagnosis in &diagnoses {
        assert!(
            !diagnosis
                .explanation
                .contains("No queue setting explains it"),
            "{}",
            diagnosis.explanation
        );
    }
}

#[test]
fn io_errors_name_the_statuses_the_sectors_and_where_to_look() {
    let diagnosis = crate::frontend::test_reports::failed_diagnosis();
    let text = &diagnosis.explanation;
    assert!(
        text.starts_with(
            "3 commands on sdf completed with an error: 3 of 527 write commands (EIO ×2, ETIMEDOUT ×1, within sectors 8192-20479 of sdf). 3 user I/Os failed with them"
        ),
        "{text}"
    );
    assert!(
        text.contains("this is a device or path problem") && text.contains("not a geometry one"),
        "{text}"
    );
    assert!(text.contains("ETIMEDOUT: commands timed out"), "{text}");
    assert!(!text.contains("ENOSPC"), "{text}");
    for place in [
        "dmesg",
        "smartctl -a /dev/sdf",
        "multipath -ll",
        "losetup -l /dev/sdf",
        "dmsetup status",
    ] {
        assert!(diagnosis.fix.contains(place), "{place}: {}", diagnosis.fix);
    }
    assert_eq!(diagnosis.fix.lines().count(), 4, "{}", diagnosis.fix);
    assert_eq!(diagnosis.evidence.what_if(), None);
    // The evidence's keys, as the JSON has them.
    let map = diagnosis.evidence.to_map();
    let keys: Vec<&String> = map.keys().collect();
    assert_eq!(
        keys,
        [
            "commands",
            "errors",
            "failed_commands",
            "failed_ops",
            "failed_user_ios"
        ]
    );
    assert_eq!(map["failed_ops"]["write"]["lowest_failed_sector"], 8192);
    assert_eq!(map["failed_ops"]["write"]["highest_failed_sector"], 20479);
    assert_eq!(map["errors"]["EIO"], 2);
}

#[test]
fn refusals_alone_say_the_kernel_falls_back_not_that_the_device_failed() {
    use std::collections::BTreeMap;
    let mut diagnosis = crate::frontend::test_reports::failed_diagnosis();
    let Evidence::IoErrors(evidence) = &mut diagnosis.evidence else {
        panic!("not io_errors");
    };
    let refused = BTreeMap::from([("EOPNOTSUPP".to_string(), 1)]);
    evidence.failed_commands = 1;
    evidence.errors = refused.clone();
    for op in evidence.failed_ops.values_mut() {
        op.failed_commands = 1;
        op.errors = refused.clone();
    }
    assert!(evidence.only_refusals());
    let finding = crate::model::Finding::new(
        "sdf".into(),
        "sdf".into(),
        Severity::Info,
        diagnosis.evidence.clone(),
    );
    let said = words(&finding);
    assert!(
        said.explanation.starts_with(
            "1 command on sdf was refused as not supported: 1 of 527 write commands (EOPNOTSUPP ×1"
        ),
        "{}",
        said.explanation
    );
    assert!(
        said.explanation.contains("fall back"),
        "{}",
        said.explanation
    );
    assert!(
        !said.explanation.contains("path problem"),
        "{}",
        said.explanation
    );
    assert!(said.fix.starts_with("nothing to repair"), "{}", said.fix);
    assert!(said
        .fix
        .contains("/sys/block/sdf/queue/write_zeroes_max_bytes"));
}

/// Discards cut at a 64 KiB `discard_max_bytes` on a disk that takes 2 GiB:
/// the fix names the setting and the hardware's value.
#[test]
fn discards_cut_at_their_cap_name_discard_max_bytes() {
    let worded_with = |max: u64, hw: u64| {
        let disk = DiskGeometry {
            discard_max_bytes: max,
            discard_max_hw_bytes: hw,
            ..loop0()
        };
        let mut engine = Engine::new(vec![disk], EngineLimits::default());
        let discard = |event: BlockEvent| BlockEvent {
            rwbs: *b"DS\0\0\0\0\0\0",
            ..event
        };
        let piece = max / 512;
        for index in 0..20 {
            let (ts, sector) = (MS * (index + 1), 20_000 + index * 4 * piece);
            engine.ingest(&discard(queue(ts, LOOP0, sector, (4 * piece) as u32)));
            for cut in 0..4 {
                let start = sector + cut * piece;
                if cut < 3 {
                    engine.ingest(&discard(BlockEvent {
                        aux_sector: start + piece,
                        ..event(EventKind::Split, ts, LOOP0, start, 0)
                    }));
                }
                engine.ingest(&discard(issue(ts, LOOP0, start, piece as u32)));
                engine.ingest(&discard(complete(ts, LOOP0, start, piece as u32)));
            }
        }
        find(&worded(&engine), Code::SplitAmplification).clone()
    };
    // A 64 KiB cap on a disk that takes 2 GiB.
    let split = worded_with(64 << 10, 2 << 30);
    let Evidence::SplitAmplification(evidence) = &split.evidence else {
        panic!("not a split");
    };
    assert_eq!(evidence.cause, SplitCause::MaxDiscard);
    assert_eq!(evidence.op, Op::Discard);
    assert_eq!(
        evidence.fix,
        SplitFix::SetDiscardMaxBytes { to_bytes: 2 << 30 }
    );
    assert!(
        split.explanation.contains("20 of 20 discard user I/Os"),
        "{}",
        split.explanation
    );
    assert_eq!(
        split.fix,
        "set /sys/block/loop0/queue/discard_max_bytes to 2147483648 (a multiple of 4 KiB within discard_max_hw_bytes)"
    );
    // mpt3sas' 134217216-byte cap, at the hardware's: every piece after the
    // first starts off the 4 KiB grid, and the fix rounds the cap down.
    let split = worded_with(134_217_216, 134_217_216);
    let Evidence::SplitAmplification(evidence) = &split.evidence else {
        panic!("not a split");
    };
    assert_eq!(
        evidence.fix,
        SplitFix::SetDiscardMaxBytes {
            to_bytes: 134_213_632
        }
    );
    assert!(
        split
            .explanation
            .contains("It is not a multiple of 4 KiB, so every piece after the first starts off the 4 KiB grid"),
        "{}",
        split.explanation
    );
}

#[test]
fn a_misaligned_dm_table_is_worded_with_its_path_mkfs_number_and_reload() {
    let dm = linear_dm(3, "");
    let found = audited(&dm);
    let diagnosis = find(&found, Code::MisalignedStack);
    assert_eq!(diagnosis.severity, Severity::Warning);
    for words in [
        "dm-0 -> vda1 (linear at sector 3) -> vda (partition at sector 2051)",
        "\"alignment is offset by 2560 bytes\"",
        "reports alignment_offset 2560 bytes",
    ] {
        assert!(
            diagnosis.explanation.contains(words),
            "{words}: {}",
            diagnosis.explanation
        );
    }
    assert!(diagnosis.fix.starts_with("Back up"), "{}", diagnosis.fix);
    assert!(
        diagnosis.fix.contains("dmsetup reload vmtest"),
        "{}",
        diagnosis.fix
    );
    assert!(
        diagnosis.fix.contains("to 8 sectors (4 KiB)"),
        "{}",
        diagnosis.fix
    );
    let lvm = audited(&linear_dm(3, "LVM-x"));
    assert!(find(&lvm, Code::MisalignedStack)
        .fix
        .contains("pvcreate --dataalignment 1024k /dev/vda1"));
}

/// Every path a text names: `/dev/…` and `/sys/…` words.
fn paths(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '`' | '(' | ')' | ',' | ';' | '\''))
        .filter(|word| word.starts_with("/dev/") || word.starts_with("/sys/"))
        .collect()
}

/// "8:16": a device number where a name should be.
fn is_number(part: &str) -> bool {
    super::numbered(part).is_some()
}

/// A fix's paths exist in the kernel's naming scheme: no `/dev/MAJ:MIN`
/// and no `/sys/block/MAJ:MIN` (neither exists); by number only
/// `/sys/dev/block/MAJ:MIN/…`, which names the device's sysfs directory.
fn assert_real_paths(diagnosis: &Diagnosis) {
    for text in [&diagnosis.fix, &diagnosis.explanation] {
        for path in paths(text) {
            let parts: Vec<&str> = path.trim_end_matches('.').split('/').collect();
            match parts.as_slice() {
                ["", "dev", name, ..] => assert!(!is_number(name), "{path} in {text}"),
                ["", "sys", "block", name, ..] => assert!(!is_number(name), "{path} in {text}"),
                ["", "sys", "dev", "block", number, rest @ ..] => {
                    assert!(is_number(number), "{path} in {text}");
                    assert!(
                        matches!(
                            rest.first(),
                            Some(&("queue" | "device" | "mq" | "uevent" | ".."))
                        ),
                        "{path} in {text}"
                    );
                }
                _ => panic!("unexpected path {path} in {text}"),
            }
        }
    }
}

/// No geometry (an imported trace): loop0 is "7:0", and every finding on
/// it names paths that exist and builds no number on a value never read.
fn unknown_loop0() -> Engine {
    Engine::new(Vec::new(), EngineLimits::default())
}

#[test]
fn requeues_on_unknown_geometry_say_the_depth_is_unknown_and_propose_none() {
    let mut engine = unknown_loop0();
    requeued_tails(&mut engine, 32, 50);
    let found = worded(&engine);
    let requeued = find(&found, Code::RequeuedCommands);
    assert_eq!(requeued.device, "7:0");
    let Evidence::RequeuedCommands(evidence) = &requeued.evidence else {
        panic!("not requeued_commands");
    };
    assert_eq!(evidence.fix, RequeueFix::LowerNrRequests { nr_requests: 0 });
    let (text, fix) = (&requeued.explanation, &requeued.fix);
    assert!(
        text.contains("nr_requests unknown") && text.contains("tags per hardware queue unknown"),
        "{text}"
    );
    assert!(
        !text.contains("nr_requests 0") && !text.contains(" 0 tags"),
        "{text}"
    );
    // The shape of the command, with a placeholder, never `echo 4`.
    assert!(
        fix.contains("echo <depth> > /sys/dev/block/7:0/queue/nr_requests"),
        "{fix}"
    );
    assert!(
        !fix.split_whitespace()
            .collect::<Vec<_>>()
            .windows(3)
            .any(|w| w[0] == "echo" && w[1].parse::<u64>().is_ok() && w[2] == ">"),
        "{fix}"
    );
    assert!(
        fix.contains("DEVNAME in /sys/dev/block/7:0/uevent"),
        "{fix}"
    );
    assert_real_paths(requeued);
}

#[test]
fn requeues_on_known_geometry_still_propose_half_the_tags() {
    let mut engine = Engine::new(
        vec![DiskGeometry {
            nr_requests: 256,
            hw_queue_tags: 128,
            ..loop0()
        }],
        EngineLimits::default(),
    );
    requeued_tails(&mut engine, 32, 50);
    let found = worded(&engine);
    let requeued = find(&found, Code::RequeuedCommands);
    assert!(
        requeued
            .fix
            .contains("echo 64 > /sys/block/loop0/queue/nr_requests"),
        "{}",
        requeued.fix
    );
    assert!(
        requeued
            .explanation
            .contains("nr_requests 256, 128 tags per hardware queue)."),
        "{}",
        requeued.explanation
    );
    assert!(!requeued.fix.contains("DEVNAME"), "{}", requeued.fix);
    assert_real_paths(requeued);
}

#[test]
fn merges_on_unknown_geometry_claim_no_setting_and_no_limit() {
    let mut engine = unknown_loop0();
    unmerged_small_writes(&mut engine, 32);
    let found = worded(&engine);
    let merge = find(&found, Code::MergeBlocked);
    let Evidence::MergeBlocked(evidence) = &merge.evidence else {
        panic!("not merge_blocked");
    };
    assert_eq!(evidence.fix, crate::model::MergeFix::ReadQueueSettings);
    let text = &merge.explanation;
    // Not "with no I/O scheduler (none)" as a fact, nor a fit to 0 KiB.
    assert!(!text.contains("max_sectors_kb (0 KiB)"), "{text}");
    assert!(!text.contains("but with no I/O scheduler"), "{text}");
    assert!(text.contains("is not known"), "{text}");
    assert!(
        merge.fix.contains(
            "grep . /sys/dev/block/7:0/queue/nomerges /sys/dev/block/7:0/queue/scheduler"
        ),
        "{}",
        merge.fix
    );
    assert_real_paths(merge);
}

#[test]
fn max_sectors_splits_with_the_hardware_limit_unread_propose_no_raise() {
    let mut engine = Engine::new(
        vec![DiskGeometry {
            max_hw_sectors_kb: 0,
            ..loop0()
        }],
        EngineLimits::default(),
    );
    max_sectors_splits(&mut engine, 32);
    let found = worded(&engine);
    let split = find(&found, Code::SplitAmplification);
    let Evidence::SplitAmplification(evidence) = &split.evidence else {
        panic!("not split_amplification");
    };
    assert_eq!(evidence.cause, SplitCause::MaxSectors);
    assert_eq!(evidence.fix, SplitFix::HardwareLimitUnknown);
    assert!(!split.fix.contains("max_hw_sectors_kb 0"), "{}", split.fix);
    assert!(
        !split.fix.contains("at its hardware limit"),
        "{}",
        split.fix
    );
    assert!(
        split
            .fix
            .contains("echo <kb> > /sys/block/loop0/queue/max_sectors_kb"),
        "{}",
        split.fix
    );
    assert_real_paths(split);
}

#[test]
fn failed_commands_of_a_numbered_device_name_no_node_by_number() {
    let mut engine = unknown_loop0();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 2048, 8),
            issue(MS, LOOP0, 2048, 8),
            BlockEvent {
                error: -5,
                ..complete(2 * MS, LOOP0, 2048, 8)
            },
        ],
    );
    let found = worded(&engine);
    let failed = find(&found, Code::IoErrors);
    assert!(!failed.fix.contains("/dev/7:0"), "{}", failed.fix);
    assert!(
        failed.fix.contains("smartctl -a /dev/<name of 7:0>"),
        "{}",
        failed.fix
    );
    assert_real_paths(failed);
}

/// The kernel's statuses: EIO is blk_status_to_errno's generic answer
/// (BLK_STS_IOERR, and any status it does not map), which a zoned device
/// also gives a write off its zone's write pointer (null_blk's and the
/// SCSI/NVMe zoned checks); ETIMEDOUT, ENODATA, ENOLINK name the device or
/// the path.
#[test]
fn a_generic_write_error_is_not_claimed_as_the_devices() {
    let mut engine = engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 30720, 8),
            issue(MS, LOOP0, 30720, 8),
            BlockEvent {
                error: -5,
                ..complete(2 * MS, LOOP0, 30720, 8)
            },
        ],
    );
    let found = worded(&engine);
    let failed = find(&found, Code::IoErrors);
    let text = &failed.explanation;
    assert!(!text.contains("this is a device or path problem"), "{text}");
    assert!(text.contains("failing media, the transport"), "{text}");
    assert!(text.contains("zone's write pointer"), "{text}");
    assert!(
        failed.fix.contains("/sys/block/loop0/queue/zoned"),
        "{}",
        failed.fix
    );
    // A medium error names the device: said as such, and no zone line.
    let mut engine = crate::engine::tests::engine();
    feed(
        &mut engine,
        &[
            queue(MS, LOOP0, 30720, 8),
            issue(MS, LOOP0, 30720, 8),
            BlockEvent {
                error: -61,
                ..complete(2 * MS, LOOP0, 30720, 8)
            },
        ],
    );
    let found = worded(&engine);
    let failed = find(&found, Code::IoErrors);
    assert!(
        failed
            .explanation
            .contains("this is a device or path problem"),
        "{}",
        failed.explanation
    );
    assert!(
        !failed.explanation.contains("zone"),
        "{}",
        failed.explanation
    );
    assert!(!failed.fix.contains("zoned"), "{}", failed.fix);
}

#[test]
fn numbered_names_are_only_major_colon_minor() {
    for name in ["8:16", "251:0", "259:12"] {
        assert!(is_number(name), "{name}");
        assert_eq!(
            super::sys_file(name, "queue/x"),
            format!("/sys/dev/block/{name}/queue/x")
        );
        assert_eq!(super::dev_node(name), format!("/dev/<name of {name}>"));
    }
    for name in [
        "sda",
        "nvme0n1",
        "dm-0",
        "cciss!c0d0",
        "8:",
        ":1",
        "8:1a",
        "sda:1",
    ] {
        assert!(!is_number(name), "{name}");
        assert_eq!(super::dev_node(name), format!("/dev/{name}"));
    }
}
