//! The one TLS listener of the manager: the result receiver
//! (`execution::receiver`) and the admission webhooks are routes on
//! it. HTTP/1.1 over rustls (aws-lc-rs), bodies read whole into memory up to
//! a bound the caller sets: a request that declares or sends more is refused
//! with 413 before it is read whole.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A route's handler: the whole request in, the whole response out.
pub type Handler = Arc<
    dyn Fn(Request<Bytes>) -> Pin<Box<dyn Future<Output = Response<Bytes>> + Send>> + Send + Sync,
>;

/// The longest a client may take for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a client may take to send its body (8 MiB on a slow link).
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Path prefixes and their handlers; the longest matching prefix wins.
#[derive(Clone, Default)]
pub struct Routes {
    routes: Vec<(String, Handler)>,
}

impl Routes {
    /// No routes: every request is answered 404.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `handler` for every path that starts with `prefix`.
    pub fn route(mut self, prefix: &str, handler: Handler) -> Self {
        self.routes.push((prefix.to_string(), handler));
        self
    }

    fn find(&self, path: &str) -> Option<&Handler> {
        self.routes
            .iter()
            .filter(|(prefix, _)| path.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, h)| h)
    }
}

/// The server's certificate and the CA that clients trust.
#[derive(Clone)]
pub struct Tls {
    /// The rustls configuration (HTTP/1.1 only).
    pub config: Arc<rustls::ServerConfig>,
    /// The CA certificate (PEM) clients trust: the receiver CA ConfigMap's
    /// content.
    pub ca_pem: String,
    /// The serving certificate every handshake takes: swapped in place by
    /// [`Tls::reload_from`].
    current: Arc<Current>,
    /// The CA as last read: [`Tls::reload_from`] follows its file too.
    pub ca: Arc<std::sync::RwLock<String>>,
}

/// The certificate new handshakes are served; a handshake under way keeps
/// the one it took.
#[derive(Debug)]
struct Current(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl rustls::server::ResolvesServerCert for Current {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A file holds no usable PEM item of the kind needed.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: String,
        /// What is missing or wrong (never the content).
        what: &'static str,
    },
    /// A certificate could not be generated.
    #[error("generating the {what} certificate: {source}")]
    Generate {
        /// `CA` or `serving`.
        what: &'static str,
        /// Why.
        source: rcgen::Error,
    },
    /// rustls refused the certificate and key.
    #[error("the certificate and key: {0}")]
    Rustls(#[from] rustls::Error),
}

impl Tls {
    /// A fresh CA and a leaf for these hosts (IP addresses or DNS names), in
    /// memory.
    pub fn self_signed(hosts: &[&str]) -> anyhow::Result<Tls> {
        let dir = tempfile::tempdir()?;
        let (cert, key, ca) = write_self_signed(dir.path(), hosts)?;
        Tls::from_files(&cert, &key, &ca)
    }

    /// A self-signed CA and leaf kept in `dir` (`tls.crt`, `tls.key`,
    /// `ca.crt`): made once, then read again, so Pods dispatched before a
    /// restart still trust the manager after it.
    pub fn self_signed_in(dir: &Path, hosts: &[&str]) -> anyhow::Result<Tls> {
        let (cert, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
        if !(cert.exists() && key.exists() && ca.exists()) {
            std::fs::create_dir_all(dir)?;
            write_self_signed(dir, hosts)?;
        }
        Tls::from_files(&cert, &key, &ca)
    }

    /// A PEM certificate chain, key and CA from files.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> anyhow::Result<Tls> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.display().to_string(),
                source,
            })
        };
        let pem = |path: &Path, what| TlsError::Pem {
            path: path.display().to_string(),
            what,
        };
        let chain = CertificateDer::pem_slice_iter(&read(cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| pem(cert, "not a PEM certificate chain"))?;
        if chain.is_empty() {
            return Err(pem(cert, "no PEM certificate").into());
        }
        let private = PrivateKeyDer::from_pem_slice(&read(key)?)
            .map_err(|_| pem(key, "no PEM private key"))?;
        let ca_bytes = read(ca)?;
        let ca_certs = CertificateDer::pem_slice_iter(&ca_bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| pem(ca, "not a PEM certificate"))?;
        if ca_certs.is_empty() {
            return Err(pem(ca, "no PEM certificate").into());
        }
        let ca_pem = String::from_utf8(ca_bytes).map_err(|_| pem(ca, "not UTF-8"))?;
        let current = Arc::new(Current(std::sync::RwLock::new(certified(chain, private)?)));
        Ok(Tls {
            config: server_config(current.clone())?,
            ca: Arc::new(std::sync::RwLock::new(ca_pem.clone())),
            ca_pem,
            current,
        })
    }

    /// Reads the certificate chain and key again every `every` and serves
    /// them from the next handshake on when they changed and are a valid
    /// pair: a rotated Secret is picked up without a restart, and a pair
    /// caught half-written is tried again at the next tick. The CA file is
    /// followed too ([`Tls::ca`]), so Jobs dispatched after a rotation trust
    /// the new CA. Runs until the process ends.
    pub async fn reload_from(
        self,
        cert: std::path::PathBuf,
        key: std::path::PathBuf,
        ca: std::path::PathBuf,
        every: Duration,
    ) {
        let read = || Some((std::fs::read(&cert).ok()?, std::fs::read(&key).ok()?));
        let mut last = read();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Ok(pem) = std::fs::read_to_string(&ca)
                && pem.contains("-----BEGIN CERTIFICATE-----")
            {
                let mut current = self.ca.write().unwrap_or_else(|e| e.into_inner());
                if *current != pem {
                    tracing::info!(ca = %ca.display(), "receiver CA reloaded");
                    *current = pem;
                }
            }
            let now = read();
            if now.is_none() || now == last {
                continue;
            }
            let Some((chain, private)) = &now else {
                continue;
            };
            let parsed = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .zip(PrivateKeyDer::from_pem_slice(private).ok())
                .and_then(|(chain, private)| certified(chain, private).ok());
            match parsed {
                Some(next) => {
                    *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = next;
                    tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                    last = now;
                }
                None => {
                    tracing::debug!(cert = %cert.display(), "certificate files changed but are not a pair yet")
                }
            }
        }
    }
}

