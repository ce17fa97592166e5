"""Checks the Kubernetes manifests in deploy/kubernetes against what dtrain resolves.

Usage: check_kubernetes_deploy.py DTRAIN_BINARY DEPLOY_DIR

There is no Kubernetes cluster in the tests, so this plays the part of the Job
controller and of Kubeflow's Training Operator: it reads the manifests, works out the
environment and files each pod would get, and runs the real dtrain with exactly that
environment (`env -i`), checking what dtrain makes of it.

dtrain-indexed-job.yaml (ConfigMap + headless Service + Indexed Job):
  - the Job is completionMode Indexed with completions == parallelism == N >= 2 and
    restartPolicy Never; the Service is headless (clusterIP None), publishes pods
    before they are Ready, selects the Job's pod labels, and is the pods' subdomain;
  - the container runs `dtrain run --config C --set runtime.secret_file=S`, C a key of
    the ConfigMap mounted as a volume, S a key of the Secret dtrain-job-secret
    (secret.yaml) mounted as a volume;
  - DTRAIN_KUBERNETES_REPLICAS == N, and DTRAIN_KUBERNETES_PORT (8888 when unset) is
    a container port and the Service's port;
  - for every index i, `dtrain cluster --json` (the container's --config and --set
    arguments, the ConfigMap's job.json) under `env -i JOB_COMPLETION_INDEX=i
    HOSTNAME=<job>-<i>` plus the container's env says: source kubernetes, task
    worker:i, cluster worker = [<job>-<k>.<service>:<port> for k < N], job id
    kubernetes-<job>;
  - the job file is valid (`dtrain validate`) and trains as N tasks (`dtrain launch
    --workers N`): every task ends with the same params_sha256;
  - with secret.yaml as shipped (its value empty) a pod stops at once: exit 2,
    "runtime.secret_file: ... is empty".
secret.yaml: one Secret dtrain-job-secret whose key is the one the pods mount, with
  an empty value (no secret everyone can read is shipped).
tfjob.yaml (ConfigMap + kubeflow.org/v1 TFJob): replica types Chief/Worker/PS/
  Evaluator, each with a container named `tensorflow` (the one the operator gives
  TF_CONFIG) running dtrain the same way; for every replica, the TF_CONFIG the operator
  sets ({"cluster": {type: ["<name>-<type>-<i>.<namespace>.svc:<port>"]}, "task": ...,
  "environment": "cloud"}, the port from the container port named tfjob-port, else
  2222) makes `dtrain cluster --json` say source TF_CONFIG, that task and that cluster.

Prints what it checked; exits 0 when all checks pass, 1 with each failure on stderr.
Needs PyYAML (Debian's python3-yaml).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

DEFAULT_DTRAIN_PORT = 8888
TFJOB_PORT_NAME = "tfjob-port"
TFJOB_DEFAULT_PORT = 2222
TFJOB_CONTAINER = "tensorflow"
TFJOB_TYPES = {"Chief": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"}


class Checker:
    def __init__(self, dtrain, tmp):
        self.dtrain = dtrain
        self.tmp = tmp
        self.errors = []

    def check(self, ok, what):
        if not ok:
            self.errors.append(what)
        return ok

    def run(self, env, args, timeout=60):
        """Runs dtrain with exactly `env` (env -i) and `args`."""
        cmd = ["/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in env.items()] + [self.dtrain] + args
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.errors.append(f"timed out after {timeout}s: {' '.join(cmd)}")
            return None
        return p


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def only(docs, kind, path, c):
    found = [d for d in docs if d.get("kind") == kind]
    c.check(len(found) == 1, f"{path}: expected one {kind}, found {len(found)}")
    return found[0] if found else None


def container_env(container, where, c):
    """The container's env as a dict; only plain values can be reproduced here."""
    env = {}
    for e in container.get("env", []):
        if c.check("value" in e, f"{where}: env {e.get('name')} is not a plain value (valueFrom cannot be checked)"):
            env[e["name"]] = str(e["value"])
    return env


