//! Source policies (`spec.source.sourcePolicyFrom`): rules a ConfigMap or Git
//! source is checked against at Resolve — a ConfigMap's name and size before a
//! snapshot is written, a Git URL's host and scheme before the Resolve Job is
//! made, the size of a commit's selected files before the commit is recorded.
//! A refusal names the rule; the policy is bound by the UID of its ConfigMap
//! and [`policy_digest`] (SHA-256 of the key's exact bytes).
//!
//! # Format, version 1
//!
//! YAML, or JSON (a document whose first non-blank byte is `{`), at most
//! [`MAX_POLICY_BYTES`] bytes. Unknown fields are refused, so a misspelt limit
//! never passes silently. The JSON Schema is [`json_schema`].
//!
//! ```yaml
//! version: 1
//! rules:
//!   - configMap:
//!       names: ["schema-*", "migrations"]  # glob: `*` any run, `?` one character
//!       maxSize: 524288                    # bytes of the selected files
//!       maxFiles: 200
//!   - git:
//!       hosts: ["git.example.com", "*.corp.example", "git.local:8443"]
//!       schemes: ["https", "ssh"]
//!       maxContentSize: 10485760           # bytes of the commit's selected files
//!       maxFiles: 2000
//! ```
//!
//! Semantics:
//!
//! * Each rule holds exactly one of `configMap` or `git`, and applies to sources
//!   of that kind. A source must satisfy **every** rule of its kind; a field
//!   left out imposes nothing.
//! * A policy with no rule of a source's kind refuses that kind altogether
//!   (fail closed): a policy written for Git sources does not admit ConfigMaps.
//! * `names`: the ConfigMap's name must match one pattern (whole name).
//! * `hosts`: the URL's host must match one entry — `host` (any port),
//!   `host:port` (that port only; the default port of the scheme is not
//!   implied), or `*.domain` (any subdomain of `domain`, at any depth, not
//!   `domain` itself). Case-insensitive. A `file://` URL has no host, so any
//!   `hosts` rule refuses it.
//! * `schemes`: the URL's scheme must be one of `https`, `http`, `ssh`, `git`,
//!   `file`.
//! * Sizes and counts are inclusive maxima.
//!
//! A refusal reads `rules[<index>] (<kind>.<field>): <why>`, e.g.
//! `rules[1] (git.hosts): host evil.example is not allowed`.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Largest policy, in bytes.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;
/// The one version this format has.
pub const VERSION: u32 = 1;
/// Most rules in a policy.
const MAX_RULES: usize = 256;
/// Most patterns in a list.
const MAX_PATTERNS: usize = 256;

/// A source policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourcePolicy {
    /// Format version: 1.
    pub version: u32,
    /// The rules; a source must satisfy every rule of its kind.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// One rule: exactly one of `configMap` or `git`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Rule {
    /// A rule for ConfigMap sources.
    ConfigMap(ConfigMapRule),
    /// A rule for Git sources.
    Git(GitRule),
}

/// What a ConfigMap source must satisfy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapRule {
    /// Name patterns (`*` any run of characters, `?` one); the name must match
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// Largest total size of the selected files, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    /// Most selected files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
}

/// What a Git source must satisfy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRule {
    /// Allowed hosts: `host`, `host:port` or `*.domain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Allowed URL schemes: `https`, `http`, `ssh`, `git`, `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemes: Option<Vec<String>>,
    /// Largest total size of a commit's selected files, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_content_size: Option<u64>,
    /// Most selected files of a commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
}

/// Why a policy does not load.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Too large.
    #[error("source policy is {len} bytes, more than {MAX_POLICY_BYTES}")]
    TooLarge { len: usize },
    /// Not UTF-8.
    #[error("source policy is not UTF-8")]
    NotUtf8,
    /// Not a document of this format.
    #[error("source policy does not parse: {0}")]
    Syntax(String),
    /// Another version.
    #[error("version: {0} is not supported (only 1)")]
    Version(u32),
    /// A field holds a bad value.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

