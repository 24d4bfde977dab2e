//! The sandbox a function runs in: a wasmi engine, the module `firn`'s host calls (the ABI of
//! docs/functions.md) and Firn's own deterministic WASI imports ([`super::wasi`]), with a
//! budget of fuel, memory, host calls and writes per run. A run is synchronous and CPU-bound:
//! callers run it off the async workers. It reads through a [`Host`] and never writes: what
//! the run wrote comes back as [`Effect`]s for the caller to commit.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use firn_model::limits::{
    FUNCTION_FUEL_MAX, FUNCTION_HOST_CALLS_MAX, FUNCTION_LOG_BYTES_MAX, FUNCTION_MEMORY_BYTES_MAX,
    FUNCTION_WRITE_BYTES_MAX, FUNCTION_WRITES_MAX,
};
use firn_model::{FirnError, LogSeq, Version};
use wasmi::{
    Caller, Config, Engine, Error as WasmError, Extern, Linker, Module, Store, StoreLimits,
    StoreLimitsBuilder, TrapCode,
};

/// What started a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// `FCALL`, `POST /v1/functions/{name}/call`.
    Call = 0,
    /// A trigger's input: a key was written.
    Put = 1,
    /// A trigger's input: a key was deleted.
    Delete = 2,
    /// A timer fired.
    Timer = 3,
    /// A trigger's input: a record of a log tag, or a stream's entry.
    Entry = 4,
}

/// A run's input: what the ABI's `kind`, `key`, `arg`, `stamp_us` and `input_version` answer.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub kind: InputKind,
    pub keys: Vec<Bytes>,
    pub args: Vec<Bytes>,
    /// The run's time (a trigger: its input's commit time), µs since the epoch: the clock
    /// the function reads.
    pub stamp_us: u64,
    /// A trigger input key's version (else 0).
    pub input_version: Version,
}

/// Which value of a key a read asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPoint {
    /// The value at the run's stamp.
    Now,
    /// That version.
    Version(Version),
    /// The value as of that time (µs since the epoch), no later than the run's stamp.
    AtUs(u64),
}

/// Where a run's reads go: the store, at the run's stamp. Errors are the read's own (a
/// shard unreachable); the run then fails.
pub trait Host: Send {
    fn get(&mut self, key: &[u8], at: ReadPoint) -> Result<Option<Bytes>, FirnError>;
    /// Keys under `prefix` after `after`, in key order, at most `limit`.
    fn scan(&mut self, prefix: &[u8], after: &[u8], limit: usize) -> Result<Vec<Bytes>, FirnError>;
    /// The records of `tag` of log `log` after `after` (none: from the first), oldest first,
    /// at most `limit`: each one's id and payload (a stream's entry: its fields and values,
    /// as `xadd` takes them).
    fn log_read(
        &mut self,
        log: &[u8],
        tag: &[u8],
        after: Option<LogSeq>,
        limit: usize,
    ) -> Result<Vec<(LogSeq, Bytes)>, FirnError>;
}

/// One write a run made, in the order it made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Put(Bytes, Bytes),
    Del(Bytes),
    Incr(Bytes, i64),
    /// An entry added to a stream, its fields and values.
    XAdd(Bytes, Vec<(Bytes, Bytes)>),
    /// A record appended to a log: the log, the record's tags, its payload.
    Append(Bytes, Vec<Bytes>, Bytes),
    /// Published after the commit (publish/subscribe keeps no history).
    Publish(Bytes, Bytes),
}

impl Effect {
    /// The key the write changes (a stream's for `XAdd`, the log's name for `Append`, as a
    /// log's writes are allowed); none for a publish.
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Effect::Put(k, _)
            | Effect::Del(k)
            | Effect::Incr(k, _)
            | Effect::XAdd(k, _)
            | Effect::Append(k, ..) => Some(k),
            Effect::Publish(..) => None,
        }
    }

    /// The same write to the key under `prefix` (a replay's); a publish is not replayed.
    pub fn under(self, prefix: &[u8]) -> Option<Effect> {
        let moved = |k: Bytes| Bytes::from([prefix, &k[..]].concat());
        Some(match self {
            Effect::Put(k, v) => Effect::Put(moved(k), v),
            Effect::Del(k) => Effect::Del(moved(k)),
            Effect::Incr(k, by) => Effect::Incr(moved(k), by),
            Effect::XAdd(k, fields) => Effect::XAdd(moved(k), fields),
            // A log is moved by its name; its tags stay.
            Effect::Append(log, tags, payload) => Effect::Append(moved(log), tags, payload),
            Effect::Publish(..) => return None,
        })
    }

    pub fn bytes(&self) -> usize {
        match self {
            Effect::Put(k, v) | Effect::Publish(k, v) => k.len() + v.len(),
            Effect::Del(k) | Effect::Incr(k, _) => k.len() + 8,
            Effect::XAdd(k, fields) => {
                k.len() + fields.iter().map(|(f, v)| f.len() + v.len()).sum::<usize>()
            }
            Effect::Append(log, tags, payload) => {
                log.len() + tags.iter().map(Bytes::len).sum::<usize>() + payload.len()
            }
        }
    }
}

