//! `ptah-runner await`: an application's init container that holds its Pod
//! until a `PtahSchema` is `InSync` (at a content digest) or a
//! `PtahMigration`'s database is at a version. It only reads: one watch on
//! the one object, under the Pod's own ServiceAccount (get, list and watch
//! on that name; the chart's `awaitAccess`). What it waits on is printed
//! whenever it changes and once a minute while it does not; `Blocked` and
//! `Failed` are printed and waited through, since a person can end them
//! (an approval, an acknowledgment) and the Pod should then start by itself.

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};

use super::cli::{AwaitArgs, AwaitKind};
use super::{EXIT_DEADLINE, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::api::readiness::{self, Readiness};
use crate::api::{PtahMigration, PtahSchema};

/// How often an unchanged wait is said again.
const HEARTBEAT: Duration = Duration::from_secs(60);

/// Waits as `args` says; the exit code and the last sentence, which is
/// also the container's termination message.
pub async fn run(args: &AwaitArgs) -> (i32, String) {
    let schema = args.target.kind == AwaitKind::Schema;
    if let Some(why) = readiness::refusal(&args.wanted, schema) {
        return (EXIT_USAGE, why);
    }
    let client = match Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            return (
                EXIT_FAILED,
                format!("cannot reach the API server (in-cluster config or KUBECONFIG): {e}"),
            );
        }
    };
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let name = args.target.name.clone();
    let what = format!("{}/{name} -n {ns}", args.target.kind.word());
    let wanted = args.wanted.clone();
    let mut readings = match args.target.kind {
        AwaitKind::Schema => watch_object(Api::<PtahSchema>::namespaced(client, &ns), &name)
            .map(move |e| e.map(|o| o.and_then(|s| readiness::of_schema(&s, &wanted))))
            .boxed(),
        AwaitKind::Migration => watch_object(Api::<PtahMigration>::namespaced(client, &ns), &name)
            .map(move |e| e.map(|o| o.and_then(|m| readiness::of_migration(&m, &wanted))))
            .boxed(),
    };
    let started = Instant::now();
    let deadline = async {
        match args.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let mut said = String::new();
    let mut errors = 0u32;
    say(&format!("waiting for {what} to be {}", args.wanted));
    loop {
        tokio::select! {
            reading = readings.next() => {
                let line = match reading {
                    None => return (EXIT_FAILED, format!("the watch of {what} ended")),
                    Some(Ok(Some(Readiness::Ready(s)))) => {
                        say(&s);
                        return (EXIT_OK, s);
                    }
                    Some(Ok(Some(Readiness::Waiting(s)))) => s,
                    Some(Ok(Some(Readiness::Ended(s)))) => {
                        format!("{s}; waiting for a person to resolve it")
                    }
                    Some(Ok(None)) => format!("{what} does not exist; waiting for it to be created"),
                    Some(Err(e)) => {
                        errors = errors.saturating_add(1);
                        let line = format!("cannot watch {what}: {e}{}", access_hint(&e, &what));
                        if line != said {
                            say(&line);
                            said = line;
                        }
                        // The watcher retries at once; a missing RoleBinding
                        // may come later, so wait, and longer each time.
                        tokio::time::sleep(Duration::from_millis(500) * errors.min(20)).await;
                        continue;
                    }
                };
                errors = 0;
                if line != said {
                    say(&line);
                    said = line;
                }
            }
            _ = heartbeat.tick() => {
                say(&format!(
                    "still waiting after {}: {said}",
                    minutes(started.elapsed())
                ));
            }
            _ = &mut deadline => {
                return (
                    EXIT_DEADLINE,
                    format!(
                        "timed out after {} waiting for {what} to be {}: {said}",
                        minutes(started.elapsed()),
                        args.wanted
                    ),
                );
            }
        }
    }
}

/// What the Pod's ServiceAccount lacks, when the API server said so.
fn access_hint(e: &kube::runtime::watcher::Error, what: &str) -> String {
    let forbidden = match e {
        kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(r))
        | kube::runtime::watcher::Error::WatchStartFailed(kube::Error::Api(r)) => r.code == 403,
        kube::runtime::watcher::Error::WatchError(r) => r.code == 403,
        _ => false,
    };
    if forbidden {
        format!(
            " (the Pod's ServiceAccount needs get, list and watch on {what}: the chart's \
             awaitAccess value makes that Role; see docs/kubectl-ptah.md)"
        )
    } else {
        String::new()
    }
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

fn say(line: &str) {
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%H:%M:%S");
    eprintln!("[{stamp}] ptah-runner await: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forbidden_watch_names_the_access_it_needs() {
        let status = |code: u16, reason: &str| -> kube::core::Status {
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": "refused", "reason": reason, "code": code,
            }))
            .expect("a Status")
        };
        let forbidden = kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(
            status(403, "Forbidden").into(),
        ));
        let hint = access_hint(&forbidden, "migration/orders -n app");
        assert!(
            hint.contains("get, list and watch on migration/orders -n app")
                && hint.contains("awaitAccess"),
            "{hint}"
        );
        let gone = kube::runtime::watcher::Error::WatchError(status(410, "Expired").into());
        assert_eq!(access_hint(&gone, "x"), "");
    }

    #[test]
    fn durations_read_as_minutes_and_seconds() {
        assert_eq!(minutes(Duration::from_secs(42)), "42s");
        assert_eq!(minutes(Duration::from_secs(125)), "2m05s");
    }

    #[test]
    fn the_termination_message_is_cut_at_a_character() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termination-log");
        let long = "é".repeat(3000);
        super::super::write_termination_message(&path, &long);
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.len() <= 4096 && written.chars().all(|c| c == 'é'));
    }
}
