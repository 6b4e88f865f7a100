//! Every 9P2000.L message, defined once.
//!
//! The `protocol!` table below lists each request with its number and fields and the
//! reply that answers it (numbered request + 1). From that single table the macro
//! derives the structs, their [`Wire`] encode/decode/size, and the [`Message`] enum with
//! its type numbers, so encode and decode cannot drift apart. Field layouts follow
//! Linux `net/9p/client.c` and diod's protocol notes.

use bytes::{BufMut, Bytes};

use crate::wire::{Data, Qid, TrailingU32, Wire};
use crate::DecodeError;

/// Type number of Rlerror, the 9P2000.L error reply (it has no request).
pub const RLERROR: u8 = 7;

/// Type number of Rerror, the error reply of 9P2000 and 9P2000.u. A 9P2000.L server
/// should answer Rlerror, but some production servers answer Rerror carrying a Linux
/// errno; the Linux client reads both as an errno in a 9P2000.L session, and so does
/// this codec: a frame of this type decodes to [`Message::Rlerror`] (see
/// [`Rlerror::decode_rerror`]). Encoding always writes Rlerror.
pub const RERROR: u8 = 107;

macro_rules! message_struct {
    ($(#[$doc:meta])* $name:ident { $( $(#[$fdoc:meta])* $field:ident : $ty:ty ),* }) => {
        $(#[$doc])*
        #[doc = ""]
        #[doc = concat!("Body on the wire: `", stringify!($($field : $ty),*), "`.")]
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        #[allow(missing_docs)] // fields without their own line are named as in the spec
        pub struct $name {
            $( $(#[$fdoc])* pub $field: $ty, )*
        }

        impl Wire for $name {
            fn byte_size(&self) -> usize {
                0 $( + self.$field.byte_size() )*
            }
            #[allow(unused_variables)]
            fn encode<B: BufMut>(&self, buf: &mut B) {
                $( self.$field.encode(buf); )*
            }
            #[allow(unused_variables)]
            fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
                Ok($name { $( $field: <$ty>::decode(buf)?, )* })
            }
        }
    };
}

macro_rules! protocol {
    ($(
        $num:literal
        $(#[$tdoc:meta])* $t:ident { $( $(#[$tfdoc:meta])* $tf:ident : $tty:ty ),* $(,)? }
        => $(#[$rdoc:meta])* $r:ident { $( $(#[$rfdoc:meta])* $rf:ident : $rty:ty ),* $(,)? }
    ;)*) => {
        $(
            message_struct!($(#[$tdoc])* $t { $( $(#[$tfdoc])* $tf : $tty ),* });
            message_struct!($(#[$rdoc])* $r { $( $(#[$rfdoc])* $rf : $rty ),* });
        )*

        /// Any 9P2000.L message, request or reply.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Message {
            $(
                #[doc = concat!("A `", stringify!($t), "` request.")]
                $t($t),
                #[doc = concat!("A `", stringify!($r), "` reply.")]
                $r($r),
            )*
            /// An error reply to any request.
            Rlerror(Rlerror),
        }

        impl Message {
            /// The type number on the wire.
            pub fn type_id(&self) -> u8 {
                match self {
                    $( Message::$t(_) => $num, Message::$r(_) => $num + 1, )*
                    Message::Rlerror(_) => RLERROR,
                }
            }

            /// The message name, as in `Twalk`.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Message::$t(_) => stringify!($t), Message::$r(_) => stringify!($r), )*
                    Message::Rlerror(_) => "Rlerror",
                }
            }

            /// The name of a type number, or `None` if 9P2000.L has no such message.
            pub fn type_name(ty: u8) -> Option<&'static str> {
                $(
                    if ty == $num { return Some(stringify!($t)); }
                    if ty == $num + 1 { return Some(stringify!($r)); }
                )*
                if ty == RLERROR { return Some("Rlerror"); }
                if ty == RERROR { return Some("Rerror"); }
                None
            }

            /// Size of the body (everything after `size[4] type[1] tag[2]`).
            pub fn body_size(&self) -> usize {
                match self {
                    $( Message::$t(m) => m.byte_size(), Message::$r(m) => m.byte_size(), )*
                    Message::Rlerror(m) => m.byte_size(),
                }
            }

            /// Appends the body to `buf`.
            pub fn encode_body<B: BufMut>(&self, buf: &mut B) {
                match self {
                    $( Message::$t(m) => m.encode(buf), Message::$r(m) => m.encode(buf), )*
                    Message::Rlerror(m) => m.encode(buf),
                }
            }

            /// Decodes the body of a message of type `ty`. The body must be consumed
            /// exactly: trailing bytes are as much an error as missing ones.
            pub fn decode_body(ty: u8, mut body: Bytes) -> Result<Message, DecodeError> {
                let msg = match ty {
                    $(
                        $num => Message::$t(<$t>::decode(&mut body)?),
                        x if x == $num + 1 => Message::$r(<$r>::decode(&mut body)?),
                    )*
                    RLERROR => Message::Rlerror(Rlerror::decode(&mut body)?),
                    RERROR => Message::Rlerror(Rlerror::decode_rerror(&mut body)?),
                    other => return Err(DecodeError::UnknownType(other)),
                };
                if !body.is_empty() {
                    return Err(DecodeError::TrailingBytes(body.len()));
                }
                Ok(msg)
            }
        }

        $(
            impl From<$t> for Message {
                fn from(m: $t) -> Self { Message::$t(m) }
            }
            impl From<$r> for Message {
                fn from(m: $r) -> Self { Message::$r(m) }
            }
        )*
    };
}

message_struct!(
    /// Rlerror: the request failed with a Linux errno.
    Rlerror {
        /// Linux errno value.
        ecode: u32
    }
);

impl From<Rlerror> for Message {
    fn from(m: Rlerror) -> Self {
        Message::Rlerror(m)
    }
}

impl Rlerror {
    /// The errno of an Rerror body, in the three shapes servers send: a bare
    /// `errno[4]` (what Linux reads in a 9P2000.L session), 9P2000.u's
    /// `ename[s] errno[4]`, or plain 9P2000's `ename[s]` alone, which names no errno and
    /// is EIO. Anything else is a decode error.
    pub fn decode_rerror(body: &mut Bytes) -> Result<Rlerror, DecodeError> {
        if body.len() == 4 {
            return Rlerror::decode(body);
        }
        let _ename = String::decode(body)?;
        let ecode = match body.len() {
            0 => crate::Errno::EIO.0,
            4 => u32::decode(body)?,
            n => return Err(DecodeError::TrailingBytes(n)),
        };
        Ok(Rlerror { ecode })
    }
}

protocol! {
    8 /// Tstatfs: file system statistics of the file system holding `fid`.
    Tstatfs { fid: u32 }
    => /// Rstatfs: `statfs(2)` fields.
    Rstatfs {
        /// File system type magic.
        ty: u32,
        /// Block size.
        bsize: u32,
        /// Total blocks.
        blocks: u64,
        /// Free blocks.
        bfree: u64,
        /// Blocks available to unprivileged users.
        bavail: u64,
        /// Total inodes.
        files: u64,
        /// Free inodes.
        ffree: u64,
        /// File system id.
        fsid: u64,
        /// Longest file name.
        namelen: u32,
    };

    12 /// Tlopen: open the file `fid` names, with Linux open flags.
    Tlopen { fid: u32, flags: u32 }
    => /// Rlopen: the opened file's qid and the largest I/O unit (0: msize - IOHDRSZ).
    Rlopen { qid: Qid, iounit: u32 };

    14 /// Tlcreate: create and open `name` in directory `fid`; `fid` becomes the new file.
    Tlcreate { fid: u32, name: String, flags: u32, mode: u32, gid: u32 }
    => /// Rlcreate: the new file's qid and I/O unit.
    Rlcreate { qid: Qid, iounit: u32 };

    16 /// Tsymlink: create symlink `name` in directory `fid` pointing at `symtgt`.
    Tsymlink { fid: u32, name: String, symtgt: String, gid: u32 }
    => /// Rsymlink: the new link's qid.
    Rsymlink { qid: Qid };

    18 /// Tmknod: create a device, fifo or socket node `name` in directory `dfid`.
    Tmknod { dfid: u32, name: String, mode: u32, major: u32, minor: u32, gid: u32 }
    => /// Rmknod: the new node's qid.
    Rmknod { qid: Qid };

    20 /// Trename: move `fid` into directory `dfid` as `name`.
    Trename { fid: u32, dfid: u32, name: String }
    => /// Rrename: done.
    Rrename {};

    22 /// Treadlink: read the target of symlink `fid`.
    Treadlink { fid: u32 }
    => /// Rreadlink: the target, unresolved.
    Rreadlink { target: String };

    24 /// Tgetattr: attributes of `fid`; `request_mask` uses [`crate::consts::getattr`].
    Tgetattr { fid: u32, request_mask: u64 }
    => /// Rgetattr: `valid` says which fields the server filled in.
    Rgetattr {
        /// Which fields are valid ([`crate::consts::getattr`] bits).
        valid: u64,
        /// The file's qid.
        qid: Qid,
        /// st_mode (type and permission bits).
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Hard link count.
        nlink: u64,
        /// Device number of a device node.
        rdev: u64,
        /// Size in bytes.
        size: u64,
        /// Preferred I/O block size.
        blksize: u64,
        /// 512-byte blocks allocated.
        blocks: u64,
        /// Access time, seconds.
        atime_sec: u64,
        /// Access time, nanoseconds.
        atime_nsec: u64,
        /// Modification time, seconds.
        mtime_sec: u64,
        /// Modification time, nanoseconds.
        mtime_nsec: u64,
        /// Status change time, seconds.
        ctime_sec: u64,
        /// Status change time, nanoseconds.
        ctime_nsec: u64,
        /// Birth time, seconds.
        btime_sec: u64,
        /// Birth time, nanoseconds.
        btime_nsec: u64,
        /// Inode generation.
        gen: u64,
        /// Data version.
        data_version: u64,
    };

    26 /// Tsetattr: change the attributes `valid` selects ([`crate::consts::setattr`]).
    Tsetattr {
        /// The file.
        fid: u32,
        /// Which fields to apply.
        valid: u32,
        /// New mode (permission bits).
        mode: u32,
        /// New owner.
        uid: u32,
        /// New group.
        gid: u32,
        /// New size.
        size: u64,
        /// New access time, seconds (with ATIME_SET).
        atime_sec: u64,
        /// New access time, nanoseconds.
        atime_nsec: u64,
        /// New modification time, seconds (with MTIME_SET).
        mtime_sec: u64,
        /// New modification time, nanoseconds.
        mtime_nsec: u64,
    }
    => /// Rsetattr: done.
    Rsetattr {};

    30 /// Txattrwalk: prepare `newfid` to read attribute `name` of `fid` (empty name: list).
    Txattrwalk { fid: u32, newfid: u32, name: String }
    => /// Rxattrwalk: the size of the value (or of the name list).
    Rxattrwalk { size: u64 };

    32 /// Txattrcreate: turn `fid` into a writer of attribute `name`, `attr_size` bytes.
    Txattrcreate { fid: u32, name: String, attr_size: u64, flags: u32 }
    => /// Rxattrcreate: done; write the value, then clunk to set it.
    Rxattrcreate {};

    40 /// Treaddir: read directory entries of open directory `fid` from cookie `offset`.
    Treaddir { fid: u32, offset: u64, count: u32 }
    => /// Rreaddir: packed [`crate::DirEntry`] records.
    Rreaddir { data: Data };

    50 /// Tfsync: flush `fid` to stable storage.
    Tfsync {
        /// The open file.
        fid: u32,
        /// Non-zero: data only (Linux sends it; diod 1.0.24 does not).
        datasync: TrailingU32,
    }
    => /// Rfsync: done.
    Rfsync {};

    52 /// Tlock: acquire or release a POSIX byte-range lock.
    Tlock { fid: u32, ty: u8, flags: u32, start: u64, length: u64, proc_id: u32, client_id: String }
    => /// Rlock: a [`crate::consts::lock`] status.
    Rlock { status: u8 };

    54 /// Tgetlock: test for a conflicting POSIX lock.
    Tgetlock { fid: u32, ty: u8, start: u64, length: u64, proc_id: u32, client_id: String }
    => /// Rgetlock: the conflicting lock, or `ty == UNLCK` if none.
    Rgetlock { ty: u8, start: u64, length: u64, proc_id: u32, client_id: String };

    70 /// Tlink: create hard link `name` in directory `dfid` to file `fid`.
    Tlink { dfid: u32, fid: u32, name: String }
    => /// Rlink: done.
    Rlink {};

    72 /// Tmkdir: create directory `name` in directory `dfid`.
    Tmkdir { dfid: u32, name: String, mode: u32, gid: u32 }
    => /// Rmkdir: the new directory's qid.
    Rmkdir { qid: Qid };

    74 /// Trenameat: rename `oldname` in `olddirfid` to `newname` in `newdirfid`.
    Trenameat { olddirfid: u32, oldname: String, newdirfid: u32, newname: String }
    => /// Rrenameat: done.
    Rrenameat {};

    76 /// Tunlinkat: remove `name` from directory `dirfd` (`AT_REMOVEDIR` for directories).
    Tunlinkat { dirfd: u32, name: String, flags: u32 }
    => /// Runlinkat: done.
    Runlinkat {};

    100 /// Tversion: propose the largest message size and a protocol version.
    Tversion { msize: u32, version: String }
    => /// Rversion: the granted msize (never larger) and version (or "unknown").
    Rversion { msize: u32, version: String };

    102 /// Tauth: open an authentication file (our server refuses with ENOENT).
    Tauth { afid: u32, uname: String, aname: String, n_uname: u32 }
    => /// Rauth: the authentication file's qid.
    Rauth { aqid: Qid };

    104 /// Tattach: bind `fid` to the root of export `aname`.
    Tattach { fid: u32, afid: u32, uname: String, aname: String, n_uname: u32 }
    => /// Rattach: the root's qid.
    Rattach { qid: Qid };

    108 /// Tflush: abort request `oldtag`; answered once that request is finished or dropped.
    Tflush { oldtag: u16 }
    => /// Rflush: `oldtag` may be reused.
    Rflush {};

    110 /// Twalk: walk `fid` through `wnames` (at most 16) and bind the result to `newfid`.
    Twalk { fid: u32, newfid: u32, wnames: Vec<String> }
    => /// Rwalk: one qid per name walked; fewer than asked means the next one failed.
    Rwalk { wqids: Vec<Qid> };

    116 /// Tread: read up to `count` bytes at `offset`.
    Tread { fid: u32, offset: u64, count: u32 }
    => /// Rread: the bytes read (empty at end of file).
    Rread { data: Data };

    118 /// Twrite: write `data` at `offset`.
    Twrite { fid: u32, offset: u64, data: Data }
    => /// Rwrite: bytes written.
    Rwrite { count: u32 };

    120 /// Tclunk: forget `fid`.
    Tclunk { fid: u32 }
    => /// Rclunk: done.
    Rclunk {};

    122 /// Tremove: remove the file `fid` names, and clunk `fid`.
    Tremove { fid: u32 }
    => /// Rremove: done.
    Rremove {};
}

impl Message {
    /// Whether this is a request (T-message); replies have odd type numbers.
    pub fn is_request(&self) -> bool {
        self.type_id().is_multiple_of(2)
    }
}
