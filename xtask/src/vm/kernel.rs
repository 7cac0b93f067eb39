//! The guest kernels: Debian's 6.1 and 6.12 LTS image packages, and the
//! newest 7.x from trixie-backports and sid, downloaded with apt, unpacked
//! and depmod-ed once under `target/vm/kernel/<package>/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{output, run, Result};

/// One Debian kernel line the matrix boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Short name, used on the command line and in result paths: `6.1`, `6.12`.
    pub name: &'static str,
    /// The metapackage whose `Depends` names the line's current ABI package.
    pub metapackage: &'static str,
    /// What every image package of the line starts with (the dot keeps 6.1 and 6.12 apart).
    pub package_prefix: &'static str,
    /// Where the line's packages come from.
    pub archive: Archive,
}

/// The apt archive a line is fetched from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Archive {
    /// The machine's own sources (bookworm): one `linux-image-*` package
    /// with `boot/vmlinuz-*` and `lib/modules/*`, named by a metapackage.
    Machine,
    /// trixie-backports and sid, through a private sources list so the
    /// machine's own apt setup is untouched. From 7.x the image is split into
    /// `linux-binary-*` (the vmlinuz) and `linux-modules-*`, both under
    /// `usr/lib/modules/<release>/`, with `modules.builtin` in `linux-base-*`;
    /// the newest `-amd64` flavour is taken.
    Newer,
}

/// Every kernel the matrix runs each scenario on.
pub const LINES: [Line; 3] = [
    Line {
        name: "6.1",
        metapackage: "linux-image-amd64",
        package_prefix: "linux-image-6.1.",
        archive: Archive::Machine,
    },
    Line {
        name: "6.12",
        metapackage: "linux-image-6.12-amd64",
        package_prefix: "linux-image-6.12.",
        archive: Archive::Machine,
    },
    Line {
        name: "7",
        metapackage: "",
        package_prefix: "linux-binary-7.",
        archive: Archive::Newer,
    },
];

/// The newer archives, for the 7.x kernel and the tools that came with it.
pub const NEWER_SOURCES: &str = "deb http://deb.debian.org/debian trixie-backports main\n\
deb http://deb.debian.org/debian sid main\n";

/// An unpacked kernel with its modules.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub line: Line,
    /// Debian package name, e.g. `linux-image-6.1.0-57-amd64`.
    pub package: String,
    /// `uname -r` of the guest, e.g. `6.1.0-57-amd64`.
    pub release: String,
    pub vmlinuz: PathBuf,
    /// `lib/modules/<release>` with a `modules.dep`.
    pub modules_dir: PathBuf,
}

/// The image package of `line` that its metapackage depends on, from an
/// `apt-cache depends` text. ABIs rotate on the mirrors; the metapackage
/// always names one the mirror has.
pub fn image_package_from_depends(text: &str, line: &Line) -> Option<String> {
    text.lines()
        .filter_map(|entry| entry.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|name| name.starts_with(line.package_prefix) && name.ends_with("-amd64"))
        .map(str::to_string)
}

/// The release (`uname -r`) a kernel image package carries.
pub fn release_of(package: &str) -> Option<String> {
    let release = package.strip_prefix("linux-image-")?;
    let release = release.strip_suffix("-unsigned").unwrap_or(release);
    Some(release.to_string())
}

