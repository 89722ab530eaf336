//! A MySQL-family database's grants, read back. Ptah does not read grants
//! from MariaDB or MySQL, so a declared `GRANT` is planned again after it
//! ran, and the proof of its Apply would ask for a second approval every
//! interval. The Plan step therefore compares each planned `GRANT` with
//! `SHOW GRANTS` for its grantee: a plan made only of grants the database
//! already holds, on the same object, is no change.
//!
//! Only the statement Ptah renders (`GRANT privs ON obj TO role [WITH GRANT
//! OPTION]`) is read; anything else keeps the plan as Ptah made it. No row
//! `SHOW GRANTS` returns is printed: it may carry a password hash.

use std::collections::BTreeSet;
use std::time::Duration;

use super::identity::Target;

/// One grant: privileges on an object to a grantee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Upper-cased outside quotes; `ALL` is `ALL PRIVILEGES`.
    pub privileges: BTreeSet<String>,
    /// Database, then table or `*`, unquoted.
    pub object: (String, String),
    /// User, then host (`%` when the statement names none), unquoted.
    pub grantee: (String, String),
    /// `WITH GRANT OPTION`.
    pub grant_option: bool,
}

/// Words and quoted names of `sql`, split at whitespace and commas outside
/// quotes and parentheses (commas are kept as tokens).
fn tokens(sql: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            cur.push(c);
            if c == q {
                // A doubled quote is the quote itself.
                if chars.peek() == Some(&q) {
                    cur.push(q);
                    chars.next();
                } else {
                    quote = None;
                }
            }
            continue;
        }
        match c {
            '`' | '\'' | '"' => {
                quote = Some(c);
                cur.push(c);
            }
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth = depth.checked_sub(1)?;
                cur.push(c);
            }
            ',' if depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(",".into());
            }
            c if c.is_whitespace() && depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c if c.is_whitespace() => cur.push(' '),
            c => cur.push(c),
        }
    }
    if quote.is_some() || depth != 0 {
        return None;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Some(out)
}

fn keyword(t: &str, k: &str) -> bool {
    t.eq_ignore_ascii_case(k)
}

/// The parts of `name` between `sep`s, unquoted (MariaDB quotes names
/// with backquotes, an account's parts also with single quotes).
fn parts(name: &str, sep: char) -> Vec<String> {
    super::reports::split_unquoted(name, sep, &['`', '\'', '"'])
}

