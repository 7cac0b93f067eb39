//! The Debian package `cargo xtask dist` writes beside the tarball, built
//! with `dpkg-deb --build --root-owner-group` from the tarball's own tree:
//!
//! - `/usr/bin/iosplit-trace`, the static binary (so no `Depends`);
//! - `/usr/share/man/man1/iosplit-trace.1.gz` and the bash, zsh and fish
//!   completions where Debian's shells look for them;
//! - `/lib/systemd/system/`: the `serve` unit and the audit's service and
//!   timer, their ExecStart at `/usr/bin/iosplit-trace`;
//! - `/usr/share/doc/iosplit-trace/`: the README with its docs/, the
//!   licenses, `copyright`, and the example configuration under `examples/`.
//!
//! The maintainer scripts enable and start nothing: the admin does, with
//! `systemctl enable --now`. Removing stops what is running; purging also
//! drops the links `systemctl enable` made.
//!
//! [`smoke_test`] (`cargo xtask test`, as root) installs the package on this
//! machine, runs `check` and `systemd-analyze verify`, then removes and
//! purges it and checks that nothing it shipped is left.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dist;
use crate::util::{output, run, Result};

const PACKAGE: &str = "iosplit-trace";
/// Where the package puts the binary, and so where its units start it.
const BINARY: &str = "/usr/bin/iosplit-trace";
const UNIT_DIR: &str = "lib/systemd/system";
/// The project has no mailing address yet; `.invalid` says so instead of inventing one.
const MAINTAINER: &str = "iosplit-trace maintainers <maintainers@iosplit-trace.invalid>";

/// Where each file of the tarball's tree goes in the package (the man page is
/// compressed on the way, as Debian ships them).
const LAYOUT: &[(&str, &str)] = &[
    ("bin/iosplit-trace", "usr/bin/iosplit-trace"),
    (
        "share/bash-completion/completions/iosplit-trace",
        "usr/share/bash-completion/completions/iosplit-trace",
    ),
    (
        "share/zsh/site-functions/_iosplit-trace",
        "usr/share/zsh/vendor-completions/_iosplit-trace",
    ),
    (
        "share/fish/vendor_completions.d/iosplit-trace.fish",
        "usr/share/fish/vendor_completions.d/iosplit-trace.fish",
    ),
];
const MAN_PAGE: (&str, &str) = (
    "share/man/man1/iosplit-trace.1",
    "usr/share/man/man1/iosplit-trace.1.gz",
);
const DOC: (&str, &str) = ("share/doc/iosplit-trace", "usr/share/doc/iosplit-trace");

/// Builds target/dist/iosplit-trace_VERSION_amd64.deb from the tarball's
/// staged tree and returns its path.
pub fn build(stage: &Path, out: &Path) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let root = out.join(format!("{PACKAGE}_{version}_amd64"));
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|err| format!("{}: {err}", root.display()))?;
    }
    for (from, to) in LAYOUT {
        dist::copy(&stage.join(from), &root.join(to))?;
    }
    let man = root.join(MAN_PAGE.1);
    dist::copy(&stage.join(MAN_PAGE.0), &man.with_extension(""))?;
    run(Command::new("gzip")
        .args(["-9", "-n", "-f"])
        .arg(man.with_extension("")))?;
    for unit in dist::UNITS {
        let text = read(&stage.join(UNIT_DIR).join(unit))?;
        dist::write(
            &root.join(UNIT_DIR).join(unit),
            &text.replace(dist::UNIT_BINARY, BINARY),
        )?;
    }
    let doc = root.join(DOC.1);
    for name in dist::EXAMPLES
        .iter()
        .filter_map(|path| path.rsplit('/').next())
    {
        dist::copy(
            &stage.join(DOC.0).join(name),
            &doc.join("examples").join(name),
        )?;
    }
    for name in dist::DOCS.iter().filter_map(|path| path.rsplit('/').next()) {
        dist::copy(&stage.join(DOC.0).join(name), &doc.join(name))?;
    }
    copy_dir(&stage.join(DOC.0).join("docs"), &doc.join("docs"))?;
    dist::write(&doc.join("copyright"), COPYRIGHT)?;

    let binary = root.join(LAYOUT[0].1);
    let described = output(Command::new("file").arg("-L").arg(&binary))
        .ok_or_else(|| format!("cannot inspect {}", binary.display()))?;
    let control = control(version, size_kib(&root)?, depends(&described));
    let debian = root.join("DEBIAN");
    dist::write(&debian.join("control"), &control)?;
    for (name, script) in scripts() {
        dist::write(&debian.join(name), &script)?;
    }
    normalize_modes(&root)?;
    for executable in [binary.clone()]
        .into_iter()
        .chain(scripts().map(|(name, _)| debian.join(name)))
    {
        chmod(&executable, 0o755)?;
    }
    let deb = out.join(format!("{PACKAGE}_{version}_amd64.deb"));
    run(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb))?;
    Ok(deb)
}

