//! `iosplit-trace serve`: the engine's measures and diagnoses as Prometheus
//! metrics on `/metrics` (OpenMetrics text, or the classic text format made
//! from it, as the scraper asks: [`super::prometheus`]), and `/healthz`.
//!
//! Scrapes ask the engine once per round; nothing is added per event.
//! Served counters are cumulative on this side: a scrape adds what grew
//! since the last one, and SIGHUP (which resets the engine, so diagnoses
//! describe the traffic since then) is absorbed first, so no served counter
//! ever goes down. The block devices in sysfs are looked at on every
//! collect; when they change (or on SIGHUP), geometry is re-read: new
//! devices are picked up, vanished ones stop being served (their totals are
//! kept in case they come back).
//!
//! Who owns what:
//! - this file: the entry point, [`run`] (bind, start the probes, serve
//!   until SIGINT or SIGTERM, SIGHUP's reset);
//! - [`http`]: the routes, their answers, HTTPS connections;
//! - [`web`]: the web config file (TLS and basic auth);
//! - [`exporter`]: the exporter's state and scrapes, which share one engine
//!   query per round; the devices present now;
//! - [`totals`]: what is served, cumulative across engine resets and
//!   devices coming and going;
//! - [`tables`]: the metric tables, each family's name, help text and
//!   source in the measures, and [`tables::Total`], a counter that only grows;
//! - [`frame`]: what a scrape writes, in order, from [`totals`] and the tables;
//! - [`owners`]: the `--by` series, top owners plus `other`;
//! - [`process`]: the exporter's own footprint (`process_*`).

mod exporter;
mod frame;
mod http;
mod owners;
mod process;
mod tables;
#[cfg(test)]
mod tests;
mod totals;
mod web;

use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::SignalKind;

use crate::capture::Capture;
use crate::cli::{DeviceSelection, ServeArgs};
use crate::engine::Engine;
use crate::error::{one_line, Error, Result};

use super::{output, selection, session};
use exporter::Exporter;

pub use crate::cli::DEFAULT_LISTEN;

pub fn run(devices_selected: &DeviceSelection, args: &ServeArgs) -> Result<ExitCode> {
    // glibc raises its mmap threshold each time a large block is freed, so
    // later large buffers (scrapes, burst-sized queues) land on the heap and
    // fragment it (docs/benchmarks.md, "Changes"). Pinned, they are mapped
    // and unmapped whole.
    // SAFETY: mallopt only sets an allocator parameter, before any thread starts.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    let devices = selection::resolve_selection(devices_selected)?;
    let web = args.web_config.as_deref().map(web::load).transpose()?;
    if web.as_ref().is_none_or(|web| web.tls.is_none()) && !args.listen.ip().is_loopback() {
        output::status(format_args!(
            "warning: serving {} over plain HTTP without authentication; with --by, process names and file paths show to anyone who can reach it (--web.config.file adds TLS and basic auth)",
            args.listen
        ));
    }
    // Bind first: a busy or forbidden address fails before the probes load.
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|err| Error::caused(format!("cannot listen on {}", args.listen), err))?;
    let listening = listener
        .local_addr()
        .map_err(|err| Error::caused("cannot read the listening address", err))?;
    let mut geometry = session::read_geometry(&devices)?;
    // A selected disk without media (a detached loop device) is not served
    // until it has some, as the watch sees it.
    geometry.retain(|disk| disk.size_sectors > 0);
    let config = selection::capture_config(&devices, args.read.reads_owners(!args.by.is_empty()));
    // Without probes (no CAP_BPF, a locked-down kernel) the geometry audit
    // is still worth serving: say why once, and keep serving.
    let capture = match Capture::start(&config, Engine::new(geometry.clone(), Default::default())) {
        Ok(capture) => Ok(capture),
        Err(err) => {
            let reason = one_line(&err);
            output::status(format_args!(
                "warning: not tracing ({reason}); serving the geometry audit only"
            ));
            Err(reason)
        }
    };
    let exporter = Arc::new(Exporter::new(
        capture,
        session::GeometryWatch::new(&devices, &geometry),
        &geometry,
        args.by.iter().map(|by| by.view()).collect(),
    ));
    let runtime = session::runtime()?;
    // Listened for before "tracing" shows (see `session::listen`).
    let mut interrupt = session::listen(&runtime, SignalKind::interrupt())?;
    let mut terminate = session::listen(&runtime, SignalKind::terminate())?;
    let mut hangup = session::listen(&runtime, SignalKind::hangup())?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|err| Error::caused(format!("cannot listen on {listening}"), err))?;
        exporter.announce(&devices);
        output::status(format_args!("serving http://{listening}/metrics"));
        let app = http::router(
            Arc::clone(&exporter),
            web.as_ref().and_then(|web| web.auth.clone()),
        );
        let stopped = async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        };
        let tls = web.and_then(|web| web.tls);
        let server = async move {
            match tls {
                None => http::serve_plain(listener, app, stopped).await,
                Some(tls) => http::serve_tls(listener, app, tls, stopped).await,
            }
        };
        let hangups = async {
            while hangup.recv().await.is_some() {
                match exporter.scrape(true).await {
                    Ok(_) => output::status(format_args!(
                        "SIGHUP: devices re-read, diagnoses start afresh"
                    )),
                    Err(reason) => output::status(format_args!("SIGHUP: {reason}")),
                }
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            result = server => result,
            () = hangups => Ok(()),
        }
    });
    served?;
    Ok(ExitCode::SUCCESS)
}
