//! `cargo xtask setup`: Debian packages, the nightly toolchain with rust-src,
//! a bpf-linker built against the nightly's own LLVM, and cargo-fuzz. Idempotent.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{is_root, on_path, output, run, workspace_root, Result};

/// Debian packages the tests, benchmarks and VM matrix use.
pub const PACKAGES: &[&str] = &[
    "fdisk",      // sfdisk
    "e2fsprogs",  // mkfs.ext4, filefrag
    "xfsprogs",   // mkfs.xfs (tests/run_files.rs)
    "postgresql", // initdb, pg_ctl, pgbench under `run` (tests/run_postgres.rs)
    "util-linux", // losetup, partx, blockdev
    "fio",        // tests/run_libaio.rs checks run against fio's own counts; false_alarms.rs
    "bpftrace",
    "tmux",
    "sysstat",
    "bpftool", // the SIGKILL fault test: no program or link of ours is left attached
    // cargo xtask vm-test: the guest machine, its initramfs and module tooling.
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "kmod",    // depmod for the guest kernel's modules
    "dmsetup", // the stacks scenario
    "mdadm",   // the stacks scenario
    "lvm2",    // the stacks scenario: volumes made by the LVM tools
    "file",    // checks the guest binary is static
    "gcc",     // builds the static guest-io helper
    "libc6-dev",
    // tests/serve.rs: a real Prometheus scrapes `serve`, queried with curl;
    // tests/fleet.rs and serve.rs: promtool checks metrics and tests the rules;
    // systemd-analyze verifies the dist unit.
    "prometheus",
    "curl",
    "systemd",
    "libcap2-bin", // setcap, for the non-root test
    // tests/serve.rs: serve over TLS with basic auth, as Prometheus scrapes it:
    // a certificate made offline, and a bcrypt hash made as users make them.
    "openssl",
    "apache2-utils", // htpasswd
    // cargo xtask image builds the OCI image offline; cargo xtask test runs it
    // under podman with Debian's runc (../shared/ENVIRONMENT.md).
    "buildah",
    "podman",
    "runc",
    "chromium", // tests/html.rs: renders `analyze --html` headless
];

const BPF_LINKER_VERSION: &str = "0.13.0";
/// Runs the fuzz targets in fuzz/ (`cargo xtask test` fuzzes each briefly).
const CARGO_FUZZ_VERSION: &str = "0.13.2";

pub fn setup() -> Result<()> {
    install_packages()?;
    install_lints()?;
    install_nightly()?;
    install_bpf_linker()?;
    install_cargo_fuzz()?;
    install_kubernetes_validate()?;
    Ok(())
}

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

fn installed(package: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|status| status.contains("install ok installed"))
}

fn install_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "missing Debian packages: {}; install them with `sudo apt-get install {}`",
            missing.join(" "),
            missing.join(" ")
        ));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
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
