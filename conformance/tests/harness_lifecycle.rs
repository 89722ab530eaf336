//! `up` is idempotent and `down` leaves no process of the harness running,
//! checked by pid, on a second harness of its own (its own state dir and
//! ports) so the shared harness of the other tests is untouched.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use conformance::harness::{Harness, Parts};
use conformance::service;

fn harness_in(dir: &std::path::Path) -> Harness {
    let kubelet = PathBuf::from(env!("CARGO_BIN_EXE_process-kubelet"));
    Harness {
        state: dir.to_path_buf(),
        target_dir: kubelet.parent().map(PathBuf::from).unwrap_or_default(),
        kubelet_exe: kubelet,
        parts: Parts::default(),
    }
}

/// Every process under /proc whose command line names the state dir.
fn processes_naming(dir: &std::path::Path) -> Vec<(i32, String)> {
    let needle = dir.display().to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && service::start_time(pid).is_some() {
            out.push((pid, cmdline));
        }
    }
    out
}

#[tokio::test]
async fn up_is_idempotent_and_down_stops_every_process_by_pid() {
    let dir = tempfile::Builder::new()
        .prefix("ptah-harness-")
        .tempdir()
        .unwrap();
    // The databases run as their own system users, who must reach the state.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let harness = harness_in(dir.path());

    harness.up().await.expect("first up");
    let first = harness.status();
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "process-kubelet",
        "postgres",
        "mariadb",
        "registry",
        "referrers-registry",
        "git-daemon",
        "git-http",
        "git-sshd",
    ] {
        assert!(
            first.iter().any(|(n, pid)| n == name && pid.is_some()),
            "{name} is not running after up: {first:?}"
        );
    }

    // Jaeger runs wherever it is built (`build.sh jaeger`).
    if conformance::jaeger::binary().unwrap().is_some() {
        assert!(
            first
                .iter()
                .any(|(n, pid)| n == conformance::jaeger::SERVICE && pid.is_some()),
            "jaeger is not running after up: {first:?}"
        );
    }

    harness.up().await.expect("second up");
    assert_eq!(harness.status(), first, "a second up restarted something");

    let stopped = harness.down().expect("down");
    let pids: Vec<i32> = first.iter().filter_map(|(_, pid)| *pid).collect();
    assert_eq!(
        stopped.len(),
        pids.len(),
        "down stopped {stopped:?} of {first:?}"
    );
    for pid in pids {
        assert_eq!(
            service::start_time(pid),
            None,
            "pid {pid} still runs after down"
        );
    }
    assert!(
        harness.status().is_empty(),
        "pid files left: {:?}",
        harness.status()
    );
    let left = processes_naming(dir.path());
    assert!(left.is_empty(), "processes left after down: {left:?}");
}
