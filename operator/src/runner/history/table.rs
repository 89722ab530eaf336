//! The revision table, read read-only with the runner's own client.

use super::*;

/// Reads every row of the revision table, read-only, with the URL Ptah is
/// given (its TLS modes honoured: `sslmode`/`sslrootcert` for PostgreSQL,
/// `tls` for MySQL). Errors never hold the URL.
pub async fn read_revision_table(
    engine: EngineArg,
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, StepError> {
    let connect_timeout = if connect_timeout.is_zero() {
        Duration::from_secs(30)
    } else {
        connect_timeout
    };
    let schema = target.default_schema(url);
    let read = async {
        match engine {
            EngineArg::Postgresql => read_postgres(url, target, &schema, connect_timeout).await,
            EngineArg::Mysql => read_mysql(url, target, connect_timeout).await,
        }
    };
    match tokio::time::timeout(connect_timeout + TABLE_READ_TIMEOUT, read).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) => Err(StepError::failed(format!(
            "reading the revision table {REVISION_TABLE}: {}",
            crate::runner::redact::message(&e)
        ))),
        Err(_) => Err(StepError::failed(format!(
            "reading the revision table {REVISION_TABLE} timed out"
        ))),
    }
}

/// The columns read, in order, with how each is selected.
pub(crate) const COLUMNS: [&str; 10] = [
    "version",
    "description",
    "applied_at",
    "state",
    "applied",
    "total",
    "error",
    "error_stmt",
    "execution_time_ms",
    "checksum",
];
/// Columns without which a table is not Ptah's native layout.
pub(crate) const REQUIRED: [&str; 4] = ["version", "description", "state", "checksum"];

pub(crate) fn check_columns(present: &BTreeSet<String>) -> Result<(), String> {
    if present.is_empty() {
        return Err(format!(
            "the table {REVISION_TABLE} is missing after Ptah's status read it"
        ));
    }
    if let Some(c) = REQUIRED.iter().find(|c| !present.contains(**c)) {
        return Err(format!(
            "the table {REVISION_TABLE} has no column {c}: not Ptah's native layout"
        ));
    }
    Ok(())
}

pub(crate) fn query_param(url: &url::Url, key: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// `s` percent-decoded, as a URL's login, password and database arrive.
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

pub(crate) fn pg_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub(crate) async fn read_postgres(
    url: &str,
    target: &Target,
    schema: &str,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, String> {
    let parsed = url::Url::parse(url.trim()).map_err(|_| "the URL does not parse".to_string())?;
    let mut config = tokio_postgres::Config::new();
    config
        .host(target.host.trim_start_matches('[').trim_end_matches(']'))
        .port(target.port)
        .user(percent_decode(&target.user))
        .dbname(percent_decode(&target.database))
        .application_name("ptah-runner")
        .connect_timeout(connect_timeout);
    if let Some(p) = parsed.password() {
        config.password(percent_decode(p));
    }
    let mode = query_param(&parsed, "sslmode").unwrap_or_else(|| "prefer".into());
    let root = query_param(&parsed, "sslrootcert");
    let client = match mode.as_str() {
        "disable" => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client
        }
        "allow" | "prefer" | "require" | "verify-ca" | "verify-full" => {
            config.ssl_mode(if matches!(mode.as_str(), "allow" | "prefer") {
                tokio_postgres::config::SslMode::Prefer
            } else {
                tokio_postgres::config::SslMode::Require
            });
            // libpq: require checks the chain only when a root is named.
            let verify = match (mode.as_str(), &root) {
                ("verify-full", _) => Verify::Full,
                ("verify-ca", _) | ("require", Some(_)) => Verify::Chain,
                _ => Verify::None,
            };
            let tls =
                tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(verify, root.as_deref())?);
            let (client, connection) = config.connect(tls).await.map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client
        }
        other => return Err(format!("sslmode={other} is not a mode the runner knows")),
    };
    client
        .batch_execute(
            "SET TIME ZONE 'UTC'; START TRANSACTION READ ONLY; SET LOCAL statement_timeout = '30s'",
        )
        .await
        .map_err(|e| e.to_string())?;
    let present: BTreeSet<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            &[&schema, &REVISION_TABLE],
        )
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    check_columns(&present)?;
    let select: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let text = !matches!(*c, "version" | "applied" | "total" | "execution_time_ms");
            match (present.contains(*c), *c, text) {
                (false, _, true) => "NULL::text".to_string(),
                (false, _, false) => "NULL::bigint".to_string(),
                (true, "applied_at", _) => {
                    r#"to_char(applied_at, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#.to_string()
                }
                (true, c, true) => format!("{}::text", pg_ident(c)),
                (true, c, false) => format!("{}::bigint", pg_ident(c)),
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {}.{} ORDER BY version",
        select.join(", "),
        pg_ident(schema),
        pg_ident(REVISION_TABLE)
    );
    let rows = client.query(&sql, &[]).await.map_err(|e| e.to_string())?;
    let _ = client.batch_execute("ROLLBACK").await;
    rows.iter()
        .map(|r| {
            let text = |i: usize| r.try_get::<_, Option<String>>(i).map_err(|e| e.to_string());
            let int = |i: usize| r.try_get::<_, Option<i64>>(i).map_err(|e| e.to_string());
            Ok(TableRow {
                version: int(0)?.ok_or("a row without a version")?,
                description: text(1)?.unwrap_or_default(),
                applied_at: text(2)?,
                state: text(3)?.unwrap_or_default(),
                applied: int(4)?,
                total: int(5)?,
                error: text(6)?,
                error_stmt: text(7)?,
                execution_millis: int(8)?,
                checksum: text(9)?.unwrap_or_default(),
            })
        })
        .collect()
}

