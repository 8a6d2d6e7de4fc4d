#!/usr/bin/env python3
"""kvpool-events as an operator runs it: an empty --worker-id (what the unit passes when
KVPOOL_WORKER_ID is unset) is refused, not taken as worker 0; and with --metrics-listen it
serves its own figures, which a real worker's traffic through a real nats-server moves
(published events, resyncs, lag back to 0), in a format promtool accepts.
Skips (77) without nats-server.

Usage: events_metrics_test.py KVPOOLD KVPOOLCTL KVPOOL_EVENTS DEMO_WORKER
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opslib import Daemon, fail, run_checks, wait_until  # noqa: E402

KVPOOLD, KVPOOLCTL, EVENTS, WORKER = sys.argv[1:5]
state = {}


def empty_worker_id():
    r = subprocess.run([EVENTS, "--worker-id", ""], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    if r.returncode == 0 or "worker-id" not in r.stderr or "empty" not in r.stderr:
        fail(f"--worker-id '' gave exit {r.returncode}: {r.stderr}")
    print(f"   refused: {r.stderr.strip().splitlines()[0]}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape():
    with urllib.request.urlopen(f"http://{state['addr']}/metrics", timeout=10) as r:
        if not r.headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"):
            fail(f"Content-Type {r.headers.get('Content-Type')}")
        return r.read().decode()


def value(text, name):
    m = re.search(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(2)) if m else None


def metrics_move():
    nats = shutil.which("nats-server")
    if not nats:
        print("SKIP: nats-server not installed")
        sys.exit(77)
    port = free_port()
    state["nats"] = subprocess.Popen([nats, "-a", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = Daemon(KVPOOLD, KVPOOLCTL)
    state["daemon"] = d
    log = open(os.path.join(d.dir, "events.log"), "w+")
    state["events"] = subprocess.Popen(
        [EVENTS, "--worker-id", "7", *d.view_args(), "--nats-url", f"nats://127.0.0.1:{port}",
         "--metrics-listen", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)

    def text():
        log.flush()
        with open(log.name) as f:
            return f.read()

    def bound():
        if state["events"].poll() is not None:
            fail(f"kvpool-events exited {state['events'].returncode}: {text()}")
        m = re.search(r"metrics on http://(127\.0\.0\.1:\d+)/metrics", text())
        return m and m.group(1)
    state["addr"] = wait_until(bound, 20, "kvpool-events to log its metrics address", text)
    wait_until(lambda: value(scrape(), "kvpool_events_nats_connected") == 1 and
               value(scrape(), "kvpool_events_resyncs_total") >= 1, 30,
               "the forwarder connected and resynced", lambda: scrape() + text())
    w = subprocess.run([WORKER, *d.view_args(), "--seconds", "1", "--seed", "3"],
                       capture_output=True, text=True, timeout=60)
    if w.returncode != 0:
        fail(f"worker failed: {w.stderr}")
    wait_until(lambda: (value(scrape(), "kvpool_events_published_total") or 0) > 0 and
               value(scrape(), "kvpool_events_lag_events") == 0, 30,
               "published events and lag 0", scrape)
    page = scrape()
    for want in ('kvpool_events_info{kvpool_instance="' + d.instance + '",worker_id="7"} 1',
                 "kvpool_events_daemon_attached 1", "kvpool_events_token_ids_lost_total 0",
                 "kvpool_events_keys_lost_total 0",
                 # No disk tier in this daemon: nothing on disk, nothing lost of it.
                 "kvpool_events_disk_blocks 0", "kvpool_events_disk_view_partial 0",
                 # The dashboard's job/instance pickers (label_values(kvpool_up, ...)).
                 'kvpool_up{kvpool_instance="' + d.instance + '"} 1',
                 "kvpool_build_info{"):
        if want not in page:
            fail(f"page lacks {want!r}:\n{page}")
    # Every forwarder metric the Grafana dashboard queries is on the page.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "contrib",
                           "grafana", "kvpool-dashboard.json")) as f:
        wanted = set(re.findall(r"kvpool_events_[a-z_]+", f.read()))
    served = set(re.findall(r"^# TYPE (\S+) ", page, re.M))
    wanted.add("kvpool_up")  # every panel filters on $job, listed from kvpool_up
    if not wanted or wanted - served:
        fail(f"dashboard queries forwarder metrics not served: {wanted - served}")
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            fail(f"promtool check metrics: {r.stdout}{r.stderr}")
    print(f"   published {value(page, 'kvpool_events_published_total'):.0f} events, "
          f"{value(page, 'kvpool_events_messages_total'):.0f} messages")


try:
    run_checks([("--worker-id '' is an error", empty_worker_id),
                ("--metrics-listen: figures move with real traffic", metrics_move)])
finally:
    for k in ("events", "nats"):
        if k in state and state[k].poll() is None:
            state[k].terminate()
            state[k].wait(timeout=30)
    if "daemon" in state:
        state["daemon"].cleanup()
