//! Attaching the loaded programs: the block probes of the chosen flavor,
//! then, for `run`, the process-tree and io_uring probes. Every program goes
//! through [`attach`]; the callers differ only in which programs, where,
//! and how a failure is reported.

use aya::{
    programs::{BtfTracePoint, RawTracePoint, TracePoint},
    Btf, Ebpf,
};
use tracer_common::{names, EventKind, FieldOffsets, ProcessEventKind};

use crate::error::{Error, Result};

use super::format::ProbeStatus;
use super::{ProbeFlavor, ProbeReport, PROBES_ENV};

/// Where a program attaches.
#[derive(Clone, Copy)]
enum Hook<'a> {
    /// A BTF-typed tracepoint (`tp_btf`), verified against its prototype in
    /// the kernel's BTF.
    BtfTracePoint { tracepoint: &'a str, btf: &'a Btf },
    /// A tracepoint `category/name`. `load` is false for a program already
    /// loaded for another tracepoint (one program serving several).
    TracePoint {
        category: &'a str,
        name: &'a str,
        load: bool,
    },
    /// A raw tracepoint by name (the kernel finds a module's too).
    Raw { name: &'a str },
}

/// The step of [`attach`] that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Finding,
    Typing,
    Loading,
    Attaching,
}

impl Step {
    /// As the process probes' errors say it.
    fn verb(self) -> &'static str {
        match self {
            Step::Finding => "finding",
            Step::Typing => "typing",
            Step::Loading => "loading",
            Step::Attaching => "attaching",
        }
    }

    /// As the block probes' warnings say it.
    fn block_words(self) -> &'static str {
        match self {
            Step::Finding => "finding the program",
            Step::Typing => "program type",
            Step::Loading => "loading",
            Step::Attaching => "attaching",
        }
    }
}

/// Why a program did not attach: which one, at which step.
#[derive(Debug, thiserror::Error)]
#[error("{} {program}: {reason}", step.verb())]
pub struct AttachError {
    step: Step,
    /// The program and where it was to attach.
    program: String,
    reason: String,
}

/// Finds `program` in the object, loads it for `hook` and attaches it there.
fn attach(ebpf: &mut Ebpf, program: &str, hook: Hook<'_>) -> std::result::Result<(), AttachError> {
    let failed = |step: Step, reason: &dyn std::fmt::Display| AttachError {
        step,
        program: match hook {
            Hook::BtfTracePoint { tracepoint, .. } => format!("{program} ({tracepoint})"),
            Hook::TracePoint { category, name, .. } => format!("{program} ({category}/{name})"),
            Hook::Raw { name } => format!("{program} (raw {name})"),
        },
        reason: reason.to_string(),
    };
    let found = ebpf
        .program_mut(program)
        .ok_or_else(|| failed(Step::Finding, &"not in the object"))?;
    match hook {
        Hook::BtfTracePoint { tracepoint, btf } => {
            let program: &mut BtfTracePoint =
                found.try_into().map_err(|err| failed(Step::Typing, &err))?;
            program
                .load(tracepoint, btf)
                .map_err(|err| failed(Step::Loading, &err))?;
            program
                .attach()
                .map_err(|err| failed(Step::Attaching, &err))?;
        }
        Hook::TracePoint {
            category,
            name,
            load,
        } => {
            let program: &mut TracePoint =
                found.try_into().map_err(|err| failed(Step::Typing, &err))?;
            if load {
                program.load().map_err(|err| failed(Step::Loading, &err))?;
            }
            program
                .attach(category, name)
                .map_err(|err| failed(Step::Attaching, &err))?;
        }
        Hook::Raw { name } => {
            let program: &mut RawTracePoint =
                found.try_into().map_err(|err| failed(Step::Typing, &err))?;
            program.load().map_err(|err| failed(Step::Loading, &err))?;
            program
                .attach(name)
                .map_err(|err| failed(Step::Attaching, &err))?;
        }
    }
    Ok(())
}

/// The floor's program for `kind`, as `probes/noop.rs` names it.
fn noop_program(kind: EventKind) -> String {
    format!("noop_{}", kind.btf_program())
}

/// The block probes of `flavor`, one per kind, each attached or with the
/// reason it is not (a warning each); an error when none attached. A
/// classic probe whose format file could not be read is not tried.
pub(super) fn attach_block_probes(
    ebpf: &mut Ebpf,
    flavor: ProbeFlavor,
    offsets: Vec<(EventKind, std::result::Result<FieldOffsets, ProbeStatus>)>,
) -> Result<Vec<ProbeReport>> {
    // The btf and noop programs are BTF-typed: each is verified against its
    // tracepoint's prototype in the kernel's BTF (read once).
    let kernel_btf = match flavor {
        ProbeFlavor::Classic => None,
        ProbeFlavor::Btf | ProbeFlavor::Noop => Some(Btf::from_sys_fs().map_err(|err| {
            Error::failure(format!(
                "reading the kernel's BTF failed: {err}; set {PROBES_ENV}=classic to use classic tracepoints"
            ))
        })?),
    };
    let mut probes = Vec::new();
    for (kind, offsets) in offsets {
        let tracepoint = kind.tracepoint();
        let broken = |label: &str, err: AttachError| {
            ProbeStatus::Broken(format!(
                "{tracepoint}{label}: {} failed: {}",
                err.step.block_words(),
                err.reason
            ))
        };
        let status = match (flavor, &kernel_btf) {
            (ProbeFlavor::Btf, Some(btf)) => {
                let hook = Hook::BtfTracePoint { tracepoint, btf };
                attach(ebpf, kind.btf_program(), hook).map_err(|err| broken(" (btf)", err))
            }
            (ProbeFlavor::Noop, Some(btf)) => {
                let hook = Hook::BtfTracePoint { tracepoint, btf };
                attach(ebpf, &noop_program(kind), hook).map_err(|err| broken(" (btf)", err))
            }
            _ => offsets.and_then(|_| {
                let hook = Hook::TracePoint {
                    category: "block",
                    name: tracepoint,
                    load: true,
                };
                attach(ebpf, kind.program(), hook).map_err(|err| broken("", err))
            }),
        };
        if let Err(ProbeStatus::Unsupported(why) | ProbeStatus::Broken(why)) = &status {
            crate::status::status(format_args!("warning: {why}; continuing without it"));
        }
        probes.push(ProbeReport { kind, status });
    }
    let attached = probes.iter().filter(|p| p.status.is_ok()).count();
    if attached == 0 {
        return Err(Error::failure(
            "no block tracepoint could be attached; see the warnings above",
        ));
    }
    Ok(probes)
}

