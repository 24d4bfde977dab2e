//! Functions next to the data (docs/architecture.md, "Functions next to the data"): Wasm
//! modules kept as keys (`_firn/fn/<name>`), run in a [`sandbox`] on a blocking thread, their
//! reads at one cut ([`host`]) and their writes committed as one transaction ([`commit`]);
//! called directly ([`call`]), by triggers on each committed change of a prefix
//! ([`trigger`]), or by timers ([`timer`]). This module owns the registry of modules and the
//! node's compiled ones.

mod abi;
pub mod call;
pub mod commit;
pub mod host;
pub mod sandbox;
pub mod timer;
pub mod trigger;
mod wasi;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use firn_model::limits::FUNCTION_MODULE_BYTES_MAX;
use firn_model::{
    Answer, CallContext, FirnError, FunctionInfo, FunctionRequest, Key, KvRead, KvRequest, KvWrite,
    PutRequest, ReadAt, ReadConsistency, Request, Response, Version, VersionInfo,
    function::check_name,
};

use crate::blob::Blobs;
use crate::exec::Kernel;
use crate::pubsub::Publisher;
use sandbox::{Compiled, Sandbox};

/// Whose rights a run has (`--users`): the caller's for `FCALL`, the creator's for a trigger
/// or a timer; everything when users are not checked.
#[derive(Clone, Default)]
pub struct Rights(Option<Arc<crate::auth::User>>);

impl Rights {
    /// The rights of the user named (none: everything).
    pub fn of(kernel: &Kernel, user: Option<&str>) -> Result<Rights, FirnError> {
        let Some(name) = user else {
            return Ok(Rights(None));
        };
        match kernel.users().and_then(|users| users.user(name)) {
            Some(user) => Ok(Rights(Some(user))),
            // A user taken out of the users file since: no rights at all.
            None => Err(FirnError::NoPerm {
                user: name.to_owned(),
                permission: "any".into(),
                scope: "the user is no longer in the users file".into(),
            }),
        }
    }

    pub fn check(&self, needs: &[firn_model::Access]) -> Result<(), FirnError> {
        match &self.0 {
            Some(user) => user.authorize(needs),
            None => Ok(()),
        }
    }
}

/// Compiled modules a node keeps (by name and version); past it, the cache starts over.
const COMPILED_KEPT_MAX: usize = 64;

/// The key a function's module is kept under.
pub fn function_key(name: &str) -> Key {
    Key::new(format!("_firn/fn/{name}").into_bytes()).expect("a checked name makes a valid key")
}

const FUNCTION_PREFIX: &str = "_firn/fn/";

/// Functions: the registry, the sandbox and the runs.
pub struct Functions {
    kernel: Arc<Kernel>,
    blobs: Arc<Blobs>,
    publisher: Publisher,
    sandbox: Arc<Sandbox>,
    compiled: Mutex<HashMap<(String, Version), Compiled>>,
    pub(crate) triggers: trigger::Triggers,
}

/// A function's module at one version, compiled.
#[derive(Clone)]
pub struct Loaded {
    pub name: String,
    pub version: Version,
    pub compiled: Compiled,
}

/// Whether a run's error is the function's own (it trapped, failed, went past a limit or
/// its rights), which running it again will not change — not the store's (a read that could
/// not reach a shard's leader), after which the run is made again.
pub(crate) fn functions_own(e: &FirnError) -> bool {
    matches!(
        e,
        FirnError::FunctionFailed(_)
            | FirnError::NoPerm { .. }
            | FirnError::WrongType
            | FirnError::KeyTooLarge { .. }
            | FirnError::ValueTooLarge { .. }
            | FirnError::BadArgument(_)
            | FirnError::Refused(_)
    )
}

