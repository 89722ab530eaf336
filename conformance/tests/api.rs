//! The API (issue 3) on the harness API server: the CRDs installed from
//! `charts/ptah-operator/crds/` exactly as a user installs them, every example
//! accepted, every invalid manifest refused with a message naming the field or
//! the rule, immutable specs refusing updates, status written only through the
//! status subresource, every kind stored losslessly, and `kubectl explain` /
//! `kubectl get ptah -A` reading what the types say. Each test works in its
//! own namespace; cluster-scoped objects get unique names and are deleted.
//!
//! The tables live in `conformance/testdata/` (see its README): one file per
//! case, the expected message fragment on the file's first line.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope as KubeScope};
use kube::{Client, CustomResourceExt, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use conformance::crds::{self, FIELD_MANAGER};
use conformance::harness::Harness;
use conformance::tools;
use operator::api::{self, generate};
use operator::testing;

const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// One test's namespace on the shared harness (with the CRDs installed),
/// deleted at the end of the test together with the cluster-scoped objects
/// the test made, also when it fails.
struct Scope {
    harness: &'static Harness,
    client: Client,
    ns: String,
    /// Appended to the names of cluster-scoped objects.
    suffix: String,
    cluster_objects: Mutex<Vec<(ApiResource, String)>>,
    discovered: Mutex<HashMap<String, (ApiResource, ApiCapabilities)>>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        // A failed test unwinds here (see `clean_up`).
        let harness = self.harness;
        let ns = self.ns.clone();
        let cluster = std::mem::take(
            &mut *self
                .cluster_objects
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        conformance::testkit::clean_up(move || async move {
            let client = harness.client().await?;
            for (ar, name) in cluster {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                ignore_not_found(api.delete(&name, &DeleteParams::default()).await)?;
            }
            let namespaces: Api<Namespace> = Api::all(client);
            ignore_not_found(namespaces.delete(&ns, &DeleteParams::default()).await)
        });
    }
}

fn ignore_not_found<T>(r: Result<T, kube::Error>) -> anyhow::Result<()> {
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(()),
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        let client = harness.client().await?;
        crds::install(&client).await?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos();
        let suffix = format!("{:05x}{:04x}", nanos & 0xfffff, std::process::id() & 0xffff);
        let ns = format!("api-{test}-{suffix}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        Ok(Scope {
            harness,
            client,
            ns,
            suffix,
            cluster_objects: Mutex::new(Vec::new()),
            discovered: Mutex::new(HashMap::new()),
        })
    }

    /// The resource and its scope for a manifest's apiVersion and kind.
    async fn resource(&self, obj: &Value) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        let api_version = obj["apiVersion"]
            .as_str()
            .context("manifest without apiVersion")?;
        let kind = obj["kind"].as_str().context("manifest without kind")?;
        let key = format!("{api_version}/{kind}");
        if let Some(found) = self
            .discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .with_context(|| format!("discovering {key}"))?;
        self.discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, found.clone());
        Ok(found)
    }

    fn api(&self, ar: &ApiResource, namespaced: bool) -> Api<DynamicObject> {
        if namespaced {
            Api::namespaced_with(self.client.clone(), &self.ns, ar)
        } else {
            Api::all_with(self.client.clone(), ar)
        }
    }

    /// Remembers a cluster-scoped object for deletion at the end.
    fn owns_cluster_object(&self, ar: &ApiResource, name: &str) {
        let mut objects = self
            .cluster_objects
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !objects.iter().any(|(a, n)| a.kind == ar.kind && n == name) {
            objects.push((ar.clone(), name.to_string()));
        }
    }

    /// Prepares a manifest for this scope: namespaced objects go into the
    /// test's namespace, cluster-scoped ones get a unique name (and are
    /// deleted at the end). Returns the API to use and the object's name.
    async fn place(&self, obj: &mut Value) -> anyhow::Result<(Api<DynamicObject>, String)> {
        let (ar, caps) = self.resource(obj).await?;
        let namespaced = caps.scope == KubeScope::Namespaced;
        let name = obj["metadata"]["name"]
            .as_str()
            .context("manifest without metadata.name")?
            .to_string();
        let name = if namespaced {
            obj["metadata"]["namespace"] = json!(self.ns);
            name
        } else {
            let unique = self.cluster_name(&name);
            obj["metadata"]["name"] = json!(unique);
            self.owns_cluster_object(&ar, &unique);
            unique
        };
        Ok((self.api(&ar, namespaced), name))
    }

    fn cluster_name(&self, name: &str) -> String {
        format!("{name}-{}", self.suffix)
    }

    /// Server-side apply as `kubectl apply --server-side` does it (strict
    /// field validation, forced). The outer error is the test's own; the
    /// inner one is the API server's answer.
    async fn apply(&self, obj: &Value) -> anyhow::Result<Result<DynamicObject, kube::Error>> {
        let mut obj = obj.clone();
        let (api, name) = self.place(&mut obj).await?;
        let params = PatchParams::apply(FIELD_MANAGER)
            .force()
            .validation_strict();
        Ok(api.patch(&name, &params, &Patch::Apply(&obj)).await)
    }

    /// The stored object a manifest names (after [`Scope::place`]).
    async fn get(&self, obj: &Value) -> anyhow::Result<Value> {
        let mut obj = obj.clone();
        let (api, name) = self.place(&mut obj).await?;
        Ok(serde_json::to_value(api.get(&name).await?)?)
    }

    /// Runs the pinned kubectl against the harness with a discovery cache of
    /// its own (a stale shared cache could miss the new CRDs).
    async fn kubectl(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let cache = tempfile::tempdir()?;
        let kubectl = tools::tool("kubectl")?;
        let mut cmd = tokio::process::Command::new(&kubectl);
        cmd.env("KUBECONFIG", self.harness.kubeconfig())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(args)
            .kill_on_drop(true);
        let out = tokio::time::timeout(KUBECTL_TIMEOUT, cmd.output())
            .await
            .with_context(|| format!("kubectl {args:?} did not finish in {KUBECTL_TIMEOUT:?}"))?
            .with_context(|| format!("running {}", kubectl.display()))?;
        Ok(out)
    }
}

