"""Where a cold process's time goes before its first step, from CubeCL's own logs.

`bench.sh cold-DTYPE` turns on CubeCL's compilation log (`basic`: one `[Compiling kernel] NAME`
line as each kernel goes to NVRTC; a kernel found in the PTX cache is not compiled and not
logged) and its autotune log (`minimal`: one `Fastest result NAME-KEY` line as each key is
decided), both to stderr, and pipes that stderr through `stamp`.

    python3 cold_log.py stamp < stderr > LOG       each line prefixed by its seconds since start
    python3 cold_log.py summary LOG                the kernels compiled and keys tuned, with times

A compilation's seconds are those until the log's next line (NVRTC runs between the two); a
key's are those since the previous key was decided (its candidates' compilations and timed
runs, with whatever else the process did in between). Keys are Hypatia's engine's where the key
reads `m.. n.. k..` (`LinearArgs::key`), Burn's otherwise.
"""

import re
import sys
import time


def stamp():
    start = time.monotonic()
    for line in sys.stdin:
        sys.stdout.write(f"{time.monotonic() - start:.3f} {line}")
        sys.stdout.flush()


def summary(path):
    events = []
    for line in open(path, errors="replace"):
        at, _, text = line.rstrip("\n").partition(" ")
        try:
            events.append((float(at), text))
        except ValueError:
            continue
    if not events:
        print("  cold log: no lines (CubeCL logged nothing: every kernel and key was cached)")
        return
    compiled, keys = {}, {"Hypatia's engine": [], "Burn's": []}
    last_key = 0.0
    for i, (at, text) in enumerate(events):
        following = events[i + 1][0] if i + 1 < len(events) else at
        kernel = re.search(r"\[Compiling kernel\]\s*(\S*)", text)
        if kernel:
            name = kernel.group(1) or "(unnamed)"
            count, seconds = compiled.get(name, (0, 0.0))
            compiled[name] = (count + 1, seconds + following - at)
            continue
        result = re.search(r"Fastest result (.*)", text)
        if result:
            owner = "Hypatia's engine" if re.search(r"-m\d+ n\d+ k\d+ ", text) else "Burn's"
            keys[owner].append((at - last_key, result.group(1)[:110]))
            last_key = at
    n = sum(c for c, _ in compiled.values())
    s = sum(t for _, t in compiled.values())
    print(f"  NVRTC: {n} kernels compiled, {s:.1f} s until each next log line")
    for name, (count, seconds) in sorted(compiled.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"    {seconds:7.1f} s  {count:4d}x  {name}")
    for owner, tuned in keys.items():
        total = sum(t for t, _ in tuned)
        print(f"  autotune, {owner} keys: {len(tuned)}, {total:.1f} s since each previous key")
        for seconds, what in sorted(tuned, key=lambda kv: -kv[0])[:5]:
            print(f"    {seconds:7.1f} s  {what}")
    print(f"  last log line at {events[-1][0]:.1f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["stamp"]:
        stamp()
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
