//! Golden bytes for every 9P2000.L message: each body written out by hand, field by
//! field, from the spec's layout (little-endian integers, `u16`-prefixed strings and
//! lists, `u32`-prefixed payloads), and checked in both directions.

use bytes::{Bytes, BytesMut};
use wasm9p_proto::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

fn check(msg: impl Into<Message>, ty: u8, body_hex: &str) {
    let msg = msg.into();
    let body = hex(body_hex);
    assert_eq!(msg.type_id(), ty, "{}", msg.name());
    let mut encoded = BytesMut::new();
    msg.encode_body(&mut encoded);
    assert_eq!(
        &encoded[..],
        &body[..],
        "{} encodes to its golden bytes",
        msg.name()
    );
    assert_eq!(msg.body_size(), body.len(), "{} body_size", msg.name());
    let decoded = Message::decode_body(ty, Bytes::from(body.clone())).unwrap();
    assert_eq!(decoded, msg, "{} decodes from its golden bytes", msg.name());
    // Every strict prefix of the body is an error, never a panic.
    for cut in 0..body.len() {
        let short = Bytes::from(body[..cut].to_vec());
        if let Ok(m) = Message::decode_body(ty, short) {
            // Only Tfsync may legitimately lose its trailing datasync.
            assert_eq!(
                m.name(),
                "Tfsync",
                "{} decoded from {cut} of {} bytes",
                msg.name(),
                body.len()
            );
        }
    }
}

const QID: Qid = Qid {
    ty: 0x80,
    version: 1,
    path: 2,
};
const QID_HEX: &str = "80 01000000 0200000000000000";

#[test]
fn frame_header_is_size_type_tag() {
    let mut buf = BytesMut::new();
    encode_frame(
        0xffff,
        &Tversion {
            msize: 8192,
            version: "9P2000.L".into(),
        }
        .into(),
        &mut buf,
    );
    assert_eq!(
        &buf[..],
        &hex("15000000 64 ffff 00200000 0800 3950323030302e4c")[..],
    );
}

#[test]
fn session_messages() {
    check(
        Tversion {
            msize: 8192,
            version: "9P2000.L".into(),
        },
        100,
        "00200000 0800 3950323030302e4c",
    );
    check(
        Rversion {
            msize: 4096,
            version: "unknown".into(),
        },
        101,
        "00100000 0700 756e6b6e6f776e",
    );
    check(
        Tauth {
            afid: 1,
            uname: "u".into(),
            aname: "a".into(),
            n_uname: 1000,
        },
        102,
        "01000000 0100 75 0100 61 e8030000",
    );
    check(Rauth { aqid: QID }, 103, QID_HEX);
    check(
        Tattach {
            fid: 0,
            afid: u32::MAX,
            uname: "root".into(),
            aname: "/x".into(),
            n_uname: 0,
        },
        104,
        "00000000 ffffffff 0400 726f6f74 0200 2f78 00000000",
    );
    check(Rattach { qid: QID }, 105, QID_HEX);
    check(Rlerror { ecode: 2 }, 7, "02000000");
    check(Tflush { oldtag: 0x1234 }, 108, "3412");
    check(Rflush {}, 109, "");
}

#[test]
fn walk_read_write_clunk_remove() {
    check(
        Twalk {
            fid: 1,
            newfid: 2,
            wnames: vec!["usr".into(), "lib".into()],
        },
        110,
        "01000000 02000000 0200 0300 757372 0300 6c6962",
    );
    check(
        Twalk {
            fid: 1,
            newfid: 1,
            wnames: vec![],
        },
        110,
        "01000000 01000000 0000",
    );
    check(
        Rwalk {
            wqids: vec![
                QID,
                Qid {
                    ty: 2,
                    version: 3,
                    path: 4,
                },
            ],
        },
        111,
        &format!("0200 {QID_HEX} 02 03000000 0400000000000000"),
    );
    check(
        Tread {
            fid: 5,
            offset: 0x100,
            count: 4096,
        },
        116,
        "05000000 0001000000000000 00100000",
    );
    check(
        Rread {
            data: Data(Bytes::from_static(b"hi")),
        },
        117,
        "02000000 6869",
    );
    check(
        Twrite {
            fid: 5,
            offset: 1,
            data: Data(Bytes::from_static(b"abc")),
        },
        118,
        "05000000 0100000000000000 03000000 616263",
    );
    check(Rwrite { count: 3 }, 119, "03000000");
    check(Tclunk { fid: 9 }, 120, "09000000");
    check(Rclunk {}, 121, "");
    check(Tremove { fid: 9 }, 122, "09000000");
    check(Rremove {}, 123, "");
}

