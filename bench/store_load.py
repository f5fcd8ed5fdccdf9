#!/usr/bin/env python3
"""Acknowledged leases per second and grant latency: the SQLite store against PostgreSQL, in one run
(bench/RESULTS.md, store_load; issue 17).

The real daemon on the test GPU (24 GiB), once with the default SQLite store and once with a
private PostgreSQL (Debian's postgresql: initdb'd in a temporary folder, run as nobody when root;
fsync on, as a real server would be). Each run: 2,000 leases of 64 MiB asked by 20 concurrent
clients (POST /v1/leases, answered 201 "granted" only once the grant is written), each released
(DELETE). Figures: acknowledged grants per second and the POST's p50/p99, and PG/SQLite ratios.

Then the backlog: 10,000 queued leases of 1 MiB while every GPU is full, then room on every GPU at
once: how fast they are granted. SQLite: one host, its own queue (queued through the API). The
shared queue: three hosts on one PostgreSQL (the rows written straight into the shared queue, as
another host would have queued them), each claiming from it (SELECT ... FOR UPDATE SKIP LOCKED).
Figures: grants (claims) per second from the room to the last grant, and each lease's wait from
the room to its grant (p50/p99), read from the stores' own rows.

    bench/store_load.py [BUILD_DIR]
"""
import glob, json, os, pwd, shutil, socket, subprocess, sys, tempfile, threading, time, http.client

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
GiB = 1 << 30
LEASES, CLIENTS = 2000, 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(port, method, path, body=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def start_postgres(tmp):
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not bins:
        sys.exit("no /usr/lib/postgresql/*/bin: install postgresql (make deps)")
    b = bins[-1]
    data, sock = os.path.join(tmp, "pgdata"), tempfile.mkdtemp(prefix="vpg-")
    root = os.geteuid() == 0
    pre = []
    os.makedirs(data)
    if root:
        nobody = pwd.getpwnam("nobody")
        for p in (tmp, data, sock):
            os.chown(p, nobody.pw_uid, nobody.pw_gid)
        pre = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    env = dict(os.environ, HOME="/tmp", LC_ALL="C")
    subprocess.run(pre + [f"{b}/initdb", "-D", data, "-U", "vramd", "--auth=trust", "--no-sync"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    port = free_port()
    pg = subprocess.Popen(pre + [f"{b}/postgres", "-D", data, "-k", sock, "-h", "127.0.0.1", "-p", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(300):
        if subprocess.run([f"{b}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode == 0:
            return pg, port, sock
        time.sleep(0.1)
    sys.exit("postgres did not start")


def run(store_toml):
    tmp = tempfile.mkdtemp(prefix="vramd-store-load-")
    state = os.path.join(tmp, "gpu.json")
    json.dump({"driver_version": "550.54.14", "gpus": [{"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0",
               "total": 24 * GiB, "used": 400 << 20, "utilization": 0, "processes": []}]}, open(state, "w"))
    env = dict(os.environ, VRAMD_NVML_LIBRARY=os.path.abspath(f"{BUILD}/libnvidia-ml-fake.so"), FAKE_NVML_STATE=state)
    dport = free_port()
    with open(os.path.join(tmp, "vramd.toml"), "w") as f:
        f.write(f'[daemon]\nlisten = "127.0.0.1:{dport}"\nstate_dir = "{tmp}"\nhost = "gpu1"\n{store_toml}\n'
                f'[gpu]\nbackend = "nvml"\n')
    daemon = subprocess.Popen([f"{BUILD}/vramd", "serve", "--config", os.path.join(tmp, "vramd.toml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        for _ in range(100):
            try:
                s, st = call(dport, "GET", "/v1/status")
                if st and st.get("sampled_at"):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        lat, errors, lock = [], [], threading.Lock()

        def client(n):
            for i in range(n):
                t0 = time.monotonic()
                s, l = call(dport, "POST", "/v1/leases?wait=30s", {"vram": "64MiB", "gpu": 0, "label": "bench"})
                ms = (time.monotonic() - t0) * 1000
                if s != 201 or l["state"] != "granted":
                    with lock:
                        errors.append(f"{s} {l}")
                    continue
                call(dport, "DELETE", f"/v1/leases/{l['id']}")
                with lock:
                    lat.append(ms)

        threads = [threading.Thread(target=client, args=(LEASES // CLIENTS,)) for _ in range(CLIENTS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        lat.sort()
        return {"per_s": len(lat) / took, "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)],
                "errors": len(errors), "n": len(lat), "took": took}
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)


BACKLOG = 10000


def gpu_state(path, used):
    json.dump({"driver_version": "550.54.14", "gpus": [{"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0",
               "total": 24 * GiB, "used": used, "utilization": 0, "processes": []}]}, open(path + ".tmp", "w"))
    os.replace(path + ".tmp", path)


def start_daemon(tmp, name, store_toml):
    state = os.path.join(tmp, "gpu.json")
    gpu_state(state, 24 * GiB)  # full: nothing is granted until the room comes
    env = dict(os.environ, VRAMD_NVML_LIBRARY=os.path.abspath(f"{BUILD}/libnvidia-ml-fake.so"), FAKE_NVML_STATE=state)
    dport = free_port()
    with open(os.path.join(tmp, "vramd.toml"), "w") as f:
        f.write(f'[daemon]\nlisten = "127.0.0.1:{dport}"\nstate_dir = "{tmp}"\nhost = "{name}"\n'
                f'lease_heartbeat = "1h"\n{store_toml}\n[gpu]\nbackend = "nvml"\n')
    d = subprocess.Popen([f"{BUILD}/vramd", "serve", "--config", os.path.join(tmp, "vramd.toml")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(100):
        try:
            s, st = call(dport, "GET", "/v1/status")
            if st and st.get("sampled_at"):
                break
        except OSError:
            pass
        time.sleep(0.1)
    return d, dport, state


def drain(count_granted, granted_ms, states):
    """Room on every GPU at once; the time until the last grant, and each lease's wait."""
    t0 = time.time()
    for st in states:
        gpu_state(st, 400 << 20)
    while count_granted() < BACKLOG and time.time() - t0 < 600:
        time.sleep(0.05)
    waits = sorted(max(0.0, g - t0 * 1000) for g in granted_ms())
    last = waits[-1] / 1000 if waits else float("nan")
    return {"n": len(waits), "per_s": len(waits) / last, "p50": waits[len(waits) // 2],
            "p99": waits[int(len(waits) * 0.99)], "took": last}


def backlog_sqlite():
    import sqlite3
    tmp = tempfile.mkdtemp(prefix="vramd-backlog-")
    d, port, state = start_daemon(tmp, "gpu1", "")
    try:
        def queue(n):
            for _ in range(n):
                call(port, "POST", "/v1/leases", {"vram": "1MiB", "label": "backlog"})
        threads = [threading.Thread(target=queue, args=(BACKLOG // CLIENTS,)) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        db = sqlite3.connect(os.path.join(tmp, "vramd.db"), timeout=30)
        rows = lambda: [json.loads(r[0]) for r in db.execute("SELECT data FROM leases")]
        return drain(lambda: sum(1 for l in rows() if l["state"] == "granted"),
                     lambda: [l["granted_ms"] for l in rows() if l["granted_ms"]], [state])
    finally:
        d.terminate()
        d.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def backlog_cluster(port):
    psql = lambda sql: subprocess.run(["psql", "-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-p", str(port), "-U",
                                       "vramd", "-d", "backlog", "-c", sql], check=True, capture_output=True,
                                      text=True).stdout.strip()
    subprocess.run(["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "vramd", "-d", "postgres",
                    "-c", "CREATE DATABASE backlog"], check=True)
    tmps = [tempfile.mkdtemp(prefix=f"vramd-backlog-gpu{i}-") for i in (1, 2, 3)]
    daemons = [start_daemon(t, f"gpu{i + 1}", f'store = "postgresql://vramd@127.0.0.1:{port}/backlog"')
               for i, t in enumerate(tmps)]
    try:
        # The shared queue as a fourth host (slot 1023, not running) would have left it.
        now_ms = int(time.time() * 1000)
        psql("INSERT INTO leases (host, id, state, data, cluster, priority, qseq) SELECT 'gpu0', g * 1024 + 1023,"
             " 'queued', json_build_object('id', g * 1024 + 1023, 'seq', g, 'state', 'queued', 'gpu', NULL,"
             f" 'requested_ms', {now_ms}, 'granted_ms', NULL, 'ended_ms', NULL, 'end_reason', '',"
             " 'peak_vram', 0, 'exit_status', NULL, 'request', json_build_object('gpu', NULL, 'vram', 1048576,"
             " 'ram', NULL, 'holder', 'bench', 'pid', NULL, 'pid_start_ticks', 0, 'priority', 0, 'label',"
             " 'backlog', 'service', '', 'group', '', 'wait_timeout_ms', NULL, 'command', '', 'start', false,"
             " 'cluster', true, 'host', '', 'on_host_lost', 'requeue'))::text, true, 0, nextval('lease_qseq')"
             f" FROM generate_series(1, {BACKLOG}) g")
        return drain(lambda: int(psql("SELECT COUNT(*) FROM leases WHERE state = 'granted'")),
                     lambda: [int(x) for x in psql("SELECT (data::json->>'granted_ms') FROM leases"
                                                   " WHERE state = 'granted'").split()],
                     [st for _, _, st in daemons])
    finally:
        for d, _, _ in daemons:
            d.terminate()
            d.wait()
        for t in tmps:
            shutil.rmtree(t, ignore_errors=True)


def main():
    pgtmp = tempfile.mkdtemp(prefix="vramd-store-load-pg-")
    pg, port, sock = start_postgres(pgtmp)
    try:
        subprocess.run(["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "vramd", "-d", "postgres",
                        "-c", "CREATE DATABASE bench"], check=True)
        results = {"sqlite": run(""),
                   "postgresql": run(f'store = "postgresql://vramd@127.0.0.1:{port}/bench"')}
        backlog = {"sqlite, 1 host": backlog_sqlite(), "postgresql, 3 hosts": backlog_cluster(port)}
    finally:
        pg.terminate()
        pg.wait()
        shutil.rmtree(pgtmp, ignore_errors=True)
        shutil.rmtree(sock, ignore_errors=True)
    for k, r in results.items():
        print(f"{k:10s} {r['n']} grants acknowledged, {r['errors']} errors, {r['took']:.1f} s: "
              f"{r['per_s']:.0f}/s, POST p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms")
    s, p = results["sqlite"], results["postgresql"]
    print(f"postgresql/sqlite: grants/s {p['per_s'] / s['per_s']:.2f}, p50 {p['p50'] / s['p50']:.2f}, "
          f"p99 {p['p99'] / s['p99']:.2f}")
    for k, r in backlog.items():
        print(f"backlog {k:20s} {r['n']} of {BACKLOG} granted in {r['took']:.2f} s: {r['per_s']:.0f}/s, "
              f"wait p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms")
    s, c = backlog["sqlite, 1 host"], backlog["postgresql, 3 hosts"]
    print(f"backlog 3 hosts/sqlite: grants/s {c['per_s'] / s['per_s']:.2f}, wait p50 {c['p50'] / s['p50']:.2f}, "
          f"p99 {c['p99'] / s['p99']:.2f}")


if __name__ == "__main__":
    main()
