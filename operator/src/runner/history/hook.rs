//! `ptah-runner check-sequence`: Ptah's pre-up hook, under the migration lock.

use super::*;

/// What Ptah runs for (current, target] of `dir` on a database whose newest
/// applied version is `current`: with no version applied, the newest
/// checkpoint at or below `target` and the ordinary migrations after it;
/// otherwise the ordinary migrations in the range (a checkpoint never runs
/// on a migrated database). Linear order, which `up` is given, refused any
/// pending version below `current` already.
pub fn hook_selection(dir: &Directory, current: i64, target: i64) -> Vec<&DirectoryMigration> {
    let in_range = |m: &&DirectoryMigration| m.version > current && m.version <= target;
    if current == 0
        && let Some(checkpoint) = dir
            .migrations
            .values()
            .rfind(|m| m.checkpoint && m.version <= target)
    {
        return std::iter::once(checkpoint)
            .chain(
                dir.migrations.values().filter(|m| {
                    !m.checkpoint && m.version > checkpoint.version && m.version <= target
                }),
            )
            .collect();
    }
    dir.migrations
        .values()
        .filter(in_range)
        .filter(|m| !m.checkpoint)
        .collect()
}

/// The pre-up hook's check, pure over the directory: the migrations Ptah
/// selected, (current, target], with the checksums History reports, must
/// hash ([`sequence_digest`]) to the approved digest.
pub fn check_sequence(
    source: &Path,
    sequence_digest_approved: &str,
    current: i64,
    target: i64,
) -> Result<(), String> {
    if current < 0 || target <= current {
        return Err(format!(
            "Ptah selected no migration (current version {current}, target {target}); the approved sequence is not empty"
        ));
    }
    let dir = read_directory(source).map_err(|e| e.to_string())?;
    let selection: Vec<PlannedMigration> = hook_selection(&dir, current, target)
        .into_iter()
        .map(DirectoryMigration::planned)
        .collect();
    let found = sequence_digest(&selection)
        .map_err(|e| format!("the selection ({current}, {target}]: {e}"))?;
    if found != sequence_digest_approved {
        return Err(format!(
            "the {} migration(s) Ptah selected under its lock, ({current}, {target}], hash to {found}, not the approved {sequence_digest_approved}",
            selection.len()
        ));
    }
    Ok(())
}

/// `ptah-runner check-sequence`: reads `PTAH_CURRENT_VERSION` and
/// `PTAH_TARGET_VERSION` (Ptah's hook environment) and answers the exit
/// code: 0 the same sequence, [`crate::runner::EXIT_REFUSED`] another, and
/// [`crate::runner::EXIT_USAGE`] when the variables are missing or not versions.
/// The reason goes to stderr, which Ptah appends to its error.
pub fn check_sequence_from_env(source: &Path, sequence_digest_approved: &str) -> i32 {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .ok_or_else(|| {
                format!("{name} is not set to a version: run me only as Ptah's pre-up hook")
            })
    };
    let versions =
        var("PTAH_CURRENT_VERSION").and_then(|c| var("PTAH_TARGET_VERSION").map(|t| (c, t)));
    match versions {
        Err(e) => {
            eprintln!("ptah-runner check-sequence: {e}");
            crate::runner::EXIT_USAGE
        }
        Ok((current, target)) => {
            match check_sequence(source, sequence_digest_approved, current, target) {
                Ok(()) => crate::runner::EXIT_OK,
                Err(e) => {
                    eprintln!("ptah-runner check-sequence: refused: {e}");
                    crate::runner::EXIT_REFUSED
                }
            }
        }
    }
}

/// A single-quoted word for `/bin/sh -c`.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The hook command Ptah runs: the runner's `check-sequence`.
pub fn hook_command(runner: &Path, sequence_digest_approved: &str, source: &Path) -> String {
    format!(
        "{} check-sequence {} {}",
        shell_quote(&runner.display().to_string()),
        shell_quote(&format!("--sequence-digest={sequence_digest_approved}")),
        shell_quote(&format!("--source={}", source.display())),
    )
}
