//! Fully populated example objects of every kind, for tests in this crate
//! and in others (the conformance suite round-trips them through the API
//! server). Every optional field is set, so a round trip covers every field.
//! Compiled only with the `testing` feature.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::api::annotations;
use crate::api::approval::*;
use crate::api::common::*;
use crate::api::condition::*;
use crate::api::journal::*;
use crate::api::migration::*;
use crate::api::plan::*;
use crate::api::realm::*;
use crate::api::schema::*;
use crate::api::source::*;
use crate::api::status::*;

/// A fixed instant: 2026-01-01T00:00:00Z plus `second` seconds.
pub fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + second).expect("time"))
}

/// A well-formed `sha256:` digest made of the byte `n` repeated.
pub fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// A well-formed execution-binding epoch.
pub fn epoch() -> String {
    format!("v1-{}", "ab".repeat(16))
}

/// Metadata of a namespaced example (namespace `orders`, with uid, generation and resource version as a server would set them).
pub fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("orders".into()),
        uid: Some("0d6c1c5e-5b7e-4b8a-9a57-0f0e8a1b2c3d".into()),
        generation: Some(3),
        resource_version: Some("4711".into()),
        labels: Some(BTreeMap::from([("app".into(), "orders".into())])),
        annotations: Some(BTreeMap::from([(
            annotations::READ_REQUESTED_AT.into(),
            "2026-01-01T00:00:00Z".into(),
        )])),
        ..Default::default()
    }
}

/// An authenticated identity as admission stamps it.
pub fn identity() -> Identity {
    Identity {
        username: "alice@example.com".into(),
        uid: Some("u-1".into()),
        groups: vec!["dba".into(), "system:authenticated".into()],
    }
}

/// A name-and-UID reference whose UID is derived from the name.
pub fn object_ref(name: &str) -> ObjectRef {
    ObjectRef {
        name: name.into(),
        uid: format!("{name}-uid"),
    }
}

/// A `True` condition of `type_` with `reason`, at generation 3.
pub fn condition<T>(type_: T, reason: Reason) -> Condition<T> {
    Condition {
        type_,
        status: ConditionStatus::True,
        observed_generation: Some(3),
        last_transition_time: at(10),
        reason,
        message: "diagnostic text".into(),
    }
}

/// An `execution` block with every field set.
pub fn execution() -> Execution {
    Execution {
        failure_retry_interval: GoDuration::new("45s"),
        active_deadline_seconds: 1200,
        connect_timeout: GoDuration::new("20s"),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("250m".into())),
                ("memory".into(), Quantity("256Mi".into())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".into(),
                Quantity("512Mi".into()),
            )])),
            ..Default::default()
        }),
        service_account_name: Some("ptah-ops".into()),
        image_pull_secrets: vec![LocalObjectReference {
            name: "regcred".into(),
        }],
        node_selector: BTreeMap::from([("kubernetes.io/os".into(), "linux".into())]),
        tolerations: vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        affinity: Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "zone".into(),
                            operator: "In".into(),
                            values: Some(vec!["a".into()]),
                        }]),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        priority_class_name: Some("batch-low".into()),
        runtime_class_name: Some("gvisor".into()),
        pod_metadata: Some(PodMetadata {
            labels: BTreeMap::from([("sidecar.istio.io/inject".into(), "false".into())]),
            annotations: BTreeMap::from([("linkerd.io/inject".into(), "disabled".into())]),
        }),
    }
}

/// A PostgreSQL target coordinated by key.
pub fn target_by_key() -> Target {
    Target {
        engine: "PostgreSQL".into(),
        url_from: SecretKeyRef {
            name: "orders-db".into(),
            key: "url".into(),
        },
        coordination_key: Some("orders-primary".into()),
        realm_ref: None,
        shared_realm: true,
    }
}

/// A ConfigMap key selector of a policy document.
pub fn policy_ref(name: &str) -> ConfigMapKeyRef {
    ConfigMapKeyRef {
        name: name.into(),
        key: "policy.yaml".into(),
    }
}

/// A policy bound by name, key, UID and digest.
pub fn policy_binding(name: &str, n: u8) -> PolicyBinding {
    PolicyBinding {
        name: name.into(),
        key: "policy.yaml".into(),
        uid: format!("{name}-uid"),
        digest: digest(n),
    }
}

