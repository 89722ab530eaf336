//! An Apply Job fetches exactly its plan's bytes from the manager: the
//! receiver's plans route (`Receiver::plan_handler`) served in this test
//! process over TLS beside the results route; a plan published with
//! `plan::publish` for a real PtahSchema; an Apply claim and `status.plan`
//! written through the status subresource; a real schema Apply Job made by
//! the Job builder, run by the real Job controller and the process kubelet.
//!
//! * The runner fetches the plan with its token before anything else,
//!   checks its length and SHA-256 against `--plan-content-digest`, writes
//!   it to `/work`, and only then hands that file to `ptah schema apply`;
//!   here the database does not answer, so the result the receiver stored
//!   is Ptah's failure (an outcome the manager takes as unknown), never a
//!   refusal of the bytes.
//! * A forged token gets 401; a claim moved to another plan than
//!   `status.plan` gets 409 (`PlanMoved`); a PtahMigration gets 404.
//! * A plan whose chunk was replaced with other bytes is refused by the
//!   receiver naming the chunk (`read_back`'s refusal, 409 `PlanRefused`),
//!   and the runner of the next attempt refuses (exit 1, rule `plan`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::harness::{EXECUTOR_IMAGE_PINNED, OPERATOR_IMAGE_PINNED};
use conformance::testkit::job::{holds_a_jwt, pod_spec, pod_token, secret_names};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;
use operator::api::common::{ConfigMapKeyRef, SchemaTransactionMode};
use operator::api::plan::PtahSchemaPlanChunk;
use operator::api::schema::{PtahSchema, SchemaPlanSummary};
use operator::api::status::{ActiveOperation, OperationType};
use operator::execution::examples::{self, Kind};
use operator::execution::job::{
    ApplyInput, Images, OPERATION_CONTAINER, OwnerKind, ResultDelivery, SourceInput, build_job,
    job_name,
};
use operator::execution::plan::{self, PlanInput, chunk_object, content_digest};
use operator::execution::receiver::{self, RECEIVER_CA_CONFIGMAP, RECEIVER_CA_KEY, Receiver};
use operator::protocol::args::ResourceRef;
use operator::protocol::receiver::{
    MAX_RESULT_BYTES, PLANS_PATH, REASON_PLAN_REFUSED, RESULT_AUDIENCE, RESULTS_PATH, plan_path,
};
use operator::protocol::result::Outcome;
use operator::runner::deliver::{PlanAttempt, Sender};
use operator::runner::{EXIT_FAILED, EXIT_REFUSED};
use operator::server::{Routes, Tls, serve};
use operator::testing;
use supplychain::manifest::Limits;
use supplychain::snapshot::{self, SourceConfigMap};

const TIMEOUT: Duration = Duration::from_secs(180);
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(250));
const SCHEMA: &str = "orders";

/// A Ptah plan document of at least `n` bytes whose statements differ along
/// the way, so a chunk put in another's place is noticed.
fn plan_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut statements = Vec::new();
    let mut size = 0;
    while size < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let sql = format!("ALTER TABLE t{x:016x} ADD COLUMN c int");
        size += sql.len() + 48;
        statements.push(json!({"sql": sql, "severity": "warning", "reason": "adds a column"}));
    }
    let doc = json!({
        "format_version": 1,
        "name": format!("plan_{seed:012x}"),
        "dialect": "postgres",
        "from_fingerprint": examples::digest(23),
        "to_fingerprint": examples::digest(24),
        "destructive": false,
        "statements": statements,
    });
    serde_json::to_vec_pretty(&doc).expect("a plan document")
}

fn plan_input(bytes: Vec<u8>, snapshot: &snapshot::Snapshot) -> PlanInput {
    PlanInput {
        bytes,
        statement_count: 3,
        destructive: false,
        privilege_changes: vec![],
        dialect: "postgres".into(),
        source: testing::configmap_binding(
            snapshot.content_digest.clone(),
            Some(snapshot.name.as_str()),
        ),
        coordination_digest: examples::digest(13),
        target_identity_digest: examples::digest(14),
        actual_state_fingerprint: examples::digest(23),
        desired_state_fingerprint: examples::digest(24),
        execution_binding: testing::execution_binding(),
    }
}