/// A connection to the MariaDB or MySQL database `target` names, as the
/// URL's `tls` parameter asks. The error never holds the URL.
pub(crate) async fn connect_mysql(
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> Result<mysql_async::Conn, String> {
    let parsed = url::Url::parse(url.trim()).map_err(|_| "the URL does not parse".to_string())?;
    let ssl = match query_param(&parsed, "tls").as_deref() {
        None | Some("false") => None,
        Some("true") => Some(mysql_async::SslOpts::default()),
        Some("skip-verify" | "preferred") => Some(
            mysql_async::SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        ),
        Some(other) => {
            return Err(format!(
                "tls={other} names a configuration the runner does not have"
            ));
        }
    };
    let database = percent_decode(&target.database);
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(target.host.trim_start_matches('[').trim_end_matches(']'))
        .tcp_port(target.port)
        .user(Some(percent_decode(&target.user)))
        .pass(parsed.password().map(percent_decode))
        .db_name(Some(database))
        .prefer_socket(false)
        .ssl_opts(ssl);
    tokio::time::timeout(connect_timeout, mysql_async::Conn::new(opts))
        .await
        .map_err(|_| "connecting timed out".to_string())?
        .map_err(|e| e.to_string())
}

pub(crate) async fn read_mysql(
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, String> {
    use mysql_async::prelude::Queryable;
    let database = percent_decode(&target.database);
    let mut conn = connect_mysql(url, target, connect_timeout).await?;
    conn.query_drop("START TRANSACTION READ ONLY")
        .await
        .map_err(|e| e.to_string())?;
    let present: BTreeSet<String> = conn
        .exec::<String, _, _>(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (database.as_str(), REVISION_TABLE),
        )
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    check_columns(&present)?;
    let select: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let text = !matches!(*c, "version" | "applied" | "total" | "execution_time_ms");
            match (present.contains(*c), *c, text) {
                (false, _, _) => "NULL".to_string(),
                (true, "applied_at", _) => {
                    "DATE_FORMAT(`applied_at`, '%Y-%m-%dT%H:%i:%s.%fZ')".to_string()
                }
                (true, c, true) => format!("CAST(`{c}` AS CHAR)"),
                (true, c, false) => format!("CAST(`{c}` AS SIGNED)"),
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM `{REVISION_TABLE}` ORDER BY `version`",
        select.join(", ")
    );
    let rows: Vec<mysql_async::Row> = conn.query(sql).await.map_err(|e| e.to_string())?;
    let _ = conn.query_drop("ROLLBACK").await;
    let _ = conn.disconnect().await;
    rows.into_iter()
        .map(|mut r| {
            let mut text = |i: usize| -> Result<Option<String>, String> {
                match r.take_opt::<Option<String>, usize>(i) {
                    Some(v) => v.map_err(|e| e.to_string()),
                    None => Err(format!("column {i} is missing")),
                }
            };
            let description = text(1)?.unwrap_or_default();
            let applied_at = text(2)?;
            let state = text(3)?.unwrap_or_default();
            let error = text(6)?;
            let error_stmt = text(7)?;
            let checksum = text(9)?.unwrap_or_default();
            let mut int = |i: usize| -> Result<Option<i64>, String> {
                match r.take_opt::<Option<i64>, usize>(i) {
                    Some(v) => v.map_err(|e| e.to_string()),
                    None => Err(format!("column {i} is missing")),
                }
            };
            Ok(TableRow {
                version: int(0)?.ok_or("a row without a version")?,
                description,
                applied_at,
                state,
                applied: int(4)?,
                total: int(5)?,
                error,
                error_stmt,
                execution_millis: int(8)?,
                checksum,
            })
        })
        .collect()
}
