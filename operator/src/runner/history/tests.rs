use super::*;

macro_rules! golden {
    ($engine:literal, $name:literal) => {
        (
            include_str!(concat!(
                "../../../../conformance/testdata/executor/",
                $engine,
                "/",
                $name,
                ".stdout"
            )),
            include_str!(concat!(
                "../../../../conformance/testdata/executor/",
                $engine,
                "/",
                $name,
                ".stderr"
            )),
            include_str!(concat!(
                "../../../../conformance/testdata/executor/",
                $engine,
                "/",
                $name,
                ".exit"
            )),
        )
    };
}

type Golden = (&'static str, &'static str, &'static str);

/// Every golden, for the checks that hold for all of them.
const GOLDENS: &[Golden] = &[
    golden!("postgresql", "migrations-status-ready"),
    golden!("postgresql", "migrations-status-nothing-pending"),
    golden!("postgresql", "migrations-status-modified"),
    golden!("postgresql", "migrations-status-ahead"),
    golden!("postgresql", "migrations-status-out-of-order"),
    golden!("postgresql", "migrations-status-dirty"),
    golden!("postgresql", "migrations-status-interrupted"),
    golden!("postgresql", "migrations-up-applied"),
    golden!("postgresql", "migrations-up-nothing-to-do"),
    golden!("postgresql", "migrations-up-failed-statement-3"),
    golden!("postgresql", "migrations-up-hook-refused"),
    golden!("mariadb", "migrations-status-ready"),
    golden!("mariadb", "migrations-status-nothing-pending"),
    golden!("mariadb", "migrations-status-modified"),
    golden!("mariadb", "migrations-status-ahead"),
    golden!("mariadb", "migrations-status-out-of-order"),
    golden!("mariadb", "migrations-status-dirty"),
    golden!("mariadb", "migrations-status-unknown"),
    golden!("mariadb", "migrations-up-applied"),
    golden!("mariadb", "migrations-up-nothing-to-do"),
    golden!("mariadb", "migrations-up-failed-statement-3"),
    golden!("mariadb", "migrations-up-hook-refused"),
    golden!("mariadb", "migrations-up-file-mode-refused"),
    golden!("mariadb", "migrations-up-unknown"),
    golden!("postgresql", "migrations-up-sequence-refused"),
    golden!("mariadb", "migrations-up-sequence-refused"),
];

fn child(exit: i32, stdout: &str, stderr: &str) -> ChildRun {
    ChildRun {
        exit,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
        stdout_truncated: false,
        stderr_truncated: false,
        limit: 1 << 20,
        elapsed: Duration::ZERO,
    }
}

fn of(g: Golden) -> ChildRun {
    child(g.2.trim().parse().expect("exit code"), g.0, g.1)
}

fn dir(engine: &str, name: &str) -> Directory {
    let path = format!(
        "{}/../conformance/testdata/executor/migrations-dirs/{engine}/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    read_directory(Path::new(&path)).expect("the golden directory reads")
}

fn source(engine: &str, name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../conformance/testdata/executor/migrations-dirs/{engine}/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn applied_row(version: i64, from: &Directory) -> TableRow {
    let m = &from.migrations[&version];
    TableRow {
        version,
        description: m.description.clone(),
        applied_at: Some("2026-12-01T08:20:29.149002Z".into()),
        state: "applied".into(),
        applied: Some(1),
        total: Some(1),
        error: None,
        error_stmt: None,
        execution_millis: Some(20),
        checksum: m.checksum.clone(),
    }
}

/// The table a status golden was read from: its applied versions (their
/// checksums from the directory that applied them) and its dirty row.
fn table(status: &StatusDocument, applied_from: &Directory) -> Vec<TableRow> {
    let mut rows: Vec<TableRow> = status
        .applied_migrations
        .iter()
        .map(|v| applied_row(*v, applied_from))
        .collect();
    if let Some(d) = &status.dirty_revision {
        rows.push(TableRow {
            version: d.version,
            description: d.description.clone(),
            applied_at: Some("2026-12-01T08:20:46.015955Z".into()),
            state: d.state.clone(),
            applied: Some(d.applied),
            total: Some(d.total),
            error: d.error.clone(),
            error_stmt: d.error_stmt.clone(),
            execution_millis: Some(13),
            checksum: d.checksum.clone().unwrap_or_default(),
        });
    }
    rows
}

const DIGEST: &str = "sha256:5757575757575757575757575757575757575757575757575757575757575757";

fn engine_of(engine: &str) -> EngineArg {
    if engine == "mariadb" {
        EngineArg::Mysql
    } else {
        EngineArg::Postgresql
    }
}

/// A status golden, its table and directory, held to the protocol's
/// checks as the manager holds it.
fn reading(engine: &str, g: Golden, applied_from: &str, directory: &str) -> Reading {
    let status = parse_status(&of(g)).expect("the golden parses");
    let rows = table(&status, &dir(engine, applied_from));
    let directory = dir(engine, directory);
    let report =
        derive_history(engine_of(engine), &status, &rows, &directory, DIGEST).expect("derives");
    check_history(&report).expect("the manager takes it");
    Reading {
        status,
        rows,
        directory,
        report,
    }
}

fn versions(pending: &[PlannedMigration]) -> Vec<i64> {
    pending.iter().map(|m| m.version).collect()
}

#[test]
fn every_golden_is_a_fixed_point_of_the_normaliser() {
    for g in GOLDENS {
        for text in [g.0, g.1] {
            assert_eq!(normalise_golden(text), text);
        }
    }
    let raw = r#"{"time":"2026-12-01T08:20:29.1Z","correlation_id":"7c4a59942443572b","msg":"Database: mysql://mig:***@127.0.0.1:53306/x"}"#;
    assert_eq!(
        normalise_golden(raw),
        r#"{"time":"<time>","correlation_id":"<id>","msg":"Database: mysql://mig:***@127.0.0.1:<port>/x"}"#
    );
    let revision =
        "\"execution_time\": 13000000,\n    \"applied_at\": \"2026-12-01T08:20:46.015955Z\",";
    assert_eq!(
        normalise_golden(revision),
        "\"execution_time\": 0,\n    \"applied_at\": \"<time>\","
    );
}

#[test]
fn the_six_verdicts_from_the_postgresql_goldens() {
    let pg = "postgresql";
    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-ready"),
        "base",
        "base",
    );
    let HistoryVerdict::Pending(seq) = r.report.verdict() else {
        panic!("ready is a sequence");
    };
    assert_eq!(versions(&seq), [1, 2, 3]);
    assert_eq!(
        seq[2].transaction_mode,
        Some(MigrationTransactionMode::None)
    );
    assert_eq!(seq[2].description.as_deref(), Some("Order Index"));
    assert_eq!(seq[0].checksum, dir(pg, "base").migrations[&1].checksum);
    assert_eq!(r.report.current_version, 0);

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-nothing-pending"),
        "base",
        "base",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::NothingPending);
    assert_eq!(r.report.applied_count, 3);
    assert_eq!(r.report.revisions[0].version, 3, "newest first");
    assert!(r.report.revisions[0].applied_at.is_some());

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-modified"),
        "base",
        "modified",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Modified);
    assert_eq!(r.report.modified_versions, [2]);

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-ahead"),
        "base",
        "ahead",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Ahead);
    assert_eq!(r.report.ahead_versions, [3]);

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-out-of-order"),
        "gap",
        "out-of-order",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::OutOfOrder);
    assert_eq!(r.report.out_of_order_versions, [2]);

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-dirty"),
        "failing",
        "failing",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
    let d = r.report.dirty_revision.as_ref().expect("dirty");
    assert_eq!(
        (d.version, d.statements_applied, d.statements_total),
        (5, Some(0), Some(3))
    );
    assert!(
        !d.outcome_unknown,
        "a rolled-back INSERT is a known failure"
    );
    assert_eq!(d.direction, Direction::Up);

    let r = reading(
        pg,
        golden!("postgresql", "migrations-status-interrupted"),
        "interrupted",
        "interrupted",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
    let d = r.report.dirty_revision.as_ref().expect("dirty");
    assert!(d.outcome_unknown, "Ptah's own marker");
    assert_eq!(d.state, "pending");
}

