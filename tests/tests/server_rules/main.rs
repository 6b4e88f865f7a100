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

async fn session(dir: &std::path::Path) -> (TestServer, Conn) {
    let server = TestServer::tcp(dir);
    let (conn, _) = Conn::attached(&server.addr, MSIZE, "").await;
    (server, conn)
}
