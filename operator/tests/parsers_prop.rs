//! Bad input at volume (issue 26): property tests over every parser of
//! outside data in the operator. Nothing panics, every refusal names the
//! field or rule it is about, and what a parser accepts reads back as what
//! was written.
//!
//! | Test | Parser | Outside data |
//! | --- | --- | --- |
//! | `ptahs_outputs_of_any_bytes_never_panic` | `reports::{drift, plan, dry_run, applied, last_error_line}`, `history::{parse_status, parse_up, ptah_error}` | Ptah's outputs |
//! | `a_drift_report_*` | `reports::drift` (`schema drift --format json`) | Ptah's outputs |
//! | `a_plan_document_*` | `reports::plan` (`schema plan --dry-run`), `reports::classify`, `operations::statement_count` | Ptah's outputs |
//! | `a_status_document_*` | `history::parse_status` (`migrations status --json`) | Ptah's outputs |
//! | `an_up_log_*` | `history::parse_up` (`migrations up --log-format=json`) | Ptah's outputs |
//! | `sql_and_file_names_*` | `history::{split_statements, statement_position, driver_codes, failed_version, parse_file_name, description_of, declared_transaction_mode}` | Ptah's outputs (and the files Ptah reads) |
//! | `a_result_payload_*` | `receiver::check_request` (the receiver's read of a posted result), `migrations::{check_history, check_run}` | result payload |
//! | `a_stored_result_*` | `receiver::assemble` (the harvest of a stored result) | result payload |
//! | `admission_*` | `admission::{review_mutation, review_validation, decide}` over AdmissionReviews of generated approvals and acknowledgments | admission |
//!
//! The goldens the pinned Ptah wrote (`conformance/testdata/executor/`) are
//! the valid documents mutated here. The AdmissionReview body parser is
//! private; its property test is in `src/admission/webhook.rs`.
//!
//! Case counts are modest so the file runs in seconds in a debug build, and
//! no failure is persisted into the source tree (`failure_persistence`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use proptest::prelude::*;
use proptest::sample::Index;
use ptah_operator::admission::{
    Observed, StampKey, Validation, decide, review_mutation, review_validation,
};
use ptah_operator::api::common::ObjectRef;
use ptah_operator::api::schema::SchemaPlanSummary;
use ptah_operator::execution::receiver::{
    CHUNK_BYTES, TokenKey, assemble, check_request, result_objects,
};
use ptah_operator::protocol::migrations::{self, check_history, check_run};
use ptah_operator::protocol::receiver::{CONTENT_SHA256_HEADER, RESULTS_PATH, content_sha256};
use ptah_operator::protocol::result::{ResultDocument, StepOutput};
use ptah_operator::runner::executor::ChildRun;
use ptah_operator::runner::history::{self, UpEnd};
use ptah_operator::runner::operations::statement_count;
use ptah_operator::runner::reports::{self, Planned, ReportError};
use ptah_operator::testing;
use serde_json::{Value, json};

#[path = "../../supplychain/tests/support/json_mutation.rs"]
mod json_mutation;
use json_mutation::*;

/// A refusal of Ptah's output names the field: serde's reason holds the
/// broken member's path (or the added member's name), a rule names a field
/// of the contract, and an `error` member is Ptah's own failure.
fn report_names_the_field(
    e: &ReportError,
    keys: &[String],
    contract: &BTreeSet<String>,
) -> Result<(), TestCaseError> {
    let text = e.to_string();
    match e {
        ReportError::Unparsable { reason, .. } => {
            prop_assert!(names_one_of(reason, keys), "{text} names none of {keys:?}")
        }
        ReportError::Invalid { field, .. } => prop_assert!(
            field.split('.').all(|f| contract.contains(f)),
            "{text}: {field} is not a field of the document"
        ),
        ReportError::Failed { .. } => {
            prop_assert!(keys.iter().any(|k| k == "error"), "{text}")
        }
        other => prop_assert!(false, "{other} for a document that is there"),
    }
    Ok(())
}

/// Every key of `doc`, at any depth: the fields of its contract.
fn all_keys(doc: &Value) -> BTreeSet<String> {
    let mut all = Vec::new();
    paths(doc, &mut Vec::new(), &mut all);
    all.into_iter()
        .filter_map(|p| match p.last() {
            Some(Step::Key(k)) => Some(k.clone()),
            _ => None,
        })
        .collect()
}

// ---- Ptah's outputs ----

