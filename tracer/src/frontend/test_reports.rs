//! Synthetic reports for frontend tests, shaped like what the engine produces
//! for the seed case: a partition with a 512-byte block size, a clean one, and
//! a disk whose large writes are split at `max_sectors_kb`.

use std::collections::BTreeMap;

use tracer_common::EventKind;

use crate::geometry::{DevId, DiskGeometry, MaxSectorsSource, PartitionGeometry};
use crate::model::{
    Bucket, CorrelationStats, DeviceReport, Diagnosis, Distribution, EventCounts, Evidence,
    LiveEvidence, Measures, MisalignedStartEvidence, Op, OpMeasures, PartitionPlace,
    PartitionReport, Report, RequeueCause, RequeuedCommandsEvidence, RunReport, RunTarget,
    Severity, SplitAmplificationEvidence, SplitCause, SplitCost, SplitFix,
    SubpageBlockSizeEvidence, SubpageFix, SubpageSeen, WhatIf, SCHEMA_NAME, SCHEMA_VERSION,
};

/// loop0p2 of the seed report: odd start and size.
const SEED_PARTITION: PartitionPlace = PartitionPlace {
    partition_start: 4097,
    partition_size: 65537,
};

/// A distribution built from `(bucket low, count)` pairs; percentiles from the buckets.
pub fn distribution(buckets: &[(u64, u64)]) -> Distribution {
    let count: u64 = buckets.iter().map(|&(_, n)| n).sum();
    let total: u64 = buckets.iter().map(|&(low, n)| low * n).sum();
    let percentile = |share: f64| {
        let wanted = (count as f64 * share).ceil() as u64;
        let mut seen = 0;
        for &(low, n) in buckets {
            seen += n;
            if seen >= wanted {
                return low;
            }
        }
        0
    };
    Distribution {
        count,
        min: buckets.first().map_or(0, |&(low, _)| low),
        max: buckets.last().map_or(0, |&(low, _)| low),
        mean: if count == 0 {
            0.0
        } else {
            total as f64 / count as f64
        },
        p50: percentile(0.5),
        p90: percentile(0.9),
        p99: percentile(0.99),
        buckets: buckets
            .iter()
            .map(|&(low, count)| Bucket { low, count })
            .collect(),
    }
}

/// Writes: `user_ios` bios of the given sizes became `commands` of the given sizes.
pub fn writes(user_sizes: &[(u64, u64)], command_sizes: &[(u64, u64)]) -> OpMeasures {
    let user_io_size = distribution(user_sizes);
    let command_size = distribution(command_sizes);
    let user_ios = user_io_size.count;
    let commands = command_size.count;
    OpMeasures {
        user_ios,
        fragments: user_ios,
        commands,
        bytes: user_sizes.iter().map(|&(low, n)| low * n).sum(),
        amplification: crate::model::ratio(commands, user_ios),
        user_io_size,
        command_size,
        queue_to_complete_us: distribution(&[(1024, 50), (2048, 40), (4096, 9), (8192, 1)]),
        queue_to_issue_us: distribution(&[(128, 90), (1024, 10)]),
        issue_to_complete_us: distribution(&[(256, 60), (512, 39), (4096, 1)]),
        dominant: Some(crate::model::Dominant::Device),
        ..OpMeasures::default()
    }
}

fn measures(write: OpMeasures) -> Measures {
    Measures {
        ops: BTreeMap::from([(Op::Write, write)]),
        ..Default::default()
    }
}

/// loop0p2 of the seed case: 16,385 user I/Os of 512 B merged into 129 commands of ~64 KiB.
pub fn seed_partition_writes() -> OpMeasures {
    let mut write = writes(&[(512, 16385)], &[(512, 1), (65536, 128)]);
    write.merges = 16256;
    write.misaligned_pbs_commands = 129;
    write.misaligned_4k_commands = 129;
    write
}

/// loop0p1: 4 KiB writes merged into 128 KiB commands, all aligned.
pub fn clean_partition_writes() -> OpMeasures {
    let mut write = writes(&[(4096, 256)], &[(131072, 8)]);
    write.merges = 248;
    write
}

