//! The README's demo, as the test command runs it: `ptah-harness demo` on
//! the shared harness ends with its PtahSchema `InSync` and the table in the
//! database (it fails otherwise: `demo::run` refuses any other end, and
//! reads the table back with `psql`).

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_ends_in_sync_with_the_table_in_the_database() -> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    conformance::demo::run(harness).await
}
