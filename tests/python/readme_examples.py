"""The docs' "Using kvpool from C / from Rust / from Python with torch" examples (docs/c.md,
docs/rust.md, docs/python.md): each page shows its example file whole, and each example (and
examples/worker) runs against a real kvpoold, on a pool of each hash scheme, and does
what the README says (first run registers 4 blocks, a second run matches all 4).

    readme_examples.py <source dir> <build dir> <kvpoold> <python> [cargo]
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

src, build, kvpoold, python = sys.argv[1:5]
cargo = sys.argv[5] if len(sys.argv) > 5 else ""
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"readme_examples: FAILED: {what}")


for path, page in (("examples/c/kvpool_example.c", "docs/c.md"),
                   ("libclient/rust/examples/worker.rs", "docs/rust.md"),
                   ("examples/python/torch_worker.py", "docs/python.md")):
    shown = open(os.path.join(src, page)).read()
    check(open(os.path.join(src, path)).read() in shown, f"{page} shows {path} whole")

def run(argv, what, **kw):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
    check(out.returncode == 0, f"{what}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def start_kvpoold(tmp, instance, scheme):
    """kvpoold with one bf16 pool g2 hashing with `scheme`; returns it once READY=1."""
    cfg = {"instance": instance, "runtime_dir": tmp, "poll_us": 20, "log_level": "warn",
           "pools": [{"name": "g2", "num_blocks": 64, "hash_scheme": scheme,
                      "layout": {"num_layers": 2, "outer_dim": 2, "page_size": 16,
                                 "inner_dim": 32, "dtype": "bf16", "alignment": 256}}]}
    with open(os.path.join(tmp, "kvpoold.json"), "w") as f:
        json.dump(cfg, f)
    notify = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    env = dict(os.environ, NOTIFY_SOCKET=notify)
    proc = subprocess.Popen([kvpoold, "--config", os.path.join(tmp, "kvpoold.json")], env=env)
    deadline = time.monotonic() + 10
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            proc.kill()
            raise SystemExit("readme_examples: kvpoold did not send READY=1")
        sock.settimeout(min(left, 0.1))
        try:
            if "READY=1" in sock.recv(4096).decode().split("\n"):
                break
        except socket.timeout:
            continue
    sock.close()
    return proc


build_tmp = tempfile.mkdtemp(prefix="kvpool-readme-build-")
# C, compiled as docs/c.md says (strict C11).
c_exe = os.path.join(build_tmp, "example")
c_lib = os.path.join(build, "libclient", "src", "c_api")
run(["cc", "-std=c11", "-Wall", "-Werror", "-pedantic",
     os.path.join(src, "examples/c/kvpool_example.c"), "-I", os.path.join(src, "libclient/include"),
     "-L", c_lib, "-lkvpool_c", f"-Wl,-rpath,{c_lib}", "-o", c_exe], "cc example")
# examples/worker (C++), against this build's libkvpool.
worker_exe = os.path.join(build_tmp, "kvpool_worker")
cpp_lib = os.path.join(build, "libclient")
run(["c++", "-std=c++20", os.path.join(src, "examples/worker/main.cpp"),
     "-I", os.path.join(src, "libclient/include"), "-I", os.path.join(src, "shared/include"),
     "-L", cpp_lib, "-lkvpool", f"-Wl,-rpath,{cpp_lib}", "-o", worker_exe], "c++ examples/worker")
try:
    subprocess.run([python, "-c", "import torch"], check=True, capture_output=True)
    have_torch = True
except subprocess.CalledProcessError:
    have_torch = False
    print("readme_examples: python example SKIPPED (no torch for this python)")

# Every example against a pool of each hash scheme (issue 27: on dynamo-router they matched
# 1 block of 4, and examples/worker exited 1).
for scheme in ("dynamo-0.2", "dynamo-router"):
    tmp = tempfile.mkdtemp(prefix="kvpool-readme-")
    instance = f"readme{os.getpid()}{scheme.replace('.', '').replace('-', '')}"
    proc = start_kvpoold(tmp, instance, scheme)
    try:
        out = run([c_exe, instance, tmp], f"C example (first, {scheme})")
        check("matched 0 of 4 blocks, registered 4" in out, f"C example registers 4 ({scheme}): {out!r}")
        out = run([c_exe, instance, tmp], f"C example (second, {scheme})")
        check("matched 4 of 4 blocks, registered 0" in out,
              f"C example then matches 4 ({scheme}): {out!r}")

        # Python with torch: the blocks the C example registered are matched, typed bf16.
        if have_torch:
            penv = dict(os.environ, PYTHONPATH=os.path.join(build, "libclient", "python"))
            out = run([python, os.path.join(src, "examples/python/torch_worker.py"), instance, tmp],
                      f"Python example ({scheme})", env=penv)
            check("matched 4 of 4 blocks (torch.bfloat16), registered 0" in out,
                  f"Python example matches 4 typed bf16 ({scheme}): {out!r}")

        # Rust, with cargo run as docs/rust.md says.
        if cargo:
            renv = dict(os.environ, KVPOOL_C_LIB_DIR=c_lib,
                        CARGO_TARGET_DIR=os.path.join(build, "rust-target"))
            cargo_dir = os.path.dirname(cargo)
            for tool in ("RUSTC", "RUSTDOC"):
                t = os.path.join(cargo_dir, tool.lower())
                if os.path.exists(t):
                    renv[tool] = t
            out = run([cargo, "run", "--offline", "--locked", "--quiet", "--example", "worker", "--",
                       instance, tmp], f"Rust example ({scheme})",
                      cwd=os.path.join(src, "libclient/rust"), env=renv)
            check("matched 4 of 4 blocks, registered 0" in out,
                  f"Rust example matches 4 ({scheme}): {out!r}")
        else:
            print("readme_examples: Rust example SKIPPED (no cargo)")

        # examples/worker: its own prompt, matched whole after registering it.
        out = run([worker_exe, instance, tmp], f"examples/worker ({scheme})")
        check("0 block(s) matched before, 3 registered, 3 matched after" in out,
              f"examples/worker ({scheme}): {out!r}")
    finally:
        proc.kill()
        proc.wait()
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"kvpool.{instance}."):
                os.unlink(os.path.join("/dev/shm", name))
        shutil.rmtree(tmp, ignore_errors=True)
shutil.rmtree(build_tmp, ignore_errors=True)

if failures:
    sys.exit(1)
print("readme_examples: OK")
