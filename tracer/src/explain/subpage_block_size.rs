//! `subpage_block_size`: why sub-page blocks cost, from the partition's size
//! (the audit) or from what the traffic showed.

use super::{dev_node, exact_size, partition, with_numbered_note, WhoPays, Words};
use crate::blk::{PAGE_BYTES, SECTOR_BYTES};
use crate::model::{Finding, MergeLimits, SubpageBlockSizeEvidence, SubpageFix, SubpageSeen};

/// The workloads this code costs most, as `run` names them when the
/// command it traced paid little.
pub(super) const WHO_PAYS: WhoPays = WhoPays::Workloads(
    "buffered I/O through the raw partition (dd, databases on raw devices) on a device that cannot merge its sub-page bios (nomerges, or a virt boundary with bios that start inside a page)",
);

pub(super) fn words(finding: &Finding, evidence: &SubpageBlockSizeEvidence) -> Words {
    let name = &finding.device;
    let block_size = evidence.block_size;
    match evidence.seen {
        SubpageSeen::Geometry {
            predicted_block_size,
            merging,
        } => from_geometry(finding, evidence, predicted_block_size, &merging),
        SubpageSeen::ChosenBlocks {
            buffers,
            total,
            size,
        } => Words {
            explanation: format!(
                "{buffers} of {total} dirty buffers written through {name} were {block_size} bytes. Its size, {size} sectors, is a multiple of 4 KiB, so the kernel gives it a {PAGE_BYTES}-byte block size: the smaller blocks were chosen by whoever holds it open, usually a filesystem made with {block_size}-byte blocks (mkfs.ext4 picks 1024 bytes for filesystems under 512 MiB) or `blockdev --setbsz`. Its metadata and buffered writes go down in {block_size}-byte buffers and rely on merging."
            ),
            fix: fix(finding, evidence),
        },
        SubpageSeen::DirtyBuffers { buffers, total } => seen(
            finding,
            evidence,
            format!(
                "{buffers} of {total} dirty buffers written through {name} were {block_size} bytes: the device's block size is {block_size} bytes"
            ),
        ),
        SubpageSeen::UniformWrites { bios, writes } => seen(
            finding,
            evidence,
            format!(
                "{bios} of {writes} writes to {name} were {block_size}-byte bios, which is what a {block_size}-byte block size produces (O_DIRECT writes of that size would look the same)"
            ),
        ),
    }
}

/// The audit's finding: the partition's size, the kernel's rule, and what
/// the disk's limits make of the small bios.
fn from_geometry(
    finding: &Finding,
    evidence: &SubpageBlockSizeEvidence,
    predicted: u32,
    merging: &MergeLimits,
) -> Words {
    let block_size = evidence.block_size;
    let place = evidence.partition.unwrap_or_default();
    let per_page = PAGE_BYTES / u64::from(block_size.max(1));
    let mut explanation = format!(
        "{name} is {size} sectors long; {size} mod 8 = {size_mod_8}, so its size in bytes is \
         not a multiple of {page}. The kernel gives a partition the largest power-of-two block \
         size up to {page} bytes that divides its size (set_init_blocksize): {predicted} bytes \
         here. Buffered I/O to the raw partition (mkfs, dd without O_DIRECT, databases on raw \
         devices) reaches the block layer as one bio per {block_size}-byte buffer, {per_page} \
         times as many as with {page}-byte blocks.",
        name = finding.device,
        size = place.partition_size,
        size_mod_8 = evidence.size_mod_8.unwrap_or(place.partition_size % 8),
        page = PAGE_BYTES,
    );
    if let Some(current) = evidence.current_block_size {
        explanation.push_str(&format!(
            " It is open with a {current}-byte block size right now (e.g. mounted); raw \
             I/O gets {predicted} bytes again once nothing holds it."
        ));
    }
    explanation.push_str(&merge_context(&finding.disk, merging, block_size));
    Words {
        explanation,
        fix: fix(finding, evidence),
    }
}

/// Why many small bios hurt on this particular disk.
fn merge_context(disk: &str, merging: &MergeLimits, block_size: u32) -> String {
    if merging.nomerges >= 2 {
        return format!(
            " Merging is off on {} (nomerges={}), so each of those bios becomes its own device \
             command.",
            disk, merging.nomerges
        );
    }
    let mut context = String::new();
    if merging.virt_boundary_mask != 0 {
        context.push_str(&format!(
            " {} has a virtual boundary (mask {:#x}): bios that do not meet on a boundary \
             cannot be merged, so many can reach the device as separate commands.",
            disk, merging.virt_boundary_mask
        ));
    }
    let merged_cap = u64::from(merging.max_segments) * u64::from(block_size);
    let request_cap = u64::from(merging.max_sectors_kb) * 1024;
    if merging.max_segments > 0 && merged_cap < request_cap {
        context.push_str(&format!(
            " Even merged, a request holds at most max_segments = {} of them: {} x {} B = {}, \
             below max_sectors_kb = {}.",
            merging.max_segments,
            merging.max_segments,
            block_size,
            exact_size(merged_cap),
            merging.max_sectors_kb
        ));
    }
    context
}

/// Sub-page blocks seen in dirty buffers or bios: `what` was seen.
fn seen(finding: &Finding, evidence: &SubpageBlockSizeEvidence, what: String) -> Words {
    let block_size = evidence.block_size;
    let sectors_per_page = PAGE_BYTES / SECTOR_BYTES;
    let size_sentence = match evidence.fix {
        SubpageFix::Resize { from, .. } => format!(
            " Its size, {from} sectors, is not a multiple of {sectors_per_page} (4 KiB), which is why the kernel chose that block size."
        ),
        _ => String::new(),
    };
    Words {
        explanation: format!(
            "{what}, below the {PAGE_BYTES}-byte page, so buffered writes to the raw device (mkfs, dd without O_DIRECT) become one {block_size}-byte bio per buffer and rely on merging to form large commands.{size_sentence}"
        ),
        fix: fix(finding, evidence),
    }
}

fn fix(finding: &Finding, evidence: &SubpageBlockSizeEvidence) -> String {
    let name = &finding.device;
    let node = dev_node(name);
    let fix = match &evidence.fix {
        SubpageFix::Partition(proposed) => partition::fix(
            finding,
            &evidence.partition.unwrap_or_default(),
            proposed.as_ref(),
        ),
        SubpageFix::Resize { to, .. } => format!(
            "resize {name} to {to} sectors (a multiple of 4 KiB) so the kernel picks a 4096-byte block size; until then write with O_DIRECT or set it with `blockdev --setbsz 4096 {node}`"
        ),
        SubpageFix::PageSizedBlocks => format!(
            "give {name} a size that is a multiple of 4 KiB, or set a 4096-byte block size (`blockdev --setbsz 4096 {node}`) or write with O_DIRECT"
        ),
        SubpageFix::FilesystemBlocks => format!(
            "nothing in {name}'s geometry; if its I/O pattern matters, make the filesystem with 4096-byte blocks (e.g. mkfs.ext4 -b 4096)"
        ),
    };
    with_numbered_note(fix, [name.as_str()])
}
