//! The guest's initramfs: busybox, the static iosplit-trace, the few Debian
//! tools the scenarios run (with the libraries `ldd` lists), a static
//! `guest-io` workload helper, the kernel modules, and the scripts in `xtask/vm/`.
//!
//! The tree is staged afresh each run (cheap copies) and hashed; the gzip'd
//! cpio is only rebuilt when that hash changes.

use std::collections::BTreeSet;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::blktrace13;
use super::kernel::{module_name, Kernel, ModuleDeps};
use crate::util::{run, workspace_root, Result};

/// Dynamic host binaries the scenarios run; copied with their libraries.
const HOST_TOOLS: &[&str] = &["mkfs.ext4", "sfdisk", "dmsetup", "mdadm", "lvm"];
/// Config files those tools read.
const HOST_FILES: &[&str] = &["/etc/mke2fs.conf"];
/// Modules loaded by `load_module` in the guest (each with its dependencies).
pub const MODULES: &[&str] = &[
    "crct10dif_generic",
    "crc64_rocksoft_generic",
    "virtio_pci",
    "virtio_blk",
    "scsi_debug",
    "sd_mod",
    "nvme",
    "dm_mod",
    // stacks: md RAID, and dm-crypt with the null cipher (the kernel would ask a
    // modprobe the guest does not run for the cipher and its ECB mode).
    "dm_crypt",
    "dm_flakey",
    "dm_multipath",
    "dm_round_robin",
    "raid0",
    "raid1",
    "raid456",
    "raid10",
    "crypto_null",
    "ecb",
    // ext4 for cgroup-writeback; its checksums need the crc32c shash, which
    // the kernel would otherwise ask a modprobe the guest does not run for.
    "crc32c_generic",
    "ext4",
];

/// Crypto-API wrappers of the CRCs that 6.1 and 6.12 ask a modprobe for;
/// 7.x calls its CRC library directly and has no such modules.
const ONLY_WHERE_PRESENT: &[&str] = &[
    "crct10dif_generic",
    "crc64_rocksoft_generic",
    "crc32c_generic",
];

pub struct Inputs<'a> {
    pub kernel: &'a Kernel,
    /// Tools beyond [`HOST_TOOLS`] (a scenario's own): an image of their own.
    pub extra_tools: &'a [&'a str],
    pub tracer: &'a Path,
    pub guest_io: &'a Path,
    /// `target/vm`.
    pub cache: &'a Path,
}

