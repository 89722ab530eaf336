//! `up`, `down`, `status` and `env` of the local control plane. `up` is
//! idempotent: it starts what is not running, waits for readiness, and
//! writes the admin kubeconfig and an env file; `down` stops every process it
//! recorded, by pid.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::certs::{ClientIdentity, Pki};
use crate::service::{self, ServiceSpec};
use crate::{gitserve, tools};

/// The name of the one node the process kubelet registers.
pub const NODE_NAME: &str = "ptah-node";

/// Where a harness keeps its state: `$PTAH_HARNESS_DIR`, else `.harness/` in
/// the workspace.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("PTAH_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools::workspace_root().join(".harness"))
}

/// The loopback ports of one harness, chosen free at the first `up` and kept
/// so that a second `up` finds everything where it was.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
    pub postgres: u16,
    pub mariadb: u16,
    pub registry: u16,
    pub git_daemon: u16,
    pub git_http: u16,
    pub git_ssh: u16,
    /// The registry that serves the OCI 1.1 referrers API natively.
    pub referrers_registry: u16,
    /// Flux's source-controller: its artifact server, metrics and health.
    pub flux_source_storage: u16,
    pub flux_source_metrics: u16,
    pub flux_source_health: u16,
    /// Flux's kustomize-controller: metrics and health.
    pub flux_kustomize_metrics: u16,
    pub flux_kustomize_health: u16,
    /// Jaeger: its OTLP receivers (gRPC, HTTP), query API (HTTP, gRPC),
    /// health check and its own metrics.
    pub jaeger_otlp_grpc: u16,
    pub jaeger_otlp_http: u16,
    pub jaeger_query_http: u16,
    pub jaeger_query_grpc: u16,
    pub jaeger_health: u16,
    pub jaeger_metrics: u16,
}

/// The ports from 10000 up to the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), which no outgoing connection takes.
fn below_ephemeral() -> std::ops::Range<u16> {
    let low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let start = 10000.min(low.saturating_sub(2000)).max(1024);
    start..low.max(start + 1000)
}

impl Ports {
    /// Gives every port still unset (0) a free one: all of them at the first
    /// `up`, and those a newer harness added on a state dir an older one made.
    ///
    /// They come from below the kernel's ephemeral range: a port the harness
    /// stops and starts again (etcd, the API server, a database, in the
    /// fault suite) must not be taken meanwhile as the source port of some
    /// connection, which a port from that range can be (etcd once failed to
    /// come back: `bind: address already in use`).
    fn fill(&mut self) -> anyhow::Result<()> {
        let taken: Vec<u16> = self.all_mut().iter().map(|p| **p).collect();
        let range = below_ephemeral();
        let span = u64::from(range.end - range.start);
        // A start of this process's own, so harnesses made side by side
        // seldom look at the same ports first.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::from(d.subsec_nanos()))
            .unwrap_or(0);
        let mut next = (nanos ^ u64::from(std::process::id()).wrapping_mul(2654435761)) % span;
        // Hold every listener until all are chosen so no two ports coincide.
        let mut held = Vec::new();
        let mut tried = 0;
        for port in self.all_mut() {
            while *port == 0 {
                anyhow::ensure!(tried < span, "no free port in {range:?}");
                tried += 1;
                let candidate = range.start + (next % span) as u16;
                next += 1;
                if taken.contains(&candidate) {
                    continue;
                }
                if let Ok(l) = TcpListener::bind(("127.0.0.1", candidate)) {
                    held.push(l);
                    *port = candidate;
                }
            }
        }
        Ok(())
    }

    fn all_mut(&mut self) -> [&mut u16; 23] {
        [
            &mut self.etcd_client,
            &mut self.etcd_peer,
            &mut self.apiserver,
            &mut self.controller_manager,
            &mut self.scheduler,
            &mut self.postgres,
            &mut self.mariadb,
            &mut self.registry,
            &mut self.git_daemon,
            &mut self.git_http,
            &mut self.git_ssh,
            &mut self.referrers_registry,
            &mut self.flux_source_storage,
            &mut self.flux_source_metrics,
            &mut self.flux_source_health,
            &mut self.flux_kustomize_metrics,
            &mut self.flux_kustomize_health,
            &mut self.jaeger_otlp_grpc,
            &mut self.jaeger_otlp_http,
            &mut self.jaeger_query_http,
            &mut self.jaeger_query_grpc,
            &mut self.jaeger_health,
            &mut self.jaeger_metrics,
        ]
    }
}

/// Which parts `up` starts. Everything by default; a test that only needs a
/// second control plane (the `down` test) can leave the rest out.
#[derive(Debug, Clone)]
pub struct Parts {
    pub control_plane: bool,
    pub databases: bool,
    pub registry: bool,
    pub git: bool,
    /// Flux's source-controller and kustomize-controller (with the control
    /// plane only; skipped when they are not built).
    pub flux: bool,
    /// Jaeger, the traces backend (skipped when it is not built).
    pub jaeger: bool,
}

