//! What one manager asked of the API server, from the harness's audit log
//! (every request of the managers' user, at metadata level, one JSON event
//! a line): the events of the manager whose holder is `test-<ns>` (its
//! user agent ends `(test-<ns>)`), read from a [`Mark`] on, and counted by
//! verb and resource.
//!
//! kube-apiserver rotates the log (`--audit-log-maxsize`): the file is
//! renamed to `audit-<time>.log` beside it and a new `audit.log` begun. A
//! mark names the file by its inode, which a rename keeps, so a stretch
//! that spans rotations is read from the marked file on through every
//! later backup to the live log.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::harness::Harness;

/// Where a measured stretch of the audit log starts: the live file (by
/// inode) and its length then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    inode: u64,
    offset: u64,
}

/// The audit log's end now.
pub fn mark(harness: &Harness) -> anyhow::Result<Mark> {
    end_of(&harness.audit_log())
}

fn end_of(file: &Path) -> anyhow::Result<Mark> {
    let meta = std::fs::metadata(file).with_context(|| format!("{}", file.display()))?;
    Ok(Mark {
        inode: meta.ino(),
        offset: meta.len(),
    })
}

/// The audit events from `mark` on of the manager whose holder is
/// `test-<ns>`.
pub fn events_since(harness: &Harness, mark: Mark, ns: &str) -> anyhow::Result<Vec<Value>> {
    let agent = format!("(test-{ns})");
    events_from(&harness.audit_log(), mark, |e| {
        e["userAgent"].as_str().is_some_and(|a| a.ends_with(&agent))
    })
}

/// The audit events from `mark` on about objects in namespace `ns`,
/// whoever made them.
pub fn events_in(harness: &Harness, mark: Mark, ns: &str) -> anyhow::Result<Vec<Value>> {
    events_from(&harness.audit_log(), mark, |e| {
        e["objectRef"]["namespace"].as_str() == Some(ns)
    })
}

/// The log's files oldest first: the rotated backups (named by the time
/// of their rotation, so their names sort by age), then the live file.
fn files_in_order(live: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = live.parent().context("the audit log's directory")?;
    let stem = live
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the audit log's name")?;
    let prefix = format!("{stem}-");
    let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".log"))
        })
        .collect();
    backups.sort();
    backups.push(live.to_path_buf());
    Ok(backups)
}

fn events_from(
    live: &Path,
    mark: Mark,
    keep: impl Fn(&Value) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let files = files_in_order(live)?;
    let mut first = None;
    for (i, f) in files.iter().enumerate() {
        if end_of(f)?.inode == mark.inode {
            first = Some(i);
            break;
        }
    }
    let first = first.with_context(|| {
        format!(
            "the audit log rotated past the marked stretch's start (its file is gone): \
             raise the harness's --audit-log-maxbackup or --audit-log-maxsize ({})",
            live.display()
        )
    })?;
    let mut out = Vec::new();
    for (i, path) in files.iter().enumerate().skip(first) {
        let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
        if i == first {
            f.seek(SeekFrom::Start(mark.offset))?;
        }
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        for (n, line) in text.lines().enumerate() {
            let e: Value = serde_json::from_str(line)
                .with_context(|| format!("an audit event, line {} of {}", n + 1, path.display()))?;
            if keep(&e) {
                out.push(e);
            }
        }
    }
    Ok(out)
}

/// An event's verb, resource (with its subresource: `ptahschemas/status`)
/// and object name.
pub fn verb_and_resource(e: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut resource = s(&e["objectRef"]["resource"]);
    if let Some(sub) = e["objectRef"]["subresource"].as_str() {
        resource = format!("{resource}/{sub}");
    }
    (s(&e["verb"]), resource, s(&e["objectRef"]["name"]))
}

/// Whether a verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

/// The events counted by (verb, resource).
pub fn tally(events: &[Value]) -> BTreeMap<(String, String), usize> {
    let mut seen = BTreeMap::new();
    for e in events {
        let (verb, resource, _) = verb_and_resource(e);
        *seen.entry((verb, resource)).or_default() += 1;
    }
    seen
}

/// When the API server received the event's request.
pub fn received(e: &Value) -> Option<jiff::Timestamp> {
    e["requestReceivedTimestamp"].as_str()?.parse().ok()
}

/// The names of the Jobs the events create, with when each was asked for.
pub fn job_creates(events: &[Value]) -> Vec<(String, Option<jiff::Timestamp>)> {
    events
        .iter()
        .filter_map(|e| {
            let (verb, resource, name) = verb_and_resource(e);
            (verb == "create" && resource == "jobs").then(|| (name, received(e)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str) -> String {
        format!("{{\"objectRef\":{{\"namespace\":\"ns\",\"name\":\"{name}\"}}}}\n")
    }

    fn names(events: &[Value]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e["objectRef"]["name"].as_str().unwrap())
            .collect()
    }

    /// A log in a new directory holding one event, and the mark at its end.
    fn a_log() -> (tempfile::TempDir, PathBuf, Mark) {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.log");
        std::fs::write(&live, event("before")).unwrap();
        let mark = end_of(&live).unwrap();
        (dir, live, mark)
    }

    fn read(live: &Path, mark: Mark) -> anyhow::Result<Vec<Value>> {
        events_from(live, mark, |e| e["objectRef"]["namespace"] == "ns")
    }

    #[test]
    fn a_stretch_is_read_across_rotations_from_its_mark_on() {
        let (dir, live, mark) = a_log();
        std::fs::write(&live, event("before") + &event("a")).unwrap();
        std::fs::rename(&live, dir.path().join("audit-2026-12-06T13-44-00.000.log")).unwrap();
        std::fs::write(&live, event("b")).unwrap();
        std::fs::rename(&live, dir.path().join("audit-2026-12-06T14-10-00.000.log")).unwrap();
        std::fs::write(&live, event("c")).unwrap();
        assert_eq!(names(&read(&live, mark).unwrap()), ["a", "b", "c"]);

        // A mark in a backup reads from that backup on, not the older ones.
        let later = end_of(&dir.path().join("audit-2026-12-06T14-10-00.000.log")).unwrap();
        assert_eq!(names(&read(&live, later).unwrap()), ["c"]);
    }

    #[test]
    fn a_stretch_whose_file_was_removed_is_refused_naming_the_rotation() {
        let (dir, live, mark) = a_log();
        // The new file is made before the old is removed, so it cannot
        // take the old one's inode.
        let next = dir.path().join("next");
        std::fs::write(&next, event("b") + &event("c")).unwrap();
        std::fs::rename(&next, &live).unwrap();
        let err = read(&live, mark).unwrap_err().to_string();
        assert!(err.contains("rotated past"), "{err}");
    }

    #[test]
    fn a_stretch_in_the_live_file_starts_at_its_offset() {
        let (_dir, live, mark) = a_log();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&live)
            .unwrap();
        std::io::Write::write_all(&mut f, event("b").as_bytes()).unwrap();
        assert_eq!(names(&read(&live, mark).unwrap()), ["b"]);
    }
}
