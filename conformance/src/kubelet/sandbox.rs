//! The bubblewrap sandbox of one container, planned without touching
//! anything: the root is bwrap's own tmpfs; the host's `/usr`, `/etc`, ...
//! are bound read-only into it; the image's files, the volumes and the
//! termination-message file are bound at their container paths on top.
//!
//! A read-only host directory cannot take a new mount point, so a base
//! directory that holds a target (an image file at `/usr/local/bin/x`, a
//! volume at `/etc/app`) is split: it becomes a tmpfs directory whose
//! entries are bound one by one, recursively along the target's path.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};

/// What an `lstat` of a host path finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEntry {
    Dir,
    File,
    Symlink(PathBuf),
    Other,
}

/// The host filesystem as the planner sees it (a fake in tests).
pub trait HostFs {
    fn kind(&self, path: &Path) -> Option<HostEntry>;
    /// The entries of a directory, sorted by name.
    fn list(&self, dir: &Path) -> Vec<(OsString, HostEntry)>;
    /// Whether the path (symlinks followed) is an executable regular file.
    fn is_executable(&self, path: &Path) -> bool;
}

/// The real host.
pub struct RealFs;

impl HostFs for RealFs {
    fn kind(&self, path: &Path) -> Option<HostEntry> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        let ft = meta.file_type();
        Some(if ft.is_symlink() {
            HostEntry::Symlink(std::fs::read_link(path).ok()?)
        } else if ft.is_dir() {
            HostEntry::Dir
        } else if ft.is_file() {
            HostEntry::File
        } else {
            HostEntry::Other
        })
    }
    fn list(&self, dir: &Path) -> Vec<(OsString, HostEntry)> {
        let mut out: Vec<(OsString, HostEntry)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                self.kind(&dir.join(&name)).map(|k| (name, k))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
    fn is_executable(&self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
}

/// One bind mount into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path inside the container (absolute).
    pub target: PathBuf,
    /// The host file or directory.
    pub source: PathBuf,
    pub read_only: bool,
}

/// A symlink made in the sandbox (`path` → `target`), after the mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Where the link is, inside the container (absolute).
    pub path: PathBuf,
    /// What it points to, as `ln -s` takes it.
    pub target: PathBuf,
}

/// Who the container's process is: the uid/gid and groups `setpriv`
/// switches to, and the capabilities it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub caps: Caps,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caps {
    /// `privileged: true`: every capability of the kubelet.
    All,
    /// Lowercase names without `cap_`, as `setpriv` takes them.
    Only(Vec<String>),
}

/// The capabilities a container runtime grants by default (containerd's set).
pub const DEFAULT_CAPS: &[&str] = &[
    "chown",
    "dac_override",
    "fsetid",
    "fowner",
    "mknod",
    "net_raw",
    "setgid",
    "setuid",
    "setfcap",
    "setpcap",
    "net_bind_service",
    "sys_chroot",
    "kill",
    "audit_write",
];