/// A privilege as `SHOW GRANTS` spells it: keywords upper-cased, column
/// names left as written.
fn privilege(words: &[String]) -> String {
    let text = words
        .iter()
        .map(|w| {
            if w.contains(['`', '\'', '"', '(']) {
                w.clone()
            } else {
                w.to_ascii_uppercase()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if text == "ALL" {
        "ALL PRIVILEGES".into()
    } else {
        text
    }
}

/// The grant `sql` makes, with `database` for an unqualified table; `None`
/// for any other statement (a role granted to a user, a proxy grant, …).
pub fn parse(sql: &str, database: &str) -> Option<Grant> {
    let sql = super::reports::strip_comments(sql);
    let t = tokens(sql.trim().trim_end_matches(';').trim())?;
    if !keyword(t.first()?, "GRANT") {
        return None;
    }
    let on = t.iter().position(|w| keyword(w, "ON"))?;
    let to = t.iter().position(|w| keyword(w, "TO"))?;
    if to <= on + 1 || on < 2 {
        return None;
    }
    let privileges: BTreeSet<String> = t[1..on].split(|w| w == ",").map(privilege).collect();
    if privileges.iter().any(String::is_empty) {
        return None;
    }
    // `ON TABLE x` names the same object as `ON x`.
    let mut object_words = &t[on + 1..to];
    if object_words.len() == 2 && keyword(&object_words[0], "TABLE") {
        object_words = &object_words[1..];
    }
    let [object] = object_words else {
        return None;
    };
    let object = match parts(object, '.').as_slice() {
        [table] => (database.to_string(), table.clone()),
        [db, table] => (db.clone(), table.clone()),
        _ => return None,
    };
    // The grantee, up to what `SHOW GRANTS` may add after it.
    let rest = &t[to + 1..];
    let end = rest
        .iter()
        .position(|w| {
            ["WITH", "IDENTIFIED", "REQUIRE", "VIA", "USING"]
                .iter()
                .any(|k| keyword(w, k))
        })
        .unwrap_or(rest.len());
    let [grantee] = &rest[..end] else {
        return None;
    };
    let grantee = match parts(grantee, '@').as_slice() {
        [user] => (user.clone(), "%".to_string()),
        [user, host] => (user.clone(), host.clone()),
        _ => return None,
    };
    let tail: Vec<String> = rest[end..].iter().map(|w| w.to_ascii_uppercase()).collect();
    let grant_option = tail.windows(3).any(|w| w == ["WITH", "GRANT", "OPTION"]);
    Some(Grant {
        privileges,
        object,
        grantee,
        grant_option,
    })
}

/// Whether the grants `held` (what `SHOW GRANTS` said for the grantee)
/// already give `wanted`, on the same object.
pub fn held(held: &[Grant], wanted: &Grant) -> bool {
    let same: Vec<&Grant> = held
        .iter()
        .filter(|g| g.grantee == wanted.grantee && g.object == wanted.object)
        .collect();
    let all = same.iter().any(|g| g.privileges.contains("ALL PRIVILEGES"));
    let privileges = all
        || wanted
            .privileges
            .iter()
            .all(|p| same.iter().any(|g| g.privileges.contains(p)));
    privileges && (!wanted.grant_option || same.iter().any(|g| g.grant_option))
}

/// `'user'@'host'` for `SHOW GRANTS FOR`.
fn account((user, host): &(String, String)) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"));
    format!("{}@{}", quote(user), quote(host))
}

/// Whether every statement of a plan is a grant the database already holds.
/// A grant that cannot be read back (no right to `SHOW GRANTS` for its
/// grantee, or the grantee missing) is not held; the error, which never
/// holds the URL, is said on the runner's log.
pub async fn all_held(
    statements: &[String],
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> bool {
    use mysql_async::prelude::Queryable;
    let database = super::history::percent_decode(&target.database);
    let Some(wanted) = statements
        .iter()
        .map(|s| parse(s, &database))
        .collect::<Option<Vec<Grant>>>()
        .filter(|w| !w.is_empty())
    else {
        return false;
    };
    let mut conn = match super::history::connect_mysql(url, target, connect_timeout).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ptah-runner: reading grants back: {e}");
            return false;
        }
    };
    let grantees: BTreeSet<&(String, String)> = wanted.iter().map(|g| &g.grantee).collect();
    let mut rows = Vec::new();
    for grantee in grantees {
        match conn
            .query::<String, _>(format!("SHOW GRANTS FOR {}", account(grantee)))
            .await
        {
            Ok(r) => rows.extend(r.iter().filter_map(|s| parse(s, &database))),
            Err(e) => {
                eprintln!(
                    "ptah-runner: SHOW GRANTS for a planned grantee failed ({}); the plan keeps its grants",
                    super::redact::message(&e.to_string())
                );
                let _ = conn.disconnect().await;
                return false;
            }
        }
    }
    let _ = conn.disconnect().await;
    wanted.iter().all(|w| held(&rows, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(p: &[&str]) -> BTreeSet<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ptahs_grant_is_read_with_the_default_database_and_any_host() {
        let g = parse("GRANT SELECT, INSERT ON `orders` TO `reader_x`;", "app").unwrap();
        assert_eq!(g.privileges, set(&["INSERT", "SELECT"]));
        assert_eq!(g.object, ("app".into(), "orders".into()));
        assert_eq!(g.grantee, ("reader_x".into(), "%".into()));
        assert!(!g.grant_option);
        let g = parse("grant all on `app`.* to `r` with grant option", "x").unwrap();
        assert_eq!(g.privileges, set(&["ALL PRIVILEGES"]));
        assert_eq!(g.object, ("app".into(), "*".into()));
        assert!(g.grant_option);
    }

    #[test]
    fn show_grants_rows_are_read_and_extras_after_the_grantee_ignored() {
        let g = parse(
            "GRANT SELECT (`a`, `b`), UPDATE ON `app`.`orders` TO `reader_x`@`%` WITH GRANT OPTION",
            "other",
        )
        .unwrap();
        assert_eq!(g.privileges, set(&["SELECT (`a`, `b`)", "UPDATE"]));
        assert_eq!(g.object, ("app".into(), "orders".into()));
        assert!(g.grant_option);
        let g = parse(
            "GRANT USAGE ON *.* TO `u`@`localhost` IDENTIFIED BY PASSWORD '*ABC'",
            "app",
        )
        .unwrap();
        assert_eq!(g.object, ("*".into(), "*".into()));
        assert_eq!(g.grantee, ("u".into(), "localhost".into()));
        assert_eq!(parse("GRANT 'r' TO 'u'@'%'", "app"), None, "a role grant");
        assert_eq!(parse("CREATE TABLE t (a int)", "app"), None);
        assert_eq!(parse("GRANT SELECT ON `a`.`b`.`c` TO r", "app"), None);
        assert_eq!(parse("GRANT SELECT ON `unclosed TO r", "app"), None);
    }

    #[test]
    fn a_grant_is_held_only_on_the_same_object_for_the_same_grantee() {
        let wanted = parse("GRANT SELECT, INSERT ON `orders` TO `r`;", "app").unwrap();
        let rows = |lines: &[&str]| -> Vec<Grant> {
            lines.iter().filter_map(|l| parse(l, "app")).collect()
        };
        let usage = "GRANT USAGE ON *.* TO `r`@`%`";
        assert!(held(
            &rows(&[usage, "GRANT SELECT, INSERT ON `app`.`orders` TO `r`@`%`"]),
            &wanted
        ));
        // Split over two rows, or all of them.
        assert!(held(
            &rows(&[
                "GRANT SELECT ON `app`.`orders` TO `r`@`%`",
                "GRANT INSERT ON `app`.`orders` TO `r`@`%`"
            ]),
            &wanted
        ));
        assert!(held(
            &rows(&["GRANT ALL PRIVILEGES ON `app`.`orders` TO `r`@`%`"]),
            &wanted
        ));
        // Not held: a privilege missing, another table, host or user.
        for other in [
            "GRANT SELECT ON `app`.`orders` TO `r`@`%`",
            "GRANT SELECT, INSERT ON `app`.`customers` TO `r`@`%`",
            "GRANT SELECT, INSERT ON `other`.`orders` TO `r`@`%`",
            "GRANT SELECT, INSERT ON `app`.`orders` TO `r`@`localhost`",
            "GRANT SELECT, INSERT ON `app`.`orders` TO `s`@`%`",
        ] {
            assert!(!held(&rows(&[usage, other]), &wanted), "{other}");
        }
        let with_option = parse("GRANT SELECT ON orders TO r WITH GRANT OPTION", "app").unwrap();
        assert!(!held(
            &rows(&["GRANT SELECT ON `app`.`orders` TO `r`@`%`"]),
            &with_option
        ));
        assert!(held(
            &rows(&["GRANT SELECT ON `app`.`orders` TO `r`@`%` WITH GRANT OPTION"]),
            &with_option
        ));
    }

    #[test]
    fn an_account_is_quoted_for_show_grants() {
        assert_eq!(account(&("o'brien".into(), "%".into())), "'o''brien'@'%'");
    }
}
