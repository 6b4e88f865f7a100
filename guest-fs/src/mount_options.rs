//! Per-mount options of a 9p mount, with Linux v9fs names and semantics where v9fs
//! has them. [`OPTION_KEYS`] lists them all, with the form of each value: `cache=` (a
//! mode name or the Linux bitmask), `negtimeout=MS` (`-1`: until evicted), `msize=`,
//! `cache_size=BYTES` (or with a K, M or G suffix), `symlink_cache=on|off` (whether a
//! metadata mode keeps symlink targets; on by default, off to measure what it saves),
//! `revalidate=MS` (how long a cached answer is believed before it is checked with the
//! server: see [`Trust`]), the flag `nocto` (NFS's name: with `revalidate=MS`, an open
//! trusts what was confirmed of the file less than MS ago instead of asking the server
//! every time), `complete_dirs=K|off` (see [`crate::cache::MAX_COMPLETE`]),
//! `pipeline=on|off` (flights, see [`NinepOptions::pipeline`]), `reconnect=on|off` (off
//! by default: see [`crate::client::ClientConfig::reconnect`]), `cachetag=`,
//! `fscache_dir=` and `fscache_size=` (with `cache=fscache`, see [`crate::fscache`])
//! and the flag `ro`. This module parses and checks them; what a mount caches and how
//! long it believes it is the cache's [`Policy`](crate::cache::Policy), made of them by
//! `Policy::of` in `cache/policy.rs`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use wasm9p_proto::consts::{DEFAULT_MSIZE, MAX_MSIZE, MIN_MSIZE};

/// A v9fs cache mode: a set of Linux `CACHE_*` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheMode(pub u32);

impl CacheMode {
    /// Cache file pages (readahead).
    pub const FILE: u32 = 0x01;
    /// Cache metadata: dentries, attributes, readdir, symlink targets, negative dentries.
    pub const META: u32 = 0x02;
    /// Write back dirty pages, flushed on close and fsync.
    pub const WRITEBACK: u32 = 0x04;
    /// Trust the cache without revalidating (exclusive or read-only mounts).
    pub const LOOSE: u32 = 0x08;
    /// Persistent on-disk content cache.
    pub const FSCACHE: u32 = 0x80;
    const ALL: u32 = Self::FILE | Self::META | Self::WRITEBACK | Self::LOOSE | Self::FSCACHE;

    /// Nothing cached: every operation is an RPC.
    pub const NONE: CacheMode = CacheMode(0);
    /// File pages read ahead.
    pub const READAHEAD: CacheMode = CacheMode(Self::FILE);
    /// Read ahead plus write-back.
    pub const MMAP: CacheMode = CacheMode(Self::FILE | Self::WRITEBACK);
    /// Everything in memory, trusted.
    pub const LOOSE_MODE: CacheMode =
        CacheMode(Self::FILE | Self::META | Self::WRITEBACK | Self::LOOSE);
    /// Loose plus the persistent store.
    pub const FSCACHE_MODE: CacheMode = CacheMode(Self::LOOSE_MODE.0 | Self::FSCACHE);

