#!/usr/bin/env bash
# Fetch, here where pip reaches the registry, the wheels the GPU machine lacks: it has no
# registry, and its Python (3.12, /opt/torch/.venv) holds torch, numpy, scipy, pandas,
# matplotlib, psutil, rich, pyyaml, jax and nvidia-ml-py but not pydantic, plotly or keras.
# Versions come from requirements.lock, the one place they are pinned. campaign.sh installs
# them there into a folder of its own (--target), beside the image's packages.
#
#   bash benchmarks/gpu/wheels.sh            # into .whl/ (ignored by git; carry it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$repo/.whl}
python=$repo/.venv/bin/python
[ -x "$python" ] || python=python3
# pydantic and its own needs; plotly (its narwhals is in the image); keras for the jax rung.
names=(pydantic pydantic-core annotated-types typing-inspection plotly keras namex optree)
specs=()
for name in "${names[@]}"; do
  version=$(sed -n "s/^${name}==\([^ ]*\) .*/\1/p" "$repo/requirements.lock" | head -1)
  if [ -z "$version" ]; then
    echo "wheels.sh: $name is not pinned in requirements.lock" >&2
    exit 2
  fi
  specs+=("$name==$version")
done
mkdir -p "$dest"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
  manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d "$dest" "${specs[@]}"
ls -1 "$dest"
du -sh "$dest"
