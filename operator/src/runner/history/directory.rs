//! The migration directory as Ptah reads it: file names, checksums, declared transaction modes.

use super::*;

/// One migration of the directory, as Ptah loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryMigration {
    /// The 10-digit version.
    pub version: i64,
    /// Ptah's description: the name's words, title-cased.
    pub description: String,
    /// Lowercase hex SHA-256 of the up file's bytes: what the row records.
    pub checksum: String,
    /// A `.checkpoint.` pair.
    pub checkpoint: bool,
    /// What the up file's header declares.
    pub transaction_mode: Option<MigrationTransactionMode>,
    /// The up file, relative to the directory.
    pub up_file: String,
    /// The up file's text.
    pub up_sql: String,
}

impl DirectoryMigration {
    /// The plan's view of it.
    pub fn planned(&self) -> PlannedMigration {
        PlannedMigration {
            version: self.version,
            version_key: None,
            description: Some(self.description.clone()),
            checksum: self.checksum.clone(),
            checkpoint: self.checkpoint,
            transaction_mode: self.transaction_mode,
        }
    }
}

/// A Ptah-format migration directory, by version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    /// Every migration, by version.
    pub migrations: BTreeMap<i64, DirectoryMigration>,
    /// `ptah.sum` is there.
    pub sealed: bool,
}

/// Why a directory is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("migration directory: {file}: {reason}")]
pub struct DirectoryError {
    /// The file (or `.` for the directory).
    pub file: String,
    /// Why.
    pub reason: String,
}

pub(crate) fn dir_error(file: impl Into<String>, reason: impl Into<String>) -> DirectoryError {
    DirectoryError {
        file: file.into(),
        reason: reason.into(),
    }
}

/// `NNNNNNNNNN_name[.checkpoint].(up|down).sql` as Ptah parses it: the
/// version, the name, the direction and the checkpoint marker.
pub fn parse_file_name(name: &str) -> Option<(i64, String, bool, bool)> {
    let (stem, up) = if let Some(s) = name.strip_suffix(".up.sql") {
        (s, true)
    } else {
        (name.strip_suffix(".down.sql")?, false)
    };
    let (stem, checkpoint) = match stem.strip_suffix(".checkpoint") {
        Some(s) => (s, true),
        None => (stem, false),
    };
    let digits = stem.get(..10)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || stem.as_bytes().get(10) != Some(&b'_') {
        return None;
    }
    let title = stem.get(11..).filter(|n| !n.is_empty())?;
    Some((digits.parse().ok()?, title.to_string(), up, checkpoint))
}

/// Ptah's description of a file name: underscores to spaces, each word
/// title-cased (`order_index` → `Order Index`).
pub fn description_of(name: &str) -> String {
    let words: Vec<String> = name
        .replace('_', " ")
        .split(' ')
        .map(|w| {
            let mut chars = w.chars();
            match chars.next() {
                Some(first) => first
                    .to_uppercase()
                    .chain(chars.flat_map(char::to_lowercase))
                    .collect(),
                None => String::new(),
            }
        })
        .collect();
    words.join(" ").chars().take(DESCRIPTION_MAX).collect()
}

/// The transaction mode the up file's header declares: `-- +ptah
/// no_transaction` (or `=true`), or `-- atlas:txmode none|file`.
pub fn declared_transaction_mode(sql: &str) -> Option<MigrationTransactionMode> {
    let mut mode = None;
    for line in sql.lines() {
        let line = line.trim();
        let Some(comment) = line.strip_prefix("--") else {
            break;
        };
        let comment = comment.trim();
        if let Some(body) = comment.strip_prefix("+ptah") {
            for token in body.split_whitespace() {
                match token {
                    "no_transaction" | "no_transaction=true" => {
                        return Some(MigrationTransactionMode::None);
                    }
                    "no_transaction=false" => mode = Some(MigrationTransactionMode::File),
                    _ => {}
                }
            }
        } else if let Some(value) = comment.strip_prefix("atlas:txmode") {
            match value.trim() {
                "none" => return Some(MigrationTransactionMode::None),
                "file" => mode = Some(MigrationTransactionMode::File),
                _ => {}
            }
        }
    }
    mode
}