/// A source refused by a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Refusal {
    /// Index of the rule, or `None` when no rule of the kind exists.
    pub rule: Option<usize>,
    /// `configMap.names`, `git.hosts`, …, or the kind alone.
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            Some(i) => write!(f, "rules[{i}] ({}): {}", self.field, self.reason),
            None => write!(f, "rules ({}): {}", self.field, self.reason),
        }
    }
}

/// `sha256:<hex>` of the policy's exact bytes: what a plan binds.
pub fn policy_digest(bytes: &[u8]) -> String {
    crate::sha256_digest(bytes)
}

/// The JSON Schema of the format.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(SourcePolicy)).unwrap_or_default()
}

const SCHEMES: &[&str] = &["https", "http", "ssh", "git", "file"];

impl SourcePolicy {
    /// Parses and checks a policy (YAML or JSON). Never panics.
    pub fn parse(bytes: &[u8]) -> Result<SourcePolicy, PolicyError> {
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge { len: bytes.len() });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| PolicyError::NotUtf8)?;
        let policy: SourcePolicy = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| PolicyError::Syntax(e.to_string()))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Syntax(e.to_string()))?
        };
        policy.validate()?;
        Ok(policy)
    }

    /// Checks the values serde cannot.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.version != VERSION {
            return Err(PolicyError::Version(self.version));
        }
        let invalid = |field: String, reason: &str| PolicyError::Invalid {
            field,
            reason: reason.to_string(),
        };
        if self.rules.len() > MAX_RULES {
            return Err(invalid("rules".into(), "more than 256 rules"));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            match rule {
                Rule::ConfigMap(r) => {
                    for (j, p) in list(&r.names, &format!("rules[{i}].configMap.names"))?
                        .iter()
                        .enumerate()
                    {
                        let ok = !p.is_empty()
                            && p.len() <= 253
                            && p.bytes().all(|b| {
                                b.is_ascii_lowercase()
                                    || b.is_ascii_digit()
                                    || matches!(b, b'-' | b'.' | b'*' | b'?')
                            });
                        if !ok {
                            return Err(invalid(
                                format!("rules[{i}].configMap.names[{j}]"),
                                "a pattern holds 1 to 253 of a-z, 0-9, '-', '.', '*', '?'",
                            ));
                        }
                    }
                }
                Rule::Git(r) => {
                    for (j, h) in list(&r.hosts, &format!("rules[{i}].git.hosts"))?
                        .iter()
                        .enumerate()
                    {
                        if !valid_host_pattern(h) {
                            return Err(invalid(
                                format!("rules[{i}].git.hosts[{j}]"),
                                "expected a lowercase host, host:port or *.domain",
                            ));
                        }
                    }
                    for (j, s) in list(&r.schemes, &format!("rules[{i}].git.schemes"))?
                        .iter()
                        .enumerate()
                    {
                        if !SCHEMES.contains(&s.as_str()) {
                            return Err(invalid(
                                format!("rules[{i}].git.schemes[{j}]"),
                                "expected one of https, http, ssh, git, file",
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn rules_of<'a, T>(
        &'a self,
        pick: impl Fn(&'a Rule) -> Option<&'a T>,
        kind: &'static str,
    ) -> Result<Vec<(usize, &'a T)>, Refusal> {
        let rules: Vec<_> = self
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| pick(r).map(|r| (i, r)))
            .collect();
        if rules.is_empty() {
            return Err(Refusal {
                rule: None,
                field: kind,
                reason: format!("the policy has no {kind} rule, so it admits no {kind} source"),
            });
        }
        Ok(rules)
    }

    fn config_map_rules(&self) -> Result<Vec<(usize, &ConfigMapRule)>, Refusal> {
        self.rules_of(
            |r| match r {
                Rule::ConfigMap(c) => Some(c),
                Rule::Git(_) => None,
            },
            "configMap",
        )
    }

    fn git_rules(&self) -> Result<Vec<(usize, &GitRule)>, Refusal> {
        self.rules_of(
            |r| match r {
                Rule::Git(g) => Some(g),
                Rule::ConfigMap(_) => None,
            },
            "git",
        )
    }

    /// Checks a ConfigMap source before its snapshot is written: its name, and
    /// the total size and number of the selected files.
    pub fn check_config_map(&self, name: &str, size: u64, files: u64) -> Result<(), Refusal> {
        for (i, r) in self.config_map_rules()? {
            if let Some(names) = &r.names
                && !names.iter().any(|p| glob(p.as_bytes(), name.as_bytes()))
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "configMap.names",
                    reason: format!("ConfigMap name {name} matches no allowed pattern"),
                });
            }
            if let Some(max) = r.max_size
                && size > max
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "configMap.maxSize",
                    reason: format!("the selected files hold {size} bytes, more than {max}"),
                });
            }
            if let Some(max) = r.max_files
                && files > max
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "configMap.maxFiles",
                    reason: format!("{files} files are selected, more than {max}"),
                });
            }
        }
        Ok(())
    }

    /// Checks a Git URL before the Resolve Job is made: its scheme and host.
    pub fn check_git_url(&self, url: &str) -> Result<(), Refusal> {
        let rules = self.git_rules()?;
        let parsed = GitUrl::parse(url);
        for (i, r) in rules {
            let Some(u) = &parsed else {
                return Err(Refusal {
                    rule: Some(i),
                    field: "git",
                    reason: "the URL is not scheme://host/path".into(),
                });
            };
            if let Some(schemes) = &r.schemes
                && !schemes.contains(&u.scheme)
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "git.schemes",
                    reason: format!("scheme {} is not allowed", u.scheme),
                });
            }
            if let Some(hosts) = &r.hosts
                && !hosts
                    .iter()
                    .any(|h| host_matches(h, &u.host, u.port.as_deref()))
            {
                let shown = if u.host.is_empty() { "(none)" } else { &u.host };
                return Err(Refusal {
                    rule: Some(i),
                    field: "git.hosts",
                    reason: format!("host {shown} is not allowed"),
                });
            }
        }
        Ok(())
    }

    /// Checks a commit's selected files before the commit is recorded.
    pub fn check_git_content(&self, size: u64, files: u64) -> Result<(), Refusal> {
        for (i, r) in self.git_rules()? {
            if let Some(max) = r.max_content_size
                && size > max
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "git.maxContentSize",
                    reason: format!(
                        "the commit's selected files hold {size} bytes, more than {max}"
                    ),
                });
            }
            if let Some(max) = r.max_files
                && files > max
            {
                return Err(Refusal {
                    rule: Some(i),
                    field: "git.maxFiles",
                    reason: format!("{files} files are selected, more than {max}"),
                });
            }
        }
        Ok(())
    }
}

