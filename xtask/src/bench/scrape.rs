//! The `serve` configuration's Prometheus stand-in: a thread that GETs
//! /metrics every second while fio runs (and samples the server's VmRSS every
//! 10 s), and the reading of the counters from the last scrape.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::system::vm_rss_kib;
use crate::util::Result;

/// How often Prometheus would scrape in the test setups (`scrape_interval: 1s`).
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the server's resident set is sampled.
pub const RSS_INTERVAL: Duration = Duration::from_secs(10);
/// A scrape that takes longer than this counts as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the scraper saw while it ran.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrapeLog {
    pub ok: u64,
    pub failed: u64,
    /// The last failure, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// (seconds since the scraper started, VmRSS KiB), every `RSS_INTERVAL`.
    pub rss_kib: Vec<(f64, u64)>,
}

/// The scraping thread; `stop` ends it and hands back its log.
pub struct Scraper {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<ScrapeLog>,
}

impl Scraper {
    pub fn start(address: SocketAddr, pid: i32) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("bench-scraper".into())
            .spawn(move || scrape_until(&stopped, address, pid))
            .map_err(|err| format!("cannot start the scraper thread: {err}"))?;
        Ok(Self { stop, thread })
    }

    pub fn stop(self) -> ScrapeLog {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_else(|_| ScrapeLog {
            last_error: Some("the scraper thread panicked".into()),
            ..ScrapeLog::default()
        })
    }
}

fn scrape_until(stop: &AtomicBool, address: SocketAddr, pid: i32) -> ScrapeLog {
    let started = Instant::now();
    let mut log = ScrapeLog::default();
    let mut next_scrape = started;
    let mut next_rss = started;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= next_scrape {
            match get(address, "/metrics") {
                Ok(_) => log.ok += 1,
                Err(err) => {
                    log.failed += 1;
                    log.last_error = Some(err);
                }
            }
            next_scrape += SCRAPE_INTERVAL;
        }
        if now >= next_rss {
            if let Some(kib) = vm_rss_kib(pid) {
                log.rss_kib
                    .push((now.duration_since(started).as_secs_f64(), kib));
            }
            next_rss += RSS_INTERVAL;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    log
}

/// One HTTP/1.0 GET (no keep-alive, no chunking); the body of a 200 answer.
pub fn get(address: SocketAddr, path: &str) -> Result<String> {
    let failed =
        |what: &str, err: std::io::Error| format!("GET {path} from {address}: {what}: {err}");
    let mut stream = TcpStream::connect_timeout(&address, SCRAPE_TIMEOUT)
        .map_err(|err| failed("connect", err))?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(SCRAPE_TIMEOUT)))
        .map_err(|err| failed("timeout", err))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .map_err(|err| failed("send", err))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|err| failed("read", err))?;
    http_body(&String::from_utf8_lossy(&response)).map_err(|err| format!("GET {path}: {err}"))
}

/// The body of an HTTP response if its status is 200.
pub fn http_body(response: &str) -> Result<String> {
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("the answer has no header/body separator")?;
    let status = head.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(body.to_string()),
        _ => Err(format!("answered `{status}`")),
    }
}

/// The counters `serve` exposes that the bench reads: events handed over and
/// events lost (ring full, probe runs skipped, records unreadable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServedCounts {
    pub events: u64,
    pub dropped: u64,
}

/// Sums `iosplit_events_total{kind=…}` and the loss counters of one scrape.
pub fn served_counts(metrics: &str) -> Result<ServedCounts> {
    let mut counts = ServedCounts::default();
    let mut saw_events = false;
    for line in metrics.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        let value = || {
            value
                .trim()
                .parse::<u64>()
                .map_err(|err| format!("serve's `{line}` has no counter value: {err}"))
        };
        match name {
            "iosplit_events_total" => {
                saw_events = true;
                counts.events += value()?;
            }
            "iosplit_events_dropped_total"
            | "iosplit_probe_missed_total"
            | "iosplit_read_failed_total" => counts.dropped += value()?,
            _ => {}
        }
    }
    match saw_events {
        true => Ok(counts),
        false => Err("serve's /metrics has no iosplit_events_total".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_200_answer_gives_its_body_and_others_an_error() {
        let ok = "HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\na 1";
        assert_eq!(http_body(ok).unwrap(), "a 1");
        let error = "HTTP/1.0 500 Internal Server Error\r\n\r\nthe exporter's state is poisoned\n";
        assert!(http_body(error).unwrap_err().contains("500"));
        assert!(http_body("HTTP/1.0 200 OK\r\n").is_err());
    }

    #[test]
    fn served_counts_sum_the_event_kinds_and_the_losses() {
        let metrics = "# HELP iosplit_events Block tracepoint events received, by kind.\n\
            # TYPE iosplit_events counter\n\
            iosplit_events_total{kind=\"queue\"} 1000\n\
            iosplit_events_total{kind=\"issue\"} 900\n\
            iosplit_incomplete_chains_total 4\n\
            iosplit_events_dropped_total 3\n\
            iosplit_probe_missed_total 2\n\
            iosplit_read_failed_total 1\n\
            iosplit_commands_total{device=\"loop0\",disk=\"loop0\",op=\"write\"} 77\n\
            # EOF\n";
        assert_eq!(
            served_counts(metrics).unwrap(),
            ServedCounts {
                events: 1900,
                dropped: 6
            }
        );
        assert!(served_counts("# EOF\n").is_err());
        assert!(served_counts("iosplit_events_total{kind=\"queue\"} lots\n").is_err());
    }

    #[test]
    fn the_scraper_counts_answers_and_failures() {
        // A one-shot server that answers the first request, then closes.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            stream
                .write_all(b"HTTP/1.0 200 OK\r\n\r\niosplit_events_total{kind=\"queue\"} 5\n")
                .unwrap();
        });
        let scraper = Scraper::start(address, i32::try_from(std::process::id()).unwrap()).unwrap();
        server.join().unwrap();
        std::thread::sleep(SCRAPE_INTERVAL + Duration::from_millis(200));
        let log = scraper.stop();
        assert_eq!(log.ok, 1, "{log:?}");
        assert!(log.failed >= 1, "{log:?}");
        assert_eq!(log.rss_kib.len(), 1, "{log:?}");
        assert!(log.rss_kib[0].1 > 0);
    }
}
