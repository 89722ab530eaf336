//! The selected path of a commit's tree, read as files: blobs only, within
//! bounds; a submodule, an LFS pointer or a symlink leaving the path is refused.

use gix::objs::tree::EntryKind;

use super::{FileLimits, SelectedFile};
use crate::manifest::{self, Manifest};

/// Deepest directory nesting read.
const MAX_NESTING: usize = 64;
/// Git LFS pointer files start with this line (and are under 1 KiB).
const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1";

/// Why the selected files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the selected path is not usable: {0}")]
    Path(#[from] manifest::PathError),
    #[error("commit {commit} is not in the fetched objects")]
    MissingCommit { commit: String },
    #[error("path {path:?} does not exist in commit {commit}")]
    NotFound { path: String, commit: String },
    #[error("{path:?} is a submodule (gitlink): submodules are refused")]
    Submodule { path: String },
    #[error("{path:?} is a Git LFS pointer, not the file's content: LFS is refused")]
    LfsPointer { path: String },
    #[error("symlink {path:?} points to {target:?}, outside the selected path: refused")]
    SymlinkEscapes { path: String, target: String },
    #[error(
        "symlink {path:?} points to {target:?}, which is not a regular file in the selected path"
    )]
    SymlinkTarget { path: String, target: String },
    #[error("{path:?} is a symlink on the way to the selected path: refused")]
    SymlinkInPath { path: String },
    #[error("{path:?} is {size} bytes, more than the limit of {max}")]
    FileTooLarge { path: String, size: u64, max: u64 },
    #[error("{path:?} is nested more than {MAX_NESTING} directories deep")]
    TooDeep { path: String },
    #[error("file name {name:?} under {dir:?} is not UTF-8")]
    NotUtf8 { dir: String, name: String },
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    #[error("reading the repository: {detail}")]
    Repository { detail: String },
}

fn repo_err(e: impl std::fmt::Display) -> ReadError {
    ReadError::Repository {
        detail: e.to_string(),
    }
}

struct Entry {
    name: String,
    kind: EntryKind,
    id: gix::ObjectId,
}

