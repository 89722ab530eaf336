//! Fixtures and drivers both lifecycle test modules use: the clock, digests
//! and epochs, the resolved sources, verification evidence, approvals, an
//! execution binding, and (through [`machine_drivers!`]) the helpers that
//! step a machine and read what it wrote. The two machines have their own
//! `Observation`, `Effect` and status types of one shape, so the drivers are
//! written once as a macro expanded in each test module.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::common::ApprovalSeen;
use crate::api::common::Identity;
use crate::api::condition::{Condition, ConditionStatus, Reason};
use crate::api::source::{
    ConfigMapResolution, GitResolution, OciResolution, PolicyBinding, SourceKind, SourceStatus,
    VerificationEvidence,
};
use crate::api::status::ExecutionBinding;

/// Second `s` of the tests' day.
pub fn at(s: i64) -> Time {
    Time(Timestamp::from_second(1_767_225_600 + s).expect("time"))
}

/// A `sha256:` digest made of byte `n`.
pub fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// An execution or Lease epoch made of byte `n`.
pub fn epoch(n: u8) -> String {
    format!("v1-{}", format!("{n:02x}").repeat(16))
}

/// Resource `orders` of `kind` (`PtahSchema`, `PtahMigration`) reading
/// `orders-<artifact>` from a `source` (`configmap`, `git`, anything else
/// OCI), with no status.
pub fn resource<K: DeserializeOwned>(kind: &str, artifact: &str, source: &str) -> K {
    let source = match source {
        "configmap" => json!({"configMap": {"name": format!("orders-{artifact}")}}),
        "git" => {
            json!({"git": {"url": "https://git.example/orders.git", "ref": {"branch": "main"}}})
        }
        "flux-git" => json!({"flux": {"kind": "GitRepository", "name": "orders"}}),
        "flux-oci" => json!({
            "flux": {"kind": "OCIRepository", "name": "orders"},
            "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
        }),
        _ => json!({"oci": {"ociRef": format!("oci://r.example/orders/{artifact}:v1")}}),
    };
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": kind,
        "metadata": {"name": "orders", "namespace": "orders", "uid": "uid-1", "generation": 1},
        "spec": {
            "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "orders"},
            "source": source,
            "interval": "10m",
            "execution": {"failureRetryInterval": "30s"}
        }
    }))
    .expect("fixture")
}

/// Sets annotation `key` on `r`.
pub fn set_annotation<K: ResourceExt>(r: &mut K, key: &str, value: &str) {
    r.annotations_mut().insert(key.into(), value.into());
}

/// A resolution with none of the kind-specific parts.
fn resolved(kind: SourceKind, revision: String, n: u8) -> SourceStatus {
    SourceStatus {
        kind,
        revision,
        content_digest: digest(n),
        resolved_at: None,
        config_map: None,
        git: None,
        oci: None,
        source_policy: None,
        verification: None,
        flux: None,
    }
}

/// The snapshot of ConfigMap `orders-<artifact>` with content `n`.
pub fn cm_source(artifact: &str, n: u8) -> SourceStatus {
    let name = format!("orders-{artifact}");
    SourceStatus {
        config_map: Some(ConfigMapResolution {
            name: name.clone(),
            uid: "cm-uid".into(),
            snapshot_name: format!("ptah-src-{n}"),
            snapshot_uid: None,
        }),
        ..resolved(SourceKind::ConfigMap, format!("{name}@{}", digest(n)), n)
    }
}

/// Branch `main` resolved to commit `n`.
pub fn git_source(n: u8) -> SourceStatus {
    let commit = format!("{n:02x}").repeat(20);
    SourceStatus {
        git: Some(GitResolution {
            url: "https://git.example/orders.git".into(),
            git_ref: "main".into(),
            path: None,
            commit: commit.clone(),
            location_digest: digest(200),
        }),
        ..resolved(SourceKind::Git, format!("main@sha1:{commit}"), n)
    }
}

/// Flux's artifact `n` of the `orders` object, snapshotted; an
/// `OCIRepository`'s manifest pinned for Verify when `verified`.
pub fn flux_source(n: u8, verified: bool) -> SourceStatus {
    SourceStatus {
        flux: Some(crate::api::source::FluxResolution {
            kind: if verified {
                crate::api::source::FluxSourceKind::OCIRepository
            } else {
                crate::api::source::FluxSourceKind::GitRepository
            },
            name: "orders".into(),
            uid: "flux-uid".into(),
            artifact_digest: digest(n.wrapping_add(1)),
            path: None,
            snapshot_name: format!("ptah-src-{n}"),
            snapshot_uid: None,
        }),
        oci: verified.then(|| OciResolution {
            requested_reference: "oci://r.example/orders".into(),
            resolved_reference: format!("oci://r.example/orders@{}", digest(n)),
            digest: digest(n),
            media_type: None,
            artifact_type: None,
            size: None,
            layer_digests: Vec::new(),
        }),
        ..resolved(
            SourceKind::Flux,
            format!("main@sha1:{}", "ab".repeat(20)),
            n,
        )
    }
}

/// Tag `v1` of `orders/<artifact>` pinned to digest `n`.
pub fn oci_source(artifact: &str, n: u8) -> SourceStatus {
    let repository = format!("oci://r.example/orders/{artifact}");
    SourceStatus {
        oci: Some(OciResolution {
            requested_reference: format!("{repository}:v1"),
            resolved_reference: format!("{repository}@{}", digest(n)),
            digest: digest(n),
            media_type: None,
            artifact_type: None,
            size: None,
            layer_digests: Vec::new(),
        }),
        ..resolved(SourceKind::OCI, format!("v1@{}", digest(n)), n)
    }
}

