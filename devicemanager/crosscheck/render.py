"""A crosscheck report as text: one line per figure, grouped by card, then a verdict line."""

from __future__ import annotations

from devicemanager.crosscheck.model import Check, Report, Value, Verdict


def _value(value: Value | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def line(check: Check) -> str:
    if check.verdict is Verdict.NOT_COMPARED:
        return f"  {check.figure:<37} not compared: {check.why}"
    text = (
        f"  {check.figure:<37} {check.verdict.value:<9} agent {_value(check.agent)}, "
        f"tool {_value(check.tool)}"
    )
    if check.tolerance:
        text += f" (tolerance {check.tolerance})"
    if check.why:
        text += f": {check.why}"
    return text


def render(report: Report) -> str:
    out = [f"crosscheck {report.manufacturer} against {report.tool}"]
    out += [f"note: {n}" for n in report.notes]
    subject = None
    for check in report.checks:
        if check.subject != subject:
            subject = check.subject
            out.append(subject)
        out.append(line(check))
    wrong = report.disagreements
    compared = len(report.agreements) + len(wrong)
    skipped = len(report.checks) - compared
    if wrong:
        out.append(
            f"{len(wrong)} of {compared} compared figures disagree ({skipped} not compared):"
        )
        out += [
            f"  {c.subject}: {c.figure}: agent {_value(c.agent)}, {report.tool} {_value(c.tool)}"
            + (f" (tolerance {c.tolerance})" if c.tolerance else "")
            + (f": {c.why}" if c.why else "")
            for c in wrong
        ]
    else:
        out.append(f"all {compared} compared figures agree ({skipped} not compared)")
    return "\n".join(out) + "\n"
