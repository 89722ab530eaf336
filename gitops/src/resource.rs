//! What a verb names (`schema/orders`, `migration/orders`) and the one
//! object it reads: a PtahSchema or a PtahMigration, seen through the fields
//! every verb needs whichever family it is.

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client};
use operator::api::annotations::READ_REQUESTED_AT;
use operator::api::journal::JournalEntry;
use operator::api::status::ActiveOperation;
use operator::api::{PtahMigration, PtahSchema};
use serde::Serialize;

use crate::Failure;

/// The two families a verb can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    Schema,
    Migration,
}

impl Kind {
    /// The kind as the API spells it.
    pub fn api_kind(self) -> &'static str {
        match self {
            Kind::Schema => "PtahSchema",
            Kind::Migration => "PtahMigration",
        }
    }

    /// The kind's plural, as RBAC and the API paths spell it.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Schema => "ptahschemas",
            Kind::Migration => "ptahmigrations",
        }
    }

    /// The plural of the kind's approvals.
    pub fn approvals_plural(self) -> &'static str {
        match self {
            Kind::Schema => "ptahschemaapprovals",
            Kind::Migration => "ptahmigrationapprovals",
        }
    }

    /// The short word the verbs take: `schema`, `migration`.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Schema => "schema",
            Kind::Migration => "migration",
        }
    }
}

impl FromStr for Kind {
    type Err = Failure;

    fn from_str(s: &str) -> Result<Self, Failure> {
        match s.to_ascii_lowercase().as_str() {
            "schema"
            | "schemas"
            | "ptahschema"
            | "ptahschemas"
            | "ptahschema.operator.ptah.run"
            | "ptahschemas.operator.ptah.run" => Ok(Kind::Schema),
            "migration"
            | "migrations"
            | "ptahmigration"
            | "ptahmigrations"
            | "ptahmigration.operator.ptah.run"
            | "ptahmigrations.operator.ptah.run" => Ok(Kind::Migration),
            _ => Err(Failure::usage(format!(
                "unknown kind {s:?}: use schema (PtahSchema) or migration (PtahMigration)"
            ))),
        }
    }
}

/// `KIND/NAME` as a verb takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

impl FromStr for Target {
    type Err = Failure;

    fn from_str(s: &str) -> Result<Self, Failure> {
        let (kind, name) = s.split_once('/').ok_or_else(|| {
            Failure::usage(format!(
                "{s:?} is not KIND/NAME: name a resource as schema/NAME or migration/NAME"
            ))
        })?;
        let kind = kind.parse()?;
        if name.is_empty() || name.contains('/') {
            return Err(Failure::usage(format!(
                "{s:?} is not KIND/NAME: the name must be one non-empty path segment"
            )));
        }
        Ok(Target {
            kind,
            name: name.to_string(),
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.word(), self.name)
    }
}

/// A condition, whichever family's type it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CondView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub observed_generation: Option<i64>,
}

/// A PtahSchema or a PtahMigration as the API server returned it.
#[derive(Clone, Debug)]
pub enum Resource {
    Schema(Box<PtahSchema>),
    Migration(Box<PtahMigration>),
}

