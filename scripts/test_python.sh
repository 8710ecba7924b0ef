#!/usr/bin/env bash
# The Python package's tests (tests/python, pytest) against another
# transformers, with the default torch (docs/python.md, "Versions"):
#   STATICKV_TRANSFORMERS=5.25.0 bash scripts/test_python.sh [pytest arguments]
# Without STATICKV_TRANSFORMERS, against the pinned one in .venv.
#
# scripts/setup.sh prepares .venv (torch, the statickv package; .venv-torchT
# with STATICKV_TORCH=T); transformers V goes into .venv-transformersV/ (or
# .venv-torchT-transformersV/) above it, whose .pth file puts the base's
# packages on its path. transformers from 5.25 requires `kernels` (Hugging
# Face's hub kernels) at a version PyPI may not have; it is left out, since
# the project loads every model with use_kernels=False, and every other
# requirement is installed.
set -euo pipefail
STATICKV_SETUP_PYTHON_ONLY=1 source "$(dirname "$0")/setup.sh"
python=$VENV/bin/python
if [ -n "${STATICKV_TRANSFORMERS:-}" ] && [ "$STATICKV_TRANSFORMERS" != "$TRANSFORMERS_VERSION" ]; then
  layer="$STATICKV_ROOT/.venv$TREE_SUFFIX-transformers$STATICKV_TRANSFORMERS"  # over $VENV
  python=$layer/bin/python
  stamp="$layer/.statickv-requirements-installed"
  if [ ! -x "$python" ]; then
    echo "== creating $layer over $VENV"
    python3 -m venv "$layer"
    base_site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    "$python" -c 'import sys, sysconfig, pathlib; pathlib.Path(sysconfig.get_path("purelib"), "statickv-base.pth").write_text(sys.argv[1] + "\n")' "$base_site"
  fi
  if [ ! -f "$stamp" ]; then
    echo "== pip install transformers==$STATICKV_TRANSFORMERS into $layer (its requirements but kernels)"
    "$python" -m pip install -q --disable-pip-version-check --no-deps "transformers==$STATICKV_TRANSFORMERS"
    mapfile -t requirements < <("$python" -c '
import importlib.metadata as m
for r in m.requires("transformers") or []:
    if "extra ==" not in r and not r.replace("_", "-").startswith("kernels"):
        print(r.split(";")[0].strip())')
    "$python" -m pip install -q --disable-pip-version-check "${requirements[@]}"
    touch "$stamp"
  fi
fi
echo "== pytest tests/python ($("$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
cd "$STATICKV_ROOT/tests/python"
HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$python" -m pytest -q -p no:cacheprovider . "$@"
