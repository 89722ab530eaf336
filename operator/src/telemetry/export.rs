//! Sending spans over OTLP/HTTP, configured by the standard `OTEL_*`
//! variables and off when no endpoint is set. The manager's stage spans are
//! built with the ids and times `change.rs` fixed; the runner's come from
//! `tracing` through `tracing-opentelemetry` (`runner.rs`).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::jiff::Timestamp;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanExporter, SpanLinks, SpanProcessor,
};

use super::change::SpanRecord;

/// The variables that turn export on, the traces-only one first.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether the environment asks for traces: an OTLP endpoint is set, and
/// neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says no.
pub fn configured(env: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let none = env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    ENDPOINT_VARS.iter().any(|k| set(k)) && !disabled && !none
}

/// The endpoint variables Jobs are given so that their spans go where the
/// manager's go.
pub fn endpoint_env(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    ENDPOINT_VARS
        .iter()
        .chain(
            [
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ]
            .iter(),
        )
        .filter_map(|k| env(k).map(|v| (k.to_string(), v)))
        .collect()
}

/// The share of changes traced, from `OTEL_TRACES_SAMPLER` and its argument:
/// decided once per trace id, so a change is traced whole or not at all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling(f64);

impl Sampling {
    /// From the environment; every change when unset.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let ratio = || {
            env("OTEL_TRACES_SAMPLER_ARG")
                .and_then(|a| a.trim().parse::<f64>().ok())
                .filter(|r| (0.0..=1.0).contains(r))
                .unwrap_or(1.0)
        };
        Sampling(match env("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            Some("always_off" | "parentbased_always_off") => 0.0,
            Some("traceidratio" | "parentbased_traceidratio") => ratio(),
            _ => 1.0,
        })
    }

    /// Whether the trace is sampled: its id's low 8 bytes below the ratio.
    pub fn sampled(self, trace_id: &[u8; 16]) -> bool {
        if self.0 >= 1.0 {
            return true;
        }
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        let bound = (self.0 * (u64::MAX >> 1) as f64) as u64;
        (u64::from_be_bytes(low) >> 1) < bound
    }
}

/// Wraps an exporter so a backend that stops answering is said once, and
/// its return once; the manager goes on either way.
#[derive(Debug)]
pub struct SayOnce<E> {
    inner: E,
    failing: AtomicBool,
}

impl<E> SayOnce<E> {
    /// Wraps `inner`.
    pub fn new(inner: E) -> Self {
        SayOnce {
            inner,
            failing: AtomicBool::new(false),
        }
    }
}

impl<E: SpanExporter> SpanExporter for SayOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot export traces; going on without them until the backend answers");
                }
            }
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("traces are exported again");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP/HTTP exporter the `OTEL_EXPORTER_OTLP_*` variables configure.
pub fn otlp() -> Result<SayOnce<opentelemetry_otlp::SpanExporter>, String> {
    use opentelemetry_otlp::WithExportConfig;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map(SayOnce::new)
        .map_err(|e| format!("the OTLP exporter: {e}"))
}

/// The resource of a service: `service.name` unless `OTEL_SERVICE_NAME`
/// names another, plus `OTEL_RESOURCE_ATTRIBUTES` and `extra`.
pub fn resource(service: &str, extra: Vec<KeyValue>) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| service.to_string());
    Resource::builder()
        .with_service_name(named)
        .with_attributes(extra)
        .build()
}

fn system_time(t: Timestamp) -> SystemTime {
    SystemTime::from(t)
}

/// The manager's spans: built as fixed, sent in batches by the SDK's own
/// thread. Off (a no-op) when the environment sets no endpoint.
#[derive(Debug)]
pub struct Spans {
    processor: Option<BatchSpanProcessor>,
    sampling: Sampling,
    scope: InstrumentationScope,
}

impl Default for Spans {
    fn default() -> Self {
        Spans::off()
    }
}

impl Spans {
    /// Nothing is exported.
    pub fn off() -> Self {
        Spans {
            processor: None,
            sampling: Sampling(1.0),
            scope: InstrumentationScope::builder("ptah-operator").build(),
        }
    }

    /// As the process environment says.
    pub fn from_env(service: &str) -> Result<Self, String> {
        let env = |k: &str| std::env::var(k).ok();
        if !configured(env) {
            return Ok(Spans::off());
        }
        Ok(Spans::to(otlp()?, service, Sampling::from_env(env)))
    }

