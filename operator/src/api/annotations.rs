//! Annotation, label and finalizer names of the API. A name is an interface:
//! people, GitOps tools and restores write and read these exact strings.

/// An RFC 3339 instant asking a PtahSchema or PtahMigration for a read now.
/// Answered once no operation runs; recorded in `status.lastReadRequest`.
pub const READ_REQUESTED_AT: &str = "operator.ptah.run/read-requested-at";

/// A read request value longer than this many bytes is recorded as
/// `sha256:<hex>` of it.
pub const READ_REQUEST_MAX_BYTES: usize = 64;

/// Set by a person on a PtahSchema Blocked with `TargetIdentityChanged` to
/// settle the proof whose target moved. Its value names the Apply claim
/// (`status.pendingObservation.applyOperationID`) being given up.
pub const SETTLED_APPLY: &str = "operator.ptah.run/settled-apply";

/// The manager's JSON copy of a PtahMigration's `status.unresolvedRun`,
/// written before the status and removed after it, so a restore that drops
/// status still holds the resource.
pub const UNRESOLVED_RUN: &str = "operator.ptah.run/unresolved-run";

/// Finalizer of a PtahSchema while an operation may still be in flight.
pub const SCHEMA_FINALIZER: &str = "operator.ptah.run/active-operation";

/// Finalizer of a PtahMigration while a run may still be in flight.
pub const MIGRATION_FINALIZER: &str = "operator.ptah.run/migration-operation";

/// Label on a PtahSchemaPlanChunk naming its plan.
pub const PLAN_LABEL: &str = "operator.ptah.run/plan";

/// Label on plans and chunks naming their PtahSchema.
pub const SCHEMA_LABEL: &str = "operator.ptah.run/schema";

/// Label on migration plans naming their PtahMigration.
pub const MIGRATION_LABEL: &str = "operator.ptah.run/migration";
