//! The harness's git servers, as the Git source's Jobs will meet them:
//! `git daemon` (git://) with per-repository fetch-by-id rules, smart HTTP
//! behind basic auth, and SSH with a pinned host key.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use base64::Engine;
use conformance::gitserve::{self, Endpoints, commit_files, create_repo, git, repo};
use conformance::testkit::{self, unique};

async fn endpoints() -> Endpoints {
    testkit::git::endpoints(conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await)
}

fn output(cmd: &mut std::process::Command) -> Output {
    cmd.output().expect("git runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An empty repository to fetch into.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    repo::run(git().args(["init", "--quiet"]).arg(dir.path())).unwrap();
    dir
}

/// Fetches one commit by id into `into` with the given protocol version.
fn fetch_by_id(into: &Path, url: &str, commit: &str, protocol: u8) -> Output {
    output(
        git()
            .arg("-C")
            .arg(into)
            .args(["-c", &format!("protocol.version={protocol}")])
            .args(["fetch", "--no-tags", "--quiet", url, commit]),
    )
}

fn has_object(repo: &Path, id: &str) -> bool {
    git()
        .arg("-C")
        .arg(repo)
        .args(["cat-file", "-e", &format!("{id}^{{commit}}")])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Opens an upload-pack conversation with `git daemon` and reads what it
/// says up to the first flush: the ref advertisement (v0) or the capability
/// advertisement (v2).
fn upload_pack(daemon_url: &str, name: &str, version2: bool) -> (TcpStream, Vec<String>) {
    let host = daemon_url.trim_start_matches("git://");
    let mut stream = TcpStream::connect(host).expect("git daemon listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!("git-upload-pack /{name}.git\0host={host}\0");
    if version2 {
        request.push_str("\0version=2\0");
    }
    write_pkt(&mut stream, &request);
    let mut lines = Vec::new();
    while let Some(line) = read_pkt(&mut stream) {
        lines.push(line);
    }
    (stream, lines)
}

fn write_pkt(stream: &mut TcpStream, payload: &str) {
    stream
        .write_all(format!("{:04x}{payload}", payload.len() + 4).as_bytes())
        .unwrap();
}

/// One pkt-line's payload, or None at a flush.
fn read_pkt(stream: &mut TcpStream) -> Option<String> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("a pkt-line length");
    let len = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
    if len == 0 {
        return None;
    }
    let mut payload = vec![0u8; len - 4];
    stream.read_exact(&mut payload).expect("a pkt-line payload");
    Some(String::from_utf8_lossy(&payload).into_owned())
}

fn advertisement(daemon_url: &str, name: &str, version2: bool) -> Vec<String> {
    let (mut stream, lines) = upload_pack(daemon_url, name, version2);
    // A flush tells upload-pack we want nothing.
    let _ = stream.write_all(b"0000");
    lines
}

/// Asks upload-pack (v0) for one object by id, as a client that does not
/// look at the capabilities would (gix does so), and returns its first answer.
fn v0_want(daemon_url: &str, name: &str, id: &str) -> String {
    let (mut stream, _) = upload_pack(daemon_url, name, false);
    write_pkt(&mut stream, &format!("want {id}\n"));
    stream.write_all(b"0000").unwrap();
    write_pkt(&mut stream, "done\n");
    read_pkt(&mut stream).unwrap_or_default().trim().to_string()
}

/// The v0 capabilities: after the NUL of the first advertised ref.
fn v0_capabilities(lines: &[String]) -> Vec<String> {
    let first = lines.first().expect("a ref advertisement");
    let (_, caps) = first.split_once('\0').expect("capabilities after a NUL");
    caps.split_whitespace().map(str::to_string).collect()
}

#[tokio::test]
async fn git_daemon_gives_a_non_tip_commit_by_id_only_where_the_repository_allows_it() {
    let ep = endpoints().await;
    let on = unique("reach-on");
    let off = unique("reach-off");
    let mut commits = Vec::new();
    for (name, allow) in [(&on, true), (&off, false)] {
        let path = create_repo(&ep.root, name, allow).unwrap();
        let first =
            commit_files(&path, "main", &[("schema.sql", "create table a();")], "one").unwrap();
        // `first` is now reachable from main but no ref's tip.
        commit_files(&path, "main", &[("schema.sql", "create table b();")], "two").unwrap();
        commits.push(first);
    }

    // Protocol v0: the capability is advertised per repository.
    let caps_on = v0_capabilities(&advertisement(&ep.daemon_url, &on, false));
    let caps_off = v0_capabilities(&advertisement(&ep.daemon_url, &off, false));
    assert!(
        caps_on.iter().any(|c| c == "allow-reachable-sha1-in-want"),
        "{caps_on:?}"
    );
    assert!(
        !caps_off.iter().any(|c| c.contains("sha1-in-want")),
        "{caps_off:?}"
    );

    let dir = scratch();
    let out = fetch_by_id(dir.path(), &ep.daemon_repo(&on), &commits[0], 0);
    assert!(out.status.success(), "v0 fetch by id: {}", stderr(&out));
    assert!(has_object(dir.path(), &commits[0]));

    // git's own client refuses before asking, having read the capabilities.
    let dir = scratch();
    let out = fetch_by_id(dir.path(), &ep.daemon_repo(&off), &commits[1], 0);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Server does not allow request for unadvertised object"),
        "{}",
        stderr(&out)
    );
    assert!(!has_object(dir.path(), &commits[1]));
    // A client that asks anyway is refused by the server itself.
    assert_eq!(
        v0_want(&ep.daemon_url, &off, &commits[1]),
        format!("ERR upload-pack: not our ref {}", commits[1])
    );
    assert_eq!(v0_want(&ep.daemon_url, &on, &commits[0]), "NAK");

    // Protocol v2 advertises no fetch-by-id capability at all, whatever the
    // repository says, and git's v2 upload-pack then serves any commit it
    // has by id: the repository that refuses it over v0 gives it over v2.
    // So a client must gate fetch-by-id itself and never read permission
    // from a v2 advertisement.
    for name in [&on, &off] {
        let lines = advertisement(&ep.daemon_url, name, true);
        assert_eq!(
            lines.first().map(|l| l.trim()),
            Some("version 2"),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.starts_with("fetch")), "{lines:?}");
        assert!(
            !lines.iter().any(|l| l.contains("sha1-in-want")),
            "{lines:?}"
        );
    }
    for (name, commit) in [(&on, &commits[0]), (&off, &commits[1])] {
        let dir = scratch();
        let out = fetch_by_id(dir.path(), &ep.daemon_repo(name), commit, 2);
        assert!(out.status.success(), "v2 fetch by id: {}", stderr(&out));
        assert!(has_object(dir.path(), commit));
    }

    // After a force-push the old tip is unreachable: v0 refuses it even where
    // reachable commits are allowed; v2 still serves it while the object
    // exists. The Git source's Resolve must check reachability itself.
    let path = ep.root.join(format!("{on}.git"));
    let tip = repo::rev_parse(&path, "main").unwrap();
    repo::set_ref(&path, "refs/heads/main", &commits[0]).unwrap();
    let dir = scratch();
    let out = fetch_by_id(dir.path(), &ep.daemon_repo(&on), &tip, 0);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("not our ref {tip}")),
        "{}",
        stderr(&out)
    );
    let out = fetch_by_id(dir.path(), &ep.daemon_repo(&on), &tip, 2);
    assert!(
        out.status.success(),
        "v2 fetch of an unreachable commit: {}",
        stderr(&out)
    );
    assert!(has_object(dir.path(), &tip));
}