fn list<'a>(v: &'a Option<Vec<String>>, field: &str) -> Result<&'a [String], PolicyError> {
    let v = v.as_deref().unwrap_or_default();
    if v.len() > MAX_PATTERNS {
        return Err(PolicyError::Invalid {
            field: field.to_string(),
            reason: "more than 256 entries".into(),
        });
    }
    Ok(v)
}

fn valid_host_pattern(p: &str) -> bool {
    let (host, port) = match p.rsplit_once(':') {
        Some((h, port)) => (h, Some(port)),
        None => (p, None),
    };
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    let host = host.strip_prefix("*.").unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn host_matches(pattern: &str, host: &str, port: Option<&str>) -> bool {
    if host.is_empty() {
        return false;
    }
    let (p_host, p_port) = match pattern.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (pattern, None),
    };
    if let Some(p_port) = p_port
        && Some(p_port) != port
    {
        return false;
    }
    match p_host.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        None => host == p_host,
    }
}

/// Scheme, host and port of a Git URL (`scheme://[user@]host[:port]/…`).
#[derive(Debug, PartialEq, Eq)]
struct GitUrl {
    scheme: String,
    host: String,
    port: Option<String>,
}

impl GitUrl {
    fn parse(url: &str) -> Option<GitUrl> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+')
        {
            return None;
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']')?;
            (format!("[{h}]"), after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        Some(GitUrl {
            scheme,
            host: host.to_ascii_lowercase().trim_end_matches('.').to_string(),
            port: port.filter(|p| !p.is_empty()).map(str::to_string),
        })
    }
}

