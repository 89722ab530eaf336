//! `SourcePolicy::parse` on arbitrary bytes (YAML and JSON): never panics, and
//! an accepted policy can be checked against any source without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use supplychain::source_policy::{MAX_POLICY_BYTES, SourcePolicy};

fuzz_target!(|data: &[u8]| {
    if let Ok(policy) = SourcePolicy::parse(data) {
        assert!(policy.validate().is_ok());
        // Exercise the checks an accepted policy is used for.
        let _ = policy.check_config_map("schema-accounts", 1024, 3);
        let _ = policy.check_git_url("https://git.example.com:8443/org/db.git");
        let _ = policy.check_git_url("ssh://git@[::1]:22/db.git");
        let _ = policy.check_git_url("file:///srv/db.git");
        let _ = policy.check_git_content(u64::MAX, u64::MAX);
        // A policy re-encoded as JSON is the same policy (JSON may be longer
        // than the YAML it came from, so only within the size bound).
        if let Ok(json) = serde_json::to_vec(&policy)
            && json.len() <= MAX_POLICY_BYTES
        {
            assert_eq!(SourcePolicy::parse(&json).as_ref(), Ok(&policy));
        }
    }
});