/// An execution binding with every field set.
pub fn execution_binding() -> ExecutionBinding {
    ExecutionBinding {
        epoch: epoch(),
        controller_state_version: 1,
        ptah_version: "0.23.0".into(),
        executor_image: format!("ghcr.io/stokaro/ptah@{}", digest(9)),
        runner_protocol_version: 1,
    }
}

/// A source binding with every field set.
pub fn source_binding() -> SourceBinding {
    SourceBinding {
        kind: SourceKind::OCI,
        content_digest: digest(1),
        config_map_uid: Some("cm-uid".into()),
        snapshot_name: Some("ptah-src-abc".into()),
        location_digest: Some(digest(2)),
        commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        resolved_reference: Some(format!("oci://registry.example/acme/schema@{}", digest(1))),
        source_policy_uid: Some("sp-uid".into()),
        source_policy_digest: Some(digest(3)),
        verification_policy_uid: Some("vp-uid".into()),
        verification_policy_digest: Some(digest(4)),
        // The digest of the evidence status holds, as Verify binds it.
        signer_evidence_digest: crate::api::status::signer_evidence_digest(&verification_evidence()),
        flux_object_uid: Some("flux-uid".into()),
        flux_revision: Some(format!("v1@{}", digest(1))),
    }
}

/// A claim's binding of a ConfigMap source (ConfigMap UID `cm-uid`) to
/// `content_digest`, through `snapshot` when given.
pub fn configmap_binding(content_digest: String, snapshot: Option<&str>) -> SourceBinding {
    SourceBinding::of_config_map(
        content_digest,
        Some("cm-uid".into()),
        snapshot.map(str::to_string),
    )
}

/// A `status.source` with every resolution set.
pub fn source_status() -> SourceStatus {
    SourceStatus {
        kind: SourceKind::OCI,
        revision: format!("v1@{}", digest(1)),
        content_digest: digest(1),
        resolved_at: Some(at(1)),
        config_map: Some(ConfigMapResolution {
            name: "schema".into(),
            uid: "cm-uid".into(),
            snapshot_name: "ptah-src-abc".into(),
            snapshot_uid: Some("snap-uid".into()),
        }),
        git: Some(GitResolution {
            url: "https://git.example/acme/db.git".into(),
            git_ref: "refs/heads/main".into(),
            path: Some("schema".into()),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            location_digest: digest(2),
        }),
        oci: Some(OciResolution {
            requested_reference: "oci://registry.example/acme/schema:v1".into(),
            resolved_reference: format!("oci://registry.example/acme/schema@{}", digest(1)),
            digest: digest(1),
            media_type: Some("application/vnd.oci.image.manifest.v1+json".into()),
            artifact_type: Some("application/vnd.stokaro.ptah.schema.v1".into()),
            size: Some(712),
            layer_digests: vec![digest(6)],
        }),
        source_policy: Some(policy_binding("source-policy", 3)),
        verification: Some(verification_evidence()),
        flux: Some(FluxResolution {
            kind: FluxSourceKind::OCIRepository,
            name: "schema".into(),
            uid: "flux-uid".into(),
            artifact_digest: digest(7),
            path: Some("db".into()),
            snapshot_name: "ptah-src-abc".into(),
            snapshot_uid: Some("snap-uid".into()),
        }),
    }
}

/// The evidence Verify establishes in [`source_status`], every field set.
pub fn verification_evidence() -> VerificationEvidence {
    VerificationEvidence {
        policy: policy_binding("verification-policy", 4),
        authority: Some("release-workflow".into()),
        signer_identity: Some(SignerIdentity {
            issuer: "https://token.actions.githubusercontent.com".into(),
            subject: "https://github.com/acme/db/.github/workflows/release.yaml@refs/heads/main"
                .into(),
        }),
        key_fingerprint: Some(digest(7)),
        trust_root_digest: Some(digest(8)),
        signature_digest: Some(digest(10)),
        transparency_log_verified: Some(true),
        verified_at: Some(at(2)),
    }
}

