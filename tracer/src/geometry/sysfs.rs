//! Reads disks, their queue limits and their partitions from sysfs.
//!
//! Every reader takes the sysfs root (normally `/sys`) so tests run on fixture
//! trees. Attributes missing on older kernels fall back to the kernel's own
//! defaults; nothing here panics on what a kernel may or may not provide.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::GeometryError;
use super::ioctl::DeviceProbe;
use super::max_sectors::{self, KernelVersion};
use super::{AtomicLimits, DevId, DiskGeometry, PartitionGeometry};

type Result<T> = std::result::Result<T, GeometryError>;

/// Kernel defaults for limits a very old kernel may not export
/// (BLK_MAX_SEGMENTS, BLK_MAX_SEGMENT_SIZE, BLK_DEF_MAX_SECTORS_CAP).
const DEFAULT_MAX_SEGMENTS: u32 = 128;
const DEFAULT_MAX_SEGMENT_SIZE: u32 = 65536;
const DEFAULT_MAX_SECTORS_KB: u32 = 1280;
/// VIRTIO_RING_F_INDIRECT_DESC: `features` prints bit n as its n-th character.
const VIRTIO_INDIRECT_DESC_BIT: usize = 28;

/// The names under `SYSFS/block`, in natural order (loop2 before loop10).
pub(super) fn list_disks(sysfs_root: &Path) -> Result<Vec<String>> {
    let dir = sysfs_root.join("block");
    let entries = fs::read_dir(&dir).map_err(|source| GeometryError::ListDisks { dir, source })?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by_key(|name| natural_key(name));
    Ok(names)
}

/// Sort key that orders embedded numbers by value.
fn natural_key(name: &str) -> (String, u64, String) {
    let digits_at = name
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(name.len());
    let (stem, rest) = name.split_at(digits_at);
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..digits_end].parse().unwrap_or(0);
    (stem.to_string(), number, rest[digits_end..].to_string())
}

/// The disk a name belongs to: itself if it is a disk, its parent if it is a
/// partition.
pub(super) fn disk_name_of(sysfs_root: &Path, name: &str) -> Result<String> {
    let unknown = || GeometryError::UnknownDevice {
        name: name.to_string(),
    };
    if name.is_empty() || name.contains('/') {
        return Err(unknown());
    }
    if sysfs_root.join("block").join(name).is_dir() {
        return Ok(name.to_string());
    }
    let class = sysfs_root.join("class/block").join(name);
    if class.join("partition").is_file() {
        let real = fs::canonicalize(&class).map_err(|_| unknown())?;
        return real
            .parent()
            .and_then(|disk| disk.file_name())
            .map(|disk| disk.to_string_lossy().into_owned())
            .ok_or_else(unknown);
    }
    Err(unknown())
}

