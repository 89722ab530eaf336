//! Pod IPs. Each Pod that does not ask for `hostNetwork` gets an address of
//! its own from the node's pod network, a /16 ([`PodNetwork::DEFAULT`],
//! `198.18.0.0/16`, from the range RFC 2544 sets aside for benchmarks, which
//! no real network routes). The kubelet makes the whole /16 local to the host
//! as `127.0.0.0/8` is ([`make_local`]: a `local` route to `lo`), so a process
//! binds any of its addresses with no address configured. Loopback addresses
//! themselves would need no setup, but the API server refuses them in an
//! EndpointSlice (`may not be in the loopback range`), and Services need
//! EndpointSlices. The sandboxes still share the host's network namespace
//! (operation Pods reach the databases on 127.0.0.1), so this is addressing,
//! not isolation: two Pods can bind the same port, and anything on the host
//! can reach either.

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};

/// A /16 that Pod IPs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodNetwork {
    base: Ipv4Addr,
}

impl PodNetwork {
    /// `198.18.0.0/16`.
    pub const DEFAULT: PodNetwork = PodNetwork::new(198, 18);
    /// `127.77.0.0/16`: what the kubelet falls back to when it cannot make
    /// [`PodNetwork::DEFAULT`] local (it is not root). Pods bind these with
    /// no setup, but Services get no endpoints.
    pub const LOOPBACK: PodNetwork = PodNetwork::new(127, 77);

    /// The network `a.b.0.0/16`.
    pub const fn new(a: u8, b: u8) -> PodNetwork {
        PodNetwork {
            base: Ipv4Addr::new(a, b, 0, 0),
        }
    }

    /// Whether `ip` is one of this network's.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        ip.octets()[..2] == self.base.octets()[..2]
    }

    pub fn is_loopback(&self) -> bool {
        self.base.is_loopback()
    }

    /// The addresses a Pod may get, best first: the first from a hash of its
    /// UID, then the ones after it, wrapping around the /16. A UID is random,
    /// so two harnesses on one machine rarely start from the same address.
    /// Host parts ending in `.0` or `.255` are left out (tools take them for
    /// network and broadcast addresses).
    pub fn candidates(&self, uid: &str) -> impl Iterator<Item = Ipv4Addr> + use<> {
        let hash = Sha256::digest(uid.as_bytes());
        let start = u16::from_be_bytes([hash[0], hash[1]]);
        let base = u32::from(self.base);
        (0..=u16::MAX)
            .map(move |i| start.wrapping_add(i))
            .filter(|n| !matches!(n & 0xff, 0 | 0xff))
            .map(move |n| Ipv4Addr::from(base | u32::from(n)))
    }
}

impl std::fmt::Display for PodNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/16", self.base)
    }
}

impl std::str::FromStr for PodNetwork {
    type Err = String;
    /// `a.b.0.0/16`, the only size there is.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a /16 network like 198.18.0.0/16");
        let (ip, len) = s.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let [a, b, c, d] = ip.octets();
        if len != "16" || c != 0 || d != 0 {
            return Err(bad());
        }
        Ok(PodNetwork::new(a, b))
    }
}

/// Whether a process here can bind addresses of `net` (probed on `.0.1`).
pub fn bindable(net: &PodNetwork) -> bool {
    let probe = Ipv4Addr::from(u32::from(net.base) | 1);
    TcpListener::bind((probe, 0)).is_ok()
}

/// Makes every address of `net` local to this host, as the kernel's own
/// `local 127.0.0.0/8 dev lo` does for loopback:
/// `ip route replace local <net> dev lo table local`. Nothing to do for a
/// loopback network or one that is already local; the route stays after the
/// kubelet (another harness on the machine may use it) and goes at reboot.
pub fn make_local(net: &PodNetwork) -> anyhow::Result<()> {
    if net.is_loopback() || bindable(net) {
        return Ok(());
    }
    let cidr = net.to_string();
    // Where Debian keeps it, which a non-login PATH may lack.
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .unwrap_or("ip");
    let out = Command::new(ip)
        .args([
            "route", "replace", "local", &cidr, "dev", "lo", "table", "local",
        ])
        .output()
        .context("running `ip` (iproute2) to route the pod network to lo")?;
    if !out.status.success() {
        bail!(
            "`ip route replace local {cidr} dev lo table local` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    if !bindable(net) {
        bail!("addresses of {cidr} are still not bindable after routing it to lo");
    }
    Ok(())
}

/// Whether the Pod shares the node's network (and so its address).
pub fn host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network) == Some(true)
}

/// The Pod IP a kubelet already wrote into the Pod's status, if it is one of
/// `net`: what a restarted kubelet takes over.
pub fn reported(pod: &Pod, net: &PodNetwork) -> Option<Ipv4Addr> {
    let ip: Ipv4Addr = pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
    net.contains(ip).then_some(ip)
}

/// The Pod IPs this node has handed out, each held from the Pod's first
/// sight until it is gone from the API (a restarted container keeps it).
#[derive(Debug)]
pub struct PodIps {
    net: PodNetwork,
    by_uid: HashMap<String, Ipv4Addr>,
    owner: HashMap<Ipv4Addr, String>,
}

impl PodIps {
    /// None handed out yet, from `net`.
    pub fn new(net: PodNetwork) -> PodIps {
        PodIps {
            net,
            by_uid: HashMap::new(),
            owner: HashMap::new(),
        }
    }

    pub fn network(&self) -> PodNetwork {
        self.net
    }