impl Default for Parts {
    fn default() -> Self {
        Parts {
            control_plane: true,
            databases: true,
            registry: true,
            git: true,
            flux: true,
            jaeger: true,
        }
    }
}

/// One harness instance, rooted at a state dir.
#[derive(Debug, Clone)]
pub struct Harness {
    pub state: PathBuf,
    /// The process-kubelet binary (built by cargo beside this one).
    pub kubelet_exe: PathBuf,
    /// The workspace's built binaries, for the operator and executor images.
    pub target_dir: PathBuf,
    pub parts: Parts,
}

fn say(msg: impl AsRef<str>) {
    eprintln!("[harness] {}", msg.as_ref());
}

impl Harness {
    /// A harness whose binaries sit beside the running executable (the
    /// `ptah-harness` CLI) in cargo's target directory.
    pub fn beside_current_exe(state: PathBuf) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let dir = exe
            .parent()
            .context("current executable has no directory")?
            .to_path_buf();
        Ok(Harness {
            state,
            kubelet_exe: dir.join("process-kubelet"),
            target_dir: dir,
            parts: Parts::default(),
        })
    }

    pub fn pki(&self) -> Pki {
        Pki::new(&self.state)
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }
    /// The kubeconfig of the managers tests start (user [`OPERATOR_USER`]).
    pub fn operator_kubeconfig(&self) -> PathBuf {
        self.state.join("operator.kubeconfig")
    }
    /// The API server's audit log: every request of [`OPERATOR_USER`], and
    /// every create of an approval, a plan or a ConfigMap by anyone, at
    /// metadata level, one JSON event a line.
    pub fn audit_log(&self) -> PathBuf {
        self.state.join("audit.log")
    }
    pub fn env_file(&self) -> PathBuf {
        self.state.join("env")
    }
    pub fn secret_file(&self, name: &str) -> PathBuf {
        self.state.join("secrets").join(name)
    }
    pub fn kubelet_dir(&self) -> PathBuf {
        self.state.join("kubelet")
    }
    pub fn images_file(&self) -> PathBuf {
        self.state.join("images.json")
    }

    /// The ports the first `up` chose (`ports.json`), read without choosing
    /// any: an error before that `up`.
    pub fn recorded_ports(&self) -> anyhow::Result<Ports> {
        let path = self.state.join("ports.json");
        let text = fs::read_to_string(&path)
            .with_context(|| format!("no {}; run `up` first", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
    }
    /// Jaeger's OTLP/HTTP base URL, `PTAH_OTLP_ENDPOINT`: what an exporter's
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes (`/v1/traces` is appended).
    pub fn otlp_endpoint(&self) -> anyhow::Result<String> {
        Ok(crate::jaeger::otlp_endpoint(&self.recorded_ports()?))
    }
    /// The base URL of Jaeger's query API, `PTAH_TRACES_URL`.
    pub fn traces_url(&self) -> anyhow::Result<String> {
        Ok(crate::jaeger::traces_url(&self.recorded_ports()?))
    }

    fn ports(&self) -> anyhow::Result<Ports> {
        let path = self.state.join("ports.json");
        let mut ports: Ports = match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("reading {}", path.display()))?,
            Err(_) => Ports::default(),
        };
        let before = ports.clone();
        ports.fill()?;
        if ports != before {
            fs::write(&path, serde_json::to_string_pretty(&ports)?)?;
        }
        Ok(ports)
    }

    /// Starts everything that is not running and waits until it is ready.
    pub async fn up(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        fs::create_dir_all(&self.state)?;
        // nextest runs each test in its own process, and several may bring
        // the shared harness up at once: one `up` at a time per state dir.
        let lock = fs::File::create(self.state.join("up.lock"))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .context("locking the harness state dir")?;
        let ports = self.ports()?;
        let bin = tools::bin_dir()?;
        let need = |name: &str| -> anyhow::Result<PathBuf> {
            let p = bin.join(name);
            if !p.is_file() {
                bail!(
                    "{name} is not built in {}; run `bash conformance/tools/build.sh` first",
                    bin.display()
                );
            }
            Ok(p)
        };

        let mut waits: Vec<ServiceSpec> = Vec::new();
        if self.parts.databases {
            let pg = self.postgres(&ports)?;
            service::start(&self.state, &pg)?;
            let maria = self.mariadb(&ports)?;
            service::start(&self.state, &maria)?;
            waits.push(pg);
            waits.push(maria);
        }
        // The demo builds no registry (`build.sh --for demo`): skipped
        // when it is not built, as Flux and Jaeger are.
        if self.parts.registry && !bin.join("registry").is_file() {
            say(format!(
                "the OCI registry is not built in {}; skipping it (`bash conformance/tools/build.sh registry` builds it)",
                bin.display()
            ));
        } else if self.parts.registry {
            let reg = self.registry(&ports, need("registry")?)?;
            service::start(&self.state, &reg)?;
            waits.push(reg);
            let referrers = self.referrers_registry(&ports)?;
            service::start(&self.state, &referrers)?;
            waits.push(referrers);
        }
        if self.parts.git {
            for spec in gitserve::prepare(self, &ports)? {
                service::start(&self.state, &spec)?;
                waits.push(spec);
            }
        }
        // Jaeger needs nothing else: it starts before the control plane.
        let jaeger = if self.parts.jaeger {
            crate::jaeger::start(self, &ports)?
        } else {
            Vec::new()
        };
        waits.extend(jaeger.iter().cloned());
        if self.parts.control_plane {
            self.control_plane(&ports, &bin).await?;
            if self.parts.flux {
                waits.extend(crate::flux::start(self, &ports).await?);
            }
        }
        for spec in &waits {
            service::wait_port(&self.state, spec, Duration::from_secs(90))?;
        }
        if !jaeger.is_empty() {
            crate::jaeger::wait_healthy(self, &ports, Duration::from_secs(30)).await?;
        }
        if self.parts.databases {
            self.database_accounts(&ports)?;
        }
        self.write_env(&ports, &bin)?;
        say(format!(
            "up in {:.1}s; `source {}` for KUBECONFIG and the rest",
            started.elapsed().as_secs_f64(),
            self.env_file().display()
        ));
        Ok(())
    }

    async fn control_plane(&self, ports: &Ports, bin: &Path) -> anyhow::Result<()> {
        let pki = self.pki();
        pki.ensure(&[
            ClientIdentity {
                file: "admin",
                common_name: "ptah-harness-admin".into(),
                group: Some("system:masters".into()),
            },
            // The managers the tests start: their own user, so the audit
            // log holds their requests and no one else's.
            ClientIdentity {
                file: "operator",
                common_name: OPERATOR_USER.into(),
                group: Some("system:masters".into()),
            },
            ClientIdentity {
                file: "controller-manager",
                common_name: "system:kube-controller-manager".into(),
                group: None,
            },
            ClientIdentity {
                file: "scheduler",
                common_name: "system:kube-scheduler".into(),
                group: None,
            },
            ClientIdentity {
                file: "kubelet",
                common_name: format!("system:node:{NODE_NAME}"),
                group: Some("system:nodes".into()),
            },
        ])?;
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        for (file, user) in [
            ("kubeconfig", "admin"),
            ("operator.kubeconfig", "operator"),
            ("controller-manager.kubeconfig", "controller-manager"),
            ("scheduler.kubeconfig", "scheduler"),
            ("kubelet.kubeconfig", "kubelet"),
        ] {
            write_kubeconfig(&self.state.join(file), &server, &pki, user)?;
        }

        let etcd = ServiceSpec::new("etcd", bin.join("etcd"))
            .args([
                "--name=harness".to_string(),
                format!("--data-dir={}", self.state.join("etcd").display()),
                format!(
                    "--listen-client-urls=http://127.0.0.1:{}",
                    ports.etcd_client
                ),
                format!(
                    "--advertise-client-urls=http://127.0.0.1:{}",
                    ports.etcd_client
                ),
                format!("--listen-peer-urls=http://127.0.0.1:{}", ports.etcd_peer),
                format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                    ports.etcd_peer
                ),
                format!(
                    "--initial-cluster=harness=http://127.0.0.1:{}",
                    ports.etcd_peer
                ),
                "--unsafe-no-fsync=true".to_string(),
                "--quota-backend-bytes=4294967296".to_string(),
            ])
            .port(ports.etcd_client);
        say("starting etcd");
        service::start(&self.state, &etcd)?;
        service::wait_port(&self.state, &etcd, Duration::from_secs(30))?;

        let p = |f: &str| pki.path(f).display().to_string();
        let audit_policy = self.state.join("audit-policy.yaml");
        fs::write(&audit_policy, AUDIT_POLICY)?;
        let apiserver = ServiceSpec::new("kube-apiserver", bin.join("kube-apiserver"))
            .args([
                format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
                format!("--secure-port={}", ports.apiserver),
                "--bind-address=127.0.0.1".to_string(),
                "--advertise-address=127.0.0.1".to_string(),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                // Lets the controller-manager and scheduler delegate
                // authentication without complaining of a missing bundle.
                format!("--requestheader-client-ca-file={}", p("ca.crt")),
                "--requestheader-allowed-names=front-proxy-client".to_string(),
                "--requestheader-username-headers=X-Remote-User".to_string(),
                "--requestheader-group-headers=X-Remote-Group".to_string(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_string(),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
                "--api-audiences=https://kubernetes.default.svc.cluster.local".to_string(),
                "--service-cluster-ip-range=10.0.0.0/24".to_string(),
                "--authorization-mode=Node,RBAC".to_string(),
                "--enable-admission-plugins=NodeRestriction".to_string(),
                "--allow-privileged=true".to_string(),
                "--endpoint-reconciler-type=none".to_string(),
                // Webhooks and aggregated APIs are called at an endpoint of
                // their Service (a Pod IP and the targetPort) rather than at
                // its cluster IP, which nothing routes here (no kube-proxy).
                "--enable-aggregator-routing=true".to_string(),
                format!("--audit-policy-file={}", audit_policy.display()),
                format!("--audit-log-path={}", self.audit_log().display()),
                "--audit-log-format=json".to_string(),
                "--audit-log-maxsize=256".to_string(),
                // Six backups of 256 MB: a scale run of 1,000 writes over
                // a gigabyte, and a measured stretch reads across rotations.
                "--audit-log-maxbackup=6".to_string(),
                format!(
                    "--cert-dir={}",
                    self.state.join("apiserver-certs").display()
                ),
            ])
            .port(ports.apiserver);
        say("starting kube-apiserver");
        service::start(&self.state, &apiserver)?;
        self.wait_apiserver(Duration::from_secs(120)).await?;

        let cm = ServiceSpec::new(
            "kube-controller-manager",
            bin.join("kube-controller-manager"),
        )
        .args([
            format!(
                "--kubeconfig={}",
                self.state.join("controller-manager.kubeconfig").display()
            ),
            format!(
                "--authentication-kubeconfig={}",
                self.state.join("controller-manager.kubeconfig").display()
            ),
            format!(
                "--authorization-kubeconfig={}",
                self.state.join("controller-manager.kubeconfig").display()
            ),
            format!("--secure-port={}", ports.controller_manager),
            "--bind-address=127.0.0.1".to_string(),
            "--leader-elect=false".to_string(),
            "--use-service-account-credentials=true".to_string(),
            format!("--service-account-private-key-file={}", p("sa.key")),
            format!("--root-ca-file={}", p("ca.crt")),
            format!("--cluster-signing-cert-file={}", p("ca.crt")),
            format!("--cluster-signing-key-file={}", p("ca.key")),
            format!(
                "--cert-dir={}",
                self.state.join("controller-manager-certs").display()
            ),
            // Pods are garbage-collected once terminated beyond this count.
            "--terminated-pod-gc-threshold=500".to_string(),
        ])
        .port(ports.controller_manager);
        let scheduler = ServiceSpec::new("kube-scheduler", bin.join("kube-scheduler"))
            .args([
                format!(
                    "--kubeconfig={}",
                    self.state.join("scheduler.kubeconfig").display()
                ),
                format!(
                    "--authentication-kubeconfig={}",
                    self.state.join("scheduler.kubeconfig").display()
                ),
                format!(
                    "--authorization-kubeconfig={}",
                    self.state.join("scheduler.kubeconfig").display()
                ),
                format!("--secure-port={}", ports.scheduler),
                "--bind-address=127.0.0.1".to_string(),
                "--leader-elect=false".to_string(),
                format!(
                    "--cert-dir={}",
                    self.state.join("scheduler-certs").display()
                ),
            ])
            .port(ports.scheduler);
        self.write_images()?;
        self.kubelet_rbac().await?;
        let kubelet = ServiceSpec::new("process-kubelet", &self.kubelet_exe)
            .args([
                format!(
                    "--kubeconfig={}",
                    self.state.join("kubelet.kubeconfig").display()
                ),
                format!("--node-name={NODE_NAME}"),
                format!("--state-dir={}", self.kubelet_dir().display()),
                format!("--images={}", self.images_file().display()),
            ])
            .env("RUST_LOG", "info");
        say("starting kube-controller-manager, kube-scheduler and the process kubelet");
        for spec in [&cm, &scheduler] {
            service::start(&self.state, spec)?;
        }
        let kubelet_since = jiff::Timestamp::now();
        let kubelet_fresh = matches!(
            service::start(&self.state, &kubelet)?,
            service::Started::Now(_)
        );
        for spec in [&cm, &scheduler] {
            service::wait_port(&self.state, spec, Duration::from_secs(60))?;
        }
        // etcd keeps the last Ready condition across a restart: a kubelet
        // started now must also have renewed its node Lease since.
        self.wait_node_ready(
            kubelet_fresh.then_some(kubelet_since),
            Duration::from_secs(60),
        )
        .await?;
        Ok(())
    }

    /// What the process kubelet reads beyond a kubelet's own rules (the Node
    /// authorizer allows Services, not EndpointSlices): every EndpointSlice,
    /// for the Service names in its Pods' `/etc/hosts`.
    async fn kubelet_rbac(&self) -> anyhow::Result<()> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        use kube::api::{Api, Patch, PatchParams};
        const NAME: &str = "ptah-harness:process-kubelet";
        let client = self.client().await?;
        let apply = PatchParams::apply("ptah-harness").force();
        let role = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NAME},
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "verbs": ["get", "list", "watch"]}],
        });
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": format!("system:node:{NODE_NAME}")}],
        });
        Api::<ClusterRole>::all(client.clone())
            .patch(NAME, &apply, &Patch::Apply(&role))
            .await
            .context("the process kubelet's ClusterRole")?;
        Api::<ClusterRoleBinding>::all(client)
            .patch(NAME, &apply, &Patch::Apply(&binding))
            .await
            .context("the process kubelet's ClusterRoleBinding")?;
        Ok(())
    }

    /// An admin client for this harness.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        crate::install_crypto_provider();
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    async fn wait_apiserver(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let client = self.client().await?;
        loop {
            let req = http::Request::get("/readyz").body(Vec::new())?;
            let last = match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            service::ensure_alive(&self.state, "kube-apiserver")?;
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready within {timeout:?}: {last}\n{}",
                    service::log_tail(&self.state, "kube-apiserver", 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_node_ready(
        &self,
        renewed_since: Option<jiff::Timestamp>,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::api::core::v1::Node;
        let client = self.client().await?;
        let nodes: kube::Api<Node> = kube::Api::all(client.clone());
        let leases: kube::Api<Lease> = kube::Api::namespaced(client, "kube-node-lease");
        let deadline = Instant::now() + timeout;
        loop {
            let renewed = match renewed_since {
                None => true,
                Some(since) => leases
                    .get_opt(NODE_NAME)
                    .await?
                    .and_then(|l| l.spec)
                    .and_then(|s| s.renew_time)
                    .is_some_and(|t| t.0 >= since),
            };
            if !renewed {
                // Not yet: fall through to the liveness and deadline checks.
            } else if let Some(node) = nodes.get_opt(NODE_NAME).await? {
                let ready = node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if ready {
                    return Ok(());
                }
            }
            service::ensure_alive(&self.state, "process-kubelet")?;
            if Instant::now() > deadline {
                bail!(
                    "node {NODE_NAME} not Ready within {timeout:?}\n{}",
                    service::log_tail(&self.state, "process-kubelet", 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The image map of the process kubelet: each image reference is a
    /// directory whose files (symlinks resolved) appear at their paths in the
    /// container. The operator image holds the workspace's binaries; the
    /// executor image the runner and the pinned `ptah`.
    fn write_images(&self) -> anyhow::Result<()> {
        let images = self.state.join("images");
        let bin = tools::bin_dir()?;
        let link = |image: &str, name: &str, target: PathBuf| -> anyhow::Result<()> {
            let dir = images.join(image).join("usr/local/bin");
            fs::create_dir_all(&dir)?;
            let at = dir.join(name);
            let _ = fs::remove_file(&at);
            std::os::unix::fs::symlink(target, at)?;
            Ok(())
        };
        for name in ["ptah-operator", "ptah-runner", "kubectl-ptah"] {
            link("operator", name, self.target_dir.join(name))?;
        }
        link(
            "executor",
            "ptah-runner",
            self.target_dir.join("ptah-runner"),
        )?;
        // The executor is linked only when it could be built (docs/executor.md).
        let ptah = bin.join("ptah");
        let ptah_link = images.join("executor/usr/local/bin/ptah");
        if ptah.is_file() {
            link("executor", "ptah", ptah)?;
        } else if ptah_link.is_symlink() {
            fs::remove_file(ptah_link)?;
        }
        fs::create_dir_all(images.join("base"))?;
        let map: BTreeMap<&str, PathBuf> = [
            (OPERATOR_IMAGE, images.join("operator")),
            (OPERATOR_IMAGE_PINNED, images.join("operator")),
            (EXECUTOR_IMAGE, images.join("executor")),
            (EXECUTOR_IMAGE_PINNED, images.join("executor")),
            (BASE_IMAGE, images.join("base")),
        ]
        .into_iter()
        .collect();
        // The process kubelet reads it while `up` runs again.
        write_whole(
            &self.images_file(),
            &serde_json::to_string_pretty(&map)?,
            0o644,
        )
    }

    fn postgres(&self, ports: &Ports) -> anyhow::Result<ServiceSpec> {
        let data = self.db_root()?.join("postgres");
        let sock = self.db_root()?.join("postgres-socket");
        let (uid, gid) = system_user("postgres")?;
        if !data.join("PG_VERSION").is_file() {
            say("initialising PostgreSQL");
            let password = self.password("postgres")?;
            fs::create_dir_all(&data)?;
            let pwfile = self.db_root()?.join("postgres.pw");
            fs::write(&pwfile, &password)?;
            chown_r(&data, uid, gid)?;
            chown_r(&pwfile, uid, gid)?;
            run(Command::new(pg_bin("initdb")?)
                .args(["-D"])
                .arg(&data)
                .args([
                    "-U",
                    "postgres",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-sync",
                ])
                .arg(format!("--pwfile={}", pwfile.display()))
                .uid(uid)
                .gid(gid))
            .context("initdb")?;
            fs::remove_file(&pwfile)?;
        }
        fs::create_dir_all(&sock)?;
        chown_r(&sock, uid, gid)?;
        Ok(ServiceSpec::new("postgres", pg_bin("postgres")?)
            .args([
                "-D".to_string(),
                data.display().to_string(),
                "-p".to_string(),
                ports.postgres.to_string(),
                "-k".to_string(),
                sock.display().to_string(),
                "-c".to_string(),
                "listen_addresses=127.0.0.1".to_string(),
                "-c".to_string(),
                "fsync=off".to_string(),
                "-c".to_string(),
                "max_connections=200".to_string(),
            ])
            .user(uid, gid)
            .port(ports.postgres))
    }

    fn mariadb(&self, ports: &Ports) -> anyhow::Result<ServiceSpec> {
        let data = self.db_root()?.join("mariadb");
        // Its temporary tables in a directory of its own, not the shared
        // /tmp: harnesses initialised side by side lost each other's there.
        let tmp = self.db_root()?.join("mariadb-tmp");
        let (uid, gid) = system_user("mysql")?;
        fs::create_dir_all(&tmp)?;
        chown_r(&tmp, uid, gid)?;
        if !data.join("mysql").is_dir() {
            say("initialising MariaDB");
            fs::create_dir_all(&data)?;
            chown_r(&data, uid, gid)?;
            run(Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    "--user=mysql",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ])
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--tmpdir={}", tmp.display())))
            .context("mariadb-install-db")?;
        }
        Ok(ServiceSpec::new("mariadb", "/usr/sbin/mariadbd")
            .args([
                "--no-defaults".to_string(),
                format!("--datadir={}", data.display()),
                format!("--tmpdir={}", tmp.display()),
                format!("--port={}", ports.mariadb),
                "--bind-address=127.0.0.1".to_string(),
                format!("--socket={}", self.mariadb_socket().display()),
                format!("--pid-file={}", data.join("mariadbd.pid").display()),
                "--skip-name-resolve".to_string(),
                "--innodb-flush-log-at-trx-commit=0".to_string(),
                "--max-connections=200".to_string(),
            ])
            .user(uid, gid)
            .port(ports.mariadb))
    }

    fn mariadb_socket(&self) -> PathBuf {
        self.db_root()
            .unwrap_or_else(|_| self.state.clone())
            .join("mariadb")
            .join("mariadbd.sock")
    }

    /// Where the databases keep their data. They run as their own system
    /// users, who must be able to reach it: when the state dir sits below a
    /// directory others cannot enter (a checkout under /root, say), the data
    /// goes to a directory under /tmp named from the state dir instead.
    pub fn db_root(&self) -> anyhow::Result<PathBuf> {
        let state = fs::canonicalize(&self.state).unwrap_or_else(|_| self.state.clone());
        let reachable = state
            .ancestors()
            .all(|dir| fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
        if reachable {
            return Ok(state);
        }
        use sha2::Digest;
        let key = hex::encode(sha2::Sha256::digest(state.as_os_str().as_encoded_bytes()));
        let dir = PathBuf::from("/tmp").join(format!("ptah-harness-{}", &key[..12]));
        fs::create_dir_all(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        Ok(dir)
    }

    /// A password kept in `secrets/<name>.password`, made once.
    fn password(&self, name: &str) -> anyhow::Result<String> {
        let path = self.secret_file(&format!("{name}.password"));
        if let Ok(p) = fs::read_to_string(&path) {
            return Ok(p.trim().to_string());
        }
        fs::create_dir_all(path.parent().expect("secrets dir"))?;
        let mut bytes = [0u8; 18];
        fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let password = hex::encode(bytes);
        write_private(&path, &password)?;
        Ok(password)
    }

    /// The admin accounts the tests use, and their URLs in `secrets/`: never
    /// in the env file, which `env` prints.
    fn database_accounts(&self, ports: &Ports) -> anyhow::Result<()> {
        let pg_password = self.password("postgres")?;
        write_private(
            &self.secret_file("postgres.url"),
            &format!(
                "postgres://postgres:{pg_password}@127.0.0.1:{}/postgres?sslmode=disable",
                ports.postgres
            ),
        )?;
        let maria_password = self.password("mariadb")?;
        let url_file = self.secret_file("mariadb.url");
        if !url_file.is_file() {
            let sql = format!(
                "CREATE USER IF NOT EXISTS 'ptah'@'%' IDENTIFIED BY '{maria_password}';\
                 GRANT ALL PRIVILEGES ON *.* TO 'ptah'@'%' WITH GRANT OPTION;"
            );
            run(Command::new("mariadb")
                .arg(format!("--socket={}", self.mariadb_socket().display()))
                .args(["-uroot", "-e", &sql]))
            .context("creating the MariaDB account")?;
            write_private(
                &url_file,
                &format!(
                    "mysql://ptah:{maria_password}@127.0.0.1:{}/mysql",
                    ports.mariadb
                ),
            )?;
        }
        Ok(())
    }

    fn registry(&self, ports: &Ports, program: PathBuf) -> anyhow::Result<ServiceSpec> {
        let dir = self.state.join("registry");
        fs::create_dir_all(dir.join("data"))?;
        let config = dir.join("config.yml");
        fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{}\n",
                dir.join("data").display(),
                ports.registry
            ),
        )?;
        Ok(ServiceSpec::new("registry", program)
            .args(["serve".to_string(), config.display().to_string()])
            .env("OTEL_TRACES_EXPORTER", "none")
            .port(ports.registry))
    }

    /// The second registry, ours (`oci-registry`, which cargo builds beside
    /// `ptah-harness`): it serves the OCI 1.1 referrers API natively, which
    /// distribution v3 does not.
    fn referrers_registry(&self, ports: &Ports) -> anyhow::Result<ServiceSpec> {
        let program = self.target_dir.join("oci-registry");
        if !program.is_file() {
            bail!(
                "{} is not built; run `cargo build -p conformance --bins` first",
                program.display()
            );
        }
        let root = self.state.join("referrers-registry");
        fs::create_dir_all(&root)?;
        Ok(ServiceSpec::new("referrers-registry", program)
            .args([
                format!("--listen=127.0.0.1:{}", ports.referrers_registry),
                format!("--root={}", root.display()),
            ])
            .port(ports.referrers_registry))
    }

    /// The variables a shell or a test needs. Secrets stay in files named here.
    pub fn env_vars(&self, ports: &Ports, bin: &Path) -> Vec<(String, String)> {
        let mut vars = vec![
            ("PTAH_HARNESS_DIR", self.state.display().to_string()),
            ("KUBECONFIG", self.kubeconfig().display().to_string()),
            ("PTAH_TOOLS_BIN", bin.display().to_string()),
            (
                "PTAH_KUBE_APISERVER",
                format!("https://127.0.0.1:{}", ports.apiserver),
            ),
            ("PTAH_KUBELET_DIR", self.kubelet_dir().display().to_string()),
            (
                "PTAH_PG_URL_FILE",
                self.secret_file("postgres.url").display().to_string(),
            ),
            (
                "PTAH_MARIADB_URL_FILE",
                self.secret_file("mariadb.url").display().to_string(),
            ),
            ("PTAH_REGISTRY", format!("127.0.0.1:{}", ports.registry)),
            (
                "PTAH_REFERRERS_REGISTRY",
                format!("127.0.0.1:{}", ports.referrers_registry),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect::<Vec<_>>();
        vars.extend(gitserve::env(self, ports));
        // Only where Jaeger runs (a part, and built).
        if self.parts.jaeger && matches!(crate::jaeger::binary(), Ok(Some(_))) {
            vars.push((
                "PTAH_OTLP_ENDPOINT".to_string(),
                crate::jaeger::otlp_endpoint(ports),
            ));
            vars.push((
                "PTAH_TRACES_URL".to_string(),
                crate::jaeger::traces_url(ports),
            ));
        }
        vars
    }

    fn write_env(&self, ports: &Ports, bin: &Path) -> anyhow::Result<()> {
        let mut out = String::from("# Written by `ptah-harness up`; holds no secret.\n");
        for (k, v) in self.env_vars(ports, bin) {
            out.push_str(&format!("export {k}={}\n", shell_quote(&v)));
        }
        // The pinned kubectl (and etcd, helm, cosign) first on PATH, and the
        // workspace's binaries, so `kubectl ptah` finds its plugin.
        out.push_str(&format!(
            "export PATH={}:{}:\"$PATH\"\n",
            shell_quote(&bin.display().to_string()),
            shell_quote(&self.target_dir.display().to_string())
        ));
        // Tests read it while another test process runs `up`.
        write_whole(&self.env_file(), &out, 0o644)
    }

    /// Stops every recorded process, the kubelet first so it can end its
    /// pods, then the control plane from the top down. Returns the pids.
    pub fn down(&self) -> anyhow::Result<Vec<(String, i32)>> {
        let order = [
            crate::flux::KUSTOMIZE_CONTROLLER,
            crate::flux::SOURCE_CONTROLLER,
            "process-kubelet",
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
            "etcd",
            crate::jaeger::SERVICE,
        ];
        let mut names: Vec<String> = order.iter().map(|s| s.to_string()).collect();
        for (name, _) in service::recorded(&self.state) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let mut stopped = Vec::new();
        for name in names {
            if let Some(pid) = service::stop(&self.state, &name, Duration::from_secs(15))? {
                say(format!("stopped {name} (pid {pid})"));
                stopped.push((name, pid));
            }
        }
        Ok(stopped)
    }

    /// One line per recorded process: running or not.
    pub fn status(&self) -> Vec<(String, Option<i32>)> {
        service::recorded(&self.state)
            .into_iter()
            .map(|(name, rec)| (name, rec.map(|r| r.pid)))
            .collect()
    }

    /// The env file's variables, after `up`.
    pub fn env(&self) -> anyhow::Result<String> {
        fs::read_to_string(self.env_file())
            .with_context(|| format!("no {}; run `up` first", self.env_file().display()))
    }
}

/// Image references the process kubelet maps to directories.
pub const OPERATOR_IMAGE: &str = "ghcr.io/ptah-run/ptah-operator:dev";
pub const EXECUTOR_IMAGE: &str = "ghcr.io/ptah-run/ptah-executor:dev";
/// [`OPERATOR_IMAGE`] pinned by a digest (a fixed value, not the digest of
/// any real image): the Job builder takes only images pinned by digest.
pub const OPERATOR_IMAGE_PINNED: &str = "ghcr.io/ptah-run/ptah-operator@sha256:adadadadadadadadadadadadadadadadadadadadadadadadadadadadadadadad";
/// [`EXECUTOR_IMAGE`] pinned by a digest, likewise.
pub const EXECUTOR_IMAGE_PINNED: &str = "ghcr.io/ptah-run/ptah-executor@sha256:aeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeae";
/// An image with nothing of its own: the sandbox's base (the host's /usr,
/// /bin, /lib read-only) gives it a shell and coreutils, for tests.
pub const BASE_IMAGE: &str = "docker.io/library/busybox:1.36";

/// Writes a file only its owner reads. Another process (a test reading the
/// database URL while its neighbour runs `up`) sees the old file or the new
/// one, never a half-written one: the text goes to a temporary file in the
/// same directory, renamed over the old.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    write_whole(path, text, 0o600)
}

/// Writes `text` to `path` with `mode`, whole: readers see the old file or
/// the new one. Unchanged text is not written again.
fn write_whole(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))?;
    tmp.write_all(text.as_bytes())?;
    tmp.persist(path)
        .map_err(|e| anyhow::anyhow!("writing {}: {}", path.display(), e.error))?;
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}{}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn pg_bin(name: &str) -> anyhow::Result<PathBuf> {
    let mut versions: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL is not installed (/usr/lib/postgresql)")?
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .with_context(|| format!("no PostgreSQL {name} under /usr/lib/postgresql/*/bin"))
}

fn system_user(name: &str) -> anyhow::Result<(u32, u32)> {
    let user = nix::unistd::User::from_name(name)?
        .with_context(|| format!("system user {name} does not exist"))?;
    Ok((user.uid.as_raw(), user.gid.as_raw()))
}

fn chown_r(path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_r(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The user the managers tests start authenticate as.
pub const OPERATOR_USER: &str = "ptah-operator";

/// Metadata of the managers' requests once they complete; nothing of anyone
/// else's (the tests' own clients, the control plane).
/// Every request of the managers, and every create of what only a
/// person's decision or the manager's Resolve makes (approvals, plans,
/// ConfigMaps), whoever asks: the preview test reads what a preview made.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [ptah-operator]
- level: Metadata
  verbs: [create]
  resources:
  - group: operator.ptah.run
    resources: [ptahschemaapprovals, ptahmigrationapprovals, ptahschemaplans, ptahschemaplanchunks, ptahmigrationplans]
  - group: \"\"
    resources: [configmaps]
- level: None
";

fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, user: &str) -> anyhow::Result<()> {
    use base64::Engine;
    let b64 = |f: PathBuf| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(fs::read(f)?))
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "harness", "cluster": {
            "server": server,
            "certificate-authority-data": b64(pki.ca_cert())?,
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(pki.path(&format!("{user}.crt")))?,
            "client-key-data": b64(pki.path(&format!("{user}.key")))?,
        }}],
        "contexts": [{"name": "harness", "context": {"cluster": "harness", "user": user}}],
        "current-context": "harness",
    });
    write_private(path, &serde_json::to_string_pretty(&config)?)
}
