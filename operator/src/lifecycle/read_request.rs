//! `operator.ptah.run/read-requested-at`: a person asks for a read now. The
//! rules, in the seed's words: a value `status.lastReadRequest` does not
//! record as answered is answered once no operation is running; a read under
//! way does not answer it; a read-only operation that failed gives way to it
//! when its retry delay ends; an Apply and the read that proves it do not; a
//! value that is not an RFC 3339 instant is recorded as answered with a
//! `ReadRequestInvalid` Warning; a value longer than 64 bytes is recorded as
//! `sha256:<hex>`.

use k8s_openapi::jiff::Timestamp;

use crate::api::annotations::READ_REQUEST_MAX_BYTES;
use crate::api::condition::{MigrationPhase, Reason, SchemaPhase};

/// A request as the annotation holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// The form `status.lastReadRequest` records: the value as written, or
    /// `sha256:<hex>` of a value longer than 64 bytes.
    pub recorded: String,
    /// The instant, when the value is an RFC 3339 instant.
    pub instant: Option<Timestamp>,
}

/// `sha256:<hex>` of `bytes`.
pub use crate::protocol::receiver::content_sha256 as sha256_hex;

/// What `status.lastReadRequest` records for `value`.
pub fn recorded_form(value: &str) -> String {
    if value.len() > READ_REQUEST_MAX_BYTES {
        sha256_hex(value.as_bytes())
    } else {
        value.to_owned()
    }
}

/// Parses an RFC 3339 instant: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, `T`
/// and `Z` in either case. Anything else (a date alone, a time without
/// seconds or offset, a bracketed zone) is not one.
pub fn parse_rfc3339(value: &str) -> Option<Timestamp> {
    let b = value.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let at = |i: usize, c: u8| b.get(i).is_some_and(|x| x.eq_ignore_ascii_case(&c));
    let shape = (0..4).all(digit)
        && at(4, b'-')
        && digit(5)
        && digit(6)
        && at(7, b'-')
        && digit(8)
        && digit(9)
        && at(10, b'T')
        && digit(11)
        && digit(12)
        && at(13, b':')
        && digit(14)
        && digit(15)
        && at(16, b':')
        && digit(17)
        && digit(18);
    if !shape {
        return None;
    }
    let mut i = 19;
    if at(i, b'.') {
        i += 1;
        let start = i;
        while digit(i) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let rest = &b[i..];
    let offset_ok = rest.eq_ignore_ascii_case(b"z")
        || (rest.len() == 6
            && (rest[0] == b'+' || rest[0] == b'-')
            && rest[1].is_ascii_digit()
            && rest[2].is_ascii_digit()
            && rest[3] == b':'
            && rest[4].is_ascii_digit()
            && rest[5].is_ascii_digit());
    if !offset_ok {
        return None;
    }
    // RFC 3339 allows any number of fraction digits; jiff reads nine.
    let (head, frac_end) = (&value[..19], i);
    let frac = if frac_end > 19 {
        &value[20..frac_end.min(29)]
    } else {
        ""
    };
    let offset = &value[frac_end..];
    let normalized = if frac.is_empty() {
        format!("{head}{offset}")
    } else {
        format!("{head}.{frac}{offset}")
    };
    normalized.parse::<Timestamp>().ok()
}

/// The request the annotation holds that `last` does not record as answered.
pub fn unanswered(annotation: Option<&str>, last: Option<&str>) -> Option<ReadRequest> {
    let value = annotation?;
    let recorded = recorded_form(value);
    if last == Some(recorded.as_str()) {
        return None;
    }
    Some(ReadRequest {
        recorded,
        instant: parse_rfc3339(value),
    })
}

/// What is running when the request is looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Running {
    /// No claim.
    Nothing,
    /// A read-only operation's attempt is under way (a Job under its name, or
    /// one about to be created).
    ReadUnderWay,
    /// A read-only operation failed and waits for its retry; `retry_due` when
    /// the delay has ended.
    ReadBetweenAttempts {
        /// The failure retry delay has ended.
        retry_due: bool,
    },
    /// An Apply, or the read that proves one.
    ApplyOrProof,
}

/// What to do with an unanswered request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Record it, move `nextReconciliationTime` to now, `ReadRequested`: the
    /// next pass starts the read the interval would have.
    Answer,
    /// Record it as answered, `ReadRequestInvalid` Warning; start and end nothing.
    Invalid,
    /// The failed read retires its claim for a new Resolve: record it,
    /// `ReadRestarted`, phase `Pending`.
    GiveWay,
    /// Not now; the request stays unanswered.
    Wait,
}

