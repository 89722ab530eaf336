//! The realm census, pure: which database a resource claims (its coordination
//! digest) and whether the other claimants and the PtahRealms admit it. The
//! controller lists every PtahSchema, PtahMigration and PtahRealm, turns the
//! resources into [`Claimant`]s and steps the lifecycle with the
//! [`verdict`]: `RealmConflict` when two resources claim one database and not
//! every claimant sets `sharedRealm` (or the realm is `Exclusive`),
//! `RealmNotAuthorized` when the PtahRealm does not admit the resource.

use kube::ResourceExt;

use crate::api::common::Target;
use crate::api::migration::PtahMigration;
use crate::api::realm::{PtahRealm, RealmSharing};
use crate::api::schema::PtahSchema;

// The verdict is shared by both lifecycles that step it.
pub use super::common::RealmVerdict;

// The digest is named with the Job and the Lease it names: one function.
pub use crate::protocol::naming::coordination_digest;
use crate::protocol::naming::engine_identity;

/// One resource claiming a database, as the census counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimant {
    /// `PtahSchema` or `PtahMigration`.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID: the same name recreated is another claimant.
    pub uid: String,
    /// `spec.target.engine` as written.
    pub engine: String,
    /// The database it claims ([`coordination_digest`]).
    pub coordination_digest: String,
    /// The PtahRealm it names (`spec.target.realmRef`), if any.
    pub realm: Option<String>,
    /// `spec.target.sharedRealm`.
    pub shared_realm: bool,
    /// `spec.target.coordinationKey`, if any.
    pub coordination_key: Option<String>,
}

/// Whether a resource in `namespace` with `target` may claim `me`'s
/// database: the coordination digest's inputs but the engine, compared
/// before any digest is taken. Every resource whose digest is `me`'s passes;
/// the census, which runs on every pass over every resource, hashes only
/// those.
pub fn may_share(me: &Claimant, namespace: Option<&str>, target: &Target) -> bool {
    match (&me.realm, &target.realm_ref, &target.coordination_key) {
        (Some(mine), Some(theirs), None) => *mine == theirs.name,
        (None, None, Some(key)) => {
            me.coordination_key.as_ref() == Some(key) && namespace == Some(me.namespace.as_str())
        }
        _ => false,
    }
}

fn claimant(
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    target: &Target,
) -> Option<Claimant> {
    let namespace = namespace?;
    let uid = uid?;
    let coordination_digest = coordination_digest(&target.engine, &namespace, target)?;
    Some(Claimant {
        kind,
        namespace,
        name,
        uid,
        engine: target.engine.clone(),
        coordination_digest,
        realm: target.realm_ref.as_ref().map(|r| r.name.clone()),
        shared_realm: target.shared_realm,
        coordination_key: target.coordination_key.clone(),
    })
}

/// The claimant a PtahSchema is; `None` when it was not read from the API
/// server (no namespace or UID) or its target names no database.
pub fn claimant_of_schema(s: &PtahSchema) -> Option<Claimant> {
    claimant(
        "PtahSchema",
        s.namespace(),
        s.name_any(),
        s.uid(),
        &s.spec.target,
    )
}

/// The claimant a PtahMigration is; `None` as for [`claimant_of_schema`].
pub fn claimant_of_migration(m: &PtahMigration) -> Option<Claimant> {
    claimant(
        "PtahMigration",
        m.namespace(),
        m.name_any(),
        m.uid(),
        &m.spec.target,
    )
}

/// Whether a realm's engine is the claimant's: compared as the digest binds
/// engines, so `MariaDB` is admitted by a `MySQL` realm.
fn same_engine(a: &str, b: &str) -> bool {
    engine_identity(a) == engine_identity(b)
}

