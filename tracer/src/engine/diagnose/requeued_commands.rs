//! `requeued_commands`: the driver handed issued commands back to be issued
//! again, on a notable share of them. Live only.

use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::engine::split::SplitLimits;
use crate::engine::stats::quantile_bytes;
use crate::engine::what_if;
use crate::model::{
    ratio, Code, Diagnosis, Evidence, Op, RequeueCause, RequeuedCommandsEvidence, Severity,
};

/// `requeued_commands` needs at least this many requeues...
pub const MIN_REQUEUES: u64 = 16;
/// ...on at least this share of the commands; from 10% on it is a warning.
pub const MIN_REQUEUE_SHARE: f64 = 0.05;
const WARNING_REQUEUE_SHARE: f64 = 0.1;
/// virtio-blk without indirect descriptors gives the block layer half as
/// many tags as the ring has descriptors (every command takes at least two).
const VIRTIO_DESCRIPTORS_PER_TAG: u64 = 2;
/// Descriptors a virtio-blk command takes beyond its data segments (the
/// request header and the status byte).
const VIRTIO_HEADER_DESCRIPTORS: u64 = 2;

pub(super) struct RequeuedCommands;

impl Check for RequeuedCommands {
    fn code(&self) -> Code {
        Code::RequeuedCommands
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
        requeued_commands(traffic)
    }

    /// The same commands each issued once (the host fix), and for a ring
    /// filler the guest-side workaround: I/O of at most half the ring's pages.
    fn what_if(&self, diagnosis: &mut Diagnosis, traffic: &DeviceTraffic<'_>) {
        let Evidence::RequeuedCommands(evidence) = &mut diagnosis.evidence else {
            return;
        };
        let Some(stats) = Op::ALL
            .iter()
            .filter_map(|&op| traffic.op(op))
            .max_by_key(|stats| stats.requeues)
        else {
            return;
        };
        let limits = &traffic.device.limits;
        if evidence.cause == Some(RequeueCause::VirtioRingFull) {
            let half_ring_pages = u64::from(evidence.hw_queue_tags)
                .saturating_sub(VIRTIO_HEADER_DESCRIPTORS)
                .max(1);
            let smaller_io = SplitLimits {
                max_sectors: half_ring_pages * (PAGE_BYTES / SECTOR_BYTES),
                ..*limits
            };
            evidence.workaround_what_if = what_if::without_requeues(
                &stats.streams,
                stats.commands,
                stats.requeues,
                limits,
                &smaller_io,
            );
        }
        if let Some(predicted) = what_if::issued_once(stats.commands, stats.requeues) {
            diagnosis.evidence.set_what_if(predicted);
        }
    }
}

