//! `kubectl ptah set-source KIND/NAME oci://REF[@DIGEST]`: points the
//! resource at another OCI artifact with server-side apply under the field
//! manager `kubectl-ptah`. A field a GitOps controller owns would be put back
//! at its next sync, so by default the verb refuses, names the owner and
//! prints the change to make in Git; `--force` takes the field.

use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use supplychain::oci::OciReference;

use crate::Failure;
use crate::resource::Resource;

/// The field manager of every write this verb makes.
pub const FIELD_MANAGER: &str = "kubectl-ptah";

/// Field managers of GitOps controllers, and what a person calls them.
const GITOPS_MANAGERS: [(&str, &str); 4] = [
    ("kustomize-controller", "Flux"),
    ("helm-controller", "Flux"),
    ("argocd-controller", "Argo CD"),
    ("argocd-application-controller", "Argo CD"),
];

/// Checks the reference the way the manager will, so a malformed one is
/// refused here with the rule it breaks.
pub fn checked_reference(reference: &str) -> Result<OciReference, Failure> {
    OciReference::from_str(reference)
        .map_err(|e| Failure::usage(format!("malformed OCI reference: {e}")))
}

/// The managers (other than this verb) that own `spec.source.oci.ociRef`.
pub fn ref_owners(fields: &[ManagedFieldsEntry]) -> Vec<String> {
    fields
        .iter()
        .filter(|e| e.subresource.is_none() && e.manager.as_deref() != Some(FIELD_MANAGER))
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:spec/f:source/f:oci/f:ociRef"))
                .is_some()
        })
        .filter_map(|e| e.manager.clone())
        .collect()
}

/// The GitOps controller among `owners`, as (manager, product).
pub fn gitops_owner(owners: &[String]) -> Option<(String, &'static str)> {
    owners.iter().find_map(|o| {
        GITOPS_MANAGERS
            .iter()
            .find(|(m, _)| o == m)
            .map(|(_, product)| (o.clone(), *product))
    })
}

/// Which Flux Kustomization or Argo CD Application applied `r`, from the
/// labels and annotations they put on what they apply.
pub fn applied_by(r: &Resource) -> Option<String> {
    let labels = r.labels();
    if let (Some(name), Some(ns)) = (
        labels.get("kustomize.toolkit.fluxcd.io/name"),
        labels.get("kustomize.toolkit.fluxcd.io/namespace"),
    ) {
        return Some(format!("Kustomization {ns}/{name}"));
    }
    if let Some(id) = r.annotations().get("argocd.argoproj.io/tracking-id") {
        return Some(format!(
            "Application {}",
            id.split(':').next().unwrap_or(id)
        ));
    }
    labels
        .get("app.kubernetes.io/instance")
        .map(|a| format!("Application {a}"))
}

/// The refusal: who owns the field, and the change to make in Git instead.
pub fn refusal(r: &Resource, owner: &(String, &'static str), old: &str, new: &str) -> Failure {
    let by = applied_by(r).map(|a| format!(", {a}")).unwrap_or_default();
    Failure::error(format!(
        "refused: spec.source.oci.ociRef of {} is owned by {} ({}{by}); a change made here would be put back at its next sync.\n\
         Make the change in Git instead, in the manifest of {} {}/{}:\n\
         \x20 spec:\n\
         \x20   source:\n\
         \x20     oci:\n\
         -       ociRef: {old}\n\
         +       ociRef: {new}\n\
         Or take the field with --force (the controller will report the drift).",
        r.cli_name(),
        owner.0,
        owner.1,
        r.kind().api_kind(),
        r.namespace(),
        r.name()
    ))
}

/// The server-side apply patch: only the field this verb owns.
pub fn patch(r: &Resource, new: &str) -> serde_json::Value {
    json!({
        "apiVersion": operator::api::API_VERSION,
        "kind": r.kind().api_kind(),
        "metadata": {"name": r.name(), "namespace": r.namespace()},
        "spec": {"source": {"oci": {"ociRef": new}}},
    })
}

/// Applies the patch (`dry_run` asks the API server to check it and store
/// nothing). Forced: a field owned by a manager that is not a GitOps
/// controller (a person's `kubectl apply`) is taken, which is what the verb
/// is for.
pub async fn apply(client: &Client, r: &Resource, new: &str, dry_run: bool) -> Result<(), Failure> {
    let mut pp = PatchParams::apply(FIELD_MANAGER).force();
    pp.dry_run = dry_run;
    let res = r.patch(client, &pp, &Patch::Apply(patch(r, new))).await;
    res.map_err(|e| {
        Failure::api(
            format!("setting spec.source.oci.ociRef of {}", r.cli_name()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

    fn entry(
        manager: &str,
        fields: serde_json::Value,
        subresource: Option<&str>,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            subresource: subresource.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn the_owner_of_the_ref_is_found_and_status_writers_are_not() {
        let fields = vec![
            entry(
                "kustomize-controller",
                json!({"f:spec": {"f:source": {"f:oci": {"f:ociRef": {}}}}}),
                None,
            ),
            entry(
                "ptah-operator",
                json!({"f:status": {"f:phase": {}}}),
                Some("status"),
            ),
            entry(
                "kubectl-ptah",
                json!({"f:spec": {"f:source": {"f:oci": {"f:ociRef": {}}}}}),
                None,
            ),
            entry(
                "kubectl",
                json!({"f:metadata": {"f:annotations": {}}}),
                None,
            ),
        ];
        let owners = ref_owners(&fields);
        assert_eq!(owners, ["kustomize-controller"]);
        assert_eq!(
            gitops_owner(&owners),
            Some(("kustomize-controller".into(), "Flux"))
        );
        assert_eq!(gitops_owner(&["kubectl-client-side-apply".into()]), None);
    }

    #[test]
    fn malformed_references_name_the_rule() {
        let e = checked_reference("registry.example/app:v1").unwrap_err();
        assert!(
            e.message.contains("must start with oci://"),
            "{}",
            e.message
        );
        let e = checked_reference("oci://user:pw@registry.example/app:v1").unwrap_err();
        assert!(
            !e.message.contains("pw"),
            "credentials never echoed: {}",
            e.message
        );
        assert!(checked_reference("oci://127.0.0.1:5000/app/schema:v2").is_ok());
    }
}
