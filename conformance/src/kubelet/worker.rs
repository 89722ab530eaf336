//! One task per Pod bound to the node: it performs what
//! [`lifecycle::decide`] asks (volumes, container starts, stops, the final
//! delete), reports container exits back into [`Observed`], and writes the
//! status [`status::pod_status`] computes whenever it changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodStatus, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::downward::NodeFacts;
use super::envvars::{self, Env, Lookup, Refs, Wanted};
use super::hosts::{self, ServiceAddrs};
use super::images::ImageMap;
use super::lifecycle::{self, Effect, Observed, RunState, Stop, Terminated, Which};
use super::sandbox::{self, Mount, RealFs, SandboxSpec};
use super::status::{self, StatusContext};
use super::volumes::{self, TokenWanted, VolumeKind};

/// What every pod worker shares.
pub struct Ctx {
    pub client: kube::Client,
    pub state_dir: PathBuf,
    pub images: ImageMap,
    pub facts: NodeFacts,
    /// `KUBERNETES_SERVICE_HOST` and friends: the API server as pods reach it.
    pub service_env: Vec<(String, String)>,
    /// Where `emptyDir` volumes with `medium: Memory` live (a tmpfs).
    pub memory_root: PathBuf,
    /// Every Service's ready endpoint addresses, for the Pods' `/etc/hosts`.
    pub services: watch::Receiver<Arc<ServiceAddrs>>,
}

/// The latest Pod object, and whether it is gone from the API.
#[derive(Debug, Clone)]
pub struct PodFeed {
    pub pod: Arc<Pod>,
    pub gone: bool,
}

struct Proc {
    bwrap_pid: i32,
    log: PathBuf,
    log_offset: u64,
    termination_file: PathBuf,
    fallback_to_logs: bool,
}

struct Exit {
    which: Which,
    status: std::io::Result<std::process::ExitStatus>,
    at: Timestamp,
}

/// How often content volumes (configMap, secret, projected, downwardAPI)
/// are rewritten while the pod runs, as the kubelet's sync does.
const VOLUME_RESYNC: Duration = Duration::from_secs(60);
/// How soon a start that failed on configuration is retried, at most.
const CONFIG_RETRY: Duration = Duration::from_secs(2);

/// The retry delay after `attempt` failures: quick at first (the Node
/// authorizer learns of a new pod's Secrets and ServiceAccount a moment
/// after the pod is bound), then every [`CONFIG_RETRY`].
pub fn retry_delay(attempt: u32) -> Duration {
    (Duration::from_millis(250) * 2u32.saturating_pow(attempt.min(8))).min(CONFIG_RETRY)
}
/// Termination messages: at most 4096 bytes from the file; the log
/// fallback takes at most 80 lines and 2048 bytes, as the kubelet does.
const MAX_MESSAGE: u64 = 4096;
const FALLBACK_LINES: usize = 80;
const FALLBACK_BYTES: usize = 2048;

