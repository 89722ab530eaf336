//! A Flux source by reference (`spec.source.flux`): the manager reads the
//! `GitRepository` or `OCIRepository` when it dispatches the Resolve, and the
//! Job is bound to the artifact the object's status named then. The object
//! being Ready is Flux's word; the artifact's digest is checked by the Job,
//! and an `OCIRepository` under a verification policy is verified by our own
//! Verify Job, not by Flux's `SourceVerified`.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::api::condition::Reason;
use crate::api::source::{FluxSource, FluxSourceKind, OciTransport, Source};
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{FluxArtifact, JobInput, SourceInput};

/// The part of a Flux `GitRepository` the watch keeps: metadata and
/// `status.artifact` (the spec is not read from the watch).
#[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, Default)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "GitRepository",
    namespaced,
    status = "WatchedStatus",
    schema = "disabled"
)]
pub struct GitRepositorySpec {}

/// The part of a Flux `OCIRepository` the watch keeps.
#[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, Default)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "OCIRepository",
    namespaced,
    status = "WatchedStatus",
    schema = "disabled"
)]
pub struct OCIRepositorySpec {}

/// `status.artifact.revision`, all the watch keeps of a Flux status.
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchedStatus {
    /// The artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<WatchedArtifact>,
}

/// The artifact's revision.
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchedArtifact {
    /// `status.artifact.revision`.
    #[serde(default)]
    pub revision: String,
}

/// The UID and artifact revision of a watched Flux object.
pub fn watched_artifact<K: kube::Resource>(
    obj: &K,
    status: Option<&WatchedStatus>,
) -> Option<(String, String)> {
    let revision = status?.artifact.as_ref()?.revision.clone();
    Some((obj.meta().uid.clone()?, revision))
}

/// Flux's source API group and version.
pub const GROUP: &str = "source.toolkit.fluxcd.io";
pub const VERSION: &str = "v1";

/// Why a Flux source gives no artifact to resolve: the reason and a message
/// naming the object.
pub type NotReady = (Reason, String);

/// The API resource of a Flux source kind.
pub fn api_resource(kind: FluxSourceKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, kind.as_str()),
        kind.plural(),
    )
}

fn named(flux: &FluxSource, ns: &str) -> String {
    format!("{}/{ns}/{}", flux.kind.as_str(), flux.name)
}

fn not_ready(flux: &FluxSource, ns: &str, why: impl std::fmt::Display) -> NotReady {
    (
        Reason::FluxSourceNotReady,
        format!("spec.source.flux: {} {why}", named(flux, ns)),
    )
}

