//! `kubectl ptah`: follow and steer a change through the six stages.
use clap::{Parser, Subcommand};

/// Follow and steer PtahSchema and PtahMigration changes from kubectl.
#[derive(Parser)]
#[command(name = "kubectl-ptah", bin_name = "kubectl ptah", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the current plan of a resource (stage 2); --applied for the last applied one.
    Plan,
    /// Approve the exact plan a resource shows (stage 3).
    Approve,
    /// Wait until a resource's change has been applied and verified (stages 4-5).
    Wait,
    /// Ask a resource to read its source and database again now.
    Refresh,
    /// Point a resource at another OCI artifact (stage 1).
    SetSource,
    /// Show a PtahSchema through its stages.
    Schema,
    /// Show a PtahMigration through its stages.
    Migration,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = match args.command {
        Command::Plan => "plan",
        Command::Approve => "approve",
        Command::Wait => "wait",
        Command::Refresh => "refresh",
        Command::SetSource => "set-source",
        Command::Schema => "schema",
        Command::Migration => "migration",
    };
    anyhow::bail!("`kubectl ptah {name}` is not implemented yet; see README.md")
}