fn run(exit: i32, stdout: &[u8], stderr: &[u8]) -> ChildRun {
    ChildRun {
        exit,
        stdout: stdout.to_vec(),
        stderr: stderr.to_vec(),
        stdout_truncated: false,
        stderr_truncated: false,
        limit: 1 << 20,
        elapsed: Duration::ZERO,
    }
}

/// A golden of `conformance/testdata/executor/`: `exit: N`, `--- stdout`,
/// `--- stderr`.
fn golden(text: &str) -> ChildRun {
    let (head, rest) = text.split_once('\n').expect("exit line");
    let exit = head
        .strip_prefix("exit: ")
        .and_then(|e| e.parse().ok())
        .expect("exit");
    let rest = rest.strip_prefix("--- stdout\n").expect("stdout");
    let (stdout, stderr) = rest.split_once("--- stderr\n").expect("stderr");
    run(exit, stdout.as_bytes(), stderr.as_bytes())
}

macro_rules! executor {
    ($engine:literal, $name:literal) => {
        include_str!(concat!(
            "../../conformance/testdata/executor/",
            $engine,
            "/",
            $name
        ))
    };
}

const DRIFT_CLEAN: &str = executor!("postgresql", "schema-drift-clean.golden");
const DRIFT_WITH_DRIFT: &str = executor!("postgresql", "schema-drift-with-drift.golden");
const PLAN_DOCUMENT: &str = executor!("postgresql", "schema-plan-document.golden");
const STATUS: &[&str] = &[
    executor!("postgresql", "migrations-status-ready.stdout"),
    executor!("postgresql", "migrations-status-dirty.stdout"),
    executor!("postgresql", "migrations-status-nothing-pending.stdout"),
    executor!("postgresql", "migrations-status-out-of-order.stdout"),
    executor!("postgresql", "migrations-status-ahead.stdout"),
    executor!("mariadb", "migrations-status-unknown.stdout"),
];
const UP_APPLIED: &str = executor!("postgresql", "migrations-up-applied.stdout");
const UP_FAILED: &str = executor!("postgresql", "migrations-up-failed-statement-3.stdout");

/// The document of a run's stream (after any log lines before it).
fn document_of(stream: &[u8]) -> Value {
    let text = std::str::from_utf8(stream).expect("UTF-8");
    let at = text.find("\n{").map_or(0, |i| i + 1);
    serde_json::from_str(&text[at..]).expect("a golden document")
}

