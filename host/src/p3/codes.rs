//! 0.2's values as 0.3's, for the descriptor functions and the streams alike: error
//! codes and descriptor types.

use wasm9p_guest_fs::backend::Kind;

use super::bindings::wasi::filesystem::types::{DescriptorType, ErrorCode};

/// 0.2's code as 0.3's (0.3 has every 0.2 code but `would-block`).
pub(super) fn error_code(code: crate::p2::ErrorCode) -> ErrorCode {
    use crate::p2::ErrorCode as P2;
    use ErrorCode as C;
    match code {
        P2::Access => C::Access,
        P2::WouldBlock => C::Other(Some("would-block".into())),
        P2::Already => C::Already,
        P2::BadDescriptor => C::BadDescriptor,
        P2::Busy => C::Busy,
        P2::Deadlock => C::Deadlock,
        P2::Quota => C::Quota,
        P2::Exist => C::Exist,
        P2::FileTooLarge => C::FileTooLarge,
        P2::IllegalByteSequence => C::IllegalByteSequence,
        P2::InProgress => C::InProgress,
        P2::Interrupted => C::Interrupted,
        P2::Invalid => C::Invalid,
        P2::Io => C::Io,
        P2::IsDirectory => C::IsDirectory,
        P2::Loop => C::Loop,
        P2::TooManyLinks => C::TooManyLinks,
        P2::MessageSize => C::MessageSize,
        P2::NameTooLong => C::NameTooLong,
        P2::NoDevice => C::NoDevice,
        P2::NoEntry => C::NoEntry,
        P2::NoLock => C::NoLock,
        P2::InsufficientMemory => C::InsufficientMemory,
        P2::InsufficientSpace => C::InsufficientSpace,
        P2::NotDirectory => C::NotDirectory,
        P2::NotEmpty => C::NotEmpty,
        P2::NotRecoverable => C::NotRecoverable,
        P2::Unsupported => C::Unsupported,
        P2::NoTty => C::NoTty,
        P2::NoSuchDevice => C::NoSuchDevice,
        P2::Overflow => C::Overflow,
        P2::NotPermitted => C::NotPermitted,
        P2::Pipe => C::Pipe,
        P2::ReadOnly => C::ReadOnly,
        P2::InvalidSeek => C::InvalidSeek,
        P2::TextFileBusy => C::TextFileBusy,
        P2::CrossDevice => C::CrossDevice,
    }
}

/// The 0.3 type of a node of `kind`.
pub(super) fn descriptor_type(kind: Kind) -> DescriptorType {
    match kind {
        Kind::Dir => DescriptorType::Directory,
        Kind::File => DescriptorType::RegularFile,
        Kind::Symlink => DescriptorType::SymbolicLink,
        Kind::Other => DescriptorType::Other(None),
    }
}
