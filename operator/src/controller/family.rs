//! What differs between the two families, as the one pass (`pass.rs`)
//! asks it: the machine's step, the family's own observations and effects,
//! its Job input, how its results read, its finalizer and what it owns.
//! Everything else (the loop, write before effect, claims, Leases,
//! dispatch, adoption, cleanup, finalization) is written once, in the pass.
//! `schema.rs` and `migration.rs` hold the two impls.

use std::future::Future;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde::de::DeserializeOwned;

use kube::api::Api;

use super::Context;
use super::Error;
use super::runtime::Requeue;
use crate::api::approval::Approval;
use crate::api::source::Source;
use crate::api::status::OperationType;
use crate::api::status::{ActiveOperation, OperationStatus};
use crate::execution::job::JobInput;
use crate::execution::receiver::StoredResult;
use crate::lifecycle::common::{Seen, Shared};
use crate::lifecycle::realm::Claimant;

/// One pass over one resource.
pub struct Pass<'a, F: Family> {
    /// What every pass shares.
    pub ctx: &'a Context,
    /// The family's API in the resource's namespace.
    pub api: Api<F>,
    /// The resource's namespace.
    pub ns: String,
    /// The resource as last stored, with the status of the last step
    /// (written when an effect needs it stored, and at the end of the pass).
    pub obj: F,
    /// `obj`'s status differs from what is stored in a way worth a write.
    pub(super) unwritten: bool,
    /// When the next pass is due.
    pub requeue: Requeue,
    /// This pass read the outcome of a Job of this operation.
    pub(super) harvested: Option<OperationType>,
    /// This pass published or retired a plan.
    pub plans_moved: bool,
    pub(super) snapshot_taken: bool,
    /// `phase/reason` as last stored: where a change that begins now starts
    /// from.
    pub(super) stored_verdict: String,
}

