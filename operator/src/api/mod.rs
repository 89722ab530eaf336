//! The API: every kind of group `operator.ptah.run`, version `v1alpha1`, as
//! Rust types. These types are the single source of truth: the CRDs in
//! `charts/ptah-operator/crds/` and the field reference `docs/api.md` are
//! generated from them (`cargo run -p ptah-operator --bin crdgen`), and a test
//! fails when either is stale.
//!
//! Where each kind sits in the six stages: `spec.source` of [`PtahSchema`] and
//! [`PtahMigration`] is stage 1; [`PtahSchemaPlan`] (with
//! [`PtahSchemaPlanChunk`]) and [`PtahMigrationPlan`] are stage 2; the
//! approvals and [`PtahMigrationRunAcknowledgment`] are stage 3; the claim,
//! proof and run records in status are stages 4 and 5; the journal is stage 6.
//! [`PtahRealm`] lets several namespaces coordinate on one database.

pub mod annotations;
pub mod approval;
pub mod common;
pub mod condition;
pub mod conditions;
pub mod generate;
pub mod journal;
pub mod migration;
pub mod plan;
pub mod readiness;
pub mod realm;
pub mod schema;
pub mod source;
pub mod status;
pub mod trace;

pub use approval::{
    AcknowledgmentStatus, ApprovalStatus, PtahMigrationApproval, PtahMigrationApprovalSpec,
    PtahMigrationRunAcknowledgment, PtahMigrationRunAcknowledgmentSpec, PtahSchemaApproval,
    PtahSchemaApprovalSpec,
};
pub use migration::{PtahMigration, PtahMigrationSpec, PtahMigrationStatus};
pub use plan::{
    PtahMigrationPlan, PtahMigrationPlanSpec, PtahMigrationPlanStatus, PtahSchemaPlan,
    PtahSchemaPlanChunk, PtahSchemaPlanChunkSpec, PtahSchemaPlanSpec, PtahSchemaPlanStatus,
};
pub use realm::{PtahRealm, PtahRealmSpec};
pub use schema::{PtahSchema, PtahSchemaSpec, PtahSchemaStatus};

/// The API group.
pub const GROUP: &str = "operator.ptah.run";
/// The only API version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kind.
pub const API_VERSION: &str = "operator.ptah.run/v1alpha1";
/// The category every kind carries: `kubectl get ptah` lists them all.
pub const CATEGORY: &str = "ptah";
