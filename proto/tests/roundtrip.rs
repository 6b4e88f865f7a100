//! Property tests: for every message type, bodies built from random fields either fail
//! to decode, or decode to a message that encodes back to exactly the same bytes with
//! `body_size` equal to their length. Structured messages are also generated directly
//! and checked with `decode(encode(m)) == m`.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use wasm9p_proto::*;

/// One field's worth of wire bytes: integers of each width, strings and payloads.
fn field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u8>().prop_map(|v| vec![v]),
        any::<u16>().prop_map(|v| v.to_le_bytes().to_vec()),
        any::<u32>().prop_map(|v| v.to_le_bytes().to_vec()),
        any::<u64>().prop_map(|v| v.to_le_bytes().to_vec()),
        "[a-z./]{0,12}".prop_map(|s| {
            let mut b = (s.len() as u16).to_le_bytes().to_vec();
            b.extend_from_slice(s.as_bytes());
            b
        }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| {
            let mut b = (d.len() as u32).to_le_bytes().to_vec();
            b.extend_from_slice(&d);
            b
        }),
    ]
}

fn qid() -> impl Strategy<Value = Qid> {
    (any::<u8>(), any::<u32>(), any::<u64>()).prop_map(|(ty, version, path)| Qid {
        ty,
        version,
        path,
    })
}

fn name() -> impl Strategy<Value = String> {
    "[^/\u{0}]{0,20}"
}

fn structured() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(name(), 0..=16)
        )
            .prop_map(|(fid, newfid, wnames)| Twalk {
                fid,
                newfid,
                wnames
            }
            .into()),
        proptest::collection::vec(qid(), 0..=16).prop_map(|wqids| Rwalk { wqids }.into()),
        (
            any::<u32>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(fid, offset, d)| Twrite {
                fid,
                offset,
                data: d.into()
            }
            .into()),
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|d| Rread { data: d.into() }.into()),
        (
            any::<u32>(),
            name(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(fid, name, flags, mode, gid)| Tlcreate {
                fid,
                name,
                flags,
                mode,
                gid
            }
            .into()),
        (
            qid(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(qid, valid, mode, size, t)| Rgetattr {
                valid,
                qid,
                mode,
                size,
                mtime_sec: t,
                ..Default::default()
            }
            .into()),
        (any::<u32>(), name(), any::<u32>(), name()).prop_map(
            |(olddirfid, oldname, newdirfid, newname)| Trenameat {
                olddirfid,
                oldname,
                newdirfid,
                newname
            }
            .into()
        ),
        (
            any::<u32>(),
            any::<u8>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            name()
        )
            .prop_map(
                |(fid, ty, flags, start, length, proc_id, client_id)| Tlock {
                    fid,
                    ty,
                    flags,
                    start,
                    length,
                    proc_id,
                    client_id
                }
                .into()
            ),
        (any::<u32>(), any::<u32>()).prop_map(|(fid, datasync)| Tfsync {
            fid,
            datasync: TrailingU32(datasync)
        }
        .into()),
        any::<u32>().prop_map(|ecode| Rlerror { ecode }.into()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decodable_bodies_reencode_identically(ty in any::<u8>(), fields in proptest::collection::vec(field(), 0..12)) {
        let body: Vec<u8> = fields.concat();
        if let Ok(msg) = Message::decode_body(ty, Bytes::from(body.clone())) {
            if ty == RERROR {
                // Rerror (type 107) is read as the errno it carries, as Linux does: an
                // Rlerror, which does not re-encode as the 9P2000.u body it came in.
                prop_assert!(matches!(msg, Message::Rlerror(_)));
                return Ok(());
            }
            prop_assert_eq!(msg.type_id(), ty);
            let mut out = BytesMut::new();
            msg.encode_body(&mut out);
            if ty == 50 && body.len() == 4 {
                // Tfsync without datasync re-encodes in the Linux form.
                prop_assert_eq!(&out[..4], &body[..]);
            } else {
                prop_assert_eq!(&out[..], &body[..]);
            }
            prop_assert_eq!(msg.body_size(), out.len());
        }
    }

    #[test]
    fn structured_messages_round_trip(msg in structured(), tag in any::<u16>()) {
        let mut buf = BytesMut::new();
        encode_frame(tag, &msg, &mut buf);
        prop_assert_eq!(buf.len(), frame_size(&msg));
        let frame = FrameDecoder::new(u32::MAX).decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(frame.tag, tag);
        prop_assert_eq!(frame.body, Ok(msg));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn random_streams_never_panic_nor_exceed_limit(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
        let mut decoder = FrameDecoder::new(4096);
        let mut buf = BytesMut::new();
        for chunk in chunks {
            buf.put_slice(&chunk);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(_) => return Ok(()),
                }
            }
            prop_assert!(buf.capacity() <= 4096 + 1024);
        }
    }
}

#[test]
fn dirents_round_trip_in_packer() {
    let entries: Vec<DirEntry> = (0..100)
        .map(|i| DirEntry {
            qid: Qid {
                ty: 0,
                version: i,
                path: i as u64,
            },
            offset: i as u64 + 1,
            ty: 8,
            name: format!("entry-{i}"),
        })
        .collect();
    let mut packer = DirEntryPacker::new(1 << 20);
    for e in &entries {
        assert!(packer.push(e));
    }
    assert_eq!(DirEntry::decode_all(packer.finish()).unwrap(), entries);
}
