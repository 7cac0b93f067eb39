//! What a fix would buy: the observed user I/Os replayed through the
//! kernel's split and merge rules under the fixed geometry or limits.
//!
//! The engine keeps, per (device, origin, op), the sizes of **streams**: runs
//! of user I/Os where each one starts where the previous one (same device
//! and op) ended while that one was still in flight, so the block layer could
//! merge them into one request. A lone bio is a stream of its own. The kernel
//! then cuts a stream into commands only where a limit says so:
//! `max_sectors`, or `max_segments` (bios never share a segment; a bio takes
//! as many as its vector counts, where the BTF probes read `bi_vcnt`, since
//! physically contiguous pages share one vector; elsewhere one below a page
//! and one per page above). Replaying the same streams under other
//! limits, or with other bio sizes, gives the commands the fix would leave.
//! Timing is left as observed: a stream the device did not merge for lack of
//! time is not merged in the replay either.
//!
//! Kept per stream: one histogram value (1% resolution, fixed memory), so
//! nothing is allocated per event.

use super::split::SplitLimits;
use super::streams::{StreamSizes, PAGE_SECTORS};
use crate::blk::SECTOR_BYTES;
use crate::model::{RequeueFix, SplitFix, WhatIf};

/// `BLK_MAX_SEGMENTS`: the kernel's default when a driver sets none.
const DEFAULT_MAX_SEGMENTS: u64 = 128;
/// `BLK_MAX_SEGMENT_SIZE`: the kernel's default segment size.
const DEFAULT_MAX_SEGMENT_BYTES: u64 = 65536;

/// Sectors one request can carry of segments of `segment_sectors` under `limits`.
pub fn command_cap(limits: &SplitLimits, segment_sectors: u64) -> u64 {
    let max_segments = match limits.max_segments {
        0 => DEFAULT_MAX_SEGMENTS,
        known => known,
    };
    let largest_segment = match limits.max_segment_bytes / SECTOR_BYTES {
        0 => DEFAULT_MAX_SEGMENT_BYTES / SECTOR_BYTES,
        known => known,
    };
    let by_segments = max_segments.saturating_mul(segment_sectors.clamp(1, largest_segment));
    match limits.max_sectors {
        0 => by_segments,
        max_sectors => max_sectors.min(by_segments),
    }
    .max(1)
}

/// How the replay writes the streams' bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bios {
    /// As observed.
    Same,
    /// Through page-sized buffers: one 4 KiB bio per page (a 4096-byte block size).
    PageSized,
}

/// Commands the streams become under `limits`.
pub fn replay(streams: &StreamSizes, bios: Bios, limits: &SplitLimits) -> u64 {
    let mut commands = 0u64;
    streams.for_each(|sectors, density, count| {
        let (sectors, density) = match bios {
            Bios::Same => (sectors, density),
            Bios::PageSized => (sectors.div_ceil(PAGE_SECTORS) * PAGE_SECTORS, PAGE_SECTORS),
        };
        let cap = command_cap(limits, density);
        commands = commands.saturating_add(sectors.div_ceil(cap).saturating_mul(count));
    });
    commands
}

/// The observed commands moved by what the model says the fix changes:
/// traffic the fix does not touch (other writers, physically contiguous
/// buffers the model counts page by page) cancels out of the difference.
fn prediction(commands_now: u64, model_now: u64, model_after_fix: u64) -> Option<WhatIf> {
    if commands_now == 0 || model_after_fix == 0 {
        return None;
    }
    let commands_after_fix = (commands_now.saturating_add(model_after_fix))
        .saturating_sub(model_now)
        .max(1);
    Some(WhatIf {
        commands_now,
        commands_after_fix,
        ..WhatIf::default()
    })
}

/// `prediction` of a replay of `streams`, saying where their segments came from.
fn replayed(streams: &StreamSizes, prediction: Option<WhatIf>) -> Option<WhatIf> {
    prediction.map(|what_if| WhatIf {
        segments: streams.segment_source(),
        ..what_if
    })
}