/// A claim with every field set.
pub fn active_operation() -> ActiveOperation {
    ActiveOperation {
        type_: OperationType::Apply,
        operation_id: digest(11),
        input_fingerprint: digest(12),
        job_name: Some("ptah-apply-abc".into()),
        job_uid: Some("job-uid".into()),
        attempt: 2,
        started_at: at(20),
        retry_not_before: Some(at(50)),
        dispatch_started: true,
        dispatch_not_after: Some(at(80)),
        execution_not_after: Some(at(1300)),
        execution_epoch: Some(epoch()),
        source: Some(source_binding()),
        coordination_digest: Some(digest(13)),
        target_identity_digest: Some(digest(14)),
        lease_epoch: Some(epoch()),
        lease_duration_seconds: Some(1260),
        lease_continuity_lost: true,
        plan_name: Some("ptah-plan-abc".into()),
        plan_uid: Some("plan-uid".into()),
        plan_fingerprint: Some(digest(15)),
        authorization: Some(Authorization::Approval),
        approval_name: Some("approve-abc".into()),
        approval_uid: Some("approval-uid".into()),
        approver: Some(identity()),
        admission_snapshot_digest: Some(digest(16)),
    }
}

/// An owed Lease release.
pub fn lock_release() -> PendingLockRelease {
    PendingLockRelease {
        coordination_digest: digest(13),
        operation_id: digest(11),
        lease_epoch: epoch(),
        lease_duration_seconds: 1260,
    }
}

/// Where a migration run failed.
pub fn run_failure() -> RunFailure {
    RunFailure {
        version: 7,
        statement_position: Some(3),
        sqlstate: Some("23505".into()),
        mysql_errno: Some(1062),
    }
}

/// A journal entry with every field set.
pub fn journal_entry() -> JournalEntry {
    JournalEntry {
        type_: JournalEntryType::RunFinished,
        time: at(100),
        operation_id: Some(digest(11)),
        plan_name: Some("ptah-mplan-abc".into()),
        plan_uid: Some("plan-uid".into()),
        plan_fingerprint: Some(digest(15)),
        approval_required: Some(true),
        replaced: Some("ptah-mplan-old".into()),
        approval_name: Some("approve-abc".into()),
        approval_uid: Some("approval-uid".into()),
        approver: Some(identity()),
        authorization: Some(Authorization::Approval),
        job_name: Some("ptah-apply-abc".into()),
        job_uid: Some("job-uid".into()),
        outcome: Some(JournalOutcome::Partial),
        reason: Some(Reason::ApplyOutcomeUnknown),
        operation: Some(OperationType::Apply),
        count: Some(2),
        last_time: Some(at(90)),
        started_at: Some(at(20)),
        applied_count: Some(1),
        failure: Some(run_failure()),
        acknowledgment_name: Some("ack-1".into()),
        acknowledgment_uid: Some("ack-uid".into()),
        acknowledged_by: Some(identity()),
    }
}