/// `<state-dir>/pods/<namespace>_<name>_<uid>`.
pub fn pod_dir(state_dir: &Path, pod: &Pod) -> PathBuf {
    let m = &pod.metadata;
    state_dir.join("pods").join(format!(
        "{}_{}_{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    ))
}

/// `name_namespace(uid)`, the kubelet's way of naming a pod in messages.
fn pod_ref(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    )
}

fn later(now: Timestamp, d: Duration) -> Timestamp {
    now.checked_add(d).unwrap_or(now)
}

struct Worker {
    ctx: Arc<Ctx>,
    /// The node's facts with this Pod's IP.
    facts: NodeFacts,
    services: Arc<ServiceAddrs>,
    pod: Arc<Pod>,
    gone: bool,
    obs: Observed,
    procs: HashMap<Which, Proc>,
    exits_tx: mpsc::UnboundedSender<Exit>,
    kill_at: Option<Instant>,
    killed: bool,
    last_status: Option<PodStatus>,
    last_patch: Option<serde_json::Value>,
    tokens: BTreeMap<TokenWanted, (String, Timestamp)>,
    volumes: BTreeMap<String, PathBuf>,
    last_resync: Instant,
    warned: BTreeSet<String>,
    /// Failed attempts at the volumes and at each container's start.
    attempts: HashMap<Option<Which>, u32>,
}

/// Runs one pod, whose address is `pod_ip`, until it is gone from the API
/// (or the kubelet stops).
pub async fn run(
    ctx: Arc<Ctx>,
    mut feed: watch::Receiver<PodFeed>,
    mut shutdown: watch::Receiver<bool>,
    pod_ip: String,
) {
    let first = feed.borrow_and_update().clone();
    let mut services = ctx.services.clone();
    let mut services_open = true;
    let facts = NodeFacts {
        pod_ip,
        ..ctx.facts.clone()
    };
    let (exits_tx, mut exits_rx) = mpsc::unbounded_channel();
    let mut obs = Observed::adopt(&first.pod, Timestamp::now());
    if obs.start_time.is_none() {
        obs.start_time = Some(Timestamp::now());
    }
    let mut w = Worker {
        facts,
        services: services.borrow_and_update().clone(),
        ctx,
        pod: first.pod,
        gone: first.gone,
        obs,
        procs: HashMap::new(),
        exits_tx,
        kill_at: None,
        killed: false,
        last_status: None,
        last_patch: None,
        tokens: BTreeMap::new(),
        volumes: BTreeMap::new(),
        last_resync: Instant::now(),
        warned: BTreeSet::new(),
        attempts: HashMap::new(),
    };
    if w.gone {
        w.obs.stop = Some(Stop::Deleted);
    }
    w.warn_unsupported();
    info!(pod = %pod_ref(&w.pod), pod_ip = %w.facts.pod_ip, "pod worker started");
    let mut shutting_down = *shutdown.borrow();
    loop {
        if shutting_down {
            w.obs.stop = Some(Stop::Shutdown);
            if !w.killed {
                for p in w.procs.values() {
                    super::process::kill_sandbox(p.bwrap_pid);
                }
                w.killed = true;
            }
        } else {
            w.step().await;
            w.write_status().await;
        }
        if w.procs.is_empty() && (w.gone || shutting_down) {
            break;
        }
        let idle = w.procs.is_empty()
            && status::phase(&w.pod, &w.obs).is_terminal()
            && w.pod.metadata.deletion_timestamp.is_none();
        let tick = if idle {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(1)
        };
        tokio::select! {
            changed = feed.changed(), if !shutting_down => {
                match changed {
                    Ok(()) => {
                        let f = feed.borrow_and_update().clone();
                        w.pod = f.pod;
                        if f.gone && !w.gone {
                            w.gone = true;
                            w.obs.stop.get_or_insert(Stop::Deleted);
                        }
                    }
                    // The dispatcher is gone: the kubelet is stopping.
                    Err(_) => shutting_down = true,
                }
            }
            Some(exit) = exits_rx.recv() => w.on_exit(exit),
            changed = services.changed(), if services_open && !shutting_down => match changed {
                Ok(()) => {
                    w.services = services.borrow_and_update().clone();
                    w.refresh_hosts();
                }
                Err(_) => services_open = false,
            },
            _ = shutdown.changed(), if !shutting_down => shutting_down = true,
            _ = tokio::time::sleep(tick) => {}
        }
        // Drain every exit already reported before deciding again.
        while let Ok(exit) = exits_rx.try_recv() {
            w.on_exit(exit);
        }
        if !shutting_down {
            w.check_kill_deadline();
            w.resync_volumes().await;
        }
    }
    if w.gone {
        w.cleanup();
    }
    info!(pod = %pod_ref(&w.pod), "pod worker done");
}

impl Worker {
    fn ns(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
    fn dir(&self) -> PathBuf {
        pod_dir(&self.ctx.state_dir, &self.pod)
    }
    /// The Pod's `hosts` and `host.conf`, bound at [`hosts::POD_DIR`].
    fn network_dir(&self) -> PathBuf {
        self.dir().join("network")
    }
    fn container(&self, which: Which) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        match which {
            Which::Init(i) => spec.init_containers.as_ref()?.get(i),
            Which::Main(i) => spec.containers.get(i),
        }
    }

    /// Says once per pod what the process kubelet does not do for it.
    fn warn_unsupported(&mut self) {
        let Some(spec) = self.pod.spec.clone() else {
            return;
        };
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            let mut notes = Vec::new();
            if c.readiness_probe.is_some()
                || c.liveness_probe.is_some()
                || c.startup_probe.is_some()
            {
                notes.push("probes are not run (a running container counts as started and ready)");
            }
            if c.lifecycle.is_some() {
                notes.push("lifecycle hooks are not run");
            }
            let limited = c.resources.as_ref().is_some_and(|r| {
                r.limits.as_ref().is_some_and(|l| !l.is_empty())
                    || r.requests.as_ref().is_some_and(|l| !l.is_empty())
            });
            if limited {
                notes.push("resources are recorded, not enforced");
            }
            for n in notes {
                if self.warned.insert(format!("{}:{n}", c.name)) {
                    warn!(pod = %pod_ref(&self.pod), container = %c.name, "{n}");
                }
            }
        }
        for v in spec.volumes.iter().flatten() {
            if let Some(e) = &v.empty_dir
                && e.size_limit.is_some()
                && self.warned.insert(format!("volume:{}", v.name))
            {
                warn!(pod = %pod_ref(&self.pod), volume = %v.name, "emptyDir sizeLimit is recorded, not enforced");
            }
        }
    }

    /// Performs effects until nothing more can happen right now.
    async fn step(&mut self) {
        for _ in 0..8 {
            let now = Timestamp::now();
            let effects = lifecycle::decide(&self.pod, &self.obs, now);
            if effects.is_empty() {
                return;
            }
            let mut progressed = false;
            for e in effects {
                progressed |= self.apply(e, now).await;
            }
            if !progressed {
                return;
            }
        }
    }

    async fn apply(&mut self, effect: Effect, now: Timestamp) -> bool {
        match effect {
            Effect::SetupSandbox => match self.setup_volumes().await {
                Ok(()) => {
                    self.obs.sandbox_ready = true;
                    self.obs.sandbox_message = None;
                    self.attempts.remove(&None);
                    true
                }
                Err(msg) => {
                    let attempt = self.attempts.entry(None).or_insert(0);
                    *attempt += 1;
                    // The first failures are usually the authorizer catching up.
                    if *attempt > 2 && self.obs.sandbox_message.as_deref() != Some(msg.as_str()) {
                        warn!(pod = %pod_ref(&self.pod), "{msg}");
                    }
                    let delay = retry_delay(*attempt - 1);
                    self.obs.sandbox_message = Some(msg);
                    self.obs.sandbox_not_before = Some(later(now, delay));
                    false
                }
            },
            Effect::Start(which) => self.start(which, now).await,
            Effect::StopAll { grace } => {
                let deadline = Instant::now() + grace;
                match self.kill_at {
                    None => {
                        info!(pod = %pod_ref(&self.pod), grace = ?grace, "stopping containers (SIGTERM)");
                        for p in self.procs.values() {
                            super::process::terminate(p.bwrap_pid);
                        }
                        self.kill_at = Some(deadline);
                    }
                    // A second delete may shorten the grace period.
                    Some(at) if deadline < at => self.kill_at = Some(deadline),
                    Some(_) => {}
                }
                self.check_kill_deadline();
                false
            }
            Effect::MarkDeadlineExceeded => {
                info!(pod = %pod_ref(&self.pod), "active deadline exceeded");
                self.obs.stop = Some(Stop::DeadlineExceeded);
                true
            }
            Effect::FinalDelete => {
                // The terminal status first, so the Job controller sees it.
                self.write_status().await;
                self.final_delete().await;
                false
            }
        }
    }

    fn check_kill_deadline(&mut self) {
        if let Some(at) = self.kill_at
            && Instant::now() >= at
            && !self.procs.is_empty()
            && !self.killed
        {
            info!(pod = %pod_ref(&self.pod), "grace period over (SIGKILL)");
            for p in self.procs.values() {
                super::process::kill_sandbox(p.bwrap_pid);
            }
            self.killed = true;
        }
    }

    async fn final_delete(&mut self) {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.ns());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid().to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(self.name(), &dp).await {
            Ok(_) => {
                info!(pod = %pod_ref(&self.pod), "pod deleted");
                self.obs.final_delete_sent = true;
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                self.obs.final_delete_sent = true;
            }
            Err(e) => warn!(pod = %pod_ref(&self.pod), "final delete failed, will retry: {e}"),
        }
    }

    // ---- volumes -------------------------------------------------------

    async fn fetch(&self, wanted: &Wanted) -> Refs {
        let mut refs = Refs::default();
        let cms: Api<ConfigMap> = Api::namespaced(self.ctx.client.clone(), self.ns());
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), self.ns());
        for name in &wanted.config_maps {
            let got = match cms.get_opt(name).await {
                Ok(Some(cm)) => Lookup::Found(cm),
                Ok(None) => Lookup::NotFound,
                Err(e) => Lookup::Failed(e.to_string()),
            };
            refs.config_maps.insert(name.clone(), got);
        }
        for name in &wanted.secrets {
            let got = match secrets.get_opt(name).await {
                Ok(Some(s)) => Lookup::Found(s),
                Ok(None) => Lookup::NotFound,
                Err(e) => Lookup::Failed(e.to_string()),
            };
            refs.secrets.insert(name.clone(), got);
        }
        refs
    }

    /// A token bound to this pod, minted through the TokenRequest API and
    /// reused until 80% of its lifetime has passed, as the kubelet does.
    async fn token(&mut self, want: &TokenWanted) -> Result<String, String> {
        let now = Timestamp::now();
        if let Some((token, refresh_at)) = self.tokens.get(want)
            && now < *refresh_at
        {
            return Ok(token.clone());
        }
        let sa = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_string());
        let api: Api<ServiceAccount> = Api::namespaced(self.ctx.client.clone(), self.ns());
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                // None: the API server's own audiences.
                audiences: (!want.audience.is_empty()).then(|| vec![want.audience.clone()]),
                expiration_seconds: Some(want.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(self.name().to_string()),
                    uid: Some(self.uid().to_string()),
                }),
            }),
            ..TokenRequest::default()
        };
        let minted = api
            .create_token_request(&sa, &PostParams::default(), &request)
            .await
            .map_err(|e| format!("requesting a token for service account {sa:?}: {e}"))?;
        let status = minted.status.unwrap_or_default();
        let token = status
            .token
            .ok_or_else(|| format!("the token request for {sa:?} returned no token"))?;
        let lifetime = match status.expiration_timestamp {
            Some(exp) => exp.0.duration_since(now).unsigned_abs(),
            None => Duration::from_secs(want.expiration_seconds.max(0) as u64),
        };
        let refresh_at = later(now, lifetime.mul_f64(0.8));
        self.tokens
            .insert(want.clone(), (token.clone(), refresh_at));
        Ok(token)
    }

    async fn content_files(
        &mut self,
        v: &k8s_openapi::api::core::v1::Volume,
    ) -> Result<Vec<volumes::FileEntry>, String> {
        let (wanted, token_wants) = volumes::wanted(v);
        let refs = self.fetch(&wanted).await;
        let mut tokens = BTreeMap::new();
        for t in token_wants {
            let token = self.token(&t).await?;
            tokens.insert(t, token);
        }
        volumes::files(&self.pod, v, &refs, &tokens, &self.facts)
    }

    fn fs_group(&self) -> Option<u32> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.fs_group)
            .and_then(|g| u32::try_from(g).ok())
    }

    /// Every volume of the pod on disk. The error is the kubelet's
    /// `MountVolume.SetUp failed` message.
    async fn setup_volumes(&mut self) -> Result<(), String> {
        let spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let fs_group = self.fs_group();
        let root = self.dir().join("volumes");
        for v in &spec_volumes {
            let fail =
                |msg: String| format!("MountVolume.SetUp failed for volume {:?} : {msg}", v.name);
            let kind = volumes::kind(v).map_err(fail)?;
            let dir = match kind {
                VolumeKind::EmptyDir { memory } => {
                    let dir = if memory {
                        self.ctx.memory_root.join(self.uid()).join(&v.name)
                    } else {
                        root.join("kubernetes.io~empty-dir").join(&v.name)
                    };
                    make_empty_dir(&dir, fs_group).map_err(|e| fail(e.to_string()))?;
                    dir
                }
                VolumeKind::Content => {
                    let plugin = if v.config_map.is_some() {
                        "kubernetes.io~configmap"
                    } else if v.secret.is_some() {
                        "kubernetes.io~secret"
                    } else if v.downward_api.is_some() {
                        "kubernetes.io~downward-api"
                    } else {
                        "kubernetes.io~projected"
                    };
                    let dir = root.join(plugin).join(&v.name);
                    let files = self.content_files(v).await.map_err(fail)?;
                    volumes::atomic_write(&dir, &files, fs_group)
                        .map_err(|e| fail(e.to_string()))?;
                    dir
                }
                VolumeKind::HostPath { path, type_ } => {
                    host_path(&path, &type_).map_err(fail)?;
                    path
                }
            };
            self.volumes.insert(v.name.clone(), dir);
        }
        self.write_network_files()
            .map_err(|e| format!("writing the pod's /etc/hosts: {e}"))?;
        self.last_resync = Instant::now();
        Ok(())
    }

    /// The Pod's `/etc/hosts` from the latest Service addresses, and the
    /// `/etc/host.conf` that makes glibc return all of a name's addresses.
    fn write_network_files(&self) -> std::io::Result<()> {
        let dir = self.network_dir();
        let names = hosts::PodNames::of(&self.pod, &self.facts.pod_ip);
        if hosts::replace_file(&dir.join("hosts"), &hosts::render(&names, &self.services))? {
            debug!(pod = %pod_ref(&self.pod), "hosts file written");
        }
        hosts::replace_file(&dir.join("host.conf"), hosts::HOST_CONF)?;
        Ok(())
    }

    /// Follows a change of the Services' endpoints while the Pod runs.
    fn refresh_hosts(&self) {
        if !self.obs.sandbox_ready || status::phase(&self.pod, &self.obs).is_terminal() {
            return;
        }
        if let Err(e) = self.write_network_files() {
            warn!(pod = %pod_ref(&self.pod), "updating the pod's /etc/hosts: {e}");
        }
    }

    /// Rewrites content volumes (a changed ConfigMap, a token near expiry).
    async fn resync_volumes(&mut self) {
        if !self.obs.sandbox_ready
            || self.procs.is_empty()
            || self.last_resync.elapsed() < VOLUME_RESYNC
        {
            return;
        }
        self.last_resync = Instant::now();
        let spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let fs_group = self.fs_group();
        for v in &spec_volumes {
            if volumes::kind(v) != Ok(VolumeKind::Content) {
                continue;
            }
            let Some(dir) = self.volumes.get(&v.name).cloned() else {
                continue;
            };
            match self.content_files(v).await {
                Ok(files) => match volumes::atomic_write(&dir, &files, fs_group) {
                    Ok(true) => {
                        debug!(pod = %pod_ref(&self.pod), volume = %v.name, "volume updated")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        warn!(pod = %pod_ref(&self.pod), volume = %v.name, "updating volume: {e}")
                    }
                },
                Err(e) => {
                    warn!(pod = %pod_ref(&self.pod), volume = %v.name, "updating volume: {e}")
                }
            }
        }
    }

    fn cleanup(&self) {
        let dir = self.dir();
        let _ = fs::remove_dir_all(dir.join("volumes"));
        let _ = fs::remove_dir_all(dir.join("containers"));
        let _ = fs::remove_dir_all(self.network_dir());
        let _ = fs::remove_dir_all(self.ctx.memory_root.join(self.uid()));
    }

    // ---- containers ----------------------------------------------------

    /// Tries to start a container; returns whether it started or ended.
    async fn start(&mut self, which: Which, now: Timestamp) -> bool {
        let Some(c) = self.container(which).cloned() else {
            return false;
        };
        match self.prepare(which, &c).await {
            Ok(Prepared::Spawn(launch)) => self.spawn(which, &c, *launch),
            Ok(Prepared::CannotRun { exit_code, message }) => {
                warn!(pod = %pod_ref(&self.pod), container = %c.name, "{message}");
                let t = Terminated {
                    exit_code,
                    signal: None,
                    reason: "ContainerCannotRun".into(),
                    message: Some(message),
                    started_at: None,
                    finished_at: now,
                    container_id: None,
                };
                self.record_exit(which, &c.name, t, now);
                true
            }
            Err((reason, message, retry)) => {
                let unchanged = matches!(
                    self.obs.run(which).map(|r| &r.state),
                    Some(RunState::Waiting { reason: Some(r), message: Some(m) }) if *r == reason && *m == message
                );
                if !unchanged {
                    warn!(pod = %pod_ref(&self.pod), container = %c.name, "{reason}: {message}");
                }
                let attempt = self.attempts.entry(Some(which)).or_insert(0);
                *attempt += 1;
                let delay = if reason == "CreateContainerConfigError" {
                    retry_delay(*attempt - 1)
                } else {
                    retry
                };
                if let Some(run) = self.obs.run_mut(which) {
                    run.start_failed(&reason, message, later(now, delay));
                }
                false
            }
        }
    }

    /// Everything a container needs before its process starts. An error is
    /// a waiting reason, its message and when to retry.
    async fn prepare(
        &mut self,
        which: Which,
        c: &Container,
    ) -> Result<Prepared, (String, String, Duration)> {
        let config_error = |m: String| ("CreateContainerConfigError".to_string(), m, CONFIG_RETRY);
        let image_ref = c.image.clone().unwrap_or_default();
        let image = self
            .ctx
            .images
            .resolve(&image_ref)
            .map_err(|m| ("ErrImagePull".to_string(), m, Duration::from_secs(5)))?;
        if let Some(run) = self.obs.run_mut(which) {
            run.image_id = Some(image.id.clone());
        }
        if matches!(which, Which::Init(_)) && c.restart_policy.as_deref() == Some("Always") {
            return Err((
                "CreateContainerError".to_string(),
                "restartable init containers (sidecars) are not supported by the process kubelet"
                    .to_string(),
                Duration::from_secs(30),
            ));
        }
        let refs = self.fetch(&envvars::wanted_by_env(c)).await;
        let container_env =
            envvars::container_env(&self.pod, c, &refs, &self.facts, &self.ctx.service_env)
                .map_err(config_error)?;
        let spec = self.pod.spec.as_ref();
        let identity = sandbox::identity(
            &pod_ref(&self.pod),
            &c.name,
            spec.and_then(|s| s.security_context.as_ref()),
            c.security_context.as_ref(),
        )
        .map_err(config_error)?;
        if c.command.as_ref().is_none_or(|v| v.is_empty()) {
            return Ok(Prepared::CannotRun {
                exit_code: 128,
                message: format!(
                    "container {:?} has no command: the process kubelet does not know the \
                     ENTRYPOINT of image {image_ref:?}; set `command`",
                    c.name
                ),
            });
        }
        let hostname = spec
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| self.name().to_string());
        let hostname: String = hostname.chars().take(63).collect();
        // What a runtime sets, under what the container sets.
        let mut env = Env::default();
        env.set("PATH", sandbox::DEFAULT_PATH.to_string());
        env.set("HOSTNAME", hostname.clone());
        env.set(
            "HOME",
            if identity.uid == 0 { "/root" } else { "/" }.to_string(),
        );
        for (k, v) in container_env.0 {
            env.set(&k, v);
        }
        let argv = envvars::argv(c, &env);

        let mut mounts = Vec::new();
        for vm in c.volume_mounts.iter().flatten() {
            let dir = self.volumes.get(&vm.name).ok_or_else(|| {
                config_error(format!("volumeMount {:?}: no volume of that name", vm.name))
            })?;
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => Some(s.clone()),
                (_, Some(e)) if !e.is_empty() => {
                    Some(envvars::expand(e, &|n| env.get(n).map(str::to_string)))
                }
                _ => None,
            };
            let source = match sub {
                Some(s) => volumes::sub_path(dir, &s).map_err(config_error)?,
                None => dir.clone(),
            };
            // configMap, secret, downwardAPI and projected volumes are always
            // mounted read-only by a kubelet.
            let content = spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|vs| vs.iter().find(|v| v.name == vm.name))
                .is_some_and(|v| volumes::kind(v) == Ok(VolumeKind::Content));
            mounts.push(Mount {
                target: PathBuf::from(&vm.mount_path),
                source,
                read_only: content || vm.read_only == Some(true),
            });
        }
        let restart = self.obs.run(which).map(|r| r.restart_count).unwrap_or(0);
        let cdir = self
            .dir()
            .join("containers")
            .join(&c.name)
            .join(restart.to_string());
        let (network, links) = hosts::network_mounts(&mounts, &self.network_dir());
        mounts.extend(network);
        let termination_file = cdir.join("termination-log");
        let make_file = || -> std::io::Result<()> {
            fs::create_dir_all(&cdir)?;
            fs::write(&termination_file, b"")?;
            // Writable by whatever user the container runs as.
            fs::set_permissions(&termination_file, fs::Permissions::from_mode(0o666))
        };
        make_file().map_err(|e| {
            (
                "CreateContainerError".to_string(),
                format!("termination-log file: {e}"),
                CONFIG_RETRY,
            )
        })?;
        mounts.push(Mount {
            target: PathBuf::from(
                c.termination_message_path
                    .as_deref()
                    .unwrap_or("/dev/termination-log"),
            ),
            source: termination_file.clone(),
            read_only: false,
        });
        let read_only_root = c
            .security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem)
            == Some(true);
        let spec = SandboxSpec {
            hostname,
            base: sandbox::BASE_DIRS.iter().map(PathBuf::from).collect(),
            image_files: image.files,
            mounts,
            links,
            read_only_root,
            working_dir: PathBuf::from(c.working_dir.as_deref().unwrap_or("/")),
            identity,
            argv,
        };
        let path = env.get("PATH").unwrap_or(sandbox::DEFAULT_PATH).to_string();
        if let Err(message) = spec.check_executable(&RealFs, &path) {
            return Ok(Prepared::CannotRun {
                exit_code: 127,
                message,
            });
        }
        let log = self.dir().join(format!("{}.log", c.name));
        fs::create_dir_all(self.dir()).map_err(|e| {
            (
                "CreateContainerError".to_string(),
                format!("pod directory: {e}"),
                CONFIG_RETRY,
            )
        })?;
        Ok(Prepared::Spawn(Box::new(Launch {
            spec,
            env,
            log,
            termination_file,
            fallback_to_logs: c.termination_message_policy.as_deref()
                == Some("FallbackToLogsOnError"),
        })))
    }

    fn spawn(&mut self, which: Which, c: &Container, launch: Launch) -> bool {
        let Launch {
            spec,
            env,
            log,
            termination_file,
            fallback_to_logs,
        } = launch;
        let now = Timestamp::now();
        let log_offset = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let args = spec.bwrap_args(&RealFs);
        match super::process::spawn(&args, &env.0, &log) {
            Ok(mut child) => {
                let Some(pid) = child.id() else {
                    return false;
                };
                let bwrap_pid = pid as i32;
                let id = {
                    let mut h = Sha256::new();
                    h.update(format!(
                        "{}/{}/{}/{}",
                        self.uid(),
                        c.name,
                        pid,
                        now.as_nanosecond()
                    ));
                    format!("bwrap://{}", &hex::encode(h.finalize())[..32])
                };
                info!(pod = %pod_ref(&self.pod), container = %c.name, pid, "container started");
                self.attempts.remove(&Some(which));
                if let Some(run) = self.obs.run_mut(which) {
                    run.started(now, id);
                }
                self.procs.insert(
                    which,
                    Proc {
                        bwrap_pid,
                        log,
                        log_offset,
                        termination_file,
                        fallback_to_logs,
                    },
                );
                let tx = self.exits_tx.clone();
                tokio::spawn(async move {
                    let status = child.wait().await;
                    let _ = tx.send(Exit {
                        which,
                        status,
                        at: Timestamp::now(),
                    });
                });
                true
            }
            Err(e) => {
                let t = Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "ContainerCannotRun".into(),
                    message: Some(format!("starting bwrap: {e}")),
                    started_at: None,
                    finished_at: now,
                    container_id: None,
                };
                self.record_exit(which, &c.name, t, now);
                true
            }
        }
    }

    fn on_exit(&mut self, exit: Exit) {
        let Some(proc_) = self.procs.remove(&exit.which) else {
            return;
        };
        let name = self
            .container(exit.which)
            .map(|c| c.name.clone())
            .unwrap_or_default();
        let (exit_code, signal) = match &exit.status {
            Ok(s) => super::process::exit_of(*s),
            Err(e) => {
                warn!(pod = %pod_ref(&self.pod), container = %name, "waiting for the sandbox: {e}");
                (255, None)
            }
        };
        info!(pod = %pod_ref(&self.pod), container = %name, exit_code, "container exited");
        let mut message = read_capped(&proc_.termination_file, MAX_MESSAGE);
        if message.is_empty() && proc_.fallback_to_logs && exit_code != 0 {
            message = log_tail(&proc_.log, proc_.log_offset);
        }
        let (started_at, container_id) = match self.obs.run(exit.which).map(|r| &r.state) {
            Some(RunState::Running {
                started_at,
                container_id,
            }) => (Some(*started_at), Some(container_id.clone())),
            _ => (None, None),
        };
        let t = Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            message: (!message.is_empty()).then_some(message),
            started_at,
            finished_at: exit.at,
            container_id,
        };
        self.record_exit(exit.which, &name, t, exit.at);
        if self.procs.is_empty() {
            self.kill_at = None;
            self.killed = false;
        }
    }

    fn record_exit(&mut self, which: Which, name: &str, t: Terminated, now: Timestamp) {
        let stopping = self.obs.stop.is_some() || self.pod.metadata.deletion_timestamp.is_some();
        let restart = !stopping
            && lifecycle::should_restart(&self.pod, matches!(which, Which::Init(_)), t.exit_code);
        let who = format!("{name} pod={}", pod_ref(&self.pod));
        if let Some(run) = self.obs.run_mut(which) {
            run.exited(t, restart, now, &who);
        }
    }

    // ---- status --------------------------------------------------------

    async fn write_status(&mut self) {
        if self.gone {
            return;
        }
        // Transition times and the phase compare against what this worker
        // wrote last, which the watch may not have delivered yet.
        let mut view = (*self.pod).clone();
        if let Some(last) = &self.last_status {
            let mut st = view.status.clone().unwrap_or_default();
            let mine: Vec<&str> = [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
            ]
            .to_vec();
            let mut conditions: Vec<_> = st
                .conditions
                .unwrap_or_default()
                .into_iter()
                .filter(|c| !mine.contains(&c.type_.as_str()))
                .collect();
            conditions.extend(last.conditions.clone().unwrap_or_default());
            st.conditions = Some(conditions);
            if last
                .phase
                .as_deref()
                .is_some_and(|p| p == "Succeeded" || p == "Failed")
            {
                st.phase = last.phase.clone();
            }
            view.status = Some(st);
        }
        let ctx = StatusContext {
            host_ip: &self.facts.host_ip,
            pod_ip: &self.facts.pod_ip,
            now: Timestamp::now(),
        };
        let status = status::pod_status(&view, &self.obs, &ctx);
        let mut status_json = serde_json::to_value(&status).unwrap_or_default();
        // A strategic merge patch merges conditions by type, field by field:
        // an explicit null removes a reason or message that no longer holds.
        if let Some(conds) = status_json
            .get_mut("conditions")
            .and_then(|c| c.as_array_mut())
        {
            for c in conds.iter_mut().filter_map(|c| c.as_object_mut()) {
                for key in ["reason", "message"] {
                    c.entry(key).or_insert(serde_json::Value::Null);
                }
            }
        }
        let patch = serde_json::json!({
            "metadata": {"uid": self.uid()},
            "status": status_json,
        });
        if self.last_patch.as_ref() == Some(&patch) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.ns());
        match api
            .patch_status(
                self.name(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {
                debug!(pod = %pod_ref(&self.pod), phase = ?status.phase, "status written");
                self.last_patch = Some(patch);
                self.last_status = Some(status);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => warn!(pod = %pod_ref(&self.pod), "writing status, will retry: {e}"),
        }
    }
}

