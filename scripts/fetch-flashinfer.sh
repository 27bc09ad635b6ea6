#!/usr/bin/env bash
# FlashInfer's C++/CUDA headers, with the CUTLASS and CCCL it was written against, from the one
# pinned flashinfer-python wheel on PyPI (third_party/flashinfer/requirements.txt: version and
# sha256). The CUDA build includes them (cmake/FramezipFlashInfer.cmake); nothing of FlashInfer's
# Python or prebuilt kernels is used.
#
#   scripts/fetch-flashinfer.sh DEST
#
# Leaves DEST/include (flashinfer/...), DEST/cccl/{cub,libcudacxx/include,thrust},
# DEST/cutlass/{include,tools/util/include} and DEST/LICENSE, and DEST/.complete naming the pin.
# A no-op when DEST/.complete matches the pin. Downloads through pip (the machine's index), which
# checks the wheel's hash; python3 -m venv gives a pip where the system Python has none.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
requirements="$here/third_party/flashinfer/requirements.txt"
dest=${1:?usage: scripts/fetch-flashinfer.sh DEST}
pin=$(grep -E '^flashinfer-python==' "$requirements" | cut -d' ' -f1)
[ -n "$pin" ] || { echo "fetch-flashinfer: no flashinfer-python pin in $requirements" >&2; exit 1; }
if [ "$(cat "$dest/.complete" 2>/dev/null)" = "$pin" ]; then
  exit 0
fi

mkdir -p "$dest"
exec 9>"$dest/.lock"  # one fetch at a time (two configures may start together)
flock 9
[ "$(cat "$dest/.complete" 2>/dev/null)" = "$pin" ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
pip=("$python" -m pip)
if ! "$python" -m pip --version >/dev/null 2>&1; then
  "$python" -m venv "$work/venv" >/dev/null
  pip=("$work/venv/bin/pip")
fi
if ! "${pip[@]}" download -q --disable-pip-version-check --no-input --no-deps \
     --require-hashes -r "$requirements" -d "$work/wheel" > "$work/pip.log" 2>&1; then
  echo "fetch-flashinfer: pip could not download $pin: $(tail -n 3 "$work/pip.log")" >&2
  exit 1
fi
wheel=$(ls "$work"/wheel/*.whl)

# Only the header trees (about 60 MB of the wheel's 100): zipfile, as unzip may not be installed.
"$python" - "$wheel" "$work/out" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
keep = {
    "flashinfer/data/include/": "include/",
    "flashinfer/data/cccl/": "cccl/",
    "flashinfer/data/cutlass/include/": "cutlass/include/",
    "flashinfer/data/cutlass/tools/util/include/": "cutlass/tools/util/include/",
}
count = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        for prefix, target in keep.items():
            if info.filename.startswith(prefix) and not info.is_dir():
                info.filename = target + info.filename[len(prefix):]
                z.extract(info, out)
                count += 1
                break
    licenses = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")
                or n.endswith(".dist-info/LICENSE")]
    if licenses:
        with open(f"{out}/LICENSE", "wb") as f:
            f.write(z.read(licenses[0]))
if count == 0:
    sys.exit(f"fetch-flashinfer: {wheel} holds no headers under flashinfer/data/")
EOF
[ -f "$work/out/include/flashinfer/attention/prefill.cuh" ] || {
  echo "fetch-flashinfer: $wheel has no flashinfer/attention/prefill.cuh" >&2; exit 1; }

rm -rf "$dest/include" "$dest/cccl" "$dest/cutlass" "$dest/LICENSE"
mv "$work/out"/* "$dest/"
echo "$pin" > "$dest/.complete"