#[test]
fn the_six_verdicts_from_the_mariadb_goldens() {
    let my = "mariadb";
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-ready"),
        "base",
        "base",
    );
    assert!(matches!(r.report.verdict(), HistoryVerdict::Pending(s) if versions(&s) == [1, 2, 3]));
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-nothing-pending"),
        "base",
        "base",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::NothingPending);
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-modified"),
        "base",
        "modified",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Modified);
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-ahead"),
        "base",
        "ahead",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Ahead);
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-out-of-order"),
        "gap",
        "out-of-order",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::OutOfOrder);
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-dirty"),
        "failing",
        "failing",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
    let d = r.report.dirty_revision.as_ref().expect("dirty");
    assert_eq!(
        d.statements_applied,
        Some(2),
        "tx-mode none records progress"
    );
    assert!(!d.outcome_unknown, "a failed INSERT is atomic");
    let r = reading(
        my,
        golden!("mariadb", "migrations-status-unknown"),
        "unknown",
        "unknown",
    );
    assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
    assert!(
        r.report
            .dirty_revision
            .as_ref()
            .is_some_and(|d| d.outcome_unknown),
        "CREATE UNIQUE INDEX stopped by a duplicate key may have committed"
    );
}

#[test]
fn the_fingerprint_moves_with_any_row_file_or_selection() {
    let r = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-ready"),
        "base",
        "base",
    );
    let again = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-ready"),
        "base",
        "base",
    );
    assert_eq!(
        r.report.history_fingerprint,
        again.report.history_fingerprint
    );
    assert!(r.report.history_fingerprint.starts_with("sha256:"));
    let applied = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-nothing-pending"),
        "base",
        "base",
    );
    assert_ne!(
        r.report.history_fingerprint,
        applied.report.history_fingerprint
    );
    let mut rows = applied.rows.clone();
    rows[0].execution_millis = Some(99);
    assert_ne!(
        history_fingerprint(
            &rows,
            &applied.directory,
            &applied.report.pending,
            &applied.status
        ),
        applied.report.history_fingerprint
    );
    let modified = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-modified"),
        "base",
        "modified",
    );
    assert_ne!(
        modified.report.history_fingerprint,
        applied.report.history_fingerprint
    );
}