/// The `block_rq_tag_wait` counter (Linux 7.2+), where the tracepoint is.
pub(super) fn attach_tag_wait(ebpf: &mut Ebpf) -> std::result::Result<(), AttachError> {
    attach(
        ebpf,
        names::TAG_WAIT_PROGRAM,
        Hook::TracePoint {
            category: "block",
            name: "block_rq_tag_wait",
            load: true,
        },
    )
}

/// The NVMe command of each passthrough request (`nvme_setup_cmd`, a
/// tracepoint of the nvme module), where the module is loaded.
pub(super) fn attach_passthrough(ebpf: &mut Ebpf) -> std::result::Result<(), AttachError> {
    attach(
        ebpf,
        names::PASSTHROUGH_PROGRAM,
        Hook::Raw {
            name: "nvme_setup_cmd",
        },
    )
}

/// Fork following plus entry/exit probes for the write-family syscalls and
/// the ones that change the fd table (open, dup, close).
pub(super) fn attach_process_probes(ebpf: &mut Ebpf) -> std::result::Result<(), AttachError> {
    let mut attach_one = |program: &str, category: &str, name: &str, load: bool| {
        let hook = Hook::TracePoint {
            category,
            name,
            load,
        };
        attach(ebpf, program, hook)
    };
    attach_one(
        ProcessEventKind::Fork.enter_program(),
        "sched",
        "sched_process_fork",
        true,
    )?;
    attach_one(
        ProcessEventKind::Exec.enter_program(),
        "sched",
        "sched_process_exec",
        true,
    )?;
    attach_one("process_exit", "sched", "sched_process_exit", true)?;
    for (index, kind) in ProcessEventKind::SYSCALLS.iter().enumerate() {
        let enter = format!("sys_enter_{}", kind.name());
        let exit = format!("sys_exit_{}", kind.name());
        let attached = attach_one(kind.enter_program(), "syscalls", &enter, true);
        // openat2, open and dup2 are optional (older kernels, other architectures).
        let optional = matches!(
            kind,
            ProcessEventKind::Openat2 | ProcessEventKind::Open | ProcessEventKind::Dup2
        );
        if attached.is_err() && optional {
            continue;
        }
        attached?;
        // One exit program serves the whole family: load it once.
        attach_one("exit_write_family", "syscalls", &exit, index == 0)?;
    }
    // close_range (5.9 and later) reads its own fields; without it, the fds
    // it closes stay known until reused by an open or dup.
    let close_range = ProcessEventKind::CloseRange;
    if attach_one(
        close_range.enter_program(),
        "syscalls",
        "sys_enter_close_range",
        true,
    )
    .is_ok()
    {
        attach_one(
            "exit_write_family",
            "syscalls",
            "sys_exit_close_range",
            false,
        )?;
    }
    // io_submit (libaio) has its own exit program: it reads the iocbs.
    // Without CONFIG_AIO there is no tracepoint (nor an io_submit that
    // works); a program the verifier refuses is an error all the same.
    match attach_one(
        ProcessEventKind::IoSubmit.enter_program(),
        "syscalls",
        "sys_enter_io_submit",
        true,
    ) {
        Ok(()) => attach_one("exit_io_submit", "syscalls", "sys_exit_io_submit", true)?,
        Err(err) if err.step == Step::Attaching => {}
        Err(err) => return Err(err),
    }
    Ok(())
}

/// The io_uring submission probe, the io-wq punt counter when the kernel
/// has `io_uring_queue_async_work` with an opcode, and the registered-file
/// probes when `io_uring_register` and its syscall have the fields read.
pub(super) fn attach_uring_probes(
    ebpf: &mut Ebpf,
    submit: &str,
    punts: bool,
    registered_files: bool,
) -> std::result::Result<(), AttachError> {
    let mut attach_one = |program: &str, category: &str, name: &str| {
        let hook = Hook::TracePoint {
            category,
            name,
            load: true,
        };
        attach(ebpf, program, hook)
    };
    attach_one(
        ProcessEventKind::UringWrite.enter_program(),
        "io_uring",
        submit,
    )?;
    if punts {
        attach_one(
            ProcessEventKind::UringPunt.enter_program(),
            "io_uring",
            "io_uring_queue_async_work",
        )?;
    }
    // Registered files: the syscall's arguments, then the ring it registered to.
    if registered_files {
        attach_one(
            ProcessEventKind::UringFile.enter_program(),
            "syscalls",
            "sys_enter_io_uring_register",
        )?;
        attach_one("uring_register", "io_uring", "io_uring_register")?;
    }
    Ok(())
}
