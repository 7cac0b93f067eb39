//! `requeued_commands`: the driver handed issued commands back to be issued
//! again, on a notable share of them. Live only.

use super::{partition_place, round3, Check, DeviceTraffic};
use crate::blk::{PAGE_BYTES, SECTOR_BYTES, VIRTIO_DESCRIPTORS_PER_TAG, VIRTIO_HEADER_DESCRIPTORS};
use crate::engine::stats::quantile_bytes;
use crate::engine::what_if;
use crate::model::{
    ratio, Code, Evidence, Finding, Op, RequeueCause, RequeueFix, RequeuedCommandsEvidence,
    Severity,
};

/// `requeued_commands` needs at least this many requeues...
pub const MIN_REQUEUES: u64 = 16;
/// ...on at least this share of the commands; from 10% on it is a warning.
pub const MIN_REQUEUE_SHARE: f64 = 0.05;
const WARNING_REQUEUE_SHARE: f64 = 0.1;

pub(super) struct RequeuedCommands;

impl Check for RequeuedCommands {
    fn code(&self) -> Code {
        Code::RequeuedCommands
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Finding> {
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
        let fix = if ring_filler {
            // In the guest alone: I/O small enough that two commands fit the
            // ring. Not a larger queue-size: qemu sizes seg_max to the ring
            // (queue-size - 2), so bigger commands fill a bigger ring too.
            RequeueFix::IndirectDescriptors {
                ring_descriptors: ring,
                io_pages: tags.saturating_sub(VIRTIO_HEADER_DESCRIPTORS).max(1),
            }
        } else {
            // A shallower queue, so the block layer stops overfilling the
            // driver: half its tags, when they are known; none from a 0 that
            // only says they were never read.
            RequeueFix::LowerNrRequests {
                nr_requests: match geometry.hw_queue_tags {
                    0 => 0,
                    tags => (tags / 2).max(4),
                },
            }
        };
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
            op,
            fix,
        };
        let severity = if share >= WARNING_REQUEUE_SHARE {
            Severity::Warning
        } else {
            Severity::Info
        };
        Some(Finding::new(
            traffic.name.clone(),
            traffic.disk_name().to_string(),
            severity,
            Evidence::RequeuedCommands(evidence),
        ))
    }

    /// The same commands each issued once (the host fix), and for a ring
    /// filler the guest-side workaround: I/O of at most the proposed pages.
    fn what_if(&self, finding: &mut Finding, traffic: &DeviceTraffic<'_>) {
        let Evidence::RequeuedCommands(evidence) = &mut finding.evidence else {
            return;
        };
        let Some(stats) = traffic.op(evidence.op) else {
            return;
        };
        let limits = &traffic.device.limits;
        if let Some(smaller_io) = what_if::limits_after_requeue_workaround(&evidence.fix, limits) {
            evidence.workaround_what_if = what_if::without_requeues(
                &stats.streams,
                stats.commands,
                stats.requeues,
                limits,
                &smaller_io,
            );
        }
        if let Some(predicted) = what_if::issued_once(stats.commands, stats.requeues) {
            finding.evidence.set_what_if(predicted);
        }
    }
}