/// Bios in the streams, one per segment but no fewer than one per page: with
/// merging off each becomes its own command.
fn unmerged(streams: &StreamSizes, bios: Bios) -> u64 {
    let mut commands = 0u64;
    streams.for_each(|sectors, density, count| {
        let density = match bios {
            // The streams keep no bio count: a bio of contiguous pages is
            // taken as one per page, as the page-sized ones it is set against.
            Bios::Same => density.clamp(1, PAGE_SECTORS),
            Bios::PageSized => PAGE_SECTORS,
        };
        commands = commands.saturating_add(sectors.div_ceil(density).saturating_mul(count));
    });
    commands
}

/// `subpage_block_size` fixed: the same bytes written through 4096-byte
/// buffers, one page-sized bio each, merged under the device's limits (or,
/// where `merges` is off, each its own command).
///
/// Under a virt boundary the kernel keeps a sub-page bio apart from the
/// request before it when that request starts inside a page
/// (`bio_will_gap`), which the replay cannot see: commands beyond what the
/// streams merge to today are those gaps, and page-sized bios close them,
/// so the fixed streams are the prediction.
pub fn page_sized_buffers(
    streams: &StreamSizes,
    commands_now: u64,
    limits: &SplitLimits,
    merges: bool,
) -> Option<WhatIf> {
    if !merges {
        return replayed(
            streams,
            prediction(
                commands_now,
                unmerged(streams, Bios::Same),
                unmerged(streams, Bios::PageSized),
            ),
        );
    }
    let model_now = replay(streams, Bios::Same, limits);
    let model_after_fix = replay(streams, Bios::PageSized, limits);
    let gaps_kept_apart = limits.virt_boundary_mask != 0 && commands_now > model_now;
    let model_now = match gaps_kept_apart {
        true => commands_now,
        false => model_now,
    };
    replayed(
        streams,
        prediction(commands_now, model_now, model_after_fix),
    )
}

/// A queue setting changed (`max_sectors_kb` raised, merging allowed): the
/// same streams of the same bios under `fixed` instead of `now`.
pub fn with_limits(
    streams: &StreamSizes,
    commands_now: u64,
    now: &SplitLimits,
    fixed: &SplitLimits,
) -> Option<WhatIf> {
    replayed(
        streams,
        prediction(
            commands_now,
            replay(streams, Bios::Same, now),
            replay(streams, Bios::Same, fixed),
        ),
    )
}

/// `nomerges` switched off: each command today is one bio (or split piece);
/// the streams merged under `limits` instead.
pub fn merging_allowed(
    streams: &StreamSizes,
    commands_now: u64,
    limits: &SplitLimits,
) -> Option<WhatIf> {
    replayed(
        streams,
        prediction(
            commands_now,
            commands_now,
            replay(streams, Bios::Same, limits),
        ),
    )
}

/// `requeued_commands` fixed: the device takes each command once (today it
/// took `commands + requeues` issues), and the streams are cut under `fixed`
/// (e.g. I/O small enough that two commands fit a virtio ring).
pub fn without_requeues(
    streams: &StreamSizes,
    commands: u64,
    requeues: u64,
    now: &SplitLimits,
    fixed: &SplitLimits,
) -> Option<WhatIf> {
    replayed(
        streams,
        prediction(
            commands.saturating_add(requeues),
            replay(streams, Bios::Same, now).saturating_add(requeues),
            replay(streams, Bios::Same, fixed),
        ),
    )
}

/// `requeued_commands` fixed where the requeues come from (indirect
/// descriptors on the host, a shallower queue): the same commands, each issued once.
pub fn issued_once(commands: u64, requeues: u64) -> Option<WhatIf> {
    let issues = commands.saturating_add(requeues);
    prediction(issues, issues, commands)
}

/// The queue limits a `split_amplification` fix leaves: `max_sectors_kb`
/// raised to the proposed value (the one its fix text names); `None` for a
/// fix that changes no limit.
pub fn limits_after_split_fix(fix: &SplitFix, now: &SplitLimits) -> Option<SplitLimits> {
    match *fix {
        SplitFix::RaiseMaxSectorsKb { to_kb } => Some(SplitLimits {
            max_sectors: to_kb * 1024 / SECTOR_BYTES,
            ..*now
        }),
        _ => None,
    }
}