    const NAMES: [(&'static str, CacheMode); 5] = [
        ("none", Self::NONE),
        ("readahead", Self::READAHEAD),
        ("mmap", Self::MMAP),
        ("loose", Self::LOOSE_MODE),
        ("fscache", Self::FSCACHE_MODE),
    ];

    /// Whether all of `bits` are set.
    pub fn has(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

impl FromStr for CacheMode {
    type Err = OptionError;

    fn from_str(s: &str) -> Result<CacheMode, OptionError> {
        if let Some((_, mode)) = Self::NAMES.iter().find(|(name, _)| *name == s) {
            return Ok(*mode);
        }
        let bits = match s.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => s.parse(),
        }
        .map_err(|_| OptionError::BadCache(s.into()))?;
        if bits & !Self::ALL != 0 {
            return Err(OptionError::BadCache(s.into()));
        }
        Ok(CacheMode(bits))
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::NAMES.iter().find(|(_, mode)| mode == self) {
            Some((name, _)) => f.write_str(name),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

/// How long a negative dentry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegTimeout {
    /// Negative lookups are not cached.
    Off,
    /// Cached for this long.
    For(Duration),
    /// Cached until evicted (`negtimeout=-1`).
    UntilEvicted,
}

impl NegTimeout {
    /// The default: 24 hours when metadata is cached loosely, off otherwise.
    pub fn default_for(mode: CacheMode) -> NegTimeout {
        if mode.has(CacheMode::META | CacheMode::LOOSE) {
            NegTimeout::For(Duration::from_millis(86_400_000))
        } else {
            NegTimeout::Off
        }
    }
}

impl FromStr for NegTimeout {
    type Err = OptionError;

    fn from_str(s: &str) -> Result<NegTimeout, OptionError> {
        match s.parse::<i64>() {
            Ok(-1) => Ok(NegTimeout::UntilEvicted),
            Ok(0) => Ok(NegTimeout::Off),
            Ok(ms) if ms > 0 => Ok(NegTimeout::For(Duration::from_millis(ms as u64))),
            _ => Err(OptionError::BadValue {
                key: "negtimeout",
                value: s.into(),
                expected: "milliseconds, 0 or -1",
            }),
        }
    }
}

/// How long a cached answer (a dentry, negative or not, a listing, attributes, a
/// symlink target, a file's pages) is believed without asking the server.
///
/// `cache=loose` without `revalidate=` trusts forever (v9fs: "for exclusive or
/// read-only mounts"); so do negative dentries kept by `negtimeout` alone in the modes
/// without META. A metadata mode without LOOSE (`cache=0x2`, `0x3`, `0x6`, `0x7`) checks
/// every use, as Linux v9fs revalidates its dentries and inodes; `revalidate=MS` makes
/// any mode trust what was confirmed less than MS ago and check the rest, as FUSE's
/// `entry_timeout`/`attr_timeout` and NFS's `actimeo` do. Opens are close-to-open in
/// every mode but trusted loose: an open asks the server for the file's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Until evicted.
    Forever,
    /// For this long after it was last confirmed (zero: checked at every use).
    For(Duration),
}

/// Why an option was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// Not a cache mode name or bitmask.
    #[error(
        "unknown cache mode {0:?}: expected none, readahead, mmap, loose, fscache or a bitmask"
    )]
    BadCache(String),
    /// A value out of range or malformed.
    #[error("bad {key}={value:?}: expected {expected}")]
    BadValue {
        /// The option.
        key: &'static str,
        /// What was given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// An option this mount type does not have.
    #[error("unknown option {0:?} (a 9p mount takes {list})", list = OptionKey::list())]
    Unknown(String),
    /// `cache=fscache` with no directory to keep its store in.
    #[error("cache=fscache: no store directory: give fscache_dir=DIR (or set $WASM9P_FSCACHE_DIR, $XDG_CACHE_HOME or $HOME)")]
    NoFscacheDir,
}

/// The options a 9p mount takes: each key with the form of its value (empty: a flag,
/// given without `=`) and a value it accepts. The one list the parser is checked
/// against (its unit tests parse every row), its error for an unknown key names, and
/// `--help` and the host's SPEC parser are made from.
pub const OPTION_KEYS: [OptionKey; 14] = [
    OptionKey::new("cache", "MODE", "loose"),
    OptionKey::new("negtimeout", "MS", "1000"),
    OptionKey::new("msize", "BYTES", "65536"),
    OptionKey::new("cache_size", "BYTES", "64M"),
    OptionKey::new("symlink_cache", "on|off", "off"),
    OptionKey::new("revalidate", "MS", "100"),
    OptionKey::new("nocto", "", ""),
    OptionKey::new("complete_dirs", "K|off", "2"),
    OptionKey::new("pipeline", "on|off", "off"),
    OptionKey::new("reconnect", "on|off", "on"),
    OptionKey::new("cachetag", "NAME", "build"),
    OptionKey::new("fscache_dir", "DIR", "/tmp/wasm9p-fscache"),
    OptionKey::new("fscache_size", "BYTES", "1G"),
    OptionKey::new("ro", "", ""),
];

/// What `msize=` accepts, from the protocol's bounds.
static MSIZE_RANGE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("bytes, {MIN_MSIZE}..={MAX_MSIZE}"));

/// A row of [`OPTION_KEYS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionKey {
    /// The key.
    pub key: &'static str,
    /// The form of its value, as `--help` writes it (empty: a flag).
    pub form: &'static str,
    /// A value the parser accepts (empty for a flag).
    pub example: &'static str,
}

