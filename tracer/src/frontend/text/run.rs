//! The `run` chain: what the command's writes became, per target, with the
//! file they went to and how they were submitted (write syscalls, libaio,
//! io_uring). Printed alone, or after the report's header.

use crate::frontend::{units, words};
use crate::model::{AttachEnd, RunFile, RunReport};

use super::layout::{Out, DEFAULT_WIDTH};

/// The `run` chain: per target, the sentence the engine wrote and the numbers behind it.
pub fn render_run_summary(run: &RunReport) -> String {
    let mut out = Out::new(DEFAULT_WIDTH);
    run_summary(&mut out, run);
    out.finish()
}

pub(super) fn run_summary(out: &mut Out, run: &RunReport) {
    let status = match (&run.attached, run.exit_status) {
        (Some(attached), _) => format!(
            "pid {}, followed for {:.1} s from attach {}",
            attached.pid,
            attached.window_s,
            match attached.ended {
                AttachEnd::Exited => "until it exited",
                AttachEnd::Interrupted => "until Ctrl-C (it goes on, untraced)",
            }
        ),
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "killed by a signal".to_string(),
    };
    out.line(&format!(
        "run: {} ({status}, {} process{})",
        run.command.join(" "),
        units::thousands(run.processes),
        if run.processes == 1 { "" } else { "es" }
    ));
    // Worth a line once it is a noticeable part of the command's time.
    if run.paused_opens > 0
        && run
            .command_s
            .is_some_and(|took| run.paused_s * 100.0 >= took)
    {
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "stopped at {} open{} for writing until each file was held, {:.1} ms in all \
                 (left out of its time; --no-pause races instead)",
                units::thousands(run.paused_opens),
                if run.paused_opens == 1 { "" } else { "s" },
                run.paused_s * 1000.0
            ),
        );
    }
    if let Some(estimate) = &run.time_with_fix {
        out.wrapped("  ", "    ", &words::run_time_with_fix(run, estimate));
    }
    if run.targets.is_empty() {
        out.line("  the command wrote nothing to the traced devices.");
    }
    for target in &run.targets {
        out.blank();
        out.wrapped(&format!("  {}: ", target.device), "    ", &target.summary);
        let what = if target.aio_writes + target.uring_writes == 0 {
            "write syscalls"
        } else {
            "writes"
        };
        out.line(&format!(
            "    {what} {} ({}, avg {}), fsync {}",
            units::thousands(target.write_syscalls),
            units::bytes(target.write_syscall_bytes as f64),
            units::bytes(target.write_syscall_size.mean),
            units::thousands(target.fsync_calls),
        ));
        if target.aio_writes + target.uring_writes > 0 {
            let mut parts = vec![format!(
                "{} write syscalls ({})",
                units::thousands(target.write_syscalls - target.aio_writes - target.uring_writes),
                units::bytes(
                    (target.write_syscall_bytes - target.aio_write_bytes - target.uring_write_bytes)
                        as f64
                ),
            )];
            if target.aio_writes > 0 {
                parts.push(format!(
                    "{} through libaio (io_submit) ({})",
                    units::thousands(target.aio_writes),
                    units::bytes(target.aio_write_bytes as f64),
                ));
            }
            if target.uring_writes > 0 {
                parts.push(format!(
                    "{} through io_uring ({})",
                    units::thousands(target.uring_writes),
                    units::bytes(target.uring_write_bytes as f64),
                ));
            }
            out.line(&format!("      {}", parts.join(", ")));
        }
        // Writes without an offset (plain write()) cannot be matched to commands.
        let per_command = if target.writes_per_command.count > 0 {
            format!(
                " (avg writes per command {})",
                units::ratio(target.writes_per_command.mean)
            )
        } else {
            String::new()
        };
        out.line(&format!(
            "    bios {} (avg {}) -> commands {}{per_command}",
            units::thousands(target.bios),
            units::bytes(target.bio_size.mean),
            units::thousands(target.commands),
        ));
        if target.commands_per_write.count > 0 {
            out.line(&format!(
                "    commands per write: p50 {}, p99 {}, max {}",
                target.commands_per_write.p50,
                target.commands_per_write.p99,
                target.commands_per_write.max
            ));
        }
        if let Some(file) = &target.file {
            run_file_lines(out, file);
        }
    }
    if let Some(rest) = &run.files_not_listed {
        out.blank();
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "{} more files written ({} writes, {}) are not listed.",
                units::thousands(rest.files),
                units::thousands(rest.write_syscalls),
                units::bytes(rest.write_syscall_bytes as f64)
            ),
        );
    }
    if let Some(aio) = &run.io_submit {
        out.blank();
        out.line(&format!(
            "  io_submit (libaio): {} calls submitted {} iocbs",
            units::thousands(aio.calls),
            units::thousands(aio.iocbs),
        ));
        if aio.iocbs_not_followed > 0 {
            out.wrapped(
                "    ",
                "    ",
                &format!(
                    "{} iocbs NOT followed (more than {} in one call, or a PWRITEV of more than {} iovecs): their writes are in no count above",
                    units::thousands(aio.iocbs_not_followed),
                    tracer_common::AIO_IOCBS_READ,
                    tracer_common::AIO_IOVECS_READ,
                ),
            );
        }
    }
    if let Some(uring) = &run.io_uring {
        run_uring_lines(out, uring);
    }
    let background: u64 = run.background.ops.values().map(|m| m.user_ios).sum();
    if background > 0 {
        let commands: u64 = run.background.ops.values().map(|m| m.commands).sum();
        out.blank();
        out.line(&format!(
            "  background writeback by other tasks: {} user I/Os -> {} commands",
            units::thousands(background),
            units::thousands(commands)
        ));
    }
}

