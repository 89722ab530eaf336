//! `kubectl ptah` end to end: the pinned kubectl finds the plugin on PATH,
//! and every verb runs against a real manager, a real PostgreSQL and real
//! Ptah on the harness.
//!
//! * A schema: `wait --for AwaitingApproval`, `schema` (table, JSON, YAML,
//!   `-A`), `plan` with its SQL; `approve` of a plan replaced between showing
//!   and approving approves nothing and says why; `approve --yes --wait`
//!   ends at `InSync`; `plan --applied`; `history` with `coveredSince`;
//!   `refresh --wait` twice in a row starts two reads; `wait` exits 2 on
//!   `Blocked` naming the reason; bad input (an unknown resource, a missing
//!   namespace, a plan that does not exist, a malformed OCI reference, an
//!   unknown kind) is one line naming what is wrong and a non-zero exit.
//! * A migration: `plan` shows versions and checksums and no SQL; `approve
//!   --yes --wait` runs it to `InSync`; `history`; `refresh --wait` starts a
//!   history read.
//! * `set-source` on a resource nobody else manages, under `apply:
//!   OnApproval`: `--dry-run` changes nothing, then the new artifact's plan
//!   waits for its approval; an approval naming another signer key is
//!   refused at admission (`spec.source.keyFingerprint`); `approve --yes
//!   --wait` reaches `InSync` on the new artifact's digest, the approval
//!   names that digest and the key that signed it, `plan --applied` shows
//!   them, and the field is owned by `kubectl-ptah`.

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::job::count;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::oci::{
    Registry, key_policy, push_schema_file, run_ok, sign_command, signed_by_new_key,
};
use conformance::testkit::operator::{Operator, create_admitted};
use conformance::testkit::plugin::{Plugin, Ran, answer, read_until};
use operator::admission::webhook_configurations;
use operator::api::condition::{MigrationPhase, SchemaPhase};
use operator::api::{PtahMigration, PtahSchema, PtahSchemaApproval};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

fn ok(what: &str, ran: Ran) -> anyhow::Result<Ran> {
    anyhow::ensure!(
        ran.code == 0,
        "{what} exited {}:\n{}\n{}",
        ran.code,
        ran.stdout,
        ran.stderr
    );
    Ok(ran)
}

/// A failure: the exit code given and one line on stderr containing `says`.
fn refused(what: &str, ran: &Ran, code: i32, says: &str) -> anyhow::Result<()> {
    let err = ran.stderr.trim();
    anyhow::ensure!(
        ran.code == code,
        "{what}: exit {} (want {code}): {err}",
        ran.code
    );
    anyhow::ensure!(!err.contains('\n'), "{what}: more than one line: {err}");
    anyhow::ensure!(
        err.starts_with("error: ") && err.contains(says),
        "{what}: {err:?} does not say {says:?}"
    );
    Ok(())
}

fn schema_phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn plan_name(s: &PtahSchema) -> Option<String> {
    s.status.as_ref()?.plan.as_ref().map(|p| p.name.clone())
}

const WITH_NOTE: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  note text\n);\n";
const WITHOUT_CUSTOMER: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  note text\n);\n";