/// loop1: 1 MiB writes split into 128 KiB commands at `max_sectors_kb`.
pub fn split_disk_writes() -> OpMeasures {
    let mut write = writes(&[(1 << 20, 100)], &[(131072, 800)]);
    write.fragments = 800;
    write.splits = 700;
    write.split_user_ios = 100;
    write.split_causes = BTreeMap::from([(SplitCause::MaxSectors, 700)]);
    write
}

/// vda: 527 direct 1 MiB writes, 66 times sent back by a full virtio ring.
pub fn requeued_writes() -> OpMeasures {
    let mut write = writes(&[(1 << 20, 527)], &[(1 << 20, 527)]);
    write.requeues = 66;
    write.requeue_delay_us = distribution(&[(440, 60), (2100, 6)]);
    write
}

/// `requeued_commands` on `device` with both predictions: the host-side fix
/// (each command issued once) and the guest-side workaround (smaller I/O).
pub fn requeued_diagnosis(device: &str) -> Diagnosis {
    Diagnosis::new(
        device.to_string(),
        Severity::Warning,
        Evidence::RequeuedCommands(RequeuedCommandsEvidence {
            requeues: 66,
            commands: 527,
            requeue_share: 0.125,
            requeue_delay_p50_us: 440,
            requeue_delay_p99_us: 2100,
            command_size_p50: 1 << 20,
            command_size_max: 1 << 20,
            largest_command_segments: 256,
            max_segments: 254,
            max_sectors_kb: 4096,
            nr_requests: 256,
            hw_queue_tags: 128,
            virtio_indirect_desc: Some(false),
            cause: Some(RequeueCause::VirtioRingFull),
            partition: None,
            what_if: Some(WhatIf {
                commands_now: 593,
                commands_after_fix: 527,
                time_now_ms: None,
                time_after_fix_ms: None,
                ..Default::default()
            }),
            workaround_what_if: Some(WhatIf {
                commands_now: 593,
                commands_after_fix: 357,
                time_now_ms: None,
                time_after_fix_ms: None,
                ..Default::default()
            }),
            op: Op::Write,
            fix: crate::model::RequeueFix::IndirectDescriptors {
                ring_descriptors: 256,
                io_pages: 64,
            },
        }),
        format!(
            "The driver of {device} sent commands back 66 times: its virtio ring has no \
             indirect descriptors, and one large command fills it."
        ),
        "Enable indirect descriptors on the host (virtio-blk indirect_desc=on).\n\
         Or write with O_DIRECT in pieces of at most 256 KiB."
            .to_string(),
    )
}

/// The seed report plus vda, whose direct writes were requeued.
pub fn requeued_report() -> Report {
    let mut report = seed_report();
    let mut geometry = disk_geometry("vda", 0, 1 << 29);
    geometry.dev = Some(DevId::new(254, 0));
    geometry.max_segments = 254;
    geometry.max_sectors_kb = 4096;
    report.devices.push(DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: "vda".to_string(),
        dev: "254:0".to_string(),
        geometry,
        geometry_known: true,
        measures: measures(requeued_writes()),
        partitions: Vec::new(),
        gone: false,
    });
    report.diagnoses.push(requeued_diagnosis("vda"));
    report
}

/// sdf: 527 writes, 3 of whose commands failed (EIO ×2, ETIMEDOUT ×1).
pub fn failed_writes() -> OpMeasures {
    let mut write = writes(&[(65536, 527)], &[(65536, 527)]);
    write.failed_commands = 3;
    write.failed_user_ios = 3;
    write.errors = BTreeMap::from([("EIO".to_string(), 2), ("ETIMEDOUT".to_string(), 1)]);
    write
}