// ---- manifests and tables ----

fn testdata(dir: &str) -> PathBuf {
    tools::workspace_root()
        .join("conformance/testdata")
        .join(dir)
}

fn examples_dir() -> PathBuf {
    tools::workspace_root().join("examples")
}

/// The YAML files of `dir`, sorted.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One file of a table: its first-line header and its documents.
struct Case {
    name: String,
    header: String,
    docs: Vec<Value>,
}

/// Reads a file whose first line is `# <key>: <value>`.
fn read_case(path: &Path, key: &str) -> anyhow::Result<Case> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let prefix = format!("# {key}: ");
    let header = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix(&prefix))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .with_context(|| format!("{} does not begin with `{prefix}…`", path.display()))?
        .to_string();
    Ok(Case {
        name: file_name(path),
        header,
        docs: documents(&text).with_context(|| format!("parsing {}", path.display()))?,
    })
}

/// The documents of a YAML stream, without empty ones.
fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn refusal(r: &Result<DynamicObject, kube::Error>) -> Option<String> {
    match r {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(format!(
            "{} (HTTP {}, reason {})",
            status.message, status.code, status.reason
        )),
        Err(e) => Some(format!("not an API refusal: {e}")),
    }
}

/// Where `sent` is not contained in `stored`: every key of an object sent is
/// stored with a contained value; lists are compared item by item.
fn not_contained(path: &str, sent: &Value, stored: &Value, out: &mut Vec<String>) {
    match (sent, stored) {
        (Value::Object(s), Value::Object(t)) => {
            for (k, v) in s {
                match t.get(k) {
                    Some(w) => not_contained(&format!("{path}.{k}"), v, w, out),
                    None => out.push(format!("{path}.{k}: sent, not stored")),
                }
            }
        }
        (Value::Array(s), Value::Array(t)) if s.len() == t.len() => {
            for (i, (v, w)) in s.iter().zip(t).enumerate() {
                not_contained(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if sent == stored => {}
        _ => out.push(format!("{path}: sent {sent}, stored {stored}")),
    }
}

/// Every path at which two JSON values differ.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => differences(&format!("{path}.{k}"), v, w, out),
                    (Some(v), None) => out.push(format!("{path}.{k}: {v} became absent")),
                    (None, Some(w)) => out.push(format!("{path}.{k}: absent became {w}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: {a} became {b}")),
    }
}

fn report(what: &str, total: usize, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} of {total} {what}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---- the CRDs ----

#[tokio::test]
async fn the_crds_install_by_server_side_apply_and_serve_every_kind_in_category_ptah() {
    let scope = Scope::new("crds").await.expect("scope");
    // A second install is a no-op that still succeeds (tests run it at once).
    let names = crds::install(&scope.client).await.expect("install again");
    let generated: BTreeSet<String> = generate::crds()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names.iter().cloned().collect::<BTreeSet<_>>(),
        generated,
        "the checked-in CRD files are exactly the generated kinds"
    );
    let mut problems = Vec::new();
    // What the server holds is what the files say, Established.
    let crd_api: Api<CustomResourceDefinition> = Api::all(scope.client.clone());
    for file in crds::read_crds(&crds::crd_dir()).expect("CRD files") {
        let name = file.metadata.name.clone().unwrap_or_default();
        let stored = crd_api.get(&name).await.expect("stored CRD");
        let mut diffs = Vec::new();
        differences(
            "spec.versions",
            &serde_json::to_value(&file.spec.versions).expect("json"),
            &serde_json::to_value(&stored.spec.versions).expect("json"),
            &mut diffs,
        );
        if !diffs.is_empty() {
            problems.push(format!(
                "{name}: stored differently from its file: {diffs:?}"
            ));
        }
        let established = stored
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if !established {
            problems.push(format!("{name}: not Established"));
        }
    }
    for crd in generate::crds() {
        let kind = crd.spec.names.kind.clone();
        let probe = json!({"apiVersion": api::API_VERSION, "kind": kind});
        let (ar, caps) = scope.resource(&probe).await.expect("discovery");
        let want_scope = if crd.spec.scope == "Cluster" {
            KubeScope::Cluster
        } else {
            KubeScope::Namespaced
        };
        if caps.scope != want_scope {
            problems.push(format!("{kind}: scope {:?}", caps.scope));
        }
        if ar.plural != crd.spec.names.plural {
            problems.push(format!("{kind}: served as {}", ar.plural));
        }
    }
    // The server's own discovery document: categories and short names.
    let req = http::Request::get(format!("/apis/{}", api::API_VERSION))
        .body(Vec::new())
        .expect("request");
    let list: Value = scope.client.request(req).await.expect("discovery document");
    let served: HashMap<String, &Value> = list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| Some((r["kind"].as_str()?.to_string(), r)))
        .filter(|(_, r)| !r["name"].as_str().unwrap_or_default().contains('/'))
        .collect();
    for crd in generate::crds() {
        let kind = &crd.spec.names.kind;
        let Some(r) = served.get(kind) else {
            problems.push(format!("{kind}: not served"));
            continue;
        };
        if !r["categories"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c == api::CATEGORY))
        {
            problems.push(format!("{kind}: categories {}", r["categories"]));
        }
        let want_short = crd.spec.names.short_names.clone().unwrap_or_default();
        let short: Vec<String> =
            serde_json::from_value(r["shortNames"].clone()).unwrap_or_default();
        if short != want_short {
            problems.push(format!(
                "{kind}: short names {short:?}, want {want_short:?}"
            ));
        }
    }
    report(
        "kinds are not served as generated",
        generated.len(),
        &problems,
    );
}