#[tokio::test]
async fn schema_verbs_on_a_real_schema() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "plugin", "schema").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::schema_under(&ns, &db, "orders", json!({"apply": "OnApproval"})).await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let k = Plugin::new(&ns)?;

    ok(
        "wait --for AwaitingApproval",
        k.run(&[
            "wait",
            "schema/orders",
            "--for",
            "AwaitingApproval",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;
    let s: PtahSchema = ns.api().get("orders").await?;
    let first = plan_name(&s).context("status.plan")?;

    // The six stages, as a table and as JSON and YAML.
    let shown = ok("schema", k.run(&["schema", "orders"])?)?.stdout;
    assert!(
        shown.starts_with(&format!(
            "PtahSchema {}/orders: AwaitingApproval",
            ns.name()
        )),
        "{shown}"
    );
    for stage in [
        "Source",
        "Plan",
        "Decision",
        "Execution",
        "Verification",
        "History",
    ] {
        assert!(
            shown.contains(&format!("\n{stage} ")),
            "{stage} missing:\n{shown}"
        );
    }
    assert!(
        shown.contains("ConfigMap orders-schema@sha256:"),
        "the revision in Flux's words:\n{shown}"
    );
    assert!(
        shown.contains(&first) && shown.contains("waits for a person's approval"),
        "{shown}"
    );
    assert!(
        shown.contains("kubectl ptah approve schema/orders"),
        "{shown}"
    );
    let as_json: Value = serde_json::from_str(
        &ok(
            "schema -o json",
            k.run(&["schema", "orders", "-o", "json"])?,
        )?
        .stdout,
    )?;
    assert_eq!(as_json["phase"], "AwaitingApproval");
    assert_eq!(as_json["stages"].as_array().map(Vec::len), Some(6));
    let as_yaml = ok(
        "schema -o yaml",
        k.run(&["schema", "orders", "-o", "yaml"])?,
    )?
    .stdout;
    assert!(as_yaml.contains("phase: AwaitingApproval"), "{as_yaml}");
    let listed = ok("schema -A", k.run(&["schema", "-A"])?)?.stdout;
    assert!(
        listed.lines().any(|l| l.starts_with(ns.name())
            && l.contains("orders")
            && l.contains("AwaitingApproval")),
        "{listed}"
    );

    // The plan with its SQL.
    let plan = ok("plan", k.run(&["plan", "schema/orders"])?)?.stdout;
    let fingerprint = s
        .status
        .as_ref()
        .and_then(|st| st.plan.as_ref())
        .map(|p| p.fingerprint.clone())
        .unwrap_or_default();
    assert!(
        plan.contains(&first) && plan.contains(&fingerprint),
        "{plan}"
    );
    assert!(
        plan.contains("CREATE TABLE") && plan.contains("destructive: no"),
        "{plan}"
    );

    // Shown, then replaced before the answer: nothing is approved.
    let mut asking = k.spawn(&["approve", "schema/orders"])?;
    let before = read_until(&mut asking, "[y/N]")?;
    ns.set_config_map_key("orders-schema", "schema.sql", WITH_NOTE)
        .await?;
    let s = operator
        .until(&ns, "orders", "the replacement plan", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::AwaitingApproval)
                && plan_name(s).is_some_and(|p| p != first)
        })
        .await?;
    let second = plan_name(&s).context("status.plan")?;
    let ran = answer(asking, "y", before)?;
    let err = ran.stderr.lines().last().unwrap_or_default().to_string();
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        err.contains(&format!(
            "approved nothing: plan {first} that was shown was replaced by plan {second}"
        )),
        "{err}"
    );
    assert!(
        ns.api::<PtahSchemaApproval>()
            .list(&Default::default())
            .await?
            .items
            .is_empty(),
        "no approval may exist"
    );

    // The replacement, approved and followed to InSync.
    let ran = ok(
        "approve --wait",
        k.run(&[
            "approve",
            "schema/orders",
            "--yes",
            "--wait",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;
    assert!(
        ran.stdout.contains(&second) && ran.stdout.contains("note"),
        "the plan shown: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("VerifyingConvergence") || ran.stderr.contains("Applying"),
        "progress: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.trim_end().ends_with("is InSync"),
        "{}",
        ran.stderr
    );
    assert!(db.columns("orders")?.iter().any(|c| c.starts_with("note ")));
    let applied = ok(
        "plan --applied",
        k.run(&["plan", "schema/orders", "--applied"])?,
    )?
    .stdout;
    assert!(
        applied.contains(&second) && applied.contains("note"),
        "{applied}"
    );
    let history = ok("history", k.run(&["history", "schema/orders"])?)?.stdout;
    assert!(
        history
            .lines()
            .next()
            .is_some_and(|l| l.contains("complete since 20")),
        "{history}"
    );
    for entry in [
        "PlanPublished",
        "ApprovalAccepted",
        "ApplyFinished",
        "Verified",
    ] {
        assert!(history.contains(entry), "{entry} missing:\n{history}");
    }

    // Two read requests in a row: two reads.
    for n in 1..=2 {
        let observes = count(&ns, "observe").await?;
        let ran = ok(
            "refresh --wait",
            k.run(&["refresh", "schema/orders", "--wait", "--timeout", "120s"])?,
        )?;
        assert!(ran.stderr.contains("read: schema/orders"), "{}", ran.stderr);
        assert_eq!(
            count(&ns, "observe").await?,
            observes + 1,
            "refresh {n} starts one read"
        );
    }

    // Bad input: one line each, naming what is wrong.
    refused(
        "unknown schema",
        &k.run(&["schema", "nosuch"])?,
        4,
        "PtahSchema \"nosuch\" not found in namespace",
    )?;
    let ran = k
        .command_in("no-such-namespace", &["schema", "orders"])
        .output()?
        .into();
    refused(
        "missing namespace",
        &ran,
        4,
        "namespace \"no-such-namespace\" not found",
    )?;
    refused(
        "no plan",
        &k.run(&["plan", "schema/orders"])?,
        4,
        "has no plan: the database matches its source",
    )?;
    refused(
        "malformed reference",
        &k.run(&["set-source", "schema/orders", "registry/app:v1"])?,
        64,
        "malformed OCI reference",
    )?;
    refused(
        "unknown kind",
        &k.run(&["wait", "table/orders"])?,
        64,
        "unknown kind \"table\"",
    )?;
    refused(
        "not OCI",
        &k.run(&["set-source", "schema/orders", "oci://127.0.0.1:1/app:v1"])?,
        1,
        "does not read an OCI source",
    )?;

    // A destructive edit of the spec: Blocked, and `wait` says why.
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "orders-narrow"},
        "data": {"schema.sql": WITHOUT_CUSTOMER},
    }))
    .await?;
    ns.api::<PtahSchema>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"source": {"configMap": {"name": "orders-narrow"}}}})),
        )
        .await?;
    let ran = k.run(&["wait", "schema/orders", "--timeout", "120s"])?;
    // Progress lines, then the one line of the verdict.
    let last = ran.stderr.lines().last().unwrap_or_default();
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(
        last.starts_with("error: schema/orders")
            && last.contains("is Blocked (DestructiveChangesDisabled)"),
        "{}",
        ran.stderr
    );

    operator.finish::<PtahSchema>(&ns).await
}

