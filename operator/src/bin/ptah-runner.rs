//! The runner: PID 1 of every operation container and of the source init
//! containers. It runs exactly one operation and delivers one result.
use clap::{Parser, Subcommand};

/// Runs one Ptah operation inside a Job and delivers its result.
#[derive(Parser)]
#[command(name = "ptah-runner", version = ptah_operator::VERSION)]
struct Args {
    #[command(subcommand)]
    operation: Operation,
}

#[derive(Subcommand)]
enum Operation {
    /// Resolve a Git or OCI source to a commit or digest (stage 1).
    Resolve,
    /// Verify an OCI artifact against its verification policy (stage 1).
    Verify,
    /// Read a schema's drift report from the database (stage 2).
    Observe,
    /// Compute a scoped plan under the realm Lease (stage 2).
    Plan,
    /// Apply the exact published plan bytes, or a migration sequence (stage 4).
    Apply,
    /// Read a migration history (stages 2 and 5).
    History,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = match args.operation {
        Operation::Resolve => "Resolve",
        Operation::Verify => "Verify",
        Operation::Observe => "Observe",
        Operation::Plan => "Plan",
        Operation::Apply => "Apply",
        Operation::History => "History",
    };
    anyhow::bail!("operation {name} is not implemented yet; see README.md")
}
