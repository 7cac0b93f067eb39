//! Builds the eBPF probes (tracer-ebpf) with aya-build and leaves the object
//! in OUT_DIR for `include_bytes_aligned!`.

use std::{env, path::PathBuf, process::Command};

fn fail(message: &str) -> ! {
    eprintln!("error: {message}; run `cargo xtask setup` once, then build again");
    std::process::exit(1);
}

fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .map(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// The prerequisites aya-build assumes, checked so a missing one costs one clear line.
fn check_prerequisites() {
    if !on_path("bpf-linker") {
        fail("bpf-linker is not installed");
    }
    let sysroot = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output();
    let sysroot = match sysroot {
        Ok(out) if out.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
        _ => fail("the nightly toolchain is not installed"),
    };
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        fail("the nightly toolchain lacks rust-src");
    }
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        // Host-only work (unit tests, docs): an empty object, refused at load time.
        let object = out_dir.join("tracer");
        if !object.exists() {
            std::fs::write(&object, b"").expect("OUT_DIR is writable");
        }
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        return;
    }
    check_prerequisites();
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("../tracer-ebpf");
    let root = root.to_string_lossy().into_owned();
    let package = aya_build::Package {
        name: "tracer-ebpf",
        root_dir: &root,
        ..Default::default()
    };
    if let Err(err) = aya_build::build_ebpf([package], aya_build::Toolchain::default()) {
        fail(&format!("building the eBPF probes failed: {err:#}"));
    }
}
