//! `sshd` for git over SSH: its own ed25519 host key, key-only login with a
//! client key pair the harness makes, and a `known_hosts` that pins the host
//! key, so clients can run with `StrictHostKeyChecking=yes`.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use super::{Paths, SSH_USER, write_private, write_whole};
use crate::service::ServiceSpec;

/// The directory OpenSSH's privilege separation chroots into; compiled into
/// Debian's sshd, so it cannot live in the state dir.
const PRIVSEP_DIR: &str = "/run/sshd";

/// Makes the keys, `authorized_keys`, `known_hosts` and `sshd_config`, and
/// returns the sshd service.
pub(super) fn prepare(paths: &Paths, port: u16) -> anyhow::Result<ServiceSpec> {
    let host = generate_key(&paths.host_key, "ptah-harness-git-host")?;
    let client = generate_key(&paths.client_key, "ptah-harness-git-client")?;
    // `restrict`: no pty, forwarding or agent; git needs only the command.
    write_private(&paths.authorized_keys, &format!("restrict {client}\n"))?;
    write_whole(&paths.known_hosts, &known_hosts_line(port, &host)?, 0o644)?;
    let config = format!(
        "# Written by the conformance harness.\n\
         ListenAddress 127.0.0.1:{port}\n\
         HostKey {host_key}\n\
         PidFile none\n\
         AuthenticationMethods publickey\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         PermitRootLogin prohibit-password\n\
         AllowUsers {SSH_USER}\n\
         AuthorizedKeysFile {authorized_keys}\n\
         # The state dir may sit under a world-writable directory (a test's\n\
         # tempdir); the key files themselves are 0600 and ours.\n\
         StrictModes no\n\
         AllowTcpForwarding no\n\
         X11Forwarding no\n\
         PrintMotd no\n\
         # Protocol v2 over SSH travels in this variable.\n\
         AcceptEnv GIT_PROTOCOL\n\
         # The server side of git must not read root's own git config.\n\
         SetEnv GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null\n\
         LogLevel VERBOSE\n",
        host_key = paths.host_key.display(),
        authorized_keys = paths.authorized_keys.display(),
    );
    write_whole(&paths.sshd_config, &config, 0o644)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(PRIVSEP_DIR)
        .with_context(|| format!("creating sshd's privilege separation dir {PRIVSEP_DIR}"))?;
    // Refuse a bad config now, with sshd's own words, rather than as a
    // service that never listens.
    let check = Command::new("/usr/sbin/sshd")
        .arg("-t")
        .arg("-f")
        .arg(&paths.sshd_config)
        .output()
        .context("running /usr/sbin/sshd -t (is openssh-server installed?)")?;
    if !check.status.success() {
        bail!(
            "sshd refuses {}: {}",
            paths.sshd_config.display(),
            String::from_utf8_lossy(&check.stderr).trim()
        );
    }
    Ok(ServiceSpec::new("git-sshd", "/usr/sbin/sshd")
        .args([
            "-D".to_string(),
            "-e".to_string(),
            "-f".to_string(),
            paths.sshd_config.display().to_string(),
        ])
        .port(port))
}

/// Makes an ed25519 key pair without passphrase at `path` (and `path.pub`)
/// unless the private key exists; returns the public key line.
pub fn generate_key(path: &Path, comment: &str) -> anyhow::Result<String> {
    if !path.is_file() {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let _ = fs::remove_file(path.with_extension("pub"));
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(path)
            .output()
            .context("running ssh-keygen (is openssh-client installed?)")?;
        if !out.status.success() {
            bail!(
                "ssh-keygen could not make {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    public_key(path)
}

/// The public key line of a private key file (derived, not read from `.pub`).
pub fn public_key(private: &Path) -> anyhow::Result<String> {
    let out = Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(private)
        .output()
        .context("running ssh-keygen -y")?;
    if !out.status.success() {
        bail!(
            "ssh-keygen -y could not read {}: {}",
            private.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// One `known_hosts` line pinning `public_key` for `[127.0.0.1]:port`.
pub fn known_hosts_line(port: u16, public_key: &str) -> anyhow::Result<String> {
    let mut fields = public_key.split_whitespace();
    let (Some(kind), Some(key)) = (fields.next(), fields.next()) else {
        bail!("not an OpenSSH public key line: {public_key:?}");
    };
    Ok(format!("[127.0.0.1]:{port} {kind} {key}\n"))
}

/// A `GIT_SSH_COMMAND` with this client key that trusts only the hosts
/// pinned in `known_hosts` and never asks anything.
pub fn command(key: &Path, known_hosts: &Path) -> String {
    format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} \
         -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes",
        shell_quote(&key.display().to_string()),
        shell_quote(&known_hosts.display().to_string()),
    )
}

/// git runs `GIT_SSH_COMMAND` through the shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hosts_pins_the_bracketed_loopback_port() {
        let line = known_hosts_line(2222, "ssh-ed25519 AAAAC3Nza host-comment").unwrap();
        assert_eq!(line, "[127.0.0.1]:2222 ssh-ed25519 AAAAC3Nza\n");
        assert!(known_hosts_line(1, "garbage").is_err());
    }
}