/// What the object's status names, or why it names nothing usable. Pure:
/// the object as read.
pub fn artifact_of(
    flux: &FluxSource,
    ns: &str,
    obj: &DynamicObject,
    verified: bool,
) -> Result<FluxArtifact, NotReady> {
    let fail = |why: String| not_ready(flux, ns, why);
    let status = obj.data.get("status").unwrap_or(&Value::Null);
    let spec = obj.data.get("spec").unwrap_or(&Value::Null);
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let ready = status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        });
    let Some(ready) = ready else {
        return Err(fail("has no Ready condition yet".into()));
    };
    if ready.get("status").and_then(Value::as_str) != Some("True") {
        let reason = text(ready, "reason").unwrap_or_default();
        let message = text(ready, "message").unwrap_or_default();
        return Err(fail(format!("is not Ready ({reason}): {message}")));
    }
    let generation = obj.metadata.generation.unwrap_or_default();
    let observed = status
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    if observed < generation {
        return Err(fail(format!(
            "has not reconciled generation {generation} yet (observed {observed})"
        )));
    }
    let artifact = status.get("artifact").unwrap_or(&Value::Null);
    let (Some(url), Some(digest), Some(revision)) = (
        text(artifact, "url"),
        text(artifact, "digest"),
        text(artifact, "revision"),
    ) else {
        return Err(fail(
            "names no artifact (status.artifact.url, digest and revision)".into(),
        ));
    };
    let uid = obj
        .metadata
        .uid
        .clone()
        .ok_or_else(|| fail("has no UID".into()))?;
    let (reference, insecure) = if verified {
        let url_spec = text(spec, "url").ok_or_else(|| fail("has no spec.url to verify".into()))?;
        if spec.get("secretRef").is_some() {
            return Err((
                Reason::ConfigurationError,
                format!(
                    "spec.source.flux: {} names spec.secretRef; the Verify Job reads its registry anonymously, so a private OCIRepository cannot be verified yet",
                    named(flux, ns)
                ),
            ));
        }
        if spec.get("layerSelector").is_some() {
            return Err((
                Reason::ConfigurationError,
                format!(
                    "spec.source.flux: {} sets spec.layerSelector; a verified OCIRepository must use the artifact's first layer",
                    named(flux, ns)
                ),
            ));
        }
        let manifest = manifest_digest(&revision).ok_or_else(|| {
            fail(format!(
                "status.artifact.revision {revision:?} names no sha256 manifest digest"
            ))
        })?;
        (
            Some(format!("{}@{manifest}", url_spec.trim_end_matches('/'))),
            spec.get("insecure").and_then(Value::as_bool) == Some(true),
        )
    } else {
        (None, false)
    };
    Ok(FluxArtifact {
        uid,
        url,
        digest,
        revision,
        reference,
        insecure,
    })
}

/// The manifest digest of an `OCIRepository` revision: `<tag>@sha256:<hex>`
/// or `sha256:<hex>`.
pub fn manifest_digest(revision: &str) -> Option<String> {
    let digest = revision.rsplit_once('@').map_or(revision, |(_, d)| d);
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| digest.to_string())
}

/// The resources of `store` whose `spec.source.flux` names the Flux object
/// `obj` of `kind`.
pub fn naming<K: super::family::Family, O: kube::Resource>(
    store: &kube::runtime::reflector::Store<K>,
    obj: &O,
    kind: FluxSourceKind,
) -> Vec<kube::runtime::reflector::ObjectRef<K>> {
    use kube::ResourceExt;
    let ns = obj.meta().namespace.clone().unwrap_or_default();
    let name = obj.meta().name.clone().unwrap_or_default();
    store
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| {
            r.source()
                .flux
                .as_ref()
                .is_some_and(|f| f.kind == kind && f.name == name)
        })
        .map(|r| kube::runtime::reflector::ObjectRef::from_obj(&*r))
        .collect()
}

/// Reads the object a Flux source names.
async fn read(
    client: &kube::Client,
    ns: &str,
    flux: &FluxSource,
) -> Result<DynamicObject, NotReady> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &api_resource(flux.kind));
    match api.get_opt(&flux.name).await {
        Ok(Some(obj)) => Ok(obj),
        Ok(None) => Err(not_ready(flux, ns, "does not exist")),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(not_ready(
            flux,
            ns,
            format!(
                "cannot be read: {} (is Flux's source-controller installed?)",
                e.message
            ),
        )),
        Err(e) => Err(not_ready(flux, ns, format!("cannot be read: {e}"))),
    }
}

