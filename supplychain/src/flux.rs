//! Flux sources: the artifact a Flux source-controller object (GitRepository,
//! OCIRepository, Bucket) names in `status.artifact`, read into the file set a
//! ConfigMap snapshot holds.
//!
//! # Fetch
//!
//! [`fetch`] GETs `status.artifact.url` and requires the bytes to hash to
//! `status.artifact.digest`. The status is what was read and reviewed; the
//! server may have replaced the file since (a new revision), so the digest,
//! not the URL, decides what the bytes are. The body is read chunk by chunk
//! and refused past a bound, whatever `Content-Length` says. Messages name the
//! URL without userinfo or query, which may carry credentials.
//!
//! # Files
//!
//! [`files_at`] reads the gzip tarball in memory (nothing is unpacked to disk)
//! and takes the regular files directly under one path, each named as its
//! file name: the rule of a snapshot's keys, so the same files give the same
//! content digest as a ConfigMap or Git source. Source-controller writes
//! entry names with or without a leading `./`; both are read alike.
//!
//! A snapshot is one flat directory, so a subdirectory under the path is
//! refused rather than dropped: a migration left out silently is worse than a
//! source refused. Symlinks, hard links and special files under the path are
//! refused too (only bytes are snapshotted, never a reference to other bytes).
//! Entries outside the path are ignored, except names no archive writer
//! produces (absolute, `..`), which are refused wherever they are.
//!
//! Bounds: the archive's decompressed bytes ([`MAX_ARCHIVE_BYTES`], counted
//! through the decoder, so a gzip bomb stops there), the files' count and
//! total size ([`Limits`]), and the snapshot's size
//! ([`MAX_CONFIG_MAP_BYTES`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Read};

use flate2::read::GzDecoder;
use tar::EntryType;

use crate::manifest::{self, Limits, Manifest, ManifestError};
use crate::snapshot::{self, MAX_CONFIG_MAP_BYTES, SnapshotError};

/// Most bytes an artifact may decompress to: well above any directory that
/// fits a snapshot (1 MiB), far below what a gzip bomb would expand to.
pub const MAX_ARCHIVE_BYTES: u64 = 64 * 1024 * 1024;

/// The artifact a Flux object's status names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// `status.artifact.url`: source-controller's HTTP server.
    pub url: String,
    /// `status.artifact.digest`: `sha256:<hex>` of the tarball's bytes.
    pub digest: String,
    /// `status.artifact.revision`: what Flux says the bytes are (evidence).
    pub revision: String,
}

/// The files at the selected path, checked and ready to snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    /// The files, by name (= snapshot key).
    pub files: BTreeMap<String, Vec<u8>>,
    /// The manifest of the files.
    pub manifest: Manifest,
    /// `sha256:<hex>` of the manifest bytes.
    pub content_digest: String,
}

/// Why an artifact gives no files.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum FluxError {
    /// The status's digest is not one this module can check.
    #[error(
        "the Flux object's status names artifact digest {digest:?}: expected \"sha256:\" and 64 lowercase hexadecimal digits"
    )]
    InvalidDigest { digest: String },
    /// The status's URL is not an http(s) URL (shown without credentials).
    #[error("the artifact URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// No connection to the server.
    #[error("the artifact server {host} could not be reached: {reason}")]
    Unreachable { host: String, reason: String },
    /// The request or the body failed after connecting (timeout, cut).
    #[error("GET {url}: {reason}")]
    Transfer { url: String, reason: String },
    /// The server answered, but not with the artifact.
    #[error("GET {url}: the server answered {status}")]
    Status { url: String, status: String },
    /// The body is past the bound (`size` when the server declared it).
    #[error(
        "GET {url}: the artifact is larger than the bound of {max} bytes{}",
        .size.map(|s| format!(" ({s} bytes declared)")).unwrap_or_default()
    )]
    TooLarge {
        url: String,
        size: Option<u64>,
        max: u64,
    },
    /// The bytes are not the ones the status names.
    #[error(
        "the artifact's SHA-256 is {found} but the Flux object's status names {expected}; source-controller replaced it or it was altered"
    )]
    DigestMismatch { expected: String, found: String },
    /// The selected path is absolute, has `..`, or breaks the path rules.
    #[error("path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// The bytes do not decompress or do not untar.
    #[error("the artifact is not a gzip tarball: {reason}")]
    NotATarball { reason: String },
    /// The archive decompresses past [`MAX_ARCHIVE_BYTES`].
    #[error("the artifact decompresses to more than {max} bytes (refused as a gzip bomb)")]
    ArchiveTooLarge { max: u64 },
    /// Nothing in the archive is at the path.
    #[error("path {path:?} is not in the artifact")]
    PathNotFound { path: String },
    /// The path is a directory without files.
    #[error("no files at path {path:?} in the artifact")]
    NoFiles { path: String },
    /// An entry the rules refuse (a link, a special file, a name no archive
    /// writer produces, a name twice), named as the archive spells it.
    #[error("entry {entry:?} of the artifact: {reason}")]
    Entry { entry: String, reason: &'static str },
    /// A directory under the path.
    #[error(
        "a subdirectory {dir:?} at path {path:?}: the source must be one flat directory, as a snapshot is"
    )]
    Subdirectory { path: String, dir: String },
    /// A file whose name cannot be a snapshot key.
    #[error("file {file:?} at path {path:?}: {reason}")]
    InvalidName {
        path: String,
        file: String,
        reason: String,
    },
    /// The files break a bound of the limits.
    #[error("the files at path {path:?}: {source}")]
    Files {
        path: String,
        #[source]
        source: ManifestError,
    },
    /// The files and the manifest do not fit in one ConfigMap.
    #[error(
        "the files at path {path:?} would make a snapshot of {size} bytes of keys and values, more than a ConfigMap's {MAX_CONFIG_MAP_BYTES}"
    )]
    TooLargeForSnapshot { path: String, size: usize },
}

