//! What each task sets up before it runs, by purpose, so that a task installs
//! only its own tools: `cargo xtask run` needs the nightly toolchain with
//! rust-src and bpf-linker and nothing from apt, while `cargo xtask setup`
//! installs every purpose's tools for contributors. Idempotent.
//!
//! Debian packages go in with `apt-get install --no-remove`, after a dry run
//! that would show apt removing or downgrading a package the user has: then
//! nothing is installed and one line says which package, why, and the
//! command to do it by hand. Only with [`ALLOW_REMOVALS_ENV`] set (CI's
//! machines are disposable: `.ci/run` sets it) does it let apt replace them,
//! saying which first. Without apt (another distribution) nothing is
//! installed: a task whose tools are missing names them, with their Debian
//! and Fedora packages.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{is_root, on_path, output, run, workspace_root, Result};

/// Why a task needs something: each purpose lists its own Debian packages and
/// the tools fetched by rustup, cargo or pip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Building and running iosplit-trace: its eBPF crate needs the nightly
    /// with rust-src and bpf-linker. The C compiler and libc headers that
    /// ring and zstd-sys compile with are the ones cargo already linked
    /// xtask with, so this needs no Debian package.
    Build,
    /// The static binary that dist, image and the VM matrix ship.
    Static,
    /// The systemd units that dist and install lay out (verified first).
    Units,
    /// The Debian package beside the tarball.
    Deb,
    /// rustfmt and clippy: `cargo xtask test` fails on their complaints.
    Lints,
    /// The host test suites (`cargo test --workspace`).
    HostTests,
    /// The fuzz targets in fuzz/, run briefly by `cargo xtask test`.
    Fuzz,
    /// The OCI image, built offline.
    Image,
    /// The image run under podman as the DaemonSet runs it (test, as root).
    ImageSmoke,
    /// The .deb installed, checked and removed on this machine (test, as root).
    DebSmoke,
    /// The overhead benchmark.
    Bench,
    /// The VM kernel matrix.
    VmMatrix,
}

/// What each task sets up.
pub const RUN: &[Purpose] = &[Purpose::Build];
pub const INSTALL: &[Purpose] = &[Purpose::Build, Purpose::Static, Purpose::Units];
pub const DIST: &[Purpose] = &[
    Purpose::Build,
    Purpose::Static,
    Purpose::Units,
    Purpose::Deb,
];
pub const IMAGE: &[Purpose] = &[Purpose::Build, Purpose::Static, Purpose::Image];
pub const BENCH: &[Purpose] = &[Purpose::Build, Purpose::Bench];
pub const VM_TEST: &[Purpose] = &[Purpose::Build, Purpose::Static, Purpose::VmMatrix];
/// Everything `cargo xtask test` runs: lints, host tests, fuzzing, the image
/// and the .deb on this machine, then the VM matrix (CI runs it on a fresh machine).
pub const TEST: &[Purpose] = &[
    Purpose::Build,
    Purpose::Lints,
    Purpose::HostTests,
    Purpose::Fuzz,
    Purpose::Static,
    Purpose::Units,
    Purpose::Deb,
    Purpose::Image,
    Purpose::ImageSmoke,
    Purpose::DebSmoke,
    Purpose::VmMatrix,
];
/// `cargo xtask setup`: every purpose, for contributors.
pub const EVERYTHING: &[Purpose] = &[
    Purpose::Build,
    Purpose::Lints,
    Purpose::HostTests,
    Purpose::Fuzz,
    Purpose::Static,
    Purpose::Units,
    Purpose::Deb,
    Purpose::Image,
    Purpose::ImageSmoke,
    Purpose::DebSmoke,
    Purpose::Bench,
    Purpose::VmMatrix,
];

/// A Debian package, its Fedora counterpart, and how to tell the tool is
/// there without a package manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Package {
    pub debian: &'static str,
    pub fedora: &'static str,
    /// Any of these shows it is installed: a program (looked for on PATH and
    /// in the sbin directories) or an absolute path.
    pub probes: &'static [&'static str],
}

const fn package(
    debian: &'static str,
    fedora: &'static str,
    probes: &'static [&'static str],
) -> Package {
    Package {
        debian,
        fedora,
        probes,
    }
}

