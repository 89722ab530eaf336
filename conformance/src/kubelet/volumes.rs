//! Pod volumes: what each one holds (planned purely from the Pod and the
//! objects it references) and how it lands on disk (the kubelet's atomic
//! writer layout, so an update swaps one symlink).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{KeyToPath, Pod, Volume};

use super::downward::{self, NodeFacts};
use super::envvars::{Refs, Wanted};

/// One file of a content volume, relative to the volume's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A ServiceAccount token a projected volume asks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokenWanted {
    /// Empty: the API server's own audiences.
    pub audience: String,
    pub expiration_seconds: i64,
}

/// How a volume is provided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir {
        memory: bool,
    },
    /// configMap, secret, downwardAPI and projected: files the kubelet writes.
    Content,
    HostPath {
        path: PathBuf,
        type_: String,
    },
}

/// The kind of a volume, or the reason the process kubelet cannot provide it.
pub fn kind(v: &Volume) -> Result<VolumeKind, String> {
    if let Some(e) = &v.empty_dir {
        return Ok(VolumeKind::EmptyDir {
            memory: e.medium.as_deref() == Some("Memory"),
        });
    }
    if v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some()
    {
        return Ok(VolumeKind::Content);
    }
    if let Some(h) = &v.host_path {
        return Ok(VolumeKind::HostPath {
            path: PathBuf::from(&h.path),
            type_: h.type_.clone().unwrap_or_default(),
        });
    }
    Err(format!(
        "volume {:?}: this volume type is not supported by the process kubelet \
         (emptyDir, configMap, secret, downwardAPI, projected and hostPath are)",
        v.name
    ))
}

/// The objects and tokens a volume needs fetched.
pub fn wanted(v: &Volume) -> (Wanted, BTreeSet<TokenWanted>) {
    let mut w = Wanted::default();
    let mut tokens = BTreeSet::new();
    if let Some(cm) = &v.config_map {
        w.config_maps.insert(cm.name.clone());
    }
    if let Some(s) = &v.secret
        && let Some(name) = &s.secret_name
    {
        w.secrets.insert(name.clone());
    }
    if let Some(p) = &v.projected {
        for src in p.sources.iter().flatten() {
            if let Some(cm) = &src.config_map {
                w.config_maps.insert(cm.name.clone());
            }
            if let Some(s) = &src.secret {
                w.secrets.insert(s.name.clone());
            }
            if let Some(t) = &src.service_account_token {
                tokens.insert(TokenWanted {
                    audience: t.audience.clone().unwrap_or_default(),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                });
            }
        }
    }
    (w, tokens)
}

const DEFAULT_MODE: i32 = 0o644;

/// A relative path that stays inside the volume.
fn checked_path(p: &str) -> Result<String, String> {
    let path = Path::new(p);
    let ok = !p.is_empty()
        && !p.starts_with("..")
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(p.to_string())
    } else {
        Err(format!("invalid volume file path {p:?}"))
    }
}

fn mode(m: Option<i32>, default: i32) -> u32 {
    (m.unwrap_or(default) & 0o7777) as u32
}

/// Files from key/value data: every key, or the listed `items`.
fn keyed_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
    missing_key: &dyn Fn(&str) -> String,
) -> Result<Vec<FileEntry>, String> {
    let mut out = Vec::new();
    match items {
        None => {
            for (k, v) in data {
                out.push(FileEntry {
                    path: checked_path(k)?,
                    data: v.clone(),
                    mode: mode(None, default_mode),
                });
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => out.push(FileEntry {
                        path: checked_path(&item.path)?,
                        data: v.clone(),
                        mode: mode(item.mode, default_mode),
                    }),
                    None if optional => {}
                    None => return Err(missing_key(&item.key)),
                }
            }
        }
    }
    Ok(out)
}

fn config_map_data(refs: &Refs, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    Ok(refs.config_map(name)?.map(|cm| {
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        for (k, v) in cm.binary_data.iter().flatten() {
            data.insert(k.clone(), v.0.clone());
        }
        data
    }))
}

