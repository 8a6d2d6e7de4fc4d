#!/usr/bin/env python3
"""kvpool-exporter as Prometheus sees it: a real kvpoold with traffic from real workers, the
exporter on a loopback port, scraped by an HTTP client (urllib), checked by Debian's
`promtool check metrics`, and scraped by a real `prometheus` server whose query API must
return the pool's figures. Skips (77) without prometheus/promtool.

Usage: exporter_test.py KVPOOLD KVPOOLCTL KVPOOL_EXPORTER DEMO_WORKER
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opslib import Daemon, fail, run_checks, wait_until  # noqa: E402

KVPOOLD, KVPOOLCTL, EXPORTER, WORKER = sys.argv[1:5]
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
if not PROMETHEUS or not PROMTOOL:
    print("SKIP: prometheus / promtool not installed (apt-get install prometheus)")
    sys.exit(77)

state = {}


def get(path, method="GET"):
    req = urllib.request.Request(f"http://{state['addr']}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def sample(text, name, labels=""):
    m = re.search(r"^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def start():
    d = Daemon(KVPOOLD, KVPOOLCTL)
    state["daemon"] = d
    # Real traffic: two workers sharing prompt prefixes for a second each.
    workers = [subprocess.Popen([WORKER, *d.view_args(), "--seconds", "1", "--seed", str(s)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for s in (1, 2)]
    for w in workers:
        if w.wait(timeout=60) != 0:
            fail(f"demo worker failed: {w.stderr.read().decode()}")
    state["log"] = open(os.path.join(d.dir, "exporter.log"), "w+")
    state["exporter"] = subprocess.Popen(
        [EXPORTER, *d.view_args(), "--listen", "127.0.0.1:0"],
        stdout=state["log"], stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def bound():
        if state["exporter"].poll() is not None:
            fail(f"kvpool-exporter exited {state['exporter'].returncode}: {log()}")
        m = re.search(r"on http://(127\.0\.0\.1:\d+)/metrics", log())
        return m and m.group(1)
    state["addr"] = wait_until(bound, 20, "kvpool-exporter to log its address", log)


def log():
    state["log"].flush()
    with open(state["log"].name) as f:
        return f.read()


def metrics_page():
    status, ctype, body = get("/metrics")
    if status != 200:
        fail(f"/metrics answered {status}: {body}")
    if not ctype.startswith("text/plain; version=0.0.4"):
        fail(f"/metrics Content-Type {ctype!r}, not the Prometheus text format")
    state["body"] = body
    d = state["daemon"]
    for want in (f'kvpool_up{{kvpool_instance="{d.instance}"}} 1',
                 'kvpool_pool_blocks{pool="g2"} 1024',
                 'kvpool_pool_bytes{pool="g2",storage="host"} ',
                 'kvpool_build_info{version="', 'kvpool_daemon_info{kvpool_instance="'):
        if want not in body:
            fail(f"/metrics lacks {want!r}:\n{body}")
    # Tokens are hashes x page_size (16 in the default config), and the workers matched.
    q = sample(body, "kvpool_match_queries_total", '{pool="g2"}')
    qt = sample(body, "kvpool_prefix_cache_queries_tokens_total", '{pool="g2"}')
    ht = sample(body, "kvpool_prefix_cache_hits_tokens_total", '{pool="g2"}')
    if not q or qt != 16 * q or ht is None or ht > qt or ht == 0:
        fail(f"token counters: queries {q} blocks, {qt} tokens, hits {ht} tokens")
    # Usage fractions: in use <= occupied <= 1, and after the workers ended nothing is in use.
    use = sample(body, "kvpool_pool_usage_ratio", '{pool="g2"}')
    occ = sample(body, "kvpool_pool_occupancy_ratio", '{pool="g2"}')
    if use != 0 or not (0 < occ <= 1):
        fail(f"usage {use}, occupancy {occ}")
    # The daemon's version is the exporter's (one build) and kvpoolctl status says it too.
    ver = subprocess.run([EXPORTER, "--version"], capture_output=True, text=True).stdout.split()[1]
    if f'version="{ver}' not in body.split("kvpool_daemon_info{", 1)[1].split("\n", 1)[0]:
        fail(f"kvpool_daemon_info lacks version {ver}")


DASHBOARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "contrib",
                         "grafana", "kvpool-dashboard.json")


def dashboard_names(prefix_filter):
    """Metric names the Grafana dashboard's queries use (histogram suffixes stripped)."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    names = set()
    for p in d["panels"]:
        for t in p["targets"]:
            names |= set(re.findall(r"kvpool_[a-z_]+", t["expr"]))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names if prefix_filter(n)}


