//! The ConfigMap snapshot (the pure part): what the manager writes when it
//! resolves a ConfigMap source, and the check step the runner's init container
//! performs on the mounted snapshot before any operation reads it.
//!
//! # Files from keys
//!
//! The seed says Resolve "takes the selected keys as files": each selected key
//! of `data` or `binaryData` is one file, **named as its key**, at the root of
//! the file set (a ConfigMap key cannot hold `/`). The file's bytes are the
//! value's bytes (`data` as UTF-8, `binaryData` as decoded). So:
//!
//! * the manifest path of key `001_init.sql` is `001_init.sql`, the same path a
//!   Git source gives for `<path>/001_init.sql` — the same files give the same
//!   content digest whichever ConfigMap (name, UID), whichever of `data` or
//!   `binaryData`, whichever other keys beside them, or whichever Git path they
//!   came from;
//! * renaming a key renames the file, and gives another digest: file names
//!   are content for a migration directory (they carry the versions), so a
//!   renamed file is a different file set, never the same one.
//!
//! An edit to an unselected key changes no file and keeps the digest; an edit
//! to a selected key changes its file and the digest.
//!
//! # The snapshot ConfigMap
//!
//! * Name: `ptah-src-` followed by the first 32 hexadecimal digits of
//!   SHA-256(`"ptah-src v1\n" + <owner UID> + "\n" + <content digest> + "\n"`)
//!   ([`snapshot_name`]). The owning resource's UID is in it so that two
//!   resources never share (and so never delete) one snapshot; the content
//!   digest is in it so that new content is a new, immutable object, while
//!   resolving the same content again finds the same name (idempotent).
//! * Data: each file under its own key — in `data` when its bytes are UTF-8,
//!   in `binaryData` otherwise — and the manifest bytes under
//!   [`MANIFEST_KEY`] (`.ptah-manifest`) in `data`. A source key named
//!   `.ptah-manifest` is refused.
//! * The manager marks it `immutable: true` and owned by the resource (not here:
//!   this module knows nothing of Kubernetes).
//!
//! # The check step
//!
//! [`check_mounted`] reads the snapshot as the kubelet projects it (each key a
//! symlink through `..data` into a timestamped `..<time>` directory; the
//! `..`-prefixed entries are the kubelet's, and skipped), recomputes the
//! manifest of the files, requires the mounted manifest to give the expected
//! content digest and to list exactly those files, and refuses otherwise,
//! naming the first failing file. Only then does it copy the files to the
//! target directory the operation container reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::manifest::{self, Limits, Manifest, ManifestError, VerifyError};

/// The key of the snapshot that holds the manifest.
pub const MANIFEST_KEY: &str = ".ptah-manifest";
/// Prefix of every snapshot's name.
pub const NAME_PREFIX: &str = "ptah-src-";
/// Longest ConfigMap key.
const MAX_KEY_BYTES: usize = 253;
/// Most bytes of keys and values a ConfigMap holds (the API server's limit).
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

/// The source ConfigMap as the manager read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceConfigMap {
    /// `data`.
    pub data: BTreeMap<String, String>,
    /// `binaryData`, decoded.
    pub binary_data: BTreeMap<String, Vec<u8>>,
}

/// A snapshot ready to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// `ptah-src-<hash>`.
    pub name: String,
    /// The manifest of the files.
    pub manifest: Manifest,
    /// `sha256:<hex>` of the manifest bytes.
    pub content_digest: String,
    /// The files, by name (= key).
    pub files: BTreeMap<String, Vec<u8>>,
}

/// Why no snapshot is taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The owner UID is empty.
    #[error("the owning resource has no UID")]
    NoOwner,
    /// A selected key is in neither `data` nor `binaryData`.
    #[error("key {key:?}: selected but not in the ConfigMap")]
    MissingKey { key: String },
    /// A key is in both maps.
    #[error("key {key:?}: in both data and binaryData")]
    KeyInBoth { key: String },
    /// A key cannot be a file name or a snapshot key.
    #[error("key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// The files break a bound.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The files and the manifest do not fit in one ConfigMap.
    #[error(
        "the snapshot would hold {size} bytes of keys and values, more than a ConfigMap's {MAX_CONFIG_MAP_BYTES}"
    )]
    TooLarge { size: usize },
}

