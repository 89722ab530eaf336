//! `ptah-runner`'s source steps end to end: real Jobs made by the Job
//! builder (`build_job`), run by the real Job controller and the process
//! kubelet, against the harness's real git daemon and OCI registry, with
//! signatures by the real pinned cosign.
//!
//! * A ConfigMap snapshot (made with `supplychain::snapshot`, created
//!   immutable) is checked by the `source` init container and its files are
//!   read by the main container from `/source`.
//! * The same snapshot name recreated with one file changed makes the init
//!   container refuse: its termination message names the file, and the
//!   container holding the database URL never starts.
//! * A Git fetch init container fetches the recorded commit from the git
//!   daemon, and refuses a wrong content digest.
//! * A Resolve Job answers the digest a tag names on the plain-HTTP registry.
//! * A Git Resolve Job under a source policy (`--source-policy`) is refused,
//!   naming the rule and reporting no commit, when the commit's selected
//!   files exceed `maxContentSize`, and answers the commit with the policy's
//!   digest under a generous one; a host the policy refuses is refused by the
//!   manager's `check_git_host` before any Job is made.
//! * A Verify Job accepts a cosign-signed artifact under a policy with the
//!   signer's key, and refuses it under another key, naming the rule.
//!
//! The database operations (Observe here) run the Ptah executor, which the
//! harness does not have (docs/executor.md): where the step under test is the
//! init container, the main container's command is replaced by a shell that
//! lists `/source`, so what the init container copied is observable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStateTerminated, ContainerStatus, Pod, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use conformance::gitserve::{Endpoints, commit_files, create_repo, parse_env_file};
use conformance::harness::{EXECUTOR_IMAGE_PINNED, Harness, OPERATOR_IMAGE_PINNED};
use conformance::testkit::job::{pod_spec, secret_names};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::oci::{
    key_pair, key_policy, pull_schema, push_foreign_type, push_schema, run_ok, sha256, sign_command,
};
use conformance::testkit::wait::Patience;
use operator::api::common::ConfigMapKeyRef;
use operator::api::source::{
    GitRef, OciTransport, RegistryAuth as SourceRegistryAuth, RegistryAuthMode,
};
use operator::api::status::OperationType;
use operator::execution::examples::{self, Kind};
use operator::execution::job::{
    GitInput, Images, JobInput, OPERATION_CONTAINER, OciInput, OwnerKind, SOURCE_CONTAINER,
    SourceInput, build_job,
};
use operator::execution::source_policy::check_git_host;
use operator::testing;
use supplychain::manifest::{Limits, Manifest};
use supplychain::oci::SCHEMA_ARTIFACT_TYPE;
use supplychain::snapshot::{self, SourceConfigMap};
use supplychain::source_policy::{SourcePolicy, policy_digest};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Every wait of these tests: at most [`TIMEOUT`], looking every 250 ms.
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(250));

/// One test's namespace with a real PtahSchema owner (so the garbage
/// collector keeps the Jobs), deleted at the end, also when the test fails
/// (see [`TestNamespace`]).
struct Scope {
    harness: &'static Harness,
    ns: String,
    owner_uid: String,
    namespace: TestNamespace,
}

impl std::ops::Deref for Scope {
    type Target = TestNamespace;
    fn deref(&self) -> &TestNamespace {
        &self.namespace
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        let namespace = TestNamespace::new(
            harness,
            "rs",
            test,
            NamespaceSpec::default()
                .with_crds()
                .with_service_account(TIMEOUT),
        )
        .await?;
        let ns = namespace.name().to_owned();
        let mut schema = testing::schema_example();
        schema.metadata = serde_json::from_value(json!({"name": "orders", "namespace": ns}))?;
        schema.status = None;
        let schema = namespace
            .api()
            .create(&PostParams::default(), &schema)
            .await
            .context("creating the PtahSchema owner")?;
        Ok(Scope {
            harness,
            ns,
            owner_uid: schema.metadata.uid.context("schema uid")?,
            namespace,
        })
    }

