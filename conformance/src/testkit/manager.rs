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
    /// `--fault-skip`: matching writes let pass before the fault point stops.
    pub fault_skip: Option<u32>,
    /// `--lease-duration-seconds`.
    pub lease_duration_seconds: Option<i32>,
    /// The receiver's port; one the system picks when unset. A manager
    /// started again keeps the port, as a Service keeps its address, so a
    /// Job's delivery retries reach the new process.
    pub port: Option<u16>,
    /// Where its spans and its Jobs' go.
    pub traces: Traces,
    /// `--holder` (default `test-<namespace>`): another replica's identity.
    pub holder: Option<String>,
    /// `--realm-holder` (default the manager's own): another installation's.
    pub realm_holder: Option<String>,
    /// Its kubeconfig instead of the harness's operator user (a
    /// ServiceAccount's, to run under the chart's RBAC).
    pub kubeconfig: Option<PathBuf>,
}

/// Where a manager exports traces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Traces {
    /// To the harness's Jaeger (`PTAH_OTLP_ENDPOINT`).
    #[default]
    Harness,
    /// Nowhere: no `OTEL_*` variable is set.
    Off,
    /// To this OTLP/HTTP endpoint.
    To(String),
}

/// A loopback port free at the moment of asking.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A manager watching `ns`, as a process of the harness under `name`:
/// recorded beside its other processes, it runs on after the caller until
/// `ptah-harness down`. One recorded under `name` before is stopped first,
/// and the new process writes a new CA. Answers its command line.
pub fn start_recorded(
    harness: &Harness,
    ns: &str,
    name: &str,
    spec: &ManagerSpec,
) -> anyhow::Result<CommandLine> {
    use crate::service::{ServiceSpec, start, stop};
    stop(&harness.state, name, Duration::from_secs(15))?;
    let line = command_line(harness, ns, spec)?;
    let _ = std::fs::remove_dir_all(&line.tls_dir);
    let mut service = ServiceSpec::new(name, &line.exe).args(line.args.clone());
    for (k, v) in &line.env {
        service = service.env(k, v.clone());
    }
    start(&harness.state, &service)?;
    Ok(line)
}

impl Manager {
    /// Starts a manager watching `ns` only, with its Leases in `ns` too.
    pub fn start(ns: &TestNamespace, spec: &ManagerSpec) -> anyhow::Result<Manager> {
        Manager::start_in(ns.harness(), ns.name(), spec)
    }

    /// Starts a manager watching the namespace `ns` of `harness` only.
    pub fn start_in(harness: &Harness, ns: &str, spec: &ManagerSpec) -> anyhow::Result<Manager> {
        let line = command_line(harness, ns, spec)?;
        let log = line.dir.join(format!("{}-{}.log", ns, super::unique("m")));
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&line.exe);
        // Only what the spec says decides where traces go.
        cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .envs(line.env.iter().map(|(k, v)| (k, v)))
            .args(&line.args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", line.exe.display()))?;
        Ok(Manager {
            child,
            log,
            tls_dir: line.tls_dir,
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

    /// Where the manager serves `/metrics`, from its log.
    pub async fn metrics_url(&self) -> anyhow::Result<String> {
        let start = Instant::now();
        loop {
            let log = self.log();
            if let Some(addr) = log
                .lines()
                .find(|l| l.contains("serving /metrics"))
                .and_then(|l| l.split("metrics=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                // The log may colour fields; the address is digits, dots and a colon.
                let addr: String = addr
                    .chars()
                    .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                    .collect();
                return Ok(format!("http://{addr}/metrics"));
            }
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(60),
                "the manager never said where it serves /metrics; its log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One scrape of `/metrics`.
    pub async fn scrape(&self) -> anyhow::Result<String> {
        let url = self.metrics_url().await?;
        let response = reqwest::get(&url).await?.error_for_status()?;
        Ok(response.text().await?)
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

    /// Its exit status, if it has ended (a fault point), without waiting.
    pub fn try_exit(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
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

/// How a manager for one namespace of the harness is started: its program,
/// environment and arguments, and the directories it keeps its key and
/// certificates in.
pub struct CommandLine {
    /// The program.
    pub exe: PathBuf,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its arguments.
    pub args: Vec<String>,
    /// The directory of managers' files under the harness state.
    pub dir: PathBuf,
    /// Where its receiver's certificates are.
    pub tls_dir: PathBuf,
}

/// The command line of a manager watching `ns` of `harness` only, with its
/// Leases in `ns` too.
pub fn command_line(
    harness: &Harness,
    ns: &str,
    spec: &ManagerSpec,
) -> anyhow::Result<CommandLine> {
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
    let tls_dir = dir.join(format!("{ns}-tls"));
    let mut args = vec![
        format!("--listen=127.0.0.1:{}", spec.port.unwrap_or(0)),
        // Several managers share the machine: each its own free port.
        "--metrics-listen=127.0.0.1:0".to_string(),
        format!(
            "--token-key-file={}",
            dir.join(format!("{ns}.key")).display()
        ),
        format!("--tls-dir={}", tls_dir.display()),
        format!("--runner-image={OPERATOR_IMAGE_PINNED}"),
        format!("--executor-image={EXECUTOR_IMAGE_PINNED}"),
        format!("--coordination-namespace={ns}"),
        format!("--watch-namespace={ns}"),
        format!(
            "--holder={}",
            spec.holder.clone().unwrap_or_else(|| format!("test-{ns}"))
        ),
    ];
    args.extend(
        spec.realm_holder
            .as_ref()
            .map(|h| format!("--realm-holder={h}")),
    );
    args.extend(spec.fault_point.map(|f| format!("--fault-point={f}")));
    args.extend(
        spec.fault_operation
            .map(|op| format!("--fault-operation={op}")),
    );
    args.extend(spec.fault_skip.map(|n| format!("--fault-skip={n}")));
    args.extend(
        spec.lease_duration_seconds
            .map(|s| format!("--lease-duration-seconds={s}")),
    );
    let env = vec![
        (
            "KUBECONFIG".to_string(),
            spec.kubeconfig
                .clone()
                .unwrap_or_else(|| harness.operator_kubeconfig())
                .display()
                .to_string(),
        ),
        (
            "RUST_LOG".to_string(),
            "info,ptah_operator=debug,kube=warn".to_string(),
        ),
    ];
    let mut env = env;
    let endpoint = match &spec.traces {
        Traces::Harness => harness.otlp_endpoint().ok(),
        Traces::Off => None,
        Traces::To(url) => Some(url.clone()),
    };
    if let Some(url) = endpoint {
        env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), url));
    }
    Ok(CommandLine {
        exe,
        env,
        args,
        dir,
        tls_dir,
    })
}
