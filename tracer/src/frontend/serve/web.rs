//! `serve --web.config.file FILE`: TLS and basic auth, from the web
//! configuration file Prometheus exporters share (the Prometheus
//! exporter-toolkit's format), so one file and one habit serve both:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative paths are the file's own directory's
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: clients.crt                    # with a verifying type
//!   min_version: TLS12                             # optional: TLS12 or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$…         # bcrypt hashes (htpasswd -nBC 10)
//! ```
//!
//! A key it does not know is refused, not ignored: a security setting that
//! silently does nothing is worse than an error.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: ClientAuth,
    client_ca_file: Option<PathBuf>,
    min_version: Option<TlsVersion>,
}

/// exporter-toolkit's names; those that accept a certificate without
/// verifying it are not offered (a certificate nobody checks proves nothing).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
enum ClientAuth {
    #[default]
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum TlsVersion {
    TLS12,
    TLS13,
}

/// What the file asks for, ready to serve with.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<Arc<BasicAuth>>,
}

/// The users and their bcrypt hashes, and the credentials already verified
/// (bcrypt costs tens of milliseconds by design; a scraper sends the same
/// header every time).
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<String>>,
}

/// Credentials remembered at most: a few scrapers' worth.
const VERIFIED_MAX: usize = 64;

impl BasicAuth {
    /// Whether an `Authorization` header names a user with its password.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(header) = authorization else {
            return false;
        };
        if let Ok(verified) = self.verified.lock() {
            if verified.contains(header) {
                return true;
            }
        }
        let Some(encoded) = header.strip_prefix("Basic ") else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Ok(text) = String::from_utf8(decoded) else {
            return false;
        };
        let Some((user, password)) = text.split_once(':') else {
            return false;
        };
        let Some(hash) = self.users.get(user) else {
            return false;
        };
        let allowed = bcrypt::verify(password, hash).unwrap_or(false);
        if allowed {
            if let Ok(mut verified) = self.verified.lock() {
                if verified.len() >= VERIFIED_MAX {
                    verified.clear();
                }
                verified.insert(header.to_string());
            }
        }
        allowed
    }
}

/// Refuses a request without a user's credentials: 401 and the challenge.
pub async fn require_auth(
    State(auth): State<Arc<BasicAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    if auth.allows(authorization) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"iosplit-trace\"")],
        "unauthorized\n",
    )
        .into_response()
}

/// Reads and checks `path`: every file it names is read now, so a bad
/// certificate fails at start, not at the first scrape.
pub fn load(path: &Path) -> Result<WebConfig> {
    let bad = |what: String| Error::usage(format!("--web.config.file {}: {what}", path.display()));
    let text =
        std::fs::read_to_string(path).map_err(|err| bad(format!("cannot read it: {err}")))?;
    let file: WebConfigFile = serde_yaml::from_str(&text)
        .map_err(|err| bad(format!("{err} (keys: tls_server_config, basic_auth_users)")))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let tls = match file.tls_server_config {
        Some(tls) => Some(Arc::new(
            server_config(&tls, base).map_err(|err| bad(err.to_string()))?,
        )),
        None => None,
    };
    for (user, hash) in &file.basic_auth_users {
        // bcrypt hashes are $2a$, $2b$ or $2y$, cost, 53 characters of salt and hash.
        if !(hash.starts_with("$2") && hash.len() == 60) {
            return Err(bad(format!(
                "the password of `{user}` is not a bcrypt hash (make one with `htpasswd -nBC 10 {user}`)"
            )));
        }
    }
    let auth = (!file.basic_auth_users.is_empty()).then(|| {
        Arc::new(BasicAuth {
            users: file.basic_auth_users,
            verified: Mutex::new(HashSet::new()),
        })
    });
    if tls.is_none() && auth.is_some() {
        crate::status::status(format_args!(
            "warning: --web.config.file has basic_auth_users but no tls_server_config: passwords cross the network in the clear"
        ));
    }
    Ok(WebConfig { tls, auth })
}