/// What a run that returned 0 leaves: its writes, its reply and its log lines.
#[derive(Debug, Default)]
pub struct Outcome {
    pub effects: Vec<Effect>,
    pub reply: Option<Bytes>,
    pub log: Vec<String>,
    /// The fuel the run burnt.
    pub fuel: u64,
}

/// The ABI's error codes (docs/functions.md).
pub(super) const ABSENT: i64 = -1;
pub(super) const TOO_SMALL: i64 = -2;
pub(super) const LIMIT: i32 = -3;
pub(super) const NOT_ALLOWED: i32 = -4;

/// Keys under this prefix are Firn's own (functions, triggers, timers): no run writes one.
pub use firn_model::function::RESERVED_PREFIX;

/// Instances of a module kept warm, each already past its `_initialize`, for the next runs.
const WARM_INSTANCES_MAX: usize = 16;

/// A compiled module, ready to run many times, and its warm instances.
///
/// Each module has an engine of its own: a wasmi engine keeps every function it has compiled
/// until the engine itself is dropped, so one engine for all the node's modules would grow
/// with every module ever loaded or refused. With its own, a module's code goes when the
/// last of its handles and instances does.
#[derive(Clone)]
pub struct Compiled {
    linker: Arc<Linker<RunState>>,
    module: Module,
    warm: Arc<std::sync::Mutex<Vec<Warm>>>,
    /// Runs at once, one an instance: more wait for a free one rather than start another
    /// (a Go module's start costs fifty of its runs).
    running: Arc<tokio::sync::Semaphore>,
}

/// An instance past its `_initialize`, in its own store.
struct Warm {
    store: Store<RunState>,
    run: wasmi::TypedFunc<(), i32>,
}

impl Compiled {
    /// A turn to run this module; the run holds it until it ends.
    pub async fn turn(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.running
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    fn take(&self) -> Option<Warm> {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn give_back(&self, warm: Warm) {
        let mut kept = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < WARM_INSTANCES_MAX {
            kept.push(warm);
        }
    }
}

/// The engine settings and the host calls; each module compiles in an engine of its own
/// ([`Compiled`]), each run gets its own store and instance.
pub struct Sandbox {
    config: Config,
}

/// The store's data during one run.
pub(super) struct RunState {
    pub(super) input: Invocation,
    pub(super) host: Box<dyn Host>,
    /// What the run wrote, in order, and each key's value as its own later reads see it
    /// (`None`: deleted).
    effects: Vec<Effect>,
    written: HashMap<Bytes, Option<Bytes>>,
    write_bytes: usize,
    pub(super) reply: Option<Bytes>,
    pub(super) log: Vec<String>,
    pub(super) log_bytes: usize,
    host_calls: usize,
    /// The first host error (a read that failed): the run fails with it.
    failed: Option<FirnError>,
    pub(super) random: u64,
    /// The monotonic clock the instance has read (ns): it only goes forward, also when a
    /// warm instance's next run is stamped earlier (a replay), as runtimes (Go's) expect.
    pub(super) monotonic_ns: u64,
    limits: StoreLimits,
}

impl RunState {
    pub(super) fn stamp_us(&self) -> u64 {
        self.input.stamp_us
    }

    /// Counts a host call; past the budget the run ends.
    pub(super) fn call(&mut self) -> Result<(), WasmError> {
        self.host_calls += 1;
        if self.host_calls > FUNCTION_HOST_CALLS_MAX {
            return Err(WasmError::new(format!(
                "more than {FUNCTION_HOST_CALLS_MAX} host calls in one run"
            )));
        }
        Ok(())
    }

    /// Appends to the operator's log, bounded.
    pub(super) fn log_line(&mut self, line: String) {
        if self.log_bytes + line.len() <= FUNCTION_LOG_BYTES_MAX {
            self.log_bytes += line.len();
            self.log.push(line);
        }
    }

    pub(super) fn write(&mut self, effect: Effect) -> i32 {
        if let Some(k) = effect.key()
            && k.starts_with(RESERVED_PREFIX)
        {
            return NOT_ALLOWED;
        }
        let bytes = effect.bytes();
        if self.effects.len() >= FUNCTION_WRITES_MAX
            || self.write_bytes + bytes > FUNCTION_WRITE_BYTES_MAX
        {
            return LIMIT;
        }
        if let Err(e) = self.see_own_write(&effect) {
            self.failed.get_or_insert(e);
            return LIMIT;
        }
        self.write_bytes += bytes;
        self.effects.push(effect);
        0
    }

    /// Keeps what the run's later reads of the key see.
    fn see_own_write(&mut self, effect: &Effect) -> Result<(), FirnError> {
        match effect {
            Effect::Put(k, v) => {
                self.written.insert(k.clone(), Some(v.clone()));
            }
            Effect::Del(k) => {
                self.written.insert(k.clone(), None);
            }
            Effect::Incr(k, delta) => {
                let base = self.read(k, ReadPoint::Now)?;
                let n: i64 = match &base {
                    None => 0,
                    Some(v) => std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| {
                            FirnError::FunctionFailed(
                                "incr of a value that is not an integer".into(),
                            )
                        })?,
                };
                let sum = n.checked_add(*delta).ok_or_else(|| {
                    FirnError::FunctionFailed("incr overflows a 64-bit integer".into())
                })?;
                self.written
                    .insert(k.clone(), Some(Bytes::from(sum.to_string())));
            }
            Effect::XAdd(..) | Effect::Append(..) | Effect::Publish(..) => {}
        }
        Ok(())
    }

    /// A read through the run's own writes.
    pub(super) fn read(&mut self, key: &[u8], at: ReadPoint) -> Result<Option<Bytes>, FirnError> {
        if at == ReadPoint::Now
            && let Some(v) = self.written.get(key)
        {
            return Ok(v.clone());
        }
        self.host.get(key, at)
    }
}

impl Sandbox {
    pub fn new() -> Result<Sandbox, FirnError> {
        let mut config = Config::default();
        config.consume_fuel(true);
        let sandbox = Sandbox { config };
        // The host calls are defined once here, so that a mistake in them shows at start.
        sandbox.engine_and_linker()?;
        Ok(sandbox)
    }