/// Reads one disk (`SYSFS/block/NAME`) and its partitions; its stack is
/// [`super::disks`]'s to add, since following a stack reads disks below it.
pub fn read_disk_in(
    sysfs_root: &Path,
    name: &str,
    probe: &dyn DeviceProbe,
) -> Result<DiskGeometry> {
    let dir = sysfs_root.join("block").join(name);
    if !dir.is_dir() {
        return Err(GeometryError::UnknownDisk {
            name: name.to_string(),
            dir,
        });
    }
    let queue = dir.join("queue");
    let logical_block_size = read_u32(&queue, "logical_block_size").unwrap_or(512);
    let physical_block_size = read_u32(&queue, "physical_block_size").unwrap_or(logical_block_size);
    let max_sectors_kb = read_u32(&queue, "max_sectors_kb").unwrap_or(DEFAULT_MAX_SECTORS_KB);
    let mut disk = DiskGeometry {
        name: name.to_string(),
        dev: read_dev(&dir.join("dev")),
        size_sectors: read_u64(&dir, "size").unwrap_or(0),
        logical_block_size,
        physical_block_size,
        minimum_io_size: read_u32(&queue, "minimum_io_size").unwrap_or(physical_block_size),
        optimal_io_size: read_u32(&queue, "optimal_io_size").unwrap_or(0),
        alignment_offset: read_alignment_offset(&dir),
        max_sectors_kb,
        max_hw_sectors_kb: read_u32(&queue, "max_hw_sectors_kb").unwrap_or(max_sectors_kb),
        max_sectors_source: Default::default(),
        max_segments: read_u32(&queue, "max_segments").unwrap_or(DEFAULT_MAX_SEGMENTS),
        max_segment_size: read_u32(&queue, "max_segment_size").unwrap_or(DEFAULT_MAX_SEGMENT_SIZE),
        virt_boundary_mask: read_u64(&queue, "virt_boundary_mask").unwrap_or(0),
        chunk_sectors: read_u32(&queue, "chunk_sectors").unwrap_or(0),
        nomerges: read_u32(&queue, "nomerges").unwrap_or(0),
        discard_granularity: read_u32(&queue, "discard_granularity").unwrap_or(0),
        discard_max_bytes: read_u64(&queue, "discard_max_bytes").unwrap_or(0),
        discard_max_hw_bytes: read_u64(&queue, "discard_max_hw_bytes").unwrap_or(0),
        rotational: read_u32(&queue, "rotational").is_some_and(|value| value != 0),
        scheduler: read_text(&queue, "scheduler")
            .map(|line| active_scheduler(&line))
            .unwrap_or_else(|| "none".to_string()),
        request_based: dir.join("mq").is_dir(),
        nr_requests: read_u32(&queue, "nr_requests").unwrap_or(0),
        hw_queue_tags: read_hw_queue_tags(&dir.join("mq")),
        virtio_indirect_desc: read_virtio_indirect_desc(&dir.join("device")),
        block_size: probe.block_size(name),
        partitions: Vec::new(),
        stack: None,
        atomic: read_atomic_limits(&queue),
    };
    disk.max_sectors_source = Some(max_sectors::classify(
        disk.max_sectors_kb,
        disk.max_hw_sectors_kb,
        disk.optimal_io_size,
        KernelVersion::of_sysfs(sysfs_root),
    ));
    disk.partitions = read_partitions(&dir, probe);
    Ok(disk)
}

/// The queue's `atomic_write_*` files, read as they are: `None` when the
/// kernel has none of them (before 6.11), a missing one counted as 0.
fn read_atomic_limits(queue: &Path) -> Option<AtomicLimits> {
    let files = [
        "atomic_write_unit_min_bytes",
        "atomic_write_unit_max_bytes",
        "atomic_write_max_bytes",
        "atomic_write_boundary_bytes",
    ];
    let values = files.map(|file| read_u32(queue, file));
    if values.iter().all(Option::is_none) {
        return None;
    }
    let [unit_min_bytes, unit_max_bytes, max_bytes, boundary_bytes] =
        values.map(Option::unwrap_or_default);
    Some(AtomicLimits {
        unit_min_bytes,
        unit_max_bytes,
        max_bytes,
        boundary_bytes,
    })
}

/// Subdirectories with a `partition` file, sorted by partition number.
fn read_partitions(disk_dir: &Path, probe: &dyn DeviceProbe) -> Vec<PartitionGeometry> {
    let Ok(entries) = fs::read_dir(disk_dir) else {
        return Vec::new();
    };
    let mut partitions: Vec<PartitionGeometry> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.join("partition").is_file())
        .filter_map(|path| read_partition(&path, probe))
        .collect();
    partitions.sort_by_key(|part| (part.number, part.start));
    partitions
}

fn read_partition(dir: &Path, probe: &dyn DeviceProbe) -> Option<PartitionGeometry> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    Some(PartitionGeometry {
        dev: read_dev(&dir.join("dev")),
        number: read_u32(dir, "partition").unwrap_or(0),
        start: read_u64(dir, "start")?,
        size: read_u64(dir, "size")?,
        alignment_offset: read_alignment_offset(dir),
        block_size: probe.block_size(&name),
        name,
    })
}

/// The smallest `nr_tags` among the hardware queues under `mq/`, 0 if none.
fn read_hw_queue_tags(mq_dir: &Path) -> u32 {
    let Ok(entries) = fs::read_dir(mq_dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| read_u32(&entry.path(), "nr_tags"))
        .min()
        .unwrap_or(0)
}

