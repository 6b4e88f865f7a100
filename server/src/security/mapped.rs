//! The values the two mapped models' stores read and write (`xattrs`, `files`): the
//! metadata a mapped file carries, and where it is found.

use std::os::fd::BorrowedFd;

/// What a mapped file's attributes say; `None`: not set (the host's value shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub rdev: Option<u64>,
}

/// An open file, or a name in a directory (`"."`: the directory itself).
#[derive(Clone, Copy)]
pub(crate) enum Place<'a> {
    Fd(BorrowedFd<'a>),
    Name(BorrowedFd<'a>, &'a str),
}
