//! The normaliser of the executor goldens.

/// What the goldens hold of an output instead of what changes on each run:
/// times (`"time"`, `"applied_at"`, `"execution_time"`), the log's
/// `correlation_id`, and loopback ports. `migrations-capture.sh` does the
/// same in `sed`; every golden is a fixed point of this function.
pub fn normalise_golden(text: &str) -> String {
    let mut out = replace_after(text, "\"time\":\"", |rest| rest.find('"'), "<time>");
    out = replace_after(&out, "\"applied_at\": \"", |rest| rest.find('"'), "<time>");
    out = replace_after(
        &out,
        "\"execution_time\": ",
        |rest| Some(rest.bytes().take_while(u8::is_ascii_digit).count()).filter(|n| *n > 0),
        "0",
    );
    out = replace_after(
        &out,
        "\"correlation_id\":\"",
        |rest| {
            Some(
                rest.bytes()
                    .take_while(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                    .count(),
            )
            .filter(|n| *n > 0)
        },
        "<id>",
    );
    for host in ["127.0.0.1:", "localhost:"] {
        out = replace_after(
            &out,
            host,
            |rest| Some(rest.bytes().take_while(u8::is_ascii_digit).count()).filter(|n| *n > 0),
            "<port>",
        );
    }
    out
}

/// Every `marker` followed by what `span` measures of the rest replaced by
/// `with` (an absent span leaves it).
pub(crate) fn replace_after(
    text: &str,
    marker: &str,
    span: impl Fn(&str) -> Option<usize>,
    with: &str,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (head, tail) = rest.split_at(at + marker.len());
        out.push_str(head);
        match span(tail) {
            Some(n) => {
                out.push_str(with);
                rest = &tail[n..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}
