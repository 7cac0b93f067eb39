//! The live TUI as a person uses it: the real binary in tmux during real I/O,
//! read back with capture-pane, driven with send-keys.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{binary, dd, privileged, LoopDisk, PartitionSpec, Tmux};

#[test]
fn live_view_shows_the_odd_partition_and_restores_the_terminal() {
    if !privileged("live_view_shows_the_odd_partition_and_restores_the_terminal") {
        return;
    }
    let disk = LoopDisk::new(
        "tui",
        64,
        &[
            PartitionSpec {
                start: 2048,
                size: 40000,
            },
            PartitionSpec {
                start: 43008,
                size: 60001,
            },
        ],
    );
    let session = format!("iosplit-tui-{}", std::process::id());
    let tmux = Tmux::start(
        &session,
        &format!("{} -d {}; echo EXITED=$?; sleep 60", binary(), disk.name),
    );
    tmux.wait_for(&["iosplit-trace", "events/s"], Duration::from_secs(20));

    // Buffered 32 KiB writes to the odd-sized partition: 512-byte bios.
    let p2 = disk.partition(2);
    for _ in 0..3 {
        dd(&[
            "if=/dev/zero",
            &format!("of={p2}"),
            "bs=32k",
            "count=256",
            "conv=fsync",
        ]);
    }
    let part = format!("{}p2", disk.name);
    let screen = tmux.wait_for(&[&part, "amp"], Duration::from_secs(10));
    assert!(
        screen.contains("drops"),
        "the status line shows drops:\n{screen}"
    );

    // Select rows until the partition's detail pane opens with its diagnosis.
    tmux.keys(&["Tab"]);
    let mut found = false;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(700));
        if tmux.screen().contains("subpage_block_size") {
            found = true;
            break;
        }
        tmux.keys(&["j"]);
    }
    let screen = tmux.screen();
    assert!(
        found,
        "the detail pane never showed the diagnosis:\n{screen}"
    );

    tmux.keys(&["q"]);
    let screen = tmux.wait_for(&["EXITED=0"], Duration::from_secs(10));
    // After leaving, the one-shot report of the session is printed on a normal screen.
    assert!(
        screen.contains("subpage_block_size"),
        "no report after quitting:\n{screen}"
    );
    drop(tmux);
    drop(disk);
}
