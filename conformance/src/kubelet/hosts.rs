//! Names for Pods. The harness has no cluster DNS and no kube-proxy, so the
//! process kubelet writes each Pod an `/etc/hosts` that resolves every
//! Service to the ready endpoint addresses of its EndpointSlices
//! (`<svc>.<ns>.svc.cluster.local`, `<svc>.<ns>.svc`, `<svc>.<ns>`, and
//! `<svc>` in the Pod's own namespace), beneath the lines a kubelet writes
//! anyway (localhost, the Pod's hostname, `hostAliases`). A client connects
//! to an endpoint directly: there is no port translation, so a Service's
//! `port` must equal its `targetPort`.
//!
//! The file changes while the Pod runs, and a bind-mounted file would keep
//! showing the inode it was mounted with. So the sandbox binds the Pod's
//! [`POD_DIR`] read-only and `/etc/hosts` is a symlink into it; the file is
//! replaced by a rename, which readers see whole or not at all.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::sandbox::{Link, Mount, normalize};

/// The cluster's DNS domain, as a kubelet's `--cluster-domain` usually is.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Where the sandbox sees the Pod's network files (bound read-only).
pub const POD_DIR: &str = "/etc/process-kubelet";
/// What `/etc/host.conf` says in every sandbox: glibc returns every address
/// of a name in `/etc/hosts` only with `multi on` (else the first line's),
/// and a Service with two endpoints needs both.
pub const HOST_CONF: &str = "multi on\n";

/// A Service, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

/// The ready endpoint addresses of every Service that has any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAddrs(pub BTreeMap<ServiceKey, BTreeSet<IpAddr>>);

/// The Service an EndpointSlice belongs to and its ready addresses. A slice
/// of FQDNs, or of no Service, gives nothing.
pub fn slice_addrs(slice: &EndpointSlice) -> Option<(ServiceKey, BTreeSet<IpAddr>)> {
    let name = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    let namespace = slice.metadata.namespace.clone()?;
    if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
        return None;
    }
    let addrs = slice
        .endpoints
        .iter()
        .flatten()
        // An unset `ready` means ready (the API's own reading).
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .collect();
    Some((
        ServiceKey {
            namespace,
            name: name.clone(),
        },
        addrs,
    ))
}

/// Every EndpointSlice's contribution, by slice, merged per Service.
#[derive(Debug, Default)]
pub struct SliceTable {
    slices: HashMap<(String, String), (ServiceKey, BTreeSet<IpAddr>)>,
}

impl SliceTable {
    fn key(slice: &EndpointSlice) -> (String, String) {
        (
            slice.metadata.namespace.clone().unwrap_or_default(),
            slice.metadata.name.clone().unwrap_or_default(),
        )
    }

    pub fn apply(&mut self, slice: &EndpointSlice) {
        match slice_addrs(slice) {
            Some(entry) => {
                self.slices.insert(Self::key(slice), entry);
            }
            None => {
                self.slices.remove(&Self::key(slice));
            }
        }
    }

    pub fn delete(&mut self, slice: &EndpointSlice) {
        self.slices.remove(&Self::key(slice));
    }

    pub fn services(&self) -> ServiceAddrs {
        let mut out: BTreeMap<ServiceKey, BTreeSet<IpAddr>> = BTreeMap::new();
        for (svc, addrs) in self.slices.values() {
            if !addrs.is_empty() {
                out.entry(svc.clone())
                    .or_default()
                    .extend(addrs.iter().copied());
            }
        }
        ServiceAddrs(out)
    }
}