/// Checks a key: a valid ConfigMap key (`[-._a-zA-Z0-9]+`, at most 253 bytes,
/// not `.`, `..` or `..`-prefixed), a valid manifest path, and not the
/// manifest's own key.
pub fn check_key(key: &str) -> Result<(), SnapshotError> {
    let err = |reason| {
        Err(SnapshotError::InvalidKey {
            key: key.to_string(),
            reason,
        })
    };
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return err("must be 1 to 253 bytes");
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return err("may hold only letters, digits, '-', '.' and '_'");
    }
    if key == "." || key.starts_with("..") {
        return err("must not be '.' or start with '..'");
    }
    if key == MANIFEST_KEY {
        return err("is reserved for the snapshot's manifest");
    }
    manifest::check_path(key).or_else(|_| err("is not a valid file name"))
}

/// The snapshot's name for an owner and a content digest (see the module doc).
pub fn snapshot_name(owner_uid: &str, content_digest: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"ptah-src v1\n");
    h.update(owner_uid.as_bytes());
    h.update(b"\n");
    h.update(content_digest.as_bytes());
    h.update(b"\n");
    let hex = hex::encode(h.finalize());
    format!("{NAME_PREFIX}{}", &hex[..32])
}

/// The files a source ConfigMap gives for the selected keys (empty: every key
/// of `data` and `binaryData`, as the API's unset `keys`).
pub fn select_files(
    source: &SourceConfigMap,
    selected: &[String],
) -> Result<BTreeMap<String, Vec<u8>>, SnapshotError> {
    if let Some(key) = source
        .data
        .keys()
        .find(|k| source.binary_data.contains_key(*k))
    {
        return Err(SnapshotError::KeyInBoth { key: key.clone() });
    }
    let keys: BTreeSet<&str> = if selected.is_empty() {
        source
            .data
            .keys()
            .chain(source.binary_data.keys())
            .map(String::as_str)
            .collect()
    } else {
        selected.iter().map(String::as_str).collect()
    };
    let mut files = BTreeMap::new();
    for key in keys {
        check_key(key)?;
        let bytes = if let Some(text) = source.data.get(key) {
            text.as_bytes().to_vec()
        } else if let Some(bytes) = source.binary_data.get(key) {
            bytes.clone()
        } else {
            return Err(SnapshotError::MissingKey {
                key: key.to_string(),
            });
        };
        files.insert(key.to_string(), bytes);
    }
    Ok(files)
}

/// The bytes a snapshot of `files` would hold, as the API server counts them
/// against [`MAX_CONFIG_MAP_BYTES`]: every key and value of `data` and
/// `binaryData`, the manifest included. Shared with the other sources that
/// become snapshots (Flux artifacts).
pub(crate) fn config_map_size(files: &BTreeMap<String, Vec<u8>>, manifest: &Manifest) -> usize {
    files.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + MANIFEST_KEY.len()
        + manifest.to_bytes().len()
}

/// Takes the snapshot of the selected keys for the resource `owner_uid`.
pub fn take(
    source: &SourceConfigMap,
    selected: &[String],
    owner_uid: &str,
    limits: &Limits,
) -> Result<Snapshot, SnapshotError> {
    if owner_uid.is_empty() {
        return Err(SnapshotError::NoOwner);
    }
    let files = select_files(source, selected)?;
    let manifest = Manifest::from_files(
        files.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        limits,
    )?;
    let content_digest = manifest.digest();
    let size = config_map_size(&files, &manifest);
    if size > MAX_CONFIG_MAP_BYTES {
        return Err(SnapshotError::TooLarge { size });
    }
    Ok(Snapshot {
        name: snapshot_name(owner_uid, &content_digest),
        manifest,
        content_digest,
        files,
    })
}

