//! One operation's conversation with a repository through gix: a scratch
//! bare repository, the transport's configuration (credentials in memory, SSH
//! pinned to the given known_hosts), the v1 advertisement and the fetches.

use std::fs;
use std::num::NonZeroU32;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use gix::remote::Direction;
use gix::remote::fetch::{Shallow, Tags};

use super::{
    AdvertiseError, Advertisement, Credentials, FetchBudget, FetchError, FetchedBy, GitRef,
    Options, RefProtocol, SelectedFile,
};

/// Where fetched refs land in the scratch repository.
const FETCHED: &str = "refs/ptah/fetched";

/// A transport failure, with every credential scrubbed from its text.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(
        "the SSH host key of {url} is not pinned by the known_hosts given \
         (StrictHostKeyChecking=yes): {detail}"
    )]
    HostKeyNotPinned { url: String, detail: String },
    #[error("{url} refused the credentials: {detail}")]
    AuthenticationFailed { url: String, detail: String },
    #[error("{what} {url}: {detail}")]
    Failed {
        url: String,
        what: &'static str,
        detail: String,
    },
    #[error("preparing to reach {url}: {detail}")]
    Local { url: String, detail: String },
}

/// Why one fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchStepError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The server refused the want (`not our ref`).
    #[error("{url} refused to send {what}: {detail}")]
    Refused {
        url: String,
        what: String,
        detail: String,
    },
    #[error("fetch from {url} stopped at the byte budget of {max_bytes} bytes ({what})")]
    TooManyBytes {
        url: String,
        what: String,
        max_bytes: u64,
    },
    #[error(
        "a fetch of {what} from {url} limited to depth {depth} returned history at least {seen} \
         commits deep (server protocol v{protocol}): the depth limit was ignored, refused"
    )]
    NotShallow {
        url: String,
        what: String,
        depth: u32,
        seen: u32,
        protocol: u8,
    },
    #[error("{url} did not send {what}")]
    Missing { url: String, what: String },
    #[error("{detail}")]
    Local { detail: String },
}

/// What one fetch brought.
pub(super) struct Step {
    pub commit: String,
    pub by: FetchedBy,
    pub bytes: u64,
    pub shallow: bool,
}

pub(super) struct Session<'a> {
    url: &'a str,
    credentials: &'a Credentials,
    options: &'a Options,
    /// Removed when the session ends, with the key in it.
    _work: tempfile::TempDir,
    repo_dir: PathBuf,
    overrides: Vec<String>,
    ssh_log: Option<PathBuf>,
    /// Derived secrets (the encoded basic credential) to scrub as well.
    extra_secrets: Vec<String>,
    bytes: std::cell::Cell<u64>,
}

