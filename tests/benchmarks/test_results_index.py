"""benchmarks/README.md indexes benchmarks/results/, and no recorded command goes stale.

- Every file in benchmarks/results/ is listed in the index, and every listed file exists.
- Every command recorded in the index, in the results files and in scripts/gpu-check.sh (and
  the arguments scripts/scaling.sh hands it) parses with the script's current options: the
  script's own ``parse(argv)``, which checks the arguments and runs nothing. A flag a script
  no longer has (``python -m benchmarks.examples.mortgage ... --configs``) fails here, and so
  does a module that moved. Commands are recorded as ``python -m benchmarks.NAME ...`` (the
  library's) and ``python -m benchmarks.examples.NAME ...`` (the applications'); results files
  written before the benchmarks were a package hold ``python benchmarks/NAME.py ...``, which
  parses the same way.
- The READMEs, the docs and the code cite only results files that exist (a removed one is
  cited as ``git show COMMIT:benchmarks/results/NAME``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from .scripts import BENCHMARKS, CHILD_SCRIPTS, ROOT, SCRIPTS, path_of

RESULTS = BENCHMARKS / "results"
INDEX = BENCHMARKS / "README.md"

# ``python -m benchmarks.<name> <arguments>`` (``benchmarks.examples.<name>``), or the
# historical ``python benchmarks/<name>.py <arguments>`` (any interpreter path)
COMMAND = re.compile(r"(?:^|[\s`(\"'])(?:\S*/)?python3?\s+"
                     r"(-m\s+benchmarks\.(?:examples\.)?\w+|benchmarks/(?:examples/)?\w+\.py)"
                     r"(?![\w.])(.*)", re.S)
STOP = {";", "&&", "||", "|", ">", ">>", "2>&1", "&", "#", "do", "done"}
# a results file's name, alone or after ``results/`` (every script's prefix)
RESULT_NAME = re.compile(
    r"(?:(?<=results/)|(?<![\w/:.-]))((?:vs-dask-cuda|memory|cupy-allocators|cluster-start|"
    r"transfer|shuffle|join|ecg|mortgage|xgboost-growth|wall-clock|etl-memory|scale-out|"
    r"job-parts)-"
    r"[A-Za-z0-9._-]*?\.(?:md|json))\b")
REMOVED = re.compile(r"git show \w+:benchmarks/results/[\w.-]+")


def indexed() -> list[str]:
    """The result files the index's table lists, as links to results/NAME."""
    return re.findall(r"\]\(results/([^)]+)\)", INDEX.read_text())


def test_every_result_file_is_indexed_and_every_indexed_file_exists():
    listed = indexed()
    present = sorted(p.name for p in RESULTS.iterdir() if not p.name.startswith("."))
    assert sorted(set(listed)) == sorted(listed), "a file is listed twice"
    assert not sorted(set(present) - set(listed)), "in benchmarks/results/ but not indexed"
    assert not sorted(set(listed) - set(present)), "indexed but not in benchmarks/results/"


def test_results_keep_one_current_markdown_file_per_claim_named_by_its_script():
    """At most 20 files, the tables alone (no ``.json``: the tables hold the figures), each
    named ``<script>-<machine>[-<tag>]`` after a script whose command it records."""
    files = sorted(p for p in RESULTS.iterdir() if not p.name.startswith("."))
    assert len(files) <= 20, f"{len(files)} files in benchmarks/results/: at most 20"
    assert all(p.suffix == ".md" for p in files), [p.name for p in files if p.suffix != ".md"]
    for path in files:
        scripts = {split(c)[0] for w, c in RECORDED if w == f"results/{path.name}"}
        prefixes = set()
        for name in scripts:
            results_name = importlib.import_module(f"benchmarks.{name}").SCRIPT.name
            if isinstance(results_name, str):
                prefixes.add(results_name)
        assert any(path.name.startswith(f"{prefix}-") for prefix in prefixes), (
            f"{path.name}: not named after the script it records ({sorted(prefixes)})")


