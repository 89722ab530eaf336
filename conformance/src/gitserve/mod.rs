//! The harness's git servers: `git daemon` (git://), smart HTTP through
//! `git http-backend` with basic auth, and `sshd` on a loopback port. All three
//! serve the same root of bare repositories (`PTAH_GIT_ROOT`); tests make their
//! own repositories there with [`repo::create_repo`] and [`repo::commit`].
//!
//! Nothing secret goes into the env file: the HTTP credential and the SSH
//! client key live in `secrets/` (mode 0600) and only their paths are exported.

pub mod http;
pub mod repo;
pub mod ssh;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::harness::{Harness, Ports};
use crate::service::ServiceSpec;

pub use repo::{Change, commit, commit_files, create_repo, git};

/// The user name of the smart HTTP server's basic auth.
pub const HTTP_USER: &str = "ptah";
/// The realm the smart HTTP server names in its `WWW-Authenticate` challenge.
pub const HTTP_REALM: &str = "ptah-harness git";
/// The account `sshd` lets in (key only): root, as the harness runs as root.
pub const SSH_USER: &str = "root";

/// Where the git servers keep their files under a harness state dir.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The bare repositories every server serves.
    pub root: PathBuf,
    pub ssh_dir: PathBuf,
    pub sshd_config: PathBuf,
    pub host_key: PathBuf,
    pub authorized_keys: PathBuf,
    pub known_hosts: PathBuf,
    /// The client's private key (its `.pub` sits beside it).
    pub client_key: PathBuf,
    /// `user:password` of the smart HTTP server.
    pub http_credentials: PathBuf,
}

impl Paths {
    pub fn of(harness: &Harness) -> Self {
        let dir = harness.state.join("git");
        let ssh_dir = dir.join("ssh");
        Paths {
            root: dir.join("repos"),
            sshd_config: ssh_dir.join("sshd_config"),
            host_key: ssh_dir.join("ssh_host_ed25519_key"),
            authorized_keys: ssh_dir.join("authorized_keys"),
            known_hosts: ssh_dir.join("known_hosts"),
            ssh_dir,
            client_key: harness.secret_file("git-ssh-client.key"),
            http_credentials: harness.secret_file("git-http.credentials"),
        }
    }
}

/// Prepares the repositories, keys and configs the git servers need and
/// returns their services for `up` to start.
pub fn prepare(harness: &Harness, ports: &Ports) -> anyhow::Result<Vec<ServiceSpec>> {
    let paths = Paths::of(harness);
    fs::create_dir_all(&paths.root)?;
    fs::create_dir_all(&paths.ssh_dir)?;
    if let Some(secrets) = paths.http_credentials.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(secrets)?;
    }
    ensure_http_credentials(&paths.http_credentials)?;
    let http_server = harness.target_dir.join("git-http-server");
    if !http_server.is_file() {
        bail!(
            "git-http-server is not built at {}; run `cargo build -p conformance --bins`",
            http_server.display()
        );
    }
    let sshd = ssh::prepare(&paths, ports.git_ssh)?;

    // Server-side git must not read the invoking user's config.
    let isolated = [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ];
    let root = paths.root.display().to_string();
    let mut daemon = ServiceSpec::new("git-daemon", "git")
        .args([
            "daemon".to_string(),
            "--listen=127.0.0.1".to_string(),
            format!("--port={}", ports.git_daemon),
            "--reuseaddr".to_string(),
            "--export-all".to_string(),
            format!("--base-path={root}"),
            // git:// is read-only: fetches only, never pushes or archives.
            "--enable=upload-pack".to_string(),
            "--disable=receive-pack".to_string(),
            "--disable=upload-archive".to_string(),
            "--informative-errors".to_string(),
            "--verbose".to_string(),
        ])
        .port(ports.git_daemon);
    let mut http = ServiceSpec::new("git-http", http_server)
        .args([
            format!("--listen=127.0.0.1:{}", ports.git_http),
            format!("--project-root={root}"),
            format!("--credentials-file={}", paths.http_credentials.display()),
            format!("--realm={HTTP_REALM}"),
        ])
        .env("RUST_LOG", "info")
        .port(ports.git_http);
    for (k, v) in isolated {
        daemon = daemon.env(k, v);
        http = http.env(k, v);
    }
    Ok(vec![daemon, http, sshd])
}