/// Builds (or reuses) the kernel's initramfs and returns its path.
pub fn ensure(inputs: &Inputs) -> Result<PathBuf> {
    // One directory per kernel line: each keeps its own cached image.
    let mut images = inputs.cache.join("initramfs").join(inputs.kernel.line.name);
    if !inputs.extra_tools.is_empty() {
        images = images.join(format!("with-{}", inputs.extra_tools.join("-")));
    }
    let stage = images.join("stage");
    let _ = std::fs::remove_dir_all(&stage);
    mkdir(&stage)?;
    for dir in [
        "bin",
        "usr/bin",
        "etc/modules",
        "proc",
        "sys",
        "dev",
        "tmp",
        "results",
        "mnt",
    ] {
        mkdir(&stage.join(dir))?;
    }
    install_busybox(&stage)?;
    copy(inputs.tracer, &stage.join("usr/bin/iosplit-trace"))?;
    copy(inputs.guest_io, &stage.join("usr/bin/guest-io"))?;
    let mut libraries = BTreeSet::new();
    let (newer, host): (Vec<&str>, Vec<&str>) = inputs
        .extra_tools
        .iter()
        .partition(|tool| **tool == blktrace13::TOOL);
    if !newer.is_empty() {
        install_blktrace13(inputs.cache, &stage)?;
    }
    for tool in HOST_TOOLS.iter().chain(&host) {
        let path = which(tool)?;
        copy(&path, &stage.join("usr/bin").join(tool))?;
        libraries.extend(shared_libraries(&path)?);
    }
    for library in &libraries {
        copy(library, &stage.join(relative(library)))?;
    }
    for file in HOST_FILES {
        copy(Path::new(file), &stage.join(relative(Path::new(file))))?;
    }
    install_modules(inputs.kernel, &stage)?;
    install_scripts(&stage)?;

    let key = tree_hash(&stage)?;
    let image = images.join(format!("initramfs-{key:016x}.cpio.gz"));
    if image.is_file() {
        return Ok(image);
    }
    eprintln!("xtask: packing the initramfs ({})", image.display());
    let partial = image.with_extension("partial");
    let script = format!(
        "set -o pipefail; cd '{}' && find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 | gzip -1 > '{}'",
        stage.display(),
        partial.display()
    );
    run(Command::new("bash").arg("-c").arg(script))?;
    std::fs::rename(&partial, &image)
        .map_err(|err| format!("cannot move {} into place: {err}", image.display()))?;
    // Older images only take space.
    if let Ok(entries) = std::fs::read_dir(&images) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path != image && path.to_string_lossy().ends_with(".cpio.gz") {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    Ok(image)
}

/// Debian sid's blktrace 1.3.0 with sid's libc and loader under
/// `/opt/blktrace-1.3`, run by the `blktrace-1.3` wrapper: the host's
/// libraries are too old for it, and the other tools keep the host's.
fn install_blktrace13(cache: &Path, stage: &Path) -> Result<()> {
    let root = blktrace13::ensure(cache)?;
    let dir = stage.join(blktrace13::GUEST_DIR);
    for (from, name) in blktrace13::guest_files(&root) {
        copy(&from, &dir.join(name))?;
    }
    let wrapper = stage.join("usr/bin").join(blktrace13::TOOL);
    std::fs::write(&wrapper, blktrace13::guest_wrapper())
        .map_err(|err| format!("cannot write {}: {err}", wrapper.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .map_err(|err| format!("cannot chmod {}: {err}", wrapper.display()))?;
    Ok(())
}

fn mkdir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|err| format!("cannot copy {} to {}: {err}", from.display(), to.display()))
}

fn relative(path: &Path) -> PathBuf {
    path.strip_prefix("/").unwrap_or(path).to_path_buf()
}

fn which(tool: &str) -> Result<PathBuf> {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let path = Path::new(dir).join(tool);
        if path.is_file() {
            return Ok(path);
        }
    }
    Err(format!(
        "{tool} is not installed (cargo xtask setup installs it)"
    ))
}

/// Library paths from `ldd` output: `libx.so => /lib/libx.so (0x..)` and the loader line.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let target = match line.split_once("=>") {
                Some((_, target)) => target.trim(),
                None => line,
            };
            let path = target.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|err| format!("cannot run ldd: {err}"))?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

fn install_busybox(stage: &Path) -> Result<()> {
    let busybox = Path::new("/bin/busybox");
    let listing = Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|err| format!("cannot run busybox (package busybox-static): {err}"))?;
    let static_check = Command::new("ldd").arg(busybox).output();
    if static_check.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("=>")) {
        return Err("/bin/busybox is dynamic: install busybox-static".to_string());
    }
    copy(busybox, &stage.join("bin/busybox"))?;
    for applet in String::from_utf8_lossy(&listing.stdout).split_whitespace() {
        if applet == "busybox" {
            continue;
        }
        let link = stage.join("bin").join(applet);
        std::os::unix::fs::symlink("busybox", &link)
            .map_err(|err| format!("cannot link {}: {err}", link.display()))?;
    }
    Ok(())
}

/// Copies the modules and writes `/etc/modules/<name>`: the load order, one
/// path per line (empty for a module the kernel has built in).
fn install_modules(kernel: &Kernel, stage: &Path) -> Result<()> {
    let dep_path = kernel.modules_dir.join("modules.dep");
    let text = std::fs::read_to_string(&dep_path)
        .map_err(|err| format!("cannot read {}: {err}", dep_path.display()))?;
    let builtin =
        std::fs::read_to_string(kernel.modules_dir.join("modules.builtin")).unwrap_or_default();
    let deps = ModuleDeps::parse(&text).with_builtin(&builtin);
    let target = stage.join("lib/modules").join(&kernel.release);
    for name in MODULES {
        let order = match deps.load_order(name) {
            Err(_) if ONLY_WHERE_PRESENT.contains(name) && deps.path_of(name).is_none() => {
                Vec::new()
            }
            other => other?,
        };
        let mut installed = Vec::new();
        for module in &order {
            installed.push(install_module(
                &kernel.modules_dir.join(module),
                &target,
                module,
            )?);
        }
        let list: String = installed
            .iter()
            .map(|module| format!("/lib/modules/{}/{module}\n", kernel.release))
            .collect();
        let file = stage.join("etc/modules").join(module_name(name));
        std::fs::write(&file, list)
            .map_err(|err| format!("cannot write {}: {err}", file.display()))?;
    }
    Ok(())
}

