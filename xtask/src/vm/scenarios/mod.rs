//! The scenario matrix: each boots the guest with its own disks, runs
//! `xtask/vm/scenarios/<name>.sh` inside, and judges the results it left.
//! One file here per script (`seed-512e.sh` is judged in `seed_512e.rs`),
//! holding the scenario's disks and its evaluator; what several share is below.

use std::time::Duration;

use serde::Serialize;

use super::check::{Check, Results};
use super::kernel::Line;
use super::qemu::{Bus, Disk};

mod blk_oracle;
mod cgroup_writeback;
mod nvme_virt_boundary;
mod requeue_fix;
mod scsi_debug_io_opt;
mod seed_512e;
mod stacks;
mod throttled;

pub struct Scenario {
    pub name: &'static str,
    pub summary: &'static str,
    pub disks: Vec<Disk>,
    pub timeout: Duration,
    /// Disks for a second boot after the first (none: one boot). The same
    /// script runs again; that boot's files come back prefixed `fixed.`.
    pub fixed_disks: Vec<Disk>,
    /// Judges the results a guest running `Line`'s kernel left.
    pub evaluate: fn(&Results, &Line) -> Vec<Check>,
    /// Host tools beyond the shared ones, in an initramfs of this
    /// scenario's own: fio's 80 MB of libraries in every guest changed its
    /// memory enough that the throttled split's scattered pages merged.
    pub extra_tools: &'static [&'static str],
}

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    vec![
        seed_512e::scenario(),
        scsi_debug_io_opt::scenario(),
        nvme_virt_boundary::scenario(),
        blk_oracle::scenario(),
        stacks::scenario(),
        requeue_fix::scenario(),
        throttled::scenario(),
        cgroup_writeback::scenario(),
    ]
}

const MIB: u64 = 1 << 20;
/// The seed disk's 512e geometry: 512-byte logical, 4096-byte physical sectors.
const SEED_512E: Bus = Bus::VirtioBlk {
    logical: 512,
    physical: 4096,
};

/// The seed report's three layouts on a 256 MiB disk, keeping start and size
/// residues modulo 8 (seed: 14281785/27647865, 14282752/27646898, 14282752/27660288).
const SEED_LAYOUTS: [(u64, u64); 3] = [(1785, 400_001), (2048, 400_002), (2048, 522_240)];

/// Descriptors in the requeue disk's ring: with 2 per request and no indirect
/// descriptors, virtio-blk allows 8 requests in flight, but one of up to
/// 14 segments takes 16, so a split 1 MiB write fills the ring at once.
const REQUEUE_RING: u16 = 16;
const REQUEUE_DISK: Bus = Bus::VirtioBlkSmallRing {
    queue_size: REQUEUE_RING,
    indirect_desc: false,
};
/// VIRTIO_RING_F_INDIRECT_DESC: its bit in the guest's `virtio.features`.
const INDIRECT_DESC_BIT: usize = 28;

/// How far the issues after a fix may be from `what_if.commands_after_fix` (issue #10).
const WHAT_IF_TOLERANCE: f64 = 0.2;

/// The partition's geometry as the guest kernel saw it, against what the disk was built with.
fn expect_geometry(what: &str, results: &Results, file: &str, wanted: &[(&str, &str)]) -> Check {
    let expected = wanted
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(" ");
    match results.values(file) {
        Err(why) => Check::missing(what, expected, why),
        Ok(values) => {
            let found = wanted
                .iter()
                .map(|(key, _)| format!("{key}={}", values.get(*key).map_or("?", String::as_str)))
                .collect::<Vec<_>>()
                .join(" ");
            let pass = wanted
                .iter()
                .all(|(key, value)| values.get(*key).is_some_and(|v| v == value));
            Check::new(what, expected, found, pass)
        }
    }
}

/// Every probe attached on the guest kernel (`unsupported_probes` empty).
fn expect_all_probes(what: &str, results: &Results, report_name: &str) -> Check {
    let expected = "unsupported_probes empty";
    match results.report(report_name) {
        Ok(report) => {
            let unsupported = &report.unsupported_probes;
            Check::new(
                what,
                expected,
                if unsupported.is_empty() {
                    "all attached".to_string()
                } else {
                    unsupported.join("; ")
                },
                unsupported.is_empty(),
            )
        }
        Err(why) => Check::missing(what, expected, why),
    }
}

/// "254:1" as the blk tracer's (major, minor).
fn device_number(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// A part of a report as the report printed it (keys sorted), for a check's
/// found column.
fn json_text(part: &impl Serialize) -> String {
    serde_json::to_value(part).map_or_else(|err| format!("({err})"), |value| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_layouts_keep_the_seeds_residues_modulo_8() {
        let seed = [
            (14_281_785u64, 27_647_865u64),
            (14_282_752, 27_646_898),
            (14_282_752, 27_660_288),
        ];
        for ((start, size), (seed_start, seed_size)) in SEED_LAYOUTS.iter().zip(seed) {
            assert_eq!(start % 8, seed_start % 8);
            assert_eq!(size % 8, seed_size % 8);
            assert!(start + size <= 256 * MIB / 512);
        }
        // Layout 3 ends on the disk's last sector, like the seed's.
        assert_eq!(SEED_LAYOUTS[2].0 + SEED_LAYOUTS[2].1, 256 * MIB / 512);
    }

    #[test]
    fn scenario_names_are_unique_and_have_scripts() {
        let scenarios = all();
        let mut names: Vec<_> = scenarios.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), scenarios.len());
        let dir = crate::util::workspace_root().join("xtask/vm/scenarios");
        let here = crate::util::workspace_root().join("xtask/src/vm/scenarios");
        for name in names {
            assert!(
                dir.join(format!("{name}.sh")).is_file(),
                "{name}.sh missing"
            );
            // Its evaluator sits in the file named after the script.
            let module = name.replace('-', "_");
            assert!(
                here.join(format!("{module}.rs")).is_file(),
                "{module}.rs missing"
            );
        }
    }
}
