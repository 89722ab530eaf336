//! Jaeger's query API as the tests read it: the services it knows, the
//! traces a search finds (`/api/traces?service=&operation=&tags=&limit=`,
//! over a window that ends now and reaches `lookback` back), and one trace by
//! id, as typed values (traces, spans with their references, tags and logs,
//! processes). Waiting for a trace polls the search for at most a
//! [`Patience`]'s timeout: spans reach the backend when their exporter sends
//! them, not when the code under test returns.
//!
//! Generic on purpose: it knows Jaeger's JSON, nothing of what any program
//! names its spans.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::harness::Harness;
use crate::testkit::wait::Patience;

/// A client of one Jaeger query API.
#[derive(Debug, Clone)]
pub struct TracesClient {
    base: url::Url,
    http: reqwest::Client,
}

/// A trace search: one service (Jaeger requires it), optionally one
/// operation and tags every match must carry (on one span), at most `limit`
/// traces whose spans started within the last `lookback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceQuery {
    pub service: String,
    pub operation: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub limit: u32,
    pub lookback: Duration,
}

impl TraceQuery {
    /// The traces of `service`: the last 20, from the last hour.
    pub fn service(service: impl Into<String>) -> Self {
        TraceQuery {
            service: service.into(),
            operation: None,
            tags: BTreeMap::new(),
            limit: 20,
            lookback: Duration::from_secs(3600),
        }
    }

    /// Only traces with a span of this operation name.
    pub fn operation(mut self, name: impl Into<String>) -> Self {
        self.operation = Some(name.into());
        self
    }

    /// Only traces with a span tagged `key` = `value` (compared as text).
    pub fn tag(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.tags.insert(key.into(), value.to_string());
        self
    }

    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    pub fn lookback(mut self, lookback: Duration) -> Self {
        self.lookback = lookback;
        self
    }
}

/// One trace as the query API returns it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Trace {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(default)]
    pub spans: Vec<Span>,
    /// The spans' processes, by the `processID` each span names.
    #[serde(default)]
    pub processes: BTreeMap<String, Process>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// One span. Times are in microseconds, as Jaeger keeps them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
    pub operation_name: String,
    #[serde(default)]
    pub references: Vec<Reference>,
    #[serde(default)]
    pub flags: u32,
    /// Microseconds since the Unix epoch.
    pub start_time: u64,
    /// Microseconds.
    pub duration: u64,
    #[serde(default)]
    pub tags: Vec<KeyValue>,
    #[serde(default)]
    pub logs: Vec<Log>,
    #[serde(rename = "processID", default)]
    pub process_id: String,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// A span's reference to another span (its parent, for `ChildOf`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reference {
    #[serde(rename = "refType")]
    pub ref_type: RefType,
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RefType {
    #[serde(rename = "CHILD_OF")]
    ChildOf,
    #[serde(rename = "FOLLOWS_FROM")]
    FollowsFrom,
}

/// A tag (a span's attribute, a process's resource attribute, a log field).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct KeyValue {
    pub key: String,
    #[serde(rename = "type")]
    pub value_type: ValueType,
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    String,
    Bool,
    Int64,
    Float64,
    Binary,
}

/// A span's log (an OTLP span event: its name is the field `event`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Log {
    /// Microseconds since the Unix epoch.
    pub timestamp: u64,
    #[serde(default)]
    pub fields: Vec<KeyValue>,
}

/// The process (an OTLP resource) that emitted spans.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub service_name: String,
    #[serde(default)]
    pub tags: Vec<KeyValue>,
}

/// The envelope of every answer: `data`, or `errors`.
#[derive(Debug, Deserialize)]
struct Answer<T> {
    data: Option<T>,
    #[serde(default)]
    errors: Option<Vec<ApiError>>,
}

#[derive(Debug, Deserialize)]
struct ApiError {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    msg: String,
}