/// For a disk whose `device` is on the virtio bus: whether its `features`
/// (one '0'/'1' per bit, bit 0 first) offer indirect descriptors.
fn read_virtio_indirect_desc(device_dir: &Path) -> Option<bool> {
    let bus = fs::read_link(device_dir.join("subsystem")).ok()?;
    if bus.file_name()? != "virtio" {
        return None;
    }
    let features = read_text(device_dir, "features")?;
    features
        .as_bytes()
        .get(VIRTIO_INDIRECT_DESC_BIT)
        .map(|&bit| bit == b'1')
}

/// The bracketed entry of `queue/scheduler` ("none [mq-deadline] kyber").
/// Bio-based devices print just "none".
fn active_scheduler(line: &str) -> String {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .or_else(|| line.split_whitespace().next())
        .unwrap_or("none")
        .to_string()
}

/// `alignment_offset` is -1 when the kernel found the stacked limits
/// impossible to align; report 0 then (the audit recomputes it anyway).
fn read_alignment_offset(dir: &Path) -> u32 {
    read_text(dir, "alignment_offset")
        .and_then(|text| text.parse::<i64>().ok())
        .and_then(|value| u32::try_from(value).ok())
        .unwrap_or(0)
}

fn read_text(dir: &Path, attr: &str) -> Option<String> {
    fs::read_to_string(dir.join(attr))
        .ok()
        .map(|text| text.trim().to_string())
}

fn read_u64(dir: &Path, attr: &str) -> Option<u64> {
    read_text(dir, attr)?.parse().ok()
}

fn read_u32(dir: &Path, attr: &str) -> Option<u32> {
    read_text(dir, attr)?.parse().ok()
}

fn read_dev(path: &Path) -> Option<DevId> {
    let text = fs::read_to_string(path).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some(DevId::new(major.parse().ok()?, minor.parse().ok()?))
}