    /// The example input of `op` on `kind`, made real: this namespace's
    /// owner, a unique operation id, the harness's images, no receiver CA,
    /// an execution deadline ten minutes from now.
    fn input(&self, op: OperationType, kind: Kind, source: SourceInput, n: u8) -> JobInput {
        let mut input = examples::example(OwnerKind::PtahSchema, op, kind, &self.ns);
        input.owner.uid = self.owner_uid.clone();
        input.claim.operation_id = examples::digest(n);
        input.claim.dispatch_not_after = None;
        input.claim.execution_not_after = k8s_openapi::jiff::Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(600))
            .ok()
            .map(Time);
        input.images = Images {
            runner: OPERATOR_IMAGE_PINNED.into(),
            executor: EXECUTOR_IMAGE_PINNED.into(),
        };
        input.result.receiver_ca = None;
        input.source = source;
        input
    }

    /// Creates every Secret the Job's Pod names (the database URL, the
    /// result token) with throwaway values, then the Job; answers its Pod
    /// once it has finished.
    async fn run(&self, job: &Job) -> anyhow::Result<Pod> {
        let secret_names = secret_names(pod_spec(job)?);
        let secrets: Api<Secret> = self.api();
        for name in secret_names {
            let obj: Secret = serde_json::from_value(json!({
                "metadata": {"name": name},
                "stringData": {"url": "postgres://u:db-password-never-read@127.0.0.1:1/orders", "token": "result-token"},
            }))?;
            match secrets.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let name = job.metadata.name.clone().context("job name")?;
        self.api::<Job>()
            .create(&PostParams::default(), job)
            .await
            .with_context(|| format!("creating Job {name}"))?;
        let pods: Api<Pod> = self.api();
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        PATIENCE
            .poll(&format!("the Pod of Job {name} to finish"), || async {
                Ok(pods.list(&lp).await?.items.into_iter().find(|p| {
                    matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                }))
            })
            .await
    }

    fn read_log(&self, pod: &Pod, container: &str) -> anyhow::Result<String> {
        let path = conformance::kubelet::log_path(&self.harness.kubelet_dir(), pod, container);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    fn vars(&self) -> anyhow::Result<BTreeMap<String, String>> {
        parse_env_file(&self.harness.env()?)
    }
}

fn status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let s = pod.status.as_ref()?;
    s.init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .find(|c| c.name == container)
}

fn terminated(pod: &Pod, container: &str) -> anyhow::Result<ContainerStateTerminated> {
    status(pod, container)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .with_context(|| format!("container {container} has not terminated: {:?}", pod.status))
}

/// The runner's termination-message summary.
fn summary(t: &ContainerStateTerminated) -> anyhow::Result<Value> {
    let text = t.message.as_deref().context("no termination message")?;
    assert!(text.len() <= 4096, "{} bytes", text.len());
    serde_json::from_str(text).with_context(|| format!("the summary is not JSON: {text}"))
}

/// The container holding the database URL never ran: no container id, and
/// still waiting for the init container (`PodInitializing`), never running
/// nor terminated.
fn never_started(pod: &Pod, container: &str) {
    let s = status(pod, container);
    let Some(c) = s else {
        panic!("no status of {container}: {:?}", pod.status)
    };
    assert_eq!(c.container_id, None, "{container} ran: {c:?}");
    assert_ne!(c.started, Some(true), "{container} ran: {c:?}");
    let state = c.state.as_ref();
    assert_eq!(
        state
            .and_then(|st| st.waiting.as_ref())
            .and_then(|w| w.reason.as_deref()),
        Some("PodInitializing"),
        "{container}: {c:?}"
    );
    assert!(
        state.is_none_or(|st| st.running.is_none() && st.terminated.is_none()),
        "{container} ran: {c:?}"
    );
    assert!(
        c.last_state
            .as_ref()
            .is_none_or(|l| l.terminated.is_none() && l.running.is_none()),
        "{container} ran: {c:?}"
    );
}

