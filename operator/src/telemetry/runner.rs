//! The runner's spans: its step, the Ptah child and the delivery, as
//! `tracing` spans under the Job's `TRACEPARENT` (the OpenTelemetry
//! environment carrier), collected in memory and exported when the step
//! ends. A Job of a change not yet known to be worth a trace
//! (`tracestate: ptah=tentative`) exports only if its plan found a change,
//! so a read that finds nothing leaves no trace here either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

use super::export;
use crate::protocol::result::{ResultDocument, StepOutput};

/// Holds every ended span until the step's end decides.
#[derive(Debug, Default, Clone)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanProcessor for Collect {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if let Ok(mut spans) = self.0.lock() {
            spans.push(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The parent a Job's spans hang under, from `TRACEPARENT`/`TRACESTATE`.
pub fn parent_from(env: impl Fn(&str) -> Option<String>) -> Option<(Context, bool)> {
    let parent = env("TRACEPARENT")?;
    let state = env("TRACESTATE").unwrap_or_default();
    let carrier = HashMap::from([
        ("traceparent".to_string(), parent),
        ("tracestate".to_string(), state),
    ]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    let tentative = sc.trace_state().get("ptah") == Some("tentative");
    Some((cx, tentative))
}

/// Whether a tentative Job's spans are worth exporting: its plan found a
/// change.
pub fn found_a_change(document: &ResultDocument) -> bool {
    matches!(
        &document.result,
        Some(StepOutput::Planned { plan }) if plan.change.is_some()
    )
}

/// The runner's tracing, while its step runs.
pub struct RunnerTrace {
    provider: SdkTracerProvider,
    spans: Collect,
    tentative: bool,
    /// The context the step's span takes as its parent.
    pub parent: Context,
}

impl RunnerTrace {
    /// Starts collecting if the Job carries a trace context and an OTLP
    /// endpoint; installs the `tracing` subscriber that records spans.
    pub fn start() -> Option<RunnerTrace> {
        let env = |k: &str| std::env::var(k).ok();
        if !export::configured(env) {
            return None;
        }
        let (parent, tentative) = parent_from(env)?;
        let spans = Collect::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(spans.clone())
            .build();
        // The runner's own spans and events; of the crates under it (hyper's
        // connection pool, rustls) only warnings, which a reader can act on.
        let ours = tracing_subscriber::filter::Targets::new()
            .with_target(env!("CARGO_CRATE_NAME"), tracing::Level::TRACE)
            .with_target("ptah_runner", tracing::Level::TRACE)
            .with_default(tracing::Level::WARN);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("ptah-runner"))
            .with_filter(ours);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber).ok()?;
        Some(RunnerTrace {
            provider,
            spans,
            tentative,
            parent,
        })
    }

    /// Ends collecting; exports what was collected when the step is worth
    /// it. Errors are said on stderr: the step's outcome stands.
    pub fn finish(self, document: &ResultDocument) {
        let _ = self.provider.force_flush();
        if self.tentative && !found_a_change(document) {
            return;
        }
        let batch = match self.spans.0.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => return,
        };
        if batch.is_empty() {
            return;
        }
        let mut exporter = match export::otlp() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("ptah-runner: traces not exported: {e}");
                return;
            }
        };
        exporter.set_resource(&export::resource("ptah-runner", pod_attributes()));
        let _ = futures::executor::block_on(exporter.export(batch));
        let _ = exporter.shutdown();
    }
}

/// The Pod the runner runs in, from the downward API variables the Job sets:
/// the resource the exporter sends the collected spans under.
fn pod_attributes() -> Vec<KeyValue> {
    let env = |k: &str| std::env::var(k).ok();
    [
        ("PTAH_POD_NAME", "k8s.pod.name"),
        ("PTAH_POD_NAMESPACE", "k8s.namespace.name"),
        ("PTAH_POD_UID", "k8s.pod.uid"),
        ("PTAH_JOB_UID", "k8s.job.uid"),
    ]
    .into_iter()
    .filter_map(|(var, key)| {
        env(var)
            .filter(|v| !v.is_empty())
            .map(|v| KeyValue::new(key, v))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_comes_from_the_environment_carrier() {
        let vars = |parent: &'static str, state: &'static str| {
            move |k: &str| match k {
                "TRACEPARENT" => Some(parent.to_string()),
                "TRACESTATE" => Some(state.to_string()),
                _ => None,
            }
        };
        let (cx, tentative) = parent_from(vars(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ptah=tentative",
        ))
        .expect("a parent");
        assert!(tentative);
        assert_eq!(
            cx.span().span_context().span_id().to_string(),
            "00f067aa0ba902b7"
        );
        let (_, tentative) = parent_from(vars(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ptah=change",
        ))
        .expect("a parent");
        assert!(!tentative);
        assert!(parent_from(vars("garbage", "")).is_none());
        assert!(parent_from(|_: &str| None).is_none());
    }
}
