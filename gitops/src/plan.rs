//! `kubectl ptah plan KIND/NAME`: the plan's identity, contents and findings,
//! and the source it is bound to. A schema plan's SQL is read back from its
//! chunks with the manager's own reader (every chunk's digest and the whole
//! plan's checked); a migration plan holds versions and checksums, never SQL.
//! `--applied` shows the plan the last confirmed Apply (or run) carried out.

use kube::{Api, Client};
use operator::api::approval::ApprovedSource;
use operator::api::status::SourceBinding;
use operator::api::{PtahMigrationPlan, PtahSchemaPlan};
use operator::runner::reports::PlanDocument;
use serde::Serialize;

use crate::Failure;
use crate::resource::{Resource, spelled, when};

/// One statement of a schema plan.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub severity: String,
}

/// One version of a migration plan.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub version: i64,
    pub description: Option<String>,
    pub checksum: String,
    pub checkpoint: bool,
}

/// A plan as the verb shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
    pub fingerprint: String,
    /// `PtahSchema app/orders`.
    pub resource: String,
    pub created_at: Option<String>,
    /// The identity lines: content digest, dialect, target, policy, execution.
    pub identity: Vec<(String, String)>,
    /// Findings: destructive, privilege changes, drift, severities.
    pub findings: Vec<String>,
    pub source: Vec<(String, String)>,
    /// Where the plan's input came from and who vouched for it: the commit,
    /// the artifact digest, the verified signer.
    pub provenance: Vec<(String, String)>,
    /// What an approval of this plan names as its source (`spec.source`).
    #[serde(skip)]
    pub approves: ApprovedSource,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<Statement>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<Version>,
}

fn source_lines(b: &SourceBinding) -> Vec<(String, String)> {
    let mut out = vec![
        ("kind".to_string(), spelled(&b.kind)),
        ("content".to_string(), b.content_digest.clone()),
    ];
    let mut add = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            out.push((k.to_string(), v.clone()));
        }
    };
    add("configMapUID", &b.config_map_uid);
    add("snapshot", &b.snapshot_name);
    add("location", &b.location_digest);
    add("commit", &b.commit);
    add("reference", &b.resolved_reference);
    add("fluxObjectUID", &b.flux_object_uid);
    add("fluxRevision", &b.flux_revision);
    add("sourcePolicy", &b.source_policy_digest);
    add("verificationPolicy", &b.verification_policy_digest);
    add("signerEvidence", &b.signer_evidence_digest);
    out
}

/// The plan's provenance: what its binding names, and the verified signer
/// when the evidence in the resource's status is the evidence the plan
/// bound (its digest equal to the plan's `signerEvidence`), never a newer
/// signer of another artifact.
pub fn provenance(r: &Resource, b: &SourceBinding) -> Vec<(String, String)> {
    use operator::api::source::SourceKind;
    let mut out = Vec::new();
    match b.kind {
        SourceKind::ConfigMap => out.push((
            "configMap".to_string(),
            format!(
                "uid {} content {}",
                b.config_map_uid.as_deref().unwrap_or("?"),
                b.content_digest
            ),
        )),
        SourceKind::Git => out.push((
            "git commit".to_string(),
            b.commit.clone().unwrap_or_else(|| "?".into()),
        )),
        SourceKind::OCI => out.push((
            "artifact".to_string(),
            b.resolved_reference
                .clone()
                .unwrap_or_else(|| b.content_digest.clone()),
        )),
        SourceKind::Flux => {
            out.push((
                "flux revision".to_string(),
                b.flux_revision.clone().unwrap_or_else(|| "?".into()),
            ));
            if let Some(r) = &b.resolved_reference {
                out.push(("artifact".to_string(), r.clone()));
            }
        }
    }
    let Some(bound) = &b.signer_evidence_digest else {
        if b.kind == SourceKind::OCI {
            out.push(("signer".into(), "none bound".into()));
        }
        return out;
    };
    let evidence = r
        .verification()
        .filter(|v| operator::api::status::signer_evidence_digest(v).as_ref() == Some(bound));
    let Some(v) = evidence else {
        out.push((
            "signer".into(),
            format!("evidence {bound} (the resource's status has moved on to another)"),
        ));
        return out;
    };
    if let Some(id) = &v.signer_identity {
        out.push((
            "signer".into(),
            format!("{} (issuer {})", id.subject, id.issuer),
        ));
    }
    if let Some(k) = &v.key_fingerprint {
        out.push(("signer key".into(), k.clone()));
    }
    if let Some(a) = &v.authority {
        out.push(("authority".into(), a.clone()));
    }
    if let Some(t) = v.transparency_log_verified {
        out.push((
            "transparency log".into(),
            if t { "verified" } else { "not checked" }.into(),
        ));
    }
    out.push(("evidence".into(), bound.clone()));
    out
}

