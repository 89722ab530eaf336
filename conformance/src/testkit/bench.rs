//! What the end-to-end benchmarks share: the harness's empty-Job floor
//! (one Job's latency, and many Jobs' throughput), the runner's timing
//! lines of a namespace's Pods, one measured stretch split into Ptah's time
//! and the operator's own, and a manager process's memory, CPU time and
//! reconcile-queue wait.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::namespace::TestNamespace;
use super::wait::Patience;

/// The runner's timings of the namespace's operation Pods not in `seen`:
/// their count and the sum of the Ptah children's time, in ms.
pub fn new_runner_timings(
    ns: &TestNamespace,
    seen: &mut std::collections::BTreeSet<std::path::PathBuf>,
) -> anyhow::Result<(usize, u64)> {
    let mut pods = 0;
    let mut ptah_ms = 0;
    let prefix = format!("{}_", ns.name());
    for dir in std::fs::read_dir(ns.harness().kubelet_dir().join("pods"))? {
        let dir = dir?.path();
        let ours = dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(&prefix));
        if !ours || seen.contains(&dir) {
            continue;
        }
        let Ok(log) = std::fs::read_to_string(dir.join("ptah.log")) else {
            continue;
        };
        let Some(line) = log.lines().find(|l| l.starts_with("ptah-runner: timing ")) else {
            continue;
        };
        let ms = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("ptah_ms="))
            .context("ptah_ms in the timing line")?;
        ptah_ms += ms.parse::<u64>()?;
        pods += 1;
        seen.insert(dir);
    }
    Ok((pods, ptah_ms))
}

/// Waits until every Job in `ns` has ended: a read's runner is answered
/// once its outcome is recorded, so a resource can reach its verdict just
/// before its last Job ends and writes its timing line.
pub async fn jobs_ended(ns: &TestNamespace) -> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    let patience = Patience::new(Duration::from_secs(60), Duration::from_millis(100));
    patience
        .poll("every Job to end", || async {
            let jobs = ns.api::<Job>().list(&Default::default()).await?;
            let ended = jobs.items.iter().all(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                        })
                    })
            });
            anyhow::Ok(ended.then_some(()))
        })
        .await
}

/// The harness's floor: an empty Job (one container running `/bin/true`)
/// from its create to its `Complete` condition, in ms.
pub async fn empty_job_ms(ns: &TestNamespace, i: usize) -> anyhow::Result<u64> {
    use k8s_openapi::api::batch::v1::Job;
    let name = format!("empty-{i}");
    let t0 = std::time::Instant::now();
    ns.create::<Job>(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": crate::harness::BASE_IMAGE,
                "command": ["/bin/true"]}],
        }}},
    }))
    .await?;
    let fast = Patience::new(Duration::from_secs(60), Duration::from_millis(20));
    fast.poll("the empty Job complete", || async {
        let job = ns.api::<Job>().get(&name).await?;
        let done = job
            .status
            .and_then(|st| st.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        anyhow::Ok(done.then_some(()))
    })
    .await?;
    Ok(t0.elapsed().as_millis() as u64)
}

/// The median (the lower of the middle two).
pub fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// One measured stretch: its wall time, its Jobs and their Ptah time.
pub struct Stretch {
    /// Wall time, in ms.
    pub total_ms: u64,
    /// Operation Pods that ran.
    pub jobs: usize,
    /// Their Ptah children's time, in ms.
    pub ptah_ms: u64,
}

impl Stretch {
    /// Everything but Ptah's time.
    pub fn operator_ms(&self) -> u64 {
        self.total_ms.saturating_sub(self.ptah_ms)
    }

    /// The target: 1.25 × (Jobs × floor) + 500 ms.
    pub fn target_ms(&self, floor_ms: u64) -> u64 {
        (1.25 * (self.jobs as f64) * (floor_ms as f64)) as u64 + 500
    }
}

/// Prints `stretches` as a table beside the floor, with their medians and
/// whether the target is met.
pub fn report(what: &str, stretches: &[Stretch], floor: u64) {
    println!("{what}");
    println!("  run  jobs  total ms  ptah ms  operator ms  target ms");
    for (i, st) in stretches.iter().enumerate() {
        println!(
            "  {:>3}  {:>4}  {:>8}  {:>7}  {:>11}  {:>9}",
            i + 1,
            st.jobs,
            st.total_ms,
            st.ptah_ms,
            st.operator_ms(),
            st.target_ms(floor)
        );
    }
    let operator_ms = median(stretches.iter().map(Stretch::operator_ms).collect());
    let jobs = median(stretches.iter().map(|st| st.jobs as u64).collect());
    let target = Stretch {
        total_ms: 0,
        jobs: jobs as usize,
        ptah_ms: 0,
    }
    .target_ms(floor);
    println!(
        "  median: total {} ms, ptah {} ms, operator {operator_ms} ms, target {target} ms ({})",
        median(stretches.iter().map(|st| st.total_ms).collect()),
        median(stretches.iter().map(|st| st.ptah_ms).collect()),
        if operator_ms <= target {
            "met"
        } else {
            "not met"
        }
    );
}

/// The floor: the median of `runs` (at least 3) empty Jobs in `ns`.
pub async fn floor_ms(ns: &TestNamespace, runs: usize) -> anyhow::Result<(u64, Vec<u64>)> {
    let mut floors = Vec::new();
    for i in 0..runs.max(3) {
        floors.push(empty_job_ms(ns, i).await?);
    }
    Ok((median(floors.clone()), floors))
}

