"""JUnit XML for CI: one ``<testsuite>`` per spec evaluated, one ``<testcase>`` per case ×
repeat (``name``: the case's description and ``[repeat i]``; ``classname``: ``eval.<spec>``),
with a ``<failure>`` for a failed run and an ``<error>`` for a grader error, and the suite's
``tests``/``failures``/``errors`` counts, which Jenkins, GitLab and GitHub reporters read."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from armature_temporal.evals.models import EvalResult

__all__ = ["junit_xml", "write_junit"]


def junit_xml(results: list[EvalResult]) -> str:
    """The JUnit XML document for ``results`` (one testsuite each, in a testsuites root)."""
    root = ET.Element("testsuites")
    for result in results:
        runs = [run for case in result.cases for run in case.runs]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"armature eval {result.spec_name} v{result.spec_version}",
            tests=str(len(runs)),
            failures=str(sum(r.status == "fail" for r in runs)),
            errors=str(sum(r.status == "error" for r in runs)),
            skipped="0",
            timestamp=result.created_at[:19],
        )
        props = ET.SubElement(suite, "properties")
        for key in ("spec_hash", "cases_file", "repeat"):
            ET.SubElement(props, "property", name=key, value=str(getattr(result, key)))
        for case in result.cases:
            for run in case.runs:
                name = case.description + (f" [repeat {run.repeat}]" if result.repeat > 1 else "")
                element = ET.SubElement(
                    suite, "testcase", classname=f"eval.{result.spec_name}", name=name
                )
                if run.status != "pass":
                    tag = "failure" if run.status == "fail" else "error"
                    detail = ET.SubElement(element, tag, message=run.reason[:500], type=tag)
                    detail.text = (
                        "\n".join(
                            f"{v.status}: {v.type}"
                            + (f" [{v.stage}]" if v.stage else "")
                            + f": {v.reason}"
                            for v in run.verdicts
                        )
                        or run.reason
                    )
                out = ET.SubElement(element, "system-out")
                out.text = f"run {run.run_id} ({run.state}); case at {case.where}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(results: list[EvalResult], path: Path) -> None:
    """Write :func:`junit_xml` to ``path``.

    Raises:
        OSError: the file cannot be written.
    """
    path.write_text(junit_xml(results), encoding="utf-8")