/// Follows every EndpointSlice of the cluster, publishing the Services'
/// ready addresses whenever they change. Runs until the kubelet stops.
pub async fn follow_endpoint_slices(client: kube::Client, tx: watch::Sender<Arc<ServiceAddrs>>) {
    let api: Api<EndpointSlice> = Api::all(client);
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut table = SliceTable::default();
    // A (re)list builds a table of its own: slices deleted while the watch
    // was down are gone from it.
    let mut listing: Option<SliceTable> = None;
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => listing = Some(SliceTable::default()),
            Ok(Event::InitApply(s)) => listing.get_or_insert_with(Default::default).apply(&s),
            Ok(Event::InitDone) => {
                if let Some(t) = listing.take() {
                    table = t;
                }
                failing = false;
            }
            Ok(Event::Apply(s)) => table.apply(&s),
            Ok(Event::Delete(s)) => table.delete(&s),
            Err(e) => {
                // Once per outage: the backoff retries every few seconds.
                if !failing {
                    warn!("watching EndpointSlices (Service names in /etc/hosts): {e}");
                }
                failing = true;
                continue;
            }
        }
        if listing.is_none() {
            let next = table.services();
            tx.send_if_modified(|cur| {
                let changed = **cur != next;
                if changed {
                    debug!(services = next.0.len(), "service endpoints changed");
                    *cur = Arc::new(next);
                }
                changed
            });
        }
    }
}

/// What a Pod's own lines say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNames {
    pub namespace: String,
    pub hostname: String,
    pub subdomain: Option<String>,
    pub pod_ip: String,
    /// `hostAliases`: an address and its names.
    pub aliases: Vec<(String, Vec<String>)>,
}

impl PodNames {
    /// The names of `pod`, whose address is `pod_ip`.
    pub fn of(pod: &Pod, pod_ip: &str) -> PodNames {
        let spec = pod.spec.as_ref();
        let hostname = spec
            .and_then(|s| s.hostname.clone())
            .filter(|h| !h.is_empty())
            .or_else(|| pod.metadata.name.clone())
            .unwrap_or_default();
        PodNames {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            hostname: hostname.chars().take(63).collect(),
            subdomain: spec
                .and_then(|s| s.subdomain.clone())
                .filter(|d| !d.is_empty()),
            pod_ip: pod_ip.to_string(),
            aliases: spec
                .and_then(|s| s.host_aliases.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|a| (a.ip, a.hostnames.unwrap_or_default()))
                .collect(),
        }
    }
}

/// The Pod's `/etc/hosts`: what a kubelet writes (its header, localhost,
/// the Pod's hostname, `hostAliases`), then one line per ready endpoint
/// address of every Service.
pub fn render(pod: &PodNames, services: &ServiceAddrs) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let host = &pod.hostname;
    match &pod.subdomain {
        Some(sub) => out.push_str(&format!(
            "{}\t{host}.{sub}.{}.svc.{CLUSTER_DOMAIN}\t{host}\n",
            pod.pod_ip, pod.namespace
        )),
        None => out.push_str(&format!("{}\t{host}\n", pod.pod_ip)),
    }
    if !pod.aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for (ip, names) in &pod.aliases {
            for n in names {
                out.push_str(&format!("{ip}\t{n}\n"));
            }
        }
    }
    out.push_str(
        "\n# Services: the ready endpoints of their EndpointSlices (the process \
         kubelet's stand-in for cluster DNS; no port translation).\n",
    );
    for (svc, addrs) in &services.0 {
        let (name, ns) = (&svc.name, &svc.namespace);
        let mut names = format!("{name}.{ns}.svc.{CLUSTER_DOMAIN}\t{name}.{ns}.svc\t{name}.{ns}");
        // The short name as a Pod's DNS search path gives it; never one that
        // would shadow localhost or the Pod's own hostname.
        if *ns == pod.namespace && name != "localhost" && name != host {
            names.push('\t');
            names.push_str(name);
        }
        for a in addrs {
            out.push_str(&format!("{a}\t{names}\n"));
        }
    }
    out
}

/// How a container sees the Pod's network files: `dir` bound read-only at
/// [`POD_DIR`], and `/etc/hosts` and `/etc/host.conf` linked into it. A
/// container that mounts a file of its own at one of them keeps its own (a
/// kubelet leaves a container's `/etc/hosts` mount alone); one that mounts
/// over all of `/etc` gets none of them.
pub fn network_mounts(user: &[Mount], dir: &Path) -> (Option<Mount>, Vec<Link>) {
    let covered = |p: &str| {
        user.iter()
            .any(|m| Path::new(p).starts_with(normalize(&m.target)))
    };
    if covered(POD_DIR) {
        return (None, Vec::new());
    }
    let links = [("/etc/hosts", "hosts"), ("/etc/host.conf", "host.conf")]
        .into_iter()
        .filter(|(path, _)| !covered(path))
        .map(|(path, file)| Link {
            path: PathBuf::from(path),
            // Relative, as the link sits beside the directory in /etc.
            target: Path::new(POD_DIR.trim_start_matches("/etc/")).join(file),
        })
        .collect();
    let mount = Mount {
        target: PathBuf::from(POD_DIR),
        source: dir.to_path_buf(),
        read_only: true,
    };
    (Some(mount), links)
}