/// Text that looks like Ptah's streams: log lines, JSON-ish lines, the
/// lines the contract waits for, any characters.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        prop::collection::vec(
            prop_oneof![
                Just("{".to_string()),
                Just("}".to_string()),
                Just("error: failed to apply migration 3: (SQLSTATE 42P07)".to_string()),
                Just("Error 1061 (42000): Duplicate key".to_string()),
                Just(reports::SYNCED.to_string()),
                Just(reports::APPLY_COMPLETED.to_string()),
                Just("Planned schema changes:".to_string()),
                Just(history::UP_COMPLETED.to_string()),
                Just(r#"{"time":"t","level":"INFO","msg":"Applying migration","correlation_id":"c","command":"migrations.up","version":1}"#.to_string()),
                "time=x level=WARN msg=.{0,12}",
                "\\{\"[a-z_]{1,12}\": .{0,16}\\}",
                ".{0,40}",
            ],
            0..6,
        )
        .prop_flat_map(|lines| {
            (
                Just(lines),
                prop_oneof![Just("\n"), Just("\r\n"), Just("")],
            )
        })
        .prop_map(|(lines, sep)| lines.join(sep).into_bytes()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ptahs_outputs_of_any_bytes_never_panic(
        exit in prop_oneof![Just(0), Just(1), Just(2), Just(-1), any::<i32>()],
        stdout in stream(),
        stderr in stream(),
        cut in any::<bool>(),
    ) {
        let mut r = run(exit, &stdout, &stderr);
        r.stdout_truncated = cut;
        let errors = [
            reports::drift(&r).err(),
            reports::plan(&r).err(),
            reports::dry_run(&r).err(),
            reports::applied(&r).err(),
            history::parse_status(&r).err(),
            history::parse_up(&r).err(),
        ];
        for e in errors.into_iter().flatten() {
            let text = e.to_string();
            prop_assert!(text.starts_with("ptah"), "{text}");
            if let ReportError::Invalid { field, .. } = &e {
                prop_assert!(!field.is_empty(), "{text}");
            }
        }
        let _ = reports::last_error_line(&stderr);
        let _ = history::ptah_error(&stderr);
        let _ = statement_count(&stdout);
    }

    #[test]
    fn a_drift_report_with_a_broken_field_is_refused_naming_it(
        drifted in any::<bool>(),
        at in any::<Index>(),
        broken in mutation(),
        logged in any::<bool>(),
    ) {
        let base = golden(if drifted { DRIFT_WITH_DRIFT } else { DRIFT_CLEAN });
        prop_assert!(reports::drift(&base).is_ok());
        let stream = if drifted { &base.stderr } else { &base.stdout };
        let mut doc = document_of(stream);
        let contract = all_keys(&doc);
        let keys = mutate(&mut doc, at, &broken);
        let mut text = serde_json::to_string_pretty(&doc).expect("json");
        if logged {
            text = format!("time=x level=WARN msg=\"slow\"\r\n{text}\n");
        }
        let r = if drifted {
            run(base.exit, b"", text.as_bytes())
        } else {
            run(base.exit, text.as_bytes(), b"")
        };
        match reports::drift(&r) {
            Ok(d) => {
                prop_assert!(d.summary.report_digest.starts_with("sha256:"));
                prop_assert!(d.summary.findings.len() <= ptah_operator::protocol::database::MAX_FINDINGS);
            }
            Err(e) => report_names_the_field(&e, &keys, &contract)?,
        }
    }

    #[test]
    fn a_plan_document_with_a_broken_field_is_refused_naming_it(
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let base = golden(PLAN_DOCUMENT);
        let taken = matches!(reports::plan(&base), Ok(Planned::Changes { .. }));
        prop_assert!(taken, "the golden plan document");
        let mut doc = document_of(&base.stdout);
        let contract = all_keys(&doc);
        let keys = mutate(&mut doc, at, &broken);
        let bytes = serde_json::to_vec_pretty(&doc).expect("json");
        match reports::plan(&run(0, &bytes, b"")) {
            Ok(Planned::Changes { bytes: taken, document }) => {
                prop_assert_eq!(&taken, &bytes);
                prop_assert_eq!(statement_count(&bytes).ok(), i32::try_from(document.statements.len()).ok());
                let (tables, _) = reports::classify(&document.statements, "public");
                prop_assert!(tables.iter().all(|t| t.contains('.')), "{tables:?}");
            }
            Ok(Planned::Synced) => prop_assert!(false, "a document is not the synced line"),
            Err(e) => report_names_the_field(&e, &keys, &contract)?,
        }
    }

    #[test]
    fn a_plan_document_that_keeps_the_contract_is_taken_byte_for_byte(
        name in "plan_[0-9a-f]{12}",
        dialect in prop_oneof![Just("postgres"), Just("mysql"), Just("mariadb")],
        from in "[0-9a-f]{64}",
        to in "[0-9a-f]{64}",
        statements in prop::collection::vec(
            (
                "(CREATE|ALTER|DROP|GRANT|COMMENT ON|TRUNCATE) .{1,40}",
                prop_oneof![Just("safe"), Just("info"), Just("warning"), Just("error"), Just("destructive")],
                ".{0,20}",
            ),
            1..5,
        ),
    ) {
        let doc = json!({
            "format_version": 1,
            "name": name,
            "dialect": dialect,
            "from_fingerprint": format!("sha256:{from}"),
            "to_fingerprint": format!("sha256:{to}"),
            "destructive": statements.iter().any(|s| s.1 == "destructive"),
            "statements": statements.iter().map(|(sql, severity, reason)| {
                json!({"sql": sql, "severity": severity, "reason": reason})
            }).collect::<Vec<_>>(),
        });
        let bytes = serde_json::to_vec_pretty(&doc).expect("json");
        let Ok(Planned::Changes { bytes: taken, document }) = reports::plan(&run(0, &bytes, b"")) else {
            return Err(TestCaseError::fail("a plan that keeps the contract"));
        };
        prop_assert_eq!(taken, bytes.clone());
        prop_assert_eq!(&document.name, &name);
        prop_assert_eq!(&document.to_fingerprint, &format!("sha256:{to}"));
        for (s, (sql, severity, _)) in document.statements.iter().zip(&statements) {
            prop_assert_eq!(&s.sql, sql);
            prop_assert_eq!(&s.severity, severity);
        }
        prop_assert_eq!(statement_count(&bytes).ok(), Some(statements.len() as i32));
    }

    #[test]
    fn a_status_document_with_a_broken_field_is_refused_naming_it(
        which in any::<Index>(),
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let golden = STATUS[which.index(STATUS.len())];
        prop_assert!(history::parse_status(&run(0, golden.as_bytes(), b"")).is_ok());
        let mut doc: Value = serde_json::from_str(golden).expect("json");
        let mut contract = all_keys(&doc);
        contract.extend(["dirty_revision", "state", "atlas_version", "applied", "direction"].map(String::from));
        let keys = mutate(&mut doc, at, &broken);
        let bytes = serde_json::to_vec_pretty(&doc).expect("json");
        if let Err(e) = history::parse_status(&run(0, &bytes, b"")) {
            report_names_the_field(&e, &keys, &contract)?;
        }
    }

    #[test]
    fn a_status_document_that_agrees_with_itself_is_taken(
        applied in prop::collection::btree_set(1i64..10_000, 0..6),
        pending in prop::collection::btree_set(1i64..10_000, 0..6),
        keyed in any::<bool>(),
    ) {
        let pending: BTreeSet<i64> = pending.difference(&applied).copied().collect();
        let current = applied.last().copied().unwrap_or(0);
        let out_of_order: Vec<i64> = pending.iter().copied().filter(|v| *v < current).collect();
        let keys = |v: &[i64]| -> Value {
            if keyed { json!(v.iter().map(i64::to_string).collect::<Vec<_>>()) } else { Value::Null }
        };
        let applied: Vec<i64> = applied.into_iter().collect();
        let pending: Vec<i64> = pending.into_iter().collect();
        let doc = json!({
            "current_version": current,
            "applied_migrations": if applied.is_empty() { Value::Null } else { json!(applied) },
            "applied_migration_keys": keys(&applied),
            "pending_migrations": pending,
            "pending_migration_keys": keys(&pending),
            "out_of_order_migrations": out_of_order,
            "total_migrations": applied.len() + pending.len(),
            "has_pending_changes": !pending.is_empty(),
        });
        let bytes = serde_json::to_vec(&doc).expect("json");
        let status = history::parse_status(&run(0, &bytes, b"")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(status.current_version, current);
        prop_assert_eq!(status.applied_migrations, applied);
        prop_assert_eq!(status.pending_migrations, pending);
        prop_assert_eq!(status.out_of_order_migrations, out_of_order);
    }

    #[test]
    fn an_up_log_with_a_broken_line_is_refused_naming_the_field(
        failed in any::<bool>(),
        line in any::<Index>(),
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let (exit, stdout, stderr) = if failed {
            (2, UP_FAILED, "error: error running migrations: failed to apply migration 5: boom\n")
        } else {
            (0, UP_APPLIED, "")
        };
        prop_assert!(history::parse_up(&run(exit, stdout.as_bytes(), stderr.as_bytes())).is_ok());
        let mut lines: Vec<String> = stdout.lines().map(str::to_string).collect();
        let i = line.index(lines.len());
        let mut doc: Value = serde_json::from_str(&lines[i]).expect("a JSON line");
        let contract = all_keys(&doc);
        let keys = mutate(&mut doc, at, &broken);
        lines[i] = serde_json::to_string(&doc).expect("json");
        let text = lines.join("\n") + "\n";
        match history::parse_up(&run(exit, text.as_bytes(), stderr.as_bytes())) {
            Ok(UpEnd::Failed { version, .. }) => prop_assert_eq!(version, Some(5)),
            Ok(_) => prop_assert!(!failed),
            // A line that lost the completion message: the contract's line is missing.
            Err(ReportError::Missing { what, .. }) => prop_assert_eq!(what, "completion line"),
            Err(e) => report_names_the_field(&e, &keys, &contract)?,
        }
    }

    #[test]
    fn sql_and_file_names_of_any_text_never_panic(
        sql in prop_oneof![
            ".{0,120}",
            prop::collection::vec(
                prop_oneof![
                    Just("'"), Just("\""), Just("`"), Just("$$"), Just("$tag$"), Just("$"),
                    Just("--"), Just("/*"), Just("*/"), Just(";"), Just("\\"), Just("\n"),
                    Just("CREATE TABLE t (a int)"), Just("ON"), Just("."), Just("("),
                    Just("é"), Just("-- +ptah no_transaction\n"), Just("-- atlas:txmode none\n"),
                ],
                0..24,
            ).prop_map(|p| p.concat()),
        ],
        applied in any::<i64>(),
        name in prop_oneof![".{0,40}", "[0-9]{10}_[a-z_]{0,10}(\\.checkpoint)?\\.(up|down)\\.sql"],
    ) {
        let statements = history::split_statements(&sql);
        prop_assert!(statements.iter().all(|s| !s.is_empty()));
        if let Some(p) = history::statement_position(&sql, applied, &sql) {
            prop_assert!(p >= 1);
        }
        let (state, errno) = history::driver_codes(&sql);
        prop_assert!(state.is_none_or(|s| s.len() == 5));
        prop_assert!(errno.is_none_or(|n| n >= 0));
        let _ = history::failed_version(&sql);
        let _ = history::declared_transaction_mode(&sql);
        let stmt = reports::PlanStatement { sql: sql.clone(), severity: "safe".into(), reason: String::new() };
        let _ = reports::classify(&[stmt], "public");
        if let Some((version, title, _, _)) = history::parse_file_name(&name) {
            prop_assert!(version >= 0 && !title.is_empty());
        }
        prop_assert!(history::description_of(&name).chars().count() <= 128);
    }
}

// ---- a Job's result payload ----

fn hex64() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}".prop_map(|h| format!("sha256:{h}"))
}