/// A fully populated PtahSchema (Git source), status included.
pub fn schema_example() -> PtahSchema {
    let mut schema = PtahSchema::new(
        "orders",
        PtahSchemaSpec {
            target: target_by_key(),
            source: Source {
                config_map: None,
                git: Some(GitSource {
                    url: "https://git.example/acme/db.git".into(),
                    git_ref: GitRef {
                        branch: Some("main".into()),
                        tag: None,
                        commit: None,
                    },
                    path: Some("schema".into()),
                    secret_ref: Some(NameRef {
                        name: "git-creds".into(),
                    }),
                }),
                oci: None,
                source_policy_from: Some(policy_ref("source-policy")),
                verification_policy_from: None,
                flux: None,
            },
            policy: SchemaPolicy {
                apply: ApplyPolicy::Always,
                allow_destructive: true,
                protected_tables: vec!["public.users".into()],
                exclude: vec!["audit.*".into()],
                drift_severity: DriftSeverityPolicy::Destructive,
                lock_timeout: GoDuration::new("45s"),
                transaction_mode: SchemaTransactionMode::All,
            },
            dev: Some(DevDatabase {
                url_from: SecretKeyRef {
                    name: "scratch".into(),
                    key: "url".into(),
                },
            }),
            interval: GoDuration::new("15m"),
            suspend: true,
            execution: execution(),
        },
    );
    schema.metadata = meta("orders");
    let approval = ConsumedApproval {
        name: "approve-abc".into(),
        uid: "approval-uid".into(),
        approver: Some(identity()),
        approved_at: Some(at(30)),
    };
    schema.status = Some(PtahSchemaStatus {
        observed_generation: Some(3),
        observed_spec_digest: Some(digest(40)),
        phase: Some(SchemaPhase::VerifyingConvergence),
        conditions: vec![
            condition(SchemaConditionType::Ready, Reason::ApplyPending),
            condition(
                SchemaConditionType::Reconciling,
                Reason::OperationInProgress,
            ),
        ],
        source: Some(source_status()),
        execution_binding: Some(execution_binding()),
        target: Some(TargetStatus {
            engine: Some("postgresql".into()),
            coordination_digest: Some(digest(13)),
            identity_digest: Some(digest(14)),
            drift_report_digest: Some(digest(17)),
            dialect: Some("postgres".into()),
            last_observed_at: Some(at(5)),
            drift_finding_count: Some(4),
            highest_drift_severity: Some(DriftSeverity::Warning),
            drift_findings: vec![DriftFinding {
                category: DriftCategory::ColumnsAdded,
                count: 4,
                severity: DriftSeverity::Warning,
            }],
            drift_findings_truncated: true,
        }),
        plan: Some(SchemaPlanSummary {
            name: "ptah-plan-abc".into(),
            uid: "plan-uid".into(),
            fingerprint: digest(15),
            content_digest: Some(digest(18)),
            created_at: Some(at(6)),
            statement_count: Some(4),
            destructive: true,
            privilege_changes: vec![PrivilegeChange::Grant],
            approval_required: true,
            approval: Some(approval.clone()),
        }),
        applied: Some(AppliedStatus {
            operation_id: digest(11),
            plan_name: "ptah-plan-old".into(),
            plan_uid: "old-plan-uid".into(),
            plan_fingerprint: digest(19),
            source: Some(source_binding()),
            source_revision: Some(format!(
                "main@sha1:{}",
                "0123456789abcdef0123456789abcdef01234567"
            )),
            coordination_digest: Some(digest(13)),
            target_identity_digest: Some(digest(14)),
            execution_binding: Some(execution_binding()),
            authorization: Some(Authorization::Policy),
            approval: Some(approval),
            job_name: Some("ptah-apply-old".into()),
            job_uid: Some("old-job-uid".into()),
            started_at: Some(at(3)),
            completed_at: at(4),
        }),
        active_operation: Some(active_operation()),
        pending_observation: Some(PendingObservation {
            outcome: ApplyOutcome::OutcomeUnknown,
            apply_operation_id: digest(11),
            apply_job_name: Some("ptah-apply-abc".into()),
            apply_job_uid: Some("job-uid".into()),
            apply_generation: Some(3),
            observe_after: Some(at(60)),
            plan_name: "ptah-plan-abc".into(),
            plan_uid: "plan-uid".into(),
            plan_fingerprint: digest(15),
            source: Some(source_binding()),
            coordination_digest: Some(digest(13)),
            target_identity_digest: Some(digest(14)),
            lease_epoch: Some(epoch()),
            lease_duration_seconds: Some(1260),
            recorded_at: at(55),
        }),
        pending_lock_release: Some(lock_release()),
        journal: vec![
            journal_entry(),
            JournalEntry::new(JournalEntryType::Verified, at(200)),
        ],
        covered_since: Some(at(0)),
        last_read_request: Some("2026-01-01T00:00:00Z".into()),
        next_reconciliation_time: Some(at(900)),
        last_attempt_time: Some(at(20)),
        trace: Some(change_trace()),
    });
    schema
}