#[test]
fn dotl_file_messages() {
    check(Tstatfs { fid: 1 }, 8, "01000000");
    check(
        Rstatfs { ty: 0x01021994, bsize: 4096, blocks: 10, bfree: 5, bavail: 4, files: 100, ffree: 50, fsid: 7, namelen: 255 },
        9,
        "94190201 00100000 0a00000000000000 0500000000000000 0400000000000000 6400000000000000 3200000000000000 0700000000000000 ff000000",
    );
    check(Tlopen { fid: 1, flags: 0o2 }, 12, "01000000 02000000");
    check(
        Rlopen {
            qid: QID,
            iounit: 0,
        },
        13,
        &format!("{QID_HEX} 00000000"),
    );
    check(
        Tlcreate {
            fid: 1,
            name: "f".into(),
            flags: 0o102,
            mode: 0o644,
            gid: 0,
        },
        14,
        "01000000 0100 66 42000000 a4010000 00000000",
    );
    check(
        Rlcreate {
            qid: QID,
            iounit: 8192,
        },
        15,
        &format!("{QID_HEX} 00200000"),
    );
    check(
        Tsymlink {
            fid: 1,
            name: "l".into(),
            symtgt: "../t".into(),
            gid: 5,
        },
        16,
        "01000000 0100 6c 0400 2e2e2f74 05000000",
    );
    check(Rsymlink { qid: QID }, 17, QID_HEX);
    check(
        Tmknod {
            dfid: 1,
            name: "p".into(),
            mode: 0o10644,
            major: 1,
            minor: 2,
            gid: 0,
        },
        18,
        "01000000 0100 70 a4110000 01000000 02000000 00000000",
    );
    check(Rmknod { qid: QID }, 19, QID_HEX);
    check(
        Trename {
            fid: 1,
            dfid: 2,
            name: "n".into(),
        },
        20,
        "01000000 02000000 0100 6e",
    );
    check(Rrename {}, 21, "");
    check(Treadlink { fid: 1 }, 22, "01000000");
    check(
        Rreadlink {
            target: "/a".into(),
        },
        23,
        "0200 2f61",
    );
    check(
        Tgetattr {
            fid: 1,
            request_mask: consts::getattr::ALL,
        },
        24,
        "01000000 ff3f000000000000",
    );
    check(
        Rgetattr {
            valid: consts::getattr::BASIC,
            qid: QID,
            mode: 0o40755,
            uid: 1,
            gid: 2,
            nlink: 3,
            rdev: 4,
            size: 5,
            blksize: 6,
            blocks: 7,
            atime_sec: 8,
            atime_nsec: 9,
            mtime_sec: 10,
            mtime_nsec: 11,
            ctime_sec: 12,
            ctime_nsec: 13,
            btime_sec: 14,
            btime_nsec: 15,
            gen: 16,
            data_version: 17,
        },
        25,
        &format!(
            "ff07000000000000 {QID_HEX} ed410000 01000000 02000000 {}",
            (3..=17)
                .map(|n| format!("{n:02x}00000000000000"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    check(
        Tsetattr { fid: 1, valid: 0x1ff, mode: 0o600, uid: 2, gid: 3, size: 4, atime_sec: 5, atime_nsec: 6, mtime_sec: 7, mtime_nsec: 8 },
        26,
        "01000000 ff010000 80010000 02000000 03000000 0400000000000000 0500000000000000 0600000000000000 0700000000000000 0800000000000000",
    );
    check(Rsetattr {}, 27, "");
    check(
        Txattrwalk {
            fid: 1,
            newfid: 2,
            name: "user.a".into(),
        },
        30,
        "01000000 02000000 0600 757365722e61",
    );
    check(Rxattrwalk { size: 3 }, 31, "0300000000000000");
    check(
        Txattrcreate {
            fid: 1,
            name: "user.a".into(),
            attr_size: 3,
            flags: 1,
        },
        32,
        "01000000 0600 757365722e61 0300000000000000 01000000",
    );
    check(Rxattrcreate {}, 33, "");
    check(
        Treaddir {
            fid: 1,
            offset: 2,
            count: 3,
        },
        40,
        "01000000 0200000000000000 03000000",
    );
    check(
        Rreaddir {
            data: Data(Bytes::from_static(&[1, 2])),
        },
        41,
        "02000000 0102",
    );
    check(
        Tfsync {
            fid: 1,
            datasync: TrailingU32(1),
        },
        50,
        "01000000 01000000",
    );
    check(Rfsync {}, 51, "");
    check(
        Tlock {
            fid: 1,
            ty: 1,
            flags: 1,
            start: 2,
            length: 3,
            proc_id: 4,
            client_id: "c".into(),
        },
        52,
        "01000000 01 01000000 0200000000000000 0300000000000000 04000000 0100 63",
    );
    check(Rlock { status: 0 }, 53, "00");
    check(
        Tgetlock {
            fid: 1,
            ty: 0,
            start: 2,
            length: 3,
            proc_id: 4,
            client_id: "c".into(),
        },
        54,
        "01000000 00 0200000000000000 0300000000000000 04000000 0100 63",
    );
    check(
        Rgetlock {
            ty: 2,
            start: 2,
            length: 3,
            proc_id: 4,
            client_id: "".into(),
        },
        55,
        "02 0200000000000000 0300000000000000 04000000 0000",
    );
    check(
        Tlink {
            dfid: 1,
            fid: 2,
            name: "h".into(),
        },
        70,
        "01000000 02000000 0100 68",
    );
    check(Rlink {}, 71, "");
    check(
        Tmkdir {
            dfid: 1,
            name: "d".into(),
            mode: 0o755,
            gid: 0,
        },
        72,
        "01000000 0100 64 ed010000 00000000",
    );
    check(Rmkdir { qid: QID }, 73, QID_HEX);
    check(
        Trenameat {
            olddirfid: 1,
            oldname: "a".into(),
            newdirfid: 2,
            newname: "b".into(),
        },
        74,
        "01000000 0100 61 02000000 0100 62",
    );
    check(Rrenameat {}, 75, "");
    check(
        Tunlinkat {
            dirfd: 1,
            name: "d".into(),
            flags: consts::AT_REMOVEDIR,
        },
        76,
        "01000000 0100 64 00020000",
    );
    check(Runlinkat {}, 77, "");
}

#[test]
fn tfsync_without_datasync_decodes_as_diod_sends_it() {
    let msg = Message::decode_body(50, Bytes::from(hex("01000000"))).unwrap();
    assert_eq!(
        msg,
        Message::Tfsync(Tfsync {
            fid: 1,
            datasync: TrailingU32(0)
        })
    );
}

#[test]
fn dirent_golden() {
    let entry = DirEntry {
        qid: QID,
        offset: 3,
        ty: consts::dt::DIR,
        name: "sub".into(),
    };
    let mut buf = BytesMut::new();
    entry.encode(&mut buf);
    assert_eq!(
        &buf[..],
        &hex(&format!("{QID_HEX} 0300000000000000 04 0300 737562"))[..]
    );
}

#[test]
fn type_numbers_are_the_linux_ones() {
    let expected = [
        (7, "Rlerror"),
        (8, "Tstatfs"),
        (12, "Tlopen"),
        (14, "Tlcreate"),
        (16, "Tsymlink"),
        (18, "Tmknod"),
        (20, "Trename"),
        (22, "Treadlink"),
        (24, "Tgetattr"),
        (26, "Tsetattr"),
        (30, "Txattrwalk"),
        (32, "Txattrcreate"),
        (40, "Treaddir"),
        (50, "Tfsync"),
        (52, "Tlock"),
        (54, "Tgetlock"),
        (70, "Tlink"),
        (72, "Tmkdir"),
        (74, "Trenameat"),
        (76, "Tunlinkat"),
        (100, "Tversion"),
        (102, "Tauth"),
        (104, "Tattach"),
        (108, "Tflush"),
        (110, "Twalk"),
        (116, "Tread"),
        (118, "Twrite"),
        (120, "Tclunk"),
        (122, "Tremove"),
    ];
    for (ty, name) in expected {
        assert_eq!(Message::type_name(ty), Some(name));
    }
    // 9P2000 (non-.L) messages are not part of the dialect, but for Rerror, which
    // some servers answer with and which is read as an errno.
    for ty in [106u8, 112, 114, 124, 126] {
        assert_eq!(Message::type_name(ty), None, "{ty}");
    }
    assert_eq!(Message::type_name(107), Some("Rerror"));
}

#[test]
fn rerror_is_read_as_an_errno_in_each_shape_servers_send() {
    let decode = |body: &str| Message::decode_body(107, Bytes::from(hex(body)));
    // A bare errno, as Linux reads Rerror in a 9P2000.L session.
    assert_eq!(
        decode("02000000"),
        Ok(Message::Rlerror(Rlerror { ecode: 2 }))
    );
    // 9P2000.u: ename[s] errno[4].
    assert_eq!(
        decode("0600 6e6f656e74 21 11000000"),
        Ok(Message::Rlerror(Rlerror { ecode: 17 }))
    );
    // Plain 9P2000: ename[s] only, no errno to give: EIO.
    assert_eq!(
        decode("0300 626164"),
        Ok(Message::Rlerror(Rlerror {
            ecode: Errno::EIO.0
        }))
    );
    // Anything else is malformed, as any other body would be.
    assert!(decode("0300 626164 0100").is_err());
    assert!(decode("0900 626164").is_err());
    // (Four bytes are always a bare errno, as Linux reads them.)
    assert_eq!(
        decode("0900 6261"),
        Ok(Message::Rlerror(Rlerror { ecode: 0x6162_0009 }))
    );
    assert!(decode("").is_err());
}