// ---- examples ----

/// The Secrets and ConfigMaps (with keys) a PtahSchema or PtahMigration names.
fn needed_objects(spec: &Value) -> Vec<(&'static str, String, Option<String>)> {
    let mut need = Vec::new();
    let mut add = |kind: &'static str, v: &Value, with_key: bool| {
        if let Some(name) = v["name"].as_str() {
            let key = with_key
                .then(|| v["key"].as_str().map(str::to_string))
                .flatten();
            need.push((kind, name.to_string(), key));
        }
    };
    add("Secret", &spec["target"]["urlFrom"], true);
    add("Secret", &spec["dev"]["urlFrom"], true);
    add("ConfigMap", &spec["source"]["configMap"], false);
    add("Secret", &spec["source"]["git"]["secretRef"], false);
    add("Secret", &spec["source"]["oci"]["registryAuthFrom"], false);
    add(
        "ConfigMap",
        &spec["source"]["oci"]["transport"]["caFrom"],
        true,
    );
    add("ConfigMap", &spec["source"]["sourcePolicyFrom"], true);
    add("ConfigMap", &spec["source"]["verificationPolicyFrom"], true);
    need
}

fn holds_key(doc: &Value, key: &str) -> bool {
    ["data", "stringData", "binaryData"]
        .iter()
        .any(|field| doc[field].get(key).is_some())
}

