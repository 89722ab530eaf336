//! A preview's verdict: what the resource's policy would make of the plan
//! its read-only Plan (a schema) or History reading (a migration) found, by
//! the rules the Planning verdict uses ([`super::schema::policy`], the
//! history verdict). Pure; `kubectl ptah preview` prints it and exits with
//! [`Verdict::exit_code`].

use crate::api::common::{ApplyPolicy, MigrationPolicy, SchemaPolicy};
use crate::api::condition::Reason;
use crate::api::plan::PlannedMigration;
use crate::protocol::database::PlanOutcome;
use crate::protocol::migrations::{HistoryReport, HistoryVerdict};

use super::schema::policy;

/// What the policy would do with the previewed change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The database already is what the files declare (exit 0).
    NoChange,
    /// A change: it would wait for an approval, or (`apply: Always`, nothing
    /// destructive or privileged) run at once (exit 2 either way).
    Change {
        /// Whether a person must approve it.
        approval_required: bool,
        /// `AwaitingApproval`, `PrivilegeChanges` or `NotRequired`.
        reason: Reason,
        /// What happens once it is merged.
        message: String,
    },
    /// The policy or the history would refuse it (exit 3).
    Refused {
        /// The refusal's reason, as the resource would show it.
        reason: Reason,
        /// What refuses it and the way out.
        message: String,
    },
}

impl Verdict {
    /// 0 no change, 2 a change, 3 refused by policy.
    pub fn exit_code(&self) -> i32 {
        match self {
            Verdict::NoChange => 0,
            Verdict::Change { .. } => 2,
            Verdict::Refused { .. } => 3,
        }
    }

    /// One line for a person.
    pub fn sentence(&self) -> String {
        match self {
            Verdict::NoChange => "no change: the database already matches these files".into(),
            Verdict::Change { message, .. } | Verdict::Refused { message, .. } => message.clone(),
        }
    }
}

/// Where a previewed plan's statements are, for the hold's message.
const SEE: &str = "the statements are listed above";

/// A schema preview's verdict under `policy`, naming the first protected
/// table the plan changes and `destructive_statement`, the first statement
/// Ptah classes destructive (`runner::reports::first_destructive`).
pub fn of_schema(
    policy: &SchemaPolicy,
    outcome: &PlanOutcome,
    destructive_statement: Option<&str>,
) -> Verdict {
    let Some(change) = &outcome.change else {
        return Verdict::NoChange;
    };
    let table = policy::protected(&policy.protected_tables, &change.tables);
    let subject = "the previewed plan";
    if let Some((reason, message)) = policy::hold(
        policy,
        subject,
        change.destructive,
        table.as_deref(),
        destructive_statement,
        SEE,
    ) {
        return Verdict::Refused { reason, message };
    }
    let privileged = !change.privilege_changes.is_empty();
    let n = change.statement_count;
    if policy::automatic(policy, change.destructive, privileged) {
        Verdict::Change {
            approval_required: false,
            reason: Reason::NotRequired,
            message: format!(
                "{n} statement(s) would apply without an approval once merged \
                 (spec.policy.apply is Always and nothing is destructive or privileged)"
            ),
        }
    } else {
        let (reason, why) = if privileged {
            (
                Reason::PrivilegeChanges,
                "it changes privileges, which always need an approval",
            )
        } else if policy.apply == ApplyPolicy::Always {
            (
                Reason::AwaitingApproval,
                "it is destructive, which needs an approval even under apply: Always",
            )
        } else {
            (Reason::AwaitingApproval, "spec.policy.apply is OnApproval")
        };
        Verdict::Change {
            approval_required: true,
            reason,
            message: format!(
                "{n} statement(s) would wait for an approval once merged ({why}): \
                 `kubectl ptah approve` after the merge"
            ),
        }
    }
}

