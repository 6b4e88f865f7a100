//! Transport addresses: `tcp:HOST:PORT`, `unix:PATH`, `vsock:CID:PORT`,
//! `fc-vsock:UDS_PATH:PORT`. One parser, used by the CLI, the server and the client,
//! with an error that says what was wrong and what was expected.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The vsock CID meaning "any" when listening (`VMADDR_CID_ANY`).
pub const VMADDR_CID_ANY: u32 = u32::MAX;
/// The vsock CID of the host, as seen from a guest (`VMADDR_CID_HOST`).
pub const VMADDR_CID_HOST: u32 = 2;

/// Where a 9P peer is, or where a server listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    /// TCP: a host name or IP literal (IPv6 may be bracketed) and a port.
    Tcp {
        /// Host name or IP address, without brackets.
        host: String,
        /// Port number (0 when listening asks for any free port).
        port: u16,
    },
    /// A Unix domain socket path.
    Unix(PathBuf),
    /// AF_VSOCK: a context id (`VMADDR_CID_ANY` for `any`) and a port.
    Vsock {
        /// Context id.
        cid: u32,
        /// Port.
        port: u32,
    },
    /// Firecracker / Cloud Hypervisor hybrid vsock over a Unix socket.
    ///
    /// A server listens on `UDS_PATH_PORT` (where the VMM forwards guest connections to
    /// host port `PORT`); a host-side client connects to `UDS_PATH`, sends
    /// `CONNECT PORT\n` and expects `OK N\n` before 9P begins.
    FcVsock {
        /// The VMM's vsock Unix socket.
        uds: PathBuf,
        /// The vsock port.
        port: u32,
    },
}

/// Why an address string could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// No `scheme:` prefix we know.
    #[error("unknown address scheme in {0:?}: expected tcp:HOST:PORT, unix:PATH, vsock:CID:PORT or fc-vsock:UDS_PATH:PORT")]
    UnknownScheme(String),
    /// A part is missing.
    #[error("malformed address {addr:?}: expected {expected}")]
    Malformed {
        /// The address as given.
        addr: String,
        /// The expected form.
        expected: &'static str,
    },
    /// The port is not a number in range.
    #[error("invalid port {port:?} in {addr:?}")]
    BadPort {
        /// The address as given.
        addr: String,
        /// The port text.
        port: String,
    },
    /// The vsock CID is not a number or `any`.
    #[error("invalid vsock CID {cid:?} in {addr:?}: expected a number or \"any\"")]
    BadCid {
        /// The address as given.
        addr: String,
        /// The CID text.
        cid: String,
    },
}

impl FromStr for Addr {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<Addr, AddrError> {
        let (scheme, rest) = s
            .split_once(':')
            .ok_or_else(|| AddrError::UnknownScheme(s.into()))?;
        let malformed = |expected| AddrError::Malformed {
            addr: s.into(),
            expected,
        };
        let split_port = |expected| {
            rest.rsplit_once(':')
                .filter(|(a, p)| !a.is_empty() && !p.is_empty())
                .ok_or_else(|| malformed(expected))
        };
        match scheme {
            "tcp" => {
                let (host, port) = split_port("tcp:HOST:PORT")?;
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                if host.is_empty() {
                    return Err(malformed("tcp:HOST:PORT"));
                }
                let port = port.parse().map_err(|_| AddrError::BadPort {
                    addr: s.into(),
                    port: port.into(),
                })?;
                Ok(Addr::Tcp {
                    host: host.into(),
                    port,
                })
            }
            "unix" if !rest.is_empty() => Ok(Addr::Unix(rest.into())),
            "unix" => Err(malformed("unix:PATH")),
            "vsock" => {
                let (cid, port) = split_port("vsock:CID:PORT")?;
                let cid = match cid {
                    "any" => VMADDR_CID_ANY,
                    n => n.parse().map_err(|_| AddrError::BadCid {
                        addr: s.into(),
                        cid: cid.into(),
                    })?,
                };
                let port = port.parse().map_err(|_| AddrError::BadPort {
                    addr: s.into(),
                    port: port.into(),
                })?;
                Ok(Addr::Vsock { cid, port })
            }
            "fc-vsock" => {
                let (uds, port) = split_port("fc-vsock:UDS_PATH:PORT")?;
                let port = port.parse().map_err(|_| AddrError::BadPort {
                    addr: s.into(),
                    port: port.into(),
                })?;
                Ok(Addr::FcVsock {
                    uds: uds.into(),
                    port,
                })
            }
            _ => Err(AddrError::UnknownScheme(s.into())),
        }
    }
}