/// The snapshot the Apply's `source` init container checks.
fn take_snapshot(owner_uid: &str) -> anyhow::Result<snapshot::Snapshot> {
    let source = SourceConfigMap {
        data: BTreeMap::from([(
            "schema.sql".to_string(),
            "CREATE TABLE orders (id int);\n".to_string(),
        )]),
        binary_data: BTreeMap::new(),
    };
    Ok(snapshot::take(
        &source,
        &["schema.sql".to_string()],
        owner_uid,
        &Limits::default(),
    )?)
}

fn snapshot_config_map(snap: &snapshot::Snapshot) -> anyhow::Result<ConfigMap> {
    let mut cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": snap.name}}))?;
    cm.immutable = Some(true);
    cm.data = Some(snap.data());
    let binary = snap.binary_data();
    cm.binary_data = (!binary.is_empty()).then(|| {
        binary
            .into_iter()
            .map(|(k, v)| (k, ByteString(v)))
            .collect()
    });
    Ok(cm)
}

/// The Apply claim of `plan` at `attempt`.
fn apply_claim(
    operation_id: &str,
    input_fingerprint: &str,
    attempt: i32,
    plan: &SchemaPlanSummary,
    execution_not_after: Option<Time>,
) -> anyhow::Result<ActiveOperation> {
    let job = job_name(
        OwnerKind::PtahSchema,
        OperationType::Apply,
        SCHEMA,
        operation_id,
        attempt,
    )?;
    Ok(ActiveOperation {
        type_: OperationType::Apply,
        operation_id: operation_id.into(),
        input_fingerprint: input_fingerprint.into(),
        job_name: Some(job),
        job_uid: None,
        attempt,
        started_at: Time(k8s_openapi::jiff::Timestamp::now()),
        retry_not_before: None,
        dispatch_started: true,
        dispatch_not_after: None,
        execution_not_after,
        execution_epoch: None,
        source: None,
        coordination_digest: None,
        target_identity_digest: None,
        lease_epoch: None,
        lease_duration_seconds: None,
        lease_continuity_lost: false,
        plan_name: Some(plan.name.clone()),
        plan_uid: Some(plan.uid.clone()),
        plan_fingerprint: Some(plan.fingerprint.clone()),
        authorization: None,
        approval_name: None,
        approval_uid: None,
        approver: None,
        admission_snapshot_digest: None,
    })
}

/// The status and reason of one plan request; the bytes when answered.
fn answer_of(a: &PlanAttempt) -> anyhow::Result<(u16, String, Option<Vec<u8>>)> {
    match a {
        PlanAttempt::Fetched(p) => Ok((200, String::new(), Some(p.bytes.clone()))),
        PlanAttempt::Answered { status, answer } => Ok((
            *status,
            answer
                .as_ref()
                .map(|a| format!("{}: {}", a.reason, a.message))
                .unwrap_or_default(),
            None,
        )),
        other => anyhow::bail!("no answer: {other:?}"),
    }
}

struct Scope {
    ns: TestNamespace,
    namespace: String,
    schemas: Api<PtahSchema>,
    results_url: String,
    ca_pem: String,
}