/// `Depends:` from what `file` says of the binary: none for a static one.
pub fn depends(file_says: &str) -> Option<&'static str> {
    let is_static =
        file_says.contains("statically linked") || file_says.contains("static-pie linked");
    (!is_static).then_some("libc6")
}

pub fn control(version: &str, installed_kib: u64, depends: Option<&str>) -> String {
    let depends = depends
        .map(|list| format!("Depends: {list}\n"))
        .unwrap_or_default();
    format!(
        "Package: {PACKAGE}
Version: {version}
Architecture: amd64
Maintainer: {MAINTAINER}
Installed-Size: {installed_kib}
{depends}Section: admin
Priority: optional
Description: live block I/O tracer: why a write becomes many small device commands
 iosplit-trace follows every bio from its submission through partition
 remaps, splits and merges to the device commands that carried it, and names
 the cause of the amplification with numbers and a concrete fix. Tracing
 uses eBPF and needs root or CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH.
 .
 The systemd units (the Prometheus exporter, and the geometry audit with its
 timer) are installed, neither enabled nor started.
"
    )
}

const COPYRIGHT: &str = "\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: iosplit-trace

Files: *
Copyright: the iosplit-trace authors
License: MIT or Apache-2.0
 The full texts are LICENSE-MIT and LICENSE-APACHE in this directory.
";

/// The maintainer scripts, each naming the units it acts on.
fn scripts() -> impl Iterator<Item = (&'static str, String)> {
    let units = dist::UNITS.join(" ");
    [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)]
        .into_iter()
        .map(move |(name, text)| (name, text.replace("@UNITS@", &units)))
}

const POSTINST: &str = r#"#!/bin/sh
# Enables and starts nothing: `systemctl enable --now iosplit-trace` is the
# admin's choice. An upgrade restarts the exporter only if it was running.
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ "$1" = configure ] && [ -n "$2" ]; then
        systemctl try-restart iosplit-trace.service || true
    fi
fi
exit 0
"#;

const PRERM: &str = r#"#!/bin/sh
# Stops the units that are running before their files go.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    for unit in @UNITS@; do
        if systemctl is-active --quiet "$unit"; then
            systemctl stop "$unit" || true
        fi
    done
fi
exit 0
"#;

