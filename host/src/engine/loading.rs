//! How a program is loaded: the one path the guest engine's builder
//! ([`super::EngineBuilder`]) and the HTTP handler's ([`crate::http::HttpBuilder`])
//! share. Each builder holds a [`Loading`] (where the code comes from, the module
//! cache, the tier, who finishes an unfinished compile, where notes and a first
//! compile's progress go), gets the same builder methods for it from
//! `loading_setters!`, and loads with [`Loading::load`] on engines of its own (the
//! guest engines, or the HTTP pool's) linked its own way.

use std::path::PathBuf;
use std::sync::Arc;

use super::tiered::{Link, TieredProgram};
use super::{Notes, SetupError};
use crate::module_cache::{Digest, Engines, HandOff, ModuleCache, Progress, TierChoice};

/// Where a guest program's code comes from: one value, loaded the same way by the
/// guest engine's builder and the HTTP handler's ([`crate::http::HttpBuilder`]),
/// through `Loading`.
#[derive(Clone, Debug)]
pub enum ProgramSource {
    /// A wasm file (a core module or a component), compiled through the module cache
    /// on its tiers.
    File {
        /// The file.
        path: PathBuf,
        /// The SHA-256 of its bytes, when the caller knows it (a content-addressed
        /// store names its files so): compiled code cached for it is mapped without the
        /// file being read, or even present. The caller vouches for it (see
        /// [`ModuleCache::load_tiered_by_digest`]).
        digest: Option<Digest>,
    },
    /// Code compiled ahead of time for the optimized tier of the engines it runs on
    /// ([`crate::module_cache::compile_ahead`]), from a store the caller trusts (see
    /// [`crate::module_cache::load_compiled_ahead`]): no compile, no upgrade.
    CompiledAhead {
        /// What it is, for errors and notes.
        name: PathBuf,
        /// The code.
        code: Arc<[u8]>,
    },
}

impl ProgramSource {
    /// A wasm file.
    pub fn file(path: impl Into<PathBuf>) -> ProgramSource {
        ProgramSource::File {
            path: path.into(),
            digest: None,
        }
    }

    /// The file, or the name of code compiled ahead.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ProgramSource::File { path, .. } => path,
            ProgramSource::CompiledAhead { name, .. } => name,
        }
    }
}

/// How a program is loaded (see the module docs).
pub(crate) struct Loading {
    /// Where its code comes from.
    pub(crate) program: ProgramSource,
    /// Where compiled code is kept.
    pub(crate) cache: ModuleCache,
    /// The compiler tier.
    pub(crate) tier: TierChoice,
    /// Who finishes an unfinished optimized compile at the end.
    pub(crate) hand_off_to: Option<HandOff>,
    /// Where notes go.
    pub(crate) notes: Notes,
    /// Who hears how a first compile goes.
    pub(crate) progress: Arc<dyn Fn(Progress) + Send + Sync>,
}

impl Loading {
    /// The defaults for `program`: the user's module cache, the automatic tier, no
    /// hand-off, notes to `tracing` at info, progress to nobody.
    pub(crate) fn of(program: ProgramSource) -> Loading {
        Loading {
            program,
            cache: ModuleCache::user_default(),
            tier: TierChoice::Auto,
            hand_off_to: None,
            notes: Arc::new(|line| tracing::info!("{line}")),
            progress: Arc::new(|_| {}),
        }
    }

    /// Loads the program on `engines` (interruptible: see [`TieredProgram::load`]),
    /// linked by `link`, through the module cache on its tiers.
    pub(crate) fn load<R>(
        &self,
        engines: (Engines, bool),
        link: Link<R>,
    ) -> Result<TieredProgram<R>, SetupError> {
        TieredProgram::load(
            &self.cache,
            &self.program,
            self.tier,
            engines,
            link,
            &*self.progress,
        )
    }
}

/// The builder methods of a builder's [`Loading`] (its field `loading`); `$finish`
/// names the method at which an unfinished compile is handed off, and `$more` says
/// what else a hand-off covers on that builder ("" for nothing).
macro_rules! loading_setters {
    ($finish:literal, $more:literal) => {
        /// Where compiled code is kept (default:
        /// [`crate::module_cache::ModuleCache::user_default`]).
        pub fn module_cache(mut self, cache: crate::module_cache::ModuleCache) -> Self {
            self.loading.cache = cache;
            self
        }

        /// The compiler tier (default: auto: baseline code first for a big program,
        /// moving to the optimized code once it is compiled).
        pub fn tier(mut self, tier: crate::module_cache::TierChoice) -> Self {
            self.loading.tier = tier;
            self
        }

        #[doc = concat!(
                    "A `wasm9p` executable that finishes an unfinished optimized compile in the ",
                    "background (`wasm9p compile --background`) at [`", $finish, "`] ",
                    "(default: none).", $more
                )]
        pub fn hand_off_compiles_to(mut self, exe: std::path::PathBuf) -> Self {
            self.loading.hand_off_to = Some(crate::module_cache::HandOff::Process(exe));
            self
        }

        #[doc = concat!(
                    "Who finishes an unfinished optimized compile at [`", $finish, "`], where no ",
                    "`wasm9p` executable can (default: none).", $more
                )]
        pub fn hand_off_compiles_with(mut self, hand_off: crate::module_cache::HandOff) -> Self {
            self.loading.hand_off_to = Some(hand_off);
            self
        }

        /// Where notes go: one line each (default: `tracing` at info).
        pub fn notes(mut self, notes: crate::engine::Notes) -> Self {
            self.loading.notes = notes;
            self
        }

        /// Who hears how a first compile goes (default: nobody).
        pub fn progress(
            mut self,
            progress: std::sync::Arc<dyn Fn(crate::module_cache::Progress) + Send + Sync>,
        ) -> Self {
            self.loading.progress = progress;
            self
        }
    };
}
pub(crate) use loading_setters;
