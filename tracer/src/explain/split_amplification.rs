//! `split_amplification`: how many I/Os were split and by what, the limit
//! behind the cause, what the pieces cost, and the fix.

use super::{exact_size, kernel_name, known, sys_file, with_numbered_note, WhoPays, Words};
use crate::blk::SECTOR_BYTES;
use crate::geometry::max_sectors;
use crate::geometry::MaxSectorsSource;
use crate::model::{ratio, Finding, SplitAmplificationEvidence, SplitCost, SplitFix};

/// The workloads this code costs most, as `run` names them when the
/// command it traced paid little.
pub(super) const WHO_PAYS: WhoPays = WhoPays::Workloads(
    "large writes (direct I/O, writeback of big files) on a device that charges per command, such as a cloud disk capped in IOPS",
);

pub(super) fn words(finding: &Finding, evidence: &SplitAmplificationEvidence) -> Words {
    let share = ratio(evidence.split_user_ios, evidence.user_ios);
    let amplification = ratio(evidence.commands, evidence.user_ios);
    let cause_count = evidence.causes.get(&evidence.cause).copied().unwrap_or(0);
    let (detail, fix) = detail_and_fix(finding, evidence);
    let fix = with_numbered_note(fix, [finding.disk.as_str(), finding.device.as_str()]);
    let cost = match evidence.cost {
        SplitCost::AbsorbedByMerges => format!(
            " Net of merges the device received {amplification:.2} commands per user I/O, no more than without the splits, so they cost nothing here."
        ),
        SplitCost::LargePieces => format!(
            " The pieces are still large commands ({} on average), so the extra commands cost the device little.",
            exact_size(evidence.command_size_mean / 1024 * 1024)
        ),
        SplitCost::ByDesign => " Each piece is one chunk of the stripe, as many as the I/O spans: that is striping spreading the I/O over its disks, not a misfit to fix; a larger chunk (chosen when the array or table is made) gives larger commands per disk.".to_string(),
        SplitCost::ExtraCommands => String::new(),
        SplitCost::Unmeasured => " The trace holds no command of these user I/Os (no issue, completion or remap below them), so what the splits cost the device cannot be measured from it.".to_string(),
    };
    let became = match evidence.cost {
        SplitCost::Unmeasured => format!(
            "they became {} fragments (median user I/O {} bytes)",
            evidence.fragments, evidence.user_io_size_p50
        ),
        _ => format!(
            "they became {} fragments and {} commands, {amplification:.2} commands per user I/O (median user I/O {} bytes, median command {} bytes)",
            evidence.fragments,
            evidence.commands,
            evidence.user_io_size_p50,
            evidence.command_size_p50,
        ),
    };
    let explanation = format!(
        "{} of {} {} user I/Os on {} ({:.1}%) were split, {} times in all, {} of the splits by {} ({cause_count}); {became}. {detail}{cost}",
        evidence.split_user_ios,
        evidence.user_ios,
        evidence.op.as_str(),
        finding.device,
        share * 100.0,
        evidence.splits,
        if cause_count == evidence.splits { "all" } else { "most" },
        evidence.cause.key(),
    );
    Words { explanation, fix }
}