/// The main container replaced by a shell that shows `/source` (the
/// executor image has no Ptah in the harness; the step under test is the
/// init container).
fn observe_source(job: &mut Job) -> anyhow::Result<()> {
    let pod = job
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .context("pod spec")?;
    let main = pod
        .containers
        .iter_mut()
        .find(|c| c.name == OPERATION_CONTAINER)
        .context("the operation container")?;
    assert!(
        main.env.iter().flatten().any(|e| e.name == "PTAH_DB_URL"),
        "the operation container holds the database URL"
    );
    main.command = Some(vec!["sh".into(), "-c".into()]);
    main.args = Some(vec![
        "cd /source && for f in $(find . -type f | sort); do echo \"== $f\"; cat \"$f\"; done"
            .into(),
    ]);
    Ok(())
}

const INIT_SQL: &str = "CREATE TABLE a (id int);\n";
const MORE_SQL: &str = "CREATE TABLE b (id int);\n";

/// The snapshot ConfigMap of `snap`, immutable, as the manager writes it.
fn snapshot_config_map(
    name: &str,
    data: BTreeMap<String, String>,
    binary: BTreeMap<String, Vec<u8>>,
) -> anyhow::Result<ConfigMap> {
    let mut cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    cm.immutable = Some(true);
    cm.data = Some(data);
    cm.binary_data = (!binary.is_empty()).then(|| {
        binary
            .into_iter()
            .map(|(k, v)| (k, ByteString(v)))
            .collect()
    });
    Ok(cm)
}

fn take_snapshot(owner_uid: &str) -> anyhow::Result<snapshot::Snapshot> {
    let source = SourceConfigMap {
        data: BTreeMap::from([
            ("001_init.sql".to_string(), INIT_SQL.to_string()),
            ("002_more.sql".to_string(), MORE_SQL.to_string()),
            ("notes.txt".to_string(), "not selected\n".to_string()),
        ]),
        binary_data: BTreeMap::new(),
    };
    Ok(snapshot::take(
        &source,
        &["001_init.sql".to_string(), "002_more.sql".to_string()],
        owner_uid,
        &Limits::default(),
    )?)
}

#[tokio::test]
async fn a_configmap_snapshot_is_checked_and_its_files_reach_the_operation_container()
-> anyhow::Result<()> {
    let scope = Scope::new("cm").await?;
    let snap = take_snapshot(&scope.owner_uid)?;
    scope
        .api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &snapshot_config_map(&snap.name, snap.data(), snap.binary_data())?,
        )
        .await?;
    let input = scope.input(
        OperationType::Observe,
        Kind::ConfigMap,
        SourceInput::ConfigMap {
            snapshot_name: snap.name.clone(),
            content_digest: snap.content_digest.clone(),
        },
        0x01,
    );
    let mut job = build_job(&input)?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;

    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 0, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["step"], "source check");
    assert_eq!(s["digest"], snap.content_digest.as_str());
    // The full result document is in the init container's log.
    let log = scope.read_log(&pod, SOURCE_CONTAINER)?;
    let doc: Value = serde_json::from_str(log.trim()).with_context(|| log.clone())?;
    assert_eq!(doc["kind"], "StepResult");
    assert_eq!(doc["result"]["type"], "SnapshotChecked");
    let files: Vec<&str> = doc["result"]["files"]
        .as_array()
        .context("files")?
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(files, ["001_init.sql", "002_more.sql"]);

    // The operation container read exactly the selected files, not the
    // manifest and not the unselected key.
    let main = terminated(&pod, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 0, "{main:?}");
    let shown = scope.read_log(&pod, OPERATION_CONTAINER)?;
    assert_eq!(
        shown,
        format!("== ./001_init.sql\n{INIT_SQL}== ./002_more.sql\n{MORE_SQL}"),
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    drop(scope);
    Ok(())
}

