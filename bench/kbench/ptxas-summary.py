#!/usr/bin/env python3
"""Summarise `nvcc -Xptxas -v` output (stdin): one line per kernel, registers, stack, spills.
Usage: python3 bench/kbench/ptxas-summary.py < ptxas.txt  (pack-gpu.sh writes ptxas.txt)"""
import re, sys
cur = None; props = {}
for line in sys.stdin:
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m: cur = m.group(1); continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur: props[cur] = m.groups(); continue
    m = re.search(r"Used (\d+) registers", line)
    if m and cur:
        n = re.search(r"(k_[a-z_]+?)I", cur) or re.search(r"(k_[a-z_]+)", cur)
        name = cur
        if n:
            args = re.findall(r"Li(\d+)E", cur)
            name = n.group(1) + "<" + ",".join(args) + ">"
        st = props.get(cur, ("?", "?", "?"))
        print(f"{name:22s} regs {m.group(1):>3s}  stack {st[0]:>3s}  spill st/ld {st[1]}/{st[2]}")
        cur = None