const KNOWN_CAPS: &[&str] = &[
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

fn cap_name(raw: &str) -> String {
    let lower = raw.to_ascii_lowercase();
    lower.strip_prefix("cap_").unwrap_or(&lower).to_string()
}

/// The identity of a container from its and its pod's securityContext.
/// The error is a `CreateContainerConfigError` message.
pub fn identity(
    pod_name: &str,
    container: &str,
    pod_sc: Option<&PodSecurityContext>,
    sc: Option<&SecurityContext>,
) -> Result<Identity, String> {
    let id = |v: Option<i64>, what: &str| -> Result<u32, String> {
        match v {
            None => Ok(0),
            Some(v) => u32::try_from(v).map_err(|_| format!("{what} {v} is out of range")),
        }
    };
    let uid = id(
        sc.and_then(|s| s.run_as_user)
            .or(pod_sc.and_then(|s| s.run_as_user)),
        "runAsUser",
    )?;
    let gid = id(
        sc.and_then(|s| s.run_as_group)
            .or(pod_sc.and_then(|s| s.run_as_group)),
        "runAsGroup",
    )?;
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod_sc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid == 0 {
        // The images carry no USER: without runAsUser they run as root.
        return Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod_name:?}, container: {container})"
        ));
    }
    let mut groups = Vec::new();
    if let Some(psc) = pod_sc {
        for g in psc
            .fs_group
            .iter()
            .chain(psc.supplemental_groups.iter().flatten())
        {
            let g = u32::try_from(*g).map_err(|_| format!("group {g} is out of range"))?;
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    let caps = if sc.and_then(|s| s.privileged) == Some(true) {
        Caps::All
    } else {
        let spec = sc.and_then(|s| s.capabilities.as_ref());
        let drop: Vec<String> = spec
            .and_then(|c| c.drop.clone())
            .unwrap_or_default()
            .iter()
            .map(|c| cap_name(c))
            .collect();
        let add: Vec<String> = spec
            .and_then(|c| c.add.clone())
            .unwrap_or_default()
            .iter()
            .map(|c| cap_name(c))
            .collect();
        for c in drop.iter().chain(add.iter()) {
            if c != "all" && !KNOWN_CAPS.contains(&c.as_str()) {
                return Err(format!("unknown capability {c:?}"));
            }
        }
        let mut set: Vec<String> = if drop.iter().any(|c| c == "all") {
            Vec::new()
        } else {
            DEFAULT_CAPS
                .iter()
                .map(|c| c.to_string())
                .filter(|c| !drop.contains(c))
                .collect()
        };
        if add.iter().any(|c| c == "all") {
            Caps::All
        } else {
            for c in add {
                if !set.contains(&c) {
                    set.push(c);
                }
            }
            set.sort();
            Caps::Only(set)
        }
    };
    Ok(Identity {
        uid,
        gid,
        groups,
        caps,
    })
}

/// Everything bwrap needs for one container.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub hostname: String,
    /// Host directories bound read-only at the same path (or recreated as
    /// the same symlink): `/usr`, `/bin`, `/etc`, ...
    pub base: Vec<PathBuf>,
    /// The image's files, read-only.
    pub image_files: Vec<Mount>,
    /// Volumes and the termination-message file, in any order.
    pub mounts: Vec<Mount>,
    /// Symlinks over whatever the base has at their paths (`/etc/hosts`).
    pub links: Vec<Link>,
    pub read_only_root: bool,
    pub working_dir: PathBuf,
    pub identity: Identity,
    pub argv: Vec<String>,
}

/// The directories every sandbox gets from the host, read-only.
pub const BASE_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"];

/// `setpriv` (util-linux) switches user and groups and trims capabilities
/// inside the sandbox; bwrap alone maps only one uid and no groups.
pub const SETPRIV: &str = "/usr/bin/setpriv";

/// Rewrites a path through the base directories that are symlinks on the
/// host (`/bin/sh` → `/usr/bin/sh` when `/bin` → `usr/bin`).
fn through_base_symlinks(spec: &SandboxSpec, fs: &dyn HostFs, path: &Path) -> PathBuf {
    for base in &spec.base {
        if let Some(HostEntry::Symlink(target)) = fs.kind(base)
            && let Ok(rest) = path.strip_prefix(base)
        {
            let parent = base.parent().unwrap_or(Path::new("/"));
            let resolved = normalize(&parent.join(target));
            return if rest.as_os_str().is_empty() {
                resolved
            } else {
                resolved.join(rest)
            };
        }
    }
    path.to_path_buf()
}

/// Lexical normalization (`.` and `..`), for paths inside the sandbox.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    RoBind(PathBuf, PathBuf),
    Dir(PathBuf),
    Symlink(PathBuf, PathBuf),
}

