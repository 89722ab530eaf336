//! The builder's shape and refusals, without an API server.

use super::*;
use crate::api::common::RESERVED_POD_METADATA_RULE;

#[test]
fn the_reserved_keys_are_the_api_rule_s() {
    // Same prefixes and bare keys as the CRD's CEL rule.
    for prefix in ["ptah.run/", "kubernetes.io/", "k8s.io/"] {
        assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k.startsWith('{prefix}')")));
        assert!(is_reserved_key(&format!("{prefix}x")));
        assert!(is_reserved_key(&format!("sub.{prefix}x")));
    }
    for bare in ["controller-uid", "job-name"] {
        assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k == '{bare}'")));
        assert!(is_reserved_key(bare));
    }
    for free in [
        "team",
        "example.com/owner",
        "sidecar.istio.io/inject",
        "notkubernetes.io/x",
    ] {
        assert!(!is_reserved_key(free), "{free}");
    }
}

#[test]
fn digests_and_images_are_checked_exactly() {
    let hex = "0123456789abcdef".repeat(4);
    assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.as_str()));
    for bad in [
        format!("sha256:{}", hex.to_uppercase()),
        format!("sha256:{}", &hex[1..]),
        format!("sha512:{hex}"),
        hex.clone(),
    ] {
        assert_eq!(sha256_hex(&bad), None, "{bad}");
    }
    assert!(check_image("i", &format!("ghcr.io/a/b@sha256:{hex}")).is_ok());
    assert!(check_image("i", &format!("ghcr.io/a/b:v1@sha256:{hex}")).is_ok());
    assert!(check_image("i", "ghcr.io/a/b:v1").is_err());
    assert!(check_image("i", &format!("@sha256:{hex}")).is_err());
}

#[test]
fn oci_references_must_be_pinned_except_for_resolve() {
    let hex = "ab".repeat(32);
    assert!(check_oci_reference("oci://r.example/x:v1", false).is_ok());
    assert!(check_oci_reference("oci://r.example/x:v1", true).is_err());
    assert!(check_oci_reference(&format!("oci://r.example/x@sha256:{hex}"), true).is_ok());
    assert!(check_oci_reference("https://r.example/x:v1", false).is_err());
    assert!(check_oci_reference("oci://r.example/x:v1 --flag", false).is_err());
}

fn example_job() -> (Job, ClaimInput, String) {
    example_job_with(|_| {})
}

/// The example Job, built from the input `edit` leaves.
fn example_job_with(edit: impl FnOnce(&mut JobInput)) -> (Job, ClaimInput, String) {
    let hex = "ab".repeat(32);
    let mut input = JobInput {
        operation: OperationType::Observe,
        owner: Owner {
            kind: OwnerKind::PtahSchema,
            name: "orders".into(),
            namespace: "shop".into(),
            uid: "uid-1".into(),
            generation: 1,
        },
        claim: ClaimInput {
            operation_id: format!("sha256:{hex}"),
            input_fingerprint: format!("sha256:{hex}"),
            attempt: 1,
            dispatch_not_after: None,
            execution_not_after: None,
        },
        execution: Execution::default(),
        target: TargetInput {
            engine: DatabaseEngine::MySQL,
            url_from: SecretKeyRef {
                name: "db".into(),
                key: "url".into(),
            },
            dev_url_from: None,
            lock_timeout: GoDuration::new("30s"),
            exclude: Vec::new(),
        },
        source: SourceInput::ConfigMap {
            snapshot_name: "ptah-src-1".into(),
            content_digest: format!("sha256:{hex}"),
        },
        apply: None,
        images: Images {
            runner: format!("r@sha256:{hex}"),
            executor: format!("e@sha256:{hex}"),
        },
        result: ResultDelivery {
            receiver_url: "https://ptah.example:9443/v1/results".into(),
            receiver_ca: None,
            finished_ttl_seconds: None,
        },
        trace: None,
    };
    edit(&mut input);
    let job = build_job(&input).expect("builds");
    (job, input.claim, input.owner.uid)
}

#[test]
fn a_job_is_adopted_only_for_its_own_claim_and_owner() {
    let (job, claim, uid) = example_job();
    assert!(is_job_of_claim(&job, &claim, &uid));
    assert!(!is_job_of_claim(&job, &claim, "another-uid"));
    let mut other = claim.clone();
    other.attempt = 2;
    assert!(!is_job_of_claim(&job, &other, &uid));
    let mut other = claim.clone();
    other.operation_id = format!("sha256:{}", "cd".repeat(32));
    assert!(!is_job_of_claim(&job, &other, &uid));
    let mut foreign = job.clone();
    foreign.metadata.annotations = None;
    assert!(!is_job_of_claim(&foreign, &claim, &uid));
}

#[test]
fn a_read_gets_its_ttl_at_creation_and_an_apply_never_does() {
    let (job, _, _) = example_job_with(|input| input.result.finished_ttl_seconds = Some(300));
    assert_eq!(
        job.spec.and_then(|s| s.ttl_seconds_after_finished),
        Some(300)
    );
    let (job, _, _) = example_job_with(|input| {
        input.result.finished_ttl_seconds = Some(300);
        input.operation = OperationType::Apply;
        input.apply = Some(ApplyInput::Schema {
            plan_name: "orders-plan".into(),
            plan_fingerprint: input.claim.input_fingerprint.clone(),
            content_digest: input.claim.input_fingerprint.clone(),
            transaction_mode: crate::api::common::SchemaTransactionMode::File,
        });
    });
    assert_eq!(job.spec.and_then(|s| s.ttl_seconds_after_finished), None);
}

#[test]
fn the_ttl_is_a_patch_after_harvest_not_part_of_the_job() {
    let (job, _, _) = example_job();
    assert_eq!(job.spec.and_then(|s| s.ttl_seconds_after_finished), None);
    assert_eq!(
        harvested_ttl_patch(600),
        serde_json::json!({"spec": {"ttlSecondsAfterFinished": 600}})
    );
    assert_eq!(
        harvested_ttl_patch(-5),
        serde_json::json!({"spec": {"ttlSecondsAfterFinished": 0}})
    );
}
