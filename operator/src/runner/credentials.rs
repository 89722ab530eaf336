//! Credentials, read where the Job builder puts them, held in memory only.
//! No message here ever holds a credential's value: errors name the file or
//! the variable.

use std::fs;
use std::io::Read;
use std::path::Path;

use supplychain::git;
use supplychain::oci;

use super::StepError;

/// The largest credential file read.
const MAX_CREDENTIAL_BYTES: u64 = 256 * 1024;

/// Environment variables of environment-mode registry credentials.
pub const ENV_REGISTRY_AUTHORITY: &str = "PTAH_REGISTRY_AUTHORITY";
/// The user name.
pub const ENV_REGISTRY_USERNAME: &str = "PTAH_REGISTRY_USERNAME";
/// The password.
pub const ENV_REGISTRY_PASSWORD: &str = "PTAH_REGISTRY_PASSWORD";
/// An identity token.
pub const ENV_REGISTRY_TOKEN: &str = "PTAH_REGISTRY_TOKEN";

/// A file of at most [`MAX_CREDENTIAL_BYTES`]; `None` when absent.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StepError> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StepError::input(format!(
                "cannot read {}: {}",
                path.display(),
                e.kind()
            )));
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_CREDENTIAL_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| StepError::input(format!("cannot read {}: {}", path.display(), e.kind())))?;
    if bytes.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(StepError::input(format!(
            "{} is larger than {MAX_CREDENTIAL_BYTES} bytes",
            path.display()
        )));
    }
    Ok(Some(bytes))
}

fn text(path: &Path) -> Result<Option<String>, StepError> {
    match read_optional(path)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes)
            .map(|s| Some(s.trim_end_matches(['\n', '\r']).to_string()))
            .map_err(|_| StepError::input(format!("{} is not UTF-8", path.display()))),
    }
}

/// The Git credentials in the mounted Secret `dir` (`--credentials`), as
/// Flux names its keys: `username` and `password`, or `bearerToken`, for
/// HTTP(S); `identity` (an OpenSSH private key) with `known_hosts` for SSH.
pub fn git_credentials(dir: Option<&Path>) -> Result<git::Credentials, StepError> {
    let Some(dir) = dir else {
        return Ok(git::Credentials::None);
    };
    if !dir.is_dir() {
        return Err(StepError::input(format!(
            "--credentials={}: not a directory",
            dir.display()
        )));
    }
    let get = |key: &str| text(&dir.join(key));
    if let Some(private_key) = get("identity")? {
        let known_hosts = get("known_hosts")?.ok_or_else(|| {
            StepError::input(format!(
                "--credentials={}: key `identity` without `known_hosts`: the host key must be pinned",
                dir.display()
            ))
        })?;
        return Ok(git::Credentials::Ssh {
            private_key,
            known_hosts,
        });
    }
    if let Some(token) = get("bearerToken")? {
        return Ok(git::Credentials::Bearer { token });
    }
    match (get("username")?, get("password")?) {
        (Some(username), Some(password)) => Ok(git::Credentials::Basic { username, password }),
        (None, None) => Ok(git::Credentials::None),
        _ => Err(StepError::input(format!(
            "--credentials={}: `username` and `password` go together",
            dir.display()
        ))),
    }
}

/// The registry credentials for `registry` (host[:port]): a Docker
/// `config.json` (`--docker-config`) or the environment, and only for the
/// registry the Secret's `registry` key names.
pub fn registry_credentials(
    registry: &str,
    docker_config: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<oci::Credentials, StepError> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
    let authority = nonempty(ENV_REGISTRY_AUTHORITY);
    let credentials = if let Some(path) = docker_config {
        let bytes = read_optional(path)?.ok_or_else(|| {
            StepError::input(format!("--docker-config={}: no such file", path.display()))
        })?;
        oci::Credentials::from_docker_config(&bytes, registry)
            .map_err(|e| StepError::input(format!("--docker-config: {e}")))?
    } else {
        match (
            nonempty(ENV_REGISTRY_USERNAME),
            nonempty(ENV_REGISTRY_PASSWORD),
            nonempty(ENV_REGISTRY_TOKEN),
        ) {
            (_, _, Some(token)) => oci::Credentials::Bearer { token },
            (Some(username), Some(password), None) => {
                oci::Credentials::Basic { username, password }
            }
            (None, None, None) => oci::Credentials::Anonymous,
            _ => {
                return Err(StepError::input(format!(
                    "{ENV_REGISTRY_USERNAME} and {ENV_REGISTRY_PASSWORD} go together"
                )));
            }
        }
    };
    if credentials != oci::Credentials::Anonymous {
        match authority {
            Some(a) if a == registry => {}
            Some(a) => {
                return Err(StepError::refused(
                    "registryAuthFrom.registry",
                    None,
                    format!(
                        "the credentials are for registry {a:?}, and the reference names {registry:?}: \
                         they are never sent elsewhere"
                    ),
                ));
            }
            None => {
                return Err(StepError::input(format!(
                    "registry credentials without {ENV_REGISTRY_AUTHORITY}: the registry they are for is unknown"
                )));
            }
        }
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_credentials_go_to_their_registry_only() {
        let env = |k: &str| match k {
            ENV_REGISTRY_AUTHORITY => Some("registry.example.com".to_string()),
            ENV_REGISTRY_USERNAME => Some("u".to_string()),
            ENV_REGISTRY_PASSWORD => Some("s3cret-value".to_string()),
            _ => None,
        };
        let ok = registry_credentials("registry.example.com", None, &env).unwrap();
        assert!(matches!(ok, oci::Credentials::Basic { .. }));
        let err = registry_credentials("evil.example.com", None, &env).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("registryAuthFrom.registry"), "{text}");
        assert!(!text.contains("s3cret-value"), "{text}");
        let none = |_: &str| None;
        assert_eq!(
            registry_credentials("evil.example.com", None, &none).unwrap(),
            oci::Credentials::Anonymous
        );
    }

    #[test]
    fn git_credentials_read_the_flux_keys() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("identity"), "KEY\n").unwrap();
        let err = git_credentials(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("known_hosts"), "{err}");
        fs::write(dir.path().join("known_hosts"), "host ssh-ed25519 AAAA\n").unwrap();
        assert!(matches!(
            git_credentials(Some(dir.path())).unwrap(),
            git::Credentials::Ssh { .. }
        ));
        let basic = tempfile::tempdir().unwrap();
        fs::write(basic.path().join("username"), "u").unwrap();
        fs::write(basic.path().join("password"), "p").unwrap();
        assert!(matches!(
            git_credentials(Some(basic.path())).unwrap(),
            git::Credentials::Basic { .. }
        ));
    }
}