fn digest(n: u8) -> String {
    testing::digest(n)
}

fn operation(id: &str, attempt: i64, generation: i64) -> Value {
    json!({
        "operationId": id,
        "attempt": attempt,
        "resource": {"kind": "PtahSchema", "namespace": "orders", "name": "orders"},
        "resourceUid": "schema-uid",
        "generation": generation,
        "inputFingerprint": digest(2),
        "podName": "orders-observe-1",
        "podUid": "pod-uid",
        "jobUid": "job-uid",
    })
}

/// Result documents as the runner writes them, one per kind of answer.
fn result_documents() -> Vec<Value> {
    let doc = |step: &str, outcome: &str, result: Option<Value>, error: Option<Value>| {
        let mut d = json!({
            "apiVersion": "runner.ptah.run/v1alpha1",
            "kind": "StepResult",
            "step": step,
            "operation": operation(&digest(1), 1, 3),
            "outcome": outcome,
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:00:01Z",
        });
        if let Some(r) = result {
            d["result"] = r;
        }
        if let Some(e) = error {
            d["error"] = e;
        }
        d
    };
    vec![
        doc(
            "observe",
            "Succeeded",
            Some(json!({"type": "DriftObserved", "report": {
                "reportDigest": digest(3), "drift": true, "dialect": "postgres", "findingCount": 3,
                "highestSeverity": "warning",
                "findings": [{"category": "tables_added", "count": 3, "severity": "warning"}],
                "targetIdentityDigest": digest(4),
            }})),
            None,
        ),
        doc(
            "plan",
            "Succeeded",
            Some(json!({"type": "Planned", "plan": {
                "targetIdentityDigest": digest(4), "dialect": "postgres",
                "change": {"plan": "{}", "contentDigest": digest(5), "statementCount": 1,
                    "destructive": false, "privilegeChanges": ["Grant"], "tables": ["public.orders"],
                    "actualStateFingerprint": digest(6), "desiredStateFingerprint": digest(7)},
            }})),
            None,
        ),
        doc(
            "history",
            "Succeeded",
            Some(json!({"type": "History", "report": {
                "contractVersion": 1, "currentVersion": 4, "checkpointVersion": 1, "appliedCount": 4,
                "revisions": [{"version": 4, "description": "Carriers", "checksum": "abc",
                    "appliedAt": "2026-01-01T00:00:00Z", "executionMillis": 3}],
                "dirtyRevision": {"version": 5, "direction": "Up", "state": "failed",
                    "statementsApplied": 0, "statementsTotal": 3},
                "modifiedVersions": [2], "outOfOrderVersions": [3], "aheadVersions": [9],
                "pending": [{"version": 5, "checksum": "fee8", "transactionMode": "file"}],
                "historyFingerprint": digest(8), "targetIdentityDigest": digest(4),
            }})),
            None,
        ),
        doc(
            "apply",
            "Succeeded",
            Some(json!({"type": "Ran", "outcome": {
                "result": {"end": "Partial", "failure": {"version": 5, "statementPosition": 2,
                    "sqlstate": "23505", "mysqlErrno": 1062}},
                "appliedVersions": [4], "targetIdentityDigest": digest(4), "message": "stopped",
            }})),
            None,
        ),
        doc(
            "apply",
            "Succeeded",
            Some(json!({"type": "Applied", "report": {
                "targetIdentityDigest": digest(4), "statementsExecuted": 2,
            }})),
            None,
        ),
        doc(
            "source check",
            "Succeeded",
            Some(json!({"type": "SnapshotChecked",
                "contentDigest": digest(9),
                "files": [{"path": "001_init.sql", "size": 8, "sha256": digest(10)}],
            })),
            None,
        ),
        doc(
            "source check",
            "Refused",
            None,
            Some(json!({
                "rule": "contentDigest", "file": "001_init.sql", "message": "the digest moved",
            })),
        ),
    ]
}

