//! What a test needs from a running harness: started once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::harness::{Harness, Parts, default_state_dir};

/// The shared harness of this test binary, brought up on first use. Tests
/// isolate themselves by namespace and by database, never by harness.
pub async fn shared(kubelet_exe: &str) -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    static UP: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let harness = HARNESS.get_or_init(|| {
        let kubelet = PathBuf::from(kubelet_exe);
        let target_dir = kubelet.parent().map(PathBuf::from).unwrap_or_default();
        Harness {
            state: default_state_dir(),
            kubelet_exe: kubelet,
            target_dir,
            parts: Default::default(),
        }
    });
    UP.get_or_init(|| async {
        harness.up().await.expect("harness up");
    })
    .await;
    harness
}

/// A harness of one test's own, in a directory of its own, brought down
/// and removed when dropped: stopping its API server, etcd, database
/// server, git daemon or registry, or a database server that crashes under
/// it, must not reach the shared harness's other tests.
pub struct OwnHarness {
    /// The harness, alive for the rest of the test binary.
    pub harness: &'static Harness,
}

impl OwnHarness {
    /// Brings up `parts` under a directory named from `test`; `kubelet_exe`
    /// is the test binary's `CARGO_BIN_EXE_process-kubelet`.
    pub async fn up(test: &str, kubelet_exe: &str, parts: Parts) -> anyhow::Result<OwnHarness> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix(&format!("ptah-{test}-"))
            .tempdir()?
            .keep();
        // The databases run as their own system users, who must reach it.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let kubelet = PathBuf::from(kubelet_exe);
        let harness: &'static Harness = Box::leak(Box::new(Harness {
            state: dir,
            target_dir: kubelet.parent().map(Into::into).unwrap_or_default(),
            kubelet_exe: kubelet,
            parts,
        }));
        if let Err(e) = harness.up().await {
            // Its state stays for a look: the servers' logs say why.
            let _ = harness.down();
            return Err(e.context(format!(
                "the test's own harness (state kept in {})",
                harness.state.display()
            )));
        }
        Ok(OwnHarness { harness })
    }
}

impl Drop for OwnHarness {
    fn drop(&mut self) {
        if let Err(e) = self.harness.down() {
            eprintln!("bringing the test's own harness down: {e:#}");
        }
        let _ = std::fs::remove_dir_all(&self.harness.state);
    }
}
