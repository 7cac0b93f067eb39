//! Where a disk's `max_sectors_kb` comes from (issue #49): the hardware's
//! own limit, the block layer's default cap below it, the device's optimal
//! I/O size, or something else (a user, a udev rule, a driver rule not known
//! here). Read from the numbers sysfs gives and the kernel's version, since
//! the rules changed:
//!
//! - **Default cap.** A driver sets `max_hw_sectors`; unless something else
//!   decides, the block layer caps `max_sectors` below it at
//!   `BLK_DEF_MAX_SECTORS` (include/linux/blkdev.h; 2560 sectors, 1280 KiB,
//!   since d2be537c3ba3 in 2015), later renamed `BLK_DEF_MAX_SECTORS_CAP`,
//!   and raised to 8192 sectors, 4 MiB, by 9b8b84879d4a ("block: Increase
//!   BLK_DEF_MAX_SECTORS_CAP", which moved it into block/blk.h) in 6.17.
//! - **Optimal I/O size, before 6.11: sd's rule.** `sd_revalidate_disk`
//!   (drivers/scsi/sd.c, 6.1) sets `io_opt` from the Block Limits VPD page's
//!   OPTIMAL TRANSFER LENGTH when `sd_validate_opt_xfer_size` accepts it
//!   (within the device's maximum and at least a page), and on the disk's
//!   first scan sets `max_sectors` to the same `rw_max` (capped by
//!   `max_hw_sectors`); without a valid one, `rw_max` is the default cap. So a
//!   SCSI disk (sd: SAS, SATA through libata, USB storage, virtio-scsi,
//!   scsi_debug) reporting 128 KiB gets 128 KiB commands. Other drivers
//!   (rbd, before 6.11) set their cap to their `io_opt` the same way.
//! - **Optimal I/O size, 6.11 on: the block layer's rule.** a23634644afc
//!   ("block: take io_opt and io_min into account for max_sectors") removed
//!   sd's `rw_max` and had `blk_validate_limits` (block/blk-settings.c) set
//!   `max_sectors` to `io_opt`; 37105615f731 ("block: don't reduce
//!   max_sectors based on io_opt"), in the same 6.11 merge, limited that to an
//!   `io_opt` above the default cap. Since 6.11 an optimal I/O size only
//!   raises the cap (up to `max_hw_sectors`), never lowers it: the same
//!   128 KiB disk gets the default cap.
//!
//! A `max_sectors_kb` the user wrote is kept over all of these until the disk
//! is probed anew (a reboot, a re-plug, a driver reload), which sets the
//! rule's cap again: sd keeps it over a rescan (`echo 1 >
//! /sys/block/sda/device/rescan`, measured on 6.1, 6.12 and 7 in the
//! scsi-debug-io-opt VM scenario), but nothing keeps it over a new probe, so
//! only a udev rule (or a boot script) makes it persist.
//!
//! Measured there on scsi_debug with a 128 KiB `io_opt` (docs/kernels.md):
//! 6.1 gives 128 KiB (`optimal_io_size`), 6.12 1280 KiB and 7.3 4 MiB
//! (`kernel_default_cap`).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The block layer's default cap before Linux 6.17 (`BLK_DEF_MAX_SECTORS`,
/// later `BLK_DEF_MAX_SECTORS_CAP`: 2560 sectors).
pub const DEFAULT_CAP_KB_BEFORE_6_17: u32 = 1280;
/// The default cap since 9b8b84879d4a in 6.17 (8192 sectors).
pub const DEFAULT_CAP_KB_SINCE_6_17: u32 = 4096;

/// Where `max_sectors_kb` comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxSectorsSource {
    /// Equal to `max_hw_sectors_kb`: the driver's or device's own limit;
    /// nothing to raise.
    Hardware,
    /// The block layer's default cap below the hardware limit: 1280 KiB
    /// before Linux 6.17, 4 MiB since.
    KernelDefaultCap,
    /// The device's optimal I/O size (`optimal_io_size`), by sd's rule
    /// before 6.11 or the block layer's (an `io_opt` above the default cap)
    /// since.
    OptimalIoSize,
    /// Anything else: a user's `echo` into sysfs, a udev rule, or a driver
    /// rule this tool does not know. Also a cap never read (0).
    UserOrUnknown,
}