fn secret_data(refs: &Refs, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    Ok(refs.secret(name)?.map(|s| {
        let mut data: BTreeMap<String, Vec<u8>> = s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        // stringData is write-only in the API; honour it if a fake sets it.
        for (k, v) in s.string_data.iter().flatten() {
            data.entry(k.clone())
                .or_insert_with(|| v.clone().into_bytes());
        }
        data
    }))
}

/// The files of a content volume (configMap, secret, downwardAPI,
/// projected). The error is the message of a failed mount.
pub fn files(
    pod: &Pod,
    v: &Volume,
    refs: &Refs,
    tokens: &BTreeMap<TokenWanted, String>,
    facts: &NodeFacts,
) -> Result<Vec<FileEntry>, String> {
    let mut out = Vec::new();
    if let Some(src) = &v.config_map {
        let optional = src.optional == Some(true);
        let default = src.default_mode.unwrap_or(DEFAULT_MODE);
        match config_map_data(refs, &src.name)? {
            Some(data) => out.extend(keyed_files(
                &data,
                src.items.as_ref(),
                default,
                optional,
                &|k| format!("configmap references non-existent config key: {k}"),
            )?),
            None if optional => {}
            None => return Err(format!("configmap {:?} not found", src.name)),
        }
    } else if let Some(src) = &v.secret {
        let name = src.secret_name.as_deref().unwrap_or_default();
        let optional = src.optional == Some(true);
        let default = src.default_mode.unwrap_or(DEFAULT_MODE);
        match secret_data(refs, name)? {
            Some(data) => out.extend(keyed_files(
                &data,
                src.items.as_ref(),
                default,
                optional,
                &|k| format!("references non-existent secret key: {k}"),
            )?),
            None if optional => {}
            None => return Err(format!("secret {name:?} not found")),
        }
    } else if let Some(src) = &v.downward_api {
        let default = src.default_mode.unwrap_or(DEFAULT_MODE);
        for item in src.items.iter().flatten() {
            out.push(downward_file(pod, item, default, facts)?);
        }
    } else if let Some(src) = &v.projected {
        let default = src.default_mode.unwrap_or(DEFAULT_MODE);
        for p in src.sources.iter().flatten() {
            if let Some(cm) = &p.config_map {
                let optional = cm.optional == Some(true);
                match config_map_data(refs, &cm.name)? {
                    Some(data) => out.extend(keyed_files(
                        &data,
                        cm.items.as_ref(),
                        default,
                        optional,
                        &|k| format!("configmap references non-existent config key: {k}"),
                    )?),
                    None if optional => {}
                    None => return Err(format!("configmap {:?} not found", cm.name)),
                }
            } else if let Some(s) = &p.secret {
                let optional = s.optional == Some(true);
                match secret_data(refs, &s.name)? {
                    Some(data) => out.extend(keyed_files(
                        &data,
                        s.items.as_ref(),
                        default,
                        optional,
                        &|k| format!("references non-existent secret key: {k}"),
                    )?),
                    None if optional => {}
                    None => return Err(format!("secret {:?} not found", s.name)),
                }
            } else if let Some(d) = &p.downward_api {
                for item in d.items.iter().flatten() {
                    out.push(downward_file(pod, item, default, facts)?);
                }
            } else if let Some(t) = &p.service_account_token {
                let key = TokenWanted {
                    audience: t.audience.clone().unwrap_or_default(),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                };
                let token = tokens
                    .get(&key)
                    .ok_or_else(|| format!("no token minted for audience {:?}", key.audience))?;
                out.push(FileEntry {
                    path: checked_path(&t.path)?,
                    data: token.clone().into_bytes(),
                    mode: mode(None, default),
                });
            } else if p.cluster_trust_bundle.is_some() || p.pod_certificate.is_some() {
                return Err(format!(
                    "volume {:?}: clusterTrustBundle and podCertificate projections are not \
                     supported by the process kubelet",
                    v.name
                ));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for f in &out {
        if !seen.insert(f.path.clone()) {
            return Err(format!(
                "volume {:?}: two sources write {:?}",
                v.name, f.path
            ));
        }
    }
    Ok(out)
}

fn downward_file(
    pod: &Pod,
    item: &k8s_openapi::api::core::v1::DownwardAPIVolumeFile,
    default: i32,
    facts: &NodeFacts,
) -> Result<FileEntry, String> {
    let value = if let Some(f) = &item.field_ref {
        downward::field_value(pod, &f.field_path, facts, true)?
    } else if let Some(r) = &item.resource_field_ref {
        downward::resource_value(pod, None, r, facts)?
    } else {
        return Err(format!("downwardAPI item {:?} names no field", item.path));
    };
    Ok(FileEntry {
        path: checked_path(&item.path)?,
        data: value.into_bytes(),
        mode: mode(item.mode, default),
    })
}

// ---- on disk -------------------------------------------------------------

const DATA_LINK: &str = "..data";

/// Writes `files` into `dir` as the kubelet's atomic writer does: the files
/// live in a timestamped `..<ts>` directory, `..data` points at it, and each
/// top-level name is a symlink through `..data`. Returns whether anything
/// changed. `fs_group` makes the files group-readable by that group.
pub fn atomic_write(dir: &Path, files: &[FileEntry], fs_group: Option<u32>) -> io::Result<bool> {
    fs::create_dir_all(dir)?;
    let data_link = dir.join(DATA_LINK);
    let old_target = fs::read_link(&data_link).ok();
    if let Some(old) = &old_target
        && same_content(&dir.join(old), files)
    {
        return Ok(false);
    }
    let stamp = jiff::Timestamp::now()
        .strftime("%Y_%m_%d_%H_%M_%S.%f")
        .to_string();
    let ts_name = format!("..{stamp}");
    let ts_dir = dir.join(&ts_name);
    fs::create_dir(&ts_dir)?;
    for f in files {
        let path = ts_dir.join(&f.path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, &f.data)?;
        let mut mode = f.mode;
        if let Some(g) = fs_group {
            std::os::unix::fs::chown(&path, None, Some(g))?;
            mode |= 0o440;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    }
    if let Some(g) = fs_group {
        chown_dirs(&ts_dir, g)?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = fs::remove_file(&tmp_link);
    symlink(&ts_name, &tmp_link)?;
    fs::rename(&tmp_link, &data_link)?;
    let top: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.path.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_LINK).join(name), &link)?;
        }
    }
    // Names the new content no longer has.
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || top.contains(&name) {
            continue;
        }
        if entry.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
            fs::remove_file(entry.path())?;
        }
    }
    if let Some(old) = old_target {
        let old_dir = dir.join(old);
        if old_dir != ts_dir {
            let _ = fs::remove_dir_all(old_dir);
        }
    }
    Ok(true)
}

