//! Which peers may attach which export (`wasm9p serve --allow EXPORT=PEER[,PEER]...`).
//!
//! Without any rule every peer may attach every export (what a server for one client
//! wants). With rules, an export may be attached only by the peers a rule names for it,
//! and an export no rule names by nobody. A peer is named by what its transport proves:
//! - `cid:N`: an AF_VSOCK peer's context id (a QEMU/vhost-vsock VM);
//! - `uid:N`, `gid:N`: a Unix-socket peer's credentials (SO_PEERCRED);
//! - `listen:ADDR`: connections that arrived on that listener, whoever they are: the way
//!   to bind a Firecracker or Cloud Hypervisor VM (each has its own hybrid-vsock socket,
//!   `fc-vsock:UDS:PORT`) to its export;
//! - `ip:ADDR[/BITS]`: a tcp peer's address (IPv4-mapped IPv6 addresses count as IPv4).
//!
//! Rules hold for the export and every directory attached inside it (`NAME/sub`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use wasm9p_proto::transport::{Peer, PeerId};
use wasm9p_proto::Addr;

/// One way of naming peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMatch {
    /// AF_VSOCK context id.
    Cid(u32),
    /// Unix-socket peer user.
    Uid(u32),
    /// Unix-socket peer group.
    Gid(u32),
    /// Arrived on this listener.
    Listen(Addr),
    /// A tcp peer in this network (`bits` of `net` fixed).
    Ip {
        /// The network's address.
        net: IpAddr,
        /// Its prefix length.
        bits: u8,
    },
}

impl PeerMatch {
    /// Whether `peer` is one of these.
    pub fn matches(&self, peer: &Peer) -> bool {
        match (self, &peer.id) {
            (PeerMatch::Cid(n), PeerId::Vsock { cid }) => n == cid,
            (PeerMatch::Uid(n), PeerId::Unix { uid, .. }) => n == uid,
            (PeerMatch::Gid(n), PeerId::Unix { gid, .. }) => n == gid,
            (PeerMatch::Listen(addr), _) => peer.listener.as_ref() == Some(addr),
            (PeerMatch::Ip { net, bits }, PeerId::Ip(ip)) => in_network(*ip, *net, *bits),
            _ => false,
        }
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - bits as u32).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - bits as u32).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// Why a rule does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(String);

impl FromStr for PeerMatch {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<PeerMatch, RuleError> {
        let bad = |why: &str| RuleError(format!("peer {s:?}: {why}"));
        let (kind, value) = s
            .split_once(':')
            .ok_or_else(|| bad("expected cid:N, uid:N, gid:N, listen:ADDR or ip:CIDR"))?;
        let number = || value.parse::<u32>().map_err(|_| bad("expected a number"));
        Ok(match kind {
            "cid" => PeerMatch::Cid(number()?),
            "uid" => PeerMatch::Uid(number()?),
            "gid" => PeerMatch::Gid(number()?),
            "listen" => PeerMatch::Listen(
                value
                    .parse()
                    .map_err(|e: wasm9p_proto::AddrError| bad(&e.to_string()))?,
            ),
            "ip" => {
                let (addr, bits) = match value.rsplit_once('/') {
                    Some((addr, bits)) => (addr, Some(bits)),
                    None => (value, None),
                };
                let net: IpAddr = addr
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .map_err(|_| bad("expected an IP address"))?;
                let most = if net.is_ipv4() { 32 } else { 128 };
                let bits = match bits {
                    None => most,
                    Some(b) => b
                        .parse::<u8>()
                        .ok()
                        .filter(|b| *b <= most)
                        .ok_or_else(|| bad(&format!("prefix length 0..={most}")))?,
                };
                PeerMatch::Ip { net, bits }
            }
            _ => return Err(bad("expected cid:, uid:, gid:, listen: or ip:")),
        })
    }
}

impl fmt::Display for PeerMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerMatch::Cid(n) => write!(f, "cid:{n}"),
            PeerMatch::Uid(n) => write!(f, "uid:{n}"),
            PeerMatch::Gid(n) => write!(f, "gid:{n}"),
            PeerMatch::Listen(a) => write!(f, "listen:{a}"),
            PeerMatch::Ip { net, bits } => write!(f, "ip:{net}/{bits}"),
        }
    }
}

