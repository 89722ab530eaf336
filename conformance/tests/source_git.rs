//! The Git source (supplychain::git) against the harness's real git servers:
//! `git daemon` with and without `uploadpack.allowReachableSHA1InWant`, smart
//! HTTP behind basic auth, and SSH with a pinned host key.

use conformance::gitserve::{self, Change, Endpoints, commit, commit_files, create_repo, repo};
use conformance::testkit::{self, unique};
use supplychain::git::{
    self, ByIdPermission, Credentials, FetchBudget, FetchError, FetchedBy, GitRef, GitSource,
    Options, ReadError, RefProtocol, ResolveError, TransportError,
};
use supplychain::manifest::{Limits, Manifest};

async fn endpoints() -> Endpoints {
    testkit::git::endpoints(conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await)
}

/// Options with a scratch directory the test keeps alive.
fn options(dir: &tempfile::TempDir) -> Options {
    Options {
        work_dir: dir.path().to_path_buf(),
        ..Options::default()
    }
}

fn source(url: &str, git_ref: GitRef, path: &str) -> GitSource {
    GitSource {
        url: url.to_string(),
        git_ref,
        path: Some(path.to_string()),
    }
}

/// The content digest the manifest gives for these files.
fn digest(files: &[(&str, &str)]) -> String {
    Manifest::from_files(
        files.iter().map(|(p, t)| (*p, t.as_bytes())),
        &Limits::default(),
    )
    .unwrap()
    .digest()
}

async fn resolve(
    src: &GitSource,
    creds: &Credentials,
    opts: &Options,
) -> Result<git::Fetched, ResolveError> {
    git::resolve_async(src.clone(), creds.clone(), opts.clone()).await
}

async fn fetch(
    src: &GitSource,
    commit: &str,
    digest: &str,
    opts: &Options,
) -> Result<git::Fetched, FetchError> {
    git::fetch_recorded_async(
        src.clone(),
        commit.to_string(),
        digest.to_string(),
        Credentials::None,
        opts.clone(),
    )
    .await
}

