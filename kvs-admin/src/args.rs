//! The command line: global options, the commands, and the parsers of their
//! values (durations, slot ranges, members).

use kvs_proto::MemberId;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// What `--help` says after the list of commands.
const AFTER_HELP: &str = "\
Migrations are driven by the servers: the control group's leader commits
each step to the group's log, and the targets pull the records. kvs-admin only starts a
migration and follows its progress; killing it (Ctrl-C) neither stops nor
breaks the migration. `kvs-admin status` shows it again later, and
`kvs-admin cancel` stops it (the slots being pulled finish moving, the rest
stay where they are).

Replicas: each slot has a primary, which serves it, and `replicas - 1`
synchronous backups on other members, which hold every acknowledged write
and take over when the primary's member fails. `kvs-admin set replicas N`
changes the count (1 to 3); raising it copies every slot to its new
backups while the cluster serves, and `kvs-admin status` shows the slots
still under-replicated.

Drains: `kvs-admin drain MEMBER` empties a member without stopping it: it
stops serving, its slots move to their ready backups, and it takes none
until it restarts. SIGTERM (systemd stop) does the same before a server
exits.

Snapshots: with records on disk (`durability`), `kvs-admin snapshot
[MEMBER]` has each worker copy its records to its snapshot file while it
serves, so its logs start again small: do it before a backup.

--server names any one member: kvs-admin reads the map from it, asks every
member for its figures, and sends migrations and settings to the leader
wherever it is.

Examples:
  kvs-admin --server 10.0.0.1:7000 status
  kvs-admin status --watch 2
  kvs-admin status --json
  kvs-admin migrate --slots 0-511 --to 1
  kvs-admin migrate --slots 17 --to 10.0.0.2:7000 --no-wait
  kvs-admin rebalance
  kvs-admin cancel
  kvs-admin set replicas 2
  kvs-admin drain 1
  kvs-admin snapshot
  kvs-admin forget 2 --force
  kvs-admin --server 10.0.0.3:7000 unsafe-recover 0 1 --yes
  kvs-admin --cluster-token-file /etc/kvs/cluster-token --server 10.0.0.1:7000 status

Exit status: 0 done; 1 an error (a server that cannot be reached, a refused
token, a refused request, a migration that failed or was cancelled, copies
that were not all made in time, a drain not applied in time, a snapshot
refused, failed or not done in time); 2 a usage error.";

/// What `set replicas --help` says after the options.
const REPLICAS_AFTER_HELP: &str = "\
Raising N adds backups and copies every slot to them while the cluster goes
on serving reads and writes; a backup is ready (it may take over) once its
copy is complete. Meanwhile `kvs-admin status` shows under_replicated_slots
falling to 0, and this command waits for that (unless --no-wait; stopping it
with Ctrl-C does not stop the copying). Lowering N drops backups at once.

N beyond the members that are up leaves slots under-replicated until more
members join; two copies never share a member, and with `zone` set on the
servers, they go to different zones while there are enough.

Examples:
  kvs-admin set replicas 2
  kvs-admin set replicas 3 --no-wait
  kvs-admin set replicas 1";

/// What `drain --help` says after the options.
const DRAIN_AFTER_HELP: &str = "\
kvs-admin sends the drain to the member itself (not to the leader: any
member drains itself), then waits until the member reports it drained
(unless --no-wait; stopping kvs-admin with Ctrl-C does not stop the drain).
`kvs-admin status` shows drained members too.

SIGTERM (systemd stop) does the same before the server exits: a planned
stop hands each slot with a ready backup over first, so no acknowledged
write is lost. Drain first to empty a member and keep it running.

A restart brings the member back into use: it may hold copies again, and
`kvs-admin rebalance` gives it its share of the slots.

With replicas = 1 no slot has a backup, so nothing can move: every slot
stays with the member, which serves them again once the drain is applied.
Run `kvs-admin set replicas 2` first (it waits until every slot has a ready
backup).

Examples:
  kvs-admin drain 1
  kvs-admin drain 10.0.0.2:7000 --no-wait";