/// The variables tests use to reach the git servers (no secrets).
pub fn env(harness: &Harness, ports: &Ports) -> Vec<(String, String)> {
    Endpoints::new(harness, ports).vars()
}

/// How a client reaches the harness's git servers: what `env` exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// `PTAH_GIT_ROOT`: the directory of bare repositories all servers serve.
    pub root: PathBuf,
    /// `PTAH_GIT_DAEMON_URL`: `git://127.0.0.1:<port>`; a repository
    /// `<root>/x.git` is at `<url>/x.git`.
    pub daemon_url: String,
    /// `PTAH_GIT_HTTP_URL`: `http://127.0.0.1:<port>` (basic auth required).
    pub http_url: String,
    /// `PTAH_GIT_HTTP_CREDENTIALS_FILE`: one line `user:password`, mode 0600.
    pub http_credentials_file: PathBuf,
    /// `PTAH_GIT_SSH_URL`: `ssh://root@127.0.0.1:<port><root>`.
    pub ssh_url: String,
    /// `PTAH_GIT_SSH_KEY`: the client's private key, mode 0600.
    pub ssh_key: PathBuf,
    /// `PTAH_GIT_KNOWN_HOSTS`: pins the server's host key for `[127.0.0.1]:<port>`.
    pub known_hosts: PathBuf,
}

const VARS: [&str; 7] = [
    "PTAH_GIT_ROOT",
    "PTAH_GIT_DAEMON_URL",
    "PTAH_GIT_HTTP_URL",
    "PTAH_GIT_HTTP_CREDENTIALS_FILE",
    "PTAH_GIT_SSH_URL",
    "PTAH_GIT_SSH_KEY",
    "PTAH_GIT_KNOWN_HOSTS",
];

impl Endpoints {
    pub fn new(harness: &Harness, ports: &Ports) -> Self {
        let paths = Paths::of(harness);
        Endpoints {
            daemon_url: format!("git://127.0.0.1:{}", ports.git_daemon),
            http_url: format!("http://127.0.0.1:{}", ports.git_http),
            http_credentials_file: paths.http_credentials,
            ssh_url: format!(
                "ssh://{SSH_USER}@127.0.0.1:{}{}",
                ports.git_ssh,
                paths.root.display()
            ),
            ssh_key: paths.client_key,
            known_hosts: paths.known_hosts,
            root: paths.root,
        }
    }

    pub fn vars(&self) -> Vec<(String, String)> {
        let values = [
            self.root.display().to_string(),
            self.daemon_url.clone(),
            self.http_url.clone(),
            self.http_credentials_file.display().to_string(),
            self.ssh_url.clone(),
            self.ssh_key.display().to_string(),
            self.known_hosts.display().to_string(),
        ];
        VARS.iter().map(|k| k.to_string()).zip(values).collect()
    }

    /// Reads the endpoints back from variables (the env file's, say).
    pub fn from_vars(vars: &BTreeMap<String, String>) -> anyhow::Result<Self> {
        let get = |k: &str| -> anyhow::Result<String> {
            vars.get(k)
                .cloned()
                .with_context(|| format!("{k} is not set; is the harness up with its git servers?"))
        };
        Ok(Endpoints {
            root: get(VARS[0])?.into(),
            daemon_url: get(VARS[1])?,
            http_url: get(VARS[2])?,
            http_credentials_file: get(VARS[3])?.into(),
            ssh_url: get(VARS[4])?,
            ssh_key: get(VARS[5])?.into(),
            known_hosts: get(VARS[6])?.into(),
        })
    }

