//! A container's environment as a kubelet builds it: the API server's
//! service variables, then `envFrom`, then `env` in order with `$(VAR)`
//! expansion; and `$(VAR)` expansion of `command`/`args`. Pure: the
//! Secrets and ConfigMaps it reads are fetched beforehand into [`Refs`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};

use super::downward::{self, NodeFacts};

/// The outcome of fetching one referenced object.
#[derive(Debug, Clone)]
pub enum Lookup<T> {
    Found(T),
    NotFound,
    /// Any other failure (the Node authorizer may not yet know the pod).
    Failed(String),
}

/// The Secrets and ConfigMaps a container or volume references, by name.
#[derive(Debug, Clone, Default)]
pub struct Refs {
    pub config_maps: BTreeMap<String, Lookup<ConfigMap>>,
    pub secrets: BTreeMap<String, Lookup<Secret>>,
}

/// Names to fetch before resolving.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

impl Refs {
    /// The ConfigMap, `Ok(None)` when it does not exist, `Err` with the
    /// kubelet's message when it could not be read.
    pub fn config_map(&self, name: &str) -> Result<Option<&ConfigMap>, String> {
        match self.config_maps.get(name) {
            Some(Lookup::Found(cm)) => Ok(Some(cm)),
            Some(Lookup::NotFound) => Ok(None),
            Some(Lookup::Failed(e)) => Err(format!("configmap {name:?}: {e}")),
            None => Err(format!("configmap {name:?} was not fetched")),
        }
    }
    pub fn secret(&self, name: &str) -> Result<Option<&Secret>, String> {
        match self.secrets.get(name) {
            Some(Lookup::Found(s)) => Ok(Some(s)),
            Some(Lookup::NotFound) => Ok(None),
            Some(Lookup::Failed(e)) => Err(format!("secret {name:?}: {e}")),
            None => Err(format!("secret {name:?} was not fetched")),
        }
    }
}

/// The Secrets and ConfigMaps a container's env references.
pub fn wanted_by_env(c: &Container) -> Wanted {
    let mut w = Wanted::default();
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            w.config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            w.secrets.insert(r.name.clone());
        }
    }
    for var in c.env.iter().flatten() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(r) = &from.config_map_key_ref {
            w.config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_key_ref {
            w.secrets.insert(r.name.clone());
        }
    }
    w
}

/// An ordered environment where a later value replaces an earlier one in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env(pub Vec<(String, String)>);

impl Env {
    pub fn set(&mut self, key: &str, value: String) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Kubernetes' `$(VAR)` expansion: `$$` is a literal `$`, an unknown
/// reference stays as written.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &bytes[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&b| b == b')') {
                    Some(close) => {
                        let name = String::from_utf8_lossy(&rest[1..close]);
                        match lookup(&name) {
                            Some(v) => out.extend_from_slice(v.as_bytes()),
                            None => out.extend_from_slice(format!("$({name})").as_bytes()),
                        }
                        close + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.extend_from_slice(&bytes[checkpoint.min(bytes.len())..]);
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds the environment of container `c` of `pod`. The error is the
/// message of a `CreateContainerConfigError`.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    refs: &Refs,
    facts: &NodeFacts,
    service_env: &[(String, String)],
) -> Result<Env, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut env = Env::default();
    for (k, v) in service_env {
        env.set(k, v.clone());
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match refs.config_map(&r.name)? {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        env_from_key(&mut env, prefix, k, v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match refs.secret(&r.name)? {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        env_from_key(&mut env, prefix, k, bytes_to_string(&v.0));
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret {:?} not found", r.name)),
            }
        }
    }
    for var in c.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let raw = var.value.as_deref().unwrap_or_default();
                let snapshot = env.clone();
                expand(raw, &|name| snapshot.get(name).map(str::to_string))
            }
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    downward::field_value(pod, &f.field_path, facts, false)?
                } else if let Some(r) = &from.resource_field_ref {
                    downward::resource_value(pod, Some(&c.name), r, facts)?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    match refs.config_map(&r.name)? {
                        None if optional => continue,
                        None => return Err(format!("configmap {:?} not found", r.name)),
                        Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                            Some(v) => v.clone(),
                            None if optional => continue,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in ConfigMap {ns}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    match refs.secret(&r.name)? {
                        None if optional => continue,
                        None => return Err(format!("secret {:?} not found", r.name)),
                        Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                            Some(v) => bytes_to_string(&v.0),
                            None if optional => continue,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in Secret {ns}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                    }
                } else if from.file_key_ref.is_some() {
                    return Err(format!(
                        "env {}: fileKeyRef is not supported by the process kubelet",
                        var.name
                    ));
                } else {
                    return Err(format!("env {}: valueFrom names no source", var.name));
                }
            }
        };
        env.set(&var.name, value);
    }
    Ok(env)
}

fn env_from_key(env: &mut Env, prefix: &str, key: &str, value: String) {
    let name = format!("{prefix}{key}");
    // The kubelet skips names that cannot be environment variables.
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return;
    }
    env.set(&name, value);
}