#[tokio::test]
async fn a_tampered_snapshot_is_refused_naming_the_file_before_the_database_url_container()
-> anyhow::Result<()> {
    let scope = Scope::new("tamper").await?;
    let snap = take_snapshot(&scope.owner_uid)?;
    let config_maps = scope.api::<ConfigMap>();
    config_maps
        .create(
            &PostParams::default(),
            &snapshot_config_map(&snap.name, snap.data(), snap.binary_data())?,
        )
        .await?;
    // The snapshot is immutable: tampering means deleting it and making it
    // again under the same name, with one file changed and the manifest kept.
    config_maps
        .delete(&snap.name, &DeleteParams::default())
        .await?;
    PATIENCE
        .poll("the snapshot to go", || async {
            Ok(config_maps
                .get_opt(&snap.name)
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
    let mut data = snap.data();
    data.insert("002_more.sql".into(), "DROP TABLE a;\n".into());
    config_maps
        .create(
            &PostParams::default(),
            &snapshot_config_map(&snap.name, data, snap.binary_data())?,
        )
        .await?;

    let input = scope.input(
        OperationType::Observe,
        Kind::ConfigMap,
        SourceInput::ConfigMap {
            snapshot_name: snap.name.clone(),
            content_digest: snap.content_digest.clone(),
        },
        0x02,
    );
    let mut job = build_job(&input)?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 1, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Refused", "{s}");
    assert_eq!(s["file"], "002_more.sql", "{s}");
    assert_eq!(s["rule"], "manifest", "{s}");
    assert!(
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("002_more.sql")),
        "{s}"
    );
    never_started(&pod, OPERATION_CONTAINER);
    drop(scope);
    Ok(())
}

fn manifest_digest(files: &[(&str, &str)]) -> String {
    Manifest::from_files(
        files.iter().map(|(p, t)| (*p, t.as_bytes())),
        &Limits::default(),
    )
    .map(|m| m.digest())
    .unwrap_or_default()
}

#[tokio::test]
async fn a_git_fetch_init_container_fetches_the_recorded_commit_and_refuses_a_wrong_digest()
-> anyhow::Result<()> {
    let scope = Scope::new("git").await?;
    let ep = Endpoints::from_env_file(scope.harness)?;
    let name = format!("runner-{}", scope.ns);
    let bare = create_repo(&ep.root, &name, true)?;
    let commit = commit_files(
        &bare,
        "main",
        &[
            ("db/schema.sql", "create table a();\n"),
            ("db/more/b.sql", "create table b();\n"),
            ("README", "not selected\n"),
        ],
        "one",
    )?;
    let digest = manifest_digest(&[
        ("schema.sql", "create table a();\n"),
        ("more/b.sql", "create table b();\n"),
    ]);
    let git = |content_digest: &str| {
        SourceInput::Git(GitInput {
            url: ep.daemon_repo(&name),
            git_ref: GitRef {
                branch: Some("main".into()),
                tag: None,
                commit: None,
            },
            commit: Some(commit.clone()),
            path: Some("db".into()),
            content_digest: Some(content_digest.to_string()),
            secret_name: None,
            source_policy: None,
        })
    };

    let mut job = build_job(&scope.input(OperationType::Observe, Kind::Git, git(&digest), 0x03))?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;
    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 0, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["commit"], commit.as_str());
    assert_eq!(s["digest"], digest.as_str());
    let shown = scope.read_log(&pod, OPERATION_CONTAINER)?;
    assert_eq!(
        shown,
        "== ./more/b.sql\ncreate table b();\n== ./schema.sql\ncreate table a();\n"
    );

    // The digest of other content: refused, the operation container never runs.
    let wrong = manifest_digest(&[("schema.sql", "create table z();\n")]);
    let mut job = build_job(&scope.input(OperationType::Observe, Kind::Git, git(&wrong), 0x04))?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;
    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 1, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Refused", "{s}");
    assert_eq!(s["rule"], "contentDigest", "{s}");
    assert!(
        s["message"].as_str().is_some_and(|m| m.contains(&wrong)),
        "{s}"
    );
    never_started(&pod, OPERATION_CONTAINER);
    drop(scope);
    Ok(())
}

fn oci(reference: String, policy: Option<&str>) -> SourceInput {
    SourceInput::Oci(OciInput {
        reference,
        auth: None,
        // The harness registry speaks plain HTTP: `transport.plainHTTP`,
        // which the builder hands over as `--plain-http`.
        transport: Some(OciTransport {
            plain_http: true,
            ca_from: None,
        }),
        verification_policy: policy.map(|name| operator::api::common::ConfigMapKeyRef {
            name: name.into(),
            key: "policy.yaml".into(),
        }),
        flux_content: None,
    })
}

#[tokio::test]
async fn an_oci_fetch_init_container_fetches_the_artifact_by_digest_and_refuses_another_type()
-> anyhow::Result<()> {
    let scope = Scope::new("ocifetch").await?;
    let host = scope
        .vars()?
        .get("PTAH_REGISTRY")
        .cloned()
        .context("PTAH_REGISTRY")?;
    let repository = format!("ptah-conformance/runner-{}", scope.ns);
    let schema = b"table \"orders\" { schema = schema.public }\n";
    let pushed = push_schema(&format!("{host}/{repository}:v1"), schema).await?;
    let digest = pushed.digest.clone();
    // The CLI stores its canonical rendering: what the init container
    // copies is what `ptah schema pull` reads back.
    let canonical = pull_schema(&pushed.pinned).await?;

    let input = scope.input(
        OperationType::Observe,
        Kind::Oci,
        oci(format!("oci://{host}/{repository}@{digest}"), None),
        0x0a,
    );
    let mut job = build_job(&input)?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;
    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 0, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["step"], "source fetch oci");
    assert_eq!(s["digest"], digest.as_str());
    let shown = scope.read_log(&pod, OPERATION_CONTAINER)?;
    assert_eq!(
        shown,
        format!("== ./schema.hcl\n{}", String::from_utf8_lossy(&canonical))
    );

    // An artifact of another type under a digest: refused before the
    // operation container starts, the rule named.
    let other = push_foreign_type(
        &format!("{host}/{repository}:other"),
        "application/vnd.example.not-ptah.v1",
        &canonical,
    )
    .await?
    .digest;
    let input = scope.input(
        OperationType::Observe,
        Kind::Oci,
        oci(format!("oci://{host}/{repository}@{other}"), None),
        0x0b,
    );
    let mut job = build_job(&input)?;
    observe_source(&mut job)?;
    let pod = scope.run(&job).await?;
    let init = terminated(&pod, SOURCE_CONTAINER)?;
    assert_eq!(init.exit_code, 1, "{init:?}");
    let s = summary(&init)?;
    assert_eq!(s["outcome"], "Refused", "{s}");
    assert_eq!(s["rule"], "artifactType", "{s}");
    never_started(&pod, OPERATION_CONTAINER);
    drop(scope);
    Ok(())
}

