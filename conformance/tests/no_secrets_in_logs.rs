//! Credentials never appear in output or logs: every secret the harness made
//! (database passwords and URLs, the git HTTP credential, the git SSH private
//! key, the private keys of its PKI) is searched for in the env file, every
//! harness log, the process kubelet's container logs and the output of
//! `ptah-harness status` and `env`, and the traces the tracing backend
//! stored (which hold no SQL either).
//!
//! Tests run in any order, so this checks whatever logs exist when it runs,
//! after driving the executor's Jobs itself: a PtahSchema on PostgreSQL and
//! a PtahMigration on MariaDB, both through the harness's admin URLs, to
//! `InSync` (Observe, Plan, Apply, History and a migration's Apply). It
//! asserts it read enough secrets and scanned enough files, those Jobs'
//! logs among them, not to pass vacuously. A failure names the file and the secret's source, never the
//! secret itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use operator::api::condition::{MigrationPhase, SchemaPhase};
use operator::api::migration::PtahMigration;
use operator::api::schema::PtahSchema;

/// Shorter values could match by chance; every harness secret is far longer.
const MIN_SECRET_LEN: usize = 8;

/// A secret value and where it came from (printed instead of the value).
struct Secret {
    source: String,
    value: String,
}

#[derive(Default)]
struct Secrets(Vec<Secret>);

impl Secrets {
    fn add(&mut self, source: impl Into<String>, value: &str) {
        let value = value.trim();
        if value.len() < MIN_SECRET_LEN || self.0.iter().any(|s| s.value == value) {
            return;
        }
        self.0.push(Secret {
            source: source.into(),
            value: value.to_string(),
        });
    }

    /// The secrets whose value occurs in `text`, by source.
    fn found_in(&self, text: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|s| text.contains(&s.value))
            .map(|s| s.source.as_str())
            .collect()
    }
}

/// The password of `scheme://user:password@host/…`, raw and percent-decoded.
fn url_password(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.trim().split_once("://") else {
        return Vec::new();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let Some((userinfo, _host)) = authority.rsplit_once('@') else {
        return Vec::new();
    };
    let Some((_user, password)) = userinfo.split_once(':') else {
        return Vec::new();
    };
    let mut out = vec![password.to_string()];
    let decoded = percent_decode(password);
    if decoded != password {
        out.push(decoded);
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The secret parts of a PEM private key: its base64 body in one piece and
/// line by line. The first line of an
/// unencrypted OpenSSH key encodes the same `openssh-key-v1` header in every
/// key, so it is not a secret on its own.
fn private_key_parts(source: &str, pem: &str, secrets: &mut Secrets) {
    let body: Vec<&str> = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("-----") && !l.contains(':'))
        .collect();
    let joined = body.concat();
    secrets.add(format!("{source} (body)"), &joined);
    for (i, line) in body.iter().enumerate() {
        if i == 0 && line.starts_with("b3BlbnNzaC1rZXktdjE") {
            continue;
        }
        if line.len() >= 20 {
            secrets.add(format!("{source} (body line {})", i + 1), line);
        }
    }
}

/// Reads one file of `secrets/` the way its kind requires.
fn read_secret_file(path: &Path, secrets: &mut Secrets) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let source = format!("secrets/{name}");
    let Ok(text) = fs::read_to_string(path) else {
        return;
    };
    if name.ends_with(".pub") || name.ends_with(".crt") {
        return; // public halves
    }
    if text.contains("PRIVATE KEY-----") {
        private_key_parts(&source, &text, secrets);
    } else if text.contains("://") {
        for password in url_password(&text) {
            secrets.add(format!("{source} (URL password)"), &password);
        }
    } else if name.ends_with(".credentials") {
        // One line `user:password`: the user is no secret.
        if let Some((_user, password)) = text.trim().split_once(':') {
            secrets.add(format!("{source} (password)"), password);
        }
    } else if text.trim_start().starts_with('{') {
        // A Docker config.json or a token document: every credential field.
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
            collect_json_credentials(&source, &json, secrets);
        }
    } else {
        secrets.add(source, &text);
    }
}

fn collect_json_credentials(source: &str, v: &serde_json::Value, secrets: &mut Secrets) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = k.to_ascii_lowercase();
                if let Some(s) = v.as_str()
                    && [
                        "auth",
                        "password",
                        "token",
                        "identitytoken",
                        "registrytoken",
                    ]
                    .contains(&key.as_str())
                {
                    secrets.add(format!("{source} ({k})"), s);
                } else {
                    collect_json_credentials(source, v, secrets);
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                collect_json_credentials(source, v, secrets);
            }
        }
        _ => {}
    }
}