fn chown_dirs(dir: &Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o2755))?;
    for e in fs::read_dir(dir)?.flatten() {
        if e.file_type()?.is_dir() {
            chown_dirs(&e.path(), gid)?;
        }
    }
    Ok(())
}

fn same_content(dir: &Path, files: &[FileEntry]) -> bool {
    let mut on_disk = Vec::new();
    if collect(dir, dir, &mut on_disk).is_err() {
        return false;
    }
    let mut wanted: Vec<(String, Vec<u8>, u32)> = files
        .iter()
        .map(|f| (f.path.clone(), f.data.clone(), f.mode))
        .collect();
    wanted.sort();
    on_disk.sort();
    // Modes may carry the fsGroup bits: compare content and names only,
    // plus the owner bits that the spec sets.
    wanted.len() == on_disk.len()
        && wanted
            .iter()
            .zip(on_disk.iter())
            .all(|(w, d)| w.0 == d.0 && w.1 == d.1 && (w.2 & 0o700) == (d.2 & 0o700))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>, u32)>) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            collect(root, &p, out)?;
        } else {
            let rel = p
                .strip_prefix(root)
                .map_err(io::Error::other)?
                .to_string_lossy()
                .into_owned();
            let mode = e.metadata()?.permissions().mode() & 0o7777;
            out.push((rel, fs::read(&p)?, mode));
        }
    }
    Ok(())
}

