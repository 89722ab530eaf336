//! `kubectl ptah`: follow and steer a change through the six stages. kubectl
//! finds this binary on PATH as the plugin `ptah`.

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The rustls provider of every TLS connection (aws-lc-rs, as the manager).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = match gitops::cli::Args::try_parse() {
        Ok(args) => args,
        // Help and version exit 0; a wrong command line exits 64, never 2,
        // which says Blocked or Failed.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            std::process::exit(0);
        }
        // One line naming what is wrong; `--help` has the rest.
        Err(e) => {
            let text = e.render().to_string();
            let line: Vec<&str> = text
                .lines()
                .skip_while(|l| !l.starts_with("error:"))
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{} (see --help)", line.join(" "));
            std::process::exit(gitops::exit::USAGE);
        }
    };
    if let Err(f) = gitops::cli::run(args).await {
        // A verdict already printed (preview's 2 and 3) has no message.
        if !f.message.is_empty() {
            eprintln!("error: {f}");
        }
        std::process::exit(f.code);
    }
}
