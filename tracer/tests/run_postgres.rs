//! PostgreSQL (Debian's package) under `run` on ext4 on a loop partition:
//! initdb, pg_ctl start, pgbench -i -s 5, pgbench -c 4 -T 8 and pg_ctl stop
//! in one run. The WAL segments are zero-filled as `xlogtemp.N`, renamed,
//! rewritten page by page with an fdatasync after each, and recycled or
//! removed: every file that existed while it was written is placed (no
//! extent map missing), and each WAL write is about one command.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{privileged, run_json, sh, Ext4Disk};

/// Debian's server binaries (`/usr/lib/postgresql/N/bin`), newest first.
fn postgres_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pgbench").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// A port no packaged cluster listens on.
const PORT: &str = "54328";

/// Stops the server if the run left it up (a failed run), before unmounting.
struct Server {
    bin: PathBuf,
    data: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn script(bin: &Path, dir: &Path) -> String {
    let (bin, dir) = (bin.display(), dir.display());
    let as_postgres = "runuser -u postgres --";
    format!(
        "set -e; \
         {as_postgres} {bin}/initdb -D {dir}/pgdata -A trust >/dev/null; \
         {as_postgres} {bin}/pg_ctl -D {dir}/pgdata -l {dir}/log -o \"-k {dir} -p {PORT} -c listen_addresses=''\" -w start >/dev/null; \
         {as_postgres} {bin}/pgbench -h {dir} -p {PORT} -i -s 5 postgres >/dev/null 2>&1; \
         {as_postgres} {bin}/pgbench -h {dir} -p {PORT} -c 4 -T 8 postgres >/dev/null 2>&1; \
         {as_postgres} {bin}/pg_ctl -D {dir}/pgdata -m fast -w stop >/dev/null"
    )
}

#[test]
fn postgres_files_are_all_placed_and_wal_writes_are_one_command_each() {
    if !privileged("postgres_files_are_all_placed_and_wal_writes_are_one_command_each") {
        return;
    }
    let Some(bin) = postgres_bin() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("PostgreSQL is not installed: `cargo xtask setup` installs it");
        }
        eprintln!("SKIPPED: PostgreSQL is not installed (`cargo xtask setup` installs it)");
        return;
    };
    let disk = Ext4Disk::new("runpg", 512);
    let dir = disk.mounted.point.clone();
    sh("chown", &["postgres", dir.to_str().unwrap()]);
    let _server = Server {
        bin: bin.clone(),
        data: dir.join("pgdata"),
    };
    let report = run_json(&["sh", "-c", &script(&bin, &dir)]);
    let targets = report["run"]["targets"].as_array().unwrap();
    let files: Vec<_> = targets.iter().filter(|t| t["file"].is_object()).collect();
    assert!(files.len() >= 16, "{}", report["run"]);
    // Every listed file was placed: none lost its extent map to a rename or removal.
    for target in &files {
        let file = &target["file"];
        assert!(file["map_error"].is_null(), "{target}");
        assert_eq!(file["unmappable_bytes"], 0, "{target}");
        assert_eq!(file["unknown_offset_bytes"], 0, "{target}");
    }
    let path = |t: &&&serde_json::Value| t["file"]["path"].as_str().unwrap().to_string();
    let segments: Vec<_> = files
        .iter()
        .filter(|t| path(t).contains("/pg_wal/0000"))
        .collect();
    let zero_filled: Vec<_> = files
        .iter()
        .filter(|t| path(t).contains("/pg_wal/xlogtemp."))
        .collect();
    assert!(segments.len() >= 3, "{}", report["run"]);
    assert!(!zero_filled.is_empty(), "{}", report["run"]);
    // WAL is fdatasync'ed: all of it reached the device inside the run, each
    // write in about one command (matching by sectors alone gave p50 20).
    for target in segments.iter().chain(&zero_filled) {
        let file = &target["file"];
        assert_eq!(file["not_written_back_bytes"], 0, "{target}");
        let per_write = &target["commands_per_write"];
        assert_eq!(per_write["count"], target["write_syscalls"], "{target}");
        assert_eq!(per_write["p50"], 1, "{target}");
        assert!(per_write["max"].as_u64().unwrap() <= 8, "{target}");
    }
}
