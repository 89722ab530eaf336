//! The command line of `kubectl ptah` and what each verb does with it.

use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::follow::{self, For, parse_timeout};
use crate::output::{self, Format};
use crate::plan::Which;
use crate::resource::{self, Kind, Target, get};
use crate::{Failure, approve, history, plan, preview, refresh, set_source, stages, trace};

const EXAMPLES: &str = "\
Examples:
  kubectl ptah schema orders -n application         the schema through its six stages
  kubectl ptah schema -A                            every PtahSchema, in every namespace
  kubectl ptah plan schema/orders                   the plan, its SQL and findings
  kubectl ptah plan schema/orders --applied         the plan the last confirmed Apply ran
  kubectl ptah preview schema/orders --dir ./schema  the plan these files would get, before merge
  kubectl ptah preview migration/orders --migrations ./migrations -o markdown
  kubectl ptah approve schema/orders --wait         approve the exact plan shown, follow it to InSync
  kubectl ptah wait migration/orders --timeout 10m  until InSync; exit 2 on Blocked or Failed
  kubectl ptah wait migration/orders --for=version=3  until the database is at version 3 or later
  kubectl ptah refresh migration/orders --wait      read the database again now
  kubectl ptah set-source schema/orders oci://registry.example/app/schema:v2
  kubectl ptah history schema/orders                the journal, with coveredSince
  kubectl ptah trace schema/orders --last 2         the change before the newest, as a waterfall

Exit codes: 0 done, 1 error, 2 Blocked or Failed, 3 timed out, 4 not found, 64 bad command line.
preview: 0 no change, 2 a change (approval or not), 3 refused by policy, 1 no answer.";

