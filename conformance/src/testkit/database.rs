//! A database of a test's own on the harness's PostgreSQL or MariaDB:
//! made afresh, its URL for a Secret, and the engine's own client to read
//! it back (`psql`, `mariadb`). The password travels in the client's
//! environment, never in argv or in output.

use std::process::Command;

use anyhow::{Context, bail};
use serde_json::json;

use super::namespace::TestNamespace;
use crate::harness::Harness;

/// The engine of a test database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The harness's PostgreSQL.
    Postgres,
    /// The harness's MariaDB.
    MariaDb,
}

impl Engine {
    /// `spec.target.engine`.
    pub fn spec(self) -> &'static str {
        match self {
            Engine::Postgres => "PostgreSQL",
            Engine::MariaDb => "MySQL",
        }
    }

    fn url_file(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres.url",
            Engine::MariaDb => "mariadb.url",
        }
    }
}

/// A database made for one test.
pub struct TestDatabase {
    /// Its engine.
    pub engine: Engine,
    /// Its name.
    pub name: String,
    url: url::Url,
}

impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it holds the password.
        f.debug_struct("TestDatabase")
            .field("engine", &self.engine)
            .field("name", &self.name)
            .finish()
    }
}

impl TestDatabase {
    /// The harness's own administrative database of `engine`.
    pub fn admin(harness: &Harness, engine: Engine) -> anyhow::Result<Self> {
        let admin = std::fs::read_to_string(harness.secret_file(engine.url_file()))
            .context("the harness's database URL")?;
        let url = url::Url::parse(admin.trim()).context("the harness's database URL")?;
        Ok(Self {
            engine,
            name: url.path().trim_start_matches('/').to_string(),
            url,
        })
    }

    /// The database `name` (`-` read as `_`) as it is, reached with the
    /// administrator's login.
    pub fn existing(harness: &Harness, engine: Engine, name: &str) -> anyhow::Result<Self> {
        let admin_db = Self::admin(harness, engine)?;
        let name = name.replace('-', "_");
        let mut url = admin_db.url.clone();
        url.set_path(&format!("/{name}"));
        Ok(Self { engine, name, url })
    }

