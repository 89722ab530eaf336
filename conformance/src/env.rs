//! What a test needs from a running harness: started once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::harness::{Harness, default_state_dir};

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
