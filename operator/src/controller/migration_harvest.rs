//! What a migration's History and Apply results give the lifecycle: the
//! manager's reading of the protocol's documents
//! ([`crate::protocol::migrations`]) as the pure machine's observations
//! ([`HistoryReading`], [`RunReport`]). The controller calls these only on a
//! document the protocol's checks took; one that breaks them gives no
//! verdict (a read runs again, a run is unknown).

use crate::api::migration::MigrationHistory;
use crate::lifecycle::migration::{
    HistoryReading, RunEnd, RunReport, VERSION_LIST_MAX, newest_revisions,
};
use crate::protocol::migrations::{HistoryReport, RunOutcome, RunResult};

/// The reading as the lifecycle takes it: the verdict ([`HistoryReport::verdict`],
/// the one the runner reads too) and the reading as `status.history` keeps
/// it, its lists bounded. Call it on a report [`check_history`] took.
///
/// [`check_history`]: crate::protocol::migrations::check_history
pub fn verdict(report: &HistoryReport) -> HistoryReading {
    let dirty = report.dirty();
    let out_of_order = report.out_of_order();
    let verdict = report.verdict();
    let bounded = |v: &[i64]| v.iter().copied().take(VERSION_LIST_MAX).collect::<Vec<_>>();
    let history = MigrationHistory {
        observed_at: None,
        contract_version: Some(report.contract_version),
        current_version: Some(report.current_version),
        checkpoint_version: report.checkpoint_version,
        applied_count: Some(report.applied_count),
        pending_count: Some(report.pending.len() as i64),
        fingerprint: Some(report.history_fingerprint.clone()),
        target_identity_digest: Some(report.target_identity_digest.clone()),
        dirty,
        modified_versions: bounded(&report.modified_versions),
        out_of_order_versions: bounded(&out_of_order),
        ahead_versions: bounded(&report.ahead_versions),
        revisions: newest_revisions(report.revisions.clone()),
    };
    HistoryReading { verdict, history }
}

