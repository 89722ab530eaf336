//! The target identity digest: which database an operation read or
//! changed, without a credential. It is derived in the Pod from the URL Ptah
//! is given (the one the Job's Secret holds, which is what Ptah opens): the
//! engine family, the server's host and port, the database and the login.
//! Never the spec and never the schema's fingerprint, which every Apply
//! moves; a Secret pointed at another server or database gives another
//! digest, which is how a proof notices that its target moved.

use serde::Serialize;

use super::StepError;
use crate::protocol::args::EngineArg;

/// The parts of a database URL that name the database, and nothing secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// `postgresql` or `mysql`.
    pub engine: &'static str,
    /// The host, lower-cased.
    pub host: String,
    /// The port, the engine's default when the URL names none.
    pub port: u16,
    /// The database.
    pub database: String,
    /// The login.
    pub user: String,
}

impl Target {
    /// The target `url` names for `engine`. The error never holds the URL.
    pub fn from_url(engine: EngineArg, url: &str) -> Result<Self, StepError> {
        let refuse = |why: &str| {
            StepError::input(format!(
                "PTAH_DB_URL {why}; it must be a postgres:// or mysql:// URL naming a host and a database"
            ))
        };
        let parsed = url::Url::parse(url.trim()).map_err(|_| refuse("does not parse as a URL"))?;
        let (family, default_port) = match (engine, parsed.scheme()) {
            (EngineArg::Postgresql, "postgres" | "postgresql" | "pgx") => ("postgresql", 5432),
            (EngineArg::Mysql, "mysql" | "mariadb") => ("mysql", 3306),
            _ => return Err(refuse("has a scheme that is not the engine's")),
        };
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| refuse("names no host"))?
            .to_ascii_lowercase();
        let database = parsed.path().trim_start_matches('/').to_string();
        if database.is_empty() || database.contains('/') {
            return Err(refuse("names no database, or more than one path segment"));
        }
        Ok(Self {
            engine: family,
            host,
            port: parsed.port().unwrap_or(default_port),
            database,
            user: parsed.username().to_string(),
        })
    }

    /// `sha256:` of the canonical JSON of these parts.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        crate::protocol::receiver::content_sha256(&json)
    }

    /// The schema an unqualified table name lands in: PostgreSQL's first
    /// `search_path` entry (`public` without one), MySQL's database.
    pub fn default_schema(&self, url: &str) -> String {
        if self.engine == "mysql" {
            return self.database.clone();
        }
        url::Url::parse(url.trim())
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "search_path")
                    .and_then(|(_, v)| v.split(',').next().map(|s| s.trim().to_string()))
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "public".into())
    }

    /// Whether the redacted URL Ptah reports names this same target.
    pub fn matches_reported(&self, engine: EngineArg, reported: &str) -> bool {
        // Ptah masks the password as `***`, which parses.
        Self::from_url(engine, reported).is_ok_and(|r| r == *self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_names_server_database_and_login_never_the_password() {
        let a = Target::from_url(
            EngineArg::Postgresql,
            "postgres://app:one@DB.example:5432/orders?sslmode=disable",
        )
        .unwrap();
        let b = Target::from_url(
            EngineArg::Postgresql,
            "postgresql://app:two@db.example/orders",
        )
        .unwrap();
        assert_eq!(
            a, b,
            "a rotated password and the default port are the same database"
        );
        assert_eq!(a.digest(), b.digest());
        let other = Target::from_url(
            EngineArg::Postgresql,
            "postgres://app:one@db.example/billing",
        )
        .unwrap();
        assert_ne!(a.digest(), other.digest());
        assert!(!serde_json::to_string(&a).unwrap().contains("one"));
        let m = Target::from_url(EngineArg::Mysql, "mysql://ptah:pw@127.0.0.1:3307/shop").unwrap();
        assert_eq!((m.port, m.database.as_str()), (3307, "shop"));
        assert_eq!(
            m.default_schema("mysql://ptah:pw@127.0.0.1:3307/shop"),
            "shop"
        );
        assert_eq!(
            a.default_schema("postgres://a@h/d?search_path=app,public"),
            "app"
        );
        assert!(a.matches_reported(
            EngineArg::Postgresql,
            "postgres://app:***@db.example:5432/orders?sslmode=disable"
        ));
    }

    #[test]
    fn a_url_that_names_no_database_is_refused_without_echoing_it() {
        for url in [
            "not a url",
            "postgres://u:secretpw@h/",
            "mysql://u:secretpw@h/d",
            "postgres:///d",
        ] {
            let e = Target::from_url(EngineArg::Postgresql, url).unwrap_err();
            assert!(!e.to_string().contains("secretpw"), "{e}");
        }
    }
}