    /// To `exporter` (tests give an in-memory one).
    pub fn to<E: SpanExporter + 'static>(exporter: E, service: &str, sampling: Sampling) -> Self {
        // A change ends a few spans at a time: send them within a second
        // (unless OTEL_BSP_SCHEDULE_DELAY says otherwise).
        let mut config = opentelemetry_sdk::trace::BatchConfigBuilder::default();
        if std::env::var_os("OTEL_BSP_SCHEDULE_DELAY").is_none() {
            config = config.with_scheduled_delay(Duration::from_secs(1));
        }
        let mut processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(config.build())
            .build();
        processor.set_resource(&resource(service, Vec::new()));
        Spans {
            processor: Some(processor),
            sampling,
            scope: InstrumentationScope::builder("ptah-operator")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        }
    }

    /// Whether spans are exported at all.
    pub fn enabled(&self) -> bool {
        self.processor.is_some()
    }

    /// Whether the change of this trace id is traced.
    pub fn sampled(&self, trace_id: &[u8; 16]) -> bool {
        self.enabled() && self.sampling.sampled(trace_id)
    }

    /// Hands the spans to the batch; never blocks on the backend.
    pub fn export(&self, records: Vec<SpanRecord>) {
        let Some(processor) = &self.processor else {
            return;
        };
        for r in records {
            if !self.sampling.sampled(&r.trace_id) {
                continue;
            }
            processor.on_end(self.span_data(r));
        }
    }

    /// Sends what is batched (tests, shutdown).
    pub fn flush(&self) {
        if let Some(p) = &self.processor {
            let _ = p.force_flush();
        }
    }

    fn span_data(&self, r: SpanRecord) -> SpanData {
        let trace_id = TraceId::from_bytes(r.trace_id);
        let context = SpanContext::new(
            trace_id,
            SpanId::from_bytes(r.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let events = r
            .events
            .into_iter()
            .map(|e| {
                opentelemetry::trace::Event::new(
                    e.name,
                    system_time(e.time),
                    e.attributes
                        .into_iter()
                        .map(|(k, v)| KeyValue::new(k, v))
                        .collect(),
                    0,
                )
            })
            .collect();
        SpanData {
            span_context: context,
            parent_span_id: r.parent.map(SpanId::from_bytes).unwrap_or(SpanId::INVALID),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(r.name),
            start_time: system_time(r.start),
            end_time: system_time(r.end),
            attributes: r
                .attributes
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v))
                .collect(),
            dropped_attributes_count: 0,
            events: {
                // Non-exhaustive, and filled only by the SDK's own spans.
                let mut e = SpanEvents::default();
                e.events = events;
                e
            },
            links: SpanLinks::default(),
            status: if r.error {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        }
    }
}

impl Drop for Spans {
    fn drop(&mut self) {
        if let Some(p) = &self.processor {
            let _ = p.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::change::EventRecord;
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn export_is_on_only_where_an_endpoint_is_set_and_nothing_says_no() {
        assert!(!configured(env(&[])));
        assert!(configured(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://c:4318"
        )])));
        assert!(configured(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )])));
        assert!(!configured(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none")
        ])));
        assert!(!configured(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true")
        ])));
        assert!(!configured(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
    }

    #[test]
    fn jobs_get_the_endpoint_variables_the_manager_has() {
        let vars = endpoint_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=secret"),
        ]));
        // Headers may carry credentials: a Job gets none.
        assert_eq!(
            vars,
            [(
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(),
                "http://c:4318".to_string()
            )]
        );
    }

    #[test]
    fn sampling_is_decided_per_trace_id() {
        let all = Sampling::from_env(env(&[]));
        assert!(all.sampled(&[0xff; 16]));
        let none = Sampling::from_env(env(&[("OTEL_TRACES_SAMPLER", "always_off")]));
        assert!(!none.sampled(&[0; 16]));
        let half = Sampling::from_env(env(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ]));
        assert!(half.sampled(&[0; 16]));
        assert!(!half.sampled(&[0xff; 16]));
    }

    fn record(name: &str, span: u8, parent: Option<u8>) -> SpanRecord {
        let t = Timestamp::from_second(1_800_000_000).expect("time");
        SpanRecord {
            trace_id: [3; 16],
            span_id: [span; 8],
            parent: parent.map(|p| [p; 8]),
            name: name.into(),
            start: t,
            end: t + std::time::Duration::from_secs(41),
            attributes: vec![("ptah.stage", name.into())],
            events: vec![EventRecord {
                name: "ApplyFinished".into(),
                time: t,
                attributes: vec![],
            }],
            error: false,
        }
    }

    #[test]
    fn spans_are_exported_with_the_ids_and_times_they_were_given() {
        let memory = InMemorySpanExporter::default();
        let spans = Spans::to(memory.clone(), "ptah-operator", Sampling(1.0));
        spans.export(vec![
            record("Execution", 5, Some(1)),
            record("change", 1, None),
        ]);
        spans.flush();
        let got = memory.get_finished_spans().expect("spans");
        assert_eq!(got.len(), 2);
        let execution = got.iter().find(|s| s.name == "Execution").expect("span");
        assert_eq!(
            execution.span_context.trace_id(),
            TraceId::from_bytes([3; 16])
        );
        assert_eq!(execution.span_context.span_id(), SpanId::from_bytes([5; 8]));
        assert_eq!(execution.parent_span_id, SpanId::from_bytes([1; 8]));
        assert_eq!(
            execution
                .end_time
                .duration_since(execution.start_time)
                .expect("order"),
            Duration::from_secs(41)
        );
        assert_eq!(execution.events.len(), 1);
        let root = got.iter().find(|s| s.name == "change").expect("root");
        assert_eq!(root.parent_span_id, SpanId::INVALID);
    }

    #[test]
    fn off_exports_nothing_and_samples_nothing() {
        let spans = Spans::off();
        assert!(!spans.enabled());
        assert!(!spans.sampled(&[0; 16]));
        spans.export(vec![record("Plan", 2, Some(1))]);
        spans.flush();
    }

    /// Fails until told otherwise.
    #[derive(Debug, Default)]
    struct Down(std::sync::Arc<AtomicBool>);

    impl SpanExporter for Down {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            if self.0.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "down".into(),
                ))
            }
        }
    }

    #[test]
    fn a_backend_that_is_down_is_noticed_once_and_its_return_too() {
        let up = std::sync::Arc::new(AtomicBool::new(false));
        let e = SayOnce::new(Down(up.clone()));
        let run = |e: &SayOnce<Down>| futures::executor::block_on(e.export(Vec::new()));
        assert!(run(&e).is_err());
        assert!(e.failing.load(Ordering::Relaxed));
        assert!(run(&e).is_err());
        up.store(true, Ordering::Relaxed);
        assert!(run(&e).is_ok());
        assert!(!e.failing.load(Ordering::Relaxed));
    }
}
