//! `requeued_commands`: how often the driver sent commands back, why where
//! it can be known, and the fix.

use super::{known, sys_file, with_numbered_note, WhoPays, Words};
use crate::blk::{PAGE_BYTES, VIRTIO_HEADER_DESCRIPTORS};
use crate::model::{ratio, Finding, RequeueFix, RequeuedCommandsEvidence};

/// The workloads this code costs most, as `run` names them when the
/// command it traced paid little.
pub(super) const WHO_PAYS: WhoPays = WhoPays::Workloads(
    "deep queues of large writes from scattered pages, which exhaust the ring's descriptors",
);

pub(super) fn words(finding: &Finding, evidence: &RequeuedCommandsEvidence) -> Words {
    let disk = &finding.disk;
    let what = format!(
        "{} times on {} ({:.1}% of its {} {} commands) the driver handed an issued command back (block_rq_requeue) and the block layer issued it again later: p50 {} µs, p99 {} µs after the requeue.",
        evidence.requeues,
        finding.device,
        ratio(evidence.requeues, evidence.commands) * 100.0,
        evidence.commands,
        evidence.op.as_str(),
        evidence.requeue_delay_p50_us,
        evidence.requeue_delay_p99_us,
    );
    let (why, fix) = match evidence.fix {
        RequeueFix::IndirectDescriptors {
            ring_descriptors: ring,
            io_pages,
        } => {
            let tags = evidence.hw_queue_tags;
            let max_segments = u64::from(evidence.max_segments);
            let command_max = evidence.command_size_max;
            let largest_command_segments = evidence.largest_command_segments;
            (
                format!(
                    " {disk} is a virtio disk whose device does not offer indirect descriptors (feature bit 28 is clear), so a command takes one virtqueue descriptor per data segment plus {VIRTIO_HEADER_DESCRIPTORS}. Its ring has about {ring} descriptors (without indirect descriptors virtio-blk gives the block layer half as many tags: {tags}), and a command may carry max_segments = {max_segments} segments, {} descriptors. The largest command here, {command_max} bytes, needed up to {largest_command_segments} segments (one per 4 KiB page, as direct I/O from user memory gets): more than half the ring, so a command issued beside it found no room and was requeued until it completed.",
                    max_segments + VIRTIO_HEADER_DESCRIPTORS,
                ),
                format!(
                    "on the host, offer indirect descriptors (VIRTIO_RING_F_INDIRECT_DESC): qemu -device virtio-blk-pci,...,indirect_desc=on (qemu's default: drop indirect_desc=off), then check in the guest that character 29 (bit 28) of {} is 1; in the guest alone, submit direct I/O of at most {} KiB ({io_pages} pages), so that two commands fit the ring at once",
                    sys_file(disk, "device/features"),
                    io_pages * PAGE_BYTES / 1024,
                ),
            )
        }
        RequeueFix::LowerNrRequests { nr_requests } => {
            let depth = match known(evidence.nr_requests) {
                Some(depth) => format!("nr_requests {depth}"),
                None => "nr_requests unknown".to_string(),
            };
            let tags = match known(evidence.hw_queue_tags) {
                Some(tags) => format!("{tags} tags per hardware queue"),
                None => "tags per hardware queue unknown".to_string(),
            };
            let unread = match (known(evidence.nr_requests), known(evidence.hw_queue_tags)) {
                (Some(_), Some(_)) => "",
                _ => {
                    ": the trace does not give the queue's depth or tags, and no geometry was read"
                }
            };
            let nr_requests_file = sys_file(disk, "queue/nr_requests");
            let fix = match nr_requests {
                0 => format!(
                    "lower the queue depth the block layer uses so it stops overfilling the driver; its current depth and tags are not known here, so read them first (cat {nr_requests_file} {}), then write a smaller depth, e.g. half the tags per hardware queue: echo <depth> > {nr_requests_file}",
                    sys_file(disk, "mq/0/nr_tags"),
                ),
                depth => format!(
                    "lower the queue depth the block layer uses so it stops overfilling the driver: echo {depth} > {nr_requests_file}"
                ),
            };
            (
                format!(
                    " The driver reported itself busy: its queue or the device's was full ({depth}, {tags}{}){unread}.",
                    match evidence.virtio_indirect_desc {
                        Some(true) => ", virtio with indirect descriptors",
                        Some(false) => ", virtio without indirect descriptors",
                        None => "",
                    },
                ),
                fix,
            )
        }
    };
    Words {
        explanation: format!("{what}{why}"),
        fix: with_numbered_note(fix, [disk.as_str()]),
    }
}
