"""The SLURM and Kubernetes files, checked by what can be checked without those systems: the
batch script runs under bash in a one-node SLURM layout with `dask` and `srun` as stubs that
record their arguments; the DaskCluster manifest parses, names what the operator documents,
and validates against the operator's CRD schema where that can be found."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "deploy" / "slurm" / "dask-gpu.sbatch"
MANIFEST = ROOT / "deploy" / "kubernetes" / "dask-gpu-cluster.yaml"
DOCKERFILE = ROOT / "deploy" / "kubernetes" / "Dockerfile"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"REGISTRY/dask-gpu-interop:{VERSION}"
LOCAL = ROOT / "deploy" / "local" / "dask-gpu-cluster"

# Each stub writes its arguments (and a few variables) as one JSON line to $STUB_LOG.
RECORD = textwrap.dedent("""\
    record() {
        "$REAL_PYTHON" - "$@" <<'PY'
    import json, os, sys
    keep = ("DASK_SCHEDULER_ADDRESS", "DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT",
            "DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT", "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT",
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION")
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "env": {k: os.environ[k] for k in keep if k in os.environ}}) + "\\n")
    PY
    }
    """)

STUBS = {
    # `dask scheduler` writes its scheduler file; scheduler and workers run until SIGTERM.
    "dask": RECORD + textwrap.dedent("""\
        role=$1
        trap 'record stopped "$role"; exit 0' TERM  # first: SIGTERM may come while recording
        record dask "$@"
        if [[ $1 == scheduler ]]; then
            args=("$@")
            for i in "${!args[@]}"; do
                if [[ ${args[$i]} == --scheduler-file ]]; then file=${args[$((i + 1))]}; fi
                if [[ ${args[$i]} == --protocol ]]; then proto=${args[$((i + 1))]}; fi
            done
            echo "{\\"address\\": \\"$proto://node1:8786\\"}" >"$file"
        fi
        while :; do sleep 0.1; done
        """),
    # srun: record, then run the step's command (one node, one task) in its place.
    "srun": RECORD + textwrap.dedent("""\
        record srun "$@"
        while [[ $1 == -* ]]; do shift; done
        exec "$@"
        """),
    "scontrol": 'echo node1\n',
    # the interpreter: wait-for-workers is recorded and waits for the worker stub to be up, as
    # the real one waits for the workers; everything else runs for real.
    "python-stub": RECORD + textwrap.dedent("""\
        if [[ " $* " == *" wait-for-workers "* ]]; then
            record python "$@"
            for _ in $(seq 200); do
                grep -qF '{"argv": ["dask", "cuda", "worker"' "$STUB_LOG" && exit 0
                sleep 0.1
            done
            exit 1
        fi
        exec "$REAL_PYTHON" "$@"
        """),
    "job": RECORD + 'record job "$@"\n',
}


@pytest.fixture
def slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "REAL_PYTHON": sys.executable,
        "PYTHON": str(bin_dir / "python-stub"),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "node1",
        "SLURMD_NODENAME": "node1",
        "SLURM_GPUS_ON_NODE": "2",
        "SLURM_SUBMIT_DIR": str(tmp_path),
    }
    for key in list(env):  # nothing from the test's own dask config
        if key.startswith("DASK_"):
            del env[key]

    def run(*command, **extra):
        result = subprocess.run(
            ["bash", str(SBATCH), *command], env={**env, **extra}, capture_output=True,
            text=True, timeout=60,
        )
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, calls

    return tmp_path, run


def find(calls, *prefix):
    return [c for c in calls if c["argv"][: len(prefix)] == list(prefix)]


def after(argv, flag):
    return argv[argv.index(flag) + 1]


def test_sbatch_starts_scheduler_workers_and_command_with_tls(slurm):
    tmp, run = slurm
    result, calls = run(str(tmp / "bin" / "job"), "--epochs", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    job_dir = tmp / "dask-gpu-4242"

    (scheduler,) = find(calls, "dask", "scheduler")
    argv = scheduler["argv"]
    assert after(argv, "--protocol") == "tls"
    assert after(argv, "--port") == "8786"
    assert after(argv, "--dashboard-address") == "127.0.0.1:8787"  # localhost unless told
    assert after(argv, "--scheduler-file") == str(job_dir / "scheduler.json")
    assert scheduler["env"]["DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT"] == str(job_dir / "tls" / "scheduler.pem")
    assert scheduler["env"]["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"

    (srun,) = find(calls, "srun")
    assert "--nodes=1" in srun["argv"] and "--ntasks-per-node=1" in srun["argv"]
    assert srun["argv"][-len(find(calls, "dask", "cuda")[0]["argv"]):] == find(calls, "dask", "cuda")[0]["argv"]

    (worker,) = find(calls, "dask", "cuda", "worker")
    argv = worker["argv"]
    assert argv[3] == "tls://node1:8786"  # the address first: the preload's options follow
    assert argv[argv.index("--preload") + 1:][:3] == ["dask_gpu_interop.preload", "--gpu-pool-size", "0.8"]
    assert after(argv, "--dashboard-address") == "127.0.0.1:0"
    assert worker["env"]["DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT"] == str(job_dir / "tls" / "worker.pem")

    (wait,) = find(calls, "python")
    assert wait["argv"][-6:] == ["--scheduler", "tls://node1:8786", "-n", "2", "--timeout", "600"]
    assert wait["env"]["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] == str(job_dir / "tls" / "client.pem")

    (job,) = find(calls, "job")
    assert job["argv"] == ["job", "--epochs", "3"]
    assert job["env"]["DASK_SCHEDULER_ADDRESS"] == "tls://node1:8786"
    assert job["env"]["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] == str(job_dir / "tls" / "client.pem")

    # after the command: workers and scheduler were stopped (SIGTERM), nothing left running
    stopped = [c["argv"][1] for c in find(calls, "stopped")]
    assert sorted(stopped) == ["cuda", "scheduler"]
    # the order of events: scheduler, workers, wait, command, then the stops
    order = [c["argv"][0] for c in calls]
    assert order.index("job") < order.index("stopped")
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((job_dir / "tls" / "client-key.pem").stat().st_mode) == 0o600
    assert "export DASK_SCHEDULER_ADDRESS=tls://node1:8786" in (job_dir / "client.env").read_text()


def test_sbatch_ucx_runs_without_tls_and_passes_preload_options(slurm):
    tmp, run = slurm
    result, calls = run(
        str(tmp / "bin" / "job"), DASK_GPU_PROTOCOL="ucx", DASK_GPU_INTERFACE="ib0",
        DASK_GPU_PRELOAD_ARGS="--gpu-async-alloc --gpu-release-threshold 10GB",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (scheduler,) = find(calls, "dask", "scheduler")
    assert after(scheduler["argv"], "--protocol") == "ucx"
    assert after(scheduler["argv"], "--interface") == "ib0"
    assert "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION" not in scheduler["env"]
    (worker,) = find(calls, "dask", "cuda", "worker")
    assert worker["argv"][3] == "ucx://node1:8786"
    assert after(worker["argv"], "--interface") == "ib0"
    assert worker["argv"][-3:] == ["--gpu-async-alloc", "--gpu-release-threshold", "10GB"]
    assert not (tmp / "dask-gpu-4242" / "tls").exists()


def test_sbatch_exit_status_is_the_commands(slurm):
    tmp, run = slurm
    result, calls = run("bash", "-c", "exit 3")
    assert result.returncode == 3
    assert sorted(c["argv"][1] for c in find(calls, "stopped")) == ["cuda", "scheduler"]


def test_sbatch_without_gpus_says_so(slurm):
    _, run = slurm
    result, calls = run("true", SLURM_GPUS_ON_NODE="", SLURM_GPUS_PER_NODE="")
    assert result.returncode == 1
    assert "no GPUs in this job" in result.stderr
    assert calls == []


def test_scripts_parse_and_explain_themselves():
    for script in (SBATCH, LOCAL):
        subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(LOCAL), "--help"], capture_output=True, text=True, check=True)
    for flag in ("--workers", "--protocol tcp|ucx", "--no-tls", "--tls-dir", "--dashboard-address"):
        assert flag in out.stdout
    assert os.access(LOCAL, os.X_OK)


# ---- Kubernetes ----

@pytest.fixture(scope="module")
def manifest():
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert len(docs) == 1
    return docs[0]


def test_manifest_is_a_daskcluster_with_gpu_workers_and_the_preload(manifest):
    assert manifest["apiVersion"] == "kubernetes.dask.org/v1"
    assert manifest["kind"] == "DaskCluster"
    name = manifest["metadata"]["name"]
    worker = manifest["spec"]["worker"]
    assert worker["replicas"] >= 1
    (container,) = worker["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
    script = " ".join(container["args"])
    assert "pip install" not in script  # the package comes with the image
    assert container["image"] == IMAGE
    assert "dask cuda worker" in script
    assert "--preload dask_gpu_interop.preload" in script
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["DASK_SCHEDULER_ADDRESS"] == f"tls://{name}-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"
    assert env["DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY"].startswith("/etc/dask/tls/")
    secret = {v["name"]: v for v in worker["spec"]["volumes"]}["tls"]["secret"]
    assert sorted(i["key"] for i in secret["items"]) == ["ca.pem", "worker-key.pem", "worker.pem"]


def test_manifest_scheduler_and_service_follow_the_operator(manifest):
    name = manifest["metadata"]["name"]
    scheduler = manifest["spec"]["scheduler"]
    (container,) = scheduler["spec"]["containers"]
    assert container["image"] == IMAGE  # the workers' image: the same dask on both
    assert container["args"][:2] == ["dask", "scheduler"]
    assert container["args"][container["args"].index("--protocol") + 1] == "tls"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    env = {e["name"]: e["value"] for e in container["env"]}
    routes = yaml.safe_load(env["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"])
    assert "distributed.http.scheduler.api" in routes and "distributed.http.health" in routes
    service = scheduler["service"]
    assert service["type"] == "ClusterIP"  # not exposed outside the Kubernetes cluster
    assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    assert {p["name"]: p["port"] for p in service["ports"]} == {"tcp-comm": 8786, "http-dashboard": 8787}


def _operator_crd() -> Path | None:
    """The operator's DaskCluster CRD: from $DASK_KUBERNETES_CRD, or an installed dask-kubernetes."""
    given = os.environ.get("DASK_KUBERNETES_CRD")
    if given:
        return Path(given)
    spec = importlib.util.find_spec("dask_kubernetes")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    found = base / "operator" / "deployment" / "helm" / "dask-kubernetes-operator" / "crds" / "daskcluster.yaml"
    return found if found.exists() else None