/// A POST of `body` to the receiver, every header as the runner sends it.
fn post(body: &[u8]) -> http::Request<Bytes> {
    http::Request::post(RESULTS_PATH)
        .header(http::header::AUTHORIZATION, "Bearer token")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len().to_string())
        .header(CONTENT_SHA256_HEADER, content_sha256(body))
        .body(Bytes::copy_from_slice(body))
        .expect("a request")
}

/// Where the protocol's own rules refuse a report (`field: reason`).
fn protocol_checks(doc: &ResultDocument) -> Option<migrations::ReportError> {
    match doc.result.as_ref()? {
        StepOutput::History { report } => check_history(report).err(),
        StepOutput::Ran { outcome } => check_run(outcome).err(),
        _ => None,
    }
}

fn starts_with_a_field(text: &str) -> bool {
    text.split_once(": ").is_some_and(|(field, _)| {
        !field.is_empty()
            && field
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']' | '_' | ','))
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_result_payload_of_any_bytes_is_refused_as_no_document(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            json_value().prop_map(|v| serde_json::to_vec(&v).expect("json")),
        ],
        header in prop_oneof![Just(None), ".{0,40}".prop_map(Some)],
    ) {
        match check_request(&post(&body)) {
            Ok(received) => prop_assert!(received.operation.operation_id.starts_with("sha256:")),
            Err(refusal) => {
                prop_assert_eq!(refusal.reason, "Document", "{}", refusal);
                prop_assert!(!refusal.message.is_empty());
            }
        }
        // Headers of any text (where http takes them) never panic either.
        if let Some(value) = header
            && let Ok(value) = http::HeaderValue::from_str(&value)
        {
            for name in [
                http::header::AUTHORIZATION.as_str(),
                http::header::CONTENT_TYPE.as_str(),
                http::header::CONTENT_LENGTH.as_str(),
                CONTENT_SHA256_HEADER,
            ] {
                let mut req = post(&body);
                req.headers_mut().insert(
                    http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                    value.clone(),
                );
                if let Err(refusal) = check_request(&req) {
                    prop_assert!(!refusal.reason.is_empty() && !refusal.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn a_result_payload_with_a_broken_field_is_refused_naming_it(
        which in any::<Index>(),
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let docs = result_documents();
        let mut doc = docs[which.index(docs.len())].clone();
        let base = serde_json::to_vec(&doc).expect("json");
        let received = check_request(&post(&base)).map_err(|r| TestCaseError::fail(r.to_string()))?;
        prop_assert!(protocol_checks(&received.document).is_none());
        let keys = mutate(&mut doc, at, &broken);
        let body = serde_json::to_vec(&doc).expect("json");
        match check_request(&post(&body)) {
            Ok(received) => {
                if let Some(e) = protocol_checks(&received.document) {
                    let text = e.to_string();
                    prop_assert!(starts_with_a_field(&text), "{text}");
                }
            }
            Err(refusal) => {
                prop_assert_eq!(refusal.reason, "Document", "{}", refusal);
                prop_assert!(names_one_of(&refusal.message, &keys), "{refusal} names none of {keys:?}");
            }
        }
    }

    #[test]
    fn a_result_payload_that_is_valid_reads_back_as_sent(
        which in any::<Index>(),
        id in hex64(),
        attempt in 1i64..1000,
        generation in any::<i64>(),
        message in ".{0,60}",
    ) {
        let docs = result_documents();
        let mut doc = docs[which.index(docs.len())].clone();
        doc["operation"] = operation(&id, attempt, generation);
        if let Some(e) = doc.get_mut("error") {
            e["message"] = json!(message);
        }
        let typed: ResultDocument = serde_json::from_value(doc.clone()).expect("a result document");
        let body = serde_json::to_vec(&typed).expect("json");
        let received = check_request(&post(&body)).map_err(|r| TestCaseError::fail(r.to_string()))?;
        prop_assert_eq!(&received.document, &typed);
        prop_assert_eq!(received.sha256, content_sha256(&body));
        prop_assert_eq!(received.operation.attempt as i64, attempt);
        prop_assert_eq!(serde_json::to_value(&received.document).expect("json"), doc);
    }

    #[test]
    fn a_stored_result_with_a_broken_piece_is_refused_naming_it(
        which in any::<Index>(),
        pad in prop_oneof![15 => 0usize..3000, 1 => Just(CHUNK_BYTES + 100)],
        key in prop::sample::select(vec!["operationID", "attempt", "length", "sha256", "chunks", "receivedAt", "podUID", "jobUID"]),
        value in prop_oneof![Just(None), ".{0,20}".prop_map(Some), (0u64..5000).prop_map(|n| Some(n.to_string()))],
        flip in prop_oneof![Just(None), any::<(Index, u8)>().prop_map(Some)],
    ) {
        let docs = result_documents();
        let mut doc = docs[which.index(docs.len())].clone();
        // Large enough, at times, to need chunks.
        doc["finishedAt"] = json!(format!("2026-01-01T00:00:01Z{}", " ".repeat(pad)));
        let typed: ResultDocument = serde_json::from_value(doc).expect("a result document");
        let body = serde_json::to_vec(&typed).expect("json");
        let op = typed.operation.clone().expect("an operation");
        let received_at = Timestamp::from_second(1_767_225_600).expect("time");
        let (index, chunks) = result_objects("orders", &OwnerReference::default(), &op, &body, received_at)
            .expect("objects");
        let stored = assemble(&index, &chunks).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&stored.document, &typed);
        prop_assert_eq!(stored.received_at, Time(received_at));

        let mut broken = index.clone();
        let data = broken.data.get_or_insert_with(BTreeMap::new);
        match &value {
            None => { data.remove(key); }
            Some(v) => { data.insert(key.to_string(), v.clone()); }
        }
        let mut chunks = chunks;
        if let Some((at, byte)) = flip {
            let piece = if chunks.is_empty() { &mut broken } else { &mut chunks[0] };
            if let Some(b) = piece.binary_data.as_mut().and_then(|m| m.get_mut("chunk")) {
                let i = at.index(b.0.len().max(1));
                if let Some(x) = b.0.get_mut(i) {
                    *x = byte;
                }
            }
        }
        match assemble(&broken, &chunks) {
            Ok(again) => prop_assert_eq!(again.document, typed),
            Err(e) => {
                let text = e.to_string();
                prop_assert!(
                    text.contains(&format!("data.{key}")) || text.contains("data.sha256")
                        || text.contains("data.length") || text.contains("not a result document"),
                    "{text}"
                );
            }
        }
    }
}

// ---- admission ----

const GROUP_VERSION: &str = "operator.ptah.run/v1alpha1";

/// The objects a review reads: a schema whose current plan the schema
/// approval names, that plan, a migration with its plan and unresolved run.
fn observed() -> Observed {
    let mut schema = testing::schema_example();
    schema.metadata.uid = Some("orders-uid".into());
    let mut plan = testing::schema_plan_example();
    plan.metadata.uid = Some("ptah-plan-abc-uid".into());
    if let Some(status) = schema.status.as_mut() {
        status.plan = Some(SchemaPlanSummary {
            name: "ptah-plan-abc".into(),
            uid: "ptah-plan-abc-uid".into(),
            ..status.plan.clone().expect("a plan")
        });
    }
    plan.spec.schema_ref = ObjectRef {
        name: "orders".into(),
        uid: "orders-uid".into(),
    };
    let mut migration = testing::migration_example();
    migration.metadata.uid = Some("orders-uid".into());
    let mut migration_plan = testing::migration_plan_example();
    migration_plan.metadata.uid = Some("ptah-mplan-abc-uid".into());
    Observed {
        schema: Some(schema),
        schema_plan: Some(plan),
        migration: Some(migration),
        migration_plan: Some(migration_plan),
    }
}

/// An approval or acknowledgment as a client creates it: no status, no stamps.
fn created(kind: &str) -> Value {
    let mut object = match kind {
        "PtahSchemaApproval" => serde_json::to_value(testing::schema_approval_example()),
        "PtahMigrationApproval" => serde_json::to_value(testing::migration_approval_example()),
        _ => serde_json::to_value(testing::acknowledgment_example()),
    }
    .expect("json");
    let map = object.as_object_mut().expect("an object");
    map.remove("status");
    map.insert("apiVersion".into(), json!(GROUP_VERSION));
    map.insert("kind".into(), json!(kind));
    if let Some(spec) = object["spec"].as_object_mut() {
        for stamp in [
            "approver",
            "approvedAt",
            "acknowledgedBy",
            "acknowledgedAt",
            "mutationRequestUID",
            "stampSignature",
        ] {
            spec.remove(stamp);
        }
    }
    object
}

fn review(
    kind: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
) -> Option<AdmissionRequest<DynamicObject>> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-uid-1",
            "kind": {"group": "operator.ptah.run", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "operator.ptah.run", "version": "v1alpha1", "resource": "x"},
            "name": "approve-abc",
            "namespace": "orders",
            "operation": operation,
            "userInfo": {"username": "alice@example.com", "uid": "u-1", "groups": ["dba"]},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    });
    // What the webhook's body parser refuses never reaches a review.
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).ok()?;
    review.try_into().ok()
}

