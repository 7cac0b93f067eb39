//! `cargo xtask test` and `cargo xtask run`.

use std::process::Command;

use crate::util::{is_root, run, workspace_root, Result};

/// Builds, then runs every test in the workspace.
pub fn test(extra: &[String]) -> Result<()> {
    let root = workspace_root();
    if !is_root() {
        eprintln!("xtask: not root: the privileged tests will be skipped (CI runs them as root)");
    }
    run(Command::new("cargo")
        .current_dir(&root)
        .args(["build", "--workspace", "--all-targets"]))?;
    run(Command::new("cargo")
        .current_dir(&root)
        .args(["test", "--workspace"])
        .args(extra))
}

/// Builds the release binary and starts it (through sudo when not root).
pub fn run_tracer(args: &[String]) -> Result<()> {
    let root = workspace_root();
    run(Command::new("cargo").current_dir(&root).args([
        "build",
        "--release",
        "-p",
        "iosplit-trace",
    ]))?;
    let binary = root.join("target/release/iosplit-trace");
    let mut cmd = if is_root() {
        Command::new(&binary)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg(&binary);
        sudo
    };
    run(cmd.args(args))
}