impl<'a> Session<'a> {
    pub fn new(
        url: &'a str,
        credentials: &'a Credentials,
        options: &'a Options,
    ) -> Result<Self, AdvertiseError> {
        let parsed = gix::url::parse(gix::bstr::BStr::new(url.as_bytes())).map_err(|_| {
            AdvertiseError::Url {
                reason: "not a Git URL".into(),
            }
        })?;
        if parsed.password().is_some() {
            return Err(AdvertiseError::Url {
                reason: "the URL carries a password; pass credentials separately".into(),
            });
        }
        let scheme = parsed.scheme.clone();
        use gix::url::Scheme;
        let local = |e: std::io::Error| {
            AdvertiseError::Transport(TransportError::Local {
                url: url.to_string(),
                detail: e.to_string(),
            })
        };
        let work = tempfile::Builder::new()
            .prefix("ptah-git-")
            .tempdir_in(&options.work_dir)
            .map_err(local)?;
        let repo_dir = work.path().join("repo.git");
        let mut overrides = vec![
            "core.logAllRefUpdates=false".to_string(),
            "protocol.file.allow=always".to_string(),
            "protocol.ext.allow=never".to_string(),
            "credential.helper=".to_string(),
        ];
        let mut ssh_log = None;
        let mut extra_secrets = Vec::new();
        match (&scheme, credentials) {
            (
                Scheme::Ssh,
                Credentials::Ssh {
                    private_key,
                    known_hosts,
                },
            ) => {
                let secrets = work.path().join("ssh");
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&secrets)
                    .map_err(local)?;
                let key = secrets.join("identity");
                let hosts = secrets.join("known_hosts");
                let log = secrets.join("ssh.log");
                let mut key_text = private_key.clone();
                if !key_text.ends_with('\n') {
                    key_text.push('\n');
                }
                write_private(&key, &key_text).map_err(local)?;
                write_private(&hosts, known_hosts).map_err(local)?;
                overrides.push(format!(
                    "core.sshCommand=ssh -F /dev/null -i {} -o IdentitiesOnly=yes \
                     -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null \
                     -o StrictHostKeyChecking=yes -o BatchMode=yes -o LogLevel=ERROR -E {}",
                    shell_quote(&key),
                    shell_quote(&hosts),
                    shell_quote(&log),
                ));
                overrides.push("ssh.variant=ssh".to_string());
                ssh_log = Some(log);
            }
            (Scheme::Ssh, _) => {
                return Err(AdvertiseError::Credentials {
                    reason: "an ssh:// source needs a private key and a known_hosts that pins \
                             the server's host key"
                        .into(),
                });
            }
            (_, Credentials::Ssh { .. }) => {
                return Err(AdvertiseError::Credentials {
                    reason: "an SSH key was given for a URL that is not ssh://".into(),
                });
            }
            (
                Scheme::Http | Scheme::Https,
                Credentials::Basic { .. } | Credentials::Bearer { .. },
            ) => {
                if scheme == Scheme::Http && !options.insecure_http {
                    return Err(AdvertiseError::Credentials {
                        reason: "credentials over plain http:// are refused unless insecure HTTP \
                                 is asked for"
                            .into(),
                    });
                }
                let header = match credentials {
                    Credentials::Bearer { token } => {
                        if token.is_empty() || token.chars().any(|c| c.is_control() || c == ' ') {
                            return Err(AdvertiseError::Credentials {
                                reason: "the bearer token is empty or holds spaces or control \
                                         characters"
                                    .into(),
                            });
                        }
                        format!("Bearer {token}")
                    }
                    Credentials::Basic { username, password } => {
                        if format!("{username}{password}")
                            .chars()
                            .any(|c| c.is_control())
                            || username.contains(':')
                        {
                            return Err(AdvertiseError::Credentials {
                                reason: "the username holds ':' or a credential holds control \
                                         characters"
                                    .into(),
                            });
                        }
                        let encoded = base64::engine::general_purpose::STANDARD
                            .encode(format!("{username}:{password}"));
                        extra_secrets.push(encoded.clone());
                        format!("Basic {encoded}")
                    }
                    _ => String::new(),
                };
                // Sent on every request, from memory: gix's own basic auth
                // refuses plain http, and this needs no 401 round trip.
                overrides.push(format!("http.extraHeader=Authorization: {header}"));
            }
            (Scheme::Http | Scheme::Https, _) => {}
            (_, Credentials::None) => {}
            (_, _) => {
                return Err(AdvertiseError::Credentials {
                    reason: "HTTP credentials were given for a URL that is not http(s)://".into(),
                });
            }
        }
        let session = Session {
            url,
            credentials,
            options,
            _work: work,
            repo_dir,
            overrides,
            ssh_log,
            extra_secrets,
            bytes: std::cell::Cell::new(0),
        };
        gix::ThreadSafeRepository::init_opts(
            &session.repo_dir,
            gix::create::Kind::Bare,
            gix::create::Options::default(),
            gix::open::Options::isolated(),
        )
        .map_err(|e| {
            AdvertiseError::Transport(TransportError::Local {
                url: url.to_string(),
                detail: session.scrub(&chain(&e)),
            })
        })?;
        Ok(session)
    }

    fn open(&self, version: u8) -> Result<gix::Repository, TransportError> {
        let mut overrides = self.overrides.clone();
        overrides.push(format!("protocol.version={version}"));
        gix::open_opts(
            &self.repo_dir,
            gix::open::Options::isolated().config_overrides(overrides),
        )
        .map_err(|e| self.local(&e))
    }

    fn local(&self, e: &(dyn std::error::Error + 'static)) -> TransportError {
        TransportError::Local {
            url: self.url.to_string(),
            detail: self.scrub(&chain(e)),
        }
    }

    /// Removes any credential from a text that leaves the crate.
    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        let derived = self.extra_secrets.iter().map(String::as_str);
        for secret in self.credentials.secrets().into_iter().chain(derived) {
            if !secret.is_empty() {
                out = out.replace(secret, "<redacted>");
            }
        }
        out
    }

    /// A transport error, recognising SSH host-key and auth refusals.
    fn transport(
        &self,
        what: &'static str,
        e: &(dyn std::error::Error + 'static),
    ) -> TransportError {
        let detail = self.scrub(&chain(e));
        let ssh = self
            .ssh_log
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok())
            .map(|s| {
                // ssh's lines about the host key (or all of them when none
                // is), without its banner and advice.
                let all: Vec<&str> = s
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('@'))
                    .collect();
                let about_key: Vec<&str> = all
                    .iter()
                    .copied()
                    .filter(|l| {
                        let l = l.to_ascii_lowercase();
                        l.contains("host key")
                            && !l.contains("add correct")
                            && !l.contains("offending")
                    })
                    .collect();
                let lines = if about_key.is_empty() { all } else { about_key };
                self.scrub(&lines.join("; "))
            })
            .unwrap_or_default();
        let url = self.url.to_string();
        if ssh.contains("Host key verification failed")
            || ssh.contains("host key is known for")
            || ssh.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        {
            return TransportError::HostKeyNotPinned { url, detail: ssh };
        }
        let both = format!("{detail} {ssh}");
        if both.contains("No credentials were returned") {
            // The server asked for credentials (HTTP 401) after those given
            // in the request header, or none were given.
            let detail = match self.credentials {
                Credentials::None => "the server requires credentials and none were given",
                _ => "the server refused the credentials given",
            }
            .to_string();
            return TransportError::AuthenticationFailed { url, detail };
        }
        if both.contains("Permission denied")
            || both.contains("401")
            || both.contains("403")
            || both.to_ascii_lowercase().contains("authentication")
        {
            let detail = if ssh.is_empty() {
                detail
            } else {
                format!("{detail}; ssh: {ssh}")
            };
            return TransportError::AuthenticationFailed { url, detail };
        }
        let detail = if ssh.is_empty() {
            detail
        } else {
            format!("{detail}; ssh: {ssh}")
        };
        TransportError::Failed { url, what, detail }
    }

    /// Credentials travel as a configured header (see [`Session::new`]); the
    /// helper answers nothing, so no credential helper or prompt is ever run.
    fn credential_fn(
        &self,
    ) -> impl FnMut(
        gix::credentials::helper::Action,
    ) -> gix::Result<Option<gix::credentials::protocol::Outcome>>
    + 'static {
        |_| Ok(None)
    }

    /// The refs and capabilities, read over protocol v1.
    pub fn advertisement(&self) -> Result<Advertisement, AdvertiseError> {
        let repo = self.open(1)?;
        let what = "reading the refs of";
        let remote = repo
            .remote_at(self.url)
            .and_then(|r| {
                r.with_fetch_tags(Tags::None).with_refspecs(
                    [
                        "+refs/heads/*:refs/ptah/heads/*",
                        "+refs/tags/*:refs/ptah/tags/*",
                    ],
                    Direction::Fetch,
                )
            })
            .map_err(|e| self.transport(what, &e))?;
        let connection = remote
            .connect(Direction::Fetch)
            .map_err(|e| self.transport(what, &e))?
            .with_credentials(self.credential_fn());
        let (ref_map, handshake) = connection
            .ref_map(
                gix::progress::Discard,
                gix::remote::ref_map::Options {
                    prefix_from_spec_as_filter_on_remote: false,
                    ..Default::default()
                },
            )
            .map_err(|e| self.transport(what, &e))?;
        Ok(Advertisement::from_handshake(
            handshake.server_protocol_version,
            &handshake.capabilities,
            &ref_map.remote_refs,
        ))
    }

    fn ref_protocol(&self) -> u8 {
        match self.options.ref_protocol {
            RefProtocol::V2 => 2,
            RefProtocol::V1 => 1,
        }
    }

    /// Fetches `full_name` `depth` commits deep (protocol v2) and checks that
    /// the depth held.
    pub fn fetch_ref(&self, full_name: &str, depth: u32) -> Result<Step, FetchStepError> {
        let depth = NonZeroU32::new(depth).unwrap_or(NonZeroU32::MIN);
        let (commit, protocol) = self.fetch(
            self.ref_protocol(),
            &format!("+{full_name}:{FETCHED}"),
            Shallow::DepthAtRemote(depth),
            full_name,
        )?;
        let shallow = self.check_depth(&commit, depth.get(), full_name, protocol)?;
        Ok(Step {
            commit,
            by: FetchedBy::Ref {
                name: full_name.to_string(),
                depth: depth.get(),
            },
            bytes: self.bytes.get(),
            shallow,
        })
    }

    /// Fetches a commit by id over protocol v1: the server's own rule decides.
    pub fn fetch_id(&self, commit: &str) -> Result<Step, FetchStepError> {
        let what = format!("commit {commit}");
        let (fetched, _) =
            self.fetch(1, &format!("{commit}:{FETCHED}"), Shallow::NoChange, &what)?;
        if fetched != commit {
            return Err(FetchStepError::Missing {
                url: self.url.to_string(),
                what,
            });
        }
        let shallow = self.open(1)?.is_shallow().unwrap_or(false);
        Ok(Step {
            commit: fetched,
            by: FetchedBy::Id,
            bytes: self.bytes.get(),
            shallow,
        })
    }

    /// Walks `full_name`'s history deeper on each try until `commit` is in it,
    /// the history ends, or the budget does.
    pub fn walk_history(
        &self,
        full_name: &str,
        commit: &str,
        git_ref: &GitRef,
    ) -> Result<Step, FetchError> {
        let FetchBudget {
            first_depth,
            max_depth,
            max_tries,
            max_bytes,
        } = self.options.budget;
        let mut depth = first_depth.clamp(1, max_depth.max(1));
        let mut tried_depth = 0;
        let mut tries = 0;
        let budget_error = |tries, depth, bytes| FetchError::BudgetExhausted {
            url: self.url.to_string(),
            git_ref: git_ref.clone(),
            commit: commit.to_string(),
            tries,
            depth,
            bytes,
            budget_tries: max_tries,
            budget_depth: max_depth,
            budget_bytes: max_bytes,
        };
        loop {
            if tries >= max_tries {
                return Err(budget_error(tries, tried_depth, self.bytes.get()));
            }
            tries += 1;
            tried_depth = depth;
            let step = match self.fetch_ref(full_name, depth) {
                Ok(step) => step,
                Err(FetchStepError::TooManyBytes { .. }) => {
                    return Err(budget_error(tries, depth, self.bytes.get()));
                }
                Err(e) => return Err(e.into()),
            };
            let repo = self.open(2).map_err(FetchStepError::from)?;
            if contains_commit(&repo, commit) {
                return Ok(Step {
                    commit: commit.to_string(),
                    by: FetchedBy::History {
                        name: full_name.to_string(),
                        depth,
                        tries,
                    },
                    bytes: step.bytes,
                    shallow: step.shallow,
                });
            }
            if !step.shallow {
                return Err(FetchError::Unreachable {
                    url: self.url.to_string(),
                    git_ref: git_ref.clone(),
                    commit: commit.to_string(),
                    how: format!(
                        "the whole history of {full_name} ({} at its tip) does not hold it",
                        step.commit
                    ),
                });
            }
            if depth >= max_depth {
                return Err(budget_error(tries, depth, self.bytes.get()));
            }
            depth = depth.saturating_mul(2).min(max_depth);
        }
    }

    /// One fetch of one refspec; returns the commit `FETCHED` names and the
    /// server's protocol version.
    fn fetch(
        &self,
        version: u8,
        refspec: &str,
        shallow: Shallow,
        what: &str,
    ) -> Result<(String, u8), FetchStepError> {
        let repo = self.open(version)?;
        let verb = "fetching from";
        let remote = repo
            .remote_at(self.url)
            .and_then(|r| {
                r.with_fetch_tags(Tags::None)
                    .with_refspecs([refspec], Direction::Fetch)
            })
            .map_err(|e| self.transport(verb, &e))?;
        let prepare = remote
            .connect(Direction::Fetch)
            .map_err(|e| self.transport(verb, &e))?
            .with_credentials(self.credential_fn())
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| self.transport(verb, &e))?
            .with_shallow(shallow);

        let pack_dir = self.repo_dir.join("objects").join("pack");
        let max_bytes = self.options.budget.max_bytes;
        let used = self.bytes.get();
        let remaining = max_bytes.saturating_sub(used);
        let baseline = dir_size(&pack_dir);
        let interrupt = AtomicBool::new(false);
        let tripped = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if dir_size(&pack_dir).saturating_sub(baseline) > remaining {
                        tripped.store(true, Ordering::Relaxed);
                        interrupt.store(true, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
            let r = prepare.receive(gix::progress::Discard, &interrupt);
            done.store(true, Ordering::Relaxed);
            r
        });
        let received = dir_size(&pack_dir).saturating_sub(baseline);
        self.bytes.set(used.saturating_add(received));
        let too_many = || FetchStepError::TooManyBytes {
            url: self.url.to_string(),
            what: what.to_string(),
            max_bytes,
        };
        let outcome = match result {
            Ok(o) => o,
            Err(_) if tripped.load(Ordering::Relaxed) => return Err(too_many()),
            Err(e) => {
                let text = self.scrub(&chain(&e));
                if text.contains("not our ref") || text.contains("not allowed") {
                    return Err(FetchStepError::Refused {
                        url: self.url.to_string(),
                        what: what.to_string(),
                        detail: last_line(&text),
                    });
                }
                return Err(self.transport(verb, &e).into());
            }
        };
        if self.bytes.get() > max_bytes {
            return Err(too_many());
        }
        let protocol = match outcome.handshake.server_protocol_version {
            gix::protocol::transport::Protocol::V0 => 0,
            gix::protocol::transport::Protocol::V1 => 1,
            gix::protocol::transport::Protocol::V2 => 2,
        };
        let repo = self.open(version)?;
        let id = repo
            .find_reference(FETCHED)
            .ok()
            .and_then(|mut r| r.peel_to_commit().ok())
            .map(|c| c.id.to_hex().to_string())
            .ok_or_else(|| FetchStepError::Missing {
                url: self.url.to_string(),
                what: format!("the commit of {what}"),
            })?;
        Ok((id, protocol))
    }

    /// Checks a fetch limited to `depth` really is: no commit sits `depth` or
    /// more parents below the tip. Returns whether the repository is shallow.
    fn check_depth(
        &self,
        tip: &str,
        depth: u32,
        what: &str,
        protocol: u8,
    ) -> Result<bool, FetchStepError> {
        let repo = self.open(2)?;
        let seen = history_depth(&repo, tip, depth.saturating_add(1));
        if seen > depth {
            return Err(FetchStepError::NotShallow {
                url: self.url.to_string(),
                what: what.to_string(),
                depth,
                seen,
                protocol,
            });
        }
        Ok(repo.is_shallow().unwrap_or(false))
    }

    /// Reads the selected files of `commit` and their content digest.
    pub fn read(
        &self,
        commit: &str,
        path: Option<&str>,
    ) -> Result<(String, Vec<SelectedFile>, String), super::ReadError> {
        let repo = self.open(2).map_err(|e| super::ReadError::Repository {
            detail: e.to_string(),
        })?;
        super::files::read_selected(&repo, commit, path.unwrap_or(""), &self.options.limits)
    }
}

