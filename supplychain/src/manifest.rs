//! The content manifest of a ConfigMap or Git source, and its content digest.
//!
//! A manifest lists every selected file once, with its path, size and SHA-256.
//! The content digest is `sha256:<hex>` of the manifest bytes, so the same files
//! (same paths relative to the source's root, same bytes) give the same digest
//! whatever ConfigMap key set or Git path they came from.
//!
//! # Format `ptah-manifest v1`
//!
//! The manifest is UTF-8 text, lines ended by a single `\n` (no `\r`), no BOM:
//!
//! ```text
//! ptah-manifest v1\n
//! <sha256> <size> <path>\n      (one line per file)
//! ```
//!
//! * `<sha256>`: 64 lowercase hexadecimal digits, the SHA-256 of the file's bytes.
//! * `<size>`: the file's size in bytes, decimal ASCII, no sign, no leading zero
//!   (`0` for an empty file).
//! * `<path>`: the file's path relative to the source root, as UTF-8 bytes,
//!   written as is (no quoting or escaping: the path rules below exclude every
//!   character that would need it).
//! * Fields are separated by exactly one space (U+0020); the path is the rest of
//!   the line and may itself contain spaces.
//! * Lines are sorted by the path's UTF-8 bytes, ascending (plain byte-wise
//!   `memcmp` order); a path appears once.
//! * An empty file set is the header line alone.
//!
//! Path rules, checked when a manifest is built and when one is parsed:
//!
//! * non-empty, at most [`MAX_PATH_BYTES`] bytes, each component at most
//!   [`MAX_COMPONENT_BYTES`] bytes;
//! * relative: no leading `/`; components separated by a single `/`, none
//!   empty (no `//`, no trailing `/`), none `.` or `..`;
//! * no `\` (a separator elsewhere), no NUL, no control character
//!   (U+0000–U+001F, U+007F), so a path never spans lines;
//! * no path is both a file and a directory of another (`a` and `a/b`).
//!
//! Paths are not rewritten silently: [`normalize_path`] is the one place that
//! turns a source-relative spelling (`./a/b`) into the canonical form.
//!
//! Bounds ([`Limits`]): the number of files and the sum of their sizes. A
//! breach names the file at which the bound was crossed.
//!
//! The parser ([`Manifest::parse`]) accepts exactly the bytes [`Manifest::to_bytes`]
//! writes, refuses anything else with the line it stopped at, and never panics.

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};

/// The first line of every manifest of this version.
pub const HEADER: &str = "ptah-manifest v1";
/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest path component, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Bounds on a file set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most files.
    pub max_files: usize,
    /// Largest sum of file sizes, in bytes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    /// 10 000 files and 256 MiB: well above a ConfigMap (1 MiB) and any
    /// migration directory seen; a source policy narrows them.
    fn default() -> Self {
        Limits {
            max_files: 10_000,
            max_total_bytes: 256 * 1024 * 1024,
        }
    }
}

/// One file of a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Canonical path (see the module doc).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
}

impl Entry {
    /// The entry of `content` at `path` (checked when the manifest is built).
    pub fn of(path: String, content: &[u8]) -> Entry {
        Entry {
            path,
            size: content.len() as u64,
            sha256: Sha256::digest(content).into(),
        }
    }
}

/// A path that breaks the path rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("path {path:?}: {reason}")]
pub struct PathError {
    /// The path as given.
    pub path: String,
    /// Which rule it breaks.
    pub reason: &'static str,
}

/// Why a file set has no manifest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// A path breaks the path rules.
    #[error(transparent)]
    Path(#[from] PathError),
    /// Two files share a path.
    #[error("file {path:?} appears twice")]
    Duplicate { path: String },
    /// A path is a file and also a directory of another file.
    #[error("file {file:?} is also a directory of file {inner:?}")]
    FileIsDirectory { file: String, inner: String },
    /// More files than the limit.
    #[error("file {path:?} exceeds the limit of {max} files")]
    TooManyFiles { path: String, max: usize },
    /// The sizes add up past the limit.
    #[error("file {path:?} ({size} bytes) brings the total past the limit of {max} bytes")]
    TooLarge { path: String, size: u64, max: u64 },
}