#[test]
fn a_reading_whose_parts_disagree_is_refused_naming_them() {
    let g = golden!("postgresql", "migrations-status-nothing-pending");
    let status = parse_status(&of(g)).expect("parses");
    let base = dir("postgresql", "base");
    let mut rows = table(&status, &base);
    rows.pop();
    let e = derive_history(EngineArg::Postgresql, &status, &rows, &base, DIGEST).unwrap_err();
    assert!(e.to_string().contains("appliedMigrations"), "{e}");
    let mut rows = table(&status, &base);
    rows.push(TableRow {
        state: "failed".into(),
        ..applied_row(3, &base)
    });
    rows[3].version = 4;
    let e = derive_history(EngineArg::Postgresql, &status, &rows, &base, DIGEST).unwrap_err();
    assert!(e.to_string().contains("dirty row 4"), "{e}");
    // Ptah selects a version the runner's directory lacks.
    let ready =
        parse_status(&of(golden!("postgresql", "migrations-status-ready"))).expect("parses");
    let ahead = dir("postgresql", "ahead");
    let e = derive_history(EngineArg::Postgresql, &ready, &[], &ahead, DIGEST).unwrap_err();
    assert!(e.to_string().contains("version 3"), "{e}");
    let mut twice = table(&status, &base);
    twice.push(twice[0].clone());
    assert!(derive_history(EngineArg::Postgresql, &status, &twice, &base, DIGEST).is_err());
}

#[test]
fn a_status_that_breaks_the_contract_is_refused_naming_what() {
    let ready = golden!("postgresql", "migrations-status-ready").0;
    let e = parse_status(&child(0, "{ nope", "")).unwrap_err();
    assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
    let e = parse_status(&child(0, "", "")).unwrap_err();
    assert!(
        matches!(
            e,
            ReportError::Missing {
                stream: "stdout",
                ..
            }
        ),
        "{e}"
    );
    for exit in [1, 3, -1] {
        let e = parse_status(&child(exit, ready, "")).unwrap_err();
        assert!(matches!(e, ReportError::UnknownExit { .. }), "{exit}: {e}");
    }
    let mut cut = child(0, ready, "");
    cut.stdout_truncated = true;
    assert!(matches!(
        parse_status(&cut).unwrap_err(),
        ReportError::Truncated {
            stream: "stdout",
            ..
        }
    ));
    let e = parse_status(&child(0, &ready[..ready.len() / 2], "")).unwrap_err();
    assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
    let extra = ready.replacen('{', "{\"surprise\": 1,", 1);
    assert!(
        parse_status(&child(0, &extra, ""))
            .unwrap_err()
            .to_string()
            .contains("surprise")
    );
    // A list Go may write as null must still be there.
    let absent = ready.replace("\"out_of_order_migrations\": [],", "");
    assert!(
        parse_status(&child(0, &absent, ""))
            .unwrap_err()
            .to_string()
            .contains("out_of_order_migrations")
    );
    let null = ready.replace(
        "\"out_of_order_migrations\": []",
        "\"out_of_order_migrations\": null",
    );
    parse_status(&child(0, &null, "")).expect("null is an empty list");
    let lying = ready.replace(
        "\"has_pending_changes\": true",
        "\"has_pending_changes\": false",
    );
    assert!(
        parse_status(&child(0, &lying, ""))
            .unwrap_err()
            .to_string()
            .contains("has_pending_changes")
    );
    let atlas = ready.replacen("\"1\",", "\"20260101_a\",", 1);
    assert!(
        parse_status(&child(0, &atlas, ""))
            .unwrap_err()
            .to_string()
            .contains("Atlas")
    );
    let current = ready.replace("\"current_version\": 0", "\"current_version\": 7");
    assert!(
        parse_status(&child(0, &current, ""))
            .unwrap_err()
            .to_string()
            .contains("current_version")
    );
    let e = parse_status(&child(
        2,
        "",
        "error: error connecting to database: refused postgres://u:s3cr3tpw@h/db\n",
    ))
    .unwrap_err();
    assert!(matches!(e, ReportError::Failed { exit: 2, .. }), "{e}");
    assert!(!e.to_string().contains("s3cr3tpw"), "{e}");
}