fn base_tree(host: &Path, targets: &[PathBuf], fs: &dyn HostFs, out: &mut Vec<Op>) {
    let under = targets.iter().any(|t| t.starts_with(host) && t != host);
    if !under {
        out.push(Op::RoBind(host.to_path_buf(), host.to_path_buf()));
        return;
    }
    out.push(Op::Dir(host.to_path_buf()));
    for (name, kind) in fs.list(host) {
        let child = host.join(&name);
        if targets.contains(&child) {
            // Shadowed by the target mounted there later.
            continue;
        }
        match kind {
            HostEntry::Dir => base_tree(&child, targets, fs, out),
            HostEntry::File => out.push(Op::RoBind(child.clone(), child)),
            HostEntry::Symlink(t) => out.push(Op::Symlink(t, child)),
            // Sockets and fifos in /etc or /usr have no use in a sandbox.
            HostEntry::Other => {}
        }
    }
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

impl SandboxSpec {
    fn mounts_resolved(&self, fs: &dyn HostFs) -> (Vec<Mount>, Vec<Mount>) {
        let fix = |m: &Mount| Mount {
            target: through_base_symlinks(self, fs, &normalize(&m.target)),
            ..m.clone()
        };
        let mut images: Vec<Mount> = self.image_files.iter().map(fix).collect();
        images.sort_by(|a, b| a.target.cmp(&b.target));
        let mut mounts: Vec<Mount> = self.mounts.iter().map(fix).collect();
        // Parents before children, so a nested mount lands inside its parent.
        mounts.sort_by_key(|m| depth(&m.target));
        (images, mounts)
    }

    fn working_dir(&self, fs: &dyn HostFs) -> PathBuf {
        through_base_symlinks(self, fs, &normalize(&self.working_dir))
    }

    /// The bwrap command line (without the `bwrap` program itself).
    pub fn bwrap_args(&self, fs: &dyn HostFs) -> Vec<OsString> {
        let (images, mounts) = self.mounts_resolved(fs);
        let workdir = self.working_dir(fs);
        let links: Vec<Link> = self
            .links
            .iter()
            .map(|l| Link {
                path: through_base_symlinks(self, fs, &normalize(&l.path)),
                target: l.target.clone(),
            })
            .collect();
        // A link is a target too: the base directory holding it is split,
        // and the host's entry at its path left out.
        let mut targets: Vec<PathBuf> = images
            .iter()
            .chain(mounts.iter())
            .map(|m| m.target.clone())
            .chain(links.iter().map(|l| l.path.clone()))
            .collect();
        // A working directory missing from a read-only base must be made.
        if fs.kind(&workdir) != Some(HostEntry::Dir) {
            targets.push(workdir.clone());
        }
        let mut ops = Vec::new();
        for base in &self.base {
            match fs.kind(base) {
                Some(HostEntry::Symlink(t)) => ops.push(Op::Symlink(t, base.clone())),
                Some(HostEntry::Dir) => base_tree(base, &targets, fs, &mut ops),
                Some(HostEntry::File) => ops.push(Op::RoBind(base.clone(), base.clone())),
                Some(HostEntry::Other) | None => {}
            }
        }
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            for i in items {
                a.push(i.as_ref().to_os_string());
            }
        };
        for op in &ops {
            match op {
                Op::RoBind(s, t) => push(&[&"--ro-bind", s, t]),
                Op::Dir(t) => push(&[&"--dir", t]),
                Op::Symlink(s, t) => push(&[&"--symlink", s, t]),
            }
        }
        push(&[&"--proc", &"/proc", &"--dev", &"/dev"]);
        if self.read_only_root {
            // As in a container runtime: a read-only root has no writable /tmp.
            push(&[&"--dir", &"/tmp"]);
        } else {
            push(&[&"--tmpfs", &"/tmp"]);
        }
        // bwrap makes the missing parents of a mount point 0700, which a
        // non-root container cannot traverse (a real runtime makes them
        // 0755): make them first, world-traversable.
        let mut parents = std::collections::BTreeSet::new();
        for m in images.iter().chain(mounts.iter()) {
            let target = Path::new(&m.target);
            let mut chain: Vec<&Path> = target.ancestors().skip(1).collect();
            chain.reverse();
            for dir in chain.into_iter().filter(|d| *d != Path::new("/")) {
                if parents.insert(dir.to_path_buf()) {
                    push(&[&"--perms", &"0755", &"--dir", &dir]);
                }
            }
            let flag = if m.read_only { "--ro-bind" } else { "--bind" };
            push(&[&flag, &m.source, &m.target]);
        }
        for l in &links {
            push(&[&"--symlink", &l.target, &l.path]);
        }
        push(&[&"--dir", &workdir]);
        if self.read_only_root {
            push(&[&"--remount-ro", &"/"]);
        }
        push(&[
            &"--chdir",
            &workdir,
            &"--unshare-pid",
            &"--unshare-uts",
            &"--unshare-ipc",
            &"--hostname",
            &self.hostname,
            &"--die-with-parent",
            &"--new-session",
        ]);
        if let Caps::Only(_) = &self.identity.caps {
            // What setpriv needs to switch user and trim the bounding set;
            // it drops them again before running the command.
            push(&[
                &"--cap-drop",
                &"ALL",
                &"--cap-add",
                &"CAP_SETUID",
                &"--cap-add",
                &"CAP_SETGID",
                &"--cap-add",
                &"CAP_SETPCAP",
            ]);
        }
        push(&[&"--", &SETPRIV]);
        let id = &self.identity;
        a.push(format!("--reuid={}", id.uid).into());
        a.push(format!("--regid={}", id.gid).into());
        if id.groups.is_empty() {
            a.push("--clear-groups".into());
        } else {
            let list: Vec<String> = id.groups.iter().map(u32::to_string).collect();
            a.push(format!("--groups={}", list.join(",")).into());
        }
        if let Caps::Only(caps) = &id.caps {
            let mut set = String::from("-all");
            for c in caps {
                set.push_str(",+");
                set.push_str(c);
            }
            a.push("--bounding-set".into());
            a.push(set.into());
            a.push("--inh-caps=-all".into());
        }
        a.push("--".into());
        a.extend(self.argv.iter().map(OsString::from));
        a
    }

    /// The host file behind a path inside the sandbox, if any: the last
    /// mount covering it, else an image file, else a base directory.
    pub fn host_path(&self, fs: &dyn HostFs, path: &Path) -> Option<PathBuf> {
        let path = through_base_symlinks(self, fs, &normalize(path));
        let (images, mounts) = self.mounts_resolved(fs);
        if let Some(m) = mounts.iter().rev().find(|m| path.starts_with(&m.target)) {
            let rest = path.strip_prefix(&m.target).ok()?;
            return Some(if rest.as_os_str().is_empty() {
                m.source.clone()
            } else {
                m.source.join(rest)
            });
        }
        if let Some(m) = images.iter().find(|m| m.target == path) {
            return Some(m.source.clone());
        }
        self.base
            .iter()
            .any(|b| fs.kind(b) == Some(HostEntry::Dir) && path.starts_with(b))
            .then_some(path)
    }

    /// Finds `argv[0]` the way `execvp` will inside the sandbox, so that a
    /// missing program is a `ContainerCannotRun` with a clear message rather
    /// than an exit code. `path_env` is the container's `PATH`.
    pub fn check_executable(&self, fs: &dyn HostFs, path_env: &str) -> Result<(), String> {
        let Some(program) = self.argv.first() else {
            return Err("no command to run".to_string());
        };
        if program.contains('/') {
            let p = self.working_dir.join(program);
            return match self.host_path(fs, &p) {
                Some(h) if fs.is_executable(&h) => Ok(()),
                _ => Err(format!(
                    "exec: {program:?}: stat {program}: no such file or directory (or not executable)"
                )),
            };
        }
        for dir in path_env.split(':').filter(|d| !d.is_empty()) {
            let p = Path::new(dir).join(program);
            if let Some(h) = self.host_path(fs, &p)
                && fs.is_executable(&h)
            {
                return Ok(());
            }
        }
        Err(format!(
            "exec: {program:?}: executable file not found in $PATH"
        ))
    }
}

