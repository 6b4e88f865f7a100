//! A client of a farm's content-addressable storage (REAPI v2 `ContentAddressableStorage`
//! and `google.bytestream.ByteStream`): what a worker reads an action's inputs with and
//! writes its outputs with.
//!
//! - Reads: small blobs in `BatchReadBlobs` calls of at most [`MAX_BATCH_BYTES`], a
//!   blob larger than [`MAX_INLINE`] through `ByteStream.Read`. Every blob read is
//!   checked against its digest ([`FetchError::Corrupt`]); a blob the CAS does not have
//!   is [`FetchError::Missing`].
//! - An action's `Directory` messages, level by level ([`Cas::directories`]): one batch
//!   per level of those the worker has not read before (see [`crate::directories`]),
//!   each message checked, at most [`MAX_DIRECTORIES`] of them.
//! - Writes: `FindMissingBlobs` first, then what is missing in `BatchUpdateBlobs` (small)
//!   or `ByteStream.Write` (large).
//!
//! Resource names are REAPI's: `INSTANCE/blobs/HASH/SIZE` to read,
//! `INSTANCE/uploads/UUID/blobs/HASH/SIZE` to write (without `INSTANCE/` when the
//! instance name is empty).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message;
use tonic::transport::Channel;

use crate::apis::bytestream::{byte_stream_client::ByteStreamClient, ReadRequest, WriteRequest};
use crate::apis::v2::{
    self, batch_update_blobs_request,
    content_addressable_storage_client::ContentAddressableStorageClient, BatchReadBlobsRequest,
    BatchUpdateBlobsRequest, FindMissingBlobsRequest,
};
use crate::digest::Digest;
use crate::directories::Directories;
use crate::store::{Fetch, FetchError};
use crate::BoxFuture;

/// Largest blob read or written inside a batch call; larger ones go through ByteStream.
pub const MAX_INLINE: u64 = 1 << 20;
/// Most bytes of blobs in one batch call (gRPC's default message bound is 4 MiB).
pub const MAX_BATCH_BYTES: u64 = 3 << 20;
/// Most `Directory` messages an input root may have.
pub const MAX_DIRECTORIES: usize = 1 << 18;
/// Bytes per ByteStream write message.
const WRITE_CHUNK: usize = 1 << 20;

/// A CAS of one instance.
#[derive(Clone, Debug)]
pub struct Cas {
    instance: String,
    channel: Channel,
}

/// A blob to upload: its digest and where its bytes are.
#[derive(Clone, Debug)]
pub enum Upload {
    /// Bytes in memory.
    Bytes(Digest, Bytes),
    /// The first `size` bytes of a file.
    File(Digest, std::sync::Arc<std::fs::File>),
}

impl Upload {
    /// The blob's digest.
    pub fn digest(&self) -> Digest {
        match self {
            Upload::Bytes(d, _) | Upload::File(d, _) => *d,
        }
    }

    fn bytes(&self) -> Result<Bytes, FetchError> {
        use std::os::unix::fs::FileExt;
        match self {
            Upload::Bytes(_, b) => Ok(b.clone()),
            Upload::File(d, f) => {
                let mut buf = vec![0u8; d.size() as usize];
                f.read_exact_at(&mut buf, 0)
                    .map_err(|e| FetchError::Disk(e.to_string()))?;
                Ok(Bytes::from(buf))
            }
        }
    }
}

/// An address as `--cas` and `--scheduler` take it (`grpc://HOST:PORT`, or
/// `http://HOST:PORT`), as tonic dials it.
pub fn endpoint(address: &str) -> Result<String, String> {
    let rest = address
        .strip_prefix("grpc://")
        .or_else(|| address.strip_prefix("http://"))
        .ok_or_else(|| format!("{address:?}: expected grpc://HOST:PORT"))?;
    if rest.is_empty() || rest.contains('/') || !rest.contains(':') {
        return Err(format!("{address:?}: expected grpc://HOST:PORT"));
    }
    Ok(format!("http://{rest}"))
}

/// A channel to `address` (`grpc://HOST:PORT`), connected lazily.
pub fn channel(address: &str) -> Result<Channel, String> {
    let endpoint = endpoint(address)?;
    let endpoint = tonic::transport::Endpoint::from_shared(endpoint)
        .map_err(|e| format!("{address:?}: {e}"))?
        .connect_timeout(std::time::Duration::from_secs(10))
        .tcp_nodelay(true);
    Ok(endpoint.connect_lazy())
}

