//! The mutating half: on CREATE, admission writes who decided, when, and
//! which request carried it into the spec of an approval or acknowledgment,
//! over whatever the client sent. After that the spec is immutable (CEL), so
//! the stamp is the record the journal's ApprovalAccepted and RunAcknowledged
//! entries copy.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::api::common::Identity;

/// The kinds the approval webhooks review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reviewed {
    /// `PtahSchemaApproval`.
    SchemaApproval,
    /// `PtahMigrationApproval`.
    MigrationApproval,
    /// `PtahMigrationRunAcknowledgment`.
    RunAcknowledgment,
}

impl Reviewed {
    /// Every reviewed kind, in the order the webhook rules list them.
    pub const ALL: [Reviewed; 3] = [
        Reviewed::SchemaApproval,
        Reviewed::MigrationApproval,
        Reviewed::RunAcknowledgment,
    ];

    /// The kind of an admission request, if it is one of ours.
    pub fn from_gvk(gvk: &GroupVersionKind) -> Option<Self> {
        if gvk.group != crate::api::GROUP || gvk.version != crate::api::VERSION {
            return None;
        }
        Self::ALL.into_iter().find(|k| k.kind() == gvk.kind)
    }

    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            Reviewed::SchemaApproval => "PtahSchemaApproval",
            Reviewed::MigrationApproval => "PtahMigrationApproval",
            Reviewed::RunAcknowledgment => "PtahMigrationRunAcknowledgment",
        }
    }

    /// The kind's plural: the resource the webhook rules name.
    pub fn plural(self) -> &'static str {
        match self {
            Reviewed::SchemaApproval => "ptahschemaapprovals",
            Reviewed::MigrationApproval => "ptahmigrationapprovals",
            Reviewed::RunAcknowledgment => "ptahmigrationrunacknowledgments",
        }
    }

    /// The spec field admission stamps with the requester's identity.
    pub fn who_field(self) -> &'static str {
        match self {
            Reviewed::SchemaApproval | Reviewed::MigrationApproval => "approver",
            Reviewed::RunAcknowledgment => "acknowledgedBy",
        }
    }

    /// The spec field admission stamps with the time.
    pub fn when_field(self) -> &'static str {
        match self {
            Reviewed::SchemaApproval | Reviewed::MigrationApproval => "approvedAt",
            Reviewed::RunAcknowledgment => "acknowledgedAt",
        }
    }
}

/// The spec field that records the UID of the stamping admission request.
pub const MUTATION_REQUEST_UID_FIELD: &str = "mutationRequestUID";

/// Why a request cannot be stamped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// The request names no authenticated user.
    #[error(
        "userInfo.username: the request has no authenticated user name; an approval must be made by a person the API server authenticated"
    )]
    Anonymous,
    /// The object has no spec to stamp.
    #[error("spec: a {kind} must have a spec (an object) to stamp")]
    NoSpec {
        /// The kind reviewed.
        kind: &'static str,
    },
    /// The admission request carries no UID.
    #[error("request.uid: the admission request has no UID to record in spec.mutationRequestUID")]
    NoRequestUid,
}

/// The identity admission records: user name, UID and groups of the
/// authenticated request, as the API server reports them.
pub fn identity_of(user_info: &UserInfo) -> Result<Identity, StampError> {
    let username = user_info
        .username
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or(StampError::Anonymous)?;
    Ok(Identity {
        username: username.to_owned(),
        uid: user_info.uid.clone().filter(|u| !u.is_empty()),
        groups: user_info.groups.clone().unwrap_or_default(),
    })
}