impl MaxSectorsSource {
    pub fn key(self) -> &'static str {
        match self {
            MaxSectorsSource::Hardware => "hardware",
            MaxSectorsSource::KernelDefaultCap => "kernel_default_cap",
            MaxSectorsSource::OptimalIoSize => "optimal_io_size",
            MaxSectorsSource::UserOrUnknown => "user_or_unknown",
        }
    }

    /// Whether the kernel sets this value again when it probes the disk
    /// anew, over a user's raise that no udev rule repeats.
    pub fn set_by_the_kernel(self) -> bool {
        matches!(
            self,
            MaxSectorsSource::KernelDefaultCap | MaxSectorsSource::OptimalIoSize
        )
    }
}

/// A kernel's major and minor version, from `uname -r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        KernelVersion { major, minor }
    }

    /// "6.1.0-28-amd64", "6.12.117+deb12-amd64", "7.3.4+deb13-amd64".
    pub fn parse(release: &str) -> Option<Self> {
        let mut parts = release.trim().split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()?;
        Some(KernelVersion { major, minor })
    }

    /// The kernel whose sysfs `sysfs_root` is: the running one for `/sys`
    /// (`/proc/sys/kernel/osrelease`); for a fixture tree, its `osrelease`
    /// file if it has one, else unknown.
    pub fn of_sysfs(sysfs_root: &Path) -> Option<Self> {
        let file = if sysfs_root == Path::new("/sys") {
            Path::new("/proc/sys/kernel/osrelease").to_path_buf()
        } else {
            sysfs_root.join("osrelease")
        };
        Self::parse(&std::fs::read_to_string(file).ok()?)
    }
}

/// Linux 6.11: the block layer's io_opt rule replaces sd's.
const BLOCK_IO_OPT_RULE: KernelVersion = KernelVersion::new(6, 11);
/// Linux 6.17: the default cap goes from 1280 KiB to 4 MiB.
const CAP_4_MIB: KernelVersion = KernelVersion::new(6, 17);

/// The block layer's default caps this kernel may have (both when its
/// version is unknown).
pub fn default_caps_kb(kernel: Option<KernelVersion>) -> &'static [u32] {
    match kernel {
        Some(version) if version >= CAP_4_MIB => &[DEFAULT_CAP_KB_SINCE_6_17],
        Some(_) => &[DEFAULT_CAP_KB_BEFORE_6_17],
        None => &[DEFAULT_CAP_KB_BEFORE_6_17, DEFAULT_CAP_KB_SINCE_6_17],
    }
}

/// Whether a kernel sets `max_sectors` to an optimal I/O size of
/// `io_opt_kb`: sd's rule before 6.11 takes any; the block layer's since
/// only one above the default cap (unknown kernel: either).
fn io_opt_rule_applies(io_opt_kb: u32, kernel: Option<KernelVersion>) -> bool {
    match kernel {
        Some(version) if version >= BLOCK_IO_OPT_RULE => {
            default_caps_kb(kernel).iter().all(|&cap| io_opt_kb > cap)
        }
        _ => true,
    }
}

/// Where a `max_sectors_kb` comes from, given its hardware limit, the
/// device's optimal I/O size in bytes (0: none) and the kernel (None:
/// unknown, either rule). Ties go to the limit that binds: equal to the
/// hardware limit is `hardware` whatever else it equals.
pub fn classify(
    max_sectors_kb: u32,
    max_hw_sectors_kb: u32,
    optimal_io_size: u32,
    kernel: Option<KernelVersion>,
) -> MaxSectorsSource {
    if max_sectors_kb == 0 {
        return MaxSectorsSource::UserOrUnknown;
    }
    if max_sectors_kb == max_hw_sectors_kb {
        return MaxSectorsSource::Hardware;
    }
    let io_opt_kb = optimal_io_size / 1024;
    if io_opt_kb != 0
        && optimal_io_size.is_multiple_of(1024)
        && max_sectors_kb == io_opt_kb
        && io_opt_rule_applies(io_opt_kb, kernel)
    {
        return MaxSectorsSource::OptimalIoSize;
    }
    if max_sectors_kb < max_hw_sectors_kb && default_caps_kb(kernel).contains(&max_sectors_kb) {
        return MaxSectorsSource::KernelDefaultCap;
    }
    MaxSectorsSource::UserOrUnknown
}

