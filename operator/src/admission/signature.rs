//! The stamp the manager can check: the mutating webhook signs what it
//! stamped with a key only the manager holds (derived from its result token
//! key), and a dispatch counts only an approval or acknowledgment whose
//! signature it can verify. So a stamp written by a client while the webhook
//! was absent, deleted or bypassed is worth nothing, even if no policy in the
//! API server refused it.
//!
//! The signature is HMAC-SHA256 over the kind, the namespace and the whole
//! spec as its Rust type serializes it (the signature field left out): the
//! resource and plan named, the fingerprint or operation, who, when and the
//! admission request UID. The object's name and UID are not known when a
//! creation is mutated, so a copy of a signed spec under another name stands
//! for the same decision of the same person on the same plan, and nothing
//! more.

use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;

use crate::execution::receiver::TokenKey;

/// The spec field that carries the signature.
pub const STAMP_SIGNATURE_FIELD: &str = "stampSignature";
/// The signature's version prefix.
const VERSION: &str = "v1:";
/// The domain the stamp key is derived under from the token key.
const KEY_DOMAIN: &[u8] = b"ptah.run/approval-stamp/v1\0";

type HmacSha256 = Hmac<Sha256>;

/// The key stamps are signed with.
pub struct StampKey([u8; 32]);

impl std::fmt::Debug for StampKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StampKey(..)")
    }
}

/// Why a stamp is not this manager's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    /// No signature at all: no webhook of this operator stamped it.
    #[error(
        "spec.stampSignature: the approval carries no signature of this operator's admission webhook, so its stamp was not written by admission"
    )]
    Missing,
    /// A signature that does not verify.
    #[error(
        "spec.stampSignature: the signature does not match the stamped spec; the stamp was not written by this operator's admission webhook"
    )]
    Mismatch,
}

impl StampKey {
    /// The stamp key of the manager holding `token_key`.
    pub fn of(token_key: &TokenKey) -> Self {
        StampKey(token_key.derive(KEY_DOMAIN))
    }

    fn mac(&self, kind: &str, namespace: &str, spec: &Value) -> HmacSha256 {
        let mut unsigned = spec.clone();
        if let Some(map) = unsigned.as_object_mut() {
            map.remove(STAMP_SIGNATURE_FIELD);
        }
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        // serde_json's maps are sorted by key, so the bytes are canonical.
        for part in [
            kind.as_bytes(),
            namespace.as_bytes(),
            unsigned.to_string().as_bytes(),
        ] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// The signature of `spec` (as its type serializes it) of a `kind` in
    /// `namespace`.
    pub fn sign(&self, kind: &str, namespace: &str, spec: &impl Serialize) -> String {
        let spec = serde_json::to_value(spec).unwrap_or(Value::Null);
        let tag = self.mac(kind, namespace, &spec).finalize().into_bytes();
        format!("{VERSION}{}", hex::encode(tag))
    }

    /// Whether `spec` carries this key's signature, compared in constant
    /// time.
    pub fn verify(
        &self,
        kind: &str,
        namespace: &str,
        spec: &impl Serialize,
    ) -> Result<(), Unsigned> {
        let spec = serde_json::to_value(spec).map_err(|_| Unsigned::Mismatch)?;
        let presented = spec
            .get(STAMP_SIGNATURE_FIELD)
            .and_then(Value::as_str)
            .ok_or(Unsigned::Missing)?;
        let tag = presented
            .strip_prefix(VERSION)
            .and_then(|h| hex::decode(h).ok())
            .ok_or(Unsigned::Mismatch)?;
        self.mac(kind, namespace, &spec)
            .verify_slice(&tag)
            .map_err(|_| Unsigned::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(byte: u8) -> StampKey {
        StampKey([byte; 32])
    }

    fn spec() -> Value {
        json!({
            "schemaRef": {"name": "orders", "uid": "s-1"},
            "planRef": {"name": "orders-abc", "uid": "p-1"},
            "planFingerprint": format!("sha256:{}", "ab".repeat(32)),
            "approver": {"username": "alice", "groups": ["dba"]},
            "approvedAt": "2026-12-01T10:00:00Z",
            "mutationRequestUID": "req-1",
        })
    }

    fn signed(k: &StampKey, kind: &str, ns: &str, mut spec: Value) -> Value {
        let sig = k.sign(kind, ns, &spec);
        spec[STAMP_SIGNATURE_FIELD] = json!(sig);
        spec
    }

    #[test]
    fn a_signed_stamp_verifies_under_the_same_key_kind_and_namespace() {
        let k = key(1);
        let s = signed(&k, "PtahSchemaApproval", "shop", spec());
        assert_eq!(k.verify("PtahSchemaApproval", "shop", &s), Ok(()));
        assert!(
            s[STAMP_SIGNATURE_FIELD]
                .as_str()
                .unwrap()
                .starts_with("v1:")
        );
    }

    #[test]
    fn an_unsigned_spec_is_missing_its_signature() {
        assert_eq!(
            key(1).verify("PtahSchemaApproval", "shop", &spec()),
            Err(Unsigned::Missing)
        );
    }

    #[test]
    fn any_change_to_the_stamp_or_what_it_names_breaks_the_signature() {
        let k = key(1);
        let s = signed(&k, "PtahSchemaApproval", "shop", spec());
        for (field, value) in [
            (
                "approver",
                json!({"username": "mallory", "groups": ["dba"]}),
            ),
            ("approvedAt", json!("2026-12-01T10:00:01Z")),
            ("mutationRequestUID", json!("req-2")),
            ("planRef", json!({"name": "orders-abc", "uid": "p-2"})),
            (
                "planFingerprint",
                json!(format!("sha256:{}", "cd".repeat(32))),
            ),
        ] {
            let mut forged = s.clone();
            forged[field] = value;
            assert_eq!(
                k.verify("PtahSchemaApproval", "shop", &forged),
                Err(Unsigned::Mismatch),
                "{field}"
            );
        }
        assert_eq!(
            k.verify("PtahSchemaApproval", "other", &s),
            Err(Unsigned::Mismatch),
            "another namespace"
        );
        assert_eq!(
            k.verify("PtahMigrationApproval", "shop", &s),
            Err(Unsigned::Mismatch),
            "another kind"
        );
    }

    #[test]
    fn another_key_or_a_malformed_signature_does_not_verify() {
        let s = signed(&key(1), "PtahSchemaApproval", "shop", spec());
        assert_eq!(
            key(2).verify("PtahSchemaApproval", "shop", &s),
            Err(Unsigned::Mismatch)
        );
        for bad in ["", "v1:", "v1:zz", "v2:00", "deadbeef"] {
            let mut forged = s.clone();
            forged[STAMP_SIGNATURE_FIELD] = json!(bad);
            assert_eq!(
                key(1).verify("PtahSchemaApproval", "shop", &forged),
                Err(Unsigned::Mismatch),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_stamp_key_is_derived_from_the_token_key_and_differs_from_it() {
        let token = TokenKey::generate();
        let a = StampKey::of(&token);
        let b = StampKey::of(&token);
        assert_eq!(a.0, b.0, "the same token key gives the same stamp key");
        assert_ne!(a.0, token.derive(b"another purpose\0"));
    }
}