#[test]
fn up_goldens_parse_to_their_ends() {
    for engine in ["postgresql", "mariadb"] {
        let (applied, nothing, failed, hook) = if engine == "postgresql" {
            (
                golden!("postgresql", "migrations-up-applied"),
                golden!("postgresql", "migrations-up-nothing-to-do"),
                golden!("postgresql", "migrations-up-failed-statement-3"),
                golden!("postgresql", "migrations-up-hook-refused"),
            )
        } else {
            (
                golden!("mariadb", "migrations-up-applied"),
                golden!("mariadb", "migrations-up-nothing-to-do"),
                golden!("mariadb", "migrations-up-failed-statement-3"),
                golden!("mariadb", "migrations-up-hook-refused"),
            )
        };
        let UpEnd::Completed(log) = parse_up(&of(applied)).expect("parses") else {
            panic!("{engine}: completed");
        };
        assert_eq!(log.applied, [1, 2, 3]);
        assert!(log.hook_passed);
        assert!(matches!(
            parse_up(&of(nothing)).expect("parses"),
            UpEnd::UpToDate(_)
        ));
        let UpEnd::Failed {
            version,
            log,
            codes,
            message,
            hook_refused,
        } = parse_up(&of(failed)).expect("parses")
        else {
            panic!("{engine}: failed");
        };
        assert_eq!(version, Some(5));
        assert_eq!(log.applied, [4]);
        assert!(!hook_refused);
        assert!(!message.contains("INSERT"), "{message}");
        assert!(!message.contains("Duplicate"), "{message}");
        let want = if engine == "postgresql" {
            (Some("23505".into()), None)
        } else {
            (Some("23000".into()), Some(1062))
        };
        assert_eq!(codes, want);
        let UpEnd::Failed {
            hook_refused, log, ..
        } = parse_up(&of(hook)).expect("parses")
        else {
            panic!("{engine}: refused");
        };
        assert!(hook_refused);
        assert!(log.started.is_empty());
    }
    let UpEnd::Failed {
        version, message, ..
    } = parse_up(&of(golden!("mariadb", "migrations-up-file-mode-refused"))).expect("parses")
    else {
        panic!("refused");
    };
    assert_eq!(version, None);
    assert!(message.contains("tx-mode none"), "{message}");
}

#[test]
fn the_runners_own_refusal_under_the_lock_is_a_failure_before_any_change() {
    for g in [
        golden!("postgresql", "migrations-up-sequence-refused"),
        golden!("mariadb", "migrations-up-sequence-refused"),
    ] {
        let up = parse_up(&of(g));
        let UpEnd::Failed {
            hook_refused,
            message,
            log,
            ..
        } = up.clone().expect("parses")
        else {
            panic!("refused");
        };
        assert!(hook_refused);
        assert!(log.started.is_empty());
        assert!(message.contains("(3, 5], hash to sha256:"), "{message}");
        let done = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        let seq: Vec<PlannedMigration> = dir("postgresql", "failing")
            .migrations
            .range(4..)
            .map(|(_, m)| m.planned())
            .collect();
        let o = decide_run(EngineArg::Postgresql, &seq, &done.status, up, Ok(&done));
        assert_eq!(
            o.result,
            RunResult::Failed {
                selected: false,
                failure: None
            }
        );
        assert!(o.message.unwrap_or_default().contains("pre-up hook"));
    }
}

#[test]
fn up_output_that_breaks_the_contract_is_refused_naming_what() {
    let applied = golden!("postgresql", "migrations-up-applied").0;
    let e = parse_up(&child(0, "Applying migration 1\n", "")).unwrap_err();
    assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
    for exit in [1, 3, -1, 143] {
        let e = parse_up(&child(exit, applied, "")).unwrap_err();
        assert!(matches!(e, ReportError::UnknownExit { .. }), "{exit}: {e}");
    }
    let mut cut = child(0, applied, "");
    cut.stdout_truncated = true;
    assert!(matches!(
        parse_up(&cut).unwrap_err(),
        ReportError::Truncated { .. }
    ));
    let without_end: String = applied
        .lines()
        .filter(|l| !l.contains(UP_COMPLETED))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(matches!(
        parse_up(&child(0, &without_end, "")).unwrap_err(),
        ReportError::Missing {
            what: "completion line",
            ..
        }
    ));
    assert!(matches!(
        parse_up(&child(2, applied, "")).unwrap_err(),
        ReportError::Missing {
            what: "error line",
            ..
        }
    ));
    assert!(
        parse_up(&child(0, "", "")).is_err(),
        "no log at all is no success"
    );
    let other = applied.replace("migrations.up", "migrations.down");
    assert!(
        parse_up(&child(0, &other, ""))
            .unwrap_err()
            .to_string()
            .contains("command")
    );
    assert!(
        parse_up(&child(0, applied, "warning\n"))
            .unwrap_err()
            .to_string()
            .contains("stderr")
    );
    let nameless = applied.replacen(",\"version\":1", "", 1);
    assert!(
        parse_up(&child(0, &nameless, ""))
            .unwrap_err()
            .to_string()
            .contains("version")
    );
}