/// A serde enum's spelling (`InSync`, `Applying`), as the API writes it.
pub fn spelled<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// A time as RFC 3339, to the second.
pub fn when(t: &Time) -> String {
    t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Resource {
    pub fn kind(&self) -> Kind {
        match self {
            Resource::Schema(_) => Kind::Schema,
            Resource::Migration(_) => Kind::Migration,
        }
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        match self {
            Resource::Schema(s) => &s.metadata,
            Resource::Migration(m) => &m.metadata,
        }
    }

    pub fn name(&self) -> String {
        self.meta().name.clone().unwrap_or_default()
    }

    pub fn namespace(&self) -> String {
        self.meta().namespace.clone().unwrap_or_default()
    }

    pub fn uid(&self) -> String {
        self.meta().uid.clone().unwrap_or_default()
    }

    pub fn generation(&self) -> Option<i64> {
        self.meta().generation
    }

    pub fn target(&self) -> Target {
        Target {
            kind: self.kind(),
            name: self.name(),
        }
    }

    /// `schema/orders -n application`, as a command line names it.
    pub fn cli_name(&self) -> String {
        format!("{} -n {}", self.target(), self.namespace())
    }

    pub fn phase(&self) -> Option<String> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.phase.as_ref().map(spelled),
            Resource::Migration(m) => m.status.as_ref()?.phase.as_ref().map(spelled),
        }
    }

    pub fn observed_generation(&self) -> Option<i64> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.observed_generation,
            Resource::Migration(m) => m.status.as_ref()?.observed_generation,
        }
    }

    pub fn conditions(&self) -> Vec<CondView> {
        fn view<T: Serialize>(c: &operator::api::condition::Condition<T>) -> CondView {
            CondView {
                type_: spelled(&c.type_),
                status: spelled(&c.status),
                reason: spelled(&c.reason),
                message: c.message.clone(),
                observed_generation: c.observed_generation,
            }
        }
        match self {
            Resource::Schema(s) => s
                .status
                .iter()
                .flat_map(|st| st.conditions.iter().map(view))
                .collect(),
            Resource::Migration(m) => m
                .status
                .iter()
                .flat_map(|st| st.conditions.iter().map(view))
                .collect(),
        }
    }

    pub fn condition(&self, type_: &str) -> Option<CondView> {
        self.conditions().into_iter().find(|c| c.type_ == type_)
    }

    /// The verdict's reason and message: the `Ready` condition's.
    pub fn verdict(&self) -> (String, String) {
        self.condition("Ready")
            .map(|c| (c.reason, c.message))
            .unwrap_or_default()
    }

    /// Whether status speaks for the current generation.
    pub fn observed_current(&self) -> bool {
        self.observed_generation().is_some() && self.observed_generation() == self.generation()
    }

    pub fn active_operation(&self) -> Option<&ActiveOperation> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.active_operation.as_ref(),
            Resource::Migration(m) => m.status.as_ref()?.active_operation.as_ref(),
        }
    }

    pub fn journal(&self) -> &[JournalEntry] {
        match self {
            Resource::Schema(s) => s.status.as_ref().map_or(&[], |st| &st.journal[..]),
            Resource::Migration(m) => m.status.as_ref().map_or(&[], |st| &st.journal[..]),
        }
    }

    /// `status.trace`: the change under way.
    pub fn change_trace(&self) -> Option<&operator::api::trace::ChangeTrace> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.trace.as_ref(),
            Resource::Migration(m) => m.status.as_ref()?.trace.as_ref(),
        }
    }

    pub fn covered_since(&self) -> Option<&Time> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.covered_since.as_ref(),
            Resource::Migration(m) => m.status.as_ref()?.covered_since.as_ref(),
        }
    }

    /// The plan status names: name, UID and fingerprint.
    pub fn plan_ref(&self) -> Option<(String, String, String)> {
        match self {
            Resource::Schema(s) => {
                let p = s.status.as_ref()?.plan.as_ref()?;
                Some((p.name.clone(), p.uid.clone(), p.fingerprint.clone()))
            }
            Resource::Migration(m) => {
                let p = m.status.as_ref()?.plan.as_ref()?;
                Some((p.name.clone(), p.uid.clone(), p.fingerprint.clone()))
            }
        }
    }

    pub fn read_request_annotation(&self) -> Option<String> {
        self.meta()
            .annotations
            .as_ref()?
            .get(READ_REQUESTED_AT)
            .cloned()
    }

    pub fn last_read_request(&self) -> Option<String> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.last_read_request.clone(),
            Resource::Migration(m) => m.status.as_ref()?.last_read_request.clone(),
        }
    }

    /// When the family's read last looked at the database: a schema's
    /// observation, a migration's history read.
    pub fn last_read_at(&self) -> Option<Time> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.target.as_ref()?.last_observed_at.clone(),
            Resource::Migration(m) => m.status.as_ref()?.history.as_ref()?.observed_at.clone(),
        }
    }

    /// The revision in Flux's words (`main@sha1:…`), when a source is pinned.
    pub fn revision(&self) -> Option<String> {
        match self {
            Resource::Schema(s) => s
                .status
                .as_ref()?
                .source
                .as_ref()
                .map(|x| x.revision.clone()),
            Resource::Migration(m) => m
                .status
                .as_ref()?
                .source
                .as_ref()
                .map(|x| x.revision.clone()),
        }
    }

    /// What Verify established of the source now in status (OCI only).
    pub fn verification(&self) -> Option<&operator::api::source::VerificationEvidence> {
        match self {
            Resource::Schema(s) => s.status.as_ref()?.source.as_ref()?.verification.as_ref(),
            Resource::Migration(m) => m.status.as_ref()?.source.as_ref()?.verification.as_ref(),
        }
    }

    /// A migration's unresolved run: its operation ID and outcome, which an
    /// acknowledgment names.
    pub fn unresolved_run(&self) -> Option<(String, String)> {
        match self {
            Resource::Schema(_) => None,
            Resource::Migration(m) => m
                .status
                .as_ref()?
                .unresolved_run
                .as_ref()
                .map(|u| (u.operation_id.clone(), spelled(&u.outcome))),
        }
    }

    /// The OCI reference `spec.source.oci.ociRef` names, if the source is OCI.
    pub fn oci_ref(&self) -> Option<String> {
        match self {
            Resource::Schema(s) => s.spec.source.oci.as_ref().map(|o| o.oci_ref.clone()),
            Resource::Migration(m) => m.spec.source.oci.as_ref().map(|o| o.oci_ref.clone()),
        }
    }

    pub fn managed_fields(
        &self,
    ) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry] {
        self.meta().managed_fields.as_deref().unwrap_or(&[])
    }

    pub fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.meta().labels.clone().unwrap_or_default()
    }

    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.meta().annotations.clone().unwrap_or_default()
    }

    /// Patches the object's main resource (the spec or metadata a person
    /// may write; never status).
    pub async fn patch(
        &self,
        client: &Client,
        pp: &kube::api::PatchParams,
        patch: &kube::api::Patch<serde_json::Value>,
    ) -> Result<(), kube::Error> {
        let (ns, name) = (self.namespace(), self.name());
        match self {
            Resource::Schema(_) => Api::<PtahSchema>::namespaced(client.clone(), &ns)
                .patch(&name, pp, patch)
                .await
                .map(drop),
            Resource::Migration(_) => Api::<PtahMigration>::namespaced(client.clone(), &ns)
                .patch(&name, pp, patch)
                .await
                .map(drop),
        }
    }

    /// The whole object as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Resource::Schema(s) => serde_json::to_value(s),
            Resource::Migration(m) => serde_json::to_value(m),
        }
        .unwrap_or_default()
    }
}

