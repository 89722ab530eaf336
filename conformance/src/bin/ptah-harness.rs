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
    /// Prepare the namespace `ptah-examples` for `examples/harness/` and
    /// start a manager for it (after `up`; `down` stops it).
    Examples,
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
        Cmd::Demo => {
            let build = conformance::demo::LaterBuild::from_env();
            conformance::demo::run(&harness, build.as_ref()).await?;
        }
        Cmd::Examples => examples(&harness).await?,
    }
    Ok(())
}

/// `examples`: the namespace, its databases and sources, the variables the
/// manifests name, and a manager for it with its admission webhooks,
/// recorded beside the harness's own processes (started afresh each time).
async fn examples(harness: &Harness) -> anyhow::Result<()> {
    use conformance::examples::{self, NAMESPACE};
    use conformance::service::log_path;
    use conformance::testkit::admission::{manager_ca, register};
    use conformance::testkit::manager::{ManagerSpec, free_port, start_recorded};
    const MANAGER: &str = "ptah-operator-examples";
    let prepared = examples::prepare(harness, NAMESPACE).await?;
    let env = examples::env_path(harness);
    std::fs::write(&env, prepared.env_file())?;
    let port = free_port()?;
    let spec = ManagerSpec {
        port: Some(port),
        ..ManagerSpec::default()
    };
    // A new CA for the new process: the webhooks trust the one it writes.
    let line = start_recorded(harness, NAMESPACE, MANAGER, &spec)?;
    let ca = manager_ca(&line.tls_dir).await?;
    register(
        &harness.client().await?,
        NAMESPACE,
        "ptah-examples-approvals",
        operator::admission::webhook_configurations,
        format!("https://127.0.0.1:{port}"),
        &ca,
    )
    .await?;
    println!("namespace {NAMESPACE}: three empty PostgreSQL databases and their Secrets,");
    println!("  a Git repository, a signed OCI artifact and its verification policy");
    println!(
        "manager: ptah-operator watching {NAMESPACE}, with its approval webhooks (log: {})",
        log_path(&harness.state, MANAGER).display()
    );
    println!("variables: {}", env.display());
    println!();
    println!("  source .harness/env && source {}", env.display());
    println!(
        "  for f in examples/harness/*.yaml; do envsubst < \"$f\" | kubectl apply --server-side -n {NAMESPACE} -f -; done"
    );
    println!("  kubectl get ptahschemas -n {NAMESPACE} -w");
    Ok(())
}