fn sequence(r: &Reading) -> Vec<PlannedMigration> {
    r.report.pending.clone()
}

#[test]
fn runs_end_as_the_goldens_and_the_history_after_them_say() {
    let pg = EngineArg::Postgresql;
    let ready = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-ready"),
        "base",
        "base",
    );
    let done = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-nothing-pending"),
        "base",
        "base",
    );
    let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
    let o = decide_run(pg, &sequence(&ready), &ready.status, up, Ok(&done));
    assert_eq!(o.result, RunResult::Applied);
    assert_eq!(o.applied_versions, [1, 2, 3]);
    assert_eq!(o.target_identity_digest.as_deref(), Some(DIGEST));
    crate::protocol::migrations::check_run(&o).expect("the manager takes it");

    // 4 applied, 5 failed at its third statement: Partial.
    let dirty = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-dirty"),
        "failing",
        "failing",
    );
    let seq = dir("postgresql", "failing")
        .migrations
        .range(4..)
        .map(|(_, m)| m.planned())
        .collect::<Vec<_>>();
    let up = parse_up(&of(golden!(
        "postgresql",
        "migrations-up-failed-statement-3"
    )));
    let o = decide_run(pg, &seq, &done.status, up, Ok(&dirty));
    let failure = RunFailure {
        version: 5,
        statement_position: Some(3),
        sqlstate: Some("23505".into()),
        mysql_errno: None,
    };
    assert_eq!(
        o.result,
        RunResult::Partial {
            failure: Some(failure)
        }
    );
    assert_eq!(o.applied_versions, [4]);
    let message = o.message.clone().unwrap_or_default();
    assert!(
        message.contains("statement 3") && !message.contains("INSERT"),
        "{message}"
    );
    crate::protocol::migrations::check_run(&o).expect("the manager takes it");

    // The same failure with nothing applied before it: Failed, selected.
    let up = parse_up(&of(golden!(
        "postgresql",
        "migrations-up-failed-statement-3"
    )));
    let mut before = dirty.status.clone();
    before.dirty_revision = None;
    let o = decide_run(pg, &seq[1..], &before, up, Ok(&dirty));
    assert!(
        matches!(
            o.result,
            RunResult::Failed {
                selected: true,
                failure: Some(_)
            }
        ),
        "{:?}",
        o.result
    );

    // The hook refused: nothing ran.
    let up = parse_up(&of(golden!("postgresql", "migrations-up-hook-refused")));
    let o = decide_run(pg, &seq, &done.status, up, Ok(&done));
    assert_eq!(
        o.result,
        RunResult::Failed {
            selected: false,
            failure: None
        }
    );
    assert!(o.applied_versions.is_empty());

    // Ptah said done, the history does not show it: Unknown.
    let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
    let o = decide_run(pg, &sequence(&ready), &ready.status, up, Ok(&ready));
    assert!(
        matches!(o.result, RunResult::Unknown { .. }),
        "{:?}",
        o.result
    );

    // Output the contract does not know: Unknown, naming it.
    let o = decide_run(
        pg,
        &sequence(&ready),
        &ready.status,
        parse_up(&child(0, "garbage\n", "")),
        Ok(&done),
    );
    assert!(matches!(o.result, RunResult::Unknown { .. }));
    assert!(o.message.unwrap_or_default().contains("does not parse"));

    // Up to date, nothing applied: nothing to do.
    let up = parse_up(&of(golden!("postgresql", "migrations-up-nothing-to-do")));
    let o = decide_run(pg, &sequence(&ready), &done.status, up, Ok(&done));
    assert_eq!(o.result, RunResult::NothingToDo);

    // No history after the run: only a complete log is believed.
    let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
    let o = decide_run(
        pg,
        &sequence(&ready),
        &ready.status,
        up,
        Err("connection refused".into()),
    );
    assert_eq!(o.result, RunResult::Applied);
    assert_eq!(o.applied_versions, [1, 2, 3]);
    let up = parse_up(&of(golden!(
        "postgresql",
        "migrations-up-failed-statement-3"
    )));
    let o = decide_run(pg, &seq, &done.status, up, Err("connection refused".into()));
    assert!(
        matches!(o.result, RunResult::Partial { .. }),
        "{:?}",
        o.result
    );
}