def check_schema(value, schema, path="") -> list[str]:
    """Kubernetes' structural-schema rules, strict about unknown fields (kubectl's default)."""
    problems = []
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, (int, str)) else [f"{path}: want int or string"]
    kind = schema.get("type")
    checks = {
        "object": dict, "array": list, "string": str, "boolean": bool,
        "integer": int, "number": (int, float),
    }
    if kind in checks:
        if not isinstance(value, checks[kind]) or (kind in ("integer", "number") and isinstance(value, bool)):
            return [f"{path or '/'}: want {kind}, got {type(value).__name__} {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{path}/{key}: required")
        for key, inner in value.items():
            if key in props:
                problems += check_schema(inner, props[key], f"{path}/{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += check_schema(inner, schema["additionalProperties"], f"{path}/{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and schema.get("additionalProperties") is not True:
                problems.append(f"{path}/{key}: unknown field")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += check_schema(item, schema["items"], f"{path}[{i}]")
    return problems


def test_manifest_validates_against_the_operators_crd(manifest):
    crd_path = _operator_crd()
    if crd_path is None:
        pytest.skip("the operator's CRD: pip install dask-kubernetes, or set DASK_KUBERNETES_CRD")
    crd = yaml.safe_load(crd_path.read_text())
    assert crd["spec"]["names"]["kind"] == manifest["kind"]
    group, version = manifest["apiVersion"].split("/")
    assert crd["spec"]["group"] == group
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = served["schema"]["openAPIV3Schema"]
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
    assert check_schema(body, schema) == []
    # the checker does catch mistakes: a GPU count as a number is not what this CRD takes
    broken = json.loads(json.dumps(body))
    broken["spec"]["worker"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    broken["spec"]["worker"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert len(check_schema(broken, schema)) == 2


# ---- dask-jobqueue ----

def test_jobqueue_example_job_script(tmp_path):
    pytest.importorskip("dask_jobqueue")
    sys.path.insert(0, str(ROOT / "deploy" / "slurm"))
    try:
        import jobqueue_example
    finally:
        sys.path.pop(0)
    cluster = jobqueue_example.make_cluster(queue="gpu", account="proj", tls_dir=tmp_path / "tls")
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "#SBATCH --gpus-per-node=4" in script
    assert "-m dask_cuda.cli tls://" in script
    assert "--preload dask_gpu_interop.preload --gpu-pool-size 0.8" in script
    assert f"--tls-cert {tmp_path / 'tls' / 'worker.pem'}" in script
    assert "--nthreads 1" in script


# ---- the image ----

def _instructions():
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in lines]


def test_the_image_is_a_rapids_image_plus_the_checkout_s_package(tmp_path):
    """What can be checked without a Docker engine: the base image, that every file the build
    copies is in the checkout and in the build context, that the package installs from
    exactly those files, and that the documented tag is the manifest's image."""
    steps = _instructions()
    assert steps[0][0] == "ARG" and steps[0][1].startswith("RAPIDS_IMAGE=rapidsai/base:")
    assert steps[1] == ("FROM", "${RAPIDS_IMAGE}")
    allowed = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    context = tmp_path / "context"
    for kind, args in steps:
        if kind != "COPY":
            continue
        *sources, destination = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert source in allowed, f"{source} is left out of the build context"
            target = context / source
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
    (run,) = [args for kind, args in steps if kind == "RUN"]
    assert 'pip install --no-cache-dir "/tmp/dask-gpu-interop[prometheus,tls]"' in run
    assert "dask-gpu-interop==" not in run  # the checkout's package, not an index's
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path / "wheel"), str(context)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("dask_gpu_interop-*.whl")
    assert f"-{VERSION}-" in wheel.name
    assert f"-t {IMAGE}" in DOCKERFILE.read_text() and IMAGE in MANIFEST.read_text()
