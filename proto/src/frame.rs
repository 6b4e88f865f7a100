//! Framing: `size[4] type[1] tag[2] body`, bounded by the negotiated msize.
//!
//! [`FrameDecoder`] reads the length first and refuses a frame larger than its limit
//! *before* reserving any memory for it (as tokio-util's `LengthDelimitedCodec` does), so
//! a peer cannot make us allocate more than msize per frame. A frame whose length is
//! sane but whose body does not decode is still delivered, as a [`Frame`] whose
//! `body` is the error: the connection survives and the tag gets an error reply.

use bytes::{Buf, BufMut, BytesMut};

use crate::consts::HEADER_SIZE;
use crate::messages::Message;
use crate::{DecodeError, FrameError};

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The tag that pairs a reply with its request.
    pub tag: u16,
    /// The type number from the header.
    pub ty: u8,
    /// The message, or why its body could not be decoded.
    pub body: Result<Message, DecodeError>,
}

/// Appends one whole frame (header and body) for `msg` to `buf`.
pub fn encode_frame(tag: u16, msg: &Message, buf: &mut BytesMut) {
    let size = HEADER_SIZE + msg.body_size();
    buf.reserve(size);
    buf.put_u32_le(size as u32);
    buf.put_u8(msg.type_id());
    buf.put_u16_le(tag);
    msg.encode_body(buf);
}

/// Payloads at least this large are written from their own buffer instead of being
/// copied into the frame ([`encode_frame_head`]).
pub const ZERO_COPY_MIN: usize = 4096;

/// Like [`encode_frame`], but for a message whose last field is a large payload (Rread,
/// Rreaddir, Twrite) it writes only what precedes the payload bytes and returns the
/// payload, to be written right after `buf` (with a vectored write) without copying.
/// Other messages are encoded whole and `None` is returned.
pub fn encode_frame_head(tag: u16, msg: &Message, buf: &mut BytesMut) -> Option<bytes::Bytes> {
    let payload = match msg {
        Message::Rread(r) => &r.data.0,
        Message::Rreaddir(r) => &r.data.0,
        Message::Twrite(t) => &t.data.0,
        _ => {
            encode_frame(tag, msg, buf);
            return None;
        }
    };
    if payload.len() < ZERO_COPY_MIN {
        encode_frame(tag, msg, buf);
        return None;
    }
    let size = HEADER_SIZE + msg.body_size();
    buf.reserve(size - payload.len());
    buf.put_u32_le(size as u32);
    buf.put_u8(msg.type_id());
    buf.put_u16_le(tag);
    if let Message::Twrite(t) = msg {
        buf.put_u32_le(t.fid);
        buf.put_u64_le(t.offset);
    }
    buf.put_u32_le(payload.len() as u32);
    Some(payload.clone())
}

/// Encoded size of the frame for `msg`.
pub fn frame_size(msg: &Message) -> usize {
    HEADER_SIZE + msg.body_size()
}

/// Splits a byte stream into frames no larger than a limit (the msize).
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    max_size: u32,
}

impl FrameDecoder {
    /// A decoder that accepts frames of at most `max_size` bytes.
    pub fn new(max_size: u32) -> Self {
        FrameDecoder { max_size }
    }

    /// The current limit.
    pub fn max_size(&self) -> u32 {
        self.max_size
    }

    /// Changes the limit, as after Tversion negotiates a smaller msize.
    pub fn set_max_size(&mut self, max_size: u32) {
        self.max_size = max_size;
    }

    /// Takes one frame off the front of `buf` if a whole one is there.
    ///
    /// `Ok(None)` means more bytes are needed; `buf` then has room reserved for the
    /// rest of the frame (never more than the limit). An `Err` means the stream cannot
    /// be resynchronised and the connection should be closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let size = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if (size as usize) < HEADER_SIZE {
            return Err(FrameError::TooSmall(size));
        }
        if size > self.max_size {
            return Err(FrameError::TooLarge {
                size,
                max: self.max_size,
            });
        }
        let size = size as usize;
        if buf.len() < size {
            buf.reserve(size - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(size).freeze();
        frame.advance(4);
        let ty = frame.get_u8();
        let tag = frame.get_u16_le();
        Ok(Some(Frame {
            tag,
            ty,
            body: Message::decode_body(ty, frame),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{Tclunk, Tversion};

    #[test]
    fn frame_over_limit_is_refused_before_allocation() {
        let mut decoder = FrameDecoder::new(8192);
        let mut buf = BytesMut::from(&[0x00, 0x00, 0x00, 0x40, 100, 0, 0][..]);
        let before = buf.capacity();
        assert_eq!(
            decoder.decode(&mut buf),
            Err(FrameError::TooLarge {
                size: 0x4000_0000,
                max: 8192
            })
        );
        assert_eq!(
            buf.capacity(),
            before,
            "no memory reserved for a refused frame"
        );
    }

    #[test]
    fn frame_smaller_than_header_is_refused() {
        let mut buf = BytesMut::from(&[3, 0, 0, 0][..]);
        assert_eq!(
            FrameDecoder::new(8192).decode(&mut buf),
            Err(FrameError::TooSmall(3))
        );
    }

    #[test]
    fn partial_frame_waits_then_decodes() {
        let mut whole = BytesMut::new();
        encode_frame(7, &Tclunk { fid: 3 }.into(), &mut whole);
        let mut decoder = FrameDecoder::new(8192);
        let mut buf = BytesMut::from(&whole[..5]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&whole[5..]);
        let frame = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.tag, 7);
        assert_eq!(frame.body, Ok(Tclunk { fid: 3 }.into()));
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_body_is_an_error_for_that_frame_only() {
        let mut buf = BytesMut::new();
        // A Tclunk with a 2-byte body (needs 4), then a good frame.
        buf.extend_from_slice(&[9, 0, 0, 0, 120, 5, 0, 1, 2]);
        encode_frame(
            6,
            &Tversion {
                msize: 8192,
                version: "9P2000.L".into(),
            }
            .into(),
            &mut buf,
        );
        let mut decoder = FrameDecoder::new(8192);
        let bad = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!((bad.tag, bad.ty), (5, 120));
        assert!(bad.body.is_err());
        let good = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(good.tag, 6);
        assert!(good.body.is_ok());
    }

    #[test]
    fn head_plus_payload_equals_the_whole_frame() {
        use crate::messages::{Rread, Twrite};
        use crate::wire::Data;
        let big = bytes::Bytes::from(vec![7u8; ZERO_COPY_MIN + 5]);
        let msgs: [Message; 3] = [
            Rread {
                data: Data(big.clone()),
            }
            .into(),
            Twrite {
                fid: 3,
                offset: 99,
                data: Data(big.clone()),
            }
            .into(),
            Tclunk { fid: 1 }.into(),
        ];
        for msg in msgs {
            let mut whole = BytesMut::new();
            encode_frame(4, &msg, &mut whole);
            let mut head = BytesMut::new();
            let payload = encode_frame_head(4, &msg, &mut head);
            if let Some(p) = &payload {
                assert_eq!(p.as_ptr(), big.as_ptr(), "payload not copied");
                head.extend_from_slice(p);
            }
            assert_eq!(head, whole, "{}", msg.name());
        }
    }

    #[test]
    fn unknown_type_is_a_body_error() {
        let mut buf = BytesMut::from(&[7, 0, 0, 0, 200, 1, 0][..]);
        let frame = FrameDecoder::new(8192).decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.body, Err(DecodeError::UnknownType(200)));
    }
}
