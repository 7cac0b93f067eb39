//! The two devices under test, each torn down completely on drop:
//! a partitioned blk-mq loop disk on a /dev/shm file, and bio-based zram0.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::system::{read_trimmed, write_value, Setting};
use crate::util::{output, run, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// blk-mq: loop disk with an aligned partition and an odd-sized one.
    Loop,
    /// bio-based: zram0.
    Zram,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 2] = [DeviceKind::Loop, DeviceKind::Zram];

    pub fn title(self) -> &'static str {
        match self {
            DeviceKind::Loop => "loop (blk-mq)",
            DeviceKind::Zram => "zram (bio)",
        }
    }
}

/// Loop image: 2 GiB; partition 1 aligned (1 MiB start, 1.5 GiB), partition 2
/// odd-sized (200001 sectors), the size that makes the kernel pick 512-byte blocks.
const LOOP_IMAGE_BYTES: u64 = 2 << 30;
const LOOP_PARTITIONS: &str = "label: dos\nstart=2048, size=3145728\nstart=3147776, size=200001\n";
const ZRAM_DISKSIZE: &str = "1G";
const ZRAM: &str = "zram0";

/// A block device set up for the benchmark.
pub struct TestDevice {
    pub kind: DeviceKind,
    /// Whole-disk name, e.g. `loop3` (what `iosplit-trace -d` gets).
    pub disk: String,
    /// Where the direct-I/O workloads run: the aligned partition, or zram0.
    pub aligned: PathBuf,
    /// Odd-sized partition for the 512-byte buffered workload (loop only).
    pub odd_partition: Option<PathBuf>,
    /// Kernel `dev_t`s (major << 20 | minor) of the disk and its partitions,
    /// for the bpftrace filters.
    pub kernel_devs: Vec<u32>,
    _teardown: Teardown,
}

impl TestDevice {
    pub fn setup(kind: DeviceKind, scratch: &Path) -> Result<Self> {
        match kind {
            DeviceKind::Loop => setup_loop(scratch),
            DeviceKind::Zram => setup_zram(),
        }
    }

    pub fn queue_file(&self, name: &str) -> PathBuf {
        Path::new("/sys/block")
            .join(&self.disk)
            .join("queue")
            .join(name)
    }
}

/// Undoes a device's setup in reverse order on drop (held only for its Drop).
enum Teardown {
    Loop { _guard: LoopTeardown },
    Zram { _guard: ZramTeardown },
}

struct LoopTeardown {
    image: PathBuf,
    device: Option<String>,
    /// Queue settings the loop number had when we took it; loop keeps them
    /// across detach, so the next user would inherit ours.
    queue_settings: Vec<(PathBuf, String)>,
}

impl Drop for LoopTeardown {
    fn drop(&mut self) {
        if let Some(device) = &self.device {
            let dev_path = format!("/dev/{device}");
            let _ = Command::new("partx")
                .args(["-d", &dev_path])
                .stderr(Stdio::null())
                .status();
            for (path, value) in &self.queue_settings {
                if let Err(err) = write_value(path, value) {
                    eprintln!("xtask bench: {err}");
                }
            }
            if let Err(err) = run(Command::new("losetup").args(["-d", &dev_path])) {
                eprintln!("xtask bench: could not detach {dev_path}: {err}");
            }
        }
        if let Err(err) = fs::remove_file(&self.image) {
            if err.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "xtask bench: could not remove {}: {err}",
                    self.image.display()
                );
            }
        }
    }
}

struct ZramTeardown {
    _max_sectors: Option<Setting>,
}

impl Drop for ZramTeardown {
    fn drop(&mut self) {
        // `reset` frees the memory and sets disksize back to 0; it does not
        // restore max_sectors_kb, which the Setting above does after this.
        if let Err(err) = write_value(&Path::new("/sys/block").join(ZRAM).join("reset"), "1") {
            eprintln!("xtask bench: could not reset {ZRAM}: {err}");
        }
    }
}

/// `MAJ:MIN` → the kernel's dev_t encoding used by the block tracepoints.
pub fn kernel_dev(maj_min: &str) -> Option<u32> {
    let (major, minor) = maj_min.trim().split_once(':')?;
    let major: u32 = major.parse().ok()?;
    let minor: u32 = minor.parse().ok()?;
    (minor < (1 << 20) && major < (1 << 12)).then_some((major << 20) | minor)
}

fn sysfs_kernel_dev(name: &str) -> Result<u32> {
    let path = Path::new("/sys/class/block").join(name).join("dev");
    let text = read_trimmed(&path)?;
    kernel_dev(&text).ok_or_else(|| format!("{} holds `{text}`, not MAJ:MIN", path.display()))
}