/// Status, headers and body (as sent, chunked or not) of a bare HTTP GET,
/// optionally with a basic credential and a `Git-Protocol` header.
fn http_get(
    base: &str,
    path: &str,
    credential: Option<(&str, &str)>,
    git_protocol: Option<&str>,
) -> (u16, Vec<String>, String) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).expect("git-http-server listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some((user, password)) = credential {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    if let Some(protocol) = git_protocol {
        request.push_str(&format!("Git-Protocol: {protocol}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("an HTTP status line");
    (
        status,
        lines.map(str::to_string).collect(),
        body.to_string(),
    )
}

/// Git configured through the environment (not argv) to send the basic
/// credential on every request.
fn git_with_credential(user: &str, password: &str) -> std::process::Command {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut cmd = git();
    cmd.env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.extraHeader")
        .env(
            "GIT_CONFIG_VALUE_0",
            format!("Authorization: Basic {token}"),
        );
    cmd
}

#[tokio::test]
async fn smart_http_serves_clones_and_pushes_only_with_the_credential() {
    let ep = endpoints().await;
    let name = unique("http");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(
        &bare,
        "main",
        &[("db/schema.sql", "create table t();\n")],
        "seed",
    )
    .unwrap();
    let (user, password) = ep.http_credentials().unwrap();
    let url = ep.http_repo(&name);

    let work = tempfile::tempdir().unwrap();
    let clone = work.path().join("clone");
    let out = output(
        git_with_credential(&user, &password)
            .args(["clone", "--quiet", &url])
            .arg(&clone),
    );
    assert!(out.status.success(), "clone over HTTP: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(clone.join("db/schema.sql")).unwrap(),
        "create table t();\n"
    );

    // Push back over HTTP with the same credential.
    std::fs::write(clone.join("db/more.sql"), "create table u();\n").unwrap();
    repo::run(git().arg("-C").arg(&clone).args(["add", "."])).unwrap();
    repo::run(
        git()
            .arg("-C")
            .arg(&clone)
            .args(["commit", "--quiet", "-m", "more"]),
    )
    .unwrap();
    let pushed = repo::rev_parse(&clone.join(".git"), "HEAD").unwrap();
    let out = output(
        git_with_credential(&user, &password)
            .arg("-C")
            .arg(&clone)
            .args(["push", "--quiet", "origin", "main"]),
    );
    assert!(out.status.success(), "push over HTTP: {}", stderr(&out));
    assert_eq!(repo::rev_parse(&bare, "main").unwrap(), pushed);

    // No credential, or a wrong one: 401 with a Basic challenge.
    let refs = format!("/{name}.git/info/refs?service=git-upload-pack");
    let ok = Some((user.as_str(), password.as_str()));
    let (status, _, body) = http_get(&ep.http_url, &refs, ok, None);
    assert_eq!(status, 200);
    assert!(body.contains("# service=git-upload-pack"), "{body}");
    // The Git-Protocol header reaches http-backend: it answers in v2.
    let (status, _, body) = http_get(&ep.http_url, &refs, ok, Some("version=2"));
    assert_eq!(status, 200);
    assert!(body.contains("version 2"), "{body}");
    for credential in [
        None,
        Some((user.as_str(), "wrong-password")),
        Some(("other", password.as_str())),
    ] {
        let (status, headers, _) = http_get(&ep.http_url, &refs, credential, None);
        assert_eq!(status, 401);
        assert!(
            headers.iter().any(|h| h
                .to_ascii_lowercase()
                .starts_with("www-authenticate: basic realm=")),
            "{headers:?}"
        );
    }
    let out = output(
        git()
            .args(["clone", "--quiet", &url])
            .arg(work.path().join("anon")),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("could not read Username"),
        "{}",
        stderr(&out)
    );
    // A wrong password in the URL (harmless in argv): git sends it, gets 401.
    let wrong = url.replacen("http://", &format!("http://{user}:wrong-password@"), 1);
    let out = output(
        git()
            .args(["clone", "--quiet", &wrong])
            .arg(work.path().join("wrong")),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Authentication failed"),
        "{}",
        stderr(&out)
    );
    assert!(!work.path().join("wrong/db/schema.sql").exists());
}

#[tokio::test]
async fn ssh_clones_only_from_the_pinned_host_key_with_the_harness_key() {
    let ep = endpoints().await;
    let name = unique("ssh");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(
        &bare,
        "main",
        &[("schema.sql", "create table s();\n")],
        "seed",
    )
    .unwrap();
    let url = ep.ssh_repo(&name);
    let work = tempfile::tempdir().unwrap();

    let clone = |ssh_command: String, into: &str| {
        output(
            git()
                .env("GIT_SSH_COMMAND", ssh_command)
                .args(["clone", "--quiet", &url])
                .arg(work.path().join(into)),
        )
    };
    let out = clone(ep.ssh_command(&ep.known_hosts), "pinned");
    assert!(out.status.success(), "clone over SSH: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(work.path().join("pinned/schema.sql")).unwrap(),
        "create table s();\n"
    );

    // A known_hosts that pins another key for the same host and port.
    let pinned = std::fs::read_to_string(&ep.known_hosts).unwrap();
    let host = pinned.split_whitespace().next().expect("a pinned host");
    assert!(host.starts_with("[127.0.0.1]:"), "{pinned}");
    let other = gitserve::ssh::generate_key(&work.path().join("other-host"), "other").unwrap();
    let other_hosts = work.path().join("other_known_hosts");
    let other_line = other
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    std::fs::write(&other_hosts, format!("{host} {other_line}\n")).unwrap();
    let out = clone(ep.ssh_command(&other_hosts), "mismatch");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Host key verification failed"),
        "{}",
        stderr(&out)
    );

    // The right host but a client key sshd does not know: key-only auth.
    let stranger = work.path().join("stranger");
    gitserve::ssh::generate_key(&stranger, "stranger").unwrap();
    let out = clone(
        gitserve::ssh::command(&stranger, &ep.known_hosts),
        "stranger-clone",
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Permission denied (publickey)"),
        "{}",
        stderr(&out)
    );
}