/// The run's io_uring SQEs: how many, how they were submitted, and the
/// ones not followed; or that this kernel's io_uring is not followed.
fn run_uring_lines(out: &mut Out, uring: &crate::model::UringReport) {
    out.blank();
    if let Some(why) = &uring.unsupported {
        out.wrapped(
            "  ",
            "    ",
            &format!(
                "io_uring: submissions NOT followed on this kernel ({why}); writes the command made through io_uring are in no count above"
            ),
        );
        return;
    }
    let submitted =
        uring.writes + uring.syncs + uring.fixed_files_not_followed + uring.not_followed;
    out.wrapped(
        "  ",
        "    ",
        &format!(
            "io_uring: {} write and fsync SQEs ({} writes and {} fsyncs followed): {} by io_uring_enter, {} by the SQPOLL thread; {} handed to io-wq workers (iou-wrk)",
            units::thousands(submitted),
            units::thousands(uring.writes),
            units::thousands(uring.syncs),
            units::thousands(submitted.saturating_sub(uring.sqpoll)),
            units::thousands(uring.sqpoll),
            units::thousands(uring.punted_to_io_wq),
        ),
    );
    if uring.fixed_files_not_followed > 0 {
        out.wrapped(
            "    ",
            "    ",
            &format!(
                "{} SQEs on registered (fixed) files NOT followed (registered before tracing, past the first {} slots, or changed since): their writes are in no count above",
                units::thousands(uring.fixed_files_not_followed),
                tracer_common::URING_FILES_READ,
            ),
        );
    }
    if uring.not_followed > 0 {
        out.wrapped(
            "    ",
            "    ",
            &format!(
                "{} SQEs NOT followed (a WRITEV of more than {} iovecs, or unreadable): their writes are in no count above",
                units::thousands(uring.not_followed),
                tracer_common::AIO_IOVECS_READ,
            ),
        );
    }
}