    /// A new engine, and the host calls in it.
    fn engine_and_linker(&self) -> Result<(Engine, Linker<RunState>), FirnError> {
        let engine = Engine::new(&self.config);
        let mut linker = Linker::new(&engine);
        super::abi::define(&mut linker).map_err(internal)?;
        super::wasi::define(&mut linker).map_err(internal)?;
        Ok((engine, linker))
    }

    /// Compiles and checks a module: it is Wasm, exports `run` of type `() -> i32`, and
    /// imports only what the sandbox provides, of the right types (an instance is made once;
    /// its start function, if it has one, runs within one run's fuel, so a start that never
    /// ends costs what an endless run costs and the module is refused).
    pub fn compile(&self, wasm: &[u8]) -> Result<Compiled, FirnError> {
        let bad = |why: String| FirnError::BadArgument(format!("not a function module: {why}"));
        let (engine, linker) = self.engine_and_linker()?;
        // wasmi answers malformed input with errors; a panic on some input it does not
        // expect must still not take the node down.
        let module =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Module::new(&engine, wasm)))
                .map_err(|_| bad("the module could not be parsed".into()))?
                .map_err(|e| bad(e.to_string()))?;
        let run = module
            .exports()
            .find(|e| e.name() == "run")
            .ok_or_else(|| bad("it exports no function `run`".into()))?;
        match run.ty() {
            wasmi::ExternType::Func(f)
                if f.params().is_empty() && f.results() == [wasmi::ValType::I32] => {}
            _ => return Err(bad("its `run` is not a function of type () -> i32".into())),
        }
        let mut store = store(&engine, probe_input(), Box::new(NoReads));
        store.set_fuel(FUNCTION_FUEL_MAX).map_err(internal)?;
        linker
            .instantiate_and_start(&mut store, &module)
            .map_err(|e| bad(e.to_string()))?;
        Ok(Compiled {
            linker: Arc::new(linker),
            module,
            warm: Arc::default(),
            running: Arc::new(tokio::sync::Semaphore::new(WARM_INSTANCES_MAX)),
        })
    }

    /// A new instance past its `_initialize` (a reactor's, as Go's `-buildmode=c-shared`
    /// makes), which reads `input`'s clock.
    fn warm_up(&self, compiled: &Compiled, input: &Invocation) -> Result<Warm, FirnError> {
        let mut store = store(compiled.module.engine(), input.clone(), Box::new(NoReads));
        store.set_fuel(FUNCTION_FUEL_MAX).map_err(internal)?;
        let started = (|| {
            let instance = compiled
                .linker
                .instantiate_and_start(&mut store, &compiled.module)?;
            if let Ok(init) = instance.get_typed_func::<(), ()>(&store, "_initialize") {
                init.call(&mut store, ())?;
            }
            instance.get_typed_func::<(), i32>(&store, "run")
        })();
        match started {
            Ok(run) => Ok(Warm { store, run }),
            Err(e) => Err(FirnError::FunctionFailed(format!(
                "starting the module: {}",
                describe(&e)
            ))),
        }
    }

    /// Runs `compiled` once on `input`, within the budget, in a warm instance when one is
    /// free (else a new one). An instance whose run trapped is dropped; one whose run ended
    /// serves the next run: a module's memory and globals may outlive a run, so a function
    /// keeps nothing there it relies on (docs/functions.md).
    pub fn run(
        &self,
        compiled: &Compiled,
        input: Invocation,
        host: Box<dyn Host>,
    ) -> Result<Outcome, FirnError> {
        let mut warm = match compiled.take() {
            Some(warm) => warm,
            None => self.warm_up(compiled, &input)?,
        };
        warm.store.data_mut().begin(input, host);
        warm.store.set_fuel(FUNCTION_FUEL_MAX).map_err(internal)?;
        let result = warm.run.call(&mut warm.store, ());
        let fuel = FUNCTION_FUEL_MAX - warm.store.get_fuel().unwrap_or(0);
        let state = warm.store.data_mut().end();
        if result.is_ok() {
            compiled.give_back(warm);
        }
        if let Some(e) = state.failed {
            return Err(e);
        }
        match result {
            Ok(0) => Ok(Outcome {
                effects: state.effects,
                reply: state.reply,
                log: state.log,
                fuel,
            }),
            Ok(code) => Err(FirnError::FunctionFailed(format!(
                "run returned {code}{}",
                state
                    .log
                    .last()
                    .map(|l| format!(" (its last log line: {l})"))
                    .unwrap_or_default()
            ))),
            // A trap's last log line often says why (a Go panic, AssemblyScript's abort).
            Err(e) => Err(FirnError::FunctionFailed(format!(
                "{}{}",
                describe(&e),
                state
                    .log
                    .last()
                    .map(|l| format!(" (its last log line: {l})"))
                    .unwrap_or_default()
            ))),
        }
    }
}