#[tokio::test]
async fn a_resolve_job_answers_the_digest_of_an_oci_tag() -> anyhow::Result<()> {
    let scope = Scope::new("resolve").await?;
    let host = scope
        .vars()?
        .get("PTAH_REGISTRY")
        .cloned()
        .context("PTAH_REGISTRY")?;
    let repository = format!("ptah-conformance/runner-{}", scope.ns);
    let digest = push_schema(
        &format!("{host}/{repository}:v1"),
        b"schema \"public\" {}\n",
    )
    .await?
    .digest;

    let input = scope.input(
        OperationType::Resolve,
        Kind::Oci,
        oci(format!("oci://{host}/{repository}:v1"), None),
        0x05,
    );
    let job = build_job(&input)?;
    let pod = scope.run(&job).await?;
    let main = terminated(&pod, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 0, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["step"], "resolve oci");
    assert_eq!(s["digest"], digest.as_str());

    // The result document (in the log until the receiver of issue 5) is the
    // supplychain resolution, bound to this operation and this Pod.
    let log = scope.read_log(&pod, OPERATION_CONTAINER)?;
    let doc = result_document(&log)?;
    assert_eq!(doc["result"]["type"], "OciResolved");
    let resolution = &doc["result"]["resolution"];
    assert_eq!(resolution["digest"], digest.as_str());
    assert_eq!(resolution["revision"], format!("v1@{digest}"));
    assert_eq!(resolution["artifactType"], SCHEMA_ARTIFACT_TYPE);
    assert_eq!(
        resolution["resolvedReference"],
        format!("oci://{host}/{repository}@{digest}")
    );
    assert_eq!(
        doc["operation"]["operationId"],
        examples::digest(0x05).as_str()
    );
    assert_eq!(doc["operation"]["resourceUid"], scope.owner_uid.as_str());
    assert_eq!(
        doc["operation"]["podName"],
        pod.metadata.name.as_deref().unwrap_or_default()
    );

    // Environment-mode registry credentials go to the registry their
    // Secret names, and nowhere else; the password shows in no output.
    let password = format!("reg-pass-{}", scope.ns);
    let secrets = scope.api::<Secret>();
    for (name, registry) in [
        ("creds-here", host.as_str()),
        ("creds-elsewhere", "registry.example.com"),
    ] {
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "stringData": {"username": "ptah", "password": password, "registry": registry},
                }))?,
            )
            .await?;
    }
    let with_auth = |secret: &str, n: u8| {
        let mut input = scope.input(
            OperationType::Resolve,
            Kind::Oci,
            oci(format!("oci://{host}/{repository}:v1"), None),
            n,
        );
        if let SourceInput::Oci(o) = &mut input.source {
            o.auth = Some(SourceRegistryAuth {
                name: secret.into(),
                mode: RegistryAuthMode::Environment,
                username_key: "username".into(),
                password_key: "password".into(),
                token_key: "token".into(),
                docker_config_json_key: ".dockerconfigjson".into(),
            });
        }
        input
    };
    let here = scope
        .run(&build_job(&with_auth("creds-here", 0x08))?)
        .await?;
    let main = terminated(&here, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 0, "{main:?}");
    assert_eq!(summary(&main)?["digest"], digest.as_str());
    let elsewhere = scope
        .run(&build_job(&with_auth("creds-elsewhere", 0x09))?)
        .await?;
    let main = terminated(&elsewhere, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 1, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["rule"], "registryAuthFrom.registry", "{s}");
    for pod in [&here, &elsewhere] {
        let log = scope.read_log(pod, OPERATION_CONTAINER)?;
        let message = terminated(pod, OPERATION_CONTAINER)?
            .message
            .unwrap_or_default();
        assert!(!log.contains(&password), "{log}");
        assert!(!message.contains(&password), "{message}");
    }
    drop(scope);
    Ok(())
}

