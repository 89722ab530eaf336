//! `kubectl ptah approve KIND/NAME`: shows the exact plan, then approves it
//! by UID and fingerprint. Admission refuses an approval of a plan that is no
//! longer the resource's plan, so a plan replaced between showing and
//! approving is approved by nothing; the verb says so in words and names the
//! replacement. `--wait` follows the Apply and its proof to the verdict.

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use operator::api::approval::ApprovedSource;
use operator::api::journal::JournalEntryType;
use serde_json::json;

use crate::follow::{Step, ended};
use crate::resource::{Resource, get};
use crate::{Failure, exit};

/// The approval object for the plan `(name, uid, fingerprint)` of `r`.
pub fn approval_object(
    r: &Resource,
    plan: &(String, String, String),
    source: &ApprovedSource,
) -> serde_json::Value {
    let (name, uid, fingerprint) = plan;
    let (kind, owner) = match r {
        Resource::Schema(_) => ("PtahSchemaApproval", "schemaRef"),
        Resource::Migration(_) => ("PtahMigrationApproval", "migrationRef"),
    };
    json!({
        "apiVersion": operator::api::API_VERSION,
        "kind": kind,
        "metadata": {"generateName": format!("{}-", r.name()), "namespace": r.namespace()},
        "spec": {
            owner: {"name": r.name(), "uid": r.uid()},
            "planRef": {"name": name, "uid": uid},
            "planFingerprint": fingerprint,
            // What was shown: admission refuses it unless it is the plan's.
            "source": source,
        },
    })
}

/// Checks that `r` waits for an approval and returns the plan it waits on.
pub fn approvable(r: &Resource) -> Result<(String, String, String), Failure> {
    let phase = r.phase();
    let plan = r.plan_ref();
    match (phase.as_deref(), plan) {
        (Some("AwaitingApproval"), Some(plan)) => Ok(plan),
        (_, None) => Err(Failure::error(format!(
            "{} has no plan to approve (it is {})",
            r.cli_name(),
            phase.as_deref().unwrap_or("not read yet")
        ))),
        (Some(p), Some((name, _, _))) => Err(Failure::error(format!(
            "{} is {p}, not AwaitingApproval: plan {name} does not wait for an approval",
            r.cli_name()
        ))),
        (None, Some(_)) => Err(Failure::error(format!(
            "{} has not been read yet",
            r.cli_name()
        ))),
    }
}

/// What the person is told when the approval of `shown` was refused and
/// `now` is the resource as it is after the refusal.
pub fn refused(shown: &(String, String, String), now: &Resource, server: &str) -> Failure {
    let who = now.cli_name();
    match now.plan_ref() {
        Some(current) if current.1 != shown.1 || current.2 != shown.2 => Failure::error(format!(
            "approved nothing: plan {} that was shown was replaced by plan {} while you read it; \
             read the replacement with `kubectl ptah plan {who}`, then approve that",
            shown.0, current.0
        )),
        None => Failure::error(format!(
            "approved nothing: plan {} that was shown is no longer the plan of {who} (it has none now)",
            shown.0
        )),
        Some(_) => Failure::error(format!(
            "approved nothing: admission refused the approval: {server}"
        )),
    }
}

/// Creates the approval; returns its name and UID and the approver
/// admission stamped.
pub async fn create(
    client: &Client,
    r: &Resource,
    plan: &(String, String, String),
    source: &ApprovedSource,
) -> Result<(String, String, String), Failure> {
    let ns = r.namespace();
    let value = approval_object(r, plan, source);
    let pp = PostParams::default();
    let plural = r.kind().approvals_plural();
    let kind = value["kind"].as_str().unwrap_or_default().to_string();
    let gvk = GroupVersionKind::gvk(operator::api::GROUP, operator::api::VERSION, &kind);
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    );
    let obj: DynamicObject =
        serde_json::from_value(value).map_err(|e| Failure::error(e.to_string()))?;
    let created = api.create(&pp, &obj).await.map(|a| {
        let approver = a.data["spec"]["approver"]["username"]
            .as_str()
            .map(String::from);
        (a.name_any(), a.uid().unwrap_or_default(), approver)
    });
    match created {
        Ok((name, uid, approver)) => Ok((
            name,
            uid,
            approver.unwrap_or_else(|| "(not stamped)".into()),
        )),
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
            let now = get(client, &ns, &r.target()).await?;
            Err(refused(plan, &now, &status.message))
        }
        Err(e) => Err(Failure::api(
            format!("creating the approval of plan {}", plan.0),
            e,
        )),
    }
}

