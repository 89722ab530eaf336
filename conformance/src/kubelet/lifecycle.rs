//! The pure core of a Pod's life on the node: what the kubelet has
//! observed of its containers ([`Observed`]), and what to do next
//! ([`decide`]). No I/O: the pod worker performs the [`Effect`]s and
//! reports back what happened.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

/// A container that ran and stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `ContainerCannotRun`, `ContainerStatusUnknown`.
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Not running. `reason: None` is the kubelet's default reason
    /// (`ContainerCreating`, or `PodInitializing` in a pod with init containers).
    Waiting {
        reason: Option<String>,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
        container_id: String,
    },
    Terminated(Terminated),
}

/// Everything the kubelet knows about one container of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRun {
    pub state: RunState,
    pub restart_count: i32,
    pub last_termination: Option<Terminated>,
    /// No (re)start before this instant: crash-loop back-off, or the retry
    /// of a configuration error.
    pub not_before: Option<Timestamp>,
    pub image_id: Option<String>,
}

impl Default for ContainerRun {
    fn default() -> Self {
        ContainerRun {
            state: RunState::Waiting {
                reason: None,
                message: None,
            },
            restart_count: 0,
            last_termination: None,
            not_before: None,
            image_id: None,
        }
    }
}

impl ContainerRun {
    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    /// The container started: a start after a termination is a restart.
    pub fn started(&mut self, at: Timestamp, container_id: String) {
        if self.last_termination.is_some() {
            self.restart_count += 1;
        }
        self.not_before = None;
        self.state = RunState::Running {
            started_at: at,
            container_id,
        };
    }

    /// The container could not be started and will be retried: it waits
    /// with `reason` (e.g. `CreateContainerConfigError`).
    pub fn start_failed(&mut self, reason: &str, message: String, retry_at: Timestamp) {
        self.state = RunState::Waiting {
            reason: Some(reason.to_string()),
            message: Some(message),
        };
        self.not_before = Some(retry_at);
    }

    /// The container stopped. With `restart` it waits to run again after the
    /// kubelet's back-off (none for the first restart, then 10 s doubling to
    /// 5 min); otherwise it stays terminated.
    pub fn exited(&mut self, t: Terminated, restart: bool, now: Timestamp, who: &str) {
        if !restart {
            self.state = RunState::Terminated(t);
            return;
        }
        let delay = backoff(self.restart_count, self.last_termination.is_some());
        self.last_termination = Some(t);
        self.state = if delay.is_zero() {
            RunState::Waiting {
                reason: None,
                message: None,
            }
        } else {
            RunState::Waiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some(format!(
                    "back-off {}s restarting failed container={who}",
                    delay.as_secs()
                )),
            }
        };
        self.not_before = now.checked_add(delay).ok();
    }
}

/// The kubelet's crash-loop back-off: the first restart is immediate, the
/// next waits 10 s, then 20 s, 40 s, ... up to 5 min.
fn backoff(restart_count: i32, restarted_before: bool) -> Duration {
    if !restarted_before {
        return Duration::ZERO;
    }
    let exp = (restart_count - 1).clamp(0, 5) as u32;
    Duration::from_secs((10u64 << exp).min(300))
}

/// Why the kubelet is stopping every container of the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The pod has a deletion timestamp, or is gone from the API.
    Deleted,
    /// `activeDeadlineSeconds` passed.
    DeadlineExceeded,
    /// The kubelet itself is shutting down.
    Shutdown,
}

/// What the kubelet has observed of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub start_time: Option<Timestamp>,
    /// The volumes are in place.
    pub sandbox_ready: bool,
    /// Why the volumes are not in place (a failed mount), retried.
    pub sandbox_message: Option<String>,
    pub sandbox_not_before: Option<Timestamp>,
    pub init: Vec<ContainerRun>,
    pub containers: Vec<ContainerRun>,
    pub stop: Option<Stop>,
    pub final_delete_sent: bool,
}

/// Which container of the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Which {
    Init(usize),
    Main(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Write the volumes.
    SetupSandbox,
    Start(Which),
    /// SIGTERM every running container, SIGKILL after the grace period.
    StopAll {
        grace: Duration,
    },
    /// The active deadline passed: stop everything, fail the pod.
    MarkDeadlineExceeded,
    /// Delete the Pod object (grace 0, uid precondition): the kubelet's
    /// last word on a pod whose containers are all gone.
    FinalDelete,
}

