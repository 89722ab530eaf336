//! Git sources: Resolve pins a branch, a tag or a commit id to a commit and
//! the content digest of the selected path; every later operation fetches that
//! commit again ([`fetch_recorded`]) and refuses other content.
//!
//! Everything here talks to real servers through gix's blocking client; call
//! it from `tokio::task::spawn_blocking`, or use the async wrappers
//! [`resolve_async`] and [`fetch_recorded_async`] that do so.
//!
//! # Server permission for a commit by id
//!
//! Git's upload-pack states whether it gives a commit by id only in a protocol
//! v0/v1 advertisement (`allow-tip-sha1-in-want`,
//! `allow-reachable-sha1-in-want`; `uploadpack.allowAnySHA1InWant` shows as
//! both). Protocol v2 advertises no such capability and git's v2 upload-pack
//! serves any object it has, even one a force-push left unreachable. So:
//!
//! * the advertisement is always read over protocol v1 and a v2 advertisement
//!   is never taken as permission;
//! * a fetch by id is made over protocol v1, so the server applies its own rule
//!   and refuses a commit no ref reaches (`not our ref`);
//! * fetches by ref and along a ref's history use protocol v2, where depth
//!   limits work (gix 0.90's v1 shallow fetch silently returns full history);
//!   every depth-limited fetch is checked to be really shallow.

mod files;
mod remote;

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use files::ReadError;
pub use remote::TransportError;

/// What a Git source names: exactly one branch, tag or commit.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub enum GitRef {
    /// A branch, read at its tip.
    Branch(String),
    /// A tag; an annotated tag is peeled to its commit.
    Tag(String),
    /// A commit by its 40-hex id.
    Commit(String),
}

impl GitRef {
    /// The full ref name a branch or tag stands for.
    pub fn full_name(&self) -> Option<String> {
        match self {
            GitRef::Branch(b) => Some(format!("refs/heads/{b}")),
            GitRef::Tag(t) => Some(format!("refs/tags/{t}")),
            GitRef::Commit(_) => None,
        }
    }

    /// Flux's revision of a commit read through this ref: `main@sha1:<id>`,
    /// `v1@sha1:<id>`, or `sha1:<id>` for a commit named by id.
    pub fn revision(&self, commit: &str) -> String {
        match self {
            GitRef::Branch(name) | GitRef::Tag(name) => format!("{name}@sha1:{commit}"),
            GitRef::Commit(_) => format!("sha1:{commit}"),
        }
    }
}

impl fmt::Display for GitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitRef::Branch(b) => write!(f, "branch {b:?}"),
            GitRef::Tag(t) => write!(f, "tag {t:?}"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
        }
    }
}

/// A repository, a ref and a path inside it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// `https://`, `http://`, `ssh://`, `git://` or `file://`, without credentials.
    pub url: String,
    #[serde(rename = "ref")]
    pub git_ref: GitRef,
    /// Directory or file relative to the repository root; `None` is the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// How to authenticate, held in memory only: never in a URL, an argument, an
/// error or a log. `Debug` shows no secret.
#[derive(Clone, Default)]
pub enum Credentials {
    /// Anonymous.
    #[default]
    None,
    /// HTTP(S) basic auth (a token as password works on most forges).
    Basic { username: String, password: String },
    /// HTTP(S) `Authorization: Bearer`.
    Bearer { token: String },
    /// SSH: a private key (OpenSSH format) and the known_hosts that pins the
    /// server's host key (`StrictHostKeyChecking=yes`).
    Ssh {
        private_key: String,
        known_hosts: String,
    },
}