/// What `snapshot --help` says after the options.
const SNAPSHOT_AFTER_HELP: &str = "\
A snapshot is a copy of a worker's records, DATA_DIR/data/worker-W.snap:
the worker starts a new log, copies its slots into the new snapshot about
64 KiB per turn while it serves, and once every slot is copied the file
is put in place and the logs before it are removed. A restart then loads
the snapshot and replays only the logs written since, so it is quicker.
Only members with records on disk (durability = everysec or always, with
a data_dir) take snapshots; one with durability = \"none\" refuses.

Snapshots also happen on their own: once a worker's logs hold
auto_snapshot_percentage (100) percent of its last snapshot's size and at
least auto_snapshot_min_size (64 MiB), as Redis's
auto-aof-rewrite-percentage and -min-size (0 turns those off). This command
takes one now, on every worker of the member (of every member without
MEMBER).

kvs-admin asks each member (any member snapshots itself), then waits until
every worker of each has put a new snapshot in place (unless --no-wait;
stopping kvs-admin with Ctrl-C does not stop the snapshots), and says the
sizes of the snapshots and of the logs left. `kvs-admin status` shows them
too, and a snapshot under way.

Backups: run it first, so the logs to copy are small, then copy each
worker-W.snap, then its worker-W.*.log files, then the rest of DATA_DIR;
if a worker's `snapshots` (kvs-admin status --json) changed during the
copy, copy again. docs/operations.md, \"Backing up and restoring a
member\", has the whole procedure.

Examples:
  kvs-admin snapshot
  kvs-admin snapshot 1
  kvs-admin snapshot 10.0.0.2:7000 --no-wait
  kvs-admin snapshot --max-wait 3600";

/// `kvs-admin`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "kvs-admin",
    version,
    about = "See and change a cluster of kvs-servers: its members, slots and keys, their copies, and migrations of slots between members",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Any one member of the cluster: its setup address.
    #[arg(
        long,
        short,
        global = true,
        display_order = 100,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:7000"
    )]
    pub server: String,
    /// RDMA device: mlx5_0, sim0, … or auto.
    #[arg(long, global = true, display_order = 101, default_value = "auto")]
    pub device: String,
    /// Software device fabric.
    #[arg(long, global = true, display_order = 102, value_name = "NAME")]
    pub fabric: Option<String>,
    /// How the connections reach the servers: `rc` or `dc` (the servers'
    /// `transport` setting).
    #[arg(
        long,
        global = true,
        display_order = 102,
        value_name = "rc|dc",
        default_value = "rc"
    )]
    pub transport: copyrpc::transport::Wire,
    /// File holding the cluster token (the servers' cluster_token_file,
    /// readable by its owner only): the one secret the control endpoint
    /// takes. Without it, the token is taken from the environment variable
    /// KVS_CLUSTER_TOKEN if that is set. The client token is refused.
    #[arg(long, global = true, display_order = 103, value_name = "FILE")]
    pub cluster_token_file: Option<PathBuf>,
    /// Seconds to wait for a server to accept a connection, and for each
    /// answer.
    #[arg(
        long,
        global = true,
        display_order = 104,
        value_name = "SECONDS",
        default_value = "10",
        value_parser = parse_seconds
    )]
    pub timeout: Duration,
    /// Completions and man pages.
    #[command(flatten)]
    pub docs: cli_docs::DocsFlags,
    /// What to do.
    #[command(subcommand)]
    pub cmd: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Shows the cluster: its map, every member's slots, keys and bytes per
    /// worker, and the migration in progress (or the last one).
    Status(StatusArgs),
    /// Moves a range of slots to a member, then follows the migration until
    /// it ends (unless --no-wait).
    Migrate(MigrateArgs),
    /// Spreads the slots evenly over all members: shows the plan, starts it,
    /// then follows the migration until it ends (unless --no-wait).
    Rebalance(WaitArgs),
    /// Stops the migration in progress: the slots being pulled now finish
    /// moving, the rest stay where they are.
    Cancel,
    /// Changes a setting of the whole cluster (kept by the control group):
    /// `set replicas N`.
    Set(SetArgs),
    /// Empties a member without stopping it: it stops serving, and its
    /// slots move to their ready backups.
    ///
    /// The member stops serving at once; the control group then moves each
    /// slot it is primary of to the slot's ready backup (which holds every
    /// acknowledged write) and drops the copies the member held. It takes
    /// no slots and no copies until it restarts. Slots with no ready backup
    /// stay with it, and it serves them again.
    #[command(after_help = DRAIN_AFTER_HELP)]
    Drain(DrainArgs),
    /// Snapshots the records of a member (of every member without one):
    /// each worker copies its records to its snapshot file while it
    /// serves, and its logs start again small.
    ///
    /// Then waits until every worker of each member asked has put its new
    /// snapshot in place (unless --no-wait), and says the sizes of the
    /// snapshots and of the logs left. Refused by members that keep their
    /// records in memory only (durability = "none").
    #[command(after_help = SNAPSHOT_AFTER_HELP)]
    Snapshot(SnapshotArgs),
    /// Removes a member from the cluster for good (a host retired, or dead
    /// and not coming back). Refused while it owns slots: move them away
    /// first (migrate, or rebalance while it is up), or give --force: its
    /// slots with a ready backup on a member that is up fail over to it,
    /// and the others go, empty, to the members that are up, their records
    /// lost. Its id is never used again; the server, if it still runs,
    /// stops.
    Forget(ForgetArgs),
    /// Restores service after a majority of the control group's voters was
    /// lost for good: the member --server names, a surviving voter, makes
    /// itself the only voter and the leader, and the lost members are
    /// forgotten (their slots fail over to ready backups; the others' records
    /// are lost). Unsafe: acknowledged writes and changes only the lost
    /// members had are gone, and a lost member must never be started again
    /// with its old data dir. Run it on the most up-to-date survivor.
    #[command(after_help = UNSAFE_RECOVER_AFTER_HELP)]
    UnsafeRecover(UnsafeRecoverArgs),
}