impl OptionKey {
    const fn new(key: &'static str, form: &'static str, example: &'static str) -> OptionKey {
        OptionKey { key, form, example }
    }

    /// Whether `key`, given with `value` or without, is a 9p mount option (a flag
    /// only without; a key that wants a value is one either way, and its parser says
    /// what is missing).
    pub fn is_option(key: &str, value: Option<&str>) -> bool {
        OPTION_KEYS
            .iter()
            .any(|k| k.key == key && (!k.form.is_empty() || value.is_none()))
    }

    /// Every option as a list: `cache=MODE, negtimeout=MS, ..., ro`.
    pub fn list() -> String {
        OPTION_KEYS
            .iter()
            .map(|k| match k.form {
                "" => k.key.to_owned(),
                form => format!("{}={form}", k.key),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Options of one 9p mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NinepOptions {
    /// The cache mode.
    pub cache: CacheMode,
    /// Negative dentry lifetime.
    pub negtimeout: NegTimeout,
    /// The msize to ask for.
    pub msize: u32,
    /// Hard bound, in bytes, on everything this mount caches.
    pub cache_size: u64,
    /// Read-only: every mutation is EROFS without asking the server.
    pub read_only: bool,
    /// Whether symlink targets are cached (only in modes that cache metadata).
    pub symlink_cache: bool,
    /// Whether a dropped connection is re-established (remote mounts only).
    pub reconnect: bool,
    /// `revalidate=MS`: how long a cached answer is believed before it is checked
    /// (`None`: as the mode says, see [`NinepOptions::trust`]).
    pub revalidate: Option<Duration>,
    /// `nocto`: where the trust is a window, an open believes the file's version for
    /// the window too, instead of asking the server at every open (close-to-open).
    pub nocto: bool,
    /// `complete_dirs=K`: once a directory has sent K lookups to the server, its whole
    /// listing is read and answers every later lookup in it (`None`: `off`). Only in
    /// modes that cache metadata; see [`crate::cache::MAX_COMPLETE`].
    pub complete_dirs: Option<u32>,
    /// `pipeline=on|off`: a read-only open the server must answer, a listing, a stat
    /// and a link read go as one flight (the walk and what follows on its fid) when the
    /// server says it handles requests in order (see `client::Fid::walk_open`); off,
    /// every request waits for the reply before it and the server is not asked.
    pub pipeline: bool,
    /// `cache=fscache`: where the store lives, and its bound (`None` in other modes).
    pub fscache: Option<FscacheOptions>,
}

/// Where a `cache=fscache` mount keeps its store (see [`crate::fscache`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FscacheOptions {
    /// `cachetag=NAME`: which store (`None`: the mount names it after its server
    /// address and aname).
    pub tag: Option<String>,
    /// `fscache_dir=DIR`: where stores are kept.
    pub dir: std::path::PathBuf,
    /// `fscache_size=BYTES`: the bound on the store, across processes.
    pub size: u64,
}

/// Default `complete_dirs`: a directory is listed at its second lookup sent to the
/// server (a directory looked up once is never listed; listing at the first saved
/// only 1 % of the build workload's cold RPCs more, BENCHMARKS.md §1c).
pub const DEFAULT_COMPLETE_DIRS: u32 = 1;

/// Default `fscache_size`: 1 GiB.
pub const DEFAULT_FSCACHE_SIZE: u64 = 1 << 30;

/// Where stores are kept unless `fscache_dir=` says: `$WASM9P_FSCACHE_DIR`, else
/// `$XDG_CACHE_HOME/wasm9p/fscache`, else `$HOME/.cache/wasm9p/fscache`.
pub fn default_dir() -> Option<std::path::PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = var("WASM9P_FSCACHE_DIR") {
        return Some(dir.into());
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(std::path::Path::new(&xdg).join("wasm9p/fscache"));
    }
    var("HOME").map(|home| std::path::Path::new(&home).join(".cache/wasm9p/fscache"))
}

/// Default `cache_size`: 256 MiB.
pub const DEFAULT_CACHE_SIZE: u64 = 256 << 20;

impl Default for NinepOptions {
    fn default() -> Self {
        NinepOptions {
            cache: CacheMode::NONE,
            negtimeout: NegTimeout::Off,
            msize: DEFAULT_MSIZE,
            cache_size: DEFAULT_CACHE_SIZE,
            read_only: false,
            symlink_cache: true,
            reconnect: false,
            revalidate: None,
            nocto: false,
            complete_dirs: Some(DEFAULT_COMPLETE_DIRS),
            pipeline: true,
            fscache: None,
        }
    }
}

impl NinepOptions {
    /// How long this mount believes what it caches: `revalidate=` when given, else
    /// every use in a metadata mode without LOOSE, else forever.
    pub fn trust(&self) -> Trust {
        match self.revalidate {
            Some(window) => Trust::For(window),
            None if self.cache.has(CacheMode::META) && !self.cache.has(CacheMode::LOOSE) => {
                Trust::For(Duration::ZERO)
            }
            None => Trust::Forever,
        }
    }

    /// Parses `key=value` pairs (and the flag `ro`) in any order. `negtimeout` defaults
    /// from the cache mode unless given; `cachetag`, `fscache_dir` and `fscache_size`
    /// only go with `cache=fscache`.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Self, OptionError> {
        let mut opts = NinepOptions::default();
        let mut negtimeout = None;
        let mut complete_given = false;
        let (mut tag, mut store_dir, mut store_size) = (None, None, None);
        for (key, value) in pairs {
            let value_of = |key: &'static str, expected| {
                value.ok_or(OptionError::BadValue {
                    key,
                    value: String::new(),
                    expected,
                })
            };
            if !OptionKey::is_option(key, value) {
                return Err(OptionError::Unknown(key.into()));
            }
            match key {
                "cache" => opts.cache = value_of("cache", "a mode")?.parse()?,
                "negtimeout" => negtimeout = Some(value_of("negtimeout", "milliseconds")?.parse()?),
                "msize" => {
                    let v = value_of("msize", "bytes")?;
                    opts.msize = v
                        .parse()
                        .ok()
                        .filter(|n| (MIN_MSIZE..=MAX_MSIZE).contains(n))
                        .ok_or(OptionError::BadValue {
                            key: "msize",
                            value: v.into(),
                            expected: MSIZE_RANGE.as_str(),
                        })?;
                }
                "cache_size" => {
                    let v = value_of("cache_size", "bytes")?;
                    opts.cache_size =
                        parse_bytes(v)
                            .filter(|n| *n >= 4096)
                            .ok_or(OptionError::BadValue {
                                key: "cache_size",
                                value: v.into(),
                                expected:
                                    "a size of at least 4096 bytes (a number, or with K, M or G)",
                            })?;
                }
                "symlink_cache" => {
                    opts.symlink_cache =
                        on_off("symlink_cache", value_of("symlink_cache", "on or off")?)?
                }
                "reconnect" => {
                    opts.reconnect = on_off("reconnect", value_of("reconnect", "on or off")?)?
                }
                "pipeline" => {
                    opts.pipeline = on_off("pipeline", value_of("pipeline", "on or off")?)?
                }
                "revalidate" => {
                    let v = value_of("revalidate", "milliseconds")?;
                    let ms: u64 = v.parse().map_err(|_| OptionError::BadValue {
                        key: "revalidate",
                        value: v.into(),
                        expected: "milliseconds (0: check every use)",
                    })?;
                    opts.revalidate = Some(Duration::from_millis(ms));
                }
                "complete_dirs" => {
                    let v = value_of("complete_dirs", "a count or off")?;
                    opts.complete_dirs = match v {
                        "off" => None,
                        n => Some(n.parse().ok().filter(|k| *k <= 1000).ok_or(
                            OptionError::BadValue {
                                key: "complete_dirs",
                                value: v.into(),
                                expected: "lookups before a directory is listed (0..=1000), or off",
                            },
                        )?),
                    };
                    complete_given = opts.complete_dirs.is_some();
                }
                "cachetag" => {
                    let v = value_of("cachetag", "a name")?;
                    if v.is_empty() || v.contains('\0') {
                        return Err(OptionError::BadValue {
                            key: "cachetag",
                            value: v.into(),
                            expected: "a name",
                        });
                    }
                    tag = Some(v.to_owned());
                }
                "fscache_dir" => {
                    let v = value_of("fscache_dir", "a directory")?;
                    store_dir = Some(std::path::PathBuf::from(v));
                }
                "fscache_size" => {
                    let v = value_of("fscache_size", "bytes")?;
                    store_size = Some(parse_bytes(v).filter(|n| *n >= 1 << 20).ok_or(
                        OptionError::BadValue {
                            key: "fscache_size",
                            value: v.into(),
                            expected: "a size of at least 1M (a number, or with K, M or G)",
                        },
                    )?);
                }
                "ro" => opts.read_only = true,
                "nocto" => opts.nocto = true,
                other => unreachable!("{other:?} is in OPTION_KEYS, so parsed above"),
            }
        }
        let window = opts.revalidate.is_some_and(|w| !w.is_zero());
        if opts.nocto && !(window && opts.cache.has(CacheMode::META)) {
            return Err(OptionError::BadValue {
                key: "nocto",
                value: String::new(),
                expected:
                    "a metadata mode with revalidate=MS above 0 (opens trust the file for MS)",
            });
        }
        if complete_given && !opts.cache.has(CacheMode::META) {
            return Err(OptionError::BadValue {
                key: "complete_dirs",
                value: String::new(),
                expected: "a mode that caches metadata (listings are metadata)",
            });
        }
        if opts.cache.has(CacheMode::FSCACHE) {
            if !opts.cache.has(CacheMode::META | CacheMode::FILE) {
                return Err(OptionError::BadValue {
                    key: "cache",
                    value: opts.cache.to_string(),
                    expected: "the FSCACHE bit (0x80) with FILE and META: it keeps what they cache",
                });
            }
            opts.fscache = Some(FscacheOptions {
                tag,
                dir: store_dir
                    .or_else(default_dir)
                    .ok_or(OptionError::NoFscacheDir)?,
                size: store_size.unwrap_or(DEFAULT_FSCACHE_SIZE),
            });
        } else if let Some(key) = [
            ("cachetag", tag.is_some()),
            ("fscache_dir", store_dir.is_some()),
            ("fscache_size", store_size.is_some()),
        ]
        .iter()
        .find_map(|(k, given)| given.then_some(*k))
        {
            return Err(OptionError::BadValue {
                key,
                value: String::new(),
                expected: "cache=fscache (it names the store on disk)",
            });
        }
        opts.negtimeout = negtimeout.unwrap_or_else(|| NegTimeout::default_for(opts.cache));
        Ok(opts)
    }
}

