//! Readiness for applications: whether a `PtahSchema` is `InSync` (at a
//! given content digest) or a `PtahMigration`'s database has reached a
//! version, read from status alone. `ptah-runner await` (an init container)
//! and `kubectl ptah wait --for=version=N` both decide with [`schema`] and
//! [`migration`], so a script and a Pod see the same answer and the same
//! sentence about what they wait on.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::condition::{
    Condition, MigrationConditionType, MigrationPhase, SchemaConditionType, SchemaPhase,
};
use super::conditions;
use super::{PtahMigration, PtahSchema};

/// What the resource says about what is waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// It holds; the sentence says what was seen.
    Ready(String),
    /// Not yet; the sentence names the phase, the reason and, while a plan
    /// waits for one, the approval and the command that gives it.
    Waiting(String),
    /// `Blocked` or `Failed`: it will not hold without a person. A script
    /// stops here; an init container keeps waiting and says so.
    Ended(String),
}

impl Readiness {
    /// The sentence, whichever the state.
    pub fn sentence(&self) -> &str {
        match self {
            Readiness::Ready(s) | Readiness::Waiting(s) | Readiness::Ended(s) => s,
        }
    }
}

/// What is waited for, as `--for` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// `InSync`, for the current generation.
    InSync,
    /// `digest=sha256:…`: a `PtahSchema` `InSync` at that content digest.
    ContentDigest(String),
    /// `version=N`: a `PtahMigration` whose database is at version N or later.
    Version(i64),
}

impl FromStr for Wanted {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "InSync" {
            return Ok(Wanted::InSync);
        }
        if let Some(v) = s.strip_prefix("version=") {
            return match v.parse::<i64>() {
                Ok(n) if n >= 0 => Ok(Wanted::Version(n)),
                _ => Err(format!(
                    "version={v:?} is not a migration version: a whole number such as version=3"
                )),
            };
        }
        if let Some(d) = s.strip_prefix("digest=") {
            let hex = d.strip_prefix("sha256:").unwrap_or_default();
            return if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                Ok(Wanted::ContentDigest(d.to_string()))
            } else {
                Err(format!(
                    "digest={d:?} is not a content digest: sha256: and 64 lowercase hex digits"
                ))
            };
        }
        Err(format!(
            "{s:?} is not InSync, version=N (a PtahMigration) or digest=sha256:… (a PtahSchema)"
        ))
    }
}

impl fmt::Display for Wanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wanted::InSync => f.write_str("InSync"),
            Wanted::ContentDigest(d) => write!(f, "digest={d}"),
            Wanted::Version(n) => write!(f, "version={n}"),
        }
    }
}

/// Whether `wanted` can be asked of a schema (`true`) or a migration.
pub fn refusal(wanted: &Wanted, schema: bool) -> Option<String> {
    match (wanted, schema) {
        (Wanted::Version(_), true) => Some(
            "--for=version=N is for a PtahMigration; wait for a PtahSchema with --for=InSync or --for=digest=sha256:…".into(),
        ),
        (Wanted::ContentDigest(_), false) => Some(
            "--for=digest=… is for a PtahSchema; wait for a PtahMigration with --for=version=N or --for=InSync".into(),
        ),
        _ => None,
    }
}

fn spelled<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// `schema/orders -n app`, as `kubectl ptah` names it.
fn named(kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{kind}/{} -n {}",
        meta.name.as_deref().unwrap_or_default(),
        meta.namespace.as_deref().unwrap_or_default()
    )
}

/// Whether status speaks for the current generation (`(observed,
/// generation)`), and where the resource is: `it is AwaitingApproval
/// (AwaitingApproval): …`, with the way out while plan `awaiting` waits for
/// an approval.
fn now<T: PartialEq + Copy, P: Serialize>(
    who: &str,
    (observed, generation): (Option<i64>, Option<i64>),
    conds: &[Condition<T>],
    ready: T,
    phase: Option<&P>,
    awaiting: Option<&str>,
) -> (bool, String) {
    let current = observed.is_some() && observed == generation;
    let mut s = format!(
        "it is {}",
        phase.map_or_else(|| "not yet read by the operator".into(), spelled)
    );
    let mut said = String::new();
    if let Some((reason, message)) =
        conditions::get(conds, ready).map(|c| (spelled(&c.reason), c.message.clone()))
    {
        s.push_str(&format!(" ({reason})"));
        if !message.is_empty() {
            s.push_str(&format!(": {message}"));
        }
        said = message;
    }
    if let Some(plan) = awaiting {
        if !said.contains(plan) {
            s.push_str(&format!("; plan {plan} waits for an approval"));
        }
        s.push_str(&format!("; approve it with: kubectl ptah approve {who}"));
    }
    (current, s)
}