// The packages, each with who needs it.
const SFDISK: Package = package("fdisk", "util-linux", &["sfdisk"]); // partitions loop and guest disks
const E2FSPROGS: Package = package("e2fsprogs", "e2fsprogs", &["mkfs.ext4"]); // mkfs.ext4, filefrag
const XFSPROGS: Package = package("xfsprogs", "xfsprogs", &["mkfs.xfs"]); // tests/run_files.rs
/// initdb, pg_ctl, pgbench under `run` (tests/run_postgres.rs).
const POSTGRESQL: Package = package(
    "postgresql",
    "postgresql-server postgresql-contrib",
    &["pg_ctl", "/usr/lib/postgresql"],
);
const UTIL_LINUX: Package = package("util-linux", "util-linux", &["losetup"]); // losetup, partx, blockdev, setpriv
/// tests/run_libaio.rs checks run against fio's own counts; false_alarms.rs; the bench's workloads.
const FIO: Package = package("fio", "fio", &["fio"]);
const TMUX: Package = package("tmux", "tmux", &["tmux"]); // the live view driven in a terminal (tests/tui.rs)
/// The SIGKILL fault test: no program or link of ours is left attached.
const BPFTOOL: Package = package("bpftool", "bpftool", &["bpftool"]);
/// tests/serve.rs: a real Prometheus scrapes `serve`; tests/fleet.rs and
/// serve.rs: promtool checks the metrics and tests the rules.
const PROMETHEUS: Package = package("prometheus", "golang-github-prometheus", &["promtool"]);
const CURL: Package = package("curl", "curl", &["curl"]); // queries Prometheus and the image's `serve`
/// systemd-analyze verifies the units (dist, tests/fleet.rs, the installed .deb).
const SYSTEMD: Package = package("systemd", "systemd", &["systemd-analyze"]);
const SETCAP: Package = package("libcap2-bin", "libcap", &["setcap"]); // the non-root test
/// tests/serve.rs: serve over TLS with basic auth, as Prometheus scrapes it:
/// a certificate made offline, and a bcrypt hash made as users make them.
const OPENSSL: Package = package("openssl", "openssl", &["openssl"]);
const HTPASSWD: Package = package("apache2-utils", "httpd-tools", &["htpasswd"]);
/// tests/html.rs: renders `analyze --html` headless.
const CHROMIUM: Package = package("chromium", "chromium", &["chromium", "chromium-browser"]);
const FILE: Package = package("file", "file", &["file"]); // checks a binary is static
/// libc.a for the static binary (Debian's libc6-dev, which linking already needs, has it).
const LIBC_STATIC: Package = package(
    "libc6-dev",
    "glibc-static",
    &["/usr/lib/x86_64-linux-gnu/libc.a", "/usr/lib64/libc.a"],
);
const DPKG: Package = package("dpkg", "dpkg", &["dpkg-deb"]); // builds, installs and removes the .deb
const BUILDAH: Package = package("buildah", "buildah", &["buildah"]); // builds the OCI image offline
/// The image under podman with Debian's runc (the DaemonSet's capabilities and mounts).
const PODMAN: Package = package("podman", "podman", &["podman"]);
const RUNC: Package = package("runc", "runc", &["runc"]);
const BPFTRACE: Package = package("bpftrace", "bpftrace", &["bpftrace"]); // the bench's peer
                                                                          // cargo xtask vm-test: the guest machine, its initramfs and module tooling.
const QEMU: Package = package(
    "qemu-system-x86",
    "qemu-system-x86",
    &["qemu-system-x86_64"],
);
const BUSYBOX: Package = package("busybox-static", "busybox", &["/bin/busybox"]); // the guest's userland
const CPIO: Package = package("cpio", "cpio", &["cpio"]); // packs the initramfs
const KMOD: Package = package("kmod", "kmod", &["depmod"]); // depmod for the guest kernel's modules
const DMSETUP: Package = package("dmsetup", "device-mapper", &["dmsetup"]); // the stacks scenario
const MDADM: Package = package("mdadm", "mdadm", &["mdadm"]); // the stacks scenario
const LVM2: Package = package("lvm2", "lvm2", &["lvm"]); // the stacks scenario: LVM's own tools
const GCC: Package = package("gcc", "gcc", &["gcc"]); // builds the static guest-io helper
/// blktrace captures in the blk-oracle guest; blkparse and btt read its
/// binaries there and in tests/corpus_btt.rs, an oracle independent of ours.
const BLKTRACE: Package = package("blktrace", "blktrace", &["blktrace", "blkparse", "btt"]);