/// Reads a Ptah-format directory as Ptah does: every
/// `NNNNNNNNNN_name.(up|down).sql` below `source`, both halves required, the
/// up file's bytes hashed. Symbolic links, Atlas directories, Atlas templates
/// and txtar files are refused: Ptah would record another checksum for them.
pub fn read_directory(source: &Path) -> Result<Directory, DirectoryError> {
    let mut dir = Directory::default();
    let mut halves: BTreeMap<i64, (Option<DirectoryMigration>, bool, bool)> = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = source.join(&rel);
        let entries = std::fs::read_dir(&here)
            .map_err(|e| dir_error(display(&rel), format!("cannot be listed: {}", e.kind())))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry
                .map_err(|e| dir_error(display(&rel), format!("cannot be listed: {}", e.kind())))?;
            names.push(entry);
        }
        names.sort_by_key(std::fs::DirEntry::file_name);
        for entry in names {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = rel.join(&name);
            let kind = entry
                .file_type()
                .map_err(|e| dir_error(display(&path), format!("cannot be read: {}", e.kind())))?;
            if kind.is_symlink() {
                return Err(dir_error(display(&path), "is a symbolic link"));
            }
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if rel.as_os_str().is_empty() && name == "atlas.sum" {
                return Err(dir_error(
                    name,
                    "an Atlas directory: the runner reads Ptah's format only",
                ));
            }
            if rel.as_os_str().is_empty() && name == PTAH_SUM {
                dir.sealed = true;
                continue;
            }
            let Some((version, title, up, checkpoint)) = parse_file_name(&name) else {
                continue;
            };
            let slot = halves.entry(version).or_insert((None, false, checkpoint));
            if slot.2 != checkpoint {
                return Err(dir_error(
                    display(&path),
                    "mixes checkpoint and non-checkpoint halves",
                ));
            }
            if !up {
                if slot.1 {
                    return Err(dir_error(
                        display(&path),
                        format!("a second down file for version {version}"),
                    ));
                }
                slot.1 = true;
                continue;
            }
            if slot.0.is_some() {
                return Err(dir_error(
                    display(&path),
                    format!("a second up file for version {version}"),
                ));
            }
            let bytes = std::fs::read(source.join(&path))
                .map_err(|e| dir_error(display(&path), format!("cannot be read: {}", e.kind())))?;
            let sql = String::from_utf8(bytes.clone())
                .map_err(|_| dir_error(display(&path), "is not UTF-8"))?;
            if sql.contains("{{") {
                return Err(dir_error(
                    display(&path),
                    "looks like an Atlas template, which Ptah renders before hashing",
                ));
            }
            if sql.lines().any(|l| l.trim() == "-- atlas:txtar") {
                return Err(dir_error(
                    display(&path),
                    "is an Atlas txtar file, whose migration section Ptah hashes",
                ));
            }
            slot.0 = Some(DirectoryMigration {
                version,
                description: description_of(&title),
                checksum: hex::encode(sha2_digest(&bytes)),
                checkpoint,
                transaction_mode: declared_transaction_mode(&sql),
                up_file: display(&path),
                up_sql: sql,
            });
        }
    }
    for (version, (up, down, _)) in halves {
        match (up, down) {
            (Some(m), true) => {
                dir.migrations.insert(version, m);
            }
            _ => {
                return Err(dir_error(
                    ".",
                    format!(
                        "version {version} lacks its up or down file: Ptah requires both halves"
                    ),
                ));
            }
        }
    }
    Ok(dir)
}

pub(crate) fn display(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".into()
    } else {
        path.display().to_string()
    }
}

pub(crate) fn sha2_digest(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}