#[tokio::test]
async fn every_example_is_accepted_as_a_user_applies_it() {
    let scope = Scope::new("examples").await.expect("scope");
    let dir = examples_dir();
    let files = yaml_files(&dir).expect("examples");
    assert!(!files.is_empty(), "no examples in {}", dir.display());
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("examples/README.md");
    let mut problems = Vec::new();
    if !readme.contains("kubectl apply --server-side -f examples/") {
        problems.push("README.md: does not give `kubectl apply --server-side -f examples/`".into());
    }

    // The documented command, as a user runs it (server dry run: the real
    // objects are applied below, with a unique name for the PtahRealm).
    let dir_arg = format!("{}/", dir.display());
    let out = scope
        .kubectl(&[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-n",
            &scope.ns,
            "-f",
            &dir_arg,
        ])
        .await
        .expect("kubectl apply");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        problems.push(format!(
            "`kubectl apply --server-side -f examples/` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }

    let mut total = 0;
    let mut kinds = BTreeSet::new();
    let mut sources = BTreeSet::new();
    let mut realms = BTreeMap::new();
    let mut all = Vec::new();
    for path in &files {
        let name = file_name(path);
        if !readme.contains(&name) {
            problems.push(format!("README.md: does not explain {name}"));
        }
        let text = std::fs::read_to_string(path).expect("read example");
        let docs = match documents(&text) {
            Ok(d) => d,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        for doc in &docs {
            if doc["kind"] == "PtahRealm" {
                let old = doc["metadata"]["name"].as_str().unwrap_or_default();
                realms.insert(old.to_string(), scope.cluster_name(old));
            }
        }
        all.push((name, docs));
    }

    for (name, docs) in &all {
        for doc in docs {
            total += 1;
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let id = format!("{name}: {kind} {}", doc["metadata"]["name"]);
            if doc["metadata"].get("namespace").is_some() {
                problems.push(format!("{id}: carries a namespace (`-n` picks it)"));
            }
            let spec = &doc["spec"];
            if kind == "PtahSchema" || kind == "PtahMigration" {
                let source = &spec["source"];
                for (present, label) in [
                    (source.get("configMap").is_some(), "ConfigMap"),
                    (source["git"]["ref"].get("branch").is_some(), "Git branch"),
                    (source["git"]["ref"].get("tag").is_some(), "Git tag"),
                    (source["git"]["ref"].get("commit").is_some(), "Git commit"),
                    (
                        source.get("oci").is_some()
                            && source.get("verificationPolicyFrom").is_some(),
                        "OCI with a verification policy",
                    ),
                    (source.get("sourcePolicyFrom").is_some(), "a source policy"),
                ] {
                    if present {
                        sources.insert(label);
                    }
                }
                // Each file carries the Secrets and ConfigMaps its resources name.
                for (need_kind, need_name, key) in needed_objects(spec) {
                    let found = docs.iter().any(|d| {
                        d["kind"] == need_kind
                            && d["metadata"]["name"] == need_name.as_str()
                            && key.as_deref().is_none_or(|k| holds_key(d, k))
                    });
                    if !found {
                        problems.push(format!(
                            "{id}: needs {need_kind} {need_name}{} in the same file",
                            key.map(|k| format!(" with key {k}")).unwrap_or_default()
                        ));
                    }
                }
            }
            if kind == "Secret" {
                // Placeholders only; database URLs point at a loopback address.
                for (key, value) in doc["stringData"].as_object().into_iter().flatten() {
                    let value = value.as_str().unwrap_or_default();
                    let secretish = ["password", "identity", "known_hosts", "url", "bearerToken"];
                    if secretish.contains(&key.as_str()) && !value.contains("REPLACE-ME") {
                        problems.push(format!("{id}: {key} is not an obvious placeholder"));
                    }
                    if key == "url" && !value.contains("@127.0.0.1:") {
                        problems.push(format!("{id}: url does not point at 127.0.0.1"));
                    }
                }
                if doc.get("data").is_some() {
                    problems.push(format!(
                        "{id}: use stringData, so placeholders stay readable"
                    ));
                }
            }
            // Apply for real, a PtahRealm under a unique name.
            let mut doc = doc.clone();
            if let Some(realm) = doc["spec"]["target"]["realmRef"]["name"].as_str()
                && let Some(unique) = realms.get(realm)
            {
                doc["spec"]["target"]["realmRef"]["name"] = json!(unique);
            }
            match scope.apply(&doc).await.expect("apply") {
                Ok(_) => {}
                Err(e) => {
                    problems.push(format!("{id}: refused: {e}"));
                    continue;
                }
            }
            let stored = scope.get(&doc).await.expect("read back");
            let mut missing = Vec::new();
            match kind.as_str() {
                "Secret" => {
                    for (key, value) in doc["stringData"].as_object().into_iter().flatten() {
                        let want = base64::engine::general_purpose::STANDARD
                            .encode(value.as_str().unwrap_or_default());
                        if stored["data"][key] != json!(want) {
                            missing.push(format!("data.{key}"));
                        }
                    }
                }
                "ConfigMap" => not_contained("data", &doc["data"], &stored["data"], &mut missing),
                _ => not_contained("spec", &doc["spec"], &stored["spec"], &mut missing),
            }
            if !missing.is_empty() {
                problems.push(format!("{id}: stored differently: {missing:?}"));
            }
            kinds.insert(kind);
        }
    }
    let dry_run_lines = stdout
        .lines()
        .filter(|l| l.ends_with("serverside-applied (server dry run)"))
        .count();
    if out.status.success() && dry_run_lines != total {
        problems.push(format!(
            "kubectl applied {dry_run_lines} objects, the files hold {total}:\n{stdout}"
        ));
    }
    for crd in generate::crds() {
        if !kinds.contains(&crd.spec.names.kind) {
            problems.push(format!("no example of {}", crd.spec.names.kind));
        }
    }
    for label in [
        "ConfigMap",
        "Git branch",
        "Git tag",
        "Git commit",
        "OCI with a verification policy",
        "a source policy",
    ] {
        if !sources.contains(label) {
            problems.push(format!("no example with {label}"));
        }
    }
    report("example checks failed", total, &problems);
}

// ---- the invalid table ----

#[tokio::test]
async fn every_invalid_manifest_is_refused_with_a_message_naming_the_field_or_rule() {
    let scope = Scope::new("invalid").await.expect("scope");
    let files = yaml_files(&testdata("invalid")).expect("invalid table");
    assert!(
        files.len() >= 40,
        "the invalid table holds {} files, at least 40 are promised",
        files.len()
    );
    let mut problems = Vec::new();
    for path in &files {
        let case = match read_case(path, "expect") {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        // The fragment names the field or the rule, not just "invalid".
        if !(case.header.contains("spec") || case.header.contains("metadata.name")) {
            problems.push(format!(
                "{}: fragment {:?} names no field",
                case.name, case.header
            ));
        }
        let [doc] = case.docs.as_slice() else {
            problems.push(format!(
                "{}: holds {} documents, not one",
                case.name,
                case.docs.len()
            ));
            continue;
        };
        let answer = scope.apply(doc).await.expect("apply");
        match refusal(&answer) {
            None => problems.push(format!(
                "{}: accepted; expected a refusal containing {:?}",
                case.name, case.header
            )),
            Some(message) if !message.contains(&case.header) => problems.push(format!(
                "{}: refused without {:?}: {message}",
                case.name, case.header
            )),
            Some(_) => {}
        }
    }
    report(
        "invalid manifests were not refused as expected",
        files.len(),
        &problems,
    );
}

#[tokio::test]
async fn manifests_at_the_bounds_are_accepted() {
    let scope = Scope::new("bounds").await.expect("scope");
    let files = yaml_files(&testdata("valid")).expect("valid table");
    assert!(!files.is_empty(), "no files in conformance/testdata/valid");
    let mut problems = Vec::new();
    for path in &files {
        let case = read_case(path, "accepted").expect("case");
        for doc in &case.docs {
            match scope.apply(doc).await.expect("apply") {
                Err(e) => problems.push(format!("{} ({}): refused: {e}", case.name, case.header)),
                Ok(_) => {
                    let stored = scope.get(doc).await.expect("read back");
                    let mut missing = Vec::new();
                    not_contained("spec", &doc["spec"], &stored["spec"], &mut missing);
                    if !missing.is_empty() {
                        problems.push(format!("{}: stored differently: {missing:?}", case.name));
                    }
                }
            }
        }
    }
    report("boundary manifests were refused", files.len(), &problems);
}

// ---- immutability ----

#[tokio::test]
async fn immutable_specs_refuse_updates_and_mutable_fields_accept_them() {
    let scope = Scope::new("immutable").await.expect("scope");
    let files = yaml_files(&testdata("immutable")).expect("immutable table");
    assert!(
        !files.is_empty(),
        "no files in conformance/testdata/immutable"
    );
    let mut refusals = 0;
    let mut problems = Vec::new();
    for path in &files {
        let case = read_case(path, "expect").expect("case");
        let [original, changed] = case.docs.as_slice() else {
            problems.push(format!(
                "{}: holds {} documents, not two",
                case.name,
                case.docs.len()
            ));
            continue;
        };
        if let Err(e) = scope.apply(original).await.expect("apply") {
            problems.push(format!("{}: the original was refused: {e}", case.name));
            continue;
        }
        let before = scope.get(original).await.expect("read back");
        if case.header == "accepted" {
            match scope.apply(changed).await.expect("apply") {
                Err(e) => problems.push(format!("{}: update refused: {e}", case.name)),
                Ok(_) => {
                    let after = scope.get(changed).await.expect("read back");
                    let mut missing = Vec::new();
                    not_contained("", changed, &after, &mut missing);
                    missing.retain(|m| !m.starts_with(".metadata.name:"));
                    if !missing.is_empty() {
                        problems.push(format!("{}: update not stored: {missing:?}", case.name));
                    }
                }
            }
            continue;
        }
        refusals += 1;
        // Server-side apply (kubectl apply) and a merge patch (kubectl edit,
        // kubectl patch) are both refused, and leave the spec as it was.
        let mut placed = changed.clone();
        let (api, name) = scope.place(&mut placed).await.expect("place");
        let merge = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": changed["spec"]})),
            )
            .await;
        let mut whole = api.get(&name).await.expect("get");
        whole.data["spec"] = changed["spec"].clone();
        let put = api.replace(&name, &PostParams::default(), &whole).await;
        for (how, answer) in [
            (
                "server-side apply",
                scope.apply(changed).await.expect("apply"),
            ),
            ("merge patch", merge),
            ("PUT", put),
        ] {
            match refusal(&answer) {
                None => problems.push(format!("{} ({how}): update accepted", case.name)),
                Some(m) if !m.contains(&case.header) => problems.push(format!(
                    "{} ({how}): refused without {:?}: {m}",
                    case.name, case.header
                )),
                Some(_) => {}
            }
        }
        let after = scope.get(original).await.expect("read back");
        if after["spec"] != before["spec"] {
            problems.push(format!("{}: the spec changed although refused", case.name));
        }
    }
    assert!(
        refusals >= 7,
        "only {refusals} immutability refusals in the table"
    );
    report("update checks failed", files.len(), &problems);
}

// ---- status and round trips, with the fully populated examples ----

/// A fully populated object of one kind, as JSON, with what the server needs
/// to know about it.
struct Fixture {
    kind: String,
    ar: ApiResource,
    namespaced: bool,
    /// The whole object; metadata is reduced to name, labels and annotations.
    value: Value,
}

fn fixture<K>(object: &K) -> Fixture
where
    K: Resource<DynamicType = ()> + CustomResourceExt + Serialize,
{
    let mut value = serde_json::to_value(object).expect("json");
    let meta = value["metadata"].clone();
    let mut reduced = json!({"name": meta["name"]});
    for key in ["labels", "annotations"] {
        if let Some(v) = meta.get(key) {
            reduced[key] = v.clone();
        }
    }
    value["metadata"] = reduced;
    Fixture {
        kind: K::kind(&()).into_owned(),
        ar: ApiResource::erase::<K>(&()),
        namespaced: K::crd().spec.scope == "Namespaced",
        value,
    }
}

fn fixtures() -> Vec<Fixture> {
    vec![
        fixture(&testing::schema_example()),
        fixture(&testing::schema_plan_example()),
        fixture(&testing::chunk_example()),
        fixture(&testing::schema_approval_example()),
        fixture(&testing::migration_example()),
        fixture(&testing::migration_plan_example()),
        fixture(&testing::migration_approval_example()),
        fixture(&testing::acknowledgment_example()),
        fixture(&testing::realm_example()),
    ]
}

impl Scope {
    /// Creates a fixture's object (spec only) under `name`, returns its API.
    async fn create_fixture(
        &self,
        f: &Fixture,
        name: &str,
    ) -> anyhow::Result<(Api<DynamicObject>, String)> {
        let mut obj = f.value.clone();
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        obj["metadata"]["name"] = json!(name);
        let name = if f.namespaced {
            obj["metadata"]["namespace"] = json!(self.ns);
            name.to_string()
        } else {
            let unique = self.cluster_name(name);
            obj["metadata"]["name"] = json!(unique);
            self.owns_cluster_object(&f.ar, &unique);
            unique
        };
        let api = self.api(&f.ar, f.namespaced);
        let object: DynamicObject = serde_json::from_value(obj)?;
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {} {name}", f.kind))?;
        Ok((api, name))
    }
}

async fn round_trip(scope: &Scope, f: &Fixture) -> anyhow::Result<Vec<String>> {
    let name = f.value["metadata"]["name"]
        .as_str()
        .context("fixture name")?
        .to_string();
    let (api, name) = scope.create_fixture(f, &name).await?;
    let status = f.value.get("status").cloned();
    if let Some(status) = &status {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .with_context(|| format!("writing the status of {} {name}", f.kind))?;
    }
    let stored = serde_json::to_value(api.get(&name).await?)?;
    let mut problems = Vec::new();
    let mut diffs = Vec::new();
    for part in ["spec", "status"] {
        differences(
            part,
            f.value.get(part).unwrap_or(&Value::Null),
            stored.get(part).unwrap_or(&Value::Null),
            &mut diffs,
        );
    }
    for key in ["labels", "annotations"] {
        differences(
            &format!("metadata.{key}"),
            &f.value["metadata"][key],
            &stored["metadata"][key],
            &mut diffs,
        );
    }
    if !diffs.is_empty() {
        problems.push(format!("{}: the stored object differs: {diffs:#?}", f.kind));
    }
    // The Rust type reads the stored object back to the same JSON.
    let reread = reread_as(&f.kind, &stored)?;
    let mut diffs = Vec::new();
    for part in ["spec", "status"] {
        differences(
            part,
            stored.get(part).unwrap_or(&Value::Null),
            reread.get(part).unwrap_or(&Value::Null),
            &mut diffs,
        );
    }
    if !diffs.is_empty() {
        problems.push(format!(
            "{}: the Rust type reads the stored object differently: {diffs:#?}",
            f.kind
        ));
    }
    Ok(problems)
}

/// The stored object read into its Rust type and written out again.
fn reread_as(kind: &str, stored: &Value) -> anyhow::Result<Value> {
    fn via<K: DeserializeOwned + Serialize>(v: &Value) -> anyhow::Result<Value> {
        let typed: K = serde_json::from_value(v.clone())?;
        Ok(serde_json::to_value(typed)?)
    }
    match kind {
        "PtahSchema" => via::<api::PtahSchema>(stored),
        "PtahSchemaPlan" => via::<api::PtahSchemaPlan>(stored),
        "PtahSchemaPlanChunk" => via::<api::PtahSchemaPlanChunk>(stored),
        "PtahSchemaApproval" => via::<api::PtahSchemaApproval>(stored),
        "PtahMigration" => via::<api::PtahMigration>(stored),
        "PtahMigrationPlan" => via::<api::PtahMigrationPlan>(stored),
        "PtahMigrationApproval" => via::<api::PtahMigrationApproval>(stored),
        "PtahMigrationRunAcknowledgment" => via::<api::PtahMigrationRunAcknowledgment>(stored),
        "PtahRealm" => via::<api::PtahRealm>(stored),
        other => bail!("no Rust type for {other}"),
    }
}

#[tokio::test]
async fn every_kind_round_trips_losslessly_through_the_api_server() {
    let scope = Scope::new("roundtrip").await.expect("scope");
    let all = fixtures();
    assert_eq!(all.len(), generate::crds().len(), "one fixture per kind");
    let mut problems = Vec::new();
    for f in &all {
        match round_trip(&scope, f).await {
            Ok(p) => problems.extend(p),
            Err(e) => problems.push(format!("{}: {e:#}", f.kind)),
        }
    }
    report("kinds did not round-trip", all.len(), &problems);
}

#[tokio::test]
async fn the_defaults_the_api_server_applies_are_the_rust_defaults() {
    let scope = Scope::new("defaults").await.expect("scope");
    let target = json!({"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "orders"});
    let mut problems = Vec::new();
    for (kind, spec) in [
        (
            "PtahSchema",
            json!({"target": target, "source": {"configMap": {"name": "schema"}}}),
        ),
        (
            "PtahMigration",
            json!({"target": target, "source": {"git": {"url": "https://git.example.com/acme/db.git", "ref": {"tag": "v1"}}}}),
        ),
        // A realm: only the sharing default.
        (
            "PtahRealm",
            json!({"engine": "MySQL", "namespaces": [scope.ns]}),
        ),
    ] {
        let manifest = json!({
            "apiVersion": api::API_VERSION, "kind": kind,
            "metadata": {"name": "minimal"}, "spec": spec,
        });
        if let Err(e) = scope.apply(&manifest).await.expect("apply") {
            problems.push(format!("{kind}: minimal manifest refused: {e}"));
            continue;
        }
        let stored = scope.get(&manifest).await.expect("read back");
        let rust = reread_as(kind, &manifest).expect("the Rust type reads the manifest");
        let mut diffs = Vec::new();
        differences("spec", &rust["spec"], &stored["spec"], &mut diffs);
        if !diffs.is_empty() {
            problems.push(format!(
                "{kind}: the server's defaults differ from the Rust defaults (Rust → server): {diffs:#?}"
            ));
        }
    }
    report("kinds default differently", 3, &problems);
}

#[tokio::test]
async fn status_changes_only_through_the_status_subresource() {
    let scope = Scope::new("status").await.expect("scope");
    // A spec change per kind, sent through the status endpoint (ignored there).
    let spec_changes: HashMap<&str, Value> = HashMap::from([
        ("PtahSchema", json!({"interval": "20m"})),
        ("PtahMigration", json!({"interval": "20m"})),
        ("PtahSchemaPlan", json!({"statementCount": 99})),
        ("PtahMigrationPlan", json!({"currentVersion": 1})),
        (
            "PtahSchemaApproval",
            json!({"planFingerprint": testing::digest(0x77)}),
        ),
        (
            "PtahMigrationApproval",
            json!({"planFingerprint": testing::digest(0x77)}),
        ),
        (
            "PtahMigrationRunAcknowledgment",
            json!({"operationID": testing::digest(0x77)}),
        ),
    ]);
    let mut problems = Vec::new();
    let mut with_status = 0;
    for f in fixtures() {
        let kind = f.kind.clone();
        let (api, name) = scope
            .create_fixture(&f, &format!("status-{}", kind.to_lowercase()))
            .await
            .expect("create");
        let Some(status) = f.value.get("status").cloned() else {
            // No status subresource: a status sent with the object is pruned.
            let mut obj = serde_json::to_value(api.get(&name).await.expect("get")).expect("json");
            obj["status"] = json!({"observedGeneration": 1});
            let obj: DynamicObject = serde_json::from_value(obj).expect("object");
            let replaced = api.replace(&name, &PostParams::default(), &obj).await;
            match replaced {
                Ok(_) => {
                    let stored = api.get(&name).await.expect("get");
                    if stored.data.get("status").is_some() {
                        problems.push(format!("{kind}: stores a status it has no schema for"));
                    }
                }
                Err(e) => problems.push(format!("{kind}: replace refused: {e}")),
            }
            continue;
        };
        with_status += 1;
        let stored_status =
            |o: &DynamicObject| o.data.get("status").cloned().unwrap_or(Value::Null);

        // 1. PUT of the whole object with a status: the status is dropped,
        //    and what is served is what was served before (nothing, or the
        //    CRD's default: `observedGeneration: 0` on the two families,
        //    which kstatus reads as not yet observed).
        let mut obj = api.get(&name).await.expect("get");
        let served = stored_status(&obj);
        let want = match kind.as_str() {
            "PtahSchema" | "PtahMigration" => json!({"observedGeneration": 0}),
            _ => Value::Null,
        };
        if served != want {
            problems.push(format!(
                "{kind}: a new object serves status {served}, not {want}"
            ));
        }
        obj.data["status"] = status.clone();
        if let Err(e) = api.replace(&name, &PostParams::default(), &obj).await {
            problems.push(format!("{kind}: PUT with status refused: {e}"));
        }
        let after_put = api.get(&name).await.expect("get");
        if stored_status(&after_put) != served {
            problems.push(format!("{kind}: PUT on the main resource set status"));
        }
        // 2. A merge patch of status on the main resource: dropped too.
        if let Err(e) = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            problems.push(format!("{kind}: status merge patch refused: {e}"));
        }
        let after_patch = api.get(&name).await.expect("get");
        if stored_status(&after_patch) != served {
            problems.push(format!("{kind}: a patch of the main resource set status"));
        }
        // 3. Through the status subresource: stored as sent, and the
        //    generation (a spec counter) does not move.
        let generation = after_patch.metadata.generation;
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Err(e) => problems.push(format!("{kind}: status subresource refused: {e}")),
            Ok(_) => {
                let stored = api.get(&name).await.expect("get");
                let mut diffs = Vec::new();
                differences("status", &status, &stored_status(&stored), &mut diffs);
                if !diffs.is_empty() {
                    problems.push(format!("{kind}: status stored differently: {diffs:?}"));
                }
                if stored.metadata.generation != generation {
                    problems.push(format!("{kind}: a status write moved metadata.generation"));
                }
            }
        }
        // 4. A spec change sent to the status subresource is ignored while
        //    the status change in the same request is kept.
        let spec_before = api.get(&name).await.expect("get").data["spec"].clone();
        let change = spec_changes.get(kind.as_str()).cloned().unwrap_or_default();
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": change, "status": {"observedGeneration": 42}})),
            )
            .await
        {
            Err(e) => problems.push(format!(
                "{kind}: status patch with a spec change refused: {e}"
            )),
            Ok(_) => {
                let stored = api.get(&name).await.expect("get");
                if stored.data["spec"] != spec_before {
                    problems.push(format!("{kind}: the status subresource changed spec"));
                }
                if stored.data["status"]["observedGeneration"] != 42 {
                    problems.push(format!("{kind}: the status part of the patch was lost"));
                }
            }
        }
    }
    assert_eq!(with_status, 7, "kinds with a status subresource");

    // Status is validated too: a settled run names its acknowledgment exactly
    // when it was acknowledged.
    let migration = fixtures()
        .into_iter()
        .find(|f| f.kind == "PtahMigration")
        .expect("migration fixture");
    let (api, name) = scope
        .create_fixture(&migration, "status-rule")
        .await
        .expect("create");
    let mut bad = migration.value["status"]["resolvedRun"].clone();
    bad["resolution"] = json!("HistoryRead");
    let answer = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"resolvedRun": bad}})),
        )
        .await;
    let want = "status.resolvedRun names an acknowledgment and its author exactly when resolution is Acknowledged";
    match refusal(&answer) {
        None => problems.push("status.resolvedRun rule: accepted".into()),
        Some(m) if !m.contains(want) => problems.push(format!(
            "status.resolvedRun rule: refused without {want:?}: {m}"
        )),
        Some(_) => {}
    }
    report("status checks failed", 10, &problems);
}