    /// Reads the endpoints from the env file `up` wrote.
    pub fn from_env_file(harness: &Harness) -> anyhow::Result<Self> {
        Self::from_vars(&parse_env_file(&harness.env()?)?)
    }

    pub fn daemon_repo(&self, name: &str) -> String {
        format!("{}/{name}.git", self.daemon_url)
    }
    pub fn http_repo(&self, name: &str) -> String {
        format!("{}/{name}.git", self.http_url)
    }
    pub fn ssh_repo(&self, name: &str) -> String {
        format!("{}/{name}.git", self.ssh_url)
    }

    /// The HTTP basic-auth user and password.
    pub fn http_credentials(&self) -> anyhow::Result<(String, String)> {
        http::read_credentials(&self.http_credentials_file)
    }

    /// A `GIT_SSH_COMMAND` that uses the harness's client key and trusts only
    /// the host key pinned in `known_hosts`.
    pub fn ssh_command(&self, known_hosts: &Path) -> String {
        ssh::command(&self.ssh_key, known_hosts)
    }
}

/// Parses the `export K='v'` lines of the harness's env file.
pub fn parse_env_file(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let rest = line.strip_prefix("export ").unwrap_or(line);
        let (key, quoted) = rest
            .split_once('=')
            .with_context(|| format!("env file line {}: no `=`", n + 1))?;
        vars.insert(
            key.to_string(),
            unquote(quoted).with_context(|| {
                format!(
                    "env file line {}: {key} is not a single-quoted value",
                    n + 1
                )
            })?,
        );
    }
    Ok(vars)
}

/// Undoes the harness's shell quoting: `'...'` pieces joined by `\'`.
fn unquote(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("\\'") {
            out.push('\'');
            rest = r;
        } else if let Some(r) = rest.strip_prefix('\'') {
            let end = r.find('\'')?;
            out.push_str(&r[..end]);
            rest = &r[end + 1..];
        } else {
            // Unquoted values are taken as they are.
            out.push_str(rest);
            break;
        }
    }
    Some(out)
}

/// Makes the HTTP credential once: user [`HTTP_USER`] and a random password.
fn ensure_http_credentials(path: &Path) -> anyhow::Result<()> {
    if path.is_file() {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
        return Ok(());
    }
    let mut bytes = [0u8; 18];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    write_private(path, &format!("{HTTP_USER}:{}\n", hex::encode(bytes)))
}

/// Writes a file only its owner can read, replacing it whole (see
/// [`write_whole`]).
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    write_whole(path, text, 0o600)
}

/// Writes `text` to a file beside `path` and renames it over `path`: every
/// test process runs `up`, which writes these files again, and a reader in
/// another test (ssh reading `known_hosts` or `authorized_keys`) must never
/// see one truncated mid-write.
pub(crate) fn write_whole(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
        return Ok(());
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(name);
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    f.write_all(text.as_bytes())?;
    fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_values_round_trip_through_shell_quoting() {
        let text = "# comment\nexport A='/x y'\nexport B='it'\\''s'\nexport C=''\n";
        let vars = parse_env_file(text).unwrap();
        assert_eq!(vars["A"], "/x y");
        assert_eq!(vars["B"], "it's");
        assert_eq!(vars["C"], "");
    }

    #[test]
    fn endpoints_read_back_from_their_vars() {
        let e = Endpoints {
            root: "/s/git/repos".into(),
            daemon_url: "git://127.0.0.1:1".into(),
            http_url: "http://127.0.0.1:2".into(),
            http_credentials_file: "/s/secrets/c".into(),
            ssh_url: "ssh://root@127.0.0.1:3/s/git/repos".into(),
            ssh_key: "/s/secrets/k".into(),
            known_hosts: "/s/git/ssh/known_hosts".into(),
        };
        let vars: BTreeMap<String, String> = e.vars().into_iter().collect();
        assert_eq!(Endpoints::from_vars(&vars).unwrap(), e);
        assert_eq!(e.ssh_repo("a"), "ssh://root@127.0.0.1:3/s/git/repos/a.git");
    }
}