/// A chain and its key, checked to belong together.
fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signing = provider.key_provider.load_private_key(key)?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    certified.keys_match()?;
    Ok(Arc::new(certified))
}

/// Generates a CA and a serving leaf for `hosts` and writes them into `dir`
/// (the key 0600); returns the paths of the chain, the key and the CA.
fn write_self_signed(
    dir: &Path,
    hosts: &[&str],
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let generate = |what| move |source| TlsError::Generate { what, source };
    let ca_key = KeyPair::generate().map_err(generate("CA"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(generate("CA"))?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ptah-operator receiver CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(generate("CA"))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate().map_err(generate("serving"))?;
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut leaf_params = CertificateParams::new(names).map_err(generate("serving"))?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "ptah-operator");
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params
        .signed_by(&leaf_key, &issuer)
        .map_err(generate("serving"))?;

    let (cert, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    std::fs::write(&cert, leaf.pem() + &ca_cert.pem())?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key)?
        .write_all(leaf_key.serialize_pem().as_bytes())?;
    std::fs::write(&ca, ca_cert.pem())?;
    Ok((cert, key, ca))
}

fn server_config(current: Arc<Current>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves until the listener fails; bodies above `max_body_bytes` are
/// refused with 413 before they are read whole.
pub async fn serve(
    listener: TcpListener,
    tls: &Tls,
    routes: Routes,
    max_body_bytes: usize,
) -> io::Result<()> {
    serve_with(
        listener,
        Some(TlsAcceptor::from(tls.config.clone())),
        routes,
        max_body_bytes,
    )
    .await
}

/// `200 ok` to any request: the liveness and readiness probes' answer while
/// the process serves at all.
pub fn healthz() -> Handler {
    Arc::new(|_req| Box::pin(async { Response::new(Bytes::from_static(b"ok\n")) }))
}

/// Serves plain HTTP (the metrics endpoint, which holds nothing secret).
pub async fn serve_plain(listener: TcpListener, routes: Routes) -> io::Result<()> {
    serve_with(listener, None, routes, 64 << 10).await
}

async fn serve_with(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    routes: Routes,
    max_body_bytes: usize,
) -> io::Result<()> {
    let routes = Arc::new(routes);
    loop {
        let (tcp, _peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // One client's trouble, not the listener's.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let acceptor = acceptor.clone();
        let routes = routes.clone();
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    connection(stream, routes, max_body_bytes).await;
                }
                None => connection(tcp, routes, max_body_bytes).await,
            }
        });
    }
}