/// The limits the guest-side workaround of a virtio ring filler leaves:
/// direct I/O of at most the proposed pages (the ones its fix text names);
/// `None` for a fix without that workaround.
pub fn limits_after_requeue_workaround(fix: &RequeueFix, now: &SplitLimits) -> Option<SplitLimits> {
    match *fix {
        RequeueFix::IndirectDescriptors { io_pages, .. } => Some(SplitLimits {
            max_sectors: io_pages * PAGE_SECTORS,
            ..*now
        }),
        RequeueFix::LowerNrRequests { .. } => None,
    }
}

/// A fix that removes the splits of one alignment cause: each such split
/// cut one extra command off a piece that would otherwise have stayed whole.
pub fn without_splits(commands_now: u64, splits: u64) -> Option<WhatIf> {
    prediction(
        commands_now,
        commands_now,
        commands_now.saturating_sub(splits),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loop's limits on this machine: 1280 KiB, 128 segments of up to 64 KiB.
    fn loop_limits() -> SplitLimits {
        SplitLimits {
            max_sectors: 2560,
            max_segments: 128,
            max_segment_bytes: 65536,
            ..SplitLimits::default()
        }
    }

    fn one_stream_of(bios: u64, sectors: u64) -> StreamSizes {
        let mut streams = StreamSizes::default();
        for n in 0..bios {
            streams.record(n > 0, sectors, 0);
        }
        streams
    }

    #[test]
    fn with_merging_off_page_sized_buffers_take_one_command_per_page() {
        // 1 MiB through 512-byte buffers on a nomerges disk: 2048 commands,
        // and 16 direct 64 KiB writes beside them (the VM's seed dd case).
        // However many vectors the direct writes' buffer took, each stays
        // one command: the fix does not touch them.
        for vectors in [0, 1, 16] {
            let mut streams = one_stream_of(2048, 1);
            for _ in 0..16 {
                streams.record(false, 128, vectors);
            }
            let what_if = page_sized_buffers(&streams, 2064, &loop_limits(), false).unwrap();
            assert_eq!(what_if.commands_after_fix, 256 + 16, "{vectors} vectors");
        }
        let mut streams = one_stream_of(2048, 1);
        for _ in 0..16 {
            streams.record(false, 128, 0);
        }
        // Replayed as if merging were on, the difference would be lost.
        let merged = page_sized_buffers(&streams, 2064, &loop_limits(), true).unwrap();
        assert!(merged.commands_after_fix > 2000, "{merged:?}");
    }

    #[test]
    fn seed_case_8_mib_of_512_byte_bios() {
        // ENVIRONMENT.md: 16385 bios → 129 commands now, 17 with 4 KiB blocks.
        let streams = one_stream_of(16384, 1);
        let limits = loop_limits();
        assert_eq!(
            replay(&streams, Bios::Same, &limits),
            128,
            "the model sees today's 64 KiB cap"
        );
        // The one command the model does not see stays: 129 - (128 - 16).
        let what_if = page_sized_buffers(&streams, 129, &limits, true).unwrap();
        assert_eq!(
            (what_if.commands_now, what_if.commands_after_fix),
            (129, 17)
        );
    }

    #[test]
    fn under_a_virt_boundary_page_sized_bios_close_the_gaps_the_streams_hide() {
        // qemu's NVMe (4 KiB virt boundary, 127 segments, 128 KiB): 4 KiB
        // in 512-byte bios, 16 times, that the kernel sent as 52 commands
        // where the streams merge to 16; page-sized bios leave 16.
        let nvme = SplitLimits {
            max_sectors: 256,
            max_segments: 127,
            virt_boundary_mask: 4095,
            ..SplitLimits::default()
        };
        let mut streams = StreamSizes::default();
        for _ in 0..16 {
            for n in 0..8 {
                streams.record(n > 0, 1, 1);
            }
        }
        assert_eq!(replay(&streams, Bios::Same, &nvme), 16);
        let what_if = page_sized_buffers(&streams, 52, &nvme, true).unwrap();
        assert_eq!(what_if.commands_after_fix, 16);
        // Without the boundary the extra commands are traffic the fix does
        // not touch, and stay.
        let virtio = SplitLimits {
            virt_boundary_mask: 0,
            ..nvme
        };
        let what_if = page_sized_buffers(&streams, 52, &virtio, true).unwrap();
        assert_eq!(what_if.commands_after_fix, 52);
    }

    #[test]
    fn a_stream_rounds_up_to_whole_page_bios() {
        // 9 sectors of 512-byte bios become two 4 KiB bios, one command.
        let streams = one_stream_of(9, 1);
        assert_eq!(replay(&streams, Bios::PageSized, &loop_limits()), 1);
    }

    #[test]
    fn direct_1_mib_writes_under_a_raised_max_sectors() {
        // 16 lone 1 MiB bios, max_sectors_kb 64: 16 commands each.
        let mut streams = StreamSizes::default();
        for _ in 0..16 {
            streams.record(false, 2048, 0);
        }
        assert_eq!(streams.streams(), 16);
        let limits = SplitLimits {
            max_sectors: 128,
            ..loop_limits()
        };
        assert_eq!(replay(&streams, Bios::Same, &limits), 256);
        // Raised to 1024 KiB, 128 one-page segments cap a command at 512 KiB.
        let raised = SplitLimits {
            max_sectors: 2048,
            ..limits
        };
        let what_if = with_limits(&streams, 256, &limits, &raised).unwrap();
        assert_eq!(what_if.commands_after_fix, 32);
        // Where segments allow it, one command per bio.
        let wide = SplitLimits {
            max_segments: 256,
            ..raised
        };
        assert_eq!(
            with_limits(&streams, 256, &limits, &wide)
                .unwrap()
                .commands_after_fix,
            16
        );
    }

    #[test]
    fn absorbing_keeps_every_stream_and_the_open_one() {
        let mut left = one_stream_of(4, 8);
        let right = one_stream_of(2, 8);
        left.absorb(&right);
        assert_eq!(left.streams(), 2);
        // Streams of 32 and 16 sectors at 8 sectors a command: 4 + 2.
        let tiny = SplitLimits {
            max_sectors: 8,
            ..loop_limits()
        };
        assert_eq!(replay(&left, Bios::Same, &tiny), 6);
    }

    #[test]
    fn each_stream_keeps_its_own_segment_density() {
        // Lone 512-byte bios beside 1 MiB direct writes (vda: 254 segments,
        // 4 MiB commands): the small ones must not make the large ones look
        // like 512-byte segments.
        let mut streams = StreamSizes::default();
        for _ in 0..100 {
            streams.record(false, 1, 0);
        }
        for _ in 0..32 {
            streams.record(false, 2048, 0);
        }
        let vda = SplitLimits {
            max_sectors: 8192,
            max_segments: 254,
            max_segment_bytes: u64::from(u32::MAX),
            ..SplitLimits::default()
        };
        // 254 pages then 2: two commands per 1 MiB write, one per lone bio.
        assert_eq!(replay(&streams, Bios::Same, &vda), 100 + 64);
        // A stream of 4 KiB bios then 512-byte ones counts one segment each.
        let mut mixed = StreamSizes::default();
        for n in 0..128 {
            mixed.record(n > 0, if n < 64 { 8 } else { 1 }, 0);
        }
        let one_command = SplitLimits {
            max_sectors: 2560,
            max_segments: 128,
            ..SplitLimits::default()
        };
        assert_eq!(replay(&mixed, Bios::Same, &one_command), 1);
    }

    #[test]
    fn contiguous_buffers_take_the_segments_their_vectors_count() {
        // max_sectors_kb 64 raised to 1024, 16 direct 1 MiB writes: from
        // scattered pages (256 vectors) two 512 KiB commands each; from a
        // huge page (one vector, cut into 64 KiB segments) one each.
        let now = SplitLimits {
            max_sectors: 128,
            ..loop_limits()
        };
        let raised = SplitLimits {
            max_sectors: 2048,
            ..now
        };
        let mut scattered = StreamSizes::default();
        let mut contiguous = StreamSizes::default();
        for _ in 0..16 {
            scattered.record(false, 2048, 256);
            contiguous.record(false, 2048, 1);
        }
        assert_eq!(replay(&scattered, Bios::Same, &raised), 32);
        assert_eq!(replay(&contiguous, Bios::Same, &raised), 16);
        let what_if = with_limits(&contiguous, 256, &now, &raised).unwrap();
        assert_eq!(what_if.commands_after_fix, 16);
        // Four vectors of 256 KiB each: still one command per write.
        let mut quarters = StreamSizes::default();
        quarters.record(false, 2048, 4);
        assert_eq!(replay(&quarters, Bios::Same, &raised), 1);
    }

    #[test]
    fn vector_counts_never_count_more_than_one_segment_per_page() {
        // io_uring's registered buffers: a 4 KiB bio over a table of 4096
        // vectors is still one page, one segment.
        let mut shared_table = StreamSizes::default();
        for n in 0..256 {
            shared_table.record(n > 0, 8, 4096);
        }
        let mut by_page = StreamSizes::default();
        for n in 0..256 {
            by_page.record(n > 0, 8, 0);
        }
        let limits = loop_limits();
        assert_eq!(
            replay(&shared_table, Bios::Same, &limits),
            replay(&by_page, Bios::Same, &limits)
        );
    }

    #[test]
    fn unknown_limits_fall_back_to_the_kernel_defaults() {
        let cap = command_cap(&SplitLimits::default(), 1);
        assert_eq!(cap, DEFAULT_MAX_SEGMENTS);
        // A segment is at most 64 KiB.
        assert_eq!(
            command_cap(&SplitLimits::default(), 2048),
            DEFAULT_MAX_SEGMENTS * 128
        );
        assert_eq!(
            command_cap(&SplitLimits::default(), 8),
            DEFAULT_MAX_SEGMENTS * 8
        );
    }

    #[test]
    fn no_traffic_or_no_commands_predicts_nothing() {
        let empty = StreamSizes::default();
        assert_eq!(page_sized_buffers(&empty, 10, &loop_limits(), true), None);
        assert_eq!(
            page_sized_buffers(&one_stream_of(8, 1), 0, &loop_limits(), true),
            None
        );
        assert_eq!(without_splits(10, 4).unwrap().commands_after_fix, 6);
        // A fix the model sees cost nothing leaves the observed count.
        let lone = one_stream_of(1, 8);
        let same = with_limits(&lone, 3, &loop_limits(), &loop_limits()).unwrap();
        assert_eq!(same.commands_after_fix, 3);
        // vda: 32 direct 1 MiB writes, 2 commands each, every tail requeued
        // once; in I/O of at most 504 KiB, 3 commands each and no re-issue.
        let mut direct = StreamSizes::default();
        for _ in 0..32 {
            direct.record(false, 2048, 0);
        }
        let vda = SplitLimits {
            max_sectors: 8192,
            max_segments: 254,
            ..SplitLimits::default()
        };
        let small = SplitLimits {
            max_sectors: 1008,
            ..vda
        };
        let requeue = without_requeues(&direct, 64, 32, &vda, &small).unwrap();
        assert_eq!((requeue.commands_now, requeue.commands_after_fix), (96, 96));
        // With indirect descriptors the same 64 commands are each issued once.
        let host = issued_once(64, 32).unwrap();
        assert_eq!((host.commands_now, host.commands_after_fix), (96, 64));
        assert_eq!(issued_once(0, 0), None);
        // nomerges=2: 16,384 one-bio commands, 128 once merging is back.
        let seed = one_stream_of(16384, 1);
        let merged = merging_allowed(&seed, 16384, &loop_limits()).unwrap();
        assert_eq!(merged.commands_after_fix, 128);
    }
}

#[cfg(test)]
mod engine_tests {
    use tracer_common::{BlockEvent, EventKind};

    use super::super::{Engine, EngineLimits};
    use crate::geometry::{DevId, DiskGeometry, PartitionGeometry};
    use crate::model::{Code, Evidence, SplitFix};

    const DISK: DevId = DevId::new(7, 0);
    const ODD: DevId = DevId::new(259, 1);

    fn disk() -> DiskGeometry {
        DiskGeometry {
            name: "loop0".into(),
            dev: Some(DISK),
            size_sectors: 40960,
            logical_block_size: 512,
            physical_block_size: 512,
            max_sectors_kb: 1280,
            max_hw_sectors_kb: 1280,
            max_segments: 128,
            max_segment_size: 65536,
            request_based: true,
            partitions: vec![PartitionGeometry {
                name: "loop0p2".into(),
                dev: Some(ODD),
                number: 2,
                start: 10240,
                size: 20001,
                ..PartitionGeometry::default()
            }],
            ..DiskGeometry::default()
        }
    }

    fn event(kind: EventKind, ts_ns: u64, sector: u64, nr_sector: u32) -> BlockEvent {
        BlockEvent {
            ts_ns,
            sector,
            dev: DISK.to_kernel(),
            nr_sector,
            tgid: 1,
            rwbs: *b"W\0\0\0\0\0\0\0",
            kind: kind as u8,
            ..BlockEvent::ZERO
        }
    }

    #[test]
    fn direct_writes_split_by_max_sectors_predict_the_raised_cap() {
        let mut disk = disk();
        disk.max_sectors_kb = 64;
        disk.partitions.clear();
        let mut engine = Engine::new(vec![disk], EngineLimits::default());
        let mut ts = 1000;
        // 16 lone 1 MiB direct writes, each cut into 16 commands of 64 KiB.
        for write in 0..16u64 {
            let start = write * 2048;
            engine.ingest(&event(EventKind::Queue, ts, start, 2048));
            for piece in 1..16u64 {
                let split = BlockEvent {
                    aux_sector: start + piece * 128,
                    ..event(EventKind::Split, ts, start + (piece - 1) * 128, 0)
                };
                engine.ingest(&split);
            }
            for piece in 0..16u64 {
                engine.ingest(&event(EventKind::Issue, ts + 1, start + piece * 128, 128));
            }
            for piece in 0..16u64 {
                engine.ingest(&event(
                    EventKind::Complete,
                    ts + 2,
                    start + piece * 128,
                    128,
                ));
            }
            ts += 100;
        }
        let diagnoses = engine.diagnoses();
        let split = diagnoses
            .iter()
            .find(|d| d.code == Code::SplitAmplification)
            .unwrap_or_else(|| panic!("no split_amplification: {diagnoses:?}"));
        let Evidence::SplitAmplification(evidence) = &split.evidence else {
            panic!("{split:?}");
        };
        assert_eq!(evidence.fix, SplitFix::RaiseMaxSectorsKb { to_kb: 1024 });
        assert_eq!(split.evidence.to_map()["proposed_max_sectors_kb"], 1024);
        let what_if = split.evidence.what_if().expect("evidence.what_if");
        // 1 MiB bios of one segment per page: 128 segments cap a command at 512 KiB.
        assert_eq!(
            (what_if.commands_now, what_if.commands_after_fix),
            (256, 32)
        );
    }

    #[test]
    fn buffered_writes_on_the_odd_partition_predict_page_sized_commands() {
        let mut engine = Engine::new(vec![disk()], EngineLimits::default());
        // 2048 bios of 512 B written back in one go, merged 128 to a command.
        let start = 10240;
        for n in 0..2048u64 {
            let remap = BlockEvent {
                aux_dev: ODD.to_kernel(),
                aux_sector: n,
                ..event(EventKind::Remap, 1000 + n, start + n, 1)
            };
            engine.ingest(&remap);
            engine.ingest(&event(EventKind::Queue, 1000 + n, start + n, 1));
        }
        for command in 0..16u64 {
            let sector = start + command * 128;
            engine.ingest(&event(EventKind::Issue, 10_000 + command, sector, 128));
            engine.ingest(&event(EventKind::Complete, 20_000 + command, sector, 128));
        }
        let diagnoses = engine.diagnoses();
        let subpage = diagnoses
            .iter()
            .find(|d| d.code == Code::SubpageBlockSize && d.device == "loop0p2")
            .unwrap_or_else(|| panic!("no subpage_block_size: {diagnoses:?}"));
        let what_if = subpage.evidence.what_if().expect("evidence.what_if");
        assert_eq!(what_if.commands_now, 16, "{what_if:?}");
        // 1 MiB in 4 KiB bios, 128 segments a command: two 512 KiB commands.
        assert_eq!(what_if.commands_after_fix, 2, "{what_if:?}");
    }
}