    /// Drops `name` if it exists and makes it empty.
    pub fn create(harness: &Harness, engine: Engine, name: &str) -> anyhow::Result<Self> {
        let admin_db = Self::admin(harness, engine)?;
        let db = Self::existing(harness, engine, name)?;
        match engine {
            Engine::Postgres => {
                admin_db.sql(&format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    db.name
                ))?;
                admin_db.sql(&format!("CREATE DATABASE \"{}\"", db.name))?;
            }
            Engine::MariaDb => {
                admin_db.sql(&format!("DROP DATABASE IF EXISTS `{}`", db.name))?;
                admin_db.sql(&format!("CREATE DATABASE `{}`", db.name))?;
            }
        }
        Ok(db)
    }

    /// The server's loopback address.
    pub fn addr(&self) -> anyhow::Result<std::net::SocketAddr> {
        let host = self.url.host_str().context("the URL's host")?;
        let port = self.url.port().context("the URL's port")?;
        Ok(format!("{host}:{port}").parse()?)
    }

    /// This database reached on `port` instead (a relay's), for a Secret.
    pub fn through(&self, port: u16) -> anyhow::Result<Self> {
        let mut url = self.url.clone();
        url.set_port(Some(port))
            .ok()
            .context("a URL that takes a port")?;
        Ok(Self {
            engine: self.engine,
            name: self.name.clone(),
            url,
        })
    }

    /// The URL, for a Secret only: never print it.
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// The password, for tests that search output for it: never print it.
    pub fn password(&self) -> String {
        self.url.password().unwrap_or_default().to_string()
    }

    /// A Secret `name` holding the URL under `url`.
    pub async fn secret(&self, ns: &TestNamespace, name: &str) -> anyhow::Result<()> {
        ns.create::<k8s_openapi::api::core::v1::Secret>(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name},
            "stringData": {"url": self.url()},
        }))
        .await?;
        Ok(())
    }

    /// Runs `sql` with the engine's client; its tab-separated rows.
    pub fn sql(&self, sql: &str) -> anyhow::Result<String> {
        self.client(sql, true)
    }

    /// The table as the client describes it (`\d` in psql, `SHOW CREATE
    /// TABLE` in MariaDB), for people to read.
    pub fn describe(&self, table: &str) -> anyhow::Result<String> {
        match self.engine {
            Engine::Postgres => self.client(&format!("\\d {table}"), false),
            Engine::MariaDb => self.client(&format!("SHOW CREATE TABLE `{table}`\\G"), false),
        }
    }

    /// Runs `sql` with the engine's client in the background: a session
    /// that holds a lock while the test acts. Kill or wait for it.
    pub fn spawn_sql(&self, sql: &str) -> anyhow::Result<std::process::Child> {
        self.command(sql, true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting the database client")
    }

    /// A session that holds `table` against any change for `seconds`, so
    /// that a statement of an Apply waits on it while the test acts.
    pub fn lock_table(&self, table: &str, seconds: u32) -> anyhow::Result<std::process::Child> {
        self.spawn_sql(&match self.engine {
            Engine::Postgres => format!(
                "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({seconds}); COMMIT;"
            ),
            Engine::MariaDb => {
                format!("LOCK TABLES {table} WRITE; SELECT SLEEP({seconds}); UNLOCK TABLES;")
            }
        })
    }

    fn client(&self, sql: &str, rows: bool) -> anyhow::Result<String> {
        let password = self.url.password().unwrap_or_default().to_string();
        let out = self
            .command(sql, rows)
            .output()
            .context("running the database client")?;
        if !out.status.success() {
            bail!(
                "{} on {} failed: {}",
                sql.chars().take(80).collect::<String>(),
                self.name,
                String::from_utf8_lossy(&out.stderr).replace(&password, "***")
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn command(&self, sql: &str, rows: bool) -> Command {
        let host = self.url.host_str().unwrap_or("127.0.0.1").to_string();
        let port = self.url.port().map(|p| p.to_string()).unwrap_or_default();
        let user = self.url.username().to_string();
        let password = self.url.password().unwrap_or_default().to_string();
        match self.engine {
            Engine::Postgres => {
                let mut c = Command::new("psql");
                c.args(["-X", "-q", "-v", "ON_ERROR_STOP=1"]);
                if rows {
                    c.args(["-At", "-F", "\t"]);
                }
                c.args(["-h", &host, "-p", &port, "-U", &user, "-d", &self.name])
                    .args(["-c", sql])
                    .env("PGPASSWORD", &password);
                c
            }
            Engine::MariaDb => {
                let mut c = Command::new("mariadb");
                c.arg("--protocol=TCP");
                if rows {
                    c.args(["--batch", "--skip-column-names"]);
                }
                c.args(["-h", &host, "-P", &port, "-u", &user, &self.name])
                    .args(["-e", sql])
                    .env("MYSQL_PWD", &password);
                c
            }
        }
    }

    /// The tables of the database's default schema, sorted.
    pub fn tables(&self) -> anyhow::Result<Vec<String>> {
        let sql = match self.engine {
            Engine::Postgres => {
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
            }
            Engine::MariaDb => {
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1"
            }
        };
        Ok(self.sql(sql)?.lines().map(str::to_string).collect())
    }

    /// The columns of `table`, as `name type`, in order.
    pub fn columns(&self, table: &str) -> anyhow::Result<Vec<String>> {
        let schema = match self.engine {
            Engine::Postgres => "'public'",
            Engine::MariaDb => "DATABASE()",
        };
        let sql = format!(
            "SELECT column_name, data_type FROM information_schema.columns \
             WHERE table_schema = {schema} AND table_name = '{table}' ORDER BY ordinal_position"
        );
        Ok(self
            .sql(&sql)?
            .lines()
            .map(|l| l.replace('\t', " "))
            .collect())
    }
}
