//! Following a resource until a verb's condition holds: `wait`, and the
//! `--wait` of `approve` and `refresh`. One watch on the object; every change
//! of phase or reason is a progress line on stderr; the step functions that
//! decide are pure.

use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};
use operator::api::readiness::{self, Readiness, Wanted};
use operator::api::{PtahMigration, PtahSchema};

use crate::resource::{Kind, Resource, Target, missing};
use crate::{Failure, exit};

/// What a step function says about the resource as it is now.
#[derive(Debug)]
pub enum Step {
    /// Not yet.
    Continue,
    /// The condition holds.
    Done,
    /// It will not hold: stop with this failure.
    Stop(Failure),
}

/// The failure of a resource that ended `Blocked` or `Failed`, naming its
/// reason and message.
pub fn ended(r: &Resource) -> Failure {
    let (reason, message) = r.verdict();
    let phase = r.phase().unwrap_or_default();
    let mut line = format!("{} is {phase} ({reason})", r.cli_name());
    if !message.is_empty() {
        line.push_str(&format!(": {message}"));
    }
    Failure::new(exit::BLOCKED_OR_FAILED, line)
}

/// `wait`: `phase` reached for the current generation; `Blocked` or `Failed`
/// (when not the phase asked for) end it.
pub fn wait_step(r: &Resource, phase: &str) -> Step {
    if !r.observed_current() {
        return Step::Continue;
    }
    match r.phase().as_deref() {
        Some(p) if p == phase => Step::Done,
        Some("Blocked" | "Failed") => Step::Stop(ended(r)),
        _ => Step::Continue,
    }
}

/// What `wait --for` asks: a phase, or what an application waits for
/// (`version=N`, `digest=sha256:…`), decided as `ptah-runner await` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum For {
    Phase(String),
    Ready(Wanted),
}

impl std::str::FromStr for For {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("version=") || s.starts_with("digest=") {
            return s.parse().map(For::Ready);
        }
        if s.is_empty() || s.contains('=') {
            return Err(format!(
                "{s:?} is not a phase (such as InSync), version=N or digest=sha256:…"
            ));
        }
        Ok(For::Phase(s.to_string()))
    }
}

impl std::fmt::Display for For {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            For::Phase(p) => f.write_str(p),
            For::Ready(w) => w.fmt(f),
        }
    }
}

/// Why `for_` cannot be asked of `kind`, as a bad command line.
pub fn refused(for_: &For, kind: Kind) -> Option<Failure> {
    let For::Ready(w) = for_ else { return None };
    readiness::refusal(w, kind == Kind::Schema).map(Failure::usage)
}

/// What `r` says about `wanted`; `None` where `wanted` is not for its kind.
pub fn readiness_of(r: &Resource, wanted: &Wanted) -> Option<Readiness> {
    match r {
        Resource::Schema(s) => readiness::of_schema(s, wanted),
        Resource::Migration(m) => readiness::of_migration(m, wanted),
    }
}

/// `wait --for=version=N|digest=…`: done when it holds; `Blocked` or
/// `Failed` short of it end the wait, naming what it waited on.
pub fn ready_step(r: &Resource, wanted: &Wanted) -> Step {
    match readiness_of(r, wanted) {
        Some(Readiness::Ready(_)) => Step::Done,
        Some(Readiness::Waiting(_)) => Step::Continue,
        Some(Readiness::Ended(s)) => Step::Stop(Failure::new(exit::BLOCKED_OR_FAILED, s)),
        None => Step::Stop(
            refused(&For::Ready(wanted.clone()), r.kind()).unwrap_or_else(|| {
                Failure::usage(format!(
                    "--for={wanted} cannot be asked of {}",
                    r.cli_name()
                ))
            }),
        ),
    }
}

/// One progress line per change of phase or reason.
fn progress(last: &mut Option<(Option<String>, String)>, r: &Resource) {
    let (reason, message) = r.verdict();
    let now = (r.phase(), reason.clone());
    if last.as_ref() == Some(&now) {
        return;
    }
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%H:%M:%S");
    let mut line = format!(
        "[{stamp}] {}: {}",
        r.target(),
        now.0.as_deref().unwrap_or("(no phase yet)")
    );
    if !reason.is_empty() {
        line.push_str(&format!(" ({reason})"));
    }
    if !message.is_empty() {
        line.push_str(&format!(": {message}"));
    }
    eprintln!("{line}");
    *last = Some(now);
}

