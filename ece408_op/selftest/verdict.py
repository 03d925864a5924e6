"""What the selftest makes of a case's run: its problems against what it must do (``judge``), and
the one line the table shows of what the user got (``what_the_user_gets``)."""
import re

from . import faults


def judge(case, result, ctx):
    """Problems with what the user got (empty: the case passes)."""
    problems = []
    expect = case.expect
    if result.status == -1:
        return ["hung (killed by the selftest)"]
    if "Traceback" in result.stderr:
        problems.append("printed a traceback")
    if expect.status == "error" and result.status == 0:
        problems.append("exit status 0")
    elif isinstance(expect.status, int) and result.status != expect.status:
        problems.append(f"exit status {result.status}, expected {expect.status}")
    lines = result.error_lines
    if expect.quiet:
        if lines:
            problems.append(f"printed {lines[0]!r}")
    elif expect.free_stderr:
        pass
    elif result.status != 0:
        if expect.usage:
            if not (lines and lines[0].startswith("Usage:")):
                problems.append("no usage text")
            lines = lines[-1:]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"not one 'error: ' line: {lines[:3]!r}")
        elif expect.message and not re.search(expect.message, lines[0]):
            problems.append(f"message {lines[0]!r} lacks /{expect.message}/")
    if case.check is not None:
        problem = case.check(ctx, result)
        if problem:
            problems.append(problem)
    return problems


def what_the_user_gets(result, ctx):
    if "got" in result.notes:
        text = result.notes["got"]
    elif result.error_lines:
        text = result.error_lines[-1]
    else:
        text = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "(nothing)"
    text = text.replace(str(ctx.home), "$TMP").replace(str(ctx.shared.home), "$FIXTURES")
    text = text.replace(str(faults.ROOT), "$CHECKOUT")
    text = re.sub(r"http://127\.0\.0\.1:\d+/", "http://127.0.0.1:PORT/", text)
    return text

