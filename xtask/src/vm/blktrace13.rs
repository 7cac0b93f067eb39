//! Debian's blktrace 1.3.0 (`blktrace` and `blkparse`), for blk-oracle's
//! protocol comparison (#49): the machine's bookworm has 1.2.0, and sid's
//! 1.3.0 binaries need glibc 2.38, newer than the machine's. Both packages,
//! `blktrace` (the newest 1.3.0 build the newer archives offer) and sid's
//! `libc6`, are fetched through the private apt list of `kernel::newer_apt`
//! and unpacked under `target/vm/tools/blktrace-1.3/`; each binary then runs
//! through that libc's own loader (`ld-linux-x86-64.so.2 --library-path`), in
//! the guest (a wrapper script, `blktrace-1.3`) and on the host (blkparse).
//!
//! blktrace 1.3.0 sets traces up with `BLKTRACESETUP` only (no
//! `BLKTRACESETUP2` in its binary: that came to blktrace's git master in
//! December 2025), so its files are protocol version 7 on every kernel; and
//! its blkparse refuses version 8 ("unsupported trace version").

use std::path::{Path, PathBuf};
use std::process::Command;

use super::kernel::newer_apt;
use crate::util::{output, run, Result};

/// Its name in a scenario's `extra_tools`, and the wrapper's name in the guest.
pub const TOOL: &str = "blktrace-1.3";
/// Where its files go in the guest: the binary, libc and the loader.
pub const GUEST_DIR: &str = "opt/blktrace-1.3";
/// The versions taken: 1.3.0 builds only, so that a later blktrace (which
/// sets up version 2) cannot quietly replace the version 7 capture.
const VERSION_PREFIX: &str = "1.3.0";

const LIBRARY_DIR: &str = "usr/lib/x86_64-linux-gnu";
const LOADER: &str = "ld-linux-x86-64.so.2";

/// The unpacked tree, fetched once: `target/vm/tools/blktrace-1.3/`.
pub fn ensure(cache: &Path) -> Result<PathBuf> {
    let root = cache.join("tools").join(TOOL);
    let done = root.join(".unpacked");
    if done.is_file() {
        return Ok(root);
    }
    let args = newer_apt(cache)?;
    let madison = output(
        Command::new("apt-cache")
            .args(&args)
            .args(["madison", "blktrace"]),
    )
    .ok_or("apt-cache madison blktrace failed")?;
    let version = madison_versions(&madison)
        .into_iter()
        .find(|version| version.starts_with(VERSION_PREFIX))
        .ok_or_else(|| {
            format!("trixie-backports/sid offer no blktrace {VERSION_PREFIX}*: {madison}")
        })?;
    eprintln!("xtask: downloading blktrace {version} and sid's libc6 (~3 MB)");
    let download = cache.join("tools").join(format!("download-{TOOL}"));
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download)
        .map_err(|err| format!("cannot create {}: {err}", download.display()))?;
    run(Command::new("apt-get")
        .current_dir(&download)
        .args(&args)
        .args(["download", "-q", &format!("blktrace={version}"), "libc6"]))?;
    let _ = std::fs::remove_dir_all(&root);
    let debs: Vec<PathBuf> = std::fs::read_dir(&download)
        .map_err(|err| format!("cannot list {}: {err}", download.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .collect();
    if debs.len() != 2 {
        return Err(format!(
            "apt-get download left {} .deb files in {}, wanted blktrace and libc6",
            debs.len(),
            download.display()
        ));
    }
    for deb in &debs {
        run(Command::new("dpkg").arg("-x").arg(deb).arg(&root))?;
    }
    let _ = std::fs::remove_dir_all(&download);
    for needed in [blktrace(&root), blkparse_binary(&root), loader(&root)] {
        if !needed.is_file() {
            return Err(format!("{} is missing after unpacking", needed.display()));
        }
    }
    std::fs::write(&done, format!("blktrace {version}\n"))
        .map_err(|err| format!("cannot write {}: {err}", done.display()))?;
    Ok(root)
}

/// The versions `apt-cache madison` lists, in its order (newest first).
pub fn madison_versions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.split('|').nth(1))
        .map(|version| version.trim().to_string())
        .filter(|version| !version.is_empty())
        .collect()
}

pub fn blktrace(root: &Path) -> PathBuf {
    root.join("usr/sbin/blktrace")
}

fn blkparse_binary(root: &Path) -> PathBuf {
    root.join("usr/bin/blkparse")
}

fn loader(root: &Path) -> PathBuf {
    root.join(LIBRARY_DIR).join(LOADER)
}

/// The files the guest needs, each with its name under [`GUEST_DIR`].
pub fn guest_files(root: &Path) -> Vec<(PathBuf, &'static str)> {
    vec![
        (blktrace(root), "blktrace"),
        (loader(root), LOADER),
        (root.join(LIBRARY_DIR).join("libc.so.6"), "libc.so.6"),
    ]
}

/// The guest's `/usr/bin/blktrace-1.3`: blktrace through sid's loader.
pub fn guest_wrapper() -> String {
    format!(
        "#!/bin/sh\nexec /{GUEST_DIR}/{LOADER} --library-path /{GUEST_DIR} /{GUEST_DIR}/blktrace \"$@\"\n"
    )
}

/// blkparse 1.3.0 on the host, through sid's loader; arguments follow.
pub fn blkparse(root: &Path) -> Command {
    let mut command = Command::new(loader(root));
    command
        .arg("--library-path")
        .arg(root.join(LIBRARY_DIR))
        .arg(blkparse_binary(root));
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn madison_lists_versions_newest_first() {
        let text = "  blktrace |  1.3.0-0.3 | http://deb.debian.org/debian sid/main amd64 Packages\n\
                    \x20 blktrace | 1.3.0-0.2 | http://deb.debian.org/debian trixie-backports/main amd64 Packages\n";
        assert_eq!(madison_versions(text), ["1.3.0-0.3", "1.3.0-0.2"]);
        assert!(madison_versions("").is_empty());
    }

    #[test]
    fn the_wrapper_runs_blktrace_through_its_own_loader() {
        assert_eq!(
            guest_wrapper(),
            "#!/bin/sh\nexec /opt/blktrace-1.3/ld-linux-x86-64.so.2 --library-path /opt/blktrace-1.3 /opt/blktrace-1.3/blktrace \"$@\"\n"
        );
    }
}