#[test]
fn a_mariadb_statement_that_may_have_committed_makes_the_run_unknown() {
    let my = EngineArg::Mysql;
    let ready = reading(
        "mariadb",
        golden!("mariadb", "migrations-status-ready"),
        "base",
        "base",
    );
    let after = reading(
        "mariadb",
        golden!("mariadb", "migrations-status-unknown"),
        "unknown",
        "unknown",
    );
    let up = parse_up(&of(golden!("mariadb", "migrations-up-unknown")));
    // Before the run: a fresh database.
    let mut before = after.status.clone();
    before.applied_migrations.clear();
    let seq: Vec<PlannedMigration> = after
        .directory
        .migrations
        .values()
        .map(DirectoryMigration::planned)
        .collect();
    let o = decide_run(my, &seq, &before, up, Ok(&after));
    let failure = RunFailure {
        version: 2,
        statement_position: Some(3),
        sqlstate: Some("23000".into()),
        mysql_errno: Some(1062),
    };
    assert_eq!(
        o.result,
        RunResult::Unknown {
            failure: Some(failure)
        }
    );
    assert_eq!(o.applied_versions, [1]);
    assert!(!o.message.unwrap_or_default().contains("a@example.com"));
    // The duplicate INSERT of the failing golden is atomic: Partial.
    let dirty = reading(
        "mariadb",
        golden!("mariadb", "migrations-status-dirty"),
        "failing",
        "failing",
    );
    let done = reading(
        "mariadb",
        golden!("mariadb", "migrations-status-nothing-pending"),
        "base",
        "base",
    );
    let up = parse_up(&of(golden!("mariadb", "migrations-up-failed-statement-3")));
    let o = decide_run(my, &dirty.report.pending, &done.status, up, Ok(&dirty));
    assert!(
        matches!(&o.result, RunResult::Partial { failure: Some(f) } if f.statement_position == Some(3) && f.mysql_errno == Some(1062)),
        "{:?}",
        o.result
    );
    // tx-mode file refused before any statement.
    let up = parse_up(&of(golden!("mariadb", "migrations-up-file-mode-refused")));
    let o = decide_run(my, &ready.report.pending, &before, up, Ok(&ready));
    assert_eq!(
        o.result,
        RunResult::Failed {
            selected: false,
            failure: None
        }
    );
}

#[test]
fn the_hook_accepts_exactly_the_approved_sequence() {
    let base = source("postgresql", "base");
    let r = reading(
        "postgresql",
        golden!("postgresql", "migrations-status-ready"),
        "base",
        "base",
    );
    let all = sequence_digest(&r.report.pending).expect("digest");
    let two = sequence_digest(&r.report.pending[..2]).expect("digest");
    check_sequence(&base, &all, 0, 3).expect("the same sequence");
    check_sequence(&base, &two, 0, 2).expect("a prefix under --limit");
    assert!(
        check_sequence(&base, &all, 0, 2)
            .unwrap_err()
            .contains(&two)
    );
    assert!(
        check_sequence(&base, &all, 1, 3).is_err(),
        "a history moved forward"
    );
    assert!(
        check_sequence(&base, &all, 3, 3)
            .unwrap_err()
            .contains("no migration")
    );
    assert!(check_sequence(Path::new("/nonexistent/ptah"), &all, 0, 3).is_err());
    // A different file under the same versions.
    let modified = source("postgresql", "modified");
    assert!(check_sequence(&modified, &all, 0, 3).is_err());
    assert_eq!(
        approved_prefix(&r.report.pending, &two).map(<[_]>::len),
        Some(2)
    );
    assert_eq!(approved_prefix(&r.report.pending, DIGEST), None);
}

#[test]
fn the_hook_follows_a_checkpoint_bootstrap_on_a_fresh_database() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pair = |name: &str, up: &str| {
        std::fs::write(tmp.path().join(format!("{name}.up.sql")), up).expect("write");
        std::fs::write(tmp.path().join(format!("{name}.down.sql")), "SELECT 1;\n").expect("write");
    };
    pair("0000000001_a", "CREATE TABLE a (id int);\n");
    pair("0000000002_b", "CREATE TABLE b (id int);\n");
    pair(
        "0000000003_snapshot.checkpoint",
        "CREATE TABLE a (id int);\nCREATE TABLE b (id int);\n",
    );
    pair("0000000004_c", "CREATE TABLE c (id int);\n");
    let d = read_directory(tmp.path()).expect("reads");
    assert!(d.migrations[&3].checkpoint);
    let fresh: Vec<i64> = hook_selection(&d, 0, 4).iter().map(|m| m.version).collect();
    assert_eq!(fresh, [3, 4], "the checkpoint, then what follows it");
    let migrated: Vec<i64> = hook_selection(&d, 2, 4).iter().map(|m| m.version).collect();
    assert_eq!(
        migrated,
        [4],
        "a checkpoint never runs on a migrated database"
    );
    let planned: Vec<PlannedMigration> = [3, 4].iter().map(|v| d.migrations[v].planned()).collect();
    check_sequence(
        tmp.path(),
        &sequence_digest(&planned).expect("digest"),
        0,
        4,
    )
    .expect("the bootstrap");
}