/// What `unsafe-recover --help` says after the options.
const UNSAFE_RECOVER_AFTER_HELP: &str = "\
Only for a majority of the voters lost for good (hosts gone with their
disks): the control group cannot commit anything, every lease lapses, and
nothing is served. Pick the surviving voter with the highest `applied` in
`kvs-admin status --json`, and name it with --server; the other survivors
follow it as learners.

Example:
  kvs-admin --server 10.0.0.3:7000 unsafe-recover 0 1 --yes";

/// `unsafe-recover`'s options.
#[derive(clap::Args, Debug)]
pub struct UnsafeRecoverArgs {
    /// The members lost for good: ids (0, 1, …) or addresses.
    #[arg(value_name = "MEMBER", required = true)]
    pub lost: Vec<MemberRef>,
    /// Confirms that their data may be lost, and that they will never be
    /// started again with their old data dirs.
    #[arg(long)]
    pub yes: bool,
}

/// `set`'s options: the setting to change.
#[derive(clap::Args, Debug)]
pub struct SetArgs {
    /// The setting.
    #[command(subcommand)]
    pub what: Setting,
}

/// The settings `set` changes.
#[derive(Subcommand, Debug)]
pub enum Setting {
    /// Keeps N copies of each slot: a primary and N-1 synchronous backups
    /// on other members (in other zones when members give a `zone`).
    ///
    /// The primary serves the slot and forwards every write to its
    /// backups, acknowledging it only once all of them have it; when the
    /// primary's member fails, a ready backup takes over, so no single
    /// failure loses an acknowledged write.
    #[command(after_help = REPLICAS_AFTER_HELP)]
    Replicas(ReplicasArgs),
    /// Sets the control group's member timeout: the silence after which
    /// the leader marks a member failed. Every member derives its Raft
    /// tick, its lease (two fifths of it) and its election timeout from
    /// the group's value, whatever its own member_timeout_ms says.
    MemberTimeout(MemberTimeoutArgs),
}

/// `set member-timeout`'s options.
#[derive(clap::Args, Debug)]
pub struct MemberTimeoutArgs {
    /// The timeout in milliseconds (200 to 60000).
    #[arg(value_name = "MS")]
    pub ms: u64,
}