/// The `PATH` of a container that sets none (what images conventionally set).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake host: paths to entries; directories list their children.
    struct FakeFs(BTreeMap<PathBuf, HostEntry>);

    impl FakeFs {
        fn new(entries: &[(&str, HostEntry)]) -> Self {
            FakeFs(
                entries
                    .iter()
                    .map(|(p, e)| (PathBuf::from(p), e.clone()))
                    .collect(),
            )
        }
    }

    impl HostFs for FakeFs {
        fn kind(&self, path: &Path) -> Option<HostEntry> {
            self.0.get(path).cloned()
        }
        fn list(&self, dir: &Path) -> Vec<(OsString, HostEntry)> {
            self.0
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir))
                .map(|(p, e)| (p.file_name().unwrap().to_os_string(), e.clone()))
                .collect()
        }
        fn is_executable(&self, path: &Path) -> bool {
            self.0.get(path) == Some(&HostEntry::File)
        }
    }

    fn host() -> FakeFs {
        use HostEntry::*;
        FakeFs::new(&[
            ("/usr", Dir),
            ("/usr/bin", Dir),
            ("/usr/bin/sh", File),
            ("/usr/lib", Dir),
            ("/usr/local", Dir),
            ("/usr/local/bin", Dir),
            ("/usr/local/bin/tool", File),
            ("/usr/local/share", Dir),
            ("/bin", Symlink("usr/bin".into())),
            ("/etc", Dir),
            ("/etc/passwd", File),
            ("/etc/alternatives", Symlink("/var/alt".into())),
            ("/img/ptah-operator", File),
            ("/vol/data", Dir),
            ("/vol/data/run.sh", File),
        ])
    }

    fn spec() -> SandboxSpec {
        SandboxSpec {
            hostname: "pod".into(),
            base: vec!["/usr".into(), "/bin".into(), "/etc".into(), "/lib64".into()],
            image_files: vec![],
            mounts: vec![],
            links: vec![],
            read_only_root: false,
            working_dir: "/".into(),
            identity: Identity {
                uid: 0,
                gid: 0,
                groups: vec![],
                caps: Caps::Only(vec!["chown".into(), "kill".into()]),
            },
            argv: vec!["sh".into(), "-c".into(), "true".into()],
        }
    }

    fn args(s: &SandboxSpec) -> Vec<String> {
        s.bwrap_args(&host())
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn has(args: &[String], seq: &[&str]) -> bool {
        args.windows(seq.len()).any(|w| w == seq)
    }

    #[test]
    fn base_dirs_are_bound_whole_when_nothing_lands_in_them() {
        let a = args(&spec());
        assert!(has(&a, &["--ro-bind", "/usr", "/usr"]));
        assert!(has(&a, &["--symlink", "usr/bin", "/bin"]));
        assert!(has(&a, &["--ro-bind", "/etc", "/etc"]));
        // Missing on the host: left out.
        assert!(!a.iter().any(|x| x == "/lib64"));
        assert!(has(&a, &["--tmpfs", "/tmp"]));
        assert!(has(&a, &["--hostname", "pod"]));
        assert!(has(
            &a,
            &[
                "--",
                "/usr/bin/setpriv",
                "--reuid=0",
                "--regid=0",
                "--clear-groups"
            ]
        ));
        assert!(has(&a, &["--bounding-set", "-all,+chown,+kill"]));
        assert!(a.ends_with(&["--".into(), "sh".into(), "-c".into(), "true".into()]));
    }

    #[test]
    fn an_image_file_splits_the_base_dir_along_its_path() {
        let mut s = spec();
        s.image_files.push(Mount {
            target: "/usr/local/bin/ptah-operator".into(),
            source: "/img/ptah-operator".into(),
            read_only: true,
        });
        let a = args(&s);
        assert!(!has(&a, &["--ro-bind", "/usr", "/usr"]));
        assert!(has(&a, &["--dir", "/usr"]));
        assert!(has(&a, &["--ro-bind", "/usr/bin", "/usr/bin"]));
        assert!(has(&a, &["--dir", "/usr/local/bin"]));
        assert!(has(
            &a,
            &["--ro-bind", "/usr/local/share", "/usr/local/share"]
        ));
        assert!(has(
            &a,
            &["--ro-bind", "/usr/local/bin/tool", "/usr/local/bin/tool"]
        ));
        assert!(has(
            &a,
            &[
                "--ro-bind",
                "/img/ptah-operator",
                "/usr/local/bin/ptah-operator"
            ]
        ));
        // Binds after the base that holds their mount points.
        let dir = a.iter().position(|x| x == "/usr/local/bin").unwrap();
        let bind = a.iter().position(|x| x == "/img/ptah-operator").unwrap();
        assert!(dir < bind);
    }

    #[test]
    fn a_volume_under_a_symlinked_base_lands_at_the_resolved_path() {
        let mut s = spec();
        s.mounts.push(Mount {
            target: "/bin/extra".into(),
            source: "/vol/data".into(),
            read_only: true,
        });
        s.mounts.push(Mount {
            target: "/etc/alternatives".into(),
            source: "/vol/data".into(),
            read_only: false,
        });
        let a = args(&s);
        assert!(has(&a, &["--ro-bind", "/vol/data", "/usr/bin/extra"]));
        assert!(has(&a, &["--ro-bind", "/usr/bin/sh", "/usr/bin/sh"]));
        assert!(has(&a, &["--dir", "/etc"]));
        // The host's symlink at the target is shadowed by the volume.
        assert!(!has(&a, &["--symlink", "/var/alt", "/etc/alternatives"]));
        assert!(has(&a, &["--bind", "/vol/data", "/etc/alternatives"]));
    }

    #[test]
    fn a_link_replaces_the_host_entry_after_the_mounts() {
        let mut s = spec();
        s.mounts.push(Mount {
            target: "/etc/process-kubelet".into(),
            source: "/vol/data".into(),
            read_only: true,
        });
        s.links.push(Link {
            path: "/etc/passwd".into(),
            target: "process-kubelet/passwd".into(),
        });
        let a = args(&s);
        // /etc is split, and the host's file is not bound under the link.
        assert!(has(&a, &["--dir", "/etc"]));
        assert!(!has(&a, &["--ro-bind", "/etc", "/etc"]));
        assert!(!has(&a, &["--ro-bind", "/etc/passwd", "/etc/passwd"]));
        assert!(has(
            &a,
            &["--symlink", "process-kubelet/passwd", "/etc/passwd"]
        ));
        let bind = a.iter().position(|x| x == "/etc/process-kubelet").unwrap();
        let link = a
            .iter()
            .position(|x| x == "process-kubelet/passwd")
            .unwrap();
        assert!(bind < link);
    }

    #[test]
    fn mounts_go_parents_first_and_a_read_only_root_is_remounted_last() {
        let mut s = spec();
        s.read_only_root = true;
        s.working_dir = "/work/sub".into();
        s.mounts.push(Mount {
            target: "/work/sub".into(),
            source: "/vol/b".into(),
            read_only: false,
        });
        s.mounts.push(Mount {
            target: "/work".into(),
            source: "/vol/a".into(),
            read_only: true,
        });
        let a = args(&s);
        let outer = a.iter().position(|x| x == "/vol/a").unwrap();
        let inner = a.iter().position(|x| x == "/vol/b").unwrap();
        assert!(outer < inner);
        assert!(has(&a, &["--dir", "/tmp"]));
        assert!(!a.iter().any(|x| x == "--tmpfs"));
        let remount = a.iter().position(|x| x == "--remount-ro").unwrap();
        assert!(remount > inner);
        assert!(has(&a, &["--chdir", "/work/sub"]));
    }

    #[test]
    fn executables_are_found_through_mounts_images_and_base() {
        let mut s = spec();
        s.image_files.push(Mount {
            target: "/usr/local/bin/ptah-operator".into(),
            source: "/img/ptah-operator".into(),
            read_only: true,
        });
        s.mounts.push(Mount {
            target: "/scripts".into(),
            source: "/vol/data".into(),
            read_only: true,
        });
        let fs = host();
        let check = |argv0: &str| {
            let mut s = s.clone();
            s.argv = vec![argv0.to_string()];
            s.check_executable(&fs, DEFAULT_PATH)
        };
        assert!(check("sh").is_ok());
        assert!(check("/bin/sh").is_ok());
        assert!(check("ptah-operator").is_ok());
        assert!(check("/scripts/run.sh").is_ok());
        assert!(check("tool").is_ok());
        let err = check("nope").unwrap_err();
        assert_eq!(err, "exec: \"nope\": executable file not found in $PATH");
        assert!(check("/scripts/missing").is_err());
        assert!(check("/usr/lib").is_err());
    }

    #[test]
    fn identity_follows_security_contexts() {
        let psc: PodSecurityContext = serde_json::from_value(serde_json::json!({
            "runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000, 2000]
        }))
        .unwrap();
        let sc: SecurityContext = serde_json::from_value(serde_json::json!({
            "runAsUser": 1001, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
        }))
        .unwrap();
        let id = identity("p_ns(u)", "c", Some(&psc), Some(&sc)).unwrap();
        assert_eq!(id.uid, 1001);
        assert_eq!(id.gid, 3000);
        assert_eq!(id.groups, vec![2000, 4000]);
        assert_eq!(id.caps, Caps::Only(vec!["net_bind_service".into()]));

        let plain = identity("p", "c", None, None).unwrap();
        assert_eq!((plain.uid, plain.gid), (0, 0));
        assert_eq!(
            plain.caps,
            Caps::Only({
                let mut d: Vec<String> = DEFAULT_CAPS.iter().map(|c| c.to_string()).collect();
                d.sort();
                d
            })
        );

        let privileged: SecurityContext =
            serde_json::from_value(serde_json::json!({"privileged": true})).unwrap();
        assert_eq!(
            identity("p", "c", None, Some(&privileged)).unwrap().caps,
            Caps::All
        );

        let non_root: SecurityContext =
            serde_json::from_value(serde_json::json!({"runAsNonRoot": true})).unwrap();
        let err = identity("p_ns(u)", "c", None, Some(&non_root)).unwrap_err();
        assert!(err.contains("runAsNonRoot"), "{err}");

        let bad: SecurityContext =
            serde_json::from_value(serde_json::json!({"capabilities": {"add": ["NOT_A_CAP"]}}))
                .unwrap();
        assert!(identity("p", "c", None, Some(&bad)).is_err());
        let neg: SecurityContext =
            serde_json::from_value(serde_json::json!({"runAsUser": -1})).unwrap();
        assert!(identity("p", "c", None, Some(&neg)).is_err());
    }
}