/// GET the tarball (bounded to `max_bytes`, streamed: reading stops past the
/// bound), and check its SHA-256 against `artifact.digest`. Timeouts,
/// redirects and proxies are the client's: the caller knows its cluster.
pub async fn fetch(
    client: &reqwest::Client,
    artifact: &Artifact,
    max_bytes: u64,
) -> Result<Vec<u8>, FluxError> {
    // Before any request: a digest that cannot match would waste the fetch.
    check_digest(&artifact.digest)?;
    let url = reqwest::Url::parse(&artifact.url).map_err(|e| FluxError::InvalidUrl {
        url: shown_unparsed(&artifact.url),
        reason: e.to_string(),
    })?;
    let shown = shown_url(&url);
    let host = match (url.scheme(), url.host_str()) {
        ("http" | "https", Some(host)) => match url.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        },
        _ => {
            return Err(FluxError::InvalidUrl {
                url: shown,
                reason: "only http and https URLs with a host are fetched".into(),
            });
        }
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| request_error(e, &host, &shown))?;
    let status = response.status();
    if !status.is_success() {
        return Err(FluxError::Status {
            url: shown,
            status: status.to_string(),
        });
    }
    let too_large = |size| FluxError::TooLarge {
        url: shown.clone(),
        size,
        max: max_bytes,
    };
    if let Some(size) = response.content_length()
        && size > max_bytes
    {
        return Err(too_large(Some(size)));
    }
    let mut body = Vec::new();
    // The declared length is not trusted: count what arrives.
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| request_error(e, &host, &shown))?
    {
        if (body.len() as u64).saturating_add(chunk.len() as u64) > max_bytes {
            return Err(too_large(None));
        }
        body.extend_from_slice(&chunk);
    }
    let found = crate::sha256_digest(&body);
    if found != artifact.digest {
        return Err(FluxError::DigestMismatch {
            expected: artifact.digest.clone(),
            found,
        });
    }
    Ok(body)
}

/// Refuses a digest other than `sha256:` and 64 lowercase hex digits, the
/// only form source-controller writes and [`crate::sha256_digest`] gives.
fn check_digest(digest: &str) -> Result<(), FluxError> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Ok(())
        }
        _ => Err(FluxError::InvalidDigest {
            digest: digest.to_string(),
        }),
    }
}

/// The URL as messages show it: no userinfo, query or fragment (tokens live
/// there).
fn shown_url(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    // Both fail only for URLs that cannot hold userinfo: nothing to remove.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// A URL that does not parse, with what would be userinfo, query or
/// fragment cut off all the same.
fn shown_unparsed(text: &str) -> String {
    let text = text.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    }
}

/// A failed request: no connection names the host, anything later the URL.
fn request_error(error: reqwest::Error, host: &str, shown: &str) -> FluxError {
    let connect = error.is_connect();
    // reqwest's own text would name the full URL, credentials included.
    let error = error.without_url();
    let mut reason = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(e) = cause {
        let text = e.to_string();
        if !reason.contains(&text) {
            reason.push_str(": ");
            reason.push_str(&text);
        }
        cause = e.source();
    }
    if connect {
        FluxError::Unreachable {
            host: host.to_string(),
            reason,
        }
    } else {
        FluxError::Transfer {
            url: shown.to_string(),
            reason,
        }
    }
}

