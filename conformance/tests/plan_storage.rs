//! Schema plan storage (stage 2) on the harness API server, with a real
//! PtahSchema as the owner and the real controller-manager's garbage
//! collector: `operator::execution::plan` publishes a PtahSchemaPlan whose
//! bytes live in PtahSchemaPlanChunks, and reads them back for Apply.
//!
//! Acceptance lines shown here: 3 MiB publish as 6 chunks and a Ready plan,
//! and read back to the same bytes; publishing again is idempotent (same
//! objects, same UIDs); a deleted chunk is completed by publishing again; a
//! chunk replaced with other bytes, or by one the plan does not own, or an
//! extra chunk, makes the read-back refuse naming it; chunks are immutable by
//! CEL; a plan of another fingerprint under the plan's name is refused, never
//! overwritten; 8 MiB + 1 is refused before anything is written; collection
//! deletes an old plan, the garbage collector its chunks, and the kept plan
//! stays.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;
use operator::api::condition::{ConditionStatus, SchemaPlanConditionType};
use operator::api::plan::{PLAN_MAX_BYTES, PtahSchemaPlan, PtahSchemaPlanChunk};
use operator::api::schema::PtahSchema;
use operator::execution::plan::{
    LABEL_PLAN_UID, PlanError, PlanInput, chunk_object, collect, content_digest, plan_object,
    plan_spec, publish, read_back,
};

/// Long enough for the garbage collector to remove a deleted plan's chunks.
const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));
const MIB: usize = 1024 * 1024;

/// One test's namespace on the shared harness, deleted at the end of the
/// test, also when it fails (see [`TestNamespace`]).
struct Scope(TestNamespace);

impl std::ops::Deref for Scope {
    type Target = TestNamespace;
    fn deref(&self) -> &TestNamespace {
        &self.0
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        Ok(Scope(
            TestNamespace::new(harness, "plan", test, NamespaceSpec::default().with_crds()).await?,
        ))
    }

    fn plans(&self) -> Api<PtahSchemaPlan> {
        self.api()
    }

    fn chunks(&self) -> Api<PtahSchemaPlanChunk> {
        self.api()
    }

    /// A real PtahSchema, as stored: the plans' owner.
    async fn schema(&self, name: &str) -> anyhow::Result<PtahSchema> {
        self.create(json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahSchema",
            "metadata": {"name": name},
            "spec": {
                "target": {
                    "engine": "PostgreSQL",
                    "urlFrom": {"name": "db", "key": "url"},
                    "coordinationKey": "primary",
                },
                "source": {"configMap": {"name": "schema", "keys": ["schema.sql"]}},
                "policy": {"apply": "OnApproval"},
                "interval": "10m",
            },
        }))
        .await
    }

    /// The names of the chunks in the namespace, sorted.
    async fn chunk_names(&self) -> anyhow::Result<Vec<String>> {
        let list = self.chunks().list_metadata(&ListParams::default()).await?;
        let mut names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
        names.sort();
        Ok(names)
    }

    /// Deletes a chunk as an admin would; it has no finalizer, so it is gone
    /// when the call returns.
    async fn delete_chunk(&self, name: &str) -> anyhow::Result<()> {
        self.chunks().delete(name, &DeleteParams::default()).await?;
        if self.chunks().get_opt(name).await?.is_some() {
            bail!("chunk {name} still exists after its deletion");
        }
        Ok(())
    }
}

/// `n` bytes of plan-like text that differ from chunk to chunk (so a chunk
/// put in another's place is noticed).
fn plan_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(format!("ALTER TABLE t{:016x} ADD COLUMN c int;\n", x).as_bytes());
    }
    out.truncate(n);
    out
}

fn input(bytes: Vec<u8>) -> PlanInput {
    let digest = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
    PlanInput {
        bytes,
        statement_count: 42,
        destructive: true,
        privilege_changes: vec![operator::api::plan::PrivilegeChange::Grant],
        dialect: "postgres".into(),
        source: operator::testing::configmap_binding(digest(1), Some("ptah-src-abc")),
        coordination_digest: digest(13),
        target_identity_digest: digest(14),
        actual_state_fingerprint: digest(23),
        desired_state_fingerprint: digest(24),
        execution_binding: operator::testing::execution_binding(),
    }
}