/// A migration preview's verdict under `policy`: the history verdict the
/// manager would reach, then the apply policy over the pending versions.
pub fn of_migrations(policy: &MigrationPolicy, report: &HistoryReport) -> Verdict {
    let versions = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    let refused = |reason, message: String| Verdict::Refused { reason, message };
    match report.verdict() {
        HistoryVerdict::Dirty => refused(
            Reason::HistoryDirty,
            "the database's revision table is dirty (a migration failed part way): \
             nothing runs until a person repairs it"
                .into(),
        ),
        HistoryVerdict::Modified => refused(
            Reason::HistoryModified,
            format!(
                "version(s) {} are applied with another checksum: these files edit \
                 migrations that already ran; add a new version instead",
                versions(&report.modified_versions)
            ),
        ),
        HistoryVerdict::OutOfOrder => refused(
            Reason::HistoryOutOfOrder,
            format!(
                "version(s) {} sort below version {}, the newest applied: number new \
                 migrations after it",
                versions(&report.out_of_order()),
                report.current_version
            ),
        ),
        HistoryVerdict::Ahead => refused(
            Reason::HistoryAhead,
            format!(
                "the database has version(s) {} that these files do not: the \
                 directory is behind the database",
                versions(&report.ahead_versions)
            ),
        ),
        HistoryVerdict::NothingPending => Verdict::NoChange,
        HistoryVerdict::Pending(pending) => pending_verdict(policy, &pending),
    }
}

