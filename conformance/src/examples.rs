//! `ptah-harness examples`: what the manifests in `examples/harness/` need
//! on the local control plane, so that a new user applies them as they are
//! (through `envsubst`, for the addresses the harness picked) and sees each
//! reach `InSync`: one empty PostgreSQL database and its Secret per
//! example, a Git repository holding the schema, the same schema pushed
//! with `ptah schema push` and signed with cosign, and its verification
//! policy; and the empty database docs/migrations.md's walk-through
//! migrates. Preparing again starts the examples over.

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::gitserve::{commit_files, create_repo};
use crate::harness::Harness;
use crate::testkit::database::{Engine, TestDatabase};
use crate::testkit::git::endpoints;
use crate::testkit::oci::{
    Key, Registry, key_policy, push_schema_file, run_ok, sign_command, signed_by_new_key,
};

/// The namespace the README's commands use.
pub const NAMESPACE: &str = "ptah-examples";

/// The schema every example declares.
pub const SCHEMA_SQL: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  created_at timestamptz NOT NULL DEFAULT now()\n);\n";

/// The examples, each with the Secret of its own database.
pub const EXAMPLES: [(&str, &str); 3] = [
    ("schema-configmap.yaml", "configmap-db"),
    ("schema-git.yaml", "git-db"),
    ("schema-oci.yaml", "oci-db"),
];

/// The Secret of the database docs/migrations.md's walk-through migrates.
pub const CATALOG_SECRET: &str = "catalog-db";

/// What the examples' `${…}` name, after [`prepare`].
#[derive(Debug)]
pub struct Prepared {
    /// `PTAH_EXAMPLES_GIT_URL`: the repository holding `db/schema.sql`.
    pub git_url: String,
    /// `PTAH_EXAMPLES_OCI_REF`: the signed artifact, by tag.
    pub oci_ref: String,
    /// The databases, by the Secret that names each.
    pub databases: Vec<(String, TestDatabase)>,
    /// The empty database of docs/migrations.md's walk-through, whose
    /// Secret is [`CATALOG_SECRET`].
    pub catalog: TestDatabase,
}

impl Prepared {
    /// The variables `envsubst` fills in, as `export` lines.
    pub fn env_file(&self) -> String {
        self.vars()
            .iter()
            .map(|(k, v)| format!("export {k}={v}\n"))
            .collect()
    }

    /// The variables `envsubst` fills in.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [
            ("PTAH_EXAMPLES_GIT_URL", self.git_url.clone()),
            ("PTAH_EXAMPLES_OCI_REF", self.oci_ref.clone()),
        ]
    }
}

/// The directory of the examples (`examples/harness/` of the workspace).
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/harness")
}

/// Where [`Prepared::env_file`] is written.
pub fn env_path(harness: &Harness) -> PathBuf {
    harness.state.join("examples.env")
}

/// Makes the namespace `ns` ready for the examples.
pub async fn prepare(harness: &Harness, ns: &str) -> anyhow::Result<Prepared> {
    let client = harness.client().await?;
    crate::crds::install(&client).await?;
    let apply = PatchParams::apply("ptah-harness").force();
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &apply,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut databases = Vec::new();
    for secret in EXAMPLES.iter().map(|(_, s)| *s).chain([CATALOG_SECRET]) {
        let name = format!("{ns}_{}", secret.trim_end_matches("-db"));
        let db = TestDatabase::create(harness, Engine::Postgres, &name)?;
        secrets
            .patch(
                secret,
                &apply,
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": secret},
                    "stringData": {"url": db.url()},
                })),
            )
            .await
            .with_context(|| format!("writing the Secret {secret}"))?;
        databases.push((secret.to_string(), db));
    }

    // The Git source: a repository of the harness's git daemon.
    let ep = endpoints(harness);
    let repo = format!("examples-{ns}");
    let bare = ep.root.join(format!("{repo}.git"));
    if bare.exists() {
        std::fs::remove_dir_all(&bare)?;
    }
    let bare = create_repo(&ep.root, &repo, false)?;
    commit_files(&bare, "main", &[("db/schema.sql", SCHEMA_SQL)], "orders")?;
    let git_url = format!("{}/{repo}.git", ep.daemon_url);

    // The OCI source: pushed with `ptah schema push`, signed with a key of
    // the harness's, and the policy that accepts that key.
    let registry = Registry::from_harness(harness)?;
    let tagged = format!("{}/{ns}/orders:v1", registry.host);
    let pushed = push_schema_file(&tagged, "schema.sql", SCHEMA_SQL.as_bytes()).await?;
    // The same key on every run: the artifact's bytes, and so its digest,
    // are the same each time, and cosign keeps the signature already there
    // rather than adding a second by a new key.
    let keys = harness.state.join("examples").join(ns);
    let pinned = format!("{}/{ns}/orders@{}", registry.host, pushed.digest);
    let signer = match existing_key(&keys.join("signer")) {
        Some(key) => {
            run_ok(
                "cosign sign",
                &mut sign_command(&registry.cosign, &keys, &key, &pinned, true, None),
            )?;
            key
        }
        None => {
            std::fs::create_dir_all(&keys)?;
            signed_by_new_key(&registry, &keys, "signer", &pinned)?
        }
    };
    Api::<ConfigMap>::namespaced(client, ns)
        .patch(
            "orders-verification",
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "orders-verification"},
                "data": {"policy.yaml": key_policy(&signer.public_pem)},
            })),
        )
        .await?;
    let catalog = databases.pop().context("the catalog database")?.1;
    Ok(Prepared {
        git_url,
        oci_ref: format!("oci://{tagged}"),
        databases,
        catalog,
    })
}

/// The key pair an earlier run left in `dir` (password `pw`), if whole.
fn existing_key(dir: &std::path::Path) -> Option<Key> {
    let (private, public) = (dir.join("cosign.key"), dir.join("cosign.pub"));
    let public_pem = std::fs::read_to_string(&public).ok()?;
    private.is_file().then(|| Key {
        private,
        public,
        public_pem,
        password: "pw".into(),
    })
}