/// A refusal of admission starts with the field it is about.
fn refused_naming_a_field(response: &AdmissionResponse) -> Result<(), TestCaseError> {
    if !response.allowed {
        let message = &response.result.message;
        prop_assert!(starts_with_a_field(message), "{message}");
    }
    Ok(())
}

/// The stamped object the mutating review's patch makes.
fn patched(object: &Value, response: &AdmissionResponse) -> Option<Value> {
    let patch: json_patch::Patch = serde_json::from_slice(response.patch.as_deref()?).ok()?;
    let mut object = object.clone();
    json_patch::patch(&mut object, &patch).ok()?;
    Some(object)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn admission_of_a_generated_approval_with_a_broken_field_names_it(
        kind in prop::sample::select(vec!["PtahSchemaApproval", "PtahMigrationApproval", "PtahMigrationRunAcknowledgment"]),
        at in any::<Index>(),
        broken in mutation(),
        in_spec in any::<bool>(),
    ) {
        let key = StampKey::of(&TokenKey::generate());
        let now = testing::at(60);
        let observed = observed();
        let base = created(kind);
        let mut object = base.clone();
        let under: &[&str] = if in_spec { &["spec"] } else { &[] };
        mutate_under(&mut object, under, at, &broken);

        // The creation: stamped, then validated against what it names.
        if let Some(req) = review(kind, "CREATE", &object, None) {
            let mutated = review_mutation(&req, &now, &key);
            refused_naming_a_field(&mutated)?;
            let stamped = patched(&object, &mutated).unwrap_or_else(|| object.clone());
            if let Some(req) = review(kind, "CREATE", &stamped, None) {
                let answer = match review_validation(&req) {
                    Validation::Answer(response) => *response,
                    Validation::Read { namespace, subject } => {
                        prop_assert_eq!(namespace, "orders");
                        decide(&req, &subject, &observed)
                    }
                };
                refused_naming_a_field(&answer)?;
            }
        }
        // An update: the spec is immutable, and the refusal says so.
        if let Some(req) = review(kind, "UPDATE", &object, Some(&base)) {
            let answer = match review_validation(&req) {
                Validation::Answer(response) => *response,
                Validation::Read { .. } => return Err(TestCaseError::fail("an update reads nothing")),
            };
            refused_naming_a_field(&answer)?;
            prop_assert!(answer.allowed || answer.result.message.starts_with("spec"), "{}", answer.result.message);
        }
    }

    #[test]
    fn admission_of_a_generated_schema_approval_of_the_current_plan_admits_it(
        user in "[a-z][a-z0-9.@-]{0,20}",
        uid in "[a-z0-9-]{1,36}",
    ) {
        let key = StampKey::of(&TokenKey::generate());
        let mut object = created("PtahSchemaApproval");
        object["spec"]["schemaRef"] = json!({"name": "orders", "uid": "orders-uid"});
        object["spec"]["planRef"] = json!({"name": "ptah-plan-abc", "uid": "ptah-plan-abc-uid"});
        object["spec"]["planFingerprint"] = json!(digest(15));
        let mut req = review("PtahSchemaApproval", "CREATE", &object, None).expect("a review");
        req.uid = uid.clone();
        req.user_info.username = Some(user.clone());
        let mutated = review_mutation(&req, &testing::at(60), &key);
        prop_assert!(mutated.allowed, "{}", mutated.result.message);
        let stamped = patched(&object, &mutated).expect("a patch");
        prop_assert_eq!(&stamped["spec"]["approver"]["username"], &json!(user));
        prop_assert_eq!(&stamped["spec"]["mutationRequestUID"], &json!(uid));
        let mut req = review("PtahSchemaApproval", "CREATE", &stamped, None).expect("a review");
        req.user_info.username = Some(user);
        let Validation::Read { subject, .. } = review_validation(&req) else {
            return Err(TestCaseError::fail("a stamped approval is read against its schema"));
        };
        let answer = decide(&req, &subject, &observed());
        prop_assert!(answer.allowed, "{}", answer.result.message);
    }
}
