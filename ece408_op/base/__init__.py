"""What every layer may use: small helpers with no layer of their own (the layering test's base).

    files.py   the user's cache folder (one rule), atomic writes, bounded reads of files others control
    nsight.py  where NVIDIA's profilers (ncu, nsys) are on this machine
"""