/// Downloads and unpacks `line`'s kernel unless a cached copy exists.
///
/// Without apt metadata (offline), the newest cached kernel of the line is used.
pub fn ensure(cache: &Path, line: &Line) -> Result<Kernel> {
    if line.archive == Archive::Newer {
        return ensure_newer(cache, line);
    }
    let dir = cache.join("kernel");
    std::fs::create_dir_all(&dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    // Kernel ABIs rotate on the mirrors: before a first download, refresh the
    // package lists so the version apt names is one the mirror still has.
    if newest_cached(&dir, line).is_none() {
        let _ = run(Command::new("apt-get").args(["update", "-q"]));
    }
    let package = match output(Command::new("apt-cache").args(["depends", line.metapackage]))
        .and_then(|text| image_package_from_depends(&text, line))
    {
        Some(package) => package,
        None => newest_cached(&dir, line).ok_or_else(|| {
            format!(
                "cannot tell which {} kernel {} wants (run `apt-get update`) and none is cached in {}",
                line.name,
                line.metapackage,
                dir.display()
            )
        })?,
    };
    let release =
        release_of(&package).ok_or_else(|| format!("odd kernel package name {package}"))?;
    let tree = dir.join(&package);
    let kernel = Kernel {
        line: *line,
        vmlinuz: tree.join(format!("boot/vmlinuz-{release}")),
        modules_dir: tree.join(format!("lib/modules/{release}")),
        package: package.clone(),
        release: release.clone(),
    };
    // `modules.dep` is written last, so its presence means the unpack finished.
    if kernel.vmlinuz.is_file() && kernel.modules_dir.join("modules.dep").is_file() {
        return Ok(kernel);
    }
    eprintln!("xtask: downloading {package} (70-110 MB)");
    let download = dir.join(format!("download-{}", line.name));
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download)
        .map_err(|err| format!("cannot create {}: {err}", download.display()))?;
    run(Command::new("apt-get")
        .current_dir(&download)
        .args(["download", "-q", &package]))?;
    let deb = std::fs::read_dir(&download)
        .map_err(|err| format!("cannot list {}: {err}", download.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .ok_or_else(|| format!("apt-get download left no .deb in {}", download.display()))?;
    let _ = std::fs::remove_dir_all(&tree);
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&tree))?;
    let _ = std::fs::remove_dir_all(&download);
    run(Command::new("depmod").arg("-b").arg(&tree).arg(&release))?;
    if !kernel.vmlinuz.is_file() {
        return Err(format!("{package} has no {}", kernel.vmlinuz.display()));
    }
    // An older ABI's tree (~400 MB) is dead weight once its successor is here;
    // the other lines' trees stay.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(line.package_prefix) && name != package {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    Ok(kernel)
}

/// apt arguments that read the newer archives from `cache/apt-newer` only.
pub fn newer_apt(cache: &Path) -> Result<Vec<String>> {
    let root = cache.join("apt-newer");
    let lists = root.join("lists");
    std::fs::create_dir_all(lists.join("partial"))
        .map_err(|err| format!("cannot create {}: {err}", lists.display()))?;
    let sources = root.join("sources.list");
    std::fs::write(&sources, NEWER_SOURCES)
        .map_err(|err| format!("cannot write {}: {err}", sources.display()))?;
    let args = vec![
        "-o".to_string(),
        format!("Dir::Etc::sourcelist={}", sources.display()),
        "-o".to_string(),
        "Dir::Etc::sourceparts=-".to_string(),
        "-o".to_string(),
        format!("Dir::State::Lists={}", lists.display()),
    ];
    // Lists older than a day may name packages the mirror has dropped.
    let fresh = std::fs::read_dir(&lists).ok().is_some_and(|entries| {
        entries.flatten().any(|entry| {
            entry.file_name().to_string_lossy().ends_with("_Packages")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age.as_secs() < 86_400)
        })
    });
    if !fresh {
        run(Command::new("apt-get").args(&args).args(["update", "-q"]))?;
    }
    Ok(args)
}

/// The newest `linux-binary-<major>.*+debNN-amd64` among apt's package names.
pub fn newest_binary_package(names: &str, line: &Line) -> Option<String> {
    let mut found: Vec<&str> = names
        .lines()
        .map(str::trim)
        .filter(|name| name.starts_with(line.package_prefix) && name.ends_with("-amd64"))
        // `-cloud-amd64` and `-rt-amd64` are other flavours.
        .filter(|name| !name.ends_with("-cloud-amd64") && !name.ends_with("-rt-amd64"))
        .collect();
    found.sort_by_key(|name| version_key(name));
    found.pop().map(str::to_string)
}