/// The census verdict for `me` among every claimant in the cluster (`me`
/// included or not) and the PtahRealms:
///
/// * `NotAuthorized` when `realmRef` names a realm that does not exist, has
///   another engine, or does not list `me.namespace`;
/// * `Conflict` when another claimant (a different UID) has the same
///   coordination digest and not every claimant of that digest sets
///   `sharedRealm`, or the realm is `Exclusive` and there is more than one
///   claimant;
/// * `Ok` otherwise.
///
/// Resources being deleted are still claimants until they are gone: a
/// deletion waits on an operation that may still be running against the
/// database, so the census must not admit a second claimant early. The
/// caller therefore passes them in `all` like any other.
pub fn verdict(me: &Claimant, all: &[Claimant], realms: &[PtahRealm]) -> RealmVerdict {
    let mut sharing = None;
    if let Some(name) = &me.realm {
        let Some(realm) = realms.iter().find(|r| r.name_any() == *name) else {
            return RealmVerdict::NotAuthorized;
        };
        if !same_engine(&realm.spec.engine, &me.engine)
            || !realm.spec.namespaces.contains(&me.namespace)
        {
            return RealmVerdict::NotAuthorized;
        }
        sharing = Some(realm.spec.sharing);
    }

    // Every other claimant of the same database, each UID once (a list may
    // repeat an object, and may or may not hold `me`). One the realm does not
    // admit still counts: it names the same database.
    let mut others: Vec<&Claimant> = Vec::new();
    for c in all {
        if c.uid != me.uid
            && c.coordination_digest == me.coordination_digest
            && !others.iter().any(|o| o.uid == c.uid)
        {
            others.push(c);
        }
    }
    if others.is_empty() {
        return RealmVerdict::Ok;
    }
    if !me.shared_realm || others.iter().any(|c| !c.shared_realm) {
        return RealmVerdict::Conflict;
    }
    if sharing == Some(RealmSharing::Exclusive) {
        return RealmVerdict::Conflict;
    }
    RealmVerdict::Ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::common::NameRef;
    use crate::api::realm::PtahRealmSpec;

    fn by_key(key: &str) -> Target {
        serde_json::from_value(json!({
            "engine": "PostgreSQL",
            "urlFrom": {"name": "db", "key": "url"},
            "coordinationKey": key,
        }))
        .expect("target")
    }

    fn by_realm(realm: &str) -> Target {
        serde_json::from_value(json!({
            "engine": "MySQL",
            "urlFrom": {"name": "db", "key": "url"},
            "realmRef": {"name": realm},
        }))
        .expect("target")
    }

    /// A claimant as the census sees it, from its target.
    fn claimant_in(namespace: &str, uid: &str, target: &Target) -> Claimant {
        claimant(
            "PtahSchema",
            Some(namespace.into()),
            format!("res-{uid}"),
            Some(uid.into()),
            target,
        )
        .expect("claimant")
    }

    fn shared(mut c: Claimant) -> Claimant {
        c.shared_realm = true;
        c
    }

    fn realm(name: &str, engine: &str, namespaces: &[&str], sharing: RealmSharing) -> PtahRealm {
        PtahRealm::new(
            name,
            PtahRealmSpec {
                engine: engine.into(),
                namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
                sharing,
            },
        )
    }

    #[test]
    fn may_share_passes_every_claimant_of_the_same_digest() {
        let targets = [
            ("orders", by_key("primary")),
            ("orders", by_key("replica")),
            ("billing", by_key("primary")),
            ("orders", by_realm("a")),
            ("billing", by_realm("a")),
            ("orders", by_realm("b")),
        ];
        let mut mysql = by_key("primary");
        mysql.engine = "MySQL".into();
        let mut all: Vec<(&str, Target)> = targets.to_vec();
        all.push(("orders", mysql));
        for (i, (ns, t)) in all.iter().enumerate() {
            let me = claimant_in(ns, &format!("u{i}"), t);
            let mut passed = 0;
            for (j, (other_ns, other)) in all.iter().enumerate() {
                let them = claimant_in(other_ns, &format!("u{j}"), other);
                let shares = may_share(&me, Some(other_ns), other);
                if them.coordination_digest == me.coordination_digest {
                    assert!(shares, "{ns}/{t:?} and {other_ns}/{other:?}");
                }
                passed += usize::from(shares);
            }
            // The filter narrows: never every resource.
            assert!(passed < all.len(), "{ns}/{t:?} passed {passed}");
        }
    }

    #[test]
    fn same_inputs_give_the_same_digest() {
        let a = coordination_digest("PostgreSQL", "orders", &by_key("primary"));
        let b = coordination_digest("PostgreSQL", "orders", &by_key("primary"));
        assert!(a.is_some());
        assert_eq!(a, b);
        let d = a.unwrap_or_default();
        assert!(d.starts_with("sha256:") && d.len() == 7 + 64, "{d}");
    }

    #[test]
    fn engine_aliases_name_one_database() {
        assert_eq!(
            coordination_digest("postgres", "orders", &by_key("primary")),
            coordination_digest("PostgreSQL", "orders", &by_key("primary")),
        );
        assert_eq!(
            coordination_digest("MariaDB", "orders", &by_realm("r")),
            coordination_digest("MySQL", "orders", &by_realm("r")),
        );
    }

    #[test]
    fn each_input_moves_the_digest() {
        let base = coordination_digest("PostgreSQL", "orders", &by_key("primary"));
        for other in [
            coordination_digest("MySQL", "orders", &by_key("primary")),
            coordination_digest("PostgreSQL", "billing", &by_key("primary")),
            coordination_digest("PostgreSQL", "orders", &by_key("replica")),
        ] {
            assert_ne!(base, other);
        }
        assert_ne!(
            coordination_digest("MySQL", "orders", &by_realm("a")),
            coordination_digest("MySQL", "orders", &by_realm("b")),
        );
    }

    #[test]
    fn a_realm_digest_ignores_the_namespace() {
        assert_eq!(
            coordination_digest("MySQL", "orders", &by_realm("shared")),
            coordination_digest("MySQL", "billing", &by_realm("shared")),
        );
    }

    #[test]
    fn key_and_realm_forms_never_collide() {
        // A key spelled like a realm name, in every namespace, is another database.
        for ns in ["orders", "shared", ""] {
            assert_ne!(
                coordination_digest("MySQL", ns, &by_key("shared")),
                coordination_digest("MySQL", ns, &by_realm("shared")),
            );
        }
    }

    #[test]
    fn neither_or_both_forms_give_no_digest() {
        let mut neither = by_key("primary");
        neither.coordination_key = None;
        assert_eq!(coordination_digest("PostgreSQL", "orders", &neither), None);
        let mut both = by_key("primary");
        both.realm_ref = Some(NameRef { name: "r".into() });
        assert_eq!(coordination_digest("PostgreSQL", "orders", &both), None);
    }

    fn schema_json(uid: Option<&str>, target: serde_json::Value) -> serde_json::Value {
        let mut metadata = json!({"name": "orders", "namespace": "orders"});
        if let Some(uid) = uid {
            metadata["uid"] = json!(uid);
        }
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahSchema",
            "metadata": metadata,
            "spec": {
                "target": target,
                "source": {"configMap": {"name": "schema", "keys": ["schema.sql"]}},
            },
        })
    }

    #[test]
    fn a_schema_is_a_claimant_of_its_target() {
        let target = json!({
            "engine": "MySQL",
            "urlFrom": {"name": "db", "key": "url"},
            "realmRef": {"name": "shared"},
            "sharedRealm": true,
        });
        let s: PtahSchema =
            serde_json::from_value(schema_json(Some("u1"), target)).expect("schema");
        let c = claimant_of_schema(&s).expect("claimant");
        assert_eq!(c.kind, "PtahSchema");
        assert_eq!(
            (c.namespace.as_str(), c.name.as_str(), c.uid.as_str()),
            ("orders", "orders", "u1")
        );
        assert_eq!(c.engine, "MySQL");
        assert_eq!(c.realm.as_deref(), Some("shared"));
        assert!(c.shared_realm);
        assert_eq!(
            Some(c.coordination_digest),
            coordination_digest("MySQL", "orders", &s.spec.target)
        );
    }

    #[test]
    fn a_schema_not_read_from_the_server_is_no_claimant() {
        let target = json!({
            "engine": "PostgreSQL",
            "urlFrom": {"name": "db", "key": "url"},
            "coordinationKey": "primary",
        });
        let s: PtahSchema = serde_json::from_value(schema_json(None, target)).expect("schema");
        assert_eq!(claimant_of_schema(&s), None);
    }

    #[test]
    fn a_migration_is_a_claimant_of_its_target() {
        let m: PtahMigration = serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahMigration",
            "metadata": {"name": "ledger", "namespace": "billing", "uid": "u2"},
            "spec": {
                "target": {
                    "engine": "PostgreSQL",
                    "urlFrom": {"name": "db", "key": "url"},
                    "coordinationKey": "primary",
                },
                "source": {"configMap": {"name": "migrations", "keys": ["1_init.sql"]}},
            },
        }))
        .expect("migration");
        let c = claimant_of_migration(&m).expect("claimant");
        assert_eq!(c.kind, "PtahMigration");
        assert_eq!(
            (c.namespace.as_str(), c.name.as_str(), c.uid.as_str()),
            ("billing", "ledger", "u2")
        );
        assert_eq!(c.realm, None);
        assert!(!c.shared_realm);
        assert_eq!(
            Some(c.coordination_digest),
            coordination_digest("PostgreSQL", "billing", &m.spec.target)
        );
    }

    #[test]
    fn a_lone_claimant_is_ok() {
        let me = claimant_in("orders", "a", &by_key("primary"));
        assert_eq!(
            verdict(&me, std::slice::from_ref(&me), &[]),
            RealmVerdict::Ok
        );
        assert_eq!(verdict(&me, &[], &[]), RealmVerdict::Ok);
    }

    #[test]
    fn the_same_object_listed_twice_is_one_claimant() {
        let me = claimant_in("orders", "a", &by_key("primary"));
        assert_eq!(
            verdict(&me, &[me.clone(), me.clone()], &[]),
            RealmVerdict::Ok
        );
    }

    #[test]
    fn two_claimants_without_shared_realm_conflict() {
        let me = claimant_in("orders", "a", &by_key("primary"));
        let other = claimant_in("orders", "b", &by_key("primary"));
        assert_eq!(
            verdict(&me, &[me.clone(), other.clone()], &[]),
            RealmVerdict::Conflict
        );
        assert_eq!(
            verdict(&other, &[me, other.clone()], &[]),
            RealmVerdict::Conflict
        );
    }

    #[test]
    fn shared_on_both_is_ok() {
        let me = shared(claimant_in("orders", "a", &by_key("primary")));
        let other = shared(claimant_in("orders", "b", &by_key("primary")));
        assert_eq!(verdict(&me, &[me.clone(), other], &[]), RealmVerdict::Ok);
    }

    #[test]
    fn shared_on_one_only_conflicts() {
        let me = shared(claimant_in("orders", "a", &by_key("primary")));
        let other = claimant_in("orders", "b", &by_key("primary"));
        // Both sides are refused: the one that shares and the one that does not.
        assert_eq!(
            verdict(&me, &[me.clone(), other.clone()], &[]),
            RealmVerdict::Conflict
        );
        assert_eq!(
            verdict(&other, &[me, other.clone()], &[]),
            RealmVerdict::Conflict
        );
    }

    #[test]
    fn shared_on_all_but_one_of_three_conflicts() {
        let a = shared(claimant_in("orders", "a", &by_key("primary")));
        let b = shared(claimant_in("orders", "b", &by_key("primary")));
        let c = claimant_in("orders", "c", &by_key("primary"));
        assert_eq!(verdict(&a, &[a.clone(), b, c], &[]), RealmVerdict::Conflict);
    }

    #[test]
    fn another_database_is_no_conflict() {
        let me = claimant_in("orders", "a", &by_key("primary"));
        let other_key = claimant_in("orders", "b", &by_key("replica"));
        let other_ns = claimant_in("billing", "c", &by_key("primary"));
        assert_eq!(
            verdict(&me, &[me.clone(), other_key, other_ns], &[]),
            RealmVerdict::Ok
        );
    }

    #[test]
    fn a_claimant_being_deleted_still_conflicts() {
        // The census has no notion of deletion: a claimant listed is a claimant.
        let me = claimant_in("orders", "a", &by_key("primary"));
        let old = claimant_in("orders", "recreated-uid", &by_key("primary"));
        assert_eq!(
            verdict(&me, &[old, me.clone()], &[]),
            RealmVerdict::Conflict
        );
    }

    #[test]
    fn missing_realm_not_authorized() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        assert_eq!(verdict(&me, &[], &[]), RealmVerdict::NotAuthorized);
        let others = [realm("other", "MySQL", &["orders"], RealmSharing::Shared)];
        assert_eq!(verdict(&me, &[], &others), RealmVerdict::NotAuthorized);
    }

    #[test]
    fn realm_of_another_engine_not_authorized() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        let realms = [realm(
            "shared",
            "PostgreSQL",
            &["orders"],
            RealmSharing::Shared,
        )];
        assert_eq!(verdict(&me, &[], &realms), RealmVerdict::NotAuthorized);
    }

    #[test]
    fn realm_engine_alias_is_authorized() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        let realms = [realm(
            "shared",
            "MariaDB",
            &["orders"],
            RealmSharing::Exclusive,
        )];
        assert_eq!(verdict(&me, &[], &realms), RealmVerdict::Ok);
    }

    #[test]
    fn realm_not_listing_namespace_not_authorized() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        let realms = [realm("shared", "MySQL", &["billing"], RealmSharing::Shared)];
        assert_eq!(verdict(&me, &[], &realms), RealmVerdict::NotAuthorized);
    }

    #[test]
    fn not_authorized_wins_over_conflict() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        let other = claimant_in("billing", "b", &by_realm("shared"));
        let realms = [realm(
            "shared",
            "MySQL",
            &["billing"],
            RealmSharing::Exclusive,
        )];
        assert_eq!(
            verdict(&me, &[me.clone(), other], &realms),
            RealmVerdict::NotAuthorized
        );
    }

    #[test]
    fn exclusive_realm_single_claimant_is_ok() {
        let me = claimant_in("orders", "a", &by_realm("shared"));
        let realms = [realm(
            "shared",
            "MySQL",
            &["orders"],
            RealmSharing::Exclusive,
        )];
        assert_eq!(
            verdict(&me, std::slice::from_ref(&me), &realms),
            RealmVerdict::Ok
        );
    }

    #[test]
    fn exclusive_realm_second_claimant_conflicts() {
        // Even when both set sharedRealm: Exclusive admits one claimant.
        let me = shared(claimant_in("orders", "a", &by_realm("shared")));
        let other = shared(claimant_in("billing", "b", &by_realm("shared")));
        let realms = [realm(
            "shared",
            "MySQL",
            &["orders", "billing"],
            RealmSharing::Exclusive,
        )];
        assert_eq!(
            verdict(&me, &[me.clone(), other.clone()], &realms),
            RealmVerdict::Conflict
        );
        assert_eq!(
            verdict(&other, &[me, other.clone()], &realms),
            RealmVerdict::Conflict
        );
    }

    #[test]
    fn shared_realm_across_namespaces_shared_on_both_is_ok() {
        let me = shared(claimant_in("orders", "a", &by_realm("shared")));
        let other = shared(claimant_in("billing", "b", &by_realm("shared")));
        let realms = [realm(
            "shared",
            "MySQL",
            &["orders", "billing"],
            RealmSharing::Shared,
        )];
        assert_eq!(
            verdict(&me, &[me.clone(), other], &realms),
            RealmVerdict::Ok
        );
    }

    #[test]
    fn shared_realm_claimant_without_shared_realm_conflicts() {
        let me = shared(claimant_in("orders", "a", &by_realm("shared")));
        let other = claimant_in("billing", "b", &by_realm("shared"));
        let realms = [realm(
            "shared",
            "MySQL",
            &["orders", "billing"],
            RealmSharing::Shared,
        )];
        assert_eq!(
            verdict(&me, &[me.clone(), other], &realms),
            RealmVerdict::Conflict
        );
    }
}
