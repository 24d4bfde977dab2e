//! The WASI imports (`wasi_snapshot_preview1`) a function gets: Firn's own, deterministic, so
//! that a run depends only on its input and the cut it reads. The clock is the run's stamp
//! (the monotonic clock moves on by itself, only forward);
//! `random_get` is a generator seeded by the run's input and stamp; there are no arguments,
//! no environment and no files; stdout and stderr go to the operator's log (bounded). Go's
//! `wasip1` runtime imports fifteen of these; the others answer `ENOSYS` or `EBADF` so modules of
//! other toolchains load.

use firn_model::limits::FUNCTION_LOG_BYTES_MAX;
use wasmi::{Caller, Error as WasmError, Linker};

use super::sandbox::{RunState, answer_bytes, guest_holds, read_guest};

const MODULE: &str = "wasi_snapshot_preview1";
const SUCCESS: i32 = 0;
const EBADF: i32 = 8;
const EINVAL: i32 = 28;
const ENOSYS: i32 = 52;

/// Most iovecs one `fd_write` reads (POSIX's IOV_MAX).
const IOVECS_MAX: i32 = 1024;
/// Most bytes one `random_get` fills.
const RANDOM_BYTES_MAX: i32 = 64 * 1024;

fn write_u32(c: &mut Caller<'_, RunState>, ptr: i32, v: u32) -> Result<(), WasmError> {
    answer_bytes(c, &v.to_le_bytes(), ptr, 4).map(drop)
}

fn write_u64(c: &mut Caller<'_, RunState>, ptr: i32, v: u64) -> Result<(), WasmError> {
    answer_bytes(c, &v.to_le_bytes(), ptr, 8).map(drop)
}

/// The next number of the run's generator (xorshift64*: small, and the same on every node).
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

pub(super) fn define(linker: &mut Linker<RunState>) -> Result<(), wasmi::errors::LinkerError> {
    linker.func_wrap(MODULE, "sched_yield", || SUCCESS)?;
    linker.func_wrap(MODULE, "proc_exit", |code: i32| -> Result<(), WasmError> {
        Err(WasmError::i32_exit(code))
    })?;
    // No arguments and no environment: counts of 0 and 0 bytes.
    for (name, sizes) in [("args", "args_sizes_get"), ("environ", "environ_sizes_get")] {
        linker.func_wrap(
            MODULE,
            sizes,
            |mut c: Caller<'_, RunState>, count: i32, bytes: i32| -> Result<i32, WasmError> {
                write_u32(&mut c, count, 0)?;
                write_u32(&mut c, bytes, 0)?;
                Ok(SUCCESS)
            },
        )?;
        linker.func_wrap(MODULE, &format!("{name}_get"), |_: i32, _: i32| SUCCESS)?;
    }
    linker.func_wrap(
        MODULE,
        "clock_time_get",
        |mut c: Caller<'_, RunState>, id: i32, _precision: i64, out: i32| {
            // The realtime clock is the run's stamp; the monotonic one (id 1) moves on a
            // microsecond a reading.
            let ns = if id == 1 {
                let state = c.data_mut();
                state.monotonic_ns = state.monotonic_ns.saturating_add(1_000);
                state.monotonic_ns
            } else {
                c.data().stamp_us().saturating_mul(1_000)
            };
            write_u64(&mut c, out, ns)?;
            Ok::<i32, WasmError>(SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "clock_res_get",
        |mut c: Caller<'_, RunState>, _id: i32, out: i32| {
            write_u64(&mut c, out, 1_000)?;
            Ok::<i32, WasmError>(SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "random_get",
        |mut c: Caller<'_, RunState>, buf: i32, len: i32| -> Result<i32, WasmError> {
            if !(0..=RANDOM_BYTES_MAX).contains(&len) {
                return Ok(EINVAL);
            }
            let mut bytes = Vec::with_capacity(len as usize + 8);
            while bytes.len() < len as usize {
                let n = next_random(&mut c.data_mut().random);
                bytes.extend_from_slice(&n.to_le_bytes());
            }
            bytes.truncate(len as usize);
            answer_bytes(&mut c, &bytes, buf, len)?;
            Ok(SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_write",
        |mut c: Caller<'_, RunState>,
         fd: i32,
         iovs: i32,
         iovs_len: i32,
         written: i32|
         -> Result<i32, WasmError> {
            if fd != 1 && fd != 2 {
                return Ok(EBADF);
            }
            c.data_mut().call()?;
            // Every iovec must lie in the memory, but only what the log can still keep is
            // copied: a few bytes of iovecs may name the whole memory many times over.
            let mut text = Vec::new();
            let mut total: u32 = 0;
            for i in 0..iovs_len.clamp(0, IOVECS_MAX) {
                let at = (iovs as u32)
                    .checked_add(i as u32 * 8)
                    .ok_or_else(|| WasmError::new("an iovec past the end of memory"))?;
                let iov = read_guest(&c, at as i32, 8)?;
                let ptr = i32::from_le_bytes(iov[..4].try_into().expect("4 bytes"));
                let len = i32::from_le_bytes(iov[4..].try_into().expect("4 bytes"));
                guest_holds(&c, ptr, len)?;
                let room = FUNCTION_LOG_BYTES_MAX.saturating_sub(text.len());
                let kept = (len as usize).min(room) as i32;
                text.extend_from_slice(&read_guest(&c, ptr, kept)?);
                total = total.saturating_add(len as u32);
            }
            let line = String::from_utf8_lossy(&text).trim_end().to_owned();
            if !line.is_empty() {
                c.data_mut().log_line(line);
            }
            write_u32(&mut c, written, total)?;
            Ok(SUCCESS)
        },
    )?;
    // Nothing to wait on: a run does not sleep.
    linker.func_wrap(MODULE, "poll_oneoff", |_: i32, _: i32, _: i32, _: i32| {
        ENOSYS
    })?;
    // No files: no descriptor but stdout and stderr, and no preopened directory.
    linker.func_wrap(MODULE, "fd_close", |_: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_fdstat_get", |_: i32, _: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_fdstat_set_flags", |_: i32, _: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_filestat_get", |_: i32, _: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_prestat_get", |_: i32, _: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_prestat_dir_name", |_: i32, _: i32, _: i32| {
        EBADF
    })?;
    linker.func_wrap(MODULE, "fd_read", |_: i32, _: i32, _: i32, _: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_seek", |_: i32, _: i64, _: i32, _: i32| EBADF)?;
    linker.func_wrap(
        MODULE,
        "path_open",
        |_: i32, _: i32, _: i32, _: i32, _: i32, _: i64, _: i64, _: i32, _: i32| ENOSYS,
    )?;
    Ok(())
}
