"""What every layer may use: small helpers with no layer of their own (the layering test's base).

    files.py      the user's folders (one rule: XDG, or Windows' own), atomic writes, bounded reads
                  of files others control
    processes.py  whether a process id names a running process
    extras.py     what the base install and each extra need (setup.py reads it), and the one-line
                  hint where a command's extra is missing
    nsight.py     where NVIDIA's profilers (ncu, nsys) are on this machine
    ignore.py     what an upload (and a development run's copy) leaves out of a team's folder:
                  tokens, databases, version control, caches, venvs, other teams', .ece408ignore
"""