impl Addr {
    /// The Unix socket a hybrid-vsock server listens on: `UDS_PATH_PORT`.
    pub fn fc_vsock_listen_path(uds: &std::path::Path, port: u32) -> PathBuf {
        let mut path = uds.as_os_str().to_owned();
        path.push(format!("_{port}"));
        PathBuf::from(path)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp { host, port } if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Addr::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
            Addr::Unix(path) => write!(f, "unix:{}", path.display()),
            Addr::Vsock {
                cid: VMADDR_CID_ANY,
                port,
            } => write!(f, "vsock:any:{port}"),
            Addr::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
            Addr::FcVsock { uds, port } => write!(f, "fc-vsock:{}:{port}", uds.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Addr, AddrError> {
        s.parse()
    }

    #[test]
    fn every_scheme_parses_and_prints_back() {
        let cases = [
            (
                "tcp:127.0.0.1:564",
                Addr::Tcp {
                    host: "127.0.0.1".into(),
                    port: 564,
                },
            ),
            (
                "tcp:[::1]:5640",
                Addr::Tcp {
                    host: "::1".into(),
                    port: 5640,
                },
            ),
            (
                "tcp:localhost:0",
                Addr::Tcp {
                    host: "localhost".into(),
                    port: 0,
                },
            ),
            ("unix:/run/9p.sock", Addr::Unix("/run/9p.sock".into())),
            ("vsock:3:564", Addr::Vsock { cid: 3, port: 564 }),
            (
                "vsock:any:564",
                Addr::Vsock {
                    cid: VMADDR_CID_ANY,
                    port: 564,
                },
            ),
            (
                "fc-vsock:/tmp/fc/v.sock:564",
                Addr::FcVsock {
                    uds: "/tmp/fc/v.sock".into(),
                    port: 564,
                },
            ),
        ];
        for (text, addr) in cases {
            assert_eq!(parse(text).as_ref(), Ok(&addr), "{text}");
            assert_eq!(addr.to_string(), text);
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        assert!(matches!(parse("564"), Err(AddrError::UnknownScheme(_))));
        assert!(matches!(
            parse("http:x:1"),
            Err(AddrError::UnknownScheme(_))
        ));
        assert!(matches!(
            parse("tcp:127.0.0.1"),
            Err(AddrError::Malformed { .. })
        ));
        assert!(matches!(
            parse("tcp::564"),
            Err(AddrError::Malformed { .. })
        ));
        assert!(matches!(
            parse("tcp:[]:564"),
            Err(AddrError::Malformed { .. })
        ));
        assert!(matches!(
            parse("tcp:h:99999"),
            Err(AddrError::BadPort { .. })
        ));
        assert!(matches!(parse("unix:"), Err(AddrError::Malformed { .. })));
        assert!(matches!(
            parse("vsock:host:5"),
            Err(AddrError::BadCid { .. })
        ));
        assert!(matches!(
            parse("vsock:3:-1"),
            Err(AddrError::BadPort { .. })
        ));
        assert!(matches!(
            parse("fc-vsock:/tmp/v.sock"),
            Err(AddrError::Malformed { .. })
        ));
        assert!(matches!(
            parse("fc-vsock:/tmp/v.sock:x"),
            Err(AddrError::BadPort { .. })
        ));
        let msg = parse("tcp:h:port").unwrap_err().to_string();
        assert!(msg.contains("invalid port \"port\""), "{msg}");
    }

    #[test]
    fn fc_vsock_server_socket_is_path_underscore_port() {
        assert_eq!(
            Addr::fc_vsock_listen_path("/tmp/v.sock".as_ref(), 564),
            PathBuf::from("/tmp/v.sock_564")
        );
    }
}
