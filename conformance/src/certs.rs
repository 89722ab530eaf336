//! The harness's PKI: one CA, the API server's serving certificate, client
//! certificates for the admin, controller-manager, scheduler and kubelet, and
//! the service-account signing key. Made once per state dir and kept.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A client identity: common name (user) and organisations (groups).
pub struct ClientIdentity {
    pub file: &'static str,
    pub common_name: String,
    /// One organisation: rcgen keeps one value per attribute type.
    pub group: Option<String>,
}

/// Paths of the PKI files under `<state>/pki`.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new(state: &Path) -> Self {
        Pki {
            dir: state.join("pki"),
        }
    }
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// Creates every certificate and key unless the CA already exists with
    /// every client's; a client added since makes the whole PKI anew.
    pub fn ensure(&self, clients: &[ClientIdentity]) -> anyhow::Result<()> {
        let complete = clients
            .iter()
            .all(|c| self.path(&format!("{}.crt", c.file)).is_file());
        if self.ca_cert().is_file() && complete {
            return Ok(());
        }
        fs::create_dir_all(&self.dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "ptah-harness-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, &ca_key);

        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        server
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        server
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server.signed_by(&server_key, &issuer)?;
        self.write("apiserver.crt", &server_cert.pem())?;
        self.write_secret("apiserver.key", &server_key.serialize_pem())?;

        for client in clients {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(DnType::CommonName, client.common_name.as_str());
            if let Some(group) = &client.group {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, group.as_str());
            }
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let cert = params.signed_by(&key, &issuer)?;
            self.write(&format!("{}.crt", client.file), &cert.pem())?;
            self.write_secret(&format!("{}.key", client.file), &key.serialize_pem())?;
        }

        let sa = KeyPair::generate()?;
        self.write_secret("sa.key", &sa.serialize_pem())?;
        self.write("sa.pub", &sa.public_key_pem())?;
        // The CA last: its presence marks the PKI complete.
        self.write_secret("ca.key", &ca_key.serialize_pem())?;
        self.write("ca.crt", &ca_cert.pem())?;
        Ok(())
    }

    fn write(&self, file: &str, text: &str) -> anyhow::Result<()> {
        fs::write(self.path(file), text)?;
        Ok(())
    }

    fn write_secret(&self, file: &str, text: &str) -> anyhow::Result<()> {
        let path = self.path(file);
        fs::write(&path, text)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
        Ok(())
    }
}