#[tokio::test]
async fn migration_verbs_on_a_real_migration() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "plugin", "migration").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::migration_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "OnApproval"}),
        executor::migration_files(),
    )
    .await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let k = Plugin::new(&ns)?;

    ok(
        "wait",
        k.run(&[
            "wait",
            "migration/orders",
            "--for",
            "AwaitingApproval",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;
    let shown = ok("migration", k.run(&["migration", "orders"])?)?.stdout;
    assert!(
        shown.starts_with(&format!(
            "PtahMigration {}/orders: AwaitingApproval",
            ns.name()
        )),
        "{shown}"
    );
    assert!(shown.contains("0 applied, 2 pending"), "{shown}");
    let plan = ok("plan", k.run(&["plan", "migration/orders"])?)?.stdout;
    assert!(
        plan.contains("VERSION") && plan.contains("\n1 ") && plan.contains("\n2 "),
        "{plan}"
    );
    assert!(plan.contains("2 version(s) after version 0"), "{plan}");
    assert!(
        !plan.contains("CREATE TABLE"),
        "a migration plan holds no SQL:\n{plan}"
    );
    let m: PtahMigration = ns.api().get("orders").await?;
    let checksum = {
        let name = m
            .status
            .as_ref()
            .and_then(|s| s.plan.as_ref())
            .map(|p| p.name.clone())
            .context("plan")?;
        let p: operator::api::PtahMigrationPlan = ns.api().get(&name).await?;
        p.spec.migrations[0].checksum.clone()
    };
    assert!(
        plan.contains(&checksum),
        "checksum {checksum} missing:\n{plan}"
    );

    let ran = ok(
        "approve --wait",
        k.run(&[
            "approve",
            "migration/orders",
            "--yes",
            "--wait",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;
    assert!(
        !ran.stdout.contains("CREATE TABLE"),
        "approve prints no SQL:\n{}",
        ran.stdout
    );
    assert!(
        ran.stderr.trim_end().ends_with("is InSync"),
        "{}",
        ran.stderr
    );
    assert!(db.tables()?.contains(&"customers".to_string()));
    let history = ok("history", k.run(&["history", "migration/orders"])?)?.stdout;
    assert!(
        history.contains("RunFinished") && history.contains("ApprovalAccepted"),
        "{history}"
    );
    let applied = ok(
        "plan --applied",
        k.run(&["plan", "migration/orders", "--applied"])?,
    )?
    .stdout;
    assert!(applied.contains(&checksum), "{applied}");
    let shown = ok("migration", k.run(&["migration", "orders"])?)?.stdout;
    assert!(
        shown.contains("last run Applied: applied [1, 2]"),
        "{shown}"
    );

    let reads = count(&ns, "history").await?;
    ok(
        "refresh --wait",
        k.run(&["refresh", "migration/orders", "--wait", "--timeout", "120s"])?,
    )?;
    assert_eq!(
        count(&ns, "history").await?,
        reads + 1,
        "the request starts one history read"
    );
    let m: PtahMigration = ns.api().get("orders").await?;
    assert_eq!(
        m.status.as_ref().and_then(|s| s.phase),
        Some(MigrationPhase::InSync)
    );

    operator.finish::<PtahMigration>(&ns).await
}

#[tokio::test]
async fn set_source_moves_an_unmanaged_schema_to_another_artifact() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "plugin", "set-source").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    let registry = Registry::from_harness(ns.harness())?;
    let repository = format!("ptah-conformance/{}", ns.name());
    let v1 = format!("{}/{repository}:v1", registry.host);
    let v2 = format!("{}/{repository}:v2", registry.host);
    let one = push_schema_file(&v1, "schema.sql", executor::SCHEMA_SQL.as_bytes()).await?;
    let two = push_schema_file(&v2, "schema.sql", WITH_NOTE.as_bytes()).await?;
    let work = tempfile::tempdir()?;
    let key = signed_by_new_key(&registry, work.path(), "signer", &one.pinned)?;
    run_ok(
        "cosign sign v2",
        &mut sign_command(&registry.cosign, work.path(), &key, &two.pinned, true, None),
    )?;
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "verification"},
        "data": {"policy.yaml": key_policy(&key.public_pem)},
    }))
    .await?;
    let source = json!({
        "oci": {"ociRef": format!("oci://{v1}"), "transport": {"plainHTTP": true}},
        "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
    });
    executor::schema_from(&ns, &db, "orders", source, json!({"apply": "OnApproval"})).await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let k = Plugin::new(&ns)?;
    let awaiting = [
        "wait",
        "schema/orders",
        "--for",
        "AwaitingApproval",
        "--timeout",
        "180s",
    ];
    ok("wait for v1's plan", k.run(&awaiting)?).with_context(|| operator.log())?;
    ok(
        "approve v1",
        k.run(&[
            "approve",
            "schema/orders",
            "--yes",
            "--wait",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;

    let target = format!("oci://{v2}");
    let ran = ok(
        "set-source --dry-run",
        k.run(&["set-source", "schema/orders", &target, "--dry-run"])?,
    )?;
    assert!(
        ran.stdout.starts_with("would set spec.source.oci.ociRef"),
        "{}",
        ran.stdout
    );
    let s: PtahSchema = ns.api().get("orders").await?;
    assert_eq!(
        s.spec.source.oci.as_ref().map(|o| o.oci_ref.clone()),
        Some(format!("oci://{v1}")),
        "a dry run changes nothing"
    );

    let ran = ok(
        "set-source",
        k.run(&["set-source", "schema/orders", &target])?,
    )?;
    assert!(
        ran.stdout.contains(&format!("oci://{v1} → {target}")),
        "{}",
        ran.stdout
    );
    ok("wait for v2's plan", k.run(&awaiting)?).with_context(|| operator.log())?;
    // An approval naming a signer other than the one the plan bound is
    // refused at admission, naming the field.
    let s: PtahSchema = ns.api().get("orders").await?;
    let plan_of_v2 = s
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("v2's plan")?;
    let forged = create_admitted::<PtahSchemaApproval>(
        &ns,
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchemaApproval",
            "metadata": {"name": "forged-signer"},
            "spec": {
                "schemaRef": {"name": "orders", "uid": s.metadata.uid.clone().unwrap_or_default()},
                "planRef": {"name": plan_of_v2.name, "uid": plan_of_v2.uid},
                "planFingerprint": plan_of_v2.fingerprint,
                "source": {"kind": "OCI", "contentDigest": two.digest,
                           "keyFingerprint": format!("sha256:{}", "0".repeat(64))},
            },
        }),
    )
    .await;
    let why = format!(
        "{:#}",
        forged
            .err()
            .context("an approval naming another signer was admitted")?
    );
    assert!(why.contains("spec.source.keyFingerprint"), "{why}");
    ok(
        "approve v2",
        k.run(&[
            "approve",
            "schema/orders",
            "--yes",
            "--wait",
            "--timeout",
            "180s",
        ])?,
    )
    .with_context(|| operator.log())?;
    let s = operator
        .until(&ns, "orders", "InSync on v2", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::InSync)
                && s.status
                    .as_ref()
                    .and_then(|st| st.source.as_ref())
                    .is_some_and(|src| src.content_digest == two.digest)
        })
        .await?;
    let revision = s
        .status
        .as_ref()
        .and_then(|st| st.source.as_ref())
        .map(|x| x.revision.clone())
        .unwrap_or_default();
    assert_eq!(
        revision,
        format!("v2@{}", two.digest),
        "the revision in Flux's words"
    );
    assert!(db.columns("orders")?.iter().any(|c| c.starts_with("note ")));
    // The applied plan's provenance: v2's digest and the key that signed it,
    // as Verify established them for this plan's bound evidence.
    let plan = ok(
        "plan --applied",
        k.run(&["plan", "schema/orders", "--applied"])?,
    )?
    .stdout;
    let provenance = plan
        .split("Provenance:\n")
        .nth(1)
        .and_then(|rest| rest.split("Source binding:").next())
        .with_context(|| format!("no Provenance section in {plan}"))?;
    let verification = s
        .status
        .as_ref()
        .and_then(|st| st.source.as_ref())
        .and_then(|src| src.verification.clone())
        .context("verification evidence")?;
    let fingerprint = verification
        .key_fingerprint
        .clone()
        .context("a key fingerprint")?;
    for part in [
        two.digest.as_str(),
        "signer key",
        fingerprint.as_str(),
        "evidence ",
    ] {
        assert!(provenance.contains(part), "{part:?} is not in {provenance}");
    }
    assert!(!provenance.contains("moved on"), "{provenance}");
    // The approval names what it approved: v2's digest and the key that
    // signed it, as the plan bound them.
    let approvals = ns
        .api::<PtahSchemaApproval>()
        .list(&Default::default())
        .await?;
    let approved = approvals
        .items
        .iter()
        .find(|a| a.spec.plan_ref.uid == plan_of_v2.uid)
        .context("the approval of v2's plan")?;
    let named = approved.spec.source.clone().context("spec.source")?;
    assert_eq!(named.content_digest, two.digest, "{named:?}");
    assert!(
        named
            .resolved_reference
            .as_deref()
            .is_some_and(|r| r.ends_with(&two.digest)),
        "{named:?}"
    );
    assert_eq!(named.key_fingerprint.as_deref(), Some(fingerprint.as_str()));
    assert_eq!(
        named.signer_evidence_digest,
        operator::api::status::signer_evidence_digest(&verification)
    );
    let owner = s
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| {
            e.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:spec/f:source/f:oci/f:ociRef"))
                .is_some()
        })
        .and_then(|e| e.manager.clone());
    assert_eq!(owner.as_deref(), Some("kubectl-ptah"));
    operator.finish::<PtahSchema>(&ns).await
}