fn requeued_commands(traffic: &DeviceTraffic<'_>) -> Option<Diagnosis> {
    // Judged on the operation requeued most, so a busy disk's other traffic
    // does not dilute the share.
    let (op, total) = Op::ALL
        .iter()
        .filter_map(|&op| traffic.op(op).map(|stats| (op, stats)))
        .max_by_key(|(_, stats)| stats.requeues)?;
    let share = ratio(total.requeues, total.commands);
    if total.requeues < MIN_REQUEUES || share < MIN_REQUEUE_SHARE {
        return None;
    }
    let geometry = &traffic.device.geometry;
    let disk = traffic.disk_name();
    let delay = &total.requeue_delay_us;
    let quantile_us = |q: f64| {
        if delay.is_empty() {
            0
        } else {
            delay.lowest_equivalent(delay.value_at_quantile(q))
        }
    };
    let commands = total.command_sectors.histogram();
    let command_max = if commands.is_empty() {
        0
    } else {
        commands.lowest_equivalent(commands.max()) * SECTOR_BYTES
    };
    // O_DIRECT from user memory and the page cache give one segment per page.
    let largest_command_segments = command_max
        .div_ceil(PAGE_BYTES)
        .min(u64::from(geometry.max_segments).max(1));
    let tags = u64::from(geometry.hw_queue_tags);
    let ring = tags * VIRTIO_DESCRIPTORS_PER_TAG;
    let ring_filler = geometry.virtio_indirect_desc == Some(false)
        && tags > 0
        && (largest_command_segments + VIRTIO_HEADER_DESCRIPTORS) * 2 > ring;
    let evidence = RequeuedCommandsEvidence {
        requeues: total.requeues,
        commands: total.commands,
        requeue_share: round3(share),
        requeue_delay_p50_us: quantile_us(0.5),
        requeue_delay_p99_us: quantile_us(0.99),
        command_size_p50: quantile_bytes(&total.command_sectors, 0.5),
        command_size_max: command_max,
        largest_command_segments,
        max_segments: geometry.max_segments,
        max_sectors_kb: geometry.max_sectors_kb,
        nr_requests: geometry.nr_requests,
        hw_queue_tags: geometry.hw_queue_tags,
        virtio_indirect_desc: geometry.virtio_indirect_desc,
        cause: ring_filler.then_some(RequeueCause::VirtioRingFull),
        partition: partition_place(traffic.partition),
        what_if: None,
        workaround_what_if: None,
    };
    let what = format!(
        "{} times on {} ({:.1}% of its {} {} commands) the driver handed an issued command back (block_rq_requeue) and the block layer issued it again later: p50 {} µs, p99 {} µs after the requeue.",
        total.requeues,
        traffic.name,
        share * 100.0,
        total.commands,
        op.as_str(),
        evidence.requeue_delay_p50_us,
        evidence.requeue_delay_p99_us,
    );
    let (why, fix) = if ring_filler {
        let max_segments = u64::from(geometry.max_segments);
        let half_ring_pages = (tags.saturating_sub(VIRTIO_HEADER_DESCRIPTORS)).max(1);
        (
            format!(
                " {disk} is a virtio disk whose device does not offer indirect descriptors (feature bit 28 is clear), so a command takes one virtqueue descriptor per data segment plus {VIRTIO_HEADER_DESCRIPTORS}. Its ring has about {ring} descriptors (without indirect descriptors virtio-blk gives the block layer half as many tags: {tags}), and a command may carry max_segments = {max_segments} segments, {} descriptors. The largest command here, {command_max} bytes, needed up to {largest_command_segments} segments (one per 4 KiB page, as direct I/O from user memory gets): more than half the ring, so a command issued beside it found no room and was requeued until it completed.",
                max_segments + VIRTIO_HEADER_DESCRIPTORS,
            ),
            // Not a larger queue-size: qemu sizes seg_max to the ring
            // (queue-size - 2), so bigger commands fill a bigger ring too.
            format!(
                "on the host, offer indirect descriptors (VIRTIO_RING_F_INDIRECT_DESC): qemu -device virtio-blk-pci,...,indirect_desc=on (qemu's default: drop indirect_desc=off), then check in the guest that character 29 (bit 28) of /sys/block/{disk}/device/features is 1; in the guest alone, submit direct I/O of at most {} KiB ({half_ring_pages} pages), so that two commands fit the ring at once",
                half_ring_pages * PAGE_BYTES / 1024,
            ),
        )
    } else {
        (
            format!(
                " The driver reported itself busy: its queue or the device's was full (nr_requests {}, {} tags per hardware queue{}).",
                geometry.nr_requests,
                geometry.hw_queue_tags,
                match geometry.virtio_indirect_desc {
                    Some(true) => ", virtio with indirect descriptors",
                    Some(false) => ", virtio without indirect descriptors",
                    None => "",
                },
            ),
            format!(
                "lower the queue depth the block layer uses so it stops overfilling the driver: echo {} > /sys/block/{disk}/queue/nr_requests",
                (geometry.hw_queue_tags / 2).max(4)
            ),
        )
    };
    let severity = if share >= WARNING_REQUEUE_SHARE {
        Severity::Warning
    } else {
        Severity::Info
    };
    Some(Diagnosis::new(
        traffic.name.clone(),
        severity,
        Evidence::RequeuedCommands(evidence),
        format!("{what}{why}"),
        fix,
    ))
}
