//! Each rule of the server (confinement, walk, readdir, mutations, xattrs, locks,
//! flush, session) checked over a real loopback TCP connection against a tempdir
//! fixture, with `std::fs` as the oracle.

use std::os::unix::fs::MetadataExt;

use wasm9p_proto::consts::{getattr, lock, open, qid, AT_REMOVEDIR, IOHDRSZ};
use wasm9p_proto::*;
use wasm9p_server::{ExportConfig, ServerConfig};
use wasm9p_tests::{expect_reply, Conn, TestServer, Tree};

mod confinement;
mod files;
mod metadata;
mod nodes;
mod protocol;
mod security;

const MSIZE: u32 = 64 * 1024;

fn fixture() -> tempfile::TempDir {
    Tree::build(&[
        Tree::file("hello.txt", "hello, world\n"),
        Tree::Dir(
            "sub",
            vec![
                Tree::file("inner.txt", "inner"),
                Tree::Dir("deeper", vec![]),
            ],
        ),
        Tree::Symlink("abs-escape", "/etc"),
        Tree::Symlink("rel-escape", "../../../../../../etc"),
        Tree::Symlink("to-sub", "sub"),
        Tree::Symlink("dangling", "/nonexistent/target"),
    ])
}

/// Walks fid 0 to every other fid a connection may hold (1 up to the bound), one
/// request at a time; returns the bound, the first fid refused.
async fn fill_the_fid_table(c: &mut Conn) -> u32 {
    let max = wasm9p_server::MAX_FIDS_PER_CONNECTION as u32;
    for fid in 1..max {
        let walk = Twalk {
            fid: 0,
            newfid: fid,
            wnames: vec![],
        };
        c.send(1, walk).await;
        assert!(
            matches!(c.recv().await.unwrap().body, Ok(Message::Rwalk(_))),
            "fid {fid}"
        );
    }
    max
}

async fn session(dir: &std::path::Path) -> (TestServer, Conn) {
    let server = TestServer::tcp(dir);
    let (conn, _) = Conn::attached(&server.addr, MSIZE, "").await;
    (server, conn)
}