fn ready(plan: &PtahSchemaPlan) -> bool {
    plan.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == SchemaPlanConditionType::Ready && c.status == ConditionStatus::True)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn three_mib_publish_as_six_chunks_read_back_whole_and_publish_again_idempotently()
-> anyhow::Result<()> {
    let s = Scope::new("publish").await?;
    let schema = s.schema("orders").await?;
    let bytes = plan_bytes(3 * MIB, 1);
    let digest = content_digest(&bytes);

    let first = publish(s.client(), &schema, input(bytes.clone())).await?;
    assert!(first.wrote);
    assert_eq!(first.chunks.len(), 6);
    let summary = &first.summary;
    assert!(summary.name.starts_with("orders-"), "{}", summary.name);
    assert_eq!(summary.content_digest.as_deref(), Some(digest.as_str()));
    assert_eq!(summary.statement_count, Some(42));
    assert!(summary.destructive);
    assert!(summary.created_at.is_some());

    // The plan: owned by the schema, Ready, listing its chunks verified.
    let plan = s.plans().get(&summary.name).await?;
    assert!(ready(&plan), "plan {} is not Ready", summary.name);
    assert_eq!(plan.metadata.uid.as_deref(), Some(summary.uid.as_str()));
    assert_eq!(plan.spec.fingerprint, summary.fingerprint);
    assert_eq!(plan.spec.size, (3 * MIB) as i64);
    let owner = &plan.owner_references()[0];
    assert_eq!(Some(&owner.uid), schema.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(false));
    assert_eq!(
        plan.labels()
            .get("operator.ptah.run/schema")
            .map(String::as_str),
        Some("orders")
    );
    let status = plan.status.clone().context("plan status")?;
    assert_eq!(status.published_chunks, first.chunks);

    // The chunks: owned by the plan, 512 KiB each.
    let names = s.chunk_names().await?;
    let expected: Vec<String> = (0..6).map(|i| format!("{}-{i:03}", summary.name)).collect();
    assert_eq!(names, expected);
    for c in &first.chunks {
        let chunk = s.chunks().get(&c.name).await?;
        assert_eq!(chunk.metadata.uid.as_deref(), Some(c.uid.as_str()));
        assert_eq!(chunk.spec.data.0.len(), 512 * 1024);
        assert_eq!(chunk.owner_references()[0].uid, summary.uid);
        assert_eq!(chunk.labels().get(LABEL_PLAN_UID), Some(&summary.uid));
    }

    let read = read_back(s.client(), s.name(), &summary.name, &digest).await?;
    assert!(read == bytes, "read-back differs from the published bytes");

    // Again: nothing written, the same objects.
    let again = publish(s.client(), &schema, input(bytes.clone())).await?;
    assert!(!again.wrote, "a complete publication wrote again");
    assert_eq!(again.summary, first.summary);
    assert_eq!(again.chunks, first.chunks);
    assert_eq!(s.chunk_names().await?, expected);

    // Bound to other bytes, the read-back refuses.
    let other = content_digest(b"other");
    match read_back(s.client(), s.name(), &summary.name, &other).await {
        Err(PlanError::ContentMismatch { plan, .. }) => assert_eq!(plan, summary.name),
        other => bail!("expected a content mismatch, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_chunk_is_completed_and_a_replaced_foreign_or_extra_chunk_is_refused()
-> anyhow::Result<()> {
    let s = Scope::new("chunks").await?;
    let schema = s.schema("orders").await?;
    let bytes = plan_bytes(MIB + MIB / 4, 2);
    let digest = content_digest(&bytes);
    let first = publish(s.client(), &schema, input(bytes.clone())).await?;
    let plan = first.summary.name.clone();
    assert_eq!(first.chunks.len(), 3);
    let name = |i: usize| format!("{plan}-{i:03}");

    // Chunks are immutable: the API server refuses an edit (CEL).
    let edit = s
        .chunks()
        .patch(
            &name(0),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"data": ByteString(b"DROP TABLE orders;".to_vec())}})),
        )
        .await;
    match edit {
        Err(kube::Error::Api(e)) => assert!(e.message.contains("immutable"), "{}", e.message),
        other => bail!("an edit of a chunk was not refused: {other:?}"),
    }

    // A chunk deleted (a manager restarted mid-publication): the read-back
    // refuses naming it, and publishing again completes the plan.
    s.delete_chunk(&name(1)).await?;
    match read_back(s.client(), s.name(), &plan, &digest).await {
        Err(PlanError::ChunkMissing { chunk, .. }) => assert_eq!(chunk, name(1)),
        other => bail!("expected chunk {} missing, got {other:?}", name(1)),
    }
    let completed = publish(s.client(), &schema, input(bytes.clone())).await?;
    assert!(completed.wrote);
    assert_eq!(completed.summary.uid, first.summary.uid);
    assert_eq!(completed.chunks[0], first.chunks[0]);
    assert_ne!(completed.chunks[1].uid, first.chunks[1].uid);
    let stored = s.plans().get(&plan).await?;
    assert_eq!(
        stored.status.context("plan status")?.published_chunks,
        completed.chunks
    );
    assert!(read_back(s.client(), s.name(), &plan, &digest).await? == bytes);

    // A chunk put back, as the admin, with other bytes of the same size.
    let plan_obj = s.plans().get(&plan).await?;
    let r = plan_obj.spec.chunks[2].clone();
    let start = 2 * 512 * 1024;
    let mut altered = bytes[start..].to_vec();
    altered[0] ^= 0x20;
    s.delete_chunk(&r.name).await?;
    let forged = chunk_object(&r, s.name(), "orders", &plan, &first.summary.uid, &altered);
    s.chunks().create(&PostParams::default(), &forged).await?;
    match read_back(s.client(), s.name(), &plan, &digest).await {
        Err(PlanError::ChunkAltered { chunk, .. }) => assert_eq!(chunk, r.name),
        other => bail!("expected chunk {} altered, got {other:?}", r.name),
    }
    // Publishing again refuses it rather than overwriting it.
    match publish(s.client(), &schema, input(bytes.clone())).await {
        Err(PlanError::ChunkConflict { chunk, .. }) => assert_eq!(chunk, r.name),
        other => bail!("expected chunk {} refused, got {other:?}", r.name),
    }

    // The right bytes, but a chunk the plan does not own.
    s.delete_chunk(&r.name).await?;
    let mut foreign = chunk_object(
        &r,
        s.name(),
        "orders",
        &plan,
        &first.summary.uid,
        &bytes[start..],
    );
    foreign.metadata.owner_references = None;
    s.chunks().create(&PostParams::default(), &foreign).await?;
    match read_back(s.client(), s.name(), &plan, &digest).await {
        Err(PlanError::ChunkForeign { chunk, .. }) => assert_eq!(chunk, r.name),
        other => bail!("expected chunk {} foreign, got {other:?}", r.name),
    }

    // Put back exactly: read back again.
    s.delete_chunk(&r.name).await?;
    publish(s.client(), &schema, input(bytes.clone())).await?;
    assert!(read_back(s.client(), s.name(), &plan, &digest).await? == bytes);

    // A chunk beyond the plan's list.
    let mut extra_ref = r.clone();
    extra_ref.name = name(3);
    extra_ref.index = 3;
    let extra = chunk_object(
        &extra_ref,
        s.name(),
        "orders",
        &plan,
        &first.summary.uid,
        b"DROP TABLE orders;\n",
    );
    s.chunks().create(&PostParams::default(), &extra).await?;
    match read_back(s.client(), s.name(), &plan, &digest).await {
        Err(PlanError::ChunkExtra { chunk, .. }) => assert_eq!(chunk, name(3)),
        other => bail!("expected chunk {} extra, got {other:?}", name(3)),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn another_plan_under_the_name_is_refused_and_more_than_8_mib_writes_nothing()
-> anyhow::Result<()> {
    let s = Scope::new("refuse").await?;
    let schema = s.schema("orders").await?;
    let schema_ref = operator::api::common::ObjectRef {
        name: "orders".into(),
        uid: schema.metadata.uid.clone().context("schema UID")?,
    };
    let ours = input(plan_bytes(1000, 3));
    let (name, _) = plan_spec(&schema_ref, &schema.spec.policy, &ours)?;
    // Another plan's spec stored under our plan's name.
    let (_, theirs) = plan_spec(
        &schema_ref,
        &schema.spec.policy,
        &input(plan_bytes(2000, 4)),
    )?;
    let squatter = s
        .plans()
        .create(
            &PostParams::default(),
            &plan_object(&name, s.name(), &schema_ref, theirs.clone()),
        )
        .await?;
    match publish(s.client(), &schema, ours).await {
        Err(e @ PlanError::PlanConflict { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&name) && text.contains("fingerprint"),
                "{text}"
            );
        }
        other => bail!("expected the plan refused, got {other:?}"),
    }
    let after = s.plans().get(&name).await?;
    assert_eq!(after.metadata.uid, squatter.metadata.uid);
    assert_eq!(after.spec, theirs, "the other plan was overwritten");
    assert!(s.chunk_names().await?.is_empty(), "chunks were written");
    // Never verified, it reads back nothing.
    match read_back(s.client(), s.name(), &name, &theirs.content_digest).await {
        Err(PlanError::NotReady { plan }) => assert_eq!(plan, name),
        other => bail!("expected plan {name} not Ready, got {other:?}"),
    }

    // 8 MiB + 1: refused naming the limit, before anything is written.
    let too_large = input(plan_bytes(PLAN_MAX_BYTES as usize + 1, 5));
    match publish(s.client(), &schema, too_large).await {
        Err(e @ PlanError::TooLarge { .. }) => {
            assert!(e.to_string().contains("8388608"), "{e}")
        }
        other => bail!("expected the plan refused as too large, got {other:?}"),
    }
    let plans = s.plans().list_metadata(&ListParams::default()).await?;
    assert_eq!(plans.items.len(), 1, "a plan was written");
    assert!(s.chunk_names().await?.is_empty(), "chunks were written");

    // Exactly 8 MiB is a plan: 16 chunks.
    let largest = publish(
        s.client(),
        &schema,
        input(plan_bytes(PLAN_MAX_BYTES as usize, 6)),
    )
    .await?;
    assert_eq!(largest.chunks.len(), 16);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn collection_deletes_the_plans_status_no_longer_names_and_their_chunks_go()
-> anyhow::Result<()> {
    let s = Scope::new("collect").await?;
    let schema = s.schema("orders").await?;
    let old_bytes = plan_bytes(MIB, 7);
    let new_bytes = plan_bytes(600 * 1024, 8);
    let old = publish(s.client(), &schema, input(old_bytes)).await?;
    let new = publish(s.client(), &schema, input(new_bytes.clone())).await?;
    assert_ne!(old.summary.name, new.summary.name);
    // A plan of another schema in the namespace is not this schema's to collect.
    let other_schema = s.schema("billing").await?;
    let other = publish(s.client(), &other_schema, input(plan_bytes(10, 9))).await?;

    let deleted = collect(s.client(), &schema, std::slice::from_ref(&new.summary.name)).await?;
    assert_eq!(deleted, vec![old.summary.name.clone()]);

    let old_chunks: Vec<String> = old.chunks.iter().map(|c| c.name.clone()).collect();
    PATIENCE
        .poll("the old plan and its chunks gone", || async {
            let plan_gone = s.plans().get_opt(&old.summary.name).await?.is_none();
            let names = s.chunk_names().await?;
            let chunks_gone = old_chunks.iter().all(|c| !names.contains(c));
            Ok((plan_gone && chunks_gone).then_some(()))
        })
        .await?;

    // The kept plan and the other schema's stay, whole.
    let names = s.chunk_names().await?;
    for c in new.chunks.iter().chain(&other.chunks) {
        assert!(names.contains(&c.name), "chunk {} was deleted", c.name);
    }
    let digest = content_digest(&new_bytes);
    assert!(read_back(s.client(), s.name(), &new.summary.name, &digest).await? == new_bytes);
    assert!(s.plans().get_opt(&other.summary.name).await?.is_some());
    Ok(())
}
