//! The shared kit of the end-to-end tests in `conformance/tests/`: what
//! several test files needed alike — a namespace of their own on the shared
//! harness, waiting on a condition with a timeout, the Secrets a Job's Pod
//! names, pushing and signing OCI artifacts, the git endpoints, the traces
//! Jaeger holds and promtool's verdict on metrics — written once here so
//! that every test file behaves the same way and a fix lands everywhere.

use std::sync::atomic::{AtomicU32, Ordering};

pub mod admission;
pub mod audit;
pub mod bench;
pub mod chart;
pub mod database;
pub mod executor;
pub mod git;
pub mod job;
pub mod journal;
pub mod manager;
pub mod namespace;
pub mod oci;
pub mod operator;
pub mod plugin;
pub mod promtool;
pub mod relay;
pub mod traces;
pub mod wait;

/// A name no other test, and no earlier run on the same harness, uses:
/// `<prefix>-<pid>-<nanos>-<n>`. Tests on the shared harness run in parallel
/// and again later, so the repositories and tags they make must not collide.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs async clean-up from a `Drop`: a failed test unwinds there, and its
/// runtime may be gone, so the work gets a thread and a runtime of its own.
/// Clean-up is best effort: its errors are dropped, never a second panic.
pub fn clean_up<F, Fut>(work: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(work())
    })
    .join();
}

/// Two tests of `$f`: `$name::on_postgresql` and `$name::on_mariadb`, each
/// calling `$f(engine, label)` with the label `$label-pg` or `$label-maria`
/// (its namespace's name) and the `$arg`s given after it. The test file has
/// `Engine` (`testkit::database::Engine`) in scope.
#[macro_export]
macro_rules! on_both_engines {
    ($name:ident, $label:literal, $f:ident $(, $arg:expr)*) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn on_postgresql() -> anyhow::Result<()> {
                $f(Engine::Postgres, concat!($label, "-pg") $(, $arg)*).await
            }

            #[tokio::test]
            async fn on_mariadb() -> anyhow::Result<()> {
                $f(Engine::MariaDb, concat!($label, "-maria") $(, $arg)*).await
            }
        }
    };
}