impl Credentials {
    /// Every secret this holds, to scrub from any text that leaves the crate.
    pub(crate) fn secrets(&self) -> Vec<&str> {
        match self {
            Credentials::None => vec![],
            Credentials::Basic { password, .. } => vec![password.as_str()],
            Credentials::Bearer { token } => vec![token.as_str()],
            Credentials::Ssh { private_key, .. } => private_key
                .lines()
                .map(str::trim)
                .filter(|l| l.len() >= 8 && !l.starts_with("-----"))
                .collect(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::Bearer { .. } => f.write_str("Bearer { token: <redacted> }"),
            Credentials::Ssh { .. } => {
                f.write_str("Ssh { private_key: <redacted>, known_hosts: <pinned> }")
            }
        }
    }
}

/// How far a fetch of a recorded commit may walk a ref's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchBudget {
    /// Depth of the first walk; each next try doubles it.
    pub first_depth: u32,
    /// Deepest walk.
    pub max_depth: u32,
    /// Most fetches along the history.
    pub max_tries: u32,
    /// Most bytes of packs received by one operation, all fetches together.
    pub max_bytes: u64,
}

impl Default for FetchBudget {
    fn default() -> Self {
        FetchBudget {
            first_depth: 8,
            max_depth: 1024,
            max_tries: 6,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// Bounds on the selected files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileLimits {
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        let manifest = crate::manifest::Limits::default();
        FileLimits {
            max_files: manifest.max_files,
            max_file_bytes: 64 * 1024 * 1024,
            max_total_bytes: manifest.max_total_bytes,
        }
    }
}

/// Protocol version for fetches by ref and along history. v2 is the only
/// one whose depth limits gix honours; v1 is here to show the shallowness
/// check catching gix's v1 bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RefProtocol {
    #[default]
    V2,
    V1,
}

/// Where the work happens and its bounds.
#[derive(Clone, Debug)]
pub struct Options {
    /// A directory for the scratch repository and SSH files (an emptyDir);
    /// each operation makes and removes its own subdirectory.
    pub work_dir: PathBuf,
    pub budget: FetchBudget,
    pub limits: FileLimits,
    pub ref_protocol: RefProtocol,
    /// Send HTTP credentials over plain `http://` (tests, air gap); refused
    /// otherwise.
    pub insecure_http: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            insecure_http: false,
            work_dir: std::env::temp_dir(),
            budget: FetchBudget::default(),
            limits: FileLimits::default(),
            ref_protocol: RefProtocol::default(),
        }
    }
}

/// How the commit was fetched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "by")]
pub enum FetchedBy {
    /// By a ref pointing at it, one commit deep.
    Ref { name: String, depth: u32 },
    /// By its id (protocol v1, the server's own reachability rule applied).
    Id,
    /// Along a ref's history.
    History {
        name: String,
        depth: u32,
        tries: u32,
    },
}

/// What Resolve (or a fetch of a recorded commit) answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    pub url: String,
    #[serde(rename = "ref")]
    pub git_ref: GitRef,
    /// The selected path as answered (`""` is the root).
    pub path: String,
    pub commit: String,
    /// `sha256:` digest of the manifest of the selected files.
    pub content_digest: String,
    /// Flux's revision: `<ref>@sha1:<commit>`.
    pub revision: String,
    pub fetched_by: FetchedBy,
    /// Bytes of packs received.
    pub fetched_bytes: u64,
    /// Whether the scratch repository was shallow after the fetch.
    pub shallow: bool,
}

/// One selected file: its path relative to the selected path, and bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SelectedFile {
    pub path: String,
    pub bytes: Vec<u8>,
}

impl fmt::Debug for SelectedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SelectedFile({:?}, {} bytes)",
            self.path,
            self.bytes.len()
        )
    }
}

/// A resolution and the files it digested.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub resolution: Resolution,
    pub files: Vec<SelectedFile>,
}

/// What a v1 advertisement says about fetching commits by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ByIdPermission {
    /// `allow-reachable-sha1-in-want` (or allowAny, advertised as both).
    Reachable,
    /// `allow-tip-sha1-in-want` only: tips, hidden ones included.
    TipsOnly,
    /// Only what the advertisement lists.
    AdvertisedOnly,
}