impl Functions {
    pub fn new(
        kernel: Arc<Kernel>,
        blobs: Arc<Blobs>,
        publisher: Publisher,
    ) -> Result<Arc<Self>, FirnError> {
        Ok(Arc::new(Functions {
            kernel,
            blobs,
            publisher,
            sandbox: Arc::new(Sandbox::new()?),
            compiled: Mutex::default(),
            triggers: trigger::Triggers::default(),
        }))
    }

    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    pub async fn run(
        self: &Arc<Self>,
        ctx: &CallContext,
        request: FunctionRequest,
    ) -> Result<Answer, FirnError> {
        let (user, request) = match request {
            FunctionRequest::As { user, request } => (Some(user), *request),
            request => (None, request),
        };
        let response = match request {
            FunctionRequest::Load { name, module } => self.load(ctx, &name, module).await?,
            FunctionRequest::List => Response::Functions(self.list(ctx).await?),
            FunctionRequest::Info { name } => {
                let info = self.info(ctx, &name, None).await?;
                Response::Functions(vec![info.0])
            }
            FunctionRequest::Delete { name } => {
                check_name("function", &name)?;
                self.info(ctx, &name, None).await?;
                self.write(
                    ctx,
                    KvWrite::Delete {
                        keys: vec![function_key(&name)],
                    },
                )
                .await?;
                Response::Done
            }
            FunctionRequest::Call { name, keys, args } => {
                let rights = Rights::of(&self.kernel, user.as_deref())?;
                Response::Called(call::call(self, ctx, &name, keys, args, rights).await?)
            }
            FunctionRequest::Trigger(t) => trigger::run(self, ctx, t, user).await?,
            FunctionRequest::Timer(t) => timer::run(self, ctx, t, user).await?,
            FunctionRequest::As { .. } => {
                return Err(FirnError::BadArgument(
                    "a request made as a user twice".into(),
                ));
            }
        };
        Ok(Answer::new(response))
    }

    /// Checks and compiles `module`, then keeps it as the function's next version.
    async fn load(
        &self,
        ctx: &CallContext,
        name: &str,
        module: Bytes,
    ) -> Result<Response, FirnError> {
        check_name("function", name)?;
        if module.len() > FUNCTION_MODULE_BYTES_MAX {
            return Err(FirnError::ValueTooLarge {
                len: module.len(),
                max: FUNCTION_MODULE_BYTES_MAX,
            });
        }
        let sandbox = self.sandbox.clone();
        let checked = module.clone();
        let compiled = tokio::task::spawn_blocking(move || sandbox.compile(&checked))
            .await
            .map_err(|e| FirnError::Internal(format!("compiling a module: {e}")))??;
        let written = self
            .write(
                ctx,
                KvWrite::Put(PutRequest::new(function_key(name), module)),
            )
            .await?;
        let (mut info, _) = self.info(ctx, name, None).await?;
        // The version this load wrote (another load may have come after it).
        if let Response::Written(w) = written.response
            && let Some(w) = w.first()
        {
            info.version = w.version;
            info.loaded_us = w.commit_ts.wall_us;
        }
        self.keep(name, info.version, compiled);
        Ok(Response::Functions(vec![info]))
    }

    pub(crate) async fn write(
        &self,
        ctx: &CallContext,
        write: KvWrite,
    ) -> Result<Answer, FirnError> {
        self.kernel
            .execute(ctx, Request::Kv(KvRequest::Write(write)))
            .await
    }

    pub(crate) async fn read(
        &self,
        ctx: &CallContext,
        read: KvRead,
    ) -> Result<Response, FirnError> {
        Ok(self
            .kernel
            .execute(ctx, Request::Kv(KvRequest::Read(read)))
            .await?
            .response)
    }

    /// The function's module at `version` (none: the newest), as stored.
    async fn info(
        &self,
        ctx: &CallContext,
        name: &str,
        version: Option<Version>,
    ) -> Result<(FunctionInfo, VersionInfo), FirnError> {
        check_name("function", name)?;
        let missing = || FirnError::NotFound {
            kind: "function".into(),
            name: name.into(),
        };
        let read = KvRead::Get {
            key: function_key(name),
            at: version.map_or(ReadAt::Latest, ReadAt::Version),
            consistency: ReadConsistency::Linearizable,
        };
        let stored = match self.read(ctx, read).await {
            Ok(Response::Value(Some(v))) if !v.deleted => v,
            Ok(_) | Err(FirnError::Compacted { .. }) => return Err(missing()),
            Err(e) => return Err(e),
        };
        let info = FunctionInfo {
            name: name.into(),
            version: stored.version,
            module_bytes: stored
                .blob
                .as_ref()
                .map_or(stored.value.as_ref().map_or(0, |v| v.len() as u64), |b| {
                    b.size
                }),
            loaded_us: stored.commit_ts.wall_us,
        };
        Ok((info, stored))
    }

    async fn list(&self, ctx: &CallContext) -> Result<Vec<FunctionInfo>, FirnError> {
        let found = self
            .scan(
                ctx,
                FUNCTION_PREFIX.as_bytes(),
                ReadConsistency::Linearizable,
            )
            .await?;
        Ok(found
            .into_iter()
            .map(|(key, v)| FunctionInfo {
                name: String::from_utf8_lossy(&key.bytes()[FUNCTION_PREFIX.len()..]).into(),
                version: v.version,
                module_bytes: v
                    .blob
                    .as_ref()
                    .map_or(v.value.as_ref().map_or(0, |b| b.len() as u64), |b| b.size),
                loaded_us: v.commit_ts.wall_us,
            })
            .collect())
    }