fn unreachable(digest: Digest, status: tonic::Status) -> FetchError {
    FetchError::Unreachable {
        digest,
        why: format!("{}: {}", status.code(), status.message()),
    }
}

impl Cas {
    /// The CAS of `instance` on `channel`.
    pub fn new(channel: Channel, instance: &str) -> Cas {
        Cas {
            instance: instance.to_owned(),
            channel,
        }
    }

    /// The instance name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn resource(&self, tail: String) -> String {
        match self.instance.is_empty() {
            true => tail,
            false => format!("{}/{tail}", self.instance),
        }
    }

    fn cas(&self) -> ContentAddressableStorageClient<Channel> {
        ContentAddressableStorageClient::new(self.channel.clone())
            .max_decoding_message_size(64 << 20)
    }

    /// The blobs `digests`, each checked: every one, or the first error.
    pub async fn read_blobs(
        &self,
        digests: &[Digest],
    ) -> Result<HashMap<Digest, Bytes>, FetchError> {
        let mut out = HashMap::new();
        let wanted: Vec<Digest> = digests
            .iter()
            .copied()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let (large, small): (Vec<Digest>, Vec<Digest>) =
            wanted.into_iter().partition(|d| d.size() > MAX_INLINE);
        for d in large {
            out.insert(d, self.read_stream(d).await?);
        }
        for batch in batches(small) {
            let request = BatchReadBlobsRequest {
                instance_name: self.instance.clone(),
                digests: batch.iter().map(Digest::to_proto).collect(),
                acceptable_compressors: Vec::new(),
                digest_function: 0,
            };
            let reply = self
                .cas()
                .batch_read_blobs(request)
                .await
                .map_err(|s| unreachable(batch[0], s))?
                .into_inner();
            for r in reply.responses {
                let wanted = r
                    .digest
                    .as_ref()
                    .and_then(|d| Digest::from_proto(d).ok())
                    .filter(|d| batch.contains(d))
                    .ok_or_else(|| FetchError::Unreachable {
                        digest: batch[0],
                        why: "the CAS answered for a blob not asked for".into(),
                    })?;
                match r.status.as_ref().map_or(0, |s| s.code) {
                    0 => {}
                    5 => return Err(FetchError::Missing(wanted)),
                    code => {
                        return Err(FetchError::Unreachable {
                            digest: wanted,
                            why: format!(
                                "code {code}: {}",
                                r.status.map(|s| s.message).unwrap_or_default()
                            ),
                        })
                    }
                }
                let got = Digest::of(&r.data);
                if got != wanted {
                    return Err(FetchError::Corrupt { wanted, got });
                }
                out.insert(wanted, Bytes::from(r.data));
            }
            if let Some(d) = batch.iter().find(|d| !out.contains_key(d)) {
                return Err(FetchError::Missing(*d));
            }
        }
        Ok(out)
    }

    /// One blob through `ByteStream.Read`, checked.
    async fn read_stream(&self, digest: Digest) -> Result<Bytes, FetchError> {
        let mut client =
            ByteStreamClient::new(self.channel.clone()).max_decoding_message_size(64 << 20);
        let request = ReadRequest {
            resource_name: self.resource(format!("blobs/{}/{}", digest.hex(), digest.size())),
            read_offset: 0,
            read_limit: 0,
        };
        let mut stream = match client.read(request).await {
            Ok(reply) => reply.into_inner(),
            Err(s) if s.code() == tonic::Code::NotFound => return Err(FetchError::Missing(digest)),
            Err(s) => return Err(unreachable(digest, s)),
        };
        let mut data = Vec::with_capacity(digest.size() as usize);
        loop {
            match stream.message().await {
                Ok(Some(chunk)) => {
                    if data.len() + chunk.data.len() > digest.size() as usize {
                        return Err(FetchError::Corrupt {
                            wanted: digest,
                            got: Digest::of(&[data, chunk.data.to_vec()].concat()),
                        });
                    }
                    data.extend_from_slice(&chunk.data);
                }
                Ok(None) => break,
                Err(s) if s.code() == tonic::Code::NotFound => {
                    return Err(FetchError::Missing(digest))
                }
                Err(s) => return Err(unreachable(digest, s)),
            }
        }
        let got = Digest::of(&data);
        if got != digest {
            return Err(FetchError::Corrupt {
                wanted: digest,
                got,
            });
        }
        Ok(Bytes::from(data))
    }

    /// A message stored as a blob, decoded.
    pub async fn read_message<M: Message + Default>(
        &self,
        digest: Digest,
    ) -> Result<M, FetchError> {
        let bytes = self.read_blobs(&[digest]).await?.remove(&digest);
        let bytes = bytes.ok_or(FetchError::Missing(digest))?;
        M::decode(bytes).map_err(|e| FetchError::Unreachable {
            digest,
            why: format!("not the message expected: {e}"),
        })
    }

    /// Every `Directory` message of the tree whose root directory is `root`, by digest,
    /// and how many of them were read from the CAS: level by level, those `cache` has
    /// taken from it and the others read in one batch per level (and kept in it).
    pub async fn directories(
        &self,
        root: Digest,
        cache: &Directories,
    ) -> Result<(HashMap<Digest, v2::Directory>, usize), FetchError> {
        let mut known: HashMap<Digest, v2::Directory> = HashMap::new();
        let mut read = 0;
        let mut level = vec![root];
        while !level.is_empty() {
            if known.len() + level.len() > MAX_DIRECTORIES {
                return Err(FetchError::Unreachable {
                    digest: root,
                    why: format!("the input root has more than {MAX_DIRECTORIES} directories"),
                });
            }
            let mut found = Vec::with_capacity(level.len());
            let mut missing = Vec::new();
            for digest in level {
                match cache.get(&digest) {
                    Some(dir) => found.push((digest, dir)),
                    None => missing.push(digest),
                }
            }
            for (digest, bytes) in self.read_blobs(&missing).await? {
                let dir = v2::Directory::decode(bytes).map_err(|e| FetchError::Unreachable {
                    digest,
                    why: format!("not a Directory message: {e}"),
                })?;
                cache.keep(digest, dir.clone());
                read += 1;
                found.push((digest, dir));
            }
            let mut next = HashSet::new();
            for (digest, dir) in found {
                for sub in &dir.directories {
                    // A digest that is not one is left for the tree's check to name.
                    if let Some(d) = sub.digest.as_ref().and_then(|d| Digest::from_proto(d).ok()) {
                        if !known.contains_key(&d) && d != digest {
                            next.insert(d);
                        }
                    }
                }
                known.insert(digest, dir);
            }
            level = next
                .into_iter()
                .filter(|d| !known.contains_key(d))
                .collect();
        }
        Ok((known, read))
    }

    /// The digests of `digests` the CAS lacks.
    pub async fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>, String> {
        let mut missing = Vec::new();
        for chunk in digests.chunks(4096) {
            let request = FindMissingBlobsRequest {
                instance_name: self.instance.clone(),
                blob_digests: chunk.iter().map(Digest::to_proto).collect(),
                digest_function: 0,
            };
            let reply = self
                .cas()
                .find_missing_blobs(request)
                .await
                .map_err(|s| format!("FindMissingBlobs: {}: {}", s.code(), s.message()))?;
            for d in reply.into_inner().missing_blob_digests {
                missing.push(Digest::from_proto(&d).map_err(|e| e.to_string())?);
            }
        }
        Ok(missing)
    }

    /// Uploads what of `blobs` the CAS lacks; how many were sent.
    pub async fn upload(&self, blobs: Vec<Upload>) -> Result<usize, String> {
        let mut by_digest: HashMap<Digest, Upload> = HashMap::new();
        for b in blobs {
            by_digest.entry(b.digest()).or_insert(b);
        }
        let digests: Vec<Digest> = by_digest.keys().copied().collect();
        let missing = self.find_missing(&digests).await?;
        let sent = missing.len();
        let (large, small): (Vec<Digest>, Vec<Digest>) =
            missing.into_iter().partition(|d| d.size() > MAX_INLINE);
        for d in large {
            self.write_stream(&by_digest[&d]).await?;
        }
        for batch in batches(small) {
            let mut requests = Vec::with_capacity(batch.len());
            for d in &batch {
                requests.push(batch_update_blobs_request::Request {
                    digest: Some(d.to_proto()),
                    data: by_digest[d].bytes().map_err(|e| e.to_string())?.to_vec(),
                    compressor: 0,
                });
            }
            let request = BatchUpdateBlobsRequest {
                instance_name: self.instance.clone(),
                requests,
                digest_function: 0,
            };
            let reply = self
                .cas()
                .max_encoding_message_size(64 << 20)
                .batch_update_blobs(request)
                .await
                .map_err(|s| format!("BatchUpdateBlobs: {}: {}", s.code(), s.message()))?;
            for r in reply.into_inner().responses {
                if let Some(s) = r.status.filter(|s| s.code != 0) {
                    return Err(format!("BatchUpdateBlobs: code {}: {}", s.code, s.message));
                }
            }
        }
        Ok(sent)
    }

    /// One blob through `ByteStream.Write`.
    async fn write_stream(&self, blob: &Upload) -> Result<(), String> {
        static UPLOADS: AtomicU64 = AtomicU64::new(0);
        let digest = blob.digest();
        let data = blob.bytes().map_err(|e| e.to_string())?;
        let n = UPLOADS.fetch_add(1, Ordering::Relaxed);
        let uuid = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            std::process::id(),
            (n << 16)
                ^ (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos() as u64))
                    & 0xffff_ffff_ffff
        );
        let resource = self.resource(format!(
            "uploads/{uuid}/blobs/{}/{}",
            digest.hex(),
            digest.size()
        ));
        let total = data.len();
        let mut messages = Vec::new();
        let mut offset = 0;
        loop {
            let end = (offset + WRITE_CHUNK).min(total);
            messages.push(WriteRequest {
                resource_name: if offset == 0 {
                    resource.clone()
                } else {
                    String::new()
                },
                write_offset: offset as i64,
                finish_write: end == total,
                data: data.slice(offset..end).to_vec(),
            });
            offset = end;
            if offset == total {
                break;
            }
        }
        let mut client =
            ByteStreamClient::new(self.channel.clone()).max_encoding_message_size(64 << 20);
        let reply = client
            .write(futures_util::stream::iter(messages))
            .await
            .map_err(|s| format!("ByteStream.Write: {}: {}", s.code(), s.message()))?;
        let committed = reply.into_inner().committed_size;
        if committed != total as i64 {
            return Err(format!(
                "ByteStream.Write: {committed} of {total} bytes of {digest} taken"
            ));
        }
        Ok(())
    }
}