def commands_in(text: str) -> list[str]:
    """Every ``python -m benchmarks.<name> ...`` (or ``python benchmarks/<name>.py ...``) in
    markdown ``text``: in inline code spans
    (which may wrap) and in fenced blocks (a line each, with ``\\`` continuations)."""
    spans = []
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
    for block in fenced.findall(text):
        spans += block.replace("\\\n", " ").splitlines()
    spans += [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", fenced.sub("", text))]
    found = []
    for span in spans:
        for match in COMMAND.finditer(span):
            found.append(" ".join(f"python {match[1]}{match[2]}".split()))
    return found


def split(command: str) -> tuple[str, list[str]]:
    """(script name, its arguments) of ``python -m benchmarks.<name> <arguments>`` or of
    ``python benchmarks/<name>.py <arguments>``, to the first shell operator or comment."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    if words[1] == "-m":
        name, rest = words[2].removeprefix("benchmarks."), words[3:]
    else:
        path = words[1].split("benchmarks/", 1)[1].removesuffix(".py")
        name, rest = path.replace("/", "."), words[2:]
    args = []
    for word in rest:
        if word in STOP or word.startswith("#"):
            break
        args.append(word)
    return name, args


def check(command: str) -> None:
    """``command`` parses with its script's current options (nothing runs)."""
    name, args = split(command)
    assert path_of(name).exists(), f"{command}: no {path_of(name).relative_to(ROOT)}"
    module = importlib.import_module(f"benchmarks.{name}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            module.parse(args)
    except SystemExit as exit_:
        if exit_.code:
            pytest.fail(f"{command}\n  does not parse: {err.getvalue().strip()}")


def recorded() -> list[tuple[str, str]]:
    """(where, command) for the index and every results file."""
    out = [("benchmarks/README.md", c) for c in commands_in(INDEX.read_text())]
    for path in sorted(RESULTS.iterdir()):
        text = path.read_text()
        if path.suffix == ".json":
            data = json.loads(text)
            commands = [data["command"]] if isinstance(data, dict) and "command" in data else []
            commands = [c for c in commands if "benchmarks/" in c]
        else:
            commands = commands_in(text)
        out += [(f"results/{path.name}", c) for c in commands]
    return out


RECORDED = recorded()


def test_every_result_file_records_how_it_was_made():
    """A benchmark's command, or the example's own command where it was timed by hand."""
    with_command = {where for where, _ in RECORDED}
    for path in RESULTS.glob("*.md"):
        if f"results/{path.name}" not in with_command:
            assert "python -m examples." in path.read_text(), f"{path.name}: no command"


@pytest.mark.parametrize("where, command", RECORDED, ids=[f"{w}:{c[:60]}" for w, c in RECORDED])
def test_every_recorded_command_parses(where, command):
    check(command)


def usages(name: str) -> list[str]:
    """The commands a script's docstring shows, its optional ``[--flag VALUE]`` parts given
    (the first of ``a|b``): the flags a script documents are flags it has."""
    import ast

    doc = ast.get_docstring(ast.parse(path_of(name).read_text())) or ""
    commands: list[str] = []
    for line in doc.replace("\\\n", " ").splitlines():
        if "python -m benchmarks." in line:
            commands.append(line.strip())
        elif commands and line.startswith("    ") and line.strip()[:1] in "[-":
            commands[-1] += " " + line.strip()  # the usage goes on
        elif not line.startswith("    "):
            commands and commands.append("")
    out = []
    for command in filter(None, commands):
        command = re.sub(r"\[([^\]]*)\]", r"\1", command.split("#")[0])
        out.append(re.sub(r"(\S+)\|\S+", r"\1", command).strip())
    return out


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_scripts_documented_usage_parses(name):
    found = usages(name)
    assert found, f"benchmarks/{name}.py: no usage line in its docstring"
    for command in found:
        assert split(command)[0] == name, command
        check(command)


def test_recorded_commands_in_the_transfer_notes_parse():
    for command in commands_in((BENCHMARKS / "transfer_notes.md").read_text()):
        check(command)


def test_the_index_records_a_command_for_every_script_run_on_its_own():
    scripts = {split(c)[0] for w, c in RECORDED if w == "benchmarks/README.md"}
    assert scripts | CHILD_SCRIPTS == set(SCRIPTS)


def test_the_index_and_the_scripts_record_the_module_form():
    """The index, the notes and the GPU check give ``python -m benchmarks.NAME``; the
    historical form stays only inside the results files written with it."""
    for path in (INDEX, BENCHMARKS / "transfer_notes.md", ROOT / "scripts" / "gpu-check.sh",
                 ROOT / "README.md", *sorted((ROOT / "examples").glob("*/README.md"))):
        old = re.findall(r"python3? benchmarks/[\w/]+\.py", path.read_text())
        assert not old, f"{path.relative_to(ROOT)}: {old}"
    for name in SCRIPTS:
        assert all(command.startswith(f"python -m benchmarks.{name}")
                   for command in usages(name)), name


@pytest.mark.parametrize("command", [
    "python -m benchmarks.examples.mortgage --data /tmp/m --configs gpu1-pool --rounds 0",
    "python -m benchmarks.examples.mortgage --data /tmp/m --gb 10",
    "python -m benchmarks.examples.mortgage_stages --device cpu --data /tmp/ms --all-chunks",
    "python -m benchmarks.memory --sections alloc,nothing",
    "python -m benchmarks.nothing --help",
    "python -m benchmarks.mortgage --data /tmp/m",  # an application's, by its former module
    "python -m benchmarks.examples.shuffle --sizes 64MiB",  # the library's, in the wrong part
    "python benchmarks/examples/mortgage.py --data /tmp/m --gb 10",  # the historical form
    "python benchmarks/mortgage.py --data /tmp/m",
    "python benchmarks/nothing.py --help",
])
def test_a_stale_command_fails(command):
    with pytest.raises((pytest.fail.Exception, AssertionError)):
        check(command)


def test_commands_are_found_in_code_spans_and_blocks():
    text = ("Run `python -m\nbenchmarks.examples.mortgage --data d\n--runs 1`, then:\n\n```\n"
            "for x in 1; do python -m benchmarks.examples.ecg --max-steps 3; done\n"
            "/opt/v/bin/python3 -m benchmarks.shuffle \\\n  --protocols tcp --device cpu\n```\n"
            "and once `python benchmarks/join.py --repeats 1`; not `python -m "
            "benchmarks.common_x.y` nor `python -m benchmarks.examples_x.y`.\n")
    assert commands_in(text) == [
        "python -m benchmarks.examples.ecg --max-steps 3; done",
        "python -m benchmarks.shuffle --protocols tcp --device cpu",
        "python -m benchmarks.examples.mortgage --data d --runs 1",
        "python benchmarks/join.py --repeats 1"]
    assert split("python -m benchmarks.examples.ecg --max-steps 3; done") == (
        "examples.ecg", ["--max-steps", "3"])
    assert split("python benchmarks/examples/ecg.py --max-steps 3") == (
        "examples.ecg", ["--max-steps", "3"])
    assert split("python benchmarks/join.py --repeats 1") == ("join", ["--repeats", "1"])


def gpu_check_commands() -> list[str]:
    """The benchmark commands scripts/gpu-check.sh runs, its variables filled in as it would:
    the extra-argument variables empty, or as scripts/scaling.sh sets them."""
    text = (ROOT / "scripts" / "gpu-check.sh").read_text()
    env = {**os.environ, "SCALING_GPUS": "4", "SCALING_DRY_RUN": "1"}
    dry = subprocess.run(["bash", str(ROOT / "scripts" / "scaling.sh")], env=env,
                         capture_output=True, text=True, check=True).stdout
    scaling = dict(line.split("=", 1) for line in dry.splitlines() if "=" in line)
    out = []
    for line in text.splitlines():
        match = re.search(r"python3 (-m benchmarks\.[\w.]+.*?)(?:\|\||$)", line)
        if not match:
            continue
        command = match[1].strip()
        command = re.sub(r'"?\$OUT/results"?', "/tmp/out", command)
        command = re.sub(r'"\$data/\$layout-\$size"', "/tmp/mb/classic-10GB", command)
        command = command.replace('"${args[@]}"', "--data /tmp/mb/classic-10GB")
        command = command.replace('"${vs_args[@]}"', "")
        command = re.sub(r'"\$\{MEMORY_BENCH_SECTIONS:-([^}]*)\}"', r"\1", command)
        command = re.sub(r'"\$\{MORTGAGE_DATA:-([^}]*)\}"', r"\1", command)
        plain = re.sub(r"\$\{\w+:-\}", "", command)
        assert "$" not in plain, f"gpu-check.sh: unfilled variable in {command!r}"
        out.append("python " + plain)
        for variable in ("TRANSFER_ARGS", "SHUFFLE_ARGS", "JOIN_ARGS", "MORTGAGE_ARGS"):
            if f"${{{variable}:-}}" in command:
                out.append("python " + command.replace(f"${{{variable}:-}}", scaling[variable]))
    return out


def test_gpu_check_is_valid_shell_and_its_commands_parse():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu-check.sh")], check=True)
    commands = gpu_check_commands()
    scripts = {split(c)[0] for c in commands}
    assert {"memory", "cupy_allocators", "vs_dask_cuda", "cluster_start",
            "examples.mortgage_stages", "examples.mortgage_timeline", "transfer", "shuffle",
            "join", "examples.mortgage", "examples.ecg"} <= scripts
    for command in commands:
        check(command)
    text = (ROOT / "scripts" / "gpu-check.sh").read_text()
    for path in re.findall(r"\b(benchmarks/[\w/]+\.py|tests/[\w/]+\.py)\b", text):
        assert (ROOT / path).exists(), f"gpu-check.sh names {path}, which does not exist"
    for name in re.findall(r"-m benchmarks\.([\w.]+)", text):
        assert path_of(name).exists(), f"gpu-check.sh runs benchmarks.{name}"


def citing_files() -> list[Path]:
    files = [ROOT / "README.md", INDEX, BENCHMARKS / "transfer_notes.md",
             *sorted((ROOT / "examples").glob("*/README.md")),
             *sorted((ROOT / "docs").glob("**/*.md")), *sorted((ROOT / "scripts").glob("*.sh")),
             *sorted(RESULTS.glob("*.md"))]
    for package in ("dask_gpu_interop", "examples", "benchmarks"):
        files += sorted((ROOT / package).glob("**/*.py"))
    return [f for f in files if f.exists()]


def test_the_citation_check_knows_every_results_files_name():
    """Each file in results/ is found by name, alone and in a path, so that citing it after
    it has left the tree fails the check below."""
    for path in RESULTS.iterdir():
        for text in (f"see {path.name}.", f"`benchmarks/results/{path.name}`"):
            assert RESULT_NAME.findall(text) == [path.name], text
    cited = "`git show 86cb2bf:benchmarks/results/mortgage-1xH100-user-path.md`, in-memory-x.md"
    assert not RESULT_NAME.findall(REMOVED.sub("", cited))


def test_readmes_docs_and_code_cite_only_results_that_exist():
    present = {p.name for p in RESULTS.iterdir()}
    missing = []
    for path in citing_files():
        text = REMOVED.sub("", path.read_text())
        if path == INDEX:
            text = text.split("## What left the tree")[0]
        for name in RESULT_NAME.findall(text):
            if re.search(r"[A-Z]{3,}", name) or name == "mortgage-README.md":
                continue  # a pattern such as mortgage-MACHINE-user-path.md
            if name not in present:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "cited but not in benchmarks/results/:\n" + "\n".join(missing)


def test_the_scripts_named_by_the_readmes_exist():
    for path in citing_files():
        text = path.read_text()
        for script in re.findall(r"(?<![\w/])benchmarks/((?:examples/)?\w+)\.py\b", text):
            name = script.replace("/", ".")
            assert path_of(name).exists(), f"{path}: benchmarks/{script}.py"
        for script in re.findall(r"-m benchmarks\.((?:examples\.)?\w+)(?![\w.])", text):
            if not script.split(".")[-1].isupper():  # benchmarks.NAME stands for any of them
                assert path_of(script).exists(), f"{path}: benchmarks.{script}"
