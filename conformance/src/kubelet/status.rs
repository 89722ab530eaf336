//! The Pod status a kubelet writes, computed purely from the Pod and what
//! the kubelet observed: phase (the kubelet's `getPhase`), its four
//! conditions, and one status per container.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::lifecycle::{ContainerRun, Observed, RunState, Stop, Terminated};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// The pod's phase, as the kubelet's `getPhase` computes it. A terminal
/// phase already written is never left.
pub fn phase(pod: &Pod, obs: &Observed) -> Phase {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => return Phase::Succeeded,
        Some("Failed") => return Phase::Failed,
        _ => {}
    }
    // Like the kubelet since 1.27, a pod turns terminal only once all its
    // containers have stopped (the Job controller relies on it).
    if obs.stop == Some(Stop::DeadlineExceeded) && !obs.any_running() {
        return Phase::Failed;
    }
    let never = super::lifecycle::restart_policy(pod) == "Never";
    let always = super::lifecycle::restart_policy(pod) == "Always";
    let stopping = obs.stop.is_some() || pod.metadata.deletion_timestamp.is_some();
    let terminal = stopping && !obs.any_running();

    let mut pending_init = 0;
    let mut failed_init = 0;
    for run in &obs.init {
        match &run.state {
            RunState::Running { .. } => pending_init += 1,
            RunState::Terminated(t) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            RunState::Waiting { .. } => match &run.last_termination {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for run in &obs.containers {
        match &run.state {
            RunState::Running { .. } => running += 1,
            RunState::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            RunState::Waiting { .. } => {
                if run.last_termination.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    let any_regular_started = obs
        .containers
        .iter()
        .any(|r| !matches!(r.state, RunState::Waiting { .. }) || r.last_termination.is_some());

    let computed = if failed_init > 0 && never {
        Phase::Failed
    } else if (pending_init > 0 && !any_regular_started) || waiting > 0 {
        Phase::Pending
    } else if running > 0 {
        Phase::Running
    } else if running == 0 && stopped > 0 {
        if terminal {
            if stopped == succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            }
        } else if always {
            Phase::Running
        } else if stopped == succeeded {
            Phase::Succeeded
        } else if never {
            Phase::Failed
        } else {
            Phase::Running
        }
    } else {
        Phase::Pending
    };
    // A pod the kubelet has finished with is never left non-terminal.
    if terminal && !computed.is_terminal() {
        Phase::Failed
    } else {
        computed
    }
}

/// Facts of the node the status mentions.
#[derive(Debug, Clone)]
pub struct StatusContext<'a> {
    pub host_ip: &'a str,
    /// The Pod's IP, reported once its sandbox is set up (as a kubelet does
    /// once the runtime made the sandbox); the node's for `hostNetwork`.
    pub pod_ip: &'a str,
    pub now: Timestamp,
}

fn time(t: Timestamp) -> Time {
    // The API keeps seconds: truncating keeps re-computed statuses equal.
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// The status the kubelet writes for `pod`. Conditions other than the
/// kubelet's four are left to their owners (a strategic merge patch keeps
/// them); `lastTransitionTime` moves only when a condition's status does.
pub fn pod_status(pod: &Pod, obs: &Observed, ctx: &StatusContext) -> PodStatus {
    let spec = pod.spec.as_ref();
    let init_specs: Vec<&Container> = spec
        .map(|s| s.init_containers.iter().flatten().collect())
        .unwrap_or_default();
    let main_specs: Vec<&Container> = spec
        .map(|s| s.containers.iter().collect())
        .unwrap_or_default();
    let phase = phase(pod, obs);
    let default_reason = if init_specs.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let sandbox_message = (!obs.sandbox_ready)
        .then_some(obs.sandbox_message.clone())
        .flatten();
    let statuses = |specs: &[&Container], runs: &[ContainerRun]| -> Vec<ContainerStatus> {
        specs
            .iter()
            .zip(
                runs.iter()
                    .chain(std::iter::repeat(&ContainerRun::default())),
            )
            .map(|(c, run)| container_status(c, run, default_reason, sandbox_message.as_deref()))
            .collect()
    };
    let init_statuses = statuses(&init_specs, &obs.init);
    let main_statuses = statuses(&main_specs, &obs.containers);

    let old_conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = pod.metadata.generation;
    let condition = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = old_conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| time(ctx.now));
        PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.map(str::to_string),
            message,
            last_probe_time: None,
            last_transition_time: Some(since),
            observed_generation: generation,
        }
    };

    // PodReadyToStartContainers: the sandbox exists (volumes set up) and
    // has not been torn down after the pod finished.
    let sandbox_up = obs.sandbox_ready && (!phase.is_terminal() || obs.any_running());

    // Initialized.
    let incomplete: Vec<&str> = init_specs
        .iter()
        .zip(init_statuses.iter())
        .filter(|(_, s)| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|(c, _)| c.name.as_str())
        .collect();
    let any_regular_started = obs
        .containers
        .iter()
        .any(|r| !matches!(r.state, RunState::Waiting { .. }) || r.last_termination.is_some());
    let initialized = if init_specs.is_empty() {
        condition("Initialized", true, None, None)
    } else if phase == Phase::Succeeded {
        condition("Initialized", true, Some("PodCompleted"), None)
    } else if any_regular_started || incomplete.is_empty() {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                go_list(&incomplete)
            )),
        )
    };

    // ContainersReady and Ready (no readiness gates are ever satisfied by
    // anyone else here, but they are honoured as the kubelet does).
    let unready: Vec<&str> = main_specs
        .iter()
        .zip(main_statuses.iter())
        .filter(|(_, s)| !s.ready)
        .map(|(c, _)| c.name.as_str())
        .collect();
    let (ready_ok, ready_reason, ready_message) = match phase {
        Phase::Succeeded => (false, Some("PodCompleted"), None),
        Phase::Failed => (false, Some("PodFailed"), None),
        _ if !unready.is_empty() => (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                go_list(&unready)
            )),
        ),
        _ => (true, None, None),
    };
    let containers_ready = condition(
        "ContainersReady",
        ready_ok,
        ready_reason,
        ready_message.clone(),
    );
    let ready = if !ready_ok {
        condition("Ready", false, ready_reason, ready_message)
    } else {
        let gates: Vec<String> = spec
            .and_then(|s| s.readiness_gates.as_ref())
            .into_iter()
            .flatten()
            .filter_map(
                |g| match old_conditions.iter().find(|c| c.type_ == g.condition_type) {
                    None => Some(format!(
                        "corresponding condition of pod readiness gate {:?} does not exist.",
                        g.condition_type
                    )),
                    Some(c) if c.status != "True" => Some(format!(
                        "the status of pod readiness gate {:?} is not \"True\", but {}",
                        g.condition_type, c.status
                    )),
                    Some(_) => None,
                },
            )
            .collect();
        if gates.is_empty() {
            condition("Ready", true, None, None)
        } else {
            condition(
                "Ready",
                false,
                Some("ReadinessGatesNotReady"),
                Some(gates.join(", ")),
            )
        }
    };

    let (reason, message) = if obs.stop == Some(Stop::DeadlineExceeded) {
        (
            Some("DeadlineExceeded".to_string()),
            Some("Pod was active on the node longer than the specified deadline".to_string()),
        )
    } else {
        let old = pod.status.as_ref();
        (
            old.and_then(|s| s.reason.clone()),
            old.and_then(|s| s.message.clone()),
        )
    };

    PodStatus {
        phase: Some(phase.as_str().to_string()),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", sandbox_up, None, None),
            initialized,
            ready,
            containers_ready,
        ]),
        host_ip: Some(ctx.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: ctx.host_ip.to_string(),
        }]),
        // Unset, the patch leaves whatever is there.
        pod_ip: obs.sandbox_ready.then(|| ctx.pod_ip.to_string()),
        pod_ips: obs.sandbox_ready.then(|| {
            vec![PodIP {
                ip: ctx.pod_ip.to_string(),
            }]
        }),
        start_time: obs.start_time.map(time),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(main_statuses),
        reason,
        message,
        observed_generation: generation,
        ..PodStatus::default()
    }
}

fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: t.container_id.clone(),
        exit_code: t.exit_code,
        finished_at: Some(time(t.finished_at)),
        message: t.message.clone(),
        reason: Some(t.reason.clone()),
        signal: t.signal,
        started_at: t.started_at.map(time),
    }
}

fn container_status(
    c: &Container,
    run: &ContainerRun,
    default_reason: &str,
    sandbox_message: Option<&str>,
) -> ContainerStatus {
    let (state, container_id, running) = match &run.state {
        RunState::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone().unwrap_or_else(|| default_reason.to_string())),
                    message: message
                        .clone()
                        .or_else(|| sandbox_message.map(str::to_string)),
                }),
                ..ContainerState::default()
            },
            None,
            false,
        ),
        RunState::Running {
            started_at,
            container_id,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(*started_at)),
                }),
                ..ContainerState::default()
            },
            Some(container_id.clone()),
            true,
        ),
        RunState::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..ContainerState::default()
            },
            t.container_id.clone(),
            false,
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: run.image_id.clone().unwrap_or_default(),
        container_id,
        // No probes run here: a running container is ready and started.
        ready: running,
        started: Some(running),
        restart_count: run.restart_count,
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: run.last_termination.as_ref().map(terminated),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": spec
        }))
        .unwrap()
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn exit(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: (code != 0).then(|| "boom".to_string()),
            started_at: Some(t(1)),
            finished_at: t(2),
            container_id: Some("bwrap://x".into()),
        }
    }

    fn ctx() -> StatusContext<'static> {
        StatusContext {
            host_ip: "127.0.0.1",
            pod_ip: "198.18.0.5",
            now: t(10),
        }
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    fn obs(init: usize, main: usize) -> Observed {
        Observed {
            start_time: Some(t(0)),
            sandbox_ready: true,
            init: vec![ContainerRun::default(); init],
            containers: vec![ContainerRun::default(); main],
            ..Observed::default()
        }
    }

    #[test]
    fn a_pod_waiting_on_its_init_containers() {
        let p = pod(serde_json::json!({"restartPolicy": "Never",
            "initContainers": [{"name": "i1", "image": "img"}], "containers": [{"name": "a", "image": "img"}]}));
        let mut o = obs(1, 1);
        o.init[0].started(t(1), "bwrap://i1".into());
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let init = cond(&s, "Initialized");
        assert_eq!(init.status, "False");
        assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [i1]")
        );
        assert_eq!(init.observed_generation, Some(2));
        assert_eq!(
            cond(&s, "Ready").message.as_deref(),
            Some("containers with unready status: [a]")
        );
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
        let main = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            main.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("PodInitializing")
        );
        let i = &s.init_container_statuses.as_ref().unwrap()[0];
        assert!(i.state.as_ref().unwrap().running.is_some());
        assert_eq!(i.started, Some(true));
        assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(s.pod_ip.as_deref(), Some("198.18.0.5"));
        assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "198.18.0.5");
        // Before the sandbox is set up there is no Pod IP to report.
        let mut early = o.clone();
        early.sandbox_ready = false;
        let s = pod_status(&p, &early, &ctx());
        assert_eq!(s.pod_ip, None);
        assert_eq!(s.pod_ips, None);
        assert_eq!(s.start_time, Some(Time(t(0))));
    }

    #[test]
    fn running_then_succeeded() {
        let p = pod(
            serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "a", "image": "img"}]}),
        );
        let mut o = obs(0, 1);
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(
            s.container_statuses.as_ref().unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating")
        );
        o.containers[0].started(t(1), "bwrap://a".into());
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert!(s.init_container_statuses.is_none());
        o.containers[0].exited(exit(0), false, t(2), "a");
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(
            cond(&s, "ContainersReady").reason.as_deref(),
            Some("PodCompleted")
        );
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        let term = s.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(term.reason.as_deref(), Some("Completed"));
        assert_eq!(term.exit_code, 0);
        assert_eq!(term.started_at, Some(Time(t(1))));
        assert_eq!(term.finished_at, Some(Time(t(2))));
    }

    #[test]
    fn a_failure_fails_the_pod_under_never_but_not_under_on_failure() {
        let p = pod(serde_json::json!({"restartPolicy": "Never",
            "containers": [{"name": "a", "image": "img"}, {"name": "b", "image": "img"}]}));
        let mut o = obs(0, 2);
        o.containers[0].exited(exit(2), false, t(2), "a");
        o.containers[1].exited(exit(0), false, t(2), "b");
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
        let term = s.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!((term.exit_code, term.message.as_deref()), (2, Some("boom")));

        let on_failure = pod(serde_json::json!({"restartPolicy": "OnFailure",
            "containers": [{"name": "a", "image": "img"}]}));
        let mut o = obs(0, 1);
        o.containers[0].started(t(1), "x".into());
        o.containers[0].exited(exit(2), true, t(2), "a");
        assert_eq!(phase(&on_failure, &o), Phase::Running);
    }

    #[test]
    fn a_deadline_fails_the_pod_with_its_reason() {
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "img"}]}));
        let mut o = obs(0, 1);
        o.containers[0].started(t(1), "x".into());
        o.stop = Some(Stop::DeadlineExceeded);
        let s = pod_status(&p, &o, &ctx());
        // Still running: not terminal yet, but the reason is known.
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
        o.containers[0].exited(exit(137), false, t(3), "a");
        let s = pod_status(&p, &o, &ctx());
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
        assert!(s.message.unwrap().contains("deadline"));
    }

    #[test]
    fn a_deleted_pod_whose_containers_never_ran_ends_failed() {
        let mut p = pod(
            serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "a", "image": "img"}]}),
        );
        p.metadata.deletion_timestamp = Some(Time(t(3)));
        let o = obs(0, 1);
        assert_eq!(phase(&p, &o), Phase::Failed);
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let mut p = pod(
            serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "a", "image": "img"}]}),
        );
        let mut o = obs(0, 1);
        let first = pod_status(
            &p,
            &o,
            &StatusContext {
                host_ip: "127.0.0.1",
                pod_ip: "198.18.0.5",
                now: t(5),
            },
        );
        p.status = Some(first.clone());
        // Unchanged: the old time stays.
        let again = pod_status(&p, &o, &ctx());
        assert_eq!(cond(&again, "Ready").last_transition_time, Some(Time(t(5))));
        o.containers[0].started(t(6), "x".into());
        let later = pod_status(&p, &o, &ctx());
        assert_eq!(
            cond(&later, "Ready").last_transition_time,
            Some(Time(t(10)))
        );
        assert_eq!(
            cond(&later, "Initialized").last_transition_time,
            Some(Time(t(5)))
        );
    }

    #[test]
    fn a_sandbox_failure_shows_on_the_waiting_containers() {
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "img"}]}));
        let mut o = obs(0, 1);
        o.sandbox_ready = false;
        o.sandbox_message = Some("configmap \"x\" not found".into());
        let s = pod_status(&p, &o, &ctx());
        let w = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(w.message.as_deref(), Some("configmap \"x\" not found"));
        assert_eq!(
            cond(&pod_status(&p, &o, &ctx()), "PodReadyToStartContainers").status,
            "False"
        );
    }

    #[test]
    fn a_terminal_phase_is_kept() {
        let mut p = pod(
            serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "a", "image": "img"}]}),
        );
        p.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..PodStatus::default()
        });
        assert_eq!(phase(&p, &obs(0, 1)), Phase::Succeeded);
    }
}