impl Scope {
    async fn write_status(&self, status: serde_json::Value) -> anyhow::Result<()> {
        self.schemas
            .patch_status(
                SCHEMA,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .context("writing the schema's status")?;
        Ok(())
    }

    /// Creates the database URL Secret and the Job; records the Job's UID
    /// on the claim; answers the finished Pod.
    async fn run(&self, job: &Job, claim: &ActiveOperation) -> anyhow::Result<Pod> {
        let job_name = job.metadata.name.clone().context("job name")?;
        let secrets: Api<Secret> = self.ns.api();
        for name in secret_names(pod_spec(job)?) {
            let obj: Secret = serde_json::from_value(json!({
                "metadata": {"name": name},
                "stringData": {"url": "postgres://u:db-password-never-read@127.0.0.1:1/orders"},
            }))?;
            match secrets.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let created = self
            .ns
            .api::<Job>()
            .create(&PostParams::default(), job)
            .await
            .with_context(|| format!("creating Job {job_name}"))?;
        let job_uid = created.metadata.uid.clone().context("job uid")?;
        self.write_status(json!({"activeOperation": ActiveOperation {
            job_uid: Some(job_uid),
            ..claim.clone()
        }}))
        .await?;
        let pods: Api<Pod> = self.ns.api();
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}"));
        PATIENCE
            .poll(&format!("the Pod of Job {job_name} to finish"), || async {
                Ok(pods.list(&lp).await?.items.into_iter().find(|p| {
                    matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                }))
            })
            .await
    }

    fn log(&self, pod: &Pod) -> String {
        let path = conformance::kubelet::log_path(
            &self.ns.harness().kubelet_dir(),
            pod,
            OPERATION_CONTAINER,
        );
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn plan_url(&self, operation_id: &str, attempt: i32, kind: &str) -> String {
        let resource = ResourceRef {
            kind: kind.into(),
            namespace: self.namespace.clone(),
            name: SCHEMA.into(),
        };
        self.results_url
            .replace(RESULTS_PATH, &plan_path(&resource, operation_id, attempt))
    }
}

fn exit_code(pod: &Pod) -> Option<i32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == OPERATION_CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_apply_job_fetches_exactly_its_plans_bytes_and_refuses_a_replaced_chunk()
-> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    let ns = TestNamespace::new(
        harness,
        "ap",
        "apply",
        NamespaceSpec::default()
            .with_crds()
            .with_service_account(TIMEOUT),
    )
    .await?;
    let namespace = ns.name().to_owned();
    let client = ns.client().clone();

    // The manager's side: one TLS listener, results and plans on it.
    let tls = Tls::self_signed(&["127.0.0.1"])?;
    let ca_pem = tls.ca_pem.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let receiver = Arc::new(Receiver::new(
        client.clone(),
        Arc::new(receiver::Inbox::new()),
    ));
    let routes = Routes::new()
        .route(RESULTS_PATH, receiver.clone().handler())
        .route(PLANS_PATH, receiver.plan_handler());
    tokio::spawn(async move { serve(listener, &tls, routes, MAX_RESULT_BYTES).await });
    let results_url = format!("https://127.0.0.1:{port}{RESULTS_PATH}");

    // The resource, its source snapshot and its published plan (two chunks).
    let mut schema = testing::schema_example();
    schema.metadata = serde_json::from_value(json!({"name": SCHEMA, "namespace": namespace}))?;
    schema.status = None;
    let schemas: Api<PtahSchema> = ns.api();
    let schema = schemas.create(&PostParams::default(), &schema).await?;
    let schema_uid = schema.metadata.uid.clone().context("schema uid")?;
    let snap = take_snapshot(&schema_uid)?;
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &snapshot_config_map(&snap)?)
        .await?;
    let bytes = plan_bytes(600 * 1024, 7);
    let digest = content_digest(&bytes);
    let published = plan::publish(&client, &schema, plan_input(bytes.clone(), &snap)).await?;
    assert_eq!(published.chunks.len(), 2);
    let summary = published.summary.clone();
    assert_eq!(summary.content_digest.as_deref(), Some(digest.as_str()));