impl Purpose {
    /// The Debian packages this purpose needs.
    pub fn packages(self) -> &'static [Package] {
        match self {
            Purpose::Build | Purpose::Lints | Purpose::Fuzz => &[],
            Purpose::Static => &[FILE, LIBC_STATIC],
            Purpose::Units => &[SYSTEMD],
            Purpose::Deb => &[DPKG],
            Purpose::HostTests => &[
                SFDISK, E2FSPROGS, XFSPROGS, POSTGRESQL, UTIL_LINUX, FIO, TMUX, BPFTOOL,
                PROMETHEUS, CURL, SYSTEMD, SETCAP, OPENSSL, HTPASSWD, CHROMIUM, BLKTRACE,
            ],
            Purpose::Image => &[BUILDAH],
            Purpose::ImageSmoke => &[PODMAN, RUNC, CURL, UTIL_LINUX],
            Purpose::DebSmoke => &[DPKG, SYSTEMD],
            Purpose::Bench => &[FIO, BPFTRACE, UTIL_LINUX, SFDISK],
            Purpose::VmMatrix => &[
                QEMU,
                BUSYBOX,
                CPIO,
                KMOD,
                DMSETUP,
                MDADM,
                LVM2,
                FILE,
                GCC,
                LIBC_STATIC,
                E2FSPROGS,
                SFDISK,
                UTIL_LINUX,
                BLKTRACE,
            ],
        }
    }

    /// The tools this purpose fetches with rustup, cargo or pip.
    fn tools(self) -> &'static [Tool] {
        match self {
            Purpose::Build => &[Tool::Nightly, Tool::BpfLinker],
            Purpose::Lints => &[Tool::Lints],
            Purpose::Fuzz => &[Tool::Nightly, Tool::CargoFuzz],
            Purpose::HostTests => &[Tool::KubernetesValidate],
            Purpose::Static
            | Purpose::Units
            | Purpose::Deb
            | Purpose::Image
            | Purpose::ImageSmoke
            | Purpose::DebSmoke
            | Purpose::Bench
            | Purpose::VmMatrix => &[],
        }
    }
}

/// Tools that come from rustup, cargo or pip rather than a distribution,
/// installed in this order (bpf-linker and cargo-fuzz need the nightly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Nightly,
    BpfLinker,
    Lints,
    CargoFuzz,
    KubernetesValidate,
}

const TOOL_ORDER: [Tool; 5] = [
    Tool::Lints,
    Tool::Nightly,
    Tool::BpfLinker,
    Tool::CargoFuzz,
    Tool::KubernetesValidate,
];

impl Tool {
    fn install(self) -> Result<()> {
        match self {
            Tool::Nightly => install_nightly(),
            Tool::BpfLinker => install_bpf_linker(),
            Tool::Lints => install_lints(),
            Tool::CargoFuzz => install_cargo_fuzz(),
            Tool::KubernetesValidate => install_kubernetes_validate(),
        }
    }
}

/// Sets up what `task` (e.g. "cargo xtask test") needs for these purposes.
pub fn setup(task: &str, purposes: &[Purpose]) -> Result<()> {
    install_packages(task, &packages_for(purposes))?;
    for tool in TOOL_ORDER {
        if purposes
            .iter()
            .any(|purpose| purpose.tools().contains(&tool))
        {
            tool.install()?;
        }
    }
    Ok(())
}

/// The purposes' packages, each once, in the order first named.
pub fn packages_for(purposes: &[Purpose]) -> Vec<Package> {
    let mut packages: Vec<Package> = Vec::new();
    for package in purposes.iter().flat_map(|purpose| purpose.packages()) {
        if !packages.contains(package) {
            packages.push(*package);
        }
    }
    packages
}