/// Every regular file under `dir` whose name ends in `.log`.
fn log_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            log_files(&path, out);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "log") {
            out.push(path);
        }
    }
}

fn harness_command(state: &Path, arg: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ptah-harness"))
        .arg("--state-dir")
        .arg(state)
        .arg(arg)
        .output()
        .unwrap_or_else(|e| panic!("running ptah-harness {arg}: {e}"));
    assert!(
        out.status.success(),
        "ptah-harness {arg} failed: {}",
        out.status
    );
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

/// Every secret of a harness state directory: the files of `secrets/` and
/// the private keys of `pki/`. Answers the secrets and the number of PKI keys.
fn collect_secrets(state: &Path) -> (Secrets, usize) {
    let mut secrets = Secrets::default();
    let secret_dir = state.join("secrets");
    let mut secret_files: Vec<PathBuf> = fs::read_dir(&secret_dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", secret_dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    secret_files.sort();
    for path in &secret_files {
        read_secret_file(path, &mut secrets);
    }
    // The private keys of the harness's PKI (CA, API server, clients).
    let mut pki_keys = 0;
    let mut pki_files: Vec<PathBuf> = fs::read_dir(state.join("pki"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    pki_files.sort();
    for path in pki_files {
        if let Ok(text) = fs::read_to_string(&path)
            && text.contains("PRIVATE KEY-----")
        {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            private_key_parts(&format!("pki/{name}"), &text, &mut secrets);
            pki_keys += 1;
        }
    }
    (secrets, pki_keys)
}

/// The harness's own logs (`logs/**/*.log`, and `*.log` beside them such as
/// `down.log`) and the process kubelet's container logs
/// (`kubelet/pods/**/*.log`).
fn log_paths(state: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut harness_logs = Vec::new();
    log_files(&state.join("logs"), &mut harness_logs);
    if let Ok(entries) = fs::read_dir(state) {
        harness_logs.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "log")),
        );
    }
    let mut pod_logs = Vec::new();
    log_files(&state.join("kubelet").join("pods"), &mut pod_logs);
    (harness_logs, pod_logs)
}

/// Reads the files that still exist (a pod's directory may go away while we
/// read) as `(name, text)`.
fn read_all(paths: &[PathBuf]) -> Vec<(String, String)> {
    paths
        .iter()
        .filter_map(|p| {
            fs::read(p).ok().map(|b| {
                (
                    p.display().to_string(),
                    String::from_utf8_lossy(&b).into_owned(),
                )
            })
        })
        .collect()
}

/// One line per place a secret occurs: the place and the secret's source,
/// never its value.
fn leaks(secrets: &Secrets, scanned: &[(String, String)]) -> Vec<String> {
    scanned
        .iter()
        .flat_map(|(name, text)| {
            secrets
                .found_in(text)
                .into_iter()
                .map(move |source| format!("{name}: holds the value of {source}"))
        })
        .collect()
}

/// The executor's Jobs, each with a database URL that holds a harness
/// password: a schema and a migration driven to `InSync`. Answers the
/// namespace, whose Pods' logs the scan must include.
async fn run_the_executor(harness: &'static Harness) -> anyhow::Result<String> {
    let ns = TestNamespace::for_operator(harness, "nosecret", "exec").await?;
    // The admin URLs themselves: their passwords are the harness's secrets.
    let pg = TestDatabase::admin(harness, Engine::Postgres)?;
    let maria = TestDatabase::admin(harness, Engine::MariaDb)?;
    let pg = TestDatabase::create(harness, Engine::Postgres, &format!("{}_pg", pg.name))?;
    let maria = TestDatabase::create(harness, Engine::MariaDb, &format!("{}_maria", maria.name))?;
    executor::schema(&ns, &pg, "orders").await?;
    executor::migration(&ns, &maria, "catalog").await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let patience = Patience::new(Duration::from_secs(240), Duration::from_millis(250));
    ns.until(
        &patience,
        "orders",
        "the schema InSync",
        |s: &PtahSchema| s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync),
    )
    .await
    .with_context(|| manager.log())?;
    ns.until(
        &patience,
        "catalog",
        "the migration run and read back",
        |m: &PtahMigration| {
            m.status
                .as_ref()
                .is_some_and(|st| st.phase == Some(MigrationPhase::InSync) && st.last_run.is_some())
        },
    )
    .await
    .with_context(|| manager.log())?;
    // The schema's change reached the tracing backend before the manager
    // goes (it is killed, and takes what it has not sent with it).
    {
        use conformance::testkit::traces::{TraceQuery, TracesClient};
        TracesClient::of(harness)?
            .wait_for_trace(
                &TraceQuery::service("ptah-operator")
                    .operation("change")
                    .tag("ptah.resource", format!("{}/orders", ns.name())),
                patience,
            )
            .await?;
    }
    let name = ns.name().to_string();
    // The namespace (and its Pods' logs) stay for the scan.
    std::mem::forget(ns);
    drop(manager);
    Ok(name)
}

