//! Fuzz-target bodies, shared by the libFuzzer binaries and the stable replay test.

use bytes::BytesMut;
use wasm9p_proto::{encode_frame, DirEntry, FrameDecoder, Message};

/// Feeds `data` to a frame decoder in chunks; every frame that decodes must re-encode
/// and decode to itself, and nothing may panic or reserve past the limit.
pub fn frame_decode(data: &[u8]) {
    let Some((&knobs, data)) = data.split_first() else { return };
    let limit = 4096 + u32::from(knobs & 0x0f) * 4096;
    let chunk = 1 + usize::from(knobs >> 4) * 7;
    let mut decoder = FrameDecoder::new(limit);
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Ok(msg) = frame.body {
                        check_round_trip(frame.tag, &msg);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
            assert!(buf.capacity() <= limit as usize + 2 * chunk + 64 * 1024);
        }
    }
}

fn check_round_trip(tag: u16, msg: &Message) {
    let mut out = BytesMut::new();
    encode_frame(tag, msg, &mut out);
    let again = FrameDecoder::new(u32::MAX).decode(&mut out).unwrap().unwrap();
    assert_eq!(again.body.as_ref(), Ok(msg));
    if let Message::Rreaddir(r) = msg {
        let _ = DirEntry::decode_all(r.data.0.clone());
    }
}
