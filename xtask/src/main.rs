//! Developer and CI tasks: `cargo xtask setup | run | test | bench | vm-test | dist | image | install`.
//!
//! Every task sets up what it needs first, and only that (setup.rs lists
//! each purpose's tools), so each one works on a fresh machine.

mod bench;
mod deb;
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
    /// Install everything every task needs, for contributors (idempotent).
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
    /// Build the release tarball and the Debian package: static binary, man page, completions, systemd units, examples.
    Dist {
        /// Then install the .deb here, run `check`, verify its units, and purge it (root; `test` does too).
        #[arg(long)]
        smoke_test: bool,
    },
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
        Task::Setup => setup::setup("cargo xtask setup", setup::EVERYTHING),
        Task::Run { args } => {
            setup::setup("cargo xtask run", setup::RUN).and_then(|()| test::run_tracer(&args))
        }
        Task::Test { no_vm, args } => {
            let purposes: Vec<setup::Purpose> = setup::TEST
                .iter()
                .copied()
                .filter(|purpose| !(no_vm && *purpose == setup::Purpose::VmMatrix))
                .collect();
            setup::setup("cargo xtask test", &purposes)
                .and_then(|()| test::test(&args))
                .and_then(|()| match no_vm {
                    true => {
                        eprintln!("xtask: --no-vm: the VM kernel matrix was not run");
                        Ok(())
                    }
                    false => vm::vm_test(&vm::VmArgs::default()),
                })
        }
        Task::Bench(args) => {
            setup::setup("cargo xtask bench", setup::BENCH).and_then(|()| bench::bench(&args))
        }
        Task::VmTest(args) => {
            setup::setup("cargo xtask vm-test", setup::VM_TEST).and_then(|()| vm::vm_test(&args))
        }
        Task::Dist { smoke_test } => {
            let mut purposes = setup::DIST.to_vec();
            if smoke_test {
                purposes.push(setup::Purpose::DebSmoke);
            }
            setup::setup("cargo xtask dist", &purposes)
                .and_then(|()| dist::dist())
                .and_then(|package| match smoke_test {
                    true => deb::smoke_test(&package),
                    false => Ok(()),
                })
        }
        Task::Image { smoke_test } => {
            let mut purposes = setup::IMAGE.to_vec();
            if smoke_test {
                purposes.push(setup::Purpose::ImageSmoke);
            }
            setup::setup("cargo xtask image", &purposes)
                .and_then(|()| image::image())
                .and_then(|_| match smoke_test {
                    true => image::smoke_test(),
                    false => Ok(()),
                })
        }
        Task::Install { prefix } => setup::setup("cargo xtask install", setup::INSTALL)
            .and_then(|()| dist::install(&prefix)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