/// Gunzip and untar `tarball`, and take the regular files directly under
/// `path` (`None`, `""` or `"."`: the archive's root; `./` prefixes accepted),
/// checked as snapshot keys. A `path` naming a regular file takes that file.
pub fn files_at(tarball: &[u8], path: Option<&str>, limits: &Limits) -> Result<Files, FluxError> {
    files_within(tarball, path, limits, MAX_ARCHIVE_BYTES)
}

/// [`files_at`] under any archive bound (tests use small ones).
fn files_within(
    tarball: &[u8],
    path: Option<&str>,
    limits: &Limits,
    max_archive: u64,
) -> Result<Files, FluxError> {
    let (shown, prefix) = selected(path)?;
    // GzDecoder reads nothing from empty input and calls it an empty stream.
    if !tarball.starts_with(&[0x1f, 0x8b]) {
        return Err(FluxError::NotATarball {
            reason: "no gzip header".into(),
        });
    }
    let exceeded = Cell::new(false);
    let broken = |e: io::Error| {
        if exceeded.get() {
            FluxError::ArchiveTooLarge { max: max_archive }
        } else {
            FluxError::NotATarball {
                reason: e.to_string(),
            }
        }
    };
    let mut archive = tar::Archive::new(Bounded {
        inner: GzDecoder::new(tarball),
        left: max_archive,
        exceeded: &exceeded,
    });
    let mut taken = Taken {
        path: &shown,
        limits,
        // The root is always there, even in an empty archive.
        present: prefix.is_empty(),
        at_path: None,
        files: BTreeMap::new(),
        total: 0,
    };
    for entry in archive.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        let kind = entry.header().entry_type();
        // Metadata for the archive (`git archive` writes the commit there).
        if kind.is_pax_global_extensions() {
            continue;
        }
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let refuse = |reason| FluxError::Entry {
            entry: name.clone(),
            reason,
        };
        let components = components(&raw).map_err(refuse)?;
        let inside = components.len() >= prefix.len()
            && components
                .iter()
                .zip(&prefix)
                .all(|(c, p)| *c == p.as_bytes());
        if !inside {
            continue; // elsewhere, or a directory above the path
        }
        taken.present = true;
        let file_kind = matches!(kind, EntryType::Regular | EntryType::Continuous);
        match &components[prefix.len()..] {
            // The path itself.
            [] => match (kind, prefix.last()) {
                (EntryType::Directory, _) => taken.at(AtPath::Directory, &name)?,
                (_, Some(file)) if file_kind => {
                    taken.at(AtPath::File, &name)?;
                    taken.take(&mut entry, file.as_bytes(), &name, &broken)?;
                }
                (_, None) => return Err(refuse("names the archive's root but is not a directory")),
                _ => return Err(refuse(not_a_file(kind))),
            },
            // Directly under it.
            [file] => {
                taken.at(AtPath::Directory, &name)?;
                if kind == EntryType::Directory {
                    return Err(subdirectory(&shown, &prefix, file));
                }
                if !file_kind {
                    return Err(refuse(not_a_file(kind)));
                }
                taken.take(&mut entry, file, &name, &broken)?;
            }
            // Deeper: whatever it is, its directory is not flat.
            [dir, ..] => return Err(subdirectory(&shown, &prefix, dir)),
        }
    }
    // Read to the end of the gzip stream, so its CRC and length are checked
    // (the tar's end marker may come before), within the same bound.
    io::copy(&mut archive.into_inner(), &mut io::sink()).map_err(broken)?;
    taken.finish()
}

/// The path to select: as messages show it, and its components (none for the
/// root).
fn selected(path: Option<&str>) -> Result<(String, Vec<String>), FluxError> {
    let given = path.unwrap_or_default();
    let shown = if given.is_empty() { "." } else { given }.to_string();
    if !given.starts_with('/') && given.split('/').all(|c| c.is_empty() || c == ".") {
        return Ok((shown, Vec::new()));
    }
    let normal = manifest::normalize_path(given).map_err(|e| FluxError::InvalidPath {
        path: shown.clone(),
        reason: e.reason,
    })?;
    let components = normal.split('/').map(str::to_string).collect();
    Ok((shown, components))
}