const BPF_LINKER_VERSION: &str = "0.13.0";
/// Runs the fuzz targets in fuzz/ (`cargo xtask test` fuzzes each briefly).
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// PyPI's kubernetes-validate: the Kubernetes API schemas, bundled, for
/// checking dist/kubernetes/ offline (tests/fleet.rs).
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";

fn install_kubernetes_validate() -> Result<()> {
    if on_path("kubernetes-validate") {
        return Ok(());
    }
    eprintln!("xtask: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} from PyPI");
    run(Command::new("python3").args([
        "-m",
        "pip",
        "install",
        "--quiet",
        &format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
    ]))
}

fn apt_available() -> bool {
    on_path("apt-get") && on_path("dpkg-query")
}

fn dpkg_installed(package: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|status| status.contains("install ok installed"))
}

/// A probe is an absolute path that exists, or a program on PATH or in the
/// sbin directories (not on an ordinary user's PATH on Debian).
fn probe_found(probe: &str) -> bool {
    if probe.starts_with('/') {
        return Path::new(probe).exists();
    }
    on_path(probe)
        || ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|dir| Path::new(dir).join(probe).is_file())
}

fn install_packages(task: &str, wanted: &[Package]) -> Result<()> {
    if wanted.is_empty() {
        return Ok(());
    }
    if !apt_available() {
        let missing: Vec<Package> = wanted
            .iter()
            .copied()
            .filter(|package| !package.probes.iter().any(|probe| probe_found(probe)))
            .collect();
        return match missing.is_empty() {
            true => Ok(()),
            false => Err(missing_without_apt(task, &missing)),
        };
    }
    let missing: Vec<&str> = wanted
        .iter()
        .map(|package| package.debian)
        .filter(|name| !dpkg_installed(name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "{task} needs Debian packages that are missing: {}; install them with `{}`",
            missing.join(" "),
            by_hand(&missing)
        ));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    // A dry run first: apt may want to remove or downgrade what the user has
    // to make room, and then nothing is installed.
    let plan = simulate(&missing)?;
    let allowed = removals_allowed(std::env::var(ALLOW_REMOVALS_ENV).ok().as_deref());
    if !plan.is_harmless() && allowed {
        eprintln!("xtask: {ALLOW_REMOVALS_ENV} is set: {}", plan.harm());
        return run(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"));
    }
    if !plan.is_harmless() {
        let culprits: Vec<(String, AptPlan)> = missing
            .iter()
            .filter_map(|name| {
                let alone = simulate(&[name]).ok()?;
                (!alone.is_harmless()).then(|| (name.to_string(), alone))
            })
            .collect();
        let culprits = match culprits.is_empty() {
            true => vec![(missing.join(" "), plan)],
            false => culprits,
        };
        return Err(refusal(&culprits, &missing));
    }
    // --no-remove: should apt still want to remove something, it aborts.
    run(Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "--no-remove",
        ])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .map_err(|err| {
        format!(
            "{err}: apt refused to install {} (its reason is above); to decide for yourself: {}",
            missing.join(" "),
            by_hand(&missing)
        )
    })
}

/// What apt's dry run would do to packages already installed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AptPlan {
    pub removed: Vec<String>,
    pub downgraded: Vec<String>,
}

impl AptPlan {
    fn is_harmless(&self) -> bool {
        self.removed.is_empty() && self.downgraded.is_empty()
    }

    /// What apt would do to the packages the machine has, as words.
    pub fn harm(&self) -> String {
        let mut harm = Vec::new();
        if !self.removed.is_empty() {
            harm.push(format!("apt removes {}", self.removed.join(", ")));
        }
        if !self.downgraded.is_empty() {
            harm.push(format!("apt downgrades {}", self.downgraded.join(", ")));
        }
        harm.join(" and ")
    }
}

/// Set to 1 to let apt remove or downgrade packages to install the tasks'
/// tools: for disposable machines (CI), never a default.
pub const ALLOW_REMOVALS_ENV: &str = "XTASK_ALLOW_APT_REMOVALS";

/// Whether the variable's value consents to removals: `1` or `true` only.
pub fn removals_allowed(value: Option<&str>) -> bool {
    matches!(value, Some("1" | "true"))
}

