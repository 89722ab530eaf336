//! The manager (`ptah-operator`) as the end-to-end tests run it: a real
//! process against the harness API server, scoped to one test namespace so
//! tests running side by side never reconcile each other's resources. It can
//! be killed and started again, or told to stop at a fault point of the
//! dispatch protocol.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::namespace::TestNamespace;
use crate::harness::{EXECUTOR_IMAGE_PINNED, Harness, OPERATOR_IMAGE_PINNED};

/// A running manager; killed when dropped.
pub struct Manager {
    child: Child,
    log: PathBuf,
    tls_dir: PathBuf,
}

/// How a manager is started.
#[derive(Clone, Debug, Default)]
pub struct ManagerSpec {
    /// `--fault-point`.
    pub fault_point: Option<&'static str>,
    /// `--fault-operation`: the fault point stops only at this operation.
    pub fault_operation: Option<&'static str>,
    /// `--lease-duration-seconds`.
    pub lease_duration_seconds: Option<i32>,
    /// The receiver's port; one the system picks when unset. A manager
    /// started again keeps the port, as a Service keeps its address, so a
    /// Job's delivery retries reach the new process.
    pub port: Option<u16>,
}

/// A loopback port free at the moment of asking.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Manager {
    /// Starts a manager watching `ns` only, with its Leases in `ns` too.
    pub fn start(ns: &TestNamespace, spec: &ManagerSpec) -> anyhow::Result<Manager> {
        Manager::start_in(ns.harness(), ns.name(), spec)
    }

    /// Starts a manager watching the namespace `ns` of `harness` only.
    pub fn start_in(harness: &Harness, ns: &str, spec: &ManagerSpec) -> anyhow::Result<Manager> {
        // A benchmark may run another build (`PTAH_OPERATOR_BIN`, e.g. the
        // release one); the tests run the debug build the harness maps.
        let exe = std::env::var_os("PTAH_OPERATOR_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| harness.target_dir.join("ptah-operator"));
        anyhow::ensure!(
            exe.exists(),
            "{} is not built: run `cargo build --workspace --bins`",
            exe.display()
        );
        let dir = harness.state.join("managers");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{}-{}.log", ns, super::unique("m")));
        let out = std::fs::File::create(&log)?;
        let tls_dir = dir.join(format!("{ns}-tls"));
        let mut cmd = Command::new(&exe);
        cmd.env("KUBECONFIG", harness.operator_kubeconfig())
            .env("RUST_LOG", "info,ptah_operator=debug,kube=warn")
            .arg(format!("--listen=127.0.0.1:{}", spec.port.unwrap_or(0)))
            .arg(format!(
                "--token-key-file={}",
                dir.join(format!("{}.key", ns)).display()
            ))
            .arg(format!("--tls-dir={}", tls_dir.display()))
            .arg(format!("--runner-image={OPERATOR_IMAGE_PINNED}"))
            .arg(format!("--executor-image={EXECUTOR_IMAGE_PINNED}"))
            .arg(format!("--coordination-namespace={}", ns))
            .arg(format!("--watch-namespace={}", ns))
            .arg(format!("--holder=test-{}", ns))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        if let Some(f) = spec.fault_point {
            cmd.arg(format!("--fault-point={f}"));
        }
        if let Some(op) = spec.fault_operation {
            cmd.arg(format!("--fault-operation={op}"));
        }
        if let Some(s) = spec.lease_duration_seconds {
            cmd.arg(format!("--lease-duration-seconds={s}"));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        Ok(Manager {
            child,
            log,
            tls_dir,
        })
    }

    /// Where the manager writes its log.
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the manager wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Where the manager keeps its serving certificate and CA (`ca.crt`):
    /// the receiver's and the admission webhooks'.
    pub fn tls_dir(&self) -> &std::path::Path {
        &self.tls_dir
    }

    /// Waits for the process to exit by itself (a fault point).
    pub async fn exited(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            anyhow::ensure!(
                start.elapsed() < timeout,
                "the manager did not exit within {timeout:?}; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the process (SIGKILL, as a crash) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.kill();
    }
}
