"""A long transcript keeps its promise: past the kept head, a command's output is held back and its
end is shown before the line that ends the command (and reaches the service's transcript), with a
line saying how much was left out; the record keeps head and tail."""
import io
import re
import shutil

import pytest

from ece408_op.grading.transcript import Transcript


def test_the_end_of_long_output_is_shown_before_the_command_s_end_line():
    out = io.StringIO()
    transcript = Transcript(stream=out, cap=4000)
    for i in range(2000):
        transcript.write(f"line {i}\n")
    transcript.line("* The command exited with code 0")
    transcript.write("after\n")
    transcript.line("* The run ended")
    shown = out.getvalue()
    assert shown.index("line 1999\n") < shown.index("* The command exited with code 0")
    assert shown.endswith("* The command exited with code 0\nafter\n* The run ended\n")
    left_out = int(re.search(r"\[\.\.\. (\d+) bytes of output not shown", shown).group(1))
    assert left_out + len(shown) >= sum(len(f"line {i}\n") for i in range(2000))
    assert "line 10\n" in shown and "line 1000\n" not in shown        # the head as it came, the middle left out
    kept = transcript.text()
    assert kept.startswith("line 0\n") and kept.endswith("* The run ended\n") and "bytes of output left out" in kept


def test_short_output_is_shown_as_it_comes_and_nothing_is_held():
    out = io.StringIO()
    transcript = Transcript(stream=out, cap=4000)
    transcript.write("hello\n")
    assert out.getvalue() == "hello\n"
    transcript.line("* done")
    assert out.getvalue() == "hello\n* done\n" == transcript.text()


@pytest.mark.service
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
def test_the_end_of_a_long_development_run_reaches_the_service_s_transcript(running_service, tmp_path):
    from servicekit import job_id_of
    from teams import rai_yaml
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"])
    token = svc.add_teams("loud")["loud"]
    folder = tmp_path / "loud"
    folder.mkdir()
    (folder / "rai_build.yml").write_text(rai_yaml(
        ["python3 -c \"[print('x' * 99, i) for i in range(40000)]; print('THE LAST LINE')\""]))
    done = svc.cli("submit", "--server", svc.url, token=token, cwd=folder, timeout=300)
    transcript = svc.transcript(job_id_of(done.stdout + done.stderr))
    end = transcript.rindex("* Development run")
    assert transcript.rindex("x" * 99 + " 39999\nTHE LAST LINE\n") < end, transcript[-2000:]
    assert "bytes of output not shown" in transcript