/// Why manifest bytes do not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Larger than any manifest within the limits could be.
    #[error("manifest is {len} bytes, more than {max}")]
    Oversized { len: usize, max: usize },
    /// Not UTF-8.
    #[error("manifest is not UTF-8 (byte {offset})")]
    NotUtf8 { offset: usize },
    /// The first line is not the header.
    #[error("manifest line 1: expected {HEADER:?}")]
    Header,
    /// The last line has no `\n`.
    #[error("manifest does not end with a newline")]
    NoFinalNewline,
    /// A line is not `<sha256> <size> <path>`.
    #[error("manifest line {line}: {reason}")]
    Line { line: usize, reason: String },
    /// The entries break a rule of the file set.
    #[error("manifest line {line}: {source}")]
    Entries {
        line: usize,
        #[source]
        source: ManifestError,
    },
}

/// Why files do not match a manifest and digest (the first failure, in path
/// order).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The manifest bytes do not give the expected digest.
    #[error("manifest digest {actual} is not the expected {expected}")]
    ManifestDigest { expected: String, actual: String },
    /// The manifest bytes do not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A path of the files breaks a rule.
    #[error(transparent)]
    Files(#[from] ManifestError),
    /// The manifest lists a file that is not there.
    #[error("file {path:?}: missing (the manifest lists it)")]
    Missing { path: String },
    /// A file is there that the manifest does not list.
    #[error("file {path:?}: extra (the manifest does not list it)")]
    Extra { path: String },
    /// A file's size differs.
    #[error("file {path:?}: size {actual} bytes, the manifest says {expected}")]
    Size {
        path: String,
        expected: u64,
        actual: u64,
    },
    /// A file's SHA-256 differs.
    #[error("file {path:?}: sha256 {actual}, the manifest says {expected}")]
    Hash {
        path: String,
        expected: String,
        actual: String,
    },
}

