# SPDX-License-Identifier: BSD-3-Clause
# tests/train_lib.sh -- helpers shared by the hoop-train tests (sourced, not run).
#
# small_data DIR: writes the first 20000 training and 500 test samples of the installed
# Fashion-MNIST into DIR, uncompressed, so that a run loads and evaluates in a moment
# (the normalisation uses fixed constants, so the cut changes nothing else).
# wait_for FILE PATTERN PID: waits until FILE has a line matching PATTERN, PID has
# exited, or 60 s have passed (every wait has a deadline).

small_data() {
    python3 - "$1" <<'PY'
import gzip, os, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
os.mkdir(dst)
for split, n in (("train", 20000), ("t10k", 500)):
    for kind, head, per in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        name = f"{split}-{kind}-ubyte"
        b = gzip.open(f"{src}/{name}.gz").read()
        with open(f"{dst}/{name}", "wb") as f:
            f.write(b[:4] + struct.pack(">I", n) + b[8:head] + b[head:head + n * per])
PY
}

wait_for() {
    _i=0
    while ! grep -q "$2" "$1" 2>/dev/null && kill -0 "$3" 2>/dev/null && [ $_i -lt 3000 ]; do
        sleep 0.02
        _i=$((_i + 1))
    done
}