/// What is wrong with the web config's TLS part: the key it is under and
/// the file that key names, and what the TLS library said.
#[derive(Debug, thiserror::Error)]
enum TlsConfigError {
    #[error("{key} {}: {reason}", path.display())]
    File {
        key: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("client_auth_type {0:?} needs client_ca_file")]
    NoClientCa(ClientAuth),
    #[error("TLS versions: {0}")]
    Versions(rustls::Error),
    #[error("cert_file and key_file: {0}")]
    CertAndKey(rustls::Error),
}

fn server_config(
    tls: &TlsServerConfig,
    base: &Path,
) -> std::result::Result<rustls::ServerConfig, TlsConfigError> {
    let file_error =
        |key: &'static str, path: &Path, reason: &dyn std::fmt::Display| TlsConfigError::File {
            key,
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
    let resolve = |file: &Path| base.join(file);
    let cert_path = resolve(&tls.cert_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect())
        .map_err(|err| file_error("cert_file", &cert_path, &err))?;
    if certs.is_empty() {
        return Err(file_error("cert_file", &cert_path, &"no certificate in it"));
    }
    let key_path = resolve(&tls.key_file);
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|err| file_error("key_file", &key_path, &err))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        Some(TlsVersion::TLS13) => &[&rustls::version::TLS13],
        Some(TlsVersion::TLS12) | None => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(TlsConfigError::Versions)?;
    let builder = match tls.client_auth_type {
        ClientAuth::NoClientCert => builder.with_no_client_auth(),
        verifying => {
            let ca = tls
                .client_ca_file
                .as_deref()
                .ok_or(TlsConfigError::NoClientCa(verifying))?;
            let ca_path = resolve(ca);
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&ca_path)
                .map_err(|err| file_error("client_ca_file", &ca_path, &err))?
            {
                let cert = cert.map_err(|err| file_error("client_ca_file", &ca_path, &err))?;
                roots
                    .add(cert)
                    .map_err(|err| file_error("client_ca_file", &ca_path, &err))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = match verifying {
                ClientAuth::VerifyClientCertIfGiven => verifier.allow_unauthenticated(),
                _ => verifier,
            }
            .build()
            .map_err(|err| file_error("client_ca_file", &ca_path, &err))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(TlsConfigError::CertAndKey)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(users: &[(&str, &str)]) -> BasicAuth {
        BasicAuth {
            users: users
                .iter()
                .map(|(user, password)| {
                    (user.to_string(), bcrypt::hash(password, 4).expect("hash"))
                })
                .collect(),
            verified: Mutex::new(HashSet::new()),
        }
    }

    fn basic(user: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    }

    #[test]
    fn only_a_user_with_its_password_passes() {
        let auth = auth(&[("prometheus", "s3cret")]);
        assert!(auth.allows(Some(&basic("prometheus", "s3cret"))));
        // Again, from the verified set.
        assert!(auth.allows(Some(&basic("prometheus", "s3cret"))));
        assert!(!auth.allows(Some(&basic("prometheus", "wrong"))));
        assert!(!auth.allows(Some(&basic("nobody", "s3cret"))));
        assert!(!auth.allows(Some("Bearer x")));
        assert!(!auth.allows(Some("Basic !!!")));
        assert!(!auth.allows(None));
    }

    #[test]
    fn unknown_keys_and_bad_hashes_are_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("iosplit-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("web.yml");
        std::fs::write(&file, "basic_auth_user:\n  a: b\n").expect("write");
        let err = load(&file).err().expect("refused").to_string();
        assert!(err.contains("unknown field `basic_auth_user`"), "{err}");
        assert!(err.contains("web.yml"), "{err}");
        std::fs::write(&file, "basic_auth_users:\n  a: plain\n").expect("write");
        let err = load(&file).err().expect("refused").to_string();
        assert!(err.contains("not a bcrypt hash"), "{err}");
        std::fs::write(
            &file,
            "tls_server_config:\n  cert_file: none.crt\n  key_file: none.key\n",
        )
        .expect("write");
        let err = load(&file).err().expect("refused").to_string();
        assert!(err.contains("none.crt"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