fn setup_loop(scratch: &Path) -> Result<TestDevice> {
    let image = scratch.join("loop-disk.img");
    let mut teardown = LoopTeardown {
        image: image.clone(),
        device: None,
        queue_settings: Vec::new(),
    };
    let file = fs::File::create(&image)
        .map_err(|err| format!("cannot create {}: {err}", image.display()))?;
    // Allocated, not sparse: otherwise the first runs on it pay for tmpfs
    // allocating its pages (the first baseline of loop random writes ran at
    // half the IOPS of the next ones), and every ratio of that round with it.
    allocate(&file, LOOP_IMAGE_BYTES)
        .map_err(|err| format!("cannot allocate {}: {err}", image.display()))?;
    drop(file);
    sfdisk(&image, LOOP_PARTITIONS)?;
    let device_path = output(
        Command::new("losetup")
            .args(["-f", "--show", "-P"])
            .arg(&image),
    )
    .map(|text| text.trim().to_string())
    .filter(|text| text.starts_with("/dev/loop"))
    .ok_or("losetup -f --show -P found no free loop device")?;
    let disk = device_path.trim_start_matches("/dev/").to_string();
    teardown.device = Some(disk.clone());
    for name in ["max_sectors_kb", "nomerges"] {
        let path = Path::new("/sys/block").join(&disk).join("queue").join(name);
        let value = read_trimmed(&path)?;
        teardown.queue_settings.push((path, value));
    }
    // No partition-table parser in this kernel: partx adds them through BLKPG.
    run(Command::new("partx").args(["-a", &device_path]))?;
    let partition = |n: u32| PathBuf::from(format!("{device_path}p{n}"));
    for n in [1, 2] {
        if !wait_for_node(&partition(n)) {
            return Err(format!(
                "{} did not appear after partx -a",
                partition(n).display()
            ));
        }
    }
    let mut kernel_devs = vec![sysfs_kernel_dev(&disk)?];
    for n in [1, 2] {
        kernel_devs.push(sysfs_kernel_dev(&format!("{disk}p{n}"))?);
    }
    Ok(TestDevice {
        kind: DeviceKind::Loop,
        disk,
        aligned: partition(1),
        odd_partition: Some(partition(2)),
        kernel_devs,
        _teardown: Teardown::Loop { _guard: teardown },
    })
}

fn allocate(file: &fs::File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(bytes).map_err(std::io::Error::other)?;
    // SAFETY: a plain syscall on a file descriptor we own.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

fn sfdisk(image: &Path, script: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("sfdisk")
        .arg("-q")
        .arg(image)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|err| format!("cannot start sfdisk: {err}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|err| format!("cannot write the partition table script: {err}"))?;
    }
    let status = child
        .wait()
        .map_err(|err| format!("sfdisk did not finish: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("sfdisk {} failed with {status}", image.display()))
    }
}

fn wait_for_node(path: &Path) -> bool {
    for _ in 0..100 {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

fn setup_zram() -> Result<TestDevice> {
    let sysfs = Path::new("/sys/block").join(ZRAM);
    if !sysfs.is_dir() {
        return Err(format!("{} does not exist", sysfs.display()));
    }
    let disksize = read_trimmed(&sysfs.join("disksize"))?;
    if disksize != "0" {
        return Err(format!(
            "{ZRAM} is in use (disksize {disksize}); the benchmark only takes an unused zram0"
        ));
    }
    // Remember max_sectors_kb before anything else: reset does not restore it.
    let max_sectors = Setting::set(
        sysfs.join("queue/max_sectors_kb"),
        &read_trimmed(&sysfs.join("queue/max_sectors_kb"))?,
    )?;
    let teardown = ZramTeardown {
        _max_sectors: Some(max_sectors),
    };
    write_value(&sysfs.join("disksize"), ZRAM_DISKSIZE)?;
    let device = PathBuf::from(format!("/dev/{ZRAM}"));
    if !wait_for_node(&device) {
        return Err(format!("{} does not exist", device.display()));
    }
    Ok(TestDevice {
        kind: DeviceKind::Zram,
        disk: ZRAM.to_string(),
        aligned: device,
        odd_partition: None,
        kernel_devs: vec![sysfs_kernel_dev(ZRAM)?],
        _teardown: Teardown::Zram { _guard: teardown },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dev_packs_major_above_twenty_bits_of_minor() {
        assert_eq!(kernel_dev("7:1"), Some((7 << 20) | 1));
        assert_eq!(kernel_dev("259:3\n"), Some((259 << 20) | 3));
        assert_eq!(kernel_dev("253:0"), Some(265289728));
        assert_eq!(kernel_dev("7"), None);
        assert_eq!(kernel_dev("7:x"), None);
    }

    #[test]
    fn loop_partition_two_is_odd_sized_and_one_is_aligned() {
        let sizes: Vec<(u64, u64)> = LOOP_PARTITIONS
            .lines()
            .filter_map(|line| {
                let start = line
                    .split("start=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .trim()
                    .parse()
                    .ok()?;
                let size = line.split("size=").nth(1)?.trim().parse().ok()?;
                Some((start, size))
            })
            .collect();
        assert_eq!(sizes.len(), 2);
        assert_eq!(sizes[0].0 % 8, 0);
        assert_eq!(sizes[0].1 % 8, 0);
        assert_ne!(
            sizes[1].1 % 8,
            0,
            "partition 2 must not be a multiple of 4 KiB"
        );
        let end = sizes[1].0 + sizes[1].1;
        assert!(end * 512 <= LOOP_IMAGE_BYTES);
        assert!(sizes[0].0 + sizes[0].1 <= sizes[1].0);
    }
}