impl Snapshot {
    /// The manifest bytes stored under [`MANIFEST_KEY`].
    pub fn manifest_bytes(&self) -> Vec<u8> {
        self.manifest.to_bytes()
    }

    /// The snapshot ConfigMap's `data`: the UTF-8 files and the manifest.
    pub fn data(&self) -> BTreeMap<String, String> {
        let mut data: BTreeMap<String, String> = self
            .files
            .iter()
            .filter_map(|(k, v)| {
                std::str::from_utf8(v)
                    .ok()
                    .map(|s| (k.clone(), s.to_string()))
            })
            .collect();
        // The manifest is ASCII apart from paths, which are ConfigMap keys.
        data.insert(
            MANIFEST_KEY.to_string(),
            String::from_utf8_lossy(&self.manifest_bytes()).into_owned(),
        );
        data
    }

    /// The snapshot ConfigMap's `binaryData`: the files that are not UTF-8.
    pub fn binary_data(&self) -> BTreeMap<String, Vec<u8>> {
        self.files
            .iter()
            .filter(|(_, v)| std::str::from_utf8(v).is_err())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Why the check step refuses a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The snapshot holds no manifest.
    #[error("file {MANIFEST_KEY:?}: missing (the snapshot has no manifest)")]
    NoManifest,
    /// A file could not be read or written.
    #[error("file {path:?}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    /// An entry is not a regular file, or leads out of the volume.
    #[error("file {path:?}: {reason}")]
    NotAFile { path: String, reason: &'static str },
    /// The files or the manifest do not give the expected digest.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl CheckError {
    /// The file that failed, when one did.
    pub fn path(&self) -> Option<&str> {
        match self {
            CheckError::NoManifest => Some(MANIFEST_KEY),
            CheckError::Io { path, .. } | CheckError::NotAFile { path, .. } => Some(path),
            CheckError::Verify(v) => v.path(),
        }
    }
}

/// Checks a snapshot's keys (files plus [`MANIFEST_KEY`]) against the content
/// digest an operation is bound to. Returns the manifest.
pub fn check_files(
    snapshot: &BTreeMap<String, Vec<u8>>,
    expected_digest: &str,
    limits: &Limits,
) -> Result<Manifest, CheckError> {
    let manifest_bytes = snapshot.get(MANIFEST_KEY).ok_or(CheckError::NoManifest)?;
    let files = snapshot
        .iter()
        .filter(|(k, _)| k.as_str() != MANIFEST_KEY)
        .map(|(k, v)| (k.as_str(), v.as_slice()));
    Ok(manifest::verify(
        files,
        manifest_bytes,
        expected_digest,
        limits,
    )?)
}

/// Reads a mounted snapshot volume: every entry not starting with `..`, read
/// through the kubelet's symlinks, which must stay inside the volume and end
/// at a regular file. The bounds apply while reading (the manifest's own size
/// is not counted, but bounded by the parser's limit).
pub fn read_mounted(dir: &Path, limits: &Limits) -> Result<BTreeMap<String, Vec<u8>>, CheckError> {
    let io_err = |path: &str| {
        let path = path.to_string();
        move |source| CheckError::Io { path, source }
    };
    let root = fs::canonicalize(dir).map_err(io_err("."))?;
    let mut out = BTreeMap::new();
    let mut total: u64 = 0;
    let mut entries: Vec<(String, PathBuf)> = Vec::new();
    for entry in fs::read_dir(&root).map_err(io_err("."))? {
        let entry = entry.map_err(io_err("."))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(CheckError::NotAFile {
                path: name.to_string_lossy().into_owned(),
                reason: "name is not UTF-8",
            });
        };
        if name.starts_with("..") {
            continue;
        }
        entries.push((name.to_string(), entry.path()));
    }
    entries.sort();
    let files = entries.iter().filter(|(n, _)| n != MANIFEST_KEY).count();
    if files > limits.max_files {
        let path = entries
            .iter()
            .filter(|(n, _)| n != MANIFEST_KEY)
            .nth(limits.max_files)
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        return Err(VerifyError::Files(ManifestError::TooManyFiles {
            path,
            max: limits.max_files,
        })
        .into());
    }
    for (name, path) in entries {
        let real = fs::canonicalize(&path).map_err(io_err(&name))?;
        if !real.starts_with(&root) {
            return Err(CheckError::NotAFile {
                path: name,
                reason: "leads out of the volume",
            });
        }
        let meta = fs::metadata(&real).map_err(io_err(&name))?;
        if !meta.is_file() {
            return Err(CheckError::NotAFile {
                path: name,
                reason: "is not a regular file",
            });
        }
        // Read at most one byte past the bound, whatever the size claims.
        let budget = if name == MANIFEST_KEY {
            64 * 1024 * 1024
        } else {
            limits.max_total_bytes.saturating_sub(total)
        };
        let mut bytes = Vec::new();
        fs::File::open(&real)
            .and_then(|f| f.take(budget.saturating_add(1)).read_to_end(&mut bytes))
            .map_err(io_err(&name))?;
        if bytes.len() as u64 > budget {
            return Err(VerifyError::Files(ManifestError::TooLarge {
                size: meta.len(),
                path: name,
                max: limits.max_total_bytes,
            })
            .into());
        }
        if name != MANIFEST_KEY {
            total += bytes.len() as u64;
        }
        out.insert(name, bytes);
    }
    Ok(out)
}

/// The check step of the snapshot init container: reads the mounted snapshot
/// at `mounted`, checks it against `expected_digest`, and only then copies the
/// files (not the manifest) into `target`. Returns the manifest.
pub fn check_mounted(
    mounted: &Path,
    expected_digest: &str,
    target: &Path,
    limits: &Limits,
) -> Result<Manifest, CheckError> {
    let snapshot = read_mounted(mounted, limits)?;
    let manifest = check_files(&snapshot, expected_digest, limits)?;
    fs::create_dir_all(target).map_err(|source| CheckError::Io {
        path: target.display().to_string(),
        source,
    })?;
    for entry in manifest.entries() {
        let Some(bytes) = snapshot.get(&entry.path) else {
            // verify() saw every listed file; unreachable in practice.
            return Err(VerifyError::Missing {
                path: entry.path.clone(),
            }
            .into());
        };
        fs::write(target.join(&entry.path), bytes).map_err(|source| CheckError::Io {
            path: entry.path.clone(),
            source,
        })?;
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn source() -> SourceConfigMap {
        SourceConfigMap {
            data: BTreeMap::from([
                ("001_init.sql".into(), "CREATE TABLE a (id int);\n".into()),
                ("002_more.sql".into(), "CREATE TABLE b (id int);\n".into()),
                ("notes.txt".into(), "not selected\n".into()),
            ]),
            binary_data: BTreeMap::from([("blob.bin".into(), vec![0xff, 0x00, 0x01])]),
        }
    }

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    const UID: &str = "7c0a4a5e-1111-4222-8333-444455556666";

    #[test]
    fn digest_depends_on_the_selected_files_only() {
        let l = Limits::default();
        let sel = keys(&["001_init.sql", "002_more.sql"]);
        let a = take(&source(), &sel, UID, &l).unwrap();

        // An edit to an unselected key keeps the digest and the name.
        let mut edited = source();
        edited.data.insert("notes.txt".into(), "changed".into());
        edited.binary_data.insert("new.bin".into(), vec![1]);
        let b = take(&edited, &sel, UID, &l).unwrap();
        assert_eq!(a.content_digest, b.content_digest);
        assert_eq!(a.name, b.name);

        // An edit to a selected key changes both.
        let mut edited = source();
        edited
            .data
            .insert("002_more.sql".into(), "CREATE TABLE c (id int);\n".into());
        let c = take(&edited, &sel, UID, &l).unwrap();
        assert_ne!(a.content_digest, c.content_digest);
        assert_ne!(a.name, c.name);

        // The same files in binaryData, among other keys, selected in another
        // order: same digest.
        let other = SourceConfigMap {
            data: BTreeMap::from([("zzz".into(), "other".into())]),
            binary_data: BTreeMap::from([
                (
                    "002_more.sql".into(),
                    b"CREATE TABLE b (id int);\n".to_vec(),
                ),
                (
                    "001_init.sql".into(),
                    b"CREATE TABLE a (id int);\n".to_vec(),
                ),
            ]),
        };
        let d = take(&other, &keys(&["002_more.sql", "001_init.sql"]), UID, &l).unwrap();
        assert_eq!(a.content_digest, d.content_digest);

        // Every key when none is selected; a renamed key is another file set.
        let all = take(&source(), &[], UID, &l).unwrap();
        assert_eq!(all.files.len(), 4);
        let mut renamed = source();
        let v = renamed.data.remove("002_more.sql").unwrap();
        renamed.data.insert("002_renamed.sql".into(), v);
        let r = take(
            &renamed,
            &keys(&["001_init.sql", "002_renamed.sql"]),
            UID,
            &l,
        )
        .unwrap();
        assert_ne!(a.content_digest, r.content_digest);
    }

    #[test]
    fn name_binds_owner_and_content() {
        let d = "sha256:aa";
        assert_eq!(snapshot_name(UID, d), snapshot_name(UID, d));
        assert_ne!(snapshot_name(UID, d), snapshot_name("other", d));
        assert_ne!(snapshot_name(UID, d), snapshot_name(UID, "sha256:bb"));
        let n = snapshot_name(UID, d);
        assert!(n.starts_with(NAME_PREFIX) && n.len() == NAME_PREFIX.len() + 32);
        assert_eq!(
            n, "ptah-src-faf0a6d1f11296c9164cea2779cabc25",
            "golden name; a change here renames every snapshot"
        );
    }

    #[test]
    fn refusals_name_the_key() {
        let l = Limits::default();
        let err = take(&source(), &keys(&["missing.sql"]), UID, &l).unwrap_err();
        assert_eq!(
            err.to_string(),
            "key \"missing.sql\": selected but not in the ConfigMap"
        );
        let mut both = source();
        both.binary_data.insert("notes.txt".into(), vec![]);
        assert!(matches!(
            take(&both, &[], UID, &l),
            Err(SnapshotError::KeyInBoth { .. })
        ));
        let mut reserved = source();
        reserved.data.insert(MANIFEST_KEY.into(), String::new());
        assert!(
            take(&reserved, &[], UID, &l)
                .unwrap_err()
                .to_string()
                .contains("reserved")
        );
        assert!(check_key("a/b").is_err());
        assert!(check_key("..data").is_err());
        let mut big = source();
        big.data
            .insert("big.sql".into(), "x".repeat(MAX_CONFIG_MAP_BYTES - 10));
        assert!(matches!(
            take(&big, &[], UID, &l),
            Err(SnapshotError::TooLarge { .. })
        ));
        assert!(matches!(
            take(&source(), &[], "", &l),
            Err(SnapshotError::NoOwner)
        ));
        let small = Limits {
            max_files: 10,
            max_total_bytes: 30,
        };
        let err = take(&source(), &[], UID, &small).unwrap_err();
        assert!(err.to_string().contains("\"002_more.sql\""), "{err}");
    }

    #[test]
    fn layout_puts_text_in_data_and_bytes_in_binary_data() {
        let s = take(&source(), &[], UID, &Limits::default()).unwrap();
        let data = s.data();
        assert!(data.contains_key("001_init.sql"));
        assert!(data.contains_key(MANIFEST_KEY));
        assert!(!data.contains_key("blob.bin"));
        assert_eq!(
            s.binary_data().get("blob.bin"),
            Some(&vec![0xff, 0x00, 0x01])
        );
        assert_eq!(data[MANIFEST_KEY].as_bytes(), s.manifest_bytes());
    }

    /// Lays `files` out as the kubelet does: `..<ts>/<key>`, `..data` ->
    /// `..<ts>`, `<key>` -> `..data/<key>`.
    fn project(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
        let ts = dir.join("..2026_01_01_00_00_00.000");
        fs::create_dir_all(&ts).unwrap();
        for (k, v) in files {
            fs::write(ts.join(k), v).unwrap();
            symlink(Path::new("..data").join(k), dir.join(k)).unwrap();
        }
        symlink("..2026_01_01_00_00_00.000", dir.join("..data")).unwrap();
    }

    fn snapshot_keys(s: &Snapshot) -> BTreeMap<String, Vec<u8>> {
        let mut m = s.files.clone();
        m.insert(MANIFEST_KEY.into(), s.manifest_bytes());
        m
    }

    #[test]
    fn check_step_accepts_the_snapshot_and_copies_the_files() {
        let l = Limits::default();
        let s = take(&source(), &[], UID, &l).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mounted = tmp.path().join("snapshot");
        let target = tmp.path().join("work");
        fs::create_dir(&mounted).unwrap();
        project(&mounted, &snapshot_keys(&s));
        let m = check_mounted(&mounted, &s.content_digest, &target, &l).unwrap();
        assert_eq!(m, s.manifest);
        for (k, v) in &s.files {
            assert_eq!(&fs::read(target.join(k)).unwrap(), v);
        }
        assert!(!target.join(MANIFEST_KEY).exists());
    }

    #[test]
    fn check_step_refuses_tampering_naming_the_file() {
        let l = Limits::default();
        let s = take(&source(), &[], UID, &l).unwrap();
        type Tamper = Box<dyn Fn(&mut BTreeMap<String, Vec<u8>>)>;
        let cases: Vec<(&str, Tamper, &str)> = vec![
            (
                "edited file",
                Box::new(|m| {
                    m.insert("002_more.sql".into(), b"DROP TABLE b; -- x\n".to_vec());
                }),
                "002_more.sql",
            ),
            (
                "added file",
                Box::new(|m| {
                    m.insert("000_evil.sql".into(), b"DROP TABLE a;".to_vec());
                }),
                "000_evil.sql",
            ),
            (
                "removed file",
                Box::new(|m| {
                    m.remove("001_init.sql");
                }),
                "001_init.sql",
            ),
            (
                "removed manifest",
                Box::new(|m| {
                    m.remove(MANIFEST_KEY);
                }),
                MANIFEST_KEY,
            ),
        ];
        for (what, tamper, file) in cases {
            let tmp = tempfile::tempdir().unwrap();
            let mut keys = snapshot_keys(&s);
            tamper(&mut keys);
            project(tmp.path(), &keys);
            let target = tmp.path().join("..work");
            let err = check_mounted(tmp.path(), &s.content_digest, &target, &l).unwrap_err();
            assert_eq!(err.path(), Some(file), "{what}: {err}");
            assert!(err.to_string().contains(file), "{what}: {err}");
            assert!(!target.exists(), "{what}: nothing is copied");
        }

        // A manifest rewritten to match the tampered files no longer gives the
        // bound digest.
        let mut edited = source();
        edited
            .data
            .insert("001_init.sql".into(), "DROP TABLE a;\n".into());
        let forged = take(&edited, &[], UID, &l).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        project(tmp.path(), &snapshot_keys(&forged));
        let err =
            check_mounted(tmp.path(), &s.content_digest, &tmp.path().join("w"), &l).unwrap_err();
        assert!(
            matches!(err, CheckError::Verify(VerifyError::ManifestDigest { .. })),
            "{err}"
        );
    }

    #[test]
    fn check_step_refuses_links_out_of_the_volume() {
        let l = Limits::default();
        let s = take(&source(), &keys(&["001_init.sql"]), UID, &l).unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("x"), b"CREATE TABLE a (id int);\n").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MANIFEST_KEY), s.manifest_bytes()).unwrap();
        symlink(outside.path().join("x"), tmp.path().join("001_init.sql")).unwrap();
        let err =
            check_mounted(tmp.path(), &s.content_digest, &tmp.path().join("..w"), &l).unwrap_err();
        assert_eq!(err.path(), Some("001_init.sql"));
        assert!(err.to_string().contains("out of the volume"), "{err}");
    }
}