/// An entry name's components, `.` and empty ones dropped (`./a//b` is
/// `a/b`); absolute names and `..` are refused, never resolved.
fn components(raw: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if raw.starts_with(b"/") {
        return Err("has an absolute name");
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("has a '..' component, leading out of the archive"),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn not_a_file(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Symlink => "is a symbolic link; only regular files are taken",
        EntryType::Link => "is a hard link; only regular files are taken",
        _ => {
            "is not a regular file (a device, FIFO or other special entry); only regular files are taken"
        }
    }
}

fn subdirectory(shown: &str, prefix: &[String], dir: &[u8]) -> FluxError {
    let mut full = prefix.join("/");
    if !full.is_empty() {
        full.push('/');
    }
    full.push_str(&String::from_utf8_lossy(dir));
    FluxError::Subdirectory {
        path: shown.to_string(),
        dir: full,
    }
}

/// What the path is in the archive, once an entry says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AtPath {
    Directory,
    File,
}

/// The files taken so far, and what the archive said of the path.
struct Taken<'a> {
    path: &'a str,
    limits: &'a Limits,
    present: bool,
    at_path: Option<AtPath>,
    files: BTreeMap<String, Vec<u8>>,
    total: u64,
}

impl Taken<'_> {
    /// Records what `entry` says the path is: a file twice, or a file and a
    /// directory, is an archive that unpacks differently by tool.
    fn at(&mut self, seen: AtPath, entry: &str) -> Result<(), FluxError> {
        match (self.at_path, seen) {
            (None, _) | (Some(AtPath::Directory), AtPath::Directory) => {
                self.at_path = Some(seen);
                Ok(())
            }
            (Some(AtPath::File), AtPath::File) => Err(FluxError::Entry {
                entry: entry.to_string(),
                reason: "appears twice in the archive",
            }),
            _ => Err(FluxError::Entry {
                entry: entry.to_string(),
                reason: "makes the path both a file and a directory",
            }),
        }
    }

    /// Reads one regular file into the set, within the limits.
    fn take<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        file: &[u8],
        name: &str,
        broken: &impl Fn(io::Error) -> FluxError,
    ) -> Result<(), FluxError> {
        let invalid = |file: String, reason: String| FluxError::InvalidName {
            path: self.path.to_string(),
            file,
            reason,
        };
        let file = std::str::from_utf8(file).map_err(|_| {
            invalid(
                String::from_utf8_lossy(file).into_owned(),
                "is not UTF-8".into(),
            )
        })?;
        snapshot::check_key(file).map_err(|e| {
            let reason = match e {
                SnapshotError::InvalidKey { reason, .. } => reason.to_string(),
                other => other.to_string(),
            };
            invalid(file.to_string(), reason)
        })?;
        if self.files.contains_key(file) {
            return Err(FluxError::Entry {
                entry: name.to_string(),
                reason: "appears twice in the archive",
            });
        }
        let bound = |source| FluxError::Files {
            path: self.path.to_string(),
            source,
        };
        if self.files.len() >= self.limits.max_files {
            return Err(bound(ManifestError::TooManyFiles {
                path: file.to_string(),
                max: self.limits.max_files,
            }));
        }
        // One byte past the budget is enough to refuse, whatever the header
        // claims.
        let budget = self.limits.max_total_bytes.saturating_sub(self.total);
        let mut bytes = Vec::new();
        entry
            .by_ref()
            .take(budget.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(broken)?;
        let len = bytes.len() as u64;
        if len > budget {
            return Err(bound(ManifestError::TooLarge {
                path: file.to_string(),
                size: entry.size(),
                max: self.limits.max_total_bytes,
            }));
        }
        // The tar reader ends an entry quietly where the stream ends.
        if len < entry.size() {
            return Err(FluxError::NotATarball {
                reason: format!(
                    "entry {name:?} is cut short ({len} of {} bytes)",
                    entry.size()
                ),
            });
        }
        self.total += len;
        self.files.insert(file.to_string(), bytes);
        Ok(())
    }

    fn finish(self) -> Result<Files, FluxError> {
        let path = self.path.to_string();
        if !self.present {
            return Err(FluxError::PathNotFound { path });
        }
        if self.files.is_empty() {
            return Err(FluxError::NoFiles { path });
        }
        let manifest = Manifest::from_files(
            self.files.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
            self.limits,
        )
        .map_err(|source| FluxError::Files {
            path: path.clone(),
            source,
        })?;
        let size = snapshot::config_map_size(&self.files, &manifest);
        if size > MAX_CONFIG_MAP_BYTES {
            return Err(FluxError::TooLargeForSnapshot { path, size });
        }
        Ok(Files {
            content_digest: manifest.digest(),
            manifest,
            files: self.files,
        })
    }
}

/// The decompressed stream, failing past `left` more bytes; `exceeded` tells
/// that failure from the decoder's own (the tar reader wraps both alike).
struct Bounded<'a, R> {
    inner: R,
    left: u64,
    exceeded: &'a Cell<bool>,
}