/// A fully populated PtahMigration (OCI source, realm), status included.
pub fn migration_example() -> PtahMigration {
    let mut migration = PtahMigration::new(
        "orders",
        PtahMigrationSpec {
            target: Target {
                engine: "MySQL".into(),
                url_from: SecretKeyRef {
                    name: "orders-db".into(),
                    key: "url".into(),
                },
                coordination_key: None,
                realm_ref: Some(NameRef {
                    name: "shared-mysql".into(),
                }),
                shared_realm: true,
            },
            source: Source {
                config_map: None,
                git: None,
                oci: Some(OciSource {
                    oci_ref: "oci://registry.example/acme/migrations:v1".into(),
                    registry_auth_from: Some(RegistryAuth {
                        name: "regcred".into(),
                        mode: RegistryAuthMode::DockerConfigJSON,
                        username_key: "user".into(),
                        password_key: "pass".into(),
                        token_key: "tok".into(),
                        docker_config_json_key: "config.json".into(),
                    }),
                    transport: Some(OciTransport {
                        plain_http: false,
                        ca_from: Some(ConfigMapKeyRef {
                            name: "registry-ca".into(),
                            key: "ca.crt".into(),
                        }),
                    }),
                }),
                source_policy_from: None,
                verification_policy_from: Some(policy_ref("verification-policy")),
                flux: None,
            },
            policy: MigrationPolicy {
                apply: ApplyPolicy::Never,
                lock_timeout: GoDuration::new("2m"),
                transaction_mode: Some(MigrationTransactionMode::File),
            },
            interval: GoDuration::new("1h"),
            suspend: false,
            execution: execution(),
        },
    );
    migration.metadata = meta("orders");
    migration.status = Some(PtahMigrationStatus {
        observed_generation: Some(3),
        observed_spec_digest: Some(digest(41)),
        phase: Some(MigrationPhase::Blocked),
        conditions: vec![condition(
            MigrationConditionType::Stalled,
            Reason::HistoryDirty,
        )],
        source: Some(source_status()),
        execution_binding: Some(execution_binding()),
        history: Some(MigrationHistory {
            observed_at: Some(at(7)),
            contract_version: Some(1),
            current_version: Some(6),
            checkpoint_version: Some(2),
            applied_count: Some(6),
            pending_count: Some(2),
            fingerprint: Some(digest(20)),
            target_identity_digest: Some(digest(14)),
            dirty: true,
            modified_versions: vec![3],
            out_of_order_versions: vec![4],
            ahead_versions: vec![9],
            revisions: vec![RevisionRow {
                version: 6,
                description: Some("add orders".into()),
                checksum: Some("h1:abc".into()),
                applied_at: Some(at(8)),
                execution_millis: Some(42),
                dirty: true,
            }],
        }),
        plan: Some(MigrationPlanSummary {
            name: "ptah-mplan-abc".into(),
            uid: "plan-uid".into(),
            fingerprint: digest(15),
            from_version: Some(6),
            to_version: Some(8),
            steps: Some(2),
            approval_required: true,
            created_at: Some(at(9)),
        }),
        active_operation: Some(active_operation()),
        last_run: Some(MigrationRun {
            operation_id: digest(11),
            outcome: RunOutcome::Partial,
            authorization: Some(Authorization::Approval),
            plan_name: Some("ptah-mplan-abc".into()),
            plan_uid: Some("plan-uid".into()),
            plan_fingerprint: Some(digest(15)),
            approval_name: Some("approve-abc".into()),
            approval_uid: Some("approval-uid".into()),
            approver: Some(identity()),
            job_name: Some("ptah-apply-abc".into()),
            job_uid: Some("job-uid".into()),
            applied_versions: vec![7],
            failure: Some(run_failure()),
            verification: Some(RunVerification {
                outcome: VerificationOutcome::Blocked,
                reason: Some(Reason::HistoryDirty),
                history_fingerprint: Some(digest(21)),
                read_at: at(120),
            }),
            target_identity_digest: Some(digest(14)),
            coordination_digest: Some(digest(13)),
            source: Some(source_binding()),
            execution_binding: Some(execution_binding()),
            started_at: Some(at(20)),
            finished_at: Some(at(100)),
            message: Some("migration 7 failed at statement 3 (SQLSTATE 23505)".into()),
        }),
        unresolved_run: Some(UnresolvedRun {
            operation_id: digest(11),
            outcome: RunOutcome::Unknown,
            authorization: Some(Authorization::Policy),
            plan_name: Some("ptah-mplan-abc".into()),
            plan_uid: Some("plan-uid".into()),
            plan_fingerprint: Some(digest(15)),
            approval_name: Some("approve-abc".into()),
            approval_uid: Some("approval-uid".into()),
            job_name: Some("ptah-apply-abc".into()),
            job_uid: Some("job-uid".into()),
            target_identity_digest: Some(digest(14)),
            finished_at: Some(at(100)),
            recorded_at: at(101),
        }),
        resolved_run: Some(ResolvedRun {
            operation_id: digest(22),
            outcome: RunOutcome::Partial,
            resolution: Resolution::Acknowledged,
            acknowledgment_name: Some("ack-1".into()),
            acknowledgment_uid: Some("ack-uid".into()),
            acknowledged_by: Some(identity()),
            resolved_at: at(102),
        }),
        pending_lock_release: Some(lock_release()),
        journal: vec![journal_entry()],
        covered_since: Some(at(0)),
        last_read_request: Some(format!("sha256:{}", "cd".repeat(32))),
        next_reconciliation_time: Some(at(3600)),
        last_attempt_time: Some(at(20)),
        trace: Some(change_trace()),
    });
    migration
}