#[tokio::test]
async fn a_verify_job_accepts_the_signers_key_and_refuses_another_naming_the_rule()
-> anyhow::Result<()> {
    let scope = Scope::new("verify").await?;
    let vars = scope.vars()?;
    let host = vars
        .get("PTAH_REGISTRY")
        .cloned()
        .context("PTAH_REGISTRY")?;
    let bin = PathBuf::from(vars.get("PTAH_TOOLS_BIN").context("PTAH_TOOLS_BIN")?).join("cosign");
    let repository = format!("ptah-conformance/runner-{}", scope.ns);
    let digest = push_schema(
        &format!("{host}/{repository}:v1"),
        b"schema \"public\" {}\n",
    )
    .await?
    .digest;

    // A keyed legacy `.sig` signature by the real cosign, offline.
    let work = tempfile::tempdir()?;
    let signer = key_pair(&bin, &work.path().join("signer"), "pw")?;
    let (public, other) = (
        signer.public_pem.clone(),
        key_pair(&bin, &work.path().join("other"), "pw")?.public_pem,
    );
    run_ok(
        "cosign sign",
        &mut sign_command(
            &bin,
            work.path(),
            &signer,
            &format!("{host}/{repository}@{digest}"),
            true,
            None,
        ),
    )?;
    let config_maps = scope.api::<ConfigMap>();
    for (name, pem) in [("signer-policy", &public), ("other-policy", &other)] {
        config_maps
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "data": {"policy.yaml": key_policy(pem)},
                }))?,
            )
            .await?;
    }
    let reference = format!("oci://{host}/{repository}@{digest}");

    let accepted = scope
        .run(&build_job(&scope.input(
            OperationType::Verify,
            Kind::Oci,
            oci(reference.clone(), Some("signer-policy")),
            0x06,
        ))?)
        .await?;
    let main = terminated(&accepted, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 0, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["digest"], digest.as_str());
    let log = scope.read_log(&accepted, OPERATION_CONTAINER)?;
    let doc = result_document(&log)?;
    assert_eq!(doc["result"]["type"], "OciVerified");
    let evidence = &doc["result"]["evidence"];
    assert_eq!(evidence["artifactDigest"], digest.as_str());
    assert_eq!(
        evidence["policyDigest"],
        sha256(key_policy(&public).as_bytes())
    );
    assert_eq!(evidence["signatures"][0]["authority"], "release");
    assert_eq!(evidence["signatures"][0]["format"], "legacy");

    let refused = scope
        .run(&build_job(&scope.input(
            OperationType::Verify,
            Kind::Oci,
            oci(reference, Some("other-policy")),
            0x07,
        ))?)
        .await?;
    let main = terminated(&refused, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 1, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["outcome"], "Refused", "{s}");
    assert_eq!(s["rule"], "authorities[release]", "{s}");
    assert!(
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("authorities[release]")),
        "{s}"
    );
    drop(scope);
    Ok(())
}

