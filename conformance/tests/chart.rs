//! The Helm chart without a cluster: `helm lint`, the render of the default
//! values and of a file that sets every knob compared with goldens
//! (`PTAH_BLESS=1` rewrites them), the values schema refusing bad values by
//! name, the webhook configurations equal to the Rust ones the tests
//! register, and the RBAC table of docs/install.md equal to the rendered
//! rules.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context;
use conformance::testkit::chart;
use conformance::tools;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ServiceReference, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use serde_json::Value;

fn golden(name: &str) -> PathBuf {
    tools::workspace_root().join(format!("conformance/testdata/chart/{name}.yaml"))
}

fn compare_with_golden(name: &str, rendered: &str) -> anyhow::Result<()> {
    let path = golden(name);
    let masked = chart::masked(rendered);
    if std::env::var_os("PTAH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().context("a parent")?)?;
        std::fs::write(&path, &masked)?;
    }
    let want = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{} is missing: run with PTAH_BLESS=1 to write it",
            path.display()
        )
    })?;
    if want != masked {
        let first = want
            .lines()
            .zip(masked.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(masked.lines().count()));
        anyhow::bail!(
            "the render differs from {} at line {}: golden {:?}, render {:?}; run with PTAH_BLESS=1 to accept it",
            path.display(),
            first + 1,
            want.lines().nth(first),
            masked.lines().nth(first)
        );
    }
    Ok(())
}

#[test]
fn helm_lint_passes_for_the_defaults_and_every_knob() -> anyhow::Result<()> {
    for extra in [
        vec![],
        vec!["-f".to_string(), chart::all_knobs().display().to_string()],
    ] {
        let mut cmd = chart::helm()?;
        cmd.arg("lint")
            .arg("--strict")
            .arg(chart::dir())
            .args(&extra);
        let out = chart::run(cmd).with_context(|| format!("helm lint {extra:?}"))?;
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
    }
    Ok(())
}

#[test]
fn the_default_render_matches_its_golden() -> anyhow::Result<()> {
    compare_with_golden("default", &chart::template(&[])?)
}

#[test]
fn the_render_of_every_knob_matches_its_golden() -> anyhow::Result<()> {
    let knobs = chart::all_knobs().display().to_string();
    compare_with_golden("all-knobs", &chart::template(&["-f", &knobs])?)
}

#[test]
fn bad_values_are_refused_by_the_schema_naming_the_key() -> anyhow::Result<()> {
    for (set, named) in [
        ("replicaCount=-1", "/replicaCount"),
        ("image.operator.digest=latest", "/image/operator/digest"),
        ("image.executor.digest=", "/image/executor/digest"),
        ("replicas=2", "'replicas' not allowed"),
        (
            "leaderElection.leaseDurationSeconds=1",
            "/leaderElection/leaseDurationSeconds",
        ),
        ("certificates.source=vault", "/certificates/source"),
        ("ports.https=70000", "/ports/https"),
    ] {
        let e = chart::template(&["--set", set])
            .err()
            .with_context(|| format!("--set {set} was rendered"))?
            .to_string();
        assert!(
            e.contains("values don't meet the specifications"),
            "{set}: {e}"
        );
        assert!(e.contains(named), "{set}: the error names {named}: {e}");
    }
    // An image with a tag in its repository is no digest either.
    let e = chart::template(&["--set", "image.operator.repository=ghcr.io/x/op:latest"])
        .err()
        .context("a tag was rendered")?
        .to_string();
    assert!(e.contains("/image/operator/repository"), "{e}");
    Ok(())
}

/// The Service the chart's webhooks call, and the CA it rendered.
fn chart_client(path: &str, ca: Option<k8s_openapi::ByteString>) -> WebhookClientConfig {
    WebhookClientConfig {
        service: Some(ServiceReference {
            name: "ptah-operator".into(),
            namespace: "ptah-system".into(),
            port: Some(9443),
            path: Some(path.into()),
        }),
        ca_bundle: ca,
        url: None,
    }
}

