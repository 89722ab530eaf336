//! The names a claim reserves and the Job builder creates under: one
//! function, so the Job a claim names is the Job that is made (the
//! lifecycle reserves the name, `execution::job` builds the Job).

use crate::api::common::{DatabaseEngine, Target};
use crate::api::status::OperationType;

use super::args::command;

/// The largest Job name (it becomes the Pod's `job-name` label value).
pub const MAX_JOB_NAME: usize = 63;

/// The kind of the resource that owns the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// A PtahSchema.
    PtahSchema,
    /// A PtahMigration.
    PtahMigration,
}

impl OwnerKind {
    /// The start of its Jobs' names.
    pub fn name_prefix(self) -> &'static str {
        match self {
            Self::PtahSchema => "ptah-",
            Self::PtahMigration => "ptah-m-",
        }
    }
}

/// The operation's lower-case name, as the label, the Job name and the
/// runner's subcommand spell it.
pub fn operation_name(op: OperationType) -> &'static str {
    match op {
        OperationType::Resolve => command::RESOLVE,
        OperationType::Verify => command::VERIFY,
        OperationType::Observe => command::OBSERVE,
        OperationType::Plan => command::PLAN,
        OperationType::History => command::HISTORY,
        OperationType::Apply => command::APPLY,
    }
}

/// An input a Job name cannot be made from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} {reason}")]
pub struct NameError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: String,
    /// The rule.
    pub reason: &'static str,
}

fn refuse(field: &'static str, value: &str, reason: &'static str) -> NameError {
    NameError {
        field,
        value: value.to_string(),
        reason,
    }
}

/// A DNS-1123 label.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The 64 hex digits of a `sha256:` digest.
pub fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// The first 16 hex digits of an operation ID, as Job names carry them
/// (what there is, for an ID too short or not `sha256:`).
pub fn short_id(operation_id: &str) -> &str {
    let hex = operation_id.strip_prefix("sha256:").unwrap_or(operation_id);
    hex.get(..16).unwrap_or(hex)
}

/// The deterministic Job name of an operation: `ptah-<op>-<resource>-<16
/// hex>` (`ptah-m-` for a PtahMigration), `-<attempt>` after the first,
/// the resource name cut so the whole is at most [`MAX_JOB_NAME`].
pub fn job_name(
    kind: OwnerKind,
    operation: OperationType,
    resource: &str,
    operation_id: &str,
    attempt: i32,
) -> Result<String, NameError> {
    let hex = sha256_hex(operation_id).ok_or_else(|| {
        refuse(
            "claim.operationID",
            operation_id,
            "must be sha256: and 64 lowercase hex digits",
        )
    })?;
    if attempt < 1 {
        return Err(refuse(
            "claim.attempt",
            &attempt.to_string(),
            "must be at least 1",
        ));
    }
    if !is_dns_subdomain(resource) {
        return Err(refuse(
            "metadata.name",
            resource,
            "must be a DNS-1123 subdomain",
        ));
    }
    let prefix = format!("{}{}-", kind.name_prefix(), operation_name(operation));
    let short = short_id(hex);
    let suffix = if attempt == 1 {
        format!("-{short}")
    } else {
        format!("-{short}-{attempt}")
    };
    let room = MAX_JOB_NAME.saturating_sub(prefix.len() + suffix.len());
    let middle: String = resource.replace('.', "-").chars().take(room).collect();
    let middle = middle.trim_end_matches('-');
    let name = format!("{prefix}{middle}{suffix}");
    debug_assert!(name.len() <= MAX_JOB_NAME && is_dns_label(&name));
    Ok(name)
}

/// Separates the parts of a digested identity; no part can hold it (engine,
/// namespace, key and realm name are all restricted by their patterns).
const SEP: &str = "\u{1f}";

/// The engine as bound into a coordination digest: the canonical spelling of
/// an implemented engine (so `postgres` and `PostgreSQL` name one database),
/// otherwise the text in lower case.
pub fn engine_identity(engine: &str) -> String {
    DatabaseEngine::from_spec(engine)
        .map(|e| e.canonical().to_owned())
        .unwrap_or_else(|| engine.to_ascii_lowercase())
}

/// The coordination digest: `sha256:<hex>` of engine + namespace +
/// `coordinationKey`, or of engine + PtahRealm name (`realmRef`). Same inputs
/// give the same digest; the two forms never collide (each starts with its own
/// tag). `None` unless exactly one of the two is set (the CRD's CEL rule
/// refuses anything else).
pub fn coordination_digest(engine: &str, namespace: &str, target: &Target) -> Option<String> {
    let engine = engine_identity(engine);
    match (&target.coordination_key, &target.realm_ref) {
        (Some(key), None) => Some(super::receiver::content_sha256(
            ["ptah-coordination-v1", "key", &engine, namespace, key]
                .join(SEP)
                .as_bytes(),
        )),
        (None, Some(realm)) => Some(super::receiver::content_sha256(
            ["ptah-coordination-v1", "realm", &engine, &realm.name]
                .join(SEP)
                .as_bytes(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::short_id;

    #[test]
    fn a_job_name_carries_the_first_sixteen_hex_digits_of_the_operation_id() {
        let id = format!("sha256:{}", "0123456789abcdef".repeat(4));
        assert_eq!(short_id(&id), "0123456789abcdef");
        assert_eq!(short_id("sha256:abc"), "abc");
        assert_eq!(short_id("not-a-digest-at-all"), "not-a-digest-at-");
        assert_eq!(short_id("é".repeat(10).as_str()), "é".repeat(8));
    }
}