/// `io_errors` on sdf as the engine makes and `explain` words it.
pub fn failed_diagnosis() -> Diagnosis {
    let errors = BTreeMap::from([("EIO".to_string(), 2), ("ETIMEDOUT".to_string(), 1)]);
    crate::explain::diagnosis(crate::model::Finding::new(
        "sdf".to_string(),
        "sdf".to_string(),
        Severity::Warning,
        Evidence::IoErrors(crate::model::IoErrorsEvidence {
            failed_commands: 3,
            commands: 527,
            failed_user_ios: 3,
            errors: errors.clone(),
            failed_ops: BTreeMap::from([(
                Op::Write,
                crate::model::FailedOp {
                    failed_commands: 3,
                    commands: 527,
                    failed_user_ios: 3,
                    errors,
                    sectors: Some(crate::model::FailedSectors {
                        lowest_failed_sector: 8192,
                        highest_failed_sector: 20479,
                    }),
                },
            )]),
            partition: None,
        }),
    ))
}

/// The seed report plus dm-1, dm-crypt over vda1 at sector 2048 of vda.
pub fn stacked_report() -> Report {
    use crate::geometry::stack::{Stack, StackLeg, StackLevel};
    let mut report = seed_report();
    let mut geometry = disk_geometry("dm-1", 1, 1 << 20);
    geometry.dev = Some(DevId::new(253, 1));
    geometry.request_based = false;
    let level = |device: &str, via: &str, start_sectors| StackLevel {
        device: device.into(),
        via: via.into(),
        start_sectors,
    };
    geometry.stack = Some(Stack {
        kind: "dm-crypt".into(),
        dm_name: "secret".into(),
        legs: vec![StackLeg {
            levels: vec![level("vda1", "crypt", 0), level("vda", "partition", 2048)],
            bottom_start: 2048,
            ..StackLeg::default()
        }],
        ..Stack::default()
    });
    report.devices.push(DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: "dm-1".to_string(),
        dev: "253:1".to_string(),
        geometry,
        geometry_known: true,
        measures: measures(clean_partition_writes()),
        partitions: Vec::new(),
        gone: false,
    });
    report
}

/// The seed report plus sdf, whose device failed 3 writes.
pub fn failed_report() -> Report {
    let mut report = seed_report();
    let mut geometry = disk_geometry("sdf", 0, 1 << 29);
    geometry.dev = Some(DevId::new(8, 80));
    report.devices.push(DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: "sdf".to_string(),
        dev: "8:80".to_string(),
        geometry,
        geometry_known: true,
        measures: measures(failed_writes()),
        partitions: Vec::new(),
        gone: false,
    });
    report.diagnoses.push(failed_diagnosis());
    report
}

fn sum(parts: &[&OpMeasures]) -> OpMeasures {
    let mut total = OpMeasures::default();
    let mut user_buckets = BTreeMap::new();
    let mut command_buckets = BTreeMap::new();
    for part in parts {
        total.add_counts(part);
        for bucket in &part.user_io_size.buckets {
            *user_buckets.entry(bucket.low).or_insert(0) += bucket.count;
        }
        for bucket in &part.command_size.buckets {
            *command_buckets.entry(bucket.low).or_insert(0) += bucket.count;
        }
    }
    let user: Vec<_> = user_buckets.into_iter().collect();
    let command: Vec<_> = command_buckets.into_iter().collect();
    total.user_io_size = distribution(&user);
    total.command_size = distribution(&command);
    total.queue_to_complete_us = parts[0].queue_to_complete_us.clone();
    total.queue_to_issue_us = parts[0].queue_to_issue_us.clone();
    total.issue_to_complete_us = parts[0].issue_to_complete_us.clone();
    total.dominant = parts[0].dominant;
    total
}

pub fn seed_diagnosis() -> Diagnosis {
    Diagnosis::new(
        "loop0p2".to_string(),
        Severity::Critical,
        Evidence::SubpageBlockSize(SubpageBlockSizeEvidence {
            block_size: 512,
            block_size_source: None,
            current_block_size: None,
            size_mod_8: None,
            partition: Some(SEED_PARTITION),
            fix: SubpageFix::PageSizedBlocks,
            live: LiveEvidence::default(),
            what_if: None,
            seen: SubpageSeen::DirtyBuffers {
                buffers: 16385,
                total: 16385,
            },
        }),
        "loop0p2 is 65,537 sectors long, not a multiple of 8, so the kernel \
            gave it a 512-byte block size (the largest power of two up to 4 KiB that divides \
            its size). Buffered writes to it become one 512-byte bio per buffer: 16,385 user \
            I/Os carried only 8 MiB."
            .to_string(),
        "Make the partition size a multiple of 8 sectors (4 KiB), e.g. shrink it \
            to 65,536 sectors.\n\
            Or write with O_DIRECT in 4 KiB multiples."
            .to_string(),
    )
}