/// A `PtahSchema` is ready when its status speaks for the current
/// generation, it is `InSync`, and (when one is asked for) its source's
/// content digest is `content_digest`.
pub fn schema(s: &PtahSchema, content_digest: Option<&str>) -> Readiness {
    let who = named("schema", &s.metadata);
    let Some(st) = s.status.as_ref() else {
        return Readiness::Waiting(format!("{who} has no status yet"));
    };
    let digest = st.source.as_ref().map(|src| src.content_digest.as_str());
    let (current, here) = now(
        &who,
        (st.observed_generation, s.metadata.generation),
        &st.conditions,
        SchemaConditionType::Ready,
        st.phase.as_ref(),
        (st.phase == Some(SchemaPhase::AwaitingApproval))
            .then(|| st.plan.as_ref().map(|p| p.name.as_str()))
            .flatten(),
    );
    let wanted = match content_digest {
        Some(d) => format!("InSync at {d}"),
        None => "InSync".into(),
    };
    if !current {
        return Readiness::Waiting(format!(
            "{who}: waits for {wanted}; the operator has not yet read generation {} ({here})",
            s.metadata.generation.unwrap_or_default()
        ));
    }
    match st.phase {
        Some(SchemaPhase::InSync) => match (content_digest, digest) {
            (Some(want), Some(have)) if want != have => {
                Readiness::Waiting(format!("{who}: waits for {wanted}; it is InSync at {have}"))
            }
            (Some(_), None) => Readiness::Waiting(format!(
                "{who}: waits for {wanted}; it is InSync but names no source digest"
            )),
            _ => Readiness::Ready(format!(
                "{who} is InSync at {}",
                digest.unwrap_or("its source")
            )),
        },
        Some(SchemaPhase::Blocked | SchemaPhase::Failed) => {
            Readiness::Ended(format!("{who}: waits for {wanted}; {here}"))
        }
        _ => Readiness::Waiting(format!("{who}: waits for {wanted}; {here}")),
    }
}

/// A `PtahMigration` asked for a version is ready when its status speaks
/// for the current generation and the database's revision table, as last
/// read, is clean and at `version` or later. It need not be `InSync`: a
/// later version waiting for its approval does not hold back an application
/// that needs an earlier one. Asked for no version, it is ready `InSync`.
pub fn migration(m: &PtahMigration, version: Option<i64>) -> Readiness {
    let who = named("migration", &m.metadata);
    let Some(st) = m.status.as_ref() else {
        return Readiness::Waiting(format!("{who} has no status yet"));
    };
    let (current, here) = now(
        &who,
        (st.observed_generation, m.metadata.generation),
        &st.conditions,
        MigrationConditionType::Ready,
        st.phase.as_ref(),
        (st.phase == Some(MigrationPhase::AwaitingApproval))
            .then(|| st.plan.as_ref().map(|p| p.name.as_str()))
            .flatten(),
    );
    let history = st.history.as_ref();
    // Ptah reads an empty revision table as version 0.
    let at = history.and_then(|h| h.current_version).filter(|v| *v > 0);
    let dirty = history.is_some_and(|h| h.dirty);
    let seen = match (history, at) {
        (None, _) => "its history has not been read".to_string(),
        (Some(_), None) => "the database has no version applied".to_string(),
        (Some(_), Some(v)) if dirty => format!("the database is at version {v}, dirty"),
        (Some(_), Some(v)) => format!("the database is at version {v}"),
    };
    let (holds, wanted) = match version {
        Some(n) => (!dirty && at.is_some_and(|v| v >= n), format!("version {n}")),
        None => (st.phase == Some(MigrationPhase::InSync), "InSync".into()),
    };
    if current && holds {
        return Readiness::Ready(match version {
            Some(n) => format!("{who}: {seen} (version {n} or later was asked for)"),
            None => format!("{who} is InSync: {seen}"),
        });
    }
    let line = format!("{who}: waits for {wanted}; {seen}; {here}");
    if !current {
        return Readiness::Waiting(format!(
            "{line}; the operator has not yet read generation {}",
            m.metadata.generation.unwrap_or_default()
        ));
    }
    match st.phase {
        Some(MigrationPhase::Blocked | MigrationPhase::Failed) => Readiness::Ended(line),
        _ => Readiness::Waiting(line),
    }
}