impl KeyValue {
    pub fn as_str(&self) -> Option<&str> {
        self.value.as_str()
    }
    pub fn as_i64(&self) -> Option<i64> {
        self.value.as_i64()
    }
    pub fn as_f64(&self) -> Option<f64> {
        self.value.as_f64()
    }
    pub fn as_bool(&self) -> Option<bool> {
        self.value.as_bool()
    }
}

/// The tag named `key` among `tags`.
pub fn find_tag<'a>(tags: &'a [KeyValue], key: &str) -> Option<&'a KeyValue> {
    tags.iter().find(|t| t.key == key)
}

impl Span {
    /// The span this one is a child of (its first `CHILD_OF` reference).
    pub fn parent_span_id(&self) -> Option<&str> {
        self.references
            .iter()
            .find(|r| r.ref_type == RefType::ChildOf)
            .map(|r| r.span_id.as_str())
    }
    pub fn tag(&self, key: &str) -> Option<&KeyValue> {
        find_tag(&self.tags, key)
    }
    pub fn tag_str(&self, key: &str) -> Option<&str> {
        self.tag(key).and_then(KeyValue::as_str)
    }
    pub fn tag_i64(&self, key: &str) -> Option<i64> {
        self.tag(key).and_then(KeyValue::as_i64)
    }
    pub fn tag_f64(&self, key: &str) -> Option<f64> {
        self.tag(key).and_then(KeyValue::as_f64)
    }
    pub fn tag_bool(&self, key: &str) -> Option<bool> {
        self.tag(key).and_then(KeyValue::as_bool)
    }
    /// When it started.
    pub fn start(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.start_time)
    }
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration)
    }
    /// The logs whose `event` field (an OTLP event's name) is `name`.
    pub fn logs_named(&self, name: &str) -> Vec<&Log> {
        self.logs
            .iter()
            .filter(|l| find_tag(&l.fields, "event").and_then(KeyValue::as_str) == Some(name))
            .collect()
    }
}

impl Trace {
    pub fn span(&self, span_id: &str) -> Option<&Span> {
        self.spans.iter().find(|s| s.span_id == span_id)
    }
    /// The first span of this operation name.
    pub fn span_named(&self, operation: &str) -> Option<&Span> {
        self.spans.iter().find(|s| s.operation_name == operation)
    }
    pub fn spans_named(&self, operation: &str) -> Vec<&Span> {
        self.spans
            .iter()
            .filter(|s| s.operation_name == operation)
            .collect()
    }
    /// The spans with no parent in this trace.
    pub fn roots(&self) -> Vec<&Span> {
        self.spans
            .iter()
            .filter(|s| s.parent_span_id().is_none_or(|p| self.span(p).is_none()))
            .collect()
    }
    pub fn parent_of(&self, span: &Span) -> Option<&Span> {
        span.parent_span_id().and_then(|p| self.span(p))
    }
    pub fn children_of(&self, span: &Span) -> Vec<&Span> {
        self.spans
            .iter()
            .filter(|s| s.parent_span_id() == Some(span.span_id.as_str()))
            .collect()
    }
    pub fn process_of(&self, span: &Span) -> Option<&Process> {
        self.processes.get(&span.process_id)
    }
    /// The service that emitted `span`.
    pub fn service_of(&self, span: &Span) -> Option<&str> {
        self.process_of(span).map(|p| p.service_name.as_str())
    }
    /// Every operation name, in span order.
    pub fn operation_names(&self) -> Vec<&str> {
        self.spans
            .iter()
            .map(|s| s.operation_name.as_str())
            .collect()
    }
}