#[tokio::test(flavor = "multi_thread")]
async fn no_credential_appears_in_output_or_logs() {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    let state = &harness.state;
    let executor_ns = run_the_executor(harness)
        .await
        .expect("the executor's Jobs ran");

    // Every secret the harness made; not vacuous: each kind was read.
    let (secrets, pki_keys) = collect_secrets(state);
    let has = |prefix: &str| secrets.0.iter().any(|s| s.source.starts_with(prefix));
    for source in [
        "secrets/postgres.password",
        "secrets/mariadb.password",
        "secrets/git-http.credentials (password)",
        "secrets/git-ssh-client.key (body line",
    ] {
        assert!(has(source), "no secret read from {source}");
    }
    // The URLs hold the same passwords as the password files.
    for url in ["postgres.url", "mariadb.url"] {
        let text = fs::read_to_string(state.join("secrets").join(url)).expect("database URL file");
        let passwords = url_password(&text);
        assert!(!passwords.is_empty(), "secrets/{url} holds no password");
        assert!(
            passwords
                .iter()
                .all(|p| secrets.0.iter().any(|s| &s.value == p)),
            "the password of secrets/{url} was not collected"
        );
    }
    assert!(pki_keys >= 3, "only {pki_keys} PKI private keys read");
    assert!(
        secrets.0.len() >= 10,
        "only {} secret values read",
        secrets.0.len()
    );

    // Everything that is output or a log.
    let env_file = harness.env_file();
    let mut scanned = vec![
        (
            env_file.display().to_string(),
            fs::read_to_string(&env_file).expect("the env file"),
        ),
        (
            "`ptah-harness status`".into(),
            harness_command(state, "status"),
        ),
        ("`ptah-harness env`".into(), harness_command(state, "env")),
    ];
    let (harness_logs, pod_logs) = log_paths(state);
    let harness_scanned = read_all(&harness_logs);
    let pods_scanned = read_all(&pod_logs);
    assert!(
        harness_scanned.len() >= 8,
        "only {} harness logs under {}",
        harness_scanned.len(),
        state.join("logs").display()
    );
    // The executor's Jobs are among them: every database operation.
    for job in [
        "ptah-observe-",
        "ptah-plan-",
        "ptah-apply-",
        "ptah-m-history-",
        "ptah-m-apply-",
    ] {
        let dir = format!("{executor_ns}_{job}");
        assert!(
            pods_scanned
                .iter()
                .any(|(name, text)| name.contains(&dir) && text.contains("StepResult")),
            "no log of a {job}… Pod in {executor_ns} was scanned"
        );
    }
    // The traces the tracing backend stored: the manager's and every Job's,
    // this run's among them. They hold no SQL either.
    let stored = stored_traces(harness, &executor_ns)
        .await
        .expect("the backend's stored traces");
    assert!(
        !stored.contains("CREATE TABLE") && !stored.contains("DROP TABLE"),
        "SQL text in the backend's stored traces"
    );
    scanned.push(("the tracing backend's stored traces".into(), stored));
    let (n_harness_logs, n_pod_logs) = (harness_scanned.len(), pods_scanned.len());
    scanned.extend(harness_scanned);
    scanned.extend(pods_scanned);
    let bytes: usize = scanned.iter().map(|(_, t)| t.len()).sum();

    let leaks = leaks(&secrets, &scanned);
    assert!(
        leaks.is_empty(),
        "credentials leaked ({} places):\n{}",
        leaks.len(),
        leaks.join("\n")
    );
    eprintln!(
        "checked {} secret values against {} outputs and logs \
         ({n_harness_logs} harness logs, {n_pod_logs} container logs, {bytes} bytes)",
        secrets.0.len(),
        scanned.len()
    );
}