/// Whole-string glob: `*` any run of bytes (also empty), `?` one byte.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if *c == b'?' || *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
version: 1
rules:
  - configMap:
      names: ["schema-*", "migrations"]
      maxSize: 100
  - configMap:
      maxFiles: 3
  - git:
      hosts: ["git.example.com", "*.corp.example", "git.local:8443"]
      schemes: ["https", "ssh"]
      maxContentSize: 1000
"#;

    fn policy() -> SourcePolicy {
        SourcePolicy::parse(POLICY.as_bytes()).unwrap()
    }

    #[test]
    fn config_map_rules_name_the_rule() {
        let p = policy();
        p.check_config_map("schema-app", 100, 3).unwrap();
        p.check_config_map("migrations", 0, 0).unwrap();
        assert_eq!(
            p.check_config_map("other", 1, 1).unwrap_err().to_string(),
            "rules[0] (configMap.names): ConfigMap name other matches no allowed pattern"
        );
        assert_eq!(
            p.check_config_map("schema-app", 101, 1)
                .unwrap_err()
                .to_string(),
            "rules[0] (configMap.maxSize): the selected files hold 101 bytes, more than 100"
        );
        assert!(
            p.check_config_map("schema-app", 1, 4)
                .unwrap_err()
                .to_string()
                .starts_with("rules[1] (configMap.maxFiles)")
        );
    }

    #[test]
    fn git_rules_name_the_rule() {
        let p = policy();
        for ok in [
            "https://git.example.com/org/repo.git",
            "https://GIT.example.com:443/org/repo.git",
            "ssh://git@a.corp.example/repo",
            "ssh://git@a.b.corp.example:22/repo",
            "https://git.local:8443/x",
        ] {
            p.check_git_url(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let refused = [
            (
                "https://example.com/repo",
                "rules[2] (git.hosts): host example.com is not allowed",
            ),
            (
                "https://corp.example/repo",
                "rules[2] (git.hosts): host corp.example is not allowed",
            ),
            (
                "https://evilcorp.example/r",
                "rules[2] (git.hosts): host evilcorp.example is not allowed",
            ),
            (
                "https://git.local/x",
                "rules[2] (git.hosts): host git.local is not allowed",
            ),
            (
                "https://git.example.com.evil.io/x",
                "rules[2] (git.hosts): host git.example.com.evil.io is not allowed",
            ),
            (
                "http://git.example.com/x",
                "rules[2] (git.schemes): scheme http is not allowed",
            ),
            (
                "file:///tmp/repo",
                "rules[2] (git.schemes): scheme file is not allowed",
            ),
            (
                "git.example.com:org/repo",
                "rules[2] (git): the URL is not scheme://host/path",
            ),
        ];
        for (url, want) in refused {
            assert_eq!(p.check_git_url(url).unwrap_err().to_string(), want, "{url}");
        }
        p.check_git_content(1000, 10).unwrap();
        assert_eq!(
            p.check_git_content(1001, 10).unwrap_err().to_string(),
            "rules[2] (git.maxContentSize): the commit's selected files hold 1001 bytes, more than 1000"
        );
    }

    #[test]
    fn a_kind_without_rules_is_refused() {
        let p = SourcePolicy::parse(b"{\"version\":1,\"rules\":[{\"git\":{}}]}").unwrap();
        p.check_git_url("file:///tmp/x").unwrap();
        assert_eq!(
            p.check_config_map("a", 0, 0).unwrap_err().to_string(),
            "rules (configMap): the policy has no configMap rule, so it admits no configMap source"
        );
        let hosts = SourcePolicy::parse(b"version: 1\nrules:\n- git: {hosts: [a.b]}\n").unwrap();
        assert_eq!(
            hosts
                .check_git_url("file:///tmp/x")
                .unwrap_err()
                .to_string(),
            "rules[0] (git.hosts): host (none) is not allowed"
        );
    }

    #[test]
    fn bad_policies_are_refused_naming_the_field() {
        let cases: &[(&str, &str)] = &[
            ("version: 2\n", "version: 2"),
            ("rules: []\n", "does not parse"),
            (
                "version: 1\nrules:\n- git: {maxsize: 1}\n",
                "does not parse",
            ),
            (
                "version: 1\nrules:\n- git: {}\n  configMap: {}\n",
                "does not parse",
            ),
            ("version: 1\nrules:\n- svn: {}\n", "does not parse"),
            (
                "version: 1\nrules:\n- git: {hosts: ['Git.Example.com']}\n",
                "rules[0].git.hosts[0]",
            ),
            (
                "version: 1\nrules:\n- git: {hosts: ['a.*.b']}\n",
                "rules[0].git.hosts[0]",
            ),
            (
                "version: 1\nrules:\n- git: {schemes: [ftp]}\n",
                "rules[0].git.schemes[0]",
            ),
            (
                "version: 1\nrules:\n- configMap: {names: ['A/B']}\n",
                "rules[0].configMap.names[0]",
            ),
            (
                "version: 1\nrules:\n- configMap: {maxSize: -1}\n",
                "does not parse",
            ),
            ("{\"version\": 1, \"rules\": [", "does not parse"),
            ("\u{0}\u{1}[[[[", "does not parse"),
        ];
        for (input, want) in cases {
            let err = SourcePolicy::parse(input.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{input:?}: {err}");
        }
        assert!(matches!(
            SourcePolicy::parse(&[0xff]),
            Err(PolicyError::NotUtf8)
        ));
        let big = vec![b' '; MAX_POLICY_BYTES + 1];
        assert!(matches!(
            SourcePolicy::parse(&big),
            Err(PolicyError::TooLarge { .. })
        ));
    }

    #[test]
    fn json_and_yaml_are_the_same_policy_and_the_digest_is_of_the_bytes() {
        let json = serde_json::to_vec(&policy()).unwrap();
        assert_eq!(SourcePolicy::parse(&json).unwrap(), policy());
        assert_ne!(policy_digest(&json), policy_digest(POLICY.as_bytes()));
        assert_eq!(
            policy_digest(b"version: 1\n"),
            "sha256:09bfcc6a14b83e2192b8673677725c84883ee9cd0c70e45c9ec09daa8f2b2847"
        );
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack() {
        for open in ["[", "{a: ", "- "] {
            let deep = open.repeat(MAX_POLICY_BYTES / open.len());
            assert!(SourcePolicy::parse(deep.as_bytes()).is_err());
        }
        let deep = format!("{}{}", "{\"a\":".repeat(50_000), "1");
        assert!(SourcePolicy::parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn schema_is_checked_in() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/source_policy_v1.schema.json"
        );
        let mut text = serde_json::to_string_pretty(&json_schema()).unwrap();
        text.push('\n');
        if std::env::var_os("PTAH_BLESS").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let golden = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            golden, text,
            "rerun with PTAH_BLESS=1 after a format change"
        );
    }

    #[test]
    fn schema_describes_the_format() {
        let schema = json_schema();
        let text = schema.to_string();
        for word in [
            "version",
            "rules",
            "configMap",
            "maxContentSize",
            "hosts",
            "schemes",
        ] {
            assert!(text.contains(word), "{word} missing from {text}");
        }
    }

    #[test]
    fn the_example_policy_parses() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/06-schema-source-policy.yaml"
        );
        let Ok(text) = std::fs::read_to_string(path) else {
            return; // the crate packaged alone has no examples
        };
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let policy = docs
            .iter()
            .find_map(|d| d.pointer("/data/policy.yaml").and_then(|v| v.as_str()))
            .expect("the example holds a policy.yaml key");
        let p = SourcePolicy::parse(policy.as_bytes()).unwrap();
        p.check_config_map("accounts-schema", 100, 1).unwrap();
        assert!(p.check_config_map("payments-schema", 100, 1).is_err());
        p.check_git_url("https://git.example.com/org/db.git")
            .unwrap();
    }

    #[test]
    fn glob_matches_whole_names() {
        assert!(glob(b"schema-*", b"schema-"));
        assert!(glob(b"schema-*", b"schema-a-b"));
        assert!(glob(b"*-db", b"app-db"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"*a*b*", b"xxaxxbxx"));
        assert!(!glob(b"schema-*", b"xschema-a"));
        assert!(!glob(b"a?c", b"ac"));
        assert!(!glob(b"abc", b"abcd"));
        assert!(glob(b"*", b""));
        assert!(!glob(b"", b"a"));
    }
}