/// A sentence on the limit involved, and the fix.
fn detail_and_fix(finding: &Finding, evidence: &SplitAmplificationEvidence) -> (String, String) {
    let name = &finding.device;
    let disk = &finding.disk;
    let pbs = u64::from(evidence.physical_block_size).max(SECTOR_BYTES);
    let pbs_sectors = pbs / SECTOR_BYTES;
    let max_kb = evidence.max_sectors_kb;
    let hw_kb = evidence.max_hw_sectors_kb;
    let source = evidence.max_sectors_source;
    let max_sectors_detail = || match (known(max_kb), source) {
        (Some(max_kb), Some(source)) => format!(
            "Each piece is max_sectors_kb = {max_kb} KiB, the queue's size cap: {}.",
            max_sectors::describe(source, max_kb, evidence.optimal_io_size)
        ),
        (Some(max_kb), None) => {
            format!("Each piece is max_sectors_kb = {max_kb} KiB, the queue's size cap.")
        }
        (None, _) => {
            "Each piece is the queue's size cap, max_sectors_kb (its value is not known here)."
                .to_string()
        }
    };
    let max_sectors_file = sys_file(disk, "queue/max_sectors_kb");
    match evidence.fix {
        SplitFix::RaiseMaxSectorsKb { to_kb } => (
            max_sectors_detail(),
            raise_max_sectors_fix(disk, &max_sectors_file, evidence, to_kb),
        ),
        SplitFix::AtHardwareLimit => (
            max_sectors_detail(),
            format!(
                "none needed at the queue: {disk} is at its hardware limit (max_hw_sectors_kb {hw_kb}); submit I/O of at most {max_kb} KiB if the split matters"
            ),
        ),
        SplitFix::HardwareLimitUnknown => (
            max_sectors_detail(),
            format!(
                "the hardware limit, max_hw_sectors_kb, is not known here, so whether the cap can be raised is not either: read both (grep . {max_sectors_file} {}); if max_hw_sectors_kb is larger, raise the cap toward it: echo <kb> > {max_sectors_file}",
                sys_file(disk, "queue/max_hw_sectors_kb"),
            ),
        ),
        SplitFix::MovePartitionStart { start: aligned } => {
            let start = evidence
                .partition
                .map_or(0, |partition| partition.partition_start);
            (
                format!(
                    "The kernel ends split pieces on absolute {pbs}-byte physical-block boundaries, and {name} starts at sector {start}, {} sectors past one, so every large I/O gets a short extra piece.",
                    start % pbs_sectors
                ),
                format!(
                    "recreate {name} starting at a multiple of {pbs_sectors} sectors, e.g. sector {aligned} (1 MiB aligned), with a size that is a multiple of {pbs_sectors} sectors"
                ),
            )
        }
        SplitFix::AlignIoOffsets => (
            format!(
                "The kernel ends split pieces on absolute {pbs}-byte physical-block boundaries and these I/Os did not start on one."
            ),
            format!("align I/O offsets on {name} to {pbs} bytes"),
        ),
        SplitFix::AlignToChunks => (
            format!(
                "The device splits I/O at every {}-sector chunk boundary (its chunk_sectors, or the chunk of the RAID or stripe it is), counted from its start: I/O larger than a chunk is cut by design, one piece per chunk.",
                evidence.chunk_sectors
            ),
            format!(
                "align {name}'s start and the I/O to {} sectors ({} KiB chunks)",
                evidence.chunk_sectors,
                u64::from(evidence.chunk_sectors) / 2
            ),
        ),
        SplitFix::FewerSegments => (
            format!(
                "The pieces are far below {}: the bios carried more memory segments than max_segments ({}) allows.",
                match known(evidence.max_sectors_kb) {
                    Some(max_kb) => format!("max_sectors_kb ({max_kb} KiB)"),
                    None => "the queue's size cap".to_string(),
                },
                evidence.max_segments
            ),
            format!(
                "use fewer, larger, physically contiguous buffers (page-aligned or huge pages) or I/O of at most {} pages; max_segments {} is a driver limit of {disk}",
                evidence.max_segments, evidence.max_segments
            ),
        ),
        SplitFix::SmallerIo { max_kb } => (
            format!(
                "Every segment was full at max_segment_size ({} bytes) and there were max_segments ({}) of them.",
                evidence.max_segment_size, evidence.max_segments
            ),
            format!(
                "submit I/O of at most {max_kb} KiB on {disk}; max_segment_size is a driver limit"
            ),
        ),
        SplitFix::AlignedBuffers => (
            format!(
                "The device has a virt boundary (mask {:#x}): buffers that start or end inside a {}-byte page cannot share a request segment list.",
                evidence.virt_boundary_mask,
                evidence.virt_boundary_mask.saturating_add(1)
            ),
            format!(
                "use buffers aligned to {} bytes with lengths a multiple of it (e.g. a 4096-byte block size)",
                evidence.virt_boundary_mask.saturating_add(1)
            ),
        ),
        SplitFix::AlignDiscards => match known(evidence.discard_granularity) {
            Some(granularity) => (
                format!(
                    "Discards are split on absolute discard_granularity ({granularity} bytes) boundaries."
                ),
                format!("align {name}'s start and discard ranges to {granularity} bytes"),
            ),
            None => (
                "Discards are split on absolute discard_granularity boundaries (its value is not known here).".to_string(),
                format!(
                    "read the granularity (cat {}) and align {name}'s start and discard ranges to it",
                    sys_file(disk, "queue/discard_granularity")
                ),
            ),
        },
        SplitFix::SetDiscardMaxBytes { to_bytes } => {
            let grid = pbs.max(4096);
            let off_grid = match evidence.discard_max_bytes % grid {
                0 => String::new(),
                _ => format!(
                    " It is not a multiple of {}, so every piece after the first starts off the {} grid.",
                    exact_size(grid),
                    exact_size(grid)
                ),
            };
            (
                format!(
                    "Each piece is discard_max_bytes = {} bytes, the queue's discard cap (the device takes up to {} bytes, discard_max_hw_bytes).{off_grid}",
                    evidence.discard_max_bytes, evidence.discard_max_hw_bytes
                ),
                format!(
                    "set {} to {to_bytes} (a multiple of {} within discard_max_hw_bytes)",
                    sys_file(disk, "queue/discard_max_bytes"),
                    exact_size(grid),
                ),
            )
        }
        SplitFix::AtCryptLimit => (
            format!(
                "Each piece is dm-crypt's cap on one {} ({}): 128 KiB since Linux 6.11 (its {} module parameter can lower it; since the 2025 zone fix, in stable kernels too, not raise it), or 1 MiB per write before; it bounds the encryption work per request.",
                evidence.op.as_str(),
                crypt_cap(evidence),
                crypt_parameter(evidence)
            ),
            format!(
                "none at {disk}: dm-crypt passes down no larger pieces. The disks below may merge them again (their commands are what it costs); if not, and the pieces matter, submit I/O of at most that size"
            ),
        ),
        SplitFix::AtDiscardLimit => {
            let limit = match evidence.discard_max_bytes {
                0 => format!(
                    "the device's discard limit, which the trace does not give; the pieces are {} (median command)",
                    exact_size(evidence.command_size_p50)
                ),
                bytes => format!("discard_max_bytes = {}, the device's own ceiling", exact_size(bytes)),
            };
            (
                format!("The kernel cuts a discard only where it exceeds {limit}."),
                format!(
                    "none needed at the queue: {disk} takes discards of at most that size; the extra commands are the device's cost of a large discard"
                ),
            )
        }
        SplitFix::AlignToOwnBoundaries { boundary_sectors } => {
            let boundary = match boundary_sectors {
                0 => String::new(),
                sectors => format!(
                    " Every split point is a multiple of {sectors} sectors ({}), so its chunk or target size divides that; I/O that starts off such a boundary gets a short first piece.",
                    exact_size(sectors * 512)
                ),
            };
            (
                format!(
                    "No queue limit explains the split points, and {disk} is bio-based (device-mapper or md): it splits I/O at its own boundaries, where a target ends or a stripe chunk does.{boundary}"
                ),
                format!(
                    "align the I/O on {name} to {disk}'s chunk or target boundaries (`dmsetup table {}`, or `mdadm --detail` for md)",
                    kernel_name(disk),
                ),
            )
        }
        SplitFix::CheckStackedDevices => (
            "No queue limit of this device explains the split points.".to_string(),
            format!(
                "check for stacked devices (device-mapper, md) or inline encryption above {disk}, which split on their own limits"
            ),
        ),
    }
}