#[tokio::test]
async fn branch_tags_and_commit_by_id_resolve_to_their_commit_and_digest() {
    let ep = endpoints().await;
    let name = unique("resolve");
    let bare = create_repo(&ep.root, &name, true).unwrap();
    let c0 = commit_files(
        &bare,
        "main",
        &[("db/schema.sql", "create table z();")],
        "zero",
    )
    .unwrap();
    let c1 = commit_files(
        &bare,
        "main",
        &[
            ("db/schema.sql", "create table a();"),
            ("db/more/b.sql", "create table b();"),
            ("README", "x"),
        ],
        "one",
    )
    .unwrap();
    let c2 = commit_files(
        &bare,
        "main",
        &[("db/schema.sql", "create table c();")],
        "two",
    )
    .unwrap();
    repo::tag(&bare, "v1", &c1, Some("release one")).unwrap();
    repo::tag(&bare, "v1-light", &c1, None).unwrap();
    let d1 = digest(&[
        ("schema.sql", "create table a();"),
        ("more/b.sql", "create table b();"),
    ]);
    let d2 = digest(&[
        ("schema.sql", "create table c();"),
        ("more/b.sql", "create table b();"),
    ]);
    let d0 = digest(&[("schema.sql", "create table z();")]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&dir);
    let url = ep.daemon_repo(&name);

    let adv = git::advertisement(&url, &Credentials::None, &opts).unwrap();
    assert_eq!(adv.by_id, ByIdPermission::Reachable, "{adv:?}");

    let cases = [
        (GitRef::Branch("main".into()), &c2, &d2),
        (GitRef::Tag("v1".into()), &c1, &d1),
        (GitRef::Tag("v1-light".into()), &c1, &d1),
        (GitRef::Commit(c0.clone()), &c0, &d0),
        // A commit a lightweight tag points at is fetched by that tag.
        (GitRef::Commit(c1.clone()), &c1, &d1),
    ];
    for (git_ref, commit, digest) in cases {
        let src = source(&url, git_ref.clone(), "db");
        let got = resolve(&src, &Credentials::None, &opts)
            .await
            .unwrap_or_else(|e| panic!("{git_ref}: {e}"));
        let r = &got.resolution;
        assert_eq!(&r.commit, commit, "{git_ref}");
        assert_eq!(&r.content_digest, digest, "{git_ref}");
        assert_eq!(r.path, "db");
        assert_eq!(r.url, url);
        assert_eq!(r.revision, git_ref.revision(commit));
        match &git_ref {
            GitRef::Commit(c) if c == &c0 => assert_eq!(r.fetched_by, FetchedBy::Id),
            GitRef::Commit(_) => assert_eq!(
                r.fetched_by,
                FetchedBy::Ref {
                    name: "refs/tags/v1-light".into(),
                    depth: 1
                }
            ),
            _ => assert!(
                matches!(r.fetched_by, FetchedBy::Ref { depth: 1, .. }),
                "{r:?}"
            ),
        }
    }
    // Flux's revision form and the serialized resolution.
    let got = resolve(
        &source(&url, GitRef::Branch("main".into()), "db"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(got.resolution.revision, format!("main@sha1:{c2}"));
    let json = serde_json::to_value(&got.resolution).unwrap();
    assert_eq!(json["commit"], c2.as_str());
    assert_eq!(json["contentDigest"], d2.as_str());
    let mut paths: Vec<_> = got.files.iter().map(|f| f.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["more/b.sql", "schema.sql"]);

    // A single file is named by its own name; file:// works too.
    let file_url = format!("file://{}", bare.display());
    let got = resolve(
        &source(&file_url, GitRef::Branch("main".into()), "db/schema.sql"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(got.resolution.commit, c2);
    assert_eq!(
        got.resolution.content_digest,
        digest(&[("schema.sql", "create table c();")])
    );

    // A missing branch is named.
    let err = resolve(
        &source(&url, GitRef::Branch("nope".into()), "db"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap_err();
    eprintln!("refused: {err}");
    assert!(matches!(err, ResolveError::RefNotFound { .. }), "{err}");
    assert!(err.to_string().contains("branch \"nope\""), "{err}");
}

#[tokio::test]
async fn commit_by_id_not_at_a_tip_is_refused_before_fetching_without_server_permission() {
    let ep = endpoints().await;
    let name = unique("byid-off");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    let c0 = commit_files(&bare, "main", &[("db/a.sql", "create table a();")], "zero").unwrap();
    let c1 = commit_files(&bare, "main", &[("db/a.sql", "create table b();")], "one").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&dir);
    let url = ep.daemon_repo(&name);

    let adv = git::advertisement(&url, &Credentials::None, &opts).unwrap();
    assert_eq!(adv.by_id, ByIdPermission::AdvertisedOnly, "{adv:?}");
    assert!(!adv.capabilities.iter().any(|c| c.contains("sha1-in-want")));

    let err = resolve(
        &source(&url, GitRef::Commit(c0.clone()), "db"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap_err();

    eprintln!("refused: {err}");
    assert!(
        matches!(&err, ResolveError::CommitNotAdvertised { commit, .. } if commit == &c0),
        "{err}"
    );
    assert!(err.to_string().contains("refused before fetching"), "{err}");

    // The commit at the branch tip is given (by the branch).
    let got = resolve(
        &source(&url, GitRef::Commit(c1.clone()), "db"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(got.resolution.commit, c1);
}

#[tokio::test]
async fn after_a_force_push_the_recorded_commit_is_refused_as_unreachable() {
    let ep = endpoints().await;
    for allow in [true, false] {
        let name = unique(if allow { "force-on" } else { "force-off" });
        let bare = create_repo(&ep.root, &name, allow).unwrap();
        let c0 = commit_files(&bare, "main", &[("db/a.sql", "create table a();")], "zero").unwrap();
        let c1 = commit_files(&bare, "main", &[("db/a.sql", "create table b();")], "one").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = options(&dir);
        let src = source(&ep.daemon_repo(&name), GitRef::Branch("main".into()), "db");
        let got = resolve(&src, &Credentials::None, &opts).await.unwrap();
        let recorded = got.resolution.clone();
        assert_eq!(recorded.commit, c1);

        // While the branch points there: by the ref.
        let again = fetch(&src, &recorded.commit, &recorded.content_digest, &opts)
            .await
            .unwrap();
        assert!(matches!(again.resolution.fetched_by, FetchedBy::Ref { .. }));
        assert_eq!(again.files, got.files);

        // An ordinary push on top: by id where allowed, else along history.
        commit_files(&bare, "main", &[("other.txt", "x")], "two").unwrap();
        let again = fetch(&src, &recorded.commit, &recorded.content_digest, &opts)
            .await
            .unwrap();
        assert_eq!(again.resolution.commit, c1);
        if allow {
            assert_eq!(again.resolution.fetched_by, FetchedBy::Id);
        } else {
            assert!(
                matches!(again.resolution.fetched_by, FetchedBy::History { .. }),
                "{:?}",
                again.resolution
            );
        }
        // Other content than recorded is refused.
        let err = fetch(&src, &recorded.commit, "sha256:00", &opts)
            .await
            .unwrap_err();
        eprintln!("refused: {err}");
        assert!(matches!(err, FetchError::DigestMismatch { .. }), "{err}");

        // Force-push main back to c0 and on: c1 is reachable from nothing.
        repo::set_ref(&bare, "refs/heads/main", &c0).unwrap();
        commit_files(
            &bare,
            "main",
            &[("db/a.sql", "create table c();")],
            "rewritten",
        )
        .unwrap();
        let err = fetch(&src, &recorded.commit, &recorded.content_digest, &opts)
            .await
            .unwrap_err();
        eprintln!("refused: {err}");
        assert!(
            matches!(&err, FetchError::Unreachable { commit, .. } if commit == &c1),
            "allow={allow}: {err}"
        );
        assert!(err.to_string().contains("no longer reachable"), "{err}");
    }
}

#[tokio::test]
async fn a_commit_touching_only_other_paths_keeps_the_content_digest() {
    let ep = endpoints().await;
    let name = unique("keep");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(
        &bare,
        "main",
        &[("db/a.sql", "create table a();"), ("docs/x.md", "x")],
        "one",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&dir);
    let src = source(&ep.daemon_repo(&name), GitRef::Branch("main".into()), "db");
    let first = resolve(&src, &Credentials::None, &opts)
        .await
        .unwrap()
        .resolution;

    let c2 = commit_files(
        &bare,
        "main",
        &[("docs/x.md", "y"), ("README", "r")],
        "docs",
    )
    .unwrap();
    let second = resolve(&src, &Credentials::None, &opts)
        .await
        .unwrap()
        .resolution;
    assert_eq!(second.commit, c2);
    assert_ne!(second.commit, first.commit);
    assert_eq!(second.content_digest, first.content_digest);

    let c3 = commit_files(&bare, "main", &[("db/a.sql", "create table b();")], "db").unwrap();
    let third = resolve(&src, &Credentials::None, &opts)
        .await
        .unwrap()
        .resolution;
    assert_eq!(third.commit, c3);
    assert_ne!(third.content_digest, first.content_digest);
}

#[tokio::test]
async fn submodules_lfs_pointers_and_escaping_symlinks_are_refused() {
    let ep = endpoints().await;
    let name = unique("refuse");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    let base = commit_files(&bare, "main", &[("db/a.sql", "create table a();")], "base").unwrap();
    let lfs = "version https://git-lfs.github.com/spec/v1\n\
               oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
               size 12345\n";
    let branches: [(&str, Vec<Change<'_>>, &str); 5] = [
        (
            "gitlink-under",
            vec![Change::Gitlink("db/vendor", &base)],
            "submodule",
        ),
        (
            "gitlink-at",
            vec![Change::Gitlink("sub", &base)],
            "submodule",
        ),
        (
            "lfs",
            vec![Change::Write("db/big.sql", lfs.as_bytes())],
            "LFS",
        ),
        (
            "escape",
            vec![Change::Symlink("db/passwd", "../../etc/passwd")],
            "outside the selected path",
        ),
        ("inside", vec![Change::Symlink("db/b.sql", "a.sql")], ""),
    ];
    for (branch, changes, _) in &branches {
        repo::set_ref(&bare, &format!("refs/heads/{branch}"), &base).unwrap();
        commit(&bare, branch, changes, branch).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&dir);
    let url = ep.daemon_repo(&name);
    for (branch, _, says) in &branches {
        let path = if *branch == "gitlink-at" { "sub" } else { "db" };
        let result = resolve(
            &source(&url, GitRef::Branch(branch.to_string()), path),
            &Credentials::None,
            &opts,
        )
        .await;
        if says.is_empty() {
            // A symlink inside the path reads as its target's content.
            let got = result.unwrap();
            assert_eq!(
                got.resolution.content_digest,
                digest(&[
                    ("a.sql", "create table a();"),
                    ("b.sql", "create table a();")
                ])
            );
            continue;
        }
        let err = result.unwrap_err();
        eprintln!("refused: {err}");
        eprintln!("refused: {err}");
        match (*branch, &err) {
            ("gitlink-under", ResolveError::Read(ReadError::Submodule { path })) => {
                assert_eq!(path, "db/vendor")
            }
            ("gitlink-at", ResolveError::Read(ReadError::Submodule { path })) => {
                assert_eq!(path, "sub")
            }
            ("lfs", ResolveError::Read(ReadError::LfsPointer { path })) => {
                assert_eq!(path, "db/big.sql")
            }
            ("escape", ResolveError::Read(ReadError::SymlinkEscapes { path, .. })) => {
                assert_eq!(path, "db/passwd")
            }
            _ => panic!("{branch}: unexpected {err}"),
        }
        assert!(err.to_string().contains(says), "{branch}: {err}");
    }
}

#[tokio::test]
async fn file_bounds_name_the_file_that_crosses_them() {
    let ep = endpoints().await;
    let name = unique("bounds");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(
        &bare,
        "main",
        &[
            ("db/a.sql", "create table a();"),
            ("db/b.sql", "create table b();"),
        ],
        "two files",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = source(&ep.daemon_repo(&name), GitRef::Branch("main".into()), "db");
    let with = |limits: git::FileLimits| Options {
        limits,
        ..options(&dir)
    };
    let big = git::FileLimits {
        max_file_bytes: 10,
        ..git::FileLimits::default()
    };
    let err = resolve(&src, &Credentials::None, &with(big))
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(&err, ResolveError::Read(ReadError::FileTooLarge { path, .. }) if path == "db/a.sql"),
        "{err}"
    );
    let many = git::FileLimits {
        max_files: 1,
        ..git::FileLimits::default()
    };
    let err = resolve(&src, &Credentials::None, &with(many))
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    assert!(err.to_string().contains("db/b.sql"), "{err}");
    let missing = source(
        &ep.daemon_repo(&name),
        GitRef::Branch("main".into()),
        "nope",
    );
    let err = resolve(&missing, &Credentials::None, &options(&dir))
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(err, ResolveError::Read(ReadError::NotFound { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn ssh_works_with_the_pinned_host_key_and_is_refused_with_another() {
    let ep = endpoints().await;
    let name = unique("ssh");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(&bare, "main", &[("db/a.sql", "create table s();")], "seed").unwrap();
    let private_key = std::fs::read_to_string(&ep.ssh_key).unwrap();
    let known_hosts = std::fs::read_to_string(&ep.known_hosts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&dir);
    let src = source(&ep.ssh_repo(&name), GitRef::Branch("main".into()), "db");

    // A second commit: the fetch by ref is one commit deep over SSH too
    // (protocol v2 travels in GIT_PROTOCOL).
    let c = commit_files(&bare, "main", &[("db/a.sql", "create table s2();")], "two").unwrap();
    let pinned = Credentials::Ssh {
        private_key: private_key.clone(),
        known_hosts: known_hosts.clone(),
    };
    let got = resolve(&src, &pinned, &opts).await.unwrap();
    assert_eq!(got.resolution.commit, c);
    assert_eq!(
        got.resolution.content_digest,
        digest(&[("a.sql", "create table s2();")])
    );
    assert!(got.resolution.shallow, "{:?}", got.resolution);
    let again = git::fetch_recorded_async(
        src.clone(),
        c.clone(),
        got.resolution.content_digest.clone(),
        pinned.clone(),
        opts.clone(),
    )
    .await
    .unwrap();
    assert_eq!(again.files, got.files);

    // The same host and port pinned to another key.
    let host = known_hosts.split_whitespace().next().unwrap().to_string();
    let other = gitserve::ssh::generate_key(&dir.path().join("other-host"), "other").unwrap();
    let other_line: Vec<&str> = other.split_whitespace().take(2).collect();
    let wrong = Credentials::Ssh {
        private_key: private_key.clone(),
        known_hosts: format!("{host} {}\n", other_line.join(" ")),
    };
    let err = resolve(&src, &wrong, &opts).await.unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(
            err,
            ResolveError::Advertise(git::AdvertiseError::Transport(
                TransportError::HostKeyNotPinned { .. }
            ))
        ),
        "{err}"
    );
    let text = format!("{err} {err:?}");
    assert!(text.contains("not pinned"), "{text}");
    assert_no_key_material(&text, &private_key);

    // An empty known_hosts pins nothing: refused too, never trusted on first use.
    let none = Credentials::Ssh {
        private_key: private_key.clone(),
        known_hosts: String::new(),
    };
    let err = resolve(&src, &none, &opts).await.unwrap_err();
    eprintln!("refused: {err}");
    assert!(err.to_string().contains("not pinned"), "{err}");

    // No key at all for ssh:// is refused up front.
    let err = resolve(&src, &Credentials::None, &opts).await.unwrap_err();
    eprintln!("refused: {err}");
    assert!(err.to_string().contains("known_hosts"), "{err}");
}

fn assert_no_key_material(text: &str, private_key: &str) {
    for line in private_key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 8)
    {
        assert!(!text.contains(line.trim()), "key material in: {text}");
    }
}

#[tokio::test]
async fn smart_http_with_basic_auth_works_and_credentials_never_appear_in_errors() {
    let ep = endpoints().await;
    let name = unique("http");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    let c = commit_files(&bare, "main", &[("db/a.sql", "create table h();")], "seed").unwrap();
    let (user, password) = ep.http_credentials().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The harness serves plain HTTP: credentials over it only when asked.
    let opts = Options {
        insecure_http: true,
        ..options(&dir)
    };
    let src = source(&ep.http_repo(&name), GitRef::Branch("main".into()), "db");

    let basic = Credentials::Basic {
        username: user.clone(),
        password: password.clone(),
    };
    let got = resolve(&src, &basic, &opts).await.unwrap();
    assert_eq!(got.resolution.commit, c);
    assert!(!got.resolution.url.contains(&password));
    // The recorded commit fetched again over HTTP.
    let again = git::fetch_recorded_async(
        src.clone(),
        c.clone(),
        got.resolution.content_digest.clone(),
        basic.clone(),
        opts.clone(),
    )
    .await
    .unwrap();
    assert_eq!(again.resolution.commit, c);

    // Without asking for insecure HTTP, credentials over http:// are refused
    // before anything is sent.
    let err = resolve(&src, &basic, &options(&dir)).await.unwrap_err();
    eprintln!("refused: {err}");
    assert!(err.to_string().contains("plain http://"), "{err}");
    assert!(!format!("{err} {err:?}").contains(&password));

    let wrong_password = format!("{password}-but-wrong");
    for creds in [
        Credentials::None,
        Credentials::Basic {
            username: user.clone(),
            password: wrong_password.clone(),
        },
        Credentials::Bearer {
            token: "bearer-secret-token-123".into(),
        },
    ] {
        let err = resolve(&src, &creds, &opts).await.unwrap_err();
        eprintln!("refused: {err}");
        let text = format!("{err} {err:?}");
        assert!(
            matches!(
                err,
                ResolveError::Advertise(git::AdvertiseError::Transport(
                    TransportError::AuthenticationFailed { .. }
                ))
            ),
            "{text}"
        );
        for secret in [
            password.as_str(),
            wrong_password.as_str(),
            "bearer-secret-token-123",
        ] {
            assert!(!text.contains(secret), "credential in error: {text}");
        }
    }
    // A password in the URL is refused without echoing it.
    let in_url = ep
        .http_repo(&name)
        .replacen("http://", &format!("http://{user}:{password}@"), 1);
    let err = resolve(
        &source(&in_url, GitRef::Branch("main".into()), "db"),
        &Credentials::None,
        &opts,
    )
    .await
    .unwrap_err();
    eprintln!("refused: {err}");
    assert!(err.to_string().contains("carries a password"), "{err}");
    assert!(!format!("{err} {err:?}").contains(&password));
}

#[tokio::test]
async fn the_fetch_budget_stops_a_deep_history_walk_with_a_clear_error() {
    let ep = endpoints().await;
    let name = unique("budget");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    commit_files(&bare, "main", &[("db/a.sql", "create table a();")], "seed").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = source(&ep.daemon_repo(&name), GitRef::Branch("main".into()), "db");
    let recorded = resolve(&src, &Credentials::None, &options(&dir))
        .await
        .unwrap()
        .resolution;
    for i in 0..40 {
        commit_files(&bare, "main", &[(&format!("docs/{i}.md"), "x")], "later").unwrap();
    }

    // Depth 2, then 4, then 8: not deep enough.
    let tight = Options {
        budget: FetchBudget {
            first_depth: 2,
            max_depth: 8,
            max_tries: 5,
            ..FetchBudget::default()
        },
        ..options(&dir)
    };
    let err = fetch(&src, &recorded.commit, &recorded.content_digest, &tight)
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    match &err {
        FetchError::BudgetExhausted { tries, depth, .. } => {
            assert_eq!((*tries, *depth), (3, 8), "{err}")
        }
        _ => panic!("{err}"),
    }
    assert!(err.to_string().contains("fetch budget exhausted"), "{err}");

    // Too few tries.
    let few = Options {
        budget: FetchBudget {
            first_depth: 2,
            max_depth: 1024,
            max_tries: 2,
            ..FetchBudget::default()
        },
        ..options(&dir)
    };
    let err = fetch(&src, &recorded.commit, &recorded.content_digest, &few)
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(
            err,
            FetchError::BudgetExhausted {
                tries: 2,
                depth: 4,
                ..
            }
        ),
        "{err}"
    );

    // Too few bytes.
    let small = Options {
        budget: FetchBudget {
            max_bytes: 600,
            ..FetchBudget::default()
        },
        ..options(&dir)
    };
    let err = fetch(&src, &recorded.commit, &recorded.content_digest, &small)
        .await
        .unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(
            err,
            FetchError::BudgetExhausted {
                budget_bytes: 600,
                ..
            }
        ),
        "{err}"
    );

    // The default budget walks far enough.
    let got = fetch(
        &src,
        &recorded.commit,
        &recorded.content_digest,
        &options(&dir),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            got.resolution.fetched_by,
            FetchedBy::History {
                depth: 64,
                tries: 4,
                ..
            }
        ),
        "{:?}",
        got.resolution
    );
}

#[tokio::test]
async fn a_depth_limited_fetch_is_checked_to_really_be_shallow() {
    let ep = endpoints().await;
    let name = unique("shallow");
    let bare = create_repo(&ep.root, &name, false).unwrap();
    for i in 0..5 {
        commit_files(
            &bare,
            "main",
            &[("db/a.sql", &format!("create table t{i}();"))],
            "c",
        )
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let src = source(&ep.daemon_repo(&name), GitRef::Branch("main".into()), "db");

    // Protocol v2: one commit deep, and the scratch repository is shallow.
    let got = resolve(&src, &Credentials::None, &options(&dir))
        .await
        .unwrap();
    assert_eq!(
        got.resolution.fetched_by,
        FetchedBy::Ref {
            name: "refs/heads/main".into(),
            depth: 1
        }
    );
    assert!(got.resolution.shallow, "{:?}", got.resolution);

    // gix 0.90 over protocol v1 ignores the depth and returns full history:
    // the check refuses it.
    let v1 = Options {
        ref_protocol: RefProtocol::V1,
        ..options(&dir)
    };
    let err = resolve(&src, &Credentials::None, &v1).await.unwrap_err();
    eprintln!("refused: {err}");
    assert!(
        matches!(
            err,
            ResolveError::Fetch(git::FetchStepError::NotShallow { depth: 1, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("depth limit was ignored"), "{err}");
}
