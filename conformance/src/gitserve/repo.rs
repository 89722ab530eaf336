//! Test repositories made with the git CLI: bare repositories under the
//! servers' root, and commits written straight into them through a scratch
//! index (no work tree, no clone), so a test states exactly which files,
//! gitlinks and symlinks a commit holds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};

/// A `git` command isolated from the machine's and the user's git config,
/// that never prompts, and with a fixed author and committer.
pub fn git() -> Command {
    let mut cmd = Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_SSH_COMMAND",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "Ptah Harness")
        .env("GIT_AUTHOR_EMAIL", "harness@ptah.invalid")
        .env("GIT_COMMITTER_NAME", "Ptah Harness")
        .env("GIT_COMMITTER_EMAIL", "harness@ptah.invalid");
    cmd
}

/// Runs a git command, failing with its stderr; returns its trimmed stdout.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    run_with_input(cmd, None)
}

fn run_with_input(cmd: &mut Command, input: Option<&[u8]>) -> anyhow::Result<String> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Program and arguments only: Command's Debug also shows its env, which
    // may carry a credential.
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = cmd.spawn().with_context(|| format!("running {shown}"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(bytes)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// Makes the bare repository `<root>/<name>.git` with `main` as HEAD.
/// `allow_reachable_sha1_in_want` sets `uploadpack.allowReachableSHA1InWant`
/// (on or explicitly off), so protocol v0/v1 clients may (or may not) fetch a
/// commit by id that no ref points at. Pushes over smart HTTP are allowed.
pub fn create_repo(
    root: &Path,
    name: &str,
    allow_reachable_sha1_in_want: bool,
) -> anyhow::Result<PathBuf> {
    if name.is_empty()
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        bail!("repository name {name:?} must be a relative path without `.` or `..`");
    }
    let path = root.join(format!("{name}.git"));
    if path.exists() {
        bail!("repository {} already exists", path.display());
    }
    run(git()
        .args(["init", "--quiet", "--bare", "--initial-branch=main"])
        .arg(&path))?;
    let flag = if allow_reachable_sha1_in_want {
        "true"
    } else {
        "false"
    };
    config(&path, "uploadpack.allowReachableSHA1InWant", flag)?;
    config(&path, "http.receivepack", "true")?;
    Ok(path)
}

/// Sets one config value of a repository.
pub fn config(repo: &Path, key: &str, value: &str) -> anyhow::Result<()> {
    run(git()
        .arg("--git-dir")
        .arg(repo)
        .args(["config", key, value]))?;
    Ok(())
}

/// One change a commit makes to its parent's tree.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// A regular file (mode 100644) with these bytes.
    Write(&'a str, &'a [u8]),
    /// An executable file (mode 100755).
    Executable(&'a str, &'a [u8]),
    /// A symbolic link to this target.
    Symlink(&'a str, &'a str),
    /// A submodule entry (gitlink) pointing at this commit id.
    Gitlink(&'a str, &'a str),
    /// Removes a path.
    Remove(&'a str),
}

/// Commits `changes` on top of `branch` (or as its first commit) in the bare
/// repository and moves the branch; returns the new commit id.
pub fn commit(
    repo: &Path,
    branch: &str,
    changes: &[Change<'_>],
    message: &str,
) -> anyhow::Result<String> {
    static SCRATCH: AtomicU64 = AtomicU64::new(0);
    let index = repo.join(format!(
        "ptah-index-{}-{}",
        std::process::id(),
        SCRATCH.fetch_add(1, Ordering::Relaxed)
    ));
    let result = commit_with_index(repo, &index, branch, changes, message);
    let _ = std::fs::remove_file(&index);
    result
}

fn commit_with_index(
    repo: &Path,
    index: &Path,
    branch: &str,
    changes: &[Change<'_>],
    message: &str,
) -> anyhow::Result<String> {
    let refname = format!("refs/heads/{branch}");
    let g = || {
        let mut cmd = git();
        cmd.arg("--git-dir").arg(repo).env("GIT_INDEX_FILE", index);
        cmd
    };
    let parent = rev_parse(repo, &format!("{refname}^{{commit}}")).ok();
    match &parent {
        Some(p) => run(g().args(["read-tree", p]))?,
        None => run(g().args(["read-tree", "--empty"]))?,
    };
    let blob =
        |bytes: &[u8]| run_with_input(g().args(["hash-object", "-w", "--stdin"]), Some(bytes));
    for change in changes {
        let (mode, id, path) = match *change {
            Change::Write(path, bytes) => ("100644", blob(bytes)?, path),
            Change::Executable(path, bytes) => ("100755", blob(bytes)?, path),
            Change::Symlink(path, target) => ("120000", blob(target.as_bytes())?, path),
            Change::Gitlink(path, commit) => ("160000", commit.to_string(), path),
            Change::Remove(path) => {
                run(g().args(["update-index", "--force-remove", "--", path]))?;
                continue;
            }
        };
        run(g().args([
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("{mode},{id},{path}"),
        ]))
        .with_context(|| format!("adding {path} to the commit"))?;
    }
    let tree = run(g().arg("write-tree"))?;
    let mut commit_tree = g();
    commit_tree.args(["commit-tree", &tree, "-m", message]);
    if let Some(p) = &parent {
        commit_tree.args(["-p", p]);
    }
    let commit = run(&mut commit_tree)?;
    // Compare-and-swap on the old value: a concurrent writer fails loudly.
    let old = parent.unwrap_or_else(|| "0".repeat(40));
    run(g().args(["update-ref", &refname, &commit, &old]))?;
    Ok(commit)
}

/// Commits regular files (path, text) on `branch`; returns the commit id.
pub fn commit_files(
    repo: &Path,
    branch: &str,
    files: &[(&str, &str)],
    message: &str,
) -> anyhow::Result<String> {
    let changes: Vec<Change<'_>> = files
        .iter()
        .map(|(path, text)| Change::Write(path, text.as_bytes()))
        .collect();
    commit(repo, branch, &changes, message)
}

/// The object id a revision names.
pub fn rev_parse(repo: &Path, rev: &str) -> anyhow::Result<String> {
    run(git()
        .arg("--git-dir")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet", rev]))
    .with_context(|| format!("{rev} does not name an object in {}", repo.display()))
}

/// Points a ref at a commit whatever it held before (a force-push).
pub fn set_ref(repo: &Path, refname: &str, target: &str) -> anyhow::Result<()> {
    run(git()
        .arg("--git-dir")
        .arg(repo)
        .args(["update-ref", refname, target]))?;
    Ok(())
}

/// Makes a tag: annotated when `message` is given, else lightweight.
pub fn tag(repo: &Path, name: &str, target: &str, message: Option<&str>) -> anyhow::Result<()> {
    let mut cmd = git();
    cmd.arg("--git-dir").arg(repo).arg("tag");
    if let Some(m) = message {
        cmd.args(["-a", "-m", m]);
    }
    run(cmd.args([name, target]))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_build_on_each_other_and_hold_exactly_their_changes() {
        let dir = tempfile::tempdir().unwrap();
        let repo = create_repo(dir.path(), "demo", true).unwrap();
        let first = commit_files(
            &repo,
            "main",
            &[("db/schema.sql", "create table a();")],
            "one",
        )
        .unwrap();
        let second = commit(
            &repo,
            "main",
            &[
                Change::Write("db/extra.sql", b"select 1;"),
                Change::Gitlink("vendor/sub", &first),
                Change::Symlink("link", "db/schema.sql"),
            ],
            "two",
        )
        .unwrap();
        assert_eq!(rev_parse(&repo, "main").unwrap(), second);
        assert_eq!(rev_parse(&repo, "main~1").unwrap(), first);
        let tree = run(git().arg("--git-dir").arg(&repo).args([
            "ls-tree",
            "-r",
            "--format=%(objectmode) %(path)",
            "main",
        ]))
        .unwrap();
        assert_eq!(
            tree,
            "100644 db/extra.sql\n100644 db/schema.sql\n120000 link\n160000 vendor/sub"
        );
        tag(&repo, "v1", &first, Some("release")).unwrap();
        assert_eq!(rev_parse(&repo, "v1^{commit}").unwrap(), first);
        assert_ne!(
            rev_parse(&repo, "v1").unwrap(),
            first,
            "annotated tag object"
        );
        assert!(create_repo(dir.path(), "../escape", true).is_err());
    }
}