fn entries(
    repo: &gix::Repository,
    tree: gix::ObjectId,
    dir: &str,
) -> Result<Vec<Entry>, ReadError> {
    let tree = repo.find_tree(tree).map_err(repo_err)?;
    let decoded = tree.decode().map_err(repo_err)?;
    decoded
        .entries
        .iter()
        .map(|e| {
            let name = std::str::from_utf8(e.filename)
                .map_err(|_| ReadError::NotUtf8 {
                    dir: dir.to_string(),
                    name: String::from_utf8_lossy(e.filename).into_owned(),
                })?
                .to_string();
            Ok(Entry {
                name,
                kind: e.mode.kind(),
                id: e.oid.to_owned(),
            })
        })
        .collect()
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The files at `path` of `commit` (named relative to `path`; a single file
/// by its own name), the path as answered, and the content digest.
pub(super) fn read_selected(
    repo: &gix::Repository,
    commit: &str,
    path: &str,
    limits: &FileLimits,
) -> Result<(String, Vec<SelectedFile>, String), ReadError> {
    let path = if path.trim_matches('/').is_empty() || path == "." {
        String::new()
    } else {
        manifest::normalize_path(path)?
    };
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(repo_err)?;
    let root = repo
        .find_commit(id)
        .map_err(|_| ReadError::MissingCommit {
            commit: commit.to_string(),
        })?
        .tree_id()
        .map_err(repo_err)?
        .detach();

    // Walk down to the selected path.
    let mut reader = Reader {
        repo,
        limits,
        files: Vec::new(),
        total: 0,
        root_path: path.clone(),
        selected_tree: None,
    };
    let mut tree = root;
    let mut walked = String::new();
    let components: Vec<&str> = if path.is_empty() {
        vec![]
    } else {
        path.split('/').collect()
    };
    for (i, component) in components.iter().enumerate() {
        let here = join(&walked, component);
        let entry = entries(repo, tree, &walked)?
            .into_iter()
            .find(|e| e.name == *component)
            .ok_or_else(|| ReadError::NotFound {
                path: path.clone(),
                commit: commit.to_string(),
            })?;
        let last = i + 1 == components.len();
        match entry.kind {
            EntryKind::Tree => tree = entry.id,
            EntryKind::Commit => return Err(ReadError::Submodule { path: here }),
            EntryKind::Link => return Err(ReadError::SymlinkInPath { path: here }),
            EntryKind::Blob | EntryKind::BlobExecutable if last => {
                let bytes = reader.blob(entry.id, &here)?;
                reader.push(component.to_string(), bytes, &here)?;
                return reader.finish(path);
            }
            EntryKind::Blob | EntryKind::BlobExecutable => {
                return Err(ReadError::NotFound {
                    path: path.clone(),
                    commit: commit.to_string(),
                });
            }
        }
        walked = here;
    }
    reader.selected_tree = Some(tree);
    reader.walk(tree, "", 0)?;
    reader.finish(path)
}

struct Reader<'r> {
    repo: &'r gix::Repository,
    limits: &'r FileLimits,
    files: Vec<SelectedFile>,
    total: u64,
    /// The selected path, to name files in errors by their repository path.
    root_path: String,
    /// The tree at the selected path, where symlink targets are looked up.
    selected_tree: Option<gix::ObjectId>,
}

impl Reader<'_> {
    fn full(&self, rel: &str) -> String {
        join(&self.root_path, rel)
    }

    fn walk(&mut self, tree: gix::ObjectId, dir: &str, nesting: usize) -> Result<(), ReadError> {
        if nesting > MAX_NESTING {
            return Err(ReadError::TooDeep {
                path: self.full(dir),
            });
        }
        for entry in entries(self.repo, tree, &self.full(dir))? {
            let rel = join(dir, &entry.name);
            match entry.kind {
                EntryKind::Tree => self.walk(entry.id, &rel, nesting + 1)?,
                EntryKind::Commit => {
                    return Err(ReadError::Submodule {
                        path: self.full(&rel),
                    });
                }
                EntryKind::Blob | EntryKind::BlobExecutable => {
                    let bytes = self.blob(entry.id, &self.full(&rel))?;
                    self.push(rel.clone(), bytes, &self.full(&rel))?;
                }
                EntryKind::Link => {
                    let target_bytes = self.blob(entry.id, &self.full(&rel))?;
                    let target = String::from_utf8_lossy(&target_bytes).into_owned();
                    let resolved =
                        resolve_link(dir, &target).ok_or_else(|| ReadError::SymlinkEscapes {
                            path: self.full(&rel),
                            target: target.clone(),
                        })?;
                    let bytes =
                        self.link_target(&resolved)
                            .ok_or_else(|| ReadError::SymlinkTarget {
                                path: self.full(&rel),
                                target: target.clone(),
                            })??;
                    self.push(rel.clone(), bytes, &self.full(&rel))?;
                }
            }
        }
        Ok(())
    }

    /// The bytes of the regular file at `rel` (relative to the selected
    /// tree), or `None` when it is not one.
    fn link_target(&self, rel: &str) -> Option<Result<Vec<u8>, ReadError>> {
        let mut tree = self.selected_tree?;
        let parts: Vec<&str> = rel.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let entry = entries(self.repo, tree, "")
                .ok()?
                .into_iter()
                .find(|e| e.name == *part)?;
            let last = i + 1 == parts.len();
            match entry.kind {
                EntryKind::Tree if !last => tree = entry.id,
                EntryKind::Blob | EntryKind::BlobExecutable if last => {
                    return Some(self.blob(entry.id, &self.full(rel)));
                }
                _ => return None,
            }
        }
        None
    }

    fn blob(&self, id: gix::ObjectId, path: &str) -> Result<Vec<u8>, ReadError> {
        let header = self.repo.find_header(id).map_err(repo_err)?;
        let size = header.size();
        if size > self.limits.max_file_bytes {
            return Err(ReadError::FileTooLarge {
                path: path.to_string(),
                size,
                max: self.limits.max_file_bytes,
            });
        }
        let blob = self.repo.find_blob(id).map_err(repo_err)?;
        Ok(blob.data.clone())
    }

    fn push(&mut self, rel: String, bytes: Vec<u8>, full: &str) -> Result<(), ReadError> {
        if bytes.len() < 1024 && bytes.starts_with(LFS_POINTER) {
            return Err(ReadError::LfsPointer {
                path: full.to_string(),
            });
        }
        if self.files.len() >= self.limits.max_files {
            return Err(manifest::ManifestError::TooManyFiles {
                path: full.to_string(),
                max: self.limits.max_files,
            }
            .into());
        }
        self.total = self.total.saturating_add(bytes.len() as u64);
        if self.total > self.limits.max_total_bytes {
            return Err(manifest::ManifestError::TooLarge {
                path: full.to_string(),
                size: bytes.len() as u64,
                max: self.limits.max_total_bytes,
            }
            .into());
        }
        self.files.push(SelectedFile { path: rel, bytes });
        Ok(())
    }

    fn finish(self, path: String) -> Result<(String, Vec<SelectedFile>, String), ReadError> {
        let limits = manifest::Limits {
            max_files: self.limits.max_files,
            max_total_bytes: self.limits.max_total_bytes,
        };
        let manifest = Manifest::from_files(
            self.files
                .iter()
                .map(|f| (f.path.as_str(), f.bytes.as_slice())),
            &limits,
        )?;
        Ok((path, self.files, manifest.digest()))
    }
}

/// A symlink's target resolved against its directory, relative to the
/// selected tree; `None` when it leaves that tree (or is absolute).
fn resolve_link(dir: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = if dir.is_empty() {
        vec![]
    } else {
        dir.split('/').collect()
    };
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_resolve_inside_the_selected_tree_only() {
        assert_eq!(resolve_link("a", "b.sql").as_deref(), Some("a/b.sql"));
        assert_eq!(resolve_link("a/b", "../c.sql").as_deref(), Some("a/c.sql"));
        assert_eq!(resolve_link("", "../x"), None);
        assert_eq!(resolve_link("a", "../../x"), None);
        assert_eq!(resolve_link("a", "/etc/passwd"), None);
        assert_eq!(resolve_link("a", ".."), None);
    }
}