impl<R: Read> Read for Bounded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the bound: the end of the stream is fine, one more byte not.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.exceeded.set(true);
                    Err(io::Error::other("the archive is past its bound"))
                }
            };
        }
        let room = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(&mut buf[..room])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{MANIFEST_KEY, SourceConfigMap};
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    /// One entry of a test archive, its name written byte for byte (the tar
    /// crate's own setters drop `./` and refuse `..`).
    enum E<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Symlink(&'a str, &'a str),
        Hardlink(&'a str, &'a str),
        Fifo(&'a str),
    }

    fn tar_bytes(entries: &[E]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let (name, kind, data, link): (&str, EntryType, &[u8], Option<&str>) = match e {
                E::File(n, d) => (n, EntryType::Regular, d, None),
                E::Dir(n) => (n, EntryType::Directory, b"", None),
                E::Symlink(n, t) => (n, EntryType::Symlink, b"", Some(t)),
                E::Hardlink(n, t) => (n, EntryType::Link, b"", Some(t)),
                E::Fifo(n) => (n, EntryType::Fifo, b"", None),
            };
            let mut h = tar::Header::new_gnu();
            h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            if let Some(t) = link {
                h.set_link_name(t).unwrap();
            }
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    fn tarball(entries: &[E]) -> Vec<u8> {
        gzip(&tar_bytes(entries))
    }

    const INIT: &[u8] = b"CREATE TABLE a (id int);\n";
    const MORE: &[u8] = b"CREATE TABLE b (id int);\n";

    /// A source-controller artifact: `./` names, a root entry, files beside
    /// the migrations and a directory whose name extends the path's.
    fn artifact() -> Vec<u8> {
        tarball(&[
            E::Dir("./"),
            E::File("./README.md", b"readme\n"),
            E::Dir("./migrations/"),
            E::File("./migrations/001_init.sql", INIT),
            E::File("migrations/002_more.sql", MORE),
            E::Dir("./migrations-old/"),
            E::File("./migrations-old/000_x.sql", b"x"),
            E::Dir("./other/deep/"),
            E::File("./other/deep/x.sql", b"x"),
            E::Symlink("./other/link", "../../etc/passwd"),
        ])
    }

    fn at(tarball: &[u8], path: Option<&str>) -> Result<Files, FluxError> {
        files_at(tarball, path, &Limits::default())
    }

    #[test]
    fn takes_the_files_directly_under_the_path_with_or_without_dot_slash() {
        let a = artifact();
        let f = at(&a, Some("migrations")).unwrap();
        assert_eq!(
            f.files,
            BTreeMap::from([
                ("001_init.sql".to_string(), INIT.to_vec()),
                ("002_more.sql".to_string(), MORE.to_vec()),
            ])
        );
        assert_eq!(f.content_digest, f.manifest.digest());
        for spelling in [
            "./migrations",
            "migrations/",
            "./migrations/",
            "migrations//.",
        ] {
            assert_eq!(at(&a, Some(spelling)).unwrap(), f, "{spelling}");
        }

        // The same files as a ConfigMap give the same content digest.
        let cm = SourceConfigMap {
            data: BTreeMap::from([
                (
                    "001_init.sql".into(),
                    String::from_utf8(INIT.to_vec()).unwrap(),
                ),
                (
                    "002_more.sql".into(),
                    String::from_utf8(MORE.to_vec()).unwrap(),
                ),
            ]),
            binary_data: BTreeMap::new(),
        };
        let s = snapshot::take(&cm, &[], "uid", &Limits::default()).unwrap();
        assert_eq!(s.content_digest, f.content_digest);
        assert_eq!(s.files, f.files);
    }

    #[test]
    fn the_root_is_none_empty_or_dot() {
        let a = tarball(&[
            E::Dir("./"),
            E::File("./001_init.sql", INIT),
            E::File("002_more.sql", MORE),
        ]);
        let f = at(&a, None).unwrap();
        assert_eq!(f.files.len(), 2);
        for spelling in ["", ".", "./", "/."] {
            if spelling.starts_with('/') {
                assert!(matches!(
                    at(&a, Some(spelling)),
                    Err(FluxError::InvalidPath { .. })
                ));
            } else {
                assert_eq!(at(&a, Some(spelling)).unwrap(), f, "{spelling:?}");
            }
        }
        // Without any entry for the root itself.
        let bare = tarball(&[E::File("001_init.sql", INIT)]);
        assert_eq!(at(&bare, None).unwrap().files.len(), 1);
        // The root of an artifact with directories is not flat.
        let err = at(&artifact(), None).unwrap_err();
        assert!(
            matches!(&err, FluxError::Subdirectory { dir, .. } if dir == "migrations"),
            "{err}"
        );
    }

    #[test]
    fn subdirectories_under_the_path_are_refused_naming_them() {
        let deep = tarball(&[
            E::File("./migrations/001_init.sql", INIT),
            E::File("./migrations/old/000_x.sql", b"x"),
        ]);
        let err = at(&deep, Some("migrations")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a subdirectory \"migrations/old\" at path \"migrations\": the source must be one flat directory, as a snapshot is"
        );
        // A directory entry alone, even empty.
        let empty_dir = tarball(&[
            E::File("./migrations/001_init.sql", INIT),
            E::Dir("./migrations/old/"),
        ]);
        let err = at(&empty_dir, Some("./migrations")).unwrap_err();
        assert!(
            matches!(&err, FluxError::Subdirectory { dir, path } if dir == "migrations/old" && path == "./migrations"),
            "{err}"
        );
    }

    #[test]
    fn links_and_special_files_under_the_path_are_refused_naming_them() {
        for (entry, rule) in [
            (
                E::Symlink("./migrations/003.sql", "../secret"),
                "symbolic link",
            ),
            (
                E::Hardlink("./migrations/003.sql", "./migrations/001_init.sql"),
                "hard link",
            ),
            (E::Fifo("./migrations/003.sql"), "not a regular file"),
        ] {
            let a = tarball(&[E::File("./migrations/001_init.sql", INIT), entry]);
            let err = at(&a, Some("migrations")).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("entry \"./migrations/003.sql\""), "{text}");
            assert!(text.contains(rule), "{text}");
        }
        // A symlink elsewhere is not looked at (artifact() holds one).
        assert!(at(&artifact(), Some("migrations")).is_ok());
        // Nor is a path that is a symlink followed.
        let a = tarball(&[E::Symlink("./migrations", "/etc")]);
        assert!(
            at(&a, Some("migrations"))
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
    }

    #[test]
    fn a_path_naming_a_file_takes_that_file() {
        let f = at(&artifact(), Some("./migrations/002_more.sql")).unwrap();
        assert_eq!(
            f.files,
            BTreeMap::from([("002_more.sql".to_string(), MORE.to_vec())])
        );
        let twice = tarball(&[E::File("a.sql", INIT), E::File("./a.sql", MORE)]);
        let err = at(&twice, Some("a.sql")).unwrap_err();
        assert!(err.to_string().contains("appears twice"), "{err}");
        let both = tarball(&[E::File("a", INIT), E::File("a/b.sql", MORE)]);
        let err = at(&both, Some("a")).unwrap_err();
        assert!(
            err.to_string().contains("both a file and a directory"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_path_or_an_empty_one_is_refused_naming_it() {
        let a = artifact();
        assert_eq!(
            at(&a, Some("schema")).unwrap_err().to_string(),
            "path \"schema\" is not in the artifact"
        );
        // A prefix of a name is not a directory.
        assert!(matches!(
            at(&a, Some("migr")),
            Err(FluxError::PathNotFound { .. })
        ));
        let empty = tarball(&[E::Dir("./"), E::Dir("./migrations/")]);
        assert_eq!(
            at(&empty, Some("migrations")).unwrap_err().to_string(),
            "no files at path \"migrations\" in the artifact"
        );
        assert_eq!(
            at(&tarball(&[]), None).unwrap_err().to_string(),
            "no files at path \".\" in the artifact"
        );
    }

    #[test]
    fn paths_out_of_the_archive_are_refused() {
        let a = artifact();
        for (path, rule) in [
            ("/migrations", "is absolute"),
            ("../migrations", "'..'"),
            ("migrations/../other", "'..'"),
            ("a\\b", "'\\'"),
        ] {
            let err = at(&a, Some(path)).unwrap_err();
            assert!(matches!(err, FluxError::InvalidPath { .. }), "{err}");
            let text = err.to_string();
            assert!(text.starts_with(&format!("path {path:?}: ")), "{text}");
            assert!(text.contains(rule), "{text}");
        }
        // Entry names no writer produces are refused wherever they are.
        for name in ["../evil.sql", "./x/../../evil.sql", "/etc/evil.sql"] {
            let a = tarball(&[
                E::File("./migrations/001_init.sql", INIT),
                E::File(name, b"x"),
            ]);
            let err = at(&a, Some("migrations")).unwrap_err();
            assert!(
                matches!(&err, FluxError::Entry { entry, .. } if entry == name),
                "{err}"
            );
        }
    }

    #[test]
    fn file_names_must_be_snapshot_keys() {
        for (name, rule) in [
            ("bad name.sql", "letters, digits"),
            (MANIFEST_KEY, "reserved"),
            ("..hidden", "'..'"),
        ] {
            let a = tarball(&[E::File(&format!("./m/{name}"), b"x")]);
            let err = at(&a, Some("m")).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("file {name:?} at path \"m\": ")),
                "{text}"
            );
            assert!(text.contains(rule), "{text}");
        }
    }

    #[test]
    fn long_names_of_gnu_and_pax_archives_are_read() {
        let dir = "d".repeat(150);
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(INIT.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, format!("./{dir}/001_init.sql"), INIT)
            .unwrap();
        let a = gzip(&b.into_inner().unwrap());
        let f = at(&a, Some(&dir)).unwrap();
        assert_eq!(f.files.keys().collect::<Vec<_>>(), ["001_init.sql"]);
    }

    #[test]
    fn bounds_are_refused_with_the_sizes() {
        let a = tarball(&[
            E::File("m/001.sql", INIT),
            E::File("m/002.sql", MORE),
            E::File("m/003.sql", b"x"),
        ]);
        let few = Limits {
            max_files: 2,
            max_total_bytes: 1 << 20,
        };
        let err = files_at(&a, Some("m"), &few).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the files at path \"m\": file \"003.sql\" exceeds the limit of 2 files"
        );
        let small = Limits {
            max_files: 10,
            max_total_bytes: 30,
        };
        let err = files_at(&a, Some("m"), &small).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the files at path \"m\": file \"002.sql\" (25 bytes) brings the total past the limit of 30 bytes"
        );

        // Within the limits, but more than a ConfigMap holds.
        let big = vec![b'x'; MAX_CONFIG_MAP_BYTES];
        let a = tarball(&[E::File("m/big.sql", &big)]);
        let err = at(&a, Some("m")).unwrap_err();
        assert!(
            matches!(err, FluxError::TooLargeForSnapshot { size, .. } if size > MAX_CONFIG_MAP_BYTES),
            "{err}"
        );
        assert!(err.to_string().contains(&MAX_CONFIG_MAP_BYTES.to_string()));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_archive_bound() {
        // A large file, and zeros after the tar's end: both are counted.
        let big = vec![0u8; 64 * 1024];
        let in_file = tarball(&[E::File("m/001.sql", &big)]);
        let mut tail = tar_bytes(&[E::File("m/001.sql", INIT)]);
        tail.extend(vec![0u8; 64 * 1024]);
        let after_end = gzip(&tail);
        for bomb in [in_file, after_end] {
            let err = files_within(&bomb, Some("m"), &Limits::default(), 16 * 1024).unwrap_err();
            assert_eq!(err, FluxError::ArchiveTooLarge { max: 16 * 1024 });
            assert!(err.to_string().contains("16384 bytes"), "{err}");
            // Under a bound that holds it, the same archive reads.
            assert!(files_within(&bomb, Some("m"), &Limits::default(), 1 << 20).is_ok());
        }
        // Exactly at the bound is within it.
        let exact = tar_bytes(&[E::File("m/001.sql", INIT)]);
        let len = exact.len() as u64;
        assert!(files_within(&gzip(&exact), Some("m"), &Limits::default(), len).is_ok());
    }

    #[test]
    fn corrupt_archives_are_refused_as_not_a_gzip_tarball() {
        let good = artifact();
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let mut bad_crc = good.clone();
        let crc = bad_crc.len() - 8;
        bad_crc[crc] ^= 0xff;
        let cut = good[..good.len() / 2].to_vec();
        // A tar header whose checksum is wrong.
        let mut tar = tar_bytes(&[E::File("m/001.sql", INIT)]);
        tar[0] = b'n';
        // A file cut short: its header claims more than the archive holds.
        let mut short = tar_bytes(&[E::File("m/001.sql", &[b'x'; 1000])]);
        short.truncate(1024);
        for (what, bytes) in [
            ("empty", Vec::new()),
            ("not gzip", b"PK\x03\x04 a zip".to_vec()),
            ("a flipped byte", flipped),
            ("a wrong CRC", bad_crc),
            ("cut in half", cut),
            ("a bad tar header", gzip(&tar)),
            ("a file cut short", gzip(&short)),
        ] {
            let err = at(&bytes, Some("m")).unwrap_err();
            assert!(
                matches!(err, FluxError::NotATarball { .. }),
                "{what}: {err}"
            );
            assert!(
                err.to_string()
                    .starts_with("the artifact is not a gzip tarball: "),
                "{what}: {err}"
            );
        }
    }

    // ---- fetch ----

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-line HTTP/1.1 server: each path's raw response, 404 otherwise.
    async fn serve(routes: BTreeMap<&'static str, Vec<u8>>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = std::sync::Arc::new(routes);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let routes = routes.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let target = text.split(' ').nth(1).unwrap_or("/");
                    let path = target.split('?').next().unwrap_or(target);
                    let response = routes.get(path).cloned().unwrap_or_else(|| {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    });
                    let _ = sock.write_all(&response).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        addr
    }

    fn ok(body: &[u8], declared: bool) -> Vec<u8> {
        let mut r =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nConnection: close\r\n".to_vec();
        if declared {
            r.extend(format!("Content-Length: {}\r\n", body.len()).into_bytes());
        }
        r.extend(b"\r\n");
        r.extend(body);
        r
    }

    #[tokio::test]
    async fn fetch_checks_the_digest_status_and_bound() {
        let tarball = artifact();
        let digest = crate::sha256_digest(&tarball);
        let big = vec![7u8; 64 * 1024];
        let addr = serve(BTreeMap::from([
            ("/a.tar.gz", ok(&tarball, true)),
            ("/undeclared.tar.gz", ok(&tarball, false)),
            ("/big.tar.gz", ok(&big, true)),
            ("/big-undeclared.tar.gz", ok(&big, false)),
        ]))
        .await;
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let artifact = |path: &str, digest: &str| Artifact {
            url: format!("http://{addr}{path}"),
            digest: digest.to_string(),
            revision: "main@sha1:0123".into(),
        };

        // Success, with or without a declared length; the files read back.
        for path in ["/a.tar.gz", "/undeclared.tar.gz"] {
            let bytes = fetch(&client, &artifact(path, &digest), 1 << 20)
                .await
                .unwrap();
            assert_eq!(bytes, tarball);
            assert!(at(&bytes, Some("migrations")).is_ok());
        }

        // Another digest: refused naming both.
        let other = crate::sha256_digest(b"other");
        let err = fetch(&client, &artifact("/a.tar.gz", &other), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            FluxError::DigestMismatch {
                expected: other.clone(),
                found: digest.clone()
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the artifact's SHA-256 is {digest} but the Flux object's status names {other}; source-controller replaced it or it was altered"
            )
        );

        // A digest of another form is refused before any request.
        for bad in ["sha256:ABC", "sha512:00", &digest.to_uppercase(), ""] {
            let err = fetch(&client, &artifact("/a.tar.gz", bad), 1 << 20)
                .await
                .unwrap_err();
            assert_eq!(
                err,
                FluxError::InvalidDigest {
                    digest: bad.to_string()
                }
            );
        }

        // 404, named without the credentials and the query of the URL.
        let secret = Artifact {
            url: format!("http://robot:hunter2@{addr}/gone.tar.gz?token=s3cret#x"),
            ..artifact("", &digest)
        };
        let err = fetch(&client, &secret, 1 << 20).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("GET http://{addr}/gone.tar.gz: the server answered 404 Not Found")
        );

        // Past the bound, declared or not.
        let err = fetch(&client, &artifact("/big.tar.gz", &digest), 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FluxError::TooLarge {
                    size: Some(65536),
                    max: 1024,
                    ..
                }
            ),
            "{err}"
        );
        let err = fetch(&client, &artifact("/big-undeclared.tar.gz", &digest), 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FluxError::TooLarge {
                    size: None,
                    max: 1024,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("1024 bytes"), "{err}");

        // No server: the host is named.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        let unreachable = Artifact {
            url: format!("http://robot:hunter2@{gone}/a.tar.gz?token=s3cret"),
            ..artifact("", &digest)
        };
        let err = fetch(&client, &unreachable, 1 << 20).await.unwrap_err();
        assert!(
            matches!(&err, FluxError::Unreachable { host, .. } if *host == gone.to_string()),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "{text}"
        );

        // Not an http(s) URL, credentials cut from the message.
        for url in [
            "file:///etc/passwd",
            "ftp://u:hunter2@host/a.tgz",
            "http://u:hunter2@[::1/a?token=s3cret",
        ] {
            let err = fetch(
                &client,
                &Artifact {
                    url: url.into(),
                    ..artifact("", &digest)
                },
                1 << 20,
            )
            .await
            .unwrap_err();
            assert!(matches!(err, FluxError::InvalidUrl { .. }), "{err}");
            let text = err.to_string();
            assert!(
                !text.contains("hunter2") && !text.contains("s3cret"),
                "{text}"
            );
        }
    }
}