#[test]
fn the_webhook_configurations_are_the_ones_the_operator_defines() -> anyhow::Result<()> {
    let docs = chart::documents(&chart::template(&[])?)?;
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(
        chart::find(
            &docs,
            "MutatingWebhookConfiguration",
            "ptah-operator-approvals",
        )?
        .clone(),
    )?;
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(
        chart::find(
            &docs,
            "ValidatingWebhookConfiguration",
            "ptah-operator-approvals",
        )?
        .clone(),
    )?;
    let ca = mutating.webhooks.as_ref().context("webhooks")?[0]
        .client_config
        .ca_bundle
        .clone();
    assert!(
        ca.as_ref()
            .is_some_and(|c| c.0.starts_with(b"-----BEGIN CERTIFICATE-----"))
    );
    let (want_m, want_v) =
        operator::admission::webhook_configurations(chart_client("", ca.clone()));
    // The Rust side appends its paths to the Service's (empty) path.
    let mut want_m = want_m.webhooks.context("webhooks")?;
    let mut want_v = want_v.webhooks.context("webhooks")?;
    want_m[0].client_config = chart_client("/admission/mutate", ca.clone());
    want_v[0].client_config = chart_client("/admission/validate", ca.clone());
    assert_eq!(mutating.webhooks.context("webhooks")?, want_m);
    assert_eq!(validating.webhooks.context("webhooks")?, want_v);
    // The CA signs the Secret's certificate, which names the Service.
    let secret = chart::find(&docs, "Secret", "ptah-operator-tls")?;
    let b64 = |k: &str| -> anyhow::Result<Vec<u8>> {
        use base64::Engine as _;
        Ok(base64::engine::general_purpose::STANDARD.decode(
            secret["data"][k]
                .as_str()
                .with_context(|| format!("data.{k}"))?,
        )?)
    };
    assert_eq!(b64("ca.crt")?, ca.context("caBundle")?.0);
    assert!(String::from_utf8(b64("tls.key")?)?.contains("PRIVATE KEY"));
    Ok(())
}