/// The JSON patch that stamps a created object of `kind`: the requester's
/// identity, `now` and the request UID, each overwriting whatever the client
/// sent (`add` replaces an existing member).
pub fn stamp(
    kind: Reviewed,
    object: &Value,
    user_info: &UserInfo,
    request_uid: &str,
    now: &Time,
) -> Result<Patch, StampError> {
    if !object.get("spec").is_some_and(Value::is_object) {
        return Err(StampError::NoSpec { kind: kind.kind() });
    }
    if request_uid.is_empty() {
        return Err(StampError::NoRequestUid);
    }
    let identity = identity_of(user_info)?;
    let add = |field: &str, value: Value| {
        PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", field]),
            value,
        })
    };
    // Identity and Time serialize infallibly (strings and a list of strings);
    // a failure would be a bug in their types, so it falls back to null,
    // which the CRD schema then refuses.
    Ok(Patch(vec![
        add(
            kind.who_field(),
            serde_json::to_value(&identity).unwrap_or(Value::Null),
        ),
        add(
            kind.when_field(),
            serde_json::to_value(now).unwrap_or(Value::Null),
        ),
        add(
            MUTATION_REQUEST_UID_FIELD,
            Value::String(request_uid.to_owned()),
        ),
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn alice() -> UserInfo {
        UserInfo {
            username: Some("alice".into()),
            uid: Some("alice-uid".into()),
            groups: Some(vec!["dba".into(), "system:authenticated".into()]),
            extra: None,
        }
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).expect("time"))
    }

    fn apply(mut object: Value, patch: &Patch) -> Value {
        json_patch::patch(&mut object, patch).expect("patch applies");
        object
    }

    #[test]
    fn a_schema_approval_is_stamped_with_the_requester_the_time_and_the_request() {
        let object = json!({"spec": {"schemaRef": {"name": "orders", "uid": "s"}}});
        let patch =
            stamp(Reviewed::SchemaApproval, &object, &alice(), "req-1", &now()).expect("stamp");
        let stamped = apply(object, &patch);
        assert_eq!(
            stamped["spec"]["approver"],
            json!({"username": "alice", "uid": "alice-uid", "groups": ["dba", "system:authenticated"]})
        );
        assert_eq!(stamped["spec"]["approvedAt"], json!("2026-01-01T00:00:00Z"));
        assert_eq!(stamped["spec"]["mutationRequestUID"], json!("req-1"));
        // The rest of the spec is kept.
        assert_eq!(stamped["spec"]["schemaRef"]["name"], json!("orders"));
    }

    #[test]
    fn a_forged_approver_time_and_request_uid_are_overwritten() {
        let object = json!({"spec": {
            "approver": {"username": "mallory", "groups": ["system:masters"]},
            "approvedAt": "2020-01-01T00:00:00Z",
            "mutationRequestUID": "forged",
        }});
        let patch = stamp(
            Reviewed::MigrationApproval,
            &object,
            &alice(),
            "req-2",
            &now(),
        )
        .expect("stamp");
        let stamped = apply(object, &patch);
        assert_eq!(stamped["spec"]["approver"]["username"], json!("alice"));
        assert_eq!(
            stamped["spec"]["approver"]["groups"],
            json!(["dba", "system:authenticated"])
        );
        assert_eq!(stamped["spec"]["approvedAt"], json!("2026-01-01T00:00:00Z"));
        assert_eq!(stamped["spec"]["mutationRequestUID"], json!("req-2"));
    }

    #[test]
    fn an_acknowledgment_is_stamped_in_acknowledged_by_and_acknowledged_at() {
        let object = json!({"spec": {"acknowledgedBy": {"username": "mallory"}}});
        let patch = stamp(
            Reviewed::RunAcknowledgment,
            &object,
            &alice(),
            "req-3",
            &now(),
        )
        .expect("stamp");
        let stamped = apply(object, &patch);
        assert_eq!(
            stamped["spec"]["acknowledgedBy"]["username"],
            json!("alice")
        );
        assert_eq!(
            stamped["spec"]["acknowledgedAt"],
            json!("2026-01-01T00:00:00Z")
        );
        assert_eq!(stamped["spec"]["mutationRequestUID"], json!("req-3"));
        assert!(stamped["spec"].get("approver").is_none());
    }

    #[test]
    fn a_user_without_uid_or_groups_is_stamped_with_the_name_alone() {
        let user = UserInfo {
            username: Some("bob".into()),
            ..Default::default()
        };
        let identity = identity_of(&user).expect("identity");
        assert_eq!(
            identity,
            Identity {
                username: "bob".into(),
                uid: None,
                groups: vec![]
            }
        );
        assert_eq!(
            serde_json::to_value(&identity).expect("json"),
            json!({"username": "bob"})
        );
    }

    #[test]
    fn an_anonymous_request_is_not_stamped() {
        let object = json!({"spec": {}});
        for user in [
            UserInfo::default(),
            UserInfo {
                username: Some(String::new()),
                ..Default::default()
            },
        ] {
            let err = stamp(Reviewed::SchemaApproval, &object, &user, "req", &now());
            assert_eq!(err, Err(StampError::Anonymous));
            assert!(
                StampError::Anonymous
                    .to_string()
                    .starts_with("userInfo.username:")
            );
        }
    }

    #[test]
    fn an_object_without_a_spec_is_not_stamped() {
        let err = stamp(
            Reviewed::SchemaApproval,
            &json!({"metadata": {}}),
            &alice(),
            "req",
            &now(),
        );
        assert_eq!(
            err,
            Err(StampError::NoSpec {
                kind: "PtahSchemaApproval"
            })
        );
        let err = stamp(
            Reviewed::SchemaApproval,
            &json!({"spec": {}}),
            &alice(),
            "",
            &now(),
        );
        assert_eq!(err, Err(StampError::NoRequestUid));
    }

    #[test]
    fn the_kinds_and_plurals_are_the_api_types_own() {
        use crate::api::{
            PtahMigrationApproval, PtahMigrationRunAcknowledgment, PtahSchemaApproval,
        };
        use kube::Resource;
        let types = [
            (
                PtahSchemaApproval::kind(&()),
                PtahSchemaApproval::plural(&()),
            ),
            (
                PtahMigrationApproval::kind(&()),
                PtahMigrationApproval::plural(&()),
            ),
            (
                PtahMigrationRunAcknowledgment::kind(&()),
                PtahMigrationRunAcknowledgment::plural(&()),
            ),
        ];
        for (kind, (name, plural)) in Reviewed::ALL.into_iter().zip(types) {
            assert_eq!(kind.kind(), name);
            assert_eq!(kind.plural(), plural);
        }
    }

    #[test]
    fn only_the_three_kinds_of_the_group_and_version_are_reviewed() {
        let gvk = |g: &str, v: &str, k: &str| GroupVersionKind::gvk(g, v, k);
        for kind in Reviewed::ALL {
            assert_eq!(
                Reviewed::from_gvk(&gvk("operator.ptah.run", "v1alpha1", kind.kind())),
                Some(kind)
            );
        }
        assert_eq!(
            Reviewed::from_gvk(&gvk("operator.ptah.run", "v1alpha1", "PtahSchema")),
            None
        );
        assert_eq!(
            Reviewed::from_gvk(&gvk("example.com", "v1alpha1", "PtahSchemaApproval")),
            None
        );
        assert_eq!(
            Reviewed::from_gvk(&gvk("operator.ptah.run", "v1", "PtahSchemaApproval")),
            None
        );
    }
}
