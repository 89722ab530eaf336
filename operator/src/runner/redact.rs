//! Redaction of what Ptah writes before any of it leaves the Pod: a message
//! may carry a URL with its password (Ptah masks its own, a driver's error
//! may not), a `password=` pair of a DSN, or the database URL itself.

use std::sync::OnceLock;

/// The longest message a result carries.
pub const MAX_MESSAGE: usize = 1024;

/// Secrets the runner knows of (the database URL and its password), set
/// once before the first child starts.
static KNOWN: OnceLock<Vec<String>> = OnceLock::new();

/// Remembers `url` (and its password) as secrets every message is cleaned
/// of. Later calls are ignored: one operation has one database.
pub fn remember_url(url: &str) {
    let mut secrets = vec![url.to_string()];
    if let Ok(parsed) = url::Url::parse(url)
        && let Some(p) = parsed.password()
    {
        secrets.push(p.to_string());
        secrets.push(
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned(),
        );
    }
    secrets.retain(|s| s.len() >= 4);
    let _ = KNOWN.set(secrets);
}

/// `text` with every known secret, every URL password and every
/// `password=` value replaced by `***`, cut to [`MAX_MESSAGE`].
pub fn message(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(known) = KNOWN.get() {
        for s in known {
            out = out.replace(s.as_str(), "***");
        }
    }
    out = userinfo(&out);
    out = key_values(&out);
    if out.len() > MAX_MESSAGE {
        let mut keep = MAX_MESSAGE - 3;
        while !out.is_char_boundary(keep) {
            keep -= 1;
        }
        out.truncate(keep);
        out.push('…');
    }
    out
}

/// `scheme://user:secret@host` becomes `scheme://user:***@host`, and
/// `scheme://token@host` (a token as the login) `scheme://***@host`.
pub fn userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..=colon]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            (Some(at), _) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `password=secret` (and `pwd=`) becomes `password=***`.
fn key_values(text: &str) -> String {
    let mut out = text.to_string();
    for key in ["password=", "pwd=", "PASSWORD=", "Password="] {
        let mut from = 0;
        while let Some(i) = out[from..].find(key) {
            let start = from + i + key.len();
            let end = out[start..]
                .find(|c: char| c.is_whitespace() || c == '&' || c == ';' || c == '"')
                .map_or(out.len(), |e| start + e);
            if &out[start..end] != "***" {
                out.replace_range(start..end, "***");
            }
            from = start + 3;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_and_pairs_are_masked() {
        let m = message("connect postgres://app:s3cr%40t@db:5432/x?sslmode=disable failed");
        assert_eq!(
            m,
            "connect postgres://app:***@db:5432/x?sslmode=disable failed"
        );
        let m = message("dsn host=db user=app password=hunter22 dbname=x");
        assert_eq!(m, "dsn host=db user=app password=*** dbname=x");
        assert_eq!(message("mysql://app@db/x"), "mysql://***@db/x");
        assert_eq!(
            message("https://ghp_token@git.example/r"),
            "https://***@git.example/r"
        );
    }

    #[test]
    fn a_message_is_bounded() {
        let m = message(&"é".repeat(2000));
        assert!(m.len() <= MAX_MESSAGE);
    }
}