fn misaligned_diagnosis() -> Diagnosis {
    Diagnosis::new(
        "loop0p2".to_string(),
        Severity::Warning,
        Evidence::MisalignedStart(MisalignedStartEvidence::past_a_4k_block(SEED_PARTITION)),
        "loop0p2 starts at sector 4,097, which is not a multiple of the \
            4 KiB physical block: every command straddles physical blocks."
            .to_string(),
        "Recreate the partition starting at a multiple of 2,048 sectors (1 MiB).".to_string(),
    )
}

fn split_diagnosis() -> Diagnosis {
    Diagnosis::new(
        "loop1".to_string(),
        Severity::Warning,
        Evidence::SplitAmplification(SplitAmplificationEvidence {
            cause: SplitCause::MaxSectors,
            causes: BTreeMap::from([(SplitCause::MaxSectors, 700)]),
            splits: 700,
            split_user_ios: 100,
            user_ios: 100,
            fragments: 800,
            commands: 800,
            split_share: 1.0,
            amplification: 8.0,
            user_io_size_p50: 1 << 20,
            command_size_p50: 131072,
            command_size_mean: 131072,
            max_sectors_kb: 128,
            max_hw_sectors_kb: 32767,
            max_sectors_source: Some(MaxSectorsSource::UserOrUnknown),
            optimal_io_size: 0,
            max_segments: 128,
            max_segment_size: 65536,
            physical_block_size: 4096,
            chunk_sectors: 0,
            virt_boundary_mask: 0,
            discard_granularity: 0,
            discard_max_bytes: 0,
            discard_max_hw_bytes: 0,
            crypt_max_io_bytes: None,
            partition: None,
            fix: SplitFix::AtHardwareLimit,
            what_if: None,
            op: Op::Write,
            cost: SplitCost::ExtraCommands,
        }),
        "Writes of 1 MiB were split into 8 commands each because the \
            queue accepts at most 128 KiB per command."
            .to_string(),
        "Raise /sys/block/loop1/queue/max_sectors_kb up to max_hw_sectors_kb.".to_string(),
    )
}

fn disk_geometry(name: &str, minor: u32, size_sectors: u64) -> DiskGeometry {
    DiskGeometry {
        name: name.to_string(),
        dev: Some(DevId::new(7, minor)),
        size_sectors,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        max_sectors_kb: 128,
        max_hw_sectors_kb: 32767,
        max_segments: 128,
        max_segment_size: 65536,
        scheduler: "none".to_string(),
        request_based: true,
        block_size: Some(4096),
        ..DiskGeometry::default()
    }
}

fn partition(name: &str, number: u32, start: u64, size: u64, block_size: u32) -> PartitionGeometry {
    PartitionGeometry {
        name: name.to_string(),
        dev: Some(DevId::new(259, number)),
        number,
        start,
        size,
        alignment_offset: 0,
        block_size: Some(block_size),
    }
}

fn base(duration_s: f64) -> Report {
    Report {
        schema: SCHEMA_NAME,
        schema_version: SCHEMA_VERSION,
        duration_s,
        events: EventCounts::default(),
        correlation: CorrelationStats::default(),
        diagnoses: Vec::new(),
        other_findings: Vec::new(),
        devices: Vec::new(),
        run: None,
        attribution: None,
        unsupported_probes: Vec::new(),
    }
}

/// Nothing traced yet.
pub fn empty_report() -> Report {
    base(0.0)
}

