//! Conditions as both lifecycles set them: one per type, each stamped with
//! the generation it was set for, its transition time kept while its status
//! holds, and the kstatus trio (`Ready`, `Reconciling`, `Stalled`) derived
//! from where the resource is, so Argo CD and Flux read it without custom
//! health rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::condition::{Condition, ConditionStatus, Reason};

/// Sets the condition of `type_`, replacing any other of the same type. The
/// transition time moves only when the status changes: a new reason or
/// message on the same status is not a transition.
pub fn set<T: PartialEq + Copy>(
    conditions: &mut Vec<Condition<T>>,
    type_: T,
    status: ConditionStatus,
    reason: Reason,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let message = message.into();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = now.clone();
        }
        existing.status = status;
        existing.reason = reason;
        existing.message = message;
        existing.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_,
        status,
        observed_generation: generation,
        last_transition_time: now.clone(),
        reason,
        message,
    });
}

/// The condition of `type_`, if set.
pub fn get<T: PartialEq + Copy>(conditions: &[Condition<T>], type_: T) -> Option<&Condition<T>> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is `True`.
pub fn is_true<T: PartialEq + Copy>(conditions: &[Condition<T>], type_: T) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// Where the resource is, as kstatus sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Done for this generation: `Ready=True`.
    Ready,
    /// Work is under way, a retry is due or a plan waits for its approval:
    /// `Reconciling=True`.
    Progressing,
    /// At rest by a person's choice (`spec.suspend`, a migration under
    /// `Never`): neither reconciling nor stalled, and not ready.
    Waiting,
    /// No progress until an input changes: `Stalled=True`.
    Stalled,
}

/// The three kstatus conditions for `health`, as `(Ready, Reconciling,
/// Stalled)` statuses. `Ready` carries the reason of the verdict.
pub fn kstatus(health: Health) -> (ConditionStatus, ConditionStatus, ConditionStatus) {
    use ConditionStatus::{False, True};
    match health {
        Health::Ready => (True, False, False),
        Health::Progressing => (False, True, False),
        Health::Waiting => (False, False, False),
        Health::Stalled => (False, False, True),
    }
}

/// Writes `Ready`, `Reconciling` and `Stalled` for `health`, all with
/// `reason` and `message` (the trio always agrees), via `ready`,
/// `reconciling` and `stalled`, the family's condition types.
#[allow(clippy::too_many_arguments)]
pub fn set_kstatus<T: PartialEq + Copy>(
    conditions: &mut Vec<Condition<T>>,
    types: (T, T, T),
    health: Health,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let (ready, reconciling, stalled) = kstatus(health);
    set(conditions, types.0, ready, reason, message, generation, now);
    set(
        conditions,
        types.1,
        reconciling,
        reason,
        message,
        generation,
        now,
    );
    set(
        conditions, types.2, stalled, reason, message, generation, now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::condition::SchemaConditionType as T;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(1_767_225_600 + s).expect("time"))
    }

    #[test]
    fn set_stamps_generation_and_keeps_transition_time_on_same_status() {
        let mut c = Vec::new();
        set(
            &mut c,
            T::InSync,
            ConditionStatus::True,
            Reason::ScopedConverged,
            "",
            Some(2),
            &at(0),
        );
        set(
            &mut c,
            T::InSync,
            ConditionStatus::True,
            Reason::ConvergedAfterUnknownOutcome,
            "",
            Some(3),
            &at(5),
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].observed_generation, Some(3));
        assert_eq!(c[0].last_transition_time, at(0));
        assert_eq!(c[0].reason, Reason::ConvergedAfterUnknownOutcome);
        set(
            &mut c,
            T::InSync,
            ConditionStatus::False,
            Reason::ScopedChanges,
            "",
            Some(3),
            &at(9),
        );
        assert_eq!(c[0].last_transition_time, at(9));
    }

    #[test]
    fn kstatus_trio_per_health() {
        use ConditionStatus::{False, True};
        assert_eq!(kstatus(Health::Ready), (True, False, False));
        assert_eq!(kstatus(Health::Progressing), (False, True, False));
        assert_eq!(kstatus(Health::Waiting), (False, False, False));
        assert_eq!(kstatus(Health::Stalled), (False, False, True));
        let mut c = Vec::new();
        set_kstatus(
            &mut c,
            (T::Ready, T::Reconciling, T::Stalled),
            Health::Stalled,
            Reason::ProtectedTable,
            "m",
            Some(1),
            &at(0),
        );
        assert!(is_true(&c, T::Stalled));
        assert!(!is_true(&c, T::Ready));
        assert!(
            c.iter()
                .all(|x| x.reason == Reason::ProtectedTable && x.observed_generation == Some(1))
        );
    }
}
