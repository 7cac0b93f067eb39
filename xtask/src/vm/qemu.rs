//! One guest boot: disk images, the qemu command line, a hard timeout, and
//! the results disk read back as a tar archive.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{run, Result};

/// Serial of the disk the guest writes `/results` to (see `xtask/vm/init`).
const RESULTS_SERIAL: &str = "vmtest-results";
const RESULTS_BYTES: u64 = 64 << 20;
const GUEST_MEMORY_MIB: u32 = 1024;
const POLL: Duration = Duration::from_millis(200);

/// How a disk appears to the guest.
#[derive(Clone, Copy, Debug)]
pub enum Bus {
    /// virtio-blk with these logical / physical block sizes in bytes.
    VirtioBlk { logical: u32, physical: u32 },
    /// virtio-blk (512-byte sectors) with a ring of `queue_size` descriptors.
    /// Without indirect descriptors a request takes one descriptor per segment
    /// plus two, so a few large requests fill the ring and the next is requeued;
    /// with them (qemu's default) each request takes one.
    VirtioBlkSmallRing {
        queue_size: u16,
        indirect_desc: bool,
    },
    /// qemu's emulated NVMe controller (virt_boundary_mask 4095) with these
    /// logical / physical block sizes in bytes.
    Nvme { logical: u32, physical: u32 },
}

/// A disk image, found in the guest by its serial.
#[derive(Clone, Debug)]
pub struct Disk {
    pub serial: &'static str,
    pub bytes: u64,
    pub bus: Bus,
    /// One MSDOS partition: (start, size) in 512-byte sectors, made on the host.
    pub partition: Option<(u64, u64)>,
    /// qemu's I/O throttling, as a cloud disk caps its commands or its bytes.
    pub throttle: Throttle,
}

/// A limit qemu puts on a drive (`throttling.*-total`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Throttle {
    None,
    /// Commands per second, whatever their size.
    Iops(u32),
    /// Bytes per second, whatever the commands.
    Bandwidth(u64),
}

impl Throttle {
    fn drive_options(self) -> String {
        match self {
            Throttle::None => String::new(),
            Throttle::Iops(iops) => format!(",throttling.iops-total={iops}"),
            Throttle::Bandwidth(bytes) => format!(",throttling.bps-total={bytes}"),
        }
    }
}

pub struct Boot<'a> {
    pub scenario: &'a str,
    pub vmlinuz: &'a Path,
    pub initramfs: &'a Path,
    pub disks: &'a [Disk],
    /// Where the images, the console log and the unpacked results go.
    pub work: &'a Path,
    pub timeout: Duration,
}

/// What one boot left behind.
pub struct Outcome {
    pub results: PathBuf,
    pub console: PathBuf,
    pub elapsed: Duration,
    pub timed_out: bool,
}

/// Kills qemu when dropped, so no early return or panic leaves it running.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn make_image(path: &Path, disk: &Disk) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let file =
        File::create(path).map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    file.set_len(disk.bytes)
        .map_err(|err| format!("cannot size {}: {err}", path.display()))?;
    drop(file);
    if let Some((start, size)) = disk.partition {
        let layout = format!("label: dos\nstart={start}, size={size}, type=83\n");
        let mut sfdisk = Command::new("sfdisk")
            .args(["-q", "--no-reread", "--no-tell-kernel"])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|err| format!("cannot start sfdisk: {err}"))?;
        if let Some(mut stdin) = sfdisk.stdin.take() {
            use std::io::Write;
            stdin
                .write_all(layout.as_bytes())
                .map_err(|err| format!("cannot feed sfdisk: {err}"))?;
        }
        let status = sfdisk.wait().map_err(|err| format!("sfdisk: {err}"))?;
        if !status.success() {
            return Err(format!(
                "sfdisk could not write `{layout}` to {}",
                path.display()
            ));
        }
    }
    Ok(())
}

