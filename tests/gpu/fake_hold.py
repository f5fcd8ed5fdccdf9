#!/usr/bin/env python3
"""A stand-in for tests/gpu/hold (dry runs of run.sh without a GPU): registers its pid with the
asked GiB plus a context's bytes in the fake GPU's state ($FAKE_NVML_STATE), on the MIG instance
CUDA_VISIBLE_DEVICES names when it names one, prints "held N GiB pid P" and sleeps. A watcher
takes the entry out once it is gone (SIGKILL included), as the driver would. With --pattern, a
SIGUSR1 prints "checked N words: M wrong" as hold.cu does: all wrong unless its entry is back on
the fake GPU (a checkpoint by the fake cuda-checkpoint takes it off, a restore puts it back)."""
import fcntl, json, os, signal, sys, time

CTX = 300 * 1024 * 1024
state_path = os.environ["FAKE_NVML_STATE"]
gib = float(sys.argv[sys.argv.index("--gib") + 1]) if "--gib" in sys.argv else 1.0
want = int(gib * (1 << 30)) + CTX
where = os.environ.get("CUDA_VISIBLE_DEVICES", "")


def update(fn):
    with open(state_path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(state_path) as f:
            state = json.load(f)
        fn(state)
        tmp = state_path + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.rename(tmp, state_path)


def devices(state):
    """(device, card) pairs a process may be on: a MIG instance named by uuid, else GPU 0."""
    for gpu in state["gpus"]:
        for d in gpu.get("mig_devices") or []:
            if d and d.get("uuid") == where:
                return d, gpu
    return state["gpus"][0], state["gpus"][0]


def add(pid):
    def fn(state):
        d, card = devices(state)
        d.setdefault("processes", []).append({"pid": pid, "used": want, "name": "hold"})
        d["used"] = d.get("used", 0) + want
        if card is not d:
            card["used"] = card.get("used", 0) + want
    update(fn)


def remove(pid):
    def fn(state):
        for gpu in state["gpus"]:
            for d in [gpu] + [x for x in gpu.get("mig_devices") or [] if x]:
                keep = [p for p in d.get("processes", []) if p["pid"] != pid]
                gone = sum(p["used"] or 0 for p in d.get("processes", []) if p["pid"] == pid)
                d["processes"] = keep
                d["used"] = max(0, d.get("used", 0) - gone)
    update(fn)


def on_gpu(pid):
    with open(state_path) as f:
        state = json.load(f)
    return any(p["pid"] == pid for gpu in state["gpus"]
               for d in [gpu] + [x for x in gpu.get("mig_devices") or [] if x]
               for p in d.get("processes", []))


def check(signum, frame):
    words = int(gib * (1 << 30)) // 4
    print("checked %d words: %d wrong" % (words, 0 if on_gpu(os.getpid()) else words), flush=True)


pid = os.getpid()
add(pid)
if "--pattern" in sys.argv:
    signal.signal(signal.SIGUSR1, check)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # as hold.cu: a clean exit
if os.fork() == 0:  # the watcher, detached from the holder's fate
    os.setsid()
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    remove(pid)
    os._exit(0)
print("held %g GiB pid %d" % (gib, pid), flush=True)
while True:
    time.sleep(3600)
