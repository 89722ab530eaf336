//! The two families' controllers share no six-line run: what they have in
//! common is written once in `controller/pass.rs` and `controller/family.rs`
//! (issue: one controller pass for both families). Lines are compared as
//! the `duplicates` tool reads them: white space folded, without blank
//! lines, comments, imports and lone punctuation.

use std::collections::HashSet;
use std::path::Path;

const RUN: usize = 6;

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.starts_with("//") && !l.starts_with("use "))
        .filter(|l| l.chars().any(char::is_alphanumeric))
        .collect()
}

/// The runs of [`RUN`] lines `a` and `b` both hold.
fn shared_runs(a: &str, b: &str) -> Vec<String> {
    let (a, b) = (lines(a), lines(b));
    let in_a: HashSet<String> = a.windows(RUN).map(|w| w.join("\n")).collect();
    b.windows(RUN)
        .map(|w| w.join("\n"))
        .filter(|r| in_a.contains(r))
        .collect()
}

fn controller(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/controller")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_two_families_controllers_share_no_six_line_run() {
    let shared = shared_runs(&controller("schema.rs"), &controller("migration.rs"));
    assert!(
        shared.is_empty(),
        "written in both controller/schema.rs and controller/migration.rs:\n{}",
        shared.join("\n----\n")
    );
}

#[test]
fn six_shared_lines_are_a_run_whatever_the_spacing_and_comments_and_five_are_not() {
    let body: Vec<String> = (0..6).map(|i| format!("let x{i} = f({i});")).collect();
    let a = body.join("\n");
    let b = format!(
        "fn g() {{\n    {}\n    // a comment\n}}\n",
        body.join("\n\n        ")
    );
    assert_eq!(shared_runs(&a, &b).len(), 1);
    let five = body[..5].join("\n");
    assert!(shared_runs(&five, &b).is_empty());
}
