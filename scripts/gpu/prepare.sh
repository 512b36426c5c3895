#!/bin/bash
# What a device call carries (scripts/gpu/common.sh), made here before the call: `.whl/`,
# the Python 3.12 wheels of the packages the H200's image lacks, at the versions the
# results/gpu runs used, and `.gpu/`, the Llama-3 tokenizer and the 64 MaskBench schemas
# that `--data $MASKLAB_SHARED/datasets/maskbench --shuffle 0 --limit 64` picks. Both are
# ignored (.git/info/exclude) and carried by name: run(..., carry=[".whl", ".gpu"]).
# Needs the package registry and MASKLAB_SHARED (default ../shared); about a minute.
set -eu
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
SHARED=${MASKLAB_SHARED:-../shared}
PY=${PY:-.venv/bin/python}
mkdir -p .git/info
for d in /.whl/ /.gpu/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >>.git/info/exclude; done
rm -rf .whl .gpu
mkdir -p .whl .gpu/llama-3 .gpu/maskbench64
PLATFORMS=""
for p in manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux2014 manylinux1; do
  PLATFORMS="$PLATFORMS --platform ${p}_x86_64"
done
# shellcheck disable=SC2086
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d .whl \
  llguidance==1.9.1 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 outlines_core==0.2.14 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types typing-inspection \
  interegular==0.3.3 lark==1.3.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py
cp "$SHARED/tokenizers/llama-3/tokenizer.model" .gpu/llama-3/
MASKLAB_SHARED=$SHARED $PY - <<'PYEOF'
import os, shutil
from toolkit.data.datasets import select_items
items = select_items(os.path.join(os.environ["MASKLAB_SHARED"], "datasets", "maskbench"), 64, 0, "llama3")
for item in items:
    shutil.copy(item.path, os.path.join(".gpu/maskbench64", item.path.name))
print(f"{len(items)} schemas in .gpu/maskbench64")
PYEOF
du -sh .whl .gpu
