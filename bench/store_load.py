#!/usr/bin/env python3
"""Acknowledged leases per second and grant latency: the SQLite store against PostgreSQL, in one run
(bench/RESULTS.md, store_load; issue 17).

The real daemon on the test GPU (24 GiB), once with the default SQLite store and once with a
private PostgreSQL (Debian's postgresql: initdb'd in a temporary folder, run as nobody when root;
fsync on, as a real server would be). Each run: 2,000 leases of 64 MiB asked by 20 concurrent
clients (POST /v1/leases, answered 201 "granted" only once the grant is written), each released
(DELETE). Figures: acknowledged grants per second and the POST's p50/p99, and PG/SQLite ratios.
Not the cluster claim (SELECT ... FOR UPDATE SKIP LOCKED across hosts): that is not built yet.

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
                s, l = call(dport, "POST", "/v1/leases", {"vram": "64MiB", "gpu": 0, "label": "bench"})
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


def main():
    pgtmp = tempfile.mkdtemp(prefix="vramd-store-load-pg-")
    pg, port, sock = start_postgres(pgtmp)
    try:
        subprocess.run(["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "vramd", "-d", "postgres",
                        "-c", "CREATE DATABASE bench"], check=True)
        results = {"sqlite": run(""),
                   "postgresql": run(f'store = "postgresql://vramd@127.0.0.1:{port}/bench"')}
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


if __name__ == "__main__":
    main()