/// One advertised ref.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdvertisedRef {
    pub name: String,
    /// What the ref points at (a tag object for an annotated tag).
    pub target: String,
    /// The commit an annotated tag peels to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peeled: Option<String>,
}

impl AdvertisedRef {
    /// The commit (or other object) the ref finally names.
    pub fn commit(&self) -> &str {
        self.peeled.as_deref().unwrap_or(&self.target)
    }
}

/// The server's ref advertisement, read over protocol v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Advertisement {
    /// The protocol the server answered in (1 or 0; 2 is never read here).
    pub protocol: u8,
    pub refs: Vec<AdvertisedRef>,
    pub capabilities: Vec<String>,
    pub by_id: ByIdPermission,
}

impl Advertisement {
    /// What a handshake says, as gix read it off the wire: the protocol,
    /// the capability names, whether commits are given by id (only a v0/v1
    /// advertisement states it; v2 never does), and every ref that points at
    /// an object (an unborn `HEAD` points at none and is left out).
    pub fn from_handshake(
        protocol: gix::protocol::transport::Protocol,
        capabilities: &gix::protocol::transport::client::Capabilities,
        refs: &[gix::protocol::handshake::Ref],
    ) -> Advertisement {
        let protocol = match protocol {
            gix::protocol::transport::Protocol::V0 => 0,
            gix::protocol::transport::Protocol::V1 => 1,
            gix::protocol::transport::Protocol::V2 => 2,
        };
        let capabilities: Vec<String> = capabilities.iter().map(|c| c.name().to_string()).collect();
        let has = |c: &str| capabilities.iter().any(|x| x == c);
        let by_id = if protocol >= 2 {
            ByIdPermission::AdvertisedOnly
        } else if has("allow-reachable-sha1-in-want") {
            ByIdPermission::Reachable
        } else if has("allow-tip-sha1-in-want") {
            ByIdPermission::TipsOnly
        } else {
            ByIdPermission::AdvertisedOnly
        };
        let refs = refs
            .iter()
            .filter_map(|r| {
                let (name, target, peeled) = r.unpack();
                Some(AdvertisedRef {
                    name: name.to_string(),
                    target: target?.to_hex().to_string(),
                    peeled: peeled.map(|p| p.to_hex().to_string()),
                })
            })
            .collect();
        Advertisement {
            protocol,
            refs,
            capabilities,
            by_id,
        }
    }

    pub fn find(&self, full_name: &str) -> Option<&AdvertisedRef> {
        self.refs.iter().find(|r| r.name == full_name)
    }

    /// A branch or tag whose tip is this commit: a branch or lightweight tag
    /// first, else an annotated tag peeling to it (fetched by its name).
    pub fn ref_at(&self, commit: &str) -> Option<&AdvertisedRef> {
        let candidates = || {
            self.refs
                .iter()
                .filter(|r| r.name.starts_with("refs/heads/") || r.name.starts_with("refs/tags/"))
        };
        candidates()
            .find(|r| r.peeled.is_none() && r.target == commit)
            .or_else(|| candidates().find(|r| r.commit() == commit))
    }
}

