//! Reading a resource's journal in the end-to-end tests.

use anyhow::Context;
use operator::api::journal::{JournalEntry, JournalEntryType};

/// The newest entry of type `t` in `journal`, or an error that shows the
/// whole journal.
pub fn newest(journal: &[JournalEntry], t: JournalEntryType) -> anyhow::Result<JournalEntry> {
    journal
        .iter()
        .rev()
        .find(|e| e.type_ == t)
        .cloned()
        .with_context(|| format!("{t:?} in the journal: {journal:?}"))
}