/// Blocked reasons checked before the request is reached, or whose proof
/// comes first: the request waits.
pub fn blocked_reason_waits(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::UnsupportedEngine
            | Reason::RealmConflict
            | Reason::RealmNotAuthorized
            | Reason::TargetIdentityChanged
    )
}

/// Where the resource is, in its family's phases, as [`decide`] reads it.
pub struct Phases<'a, P> {
    /// `status.phase`.
    pub now: Option<P>,
    /// The family's `Pending`.
    pub pending: P,
    /// The family's `Blocked`.
    pub blocked: P,
    /// The family's `Failed`.
    pub failed: P,
    /// The phases besides none and `Pending` that answer while nothing runs.
    pub answers_in: &'a [P],
}

/// Decides either family's answer. `blocked_reason` is the reason a Blocked
/// resource is blocked for; `retry_due` tells a Failed resource with no claim
/// whether its retry starts now.
pub fn decide<P: Copy + PartialEq>(
    request: &ReadRequest,
    phases: &Phases<'_, P>,
    blocked_reason: Option<Reason>,
    running: Running,
    retry_due: bool,
) -> Answer {
    let phase = phases.now;
    if phase == Some(phases.blocked) && blocked_reason.is_some_and(blocked_reason_waits) {
        return Answer::Wait;
    }
    let invalid = request.instant.is_none();
    match running {
        Running::ApplyOrProof | Running::ReadUnderWay => Answer::Wait,
        Running::ReadBetweenAttempts { .. } if invalid => Answer::Invalid,
        Running::ReadBetweenAttempts { retry_due: true } => Answer::GiveWay,
        Running::ReadBetweenAttempts { retry_due: false } => Answer::Wait,
        Running::Nothing => {
            let answers = match phase {
                None => true,
                Some(p) if p == phases.pending || phases.answers_in.contains(&p) => true,
                Some(p) if p == phases.failed => retry_due,
                Some(_) => false,
            };
            match (answers, invalid) {
                (false, _) => Answer::Wait,
                (true, true) => Answer::Invalid,
                (true, false) => Answer::Answer,
            }
        }
    }
}

/// The phases besides none and `Pending` in which a schema answers.
pub const SCHEMA_ANSWERS_IN: &[SchemaPhase] = &[
    SchemaPhase::InSync,
    SchemaPhase::Blocked,
    SchemaPhase::ReadyToApply,
    SchemaPhase::AwaitingApproval,
];

