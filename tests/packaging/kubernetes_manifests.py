#!/usr/bin/env python3
"""Checks packaging/kubernetes (docs/kubernetes.md) without a cluster: every manifest parses, the
kustomization names files that exist, and the DaemonSet, Service, ServiceMonitor and Secret have
what vramd needs on a GPU node (host PID, the host's cgroup namespace and cgroup fs, the NVIDIA
runtime, the state dir on the node, the config and Secret where vramd.toml reads them, the
metrics port the ServiceMonitor scrapes with the token). The config itself is checked by the real
parser (PackagingConfig.* in vramd_tests).

    tests/packaging/kubernetes_manifests.py packaging/kubernetes
"""
import os
import sys

import yaml

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        check(isinstance(d, dict) and d.get("apiVersion") and d.get("kind"),
              f"{path}: a document without apiVersion and kind")
        if d.get("kind") != "Kustomization":
            check(d.get("metadata", {}).get("name"), f"{path}: {d.get('kind')} without a name")
    return docs


def main(root):
    files = sorted(f for f in os.listdir(root) if f.endswith(".yaml"))
    objects = {}
    for f in files:
        for d in load(os.path.join(root, f)):
            objects.setdefault(d["kind"], []).append((f, d))
    kust = objects.get("Kustomization", [(None, {})])[0][1]
    for r in kust.get("resources", []):
        check(os.path.exists(os.path.join(root, r)), f"kustomization: resource {r} does not exist")
    generated = {g["name"]: g for g in kust.get("configMapGenerator", [])}
    check("vramd-config" in generated, "kustomization: no configMapGenerator vramd-config")
    for f in generated.get("vramd-config", {}).get("files", []):
        check(os.path.exists(os.path.join(root, f)), f"kustomization: {f} does not exist")
    check(kust.get("generatorOptions", {}).get("disableNameSuffixHash") is True,
          "kustomization: the ConfigMap's name must stay vramd-config (the DaemonSet names it)")
    check("secret.example.yaml" not in kust.get("resources", []),
          "kustomization: the example Secret must not be applied")

    ds = [d for _, d in objects.get("DaemonSet", [])]
    if not check(len(ds) == 1, "one DaemonSet"):
        return
    ds = ds[0]
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    check(spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items(),
          "DaemonSet: the selector matches the pod's labels")
    check(pod.get("hostPID") is True, "DaemonSet: hostPID (every process of the node)")
    check(pod.get("hostNetwork") is True, "DaemonSet: hostNetwork (the services' ports on loopback)")
    check(pod.get("runtimeClassName") == "nvidia", "DaemonSet: runtimeClassName nvidia (NVML)")
    containers = pod["containers"]
    check(len(containers) == 1, "DaemonSet: one container")
    c = containers[0]
    check(c.get("securityContext", {}).get("privileged") is True,
          "DaemonSet: privileged (the host's cgroup namespace)")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    check(env.get("NVIDIA_VISIBLE_DEVICES") == "all", "DaemonSet: NVIDIA_VISIBLE_DEVICES=all")
    check("utility" in (env.get("NVIDIA_DRIVER_CAPABILITIES") or ""),
          "DaemonSet: NVIDIA_DRIVER_CAPABILITIES has utility (libnvidia-ml)")
    limits = c.get("resources", {}).get("limits", {})
    check("nvidia.com/gpu" not in limits, "DaemonSet: vramd must not take a GPU from the device plugin")
    args = c.get("args", [])
    check(args[:1] == ["serve"] and "--config" in args, "DaemonSet: vramd serve --config")
    config_path = args[args.index("--config") + 1] if "--config" in args else None
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}

    def volume_at(path):
        m = mounts.get(path)
        return volumes.get(m["name"]) if m else None

    cfg = volume_at(config_path)
    check(cfg and cfg.get("configMap", {}).get("name") == "vramd-config"
          and mounts[config_path].get("subPath") == "vramd.toml",
          f"DaemonSet: {config_path} is vramd.toml of the ConfigMap vramd-config")
    state = volume_at("/var/lib/vramd")
    check(state and state.get("hostPath", {}).get("path") == "/var/lib/vramd",
          "DaemonSet: the state dir /var/lib/vramd on the node (hostPath)")
    cg = volume_at("/sys/fs/cgroup")
    check(cg and cg.get("hostPath", {}).get("path") == "/sys/fs/cgroup",
          "DaemonSet: the host's /sys/fs/cgroup")
    sec = volume_at("/etc/vramd/secret")
    check(sec and sec.get("secret", {}).get("secretName") == "vramd",
          "DaemonSet: the Secret vramd at /etc/vramd/secret")

    # vramd.toml reads the Secret's keys where the DaemonSet mounts them, and the port it listens
    # on is the container's and the Service's.
    toml_text = open(os.path.join(root, "vramd.toml")).read()
    values = {}
    for line in toml_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            values[k] = v.strip('"')
    secret = [d for _, d in objects.get("Secret", [])]
    check(len(secret) == 1, "one example Secret")
    keys = set(secret[0].get("stringData", {})) if secret else set()
    for key in ("store_url_file", "token_file"):
        path = values.get(key, "")
        check(path.startswith("/etc/vramd/secret/") and os.path.basename(path) in keys,
              f"vramd.toml: {key} = {path!r} is a key of the Secret mounted at /etc/vramd/secret")
    check(values.get("state_dir") == "/var/lib/vramd", "vramd.toml: state_dir = /var/lib/vramd")
    port = int(values.get("listen", ":0").rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(ports.get("http") == port, f"DaemonSet: container port http = {port} (vramd.toml's listen)")
    for probe in ("readinessProbe", "livenessProbe"):
        check(c.get(probe, {}).get("tcpSocket", {}).get("port") == port, f"DaemonSet: {probe} on {port}")

    svc = [d for _, d in objects.get("Service", [])]
    if check(len(svc) == 1, "one Service"):
        s = svc[0]["spec"]
        check(s.get("selector", {}).items() <= spec["template"]["metadata"]["labels"].items(),
              "Service: selects the DaemonSet's pods")
        check(any(p.get("name") == "http" and p.get("targetPort") in ("http", port) for p in s["ports"]),
              "Service: port http to the container's")
    sm = [d for _, d in objects.get("ServiceMonitor", [])]
    if check(len(sm) == 1, "one ServiceMonitor"):
        m = sm[0]
        check(m["apiVersion"] == "monitoring.coreos.com/v1", "ServiceMonitor: monitoring.coreos.com/v1")
        check(m["spec"]["selector"]["matchLabels"].items() <= svc[0]["metadata"]["labels"].items(),
              "ServiceMonitor: selects the Service")
        ep = m["spec"]["endpoints"]
        check(any(e.get("port") == "http" and e.get("path") == "/metrics"
                  and e.get("bearerTokenSecret", {}).get("name") == "vramd"
                  and e.get("bearerTokenSecret", {}).get("key") == "token" for e in ep),
              "ServiceMonitor: /metrics on port http with the Secret's token")
    for kind, items in objects.items():
        for f, d in items:
            if kind not in ("Namespace", "Kustomization"):
                check(d["metadata"].get("namespace") == "vramd", f"{f}: {kind} in namespace vramd")

    if failures:
        for f in failures:
            print("FAIL:", f)
        sys.exit(1)
    print(f"{len(files)} manifests, {sum(len(v) for v in objects.values())} objects: ok")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "packaging/kubernetes")
