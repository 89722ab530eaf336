//! Stage 6, the journal's bounds, shared by both lifecycles: at most
//! [`JOURNAL_MAX_ENTRIES`] entries, none more than [`JOURNAL_MAX_AGE_DAYS`]
//! days older than the newest, the oldest dropped first. The entry that
//! published the plan nothing has carried out yet, and the newest approval of
//! it, stay past both bounds. `coveredSince` moves forward past the newest
//! entry a bound dropped. Repeated `OperationFailed` entries of the same
//! operation and reason fold into one with a count and the time of the last.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::journal::{
    JOURNAL_MAX_AGE_DAYS, JOURNAL_MAX_ENTRIES, JournalEntry, JournalEntryType,
};

/// The plan the journal keeps past its bounds: the one nothing has carried
/// out yet, by UID.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kept<'a> {
    /// UID of the plan nothing has carried out yet, if any.
    pub pending_plan_uid: Option<&'a str>,
}

/// The last instant an entry speaks for: a folded failure's last attempt.
fn latest(entry: &JournalEntry) -> Timestamp {
    entry.last_time.as_ref().unwrap_or(&entry.time).0
}

/// Appends `entry`, folding a repeated failure, then applies the bounds.
pub fn append(
    journal: &mut Vec<JournalEntry>,
    covered_since: &mut Option<Time>,
    entry: JournalEntry,
    kept: Kept<'_>,
) {
    if covered_since.is_none() {
        *covered_since = Some(entry.time.clone());
    }
    let folded = entry.type_ == JournalEntryType::OperationFailed
        && journal.last().is_some_and(|last| {
            last.type_ == JournalEntryType::OperationFailed
                && last.operation == entry.operation
                && last.reason == entry.reason
        });
    match journal.last_mut() {
        Some(last) if folded => {
            last.count = Some(last.count.unwrap_or(1).saturating_add(1));
            last.last_time = Some(entry.time);
        }
        _ => {
            let mut entry = entry;
            if entry.type_ == JournalEntryType::OperationFailed && entry.count.is_none() {
                entry.count = Some(1);
            }
            journal.push(entry);
        }
    }
    bound(journal, covered_since, kept);
}

/// Whether `journal[i]` stays past the bounds.
fn protected(journal: &[JournalEntry], i: usize, kept: Kept<'_>) -> bool {
    let Some(uid) = kept.pending_plan_uid else {
        return false;
    };
    let entry = &journal[i];
    if entry.plan_uid.as_deref() != Some(uid) {
        return false;
    }
    match entry.type_ {
        JournalEntryType::PlanPublished => true,
        JournalEntryType::ApprovalAccepted => !journal[i + 1..].iter().any(|later| {
            later.type_ == JournalEntryType::ApprovalAccepted
                && later.plan_uid.as_deref() == Some(uid)
        }),
        _ => false,
    }
}

