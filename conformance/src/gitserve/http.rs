//! Smart HTTP for the harness: every request must carry the one basic-auth
//! credential, then runs `git http-backend` as a CGI program with the request
//! body streamed into it and its response (Status:, headers, body) streamed
//! back. The `git-http-server` binary is a thin main around [`serve`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::{Context, bail};
use base64::Engine;
use bytes::Bytes;
use futures::TryStreamExt;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

type Body = BoxBody<Bytes, std::io::Error>;

/// Largest CGI header block accepted from `git http-backend`.
const MAX_CGI_HEADERS: usize = 64 * 1024;

/// What the server needs to answer a request.
#[derive(Debug, Clone)]
pub struct Config {
    /// `GIT_PROJECT_ROOT`: the directory of bare repositories.
    pub project_root: PathBuf,
    pub user: String,
    pub password: String,
    pub realm: String,
    /// The `git` program (`git http-backend` is one of its commands).
    pub git: PathBuf,
}

/// Reads a credentials file: one line `user:password`.
pub fn read_credentials(path: &Path) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the credentials file {}", path.display()))?;
    let line = text.lines().next().unwrap_or_default();
    match line.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => {
            Ok((user.to_string(), password.to_string()))
        }
        _ => bail!(
            "credentials file {} must hold one line `user:password` with both non-empty",
            path.display()
        ),
    }
}

/// Accepts connections until the listener fails; one task per connection.
pub async fn serve(listener: TcpListener, config: Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    loop {
        let (stream, peer) = listener.accept().await.context("accepting a connection")?;
        let config = config.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let config = config.clone();
                async move { Ok::<_, Infallible>(handle(req, &config, peer).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

async fn handle(req: Request<Incoming>, config: &Config, peer: SocketAddr) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let response = match authorize(&req, config) {
        Err(reason) => {
            tracing::info!(%peer, %method, %path, reason, "refused: 401");
            unauthorized(&config.realm)
        }
        Ok(user) => match run_backend(req, config, &user, peer).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(%peer, %method, %path, error = format!("{e:#}"), "http-backend failed");
                text(
                    StatusCode::BAD_GATEWAY,
                    format!("git http-backend failed: {e:#}\n"),
                )
            }
        },
    };
    tracing::info!(%peer, %method, %path, status = response.status().as_u16(), "served");
    response
}

/// The user of a request whose basic-auth credential is the configured one.
fn authorize(req: &Request<Incoming>, config: &Config) -> Result<String, &'static str> {
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .ok_or("no Authorization header")?;
    let value = header.to_str().map_err(|_| "Authorization is not ASCII")?;
    let (scheme, encoded) = value.split_once(' ').ok_or("Authorization has no scheme")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("Authorization is not Basic");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| "Basic credential is not base64")?;
    let expected = format!("{}:{}", config.user, config.password);
    if !constant_time_eq(&decoded, expected.as_bytes()) {
        return Err("wrong user or password");
    }
    Ok(config.user.clone())
}

/// Compares without an early exit, so timing does not reveal the prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unauthorized(realm: &str) -> Response<Body> {
    let mut response = text(StatusCode::UNAUTHORIZED, "authentication required\n".into());
    let challenge = format!("Basic realm=\"{}\"", realm.replace(['"', '\\'], ""));
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(WWW_AUTHENTICATE, value);
    }
    response
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Runs `git http-backend` for one request (RFC 3875 variables plus git's own).
async fn run_backend(
    req: Request<Incoming>,
    config: &Config,
    user: &str,
    peer: SocketAddr,
) -> anyhow::Result<Response<Body>> {
    let (parts, body) = req.into_parts();
    let path_info = percent_decode(parts.uri.path()).context("request path")?;
    let mut cmd = Command::new(&config.git);
    cmd.arg("http-backend")
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &config.project_root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("SERVER_SOFTWARE", "ptah-git-http-server")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", path_info)
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("REMOTE_ADDR", peer.ip().to_string())
        .env("AUTH_TYPE", "Basic")
        // With REMOTE_USER set, http-backend also allows receive-pack (push)
        // unless a repository sets http.receivepack=false.
        .env("REMOTE_USER", user);
    let header = |name: &str| -> anyhow::Result<Option<&str>> {
        parts
            .headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .with_context(|| format!("header {name} is not visible ASCII"))
            })
            .transpose()
    };
    for (name, var) in [
        (CONTENT_TYPE.as_str(), "CONTENT_TYPE"),
        (CONTENT_LENGTH.as_str(), "CONTENT_LENGTH"),
        // git gzips large request bodies; http-backend inflates them.
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ] {
        if let Some(value) = header(name)? {
            cmd.env(var, value);
        }
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {} http-backend", config.git.display()))?;
    let stdin = child.stdin.take().context("http-backend has no stdin")?;
    let stdout = child.stdout.take().context("http-backend has no stdout")?;

    // The body goes in while the response comes out, so neither side can
    // block the other on a full pipe.
    tokio::spawn(async move {
        if let Err(e) = copy_body(body, stdin).await {
            tracing::warn!(error = %e, "request body not fully passed to http-backend");
        }
    });
    let mut reader = BufReader::new(stdout);
    let (status, headers) = read_cgi_headers(&mut reader).await?;
    let mut response = Response::new(
        StreamBody::new(tokio_util::io::ReaderStream::new(reader).map_ok(Frame::data)).boxed(),
    );
    *response.status_mut() = status;
    for (name, value) in headers {
        response.headers_mut().append(name, value);
    }
    tokio::spawn(reap(child));
    Ok(response)
}

