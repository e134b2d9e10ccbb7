"""The default test suite in chunks that each finish within one device call (under ten
minutes), for scripts/tpu/run_suite.sh; stdlib only (the TPU machine's python3).

    python3 scripts/tpu/suite_chunks.py plan                 # the chunks, their estimates
    python3 scripts/tpu/suite_chunks.py items K              # chunk K's pytest arguments, one a line
    python3 scripts/tpu/suite_chunks.py summary K XML...     # one line: chunk K's counts
    python3 scripts/tpu/suite_chunks.py tally DIR...         # all chunk-*.xml under DIRs summed
    python3 scripts/tpu/suite_chunks.py aborted RECORD XML [WHY]   # the test a dead process was in, as a failure
    python3 scripts/tpu/suite_chunks.py record JUNIT.xml [SCALE]   # new durations from a CPU run

A chunk's time on the TPU machine is estimated from the time each test took in one run of
the default suite on the project's 2-core CPU (suite_durations.json: pytest's junit xml
of `python -m pytest -o junit_family=xunit1 --junitxml=...`, turned into seconds per test
file and per test function by `record`), times TPU_FACTOR, plus what a pytest process
pays before its first test (importing torch, JAX and lazyxla; opening the chip). Chunks
are filled greedily in file order up to BUDGET_S; a file estimated above the budget is
split by test function. The plan depends only on the durations file, the test files
present and the two settings, so every call computes the same chunks.

suite_durations.json now: one full default run on the 2-core CPU (2026-12-06) under a load
average of 8-12 from other work (61.6 min wall), scaled by 0.325 to the suite's unloaded
20 min; tests/test_host_overhead.py, added after it, from a run of its own (x 0.4); the
four files whose tests are all marked slow, 0 s (the default suite selects none of them).
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = Path(__file__).with_name("suite_durations.json")
# TPU seconds per CPU second: each small graph compiles for the TPU in more time than for the
# CPU (measured on the chip: W1's first step 8 s, against about 1 s here), while the host's
# 13 cores run the child processes faster than 2. A guess until the first run's chunk times
# replace it (run_suite.sh prints them).
TPU_FACTOR = float(os.environ.get("SUITE_TPU_FACTOR", "2.0"))
# Estimated seconds a chunk may take: a device call ends at 600 s; the rest is headroom for
# the estimate being wrong.
BUDGET_S = float(os.environ.get("SUITE_CHUNK_BUDGET_S", "400"))
PROCESS_S = 25.0        # a pytest process before its first test: imports, collection, the chip (10-15 s)
UNKNOWN_FILE_S = 30.0   # CPU seconds assumed for a test file the durations file lacks


@dataclass(frozen=True)
class Item:
    """pytest arguments run together (a test file, or some of its test functions) and their
    CPU seconds."""
    args: tuple[str, ...]
    cpu_s: float

    @property
    def tpu_s(self) -> float:
        return self.cpu_s * TPU_FACTOR


def _ignored(conftest: Path) -> set[Path]:
    """The files a conftest.py's `collect_ignore` names (pytest skips them)."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "collect_ignore" for t in node.targets):
            return {conftest.parent / name for name in ast.literal_eval(node.value)}
    return set()


def test_files() -> list[str]:
    """The default suite's test files (pyproject's testpaths = tests), as pytest collects them."""
    tests = ROOT / "tests"
    ignored = set().union(*(_ignored(c) for c in tests.rglob("conftest.py")))
    return sorted(str(p.relative_to(ROOT)) for p in tests.rglob("test_*.py") if p not in ignored)


