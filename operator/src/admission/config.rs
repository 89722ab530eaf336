//! The two webhook configurations that send approvals and acknowledgments to
//! the manager: kept as Rust so the Helm chart and the tests render the same
//! objects. Both fail closed: an approval the webhook could not review is not
//! admitted.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::stamp::Reviewed;

/// Name of both configurations.
pub const CONFIGURATION_NAME: &str = "ptah-operator-approvals";
/// Name of the stamping webhook.
pub const MUTATING_WEBHOOK_NAME: &str = "stamp.approvals.operator.ptah.run";
/// Name of the validating webhook.
pub const VALIDATING_WEBHOOK_NAME: &str = "validate.approvals.operator.ptah.run";
/// Path of the stamping webhook on the manager's server.
pub const MUTATE_PATH: &str = "/admission/mutate";
/// Path of the validating webhook on the manager's server.
pub const VALIDATE_PATH: &str = "/admission/validate";
/// How long the API server waits for a review.
pub const TIMEOUT_SECONDS: i32 = 10;

/// The client configuration of one webhook: `server` names the manager's
/// server (`url` without a path, or `service` with an optional path prefix)
/// and `path` is appended.
fn at_path(server: &WebhookClientConfig, path: &str) -> WebhookClientConfig {
    let mut config = server.clone();
    if let Some(url) = &mut config.url {
        *url = format!("{}{path}", url.trim_end_matches('/'));
    }
    if let Some(service) = &mut config.service {
        let prefix = service.path.as_deref().unwrap_or_default();
        service.path = Some(format!("{}{path}", prefix.trim_end_matches('/')));
    }
    config
}

/// The main resource of the three kinds, never `/status`: the operator's
/// status writes are not reviewed.
fn rules(operations: &[&str]) -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec![crate::api::GROUP.to_owned()]),
        api_versions: Some(vec![crate::api::VERSION.to_owned()]),
        operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
        resources: Some(
            Reviewed::ALL
                .into_iter()
                .map(|k| k.plural().to_owned())
                .collect(),
        ),
        scope: Some("Namespaced".to_owned()),
    }]
}

/// The stamping (CREATE) and validating (CREATE, UPDATE) configurations,
/// both named `ptah-operator-approvals`, for the server `client_config`
/// names (a URL without path, or a Service; with its CA bundle).
pub fn webhook_configurations(
    client_config: WebhookClientConfig,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let metadata = ObjectMeta {
        name: Some(CONFIGURATION_NAME.to_owned()),
        labels: Some(
            [(
                "app.kubernetes.io/name".to_owned(),
                "ptah-operator".to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let mutating = MutatingWebhookConfiguration {
        metadata: metadata.clone(),
        webhooks: Some(vec![MutatingWebhook {
            name: MUTATING_WEBHOOK_NAME.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: at_path(&client_config, MUTATE_PATH),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            // A later webhook that rewrote the stamp gets it rewritten back.
            reinvocation_policy: Some("IfNeeded".to_owned()),
            rules: Some(rules(&["CREATE"])),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            ..Default::default()
        }]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata,
        webhooks: Some(vec![ValidatingWebhook {
            name: VALIDATING_WEBHOOK_NAME.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: at_path(&client_config, VALIDATE_PATH),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            rules: Some(rules(&["CREATE", "UPDATE"])),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            ..Default::default()
        }]),
    };
    (mutating, validating)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::admissionregistration::v1::ServiceReference;
    use serde_json::json;

    use super::*;

    #[test]
    fn both_configurations_fail_closed_on_the_three_kinds_main_resource_only() {
        let (m, v) = webhook_configurations(WebhookClientConfig {
            url: Some("https://127.0.0.1:8443/".into()),
            ca_bundle: Some(ByteString(b"PEM".to_vec())),
            service: None,
        });
        assert_eq!(m.metadata.name.as_deref(), Some("ptah-operator-approvals"));
        assert_eq!(v.metadata.name.as_deref(), Some("ptah-operator-approvals"));
        let m = serde_json::to_value(&m.webhooks).expect("json");
        let v = serde_json::to_value(&v.webhooks).expect("json");
        let resources = json!([
            "ptahschemaapprovals",
            "ptahmigrationapprovals",
            "ptahmigrationrunacknowledgments"
        ]);
        for (hook, ops, path) in [
            (&m[0], json!(["CREATE"]), "/admission/mutate"),
            (&v[0], json!(["CREATE", "UPDATE"]), "/admission/validate"),
        ] {
            assert_eq!(hook["failurePolicy"], json!("Fail"));
            assert_eq!(hook["sideEffects"], json!("None"));
            assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(hook["timeoutSeconds"], json!(10));
            assert_eq!(hook["matchPolicy"], json!("Equivalent"));
            assert_eq!(
                hook["clientConfig"]["url"],
                json!(format!("https://127.0.0.1:8443{path}"))
            );
            assert_eq!(hook["clientConfig"]["caBundle"], json!("UEVN"));
            let rule = &hook["rules"][0];
            assert_eq!(rule["apiGroups"], json!(["operator.ptah.run"]));
            assert_eq!(rule["apiVersions"], json!(["v1alpha1"]));
            assert_eq!(rule["operations"], ops);
            // No `/status`: status writes are not reviewed.
            assert_eq!(rule["resources"], resources);
        }
    }

    #[test]
    fn a_service_client_config_gets_the_path_of_each_webhook() {
        let service = |path: Option<&str>| WebhookClientConfig {
            url: None,
            ca_bundle: None,
            service: Some(ServiceReference {
                name: "ptah-operator".into(),
                namespace: "ptah-system".into(),
                path: path.map(str::to_owned),
                port: Some(9443),
            }),
        };
        let (m, v) = webhook_configurations(service(None));
        let path = |c: &WebhookClientConfig| c.service.as_ref().and_then(|s| s.path.clone());
        let hooks_m = m.webhooks.unwrap_or_default();
        let hooks_v = v.webhooks.unwrap_or_default();
        assert_eq!(
            path(&hooks_m[0].client_config).as_deref(),
            Some("/admission/mutate")
        );
        assert_eq!(
            path(&hooks_v[0].client_config).as_deref(),
            Some("/admission/validate")
        );
        let (m, _) = webhook_configurations(service(Some("/ptah/")));
        assert_eq!(
            path(&m.webhooks.unwrap_or_default()[0].client_config).as_deref(),
            Some("/ptah/admission/mutate")
        );
    }
}