/// `set replicas`'s options.
#[derive(clap::Args, Debug)]
pub struct ReplicasArgs {
    /// Copies of each slot: 1 (no backups), 2 or 3.
    #[arg(value_name = "N", value_parser = parse_replicas, allow_negative_numbers = true)]
    pub replicas: u8,
    /// Waits until every slot has N copies (the default).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Returns once the leader has taken N; the servers carry on adding,
    /// copying or dropping backups.
    #[arg(long, overrides_with = "wait")]
    pub no_wait: bool,
    /// Gives up waiting after SECONDS (the copying goes on).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "600",
        value_parser = parse_seconds
    )]
    pub max_wait: Duration,
}

/// A copy count on the command line: 1 to 3.
fn parse_replicas(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(n @ 1..=3) => Ok(n),
        _ => {
            Err("a cluster keeps 1 to 3 copies of each slot (a primary and up to 2 backups)".into())
        }
    }
}

/// `forget`'s options.
#[derive(clap::Args, Debug)]
pub struct ForgetArgs {
    /// The member to remove: its id (0, 1, …) or its address.
    #[arg(value_name = "MEMBER")]
    pub member: MemberRef,
    /// Forget it even though it owns slots: those with a ready backup fail
    /// over to it; the records of the others are lost.
    #[arg(long)]
    pub force: bool,
}

/// `drain`'s options.
#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The member to drain: its id (0, 1, …) or its address.
    #[arg(value_name = "MEMBER")]
    pub member: MemberRef,
    /// Waits until the control group has applied the drain (the default).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Returns once the member has taken the request; it drains anyway.
    #[arg(long, overrides_with = "wait")]
    pub no_wait: bool,
    /// Gives up waiting after SECONDS (the member goes on draining).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "60",
        value_parser = parse_seconds
    )]
    pub max_wait: Duration,
}

/// `snapshot`'s options.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// The member to snapshot: its id (0, 1, …) or its address; without
    /// it, every member of the cluster.
    #[arg(value_name = "MEMBER")]
    pub member: Option<MemberRef>,
    /// Waits until every worker has put its snapshot in place (the
    /// default).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Returns once the members have taken the request; they snapshot
    /// anyway.
    #[arg(long, overrides_with = "wait")]
    pub no_wait: bool,
    /// Gives up waiting after SECONDS (the snapshots go on).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "600",
        value_parser = parse_seconds
    )]
    pub max_wait: Duration,
}

/// `status`'s options.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Prints the raw figures as one JSON document (one per line with
    /// --watch).
    #[arg(long)]
    pub json: bool,
    /// Shows the status again every SECONDS, until interrupted.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub watch: Option<Duration>,
}

/// `migrate`'s options.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// The slots to move: an inclusive range such as 0-511, or one slot.
    #[arg(long, value_name = "FIRST-LAST")]
    pub slots: SlotRange,
    /// The member to own them: its id (0, 1, …) or its address.
    #[arg(long, value_name = "MEMBER")]
    pub to: MemberRef,
    /// Waiting for the end.
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// Whether a command that starts a migration waits for its end.
#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// Returns once the migration has started instead of following it (the
    /// servers carry on either way).
    #[arg(long)]
    pub no_wait: bool,
}

/// A count of seconds on the command line: positive and finite.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!("{s}: must be more than 0 seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("{s}: {e}"))
}

/// An inclusive range of slots, as `--slots` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot.
    pub first: u32,
    /// The last slot (not one past it).
    pub last: u32,
}

/// A `--slots` value that is not a slot range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotRangeError {
    /// Not numbers in the expected shape.
    #[error(
        "'{0}' is not a slot range: expected FIRST-LAST (such as 0-511) or one slot (such as 17)"
    )]
    Malformed(String),
    /// The first slot comes after the last.
    #[error("slot range {first}-{last} is backwards: its first slot is after its last")]
    Backwards {
        /// The first slot given.
        first: u32,
        /// The last slot given.
        last: u32,
    },
}

impl SlotRange {
    /// One past the last slot (`end` of a control request's `first..end`).
    pub fn end(&self) -> u64 {
        u64::from(self.last) + 1
    }
}

impl FromStr for SlotRange {
    type Err = SlotRangeError;

