#!/usr/bin/env python3
"""Redis instructions per job of claim + complete_many, counted by callgrind: a figure this
machine's noise does not move (its Redis CPU µs per job swings about 2x within minutes).

    tools/redis_instructions.py [--jobs 5000] [--batch 100] [--groups 0] [--throttled 0] [--keep K]
                                [--redis redis-server] [--lib FILE] [--claim FILE]
                                [--complete-many FILE] [--beat-schedules N [--promote FILE]]

Starts `redis-server` under `valgrind --tool=callgrind` on a free loopback port (bounded to 30
minutes, stopped by its PID), loads the scripts the way the store does (`_lib.lua` first), enqueues
--jobs flat jobs (--groups G: the jobs spread over G groups of the default limit 1, as the store
bench's grouped workload; --throttled T: T groups under a rate limit of one start an hour, each
holding a job once its first has run, all held back in `throttled` before the count begins, beside the flat jobs: what a
claim pays for groups its limits hold back), then counts the instructions Redis runs for the claims in batches of --batch, and
separately for the complete_many calls that settle them ((id, token, output) per job, the one
layout the store sends). --beat-schedules N instead counts a consumer's idle beat (reap, promote
and a claim on an empty queue) before and after N schedules whose slots are all hours ahead are
added (upsert_schedule, one call each), and the commands one due slot costs inside promote (INFO
commandstats: every command a script runs is counted). --lib / --claim / --complete-many run other versions of the scripts with
the same replies and arguments (an A/B: `git show REV:PATH > FILE`). Needs
valgrind (Debian: apt-get install valgrind); Redis's debug symbols are not needed for the totals.
"""

import argparse
import glob
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPTS = os.path.join(ROOT, "crates", "echomq", "scripts")