/// Every trace the harness's Jaeger holds of the manager and the runner, as
/// text; not vacuous: the spans of `executor_ns`'s changes are among them.
async fn stored_traces(harness: &'static Harness, executor_ns: &str) -> anyhow::Result<String> {
    use conformance::testkit::traces::{TraceQuery, TracesClient};
    let client = TracesClient::of(harness)?;
    let resource = format!("{executor_ns}/orders");
    let mine = client
        .find(
            &TraceQuery::service("ptah-operator")
                .operation("change")
                .tag("ptah.resource", &resource),
        )
        .await?;
    anyhow::ensure!(!mine.is_empty(), "no trace of {resource}: nothing to scan");
    let mut text = String::new();
    let mut runner_spans = 0;
    for service in ["ptah-operator", "ptah-runner"] {
        let traces = client
            .find(
                &TraceQuery::service(service)
                    .limit(5000)
                    .lookback(Duration::from_secs(24 * 3600)),
            )
            .await?;
        if service == "ptah-runner" {
            runner_spans = traces.iter().map(|t| t.spans.len()).sum();
        }
        text.push_str(&format!("{traces:?}\n"));
    }
    anyhow::ensure!(runner_spans > 0, "no runner span stored: nothing to scan");
    Ok(text)
}

/// The check finds a planted leak, in a pod log, by the secret's source, and
/// its message never holds the secret.
#[test]
fn a_planted_leak_is_found_and_named_without_the_secret() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path();
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    let password = "0f3c9a7be21d4c58a6e1";
    let key_line = "QyNTUxOQAAACBvZXhhbXBsZS1ub3QtYS1yZWFsLWtleS1ib2R5LWxpbmUtdHdv";
    write("secrets/postgres.password", password);
    write(
        "secrets/postgres.url",
        &format!("postgres://postgres:{password}@127.0.0.1:5432/postgres\n"),
    );
    write(
        "secrets/git-http.credentials",
        "ptah:9b8a7c6d5e4f3a2b1c0d\n",
    );
    write(
        "secrets/git-ssh-client.key",
        &format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n\
             b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
             {key_line}\n\
             -----END OPENSSH PRIVATE KEY-----\n"
        ),
    );
    write(
        "secrets/git-ssh-client.key.pub",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 harness\n",
    );
    write("logs/etcd.log", "a clean log: user ptah connected\n");
    write(
        "kubelet/pods/ns_pod_uid/main.log",
        &format!("connecting to postgres://postgres:{password}@127.0.0.1/\n"),
    );
    write(
        "kubelet/pods/ns_pod_uid/init.log",
        &format!("key: {key_line}\n"),
    );

    let (secrets, pki_keys) = collect_secrets(dir);
    assert_eq!(pki_keys, 0);
    // The constant OpenSSH header line is no secret; the user is none either.
    assert!(
        secrets
            .found_in("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW")
            .is_empty()
    );
    assert!(
        secrets
            .found_in("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 harness ptah")
            .is_empty()
    );

    let (harness_logs, pod_logs) = log_paths(dir);
    assert_eq!((harness_logs.len(), pod_logs.len()), (1, 2));
    let mut scanned = read_all(&harness_logs);
    scanned.extend(read_all(&pod_logs));
    let mut found = leaks(&secrets, &scanned);
    found.sort();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].ends_with("init.log: holds the value of secrets/git-ssh-client.key (body line 2)"),
        "{found:?}"
    );
    assert!(
        found[1].ends_with("main.log: holds the value of secrets/postgres.password"),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .all(|l| !l.contains(password) && !l.contains(key_line))
    );
}

#[test]
fn url_passwords_are_extracted_and_decoded() {
    assert_eq!(
        url_password("postgres://postgres:s3cr%40t@127.0.0.1:5432/db?sslmode=disable\n"),
        vec!["s3cr%40t".to_string(), "s3cr@t".to_string()]
    );
    assert_eq!(
        url_password("mysql://ptah:abc@h:1/mysql"),
        vec!["abc".to_string()]
    );
    assert!(url_password("postgres://postgres@h/db").is_empty());
    assert!(url_password("no url").is_empty());
    // A password holding `@` (only legal percent-encoded, but seen raw).
    assert_eq!(url_password("x://u:p@q@h/"), vec!["p@q".to_string()]);
}

#[test]
fn short_and_duplicate_values_are_skipped() {
    let mut s = Secrets::default();
    s.add("a", "");
    s.add("b", "  short ");
    s.add("c", "long enough value");
    s.add("d", "long enough value");
    assert_eq!(s.0.len(), 1);
    assert_eq!(s.found_in("xx long enough value xx"), vec!["c"]);
    assert!(s.found_in("long enough").is_empty());
}
