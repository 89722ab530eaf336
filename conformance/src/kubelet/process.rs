//! Running a sandbox and signalling what runs in it.
//!
//! bwrap forks twice: the outer `bwrap` (our child) waits for an inner
//! `bwrap` that is pid 1 of the sandbox's pid namespace and reaps for it,
//! and that one runs the container's command. SIGTERM therefore goes to
//! the command, pid 2 of that namespace, as a runtime signals a container's
//! main process (a signal to the outer bwrap would kill the sandbox at once
//! through `--die-with-parent`); SIGKILL goes to the init, which takes the
//! whole namespace with it. The
//! exit status of the outer bwrap is the command's (128+n for signal n).

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Starts bwrap with `args` and exactly `env`, output appended to `log`.
pub fn spawn(
    args: &[OsString],
    env: &[(String, String)],
    log: &Path,
) -> std::io::Result<tokio::process::Child> {
    let out = fs::OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    // Spawned from a runtime worker thread, which lives as long as the
    // kubelet: bwrap's --die-with-parent watches the spawning thread.
    tokio::process::Command::new("bwrap")
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(false)
        .spawn()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The sandbox's init: the outer bwrap's child.
fn sandbox_init(bwrap_pid: i32) -> Option<i32> {
    pids()
        .into_iter()
        .find(|&p| parent_of(p) == Some(bwrap_pid))
}

fn pid_namespace(pid: i32) -> Option<std::path::PathBuf> {
    fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// The pid of a process inside its own (innermost) pid namespace.
fn inner_pid(pid: i32) -> Option<i32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// SIGTERM to the container's main process, as a container runtime sends
/// it: the command bwrap's init started, pid 2 of the sandbox. Returns
/// whether it was found.
pub fn terminate(bwrap_pid: i32) -> bool {
    let Some(init) = sandbox_init(bwrap_pid) else {
        return false;
    };
    let Some(ns) = pid_namespace(init) else {
        return false;
    };
    pids()
        .into_iter()
        .find(|&p| p != init && pid_namespace(p).as_ref() == Some(&ns) && inner_pid(p) == Some(2))
        .is_some_and(|p| kill(Pid::from_raw(p), Signal::SIGTERM).is_ok())
}

/// SIGKILL to the whole sandbox: its init (the kernel then kills every
/// process of the namespace), or the outer bwrap when there is no init yet.
pub fn kill_sandbox(bwrap_pid: i32) {
    match sandbox_init(bwrap_pid) {
        Some(init) => {
            let _ = kill(Pid::from_raw(init), Signal::SIGKILL);
        }
        None => {
            let _ = kill(Pid::from_raw(bwrap_pid), Signal::SIGKILL);
        }
    }
}

/// Exit code and signal of the outer bwrap, the container's as a runtime
/// reports them.
pub fn exit_of(status: std::process::ExitStatus) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        (None, None) => (255, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_and_inner_pid_read_proc() {
        let me = std::process::id() as i32;
        assert!(parent_of(me).is_some());
        assert_eq!(parent_of(i32::MAX), None);
        assert!(inner_pid(me).is_some());
    }
}
