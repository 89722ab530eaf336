//! The local control plane's command line: `up`, `down`, `status`, `env`.
use clap::{Parser, Subcommand};
use conformance::harness::{Harness, default_state_dir};

/// The local control plane: real etcd, kube-apiserver, controller-manager,
/// scheduler, PostgreSQL, MariaDB, git servers and OCI registry, with a
/// process kubelet.
#[derive(Parser)]
#[command(name = "ptah-harness", version)]
struct Args {
    /// State directory (default: $PTAH_HARNESS_DIR, else .harness/ in the workspace).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start everything not running and wait until it is ready (idempotent).
    Up,
    /// Stop every process the harness started, by pid.
    Down,
    /// Show each recorded process and whether it runs.
    Status,
    /// Print the variables a shell or a test needs (`eval "$(ptah-harness env)"`).
    Env,
    /// Show the running control plane at work (after `up`).
    Demo,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let state = args.state_dir.unwrap_or_else(default_state_dir);
    let harness = Harness::beside_current_exe(state)?;
    match args.command {
        Cmd::Up => harness.up().await?,
        Cmd::Down => {
            let stopped = harness.down()?;
            println!("stopped {} processes", stopped.len());
        }
        Cmd::Status => {
            let status = harness.status();
            if status.is_empty() {
                println!("nothing recorded in {}", harness.state.display());
            }
            for (name, pid) in status {
                match pid {
                    Some(pid) => println!("{name:<26} running (pid {pid})"),
                    None => println!("{name:<26} stopped"),
                }
            }
        }
        Cmd::Env => print!("{}", harness.env()?),
        Cmd::Demo => conformance::demo::run(&harness).await?,
    }
    Ok(())
}