/// The harvested run as the lifecycle reads it (of an outcome
/// [`check_run`] took). A result that contradicts
/// itself is not believed in the direction that would allow another Apply:
/// applied with nothing named, or nothing to do with versions named, is
/// `Unknown`; a failure at a statement, or versions applied, means the run
/// had selected a migration.
///
/// [`check_run`]: crate::protocol::migrations::check_run
pub fn run_report(outcome: &RunOutcome, job_uid: Option<String>) -> RunReport {
    let applied = !outcome.applied_versions.is_empty();
    let contradiction = |what: &str| (RunEnd::Unknown { failure: None }, Some(what.to_string()));
    let (end, note) = match &outcome.result {
        RunResult::Applied if !applied => {
            contradiction("the run reported applied but named no version")
        }
        RunResult::NothingToDo if applied => {
            contradiction("the run reported nothing to do but named applied versions")
        }
        RunResult::Applied => (RunEnd::Applied, None),
        RunResult::NothingToDo => (RunEnd::NothingToDo, None),
        RunResult::Failed { selected, failure } => (
            RunEnd::Failed {
                selected: *selected || failure.is_some() || applied,
                failure: failure.clone(),
            },
            None,
        ),
        RunResult::Partial { failure } => (
            RunEnd::Partial {
                failure: failure.clone(),
            },
            None,
        ),
        RunResult::Unknown { failure } => (
            RunEnd::Unknown {
                failure: failure.clone(),
            },
            None,
        ),
    };
    RunReport {
        outcome: end,
        applied_versions: outcome.applied_versions.clone(),
        job_uid,
        target_identity_digest: outcome.target_identity_digest.clone(),
        message: note.or_else(|| outcome.message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::journal::RunFailure;
    use crate::lifecycle::migration::{HistoryVerdict, REVISIONS_MAX};
    use crate::protocol::migrations::HISTORY_CONTRACT_VERSION;
    use crate::protocol::migrations::fixtures::*;

    #[test]
    fn verdicts_follow_the_seed_order_dirty_modified_out_of_order_ahead_nothing_ready() {
        let mut r = everything();
        assert_eq!(verdict(&r).verdict, HistoryVerdict::Dirty);
        r.dirty_revision = None;
        assert_eq!(verdict(&r).verdict, HistoryVerdict::Modified);
        r.modified_versions.clear();
        assert_eq!(verdict(&r).verdict, HistoryVerdict::OutOfOrder);
        r.out_of_order_versions.clear();
        r.pending = vec![planned(6)];
        assert_eq!(verdict(&r).verdict, HistoryVerdict::Ahead);
        r.ahead_versions.clear();
        assert_eq!(
            verdict(&r).verdict,
            HistoryVerdict::Pending(vec![planned(6)])
        );
        r.pending.clear();
        assert_eq!(verdict(&r).verdict, HistoryVerdict::NothingPending);
    }

    #[test]
    fn a_dirty_row_alone_is_dirty() {
        let mut r = clean();
        r.revisions[4].dirty = true;
        let reading = verdict(&r);
        assert_eq!(reading.verdict, HistoryVerdict::Dirty);
        assert!(reading.history.dirty);
    }

    #[test]
    fn a_pending_version_below_the_current_is_out_of_order_even_unlisted() {
        let mut r = clean();
        r.pending = vec![planned(4), planned(6)];
        let reading = verdict(&r);
        assert_eq!(reading.verdict, HistoryVerdict::OutOfOrder);
        assert_eq!(reading.history.out_of_order_versions, vec![4]);
    }

    #[test]
    fn checkpoint_bootstrap_pending_is_ptahs_list_not_a_subtraction() {
        // A fresh database; the directory holds 1..=10 and a checkpoint at 8.
        // Ptah selects the checkpoint and what follows it: three, not ten.
        let mut checkpoint = planned(8);
        checkpoint.checkpoint = true;
        let selection = vec![checkpoint, planned(9), planned(10)];
        let r = HistoryReport {
            current_version: 0,
            applied_count: 0,
            revisions: vec![],
            pending: selection.clone(),
            checkpoint_version: None,
            ..clean()
        };
        let reading = verdict(&r);
        assert_eq!(reading.verdict, HistoryVerdict::Pending(selection));
        assert_eq!(reading.history.pending_count, Some(3));
        assert_eq!(reading.history.applied_count, Some(0));
        assert_eq!(reading.history.current_version, Some(0));
    }

    #[test]
    fn the_reading_carries_fingerprint_identity_and_bounded_lists() {
        let mut r = clean();
        r.ahead_versions = (100..300).collect();
        r.revisions = (1..=50).map(|v| row(v, false)).collect();
        r.checkpoint_version = Some(1);
        let h = verdict(&r).history;
        assert_eq!(h.fingerprint, Some(digest(1)));
        assert_eq!(h.target_identity_digest, Some(digest(2)));
        assert_eq!(h.contract_version, Some(HISTORY_CONTRACT_VERSION));
        assert_eq!(h.checkpoint_version, Some(1));
        assert_eq!(h.ahead_versions.len(), VERSION_LIST_MAX);
        assert_eq!(h.revisions.len(), REVISIONS_MAX);
        assert_eq!(h.revisions[0].version, 50, "newest first");
        assert_eq!(h.observed_at, None, "the manager's clock sets it");
    }

    #[test]
    fn run_reports_carry_the_end_versions_identity_and_job() {
        let r = run_report(&run(RunResult::Applied, vec![6, 7]), Some("job-uid".into()));
        assert_eq!(r.outcome, RunEnd::Applied);
        assert_eq!(r.applied_versions, vec![6, 7]);
        assert_eq!(r.job_uid.as_deref(), Some("job-uid"));
        assert_eq!(r.target_identity_digest, Some(digest(2)));
        assert_eq!(r.message.as_deref(), Some("done"));

        let r = run_report(&run(RunResult::NothingToDo, vec![]), None);
        assert_eq!(r.outcome, RunEnd::NothingToDo);

        let partial = RunResult::Partial {
            failure: Some(failure()),
        };
        let r = run_report(&run(partial, vec![6]), None);
        assert_eq!(
            r.outcome,
            RunEnd::Partial {
                failure: Some(failure())
            }
        );
        let mysql = RunFailure {
            sqlstate: Some("23000".into()),
            mysql_errno: Some(1062),
            ..failure()
        };
        let unknown = RunResult::Unknown {
            failure: Some(mysql.clone()),
        };
        let r = run_report(&run(unknown, vec![]), None);
        assert_eq!(
            r.outcome,
            RunEnd::Unknown {
                failure: Some(mysql)
            }
        );
    }

    #[test]
    fn a_failed_run_selected_only_when_it_ran_something() {
        let before = RunResult::Failed {
            selected: false,
            failure: None,
        };
        let r = run_report(&run(before, vec![]), None);
        assert_eq!(
            r.outcome,
            RunEnd::Failed {
                selected: false,
                failure: None
            }
        );
        // A statement failed at the database: it had selected one.
        let at_statement = RunResult::Failed {
            selected: false,
            failure: Some(failure()),
        };
        let r = run_report(&run(at_statement, vec![]), None);
        assert_eq!(
            r.outcome,
            RunEnd::Failed {
                selected: true,
                failure: Some(failure())
            }
        );
        // Versions applied: it had selected.
        let ran = RunResult::Failed {
            selected: false,
            failure: None,
        };
        let r = run_report(&run(ran, vec![6]), None);
        assert!(matches!(r.outcome, RunEnd::Failed { selected: true, .. }));
    }

    #[test]
    fn a_self_contradicting_run_is_unknown() {
        let r = run_report(&run(RunResult::Applied, vec![]), None);
        assert_eq!(r.outcome, RunEnd::Unknown { failure: None });
        assert!(r.message.is_some_and(|m| m.contains("named no version")));
        let r = run_report(&run(RunResult::NothingToDo, vec![6]), None);
        assert_eq!(r.outcome, RunEnd::Unknown { failure: None });
    }
}
