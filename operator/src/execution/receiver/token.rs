//! The credential: the key each operation's token is derived from, the
//! token Secret the Job mounts, and the CA ConfigMap Pods trust the receiver by.

use super::*;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// The manager's key from which every operation's token is derived.
pub struct TokenKey(pub(super) [u8; KEY_BYTES]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// A fresh key from the operating system's CSPRNG (via aws-lc-rs).
    pub fn generate() -> Self {
        let mut key = [0u8; KEY_BYTES];
        // Without randomness there is no safe key: nothing to fall back to.
        rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut key)
            .expect("the system random number generator failed");
        TokenKey(key)
    }

    /// Reads the key file (64 hex digits), or creates it (0600) with a fresh
    /// key when absent.
    pub fn load_or_create(path: &Path) -> std::io::Result<Self> {
        use std::io::{ErrorKind, Write};
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse(path, &text),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let key = Self::generate();
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(mut f) => {
                f.write_all(format!("{}\n", hex::encode(key.0)).as_bytes())?;
                f.sync_all()?;
                Ok(key)
            }
            // Another process made it first: use theirs.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Self::parse(path, &std::fs::read_to_string(path)?)
            }
            Err(e) => Err(e),
        }
    }

    fn parse(path: &Path, text: &str) -> std::io::Result<Self> {
        let invalid = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: the result token key must be {} hex digits",
                    path.display(),
                    KEY_BYTES * 2
                ),
            )
        };
        let bytes = hex::decode(text.trim()).map_err(|_| invalid())?;
        let key: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| invalid())?;
        Ok(TokenKey(key))
    }

    /// A key for another purpose, derived from this one under `domain`
    /// (HMAC-SHA256), so one Secret holds every key only the manager has
    /// and a value made under one domain is worth nothing under another.
    pub fn derive(&self, domain: &[u8]) -> [u8; KEY_BYTES] {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(domain);
        mac.finalize().into_bytes().into()
    }

    fn mac(&self, operation_id: &str, attempt: i32) -> HmacSha256 {
        // Any key length is valid for HMAC.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(TOKEN_DOMAIN);
        mac.update(operation_id.as_bytes());
        mac.update(b"\0");
        mac.update(&attempt.to_be_bytes());
        mac
    }

    /// The per-operation token: hex HMAC-SHA256(key, operation_id ‖
    /// attempt). Deterministic, so a restarted manager re-creates the same
    /// Secret and checks the same token; no token is stored anywhere but in
    /// the Secret.
    pub fn token(&self, operation_id: &str, attempt: i32) -> String {
        hex::encode(self.mac(operation_id, attempt).finalize().into_bytes())
    }

    /// Whether `presented` is the token of the operation, compared in
    /// constant time.
    pub fn verify(&self, operation_id: &str, attempt: i32, presented: &str) -> bool {
        if presented.len() != TOKEN_HEX {
            return false;
        }
        let Ok(bytes) = hex::decode(presented) else {
            return false;
        };
        self.mac(operation_id, attempt).verify_slice(&bytes).is_ok()
    }
}

/// The token Secret of the Job `job_name`.
pub fn token_secret_name(job_name: &str) -> String {
    format!("{job_name}-result")
}

/// The per-operation token Secret: the token under [`RESULT_TOKEN_KEY`],
/// immutable, owned by the resource.
pub fn token_secret(namespace: &str, job_name: &str, owner: OwnerReference, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(token_secret_name(job_name)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
                (LABEL_COMPONENT.to_string(), TOKEN_COMPONENT.to_string()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            RESULT_TOKEN_KEY.to_string(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The ConfigMap with the receiver's CA, in a namespace where Jobs run.
pub fn receiver_ca_config_map(namespace: &str, ca_pem: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(RECEIVER_CA_CONFIGMAP.into()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL_MANAGED_BY.to_string(),
                MANAGED_BY.to_string(),
            )])),
            // Tells the manager's metadata watch which CA it holds.
            annotations: Some(BTreeMap::from([(
                crate::api::annotations::RECEIVER_CA_DIGEST.to_string(),
                content_sha256(ca_pem.as_bytes()),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            RECEIVER_CA_KEY.to_string(),
            ca_pem.to_string(),
        )])),
        ..ConfigMap::default()
    }
}
