"""Compare the harness's two JUnit XML reports (baseline, routed) per test file.

Usage: report.py BASELINE_DIR ROUTED_DIR [--markdown OUT.md]

Each directory holds one JUnit XML report per test file (``<file>.xml``, next
to its ``<file>.log``); a log without a report is a run killed or crashed.

Prints, per test file, the tests passing on the baseline (plain confluent-kafka)
and through kbear, the totals, and each test that passes on the baseline and
fails through kbear. Tests the plugin skipped as asyncio (no routed aio
clients yet) are counted apart, as "not routed yet".
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

AIO_REASON = "kbear-compat: unit tests of confluent-kafka's aio wiring: baseline only"


@dataclass
class Result:
    outcome: str  # passed, failed, error, skipped, aio
    message: str = ""


@dataclass
class FileCounts:
    baseline: int = 0
    routed: int = 0
    total: int = 0
    aio: int = 0
    regressions: list[str] = field(default_factory=list)


def load(directory: str) -> tuple[dict[str, Result], list[str]]:
    """test id (file::name) -> result over every report of ``directory``, and the
    logs that have no report (runs killed or crashed)."""
    results: dict[str, Result] = {}
    for report in sorted(Path(directory).glob("*.xml")):
        results.update(load_report(report))
    unreported = [
        log.name for log in sorted(Path(directory).glob("*.log")) if not log.with_suffix(".xml").exists()
    ]
    return results, unreported


def load_report(path: Path) -> dict[str, Result]:
    """test id (file::name) -> result of one JUnit XML report."""
    results: dict[str, Result] = {}
    for case in ET.parse(path).iter("testcase"):
        if not case.get("name") and not case.get("classname"):
            continue  # the empty placeholder pytest writes for a run that collected nothing
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        classname = case.get("classname", "")
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        scope = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
        name = case.get("name", "")
        test_id = f"{file}::{scope + '::' if scope else ''}{name}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or "").strip().splitlines()[0:1]
                message = message[0][:200] if message else ""
                break
            if child.tag == "skipped":
                message = child.get("message") or ""
                outcome = "aio" if AIO_REASON in message else "skipped"
        results[test_id] = Result(outcome, message)
    return results


def compare(baseline: dict[str, Result], routed: dict[str, Result]) -> dict[str, FileCounts]:
    files: dict[str, FileCounts] = defaultdict(FileCounts)
    for test_id, base in baseline.items():
        counts = files[test_id.split("::", 1)[0]]
        counts.total += 1
        got = routed.get(test_id, Result("missing", "not run through kbear"))
        if base.outcome == "passed":
            counts.baseline += 1
            if got.outcome == "aio":
                counts.aio += 1
            elif got.outcome == "passed":
                counts.routed += 1
            else:
                counts.regressions.append(f"{test_id} [{got.outcome}] {got.message}")
        elif got.outcome == "passed":
            counts.routed += 1
    return dict(sorted(files.items()))


def render(files: dict[str, FileCounts], markdown: bool) -> str:
    lines = []
    if markdown:
        lines += [
            "| file | tests | pass baseline | pass routed | not routed yet (aio) |",
            "|---|---|---|---|---|",
        ]
    else:
        lines.append(f"{'file':<44} {'tests':>6} {'baseline':>9} {'routed':>7} {'aio (not routed yet)':>21}")
    tot = FileCounts()
    for file, c in files.items():
        tot.total += c.total
        tot.baseline += c.baseline
        tot.routed += c.routed
        tot.aio += c.aio
        aio = str(c.aio) if c.aio else ""
        if markdown:
            lines.append(f"| {file} | {c.total} | {c.baseline} | {c.routed} | {aio} |")
        else:
            lines.append(f"{file:<44} {c.total:>6} {c.baseline:>9} {c.routed:>7} {aio:>21}")
    if markdown:
        lines.append(f"| **total** | {tot.total} | {tot.baseline} | {tot.routed} | {tot.aio} |")
    else:
        lines.append(f"{'total':<44} {tot.total:>6} {tot.baseline:>9} {tot.routed:>7} {tot.aio:>21}")
    regressions = [r for c in files.values() for r in c.regressions]
    lines.append("")
    lines.append(f"Pass on confluent-kafka, fail through kbear: {len(regressions)}")
    lines += [f"- {r}" if markdown else f"  {r}" for r in regressions]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("routed")
    parser.add_argument("--markdown", help="also write the comparison as Markdown to this file")
    args = parser.parse_args(argv)
    baseline, base_missing = load(args.baseline)
    routed, routed_missing = load(args.routed)
    files = compare(baseline, routed)
    notes = "".join(
        f"No report ({name}: killed after the file timeout, or crashed): {', '.join(missing)}\n"
        for name, missing in (("baseline", base_missing), ("routed", routed_missing))
        if missing
    )
    sys.stdout.write(render(files, markdown=False) + notes)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(render(files, markdown=True) + notes)
    return 1 if any(c.regressions for c in files.values()) or routed_missing else 0


if __name__ == "__main__":
    sys.exit(main())