impl VerifyError {
    /// The file that failed, when one did.
    pub fn path(&self) -> Option<&str> {
        match self {
            VerifyError::Missing { path }
            | VerifyError::Extra { path }
            | VerifyError::Size { path, .. }
            | VerifyError::Hash { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// A manifest: entries in canonical order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    entries: Vec<Entry>,
}

/// Checks `path` against the path rules; the path is returned unchanged.
pub fn check_path(path: &str) -> Result<(), PathError> {
    let err = |reason| {
        Err(PathError {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return err("is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return err("is longer than 4096 bytes");
    }
    if path.starts_with('/') {
        return err("is absolute");
    }
    if path.contains('\\') {
        return err("contains '\\' (the separator is '/')");
    }
    if path.chars().any(|c| c.is_ascii_control()) {
        return err("contains a control character");
    }
    for component in path.split('/') {
        match component {
            "" => return err("has an empty component ('//' or a trailing '/')"),
            "." => return err("has a '.' component"),
            ".." => return err("has a '..' component"),
            c if c.len() > MAX_COMPONENT_BYTES => {
                return err("has a component longer than 255 bytes");
            }
            _ => {}
        }
    }
    Ok(())
}

/// The canonical spelling of a source-relative path: leading `./` and `.`
/// components and repeated or trailing `/` are dropped; everything else must
/// already follow the rules (`..`, `\`, absolute paths are refused, never
/// rewritten).
pub fn normalize_path(path: &str) -> Result<String, PathError> {
    if path.starts_with('/') {
        return Err(PathError {
            path: path.to_string(),
            reason: "is absolute",
        });
    }
    let joined = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/");
    check_path(&joined).map_err(|e| PathError {
        path: path.to_string(),
        reason: e.reason,
    })?;
    Ok(joined)
}

impl Manifest {
    /// The manifest of a file set: `(path, bytes)` in any order. Paths must be
    /// canonical (see [`normalize_path`]).
    pub fn from_files<'a, I>(files: I, limits: &Limits) -> Result<Manifest, ManifestError>
    where
        I: IntoIterator<Item = (&'a str, &'a [u8])>,
    {
        let mut entries = Vec::new();
        for (path, content) in files {
            check_path(path)?;
            entries.push(Entry::of(path.to_string(), content));
        }
        entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        Self::from_sorted(entries, limits).map_err(|(_, e)| e)
    }

    /// The manifest of entries already hashed (a fetch that streams files
    /// hashes them as they arrive), in any order.
    pub fn from_entries(
        mut entries: Vec<Entry>,
        limits: &Limits,
    ) -> Result<Manifest, ManifestError> {
        for e in &entries {
            check_path(&e.path)?;
        }
        entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        Self::from_sorted(entries, limits).map_err(|(_, e)| e)
    }

    /// Checks sorted entries for duplicates, file/directory clashes and the
    /// limits; the error carries the index of the failing entry.
    fn from_sorted(
        entries: Vec<Entry>,
        limits: &Limits,
    ) -> Result<Manifest, (usize, ManifestError)> {
        let mut total: u64 = 0;
        for (i, e) in entries.iter().enumerate() {
            if i >= limits.max_files {
                return Err((
                    i,
                    ManifestError::TooManyFiles {
                        path: e.path.clone(),
                        max: limits.max_files,
                    },
                ));
            }
            total = total.saturating_add(e.size);
            if total > limits.max_total_bytes {
                return Err((
                    i,
                    ManifestError::TooLarge {
                        path: e.path.clone(),
                        size: e.size,
                        max: limits.max_total_bytes,
                    },
                ));
            }
            if i > 0 {
                let prev = &entries[i - 1];
                if prev.path == e.path {
                    return Err((
                        i,
                        ManifestError::Duplicate {
                            path: e.path.clone(),
                        },
                    ));
                }
            }
        }
        // `a` and `a/b`: in byte order `a/b` need not follow `a` directly
        // (`a.sql` sorts between them), so check every directory prefix.
        let files: BTreeMap<&str, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.path.as_str(), i))
            .collect();
        for (i, e) in entries.iter().enumerate() {
            for (cut, _) in e.path.match_indices('/') {
                if let Some(dir) = e.path.get(..cut)
                    && files.contains_key(dir)
                {
                    return Err((
                        i,
                        ManifestError::FileIsDirectory {
                            file: dir.to_string(),
                            inner: e.path.clone(),
                        },
                    ));
                }
            }
        }
        Ok(Manifest { entries })
    }

    /// The entries, in canonical order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no file.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sum of the file sizes.
    pub fn total_size(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }

    /// The canonical bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = String::with_capacity(HEADER.len() + 1 + self.entries.len() * 96);
        out.push_str(HEADER);
        out.push('\n');
        for e in &self.entries {
            out.push_str(&hex::encode(e.sha256));
            out.push(' ');
            out.push_str(&e.size.to_string());
            out.push(' ');
            out.push_str(&e.path);
            out.push('\n');
        }
        out.into_bytes()
    }

    /// The content digest: `sha256:<hex>` of [`Manifest::to_bytes`].
    pub fn digest(&self) -> String {
        crate::sha256_digest(&self.to_bytes())
    }

    /// Parses canonical manifest bytes. Anything [`Manifest::to_bytes`] would not
    /// write is refused; no input panics.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Manifest, ParseError> {
        // A line is at most 64 + 1 + 20 + 1 + MAX_PATH_BYTES + 1 bytes.
        let max =
            (HEADER.len() + 1).saturating_add(limits.max_files.saturating_mul(87 + MAX_PATH_BYTES));
        if bytes.len() > max {
            return Err(ParseError::Oversized {
                len: bytes.len(),
                max,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| ParseError::NotUtf8 {
            offset: e.valid_up_to(),
        })?;
        let Some(body) = text.strip_suffix('\n') else {
            return Err(if text.starts_with(HEADER) || text.is_empty() {
                if text.is_empty() {
                    ParseError::Header
                } else {
                    ParseError::NoFinalNewline
                }
            } else {
                ParseError::Header
            });
        };
        let mut lines = body.split('\n');
        if lines.next() != Some(HEADER) {
            return Err(ParseError::Header);
        }
        let mut entries: Vec<Entry> = Vec::new();
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let bad = |reason: String| ParseError::Line { line: n, reason };
            let (hash, rest) = line
                .split_once(' ')
                .ok_or_else(|| bad("expected \"<sha256> <size> <path>\"".into()))?;
            let (size, path) = rest
                .split_once(' ')
                .ok_or_else(|| bad("expected \"<sha256> <size> <path>\"".into()))?;
            let sha256 = parse_sha256(hash)
                .ok_or_else(|| bad("the hash is not 64 lowercase hexadecimal digits".into()))?;
            let size = parse_size(size)
                .ok_or_else(|| bad("the size is not a canonical decimal integer".into()))?;
            check_path(path).map_err(|e| bad(e.to_string()))?;
            if let Some(prev) = entries.last()
                && prev.path.as_bytes() >= path.as_bytes()
            {
                return Err(bad(if prev.path == path {
                    format!("file {path:?} appears twice")
                } else {
                    format!("file {path:?} is out of order (after {:?})", prev.path)
                }));
            }
            entries.push(Entry {
                path: path.to_string(),
                size,
                sha256,
            });
            if entries.len() > limits.max_files {
                break; // from_sorted names the file
            }
        }
        Self::from_sorted(entries, limits).map_err(|(i, source)| ParseError::Entries {
            line: i + 2,
            source,
        })
    }
}

fn parse_sha256(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn parse_size(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.to_bytes()))
    }
}

/// Checks files against manifest bytes and the digest they must give: the
/// manifest bytes must give `expected_digest`, parse, and list exactly the
/// files, each with its size and SHA-256. The error names the first failing
/// file in path order (missing, extra, size, hash). Returns the manifest.
pub fn verify<'a, I>(
    files: I,
    manifest_bytes: &[u8],
    expected_digest: &str,
    limits: &Limits,
) -> Result<Manifest, VerifyError>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let actual = crate::sha256_digest(manifest_bytes);
    if actual != expected_digest {
        return Err(VerifyError::ManifestDigest {
            expected: expected_digest.to_string(),
            actual,
        });
    }
    let manifest = Manifest::parse(manifest_bytes, limits)?;
    let mut present: BTreeMap<&[u8], (&str, &[u8])> = BTreeMap::new();
    for (path, content) in files {
        check_path(path).map_err(ManifestError::from)?;
        if present.insert(path.as_bytes(), (path, content)).is_some() {
            return Err(ManifestError::Duplicate {
                path: path.to_string(),
            }
            .into());
        }
    }
    // Merge the two sorted lists; the first difference in path order wins.
    let mut listed = manifest.entries.iter().peekable();
    let mut found = present.values().peekable();
    loop {
        match (listed.peek(), found.peek()) {
            (None, None) => break,
            (Some(e), None) => {
                return Err(VerifyError::Missing {
                    path: e.path.clone(),
                });
            }
            (None, Some((path, _))) => {
                return Err(VerifyError::Extra {
                    path: path.to_string(),
                });
            }
            (Some(e), Some((path, content))) => match e.path.as_bytes().cmp(path.as_bytes()) {
                std::cmp::Ordering::Less => {
                    return Err(VerifyError::Missing {
                        path: e.path.clone(),
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(VerifyError::Extra {
                        path: path.to_string(),
                    });
                }
                std::cmp::Ordering::Equal => {
                    let size = content.len() as u64;
                    if size != e.size {
                        return Err(VerifyError::Size {
                            path: e.path.clone(),
                            expected: e.size,
                            actual: size,
                        });
                    }
                    let hash: [u8; 32] = Sha256::digest(content).into();
                    if hash != e.sha256 {
                        return Err(VerifyError::Hash {
                            path: e.path.clone(),
                            expected: hex::encode(e.sha256),
                            actual: hex::encode(hash),
                        });
                    }
                    listed.next();
                    found.next();
                }
            },
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden_files() -> Vec<(&'static str, &'static [u8])> {
        vec![
            (
                "002_users.sql",
                b"CREATE TABLE users (id int);\n".as_slice(),
            ),
            ("001_init.sql", b"-- init\n".as_slice()),
            ("sub dir/empty.sql", b"".as_slice()),
            ("README.md", b"# schema\n".as_slice()),
        ]
    }

    const GOLDEN: &str = include_str!("../tests/golden/manifest_v1.txt");
    const GOLDEN_DIGEST: &str =
        "sha256:eec067c05752e1129dc155bd993446b380db8575f726a986bd1945ffc231c9ca";

    #[test]
    fn golden_manifest_bytes_and_digest() {
        let m = Manifest::from_files(golden_files(), &Limits::default()).unwrap();
        assert_eq!(String::from_utf8(m.to_bytes()).unwrap(), GOLDEN);
        assert_eq!(m.digest(), GOLDEN_DIGEST);
        assert_eq!(crate::sha256_digest(GOLDEN.as_bytes()), GOLDEN_DIGEST);
        // Byte order: upper case before lower case, digits first.
        let paths: Vec<_> = m.entries().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "001_init.sql",
                "002_users.sql",
                "README.md",
                "sub dir/empty.sql"
            ]
        );
    }

    #[test]
    fn prehashed_entries_give_the_same_manifest() {
        let entries = golden_files()
            .into_iter()
            .map(|(p, c)| Entry::of(p.to_string(), c))
            .collect();
        let m = Manifest::from_entries(entries, &Limits::default()).unwrap();
        assert_eq!(m.digest(), GOLDEN_DIGEST);
        let bad = vec![Entry::of("../x".into(), b"")];
        assert!(Manifest::from_entries(bad, &Limits::default()).is_err());
    }

    #[test]
    fn empty_set_is_the_header_alone() {
        let m = Manifest::from_files(Vec::new(), &Limits::default()).unwrap();
        assert_eq!(m.to_bytes(), b"ptah-manifest v1\n");
    }

    #[test]
    fn order_of_input_does_not_matter() {
        let mut files = golden_files();
        let a = Manifest::from_files(files.clone(), &Limits::default()).unwrap();
        files.reverse();
        let b = Manifest::from_files(files, &Limits::default()).unwrap();
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn parse_round_trips_and_refuses_non_canonical_forms() {
        let limits = Limits::default();
        let m = Manifest::parse(GOLDEN.as_bytes(), &limits).unwrap();
        assert_eq!(m.to_bytes(), GOLDEN.as_bytes());
        let line = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 5 a\n";
        let ok = format!("{HEADER}\n{line}");
        assert!(Manifest::parse(ok.as_bytes(), &limits).is_ok());
        let bad: &[(&str, &str)] = &[
            ("", "line 1"),
            ("ptah-manifest v2\n", "line 1"),
            ("ptah-manifest v1", "newline"),
            ("ptah-manifest v1\r\n", "line 1"),
            (&format!("{HEADER}\n{}", line.trim_end()), "newline"),
            (&format!("{HEADER}\n{}", line.to_uppercase()), "hexadecimal"),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 ", " 05 ")),
                "decimal",
            ),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 ", " +5 ")),
                "decimal",
            ),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 a", " 5 /a")),
                "absolute",
            ),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 a", " 5 a/../b")),
                "'..'",
            ),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 a", " 5 a\\b")),
                "separator",
            ),
            (
                &format!("{HEADER}\n{}", line.replace(" 5 a", " 5 a\rb")),
                "control",
            ),
            (&format!("{HEADER}\n{line}{line}"), "twice"),
            (
                &format!("{HEADER}\n{}{line}", line.replace(" 5 a", " 5 b")),
                "out of order",
            ),
            (
                &format!("{HEADER}\n{line}{}", line.replace(" 5 a", " 5 a/b")),
                "directory",
            ),
            (&format!("{HEADER}\n\n"), "expected"),
            (
                &format!(
                    "{HEADER}\n{}",
                    line.replace(" 5 ", " 99999999999999999999999 ")
                ),
                "decimal",
            ),
        ];
        for (input, want) in bad {
            let err = Manifest::parse(input.as_bytes(), &limits)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{input:?}: {err}");
        }
        assert!(matches!(
            Manifest::parse(&[0xff, 0xfe], &limits),
            Err(ParseError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn parse_never_panics_on_mutations() {
        // A poor man's fuzz run until the cargo-fuzz target exists: every
        // truncation and every single-byte change of the golden manifest.
        let limits = Limits::default();
        let golden = GOLDEN.as_bytes();
        for cut in 0..golden.len() {
            let _ = Manifest::parse(&golden[..cut], &limits);
        }
        for i in 0..golden.len() {
            for b in [0u8, b'\n', b' ', b'/', b'.', 0xff, b'0', b'a'] {
                let mut m = golden.to_vec();
                m[i] = b;
                if let Ok(parsed) = Manifest::parse(&m, &limits) {
                    assert_eq!(parsed.to_bytes(), m, "accepted a non-canonical form");
                }
            }
        }
    }

    #[test]
    fn path_rules() {
        for ok in ["a", "a/b.sql", "001 init.sql", "é/ü.sql", ".hidden", "a..b"] {
            check_path(ok).unwrap();
        }
        for bad in [
            "", "/a", "a//b", "a/", "./a", "a/./b", "..", "a/../b", "a\\b", "a\nb", "a\0b",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path(&"a".repeat(256)).is_err());
        assert!(check_path(&format!("{}/b", "a".repeat(255))).is_ok());
        assert_eq!(normalize_path("./db//schema/").unwrap(), "db/schema");
        assert!(normalize_path("/db").is_err());
        assert!(normalize_path("db/../x").is_err());
        assert!(
            normalize_path(".").is_err(),
            "nothing left is an empty path"
        );
    }

    #[test]
    fn bounds_name_the_file() {
        let limits = Limits {
            max_files: 2,
            max_total_bytes: 1000,
        };
        let err = Manifest::from_files(golden_files(), &limits).unwrap_err();
        assert_eq!(
            err,
            ManifestError::TooManyFiles {
                path: "README.md".into(),
                max: 2
            }
        );
        let limits = Limits {
            max_files: 10,
            max_total_bytes: 20,
        };
        let err = Manifest::from_files(golden_files(), &limits).unwrap_err();
        assert!(err.to_string().contains("\"002_users.sql\""), "{err}");
        // The parser applies the same bounds.
        let err = Manifest::parse(GOLDEN.as_bytes(), &limits).unwrap_err();
        assert!(err.to_string().contains("002_users.sql"), "{err}");
        let err =
            Manifest::from_files(vec![("a", b"".as_slice()), ("a", b"x")], &Limits::default());
        assert!(matches!(err, Err(ManifestError::Duplicate { .. })));
    }

    #[test]
    fn verify_names_the_first_failing_file() {
        let limits = Limits::default();
        let files = golden_files();
        let bytes = GOLDEN.as_bytes();
        verify(files.clone(), bytes, GOLDEN_DIGEST, &limits).unwrap();

        let err = verify(files.clone(), bytes, "sha256:00", &limits).unwrap_err();
        assert!(matches!(err, VerifyError::ManifestDigest { .. }));

        let missing: Vec<_> = files
            .iter()
            .copied()
            .filter(|f| f.0 != "002_users.sql")
            .collect();
        let err = verify(missing, bytes, GOLDEN_DIGEST, &limits).unwrap_err();
        assert_eq!(err.path(), Some("002_users.sql"));
        assert!(err.to_string().contains("missing"), "{err}");

        let mut extra = files.clone();
        extra.push(("000_evil.sql", b"DROP TABLE users;"));
        let err = verify(extra, bytes, GOLDEN_DIGEST, &limits).unwrap_err();
        assert_eq!(
            err,
            VerifyError::Extra {
                path: "000_evil.sql".into()
            }
        );

        let mut size = files.clone();
        size[1] = ("001_init.sql", b"-- init, longer\n");
        let err = verify(size, bytes, GOLDEN_DIGEST, &limits).unwrap_err();
        assert!(matches!(err, VerifyError::Size { ref path, .. } if path == "001_init.sql"));

        let mut hash = files.clone();
        hash[1] = ("001_init.sql", b"-- ini7\n");
        let err = verify(hash, bytes, GOLDEN_DIGEST, &limits).unwrap_err();
        assert!(matches!(err, VerifyError::Hash { ref path, .. } if path == "001_init.sql"));
        assert!(
            err.to_string().starts_with("file \"001_init.sql\": sha256"),
            "{err}"
        );
    }
}