/// Replaces `path` with `content` by a rename, so a reader sees the old file
/// or the new one, never a part; returns whether it changed. Readable by
/// every user the container may run as.
pub fn replace_file(path: &Path, content: &str) -> io::Result<bool> {
    if fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".hosts-")
        .tempfile_in(dir)?;
    io::Write::write_all(&mut tmp, content.as_bytes())?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ns: &str, name: &str, svc: Option<&str>, eps: serde_json::Value) -> EndpointSlice {
        let mut labels = serde_json::Map::new();
        if let Some(s) = svc {
            labels.insert(SERVICE_NAME_LABEL.into(), json!(s));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "addressType": "IPv4",
            "endpoints": eps,
        }))
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_ready_endpoints_of_a_service_count() {
        let s = slice(
            "ns",
            "web-abc",
            Some("web"),
            json!([
                {"addresses": ["198.18.0.2"], "conditions": {"ready": true}},
                {"addresses": ["198.18.0.3"], "conditions": {"ready": false, "terminating": true}},
                {"addresses": ["198.18.0.4"]},
                {"addresses": ["198.18.0.5"], "conditions": {}},
            ]),
        );
        let (svc, addrs) = slice_addrs(&s).unwrap();
        assert_eq!(
            svc,
            ServiceKey {
                namespace: "ns".into(),
                name: "web".into()
            }
        );
        assert_eq!(
            addrs,
            [ip("198.18.0.2"), ip("198.18.0.4"), ip("198.18.0.5")].into()
        );
        assert!(slice_addrs(&slice("ns", "x", None, json!([]))).is_none());
        let mut fqdn = s.clone();
        fqdn.address_type = "FQDN".into();
        assert!(slice_addrs(&fqdn).is_none());
    }

    #[test]
    fn slices_merge_per_service_and_leave_when_deleted() {
        let mut t = SliceTable::default();
        let a = slice(
            "ns",
            "web-a",
            Some("web"),
            json!([{"addresses": ["198.18.0.2"]}]),
        );
        let b = slice(
            "ns",
            "web-b",
            Some("web"),
            json!([{"addresses": ["198.18.0.3"]}]),
        );
        t.apply(&a);
        t.apply(&b);
        t.apply(&slice("other", "empty", Some("idle"), json!([])));
        let key = ServiceKey {
            namespace: "ns".into(),
            name: "web".into(),
        };
        let s = t.services();
        assert_eq!(
            s.0.len(),
            1,
            "a Service without ready endpoints has no line"
        );
        assert_eq!(s.0[&key], [ip("198.18.0.2"), ip("198.18.0.3")].into());
        t.delete(&a);
        assert_eq!(t.services().0[&key], [ip("198.18.0.3")].into());
        // A slice that loses its Service label leaves too.
        t.apply(&slice("ns", "web-b", None, json!([])));
        assert!(t.services().0.is_empty());
    }

    fn names() -> PodNames {
        PodNames {
            namespace: "ns".into(),
            hostname: "client".into(),
            subdomain: None,
            pod_ip: "198.18.9.9".into(),
            aliases: vec![],
        }
    }

    #[test]
    fn the_file_has_the_kubelet_lines_then_every_service() {
        let mut t = SliceTable::default();
        t.apply(&slice(
            "ns",
            "web-a",
            Some("web"),
            json!([{"addresses": ["198.18.0.3"]}, {"addresses": ["198.18.0.2"]}]),
        ));
        t.apply(&slice(
            "other",
            "db-a",
            Some("db"),
            json!([{"addresses": ["198.18.1.1"]}]),
        ));
        let text = render(&names(), &t.services());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# Kubernetes-managed hosts file.");
        assert_eq!(lines[1], "127.0.0.1\tlocalhost");
        assert!(lines.contains(&"198.18.9.9\tclient"));
        let services: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("# Services"))
            .skip(1)
            .collect();
        assert_eq!(
            services,
            [
                // By namespace, then name; each address on a line.
                "198.18.0.2\tweb.ns.svc.cluster.local\tweb.ns.svc\tweb.ns\tweb",
                "198.18.0.3\tweb.ns.svc.cluster.local\tweb.ns.svc\tweb.ns\tweb",
                // Another namespace's Service: no short name.
                "198.18.1.1\tdb.other.svc.cluster.local\tdb.other.svc\tdb.other",
            ]
        );
    }

    #[test]
    fn subdomain_aliases_and_shadowing_names() {
        let mut p = names();
        p.subdomain = Some("workers".into());
        p.aliases = vec![("10.1.2.3".into(), vec!["a.example".into(), "b".into()])];
        let mut t = SliceTable::default();
        for svc in ["localhost", "client"] {
            t.apply(&slice(
                "ns",
                svc,
                Some(svc),
                json!([{"addresses": ["198.18.0.8"]}]),
            ));
        }
        let text = render(&p, &t.services());
        assert!(text.contains("198.18.9.9\tclient.workers.ns.svc.cluster.local\tclient\n"));
        assert!(
            text.contains("\n# Entries added by HostAliases.\n10.1.2.3\ta.example\n10.1.2.3\tb\n")
        );
        assert!(text.contains(
            "198.18.0.8\tlocalhost.ns.svc.cluster.local\tlocalhost.ns.svc\tlocalhost.ns\n"
        ));
        assert!(
            text.contains("198.18.0.8\tclient.ns.svc.cluster.local\tclient.ns.svc\tclient.ns\n")
        );
    }

    #[test]
    fn pod_names_come_from_the_spec() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns"},
            "spec": {"containers": [], "subdomain": "web", "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["x"]}]}
        }))
        .unwrap();
        let n = PodNames::of(&pod, "198.18.4.4");
        assert_eq!(n.hostname, "web-0");
        assert_eq!(n.subdomain.as_deref(), Some("web"));
        assert_eq!(
            n.aliases,
            vec![("10.0.0.9".to_string(), vec!["x".to_string()])]
        );
    }

    #[test]
    fn containers_see_the_pod_files_unless_they_mount_their_own() {
        let dir = Path::new("/state/pods/ns_p_u/network");
        let (mount, links) = network_mounts(&[], dir);
        let mount = mount.unwrap();
        assert_eq!(mount.target, PathBuf::from("/etc/process-kubelet"));
        assert_eq!(mount.source, dir);
        assert!(mount.read_only);
        assert_eq!(
            links,
            vec![
                Link {
                    path: "/etc/hosts".into(),
                    target: "process-kubelet/hosts".into()
                },
                Link {
                    path: "/etc/host.conf".into(),
                    target: "process-kubelet/host.conf".into()
                },
            ]
        );
        let user = |target: &str| Mount {
            target: target.into(),
            source: "/vol".into(),
            read_only: true,
        };
        let (mount, links) = network_mounts(&[user("/etc/hosts/")], dir);
        assert!(mount.is_some());
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].path, PathBuf::from("/etc/host.conf"));
        let (mount, links) = network_mounts(&[user("/etc")], dir);
        assert!(mount.is_none() && links.is_empty());
        // A volume elsewhere in /etc changes nothing.
        assert_eq!(network_mounts(&[user("/etc/app")], dir).1.len(), 2);
    }

    #[test]
    fn the_file_is_replaced_whole_with_a_new_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        assert!(replace_file(&path, "one\n").unwrap());
        let first = fs::metadata(&path).unwrap().ino();
        assert!(
            !replace_file(&path, "one\n").unwrap(),
            "unchanged: untouched"
        );
        assert_eq!(fs::metadata(&path).unwrap().ino(), first);
        assert!(replace_file(&path, "two\n").unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_ne!(fs::metadata(&path).unwrap().ino(), first);
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o644);
        // No temporary files left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
