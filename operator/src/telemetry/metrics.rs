//! The manager's Prometheus metrics, with bounded labels only: family,
//! operation, outcome, stage and phase (never a name, namespace or id).
//! Counters move where the pass does its work; the gauges are a census of
//! the watch stores taken at each scrape.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::change::{ROOT_SPAN, SpanRecord};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByFamily {
    family: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByOutcome {
    family: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByOperation {
    family: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByOperationOutcome {
    family: String,
    operation: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByStage {
    family: String,
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByPhase {
    family: String,
    phase: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 5 ms to about 45 min.
    Histogram::new(exponential_buckets(0.005, 2.0, 20))
}

/// One resource in the census a scrape takes.
#[derive(Clone, Debug)]
pub struct Census {
    /// `PtahSchema` or `PtahMigration`.
    pub family: &'static str,
    /// Its phase, or `None` before its first read.
    pub phase: Option<String>,
    /// Its plan waits for a person's approval.
    pub awaiting_approval: bool,
    /// Its next pass is due and has not run yet.
    pub due: bool,
}

/// The registry and every metric in it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ByOutcome, Counter>,
    reconcile_seconds: Histograms<ByFamily>,
    jobs: Family<ByOperation, Counter>,
    operations: Family<ByOperationOutcome, Counter>,
    stage_seconds: Histograms<ByStage>,
    changes: Family<ByOutcome, Counter>,
    resources: Family<ByPhase, Gauge>,
    awaiting: Family<ByFamily, Gauge>,
    due: Family<ByFamily, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ptah");
        let reconciles = Family::<ByOutcome, Counter>::default();
        registry.register(
            "reconciles",
            "Passes over a resource, by how they ended (ok, error)",
            reconciles.clone(),
        );
        let reconcile_seconds: Histograms<ByFamily> = Family::new_with_constructor(seconds);
        registry.register(
            "reconcile_duration_seconds",
            "How long a pass over a resource took",
            reconcile_seconds.clone(),
        );
        let jobs = Family::<ByOperation, Counter>::default();
        registry.register("jobs_created", "Jobs created, by operation", jobs.clone());
        let operations = Family::<ByOperationOutcome, Counter>::default();
        registry.register(
            "operations",
            "Operations whose outcome a pass read, by operation and outcome",
            operations.clone(),
        );
        let stage_seconds: Histograms<ByStage> = Family::new_with_constructor(seconds);
        registry.register(
            "stage_duration_seconds",
            "How long a change spent in each stage (Source, Plan, Decision, Execution, Verification)",
            stage_seconds.clone(),
        );
        let changes = Family::<ByOutcome, Counter>::default();
        registry.register(
            "changes",
            "Changes that reached a verdict, by the phase they ended in",
            changes.clone(),
        );
        let resources = Family::<ByPhase, Gauge>::default();
        registry.register("resources", "Resources by phase", resources.clone());
        let awaiting = Family::<ByFamily, Gauge>::default();
        registry.register(
            "plans_awaiting_approval",
            "Plans that wait for a person's approval",
            awaiting.clone(),
        );
        let due = Family::<ByFamily, Gauge>::default();
        registry.register(
            "reconcile_queue_depth",
            "Resources whose next pass is due and has not run yet",
            due.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_seconds,
            jobs,
            operations,
            stage_seconds,
            changes,
            resources,
            awaiting,
            due,
        }
    }

    /// A pass ended.
    pub fn reconciled(&self, family: &str, ok: bool, seconds: f64) {
        let outcome = if ok { "ok" } else { "error" };
        self.reconciles
            .get_or_create(&ByOutcome {
                family: family.into(),
                outcome: outcome.into(),
            })
            .inc();
        self.reconcile_seconds
            .get_or_create(&ByFamily {
                family: family.into(),
            })
            .observe(seconds);
    }

    /// A Job was created.
    pub fn job_created(&self, family: &str, operation: &str) {
        self.jobs
            .get_or_create(&ByOperation {
                family: family.into(),
                operation: operation.into(),
            })
            .inc();
    }

    /// A pass read an operation's outcome.
    pub fn operation_ended(&self, family: &str, operation: &str, outcome: &str) {
        self.operations
            .get_or_create(&ByOperationOutcome {
                family: family.into(),
                operation: operation.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Stages and changes that ended, as their spans say.
    pub fn spans_ended(&self, family: &str, spans: &[SpanRecord]) {
        for s in spans {
            let took = s.end.duration_since(s.start).as_secs_f64().max(0.0);
            if s.name == ROOT_SPAN {
                let outcome = s
                    .attributes
                    .iter()
                    .find(|(k, _)| *k == "ptah.outcome")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                self.changes
                    .get_or_create(&ByOutcome {
                        family: family.into(),
                        outcome,
                    })
                    .inc();
            } else {
                self.stage_seconds
                    .get_or_create(&ByStage {
                        family: family.into(),
                        stage: s.name.clone(),
                    })
                    .observe(took);
            }
        }
    }

    /// The exposition, with the gauges taken from `census`.
    pub fn render(&self, census: &[Census]) -> String {
        self.resources.clear();
        self.awaiting.clear();
        self.due.clear();
        for c in census {
            let family = ByFamily {
                family: c.family.into(),
            };
            self.resources
                .get_or_create(&ByPhase {
                    family: c.family.into(),
                    phase: c.phase.clone().unwrap_or_else(|| "None".into()),
                })
                .inc();
            // Every family shows, at zero too.
            let awaiting = self.awaiting.get_or_create(&family);
            let due = self.due.get_or_create(&family);
            if c.awaiting_approval {
                awaiting.inc();
            }
            if c.due {
                due.inc();
            }
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of [`classic`]'s text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics text in Prometheus's classic text format, for scrapers and
/// linters that do not ask for OpenMetrics: a counter's family is named
/// with its `_total`, and there is no `# EOF`.
pub fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_and_the_census_is_taken_at_each_render() {
        let m = Metrics::new();
        m.reconciled("PtahSchema", true, 0.01);
        m.job_created("PtahSchema", "Plan");
        let census = vec![
            Census {
                family: "PtahSchema",
                phase: Some("AwaitingApproval".into()),
                awaiting_approval: true,
                due: false,
            },
            Census {
                family: "PtahSchema",
                phase: Some("InSync".into()),
                awaiting_approval: false,
                due: true,
            },
        ];
        let text = m.render(&census);
        assert!(
            text.contains(r#"ptah_reconciles_total{family="PtahSchema",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ptah_jobs_created_total{family="PtahSchema",operation="Plan"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ptah_resources{family="PtahSchema",phase="InSync"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ptah_plans_awaiting_approval{family="PtahSchema"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ptah_reconcile_queue_depth{family="PtahSchema"} 1"#),
            "{text}"
        );
        // A resource gone from the stores is gone from the gauges.
        let text = m.render(&census[1..]);
        assert!(!text.contains(r#"phase="AwaitingApproval""#), "{text}");
        assert!(
            text.contains(r#"ptah_plans_awaiting_approval{family="PtahSchema"} 0"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        let plain = classic(&text);
        assert!(
            plain.contains("# TYPE ptah_reconciles_total counter\n"),
            "{plain}"
        );
        assert!(plain.contains("# HELP ptah_reconciles_total "), "{plain}");
        assert!(plain.contains("# TYPE ptah_resources gauge\n"), "{plain}");
        assert!(!plain.contains("# EOF"), "{plain}");
    }
}