/// The authority (`host:port`) of a `scheme://authority/path` URL.
fn authority(url: &str) -> anyhow::Result<String> {
    let rest = url.split_once("://").context("scheme")?.1;
    Ok(rest.split('/').next().unwrap_or_default().to_string())
}

#[tokio::test]
async fn a_git_resolve_job_under_a_source_policy_refuses_too_much_content_naming_the_rule()
-> anyhow::Result<()> {
    let scope = Scope::new("gitpol").await?;
    let ep = Endpoints::from_env_file(scope.harness)?;
    let name = format!("policy-{}", scope.ns);
    let bare = create_repo(&ep.root, &name, true)?;
    let files = [
        ("db/schema.sql", "create table a();\n"),
        ("db/more/b.sql", "create table b();\n"),
        ("README", "not selected\n"),
    ];
    let commit = commit_files(&bare, "main", &files, "one")?;
    let selected_bytes: usize = files[..2].iter().map(|(_, t)| t.len()).sum();
    let digest = manifest_digest(&[
        ("schema.sql", "create table a();\n"),
        ("more/b.sql", "create table b();\n"),
    ]);
    let url = ep.daemon_repo(&name);
    let host = authority(&url)?;
    let tight = format!(
        "version: 1\nrules:\n  - git:\n      hosts: [\"{host}\"]\n      schemes: [git]\n  - git:\n      maxContentSize: {}\n",
        selected_bytes - 1
    );
    let generous = format!(
        "version: 1\nrules:\n  - git:\n      hosts: [\"{host}\"]\n      schemes: [git]\n      maxContentSize: {selected_bytes}\n      maxFiles: 2\n"
    );
    let config_maps = scope.api::<ConfigMap>();
    for (cm, policy) in [("tight-policy", &tight), ("generous-policy", &generous)] {
        // Both pass the manager's host check: only the runner can refuse them.
        check_git_host(&SourcePolicy::parse(policy.as_bytes())?, &url)?;
        config_maps
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": cm},
                    "data": {"policy.yaml": policy},
                }))?,
            )
            .await?;
    }
    let git = |policy: &str| {
        SourceInput::Git(GitInput {
            url: url.clone(),
            git_ref: GitRef {
                branch: Some("main".into()),
                tag: None,
                commit: None,
            },
            commit: None,
            path: Some("db".into()),
            content_digest: None,
            secret_name: None,
            source_policy: Some(ConfigMapKeyRef {
                name: policy.into(),
                key: "policy.yaml".into(),
            }),
        })
    };

    // Too much content: refused by the rule, and no commit is reported.
    let job =
        build_job(&scope.input(OperationType::Resolve, Kind::Git, git("tight-policy"), 0x08))?;
    let pod = scope.run(&job).await?;
    let main = terminated(&pod, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 1, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["outcome"], "Refused", "{s}");
    assert_eq!(s["step"], "resolve git", "{s}");
    assert_eq!(s["rule"], "rules[1] (git.maxContentSize)", "{s}");
    assert!(s.get("commit").is_none_or(Value::is_null), "{s}");
    assert!(s.get("digest").is_none_or(Value::is_null), "{s}");
    assert!(
        !main.message.clone().unwrap_or_default().contains(&commit),
        "{s}"
    );
    // The log holds the result document, then the runner's one-line report.
    let log = scope.read_log(&pod, OPERATION_CONTAINER)?;
    let doc = result_document(&log)?;
    assert!(doc.get("result").is_none_or(Value::is_null), "{doc}");
    assert_eq!(
        doc["error"]["rule"], "rules[1] (git.maxContentSize)",
        "{doc}"
    );
    assert!(!log.contains(&commit), "{log}");

    // Within the policy: the commit, bound to the policy's digest.
    let job = build_job(&scope.input(
        OperationType::Resolve,
        Kind::Git,
        git("generous-policy"),
        0x09,
    ))?;
    let pod = scope.run(&job).await?;
    let main = terminated(&pod, OPERATION_CONTAINER)?;
    assert_eq!(main.exit_code, 0, "{main:?}");
    let s = summary(&main)?;
    assert_eq!(s["outcome"], "Succeeded", "{s}");
    assert_eq!(s["commit"], commit.as_str(), "{s}");
    assert_eq!(s["digest"], digest.as_str(), "{s}");
    let log = scope.read_log(&pod, OPERATION_CONTAINER)?;
    let doc = result_document(&log)?;
    assert_eq!(doc["result"]["type"], "GitResolved", "{doc}");
    assert_eq!(doc["result"]["resolution"]["commit"], commit.as_str());
    assert_eq!(
        doc["result"]["sourcePolicyDigest"],
        policy_digest(generous.as_bytes())
    );
    drop(scope);
    Ok(())
}