/// A fully populated PtahSchemaPlan, status included.
pub fn schema_plan_example() -> PtahSchemaPlan {
    let mut plan = PtahSchemaPlan::new(
        "ptah-plan-abc",
        PtahSchemaPlanSpec {
            contract_version: PLAN_CONTRACT_VERSION,
            schema_ref: object_ref("orders"),
            fingerprint: digest(15),
            content_digest: digest(18),
            size: 600_000,
            source: source_binding(),
            coordination_digest: digest(13),
            target_identity_digest: digest(14),
            actual_state_fingerprint: digest(23),
            desired_state_fingerprint: digest(24),
            policy_fingerprint: digest(25),
            execution_binding: execution_binding(),
            dialect: "postgres".into(),
            destructive: true,
            privilege_changes: vec![PrivilegeChange::Grant, PrivilegeChange::Ownership],
            statement_count: 4,
            chunks: vec![
                PlanChunkRef {
                    name: "ptah-plan-abc-000".into(),
                    index: 0,
                    digest: digest(26),
                    size: 524_288,
                },
                PlanChunkRef {
                    name: "ptah-plan-abc-001".into(),
                    index: 1,
                    digest: digest(27),
                    size: 75_712,
                },
            ],
        },
    );
    plan.metadata = meta("ptah-plan-abc");
    plan.status = Some(PtahSchemaPlanStatus {
        observed_generation: Some(1),
        published_chunks: vec![PublishedChunk {
            name: "ptah-plan-abc-000".into(),
            uid: "chunk-uid".into(),
            index: 0,
        }],
        conditions: vec![condition(SchemaPlanConditionType::Ready, Reason::Published)],
    });
    plan
}

/// A PtahSchemaPlanChunk.
pub fn chunk_example() -> PtahSchemaPlanChunk {
    let mut chunk = PtahSchemaPlanChunk::new(
        "ptah-plan-abc-000",
        PtahSchemaPlanChunkSpec {
            data: ByteString(b"CREATE TABLE orders (id bigint);\n".to_vec()),
        },
    );
    chunk.metadata = meta("ptah-plan-abc-000");
    chunk
}

/// A fully populated PtahMigrationPlan, status included.
pub fn migration_plan_example() -> PtahMigrationPlan {
    let mut plan = PtahMigrationPlan::new(
        "ptah-mplan-abc",
        PtahMigrationPlanSpec {
            contract_version: PLAN_CONTRACT_VERSION,
            migration_ref: object_ref("orders"),
            fingerprint: digest(15),
            migrations: vec![PlannedMigration {
                version: 7,
                version_key: Some("0000000007".into()),
                description: Some("add index".into()),
                checksum: "h1:def".into(),
                checkpoint: true,
                transaction_mode: Some(MigrationTransactionMode::None),
            }],
            history_fingerprint: digest(20),
            current_version: 6,
            source: source_binding(),
            coordination_digest: digest(13),
            target_identity_digest: digest(14),
            policy_fingerprint: digest(25),
            transaction_mode: Some(MigrationTransactionMode::File),
            execution_binding: execution_binding(),
        },
    );
    plan.metadata = meta("ptah-mplan-abc");
    plan.status = Some(PtahMigrationPlanStatus {
        observed_generation: Some(1),
        conditions: vec![condition(
            MigrationPlanConditionType::Executed,
            Reason::Succeeded,
        )],
        executed_at: Some(at(100)),
    });
    plan
}