def dashboard_queries_served_names():
    served = set(re.findall(r"^# TYPE (\S+) ", state["body"], re.M))
    missing = dashboard_names(lambda n: not n.startswith("kvpool_events_")) - served
    if missing:
        fail(f"the Grafana dashboard queries metrics the exporter does not serve: {missing}")


def promtool_check():
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=state["body"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        fail(f"promtool check metrics: exit {r.returncode}\n{r.stdout}{r.stderr}")


def other_paths():
    status, _, body = get("/nope")
    if status != 404 or "/metrics" not in body:
        fail(f"/nope answered {status}: {body}")
    status, _, _ = get("/metrics", method="POST")
    if status != 405:
        fail(f"POST /metrics answered {status}, not 405")
    status, _, _ = get("/metrics", method="HEAD")
    if status != 200:
        fail(f"HEAD /metrics answered {status}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_scrapes():
    tmp = tempfile.mkdtemp(prefix="kvpool-prom-")
    state["promdir"] = tmp
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: kvpool\n    static_configs:\n"
                f"      - targets: ['{state['addr']}']\n")
    port = free_port()
    plog = open(os.path.join(tmp, "prometheus.log"), "w")
    state["prom"] = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/data",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=plog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def prom_log():
        with open(plog.name) as f:
            return f.read()[-3000:]

    def query(q):
        if state["prom"].poll() is not None:
            fail(f"prometheus exited {state['prom'].returncode}: {prom_log()}")
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                res = json.load(r)["data"]["result"]
        except (urllib.error.URLError, ConnectionError):
            return None
        return res[0]["value"][1] if res else None

    wait_until(lambda: query('kvpool_pool_blocks{pool="g2",job="kvpool"}') == "1024", 90,
               "prometheus to scrape kvpool_pool_blocks 1024", prom_log)
    wait_until(lambda: query("up{job=\"kvpool\"}") == "1", 30, "prometheus target up", prom_log)
    if query('kvpool_up{job="kvpool"}') != "1":
        fail("prometheus stored kvpool_up != 1")


def daemon_down():
    state["daemon"].stop()
    status, _, body = get("/metrics")
    if status != 200 or f'kvpool_up{{kvpool_instance="{state["daemon"].instance}"}} 0' not in body:
        fail(f"with kvpoold stopped /metrics answered {status}:\n{body}")
    if "kvpool_pool_blocks" in body:
        fail("a stopped daemon's pool figures are still served")


def cleanup():
    for p in ("prom", "exporter"):
        if p in state and state[p].poll() is None:
            state[p].terminate()
            state[p].wait(timeout=30)
    if "exporter" in state and state["exporter"].returncode not in (0, None):
        fail(f"kvpool-exporter exited {state['exporter'].returncode} on SIGTERM: {log()}")
    if "daemon" in state:
        state["daemon"].cleanup()
    if "promdir" in state:
        shutil.rmtree(state["promdir"], ignore_errors=True)


try:
    run_checks([("kvpoold, two workers and kvpool-exporter on 127.0.0.1:0", start),
                ("GET /metrics: format, pool, token, usage and version figures", metrics_page),
                ("promtool check metrics accepts the page", promtool_check),
                ("every metric the Grafana dashboard queries is served",
                 dashboard_queries_served_names),
                ("404 elsewhere, 405 for POST, HEAD works", other_paths),
                ("a real prometheus scrapes it and answers queries", prometheus_scrapes),
                ("kvpoold stopped: kvpool_up 0, no stale figures", daemon_down)])
finally:
    try:
        cleanup()
    except Exception as e:  # noqa: BLE001
        print(f"FAIL: cleanup: {e}", file=sys.stderr)
        sys.exit(1)
