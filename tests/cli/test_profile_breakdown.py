"""--profile's wall-time breakdown (cli/breakdown.py): the parts, the inference split, the
layers against the host link. Records are built by hand here; the GPU run fills them for real
(tests/mx/test_gpu_models_and_host_copy.py)."""
import re
import subprocess
import time

from suitekit import python_command
from ece408_op.cli.breakdown import START_UP, Breakdown, link_seconds, pages_seconds, process_age
from ece408_op.kernels.hostcopy.records import Record


def test_process_age_counts_from_the_process_start():
    # a fresh interpreter that sleeps 0.3 s before asking: its age is at least that
    code = "import time; time.sleep(0.3); from ece408_op.cli.breakdown import process_age; print(process_age())"
    age = float(subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.29 <= age < 30
    assert process_age() > 0


def test_marks_are_times_since_the_previous_mark():
    clock = Breakdown()
    time.sleep(0.05)
    clock.mark("first")
    clock.mark("second")
    parts = dict(clock.parts)
    assert START_UP in parts and parts["first"] >= 0.05 and parts["second"] < parts["first"]


def test_table_splits_the_inference_and_sets_layers_against_the_link():
    clock = Breakdown()
    clock.parts = [(START_UP, 0.5), ("data", 0.25), ("inference", 1.0)]
    layer = Record("conv", "ring", x_bytes=int(1e9), y_bytes=int(2e9), wall=0.4, copy_in=0.1, kernel_call=0.05,
                   op_time=0.01, copy_out=0.2)
    text = clock.table([layer], link=(10.0, 20.0))
    assert link_seconds(layer, (10.0, 20.0)) == 0.2                  # 1 GB at 10 GB/s + 2 GB at 20 GB/s
    lines = text.splitlines()
    assert re.search(r"^\s+1\.7500\s+100\.0%\s+total$", text, re.M)
    split = {line.split("%", 1)[1].strip(): float(line.split()[0]) for line in lines if line.startswith(" ") and "%" in line}
    assert abs(split["custom layers: copies (x, k in; y out into MXNet's memory)"] - 0.3) < 1e-9
    assert abs(split["custom layers: Op Time (the kernels)"] - 0.01) < 1e-9
    assert abs(split["the rest of the network (MXNet's layers, its data copy)"] - 0.6) < 1e-9
    row = next(line for line in lines if re.match(r"\s+1\s+conv\s+ring", line))
    assert row.split()[-2:] == ["200.00", "2.00x"]                 # link ms, wall / link
    assert "HtoD 10.0 GB/s, DtoH 20.0 GB/s" in text
    with_pages = clock.table([layer], link=(10.0, 20.0), fresh=(4.0, 8.0)).splitlines()
    row = next(line for line in with_pages if re.match(r"\s+1\s+conv\s+ring", line))
    assert row.split()[-2:] == ["2.00x", "500.00"]                # wall / link, pages ms
    assert pages_seconds(layer, (4.0, 8.0)) == 0.5                     # 2 GB faulted in at 4 GB/s
    assert "faulted in at 4.0 GB/s, copied into at 8.0 GB/s" in "\n".join(with_pages)


def test_table_without_layers_has_no_layer_part():
    clock = Breakdown()
    clock.mark("data")
    text = clock.table()
    assert "Custom layers against the host link" not in text and "total" in text


# ---------------------------------------------------------------------------- --profile's kernel table

def _profile(samples, host=()):
    from ece408_op.kernels.profile import Profile
    profile = Profile()
    for name, seconds in samples:
        profile.add(name, seconds, host=name in host)
    return profile


def test_profile_table_marks_the_fewest_rows_past_90_percent_of_the_gpu_time():
    # a fixture of a run's timings: two kernels, the copies, a memset, and the host copy (host clock)
    samples = [("conv_forward v7 (strip)", 0.0030), ("conv_forward v7 (strip)", 0.0030), ("im2col v5", 0.0012),
               ("[CUDA memcpy HtoD] x, k", 0.0020), ("[CUDA memcpy DtoH] y", 0.0006), ("[memset] y", 0.0002),
               ("[host copy] y -> caller", 0.0500)]
    lines = _profile(samples, host={"[host copy] y -> caller"}).table().splitlines()
    assert lines[0].split() == ["Time(%)", "Cum(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"]
    rows = {line.split("  ")[-1].strip(): line for line in lines[1:-1]}
    gpu = [line for line in lines[1:-1] if not line.lstrip().startswith("host")]
    # heaviest first; the share of the GPU time (10 ms: the host copy is not in it), and its running sum
    assert [line.split("  ")[-1] for line in gpu] == ["conv_forward v7 (strip)", "[CUDA memcpy HtoD] x, k", "im2col v5",
                                                     "[CUDA memcpy DtoH] y", "[memset] y"]
    assert [tuple(line.split()[:2]) for line in gpu] == [("60.00%", "60.00%"), ("20.00%", "80.00%"),
                                                         ("12.00%", "92.00%"), ("6.00%", "98.00%"),
                                                         ("2.00%", "100.00%")]
    marked = [line.split("  ")[-1] for line in gpu if line.split()[2] == "*"]
    assert marked == ["conv_forward v7 (strip)", "[CUDA memcpy HtoD] x, k", "im2col v5"]     # 80% is not past 90%
    assert rows["[host copy] y -> caller"].split()[:2] == ["host", "-"]
    assert lines[-1] == ("* the 3 row(s) (2 kernel(s)) that together take 92.0% of the GPU time: the fewest past 90%")


def test_profile_marks_pass_90_percent_strictly():
    from ece408_op.kernels.profile import heaviest
    assert heaviest({"a": 9.0, "b": 1.0}) == ["a", "b"]              # exactly 90% is not more than 90%
    assert heaviest({"a": 9.5, "b": 0.5}) == ["a"]
    assert heaviest({"a": 0.0}) == [] and heaviest({}) == []
    assert heaviest({f"k{i}": 1.0 for i in range(10)}) == [f"k{i}" for i in range(10)]   # even: all ten
