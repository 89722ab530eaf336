//! The result receiver end to end: the manager's HTTPS server
//! (`server::serve`, a self-signed CA) with the receiver's handler, in this
//! test process; a real Git Resolve Job made by the Job builder, run by the
//! real Job controller and the process kubelet against the harness's git
//! daemon, delivering its result with the token the kubelet projects into
//! its Pod (its ServiceAccount's, bound to the Pod, for the receiver's
//! audience), checked against the API server's service-account keys.
//!
//! * The delivered result is bound to the claim (`status.activeOperation`,
//!   written through the status subresource) and to the Pod and the Job;
//!   `harvest` answers it typed, with the commit and both UIDs; `discard`
//!   removes it.
//! * A forged token, the Pod's token for the API server's audience, and the
//!   Pod's own token under a document naming another Pod are refused (401)
//!   and store nothing; the same document
//!   again is a replay (409); a document whose input fingerprint is not the
//!   claim's is refused (409) and stores nothing; a body that does not match
//!   its declared SHA-256 is refused (400); once the claim is released, the
//!   right document is refused (409) and stores nothing.
//! * No token appears in any container log the process kubelet kept, nor in
//!   the termination message.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::gitserve::{Endpoints, commit_files, create_repo};
use conformance::harness::{EXECUTOR_IMAGE_PINNED, OPERATOR_IMAGE_PINNED};
use conformance::testkit::job::{holds_a_jwt, pod_token};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;
use operator::api::common::ConfigMapKeyRef;
use operator::api::schema::PtahSchema;
use operator::api::source::GitRef;
use operator::api::status::{ActiveOperation, OperationType};
use operator::execution::examples::{self, Kind};
use operator::execution::job::{
    GitInput, Images, OPERATION_CONTAINER, OwnerKind, ResultDelivery, SourceInput, build_job,
    job_name,
};
use operator::execution::receiver::{
    self, RECEIVER_CA_CONFIGMAP, RECEIVER_CA_KEY, RESULT_COMPONENT, Receiver,
};
use operator::protocol::receiver::{
    MAX_RESULT_BYTES, REASON_ALREADY_STORED, RESULT_AUDIENCE, RESULTS_PATH, content_sha256,
};
use operator::protocol::result::StepOutput;
use operator::runner::deliver::{Attempt, Sender};
use operator::server::{Routes, Tls, serve};
use operator::testing;

const TIMEOUT: Duration = Duration::from_secs(180);
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(250));

/// The status of one POST.
fn status_of(a: &Attempt) -> anyhow::Result<(u16, String)> {
    match a {
        Attempt::Answered { status, answer } => Ok((
            *status,
            answer
                .as_ref()
                .map(|a| a.reason.clone())
                .unwrap_or_default(),
        )),
        Attempt::Failed { reason, .. } => anyhow::bail!("no answer: {reason}"),
    }
}

/// Every stored result ConfigMap in the namespace.
async fn stored(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    let lp =
        ListParams::default().labels(&format!("app.kubernetes.io/component={RESULT_COMPONENT}"));
    Ok(ns
        .api::<ConfigMap>()
        .list_metadata(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect())
}

/// Every file under `dir` whose name ends in `.log`.
fn logs_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            logs_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
}