async fn copy_body(
    mut body: Incoming,
    mut stdin: tokio::process::ChildStdin,
) -> anyhow::Result<()> {
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the request body")?;
        if let Ok(data) = frame.into_data() {
            stdin
                .write_all(&data)
                .await
                .context("writing to http-backend")?;
        }
    }
    stdin.shutdown().await?;
    Ok(())
}

/// Waits for http-backend so it leaves no zombie, and logs a failure.
async fn reap(mut child: Child) {
    match child.wait().await {
        Ok(status) if !status.success() => tracing::warn!(%status, "http-backend exited"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "waiting for http-backend"),
    }
}

/// Reads the CGI header block: `Status:` sets the status (200 without it),
/// every other line is a response header.
async fn read_cgi_headers<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> anyhow::Result<(StatusCode, Vec<(HeaderName, HeaderValue)>)> {
    let mut status = StatusCode::OK;
    let mut headers = Vec::new();
    let mut total = 0usize;
    loop {
        let mut line = Vec::new();
        let n = reader.read_until(b'\n', &mut line).await?;
        if n == 0 {
            bail!("http-backend ended before the end of its headers");
        }
        total += n;
        if total > MAX_CGI_HEADERS {
            bail!("http-backend sent more than {MAX_CGI_HEADERS} bytes of headers");
        }
        let line = line
            .strip_suffix(b"\n")
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .unwrap_or(&line);
        if line.is_empty() {
            return Ok((status, headers));
        }
        let line = std::str::from_utf8(line).context("http-backend header is not UTF-8")?;
        let (name, value) = line
            .split_once(':')
            .with_context(|| format!("http-backend header without `:`: {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or_default();
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .with_context(|| format!("http-backend sent a bad Status: {value:?}"))?;
        } else {
            headers.push((
                HeaderName::from_bytes(name.trim().as_bytes())
                    .with_context(|| format!("bad header name {name:?}"))?,
                HeaderValue::from_str(value)
                    .with_context(|| format!("bad value of header {name}"))?,
            ));
        }
    }
}

/// Decodes `%XX` escapes of a request path (CGI's PATH_INFO is decoded).
fn percent_decode(path: &str) -> anyhow::Result<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .with_context(|| format!("bad percent escape in {path:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        bail!("path {path:?} holds a NUL byte");
    }
    String::from_utf8(out).with_context(|| format!("path {path:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cgi_headers_give_status_and_headers_and_leave_the_body() {
        let raw: &[u8] = b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nbody";
        let mut reader = BufReader::new(raw);
        let (status, headers) = read_cgi_headers(&mut reader).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers[0].0, CONTENT_TYPE);
        let mut rest = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut reader, &mut rest)
            .await
            .unwrap();
        assert_eq!(rest, "body");
    }

    #[tokio::test]
    async fn cgi_headers_refuse_a_truncated_or_bad_block() {
        let mut r = BufReader::new(&b"Content-Type: x\n"[..]);
        assert!(read_cgi_headers(&mut r).await.is_err());
        let mut r = BufReader::new(&b"Status: nope\n\n"[..]);
        assert!(read_cgi_headers(&mut r).await.is_err());
    }

    #[test]
    fn paths_are_percent_decoded_and_bad_escapes_refused() {
        assert_eq!(percent_decode("/a%20b.git/info").unwrap(), "/a b.git/info");
        assert!(percent_decode("/a%2").is_err());
        assert!(percent_decode("/a%00").is_err());
    }

    #[test]
    fn credentials_need_both_user_and_password() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c");
        std::fs::write(&f, "u:p:q\n").unwrap();
        assert_eq!(read_credentials(&f).unwrap(), ("u".into(), "p:q".into()));
        std::fs::write(&f, ":p\n").unwrap();
        assert!(read_credentials(&f).is_err());
        assert!(constant_time_eq(b"ab", b"ab"));
        assert!(!constant_time_eq(b"ab", b"ac"));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