def load_durations() -> dict:
    """{file: {"total": CPU seconds, "tests": {function node id: CPU seconds}}}."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def items(files: list[str], durations: dict) -> list[Item]:
    """One item per file; a file estimated above the budget, one per group of its test
    functions that fits."""
    out = []
    for f in files:
        known = durations.get(f)
        if known is None:
            out.append(Item((f,), UNKNOWN_FILE_S))
        elif known["total"] * TPU_FACTOR <= BUDGET_S - PROCESS_S or not known["tests"]:
            out.append(Item((f,), known["total"]))
        else:
            out += _pack([Item((node,), s) for node, s in known["tests"].items()])
    return out


def _pack(parts: list[Item]) -> list[Item]:
    """Consecutive items merged while their estimate stays within the budget."""
    chunks: list[Item] = []
    for part in parts:
        if chunks and PROCESS_S + chunks[-1].tpu_s + part.tpu_s <= BUDGET_S:
            chunks[-1] = Item(chunks[-1].args + part.args, chunks[-1].cpu_s + part.cpu_s)
        else:
            chunks.append(part)
    return chunks


def plan() -> list[Item]:
    return _pack(items(test_files(), load_durations()))


def _chunk(k: str) -> Item:
    chunks = plan()
    if not k.isdigit() or not 1 <= int(k) <= len(chunks):
        raise SystemExit(f"no chunk {k!r}: chunks are 1..{len(chunks)} (see `plan`)")
    return chunks[int(k) - 1]


# -- results --------------------------------------------------------------------------------

def counts(xml_paths: list[Path]) -> tuple[Counter, list[str], Counter, float]:
    """(passed/failed/skipped/errors, the ids that failed or errored, skip reasons, seconds)."""
    total, bad, reasons, seconds = Counter(), [], Counter(), 0.0
    for path in xml_paths:
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            seconds += float(suite.get("time", 0))
        for case in root.iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            kinds = {child.tag for child in case}
            if "error" in kinds:
                total["errors"] += 1
                bad.append("ERROR " + name)
            elif "failure" in kinds:
                total["failed"] += 1
                bad.append("FAILED " + name)
            elif "skipped" in kinds:
                total["skipped"] += 1
                message = next(c for c in case if c.tag == "skipped").get("message", "")
                reasons[re.sub(r"\s+", " ", message)[:160]] += 1
            else:
                total["passed"] += 1
    return total, bad, reasons, seconds


def line(total: Counter, seconds: float) -> str:
    run = sum(total.values())
    share = f", {100 * total['passed'] / run:.2f}% passed" if run else ""
    return (f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped, "
            f"{total['errors']} errors in {seconds:.0f} s{share}")


def aborted(record: Path, junit: Path, why: str = "") -> bool:
    """The last process of `record` (a suite_resume.py file), which died without its junit
    xml, written to `junit`: its tests with their outcomes, the one it died in (started,
    never ended) as failed with `why`. False where that process ended every test it began."""
    tests: dict = {}   # node id -> outcome, or None while it runs
    hung: set = set()   # killed by suite_resume.py's per-test limit
    for entry in record.read_text(encoding="utf-8").splitlines():
        mark, _, rest = entry.partition(" ")
        if mark == "PROCESS":
            tests, hung = {}, set()
        elif mark == "HUNG":
            hung.add(rest)
        elif mark == "START":
            tests[rest] = None
        elif mark == "END":
            nodeid, _, outcome = rest.rpartition(" ")
            tests[nodeid] = outcome
    dead = [nodeid for nodeid, outcome in tests.items() if outcome is None]
    if not dead:
        return False
    if dead[-1] in hung:
        why = "it ran past the per-test limit (--test-limit), its stacks are in the record"
    message = f"the process died in this test{': ' + why if why else ''}"
    suite = ET.Element("testsuite", name="pytest", time="0")
    for nodeid, outcome in tests.items():
        path, _, name = nodeid.partition("::")
        inner, _, name = name.rpartition("::")
        classname = ".".join(filter(None, (path[:-3].replace("/", "."), inner.replace("::", "."))))
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, file=path, time="0")
        if outcome in (None, "failed"):
            ET.SubElement(case, "failure", message=message if outcome is None else "failed (its report died with the process)")
        elif outcome == "skipped":
            ET.SubElement(case, "skipped", message="skipped (its reason died with the process)")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(junit, encoding="utf-8", xml_declaration=True)
    print(f"ABORTED {dead[-1]}{': ' + why if why else ''}")
    return True


def record(junit: Path, scale: float = 1.0) -> None:
    """The files of a junit xml written with junit_family=xunit1 (it names each test's
    file) into suite_durations.json, replacing those files' entries; every time x `scale`
    (a run slowed by other work on the machine, scaled to an unloaded one)."""
    fresh: dict = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path, seconds = case.get("file"), float(case.get("time", 0)) * scale
        if path is None:
            raise SystemExit(f"{junit}: no file attribute: run pytest with -o junit_family=xunit1")
        module = path[:-3].replace("/", ".")
        inner = case.get("classname", "")[len(module) + 1:]   # TestClass, when there is one
        node = "::".join(filter(None, (path, inner.replace(".", "::"), case.get("name", "").split("[")[0])))
        entry = fresh.setdefault(path, {"total": 0.0, "tests": {}})
        entry["total"] = round(entry["total"] + seconds, 2)
        entry["tests"][node] = round(entry["tests"].get(node, 0.0) + seconds, 2)
    durations = {**load_durations(), **fresh}
    DURATIONS.write_text(json.dumps(dict(sorted(durations.items())), indent=1) + "\n")
    print(f"wrote {DURATIONS}: {len(fresh)} files recorded, {len(durations)} in all, "
          f"{sum(e['total'] for e in durations.values()):.0f} s")


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("plan", [])
    if command == "plan":
        chunks = plan()
        total = sum(PROCESS_S + c.tpu_s for c in chunks)
        print(f"{len(chunks)} chunks, about {math.ceil(total / 60)} min on the TPU machine "
              f"(CPU seconds x {TPU_FACTOR:g} + {PROCESS_S:g} s a process; budget {BUDGET_S:g} s a chunk)")
        for k, c in enumerate(chunks, 1):
            names = sorted({a.split("::")[0].removeprefix("tests/") for a in c.args})
            print(f"chunk {k}: about {PROCESS_S + c.tpu_s:.0f} s: {', '.join(names)}")
    elif command == "items" and len(args) == 1:
        print("\n".join(_chunk(args[0]).args))
    elif command == "aborted" and len(args) in (2, 3):
        return 0 if aborted(Path(args[0]), Path(args[1]), args[2] if len(args) == 3 else "") else 1
    elif command == "summary" and len(args) >= 2:
        total, bad, _, seconds = counts([Path(a) for a in args[1:]])
        estimate = PROCESS_S + _chunk(args[0]).tpu_s
        print(f"chunk {args[0]}/{len(plan())}: {line(total, seconds)} (estimated {estimate:.0f} s)", *bad, sep="\n")
    elif command == "tally" and args:
        paths = sorted(p for d in args for p in Path(d).rglob("chunk-*.xml"))
        total, bad, reasons, seconds = counts(paths)
        print(f"{len(paths)} chunk(s) of {len(plan())}: {line(total, seconds)}", *bad, sep="\n")
        for reason, n in reasons.most_common():
            print(f"skipped {n}: {reason}")
    elif command == "record" and len(args) in (1, 2):
        record(Path(args[0]), float(args[1]) if len(args) == 2 else 1.0)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