/// Reads the resource `target` names in `namespace`. A missing one is one
/// line that says whether the namespace is missing too.
pub async fn get(client: &Client, namespace: &str, target: &Target) -> Result<Resource, Failure> {
    let found = match target.kind {
        Kind::Schema => Api::<PtahSchema>::namespaced(client.clone(), namespace)
            .get_opt(&target.name)
            .await
            .map(|o| o.map(|s| Resource::Schema(Box::new(s)))),
        Kind::Migration => Api::<PtahMigration>::namespaced(client.clone(), namespace)
            .get_opt(&target.name)
            .await
            .map(|o| o.map(|m| Resource::Migration(Box::new(m)))),
    }
    .map_err(|e| {
        Failure::api(
            format!(
                "reading {} {namespace}/{}",
                target.kind.api_kind(),
                target.name
            ),
            e,
        )
    })?;
    match found {
        Some(r) => Ok(r),
        None => Err(missing(client, namespace, target).await),
    }
}

/// Why `target` is not there: its namespace, or the resource itself.
pub async fn missing(client: &Client, namespace: &str, target: &Target) -> Failure {
    let ns = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await;
    if let Ok(None) = ns {
        return Failure::not_found(format!("namespace {namespace:?} not found"));
    }
    Failure::not_found(format!(
        "{} {:?} not found in namespace {namespace:?}",
        target.kind.api_kind(),
        target.name
    ))
}

/// Every `K` in `namespace` (all namespaces when `None`), as resources.
async fn list_of<K>(
    client: &Client,
    namespace: Option<&str>,
    wrap: fn(K) -> Resource,
) -> Result<Vec<Resource>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(wrap)
        .collect())
}

/// Every resource of `kind` in `namespace` (all namespaces when `None`).
pub async fn list(
    client: &Client,
    kind: Kind,
    namespace: Option<&str>,
) -> Result<Vec<Resource>, kube::Error> {
    match kind {
        Kind::Schema => {
            list_of(client, namespace, |s: PtahSchema| {
                Resource::Schema(Box::new(s))
            })
            .await
        }
        Kind::Migration => {
            list_of(client, namespace, |m: PtahMigration| {
                Resource::Migration(Box::new(m))
            })
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_by_word_and_by_kind() {
        let t: Target = "schema/orders".parse().unwrap();
        assert_eq!((t.kind, t.name.as_str()), (Kind::Schema, "orders"));
        let t: Target = "PtahMigration/orders".parse().unwrap();
        assert_eq!(t.kind, Kind::Migration);
        let t: Target = "ptahschemas.operator.ptah.run/x".parse().unwrap();
        assert_eq!(t.kind, Kind::Schema);
    }

    #[test]
    fn bad_targets_say_what_is_wrong() {
        let e = "orders".parse::<Target>().unwrap_err();
        assert!(e.message.contains("is not KIND/NAME"), "{}", e.message);
        let e = "table/orders".parse::<Target>().unwrap_err();
        assert!(
            e.message.contains("unknown kind \"table\""),
            "{}",
            e.message
        );
        let e = "schema/".parse::<Target>().unwrap_err();
        assert!(e.message.contains("non-empty"), "{}", e.message);
        assert_eq!(e.code, crate::exit::USAGE);
    }
}