impl TracesClient {
    /// A client of the query API at `base_url` (`http://host:port`).
    pub fn new(base_url: &str) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let base =
            url::Url::parse(base_url).with_context(|| format!("query API URL {base_url}"))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(TracesClient { base, http })
    }

    /// The query API of the harness's Jaeger (`PTAH_TRACES_URL`).
    pub fn of(harness: &Harness) -> anyhow::Result<Self> {
        crate::jaeger::require(harness)?;
        Self::new(&harness.traces_url()?)
    }

    pub fn base_url(&self) -> &url::Url {
        &self.base
    }

    /// The services that sent spans.
    pub async fn services(&self) -> anyhow::Result<Vec<String>> {
        let url = self.url(&["api", "services"])?;
        Ok(self.get::<Vec<String>>(url).await?.unwrap_or_default())
    }

    /// The operation names seen for `service`.
    pub async fn operations(&self, service: &str) -> anyhow::Result<Vec<String>> {
        let url = self.url(&["api", "services", service, "operations"])?;
        Ok(self.get::<Vec<String>>(url).await?.unwrap_or_default())
    }

    /// The traces `query` finds, newest first as Jaeger sorts them.
    pub async fn find(&self, query: &TraceQuery) -> anyhow::Result<Vec<Trace>> {
        let mut url = self.url(&["api", "traces"])?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
        let start = now.saturating_sub(query.lookback);
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("service", &query.service);
            if let Some(op) = &query.operation {
                pairs.append_pair("operation", op);
            }
            if !query.tags.is_empty() {
                pairs.append_pair("tags", &serde_json::to_string(&query.tags)?);
            }
            pairs.append_pair("limit", &query.limit.to_string());
            // The API takes the window as start and end (µs); `lookback`
            // is the UI's name for its length.
            pairs.append_pair("start", &start.as_micros().to_string());
            pairs.append_pair(
                "end",
                &(now + Duration::from_secs(60)).as_micros().to_string(),
            );
        }
        Ok(self.get::<Vec<Trace>>(url).await?.unwrap_or_default())
    }

    /// One trace by id (32 hex digits), or `None` when Jaeger has none.
    pub async fn trace(&self, trace_id: &str) -> anyhow::Result<Option<Trace>> {
        let url = self.url(&["api", "traces", trace_id])?;
        let traces = self.get::<Vec<Trace>>(url).await?.unwrap_or_default();
        Ok(traces.into_iter().next())
    }

    /// Waits until `query` finds a trace; returns the newest.
    pub async fn wait_for_trace(
        &self,
        query: &TraceQuery,
        patience: Patience,
    ) -> anyhow::Result<Trace> {
        self.wait_for_trace_where(query, patience, "any trace", |_| true)
            .await
    }

    /// Waits until `query` finds a trace that `accept` takes (all its spans
    /// arrived, say); returns the first such. `what` names it in the error.
    pub async fn wait_for_trace_where(
        &self,
        query: &TraceQuery,
        patience: Patience,
        what: &str,
        accept: impl Fn(&Trace) -> bool,
    ) -> anyhow::Result<Trace> {
        let last = RefCell::new(Vec::new());
        let (last_ref, accept) = (&last, &accept);
        let found = patience
            .poll(&format!("{what} found by {query:?}"), || async move {
                let traces = self.find(query).await?;
                let hit = traces.iter().find(|t| accept(t)).cloned();
                *last_ref.borrow_mut() = traces;
                Ok(hit)
            })
            .await;
        found.with_context(|| format!("the last search found {}", summary(&last.borrow())))
    }

    /// Waits until the trace `trace_id` exists and `accept` takes it.
    pub async fn wait_for_trace_id(
        &self,
        trace_id: &str,
        patience: Patience,
        accept: impl Fn(&Trace) -> bool,
    ) -> anyhow::Result<Trace> {
        let last = RefCell::new(None);
        let (last_ref, accept) = (&last, &accept);
        let found = patience
            .poll(&format!("trace {trace_id}"), || async move {
                let trace = self.trace(trace_id).await?;
                let hit = trace.as_ref().filter(|t| accept(t)).cloned();
                *last_ref.borrow_mut() = trace;
                Ok(hit)
            })
            .await;
        found.with_context(|| match &*last.borrow() {
            Some(t) => format!("it was there as {}", summary(std::slice::from_ref(t))),
            None => "Jaeger never had it".to_string(),
        })
    }

    fn url(&self, segments: &[&str]) -> anyhow::Result<url::Url> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("{} cannot be a base URL", self.base))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// GETs one answer: its `data` (`None` for a 404, no such trace, and for
    /// `null`), or an error naming the status and Jaeger's messages.
    async fn get<T: DeserializeOwned>(&self, url: url::Url) -> anyhow::Result<Option<T>> {
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status();
        let body = resp.bytes().await.with_context(|| format!("GET {url}"))?;
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let answer: Answer<T> = serde_json::from_slice(&body).with_context(|| {
            format!(
                "GET {url}: {status}, not a query API answer: {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        let errors = answer.errors.unwrap_or_default();
        if !status.is_success() || !errors.is_empty() {
            let msgs: Vec<String> = errors
                .iter()
                .map(|e| format!("{} {}", e.code, e.msg))
                .collect();
            bail!("GET {url}: {status}: {}", msgs.join("; "));
        }
        Ok(answer.data)
    }
}

/// A short account of traces for an error: each one's id and operations.
fn summary(traces: &[Trace]) -> String {
    if traces.is_empty() {
        return "no trace".to_string();
    }
    traces
        .iter()
        .map(|t| format!("{} [{}]", t.trace_id, t.operation_names().join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer of Jaeger v1.76's `/api/traces`, shortened.
    const ANSWER: &str = r#"{"data":[{"traceID":"0af7651916cd43dd8448eb211c80319c","spans":[
        {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331","operationName":"parent-op","references":[],
         "startTime":1796168415329916,"duration":50000,
         "tags":[{"key":"probe.n","type":"int64","value":7},{"key":"probe.b","type":"bool","value":true},{"key":"probe.f","type":"float64","value":1.5}],
         "logs":[{"timestamp":1796168415330916,"fields":[{"key":"event","type":"string","value":"ev1"}]}],"processID":"p1","warnings":null},
        {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7","operationName":"child-op",
         "references":[{"refType":"CHILD_OF","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331"}],
         "startTime":1796168415339916,"duration":20000,"tags":[{"key":"probe.id","type":"string","value":"abc"}],"logs":[],"processID":"p1","warnings":null}],
        "processes":{"p1":{"serviceName":"probe-svc","tags":[{"key":"host.kind","type":"string","value":"test"}]}},"warnings":null}],
        "total":0,"limit":0,"offset":0,"errors":null}"#;

    #[test]
    fn an_answer_reads_as_typed_traces() {
        let answer: Answer<Vec<Trace>> = serde_json::from_str(ANSWER).unwrap();
        let trace = &answer.data.unwrap()[0];
        let parent = trace.span_named("parent-op").unwrap();
        let child = trace.span_named("child-op").unwrap();
        assert_eq!(trace.parent_of(child), Some(parent));
        assert_eq!(trace.children_of(parent), vec![child]);
        assert_eq!(trace.roots(), vec![parent]);
        assert_eq!(parent.tag_i64("probe.n"), Some(7));
        assert_eq!(parent.tag_bool("probe.b"), Some(true));
        assert_eq!(parent.tag_f64("probe.f"), Some(1.5));
        assert_eq!(parent.tag("probe.n").unwrap().value_type, ValueType::Int64);
        assert_eq!(child.tag_str("probe.id"), Some("abc"));
        assert_eq!(parent.duration(), Duration::from_millis(50));
        assert_eq!(parent.logs_named("ev1").len(), 1);
        assert_eq!(trace.service_of(child), Some("probe-svc"));
        assert_eq!(
            find_tag(&trace.process_of(child).unwrap().tags, "host.kind")
                .and_then(KeyValue::as_str),
            Some("test")
        );
    }

    #[test]
    fn urls_keep_the_base_path_and_escape_segments() {
        let client = TracesClient::new("http://127.0.0.1:1/jaeger/").unwrap();
        let url = client
            .url(&["api", "services", "a b/c", "operations"])
            .unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:1/jaeger/api/services/a%20b%2Fc/operations"
        );
    }
}