/// The kernel name of a device number, through `SYSFS/dev/block/MAJ:MIN`.
pub fn name_of_dev_in(sysfs_root: &Path, dev: DevId) -> Option<String> {
    let link: PathBuf = sysfs_root.join("dev/block").join(dev.to_string());
    let target = fs::read_link(link).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// The kernel name of a device number on the live system.
pub fn name_of_dev(dev: DevId) -> Option<String> {
    name_of_dev_in(Path::new("/sys"), dev)
}

/// A partition's first sector on its disk (`SYSFS/class/block/NAME/start`);
/// `None` for a whole disk or an unknown name.
pub fn partition_start_in(sysfs_root: &Path, name: &str) -> Option<u64> {
    read_u64(&sysfs_root.join("class/block").join(name), "start")
}

/// A partition's first sector on the live system.
pub fn partition_start(name: &str) -> Option<u64> {
    partition_start_in(Path::new("/sys"), name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::disks::read_disks_in;
    use crate::geometry::ioctl::{DmTarget, NoIoctls};
    use crate::geometry::MaxSectorsSource;
    use std::collections::HashMap;

    /// A scratch sysfs tree removed on drop.
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Self {
            let root =
                std::env::temp_dir().join(format!("iosplit-sysfs-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("block")).unwrap();
            fs::create_dir_all(root.join("class/block")).unwrap();
            fs::create_dir_all(root.join("dev/block")).unwrap();
            Tree(root)
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, format!("{text}\n")).unwrap();
        }

        /// A disk directory under devices/ with block/, class/block and
        /// dev/block links, like the kernel lays them out.
        fn disk(&self, name: &str, dev: &str, attrs: &[(&str, &str)]) {
            let rel = format!("devices/virtual/block/{name}");
            self.write(&format!("{rel}/dev"), dev);
            for (attr, value) in attrs {
                self.write(&format!("{rel}/{attr}"), value);
            }
            let target = self.0.join(&rel);
            std::os::unix::fs::symlink(&target, self.0.join("block").join(name)).unwrap();
            std::os::unix::fs::symlink(&target, self.0.join("class/block").join(name)).unwrap();
            std::os::unix::fs::symlink(&target, self.0.join("dev/block").join(dev)).unwrap();
        }

        fn partition(&self, disk: &str, name: &str, dev: &str, attrs: &[(&str, &str)]) {
            let rel = format!("devices/virtual/block/{disk}/{name}");
            self.write(&format!("{rel}/dev"), dev);
            for (attr, value) in attrs {
                self.write(&format!("{rel}/{attr}"), value);
            }
            let target = self.0.join(&rel);
            std::os::unix::fs::symlink(&target, self.0.join("class/block").join(name)).unwrap();
            std::os::unix::fs::symlink(&target, self.0.join("dev/block").join(dev)).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    struct FakeProbe(HashMap<&'static str, u32>);

    impl DeviceProbe for FakeProbe {
        fn block_size(&self, name: &str) -> Option<u32> {
            self.0.get(name).copied()
        }

        fn dm_table(&self, _dev: DevId) -> std::result::Result<Vec<DmTarget>, String> {
            Err("no tables here".into())
        }
    }

    /// Tables by device number, as DM_TABLE_STATUS would answer.
    struct TableProbe(HashMap<DevId, Vec<DmTarget>>);

    impl DeviceProbe for TableProbe {
        fn block_size(&self, _name: &str) -> Option<u32> {
            None
        }

        fn dm_table(&self, dev: DevId) -> std::result::Result<Vec<DmTarget>, String> {
            self.0
                .get(&dev)
                .cloned()
                .ok_or_else(|| "no such table".into())
        }
    }

    fn target(start: u64, length: u64, kind: &str, params: &str) -> DmTarget {
        DmTarget {
            start,
            length,
            target_type: kind.into(),
            params: params.into(),
        }
    }

    /// vda (512e) with vda1 at 2048, vdb with vdb1 at 2048; dm-0 and md0 above.
    fn stacked_tree(tag: &str) -> Tree {
        let tree = Tree::new(tag);
        let disk_attrs = [
            ("size", "524288"),
            ("queue/logical_block_size", "512"),
            ("queue/physical_block_size", "4096"),
            ("queue/minimum_io_size", "4096"),
        ];
        tree.disk("vda", "252:0", &disk_attrs);
        tree.partition(
            "vda",
            "vda1",
            "252:1",
            &[("partition", "1"), ("start", "2048"), ("size", "400000")],
        );
        tree.disk("vdb", "252:16", &disk_attrs);
        tree.partition(
            "vdb",
            "vdb1",
            "252:17",
            &[("partition", "1"), ("start", "2048"), ("size", "400000")],
        );
        tree.disk(
            "dm-0",
            "254:0",
            &[
                ("size", "399997"),
                ("alignment_offset", "2560"),
                ("dm/name", "vmtest"),
                ("dm/uuid", ""),
            ],
        );
        tree.disk(
            "md0",
            "9:0",
            &[
                ("size", "390000"),
                ("md/level", "raid1"),
                ("md/chunk_size", "0"),
                ("md/dev-vdb1/offset", "8"),
            ],
        );
        std::os::unix::fs::symlink(
            tree.0.join("devices/virtual/block/vdb/vdb1"),
            tree.0.join("devices/virtual/block/md0/md/dev-vdb1/block"),
        )
        .unwrap();
        tree
    }

    #[test]
    fn stacks_are_followed_through_tables_data_offsets_and_partitions() {
        let tree = stacked_tree("stack");
        let probe = TableProbe(HashMap::from([(
            DevId::new(254, 0),
            vec![target(0, 399_997, "linear", "252:1 3")],
        )]));
        let disks = read_disks_in(&tree.0, None, &probe).unwrap();
        let dm = disks.iter().find(|disk| disk.name == "dm-0").unwrap();
        let stack = dm.stack.as_ref().expect("dm-0 is stacked");
        assert_eq!(
            (stack.kind.as_str(), stack.dm_name.as_str()),
            ("dm-linear", "vmtest")
        );
        let leg = &stack.legs[0];
        let path: Vec<(&str, &str, u64)> = leg
            .levels
            .iter()
            .map(|level| {
                (
                    level.device.as_str(),
                    level.via.as_str(),
                    level.start_sectors,
                )
            })
            .collect();
        assert_eq!(path, [("vda1", "linear", 3), ("vda", "partition", 2051)]);
        assert_eq!((leg.bottom.name.as_str(), leg.bottom_start), ("vda", 2051));
        assert_eq!(leg.bottom.physical_block_size, 4096);
        assert!(leg.bottom.partitions.is_empty() && leg.bottom.stack.is_none());

        let md = disks.iter().find(|disk| disk.name == "md0").unwrap();
        let stack = md.stack.as_ref().expect("md0 is stacked");
        assert_eq!(stack.kind, "md-raid1");
        assert_eq!(stack.legs.len(), 1);
        assert_eq!(stack.legs[0].bottom_start, 2056);
        assert_eq!(stack.legs[0].levels[0].via, "raid1 data offset");

        let plain = disks.iter().find(|disk| disk.name == "vda").unwrap();
        assert_eq!(plain.stack, None);
    }

    /// dm-crypt's cap from its module parameters (0: the 128 KiB default,
    /// which a larger value does not raise), on a kernel without them
    /// writes at 1 MiB; multipath's
    /// paths are each a whole disk.
    #[test]
    fn a_crypt_cap_and_multipath_paths_are_read() {
        let tree = stacked_tree("stack-crypt");
        let crypt = TableProbe(HashMap::from([(
            DevId::new(254, 0),
            vec![target(
                0,
                399_997,
                "crypt",
                "cipher_null-ecb - 0 252:1 0 1 sector_size:4096",
            )],
        )]));
        let read = |probe: &TableProbe| {
            let disks = read_disks_in(&tree.0, Some(&["dm-0".to_string()]), probe).unwrap();
            disks[0].stack.clone().unwrap()
        };
        let old_kernel = read(&crypt).crypt_max_io.unwrap();
        assert_eq!(
            (
                old_kernel.read_bytes,
                old_kernel.write_bytes,
                old_kernel.tunable
            ),
            (None, 1 << 20, false)
        );
        let parameters = tree.0.join("module/dm_crypt/parameters");
        fs::create_dir_all(&parameters).unwrap();
        fs::write(parameters.join("max_read_size"), "0\n").unwrap();
        fs::write(parameters.join("max_write_size"), "8000000\n").unwrap();
        let tunable = read(&crypt).crypt_max_io.unwrap();
        assert_eq!(
            (tunable.read_bytes, tunable.write_bytes, tunable.tunable),
            (Some(128 << 10), 128 << 10, true),
            "the default for 0; a larger parameter does not raise it"
        );

        let multipath = TableProbe(HashMap::from([(
            DevId::new(254, 0),
            vec![target(
                0,
                399_997,
                "multipath",
                "0 0 1 1 round-robin 0 2 1 252:0 1 252:16 1",
            )],
        )]));
        let stack = read(&multipath);
        assert_eq!(stack.kind, "dm-multipath");
        let bottoms: Vec<(&str, u64)> = stack
            .legs
            .iter()
            .map(|leg| (leg.bottom.name.as_str(), leg.bottom_start))
            .collect();
        assert_eq!(bottoms, [("vda", 0), ("vdb", 0)]);
    }

    #[test]
    fn an_unreadable_table_is_said_not_guessed() {
        let tree = stacked_tree("stack-unreadable");
        let disks = read_disks_in(&tree.0, Some(&["dm-0".to_string()]), &NoIoctls).unwrap();
        let stack = disks[0].stack.as_ref().unwrap();
        assert!(stack.legs.is_empty());
        assert!(
            stack.unreadable.as_deref().unwrap().contains("not read"),
            "{stack:?}"
        );
    }

    #[test]
    fn reads_every_limit_and_partition() {
        let tree = Tree::new("full");
        tree.disk(
            "loop1",
            "7:1",
            &[
                ("size", "409600"),
                ("alignment_offset", "0"),
                ("queue/logical_block_size", "512"),
                ("queue/physical_block_size", "4096"),
                ("queue/minimum_io_size", "8192"),
                ("queue/optimal_io_size", "1048576"),
                ("queue/max_sectors_kb", "256"),
                ("queue/max_hw_sectors_kb", "32767"),
                ("queue/max_segments", "254"),
                ("queue/max_segment_size", "4294967295"),
                ("queue/virt_boundary_mask", "4095"),
                ("queue/chunk_sectors", "256"),
                ("queue/nomerges", "2"),
                ("queue/discard_granularity", "4096"),
                ("queue/discard_max_bytes", "2147483648"),
                ("queue/discard_max_hw_bytes", "4294966784"),
                ("queue/rotational", "1"),
                ("queue/scheduler", "none [mq-deadline] kyber bfq"),
                ("mq/0/nr_tags", "128"),
            ],
        );
        tree.partition(
            "loop1",
            "loop1p2",
            "259:1",
            &[
                ("partition", "2"),
                ("start", "200001"),
                ("size", "200001"),
                ("alignment_offset", "3584"),
            ],
        );
        tree.partition(
            "loop1",
            "loop1p1",
            "259:0",
            &[("partition", "1"), ("start", "2048"), ("size", "40000")],
        );
        let probe = FakeProbe(HashMap::from([("loop1", 4096), ("loop1p2", 512)]));
        let disks = read_disks_in(&tree.0, None, &probe).unwrap();
        assert_eq!(disks.len(), 1);
        let disk = &disks[0];
        assert_eq!(disk.name, "loop1");
        assert_eq!(disk.dev, Some(DevId::new(7, 1)));
        assert_eq!(disk.size_sectors, 409_600);
        assert_eq!(
            (disk.logical_block_size, disk.physical_block_size),
            (512, 4096)
        );
        assert_eq!(
            (disk.minimum_io_size, disk.optimal_io_size),
            (8192, 1_048_576)
        );
        assert_eq!((disk.max_sectors_kb, disk.max_hw_sectors_kb), (256, 32767));
        assert_eq!((disk.max_segments, disk.max_segment_size), (254, u32::MAX));
        assert_eq!(disk.virt_boundary_mask, 4095);
        assert_eq!(disk.chunk_sectors, 256);
        assert_eq!(disk.nomerges, 2);
        assert_eq!(disk.discard_granularity, 4096);
        assert_eq!(
            (disk.discard_max_bytes, disk.discard_max_hw_bytes),
            (2147483648, 4294966784)
        );
        assert!(disk.rotational);
        assert_eq!(disk.scheduler, "mq-deadline");
        assert!(disk.request_based);
        assert_eq!(disk.block_size, Some(4096));
        let names: Vec<&str> = disk.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["loop1p1", "loop1p2"], "sorted by number");
        let part = &disk.partitions[1];
        assert_eq!(part.number, 2);
        assert_eq!(part.dev, Some(DevId::new(259, 1)));
        assert_eq!((part.start, part.size), (200_001, 200_001));
        assert_eq!(part.alignment_offset, 3584);
        assert_eq!(part.block_size, Some(512));
        assert_eq!(disk.partitions[0].block_size, None);
        assert_eq!(disk.partitions[0].alignment_offset, 0, "missing file");
    }

    /// The scsi-debug-io-opt disk's numbers: 128 KiB io_opt and cap. Its
    /// source follows the tree's kernel (`osrelease`): sd's rule on 6.1;
    /// since 6.11 no kernel rule lowers the cap to it.
    #[test]
    fn the_cap_source_follows_the_numbers_and_the_kernel() {
        let tree = Tree::new("maxsec");
        tree.disk(
            "sda",
            "8:0",
            &[
                ("size", "524288"),
                ("queue/optimal_io_size", "131072"),
                ("queue/max_sectors_kb", "128"),
                ("queue/max_hw_sectors_kb", "32767"),
            ],
        );
        tree.disk(
            "vda",
            "254:0",
            &[
                ("size", "8"),
                ("queue/max_sectors_kb", "1280"),
                ("queue/max_hw_sectors_kb", "2147483647"),
            ],
        );
        tree.disk(
            "nvme0n1",
            "259:0",
            &[
                ("size", "8"),
                ("queue/max_sectors_kb", "512"),
                ("queue/max_hw_sectors_kb", "512"),
            ],
        );
        let sources = |release: Option<&str>| {
            let file = tree.0.join("osrelease");
            match release {
                Some(release) => fs::write(&file, format!("{release}\n")).unwrap(),
                None => {
                    let _ = fs::remove_file(&file);
                }
            }
            read_disks_in(&tree.0, None, &NoIoctls)
                .unwrap()
                .into_iter()
                .map(|disk| (disk.name, disk.max_sectors_source.unwrap()))
                .collect::<Vec<_>>()
        };
        use MaxSectorsSource::*;
        let named = |list: [(&str, MaxSectorsSource); 3]| {
            list.map(|(name, source)| (name.to_string(), source))
                .to_vec()
        };
        assert_eq!(
            sources(Some("6.1.0-28-amd64")),
            named([
                ("nvme0n1", Hardware),
                ("sda", OptimalIoSize),
                ("vda", KernelDefaultCap)
            ])
        );
        assert_eq!(
            sources(Some("6.12.117+deb12-amd64")),
            named([
                ("nvme0n1", Hardware),
                ("sda", UserOrUnknown),
                ("vda", KernelDefaultCap)
            ])
        );
        // 1280 KiB is no longer the default cap on 7.x.
        assert_eq!(
            sources(Some("7.3.4+deb13-amd64")),
            named([
                ("nvme0n1", Hardware),
                ("sda", UserOrUnknown),
                ("vda", UserOrUnknown)
            ])
        );
        // A tree without a kernel: either rule.
        assert_eq!(
            sources(None),
            named([
                ("nvme0n1", Hardware),
                ("sda", OptimalIoSize),
                ("vda", KernelDefaultCap)
            ])
        );
    }

    #[test]
    fn an_old_kernel_without_newer_attributes_gets_defaults() {
        let tree = Tree::new("old");
        tree.disk(
            "zram0",
            "253:0",
            &[
                ("size", "1000"),
                ("alignment_offset", "-1"),
                ("queue/logical_block_size", "4096"),
                ("queue/scheduler", "none"),
            ],
        );
        let disks = read_disks_in(&tree.0, None, &NoIoctls).unwrap();
        let disk = &disks[0];
        assert_eq!(disk.physical_block_size, 4096, "defaults to logical");
        assert_eq!(disk.minimum_io_size, 4096, "defaults to physical");
        assert_eq!(disk.alignment_offset, 0, "-1 means unalignable");
        assert_eq!(disk.max_sectors_kb, DEFAULT_MAX_SECTORS_KB);
        assert_eq!(disk.max_hw_sectors_kb, DEFAULT_MAX_SECTORS_KB);
        assert_eq!(disk.max_segments, DEFAULT_MAX_SEGMENTS);
        assert_eq!(disk.virt_boundary_mask, 0);
        assert_eq!(disk.scheduler, "none");
        assert!(!disk.request_based, "no mq directory: bio-based");
        assert!(!disk.rotational);
        assert!(disk.partitions.is_empty());
    }

    #[test]
    fn names_select_disks_and_partitions_imply_their_disk() {
        let tree = Tree::new("names");
        for (name, dev) in [("loop10", "7:10"), ("loop2", "7:2"), ("vda", "254:0")] {
            tree.disk(name, dev, &[("size", "8")]);
        }
        tree.partition(
            "loop2",
            "loop2p1",
            "259:4",
            &[("partition", "1"), ("start", "0"), ("size", "8")],
        );
        let all = read_disks_in(&tree.0, None, &NoIoctls).unwrap();
        let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["loop2", "loop10", "vda"]);

        let wanted = [
            "vda".to_string(),
            "loop2p1".to_string(),
            "loop2".to_string(),
        ];
        let some = read_disks_in(&tree.0, Some(&wanted), &NoIoctls).unwrap();
        let names: Vec<&str> = some.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["vda", "loop2"]);

        let err = read_disks_in(&tree.0, Some(&["sdz".to_string()]), &NoIoctls).unwrap_err();
        assert!(
            matches!(&err, GeometryError::UnknownDevice { name } if name == "sdz"),
            "{err}"
        );
        assert!(err.is_usage());
    }

    #[test]
    fn device_numbers_map_to_disks_and_partitions() {
        let tree = Tree::new("devs");
        tree.disk("loop3", "7:3", &[("size", "100")]);
        tree.partition(
            "loop3",
            "loop3p1",
            "259:7",
            &[("partition", "1"), ("start", "8"), ("size", "16")],
        );
        assert_eq!(
            name_of_dev_in(&tree.0, DevId::new(259, 7)).as_deref(),
            Some("loop3p1")
        );
        assert_eq!(
            name_of_dev_in(&tree.0, DevId::new(7, 3)).as_deref(),
            Some("loop3")
        );
        assert_eq!(name_of_dev_in(&tree.0, DevId::new(9, 9)), None);
        assert_eq!(partition_start_in(&tree.0, "loop3p1"), Some(8));
        assert_eq!(partition_start_in(&tree.0, "loop3"), None);
        assert_eq!(partition_start_in(&tree.0, "nosuch"), None);
    }

    /// A virtio disk's `device` directory, on the virtio bus.
    fn virtio_device(tree: &Tree, disk: &str, features: &str) {
        let device = tree.0.join(format!("devices/virtual/block/{disk}/device"));
        tree.write(
            &format!("devices/virtual/block/{disk}/device/features"),
            features,
        );
        fs::create_dir_all(tree.0.join("bus/virtio")).unwrap();
        std::os::unix::fs::symlink(tree.0.join("bus/virtio"), device.join("subsystem")).unwrap();
    }

    #[test]
    fn queue_depth_and_virtio_indirect_descriptors() {
        let tree = Tree::new("virtio");
        // vda on this machine: bit 28 clear, bits 29 and 32 set.
        let vda_features = "0010001001100100000000000000010010000000000000000000000000000000";
        tree.disk(
            "vda",
            "254:0",
            &[
                ("size", "8"),
                ("queue/nr_requests", "256"),
                ("mq/0/nr_tags", "128"),
            ],
        );
        virtio_device(&tree, "vda", vda_features);
        let mut with_indirect = vda_features.as_bytes().to_vec();
        with_indirect[VIRTIO_INDIRECT_DESC_BIT] = b'1';
        tree.disk(
            "vdb",
            "254:16",
            &[
                ("size", "8"),
                ("mq/0/nr_tags", "256"),
                ("mq/1/nr_tags", "64"),
            ],
        );
        virtio_device(&tree, "vdb", std::str::from_utf8(&with_indirect).unwrap());
        // Not virtio: a device directory on another bus.
        tree.disk("sda", "8:0", &[("size", "8"), ("device/features", "1111")]);
        tree.disk("zram0", "252:0", &[("size", "8")]);

        let disks = read_disks_in(&tree.0, None, &NoIoctls).unwrap();
        let by_name = |name: &str| disks.iter().find(|disk| disk.name == name).unwrap();
        let vda = by_name("vda");
        assert_eq!((vda.nr_requests, vda.hw_queue_tags), (256, 128));
        assert_eq!(vda.virtio_indirect_desc, Some(false));
        let vdb = by_name("vdb");
        assert_eq!(vdb.hw_queue_tags, 64, "the smallest hardware queue");
        assert_eq!(vdb.virtio_indirect_desc, Some(true));
        assert_eq!(by_name("sda").virtio_indirect_desc, None);
        let zram = by_name("zram0");
        assert_eq!((zram.nr_requests, zram.hw_queue_tags), (0, 0));
        assert_eq!(zram.virtio_indirect_desc, None);
    }

    #[test]
    fn scheduler_line_parsing() {
        assert_eq!(active_scheduler("[none] mq-deadline"), "none");
        assert_eq!(active_scheduler("none [bfq]"), "bfq");
        assert_eq!(active_scheduler("none"), "none");
        assert_eq!(active_scheduler(""), "none");
    }
}
