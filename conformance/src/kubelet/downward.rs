//! The downward API: a Pod's fields and its containers' resources as the
//! strings a kubelet puts in env vars and `downwardAPI` volume files.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ResourceFieldSelector};

use super::quantity::{self, Nanos};

/// What the node knows that a Pod's fields do not: its address, the Pod's
/// address (which the Pod's status may not show yet), and the allocatable
/// resources that stand in for a limit the container did not set.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub node_name: String,
    pub host_ip: String,
    /// The Pod's own IP (the node's for `hostNetwork`); each pod worker sets it.
    pub pod_ip: String,
    pub cpu: Nanos,
    pub memory: Nanos,
    pub ephemeral_storage: Nanos,
}

#[cfg(test)]
impl NodeFacts {
    /// The node the unit tests describe: 2 CPUs, 8 GiB memory, 100 GiB storage.
    pub(crate) fn for_tests() -> Self {
        NodeFacts {
            node_name: "ptah-node".into(),
            host_ip: "127.0.0.1".into(),
            pod_ip: "198.18.0.9".into(),
            cpu: Nanos::units(2),
            memory: Nanos::units(8 << 30),
            ephemeral_storage: Nanos::units(100 << 30),
        }
    }
}

/// `metadata.labels['k']` → `("labels", "k")`.
fn subscript<'a>(path: &'a str, field: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(field)?.strip_prefix("['")?;
    rest.strip_suffix("']")
}

/// The value of a `fieldRef`. `whole_maps` allows `metadata.labels` and
/// `metadata.annotations` (volumes only, as in Kubernetes).
pub fn field_value(
    pod: &Pod,
    path: &str,
    facts: &NodeFacts,
    whole_maps: bool,
) -> Result<String, String> {
    let meta = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let spec = pod.spec.as_ref();
    if let Some(key) = subscript(path, "metadata.labels") {
        return Ok(labels.get(key).cloned().unwrap_or_default());
    }
    if let Some(key) = subscript(path, "metadata.annotations") {
        return Ok(annotations.get(key).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" if whole_maps => format_map(labels),
        "metadata.annotations" if whole_maps => format_map(annotations),
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| facts.node_name.clone()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        // One address of each: the lists are the single address.
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        other => return Err(format!("unsupported fieldRef fieldPath {other:?}")),
    })
}

/// `key="value"` lines sorted by key, as the kubelet's `fieldpath.FormatMap`
/// writes them (Go's `%q` quoting).
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The value of a `resourceFieldRef` for container `default_container`
/// (env) or the selector's own `containerName` (volumes).
pub fn resource_value(
    pod: &Pod,
    default_container: Option<&str>,
    sel: &ResourceFieldSelector,
    facts: &NodeFacts,
) -> Result<String, String> {
    let name = sel
        .container_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(default_container)
        .ok_or_else(|| format!("resourceFieldRef {:?} names no container", sel.resource))?;
    let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
    let container = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .ok_or_else(|| format!("resourceFieldRef: no container named {name:?}"))?;
    let (kind, resource) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resourceFieldRef resource {:?}", sel.resource))?;
    let res = container.resources.as_ref();
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let node_value = match resource {
        "cpu" => facts.cpu,
        "memory" => facts.memory,
        "ephemeral-storage" => facts.ephemeral_storage,
        _ => {
            return Err(format!(
                "unsupported resourceFieldRef resource {:?}",
                sel.resource
            ));
        }
    };
    let parse = |q: &str| quantity::parse(q).map_err(|e| e.to_string());
    let limit = limits.and_then(|l| l.get(resource)).map(|q| parse(&q.0));
    let value = match kind {
        // An unset limit is the node's allocatable, as in Kubernetes.
        "limits" => limit.unwrap_or(Ok(node_value))?,
        // An unset request defaults to the limit, then to zero (cpu: zero
        // shows as 1 after rounding up, which matches the kubelet).
        "requests" => match requests.and_then(|r| r.get(resource)) {
            Some(q) => parse(&q.0)?,
            None => limit.unwrap_or(Ok(Nanos(0)))?,
        },
        _ => {
            return Err(format!(
                "unsupported resourceFieldRef resource {:?}",
                sel.resource
            ));
        }
    };
    let divisor = match &sel.divisor {
        Some(q) => parse(&q.0)?,
        None => Nanos::units(1),
    };
    quantity::divide_ceil(value, divisor).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn facts() -> NodeFacts {
        NodeFacts::for_tests()
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                "labels": {"app": "x", "tier": "a\"b"}, "annotations": {"note": "hi"}},
            "spec": {"nodeName": "ptah-node", "serviceAccountName": "sa",
                "containers": [{"name": "c", "image": "i",
                    "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn fields_of_the_pod() {
        let p = pod();
        let f = facts();
        let v = |path: &str| field_value(&p, path, &f, false).unwrap();
        assert_eq!(v("metadata.name"), "p");
        assert_eq!(v("metadata.namespace"), "ns");
        assert_eq!(v("metadata.uid"), "u-1");
        assert_eq!(v("metadata.labels['app']"), "x");
        assert_eq!(v("metadata.labels['missing']"), "");
        assert_eq!(v("metadata.annotations['note']"), "hi");
        assert_eq!(v("spec.nodeName"), "ptah-node");
        assert_eq!(v("spec.serviceAccountName"), "sa");
        assert_eq!(v("status.podIP"), "198.18.0.9");
        assert_eq!(v("status.podIPs"), "198.18.0.9");
        assert_eq!(v("status.hostIP"), "127.0.0.1");
        assert!(field_value(&p, "metadata.labels", &f, false).is_err());
        assert_eq!(
            field_value(&p, "metadata.labels", &f, true).unwrap(),
            "app=\"x\"\ntier=\"a\\\"b\""
        );
        assert!(field_value(&p, "spec.bogus", &f, false).is_err());
    }

    #[test]
    fn resources_with_divisors_and_node_defaults() {
        let p = pod();
        let f = facts();
        let sel = |r: &str, d: Option<&str>| ResourceFieldSelector {
            container_name: None,
            divisor: d.map(|d| Quantity(d.into())),
            resource: r.into(),
        };
        let v = |r: &str, d: Option<&str>| resource_value(&p, Some("c"), &sel(r, d), &f).unwrap();
        assert_eq!(v("limits.memory", Some("1Mi")), "64");
        assert_eq!(v("requests.cpu", Some("1m")), "250");
        assert_eq!(v("requests.cpu", None), "1");
        assert_eq!(v("limits.cpu", None), "2");
        assert_eq!(v("requests.memory", Some("1Mi")), "64");
        assert!(resource_value(&p, None, &sel("limits.cpu", None), &f).is_err());
        assert!(resource_value(&p, Some("c"), &sel("limits.gpu", None), &f).is_err());
    }
}