/// Where a file's written bytes went: matched, still dirty, or unmappable.
fn run_file_lines(out: &mut Out, file: &RunFile) {
    out.wrapped(
        "    ",
        "      ",
        &format!(
            "{} extents (FIEMAP after the run); {} of the writes on sectors commands wrote",
            units::thousands(file.extents),
            units::bytes(file.matched_bytes as f64),
        ),
    );
    if let Some(error) = &file.map_error {
        out.wrapped("    ", "      ", &format!("extent map: {error}"));
    }
    if file.not_written_back_bytes > 0 {
        let delalloc = if file.delalloc_bytes > 0 {
            format!(
                ", {} of them in delayed-allocation extents with no sectors yet",
                units::bytes(file.delalloc_bytes as f64)
            )
        } else {
            String::new()
        };
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "NOT written back inside the run (still dirty at exit): {} not matched to commands{delalloc}",
                units::bytes(file.not_written_back_bytes as f64)
            ),
        );
    }
    if file.overwritten_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} rewritten by a later write before any command wrote them (only the later data reached the device)",
                units::bytes(file.overwritten_bytes as f64)
            ),
        );
    }
    if file.unmappable_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} not matched: no device address ({} extents FIEMAP could not place, or holes)",
                units::bytes(file.unmappable_bytes as f64),
                units::thousands(file.unmappable_extents)
            ),
        );
    }
    if file.unknown_offset_bytes > 0 {
        out.wrapped(
            "    ",
            "      ",
            &format!(
                "{} not matched: written through an fd opened before tracing, at an unknown offset",
                units::bytes(file.unknown_offset_bytes as f64)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::seed_run;
    use crate::frontend::text::tests::{assert_fits, squeezed};

    #[test]
    fn run_summary_lists_targets() {
        let text = render_run_summary(&seed_run());
        assert!(text.starts_with("run: mkfs.ext4 /dev/loop0p2 (exit status 0, 1 process)"));
        assert!(text.contains("loop0p2: mkfs.ext4 issued 2,048 writes of 32 KiB"));
        assert!(text.contains("write syscalls 2,048 (64 MiB, avg 32 KiB), fsync 1"));
        assert!(text.contains("bios 131,072 (avg 512 B) -> commands 1,032"));
        assert!(text.contains("background writeback by other tasks: 10 user I/Os -> 10 commands"));
        assert_fits(&text, 80);
    }

    #[test]
    fn pauses_at_opens_are_said_once_they_are_a_hundredth_of_the_time() {
        let mut run = seed_run();
        run.command_s = Some(31.4);
        assert!(!render_run_summary(&run).contains("stopped at"));
        run.paused_opens = 200;
        run.paused_s = 0.08;
        run.command_s = Some(0.12);
        let text = squeezed(&render_run_summary(&run));
        assert!(
            text.contains(
                "stopped at 200 opens for writing until each file was held, 80.0 ms in all"
            ),
            "{text}"
        );
    }

    #[test]
    fn libaio_writes_and_iocbs_not_followed_are_said() {
        let mut run = seed_run();
        run.targets[0].aio_writes = 2000;
        run.targets[0].aio_write_bytes = 2000 * 32768;
        run.io_submit = Some(crate::model::IoSubmitReport {
            calls: 300,
            iocbs: 2064,
            iocbs_not_followed: 16,
        });
        let text = render_run_summary(&run);
        assert!(
            text.contains("writes 2,048 (64 MiB, avg 32 KiB), fsync 1"),
            "{text}"
        );
        assert!(
            text.contains("48 write syscalls (1.5 MiB), 2,000 through libaio (io_submit)"),
            "{text}"
        );
        assert!(text.contains("io_submit (libaio): 300 calls submitted 2,064 iocbs"));
        assert!(
            squeezed(&text).contains("16 iocbs NOT followed (more than 64 in one call"),
            "{text}"
        );
        assert_fits(&text, 80);
        // Without io_submit, the lines are as before.
        let text = render_run_summary(&seed_run());
        assert!(
            !text.contains("libaio") && !text.contains("io_submit"),
            "{text}"
        );
    }

    #[test]
    fn uring_writes_how_they_were_submitted_and_sqes_not_followed_are_said() {
        let mut run = seed_run();
        run.targets[0].uring_writes = 2000;
        run.targets[0].uring_write_bytes = 2000 * 32768;
        run.io_uring = Some(crate::model::UringReport {
            writes: 2000,
            syncs: 1,
            sqpoll: 500,
            punted_to_io_wq: 64,
            fixed_files_not_followed: 7,
            not_followed: 2,
            unsupported: None,
        });
        let text = render_run_summary(&run);
        let flat = squeezed(&text);
        assert!(
            text.contains("48 write syscalls (1.5 MiB), 2,000 through io_uring (62.5 MiB)"),
            "{text}"
        );
        assert!(
            flat.contains("io_uring: 2,010 write and fsync SQEs (2,000 writes and 1 fsyncs followed): 1,510 by io_uring_enter, 500 by the SQPOLL thread; 64 handed to io-wq workers"),
            "{text}"
        );
        assert!(
            flat.contains("7 SQEs on registered (fixed) files NOT followed (registered before"),
            "{text}"
        );
        assert!(
            flat.contains("2 SQEs NOT followed (a WRITEV of more than 8"),
            "{text}"
        );
        assert_fits(&text, 80);
        // A kernel whose io_uring cannot be followed says so, with no counts.
        run.io_uring = Some(crate::model::UringReport {
            unsupported: Some("io_uring/io_uring_submit_req: cannot read it".into()),
            ..crate::model::UringReport::default()
        });
        let flat = squeezed(&render_run_summary(&run));
        assert!(
            flat.contains("io_uring: submissions NOT followed on this kernel (io_uring/io_uring_submit_req: cannot read it)"),
            "{flat}"
        );
        assert!(!flat.contains("SQEs ("), "{flat}");
        // Without io_uring, nothing is said of it.
        assert!(!render_run_summary(&seed_run()).contains("io_uring"));
    }

    #[test]
    fn a_files_dirty_and_unplaceable_bytes_are_said_with_their_counts() {
        let mut run = seed_run();
        run.targets[0].file = Some(crate::model::RunFile {
            path: "/mnt/x/file".to_string(),
            inode: 12,
            extents: 3,
            unmappable_extents: 1,
            map_error: None,
            matched_bytes: 1 << 20,
            not_written_back_bytes: 512 << 10,
            delalloc_bytes: 256 << 10,
            unmappable_bytes: 4096,
            unknown_offset_bytes: 0,
            overwritten_bytes: 8192,
        });
        let text = render_run_summary(&run);
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "3 extents (FIEMAP after the run); 1 MiB of the writes on sectors commands wrote"
            ),
            "{text}"
        );
        assert!(
            flat.contains("NOT written back inside the run (still dirty at exit): 512 KiB not matched to commands, 256 KiB of them in delayed-allocation extents"),
            "{text}"
        );
        assert!(
            flat.contains("4 KiB not matched: no device address (1 extents"),
            "{text}"
        );
        assert!(
            flat.contains("8 KiB rewritten by a later write before any command wrote them"),
            "{text}"
        );
        assert!(!flat.contains("unknown offset"), "{text}");
        assert_fits(&text, 80);
    }
}
