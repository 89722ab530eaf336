//! The operator's binaries build and describe themselves.
use std::process::Command;

fn help(exe: &str) -> String {
    let out = Command::new(exe)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{exe} --help failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

#[test]
fn manager_answers_help() {
    let text = help(env!("CARGO_BIN_EXE_ptah-operator"));
    assert!(text.contains("PtahSchema"), "{text}");
    assert!(text.contains("--token-key-file"), "{text}");
    assert!(text.contains("--runner-image"), "{text}");
}

#[test]
fn runner_answers_help_with_every_operation() {
    let text = help(env!("CARGO_BIN_EXE_ptah-runner"));
    for op in ["resolve", "verify", "observe", "plan", "apply", "history"] {
        assert!(text.contains(op), "{op} missing from:\n{text}");
    }
}

#[test]
fn runner_refuses_an_unknown_operation_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptah-runner"))
        .arg("replay")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("replay"));
}