// ---- kubectl ----

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn kubectl_explain_prints_the_doc_comment_of_the_git_ref() {
    let scope = Scope::new("explain").await.expect("scope");
    let crd = serde_json::to_value(api::PtahSchema::crd()).expect("json");
    let git_ref = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/source/properties/git/properties/ref")
        .expect("spec.source.git.ref in the CRD");
    let description = one_line(git_ref["description"].as_str().expect("a description"));
    assert!(
        description.starts_with("The commit to read"),
        "the CRD holds the field's doc comment: {description}"
    );
    // The API server publishes a new CRD's OpenAPI shortly after it is
    // Established: ask again until it answers, within a deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let out = scope
            .kubectl(&["explain", "ptahschema.spec.source.git.ref"])
            .await
            .expect("kubectl explain");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && one_line(&text).contains(&description) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl explain did not print {description:?} within 60s:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for field in ["branch", "tag", "commit"] {
        let doc = git_ref["properties"][field]["description"]
            .as_str()
            .expect("field description");
        assert!(
            one_line(&text).contains(&one_line(doc)),
            "kubectl explain lists {field} with its doc comment:\n{text}"
        );
    }
    assert!(text.contains("KIND:       PtahSchema") || text.contains("KIND: PtahSchema"));
}

#[tokio::test]
async fn kubectl_get_ptah_lists_every_kind() {
    let scope = Scope::new("getptah").await.expect("scope");
    let mut expected = Vec::new();
    for f in fixtures() {
        let (_, name) = scope
            .create_fixture(&f, &format!("get-{}", f.kind.to_lowercase()))
            .await
            .expect("create");
        expected.push((f.kind.to_lowercase(), name, f.namespaced));
    }
    let out = scope
        .kubectl(&["get", "ptah", "-A"])
        .await
        .expect("kubectl get");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl get ptah -A failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut problems = Vec::new();
    for (singular, name, namespaced) in &expected {
        let id = format!("{singular}.{}/{name}", api::GROUP);
        let listed = text.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if *namespaced {
                cols.first() == Some(&scope.ns.as_str()) && cols.get(1) == Some(&id.as_str())
            } else {
                cols.first() == Some(&id.as_str())
            }
        });
        if !listed {
            problems.push(format!("{id} is not listed"));
        }
    }
    assert!(
        problems.is_empty(),
        "kubectl get ptah -A misses kinds: {problems:?}\n{text}"
    );
}
