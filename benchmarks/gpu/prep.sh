#!/usr/bin/env bash
# On the CPU machine: prepares .devdeps/ (ignored by git) for the GPU run.
# The GPU machine has PyTorch (LibTorch), CUDA, CMake and ninja, but no fmt,
# Catch2 or nlohmann-json and no network; it receives the working tree as git
# sees it (tracked files, and untracked files git does not ignore) plus the
# folders sent along with it, 64 MiB in all.
#
#   bash benchmarks/gpu/prep.sh [--hf-wheels 3.11,3.12,3.13]
#
# 1. Debian's fmt, Catch2 and nlohmann-json packages, fetched with
#    `apt-get download` and unpacked with `dpkg -x` into .devdeps/usr
#    (benchmarks/gpu/build.sh configures against them; the reference decoder,
#    and so every model benchmark, needs nlohmann-json).
# 2. With --hf-wheels: wheels of transformers and what it imports (pinned to
#    the versions in this checkout's .venv; numpy and torch's own dependencies
#    left out) for the listed Python versions, into .devdeps/wheels, so
#    run_gpu.sh can install transformers when the GPU machine's Python lacks
#    it. About 28 MB plus 4 MB per extra Python version.
# 3. The manifest, .devdeps/manifest.json: the commit and a hash of each
#    stage's sources (benchmarks/gpu/stages.py), so run_gpu.sh skips every
#    stage a committed summary under benchmarks/results/<card>/ already holds.
# 4. Checks that the working tree plus .devdeps/ stays under 64 MiB, and
#    exits 1 when it does not.
#
# Then send .devdeps/ along with the working tree to the GPU machine and run
# `bash benchmarks/gpu/run_gpu.sh` there (benchmarks/gpu/README.md).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
pyvers=""
while (($#)); do
  case "$1" in
    --hf-wheels) pyvers=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prep.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
limit=$((64 * 1024 * 1024))

# .devdeps/ must be ignored: otherwise it would be sent twice (as untracked
# files and as the folder sent along) and could be committed.
git check-ignore -q .devdeps/ || { echo "prep.sh: .devdeps/ is not ignored by .gitignore" >&2; exit 1; }

# Debian packages: libfmt-dev's .so links to the runtime package it depends
# on (libfmt9 on bookworm), so that one comes too.
# libgloo-dev: the Gloo headers c10d's ProcessGroupGloo.hpp includes (statickv::tp;
# headers only, never linked: docs/tensor_parallel.md).
debs=(libfmt-dev catch2 nlohmann-json3-dev libgloo-dev)
fmt_runtime=$(apt-cache depends libfmt-dev 2>/dev/null | sed -n 's/^ *Depends: \(libfmt[0-9][0-9a-z]*\)$/\1/p' | head -1)
[ -n "$fmt_runtime" ] && debs+=("$fmt_runtime")
rm -rf .devdeps && mkdir -p .devdeps/debs
download() { (cd .devdeps/debs && apt-get download "${debs[@]}" >/dev/null 2>&1); }
if ! download; then
  echo "prep.sh: apt-get download failed; refreshing the package lists (apt-get update)"
  if ! { apt-get update >/dev/null && download; }; then
    echo "prep.sh: could not download ${debs[*]} from the Debian archive" >&2
    exit 1
  fi
fi
for f in .devdeps/debs/*.deb; do dpkg -x "$f" .devdeps; done
echo "unpacked: $(cd .devdeps/debs && printf '%s ' ./*.deb | sed 's|\./||g')"
rm -rf .devdeps/debs .devdeps/usr/share/doc .devdeps/usr/share/man
for need in usr/include/fmt/format.h usr/include/catch2/catch.hpp usr/include/nlohmann/json.hpp; do
  [ -e ".devdeps/$need" ] || { echo "prep.sh: .devdeps/$need is missing after unpacking" >&2; exit 1; }
done

if [ -n "$pyvers" ]; then
  py="$root/.venv/bin/python"
  [ -x "$py" ] || { echo "prep.sh: --hf-wheels needs .venv (bash scripts/setup.sh)" >&2; exit 1; }
  # What `import transformers` and its generate() need, at this checkout's
  # versions; torch brings filelock, fsspec and typing_extensions itself.
  names=(transformers huggingface_hub tokenizers safetensors regex pyyaml tqdm packaging typer
         click rich shellingham markdown_it_py mdurl pygments annotated_doc hf_xet httpx2
         httpcore2 h11 anyio idna truststore pydantic pydantic_core annotated_types
         typing_inspection)
  pins=()
  for n in "${names[@]}"; do
    v=$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$n" 2>/dev/null) ||
      { echo "prep.sh: $n is not installed in .venv; skipped"; continue; }
    pins+=("$n==$v")
  done
  mkdir -p .devdeps/wheels
  IFS=, read -r -a versions <<< "$pyvers"
  for v in "${versions[@]}"; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$v" \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .devdeps/wheels "${pins[@]}" ||
      echo "prep.sh: no wheels for Python $v (transformers 5.24 needs >= 3.11); skipped"
  done
  echo "wheels: $(ls .devdeps/wheels | wc -l) files, $(du -sh .devdeps/wheels | cut -f1)"
fi

python3 benchmarks/gpu/stages.py manifest .devdeps/manifest.json

# What travels: every file git lists as tracked or as untracked and not
# ignored (apparent sizes; files deleted from the tree are not sent), plus
# .devdeps/.
tree=$(git ls-files -z --cached --others --exclude-standard |
       while IFS= read -r -d '' f; do [ -f "$f" ] && [ ! -L "$f" ] && printf '%s\0' "$f"; done |
       du -cb --files0-from=- | tail -n 1 | cut -f1)
deps=$(du -sb .devdeps | cut -f1)
total=$((tree + deps))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "to send: working tree $(mib "$tree") + .devdeps $(mib "$deps") = $(mib "$total") (limit 64 MiB)"
if ((total > limit)); then
  echo "prep.sh: $(mib "$total") is over the GPU machine's 64 MiB limit; drop --hf-wheels versions," \
       "or delete or ignore untracked files (git status --short lists them)" >&2
  exit 1
fi