/// The decompressor for a compressed module, and the name without its suffix.
pub fn decompressor(module: &str) -> Option<(&'static str, &str)> {
    [(".xz", "xz"), (".zst", "zstd"), (".gz", "gzip")]
        .into_iter()
        .find_map(|(suffix, tool)| module.strip_suffix(suffix).map(|plain| (tool, plain)))
}

/// Copies one module into the stage, decompressed (busybox insmod reads only
/// plain ELF; 6.12 ships `.ko.xz`). Returns its path relative to `target`.
fn install_module(source: &Path, target: &Path, module: &str) -> Result<String> {
    let Some((tool, plain)) = decompressor(module) else {
        copy(source, &target.join(module))?;
        return Ok(module.to_string());
    };
    let dest = target.join(plain);
    if let Some(parent) = dest.parent() {
        mkdir(parent)?;
    }
    let file = std::fs::File::create(&dest)
        .map_err(|err| format!("cannot create {}: {err}", dest.display()))?;
    run(Command::new(tool).arg("-dc").arg(source).stdout(file))?;
    Ok(plain.to_string())
}

/// `xtask/vm/`: `init` becomes `/init`, the rest goes to `/vmtest/`.
fn install_scripts(stage: &Path) -> Result<()> {
    let source = workspace_root().join("xtask/vm");
    copy(&source.join("init"), &stage.join("init"))?;
    copy_tree(&source, &stage.join("vmtest"))?;
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    mkdir(to)?;
    let entries =
        std::fs::read_dir(from).map_err(|err| format!("cannot list {}: {err}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &dest)?;
        } else {
            copy(&path, &dest)?;
        }
    }
    Ok(())
}

/// A hash of every path, link target and file content under `root`, in sorted order.
fn tree_hash(root: &Path) -> Result<u64> {
    let mut paths = Vec::new();
    collect(root, &mut paths)?;
    paths.sort();
    // DefaultHasher::new() has fixed keys: stable for one toolchain, which is all a cache key needs.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for path in &paths {
        hasher.write(
            path.strip_prefix(root)
                .unwrap_or(path)
                .to_string_lossy()
                .as_bytes(),
        );
        let meta = std::fs::symlink_metadata(path)
            .map_err(|err| format!("cannot stat {}: {err}", path.display()))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(path).unwrap_or_default();
            hasher.write(target.to_string_lossy().as_bytes());
        } else if meta.is_file() {
            let bytes = std::fs::read(path)
                .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
            hasher.write(&bytes);
        }
    }
    Ok(hasher.finish())
}

fn collect(dir: &Path, paths: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        paths.push(path.clone());
        if is_dir {
            collect(&path, paths)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_library_and_loader_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibext2fs.so.2 => /lib/x86_64-linux-gnu/libext2fs.so.2 (0x00007f72)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f72)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f72)\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libext2fs.so.2"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tstatically linked\n").is_empty());
    }

    #[test]
    fn compressed_modules_are_named_without_their_suffix() {
        assert_eq!(
            decompressor("kernel/drivers/md/dm-mod.ko.xz"),
            Some(("xz", "kernel/drivers/md/dm-mod.ko"))
        );
        assert_eq!(decompressor("kernel/drivers/md/dm-mod.ko"), None);
    }

    #[test]
    fn tree_hash_follows_content() {
        let dir = std::env::temp_dir().join(format!("xtask-vm-hash-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), b"one").unwrap();
        let first = tree_hash(&dir).unwrap();
        assert_eq!(first, tree_hash(&dir).unwrap());
        std::fs::write(dir.join("sub/a"), b"two").unwrap();
        assert_ne!(first, tree_hash(&dir).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
