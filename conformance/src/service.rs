//! Supervision of the harness's long-running processes: each one is started
//! detached in its own process group, with its output in a log file and its
//! pid (plus the kernel's start time, so a reused pid is never mistaken for
//! it) in a pid file. `down` stops them by those pids.

use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// One process of the harness.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Run as this uid/gid (PostgreSQL refuses to run as root).
    pub user: Option<(u32, u32)>,
    /// A loopback TCP port that accepts connections once the service is up.
    pub port: Option<u16>,
}

impl ServiceSpec {
    pub fn new(name: &str, program: impl Into<PathBuf>) -> Self {
        ServiceSpec {
            name: name.to_string(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            user: None,
            port: None,
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    pub fn user(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
}

/// What a pid file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub pid: i32,
    pub start_time: u64,
    /// The program file's modification time (ns) when it was started: a
    /// rebuilt binary (the process kubelet, say) is restarted by `up`.
    pub program_mtime: u128,
}

/// A program file's modification time in nanoseconds (0 when unknown).
fn program_mtime(program: &Path) -> u128 {
    fs::metadata(program)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// The kernel's start time of a process (field 22 of /proc/<pid>/stat), or
/// None when no such process runs (a zombie counts as gone).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The directory of pid files and the directory of logs under a state dir.
pub fn run_dir(state: &Path) -> PathBuf {
    state.join("run")
}
pub fn log_path(state: &Path, name: &str) -> PathBuf {
    state.join("logs").join(format!("{name}.log"))
}
fn pid_path(state: &Path, name: &str) -> PathBuf {
    run_dir(state).join(format!("{name}.pid"))
}

/// The recorded process of a service, if its pid file names one that still runs.
pub fn running(state: &Path, name: &str) -> Option<Recorded> {
    let text = fs::read_to_string(pid_path(state, name)).ok()?;
    let mut fields = text.split_whitespace();
    let rec = Recorded {
        pid: fields.next()?.parse().ok()?,
        start_time: fields.next()?.parse().ok()?,
        program_mtime: fields.next().and_then(|f| f.parse().ok()).unwrap_or(0),
    };
    (start_time(rec.pid) == Some(rec.start_time)).then_some(rec)
}

/// Every pid file under the state dir, running or not.
pub fn recorded(state: &Path) -> Vec<(String, Option<Recorded>)> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(run_dir(state)) {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().to_string();
            if let Some(name) = file.strip_suffix(".pid") {
                out.push((name.to_string(), running(state, name)));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether `start` found the service running or started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    AlreadyRunning(Recorded),
    Now(Recorded),
}

impl Started {
    pub fn recorded(self) -> Recorded {
        match self {
            Started::AlreadyRunning(rec) | Started::Now(rec) => rec,
        }
    }
}

/// Starts a service unless its recorded process still runs from the same
/// program file; one whose program was rebuilt since is stopped and started
/// again.
pub fn start(state: &Path, spec: &ServiceSpec) -> anyhow::Result<Started> {
    let mtime = program_mtime(&spec.program);
    if let Some(rec) = running(state, &spec.name) {
        if rec.program_mtime == mtime {
            return Ok(Started::AlreadyRunning(rec));
        }
        stop(state, &spec.name, Duration::from_secs(15))?;
    }
    fs::create_dir_all(run_dir(state))?;
    fs::create_dir_all(state.join("logs"))?;
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(state, &spec.name))?;
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: `down` signals the whole group, and a Ctrl-C
        // in the terminal that ran `up` does not reach it.
        .process_group(0);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    if let Some((uid, gid)) = spec.user {
        cmd.uid(uid).gid(gid);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {} ({})", spec.name, spec.program.display()))?;
    let pid = child.id() as i32;
    // Detached: the harness does not wait on it; `down` stops it by pid.
    std::mem::forget(child);
    let start_time =
        start_time(pid).with_context(|| format!("{} exited at once; see its log", spec.name))?;
    let rec = Recorded {
        pid,
        start_time,
        program_mtime: mtime,
    };
    fs::write(
        pid_path(state, &spec.name),
        format!("{pid} {start_time} {mtime}\n"),
    )?;
    Ok(Started::Now(rec))
}

/// Waits until the service's port accepts a connection, failing early with
/// the end of its log when its process exits.
pub fn wait_port(state: &Path, spec: &ServiceSpec, timeout: Duration) -> anyhow::Result<()> {
    let Some(port) = spec.port else {
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        ensure_alive(state, &spec.name)?;
        if Instant::now() > deadline {
            bail!(
                "{} did not listen on 127.0.0.1:{port} within {timeout:?}\n{}",
                spec.name,
                log_tail(state, &spec.name, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fails with the end of the service's log when its process is gone.
pub fn ensure_alive(state: &Path, name: &str) -> anyhow::Result<()> {
    if running(state, name).is_none() {
        bail!(
            "{name} exited; end of its log:\n{}",
            log_tail(state, name, 30)
        );
    }
    Ok(())
}

/// The last lines of a service's log.
pub fn log_tail(state: &Path, name: &str, lines: usize) -> String {
    let text = fs::read_to_string(log_path(state, name)).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Stops a service: SIGTERM to its process group, SIGKILL after `grace`.
/// Returns the pid it stopped, if one was running.
pub fn stop(state: &Path, name: &str, grace: Duration) -> anyhow::Result<Option<i32>> {
    let rec = running(state, name);
    if let Some(rec) = rec {
        let group = Pid::from_raw(rec.pid);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while start_time(rec.pid) == Some(rec.start_time) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if start_time(rec.pid) == Some(rec.start_time) {
            let _ = killpg(group, Signal::SIGKILL);
            let deadline = Instant::now() + Duration::from_secs(5);
            while start_time(rec.pid) == Some(rec.start_time) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Whatever else is left in the group (children that ignored SIGTERM).
        let _ = killpg(group, Signal::SIGKILL);
    }
    let _ = fs::remove_file(pid_path(state, name));
    Ok(rec.map(|r| r.pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_reads_this_process_and_not_a_missing_one() {
        let me = std::process::id() as i32;
        assert!(start_time(me).is_some());
        assert_eq!(start_time(i32::MAX), None);
    }

    #[test]
    fn a_started_service_is_recorded_and_stopped_by_pid() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ServiceSpec::new("sleeper", "/bin/sleep").args(["300"]);
        let Started::Now(rec) = start(dir.path(), &spec).unwrap() else {
            panic!("not started anew");
        };
        assert_eq!(running(dir.path(), "sleeper"), Some(rec));
        // Idempotent: a second start finds the first.
        assert_eq!(
            start(dir.path(), &spec).unwrap(),
            Started::AlreadyRunning(rec)
        );
        let stopped = stop(dir.path(), "sleeper", Duration::from_secs(5)).unwrap();
        assert_eq!(stopped, Some(rec.pid));
        assert_eq!(start_time(rec.pid), None);
        assert!(running(dir.path(), "sleeper").is_none());
    }

    #[test]
    fn a_service_whose_program_was_rebuilt_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("sleep");
        fs::copy("/bin/sleep", &program).unwrap();
        let spec = ServiceSpec::new("sleeper", &program).args(["300"]);
        let first = start(dir.path(), &spec).unwrap().recorded();
        // A rebuild: the file is replaced, its modification time moves.
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        // Read-only: a running executable cannot be opened for writing.
        fs::File::open(&program)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let Started::Now(second) = start(dir.path(), &spec).unwrap() else {
            panic!("the rebuilt program was not restarted");
        };
        assert_ne!(first.pid, second.pid);
        assert_eq!(start_time(first.pid), None, "the old process still runs");
        stop(dir.path(), "sleeper", Duration::from_secs(5)).unwrap();
    }
}