/// Resolves `subPath` inside a volume's host directory, refusing a path
/// that leaves it (through `..` or a symlink).
pub fn sub_path(volume_dir: &Path, sub: &str) -> Result<PathBuf, String> {
    let rel = Path::new(sub);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "subPath {sub:?} must be a relative path without '..'"
        ));
    }
    let root = fs::canonicalize(volume_dir)
        .map_err(|e| format!("volume directory {}: {e}", volume_dir.display()))?;
    let joined = root.join(rel);
    if fs::symlink_metadata(&joined).is_err() {
        // A kubelet creates a missing subPath as a directory.
        fs::create_dir_all(&joined).map_err(|e| format!("creating subPath {sub:?}: {e}"))?;
        fs::set_permissions(&joined, fs::Permissions::from_mode(0o777))
            .map_err(|e| format!("subPath {sub:?}: {e}"))?;
    }
    let real = fs::canonicalize(&joined).map_err(|e| format!("subPath {sub:?}: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!("subPath {sub:?} leaves its volume"));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::envvars::Lookup;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    fn facts() -> NodeFacts {
        NodeFacts::for_tests()
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"memory": "32Mi"}}}]}
        }))
        .unwrap()
    }

    fn refs() -> Refs {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"}, "data": {"a.txt": "A", "b.txt": "B"},
            "binaryData": {"bin": "AAEC"}
        }))
        .unwrap();
        let s = Secret {
            data: Some(
                [("token".to_string(), ByteString(b"t0k".to_vec()))]
                    .into_iter()
                    .collect(),
            ),
            ..Secret::default()
        };
        let mut r = Refs::default();
        r.config_maps.insert("cm".into(), Lookup::Found(cm));
        r.config_maps
            .insert("kube-root-ca.crt".into(), Lookup::NotFound);
        r.secrets.insert("s".into(), Lookup::Found(s));
        r
    }

    fn vol(v: serde_json::Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    fn paths(files: &[FileEntry]) -> Vec<(String, u32)> {
        files.iter().map(|f| (f.path.clone(), f.mode)).collect()
    }

    #[test]
    fn config_map_every_key_or_items_with_modes() {
        let none = BTreeMap::new();
        let all = files(
            &pod(),
            &vol(serde_json::json!({"name": "v", "configMap": {"name": "cm"}})),
            &refs(),
            &none,
            &facts(),
        )
        .unwrap();
        assert_eq!(
            paths(&all),
            [
                ("a.txt".into(), 0o644),
                ("b.txt".into(), 0o644),
                ("bin".into(), 0o644)
            ]
        );
        assert_eq!(all[2].data, vec![0, 1, 2]);
        let items = files(&pod(), &vol(serde_json::json!({"name": "v", "configMap": {"name": "cm", "defaultMode": 0o400,
            "items": [{"key": "a.txt", "path": "conf/a"}, {"key": "b.txt", "path": "b", "mode": 0o600}]}})), &refs(), &none, &facts()).unwrap();
        assert_eq!(
            paths(&items),
            [("conf/a".into(), 0o400), ("b".into(), 0o600)]
        );
    }

    #[test]
    fn missing_objects_and_keys_fail_unless_optional() {
        let none = BTreeMap::new();
        let f = |v: serde_json::Value| files(&pod(), &vol(v), &refs(), &none, &facts());
        assert_eq!(
            f(serde_json::json!({"name": "v", "configMap": {"name": "cm", "items": [{"key": "zz", "path": "z"}]}})).unwrap_err(),
            "configmap references non-existent config key: zz"
        );
        assert!(f(serde_json::json!({"name": "v", "configMap": {"name": "cm", "optional": true, "items": [{"key": "zz", "path": "z"}]}})).unwrap().is_empty());
        assert_eq!(
            f(serde_json::json!({"name": "v", "configMap": {"name": "kube-root-ca.crt"}}))
                .unwrap_err(),
            "configmap \"kube-root-ca.crt\" not found"
        );
        assert_eq!(
            f(serde_json::json!({"name": "v", "secret": {"secretName": "s", "items": [{"key": "nope", "path": "n"}]}})).unwrap_err(),
            "references non-existent secret key: nope"
        );
        assert!(f(serde_json::json!({"name": "v", "configMap": {"name": "cm", "items": [{"key": "a.txt", "path": "../escape"}]}})).is_err());
    }

    #[test]
    fn projected_combines_sources_and_the_minted_token() {
        let v = vol(
            serde_json::json!({"name": "kube-api-access", "projected": {"defaultMode": 0o444, "sources": [
                {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 600}},
                {"secret": {"name": "s", "items": [{"key": "token", "path": "s-token"}]}},
                {"configMap": {"name": "cm", "items": [{"key": "a.txt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [
                    {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}
                ]}}
            ]}}),
        );
        let (w, tokens) = wanted(&v);
        assert_eq!(w.secrets.iter().collect::<Vec<_>>(), ["s"]);
        let t = tokens.into_iter().next().unwrap();
        assert_eq!(
            t,
            TokenWanted {
                audience: "vault".into(),
                expiration_seconds: 600
            }
        );
        let minted: BTreeMap<TokenWanted, String> = [(t, "jwt".to_string())].into_iter().collect();
        let out = files(&pod(), &v, &refs(), &minted, &facts()).unwrap();
        let get = |p: &str| {
            String::from_utf8(out.iter().find(|f| f.path == p).unwrap().data.clone()).unwrap()
        };
        assert_eq!(get("token"), "jwt");
        assert_eq!(get("s-token"), "t0k");
        assert_eq!(get("ca.crt"), "A");
        assert_eq!(get("namespace"), "ns");
        assert_eq!(get("labels"), "a=\"1\"");
        assert_eq!(get("mem"), "32");
        assert!(out.iter().all(|f| f.mode == 0o444));
        // Without the token minted, the volume cannot be written.
        assert!(files(&pod(), &v, &refs(), &BTreeMap::new(), &facts()).is_err());
    }

    #[test]
    fn unsupported_volumes_are_named() {
        let err = kind(&vol(
            serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": "x"}}),
        ))
        .unwrap_err();
        assert!(err.contains("\"data\""), "{err}");
        assert_eq!(
            kind(&vol(
                serde_json::json!({"name": "m", "emptyDir": {"medium": "Memory"}})
            ))
            .unwrap(),
            VolumeKind::EmptyDir { memory: true }
        );
    }

    #[test]
    fn atomic_writer_swaps_content_and_prunes_old_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        let f = |p: &str, d: &str, m: u32| FileEntry {
            path: p.into(),
            data: d.as_bytes().to_vec(),
            mode: m,
        };
        assert!(atomic_write(&dir, &[f("a", "1", 0o644), f("sub/b", "2", 0o400)], None).unwrap());
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        let mode = fs::metadata(dir.join("sub/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o400);
        assert!(
            fs::symlink_metadata(dir.join("a"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Same content: nothing to do.
        assert!(!atomic_write(&dir, &[f("a", "1", 0o644), f("sub/b", "2", 0o400)], None).unwrap());
        // New content: swapped, and the name that went away is gone.
        assert!(atomic_write(&dir, &[f("a", "3", 0o644)], None).unwrap());
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "3");
        assert!(fs::symlink_metadata(dir.join("sub")).is_err());
        let stamps = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(stamps, 1);
    }

    #[test]
    fn sub_path_stays_inside_its_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("v");
        fs::create_dir_all(vol.join("d")).unwrap();
        fs::write(vol.join("d/f"), "x").unwrap();
        symlink("/etc", vol.join("out")).unwrap();
        assert_eq!(
            sub_path(&vol, "d/f").unwrap(),
            fs::canonicalize(vol.join("d/f")).unwrap()
        );
        assert!(sub_path(&vol, "new/dir").unwrap().is_dir());
        assert!(sub_path(&vol, "../x").is_err());
        assert!(sub_path(&vol, "/abs").is_err());
        assert!(sub_path(&vol, "out").is_err());
    }
}