    ns.api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &receiver::receiver_ca_config_map(&namespace, &ca_pem),
        )
        .await?;
    let s = Scope {
        ns,
        namespace: namespace.clone(),
        schemas,
        results_url: results_url.clone(),
        ca_pem,
    };

    // The Apply Job of the plan, as the builder makes it.
    let operation_id = examples::digest(0x4a);
    let mut input = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Apply,
        Kind::ConfigMap,
        &namespace,
    );
    input.owner.uid = schema_uid.clone();
    input.claim.operation_id = operation_id.clone();
    input.claim.dispatch_not_after = None;
    input.claim.execution_not_after = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(600))
        .ok()
        .map(Time);
    input.images = Images {
        runner: OPERATOR_IMAGE_PINNED.into(),
        executor: EXECUTOR_IMAGE_PINNED.into(),
    };
    input.source = SourceInput::ConfigMap {
        snapshot_name: snap.name.clone(),
        content_digest: snap.content_digest.clone(),
    };
    input.apply = Some(ApplyInput::Schema {
        plan_name: summary.name.clone(),
        plan_fingerprint: summary.fingerprint.clone(),
        content_digest: digest.clone(),
        transaction_mode: SchemaTransactionMode::All,
    });
    input.result = ResultDelivery {
        receiver_url: results_url.clone(),
        receiver_ca: Some(ConfigMapKeyRef {
            name: RECEIVER_CA_CONFIGMAP.into(),
            key: RECEIVER_CA_KEY.into(),
        }),
        finished_ttl_seconds: None,
    };
    let job = build_job(&input)?;

    // The claim and status.plan, before the Job exists.
    let fingerprint = input.claim.input_fingerprint.clone();
    let not_after = input.claim.execution_not_after.clone();
    let claim = apply_claim(&operation_id, &fingerprint, 1, &summary, not_after.clone())?;
    s.write_status(json!({"plan": summary, "activeOperation": claim}))
        .await?;

    // The runner fetched, checked and wrote the plan, then ran Ptah on it:
    // the database does not answer, so Ptah failed, not the plan's check.
    let pod = s.run(&job, &claim).await?;
    let log = s.log(&pod);
    assert_eq!(exit_code(&pod), Some(EXIT_FAILED), "{log}");
    assert!(log.contains("the result was stored"), "{log}");
    let stored = receiver::harvest(&client, &namespace, &operation_id, 1)
        .await?
        .context("no stored result")?;
    let doc = &stored.document;
    assert_eq!(doc.outcome, Outcome::Failed);
    assert!(doc.result.is_none(), "{:?}", doc.result);
    let message = doc.error.as_ref().map(|e| e.message.clone());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("ptah schema apply failed (exit 2)")),
        "{message:?}"
    );
    assert!(
        !message
            .as_deref()
            .unwrap_or_default()
            .contains("db-password-never-read"),
        "{message:?}"
    );

    // Asked directly, as that Pod: its token (as the kubelet mints it) gets
    // the same bytes; a forged one, or its token for the API server, 401.
    let pod_name = pod.metadata.name.clone().context("pod name")?;
    let pod_uid = pod.metadata.uid.clone().context("pod uid")?;
    let sender = Sender::new(Some(s.ca_pem.as_bytes()))?;
    let url = s.plan_url(&operation_id, 1, "PtahSchema");
    let token = pod_token(&client, &pod, Some(RESULT_AUDIENCE)).await?;
    let (status, why, got) = answer_of(&sender.get_plan(&url, &token, &pod_name, &pod_uid).await)?;
    assert_eq!(status, 200, "{why}");
    assert!(got.as_deref() == Some(bytes.as_slice()), "other bytes");
    for forged in ["0".repeat(64), pod_token(&client, &pod, None).await?] {
        let (status, why, got) =
            answer_of(&sender.get_plan(&url, &forged, &pod_name, &pod_uid).await)?;
        assert_eq!(status, 401, "{why}");
        assert!(why.starts_with("Token"), "{why}");
        assert!(got.is_none());
    }
    // The token speaks for its own Pod only.
    let (status, why, _) = answer_of(&sender.get_plan(&url, &token, &pod_name, "other").await)?;
    assert_eq!(status, 401, "{why}");
    assert!(why.starts_with("Token"), "{why}");
    // A PtahMigration's plan is a sequence: no bytes.
    let murl = s.plan_url(&operation_id, 1, "PtahMigration");
    let (status, why, _) = answer_of(&sender.get_plan(&murl, &token, &pod_name, &pod_uid).await)?;
    assert_eq!(status, 404, "{why}");

    // The claim moved to another plan than status.plan: 409.
    let other = plan::publish(&client, &schema, plan_input(plan_bytes(1000, 8), &snap)).await?;
    let moved = apply_claim(
        &operation_id,
        &fingerprint,
        1,
        &other.summary,
        not_after.clone(),
    )?;
    s.write_status(json!({"activeOperation": moved})).await?;
    let (status, why, got) = answer_of(&sender.get_plan(&url, &token, &pod_name, &pod_uid).await)?;
    assert_eq!(status, 409, "{why}");
    assert!(why.starts_with("PlanMoved"), "{why}");
    assert!(got.is_none());

    // A chunk replaced with other bytes: the receiver refuses naming it, and
    // the runner of the next attempt refuses.
    let chunks: Api<PtahSchemaPlanChunk> = s.ns.api();
    let plan_object =
        s.ns.api::<operator::api::plan::PtahSchemaPlan>()
            .get(&summary.name)
            .await?;
    let r = plan_object.spec.chunks[1].clone();
    chunks.delete(&r.name, &DeleteParams::default()).await?;
    PATIENCE
        .poll(&format!("chunk {} to go", r.name), || async {
            Ok(chunks.get_opt(&r.name).await?.is_none().then_some(()))
        })
        .await?;
    let start = usize::try_from(r.index)? * 512 * 1024;
    let mut altered = bytes[start..].to_vec();
    altered[0] ^= 0x20;
    let forged = chunk_object(
        &r,
        &namespace,
        SCHEMA,
        &summary.name,
        &summary.uid,
        &altered,
    );
    chunks.create(&PostParams::default(), &forged).await?;

    let claim2 = apply_claim(&operation_id, &fingerprint, 2, &summary, not_after)?;
    s.write_status(json!({"activeOperation": claim2})).await?;
    let mut input2 = input.clone();
    input2.claim.attempt = 2;
    let job2 = build_job(&input2)?;
    let pod2 = s.run(&job2, &claim2).await?;
    let log2 = s.log(&pod2);
    assert_eq!(exit_code(&pod2), Some(EXIT_REFUSED), "{log2}");
    let stored2 = receiver::harvest(&client, &namespace, &operation_id, 2)
        .await?
        .context("no stored result of attempt 2")?;
    let doc2 = &stored2.document;
    assert_eq!(doc2.outcome, Outcome::Refused);
    assert!(doc2.result.is_none(), "{:?}", doc2.result);
    let error = doc2.error.clone().context("no error")?;
    assert_eq!(error.rule.as_deref(), Some("plan"));
    assert!(error.message.contains(REASON_PLAN_REFUSED), "{error:?}");
    assert!(error.message.contains(&r.name), "{error:?}");

    // Asked directly under attempt 2, the refusal names the chunk too.
    let pod2_name = pod2.metadata.name.clone().context("pod name")?;
    let pod2_uid = pod2.metadata.uid.clone().context("pod uid")?;
    let url2 = s.plan_url(&operation_id, 2, "PtahSchema");
    // The first attempt's Pod, with its own good token, is not the claim's
    // Job's Pod.
    let (status, why, _) = answer_of(&sender.get_plan(&url2, &token, &pod_name, &pod_uid).await)?;
    assert_eq!(status, 409, "{why}");
    assert!(why.starts_with("PodMismatch"), "{why}");
    let token2 = pod_token(&client, &pod2, Some(RESULT_AUDIENCE)).await?;
    let (status, why, got) =
        answer_of(&sender.get_plan(&url2, &token2, &pod2_name, &pod2_uid).await)?;
    assert_eq!(status, 409, "{why}");
    assert!(why.starts_with(REASON_PLAN_REFUSED), "{why}");
    assert!(why.contains(&r.name), "{why}");
    assert!(got.is_none());

    // No token is in either Pod's log.
    for p in [&pod, &pod2] {
        let text = s.log(p);
        assert!(!text.is_empty());
        assert!(!holds_a_jwt(&text), "a token is in a log");
    }
    drop(s);
    Ok(())
}