/// A container ready to run.
struct Launch {
    spec: SandboxSpec,
    env: Env,
    log: PathBuf,
    termination_file: PathBuf,
    fallback_to_logs: bool,
}

enum Prepared {
    Spawn(Box<Launch>),
    CannotRun { exit_code: i32, message: String },
}

fn make_empty_dir(dir: &Path, fs_group: Option<u32>) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    // emptyDir is world-writable, like the kubelet's.
    let mut mode = 0o777;
    if let Some(g) = fs_group {
        std::os::unix::fs::chown(dir, None, Some(g))?;
        mode |= 0o2000;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
}

fn host_path(path: &Path, type_: &str) -> Result<(), String> {
    let meta = fs::metadata(path);
    let bad = |what: &str| {
        Err(format!(
            "hostPath type check failed: {} is not {what}",
            path.display()
        ))
    };
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            fs::create_dir_all(path).map_err(|e| format!("creating {}: {e}", path.display()))
        }
        "Directory" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            _ => bad("a directory"),
        },
        "FileOrCreate" => {
            if meta.is_err() {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                fs::write(path, b"").map_err(|e| format!("creating {}: {e}", path.display()))?;
            }
            Ok(())
        }
        "File" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            _ => bad("a file"),
        },
        "Socket" | "CharDevice" | "BlockDevice" => match meta {
            Ok(_) => Ok(()),
            Err(_) => bad(type_),
        },
        other => Err(format!("unknown hostPath type {other:?}")),
    }
}

