//! `Manifest::parse` on arbitrary bytes: never panics, and whatever it accepts
//! re-encodes to exactly the input bytes (the format has one spelling per file
//! set, so a second spelling that parses would let two manifests share a file
//! set but not a digest).
#![no_main]

use libfuzzer_sys::fuzz_target;
use supplychain::manifest::{Limits, Manifest};

fuzz_target!(|data: &[u8]| {
    // Small limits as well as the defaults: the file-count and size bounds are
    // reachable by short inputs only when they are small.
    let small = Limits {
        max_files: 4,
        max_total_bytes: 1024,
    };
    for limits in [Limits::default(), small] {
        if let Ok(manifest) = Manifest::parse(data, &limits) {
            let bytes = manifest.to_bytes();
            assert!(
                bytes == data,
                "a parsed manifest does not re-encode to its input"
            );
            assert!(manifest.len() <= limits.max_files);
            assert!(manifest.total_size() <= limits.max_total_bytes);
            // What is accepted once is accepted again, as the same manifest.
            assert_eq!(Manifest::parse(&bytes, &limits).as_ref(), Ok(&manifest));
            assert_eq!(manifest.digest(), supplychain::sha256_digest(data));
        }
    }
});
