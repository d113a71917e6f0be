//! The Lua of the Redis store (`src/guard/store/lua/`). The scripts built on `common.lua`
//! run as one Redis function library (`FCALL`, Redis 7+) where the server has functions and
//! lets this user load them, and as scripts called by SHA (`EVALSHA`) otherwise: the same Lua
//! either way. A library is loaded once per server and keeps its Lua state between calls,
//! so a call does not define the ~25 shared functions again and reads the process's
//! `run_id` (an `INFO`) once per state instead of once per fenced call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::{RedisError, Script};
use sha2::{Digest, Sha256};

use super::args::Args;

const COMMON_LUA: &str = include_str!("../lua/common.lua");
const READ_LUA: &str = include_str!("../lua/read.lua");
const FENCE_LUA: &str = include_str!("../lua/fence.lua");
const RESERVE_LUA: &str = include_str!("../lua/reserve.lua");
const RESERVE_KNOWN_LUA: &str = include_str!("../lua/reserve_known.lua");
const SETTLE_LUA: &str = include_str!("../lua/settle.lua");
const FILLED_LUA: &str = include_str!("../lua/filled.lua");
const FILL_LUA: &str = include_str!("../lua/fill.lua");
const MARK_ONCE_LUA: &str = include_str!("../lua/mark_once.lua");
const RAISE_UNTIL_LUA: &str = include_str!("../lua/raise_until.lua");
const EPOCH_LUA: &str = include_str!("../lua/epoch.lua");
const SETTLE_PARTS_LUA: &str = include_str!("../lua/settle_parts.lua");
const QUEUE_LUA: &str = include_str!("../lua/wait_queues.lua");
const CARRY_LUA: &str = include_str!("../lua/carry.lua");
const UNRESERVE_LUA: &str = include_str!("../lua/unreserve.lua");
const GROUPS_LUA: &str = include_str!("../lua/groups.lua");
const MIGRATE_READ_LUA: &str = include_str!("../lua/migrate_read.lua");
const MIGRATE_WRITE_LUA: &str = include_str!("../lua/migrate_write.lua");

/// `settle.lua` and `reserve_known.lua` as functions of their own keys and arguments, for
/// `carry.lua`.
fn carried_parts() -> String {
    format!(
        "local function settle_one(KEYS, ARGV)\n{SETTLE_LUA}\nend\n\
         local function reserve_one(KEYS, ARGV)\n{RESERVE_KNOWN_LUA}\nend\n"
    )
}

/// The library's scripts: name, whether the epoch fence's key and arguments end the call
/// (`fence_begin`), and the body. Redis refuses a function without flags whole when it is
/// out of memory (where a script by SHA fails at its first write that needs memory);
/// `read` and `filled` only read and delete, so they are registered `allow-oom` and answer
/// as before (`READS`).
const LIBRARY: [(&str, bool, &str); 9] = [
    ("read", false, READ_LUA),
    ("reserve", true, RESERVE_LUA),
    ("reserve_known", true, RESERVE_KNOWN_LUA),
    ("settle", true, SETTLE_LUA),
    ("settle_parts", true, SETTLE_PARTS_LUA),
    ("carry", true, CARRY_LUA),
    ("filled", false, FILLED_LUA),
    ("fill", false, FILL_LUA),
    ("unreserve", false, UNRESERVE_LUA),
];

/// The scripts of the library that only read (and delete what is past its time).
const READS: [&str; 2] = ["read", "filled"];

/// The function library of one store: its code, and whether calls go to it.
pub(super) struct Library {
    /// `usage_guard_<12 hex digits of the SHA-256 of all its code>`: two versions of the
    /// guard whose Lua differs anywhere load two libraries on one server, and never call
    /// each other's functions.
    name: String,
    code: String,
    /// Cleared for good when the server has no functions (before Redis 7) or refuses to load
    /// the library (an ACL without `FUNCTION`): the store then calls the scripts by SHA.
    on: AtomicBool,
}

impl Library {
    fn new() -> Self {
        Self::of(&LIBRARY)
    }

    /// The library of `scripts` (name, fenced, body) on the shared Lua.
    fn of(scripts: &[(&str, bool, &str)]) -> Self {
        let mut body = String::from("local KEYS, ARGV\n");
        body.push_str(COMMON_LUA);
        body.push('\n');
        body.push_str(FENCE_LUA);
        body.push('\n');
        body.push_str(&carried_parts());
        // Each call starts from nothing the previous call of this Lua state left.
        body.push_str(
            "local function call(body, fenced)\n  return function(keys, args)\n    \
             KEYS, ARGV = keys, args\n    begin_call()\n    \
             if fenced then fence_begin() end\n    return body()\n  end\nend\n",
        );
        // The name hashes all the code, the bodies too (registered below, under the name).
        let mut code = Sha256::new();
        code.update(body.as_bytes());
        code.update(format!("{READS:?}").as_bytes());
        for (script, fenced, text) in scripts {
            code.update(format!("{script}:{fenced}:{}:", text.len()).as_bytes());
            code.update(text.as_bytes());
        }
        let hash = code.finalize();
        let mut name = String::from("usage_guard_");
        for byte in &hash[..6] {
            name.push_str(&format!("{byte:02x}"));
        }
        for (script, fenced, text) in scripts {
            let flags = match READS.contains(script) {
                true => "{'allow-oom'}",
                false => "{}",
            };
            body.push_str(&format!(
                "redis.register_function{{function_name = '{name}_{script}', flags = {flags}, \
                 callback = call(function()\n{text}\nend, {fenced})}}\n"
            ));
        }
        let code = format!("#!lua name={name}\n{body}");
        Library {
            name,
            code,
            on: AtomicBool::new(true),
        }
    }