/// Which plan of the resource the verb shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The plan `status.plan` names.
    Current,
    /// The plan the last confirmed Apply (schema) or run (migration) carried out.
    Applied,
}

/// The name (and, where recorded, UID) of the plan `which` picks.
pub fn plan_name(r: &Resource, which: Which) -> Result<(String, Option<String>), Failure> {
    let who = r.cli_name();
    match (r, which) {
        (_, Which::Current) => r.plan_ref().map(|(n, u, _)| (n, Some(u))).ok_or_else(|| {
            Failure::not_found(format!(
                "{who} has no plan: {}",
                match r.phase().as_deref() {
                    Some("InSync") => "the database matches its source".to_string(),
                    Some(p) => format!("it is {p}"),
                    None => "the manager has not read it yet".to_string(),
                }
            ))
        }),
        (Resource::Schema(s), Which::Applied) => s
            .status
            .as_ref()
            .and_then(|st| st.applied.as_ref())
            .map(|a| (a.plan_name.clone(), Some(a.plan_uid.clone())))
            .ok_or_else(|| {
                Failure::not_found(format!(
                    "{who} records no confirmed Apply (status.applied is empty)"
                ))
            }),
        (Resource::Migration(m), Which::Applied) => m
            .status
            .as_ref()
            .and_then(|st| st.last_run.as_ref())
            .and_then(|run| run.plan_name.clone().map(|n| (n, run.plan_uid.clone())))
            .ok_or_else(|| {
                Failure::not_found(format!(
                    "{who} records no run of a plan (status.lastRun is empty)"
                ))
            }),
    }
}

/// The stored plan `name` of kind `K`, refused as gone when it is missing or
/// is another object under that name (its UID is not `uid`).
async fn stored<K>(
    client: &Client,
    ns: &str,
    name: &str,
    uid: Option<&str>,
    gone: impl Fn() -> Failure,
) -> Result<K, Failure>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let plan = Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Failure::api(format!("reading {kind} {ns}/{name}"), e))?
        .ok_or_else(&gone)?;
    if uid.is_some_and(|u| plan.meta().uid.as_deref() != Some(u)) {
        return Err(gone());
    }
    Ok(plan)
}

/// Reads and checks the plan `which` picks.
pub async fn read(client: &Client, r: &Resource, which: Which) -> Result<PlanView, Failure> {
    let ns = r.namespace();
    let (name, uid) = plan_name(r, which)?;
    let gone = || {
        Failure::not_found(format!(
            "plan {name} that {} names is no longer stored in namespace {ns}",
            r.cli_name()
        ))
    };
    match r {
        Resource::Schema(_) => {
            let plan: PtahSchemaPlan = stored(client, &ns, &name, uid.as_deref(), gone).await?;
            let bytes =
                operator::execution::plan::read_back(client, &ns, &name, &plan.spec.content_digest)
                    .await
                    .map_err(|e| {
                        Failure::error(format!(
                            "reading the bytes of PtahSchemaPlan {ns}/{name}: {e}"
                        ))
                    })?;
            Ok(schema_view(r, &plan, &bytes))
        }
        Resource::Migration(_) => {
            let plan: PtahMigrationPlan = stored(client, &ns, &name, uid.as_deref(), gone).await?;
            Ok(migration_view(r, &plan))
        }
    }
}

/// The execution components a plan is bound to, in one line.
fn execution(b: &operator::api::status::ExecutionBinding) -> (String, String) {
    (
        "execution".into(),
        format!("{} (Ptah {})", b.epoch, b.ptah_version),
    )
}

