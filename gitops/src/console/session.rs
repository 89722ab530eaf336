//! Who the viewer is. The console holds no identity of its own: a viewer
//! signs in with a bearer token (pasted into the sign-in form, or passed by
//! an authenticating proxy in `Authorization`), and every call to the API
//! server is made with that token. A signed-in viewer's token stays on the
//! server, under a random session ID the browser holds in an HttpOnly,
//! SameSite=Strict cookie; it never appears in a URL, a page or a log line.
//!
//! Every action is a POST carrying a CSRF token: the HMAC of the session ID
//! (or of the proxy's bearer token) under a key made at start, compared in
//! constant time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// The session cookie.
pub const COOKIE: &str = "ptah-console";
/// A session unused this long is forgotten.
const IDLE: Duration = Duration::from_secs(60 * 60);
/// Sessions held at most; the least recently used go first.
const MAX_SESSIONS: usize = 10_000;

/// The viewer of one request: their token and the CSRF token their forms
/// carry.
#[derive(Clone)]
pub struct Viewer {
    pub token: SecretString,
    pub csrf: String,
    /// What the CSRF token is the MAC of.
    basis: SecretString,
}

struct Held {
    token: SecretString,
    used: Instant,
}

/// The signed-in viewers.
pub struct Sessions {
    key: [u8; 32],
    held: Mutex<HashMap<String, Held>>,
}

/// `n` random bytes from the operating system, as hex.
fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(hex::encode(bytes))
}

impl Sessions {
    pub fn new() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(std::io::Error::other)?;
        Ok(Sessions {
            key,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn mac(&self, of: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(of.as_bytes());
        mac
    }

    fn csrf_of(&self, of: &str) -> String {
        hex::encode(self.mac(of).finalize().into_bytes())
    }

    /// Whether `given` is the CSRF token of `of` (constant time).
    fn csrf_matches(&self, of: &str, given: &str) -> bool {
        hex::decode(given).is_ok_and(|bytes| self.mac(of).verify_slice(&bytes).is_ok())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // A panic while holding the map leaves it whole: take it.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Signs `token` in; returns the session ID for the cookie.
    pub fn open(&self, token: SecretString) -> std::io::Result<String> {
        let id = random_hex(32)?;
        let now = Instant::now();
        let mut held = self.lock();
        held.retain(|_, h| now.duration_since(h.used) < IDLE);
        if held.len() >= MAX_SESSIONS
            && let Some(oldest) = held
                .iter()
                .min_by_key(|(_, h)| h.used)
                .map(|(k, _)| k.clone())
        {
            held.remove(&oldest);
        }
        held.insert(id.clone(), Held { token, used: now });
        Ok(id)
    }

    /// The viewer of session `id`, if it is held and not idle too long.
    pub fn viewer(&self, id: &str) -> Option<Viewer> {
        let now = Instant::now();
        let mut held = self.lock();
        let h = held.get_mut(id)?;
        if now.duration_since(h.used) >= IDLE {
            held.remove(id);
            return None;
        }
        h.used = now;
        let basis = format!("session:{id}");
        Some(Viewer {
            token: h.token.clone(),
            csrf: self.csrf_of(&basis),
            basis: basis.into(),
        })
    }

    /// The viewer a proxy names with a bearer token.
    pub fn bearer(&self, token: SecretString) -> Viewer {
        let basis = format!("bearer:{}", token.expose_secret());
        Viewer {
            csrf: self.csrf_of(&basis),
            token,
            basis: basis.into(),
        }
    }

    /// Signs session `id` out.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Whether `given` is the CSRF token of `viewer`.
    pub fn csrf_valid(&self, viewer: &Viewer, given: &str) -> bool {
        self.csrf_matches(viewer.basis.expose_secret(), given)
    }
}

/// The session ID in a `Cookie` header, if it names one.
pub fn session_id(cookie_header: &str) -> Option<&str> {
    cookie_header
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that holds session `id`.
pub fn set_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that forgets the session.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> SecretString {
        SecretString::from(s.to_string())
    }

    #[test]
    fn a_session_holds_the_token_and_a_csrf_token_of_its_own() {
        let s = Sessions::new().expect("sessions");
        let a = s.open(secret("token-a")).expect("open");
        let b = s.open(secret("token-b")).expect("open");
        assert_ne!(a, b);
        let va = s.viewer(&a).expect("held");
        let vb = s.viewer(&b).expect("held");
        assert_eq!(va.token.expose_secret(), "token-a");
        assert_ne!(va.csrf, vb.csrf);
        assert!(s.csrf_valid(&va, &va.csrf));
        assert!(!s.csrf_valid(&va, &vb.csrf), "another session's token");
        assert!(!s.csrf_valid(&va, ""));
        assert!(!s.csrf_valid(&va, "not hex"));
        s.close(&a);
        assert!(s.viewer(&a).is_none());
        assert!(s.viewer("unknown").is_none());
    }

    #[test]
    fn a_proxy_bearer_gets_a_csrf_token_bound_to_it() {
        let s = Sessions::new().expect("sessions");
        let v = s.bearer(secret("oidc-token"));
        assert!(s.csrf_valid(&v, &v.csrf));
        assert!(!s.csrf_valid(&s.bearer(secret("another")), &v.csrf));
        // Another console (another key) does not take it.
        let other = Sessions::new().expect("sessions");
        assert_ne!(other.bearer(secret("oidc-token")).csrf, v.csrf);
    }

    #[test]
    fn the_cookie_is_read_only_when_it_is_a_session_id() {
        assert_eq!(session_id("a=b; ptah-console=0fA9; c=d"), Some("0fA9"));
        assert_eq!(session_id("ptah-console="), None);
        assert_eq!(session_id("ptah-console=<script>"), None);
        assert_eq!(session_id("other=1"), None);
        let set = set_cookie("ab", true);
        for attr in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
            assert!(set.contains(attr), "{set}");
        }
        assert!(!set_cookie("ab", false).contains("Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