#[test]
fn the_table_read_takes_the_urls_tls_modes_and_credentials() {
    for verify in [Verify::None, Verify::Chain, Verify::Full] {
        tls_config(verify, None).expect("a rustls config");
    }
    let e = tls_config(Verify::Full, Some("/nonexistent/root.pem")).unwrap_err();
    assert!(e.contains("sslrootcert"), "{e}");
    assert_eq!(percent_decode("p%40ss%2Fw"), "p@ss/w");
    assert_eq!(percent_decode("100%"), "100%");
    let mut present: BTreeSet<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    check_columns(&present).expect("Ptah's layout");
    present.remove("execution_time_ms");
    check_columns(&present).expect("an older layout, without the duration");
    present.remove("checksum");
    assert!(check_columns(&present).unwrap_err().contains("checksum"));
    assert!(
        check_columns(&BTreeSet::new())
            .unwrap_err()
            .contains("missing")
    );
}

#[test]
fn the_hook_command_quotes_its_words() {
    let cmd = hook_command(
        Path::new("/usr/local/bin/ptah-runner"),
        DIGEST,
        Path::new("/source"),
    );
    assert_eq!(
        cmd,
        format!("'/usr/local/bin/ptah-runner' 'check-sequence' '--sequence-digest={DIGEST}' '--source=/source'")
            .replace("'check-sequence'", "check-sequence")
    );
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
}

#[test]
fn the_failing_statement_is_placed_or_left_unknown() {
    let sql = "CREATE TABLE carriers (id integer PRIMARY KEY);\nINSERT INTO carriers (id) VALUES (1);\nINSERT INTO carriers (id) VALUES (2), (1);\n";
    assert_eq!(
        statement_position(sql, 0, "INSERT INTO carriers (id) VALUES (2), (1)"),
        Some(3),
        "rolled back: found once"
    );
    assert_eq!(
        statement_position(sql, 2, "INSERT INTO carriers (id) VALUES (2), (1)"),
        Some(3),
        "progress recorded"
    );
    let twice = "INSERT INTO t VALUES (1);\nINSERT INTO t VALUES (1);\n";
    assert_eq!(
        statement_position(twice, 0, "INSERT INTO t VALUES (1)"),
        None,
        "ambiguous: not guessed"
    );
    assert_eq!(
        statement_position(twice, 1, "INSERT INTO t VALUES (1)"),
        Some(2)
    );
    assert_eq!(statement_position(sql, 0, "DROP TABLE x"), None);
    let tricky = "-- +ptah no_transaction\nCREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;\n/* ; */ SELECT ';';\nSELECT \"a;b\" FROM t; -- tail ;\n";
    assert_eq!(
        split_statements(tricky),
        [
            "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql",
            "SELECT ';'",
            "SELECT \"a;b\" FROM t"
        ]
    );
    assert_eq!(
        split_statements("-- only a comment\n"),
        Vec::<String>::new()
    );
}

#[test]
fn driver_codes_and_versions_are_read_from_the_text_only() {
    assert_eq!(
        driver_codes("ERROR: relation \"x\" already exists (SQLSTATE 42P07)"),
        (Some("42P07".into()), None)
    );
    assert_eq!(
        driver_codes("Error 1061 (42000): Duplicate key name 'i'"),
        (Some("42000".into()), Some(1061))
    );
    assert_eq!(driver_codes("no codes here (SQLSTATE 4"), (None, None));
    assert_eq!(
        failed_version("failed to apply migration 0000000005: x"),
        Some(5)
    );
    assert_eq!(failed_version("nothing"), None);
    let line = "error: error running migrations: failed to apply migration 2: failed to execute migration SQL: Error 1062 (23000): Duplicate entry 'a@example.com' for key 'e'\nSQL: CREATE UNIQUE INDEX e ON c (email)\n";
    let m = ptah_error(line.as_bytes());
    assert_eq!(m, "error running migrations: failed to apply migration 2…");
    let dirty = "error: migration 4 is dirty: state=failed applied=0/3 error=\"x\" error_stmt=\"INSERT INTO t VALUES (42)\"\n";
    assert!(!ptah_error(dirty.as_bytes()).contains("42"));
    assert!(failure_may_have_committed(
        EngineArg::Mysql,
        "CREATE UNIQUE INDEX e ON c (email)"
    ));
    assert!(failure_may_have_committed(
        EngineArg::Mysql,
        "-- c\nALTER TABLE t ADD x int"
    ));
    assert!(!failure_may_have_committed(
        EngineArg::Mysql,
        "INSERT INTO t VALUES (1)"
    ));
    assert!(!failure_may_have_committed(
        EngineArg::Mysql,
        "  replace into t values (1)"
    ));
    assert!(!failure_may_have_committed(
        EngineArg::Postgresql,
        "CREATE UNIQUE INDEX e ON c (email)"
    ));
}