    /// Loads the library on the server behind `conn` (every master of a cluster). Ok when it
    /// is there now; a server that will not have it (an ACL, a renamed or unknown command,
    /// code it refuses) turns the library off (calls then go by SHA). A server that cannot
    /// now (out of memory, loading, busy, a cluster without a master) and a failure to reach
    /// it are errors: the call fails as any store operation would, and a later one loads.
    async fn load<C: redis::aio::ConnectionLike>(&self, conn: &mut C) -> redis::RedisResult<()> {
        let loaded: redis::RedisResult<String> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&self.code)
            .query_async(conn)
            .await;
        match loaded {
            Ok(_) => Ok(()),
            Err(e) if e.detail().is_some_and(|d| d.contains("already exists")) => Ok(()),
            // Redis gives a load 500 ms: a busy server may take longer this once.
            Err(e) if e.detail().is_some_and(|d| d.contains("timeout")) => Err(e),
            Err(e)
                if e.code() == Some("ERR")
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) =>
            {
                log::info!(
                    "redis: the server did not load the function library ({e}); \
                     the store calls its scripts by SHA"
                );
                self.on.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// How many times one call of a script may be sent: the library loaded and still missing,
/// then turned off, then the script loaded by SHA, then run.
const SENDS: usize = 4;

/// One of the store's Lua scripts: by SHA always, and as a function of the library while
/// the library is on.
pub(super) struct Lua {
    script: Script,
    function: Option<(String, Arc<Library>)>,
}

impl Lua {
    fn script(text: &str) -> Self {
        Lua {
            script: Script::new(text),
            function: None,
        }
    }

    /// The function's name, while calls go to the library.
    fn function(&self) -> Option<&str> {
        match &self.function {
            Some((name, library)) if library.on.load(Ordering::Relaxed) => Some(name),
            _ => None,
        }
    }

    /// After `e` answered the `send`-th sending (from 1) of a call of this script: makes
    /// the server able to run it (loads the script or the library, or turns the library off
    /// when the server has no functions) and says whether the call should be sent again
    /// (at most `SENDS` sendings in all).
    pub(super) async fn recover<C>(
        &self,
        e: &RedisError,
        conn: &mut C,
        send: usize,
    ) -> redis::RedisResult<bool>
    where
        C: redis::aio::ConnectionLike,
    {
        if send >= SENDS {
            return Ok(false);
        }
        if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
            self.script.load_async(conn).await?;
            return Ok(true);
        }
        let Some((_, library)) = &self.function else {
            return Ok(false);
        };
        // Only answers to an `FCALL` are read here (each names the function or the command):
        // the same refusals of an `EVALSHA` are the call's error.
        let detail = e.detail().unwrap_or("").to_ascii_lowercase();
        let missing = e.code() == Some("ERR") && detail.starts_with("function not found");
        // No functions on this server (Redis 6 answers "unknown command `FCALL`"), or an ACL
        // that keeps this user from `FCALL` (it may still allow `EVALSHA`).
        let refused = (e.code() == Some("ERR") && detail.starts_with("unknown command"))
            || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm);
        if !(missing || (refused && detail.contains("fcall"))) {
            return Ok(false);
        }
        if !library.on.load(Ordering::Relaxed) {
            // Sent as a function before another call turned the library off: by SHA now.
            return Ok(true);
        }
        if missing && send == 1 {
            library.load(conn).await?;
            return Ok(true);
        }
        let why = match missing {
            // Loaded (or "already exists"), and still not found: a library of that name with
            // other functions, or a proxy that loads on one node and calls another.
            true => "its functions are not found once it is loaded",
            false => "the server or this user cannot call functions",
        };
        log::info!("redis: {why} ({e}); the store calls its scripts by SHA");
        library.on.store(false, Ordering::Relaxed);
        Ok(true)
    }
}