/// What an approval names of [`source_binding`], the signer of
/// [`source_status`]'s evidence included.
pub fn approved_source() -> crate::api::approval::ApprovedSource {
    crate::api::approval::ApprovedSource::of(&source_binding(), Some(&verification_evidence()))
}

/// A fully populated PtahSchemaApproval, status included.
pub fn schema_approval_example() -> PtahSchemaApproval {
    let mut approval = PtahSchemaApproval::new(
        "approve-abc",
        PtahSchemaApprovalSpec {
            schema_ref: object_ref("orders"),
            plan_ref: object_ref("ptah-plan-abc"),
            plan_fingerprint: digest(15),
            source: Some(approved_source()),
            approver: Some(identity()),
            approved_at: Some(at(30)),
            mutation_request_uid: Some("admission-uid".into()),
            stamp_signature: Some(format!("v1:{}", "5a".repeat(32))),
        },
    );
    approval.metadata = meta("approve-abc");
    approval.status = Some(ApprovalStatus {
        observed_generation: Some(1),
        conditions: vec![condition(
            ApprovalConditionType::Consumed,
            Reason::DispatchCommitted,
        )],
    });
    approval
}

/// A fully populated PtahMigrationApproval, status included.
pub fn migration_approval_example() -> PtahMigrationApproval {
    let mut approval = PtahMigrationApproval::new(
        "approve-abc",
        PtahMigrationApprovalSpec {
            migration_ref: object_ref("orders"),
            plan_ref: object_ref("ptah-mplan-abc"),
            plan_fingerprint: digest(15),
            source: Some(approved_source()),
            approver: Some(identity()),
            approved_at: Some(at(30)),
            mutation_request_uid: Some("admission-uid".into()),
            stamp_signature: Some(format!("v1:{}", "5a".repeat(32))),
        },
    );
    approval.metadata = meta("approve-abc");
    approval.status = Some(ApprovalStatus {
        observed_generation: Some(1),
        conditions: vec![condition(
            ApprovalConditionType::Stale,
            Reason::PlanNoLongerCurrent,
        )],
    });
    approval
}

/// A fully populated PtahMigrationRunAcknowledgment, status included.
pub fn acknowledgment_example() -> PtahMigrationRunAcknowledgment {
    let mut ack = PtahMigrationRunAcknowledgment::new(
        "ack-1",
        PtahMigrationRunAcknowledgmentSpec {
            migration_ref: object_ref("orders"),
            operation_id: digest(11),
            acknowledged_by: Some(identity()),
            acknowledged_at: Some(at(130)),
            mutation_request_uid: Some("admission-uid".into()),
            stamp_signature: Some(format!("v1:{}", "5a".repeat(32))),
        },
    );
    ack.metadata = meta("ack-1");
    ack.status = Some(AcknowledgmentStatus {
        observed_generation: Some(1),
        conditions: vec![condition(
            AcknowledgmentConditionType::Consumed,
            Reason::RunAcknowledged,
        )],
    });
    ack
}

/// A PtahRealm (cluster-scoped, no status).
pub fn realm_example() -> PtahRealm {
    let mut realm = PtahRealm::new(
        "shared-mysql",
        PtahRealmSpec {
            engine: "MySQL".into(),
            namespaces: vec!["orders".into(), "billing".into()],
            sharing: RealmSharing::Shared,
        },
    );
    realm.metadata = ObjectMeta {
        name: Some("shared-mysql".into()),
        ..Default::default()
    };
    realm
}

/// A change under way, in its Verification stage, with a Source stage held.
pub fn change_trace() -> crate::api::trace::ChangeTrace {
    use crate::api::trace::{ChangeTrace, HeldStage, Stage};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    ChangeTrace {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        started_at: MicroTime(at(1).0),
        from: Some("InSync/ScopedConverged".into()),
        stage: Stage::Verification,
        round: 0,
        stage_started_at: MicroTime(at(20).0),
        jobs: vec!["orders-observe-0a1b2c3d4e5f6a7b".into()],
        exported: false,
        held: vec![HeldStage {
            stage: Stage::Source,
            round: 0,
            started_at: MicroTime(at(1).0),
            ended_at: MicroTime(at(2).0),
            jobs: vec!["orders-resolve-1a2b3c4d5e6f7a8b".into()],
        }],
    }
}