/// The source in words, for `check` and the split finding: "the device's
/// optimal I/O size, by sd's rule before Linux 6.11".
pub fn describe(source: MaxSectorsSource, max_sectors_kb: u32, optimal_io_size: u32) -> String {
    match source {
        MaxSectorsSource::Hardware => "the hardware's own limit".to_string(),
        MaxSectorsSource::KernelDefaultCap => match max_sectors_kb {
            DEFAULT_CAP_KB_SINCE_6_17 => {
                "the block layer's default cap, 4 MiB since Linux 6.17".to_string()
            }
            _ => "the block layer's default cap, 1280 KiB before Linux 6.17".to_string(),
        },
        // No kernel since 6.11 sets the cap to an io_opt at or below 1280
        // KiB, so such a one is sd's rule; above, either.
        MaxSectorsSource::OptimalIoSize if optimal_io_size <= DEFAULT_CAP_KB_BEFORE_6_17 * 1024 => {
            "the device's optimal I/O size, by sd's rule on kernels before 6.11".to_string()
        }
        MaxSectorsSource::OptimalIoSize => {
            "the device's optimal I/O size, by sd's rule before Linux 6.11 or the block layer's since"
                .to_string()
        }
        MaxSectorsSource::UserOrUnknown => {
            "not a kernel default: set by a user, a udev rule or a driver rule not known here"
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V6_1: Option<KernelVersion> = Some(KernelVersion::new(6, 1));
    const V6_12: Option<KernelVersion> = Some(KernelVersion::new(6, 12));
    const V7: Option<KernelVersion> = Some(KernelVersion::new(7, 3));
    const KIB: u32 = 1024;

    #[test]
    fn kernel_releases_parse() {
        for (release, wanted) in [
            ("6.1.0-28-amd64\n", (6, 1)),
            ("6.12.117+deb12-amd64", (6, 12)),
            ("7.3.4+deb13-amd64", (7, 3)),
            ("6.18.44-fc-v1300", (6, 18)),
            ("6.11", (6, 11)),
            ("6.11rc1", (6, 11)),
        ] {
            assert_eq!(
                KernelVersion::parse(release),
                Some(KernelVersion::new(wanted.0, wanted.1)),
                "{release}"
            );
        }
        assert_eq!(KernelVersion::parse(""), None);
        assert_eq!(KernelVersion::parse("linux"), None);
    }

    #[test]
    fn equal_to_the_hardware_limit_is_hardware() {
        assert_eq!(classify(512, 512, 0, V6_1), MaxSectorsSource::Hardware);
        // Below the default cap, the hardware binds first.
        assert_eq!(classify(256, 256, 0, V7), MaxSectorsSource::Hardware);
        // max == hw == io_opt: the hardware binds; nothing to raise.
        for kernel in [V6_1, V6_12, V7, None] {
            assert_eq!(
                classify(128, 128, 128 * KIB, kernel),
                MaxSectorsSource::Hardware
            );
        }
    }

    #[test]
    fn the_default_cap_follows_the_kernel() {
        assert_eq!(
            classify(1280, 32767, 0, V6_1),
            MaxSectorsSource::KernelDefaultCap
        );
        assert_eq!(
            classify(1280, 32767, 0, V6_12),
            MaxSectorsSource::KernelDefaultCap
        );
        assert_eq!(
            classify(4096, 32767, 0, V7),
            MaxSectorsSource::KernelDefaultCap
        );
        // The other era's cap is not this kernel's default.
        assert_eq!(
            classify(4096, 32767, 0, V6_12),
            MaxSectorsSource::UserOrUnknown
        );
        assert_eq!(
            classify(1280, 32767, 0, V7),
            MaxSectorsSource::UserOrUnknown
        );
        // Unknown kernel: either.
        assert_eq!(
            classify(4096, 32767, 0, None),
            MaxSectorsSource::KernelDefaultCap
        );
        assert_eq!(
            classify(1280, 32767, 0, None),
            MaxSectorsSource::KernelDefaultCap
        );
        assert_eq!(
            classify(1280, 32767, 0, Some(KernelVersion::new(6, 16))),
            MaxSectorsSource::KernelDefaultCap
        );
        assert_eq!(
            classify(4096, 32767, 0, Some(KernelVersion::new(6, 17))),
            MaxSectorsSource::KernelDefaultCap
        );
    }

    #[test]
    fn io_opt_by_sd_before_6_11_and_above_the_cap_since() {
        // The scsi-debug-io-opt disk: 128 KiB io_opt.
        assert_eq!(
            classify(128, 32767, 128 * KIB, V6_1),
            MaxSectorsSource::OptimalIoSize
        );
        assert_eq!(
            classify(128, 32767, 128 * KIB, Some(KernelVersion::new(6, 10))),
            MaxSectorsSource::OptimalIoSize
        );
        // Since 6.11 no kernel rule lowers the cap to a small io_opt: the
        // same numbers are someone's setting.
        assert_eq!(
            classify(128, 32767, 128 * KIB, V6_12),
            MaxSectorsSource::UserOrUnknown
        );
        assert_eq!(
            classify(128, 32767, 128 * KIB, V7),
            MaxSectorsSource::UserOrUnknown
        );
        // ...while an io_opt above the cap raises it.
        assert_eq!(
            classify(8192, 32767, 8192 * KIB, V6_12),
            MaxSectorsSource::OptimalIoSize
        );
        assert_eq!(
            classify(8192, 32767, 8192 * KIB, V7),
            MaxSectorsSource::OptimalIoSize
        );
        // 2 MiB is above 6.12's cap (1280 KiB), not 7's (4 MiB).
        assert_eq!(
            classify(2048, 32767, 2048 * KIB, V6_12),
            MaxSectorsSource::OptimalIoSize
        );
        assert_eq!(
            classify(2048, 32767, 2048 * KIB, V7),
            MaxSectorsSource::UserOrUnknown
        );
        // With the io_opt raise in place, the cap still shows as the cap.
        assert_eq!(
            classify(1280, 32767, 512 * KIB, V6_12),
            MaxSectorsSource::KernelDefaultCap
        );
        // Unknown kernel: sd's rule could have set it.
        assert_eq!(
            classify(128, 32767, 128 * KIB, None),
            MaxSectorsSource::OptimalIoSize
        );
    }

    #[test]
    fn no_io_opt_and_odd_values_are_not_optimal_io_size() {
        // io_opt 0: max 0 KiB never matches it.
        assert_eq!(
            classify(128, 32767, 0, V6_1),
            MaxSectorsSource::UserOrUnknown
        );
        // An io_opt that is not whole KiB cannot be a KiB cap.
        assert_eq!(
            classify(128, 32767, 128 * KIB + 512, V6_1),
            MaxSectorsSource::UserOrUnknown
        );
        // Raised by a user past io_opt and the cap: theirs.
        assert_eq!(
            classify(1024, 32767, 128 * KIB, V6_1),
            MaxSectorsSource::UserOrUnknown
        );
        // Never read.
        assert_eq!(classify(0, 0, 0, V6_1), MaxSectorsSource::UserOrUnknown);
        assert_eq!(
            classify(0, 32767, 128 * KIB, V6_1),
            MaxSectorsSource::UserOrUnknown
        );
        // A hardware limit unknown (0) leaves a cap-sized value the cap's
        // only if below it: not so.
        assert_eq!(classify(1280, 0, 0, V6_1), MaxSectorsSource::UserOrUnknown);
    }

    #[test]
    fn keys_are_the_json_names() {
        for source in [
            MaxSectorsSource::Hardware,
            MaxSectorsSource::KernelDefaultCap,
            MaxSectorsSource::OptimalIoSize,
            MaxSectorsSource::UserOrUnknown,
        ] {
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::Value::String(source.key().to_string())
            );
        }
        assert!(MaxSectorsSource::OptimalIoSize.set_by_the_kernel());
        assert!(!MaxSectorsSource::UserOrUnknown.set_by_the_kernel());
    }

    #[test]
    fn words_name_the_rule() {
        assert!(describe(MaxSectorsSource::OptimalIoSize, 128, 128 * KIB)
            .contains("sd's rule on kernels before 6.11"));
        assert!(describe(MaxSectorsSource::OptimalIoSize, 8192, 8192 * KIB)
            .contains("or the block layer's since"));
        assert!(describe(MaxSectorsSource::KernelDefaultCap, 4096, 0).contains("4 MiB"));
        assert!(describe(MaxSectorsSource::KernelDefaultCap, 1280, 0).contains("1280 KiB"));
    }
}
