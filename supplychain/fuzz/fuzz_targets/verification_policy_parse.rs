//! `verification::CompiledPolicy::parse` on arbitrary bytes (YAML and JSON,
//! PEM keys, regular expressions, trusted roots): never panics, and an
//! accepted policy's digest is the SHA-256 of exactly the bytes read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use supplychain::verification::CompiledPolicy;

fuzz_target!(|data: &[u8]| {
    if let Ok(policy) = CompiledPolicy::parse(data) {
        assert_eq!(policy.digest, supplychain::sha256_digest(data));
    }
});
