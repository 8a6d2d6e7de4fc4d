"""Python workers as real processes against a real kvpoold."""

import signal

from conftest import wait_until


def test_two_workers_share_a_prefix(daemon, workers):
    prefix = list(range(100, 116))  # 4 blocks of page 4
    writer = workers(daemon, "write", *map(str, prefix))
    hashes = [int(h) for h in writer.expect("registered ").split(",")]
    assert len(hashes) == 4
    # The writer still holds its blocks (active); a second worker with a longer prompt over the
    # same prefix matches all four and reads, through NumPy, the bytes the first one wrote.
    reader = workers(daemon, "read", *map(str, prefix + [7, 7, 7, 7]))
    assert reader.expect("matched ") == "4"
    assert reader.wait() == 0
    assert daemon.pool_status()["active_blocks"] == 4
    writer.send("exit")
    assert writer.wait() == 0
    # Both gone: the shared blocks stay registered (inactive), still matchable.
    wait_until(lambda: daemon.status()["clients"] == 0, 10, "both workers detached",
               daemon.status)
    p = daemon.pool_status()
    assert (p["active_blocks"], p["inactive_blocks"], p["mutable_blocks"]) == (0, 4, 0)
    again = workers(daemon, "read", *map(str, prefix))
    assert again.expect("matched ") == "4"


def test_worker_killed_with_sigkill_is_reclaimed(daemon, workers):
    before = daemon.status()
    holder = workers(daemon, "hold")
    assert holder.expect("ready ") == "5 3"
    p = daemon.pool_status()
    assert (p["mutable_blocks"], p["active_blocks"]) == (5, 3)
    holder.proc.send_signal(signal.SIGKILL)
    holder.wait()

    def reclaimed():
        s = daemon.status()
        p = next(x for x in s["pools"] if x["name"] == "g")
        return (s["reclaimed_clients"] == before["reclaimed_clients"] + 1 and s["clients"] == 0
                and p["mutable_blocks"] == 0 and p["active_blocks"] == 0)

    wait_until(reclaimed, 10, "kvpoold to reclaim the killed worker", daemon.status)
    s = daemon.status()
    p = next(x for x in s["pools"] if x["name"] == "g")
    assert s["reclaimed_blocks"] - before["reclaimed_blocks"] >= 5
    # Its registered blocks outlive it as inactive (matchable) blocks; nothing is lost.
    assert p["free_blocks"] + p["inactive_blocks"] == p["total_blocks"]
    assert p["inactive_blocks"] == 3