fn device_args(index: usize, image: &Path, disk: &Disk) -> Vec<String> {
    let drive = format!(
        "file={},format=raw,if=none,id=drive{index},cache=unsafe{}",
        image.display(),
        disk.throttle.drive_options()
    );
    let device = match disk.bus {
        // qemu merges adjacent requests of one batch before its throttle counts
        // them (6.1 guests batch a split's fragments); a cloud disk counts each.
        Bus::VirtioBlk { logical, physical } => format!(
            "virtio-blk-pci,drive=drive{index},serial={},logical_block_size={logical},physical_block_size={physical}{}",
            disk.serial,
            if disk.throttle == Throttle::None { "" } else { ",request-merging=off" }
        ),
        Bus::VirtioBlkSmallRing {
            queue_size,
            indirect_desc,
        } => format!(
            "virtio-blk-pci,drive=drive{index},serial={},queue-size={queue_size},indirect_desc={}",
            disk.serial,
            if indirect_desc { "on" } else { "off" }
        ),
        // qemu's NVMe merges nothing before its throttle: each command counts.
        Bus::Nvme { logical, physical } => format!(
            "nvme,drive=drive{index},serial={},logical_block_size={logical},physical_block_size={physical}",
            disk.serial
        ),
    };
    vec!["-drive".into(), drive, "-device".into(), device]
}

/// Boots the guest once, waits for it to power off (or kills it), and unpacks the results.
pub fn boot(boot: &Boot) -> Result<Outcome> {
    let _ = std::fs::remove_dir_all(boot.work);
    std::fs::create_dir_all(boot.work)
        .map_err(|err| format!("cannot create {}: {err}", boot.work.display()))?;
    let mut args: Vec<String> = vec![
        "-nodefaults".into(),
        "-no-reboot".into(),
        "-display".into(),
        "none".into(),
        "-m".into(),
        GUEST_MEMORY_MIB.to_string(),
        "-smp".into(),
        "1".into(),
        "-kernel".into(),
        boot.vmlinuz.display().to_string(),
        "-initrd".into(),
        boot.initramfs.display().to_string(),
        "-append".into(),
        // threadirqs: interrupt handlers (and so block completions) run in
        // threads, never nested inside a classic-tracepoint BPF program on the
        // one vCPU, where the kernel would skip the completion's program
        // (uncounted on 6.1) and the oracle comparison would flake.
        format!(
            "console=ttyS0 panic=-1 loglevel=4 threadirqs vmtest.scenario={}",
            boot.scenario
        ),
    ];
    let console = boot.work.join("console.txt");
    args.push("-serial".into());
    args.push(format!("file:{}", console.display()));
    for (index, disk) in boot.disks.iter().enumerate() {
        let image = boot.work.join(format!("{}.img", disk.serial));
        make_image(&image, disk)?;
        args.extend(device_args(index, &image, disk));
    }
    let results_image = boot.work.join("results.img");
    let results_disk = Disk {
        serial: RESULTS_SERIAL,
        bytes: RESULTS_BYTES,
        bus: Bus::VirtioBlk {
            logical: 512,
            physical: 512,
        },
        partition: None,
        throttle: Throttle::None,
    };
    make_image(&results_image, &results_disk)?;
    args.extend(device_args(boot.disks.len(), &results_image, &results_disk));

    // TCG only: KVM made no progress on this machine kind.
    let started = Instant::now();
    let child = Command::new("setpriv")
        // qemu dies with xtask, even when xtask itself is killed.
        .args(["--pdeathsig", "KILL", "qemu-system-x86_64"])
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            File::create(boot.work.join("qemu.stderr"))
                .map_err(|err| format!("cannot create qemu.stderr: {err}"))?,
        )
        .spawn()
        .map_err(|err| {
            format!("cannot start qemu-system-x86_64 (package qemu-system-x86): {err}")
        })?;
    let mut guard = Guard(child);
    let mut timed_out = false;
    loop {
        match guard.0.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > boot.timeout => {
                timed_out = true;
                let _ = guard.0.kill();
                let _ = guard.0.wait();
                break;
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(err) => return Err(format!("cannot wait for qemu: {err}")),
        }
    }
    drop(guard);
    let elapsed = started.elapsed();

    let results = boot.work.join("results");
    std::fs::create_dir_all(&results)
        .map_err(|err| format!("cannot create {}: {err}", results.display()))?;
    // An empty results disk (the guest never got there) is not a tar archive: leave results empty.
    let _ = run(Command::new("tar")
        .arg("-xf")
        .arg(&results_image)
        .arg("-C")
        .arg(&results)
        .stderr(Stdio::null()));
    let _ = std::fs::remove_file(&results_image);
    // The scenario disks are only needed while the guest runs.
    for disk in boot.disks {
        let _ = std::fs::remove_file(boot.work.join(format!("{}.img", disk.serial)));
    }
    Ok(Outcome {
        results,
        console,
        elapsed,
        timed_out,
    })
}