fn on_off(key: &'static str, value: &str) -> Result<bool, OptionError> {
    match value {
        "on" | "1" => Ok(true),
        "off" | "0" => Ok(false),
        v => Err(OptionError::BadValue {
            key,
            value: v.into(),
            expected: "on or off",
        }),
    }
}

/// A byte count: a number, or one with a binary suffix `K`, `M` or `G` (`64M` is
/// 64 MiB), as `mount -o` sizes are written.
/// A number of bytes, plain or with `K`, `M` or `G` (binary: `1M` is 1,048,576).
pub fn parse_bytes(v: &str) -> Option<u64> {
    let (digits, unit) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// A duration: `N` (seconds), `Nms`, `Ns`, `Nm` or `Nh`; `None` if malformed or too
/// long.
pub fn parse_duration(v: &str) -> Option<std::time::Duration> {
    let (number, unit) = match v.strip_suffix("ms") {
        Some(number) => (number, "ms"),
        None => match v.strip_suffix(['s', 'm', 'h']) {
            Some(number) => (number, &v[number.len()..]),
            None => (v, "s"),
        },
    };
    let n: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => Some(n),
        "h" => n.checked_mul(3_600_000),
        "m" => n.checked_mul(60_000),
        _ => n.checked_mul(1000),
    }?;
    Some(std::time::Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<NinepOptions, OptionError> {
        NinepOptions::parse(spec.split(',').filter(|s| !s.is_empty()).map(|kv| {
            match kv.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (kv, None),
            }
        }))
    }

    #[test]
    fn complete_dirs_takes_a_count_or_off_and_only_where_metadata_is_cached() {
        assert_eq!(
            parse("cache=loose").unwrap().complete_dirs,
            Some(DEFAULT_COMPLETE_DIRS)
        );
        assert_eq!(
            parse("cache=loose,complete_dirs=0").unwrap().complete_dirs,
            Some(0)
        );
        assert_eq!(
            parse("cache=0x3,complete_dirs=7").unwrap().complete_dirs,
            Some(7)
        );
        assert_eq!(
            parse("cache=loose,complete_dirs=off")
                .unwrap()
                .complete_dirs,
            None
        );
        assert!(parse("cache=loose,complete_dirs=many").is_err());
        assert!(parse("cache=loose,complete_dirs=1001").is_err());
        // Given where it would change nothing: refused, not ignored.
        assert!(parse("cache=mmap,complete_dirs=2").is_err());
        assert!(parse("cache=none,complete_dirs=off").is_ok());
    }

    #[test]
    fn pipeline_is_on_unless_turned_off() {
        assert!(parse("cache=loose").unwrap().pipeline);
        assert!(parse("cache=loose,pipeline=on").unwrap().pipeline);
        assert!(!parse("cache=loose,pipeline=off").unwrap().pipeline);
        assert!(!parse("cache=loose,pipeline=0").unwrap().pipeline);
        assert!(parse("cache=loose,pipeline=maybe").is_err());
        assert!(parse("cache=loose,pipeline").is_err());
    }

    #[test]
    fn modes_by_name_and_by_linux_bitmask() {
        for (text, mode) in [
            ("none", 0),
            ("readahead", 1),
            ("mmap", 5),
            ("loose", 0xf),
            ("0", 0),
            ("15", 0xf),
            ("0x5", 5),
            ("3", 3),
        ] {
            assert_eq!(text.parse::<CacheMode>(), Ok(CacheMode(mode)), "{text}");
        }
        assert_eq!(CacheMode(0xf).to_string(), "loose");
        assert_eq!(CacheMode(3).to_string(), "0x3");
        assert!("0x100".parse::<CacheMode>().is_err());
        assert!(matches!(
            "strict".parse::<CacheMode>(),
            Err(OptionError::BadCache(_))
        ));
    }

    #[test]
    fn negtimeout_defaults_from_the_mode_and_can_be_overridden() {
        assert_eq!(parse("").unwrap().negtimeout, NegTimeout::Off);
        assert_eq!(parse("cache=mmap").unwrap().negtimeout, NegTimeout::Off);
        assert_eq!(
            parse("cache=loose").unwrap().negtimeout,
            NegTimeout::For(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse("negtimeout=250,cache=loose").unwrap().negtimeout,
            NegTimeout::For(Duration::from_millis(250))
        );
        assert_eq!(
            parse("cache=loose,negtimeout=-1").unwrap().negtimeout,
            NegTimeout::UntilEvicted
        );
        assert_eq!(
            parse("cache=loose,negtimeout=0").unwrap().negtimeout,
            NegTimeout::Off
        );
        assert!(parse("negtimeout=-5").is_err());
    }

    #[test]
    fn trust_follows_the_mode_unless_revalidate_is_given() {
        let trust = |spec: &str| parse(spec).unwrap().trust();
        assert_eq!(trust("cache=loose"), Trust::Forever);
        assert_eq!(trust("cache=none,negtimeout=500"), Trust::Forever);
        assert_eq!(trust("cache=0x3"), Trust::For(Duration::ZERO));
        assert_eq!(trust("cache=0x2"), Trust::For(Duration::ZERO));
        assert_eq!(
            trust("cache=loose,revalidate=1000"),
            Trust::For(Duration::from_secs(1))
        );
        assert_eq!(
            trust("cache=0x3,revalidate=250"),
            Trust::For(Duration::from_millis(250))
        );
        assert_eq!(
            trust("cache=loose,revalidate=0"),
            Trust::For(Duration::ZERO)
        );
        assert!(parse("cache=loose,revalidate=1000,nocto").unwrap().nocto);
        assert!(!parse("cache=loose,revalidate=1000").unwrap().nocto);
        for pointless in [
            "cache=loose,nocto",
            "cache=0x3,nocto",
            "cache=loose,revalidate=0,nocto",
            "cache=readahead,revalidate=1000,nocto",
        ] {
            assert!(
                matches!(
                    parse(pointless),
                    Err(OptionError::BadValue { key: "nocto", .. })
                ),
                "{pointless}: nocto would change nothing"
            );
        }
        for bad in ["revalidate=-1", "revalidate=1s", "revalidate"] {
            assert!(
                matches!(
                    parse(bad),
                    Err(OptionError::BadValue {
                        key: "revalidate",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_key_in_the_table_parses_and_no_other() {
        for row in OPTION_KEYS {
            let value = (!row.form.is_empty()).then_some(row.example);
            let pairs = [("cache", Some("fscache")), (row.key, value)];
            // nocto needs a window to mean something.
            let window = [("revalidate", Some("100"))];
            let pairs = pairs.iter().chain(&window).copied();
            let parsed = NinepOptions::parse(pairs);
            assert!(parsed.is_ok(), "{}: {parsed:?}", row.key);
            assert!(OptionKey::is_option(row.key, value), "{}", row.key);
        }
        assert!(!OptionKey::is_option("colour", Some("blue")));
        assert!(!OptionKey::is_option("nocto", Some("1")));
        assert!(OptionKey::is_option("cache", None));
        let list = OptionKey::list();
        assert!(list.starts_with("cache=MODE, negtimeout=MS, "), "{list}");
        assert!(list.ends_with("fscache_size=BYTES, ro"), "{list}");
        let unknown = parse("colour=blue").unwrap_err().to_string();
        assert!(unknown.contains(&list), "{unknown}");
        let msize = parse("msize=100").unwrap_err().to_string();
        assert_eq!(msize, r#"bad msize="100": expected bytes, 4096..=1048576"#);
    }

    #[test]
    fn other_options_and_errors() {
        let o = parse("cache=loose,msize=65536,cache_size=1048576,ro").unwrap();
        assert_eq!((o.msize, o.cache_size, o.read_only), (65536, 1 << 20, true));
        assert!(o.symlink_cache);
        assert!(
            !parse("cache=loose,symlink_cache=off")
                .unwrap()
                .symlink_cache
        );
        assert!(parse("symlink_cache=on").unwrap().symlink_cache);
        assert!(!parse("").unwrap().reconnect);
        assert!(parse("reconnect=on").unwrap().reconnect);
        assert!(matches!(
            parse("reconnect=always"),
            Err(OptionError::BadValue {
                key: "reconnect",
                ..
            })
        ));
        assert!(matches!(
            parse("symlink_cache=maybe"),
            Err(OptionError::BadValue {
                key: "symlink_cache",
                ..
            })
        ));
        assert!(matches!(
            parse("msize=100"),
            Err(OptionError::BadValue { key: "msize", .. })
        ));
        for (text, bytes) in [
            ("65536", 65536),
            ("64K", 64 << 10),
            ("16M", 16 << 20),
            ("2g", 2 << 30),
        ] {
            assert_eq!(
                parse(&format!("cache_size={text}")).unwrap().cache_size,
                bytes
            );
        }
        for bad in ["10", "1T", "M", "-1M", "99999999999G"] {
            assert!(parse(&format!("cache_size={bad}")).is_err(), "{bad}");
        }
        assert!(matches!(
            parse("cache_size=10"),
            Err(OptionError::BadValue {
                key: "cache_size",
                ..
            })
        ));
        assert!(matches!(parse("color=blue"), Err(OptionError::Unknown(_))));
        assert!(matches!(parse("msize"), Err(OptionError::BadValue { .. })));
    }

    #[test]
    fn fscache_names_its_store_and_its_options_need_it() {
        let o =
            parse("cache=fscache,cachetag=sysroot,fscache_dir=/var/c,fscache_size=64M").unwrap();
        assert_eq!(o.cache, CacheMode::FSCACHE_MODE);
        assert_eq!(
            o.fscache,
            Some(FscacheOptions {
                tag: Some("sysroot".into()),
                dir: "/var/c".into(),
                size: 64 << 20,
            })
        );
        // It is loose, kept on disk too: trusted like loose, negative dentries as long.
        assert_eq!(o.trust(), Trust::Forever);
        assert_eq!(o.negtimeout, parse("cache=loose").unwrap().negtimeout);
        let o = parse("cache=fscache,fscache_dir=/c").unwrap();
        let store = o.fscache.unwrap();
        assert_eq!((store.tag, store.size), (None, DEFAULT_FSCACHE_SIZE));
        for refused in [
            "cache=loose,cachetag=x",
            "cache=loose,fscache_dir=/c",
            "cache=none,fscache_size=1G",
            "cache=fscache,fscache_dir=/c,fscache_size=10",
            "cache=fscache,fscache_dir=/c,cachetag=",
            "cache=0x80,fscache_dir=/c",
        ] {
            assert!(parse(refused).is_err(), "{refused}");
        }
        assert!(parse("cache=0x83,fscache_dir=/c")
            .unwrap()
            .fscache
            .is_some());
    }
}