fn simulate(packages: &[&str]) -> Result<AptPlan> {
    let dry_run = Command::new("apt-get")
        .args(["install", "-s", "-q", "--no-install-recommends"])
        .args(packages)
        .env("LC_ALL", "C")
        .output()
        .map_err(|err| format!("cannot start apt-get: {err}"))?;
    let stdout = String::from_utf8_lossy(&dry_run.stdout);
    if !dry_run.status.success() {
        let stderr = String::from_utf8_lossy(&dry_run.stderr);
        let reason = stderr
            .lines()
            .chain(stdout.lines())
            .find(|line| line.starts_with("E: "))
            .unwrap_or("apt-get's dry run failed");
        return Err(format!(
            "apt cannot install {}: {}; to see why: {}",
            packages.join(" "),
            reason.trim_start_matches("E: "),
            by_hand(packages)
        ));
    }
    Ok(parse_simulation(&stdout))
}

/// Reads `apt-get install -s` output: `Remv NAME [VERSION]` lines, and the
/// names listed under "The following packages will be DOWNGRADED:".
pub fn parse_simulation(text: &str) -> AptPlan {
    let mut plan = AptPlan::default();
    let mut in_downgrades = false;
    for line in text.lines() {
        if in_downgrades && line.starts_with(' ') {
            plan.downgraded
                .extend(line.split_whitespace().map(str::to_string));
            continue;
        }
        in_downgrades = line.starts_with("The following packages will be DOWNGRADED");
        if let Some(name) = line
            .strip_prefix("Remv ")
            .and_then(|rest| rest.split_whitespace().next())
        {
            plan.removed.push(name.to_string());
        }
    }
    plan
}

/// One line: which package apt would take away for which install, and the
/// command that leaves the decision to the user.
pub fn refusal(culprits: &[(String, AptPlan)], missing: &[&str]) -> String {
    let reasons: Vec<String> = culprits
        .iter()
        .map(|(wanted, plan)| {
            let mut harm = Vec::new();
            if !plan.removed.is_empty() {
                harm.push(format!("remove {}", plan.removed.join(", ")));
            }
            if !plan.downgraded.is_empty() {
                harm.push(format!("downgrade {}", plan.downgraded.join(", ")));
            }
            format!(
                "installing {wanted} would make apt {} (installed here)",
                harm.join(" and ")
            )
        })
        .collect();
    format!(
        "{}; xtask never removes or downgrades your packages, so it installed nothing; to decide for yourself: {} (or, on a disposable machine, set {ALLOW_REMOVALS_ENV}=1)",
        reasons.join("; "),
        by_hand(missing)
    )
}

fn by_hand(packages: &[&str]) -> String {
    format!(
        "sudo apt-get install --no-install-recommends {}",
        packages.join(" ")
    )
}

/// One line for a machine without apt: the missing tools, and the packages
/// that bring them on Fedora and on Debian.
pub fn missing_without_apt(task: &str, missing: &[Package]) -> String {
    let tools: Vec<&str> = missing
        .iter()
        .map(|package| {
            let probe = package.probes.first().copied().unwrap_or(package.debian);
            probe.rsplit('/').next().unwrap_or(probe)
        })
        .collect();
    let names = |pick: fn(&Package) -> &'static str| -> String {
        let mut names: Vec<&str> = Vec::new();
        for name in missing.iter().flat_map(|p| pick(p).split(' ')) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names.join(" ")
    };
    format!(
        "{task} needs tools this machine lacks: {}; on Fedora: sudo dnf install {}; on Debian: sudo apt-get install {}",
        tools.join(", "),
        names(|p| p.fedora),
        names(|p| p.debian)
    )
}

/// `cargo xtask test` fails on formatting and clippy warnings, so both must exist.
fn install_lints() -> Result<()> {
    for (probe, component) in [("clippy", "clippy"), ("fmt", "rustfmt")] {
        if output(Command::new("cargo").args([probe, "--version"])).is_none() {
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    Ok(())
}

fn install_nightly() -> Result<()> {
    if output(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])).is_none() {
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let sysroot = nightly_sysroot()?;
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

fn nightly_sysroot() -> Result<PathBuf> {
    output(Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]))
        .map(|text| PathBuf::from(text.trim()))
        .ok_or_else(|| "cannot find the nightly toolchain's sysroot".to_string())
}

