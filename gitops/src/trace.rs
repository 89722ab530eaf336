//! `kubectl ptah trace KIND/NAME`: a change's trace as a waterfall, read
//! from the tracing backend's query API (Jaeger's `/api/traces`): the stage
//! spans the manager exported, the runner's spans in each Job under them,
//! and the journal entries as events. `--last N` shows the Nth newest
//! change; the one under way, once it is worth a trace, is the newest.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Failure;
use crate::resource::Resource;

/// Jaeger's answer: `{"data": [trace, ...]}`.
#[derive(Debug, Deserialize)]
pub struct Answer {
    #[serde(default)]
    pub data: Vec<JaegerTrace>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JaegerTrace {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(default)]
    pub spans: Vec<JaegerSpan>,
    #[serde(default)]
    pub processes: BTreeMap<String, Process>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JaegerSpan {
    #[serde(rename = "spanID")]
    pub span_id: String,
    pub operation_name: String,
    #[serde(default)]
    pub references: Vec<Reference>,
    /// Microseconds since the epoch.
    pub start_time: i64,
    /// Microseconds.
    pub duration: i64,
    #[serde(default)]
    pub tags: Vec<Tag>,
    #[serde(default)]
    pub logs: Vec<Log>,
    #[serde(rename = "processID", default)]
    pub process_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub ref_type: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Tag {
    pub key: String,
    #[serde(default)]
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Log {
    pub timestamp: i64,
    #[serde(default)]
    pub fields: Vec<Tag>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub service_name: String,
}

/// One line of the waterfall.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpanView {
    pub name: String,
    pub service: String,
    pub depth: usize,
    /// Since the trace began.
    pub offset_micros: i64,
    pub duration_micros: i64,
    pub detail: String,
    pub events: Vec<EventView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub name: String,
    pub offset_micros: i64,
}

/// The trace as the verb shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TraceView {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub trace_id: String,
    /// RFC 3339.
    pub started: String,
    pub duration_micros: i64,
    /// The verdict, when the change ended.
    pub outcome: Option<String>,
    pub spans: Vec<SpanView>,
}

fn tag(tags: &[Tag], key: &str) -> Option<String> {
    tags.iter().find(|t| t.key == key).map(|t| match &t.value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// What a span says beyond its name, in one cell.
fn detail(s: &JaegerSpan) -> String {
    let mut d = Vec::new();
    let t = |k: &str| tag(&s.tags, k);
    if let Some(p) = t("ptah.plan.name") {
        d.push(format!("plan {p}"));
    }
    if let Some(a) = t("ptah.approver") {
        d.push(format!("approved by {a}"));
    }
    if let Some(a) = t("ptah.authorization").filter(|a| a == "Policy") {
        d.push(format!("authorized by {a}"));
    }
    if let Some(j) = t("ptah.job.name") {
        d.push(format!("Job {j}"));
    }
    if let Some(c) = t("ptah.command") {
        d.push(format!("ptah {c}"));
    }
    if let Some(c) = t("process.exit.code") {
        d.push(format!("exit {c}"));
    }
    match (t("ptah.outcome"), t("ptah.reason")) {
        (Some(o), Some(r)) => d.push(format!("{o} ({r})")),
        (Some(o), None) => d.push(o),
        _ => {}
    }
    if t("otel.status_code").as_deref() == Some("ERROR") || t("error").as_deref() == Some("true") {
        d.push("error".into());
    }
    d.join(", ")
}

/// The waterfall of `trace`: spans as a tree by their parents, each
/// parent's children by start.
pub fn view(r: &Resource, trace: &JaegerTrace) -> TraceView {
    let start = trace.spans.iter().map(|s| s.start_time).min().unwrap_or(0);
    let end = trace
        .spans
        .iter()
        .map(|s| s.start_time + s.duration)
        .max()
        .unwrap_or(start);
    let ids: std::collections::HashSet<&str> =
        trace.spans.iter().map(|s| s.span_id.as_str()).collect();
    let parent = |s: &JaegerSpan| {
        s.references
            .iter()
            .find(|r| r.ref_type == "CHILD_OF" && ids.contains(r.span_id.as_str()))
            .map(|r| r.span_id.clone())
    };
    let mut children: BTreeMap<Option<String>, Vec<&JaegerSpan>> = BTreeMap::new();
    for s in &trace.spans {
        children.entry(parent(s)).or_default().push(s);
    }
    for list in children.values_mut() {
        list.sort_by_key(|s| (s.start_time, s.duration));
    }
    let mut spans = Vec::new();
    let mut stack: Vec<(&JaegerSpan, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|s| (*s, 0)).collect())
        .unwrap_or_default();
    while let Some((s, depth)) = stack.pop() {
        spans.push(SpanView {
            name: s.operation_name.clone(),
            service: trace
                .processes
                .get(&s.process_id)
                .map(|p| p.service_name.clone())
                .unwrap_or_default(),
            depth,
            offset_micros: s.start_time - start,
            duration_micros: s.duration,
            detail: detail(s),
            events: s
                .logs
                .iter()
                .map(|l| EventView {
                    name: tag(&l.fields, "event").unwrap_or_else(|| "event".into()),
                    offset_micros: l.timestamp - start,
                })
                .collect(),
        });
        if let Some(kids) = children.get(&Some(s.span_id.clone())) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    let root = trace
        .spans
        .iter()
        .find(|s| s.operation_name == "change" && parent(s).is_none());
    let outcome = root.map(|s| {
        let t = |k| tag(&s.tags, k);
        match (t("ptah.outcome"), t("ptah.reason")) {
            (Some(o), Some(r)) => format!("{o} ({r})"),
            (Some(o), None) => o,
            _ => String::new(),
        }
    });
    let started = k8s_openapi::jiff::Timestamp::from_microsecond(start)
        .map(|t| format!("{:.0}", t))
        .unwrap_or_default();
    TraceView {
        kind: r.kind().api_kind(),
        namespace: r.namespace(),
        name: r.name(),
        trace_id: trace.trace_id.clone(),
        started,
        duration_micros: end - start,
        outcome,
        spans,
    }
}

/// A duration the way a person reads it: `41s`, `38m0s`, `1.3s`, `12ms`.
pub fn human(micros: i64) -> String {
    let d = Duration::from_micros(micros.max(0) as u64);
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h{}m", secs / 3600, (secs % 3600) / 60)
    } else if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else if secs >= 10 {
        format!("{secs}s")
    } else if d.as_millis() >= 1000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

const BAR: usize = 40;

fn bar(offset: i64, duration: i64, total: i64) -> String {
    let total = total.max(1) as f64;
    let from = ((offset as f64 / total) * BAR as f64).floor() as usize;
    let len = ((duration as f64 / total) * BAR as f64).round() as usize;
    let from = from.min(BAR - 1);
    let len = len.clamp(1, BAR - from);
    let mut s = String::with_capacity(BAR * 3);
    s.push_str(&" ".repeat(from));
    s.push_str(&"█".repeat(len));
    s.push_str(&" ".repeat(BAR - from - len));
    s
}

/// The waterfall for a terminal.
pub fn render(v: &TraceView) -> String {
    let mut out = format!(
        "{} {}/{}: trace {}\nstarted {}, {}{}\n\n",
        v.kind,
        v.namespace,
        v.name,
        v.trace_id,
        v.started,
        human(v.duration_micros),
        v.outcome
            .as_ref()
            .map(|o| format!(", ended {o}"))
            .unwrap_or_else(|| ", under way".into()),
    );
    let header = ["SPAN", "START", "TOOK", "WATERFALL", "DETAIL"].map(String::from);
    let mut rows = Vec::new();
    for s in &v.spans {
        let indent = "  ".repeat(s.depth);
        let service = if s.service == "ptah-operator" || s.service.is_empty() {
            String::new()
        } else {
            format!(" ({})", s.service)
        };
        rows.push([
            format!("{indent}{}{service}", s.name),
            format!("+{}", human(s.offset_micros)),
            human(s.duration_micros),
            format!(
                "▕{}▏",
                bar(s.offset_micros, s.duration_micros, v.duration_micros)
            ),
            s.detail.clone(),
        ]);
        for e in &s.events {
            rows.push([
                format!("{indent}  · {}", e.name),
                format!("+{}", human(e.offset_micros)),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
    }
    out.push_str(&crate::output::table(&header, &rows));
    out
}

/// Where the query API is: `--traces-url`, else `$PTAH_TRACES_URL`.
pub fn base_url(flag: Option<String>) -> Result<String, Failure> {
    flag.or_else(|| std::env::var("PTAH_TRACES_URL").ok())
        .filter(|u| !u.trim().is_empty())
        .map(|u| u.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            Failure::usage(
                "no tracing backend: give --traces-url (Jaeger's query API, e.g. http://jaeger-query:16686) or set PTAH_TRACES_URL",
            )
        })
}

async fn get_json(url: &str) -> Result<Answer, Failure> {
    let response = reqwest::get(url)
        .await
        .map_err(|e| Failure::error(format!("reading the tracing backend: {}", e.without_url())))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| Failure::error(format!("reading the tracing backend: {}", e.without_url())))?;
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(Answer { data: Vec::new() });
    }
    if !status.is_success() {
        return Err(Failure::error(format!(
            "the tracing backend answered {status}"
        )));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Failure::error(format!("the tracing backend's answer: {e}")))
}

/// The Nth newest change of `r` (1 = the newest), from `base`.
pub async fn fetch(base: &str, r: &Resource, last: usize) -> Result<JaegerTrace, Failure> {
    let resource = format!("{}/{}", r.namespace(), r.name());
    let tags = serde_json::json!({ "ptah.resource": resource }).to_string();
    let mut url = reqwest::Url::parse(&format!("{base}/api/traces"))
        .map_err(|e| Failure::usage(format!("--traces-url: {e}")))?;
    url.query_pairs_mut()
        .append_pair("service", "ptah-operator")
        .append_pair("tags", &tags)
        .append_pair("operation", "change")
        .append_pair("limit", &(last + 20).to_string())
        .append_pair("lookback", "720h");
    let mut found = get_json(url.as_str()).await?.data;
    // Newest first, by when each change began.
    found.sort_by_key(|t| std::cmp::Reverse(t.spans.iter().map(|s| s.start_time).min()));
    let mut ids: Vec<String> = Vec::new();
    if let Some(t) = r.change_trace().filter(|t| t.exported) {
        ids.push(t.trace_id.clone());
    }
    for t in &found {
        if !ids.contains(&t.trace_id) {
            ids.push(t.trace_id.clone());
        }
    }
    let Some(id) = ids.get(last.saturating_sub(1)) else {
        return Err(Failure::not_found(format!(
            "{} has {} traced change(s) in the backend; --last {last} names none",
            r.cli_name(),
            ids.len()
        )));
    };
    // The whole trace: a search may return only some of a trace's spans.
    let whole = get_json(&format!("{base}/api/traces/{id}")).await?;
    whole
        .data
        .into_iter()
        .next()
        .ok_or_else(|| Failure::not_found(format!("trace {id} is not in the backend (yet)")))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The waterfall as an SVG picture (`--svg FILE`): one row per span, its
/// bar placed on the change's time axis, its events as ticks.
pub fn svg(v: &TraceView) -> String {
    const ROW: usize = 26;
    const LABEL: usize = 300;
    const WIDTH: usize = 640;
    const DETAIL: usize = 420;
    let total = v.duration_micros.max(1) as f64;
    let x = |micros: i64| LABEL as f64 + (micros.max(0) as f64 / total) * WIDTH as f64;
    let height = ROW * (v.spans.len() + 3);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" font-family=\"monospace\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
         <text x=\"8\" y=\"20\" font-weight=\"bold\">{title}</text>\n\
         <text x=\"8\" y=\"40\" fill=\"#555555\">{sub}</text>\n",
        w = LABEL + WIDTH + DETAIL,
        title = escape(&format!(
            "{} {}/{}: trace {}",
            v.kind, v.namespace, v.name, v.trace_id
        )),
        sub = escape(&format!(
            "started {}, {}{}",
            v.started,
            human(v.duration_micros),
            v.outcome
                .as_ref()
                .map(|o| format!(", ended {o}"))
                .unwrap_or_else(|| ", under way".into())
        )),
    );
    for (i, s) in v.spans.iter().enumerate() {
        let y = ROW * (i + 2) + 8;
        let colour = match (s.service.as_str(), s.depth) {
            (_, 0) => "#5b6770",
            ("ptah-operator", _) => "#2f6fbf",
            _ => "#d9822b",
        };
        let x0 = x(s.offset_micros);
        let w = ((s.duration_micros as f64 / total) * WIDTH as f64).max(2.0);
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\">{}</text>\n<rect x=\"{x0:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"16\" rx=\"2\" fill=\"{colour}\"><title>{}</title></rect>\n<text x=\"{}\" y=\"{}\" fill=\"#333333\">{}</text>\n",
            8 + 14 * s.depth,
            y + 13,
            escape(&s.name),
            y,
            escape(&format!("{} {} at +{}", s.name, human(s.duration_micros), human(s.offset_micros))),
            LABEL + WIDTH + 12,
            y + 13,
            escape(&format!("{}  {}", human(s.duration_micros), s.detail)),
        ));
        for e in &s.events {
            let ex = x(e.offset_micros);
            out.push_str(&format!(
                "<line x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#000000\" stroke-width=\"2\"><title>{}</title></line>\n",
                y - 2,
                y + 18,
                escape(&e.name),
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(
        id: &str,
        parent: Option<&str>,
        name: &str,
        start: i64,
        dur: i64,
        tags: serde_json::Value,
    ) -> serde_json::Value {
        serde_json::json!({
            "spanID": id, "operationName": name, "startTime": start, "duration": dur,
            "references": parent.map(|p| vec![serde_json::json!({"refType": "CHILD_OF", "traceID": "t", "spanID": p})]).unwrap_or_default(),
            "tags": tags, "logs": [], "processID": if name.starts_with("plan") || name == "ptah" { "p2" } else { "p1" },
        })
    }

    fn schema() -> Resource {
        crate::fixtures::resource(crate::resource::Kind::Schema, 1, serde_json::json!({}))
    }

    #[test]
    fn the_waterfall_nests_the_runner_under_its_stage_and_shows_the_wait() {
        let t0 = 1_800_000_000_000_000i64;
        let s = 1_000_000i64;
        let trace: JaegerTrace = serde_json::from_value(serde_json::json!({
            "traceID": "abc",
            "processes": {"p1": {"serviceName": "ptah-operator"}, "p2": {"serviceName": "ptah-runner"}},
            "spans": [
                span("r", None, "change", t0, 2400 * s, serde_json::json!([{"key": "ptah.outcome", "value": "InSync"}, {"key": "ptah.reason", "value": "ScopedConverged"}])),
                span("d", Some("r"), "Decision", t0 + 3 * s, 2280 * s, serde_json::json!([{"key": "ptah.approver", "value": "alice"}])),
                span("p", Some("r"), "Plan", t0 + s, 2 * s, serde_json::json!([{"key": "ptah.plan.name", "value": "orders-plan-1"}])),
                span("x", Some("p"), "plan", t0 + s + 1000, s, serde_json::json!([])),
                span("y", Some("x"), "ptah", t0 + s + 2000, s / 2, serde_json::json!([{"key": "ptah.command", "value": "schema plan"}, {"key": "process.exit.code", "type": "int64", "value": 0}])),
                span("s", Some("r"), "Source", t0, s, serde_json::json!([])),
            ],
        }))
        .expect("trace");
        let v = view(&schema(), &trace);
        let names: Vec<(&str, usize)> =
            v.spans.iter().map(|s| (s.name.as_str(), s.depth)).collect();
        assert_eq!(
            names,
            [
                ("change", 0),
                ("Source", 1),
                ("Plan", 1),
                ("plan", 2),
                ("ptah", 3),
                ("Decision", 1)
            ]
        );
        assert_eq!(v.outcome.as_deref(), Some("InSync (ScopedConverged)"));
        let text = render(&v);
        assert!(text.contains("PtahSchema app/orders: trace abc"), "{text}");
        assert!(text.contains("38m0s"), "{text}");
        assert!(text.contains("approved by alice"), "{text}");
        assert!(text.contains("plan (ptah-runner)"), "{text}");
        assert!(text.contains("ptah schema plan, exit 0"), "{text}");
        let picture = svg(&v);
        assert!(picture.starts_with("<svg") && picture.ends_with("</svg>\n"));
        assert_eq!(picture.matches("<rect x=").count(), v.spans.len());
        assert!(picture.contains("approved by alice"));
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(human(12_000), "12ms");
        assert_eq!(human(1_300_000), "1.3s");
        assert_eq!(human(41_000_000), "41s");
        assert_eq!(human(2_280_000_000), "38m0s");
        assert_eq!(human(7_260_000_000), "2h1m");
    }

    #[test]
    fn a_bar_is_never_empty_and_never_past_the_end() {
        assert_eq!(bar(0, 0, 100).chars().filter(|c| *c == '█').count(), 1);
        assert_eq!(bar(100, 10, 100).chars().count(), BAR);
        assert_eq!(bar(0, 100, 100).chars().filter(|c| *c == '█').count(), BAR);
    }
}