class Conn:
    """A bare RESP2 client (no dependency beyond the standard library)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def total(outdir):
    """Instructions in the newest callgrind dump."""
    newest = max(glob.glob(os.path.join(outdir, "cg.out.*")), key=lambda f: int(f.rsplit(".", 1)[1]))
    for line in open(newest, encoding="utf-8", errors="replace"):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {newest}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--redis", default="redis-server")
    ap.add_argument("--lib", default=os.path.join(SCRIPTS, "_lib.lua"))
    ap.add_argument("--claim", default=os.path.join(SCRIPTS, "claim.lua"))
    ap.add_argument("--complete-many", default=os.path.join(SCRIPTS, "complete_many.lua"))
    ap.add_argument("--promote", default=os.path.join(SCRIPTS, "promote.lua"))
    ap.add_argument("--groups", type=int, default=0, help="spread the jobs over this many groups")
    ap.add_argument("--throttled", type=int, default=0, help="rate-limited groups held back beside the jobs")
    ap.add_argument("--keep", type=int, default=None,
                    help="the queue's retention keep (0: rows deleted as they finish, as `emq bench process`)")
    ap.add_argument("--beat-schedules", type=int, default=0, help="count an idle beat with this many schedules")
    a = ap.parse_args()
    if a.jobs % 1000 or a.jobs % a.batch or not 1 < a.batch <= 1000:
        sys.exit("--jobs must be a multiple of 1000 and of --batch (2..1000)")
    if a.groups and (a.jobs % a.groups or a.jobs // a.groups > 1000):
        sys.exit("--jobs must be a multiple of --groups, at most 1000 jobs per group")
    if a.groups and a.throttled:
        sys.exit("--throttled goes with flat jobs only")
    lib = open(a.lib).read()
    src = {
        "enqueue": lib + "\n" + open(os.path.join(SCRIPTS, "enqueue.lua")).read(),
        "genqueue": lib + "\n" + open(os.path.join(SCRIPTS, "genqueue.lua")).read(),
        "claim": lib + "\n" + open(a.claim).read(),
        "complete_many": lib + "\n" + open(a.complete_many).read(),
        "reap": lib + "\n" + open(os.path.join(SCRIPTS, "reap.lua")).read(),
        "promote": lib + "\n" + open(a.promote).read(),
        "upsert_schedule": lib + "\n" + open(os.path.join(SCRIPTS, "upsert_schedule.lua")).read(),
    }
    outdir = tempfile.mkdtemp(prefix="emq-callgrind-")
    port = free_port()
    server = subprocess.Popen(
        ["timeout", "1800", "valgrind", "--tool=callgrind", f"--callgrind-out-file={outdir}/cg.out",
         a.redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", outdir],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(outdir, "valgrind.log"), "w"))
    try:
        conn = None
        for _ in range(600):
            try:
                conn = Conn(port)
                conn.cmd("PING")
                break
            except OSError:
                time.sleep(0.1)
        if conn is None:
            sys.exit(f"redis under valgrind did not answer (see {outdir}/valgrind.log)")
        sha = {name: conn.cmd("SCRIPT", "LOAD", body).decode() for name, body in src.items()}
        base = "emq:{bench}:"
        if a.keep is not None:
            conn.cmd("HSET", base + "retention", "keep", a.keep)
        keys = lambda *s: [base + x for x in s]

        def claim_call(n):
            r = conn.cmd("EVALSHA", sha["claim"], 9,
                         *keys("ring", "groups", "pending", "active", "paused", "obliterating",
                               "throttled", "tats", "tat"),
                         base, n, 60000, 3, 0, 1 << 24)
            # (id, payload, token, attempt, group, kind, max_attempts, retry, wait) per job, then the
            # wait and whether the queue's limit held it
            return [(r[i], r[i + 2]) for i in range(0, len(r) - 2, 9)]

        def claim_batch():
            return claim_call(a.batch)

        def settle(batch):
            args = [x for i, t in batch for x in (i, t, b"")]
            r = conn.cmd("EVALSHA", sha["complete_many"], 1, *keys("active"), base, len(batch), 0, *args)
            assert all(x == 1 for x in r), r[:5]

        def control(flag):
            subprocess.run(["callgrind_control", flag, str(server_pid(server))], capture_output=True)

        def counted(f, *args):
            control("-z")
            out = f(*args)
            control("-d")
            time.sleep(0.5)
            return out, total(outdir)

        if a.beat_schedules:
            beat_mode(a, conn, sha, base, keys, claim_call, counted)
            return

        per = a.jobs // a.groups if a.groups else 0

        def genqueue(g, payloads):
            conn.cmd("EVALSHA", sha["genqueue"], 9,
                     *keys("id", "lane:" + g, "scheduled", "ring", "groups", "wake", "obliterating",
                           "registered", "order"),
                     base, g, len(payloads), *payloads)

        for g in range(a.groups):
            genqueue("g%d" % g, [b'{"n":%d}' % (g * per + i) for i in range(per)])
        if a.throttled:
            # one start an hour per group (the groups' default), two jobs each: a claim takes each
            # group's first job and holds the group back with the other
            # (two running at once, so a group is held back as its first job is claimed)
            conn.cmd("HSET", base + "groups", "rate:~", "1/3600000/1", "l:~", 2)
            for t in range(a.throttled):
                genqueue("t%d" % t, [b"{}", b"{}"])
            held = 0
            while held < a.throttled:
                batch = claim_call(1000)
                assert batch, "a claim held no group back"
                held += len(batch)
                settle(batch)
            assert conn.cmd("ZCARD", base + "throttled") == a.throttled
        for c in range(0 if a.groups else a.jobs // 1000):
            conn.cmd("EVALSHA", sha["enqueue"], 9,
                     *keys("id", "pending", "scheduled", "ring", "groups", "wake", "obliterating",
                           "registered", "order"),
                     base, 1000, *[b'{"n":%d}' % (c * 1000 + i) for i in range(1000)])

        claim = settled = 0
        if a.groups:
            # a group of limit 1 gives its next job only once its last one is settled: each claim
            # is settled before the next, every call counted on its own
            for _ in range(a.jobs // a.batch):
                batch, c = counted(claim_batch)
                _, d = counted(settle, batch)
                claim, settled = claim + c, settled + d
        else:
            claimed, claim = counted(lambda: [claim_batch() for _ in range(a.jobs // a.batch)])
            _, settled = counted(lambda: [settle(b) for b in claimed])
        n = a.jobs
        shape = f", {a.groups} groups" if a.groups else ""
        shape += f", {a.throttled} groups held back" if a.throttled else ""
        print(f"jobs {n}{shape}, batches of {a.batch}: instructions per job: claim {claim // n}, "
              f"complete_many {settled // n}, both {(claim + settled) // n}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def beat_mode(a, conn, sha, base, keys, claim_call, counted):
    """An idle beat's instructions without and with `a.beat_schedules` schedules, and the commands
    of one due slot."""
    beats = 1000

    def beat():
        conn.cmd("EVALSHA", sha["reap"], 2, *keys("active", "pending"), base, 1000, "")
        r = conn.cmd("EVALSHA", sha["promote"], 4, *keys("scheduled", "pending", "order", "schedule_due"),
                     base, 100, 5000)
        assert r[0] == 0 and r[2:3] in ([], [0]), r
        claim_call(100)

    _, bare = counted(lambda: [beat() for _ in range(beats)])
    now = int(time.time() * 1000)
    hour = 3600000
    # an hourly interval's next slots: the first more than an hour ahead
    slots = [(now // hour + 2 + k) * hour for k in range(32)]
    definition = ["timing", "every %d" % hour, "tz", "UTC", "data", "{}", "group", "", "priority", "",
                  "max_attempts", "", "retry", "", "kind", "", "misfire", "once", "overlap", "allow",
                  "grace", ""]
    for i in range(a.beat_schedules):
        name = "s%d" % i
        conn.cmd("EVALSHA", sha["upsert_schedule"], 3,
                 *keys("schedule:" + name, "schedules", "schedule_due"),
                 base, name, len(definition) // 2, *definition, *slots)
    _, scheduled = counted(lambda: [beat() for _ in range(beats)])
    if a.promote != os.path.join(SCRIPTS, "promote.lua"):
        print(f"idle beat with {a.promote}, no schedules: {bare // beats} instructions")
        return
    print(f"idle beat (reap + promote + claim), instructions: no schedules {bare // beats}, "
          f"{a.beat_schedules} schedules nothing due {scheduled // beats} "
          f"({(scheduled - bare) * 100 / bare:+.1f} %)")
    # the commands of due slots: each of `n` schedules given one slot a few seconds ago (within the
    # grace: on time)
    for n in (1, 10):
        for i in range(n):
            name = "s%d" % i
            due = now - 1000 * n + i
            conn.cmd("HSET", base + "schedule:" + name, "slots", ",".join(str(x) for x in [due] + slots))
            conn.cmd("ZADD", base + "schedule_due", due, name)
        conn.cmd("CONFIG", "RESETSTAT")
        r = conn.cmd("EVALSHA", sha["promote"], 4, *keys("scheduled", "pending", "order", "schedule_due"),
                     base, 100, 60000)
        assert r[2] == n, r
        stats = conn.cmd("INFO", "commandstats").decode()
        calls = 0
        for line in stats.splitlines():
            if line.startswith("cmdstat_") and not line.startswith(("cmdstat_evalsha", "cmdstat_config")):
                calls += int(line.split("calls=")[1].split(",")[0])
        print(f"promote firing {n} due slot(s) of {n} schedule(s): {calls} commands inside the script "
              f"({calls / n:.1f} per slot)")


def server_pid(proc):
    """valgrind's PID: `timeout` runs it as its child."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else proc.pid


if __name__ == "__main__":
    main()