fn ensure_newer(cache: &Path, line: &Line) -> Result<Kernel> {
    let dir = cache.join("kernel");
    std::fs::create_dir_all(&dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let named = newer_apt(cache).ok().and_then(|args| {
        output(
            Command::new("apt-cache")
                .args(&args)
                .args(["pkgnames", line.package_prefix]),
        )
        .and_then(|names| newest_binary_package(&names, line))
    });
    let package = match named {
        Some(package) => package,
        None => newest_cached(&dir, line).ok_or_else(|| {
            format!(
                "cannot list the {} kernels of trixie-backports/sid and none is cached in {}",
                line.name,
                dir.display()
            )
        })?,
    };
    let release = package
        .strip_prefix("linux-binary-")
        .ok_or_else(|| format!("odd kernel package name {package}"))?
        .to_string();
    let tree = dir.join(&package);
    let modules_dir = tree.join(format!("usr/lib/modules/{release}"));
    let kernel = Kernel {
        line: *line,
        vmlinuz: modules_dir.join("vmlinuz"),
        modules_dir: modules_dir.clone(),
        package: package.clone(),
        release: release.clone(),
    };
    if kernel.vmlinuz.is_file() && modules_dir.join("modules.dep").is_file() {
        return Ok(kernel);
    }
    let args = newer_apt(cache)?;
    eprintln!("xtask: downloading {package} and its modules (~150 MB)");
    let download = dir.join(format!("download-{}", line.name));
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download)
        .map_err(|err| format!("cannot create {}: {err}", download.display()))?;
    let modules = format!("linux-modules-{release}");
    let base = format!("linux-base-{release}");
    run(Command::new("apt-get")
        .current_dir(&download)
        .args(&args)
        .args(["download", "-q", &package, &modules, &base]))?;
    let _ = std::fs::remove_dir_all(&tree);
    let debs: Vec<PathBuf> = std::fs::read_dir(&download)
        .map_err(|err| format!("cannot list {}: {err}", download.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .collect();
    if debs.len() != 3 {
        return Err(format!(
            "apt-get download left {} .deb files in {}, wanted {package}, {modules} and {base}",
            debs.len(),
            download.display()
        ));
    }
    for deb in &debs {
        run(Command::new("dpkg").arg("-x").arg(deb).arg(&tree))?;
    }
    let _ = std::fs::remove_dir_all(&download);
    run(Command::new("depmod")
        .arg("-b")
        .arg(tree.join("usr"))
        .arg(&release))?;
    if !kernel.vmlinuz.is_file() {
        return Err(format!("{package} has no {}", kernel.vmlinuz.display()));
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(line.package_prefix) && name != package {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    Ok(kernel)
}

fn newest_cached(dir: &Path, line: &Line) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.starts_with(line.package_prefix))
        .collect();
    names.sort_by_key(|name| version_key(name));
    names.pop()
}

/// The numbers in a package name, in order, for ordering versions:
/// `linux-image-6.1.0-57-amd64` -> [6, 1, 0, 57, 64],
/// `linux-image-6.12.117+deb12-amd64` -> [6, 12, 117, 12, 64].
fn version_key(package: &str) -> Vec<u64> {
    package
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
}

/// `modules.dep`: module path -> the paths it needs (all of them, transitively),
/// and `modules.builtin`: what this kernel has built in instead (6.12 builds in
/// virtio, virtio_pci and the CRC modules 6.1 loads).
#[derive(Debug, Default)]
pub struct ModuleDeps {
    deps: BTreeMap<String, Vec<String>>,
    builtin: BTreeSet<String>,
}

/// The module name a path carries: `kernel/drivers/md/dm-mod.ko` (or
/// `.ko.xz`, as 6.12 ships them) -> `dm_mod`.
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

impl ModuleDeps {
    pub fn parse(text: &str) -> ModuleDeps {
        let deps = text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(module, needs)| {
                (
                    module.trim().to_string(),
                    needs.split_whitespace().map(str::to_string).collect(),
                )
            })
            .collect();
        ModuleDeps {
            deps,
            builtin: BTreeSet::new(),
        }
    }

    /// Adds `modules.builtin` (one path per line).
    pub fn with_builtin(mut self, text: &str) -> ModuleDeps {
        self.builtin = text.lines().map(module_name).collect();
        self
    }

    /// The path of the module called `name` (`-` and `_` are the same).
    pub fn path_of(&self, name: &str) -> Option<&str> {
        let wanted = name.replace('-', "_");
        self.deps
            .keys()
            .find(|path| module_name(path) == wanted)
            .map(String::as_str)
    }

    /// `name` and everything it needs, each after its own dependencies;
    /// nothing when the kernel has it built in.
    pub fn load_order(&self, name: &str) -> Result<Vec<String>> {
        let Some(path) = self.path_of(name) else {
            if self.builtin.contains(&name.replace('-', "_")) {
                return Ok(Vec::new());
            }
            return Err(format!("the guest kernel has no module {name}"));
        };
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        self.visit(path, &mut seen, &mut order, 0)?;
        Ok(order)
    }

    fn visit(
        &self,
        path: &str,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
        depth: usize,
    ) -> Result<()> {
        if depth > 64 {
            return Err(format!("modules.dep has a cycle through {path}"));
        }
        if seen.contains(path) {
            return Ok(());
        }
        let needs = self
            .deps
            .get(path)
            .ok_or_else(|| format!("modules.dep does not list {path}"))?;
        for need in needs {
            self.visit(need, seen, order, depth + 1)?;
        }
        seen.insert(path.to_string());
        order.push(path.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN_61_EXCERPT: &str = "\
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/md/dm-mod.ko:
";

    #[test]
    fn the_newest_plain_amd64_binary_is_chosen() {
        let names = "linux-binary-7.2.12+deb13-amd64\nlinux-binary-7.3.4+deb13-cloud-amd64\n\
linux-binary-7.3.4+deb13-amd64\nlinux-binary-7.3.4+deb13-rt-amd64\nlinux-binary-7.2.13+deb14-amd64\n";
        assert_eq!(
            newest_binary_package(names, &LINES[2]).as_deref(),
            Some("linux-binary-7.3.4+deb13-amd64")
        );
        assert_eq!(newest_binary_package("", &LINES[2]), None);
    }

    #[test]
    fn dependencies_load_before_their_users() {
        let deps = ModuleDeps::parse(DEBIAN_61_EXCERPT);
        let order = deps.load_order("virtio_blk").unwrap();
        let names: Vec<String> = order.iter().map(|p| module_name(p)).collect();
        assert_eq!(names, ["virtio_ring", "virtio", "virtio_blk"]);
    }

    #[test]
    fn dashes_and_underscores_name_the_same_module() {
        let deps = ModuleDeps::parse(DEBIAN_61_EXCERPT);
        assert_eq!(deps.path_of("dm_mod"), Some("kernel/drivers/md/dm-mod.ko"));
        assert!(deps.load_order("nvme").is_err());
    }

    #[test]
    fn built_in_modules_need_no_loading_and_compressed_ones_keep_their_name() {
        let deps = ModuleDeps::parse(
            "kernel/drivers/block/virtio_blk.ko.xz:\nkernel/drivers/md/dm-mod.ko.xz:\n",
        )
        .with_builtin(
            "kernel/drivers/virtio/virtio_pci.ko\nkernel/crypto/crc64_rocksoft_generic.ko\n",
        );
        assert_eq!(deps.load_order("virtio_pci").unwrap(), Vec::<String>::new());
        assert_eq!(
            deps.load_order("crc64-rocksoft-generic").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            deps.load_order("dm_mod").unwrap(),
            ["kernel/drivers/md/dm-mod.ko.xz"]
        );
        // Neither a module nor built in: an error, not a silent skip.
        assert!(deps.load_order("nvme").is_err());
    }

    #[test]
    fn a_cycle_is_an_error_not_a_hang() {
        let deps = ModuleDeps::parse("a.ko: b.ko\nb.ko: a.ko\n");
        assert!(deps.load_order("a").is_err());
    }

    #[test]
    fn the_metapackage_names_the_image_of_its_own_line() {
        let [v61, v612, _] = LINES;
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            image_package_from_depends(text, &v61).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        // A metapackage that moved on to another line is not taken for this one.
        assert_eq!(image_package_from_depends(text, &v612), None);
        let text = "linux-image-6.12-amd64\n  Depends: linux-image-6.12.117+deb12-amd64\n";
        assert_eq!(
            image_package_from_depends(text, &v612).as_deref(),
            Some("linux-image-6.12.117+deb12-amd64")
        );
        assert_eq!(image_package_from_depends(text, &v61), None);
        assert_eq!(
            release_of("linux-image-6.1.0-57-amd64-unsigned").as_deref(),
            Some("6.1.0-57-amd64")
        );
        assert_eq!(
            release_of("linux-image-6.12.117+deb12-amd64").as_deref(),
            Some("6.12.117+deb12-amd64")
        );
    }

    #[test]
    fn newer_abis_sort_last() {
        let mut names = [
            "linux-image-6.12.117+deb12-amd64",
            "linux-image-6.12.99+deb12-amd64",
            "linux-image-6.12.111+deb12-amd64",
        ];
        names.sort_by_key(|name| version_key(name));
        assert_eq!(names[2], "linux-image-6.12.117+deb12-amd64");
        assert!(
            version_key("linux-image-6.1.0-57-amd64") > version_key("linux-image-6.1.0-9-amd64")
        );
    }
}