#[test]
fn file_names_descriptions_and_declared_modes_read_as_ptah_reads_them() {
    assert_eq!(
        parse_file_name("0000000003_order_index.up.sql"),
        Some((3, "order_index".into(), true, false))
    );
    assert_eq!(
        parse_file_name("0000000003_snap.checkpoint.down.sql"),
        Some((3, "snap".into(), false, true))
    );
    for bad in [
        "0003_short.up.sql",
        "0000000003_.up.sql",
        "0000000003-x.up.sql",
        "0000000003_x.sql",
        "README.md",
    ] {
        assert_eq!(parse_file_name(bad), None, "{bad}");
    }
    assert_eq!(description_of("order_index"), "Order Index");
    assert_eq!(description_of("ADD_users"), "Add Users");
    assert_eq!(
        declared_transaction_mode("-- +ptah no_transaction\nCREATE INDEX i ON t (x);"),
        Some(MigrationTransactionMode::None)
    );
    assert_eq!(
        declared_transaction_mode("-- atlas:txmode none\n\nSELECT 1;"),
        Some(MigrationTransactionMode::None)
    );
    assert_eq!(
        declared_transaction_mode("CREATE TABLE t (id int);\n-- +ptah no_transaction\n"),
        None,
        "only the header counts"
    );
    assert_eq!(declared_transaction_mode("SELECT 1;"), None);
}

#[test]
fn a_directory_ptah_would_hash_otherwise_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let write =
        |name: &str, body: &str| std::fs::write(tmp.path().join(name), body).expect("write");
    write("0000000001_a.up.sql", "SELECT 1;\n");
    let e = read_directory(tmp.path()).unwrap_err();
    assert!(e.reason.contains("version 1"), "{e}");
    write("0000000001_a.down.sql", "SELECT 1;\n");
    let d = read_directory(tmp.path()).expect("reads");
    assert_eq!(
        d.migrations[&1].checksum,
        hex::encode(sha2_digest(b"SELECT 1;\n"))
    );
    assert!(!d.sealed);
    write("0000000002_t.up.sql", "SELECT {{ .Env }};\n");
    write("0000000002_t.down.sql", "SELECT 1;\n");
    assert!(
        read_directory(tmp.path())
            .unwrap_err()
            .file
            .contains("0000000002_t.up.sql")
    );
    std::fs::remove_file(tmp.path().join("0000000002_t.up.sql")).expect("rm");
    std::fs::remove_file(tmp.path().join("0000000002_t.down.sql")).expect("rm");
    std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("0000000003_l.up.sql"))
        .expect("symlink");
    assert!(
        read_directory(tmp.path())
            .unwrap_err()
            .reason
            .contains("symbolic link")
    );
    std::fs::remove_file(tmp.path().join("0000000003_l.up.sql")).expect("rm");
    write("atlas.sum", "h1:x\n");
    assert!(
        read_directory(tmp.path())
            .unwrap_err()
            .reason
            .contains("Atlas")
    );
    // The checksums Ptah recorded in schema_migrations for these files
    // (read from the scratch PostgreSQL after `up`).
    let base = dir("postgresql", "base");
    assert!(base.sealed);
    assert_eq!(
        base.migrations[&2].checksum,
        "5a16340fb68b54560a5800622ff3b3c60877d3526d51ff4989358bb5220c1397"
    );
    assert_eq!(
        base.migrations[&3].checksum,
        "2ddddf745c628cbbfa5dbe15101c8c5e8c070e331beb3c0f328159c42d0eb56c"
    );
}

#[test]
fn execution_millis_is_absent_where_the_table_does_not_record_it() {
    let dir = dir("postgresql", "base");
    let mut row = applied_row(1, &dir);
    assert_eq!(row.revision().execution_millis, Some(20));
    // A column an older layout lacks, and the value a row gets when no
    // statement was timed (`migrations set`): neither is a duration.
    row.execution_millis = None;
    assert_eq!(row.revision().execution_millis, None);
    row.execution_millis = Some(-1);
    assert_eq!(row.revision().execution_millis, None);
}