    /// The address of Pod `uid`: the one it holds; else the one its status
    /// reports, when no other Pod holds it; else the first free candidate.
    /// `None` only when all of the /16 is taken.
    pub fn assign(&mut self, uid: &str, reported: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        if let Some(ip) = self.by_uid.get(uid) {
            return Some(*ip);
        }
        let free = |ip: &Ipv4Addr| !self.owner.contains_key(ip);
        let ip = reported
            .filter(|ip| self.net.contains(*ip) && free(ip))
            .or_else(|| self.net.candidates(uid).find(free))?;
        self.by_uid.insert(uid.to_string(), ip);
        self.owner.insert(ip, uid.to_string());
        Some(ip)
    }

    /// Frees the address of a Pod that is gone.
    pub fn release(&mut self, uid: &str) {
        if let Some(ip) = self.by_uid.remove(uid) {
            self.owner.remove(&ip);
        }
    }

    /// The Pod holding `ip`, if any.
    pub fn holder(&self, ip: Ipv4Addr) -> Option<&str> {
        self.owner.get(&ip).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: PodNetwork = PodNetwork::DEFAULT;

    #[test]
    fn candidates_stay_in_the_network_and_start_from_the_uid() {
        let uid = "0b5e7a4c-1111-4d2e-9a51-6f00c0ffee01";
        let a: Vec<Ipv4Addr> = NET.candidates(uid).take(600).collect();
        assert!(a.iter().all(|ip| NET.contains(*ip)));
        assert!(a.iter().all(|ip| !matches!(ip.octets()[3], 0 | 255)));
        // The same UID always starts at the same address; another elsewhere.
        assert_eq!(NET.candidates(uid).next(), Some(a[0]));
        assert_ne!(NET.candidates("another-uid").next(), Some(a[0]));
        // Every usable address once, wrapping over .255 and .0.
        let all: Vec<Ipv4Addr> = NET.candidates("x").collect();
        assert_eq!(all.len(), 256 * 254);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        let lo = PodNetwork::LOOPBACK.candidates(uid).next().unwrap();
        assert!(lo.is_loopback() && lo != Ipv4Addr::LOCALHOST);
    }

    #[test]
    fn networks_are_slash_16s() {
        assert_eq!(NET.to_string(), "198.18.0.0/16");
        assert!(NET.contains("198.18.0.1".parse().unwrap()));
        assert!(NET.contains("198.18.255.254".parse().unwrap()));
        assert!(!NET.contains("198.19.0.1".parse().unwrap()));
        assert!(!NET.contains(Ipv4Addr::LOCALHOST));
        assert!(!NET.is_loopback() && PodNetwork::LOOPBACK.is_loopback());
        assert_eq!("10.77.0.0/16".parse(), Ok(PodNetwork::new(10, 77)));
        for bad in ["10.77.0.0/24", "10.77.1.0/16", "10.77.0.0", "x/16"] {
            assert!(bad.parse::<PodNetwork>().is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_needs_no_setup() {
        // Linux routes all of 127.0.0.0/8 to lo.
        assert!(bindable(&PodNetwork::LOOPBACK));
        assert!(make_local(&PodNetwork::LOOPBACK).is_ok());
    }

    #[test]
    fn an_address_is_held_until_released_and_never_shared() {
        let mut ips = PodIps::new(NET);
        let a = ips.assign("uid-a", None).unwrap();
        assert_eq!(ips.assign("uid-a", None), Some(a), "stable for the pod");
        assert_eq!(ips.holder(a), Some("uid-a"));
        // A pod whose status claims an address another pod holds gets its own.
        let b = ips.assign("uid-b", Some(a)).unwrap();
        assert_ne!(a, b);
        assert_eq!(ips.len(), 2);
        ips.release("uid-a");
        assert_eq!(ips.holder(a), None);
        assert_eq!(ips.assign("uid-b", None), Some(b));
    }

    #[test]
    fn a_restarted_kubelet_readopts_the_reported_address() {
        let mut ips = PodIps::new(NET);
        let reported: Ipv4Addr = "198.18.200.17".parse().unwrap();
        assert_eq!(ips.assign("uid-a", Some(reported)), Some(reported));
        // Outside the network (the host's address of an older kubelet): not
        // adopted.
        let fresh = ips.assign("uid-b", Some(Ipv4Addr::LOCALHOST)).unwrap();
        assert_eq!(Some(fresh), NET.candidates("uid-b").next());
    }

    #[test]
    fn a_taken_first_choice_moves_to_the_next_free_address() {
        let mut ips = PodIps::new(NET);
        let first = NET.candidates("uid-new").next().unwrap();
        ips.assign("uid-old", Some(first)).unwrap();
        let got = ips.assign("uid-new", None).unwrap();
        assert_eq!(Some(got), NET.candidates("uid-new").nth(1));
    }

    #[test]
    fn pod_fields_say_host_network_and_the_reported_ip() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"hostNetwork": true, "containers": []},
            "status": {"podIP": "198.18.1.2"}
        }))
        .unwrap();
        assert!(host_network(&pod));
        assert_eq!(reported(&pod, &NET), Some("198.18.1.2".parse().unwrap()));
        assert_eq!(reported(&pod, &PodNetwork::LOOPBACK), None);
        let plain: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": []},
            "status": {"podIP": "127.0.0.1"}
        }))
        .unwrap();
        assert!(!host_network(&plain));
        assert_eq!(reported(&plain, &NET), None);
    }
}