/// Drops what the age and count bounds exclude, oldest first, and moves
/// `coveredSince` past the newest entry dropped.
pub fn bound(journal: &mut Vec<JournalEntry>, covered_since: &mut Option<Time>, kept: Kept<'_>) {
    let Some(newest) = journal.iter().map(latest).max() else {
        return;
    };
    let max_age = SignedDuration::from_hours(24 * i64::from(JOURNAL_MAX_AGE_DAYS));
    let oldest_allowed = newest.checked_sub(max_age).unwrap_or(Timestamp::MIN);
    let keep: Vec<bool> = (0..journal.len())
        .map(|i| protected(journal, i, kept))
        .collect();
    let unprotected = keep.iter().filter(|k| !**k).count();
    let mut excess = unprotected.saturating_sub(JOURNAL_MAX_ENTRIES);
    let mut newest_dropped: Option<Timestamp> = None;
    let mut out = Vec::with_capacity(journal.len());
    for (entry, kept) in journal.drain(..).zip(keep) {
        let drop = !kept && (latest(&entry) < oldest_allowed || excess > 0);
        if drop {
            excess = excess.saturating_sub(1);
            let t = latest(&entry);
            newest_dropped = Some(newest_dropped.map_or(t, |n| n.max(t)));
        } else {
            out.push(entry);
        }
    }
    *journal = out;
    if let Some(dropped) = newest_dropped {
        // Status times are whole seconds: one second past the dropped entry.
        let past = dropped
            .checked_add(SignedDuration::from_secs(1))
            .unwrap_or(dropped);
        let moved = covered_since.as_ref().is_none_or(|c| c.0 < past);
        if moved {
            *covered_since = Some(Time(past));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::condition::Reason;
    use crate::api::status::OperationType;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(1_767_225_600 + s).expect("time"))
    }

    const DAY: i64 = 86_400;

    fn failed(op: OperationType, reason: Reason, t: i64) -> JournalEntry {
        let mut e = JournalEntry::new(JournalEntryType::OperationFailed, at(t));
        e.operation = Some(op);
        e.reason = Some(reason);
        e
    }

    fn published(uid: &str, t: i64) -> JournalEntry {
        let mut e = JournalEntry::new(JournalEntryType::PlanPublished, at(t));
        e.plan_uid = Some(uid.into());
        e
    }

    fn approval(uid: &str, approval: &str, t: i64) -> JournalEntry {
        let mut e = JournalEntry::new(JournalEntryType::ApprovalAccepted, at(t));
        e.plan_uid = Some(uid.into());
        e.approval_uid = Some(approval.into());
        e
    }

    fn verified(t: i64) -> JournalEntry {
        JournalEntry::new(JournalEntryType::Verified, at(t))
    }

    #[test]
    fn journal_holds_at_most_64_dropping_oldest_first() {
        let (mut j, mut c) = (Vec::new(), None);
        for i in 0..70 {
            append(&mut j, &mut c, verified(i), Kept::default());
        }
        assert_eq!(j.len(), JOURNAL_MAX_ENTRIES);
        assert_eq!(j[0].time, at(6), "oldest first, the six oldest dropped");
        assert_eq!(j[63].time, at(69));
        assert_eq!(
            c,
            Some(at(6)),
            "coveredSince moved past the newest dropped entry"
        );
    }

    #[test]
    fn journal_drops_entries_30_days_older_than_the_newest() {
        let (mut j, mut c) = (Vec::new(), Some(at(-5)));
        append(&mut j, &mut c, verified(0), Kept::default());
        append(&mut j, &mut c, verified(DAY), Kept::default());
        append(&mut j, &mut c, verified(31 * DAY), Kept::default());
        assert_eq!(j.len(), 2);
        assert_eq!(j[0].time, at(DAY), "exactly 30 days older stays");
        assert_eq!(c, Some(at(1)));
        append(&mut j, &mut c, verified(31 * DAY + 1), Kept::default());
        assert_eq!(j[0].time, at(31 * DAY));
        assert_eq!(c, Some(at(DAY + 1)));
    }

    #[test]
    fn journal_covered_since_starts_at_first_write() {
        let (mut j, mut c) = (Vec::new(), None);
        append(&mut j, &mut c, verified(7), Kept::default());
        assert_eq!(c, Some(at(7)));
    }

    #[test]
    fn journal_keeps_pending_plan_and_its_newest_approval_past_bounds() {
        let (mut j, mut c) = (Vec::new(), None);
        append(&mut j, &mut c, published("p1", 0), Kept::default());
        append(&mut j, &mut c, approval("p1", "a-old", 1), Kept::default());
        append(&mut j, &mut c, approval("p1", "a-new", 2), Kept::default());
        let kept = Kept {
            pending_plan_uid: Some("p1"),
        };
        for i in 0..64 {
            append(&mut j, &mut c, verified(40 * DAY + i), kept);
        }
        assert_eq!(j.len(), 66, "64 plus the two kept entries");
        assert_eq!(j[0].type_, JournalEntryType::PlanPublished);
        assert_eq!(j[1].approval_uid.as_deref(), Some("a-new"));
        assert!(
            c.as_ref().is_some_and(|c| c.0 > j[0].time.0),
            "kept entries may be older than coveredSince"
        );
        // Another plan published: the old ones lose their protection.
        append(
            &mut j,
            &mut c,
            published("p2", 41 * DAY),
            Kept {
                pending_plan_uid: Some("p2"),
            },
        );
        assert!(j.iter().all(|e| e.plan_uid.as_deref() != Some("p1")));
        assert_eq!(j.len(), 64 + 1, "p2's entry is kept past the count");
    }

    #[test]
    fn journal_folds_operation_failed_repeats_with_count() {
        let (mut j, mut c) = (Vec::new(), None);
        append(
            &mut j,
            &mut c,
            failed(OperationType::Observe, Reason::OperationFailed, 0),
            Kept::default(),
        );
        append(
            &mut j,
            &mut c,
            failed(OperationType::Observe, Reason::OperationFailed, 10),
            Kept::default(),
        );
        append(
            &mut j,
            &mut c,
            failed(OperationType::Observe, Reason::OperationFailed, 20),
            Kept::default(),
        );
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].count, Some(3));
        assert_eq!(j[0].time, at(0));
        assert_eq!(j[0].last_time, Some(at(20)));
        append(
            &mut j,
            &mut c,
            failed(OperationType::Plan, Reason::OperationFailed, 30),
            Kept::default(),
        );
        append(
            &mut j,
            &mut c,
            failed(OperationType::Plan, Reason::LeaseContinuityLost, 40),
            Kept::default(),
        );
        assert_eq!(j.len(), 3, "another operation or reason is a new entry");
        assert_eq!(j[2].count, Some(1));
    }
}