/// Verify's evidence under policy digest `n`.
pub fn evidence(n: u8) -> VerificationEvidence {
    VerificationEvidence {
        policy: PolicyBinding {
            name: "policy".into(),
            key: "policy.yaml".into(),
            uid: "policy-uid".into(),
            digest: digest(n),
        },
        authority: None,
        signer_identity: None,
        key_fingerprint: None,
        trust_root_digest: None,
        signature_digest: None,
        transparency_log_verified: None,
        verified_at: None,
    }
}

/// A person as admission stamps them.
pub fn person(username: &str) -> Identity {
    Identity {
        username: username.into(),
        uid: None,
        groups: Vec::new(),
    }
}

/// Approval `uid` by alice of the plan `plan_uid` with `plan_fingerprint`.
pub fn approval(uid: &str, plan_uid: &str, plan_fingerprint: &str) -> ApprovalSeen {
    ApprovalSeen {
        name: "approve-orders".into(),
        uid: uid.into(),
        plan_uid: plan_uid.into(),
        plan_fingerprint: plan_fingerprint.into(),
        approver: Some(person("alice")),
        approved_at: Some(at(5)),
    }
}

/// The execution components of epoch `n`.
pub fn binding(n: u8) -> ExecutionBinding {
    ExecutionBinding {
        epoch: epoch(n),
        controller_state_version: 1,
        ptah_version: "v0.23.0".into(),
        executor_image: format!("r.example/ptah@{}", digest(n)),
        runner_protocol_version: 1,
    }
}

/// The reason of condition `t` while it is `True`.
pub fn true_reason<T: PartialEq + Copy>(conditions: &[Condition<T>], t: T) -> Option<Reason> {
    super::conditions::get(conditions, t)
        .filter(|c| c.status == ConditionStatus::True)
        .map(|c| c.reason)
}

/// Every test name a module doc (up to its first `use`) puts in backticks
/// is a test in `tests`; returns how many it names.
pub fn doc_names_only_existing_tests(doc: &str, tests: &str) -> usize {
    let doc_end = doc.find("\nuse ").unwrap_or(doc.len());
    let mut named = 0;
    for chunk in doc[..doc_end].split('`').skip(1).step_by(2) {
        let is_test_name = chunk.contains('_')
            && chunk
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '*');
        if !is_test_name || chunk.ends_with('*') {
            continue;
        }
        named += 1;
        assert!(
            tests.contains(&format!("fn {chunk}()")),
            "the module doc names `{chunk}`, which is no test"
        );
    }
    named
}

/// The drivers of one machine's tests, expanded where `step`,
/// `Observation`, `Effect`, the condition type `C` and the machine's types
/// are in scope: `run` steps the resource at a second and keeps its status;
/// the rest read the status and the effects.
macro_rules! machine_drivers {
    ($resource:ty, $status:ty, $phase:ty) => {
        /// Steps `r` at second `t`, keeping the status, and returns the effects.
        fn run(r: &mut $resource, o: Observation, t: i64) -> Vec<Effect> {
            let out = step(r, &o, &at(t));
            r.status = Some(out.status);
            // Every Blocked and Failed says what holds it and the way out.
            // (A refresh in either keeps that condition as it was.)
            let s = st(r);
            let says = match s.phase {
                Some(<$phase>::Blocked) => Some(C::Stalled),
                Some(<$phase>::Failed) => Some(C::ReconciliationFailed),
                _ => None,
            };
            if let Some(t) = says {
                let c = super::conditions::get(&s.conditions, t).expect("the condition");
                assert!(
                    !c.message.is_empty(),
                    "{:?} with {t:?} {:?} and no message",
                    s.phase,
                    c.reason
                );
            }
            out.effects
        }

        fn st(r: &$resource) -> &$status {
            r.status.as_ref().expect("status")
        }

        fn phase(r: &$resource) -> Option<$phase> {
            st(r).phase
        }

        fn claim(r: &$resource) -> Option<&ActiveOperation> {
            st(r).active_operation.as_ref()
        }

        fn claim_type(r: &$resource) -> Option<OperationType> {
            claim(r).map(|c| c.type_)
        }

        fn stalled_reason(r: &$resource) -> Option<Reason> {
            true_reason(&st(r).conditions, C::Stalled)
        }

        /// The `Stalled` condition's message, empty when there is none.
        #[allow(dead_code, reason = "not every machine's tests read it")]
        fn stalled_message(r: &$resource) -> String {
            super::conditions::get(&st(r).conditions, C::Stalled)
                .map(|c| c.message.clone())
                .unwrap_or_default()
        }

        fn started(fx: &[Effect], op: OperationType) -> bool {
            fx.iter()
                .any(|e| matches!(e, Effect::StartJob { operation, .. } if *operation == op))
        }

        fn has_event(fx: &[Effect], reason: Reason) -> bool {
            fx.iter()
                .any(|e| matches!(e, Effect::Event { reason: r, .. } if *r == reason))
        }

        fn lease(n: u8) -> Observation {
            Observation::LeaseAcquired {
                epoch: epoch(n),
                duration_seconds: 30,
            }
        }

        /// The claim's Job refused by Pod admission: none exists.
        fn pod_refused(message: &str) -> Observation {
            Observation::JobNotBuilt {
                reason: Reason::PodAdmissionRefused,
                message: message.into(),
            }
        }

        fn failed(message: &str) -> Observation {
            Observation::JobFailed {
                reason: Reason::OperationFailed,
                message: message.into(),
            }
        }
    };
}
pub(crate) use machine_drivers;