/// The major LLVM version of the nightly rustc, e.g. 22.
fn nightly_llvm_major() -> Result<u32> {
    let verbose = output(Command::new("rustup").args(["run", "nightly", "rustc", "-vV"]))
        .ok_or("cannot run the nightly rustc")?;
    verbose
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version: "))
        .and_then(|version| version.split('.').next()?.parse().ok())
        .ok_or_else(|| "the nightly rustc does not report its LLVM version".to_string())
}

fn install_bpf_linker() -> Result<()> {
    let current = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if on_path("bpf-linker") && current.contains(BPF_LINKER_VERSION) {
        return Ok(());
    }
    // bpf-linker must link the same LLVM as rustc: point it at the nightly's libLLVM.
    let sysroot = nightly_sysroot()?;
    let llvm_major = nightly_llvm_major()?;
    let libllvm = std::fs::read_dir(sysroot.join("lib"))
        .map_err(|err| format!("cannot list the nightly's lib/: {err}"))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| {
                    name.starts_with("libLLVM.so.")
                        || (name.starts_with("libLLVM-") && name.ends_with(".so"))
                })
        })
        .ok_or("the nightly toolchain has no libLLVM shared library")?;
    let prefix = workspace_root().join("target/llvm-prefix");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib)
        .map_err(|err| format!("cannot create {}: {err}", lib.display()))?;
    let soname = libllvm.file_name().map(PathBuf::from).unwrap_or_default();
    for name in [Path::new("libLLVM.so"), soname.as_path()] {
        let link = lib.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&libllvm, &link)
            .map_err(|err| format!("cannot link {}: {err}", link.display()))?;
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM {llvm_major} (about 2 minutes)");
    run(Command::new("cargo")
        .args([
            "install",
            "--locked",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
        ])
        .args([
            "--no-default-features",
            "--features",
            &format!("llvm-{llvm_major}"),
        ])
        .env("LLVM_PREFIX", &prefix))
}