const POSTRM: &str = r#"#!/bin/sh
# Purging drops the links `systemctl enable` made to the units.
set -e
if [ "$1" = purge ]; then
    for unit in @UNITS@; do
        for link in /etc/systemd/system/*.wants/"$unit"; do
            if [ -L "$link" ]; then
                rm -f "$link"
            fi
        done
    done
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
"#;

/// Installs the package on this machine, checks it, then removes and purges
/// it, also when a check failed; fails when anything it shipped is left.
pub fn smoke_test(deb: &Path) -> Result<()> {
    if dpkg_status().is_some() {
        return Err(format!(
            "the package {PACKAGE} is installed here and this test installs and purges it: `dpkg -r {PACKAGE}` first"
        ));
    }
    let listing = output(Command::new("dpkg-deb").arg("--contents").arg(deb))
        .ok_or_else(|| format!("dpkg-deb --contents {} failed", deb.display()))?;
    let shipped = parse_contents(&listing);
    let files: Vec<&Entry> = shipped.iter().filter(|entry| !entry.dir).collect();
    let clobbered: Vec<String> = files
        .iter()
        .filter(|entry| Path::new(&entry.path).exists())
        .map(|entry| entry.path.clone())
        .collect();
    if !clobbered.is_empty() {
        return Err(format!(
            "the package would overwrite files already here: {}",
            clobbered.join(", ")
        ));
    }
    let before = existing(&shipped);
    eprintln!("xtask: installing {} on this machine", deb.display());
    let checked =
        run(Command::new("dpkg").arg("-i").arg(deb)).and_then(|()| check_installed(&files));
    let removed = run(Command::new("dpkg").args(["-r", PACKAGE]))
        .and_then(|()| run(Command::new("dpkg").args(["--purge", PACKAGE])))
        .and_then(|()| {
            if let Some(status) = dpkg_status() {
                return Err(format!("dpkg still lists {PACKAGE} after purge: {status}"));
            }
            let after = existing(&shipped);
            let left: Vec<&String> = after.iter().filter(|path| !before.contains(path)).collect();
            match left.is_empty() {
                true => Ok(()),
                false => Err(format!("left behind after purge: {left:?}")),
            }
        });
    match (checked, removed) {
        (Ok(()), Ok(())) => {
            eprintln!(
                "xtask: the .deb installed, passed check and systemd-analyze verify, and was purged without a trace"
            );
            Ok(())
        }
        (Err(check), Ok(())) => Err(format!("the installed .deb: {check}")),
        (Ok(()), Err(remove)) => Err(format!("removing the .deb: {remove}")),
        (Err(check), Err(remove)) => Err(format!(
            "the installed .deb: {check}; and removing it: {remove}"
        )),
    }
}

fn check_installed(files: &[&Entry]) -> Result<()> {
    match dpkg_status() {
        Some(status) if status == "install ok installed" => {}
        other => return Err(format!("dpkg says {PACKAGE} is {other:?}")),
    }
    let missing: Vec<&str> = files
        .iter()
        .filter(|entry| !Path::new(&entry.path).exists())
        .map(|entry| entry.path.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("installed without {}", missing.join(", ")));
    }
    let checked = Command::new(BINARY)
        .arg("check")
        .output()
        .map_err(|err| format!("cannot run {BINARY}: {err}"))?;
    let stdout = String::from_utf8_lossy(&checked.stdout);
    if !checked.status.success() {
        return Err(format!(
            "`{BINARY} check` exited with {}: {}",
            checked.status,
            String::from_utf8_lossy(&checked.stderr).trim()
        ));
    }
    check_names_a_disk(&stdout, &disks())?;
    let units: Vec<PathBuf> = dist::UNITS
        .iter()
        .map(|unit| Path::new("/").join(UNIT_DIR).join(unit))
        .collect();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .map_err(|err| format!("cannot run systemd-analyze: {err}"))?;
    let complaints = String::from_utf8_lossy(&verified.stderr);
    if !verified.status.success() || !complaints.trim().is_empty() {
        return Err(format!(
            "systemd-analyze verify rejects the installed units: {}",
            complaints.trim()
        ));
    }
    Ok(())
}

/// `check`'s report is sensible when it describes one of this machine's
/// disks: a line `NAME (MAJ:MIN): …` with NAME under /sys/block.
pub fn check_names_a_disk(stdout: &str, disks: &[String]) -> Result<()> {
    let named = stdout.lines().any(|line| {
        line.split_once(" (")
            .is_some_and(|(name, rest)| disks.iter().any(|d| d == name) && rest.contains("):"))
    });
    match named {
        true => Ok(()),
        false => Err(format!(
            "`check` printed no line about this machine's disks ({}): {:?}",
            disks.join(", "),
            stdout.lines().next().unwrap_or("nothing")
        )),
    }
}

fn disks() -> Vec<String> {
    std::fs::read_dir("/sys/block")
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// dpkg's status for the package, or `None` when dpkg does not know it.
fn dpkg_status() -> Option<String> {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", PACKAGE]))
        .map(|status| status.trim().to_string())
        .filter(|status| !status.is_empty() && status != "unknown ok not-installed")
}

/// One path in the package, from `dpkg-deb --contents`.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub dir: bool,
}

/// Reads `dpkg-deb --contents` (tar's long listing: `drwxr-xr-x root/root 0
/// 2024-01-01 00:00 ./usr/bin/`), skipping the root itself.
pub fn parse_contents(listing: &str) -> Vec<Entry> {
    listing
        .lines()
        .filter_map(|line| {
            let path = line.split_whitespace().nth(5)?;
            let path = path.strip_prefix('.').unwrap_or(path).trim_end_matches('/');
            (!path.is_empty()).then(|| Entry {
                path: path.to_string(),
                dir: line.starts_with('d'),
            })
        })
        .collect()
}

/// Which of the package's paths exist on this machine now.
fn existing(shipped: &[Entry]) -> Vec<String> {
    shipped
        .iter()
        .filter(|entry| Path::new(&entry.path).exists())
        .map(|entry| entry.path.clone())
        .collect()
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|err| format!("{}: {err}", path.display()))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    let entries = std::fs::read_dir(from).map_err(|err| format!("{}: {err}", from.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|err| format!("{}: {err}", from.display()))?
            .path();
        let name = path.file_name().ok_or("a doc file has no name")?;
        match path.is_dir() {
            true => copy_dir(&path, &to.join(name))?,
            false => dist::copy(&path, &to.join(name))?,
        }
    }
    Ok(())
}

/// Directories 0755 and files 0644 whatever the checkout's umask was.
fn normalize_modes(dir: &Path) -> Result<()> {
    chmod(dir, 0o755)?;
    let entries = std::fs::read_dir(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|err| format!("{}: {err}", dir.display()))?
            .path();
        match path.is_dir() {
            true => normalize_modes(&path)?,
            false => chmod(&path, 0o644)?,
        }
    }
    Ok(())
}

fn chmod(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|err| format!("chmod {}: {err}", path.display()))
}

/// The tree's size as `Installed-Size` counts it: KiB, rounded up per file.
fn size_kib(dir: &Path) -> Result<u64> {
    let mut kib = 0;
    let entries = std::fs::read_dir(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|err| format!("{}: {err}", dir.display()))?
            .path();
        kib += match path.is_dir() {
            true => size_kib(&path)?,
            false => std::fs::metadata(&path)
                .map_err(|err| format!("{}: {err}", path.display()))?
                .len()
                .div_ceil(1024),
        };
    }
    Ok(kib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_binary_depends_on_nothing() {
        let file_says = "iosplit-trace: ELF 64-bit LSB executable, x86-64, version 1 (GNU/Linux), statically linked, stripped";
        assert_eq!(depends(file_says), None);
        assert_eq!(
            depends("ELF 64-bit LSB pie executable, static-pie linked"),
            None
        );
        let dynamic = "ELF 64-bit LSB pie executable, dynamically linked, interpreter /lib64/ld-linux-x86-64.so.2";
        assert_eq!(depends(dynamic), Some("libc6"));
    }

    #[test]
    fn the_control_file_has_the_fields_dpkg_needs() {
        let text = control("0.1.0", 9000, None);
        for field in [
            "Package: iosplit-trace\n",
            "Version: 0.1.0\n",
            "Architecture: amd64\n",
            "Maintainer: ",
            "Installed-Size: 9000\n",
            "Description: ",
        ] {
            assert!(text.contains(field), "{field}");
        }
        assert!(!text.contains("Depends"));
        assert!(control("0.1.0", 1, Some("libc6")).contains("\nDepends: libc6\n"));
        // Continuation lines start with a space; the file ends with a newline.
        for line in text
            .lines()
            .skip_while(|l| !l.starts_with("Description"))
            .skip(1)
        {
            assert!(line.starts_with(' '), "{line:?}");
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn the_scripts_enable_and_start_nothing() {
        for (name, script) in scripts() {
            assert!(script.starts_with("#!/bin/sh\n"), "{name}");
            assert!(!script.contains("@UNITS@"), "{name}");
            let commands: Vec<&str> = script
                .lines()
                .filter(|line| !line.trim_start().starts_with('#'))
                .collect();
            for verb in ["enable", "start", "restart", "unmask"] {
                let call = format!("systemctl {verb} ");
                assert!(
                    !commands.iter().any(|l| l.contains(&call)),
                    "{name}: {call}"
                );
            }
            // Every systemctl call waits for the check that systemd runs.
            assert!(
                !script.contains("systemctl") || script.contains("[ -d /run/systemd/system ]"),
                "{name}"
            );
        }
        let prerm = scripts()
            .find(|(name, _)| *name == "prerm")
            .map(|(_, script)| script)
            .unwrap_or_default();
        for unit in dist::UNITS {
            assert!(prerm.contains(unit), "prerm stops {unit}");
        }
    }

    #[test]
    fn the_contents_listing_is_read() {
        let listing = "\
drwxr-xr-x root/root         0 2024-01-01 00:00 ./
drwxr-xr-x root/root         0 2024-01-01 00:00 ./usr/
drwxr-xr-x root/root         0 2024-01-01 00:00 ./usr/bin/
-rwxr-xr-x root/root   9000000 2024-01-01 00:00 ./usr/bin/iosplit-trace
-rw-r--r-- root/root      2000 2024-01-01 00:00 ./lib/systemd/system/iosplit-trace.service
";
        let entries = parse_contents(listing);
        assert_eq!(entries.len(), 4);
        assert_eq!(
            entries[2],
            Entry {
                path: "/usr/bin/iosplit-trace".into(),
                dir: false
            }
        );
        assert!(entries[1].dir);
        assert_eq!(entries[3].path, "/lib/systemd/system/iosplit-trace.service");
    }

    #[test]
    fn check_must_describe_a_disk_of_this_machine() {
        let disks = vec!["vda".to_string(), "loop0".to_string()];
        let report = "vda (254:0): 256.0 GiB, rotational\n  sectors   logical 512 B\n\nNo findings on vda.\n";
        assert!(check_names_a_disk(report, &disks).is_ok());
        assert!(check_names_a_disk("", &disks).is_err());
        assert!(check_names_a_disk("sdz (8:0): 1 GiB\n", &disks).is_err());
    }
}