/// `EXPORT=PEER[,PEER]...`: the peers that may attach an export (by its name or path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessRule {
    /// The export, as `aname` would name it (its name or its path).
    pub export: String,
    /// Who may attach it.
    pub peers: Vec<PeerMatch>,
}

impl FromStr for AccessRule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<AccessRule, RuleError> {
        let (export, peers) = s
            .split_once('=')
            .filter(|(e, p)| !e.is_empty() && !p.is_empty())
            .ok_or_else(|| RuleError(format!("{s:?}: expected EXPORT=PEER[,PEER]...")))?;
        // A listen:ADDR may itself hold commas only in no address form we take, so the
        // list splits on every comma.
        let peers = peers
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AccessRule {
            export: export.to_owned(),
            peers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: PeerId, listener: &str) -> Peer {
        Peer {
            name: "test".into(),
            listener: Some(listener.parse().unwrap()),
            id,
        }
    }

    #[test]
    fn rules_parse_every_kind_of_peer_and_refuse_the_rest() {
        let rule: AccessRule =
            "tenant-a=cid:3,uid:1000,gid:50,listen:unix:/run/a.sock_5640,ip:10.0.0.0/8,ip:::1"
                .parse()
                .unwrap();
        assert_eq!(rule.export, "tenant-a");
        assert_eq!(
            rule.peers.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            [
                "cid:3",
                "uid:1000",
                "gid:50",
                "listen:unix:/run/a.sock_5640",
                "ip:10.0.0.0/8",
                "ip:::1/128"
            ]
        );
        for bad in [
            "tenant-a",
            "=uid:1",
            "a=",
            "a=uid:me",
            "a=cid:-1",
            "a=ip:10.0.0.0/33",
            "a=ip:nowhere",
            "a=mac:00:11",
            "a=listen:carrier:pigeon",
        ] {
            assert!(bad.parse::<AccessRule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn peers_match_by_what_their_transport_proves() {
        let tcp = |ip: &str| peer(PeerId::Ip(ip.parse().unwrap()), "tcp:0.0.0.0:564");
        let net: PeerMatch = "ip:10.1.0.0/16".parse().unwrap();
        assert!(net.matches(&tcp("10.1.2.3")));
        assert!(!net.matches(&tcp("10.2.0.1")));
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d.
        assert!(net.matches(&tcp("::ffff:10.1.9.9")));
        assert!("ip:::1".parse::<PeerMatch>().unwrap().matches(&tcp("::1")));
        assert!(!"ip:::1"
            .parse::<PeerMatch>()
            .unwrap()
            .matches(&tcp("127.0.0.1")));
        assert!("ip:0.0.0.0/0"
            .parse::<PeerMatch>()
            .unwrap()
            .matches(&tcp("192.0.2.1")));

        let vm = peer(PeerId::Vsock { cid: 7 }, "vsock:any:564");
        assert!("cid:7".parse::<PeerMatch>().unwrap().matches(&vm));
        assert!(!"cid:8".parse::<PeerMatch>().unwrap().matches(&vm));
        assert!(!"uid:7".parse::<PeerMatch>().unwrap().matches(&vm));

        let user = peer(PeerId::Unix { uid: 1000, gid: 50 }, "unix:/run/9p.sock");
        assert!("uid:1000".parse::<PeerMatch>().unwrap().matches(&user));
        assert!("gid:50".parse::<PeerMatch>().unwrap().matches(&user));
        assert!(!"uid:0".parse::<PeerMatch>().unwrap().matches(&user));
        assert!("listen:unix:/run/9p.sock"
            .parse::<PeerMatch>()
            .unwrap()
            .matches(&user));
        assert!(!"listen:unix:/run/other.sock"
            .parse::<PeerMatch>()
            .unwrap()
            .matches(&user));
        // In process: known by nothing, matched by nothing.
        assert!(!"uid:0"
            .parse::<PeerMatch>()
            .unwrap()
            .matches(&Peer::local("embedded")));
    }
}