fn install_cargo_fuzz() -> Result<()> {
    let current = output(Command::new("cargo").args(["fuzz", "--version"])).unwrap_or_default();
    if current.contains(CARGO_FUZZ_VERSION) {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION} (about a minute)");
    run(Command::new("cargo").args([
        "install",
        "--locked",
        &format!("cargo-fuzz@{CARGO_FUZZ_VERSION}"),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debian_names(purposes: &[Purpose]) -> Vec<&'static str> {
        packages_for(purposes).iter().map(|p| p.debian).collect()
    }

    #[test]
    fn run_installs_no_debian_package() {
        assert!(debian_names(RUN).is_empty());
        assert_eq!(RUN, &[Purpose::Build]);
    }

    #[test]
    fn test_sets_up_everything_but_the_bench() {
        let test = debian_names(TEST);
        for purpose in EVERYTHING.iter().filter(|p| **p != Purpose::Bench) {
            assert!(TEST.contains(purpose), "{purpose:?}");
        }
        for name in debian_names(&[Purpose::VmMatrix]) {
            assert!(test.contains(&name), "the VM matrix's {name}");
        }
    }

    #[test]
    fn each_task_sets_up_the_build() {
        for task in [RUN, INSTALL, DIST, IMAGE, BENCH, VM_TEST, TEST, EVERYTHING] {
            assert!(task.contains(&Purpose::Build));
        }
    }

    #[test]
    fn packages_are_named_once() {
        let all = debian_names(EVERYTHING);
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
        assert!(all.contains(&"chromium") && all.contains(&"qemu-system-x86"));
    }

    #[test]
    fn the_usage_doc_names_every_package() {
        let usage =
            std::fs::read_to_string(workspace_root().join("docs/usage.md")).unwrap_or_default();
        let section = usage
            .split("## Building and installing")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_default();
        for name in debian_names(EVERYTHING) {
            assert!(
                section.contains(&format!("`{name}`")),
                "docs/usage.md's Building and installing does not name `{name}`"
            );
        }
    }

    #[test]
    fn a_dry_run_that_removes_is_read() {
        let text = "\
Reading package lists...
The following packages will be REMOVED:
  qemu-utils
The following NEW packages will be installed:
  qemu-system-x86
0 upgraded, 1 newly installed, 1 to remove and 0 not upgraded.
Remv qemu-utils [1:7.2+dfsg-7]
Inst qemu-system-x86 (1:8.0 Debian:12/backports [amd64])
Conf qemu-system-x86 (1:8.0 Debian:12/backports [amd64])
";
        let plan = parse_simulation(text);
        assert_eq!(plan.removed, ["qemu-utils"]);
        assert!(plan.downgraded.is_empty());
        assert!(!plan.is_harmless());
    }

    #[test]
    fn a_dry_run_that_downgrades_is_read() {
        let text = "\
The following packages will be DOWNGRADED:
  libfoo1 libbar2
0 upgraded, 0 newly installed, 2 downgraded, 0 to remove and 0 not upgraded.
Inst libfoo1 [2.0] (1.0 Debian:12 [amd64])
";
        let plan = parse_simulation(text);
        assert_eq!(plan.downgraded, ["libfoo1", "libbar2"]);
        assert!(plan.removed.is_empty());
    }

    #[test]
    fn a_harmless_dry_run_is_harmless() {
        let text = "\
The following NEW packages will be installed:
  fio
Inst fio (3.33-3 Debian:12 [amd64])
Conf fio (3.33-3 Debian:12 [amd64])
";
        assert!(parse_simulation(text).is_harmless());
    }

    #[test]
    fn a_refusal_is_one_line_naming_the_package_why_and_the_command() {
        let plan = AptPlan {
            removed: vec!["qemu-utils".into()],
            downgraded: vec![],
        };
        let line = refusal(
            &[("qemu-system-x86".into(), plan)],
            &["qemu-system-x86", "fio"],
        );
        assert!(!line.contains('\n'));
        assert!(line.starts_with("installing qemu-system-x86 would make apt remove qemu-utils"));
        assert!(line.contains("installed nothing"));
        assert!(line.contains("sudo apt-get install --no-install-recommends qemu-system-x86 fio"));
        assert!(line.ends_with("set XTASK_ALLOW_APT_REMOVALS=1)"));
    }

    #[test]
    fn removals_need_an_explicit_yes() {
        assert!(!removals_allowed(None));
        assert!(!removals_allowed(Some("")));
        assert!(!removals_allowed(Some("0")));
        assert!(!removals_allowed(Some("yes please")));
        assert!(removals_allowed(Some("1")));
        assert!(removals_allowed(Some("true")));
        let plan = AptPlan {
            removed: vec!["qemu-utils".into()],
            downgraded: vec!["libfoo1".into()],
        };
        assert_eq!(
            plan.harm(),
            "apt removes qemu-utils and apt downgrades libfoo1"
        );
    }

    #[test]
    fn a_refusal_names_downgrades_too() {
        let plan = AptPlan {
            removed: vec!["a".into()],
            downgraded: vec!["b".into()],
        };
        let line = refusal(&[("x".into(), plan)], &["x"]);
        assert!(line.contains("would make apt remove a and downgrade b"));
    }

    #[test]
    fn without_apt_the_missing_tools_are_named_with_both_distributions_packages() {
        let line =
            missing_without_apt("cargo xtask test", &[FIO, PROMETHEUS, HTPASSWD, POSTGRESQL]);
        assert!(!line.contains('\n'));
        assert_eq!(
            line,
            "cargo xtask test needs tools this machine lacks: fio, promtool, htpasswd, pg_ctl; \
             on Fedora: sudo dnf install fio golang-github-prometheus httpd-tools postgresql-server postgresql-contrib; \
             on Debian: sudo apt-get install fio prometheus apache2-utils postgresql"
        );
    }

    #[test]
    fn without_apt_a_path_probe_is_named_by_its_file() {
        let line = missing_without_apt("cargo xtask vm-test", &[BUSYBOX, LIBC_STATIC]);
        assert!(line.contains("lacks: busybox, libc.a;"), "{line}");
        assert!(line.contains("dnf install busybox glibc-static;"), "{line}");
    }
}
