//! Outgoing HTTP from a guest (`wasi:http/outgoing-handler`): refused unless the
//! server was told the host (`--allow-outgoing HOST[:PORT]`).
//!
//! The request's authority decides: its host, compared without case, and its port
//! (given, or the scheme's: 80, 443). `HOST` alone allows every port of the host. A
//! refused request fails, for the guest, with `HTTP-request-denied`; nothing is
//! connected.

use std::future::Future;
use std::str::FromStr;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// One host (and port) guests may send requests to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    host: String,
    port: Option<u16>,
}

impl FromStr for AllowedHost {
    type Err = String;

    fn from_str(s: &str) -> Result<AllowedHost, String> {
        let bad = || format!("{s:?}: expected HOST or HOST:PORT");
        let (host, port) = match s.rsplit_once(':') {
            // An IPv6 address in brackets, with or without a port.
            _ if s.starts_with('[') && s.ends_with(']') => (s, None),
            Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
                let port = port.parse::<u16>().map_err(|_| bad())?;
                (host, Some(port))
            }
            Some(_) => return Err(bad()),
            None => (s, None),
        };
        if host.is_empty() || host.contains(['/', '@', ' ', '?', '#']) {
            return Err(bad());
        }
        Ok(AllowedHost {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl AllowedHost {
    fn allows(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.is_none_or(|p| p == port)
    }
}

/// The most bytes one write to a 0.2 body may carry (what `check-write` answers).
const BODY_CHUNK: usize = 16 << 10;

/// Writes a 0.2 body takes before its writer waits for the connection to take one:
/// a guest writing 4 KiB at a time (the most `blocking-write-and-flush` takes) queues
/// 256 KiB without waiting, a flush completes as soon as its bytes are queued, and no
/// body holds more than about a MiB (wasmtime's default is one write, so that every
/// 4 KiB waited for hyper).
const BODY_CHUNKS: usize = 64;

/// The hooks of one request's store: the outgoing allow list, and how much of a body
/// is queued before its writer waits.
pub(crate) struct Outgoing {
    pub(crate) allowed: std::sync::Arc<[AllowedHost]>,
}

impl Outgoing {
    fn allows(&self, uri: &http::Uri) -> bool {
        let Some(authority) = uri.authority() else {
            return false;
        };
        let port = authority.port_u16().unwrap_or(match uri.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
        self.allowed
            .iter()
            .any(|a| a.allows(authority.host(), port))
    }
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
>;

impl WasiHttpHooks for Outgoing {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        BODY_CHUNKS
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        if !self.allows(request.uri()) {
            tracing::info!(
                "outgoing request to {} refused (not in --allow-outgoing)",
                request.uri()
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(allowed: &[&str]) -> Outgoing {
        Outgoing {
            allowed: allowed.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_host_is_allowed_on_its_port_or_on_all_and_nothing_else_is() {
        let o = outgoing(&["Example.org", "127.0.0.1:8080", "[::1]:9000"]);
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        assert!(o.allows(&uri("https://example.org/x")));
        assert!(o.allows(&uri("http://EXAMPLE.org:81/")));
        assert!(o.allows(&uri("http://127.0.0.1:8080/")));
        assert!(!o.allows(&uri("http://127.0.0.1:8081/")));
        assert!(!o.allows(&uri("http://127.0.0.1/")));
        assert!(o.allows(&uri("http://[::1]:9000/")));
        assert!(!o.allows(&uri("http://example.org.evil/")));
        assert!(!o.allows(&uri("/relative")));
        assert!(!outgoing(&[]).allows(&uri("https://example.org/")));
    }

    #[test]
    fn a_bad_allowed_host_is_refused_with_what_was_expected() {
        for bad in ["", ":80", "host:port", "a/b", "user@host", "host:99999"] {
            let e = bad.parse::<AllowedHost>().unwrap_err();
            assert!(e.contains("HOST or HOST:PORT"), "{bad}: {e}");
        }
    }
}