/// A schema plan's view from its object and verified bytes.
pub fn schema_view(r: &Resource, plan: &PtahSchemaPlan, bytes: &[u8]) -> PlanView {
    let spec = &plan.spec;
    let mut findings = Vec::new();
    findings.push(if spec.destructive {
        "destructive: yes (it drops or narrows what exists)".to_string()
    } else {
        "destructive: no".to_string()
    });
    if spec.privilege_changes.is_empty() {
        findings.push("privilege changes: none".to_string());
    } else {
        let kinds: Vec<String> = spec.privilege_changes.iter().map(spelled).collect();
        findings.push(format!("privilege changes: {}", kinds.join(", ")));
    }
    if let Resource::Schema(s) = r
        && let Some(t) = s.status.as_ref().and_then(|st| st.target.as_ref())
    {
        findings.extend(t.drift_findings.iter().map(crate::stages::drift));
    }
    let statements = statements_of(bytes);
    PlanView {
        kind: "PtahSchemaPlan",
        name: plan.metadata.name.clone().unwrap_or_default(),
        uid: plan.metadata.uid.clone().unwrap_or_default(),
        fingerprint: spec.fingerprint.clone(),
        resource: format!("PtahSchema {}/{}", r.namespace(), spec.schema_ref.name),
        created_at: plan.metadata.creation_timestamp.as_ref().map(when),
        identity: vec![
            (
                "content".into(),
                format!("{} ({} bytes)", spec.content_digest, spec.size),
            ),
            ("statements".into(), spec.statement_count.to_string()),
            ("dialect".into(), spec.dialect.clone()),
            ("target".into(), spec.target_identity_digest.clone()),
            ("from state".into(), spec.actual_state_fingerprint.clone()),
            ("to state".into(), spec.desired_state_fingerprint.clone()),
            ("policy".into(), spec.policy_fingerprint.clone()),
            execution(&spec.execution_binding),
        ],
        findings,
        source: source_lines(&spec.source),
        provenance: provenance(r, &spec.source),
        approves: ApprovedSource::of(&spec.source, r.verification()),
        statements,
        versions: vec![],
    }
}

/// A migration plan's view from its object.
pub fn migration_view(r: &Resource, plan: &PtahMigrationPlan) -> PlanView {
    let spec = &plan.spec;
    let checkpoints = spec.migrations.iter().filter(|m| m.checkpoint).count();
    let mut findings = vec![format!(
        "{} version(s) after version {}",
        spec.migrations.len(),
        spec.current_version
    )];
    if checkpoints > 0 {
        findings.push(format!("{checkpoints} checkpoint(s)"));
    }
    if let Some(mode) = &spec.transaction_mode {
        findings.push(format!("transaction mode: {}", spelled(mode)));
    }
    PlanView {
        kind: "PtahMigrationPlan",
        name: plan.metadata.name.clone().unwrap_or_default(),
        uid: plan.metadata.uid.clone().unwrap_or_default(),
        fingerprint: spec.fingerprint.clone(),
        resource: format!(
            "PtahMigration {}/{}",
            r.namespace(),
            spec.migration_ref.name
        ),
        created_at: plan.metadata.creation_timestamp.as_ref().map(when),
        identity: vec![
            ("history".into(), spec.history_fingerprint.clone()),
            ("target".into(), spec.target_identity_digest.clone()),
            ("policy".into(), spec.policy_fingerprint.clone()),
            execution(&spec.execution_binding),
        ],
        findings,
        source: source_lines(&spec.source),
        provenance: provenance(r, &spec.source),
        approves: ApprovedSource::of(&spec.source, r.verification()),
        statements: vec![],
        versions: spec
            .migrations
            .iter()
            .map(|m| Version {
                version: m.version,
                description: m.description.clone(),
                checksum: m.checksum.clone(),
                checkpoint: m.checkpoint,
            })
            .collect(),
    }
}

/// A schema plan's statements from Ptah's plan document; a document this
/// plugin does not know is shown as its bytes.
pub fn statements_of(bytes: &[u8]) -> Vec<Statement> {
    match serde_json::from_slice::<PlanDocument>(bytes) {
        Ok(doc) => doc
            .statements
            .into_iter()
            .map(|s| Statement {
                sql: s.sql,
                severity: s.severity,
            })
            .collect(),
        Err(_) => vec![Statement {
            sql: String::from_utf8_lossy(bytes).into_owned(),
            severity: "unparsed".to_string(),
        }],
    }
}

/// Statements as SQL, each under a `-- N (severity)` line.
pub fn sql_lines(statements: &[Statement]) -> String {
    statements
        .iter()
        .enumerate()
        .map(|(i, s)| format!("-- {} ({})\n{}\n", i + 1, s.severity, s.sql.trim_end()))
        .collect()
}