/// `BENCH_RUNS`, else `default`.
pub fn runs(default: usize) -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Polls every 20 ms, for four minutes at most.
pub const FAST: Patience = Patience::new(Duration::from_secs(240), Duration::from_millis(20));

/// A number (or any parsed value) from the environment, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A process's memory, in KiB, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the most it was resident.
    pub hwm: u64,
    /// `RssAnon`: the heap, without the mapped binary.
    pub anon: u64,
}

/// The memory of process `pid`.
pub fn memory_kib(pid: u32) -> anyhow::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
    })
}

/// The CPU time process `pid` has used, user and system (`utime` +
/// `stime` of `/proc/<pid>/stat`), in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name in parentheses may hold spaces: count after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("the stat line")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line; `rest` starts at field 3 (the state).
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields.get(i - 3).context("a stat field")?.parse()?)
    };
    // The kernel reports them in USER_HZ, 100 a second on Linux.
    Ok((ticks(14)? + ticks(15)?) as f64 / 100.0)
}

/// How late each due pass started (the reconcile queue's wait), in ms,
/// sorted: the manager's `due pass ... late_ms=` lines in `log`.
pub fn late_ms(log: &str) -> Vec<u64> {
    numbers(log, "due pass", "late_ms")
}

/// How long each pass waited for its turn, in ms, sorted: the manager's
/// `turn wait_ms=` lines in `log`.
pub fn turn_wait_ms(log: &str) -> Vec<u64> {
    numbers(log, " turn ", "wait_ms")
}

/// The values of `field=` on the lines of `log` that hold `marker`, sorted.
fn numbers(log: &str, marker: &str, field: &str) -> Vec<u64> {
    let key = format!("{field}=");
    let mut found: Vec<u64> = log
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            l.split(&key)
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    found.sort_unstable();
    found
}

/// How many lines of `log` that hold `marker` carry each value of `field=`
/// (a quoted value whole, spaces and all).
pub fn count_by(log: &str, marker: &str, field: &str) -> std::collections::BTreeMap<String, usize> {
    let key = format!("{field}=");
    let mut counts = std::collections::BTreeMap::new();
    for line in log.lines().filter(|l| l.contains(marker)) {
        let Some(rest) = line.split(&key).nth(1) else {
            continue;
        };
        let value = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default(),
            None => rest.split_whitespace().next().unwrap_or_default(),
        };
        *counts.entry(value.to_owned()).or_default() += 1;
    }
    counts
}

/// The `q` quantile (0 < q ≤ 1) of `sorted`: the smallest value at least
/// that share of them do not exceed; `None` when there are none.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    sorted
        .get(((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1))
        .copied()
}

/// The harness's empty-Job throughput: `k` empty Jobs (one container
/// running `/bin/true`, named `burst-<i>`) created at once, from the first
/// create until every one is `Complete`, in ms. The process kubelet runs
/// every Pod at once, so the platform's concurrency is what this measures:
/// `ms / k` is the floor's cost of one Job among many.
pub async fn empty_jobs_at_once(ns: &TestNamespace, k: usize) -> anyhow::Result<u64> {
    use k8s_openapi::api::batch::v1::Job;
    let t0 = std::time::Instant::now();
    for i in 0..k {
        ns.create::<Job>(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("burst-{i}"), "labels": {"bench": "burst"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": crate::harness::BASE_IMAGE,
                    "command": ["/bin/true"]}],
            }}},
        }))
        .await?;
    }
    let burst = kube::api::ListParams::default().labels("bench=burst");
    let patience = Patience::new(Duration::from_secs(600), Duration::from_millis(50));
    patience
        .poll("the empty Jobs complete", || {
            let burst = burst.clone();
            async move {
                let jobs = ns.api::<Job>().list(&burst).await?;
                let ended = |j: &Job, how: &str| {
                    j.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == how && c.status == "True"))
                };
                anyhow::ensure!(
                    !jobs.items.iter().any(|j| ended(j, "Failed")),
                    "an empty Job failed"
                );
                let done = jobs.items.iter().filter(|j| ended(j, "Complete")).count();
                anyhow::Ok((done == k).then_some(()))
            }
        })
        .await?;
    Ok(t0.elapsed().as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-07T16:00:00Z DEBUG ptah_operator::controller::turns: turn wait_ms=12 woken=false
2026-12-07T16:00:00Z DEBUG ptah_operator::controller::pass: due pass kind=\"PtahSchema\" name=s1 late_ms=40
2026-12-07T16:00:01Z DEBUG ptah_operator::controller::turns: turn wait_ms=3 woken=true
2026-12-07T16:00:01Z DEBUG ptah_operator::execution::lease: reading a realm Lease lease=\"ptah-realm-a\" why=\"acquire: held as watched\"
2026-12-07T16:00:02Z DEBUG ptah_operator::execution::lease: reading a realm Lease lease=\"ptah-realm-b\" why=\"acquire: held as watched\"
2026-12-07T16:00:02Z DEBUG ptah_operator::execution::lease: reading a realm Lease lease=\"ptah-realm-b\" why=verify
";

    #[test]
    fn each_measure_reads_only_its_own_lines() {
        assert_eq!(turn_wait_ms(LOG), vec![3, 12]);
        assert_eq!(late_ms(LOG), vec![40]);
        let reads = count_by(LOG, "reading a realm Lease", "why");
        assert_eq!(reads.get("acquire: held as watched"), Some(&2));
        assert_eq!(reads.get("verify"), Some(&1));
        assert_eq!(reads.len(), 2);
    }
}