#[tokio::test]
async fn a_resolve_job_delivers_its_result_bound_to_the_claim_and_forgeries_are_refused()
-> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    let ns = TestNamespace::new(
        harness,
        "rr",
        "deliver",
        NamespaceSpec::default()
            .with_crds()
            .with_service_account(TIMEOUT),
    )
    .await?;
    let namespace = ns.name().to_owned();
    let client = ns.client().clone();

    // The manager's side: one TLS listener with the receiver on it.
    let tls = Tls::self_signed(&["127.0.0.1"])?;
    let ca_pem = tls.ca_pem.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let handler = Arc::new(Receiver::new(
        client.clone(),
        Arc::new(receiver::Inbox::new()),
    ))
    .handler();
    tokio::spawn(async move {
        serve(
            listener,
            &tls,
            Routes::new().route(RESULTS_PATH, handler),
            MAX_RESULT_BYTES,
        )
        .await
    });
    let url = format!("https://127.0.0.1:{port}{RESULTS_PATH}");

    // The resource, and a Git repository to resolve.
    let mut schema = testing::schema_example();
    schema.metadata = serde_json::from_value(json!({"name": "orders", "namespace": namespace}))?;
    schema.status = None;
    let schemas: Api<PtahSchema> = ns.api();
    let schema = schemas.create(&PostParams::default(), &schema).await?;
    let schema_uid = schema.metadata.uid.clone().context("schema uid")?;
    let ep = Endpoints::from_env_file(harness)?;
    let repo = format!("receiver-{namespace}");
    let bare = create_repo(&ep.root, &repo, true)?;
    let commit = commit_files(
        &bare,
        "main",
        &[("db/schema.sql", "create table a();\n")],
        "one",
    )?;

    // The Job input: a Git Resolve delivering to this receiver.
    let operation_id = examples::digest(0x5a);
    let mut input = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Resolve,
        Kind::Git,
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
    input.source = SourceInput::Git(GitInput {
        url: ep.daemon_repo(&repo),
        git_ref: GitRef {
            branch: Some("main".into()),
            tag: None,
            commit: None,
        },
        commit: None,
        path: Some("db".into()),
        content_digest: None,
        secret_name: None,
        source_policy: None,
    });
    let job_name = job_name(
        OwnerKind::PtahSchema,
        OperationType::Resolve,
        "orders",
        &operation_id,
        1,
    )?;
    input.result = ResultDelivery {
        receiver_url: url.clone(),
        receiver_ca: Some(ConfigMapKeyRef {
            name: RECEIVER_CA_CONFIGMAP.into(),
            key: RECEIVER_CA_KEY.into(),
        }),
        finished_ttl_seconds: None,
    };
    let job = build_job(&input)?;
    assert_eq!(job.metadata.name.as_deref(), Some(job_name.as_str()));

    // The claim, before the Job exists.
    let claim = ActiveOperation {
        type_: OperationType::Resolve,
        operation_id: operation_id.clone(),
        input_fingerprint: input.claim.input_fingerprint.clone(),
        job_name: Some(job_name.clone()),
        job_uid: None,
        attempt: 1,
        started_at: Time(k8s_openapi::jiff::Timestamp::now()),
        retry_not_before: None,
        dispatch_started: true,
        dispatch_not_after: None,
        execution_not_after: input.claim.execution_not_after.clone(),
        execution_epoch: None,
        source: None,
        coordination_digest: None,
        target_identity_digest: None,
        lease_epoch: None,
        lease_duration_seconds: None,
        lease_continuity_lost: false,
        plan_name: None,
        plan_uid: None,
        plan_fingerprint: None,
        authorization: None,
        approval_name: None,
        approval_uid: None,
        approver: None,
        admission_snapshot_digest: None,
    };
    let write_claim = |claim: ActiveOperation| {
        let schemas = schemas.clone();
        async move {
            schemas
                .patch_status(
                    "orders",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"activeOperation": claim}})),
                )
                .await
                .context("writing the claim")
        }
    };
    write_claim(claim.clone()).await?;

    // The receiver CA, as the manager publishes it. No Secret: the token is
    // the Pod's own.
    ns.api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &receiver::receiver_ca_config_map(&namespace, &ca_pem),
        )
        .await?;

    // The Job, its UID recorded on the claim.
    let created = ns.api::<Job>().create(&PostParams::default(), &job).await?;
    let job_uid = created.metadata.uid.clone().context("job uid")?;
    write_claim(ActiveOperation {
        job_uid: Some(job_uid.clone()),
        ..claim.clone()
    })
    .await?;
    let pods: Api<Pod> = ns.api();
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}"));
    let pod = PATIENCE
        .poll(&format!("the Pod of Job {job_name} to finish"), || async {
            Ok(pods.list(&lp).await?.items.into_iter().find(|p| {
                matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            }))
        })
        .await?;
    let pod_uid = pod.metadata.uid.clone().context("pod uid")?;
    let log_path =
        conformance::kubelet::log_path(&harness.kubelet_dir(), &pod, OPERATION_CONTAINER);
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded"),
        "{log}"
    );
    assert!(log.contains("the result was stored"), "{log}");

    // Harvested typed, with the commit, the Pod and the Job.
    let harvested = receiver::harvest(&client, &namespace, &operation_id, 1)
        .await?
        .context("no stored result")?;
    assert_eq!(harvested.pod_uid.as_deref(), Some(pod_uid.as_str()));
    assert_eq!(harvested.job_uid.as_deref(), Some(job_uid.as_str()));
    let doc = &harvested.document;
    let op = doc.operation.clone().context("operation")?;
    assert_eq!(op.operation_id, operation_id);
    assert_eq!(op.pod_uid.as_deref(), Some(pod_uid.as_str()));
    assert_eq!(op.job_uid.as_deref(), Some(job_uid.as_str()));
    match &doc.result {
        Some(StepOutput::GitResolved { resolution, .. }) => {
            assert_eq!(resolution.commit, commit)
        }
        other => panic!("not a Git resolution: {other:?}"),
    }
    let before = stored(&ns).await?;
    assert_eq!(before.len(), 1, "{before:?}");

    let sender = Sender::new(Some(ca_pem.as_bytes()))?;
    let body = serde_json::to_vec(doc)?;
    let sha = content_sha256(&body);

    // The Pod's token as the kubelet mints it, and forgeries: refused
    // before anything is read or stored.
    let token = pod_token(&client, &pod, Some(RESULT_AUDIENCE)).await?;
    let forged = "0".repeat(64);
    let a = sender.post(&url, &forged, body.clone(), &sha).await;
    assert_eq!(status_of(&a)?, (401, "Token".into()), "{a:?}");
    // The same Pod's token for the API server: not the receiver's.
    let for_api = pod_token(&client, &pod, None).await?;
    let a = sender.post(&url, &for_api, body.clone(), &sha).await;
    assert_eq!(status_of(&a)?, (401, "Token".into()), "{a:?}");
    // The Pod's own token cannot speak for another Pod.
    let mut elsewhere = doc.clone();
    if let Some(o) = elsewhere.operation.as_mut() {
        o.pod_uid = Some("00000000-0000-0000-0000-000000000000".into());
    }
    let elsewhere_body = serde_json::to_vec(&elsewhere)?;
    let a = sender
        .post(
            &url,
            &token,
            elsewhere_body.clone(),
            &content_sha256(&elsewhere_body),
        )
        .await;
    assert_eq!(status_of(&a)?, (401, "Token".into()), "{a:?}");
    assert_eq!(stored(&ns).await?, before);

    // The same document again: a replay.
    let a = sender.post(&url, &token, body.clone(), &sha).await;
    let (status, reason) = status_of(&a)?;
    assert_eq!(status, 409, "{a:?}");
    assert_eq!(reason, REASON_ALREADY_STORED, "{a:?}");
    assert_eq!(stored(&ns).await?, before);

    // A second attempt under the claim, whose document names another input
    // fingerprint: refused, nothing stored.
    write_claim(ActiveOperation {
        attempt: 2,
        ..claim.clone()
    })
    .await?;
    let mut moved = doc.clone();
    if let Some(o) = moved.operation.as_mut() {
        o.attempt = 2;
        o.input_fingerprint = examples::digest(0xee);
    }
    let token2 = token.clone();
    let moved_body = serde_json::to_vec(&moved)?;
    let a = sender
        .post(
            &url,
            &token2,
            moved_body.clone(),
            &content_sha256(&moved_body),
        )
        .await;
    let (status, reason) = status_of(&a)?;
    assert_eq!((status, reason.as_str()), (409, "ClaimMismatch"), "{a:?}");
    assert!(
        receiver::harvest(&client, &namespace, &operation_id, 2)
            .await?
            .is_none()
    );

    // A body that is not the one its digest declares.
    let mut tampered = moved_body.clone();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b' ' { b'\t' } else { b' ' };
    let a = sender
        .post(&url, &token2, tampered, &content_sha256(&moved_body))
        .await;
    let (status, reason) = status_of(&a)?;
    assert_eq!((status, reason.as_str()), (400, "ContentSHA256"), "{a:?}");
    assert_eq!(stored(&ns).await?, before);

    // Once the claim is released, even the right document for the right
    // attempt is refused, and nothing is stored.
    let mut right = doc.clone();
    if let Some(o) = right.operation.as_mut() {
        o.attempt = 2;
    }
    let right_body = serde_json::to_vec(&right)?;
    schemas
        .patch_status(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"activeOperation": null}})),
        )
        .await?;
    let a = sender
        .post(
            &url,
            &token2,
            right_body.clone(),
            &content_sha256(&right_body),
        )
        .await;
    let (status, reason) = status_of(&a)?;
    assert_eq!((status, reason.as_str()), (409, "NotClaimed"), "{a:?}");
    assert_eq!(stored(&ns).await?, before);

    // No token is in a container log of this namespace's Pods, nor in the
    // termination message. (Other tests' Pods may print tokens of their
    // own: the process kubelet's volume tests do.)
    let mut logs = Vec::new();
    logs_under(&harness.kubelet_dir(), &mut logs);
    logs.retain(|p| p.to_string_lossy().contains(&format!("/{namespace}_")));
    assert!(
        logs.contains(&log_path),
        "{log_path:?} not among {} logs",
        logs.len()
    );
    for path in &logs {
        let text = std::fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        assert!(!holds_a_jwt(&text), "a token is in {}", path.display());
    }
    let message = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == OPERATION_CONTAINER))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .context("no termination message")?;
    assert!(!holds_a_jwt(&message));
    assert!(message.contains(&commit), "{message}");

    // Discarded once the outcome is recorded.
    receiver::discard(&client, &namespace, &operation_id).await?;
    assert!(
        receiver::harvest(&client, &namespace, &operation_id, 1)
            .await?
            .is_none()
    );
    assert!(stored(&ns).await?.is_empty());
    drop(ns);
    Ok(())
}
