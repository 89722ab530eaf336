//! The harness's "images": a JSON map from image reference to a directory
//! whose files (symlinks resolved) appear at the same paths in the container.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::sandbox::Mount;

/// The image map file; re-read on every lookup so the harness can add
/// images while the kubelet runs.
#[derive(Debug, Clone)]
pub struct ImageMap {
    pub path: PathBuf,
}

/// A resolved image.
#[derive(Debug, Clone)]
pub struct Image {
    pub files: Vec<Mount>,
    /// `<repository>@sha256:<digest of the file list>`.
    pub id: String,
}

/// `busybox:1.36` → `docker.io/library/busybox:1.36`, a missing tag → `:latest`,
/// as a container runtime names images.
pub fn normalize_reference(reference: &str) -> String {
    let r = reference.trim();
    let (first, _) = r.split_once('/').unwrap_or(("", r));
    let with_registry = if !r.contains('/') {
        format!("docker.io/library/{r}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        r.to_string()
    } else {
        format!("docker.io/{r}")
    };
    let last = with_registry.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || last.contains('@') {
        with_registry
    } else {
        format!("{with_registry}:latest")
    }
}

fn repository(normalized: &str) -> &str {
    let cut = normalized.find('@').unwrap_or(normalized.len());
    let base = &normalized[..cut];
    match base.rfind(':') {
        Some(i) if !base[i..].contains('/') => &base[..i],
        _ => base,
    }
}

impl ImageMap {
    /// The image's files, or why it cannot be "pulled" (the message of an
    /// `ErrImagePull`).
    pub fn resolve(&self, reference: &str) -> Result<Image, String> {
        let text = fs::read_to_string(&self.path)
            .map_err(|e| format!("reading the image map {}: {e}", self.path.display()))?;
        let map: BTreeMap<String, PathBuf> = serde_json::from_str(&text)
            .map_err(|e| format!("parsing the image map {}: {e}", self.path.display()))?;
        let wanted = normalize_reference(reference);
        let dir = map
            .iter()
            .find(|(k, _)| normalize_reference(k) == wanted)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                format!(
                    "image {reference:?} is not in the process kubelet's image map {} (known: {})",
                    self.path.display(),
                    map.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })?;
        let mut files = Vec::new();
        walk(&dir, &dir, &mut files).map_err(|e| format!("image {reference:?}: {e}"))?;
        files.sort_by(|a, b| a.target.cmp(&b.target));
        let mut h = Sha256::new();
        for f in &files {
            h.update(f.target.as_os_str().as_encoded_bytes());
            h.update(b"\0");
            h.update(f.source.as_os_str().as_encoded_bytes());
            if let Ok(m) = fs::metadata(&f.source) {
                h.update(m.len().to_le_bytes());
                if let Ok(t) = m.modified()
                    && let Ok(d) = t.duration_since(std::time::UNIX_EPOCH)
                {
                    h.update(d.as_nanos().to_le_bytes());
                }
            }
            h.update(b"\n");
        }
        Ok(Image {
            files,
            id: format!(
                "{}@sha256:{}",
                repository(&wanted),
                hex::encode(h.finalize())
            ),
        })
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Mount>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let rel = path
            .strip_prefix(root)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let target = Path::new("/").join(rel);
        if ft.is_dir() {
            walk(root, &path, out)?;
        } else if ft.is_symlink() {
            // Bind what the link points at: a link would dangle in the sandbox.
            let source = fs::canonicalize(&path).map_err(|e| {
                format!(
                    "{} -> {}: {e}",
                    target.display(),
                    fs::read_link(&path)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default()
                )
            })?;
            out.push(Mount {
                target,
                source,
                read_only: true,
            });
        } else {
            out.push(Mount {
                target,
                source: path,
                read_only: true,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_normalized_like_a_runtime() {
        assert_eq!(
            normalize_reference("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_reference("busybox:1.36"),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            normalize_reference("library/busybox:1.36"),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            normalize_reference("ghcr.io/ptah-run/ptah-operator:dev"),
            "ghcr.io/ptah-run/ptah-operator:dev"
        );
        assert_eq!(
            normalize_reference("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
        assert_eq!(repository("localhost:5000/x:latest"), "localhost:5000/x");
        assert_eq!(repository("ghcr.io/a/b@sha256:00"), "ghcr.io/a/b");
    }

    #[test]
    fn an_image_is_its_files_with_links_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("built");
        fs::write(&real, "binary").unwrap();
        let img = tmp.path().join("img");
        fs::create_dir_all(img.join("usr/local/bin")).unwrap();
        std::os::unix::fs::symlink(&real, img.join("usr/local/bin/tool")).unwrap();
        fs::write(img.join("app.conf"), "x").unwrap();
        fs::create_dir_all(tmp.path().join("empty")).unwrap();
        let map = tmp.path().join("images.json");
        fs::write(
            &map,
            serde_json::json!({
                "ghcr.io/x/tool:dev": img,
                "docker.io/library/busybox:1.36": tmp.path().join("empty"),
            })
            .to_string(),
        )
        .unwrap();
        let images = ImageMap { path: map };
        let image = images.resolve("ghcr.io/x/tool:dev").unwrap();
        let pairs: Vec<(PathBuf, PathBuf)> = image
            .files
            .iter()
            .map(|m| (m.target.clone(), m.source.clone()))
            .collect();
        assert_eq!(
            pairs,
            [
                (PathBuf::from("/app.conf"), img.join("app.conf")),
                (
                    PathBuf::from("/usr/local/bin/tool"),
                    fs::canonicalize(&real).unwrap()
                ),
            ]
        );
        assert!(image.id.starts_with("ghcr.io/x/tool@sha256:"));
        assert!(images.resolve("busybox:1.36").unwrap().files.is_empty());
        let err = images.resolve("nginx").unwrap_err();
        assert!(
            err.contains("not in the process kubelet's image map"),
            "{err}"
        );
        // A dangling link is a pull error that names the file.
        std::os::unix::fs::symlink(tmp.path().join("missing"), img.join("usr/local/bin/gone"))
            .unwrap();
        let err = images.resolve("ghcr.io/x/tool:dev").unwrap_err();
        assert!(err.contains("/usr/local/bin/gone"), "{err}");
    }
}