/// Raise the cap: what it buys, the command, and how the raise outlives the
/// next probe of the disk, by where the cap came from.
fn raise_max_sectors_fix(
    disk: &str,
    max_sectors_file: &str,
    evidence: &SplitAmplificationEvidence,
    to_kb: u64,
) -> String {
    let max_kb = evidence.max_sectors_kb;
    let hw_kb = evidence.max_hw_sectors_kb;
    let buys = match known(max_kb) {
        Some(max_kb) => format!(
            "I/O of up to {to_kb} KiB then goes down as one command instead of one per {max_kb} KiB"
        ),
        None => format!("I/O of up to {to_kb} KiB then goes down as one command"),
    };
    let keep = match evidence.max_sectors_source {
        Some(source) if source.set_by_the_kernel() => format!(
            "The kernel sets the cap again ({}) whenever it probes {disk} anew (a reboot, a re-plug, a driver reload); to keep the raise, add a udev rule, e.g. /etc/udev/rules.d/60-max-sectors.rules: ACTION==\"add|change\", SUBSYSTEM==\"block\", KERNEL==\"{}\", ATTR{{queue/max_sectors_kb}}=\"{to_kb}\"",
            max_sectors::describe(source, max_kb, evidence.optimal_io_size),
            kernel_name(disk),
        ),
        Some(MaxSectorsSource::UserOrUnknown) => "The current cap is no kernel default: if a udev rule or boot script sets it (grep -r max_sectors_kb /etc/udev/rules.d /usr/lib/udev/rules.d), change it there, or it comes back".to_string(),
        _ => String::new(),
    };
    let raise = format!(
        "raise {max_sectors_file} to {to_kb} (max_hw_sectors_kb is {hw_kb}, the most it takes): echo {to_kb} > {max_sectors_file}; {buys}."
    );
    if keep.is_empty() {
        raise
    } else {
        format!("{raise} {keep}.")
    }
}

/// The `dm_crypt` module parameter that caps the finding's op.
fn crypt_parameter(evidence: &SplitAmplificationEvidence) -> &'static str {
    match evidence.op {
        crate::model::Op::Read => "max_read_size",
        _ => "max_write_size",
    }
}

fn crypt_cap(evidence: &SplitAmplificationEvidence) -> String {
    exact_size(
        evidence
            .crypt_max_io_bytes
            .unwrap_or(evidence.command_size_p50),
    )
}