/// One client's connection; a client that goes away mid-request ends only
/// it.
async fn connection<S>(stream: S, routes: Arc<Routes>, max_body_bytes: usize)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(answer(&routes, req, max_body_bytes).await) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(routes: &Routes, req: Request<Incoming>, max: usize) -> Response<Full<Bytes>> {
    let Some(handler) = routes.find(req.uri().path()).cloned() else {
        return plain(StatusCode::NOT_FOUND, "no such path");
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {max} bytes"),
        );
    }
    let (parts, body) = req.into_parts();
    let collected = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, max).collect()).await;
    let bytes = match collected {
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "the body was not sent in time"),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is larger than {max} bytes"),
            );
        }
        Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "the body could not be read"),
        Ok(Ok(c)) => c.to_bytes(),
    };
    let response = handler(Request::from_parts(parts, bytes)).await;
    response.map(Full::new)
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{message}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &'static str) -> Handler {
        Arc::new(move |_req| {
            Box::pin(async move { Response::new(Bytes::from_static(body.as_bytes())) })
        })
    }

    #[test]
    fn the_longest_prefix_wins() {
        let routes = Routes::new()
            .route("/v1", ok("v1"))
            .route("/v1/results", ok("results"));
        assert!(routes.find("/v1/results").is_some());
        assert!(routes.find("/v2").is_none());
        let chosen = routes.find("/v1/results/x").unwrap();
        let other = routes.find("/v1/other").unwrap();
        assert!(!Arc::ptr_eq(chosen, other));
    }

    #[test]
    fn a_self_signed_pair_names_its_hosts() {
        let tls = Tls::self_signed(&["127.0.0.1", "ptah-operator.ptah-system.svc"]).unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(tls.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_chain_key_and_ca_are_read_from_files() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        let tls = Tls::from_files(&c, &k, &c).unwrap();
        assert_eq!(tls.ca_pem, cert.pem());
        let e = Tls::from_files(&c, &c, &c).err().unwrap().to_string();
        assert!(e.contains("tls.crt: no PEM private key"), "{e}");
    }

    #[test]
    fn files_without_pem_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem").unwrap();
        let e = Tls::from_files(&junk, &junk, &junk)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("junk.pem"), "{e}");
        assert!(!e.contains("not pem"), "{e}");
    }

    fn served(tls: &Tls) -> Vec<u8> {
        tls.current.0.read().unwrap().cert[0].as_ref().to_vec()
    }

    #[tokio::test]
    async fn a_rotated_pair_is_served_from_the_next_handshake_and_a_mismatched_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Tls::self_signed_in(dir.path(), &["127.0.0.1"]).unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let first = served(&tls);
        let reload = tokio::spawn(tls.clone().reload_from(
            cert.clone(),
            key.clone(),
            dir.path().join("ca.crt"),
            Duration::from_millis(20),
        ));
        let wait_for = |what: &'static str, f: Box<dyn Fn() -> bool>| async move {
            for _ in 0..200 {
                if f() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{what}");
        };
        // Another pair, as a replaced Secret holds it.
        let other = tempfile::tempdir().unwrap();
        write_self_signed(other.path(), &["127.0.0.1"]).unwrap();
        let new_cert = std::fs::read(other.path().join("tls.crt")).unwrap();
        let new_key = std::fs::read(other.path().join("tls.key")).unwrap();
        // Half-written: the new chain with the old key is no pair.
        std::fs::write(&cert, &new_cert).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(served(&tls), first, "a chain without its key is not served");
        std::fs::write(&key, &new_key).unwrap();
        let t = tls.clone();
        wait_for(
            "the new pair is served",
            Box::new(move || served(&t) != first),
        )
        .await;
        let pem = CertificateDer::pem_slice_iter(&new_cert)
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(served(&tls), pem.as_ref().to_vec());
        // The CA file is followed as well.
        let new_ca = std::fs::read_to_string(other.path().join("ca.crt")).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &new_ca).unwrap();
        let t = tls.clone();
        let want = new_ca.clone();
        wait_for(
            "the new CA is read",
            Box::new(move || *t.ca.read().unwrap() == want),
        )
        .await;
        reload.abort();
    }
}