/// Binds a Flux source's Resolve to the artifact the object names now, and
/// gives a Flux `OCIRepository`'s Verify the object's transport. Anything
/// else is left as built.
pub async fn bind(
    client: &kube::Client,
    ns: &str,
    src: &Source,
    c: &ActiveOperation,
    input: &mut JobInput,
) -> Result<(), NotReady> {
    let Some(flux) = &src.flux else {
        return Ok(());
    };
    match (c.type_, &mut input.source) {
        (OperationType::Resolve, SourceInput::Flux(f)) => {
            let obj = read(client, ns, flux).await?;
            f.artifact = Some(artifact_of(flux, ns, &obj, src.verified())?);
        }
        (OperationType::Verify, SourceInput::Oci(o)) => {
            let obj = read(client, ns, flux).await?;
            let insecure =
                obj.data.pointer("/spec/insecure").and_then(Value::as_bool) == Some(true);
            o.transport = Some(OciTransport {
                plain_http: insecure,
                ca_from: None,
            });
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const M: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn source(kind: FluxSourceKind) -> FluxSource {
        FluxSource {
            kind,
            name: "app".into(),
            path: None,
        }
    }

    fn object(status: Value, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "app", "namespace": "shop", "uid": "u-1", "generation": 2},
            "spec": spec,
            "status": status,
        }))
        .expect("an object")
    }

    fn ready(revision: &str) -> Value {
        json!({
            "observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "stored"}],
            "artifact": {"url": "http://sc/gitrepository/shop/app/x.tar.gz", "digest": D, "revision": revision},
        })
    }

    #[test]
    fn a_ready_object_names_its_artifact() {
        let a = artifact_of(
            &source(FluxSourceKind::GitRepository),
            "shop",
            &object(ready("main@sha1:abc"), json!({})),
            false,
        )
        .expect("ready");
        assert_eq!(a.uid, "u-1");
        assert_eq!(a.digest, D);
        assert_eq!(a.revision, "main@sha1:abc");
        assert_eq!(a.reference, None);
    }

    #[test]
    fn not_ready_behind_or_without_artifact_is_a_verdict_naming_the_object() {
        let git = source(FluxSourceKind::GitRepository);
        let cases = [
            (json!({}), "has no Ready condition"),
            (
                json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False", "reason": "GitOperationFailed", "message": "auth failed"}]}),
                "is not Ready (GitOperationFailed): auth failed",
            ),
            (
                json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}], "artifact": ready("r")["artifact"].clone()}),
                "has not reconciled generation 2",
            ),
            (
                json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}),
                "names no artifact",
            ),
        ];
        for (status, want) in cases {
            let (reason, message) =
                artifact_of(&git, "shop", &object(status, json!({})), false).expect_err(want);
            assert_eq!(reason, Reason::FluxSourceNotReady);
            assert!(
                message.starts_with("spec.source.flux: GitRepository/shop/app ")
                    && message.contains(want),
                "{message}"
            );
        }
    }

    #[test]
    fn a_verified_oci_repository_pins_the_manifest_flux_named() {
        let oci = source(FluxSourceKind::OCIRepository);
        let a = artifact_of(
            &oci,
            "shop",
            &object(
                ready(&format!("latest@{M}")),
                json!({"url": "oci://127.0.0.1:5000/schemas/app", "insecure": true}),
            ),
            true,
        )
        .expect("ready");
        assert_eq!(
            a.reference.as_deref(),
            Some(format!("oci://127.0.0.1:5000/schemas/app@{M}").as_str())
        );
        assert!(a.insecure);
        let (reason, message) = artifact_of(
            &oci,
            "shop",
            &object(
                ready(&format!("latest@{M}")),
                json!({"url": "oci://r/a", "secretRef": {"name": "creds"}}),
            ),
            true,
        )
        .expect_err("a private registry is not verified");
        assert_eq!(reason, Reason::ConfigurationError);
        assert!(message.contains("spec.secretRef"), "{message}");
        let (_, message) = artifact_of(
            &oci,
            "shop",
            &object(ready("latest@sha1:abc"), json!({"url": "oci://r/a"})),
            true,
        )
        .expect_err("no manifest digest");
        assert!(
            message.contains("names no sha256 manifest digest"),
            "{message}"
        );
    }

    #[test]
    fn manifest_digests_of_revisions() {
        assert_eq!(manifest_digest(&format!("v1@{M}")).as_deref(), Some(M));
        assert_eq!(manifest_digest(M).as_deref(), Some(M));
        assert_eq!(manifest_digest("main@sha1:abc"), None);
        assert_eq!(manifest_digest("sha256:short"), None);
    }
}