def dtrain_args(container, where, c):
    """(config path, the --set values) of `dtrain run --config C --set k=v ...`."""
    argv = list(container.get("command", [])) + list(container.get("args", []))
    if not c.check(len(argv) >= 2 and os.path.basename(argv[0]) == "dtrain" and argv[1] == "run",
                   f"{where}: the container runs {argv}, expected `dtrain run ...`"):
        return None, []
    config, sets, i = None, [], 2
    while i < len(argv):
        if argv[i] in ("--config", "-c") and i + 1 < len(argv):
            config = argv[i + 1]
        elif argv[i] == "--set" and i + 1 < len(argv):
            sets.append(argv[i + 1])
        else:
            c.check(False, f"{where}: argument {argv[i]!r} is not one this check knows (--config, --set)")
            i -= 1
        i += 2
    c.check(config is not None, f"{where}: no --config in {argv}")
    return config, sets


def volume_file(pod_spec, container, path, kind, c, where):
    """(volume source name, key) of the `kind` (configMap/secret) volume file at `path`."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"].rstrip("/")
        if not path.startswith(mount + "/"):
            continue
        rel = path[len(mount) + 1:]
        source = volumes.get(m["name"], {}).get(kind)
        if not c.check(source is not None, f"{where}: {path} is on volume {m['name']}, which is not a {kind}"):
            return None, None
        name = source.get("name") if kind == "configMap" else source.get("secretName")
        items = source.get("items")
        if items is None:
            return name, rel
        for item in items:
            if item["path"] == rel:
                return name, item["key"]
        c.check(False, f"{where}: {path}: no item of volume {m['name']} has path {rel!r}")
        return None, None
    c.check(False, f"{where}: {path} is on no mounted volume")
    return None, None


def secret_file_of(sets, where, c):
    values = [s.split("=", 1)[1] for s in sets if s.startswith("runtime.secret_file=")]
    c.check(len(values) == 1, f"{where}: expected one --set runtime.secret_file=PATH, found {values}")
    return values[0] if values else None


def check_pod_files(pod_spec, container, docs, secret, where, c):
    """The container's job file (from a ConfigMap in `docs`) and secret file (from the
    Secret `secret`); returns (job json text, the --set values)."""
    config_path, sets = dtrain_args(container, where, c)
    if config_path is None:
        return None, sets
    cm_name, cm_key = volume_file(pod_spec, container, config_path, "configMap", c, where)
    maps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    job_text = maps.get(cm_name, {}).get("data", {}).get(cm_key)
    c.check(job_text is not None, f"{where}: --config {config_path} is ConfigMap {cm_name!r} key {cm_key!r}, "
                                  f"which the file does not define")
    secret_path = secret_file_of(sets, where, c)
    if secret_path:
        s_name, s_key = volume_file(pod_spec, container, secret_path, "secret", c, where)
        if secret is not None:
            c.check(s_name == secret["metadata"]["name"],
                    f"{where}: runtime.secret_file is Secret {s_name!r}, secret.yaml makes {secret['metadata']['name']!r}")
            c.check(s_key in secret.get("stringData", {}) or s_key in secret.get("data", {}),
                    f"{where}: runtime.secret_file is key {s_key!r} of the Secret, which secret.yaml lacks")
    return job_text, sets


def check_indexed_job(deploy, secret, c):
    path = os.path.join(deploy, "dtrain-indexed-job.yaml")
    docs = load(path)
    job = only(docs, "Job", path, c)
    svc = only(docs, "Service", path, c)
    if job is None or svc is None:
        return
    spec = job["spec"]
    name = job["metadata"]["name"]
    n = spec.get("completions")
    c.check(spec.get("completionMode") == "Indexed", f"{path}: completionMode is {spec.get('completionMode')!r}, not Indexed")
    c.check(isinstance(n, int) and n >= 2, f"{path}: completions {n!r}: expected a number >= 2")
    c.check(spec.get("parallelism") == n, f"{path}: parallelism {spec.get('parallelism')!r} != completions {n!r}: "
                                          "every pod must run at once")
    pod = spec["template"]["spec"]
    labels = spec["template"].get("metadata", {}).get("labels", {})
    service = svc["metadata"]["name"]
    c.check(pod.get("restartPolicy") == "Never", f"{path}: restartPolicy {pod.get('restartPolicy')!r}, expected Never")
    c.check(svc["spec"].get("clusterIP") == "None", f"{path}: the Service is not headless (clusterIP: None)")
    c.check(svc["spec"].get("publishNotReadyAddresses") is True,
            f"{path}: the Service should set publishNotReadyAddresses: true (DNS before the pods are Ready)")
    selector = svc["spec"].get("selector", {})
    c.check(selector and all(labels.get(k) == v for k, v in selector.items()),
            f"{path}: the Service selects {selector}, the pods have {labels}")
    c.check(pod.get("subdomain") == service, f"{path}: the pods' subdomain {pod.get('subdomain')!r} is not the "
                                             f"Service {service!r}, so <job>-<i>.{service} does not resolve")
    containers = pod["containers"]
    c.check(len(containers) == 1, f"{path}: expected one container, found {len(containers)}")
    container = containers[0]
    env = container_env(container, path, c)
    job_text, sets = check_pod_files(pod, container, docs, secret, path, c)
    c.check(env.get("DTRAIN_KUBERNETES_REPLICAS") == str(n),
            f"{path}: DTRAIN_KUBERNETES_REPLICAS {env.get('DTRAIN_KUBERNETES_REPLICAS')!r} != completions {n}")
    port = int(env.get("DTRAIN_KUBERNETES_PORT", DEFAULT_DTRAIN_PORT))
    c.check(port in [p.get("containerPort") for p in container.get("ports", [])],
            f"{path}: port {port} is not a containerPort")
    c.check(any(p.get("port") == port and p.get("targetPort", port) == port for p in svc["spec"].get("ports", [])),
            f"{path}: the Service has no port {port}")
    if job_text is None or c.errors:
        return
    job_file = os.path.join(c.tmp, "indexed-job.json")
    with open(job_file, "w") as f:
        f.write(job_text)
    set_args = [a for s in sets for a in ("--set", s)]

    # Each pod as the Job controller starts it.
    expected_cluster = {"worker": [f"{name}-{k}.{service}:{port}" for k in range(n)]}
    for i in range(n):
        pod_env = dict(env, JOB_COMPLETION_INDEX=str(i), HOSTNAME=f"{name}-{i}")
        p = c.run(pod_env, ["cluster", "--json", "--config", job_file] + set_args)
        if p is None or not c.check(p.returncode == 0, f"pod {i}: dtrain cluster exit {p.returncode}: {p.stderr.strip()}"):
            continue
        got = json.loads(p.stdout)
        want = {"cluster": expected_cluster, "task": {"type": "worker", "index": i}, "source": "kubernetes",
                "job_id": f"kubernetes-{name}"}
        for key, value in want.items():
            c.check(got.get(key) == value, f"pod {i}: dtrain cluster says {key} {got.get(key)!r}, expected {value!r}")
        print(f"pod {name}-{i}: worker:{i} of {expected_cluster['worker']} (source kubernetes, job id {got.get('job_id')})")

    # The job file itself: valid, and N tasks of it train as one job.
    p = c.run({}, ["validate", "--config", job_file])
    if p is not None:
        c.check(p.returncode == 0, f"dtrain validate of the ConfigMap's job.json: exit {p.returncode}: {p.stdout}{p.stderr}")
    p = c.run({}, ["launch", "--workers", str(n), "--config", job_file, "--threads", "1", "--console", "all"],
              timeout=120)
    if p is not None:
        hashes = re.findall(r"params_sha256 ([0-9a-f]{64})", p.stdout + p.stderr)
        ok = c.check(p.returncode == 0 and len(hashes) == n and len(set(hashes)) == 1,
                     f"dtrain launch --workers {n} of the ConfigMap's job.json: exit {p.returncode}, "
                     f"params_sha256 {hashes}: {p.stderr[-2000:]}")
        if ok:
            print(f"job.json: valid; {n} tasks train it to one params_sha256 {hashes[0][:16]}...")

    # secret.yaml as shipped: an empty secret, refused at once with the reason.
    if secret is not None:
        value = secret.get("stringData", {}).get("secret")
        if c.check(value == "", f"secret.yaml ships a secret value ({value!r}); it must be empty"):
            secret_path = secret_file_of(sets, path, c)
            local_secret = os.path.join(c.tmp, "secret")
            with open(local_secret, "w") as f:
                f.write(value)
            local_sets = [a.replace(secret_path, local_secret) if a.startswith("runtime.secret_file=") else a
                          for a in set_args]
            p = c.run(dict(env, JOB_COMPLETION_INDEX="1", HOSTNAME=f"{name}-1"),
                      ["run", "--config", job_file] + local_sets, timeout=30)
            if p is not None and c.check(p.returncode == 2 and "is empty" in p.stderr,
                                         f"a pod with the shipped (empty) secret: exit {p.returncode}: {p.stderr}"):
                print("secret.yaml as shipped: a pod stops at once (exit 2): " + p.stderr.strip().splitlines()[-1])


def check_tfjob(deploy, secret, c):
    path = os.path.join(deploy, "tfjob.yaml")
    docs = load(path)
    tfjob = only(docs, "TFJob", path, c)
    if tfjob is None:
        return
    c.check(tfjob.get("apiVersion") == "kubeflow.org/v1", f"{path}: apiVersion {tfjob.get('apiVersion')!r}")
    name = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    specs = tfjob["spec"].get("tfReplicaSpecs", {})
    c.check(specs, f"{path}: no tfReplicaSpecs")
    cluster, pods = {}, {}
    for rtype, spec in specs.items():
        where = f"{path}: {rtype}"
        if not c.check(rtype in TFJOB_TYPES, f"{where}: replica type not one of {sorted(TFJOB_TYPES)}"):
            continue
        replicas = spec.get("replicas", 1)
        c.check(isinstance(replicas, int) and replicas >= 1, f"{where}: replicas {replicas!r}")
        pod = spec["template"]["spec"]
        named = [x for x in pod["containers"] if x["name"] == TFJOB_CONTAINER]
        if not c.check(len(named) == 1, f"{where}: no container named {TFJOB_CONTAINER!r}: the operator would not "
                                        "give TF_CONFIG to dtrain"):
            continue
        container = named[0]
        ports = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == TFJOB_PORT_NAME]
        port = ports[0] if ports else TFJOB_DEFAULT_PORT
        job_text, sets = check_pod_files(pod, container, docs, secret, where, c)
        rt = rtype.lower()
        cluster[rt] = [f"{name}-{rt}-{i}.{namespace}.svc:{port}" for i in range(replicas)]
        pods[rt] = (replicas, container_env(container, where, c), job_text, sets)
    if c.errors:
        return
    for rt, (replicas, env, job_text, sets) in sorted(pods.items()):
        job_file = os.path.join(c.tmp, f"tfjob-{rt}.json")
        with open(job_file, "w") as f:
            f.write(job_text)
        set_args = [a for s in sets for a in ("--set", s)]
        if rt == sorted(pods)[0]:
            p = c.run({}, ["validate", "--config", job_file])
            if p is not None:
                c.check(p.returncode == 0, f"dtrain validate of the TFJob's job.json: exit {p.returncode}: {p.stdout}{p.stderr}")
        for i in range(replicas):
            # As the Training Operator writes it (genTFConfigJSONStr).
            tf_config = {"cluster": cluster, "task": {"type": rt, "index": i}, "environment": "cloud"}
            p = c.run(dict(env, TF_CONFIG=json.dumps(tf_config), HOSTNAME=f"{name}-{rt}-{i}"),
                      ["cluster", "--json", "--config", job_file] + set_args)
            if p is None or not c.check(p.returncode == 0, f"TFJob {rt}:{i}: dtrain cluster exit {p.returncode}: {p.stderr.strip()}"):
                continue
            got = json.loads(p.stdout)
            want = {"cluster": cluster, "task": {"type": rt, "index": i}, "source": "TF_CONFIG"}
            for key, value in want.items():
                c.check(got.get(key) == value, f"TFJob {rt}:{i}: dtrain cluster says {key} {got.get(key)!r}, expected {value!r}")
            print(f"TFJob {name}-{rt}-{i}: {rt}:{i} of {cluster} (source TF_CONFIG)")


def main():
    dtrain, deploy = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(dtrain, tmp)
        secret_path = os.path.join(deploy, "secret.yaml")
        secret = only(load(secret_path), "Secret", secret_path, c)
        check_indexed_job(deploy, secret, c)
        check_tfjob(deploy, secret, c)
    for e in c.errors:
        print("FAIL: " + e, file=sys.stderr)
    if c.errors:
        return 1
    print("deploy/kubernetes: the manifests give every pod the cluster and task dtrain resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
