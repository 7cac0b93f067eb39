//! `io_errors`: the device, or what is behind it, completed commands with an
//! error. Live only, and no what-if: the fix is a repair of the device or its
//! path, not a setting the engine can replay. A warning, but for commands
//! only refused as not supported (EOPNOTSUPP), which are `info`.

use std::collections::BTreeMap;

use super::{partition_place, Check, DeviceTraffic};
use crate::blk::errno_name;
use crate::engine::stats::OpStats;
use crate::model::{
    Code, Evidence, FailedOp, FailedSectors, Finding, IoErrorsEvidence, Op, Severity,
};

/// `io_errors` needs this many failed commands on one device: one is
/// already a device that lost or refused data.
pub const MIN_FAILED_COMMANDS: u64 = 1;

pub(super) struct IoErrors;

/// Failed commands by status name.
fn by_status(stats: &OpStats) -> BTreeMap<String, u64> {
    let mut errors = BTreeMap::new();
    for &(error, count) in &stats.errors {
        *errors.entry(errno_name(error)).or_insert(0) += count;
    }
    errors
}

impl Check for IoErrors {
    fn code(&self) -> Code {
        Code::IoErrors
    }

    fn diagnose(&self, traffic: &DeviceTraffic<'_>) -> Option<Finding> {
        let failed_ops: BTreeMap<Op, FailedOp> = Op::ALL
            .iter()
            .filter_map(|&op| traffic.op(op).map(|stats| (op, stats)))
            .filter(|(_, stats)| stats.failed_commands > 0)
            .map(|(op, stats)| {
                let failed = FailedOp {
                    failed_commands: stats.failed_commands,
                    commands: stats.commands,
                    failed_user_ios: stats.failed_user_ios,
                    errors: by_status(stats),
                    sectors: stats.failed_sectors.map(|(first, last)| FailedSectors {
                        lowest_failed_sector: first,
                        highest_failed_sector: last,
                    }),
                };
                (op, failed)
            })
            .collect();
        let failed_commands: u64 = failed_ops.values().map(|op| op.failed_commands).sum();
        if failed_commands < MIN_FAILED_COMMANDS {
            return None;
        }
        let mut errors = BTreeMap::new();
        for op in failed_ops.values() {
            for (status, count) in &op.errors {
                *errors.entry(status.clone()).or_insert(0) += count;
            }
        }
        let evidence = IoErrorsEvidence {
            failed_commands,
            commands: traffic.total.commands,
            failed_user_ios: failed_ops.values().map(|op| op.failed_user_ios).sum(),
            errors,
            failed_ops,
            partition: partition_place(traffic.partition),
        };
        // A refusal is the device's answer to an operation it does not
        // offer (mkfs's write zeroes on a loop over tmpfs), which the kernel
        // falls back from: worth saying, not a warning.
        let severity = if evidence.only_refusals() {
            Severity::Info
        } else {
            Severity::Warning
        };
        Some(Finding::new(
            traffic.name.clone(),
            traffic.disk_name().to_string(),
            severity,
            Evidence::IoErrors(evidence),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::{self, complete, engine, feed, issue, queue, LOOP0, MS, P1};
    use crate::engine::Engine;
    use tracer_common::BlockEvent;

    const ENOSPC: i32 = -28;
    const EIO: i32 = -5;

    fn failed(event: BlockEvent, error: i32) -> BlockEvent {
        BlockEvent { error, ..event }
    }

    /// 64 KiB writes to loop0 itself, one every 256 sectors from 30720 (past
    /// both partitions); the ones `fails` picks fail with its errno.
    fn writes(engine: &mut Engine, count: u64, fails: impl Fn(u64) -> i32) {
        for index in 0..count {
            let sector = 30720 + index * 256;
            let ts = MS * (index + 1);
            feed(
                engine,
                &[
                    queue(ts, LOOP0, sector, 128),
                    issue(ts, LOOP0, sector, 128),
                    failed(complete(ts + MS / 2, LOOP0, sector, 128), fails(index)),
                ],
            );
        }
    }

    fn io_errors(engine: &Engine) -> Vec<Finding> {
        engine
            .diagnoses()
            .into_iter()
            .filter(|finding| finding.code == Code::IoErrors)
            .collect()
    }

    #[test]
    fn healthy_traffic_raises_nothing() {
        let mut engine = engine();
        writes(&mut engine, 32, |_| 0);
        assert_eq!(io_errors(&engine), Vec::new());
    }

    #[test]
    fn one_failed_command_is_a_warning_with_its_status_and_sectors() {
        let mut engine = engine();
        writes(&mut engine, 32, |index| match index {
            3 => ENOSPC,
            10 => ENOSPC,
            20 => EIO,
            _ => 0,
        });
        let found = io_errors(&engine);
        assert_eq!(found.len(), 1, "{found:?}");
        let finding = &found[0];
        assert_eq!(
            (finding.device.as_str(), finding.disk.as_str()),
            ("loop0", "loop0")
        );
        assert_eq!(finding.severity, Severity::Warning);
        let Evidence::IoErrors(evidence) = &finding.evidence else {
            panic!("not io_errors: {finding:?}");
        };
        assert_eq!(evidence.failed_commands, 3);
        assert_eq!(evidence.commands, 32);
        assert_eq!(evidence.failed_user_ios, 3);
        assert_eq!(
            evidence.errors,
            BTreeMap::from([("EIO".to_string(), 1), ("ENOSPC".to_string(), 2)])
        );
        let write = &evidence.failed_ops[&Op::Write];
        assert_eq!(
            write.sectors,
            Some(FailedSectors {
                lowest_failed_sector: 30720 + 3 * 256,
                highest_failed_sector: 30720 + 20 * 256 + 127,
            })
        );
        assert_eq!(evidence.failed_ops.len(), 1);
        assert_eq!(finding.evidence.what_if(), None);
        // A single failure is enough.
        let mut engine = tests::engine();
        writes(&mut engine, 4, |index| if index == 1 { EIO } else { 0 });
        assert_eq!(io_errors(&engine).len(), MIN_FAILED_COMMANDS as usize);
    }

    #[test]
    fn commands_refused_as_not_supported_are_info() {
        const EOPNOTSUPP: i32 = -95;
        let mut engine = engine();
        writes(
            &mut engine,
            4,
            |index| if index == 2 { EOPNOTSUPP } else { 0 },
        );
        let found = io_errors(&engine);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, Severity::Info);
        // With any other status beside it, a warning again.
        let mut engine = tests::engine();
        writes(&mut engine, 4, |index| match index {
            1 => EOPNOTSUPP,
            2 => EIO,
            _ => 0,
        });
        assert_eq!(io_errors(&engine)[0].severity, Severity::Warning);
    }

    #[test]
    fn a_failure_on_a_partition_names_the_partition() {
        let mut engine = engine();
        let ts = MS;
        feed(
            &mut engine,
            &[
                BlockEvent {
                    aux_dev: P1.to_kernel(),
                    aux_sector: 0,
                    ..crate::engine::tests::event(
                        tracer_common::EventKind::Remap,
                        ts,
                        LOOP0,
                        2048,
                        8,
                    )
                },
                queue(ts, LOOP0, 2048, 8),
                issue(ts, LOOP0, 2048, 8),
                failed(complete(ts + MS, LOOP0, 2048, 8), EIO),
            ],
        );
        let found = io_errors(&engine);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].device.as_str(), found[0].disk.as_str()),
            ("loop0p1", "loop0")
        );
        let Evidence::IoErrors(evidence) = &found[0].evidence else {
            panic!("not io_errors");
        };
        // Sectors of the disk, and the partition's place beside them.
        assert_eq!(
            evidence.failed_ops[&Op::Write].sectors,
            Some(FailedSectors {
                lowest_failed_sector: 2048,
                highest_failed_sector: 2055,
            })
        );
        assert_eq!(evidence.partition.map(|p| p.partition_start), Some(2048));
    }
}