fn read_capped(path: &Path, cap: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(f) = fs::File::open(path) {
        let _ = f.take(cap).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last lines of what the container wrote since it started.
fn log_tail(log: &Path, from: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = fs::File::open(log) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        // Enough bytes for the cap, without reading a huge log whole.
        let start = from.max(len.saturating_sub(64 * 1024));
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.read_to_end(&mut buf);
        }
    }
    tail_message(&String::from_utf8_lossy(&buf))
}

/// At most the last 80 lines and 2048 bytes of `text`.
pub fn tail_message(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[lines.len().saturating_sub(FALLBACK_LINES)..].join("\n");
    if text.ends_with('\n') && !out.is_empty() {
        out.push('\n');
    }
    if out.len() > FALLBACK_BYTES {
        let mut cut = out.len() - FALLBACK_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_start_quick_and_settle_at_two_seconds() {
        assert_eq!(retry_delay(0), Duration::from_millis(250));
        assert_eq!(retry_delay(1), Duration::from_millis(500));
        assert_eq!(retry_delay(3), CONFIG_RETRY);
        assert_eq!(retry_delay(u32::MAX), CONFIG_RETRY);
    }

    #[test]
    fn the_log_fallback_keeps_the_last_lines_and_bytes() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = tail_message(&text);
        assert!(tail.starts_with("line 20\n"), "{tail}");
        assert!(tail.ends_with("line 99\n"));
        let long = "x".repeat(5000);
        assert_eq!(tail_message(&long).len(), 2048);
    }

    #[test]
    fn pod_dirs_are_named_namespace_name_uid() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "123"}
        }))
        .unwrap();
        assert_eq!(
            pod_dir(Path::new("/s"), &pod),
            PathBuf::from("/s/pods/ns_p_123")
        );
        assert_eq!(pod_ref(&pod), "p_ns(123)");
    }

    #[test]
    fn host_path_types_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("made");
        assert!(host_path(&d, "DirectoryOrCreate").is_ok());
        assert!(host_path(&d, "Directory").is_ok());
        assert!(host_path(&d, "File").is_err());
        let f = tmp.path().join("f");
        assert!(host_path(&f, "FileOrCreate").is_ok());
        assert!(host_path(&f, "File").is_ok());
        assert!(host_path(&f, "Bogus").is_err());
    }
}