/// The seed of a run's random numbers: its input and stamp.
fn seed(input: &Invocation) -> u64 {
    let seed = xxhash_rust::xxh3::xxh3_64(
        &[
            &input.stamp_us.to_le_bytes()[..],
            &input.input_version.to_le_bytes(),
            &input.keys.concat(),
            &input.args.concat(),
        ]
        .concat(),
    );
    seed | 1
}

/// What a run left, taken out of its store.
pub(super) struct Ended {
    effects: Vec<Effect>,
    reply: Option<Bytes>,
    log: Vec<String>,
    failed: Option<FirnError>,
}

impl RunState {
    /// Starts a run in this store: its input, its reads, and nothing written yet.
    fn begin(&mut self, input: Invocation, host: Box<dyn Host>) {
        self.random = seed(&input);
        self.input = input;
        self.host = host;
        self.effects.clear();
        self.written.clear();
        self.write_bytes = 0;
        self.reply = None;
        self.log.clear();
        self.log_bytes = 0;
        self.host_calls = 0;
        self.failed = None;
    }

    /// Ends the run: what it left, and the store holds no reads of it.
    fn end(&mut self) -> Ended {
        self.host = Box::new(NoReads);
        Ended {
            effects: std::mem::take(&mut self.effects),
            reply: self.reply.take(),
            log: std::mem::take(&mut self.log),
            failed: self.failed.take(),
        }
    }
}

/// A trap or error in words a user can act on.
fn describe(e: &WasmError) -> String {
    if let Some(code) = e.i32_exit_status() {
        return format!("the module exited with status {code}");
    }
    match e.as_trap_code() {
        Some(TrapCode::OutOfFuel) => format!(
            "out of fuel: the run took more than {FUNCTION_FUEL_MAX} instructions (an endless loop?)"
        ),
        Some(TrapCode::GrowthOperationLimited) => format!(
            "out of memory: an instance may grow to {} MiB",
            FUNCTION_MEMORY_BYTES_MAX >> 20
        ),
        Some(code) => format!("trap: {code}"),
        None => e.to_string(),
    }
}