impl Observed {
    /// The state of a pod the kubelet meets for the first time, read from
    /// the status a previous kubelet wrote: finished containers stay
    /// finished; one that was running is lost (its sandbox died with that
    /// kubelet), as a kubelet reports a container it cannot find.
    pub fn adopt(pod: &Pod, now: Timestamp) -> Observed {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let terminal = matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let runs = |names: Vec<&str>,
                    statuses: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                    init: bool| {
            names
                .into_iter()
                .map(|name| {
                    let st = statuses.and_then(|v| v.iter().find(|s| s.name == name));
                    let (mut run, lost) = adopt_container(st, now);
                    let stopped = match (&run.state, lost) {
                        (_, Some(t)) => Some(t),
                        (RunState::Terminated(t), None) => Some(t.clone()),
                        _ => None,
                    };
                    if let Some(t) = stopped {
                        let again = !terminal && should_restart(pod, init, t.exit_code);
                        run.exited(t, again, now, name);
                    }
                    run
                })
                .collect::<Vec<_>>()
        };
        let init_names = spec
            .map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .map(|c| c.name.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let names = spec
            .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        Observed {
            start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            init: runs(
                init_names,
                status.and_then(|s| s.init_container_statuses.as_ref()),
                true,
            ),
            containers: runs(
                names,
                status.and_then(|s| s.container_statuses.as_ref()),
                false,
            ),
            ..Observed::default()
        }
    }

    pub fn run(&self, w: Which) -> Option<&ContainerRun> {
        match w {
            Which::Init(i) => self.init.get(i),
            Which::Main(i) => self.containers.get(i),
        }
    }

    pub fn run_mut(&mut self, w: Which) -> Option<&mut ContainerRun> {
        match w {
            Which::Init(i) => self.init.get_mut(i),
            Which::Main(i) => self.containers.get_mut(i),
        }
    }

    pub fn any_running(&self) -> bool {
        self.init
            .iter()
            .chain(self.containers.iter())
            .any(ContainerRun::is_running)
    }
}

/// A container as a previous kubelet reported it, and the termination of
/// one that was running then.
fn adopt_container(
    st: Option<&k8s_openapi::api::core::v1::ContainerStatus>,
    now: Timestamp,
) -> (ContainerRun, Option<Terminated>) {
    let Some(st) = st else {
        return (ContainerRun::default(), None);
    };
    let to_term = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| Terminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: t.reason.clone().unwrap_or_default(),
        message: t.message.clone(),
        started_at: t.started_at.as_ref().map(|s| s.0),
        finished_at: t.finished_at.as_ref().map(|s| s.0).unwrap_or(now),
        container_id: t.container_id.clone(),
    };
    let state = st.state.as_ref();
    let mut lost = None;
    let run_state = if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        RunState::Terminated(to_term(t))
    } else {
        if let Some(r) = state.and_then(|s| s.running.as_ref()) {
            lost = Some(Terminated {
                exit_code: 137,
                signal: None,
                reason: "ContainerStatusUnknown".into(),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                started_at: r.started_at.as_ref().map(|s| s.0),
                finished_at: now,
                container_id: st.container_id.clone(),
            });
        }
        ContainerRun::default().state
    };
    let run = ContainerRun {
        state: run_state,
        restart_count: st.restart_count,
        last_termination: st
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(to_term),
        not_before: None,
        image_id: Some(st.image_id.clone()).filter(|s| !s.is_empty()),
    };
    (run, lost)
}

/// The pod's restart policy: `Always`, `OnFailure` or `Never`.
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether a container that exited with `exit_code` runs again. An init
/// container that succeeded never does.
pub fn should_restart(pod: &Pod, init: bool, exit_code: i32) -> bool {
    match restart_policy(pod) {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => !init || exit_code != 0,
    }
}

/// The grace period of a stop: the deletion's, else the pod's
/// `terminationGracePeriodSeconds` (default 30). Like the kubelet, never
/// under 2 s so a trap gets to run.
pub fn grace_period(pod: &Pod, stop: Stop) -> Duration {
    let secs = match stop {
        Stop::Shutdown => 0,
        Stop::Deleted => pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30),
        Stop::DeadlineExceeded => pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30),
    };
    if stop == Stop::Shutdown {
        return Duration::ZERO;
    }
    Duration::from_secs(secs.max(2) as u64)
}

fn due(not_before: Option<Timestamp>, now: Timestamp) -> bool {
    not_before.is_none_or(|t| t <= now)
}