#[tokio::test]
async fn a_host_the_source_policy_refuses_is_refused_before_any_resolve_job() -> anyhow::Result<()>
{
    let scope = Scope::new("githost").await?;
    let ep = Endpoints::from_env_file(scope.harness)?;
    let url = ep.daemon_repo(&format!("policy-{}", scope.ns));
    let policy = SourcePolicy::parse(
        b"version: 1\nrules:\n  - git:\n      hosts: [\"git.example.com\", \"*.corp.example\"]\n",
    )?;
    let refusal = check_git_host(&policy, &url).expect_err("the harness host is refused");
    assert_eq!(refusal.rule, Some(0));
    assert_eq!(refusal.field, "git.hosts");
    assert!(
        refusal
            .to_string()
            .starts_with("rules[0] (git.hosts): host 127.0.0.1"),
        "{refusal}"
    );
    // The manager makes the Job only after the check: none exists.
    let jobs = scope.api::<Job>().list(&ListParams::default()).await?;
    assert!(jobs.items.is_empty(), "{:?}", jobs.items);
    drop(scope);
    Ok(())
}

/// The result document in an operation container's log: the runner also
/// reports its delivery to the receiver there, on a line of its own.
fn result_document(log: &str) -> anyhow::Result<Value> {
    let start = log
        .lines()
        .position(|l| l.starts_with('{'))
        .with_context(|| format!("no result document in: {log}"))?;
    let rest = log.lines().skip(start).collect::<Vec<_>>().join("\n");
    serde_json::Deserializer::from_str(&rest)
        .into_iter::<Value>()
        .next()
        .context("no result document")?
        .with_context(|| log.to_string())
}