/// `(scope, group, resource, verb)` of every rule of `role`.
fn grants(scope: &str, role: &Value, out: &mut BTreeSet<(String, String, String, String)>) {
    for rule in role["rules"].as_array().into_iter().flatten() {
        for group in rule["apiGroups"].as_array().into_iter().flatten() {
            let group = match group.as_str().unwrap_or_default() {
                "" => "core",
                g => g,
            };
            for resource in rule["resources"].as_array().into_iter().flatten() {
                for verb in rule["verbs"].as_array().into_iter().flatten() {
                    out.insert((
                        scope.to_string(),
                        group.to_string(),
                        resource.as_str().unwrap_or_default().to_string(),
                        verb.as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
    }
}

#[test]
fn the_rbac_table_of_the_install_guide_is_the_rendered_rbac() -> anyhow::Result<()> {
    let docs = chart::documents(&chart::template(&[])?)?;
    let mut rendered = BTreeSet::new();
    grants(
        "cluster",
        chart::find(&docs, "ClusterRole", "ptah-operator-manager")?,
        &mut rendered,
    );
    grants(
        "release namespace",
        chart::find(&docs, "Role", "ptah-operator-leases")?,
        &mut rendered,
    );
    let guide = std::fs::read_to_string(tools::workspace_root().join("docs/install.md"))?;
    let table = guide
        .split("<!-- rbac:begin -->")
        .nth(1)
        .and_then(|t| t.split("<!-- rbac:end -->").next())
        .context("docs/install.md has no rbac table")?;
    let mut documented = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [scope, group, resources, verbs] = cells[..] else {
            anyhow::bail!("a row of four cells: {row}");
        };
        for resource in resources.split(", ") {
            for verb in verbs.split(", ") {
                documented.insert((scope.into(), group.into(), resource.into(), verb.into()));
            }
        }
    }
    let only_rendered: Vec<_> = rendered.difference(&documented).collect();
    let only_documented: Vec<_> = documented.difference(&rendered).collect();
    assert!(
        only_rendered.is_empty() && only_documented.is_empty(),
        "granted but not in docs/install.md: {only_rendered:?}; documented but not granted: {only_documented:?}"
    );
    // The promise the table makes: the manager touches no Secret.
    assert!(
        !rendered.iter().any(|(_, _, r, _)| r == "secrets"),
        "the manager may touch Secrets"
    );
    Ok(())
}

#[test]
fn with_a_watched_namespace_the_namespaced_rules_are_a_role_there() -> anyhow::Result<()> {
    let docs = chart::documents(&chart::template(&["--set", "watchNamespace=databases"])?)?;
    let cluster = chart::find(&docs, "ClusterRole", "ptah-operator-manager")?;
    let mut c = BTreeSet::new();
    grants("cluster", cluster, &mut c);
    assert!(c.iter().all(|(_, _, r, _)| r == "ptahrealms"), "{c:?}");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "databases")
        .context("a Role in databases")?;
    let mut n = BTreeSet::new();
    grants("ns", role, &mut n);
    assert!(
        n.iter()
            .any(|(_, g, r, v)| g == "batch" && r == "jobs" && v == "create")
    );
    Ok(())
}

#[test]
fn the_manager_pod_is_restricted_and_its_images_are_digests() -> anyhow::Result<()> {
    let docs = chart::documents(&chart::template(&[])?)?;
    let d = chart::find(&docs, "Deployment", "ptah-operator")?;
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    let image = c["image"].as_str().context("image")?;
    assert!(image.contains("@sha256:"), "{image}");
    let args: Vec<&str> = c["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.iter()
            .any(|a| a.starts_with("--executor-image=") && a.contains("@sha256:"))
    );
    assert!(args.contains(&"--leader-elect"));
    // The key is mounted from its Secret, never read through the API.
    assert!(args.contains(&"--token-key-file=/etc/ptah/keys/token.key"));
    Ok(())
}

#[test]
fn the_console_is_off_by_default_and_holds_no_credentials_or_role() -> anyhow::Result<()> {
    let off = chart::documents(&chart::template(&[])?)?;
    assert!(
        chart::find(&off, "Deployment", "ptah-operator-console").is_err(),
        "the console is off by default"
    );
    let docs = chart::documents(&chart::template(&["--set", "console.enabled=true"])?)?;
    let sa = chart::find(&docs, "ServiceAccount", "ptah-operator-console")?;
    assert_eq!(sa["automountServiceAccountToken"], false);
    let d = chart::find(&docs, "Deployment", "ptah-operator-console")?;
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ptah-operator-console");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(c["image"].as_str().is_some_and(|i| i.contains("@sha256:")));
    // Only the cluster's CA is mounted: no Secret, no token.
    let volumes = pod["volumes"].as_array().context("volumes")?;
    assert!(
        volumes
            .iter()
            .all(|v| v["configMap"]["name"] == "kube-root-ca.crt"),
        "{volumes:?}"
    );
    // No binding names its ServiceAccount: it may do nothing of its own.
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding")
    {
        for s in b["subjects"].as_array().into_iter().flatten() {
            assert_ne!(s["name"], "ptah-operator-console", "{b}");
        }
    }
    // Its Pods are not the manager's: no manager selector takes them.
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    let manager = chart::find(&docs, "Deployment", "ptah-operator")?;
    let selector = manager["spec"]["selector"]["matchLabels"]
        .as_object()
        .context("the manager's selector")?;
    assert!(
        selector.iter().any(|(k, v)| &labels[k] != v),
        "the manager's selector {selector:?} takes the console's Pods ({labels})"
    );
    // The install guide says so.
    let guide = std::fs::read_to_string(tools::workspace_root().join("docs/install.md"))?;
    assert!(guide.contains("| console | — | — | none |"));
    Ok(())
}