/// What to do next for `pod`, given what has been observed, at `now`.
pub fn decide(pod: &Pod, obs: &Observed, now: Timestamp) -> Vec<Effect> {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let stop = if deleting {
        Some(Stop::Deleted)
    } else {
        obs.stop
    };
    if let Some(stop) = stop {
        if obs.any_running() {
            return vec![Effect::StopAll {
                grace: grace_period(pod, stop),
            }];
        }
        if deleting && !obs.final_delete_sent {
            return vec![Effect::FinalDelete];
        }
        return vec![];
    }
    if super::status::phase(pod, obs).is_terminal() {
        return vec![];
    }
    let spec = pod.spec.as_ref();
    if let (Some(ads), Some(start)) = (spec.and_then(|s| s.active_deadline_seconds), obs.start_time)
        && start
            .checked_add(Duration::from_secs(ads.max(0) as u64))
            .is_ok_and(|deadline| deadline <= now)
    {
        return vec![Effect::MarkDeadlineExceeded];
    }
    if !obs.sandbox_ready {
        return if due(obs.sandbox_not_before, now) {
            vec![Effect::SetupSandbox]
        } else {
            vec![]
        };
    }
    for (i, run) in obs.init.iter().enumerate() {
        match &run.state {
            RunState::Terminated(t) if t.exit_code == 0 => continue,
            // Failed for good (the restart policy did not bring it back).
            RunState::Terminated(_) => return vec![],
            RunState::Running { .. } => return vec![],
            RunState::Waiting { .. } => {
                return if due(run.not_before, now) {
                    vec![Effect::Start(Which::Init(i))]
                } else {
                    vec![]
                };
            }
        }
    }
    obs.containers
        .iter()
        .enumerate()
        .filter(|(_, run)| {
            matches!(run.state, RunState::Waiting { .. }) && due(run.not_before, now)
        })
        .map(|(i, _)| Effect::Start(Which::Main(i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": spec
        }))
        .unwrap()
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn exit(code: i32, at: i64) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: Some(t(at - 1)),
            finished_at: t(at),
            container_id: Some("id".into()),
        }
    }

    fn two_init_one_main() -> (Pod, Observed) {
        let p = pod(serde_json::json!({
            "restartPolicy": "Never",
            "initContainers": [{"name": "i1"}, {"name": "i2"}],
            "containers": [{"name": "a"}, {"name": "b"}]
        }));
        let obs = Observed {
            start_time: Some(t(0)),
            init: vec![ContainerRun::default(); 2],
            containers: vec![ContainerRun::default(); 2],
            ..Observed::default()
        };
        (p, obs)
    }

    #[test]
    fn volumes_first_then_init_containers_one_by_one_then_all_containers() {
        let (p, mut obs) = two_init_one_main();
        assert_eq!(decide(&p, &obs, t(0)), [Effect::SetupSandbox]);
        obs.sandbox_ready = true;
        assert_eq!(decide(&p, &obs, t(0)), [Effect::Start(Which::Init(0))]);
        obs.init[0].started(t(1), "c1".into());
        assert_eq!(decide(&p, &obs, t(1)), []);
        obs.init[0].exited(exit(0, 2), false, t(2), "i1");
        assert_eq!(decide(&p, &obs, t(2)), [Effect::Start(Which::Init(1))]);
        obs.init[1].started(t(2), "c2".into());
        obs.init[1].exited(exit(0, 3), false, t(3), "i2");
        assert_eq!(
            decide(&p, &obs, t(3)),
            [Effect::Start(Which::Main(0)), Effect::Start(Which::Main(1))]
        );
    }

    #[test]
    fn a_failed_init_container_stops_the_pod_under_restart_policy_never() {
        let (p, mut obs) = two_init_one_main();
        obs.sandbox_ready = true;
        obs.init[0].started(t(1), "c1".into());
        obs.init[0].exited(exit(3, 2), should_restart(&p, true, 3), t(2), "i1");
        assert_eq!(decide(&p, &obs, t(2)), []);
        assert_eq!(super::super::status::phase(&p, &obs).as_str(), "Failed");
    }

    #[test]
    fn a_deleted_pod_is_stopped_with_its_grace_then_deleted_once() {
        let (mut p, mut obs) = two_init_one_main();
        obs.sandbox_ready = true;
        obs.init[0].started(t(1), "c1".into());
        p.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(5)));
        p.metadata.deletion_grace_period_seconds = Some(7);
        assert_eq!(
            decide(&p, &obs, t(5)),
            [Effect::StopAll {
                grace: Duration::from_secs(7)
            }]
        );
        obs.init[0].exited(exit(143, 6), false, t(6), "i1");
        assert_eq!(decide(&p, &obs, t(6)), [Effect::FinalDelete]);
        obs.final_delete_sent = true;
        assert_eq!(decide(&p, &obs, t(6)), []);
        // Grace 0 (a forced delete) still gives a trap its 2 s.
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(grace_period(&p, Stop::Deleted), Duration::from_secs(2));
    }

    #[test]
    fn the_active_deadline_counts_from_the_start_time() {
        let (mut p, mut obs) = two_init_one_main();
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(10);
        obs.sandbox_ready = true;
        obs.init[0].started(t(1), "c1".into());
        assert_eq!(decide(&p, &obs, t(9)), []);
        assert_eq!(decide(&p, &obs, t(10)), [Effect::MarkDeadlineExceeded]);
        obs.stop = Some(Stop::DeadlineExceeded);
        assert_eq!(
            decide(&p, &obs, t(10)),
            [Effect::StopAll {
                grace: Duration::from_secs(30)
            }]
        );
        obs.init[0].exited(exit(137, 11), false, t(11), "i1");
        // Not deleted: nothing more to do, the pod stays Failed.
        assert_eq!(decide(&p, &obs, t(11)), []);
    }

    #[test]
    fn restart_policy_always_restarts_with_back_off() {
        let p = pod(serde_json::json!({"containers": [{"name": "a"}]}));
        let mut obs = Observed {
            sandbox_ready: true,
            containers: vec![ContainerRun::default()],
            ..Observed::default()
        };
        obs.containers[0].started(t(0), "c".into());
        obs.containers[0].exited(exit(1, 1), should_restart(&p, false, 1), t(1), "a");
        // The first restart is immediate.
        assert_eq!(decide(&p, &obs, t(1)), [Effect::Start(Which::Main(0))]);
        obs.containers[0].started(t(1), "c".into());
        assert_eq!(obs.containers[0].restart_count, 1);
        obs.containers[0].exited(exit(1, 2), true, t(2), "a");
        let RunState::Waiting { reason, .. } = &obs.containers[0].state else {
            panic!("waiting expected")
        };
        assert_eq!(reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(decide(&p, &obs, t(11)), []);
        assert_eq!(decide(&p, &obs, t(12)), [Effect::Start(Which::Main(0))]);
        obs.containers[0].started(t(12), "c".into());
        obs.containers[0].exited(exit(1, 13), true, t(13), "a");
        assert_eq!(obs.containers[0].not_before, Some(t(33)));
    }

    #[test]
    fn a_config_error_is_retried_later() {
        let p = pod(serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "a"}]}));
        let mut obs = Observed {
            sandbox_ready: true,
            containers: vec![ContainerRun::default()],
            ..Observed::default()
        };
        obs.containers[0].start_failed("CreateContainerConfigError", "no key".into(), t(2));
        assert_eq!(decide(&p, &obs, t(1)), []);
        assert_eq!(decide(&p, &obs, t(2)), [Effect::Start(Which::Main(0))]);
    }

    #[test]
    fn adopting_a_pod_keeps_finished_containers_and_loses_running_ones() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "done"}, {"name": "lost"}, {"name": "new"}]},
            "status": {"startTime": "2024-01-01T00:00:00Z", "containerStatuses": [
                {"name": "done", "image": "i", "imageID": "x", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "lost", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
                 "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}}
            ]}
        }))
        .unwrap();
        let obs = Observed::adopt(&p, t(0));
        assert!(obs.start_time.is_some());
        assert!(matches!(&obs.containers[0].state, RunState::Terminated(t) if t.exit_code == 0));
        assert!(matches!(&obs.containers[1].state,
            RunState::Terminated(t) if t.exit_code == 137 && t.reason == "ContainerStatusUnknown"));
        assert_eq!(obs.containers[1].restart_count, 2);
        assert_eq!(obs.containers[2], ContainerRun::default());

        // Under restartPolicy Always the lost container runs again.
        let mut always = p.clone();
        always.spec.as_mut().unwrap().restart_policy = Some("Always".into());
        let obs = Observed::adopt(&always, t(0));
        assert!(matches!(obs.containers[1].state, RunState::Waiting { .. }));
        assert!(obs.containers[1].last_termination.is_some());
    }
}