/// One family of resources the manager converges: PtahSchema or
/// PtahMigration.
pub trait Family:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The spec; its digest (without `suspend`) tells a resume from an edit.
    type Spec: Serialize;
    /// The status.
    type Status: OperationStatus;
    /// The machine's observations.
    type Observation: From<Seen> + Clone + std::fmt::Debug + Send + Sync;
    /// The machine's effects.
    type Effect: Clone + std::fmt::Debug + Send + Sync;
    /// Its approvals of plans.
    type Approval: Approval;

    /// The kind, for logs and errors.
    const KIND: &'static str;
    /// The finalizer it holds while something is in flight.
    const FINALIZER: &'static str;

    /// The spec.
    fn spec(&self) -> &Self::Spec;
    /// The status.
    fn status(&self) -> Option<&Self::Status>;
    /// The status, to edit.
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
    /// `spec.source`.
    fn source(&self) -> &Source;
    /// Its claim on the database realm, if its target names one.
    fn claimant(&self) -> Option<Claimant>;
    /// Whether `spec.target.engine` is one the operator implements.
    fn engine_supported(&self) -> bool;
    /// Steps the machine once: pure.
    fn step(&self, o: &Self::Observation, now: &Time) -> (Self::Status, Vec<Self::Effect>);
    /// The effect in the words both families share, or itself.
    fn shared(e: Self::Effect) -> Result<Shared, Self::Effect>;
    /// Whether the effect may be performed only once its status is stored.
    fn needs_stored_status(e: &Self::Effect) -> bool;
    /// Whether the effect is performed before the status that asks it.
    fn precedes_status(_e: &Self::Effect) -> bool {
        false
    }
    /// The store of its resources.
    fn store(s: &super::Stores) -> &kube::runtime::reflector::Store<Self>;
    /// The store of its approvals.
    fn approvals(s: &super::Stores) -> &kube::runtime::reflector::Store<Self::Approval>;
    /// The label selector of the resource's Jobs.
    fn jobs_of(name: &str) -> String;
    /// The pieces of the spec its Jobs are built from.
    fn job_spec(&self) -> super::job_input::JobSpec<'_>;

    /// Records in status what the machine reads but only the controller
    /// knows, before each step.
    fn prepare(_pass: &mut Pass<'_, Self>) {}
    /// Whether edits of what the source names wait: the resource reads its
    /// source when it starts again anyway.
    fn inputs_wait(&self, st: &Self::Status) -> bool;
    /// Whether a claim not yet dispatched waits for its Lease.
    fn waits_for_lease(c: &ActiveOperation) -> bool;
    /// The operation the claim's Lease is held under.
    fn lease_holder<'s>(_st: &'s Self::Status, c: &'s ActiveOperation) -> &'s str {
        &c.operation_id
    }
    /// The coordination identity status records, for a claim without one.
    fn recorded_coordination(_st: &Self::Status) -> Option<String> {
        None
    }
    /// An Apply follows at once, with no decision to wait for: a Lease
    /// released now is kept for it ahead of the waiters.
    fn apply_follows(_st: &Self::Status) -> bool {
        false
    }
    /// A proof of an Apply is owed (the Apply's Lease is still held for it).
    fn proof_owed(_st: &Self::Status) -> bool {
        false
    }
    /// The plan an approval is awaited for: its UID and fingerprint.
    fn awaiting_approval(st: &Self::Status) -> Option<(String, String)>;
    /// The snapshots status still names.
    fn snapshots_named(st: &Self::Status) -> Vec<String>;
    /// An Apply's Job ended and left no result.
    fn apply_without_result(job: &Job) -> Self::Observation;

    /// A stored result that is not a source read, as the machine reads it.
    fn harvest(
        pass: &mut Pass<'_, Self>,
        c: &ActiveOperation,
        result: StoredResult,
    ) -> impl Future<Output = Result<Self::Observation, Error>> + Send;
    /// The family's own observations of a pass (after the shared ones).
    fn own_observations(
        pass: &mut Pass<'_, Self>,
        st: &Self::Status,
    ) -> impl Future<Output = Result<Vec<Self::Observation>, Error>> + Send;
    /// What the claim's Job is built from.
    fn job_input(
        pass: &mut Pass<'_, Self>,
        c: &ActiveOperation,
    ) -> impl Future<Output = Result<JobInput, String>> + Send;
    /// Performs one of the family's own effects that precede the status.
    fn perform_before(
        _pass: &mut Pass<'_, Self>,
        _e: Self::Effect,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }
    /// Performs one of the family's own effects; answers its follow-ups.
    fn perform_own(
        pass: &mut Pass<'_, Self>,
        e: Self::Effect,
    ) -> impl Future<Output = Result<Vec<Self::Observation>, Error>> + Send;
    /// Deletes the plans status no longer names.
    fn collect_plans(pass: &mut Pass<'_, Self>) -> impl Future<Output = Result<(), Error>> + Send;

    /// Where `st` puts the resource, as its change's trace sees it.
    fn change_at(&self, st: &Self::Status) -> crate::telemetry::change::Where;
    /// `phase/reason` of `st`: the verdict a change starts from or ends on.
    fn verdict(st: &Self::Status) -> String;
    /// The plan `st` names: its name and fingerprint.
    fn plan_named(st: &Self::Status) -> Option<(&str, &str)>;
    /// `status.journal`.
    fn journal(st: &Self::Status) -> &[crate::api::journal::JournalEntry];
}

/// The parts of a [`Family`] impl that read the same for both families: by
/// their field names and their machine's module in `lifecycle`.
macro_rules! family_fields {
    (
        kind: $kind:literal,
        spec: $spec:ty,
        status: $status:ty,
        machine: $machine:ident,
        claimant: $claimant:path,
        approval: $approval:ty,
        finalizer: $finalizer:expr,
        stores: $store:ident,
        approvals_in: $approvals:ident,
        jobs_of: $jobs_of:path,
        awaiting_approval: $awaiting:path,
        ready: $ready:path $(,)?
    ) => {
        type Spec = $spec;
        type Approval = $approval;
        const KIND: &'static str = $kind;
        const FINALIZER: &'static str = $finalizer;
        type Status = $status;
        type Observation = $crate::lifecycle::$machine::Observation;
        type Effect = $crate::lifecycle::$machine::Effect;

        fn spec(&self) -> &$spec {
            &self.spec
        }

        fn status(&self) -> Option<&$status> {
            self.status.as_ref()
        }

        fn status_mut(&mut self) -> &mut Option<$status> {
            &mut self.status
        }

        fn source(&self) -> &$crate::api::source::Source {
            &self.spec.source
        }

        fn claimant(&self) -> Option<$crate::lifecycle::realm::Claimant> {
            $claimant(self)
        }

        fn engine_supported(&self) -> bool {
            $crate::lifecycle::$machine::engine_supported(self)
        }

        fn step(
            &self,
            o: &Self::Observation,
            now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
        ) -> ($status, Vec<Self::Effect>) {
            let stepped = $crate::lifecycle::$machine::step(self, o, now);
            (stepped.status, stepped.effects)
        }

        fn shared(e: Self::Effect) -> Result<$crate::lifecycle::common::Shared, Self::Effect> {
            e.shared()
        }
        fn needs_stored_status(e: &Self::Effect) -> bool {
            e.needs_stored_status()
        }

        fn store(s: &super::Stores) -> &kube::runtime::reflector::Store<Self> {
            &s.$store
        }

        fn approvals(s: &super::Stores) -> &kube::runtime::reflector::Store<$approval> {
            &s.$approvals
        }

        fn jobs_of(name: &str) -> String {
            $jobs_of(name)
        }

        fn job_spec(&self) -> super::job_input::JobSpec<'_> {
            super::job_input::JobSpec {
                target: &self.spec.target,
                source: &self.spec.source,
                execution: &self.spec.execution,
                lock_timeout: &self.spec.policy.lock_timeout,
            }
        }

        fn verdict(st: &$status) -> String {
            let phase = st
                .phase
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "None".into());
            let reason = $crate::api::conditions::get(&st.conditions, $ready)
                .map(|c| format!("{:?}", c.reason))
                .unwrap_or_default();
            format!("{phase}/{reason}")
        }

        fn journal(st: &$status) -> &[$crate::api::journal::JournalEntry] {
            &st.journal
        }

        fn plan_named(st: &$status) -> Option<(&str, &str)> {
            st.plan
                .as_ref()
                .map(|p| (p.name.as_str(), p.fingerprint.as_str()))
        }

        fn awaiting_approval(st: &$status) -> Option<(String, String)> {
            let plan = st.plan.as_ref()?;
            (st.active_operation.is_none() && st.phase == Some($awaiting))
                .then(|| (plan.uid.clone(), plan.fingerprint.clone()))
        }
    };
}
pub(super) use family_fields;

/// The snapshots a status names: the source's and the claim's, and any
/// other binding the family keeps (a proof's).
pub fn named_snapshots<'a>(
    source: Option<&crate::api::source::SourceStatus>,
    bindings: impl IntoIterator<Item = Option<&'a crate::api::status::SourceBinding>>,
) -> Vec<String> {
    source
        .and_then(|s| s.config_map.as_ref())
        .map(|c| c.snapshot_name.clone())
        .into_iter()
        .chain(
            bindings
                .into_iter()
                .flatten()
                .filter_map(|b| b.snapshot_name.clone()),
        )
        .collect()
}
