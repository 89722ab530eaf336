//! PtahRealm: an administrator's grant of one physical database to a list of
//! namespaces, so resources in several namespaces coordinate on it.

#![allow(
    clippy::duplicated_attributes,
    reason = "each printcolumn(...) of the kube derive repeats type_ = \"string\" by design"
)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::pattern;

/// How soon an undispatched claim asks again for a realm Lease it found held.
/// Only a fallback: the Lease watch wakes the oldest waiter the moment its
/// Lease is free, so asking every 5 s (as before the queue) only cost
/// requests and turns (at 1,000 schemas, 6.9 Lease reads a schema an
/// interval). Here, below both, so the lifecycle and the Lease queue name
/// one figure.
pub const LEASE_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a realm admits one claimant or several.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RealmSharing {
    /// One claimant; a second claimant anywhere refuses every claimant.
    #[default]
    Exclusive,
    /// Several claimants, each with `spec.target.sharedRealm`.
    Shared,
}

/// A grant of one physical database to a list of namespaces.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahRealm",
    plural = "ptahrealms",
    derive = "PartialEq",
    shortname = "ptahr",
    category = "ptah",
    doc = "PtahRealm (cluster-scoped, written by an administrator) grants the listed namespaces one physical database, so PtahSchema and PtahMigration resources in several namespaces coordinate on it through spec.target.realmRef. The manager only reads it.",
    printcolumn(name = "Engine", type_ = "string", json_path = ".spec.engine"),
    printcolumn(name = "Sharing", type_ = "string", json_path = ".spec.sharing"),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PtahRealmSpec {
    /// Database engine of the realm; a resource of another engine is refused
    /// (`RealmNotAuthorized`). Immutable: another engine is another realm.
    #[schemars(length(min = 1, max = 63), regex(pattern = pattern::ENGINE))]
    #[x_kube(validation = Rule::new("self == oldSelf")
        .message("spec.engine of a PtahRealm is immutable: create another realm for another engine"))]
    pub engine: String,
    /// The namespaces granted the database, listed explicitly (1 to 256). A
    /// resource elsewhere is refused with `RealmNotAuthorized`.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 63), regex(pattern = pattern::DNS_LABEL)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,
    /// `Exclusive` (one claimant) or `Shared` (several, each with
    /// `spec.target.sharedRealm`).
    #[serde(default)]
    pub sharing: RealmSharing,
}
