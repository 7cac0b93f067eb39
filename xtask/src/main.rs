//! Developer and CI tasks: `cargo xtask setup | run | test | bench | vm-test | dist | image | install`.
//!
//! Every task sets up what it needs first, so each one works on a fresh machine.

mod bench;
mod dist;
mod image;
mod setup;
mod test;
mod util;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything the build and the tests need (idempotent).
    Setup,
    /// Set up, build, and start iosplit-trace with these arguments.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, build, and run every test (privileged ones need root), then the VM matrix.
    Test {
        /// Skip the VM kernel matrix (`cargo xtask vm-test`) for a quick local loop.
        #[arg(long)]
        no_vm: bool,
        /// Extra arguments for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Overhead benchmark against a no-tracer baseline and bpftrace.
    Bench(bench::BenchArgs),
    /// Boot other kernels and disk geometries in qemu and run the scenarios.
    VmTest(vm::VmArgs),
    /// Build the release tarball: static binary, man page, completions, systemd unit, examples.
    Dist,
    /// Build the OCI image (static binary on an empty base) offline, as target/dist/*-oci.tar.
    Image {
        /// Then run it under podman as the DaemonSet does and check it counts a loop disk's writes.
        #[arg(long)]
        smoke_test: bool,
    },
    /// Build the same tree and install it under a prefix.
    Install {
        /// Where to install (bin/, share/, lib/systemd/system/ go under it).
        #[arg(long, default_value = "/usr/local")]
        prefix: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::setup(),
        Task::Run { args } => setup::setup().and_then(|()| test::run_tracer(&args)),
        Task::Test { no_vm, args } => {
            setup::setup()
                .and_then(|()| test::test(&args))
                .and_then(|()| match no_vm {
                    true => {
                        eprintln!("xtask: --no-vm: the VM kernel matrix was not run");
                        Ok(())
                    }
                    false => vm::vm_test(&vm::VmArgs::default()),
                })
        }
        Task::Bench(args) => setup::setup().and_then(|()| bench::bench(&args)),
        Task::VmTest(args) => setup::setup().and_then(|()| vm::vm_test(&args)),
        Task::Dist => setup::setup().and_then(|()| dist::dist()),
        Task::Image { smoke_test } => {
            setup::setup()
                .and_then(|()| image::image())
                .and_then(|_| match smoke_test {
                    true => image::smoke_test(),
                    false => Ok(()),
                })
        }
        Task::Install { prefix } => setup::setup().and_then(|()| dist::install(&prefix)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