/// `digests` in groups of at most [`MAX_BATCH_BYTES`].
fn batches(digests: Vec<Digest>) -> Vec<Vec<Digest>> {
    groups_of(digests, MAX_BATCH_BYTES)
}

/// `digests` in order, in groups of at most `bound` bytes (a larger blob alone).
pub(crate) fn groups_of(digests: Vec<Digest>, bound: u64) -> Vec<Vec<Digest>> {
    let mut out: Vec<Vec<Digest>> = Vec::new();
    let mut bytes = 0;
    for d in digests {
        if out.is_empty() || bytes + d.size() > bound {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += d.size();
        out.last_mut().expect("a batch").push(d);
    }
    out
}

impl Fetch for Cas {
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            let mut blobs = self.read_blobs(&[digest]).await?;
            blobs
                .remove(&digest)
                .map(|b| b.to_vec())
                .ok_or(FetchError::Missing(digest))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_grpc_urls_and_batches_stay_small() {
        assert_eq!(
            endpoint("grpc://127.0.0.1:50051").unwrap(),
            "http://127.0.0.1:50051"
        );
        assert_eq!(endpoint("http://[::1]:5").unwrap(), "http://[::1]:5");
        for bad in [
            "127.0.0.1:5",
            "grpc://",
            "grpc://host",
            "grpc://h:1/x",
            "tcp:h:1",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
        let sizes = [MAX_BATCH_BYTES / 2, MAX_BATCH_BYTES / 2, 1, MAX_BATCH_BYTES];
        let digests: Vec<Digest> = sizes
            .iter()
            .map(|s| Digest::of(&vec![0u8; *s as usize]))
            .collect();
        let grouped = batches(digests);
        assert_eq!(grouped.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1, 1]);
    }
}