    fn from_str(s: &str) -> Result<SlotRange, SlotRangeError> {
        let bad = || SlotRangeError::Malformed(s.to_string());
        let num = |t: &str| -> Result<u32, SlotRangeError> {
            let t = t.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse().map_err(|_| bad())
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(s)?;
                (n, n)
            }
        };
        if first > last {
            return Err(SlotRangeError::Backwards { first, last });
        }
        Ok(SlotRange { first, last })
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// A member as `--to` names it: its id, or a server's address (resolved
/// against the map once it is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberRef {
    Id(MemberId),
    /// `HOST:PORT`.
    Addr(String),
}

/// A `--to` value that is neither a member id nor `HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is neither a member id (0, 1, …) nor a server's HOST:PORT")]
pub struct MemberRefError(String);

impl FromStr for MemberRef {
    type Err = MemberRefError;

    fn from_str(s: &str) -> Result<MemberRef, MemberRefError> {
        let t = s.trim();
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            return t
                .parse()
                .map(MemberRef::Id)
                .map_err(|_| MemberRefError(s.to_string()));
        }
        match t.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(MemberRef::Addr(t.to_string()))
            }
            _ => Err(MemberRefError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn slot_ranges_parse_inclusive_and_single() {
        assert_eq!(
            "0-511".parse::<SlotRange>(),
            Ok(SlotRange {
                first: 0,
                last: 511
            })
        );
        let r: SlotRange = "17".parse().unwrap();
        assert_eq!((r.first, r.last, r.end()), (17, 17, 18));
        assert_eq!(r.to_string(), "17");
        let r: SlotRange = " 3 - 4 ".parse().unwrap();
        assert_eq!((r.first, r.last, r.to_string()), (3, 4, "3-4".to_string()));
        let r: SlotRange = "0-4294967295".parse().unwrap();
        assert_eq!(r.end(), 1 << 32);
    }

    #[test]
    fn slot_ranges_that_are_backwards_or_garbage_are_refused() {
        assert_eq!(
            "5-3".parse::<SlotRange>(),
            Err(SlotRangeError::Backwards { first: 5, last: 3 })
        );
        assert_eq!(
            "5-3".parse::<SlotRange>().unwrap_err().to_string(),
            "slot range 5-3 is backwards: its first slot is after its last"
        );
        for junk in [
            "",
            "-",
            "a",
            "1-",
            "-1",
            "1-2-3",
            "1..2",
            "0x10",
            "+1",
            "-1-2",
            "1 2",
            "4294967296",
        ] {
            assert!(
                matches!(junk.parse::<SlotRange>(), Err(SlotRangeError::Malformed(_))),
                "{junk:?}"
            );
        }
        assert!("abc"
            .parse::<SlotRange>()
            .unwrap_err()
            .to_string()
            .contains("expected FIRST-LAST"));
    }

    #[test]
    fn members_are_ids_or_addresses() {
        assert_eq!("2".parse(), Ok(MemberRef::Id(MemberId(2))));
        assert_eq!(
            "10.0.0.9:7000".parse(),
            Ok(MemberRef::Addr("10.0.0.9:7000".into()))
        );
        assert_eq!(
            "[::1]:7000".parse(),
            Ok(MemberRef::Addr("[::1]:7000".into()))
        );
        assert_eq!(
            "db-1.example:7000".parse(),
            Ok(MemberRef::Addr("db-1.example:7000".into()))
        );
        for junk in [
            "",
            "x",
            "70000",
            "10.0.0.9",
            "10.0.0.9:",
            ":7000",
            "h:99999",
            "-1",
        ] {
            assert!(junk.parse::<MemberRef>().is_err(), "{junk:?}");
        }
    }

    #[test]
    fn seconds_are_positive() {
        assert_eq!(parse_seconds("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "NaN", "inf", "x", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn replicas_are_one_to_three_and_waiting_is_the_default() {
        let parse = |args: &[&str]| {
            let mut v = vec!["kvs-admin", "set", "replicas"];
            v.extend_from_slice(args);
            match Args::try_parse_from(v).map(|a| a.cmd) {
                Ok(Command::Set(SetArgs {
                    what: Setting::Replicas(r),
                })) => Ok(r),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.to_string()),
            }
        };
        let r = parse(&["2"]).unwrap();
        assert_eq!((r.replicas, r.no_wait), (2, false));
        assert_eq!(r.max_wait, Duration::from_secs(600));
        let r = parse(&["3", "--no-wait", "--max-wait", "30"]).unwrap();
        assert_eq!((r.replicas, r.no_wait), (3, true));
        assert_eq!(r.max_wait, Duration::from_secs(30));
        // The last of --wait and --no-wait counts.
        assert!(!parse(&["1", "--no-wait", "--wait"]).unwrap().no_wait);
        assert!(parse(&["1", "--wait", "--no-wait"]).unwrap().no_wait);
        for bad in ["0", "4", "-1", "two", "256"] {
            let e = parse(&[bad]).unwrap_err();
            assert!(
                e.contains("a cluster keeps 1 to 3 copies of each slot"),
                "{bad}: {e}"
            );
        }
        assert!(parse(&[]).is_err());
    }

    #[test]
    fn drain_takes_a_member_and_waits_by_default() {
        let parse = |args: &[&str]| {
            let mut v = vec!["kvs-admin", "drain"];
            v.extend_from_slice(args);
            match Args::try_parse_from(v).map(|a| a.cmd) {
                Ok(Command::Drain(d)) => Ok(d),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.to_string()),
            }
        };
        let d = parse(&["1"]).unwrap();
        assert_eq!((d.member, d.no_wait), (MemberRef::Id(MemberId(1)), false));
        assert_eq!(d.max_wait, Duration::from_secs(60));
        let d = parse(&["10.0.0.2:7000", "--no-wait", "--max-wait", "5"]).unwrap();
        assert_eq!(d.member, MemberRef::Addr("10.0.0.2:7000".into()));
        assert!(d.no_wait);
        assert_eq!(d.max_wait, Duration::from_secs(5));
        assert!(!parse(&["1", "--no-wait", "--wait"]).unwrap().no_wait);
        assert!(parse(&[]).is_err());
        assert!(parse(&["nobody"])
            .unwrap_err()
            .contains("is neither a member id"));
    }

    #[test]
    fn snapshot_takes_a_member_or_none_and_waits_by_default() {
        let parse = |args: &[&str]| {
            let mut v = vec!["kvs-admin", "snapshot"];
            v.extend_from_slice(args);
            match Args::try_parse_from(v).map(|a| a.cmd) {
                Ok(Command::Snapshot(s)) => Ok(s),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.to_string()),
            }
        };
        let s = parse(&[]).unwrap();
        assert_eq!((s.member, s.no_wait), (None, false));
        assert_eq!(s.max_wait, Duration::from_secs(600));
        let s = parse(&["1"]).unwrap();
        assert_eq!(s.member, Some(MemberRef::Id(MemberId(1))));
        let s = parse(&["10.0.0.2:7000", "--no-wait", "--max-wait", "5"]).unwrap();
        assert_eq!(s.member, Some(MemberRef::Addr("10.0.0.2:7000".into())));
        assert!(s.no_wait);
        assert_eq!(s.max_wait, Duration::from_secs(5));
        assert!(!parse(&["--no-wait", "--wait"]).unwrap().no_wait);
        assert!(parse(&["nobody"])
            .unwrap_err()
            .contains("is neither a member id"));
        assert!(parse(&["1", "2"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent_and_parses() {
        Args::command().debug_assert();
        let a =
            Args::try_parse_from(["kvs-admin", "migrate", "--slots", "0-9", "--to", "1"]).unwrap();
        match a.cmd {
            Command::Migrate(m) => {
                assert_eq!(m.slots, SlotRange { first: 0, last: 9 });
                assert_eq!(m.to, MemberRef::Id(MemberId(1)));
                assert!(!m.wait.no_wait);
            }
            other => panic!("{other:?}"),
        }
        // Global options may follow the command.
        let a = Args::try_parse_from(["kvs-admin", "status", "--server", "h:1", "--json"]).unwrap();
        assert_eq!(a.server, "h:1");
        assert!(
            Args::try_parse_from(["kvs-admin", "migrate", "--slots", "5-3", "--to", "1"]).is_err()
        );
    }
}