/// Why the advertisement could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AdvertiseError {
    #[error("repository URL refused: {reason}")]
    Url { reason: String },
    #[error("credentials refused: {reason}")]
    Credentials { reason: String },
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Why Resolve refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Advertise(#[from] AdvertiseError),
    #[error("{git_ref} is not advertised by {url}")]
    RefNotFound { url: String, git_ref: GitRef },
    #[error("{value:?} is not a full 40-hex commit id")]
    InvalidCommitId { value: String },
    #[error(
        "commit {commit} is at no branch or tag tip of {url}, and the server does not give \
         commits by id (no allow-reachable-sha1-in-want / allow-tip-sha1-in-want advertised); \
         refused before fetching: name a branch or a tag instead"
    )]
    CommitNotAdvertised { url: String, commit: String },
    #[error("{url} refused commit {commit} by id: {detail}")]
    CommitRefused {
        url: String,
        commit: String,
        detail: String,
    },
    #[error(transparent)]
    Fetch(#[from] remote::FetchStepError),
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Why the fetch of a recorded commit refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Advertise(#[from] AdvertiseError),
    #[error("{value:?} is not a full 40-hex commit id")]
    InvalidCommitId { value: String },
    #[error(
        "commit {commit} is no longer reachable from {git_ref} of {url} ({how}); \
         it was force-pushed away: Resolve reads the ref again"
    )]
    Unreachable {
        url: String,
        git_ref: GitRef,
        commit: String,
        how: String,
    },
    #[error(
        "commit {commit} is at no branch or tag tip of {url}, the server does not give commits \
         by id, and a commit id names no history to walk; refused before fetching"
    )]
    NotFetchable { url: String, commit: String },
    #[error(
        "fetch budget exhausted looking for commit {commit} along {git_ref} of {url}: \
         {tries} tries, depth {depth}, {bytes} bytes (budget: {budget_tries} tries, depth \
         {budget_depth}, {budget_bytes} bytes)"
    )]
    BudgetExhausted {
        url: String,
        git_ref: GitRef,
        commit: String,
        tries: u32,
        depth: u32,
        bytes: u64,
        budget_tries: u32,
        budget_depth: u32,
        budget_bytes: u64,
    },
    #[error(
        "content of commit {commit} differs from the recorded digest: expected {expected}, got {actual}"
    )]
    DigestMismatch {
        commit: String,
        expected: String,
        actual: String,
    },
    #[error(transparent)]
    Fetch(#[from] remote::FetchStepError),
    #[error(transparent)]
    Read(#[from] ReadError),
}

pub use remote::FetchStepError;

/// Reads the server's advertisement (protocol v1): refs, peeled tags and
/// whether it gives commits by id. Fetches nothing.
pub fn advertisement(
    url: &str,
    credentials: &Credentials,
    options: &Options,
) -> Result<Advertisement, AdvertiseError> {
    let session = remote::Session::new(url, credentials, options)?;
    session.advertisement()
}

/// Resolve: pins what the source names to a commit and the content digest of
/// its selected path.
pub fn resolve(
    source: &GitSource,
    credentials: &Credentials,
    options: &Options,
) -> Result<Fetched, ResolveError> {
    let session = remote::Session::new(&source.url, credentials, options)?;
    let adv = session.advertisement()?;
    let url = source.url.clone();
    let (commit, step) = match &source.git_ref {
        GitRef::Branch(_) | GitRef::Tag(_) => {
            let full = source.git_ref.full_name().unwrap_or_default();
            if adv.find(&full).is_none() {
                return Err(ResolveError::RefNotFound {
                    url,
                    git_ref: source.git_ref.clone(),
                });
            }
            let step = session.fetch_ref(&full, 1)?;
            (step.commit.clone(), step)
        }
        GitRef::Commit(id) => {
            let commit =
                commit_id(id).ok_or_else(|| ResolveError::InvalidCommitId { value: id.clone() })?;
            if let Some(at) = adv.ref_at(&commit) {
                let step = session.fetch_ref(&at.name.clone(), 1)?;
                if step.commit != commit {
                    // The ref moved between the advertisement and the fetch.
                    return Err(ResolveError::CommitRefused {
                        url,
                        commit,
                        detail: format!("{} moved while it was fetched", at.name),
                    });
                }
                (commit, step)
            } else if adv.by_id == ByIdPermission::AdvertisedOnly || adv.protocol >= 2 {
                return Err(ResolveError::CommitNotAdvertised { url, commit });
            } else {
                match session.fetch_id(&commit) {
                    Ok(step) => (commit, step),
                    Err(FetchStepError::Refused { detail, .. }) => {
                        return Err(ResolveError::CommitRefused {
                            url,
                            commit,
                            detail,
                        });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    let (path, files, digest) = session.read(&commit, source.path.as_deref())?;
    Ok(Fetched {
        resolution: Resolution {
            url: source.url.clone(),
            git_ref: source.git_ref.clone(),
            path,
            revision: source.git_ref.revision(&commit),
            commit,
            content_digest: digest,
            fetched_by: step.by,
            fetched_bytes: step.bytes,
            shallow: step.shallow,
        },
        files,
    })
}

/// Fetches a recorded commit again and checks its content digest: by the ref
/// while it still points there, else by id where the server gives it, else
/// along the ref's history within the budget.
pub fn fetch_recorded(
    source: &GitSource,
    commit: &str,
    content_digest: &str,
    credentials: &Credentials,
    options: &Options,
) -> Result<Fetched, FetchError> {
    let url = source.url.clone();
    let commit = commit_id(commit).ok_or_else(|| FetchError::InvalidCommitId {
        value: commit.to_string(),
    })?;
    let session = remote::Session::new(&source.url, credentials, options)?;
    let adv = session.advertisement()?;
    let full = source.git_ref.full_name();
    let named = full.as_deref().and_then(|f| adv.find(f));

    let step = if let Some(r) = named.filter(|r| r.commit() == commit) {
        session.fetch_ref(&r.name.clone(), 1)?
    } else if let (None, Some(r)) = (&full, adv.ref_at(&commit)) {
        // A commit id now at some tip: fetch it by that ref.
        session.fetch_ref(&r.name.clone(), 1)?
    } else {
        let by_id = if adv.by_id != ByIdPermission::AdvertisedOnly {
            match session.fetch_id(&commit) {
                Ok(step) => Some(step),
                Err(FetchStepError::Refused { detail, .. })
                    if adv.by_id == ByIdPermission::Reachable =>
                {
                    return Err(FetchError::Unreachable {
                        url,
                        git_ref: source.git_ref.clone(),
                        commit,
                        how: format!(
                            "the server gives reachable commits by id and refused it: {detail}"
                        ),
                    });
                }
                // Tips only: the commit may still be in the ref's history.
                Err(FetchStepError::Refused { .. }) => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        match (by_id, named) {
            (Some(step), _) => step,
            (None, Some(r)) => session.walk_history(&r.name.clone(), &commit, &source.git_ref)?,
            (None, None) => match &full {
                Some(_) => {
                    return Err(FetchError::Unreachable {
                        url,
                        git_ref: source.git_ref.clone(),
                        commit,
                        how: "the ref no longer exists".into(),
                    });
                }
                None => return Err(FetchError::NotFetchable { url, commit }),
            },
        }
    };
    let (path, files, digest) = session.read(&commit, source.path.as_deref())?;
    if digest != content_digest {
        return Err(FetchError::DigestMismatch {
            commit,
            expected: content_digest.to_string(),
            actual: digest,
        });
    }
    Ok(Fetched {
        resolution: Resolution {
            url: source.url.clone(),
            git_ref: source.git_ref.clone(),
            path,
            revision: source.git_ref.revision(&commit),
            commit,
            content_digest: digest,
            fetched_by: step.by,
            fetched_bytes: step.bytes,
            shallow: step.shallow,
        },
        files,
    })
}

/// [`resolve`] on tokio's blocking pool.
pub async fn resolve_async(
    source: GitSource,
    credentials: Credentials,
    options: Options,
) -> Result<Fetched, ResolveError> {
    tokio::task::spawn_blocking(move || resolve(&source, &credentials, &options))
        .await
        .map_err(|e| {
            ResolveError::Fetch(FetchStepError::Local {
                detail: format!("the resolve task ended abnormally: {e}"),
            })
        })?
}

/// [`fetch_recorded`] on tokio's blocking pool.
pub async fn fetch_recorded_async(
    source: GitSource,
    commit: String,
    content_digest: String,
    credentials: Credentials,
    options: Options,
) -> Result<Fetched, FetchError> {
    tokio::task::spawn_blocking(move || {
        fetch_recorded(&source, &commit, &content_digest, &credentials, &options)
    })
    .await
    .map_err(|e| {
        FetchError::Fetch(FetchStepError::Local {
            detail: format!("the fetch task ended abnormally: {e}"),
        })
    })?
}

/// A full lowercase SHA-1 commit id, or `None`.
fn commit_id(value: &str) -> Option<String> {
    let v = value.trim();
    (v.len() == 40 && v.bytes().all(|b| b.is_ascii_hexdigit())).then(|| v.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_follow_flux() {
        let c = "a".repeat(40);
        assert_eq!(
            GitRef::Branch("main".into()).revision(&c),
            format!("main@sha1:{c}")
        );
        assert_eq!(
            GitRef::Tag("v1".into()).revision(&c),
            format!("v1@sha1:{c}")
        );
        assert_eq!(GitRef::Commit(c.clone()).revision(&c), format!("sha1:{c}"));
    }

    #[test]
    fn commit_ids_are_full_hex() {
        assert_eq!(commit_id(&"A".repeat(40)), Some("a".repeat(40)));
        assert_eq!(commit_id("abc"), None);
        assert_eq!(commit_id(&"g".repeat(40)), None);
    }

    #[test]
    fn credentials_debug_shows_no_secret() {
        let shown = format!(
            "{:?} {:?} {:?}",
            Credentials::Basic {
                username: "u".into(),
                password: "hunter2-secret".into()
            },
            Credentials::Bearer {
                token: "tok-secret".into()
            },
            Credentials::Ssh {
                private_key: "KEYMATERIAL".into(),
                known_hosts: "h".into()
            }
        );
        assert!(
            !shown.contains("secret") && !shown.contains("KEYMATERIAL"),
            "{shown}"
        );
    }

    #[test]
    fn a_commit_is_fetched_by_a_branch_or_lightweight_tag_before_an_annotated_one() {
        let c = "c".repeat(40);
        let r = |name: &str, target: &str, peeled: Option<&str>| AdvertisedRef {
            name: name.into(),
            target: target.into(),
            peeled: peeled.map(Into::into),
        };
        let adv = Advertisement {
            protocol: 0,
            refs: vec![
                r("refs/tags/a-annotated", &"t".repeat(40), Some(&c)),
                r("refs/pull/1/head", &c, None),
                r("refs/tags/light", &c, None),
            ],
            capabilities: vec![],
            by_id: ByIdPermission::AdvertisedOnly,
        };
        assert_eq!(
            adv.ref_at(&c).map(|r| r.name.as_str()),
            Some("refs/tags/light")
        );
        let annotated_only = Advertisement {
            refs: adv.refs[..1].to_vec(),
            ..adv.clone()
        };
        assert_eq!(
            annotated_only.ref_at(&c).map(|r| r.name.as_str()),
            Some("refs/tags/a-annotated")
        );
        // Other namespaces (pull requests) are not branches or tags.
        let pull_only = Advertisement {
            refs: adv.refs[1..2].to_vec(),
            ..adv.clone()
        };
        assert_eq!(pull_only.ref_at(&c), None);
    }

    #[test]
    fn resolution_serializes_in_camel_case() {
        let r = Resolution {
            url: "git://h/r.git".into(),
            git_ref: GitRef::Branch("main".into()),
            path: "db".into(),
            commit: "a".repeat(40),
            content_digest: "sha256:00".into(),
            revision: "main@sha1:x".into(),
            fetched_by: FetchedBy::Ref {
                name: "refs/heads/main".into(),
                depth: 1,
            },
            fetched_bytes: 10,
            shallow: true,
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["ref"]["branch"], "main");
        assert_eq!(json["contentDigest"], "sha256:00");
        assert_eq!(json["fetchedBy"]["by"], "ref");
    }
}