/// The store's scripts, each loaded once per server.
pub(super) struct Scripts {
    pub(super) read: Lua,
    pub(super) reserve: Lua,
    pub(super) reserve_known: Lua,
    pub(super) settle: Lua,
    pub(super) filled: Lua,
    pub(super) fill: Lua,
    pub(super) mark_once: Lua,
    pub(super) raise_until: Lua,
    pub(super) epoch: Lua,
    pub(super) settle_parts: Lua,
    pub(super) queue: Lua,
    /// Settles carried by a reservation: `settle.lua` and `reserve_known.lua` as functions
    /// of their own keys and arguments, called by `carry.lua`.
    pub(super) carry: Lua,
    /// Slot groups (`groups.rs`): a group's holds given back when another group refused,
    /// and the store's list of groups.
    pub(super) unreserve: Lua,
    pub(super) groups: Lua,
    /// The upgrade from the shared layout (`migrate.rs`).
    pub(super) migrate_read: Lua,
    pub(super) migrate_write: Lua,
    library: Arc<Library>,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let library = Arc::new(Library::new());
        // By SHA: `common.lua`, then (fenced) `fence.lua`, the body's helpers and
        // `fence_begin()`, then the body; in the library, the body's function.
        let in_library = |name: &str| {
            let (_, fenced, body) = LIBRARY
                .iter()
                .find(|(script, _, _)| *script == name)
                .expect("a script of the library");
            let helpers = if name == "carry" {
                carried_parts()
            } else {
                String::new()
            };
            let text = match fenced {
                true => format!("{COMMON_LUA}\n{FENCE_LUA}\n{helpers}fence_begin()\n{body}"),
                false => format!("{COMMON_LUA}\n{body}"),
            };
            Lua {
                script: Script::new(&text),
                function: Some((format!("{}_{name}", library.name), library.clone())),
            }
        };
        Scripts {
            read: in_library("read"),
            reserve: in_library("reserve"),
            reserve_known: in_library("reserve_known"),
            settle: in_library("settle"),
            filled: in_library("filled"),
            fill: in_library("fill"),
            mark_once: Lua::script(MARK_ONCE_LUA),
            raise_until: Lua::script(RAISE_UNTIL_LUA),
            epoch: Lua::script(EPOCH_LUA),
            settle_parts: in_library("settle_parts"),
            queue: Lua::script(QUEUE_LUA),
            unreserve: in_library("unreserve"),
            groups: Lua::script(GROUPS_LUA),
            migrate_read: Lua::script(MIGRATE_READ_LUA),
            migrate_write: Lua::script(MIGRATE_WRITE_LUA),
            carry: in_library("carry"),
            library,
        }
    }

    /// Calls by SHA from now on, never through the library (`RedisStore::without_functions`).
    pub(super) fn without_functions(&self) {
        self.library.on.store(false, Ordering::Relaxed);
    }

    /// Whether calls go to the function library now.
    pub(super) fn functions_on(&self) -> bool {
        self.library.on.load(Ordering::Relaxed)
    }
}

/// The call of `lua` with `keys` and `args` (`FCALL` while the library is on, else
/// `EVALSHA`), each written straight into the command's one buffer.
pub(super) fn eval_cmd(lua: &Lua, keys: &Args, args: &Args) -> redis::Cmd {
    let count = 3 + keys.len() + args.len();
    let mut cmd = redis::Cmd::with_capacity(count, keys.bytes() + args.bytes() + 64);
    match lua.function() {
        Some(name) => cmd.arg("FCALL").arg(name),
        None => cmd.arg("EVALSHA").arg(lua.script.get_hash()),
    };
    cmd.arg(keys.len());
    for item in keys.iter().chain(args.iter()) {
        cmd.arg(item);
    }
    cmd
}

/// Runs `lua` (`eval_cmd`); when the server cannot run it yet (`Lua::recover`: a script or
/// library not loaded, no functions) makes it able to and runs it again. Every script call
/// of the store goes through here (or `eval_cmd`, in the settles' pipeline); redis-rs's
/// `ScriptInvocation` would first copy every key and argument into a buffer of its own (an
/// allocation and a copy per argument, ~130 per carried admission).
pub(super) async fn invoke<T, C>(
    lua: &Lua,
    keys: &Args,
    args: &Args,
    conn: &mut C,
) -> redis::RedisResult<T>
where
    T: redis::FromRedisValue,
    C: redis::aio::ConnectionLike,
{
    let mut send = 0;
    loop {
        send += 1;
        match eval_cmd(lua, keys, args).query_async(conn).await {
            Err(e) if lua.recover(&e, conn, send).await? => continue,
            answer => return answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Library, LIBRARY};

    #[test]
    fn the_name_changes_with_any_of_the_code() {
        let name = Library::new().name;
        assert_eq!(Library::new().name, name, "the same code, the same name");
        assert!(name.starts_with("usage_guard_") && name.len() == "usage_guard_".len() + 12);
        for i in 0..LIBRARY.len() {
            let mut edited = LIBRARY;
            let changed = format!("{}\n", LIBRARY[i].2);
            edited[i].2 = &changed;
            assert_ne!(Library::of(&edited).name, name, "{} edited", LIBRARY[i].0);
        }
    }
}
