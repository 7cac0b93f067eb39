//! The HTTP side: `/metrics` in the format the scraper asks for, `/healthz`,
//! basic auth when the web config asks for it, and HTTPS connections.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::{Error, Result};
use crate::frontend::prometheus::exposition::{self, Exposition};

use super::exporter::{Exporter, WORKER_STOPPED};
use super::web;

/// The routes, behind basic auth when `auth` is set.
pub fn router(exporter: Arc<Exporter>, auth: Option<Arc<web::BasicAuth>>) -> axum::Router {
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(exporter);
    match auth {
        Some(auth) => app.layer(axum::middleware::from_fn_with_state(
            auth,
            web::require_auth,
        )),
        None => app,
    }
}

/// HTTPS: each connection's handshake, then HTTP/1.1 on it. A handshake
/// that fails (plain HTTP, an unverified client certificate) closes that
/// connection only.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Arc<rustls::ServerConfig>,
    stopped: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::pin!(stopped);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of fds or the like: this connection is lost, not the server.
                Err(_) => continue,
            },
            () = &mut stopped => return Ok(()),
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Plain HTTP until `stopped`.
pub async fn serve_plain(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped)
        .await
        .map_err(|err| Error::caused("the HTTP server failed", err))
}

async fn metrics(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> Response {
    let format = Exposition::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    match exporter.scrape(false).await {
        Ok(text) => (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::VARY, "Accept"),
            ],
            match format {
                Exposition::OpenMetrics => String::from(&*text),
                Exposition::Text => exposition::to_text_format(&text),
            },
        )
            .into_response(),
        Err(reason) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response(),
    }
}

/// Healthy while the event consumer answers.
async fn healthz(State(exporter): State<Arc<Exporter>>) -> Response {
    // Off the runtime's thread: the query waits for the consumer's next drain.
    let alive = tokio::task::spawn_blocking(move || exporter.health())
        .await
        .unwrap_or_else(|_| Err(WORKER_STOPPED.to_string()));
    match alive {
        Ok(text) => (StatusCode::OK, text).into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}