/// A store in `engine` for one run on `input`, within the run's memory budget.
fn store(engine: &Engine, input: Invocation, host: Box<dyn Host>) -> Store<RunState> {
    let state = RunState {
        random: seed(&input),
        monotonic_ns: input.stamp_us.saturating_mul(1_000),
        input,
        host,
        effects: Vec::new(),
        written: HashMap::new(),
        write_bytes: 0,
        reply: None,
        log: Vec::new(),
        log_bytes: 0,
        host_calls: 0,
        failed: None,
        limits: StoreLimitsBuilder::new()
            .memory_size(FUNCTION_MEMORY_BYTES_MAX)
            .instances(1)
            .build(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store
}

fn internal(e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("function sandbox: {e}"))
}

fn probe_input() -> Invocation {
    Invocation {
        kind: InputKind::Call,
        keys: Vec::new(),
        args: Vec::new(),
        stamp_us: 0,
        input_version: 0,
    }
}

/// The reads of a module's load check, which runs nothing.
struct NoReads;

impl Host for NoReads {
    fn get(&mut self, _: &[u8], _: ReadPoint) -> Result<Option<Bytes>, FirnError> {
        Ok(None)
    }
    fn scan(&mut self, _: &[u8], _: &[u8], _: usize) -> Result<Vec<Bytes>, FirnError> {
        Ok(Vec::new())
    }

    fn log_read(
        &mut self,
        _: &[u8],
        _: &[u8],
        _: Option<LogSeq>,
        _: usize,
    ) -> Result<Vec<(LogSeq, Bytes)>, FirnError> {
        Ok(Vec::new())
    }
}

/// The guest's linear memory.
fn memory(caller: &Caller<'_, RunState>) -> Result<wasmi::Memory, WasmError> {
    caller
        .get_export("memory")
        .and_then(Extern::into_memory)
        .ok_or_else(|| WasmError::new("the module exports no memory"))
}

/// Bytes `[ptr, ptr+len)` of the guest's memory.
pub(super) fn read_guest(
    caller: &Caller<'_, RunState>,
    ptr: i32,
    len: i32,
) -> Result<Bytes, WasmError> {
    if len < 0 || len as usize > FUNCTION_WRITE_BYTES_MAX {
        return Err(WasmError::new(format!("a length of {len} bytes")));
    }
    let mut buf = vec![0u8; len as usize];
    memory(caller)?
        .read(caller, ptr as u32 as usize, &mut buf)
        .map_err(|e| WasmError::new(format!("reading guest memory: {e}")))?;
    Ok(Bytes::from(buf))
}

/// Whether bytes `[ptr, ptr+len)` lie in the guest's memory (a trap if not), read or not.
pub(super) fn guest_holds(
    caller: &Caller<'_, RunState>,
    ptr: i32,
    len: i32,
) -> Result<(), WasmError> {
    let size = memory(caller)?.data_size(caller);
    let end = (ptr as u32 as usize).checked_add(len.max(0) as usize);
    if len < 0 || end.is_none_or(|end| end > size) {
        return Err(WasmError::new(format!(
            "{len} bytes at {} are not in the memory ({size} bytes)",
            ptr as u32
        )));
    }
    Ok(())
}

/// Writes `bytes` at `ptr` when they fit in `cap`; answers their length either way (the
/// ABI's "call again with a bigger buffer").
pub(super) fn answer_bytes(
    caller: &mut Caller<'_, RunState>,
    bytes: &[u8],
    ptr: i32,
    cap: i32,
) -> Result<i64, WasmError> {
    if bytes.len() <= cap.max(0) as usize {
        memory(caller)?
            .write(&mut *caller, ptr as u32 as usize, bytes)
            .map_err(|e| WasmError::new(format!("writing guest memory: {e}")))?;
    }
    Ok(bytes.len() as i64)
}

/// A read's answer to the guest: the value's length (copied when it fits), or absent.
pub(super) fn answer_read(
    caller: &mut Caller<'_, RunState>,
    value: Result<Option<Bytes>, FirnError>,
    ptr: i32,
    cap: i32,
) -> Result<i64, WasmError> {
    match value {
        Ok(Some(v)) => answer_bytes(caller, &v, ptr, cap),
        Ok(None) => Ok(ABSENT),
        Err(e) => {
            let text = e.to_string();
            caller.data_mut().failed.get_or_insert(e);
            Err(WasmError::new(format!("a read failed: {text}")))
        }
    }
}

/// A sandbox shared by every run of a node.
pub type SharedSandbox = Arc<Sandbox>;

#[cfg(test)]
mod tests;