/// Watches `target` until `step` says done or stop, or `timeout` passes.
/// Returns the resource as it was when done.
pub async fn follow(
    client: &Client,
    namespace: &str,
    target: &Target,
    timeout: Duration,
    what: &str,
    mut step: impl FnMut(&Resource) -> Step,
) -> Result<Resource, Failure> {
    let mut stream = match target.kind {
        Kind::Schema => watch_object(
            Api::<PtahSchema>::namespaced(client.clone(), namespace),
            &target.name,
        )
        .map(|e| e.map(|o| o.map(|s| Resource::Schema(Box::new(s)))))
        .boxed(),
        Kind::Migration => watch_object(
            Api::<PtahMigration>::namespaced(client.clone(), namespace),
            &target.name,
        )
        .map(|e| e.map(|o| o.map(|m| Resource::Migration(Box::new(m)))))
        .boxed(),
    };
    let mut last = None;
    let mut seen: Option<Resource> = None;
    let run = async {
        let mut errors = 0;
        while let Some(event) = stream.next().await {
            // A watch that drops (an API server restart, a timeout) is
            // started again; only errors in a row end the wait.
            let found = match event {
                Ok(found) => {
                    errors = 0;
                    found
                }
                Err(e) if errors < 10 => {
                    errors += 1;
                    pause_after(errors, &e).await;
                    continue;
                }
                Err(e) => {
                    return Err(Failure::error(format!(
                        "watching {target} in {namespace}: {e}"
                    )));
                }
            };
            let Some(r) = found else {
                return Err(missing(client, namespace, target).await);
            };
            progress(&mut last, &r);
            match step(&r) {
                Step::Continue => seen = Some(r),
                Step::Done => return Ok(r),
                Step::Stop(f) => return Err(f),
            }
        }
        Err(Failure::error(format!("the watch of {target} ended")))
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(done) => done,
        Err(_) => {
            let now = match &seen {
                Some(r) => {
                    let (reason, message) = r.verdict();
                    let mut s = format!(
                        "; it is {}",
                        r.phase().unwrap_or_else(|| "(no phase yet)".into())
                    );
                    if !reason.is_empty() {
                        s.push_str(&format!(" ({reason})"));
                    }
                    if !message.is_empty() {
                        s.push_str(&format!(": {message}"));
                    }
                    s
                }
                None => String::new(),
            };
            Err(Failure::new(
                exit::TIMEOUT,
                format!(
                    "timed out after {}s waiting for {target} -n {namespace} {what}{now}",
                    timeout.as_secs()
                ),
            ))
        }
    }
}

/// Waits a little longer after each failed watch, saying why after a few.
async fn pause_after(errors: u32, e: &kube::runtime::watcher::Error) {
    if errors > 2 {
        eprintln!("watch failed ({e}); trying again");
    }
    tokio::time::sleep(Duration::from_millis(250 * u64::from(errors))).await;
}

/// A `--timeout` value: `90s`, `5m`, `1h`, or plain seconds.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 90s, 5m or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?} is not a duration such as 90s, 5m or 1h")),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(generation: i64, observed: i64, phase: &str, reason: &str) -> Resource {
        let status = serde_json::json!({
            "observedGeneration": observed,
            "phase": phase,
            "conditions": [{
                "type": "Ready", "status": "False", "reason": reason,
                "message": "plan p drops table t", "lastTransitionTime": "2026-12-01T00:00:00Z",
            }],
        });
        crate::fixtures::resource(Kind::Schema, generation, status)
    }

    #[test]
    fn wait_is_done_at_the_phase_of_the_current_generation_only() {
        assert!(matches!(
            wait_step(&schema(2, 2, "InSync", "InSync"), "InSync"),
            Step::Done
        ));
        assert!(matches!(
            wait_step(&schema(2, 1, "InSync", "InSync"), "InSync"),
            Step::Continue
        ));
        assert!(matches!(
            wait_step(&schema(2, 2, "Applying", "OperationInProgress"), "InSync"),
            Step::Continue
        ));
    }

    #[test]
    fn wait_stops_on_blocked_naming_the_reason() {
        let Step::Stop(f) = wait_step(
            &schema(1, 1, "Blocked", "DestructiveChangesDisabled"),
            "InSync",
        ) else {
            panic!("Blocked must stop the wait");
        };
        assert_eq!(f.code, exit::BLOCKED_OR_FAILED);
        assert_eq!(
            f.message,
            "schema/orders -n app is Blocked (DestructiveChangesDisabled): plan p drops table t"
        );
        // Asked for Blocked, Blocked is what it waits for.
        assert!(matches!(
            wait_step(
                &schema(1, 1, "Blocked", "DestructiveChangesDisabled"),
                "Blocked"
            ),
            Step::Done
        ));
    }

    fn migration_at(version: i64, phase: &str) -> Resource {
        crate::fixtures::resource(
            Kind::Migration,
            1,
            serde_json::json!({
                "observedGeneration": 1, "phase": phase,
                "history": {"currentVersion": version},
                "conditions": [{
                    "type": "Ready", "status": "False", "reason": "HistoryDirty",
                    "message": "version 3 is dirty", "lastTransitionTime": "2026-12-01T00:00:00Z",
                }],
            }),
        )
    }

    #[test]
    fn for_parses_phases_versions_and_digests() {
        assert_eq!("InSync".parse(), Ok(For::Phase("InSync".into())));
        assert_eq!("version=3".parse(), Ok(For::Ready(Wanted::Version(3))));
        let e = "version=x".parse::<For>().unwrap_err();
        assert!(e.contains("version=\"x\""), "{e}");
        assert!("phase=InSync".parse::<For>().is_err());
        let v: For = "version=3".parse().unwrap();
        assert_eq!(refused(&v, Kind::Schema).map(|f| f.code), Some(exit::USAGE));
        assert!(refused(&v, Kind::Migration).is_none());
    }

    #[test]
    fn wait_for_a_version_is_done_at_it_or_later_and_stops_when_blocked_short_of_it() {
        assert!(matches!(
            ready_step(&migration_at(3, "InSync"), &Wanted::Version(3)),
            Step::Done
        ));
        assert!(matches!(
            ready_step(&migration_at(2, "Applying"), &Wanted::Version(3)),
            Step::Continue
        ));
        let Step::Stop(f) = ready_step(&migration_at(2, "Blocked"), &Wanted::Version(3)) else {
            panic!("Blocked short of the version ends the wait");
        };
        assert_eq!(f.code, exit::BLOCKED_OR_FAILED);
        assert!(
            f.message.contains(
                "waits for version 3; the database is at version 2; it is Blocked (HistoryDirty)"
            ),
            "{}",
            f.message
        );
    }

    #[test]
    fn timeouts_parse_with_units() {
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert!(parse_timeout("5 minutes").is_err());
    }
}
