//! The manager: watches PtahSchema and PtahMigration resources and drives
//! them through the six stages.
use clap::Parser;

/// Keeps PostgreSQL and MySQL/MariaDB schemas converged on what PtahSchema and
/// PtahMigration resources declare.
#[derive(Parser)]
#[command(name = "ptah-operator", version = ptah_operator::VERSION)]
struct Args {
    /// Address the health and metrics endpoints listen on.
    #[arg(long, default_value = "0.0.0.0:8080", env = "PTAH_METRICS_ADDR")]
    metrics_addr: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::bail!(
        "the manager has no controllers yet (metrics address {}); see README.md",
        args.metrics_addr
    )
}