/// Whether the scratch repository holds this commit.
fn contains_commit(repo: &gix::Repository, commit: &str) -> bool {
    gix::ObjectId::from_hex(commit.as_bytes())
        .ok()
        .is_some_and(|id| repo.find_commit(id).is_ok())
}

/// The number of commits on the longest parent chain below `tip` that is
/// present locally, counting the tip; stops counting at `stop`.
fn history_depth(repo: &gix::Repository, tip: &str, stop: u32) -> u32 {
    let Ok(tip) = gix::ObjectId::from_hex(tip.as_bytes()) else {
        return 0;
    };
    let mut level = vec![tip];
    let mut seen = std::collections::HashSet::new();
    let mut depth = 0;
    while !level.is_empty() && depth < stop {
        depth += 1;
        let mut next = Vec::new();
        for id in level {
            if !seen.insert(id) {
                continue;
            }
            if let Ok(commit) = repo.find_commit(id) {
                next.extend(
                    commit
                        .parent_ids()
                        .map(|p| p.detach())
                        .filter(|p| repo.find_commit(*p).is_ok()),
                );
            }
        }
        level = next;
    }
    depth
}

fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// An error and its sources, one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn last_line(text: &str) -> String {
    text.rsplit(": ")
        .find(|s| s.contains("not our ref") || s.contains("not allowed"))
        .unwrap_or(text)
        .trim()
        .to_string()
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// gix runs `core.sshCommand` through the shell.
fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