fn pending_verdict(policy: &MigrationPolicy, pending: &[PlannedMigration]) -> Verdict {
    let list = pending
        .iter()
        .map(|m| m.version.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match policy.apply {
        ApplyPolicy::Never => Verdict::Refused {
            reason: Reason::ApplyDisabled,
            message: format!(
                "version(s) {list} would wait and spec.policy.apply is Never: no \
                 migration runs; set it to OnApproval or Always to run them"
            ),
        },
        ApplyPolicy::OnApproval => Verdict::Change {
            approval_required: true,
            reason: Reason::AwaitingApproval,
            message: format!(
                "version(s) {list} would wait for an approval once merged: \
                 `kubectl ptah approve` after the merge"
            ),
        },
        ApplyPolicy::Always => Verdict::Change {
            approval_required: false,
            reason: Reason::NotRequired,
            message: format!(
                "version(s) {list} would run without an approval once merged \
                 (spec.policy.apply is Always)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::plan::PrivilegeChange;
    use crate::protocol::database::PlannedChange;

    fn schema_policy(json: serde_json::Value) -> SchemaPolicy {
        serde_json::from_value(json).expect("a policy")
    }

    fn outcome(destructive: bool, tables: &[&str], privileged: bool) -> PlanOutcome {
        let severity = if destructive { "destructive" } else { "safe" };
        let plan = format!(
            r#"{{"format_version": 1, "name": "p", "dialect": "postgres", "from_fingerprint": "a",
                "to_fingerprint": "b", "destructive": {destructive},
                "statements": [{{"sql": "DROP TABLE audit", "severity": "{severity}", "reason": ""}}]}}"#
        );
        PlanOutcome {
            target_identity_digest: "sha256:t".into(),
            dialect: "postgres".into(),
            change: Some(PlannedChange {
                content_digest: "sha256:p".into(),
                plan,
                statement_count: 1,
                destructive,
                privilege_changes: if privileged {
                    vec![PrivilegeChange::Grant]
                } else {
                    vec![]
                },
                tables: tables.iter().map(|t| t.to_string()).collect(),
                actual_state_fingerprint: "a".into(),
                desired_state_fingerprint: "b".into(),
            }),
        }
    }

    #[test]
    fn a_schema_preview_without_change_exits_0() {
        let none = PlanOutcome {
            change: None,
            ..outcome(false, &[], false)
        };
        let v = of_schema(&schema_policy(serde_json::json!({})), &none, None);
        assert_eq!(v, Verdict::NoChange);
        assert_eq!(v.exit_code(), 0);
    }

    #[test]
    fn a_schema_preview_the_policy_refuses_exits_3_naming_the_rule() {
        let protect = schema_policy(serde_json::json!({"protectedTables": ["audit"]}));
        let v = of_schema(&protect, &outcome(false, &["public.audit"], false), None);
        assert!(
            matches!(&v, Verdict::Refused { reason: Reason::ProtectedTable, message } if message.contains("public.audit"))
        );
        assert_eq!(v.exit_code(), 3);

        let v = of_schema(
            &schema_policy(serde_json::json!({})),
            &outcome(true, &["public.audit"], false),
            Some("DROP TABLE audit"),
        );
        assert!(
            matches!(&v, Verdict::Refused { reason: Reason::DestructiveChangesDisabled, message } if message.contains("DROP TABLE audit")),
            "{v:?}"
        );

        let never = schema_policy(serde_json::json!({"apply": "Never"}));
        let v = of_schema(&never, &outcome(false, &["public.t"], false), None);
        assert!(matches!(
            v,
            Verdict::Refused {
                reason: Reason::ApplyDisabled,
                ..
            }
        ));
    }

    #[test]
    fn a_schema_change_waits_for_an_approval_or_runs_under_always_exits_2() {
        let on_approval = schema_policy(serde_json::json!({"apply": "OnApproval"}));
        let v = of_schema(&on_approval, &outcome(false, &["public.t"], false), None);
        assert!(matches!(
            v,
            Verdict::Change {
                approval_required: true,
                reason: Reason::AwaitingApproval,
                ..
            }
        ));
        assert_eq!(v.exit_code(), 2);

        let always = schema_policy(serde_json::json!({"apply": "Always"}));
        let v = of_schema(&always, &outcome(false, &["public.t"], false), None);
        assert!(matches!(
            v,
            Verdict::Change {
                approval_required: false,
                reason: Reason::NotRequired,
                ..
            }
        ));
        assert_eq!(v.exit_code(), 2);

        let v = of_schema(&always, &outcome(false, &["public.t"], true), None);
        assert!(matches!(
            v,
            Verdict::Change {
                approval_required: true,
                reason: Reason::PrivilegeChanges,
                ..
            }
        ));

        let destructive_allowed =
            schema_policy(serde_json::json!({"apply": "Always", "allowDestructive": true}));
        let v = of_schema(
            &destructive_allowed,
            &outcome(true, &["public.t"], false),
            None,
        );
        assert!(matches!(
            v,
            Verdict::Change {
                approval_required: true,
                ..
            }
        ));
    }

    fn report(json: serde_json::Value) -> HistoryReport {
        let mut base = serde_json::json!({
            "contractVersion": 1, "currentVersion": 1, "appliedCount": 1,
            "historyFingerprint": "sha256:h", "targetIdentityDigest": "sha256:t",
        });
        base.as_object_mut()
            .expect("an object")
            .extend(json.as_object().expect("an object").clone());
        serde_json::from_value(base).expect("a report")
    }

    fn migration_policy(apply: &str) -> MigrationPolicy {
        serde_json::from_value(serde_json::json!({"apply": apply})).expect("a policy")
    }

    #[test]
    fn a_migration_preview_follows_the_history_then_the_apply_policy() {
        let pending = serde_json::json!({"pending": [{"version": 2, "checksum": "c2"}, {"version": 3, "checksum": "c3"}]});
        let on_approval = migration_policy("OnApproval");
        let v = of_migrations(&on_approval, &report(pending.clone()));
        assert!(
            matches!(&v, Verdict::Change { approval_required: true, message, .. } if message.contains("2, 3"))
        );
        assert_eq!(v.exit_code(), 2);
        let v = of_migrations(&migration_policy("Always"), &report(pending.clone()));
        assert!(matches!(
            v,
            Verdict::Change {
                approval_required: false,
                ..
            }
        ));
        let v = of_migrations(&migration_policy("Never"), &report(pending));
        assert!(matches!(
            v,
            Verdict::Refused {
                reason: Reason::ApplyDisabled,
                ..
            }
        ));
        assert_eq!(v.exit_code(), 3);
        assert_eq!(
            of_migrations(&on_approval, &report(serde_json::json!({}))),
            Verdict::NoChange
        );
    }

    #[test]
    fn a_migration_preview_the_history_refuses_exits_3_naming_the_versions() {
        let p = migration_policy("Always");
        let v = of_migrations(&p, &report(serde_json::json!({"modifiedVersions": [1]})));
        assert!(
            matches!(&v, Verdict::Refused { reason: Reason::HistoryModified, message } if message.contains("version(s) 1 "))
        );
        let v = of_migrations(&p, &report(serde_json::json!({"aheadVersions": [7]})));
        assert!(
            matches!(&v, Verdict::Refused { reason: Reason::HistoryAhead, message } if message.contains('7'))
        );
        let v = of_migrations(
            &p,
            &report(
                serde_json::json!({"currentVersion": 5, "pending": [{"version": 4, "checksum": "c"}]}),
            ),
        );
        assert!(
            matches!(&v, Verdict::Refused { reason: Reason::HistoryOutOfOrder, message } if message.contains("version 5"))
        );
        let v = of_migrations(
            &p,
            &report(
                serde_json::json!({"dirtyRevision": {"version": 1, "direction": "Up", "state": "dirty"}}),
            ),
        );
        assert!(matches!(
            v,
            Verdict::Refused {
                reason: Reason::HistoryDirty,
                ..
            }
        ));
    }
}