    /// Every live key under `prefix` with its newest version, page by page.
    pub(crate) async fn scan(
        &self,
        ctx: &CallContext,
        prefix: &[u8],
        consistency: ReadConsistency,
    ) -> Result<Vec<(Key, VersionInfo)>, FirnError> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let read = KvRead::Scan {
                prefix: Bytes::copy_from_slice(prefix),
                cursor: cursor.take(),
                limit: 1_000,
                pattern: None,
                at: ReadAt::Latest,
                consistency,
            };
            let Response::Scan { keys, next_cursor } = self.read(ctx, read).await? else {
                return Err(FirnError::Internal("a scan answered no keys".into()));
            };
            out.extend(keys);
            match next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    pub(crate) async fn scan_keys(
        &self,
        ctx: &CallContext,
        prefix: &[u8],
        consistency: ReadConsistency,
    ) -> Result<Vec<Key>, FirnError> {
        Ok(self
            .scan(ctx, prefix, consistency)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// The string values under `prefix` (small ones: definitions, not modules).
    pub(crate) async fn scan_values(
        &self,
        ctx: &CallContext,
        prefix: &[u8],
        consistency: ReadConsistency,
    ) -> Result<Vec<(Key, Bytes)>, FirnError> {
        Ok(self
            .scan(ctx, prefix, consistency)
            .await?
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.value?)))
            .collect())
    }

    /// The function `name` at `version` (none: the newest), compiled (once a node).
    pub async fn loaded(
        &self,
        ctx: &CallContext,
        name: &str,
        version: Option<Version>,
    ) -> Result<Loaded, FirnError> {
        if let Some(v) = version
            && let Some(compiled) = self.kept(name, v)
        {
            return Ok(Loaded {
                name: name.into(),
                version: v,
                compiled,
            });
        }
        let (info, stored) = self.info(ctx, name, version).await?;
        if let Some(compiled) = self.kept(name, info.version) {
            return Ok(Loaded {
                name: name.into(),
                version: info.version,
                compiled,
            });
        }
        let module = match (stored.value, stored.blob) {
            (Some(v), _) => v,
            (None, Some(blob)) => self.blobs.load(blob).await?,
            (None, None) => {
                return Err(FirnError::Internal(
                    "a function's module has no value".into(),
                ));
            }
        };
        let sandbox = self.sandbox.clone();
        let compiled = tokio::task::spawn_blocking(move || sandbox.compile(&module))
            .await
            .map_err(|e| FirnError::Internal(format!("compiling a module: {e}")))??;
        self.keep(name, info.version, compiled.clone());
        Ok(Loaded {
            name: name.into(),
            version: info.version,
            compiled,
        })
    }

    fn kept(&self, name: &str, version: Version) -> Option<Compiled> {
        let compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        compiled.get(&(name.to_owned(), version)).cloned()
    }

    fn keep(&self, name: &str, version: Version, compiled: Compiled) {
        let mut kept = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= COMPILED_KEPT_MAX {
            kept.clear();
        }
        kept.insert((name.to_owned(), version), compiled);
    }

    /// Runs `loaded` once on a blocking thread, reading through `reads`.
    pub async fn run_once(
        &self,
        loaded: &Loaded,
        input: sandbox::Invocation,
        reads: host::StoreReads,
    ) -> Result<sandbox::Outcome, FirnError> {
        let sandbox = self.sandbox.clone();
        let compiled = loaded.compiled.clone();
        let turn = compiled.turn().await;
        let outcome = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            sandbox.run(&compiled, input, Box::new(reads))
        })
        .await
        .map_err(|e| FirnError::Internal(format!("a function's run: {e}")))?;
        if let Ok(o) = &outcome {
            for line in &o.log {
                tracing::info!(function = %loaded.name, version = loaded.version, "{line}");
            }
        }
        outcome
    }

    /// Publishes what a committed run published (best effort, as `PUBLISH` is).
    pub async fn publish(&self, publishes: Vec<(Bytes, Bytes)>) {
        for (channel, message) in publishes {
            if let Err(e) = self.publisher.publish(channel, message).await {
                tracing::warn!("a function's publish failed: {e}");
            }
        }
    }
}
