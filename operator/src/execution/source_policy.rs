//! The manager's side of a source policy (`spec.source.sourcePolicyFrom`)
//! for a Git source: the URL's scheme and host are checked before the
//! Resolve Job is made, so a refused host never sees a fetch. The size of
//! the commit's selected files is checked by the runner (`ptah-runner
//! resolve git --source-policy=…`) before the commit is reported.

use supplychain::source_policy::{Refusal, SourcePolicy};

/// Checks a Git source's URL (scheme and host) against `policy` before the
/// Resolve Job is made. A refusal names the rule, e.g.
/// `rules[0] (git.hosts): host evil.example is not allowed`.
pub fn check_git_host(policy: &SourcePolicy, url: &str) -> Result<(), Refusal> {
    policy.check_git_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> SourcePolicy {
        SourcePolicy::parse(yaml.as_bytes()).expect("policy parses")
    }

    #[test]
    fn an_allowed_host_passes() {
        let p = policy(
            "version: 1\nrules:\n  - git:\n      hosts: [\"git.example.com\", \"*.corp.example\"]\n",
        );
        assert_eq!(
            check_git_host(&p, "https://git.example.com/shop/schema.git"),
            Ok(())
        );
        assert_eq!(
            check_git_host(&p, "ssh://git@a.b.corp.example/x.git"),
            Ok(())
        );
    }

    #[test]
    fn another_host_is_refused_naming_the_rule() {
        let p = policy(
            "version: 1\nrules:\n  - configMap: {}\n  - git:\n      schemes: [\"https\", \"git\"]\n  - git:\n      hosts: [\"git.example.com\"]\n",
        );
        let r = check_git_host(&p, "git://ptah-git.harness:9418/schema.git").unwrap_err();
        assert_eq!(r.rule, Some(2));
        assert_eq!(r.field, "git.hosts");
        assert_eq!(
            r.to_string(),
            "rules[2] (git.hosts): host ptah-git.harness is not allowed"
        );
    }

    #[test]
    fn a_scheme_rule_and_a_policy_without_git_rules_refuse() {
        let p = policy("version: 1\nrules:\n  - git:\n      schemes: [\"https\"]\n");
        let r = check_git_host(&p, "http://git.example.com/x.git").unwrap_err();
        assert_eq!((r.rule, r.field), (Some(0), "git.schemes"));
        let p = policy("version: 1\nrules:\n  - configMap: {}\n");
        let r = check_git_host(&p, "https://git.example.com/x.git").unwrap_err();
        assert_eq!((r.rule, r.field), (None, "git"));
    }

    #[test]
    fn a_host_port_entry_admits_that_port_only() {
        let p = policy("version: 1\nrules:\n  - git:\n      hosts: [\"git.local:8443\"]\n");
        assert_eq!(check_git_host(&p, "https://git.local:8443/x.git"), Ok(()));
        let r = check_git_host(&p, "https://git.local/x.git").unwrap_err();
        assert_eq!(r.field, "git.hosts");
    }
}