/// The phases besides none and `Pending` in which a migration answers.
/// `VerifyingHistory` owes the read that proves a run, which `running`
/// reports as [`Running::ApplyOrProof`].
pub const MIGRATION_ANSWERS_IN: &[MigrationPhase] = &[
    MigrationPhase::InSync,
    MigrationPhase::Blocked,
    MigrationPhase::AwaitingApproval,
    MigrationPhase::Planning,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Decides a schema's answer ([`decide`] in the schema's phases).
    fn decide_schema(
        request: &ReadRequest,
        phase: Option<SchemaPhase>,
        blocked_reason: Option<Reason>,
        running: Running,
        retry_due: bool,
    ) -> Answer {
        let phases = Phases {
            now: phase,
            pending: SchemaPhase::Pending,
            blocked: SchemaPhase::Blocked,
            failed: SchemaPhase::Failed,
            answers_in: SCHEMA_ANSWERS_IN,
        };
        decide(request, &phases, blocked_reason, running, retry_due)
    }

    fn req(v: &str) -> ReadRequest {
        match unanswered(Some(v), None) {
            Some(r) => r,
            None => panic!("unanswered"),
        }
    }

    #[test]
    fn rfc3339_instants_parse_and_others_do_not() {
        assert!(parse_rfc3339("2026-01-01T00:00:00Z").is_some());
        assert!(parse_rfc3339("2026-01-01t00:00:00.123z").is_some());
        assert!(parse_rfc3339("2026-01-01T02:00:00+02:00").is_some());
        let long = format!("2026-01-01T00:00:00.{}Z", "1".repeat(60));
        assert_eq!(
            parse_rfc3339(&long),
            parse_rfc3339("2026-01-01T00:00:00.111111111Z")
        );
        for bad in [
            "now",
            "",
            "2026-01-01",
            "2026-01-01T00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00Z[UTC]",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00.Z",
        ] {
            assert!(parse_rfc3339(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn read_request_answered_once_against_last_read_request() {
        let v = "2026-01-01T00:00:00Z";
        assert!(unanswered(Some(v), Some(v)).is_none());
        assert!(unanswered(Some(v), Some("2025-12-31T00:00:00Z")).is_some());
        assert!(unanswered(None, Some(v)).is_none());
    }

    #[test]
    fn read_request_longer_than_64_bytes_recorded_as_sha256() {
        let long = "x".repeat(65);
        let r = req(&long);
        assert_eq!(r.recorded.len(), 71);
        assert!(r.recorded.starts_with("sha256:"));
        assert_eq!(
            sha256_hex(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(
            unanswered(Some(&long), Some(&r.recorded)).is_none(),
            "answered by its digest"
        );
        assert_eq!(req(&"y".repeat(64)).recorded, "y".repeat(64));
    }

    #[test]
    fn read_request_answering_phases_answer() {
        let r = req("2026-01-01T00:00:00Z");
        for phase in [
            SchemaPhase::InSync,
            SchemaPhase::Blocked,
            SchemaPhase::ReadyToApply,
            SchemaPhase::AwaitingApproval,
        ] {
            let reason = (phase == SchemaPhase::Blocked).then_some(Reason::ProtectedTable);
            assert_eq!(
                decide_schema(&r, Some(phase), reason, Running::Nothing, false),
                Answer::Answer,
                "{phase:?}"
            );
        }
    }

    #[test]
    fn read_request_waits_on_engine_realm_and_target_checks() {
        let r = req("2026-01-01T00:00:00Z");
        for reason in [
            Reason::UnsupportedEngine,
            Reason::RealmConflict,
            Reason::RealmNotAuthorized,
            Reason::TargetIdentityChanged,
        ] {
            assert_eq!(
                decide_schema(
                    &r,
                    Some(SchemaPhase::Blocked),
                    Some(reason),
                    Running::Nothing,
                    true
                ),
                Answer::Wait
            );
        }
    }

    #[test]
    fn read_request_does_not_shorten_a_failed_retry_delay() {
        let r = req("2026-01-01T00:00:00Z");
        assert_eq!(
            decide_schema(&r, Some(SchemaPhase::Failed), None, Running::Nothing, false),
            Answer::Wait
        );
        assert_eq!(
            decide_schema(&r, Some(SchemaPhase::Failed), None, Running::Nothing, true),
            Answer::Answer
        );
    }

    #[test]
    fn read_request_read_under_way_does_not_answer() {
        let r = req("2026-01-01T00:00:00Z");
        assert_eq!(
            decide_schema(
                &r,
                Some(SchemaPhase::Observing),
                None,
                Running::ReadUnderWay,
                true
            ),
            Answer::Wait
        );
    }

    #[test]
    fn read_request_apply_and_proof_do_not_give_way() {
        let r = req("2026-01-01T00:00:00Z");
        assert_eq!(
            decide_schema(
                &r,
                Some(SchemaPhase::Applying),
                None,
                Running::ApplyOrProof,
                true
            ),
            Answer::Wait
        );
        let bad = req("soon");
        assert_eq!(
            decide_schema(
                &bad,
                Some(SchemaPhase::VerifyingConvergence),
                None,
                Running::ApplyOrProof,
                true
            ),
            Answer::Wait
        );
    }

    #[test]
    fn read_request_failed_read_gives_way_when_retry_delay_ends() {
        let r = req("2026-01-01T00:00:00Z");
        let between = |retry_due| Running::ReadBetweenAttempts { retry_due };
        assert_eq!(
            decide_schema(&r, Some(SchemaPhase::Failed), None, between(false), false),
            Answer::Wait
        );
        assert_eq!(
            decide_schema(&r, Some(SchemaPhase::Failed), None, between(true), true),
            Answer::GiveWay
        );
    }

    #[test]
    fn read_request_invalid_value_answered_at_once_even_inside_retry_delay() {
        let bad = req("yesterday");
        assert_eq!(bad.instant, None);
        assert_eq!(
            decide_schema(
                &bad,
                Some(SchemaPhase::InSync),
                None,
                Running::Nothing,
                false
            ),
            Answer::Invalid
        );
        assert_eq!(
            decide_schema(
                &bad,
                Some(SchemaPhase::Failed),
                None,
                Running::ReadBetweenAttempts { retry_due: false },
                false
            ),
            Answer::Invalid
        );
    }
}
