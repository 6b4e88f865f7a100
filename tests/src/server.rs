//! Our server on a real loopback socket, in a background runtime.

use std::thread::JoinHandle;

use wasm9p_proto::transport::Listener;
use wasm9p_proto::Addr;
use wasm9p_server::{Server, ServerConfig};

/// A running server; stops when dropped.
pub struct TestServer {
    /// The bound address (the real port of `tcp:127.0.0.1:0`).
    pub addr: Addr,
    /// The server itself (its counters).
    pub server: Server,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Serves `config` on `listen` (use port 0 for any free port).
    pub fn start(config: ServerConfig, listen: &str) -> TestServer {
        let listen: Addr = listen.parse().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let server = Server::new(config).unwrap();
        let serving = server.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = serving;
                let listener = Listener::bind(&listen).await.unwrap();
                addr_tx.send(listener.local_addr().clone()).unwrap();
                server
                    .serve(listener, async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        let addr = addr_rx
            .recv_timeout(crate::TEST_TIMEOUT)
            .expect("server did not start");
        TestServer {
            addr,
            server,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Serves one directory on a free loopback TCP port.
    pub fn tcp(dir: &std::path::Path) -> TestServer {
        TestServer::start(
            ServerConfig {
                exports: vec![wasm9p_server::ExportConfig::new(dir)],
                ..Default::default()
            },
            "tcp:127.0.0.1:0",
        )
    }

    /// `HOST:PORT` of a TCP server, as diod's tools take it.
    pub fn host_port(&self) -> String {
        match &self.addr {
            Addr::Tcp { host, port } => format!("{host}:{port}"),
            other => panic!("not a tcp server: {other}"),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // The runtime drops with its connection tasks when the thread ends.
            let _ = thread.join();
        }
    }
}
