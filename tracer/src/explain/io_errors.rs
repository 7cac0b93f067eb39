//! `io_errors`: which commands failed, with which statuses and where, and
//! what to look at. The fix is a repair of the device or its path, so it is
//! a list of places to look, not a setting.

use std::collections::BTreeMap;

use super::{dev_node, kernel_name, sys_file, with_numbered_note, WhoPays, Words};
use crate::model::{Finding, IoErrorsEvidence, Op};

/// Who pays: whoever waited on the failed commands; the fix is a repair,
/// so no command is removed.
pub(super) const WHO_PAYS: WhoPays = WhoPays::NoCommandCost;

/// "EIO ×2, ETIMEDOUT ×1": statuses, the most frequent first (then by name).
pub fn statuses(errors: &BTreeMap<String, u64>) -> String {
    let mut sorted: Vec<(&String, &u64)> = errors.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    sorted
        .iter()
        .map(|(status, count)| format!("{status} ×{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "1 command", "3 commands".
fn commands(count: u64) -> String {
    match count {
        1 => "1 command".to_string(),
        n => format!("{n} commands"),
    }
}

/// What a status usually means, for the ones that point somewhere.
fn hint(status: &str) -> Option<&'static str> {
    Some(match status {
        "ENOSPC" => "ENOSPC: the store behind the device is full (a loop device's backing file system, a thin pool, an overcommitted virtual disk)",
        "ETIMEDOUT" => "ETIMEDOUT: commands timed out, the device or its transport stopped answering",
        "ENODATA" => "ENODATA: a medium error, sectors the device cannot read or write",
        "ENOLINK" => "ENOLINK: a transport error, the path to the device failed",
        "EREMOTEIO" => "EREMOTEIO: the target device reported an error",
        "EOPNOTSUPP" => "EOPNOTSUPP: the device refused an operation it does not support (discard, write zeroes, a flag)",
        "ENODEV" => "ENODEV: the device went offline",
        "EILSEQ" => "EILSEQ: an integrity (protection information) check failed",
        "EIO" => "EIO: the driver's generic I/O error; the kernel log names the cause",
        _ => return None,
    })
}

/// Statuses that name the device or its path as the one that failed.
const DEVICE_STATUSES: [&str; 6] = [
    "ETIMEDOUT",
    "ENODATA",
    "ENOLINK",
    "EREMOTEIO",
    "ENODEV",
    "EILSEQ",
];

/// A status names the device or its path: a medium error, a timeout, a
/// lost link, a device gone.
fn named_device(evidence: &IoErrorsEvidence) -> bool {
    evidence
        .errors
        .keys()
        .any(|status| DEVICE_STATUSES.contains(&status.as_str()))
}

/// Writes failed with the generic EIO, and no status names the device: a
/// zoned device refusing writes off its write pointer would look so.
fn zone_order_possible(evidence: &IoErrorsEvidence) -> bool {
    !named_device(evidence)
        && evidence
            .failed_ops
            .get(&Op::Write)
            .is_some_and(|write| write.errors.contains_key("EIO"))
}

/// What the statuses say of the cause, and no more: a status that names
/// the device or its path is said as such; a generic one (EIO) only says
/// the command failed below the block layer, so the causes it can stand
/// for are listed, among them, for failed writes, a zoned device's
/// refusal of a write off its zone's write pointer, which is the host's
/// doing (writes to one zone dispatched out of order), not the device's.
fn cause(evidence: &IoErrorsEvidence) -> String {
    if named_device(evidence) {
        return "The device, or what is behind it, reported the failure, and its status names the device or its path: this is a device or path problem (failing media, the transport or its cabling, a full backing store, a dm target that returns errors), not a geometry one, and no partition or queue setting changes it.".to_string();
    }
    let zoned = match zone_order_possible(evidence) {
        true => ", or, on a zoned device (SMR disk, ZNS namespace, zoned null_blk), a write that did not start at its zone's write pointer, which it refuses with the same EIO: writes to one zone dispatched out of order by the host (its scheduler or submitter), not a fault of the device",
        false => "",
    };
    format!(
        "The driver, or what is behind it, reported the failure; the status does not say why, and the trace shows only that the command failed. It can be failing media, the transport or its cabling, a full backing store or a dm target that returns errors{zoned}. It is not a geometry problem."
    )
}

pub(super) fn words(finding: &Finding, evidence: &IoErrorsEvidence) -> Words {
    let disk = &finding.disk;
    let ops = evidence
        .failed_ops
        .iter()
        .map(|(op, failed)| {
            let place = match failed.sectors {
                Some(sectors) if sectors.lowest_failed_sector == sectors.highest_failed_sector => {
                    format!(", at sector {} of {disk}", sectors.lowest_failed_sector)
                }
                Some(sectors) => format!(
                    ", within sectors {}-{} of {disk}",
                    sectors.lowest_failed_sector, sectors.highest_failed_sector
                ),
                None => String::new(),
            };
            format!(
                "{} of {} {} commands ({}{place})",
                failed.failed_commands,
                failed.commands,
                op.as_str(),
                statuses(&failed.errors),
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let user_ios = match evidence.failed_user_ios {
        0 => String::new(),
        1 => " 1 user I/O failed with them: its data was not read or written.".to_string(),
        n => format!(" {n} user I/Os failed with them: their data was not read or written."),
    };
    let hints = evidence
        .errors
        .keys()
        .filter_map(|status| hint(status))
        .collect::<Vec<_>>();
    let hints = match hints.is_empty() {
        true => String::new(),
        false => format!(" {}.", hints.join("; ")),
    };
    if evidence.only_refusals() {
        return Words {
            explanation: format!(
                "{} on {} {} refused as not supported: {ops}. The device, or what is behind it (a loop device's backing file system, a dm target), does not offer the operation, typically write zeroes, discard or a flag; the kernel then stops sending it, and callers such as blkdev_issue_zeroout fall back to plain writes. Not a device or path fault, and not a geometry one.",
                commands(evidence.failed_commands),
                finding.device,
                if evidence.failed_commands == 1 { "was" } else { "were" },
            ),
            fix: with_numbered_note(
                format!(
                    "nothing to repair; to see what {disk} offers: grep . {} {}",
                    sys_file(disk, "queue/write_zeroes_max_bytes"),
                    sys_file(disk, "queue/discard_max_bytes"),
                ),
                [disk.as_str()],
            ),
        };
    }
    let cause = cause(evidence);
    let explanation = format!(
        "{} on {} completed with an error: {ops}.{user_ios} {cause}{hints}",
        commands(evidence.failed_commands),
        finding.device,
    );
    let (name, node) = (kernel_name(disk), dev_node(disk));
    let fix = [
        format!("read the kernel's own error lines (status, sector, driver): dmesg | grep -i '{name}'"),
        format!("check the media: smartctl -a {node} (reallocated, pending and uncorrectable sectors; NVMe: nvme smart-log {node})"),
        "check the path: cables, the HBA or controller, multipath -ll, the host side of a virtual disk".to_string(),
        format!("for a loop device, its backing file's file system (losetup -l {node}, then df on it); for dm, the target (dmsetup status, dmsetup table); for a thin pool, its data and metadata use (lvs)"),
    ]
    .join("\n");
    let fix = match zone_order_possible(evidence) {
        true => format!(
            "{fix}\nif {disk} is zoned (cat {}: host-managed or host-aware), look at the order of the writes to the failed zone: a write issued before the lower sectors of its zone were written is the host's (before Linux 6.10 a zoned device needs the mq-deadline scheduler, whose zone write locking keeps a zone's writes in order: cat {})",
            sys_file(disk, "queue/zoned"),
            sys_file(disk, "queue/scheduler"),
        ),
        false => fix,
    };
    Words {
        explanation,
        fix: with_numbered_note(fix, [disk.as_str()]),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::statuses;
    use crate::explain::{who_pays, WhoPays};
    use crate::model::{Code, Evidence, IoErrorsEvidence, WhatIf, WhatIfScope};

    #[test]
    fn statuses_are_said_most_frequent_first() {
        let errors = BTreeMap::from([
            ("EIO".to_string(), 1),
            ("ENOSPC".to_string(), 7),
            ("EAGAIN".to_string(), 1),
        ]);
        assert_eq!(statuses(&errors), "ENOSPC ×7, EAGAIN ×1, EIO ×1");
        assert_eq!(statuses(&BTreeMap::new()), "");
    }

    /// Failed commands need a repair, not fewer commands: no what-if to
    /// time, and no workload `run` would name as paying more.
    #[test]
    fn nobody_pays_it_in_commands() {
        assert_eq!(who_pays(Code::IoErrors), WhoPays::NoCommandCost);
        let mut evidence = Evidence::IoErrors(IoErrorsEvidence {
            failed_commands: 1,
            commands: 8,
            failed_user_ios: 1,
            errors: BTreeMap::from([("EIO".to_string(), 1)]),
            failed_ops: BTreeMap::new(),
            partition: None,
        });
        assert_eq!(evidence.what_if_scope(), WhatIfScope::NoWhatIf);
        evidence.set_what_if(WhatIf::default());
        assert_eq!(evidence.what_if(), None);
    }
}
