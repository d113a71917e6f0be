//! The Lua scripts of the Redis store (`src/guard/store/lua/`), each loaded once and called by
//! SHA.

use redis::Script;

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

pub(super) struct Scripts {
    pub(super) read: Script,
    pub(super) reserve: Script,
    pub(super) reserve_known: Script,
    pub(super) settle: Script,
    pub(super) filled: Script,
    pub(super) fill: Script,
    pub(super) mark_once: Script,
    pub(super) raise_until: Script,
    pub(super) epoch: Script,
    pub(super) settle_parts: Script,
    pub(super) queue: Script,
    /// Settles carried by a reservation: `settle.lua` and `reserve_known.lua` as functions
    /// of their own keys and arguments, called by `carry.lua`.
    pub(super) carry: Script,
    /// Slot groups (`groups.rs`): a group's holds given back when another group refused,
    /// and the store's list of groups.
    pub(super) unreserve: Script,
    pub(super) groups: Script,
    /// The upgrade from the shared layout (`migrate.rs`).
    pub(super) migrate_read: Script,
    pub(super) migrate_write: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let with_common = |body: &str| Script::new(&format!("{COMMON_LUA}\n{body}"));
        Scripts {
            read: with_common(READ_LUA),
            reserve: with_common(&format!("{FENCE_LUA}\n{RESERVE_LUA}")),
            reserve_known: with_common(&format!("{FENCE_LUA}\n{RESERVE_KNOWN_LUA}")),
            settle: with_common(&format!("{FENCE_LUA}\n{SETTLE_LUA}")),
            filled: with_common(FILLED_LUA),
            fill: with_common(FILL_LUA),
            mark_once: Script::new(MARK_ONCE_LUA),
            raise_until: Script::new(RAISE_UNTIL_LUA),
            epoch: Script::new(EPOCH_LUA),
            settle_parts: with_common(&format!("{FENCE_LUA}\n{SETTLE_PARTS_LUA}")),
            queue: Script::new(QUEUE_LUA),
            unreserve: with_common(UNRESERVE_LUA),
            groups: Script::new(GROUPS_LUA),
            migrate_read: Script::new(MIGRATE_READ_LUA),
            migrate_write: Script::new(MIGRATE_WRITE_LUA),
            carry: with_common(&format!(
                "{FENCE_LUA}\nlocal function settle_one(KEYS, ARGV)\n{SETTLE_LUA}\nend\n\
                 local function reserve_one(KEYS, ARGV)\n{RESERVE_KNOWN_LUA}\nend\n{CARRY_LUA}"
            )),
        }
    }
}

/// The `EVALSHA` of `script` with `keys` and `args`, each written straight into the command's
/// one buffer.
pub(super) fn eval_cmd(script: &Script, keys: &Args, args: &Args) -> redis::Cmd {
    let count = 3 + keys.len() + args.len();
    let mut cmd = redis::Cmd::with_capacity(count, keys.bytes() + args.bytes() + 64);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for item in keys.iter().chain(args.iter()) {
        cmd.arg(item);
    }
    cmd
}

/// Runs `script` by its SHA (`eval_cmd`), and loads it and runs it again when the server
/// does not have it (NOSCRIPT). Every script call of the store goes through here (or
/// `eval_cmd`, in the settles' pipeline); redis-rs's `ScriptInvocation` would first copy
/// every key and argument into a buffer of its own (an allocation and a copy per argument,
/// ~130 per carried admission).
pub(super) async fn invoke<T, C>(
    script: &Script,
    keys: &Args,
    args: &Args,
    conn: &mut C,
) -> redis::RedisResult<T>
where
    T: redis::FromRedisValue,
    C: redis::aio::ConnectionLike,
{
    let cmd = eval_cmd(script, keys, args);
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        answer => answer,
    }
}