/// The seed case on loop0 plus a split-amplified loop1.
pub fn seed_report() -> Report {
    let seed = seed_partition_writes();
    let clean = clean_partition_writes();
    let split = split_disk_writes();
    let loop0 = DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: "loop0".to_string(),
        dev: "7:0".to_string(),
        geometry: disk_geometry("loop0", 0, 131072),
        geometry_known: true,
        measures: measures(sum(&[&seed, &clean])),
        partitions: vec![
            PartitionReport {
                name: "loop0p1".to_string(),
                dev: "259:1".to_string(),
                geometry: partition("loop0p1", 1, 2048, 2048, 4096),
                geometry_known: true,
                measures: measures(clean),
                gone: false,
            },
            PartitionReport {
                name: "loop0p2".to_string(),
                dev: "259:2".to_string(),
                geometry: partition("loop0p2", 2, 4097, 65537, 512),
                geometry_known: true,
                measures: measures(seed),
                gone: false,
            },
            PartitionReport {
                name: "loop0p3".to_string(),
                dev: "259:3".to_string(),
                geometry: partition("loop0p3", 3, 71680, 2048, 4096),
                geometry_known: true,
                measures: Measures::default(),
                gone: false,
            },
        ],
        gone: false,
    };
    let loop1 = DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: "loop1".to_string(),
        dev: "7:1".to_string(),
        geometry: disk_geometry("loop1", 1, 262144),
        geometry_known: true,
        measures: measures(split),
        partitions: Vec::new(),
        gone: false,
    };
    let mut report = base(12.34);
    report.events = EventCounts {
        dropped: 42,
        read_failed: 1,
        ..EventCounts::default()
    };
    for (kind, count) in [
        (EventKind::Remap, 16641),
        (EventKind::Queue, 16741),
        (EventKind::Split, 700),
        (EventKind::Backmerge, 16504),
        (EventKind::Issue, 937),
        (EventKind::Complete, 937),
        (EventKind::BioComplete, 17441),
        (EventKind::DirtyBuffer, 16385),
    ] {
        report.events[kind] = count;
    }
    report.correlation = CorrelationStats {
        incomplete: 3,
        unmatched_events: 5,
        in_flight: 2,
        ..CorrelationStats::default()
    };
    // Engine order is not severity order; the frontends sort.
    report.diagnoses = vec![split_diagnosis(), seed_diagnosis(), misaligned_diagnosis()];
    report.devices = vec![loop0, loop1];
    report.unsupported_probes = vec!["block_dirty_buffer: tracepoint not found".to_string()];
    report
}

/// `run -- mkfs.ext4 /dev/loop0p2`.
pub fn seed_run() -> RunReport {
    RunReport {
        time_with_each_fix: Vec::new(),
        command: vec!["mkfs.ext4".to_string(), "/dev/loop0p2".to_string()],
        exit_status: Some(0),
        paused_opens: 1,
        paused_s: 0.0004,
        processes: 1,
        targets: vec![RunTarget {
            device: "loop0p2".to_string(),
            file: None,
            write_syscalls: 2048,
            failed_writes: Default::default(),
            write_syscall_bytes: 2048 * 32768,
            write_syscall_size: distribution(&[(32768, 2048)]),
            aio_writes: 0,
            aio_write_bytes: 0,
            uring_writes: 0,
            uring_write_bytes: 0,
            passthrough_writes: 0,
            fsync_calls: 1,
            partial_pages: 0,
            bios: 131072,
            bio_size: distribution(&[(512, 131072)]),
            commands: 1032,
            commands_per_write: distribution(&[(0, 1024), (1, 1024)]),
            writes_per_command: distribution(&[(2, 1032)]),
            mapped: None,
            atomic_writes: None,
            direct_writes: 0,
            summary: "mkfs.ext4 issued 2,048 writes of 32 KiB; the kernel turned them into \
                131,072 bios of 512 B (block size 512) and the device received 1,032 \
                commands of 64 KiB."
                .to_string(),
        }],
        files_not_listed: None,
        background: measures(writes(&[(4096, 10)], &[(4096, 10)])),
        io_submit: None,
        io_uring: None,
        command_s: None,
        time_with_fix: None,
        attached: None,
    }
}