/// Follow and steer PtahSchema and PtahMigration changes through their six
/// stages: Source, Plan, Decision, Execution, Verification, History.
#[derive(Parser, Debug)]
#[command(name = "kubectl-ptah", bin_name = "kubectl ptah", version, after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(ClapArgs, Debug, Clone)]
pub struct Global {
    /// Path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG", hide_env_values = true)]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show a PtahSchema through its six stages; without NAME, list them.
    Schema(Show),
    /// Show a PtahMigration through its six stages; without NAME, list them.
    Migration(Show),
    /// Show a resource's plan: identity, contents (SQL, or versions and checksums), findings, source binding.
    Plan {
        /// schema/NAME or migration/NAME.
        target: Target,
        /// The plan the last confirmed Apply (or run) carried out.
        #[arg(long)]
        applied: bool,
    },
    /// The plan local files would get, before merge: the resource's read-only Plan (or History reading) in a Job against its live database; nothing is stored as its source and nothing can be approved. Exit 0 no change, 2 a change, 3 refused by policy.
    Preview {
        /// schema/NAME or migration/NAME.
        target: Target,
        /// A schema's directory of SQL files.
        #[arg(long, value_name = "DIR", conflicts_with = "migrations")]
        dir: Option<std::path::PathBuf>,
        /// A migration's directory of versioned files.
        #[arg(long, value_name = "DIR")]
        migrations: Option<std::path::PathBuf>,
        #[arg(long, default_value = "5m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Show the exact plan, then approve it by UID and fingerprint (stage 3).
    Approve {
        target: Target,
        /// Approve without asking.
        #[arg(short = 'y', long)]
        yes: bool,
        /// Follow the Apply and its proof to the verdict.
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Wait until InSync, --for a phase, --for=version=N (a migration's database at N or later) or --for=digest=sha256:… (a schema InSync at that content); Blocked and Failed end the wait with exit 2.
    Wait {
        target: Target,
        /// A phase, version=N or digest=sha256:….
        #[arg(long = "for", default_value = "InSync")]
        for_: For,
        #[arg(long, default_value = "5m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Ask for a read of the source and database now (the read-request annotation).
    Refresh {
        target: Target,
        /// Wait for the read the request starts.
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value = "5m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Point a resource at another OCI artifact (stage 1), with server-side apply.
    SetSource {
        target: Target,
        /// oci://HOST/REPOSITORY[:TAG][@sha256:DIGEST]
        reference: String,
        /// Take the field even when a GitOps controller owns it.
        #[arg(long)]
        force: bool,
        /// Print what would change; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The journal as a table, with how far back it is complete.
    History { target: Target },
    /// A change's trace as a waterfall: stages, waits, Jobs, durations.
    Trace {
        target: Target,
        /// The Nth newest change (1: the newest, or the one under way).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        last: u32,
        /// The tracing backend's query API (Jaeger), e.g. http://jaeger-query:16686.
        #[arg(long, env = "PTAH_TRACES_URL")]
        traces_url: Option<String>,
        /// Also draw the waterfall as an SVG picture into FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<std::path::PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion { shell: clap_complete::Shell },
}

#[derive(ClapArgs, Debug)]
pub struct Show {
    /// The resource; omit to list.
    pub name: Option<String>,
    /// List in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

/// A client and the namespace from the kubeconfig and the flags.
pub async fn connect(g: &Global) -> Result<(Client, String), Failure> {
    let options = KubeConfigOptions {
        context: g.context.clone(),
        ..Default::default()
    };
    let config = match &g.kubeconfig {
        Some(path) => {
            // KUBECONFIG may list several files; kube merges them.
            let mut merged: Option<Kubeconfig> = None;
            for p in std::env::split_paths(path) {
                let kc = Kubeconfig::read_from(&p).map_err(|e| {
                    Failure::error(format!("reading kubeconfig {}: {e}", p.display()))
                })?;
                merged = Some(match merged {
                    Some(m) => m
                        .merge(kc)
                        .map_err(|e| Failure::error(format!("merging kubeconfigs: {e}")))?,
                    None => kc,
                });
            }
            let kc = merged.ok_or_else(|| Failure::error("KUBECONFIG names no file"))?;
            Config::from_custom_kubeconfig(kc, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| Failure::error(format!("loading the kubeconfig: {e}")))?;
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client =
        Client::try_from(config).map_err(|e| Failure::error(format!("connecting: {e}")))?;
    Ok((client, namespace))
}

/// Runs the verb.
pub async fn run(args: Args) -> Result<(), Failure> {
    if let Command::Completion { shell } = &args.command {
        let mut cmd = <Args as clap::CommandFactory>::command();
        clap_complete::generate(*shell, &mut cmd, "kubectl-ptah", &mut std::io::stdout());
        return Ok(());
    }
    let g = args.global.clone();
    let (client, ns) = connect(&g).await?;
    match args.command {
        Command::Schema(show) => show_or_list(&client, &ns, &g, Kind::Schema, show).await,
        Command::Migration(show) => show_or_list(&client, &ns, &g, Kind::Migration, show).await,
        Command::Plan { target, applied } => {
            let r = get(&client, &ns, &target).await?;
            let which = if applied {
                Which::Applied
            } else {
                Which::Current
            };
            let view = plan::read(&client, &r, which).await?;
            output::print(g.output, &view, plan::render)
        }
        Command::Preview {
            target,
            dir,
            migrations,
            timeout,
        } => {
            let files = match (target.kind, dir, migrations) {
                (Kind::Schema, Some(d), None) | (Kind::Migration, None, Some(d)) => d,
                (Kind::Schema, ..) => {
                    return Err(Failure::usage(
                        "preview schema/NAME takes --dir DIR (its SQL files)",
                    ));
                }
                (Kind::Migration, ..) => {
                    return Err(Failure::usage(
                        "preview migration/NAME takes --migrations DIR (its versioned files)",
                    ));
                }
            };
            let files = preview::read_dir(&files)?;
            let r = get(&client, &ns, &target).await?;
            let answer = preview::run(&client, &r, &files, timeout).await?;
            let view = preview::view(&r, &files, &answer);
            match g.output {
                output::Format::Markdown => print!("{}", preview::markdown(&view)),
                format => output::print(format, &view, preview::render)?,
            }
            // The verdict is printed: its code only.
            match view.exit_code {
                0 => Ok(()),
                code => Err(Failure::new(code, String::new())),
            }
        }
        Command::History { target } => {
            let r = get(&client, &ns, &target).await?;
            output::print(g.output, &history::view(&r), history::render)
        }
        Command::Trace {
            target,
            last,
            traces_url,
            svg,
        } => {
            let base = trace::base_url(traces_url)?;
            let r = get(&client, &ns, &target).await?;
            let found = trace::fetch(&base, &r, last as usize).await?;
            let view = trace::view(&r, &found);
            if let Some(path) = svg {
                std::fs::write(&path, trace::svg(&view))
                    .map_err(|e| Failure::error(format!("writing {}: {e}", path.display())))?;
            }
            output::print(g.output, &view, trace::render)
        }
        Command::Approve {
            target,
            yes,
            wait,
            timeout,
        } => {
            let r = get(&client, &ns, &target).await?;
            let shown = approve::approvable(&r)?;
            let view = plan::read(&client, &r, Which::Current).await?;
            output::print(g.output, &view, plan::render)?;
            if view.uid != shown.1 || view.fingerprint != shown.2 {
                return Err(approve::refused(
                    &shown,
                    &get(&client, &ns, &target).await?,
                    "the plan changed while it was read",
                ));
            }
            if !yes && !approve::confirm(&shown.0).await? {
                return Err(Failure::error(format!(
                    "approved nothing: plan {} was not confirmed",
                    shown.0
                )));
            }
            let (name, uid, approver) =
                approve::create(&client, &r, &shown, &view.approves).await?;
            eprintln!(
                "approved plan {} of {} as {name} (approver {approver})",
                shown.0,
                r.cli_name()
            );
            if wait {
                let done = follow::follow(
                    &client,
                    &ns,
                    &target,
                    timeout,
                    "to apply and prove the plan",
                    |now| approve::wait_step(now, &uid, &shown.0),
                )
                .await?;
                eprintln!("{} is InSync", done.cli_name());
            }
            Ok(())
        }
        Command::Wait {
            target,
            for_,
            timeout,
        } => {
            if let Some(f) = follow::refused(&for_, target.kind) {
                return Err(f);
            }
            let what = format!("to be {for_}");
            let done = follow::follow(&client, &ns, &target, timeout, &what, |r| match &for_ {
                For::Phase(phase) => follow::wait_step(r, phase),
                For::Ready(wanted) => follow::ready_step(r, wanted),
            })
            .await?;
            match &for_ {
                For::Phase(phase) => eprintln!("{} is {phase}", done.cli_name()),
                For::Ready(wanted) => {
                    let now = follow::readiness_of(&done, wanted);
                    eprintln!("{}", now.as_ref().map_or("", |r| r.sentence()));
                }
            }
            Ok(())
        }
        Command::Refresh {
            target,
            wait,
            timeout,
        } => {
            let r = get(&client, &ns, &target).await?;
            let asked = k8s_openapi::jiff::Timestamp::now();
            let value = refresh::spelled(refresh::next_value(
                asked,
                r.read_request_annotation().as_deref(),
                r.last_read_request().as_deref(),
            ));
            refresh::write(&client, &r, &value).await?;
            eprintln!(
                "asked {} for a read ({} = {value})",
                r.cli_name(),
                operator::api::annotations::READ_REQUESTED_AT
            );
            if wait {
                let mut waiting = refresh::Waiting::new(value.clone(), &r);
                let done = follow::follow(
                    &client,
                    &ns,
                    &target,
                    timeout,
                    "to answer the read request",
                    |now| waiting.step(now),
                )
                .await?;
                let (reason, _) = done.verdict();
                eprintln!(
                    "read: {} is {} ({reason})",
                    done.cli_name(),
                    done.phase().unwrap_or_default()
                );
            }
            Ok(())
        }
        Command::SetSource {
            target,
            reference,
            force,
            dry_run,
        } => {
            set_source::checked_reference(&reference)?;
            let r = get(&client, &ns, &target).await?;
            let Some(old) = r.oci_ref() else {
                return Err(Failure::error(format!(
                    "{} does not read an OCI source; set-source moves spec.source.oci.ociRef only",
                    r.cli_name()
                )));
            };
            let owners = set_source::ref_owners(r.managed_fields());
            if let Some(owner) = set_source::gitops_owner(&owners)
                && !force
            {
                return Err(set_source::refusal(&r, &owner, &old, &reference));
            }
            set_source::apply(&client, &r, &reference, dry_run).await?;
            let owned = if owners.is_empty() {
                String::new()
            } else {
                format!(" (taken from {})", owners.join(", "))
            };
            if dry_run {
                println!(
                    "would set spec.source.oci.ociRef of {}: {old} → {reference}{owned}",
                    r.cli_name()
                );
            } else {
                println!(
                    "set spec.source.oci.ociRef of {}: {old} → {reference}{owned}",
                    r.cli_name()
                );
                eprintln!(
                    "the next read resolves it: kubectl ptah wait {}",
                    r.cli_name()
                );
            }
            Ok(())
        }
        Command::Completion { .. } => Ok(()),
    }
}

async fn show_or_list(
    client: &Client,
    ns: &str,
    g: &Global,
    kind: Kind,
    show: Show,
) -> Result<(), Failure> {
    if let Some(name) = show.name {
        let target = Target { kind, name };
        let r = get(client, ns, &target).await?;
        return output::print(g.output, &stages::overview(&r), stages::render);
    }
    let scope = (!show.all_namespaces).then_some(ns);
    let list = resource::list(client, kind, scope)
        .await
        .map_err(|e| Failure::api(format!("listing {}s", kind.api_kind()), e))?;
    let views: Vec<stages::Overview> = list.iter().map(stages::overview).collect();
    output::print(g.output, &views, |views| {
        let header = ["NAMESPACE", "NAME", "PHASE", "REASON", "REVISION"].map(String::from);
        let rows: Vec<[String; 5]> = views
            .iter()
            .zip(&list)
            .map(|(v, r)| {
                [
                    v.namespace.clone(),
                    v.name.clone(),
                    v.phase.clone().unwrap_or_else(|| "-".into()),
                    if v.reason.is_empty() {
                        "-".into()
                    } else {
                        v.reason.clone()
                    },
                    r.revision().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        output::table(&header, &rows)
    })
}
