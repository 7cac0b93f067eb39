//! Names for the engine's owner ids: a cgroup id becomes its path, a file's
//! (device, inode) its path where that can be had without scanning a
//! filesystem. Run once per report, off the hot path.
//!
//! - cgroup: the blkcg's kernfs id is the inode number of its directory in
//!   the hierarchy the `blkio`/`io` controller is mounted on (cgroup v1
//!   `blkio`, else the v2 mount); that hierarchy's directories are walked.
//! - file: the inode is opened by handle (`open_by_handle_at`, an
//!   `FILEID_INO32_GEN` handle with generation 0, which ext4 accepts without
//!   checking) on a mount of its filesystem, and the kernel names the opened
//!   file. Other filesystems, or a file no longer cached, keep inode and dev.

pub mod workload;

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::geometry::DevId;
use crate::model::{Attribution, OwnerKnown};

/// Most cgroup directories visited looking for ids.
const CGROUP_DIRS_MAX: usize = 100_000;

/// One line of `/proc/self/mountinfo`, the fields used here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub dev: DevId,
    /// The directory of the filesystem mounted (`/` for a whole filesystem).
    pub root: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub super_options: String,
}

/// Parses `/proc/self/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let (major, minor) = fields.get(2)?.split_once(':')?;
            let mut tail = after.split(' ');
            let fs_type = tail.next()?.to_string();
            let _source = tail.next()?;
            Some(Mount {
                dev: DevId::new(major.parse().ok()?, minor.parse().ok()?),
                root: unescape(fields.get(3)?),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fs_type,
                super_options: tail.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(value) = u8::from_str_radix(digits, 8) {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount of the hierarchy that holds blkcgs: cgroup v1 with `blkio`,
/// else cgroup v2.
pub fn blkcg_hierarchy(mounts: &[Mount]) -> Option<&Mount> {
    let whole = |mount: &&Mount| mount.root == "/";
    mounts
        .iter()
        .filter(whole)
        .find(|mount| {
            mount.fs_type == "cgroup" && mount.super_options.split(',').any(|o| o == "blkio")
        })
        .or_else(|| {
            mounts
                .iter()
                .filter(whole)
                .find(|mount| mount.fs_type == "cgroup2")
        })
}

/// Paths (from the hierarchy's root, as `/proc/PID/cgroup` spells them) of
/// the cgroups whose ids are in `wanted`, walking the hierarchy's directories.
pub fn cgroup_paths(root: &Path, wanted: &[u64]) -> Vec<(u64, String)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > CGROUP_DIRS_MAX || found.len() == wanted.len() {
            break;
        }
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        if wanted.contains(&meta.ino()) {
            let relative = dir.strip_prefix(root).unwrap_or(&dir);
            found.push((meta.ino(), format!("/{}", relative.display())));
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    found
}

/// The id of cgroup `path` in the hierarchy that holds blkcgs: a path as
/// `/proc/PID/cgroup` spells it (from that hierarchy's root), or a
/// directory under its mount.
pub fn cgroup_id(mounts: &[Mount], path: &str) -> Result<u64, Error> {
    let hierarchy = blkcg_hierarchy(mounts)
        .ok_or_else(|| Error::usage("--cgroup: no cgroup v1 blkio or v2 hierarchy is mounted"))?;
    let root = &hierarchy.mount_point;
    let given = Path::new(path);
    let directory = if given.starts_with(root) {
        given.to_path_buf()
    } else {
        root.join(path.trim_start_matches('/'))
    };
    match std::fs::metadata(&directory) {
        Ok(meta) if meta.is_dir() => Ok(meta.ino()),
        _ => Err(Error::usage(format!(
            "--cgroup {path}: no such cgroup in {} (give it as /proc/PID/cgroup shows it)",
            root.display()
        ))),
    }
}

/// A task name as the kernel keeps it: at most 15 bytes, NUL-padded (longer
/// names are cut there, as the kernel cuts them).
pub fn comm_key(name: &str) -> Result<[u8; tracer_common::COMM_BYTES], Error> {
    if name.is_empty() || name.contains('\0') {
        return Err(Error::usage(
            "--comm needs a task name, as `ps -o comm` shows it",
        ));
    }
    let mut key = [0; tracer_common::COMM_BYTES];
    let length = name.len().min(tracer_common::COMM_BYTES - 1);
    key[..length].copy_from_slice(&name.as_bytes()[..length]);
    Ok(key)
}

/// `FILEID_INO32_GEN` (include/linux/exportfs.h): a 32-bit inode number and
/// a generation; ext4 skips the generation check when it is 0.
const FILEID_INO32_GEN: i32 = 1;

/// The path of inode `ino` of the filesystem mounted at `mount_point`, as
/// the kernel names it once opened by handle; needs CAP_DAC_READ_SEARCH.
pub fn path_by_handle(mount_point: &Path, ino: u64) -> Option<String> {
    let ino = u32::try_from(ino).ok()?;
    let directory = CString::new(mount_point.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let mount_fd = unsafe { libc::open(directory.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    if mount_fd < 0 {
        return None;
    }
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        id: [u32; 2],
    }
    let handle = Handle {
        bytes: 8,
        kind: FILEID_INO32_GEN,
        id: [ino, 0],
    };
    // SAFETY: `handle` is a `struct file_handle` with its 8 bytes inline,
    // `mount_fd` is open; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd,
            &handle as *const Handle,
            libc::O_PATH,
        )
    } as i32;
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(mount_fd) };
    if fd < 0 {
        return None;
    }
    let named = std::fs::read_link(format!("/proc/self/fd/{fd}"));
    // SAFETY: closing the fd opened by handle.
    unsafe { libc::close(fd) };
    let path = named.ok()?.to_string_lossy().into_owned();
    // A disconnected or deleted file has no usable name.
    (path.starts_with('/') && !path.ends_with(" (deleted)") && path != "/").then_some(path)
}

/// Fills in cgroup and file paths where they can be found.
pub fn resolve(attribution: &mut Attribution) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mounts = parse_mountinfo(&mountinfo);
    resolve_with(attribution, &mounts);
}

pub fn resolve_with(attribution: &mut Attribution, mounts: &[Mount]) {
    let mut ids: Vec<u64> = attribution
        .cgroups
        .iter()
        .filter_map(|entry| entry.cgroup_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if let Some(hierarchy) = blkcg_hierarchy(mounts).filter(|_| !ids.is_empty()) {
        let paths = cgroup_paths(&hierarchy.mount_point, &ids);
        for entry in &mut attribution.cgroups {
            if let Some((_, path)) = paths.iter().find(|(id, _)| Some(*id) == entry.cgroup_id) {
                entry.workload = workload::workload_of(path);
                entry.cgroup = Some(path.clone());
            }
        }
    }
    for entry in &mut attribution.files {
        if entry.owner != OwnerKnown::Known {
            continue;
        }
        let (Some(ino), Some(dev)) = (entry.inode, entry.dev.as_deref()) else {
            continue;
        };
        let mount = mounts
            .iter()
            .find(|mount| mount.root == "/" && mount.dev.to_string() == dev);
        entry.path = match mount {
            Some(mount) => path_by_handle(&mount.mount_point, ino),
            None => block_device_cache(Path::new("/sys"), dev, ino),
        };
        // No path: at least where the filesystem is (a bind mount of part of it will do).
        if entry.path.is_none() {
            entry.mount = mount
                .or_else(|| mounts.iter().find(|m| m.dev.to_string() == dev))
                .map(|m| m.mount_point.display().to_string());
        }
    }
}

/// A block device's own page cache (a filesystem's metadata and journal, or
/// buffered writes to `/dev/…`): its inode lives on the unmounted bdev
/// pseudo-filesystem (an anonymous `0:N`) and is numbered by the device's
/// kernel `dev_t`. Named `/dev/NAME` when sysfs knows that device.
pub fn block_device_cache(sysfs: &Path, dev: &str, ino: u64) -> Option<String> {
    if !dev.starts_with("0:") {
        return None;
    }
    let device = DevId::from_kernel(u32::try_from(ino).ok()?);
    let uevent = std::fs::read_to_string(sysfs.join(format!("dev/block/{device}/uevent"))).ok()?;
    let name = uevent
        .lines()
        .find_map(|line| line.strip_prefix("DEVNAME="))?;
    Some(format!("/dev/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
90 22 259:1 / /mnt/with\\040space rw - ext4 /dev/loop0p1 rw
91 22 259:1 /sub /mnt/bind rw - ext4 /dev/loop0p1 rw
garbage line
";

    #[test]
    fn mountinfo_gives_devices_roots_and_escaped_mount_points() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 6);
        assert_eq!(mounts[4].dev, DevId::new(259, 1));
        assert_eq!(mounts[4].mount_point, PathBuf::from("/mnt/with space"));
        assert_eq!(mounts[5].root, "/sub");
        assert_eq!(mounts[2].super_options, "rw,blkio");
    }

    #[test]
    fn blkcgs_live_on_the_v1_blkio_hierarchy_else_on_v2() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(
            blkcg_hierarchy(&mounts).map(|m| m.mount_point.clone()),
            Some(PathBuf::from("/sys/fs/cgroup/blkio"))
        );
        let v2_only: Vec<Mount> = mounts
            .into_iter()
            .filter(|m| !m.super_options.contains("blkio"))
            .collect();
        assert_eq!(
            blkcg_hierarchy(&v2_only).map(|m| m.mount_point.clone()),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn cgroup_ids_are_found_by_directory_inode() {
        let root = std::env::temp_dir().join(format!("iosplit-owners-{}", std::process::id()));
        let child = root.join("a").join("b");
        std::fs::create_dir_all(&child).unwrap();
        let ino = std::fs::metadata(&child).unwrap().ino();
        let root_ino = std::fs::metadata(&root).unwrap().ino();
        let mut found = cgroup_paths(&root, &[ino, root_ino, 1 << 60]);
        found.sort();
        let mut expected = vec![(ino, "/a/b".to_string()), (root_ino, "/".to_string())];
        expected.sort();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, expected);
    }

    #[test]
    fn cgroup_paths_resolve_in_the_blkcg_hierarchy_and_names_cut_like_comm() {
        let root = std::env::temp_dir().join(format!("iosplit-cgid-{}", std::process::id()));
        std::fs::create_dir_all(root.join("svc")).unwrap();
        let mounts = vec![Mount {
            dev: DevId::new(0, 35),
            root: "/".into(),
            mount_point: root.clone(),
            fs_type: "cgroup".into(),
            super_options: "rw,blkio".into(),
        }];
        let ino = std::fs::metadata(root.join("svc")).unwrap().ino();
        let by_name = cgroup_id(&mounts, "/svc");
        let by_mount = cgroup_id(&mounts, root.join("svc").to_str().unwrap());
        let missing = cgroup_id(&mounts, "/nope");
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(by_name.unwrap(), ino);
        assert_eq!(by_mount.unwrap(), ino);
        assert!(missing.unwrap_err().to_string().contains("no such cgroup"));
        assert!(cgroup_id(&[], "/svc").is_err());
        assert_eq!(&comm_key("dd").unwrap()[..3], b"dd\0");
        let long = comm_key("a-very-long-task-name").unwrap();
        assert_eq!(&long[..15], b"a-very-long-tas");
        assert_eq!(long[15], 0);
        assert!(comm_key("").is_err());
    }

    #[test]
    fn a_block_devices_own_cache_is_named_by_its_device() {
        let sysfs = std::env::temp_dir().join(format!("iosplit-bdev-{}", std::process::id()));
        let dir = sysfs.join("dev/block/7:1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("uevent"), "MAJOR=7\nMINOR=1\nDEVNAME=loop1\n").unwrap();
        let found = block_device_cache(&sysfs, "0:3", (7 << 20) | 1);
        let on_a_filesystem = block_device_cache(&sysfs, "259:0", (7 << 20) | 1);
        let unknown = block_device_cache(&sysfs, "0:3", (8 << 20) | 9);
        std::fs::remove_dir_all(&sysfs).unwrap();
        assert_eq!(found.as_deref(), Some("/dev/loop1"));
        assert_eq!(on_a_filesystem, None);
        assert_eq!(unknown, None);
    }

    #[test]
    fn an_inode_beyond_32_bits_or_a_missing_mount_has_no_path() {
        assert_eq!(path_by_handle(Path::new("/"), 1 << 40), None);
        assert_eq!(path_by_handle(Path::new("/nonexistent/mount"), 12), None);
    }

    #[test]
    fn a_file_without_a_path_names_its_mount() {
        let mounts = vec![Mount {
            dev: DevId::new(259, 1),
            root: "/".into(),
            mount_point: "/nonexistent/data".into(),
            fs_type: "ext4".into(),
            super_options: "rw".into(),
        }];
        let file = |dev: &str| {
            let mut entry =
                crate::model::OwnerEntry::new(OwnerKnown::Known, "sda1".into(), Default::default());
            entry.inode = Some(12);
            entry.dev = Some(dev.into());
            entry
        };
        let mut attribution = Attribution {
            files: vec![file("259:1"), file("259:9")],
            ..Attribution::default()
        };
        resolve_with(&mut attribution, &mounts);
        let [mounted, unmounted] = &attribution.files[..] else {
            panic!("{:?}", attribution.files);
        };
        assert_eq!(mounted.path, None);
        assert_eq!(mounted.mount.as_deref(), Some("/nonexistent/data"));
        assert_eq!(
            mounted.file_name().unwrap(),
            "inode 12 on 259:1 (mounted at /nonexistent/data)"
        );
        assert_eq!(unmounted.mount, None);
        assert_eq!(unmounted.file_name().unwrap(), "inode 12 on 259:9");
    }
}
