//! The operator as the lifecycle tests run it: a real manager for the test's
//! namespace with its own admission webhooks registered there, so that
//! approvals and acknowledgments are stamped and checked as a person's
//! would be; and creating such an object while the webhooks start answering.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::admission::{Configurations, Webhooks};
use super::manager::{Manager, ManagerSpec, free_port};
use super::namespace::{Stored, TestNamespace};
use super::wait::Patience;

/// Six Jobs one after the other, each run by the process kubelet.
pub const PATIENCE: Patience = Patience::new(Duration::from_secs(240), Duration::from_millis(250));

/// A manager with its admission webhooks registered for the namespace.
pub struct Operator {
    manager: Manager,
    _webhooks: Webhooks,
}

impl Operator {
    /// Starts the manager for `ns` and registers `configurations` (the
    /// operator's `admission::webhook_configurations`) pointing at it.
    pub async fn start(ns: &TestNamespace, configurations: Configurations) -> anyhow::Result<Self> {
        Self::start_on(ns, configurations, free_port()?).await
    }

    /// [`Operator::start`] with the receiver on `port`: a manager started
    /// again where one was stopped keeps its address, as a Service does.
    pub async fn start_on(
        ns: &TestNamespace,
        configurations: Configurations,
        port: u16,
    ) -> anyhow::Result<Self> {
        let spec = ManagerSpec {
            port: Some(port),
            ..Default::default()
        };
        let manager = Manager::start(ns, &spec)?;
        let webhooks = Webhooks::of_manager(ns, configurations, port, manager.tls_dir()).await?;
        Ok(Operator {
            manager,
            _webhooks: webhooks,
        })
    }

    /// The manager's log so far.
    pub fn log(&self) -> String {
        self.manager.log()
    }

    /// The manager.
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// Waits until the object `name` is what `done` says, with the
    /// manager's log when it never is.
    pub async fn until<K>(
        &self,
        ns: &TestNamespace,
        name: &str,
        what: &str,
        done: impl Fn(&K) -> bool,
    ) -> anyhow::Result<K>
    where
        K: Stored,
    {
        ns.until(&PATIENCE, name, what, done)
            .await
            .with_context(|| self.log())
    }

    /// Deletes the objects of kind `K` while the manager runs (its
    /// finalizers need it), then stops it.
    pub async fn finish<K>(self, ns: &TestNamespace) -> anyhow::Result<()>
    where
        K: Stored,
    {
        ns.delete_all::<K>(&PATIENCE).await?;
        drop(self);
        Ok(())
    }
}

/// Creates `value`, waiting while the webhooks are not answering yet (the
/// API server calls them from their registration on, and the manager
/// serves them from its start).
pub async fn create_admitted<K>(ns: &TestNamespace, value: serde_json::Value) -> anyhow::Result<K>
where
    K: Stored + Serialize,
{
    PATIENCE
        .poll("the object to be admitted", || {
            try_create_admitted(ns, value.clone())
        })
        .await
}

/// One try of [`create_admitted`]: `None` while no manager serves the
/// webhooks (a caller that restarts a stopped manager tries again after).
pub async fn try_create_admitted<K>(
    ns: &TestNamespace,
    value: serde_json::Value,
) -> anyhow::Result<Option<K>>
where
    K: Stored + Serialize,
{
    let obj: K = serde_json::from_value(value)?;
    match ns.api::<K>().create(&Default::default(), &obj).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(e)) if e.message.contains("failed calling webhook") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Approves the plan `s` awaits (`status.plan`, by UID and fingerprint) as
/// the approval `name`, as a person would.
pub async fn approve_schema(
    ns: &TestNamespace,
    s: &operator::api::PtahSchema,
    name: &str,
) -> anyhow::Result<operator::api::PtahSchemaApproval> {
    create_admitted(ns, schema_approval(s, name)?).await
}

/// The approval `name` of the plan `s` awaits (`status.plan`).
pub fn schema_approval(
    s: &operator::api::PtahSchema,
    name: &str,
) -> anyhow::Result<serde_json::Value> {
    let plan = s.status.as_ref().and_then(|st| st.plan.as_ref());
    let plan = plan.map(|p| (p.name.clone(), p.uid.clone(), p.fingerprint.clone()));
    approval(s, "PtahSchemaApproval", "schemaRef", plan, name)
}

/// Approves the plan `m` awaits as the approval `name`, as a person would.
pub async fn approve_migration(
    ns: &TestNamespace,
    m: &operator::api::PtahMigration,
    name: &str,
) -> anyhow::Result<operator::api::PtahMigrationApproval> {
    create_admitted(ns, migration_approval(m, name)?).await
}

/// The approval `name` of the plan `m` awaits (`status.plan`).
pub fn migration_approval(
    m: &operator::api::PtahMigration,
    name: &str,
) -> anyhow::Result<serde_json::Value> {
    let plan = m.status.as_ref().and_then(|st| st.plan.as_ref());
    let plan = plan.map(|p| (p.name.clone(), p.uid.clone(), p.fingerprint.clone()));
    approval(m, "PtahMigrationApproval", "migrationRef", plan, name)
}

/// An approval of kind `kind` of `plan` (name, UID, fingerprint) of `obj`.
fn approval<O: kube::Resource>(
    obj: &O,
    kind: &str,
    reference: &str,
    plan: Option<(String, String, String)>,
    name: &str,
) -> anyhow::Result<serde_json::Value> {
    use kube::ResourceExt;
    let (plan_name, plan_uid, fingerprint) = plan.context("status.plan")?;
    Ok(serde_json::json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            reference: {"name": obj.name_any(), "uid": obj.uid().unwrap_or_default()},
            "planRef": {"name": plan_name, "uid": plan_uid},
            "planFingerprint": fingerprint,
        }
    }))
}
