//! What a schema's policy makes of a plan, pure: the protected table it
//! changes, and the hold
//! (`ProtectedTable`, `DestructiveChangesDisabled`, `ApplyDisabled`) that
//! keeps it from running. The Planning verdict and a preview
//! (`crate::lifecycle::preview`) read the same rules.

use crate::api::common::{ApplyPolicy, SchemaPolicy};
use crate::api::condition::Reason;

/// What holds a plan back, as its reason and a message naming the table or
/// statement and the way out; `None` when the policy lets it wait for an
/// approval or run. `subject` names the plan (`plan orders-1a2b…`), `see`
/// says where its statements are shown.
pub fn hold(
    policy: &SchemaPolicy,
    subject: &str,
    destructive: bool,
    protected_table: Option<&str>,
    destructive_statement: Option<&str>,
    see: &str,
) -> Option<(Reason, String)> {
    if let Some(table) = protected_table {
        Some((
            Reason::ProtectedTable,
            format!(
                "{subject} changes {table}, which spec.policy.protectedTables protects: \
                 nothing is applied while it does; change the source, or take the \
                 table off the list; {see}"
            ),
        ))
    } else if destructive && !policy.allow_destructive {
        let what = destructive_statement
            .map(|s| format!(" ({})", short_statement(s)))
            .unwrap_or_default();
        Some((
            Reason::DestructiveChangesDisabled,
            format!(
                "{subject} is destructive{what} and spec.policy.allowDestructive is false: \
                 change the source, or set allowDestructive to true to let it run \
                 under spec.policy.apply; {see}"
            ),
        ))
    } else if policy.apply == ApplyPolicy::Never {
        Some((
            Reason::ApplyDisabled,
            format!(
                "{subject} waits and spec.policy.apply is Never: nothing is applied; \
                 set it to OnApproval or Always to apply; {see}"
            ),
        ))
    } else {
        None
    }
}

/// Whether the policy applies a plan without an approval: `apply: Always`
/// and nothing destructive or privileged in it.
pub fn automatic(policy: &SchemaPolicy, destructive: bool, privileged: bool) -> bool {
    policy.apply == ApplyPolicy::Always && !destructive && !privileged
}

/// The first of `tables` (a plan's) that one of `protected` names: names
/// compare without case, and an unqualified protected name matches it in any
/// schema.
pub fn protected(protected: &[String], tables: &[String]) -> Option<String> {
    tables
        .iter()
        .find(|table| {
            let t = table.to_ascii_lowercase();
            let bare = t.rsplit('.').next().unwrap_or(&t).to_string();
            protected.iter().any(|p| {
                let p = p.to_ascii_lowercase();
                p == t || (!p.contains('.') && p == bare)
            })
        })
        .cloned()
}

/// A statement on one line, cut to 120 characters, for a condition message.
fn short_statement(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::protected;

    #[test]
    fn a_protected_table_is_matched_qualified_or_bare_without_case() {
        let list = vec!["public.customers".to_string(), "audit".to_string()];
        let found = |tables: &[&str]| {
            let tables: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
            protected(&list, &tables)
        };
        assert_eq!(
            found(&["PUBLIC.Customers"]).as_deref(),
            Some("PUBLIC.Customers")
        );
        assert_eq!(
            found(&["public.orders", "billing.audit"]).as_deref(),
            Some("billing.audit")
        );
        assert_eq!(found(&["billing.customers"]), None);
        assert_eq!(found(&["public.orders"]), None);
        assert_eq!(protected(&[], &["public.orders".into()]), None);
    }
}
