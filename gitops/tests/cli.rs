//! `kubectl ptah` builds and lists a command for every stage.
use std::process::Command;

#[test]
fn plugin_answers_help_with_every_stage_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-ptah"))
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8 help");
    assert!(text.contains("kubectl ptah"), "{text}");
    for cmd in [
        "plan",
        "approve",
        "wait",
        "refresh",
        "set-source",
        "schema",
        "migration",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from:\n{text}");
    }
}
