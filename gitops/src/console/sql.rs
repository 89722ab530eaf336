//! A plan's SQL with its keywords, strings, numbers and comments marked for
//! the stylesheet. sqlparser's tokenizer (the dialect of the resource's
//! engine) finds the tokens; each token's text is cut from the plan itself
//! between its start and the next token's, so what is shown is the plan's
//! exact bytes, escaped, never a re-spelling.

use maud::{Markup, html};
use sqlparser::dialect::{Dialect, MySqlDialect, PostgreSqlDialect};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Token, Tokenizer, Whitespace};

/// The stylesheet class of a token, if it has one.
fn class(token: &Token) -> Option<&'static str> {
    match token {
        Token::Word(w) if w.quote_style.is_none() && w.keyword != Keyword::NoKeyword => Some("kw"),
        Token::Number(..) => Some("num"),
        Token::SingleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::NationalStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::SingleQuotedByteStringLiteral(_) => Some("str"),
        Token::Whitespace(
            Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_),
        ) => Some("com"),
        _ => None,
    }
}

/// The byte offset of a 1-based line and column (in characters) of `text`.
fn offset(text: &str, line_starts: &[usize], at: Location) -> Option<usize> {
    let line = usize::try_from(at.line).ok()?.checked_sub(1)?;
    let start = *line_starts.get(line)?;
    let column = usize::try_from(at.column).ok()?.checked_sub(1)?;
    let rest = &text[start..];
    Some(
        start
            + rest
                .char_indices()
                .nth(column)
                .map_or(rest.len(), |(i, _)| i),
    )
}

/// `sql` as pieces of text, each with its class: the whole text, in order.
pub fn pieces(sql: &str, postgres: bool) -> Vec<(Option<&'static str>, &str)> {
    let dialect: &dyn Dialect = if postgres {
        &PostgreSqlDialect {}
    } else {
        &MySqlDialect {}
    };
    let Ok(tokens) = Tokenizer::new(dialect, sql).tokenize_with_location() else {
        // Text the tokenizer cannot read is shown as it is, unmarked.
        return vec![(None, sql)];
    };
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let starts: Option<Vec<usize>> = tokens
        .iter()
        .map(|t| offset(sql, &line_starts, t.span.start))
        .collect();
    let Some(starts) = starts.filter(|s| s.first().is_none_or(|f| *f == 0) && s.is_sorted()) else {
        return vec![(None, sql)];
    };
    let ends = starts.iter().skip(1).copied().chain([sql.len()]);
    tokens
        .iter()
        .zip(starts.iter().copied().zip(ends))
        .filter(|(_, (start, end))| start < end)
        .map(|(t, (start, end))| (class(&t.token), &sql[start..end]))
        .collect()
}

/// `sql` as marked-up HTML (inside a `<pre>`).
pub fn highlight(sql: &str, postgres: bool) -> Markup {
    html! {
        @for (class, text) in pieces(sql, postgres) {
            @if let Some(c) = class { span class=(c) { (text) } } @else { (text) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pieces_are_the_plan_exactly() {
        let sql = "-- orders\nCREATE TABLE \"orders\" (\n  id bigint PRIMARY KEY,\n  note varchar(32) DEFAULT 'it''s',\n  n int DEFAULT 42\n);\n";
        let pieces = pieces(sql, true);
        let joined: String = pieces.iter().map(|(_, t)| *t).collect();
        assert_eq!(joined, sql);
        let of = |class: &str| -> Vec<&str> {
            pieces
                .iter()
                .filter(|(c, _)| *c == Some(class))
                .map(|(_, t)| *t)
                .collect()
        };
        assert!(of("kw").contains(&"CREATE") && of("kw").contains(&"PRIMARY"));
        assert!(
            !of("kw").contains(&"\"orders\""),
            "a quoted name is no keyword"
        );
        assert_eq!(of("str"), ["'it''s'"]);
        assert!(of("num").contains(&"42"));
        let comments: Vec<&str> = of("com").iter().map(|c| c.trim_end()).collect();
        assert_eq!(comments, ["-- orders"]);
    }

    #[test]
    fn text_is_escaped_and_multibyte_text_keeps_its_place() {
        let sql = "INSERT INTO t VALUES ('<b>é</b>'); SELECT 1;";
        let html = highlight(sql, false).into_string();
        assert!(html.contains("&lt;b&gt;é&lt;/b&gt;"), "{html}");
        assert!(!html.contains("<b>"));
        let joined: String = pieces(sql, false).iter().map(|(_, t)| *t).collect();
        assert_eq!(joined, sql);
    }

    #[test]
    fn unreadable_text_is_shown_as_it_is() {
        let sql = "SELECT 'unterminated";
        assert_eq!(pieces(sql, true), [(None, sql)]);
    }
}
