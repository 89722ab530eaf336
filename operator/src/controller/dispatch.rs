//! The Job of a schema's claim: what the builder is given, from the spec, the
//! status and the claim, on the input both families share
//! (`job_input.rs`). Pure; the create itself is
//! in [`super::runtime`].

use crate::api::annotations::SCHEMA_LABEL;
use crate::api::schema::PtahSchema;
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{ApplyInput, JobInput, OwnerKind};

use super::Config;
use super::family::Family;
use super::job_input::{NotBuildable, common_input, current_plan, missing};

/// The builder's input for `claim` of `schema`: what both families share,
/// with the schema's dev database and the plan an Apply runs.
pub fn job_input(
    schema: &PtahSchema,
    claim: &ActiveOperation,
    config: &Config,
) -> Result<JobInput, NotBuildable> {
    let spec = &schema.spec;
    let job_spec = schema.job_spec();
    let mut input = common_input(
        OwnerKind::PtahSchema,
        &schema.metadata,
        claim,
        config,
        job_spec,
    )?;
    input.target.dev_url_from = spec.dev.as_ref().map(|d| d.url_from.clone());
    input.target.exclude = spec.policy.exclude.clone();
    input.apply = apply_input(schema, claim)?;
    Ok(input)
}

/// What an Apply runs: the plan its claim names, whose bytes the runner
/// fetches and checks against the content digest before Ptah sees them.
fn apply_input(
    schema: &PtahSchema,
    claim: &ActiveOperation,
) -> Result<Option<ApplyInput>, NotBuildable> {
    if claim.type_ != OperationType::Apply {
        return Ok(None);
    }
    let plans = schema.status.as_ref().and_then(|s| s.plan.as_ref());
    let plan = current_plan(plans, |p| &p.name, claim)?;
    Ok(Some(ApplyInput::Schema {
        plan_name: plan.name.clone(),
        plan_fingerprint: plan.fingerprint.clone(),
        content_digest: plan
            .content_digest
            .clone()
            .ok_or_else(|| missing("status.plan.contentDigest", "not recorded"))?,
        transaction_mode: schema.spec.policy.transaction_mode,
    }))
}

/// The label selector of a schema's Jobs.
pub fn jobs_of(schema_name: &str) -> String {
    format!("{SCHEMA_LABEL}={schema_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::SourceBinding;
    use crate::execution::job::SourceInput;

    fn config() -> Config {
        super::super::job_input::test_config("r@sha256:1".into(), "e@sha256:2".into())
    }

    fn schema(source: serde_json::Value) -> PtahSchema {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 3},
            "spec": {
                "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "k"},
                "source": source,
            },
        }))
        .expect("a valid schema")
    }

    fn claim(op: OperationType, source: Option<SourceBinding>) -> ActiveOperation {
        serde_json::from_value::<ActiveOperation>(serde_json::json!({
            "type": op,
            "operationID": format!("sha256:{}", "a".repeat(64)),
            "inputFingerprint": format!("sha256:{}", "b".repeat(64)),
            "jobName": "ptah-observe-orders-aaaaaaaaaaaaaaaa",
            "attempt": 1,
            "startedAt": "2026-11-30T00:00:00Z",
        }))
        .map(|mut c| {
            c.source = source;
            c
        })
        .expect("a valid claim")
    }

    fn binding(snapshot: Option<&str>) -> SourceBinding {
        crate::testing::configmap_binding(format!("sha256:{}", "c".repeat(64)), snapshot)
    }

    #[test]
    fn a_configmap_operation_mounts_the_bound_snapshot() {
        let s = schema(serde_json::json!({"configMap": {"name": "schema"}}));
        let c = claim(OperationType::Observe, Some(binding(Some("ptah-src-1"))));
        let input = job_input(&s, &c, &config()).expect("buildable");
        assert_eq!(
            input.source,
            SourceInput::ConfigMap {
                snapshot_name: "ptah-src-1".into(),
                content_digest: binding(None).content_digest
            }
        );
        assert_eq!(input.owner.generation, 3);
        assert!(input.apply.is_none());
    }

    #[test]
    fn a_missing_binding_names_the_field() {
        let s = schema(serde_json::json!({"configMap": {"name": "schema"}}));
        let err = job_input(
            &s,
            &claim(OperationType::Observe, Some(binding(None))),
            &config(),
        )
        .expect_err("no snapshot");
        assert_eq!(err.field, "status.activeOperation.source.snapshotName");
        let oci = schema(serde_json::json!({"oci": {"ociRef": "oci://r.example/a/b:v1"}}));
        let err = job_input(&oci, &claim(OperationType::Verify, None), &config())
            .expect_err("no pinned digest");
        assert_eq!(err.field, "status.activeOperation.source.resolvedReference");
    }

    #[test]
    fn resolve_reads_the_spec_and_an_apply_needs_the_current_plan() {
        let git = schema(
            serde_json::json!({"git": {"url": "https://git.example/a.git", "ref": {"branch": "main"}}}),
        );
        let input =
            job_input(&git, &claim(OperationType::Resolve, None), &config()).expect("buildable");
        let SourceInput::Git(g) = input.source else {
            panic!("a Git source");
        };
        assert_eq!((g.commit, g.content_digest), (None, None));
        let cm = schema(serde_json::json!({"configMap": {"name": "schema"}}));
        let apply = claim(OperationType::Apply, Some(binding(Some("ptah-src-1"))));
        let err = job_input(&cm, &apply, &config()).expect_err("no current plan");
        assert_eq!(err.field, "status.plan");
    }
}