/// `--wait` after an approval: the Apply has consumed it (its
/// `ApprovalAccepted` entry names it) and the resource reached its verdict.
pub fn wait_step(r: &Resource, approval_uid: &str, plan_name: &str) -> Step {
    let accepted = r.journal().iter().any(|e| {
        e.type_ == JournalEntryType::ApprovalAccepted
            && e.approval_uid.as_deref() == Some(approval_uid)
    });
    if !accepted {
        // The plan went away before any Apply took the approval.
        if r.plan_ref().is_some_and(|p| p.0 != plan_name)
            && r.phase().as_deref() == Some("AwaitingApproval")
        {
            return Step::Stop(Failure::error(format!(
                "plan {plan_name} was replaced before it ran; the approval authorizes nothing now: read the new plan with `kubectl ptah plan {}`",
                r.cli_name()
            )));
        }
        return Step::Continue;
    }
    match r.phase().as_deref() {
        Some("InSync") => Step::Done,
        Some("Blocked" | "Failed") => Step::Stop(ended(r)),
        Some("AwaitingApproval") if r.plan_ref().is_some_and(|p| p.0 != plan_name) => {
            Step::Stop(Failure::new(
                exit::BLOCKED_OR_FAILED,
                format!(
                    "plan {plan_name} ran, and the proof found more to do: a new plan waits ({})",
                    r.plan_ref().map(|p| p.0).unwrap_or_default()
                ),
            ))
        }
        _ => Step::Continue,
    }
}

/// Asks on the terminal; `true` to approve.
pub async fn confirm(plan_name: &str) -> Result<bool, Failure> {
    eprint!("Approve plan {plan_name}? [y/N] ");
    let line = tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).map(|_| s)
    })
    .await
    .map_err(|e| Failure::error(e.to_string()))?
    .map_err(|e| Failure::error(format!("reading the answer: {e}")))?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(phase: &str, plan: Option<(&str, &str)>) -> Resource {
        let mut status = json!({"observedGeneration": 1, "phase": phase});
        if let Some((name, uid)) = plan {
            status["plan"] =
                json!({"name": name, "uid": uid, "fingerprint": format!("sha256:{uid}")});
        }
        crate::fixtures::resource(crate::resource::Kind::Schema, 1, status)
    }

    #[test]
    fn the_approval_names_the_plan_by_uid_and_fingerprint() {
        let r = schema("AwaitingApproval", Some(("orders-1", "p1")));
        let plan = approvable(&r).expect("approvable");
        let source: ApprovedSource = serde_json::from_value(json!({
            "kind": "Git", "contentDigest": format!("sha256:{}", "1".repeat(64)),
            "commit": "0123456789abcdef0123456789abcdef01234567",
        }))
        .unwrap();
        let a = approval_object(&r, &plan, &source);
        assert_eq!(a["kind"], "PtahSchemaApproval");
        assert_eq!(
            a["spec"]["source"]["commit"], "0123456789abcdef0123456789abcdef01234567",
            "the approval names the source it was shown"
        );
        assert_eq!(
            a["spec"]["schemaRef"],
            json!({"name": "orders", "uid": "s1"})
        );
        assert_eq!(
            a["spec"]["planRef"],
            json!({"name": "orders-1", "uid": "p1"})
        );
        assert_eq!(a["spec"]["planFingerprint"], "sha256:p1");
        assert!(
            a["spec"].get("approver").is_none(),
            "admission stamps the approver"
        );
    }

    #[test]
    fn only_a_plan_awaiting_approval_is_approvable() {
        let e = approvable(&schema("InSync", None)).unwrap_err();
        assert!(
            e.message.contains("has no plan to approve"),
            "{}",
            e.message
        );
        let e = approvable(&schema("Applying", Some(("orders-1", "p1")))).unwrap_err();
        assert!(
            e.message.contains("is Applying, not AwaitingApproval"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_replaced_plan_is_explained_naming_the_replacement() {
        let shown = (
            "orders-1".to_string(),
            "p1".to_string(),
            "sha256:p1".to_string(),
        );
        let now = schema("AwaitingApproval", Some(("orders-2", "p2")));
        let f = refused(&shown, &now, "spec.planRef: ...");
        assert!(
            f.message.starts_with(
                "approved nothing: plan orders-1 that was shown was replaced by plan orders-2"
            ),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("kubectl ptah plan schema/orders -n app"),
            "{}",
            f.message
        );
    }
}
