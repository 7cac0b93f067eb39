//! `cargo xtask image`: the OCI image fleets deploy (the DaemonSet in
//! dist/kubernetes/ runs it), built offline: the static binary on an empty
//! base, labelled with its version and source. Nothing is pulled.
//!
//! `cargo xtask test` also runs it under podman with the DaemonSet's
//! capabilities and host mounts, and checks that `serve` inside counts a
//! host loop disk's writes ([`smoke_test`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::{output, run, workspace_root, Result};
use crate::vm;

/// What the image is called in local container storage.
pub fn name() -> String {
    format!("localhost/iosplit-trace:{}", env!("CARGO_PKG_VERSION"))
}

/// Builds the image into buildah's storage and writes it as an OCI archive
/// to target/dist/; returns the archive's path.
pub fn image() -> Result<PathBuf> {
    let root = workspace_root();
    let binary = vm::build_static_tracer(&root.join("target/vm"))?;
    vm::require_static(&binary)?;
    let context = root.join("target/image");
    std::fs::create_dir_all(&context)
        .map_err(|err| format!("cannot create {}: {err}", context.display()))?;
    std::fs::copy(&binary, context.join("iosplit-trace"))
        .map_err(|err| format!("cannot copy the binary into the image context: {err}"))?;
    let version = env!("CARGO_PKG_VERSION");
    // The source is the commit it was built from (there is no public URL yet).
    let revision = output(
        Command::new("git")
            .current_dir(&root)
            .args(["rev-parse", "HEAD"]),
    )
    .map(|text| text.trim().to_string())
    .unwrap_or_else(|| "unknown".to_string());
    let containerfile = format!(
        "FROM scratch\n\
         COPY iosplit-trace /iosplit-trace\n\
         LABEL org.opencontainers.image.title=\"iosplit-trace\" \\\n\
         \x20     org.opencontainers.image.version=\"{version}\" \\\n\
         \x20     org.opencontainers.image.revision=\"{revision}\" \\\n\
         \x20     org.opencontainers.image.description=\"Block I/O split tracer: serve exports its measures to Prometheus\"\n\
         EXPOSE 9788\n\
         ENTRYPOINT [\"/iosplit-trace\"]\n\
         CMD [\"serve\", \"--listen\", \"0.0.0.0:9788\"]\n",
    );
    std::fs::write(context.join("Containerfile"), containerfile)
        .map_err(|err| format!("cannot write the Containerfile: {err}"))?;
    let name = name();
    run(Command::new("buildah")
        .args(["bud", "--pull=never", "-t", &name, "-f"])
        .arg(context.join("Containerfile"))
        .arg(&context))?;
    let out = root.join("target/dist");
    std::fs::create_dir_all(&out)
        .map_err(|err| format!("cannot create {}: {err}", out.display()))?;
    let archive = out.join(format!("iosplit-trace-{version}-oci.tar"));
    let _ = std::fs::remove_file(&archive);
    run(Command::new("buildah")
        .args(["push", &name])
        .arg(format!("oci-archive:{}:{name}", archive.display())))?;
    eprintln!("xtask: image {name}, archive {}", archive.display());
    Ok(archive)
}

/// A loop disk and a running container, removed however the test ends.
struct Scene {
    loop_device: Option<String>,
    image_file: PathBuf,
    container: String,
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = output(Command::new("podman").args(["rm", "-f", &self.container]));
        if let Some(device) = &self.loop_device {
            let _ = output(Command::new("losetup").args(["-d", device]));
        }
        let _ = std::fs::remove_file(&self.image_file);
    }
}

/// The invocation that works in this sandbox (../shared/ENVIRONMENT.md):
/// Debian's runc, cgroupfs, bounded ulimits; the DaemonSet's three
/// capabilities, its seccomp profile and its tracefs mount; the host's
/// network, as the DaemonSet's hostNetwork.
fn podman_run(container: &str, port: u16, device: &str) -> Command {
    let mut command = Command::new("podman");
    command
        .args([
            "--runtime",
            "/usr/sbin/runc",
            "--cgroup-manager=cgroupfs",
            "run",
            "-d",
        ])
        .args(["--name", container])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args(["--cap-add=bpf,perfmon,dac_read_search"])
        // The runtimes' default seccomp profiles refuse bpf(2) without
        // CAP_SYS_ADMIN; Kubernetes runs pods unconfined unless told otherwise.
        .args(["--security-opt", "seccomp=unconfined"])
        .args(["-v", "/sys/kernel/tracing:/sys/kernel/tracing"])
        .args(["--network", "host"])
        .arg(name())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "-d",
            device,
        ]);
    command
}

/// Runs the image with podman as the DaemonSet runs it, writes to a host
/// loop disk, and checks that the container's `/metrics` counted the writes.
pub fn smoke_test() -> Result<()> {
    let stamp = std::process::id();
    let mut scene = Scene {
        loop_device: None,
        image_file: PathBuf::from(format!("/dev/shm/iosplit-image-smoke-{stamp}.img")),
        container: format!("iosplit-smoke-{stamp}"),
    };
    std::fs::write(&scene.image_file, vec![0u8; 64 << 20])
        .map_err(|err| format!("cannot make the loop disk's image: {err}"))?;
    let device = output(
        Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&scene.image_file),
    )
    .map(|text| text.trim().to_string())
    .ok_or("losetup failed")?;
    scene.loop_device = Some(device.clone());
    let name = device.trim_start_matches("/dev/").to_string();
    let port = free_port()?;
    run(&mut podman_run(&scene.container, port, &name))?;
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(60);
    while scrape(&url).is_none() {
        if Instant::now() > deadline {
            let logs = output(Command::new("podman").args(["logs", &scene.container]));
            return Err(format!("the container never served {url}: {logs:?}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    run(Command::new("dd").args([
        "if=/dev/zero",
        &format!("of={device}"),
        "bs=64k",
        "count=64",
        "oflag=direct",
        "status=none",
    ]))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(&url).unwrap_or_default();
        let commands: f64 = text
            .lines()
            .filter(|line| {
                line.starts_with("iosplit_commands_total{")
                    && line.contains(&format!("device=\"{name}\""))
                    && line.contains("op=\"write\"")
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if commands >= 64.0 {
            eprintln!("xtask: the image under podman counted {commands} write commands on {name}");
            return Ok(());
        }
        if Instant::now() > deadline {
            let logs = output(Command::new("podman").args(["logs", &scene.container]));
            return Err(format!(
                "the container counted {commands} write commands on {name}, expected at least 64; its stderr: {}",
                logs.unwrap_or_default().trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn scrape(url: &str) -> Option<String> {
    output(Command::new("curl").args(["-s", "-f", "--max-time", "5", url]))
}

fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|err| format!("no free port: {err}"))
}
