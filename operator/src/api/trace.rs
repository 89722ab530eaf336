//! `status.trace`: the change under way, as its trace needs it across passes
//! and restarts. A change begins when a read starts and is worth a trace once
//! it finds something to do; it ends at its verdict (`docs/tracing.md`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The five stages a change's trace has a span for; History is their events.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum Stage {
    /// The source resolved, verified and the database read.
    Source,
    /// A plan computed and published.
    Plan,
    /// The plan waits for its approval or its gates.
    Decision,
    /// The Apply.
    Execution,
    /// The proof.
    Verification,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 5] = [
        Stage::Source,
        Stage::Plan,
        Stage::Decision,
        Stage::Execution,
        Stage::Verification,
    ];

    /// As the seed and spans name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Source => "Source",
            Stage::Plan => "Plan",
            Stage::Decision => "Decision",
            Stage::Execution => "Execution",
            Stage::Verification => "Verification",
        }
    }
}

/// A stage that ended before its change was known to be worth a trace: kept
/// until it is, exported then.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldStage {
    /// The stage.
    pub stage: Stage,
    /// How many times the change went back to an earlier stage before it.
    #[serde(default)]
    pub round: i32,
    /// When it began.
    pub started_at: MicroTime,
    /// When it ended.
    pub ended_at: MicroTime,
    /// The Jobs it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 253)))]
    pub jobs: Vec<String>,
}

/// The change under way: its W3C trace id and where it is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeTrace {
    /// The trace's id: 32 lowercase hex digits.
    #[serde(rename = "traceID")]
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub trace_id: String,
    /// When the read that began the change started.
    pub started_at: MicroTime,
    /// The verdict the change started from (`phase/reason`): a read that
    /// ends where it began found nothing to do, and leaves no trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub from: Option<String>,
    /// The stage it is in.
    pub stage: Stage,
    /// How many times it went back to an earlier stage (a plan gone stale).
    #[serde(default)]
    pub round: i32,
    /// When that stage began.
    pub stage_started_at: MicroTime,
    /// The Jobs the stage has run so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 253)))]
    pub jobs: Vec<String>,
    /// The change found something to do and its spans are exported as its
    /// stages end; until then they are held.
    #[serde(default)]
    pub exported: bool,
    /// Stages that ended while it was not yet known to be worth a trace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub held: Vec<HeldStage>,
}
