"""kvpool without NumPy, on any CPython >= 3.9, stdlib only (no pytest): the interpreter it
runs on may have nothing installed. NumPy is made unimportable first, so an accidental
`import numpy` anywhere in kvpool fails this run.

    KVPOOLD=build/daemon/kvpoold PYTHONPATH=<dir holding the kvpool package> python no_numpy_smoke.py

Starts its own kvpoold (NOTIFY_SOCKET for READY=1, bounded waits), and exercises: import,
hashing (Dynamo's vector), connect, the token API, writes through memoryview, register,
match from a second client with the same bytes, asyncio, and errors with their codes.
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.modules["numpy"] = None  # `import numpy` now raises ImportError

import kvpool  # noqa: E402


def check(cond, what):
    if not cond:
        raise SystemExit(f"no_numpy_smoke: FAILED: {what}")


def start_kvpoold(tmp):
    instance = f"nonp{os.getpid()}"
    cfg = {"instance": instance, "runtime_dir": tmp, "poll_us": 20, "log_level": "warn",
           "pools": [{"name": "g", "num_blocks": 8,
                      "layout": {"num_layers": 2, "outer_dim": 2, "page_size": 4,
                                 "inner_dim": 8, "dtype": "fp16", "alignment": 64}}]}
    path = os.path.join(tmp, "kvpoold.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    notify = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    env = dict(os.environ, NOTIFY_SOCKET=notify)
    env.pop("RUNTIME_DIRECTORY", None)
    proc = subprocess.Popen([os.environ["KVPOOLD"], "--config", path], env=env)
    deadline = time.monotonic() + 10
    while True:
        left = deadline - time.monotonic()
        check(left > 0 and proc.poll() is None, "kvpoold sent READY=1 within 10 s")
        sock.settimeout(min(left, 0.1))  # re-checks whether kvpoold exited
        try:
            if "READY=1" in sock.recv(4096).decode().split("\n"):
                break
        except socket.timeout:
            continue
    sock.close()
    return proc, instance


def main():
    check("numpy" not in sys.modules or sys.modules["numpy"] is None, "kvpool imported no NumPy")
    check(kvpool.hash_tokens([1, 2, 3, 4], 4, 1337)[1] == [14643705804678351452],
          "Dynamo's hash vector")
    tmp = tempfile.mkdtemp(prefix="kvpool-nonp-")
    proc, instance = start_kvpoold(tmp)
    try:
        client = kvpool.Client.connect(instance, runtime_dir=tmp, connect_timeout=10.0)
        pool = client.pool("g")
        check(pool.dtype == "fp16" and pool.layout["dtype_bytes"] == 2, "the pool's dtype")
        blocks = pool.allocate_blocks(2)
        parent = None
        for i, b in enumerate(blocks):
            b.init_sequence(0, parent)
            check(b.add_tokens([10 + 4 * i + k for k in range(6)]) == 4, "add_tokens fits 4")
            b.commit()
            parent = b.sequence_hash
            m = memoryview(b)
            check(m.shape == (2, 2, 4, 8) and m.format == "e" and not m.readonly,
                  f"a writable fp16 view shaped like the block, got {m.shape} {m.format}")
            m.cast("B")[:] = bytes([i + 1]) * m.nbytes
            m.release()
        hashes = [b.sequence_hash for b in blocks]
        reg = pool.register_blocks(blocks)
        other = kvpool.Client.connect(instance, runtime_dir=tmp, connect_timeout=10.0).pool("g")
        with other.match_sequence_hashes(hashes + [99]) as hit:
            check(hit.sequence_hashes == hashes, "the second client matches the chain")
            for i, blk in enumerate(hit):
                view = memoryview(blk)
                check(view.readonly, "a matched block is read-only")
                check(bytes(view.cast("B")) == bytes([i + 1]) * view.nbytes,
                      "the matched block holds the writer's bytes")
                view.release()
        reg.release()

        async def go():
            got = await other.match_sequence_hashes_async(hashes)
            check(got.sequence_hashes == hashes, "asyncio match")
            got.release()
            try:
                await other.allocate_blocks_async(100)
                check(False, "allocate of 100 from 8 fails")
            except kvpool.NotEnoughBlocks as e:
                check(e.code == kvpool.ErrorCode.NotEnoughBlocks, "the error's code")

        asyncio.run(go())
        try:
            client.pool("nosuch")
            check(False, "unknown pool refused")
        except kvpool.NotFound as e:
            check("nosuch" in str(e), "the message names the pool")
    finally:
        proc.kill()
        proc.wait()
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"kvpool.{instance}."):
                os.unlink(os.path.join("/dev/shm", name))
        shutil.rmtree(tmp, ignore_errors=True)
    v = sys.version_info
    print(f"no_numpy_smoke: OK (CPython {v.major}.{v.minor}.{v.micro}, {kvpool._kvpool.__file__})")


if __name__ == "__main__":
    main()