/// [`schema`] or [`migration`] for `wanted`; `None` where `wanted` is not for
/// this kind ([`refusal`] says why).
pub fn of_schema(s: &PtahSchema, wanted: &Wanted) -> Option<Readiness> {
    match wanted {
        Wanted::InSync => Some(schema(s, None)),
        Wanted::ContentDigest(d) => Some(schema(s, Some(d))),
        Wanted::Version(_) => None,
    }
}

/// See [`of_schema`].
pub fn of_migration(m: &PtahMigration, wanted: &Wanted) -> Option<Readiness> {
    match wanted {
        Wanted::InSync => Some(migration(m, None)),
        Wanted::Version(n) => Some(migration(m, Some(*n))),
        Wanted::ContentDigest(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wanted_parses_as_for_spells_it_and_names_what_is_wrong() {
        assert_eq!("InSync".parse(), Ok(Wanted::InSync));
        assert_eq!("version=3".parse(), Ok(Wanted::Version(3)));
        assert_eq!(
            format!("digest={D1}").parse(),
            Ok(Wanted::ContentDigest(D1.into()))
        );
        for (bad, names) in [
            ("version=three", "version=\"three\""),
            ("version=-1", "version=\"-1\""),
            ("digest=sha256:ab", "digest=\"sha256:ab\""),
            ("Ready", "\"Ready\" is not InSync"),
        ] {
            let e = bad.parse::<Wanted>().unwrap_err();
            assert!(e.contains(names), "{bad}: {e}");
        }
        assert_eq!(Wanted::Version(3).to_string(), "version=3");
        assert!(refusal(&Wanted::Version(3), true).is_some());
        assert!(refusal(&Wanted::ContentDigest(D1.into()), false).is_some());
        assert!(refusal(&Wanted::InSync, true).is_none());
        assert!(refusal(&Wanted::InSync, false).is_none());
    }

    /// `orders` in `app` of `kind`, reading the ConfigMap `source`.
    fn object<K: serde::de::DeserializeOwned>(
        kind: &str,
        source: &str,
        generation: i64,
        status: serde_json::Value,
    ) -> K {
        serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": kind,
            "metadata": {"name": "orders", "namespace": "app", "generation": generation},
            "spec": {
                "target": {"engine": "postgres", "urlFrom": {"name": "db", "key": "url"}},
                "source": {"configMap": {"name": source}},
                "interval": "5m",
            },
            "status": status,
        }))
        .expect(kind)
    }

    fn schema_with(generation: i64, status: serde_json::Value) -> PtahSchema {
        object("PtahSchema", "orders-schema", generation, status)
    }

    fn migration_with(generation: i64, status: serde_json::Value) -> PtahMigration {
        object("PtahMigration", "orders-migrations", generation, status)
    }

    fn ready(reason: &str, message: &str) -> serde_json::Value {
        json!([{"type": "Ready", "status": "False", "reason": reason, "message": message,
                "lastTransitionTime": "2026-12-01T00:00:00Z"}])
    }

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn source(digest: &str) -> serde_json::Value {
        json!({"kind": "ConfigMap", "contentDigest": digest, "revision": format!("orders-schema@{digest}")})
    }

    #[test]
    fn a_schema_is_ready_in_sync_at_the_digest_asked_for() {
        let s = schema_with(
            2,
            json!({"observedGeneration": 2, "phase": "InSync", "source": source(D1)}),
        );
        assert!(matches!(schema(&s, None), Readiness::Ready(_)));
        assert!(matches!(schema(&s, Some(D1)), Readiness::Ready(_)));
        let Readiness::Waiting(w) = schema(&s, Some(D2)) else {
            panic!("another digest is not ready");
        };
        assert!(w.contains(&format!("it is InSync at {D1}")), "{w}");
    }

    #[test]
    fn a_schema_of_an_older_generation_is_not_ready() {
        let s = schema_with(
            3,
            json!({"observedGeneration": 2, "phase": "InSync", "source": source(D1)}),
        );
        let Readiness::Waiting(w) = schema(&s, None) else {
            panic!("status of generation 2 does not speak for 3");
        };
        assert!(w.contains("not yet read generation 3"), "{w}");
        let none = schema_with(1, serde_json::Value::Null);
        assert!(matches!(schema(&none, None), Readiness::Waiting(_)));
    }

    #[test]
    fn a_schema_awaiting_approval_names_the_plan_and_the_command() {
        let s = schema_with(
            1,
            json!({
                "observedGeneration": 1, "phase": "AwaitingApproval", "source": source(D1),
                "conditions": ready("AwaitingApproval", "plan orders-7f waits for an approval"),
                "plan": {"name": "orders-7f", "uid": "u", "fingerprint": D2, "approvalRequired": true},
            }),
        );
        let Readiness::Waiting(w) = schema(&s, None) else {
            panic!("awaiting approval is waiting");
        };
        assert_eq!(
            w,
            "schema/orders -n app: waits for InSync; it is AwaitingApproval (AwaitingApproval): \
             plan orders-7f waits for an approval; approve it with: \
             kubectl ptah approve schema/orders -n app"
        );
    }

    #[test]
    fn a_blocked_or_failed_schema_has_ended() {
        for phase in ["Blocked", "Failed"] {
            let s = schema_with(
                1,
                json!({"observedGeneration": 1, "phase": phase,
                       "conditions": ready("DestructiveChangesDisabled", "plan p drops table t")}),
            );
            let Readiness::Ended(e) = schema(&s, None) else {
                panic!("{phase} ends the wait");
            };
            assert!(
                e.contains("(DestructiveChangesDisabled): plan p drops table t"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_migration_is_ready_at_the_version_or_later_even_while_a_later_one_waits() {
        let m = |at: i64, phase: &str| {
            migration_with(
                1,
                json!({"observedGeneration": 1, "phase": phase,
                       "history": {"currentVersion": at, "dirty": false}}),
            )
        };
        assert!(matches!(
            migration(&m(3, "InSync"), Some(3)),
            Readiness::Ready(_)
        ));
        assert!(matches!(
            migration(&m(4, "InSync"), Some(3)),
            Readiness::Ready(_)
        ));
        assert!(matches!(
            migration(&m(3, "AwaitingApproval"), Some(2)),
            Readiness::Ready(_)
        ));
        // Asked for InSync, a later plan awaiting approval is not ready.
        assert!(matches!(
            migration(&m(3, "AwaitingApproval"), None),
            Readiness::Waiting(_)
        ));
        assert!(matches!(
            migration(&m(3, "InSync"), None),
            Readiness::Ready(_)
        ));
        let Readiness::Waiting(w) = migration(&m(2, "Applying"), Some(3)) else {
            panic!("version 2 is not 3");
        };
        assert!(
            w.starts_with("migration/orders -n app: waits for version 3; the database is at version 2; it is Applying"),
            "{w}"
        );
    }

    #[test]
    fn a_migration_without_history_dirty_or_stale_is_not_ready() {
        let fresh = migration_with(1, json!({"observedGeneration": 1, "phase": "Reading"}));
        let Readiness::Waiting(w) = migration(&fresh, Some(1)) else {
            panic!("no history read");
        };
        assert!(w.contains("its history has not been read"), "{w}");
        let empty = migration_with(
            1,
            json!({"observedGeneration": 1, "phase": "Planning", "history": {"pendingCount": 2}}),
        );
        let Readiness::Waiting(w) = migration(&empty, Some(1)) else {
            panic!("nothing applied");
        };
        assert!(w.contains("the database has no version applied"), "{w}");
        let dirty = migration_with(
            1,
            json!({"observedGeneration": 1, "phase": "Blocked",
                   "conditions": ready("HistoryDirty", "version 3 is dirty"),
                   "history": {"currentVersion": 3, "dirty": true}}),
        );
        let Readiness::Ended(e) = migration(&dirty, Some(3)) else {
            panic!("a dirty history is not ready, and Blocked ends");
        };
        assert!(
            e.contains("at version 3, dirty") && e.contains("(HistoryDirty)"),
            "{e}"
        );
        let stale = migration_with(
            2,
            json!({"observedGeneration": 1, "phase": "InSync", "history": {"currentVersion": 5}}),
        );
        assert!(matches!(migration(&stale, Some(1)), Readiness::Waiting(_)));
    }

    #[test]
    fn a_migration_awaiting_approval_names_the_plan_and_the_command() {
        let m = migration_with(
            1,
            json!({"observedGeneration": 1, "phase": "AwaitingApproval",
                   "conditions": ready("AwaitingApproval", ""),
                   "history": {"pendingCount": 2},
                   "plan": {"name": "orders-2", "uid": "u", "fingerprint": D1, "approvalRequired": true}}),
        );
        let Readiness::Waiting(w) = migration(&m, Some(1)) else {
            panic!("awaiting approval");
        };
        assert!(
            w.ends_with(
                "it is AwaitingApproval (AwaitingApproval); plan orders-2 waits for an approval; \
                 approve it with: kubectl ptah approve migration/orders -n app"
            ),
            "{w}"
        );
    }
}