fn bytes_to_string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `command` + `args` with `$(VAR)` expanded from the container's env.
pub fn argv(c: &Container, env: &Env) -> Vec<String> {
    let lookup = |name: &str| env.get(name).map(str::to_string);
    c.command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| expand(a, &lookup))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn facts() -> NodeFacts {
        NodeFacts::for_tests()
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let l = lookup(&[("A", "x"), ("B", "y")]);
        assert_eq!(expand("$(A)-$(B)", &l), "x-y");
        assert_eq!(expand("$$(A)", &l), "$(A)");
        assert_eq!(expand("$(MISSING)", &l), "$(MISSING)");
        assert_eq!(expand("$(A", &l), "$(A");
        assert_eq!(expand("cost $5", &l), "cost $5");
        assert_eq!(expand("end$", &l), "end$");
        assert_eq!(expand("é$(A)ü", &l), "éxü");
        assert_eq!(expand("", &l), "");
    }

    fn pod_and_container(env: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"}},
            "spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        let mut c: Container =
            serde_json::from_value(serde_json::json!({"name": "c", "image": "i"})).unwrap();
        let parsed: Container = serde_json::from_value(env).unwrap();
        c.env = parsed.env;
        c.env_from = parsed.env_from;
        (pod, c)
    }

    fn refs() -> Refs {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"}, "data": {"color": "blue", "size": "L"}
        }))
        .unwrap();
        let secret = Secret {
            data: Some(
                [("password".to_string(), ByteString(b"s3cret".to_vec()))]
                    .into_iter()
                    .collect(),
            ),
            ..Secret::default()
        };
        let mut r = Refs::default();
        r.config_maps.insert("cm".into(), Lookup::Found(cm));
        r.config_maps.insert("gone".into(), Lookup::NotFound);
        r.secrets.insert("sec".into(), Lookup::Found(secret));
        r.secrets.insert("nosec".into(), Lookup::NotFound);
        r
    }

    #[test]
    fn env_from_every_source_in_kubelet_order() {
        let (pod, c) = pod_and_container(serde_json::json!({"name": "c", "env": [
            {"name": "PLAIN", "value": "v-$(color)"},
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "color"}}},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nosec", "key": "k", "optional": true}}},
            {"name": "REF", "value": "$(POD)/$(KUBERNETES_SERVICE_HOST)"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LISTEN", "value": "$(POD_IP):9443"}
        ], "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                      {"configMapRef": {"name": "gone", "optional": true}}]}));
        let service = vec![(
            "KUBERNETES_SERVICE_HOST".to_string(),
            "127.0.0.1".to_string(),
        )];
        let env = container_env(&pod, &c, &refs(), &facts(), &service).unwrap();
        let get = |k: &str| env.get(k).map(str::to_string);
        assert_eq!(get("CM_color").as_deref(), Some("blue"));
        assert_eq!(get("CM_size").as_deref(), Some("L"));
        // envFrom keys without prefix are not visible unprefixed.
        assert_eq!(get("PLAIN").as_deref(), Some("v-$(color)"));
        assert_eq!(get("FROM_CM").as_deref(), Some("blue"));
        assert_eq!(get("FROM_SECRET").as_deref(), Some("s3cret"));
        assert_eq!(get("POD").as_deref(), Some("p"));
        assert_eq!(get("APP").as_deref(), Some("a"));
        assert_eq!(get("OPT"), None);
        assert_eq!(get("REF").as_deref(), Some("p/127.0.0.1"));
        // The Pod's own address, not the node's: what a manager listens on.
        assert_eq!(get("LISTEN").as_deref(), Some("198.18.0.9:9443"));
        // Service variables come first.
        assert_eq!(env.0[0].0, "KUBERNETES_SERVICE_HOST");
    }

    #[test]
    fn missing_sources_are_config_errors_with_the_kubelet_message() {
        let cases = [
            (
                serde_json::json!({"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nokey"}}}]}),
                "couldn't find key nokey in Secret ns/sec",
            ),
            (
                serde_json::json!({"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nosec", "key": "k"}}}]}),
                "secret \"nosec\" not found",
            ),
            (
                serde_json::json!({"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nokey"}}}]}),
                "couldn't find key nokey in ConfigMap ns/cm",
            ),
            (
                serde_json::json!({"name": "c", "envFrom": [{"configMapRef": {"name": "gone"}}]}),
                "configmap \"gone\" not found",
            ),
            (
                serde_json::json!({"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "unfetched", "key": "k"}}}]}),
                "configmap \"unfetched\" was not fetched",
            ),
        ];
        for (spec, message) in cases {
            let (pod, c) = pod_and_container(spec);
            let err = container_env(&pod, &c, &refs(), &facts(), &[]).unwrap_err();
            assert_eq!(err, message);
        }
    }

    #[test]
    fn wanted_lists_every_reference_once() {
        let (_, c) = pod_and_container(serde_json::json!({"name": "c", "env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "j"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}}
        ], "envFrom": [{"secretRef": {"name": "s2"}}]}));
        let w = wanted_by_env(&c);
        assert_eq!(w.secrets.into_iter().collect::<Vec<_>>(), ["s1", "s2"]);
        assert_eq!(w.config_maps.into_iter().collect::<Vec<_>>(), ["c1"]);
    }

    #[test]
    fn argv_expands_from_the_environment() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "command": ["echo", "$(WHO)"], "args": ["$$(WHO)", "$(NOPE)"]
        }))
        .unwrap();
        let env = Env(vec![("WHO".into(), "world".into())]);
        assert_eq!(argv(&c, &env), ["echo", "world", "$(WHO)", "$(NOPE)"]);
    }
}