/// The plan as a terminal shows it.
pub fn render(p: &PlanView) -> String {
    let mut out = format!("{} {} of {}\n", p.kind, p.name, p.resource);
    let mut line = |k: &str, v: &str| out.push_str(&format!("  {k:<13} {v}\n"));
    line("uid", &p.uid);
    line("fingerprint", &p.fingerprint);
    if let Some(at) = &p.created_at {
        line("published", at);
    }
    for (k, v) in &p.identity {
        line(k, v);
    }
    out.push_str("Findings:\n");
    for f in &p.findings {
        out.push_str(&format!("  {f}\n"));
    }
    out.push_str("Provenance:\n");
    for (k, v) in &p.provenance {
        out.push_str(&format!("  {k:<19} {v}\n"));
    }
    out.push_str("Source binding:\n");
    for (k, v) in &p.source {
        out.push_str(&format!("  {k:<19} {v}\n"));
    }
    if !p.statements.is_empty() {
        out.push_str("SQL:\n");
        out.push_str(&sql_lines(&p.statements));
    }
    if !p.versions.is_empty() {
        let header = ["VERSION", "DESCRIPTION", "CHECKPOINT", "CHECKSUM"].map(String::from);
        let rows: Vec<[String; 4]> = p
            .versions
            .iter()
            .map(|v| {
                [
                    v.version.to_string(),
                    v.description.clone().unwrap_or_else(|| "-".into()),
                    if v.checkpoint { "yes" } else { "no" }.into(),
                    v.checksum.clone(),
                ]
            })
            .collect();
        out.push_str(&crate::output::table(&header, &rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use operator::api::schema::PtahSchema;
    use operator::api::source::VerificationEvidence;
    use operator::api::status::signer_evidence_digest;
    use serde_json::json;

    use super::*;

    fn evidence(key: &str) -> VerificationEvidence {
        serde_json::from_value(json!({
            "policy": {"name": "v", "key": "policy.yaml", "uid": "u", "digest": format!("sha256:{}", "1".repeat(64))},
            "keyFingerprint": format!("sha256:{}", key.repeat(64)),
            "signatureDigest": format!("sha256:{}", "3".repeat(64)),
        }))
        .expect("evidence")
    }

    fn schema_verified_by(v: &VerificationEvidence) -> Resource {
        let s: PtahSchema = serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
            "metadata": {"name": "orders", "namespace": "app"},
            "spec": {
                "source": {"oci": {"ociRef": "oci://r/app:v1"},
                           "verificationPolicyFrom": {"name": "v", "key": "policy.yaml"}},
                "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "k"},
            },
            "status": {"source": {
                "kind": "OCI", "contentDigest": format!("sha256:{}", "4".repeat(64)),
                "revision": "v1@sha256:x", "verification": v,
            }},
        }))
        .expect("schema");
        Resource::Schema(Box::new(s))
    }

    fn oci_binding(bound: Option<String>) -> SourceBinding {
        serde_json::from_value(json!({
            "kind": "OCI",
            "contentDigest": format!("sha256:{}", "4".repeat(64)),
            "resolvedReference": "r/app@sha256:4444",
            "signerEvidenceDigest": bound,
        }))
        .expect("binding")
    }

    fn line<'a>(lines: &'a [(String, String)], key: &str) -> Option<&'a str> {
        lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn provenance_names_the_signer_only_for_the_evidence_the_plan_bound() {
        let v = evidence("2");
        let r = schema_verified_by(&v);
        let bound = signer_evidence_digest(&v);
        let lines = provenance(&r, &oci_binding(bound.clone()));
        assert_eq!(line(&lines, "artifact"), Some("r/app@sha256:4444"));
        assert_eq!(
            line(&lines, "signer key"),
            v.key_fingerprint.as_deref(),
            "{lines:?}"
        );
        assert_eq!(line(&lines, "evidence"), bound.as_deref());

        // Status verified by another key since: the plan's signer is not
        // named from it.
        let r = schema_verified_by(&evidence("5"));
        let lines = provenance(&r, &oci_binding(bound));
        assert_eq!(line(&lines, "signer key"), None, "{lines:?}");
        assert!(
            line(&lines, "signer").is_some_and(|s| s.contains("moved on")),
            "{lines:?}"
        );

        let lines = provenance(&r, &oci_binding(None));
        assert_eq!(line(&lines, "signer"), Some("none bound"));
    }
}
